//! The ptp plugin's config: its keys (upstream v1.9's `ipMasq`,
//! `ipMasqBackend`, `mtu`, and the shared `ipam` and `dns`) parsed from
//! stdin with Go's rules and validated before anything is touched. Every
//! rejection is code 7 naming the key. ptp reads no `CNI_ARGS`, as Go's.

use libcni::gojson::Lenient;
use libcni::netfilter::{Backend, Owner};
use libcni::skel::CmdArgs;
use libcni::types::{Dns, DnsConf, IpamConf};
use libcni::Error;
use serde::Deserialize;

/// The keys as they come (JSON types only).
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(rename = "ipMasq", default)]
    ip_masq: bool,
    #[serde(rename = "ipMasqBackend", default)]
    ip_masq_backend: Option<String>,
    #[serde(default)]
    mtu: i64,
    #[serde(default)]
    ipam: Option<IpamConf>,
    #[serde(default)]
    dns: Option<DnsConf>,
}

/// A validated ptp config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// `ipMasq`: masquerade the container's traffic leaving its subnet.
    pub ip_masq: bool,
    /// `ipMasqBackend`; `None` (absent) picks the Go v1.9 plugin's default
    /// at the time of use ([`Conf::masq_backend`]): iptables wherever the
    /// node has it, nftables where it has none.
    pub ip_masq_backend: Option<Backend>,
    /// `mtu` of both veth ends; `None` (0) keeps the kernel's default.
    pub mtu: Option<u32>,
    /// `ipam.type`: ptp routes through the gateway IPAM gives, so it needs
    /// one.
    pub ipam: String,
    /// `dns`, kept when it sets anything: it replaces IPAM's ([`libcni::attach::apply_dns`]).
    pub dns: Option<Dns>,
}

impl Conf {
    /// Parses and validates the config of `args` (ADD, CHECK, STATUS).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        Conf::from_raw(args.config()?)
    }

    fn from_raw(raw: Raw) -> Result<Conf, Error> {
        let ipam = IpamConf::plugin(raw.ipam).ok_or_else(|| {
            Error::config(
                "ipam",
                "ptp needs an IPAM plugin (ipam.type): the container's addresses \
                     and the gateway its traffic goes through come from it",
            )
        })?;
        let ip_masq_backend = raw
            .ip_masq_backend
            .as_deref()
            .map(|b| Backend::parse("ipMasqBackend", b))
            .transpose()?;
        let mtu = libcni::attach::own_link_mtu(raw.mtu)?;
        Ok(Conf {
            ip_masq: raw.ip_masq,
            ip_masq_backend,
            mtu,
            ipam,
            dns: raw.dns.and_then(DnsConf::into_set),
        })
    }

    /// The backend of `ipMasq`: `ipMasqBackend`, or the Go plugins' default
    /// (iptables wherever the node has it, nftables otherwise).
    pub fn masq_backend(&self) -> Backend {
        self.ip_masq_backend
            .unwrap_or_else(libcni::netfilter::default_backend)
    }
}

/// The masquerade owner of this call's container: network name and
/// container ID (the Go plugins' iptables chain is hashed from them).
pub fn owner(args: &CmdArgs) -> Owner {
    Owner::new(&args.conf.name, &args.container_id)
}

/// The keys DEL and GC act on, read leniently: a config ADD refused must
/// still be deletable, so a key that cannot be read is said on stderr and
/// counts as absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MasqKeys {
    /// `ipMasq` is `true`.
    pub ip_masq: bool,
    /// `ipMasqBackend`, when it names a backend.
    pub backend: Option<Backend>,
}

#[derive(Debug, Default, Deserialize)]
struct RawMasqKeys {
    #[serde(rename = "ipMasq", default)]
    ip_masq: Lenient<bool>,
    #[serde(rename = "ipMasqBackend", default)]
    backend: Lenient<String>,
}

