//! CHECK: what ADD installed for each address of `CNI_IFNAME` in
//! `prevResult` is there. A rule `from <addr> lookup <table>` (the
//! configured table, or one that is not the kernel's own); without
//! `table`, that table holds the default route through the gateway (the
//! configured one of the family, else the address's) or, without a
//! gateway, some route through the interface; with `addSourceHints`, the
//! main table holds the address's subnet route with the address as its
//! preferred source. A difference is code 102 naming it.

use libcni::netlink::route::RT_TABLE_MAIN;
use libcni::netlink::rule::RESERVED_TABLES;
use libcni::netlink::{Netlink, Rule};
use libcni::skel::CmdArgs;
use libcni::Error;
use libcni::IpFamily;

use crate::add::addresses_to_route;
use crate::config::Conf;

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let prev = args.required_prev_result("CHECK needs the ADD result (prevResult)")?;
    let ips = addresses_to_route(&prev, &args.ifname)?;
    let ns = args.open_netns()?;
    let mut nl = Netlink::open_in(&ns)?;
    let ifname = &args.ifname;
    let Some(link) = nl.link_by_name(ifname)? else {
        return Error::check_failed(format!("container interface {ifname:?} not found"));
    };
    let mut rules: Vec<(IpFamily, Vec<Rule>)> = Vec::new();
    for ip in ips {
        let addr = ip.address.addr();
        let family = IpFamily::of(&addr);
        if !rules.iter().any(|(f, _)| *f == family) {
            rules.push((family, nl.rules(family)?));
        }
        let found = rules
            .iter()
            .filter(|(f, _)| *f == family)
            .flat_map(|(_, rs)| rs)
            .find(|r| {
                r.is_source_lookup_of(addr)
                    && match conf.table {
                        Some(t) => r.table == t,
                        None => !RESERVED_TABLES.contains(&r.table),
                    }
            });
        let Some(rule) = found else {
            let table = conf
                .table
                .map(|t| t.to_string())
                .unwrap_or_else(|| "a table of its own".into());
            return Error::check_failed(format!("no rule from {addr} lookup {table}"));
        };
        if conf.table.is_some() {
            continue;
        }
        let table = rule.table;
        let routes: Vec<_> = nl
            .link_routes_in(link.index, table)?
            .into_iter()
            .filter(|r| IpFamily::of(&r.route.dst) == family)
            .collect();
        match conf.gateway_for(addr).or(ip.gateway) {
            Some(gw) => {
                if !routes
                    .iter()
                    .any(|r| r.route.dst_len == 0 && r.route.gateway == Some(gw))
                {
                    return Error::check_failed(format!(
                        "table {table} (of the rule from {addr}) has no default route via {gw} through {ifname:?}"
                    ));
                }
            }
            None => {
                if routes.is_empty() {
                    return Error::check_failed(format!(
                        "table {table} (of the rule from {addr}) has no route through {ifname:?}"
                    ));
                }
            }
        }
        if conf.add_source_hints {
            let net = ip.address.truncate();
            let hinted = nl
                .link_routes_in(link.index, RT_TABLE_MAIN)?
                .iter()
                .any(|r| {
                    r.route.dst == net.addr()
                        && r.route.dst_len == net.prefix_len()
                        && r.prefsrc == Some(addr)
                });
            if !hinted {
                return Error::check_failed(format!(
                    "the main table has no route to {net} through {ifname:?} with source {addr} (addSourceHints)"
                ));
            }
        }
    }
    Ok(())
}
