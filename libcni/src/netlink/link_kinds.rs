//! Links of the kinds a kernel may be built without: 802.1Q VLANs, ipvlan,
//! dummy and VRF devices. This module owns creating them ([`NewLink`],
//! [`Netlink::add_link`]), reading their settings back (the VLAN ID, the
//! ipvlan mode and the VRF table, in [`super::link::LinkDetails`]), and
//! telling a kernel that lacks the kind apart from any other refusal:
//! [`is_unknown_kind`] reads the kernel's answer to the creation itself
//! (`EOPNOTSUPP` with the extended ACK "Unknown device type", which
//! `rtnl_newlink` gives before it looks at anything else of the request),
//! and [`Netlink::kernel_has_kind`] asks the kernel without creating
//! anything. [`LinkKindSupport`] says what provides each kind (the config
//! option and the module), for the errors users read.

use std::os::fd::AsRawFd;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    self as rtlink, InfoData, InfoKind, InfoVlan, InfoVrf, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::{errno, Netlink};
use crate::netns::NetNs;
use crate::{Error, Result};

/// The extended ACK message of `rtnl_newlink` for a kind no loaded module
/// provides (after it tried `request_module("rtnl-link-<kind>")`).
const UNKNOWN_KIND: &str = "Unknown device type";

/// An ipvlan mode (`IFLA_IPVLAN_MODE`), as `ip link ... type ipvlan mode`
/// names it. The mode belongs to the master's ipvlan port: every ipvlan of
/// one master runs in the mode the last one created asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpvlanMode {
    /// Layer 2: the slaves share the master's MAC and see broadcasts and
    /// multicasts (ARP, ND) themselves.
    L2,
    /// Layer 3: the master routes to the slaves by address; no broadcast or
    /// multicast reaches them, and they do no ARP/ND of their own.
    L3,
    /// Layer 3 with the traffic passing the node's netfilter hooks
    /// (`CONFIG_IPVLAN_L3S`).
    L3s,
}

impl IpvlanMode {
    /// `l2`, `l3` or `l3s`.
    pub fn parse(s: &str) -> Option<IpvlanMode> {
        Some(match s {
            "l2" => IpvlanMode::L2,
            "l3" => IpvlanMode::L3,
            "l3s" => IpvlanMode::L3s,
            _ => return None,
        })
    }

    /// The name `ip -d link` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            IpvlanMode::L2 => "l2",
            IpvlanMode::L3 => "l3",
            IpvlanMode::L3s => "l3s",
        }
    }

    fn to_netlink(self) -> rtlink::IpVlanMode {
        match self {
            IpvlanMode::L2 => rtlink::IpVlanMode::L2,
            IpvlanMode::L3 => rtlink::IpVlanMode::L3,
            IpvlanMode::L3s => rtlink::IpVlanMode::L3S,
        }
    }

    pub(crate) fn from_netlink(mode: rtlink::IpVlanMode) -> Option<IpvlanMode> {
        Some(match mode {
            rtlink::IpVlanMode::L2 => IpvlanMode::L2,
            rtlink::IpVlanMode::L3 => IpvlanMode::L3,
            rtlink::IpVlanMode::L3S => IpvlanMode::L3s,
            _ => return None,
        })
    }
}

impl std::fmt::Display for IpvlanMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of a [`NewLink`], with what only that kind has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewKind {
    /// An 802.1Q VLAN sub-interface `id` of link `master_index` (in the
    /// socket's namespace).
    Vlan { master_index: u32, id: u16 },
    /// An ipvlan of link `master_index` (in the socket's namespace); a
    /// master that is itself an ipvlan stands for its own master (the
    /// kernel's rule).
    Ipvlan { master_index: u32, mode: IpvlanMode },
    /// A dummy device: a link with no lower device and no peer.
    Dummy,
    /// A VRF device whose routes live in routing table `table`.
    Vrf { table: u32 },
}

