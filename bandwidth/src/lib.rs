//! The `bandwidth` plugin: shapes a container's traffic with token bucket
//! filters, as a chained plugin after one that made a veth pair (bridge,
//! ptp).
//!
//! Ingress (into the container) is shaped by a TBF at the root of the host
//! end of the veth. Egress (out of the container) enters the host through
//! that veth, where nothing can delay it, so an ingress qdisc with a u32
//! match-all filter redirects it to an IFB device, whose root TBF shapes it
//! on the way out. Everything goes over netlink ([`libcni::netlink::tc`],
//! [`libcni::netlink::ifb`]); ADD is idempotent and DEL and GC clean up
//! what ADD made, as `shape` explains.

pub mod config;
pub mod shape;

use config::Bandwidth;
use libcni::netlink::tc::PschedClock;
use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::{CniResult, Interface};
use libcni::{Error, ErrorList, Version};
use std::collections::HashSet;
use std::path::Path;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI bandwidth plugin v…`).
pub const NAME: &str = "bandwidth";

pub struct BandwidthPlugin;

/// The prevResult, which a shaping ADD or CHECK needs: it names the host
/// interface.
fn chained_prev_result(args: &CmdArgs) -> Result<CniResult, Error> {
    args.required_prev_result(
        "missing: bandwidth must be called as a chained plugin, after the plugin that made the veth",
    )
}

/// The host veth must be one prevResult reports on the host.
fn require_listed(prev: &CniResult, host: &str, ifname: &str) -> Result<(), Error> {
    if prev
        .interfaces
        .iter()
        .any(|i| i.sandbox.is_empty() && i.name == host)
    {
        return Ok(());
    }
    Err(Error::config(
        "prevResult.interfaces",
        format!(
            "the host end {host:?} of container interface {ifname:?} is not listed as a host interface (without sandbox)"
        ),
    ))
}

impl Plugin for BandwidthPlugin {
    /// 0.3.0 on, as the Go plugin: older results have no interfaces, so the
    /// host veth cannot be matched against prevResult.
    fn supported_versions(&self) -> &'static [Version] {
        &libcni::version::ALL[2..]
    }

    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        let bw = config::parse(args)?;
        if bw.is_empty() {
            return Ok(args.prev_result()?.unwrap_or_default());
        }
        let mut result = chained_prev_result(args)?;
        let ns = args.open_netns()?;
        let mut host = Netlink::open()?;
        let veth = shape::host_veth(&ns, &mut host, &args.ifname)?;
        require_listed(&result, &veth.name, &args.ifname)?;
        let clock = PschedClock::read()?;
        let owner = shape::Owner::new(&args.conf.name, &args.container_id, &args.ifname);
        match shape::apply(&mut host, &veth, &bw, &owner, &clock) {
            Ok(Some(ifb)) => {
                result
                    .interfaces
                    .retain(|i| i.name != ifb.name || !i.sandbox.is_empty());
                result.interfaces.push(Interface {
                    name: ifb.name.clone(),
                    mac: ifb.mac_string(),
                    ..Interface::default()
                });
                Ok(result)
            }
            Ok(None) => Ok(result),
            Err(e) => {
                // Leave nothing half made; the runtime's DEL would too.
                let _ = shape::teardown(&mut host, Some(&veth), &owner);
                Err(e)
            }
        }
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        // DEL does not read the shaping keys: it removes what an ADD may
        // have made whatever the config says now.
        let owner = shape::Owner::new(&args.conf.name, &args.container_id, &args.ifname);
        let mut host = Netlink::open()?;
        let mut errors = ErrorList::new();
        let ns = errors
            .record(NetNs::open_if_present(Path::new(&args.netns)))
            .flatten();
        let veth = ns.and_then(|ns| {
            let veth = shape::host_veth_if_present(&ns, &mut host, &args.ifname);
            errors.record(veth).flatten()
        });
        errors.extend(shape::teardown(&mut host, veth.as_ref(), &owner));
        errors.finish_kernel("bandwidth DEL")
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let bw: Bandwidth = config::parse(args)?;
        let prev = chained_prev_result(args)?;
        if bw.is_empty() {
            return Ok(());
        }
        let ns = args.open_netns()?;
        let mut host = Netlink::open()?;
        let veth = shape::host_veth(&ns, &mut host, &args.ifname)?;
        require_listed(&prev, &veth.name, &args.ifname)?;
        let clock = PschedClock::read()?;
        let owner = shape::Owner::new(&args.conf.name, &args.container_id, &args.ifname);
        shape::check(&mut host, &veth, &bw, &owner, &clock)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        let Some(valid) = args.gc_valid_attachments("bandwidth")? else {
            return Ok(());
        };
        let valid: HashSet<(String, String)> = valid
            .into_iter()
            .map(|a| (a.container_id, a.ifname))
            .collect();
        let mut host = Netlink::open()?;
        shape::collect_garbage(&mut host, &args.conf.name, &valid)?.finish_kernel("bandwidth GC")
    }
}
