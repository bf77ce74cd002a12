//! DEL, best effort: removes the rules `from <addr> lookup <table>` of the
//! interface's addresses and the routes of the tables they looked up. It
//! needs neither `prevResult` nor the config's other keys: what ADD
//! installed is found again in the kernel.
//!
//! - The addresses: those of `CNI_IFNAME` in `prevResult` (when there is a
//!   usable one) and those the interface holds now (when it is there).
//! - The rules: each `from <one of them> lookup <table>` with no other
//!   selector (with `table`, only those looking up that table).
//! - When neither gives an address (no `prevResult` and the interface is
//!   gone), the rules ADD leaves behind such an interface: from an address
//!   no interface of the namespace holds, to a table that holds no route
//!   (with `table`: to that table).
//! - The tables: without `table`, each table a removed rule looked up and
//!   no rule looks up any more loses its routes through the interface, in
//!   both families. With `table` the table is the administrator's and is
//!   left alone, as ADD left it.
//!
//! The namespace, the interface, a rule or a route already gone is
//! success; a step that fails does not stop the next.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use libcni::netlink::rule::RESERVED_TABLES;
use libcni::netlink::{is_not_found, Netlink, Rule};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::IpFamily;
use libcni::{Error, ErrorList};

use crate::config::Conf;
use crate::{interface_addresses, NetnsLock};

pub fn del(args: &CmdArgs) -> Result<(), Error> {
    let Some(ns) = NetNs::open_container_if_present(Path::new(&args.netns))? else {
        return Ok(()); // the rules and tables went with the namespace
    };
    let table = Conf::for_teardown(args);
    let mut addrs: Vec<IpAddr> = args
        .prev_result_for_teardown()
        .map(|r| {
            interface_addresses(&r, &args.ifname)
                .iter()
                .map(|ip| ip.address.addr())
                .collect()
        })
        .unwrap_or_default();
    let _lock = NetnsLock::take(&ns)?;
    let mut nl = Netlink::open_in(&ns)?;
    let link = nl.link_by_name(&args.ifname)?.map(|l| l.index);
    if let Some(index) = link {
        addrs.extend(nl.addresses(Some(index), None)?.iter().map(|a| a.addr));
    }
    let orphans = addrs.is_empty();
    let held: BTreeSet<IpAddr> = if orphans {
        nl.addresses(None, None)?.iter().map(|a| a.addr).collect()
    } else {
        BTreeSet::new()
    };

    let mut errors = ErrorList::new();
    // Tables a removed rule looked up.
    let mut emptied: BTreeSet<u32> = BTreeSet::new();
    for family in IpFamily::BOTH {
        let Some(rules) = errors.record(nl.rules(family)) else {
            continue;
        };
        let tables_with_routes: BTreeSet<u32> = if orphans && table.is_none() {
            match errors.record(nl.routes_in(family, None)) {
                Some(routes) => routes.iter().map(|r| r.table).collect(),
                None => continue,
            }
        } else {
            BTreeSet::new()
        };
        let ours = |r: &Rule| {
            if table.is_some_and(|t| r.table != t) || RESERVED_TABLES.contains(&r.table) {
                return false;
            }
            if orphans {
                r.src.is_some_and(|(ip, _)| {
                    r.is_source_lookup_of(ip)
                        && !held.contains(&ip)
                        && (table.is_some() || !tables_with_routes.contains(&r.table))
                })
            } else {
                addrs.iter().any(|a| r.is_source_lookup_of(*a))
            }
        };
        for rule in rules.iter().filter(|r| ours(r)) {
            match nl.del_rule(rule) {
                Err(e) if !is_not_found(&e) => errors.push(e),
                _ => {
                    emptied.insert(rule.table);
                }
            }
        }
    }

    if let (None, Some(index)) = (table, link) {
        // A table another rule still looks up is still in use.
        let still_used = IpFamily::BOTH
            .into_iter()
            .map(|f| nl.rules(f))
            .collect::<Result<Vec<_>, _>>()
            .map(|all| {
                all.iter()
                    .flatten()
                    .map(|r| r.table)
                    .collect::<BTreeSet<u32>>()
            });
        let still_used = errors.record(still_used).unwrap_or_else(|| emptied.clone());
        for t in emptied.difference(&still_used) {
            let Some(routes) = errors.record(nl.link_routes_in(index, *t)) else {
                continue;
            };
            for r in &routes {
                match nl.del_kernel_route(r) {
                    Err(e) if !is_not_found(&e) => errors.push(e),
                    _ => {}
                }
            }
        }
    }
    errors.finish()
}
