//! IPAM for main plugins (what Go's `pkg/ipam` does): running the IPAM
//! delegate named by `ipam.type`, applying its result to the container
//! interface, the result's record of an interface, and the CHECK helpers
//! that compare a result (the container interface's record, MAC, addresses
//! and routes) with the kernel.
//!
//! [`configure_interface`] does, inside the container namespace, what the
//! Go reference does around `ipam.ConfigureIface`: the DAD and ARP sysctls,
//! IPv6 enabled on `lo` and the interface, the addresses, link up, and the
//! routes (a route without a gateway goes through the first gateway of its
//! family). Where the reference polls every 50 ms for duplicate address
//! detection to finish, this waits on the kernel's own notification
//! (`RTM_NEWADDR` on `RTNLGRP_IPV6_IFADDR`) with a bounded deadline.

use crate::calllog::Step;
use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::invoke;
use crate::netlink::notify::{Notifications, RTNLGRP_IPV6_IFADDR};
use crate::netlink::{self, Link, Netlink};
use crate::netns::NetNs;
use crate::sysctl::{self, Key};
use crate::types::{CniResult, Interface, IpConfig, IpPrefix, Route};
use crate::version::Version;
use crate::IpFamily;
use crate::{Error, ErrorResult, Result};

/// How long IPv6 duplicate address detection may take before ADD fails.
/// The kernel's default is a random delay of up to `rtr_solicit_delay`
/// (1 s) plus `dad_transmits` (1) times `retrans_time` (1 s).
pub const DAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the IPAM plugin `plugin` with `CNI_COMMAND=ADD` and `stdin` (the
/// plugin's whole config, unchanged) and reads its result; a result without
/// `cniVersion` is read as `version`. Errors keep the IPAM plugin's code.
pub fn exec_add(plugin: &str, stdin: &[u8], version: Version) -> Result<CniResult> {
    let out = invoke::delegate_as(Step::Ipam, plugin, "ADD", stdin)?;
    Ok(CniResult::from_slice(&out, version)?.0)
}

/// An IPAM result for a main plugin must give addresses: without any it is
/// the reference's code-999 error naming the plugin.
pub fn require_ips(plugin: &str, result: &CniResult) -> Result<()> {
    if !result.ips.is_empty() {
        return Ok(());
    }
    Err(Error::Plugin(ErrorResult {
        cni_version: String::new(),
        code: crate::error::code::INTERNAL,
        msg: format!("IPAM plugin {plugin:?} returned missing IP config"),
        details: String::new(),
    }))
}

/// IPAM DEL: releases what ADD allocated for this container.
pub fn exec_del(plugin: &str, stdin: &[u8]) -> Result<()> {
    invoke::delegate_as(Step::Ipam, plugin, "DEL", stdin).map(drop)
}

/// IPAM CHECK.
pub fn exec_check(plugin: &str, stdin: &[u8]) -> Result<()> {
    invoke::delegate_as(Step::Ipam, plugin, "CHECK", stdin).map(drop)
}

/// IPAM GC (stdin carries `cni.dev/valid-attachments`).
pub fn exec_gc(plugin: &str, stdin: &[u8]) -> Result<()> {
    invoke::delegate_as(Step::Ipam, plugin, "GC", stdin).map(drop)
}

/// IPAM STATUS.
pub fn exec_status(plugin: &str, stdin: &[u8]) -> Result<()> {
    invoke::delegate_as(Step::Ipam, plugin, "STATUS", stdin).map(drop)
}

/// How [`configure_interface`] treats IPv6 duplicate address detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfaceOptions {
    /// The config's `enabledad`: keep DAD (`accept_dad=1`, `enhanced_dad=1`)
    /// and return only once it has finished. Off: `accept_dad=0`, so IPv6
    /// addresses are usable at once.
    pub enable_dad: bool,
    /// Return only once no IPv6 address is tentative, also without DAD:
    /// with `accept_dad=0` the kernel still marks a new address tentative
    /// until the link is ready (carrier on), and a route with that address
    /// as its source (`src`) is refused until then. Implied by
    /// [`IfaceOptions::enable_dad`].
    pub settle: bool,
    /// Upper bound of the DAD wait.
    pub dad_timeout: Duration,
}

