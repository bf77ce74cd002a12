//! CHECK: IPAM's CHECK first, then the container against `prevResult` and
//! the config: the interface is a VLAN with the configured `vlanId` on the
//! configured master, with the result's MAC and the configured MTU; the
//! container's addresses and routes. A difference is code 102 naming what
//! differs.

use libcni::attach::{master, Check};
use libcni::netlink::Netlink;
use libcni::skel::CmdArgs;
use libcni::Error;

use crate::config::Conf;

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let mut c = Check::begin(args, conf.ipam.as_deref())?;
    let ifname = &args.ifname;
    let failed = |msg: String| Err(Error::CheckFailed(msg));

    let name = conf.master.as_deref();
    let m = if conf.link_in_container {
        master::find(&mut c.container, name, true)
    } else {
        master::find(&mut Netlink::open()?, name, false)
    }
    .map_err(|e| match e {
        Error::InvalidConfig { msg, .. } => Error::CheckFailed(format!("master: {msg}")),
        other => other,
    })?;
    let link = c.container_link("vlan")?;
    let Some(d) = c.container.link_details(link.index)? else {
        return failed(format!("container interface {ifname:?} not found"));
    };
    if d.vlan_id != Some(conf.vlan_id) {
        let now = d.vlan_id.map_or_else(|| "none".into(), |v| v.to_string());
        return failed(format!(
            "container VLAN {ifname:?} has VLAN ID {now}, vlanId is {}",
            conf.vlan_id
        ));
    }
    // Its lower device: in the container with linkInContainer (no netnsid),
    // else in the plugin's namespace (the index is the one there).
    let on_master =
        link.peer_index == Some(m.index) && link.link_netnsid.is_some() != conf.link_in_container;
    if !on_master {
        return failed(format!(
            "container VLAN {ifname:?} is not on master {:?} (index {}) of {}",
            m.name,
            m.index,
            master::place(conf.link_in_container)
        ));
    }
    if let Some(mtu) = conf.mtu {
        if link.mtu != mtu {
            return failed(format!(
                "container VLAN {ifname:?} has MTU {}, mtu is {mtu}",
                link.mtu
            ));
        }
    }
    c.addresses_and_routes().map(drop)
}
