//! Tap devices: created over `/dev/net/tun` (the kernel makes tun/tap
//! devices only through that ioctl interface, never through an rtnetlink
//! `RTM_NEWLINK`), configured and read back over netlink.
//!
//! A tun device belongs to the network namespace of the process that
//! *opened* `/dev/net/tun` (the open binds the file to its namespace), so
//! [`create_tap`] opens it on a thread inside the target namespace
//! ([`NetNs::run`]) and does the rest from the caller's thread: the tap
//! appears directly in that namespace under its final name, never on the
//! node. It is made whole before it is made persistent: owner, group, MTU
//! and MAC are set while the file is still open and the device still
//! dies with it, so a failure at any step leaves no device behind; only
//! then `TUNSETPERSIST` keeps it after the file is closed.
//!
//! Used by the `tap` plugin and by `tc-redirect-tap` (which hands a VM a
//! tap whose name the kernel may pick from a `tap%d` template, and marks it
//! with an alias so its DEL finds it again).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use netlink_packet_route::link::{InfoData, LinkAttribute, LinkInfo};

use crate::netlink::link::MAX_IFNAME_LEN;
use crate::netlink::{Link, Netlink};
use crate::netns::NetNs;
use crate::{Error, Result};

/// The tun/tap control device.
pub const TUN_DEVICE: &str = "/dev/net/tun";

/// A tap device to create with [`create_tap`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapSpec<'a> {
    /// Its name in the namespace it is created in, or a template with one
    /// `%d` (`tap%d`) for the kernel to fill with the lowest free number.
    pub name: &'a str,
    /// MTU; `None` keeps the kernel's (1500).
    pub mtu: Option<u32>,
    /// MAC; `None` keeps the random one the kernel gives.
    pub mac: Option<[u8; 6]>,
    /// `IFF_MULTI_QUEUE`: whoever attaches may open several queues.
    pub multi_queue: bool,
    /// `TUNSETOWNER`: the only user (besides `CAP_NET_ADMIN`) that may
    /// attach; `None` leaves the device without an owner.
    pub owner: Option<u32>,
    /// `TUNSETGROUP`: the group whose members may attach; `None` for none.
    pub group: Option<u32>,
    /// `IFLA_IFALIAS`, set before the tap is made persistent: a tap that
    /// exists at all carries it.
    pub alias: Option<&'a str>,
}

/// The flags every tap gets: a tap (Ethernet frames), without the packet
/// information header, with the virtio-net header (what KVM and QEMU use).
/// Whoever attaches sets its own features; only `IFF_MULTI_QUEUE` must
/// match the device's.
const TAP_FLAGS: libc::c_int = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR;

fn ioctl(file: &File, request: libc::Ioctl, arg: libc::c_ulong, what: &str) -> Result<()> {
    // SAFETY: the tun ioctls used here take an integer argument.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), request, arg) };
    if rc < 0 {
        return Err(Error::kernel(what.to_string(), io::Error::last_os_error()));
    }
    Ok(())
}

