//! The sbr config: `table`, `gateways`, `addSourceHints`, parsed with Go's
//! rules and validated before anything is touched; every rejection is code
//! 7 naming the key and the value.

use libcni::netlink::rule::RESERVED_TABLES;
use libcni::skel::CmdArgs;
use libcni::Error;
use serde::Deserialize;
use std::net::IpAddr;

/// The first table sbr picks from when `table` is not set (as Go's).
pub const FIRST_TABLE: u32 = 100;

/// The validated config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conf {
    /// `table`: only add `from <addr> lookup <table>` rules; no route is
    /// moved (the table is the administrator's).
    pub table: Option<u32>,
    /// `gateways`: the default route's gateway of each family, instead of
    /// the address's own gateway from `prevResult`.
    pub gateway_v4: Option<IpAddr>,
    pub gateway_v6: Option<IpAddr>,
    /// `addSourceHints`: keep each address's subnet route in the main
    /// table, with the address as its preferred source, and move only the
    /// others.
    pub add_source_hints: bool,
}

impl Conf {
    /// The static gateway for an address of `ip`'s family, if any.
    pub fn gateway_for(&self, ip: IpAddr) -> Option<IpAddr> {
        if ip.is_ipv4() {
            self.gateway_v4
        } else {
            self.gateway_v6
        }
    }

    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        let raw: Raw = args.config()?;
        Conf::build(raw)
    }

    /// What DEL reads: only `table`, and a `table` it cannot use is said on
    /// stderr and treated as absent (then every table of a rule from the
    /// interface's addresses is considered).
    pub fn for_teardown(args: &CmdArgs) -> Option<u32> {
        let raw: RawTable = match args.config() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("ignoring an unusable table: {e}");
                return None;
            }
        };
        match raw.table.map(table) {
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                eprintln!("ignoring an unusable table: {e}");
                None
            }
            None => None,
        }
    }

    fn build(raw: Raw) -> Result<Conf, Error> {
        let mut conf = Conf {
            table: raw.table.map(table).transpose()?,
            add_source_hints: raw.add_source_hints.unwrap_or(false),
            ..Conf::default()
        };
        let gateways = raw.gateways.unwrap_or_default();
        if gateways.len() > 2 {
            return Err(Error::config(
                "gateways",
                format!(
                    "{} entries: at most two, one IPv4 and one IPv6",
                    gateways.len()
                ),
            ));
        }
        for (i, g) in gateways.iter().enumerate() {
            let key = format!("gateways[{i}]");
            let ip = g
                .parse::<IpAddr>()
                .map(|a| a.to_canonical())
                .map_err(|_| Error::config(&key, format!("{g:?} is not an IP address")))?;
            if ip.is_unspecified() || ip.is_multicast() {
                return Err(Error::config(
                    &key,
                    format!("{ip} cannot be a gateway (unspecified or multicast)"),
                ));
            }
            let slot = if ip.is_ipv4() {
                &mut conf.gateway_v4
            } else {
                &mut conf.gateway_v6
            };
            if let Some(earlier) = slot {
                return Err(Error::config(
                    &key,
                    format!("{ip}: a second gateway of the family of {earlier} (one per family)"),
                ));
            }
            *slot = Some(ip);
        }
        Ok(conf)
    }
}

/// `table`: a routing table number, 1 to 4294967295, not one the kernel's
/// own rules use.
fn table(t: i64) -> Result<u32, Error> {
    let n = u32::try_from(t).ok().filter(|n| *n > 0).ok_or_else(|| {
        Error::config("table", format!("{t} is not a table number (1-4294967295)"))
    })?;
    if RESERVED_TABLES.contains(&n) {
        return Err(Error::config(
            "table",
            format!("{n} is a table of the kernel's own rules (253 default, 254 main, 255 local)"),
        ));
    }
    Ok(n)
}

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    table: Option<i64>,
    #[serde(default)]
    gateways: Option<Vec<String>>,
    #[serde(rename = "addSourceHints", default)]
    add_source_hints: Option<bool>,
}