impl NewKind {
    /// `IFLA_INFO_KIND`.
    pub fn kind(&self) -> &'static str {
        match self {
            NewKind::Vlan { .. } => "vlan",
            NewKind::Ipvlan { .. } => "ipvlan",
            NewKind::Dummy => "dummy",
            NewKind::Vrf { .. } => "vrf",
        }
    }

    /// `vlan 5 on link 2`, for messages.
    fn describe(&self) -> String {
        match self {
            NewKind::Vlan { master_index, id } => format!("vlan {id} on link {master_index}"),
            NewKind::Ipvlan { master_index, mode } => {
                format!("ipvlan (mode {mode}) on link {master_index}")
            }
            NewKind::Dummy => "dummy".into(),
            NewKind::Vrf { table } => format!("vrf (table {table})"),
        }
    }

    fn info(&self) -> Vec<LinkInfo> {
        match *self {
            NewKind::Vlan { id, .. } => vec![
                LinkInfo::Kind(InfoKind::Vlan),
                LinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(id)])),
            ],
            NewKind::Ipvlan { mode, .. } => vec![
                LinkInfo::Kind(InfoKind::IpVlan),
                LinkInfo::Data(InfoData::IpVlan(vec![rtlink::InfoIpVlan::Mode(
                    mode.to_netlink(),
                )])),
            ],
            NewKind::Dummy => vec![LinkInfo::Kind(InfoKind::Dummy)],
            NewKind::Vrf { table } => vec![
                LinkInfo::Kind(InfoKind::Vrf),
                LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
            ],
        }
    }

    fn master_index(&self) -> Option<u32> {
        match *self {
            NewKind::Vlan { master_index, .. } | NewKind::Ipvlan { master_index, .. } => {
                Some(master_index)
            }
            NewKind::Dummy | NewKind::Vrf { .. } => None,
        }
    }
}

/// A link to create with [`Netlink::add_link`].
#[derive(Debug, Clone, Copy)]
pub struct NewLink<'a> {
    /// Its name, in the namespace it is created in.
    pub name: &'a str,
    pub kind: NewKind,
    /// MTU; `None` takes the lower device's (the kernel's default for a
    /// dummy or a VRF).
    pub mtu: Option<u32>,
    /// Create it directly inside this namespace (`IFLA_NET_NS_FD`), so it
    /// never appears in the socket's namespace; `None` creates it in the
    /// socket's namespace. The lower device is always looked up in the
    /// socket's namespace.
    pub netns: Option<&'a NetNs>,
}

/// The `RTM_NEWLINK` body that creates `spec`.
fn new_link_message(spec: &NewLink<'_>) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.attributes
        .push(LinkAttribute::IfName(spec.name.to_string()));
    if let Some(master) = spec.kind.master_index() {
        msg.attributes.push(LinkAttribute::Link(master));
    }
    if let Some(mtu) = spec.mtu {
        msg.attributes.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(ns) = spec.netns {
        msg.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
    }
    msg.attributes
        .push(LinkAttribute::LinkInfo(spec.kind.info()));
    msg
}

impl Netlink {
    /// Creates the link `spec` (`NLM_F_CREATE | NLM_F_EXCL`). With
    /// [`NewLink::netns`] the kernel creates it directly inside that
    /// namespace under its final name. A name taken where it is created is
    /// `EEXIST` ([`super::is_exists`]); a lower device that is gone is
    /// `ENODEV`; a kernel without the kind is [`is_unknown_kind`], and then
    /// nothing was created.
    pub fn add_link(&mut self, spec: &NewLink<'_>) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewLink(new_link_message(spec)),
            NLM_F_CREATE | NLM_F_EXCL,
            || {
                let place = match spec.netns {
                    Some(ns) => format!(" in {:?}", ns.path()),
                    None => String::new(),
                };
                format!("add {} {:?}{place}", spec.kind.describe(), spec.name)
            },
        )?;
        Ok(())
    }

    /// Whether the kernel of this socket's namespace can create links of
    /// `kind` (`vlan`, `ipvlan`, `dummy`, `vrf`, ...), loading the module
    /// that provides it if it can (as a creation would). Nothing is
    /// created: the request names an empty interface name, which
    /// `rtnl_newlink` refuses (`EINVAL`) only after it found the kind; a
    /// kind it cannot find is refused first, with "Unknown device type".
    pub fn kernel_has_kind(&mut self, kind: &str) -> Result<bool> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(String::new()));
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Other(kind.to_string()),
            )]));
        match self.request(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("probe link kind {kind:?}"),
        ) {
            Err(e) if is_unknown_kind(&e) => Ok(false),
            Err(e) if errno(&e) == Some(libc::EINVAL) => Ok(true),
            Err(e) => Err(e),
            Ok(_) => Err(Error::Internal(format!(
                "probing link kind {kind:?}: the kernel accepted a link without a name"
            ))),
        }
    }
}

