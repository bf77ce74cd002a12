//! CHECK: IPAM's CHECK first, then the container against `prevResult`: the
//! interface is in the container, a macvlan of the configured mode on the
//! configured master, with the MAC of the result; the container's
//! addresses and routes. A difference is code 102 naming what differs.

use libcni::attach::{master, Check};
use libcni::ipam;
use libcni::skel::CmdArgs;
use libcni::Error;

use crate::config::Conf;

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let in_container = conf.link.link_in_container;
    let mut c = Check::begin(args, conf.link.ipam.as_deref())?;
    let ifname = &args.ifname;
    let want = c.record()?.clone();

    let container = &mut c.container;
    let master = master::find_for_check(container, conf.link.master.as_deref(), in_container)?;

    let Some(d) = container.link_details_by_name(ifname)? else {
        return Error::check_failed(format!("container interface {ifname:?} not found"));
    };
    if d.link.kind.as_deref() != Some("macvlan") {
        return Error::check_failed(format!(
            "container interface {ifname:?} is not a macvlan (kind {})",
            d.link.kind.as_deref().unwrap_or("none")
        ));
    }
    if d.macvlan_mode != Some(conf.mode) {
        let now = d.macvlan_mode.map(|m| m.as_str()).unwrap_or("unknown");
        return Error::check_failed(format!(
            "container macvlan {ifname:?} is in mode {now}, configured {}",
            conf.mode
        ));
    }
    if !master::is_on(&d.link, &master, in_container) {
        let what = format!("container macvlan {ifname:?}");
        return Err(master::not_on(&what, &master, in_container));
    }
    ipam::check_mac(&format!("container interface {ifname:?}"), &want, &d.link)?;

    // The addresses the result gives to this interface (or to none in
    // particular), and every route.
    c.addresses_and_routes().map(|_| ())
}
