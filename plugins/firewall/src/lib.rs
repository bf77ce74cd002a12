//! The `firewall` plugin: accepts forwarded traffic from the container's
//! addresses and replies to it, as a chained plugin after the one that
//! gave the container its addresses, so a node whose FORWARD policy drops
//! still lets containers out. `ingressPolicy: same-bridge` isolates the
//! bridge from other isolated bridges.
//!
//! The work is [`rules`]': on iptables (with the Go
//! plugin's exact chains and rules), on our own nf_tables table, or as
//! sources of a firewalld zone over D-Bus (the default where firewalld
//! runs, as in Go). Everything is validated before anything is touched;
//! DEL and GC find a container's rules by its ID alone (the owner records
//! in `dataDir`) and never fail on a config value.

pub mod config;
pub mod dbus;
pub mod rules;

use crate::rules as fw;
use libcni::netfilter::Owner;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::Result;

use config::FirewallConf;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI firewall plugin v…`).
pub const NAME: &str = "firewall";

pub struct Firewall;

fn require_prev(args: &CmdArgs, verb: &str) -> Result<CniResult> {
    args.required_prev_result(&format!(
        "missing: {verb} needs the result of the plugin before firewall in the chain \
         (bridge, ptp, macvlan...)"
    ))
}

impl Plugin for Firewall {
    fn add(&self, args: &CmdArgs) -> Result<CniResult> {
        let conf = FirewallConf::parse(args)?;
        let prev = require_prev(args, "ADD")?;
        let spec = conf.spec(args, &prev)?;
        if !spec.addrs.is_empty() {
            fw::add(&conf.backend, &spec, &conf.records)?;
        }
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<()> {
        let (hint, records) = FirewallConf::teardown(args);
        let owner = Owner::new(&args.conf.name, &args.container_id);
        // The addresses of the ADD when the runtime passes its result; the
        // owner records find them otherwise.
        let known = match args.prev_result_for_teardown() {
            Some(prev) => config::addresses(&prev),
            None => Vec::new(),
        };
        fw::del(&hint, &records, &owner, &args.ifname, &known)
    }

    fn check(&self, args: &CmdArgs) -> Result<()> {
        let conf = FirewallConf::parse(args)?;
        let prev = require_prev(args, "CHECK")?;
        let spec = conf.spec(args, &prev)?;
        if spec.addrs.is_empty() {
            return Ok(());
        }
        fw::check(&conf.backend, &spec)
    }

    fn gc(&self, args: &CmdArgs) -> Result<()> {
        let Some(valid) = args.gc_valid_attachments("firewall")? else {
            return Ok(());
        };
        let (hint, records) = FirewallConf::teardown(args);
        fw::gc(&hint, &records, &args.conf.name, &valid)
    }
}
