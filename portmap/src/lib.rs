//! The `portmap` plugin: forwards host ports to the container, as a chained
//! plugin after the one that gave the container its addresses.
//!
//! `runtimeConfig.portMappings` (capability `portMappings`) lists the
//! mappings. [`backend`] writes them on the backend the config picks: on
//! nftables ([`nft`]), or on iptables with the Go plugin's exact chains
//! ([`ipt`]: over netlink on iptables-nft, through `iptables-restore` on
//! legacy iptables), with the conditions [`conditions`] parses. With no
//! `backend` key the default is the Go v1.9 plugin's: iptables wherever the
//! node has it, nftables where it has none
//! (`libcni::netfilter::default_backend`). Everything is validated before anything is
//! touched; DEL and GC find a container's state by its ID alone.

pub mod backend;
pub mod conditions;
pub mod config;
pub mod ipt;
pub mod ipt_netlink;
pub mod nft;
pub mod node_state;
pub mod spec;

use std::net::IpAddr;

use crate::spec::{PortMapSpec, Protocol, RemovedPort};
use libcni::fault;
use libcni::netfilter::{conntrack, nfnetlink::NfNetlink, Backend, Owner};
use libcni::netlink::Netlink;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::{CniResult, IpPrefix};
use libcni::IpFamily;
use libcni::{sysctl, ErrorList, Result};

