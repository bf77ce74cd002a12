//! The `vrf` meta plugin: chained after the plugin that gave the container
//! `CNI_IFNAME`, it makes the interface a member of the VRF `vrfname` in
//! the container (creating the VRF, with `table` or the lowest free
//! table, or reusing it) and moves the interface's routes into the VRF's
//! table, so several interfaces can carry overlapping networks, each in
//! its own VRF. Several interfaces share one VRF; the VRF is deleted when
//! the last one leaves. Behaviour follows the Go reference
//! (containernetworking/plugins `plugins/meta/vrf`, v1.9); the deliberate
//! differences are in the README.
//!
//! - `config`: the keys, validated before anything is touched;
//! - `device`: the VRF device (find, create, table, members);
//! - `add`: joining, with the addresses and routes, and a rollback.

pub mod add;
pub mod config;
pub mod device;

use std::path::Path;

use libcni::netlink::link_kinds::VRF_SUPPORT;
use libcni::netlink::{is_not_found, Netlink};
use libcni::netns::{NetNs, NetnsLock};
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::version::{Version, ALL};
use libcni::{attach, Error, ErrorList};

use crate::config::Conf;
use crate::device::Found;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI vrf plugin v…`).
pub const NAME: &str = "vrf";

pub struct Vrf;

impl Plugin for Vrf {
    /// From 0.3.1, as the reference: a meta plugin needs `prevResult`.
    fn supported_versions(&self) -> &'static [Version] {
        &ALL[3..]
    }

    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    /// Best effort, from the kernel's state: `CNI_IFNAME` leaves the VRF
    /// `vrfname` (if the namespace, the VRF and the interface are still
    /// there and the interface is its member), and the VRF goes when no
    /// member is left. DEL reads only `vrfname`, leniently.
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        let Some(name) = Conf::for_teardown(args) else {
            return Ok(());
        };
        let Some(ns) = NetNs::open_container_if_present(Path::new(&args.netns))? else {
            return Ok(());
        };
        let _lock = NetnsLock::take(&ns)?;
        let mut nl = Netlink::open_in(&ns)?;
        let Found::Vrf(vrf) = device::find(&mut nl, &name)? else {
            return Ok(());
        };
        let mut errors = ErrorList::new();
        if let Some(link) = nl.link_by_name(&args.ifname)? {
            if link.master == Some(vrf.link.index) {
                match nl.set_master(link.index, 0) {
                    Err(e) if !is_not_found(&e) => errors.push(e),
                    _ => {}
                }
            }
        }
        if let Some(members) = errors.record(device::members(&mut nl, &vrf)) {
            if members.is_empty() {
                match nl.delete_link(vrf.link.index) {
                    Err(e) if !is_not_found(&e) => errors.push(e),
                    _ => {}
                }
            }
        }
        errors.finish()
    }

    /// The VRF `vrfname` is in the container (with `table`, when one is
    /// configured) and `CNI_IFNAME` is its member. A difference is code
    /// 102. The routes are the main plugin's to check (its CHECK looks in
    /// the VRF tables too).
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = Conf::parse(args)?;
        args.required_prev_result(
            "missing: vrf must be chained after the plugin that made the interface",
        )?;
        let ns = args.open_netns()?;
        let mut nl = Netlink::open_in(&ns)?;
        let name = &conf.vrf_name;
        let vrf = match device::find(&mut nl, name)? {
            Found::Vrf(v) => v,
            Found::Other(kind) => {
                return Error::check_failed(format!(
                    "{name:?} in the container is not a VRF (kind {})",
                    kind.as_deref().unwrap_or("none")
                ))
            }
            Found::None => {
                return Error::check_failed(format!("VRF {name:?} not found in the container"))
            }
        };
        if let Some(t) = conf.table.filter(|t| *t != vrf.table) {
            return Error::check_failed(format!(
                "VRF {name:?} has table {}, table is {t}",
                vrf.table
            ));
        }
        let ifname = &args.ifname;
        match nl.link_by_name(ifname)? {
            Some(l) if l.master == Some(vrf.link.index) => Ok(()),
            Some(_) => Error::check_failed(format!("{ifname:?} is not a member of VRF {name:?}")),
            None => Error::check_failed(format!("container interface {ifname:?} not found")),
        }
    }

    /// Everything vrf makes lives in the container's namespace and goes
    /// with it: nothing on the node to collect.
    fn gc(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }

    /// Ready when the config is usable and the kernel has VRFs.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        Conf::parse(args)?;
        attach::kind_status("vrf", &VRF_SUPPORT)
    }
}
