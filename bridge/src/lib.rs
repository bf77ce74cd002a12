//! The `bridge` plugin: connects containers to a Linux bridge on the node
//! through veth pairs, with IPAM, gateway, hairpin, isolation, VLANs,
//! masquerade (`ipMasq`) and the MAC spoof check (`macspoofchk`).
//! Behaviour follows the Go reference (containernetworking/plugins
//! `plugins/main/bridge`); the deliberate differences are in the README.

pub mod add;
pub mod check;
pub mod config;
pub mod del;
pub mod firewall;
pub mod node;
pub mod veth;

use libcni::attach;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::{Error, ErrorList};

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI bridge plugin v…`).
pub const NAME: &str = "bridge";

pub struct BridgePlugin;

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

    /// GC: of the attachments not in `cni.dev/valid-attachments`, the
    /// node-side veths (found by their owner alias), the masquerade and
    /// the spoof checks; then IPAM's GC with the same stdin. Without a
    /// list nothing of the plugin's own is collected. Best effort, the
    /// errors reported together.
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        let keys = firewall::Keys::lenient(args);
        let mut errors = ErrorList::new();
        if let Some(Some(valid)) = errors.record(args.gc_valid_attachments("bridge")) {
            errors.record(attach::veth::gc_host_veths(&args.conf.name, &valid));
            errors.extend(firewall::gc(args, &keys, &valid));
        }
        attach::gc(args, errors)
    }

    /// The bridge can always serve ADD; STATUS is IPAM's answer.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::status(args)
    }
}
