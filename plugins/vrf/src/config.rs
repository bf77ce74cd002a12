//! The vrf plugin's config: `vrfname` (required) and `table` besides the
//! keys every plugin shares, validated before anything is touched (code 7
//! naming the key). DEL reads `vrfname` leniently ([`Conf::for_teardown`]).

use libcni::gojson::Lenient;
use libcni::netlink::rule::RESERVED_TABLES;
use libcni::skel::CmdArgs;
use libcni::types::config::validate_link_name;
use libcni::Error;
use serde::Deserialize;

/// The keys as they come.
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    vrfname: Option<String>,
    #[serde(default)]
    table: Option<u32>,
}

/// A validated vrf config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// `vrfname`: the VRF device in the container the interface joins.
    pub vrf_name: String,
    /// `table`: the VRF's routing table; `None` (absent or 0) takes the
    /// lowest one no VRF of the namespace uses, for a new VRF, and accepts
    /// any for an existing one.
    pub table: Option<u32>,
}

impl Conf {
    /// Parses and validates the config of `args` (ADD, CHECK, STATUS).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        Conf::from_raw(args.config()?)
    }

    fn from_raw(raw: Raw) -> Result<Conf, Error> {
        let vrf_name = raw
            .vrfname
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::config("vrfname", "missing: the name of the VRF to join"))?;
        validate_link_name("vrfname", &vrf_name)?;
        let table = match raw.table {
            None | Some(0) => None,
            Some(t) if RESERVED_TABLES.contains(&t) => {
                return Err(Error::config(
                    "table",
                    format!(
                        "{t} is a table of the kernel's own (253 default, 254 main, 255 local)"
                    ),
                ))
            }
            Some(t) => Some(t),
        };
        Ok(Conf { vrf_name, table })
    }

    /// What DEL reads: `vrfname`, or `None` (said on stderr) when it cannot
    /// be read, since then ADD made nothing from it.
    pub fn for_teardown(args: &CmdArgs) -> Option<String> {
        #[derive(Deserialize, Default)]
        struct Teardown {
            #[serde(default)]
            vrfname: Lenient<String>,
        }
        let t: Teardown = args.config().unwrap_or_default();
        let name = t.vrfname.usable("vrfname").filter(|n| !n.is_empty())?;
        match validate_link_name("vrfname", &name) {
            Ok(()) => Some(name),
            Err(e) => {
                eprintln!("ignoring an unusable vrfname: {e}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::testing::assert_config_error;
    use serde_json::{json, Value};

    fn conf(v: Value) -> Result<Conf, Error> {
        let raw: Raw = libcni::skel::parse_config(v.to_string().as_bytes())?;
        Conf::from_raw(raw)
    }

    #[test]
    fn vrfname_is_required_and_table_optional() {
        assert_eq!(
            conf(json!({"vrfname": "red"})).unwrap(),
            Conf {
                vrf_name: "red".into(),
                table: None
            }
        );
        assert_eq!(
            conf(json!({"vrfname": "red", "table": 0})).unwrap().table,
            None
        );
        assert_eq!(
            conf(json!({"VRFName": "blue", "Table": 1001})).unwrap(),
            Conf {
                vrf_name: "blue".into(),
                table: Some(1001)
            }
        );
        assert_eq!(
            conf(json!({"vRfNaMe": "g", "tAbLe": 4294967295u64}))
                .unwrap()
                .table,
            Some(u32::MAX)
        );
    }

    #[test]
    fn invalid_keys_are_named() {
        for (v, needle) in [
            (json!({}), "vrfname: missing"),
            (json!({"vrfname": ""}), "vrfname: missing"),
            (
                json!({"vrfname": "a-name-too-long-for-linux"}),
                "vrfname: interface name",
            ),
            (json!({"vrfname": 7}), "vrfname: invalid type"),
            (json!({"vrfname": "red", "table": -1}), "table: invalid"),
            (
                json!({"vrfname": "red", "table": 4294967296u64}),
                "table: invalid",
            ),
            (
                json!({"vrfname": "red", "table": "10"}),
                "table: invalid type",
            ),
            (
                json!({"vrfname": "red", "table": 254}),
                "table: 254 is a table of the kernel's own",
            ),
        ] {
            assert_config_error(conf(v), needle);
        }
    }

    #[test]
    fn teardown_reads_vrfname_leniently() {
        let args = |v: Value| libcni::skel::test_args(&v.to_string());
        assert_eq!(
            Conf::for_teardown(&args(json!({"vrfname": "red", "table": "x"}))).as_deref(),
            Some("red")
        );
        assert_eq!(Conf::for_teardown(&args(json!({"vrfname": 5}))), None);
        assert_eq!(Conf::for_teardown(&args(json!({"vrfname": "../x"}))), None);
        assert_eq!(Conf::for_teardown(&args(json!({}))), None);
    }
}
