//! The node side of the plugin, in the namespace it runs in: the bridge
//! (create or reuse, VLAN filtering probe), its gateway addresses and
//! MAC, and waiting for a port to be ready (IP forwarding is
//! `libcni::sysctl::enable_forwarding`).

use std::io;
use std::time::{Duration, Instant};

use libcni::netlink::link::{Link, BR_STATE_DISABLED};
use libcni::netlink::notify::Notifications;
use libcni::netlink::{self, is_exists, Netlink};
use libcni::sysctl::{self, Key};
use libcni::types::IpPrefix;
use libcni::Error;
use libcni::IpFamily;

use crate::config::Conf;

/// How long the host end of the veth may take to become operationally up
/// (the reference sleeps 0, 50, 500, 1000 and 1000 ms, then gives up).
pub const PORT_TIMEOUT: Duration = Duration::from_millis(2550);

/// Where the bridges' lock files are: `<dir>/<bridge>.lock`.
pub const LOCK_DIR: &str = "/run/cni/bridge";

/// The bridge this ADD works with.
#[derive(Debug, Clone)]
pub struct Bridge {
    pub index: u32,
    pub name: String,
    /// This ADD created it: a failed ADD deletes it again when no other
    /// attachment has a port on it ([`remove_if_unused`]).
    pub created: bool,
    /// Its MAC before this ADD attached a port: what the gateway pins
    /// ([`pin_mac`]), as the reference pins the address it read then.
    pub mac: Option<[u8; 6]>,
}

/// Holds bridge `name` between its creation and the attachment of this
/// ADD's port, and while a failed ADD decides whether to delete the bridge
/// it created: a concurrent ADD then either finds its port attached, or
/// the bridge gone and creates it again. Node-wide (`/run` is shared by
/// every network namespace); held for a few netlink calls.
pub fn lock(name: &str) -> Result<std::fs::File, Error> {
    libcni::files::lock_exclusive(std::path::Path::new(LOCK_DIR), &format!("{name}.lock")).map_err(
        |e| {
            Error::io(
                format!("locking bridge {name:?} ({LOCK_DIR}/{name}.lock)"),
                e,
            )
        },
    )
}

/// Deletes bridge `br`, which a failed ADD created, unless a port (another
/// attachment's) is on it. Called with the bridge's [`lock`] held.
pub fn remove_if_unused(nl: &mut Netlink, br: &Bridge) -> Result<(), Error> {
    let in_use = nl.links()?.iter().any(|l| l.master == Some(br.index));
    if in_use {
        return Ok(());
    }
    match nl.delete_link(br.index) {
        Err(e) if !netlink::is_not_found(&e) => Err(e),
        _ => Ok(()),
    }
}

/// Creates the bridge or reuses the one there, as the reference does:
/// created with the config's MTU (and `vlan_filtering` when the port gets
/// VLANs), promiscuous mode on with `promiscMode`, `accept_ra=0`, up. A
/// link of that name that is not a bridge is an error. Two ADDs racing to
/// create it both succeed (`EEXIST` means "the other one won").
///
/// VLANs on a kernel without bridge VLAN filtering fail here, before the
/// plugin creates anything: creating a bridge with `vlan_filtering` is
/// refused whole, and on an existing bridge writing `vlan_filtering` with
/// its current value is a probe that changes nothing.
pub fn ensure_bridge(nl: &mut Netlink, conf: &Conf) -> Result<Bridge, Error> {
    let name = conf.bridge.as_str();
    let vlans = conf.wants_vlans();
    let mut created = false;
    let link = match nl.link_by_name(name)? {
        Some(l) => {
            check_is_bridge(&l)?;
            if vlans {
                probe_vlan_filtering(nl, &l, conf)?;
            }
            l
        }
        None => {
            let added = if vlans {
                nl.add_bridge_vlan_filtering(name, conf.mtu)
            } else {
                nl.add_bridge(name, conf.mtu)
            };
            match added {
                Ok(()) => created = true,
                Err(e) if is_exists(&e) => {}
                Err(e) if vlans && netlink::errno(&e) == Some(libc::EOPNOTSUPP) => {
                    return Err(vlan_unsupported(conf))
                }
                Err(e) => return Err(e),
            }
            let l = nl.link_by_name(name)?.ok_or_else(|| {
                Error::kernel(
                    format!("bridge {name:?} vanished right after it was created"),
                    io::Error::from_raw_os_error(libc::ENODEV),
                )
            })?;
            check_is_bridge(&l)?;
            if vlans && !created {
                probe_vlan_filtering(nl, &l, conf)?;
            }
            l
        }
    };
    if conf.promisc && !link.promisc {
        nl.set_promisc(link.index, true)?;
    }
    // We own the routes of this interface.
    match sysctl::ensure_here(&Key::ipv6_conf(name, "accept_ra")?, "0") {
        Err(e) if !sysctl::is_missing(&e) => return Err(e),
        _ => {}
    }
    if !link.up {
        nl.set_link_up(link.index)?;
    }
    Ok(Bridge {
        index: link.index,
        name: name.to_string(),
        created,
        mac: link.mac,
    })
}

