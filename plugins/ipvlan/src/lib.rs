//! The `ipvlan` plugin: gives the container an ipvlan of a master
//! interface of the node (or of the container, with `linkInContainer`):
//! the container shares the master's MAC, for L3 networks (cloud VMs) that
//! allow one MAC per port. Modes `l2`, `l3` and `l3s`. Created directly in
//! the container's namespace, with IPAM, or chained after a plugin whose
//! `prevResult` names the master and holds the addresses. Behaviour
//! follows the Go reference (containernetworking/plugins
//! `plugins/main/ipvlan`, v1.9); the deliberate differences are in the
//! README.
//!
//! - `config`: the keys, validated before anything is touched;
//! - `add`, `check`: over the shared flow (`libcni::attach`).

pub mod add;
pub mod check;
pub mod config;

use libcni::attach;
use libcni::netlink::link_kinds::IPVLAN_SUPPORT;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::{Error, ErrorList};
use serde::Deserialize;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI ipvlan plugin v…`).
pub const NAME: &str = "ipvlan";

pub struct Ipvlan;

/// What STATUS reads: only what it needs.
#[derive(Deserialize, Default)]
struct StatusConf {
    #[serde(default)]
    master: Option<String>,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: bool,
}

impl Plugin for Ipvlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    /// Best effort: the ipvlan in the container (if the namespace and the
    /// link are still there) and, with `ipam.type`, IPAM DEL (chained, the
    /// addresses are the earlier plugin's to release). DEL reads only
    /// `ipam.type`.
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::del(args, ErrorList::new)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// The ipvlan lives in the container and goes with it: GC goes to IPAM
    /// (when there is one), with the same stdin.
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::gc(args, ErrorList::new())
    }

    /// ADD can be served when the kernel has ipvlan, the master (or,
    /// without one, a default route) is in the plugin's namespace, and
    /// IPAM, if any, says it can. A chained ipvlan (neither `master` nor
    /// `ipam`) takes its master from `prevResult`, which STATUS does not
    /// have: its master is not checked.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::kind_status("ipvlan", &IPVLAN_SUPPORT)?;
        let s: StatusConf = args.config()?;
        let name = s.master.filter(|m| !m.is_empty());
        let chained = name.is_none() && args.conf.ipam_type()?.is_none();
        if !chained {
            attach::master::status(name.as_deref(), s.link_in_container)?;
        }
        attach::status(args)
    }
}
