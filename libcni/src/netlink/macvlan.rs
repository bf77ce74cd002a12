//! Macvlan links: their modes, and their creation on a lower device,
//! inside the container's namespace when asked.

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{InfoData, InfoKind, LinkAttribute, LinkInfo};
use netlink_packet_route::RouteNetlinkMessage;
use std::os::fd::AsRawFd;

use super::link_message;
use super::Netlink;
use crate::netns::NetNs;
use crate::Result;
use netlink_packet_route::link as rtlink;

/// A macvlan mode (`IFLA_MACVLAN_MODE`), as `ip link ... type macvlan mode`
/// names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacvlanMode {
    /// Macvlans on the same lower device reach each other directly.
    Bridge,
    /// No traffic between macvlans on the same lower device, even when an
    /// external switch sends it back.
    Private,
    /// Traffic between macvlans goes out to the external switch (which must
    /// hairpin it).
    Vepa,
    /// The one macvlan of the lower device takes it over (its MAC, and
    /// promiscuous mode).
    Passthru,
    /// Only frames from allowed source MACs (not used by the plugins).
    Source,
}

impl MacvlanMode {
    /// `bridge`, `private`, `vepa`, `passthru` or `source`.
    pub fn parse(s: &str) -> Option<MacvlanMode> {
        Some(match s {
            "bridge" => MacvlanMode::Bridge,
            "private" => MacvlanMode::Private,
            "vepa" => MacvlanMode::Vepa,
            "passthru" => MacvlanMode::Passthru,
            "source" => MacvlanMode::Source,
            _ => return None,
        })
    }

    /// The name `ip -d link` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            MacvlanMode::Bridge => "bridge",
            MacvlanMode::Private => "private",
            MacvlanMode::Vepa => "vepa",
            MacvlanMode::Passthru => "passthru",
            MacvlanMode::Source => "source",
        }
    }

    fn to_netlink(self) -> rtlink::MacVlanMode {
        match self {
            MacvlanMode::Bridge => rtlink::MacVlanMode::Bridge,
            MacvlanMode::Private => rtlink::MacVlanMode::Private,
            MacvlanMode::Vepa => rtlink::MacVlanMode::Vepa,
            MacvlanMode::Passthru => rtlink::MacVlanMode::Passthrough,
            MacvlanMode::Source => rtlink::MacVlanMode::Source,
        }
    }

    pub(super) fn from_netlink(mode: rtlink::MacVlanMode) -> Option<MacvlanMode> {
        Some(match mode {
            rtlink::MacVlanMode::Bridge => MacvlanMode::Bridge,
            rtlink::MacVlanMode::Private => MacvlanMode::Private,
            rtlink::MacVlanMode::Vepa => MacvlanMode::Vepa,
            rtlink::MacVlanMode::Passthrough => MacvlanMode::Passthru,
            rtlink::MacVlanMode::Source => MacvlanMode::Source,
            _ => return None,
        })
    }
}

impl std::fmt::Display for MacvlanMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A macvlan link to create with [`Netlink::add_macvlan`].
#[derive(Debug, Clone, Copy)]
pub struct MacvlanSpec<'a> {
    /// Its name, in the namespace it is created in.
    pub name: &'a str,
    /// Index of the lower device, in the socket's namespace.
    pub master_index: u32,
    pub mode: MacvlanMode,
    /// MTU; `None` takes the lower device's.
    pub mtu: Option<u32>,
    /// MAC; `None` lets the kernel pick a random one.
    pub mac: Option<[u8; 6]>,
    /// `IFLA_MACVLAN_BC_QUEUE_LEN`: the broadcast/multicast queue length;
    /// `None` keeps the kernel's default.
    pub bc_queue_len: Option<u32>,
    /// Create it directly inside this namespace (`IFLA_NET_NS_FD`), so it
    /// never appears in the socket's namespace; `None` creates it in the
    /// socket's namespace.
    pub netns: Option<&'a NetNs>,
}

