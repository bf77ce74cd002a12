//! The ipvlan plugin's config: its keys parsed from stdin and validated
//! before anything is touched. Every rejection is code 7 naming the key.
//! What depends on the master (that it exists, its MTU) is checked when
//! ADD looks it up (`libcni::attach::master`).

use libcni::attach::master::{RawStacked, StackedConf};
use libcni::netlink::link_kinds::IpvlanMode;
use libcni::skel::CmdArgs;
use libcni::types::config::validate_link_name;
use libcni::types::CniResult;
use libcni::Error;
use serde::Deserialize;

/// The ipvlan's own keys as they come (JSON types only); the shared ones
/// are [`StackedConf`]'s.
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    mode: Option<String>,
}

/// Where the ipvlan's addresses come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addresses {
    /// IPAM ADD of this plugin (`ipam.type`).
    Ipam(String),
    /// The chained `prevResult`'s (no `ipam.type`, and the plugin before
    /// this one allocated them).
    Chained(CniResult),
}

/// A validated ipvlan config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// `master`, `mtu`, `linkInContainer`, `ipam.type` and `dns`. Without
    /// `master`, chained, the master is the single interface of
    /// `prevResult`; without `ipam.type`, the addresses are its too.
    pub link: StackedConf,
    /// `mode`: l2 unless said otherwise.
    pub mode: IpvlanMode,
}

impl Conf {
    /// Parses and validates the config of `args` (ADD and CHECK); DEL
    /// reads only `ipam.type`.
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        let (stacked, raw) = RawStacked::decode::<Raw>(&args.stdin)?;
        let link = stacked.validate()?;
        let mode = match raw.mode.as_deref() {
            None | Some("") => IpvlanMode::L2,
            Some(m) => IpvlanMode::parse(m).ok_or_else(|| {
                Error::config(
                    "mode",
                    format!("unknown ipvlan mode {m:?} (want l2, l3 or l3s)"),
                )
            })?,
        };
        Ok(Conf { link, mode })
    }

    /// Where ADD takes the addresses from, as the reference: without
    /// `ipam.type`, the chained `prevResult`'s, which must have some.
    pub fn addresses(&self, prev: Option<&CniResult>) -> Result<Addresses, Error> {
        if let Some(plugin) = &self.link.ipam {
            return Ok(Addresses::Ipam(plugin.clone()));
        }
        match prev {
            Some(p) if !p.ips.is_empty() => Ok(Addresses::Chained(p.clone())),
            _ => Err(Error::config(
                "ipam.type",
                "missing: without an IPAM plugin the ipvlan takes the addresses of the \
                 chained prevResult, and there is none with addresses",
            )),
        }
    }

    /// The master's name ADD looks up: `master`, or chained without one,
    /// the single named interface of `prevResult` (the reference's rule);
    /// `None` takes the default route's interface.
    pub fn master_for_add(&self, prev: Option<&CniResult>) -> Result<Option<String>, Error> {
        if self.link.master.is_some() {
            return Ok(self.link.master.clone());
        }
        let Some(prev) = prev else {
            return Ok(None);
        };
        match prev.interfaces.as_slice() {
            [only] if !only.name.is_empty() => {
                validate_link_name("prevResult.interfaces[0].name", &only.name)?;
                Ok(Some(only.name.clone()))
            }
            _ => Err(Error::config(
                "master",
                format!(
                    "not set, and the chained prevResult has {} interfaces, not the one \
                     named interface the ipvlan would take as its master",
                    prev.interfaces.len()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::testing::assert_config_error;
    use serde_json::{json, Value};

    fn conf(v: Value) -> Result<Conf, Error> {
        Conf::parse(&libcni::skel::test_args(&v.to_string()))
    }

    fn prev(names: &[&str], ips: bool) -> CniResult {
        let (r, _) = CniResult::from_json(
            &json!({"cniVersion": "1.1.0",
                "interfaces": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
                "ips": if ips { json!([{"address": "10.1.2.2/24", "interface": 0}]) } else { json!([]) }}),
            libcni::Version::V1_1_0,
        )
        .unwrap();
        r
    }

    #[test]
    fn defaults_are_l2_on_the_default_route_interface() {
        let c = conf(json!({"ipam": {"type": "host-local"}})).unwrap();
        assert_eq!(
            c,
            Conf {
                link: StackedConf {
                    ipam: Some("host-local".into()),
                    ..StackedConf::default()
                },
                mode: IpvlanMode::L2,
            }
        );
        assert_eq!(c.master_for_add(None).unwrap(), None);
        for (m, want) in [
            ("l2", IpvlanMode::L2),
            ("l3", IpvlanMode::L3),
            ("l3s", IpvlanMode::L3s),
            ("", IpvlanMode::L2),
        ] {
            assert_eq!(conf(json!({"mode": m})).unwrap().mode, want);
        }
    }

    #[test]
    fn invalid_keys_are_named() {
        for (v, needle) in [
            (
                json!({"mode": "l4"}),
                "mode: unknown ipvlan mode \"l4\" (want l2, l3 or l3s)",
            ),
            (json!({"mode": "L2"}), "mode: unknown ipvlan mode \"L2\""),
            (json!({"mode": 2}), "mode: invalid type"),
            (json!({"mtu": -1}), "mtu: invalid MTU -1"),
            (
                json!({"master": "../eth0"}),
                "master: interface name \"../eth0\"",
            ),
            (
                json!({"linkInContainer": "true"}),
                "linkInContainer: invalid type",
            ),
        ] {
            assert_config_error(conf(v), needle);
        }
    }

    #[test]
    fn chained_it_takes_the_previous_interface_and_addresses() {
        let c = conf(json!({"mode": "l3"})).unwrap();
        let p = prev(&["eth1"], true);
        assert_eq!(c.master_for_add(Some(&p)).unwrap().as_deref(), Some("eth1"));
        assert_eq!(
            c.addresses(Some(&p)).unwrap(),
            Addresses::Chained(p.clone())
        );
        let e = c.addresses(Some(&prev(&["eth1"], false))).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid network config: ipam.type: missing"),
            "{e}"
        );
        assert_eq!(c.addresses(None).unwrap_err().code(), 7);
        for names in [&["a", "b"][..], &[][..], &[""][..]] {
            let e = c.master_for_add(Some(&prev(names, true))).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("invalid network config: master: not set"),
                "{e}"
            );
        }
        // A master named in the config wins; IPAM wins over prevResult.
        let c = conf(json!({"master": "eth9", "ipam": {"type": "static"}})).unwrap();
        assert_eq!(c.master_for_add(Some(&p)).unwrap().as_deref(), Some("eth9"));
        assert_eq!(
            c.addresses(Some(&p)).unwrap(),
            Addresses::Ipam("static".into())
        );
    }
}
