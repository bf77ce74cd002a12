//! ADD over the shared flow (`libcni::attach`): the macvlan, created
//! directly in the container's namespace under `CNI_IFNAME`
//! (`IFLA_NET_NS_FD`: no move; a temporary name only on kernels that
//! refuse a name the node has, `Add::create_link_named`), IPAM, the container's
//! addresses and routes. A failure after the link exists deletes it again,
//! and a failure after IPAM was called releases the address: a failed ADD
//! leaves nothing behind.

use libcni::attach::{self, Add};
use libcni::fault;
use libcni::ipam::IfaceOptions;
use libcni::netlink::macvlan::MacvlanSpec;
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use libcni::Error;

use crate::config::Conf;

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    attach::add(args, "macvlan", conf.link.ipam.as_deref(), |a| {
        steps(a, &conf)
    })
}

fn steps(a: &mut Add<'_>, conf: &Conf) -> Result<CniResult, Error> {
    let args = a.args();
    // The master lives in the plugin's namespace, or in the container's.
    let master = a.master(
        conf.link.master.as_deref(),
        conf.link.link_in_container,
        conf.link.mtu,
    )?;
    let link = a.create_link_named(|a, name| {
        if conf.link.link_in_container {
            a.container()
                .add_macvlan(&spec(name, conf, master.index, None))
        } else {
            let (host, _, ns) = a.sockets()?;
            host.add_macvlan(&spec(name, conf, master.index, Some(ns)))
        }
    })?;
    fault::point("macvlan/link");

    let mut result = if let Some(plugin) = &conf.link.ipam {
        let allocated = a.ipam_add(plugin)?;
        fault::point("macvlan/ipam");
        a.notify_neighbours()?;
        let result = a.configure_single(&link, allocated, IfaceOptions::default())?;
        fault::point("macvlan/configure");
        result
    } else {
        // Layer 2 only: the link just comes up.
        a.container().set_link_up(link.index)?;
        fault::point("macvlan/up");
        CniResult {
            interfaces: vec![attach::interface_of(&link, &args.netns)],
            ..CniResult::default()
        }
    };

    attach::apply_dns(&mut result, conf.link.dns.as_ref());
    Ok(result)
}

/// The macvlan `name` on master `master_index` (in the namespace of the
/// socket that sends it), created inside `netns` when given.
fn spec<'a>(
    name: &'a str,
    conf: &Conf,
    master_index: u32,
    netns: Option<&'a libcni::netns::NetNs>,
) -> MacvlanSpec<'a> {
    MacvlanSpec {
        name,
        master_index,
        mode: conf.mode,
        mtu: conf.link.mtu,
        mac: conf.mac,
        bc_queue_len: conf.bc_queue_len,
        netns,
    }
}
