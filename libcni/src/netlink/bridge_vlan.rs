//! Bridge VLANs: a bridge's VLAN filtering, and the VLANs of its ports
//! (`IFLA_AF_SPEC` bridge VLAN info), as the bridge plugin sets them
//! (access VLANs, trunks, a native VLAN).

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};
use netlink_packet_route::link::{InfoData, InfoKind, LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::link_message;
use super::Netlink;
use crate::Result;
use netlink_packet_route::link as rtlink;

/// A VLAN (or a range of VLANs) of a bridge port, as `bridge vlan` shows
/// them: `vid..=last`, with the PVID and untagged flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeVlan {
    /// First VLAN ID.
    pub vid: u16,
    /// Last VLAN ID (equal to `vid` for a single VLAN).
    pub last: u16,
    /// Untagged ingress frames get this VLAN (`BRIDGE_VLAN_INFO_PVID`).
    pub pvid: bool,
    /// Frames leave untagged (`BRIDGE_VLAN_INFO_UNTAGGED`).
    pub untagged: bool,
}

impl BridgeVlan {
    /// An access VLAN: PVID and untagged (Go's `BridgeVlanAdd(vid, true, true)`).
    pub fn access(vid: u16) -> BridgeVlan {
        BridgeVlan {
            vid,
            last: vid,
            pvid: true,
            untagged: true,
        }
    }

    /// Tagged VLANs `vid..=last` (a trunk).
    pub fn tagged(vid: u16, last: u16) -> BridgeVlan {
        BridgeVlan {
            vid,
            last,
            pvid: false,
            untagged: false,
        }
    }

    /// `IFLA_BRIDGE_VLAN_INFO` entries: one for a single VLAN, a
    /// `RANGE_BEGIN`/`RANGE_END` pair for a range.
    fn to_nlas(self) -> Vec<rtlink::AfSpecBridge> {
        use rtlink::{AfSpecBridge, BridgeVlanInfo, BridgeVlanInfoFlags as F};
        let mut flags = F::empty();
        if self.pvid {
            flags |= F::Pvid;
        }
        if self.untagged {
            flags |= F::Untagged;
        }
        if self.last <= self.vid {
            return vec![AfSpecBridge::VlanInfo(BridgeVlanInfo {
                flags,
                vid: self.vid,
            })];
        }
        vec![
            AfSpecBridge::VlanInfo(BridgeVlanInfo {
                flags: flags | F::RangeBegin,
                vid: self.vid,
            }),
            AfSpecBridge::VlanInfo(BridgeVlanInfo {
                flags: flags | F::RangeEnd,
                vid: self.last,
            }),
        ]
    }
}

/// The `RTM_SETLINK`/`RTM_DELLINK` body (family `AF_BRIDGE`) that adds or
/// removes `vlans` on bridge port `index`, as `bridge vlan add|del ...
/// master` sends it: `IFLA_AF_SPEC { IFLA_BRIDGE_FLAGS master,
/// IFLA_BRIDGE_VLAN_INFO... }`.
fn bridge_vlan_message(index: u32, vlans: &[BridgeVlan]) -> LinkMessage {
    let mut msg = link_message(index);
    msg.header.interface_family = netlink_packet_route::AddressFamily::Bridge;
    let mut spec = vec![rtlink::AfSpecBridge::Flags(rtlink::BridgeFlag::Controller)];
    spec.extend(vlans.iter().flat_map(|v| v.to_nlas()));
    msg.attributes.push(LinkAttribute::AfSpecBridge(spec));
    msg
}

/// The `RTM_NEWLINK` body that sets `vlan_filtering` of bridge `index`
/// (`IFLA_LINKINFO { kind bridge, data { IFLA_BR_VLAN_FILTERING } }`), as
/// `ip link set <br> type bridge vlan_filtering 0|1` sends it.
fn bridge_vlan_filtering_message(index: u32, on: bool) -> LinkMessage {
    let mut msg = link_message(index);
    msg.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Bridge),
        LinkInfo::Data(InfoData::Bridge(vec![rtlink::InfoBridge::VlanFiltering(
            on,
        )])),
    ]));
    msg
}

