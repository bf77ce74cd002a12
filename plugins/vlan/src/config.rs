//! The vlan plugin's config: its keys parsed from stdin and validated
//! before anything is touched. Every rejection is code 7 naming the key.
//! What depends on the master (that it exists, its MTU) is checked when
//! ADD looks it up (`libcni::attach::master`).

use libcni::attach::master::{RawStacked, StackedConf};
use libcni::skel::CmdArgs;
use libcni::Error;
use serde::Deserialize;

/// The vlan's own keys as they come (JSON types only); the shared ones
/// are [`StackedConf`]'s.
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(rename = "vlanId", default)]
    vlan_id: i64,
}

/// A validated vlan config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// `master`, `mtu`, `linkInContainer`, `ipam.type` and `dns`. Without
    /// `ipam.type`, layer 2 only: the interface comes up without addresses
    /// (upstream v1.10, #1302).
    pub link: StackedConf,
    /// `vlanId`, 0-4094.
    pub vlan_id: u16,
}

impl Conf {
    /// Parses and validates the config of `args` (ADD and CHECK).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        let (stacked, raw) = RawStacked::decode::<Raw>(&args.stdin)?;
        let link = stacked.validate()?;
        let vlan_id = match raw.vlan_id {
            v @ 0..=4094 => v as u16,
            v => {
                return Err(Error::config(
                    "vlanId",
                    format!("invalid VLAN ID {v} (must be between 0 and 4094)"),
                ))
            }
        };
        Ok(Conf { link, vlan_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::testing::assert_config_error;
    use serde_json::{json, Value};

    fn conf(mut v: Value) -> Result<Conf, Error> {
        if v.get("ipam").is_none() {
            v["ipam"] = json!({"type": "host-local"});
        }
        Conf::parse(&libcni::skel::test_args(&v.to_string()))
    }

    #[test]
    fn defaults_are_vlan_0_on_the_default_route_interface() {
        assert_eq!(
            conf(json!({})).unwrap(),
            Conf {
                link: StackedConf {
                    ipam: Some("host-local".into()),
                    ..StackedConf::default()
                },
                vlan_id: 0,
            }
        );
        let c = conf(json!({"master": "eth1", "vlanId": 4094, "mtu": 1400,
                            "linkInContainer": true, "dns": {"nameservers": ["10.0.0.10"]}}))
        .unwrap();
        assert_eq!(
            (
                c.link.master.as_deref(),
                c.vlan_id,
                c.link.mtu,
                c.link.link_in_container
            ),
            (Some("eth1"), 4094, Some(1400), true)
        );
        assert!(c.link.dns.is_some());
        assert_eq!(
            conf(json!({"master": "", "dns": {}})).unwrap().link.master,
            None
        );
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
            assert_config_error(conf(v), needle);
        }
    }

    /// Without an IPAM type the VLAN is layer 2 only (upstream v1.10,
    /// #1302): an omitted `ipam` (which the test helper fills in unless
    /// given), an empty one and an empty type alike.
    #[test]
    fn ipam_is_optional() {
        let raw =
            |v: Value| -> Conf { Conf::parse(&libcni::skel::test_args(&v.to_string())).unwrap() };
        for v in [
            json!({"master": "eth1"}),
            json!({"master": "eth1", "ipam": {}}),
            json!({"master": "eth1", "ipam": {"type": ""}}),
        ] {
            assert_eq!(raw(v.clone()).link.ipam, None, "{v}");
        }
    }

    #[test]
    fn keys_match_as_go_matches_them() {
        let c = conf(json!({"VLANID": 7, "Master": "eth2", "MTU": 1300, "LinkInContainer": true}))
            .unwrap();
        assert_eq!(
            (
                c.vlan_id,
                c.link.master.as_deref(),
                c.link.mtu,
                c.link.link_in_container
            ),
            (7, Some("eth2"), Some(1300), true)
        );
        let c = conf(json!({"vLaNiD": 8, "mAsTeR": "eth3"})).unwrap();
        assert_eq!((c.vlan_id, c.link.master.as_deref()), (8, Some("eth3")));
    }
}
