//! ADD: for each address of `CNI_IFNAME` in `prevResult`, a rule
//! `from <addr> lookup <table>`; without `table`, a table of its own (the
//! first free one from 100 up, free meaning no rule looks it up and no
//! route is in it, in either family), a default route there through the
//! gateway, and the interface's main-table routes that belong to the
//! address copied there; then the interface's routes leave the main table
//! (with `addSourceHints`, its subnet routes stay, with the address as the
//! preferred source). `prevResult` is printed unchanged.
//!
//! Everything is validated first; a failure after the first change undoes
//! every change in reverse (rules, the main table as it was, the tables).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libcni::ipam;
use libcni::netlink::notify::{Notifications, RTNLGRP_IPV6_IFADDR};
use libcni::netlink::route::{RT_SCOPE_LINK, RT_TABLE_MAIN};
use libcni::netlink::rule::RESERVED_TABLES;
use libcni::netlink::{is_not_found, KernelRoute, Netlink, Route, Rule};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, IpConfig, IpPrefix};
use libcni::IpFamily;
use libcni::{fault, Error};

use crate::config::{Conf, FIRST_TABLE};
use crate::{interface_addresses, NetnsLock};

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    let prev = args.required_prev_result(
        "missing: sbr must be chained after a plugin that gives the interface its addresses",
    )?;
    let ips = addresses_to_route(&prev, &args.ifname)?;
    let ns = args.open_netns()?;
    let _lock = NetnsLock::take(&ns)?;
    let mut nl = Netlink::open_in(&ns)?;
    let link = nl
        .link_by_name(&args.ifname)?
        .ok_or_else(|| {
            Error::InvalidEnv(format!(
                "CNI_IFNAME {:?}: no such interface in the container",
                args.ifname
            ))
        })?
        .index;
    if conf.add_source_hints && conf.table.is_none() {
        settle_v6(&ns, &mut nl, link, &args.ifname, &ips)?;
    }
    let mut created = Created {
        link,
        rules: Vec::new(),
        tables: Vec::new(),
        main_before: None,
    };
    match apply(&mut nl, &conf, &ips, &mut created) {
        Ok(()) => Ok(prev),
        Err(e) => {
            created.rollback(&mut nl);
            Err(e)
        }
    }
}

/// Waits, before anything changes, until no IPv6 address of `ips` on the
/// link is tentative: the kernel refuses a route naming a tentative address
/// as its source (the source hints), and the main plugin may return while
/// the link's carrier, and with it the end of that state, is still coming.
fn settle_v6(
    ns: &NetNs,
    nl: &mut Netlink,
    link: u32,
    ifname: &str,
    ips: &[&IpConfig],
) -> Result<(), Error> {
    let v6: Vec<IpAddr> = ips
        .iter()
        .map(|ip| ip.address.addr())
        .filter(IpAddr::is_ipv6)
        .collect();
    if v6.is_empty() {
        return Ok(());
    }
    // Subscribed before the first read, so no change is missed.
    let mut events = Notifications::open_in(ns, &[RTNLGRP_IPV6_IFADDR])?;
    ipam::wait_dad(nl, &mut events, link, ifname, &v6, ipam::DAD_TIMEOUT)
}

/// The addresses of `ifname` in `prev`, each once; none is code 7.
pub fn addresses_to_route<'a>(
    prev: &'a CniResult,
    ifname: &str,
) -> Result<Vec<&'a IpConfig>, Error> {
    let mut ips: Vec<&IpConfig> = Vec::new();
    for ip in interface_addresses(prev, ifname) {
        if !ips.iter().any(|x| x.address.addr() == ip.address.addr()) {
            ips.push(ip);
        }
    }
    if ips.is_empty() {
        return Err(Error::config(
            "prevResult",
            format!(
                "no address for interface {ifname:?}: sbr routes by source address, so the plugin before it must give the interface one"
            ),
        ));
    }
    Ok(ips)
}

/// What this ADD changed, to undo on failure.
struct Created {
    link: u32,
    rules: Vec<Rule>,
    /// Tables this ADD picked (and wrote routes into).
    tables: Vec<u32>,
    /// The interface's main-table routes before the first change to them.
    main_before: Option<Vec<KernelRoute>>,
}

impl Created {
    /// Undoes everything, best effort: the rules, the main table back to
    /// what it was, the routes written into the picked tables. A step that
    /// fails is said on stderr and the next one still runs.
    fn rollback(&self, nl: &mut Netlink) {
        let warn = |r: libcni::Result<()>| {
            if let Err(e) = r {
                if !is_not_found(&e) {
                    eprintln!("rolling back: {e}");
                }
            }
        };
        for rule in self.rules.iter().rev() {
            warn(nl.del_rule(rule));
        }
        if let Some(before) = &self.main_before {
            match nl.link_routes_in(self.link, RT_TABLE_MAIN) {
                Ok(now) => {
                    for r in now.iter().filter(|r| !before.contains(r)) {
                        warn(nl.del_kernel_route(r));
                    }
                    for r in before.iter().filter(|r| !now.contains(r)) {
                        warn(nl.replace_route_in(r, RT_TABLE_MAIN));
                    }
                }
                Err(e) => eprintln!("rolling back: {e}"),
            }
        }
        for &table in &self.tables {
            match nl.link_routes_in(self.link, table) {
                Ok(routes) => {
                    for r in &routes {
                        warn(nl.del_kernel_route(r));
                    }
                }
                Err(e) => eprintln!("rolling back: {e}"),
            }
        }
    }
}