impl Netlink {
    /// Whether bridge `index` filters VLANs (`IFLA_BR_VLAN_FILTERING`);
    /// `None` if there is no such link or it reports no such attribute.
    pub fn bridge_vlan_filtering(&mut self, index: u32) -> Result<Option<bool>> {
        let Some(msg) = self.link_message_of(index)? else {
            return Ok(None);
        };
        for attr in msg.attributes {
            if let LinkAttribute::LinkInfo(infos) = attr {
                for info in infos {
                    if let LinkInfo::Data(InfoData::Bridge(nlas)) = info {
                        for nla in nlas {
                            if let rtlink::InfoBridge::VlanFiltering(on) = nla {
                                return Ok(Some(on));
                            }
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// Creates a bridge named `name` with `mtu` if given and
    /// `vlan_filtering` on. A kernel without bridge VLAN filtering refuses
    /// it with `EOPNOTSUPP` and creates nothing. A link of that name
    /// already there is `EEXIST`.
    pub fn add_bridge_vlan_filtering(&mut self, name: &str, mtu: Option<u32>) -> Result<()> {
        let mut msg = link_message(0);
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Bridge),
            LinkInfo::Data(InfoData::Bridge(vec![rtlink::InfoBridge::VlanFiltering(
                true,
            )])),
        ]));
        self.request(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add bridge {name:?} with vlan_filtering on"),
        )?;
        Ok(())
    }

    /// Sets `vlan_filtering` of bridge `index`. A kernel without bridge
    /// VLAN filtering refuses it, whatever the value, with `EOPNOTSUPP`:
    /// writing the current value is a probe that changes nothing.
    pub fn set_bridge_vlan_filtering(&mut self, index: u32, on: bool) -> Result<()> {
        let msg = bridge_vlan_filtering_message(index, on);
        self.request(RouteNetlinkMessage::NewLink(msg), 0, || {
            format!(
                "set vlan_filtering {} on bridge {index}",
                if on { 1 } else { 0 }
            )
        })?;
        Ok(())
    }

    /// Adds `vlans` to bridge port `index` (`bridge vlan add ... master`).
    pub fn bridge_vlan_add(&mut self, index: u32, vlans: &[BridgeVlan]) -> Result<()> {
        let msg = bridge_vlan_message(index, vlans);
        self.request(RouteNetlinkMessage::SetLink(msg), 0, || {
            format!("add vlans {vlans:?} to bridge port {index}")
        })?;
        Ok(())
    }

    /// Removes `vlans` from bridge port `index` (`bridge vlan del ... master`).
    pub fn bridge_vlan_del(&mut self, index: u32, vlans: &[BridgeVlan]) -> Result<()> {
        let msg = bridge_vlan_message(index, vlans);
        self.request(RouteNetlinkMessage::DelLink(msg), 0, || {
            format!("delete vlans {vlans:?} from bridge port {index}")
        })?;
        Ok(())
    }

    /// The VLANs of bridge port `index`, as ranges of VLAN IDs with the
    /// same flags (`RTEXT_FILTER_BRVLAN_COMPRESSED`, as `bridge vlan show`
    /// asks: a trunk of 4,000 VLANs fits a message), empty on a kernel
    /// without bridge VLAN filtering.
    pub fn bridge_port_vlans(&mut self, index: u32) -> Result<Vec<BridgeVlan>> {
        let mut msg = link_message(0);
        msg.header.interface_family = netlink_packet_route::AddressFamily::Bridge;
        msg.attributes.push(LinkAttribute::ExtMask(vec![
            rtlink::LinkExtentMask::BrvlanCompressed,
        ]));
        let replies = self.request(RouteNetlinkMessage::GetLink(msg), NLM_F_DUMP, || {
            format!("list vlans of bridge port {index}")
        })?;
        let mut vlans: Vec<BridgeVlan> = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewLink(l) = reply else {
                continue;
            };
            if l.header.index != index {
                continue;
            }
            for attr in l.attributes {
                if let LinkAttribute::AfSpecBridge(spec) = attr {
                    for s in spec {
                        if let rtlink::AfSpecBridge::VlanInfo(info) = s {
                            use rtlink::BridgeVlanInfoFlags as F;
                            if info.flags.contains(F::RangeEnd) {
                                // Closes the range its RANGE_BEGIN opened.
                                if let Some(open) = vlans.last_mut() {
                                    open.last = info.vid;
                                }
                                continue;
                            }
                            vlans.push(BridgeVlan {
                                vid: info.vid,
                                last: info.vid,
                                pvid: info.flags.contains(F::Pvid),
                                untagged: info.flags.contains(F::Untagged),
                            });
                        }
                    }
                }
            }
        }
        Ok(vlans)
    }
}

#[cfg(test)]
mod vlan_message_tests {
    use super::super::errno;
    use super::super::link::{BR_STATE_DISABLED, BR_STATE_FORWARDING};
    use super::super::notify::{Notifications, RTNLGRP_LINK};
    use super::*;
    use netlink_packet_core::Emitable;

