//! IP addresses of links: dump (filtered by link and family), add, delete.

use std::net::{IpAddr, Ipv4Addr};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::Netlink;
use crate::IpFamily;
use crate::Result;

/// `IFA_F_DADFAILED`: duplicate address detection failed.
pub const IFA_F_DADFAILED: u32 = 0x08;
/// `IFA_F_NODAD`: the address is usable at once, without duplicate address
/// detection.
pub const IFA_F_NODAD: u32 = 0x02;
/// `IFA_F_TENTATIVE`: duplicate address detection is still running.
pub const IFA_F_TENTATIVE: u32 = 0x40;

/// An address of a link, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// Index of the link.
    pub index: u32,
    /// The local address (`IFA_LOCAL`, or `IFA_ADDRESS` when absent).
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
    /// `IFA_F_*` flags (see [`Address::is_tentative`]).
    pub flags: u32,
    /// Scope (`RT_SCOPE_*`: 0 universe, 253 link, 254 host).
    pub scope: u8,
}

impl Address {
    /// IPv6 duplicate address detection has not finished yet.
    pub fn is_tentative(&self) -> bool {
        self.flags & IFA_F_TENTATIVE != 0
    }

    /// IPv6 duplicate address detection found the address in use.
    pub fn is_dad_failed(&self) -> bool {
        self.flags & IFA_F_DADFAILED != 0
    }

    fn from_message(msg: AddressMessage) -> Option<Address> {
        let mut local = None;
        let mut address = None;
        let mut flags = None;
        for attr in msg.attributes {
            match attr {
                AddressAttribute::Local(ip) => local = Some(ip),
                AddressAttribute::Address(ip) => address = Some(ip),
                AddressAttribute::Flags(f) => flags = Some(f.bits()),
                _ => {}
            }
        }
        Some(Address {
            index: msg.header.index,
            addr: local.or(address)?,
            prefix_len: msg.header.prefix_len,
            flags: flags.unwrap_or(u32::from(msg.header.flags.bits())),
            scope: msg.header.scope.into(),
        })
    }
}

fn address_family(family: IpFamily) -> AddressFamily {
    match family {
        IpFamily::V4 => AddressFamily::Inet,
        IpFamily::V6 => AddressFamily::Inet6,
    }
}

/// The message naming `ip/prefix_len` on link `index`, as `ip addr`
/// builds it: IPv4 carries `IFA_LOCAL` and `IFA_ADDRESS` (and, for a
/// prefix shorter than /31, the broadcast address); IPv6 `IFA_ADDRESS`.
fn address_message(index: u32, ip: IpAddr, prefix_len: u8, broadcast: bool) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = address_family(IpFamily::of(&ip));
    msg.header.prefix_len = prefix_len;
    msg.header.index = index;
    match ip {
        IpAddr::V4(v4) => {
            msg.attributes.push(AddressAttribute::Local(ip));
            msg.attributes.push(AddressAttribute::Address(ip));
            if broadcast && prefix_len < 31 {
                msg.attributes
                    .push(AddressAttribute::Broadcast(broadcast_of(v4, prefix_len)));
            }
        }
        IpAddr::V6(_) => msg.attributes.push(AddressAttribute::Address(ip)),
    }
    msg
}

/// The broadcast address of `ip/prefix_len` (all host bits set).
fn broadcast_of(ip: Ipv4Addr, prefix_len: u8) -> Ipv4Addr {
    let host_bits = u32::MAX.checked_shr(u32::from(prefix_len)).unwrap_or(0);
    Ipv4Addr::from(u32::from(ip) | host_bits)
}

impl Netlink {
    /// The addresses of the namespace, only of link `index` and of `family`
    /// when given.
    pub fn addresses(
        &mut self,
        index: Option<u32>,
        family: Option<IpFamily>,
    ) -> Result<Vec<Address>> {
        let mut msg = AddressMessage::default();
        if let Some(f) = family {
            msg.header.family = address_family(f);
        }
        if let Some(i) = index {
            // With strict checking the kernel filters on the index itself.
            msg.header.index = i;
        }
        let replies = self.request(
            RouteNetlinkMessage::GetAddress(msg),
            NLM_F_DUMP,
            || match index {
                Some(i) => format!("list addresses of link {i}"),
                None => "list addresses".to_string(),
            },
        )?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) => Address::from_message(a),
                _ => None,
            })
            .filter(|a| index.is_none_or(|i| a.index == i))
            .filter(|a| family.is_none_or(|f| IpFamily::of(&a.addr) == f))
            .collect())
    }

    /// Adds `ip/prefix_len` to link `index`. An address already there is an
    /// error with errno `EEXIST` ([`super::is_exists`]).
    pub fn add_address(&mut self, index: u32, ip: IpAddr, prefix_len: u8) -> Result<()> {
        let msg = address_message(index, ip, prefix_len, true);
        self.request(
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add address {ip}/{prefix_len} to link {index}"),
        )?;
        Ok(())
    }

    /// Like [`Netlink::add_address`], with `IFA_F_NODAD`: an IPv6 address
    /// that is usable at once, for addresses the node owns by construction
    /// (a bridge's gateway address, which IPAM never hands out).
    pub fn add_address_nodad(&mut self, index: u32, ip: IpAddr, prefix_len: u8) -> Result<()> {
        let mut msg = address_message(index, ip, prefix_len, true);
        msg.attributes
            .push(AddressAttribute::Flags(AddressFlags::Nodad));
        self.request(
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add address {ip}/{prefix_len} (nodad) to link {index}"),
        )?;
        Ok(())
    }

    /// Removes `ip/prefix_len` from link `index`. An address that is not
    /// there is an error with errno `EADDRNOTAVAIL`
    /// ([`super::is_not_found`]).
    pub fn del_address(&mut self, index: u32, ip: IpAddr, prefix_len: u8) -> Result<()> {
        let msg = address_message(index, ip, prefix_len, false);
        self.request(RouteNetlinkMessage::DelAddress(msg), 0, || {
            format!("delete address {ip}/{prefix_len} from link {index}")
        })?;
        Ok(())
    }
}

