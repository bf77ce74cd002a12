//! The static IPAM config: `ipam.addresses` (`address`, `gateway`),
//! `ipam.routes`, `ipam.dns`, and the addresses a runtime gives: `CNI_ARGS`
//! `IP=` and `GATEWAY=`, `args.cni.ips`, `runtimeConfig.ips` (capability
//! `ips`). Parsed with Go's rules into typed, validated values; every
//! rejection is code 7 naming the key and the value (code 4 for
//! `CNI_ARGS`).
//!
//! Precedence, as the Go reference: the config's addresses, then those of
//! `CNI_ARGS` `IP=` appended (each given the `GATEWAY=` address that lies
//! in its subnet); a non-empty `args.cni.ips` replaces all of them, and a
//! non-empty `runtimeConfig.ips` replaces that in turn.

use libcni::args::CniArgs;
use libcni::gojson;
use libcni::skel::CmdArgs;
use libcni::types::{route_conf, Dns, IpPrefix, Route};
use libcni::{Error, Version};
use serde::Deserialize;
use serde_json::Value;
use std::net::IpAddr;

/// The `CNI_ARGS` keys static reads.
pub const KNOWN_ARGS: &[&str] = &["IP", "GATEWAY"];

/// Where an address came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `CNI_ARGS` `IP=`.
    CniArgs,
    /// A key of the config: `ipam.addresses[0]`, `args.cni.ips[1]`,
    /// `runtimeConfig.ips[0]`.
    Key(String),
}

impl Source {
    /// An error about the address from here: code 4 for `CNI_ARGS`, 7
    /// naming the key otherwise.
    fn error(&self, msg: String) -> Error {
        match self {
            Source::CniArgs => Error::InvalidEnv(format!("CNI_ARGS IP: {msg}")),
            Source::Key(k) => Error::config(k.clone(), msg),
        }
    }

    fn describe(&self) -> String {
        match self {
            Source::CniArgs => "CNI_ARGS IP".into(),
            Source::Key(k) => k.clone(),
        }
    }
}

/// One address of the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticAddress {
    /// The address with its prefix length (host bits kept).
    pub address: IpPrefix,
    pub gateway: Option<IpAddr>,
    pub source: Source,
}

/// The whole validated config of an ADD, CHECK or STATUS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticConfig {
    /// In the order of the result.
    pub addresses: Vec<StaticAddress>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

impl StaticConfig {
    pub fn from_args(args: &CmdArgs) -> Result<StaticConfig, Error> {
        let env = args.cni_args()?;
        env.check_known(KNOWN_ARGS)?;
        let raw: RawNet = args.config()?;
        StaticConfig::build(raw, &env, args.version)
    }

    fn build(raw: RawNet, env: &CniArgs, version: Version) -> Result<StaticConfig, Error> {
        let ipam = raw.ipam.ok_or_else(|| {
            Error::config(
                "ipam",
                "missing: static reads its addresses from the ipam object",
            )
        })?;
        // Every source is validated, also one a later source replaces.
        let mut addresses = Vec::new();
        for (i, v) in ipam.addresses.unwrap_or_default().into_iter().enumerate() {
            addresses.push(config_address(&format!("ipam.addresses[{i}]"), v)?);
        }
        addresses.extend(env_addresses(env)?);
        let from_args = list("args.cni.ips", raw.args.and_then(|a| a.ips()))?;
        let from_runtime = list("runtimeConfig.ips", raw.runtime_config.and_then(|r| r.ips))?;
        if !from_args.is_empty() {
            addresses = from_args;
        }
        if !from_runtime.is_empty() {
            addresses = from_runtime;
        }

        for (b, later) in addresses.iter().enumerate() {
            if let Some(earlier) = addresses[..b]
                .iter()
                .find(|a| a.address.addr() == later.address.addr())
            {
                return Err(later.source.error(format!(
                    "{} is given twice (also by {}): an interface cannot hold it twice",
                    later.address.addr(),
                    earlier.source.describe()
                )));
            }
        }
        let v4 = addresses.iter().filter(|a| a.address.is_ipv4()).count();
        let v6 = addresses.len() - v4;
        if version < Version::V0_3_0 && (v4 > 1 || v6 > 1) {
            return Err(Error::config(
                "cniVersion",
                format!(
                    "{version} allows one address per family, but there are {v4} IPv4 and {v6} IPv6 addresses (0.3.0 or later allows more)"
                ),
            ));
        }
        Ok(StaticConfig {
            addresses,
            routes: route_conf::parse_list("ipam.routes", ipam.routes)?,
            dns: ipam.dns.unwrap_or_default(),
        })
    }
}

