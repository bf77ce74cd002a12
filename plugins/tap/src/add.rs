//! ADD over the shared flow (`libcni::attach`): the tap, created directly
//! in the container's namespace under `CNI_IFNAME` and whole before it is
//! made persistent (`libcni::tuntap`), made a port of `bridge` (a bridge in
//! the container's namespace) when configured, then IPAM and the
//! container's addresses and routes, or just the link up for layer 2. A
//! failure after the tap exists deletes it again, and a failure after IPAM
//! was called releases the address: a failed ADD leaves nothing behind.

use libcni::attach::{self, Add};
use libcni::fault;
use libcni::ipam::IfaceOptions;
use libcni::netlink::{Link, Netlink};
use libcni::skel::CmdArgs;
use libcni::tuntap::{self, TapSpec};
use libcni::types::CniResult;
use libcni::Error;

use crate::config::Conf;

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    attach::add(args, "tap", conf.ipam.as_deref(), |a| steps(a, &conf))
}

/// The bridge `name` in the container's namespace (`nl`): missing, or a
/// link of another kind, is code 7 naming `bridge`.
pub fn find_bridge(nl: &mut Netlink, name: &str) -> Result<Link, Error> {
    let l = nl.link_by_name(name)?.ok_or_else(|| {
        Error::config(
            "bridge",
            format!("{name:?} not found in the container's network namespace"),
        )
    })?;
    if l.kind.as_deref() != Some("bridge") {
        return Err(Error::config(
            "bridge",
            format!(
                "{name:?} in the container's network namespace is not a bridge (it is a {} link)",
                l.kind.as_deref().unwrap_or("plain")
            ),
        ));
    }
    Ok(l)
}

fn steps(a: &mut Add<'_>, conf: &Conf) -> Result<CniResult, Error> {
    let args = a.args();
    let bridge = match &conf.bridge {
        Some(name) => Some(find_bridge(a.container(), name)?),
        None => None,
    };
    let spec = TapSpec {
        name: &args.ifname,
        mtu: conf.mtu,
        mac: conf.mac,
        multi_queue: conf.multi_queue,
        owner: conf.owner,
        group: conf.group,
        alias: None,
    };
    let tap = a.create_link(|a| {
        let (ns, nl) = a.container_parts();
        tuntap::create_tap(ns, nl, &spec).map(drop)
    })?;
    fault::point("tap/create");
    if let Some(br) = &bridge {
        a.container().set_master(tap.index, br.index)?;
        fault::point("tap/bridge");
    }

    let mut result = CniResult {
        interfaces: vec![attach::interface_of(&tap, &args.netns)],
        ..CniResult::default()
    };
    if let Some(plugin) = &conf.ipam {
        let allocated = a.ipam_add(plugin)?;
        fault::point("tap/ipam");
        result = allocated.on_interfaces(std::mem::take(&mut result.interfaces));
        // No wait for IPv6 addresses: a tap has no carrier until a process
        // attaches, and with accept_dad=0 they are usable without one.
        a.configure(&result, IfaceOptions::default())?;
        fault::point("tap/configure");
    } else {
        // Layer 2 only: the link just comes up.
        a.container().set_link_up(tap.index)?;
        fault::point("tap/up");
    }
    attach::apply_dns(&mut result, conf.dns.as_ref());
    Ok(result)
}