impl Netlink {
    /// Creates the macvlan `spec` on top of link `spec.master_index` (in
    /// this socket's namespace). With [`MacvlanSpec::netns`] the kernel
    /// creates it directly inside that namespace under its final name: no
    /// temporary name, no move, and a name taken in this namespace does
    /// not matter. A name taken where it is created is `EEXIST`
    /// ([`super::is_exists`]); a lower device that is gone is `ENODEV`.
    pub fn add_macvlan(&mut self, spec: &MacvlanSpec<'_>) -> Result<()> {
        let mut msg = link_message(0);
        msg.attributes
            .push(LinkAttribute::IfName(spec.name.to_string()));
        msg.attributes.push(LinkAttribute::Link(spec.master_index));
        if let Some(mtu) = spec.mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = spec.mac {
            msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        }
        if let Some(ns) = spec.netns {
            msg.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        }
        let mut data = vec![rtlink::InfoMacVlan::Mode(spec.mode.to_netlink())];
        if let Some(q) = spec.bc_queue_len {
            data.push(rtlink::InfoMacVlan::BcQueueLen(q));
        }
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::MacVlan),
            LinkInfo::Data(InfoData::MacVlan(data)),
        ]));
        self.request(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || {
                let place = match spec.netns {
                    Some(ns) => format!(" in {:?}", ns.path()),
                    None => String::new(),
                };
                format!(
                    "add macvlan {:?} (mode {}) on link {}{place}",
                    spec.name, spec.mode, spec.master_index
                )
            },
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod macvlan_tests {
    use super::super::{is_exists, is_not_found};
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    #[test]
    fn netlink_link_macvlan_modes_round_trip() {
        for m in [
            MacvlanMode::Bridge,
            MacvlanMode::Private,
            MacvlanMode::Vepa,
            MacvlanMode::Passthru,
            MacvlanMode::Source,
        ] {
            assert_eq!(MacvlanMode::parse(m.as_str()), Some(m));
            assert_eq!(MacvlanMode::from_netlink(m.to_netlink()), Some(m));
        }
        assert_eq!(MacvlanMode::parse("Bridge"), None);
        assert_eq!(MacvlanMode::parse(""), None);
    }

    #[test]
    fn netlink_link_macvlan_created_in_another_namespace() {
        if !privileged("netlink_link_macvlan_created_in_another_namespace") {
            return;
        }
        let (node, pod, upstream) = (new_netns(), new_netns(), new_netns());
        let mut host = Netlink::open_in(&node).unwrap();
        let mut c = Netlink::open_in(&pod).unwrap();
        host.add_veth("up0", Some(1450), "up0p", &upstream, None)
            .unwrap();
        let up0 = host.link_by_name("up0").unwrap().unwrap();
        // A link named like the new one in the node is no obstacle.
        host.add_bridge("eth1", None).unwrap();
        let mac = [0x0a, 0x58, 0x0a, 0x46, 0x00, 0x07];
        let spec = MacvlanSpec {
            name: "eth1",
            master_index: up0.index,
            mode: MacvlanMode::Vepa,
            mtu: Some(1400),
            mac: Some(mac),
            bc_queue_len: Some(321),
            netns: Some(&pod),
        };
        host.add_macvlan(&spec).unwrap();
        let d = c.link_details_by_name("eth1").unwrap().unwrap();
        assert_eq!(d.link.kind.as_deref(), Some("macvlan"));
        assert_eq!(d.macvlan_mode, Some(MacvlanMode::Vepa));
        assert_eq!(d.macvlan_bc_queue_len, Some(321));
        assert_eq!((d.link.mtu, d.link.mac), (1400, Some(mac)));
        assert_eq!(d.link.peer_index, Some(up0.index));
        assert!(d.link.link_netnsid.is_some(), "{d:?}");
        assert!(!d.allmulti);
        let kind = host.link_by_name("eth1").unwrap().unwrap().kind;
        assert_eq!(
            kind.as_deref(),
            Some("bridge"),
            "the node's eth1 is untouched"
        );

        // The same name again in the pod: EEXIST, naming the link.
        let err = host.add_macvlan(&spec).unwrap_err();
        assert!(is_exists(&err), "{err}");
        assert!(
            err.to_string()
                .starts_with("add macvlan \"eth1\" (mode vepa) on link"),
            "{err}"
        );
        // A lower device that does not exist.
        let err = host
            .add_macvlan(&MacvlanSpec {
                name: "eth2",
                master_index: 4242,
                ..spec
            })
            .unwrap_err();
        assert!(is_not_found(&err), "{err}");
        assert_eq!(c.link_by_name("eth2").unwrap(), None);

        // txqlen and allmulti, both ways.
        c.set_txqlen(d.link.index, 4321).unwrap();
        c.set_allmulti(d.link.index, true).unwrap();
        let d2 = c.link_details(d.link.index).unwrap().unwrap();
        assert_eq!((d2.txqlen, d2.allmulti), (4321, true));
        c.set_allmulti(d.link.index, false).unwrap();
        c.set_txqlen(d.link.index, 0).unwrap();
        let d3 = c.link_details(d.link.index).unwrap().unwrap();
        assert_eq!((d3.txqlen, d3.allmulti), (0, false));
        assert_eq!(c.link_details(4242).unwrap(), None);
        assert_eq!(c.link_details_by_name("nosuch0").unwrap(), None);

        // Created in the socket's own namespace, with the defaults.
        host.add_macvlan(&MacvlanSpec {
            name: "mv0",
            mtu: None,
            mac: None,
            bc_queue_len: None,
            netns: None,
            mode: MacvlanMode::Bridge,
            ..spec
        })
        .unwrap();
        let mv = host.link_details_by_name("mv0").unwrap().unwrap();
        assert_eq!(mv.macvlan_mode, Some(MacvlanMode::Bridge));
        assert_eq!(mv.link.mtu, 1450, "the lower device's MTU");
        assert_eq!(mv.link.link_netnsid, None);
        let veth = host.link_details(up0.index).unwrap().unwrap();
        assert_eq!(veth.macvlan_mode, None);
        assert_eq!(veth.txqlen, 1000);
    }
}
