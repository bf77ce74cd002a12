//! The portmap config: parsed and validated before anything is touched.
//! Every rejection is code 7 naming the key and the value.

use std::collections::HashSet;
use std::net::IpAddr;

use crate::nft;
use crate::spec::{conditions_are_iptables, Conditions, PortMapSpec, PortMapping, Protocol};
use libcni::netfilter::{Backend, Owner};
use libcni::skel::CmdArgs;
use libcni::types::IpPrefix;
use libcni::{Error, IpFamily, Result};
use serde::Deserialize;

/// The Go plugin's default mark bit (0x2000).
const DEFAULT_MARK_BIT: u8 = 13;

#[derive(Debug, Deserialize)]
struct RawConf {
    #[serde(default)]
    snat: Option<bool>,
    #[serde(rename = "masqAll", default)]
    masq_all: bool,
    #[serde(rename = "markMasqBit", default)]
    mark_masq_bit: Option<i64>,
    #[serde(rename = "externalSetMarkChain", default)]
    external_set_mark_chain: Option<String>,
    #[serde(rename = "conditionsV4", default)]
    conditions_v4: Option<Vec<String>>,
    #[serde(rename = "conditionsV6", default)]
    conditions_v6: Option<Vec<String>>,
    #[serde(default)]
    backend: Option<String>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: RawRuntimeConfig,
}

#[derive(Debug, Default, Deserialize)]
struct RawRuntimeConfig {
    #[serde(rename = "portMappings", default)]
    port_mappings: Vec<RawMapping>,
}

#[derive(Debug, Deserialize)]
struct RawMapping {
    #[serde(rename = "hostPort")]
    host_port: i64,
    #[serde(rename = "containerPort")]
    container_port: i64,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(rename = "hostIP", default)]
    host_ip: Option<String>,
}

/// The validated config.
#[derive(Debug, Clone)]
pub struct PortMapConf {
    pub mappings: Vec<PortMapping>,
    snat: bool,
    masq_all: bool,
    mark_bit: u8,
    external_set_mark_chain: Option<String>,
    conditions: Conditions,
    backend: Backend,
}

fn port(key: String, v: i64) -> Result<u16> {
    u16::try_from(v)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| Error::config(key, format!("{v} is not a port (1-65535)")))
}

/// `runtimeConfig.portMappings`, each validated (code 7 naming
/// `runtimeConfig.portMappings[i].<key>`); a host port mapped twice (same
/// protocol and host address) is refused.
fn mappings(raw: &[RawMapping]) -> Result<Vec<PortMapping>> {
    let mut mappings = Vec::new();
    let mut seen = HashSet::new();
    for (i, m) in raw.iter().enumerate() {
        let key = |k: &str| format!("runtimeConfig.portMappings[{i}].{k}");
        let host_port = port(key("hostPort"), m.host_port)?;
        let container_port = port(key("containerPort"), m.container_port)?;
        let proto_text = m.protocol.as_deref().unwrap_or("tcp");
        let protocol = Protocol::parse(proto_text).ok_or_else(|| {
            Error::config(
                key("protocol"),
                format!("{proto_text:?} is not a protocol (tcp, udp or sctp)"),
            )
        })?;
        let host_ip = match m.host_ip.as_deref() {
            None | Some("") => None,
            Some(s) => Some(s.parse::<IpAddr>().map_err(|_| {
                Error::config(key("hostIP"), format!("{s:?} is not an IP address"))
            })?),
        };
        let mapping = PortMapping {
            host_port,
            container_port,
            protocol,
            host_ip,
        };
        if !seen.insert((protocol, host_port, host_ip)) {
            return Err(Error::config(
                key("hostPort"),
                format!("{mapping} maps a host port that an earlier entry already maps"),
            ));
        }
        mappings.push(mapping);
    }
    Ok(mappings)
}

