//! The device itself: found on the node ([`find`]) and checked free
//! ([`ensure_free`]); moved into the container under `CNI_IFNAME` with its
//! node name kept as its alias, as Go's host-device keeps it, so that
//! either plugin's DEL can give it back ([`move_in`]); moved back under
//! that name by DEL ([`move_out`]) or by a failed ADD's rollback; and
//! given its name back on the node when the kernel returned it there
//! after its container's namespace died ([`reclaim`]).
//!
//! Every move is one `RTM_SETLINK` (`libcni::netlink::LinkChange`): the
//! namespace, the name and the alias change under one kernel lock, so the
//! device never shows up under its container name on the node, nor under
//! its node name in the container, and no temporary namespace is needed.

use std::io;
use std::net::IpAddr;
use std::path::Path;

use libcni::attach::Add;
use libcni::mac::format_hardware_addr;
use libcni::netlink::{errno, Link, LinkChange, Netlink};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::types::config::validate_link_name;
use libcni::Error;

use crate::config::Conf;
use crate::sysfs::{Pick, Plan, Sysfs};

/// The device of `plan` in the node's namespace (`nl`). Not there is code
/// 7 naming the key that picked it.
pub fn find(nl: &mut Netlink, plan: &Plan, sys: &Sysfs) -> Result<Link, Error> {
    match &plan.pick {
        Pick::Name(name) => nl.link_by_name(name)?.ok_or_else(|| {
            Error::config(
                "device",
                format!("{name:?} not found in the node's network namespace"),
            )
        }),
        Pick::HwAddr(addr) => nl
            .links()?
            .into_iter()
            .find(|l| l.hw_addr == *addr)
            .ok_or_else(|| {
                Error::config(
                    "hwaddr",
                    format!(
                        "no link with hardware address {} in the node's network namespace",
                        format_hardware_addr(addr)
                    ),
                )
            }),
        Pick::Sysfs { key, what, dir } => {
            let name = Plan::sysfs_netdev(sys, key, what, dir.as_deref())?;
            nl.link_by_name(&name)?.ok_or_else(|| {
                Error::config(
                    *key,
                    format!("{name:?} ({what}) not found in the node's network namespace"),
                )
            })
        }
    }
}

/// The device is not in use on the node: not a port of a bridge, bond or
/// any other master (moving it would take it out), and without addresses
/// other than IPv6 link-local ones (the node's traffic would stop; the
/// kernel drops a device's addresses when it changes namespace), unless
/// `addresses_go_along` (`useInterfaceNetwork`: they are the pod's). Code
/// 7 naming `key`, the key that picked it.
pub fn ensure_free(
    nl: &mut Netlink,
    dev: &Link,
    key: &str,
    addresses_go_along: bool,
) -> Result<(), Error> {
    if let Some(m) = dev.master {
        let master = nl
            .link_by_index(m)?
            .map(|l| format!("{:?} ({})", l.name, l.kind.as_deref().unwrap_or("master")))
            .unwrap_or_else(|| format!("link {m}"));
        return Err(Error::config(
            key,
            format!(
                "{:?} is in use on the node: it is a port of {master}, and moving it would \
                 take it out; release it first",
                dev.name
            ),
        ));
    }
    if addresses_go_along {
        return Ok(());
    }
    // ENODEV: another ADD moved it out between the lookup and this look.
    let addrs = nl.addresses(Some(dev.index), None).map_err(|e| {
        if errno(&e) == Some(libc::ENODEV) {
            left_meanwhile(key, &dev.name, &e)
        } else {
            e
        }
    })?;
    let used: Vec<String> = addrs
        .into_iter()
        .filter(|a| !is_link_local_v6(a.addr))
        .map(|a| format!("{}/{}", a.addr, a.prefix_len))
        .collect();
    if !used.is_empty() {
        return Err(Error::config(
            key,
            format!(
                "{:?} is in use on the node: it carries {}; moving it would take them from \
                 the node; remove them first",
                dev.name,
                used.join(", ")
            ),
        ));
    }
    Ok(())
}

