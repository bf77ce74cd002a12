//! The `vlan` plugin: gives the container an 802.1Q VLAN sub-interface
//! (`vlanId`) of a master interface of the node (or of the container, with
//! `linkInContainer`), created directly in the container's namespace, with
//! IPAM. Behaviour follows the Go reference (containernetworking/plugins
//! `plugins/main/vlan`, v1.9); the deliberate differences are in the README.
//!
//! - `config`: the keys, validated before anything is touched;
//! - `add`, `check`: over the shared flow (`libcni::attach`).

pub mod add;
pub mod check;
pub mod config;

use libcni::attach;
use libcni::netlink::link_kinds::VLAN_SUPPORT;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::{Error, ErrorList};
use serde::Deserialize;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI vlan plugin v…`).
pub const NAME: &str = "vlan";

pub struct Vlan;

/// What STATUS reads: only what it needs, so a config that ADD would refuse
/// for another key still gets an answer about the master.
#[derive(Deserialize, Default)]
struct StatusConf {
    #[serde(default)]
    master: Option<String>,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: bool,
}

impl Plugin for Vlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    /// Best effort: the VLAN link in the container (if the namespace and
    /// the link are still there) and IPAM DEL. DEL reads only `ipam.type`,
    /// so a config ADD refused (a master that is gone, a bad `vlanId`) is
    /// still deletable.
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::del(args, ErrorList::new)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// The VLAN link lives in the container and goes with it: GC goes to
    /// IPAM, with the same stdin (and so the same
    /// `cni.dev/valid-attachments`).
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::gc(args, ErrorList::new())
    }

    /// ADD can be served when the kernel has 802.1Q VLANs, the master is
    /// there (in the plugin's namespace; with `linkInContainer` there is no
    /// container to look in) and IPAM says it can.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::kind_status("vlan", &VLAN_SUPPORT)?;
        let s: StatusConf = args.config()?;
        let name = s.master.filter(|m| !m.is_empty());
        attach::master::status(name.as_deref(), s.link_in_container)?;
        attach::status(args)
    }
}