    fn bytes(msg: &LinkMessage) -> Vec<u8> {
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.emit(&mut buf);
        buf
    }

    /// `struct ifinfomsg` with family `family` and index `index`.
    fn ifinfomsg(family: u8, index: u32) -> Vec<u8> {
        let mut v = vec![family, 0, 0, 0];
        v.extend_from_slice(&index.to_ne_bytes());
        v.extend_from_slice(&[0; 8]); // flags, change
        v
    }

    #[test]
    fn netlink_link_bridge_vlan_access_message_bytes() {
        let mut want = ifinfomsg(libc::AF_BRIDGE as u8, 7);
        // IFLA_AF_SPEC (26), 20 bytes: IFLA_BRIDGE_FLAGS (0) = master (1),
        // then IFLA_BRIDGE_VLAN_INFO (2) = {flags PVID|UNTAGGED (6), vid 100}.
        want.extend_from_slice(&[20, 0, 26, 0]);
        want.extend_from_slice(&[6, 0, 0, 0, 1, 0, 0, 0]);
        want.extend_from_slice(&[8, 0, 2, 0, 6, 0, 100, 0]);
        let msg = bridge_vlan_message(7, &[BridgeVlan::access(100)]);
        assert_eq!(bytes(&msg), want);
    }

    #[test]
    fn netlink_link_bridge_vlan_trunk_message_bytes() {
        let mut want = ifinfomsg(libc::AF_BRIDGE as u8, 300);
        // master flag, vid 5 tagged, then range 10-4094 tagged.
        want.extend_from_slice(&[36, 0, 26, 0]);
        want.extend_from_slice(&[6, 0, 0, 0, 1, 0, 0, 0]);
        want.extend_from_slice(&[8, 0, 2, 0, 0, 0, 5, 0]);
        want.extend_from_slice(&[8, 0, 2, 0, 0x08, 0, 10, 0]); // RANGE_BEGIN
        want.extend_from_slice(&[8, 0, 2, 0, 0x10, 0, 0xfe, 0x0f]); // RANGE_END, 4094
        let msg = bridge_vlan_message(
            300,
            &[BridgeVlan::tagged(5, 5), BridgeVlan::tagged(10, 4094)],
        );
        assert_eq!(bytes(&msg), want);
    }

