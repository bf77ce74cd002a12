//! The `tap` plugin: a tap device in the container (for a VM the container
//! runs: kubevirt, Kata-style setups), created there directly under
//! `CNI_IFNAME`, optionally a port of a bridge in the container, with IPAM.
//! Behaviour follows the Go reference (containernetworking/plugins
//! `plugins/main/tap`, v1.9); the deliberate differences are in the README.

pub mod add;
pub mod check;
pub mod config;

use libcni::attach;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::{Error, ErrorList};

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI tap plugin v…`).
pub const NAME: &str = "tap";

pub struct Tap;

impl Plugin for Tap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    /// Best effort: the tap in the container (if the namespace and the
    /// tap are still there) and IPAM DEL. DEL reads only `ipam.type`.
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::del(args, ErrorList::new)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// The tap keeps no state on the node: GC goes to IPAM, with the same
    /// stdin (and so the same `cni.dev/valid-attachments`).
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::gc(args, ErrorList::new())
    }

    /// The tap can always serve ADD; STATUS is IPAM's answer.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::status(args)
    }
}
