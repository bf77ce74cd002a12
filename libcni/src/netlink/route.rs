//! IP routes: dump (main table or all tables), add, delete.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteMetric, RouteProtocol,
    RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::Netlink;
use crate::IpFamily;
use crate::Result;

/// The main routing table (`RT_TABLE_MAIN`).
pub const RT_TABLE_MAIN: u32 = 254;
/// `RTPROT_KERNEL`: a route the kernel added (e.g. the prefix route of an
/// address).
pub const RTPROT_KERNEL: u8 = 2;
/// `RTPROT_BOOT`: the protocol of routes added by tools (`ip route`).
pub const RTPROT_BOOT: u8 = 3;
/// `RT_SCOPE_UNIVERSE`: a route through a gateway.
pub const RT_SCOPE_UNIVERSE: u8 = 0;
/// `RT_SCOPE_LINK`: a destination directly on the link.
pub const RT_SCOPE_LINK: u8 = 253;
/// rtnetlink multicast group of IPv6 route changes (`RTNLGRP_IPV6_ROUTE`).
pub const RTNLGRP_IPV6_ROUTE: u32 = 11;

/// A unicast route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination network (the unspecified address for a default route).
    pub dst: IpAddr,
    /// Destination prefix length (0 for a default route).
    pub dst_len: u8,
    /// Next hop, if any.
    pub gateway: Option<IpAddr>,
    /// Output link index.
    pub oif: Option<u32>,
    /// Routing table ([`RT_TABLE_MAIN`] unless told otherwise).
    pub table: u32,
    /// Scope (`RT_SCOPE_*`).
    pub scope: u8,
    /// Protocol (`RTPROT_*`): who installed the route.
    pub protocol: u8,
    /// Metric (`RTA_PRIORITY`).
    pub priority: Option<u32>,
    /// Path MTU (`RTAX_MTU`).
    pub mtu: Option<u32>,
    /// Advertised MSS (`RTAX_ADVMSS`).
    pub advmss: Option<u32>,
    /// Preferred source address (`RTA_PREFSRC`, `ip route ... src`).
    pub prefsrc: Option<IpAddr>,
}

impl Route {
    /// A route to `dst/dst_len` in the main table, protocol boot (like
    /// `ip route add`), through `gateway` if given and out of link `oif` if
    /// given. The scope follows the gateway: universe with one, link
    /// without (the destination is directly on the link).
    pub fn new(dst: IpAddr, dst_len: u8, gateway: Option<IpAddr>, oif: Option<u32>) -> Route {
        Route {
            dst,
            dst_len,
            gateway,
            oif,
            table: RT_TABLE_MAIN,
            scope: if gateway.is_some() {
                RT_SCOPE_UNIVERSE
            } else {
                RT_SCOPE_LINK
            },
            protocol: RTPROT_BOOT,
            priority: None,
            mtu: None,
            advmss: None,
            prefsrc: None,
        }
    }

    fn family(&self) -> IpFamily {
        IpFamily::of(&self.dst)
    }

