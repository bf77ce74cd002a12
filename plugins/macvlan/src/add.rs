//! ADD over the shared flow (`libcni::attach`): the macvlan, created
//! directly in the container's namespace under `CNI_IFNAME`
//! (`IFLA_NET_NS_FD`: no temporary name, no move), IPAM, the container's
//! addresses and routes. A failure after the link exists deletes it again,
//! and a failure after IPAM was called releases the address: a failed ADD
//! leaves nothing behind.

use libcni::attach::{self, Add};
use libcni::fault;
use libcni::ipam::IfaceOptions;
use libcni::netlink::link::MacvlanSpec;
use libcni::skel::CmdArgs;
use libcni::sysctl::{self, Key};
use libcni::types::CniResult;
use libcni::Error;

use crate::config::Conf;
use crate::master;

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    attach::add(args, "macvlan", conf.ipam.as_deref(), |a| steps(a, &conf))
}

fn steps(a: &mut Add<'_>, conf: &Conf) -> Result<CniResult, Error> {
    let args = a.args();
    // The master lives in the plugin's namespace, or in the container's.
    let master = if conf.link_in_container {
        master::find_for_add(a.container(), conf)?
    } else {
        master::find_for_add(a.host()?, conf)?
    };
    let link = a.create_link(|a| {
        if conf.link_in_container {
            a.container()
                .add_macvlan(&spec(args, conf, master.index, None))
        } else {
            let (host, _, ns) = a.sockets()?;
            host.add_macvlan(&spec(args, conf, master.index, Some(ns)))
        }
    })?;
    fault::point("macvlan/link");

    let mut result = CniResult {
        interfaces: vec![attach::interface_of(&link, &args.netns)],
        ..CniResult::default()
    };

    if let Some(plugin) = &conf.ipam {
        let allocated = a.ipam_add(plugin, 0)?;
        fault::point("macvlan/ipam");
        result.ips = allocated.ips;
        result.routes = allocated.routes;
        result.dns = allocated.dns;
        // Neighbours learn the new MAC at once (the kernel announces on up
        // and on address changes); missing knobs (no IPv6) do not matter.
        a.ns().run(|| {
            for key in [
                Key::ipv4_conf(&args.ifname, "arp_notify"),
                Key::ipv6_conf(&args.ifname, "ndisc_notify"),
            ]
            .into_iter()
            .flatten()
            {
                let _ = sysctl::write_here(&key, "1");
            }
        })?;
        a.configure(&result, IfaceOptions::default())?;
        fault::point("macvlan/configure");
    } else {
        // Layer 2 only: the link just comes up.
        a.container().set_link_up(link.index)?;
        fault::point("macvlan/up");
    }

    attach::apply_dns(&mut result, conf.dns.as_ref());
    Ok(result)
}

/// The macvlan `CNI_IFNAME` on master `master_index` (in the namespace of
/// the socket that sends it), created inside `netns` when given.
fn spec<'a>(
    args: &'a CmdArgs,
    conf: &Conf,
    master_index: u32,
    netns: Option<&'a libcni::netns::NetNs>,
) -> MacvlanSpec<'a> {
    MacvlanSpec {
        name: &args.ifname,
        master_index,
        mode: conf.mode,
        mtu: conf.mtu,
        mac: conf.mac,
        bc_queue_len: conf.bc_queue_len,
        netns,
    }
}
