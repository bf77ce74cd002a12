//! The `loopback` plugin: brings the container's loopback interface up on
//! ADD and down on DEL. containerd calls it for every pod.
//!
//! As the Go plugin (v1.x): it acts on `lo` whatever `CNI_IFNAME` names,
//! reports `lo`'s first IPv4 and first IPv6 address, and refuses an `lo`
//! that carries an address outside the loopback ranges (`127.0.0.0/8`,
//! `::1`): that is not the loopback interface a pod expects.

use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::{CniResult, Interface, IpConfig, IpPrefix};
use libcni::Error;
use libcni::IpFamily;
use std::net::IpAddr;
use std::path::Path;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI loopback plugin v…`).
pub const NAME: &str = "loopback";

/// The interface this plugin acts on, whatever `CNI_IFNAME` says.
pub const LO: &str = "lo";

pub struct Loopback;

fn is_loopback(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(family) => family.is_loopback(),
    }
}

impl Plugin for Loopback {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        let ns = args.open_netns()?;
        let mut nl = Netlink::open_in(&ns)?;
        let link = lookup(&mut nl, LO)?;
        // Checked before lo goes up (the Go plugin brings lo up, then
        // refuses), and again after: the kernel gives lo its addresses
        // when it comes up.
        foreign_address_check(&mut nl, link.index, &args.netns)?;
        nl.set_link_up(link.index)?;
        let addrs = foreign_address_check(&mut nl, link.index, &args.netns)?;
        // In a chain, pass the previous result through unchanged (as the Go
        // plugin does); alone, report lo with its first address of each family.
        if let Some(prev) = args.prev_result()? {
            return Ok(prev);
        }
        let first = |family: IpFamily| addrs.iter().find(|a| a.family() == family).copied();
        let ips = IpFamily::BOTH
            .map(first)
            .into_iter()
            .flatten()
            .map(|address| IpConfig {
                address,
                gateway: None,
                interface: Some(0),
            })
            .collect();
        Ok(CniResult {
            interfaces: vec![Interface {
                name: LO.to_string(),
                mac: "00:00:00:00:00:00".into(),
                sandbox: args.netns.clone(),
                ..Interface::default()
            }],
            ips,
            ..CniResult::default()
        })
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        // DEL succeeds when the namespace or the link is already gone.
        let Some(ns) = NetNs::open_if_present(Path::new(&args.netns))? else {
            return Ok(());
        };
        let mut nl = Netlink::open_in(&ns)?;
        match nl.link_by_name(LO)? {
            Some(link) => nl.set_link_down(link.index),
            None => Ok(()),
        }
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let ns = args.open_netns()?;
        let mut nl = Netlink::open_in(&ns)?;
        let link = lookup(&mut nl, LO)?;
        if !link.up {
            return Err(Error::CheckFailed(format!(
                "loopback interface {LO:?} is down"
            )));
        }
        Ok(())
    }

    /// Nothing to collect: `lo` lives and dies with its namespace, and
    /// nothing is kept on the node.
    fn gc(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }
}

/// `lo`'s addresses, or the refusal when one is not a loopback address.
fn foreign_address_check(
    nl: &mut Netlink,
    index: u32,
    netns: &str,
) -> Result<Vec<IpPrefix>, Error> {
    let addrs: Vec<IpPrefix> = nl
        .addresses(Some(index), None)?
        .into_iter()
        .filter_map(|a| IpPrefix::new(a.addr, a.prefix_len))
        .collect();
    if let Some(bad) = addrs.iter().find(|a| !is_loopback(a.addr())) {
        return Err(Error::Conflict(format!(
            "loopback interface {LO:?} in {netns} has the non-loopback address {}",
            bad.addr()
        )));
    }
    Ok(addrs)
}

fn lookup(nl: &mut Netlink, name: &str) -> Result<libcni::netlink::link::Link, Error> {
    nl.link_by_name(name)?.ok_or_else(|| {
        Error::InvalidEnv(format!(
            "CNI_NETNS: the container has no {name:?} interface"
        ))
    })
}
