//! The VRF device in the container's namespace: found by name, created
//! with its table (the configured one, or the lowest no VRF of the
//! namespace uses), and its members.

use std::io;

use libcni::attach;
use libcni::netlink::link::LinkDetails;
use libcni::netlink::link_kinds::{NewKind, NewLink, VRF_SUPPORT};
use libcni::netlink::rule::RESERVED_TABLES;
use libcni::netlink::{is_exists, Link, Netlink};
use libcni::Error;

use crate::config::Conf;

/// A VRF device: its link and its routing table.
#[derive(Debug, Clone)]
pub struct Vrf {
    pub link: Link,
    pub table: u32,
}

/// What the namespace has under the name `name`.
pub enum Found {
    Vrf(Vrf),
    /// A link of that name that is not a VRF, with its kind.
    Other(Option<String>),
    None,
}

/// The link named `name` in the namespace of `nl`.
pub fn find(nl: &mut Netlink, name: &str) -> Result<Found, Error> {
    let Some(d) = nl.link_details_by_name(name)? else {
        return Ok(Found::None);
    };
    Ok(match (d.link.kind.as_deref(), d.vrf_table) {
        (Some("vrf"), Some(table)) => Found::Vrf(Vrf {
            link: d.link,
            table,
        }),
        _ => Found::Other(d.link.kind),
    })
}

/// Every VRF of the namespace of `nl`.
fn all(nl: &mut Netlink) -> Result<Vec<Vrf>, Error> {
    let mut out = Vec::new();
    for l in nl.links()? {
        if l.kind.as_deref() != Some("vrf") {
            continue;
        }
        if let Some(LinkDetails {
            link,
            vrf_table: Some(table),
            ..
        }) = nl.link_details(l.index)?
        {
            out.push(Vrf { link, table });
        }
    }
    Ok(out)
}

/// The VRF `conf` names, as ADD finds it or makes it, and whether this
/// ADD made it. An existing one must have the configured table; a link of
/// that name that is not a VRF, or a configured table another VRF of the
/// namespace routes with, is code 7. A new VRF gets the configured table
/// or the lowest free one (from 1, the kernel's own tables left out), and
/// comes up. A kernel without VRFs refuses its creation (code 2 naming
/// the module), with nothing created.
pub fn ensure(nl: &mut Netlink, conf: &Conf) -> Result<(Vrf, bool), Error> {
    let name = conf.vrf_name.as_str();
    match find(nl, name)? {
        Found::Vrf(v) => return check_table(v, conf).map(|v| (v, false)),
        Found::Other(kind) => return Err(not_a_vrf(name, kind)),
        Found::None => {}
    }
    let others = all(nl)?;
    let table = match conf.table {
        Some(t) => {
            if let Some(o) = others.iter().find(|o| o.table == t) {
                return Err(Error::config(
                    "table",
                    format!(
                        "table {t} is the table of VRF {:?} in the container: two VRFs \
                         cannot share one",
                        o.link.name
                    ),
                ));
            }
            t
        }
        None => (1..=u32::MAX)
            .find(|t| !RESERVED_TABLES.contains(t) && !others.iter().any(|o| o.table == *t))
            .ok_or_else(|| Error::config("table", "no free routing table for a new VRF"))?,
    };
    let spec = NewLink {
        name,
        kind: NewKind::Vrf { table },
        mtu: None,
        netns: None,
    };
    let created = match nl.add_link(&spec) {
        Ok(()) => true,
        // Made meanwhile by an ADD that does not take the namespace's lock
        // (Go's): use it.
        Err(e) if is_exists(&e) => false,
        Err(e) if libcni::netlink::link_kinds::is_unknown_kind(&e) => {
            return Err(attach::kind_missing("vrf", &VRF_SUPPORT))
        }
        Err(e) => return Err(e),
    };
    let v = match find(nl, name)? {
        Found::Vrf(v) => v,
        Found::Other(kind) => return Err(not_a_vrf(name, kind)),
        Found::None => {
            return Err(Error::kernel(
                format!("VRF {name:?} vanished right after it was created"),
                io::Error::from_raw_os_error(libc::ENODEV),
            ))
        }
    };
    if !created {
        return check_table(v, conf).map(|v| (v, false));
    }
    if let Err(e) = nl.set_link_up(v.link.index) {
        let _ = nl.delete_link(v.link.index);
        return Err(e);
    }
    Ok((v, true))
}

fn check_table(v: Vrf, conf: &Conf) -> Result<Vrf, Error> {
    match conf.table {
        Some(t) if t != v.table => Err(Error::config(
            "table",
            format!(
                "VRF {:?} already exists in the container with table {}, not {t}",
                v.link.name, v.table
            ),
        )),
        _ => Ok(v),
    }
}

fn not_a_vrf(name: &str, kind: Option<String>) -> Error {
    Error::config(
        "vrfname",
        format!(
            "{name:?} already exists in the container and is not a VRF (it is a {} link)",
            kind.as_deref().unwrap_or("plain")
        ),
    )
}

/// The links whose master is `vrf`.
pub fn members(nl: &mut Netlink, vrf: &Vrf) -> Result<Vec<Link>, Error> {
    Ok(nl
        .links()?
        .into_iter()
        .filter(|l| l.master == Some(vrf.link.index))
        .collect())
}