impl MasqKeys {
    pub fn lenient(args: &CmdArgs) -> MasqKeys {
        let raw: RawMasqKeys = args.config().unwrap_or_default();
        MasqKeys {
            ip_masq: raw.ip_masq.usable("ipMasq").unwrap_or(false),
            backend: raw
                .backend
                .usable("ipMasqBackend")
                .and_then(|b| Backend::parse("ipMasqBackend", &b).ok()),
        }
    }

    /// `ipMasqBackend`, or the Go plugins' default (iptables wherever the
    /// node has it).
    pub fn masq_backend(&self) -> Backend {
        self.backend
            .unwrap_or_else(libcni::netfilter::default_backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::testing::assert_config_error;
    use serde_json::{json, Value};

    fn conf(mut v: Value) -> Result<Conf, Error> {
        if libcni::gojson::lookup(&v, "ipam").is_none() {
            v["ipam"] = json!({"type": "host-local"});
        }
        Conf::from_raw(libcni::skel::parse_config(v.to_string().as_bytes())?)
    }

    #[test]
    fn defaults() {
        assert_eq!(
            conf(json!({"name": "kindnet", "type": "ptp"})).unwrap(),
            Conf {
                ip_masq: false,
                ip_masq_backend: None,
                mtu: None,
                ipam: "host-local".into(),
                dns: None,
            }
        );
        assert_eq!(conf(json!({"mtu": 0, "dns": {}})).unwrap().mtu, None);
    }

    #[test]
    fn every_key_with_go_s_mixed_case() {
        // containerd and hand-written configs capitalise keys; Go's
        // encoding/json matches them case-insensitively.
        let c = conf(json!({
            "IPMasq": true, "IPMasqBackend": "iptables", "MTU": 1400,
            "IPAM": {"Type": "static"}, "DNS": {"Nameservers": ["10.96.0.10"]}
        }))
        .unwrap();
        assert_eq!(
            (c.ip_masq, c.ip_masq_backend, c.mtu, c.ipam.as_str()),
            (true, Some(Backend::Iptables), Some(1400), "static")
        );
        assert_eq!(c.dns.unwrap().nameservers, ["10.96.0.10"]);
        assert_eq!(c.ip_masq_backend.unwrap().as_str(), "iptables");
        let k = MasqKeys::lenient(&libcni::skel::test_args(
            r#"{"name": "n", "IPMASQ": true, "ipmasqbackend": "nftables"}"#,
        ));
        assert_eq!(
            k,
            MasqKeys {
                ip_masq: true,
                backend: Some(Backend::Nftables)
            }
        );
    }

    #[test]
    fn invalid_keys_are_named() {
        for (v, needle) in [
            (json!({"ipam": {}}), "ipam: ptp needs an IPAM plugin"),
            (
                json!({"ipam": {"type": ""}}),
                "ipam: ptp needs an IPAM plugin",
            ),
            (json!({"ipam": 5}), "ipam: invalid type"),
            (json!({"mtu": 67}), "mtu: 67 is out of range"),
            (json!({"mtu": "1500"}), "mtu: invalid type"),
            (json!({"ipMasq": "yes"}), "ipMasq: invalid type"),
            (
                json!({"ipMasqBackend": "pf"}),
                "ipMasqBackend: unknown backend \"pf\"",
            ),
            (json!({"ipMasqBackend": 1}), "ipMasqBackend: invalid type"),
            (json!({"dns": []}), "dns: invalid type"),
        ] {
            assert_config_error(conf(v), needle);
        }
        let e =
            Conf::from_raw(libcni::skel::parse_config(br#"{"name":"n"}"#).unwrap()).unwrap_err();
        assert!(
            e.to_string().contains("ipam: ptp needs an IPAM plugin"),
            "{e}"
        );
    }

    #[test]
    fn teardown_keys_are_lenient() {
        let k = MasqKeys::lenient(&libcni::skel::test_args(
            r#"{"name": "n", "ipMasq": "yes", "ipMasqBackend": "pf", "mtu": "x"}"#,
        ));
        assert_eq!(
            k,
            MasqKeys {
                ip_masq: false,
                backend: None
            }
        );
        let k = MasqKeys::lenient(&libcni::skel::test_args(r#"{"name": "n"}"#));
        assert!(!k.ip_masq);
    }
}