    #[test]
    fn netlink_link_bridge_vlan_filtering_message_bytes() {
        let mut want = ifinfomsg(0, 4);
        // IFLA_LINKINFO (18) { IFLA_INFO_KIND (1) "bridge\0", IFLA_INFO_DATA
        // (2) { IFLA_BR_VLAN_FILTERING (7) u8 1 } }; like iproute2, without
        // NLA_F_NESTED, which the kernel does not require here.
        let mut kind = vec![11, 0, 1, 0];
        kind.extend_from_slice(b"bridge\0");
        kind.push(0); // pad to 4
        let data = [12u8, 0, 2, 0, 5, 0, 7, 0, 1, 0, 0, 0];
        let len = (4 + kind.len() + data.len()) as u8;
        want.extend_from_slice(&[len, 0, 18, 0]);
        want.extend_from_slice(&kind);
        want.extend_from_slice(&data);
        assert_eq!(bytes(&bridge_vlan_filtering_message(4, true)), want);
        let off = bridge_vlan_filtering_message(4, false);
        let b = bytes(&off);
        assert_eq!(b[b.len() - 4], 0, "vlan_filtering 0");
    }

    /// The messages the byte-level tests above pin, sent to a kernel with
    /// bridge VLAN filtering (Debian's, in the full-kernel VM) and read back
    /// both ways: through `bridge_port_vlans` and with `bridge -j vlan show`.
    #[test]
    fn fullkernel_netlink_bridge_vlan_messages_read_back() {
        use crate::netlink::testing::full_kernel;
        use crate::netns::testing::new_netns;
        if !full_kernel("fullkernel_netlink_bridge_vlan_messages_read_back") {
            return;
        }
        let (node, pod) = (new_netns(), new_netns());
        let mut nl = Netlink::open_in(&node).unwrap();
        nl.add_bridge_vlan_filtering("vbr0", None).unwrap();
        let br = nl.link_by_name("vbr0").unwrap().unwrap();
        assert_eq!(nl.bridge_vlan_filtering(br.index).unwrap(), Some(true));
        nl.add_veth("acc0", None, "eth0", &pod, None).unwrap();
        nl.add_veth("trk0", None, "eth1", &pod, None).unwrap();
        let acc = nl.link_by_name("acc0").unwrap().unwrap();
        let trk = nl.link_by_name("trk0").unwrap().unwrap();
        for p in [&acc, &trk] {
            nl.set_master(p.index, br.index).unwrap();
            // A new port comes with the default VLAN 1, PVID untagged.
            assert_eq!(
                nl.bridge_port_vlans(p.index).unwrap(),
                [BridgeVlan::access(1)]
            );
            nl.bridge_vlan_del(p.index, &[BridgeVlan::tagged(1, 1)])
                .unwrap();
            assert_eq!(nl.bridge_port_vlans(p.index).unwrap(), []);
        }
        nl.bridge_vlan_add(acc.index, &[BridgeVlan::access(100)])
            .unwrap();
        let trunk = [BridgeVlan::tagged(5, 5), BridgeVlan::tagged(10, 4094)];
        nl.bridge_vlan_add(trk.index, &trunk).unwrap();
        assert_eq!(
            nl.bridge_port_vlans(acc.index).unwrap(),
            [BridgeVlan::access(100)]
        );
        assert_eq!(nl.bridge_port_vlans(trk.index).unwrap(), trunk);
        // `bridge vlan show` lists each VLAN ID (iproute2 6.1 does not
        // merge ranges): every one of them, with its flags.
        let shown = |dev: &str| -> Vec<(u64, Vec<String>)> {
            let out = node
                .run(|| {
                    std::process::Command::new("bridge")
                        .args(["-j", "vlan", "show", "dev", dev])
                        .output()
                })
                .unwrap()
                .expect("bridge -j vlan show");
            assert!(out.status.success(), "{out:?}");
            let v = crate::gojson::parse_value(&out.stdout).unwrap();
            let mut ids = Vec::new();
            for x in v[0]["vlans"].as_array().into_iter().flatten() {
                let first = x["vlan"].as_u64().unwrap();
                let last = x["vlanEnd"].as_u64().unwrap_or(first);
                let flags: Vec<String> = x["flags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|f| f.as_str().unwrap().to_string())
                    .collect();
                ids.extend((first..=last).map(|id| (id, flags.clone())));
            }
            ids
        };
        assert_eq!(
            shown("acc0"),
            [(100, vec!["PVID".to_string(), "Egress Untagged".to_string()])]
        );
        let ids = shown("trk0");
        assert_eq!(ids.len(), 1 + 4085, "VLAN 5 and 10-4094");
        assert!(ids.iter().all(|(_, f)| f.is_empty()), "all tagged");
        assert_eq!((ids[0].0, ids[1].0, ids[4085].0), (5, 10, 4094));
        // Deleting a range takes exactly it.
        nl.bridge_vlan_del(trk.index, &[BridgeVlan::tagged(10, 4094)])
            .unwrap();
        assert_eq!(
            nl.bridge_port_vlans(trk.index).unwrap(),
            [BridgeVlan::tagged(5, 5)]
        );
    }

    #[test]
    fn netlink_link_vlan_probe_state_and_notifications() {
        use crate::netns::testing::{new_netns, privileged};
        if !privileged("netlink_link_vlan_probe_state_and_notifications") {
            return;
        }
        let node = new_netns();
        let pod = new_netns();
        let mut nl = Netlink::open_in(&node).unwrap();
        nl.add_bridge("probebr0", None).unwrap();
        let br = nl.link_by_name("probebr0").unwrap().unwrap();
        assert_eq!(nl.bridge_vlan_filtering(br.index).unwrap(), Some(false));
        match nl.add_bridge_vlan_filtering("probebr1", None) {
            // This kernel: refused, and nothing is created.
            Err(e) => {
                assert_eq!(errno(&e), Some(libc::EOPNOTSUPP), "{e}");
                assert_eq!(nl.link_by_name("probebr1").unwrap(), None);
                let e = nl.set_bridge_vlan_filtering(br.index, false).unwrap_err();
                assert_eq!(errno(&e), Some(libc::EOPNOTSUPP), "{e}");
            }
            Ok(()) => {
                let b1 = nl.link_by_name("probebr1").unwrap().unwrap();
                assert_eq!(nl.bridge_vlan_filtering(b1.index).unwrap(), Some(true));
                nl.set_bridge_vlan_filtering(br.index, false).unwrap();
            }
        }

        let mut events = Notifications::open_in(&node, &[RTNLGRP_LINK]).unwrap();
        nl.add_veth("probev0", None, "eth0", &pod, None).unwrap();
        let h = nl.link_by_name("probev0").unwrap().unwrap();
        nl.set_master(h.index, br.index).unwrap();
        nl.set_link_up(br.index).unwrap();
        nl.set_link_up(h.index).unwrap();
        let st = nl.link_state(h.index).unwrap().unwrap();
        assert!(!st.oper_up, "{st:?}");
        // The kernel updates the operational state asynchronously (linkwatch).
        assert!(
            ["DOWN", "LOWERLAYERDOWN"].contains(&st.oper_state.as_str()),
            "{st:?}"
        );
        assert_eq!(st.port_state, Some(BR_STATE_DISABLED));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        assert!(
            events.wait_until(deadline).unwrap(),
            "link changes are notified"
        );
        let mut c = Netlink::open_in(&pod).unwrap();
        let eth0 = c.link_by_name("eth0").unwrap().unwrap();
        c.set_link_up(eth0.index).unwrap();
        loop {
            let st = nl.link_state(h.index).unwrap().unwrap();
            if st.oper_up && st.port_state == Some(BR_STATE_FORWARDING) {
                break;
            }
            assert!(
                events.wait_until(deadline).unwrap(),
                "port never came up: {st:?}"
            );
        }
        assert_eq!(nl.link_state(9999).unwrap(), None);
        // Without VLAN filtering a port lists no VLANs.
        if nl.bridge_vlan_filtering(br.index).unwrap() == Some(false) {
            assert_eq!(nl.bridge_port_vlans(h.index).unwrap(), []);
        }
        // Nothing more happens: a short wait times out.
        let soon = std::time::Instant::now() + std::time::Duration::from_millis(50);
        while events.wait_until(soon).unwrap() {}
    }
}
