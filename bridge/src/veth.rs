//! The veth pair on the bridge: the pair itself is made by the shared flow
//! (`libcni::attach::veth`: the container end named `CNI_IFNAME` created
//! directly in the container namespace, the host end `veth` + 8 random hex
//! digits); this module attaches the host end to the bridge with hairpin,
//! isolation and VLANs, and makes the VLAN gateway veth.

use std::io;

use libcni::attach::veth::{random_name, NAME_ATTEMPTS};
use libcni::netlink::bridge_vlan::BridgeVlan;
use libcni::netlink::link::Link;
use libcni::netlink::{is_exists, BridgePortFlags, Netlink};
use libcni::netns::NetNs;
use libcni::Error;

use crate::config::Conf;
use crate::node::Bridge;

/// Makes `port` a port of `br` with the configured hairpin and isolation
/// flags, then its VLANs (`set_vlans`).
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

/// The VLANs of a port, in the reference's (v1.8+) order: the VLANs the
/// port has (the bridge's default VLAN 1) removed unless
/// `preserve_default`; `vlan` as PVID untagged (the access VLAN, or with a
/// trunk its native VLAN); the `trunk` VLANs tagged; and a trunk without
/// `vlan` gets VLAN 1 as its native VLAN, as before v1.8. Later entries
/// change the flags of a VLAN already there, as the kernel applies them in
/// order (a `vlan` also in the trunk ends tagged, as the reference's).
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
    let mut add = Vec::new();
    if vlan != 0 {
        add.push(BridgeVlan::access(vlan));
    }
    add.extend(trunk.iter().map(|&(a, b)| BridgeVlan::tagged(a, b)));
    if vlan == 0 {
        add.push(BridgeVlan::access(DEFAULT_VLAN));
    }
    host.bridge_vlan_add(port, &add)
}

/// The bridge's default VLAN (`default_pvid`): a trunk port's native VLAN
/// when the config names none.
pub const DEFAULT_VLAN: u16 = 1;

/// The VLANs `set_vlans` leaves on a port, one entry per VLAN ID (`vid`,
/// PVID, untagged), sorted, for CHECK. With `preserve_default` the
/// bridge's default VLAN may stay too (see [`vlans_match`]).
pub fn expected_vlans(conf: &Conf) -> Vec<(u16, bool, bool)> {
    let mut ids = std::collections::BTreeMap::new();
    if conf.vlan != 0 {
        ids.insert(conf.vlan, (true, true));
    }
    for &(a, b) in &conf.trunk {
        for v in a..=b {
            ids.insert(v, (false, false));
        }
    }
    if conf.vlan == 0 && !conf.trunk.is_empty() {
        ids.insert(DEFAULT_VLAN, (true, true));
    }
    ids.into_iter().map(|(v, (p, u))| (v, p, u)).collect()
}

/// Whether a port's VLANs `have` are what `conf` asks for: exactly
/// [`expected_vlans`], but with `preserveDefaultVlan` the default VLAN may
/// also be there, untagged (the PVID moved to `vlan`).
pub fn vlans_match(conf: &Conf, have: &[BridgeVlan]) -> bool {
    let mut have: Vec<(u16, bool, bool)> = have
        .iter()
        .flat_map(|v| (v.vid..=v.last.max(v.vid)).map(move |id| (id, v.pvid, v.untagged)))
        .collect();
    have.sort_unstable();
    have.dedup();
    let want = expected_vlans(conf);
    if conf.preserve_default_vlan && !want.iter().any(|w| w.0 == DEFAULT_VLAN) {
        have.retain(|&(id, pvid, untagged)| {
            !(id == DEFAULT_VLAN && untagged && (!pvid || conf.vlan == 0))
        });
    }
    have == want
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: serde_json::Value) -> Conf {
        let mut c = json!({"cniVersion": "1.1.0", "name": "n", "type": "bridge"});
        for (k, x) in v.as_object().unwrap() {
            c[k] = x.clone();
        }
        Conf::parse(&libcni::skel::test_args(&c.to_string())).unwrap()
    }

    fn vlan(vid: u16, pvid: bool, untagged: bool) -> BridgeVlan {
        BridgeVlan {
            vid,
            last: vid,
            pvid,
            untagged,
        }
    }

    #[test]
    fn the_port_vlans_are_the_references() {
        let access = conf(json!({"vlan": 100}));
        assert_eq!(expected_vlans(&access), [(100, true, true)]);
        // A trunk alone: VLAN 1 is its native VLAN.
        let trunk = conf(json!({"vlanTrunk": [{"id": 5}, {"minID": 7, "maxID": 8}]}));
        assert_eq!(
            expected_vlans(&trunk),
            [
                (1, true, true),
                (5, false, false),
                (7, false, false),
                (8, false, false)
            ]
        );
        // vlan + vlanTrunk: vlan is the native VLAN; one also in the trunk
        // ends tagged (the later request wins, as in the reference).
        let native = conf(json!({"vlan": 5, "vlanTrunk": [{"id": 6}]}));
        assert_eq!(
            expected_vlans(&native),
            [(5, true, true), (6, false, false)]
        );
        let both = conf(json!({"vlan": 6, "vlanTrunk": [{"id": 6}]}));
        assert_eq!(expected_vlans(&both), [(6, false, false)]);
        let with_1 = conf(json!({"vlanTrunk": [{"id": 1}, {"id": 3}]}));
        assert_eq!(
            expected_vlans(&with_1),
            [(1, true, true), (3, false, false)]
        );
    }

    #[test]
    fn a_preserved_default_vlan_may_stay() {
        let have = [vlan(1, false, true), vlan(100, true, true)];
        assert!(!vlans_match(&conf(json!({"vlan": 100})), &have));
        let keep = conf(json!({"vlan": 100, "preserveDefaultVlan": true}));
        assert!(vlans_match(&keep, &have));
        assert!(vlans_match(&keep, &[vlan(100, true, true)]));
        assert!(!vlans_match(
            &keep,
            &[vlan(1, true, true), vlan(100, false, true)]
        ));
        let trunk =
            conf(json!({"vlanTrunk": [{"minID": 10, "maxID": 11}], "preserveDefaultVlan": true}));
        let ranged = BridgeVlan::tagged(10, 11);
        assert!(vlans_match(&trunk, &[vlan(1, true, true), ranged]));
        assert!(!vlans_match(&trunk, &[ranged]));
    }
}
