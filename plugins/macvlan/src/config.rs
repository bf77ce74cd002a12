//! The macvlan plugin's config: its keys parsed from stdin and validated
//! before anything is touched. Every rejection is code 7 naming the key
//! (code 4 for `CNI_ARGS`). What depends on the master (that it exists, its
//! MTU) is checked at ADD, by `libcni::attach::master`.

use libcni::attach::master::{RawStacked, StackedConf};
use libcni::mac::MacKey;
use libcni::mac::{self, MacSource};
use libcni::netlink::macvlan::MacvlanMode;
use libcni::skel::CmdArgs;
use libcni::Error;
use serde::Deserialize;

/// The macvlan's own keys as they come (JSON types only); the shared ones
/// are [`StackedConf`]'s.
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    bcqueuelen: i64,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<MacKey>,
}

/// A validated macvlan config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// `master`, `mtu`, `linkInContainer`, `ipam.type` (`None`: layer 2
    /// only) and `dns`.
    pub link: StackedConf,
    /// `mode`, bridge unless said otherwise.
    pub mode: MacvlanMode,
    /// `mac` < `CNI_ARGS` `MAC` < `runtimeConfig.mac`, as in the reference.
    pub mac: Option<[u8; 6]>,
    /// `bcqueuelen`; `None` (0) keeps the kernel's default.
    pub bc_queue_len: Option<u32>,
}

impl Conf {
    /// Parses and validates the config of `args` (ADD and CHECK).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        // The keys' types first, then CNI_ARGS, then the values.
        let (stacked, raw) = RawStacked::decode::<Raw>(&args.stdin)?;
        let env_mac = libcni::mac::from_cni_args(&args.cni_args()?)?;
        Conf::from_raw(stacked, raw, env_mac.as_deref())
    }

    #[cfg(test)]
    fn from_json(config: &[u8], env_mac: Option<&str>) -> Result<Conf, Error> {
        let (stacked, raw) = RawStacked::decode::<Raw>(config)?;
        Conf::from_raw(stacked, raw, env_mac)
    }

    fn from_raw(stacked: RawStacked, raw: Raw, env_mac: Option<&str>) -> Result<Conf, Error> {
        let link = stacked.validate()?;
        let mode = match raw.mode.as_deref() {
            None | Some("") => MacvlanMode::Bridge,
            Some(m @ ("bridge" | "private" | "vepa" | "passthru")) => {
                MacvlanMode::parse(m).unwrap_or(MacvlanMode::Bridge)
            }
            Some(m) => {
                return Err(Error::config(
                    "mode",
                    format!("unknown macvlan mode {m:?} (want bridge, private, vepa or passthru)"),
                ))
            }
        };
        let bc_queue_len = match raw.bcqueuelen {
            0 => None,
            q @ 1..=0xffff_ffff => Some(q as u32),
            q => {
                return Err(Error::config(
                    "bcqueuelen",
                    format!("{q} is out of range (0-4294967295)"),
                ))
            }
        };
        let runtime_mac = raw.runtime_config.and_then(|r| r.mac);
        // Lowest to highest precedence; only the one that wins is parsed.
        let mac = mac::choose([
            (MacSource::Config, raw.mac.as_deref()),
            (MacSource::CniArgs, env_mac),
            (MacSource::RuntimeConfig, runtime_mac.as_deref()),
        ])?;
        Ok(Conf {
            link,
            mode,
            mac,
            bc_queue_len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::testing::assert_config_error;
    use serde_json::{json, Value};

    fn conf_env(mut v: Value, env_mac: Option<&str>) -> Result<Conf, Error> {
        if v.get("ipam").is_none() {
            v["ipam"] = json!({"type": "host-local"});
        }
        Conf::from_json(v.to_string().as_bytes(), env_mac)
    }

    fn conf(v: Value) -> Result<Conf, Error> {
        conf_env(v, None)
    }

    #[test]
    fn defaults_are_bridge_mode_and_the_masters_mtu() {
        let c = conf(json!({})).unwrap();
        assert_eq!(
            c,
            Conf {
                link: StackedConf {
                    ipam: Some("host-local".into()),
                    ..StackedConf::default()
                },
                mode: MacvlanMode::Bridge,
                mac: None,
                bc_queue_len: None,
            }
        );
        let c = conf(json!({"master": "", "mode": "", "mtu": 0, "bcqueuelen": 0})).unwrap();
        assert_eq!(
            (c.link.master, c.mode, c.link.mtu),
            (None, MacvlanMode::Bridge, None)
        );
    }

    #[test]
    fn every_mode_the_reference_knows() {
        for (m, want) in [
            ("bridge", MacvlanMode::Bridge),
            ("private", MacvlanMode::Private),
            ("vepa", MacvlanMode::Vepa),
            ("passthru", MacvlanMode::Passthru),
        ] {
            assert_eq!(conf(json!({"mode": m})).unwrap().mode, want);
        }
    }

    #[test]
    fn invalid_keys_are_named() {
        for (v, needle) in [
            (
                json!({"mode": "source"}),
                "mode: unknown macvlan mode \"source\"",
            ),
            (
                json!({"mode": "Bridge"}),
                "mode: unknown macvlan mode \"Bridge\"",
            ),
            (json!({"mtu": -1}), "mtu: invalid MTU -1"),
            (json!({"mtu": "1500"}), "mtu: invalid type"),
            (
                json!({"master": "a-very-long-master-name"}),
                "master: interface name \"a-very-long-master-name\" is longer than 15 bytes",
            ),
            (
                json!({"master": "../x"}),
                "master: interface name \"../x\" contains",
            ),
            (json!({"master": 5}), "master: invalid type"),
            (json!({"bcqueuelen": -3}), "bcqueuelen: -3 is out of range"),
            (
                json!({"mac": "01:00:5e:00:00:01"}),
                "mac: \"01:00:5e:00:00:01\" is a multicast address",
            ),
            (
                json!({"runtimeConfig": {"mac": "zz"}}),
                "runtimeConfig.mac: \"zz\" is not a MAC address",
            ),
            (
                json!({"linkInContainer": "yes"}),
                "linkInContainer: invalid type",
            ),
        ] {
            assert_config_error(conf(v), needle);
        }
        let e = conf_env(json!({}), Some("nope")).unwrap_err();
        assert_eq!(e.code(), 4);
        assert!(e.to_string().starts_with("CNI_ARGS MAC: \"nope\""), "{e}");
    }

    #[test]
    fn mac_precedence_is_the_references() {
        let v = json!({"mac": "0a:00:00:00:00:01", "bcqueuelen": 100, "linkInContainer": true});
        let c = conf(v.clone()).unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 1]));
        assert_eq!(
            (c.bc_queue_len, c.link.link_in_container),
            (Some(100), true)
        );
        let c = conf_env(v.clone(), Some("0a:00:00:00:00:02")).unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 2]));
        let mut rc = v;
        rc["runtimeConfig"] = json!({"mac": "0a-00-00-00-00-03"});
        let c = conf_env(rc, Some("0a:00:00:00:00:02")).unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 3]));
    }
}