impl Default for IfaceOptions {
    fn default() -> Self {
        IfaceOptions {
            enable_dad: false,
            settle: false,
            dad_timeout: DAD_TIMEOUT,
        }
    }
}

/// The addresses of `result` that belong to interface `ifname`: those whose
/// `interface` index names it. An index out of range or naming another
/// interface is an error, as in Go; addresses without an index are skipped.
pub fn addresses_for<'a>(result: &'a CniResult, ifname: &str) -> Result<Vec<&'a IpConfig>> {
    let mut out = Vec::new();
    for (n, ip) in result.ips.iter().enumerate() {
        let Some(i) = ip.interface else { continue };
        match result.interfaces.get(i) {
            Some(iface) if iface.name == ifname => out.push(ip),
            _ => {
                return Err(Error::Decode(format!(
                    "result ips[{n}] ({}) has interface index {i}, which is not {ifname:?}",
                    ip.address
                )))
            }
        }
    }
    Ok(out)
}

/// The result's record of `link`: its name, MAC and MTU, in `sandbox`
/// (the container's `CNI_NETNS`, or empty for a link of the node).
pub fn interface_of(link: &Link, sandbox: &str) -> Interface {
    Interface {
        name: link.name.clone(),
        mac: link.mac_string(),
        mtu: Some(link.mtu),
        sandbox: sandbox.to_string(),
        ..Interface::default()
    }
}

/// Applies `result` to the interface `ifname` of the container namespace
/// `ns` (`nl` is a socket opened in it):
///
/// 1. sysctls: `accept_dad=0`, or `enhanced_dad=1` and `accept_dad=1` with
///    [`IfaceOptions::enable_dad`]; `arp_notify=1`; with an IPv6 address,
///    `disable_ipv6=0` on `lo` and the interface (written only when not
///    already 0) and `keep_addr_on_down=1`;
/// 2. the addresses whose `interface` index names `ifname`;
/// 3. link up (after the addresses, so `arp_notify` announces them);
/// 4. with DAD enabled (or [`IfaceOptions::settle`]), waits until no IPv6
///    address is tentative;
/// 5. the routes, each through its gateway or the first gateway of its
///    family, added like Go's `RouteAddEcmp`.
pub fn configure_interface(
    ns: &NetNs,
    nl: &mut Netlink,
    ifname: &str,
    result: &CniResult,
    opts: IfaceOptions,
) -> Result<()> {
    let link = nl.link_by_name(ifname)?.ok_or_else(|| {
        Error::kernel(
            format!("configure interface {ifname:?}: no such interface in the container"),
            io::Error::from_raw_os_error(libc::ENODEV),
        )
    })?;
    let ips = addresses_for(result, ifname)?;
    let has_v6 = holds_v6(&ips);

    ns.run(|| interface_sysctls(ifname, &ips, opts.enable_dad))??;

    // Subscribed before the addresses exist, so no DAD outcome is missed.
    let mut events = if (opts.enable_dad || opts.settle) && has_v6 {
        Some(Notifications::open_in(ns, &[RTNLGRP_IPV6_IFADDR])?)
    } else {
        None
    };

    for ip in &ips {
        nl.add_address(link.index, ip.address.addr(), ip.address.prefix_len())?;
    }
    nl.set_link_up(link.index)?;

    if let Some(events) = events.as_mut() {
        let v6: Vec<IpAddr> = ips
            .iter()
            .map(|ip| ip.address.addr())
            .filter(IpAddr::is_ipv6)
            .collect();
        wait_dad(nl, events, link.index, ifname, &v6, opts.dad_timeout)?;
    }

    let gw4 = ips.iter().find_map(|ip| ip.gateway.filter(IpAddr::is_ipv4));
    let gw6 = ips.iter().find_map(|ip| ip.gateway.filter(IpAddr::is_ipv6));
    for r in &result.routes {
        let gw = r.gw.or(if r.dst.is_ipv4() { gw4 } else { gw6 });
        nl.add_route_ecmp(&kernel_route(r, gw, link.index))?;
    }
    Ok(())
}

