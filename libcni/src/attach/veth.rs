//! The veth pair of a main plugin (bridge, ptp): the container end named
//! `CNI_IFNAME` created directly in the container namespace, the node end
//! `veth` + 8 random hex digits (as the reference names it), up, with
//! `accept_ra=0` (the plugin owns its routes).

use std::io;

use super::Add;
use crate::netlink::{is_exists, Link};
use crate::sysctl::{self, Key};
use crate::{Error, Result};

/// Attempts at a free random node-side name, as the reference.
pub const NAME_ATTEMPTS: usize = 10;

/// Both ends of a new veth pair.
#[derive(Debug, Clone)]
pub struct Veth {
    /// The node end, in the plugin's namespace.
    pub host: Link,
    /// The container end, in the container namespace.
    pub container: Link,
}

/// `veth` + 8 random hex digits.
pub fn random_name() -> Result<String> {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        return Err(Error::kernel(
            "getrandom for a veth name",
            io::Error::last_os_error(),
        ));
    }
    Ok(format!(
        "veth{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3]
    ))
}

impl Add<'_> {
    /// Creates the pair: `CNI_IFNAME` (with `mac`) directly inside the
    /// container namespace and a random `veth…` name on the node (retried
    /// on a clash), `mtu` on both ends. Recorded as soon as the kernel made
    /// it (deleting the node end removes both), then the node end is
    /// brought up with `accept_ra=0`.
    pub fn create_veth(&mut self, mtu: Option<u32>, mac: Option<[u8; 6]>) -> Result<Veth> {
        let ifname = self.args.ifname.clone();
        let mut attempt = 0;
        let host_name = loop {
            attempt += 1;
            let name = random_name()?;
            let (host, _, ns) = self.sockets()?;
            match host.add_veth(&name, mtu, &ifname, ns, mac) {
                Ok(()) => break name,
                Err(e) if is_exists(&e) => {
                    if self.container().link_by_name(&ifname)?.is_some() {
                        return Err(super::ifname_exists(&ifname));
                    }
                    if attempt >= NAME_ATTEMPTS {
                        return Err(Error::kernel(
                            format!("no free veth name after {NAME_ATTEMPTS} random tries"),
                            io::Error::from_raw_os_error(libc::EEXIST),
                        ));
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let missing =
            |what: String| Error::kernel(what, io::Error::from_raw_os_error(libc::ENODEV));
        let h = match self.host()?.link_by_name(&host_name) {
            Ok(Some(h)) => h,
            // Not recorded yet: delete it by name before giving up.
            other => {
                let _ = self.host()?.delete_link_if_present(&host_name);
                other?;
                return Err(missing(format!(
                    "veth {host_name:?} vanished after creation"
                )));
            }
        };
        self.record_link(&h, false);
        let c = self
            .container()
            .link_by_name(&ifname)?
            .ok_or_else(|| missing(format!("container veth {ifname:?} vanished after creation")))?;
        self.host()?.set_link_up(h.index)?;
        match sysctl::ensure_here(&Key::ipv6_conf(&host_name, "accept_ra")?, "0") {
            Err(e) if !sysctl::is_missing(&e) => return Err(e),
            _ => {}
        }
        Ok(Veth {
            host: h,
            container: c,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_veth_random_names_are_veth_and_8_hex() {
        let a = random_name().unwrap();
        let b = random_name().unwrap();
        assert_eq!(a.len(), 12);
        assert!(a.starts_with("veth"));
        assert!(a[4..]
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
    }
}
