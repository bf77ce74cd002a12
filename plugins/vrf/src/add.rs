//! ADD: `CNI_IFNAME` (made by the plugin before this one) joins the VRF
//! `vrfname` in the container, which is created (with `table`, or the
//! lowest free table) or reused, and its routes follow it into the VRF's
//! table, as the reference (v1.9) does:
//!
//! 1. the interface's IPv6 global addresses and its main-table routes of
//!    scope universe (what the kernel does not recreate: routes through a
//!    gateway, the IPAM plugin's) are read;
//! 2. the interface joins the VRF (the kernel takes it down and up: its
//!    routes leave the main table, and its IPv6 addresses go unless
//!    `keep_addr_on_down`);
//! 3. the IPv6 addresses that went are added again, and ADD waits (on the
//!    kernel's route notifications, with a deadline) until each has its
//!    local route in the VRF's table;
//! 4. the routes of step 1 are written into the VRF's table.
//!
//! `prevResult` is printed unchanged. Everything is validated first; a
//! failure after the interface joined puts it back (out of the VRF, its
//! addresses and main-table routes as they were), and a VRF this ADD made
//! that has no member is deleted.

use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use libcni::netlink::addr::IFA_F_NODAD;
use libcni::netlink::notify::Notifications;
use libcni::netlink::route::{RTNLGRP_IPV6_ROUTE, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN};
use libcni::netlink::{is_exists, is_not_found, Address, KernelRoute, Link, Netlink};
use libcni::netns::{NetNs, NetnsLock};
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use libcni::Error;
use libcni::IpFamily;

use crate::config::Conf;
use crate::device::{self, Found, Vrf};

