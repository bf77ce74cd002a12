//! DEL, best effort: always calls IPAM DEL, then deletes the macvlan in the
//! container. IPAM goes first, as in the reference, because an IPAM plugin
//! may need the interface: dhcp's DHCPRELEASE goes out on it. What is
//! already gone (the namespace, the link, the lease) is success; a step
//! that fails does not stop the next, and the failures are reported
//! together.
//!
//! DEL reads only `ipam.type` from the config: a config ADD refused (an
//! unknown mode, a master that is gone, ...) must still be deletable, since
//! runtimes DEL every ADD, a failed one too.

use std::path::Path;

use libcni::ipam;
use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::{Error, ErrorList};

pub fn del(args: &CmdArgs) -> Result<(), Error> {
    let mut errors = ErrorList::new();
    if let Some(plugin) = args.teardown_ipam_type() {
        errors.record(ipam::exec_del(&plugin, &args.stdin));
    }
    errors.record(delete_container_link(args));
    errors.finish()
}

/// Deletes the macvlan, if the namespace and the link are still there.
/// Never a link of the plugin's own namespace.
fn delete_container_link(args: &CmdArgs) -> Result<(), Error> {
    match NetNs::open_container_if_present(Path::new(&args.netns))? {
        Some(ns) => Netlink::open_in(&ns)?.delete_link_if_present(&args.ifname),
        None => Ok(()), // no namespace: its links are gone with it
    }
}
