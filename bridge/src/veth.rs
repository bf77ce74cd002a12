//! The veth pair: the container end named `CNI_IFNAME` created directly in
//! the container namespace, the host end `veth` + 8 random hex digits,
//! attached to the bridge with hairpin, isolation and VLANs.

use std::io;

use libcni::netlink::link::{BridgeVlan, Link};
use libcni::netlink::{is_exists, BridgePortFlags, Netlink};
use libcni::netns::NetNs;
use libcni::sysctl::{self, Key};
use libcni::Error;

use crate::config::Conf;
use crate::node::Bridge;

/// Attempts at a free random host-side name, as the reference.
const NAME_ATTEMPTS: usize = 10;

/// Both ends of a new veth pair.
#[derive(Debug, Clone)]
pub struct Veth {
    /// The host end, in the node namespace.
    pub host: Link,
    /// The container end, in the container namespace.
    pub container: Link,
}

/// `veth` + 8 random hex digits.
pub fn random_veth_name() -> Result<String, Error> {
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

/// Creates the pair: `ifname` (with `mac`) directly inside `ns`, a random
/// `veth…` name in the node (retried on a clash), `mtu` on both ends. The
/// host end is brought up with `accept_ra=0`.
pub fn create(
    host: &mut Netlink,
    container: &mut Netlink,
    ns: &NetNs,
    ifname: &str,
    mtu: Option<u32>,
    mac: Option<[u8; 6]>,
) -> Result<Veth, Error> {
    let mut attempt = 0;
    let host_name = loop {
        attempt += 1;
        let name = random_veth_name()?;
        match host.add_veth(&name, mtu, ifname, ns, mac) {
            Ok(()) => break name,
            Err(e) if is_exists(&e) => {
                if container.link_by_name(ifname)?.is_some() {
                    return Err(container_ifname_exists(ifname));
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
    let missing = |what: String| Error::kernel(what, io::Error::from_raw_os_error(libc::ENODEV));
    let h = host
        .link_by_name(&host_name)?
        .ok_or_else(|| missing(format!("veth {host_name:?} vanished after creation")))?;
    let c = container
        .link_by_name(ifname)?
        .ok_or_else(|| missing(format!("container veth {ifname:?} vanished after creation")))?;
    let veth = Veth {
        host: h,
        container: c,
    };
    host.set_link_up(veth.host.index)?;
    match sysctl::ensure_here(&Key::ipv6_conf(&host_name, "accept_ra")?, "0") {
        Err(e) if !sysctl::is_missing(&e) => return Err(e),
        _ => {}
    }
    Ok(veth)
}

/// The spec's "must error if the interface already exists".
pub fn container_ifname_exists(ifname: &str) -> Error {
    Error::kernel(
        format!("container interface CNI_IFNAME {ifname:?} already exists in CNI_NETNS"),
        io::Error::from_raw_os_error(libc::EEXIST),
    )
}

/// Makes `port` a port of `br` with the configured hairpin and isolation
/// flags, then VLANs: the default VLAN removed unless
/// `preserveDefaultVlan`, the access VLAN as PVID untagged, the trunk
/// VLANs tagged.
pub fn attach(host: &mut Netlink, port: u32, br: &Bridge, conf: &Conf) -> Result<(), Error> {
    host.set_master(port, br.index)?;
    host.set_bridge_port(
        port,
        BridgePortFlags {
            hairpin: Some(conf.hairpin),
            isolated: conf.port_isolation.then_some(true),
            ..BridgePortFlags::default()
        },
    )?;
    set_vlans(
        host,
        port,
        conf.vlan,
        &conf.trunk,
        conf.preserve_default_vlan,
    )
}

fn set_vlans(
    host: &mut Netlink,
    port: u32,
    vlan: u16,
    trunk: &[(u16, u16)],
    preserve_default: bool,
) -> Result<(), Error> {
    if vlan == 0 && trunk.is_empty() {
        return Ok(());
    }
    if !preserve_default {
        let have = host.bridge_port_vlans(port)?;
        if !have.is_empty() {
            let drop: Vec<BridgeVlan> = have
                .iter()
                .map(|v| BridgeVlan::tagged(v.vid, v.last))
                .collect();
            host.bridge_vlan_del(port, &drop)?;
        }
    }
    if vlan != 0 {
        host.bridge_vlan_add(port, &[BridgeVlan::access(vlan)])?;
    }
    if !trunk.is_empty() {
        let tagged: Vec<BridgeVlan> = trunk
            .iter()
            .map(|&(a, b)| BridgeVlan::tagged(a, b))
            .collect();
        host.bridge_vlan_add(port, &tagged)?;
    }
    Ok(())
}

/// With `vlan` and `isGateway`, the gateway address goes on a veth named
/// `<bridge>.<vlan>` whose peer is a bridge port in that VLAN (as the
/// reference). Creates the pair when missing; returns the gateway end.
pub fn ensure_vlan_gateway(host: &mut Netlink, br: &Bridge, conf: &Conf) -> Result<Link, Error> {
    let name = format!("{}.{}", br.name, conf.vlan);
    if let Some(l) = host.link_by_name(&name)? {
        return Ok(l);
    }
    let here = NetNs::current()?;
    let mtu = host.link_by_index(br.index)?.map(|l| l.mtu);
    let mut attempt = 0;
    let port_name = loop {
        attempt += 1;
        let port_name = random_veth_name()?;
        match host.add_veth(&port_name, mtu, &name, &here, None) {
            Ok(()) => break port_name,
            Err(e) if is_exists(&e) && attempt < NAME_ATTEMPTS => {
                if let Some(l) = host.link_by_name(&name)? {
                    return Ok(l); // a concurrent ADD made it
                }
            }
            Err(e) => return Err(e),
        }
    };
    let missing = |n: &str| {
        Error::kernel(
            format!("VLAN gateway veth {n:?} vanished after creation"),
            io::Error::from_raw_os_error(libc::ENODEV),
        )
    };
    let port = host
        .link_by_name(&port_name)?
        .ok_or_else(|| missing(&port_name))?;
    host.set_link_up(port.index)?;
    host.set_master(port.index, br.index)?;
    set_vlans(host, port.index, conf.vlan, &[], conf.preserve_default_vlan)?;
    let gw = host.link_by_name(&name)?.ok_or_else(|| missing(&name))?;
    host.set_link_up(gw.index)?;
    Ok(gw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_names_are_veth_and_8_hex() {
        let a = random_veth_name().unwrap();
        let b = random_veth_name().unwrap();
        assert_eq!(a.len(), 12);
        assert!(a.starts_with("veth"));
        assert!(a[4..]
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
    }
}