fn apply(
    nl: &mut Netlink,
    conf: &Conf,
    ips: &[&IpConfig],
    created: &mut Created,
) -> Result<(), Error> {
    let link = created.link;
    if let Some(table) = conf.table {
        for ip in ips {
            let rule = Rule::from_source(ip.address.addr(), table);
            nl.add_rule(&rule)?;
            created.rules.push(rule);
            fault::point("sbr/rule");
        }
        return Ok(());
    }

    let mut used = used_tables(nl)?;
    let main = nl.link_routes_in(link, RT_TABLE_MAIN)?;
    created.main_before = Some(main.clone());
    let mut from = FIRST_TABLE;
    for ip in ips {
        let addr = ip.address;
        let table = next_free(&used, from)?;
        from = table.saturating_add(1);
        used.insert(table);
        created.tables.push(table);
        let rule = Rule::from_source(addr.addr(), table);
        nl.add_rule(&rule)?;
        created.rules.push(rule);
        fault::point("sbr/rule");
        // The default route first: it may be gone from the main table
        // (a plugin before this one may not have added one).
        let fixed = conf.gateway_for(addr.addr());
        if let Some(gw) = fixed.or(ip.gateway) {
            let mut default = Route::new(unspecified(&addr), 0, Some(gw), Some(link));
            default.table = table;
            nl.add_route(&default)?;
        }
        // A main-table default route would replace one through a
        // configured gateway: that one stays.
        for r in main
            .iter()
            .filter(|r| belongs_to(r, &addr) && !(fixed.is_some() && r.route.dst_len == 0))
        {
            nl.replace_route_in(r, table)?;
        }
        fault::point("sbr/table");
    }
    // Only now do the routes leave the main table: a gateway in the
    // picked table is checked against the main table's routes.
    if conf.add_source_hints {
        for ip in ips {
            let net = ip.address.truncate();
            let hint = Route::new(net.addr(), net.prefix_len(), None, Some(link));
            nl.replace_route_in(
                &KernelRoute::new(&hint, Some(ip.address.addr())),
                RT_TABLE_MAIN,
            )?;
        }
        fault::point("sbr/hints");
    }
    for r in &main {
        if conf.add_source_hints && r.route.scope == RT_SCOPE_LINK {
            continue;
        }
        match nl.del_kernel_route(r) {
            Err(e) if !is_not_found(&e) => return Err(e),
            _ => {}
        }
    }
    fault::point("sbr/main");
    Ok(())
}

/// Whether main-table route `r` goes with address `addr` into its table:
/// it is of the address's family, and its preferred source or its gateway
/// is in the address's subnet, or it has neither (a route of the link).
fn belongs_to(r: &KernelRoute, addr: &IpPrefix) -> bool {
    let in_subnet = |ip: Option<IpAddr>| ip.is_some_and(|ip| addr.contains(ip));
    IpFamily::of(&r.route.dst) == IpFamily::of(&addr.addr())
        && (in_subnet(r.prefsrc)
            || in_subnet(r.route.gateway)
            || (r.prefsrc.is_none() && r.route.gateway.is_none()))
}

fn unspecified(addr: &IpPrefix) -> IpAddr {
    if addr.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    }
}

/// Every table a rule looks up or a route is in, of either family.
fn used_tables(nl: &mut Netlink) -> Result<BTreeSet<u32>, Error> {
    let mut used = BTreeSet::new();
    for family in IpFamily::BOTH {
        used.extend(nl.rules(family)?.iter().map(|r| r.table));
        used.extend(nl.routes_in(family, None)?.iter().map(|r| r.table));
    }
    Ok(used)
}

/// The first table from `from` up that is not in `used` nor one of the
/// kernel's own.
fn next_free(used: &BTreeSet<u32>, from: u32) -> Result<u32, Error> {
    (from..=u32::MAX)
        .find(|t| !used.contains(t) && !RESERVED_TABLES.contains(t))
        .ok_or_else(|| {
            Error::NotAvailable(format!(
                "no free routing table from {from} up in the container"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_free_table_skips_used_and_reserved_ones() {
        let used: BTreeSet<u32> = [0, 100, 101, 103, 252, 254, 255].into();
        assert_eq!(next_free(&used, 100).unwrap(), 102);
        assert_eq!(next_free(&used, 103).unwrap(), 104);
        assert_eq!(next_free(&used, 252).unwrap(), 256);
        assert_eq!(next_free(&BTreeSet::new(), 253).unwrap(), 256);
        let full: BTreeSet<u32> = [u32::MAX].into();
        assert_eq!(next_free(&full, u32::MAX).unwrap_err().code(), 50);
    }
}
