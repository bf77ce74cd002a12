//! The ADD result in every spec version. Inside the suite a result is always
//! a [`CniResult`] (the 1.1.0 shape, the richest); the wire shapes of older
//! versions exist only at the edge, in [`CniResult::from_json`] and
//! [`CniResult::to_json`], with the conversions Go's `pkg/types` does.

use super::net::IpPrefix;
use crate::error::Error;
use crate::version::Version;
use crate::IpFamily;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::IpAddr;

/// An ADD result (spec 1.1.0 shape).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

/// `interfaces[]`: a link the plugin created or configured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The `CNI_NETNS` value for links inside the container; empty on the host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    #[serde(
        rename = "socketPath",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub socket_path: String,
    #[serde(rename = "pciID", default, skip_serializing_if = "String::is_empty")]
    pub pci_id: String,
}

/// `ips[]`: an address, its gateway and the index of its interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    pub address: IpPrefix,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

/// `routes[]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpPrefix,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
}

impl Route {
    /// A route with only a destination and an optional gateway.
    pub fn new(dst: IpPrefix, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

/// `dns` of a result (and of a config's `dns` key).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self == &Dns::default()
    }
}

/// A config's `dns` key as written: which lists are present (an empty
/// list `[]` is present, `null` or a missing key is not).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DnsConf {
    #[serde(default)]
    pub nameservers: Option<Vec<String>>,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub search: Option<Vec<String>>,
    #[serde(default)]
    pub options: Option<Vec<String>>,
}

impl DnsConf {
    /// The DNS that replaces the IPAM plugin's in a result, when the
    /// config sets any of it: a list present, even empty, or a non-empty
    /// domain (upstream's `dnsConfSet`). `None`: IPAM's DNS stays.
    pub fn into_set(self) -> Option<Dns> {
        let set = self.nameservers.is_some()
            || self.search.is_some()
            || self.options.is_some()
            || self.domain.as_deref().is_some_and(|d| !d.is_empty());
        set.then(|| Dns {
            nameservers: self.nameservers.unwrap_or_default(),
            domain: self.domain.unwrap_or_default(),
            search: self.search.unwrap_or_default(),
            options: self.options.unwrap_or_default(),
        })
    }
}

// ---- wire shapes ----------------------------------------------------------

/// 0.3.0 / 0.3.1 / 0.4.0, and 1.0.0 / 1.1.0 (where `version` is absent and
/// interfaces and routes carry more fields).
#[derive(Serialize, Deserialize)]
struct WireResult {
    #[serde(rename = "cniVersion", default)]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ips: Vec<WireIp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    routes: Vec<Route>,
    #[serde(default)]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct WireIp {
    /// "4" or "6": present in 0.3.x/0.4.0, absent in 1.x.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
    address: IpPrefix,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
}

/// 0.1.0 / 0.2.0.
#[derive(Serialize, Deserialize)]
struct LegacyResult {
    #[serde(rename = "cniVersion", default)]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip4: Option<LegacyIp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip6: Option<LegacyIp>,
    #[serde(default)]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct LegacyIp {
    ip: IpPrefix,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    routes: Vec<LegacyRoute>,
}

#[derive(Serialize, Deserialize)]
struct LegacyRoute {
    dst: IpPrefix,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gw: Option<IpAddr>,
}

impl CniResult {
    /// This result (an IPAM plugin's: its addresses on no interface yet)
    /// with `interfaces` as its interfaces and every address on the
    /// container interface among them: the first whose `sandbox` is set
    /// (none: the addresses name no interface).
    pub fn on_interfaces(mut self, interfaces: Vec<Interface>) -> CniResult {
        let container = interfaces.iter().position(|i| !i.sandbox.is_empty());
        for ip in &mut self.ips {
            ip.interface = container;
        }
        self.interfaces = interfaces;
        self
    }