    pub(super) fn from_message(msg: RouteMessage) -> Option<Route> {
        let family = match msg.header.address_family {
            AddressFamily::Inet => IpFamily::V4,
            AddressFamily::Inet6 => IpFamily::V6,
            _ => return None,
        };
        let mut route = Route {
            dst: match family {
                IpFamily::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpFamily::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            },
            dst_len: msg.header.destination_prefix_length,
            gateway: None,
            oif: None,
            table: u32::from(msg.header.table),
            scope: msg.header.scope.into(),
            protocol: msg.header.protocol.into(),
            priority: None,
            mtu: None,
            advmss: None,
            prefsrc: None,
        };
        for attr in msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => {
                    if let Some(ip) = ip_of(a) {
                        route.dst = ip;
                    }
                }
                RouteAttribute::Gateway(a) => route.gateway = ip_of(a),
                RouteAttribute::PrefSource(a) => route.prefsrc = ip_of(a),
                RouteAttribute::Oif(i) => route.oif = Some(i),
                RouteAttribute::Table(t) => route.table = t,
                RouteAttribute::Priority(p) => route.priority = Some(p),
                RouteAttribute::Metrics(metrics) => {
                    for m in metrics {
                        match m {
                            RouteMetric::Mtu(v) => route.mtu = Some(v),
                            RouteMetric::Advmss(v) => route.advmss = Some(v),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(route)
    }

    /// The message for this route; `for_delete` leaves out what should not
    /// restrict the match (scope, protocol, type, metrics).
    pub(super) fn to_message(&self, for_delete: bool) -> RouteMessage {
        let mut msg = RouteMessage::default();
        msg.header.address_family = match self.family() {
            IpFamily::V4 => AddressFamily::Inet,
            IpFamily::V6 => AddressFamily::Inet6,
        };
        msg.header.destination_prefix_length = self.dst_len;
        msg.header.table = u8::try_from(self.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
        if for_delete {
            // Like `ip route del`: scope "nowhere" and protocol/type 0 match any.
            msg.header.scope = RouteScope::NoWhere;
            msg.header.protocol = RouteProtocol::Unspec;
            msg.header.kind = RouteType::Unspec;
        } else {
            msg.header.scope = self.scope.into();
            msg.header.protocol = self.protocol.into();
            msg.header.kind = RouteType::Unicast;
        }
        msg.attributes.push(RouteAttribute::Table(self.table));
        if self.dst_len > 0 {
            msg.attributes
                .push(RouteAttribute::Destination(RouteAddress::from(self.dst)));
        }
        if let Some(gw) = self.gateway {
            msg.attributes
                .push(RouteAttribute::Gateway(RouteAddress::from(gw)));
        }
        if let Some(oif) = self.oif {
            msg.attributes.push(RouteAttribute::Oif(oif));
        }
        if let Some(p) = self.priority {
            msg.attributes.push(RouteAttribute::Priority(p));
        }
        if let Some(src) = self.prefsrc.filter(|_| !for_delete) {
            msg.attributes
                .push(RouteAttribute::PrefSource(RouteAddress::from(src)));
        }
        if !for_delete {
            let mut metrics = Vec::new();
            if let Some(mtu) = self.mtu {
                metrics.push(RouteMetric::Mtu(mtu));
            }
            if let Some(advmss) = self.advmss {
                metrics.push(RouteMetric::Advmss(advmss));
            }
            if !metrics.is_empty() {
                msg.attributes.push(RouteAttribute::Metrics(metrics));
            }
        }
        msg
    }

    /// `10.0.0.0/8 via 10.1.0.1 dev 3 table 254`, for error messages.
    pub(super) fn describe(&self) -> String {
        let mut s = format!("{}/{}", self.dst, self.dst_len);
        if let Some(gw) = self.gateway {
            s.push_str(&format!(" via {gw}"));
        }
        if let Some(oif) = self.oif {
            s.push_str(&format!(" dev {oif}"));
        }
        if let Some(src) = self.prefsrc {
            s.push_str(&format!(" src {src}"));
        }
        if let Some(p) = self.priority {
            s.push_str(&format!(" metric {p}"));
        }
        s.push_str(&format!(" table {}", self.table));
        s
    }
}

fn ip_of(a: RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(v6)),
        _ => None,
    }
}

impl Netlink {
    /// The routes of `family` in the main table.
    pub fn routes(&mut self, family: IpFamily) -> Result<Vec<Route>> {
        self.routes_in(family, Some(RT_TABLE_MAIN))
    }

    /// The routes of `family` in `table`, or in all tables when `None`
    /// (including the kernel's `local` table).
    pub fn routes_in(&mut self, family: IpFamily, table: Option<u32>) -> Result<Vec<Route>> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = match family {
            IpFamily::V4 => AddressFamily::Inet,
            IpFamily::V6 => AddressFamily::Inet6,
        };
        let replies = self.request(RouteNetlinkMessage::GetRoute(msg), NLM_F_DUMP, || {
            let v = match family {
                IpFamily::V4 => "IPv4",
                IpFamily::V6 => "IPv6",
            };
            format!("list {v} routes")
        })?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) => Route::from_message(r),
                _ => None,
            })
            .filter(|r| table.is_none_or(|t| r.table == t))
            .collect())
    }

    /// Adds `route` (it must not exist: a route already there is an error
    /// with errno `EEXIST`, [`super::is_exists`]).
    pub fn add_route(&mut self, route: &Route) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewRoute(route.to_message(false)),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add route {}", route.describe()),
        )?;
        Ok(())
    }

    /// Deletes `route`, matched on destination, table and, when set,
    /// gateway, output link and metric. A route that is not there is an
    /// error with errno `ESRCH` ([`super::is_not_found`]).
    pub fn del_route(&mut self, route: &Route) -> Result<()> {
        self.request(
            RouteNetlinkMessage::DelRoute(route.to_message(true)),
            0,
            || format!("delete route {}", route.describe()),
        )?;
        Ok(())
    }
}

// ---- added for the bridge plugin and libcni::ipam ----

impl Netlink {
    /// Adds `route` like Go's `netlink.RouteAddEcmp` (`NLM_F_CREATE`
    /// without `NLM_F_EXCL`): a second route to the same destination through
    /// another gateway is added beside the first (an IPv6 multipath
    /// sibling, an IPv4 alias) instead of failing. The very same route
    /// twice is still `EEXIST`.
    pub fn add_route_ecmp(&mut self, route: &Route) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewRoute(route.to_message(false)),
            NLM_F_CREATE,
            || format!("add route {}", route.describe()),
        )?;
        Ok(())
    }
}

// ---- added for the ptp plugin ----

/// `RT_SCOPE_HOST`: a route valid only inside this host (Go's `AddHostRoute`).
pub const RT_SCOPE_HOST: u8 = 254;

