//! The `tap` plugin: a tap device in the container (for a VM the container
//! runs: kubevirt, Kata-style setups), created there directly under
//! `CNI_IFNAME`, optionally a port of a bridge in the container, with IPAM.
//! Behaviour follows the Go reference (containernetworking/plugins
//! `plugins/main/tap`, v1.9); the deliberate differences are in the README.

pub mod add;
pub mod check;
pub mod config;

use libcni::attach::ContainerLinkPlugin;
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use libcni::Error;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI tap plugin v…`).
pub const NAME: &str = "tap";

pub struct Tap;

impl ContainerLinkPlugin for Tap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// The tap can always serve ADD; STATUS is IPAM's answer.
    fn status_before_ipam(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }
}