    /// Parses a result of any version. The version is the result's own
    /// `cniVersion`, or `default` when it has none (as Go's `fixupResultVersion`
    /// and `ParsePrevResult` do). Returns the result and the version it was in.
    pub fn from_json(value: &Value, default: Version) -> Result<(CniResult, Version), Error> {
        let version = match crate::gojson::lookup(value, "cniVersion") {
            Some(Value::String(s)) if !s.is_empty() => Version::parse_config(&s)?,
            _ => default,
        };
        let bad = |(path, msg): (String, String)| {
            let at = if path.is_empty() {
                String::new()
            } else {
                format!(" at {path}")
            };
            Error::Decode(format!("invalid {version} result{at}: {msg}"))
        };
        if version.is_legacy_result() {
            let legacy: LegacyResult = crate::gojson::decode(value).map_err(bad)?;
            return Ok((CniResult::from_legacy(legacy), version));
        }
        let wire: WireResult = crate::gojson::decode(value).map_err(bad)?;
        let mut interfaces = wire.interfaces;
        if version < Version::V1_0_0 {
            // 0.3/0.4 interfaces have only name, mac and sandbox.
            for i in &mut interfaces {
                i.mtu = None;
                i.socket_path.clear();
                i.pci_id.clear();
            }
        }
        let ips = wire
            .ips
            .into_iter()
            .map(|ip| IpConfig {
                address: ip.address,
                gateway: ip.gateway,
                interface: ip.interface,
            })
            .collect();
        let result = CniResult {
            interfaces,
            ips,
            routes: wire.routes,
            dns: wire.dns,
        };
        Ok((result, version))
    }

    /// Parses result bytes (a plugin's stdout); see [`CniResult::from_json`].
    pub fn from_slice(bytes: &[u8], default: Version) -> Result<(CniResult, Version), Error> {
        let value: Value = crate::gojson::parse_value(bytes)
            .map_err(|e| Error::Decode(format!("result is not valid JSON: {e}")))?;
        CniResult::from_json(&value, default)
    }

    /// The result in the wire shape of `version`.
    pub fn to_json(&self, version: Version) -> Result<Value, Error> {
        let value = if version.is_legacy_result() {
            serde_json::to_value(self.to_legacy(version)?)
        } else {
            let old = version < Version::V1_0_0;
            let interfaces = self
                .interfaces
                .iter()
                .map(|i| {
                    if old {
                        Interface {
                            name: i.name.clone(),
                            mac: i.mac.clone(),
                            sandbox: i.sandbox.clone(),
                            ..Interface::default()
                        }
                    } else {
                        i.clone()
                    }
                })
                .collect();
            let ips = self
                .ips
                .iter()
                .map(|ip| WireIp {
                    version: old.then(|| if ip.address.is_ipv4() { "4" } else { "6" }.into()),
                    interface: ip.interface,
                    address: ip.address,
                    gateway: ip.gateway,
                })
                .collect();
            serde_json::to_value(WireResult {
                cni_version: version.as_str().into(),
                interfaces,
                ips,
                routes: self.routes.clone(),
                dns: self.dns.clone(),
            })
        };
        value.map_err(|e| Error::Internal(format!("encoding result: {e}")))
    }

    fn to_legacy(&self, version: Version) -> Result<LegacyResult, Error> {
        let first = |family| self.ips.iter().find(|ip| ip.address.family() == family);
        let legacy_ip = |ip: &IpConfig| LegacyIp {
            ip: ip.address,
            gateway: ip.gateway,
            routes: self
                .routes
                .iter()
                .filter(|r| r.dst.family() == ip.address.family())
                .map(|r| LegacyRoute {
                    dst: r.dst,
                    gw: r.gw,
                })
                .collect(),
        };
        let (ip4, ip6) = (
            first(IpFamily::V4).map(legacy_ip),
            first(IpFamily::V6).map(legacy_ip),
        );
        if ip4.is_none() && ip6.is_none() {
            return Err(Error::IncompatibleVersion {
                msg: "cannot convert: no valid IP addresses".into(),
                details: format!("a {version} result needs an IP address"),
            });
        }
        Ok(LegacyResult {
            cni_version: version.as_str().into(),
            ip4,
            ip6,
            dns: self.dns.clone(),
        })
    }