// `AddressFlags` (of the churning crate) stays out of the API; this checks
// at compile time that our constants match its bits.
const _: () = {
    assert!(AddressFlags::Tentative.bits() == IFA_F_TENTATIVE);
    assert!(AddressFlags::Nodad.bits() == IFA_F_NODAD);
    assert!(AddressFlags::Dadfailed.bits() == IFA_F_DADFAILED);
};

#[cfg(test)]
mod tests {
    use super::super::{errno, is_exists, is_not_found};
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    #[test]
    fn netlink_addr_broadcast_of() {
        let ip = Ipv4Addr::new(10, 1, 2, 3);
        assert_eq!(broadcast_of(ip, 24), Ipv4Addr::new(10, 1, 2, 255));
        assert_eq!(broadcast_of(ip, 16), Ipv4Addr::new(10, 1, 255, 255));
        assert_eq!(broadcast_of(ip, 0), Ipv4Addr::BROADCAST);
        assert_eq!(broadcast_of(ip, 32), ip);
    }

    #[test]
    fn netlink_addr_add_list_delete_v4_and_v6() {
        if !privileged("netlink_addr_add_list_delete_v4_and_v6") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        nl.add_bridge("addrtest0", None).unwrap();
        let idx = nl.link_by_name("addrtest0").unwrap().unwrap().index;
        nl.set_link_up(idx).unwrap();

        let v4: IpAddr = "10.22.0.1".parse().unwrap();
        let v6: IpAddr = "fd00:22::1".parse().unwrap();
        nl.add_address(idx, v4, 24).unwrap();
        nl.add_address(idx, v6, 64).unwrap();

        let got4 = nl.addresses(Some(idx), Some(IpFamily::V4)).unwrap();
        assert_eq!(got4.len(), 1, "{got4:?}");
        assert_eq!(
            (got4[0].index, got4[0].addr, got4[0].prefix_len),
            (idx, v4, 24)
        );
        assert_eq!(got4[0].scope, 0);
        assert!(!got4[0].is_tentative());

        let got6: Vec<Address> = nl
            .addresses(Some(idx), Some(IpFamily::V6))
            .unwrap()
            .into_iter()
            .filter(|a| a.scope == 0)
            .collect();
        assert_eq!(got6.len(), 1, "{got6:?}");
        assert_eq!((got6[0].addr, got6[0].prefix_len), (v6, 64));
        assert!(!got6[0].is_dad_failed());

        // Unfiltered: the loopback of a fresh namespace is down and has no
        // address, so only the bridge's addresses are listed.
        let all = nl.addresses(None, None).unwrap();
        assert!(all.iter().all(|a| a.index == idx), "{all:?}");
        assert!(all.iter().any(|a| a.addr == v4));
        assert!(all.iter().any(|a| a.addr == v6));

        let err = nl.add_address(idx, v4, 24).unwrap_err();
        assert!(is_exists(&err), "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("add address 10.22.0.1/24 to link {idx}")),
            "{err}"
        );

        nl.del_address(idx, v4, 24).unwrap();
        nl.del_address(idx, v6, 64).unwrap();
        assert!(nl
            .addresses(Some(idx), Some(IpFamily::V4))
            .unwrap()
            .is_empty());
        assert!(!nl
            .addresses(Some(idx), Some(IpFamily::V6))
            .unwrap()
            .iter()
            .any(|a| a.addr == v6));

        let err = nl.del_address(idx, v4, 24).unwrap_err();
        assert!(is_not_found(&err), "{err} ({:?})", errno(&err));
    }

    #[test]
    fn netlink_addr_ipv4_broadcast_is_set() {
        if !privileged("netlink_addr_ipv4_broadcast_is_set") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        nl.add_bridge("brdtest0", None).unwrap();
        let idx = nl.link_by_name("brdtest0").unwrap().unwrap().index;
        nl.add_address(idx, "192.168.7.9".parse().unwrap(), 20)
            .unwrap();
        let mut msg = AddressMessage::default();
        msg.header.family = AddressFamily::Inet;
        let replies = nl
            .request(
                RouteNetlinkMessage::GetAddress(msg),
                NLM_F_DUMP,
                String::new,
            )
            .unwrap();
        let brd: Vec<Ipv4Addr> = replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) if a.header.index == idx => Some(a),
                _ => None,
            })
            .flat_map(|a| a.attributes)
            .filter_map(|attr| match attr {
                AddressAttribute::Broadcast(b) => Some(b),
                _ => None,
            })
            .collect();
        assert_eq!(brd, [Ipv4Addr::new(192, 168, 15, 255)]);
    }
}
