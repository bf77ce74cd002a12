//! The `macvlan` plugin: gives the container a macvlan on a master
//! interface of the node (or of the container, with `linkInContainer`),
//! created directly in the container's namespace, with IPAM. Behaviour
//! follows the Go reference (containernetworking/plugins
//! `plugins/main/macvlan`); the deliberate differences are in the README.

pub mod add;
pub mod check;
pub mod config;
pub mod del;

use libcni::attach;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::{Error, ErrorList};
use serde::Deserialize;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI macvlan plugin v…`).
pub const NAME: &str = "macvlan";

pub struct Macvlan;

/// What STATUS reads: only what it needs, so a config that ADD would refuse
/// for another key still gets an answer about the master.
#[derive(Deserialize, Default)]
struct StatusConf {
    #[serde(default)]
    master: Option<String>,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: bool,
}

impl Plugin for Macvlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// The macvlan keeps no state of its own: GC goes to IPAM, with the
    /// same stdin (and so the same `cni.dev/valid-attachments`).
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::gc(args, ErrorList::new())
    }

    /// ADD can be served when the master is there (checked in the plugin's
    /// namespace; with `linkInContainer` there is no container to look in)
    /// and IPAM says it can.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        let s: StatusConf = args.config()?;
        let name = s.master.filter(|m| !m.is_empty());
        attach::master::status(name.as_deref(), s.link_in_container)?;
        attach::status(args)
    }
}
