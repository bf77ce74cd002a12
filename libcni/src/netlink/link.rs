//! Links (network interfaces): lookup, dump, creation of bridges and veth
//! pairs, attribute changes (up/down, MTU, MAC, master, promiscuity, alias,
//! queue length, all-multicast), bridge port flags, deletion, and what is
//! read back: the operational and bridge port state, and each kind's
//! settings ([`LinkDetails`]).

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};
use netlink_packet_route::link as rtlink;
use netlink_packet_route::link::{
    InfoBridgePort, InfoData, InfoKind, InfoPortData, InfoPortKind, InfoVeth, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use std::os::fd::AsRawFd;

use super::link_message;
use super::macvlan::MacvlanMode;
use super::{errno, Netlink};
use crate::mac::format_mac;
use crate::netns::NetNs;
use crate::Result;

/// Longest interface name the kernel accepts (`IFNAMSIZ` - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// A link as the kernel reports it. The default (index 0, no name) names
/// none: it is for building one in a test.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Link kind (`IFLA_INFO_KIND`: "bridge", "veth", ...), if it has one.
    pub kind: Option<String>,
    /// MTU.
    pub mtu: u32,
    /// Hardware address, when it is a 6-byte Ethernet address.
    pub mac: Option<[u8; 6]>,
    /// Hardware address as the kernel reports it (`IFLA_ADDRESS`), of any
    /// length (20 bytes for IP over InfiniBand); empty when it has none.
    pub hw_addr: Vec<u8>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Promiscuous mode (`IFF_PROMISC`).
    pub promisc: bool,
    /// Index of the master (a bridge this link is a port of).
    pub master: Option<u32>,
    /// `IFLA_LINK`: for a veth, the peer's index (in the peer's namespace
    /// when [`Link::link_netnsid`] is set).
    pub peer_index: Option<u32>,
    /// `IFLA_LINK_NETNSID`: the namespace of the peer, as an id local to
    /// this link's namespace.
    pub link_netnsid: Option<i32>,
    /// Interface alias (`IFLA_IFALIAS`).
    pub alias: Option<String>,
    /// Bridge port settings, when the link is a bridge port.
    pub bridge_port: Option<BridgePortFlags>,
}

/// Flags of a bridge port (`IFLA_BRPORT_*`). In a change, `None` leaves the
/// flag as it is; read back, `None` means the kernel did not report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgePortFlags {
    /// Hairpin mode: frames may go back out of the port they came in on.
    pub hairpin: Option<bool>,
    /// Port isolation: isolated ports cannot talk to each other.
    pub isolated: Option<bool>,
    /// Source MAC learning.
    pub learning: Option<bool>,
    /// Flooding of unknown unicast.
    pub unicast_flood: Option<bool>,
    /// Proxy ARP.
    pub proxy_arp: Option<bool>,
    /// Neighbour (ARP/ND) suppression.
    pub neigh_suppress: Option<bool>,
}

impl BridgePortFlags {
    fn to_nlas(self) -> Vec<InfoBridgePort> {
        [
            self.hairpin.map(InfoBridgePort::HairpinMode),
            self.isolated.map(InfoBridgePort::Isolated),
            self.learning.map(InfoBridgePort::Learning),
            self.unicast_flood.map(InfoBridgePort::UnicastFlood),
            self.proxy_arp.map(InfoBridgePort::ProxyARP),
            self.neigh_suppress.map(InfoBridgePort::NeighSupress),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn from_nlas(nlas: &[InfoBridgePort]) -> BridgePortFlags {
        let mut flags = BridgePortFlags::default();
        for nla in nlas {
            match nla {
                InfoBridgePort::HairpinMode(v) => flags.hairpin = Some(*v),
                InfoBridgePort::Isolated(v) => flags.isolated = Some(*v),
                InfoBridgePort::Learning(v) => flags.learning = Some(*v),
                InfoBridgePort::UnicastFlood(v) => flags.unicast_flood = Some(*v),
                InfoBridgePort::ProxyARP(v) => flags.proxy_arp = Some(*v),
                InfoBridgePort::NeighSupress(v) => flags.neigh_suppress = Some(*v),
                _ => {}
            }
        }
        flags
    }
}

/// `hairpin on, learning off`: the flags that are set.
impl std::fmt::Display for BridgePortFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named = [
            ("hairpin", self.hairpin),
            ("isolated", self.isolated),
            ("learning", self.learning),
            ("unicast_flood", self.unicast_flood),
            ("proxy_arp", self.proxy_arp),
            ("neigh_suppress", self.neigh_suppress),
        ];
        let mut first = true;
        for (name, value) in named {
            if let Some(v) = value {
                let sep = if first { "" } else { ", " };
                write!(f, "{sep}{name} {}", if v { "on" } else { "off" })?;
                first = false;
            }
        }
        Ok(())
    }
}