fn is_link_local_v6(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// Code 103: the device picked by `key` left the node while this ADD was
/// working on it, most likely taken by another pod's ADD.
fn left_meanwhile(key: &str, name: &str, e: &Error) -> Error {
    Error::Conflict(format!(
        "{key}: {name:?} left the node's network namespace while this ADD was moving it \
         (another ADD took it?): {e}"
    ))
}

/// What the device was on the node, for a failed ADD to put back.
#[derive(Debug, Clone)]
struct Original {
    name: String,
    alias: Option<String>,
    up: bool,
    hw_addr: Vec<u8>,
}

/// Moves `dev` (found on the node) into the container as `CNI_IFNAME`,
/// its name kept as its alias, in one request; returns it as the
/// container sees it. Once it has left the node (even when the request
/// failed part way), the way back is recorded, so a failed ADD leaves it on
/// the node under its name, with its alias and up state. A device the
/// kernel keeps in its namespace (loopback, a bridge, a bond) is code 7
/// naming `key`.
pub fn move_in<'a>(a: &mut Add<'a>, dev: &Link, key: &str) -> Result<Link, Error> {
    let args = a.args();
    let moved = {
        let (host, _, ns) = a.sockets()?;
        let into = LinkChange {
            netns: Some(ns),
            name: Some(&args.ifname),
            alias: Some(&dev.name),
            up: None,
        };
        host.change_link(dev.index, &into).map_err(|e| {
            // A refused request leaves the device where it was; one that
            // failed after the move (the rename) does not; ENODEV is a
            // device that left the node meanwhile, not for this container.
            let left = errno(&e) != Some(libc::ENODEV)
                && !matches!(
                    host.link_by_index(dev.index),
                    Ok(Some(l)) if l.name == dev.name && l.hw_addr == dev.hw_addr
                );
            (e, left)
        })
    };
    if !matches!(moved, Err((_, false))) {
        let orig = Original {
            name: dev.name.clone(),
            alias: dev.alias.clone(),
            up: dev.up,
            hw_addr: dev.hw_addr.clone(),
        };
        a.undo(
            format!("moving {:?} back to the node", dev.name),
            move || move_back(&args.netns, &args.ifname, &orig),
        );
    }
    if let Err((e, _)) = moved {
        return Err(if errno(&e) == Some(libc::ENODEV) {
            left_meanwhile(key, &dev.name, &e)
        } else if errno(&e) == Some(libc::EINVAL) {
            Error::config(
                key,
                format!(
                    "{:?} cannot leave the node's network namespace: the kernel keeps \
                     loopback, bridges, bonds, VRFs and other namespace-local devices where \
                     they are ({e})",
                    dev.name
                ),
            )
        } else {
            e
        });
    }
    a.container().link_by_name(&args.ifname)?.ok_or_else(|| {
        Error::kernel(
            format!(
                "{:?} was moved, but {:?} is not in the container",
                dev.name, args.ifname
            ),
            io::Error::from_raw_os_error(libc::ENODEV),
        )
    })
}

/// A failed ADD's way back: the device, wherever the ADD left it in the
/// container (`ifname`, or its node name when the rename after the move
/// failed), goes back to the node with its name, alias and up state.
fn move_back(netns: &str, ifname: &str, orig: &Original) -> Result<(), Error> {
    let ns = NetNs::open(Path::new(netns))?;
    let mut c = Netlink::open_in(&ns)?;
    let ours = |l: &Link| orig.hw_addr.is_empty() || l.hw_addr == orig.hw_addr;
    let mut found = None;
    for name in [ifname, orig.name.as_str()] {
        if let Some(l) = c.link_by_name(name)?.filter(|l| ours(l)) {
            found = Some(l);
            break;
        }
    }
    let Some(link) = found else {
        return Err(Error::kernel(
            format!(
                "{:?} is neither in the container nor on the node",
                orig.name
            ),
            io::Error::from_raw_os_error(libc::ENODEV),
        ));
    };
    let node = NetNs::current()?;
    c.change_link(
        link.index,
        &LinkChange {
            netns: Some(&node),
            name: Some(&orig.name),
            alias: Some(orig.alias.as_deref().unwrap_or("")),
            up: Some(orig.up),
        },
    )
}

/// DEL's link step: `CNI_IFNAME` in the container goes back to the node
/// under the name its alias keeps (Go's record, ours too), its alias
/// removed, down (its state before the ADD is not known). When it is not
/// in the container (back already, or the namespace is gone), a device
/// the kernel returned to the node is given its name back ([`reclaim`]).
/// `plan` is `None` when the config no longer resolves on the node.
pub fn move_out(args: &CmdArgs, conf: &Conf, plan: Option<&Plan>) -> Result<(), Error> {
    if plan.is_some_and(|p| p.dpdk) {
        return Ok(()); // nothing was moved
    }
    if let Some(ns) = NetNs::open_container_if_present(Path::new(&args.netns))? {
        let mut c = Netlink::open_in(&ns)?;
        if let Some(link) = c.link_by_name(&args.ifname)? {
            return give_back(args, conf, &ns, &mut c, &link);
        }
    }
    match plan {
        Some(p) => reclaim(&mut Netlink::open()?, p, &Sysfs::node(), Some(&args.ifname)).map(drop),
        None => Ok(()),
    }
}

