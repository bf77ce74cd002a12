//! Network sysctls (`/proc/sys/net/...`), read and written in a chosen
//! network namespace.
//!
//! This module owns every access to `/proc/sys/net` in the suite. A sysctl
//! under `/proc/sys/net` belongs to the network namespace of the *thread*
//! that opens the file, so [`read()`]/[`write()`] run on a short-lived thread
//! inside the namespace ([`NetNs::run`]); [`read_here`]/[`write_here`] use
//! the calling thread's namespace (the plugin's own, or a thread already
//! inside a namespace, to batch several sysctls into one `run`).
//!
//! Files are opened relative to the family directory (`/proc/sys/net/ipv4`,
//! `.../ipv6`), opened once per thread and namespace (`open_here`): every
//! namespace has its own dentry for `ipv4` under the one shared `net`, all
//! in one dcache hash chain, so a lookup of that component compares against
//! every namespace that ever touched a sysctl (130 us each with 1,000 pods
//! on the node, 3 us on an empty machine), and a plugin opens several.
//!
//! Keys are typed ([`Key`]) and validated when built: slash-separated
//! components under `net/`, none empty, `.` or `..`, and no NUL, so no key
//! can name a file outside `/proc/sys/net`. Components are separated by `/`
//! (not `.`) because interface names may contain dots (`cni0.100`).

use std::cell::RefCell;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::netns::NetNs;
use crate::IpFamily;
use crate::{Error, Result};

/// Where sysctls live.
const PROC_SYS: &str = "/proc/sys";

/// A validated sysctl key under `net/`, e.g. `net/ipv6/conf/eth0/accept_dad`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(String);

impl Key {
    /// Parses `net/ipv4/ip_forward` (a leading `/` is allowed). Fails with
    /// code 7 naming the key when it does not stay under `net/`.
    pub fn new(key: &str) -> Result<Key> {
        let trimmed = key.strip_prefix('/').unwrap_or(key);
        let bad = |why: &str| Error::config("sysctl", format!("{key:?} {why}"));
        let mut parts = trimmed.split('/');
        if parts.next() != Some("net") {
            return Err(bad("is not under net/"));
        }
        let mut count = 0;
        for part in parts {
            count += 1;
            if part.is_empty() || part == "." || part == ".." {
                return Err(bad("has an empty, \".\" or \"..\" component"));
            }
            if part.bytes().any(|b| b == 0 || b.is_ascii_whitespace()) {
                return Err(bad("contains NUL or whitespace"));
            }
        }
        if count == 0 {
            return Err(bad("names no sysctl"));
        }
        Ok(Key(trimmed.to_string()))
    }

    /// `net/ipv4/conf/<ifname>/<knob>`.
    pub fn ipv4_conf(ifname: &str, knob: &str) -> Result<Key> {
        Key::checked_conf("ipv4", ifname, knob)
    }

    /// `net/ipv6/conf/<ifname>/<knob>`.
    pub fn ipv6_conf(ifname: &str, knob: &str) -> Result<Key> {
        Key::checked_conf("ipv6", ifname, knob)
    }

    fn checked_conf(family: &str, ifname: &str, knob: &str) -> Result<Key> {
        // A slash in either part would shift the path; refuse it outright.
        if ifname.contains('/') || knob.contains('/') {
            return Err(Error::config(
                "sysctl",
                format!("interface {ifname:?} or knob {knob:?} contains '/'"),
            ));
        }
        Key::new(&format!("net/{family}/conf/{ifname}/{knob}"))
    }

    /// `net/ipv4/ip_forward`: IPv4 forwarding of the namespace.
    pub fn ipv4_forward() -> Key {
        Key("net/ipv4/ip_forward".to_string())
    }

    /// `net/ipv6/conf/all/forwarding`: IPv6 forwarding of the namespace.
    pub fn ipv6_forward() -> Key {
        Key("net/ipv6/conf/all/forwarding".to_string())
    }

