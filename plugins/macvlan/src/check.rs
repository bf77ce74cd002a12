//! CHECK: IPAM's CHECK first, then the container against `prevResult`: the
//! interface is in the container, a macvlan of the configured mode on the
//! configured master, with the MAC of the result; the container's
//! addresses and routes. A difference is code 102 naming what differs.

use libcni::attach::Check;
use libcni::ipam;
use libcni::netlink::Netlink;
use libcni::skel::CmdArgs;
use libcni::Error;

use crate::config::Conf;
use libcni::attach::master;

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let mut c = Check::begin(args, conf.ipam.as_deref())?;
    let ifname = &args.ifname;
    let failed = |msg: String| Err(Error::CheckFailed(msg));
    let want = c.record()?.clone();

    let container = &mut c.container;
    let name = conf.master.as_deref();
    let master = if conf.link_in_container {
        master::find(container, name, true)
    } else {
        master::find(&mut Netlink::open()?, name, false)
    }
    .map_err(|e| match e {
        Error::InvalidConfig { msg, .. } => Error::CheckFailed(format!("master: {msg}")),
        other => other,
    })?;

    let Some(d) = container.link_details_by_name(ifname)? else {
        return failed(format!("container interface {ifname:?} not found"));
    };
    if d.link.kind.as_deref() != Some("macvlan") {
        return failed(format!(
            "container interface {ifname:?} is not a macvlan (kind {})",
            d.link.kind.as_deref().unwrap_or("none")
        ));
    }
    if d.macvlan_mode != Some(conf.mode) {
        let now = d.macvlan_mode.map(|m| m.as_str()).unwrap_or("unknown");
        return failed(format!(
            "container macvlan {ifname:?} is in mode {now}, configured {}",
            conf.mode
        ));
    }
    // Its lower device: in the container with linkInContainer (no netnsid),
    // else in the plugin's namespace (the index is the one there).
    let on_master = d.link.peer_index == Some(master.index)
        && d.link.link_netnsid.is_some() != conf.link_in_container;
    if !on_master {
        return failed(format!(
            "container macvlan {ifname:?} is not on master {:?} (index {}) of {}",
            master.name,
            master.index,
            master::place(conf.link_in_container)
        ));
    }
    ipam::check_mac(&format!("container interface {ifname:?}"), &want, &d.link)?;

    // The addresses the result gives to this interface (or to none in
    // particular), and every route.
    c.addresses_and_routes().map(|_| ())
}