/// Creates the persistent tap `spec` inside `ns`; `nl` is a netlink socket
/// opened in `ns`. A name already taken there is an error with errno
/// `EEXIST` ([`crate::netlink::is_exists`]); a failure at any step leaves
/// no device behind (see the module documentation). Returns the link,
/// under the name the kernel gave it when `spec.name` is a template.
pub fn create_tap(ns: &NetNs, nl: &mut Netlink, spec: &TapSpec<'_>) -> Result<Link> {
    let name = spec.name;
    if name.is_empty() || name.len() > MAX_IFNAME_LEN || name.contains(['/', '\0']) {
        return Err(Error::kernel(
            format!("create tap {name:?}: not an interface name"),
            io::Error::from_raw_os_error(libc::EINVAL),
        ));
    }
    let file = ns
        .run(|| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(TUN_DEVICE)
        })?
        .map_err(|e| Error::kernel(format!("open {TUN_DEVICE} in {:?}", ns.path()), e))?;

    let mut flags = TAP_FLAGS | libc::IFF_TUN_EXCL;
    if spec.multi_queue {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    // libc's `struct ifreq`: its size differs between 32- and 64-bit
    // architectures, and `c_char` is unsigned on arm, ppc and s390x.
    // SAFETY: ifreq is plain data (bytes, integers, a pointer), for which
    // all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *slot = byte as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one struct ifreq, which `req` is.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::TUNSETIFF,
            &mut req as *mut libc::ifreq,
        )
    };
    let template = name;
    // The kernel writes back the name it gave (a template filled in).
    let given: Vec<u8> = req
        .ifr_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let given = String::from_utf8_lossy(&given).into_owned();
    let name = if rc < 0 || given.is_empty() {
        template
    } else {
        given.as_str()
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        // IFF_TUN_EXCL: a device of that name exists (EBUSY).
        let e = if e.raw_os_error() == Some(libc::EBUSY) {
            io::Error::from_raw_os_error(libc::EEXIST)
        } else {
            e
        };
        return Err(Error::kernel(
            format!("create tap {template:?} in {:?} (TUNSETIFF)", ns.path()),
            e,
        ));
    }
    if let Some(uid) = spec.owner {
        ioctl(
            &file,
            libc::TUNSETOWNER,
            libc::c_ulong::from(uid),
            &format!("set the owner of tap {name:?} to {uid} (TUNSETOWNER)"),
        )?;
    }
    if let Some(gid) = spec.group {
        ioctl(
            &file,
            libc::TUNSETGROUP,
            libc::c_ulong::from(gid),
            &format!("set the group of tap {name:?} to {gid} (TUNSETGROUP)"),
        )?;
    }
    let gone = || {
        Error::kernel(
            format!("tap {name:?} vanished right after it was created"),
            io::Error::from_raw_os_error(libc::ENODEV),
        )
    };
    let link = nl.link_by_name(name)?.ok_or_else(gone)?;
    if let Some(mtu) = spec.mtu {
        nl.set_mtu(link.index, mtu)?;
    }
    if let Some(mac) = spec.mac {
        nl.set_mac(link.index, &mac)?;
    }
    if let Some(alias) = spec.alias {
        nl.set_alias(link.index, alias)?;
    }
    ioctl(
        &file,
        libc::TUNSETPERSIST,
        1,
        &format!("make tap {name:?} persistent (TUNSETPERSIST)"),
    )?;
    drop(file);
    // Persistent now: from here on nothing fails (the caller records the
    // tap from what it reads back), so a failed re-read keeps what is known.
    let mut known = link;
    known.mtu = spec.mtu.unwrap_or(known.mtu);
    known.mac = spec.mac.or(known.mac);
    known.alias = spec.alias.map(str::to_string).or(known.alias);
    Ok(nl.link_by_name(name).ok().flatten().unwrap_or(known))
}

/// What the kernel reports of a tun/tap device (`IFLA_INFO_DATA` of kind
/// `tun`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TunInfo {
    /// A tap (Ethernet frames), not a tun (IP packets).
    pub tap: bool,
    /// The packet information header (`IFF_NO_PI` unset).
    pub pi: bool,
    /// The virtio-net header (`IFF_VNET_HDR`).
    pub vnet_hdr: bool,
    /// Kept when no process has it open (`TUNSETPERSIST`).
    pub persist: bool,
    /// `IFF_MULTI_QUEUE`.
    pub multi_queue: bool,
    /// The owner, when it has one.
    pub owner: Option<u32>,
    /// The group, when it has one.
    pub group: Option<u32>,
}

// IFLA_TUN_* (linux/if_link.h).
const IFLA_TUN_OWNER: u16 = 1;
const IFLA_TUN_GROUP: u16 = 2;
const IFLA_TUN_TYPE: u16 = 3;
const IFLA_TUN_PI: u16 = 4;
const IFLA_TUN_VNET_HDR: u16 = 5;
const IFLA_TUN_PERSIST: u16 = 6;
const IFLA_TUN_MULTI_QUEUE: u16 = 7;

/// `IFF_TAP` as `IFLA_TUN_TYPE` carries it.
const TUN_TYPE_TAP: u8 = 2;

