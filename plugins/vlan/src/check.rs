//! CHECK: IPAM's CHECK first, then the container against `prevResult` and
//! the config: the interface is a VLAN with the configured `vlanId` on the
//! configured master, with the result's MAC and the configured MTU; the
//! container's addresses and routes. A difference is code 102 naming what
//! differs.

use libcni::attach::{master, Check};
use libcni::skel::CmdArgs;
use libcni::Error;

use crate::config::Conf;

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let link_conf = &conf.link;
    let mut c = Check::begin(args, link_conf.ipam.as_deref())?;
    let ifname = &args.ifname;

    let in_container = link_conf.link_in_container;
    let m = master::find_for_check(&mut c.container, link_conf.master.as_deref(), in_container)?;
    let link = c.container_link("vlan")?;
    let Some(d) = c.container.link_details(link.index)? else {
        return Error::check_failed(format!("container interface {ifname:?} not found"));
    };
    if d.vlan_id != Some(conf.vlan_id) {
        let now = d.vlan_id.map_or_else(|| "none".into(), |v| v.to_string());
        return Error::check_failed(format!(
            "container VLAN {ifname:?} has VLAN ID {now}, vlanId is {}",
            conf.vlan_id
        ));
    }
    if !master::is_on(&link, &m, in_container) {
        let what = format!("container VLAN {ifname:?}");
        return Err(master::not_on(&what, &m, in_container));
    }
    if let Some(mtu) = link_conf.mtu {
        if link.mtu != mtu {
            return Error::check_failed(format!(
                "container VLAN {ifname:?} has MTU {}, mtu is {mtu}",
                link.mtu
            ));
        }
    }
    c.addresses_and_routes().map(drop)
}