use config::PortMapConf;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI portmap plugin v…`).
pub const NAME: &str = "portmap";

pub struct PortMap;

impl Plugin for PortMap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult> {
        let conf = PortMapConf::parse(args)?;
        let prev = args.required_prev_result(
            "missing: portmap must run as a chained plugin after one that sets addresses",
        )?;
        if conf.mappings.is_empty() {
            return Ok(prev);
        }
        let (v4, v6) = container_addresses(&prev, &args.ifname);
        conf.check_families(v4, v6)?;
        let spec = conf.spec(args, v4, v6);
        let backend = conf.backend();
        fault::point("portmap/before-commit");
        backend::add(backend, &spec)?;
        fault::point("portmap/after-commit");
        if spec.snat {
            if let Some(c) = v4 {
                if spec.mappings.iter().any(|m| m.applies_to(IpFamily::V4)) {
                    enable_route_localnet(c.addr())?;
                }
            }
        }
        // New mappings must not be shadowed by conntrack entries of earlier
        // UDP flows to the same host ports. Failures only cost that, as in
        // the Go plugin: they are reported on stderr.
        if let Err(e) = flush_udp_conntrack(&spec) {
            eprintln!("portmap: removing stale UDP conntrack entries: {e}");
        }
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<()> {
        let conf = teardown_conf(args);
        let owner = Owner::new(&args.conf.name, &args.container_id);
        let mut errors = ErrorList::new();
        let mut udp_ports = backend::del(&owner, teardown_backend(conf.as_ref()), &mut errors);
        let mappings = conf.as_ref().map(|c| c.mappings.as_slice()).unwrap_or(&[]);
        for m in mappings.iter().filter(|m| m.protocol == Protocol::Udp) {
            for family in IpFamily::BOTH {
                if m.applies_to(family) {
                    udp_ports.push(RemovedPort {
                        family,
                        protocol: conntrack::IPPROTO_UDP,
                        port: m.host_port,
                    });
                }
            }
        }
        if let Err(e) = flush_ports(&udp_ports) {
            eprintln!("portmap: removing stale UDP conntrack entries: {e}");
        }
        errors.finish_kernel("portmap DEL")
    }

    fn check(&self, args: &CmdArgs) -> Result<()> {
        let conf = PortMapConf::parse(args)?;
        let prev = args.required_prev_result("missing: CHECK needs the result of the ADD")?;
        if conf.mappings.is_empty() {
            return Ok(());
        }
        let (v4, v6) = container_addresses(&prev, &args.ifname);
        let spec = conf.spec(args, v4, v6);
        backend::check(conf.backend(), &spec)
    }

    fn gc(&self, args: &CmdArgs) -> Result<()> {
        let backend = teardown_backend(teardown_conf(args).as_ref());
        let Some(valid) = args.gc_valid_attachments("portmap")? else {
            return Ok(());
        };
        let mut errors = ErrorList::new();
        backend::gc(&args.conf.name, &valid, backend, &mut errors);
        errors.finish_kernel("portmap GC")
    }
}

/// The config for a teardown (DEL, GC): `None` when it cannot be read,
/// said on stderr. Everything portmap installs is found by the container's
/// owner tag and the iptables chain named after it, so the teardown needs
/// no mapping; with the mappings at hand it is only quicker.
fn teardown_conf(args: &CmdArgs) -> Option<PortMapConf> {
    match PortMapConf::parse(args) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!(
                "portmap: the config cannot be read ({e}); removing what the container owns by its ID"
            );
            None
        }
    }
}

/// The backend a teardown treats as chosen: the config's, or nftables when
/// the config cannot be read, so that legacy iptables is visited only where
/// iptables-nft shows that it may hold the container's rules.
fn teardown_backend(conf: Option<&PortMapConf>) -> Backend {
    conf.map_or(Backend::Nftables, PortMapConf::backend)
}

/// The first IPv4 and IPv6 address of the container interface `ifname`, as
/// the Go plugin picks them: addresses with no interface index, or whose
/// interface is `ifname` inside a sandbox.
fn container_addresses(prev: &CniResult, ifname: &str) -> (Option<IpPrefix>, Option<IpPrefix>) {
    let mut v4 = None;
    let mut v6 = None;
    for ip in &prev.ips {
        if let Some(i) = ip.interface {
            match prev.interfaces.get(i) {
                Some(iface) if iface.name == ifname && !iface.sandbox.is_empty() => {}
                Some(_) => continue,
                None => {}
            }
        }
        let slot = if ip.address.is_ipv4() {
            &mut v4
        } else {
            &mut v6
        };
        if slot.is_none() {
            *slot = Some(ip.address);
        }
    }
    (v4, v6)
}

/// Sets `route_localnet` on the interface that routes to the container, so
/// that connections to 127.0.0.1:hostPort may leave through it (they are
/// masqueraded on the way out).
fn enable_route_localnet(container: IpAddr) -> Result<()> {
    let mut nl = Netlink::open()?;
    let best = nl
        .routes(IpFamily::V4)?
        .into_iter()
        .filter(|r| r.oif.is_some())
        .filter(|r| IpPrefix::new(r.dst, r.dst_len).is_some_and(|p| p.contains(container)))
        .max_by_key(|r| r.dst_len);
    let Some(index) = best.and_then(|r| r.oif) else {
        return Ok(());
    };
    let Some(link) = nl.link_by_index(index)? else {
        return Ok(());
    };
    let key = sysctl::Key::ipv4_conf(&link.name, "route_localnet")?;
    sysctl::ensure_here(&key, "1").map(|_| ())
}

/// Flushes the UDP conntrack entries of `spec`'s UDP host ports in each
/// family the container has an address in.
fn flush_udp_conntrack(spec: &PortMapSpec) -> Result<()> {
    let mut ports = Vec::new();
    for m in spec.mappings.iter().filter(|m| m.protocol == Protocol::Udp) {
        for family in IpFamily::BOTH {
            if spec.container(family).is_some() && m.applies_to(family) {
                ports.push(RemovedPort {
                    family,
                    protocol: conntrack::IPPROTO_UDP,
                    port: m.host_port,
                });
            }
        }
    }
    flush_ports(&ports)
}

/// Deletes the UDP conntrack entries to `ports` (all UDP), one dump per
/// family.
fn flush_ports(ports: &[RemovedPort]) -> Result<()> {
    if ports.is_empty() {
        return Ok(());
    }
    let mut nl = NfNetlink::open()?;
    for family in IpFamily::BOTH {
        let mut list: Vec<u16> = ports
            .iter()
            .filter(|p| p.family == family)
            .map(|p| p.port)
            .collect();
        list.sort_unstable();
        list.dedup();
        conntrack::delete_by_dst_port(&mut nl, family, conntrack::IPPROTO_UDP, &list)?;
    }
    Ok(())
}