/// The kernel route for result route `r` through `gw` out of link `index`.
fn kernel_route(r: &Route, gw: Option<IpAddr>, index: u32) -> netlink::Route {
    let mut route = netlink::Route::new(r.dst.network(), r.dst.prefix_len(), gw, Some(index));
    route.mtu = r.mtu;
    route.advmss = r.advmss;
    route.priority = r.priority;
    if let Some(t) = r.table {
        route.table = t;
    }
    if let Some(s) = r.scope {
        route.scope = s;
    }
    route
}

/// Whether any of `ips` is an IPv6 address.
fn holds_v6(ips: &[&IpConfig]) -> bool {
    ips.iter().any(|ip| ip.address.family() == IpFamily::V6)
}

/// The container-side sysctls for the addresses `ips` that `ifname` is
/// about to get, on a thread inside the container namespace.
fn interface_sysctls(ifname: &str, ips: &[&IpConfig], enable_dad: bool) -> Result<()> {
    let has_v6 = holds_v6(ips);
    // IPv6 knobs are missing when the kernel runs without IPv6; with no
    // IPv6 address to configure that is fine.
    let v6_knob = |knob: &str, value: &str| -> Result<()> {
        match sysctl::write_here(&Key::ipv6_conf(ifname, knob)?, value) {
            Err(e) if sysctl::is_missing(&e) && !has_v6 => Ok(()),
            other => other,
        }
    };
    if enable_dad {
        v6_knob("enhanced_dad", "1")?;
        v6_knob("accept_dad", "1")?;
    } else {
        v6_knob("accept_dad", "0")?;
    }
    sysctl::write_here(&Key::ipv4_conf(ifname, "arp_notify")?, "1")?;
    if has_v6 {
        for iface in ["lo", ifname] {
            sysctl::ensure_here(&Key::ipv6_conf(iface, "disable_ipv6")?, "0")?;
        }
        sysctl::write_here(&Key::ipv6_conf(ifname, "keep_addr_on_down")?, "1")?;
    }
    Ok(())
}

/// Waits until none of the IPv6 addresses `addrs` of link `index` is
/// tentative: reads them, and while one still is, waits for the kernel's
/// next address notification on `events` (subscribed to
/// [`RTNLGRP_IPV6_IFADDR`] in the same namespace before the addresses were
/// added or the link came up) and reads again. Fails when DAD finds an
/// address in use (`EADDRINUSE`), or after `timeout` (`ETIMEDOUT`).
pub fn wait_dad(
    nl: &mut Netlink,
    events: &mut Notifications,
    index: u32,
    ifname: &str,
    addrs: &[IpAddr],
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let present = nl.addresses(Some(index), Some(IpFamily::V6))?;
        let mut pending = Vec::new();
        for want in addrs {
            // An address that is not listed (yet) counts as pending.
            match present.iter().find(|a| a.addr == *want) {
                Some(a) if a.is_dad_failed() => {
                    return Err(Error::kernel(
                        format!(
                            "IPv6 duplicate address detection of {want} on {ifname:?}: \
                             the address is already in use on the link"
                        ),
                        io::Error::from_raw_os_error(libc::EADDRINUSE),
                    ))
                }
                Some(a) if !a.is_tentative() => {}
                _ => pending.push(*want),
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        if !events.wait_until(deadline)? {
            let list: Vec<String> = pending.iter().map(IpAddr::to_string).collect();
            return Err(Error::kernel(
                format!(
                    "IPv6 duplicate address detection of {} on {ifname:?} did not finish \
                     within {} s",
                    list.join(", "),
                    timeout.as_secs()
                ),
                io::Error::from_raw_os_error(libc::ETIMEDOUT),
            ));
        }
    }
}

/// CHECK: the record of the container interface `ifname` in sandbox
/// `netns` in `prev`; its absence is [`Error::CheckFailed`].
pub fn container_interface<'a>(
    prev: &'a CniResult,
    ifname: &str,
    netns: &str,
) -> Result<&'a Interface> {
    prev.interfaces
        .iter()
        .find(|i| i.name == ifname && i.sandbox == netns)
        .ok_or_else(|| {
            Error::CheckFailed(format!(
                "prevResult has no interface {ifname:?} in sandbox {netns:?}"
            ))
        })
}