fn check_is_bridge(l: &Link) -> Result<(), Error> {
    if l.kind.as_deref() == Some("bridge") {
        return Ok(());
    }
    Err(Error::config(
        "bridge",
        format!(
            "{:?} already exists but is not a bridge (it is a {} link)",
            l.name,
            l.kind.as_deref().unwrap_or("plain")
        ),
    ))
}

fn probe_vlan_filtering(nl: &mut Netlink, l: &Link, conf: &Conf) -> Result<(), Error> {
    let current = nl.bridge_vlan_filtering(l.index)?.unwrap_or(false);
    match nl.set_bridge_vlan_filtering(l.index, current) {
        Err(e) if netlink::errno(&e) == Some(libc::EOPNOTSUPP) => Err(vlan_unsupported(conf)),
        other => other,
    }
}

/// Code 2 naming the VLAN key: this kernel cannot do it.
fn vlan_unsupported(conf: &Conf) -> Error {
    let (key, value) = conf.vlan_key();
    Error::UnsupportedField {
        key: key.to_string(),
        value: format!(
            "{value}: this kernel has no bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING), \
             so bridge {:?} cannot carry VLANs",
            conf.bridge
        ),
    }
}

/// Puts gateway address `gw` (the gateway with the container address's
/// prefix length) on link `index` (the bridge, or the VLAN gateway veth),
/// as the reference's `ensureAddr`: already there is fine; another IPv4
/// address, or an overlapping IPv6 one, is an error unless `forceAddress`,
/// which replaces it. Returns whether the address was added now.
pub fn ensure_gateway_address(
    nl: &mut Netlink,
    index: u32,
    link_name: &str,
    gw: IpPrefix,
    force: bool,
) -> Result<bool, Error> {
    let family = IpFamily::of(&gw.addr());
    for a in nl.addresses(Some(index), Some(family))? {
        if a.addr == gw.addr() && a.prefix_len == gw.prefix_len() {
            return Ok(false);
        }
        let Some(have) = IpPrefix::new(a.addr, a.prefix_len) else {
            continue;
        };
        let conflict = family == IpFamily::V4 || have.overlaps(&gw);
        if !conflict {
            continue;
        }
        if !force {
            return Err(Error::config(
                "forceAddress",
                format!(
                    "{link_name:?} already has an IP address different from {gw} ({have}); \
                     set forceAddress to replace it"
                ),
            ));
        }
        match nl.del_address(index, a.addr, a.prefix_len) {
            Err(e) if !netlink::is_not_found(&e) => return Err(e),
            _ => {}
        }
    }
    // The gateway address is the node's by construction (IPAM never hands
    // it out), so IPv6 skips DAD: the pod can use its gateway as soon as
    // ADD returns, with no wait (Go's gateway is unusable for 1-2 s).
    let added = if gw.is_ipv4() {
        nl.add_address(index, gw.addr(), gw.prefix_len())
    } else {
        nl.add_address_nodad(index, gw.addr(), gw.prefix_len())
    };
    match added {
        Ok(()) => Ok(true),
        // A concurrent ADD added the same gateway first.
        Err(e) if is_exists(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sets the bridge's MAC to the one it had before this ADD attached its
/// port, which pins it: otherwise a bridge takes the lowest MAC of its
/// ports, and changes as ports churn (every pod's ARP entry for the
/// gateway going stale). Setting it to itself is what the reference does
/// with the address it read before attaching.
///
/// A bridge whose ports all left before it was ever pinned has the zero
/// address (the kernel's choice for a bridge without ports), which cannot
/// be set (the reference fails the ADD there): then the address it took
/// from its first port is pinned instead. No pod knew the old one.
pub fn pin_mac(nl: &mut Netlink, br: &Bridge) -> Result<(), Error> {
    let before = br.mac.filter(|m| *m != [0; 6] && m[0] & 1 == 0);
    let mac = match before {
        Some(m) => Some(m),
        None => nl.link_by_index(br.index)?.and_then(|l| l.mac),
    };
    if let Some(mac) = mac.filter(|m| *m != [0; 6]) {
        nl.set_mac(br.index, &mac)?;
    }
    Ok(())
}

/// Waits until port `index` (the host end of the veth) is operationally up
/// and the bridge has enabled it, as the reference's retry loop does, but
/// on the kernel's link notifications (`events`, subscribed to
/// `RTNLGRP_LINK` before the container end came up) instead of sleeps.
pub fn wait_port_ready(
    nl: &mut Netlink,
    events: &mut Notifications,
    index: u32,
    name: &str,
) -> Result<(), Error> {
    let deadline = Instant::now() + PORT_TIMEOUT;
    loop {
        let state = nl.link_state(index)?.ok_or_else(|| {
            Error::kernel(
                format!("bridge port {name:?} is gone"),
                io::Error::from_raw_os_error(libc::ENODEV),
            )
        })?;
        if state.oper_up && state.port_state != Some(BR_STATE_DISABLED) {
            return Ok(());
        }
        if !events.wait_until(deadline)? {
            return Err(Error::kernel(
                format!(
                    "bridge port {name:?} in error state: {} after {} ms",
                    state.oper_state,
                    PORT_TIMEOUT.as_millis()
                ),
                io::Error::from_raw_os_error(libc::ETIMEDOUT),
            ));
        }
    }
}
