//! The `loopback` plugin: brings the container's loopback interface up on
//! ADD and down on DEL. containerd calls it for every pod.

use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::{CniResult, Interface, IpConfig, IpPrefix};
use libcni::Error;
use std::path::Path;

/// What the plugin prints when run without `CNI_COMMAND`.
pub const ABOUT: &str = "CNI loopback plugin (Rust CNI suite)";

pub struct Loopback;

impl Plugin for Loopback {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        let ns = args.open_netns()?;
        let mut nl = Netlink::open_in(&ns)?;
        let link = lookup(&mut nl, &args.ifname)?;
        nl.set_link_up(link.index)?;
        // In a chain, pass the previous result through unchanged (as the Go
        // plugin does); alone, report the interface and its addresses.
        if let Some(prev) = args.prev_result()? {
            return Ok(prev);
        }
        let ips = nl
            .addresses(Some(link.index), None)?
            .into_iter()
            .filter_map(|a| IpPrefix::new(a.addr, a.prefix_len))
            .map(|address| IpConfig {
                address,
                gateway: None,
                interface: Some(0),
            })
            .collect();
        Ok(CniResult {
            interfaces: vec![Interface {
                name: args.ifname.clone(),
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
        match nl.link_by_name(&args.ifname)? {
            Some(link) => nl.set_link_down(link.index),
            None => Ok(()),
        }
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let ns = args.open_netns()?;
        let mut nl = Netlink::open_in(&ns)?;
        let link = lookup(&mut nl, &args.ifname)?;
        if !link.up {
            return Err(Error::CheckFailed(format!(
                "loopback interface {:?} is down",
                args.ifname
            )));
        }
        Ok(())
    }
}

fn lookup(nl: &mut Netlink, name: &str) -> Result<libcni::netlink::link::Link, Error> {
    nl.link_by_name(name)?.ok_or_else(|| {
        Error::InvalidEnv(format!(
            "CNI_IFNAME {name:?}: no such interface in the container"
        ))
    })
}
