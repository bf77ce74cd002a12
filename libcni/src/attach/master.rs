//! The master (lower device) of a link stacked on another one: a macvlan,
//! an ipvlan or a VLAN sub-interface. Named by the config's `master`, or
//! the interface of the default route; looked up in the plugin's namespace
//! or, with `linkInContainer`, in the container's. Every refusal is code 7
//! naming `master` (or `mtu`).

use crate::netlink::{Link, Netlink};
use crate::Error;
use crate::IpFamily;

/// Where the master is looked up, for messages.
pub fn place(in_container: bool) -> &'static str {
    if in_container {
        "the container's network namespace (linkInContainer)"
    } else {
        "the plugin's network namespace"
    }
}

/// The interface of the first default route of the main table (IPv4
/// first, then IPv6), as the reference picks it; `None` without one.
pub fn default_route_interface(nl: &mut Netlink) -> Result<Option<Link>, Error> {
    for family in IpFamily::BOTH {
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

/// The master `name` (`None`: the default route's interface) as `nl`, a
/// socket in the namespace it lives in, sees it; `in_container` says which
/// namespace that is, for messages. A master that is not there, or no
/// master and no default route, is code 7 naming `master`.
pub fn find(nl: &mut Netlink, name: Option<&str>, in_container: bool) -> Result<Link, Error> {
    match name {
        Some(name) => nl.link_by_name(name)?.ok_or_else(|| {
            Error::config(
                "master",
                format!("{name:?} not found in {}", place(in_container)),
            )
        }),
        None => default_route_interface(nl)?.ok_or_else(|| {
            Error::config(
                "master",
                format!(
                    "not set, and {} has no default route to take it from",
                    place(in_container)
                ),
            )
        }),
    }
}

/// A link stacked on `master` may not have a larger MTU (code 7 naming
/// `mtu`).
pub fn check_mtu(master: &Link, mtu: Option<u32>) -> Result<(), Error> {
    match mtu {
        Some(mtu) if mtu > master.mtu => Err(Error::config(
            "mtu",
            format!(
                "invalid MTU {mtu}: larger than the MTU of master {:?} ({})",
                master.name, master.mtu
            ),
        )),
        _ => Ok(()),
    }
}

/// STATUS's master check: ADD can be served when the master `name` (or a
/// default route to take it from) is in the plugin's namespace; with
/// `in_container` there is no container to look in, so it passes. Code 50
/// otherwise.
pub fn status(name: Option<&str>, in_container: bool) -> Result<(), Error> {
    if in_container {
        return Ok(());
    }
    let mut nl = Netlink::open()?;
    match name {
        Some(name) => {
            if nl.link_by_name(name)?.is_none() {
                return Err(Error::NotAvailable(format!(
                    "master {name:?} not found in the plugin's network namespace"
                )));
            }
        }
        None => {
            if default_route_interface(&mut nl)?.is_none() {
                return Err(Error::NotAvailable(
                    "no master configured and no default route to take it from".into(),
                ));
            }
        }
    }
    Ok(())
}

impl super::Add<'_> {
    /// The master of the link this ADD stacks on it ([`find`]: in the
    /// container's namespace with `in_container`, else in the plugin's),
    /// with [`check_mtu`] for the link's `mtu`.
    pub fn master(
        &mut self,
        name: Option<&str>,
        in_container: bool,
        mtu: Option<u32>,
    ) -> Result<Link, Error> {
        let nl = if in_container {
            self.container()
        } else {
            self.host()?
        };
        let m = find(nl, name, in_container)?;
        check_mtu(&m, mtu)?;
        Ok(m)
    }
}
