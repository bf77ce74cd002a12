//! CHECK over the shared flow (`libcni::attach::Check`): IPAM's CHECK
//! first, then the container against `prevResult` and the config: the
//! interface is there with the result's hardware address and the alias a
//! move gives it (its node name), and the result's addresses and routes. In DPDK mode there is no kernel
//! device to look at. A difference is code 102 naming what differs.

use libcni::attach::Check;
use libcni::mac::format_hardware_addr;
use libcni::skel::CmdArgs;
use libcni::Error;

use crate::config::Conf;
use crate::sysfs::{Plan, Sysfs};

fn failed(msg: String) -> Error {
    Error::CheckFailed(msg)
}

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let plan = Plan::resolve(&conf, &Sysfs::node())?;
    let mut c = Check::begin(args, conf.ipam.as_deref())?;
    if plan.dpdk {
        return Ok(());
    }
    let ifname = &args.ifname;
    let want = c.record()?.clone();
    let link = c
        .container
        .link_by_name(ifname)?
        .ok_or_else(|| failed(format!("container interface {ifname:?} not found")))?;
    let have = format_hardware_addr(&link.hw_addr);
    if !want.mac.is_empty() && !want.mac.eq_ignore_ascii_case(&have) {
        return Err(failed(format!(
            "container interface {ifname:?} has hardware address {have}, prevResult says {}",
            want.mac
        )));
    }
    // The alias is the device's node name; `device` may have named it by
    // an altname, so it is not compared.
    if link.alias.as_deref().is_none_or(str::is_empty) {
        return Err(failed(format!(
            "container interface {ifname:?} has no alias naming its node device: it was \
             not moved there by host-device"
        )));
    }
    c.addresses_and_routes().map(drop)
}