    /// The key as written (`net/ipv6/conf/eth0/accept_dad`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The file under `/proc/sys`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(PROC_SYS).join(&self.0)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

thread_local! {
    /// Family directories opened by this thread: (namespace device, inode,
    /// family, `/proc/sys/net/<family>`). A thread that changes namespace
    /// gets the other namespace's directories, as the key says.
    static FAMILY_DIRS: RefCell<Vec<(u64, u64, String, OwnedFd)>> = const { RefCell::new(Vec::new()) };
}

/// Opens `key` in the calling thread's namespace, relative to its family
/// directory (see the module comment).
fn open_here(key: &Key, write: bool) -> std::io::Result<File> {
    let access = if write {
        OFlag::O_WRONLY
    } else {
        OFlag::O_RDONLY
    };
    let rest = key.0.strip_prefix("net/").unwrap_or(&key.0);
    let Some((family, within)) = rest.split_once('/') else {
        return std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open(key.path());
    };
    // std's metadata gives 64-bit numbers on every architecture (nix's
    // stat has 32-bit ones on 32-bit arm).
    let ns = std::fs::metadata("/proc/thread-self/ns/net")?;
    let (dev, ino) = (ns.dev(), ns.ino());
    FAMILY_DIRS.with(|dirs| {
        let mut dirs = dirs.borrow_mut();
        let found = dirs
            .iter()
            .position(|(d, i, f, _)| (*d, *i) == (dev, ino) && f == family);
        let index = match found {
            Some(index) => index,
            None => {
                let path = PathBuf::from(PROC_SYS).join("net").join(family);
                let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
                let dir = nix::fcntl::open(&path, flags, Mode::empty())?;
                dirs.push((dev, ino, family.to_string(), dir));
                dirs.len() - 1
            }
        };
        let fd = nix::fcntl::openat(
            &dirs[index].3,
            within,
            access | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(File::from(fd))
    })
}

/// Reads `key` in the calling thread's namespace, trimmed of the trailing
/// newline. A missing sysctl is [`Error::Kernel`] with errno `ENOENT`
/// ([`is_missing`]).
pub fn read_here(key: &Key) -> Result<String> {
    let op = || format!("read sysctl {key}");
    let mut s = String::new();
    open_here(key, false)
        .and_then(|mut f| f.read_to_string(&mut s))
        .map_err(|e| Error::kernel(op(), e))?;
    Ok(s.trim_end_matches('\n').to_string())
}

/// Writes `value` to `key` in the calling thread's namespace.
pub fn write_here(key: &Key, value: &str) -> Result<()> {
    let op = || format!("write {value:?} to sysctl {key}");
    let mut f = open_here(key, true).map_err(|e| Error::kernel(op(), e))?;
    // One write: the kernel parses the whole value from one call.
    f.write_all(value.as_bytes())
        .map_err(|e| Error::kernel(op(), e))
}

/// Writes `value` only when the sysctl holds something else, in the calling
/// thread's namespace. Returns whether it wrote.
pub fn ensure_here(key: &Key, value: &str) -> Result<bool> {
    if read_here(key)? == value {
        return Ok(false);
    }
    write_here(key, value)?;
    Ok(true)
}

/// Turns on forwarding of each family of `addrs` in the calling thread's
/// namespace (Go's `ip.EnableForward`), writing only what is not already 1.
pub fn enable_forwarding(addrs: impl IntoIterator<Item = IpAddr>) -> Result<()> {
    let families: std::collections::BTreeSet<IpFamily> =
        addrs.into_iter().map(|a| IpFamily::of(&a)).collect();
    for family in families {
        let key = match family {
            IpFamily::V4 => Key::ipv4_forward(),
            IpFamily::V6 => Key::ipv6_forward(),
        };
        ensure_here(&key, "1")?;
    }
    Ok(())
}

/// Reads `key` inside `ns`.
pub fn read(ns: &NetNs, key: &Key) -> Result<String> {
    ns.run(|| read_here(key))?
}

/// Writes `value` to `key` inside `ns`.
pub fn write(ns: &NetNs, key: &Key, value: &str) -> Result<()> {
    ns.run(|| write_here(key, value))?
}

/// [`ensure_here`] inside `ns`.
pub fn ensure(ns: &NetNs, key: &Key, value: &str) -> Result<bool> {
    ns.run(|| ensure_here(key, value))?
}

/// Whether `e` says the sysctl does not exist (`ENOENT`): e.g. IPv6 knobs
/// when the kernel has IPv6 disabled, or an interface that is gone.
pub fn is_missing(e: &Error) -> bool {
    matches!(e, Error::Kernel { source, .. } if source.raw_os_error() == Some(libc::ENOENT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    #[test]
    fn sysctl_keys_stay_under_net() {
        assert_eq!(
            Key::new("net/ipv4/ip_forward").unwrap().path(),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            Key::new("/net/ipv4/ip_forward").unwrap().as_str(),
            "net/ipv4/ip_forward"
        );
        assert_eq!(
            Key::ipv6_conf("cni0.100", "accept_ra").unwrap().as_str(),
            "net/ipv6/conf/cni0.100/accept_ra"
        );
        for bad in [
            "",
            "net",
            "net/",
            "kernel/hostname",
            "net/../kernel/hostname",
            "net/ipv4/../../kernel",
            "net//ipv4",
            "net/./ipv4",
            "net/ipv4/ip_forward\0",
            "net/ipv4/ip forward",
            "ne/ipv4",
        ] {
            let e = Key::new(bad).unwrap_err();
            assert_eq!(e.code(), 7, "{bad:?}");
            assert!(e.to_string().contains("sysctl"), "{e}");
        }
        assert!(Key::ipv4_conf("../x", "rp_filter").is_err());
        assert!(Key::ipv4_conf("..", "rp_filter").is_err());
        assert!(Key::ipv4_conf("eth0", "a/b").is_err());
        assert_eq!(Key::ipv4_forward().to_string(), "net/ipv4/ip_forward");
        assert_eq!(Key::ipv6_forward().as_str(), "net/ipv6/conf/all/forwarding");
    }

    #[test]
    fn sysctl_read_write_in_a_namespace() {
        if !privileged("sysctl_read_write_in_a_namespace") {
            return;
        }
        let ns = new_netns();
        let fwd = Key::ipv4_forward();
        let before_here = read_here(&fwd).unwrap();
        assert_eq!(read(&ns, &fwd).unwrap(), "0");
        assert!(ensure(&ns, &fwd, "1").unwrap());
        assert!(!ensure(&ns, &fwd, "1").unwrap());
        assert_eq!(read(&ns, &fwd).unwrap(), "1");
        // Only that namespace changed.
        assert_eq!(read_here(&fwd).unwrap(), before_here);
        write(&ns, &fwd, "0").unwrap();
        assert_eq!(read(&ns, &fwd).unwrap(), "0");

        let missing = Key::ipv4_conf("nosuchif0", "arp_notify").unwrap();
        let e = read(&ns, &missing).unwrap_err();
        assert!(is_missing(&e), "{e}");
        assert_eq!(e.code(), 100);
        assert!(e
            .to_string()
            .starts_with("read sysctl net/ipv4/conf/nosuchif0/arp_notify"));
        let e = write(&ns, &missing, "1").unwrap_err();
        assert!(is_missing(&e), "{e}");
        assert!(!is_missing(&Error::config("x", "y")));
    }

    #[test]
    fn one_thread_moving_between_namespaces_sees_each_ones_sysctls() {
        if !privileged("one_thread_moving_between_namespaces_sees_each_ones_sysctls") {
            return;
        }
        let (a, b) = (new_netns(), new_netns());
        let fwd = Key::ipv4_forward();
        let lo = Key::ipv4_conf("lo", "arp_notify").unwrap();
        std::thread::spawn(move || {
            use std::os::fd::AsFd;
            let enter = |ns: &NetNs| {
                nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap()
            };
            enter(&a);
            write_here(&fwd, "1").unwrap();
            write_here(&lo, "1").unwrap();
            enter(&b);
            assert_eq!(read_here(&fwd).unwrap(), "0", "b's own, not a's cached");
            assert_eq!(read_here(&lo).unwrap(), "0");
            enter(&a);
            assert_eq!(read_here(&fwd).unwrap(), "1");
            assert_eq!(read_here(&lo).unwrap(), "1");
        })
        .join()
        .unwrap();
    }
}