/// Changes to one link made by a single `RTM_SETLINK` ([`Netlink::change_link`]).
/// The kernel applies them in this order, all under one lock: the move to
/// `netns` (the link goes down with it), the new `name` there, the `alias`,
/// then the `up` flag; no other process sees the link under its old name in
/// the new namespace. A failure part way leaves what was done before it.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkChange<'a> {
    /// Move the link into this namespace (`IFLA_NET_NS_FD`).
    pub netns: Option<&'a NetNs>,
    /// Rename it (`IFLA_IFNAME`; with `netns`, its name there).
    pub name: Option<&'a str>,
    /// Set its alias (`IFLA_IFALIAS`); `Some("")` removes the alias.
    pub alias: Option<&'a str>,
    /// Set it administratively up or down.
    pub up: Option<bool>,
}

impl Link {
    /// The MAC as a result records it (`aa:bb:cc:dd:ee:ff`), empty when
    /// the link has none.
    pub fn mac_string(&self) -> String {
        self.mac.as_ref().map(format_mac).unwrap_or_default()
    }

    fn from_message(msg: LinkMessage) -> Link {
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            kind: None,
            mtu: 0,
            mac: None,
            hw_addr: Vec::new(),
            up: msg.header.flags.contains(LinkFlags::Up),
            promisc: msg.header.flags.contains(LinkFlags::Promisc),
            master: None,
            peer_index: None,
            link_netnsid: None,
            alias: None,
            bridge_port: None,
        };
        for attr in msg.attributes {
            match attr {
                LinkAttribute::IfName(name) => link.name = name,
                LinkAttribute::Mtu(mtu) => link.mtu = mtu,
                LinkAttribute::Address(addr) => {
                    link.mac = <[u8; 6]>::try_from(addr.as_slice()).ok();
                    link.hw_addr = addr;
                }
                LinkAttribute::Controller(master) if master != 0 => link.master = Some(master),
                LinkAttribute::Link(peer) if peer != 0 => link.peer_index = Some(peer),
                LinkAttribute::LinkNetNsId(id) => link.link_netnsid = Some(id),
                LinkAttribute::IfAlias(alias) => link.alias = Some(alias),
                LinkAttribute::LinkInfo(infos) => {
                    let mut bridge_port = false;
                    for info in infos {
                        match info {
                            LinkInfo::Kind(kind) => link.kind = Some(kind.to_string()),
                            LinkInfo::PortKind(InfoPortKind::Bridge) => bridge_port = true,
                            LinkInfo::PortData(InfoPortData::BridgePort(nlas)) if bridge_port => {
                                link.bridge_port = Some(BridgePortFlags::from_nlas(&nlas))
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        link
    }
}

fn links_of(replies: Vec<RouteNetlinkMessage>) -> Vec<Link> {
    replies
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(Link::from_message(l)),
            _ => None,
        })
        .collect()
}

impl Netlink {
    /// The link named `name`, or `None` if there is none (also for a name
    /// no link can have: empty or longer than [`MAX_IFNAME_LEN`]).
    pub fn link_by_name(&mut self, name: &str) -> Result<Option<Link>> {
        if name.is_empty() || name.len() > MAX_IFNAME_LEN {
            return Ok(None);
        }
        let mut msg = link_message(0);
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.get_link(msg, || format!("get link {name:?}"))
    }

    /// The link with index `index`, or `None` if there is none.
    pub fn link_by_index(&mut self, index: u32) -> Result<Option<Link>> {
        if index == 0 {
            return Ok(None);
        }
        self.get_link(link_message(index), || format!("get link {index}"))
    }

    fn get_link(&mut self, msg: LinkMessage, op: impl Fn() -> String) -> Result<Option<Link>> {
        match self.request(RouteNetlinkMessage::GetLink(msg), 0, op) {
            Ok(replies) => Ok(links_of(replies).into_iter().next()),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// All links of the namespace.
    pub fn links(&mut self) -> Result<Vec<Link>> {
        let replies = self.request(
            RouteNetlinkMessage::GetLink(link_message(0)),
            NLM_F_DUMP,
            || "list links".to_string(),
        )?;
        Ok(links_of(replies))
    }

    /// Sends an `RTM_SETLINK` for `index` with `attributes` and header flags
    /// `flags` changed under `change`.
    fn set_link(
        &mut self,
        index: u32,
        attributes: Vec<LinkAttribute>,
        (flags, change): (LinkFlags, LinkFlags),
        op: impl Fn() -> String,
    ) -> Result<()> {
        let mut msg = link_message(index);
        msg.header.flags = flags;
        msg.header.change_mask = change;
        msg.attributes = attributes;
        self.request(RouteNetlinkMessage::SetLink(msg), 0, op)?;
        Ok(())
    }

    /// Sets link `index` administratively up.
    pub fn set_link_up(&mut self, index: u32) -> Result<()> {
        let flags = (LinkFlags::Up, LinkFlags::Up);
        self.set_link(index, vec![], flags, || format!("set link {index} up"))
    }

    /// Sets link `index` administratively down.
    pub fn set_link_down(&mut self, index: u32) -> Result<()> {
        let flags = (LinkFlags::empty(), LinkFlags::Up);
        self.set_link(index, vec![], flags, || format!("set link {index} down"))
    }

    /// Sets the MTU of link `index`.
    pub fn set_mtu(&mut self, index: u32, mtu: u32) -> Result<()> {
        let attrs = vec![LinkAttribute::Mtu(mtu)];
        self.set_link(index, attrs, no_flags(), || {
            format!("set mtu {mtu} on link {index}")
        })
    }

    /// Sets the hardware address of link `index`.
    pub fn set_mac(&mut self, index: u32, mac: &[u8; 6]) -> Result<()> {
        let attrs = vec![LinkAttribute::Address(mac.to_vec())];
        self.set_link(index, attrs, no_flags(), || {
            format!("set mac {} on link {index}", format_mac(mac))
        })
    }

    /// Makes link `index` a port of `master_index` (a bridge); a
    /// `master_index` of 0 detaches it from its master.
    pub fn set_master(&mut self, index: u32, master_index: u32) -> Result<()> {
        let attrs = vec![LinkAttribute::Controller(master_index)];
        self.set_link(index, attrs, no_flags(), || {
            format!("set master of link {index} to {master_index}")
        })
    }

    /// Turns promiscuous mode of link `index` on or off.
    pub fn set_promisc(&mut self, index: u32, on: bool) -> Result<()> {
        let flag = if on {
            LinkFlags::Promisc
        } else {
            LinkFlags::empty()
        };
        self.set_link(index, vec![], (flag, LinkFlags::Promisc), || {
            format!(
                "set promisc {} on link {index}",
                if on { "on" } else { "off" }
            )
        })
    }

    /// Renames link `index` to `name` (the link must be down). A name
    /// taken is `EEXIST` ([`super::is_exists`]).
    pub fn set_link_name(&mut self, index: u32, name: &str) -> Result<()> {
        let attrs = vec![LinkAttribute::IfName(name.to_string())];
        self.set_link(index, attrs, no_flags(), || {
            format!("rename link {index} to {name:?}")
        })
    }

    /// Sets the alias of link `index`; an empty alias removes it.
    pub fn set_alias(&mut self, index: u32, alias: &str) -> Result<()> {
        let attrs = vec![LinkAttribute::IfAlias(alias.to_string())];
        self.set_link(index, attrs, no_flags(), || {
            format!("set alias {alias:?} on link {index}")
        })
    }

    /// Applies `change` to link `index` in one request (see
    /// [`LinkChange`]). A name taken in the target namespace is an error
    /// with errno `EEXIST`; a link the kernel does not let change
    /// namespace (loopback, a bridge, ...) `EINVAL`.
    pub fn change_link(&mut self, index: u32, change: &LinkChange<'_>) -> Result<()> {
        let mut attrs = Vec::new();
        if let Some(ns) = change.netns {
            attrs.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        }
        if let Some(name) = change.name {
            attrs.push(LinkAttribute::IfName(name.to_string()));
        }
        if let Some(alias) = change.alias {
            attrs.push(LinkAttribute::IfAlias(alias.to_string()));
        }
        let flags = match change.up {
            Some(true) => (LinkFlags::Up, LinkFlags::Up),
            Some(false) => (LinkFlags::empty(), LinkFlags::Up),
            None => no_flags(),
        };
        self.set_link(index, attrs, flags, || {
            let mut what = format!("change link {index}:");
            if let Some(ns) = change.netns {
                what.push_str(&format!(" into {:?}", ns.path()));
            }
            if let Some(name) = change.name {
                what.push_str(&format!(" name {name:?}"));
            }
            if let Some(alias) = change.alias {
                what.push_str(&format!(" alias {alias:?}"));
            }
            if let Some(up) = change.up {
                what.push_str(if up { " up" } else { " down" });
            }
            what
        })
    }

    /// Deletes link `index` (for a veth, both ends go). A link that is
    /// already gone is an error with errno `ENODEV`
    /// ([`super::is_not_found`]).
    pub fn delete_link(&mut self, index: u32) -> Result<()> {
        self.request(RouteNetlinkMessage::DelLink(link_message(index)), 0, || {
            format!("delete link {index}")
        })?;
        Ok(())
    }

    /// Deletes the link named `name`, for a best-effort teardown: a link
    /// that is not there, or goes meanwhile, is success.
    pub fn delete_link_if_present(&mut self, name: &str) -> Result<()> {
        let Some(link) = self.link_by_name(name)? else {
            return Ok(());
        };
        match self.delete_link(link.index) {
            Err(e) if !super::is_not_found(&e) => Err(e),
            _ => Ok(()),
        }
    }

    /// Creates a bridge named `name`, with `mtu` if given. If a link of that
    /// name exists the error has errno `EEXIST` ([`super::is_exists`]).
    pub fn add_bridge(&mut self, name: &str, mtu: Option<u32>) -> Result<()> {
        let mut msg = link_message(0);
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        self.request(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add bridge {name:?}"),
        )?;
        Ok(())
    }

    /// Creates a veth pair: `host_name` in this socket's namespace and
    /// `peer_name` created directly inside `peer_ns` (so it never appears
    /// in this namespace), with `peer_mac` if given. `mtu`, if given, is set
    /// on both ends. If either name is taken the error has errno `EEXIST`.
    pub fn add_veth(
        &mut self,
        host_name: &str,
        mtu: Option<u32>,
        peer_name: &str,
        peer_ns: &NetNs,
        peer_mac: Option<[u8; 6]>,
    ) -> Result<()> {
        let mut peer = link_message(0);
        peer.attributes
            .push(LinkAttribute::IfName(peer_name.to_string()));
        peer.attributes
            .push(LinkAttribute::NetNsFd(peer_ns.as_raw_fd()));
        if let Some(mtu) = mtu {
            peer.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = peer_mac {
            peer.attributes.push(LinkAttribute::Address(mac.to_vec()));
        }
        let mut msg = link_message(0);
        msg.attributes
            .push(LinkAttribute::IfName(host_name.to_string()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        self.request(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || {
                format!(
                    "add veth {host_name:?} with peer {peer_name:?} in {:?}",
                    peer_ns.path()
                )
            },
        )?;
        Ok(())
    }

    /// Changes the bridge port flags of link `index`, which must be a
    /// bridge port (`IFLA_INFO_SLAVE_DATA`); flags left `None` keep their
    /// value.
    pub fn set_bridge_port(&mut self, index: u32, flags: BridgePortFlags) -> Result<()> {
        let nlas = flags.to_nlas();
        if nlas.is_empty() {
            return Ok(());
        }
        let mut msg = link_message(index);
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::PortKind(InfoPortKind::Bridge),
            LinkInfo::PortData(InfoPortData::BridgePort(nlas)),
        ]));
        self.request(RouteNetlinkMessage::NewLink(msg), 0, || {
            format!("set bridge port flags {flags} on link {index}")
        })?;
        Ok(())
    }
}

pub(super) fn no_flags() -> (LinkFlags, LinkFlags) {
    (LinkFlags::empty(), LinkFlags::empty())
}

#[cfg(test)]
mod tests {
    use super::super::{is_exists, is_not_found};
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    #[test]
    fn netlink_link_bridge_port_flags_display_the_set_flags() {
        let flags = BridgePortFlags {
            hairpin: Some(true),
            learning: Some(false),
            ..Default::default()
        };
        assert_eq!(flags.to_string(), "hairpin on, learning off");
        assert_eq!(BridgePortFlags::default().to_string(), "");
        assert_eq!(
            flags.to_nlas(),
            [
                InfoBridgePort::HairpinMode(true),
                InfoBridgePort::Learning(false)
            ]
        );
    }

    #[test]
    fn netlink_link_change_moves_renames_aliases_and_sets_up_at_once() {
        if !privileged("netlink_link_change_moves_renames_aliases_and_sets_up_at_once") {
            return;
        }
        let (node, pod, peer) = (new_netns(), new_netns(), new_netns());
        let mut host = Netlink::open_in(&node).unwrap();
        let mut c = Netlink::open_in(&pod).unwrap();
        host.add_veth("hd0", None, "hd0p", &peer, None).unwrap();
        let index = host.link_by_name("hd0").unwrap().unwrap().index;
        host.set_link_up(index).unwrap();
        let before = host.link_by_name("hd0").unwrap().unwrap();
        assert_eq!(before.hw_addr.len(), 6);
        assert_eq!(before.mac.map(|m| m.to_vec()), Some(before.hw_addr.clone()));
        // A link of the old name in the target is no obstacle.
        c.add_bridge("hd0", None).unwrap();
        let into = LinkChange {
            netns: Some(&pod),
            name: Some("net1"),
            alias: Some("hd0"),
            up: Some(true),
        };
        host.change_link(before.index, &into).unwrap();
        assert_eq!(host.link_by_name("hd0").unwrap(), None);
        let moved = c.link_by_name("net1").unwrap().unwrap();
        assert_eq!(
            (moved.alias.as_deref(), moved.up, &moved.hw_addr),
            (Some("hd0"), true, &before.hw_addr)
        );
        // Back, with the alias removed, down. The name taken there is
        // EEXIST after the move: the link is there under its old name.
        let br = c.link_by_name("hd0").unwrap().unwrap().index;
        c.delete_link(br).unwrap();
        let out = LinkChange {
            netns: Some(&node),
            name: Some("hd0"),
            alias: Some(""),
            up: None,
        };
        host.add_bridge("hd0", None).unwrap();
        let err = c.change_link(moved.index, &out).unwrap_err();
        assert!(is_exists(&err), "{err}");
        assert!(c.link_by_name("net1").unwrap().is_none());
        let partial = host.link_by_name("net1").unwrap().unwrap();
        assert_eq!(partial.alias.as_deref(), Some("hd0"));
        let br = host.link_by_name("hd0").unwrap().unwrap().index;
        host.delete_link(br).unwrap();
        host.change_link(partial.index, &out).unwrap();
        let back = host.link_by_name("hd0").unwrap().unwrap();
        assert_eq!((back.alias, back.up), (None, false));
        // Loopback never leaves its namespace.
        let lo = c.link_by_name("lo").unwrap().unwrap();
        let err = c
            .change_link(
                lo.index,
                &LinkChange {
                    netns: Some(&node),
                    ..LinkChange::default()
                },
            )
            .unwrap_err();
        assert_eq!(errno(&err), Some(libc::EINVAL), "{err}");
        assert!(err.to_string().starts_with("change link 1: into"), "{err}");
    }

    #[test]
    fn netlink_link_missing_links_are_none() {
        if !privileged("netlink_link_missing_links_are_none") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        assert_eq!(nl.link_by_name("nosuchlink0").unwrap(), None);
        assert_eq!(nl.link_by_name("").unwrap(), None);
        assert_eq!(nl.link_by_name("a-name-too-long-for-linux").unwrap(), None);
        assert_eq!(nl.link_by_index(4242).unwrap(), None);
        let err = nl.delete_link(4242).unwrap_err();
        assert_eq!(err.code(), 100);
        assert_eq!(errno(&err), Some(libc::ENODEV));
        assert!(is_not_found(&err));
        assert!(err.to_string().starts_with("delete link 4242"), "{err}");
        let err = nl.set_link_up(4242).unwrap_err();
        assert!(is_not_found(&err), "{err}");
    }

    #[test]
    fn netlink_link_bridge_create_lookup_up_mtu_alias_delete() {
        if !privileged("netlink_link_bridge_create_lookup_up_mtu_alias_delete") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        nl.add_bridge("cnitest0", Some(1400)).unwrap();
        let br = nl.link_by_name("cnitest0").unwrap().unwrap();
        assert_eq!(br.name, "cnitest0");
        assert_eq!(br.kind.as_deref(), Some("bridge"));
        assert_eq!(br.mtu, 1400);
        assert!(!br.up);
        assert!(!br.promisc);
        assert_eq!(br.master, None);
        assert!(br.mac.is_some());
        assert_eq!(nl.link_by_index(br.index).unwrap().as_ref(), Some(&br));

        let err = nl.add_bridge("cnitest0", None).unwrap_err();
        assert!(is_exists(&err), "{err}");
        assert_eq!(err.code(), 100);
        assert!(
            err.to_string().starts_with("add bridge \"cnitest0\""),
            "{err}"
        );

        nl.set_link_up(br.index).unwrap();
        nl.set_mtu(br.index, 1300).unwrap();
        nl.set_alias(br.index, "test bridge").unwrap();
        nl.set_promisc(br.index, true).unwrap();
        let mac = [0x02, 0x42, 0xac, 0x11, 0x00, 0x02];
        nl.set_mac(br.index, &mac).unwrap();
        let br2 = nl.link_by_name("cnitest0").unwrap().unwrap();
        assert!(br2.up);
        assert!(br2.promisc);
        assert_eq!(br2.mtu, 1300);
        assert_eq!(br2.alias.as_deref(), Some("test bridge"));
        assert_eq!(br2.mac, Some(mac));
        nl.set_promisc(br.index, false).unwrap();
        nl.set_link_down(br.index).unwrap();
        let br3 = nl.link_by_index(br.index).unwrap().unwrap();
        assert!(!br3.up);
        assert!(!br3.promisc);

        let names: Vec<String> = nl.links().unwrap().into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["lo", "cnitest0"]);

        nl.delete_link(br.index).unwrap();
        assert_eq!(nl.link_by_name("cnitest0").unwrap(), None);
        assert!(is_not_found(&nl.delete_link(br.index).unwrap_err()));
    }

    #[test]
    fn netlink_link_veth_with_peer_in_another_namespace() {
        if !privileged("netlink_link_veth_with_peer_in_another_namespace") {
            return;
        }
        let node = new_netns();
        let pod = new_netns();
        let mut host = Netlink::open_in(&node).unwrap();
        let mut container = Netlink::open_in(&pod).unwrap();

        host.add_bridge("cnibr0", None).unwrap();
        let br = host.link_by_name("cnibr0").unwrap().unwrap();
        let mac = [0x0a, 0x58, 0x0a, 0x01, 0x02, 0x03];
        host.add_veth("vethtest0", Some(1450), "eth0", &pod, Some(mac))
            .unwrap();

        let h = host.link_by_name("vethtest0").unwrap().unwrap();
        assert_eq!(h.kind.as_deref(), Some("veth"));
        assert_eq!(h.mtu, 1450);
        assert_eq!(
            host.link_by_name("eth0").unwrap(),
            None,
            "peer leaked into the node"
        );
        assert!(h.link_netnsid.is_some(), "{h:?}");

        let c = container.link_by_name("eth0").unwrap().unwrap();
        assert_eq!(c.kind.as_deref(), Some("veth"));
        assert_eq!(c.mtu, 1450);
        assert_eq!(c.mac, Some(mac));
        assert_eq!(h.peer_index, Some(c.index));
        assert_eq!(c.peer_index, Some(h.index));
        assert_eq!(container.link_by_name("vethtest0").unwrap(), None);

        // Same names again: EEXIST.
        let err = host
            .add_veth("vethtest0", None, "eth0", &pod, None)
            .unwrap_err();
        assert!(is_exists(&err), "{err}");

        // Attach to the bridge and set port flags, read back through netlink.
        host.set_master(h.index, br.index).unwrap();
        let port = host.link_by_index(h.index).unwrap().unwrap();
        assert_eq!(port.master, Some(br.index));
        let flags = port.bridge_port.expect("bridge port info");
        assert_eq!(flags.hairpin, Some(false));
        assert_eq!(flags.learning, Some(true));
        assert_eq!(flags.isolated, Some(false));

        host.set_bridge_port(
            h.index,
            BridgePortFlags {
                hairpin: Some(true),
                isolated: Some(true),
                learning: Some(false),
                ..Default::default()
            },
        )
        .unwrap();
        let flags = host
            .link_by_index(h.index)
            .unwrap()
            .unwrap()
            .bridge_port
            .unwrap();
        assert_eq!(flags.hairpin, Some(true));
        assert_eq!(flags.isolated, Some(true));
        assert_eq!(flags.learning, Some(false));
        assert_eq!(flags.unicast_flood, Some(true));

        // Detach.
        host.set_master(h.index, 0).unwrap();
        let detached = host.link_by_index(h.index).unwrap().unwrap();
        assert_eq!(detached.master, None);
        assert_eq!(detached.bridge_port, None);

        // Bridge port flags on a link that is not a port are refused.
        let err = host
            .set_bridge_port(
                h.index,
                BridgePortFlags {
                    hairpin: Some(true),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert_eq!(err.code(), 100);
        assert_eq!(errno(&err), Some(libc::EOPNOTSUPP));
        assert!(
            err.to_string().starts_with(&format!(
                "set bridge port flags hairpin on on link {}",
                h.index
            )),
            "{err}"
        );

        // Deleting the host end removes the peer in the pod too.
        host.delete_link(h.index).unwrap();
        assert_eq!(container.link_by_name("eth0").unwrap(), None);
    }
}

// ---- link state and details ----

/// Bridge port STP state `BR_STATE_DISABLED`: the port does not forward.
pub const BR_STATE_DISABLED: u8 = 0;
/// Bridge port STP state `BR_STATE_FORWARDING`.
pub const BR_STATE_FORWARDING: u8 = 3;

/// The operational state of a link (`IFLA_OPERSTATE`) and, for a bridge
/// port, its STP state (`IFLA_BRPORT_STATE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkState {
    /// `IF_OPER_UP`.
    pub oper_up: bool,
    /// The operational state as `ip link` names it ("UP", "DOWN",
    /// "LOWERLAYERDOWN", ...).
    pub oper_state: String,
    /// `BR_STATE_*` when the link is a bridge port.
    pub port_state: Option<u8>,
}

fn oper_state_name(state: rtlink::State) -> String {
    use rtlink::State;
    match state {
        State::Unknown => "UNKNOWN".into(),
        State::NotPresent => "NOTPRESENT".into(),
        State::Down => "DOWN".into(),
        State::LowerLayerDown => "LOWERLAYERDOWN".into(),
        State::Testing => "TESTING".into(),
        State::Dormant => "DORMANT".into(),
        State::Up => "UP".into(),
        other => format!("{other:?}"),
    }
}

impl Netlink {
    /// The full `RTM_NEWLINK` answer for link `index`, or `None`.
    pub(crate) fn link_message_of(&mut self, index: u32) -> Result<Option<LinkMessage>> {
        if index == 0 {
            return Ok(None);
        }
        match self.request(RouteNetlinkMessage::GetLink(link_message(index)), 0, || {
            format!("get link {index}")
        }) {
            Ok(replies) => Ok(replies.into_iter().find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The operational state of link `index` (and its bridge port state),
    /// or `None` if there is no such link.
    pub fn link_state(&mut self, index: u32) -> Result<Option<LinkState>> {
        let Some(msg) = self.link_message_of(index)? else {
            return Ok(None);
        };
        let mut state = LinkState {
            oper_up: false,
            oper_state: "UNKNOWN".into(),
            port_state: None,
        };
        for attr in msg.attributes {
            match attr {
                LinkAttribute::OperState(s) => {
                    state.oper_up = s == rtlink::State::Up;
                    state.oper_state = oper_state_name(s);
                }
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        if let LinkInfo::PortData(InfoPortData::BridgePort(nlas)) = info {
                            for nla in nlas {
                                if let InfoBridgePort::State(s) = nla {
                                    state.port_state = Some(u8::from(s));
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(Some(state))
    }
}

/// What [`Netlink::link_details`] reads beyond [`Link`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkDetails {
    /// The fields every link has.
    pub link: Link,
    /// Transmit queue length (`IFLA_TXQLEN`).
    pub txqlen: u32,
    /// All-multicast mode as set by a user (`IFF_ALLMULTI`).
    pub allmulti: bool,
    /// For a macvlan: its mode (`None` for another kind, or a mode this
    /// code does not know).
    pub macvlan_mode: Option<MacvlanMode>,
    /// For a macvlan: `IFLA_MACVLAN_BC_QUEUE_LEN`, when the kernel reports it.
    pub macvlan_bc_queue_len: Option<u32>,
    /// For an 802.1Q VLAN: its VLAN ID (`IFLA_VLAN_ID`).
    pub vlan_id: Option<u16>,
    /// For an ipvlan: its mode (`None` for another kind, or a mode this
    /// code does not know).
    pub ipvlan_mode: Option<super::link_kinds::IpvlanMode>,
    /// For a VRF device: its routing table (`IFLA_VRF_TABLE`).
    pub vrf_table: Option<u32>,
}

impl LinkDetails {
    fn from_message(msg: LinkMessage) -> LinkDetails {
        let allmulti = msg.header.flags.contains(LinkFlags::Allmulti);
        let mut txqlen = 0;
        let mut macvlan_mode = None;
        let mut macvlan_bc_queue_len = None;
        let (mut vlan_id, mut ipvlan_mode, mut vrf_table) = (None, None, None);
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::TxQueueLen(q) => txqlen = *q,
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        match info {
                            LinkInfo::Data(InfoData::MacVlan(nlas)) => {
                                for nla in nlas {
                                    match nla {
                                        rtlink::InfoMacVlan::Mode(m) => {
                                            macvlan_mode = MacvlanMode::from_netlink(*m)
                                        }
                                        rtlink::InfoMacVlan::BcQueueLen(q) => {
                                            macvlan_bc_queue_len = Some(*q)
                                        }
                                        _ => {}
                                    }
                                }
                            }
                            LinkInfo::Data(InfoData::Vlan(nlas)) => {
                                for nla in nlas {
                                    if let rtlink::InfoVlan::Id(id) = nla {
                                        vlan_id = Some(*id);
                                    }
                                }
                            }
                            LinkInfo::Data(InfoData::IpVlan(nlas)) => {
                                for nla in nlas {
                                    if let rtlink::InfoIpVlan::Mode(m) = nla {
                                        ipvlan_mode =
                                            super::link_kinds::IpvlanMode::from_netlink(*m);
                                    }
                                }
                            }
                            LinkInfo::Data(InfoData::Vrf(nlas)) => {
                                for nla in nlas {
                                    if let rtlink::InfoVrf::TableId(t) = nla {
                                        vrf_table = Some(*t);
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        LinkDetails {
            link: Link::from_message(msg),
            txqlen,
            allmulti,
            macvlan_mode,
            macvlan_bc_queue_len,
            vlan_id,
            ipvlan_mode,
            vrf_table,
        }
    }
}

impl Netlink {
    /// Sets the transmit queue length of link `index`.
    pub fn set_txqlen(&mut self, index: u32, txqlen: u32) -> Result<()> {
        let attrs = vec![LinkAttribute::TxQueueLen(txqlen)];
        self.set_link(index, attrs, no_flags(), || {
            format!("set txqlen {txqlen} on link {index}")
        })
    }

    /// Turns all-multicast mode of link `index` on or off.
    pub fn set_allmulti(&mut self, index: u32, on: bool) -> Result<()> {
        let flag = if on {
            LinkFlags::Allmulti
        } else {
            LinkFlags::empty()
        };
        self.set_link(index, vec![], (flag, LinkFlags::Allmulti), || {
            format!(
                "set allmulticast {} on link {index}",
                if on { "on" } else { "off" }
            )
        })
    }

    /// Link `index` with its transmit queue length, all-multicast flag and
    /// its kind's settings (macvlan, VLAN, ipvlan, VRF), or `None` if there
    /// is no such link.
    pub fn link_details(&mut self, index: u32) -> Result<Option<LinkDetails>> {
        Ok(self.link_message_of(index)?.map(LinkDetails::from_message))
    }

    /// [`Netlink::link_details`] of the link named `name`.
    pub fn link_details_by_name(&mut self, name: &str) -> Result<Option<LinkDetails>> {
        match self.link_by_name(name)? {
            Some(l) => self.link_details(l.index),
            None => Ok(None),
        }
    }
}
