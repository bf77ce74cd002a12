//! What a DHCPACK gives: the address and its prefix (option 1), the lease's
//! times (51, 58, 59), the server (54), and the CNI result built from it as
//! the reference builds it: routes from options 121, or else 33 and the
//! router (3) as the default route; DNS from options 6, 15 and 119.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use dhcproto::v4::{DhcpOption, Message, OptionCode};
use dhcproto::Decodable;
use libcni::types::{CniResult, Dns, IpConfig, IpPrefix, Route};

/// Why a DHCP message cannot be used: it does not decode, or it is a
/// DHCPACK that gives no lease one can configure.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// An option whose length is not the one its code has.
    #[error("malformed DHCP message: option {code} of {len} bytes")]
    OptionLength { code: u8, len: u8 },
    /// What the decoder said.
    #[error("malformed DHCP message: {0}")]
    Undecodable(String),
    /// The decoder panicked on it (a bug of its).
    #[error("malformed DHCP message (the decoder failed on it)")]
    DecoderFailed,
    /// `yiaddr` is no address a host can take.
    #[error("the DHCPACK gives no usable address ({0})")]
    NoUsableAddress(Ipv4Addr),
    /// No Subnet Mask option.
    #[error("DHCP option Subnet Mask not found in DHCPACK")]
    NoSubnetMask,
    /// A mask with holes.
    #[error("the DHCPACK's subnet mask {0} is not contiguous")]
    MaskNotContiguous(Ipv4Addr),
    /// No Server Identifier option, and no source address to take.
    #[error("the DHCPACK has no server identifier")]
    NoServerIdentifier,
}

/// Lease time used when an ACK has none (RFC 2131 requires one; the
/// reference assumes an hour).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(3600);

/// `RT_SCOPE_LINK`: a classless route without a router is on-link.
const SCOPE_LINK: u8 = 253;

/// The binding an ACK describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub address: Ipv4Addr,
    pub prefix_len: u8,
    /// Option 54; the packet's source when the server left it out.
    pub server: Ipv4Addr,
    /// `None`: an infinite lease (0xffffffff).
    pub lease: Option<Duration>,
    /// Renewal (T1) and rebinding (T2) times, from the ACK or RFC 2131's
    /// defaults (1/2 and 7/8 of the lease).
    pub t1: Option<Duration>,
    pub t2: Option<Duration>,
}

impl Binding {
    /// The address with its prefix, as the result and the interface carry it.
    pub fn prefix(&self) -> IpPrefix {
        IpPrefix::new(IpAddr::V4(self.address), self.prefix_len)
            .unwrap_or(IpPrefix::host(IpAddr::V4(self.address)))
    }
}

/// Where the options start: the fixed header (236 bytes) and the magic
/// cookie (4).
const OPTIONS_AT: usize = 240;

/// Options whose length `dhcproto` takes for granted (a `debug_assert!`,
/// or a subtraction that overflows below it): rapid commit (80) is empty,
/// the client FQDN (81) has 3 bytes of flags, the client network interface
/// (94) is 3 bytes, a bulk lease query status (151) at least its code, the
/// bulk lease query times (152-155) 4 bytes.
fn length_is_sane(code: u8, len: usize) -> bool {
    match code {
        80 => len == 0,
        81 => len >= 3,
        94 => len == 3,
        151 => len >= 1,
        152..=155 => len == 4,
        _ => true,
    }
}

/// Decodes a DHCP message (the bytes after the UDP header). Anyone on the
/// LAN can send one, so an option with a length `dhcproto` does not
/// expect makes the message malformed rather than reach the decoder, and
/// a panic in the decoder (a bug of its) is a malformed message too.
pub fn decode(bytes: &[u8]) -> Result<Message, MessageError> {
    let mut at = OPTIONS_AT;
    while let Some(&code) = bytes.get(at) {
        match code {
            0 => at += 1,
            255 => break,
            _ => {
                let Some(&len) = bytes.get(at + 1) else { break };
                if !length_is_sane(code, usize::from(len)) {
                    return Err(MessageError::OptionLength { code, len });
                }
                at += 2 + usize::from(len);
            }
        }
    }
    match std::panic::catch_unwind(|| Message::from_bytes(bytes)) {
        Ok(Ok(m)) => Ok(m),
        Ok(Err(e)) => Err(MessageError::Undecodable(e.to_string())),
        Err(_) => Err(MessageError::DecoderFailed),
    }
}

