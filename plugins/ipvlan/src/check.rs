//! CHECK: IPAM's CHECK first (when there is one), then the container
//! against `prevResult` and the config: the interface is an ipvlan in the
//! configured mode on the configured master (without `master`, on a lower
//! device that is still there), with the result's MAC; the container's
//! addresses and routes. A difference is code 102 naming what differs.

use libcni::attach::{master, Check};
use libcni::netlink::{Link, Netlink};
use libcni::skel::CmdArgs;
use libcni::Error;

use crate::config::Conf;

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let in_container = conf.link.link_in_container;
    let mut c = Check::begin(args, conf.link.ipam.as_deref())?;
    let ifname = &args.ifname;

    let link = c.container_link("ipvlan")?;
    let Some(d) = c.container.link_details(link.index)? else {
        return Error::check_failed(format!("container interface {ifname:?} not found"));
    };
    if d.ipvlan_mode != Some(conf.mode) {
        let now = d.ipvlan_mode.map(|m| m.as_str()).unwrap_or("unknown");
        return Error::check_failed(format!(
            "container ipvlan {ifname:?} is in mode {now}, configured {} (the mode is the \
             master's: the last ipvlan made on it sets it for all)",
            conf.mode
        ));
    }
    match conf.link.master.as_deref() {
        Some(name) => {
            let m = master::find_for_check(&mut c.container, Some(name), in_container)?;
            if !on_master(&link, &m, in_container) {
                let what = format!("container ipvlan {ifname:?}");
                return Err(master::not_on(&what, &m, in_container));
            }
        }
        // Chained or the default route's: the master is not known here;
        // the lower device must still be there.
        None => {
            // A lower device in another namespace (a netnsid) is the
            // plugin's.
            let present = match (link.peer_index, link.link_netnsid.is_some()) {
                (Some(i), true) => Netlink::open()?.link_by_index(i)?.is_some(),
                (Some(i), false) => c.container.link_by_index(i)?.is_some(),
                (None, _) => false,
            };
            if !present {
                return Error::check_failed(format!(
                    "the master of container ipvlan {ifname:?} is gone"
                ));
            }
        }
    }
    c.addresses_and_routes().map(drop)
}

/// Whether `link` is an ipvlan of master `m`: its lower device is `m`, or,
/// for a master that is itself an ipvlan, `m`'s own lower device (the
/// kernel stacks every ipvlan on the physical master). The lower device
/// is in the plugin's namespace (a netnsid is reported) unless the master
/// is the container's.
fn on_master(link: &Link, m: &Link, in_container: bool) -> bool {
    let direct = master::is_on(link, m, in_container);
    let stacked = m.kind.as_deref() == Some("ipvlan") && link.peer_index == m.peer_index;
    direct || stacked
}
