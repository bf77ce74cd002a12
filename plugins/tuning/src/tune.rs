//! Reading, changing and restoring what tuning manages in the container:
//! sysctls, and the MAC, promiscuous mode, MTU, all-multicast mode and
//! transmit queue length of `CNI_IFNAME`.
//!
//! Sysctls under `/proc/sys/net` belong to the namespace of the thread that
//! opens them, so every sysctl read or write runs in one [`NetNs::run`]
//! batch; link changes go through a netlink socket opened in the namespace.

use libcni::fault;
use libcni::mac::parse_mac;
use libcni::netlink::link::LinkDetails;
use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use libcni::sysctl::{self, Key};
use libcni::{Error, ErrorList};
use serde_json::Value;

use crate::backup::Backup;
use crate::config::Conf;

/// `key: <op>`: a kernel error that names the config key it came from,
/// keeping its errno.
pub fn about(key: &str, e: Error) -> Error {
    match e {
        Error::Kernel { op, source } => Error::Kernel {
            op: format!("{key}: {op}"),
            source,
        },
        other => other,
    }
}

/// The container interface `ifname`, which the plugin before tuning made.
pub fn container_link(nl: &mut Netlink, ifname: &str) -> Result<LinkDetails, Error> {
    nl.link_details_by_name(ifname)?.ok_or_else(|| {
        Error::InvalidEnv(format!(
            "CNI_IFNAME {ifname:?}: no such interface in the container to tune"
        ))
    })
}

/// The current values of everything `conf` would change, as a backup.
/// A sysctl that does not exist, or is a directory, is refused here with
/// code 7 naming its key, before anything was written. A write-only sysctl
/// (an action such as `net/ipv4/route/flush`) has no previous value to keep.
pub fn snapshot(ns: &NetNs, link: Option<&LinkDetails>, conf: &Conf) -> Result<Backup, Error> {
    let mut backup = Backup::default();
    let read = ns.run(|| {
        let mut values = Vec::new();
        for s in &conf.sysctls {
            match sysctl::read_here(&s.key) {
                Ok(v) => values.push((s.key.to_string(), v)),
                Err(e) if sysctl::is_missing(&e) => {
                    return Err(Error::config(
                        s.source,
                        format!(
                            "key {:?}: {} does not exist in the container's network namespace",
                            s.raw, s.key
                        ),
                    ))
                }
                Err(e) if libcni::netlink::errno(&e) == Some(libc::EISDIR) => {
                    return Err(Error::config(
                        s.source,
                        format!("key {:?}: {} is a directory, not a sysctl", s.raw, s.key),
                    ))
                }
                Err(e) if libcni::netlink::errno(&e) == Some(libc::EACCES) => {}
                Err(e) => return Err(about(s.source, e)),
            }
        }
        Ok(values)
    })??;
    for (k, v) in read {
        backup.sysctl.insert(k, Value::String(v));
    }
    if let Some(d) = link {
        if conf.mac.is_some() {
            backup.mac = d.link.mac_string();
        }
        if conf.promisc {
            backup.promisc = Some(d.link.promisc);
        }
        if conf.mtu.is_some() {
            backup.mtu = d.link.mtu;
        }
        if conf.allmulti.is_some() {
            backup.allmulti = Some(d.allmulti);
        }
        if conf.txqlen.is_some() {
            backup.txqlen = Some(d.txqlen);
        }
    }
    Ok(backup)
}