/// Whether `e`, the error of a link creation, is the kernel saying it has
/// no such kind of link: `EOPNOTSUPP` with the extended ACK "Unknown device
/// type". Other `EOPNOTSUPP` refusals (a VLAN on a device that cannot carry
/// VLANs, ...) come with another message, or none.
pub fn is_unknown_kind(e: &Error) -> bool {
    errno(e) == Some(libc::EOPNOTSUPP)
        && matches!(e, Error::Kernel { op, .. } if op.ends_with(&format!("({UNKNOWN_KIND})")))
}

/// What provides a kind of link: the kernel config option and the module,
/// for the error a user reads when the kernel lacks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkKindSupport {
    /// `IFLA_INFO_KIND`.
    pub kind: &'static str,
    /// What it is, for messages: "802.1Q VLAN links".
    pub what: &'static str,
    /// The kernel config option.
    pub config: &'static str,
    /// The module that provides it.
    pub module: &'static str,
}

/// 802.1Q VLAN sub-interfaces.
pub const VLAN_SUPPORT: LinkKindSupport = LinkKindSupport {
    kind: "vlan",
    what: "802.1Q VLAN links",
    config: "CONFIG_VLAN_8021Q",
    module: "8021q",
};

/// ipvlan links.
pub const IPVLAN_SUPPORT: LinkKindSupport = LinkKindSupport {
    kind: "ipvlan",
    what: "ipvlan links",
    config: "CONFIG_IPVLAN",
    module: "ipvlan",
};

/// dummy links.
pub const DUMMY_SUPPORT: LinkKindSupport = LinkKindSupport {
    kind: "dummy",
    what: "dummy links",
    config: "CONFIG_DUMMY",
    module: "dummy",
};

/// VRF devices.
pub const VRF_SUPPORT: LinkKindSupport = LinkKindSupport {
    kind: "vrf",
    what: "VRF devices",
    config: "CONFIG_NET_VRF",
    module: "vrf",
};

