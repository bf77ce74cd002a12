//! The veth pair of a main plugin (bridge, ptp): the container end named
//! `CNI_IFNAME` created directly in the container namespace, the node end
//! `veth` + 8 random hex digits (as the reference names it), up, with
//! `accept_ra=0` (the plugin owns its routes).
//!
//! The node end carries its owner in its alias (`IFLA_IFALIAS`,
//! [`OwnerAlias`]): `cni-veth/<network>/<containerID>/<ifname>`. Its name
//! is random, and a pod whose runtime lost its record can keep its
//! namespace (and so the veth): the GC verb finds the veths of the
//! attachments its list leaves out by that alias ([`gc_host_veths`]). The
//! Go plugins set no alias, so their veths are never collected.

use std::io;
use std::path::Path;

use super::Add;
use crate::netlink::{is_exists, is_not_found, Link, Netlink};
use crate::netns::NetNs;
use crate::skel::CmdArgs;
use crate::sysctl::{self, Key};
use crate::types::Attachment;
use crate::{Error, ErrorList, Result};

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

/// What every owner alias of a node-side veth starts with.
pub const ALIAS_PREFIX: &str = "cni-veth/";
/// `IFALIASZ` - 1: the longest alias the kernel keeps.
const MAX_ALIAS_LEN: usize = 255;

/// The attachment a node-side veth belongs to, as its alias records it.
/// None of the three parts can hold a `/` (the spec's name pattern for the
/// first two, the kernel's interface names for the third).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerAlias {
    pub network: String,
    pub container_id: String,
    pub ifname: String,
}

impl OwnerAlias {
    /// The owner of the veth an ADD of `args` makes.
    pub fn of(args: &CmdArgs) -> OwnerAlias {
        OwnerAlias {
            network: args.conf.name.clone(),
            container_id: args.container_id.clone(),
            ifname: args.ifname.clone(),
        }
    }

    /// `cni-veth/<network>/<containerID>/<ifname>`, or `None` when that is
    /// longer than the kernel keeps (the veth then has no alias, and only
    /// a DEL removes it).
    pub fn alias(&self) -> Option<String> {
        let alias = format!(
            "{ALIAS_PREFIX}{}/{}/{}",
            self.network, self.container_id, self.ifname
        );
        (alias.len() <= MAX_ALIAS_LEN).then_some(alias)
    }

    /// The owner an alias of ours records; `None` for any other alias.
    pub fn parse(alias: &str) -> Option<OwnerAlias> {
        let mut parts = alias.strip_prefix(ALIAS_PREFIX)?.split('/');
        let (network, container_id, ifname) = (parts.next()?, parts.next()?, parts.next()?);
        let complete = parts.next().is_none()
            && [network, container_id, ifname]
                .iter()
                .all(|p| !p.is_empty());
        complete.then(|| OwnerAlias {
            network: network.into(),
            container_id: container_id.into(),
            ifname: ifname.into(),
        })
    }

    fn is_in(&self, valid: &[Attachment]) -> bool {
        valid
            .iter()
            .any(|a| a.container_id == self.container_id && a.ifname == self.ifname)
    }
}

/// The GC verb's share for a plugin that leaves a node-side veth (bridge,
/// ptp): deletes every veth of the plugin's namespace whose alias names an
/// attachment of `network` that `valid` (`cni.dev/valid-attachments`)
/// leaves out; its container end, and the addresses on it, go with it. A
/// veth without our alias (the Go plugins') is never touched. Best effort:
/// the errors come together.
pub fn gc_host_veths(network: &str, valid: &[Attachment]) -> Result<()> {
    let mut node = Netlink::open()?;
    let mut errors = ErrorList::new();
    for link in node
        .links()?
        .iter()
        .filter(|l| l.kind.as_deref() == Some("veth"))
    {
        let Some(owner) = link.alias.as_deref().and_then(OwnerAlias::parse) else {
            continue;
        };
        if owner.network != network || owner.is_in(valid) {
            continue;
        }
        match node.delete_link(link.index) {
            Err(e) if !is_not_found(&e) => errors.push(e),
            _ => {}
        }
    }
    errors.finish()
}

/// DEL's link step for a plugin that made the pair with
/// [`Add::create_veth`] (its closure for [`super::del_with`]): the
/// container end when `CNI_NETNS` still names a namespace (the node end
/// goes with it); else the node end whose alias names this attachment, if
/// there is one: a namespace the runtime no longer names (an empty
/// `CNI_NETNS`, a DEL by identity) can outlive the runtime's record, and
/// its veth would keep holding the address that IPAM DEL frees.
pub fn delete_pair(args: &CmdArgs) -> Result<()> {
    if let Some(ns) = NetNs::open_container_if_present(Path::new(&args.netns))? {
        return Netlink::open_in(&ns)?.delete_link_if_present(&args.ifname);
    }
    let Some(alias) = OwnerAlias::of(args).alias() else {
        return Ok(());
    };
    let mut node = Netlink::open()?;
    let ours = node
        .links()?
        .into_iter()
        .find(|l| l.kind.as_deref() == Some("veth") && l.alias.as_deref() == Some(&alias));
    match ours.map(|l| node.delete_link(l.index)) {
        Some(Err(e)) if !is_not_found(&e) => Err(e),
        _ => Ok(()),
    }
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
    /// it (deleting the node end removes both); then the node end gets its
    /// owner alias ([`OwnerAlias`]) and is brought up with `accept_ra=0`.
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
        if let Some(alias) = OwnerAlias::of(self.args).alias() {
            self.host()?.set_alias(h.index, &alias)?;
        }
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

    #[test]
    fn attach_veth_owner_alias_round_trips_and_refuses_others() {
        let owner = OwnerAlias {
            network: "kindnet".into(),
            container_id: "0123abcd".into(),
            ifname: "eth0".into(),
        };
        let alias = owner.alias().unwrap();
        assert_eq!(alias, "cni-veth/kindnet/0123abcd/eth0");
        assert_eq!(OwnerAlias::parse(&alias), Some(owner));
        for other in [
            "",
            "cni-veth/",
            "cni-veth/net/cid",
            "cni-veth/net//eth0",
            "cni-veth/net/cid/eth0/more",
            "cni-bandwidth:cid:eth0",
            "tc-redirect-tap/net/cid/eth0",
        ] {
            assert_eq!(OwnerAlias::parse(other), None, "{other:?}");
        }
        let long = OwnerAlias {
            network: "n".into(),
            container_id: "c".repeat(250),
            ifname: "eth0".into(),
        };
        assert_eq!(long.alias(), None);
    }
}
