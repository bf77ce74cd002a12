//! CHECK: the redirect ADD made is whole. From `prevResult` (required):
//! the VM's interface and its tap (see `pair`); then in the container's
//! namespace: `CNI_IFNAME` is there with the MAC the VM was given; the tap
//! is there, a persistent tap with the result's MAC, the MTU of the veth,
//! and the owner, group and name `CNI_ARGS` give (when they give them);
//! both have an ingress qdisc (the veth may have a `clsact` one instead)
//! with a u32 match-all redirect to the other. A difference is code 102
//! naming what differs.

use libcni::netlink::tc::Filter;
use libcni::netlink::{Link, Netlink};
use libcni::skel::CmdArgs;
use libcni::tuntap;
use libcni::Error;

use crate::config::{Conf, ARG_GID, ARG_NAME, ARG_UID};
use crate::pair;

fn failed(msg: String) -> Error {
    Error::CheckFailed(msg)
}

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let prev = args
        .required_prev_result("missing: CHECK compares the redirect with the result of the ADD")?;
    pair::sandbox_interface(&prev, &args.ifname)?;
    let (vm, tap_iface) = pair::vm_and_tap(&prev, &args.container_id).map_err(failed)?;
    let ns = args.open_netns()?;
    let mut nl = Netlink::open_in(&ns)?;
    let ifname = &args.ifname;
    let veth = nl
        .link_by_name(ifname)?
        .ok_or_else(|| failed(format!("{ifname:?} is not in the container's namespace")))?;
    if !vm.mac.is_empty() && !vm.mac.eq_ignore_ascii_case(&veth.mac_string()) {
        return Err(failed(format!(
            "{ifname:?} has MAC {}, the VM's interface in prevResult {}",
            veth.mac_string(),
            vm.mac
        )));
    }
    let name = &tap_iface.name;
    let tap = nl
        .link_by_name(name)?
        .ok_or_else(|| failed(format!("tap {name:?} is not in the container's namespace")))?;
    let info = tuntap::tun_info(&mut nl, tap.index)?
        .filter(|t| t.tap)
        .ok_or_else(|| {
            failed(format!(
                "{name:?} in the container's namespace is not a tap"
            ))
        })?;
    if !info.persist {
        return Err(failed(format!("tap {name:?} is not persistent")));
    }
    if !tap_iface.mac.is_empty() && !tap_iface.mac.eq_ignore_ascii_case(&tap.mac_string()) {
        return Err(failed(format!(
            "tap {name:?} has MAC {}, prevResult {}",
            tap.mac_string(),
            tap_iface.mac
        )));
    }
    if tap.mtu != veth.mtu {
        return Err(failed(format!(
            "tap {name:?} has MTU {}, {ifname:?} {}",
            tap.mtu, veth.mtu
        )));
    }
    if let Some(want) = conf.name.as_deref().filter(|_| !conf.is_template()) {
        if want != name {
            return Err(failed(format!(
                "the tap is {name:?}, {ARG_NAME} says {want:?}"
            )));
        }
    }
    let show = |v: Option<u32>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
    for (var, have, want) in [
        (ARG_UID, info.owner, conf.uid),
        (ARG_GID, info.group, conf.gid),
    ] {
        if want.is_some() && have != want {
            return Err(failed(format!(
                "tap {name:?} has {} {}, {var} says {}",
                if var == ARG_UID { "owner" } else { "group" },
                show(have),
                show(want)
            )));
        }
    }
    redirects(&mut nl, &tap, &veth)?;
    redirects(&mut nl, &veth, &tap)
}

/// `from`'s ingress redirects every frame to `to`.
fn redirects(nl: &mut Netlink, from: &Link, to: &Link) -> Result<(), Error> {
    let Some((parent, _)) = nl.ingress_hook(from.index)? else {
        return Err(failed(format!("{:?} has no ingress qdisc", from.name)));
    };
    let filters = nl.filters(from.index, parent, 0, 0)?;
    if filters
        .iter()
        .filter_map(Filter::match_all_redirect)
        .any(|t| t == to.index)
    {
        return Ok(());
    }
    Err(failed(format!(
        "{:?} has no filter redirecting every frame to {:?} on its ingress",
        from.name, to.name
    )))
}
