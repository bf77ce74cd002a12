//! The IP address family: the one type every feature that works per
//! family (routes, addresses, netfilter tables, conntrack, sysctls) takes,
//! in place of a `v6: bool`; and [`PerFamily`], a value for each.

use std::net::IpAddr;

/// An IP address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    /// IPv4 (`AF_INET`).
    V4,
    /// IPv6 (`AF_INET6`).
    V6,
}

impl IpFamily {
    /// Both families, IPv4 first: the order every per-family pass runs in.
    pub const BOTH: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

    /// The family of `ip`.
    pub fn of(ip: &IpAddr) -> IpFamily {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    /// Whether `ip` is of this family.
    pub fn holds(self, ip: &IpAddr) -> bool {
        IpFamily::of(ip) == self
    }

    /// The length of an address, in bytes.
    pub fn address_len(self) -> usize {
        match self {
            IpFamily::V4 => 4,
            IpFamily::V6 => 16,
        }
    }

    /// The longest prefix (a host's), in bits.
    pub fn max_prefix(self) -> u8 {
        match self {
            IpFamily::V4 => 32,
            IpFamily::V6 => 128,
        }
    }

    /// `NFPROTO_IPV4` / `NFPROTO_IPV6` (the same values as `AF_INET` and
    /// `AF_INET6`).
    pub fn nfproto(self) -> u8 {
        match self {
            IpFamily::V4 => 2,
            IpFamily::V6 => 10,
        }
    }

    /// "IPv4" or "IPv6", for messages.
    pub fn name(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }
}

/// One value for each family, looked up by [`IpFamily`] rather than by
/// an index or a flag.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerFamily<T> {
    pub v4: T,
    pub v6: T,
}

impl<T> PerFamily<T> {
    /// The value of `family`.
    pub fn of(&self, family: IpFamily) -> &T {
        match family {
            IpFamily::V4 => &self.v4,
            IpFamily::V6 => &self.v6,
        }
    }

    /// Both values made by `f`, IPv4 first, stopping at the first error.
    pub fn try_from_fn<E>(mut f: impl FnMut(IpFamily) -> Result<T, E>) -> Result<Self, E> {
        Ok(PerFamily {
            v4: f(IpFamily::V4)?,
            v6: f(IpFamily::V6)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_has_its_family_and_width() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        let v6: IpAddr = "fd00::1".parse().unwrap();
        for (ip, family, len, prefix) in [(v4, IpFamily::V4, 4, 32), (v6, IpFamily::V6, 16, 128)] {
            assert_eq!(IpFamily::of(&ip), family);
            assert!(family.holds(&ip));
            assert_eq!(family.address_len(), len);
            assert_eq!(family.max_prefix(), prefix);
        }
        assert_eq!(IpFamily::BOTH, [IpFamily::V4, IpFamily::V6]);
    }
}
