//! ADD over the shared flow (`libcni::attach`): the device named by the
//! config is found on the node and checked free before anything changes,
//! then moved into the container as `CNI_IFNAME` in one request (its node
//! name kept as its alias), then IPAM and the container's addresses and
//! routes, or just the link up without IPAM. In DPDK mode (a PCI device
//! bound to a userspace driver) nothing is moved: IPAM's addresses are
//! only reported. With `useInterfaceNetwork` the device's own addresses
//! and routes are read before the move and applied after it, after IPAM's
//! (`crate::interface_network`). A failure after the move puts the device back on the
//! node under its name, with its alias and up state, and a failure after
//! IPAM was called releases the address: a failed ADD leaves the node as
//! it was.

use libcni::attach::{self, Add};
use libcni::fault;
use libcni::ipam::IfaceOptions;
use libcni::mac::format_hardware_addr;
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, Interface};
use libcni::version::Version;
use libcni::Error;

use crate::config::Conf;
use crate::device;
use crate::interface_network;
use crate::sysfs::{Plan, Sysfs};

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    let sys = Sysfs::node();
    let plan = Plan::resolve(&conf, &sys)?;
    if plan.dpdk && conf.use_interface_network {
        return Err(Error::config(
            "useInterfaceNetwork",
            "not supported for a DPDK-bound device: it has no kernel addresses or routes to take",
        ));
    }
    attach::add(args, "host-device", conf.ipam.as_deref(), |a| {
        steps(a, &conf, &plan, &sys)
    })
}

fn steps(a: &mut Add<'_>, conf: &Conf, plan: &Plan, sys: &Sysfs) -> Result<CniResult, Error> {
    let args = a.args();
    let mut iface = Interface {
        name: args.ifname.clone(),
        sandbox: args.netns.clone(),
        ..Interface::default()
    };
    // `pciID` is a 1.1.0 key (the reference never sets it).
    if args.version >= Version::V1_1_0 {
        iface.pci_id = plan.pci.clone().unwrap_or_default();
    }
    let moved = if plan.dpdk {
        None
    } else {
        let key = plan.pick.key();
        let dev = device::find(a.host()?, plan, sys)?;
        device::ensure_free(a.host()?, &dev, key, conf.use_interface_network)?;
        // Read before the move: the kernel drops them when it moves.
        let own = if conf.use_interface_network {
            Some(interface_network::capture(a.host()?, &dev)?)
        } else {
            None
        };
        let link = device::move_in(a, &dev, key)?;
        fault::point("host-device/moved");
        iface.mac = format_hardware_addr(&link.hw_addr);
        iface.mtu = Some(link.mtu);
        Some((link, own))
    };
    let mut result = CniResult {
        interfaces: vec![iface],
        ..CniResult::default()
    };
    match (&conf.ipam, &moved) {
        (Some(plugin), _) => {
            let allocated = a.ipam_add(plugin)?;
            fault::point("host-device/ipam");
            result = allocated.on_interfaces(std::mem::take(&mut result.interfaces));
            if moved.is_some() {
                a.configure(&result, IfaceOptions::default())?;
                fault::point("host-device/configure");
            }
        }
        (None, Some((link, _))) => {
            // Layer 2 only (or the device's own network only): it comes up.
            a.container().set_link_up(link.index)?;
            fault::point("host-device/up");
        }
        (None, None) => {}
    }
    if let Some((link, Some(own))) = &moved {
        own.apply(a.container(), link.index)?;
        result.ips.extend(own.result_ips());
        result.routes.extend(own.result_routes());
    }
    attach::apply_dns(&mut result, conf.dns.as_ref());
    Ok(result)
}
