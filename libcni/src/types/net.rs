//! `IpPrefix`: an address with its prefix length ("10.1.0.5/24"), the one
//! type the suite uses for result addresses, routes, subnets and ranges.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP address with a prefix length. The address keeps its host bits:
/// `10.1.0.5/24` is the address 10.1.0.5 in the network 10.1.0.0/24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// `None` if `len` exceeds the family's width.
    pub fn new(addr: IpAddr, len: u8) -> Option<IpPrefix> {
        (len <= max_len(addr)).then_some(IpPrefix { addr, len })
    }

    /// The host route for `addr` (/32 or /128).
    pub fn host(addr: IpAddr) -> IpPrefix {
        IpPrefix {
            addr,
            len: max_len(addr),
        }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The family of the address.
    pub fn family(&self) -> crate::IpFamily {
        crate::IpFamily::of(&self.addr)
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> IpAddr {
        from_bits(self.addr, to_bits(self.addr) & self.mask_bits())
    }

    /// This prefix with its host bits cleared: `10.1.0.5/24` gives `10.1.0.0/24`.
    pub fn truncate(&self) -> IpPrefix {
        IpPrefix {
            addr: self.network(),
            len: self.len,
        }
    }

    /// True if the address has host bits set (it is not a network address).
    pub fn has_host_bits(&self) -> bool {
        self.network() != self.addr
    }

    /// The last address of the network (broadcast for IPv4).
    pub fn last(&self) -> IpAddr {
        from_bits(
            self.addr,
            to_bits(self.addr) | !self.mask_bits() & width_mask(self.addr),
        )
    }

    /// True if `ip` (of the same family) lies inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4()
            && to_bits(ip) & self.mask_bits() == to_bits(self.addr) & self.mask_bits()
    }

    /// True if the two networks share any address.
    pub fn overlaps(&self, other: &IpPrefix) -> bool {
        self.contains(other.network()) || other.contains(self.network())
    }

    fn mask_bits(&self) -> u128 {
        let width = u32::from(max_len(self.addr));
        let host = width - u32::from(self.len);
        let all = width_mask(self.addr);
        if host >= 128 {
            0
        } else {
            (all >> host) << host & all
        }
    }
}

fn max_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

fn width_mask(addr: IpAddr) -> u128 {
    if addr.is_ipv4() {
        u128::from(u32::MAX)
    } else {
        u128::MAX
    }
}

/// The address as an integer (IPv4 in the low 32 bits).
pub fn to_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The integer `bits` as an address of the same family as `like`.
pub fn from_bits(like: IpAddr, bits: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(bits as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Why a string is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadCidr(pub String);

impl fmt::Display for BadCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid CIDR address: {}", self.0)
    }
}

impl std::error::Error for BadCidr {}

impl FromStr for IpPrefix {
    type Err = BadCidr;

    /// Strict CIDR, as Go's `net.ParseCIDR`: the prefix length is required.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadCidr(s.to_string());
        let (a, l) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let len: u8 = l.parse().map_err(|_| bad())?;
        IpPrefix::new(addr, len).ok_or_else(bad)
    }
}

impl Serialize for IpPrefix {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for IpPrefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> IpPrefix {
        s.parse().unwrap()
    }

    #[test]
    fn parses_strict_cidr() {
        assert_eq!(p("10.1.0.5/24").to_string(), "10.1.0.5/24");
        assert_eq!(p("fd00::1/64").to_string(), "fd00::1/64");
        for bad in [
            "10.1.0.5",
            "10.1.0.5/33",
            "fd00::/129",
            "10.1.0.5/",
            "10.1.0/24",
            "x/24",
            "10.0.0.0/+8",
            "",
        ] {
            assert!(bad.parse::<IpPrefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn network_arithmetic() {
        assert_eq!(p("10.1.0.5/24").network().to_string(), "10.1.0.0");
        assert_eq!(p("10.1.0.5/24").last().to_string(), "10.1.0.255");
        assert_eq!(p("10.1.0.5/0").network().to_string(), "0.0.0.0");
        assert_eq!(p("10.1.0.5/32").last().to_string(), "10.1.0.5");
        assert_eq!(p("fd00::5/64").network().to_string(), "fd00::");
        assert_eq!(
            p("fd00::5/64").last().to_string(),
            "fd00::ffff:ffff:ffff:ffff"
        );
        assert_eq!(p("::1/0").network().to_string(), "::");
        assert!(p("10.1.0.5/24").has_host_bits());
        assert!(!p("10.1.0.0/24").has_host_bits());
        assert_eq!(p("10.1.0.5/24").truncate(), p("10.1.0.0/24"));
    }

    #[test]
    fn containment_and_overlap() {
        let n = p("10.1.0.0/16");
        assert!(n.contains("10.1.200.3".parse().unwrap()));
        assert!(!n.contains("10.2.0.1".parse().unwrap()));
        assert!(!n.contains("::1".parse().unwrap()));
        assert!(n.overlaps(&p("10.1.4.0/24")));
        assert!(p("10.1.4.0/24").overlaps(&n));
        assert!(!n.overlaps(&p("10.2.0.0/16")));
        assert!(!n.overlaps(&p("fd00::/8")));
    }

    #[test]
    fn serde_round_trip() {
        let v: IpPrefix = crate::gojson::from_slice(b"\"192.168.1.7/30\"").unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"192.168.1.7/30\"");
        assert!(crate::gojson::from_slice::<IpPrefix>(b"\"192.168.1.7\"").is_err());
    }
}
