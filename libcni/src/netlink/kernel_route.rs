//! Routes exactly as the kernel lists them, every attribute kept, so that
//! a route can be written again into another table (source-based routing
//! moves a link's routes out of the main table) or deleted exactly as
//! listed. [`super::route`] is the simpler view the rest of the suite
//! reads and writes.

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteProtocol,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::route::Route;
use super::Netlink;
use crate::IpFamily;
use crate::Result;

/// A route as listed, with the raw message kept for writing it again.
#[derive(Debug, Clone)]
pub struct KernelRoute {
    /// The fields the suite reads.
    pub route: Route,
    /// `RTA_PREFSRC`: the source address the route prefers.
    pub prefsrc: Option<IpAddr>,
    msg: RouteMessage,
}

impl PartialEq for KernelRoute {
    /// The same route: every attribute that can be written is equal
    /// (flags the kernel sets on its own, cache info and expiry aside).
    fn eq(&self, other: &Self) -> bool {
        same_request(
            &writable(&self.msg, self.route.table),
            &writable(&other.msg, other.route.table),
        )
    }
}

impl KernelRoute {
    fn from_message(msg: RouteMessage) -> Option<KernelRoute> {
        let prefsrc = msg.attributes.iter().find_map(|a| match a {
            RouteAttribute::PrefSource(RouteAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
            RouteAttribute::PrefSource(RouteAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
            _ => None,
        });
        let route = Route::from_message(msg.clone())?;
        Some(KernelRoute {
            route,
            prefsrc,
            msg,
        })
    }

    /// A new route: `route` with a preferred source address.
    pub fn new(route: &Route, prefsrc: Option<IpAddr>) -> KernelRoute {
        let mut msg = route.to_message(false);
        if let Some(src) = prefsrc {
            msg.attributes
                .push(RouteAttribute::PrefSource(RouteAddress::from(src)));
        }
        KernelRoute {
            route: route.clone(),
            prefsrc,
            msg,
        }
    }

    /// `10.1.0.0/24 dev 2 table 254 src 10.1.0.5 proto 2`, for messages.
    pub fn describe(&self) -> String {
        let mut s = self.route.describe();
        if let Some(src) = self.prefsrc {
            s.push_str(&format!(" src {src}"));
        }
        s.push_str(&format!(" proto {}", self.route.protocol));
        s
    }
}

/// `msg` as a request that writes it into `table`: the table changed, the
/// flags cleared but `onlink` (the others are the kernel's: a copy that
/// carries them is refused), what only dumps carry (cache info, expiry)
/// left out.
fn writable(msg: &RouteMessage, table: u32) -> RouteMessage {
    let mut m = msg.clone();
    m.header.table = u8::try_from(table).unwrap_or(0);
    m.header.flags &= RouteFlags::Onlink;
    m.attributes.retain(|a| {
        !matches!(
            a,
            RouteAttribute::Table(_)
                | RouteAttribute::CacheInfo(_)
                | RouteAttribute::Expires(_)
                | RouteAttribute::MulticastExpires(_)
                | RouteAttribute::MfcStats(_)
        )
    });
    m.attributes.push(RouteAttribute::Table(table));
    m
}

/// The same header and the same attributes, in any order.
fn same_request(a: &RouteMessage, b: &RouteMessage) -> bool {
    a.header == b.header
        && a.attributes.len() == b.attributes.len()
        && a.attributes.iter().all(|x| b.attributes.contains(x))
}

impl Netlink {
    /// The routes of both families in `table` whose output link is `index`
    /// (multipath routes, which name no single link, are not among them),
    /// as the kernel lists them; cache entries left out.
    pub fn link_routes_in(&mut self, index: u32, table: u32) -> Result<Vec<KernelRoute>> {
        let mut out = Vec::new();
        for family in IpFamily::BOTH {
            let mut msg = RouteMessage::default();
            msg.header.address_family = match family {
                IpFamily::V4 => AddressFamily::Inet,
                IpFamily::V6 => AddressFamily::Inet6,
            };
            let replies = self.request(RouteNetlinkMessage::GetRoute(msg), NLM_F_DUMP, || {
                format!("list the routes of link {index} in table {table}")
            })?;
            out.extend(
                replies
                    .into_iter()
                    .filter_map(|m| match m {
                        RouteNetlinkMessage::NewRoute(r)
                            if !r.header.flags.contains(RouteFlags::Cloned) =>
                        {
                            KernelRoute::from_message(r)
                        }
                        _ => None,
                    })
                    .filter(|r| r.route.table == table && r.route.oif == Some(index)),
            );
        }
        Ok(out)
    }

    /// Writes `route` into `table`, replacing a route of the same key
    /// there (`NLM_F_CREATE | NLM_F_REPLACE`, as `ip route replace`).
    pub fn replace_route_in(&mut self, route: &KernelRoute, table: u32) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewRoute(writable(&route.msg, table)),
            NLM_F_CREATE | NLM_F_REPLACE,
            || format!("write route {} into table {table}", route.describe()),
        )?;
        Ok(())
    }