/// How long the kernel may take to give a re-added IPv6 address its local
/// route in the VRF's table (the reference retries for about 2.5 s; with
/// duplicate address detection on, the route comes when DAD ends).
pub const ROUTE_TIMEOUT: Duration = Duration::from_secs(5);

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    let prev = args.required_prev_result(
        "missing: vrf must be chained after the plugin that made the interface",
    )?;
    let ns = args.open_netns()?;
    let _lock = NetnsLock::take(&ns)?;
    let mut nl = Netlink::open_in(&ns)?;
    let ifname = &args.ifname;
    let link = nl.link_by_name(ifname)?.ok_or_else(|| {
        Error::InvalidEnv(format!(
            "CNI_IFNAME {ifname:?}: no such interface in the container"
        ))
    })?;
    if let Some(m) = link.master {
        let already = match device::find(&mut nl, &conf.vrf_name)? {
            Found::Vrf(v) => v.link.index == m,
            _ => false,
        };
        if !already {
            let name = nl
                .link_by_index(m)?
                .map_or_else(|| format!("index {m}"), |l| format!("{:?}", l.name));
            return Err(Error::Conflict(format!(
                "interface {ifname:?} already has a master ({name}): it cannot join VRF {:?}",
                conf.vrf_name
            )));
        }
    }
    let (vrf, created) = device::ensure(&mut nl, &conf)?;
    let mut joined = Joined::default();
    match join(&ns, &mut nl, &link, &vrf, &mut joined) {
        Ok(()) => Ok(prev),
        Err(e) => {
            joined.undo(&mut nl, &link);
            if created {
                match device::members(&mut nl, &vrf) {
                    Ok(m) if m.is_empty() => {
                        if let Err(e) = nl.delete_link(vrf.link.index) {
                            eprintln!("vrf: rollback: deleting VRF {:?}: {e}", vrf.link.name);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("vrf: rollback: {e}"),
                }
            }
            Err(e)
        }
    }
}

/// What [`join`] changed, to put back when a later step fails.
#[derive(Default)]
struct Joined {
    /// The interface joined the VRF (this ADD set its master).
    enslaved: bool,
    /// Its IPv6 global addresses before.
    addresses: Vec<Address>,
    /// Its main-table routes of scope universe before.
    routes: Vec<KernelRoute>,
}

impl Joined {
    /// Puts the interface back as it was, best effort (each failure said
    /// on stderr): out of the VRF (which takes its routes in the VRF's
    /// table), its IPv6 addresses and main-table routes again.
    fn undo(&self, nl: &mut Netlink, link: &Link) {
        if !self.enslaved {
            return;
        }
        let say = |what: &str, r: libcni::Result<()>| match r {
            Err(e) if !is_exists(&e) && !is_not_found(&e) => {
                eprintln!("vrf: rollback: {what}: {e}")
            }
            _ => {}
        };
        say("leaving the VRF", nl.set_master(link.index, 0));
        let now = nl
            .addresses(Some(link.index), Some(IpFamily::V6))
            .unwrap_or_default();
        for a in self.addresses.iter().filter(|a| !has(&now, a)) {
            say("restoring an address", add_like(nl, link.index, a));
        }
        for r in &self.routes {
            say(
                &format!("restoring route {}", r.describe()),
                nl.replace_route_in(r, RT_TABLE_MAIN),
            );
        }
    }
}

fn has(list: &[Address], a: &Address) -> bool {
    list.iter()
        .any(|b| b.addr == a.addr && b.prefix_len == a.prefix_len)
}

/// Adds `a` to link `index` as it was: without DAD if it had none.
fn add_like(nl: &mut Netlink, index: u32, a: &Address) -> libcni::Result<()> {
    if a.flags & IFA_F_NODAD != 0 {
        nl.add_address_nodad(index, a.addr, a.prefix_len)
    } else {
        nl.add_address(index, a.addr, a.prefix_len)
    }
}

/// The steps of the module documentation, each recorded in `joined`.
fn join(
    ns: &NetNs,
    nl: &mut Netlink,
    link: &Link,
    vrf: &Vrf,
    joined: &mut Joined,
) -> Result<(), Error> {
    if link.master == Some(vrf.link.index) {
        return Ok(()); // joined by an earlier ADD of this attachment
    }
    joined.addresses = nl
        .addresses(Some(link.index), Some(IpFamily::V6))?
        .into_iter()
        .filter(|a| a.scope == RT_SCOPE_UNIVERSE)
        .collect();
    joined.routes = nl
        .link_routes_in(link.index, RT_TABLE_MAIN)?
        .into_iter()
        .filter(|r| r.route.scope == RT_SCOPE_UNIVERSE)
        .collect();
    // Subscribed before the addresses come back, so no route is missed.
    let mut events = Notifications::open_in(ns, &[RTNLGRP_IPV6_ROUTE])?;
    joined.enslaved = true;
    nl.set_master(link.index, vrf.link.index)?;

    let now = nl.addresses(Some(link.index), Some(IpFamily::V6))?;
    let mut back: Vec<IpAddr> = Vec::new();
    for a in joined.addresses.iter().filter(|a| !has(&now, a)) {
        match add_like(nl, link.index, a) {
            Err(e) if !is_exists(&e) => return Err(e),
            _ => back.push(a.addr),
        }
    }
    let deadline = Instant::now() + ROUTE_TIMEOUT;
    for addr in back {
        wait_local_route(nl, &mut events, link, vrf.table, addr, deadline)?;
    }
    for r in &joined.routes {
        nl.replace_route_in(r, vrf.table)?;
    }
    Ok(())
}

/// Waits until `addr` has its host route out of `link` in `table`.
fn wait_local_route(
    nl: &mut Netlink,
    events: &mut Notifications,
    link: &Link,
    table: u32,
    addr: IpAddr,
    deadline: Instant,
) -> Result<(), Error> {
    loop {
        let there = nl
            .routes_in(IpFamily::V6, Some(table))?
            .iter()
            .any(|r| r.dst == addr && r.dst_len == 128 && r.oif == Some(link.index));
        if there {
            return Ok(());
        }
        if !events.wait_until(deadline)? {
            return Err(Error::kernel(
                format!(
                    "address {addr} of {:?} got no local route in table {table} within {} s",
                    link.name,
                    ROUTE_TIMEOUT.as_secs()
                ),
                io::Error::from_raw_os_error(libc::ETIMEDOUT),
            ));
        }
    }
}
