//! The `ptp` plugin: a veth pair with no bridge. The container end gets
//! the IPAM addresses and reaches everything through the gateway, which
//! the node end carries as a /32 or /128 (every ptp veth of the node
//! shares it); the node routes to each container by a host route. What
//! kind's kindnet and many GKE-style templates run (`ptp` + `host-local` +
//! `portmap`). Behaviour follows the Go reference
//! (containernetworking/plugins `plugins/main/ptp`, v1.9); the deliberate
//! differences are in the README.

pub mod add;
pub mod check;
pub mod config;

use libcni::attach;
use libcni::netfilter::masq;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::{Error, ErrorList};

use crate::config::{Conf, MasqKeys};

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI ptp plugin v…`).
pub const NAME: &str = "ptp";

pub struct Ptp;

impl Plugin for Ptp {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    /// Best effort: the container end of the pair (the node end, its
    /// addresses and routes go with it; without a namespace, the node end
    /// its alias names), IPAM DEL, and with `ipMasq` the
    /// masquerade, found by network name and container ID alone so it goes
    /// even when the namespace is gone. DEL reads only `ipam.type` and,
    /// leniently, the masquerade keys.
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        attach::del_with(
            args,
            || attach::veth::delete_pair(args),
            || {
                let keys = MasqKeys::lenient(args);
                let mut errors = ErrorList::new();
                if keys.ip_masq {
                    errors.record(masq::del(
                        keys.masq_backend(),
                        &config::owner(args),
                        &args.ifname,
                    ));
                }
                errors
            },
        )
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// Of the attachments not in `cni.dev/valid-attachments`, the
    /// node-side veths (found by their owner alias) and, with `ipMasq`, the
    /// masquerade; then IPAM's GC with the same stdin. Without a list
    /// nothing of the plugin's own is collected. Best effort, the errors
    /// reported together.
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        let keys = MasqKeys::lenient(args);
        let mut errors = ErrorList::new();
        if let Some(Some(valid)) = errors.record(args.gc_valid_attachments("ptp")) {
            errors.record(attach::veth::gc_host_veths(&args.conf.name, &valid));
            if keys.ip_masq {
                errors.record(masq::gc(keys.masq_backend(), &args.conf.name, &valid));
            }
        }
        attach::gc(args, errors)
    }

    /// A config ADD would refuse is refused (code 7 naming the key); then
    /// IPAM's answer.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        Conf::parse(args)?;
        attach::status(args)
    }
}
