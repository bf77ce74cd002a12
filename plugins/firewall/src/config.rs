//! The firewall config: parsed and validated before anything is touched.
//! Every rejection names the key and the value (code 7; code 2 for the
//! firewalld backend, which these nodes do not have).

use std::net::IpAddr;

use libcni::gojson::Lenient;
use libcni::netfilter::firewall::{self as fw, FirewallSpec};
use libcni::netfilter::{Backend, Owner};
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
    /// Only the firewalld backend reads it (as in Go); accepted and unused.
    #[serde(rename = "firewalldZone", default)]
    #[allow(dead_code)]
    firewalld_zone: Option<String>,
}

/// `ingressPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngressPolicy {
    /// Every inbound connection the node's policy lets through (default).
    Open,
    /// Traffic entering the bridge from another isolated bridge is dropped.
    SameBridge,
}

/// The validated config.
#[derive(Debug, Clone)]
pub struct FirewallConf {
    pub backend: Backend,
    pub ingress_policy: IngressPolicy,
    pub admin_chain: String,
}

/// `backend`: `""` (absent) and `"iptables"` are iptables, the Go plugin's
/// rules (Go picks firewalld first when it runs; these nodes have none).
fn parse_backend(value: Option<&str>) -> Result<Backend> {
    match value.unwrap_or("") {
        "" | "iptables" => Ok(Backend::Iptables),
        "nftables" => Ok(Backend::Nftables),
        "firewalld" => Err(Error::UnsupportedField {
            key: "backend".into(),
            value: "\"firewalld\": firewalld is not available on this node; use \"iptables\" \
                    (the default) or \"nftables\""
                .into(),
        }),
        other => Err(Error::config(
            "backend",
            format!("unknown backend {other:?} (expected \"\", \"iptables\" or \"nftables\")"),
        )),
    }
}

impl FirewallConf {
    /// Parses and validates the plugin's keys (ADD and CHECK).
    pub fn parse(args: &CmdArgs) -> Result<FirewallConf> {
        let raw: RawConf = args.config()?;
        let backend = parse_backend(raw.backend.as_deref())?;
        let ingress_policy = match raw.ingress_policy.as_deref().unwrap_or("") {
            "" | "open" => IngressPolicy::Open,
            "same-bridge" => IngressPolicy::SameBridge,
            other => {
                return Err(Error::config(
                    "ingressPolicy",
                    format!(
                        "unknown ingress policy {other:?} (expected \"open\" or \"same-bridge\")"
                    ),
                ))
            }
        };
        let admin_chain = match raw.iptables_admin_chain_name.as_deref() {
            None | Some("") => fw::IPT_DEFAULT_ADMIN_CHAIN.to_string(),
            Some(name) => {
                fw::validate_chain_name("iptablesAdminChainName", name)?;
                if backend == Backend::Nftables {
                    return Err(Error::config(
                        "iptablesAdminChainName",
                        format!(
                            "{name:?} is an iptables option, but the backend is nftables (its \
                             admin chain is `admin` of table inet {})",
                            fw::TABLE
                        ),
                    ));
                }
                name.to_string()
            }
        };
        Ok(FirewallConf {
            backend,
            ingress_policy,
            admin_chain,
        })
    }

    /// The backend for DEL and GC, which never fail on a config value: an
    /// unusable `backend` is the default (both backends are cleaned up by
    /// owner anyway; only the processes run differ).
    pub fn lenient_backend(args: &CmdArgs) -> Backend {
        #[derive(Default, Deserialize)]
        struct Keys {
            #[serde(default)]
            backend: Lenient<String>,
        }
        let keys: Keys = args.config().unwrap_or_default();
        let backend = keys.backend.usable("backend");
        match parse_backend(backend.as_deref()) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("ignoring the unusable config key backend: {e}");
                Backend::Iptables
            }
        }
    }

    /// What the backend needs for this container, from `prev`: every
    /// address, and with `same-bridge` the bridge, which is
    /// `interfaces[0]` of the result as the Go plugin takes it (the bridge
    /// plugin lists the bridge first).
    pub fn spec(&self, args: &CmdArgs, prev: &CniResult) -> Result<FirewallSpec> {
        let isolate = match self.ingress_policy {
            IngressPolicy::Open => None,
            IngressPolicy::SameBridge => {
                let first = prev.interfaces.first().ok_or_else(|| {
                    Error::config(
                        "ingressPolicy",
                        "\"same-bridge\" needs the bridge as prevResult.interfaces[0], but \
                         prevResult has no interfaces (chain firewall after bridge)",
                    )
                })?;
                if !first.sandbox.is_empty() {
                    return Err(Error::config(
                        "prevResult.interfaces[0]",
                        format!(
                            "ingressPolicy \"same-bridge\" isolates the bridge listed first, but \
                             {:?} is inside the container ({}): chain firewall after bridge",
                            first.name, first.sandbox
                        ),
                    ));
                }
                fw::validate_bridge_name("prevResult.interfaces[0].name", &first.name)?;
                Some(first.name.clone())
            }
        };
        Ok(FirewallSpec {
            owner: Owner::new(&args.conf.name, &args.container_id),
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
    fn backends_default_to_iptables_and_firewalld_is_refused_with_code_2() {
        assert_eq!(parse_backend(None).unwrap(), Backend::Iptables);
        assert_eq!(parse_backend(Some("")).unwrap(), Backend::Iptables);
        assert_eq!(parse_backend(Some("iptables")).unwrap(), Backend::Iptables);
        assert_eq!(parse_backend(Some("nftables")).unwrap(), Backend::Nftables);
        let e = parse_backend(Some("firewalld")).unwrap_err();
        assert_eq!(e.code(), 2);
        assert!(
            e.to_string()
                .contains("\"backend\": \"firewalld\": firewalld is not available on this node"),
            "{e}"
        );
        let e = parse_backend(Some("IPTABLES")).unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(
            e.to_string()
                .contains("backend: unknown backend \"IPTABLES\""),
            "{e}"
        );
    }
}