/// The tun/tap settings of link `index` (in `nl`'s namespace): `None` when
/// there is no such link or it is not a tun/tap device.
pub fn tun_info(nl: &mut Netlink, index: u32) -> Result<Option<TunInfo>> {
    use netlink_packet_core::Nla;
    let Some(msg) = nl.link_message_of(index)? else {
        return Ok(None);
    };
    for attr in &msg.attributes {
        let LinkAttribute::LinkInfo(infos) = attr else {
            continue;
        };
        for info in infos {
            let LinkInfo::Data(InfoData::Tun(nlas)) = info else {
                continue;
            };
            let mut t = TunInfo::default();
            for nla in nlas {
                let mut value = vec![0u8; nla.value_len()];
                nla.emit_value(&mut value);
                let byte = value.first().copied().unwrap_or(0);
                let word = <[u8; 4]>::try_from(value.as_slice())
                    .ok()
                    .map(u32::from_ne_bytes);
                match nla.kind() {
                    IFLA_TUN_OWNER => t.owner = word,
                    IFLA_TUN_GROUP => t.group = word,
                    IFLA_TUN_TYPE => t.tap = byte == TUN_TYPE_TAP,
                    IFLA_TUN_PI => t.pi = byte != 0,
                    IFLA_TUN_VNET_HDR => t.vnet_hdr = byte != 0,
                    IFLA_TUN_PERSIST => t.persist = byte != 0,
                    IFLA_TUN_MULTI_QUEUE => t.multi_queue = byte != 0,
                    _ => {}
                }
            }
            return Ok(Some(t));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::is_exists;
    use crate::netns::testing::{new_netns, privileged};

    #[test]
    fn tuntap_create_in_a_namespace_then_read_back() {
        if !privileged("tuntap_create_in_a_namespace_then_read_back") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        let spec = TapSpec {
            name: "tap7",
            mtu: Some(1400),
            mac: Some([0x0a, 0, 0, 0, 0, 7]),
            multi_queue: true,
            owner: Some(1000),
            group: Some(2000),
            alias: None,
        };
        let link = create_tap(&ns, &mut nl, &spec).unwrap();
        assert_eq!(link.kind.as_deref(), Some("tun"));
        assert_eq!((link.mtu, link.mac), (1400, Some([0x0a, 0, 0, 0, 0, 7])));
        let info = tun_info(&mut nl, link.index).unwrap().unwrap();
        assert_eq!(
            info,
            TunInfo {
                tap: true,
                pi: false,
                vnet_hdr: true,
                persist: true,
                multi_queue: true,
                owner: Some(1000),
                group: Some(2000),
            }
        );
        // The name is taken now: EEXIST, and the existing tap is untouched.
        let e = create_tap(
            &ns,
            &mut nl,
            &TapSpec {
                name: "tap7",
                ..TapSpec::default()
            },
        )
        .unwrap_err();
        assert!(is_exists(&e), "{e}");
        assert_eq!(tun_info(&mut nl, link.index).unwrap(), Some(info));

        // Defaults: no owner or group, one queue.
        let plain = create_tap(
            &ns,
            &mut nl,
            &TapSpec {
                name: "tap8",
                ..TapSpec::default()
            },
        )
        .unwrap();
        let info = tun_info(&mut nl, plain.index).unwrap().unwrap();
        assert_eq!(
            (info.owner, info.group, info.multi_queue, info.persist),
            (None, None, false, true)
        );
        // A veth is no tun.
        assert_eq!(tun_info(&mut nl, 1).unwrap(), None);
        assert_eq!(tun_info(&mut nl, 9999).unwrap(), None);
    }

    #[test]
    fn tuntap_a_template_name_and_an_alias() {
        if !privileged("tuntap_a_template_name_and_an_alias") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        let spec = TapSpec {
            name: "vm%d",
            alias: Some("tc-redirect-tap/net/c1/eth0"),
            ..TapSpec::default()
        };
        // The kernel fills in the lowest free number.
        let first = create_tap(&ns, &mut nl, &spec).unwrap();
        assert_eq!(first.name, "vm0");
        assert_eq!(first.alias.as_deref(), Some("tc-redirect-tap/net/c1/eth0"));
        let second = create_tap(&ns, &mut nl, &spec).unwrap();
        assert_eq!(second.name, "vm1");
        let read = nl.link_by_name("vm1").unwrap().unwrap();
        assert_eq!(read.alias.as_deref(), Some("tc-redirect-tap/net/c1/eth0"));
        assert!(tun_info(&mut nl, read.index).unwrap().unwrap().persist);
        // An alias the kernel refuses (over IFALIASZ) leaves no device.
        let long = "a".repeat(300);
        let e = create_tap(
            &ns,
            &mut nl,
            &TapSpec {
                name: "vm%d",
                alias: Some(&long),
                ..TapSpec::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.code(), 100, "{e}");
        assert!(nl.link_by_name("vm2").unwrap().is_none());
        // A template the kernel refuses (two %d) is its EINVAL.
        let e = create_tap(
            &ns,
            &mut nl,
            &TapSpec {
                name: "v%d%d",
                ..TapSpec::default()
            },
        )
        .unwrap_err();
        assert_eq!(crate::netlink::errno(&e), Some(libc::EINVAL), "{e}");
    }

    #[test]
    fn tuntap_a_failed_step_leaves_no_device() {
        if !privileged("tuntap_a_failed_step_leaves_no_device") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        // A multicast MAC is refused by the kernel after TUNSETIFF.
        let e = create_tap(
            &ns,
            &mut nl,
            &TapSpec {
                name: "tap9",
                mac: Some([0x01, 0, 0x5e, 0, 0, 1]),
                ..TapSpec::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.code(), 100, "{e}");
        assert!(nl.link_by_name("tap9").unwrap().is_none());
        let e = create_tap(
            &ns,
            &mut nl,
            &TapSpec {
                name: "tap9",
                mtu: Some(70000),
                ..TapSpec::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.code(), 100, "{e}");
        assert!(nl.link_by_name("tap9").unwrap().is_none());
    }
}
