//! DEL, best effort: removes the container end of the veth pair (which
//! takes the host end with it), always calls IPAM DEL, then removes the
//! spoof check and the masquerade (with `macspoofchk` / `ipMasq`) by
//! container ID and network name alone, so they go even when the namespace
//! or the interface is already gone. What is already gone (the namespace,
//! the interface, the lease, the rules) is success; a step that fails does
//! not stop the next, and the failures are reported together. The bridge,
//! its address and the forwarding sysctls stay, as in the reference.
//!
//! DEL reads only `ipam.type` and, leniently, the firewall keys from the
//! config: a config ADD rejected (a contradiction, a bad value) must still
//! be deletable, since runtimes DEL every ADD, a failed one too.
//!
//! IPAM DEL runs before the link is deleted, as in the reference: an IPAM
//! plugin may need the interface (dhcp's DHCPRELEASE goes out on it).
//! Otherwise the steps touch nothing of each other's, and two of them
//! mostly wait on the kernel (deleting a veth blocks for its RCU grace
//! periods, some 15 ms; a nf_tables commit with deletions makes the
//! socket's close wait for one too), so IPAM and then the link go on their
//! own thread while the firewall runs: a DEL takes about the longest of
//! the two, not the sum of the three.

use std::path::Path;

use libcni::ipam;
use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::{Error, ErrorList};

use crate::firewall;

pub fn del(args: &CmdArgs) -> Result<(), Error> {
    let mut errors = ErrorList::new();
    std::thread::scope(|s| {
        let ipam_then_link = s.spawn(|| {
            let mut errors = ErrorList::new();
            if let Some(plugin) = args.teardown_ipam_type() {
                errors.record(ipam::exec_del(&plugin, &args.stdin));
            }
            errors.record(delete_container_link(args));
            errors
        });
        errors.extend(firewall::del(args, &firewall::Keys::lenient(args)));
        match ipam_then_link.join() {
            Ok(e) => errors.extend(e),
            Err(_) => errors.push(Error::Internal(
                "IPAM DEL or deleting the container link panicked".into(),
            )),
        }
    });
    errors.finish()
}

/// Deletes the container end of the veth pair, if the namespace and the
/// interface are still there. Never an interface of the node's own
/// namespace.
fn delete_container_link(args: &CmdArgs) -> Result<(), Error> {
    match NetNs::open_container_if_present(Path::new(&args.netns))? {
        Some(ns) => Netlink::open_in(&ns)?.delete_link_if_present(&args.ifname),
        None => Ok(()), // no namespace: its links are gone with it
    }
}
