//! ADD over the shared flow (`libcni::attach`): the master (named, or the
//! chained `prevResult`'s single interface, or the default route's) and
//! its MTU, the ipvlan created directly in the container's namespace under
//! `CNI_IFNAME` (a kernel without ipvlan refuses it before anything exists:
//! code 2 naming the module), the addresses (IPAM's, or chained the
//! `prevResult`'s), `arp_notify`/`ndisc_notify`, the container's addresses
//! and routes. A failure after the link exists deletes it again, and a
//! failure after IPAM was called releases the address.

use libcni::attach::{self, Add, KindLink, Lower};
use libcni::ipam::IfaceOptions;
use libcni::netlink::link_kinds::{IpvlanMode, NewKind, IPVLAN_SUPPORT};
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use libcni::Error;

use crate::config::{Addresses, Conf};

/// `ENOTSUPP` (kernel-internal, 524): what a kernel built without
/// `CONFIG_IPVLAN_L3S` answers to mode l3s.
const ENOTSUPP: i32 = 524;

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    let prev = args.prev_result()?;
    let addresses = conf.addresses(prev.as_ref())?;
    let master = conf.master_for_add(prev.as_ref())?;
    attach::add(args, "ipvlan", conf.link.ipam.as_deref(), |a| {
        steps(a, &conf, master.as_deref(), addresses)
    })
}

fn steps(
    a: &mut Add<'_>,
    conf: &Conf,
    master: Option<&str>,
    addresses: Addresses,
) -> Result<CniResult, Error> {
    let m = a.master(master, conf.link.link_in_container, conf.link.mtu)?;
    let kind = NewKind::Ipvlan {
        master_index: m.index,
        mode: conf.mode,
    };
    let link = a
        .create_kind(KindLink {
            kind,
            mtu: conf.link.mtu,
            lower: Lower::of_link_in_container(conf.link.link_in_container),
            support: &IPVLAN_SUPPORT,
        })
        .map_err(|e| {
            if conf.mode == IpvlanMode::L3s && libcni::netlink::errno(&e) == Some(ENOTSUPP) {
                Error::UnsupportedField {
                    key: "mode".into(),
                    value: "l3s: this kernel's ipvlan has no l3s mode (CONFIG_IPVLAN_L3S)".into(),
                }
            } else {
                e
            }
        })?;
    let allocated = match addresses {
        Addresses::Ipam(plugin) => a.ipam_add(&plugin)?,
        Addresses::Chained(prev) => prev,
    };
    a.notify_neighbours()?;
    let mut result = a.configure_single(&link, allocated, IfaceOptions::default())?;
    attach::apply_dns(&mut result, conf.link.dns.as_ref());
    Ok(result)
}
