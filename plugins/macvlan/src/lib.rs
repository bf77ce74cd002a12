//! The `macvlan` plugin: gives the container a macvlan on a master
//! interface of the node (or of the container, with `linkInContainer`),
//! created directly in the container's namespace, with IPAM. Behaviour
//! follows the Go reference (containernetworking/plugins
//! `plugins/main/macvlan`); the deliberate differences are in the README.

pub mod add;
pub mod check;
pub mod config;

use libcni::attach::{master, ContainerLinkPlugin};
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use libcni::Error;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI macvlan plugin v…`).
pub const NAME: &str = "macvlan";

pub struct Macvlan;

impl ContainerLinkPlugin for Macvlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// The master is there (in the plugin's namespace; with
    /// `linkInContainer` there is no container to look in).
    fn status_before_ipam(&self, args: &CmdArgs) -> Result<(), Error> {
        let of = master::StatusOf {
            kind: None,
            master_may_be_chained: false,
        };
        master::check_status(args, &of)
    }
}