fn give_back(
    args: &CmdArgs,
    conf: &Conf,
    ns: &NetNs,
    c: &mut Netlink,
    link: &Link,
) -> Result<(), Error> {
    let ifname = &args.ifname;
    let name = match link.alias.as_deref().filter(|a| !a.is_empty()) {
        Some(a) => a.to_string(),
        // Without the alias, `device` still says what it was called.
        None => match &conf.device {
            Some(d) => d.clone(),
            None => {
                eprintln!(
                    "host-device: leaving {ifname:?} in the container: it has no alias \
                     naming a node device, so this plugin did not move it there"
                );
                return Ok(());
            }
        },
    };
    if let Err(e) = validate_link_name("alias", &name) {
        eprintln!("host-device: leaving {ifname:?} in the container: its {e}");
        return Ok(());
    }
    let mut host = Netlink::open()?;
    if host.link_by_name(&name)?.is_some() {
        return Err(Error::kernel(
            format!(
                "cannot move {ifname:?} back to the node as {name:?}: the node has another \
                 link of that name"
            ),
            io::Error::from_raw_os_error(libc::EEXIST),
        ));
    }
    let node = NetNs::current()?;
    let out = LinkChange {
        netns: Some(&node),
        name: Some(&name),
        alias: Some(""),
        up: None,
    };
    c.change_link(link.index, &out).inspect_err(|_| {
        // A failure after the move leaves it on the node under its
        // container name: back into the container, for the retry.
        if let Ok(Some(l)) = host.link_by_name(ifname) {
            if l.hw_addr == link.hw_addr {
                let _ = host.change_link(
                    l.index,
                    &LinkChange {
                        netns: Some(ns),
                        name: Some(ifname),
                        alias: Some(&name),
                        up: Some(link.up),
                    },
                );
            }
        }
    })
}

/// The kernel's name for a device it moved back to the root namespace
/// under a taken name: `dev` and digits.
fn is_fallback_name(name: &str) -> bool {
    name.strip_prefix("dev")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// When a container's namespace dies, the kernel moves its physical
/// devices back to the root namespace (virtual ones, veth or macvlan, die
/// with it) under the name they had (or `dev<N>` when that is taken), with
/// the alias that names their node name. This gives such a device of
/// `plan`, found on the node (`nl`), its name back and removes the alias.
/// Only a device that is surely one: its alias names a node name no link
/// has, and either `device` is that name (or one of its altnames), or its
/// name is the kernel's `dev<N>` or `ifname` (DEL's `CNI_IFNAME`; GC has
/// none). Returns the name given back.
pub fn reclaim(
    nl: &mut Netlink,
    plan: &Plan,
    sys: &Sysfs,
    ifname: Option<&str>,
) -> Result<Option<String>, Error> {
    let mut by_name = false;
    let candidate = match &plan.pick {
        Pick::Name(dev) => {
            // The kernel looks names up among the altnames too, which a
            // returned device keeps.
            if let Some(l) = nl.link_by_name(dev)? {
                if l.name == *dev {
                    return Ok(None); // back already
                }
                by_name = true;
            }
            let named = |l: &Link| l.alias.as_deref() == Some(dev.as_str()) || by_name;
            if by_name {
                nl.link_by_name(dev)?
            } else {
                let direct = match ifname {
                    Some(i) => nl.link_by_name(i)?.filter(named),
                    None => None,
                };
                match direct {
                    Some(l) => Some(l),
                    None => nl.links()?.into_iter().find(named),
                }
            }
        }
        Pick::HwAddr(addr) => nl.links()?.into_iter().find(|l| l.hw_addr == *addr),
        Pick::Sysfs { key, what, dir } => {
            match Plan::sysfs_netdev(sys, key, what, dir.as_deref()) {
                Ok(name) => nl.link_by_name(&name)?,
                Err(_) => None,
            }
        }
    };
    let Some(link) = candidate else {
        return Ok(None);
    };
    let Some(alias) = link
        .alias
        .clone()
        .filter(|a| *a != link.name && validate_link_name("alias", a).is_ok())
    else {
        return Ok(None);
    };
    by_name |= matches!(&plan.pick, Pick::Name(d) if *d == alias);
    if !(by_name || is_fallback_name(&link.name) || ifname == Some(link.name.as_str())) {
        return Ok(None);
    }
    if nl.link_by_name(&alias)?.is_some() {
        return Ok(None);
    }
    nl.change_link(
        link.index,
        &LinkChange {
            name: Some(&alias),
            alias: Some(""),
            ..LinkChange::default()
        },
    )?;
    eprintln!(
        "host-device: {:?}, returned to the node by the kernel, is {alias:?} again",
        link.name
    );
    Ok(Some(alias))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_names_and_link_local_addresses() {
        assert!(is_fallback_name("dev7"));
        assert!(is_fallback_name("dev123"));
        for n in ["dev", "devx", "dev7a", "eth0", "net1", "xdev7"] {
            assert!(!is_fallback_name(n), "{n}");
        }
        assert!(is_link_local_v6("fe80::1".parse().unwrap()));
        assert!(is_link_local_v6("febf::1".parse().unwrap()));
        assert!(!is_link_local_v6("fec0::1".parse().unwrap()));
        assert!(!is_link_local_v6("169.254.0.1".parse().unwrap()));
        assert!(!is_link_local_v6("2001:db8::1".parse().unwrap()));
    }
}