/// The backend: `backend` if named; else the one an option or the
/// conditions' syntax needs; else the Go plugins' default. An option or a
/// condition the backend cannot carry is refused, naming it.
fn backend(raw: &RawConf, conditions: &Conditions) -> Result<Backend> {
    let cond_syntax = [
        ("conditionsV4", conditions_are_iptables(&conditions.v4)),
        ("conditionsV6", conditions_are_iptables(&conditions.v6)),
    ];
    // `markMasqBit` is accepted with either backend, as the Go plugin
    // accepts it: the nftables backend has no mark to set and ignores it.
    let iptables_only: Option<&str> = if raw.external_set_mark_chain.is_some() {
        Some("externalSetMarkChain")
    } else {
        cond_syntax
            .iter()
            .find(|(_, s)| *s == Some(true))
            .map(|(k, _)| *k)
    };
    let nft_only = cond_syntax
        .iter()
        .find(|(_, s)| *s == Some(false))
        .map(|(k, _)| *k);
    let backend = match raw.backend.as_deref() {
        Some(b) => Backend::parse("backend", b)?,
        None => match (iptables_only, nft_only) {
            (Some(_), None) => Backend::Iptables,
            (None, Some(_)) => Backend::Nftables,
            (Some(a), Some(b)) => {
                return Err(Error::config(
                    b,
                    format!("is in nftables syntax, but {a} needs the iptables backend"),
                ))
            }
            (None, None) => libcni::netfilter::default_backend(),
        },
    };
    match backend {
        Backend::Nftables => {
            if let Some(k) = iptables_only {
                return Err(Error::config(
                    k,
                    "is an iptables option (or iptables syntax), but the backend is nftables",
                ));
            }
            nft::parse_conditions("conditionsV4", &conditions.v4, IpFamily::V4)?;
            nft::parse_conditions("conditionsV6", &conditions.v6, IpFamily::V6)?;
        }
        Backend::Iptables => {
            if let Some(k) = nft_only {
                return Err(Error::config(
                    k,
                    "is in nftables syntax, but the backend is iptables",
                ));
            }
        }
    }
    Ok(backend)
}

impl PortMapConf {
    pub fn parse(args: &CmdArgs) -> Result<PortMapConf> {
        let raw: RawConf = args.config()?;
        let mappings = mappings(&raw.runtime_config.port_mappings)?;
        let mark_bit = match raw.mark_masq_bit {
            None => DEFAULT_MARK_BIT,
            Some(b) => u8::try_from(b).ok().filter(|b| *b <= 31).ok_or_else(|| {
                Error::config("markMasqBit", format!("{b} is not a bit number (0-31)"))
            })?,
        };
        if raw.mark_masq_bit.is_some() && raw.external_set_mark_chain.is_some() {
            return Err(Error::config(
                "externalSetMarkChain",
                "cannot be combined with markMasqBit",
            ));
        }
        if let Some(c) = &raw.external_set_mark_chain {
            let ok = !c.is_empty()
                && c.len() <= 28
                && c.chars()
                    .all(|ch| ch.is_ascii_graphic() && ch != '"' && ch != '\'');
            if !ok {
                return Err(Error::config(
                    "externalSetMarkChain",
                    format!("{c:?} is not an iptables chain name"),
                ));
            }
        }
        let conditions = Conditions {
            v4: raw.conditions_v4.clone().unwrap_or_default(),
            v6: raw.conditions_v6.clone().unwrap_or_default(),
        };
        let backend = backend(&raw, &conditions)?;
        Ok(PortMapConf {
            mappings,
            snat: raw.snat.unwrap_or(true),
            masq_all: raw.masq_all,
            mark_bit,
            external_set_mark_chain: raw.external_set_mark_chain,
            conditions,
            backend,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Refuses a `hostIP` of a family the container has no address of
    /// (the Go plugin silently skips it).
    pub fn check_families(&self, v4: Option<IpPrefix>, v6: Option<IpPrefix>) -> Result<()> {
        if v4.is_none() && v6.is_none() {
            return Err(Error::config(
                "prevResult",
                "has no address on the container interface to forward ports to",
            ));
        }
        for (i, m) in self.mappings.iter().enumerate() {
            if let Some(ip) = m.host_ip {
                let have = if ip.is_ipv6() {
                    v6.is_some()
                } else {
                    v4.is_some()
                };
                if !have {
                    return Err(Error::config(
                        format!("runtimeConfig.portMappings[{i}].hostIP"),
                        format!(
                            "{ip} is an IPv{} address, but the container has none of that family",
                            if ip.is_ipv6() { 6 } else { 4 }
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn spec(&self, args: &CmdArgs, v4: Option<IpPrefix>, v6: Option<IpPrefix>) -> PortMapSpec {
        PortMapSpec {
            owner: Owner::new(&args.conf.name, &args.container_id),
            mappings: self.mappings.clone(),
            container_v4: v4,
            container_v6: v6,
            snat: self.snat,
            masq_all: self.masq_all,
            conditions: self.conditions.clone(),
            mark_bit: self.mark_bit,
            external_set_mark_chain: self.external_set_mark_chain.clone(),
        }
    }
}