#[derive(Deserialize)]
struct RawTable {
    #[serde(default)]
    table: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::testing::assert_config_error_at;
    use libcni::skel::test_args;
    use serde_json::{json, Value};

    fn parse(extra: Value) -> Result<Conf, Error> {
        let mut c = json!({"cniVersion": "1.1.0", "name": "n", "type": "sbr"});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        Conf::parse(&test_args(&c.to_string()))
    }

    fn err(extra: Value, key: &str, needle: &str) {
        assert_config_error_at(parse(extra), key, needle);
    }

    #[test]
    fn every_key_is_read() {
        assert_eq!(parse(json!({})).unwrap(), Conf::default());
        let c = parse(
            json!({"table": 500, "gateways": ["fd00::1", "10.0.0.1"], "addSourceHints": true}),
        )
        .unwrap();
        assert_eq!(
            c,
            Conf {
                table: Some(500),
                gateway_v4: Some("10.0.0.1".parse().unwrap()),
                gateway_v6: Some("fd00::1".parse().unwrap()),
                add_source_hints: true,
            }
        );
        assert_eq!(c.gateway_for("10.9.9.9".parse().unwrap()), c.gateway_v4);
        assert_eq!(c.gateway_for("fd09::9".parse().unwrap()), c.gateway_v6);
        let c = parse(json!({"gateways": ["::ffff:10.0.0.1"], "table": 4294967295u64})).unwrap();
        assert_eq!(c.gateway_v4, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(c.table, Some(u32::MAX));
    }

    #[test]
    fn capitalised_keys_work_as_containerd_style_clients_send_them() {
        let c =
            parse(json!({"Table": 300, "Gateways": ["10.0.0.1"], "AddSourceHints": true})).unwrap();
        assert_eq!(
            (c.table, c.gateway_v4, c.add_source_hints),
            (Some(300), Some("10.0.0.1".parse().unwrap()), true)
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        err(json!({"table": 0}), "table", "0 is not a table number");
        err(json!({"table": -1}), "table", "-1 is not a table number");
        err(
            json!({"table": 4294967296u64}),
            "table",
            "is not a table number",
        );
        err(
            json!({"table": 254}),
            "table",
            "254 is a table of the kernel's own rules",
        );
        err(json!({"table": "100"}), "table", "invalid type");
        err(json!({"table": 100.5}), "table", "invalid type");
        err(json!({"gateways": "10.0.0.1"}), "gateways", "invalid type");
        err(json!({"gateways": [1]}), "gateways[0]", "invalid type");
        err(
            json!({"gateways": ["10.0.0.1", "gw"]}),
            "gateways[1]",
            "\"gw\" is not an IP address",
        );
        err(
            json!({"gateways": [""]}),
            "gateways[0]",
            "\"\" is not an IP address",
        );
        err(
            json!({"gateways": ["10.0.0.1", "10.0.0.2"]}),
            "gateways[1]",
            "10.0.0.2: a second gateway of the family of 10.0.0.1",
        );
        err(
            json!({"gateways": ["10.0.0.1", "fd00::1", "fd00::2"]}),
            "gateways",
            "3 entries: at most two",
        );
        err(
            json!({"gateways": ["0.0.0.0"]}),
            "gateways[0]",
            "cannot be a gateway",
        );
        err(
            json!({"gateways": ["ff02::1"]}),
            "gateways[0]",
            "cannot be a gateway",
        );
        err(
            json!({"addSourceHints": "yes"}),
            "addSourceHints",
            "invalid type",
        );
    }

    #[test]
    fn teardown_reads_only_a_usable_table() {
        let t = |c: Value| Conf::for_teardown(&test_args(&c.to_string()));
        assert_eq!(
            t(json!({"name": "n", "table": 300, "gateways": 5})),
            Some(300)
        );
        assert_eq!(t(json!({"name": "n", "table": 0})), None);
        assert_eq!(t(json!({"name": "n", "table": "x"})), None);
        assert_eq!(t(json!({"name": "n"})), None);
    }
}
