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

use libcni::attach::master::{StackedLinkPlugin, StatusOf};
use libcni::netlink::link_kinds::IPVLAN_SUPPORT;
use libcni::skel::{AddFn, CheckFn};

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI ipvlan plugin v…`).
pub const NAME: &str = "ipvlan";

pub struct Ipvlan;

impl StackedLinkPlugin for Ipvlan {
    const ADD: AddFn = add::add;
    const CHECK: CheckFn = check::check;
    /// The kernel has ipvlan, and the master (or, without one, a default
    /// route) is in the plugin's namespace. A chained ipvlan (neither
    /// `master` nor `ipam`) takes its master from `prevResult`, which
    /// STATUS does not have: its master is not checked.
    const STATUS: StatusOf = StatusOf {
        kind: Some(&IPVLAN_SUPPORT),
        master_may_be_chained: true,
    };
}