// ---- raw shapes (what serde reads) ----------------------------------------

#[derive(Deserialize)]
struct RawNet {
    #[serde(default)]
    ipam: Option<RawIpam>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RawRuntime>,
    #[serde(default)]
    args: Option<libcni::types::IpsArgs>,
}

#[derive(Deserialize)]
struct RawIpam {
    /// Go's untagged `IPAMConfig.Name` (the network's name is copied over
    /// it): decoded, so a key of that name is checked as a string, and
    /// otherwise unused.
    #[serde(rename = "Name", default)]
    #[allow(dead_code)]
    name: Option<String>,
    #[serde(default)]
    addresses: Option<Vec<Value>>,
    #[serde(default)]
    routes: Option<Vec<Value>>,
    #[serde(default)]
    dns: Option<Dns>,
}

/// One `ipam.addresses` entry, with Go's struct's fields in its order: the
/// tagged `address` and `gateway`, then the untagged `Address` (a
/// `net.IPNet`: `{"IP": "10.1.1.1", "Mask": "////AA=="}`, what Go writes
/// when it marshals its own struct) and `Version`. A key goes to the field
/// it names exactly first (`Address` to the `net.IPNet`), else to the
/// first that folds to it (`ADDRESS` to `address`), as in Go. When
/// `Address` carries an IP, Go uses it and never reads `address`; so do
/// we. `Version` is decoded (a number there is refused, as Go refuses it)
/// and ignored.
#[derive(Deserialize)]
struct RawAddress {
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(rename = "Address", default)]
    ip_net: Option<GoIpNet>,
    #[serde(rename = "Version", default)]
    #[allow(dead_code)]
    version: Option<String>,
}

/// Go's `net.IPNet` as `encoding/json` writes it: `IP` as text, `Mask` as
/// base64 bytes.
#[derive(Deserialize)]
#[serde(expecting = "Go's net.IPNet, {\"IP\": ..., \"Mask\": ...} (a CIDR goes under \"address\")")]
struct GoIpNet {
    #[serde(rename = "IP", default)]
    ip: Option<String>,
    #[serde(rename = "Mask", default)]
    mask: Option<String>,
}

impl GoIpNet {
    /// The address with its prefix length, or `None` when it has no IP
    /// (Go's `IP == nil`: then `address` is read instead).
    fn prefix(&self, key: &str) -> Result<Option<IpPrefix>, Error> {
        use base64::Engine;
        let Some(ip_text) = self.ip.as_deref().filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        let ip = ip(ip_text).ok_or_else(|| {
            Error::config(
                format!("{key}.IP"),
                format!("{ip_text:?} is not an IP address"),
            )
        })?;
        let mask_text = self.mask.as_deref().unwrap_or("");
        let mask = base64::engine::general_purpose::STANDARD
            .decode(mask_text)
            .map_err(|_| {
                Error::config(
                    format!("{key}.Mask"),
                    format!("{mask_text:?} is not base64"),
                )
            })?;
        let want = if ip.is_ipv4() { 4 } else { 16 };
        let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
        let canonical = mask.len() == want
            && mask
                .iter()
                .enumerate()
                .all(|(i, b)| *b == mask_byte(ones, i as u32));
        if !canonical {
            return Err(Error::config(
                format!("{key}.Mask"),
                format!("{mask_text:?} is not a prefix mask of {want} bytes for {ip}"),
            ));
        }
        IpPrefix::new(ip, ones as u8)
            .map(Some)
            .ok_or_else(|| Error::config(format!("{key}.Mask"), "not a prefix length"))
    }
}

/// Byte `i` of the mask of `ones` leading one bits.
fn mask_byte(ones: u32, i: u32) -> u8 {
    match ones.saturating_sub(i * 8) {
        0 => 0,
        n if n >= 8 => 0xff,
        n => 0xffu8 << (8 - n),
    }
}

#[derive(Deserialize)]
struct RawRuntime {
    #[serde(default)]
    ips: Option<Vec<String>>,
}

// ---- validation ------------------------------------------------------------

