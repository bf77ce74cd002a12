//! The validated host port mappings of one attachment, as both backends
//! write them: [`PortMapping`], the conditions of each family and the
//! whole [`PortMapSpec`].

use std::fmt;
use std::net::IpAddr;

use libcni::netfilter::Owner;
use libcni::types::IpPrefix;
use libcni::{IpFamily, PerFamily};

pub use libcni::netfilter::Protocol;

/// One validated port mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    /// `None`: every local address of both families. An unspecified address
    /// (`0.0.0.0`, `::`) means every local address of that family only.
    pub host_ip: Option<IpAddr>,
}

impl PortMapping {
    /// Whether the mapping applies to the IPv6 (or IPv4) container address.
    pub fn applies_to(&self, family: IpFamily) -> bool {
        self.host_ip.is_none_or(|ip| IpFamily::of(&ip) == family)
    }

    /// The destination address to match, if the mapping names one.
    pub fn dst(&self) -> Option<IpAddr> {
        self.host_ip.filter(|ip| !ip.is_unspecified())
    }
}

impl fmt::Display for PortMapping {
    /// `tcp 8080 -> 80`, `udp [fd00::1]:53 -> 5353`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.protocol.as_str();
        match self.host_ip {
            Some(IpAddr::V6(ip)) => write!(f, "{p} [{ip}]:{}", self.host_port)?,
            Some(ip) => write!(f, "{p} {ip}:{}", self.host_port)?,
            None => write!(f, "{p} {}", self.host_port)?,
        }
        write!(f, " -> {}", self.container_port)
    }
}

/// Extra match conditions on the DNAT entry, per family (the config's
/// `conditionsV4` / `conditionsV6`), in the syntax of the backend.
pub type Conditions = PerFamily<Vec<String>>;

/// Which syntax a condition list is written in: the Go plugin's rule (a
/// first token starting with `-` or `!` is iptables syntax).
pub fn conditions_are_iptables(conds: &[String]) -> Option<bool> {
    let first = conds.iter().flat_map(|c| c.split_whitespace()).next()?;
    Some(first.starts_with('-') || first.starts_with('!'))
}

/// Everything one container's host ports need.
#[derive(Debug, Clone)]
pub struct PortMapSpec {
    pub owner: Owner,
    pub mappings: Vec<PortMapping>,
    /// The container's first IPv4 and IPv6 address (with prefix).
    pub container_v4: Option<IpPrefix>,
    pub container_v6: Option<IpPrefix>,
    /// Masquerade hairpin and localhost traffic (default true).
    pub snat: bool,
    /// Masquerade every connection to the mapped ports.
    pub masq_all: bool,
    pub conditions: Conditions,
    /// iptables only: the mark bit of `CNI-HOSTPORT-SETMARK` (default 13).
    pub mark_bit: u8,
    /// iptables only: a chain of the user that sets the masquerade mark.
    pub external_set_mark_chain: Option<String>,
}

impl PortMapSpec {
    pub(crate) fn container(&self, family: IpFamily) -> Option<IpPrefix> {
        match family {
            IpFamily::V4 => self.container_v4,
            IpFamily::V6 => self.container_v6,
        }
    }

    /// The mappings of one family, when the container has an address there.
    pub(crate) fn family_mappings(&self, family: IpFamily) -> Vec<PortMapping> {
        if self.container(family).is_none() {
            return Vec::new();
        }
        self.mappings
            .iter()
            .filter(|m| m.applies_to(family))
            .copied()
            .collect()
    }
}

/// A host port whose mapping a teardown removed, for the conntrack flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovedPort {
    /// The family of the mapping.
    pub family: IpFamily,
    /// The IP protocol number (`IPPROTO_TCP`, ...).
    pub protocol: u8,
    pub port: u16,
}
