//! ADD over the shared flow (`libcni::attach`): the master and its MTU,
//! the VLAN sub-interface created directly in the container's namespace
//! under `CNI_IFNAME` (a kernel without 802.1Q VLANs refuses it before
//! anything exists: code 2 naming the module), IPAM, the container's
//! addresses and routes; without IPAM (layer 2 only, as macvlan) the link
//! just comes up. A failure after the link exists deletes it again, and a
//! failure after IPAM was called releases the address.

use libcni::attach::{self, Add, KindLink, Lower};
use libcni::ipam::IfaceOptions;
use libcni::netlink::link_kinds::{NewKind, VLAN_SUPPORT};
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use libcni::Error;

use crate::config::Conf;

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    attach::add(args, "vlan", conf.link.ipam.as_deref(), |a| steps(a, &conf))
}

fn steps(a: &mut Add<'_>, conf: &Conf) -> Result<CniResult, Error> {
    let link = &conf.link;
    let master = a.master(link.master.as_deref(), link.link_in_container, link.mtu)?;
    let kind = NewKind::Vlan {
        master_index: master.index,
        id: conf.vlan_id,
    };
    let link = a.create_kind(KindLink {
        kind,
        mtu: link.mtu,
        lower: Lower::of_link_in_container(link.link_in_container),
        support: &VLAN_SUPPORT,
    })?;
    let mut result = match &conf.link.ipam {
        Some(plugin) => {
            let allocated = a.ipam_add(plugin)?;
            a.configure_single(&link, allocated, IfaceOptions::default())?
        }
        None => {
            // Layer 2 only: the link comes up, the workload addresses it.
            a.container().set_link_up(link.index)?;
            CniResult {
                interfaces: vec![attach::interface_of(&link, &a.args().netns)],
                ..CniResult::default()
            }
        }
    };
    attach::apply_dns(&mut result, conf.link.dns.as_ref());
    Ok(result)
}