/// An address in CIDR notation, as Go's `net.ParseCIDR` reads it (the
/// prefix length is required; the host bits are the address). An
/// IPv4-mapped IPv6 address becomes the IPv4 address, its prefix length
/// less 96, as Go prints it.
fn cidr(s: &str) -> Result<IpPrefix, String> {
    let p: IpPrefix = s
        .parse()
        .map_err(|_| format!("{s:?} is not an address in CIDR notation (a.b.c.d/n)"))?;
    match p.addr() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) if p.prefix_len() >= 96 => {
                Ok(IpPrefix::new(IpAddr::V4(v4), p.prefix_len() - 96).unwrap_or(p))
            }
            Some(_) => Err(format!(
                "{s:?} is an IPv4-mapped address with a prefix shorter than /96, which has no IPv4 form"
            )),
            None => Ok(p),
        },
        IpAddr::V4(_) => Ok(p),
    }
}

/// A gateway address (Go's `net.ParseIP`); an IPv4-mapped one is IPv4.
fn ip(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>().ok().map(|a| a.to_canonical())
}

fn config_address(key: &str, v: Value) -> Result<StaticAddress, Error> {
    if !v.is_object() {
        return Err(Error::config(
            key,
            format!("{v} is not an address object ({{\"address\": \"a.b.c.d/n\"}})"),
        ));
    }
    let raw: RawAddress = gojson::from_value_at(&v, key)?;
    let from_ip_net = match &raw.ip_net {
        Some(n) => n.prefix(&format!("{key}.Address"))?,
        None => None,
    };
    let address = match (from_ip_net, raw.address.as_deref()) {
        (Some(p), _) => p,
        (None, None | Some("")) => {
            return Err(Error::config(
                format!("{key}.address"),
                "missing: an address in CIDR notation (a.b.c.d/n)",
            ))
        }
        (None, Some(s)) => cidr(s).map_err(|m| Error::config(format!("{key}.address"), m))?,
    };
    let gateway = match raw.gateway.as_deref() {
        None | Some("") => None,
        Some(g) => {
            let gw = ip(g).ok_or_else(|| {
                Error::config(
                    format!("{key}.gateway"),
                    format!("{g:?} is not an IP address"),
                )
            })?;
            if gw.is_ipv4() != address.is_ipv4() {
                return Err(Error::config(
                    format!("{key}.gateway"),
                    format!("{gw} is not of the family of address {address}"),
                ));
            }
            Some(gw)
        }
    };
    Ok(StaticAddress {
        address,
        gateway,
        source: Source::Key(key.to_string()),
    })
}

/// `CNI_ARGS` `IP=` (comma-separated CIDRs) and `GATEWAY=`
/// (comma-separated addresses, each given to the `IP=` addresses whose
/// subnet holds it; one in none of them is unused, as in Go).
fn env_addresses(env: &CniArgs) -> Result<Vec<StaticAddress>, Error> {
    let mut out = Vec::new();
    if let Some(list) = env.get("IP").filter(|l| !l.is_empty()) {
        for item in list.split(',') {
            let s = item.trim();
            let address =
                cidr(s).map_err(|m| Error::InvalidEnv(format!("CNI_ARGS IP={list}: {m}")))?;
            out.push(StaticAddress {
                address,
                gateway: None,
                source: Source::CniArgs,
            });
        }
    }
    if let Some(list) = env.get("GATEWAY").filter(|l| !l.is_empty()) {
        for item in list.split(',') {
            let gw = ip(item.trim()).ok_or_else(|| {
                Error::InvalidEnv(format!(
                    "CNI_ARGS GATEWAY={list}: {item:?} is not an IP address"
                ))
            })?;
            for a in out.iter_mut().filter(|a| a.address.contains(gw)) {
                a.gateway = Some(gw);
            }
        }
    }
    Ok(out)
}

