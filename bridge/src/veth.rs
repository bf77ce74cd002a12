//! The veth pair on the bridge: the pair itself is made by the shared flow
//! (`libcni::attach::veth`: the container end named `CNI_IFNAME` created
//! directly in the container namespace, the host end `veth` + 8 random hex
//! digits); this module attaches the host end to the bridge with hairpin,
//! isolation and VLANs, and makes the VLAN gateway veth.

use std::io;

use libcni::attach::veth::{random_name, NAME_ATTEMPTS};
use libcni::netlink::link::{BridgeVlan, Link};
use libcni::netlink::{is_exists, BridgePortFlags, Netlink};
use libcni::netns::NetNs;
use libcni::Error;

use crate::config::Conf;
use crate::node::Bridge;

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
        let port_name = random_name()?;
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
