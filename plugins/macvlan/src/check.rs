//! CHECK: IPAM's CHECK first, then the container against `prevResult`: the
//! interface is in the container, a macvlan of the configured mode on the
//! configured master, with the MAC of the result; the container's
//! addresses and routes. A difference is code 102 naming what differs.

use libcni::ipam;
use libcni::netlink::Netlink;
use libcni::skel::CmdArgs;
use libcni::Error;

use crate::config::Conf;
use crate::master;

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let ns = args.open_netns()?;
    if let Some(plugin) = &conf.ipam {
        ipam::exec_check(plugin, &args.stdin)?;
    }
    let prev = args.required_prev_result("CHECK needs the ADD result (prevResult)")?;
    let ifname = &args.ifname;
    let failed = |msg: String| Err(Error::CheckFailed(msg));
    let want = ipam::container_interface(&prev, ifname, &args.netns)?;

    let mut container = Netlink::open_in(&ns)?;
    let master = if conf.link_in_container {
        master::find(&mut container, &conf)
    } else {
        master::find(&mut Netlink::open()?, &conf)
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
            master::place(&conf)
        ));
    }
    ipam::check_mac(&format!("container interface {ifname:?}"), want, &d.link)?;

    // The addresses the result gives to this interface (or to none in
    // particular), and every route.
    let ips = ipam::container_addresses(&prev, ifname, &args.netns);
    ipam::check_addresses(&mut container, ifname, &ips)?;
    ipam::check_routes(&mut container, &prev.routes)
}