/// `args.cni.ips` or `runtimeConfig.ips`: CIDRs, each named by its index.
fn list(key: &str, ips: Option<Vec<String>>) -> Result<Vec<StaticAddress>, Error> {
    ips.unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let key = format!("{key}[{i}]");
            Ok(StaticAddress {
                address: cidr(s).map_err(|m| Error::config(&key, m))?,
                gateway: None,
                source: Source::Key(key),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn build(conf: Value, cni_args: &str, version: Version) -> Result<StaticConfig, Error> {
        let raw: RawNet = libcni::skel::parse_config(conf.to_string().as_bytes())?;
        let env = CniArgs::parse(cni_args)?;
        env.check_known(KNOWN_ARGS)?;
        StaticConfig::build(raw, &env, version)
    }

    fn ok(conf: Value) -> StaticConfig {
        build(conf, "", Version::V1_0_0).unwrap()
    }

    fn net(ipam: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "net1", "ipam": ipam})
    }

    /// `address gateway source` of each address.
    fn addrs(c: &StaticConfig) -> Vec<String> {
        c.addresses
            .iter()
            .map(|a| {
                format!(
                    "{} {} {}",
                    a.address,
                    a.gateway.map(|g| g.to_string()).unwrap_or("-".into()),
                    a.source.describe()
                )
            })
            .collect()
    }

    fn err_at(conf: Value, cni_args: &str, v: Version, code: u32, key: &str, needle: &str) {
        let e = build(conf, cni_args, v).unwrap_err();
        let text = e.to_string();
        assert_eq!(e.code(), code, "{text}");
        assert!(text.contains(needle), "{needle:?} not in {text:?}");
        if code == 7 {
            assert!(
                matches!(&e, Error::InvalidConfig { key: k, .. } if k == key),
                "{e:?}"
            );
        } else {
            assert!(text.contains(key), "{key:?} not in {text:?}");
        }
    }

    fn err7(conf: Value, key: &str, needle: &str) {
        err_at(conf, "", Version::V1_0_0, 7, key, needle)
    }

    #[test]
    fn every_key_is_read() {
        let c = ok(net(json!({
            "type": "static",
            "addresses": [
                {"address": "10.10.0.5/24", "gateway": "10.10.0.1"},
                {"address": "3ffe:ffff:0:1ff::5/64", "gateway": "3ffe:ffff:0:1ff::1"},
                {"address": "10.20.0.5/16"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.5.1"}],
            "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com",
                    "search": ["example.com"], "options": ["ndots:2"]}
        })));
        assert_eq!(
            addrs(&c),
            [
                "10.10.0.5/24 10.10.0.1 ipam.addresses[0]",
                "3ffe:ffff:0:1ff::5/64 3ffe:ffff:0:1ff::1 ipam.addresses[1]",
                "10.20.0.5/16 - ipam.addresses[2]",
            ]
        );
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.routes[1].gw, Some("10.10.5.1".parse().unwrap()));
        assert_eq!(c.dns.nameservers, ["8.8.8.8"]);
        assert_eq!(c.dns.domain, "example.com");
        assert_eq!(c.dns.search, ["example.com"]);
        assert_eq!(c.dns.options, ["ndots:2"]);
        // Nothing but the ipam object: no address at all is allowed, as Go.
        let c = ok(net(json!({"type": "static"})));
        assert!(c.addresses.is_empty() && c.routes.is_empty() && c.dns.is_empty());
    }

    #[test]
    fn capitalised_keys_work_as_containerd_style_clients_send_them() {
        let c = ok(json!({
            "cniVersion": "1.0.0", "name": "net1",
            "IPAM": {
                "Type": "static",
                "Addresses": [{"address": "10.10.0.5/24", "Gateway": "10.10.0.1", "Version": "4"}],
                "Routes": [{"Dst": "0.0.0.0/0", "GW": "10.10.0.254"}],
                "DNS": {"Nameservers": ["8.8.8.8"], "Domain": "d", "Search": ["s"], "Options": ["o"]}
            }
        }));
        assert_eq!(addrs(&c), ["10.10.0.5/24 10.10.0.1 ipam.addresses[0]"]);
        // `Address` is not a spelling of `address`: it is Go's untagged
        // net.IPNet field, and an exact key match wins, so a CIDR there is
        // refused as Go refuses it.
        err7(
            net(json!({"addresses": [{"Address": "10.10.0.5/24"}]})),
            "ipam.addresses[0].Address",
            "Go's net.IPNet",
        );
        assert_eq!(c.routes[0].gw, Some("10.10.0.254".parse().unwrap()));
        assert_eq!(
            (c.dns.nameservers.as_slice(), c.dns.domain.as_str()),
            (["8.8.8.8".to_string()].as_slice(), "d")
        );
        assert_eq!((c.dns.search.len(), c.dns.options.len()), (1, 1));
        let c = ok(json!({
            "cniVersion": "1.0.0", "name": "net1", "ipam": {"type": "static"},
            "Args": {"CNI": {"IPs": ["10.30.0.5/24"]}}
        }));
        assert_eq!(addrs(&c), ["10.30.0.5/24 - args.cni.ips[0]"]);
        let c = ok(json!({
            "cniVersion": "1.0.0", "name": "net1", "ipam": {"type": "static"},
            "RuntimeConfig": {"IPs": ["10.40.0.5/24"]}
        }));
        assert_eq!(addrs(&c), ["10.40.0.5/24 - runtimeConfig.ips[0]"]);
    }

    #[test]
    fn precedence_env_appends_args_and_runtime_config_replace() {
        let base = net(json!({"addresses": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"}]}));
        // CNI_ARGS IP= is appended; GATEWAY= goes to the IP= address whose
        // subnet holds it, never to the config's (as Go).
        let c = build(
            base.clone(),
            "IgnoreUnknown=1;IP=10.20.0.5/24, fd20::5/64;GATEWAY=10.20.0.1,fd20::1,10.10.0.9;K8S_POD_NAME=p",
            Version::V1_0_0,
        )
        .unwrap();
        assert_eq!(
            addrs(&c),
            [
                "10.10.0.5/24 10.10.0.1 ipam.addresses[0]",
                "10.20.0.5/24 10.20.0.1 CNI_ARGS IP",
                "fd20::5/64 fd20::1 CNI_ARGS IP",
            ]
        );
        let c = build(base.clone(), "IP=;GATEWAY=", Version::V1_0_0).unwrap();
        assert_eq!(addrs(&c), ["10.10.0.5/24 10.10.0.1 ipam.addresses[0]"]);
        // args.cni.ips replaces all, gateways included.
        let mut with_args = base.clone();
        with_args["args"] = json!({"cni": {"ips": ["10.30.0.5/24", "10.31.0.5/16"]}});
        let c = build(with_args.clone(), "IP=10.20.0.5/24", Version::V1_0_0).unwrap();
        assert_eq!(
            addrs(&c),
            [
                "10.30.0.5/24 - args.cni.ips[0]",
                "10.31.0.5/16 - args.cni.ips[1]"
            ]
        );
        // runtimeConfig.ips replaces that in turn; an empty list replaces nothing.
        let mut with_runtime = with_args.clone();
        with_runtime["runtimeConfig"] = json!({"ips": ["10.40.0.5/24"]});
        assert_eq!(
            addrs(&ok(with_runtime)),
            ["10.40.0.5/24 - runtimeConfig.ips[0]"]
        );
        let mut empty = with_args;
        empty["runtimeConfig"] = json!({"ips": []});
        assert_eq!(addrs(&ok(empty)).len(), 2);
        let mut empty_args = base;
        empty_args["args"] = json!({"cni": {"ips": []}});
        assert_eq!(
            addrs(&ok(empty_args)),
            ["10.10.0.5/24 10.10.0.1 ipam.addresses[0]"]
        );
    }

    #[test]
    fn ipv4_mapped_addresses_become_ipv4() {
        let c = ok(net(
            json!({"addresses": [{"address": "::ffff:10.10.0.5/120", "gateway": "::ffff:10.10.0.1"}]}),
        ));
        assert_eq!(addrs(&c), ["10.10.0.5/24 10.10.0.1 ipam.addresses[0]"]);
        err7(
            net(json!({"addresses": [{"address": "::ffff:10.10.0.5/64"}]})),
            "ipam.addresses[0].address",
            "prefix shorter than /96",
        );
    }

    #[test]
    fn bad_addresses_name_their_key() {
        err7(
            net(json!({"addresses": [{"address": "10.10.0.5"}]})),
            "ipam.addresses[0].address",
            "\"10.10.0.5\" is not an address in CIDR notation",
        );
        err7(
            net(json!({"addresses": [{"address": "10.10.0.5/24"}, {"address": "10.10.0.300/24"}]})),
            "ipam.addresses[1].address",
            "\"10.10.0.300/24\"",
        );
        err7(
            net(json!({"addresses": [{"gateway": "10.10.0.1"}]})),
            "ipam.addresses[0].address",
            "missing",
        );
        err7(
            net(json!({"addresses": [{"address": ""}]})),
            "ipam.addresses[0].address",
            "missing",
        );
        err7(
            net(json!({"addresses": [{"address": 5}]})),
            "ipam.addresses[0].address",
            "invalid type",
        );
        err7(
            net(json!({"addresses": ["10.10.0.5/24"]})),
            "ipam.addresses[0]",
            "is not an address object",
        );
        err7(
            net(json!({"addresses": [null]})),
            "ipam.addresses[0]",
            "is not an address object",
        );
        err7(
            net(json!({"addresses": {"address": "10.10.0.5/24"}})),
            "ipam.addresses",
            "invalid type",
        );
        err7(
            net(json!({"addresses": [{"address": "10.10.0.5/24", "gateway": "gw"}]})),
            "ipam.addresses[0].gateway",
            "\"gw\" is not an IP address",
        );
        err7(
            net(json!({"addresses": [{"address": "10.10.0.5/24", "gateway": "fd00::1"}]})),
            "ipam.addresses[0].gateway",
            "fd00::1 is not of the family of address 10.10.0.5/24",
        );
        err7(
            net(json!({"addresses": [{"address": "10.10.0.5/24", "version": 4}]})),
            "ipam.addresses[0].Version",
            "invalid type",
        );
        err7(
            net(json!({"addresses": [{"address": "10.10.0.5/24"}, {"address": "10.10.0.5/16"}]})),
            "ipam.addresses[1]",
            "10.10.0.5 is given twice (also by ipam.addresses[0])",
        );
        err7(json!({"name": "n"}), "ipam", "missing");
        err7(
            net(json!({"dns": {"nameservers": "8.8.8.8"}})),
            "ipam.dns.nameservers",
            "invalid type",
        );
        err7(
            net(json!({"routes": [{"dst": "10.0.0.0"}]})),
            "ipam.routes[0].dst",
            "is not a CIDR",
        );
        // Validated even where a later source replaces them.
        let mut c = net(json!({"addresses": [{"address": "bad"}]}));
        c["runtimeConfig"] = json!({"ips": ["10.40.0.5/24"]});
        err7(c, "ipam.addresses[0].address", "\"bad\"");
    }

    #[test]
    fn bad_runtime_addresses_name_their_source() {
        let base = net(json!({}));
        err_at(
            base.clone(),
            "IP=10.20.0.5",
            Version::V1_0_0,
            4,
            "CNI_ARGS IP=10.20.0.5",
            "\"10.20.0.5\" is not an address in CIDR notation",
        );
        err_at(
            base.clone(),
            "IP=10.20.0.5/24,",
            Version::V1_0_0,
            4,
            "CNI_ARGS IP=",
            "\"\" is not an address",
        );
        err_at(
            base.clone(),
            "IP=10.20.0.5/24;GATEWAY=x",
            Version::V1_0_0,
            4,
            "CNI_ARGS GATEWAY=x",
            "\"x\" is not an IP address",
        );
        err_at(
            base.clone(),
            "IP=10.20.0.5/24;FOO=bar",
            Version::V1_0_0,
            4,
            "CNI_ARGS",
            "FOO",
        );
        err_at(
            base.clone(),
            "IP=10.20.0.5/24,10.20.0.5/24",
            Version::V1_0_0,
            4,
            "CNI_ARGS IP",
            "10.20.0.5 is given twice",
        );
        let mut c = base.clone();
        c["runtimeConfig"] = json!({"ips": ["10.40.0.5/33"]});
        err7(c, "runtimeConfig.ips[0]", "\"10.40.0.5/33\"");
        let mut c = base.clone();
        c["runtimeConfig"] = json!({"ips": "10.40.0.5/24"});
        err7(c, "runtimeConfig.ips", "invalid type");
        let mut c = base.clone();
        c["args"] = json!({"cni": {"ips": ["10.30.0.5/24", 7]}});
        err7(c, "args.cni.ips[1]", "invalid type");
        let mut c = base;
        c["args"] = json!({"cni": {"ips": ["nope"]}});
        err7(c, "args.cni.ips[0]", "\"nope\"");
    }

    #[test]
    fn one_address_per_family_below_030() {
        let two =
            net(json!({"addresses": [{"address": "10.10.0.5/24"}, {"address": "10.20.0.5/24"}]}));
        err_at(
            two.clone(),
            "",
            Version::V0_2_0,
            7,
            "cniVersion",
            "0.2.0 allows one address per family, but there are 2 IPv4 and 0 IPv6",
        );
        assert!(build(two, "", Version::V0_3_0).is_ok());
        let dual =
            net(json!({"addresses": [{"address": "10.10.0.5/24"}, {"address": "fd00::5/64"}]}));
        assert!(build(dual.clone(), "", Version::V0_1_0).is_ok());
        // Counted after CNI_ARGS appended theirs.
        err_at(
            dual,
            "IP=10.20.0.5/24",
            Version::V0_1_0,
            7,
            "cniVersion",
            "2 IPv4 and 1 IPv6",
        );
    }
}