    /// Deletes `route` exactly as listed (or as built). A route that is not
    /// there is an error with errno `ESRCH` ([`super::is_not_found`]).
    pub fn del_kernel_route(&mut self, route: &KernelRoute) -> Result<()> {
        let mut msg = writable(&route.msg, route.route.table);
        // A protocol of 0 would match any route of the key.
        if msg.header.protocol == RouteProtocol::Unspec {
            msg.header.protocol = route.route.protocol.into();
        }
        self.request(RouteNetlinkMessage::DelRoute(msg), 0, || {
            format!("delete route {}", route.describe())
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::is_not_found;
    use super::super::route::{RTPROT_BOOT, RTPROT_KERNEL, RT_TABLE_MAIN};
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn netlink_kernel_routes_are_copied_between_tables_with_every_attribute() {
        if !privileged("netlink_kernel_routes_are_copied_between_tables_with_every_attribute") {
            return;
        }
        let node = new_netns();
        let pod = new_netns();
        let mut nl = Netlink::open_in(&node).unwrap();
        let mut pod_nl = Netlink::open_in(&pod).unwrap();
        nl.add_veth("krveth0", None, "eth0", &pod, None).unwrap();
        let idx = pod_nl.link_by_name("eth0").unwrap().unwrap().index;
        pod_nl.set_link_up(idx).unwrap();
        pod_nl.add_address_nodad(idx, ip("10.31.0.5"), 24).unwrap();
        pod_nl.add_address_nodad(idx, ip("fd00:31::5"), 64).unwrap();
        let mut via = Route::new(ip("10.32.0.0"), 16, Some(ip("10.31.0.1")), Some(idx));
        via.mtu = Some(1400);
        via.priority = Some(7);
        pod_nl.add_route(&via).unwrap();

        let main = pod_nl.link_routes_in(idx, RT_TABLE_MAIN).unwrap();
        let connected = main
            .iter()
            .find(|r| r.route.dst == ip("10.31.0.0"))
            .expect("prefix route");
        assert_eq!(connected.prefsrc, Some(ip("10.31.0.5")));
        assert_eq!(connected.route.protocol, RTPROT_KERNEL);
        assert!(main.iter().any(|r| r.route.dst == ip("fd00:31::")));
        assert!(main.iter().all(|r| r.route.oif == Some(idx)));

        for r in &main {
            pod_nl.replace_route_in(r, 100).unwrap();
        }
        let copied = pod_nl.link_routes_in(idx, 100).unwrap();
        assert_eq!(copied.len(), main.len(), "{copied:?}");
        let c = copied
            .iter()
            .find(|r| r.route.dst == ip("10.32.0.0"))
            .unwrap();
        assert_eq!(
            (
                c.route.gateway,
                c.route.mtu,
                c.route.priority,
                c.route.protocol
            ),
            (Some(ip("10.31.0.1")), Some(1400), Some(7), RTPROT_BOOT)
        );
        let k = copied
            .iter()
            .find(|r| r.route.dst == ip("10.31.0.0"))
            .unwrap();
        assert_eq!(
            (k.prefsrc, k.route.protocol, k.route.scope),
            (Some(ip("10.31.0.5")), RTPROT_KERNEL, connected.route.scope)
        );
        // Equal to the original but for the table.
        assert!(main.iter().all(|m| copied
            .iter()
            .any(|c| same_request(&writable(&m.msg, 100), &writable(&c.msg, 100)))));

        // Deleting exactly what was listed: the copies go, the originals stay.
        for r in &copied {
            pod_nl.del_kernel_route(r).unwrap();
        }
        assert!(pod_nl.link_routes_in(idx, 100).unwrap().is_empty());
        assert!(is_not_found(
            &pod_nl.del_kernel_route(&copied[0]).unwrap_err()
        ));
        assert_eq!(pod_nl.link_routes_in(idx, RT_TABLE_MAIN).unwrap(), main);

        // A route with a preferred source replaces the kernel's prefix route.
        let hint = KernelRoute::new(
            &Route::new(ip("10.31.0.0"), 24, None, Some(idx)),
            Some(ip("10.31.0.5")),
        );
        pod_nl.replace_route_in(&hint, RT_TABLE_MAIN).unwrap();
        let now = pod_nl.link_routes_in(idx, RT_TABLE_MAIN).unwrap();
        let p: Vec<&KernelRoute> = now
            .iter()
            .filter(|r| r.route.dst == ip("10.31.0.0"))
            .collect();
        assert_eq!(p.len(), 1, "{now:?}");
        assert_eq!(
            (p[0].prefsrc, p[0].route.protocol),
            (Some(ip("10.31.0.5")), RTPROT_BOOT)
        );
        assert!(now.contains(&hint));
        // Deleting it leaves no prefix route; the original comes back.
        pod_nl.del_kernel_route(&hint).unwrap();
        pod_nl.replace_route_in(connected, RT_TABLE_MAIN).unwrap();
        assert_eq!(pod_nl.link_routes_in(idx, RT_TABLE_MAIN).unwrap(), main);
    }
}
