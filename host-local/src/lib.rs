//! The `host-local` IPAM plugin: hands out addresses from configured range
//! sets and keeps the leases as files under `<dataDir>/<network>/`, in the
//! Go reference plugin's format, so either plugin can take over a node.
//!
//! - `config`: the IPAM config, parsed and validated into typed values.
//! - `range`: ranges and range sets (defaults, containment, allocation order).
//! - `store`: the lease directory (lock, lease files, `last_reserved_ip.*`).
//! - `alloc`: what each verb does with the store.
//! - `resolv_conf`: `resolvConf` into the result's DNS.

pub mod alloc;
pub mod config;
pub mod range;
pub mod resolv_conf;
pub mod store;

use config::{IpamConfig, Location};
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::{Attachment, CniResult, Dns};
use libcni::Error;
use std::net::IpAddr;
use store::Store;

/// The `CNI_ARGS` keys host-local reads.
const KNOWN_ARGS: &[&str] = &["IP"];

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI host-local plugin v…`).
pub const NAME: &str = "host-local";

pub struct HostLocal;

fn attachment(args: &CmdArgs) -> Attachment {
    Attachment {
        container_id: args.container_id.clone(),
        ifname: args.ifname.clone(),
    }
}

/// The addresses of the `prevResult`, if it has any (and parses).
fn prev_addresses(args: &CmdArgs) -> Result<Vec<IpAddr>, Error> {
    Ok(args
        .prev_result()?
        .map(|r| r.ips.iter().map(|ip| ip.address.addr()).collect())
        .unwrap_or_default())
}

impl Plugin for HostLocal {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        args.cni_args()?.check_known(KNOWN_ARGS)?;
        let conf = IpamConfig::from_args(args)?;
        let dns = match &conf.resolv_conf {
            Some(path) => resolv_conf::read(path)?,
            None => Dns::default(),
        };
        let store = Store::create_locked(&conf.location)?;
        let ips = alloc::allocate(&store, &conf, &attachment(args))?;
        Ok(CniResult {
            interfaces: Vec::new(),
            ips,
            routes: conf.routes,
            dns,
        })
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        // Only the location is needed: a DEL still releases after a config
        // change broke the ranges, and ignores CNI_ARGS.
        let loc = Location::from_args(args)?;
        let Some(store) = Store::open_locked(&loc)? else {
            return Ok(());
        };
        // A prevResult that does not parse just means walking the directory.
        let hint: Vec<IpAddr> = args
            .prev_result_for_teardown()
            .map(|r| r.ips.iter().map(|ip| ip.address.addr()).collect())
            .unwrap_or_default();
        alloc::release(&store, &attachment(args), &hint)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        args.cni_args()?.check_known(KNOWN_ARGS)?;
        let conf = IpamConfig::from_args(args)?;
        let prev = prev_addresses(args)?;
        let store = Store::open_unlocked(&conf.location)?;
        alloc::check(
            store.as_ref(),
            &conf.location.dir(),
            &attachment(args),
            &prev,
        )
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        let loc = Location::from_args(args)?;
        // GC releases every lease not listed: without a list, none.
        let Some(valid) = args.gc_valid_attachments("host-local")? else {
            return Ok(());
        };
        let Some(store) = Store::open_locked(&loc)? else {
            return Ok(());
        };
        alloc::gc(&store, &valid)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        alloc::status(&IpamConfig::from_args(args)?)
    }
}