/// The addresses of `prev` for the container interface `ifname` in sandbox
/// `netns`: those whose `interface` index names it, and those without an
/// index (an index out of range names no interface, so not this one).
pub fn container_addresses<'a>(
    prev: &'a CniResult,
    ifname: &str,
    netns: &str,
) -> Vec<&'a IpConfig> {
    prev.ips
        .iter()
        .filter(|ip| match ip.interface {
            None => true,
            Some(i) => prev
                .interfaces
                .get(i)
                .is_some_and(|x| x.name == ifname && x.sandbox == netns),
        })
        .collect()
}

/// CHECK: `link` has the MAC its record `want` gives (when it gives one,
/// in either case); `what` names the link in the [`Error::CheckFailed`].
pub fn check_mac(what: &str, want: &Interface, link: &Link) -> Result<()> {
    let now = link.mac_string();
    if want.mac.is_empty() || want.mac.eq_ignore_ascii_case(&now) {
        return Ok(());
    }
    Err(Error::CheckFailed(format!(
        "{what} has MAC {now}, prevResult says {}",
        want.mac
    )))
}

/// CHECK: every address of `ips` is on link `ifname` with its prefix length,
/// and (below /32 and /128) its prefix route is in the main table, as Go's
/// `ValidateExpectedInterfaceIPs`, or in a table a rule `from <address>`
/// looks up (where source-based routing, the sbr plugin, moved it), or in
/// the table of the VRF the link is a member of (the vrf plugin's).
/// Differences are [`Error::CheckFailed`].
pub fn check_addresses(nl: &mut Netlink, ifname: &str, ips: &[&IpConfig]) -> Result<()> {
    let link = nl
        .link_by_name(ifname)?
        .ok_or_else(|| Error::CheckFailed(format!("container interface {ifname:?} not found")))?;
    let present = nl.addresses(Some(link.index), None)?;
    // The table of the VRF the link is a member of, where its prefix
    // routes are.
    let vrf_table = match link.master {
        Some(m) => nl.link_details(m)?.and_then(|d| d.vrf_table),
        None => None,
    };
    // Every table's routes, per family.
    let mut routes: [Option<Vec<netlink::Route>>; 2] = [None, None];
    for ip in ips {
        let (addr, len) = (ip.address.addr(), ip.address.prefix_len());
        if !present
            .iter()
            .any(|a| a.addr == addr && a.prefix_len == len)
        {
            let has: Vec<String> = present
                .iter()
                .filter(|a| a.scope == 0)
                .map(|a| format!("{}/{}", a.addr, a.prefix_len))
                .collect();
            return Err(Error::CheckFailed(format!(
                "address {} not found on {ifname:?} (it has [{}])",
                ip.address,
                has.join(", ")
            )));
        }
        let full = if addr.is_ipv4() { 32 } else { 128 };
        if len < full {
            let family = IpFamily::of(&addr);
            let slot = &mut routes[usize::from(family == IpFamily::V6)];
            if slot.is_none() {
                *slot = Some(nl.routes_in(family, None)?);
            }
            let network = ip.address.network();
            let in_table = |table: u32| {
                slot.as_ref().is_some_and(|rs| {
                    rs.iter().any(|r| {
                        r.table == table
                            && r.dst == network
                            && r.dst_len == len
                            && r.oif == Some(link.index)
                    })
                })
            };
            let found = in_table(netlink::route::RT_TABLE_MAIN)
                || vrf_table.is_some_and(in_table)
                || source_tables(nl, family, Some(addr))?
                    .into_iter()
                    .any(in_table);
            if !found {
                return Err(Error::CheckFailed(format!(
                    "no route to {}/{len} through {ifname:?} for address {}",
                    network, ip.address
                )));
            }
        }
    }
    Ok(())
}

