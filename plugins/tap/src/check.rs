//! CHECK over the shared flow (`libcni::attach::Check`): IPAM's CHECK
//! first, then the container against `prevResult` and the config: the
//! interface is a tap (a tun device of type tap) with the result's MAC,
//! persistent, with the configured `multiQueue`, `owner` and `group`, a
//! port of `bridge` when one is configured; the container's addresses and
//! routes. A difference is code 102 naming what differs.

use libcni::attach::Check;
use libcni::skel::CmdArgs;
use libcni::tuntap;
use libcni::Error;

use crate::config::Conf;

fn failed(msg: String) -> Error {
    Error::CheckFailed(msg)
}

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let mut c = Check::begin(args, conf.ipam.as_deref())?;
    let ifname = &args.ifname;
    let link = c.container_link("tun")?;
    let info = tuntap::tun_info(&mut c.container, link.index)?.unwrap_or_default();
    if !info.tap {
        return Err(failed(format!("{ifname:?} is a tun device, not a tap")));
    }
    if !info.persist {
        return Err(failed(format!("tap {ifname:?} is not persistent")));
    }
    if info.multi_queue != conf.multi_queue {
        return Err(failed(format!(
            "tap {ifname:?} multi_queue is {}, multiQueue is {}",
            info.multi_queue, conf.multi_queue
        )));
    }
    let show = |v: Option<u32>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
    for (key, have, want) in [
        ("owner", info.owner, conf.owner),
        ("group", info.group, conf.group),
    ] {
        if have != want {
            return Err(failed(format!(
                "tap {ifname:?} has {key} {}, the config says {}",
                show(have),
                show(want)
            )));
        }
    }
    match &conf.bridge {
        Some(name) => {
            let br = c.container.link_by_name(name)?;
            if br.is_none() || link.master != br.map(|b| b.index) {
                return Err(failed(format!(
                    "tap {ifname:?} is not a port of bridge {name:?} in the container"
                )));
            }
        }
        None if link.master.is_some() => {
            return Err(failed(format!(
                "tap {ifname:?} is a port of a bridge, and the config names none"
            )));
        }
        None => {}
    }
    c.addresses_and_routes().map(drop)
}
