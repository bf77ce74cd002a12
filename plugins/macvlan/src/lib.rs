//! The `macvlan` plugin: gives the container a macvlan on a master
//! interface of the node (or of the container, with `linkInContainer`),
//! created directly in the container's namespace, with IPAM. Behaviour
//! follows the Go reference (containernetworking/plugins
//! `plugins/main/macvlan`); the deliberate differences are in the README.

pub mod add;
pub mod check;
pub mod config;

use libcni::attach::master::{StackedLinkPlugin, StatusOf};
use libcni::skel::{AddFn, CheckFn};

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI macvlan plugin v…`).
pub const NAME: &str = "macvlan";

pub struct Macvlan;

impl StackedLinkPlugin for Macvlan {
    const ADD: AddFn = add::add;
    const CHECK: CheckFn = check::check;
    /// The master is there (in the plugin's namespace; with
    /// `linkInContainer` there is no container to look in).
    const STATUS: StatusOf = StatusOf {
        kind: None,
        master_may_be_chained: false,
    };
}
