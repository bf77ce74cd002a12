//! `useInterfaceNetwork` (upstream v1.10, #1257): clouds (AWS, GCP, IBM
//! Cloud) provision a secondary NIC's addresses and routes on the device
//! itself, with no IPAM to ask. The device's own L3 configuration is read
//! on the node before the move (the kernel drops it when the device
//! changes namespace), applied to it in the container, and reported in the
//! result after IPAM's.
//!
//! What is taken, as upstream takes it: global addresses the kernel keeps
//! for good (`IFA_F_PERMANENT`: static and DHCPv4 addresses, not SLAAC or
//! DHCPv6 ones, which nothing would renew in the container; the kernel
//! gives the container fresh ones if it accepts router advertisements),
//! and the routes out of the device in every table but `local`, except
//! the kernel's own (its connected routes come back with the addresses),
//! router-advertised ones and IPv6 link-local ones. DEL moves the device
//! back as usual; the node's network manager configures it again there.

use std::net::IpAddr;

use libcni::netlink::link::Link;
use libcni::netlink::route::{Route, RTPROT_KERNEL};
use libcni::netlink::{is_exists, Netlink};
use libcni::types::{IpConfig, IpPrefix, Route as CniRoute};
use libcni::Error;
use libcni::IpFamily;

/// `IFA_F_PERMANENT`: an address without a lifetime.
const IFA_F_PERMANENT: u32 = 0x80;
/// `RTPROT_RA`: a route learned from a router advertisement.
const RTPROT_RA: u8 = 9;
/// `RT_TABLE_LOCAL`: the kernel's table of local and broadcast addresses.
const RT_TABLE_LOCAL: u32 = 255;

/// The device's addresses and routes as the node had them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceNetwork {
    pub addresses: Vec<IpPrefix>,
    pub routes: Vec<Route>,
}

/// Reads `dev`'s addresses and routes on the node (`nl`, before the move).
pub fn capture(nl: &mut Netlink, dev: &Link) -> Result<InterfaceNetwork, Error> {
    let addresses = nl
        .addresses(Some(dev.index), None)?
        .into_iter()
        .filter(|a| a.scope == 0 && a.flags & IFA_F_PERMANENT != 0)
        .filter_map(|a| IpPrefix::new(a.addr, a.prefix_len))
        .collect();
    let mut routes = Vec::new();
    for family in IpFamily::BOTH {
        routes.extend(nl.routes_in(family, None)?.into_iter().filter(|r| {
            r.oif == Some(dev.index)
                && r.table != RT_TABLE_LOCAL
                && r.protocol != RTPROT_KERNEL
                && r.protocol != RTPROT_RA
                && !is_link_local_v6_destination(r)
        }));
    }
    Ok(InterfaceNetwork { addresses, routes })
}

/// A route to an IPv6 link-local destination (`fe80::/10` or inside it);
/// the IPv6 default route is not one.
fn is_link_local_v6_destination(r: &Route) -> bool {
    matches!(r.dst, IpAddr::V6(v6) if r.dst_len > 0 && v6.segments()[0] & 0xffc0 == 0xfe80)
}

impl InterfaceNetwork {
    /// Applies the addresses, then the routes (those on the link first, so
    /// the gateways of the others are reachable), to link `index` of the
    /// container (`nl`, a socket there; the link is up). What is there
    /// already (IPAM gave the same) is fine. IPv6 addresses skip duplicate
    /// address detection: the device held them on the node.
    pub fn apply(&self, nl: &mut Netlink, index: u32) -> Result<(), Error> {
        for a in &self.addresses {
            let added = if a.is_ipv4() {
                nl.add_address(index, a.addr(), a.prefix_len())
            } else {
                nl.add_address_nodad(index, a.addr(), a.prefix_len())
            };
            match added {
                Err(e) if is_exists(&e) => {}
                other => other?,
            }
        }
        let mut routes = self.routes.clone();
        // Link scope (253) before universe (0).
        routes.sort_by_key(|r| std::cmp::Reverse(r.scope));
        for r in routes {
            let moved = Route {
                oif: Some(index),
                ..r
            };
            match nl.add_route(&moved) {
                Err(e) if is_exists(&e) => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// The addresses as result entries of interface 0.
    pub fn result_ips(&self) -> Vec<IpConfig> {
        self.addresses
            .iter()
            .map(|a| IpConfig {
                address: *a,
                gateway: None,
                interface: Some(0),
            })
            .collect()
    }

    /// The routes as result routes: destination, gateway, metric, table,
    /// and scope when not universe, as upstream reports them.
    pub fn result_routes(&self) -> Vec<CniRoute> {
        self.routes
            .iter()
            .filter_map(|r| {
                let dst = IpPrefix::new(r.dst, r.dst_len)?;
                let mut out = CniRoute::new(dst, r.gateway);
                out.priority = r.priority.filter(|p| *p != 0);
                out.table = Some(r.table);
                out.scope = (r.scope != 0).then_some(r.scope);
                Some(out)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn routes_are_reported_with_their_table_and_non_universe_scope() {
        let mut link = Route::new(Ipv4Addr::new(10, 5, 0, 0).into(), 24, None, Some(7));
        link.protocol = 4;
        let mut default = Route::new(
            Ipv4Addr::UNSPECIFIED.into(),
            0,
            Some([10, 5, 0, 1].into()),
            Some(7),
        );
        default.priority = Some(100);
        default.table = 100;
        let net = InterfaceNetwork {
            addresses: vec!["10.5.0.9/24".parse().unwrap()],
            routes: vec![link, default],
        };
        let routes = net.result_routes();
        assert_eq!(routes[0].dst.to_string(), "10.5.0.0/24");
        assert_eq!((routes[0].table, routes[0].scope), (Some(254), Some(253)));
        assert_eq!(routes[1].dst.to_string(), "0.0.0.0/0");
        assert_eq!(
            (
                routes[1].gw,
                routes[1].priority,
                routes[1].table,
                routes[1].scope
            ),
            (Some([10, 5, 0, 1].into()), Some(100), Some(100), None)
        );
        assert_eq!(net.result_ips()[0].interface, Some(0));
    }

    #[test]
    fn ipv6_link_local_destinations_are_not_taken() {
        let ll = Route::new(
            Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0).into(),
            64,
            None,
            Some(3),
        );
        let default = Route::new(
            Ipv6Addr::UNSPECIFIED.into(),
            0,
            Some("fe80::1".parse().unwrap()),
            Some(3),
        );
        assert!(is_link_local_v6_destination(&ll));
        assert!(!is_link_local_v6_destination(&default));
    }
}
