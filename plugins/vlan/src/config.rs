//! The vlan plugin's config: its keys parsed from stdin and validated
//! before anything is touched. Every rejection is code 7 naming the key.
//! What depends on the master (that it exists, its MTU) is checked when
//! ADD looks it up (`libcni::attach::master`).

use libcni::skel::CmdArgs;
use libcni::types::config::validate_link_name;
use libcni::types::{Dns, DnsConf, IpamConf};
use libcni::Error;
use serde::Deserialize;

/// The keys as they come (JSON types only).
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    master: Option<String>,
    #[serde(rename = "vlanId", default)]
    vlan_id: i64,
    #[serde(default)]
    mtu: i64,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: bool,
    #[serde(default)]
    ipam: Option<IpamConf>,
    #[serde(default)]
    dns: Option<DnsConf>,
}

/// A validated vlan config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// `master`; `None` takes the interface of the default route.
    pub master: Option<String>,
    /// `vlanId`, 0-4094.
    pub vlan_id: u16,
    /// `mtu`; `None` (0) takes the master's.
    pub mtu: Option<u32>,
    /// `linkInContainer`: the master is in the container's namespace.
    pub link_in_container: bool,
    /// `ipam.type`; `None` (no `ipam`, or no type) for layer 2 only: the
    /// interface comes up without addresses (upstream v1.10, #1302).
    pub ipam: Option<String>,
    /// `dns`, which replaces the IPAM plugin's when it sets anything
    /// ([`libcni::types::DnsConf::into_set`]: a list present, even empty).
    pub dns: Option<Dns>,
}

impl Conf {
    /// Parses and validates the config of `args` (ADD and CHECK).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        Conf::from_raw(args.config()?)
    }

    fn from_raw(raw: Raw) -> Result<Conf, Error> {
        let master = match raw.master.filter(|m| !m.is_empty()) {
            Some(m) => {
                validate_link_name("master", &m)?;
                Some(m)
            }
            None => None,
        };
        let vlan_id = match raw.vlan_id {
            v @ 0..=4094 => v as u16,
            v => {
                return Err(Error::config(
                    "vlanId",
                    format!("invalid VLAN ID {v} (must be between 0 and 4094)"),
                ))
            }
        };
        let mtu = match raw.mtu {
            0 => None,
            m @ 1..=0x7fff_ffff => Some(m as u32),
            m => {
                return Err(Error::config(
                    "mtu",
                    format!("invalid MTU {m}: must be 0 (the master's) or positive"),
                ))
            }
        };
        let ipam = raw.ipam.map(|i| i.plugin_type).filter(|t| !t.is_empty());
        Ok(Conf {
            master,
            vlan_id,
            mtu,
            link_in_container: raw.link_in_container,
            ipam,
            dns: raw.dns.and_then(DnsConf::into_set),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn conf(mut v: Value) -> Result<Conf, Error> {
        if v.get("ipam").is_none() {
            v["ipam"] = json!({"type": "host-local"});
        }
        let raw: Raw = libcni::skel::parse_config(v.to_string().as_bytes())?;
        Conf::from_raw(raw)
    }

    #[test]
    fn defaults_are_vlan_0_on_the_default_route_interface() {
        assert_eq!(
            conf(json!({})).unwrap(),
            Conf {
                master: None,
                vlan_id: 0,
                mtu: None,
                link_in_container: false,
                ipam: Some("host-local".into()),
                dns: None,
            }
        );
        let c = conf(json!({"master": "eth1", "vlanId": 4094, "mtu": 1400,
                            "linkInContainer": true, "dns": {"nameservers": ["10.0.0.10"]}}))
        .unwrap();
        assert_eq!(
            (c.master.as_deref(), c.vlan_id, c.mtu, c.link_in_container),
            (Some("eth1"), 4094, Some(1400), true)
        );
        assert!(c.dns.is_some());
        assert_eq!(conf(json!({"master": "", "dns": {}})).unwrap().master, None);
    }

    #[test]
    fn invalid_keys_are_named() {
        for (v, needle) in [
            (
                json!({"vlanId": 4095}),
                "vlanId: invalid VLAN ID 4095 (must be between 0 and 4094)",
            ),
            (json!({"vlanId": -1}), "vlanId: invalid VLAN ID -1"),
            (json!({"vlanId": "5"}), "vlanId: invalid type"),
            (json!({"mtu": -5}), "mtu: invalid MTU -5"),
            (json!({"mtu": 1.5}), "mtu: invalid type"),
            (
                json!({"master": "a-very-long-master-name"}),
                "master: interface name \"a-very-long-master-name\" is longer than 15 bytes",
            ),
            (json!({"master": true}), "master: invalid type"),
            (
                json!({"linkInContainer": 1}),
                "linkInContainer: invalid type",
            ),
        ] {
            let e = conf(v).unwrap_err();
            assert_eq!(e.code(), 7, "{e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("invalid network config: {needle}")),
                "{e}"
            );
        }
    }

    /// Without an IPAM type the VLAN is layer 2 only (upstream v1.10,
    /// #1302): an omitted `ipam` (which the test helper fills in unless
    /// given), an empty one and an empty type alike.
    #[test]
    fn ipam_is_optional() {
        let raw = |v: Value| -> Conf {
            let raw: Raw = libcni::skel::parse_config(v.to_string().as_bytes()).unwrap();
            Conf::from_raw(raw).unwrap()
        };
        for v in [
            json!({"master": "eth1"}),
            json!({"master": "eth1", "ipam": {}}),
            json!({"master": "eth1", "ipam": {"type": ""}}),
        ] {
            assert_eq!(raw(v.clone()).ipam, None, "{v}");
        }
    }

    #[test]
    fn keys_match_as_go_matches_them() {
        let c = conf(json!({"VLANID": 7, "Master": "eth2", "MTU": 1300, "LinkInContainer": true}))
            .unwrap();
        assert_eq!(
            (c.vlan_id, c.master.as_deref(), c.mtu, c.link_in_container),
            (7, Some("eth2"), Some(1300), true)
        );
        let c = conf(json!({"vLaNiD": 8, "mAsTeR": "eth3"})).unwrap();
        assert_eq!((c.vlan_id, c.master.as_deref()), (8, Some("eth3")));
    }
}