impl LinkKindSupport {
    /// `this kernel has no 802.1Q VLAN links (kind "vlan"): load module
    /// 8021q (modprobe 8021q), or use a kernel built with CONFIG_VLAN_8021Q`.
    pub fn missing(&self) -> String {
        format!(
            "this kernel has no {} (kind {:?}): load module {} (modprobe {}), \
             or use a kernel built with {}",
            self.what, self.kind, self.module, self.module, self.config
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;

    fn bytes(msg: &LinkMessage) -> Vec<u8> {
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.emit(&mut buf);
        buf
    }

    #[test]
    fn netlink_link_kinds_ipvlan_modes_round_trip() {
        for m in [IpvlanMode::L2, IpvlanMode::L3, IpvlanMode::L3s] {
            assert_eq!(IpvlanMode::parse(m.as_str()), Some(m));
            assert_eq!(IpvlanMode::from_netlink(m.to_netlink()), Some(m));
        }
        assert_eq!(IpvlanMode::parse("L2"), None);
        assert_eq!(IpvlanMode::parse(""), None);
        assert_eq!(IpvlanMode::from_netlink(rtlink::IpVlanMode::Other(9)), None);
    }

    #[test]
    fn netlink_link_kinds_vlan_message_bytes() {
        let msg = new_link_message(&NewLink {
            name: "eth1",
            kind: NewKind::Vlan {
                master_index: 3,
                id: 100,
            },
            mtu: Some(1400),
            netns: None,
        });
        let mut want = vec![0u8; 16]; // ifinfomsg: family 0, index 0
        want.extend_from_slice(&[9, 0, 3, 0]); // IFLA_IFNAME
        want.extend_from_slice(b"eth1\0\0\0\0");
        want.extend_from_slice(&[8, 0, 5, 0, 3, 0, 0, 0]); // IFLA_LINK 3
        want.extend_from_slice(&[8, 0, 4, 0, 0x78, 0x05, 0, 0]); // IFLA_MTU 1400
                                                                 // IFLA_LINKINFO { IFLA_INFO_KIND "vlan\0", IFLA_INFO_DATA { IFLA_VLAN_ID 100 } }
        want.extend_from_slice(&[28, 0, 18, 0]);
        want.extend_from_slice(&[9, 0, 1, 0]);
        want.extend_from_slice(b"vlan\0\0\0\0");
        want.extend_from_slice(&[12, 0, 2, 0, 6, 0, 1, 0, 100, 0, 0, 0]);
        assert_eq!(bytes(&msg), want);
    }

    #[test]
    fn netlink_link_kinds_messages_carry_their_kind_data() {
        let ipvlan = new_link_message(&NewLink {
            name: "ipvl0",
            kind: NewKind::Ipvlan {
                master_index: 7,
                mode: IpvlanMode::L3s,
            },
            mtu: None,
            netns: None,
        });
        let b = bytes(&ipvlan);
        // IFLA_INFO_DATA { IFLA_IPVLAN_MODE (1) u16 2 (l3s) } at the end.
        assert_eq!(&b[b.len() - 12..], &[12, 0, 2, 0, 6, 0, 1, 0, 2, 0, 0, 0]);
        let vrf = bytes(&new_link_message(&NewLink {
            name: "red",
            kind: NewKind::Vrf { table: 1001 },
            mtu: None,
            netns: None,
        }));
        // IFLA_INFO_DATA { IFLA_VRF_TABLE (1) u32 1001 }.
        assert_eq!(
            &vrf[vrf.len() - 12..],
            &[12, 0, 2, 0, 8, 0, 1, 0, 0xe9, 3, 0, 0]
        );
        let dummy = bytes(&new_link_message(&NewLink {
            name: "d0",
            kind: NewKind::Dummy,
            mtu: None,
            netns: None,
        }));
        // IFLA_LINKINFO { IFLA_INFO_KIND "dummy\0" } and no IFLA_LINK.
        assert_eq!(
            &dummy[dummy.len() - 16..],
            b"\x10\0\x12\0\x0a\0\x01\0dummy\0\0\0"
        );
        assert_eq!(dummy.len(), 16 + 8 + 16);
    }

    #[test]
    fn netlink_link_kinds_unknown_kind_is_told_by_its_message() {
        let unknown = Error::kernel(
            "add dummy \"d0\" (Unknown device type)",
            std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        );
        assert!(is_unknown_kind(&unknown));
        let challenged = Error::kernel(
            "add vlan 5 on link 1 \"v0\"",
            std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        );
        assert!(!is_unknown_kind(&challenged));
        let other = Error::kernel(
            "add dummy \"d0\" (Unknown device type)",
            std::io::Error::from_raw_os_error(libc::EINVAL),
        );
        assert!(!is_unknown_kind(&other));
        assert_eq!(
            VLAN_SUPPORT.missing(),
            "this kernel has no 802.1Q VLAN links (kind \"vlan\"): load module 8021q \
             (modprobe 8021q), or use a kernel built with CONFIG_VLAN_8021Q"
        );
    }

    fn test_kinds(master_index: u32) -> [(NewKind, LinkKindSupport); 4] {
        [
            (NewKind::Dummy, DUMMY_SUPPORT),
            (
                NewKind::Vlan {
                    master_index,
                    id: 42,
                },
                VLAN_SUPPORT,
            ),
            (
                NewKind::Ipvlan {
                    master_index,
                    mode: IpvlanMode::L3,
                },
                IPVLAN_SUPPORT,
            ),
            (NewKind::Vrf { table: 77 }, VRF_SUPPORT),
        ]
    }

    /// On a kernel without a kind (these machines lack all four) its
    /// creation is refused as an unknown kind and leaves nothing, and the
    /// probe says so.
    #[test]
    fn netlink_link_kinds_a_missing_kind_is_refused_as_unknown() {
        use crate::netns::testing::{new_netns, privileged};
        if !privileged("netlink_link_kinds_a_missing_kind_is_refused_as_unknown") {
            return;
        }
        let (node, pod) = (new_netns(), new_netns());
        let mut nl = Netlink::open_in(&node).unwrap();
        let mut c = Netlink::open_in(&pod).unwrap();
        nl.add_veth("up0", None, "up0p", &pod, None).unwrap();
        let up0 = nl.link_by_name("up0").unwrap().unwrap();
        let before = (nl.links().unwrap(), c.links().unwrap());
        for (kind, support) in test_kinds(up0.index) {
            assert_eq!(kind.kind(), support.kind);
            if nl.kernel_has_kind(kind.kind()).unwrap() {
                eprintln!(
                    "note: this kernel has {} links (fullkernel_ tests make them)",
                    kind.kind()
                );
                continue;
            }
            let e = nl
                .add_link(&NewLink {
                    name: "k0",
                    kind,
                    mtu: None,
                    netns: Some(&pod),
                })
                .unwrap_err();
            assert!(is_unknown_kind(&e), "{e}");
            assert_eq!(e.code(), 100);
        }
        assert!(!nl.kernel_has_kind("nosuchkind").unwrap());
        assert_eq!(
            (nl.links().unwrap(), c.links().unwrap()),
            before,
            "nothing made"
        );
    }

    /// On a kernel with the kinds (Debian's, in the full-kernel VM): each is
    /// made in another namespace and read back, the probe makes nothing,
    /// and a VLAN on a device that cannot carry one is `EOPNOTSUPP` but
    /// not an unknown kind.
    #[test]
    fn fullkernel_netlink_link_kinds_created_and_read_back() {
        use crate::netlink::testing::full_kernel;
        use crate::netns::testing::new_netns;
        if !full_kernel("fullkernel_netlink_link_kinds_created_and_read_back") {
            return;
        }
        let (node, pod) = (new_netns(), new_netns());
        let mut nl = Netlink::open_in(&node).unwrap();
        let mut c = Netlink::open_in(&pod).unwrap();
        nl.add_veth("up0", Some(1450), "up0p", &pod, None).unwrap();
        let up0 = nl.link_by_name("up0").unwrap().unwrap();
        let before = nl.links().unwrap().len();
        for (kind, _) in test_kinds(up0.index) {
            assert!(nl.kernel_has_kind(kind.kind()).unwrap());
            assert_eq!(nl.links().unwrap().len(), before, "the probe made nothing");
            let spec = NewLink {
                name: "k0",
                kind,
                mtu: None,
                netns: Some(&pod),
            };
            nl.add_link(&spec).unwrap();
            let d = c.link_details_by_name("k0").unwrap().unwrap();
            assert_eq!(d.link.kind.as_deref(), Some(kind.kind()));
            match kind {
                NewKind::Vlan { id, .. } => {
                    assert_eq!(d.vlan_id, Some(id));
                    assert_eq!(d.link.mtu, 1450, "the master's MTU");
                    assert_eq!(d.link.mac, up0.mac, "the master's MAC");
                }
                NewKind::Ipvlan { mode, .. } => {
                    assert_eq!(d.ipvlan_mode, Some(mode));
                    assert_eq!(d.link.mac, up0.mac, "the master's MAC");
                }
                NewKind::Vrf { table } => assert_eq!(d.vrf_table, Some(table)),
                NewKind::Dummy => {
                    assert_eq!((d.vlan_id, d.ipvlan_mode, d.vrf_table), (None, None, None))
                }
            }
            assert_eq!(nl.link_by_name("k0").unwrap(), None, "made in the pod");
            let e = nl.add_link(&spec).unwrap_err();
            assert!(super::super::is_exists(&e), "{e}");
            c.set_link_name(d.link.index, "k1").unwrap();
            assert_eq!(c.link_by_index(d.link.index).unwrap().unwrap().name, "k1");
            c.delete_link(d.link.index).unwrap();
        }
        let e = nl
            .add_link(&NewLink {
                name: "lo.5",
                kind: NewKind::Vlan {
                    master_index: 1,
                    id: 5,
                },
                mtu: None,
                netns: None,
            })
            .unwrap_err();
        assert_eq!(errno(&e), Some(libc::EOPNOTSUPP), "{e}");
        assert!(!is_unknown_kind(&e), "{e}");
        assert_eq!(nl.links().unwrap().len(), before);
    }
}