/// The binding of `ack`. `source` is the address the ACK came from.
pub fn binding(ack: &Message, source: Option<Ipv4Addr>) -> Result<Binding, MessageError> {
    let address = ack.yiaddr();
    if address.is_unspecified() || address.is_broadcast() || address.is_multicast() {
        return Err(MessageError::NoUsableAddress(address));
    }
    let mask = match ack.opts().get(OptionCode::SubnetMask) {
        Some(DhcpOption::SubnetMask(m)) => *m,
        _ => return Err(MessageError::NoSubnetMask),
    };
    let bits = u32::from(mask);
    if bits.leading_ones() + bits.trailing_zeros() != 32 {
        return Err(MessageError::MaskNotContiguous(mask));
    }
    let prefix_len = bits.leading_ones() as u8;
    let server = match ack.opts().get(OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(s)) => *s,
        _ => source
            .filter(|s| !s.is_unspecified())
            .ok_or(MessageError::NoServerIdentifier)?,
    };
    let secs = |code| match ack.opts().get(code) {
        Some(
            DhcpOption::AddressLeaseTime(s) | DhcpOption::Renewal(s) | DhcpOption::Rebinding(s),
        ) => Some(*s),
        _ => None,
    };
    let (lease, t1, t2) = match secs(OptionCode::AddressLeaseTime) {
        Some(u32::MAX) => (None, None, None),
        given => {
            let lease = given
                .map(|s| Duration::from_secs(s.into()))
                .unwrap_or(DEFAULT_LEASE);
            let t2 = secs(OptionCode::Rebinding)
                .map(|s| Duration::from_secs(s.into()))
                .filter(|t| *t <= lease)
                .unwrap_or(lease * 7 / 8);
            let t1 = secs(OptionCode::Renewal)
                .map(|s| Duration::from_secs(s.into()))
                .filter(|t| *t <= t2)
                .unwrap_or((lease / 2).min(t2));
            (Some(lease), Some(t1), Some(t2))
        }
    };
    Ok(Binding {
        address,
        prefix_len,
        server,
        lease,
        t1,
        t2,
    })
}

/// The CNI result of `ack` (whose binding is `b`): one address with the
/// first router as its gateway, the routes and the DNS; `priority` is the
/// metric of every route.
pub fn result(ack: &Message, b: &Binding, priority: Option<u32>) -> CniResult {
    let opts = ack.opts();
    let gateway = match opts.get(OptionCode::Router) {
        Some(DhcpOption::Router(r)) => r.first().copied().filter(|g| !g.is_unspecified()),
        _ => None,
    };
    let mut routes = Vec::new();
    // RFC 3442: with classless routes, the static routes and the router
    // are not routes.
    let classless = match opts.get(OptionCode::ClasslessStaticRoute) {
        Some(DhcpOption::ClasslessStaticRoute(r)) if !r.is_empty() => Some(r),
        _ => None,
    };
    if let Some(list) = classless {
        for (net, gw) in list {
            let Some(dst) = IpPrefix::new(IpAddr::V4(net.network()), net.prefix_len()) else {
                continue;
            };
            let mut r = Route::new(dst, None);
            if gw.is_unspecified() {
                r.scope = Some(SCOPE_LINK);
            } else {
                r.gw = Some(IpAddr::V4(*gw));
            }
            routes.push(r);
        }
    } else {
        if let Some(DhcpOption::StaticRoutingTable(list)) = opts.get(OptionCode::StaticRoutingTable)
        {
            for (dst, gw) in list {
                if let Some(len) = classful_len(*dst) {
                    if let Some(p) = IpPrefix::new(IpAddr::V4(*dst), len) {
                        routes.push(Route::new(p.truncate(), Some(IpAddr::V4(*gw))));
                    }
                }
            }
        }
        if let Some(gw) = gateway {
            let any = IpPrefix::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0).expect("0.0.0.0/0");
            routes.push(Route::new(any, Some(IpAddr::V4(gw))));
        }
    }
    for r in &mut routes {
        r.priority = priority;
    }
    let mut dns = Dns::default();
    if let Some(DhcpOption::DomainNameServer(servers)) = opts.get(OptionCode::DomainNameServer) {
        dns.nameservers = servers.iter().map(|s| s.to_string()).collect();
    }
    if let Some(DhcpOption::DomainName(d)) = opts.get(OptionCode::DomainName) {
        dns.domain = d.trim_end_matches(['.', '\0']).to_string();
    }
    if let Some(DhcpOption::DomainSearch(names)) = opts.get(OptionCode::DomainSearch) {
        dns.search = names
            .iter()
            .map(|n| n.to_utf8().trim_end_matches('.').to_string())
            .filter(|n| !n.is_empty())
            .collect();
    }
    CniResult {
        interfaces: Vec::new(),
        ips: vec![IpConfig {
            address: b.prefix(),
            gateway: gateway.map(IpAddr::V4),
            interface: None,
        }],
        routes,
        dns,
    }
}

