//! The master (lower device) of the macvlan: named by `master`, or the
//! interface of the default route, looked up in the plugin's namespace or,
//! with `linkInContainer`, in the container's.

use libcni::netlink::{Family, Link, Netlink};
use libcni::Error;

use crate::config::Conf;

/// Where the master is looked up, for messages.
pub fn place(conf: &Conf) -> &'static str {
    if conf.link_in_container {
        "the container's network namespace (linkInContainer)"
    } else {
        "the plugin's network namespace"
    }
}

/// The interface of the first default route of the main table (IPv4
/// first, then IPv6), as the reference picks it; `None` without one.
pub fn default_route_interface(nl: &mut Netlink) -> Result<Option<Link>, Error> {
    for family in [Family::V4, Family::V6] {
        for r in nl.routes(family)? {
            if r.dst_len != 0 {
                continue;
            }
            if let Some(link) = r.oif.map(|i| nl.link_by_index(i)).transpose()?.flatten() {
                return Ok(Some(link));
            }
        }
    }
    Ok(None)
}

/// The master of `conf` as `nl` (a socket in the namespace it lives in)
/// sees it. A master that is not there, or no master and no default route,
/// is code 7 naming `master`.
pub fn find(nl: &mut Netlink, conf: &Conf) -> Result<Link, Error> {
    match &conf.master {
        Some(name) => nl.link_by_name(name)?.ok_or_else(|| {
            Error::config("master", format!("{name:?} not found in {}", place(conf)))
        }),
        None => default_route_interface(nl)?.ok_or_else(|| {
            Error::config(
                "master",
                format!(
                    "not set, and {} has no default route to take it from",
                    place(conf)
                ),
            )
        }),
    }
}

/// [`find`], then the MTU check: the macvlan's MTU may not exceed the
/// master's (code 7 naming `mtu`).
pub fn find_for_add(nl: &mut Netlink, conf: &Conf) -> Result<Link, Error> {
    let m = find(nl, conf)?;
    if let Some(mtu) = conf.mtu {
        if mtu > m.mtu {
            return Err(Error::config(
                "mtu",
                format!(
                    "invalid MTU {mtu}: larger than the MTU of master {:?} ({})",
                    m.name, m.mtu
                ),
            ));
        }
    }
    Ok(m)
}