/// Applies `conf`: the sysctls in order, then on the link the MAC,
/// promiscuous mode, MTU, all-multicast mode and queue length (the
/// reference's order). Stops at the first failure, naming its key.
pub fn apply(
    ns: &NetNs,
    nl: &mut Netlink,
    link: Option<&LinkDetails>,
    conf: &Conf,
) -> Result<(), Error> {
    ns.run(|| {
        for s in &conf.sysctls {
            sysctl::write_here(&s.key, &s.value).map_err(|e| about(s.source, e))?;
        }
        Ok::<(), Error>(())
    })??;
    fault::point("tuning/sysctl");
    let Some(d) = link else {
        return Ok(());
    };
    let index = d.link.index;
    if let Some(mac) = &conf.mac {
        nl.set_mac(index, mac).map_err(|e| about("mac", e))?;
    }
    if conf.promisc {
        nl.set_promisc(index, true)
            .map_err(|e| about("promisc", e))?;
    }
    if let Some(mtu) = conf.mtu {
        nl.set_mtu(index, mtu).map_err(|e| about("mtu", e))?;
    }
    if let Some(on) = conf.allmulti {
        nl.set_allmulti(index, on)
            .map_err(|e| about("allmulti", e))?;
    }
    if let Some(q) = conf.txqlen {
        nl.set_txqlen(index, q).map_err(|e| about("txQLen", e))?;
    }
    fault::point("tuning/link");
    Ok(())
}

/// Puts back what `backup` recorded, best effort: on the link (if it is
/// still there) the MTU, MAC, promiscuous mode, all-multicast mode and
/// queue length, then the sysctls in reverse order (one that no longer
/// exists, with its interface, is skipped). Returns what failed.
pub fn restore(ns: &NetNs, nl: &mut Netlink, ifname: &str, backup: &Backup) -> ErrorList {
    let mut errors = ErrorList::new();
    let wants_link = !backup.mac.is_empty()
        || backup.promisc.is_some()
        || backup.mtu != 0
        || backup.allmulti.is_some()
        || backup.txqlen.is_some();
    let link = if wants_link {
        errors.record(nl.link_by_name(ifname)).flatten()
    } else {
        None
    };
    if let Some(l) = link {
        let index = l.index;
        let mut step = |key: &str, r: Result<(), Error>| {
            if let Err(e) = r {
                errors.push(about(&format!("restoring {key}"), e));
            }
        };
        if backup.mtu != 0 {
            step("mtu", nl.set_mtu(index, backup.mtu));
        }
        if !backup.mac.is_empty() {
            match parse_mac(&backup.mac) {
                Some(mac) => step("mac", nl.set_mac(index, &mac)),
                None => step(
                    "mac",
                    Err(Error::Decode(format!(
                        "the backup's mac {:?} is not a MAC address",
                        backup.mac
                    ))),
                ),
            }
        }
        if let Some(on) = backup.promisc {
            step("promisc", nl.set_promisc(index, on));
        }
        if let Some(on) = backup.allmulti {
            step("allmulti", nl.set_allmulti(index, on));
        }
        if let Some(q) = backup.txqlen {
            step("txQLen", nl.set_txqlen(index, q));
        }
    }
    let sysctls: Vec<(Key, String)> = backup.sysctls();
    if !sysctls.is_empty() {
        let written = ns.run(|| {
            let mut failed = ErrorList::new();
            for (key, value) in sysctls.iter().rev() {
                match sysctl::write_here(key, value) {
                    Err(e) if !sysctl::is_missing(&e) => {
                        failed.push(about("restoring sysctl", e));
                    }
                    _ => {}
                }
            }
            failed
        });
        if let Some(failed) = errors.record(written) {
            errors.extend(failed);
        }
    }
    errors
}

/// Sysctl values compared as the kernel prints them: whitespace runs are
/// one separator (`tcp_rmem` reads back tab-separated).
pub fn same_value(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key() {
        let e = about(
            "mtu",
            Error::kernel(
                "set mtu 9 on link 2",
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ),
        );
        assert_eq!(e.code(), 100);
        assert_eq!(libcni::netlink::errno(&e), Some(libc::EINVAL));
        assert!(e.to_string().starts_with("mtu: set mtu 9 on link 2"), "{e}");
        let other = about("mtu", Error::config("x", "y"));
        assert_eq!(other.to_string(), "invalid network config: x: y");
    }

    #[test]
    fn values_compare_like_the_kernel_prints_them() {
        assert!(same_value("4096 87380 6291456", "4096\t87380\t6291456"));
        assert!(same_value("1", "1"));
        assert!(!same_value("1", "0"));
        assert!(!same_value("1 2", "1"));
    }
}
