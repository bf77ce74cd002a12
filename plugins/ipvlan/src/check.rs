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
    let mut c = Check::begin(args, conf.ipam.as_deref())?;
    let ifname = &args.ifname;
    let failed = |msg: String| Err(Error::CheckFailed(msg));

    let link = c.container_link("ipvlan")?;
    let Some(d) = c.container.link_details(link.index)? else {
        return failed(format!("container interface {ifname:?} not found"));
    };
    if d.ipvlan_mode != Some(conf.mode) {
        let now = d.ipvlan_mode.map(|m| m.as_str()).unwrap_or("unknown");
        return failed(format!(
            "container ipvlan {ifname:?} is in mode {now}, configured {} (the mode is the \
             master's: the last ipvlan made on it sets it for all)",
            conf.mode
        ));
    }
    match conf.master.as_deref() {
        Some(name) => {
            let mut host;
            let nl = if conf.link_in_container {
                &mut c.container
            } else {
                host = Netlink::open()?;
                &mut host
            };
            let m = master::find(nl, Some(name), conf.link_in_container).map_err(|e| match e {
                Error::InvalidConfig { msg, .. } => Error::CheckFailed(format!("master: {msg}")),
                other => other,
            })?;
            if !on_master(&link, &m, conf.link_in_container) {
                return failed(format!(
                    "container ipvlan {ifname:?} is not on master {:?} (index {}) of {}",
                    m.name,
                    m.index,
                    master::place(conf.link_in_container)
                ));
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
                return failed(format!("the master of container ipvlan {ifname:?} is gone"));
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
    let right_ns = link.link_netnsid.is_some() != in_container;
    let direct = link.peer_index == Some(m.index) && right_ns;
    let stacked = m.kind.as_deref() == Some("ipvlan") && link.peer_index == m.peer_index;
    direct || stacked
}
