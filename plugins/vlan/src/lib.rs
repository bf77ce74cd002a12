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

use libcni::attach::master::{StackedLinkPlugin, StatusOf};
use libcni::netlink::link_kinds::VLAN_SUPPORT;
use libcni::skel::{AddFn, CheckFn};

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI vlan plugin v…`).
pub const NAME: &str = "vlan";

pub struct Vlan;

impl StackedLinkPlugin for Vlan {
    const ADD: AddFn = add::add;
    const CHECK: CheckFn = check::check;
    /// The kernel has 802.1Q VLANs, and the master is there (in the
    /// plugin's namespace; with `linkInContainer` there is no container to
    /// look in).
    const STATUS: StatusOf = StatusOf {
        kind: Some(&VLAN_SUPPORT),
        master_may_be_chained: false,
    };
}