/// CHECK: every route of `routes` is in its table (the main table unless
/// it names one, or then a table a rule `from <address>` looks up, where
/// source-based routing moved it, or a VRF's table, where the vrf plugin
/// moved it) with its destination and, when it has
/// one, its gateway, as Go's `ValidateExpectedRoute`. Differences are
/// [`Error::CheckFailed`].
pub fn check_routes(nl: &mut Netlink, routes: &[Route]) -> Result<()> {
    let mut cache: Vec<(IpFamily, Vec<netlink::Route>)> = Vec::new();
    for want in routes {
        let family = IpFamily::of(&want.dst.addr());
        if !cache.iter().any(|(f, _)| *f == family) {
            cache.push((family, nl.routes_in(family, None)?));
        }
        let table = want.table.unwrap_or(netlink::route::RT_TABLE_MAIN);
        let dst = want.dst.network();
        let in_table = |table: u32| {
            cache
                .iter()
                .filter(|(f, _)| *f == family)
                .flat_map(|(_, rs)| rs)
                .any(|r| {
                    r.table == table
                        && r.dst == dst
                        && r.dst_len == want.dst.prefix_len()
                        && want.gw.is_none_or(|gw| r.gateway == Some(gw))
                })
        };
        let found = in_table(table)
            || (want.table.is_none()
                && (source_tables(nl, family, None)?.into_iter().any(in_table)
                    || vrf_tables(nl)?.into_iter().any(in_table)));
        if !found {
            let via = want.gw.map(|g| format!(" via {g}")).unwrap_or_default();
            return Err(Error::CheckFailed(format!(
                "route {}{via} not found in routing table {table}",
                IpPrefix::new(dst, want.dst.prefix_len()).unwrap_or(want.dst)
            )));
        }
    }
    Ok(())
}

/// The tables of the VRF devices of the namespace: where the vrf plugin
/// moves the routes of the interfaces that join one.
fn vrf_tables(nl: &mut Netlink) -> Result<Vec<u32>> {
    let mut tables = Vec::new();
    for l in nl.links()? {
        if l.kind.as_deref() == Some("vrf") {
            if let Some(t) = nl.link_details(l.index)?.and_then(|d| d.vrf_table) {
                tables.push(t);
            }
        }
    }
    Ok(tables)
}

