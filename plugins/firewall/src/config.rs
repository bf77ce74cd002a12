//! The firewall config: parsed and validated before anything is touched.
//! Every rejection names the key and the value (code 7; code 2 for a
//! firewalld backend asked for on a node where firewalld is not running).

use std::net::IpAddr;
use std::path::PathBuf;

use crate::rules::records::{self, Records};
use crate::rules::{
    self as fw, firewalld, FirewallSpec, FwBackend, Isolation, Policy, TeardownHint,
};
use libcni::calllog::{self, Fallback};
use libcni::gojson::Lenient;
use libcni::netfilter::Owner;
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use libcni::{Error, Result};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
struct RawConf {
    #[serde(default)]
    backend: Option<String>,
    #[serde(rename = "ingressPolicy", default)]
    ingress_policy: Option<String>,
    #[serde(rename = "iptablesAdminChainName", default)]
    iptables_admin_chain_name: Option<String>,
    #[serde(rename = "firewalldZone", default)]
    firewalld_zone: Option<String>,
    #[serde(rename = "dataDir", default)]
    data_dir: Option<String>,
}

/// `backend` as written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requested {
    /// Absent or `""`: firewalld when it runs, else iptables (as Go).
    Auto,
    /// A value Go does not know (Nomad's `ip6tables`, `IPTABLES`): Go's
    /// switch falls through to its default, and so do we, noting it.
    Unknown(String),
    Iptables,
    Nftables,
    Firewalld,
}

fn parse_backend(value: Option<&str>) -> Requested {
    match value.unwrap_or("") {
        "" => Requested::Auto,
        "iptables" => Requested::Iptables,
        "nftables" => Requested::Nftables,
        "firewalld" => Requested::Firewalld,
        other => Requested::Unknown(other.to_string()),
    }
}

/// The default backend for `Auto` and `Unknown`; an unknown value is
/// noted ([`calllog::note_fallback`]) with what was used instead.
fn default_backend(requested: &Requested, zone: &str) -> Result<FwBackend> {
    let backend = if firewalld::is_running() {
        firewalld::validate_zone("firewalldZone", zone)?;
        FwBackend::Firewalld {
            zone: zone.to_string(),
        }
    } else {
        FwBackend::Iptables
    };
    if let Requested::Unknown(value) = requested {
        calllog::note_fallback(Fallback {
            key: "backend",
            value: value.clone(),
            used: backend.name().to_string(),
        });
    }
    Ok(backend)
}

fn zone(raw: &RawConf) -> String {
    match raw.firewalld_zone.as_deref() {
        None | Some("") => firewalld::DEFAULT_ZONE.to_string(),
        Some(z) => z.to_string(),
    }
}

/// `dataDir`: an absolute path (code 7 otherwise); the default when absent.
fn data_dir(value: Option<&str>) -> Result<PathBuf> {
    match value {
        None | Some("") => Ok(PathBuf::from(records::DEFAULT_DIR)),
        Some(d) if d.starts_with('/') && !d.split('/').any(|c| c == "..") => Ok(PathBuf::from(d)),
        Some(d) => Err(Error::config(
            "dataDir",
            format!("{d:?} is not an absolute path without '..'"),
        )),
    }
}

/// The validated config.
#[derive(Debug, Clone)]
pub struct FirewallConf {
    pub backend: FwBackend,
    pub isolate: Option<Policy>,
    pub admin_chain: String,
    pub records: Records,
}

impl FirewallConf {
    /// Parses and validates the plugin's keys (ADD and CHECK). The default
    /// backend is resolved here: firewalld when it is on the system bus
    /// (a `stat` when there is no bus socket), else iptables.
    pub fn parse(args: &CmdArgs) -> Result<FirewallConf> {
        let raw: RawConf = args.config()?;
        let requested = parse_backend(raw.backend.as_deref());
        let isolate = match raw.ingress_policy.as_deref().unwrap_or("") {
            "" | "open" => None,
            "same-bridge" => Some(Policy::SameBridge),
            "isolated" => Some(Policy::Isolated),
            other => {
                return Err(Error::config(
                    "ingressPolicy",
                    format!(
                        "unknown ingress policy {other:?} (expected \"open\", \"same-bridge\" or \
                         \"isolated\")"
                    ),
                ))
            }
        };
        let admin_chain = match raw.iptables_admin_chain_name.as_deref() {
            None | Some("") => fw::IPT_DEFAULT_ADMIN_CHAIN.to_string(),
            Some(name) => {
                fw::validate_chain_name("iptablesAdminChainName", name)?;
                name.to_string()
            }
        };
        let records = Records::new(&data_dir(raw.data_dir.as_deref())?);
        let zone = zone(&raw);
        let backend = match requested {
            Requested::Iptables => FwBackend::Iptables,
            Requested::Nftables => FwBackend::Nftables,
            Requested::Firewalld => {
                firewalld::validate_zone("firewalldZone", &zone)?;
                if let Some(why) = firewalld::unavailable_reason() {
                    return Err(Error::UnsupportedField {
                        key: "backend".into(),
                        value: format!(
                            "\"firewalld\": {why}; use \"iptables\" or \"nftables\", or leave \
                             backend empty to pick firewalld only where it runs"
                        ),
                    });
                }
                FwBackend::Firewalld { zone }
            }
            Requested::Auto | Requested::Unknown(_) => default_backend(&requested, &zone)?,
        };
        Ok(FirewallConf {
            backend,
            isolate,
            admin_chain,
            records,
        })
    }

