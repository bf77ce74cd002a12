//! The `host-device` plugin: moves a device of the node (an SR-IOV VF, a
//! spare NIC, a sub-function) into the container, named by `device`,
//! `hwaddr`, `kernelpath`, `pciBusID` or the `deviceID` capability, renamed
//! to `CNI_IFNAME`, with IPAM optional; DEL moves it back under its node
//! name. Behaviour follows the Go reference (containernetworking/plugins
//! `plugins/main/host-device`, v1.9), whose record of the node name (the
//! device's alias) it shares, so a node can switch either way; the
//! deliberate differences are in the README.

pub mod add;
pub mod check;
pub mod config;
pub mod device;
pub mod interface_network;
pub mod sysfs;

use libcni::attach;
use libcni::netlink::Netlink;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::{Error, ErrorList};

use config::Conf;
use sysfs::{Plan, Sysfs};

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI host-device plugin v…`).
pub const NAME: &str = "host-device";

pub struct HostDevice;

/// The plan of a teardown's config, if it still resolves on the node
/// (said on stderr when not).
fn teardown_plan(conf: &Conf) -> Option<Plan> {
    if !conf.names_a_device() && !conf.dpdk_mode {
        return None;
    }
    Plan::resolve(conf, &Sysfs::node())
        .inspect_err(|e| eprintln!("host-device: the device of the config: {e}"))
        .ok()
}

impl Plugin for HostDevice {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    /// Best effort: the device back to the node (or its name back, when
    /// the kernel returned it) beside IPAM DEL. What is already back, or
    /// gone with its namespace, is success. DEL reads the config leniently.
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = Conf::for_teardown(args);
        let plan = teardown_plan(&conf);
        attach::del_with(
            args,
            || device::move_out(args, &conf, plan.as_ref()),
            ErrorList::new,
        )
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// A device the kernel returned to the node when its container's
    /// namespace died, which no DEL gave its name back, gets it back
    /// (see `device::reclaim`); then IPAM's GC, with the same stdin.
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = Conf::for_teardown(args);
        let mut errors = ErrorList::new();
        if let Some(plan) = teardown_plan(&conf).filter(|p| !p.dpdk) {
            let reclaimed = Netlink::open()
                .and_then(|mut nl| device::reclaim(&mut nl, &plan, &Sysfs::node(), None));
            errors.record(reclaimed);
        }
        attach::gc(args, errors)
    }

    /// ADD can be served when the device is on the node and free (or, in
    /// DPDK mode, its PCI device is there) and IPAM says it can. A device
    /// already in a container is not on the node: code 50 until it is back.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = Conf::parse(args)?;
        let sys = Sysfs::node();
        let unavailable = |e: Error| match e {
            Error::InvalidConfig { key, msg } => Error::NotAvailable(format!("{key}: {msg}")),
            other => other,
        };
        let plan = Plan::resolve(&conf, &sys).map_err(unavailable)?;
        if !plan.dpdk {
            let mut nl = Netlink::open()?;
            let dev = device::find(&mut nl, &plan, &sys).map_err(unavailable)?;
            device::ensure_free(&mut nl, &dev, plan.pick.key(), conf.use_interface_network)
                .map_err(unavailable)?;
        }
        attach::status(args)
    }
}