/// The tables that rules `from <addr>` (a host prefix and no other
/// selector) look up, of any such rule when `addr` is `None`: where
/// source-based routing moves the routes of the interface holding it.
fn source_tables(nl: &mut Netlink, family: IpFamily, addr: Option<IpAddr>) -> Result<Vec<u32>> {
    Ok(nl
        .rules(family)?
        .into_iter()
        .filter(|r| match (addr, r.src) {
            (Some(a), _) => r.is_source_lookup_of(a),
            (None, Some((src, _))) => r.is_source_lookup_of(src),
            (None, None) => false,
        })
        .map(|r| r.table)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    fn result(sandbox: &str) -> CniResult {
        CniResult {
            interfaces: vec![
                Interface {
                    name: "br0".into(),
                    ..Interface::default()
                },
                Interface {
                    name: "veth0".into(),
                    ..Interface::default()
                },
                Interface {
                    name: "eth0".into(),
                    sandbox: sandbox.into(),
                    ..Interface::default()
                },
            ],
            ips: vec![
                IpConfig {
                    address: "10.77.0.5/24".parse().unwrap(),
                    gateway: Some("10.77.0.1".parse().unwrap()),
                    interface: Some(2),
                },
                IpConfig {
                    address: "fd77::5/64".parse().unwrap(),
                    gateway: Some("fd77::1".parse().unwrap()),
                    interface: Some(2),
                },
            ],
            routes: vec![
                Route::new("0.0.0.0/0".parse().unwrap(), None),
                Route::new(
                    "10.99.0.0/16".parse().unwrap(),
                    Some("10.77.0.254".parse().unwrap()),
                ),
                Route::new("::/0".parse().unwrap(), None),
            ],
            ..CniResult::default()
        }
    }

    #[test]
    fn ipam_addresses_for_checks_the_interface_index() {
        let mut r = result("/x");
        assert_eq!(addresses_for(&r, "eth0").unwrap().len(), 2);
        r.ips[0].interface = None;
        assert_eq!(addresses_for(&r, "eth0").unwrap().len(), 1);
        r.ips[1].interface = Some(1);
        let e = addresses_for(&r, "eth0").unwrap_err();
        assert!(e.to_string().contains("interface index 1"), "{e}");
        r.ips[1].interface = Some(9);
        assert!(addresses_for(&r, "eth0").is_err());
    }

    #[test]
    fn ipam_container_records_are_found_by_name_and_sandbox() {
        let mut r = result("/pod");
        assert_eq!(
            container_interface(&r, "eth0", "/pod").unwrap().name,
            "eth0"
        );
        let e = container_interface(&r, "eth0", "/other").unwrap_err();
        assert_eq!(
            (e.code(), e.to_string()),
            (
                102,
                "prevResult has no interface \"eth0\" in sandbox \"/other\"".into()
            )
        );
        r.ips[0].interface = None;
        r.ips[1].interface = Some(1);
        r.ips.push(IpConfig {
            address: "10.9.0.5/24".parse().unwrap(),
            gateway: None,
            interface: Some(9),
        });
        let got: Vec<String> = container_addresses(&r, "eth0", "/pod")
            .iter()
            .map(|ip| ip.address.to_string())
            .collect();
        assert_eq!(got, ["10.77.0.5/24"]);
        assert_eq!(container_addresses(&r, "eth0", "/other").len(), 1);

        let link = Link {
            index: 2,
            name: "eth0".into(),
            mtu: 1500,
            mac: Some([0x0a, 0, 0, 0, 0, 0xab]),
            hw_addr: vec![0x0a, 0, 0, 0, 0, 0xab],
            up: true,
            ..Link::default()
        };
        let record = interface_of(&link, "/pod");
        assert_eq!(
            (record.mac.as_str(), record.mtu, record.sandbox.as_str()),
            ("0a:00:00:00:00:ab", Some(1500), "/pod")
        );
        let mut want = r.interfaces[2].clone();
        check_mac("container interface \"eth0\"", &want, &link).unwrap();
        want.mac = "0A:00:00:00:00:AB".into();
        check_mac("container interface \"eth0\"", &want, &link).unwrap();
        want.mac = "0a:00:00:00:00:01".into();
        let e = check_mac("container interface \"eth0\"", &want, &link).unwrap_err();
        assert_eq!(
            (e.code(), e.to_string()),
            (
                102,
                "container interface \"eth0\" has MAC 0a:00:00:00:00:ab, \
                 prevResult says 0a:00:00:00:00:01"
                    .into()
            )
        );
        assert!(require_ips("host-local", &r).is_ok());
        r.ips.clear();
        let e = require_ips("host-local", &r).unwrap_err();
        assert_eq!(
            (e.code(), e.to_string()),
            (
                999,
                "IPAM plugin \"host-local\" returned missing IP config".into()
            )
        );
    }

    #[test]
    fn ipam_kernel_route_keeps_the_result_fields() {
        let mut r = Route::new("10.1.2.3/16".parse().unwrap(), None);
        r.mtu = Some(1400);
        r.table = Some(100);
        r.priority = Some(7);
        let k = kernel_route(&r, Some("10.1.0.1".parse().unwrap()), 4);
        assert_eq!(k.dst, "10.1.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(
            (k.dst_len, k.mtu, k.table, k.priority, k.oif, k.scope),
            (16, Some(1400), 100, Some(7), Some(4), 0)
        );
    }

    /// A veth pair: `veth0` in `node`, `eth0` in `pod`, the node end up.
    fn pair(node: &NetNs, pod: &NetNs) -> (Netlink, Netlink) {
        let mut host = Netlink::open_in(node).unwrap();
        let c = Netlink::open_in(pod).unwrap();
        host.add_veth("veth0", None, "eth0", pod, None).unwrap();
        let h = host.link_by_name("veth0").unwrap().unwrap();
        host.set_link_up(h.index).unwrap();
        (host, c)
    }

    #[test]
    fn ipam_configure_interface_then_check() {
        if !privileged("ipam_configure_interface_then_check") {
            return;
        }
        let (node, pod) = (new_netns(), new_netns());
        let (_host, mut c) = pair(&node, &pod);
        let r = result("/pod");
        let mut events = crate::netlink::notify::Notifications::open_in(
            &pod,
            &[crate::netlink::notify::RTNLGRP_IPV6_IFADDR],
        )
        .unwrap();
        configure_interface(&pod, &mut c, "eth0", &r, IfaceOptions::default()).unwrap();

        let link = c.link_by_name("eth0").unwrap().unwrap();
        assert!(link.up);
        let read = |k: &str| sysctl::read(&pod, &Key::new(k).unwrap()).unwrap();
        assert_eq!(read("net/ipv6/conf/eth0/accept_dad"), "0");
        assert_eq!(read("net/ipv4/conf/eth0/arp_notify"), "1");
        assert_eq!(read("net/ipv6/conf/eth0/keep_addr_on_down"), "1");
        assert_eq!(read("net/ipv6/conf/eth0/disable_ipv6"), "0");
        assert_eq!(read("net/ipv6/conf/lo/disable_ipv6"), "0");
        // accept_dad=0: no DAD runs, so the IPv6 address is usable as soon
        // as the kernel has seen the carrier come on (its link watcher runs
        // asynchronously: on a loaded machine that can lag the link-up).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let v6 = c.addresses(Some(link.index), Some(IpFamily::V6)).unwrap();
            let a = v6.iter().find(|a| a.addr.to_string() == "fd77::5").unwrap();
            assert!(!a.is_dad_failed(), "{a:?}");
            if !a.is_tentative() {
                break;
            }
            assert!(
                events.wait_until(deadline).unwrap(),
                "still tentative: {a:?}"
            );
        }

        let v4 = c.routes(IpFamily::V4).unwrap();
        let default = v4.iter().find(|r| r.dst_len == 0).unwrap();
        assert_eq!(default.gateway, Some("10.77.0.1".parse().unwrap()));
        assert_eq!(default.oif, Some(link.index));
        let via = v4.iter().find(|r| r.dst_len == 16).unwrap();
        assert_eq!(via.gateway, Some("10.77.0.254".parse().unwrap()));
        let v6r = c.routes(IpFamily::V6).unwrap();
        assert!(v6r
            .iter()
            .any(|r| r.dst_len == 0 && r.gateway == Some("fd77::1".parse().unwrap())));

        let ips = addresses_for(&r, "eth0").unwrap();
        check_addresses(&mut c, "eth0", &ips).unwrap();
        check_routes(&mut c, &r.routes).unwrap();

        // Someone removes the IPv4 address (and with it the routes through it).
        c.del_address(link.index, "10.77.0.5".parse().unwrap(), 24)
            .unwrap();
        let e = check_addresses(&mut c, "eth0", &ips).unwrap_err();
        assert_eq!(e.code(), 102);
        assert!(
            e.to_string()
                .starts_with("address 10.77.0.5/24 not found on \"eth0\""),
            "{e}"
        );
        let e = check_routes(&mut c, &r.routes).unwrap_err();
        assert_eq!(e.code(), 102);
        assert_eq!(
            e.to_string(),
            "route 0.0.0.0/0 not found in routing table 254"
        );
        let e = check_addresses(&mut c, "eth1", &ips).unwrap_err();
        assert_eq!(e.to_string(), "container interface \"eth1\" not found");
    }

    #[test]
    fn ipam_checks_find_routes_that_source_based_routing_moved() {
        if !privileged("ipam_checks_find_routes_that_source_based_routing_moved") {
            return;
        }
        let (node, pod) = (new_netns(), new_netns());
        let (_host, mut c) = pair(&node, &pod);
        let r = result("/pod");
        configure_interface(&pod, &mut c, "eth0", &r, IfaceOptions::default()).unwrap();
        let link = c.link_by_name("eth0").unwrap().unwrap();
        let ips = addresses_for(&r, "eth0").unwrap();
        // What sbr does: the IPv4 routes of eth0 move to table 100.
        let main = c
            .link_routes_in(link.index, netlink::route::RT_TABLE_MAIN)
            .unwrap();
        for k in main.iter().filter(|k| k.route.dst.is_ipv4()) {
            c.replace_route_in(k, 100).unwrap();
            c.del_kernel_route(k).unwrap();
        }
        // Without a rule leading there, they are missing.
        let e = check_addresses(&mut c, "eth0", &ips).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("no route to 10.77.0.0/24 through \"eth0\""),
            "{e}"
        );
        assert_eq!(
            check_routes(&mut c, &r.routes).unwrap_err().to_string(),
            "route 0.0.0.0/0 not found in routing table 254"
        );
        // A rule from another address does not lead there for the address.
        let other = netlink::Rule::from_source("10.77.0.6".parse().unwrap(), 100);
        c.add_rule(&other).unwrap();
        assert!(check_addresses(&mut c, "eth0", &ips).is_err());
        c.del_rule(&other).unwrap();
        c.add_rule(&netlink::Rule::from_source(
            "10.77.0.5".parse().unwrap(),
            100,
        ))
        .unwrap();
        check_addresses(&mut c, "eth0", &ips).unwrap();
        check_routes(&mut c, &r.routes).unwrap();
        // A route that names its table is looked for there only.
        let mut pinned = r.routes.clone();
        pinned.iter_mut().for_each(|x| x.table = Some(254));
        assert!(check_routes(&mut c, &pinned).is_err());
    }

    #[test]
    fn ipam_configure_interface_waits_for_dad() {
        if !privileged("ipam_configure_interface_waits_for_dad") {
            return;
        }
        let (node, pod) = (new_netns(), new_netns());
        let (_host, mut c) = pair(&node, &pod);
        let mut r = result("/pod");
        r.ips.remove(0);
        r.routes.clear();
        let opts = IfaceOptions {
            enable_dad: true,
            ..IfaceOptions::default()
        };
        configure_interface(&pod, &mut c, "eth0", &r, opts).unwrap();
        let link = c.link_by_name("eth0").unwrap().unwrap();
        let v6 = c.addresses(Some(link.index), Some(IpFamily::V6)).unwrap();
        let a = v6.iter().find(|a| a.addr.to_string() == "fd77::5").unwrap();
        assert!(!a.is_tentative() && !a.is_dad_failed(), "{a:?}");
        let read = |k: &str| sysctl::read(&pod, &Key::new(k).unwrap()).unwrap();
        assert_eq!(read("net/ipv6/conf/eth0/accept_dad"), "1");
        assert_eq!(read("net/ipv6/conf/eth0/enhanced_dad"), "1");
    }

    #[test]
    fn ipam_wait_dad_times_out_with_a_clear_error() {
        if !privileged("ipam_wait_dad_times_out_with_a_clear_error") {
            return;
        }
        let (node, pod) = (new_netns(), new_netns());
        let (mut host, mut c) = pair(&node, &pod);
        // The node end goes down: no carrier, so DAD cannot start.
        let h = host.link_by_name("veth0").unwrap().unwrap();
        host.set_link_down(h.index).unwrap();
        let link = c.link_by_name("eth0").unwrap().unwrap();
        let mut events = Notifications::open_in(&pod, &[RTNLGRP_IPV6_IFADDR]).unwrap();
        c.set_link_up(link.index).unwrap();
        let ip: IpAddr = "fd78::5".parse().unwrap();
        c.add_address(link.index, ip, 64).unwrap();
        let e = wait_dad(
            &mut c,
            &mut events,
            link.index,
            "eth0",
            &[ip],
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert_eq!(e.code(), 100);
        assert!(
            e.to_string().starts_with(
                "IPv6 duplicate address detection of fd78::5 on \"eth0\" did not finish"
            ),
            "{e}"
        );
    }
}