/// The classful prefix length of a static route's destination (option 33
/// has no masks): class A /8, B /16, C /24; none for D and E.
fn classful_len(dst: Ipv4Addr) -> Option<u8> {
    match dst.octets()[0] {
        0..=127 => Some(8),
        128..=191 => Some(16),
        192..=223 => Some(24),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::v4::{MessageType, Opcode};
    use dhcproto::Encodable;

    fn ack(extra: Vec<DhcpOption>) -> Message {
        let mut m = Message::new_with_id(
            7,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::new(10, 77, 0, 57),
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &[2, 0, 0, 0, 0, 1],
        );
        m.set_opcode(Opcode::BootReply);
        let o = m.opts_mut();
        o.insert(DhcpOption::MessageType(MessageType::Ack));
        o.insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 77, 0, 1)));
        o.insert(DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)));
        for x in extra {
            o.insert(x);
        }
        // Through the wire format, as the daemon sees it.
        decode(&m.to_vec().unwrap()).unwrap()
    }

    #[test]
    fn binding_times_and_defaults() {
        let a = ack(vec![DhcpOption::AddressLeaseTime(120)]);
        let b = binding(&a, None).unwrap();
        assert_eq!(b.prefix().to_string(), "10.77.0.57/24");
        assert_eq!(b.server, Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(b.lease, Some(Duration::from_secs(120)));
        assert_eq!(b.t1, Some(Duration::from_secs(60)));
        assert_eq!(b.t2, Some(Duration::from_secs(105)));
        let a = ack(vec![
            DhcpOption::AddressLeaseTime(100),
            DhcpOption::Renewal(10),
            DhcpOption::Rebinding(20),
        ]);
        let b = binding(&a, None).unwrap();
        assert_eq!(
            (b.t1, b.t2),
            (Some(Duration::from_secs(10)), Some(Duration::from_secs(20)))
        );
        // T2 beyond the lease, T1 beyond T2: the defaults.
        let a = ack(vec![
            DhcpOption::AddressLeaseTime(100),
            DhcpOption::Renewal(99),
            DhcpOption::Rebinding(200),
        ]);
        let b = binding(&a, None).unwrap();
        assert_eq!(
            (b.t1, b.t2),
            (
                Some(Duration::from_secs(50)),
                Some(Duration::from_millis(87500))
            )
        );
        let b = binding(&ack(vec![DhcpOption::AddressLeaseTime(u32::MAX)]), None).unwrap();
        assert_eq!((b.lease, b.t1, b.t2), (None, None, None));
        let b = binding(&ack(vec![]), None).unwrap();
        assert_eq!(b.lease, Some(DEFAULT_LEASE));
    }

    #[test]
    fn options_of_an_unexpected_length_are_malformed() {
        let good = ack(vec![]).to_vec().unwrap();
        assert!(decode(&good).is_ok());
        for (code, len) in [(80u8, 1u8), (81, 2), (94, 4), (151, 0), (152, 3)] {
            // The option goes before the end marker.
            let mut bad = good.clone();
            let end = bad.len() - 1;
            assert_eq!(bad[end], 255);
            let mut opt = vec![code, len];
            opt.extend(std::iter::repeat_n(7u8, len.into()));
            bad.splice(end..end, opt);
            let e = decode(&bad).unwrap_err();
            assert!(
                matches!(e, MessageError::OptionLength { code: c, len: l } if (c, l) == (code, len)),
                "{e}"
            );
            assert!(
                e.to_string()
                    .contains(&format!("option {code} of {len} bytes")),
                "{e}"
            );
        }
        assert!(decode(&good[..100]).is_err());
    }

    #[test]
    fn binding_needs_a_mask() {
        let mut a = ack(vec![]);
        a.opts_mut().remove(OptionCode::SubnetMask);
        let e = binding(&a, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "DHCP option Subnet Mask not found in DHCPACK"
        );
        let a = ack(vec![DhcpOption::SubnetMask(Ipv4Addr::new(255, 0, 255, 0))]);
        let e = binding(&a, None).unwrap_err();
        assert!(matches!(e, MessageError::MaskNotContiguous(_)), "{e}");
        let mut a = ack(vec![]);
        a.opts_mut().remove(OptionCode::ServerIdentifier);
        assert!(binding(&a, None).is_err());
        let b = binding(&a, Some(Ipv4Addr::new(10, 77, 0, 2))).unwrap();
        assert_eq!(b.server, Ipv4Addr::new(10, 77, 0, 2));
    }

    fn result_json(a: &Message, priority: Option<u32>) -> serde_json::Value {
        let b = binding(a, None).unwrap();
        result(a, &b, priority)
            .to_json(libcni::version::Version::V1_1_0)
            .unwrap()
    }

    #[test]
    fn router_static_routes_and_dns() {
        let a = ack(vec![
            DhcpOption::Router(vec![
                Ipv4Addr::new(10, 77, 0, 1),
                Ipv4Addr::new(10, 77, 0, 2),
            ]),
            DhcpOption::StaticRoutingTable(vec![
                (Ipv4Addr::new(172, 16, 5, 0), Ipv4Addr::new(10, 77, 0, 9)),
                (Ipv4Addr::new(230, 0, 0, 0), Ipv4Addr::new(10, 77, 0, 9)),
            ]),
            DhcpOption::DomainNameServer(vec![Ipv4Addr::new(10, 77, 0, 53)]),
            DhcpOption::DomainName("lan.test".into()),
            DhcpOption::DomainSearch(vec![
                "a.lan.test".parse().unwrap(),
                "b.test".parse().unwrap(),
            ]),
        ]);
        let v = result_json(&a, Some(50));
        assert_eq!(
            v,
            serde_json::json!({
                "cniVersion": "1.1.0",
                "ips": [{"address": "10.77.0.57/24", "gateway": "10.77.0.1"}],
                "routes": [
                    {"dst": "172.16.0.0/16", "gw": "10.77.0.9", "priority": 50},
                    {"dst": "0.0.0.0/0", "gw": "10.77.0.1", "priority": 50}
                ],
                "dns": {"nameservers": ["10.77.0.53"], "domain": "lan.test",
                        "search": ["a.lan.test", "b.test"]}
            })
        );
    }

    #[test]
    fn classless_routes_replace_router_and_static() {
        let a = ack(vec![
            DhcpOption::Router(vec![Ipv4Addr::new(10, 77, 0, 1)]),
            DhcpOption::StaticRoutingTable(vec![(
                Ipv4Addr::new(172, 16, 0, 0),
                Ipv4Addr::new(10, 77, 0, 9),
            )]),
            DhcpOption::ClasslessStaticRoute(vec![
                ("0.0.0.0/0".parse().unwrap(), Ipv4Addr::new(10, 77, 0, 254)),
                ("192.0.2.0/24".parse().unwrap(), Ipv4Addr::UNSPECIFIED),
            ]),
        ]);
        let v = result_json(&a, None);
        assert_eq!(
            v["routes"],
            serde_json::json!([
                {"dst": "0.0.0.0/0", "gw": "10.77.0.254"},
                {"dst": "192.0.2.0/24", "scope": 253}
            ])
        );
        assert_eq!(v["ips"][0]["gateway"], "10.77.0.1");
    }
}