    fn from_legacy(legacy: LegacyResult) -> CniResult {
        let mut result = CniResult {
            dns: legacy.dns,
            ..CniResult::default()
        };
        for ip in [legacy.ip4, legacy.ip6].into_iter().flatten() {
            result.ips.push(IpConfig {
                address: ip.ip,
                gateway: ip.gateway,
                interface: None,
            });
            result
                .routes
                .extend(ip.routes.into_iter().map(|r| Route::new(r.dst, r.gw)));
        }
        result
    }

    /// Index of the interface named `name` in the container (`sandbox` set).
    pub fn container_interface(&self, name: &str) -> Option<usize> {
        self.interfaces
            .iter()
            .position(|i| i.name == name && !i.sandbox.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::ALL;
    use serde_json::json;

    fn sample() -> CniResult {
        let (r, _) = CniResult::from_json(
            &json!({
                "cniVersion": "1.1.0",
                "interfaces": [
                    {"name": "cni0", "mac": "00:11:22:33:44:55", "mtu": 1400},
                    {"name": "veth1", "mac": "00:11:22:33:44:66"},
                    {"name": "eth0", "mac": "00:11:22:33:44:77", "sandbox": "/run/netns/p", "mtu": 1400, "pciID": "0000:01:00.0"}
                ],
                "ips": [
                    {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 2},
                    {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 2}
                ],
                "routes": [
                    {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1300, "scope": 0, "table": 100},
                    {"dst": "::/0"}
                ],
                "dns": {"nameservers": ["10.1.0.1"], "search": ["svc"]}
            }),
            Version::V1_1_0,
        )
        .unwrap();
        r
    }

    #[test]
    fn current_round_trip_is_lossless() {
        let r = sample();
        for v in [Version::V1_0_0, Version::V1_1_0] {
            let j = r.to_json(v).unwrap();
            assert_eq!(j["cniVersion"], v.as_str());
            assert!(j["ips"][0].get("version").is_none());
            assert_eq!(CniResult::from_json(&j, v).unwrap().0, r);
        }
    }

    #[test]
    fn down_to_040_adds_version_and_drops_new_interface_fields() {
        let j = sample().to_json(Version::V0_4_0).unwrap();
        assert_eq!(j["cniVersion"], "0.4.0");
        assert_eq!(j["ips"][0]["version"], "4");
        assert_eq!(j["ips"][1]["version"], "6");
        assert_eq!(j["ips"][0]["interface"], 2);
        assert!(j["interfaces"][0].get("mtu").is_none());
        assert!(j["interfaces"][2].get("pciID").is_none());
        assert_eq!(j["interfaces"][2]["sandbox"], "/run/netns/p");
        // Go reuses one Route type: the extra route fields survive.
        assert_eq!(j["routes"][0]["mtu"], 1300);
        // Back up: version dropped, everything else kept.
        let (back, v) = CniResult::from_json(&j, Version::V1_0_0).unwrap();
        assert_eq!(v, Version::V0_4_0);
        assert_eq!(back.ips, sample().ips);
        assert_eq!(back.interfaces[0].mtu, None);
    }

    #[test]
    fn down_to_020_takes_first_of_each_family() {
        let mut r = sample();
        r.ips.push(IpConfig {
            address: "10.9.0.9/24".parse().unwrap(),
            gateway: None,
            interface: Some(2),
        });
        let j = r.to_json(Version::V0_2_0).unwrap();
        assert_eq!(
            j,
            json!({
                "cniVersion": "0.2.0",
                "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1",
                        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]},
                "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1", "routes": [{"dst": "::/0"}]},
                "dns": {"nameservers": ["10.1.0.1"], "search": ["svc"]}
            })
        );
    }

    #[test]
    fn legacy_without_ips_is_an_error() {
        let r = CniResult {
            interfaces: vec![Interface {
                name: "lo".into(),
                ..Interface::default()
            }],
            ..CniResult::default()
        };
        let e = r.to_json(Version::V0_1_0).unwrap_err();
        assert_eq!(e.code(), 1);
        assert!(e.to_string().contains("no valid IP addresses"));
    }

    #[test]
    fn up_from_020_concatenates() {
        let j = json!({
            "cniVersion": "0.2.0",
            "ip4": {"ip": "10.1.0.5/24", "routes": [{"dst": "10.2.0.0/16", "gw": "10.1.0.1"}]},
            "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1", "routes": [{"dst": "::/0"}]}
        });
        let (r, v) = CniResult::from_json(&j, Version::V1_0_0).unwrap();
        assert_eq!(v, Version::V0_2_0);
        assert_eq!(r.ips.len(), 2);
        assert_eq!(r.ips[1].gateway, Some("fd00::1".parse().unwrap()));
        assert_eq!(r.routes.len(), 2);
        let out = r.to_json(Version::V0_4_0).unwrap();
        assert_eq!(out["ips"][0]["version"], "4");
        assert!(out.get("interfaces").is_none());
    }

    #[test]
    fn every_version_pair_converts() {
        for from in ALL {
            let j = sample().to_json(from).unwrap();
            let (r, v) = CniResult::from_json(&j, Version::V1_1_0).unwrap();
            assert_eq!(v, from);
            for to in ALL {
                let out = r.to_json(to).unwrap();
                assert_eq!(out["cniVersion"], to.as_str());
                let (again, _) = CniResult::from_json(&out, to).unwrap();
                assert_eq!(again.ips.len().min(2), again.ips.len());
                assert_eq!(again.ips[0].address, sample().ips[0].address);
            }
        }
    }

    #[test]
    fn missing_version_uses_the_default() {
        let j = json!({"ips": [{"address": "10.1.0.5/24", "version": "4"}]});
        let (_, v) = CniResult::from_json(&j, Version::V0_3_1).unwrap();
        assert_eq!(v, Version::V0_3_1);
        let e = CniResult::from_json(&json!({"cniVersion": "9.9.9"}), Version::V1_0_0);
        assert_eq!(e.unwrap_err().code(), 1);
        let e = CniResult::from_json(&json!({"ips": [{"address": "10.1.0.5"}]}), Version::V1_0_0);
        assert_eq!(e.unwrap_err().code(), 6);
    }

    #[test]
    fn a_config_dns_is_set_by_any_list_present_even_empty_or_a_domain() {
        let set = |v: serde_json::Value| {
            crate::gojson::from_value_at::<DnsConf>(&v, "dns")
                .unwrap()
                .into_set()
        };
        assert_eq!(set(json!({})), None);
        assert_eq!(set(json!({"nameservers": null, "domain": ""})), None);
        assert_eq!(set(json!({"nameservers": []})), Some(Dns::default()));
        assert_eq!(set(json!({"Options": []})), Some(Dns::default()));
        assert_eq!(
            set(json!({"domain": "d", "search": ["s"]})),
            Some(Dns {
                domain: "d".into(),
                search: vec!["s".into()],
                ..Dns::default()
            })
        );
    }

    #[test]
    fn empty_dns_is_written_as_an_object() {
        let r = CniResult {
            ips: vec![IpConfig {
                address: "127.0.0.1/8".parse().unwrap(),
                gateway: None,
                interface: Some(0),
            }],
            ..CniResult::default()
        };
        let j = r.to_json(Version::V1_0_0).unwrap();
        assert_eq!(j["dns"], json!({}));
        assert!(j.get("routes").is_none());
    }
}