    /// What DEL and GC need, which never fail on a config value: an
    /// unusable `backend` is the default, an unusable `dataDir` the
    /// default directory (every backend is cleaned up by the records and
    /// `prevResult` anyway; the hint only decides which programs run and
    /// the zone of addresses without a record).
    pub fn teardown(args: &CmdArgs) -> (TeardownHint, Records) {
        // Each key on its own: one unusable key (an `ingressPolicy` ADD
        // refused) must not send the others to their defaults.
        #[derive(Default, Deserialize)]
        struct Keys {
            #[serde(default)]
            backend: Lenient<String>,
            #[serde(rename = "firewalldZone", default)]
            firewalld_zone: Lenient<String>,
            #[serde(rename = "dataDir", default)]
            data_dir: Lenient<String>,
        }
        let keys: Keys = args.config().unwrap_or_default();
        let raw = RawConf {
            backend: keys.backend.usable("backend"),
            firewalld_zone: keys.firewalld_zone.usable("firewalldZone"),
            data_dir: keys.data_dir.usable("dataDir"),
            ..RawConf::default()
        };
        let zone = zone(&raw);
        let hint = match parse_backend(raw.backend.as_deref()) {
            Requested::Iptables => TeardownHint::Iptables,
            Requested::Nftables => TeardownHint::Nftables,
            Requested::Firewalld => TeardownHint::Firewalld { zone },
            Requested::Auto | Requested::Unknown(_) => TeardownHint::Auto { zone },
        };
        let dir = data_dir(raw.data_dir.as_deref()).unwrap_or_else(|e| {
            eprintln!("ignoring the unusable config key dataDir: {e}");
            PathBuf::from(records::DEFAULT_DIR)
        });
        (hint, Records::new(&dir))
    }

    /// What the backend needs for this container, from `prev`: every
    /// address, and with `same-bridge`/`isolated` the bridge, which is
    /// `interfaces[0]` of the result as the Go plugin takes it (the bridge
    /// plugin lists the bridge first).
    pub fn spec(&self, args: &CmdArgs, prev: &CniResult) -> Result<FirewallSpec> {
        let isolate = match self.isolate {
            None => None,
            Some(policy) => {
                let p = policy.as_str();
                let first = prev.interfaces.first().ok_or_else(|| {
                    Error::config(
                        "ingressPolicy",
                        format!(
                            "{p:?} needs the bridge as prevResult.interfaces[0], but prevResult \
                             has no interfaces (chain firewall after bridge)"
                        ),
                    )
                })?;
                if !first.sandbox.is_empty() {
                    return Err(Error::config(
                        "prevResult.interfaces[0]",
                        format!(
                            "ingressPolicy {p:?} isolates the bridge listed first, but {:?} is \
                             inside the container ({}): chain firewall after bridge",
                            first.name, first.sandbox
                        ),
                    ));
                }
                fw::validate_bridge_name("prevResult.interfaces[0].name", &first.name)?;
                Some(Isolation {
                    bridge: first.name.clone(),
                    policy,
                })
            }
        };
        Ok(FirewallSpec {
            owner: Owner::new(&args.conf.name, &args.container_id),
            ifname: args.ifname.clone(),
            addrs: addresses(prev),
            isolate,
            admin_chain: self.admin_chain.clone(),
        })
    }
}

/// Every address of a result, once each, in order (the Go plugin takes
/// all of `ips`, whatever their interface).
pub fn addresses(prev: &CniResult) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for ip in &prev.ips {
        let a = ip.address.addr();
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_are_named_exactly_and_others_fall_back_as_in_go() {
        assert_eq!(parse_backend(None), Requested::Auto);
        assert_eq!(parse_backend(Some("")), Requested::Auto);
        assert_eq!(parse_backend(Some("iptables")), Requested::Iptables);
        assert_eq!(parse_backend(Some("nftables")), Requested::Nftables);
        assert_eq!(parse_backend(Some("firewalld")), Requested::Firewalld);
        for other in ["ip6tables", "IPTABLES", "ebtables"] {
            assert_eq!(
                parse_backend(Some(other)),
                Requested::Unknown(other.to_string())
            );
        }
        assert_eq!(data_dir(None).unwrap(), PathBuf::from("/run/cni/firewall"));
        assert_eq!(data_dir(Some("rel")).unwrap_err().code(), 7);
        assert_eq!(data_dir(Some("/a/../b")).unwrap_err().code(), 7);
    }
}
