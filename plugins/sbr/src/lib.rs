//! The `sbr` meta plugin (source-based routing): chained after the plugin
//! that gave `CNI_IFNAME` its addresses, it makes the replies of each
//! address leave through that interface. Each address gets a rule
//! `from <addr> lookup <table>` and a routing table of its own (the first
//! free one from 100 up), and the interface's routes are moved out of the
//! main table into those tables; or, with `table`, only the rules are
//! added, to that table. Behaviour follows the Go reference
//! (containernetworking/plugins `plugins/meta/sbr`); the deliberate
//! differences are in the README.
//!
//! - `config`: the keys, validated before anything is touched;
//! - `add`: the rules and tables, with a rollback of everything on failure;
//! - `del`: the rules and tables found again from the interface's
//!   addresses, without `prevResult` too;
//! - `check`: the rules and tables against `prevResult`.

pub mod add;
pub mod check;
pub mod config;
pub mod del;

use libcni::skel::{CmdArgs, Plugin};
use libcni::types::{CniResult, IpConfig};
use libcni::Error;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI sbr plugin v…`).
pub const NAME: &str = "sbr";

pub struct Sbr;

impl Plugin for Sbr {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// Everything sbr makes lives in the container's namespace and goes
    /// with it: nothing on the node to collect.
    fn gc(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }

    /// Ready whenever the config is usable.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        config::Conf::parse(args).map(|_| ())
    }
}

/// The addresses of `result` that are `ifname`'s, as Go's sbr picks them:
/// those without an interface index, and those whose index names
/// `ifname` (or no interface at all).
pub fn interface_addresses<'a>(result: &'a CniResult, ifname: &str) -> Vec<&'a IpConfig> {
    result
        .ips
        .iter()
        .filter(|ip| match ip.interface {
            None => true,
            Some(i) => result.interfaces.get(i).is_none_or(|x| x.name == ifname),
        })
        .collect()
}

/// The lock on the container's namespace file (Go's sbr takes the same),
/// now shared with the vrf plugin.
pub use libcni::netns::NetnsLock;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_interface_addresses_are_picked_as_go_picks_them() {
        let (r, _) = CniResult::from_json(
            &json!({"cniVersion": "1.1.0",
            "interfaces": [{"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/x"}],
            "ips": [
                {"address": "10.1.0.5/24", "interface": 2},
                {"address": "10.2.0.5/24", "interface": 0},
                {"address": "10.3.0.5/24"},
                {"address": "10.4.0.5/24", "interface": 9}
            ]}),
            libcni::Version::V1_1_0,
        )
        .unwrap();
        let got: Vec<String> = interface_addresses(&r, "eth0")
            .iter()
            .map(|ip| ip.address.to_string())
            .collect();
        assert_eq!(got, ["10.1.0.5/24", "10.3.0.5/24", "10.4.0.5/24"]);
    }
}
