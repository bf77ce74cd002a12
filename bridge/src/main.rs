//! The `bridge` plugin: connects containers to a Linux bridge on the node
//! through veth pairs, with IPAM, gateway, hairpin, isolation and VLANs.
//! Behaviour follows the Go reference (containernetworking/plugins
//! `plugins/main/bridge`); the deliberate differences are in the README.

mod add;
mod check;
mod config;
mod del;
mod node;
mod veth;

use libcni::ipam;
use libcni::skel::{plugin_main, CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::Error;

struct BridgePlugin;

/// `ipam.type` of the config, if it names a plugin.
fn ipam_type(args: &CmdArgs) -> Option<&str> {
    args.conf
        .ipam
        .as_ref()
        .map(|i| i.plugin_type.as_str())
        .filter(|t| !t.is_empty())
}

impl Plugin for BridgePlugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// The bridge itself keeps no state to collect: GC goes to IPAM, with
    /// the same stdin (and so the same `cni.dev/valid-attachments`).
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        match ipam_type(args) {
            Some(plugin) => ipam::exec_gc(plugin, &args.stdin),
            None => Ok(()),
        }
    }

    /// The bridge can always serve ADD; STATUS is IPAM's answer.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        match ipam_type(args) {
            Some(plugin) => ipam::exec_status(plugin, &args.stdin),
            None => Ok(()),
        }
    }
}

fn main() {
    plugin_main(BridgePlugin, "CNI bridge plugin (Rust CNI suite)")
}