impl Netlink {
    /// Adds `route`, or replaces the route to the same destination (and
    /// metric) in its table (`NLM_F_CREATE | NLM_F_REPLACE`, `ip route
    /// replace`).
    pub fn replace_route(&mut self, route: &Route) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewRoute(route.to_message(false)),
            NLM_F_CREATE | NLM_F_REPLACE,
            || format!("replace route {}", route.describe()),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{is_exists, is_not_found};
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn netlink_route_new_picks_the_scope_from_the_gateway() {
        let via = Route::new(ip("10.0.0.0"), 8, Some(ip("10.1.0.1")), None);
        assert_eq!(
            (via.scope, via.protocol, via.table),
            (RT_SCOPE_UNIVERSE, RTPROT_BOOT, 254)
        );
        let on_link = Route::new(ip("10.0.0.0"), 8, None, Some(3));
        assert_eq!(on_link.scope, RT_SCOPE_LINK);
        assert_eq!(on_link.describe(), "10.0.0.0/8 dev 3 table 254");
    }

    #[test]
    fn netlink_route_add_list_delete_v4_and_v6() {
        if !privileged("netlink_route_add_list_delete_v4_and_v6") {
            return;
        }
        let node = new_netns();
        let pod = new_netns();
        let mut nl = Netlink::open_in(&node).unwrap();
        let mut pod_nl = Netlink::open_in(&pod).unwrap();
        nl.add_veth("rtveth0", None, "eth0", &pod, None).unwrap();
        let idx = nl.link_by_name("rtveth0").unwrap().unwrap().index;
        let peer = pod_nl.link_by_name("eth0").unwrap().unwrap().index;
        nl.set_link_up(idx).unwrap();
        pod_nl.set_link_up(peer).unwrap();
        nl.add_address(idx, ip("10.30.0.1"), 24).unwrap();
        nl.add_address(idx, ip("fd00:30::1"), 64).unwrap();

        // The kernel's prefix route of the address.
        let v4 = nl.routes(IpFamily::V4).unwrap();
        assert_eq!(v4.len(), 1, "{v4:?}");
        assert_eq!(
            (v4[0].dst, v4[0].dst_len, v4[0].gateway, v4[0].oif),
            (ip("10.30.0.0"), 24, None, Some(idx))
        );
        assert_eq!(
            (v4[0].scope, v4[0].protocol, v4[0].table),
            (RT_SCOPE_LINK, RTPROT_KERNEL, 254)
        );

        let mut via = Route::new(ip("10.40.0.0"), 16, Some(ip("10.30.0.254")), Some(idx));
        via.priority = Some(100);
        via.mtu = Some(1400);
        via.advmss = Some(1360);
        let on_link = Route::new(ip("10.50.0.0"), 24, None, Some(idx));
        let default = Route::new(ip("0.0.0.0"), 0, Some(ip("10.30.0.254")), None);
        for r in [&via, &on_link, &default] {
            nl.add_route(r).unwrap();
        }
        let v4 = nl.routes(IpFamily::V4).unwrap();
        for r in [&via, &on_link] {
            assert!(v4.contains(r), "{r:?} not in {v4:?}");
        }
        // The kernel fills in the output link of the default route.
        let mut default_read = default.clone();
        default_read.oif = Some(idx);
        assert!(v4.contains(&default_read), "{default_read:?} not in {v4:?}");
        assert_eq!(v4.len(), 4, "{v4:?}");

        let err = nl.add_route(&on_link).unwrap_err();
        assert!(is_exists(&err), "{err}");
        assert_eq!(
            err.to_string().split(": ").next(),
            Some(&*format!("add route 10.50.0.0/24 dev {idx} table 254"))
        );

        // All tables: the local table holds the address itself.
        let all = nl.routes_in(IpFamily::V4, None).unwrap();
        assert!(all
            .iter()
            .any(|r| r.table == 255 && r.dst == ip("10.30.0.1") && r.dst_len == 32));

        // IPv6.
        let v6_route = Route::new(ip("fd00:40::"), 48, Some(ip("fd00:30::fe")), Some(idx));
        nl.add_route(&v6_route).unwrap();
        let v6 = nl.routes(IpFamily::V6).unwrap();
        let got: Vec<&Route> = v6.iter().filter(|r| r.dst == ip("fd00:40::")).collect();
        assert_eq!(got.len(), 1, "{v6:?}");
        assert_eq!(
            (got[0].dst_len, got[0].gateway, got[0].oif, got[0].protocol),
            (48, Some(ip("fd00:30::fe")), Some(idx), RTPROT_BOOT)
        );
        assert!(v6.iter().all(|r| r.dst.is_ipv6()));

        for r in [&via, &on_link, &default, &v6_route] {
            nl.del_route(r).unwrap();
        }
        let v4 = nl.routes(IpFamily::V4).unwrap();
        assert_eq!(v4.len(), 1, "{v4:?}");
        assert!(!nl
            .routes(IpFamily::V6)
            .unwrap()
            .iter()
            .any(|r| r.dst == ip("fd00:40::")));
        for r in [&on_link, &v6_route] {
            let err = nl.del_route(r).unwrap_err();
            assert!(is_not_found(&err), "{err}");
        }
    }
}
