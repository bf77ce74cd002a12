//! Routes as IPAM configs write them (`ipam.routes` of host-local and
//! static): Go's `types.Route` keys (`dst`, `gw`, `mtu`, `advmss`,
//! `priority`, `table`, `scope`), read with Go's rules and validated, each
//! rejection code 7 naming the route's key.

use super::net::IpPrefix;
use super::result::Route;
use crate::error::Error;
use crate::gojson;
use serde::Deserialize;
use serde_json::Value;
use std::net::IpAddr;

/// One route entry as Go's `types.Route` reads it.
#[derive(Deserialize)]
struct RawRoute {
    #[serde(default)]
    dst: Option<String>,
    #[serde(default)]
    gw: Option<String>,
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default)]
    advmss: Option<u32>,
    #[serde(default)]
    priority: Option<u32>,
    #[serde(default)]
    table: Option<u32>,
    #[serde(default)]
    scope: Option<u8>,
}

/// The routes of list `key` (`ipam.routes`), each checked by [`parse`];
/// absent is none.
pub fn parse_list(key: &str, list: Option<Vec<Value>>) -> Result<Vec<Route>, Error> {
    list.unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, v)| parse(&format!("{key}[{i}]"), v))
        .collect()
}

/// One route at `key`, returned as configured: `dst` must be a CIDR (host
/// bits are kept, as Go keeps them) and `gw`, when set and not empty, an
/// address of the same family.
pub fn parse(key: &str, v: Value) -> Result<Route, Error> {
    if !v.is_object() {
        return Err(Error::config(key, format!("{v} is not a route object")));
    }
    let raw: RawRoute = gojson::from_value_at(&v, key)?;
    let dst = match raw.dst.as_deref() {
        Some(s) => s.parse::<IpPrefix>().map_err(|_| {
            Error::config(
                format!("{key}.dst"),
                format!("{s:?} is not a CIDR (a.b.c.d/n)"),
            )
        })?,
        None => return Err(Error::config(format!("{key}.dst"), "missing dst")),
    };
    let gw = match raw.gw.as_deref() {
        None | Some("") => None,
        Some(g) => {
            let gw = g.parse::<IpAddr>().map_err(|_| {
                Error::config(format!("{key}.gw"), format!("{g:?} is not an IP address"))
            })?;
            if gw.is_ipv4() != dst.is_ipv4() {
                return Err(Error::config(
                    format!("{key}.gw"),
                    format!("{gw} is not of the family of dst {dst}"),
                ));
            }
            Some(gw)
        }
    };
    Ok(Route {
        mtu: raw.mtu,
        advmss: raw.advmss,
        priority: raw.priority,
        table: raw.table,
        scope: raw.scope,
        ..Route::new(dst, gw)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::testing::assert_config_error_at;
    use serde_json::json;

    fn err(v: Value, key: &str, needle: &str) {
        assert_config_error_at(parse("ipam.routes[0]", v), key, needle);
    }

    #[test]
    fn route_conf_keys_and_errors() {
        let r = parse(
            "r",
            json!({"Dst": "10.2.0.0/16", "GW": "10.1.0.1", "mtu": 1400, "advmss": 1360,
                   "priority": 5, "table": 100, "scope": 0}),
        )
        .unwrap();
        assert_eq!(r.dst.to_string(), "10.2.0.0/16");
        assert_eq!(r.gw, Some("10.1.0.1".parse().unwrap()));
        assert_eq!(
            (r.mtu, r.advmss, r.priority, r.table, r.scope),
            (Some(1400), Some(1360), Some(5), Some(100), Some(0))
        );
        assert_eq!(
            parse("r", json!({"dst": "::/0", "gw": ""})).unwrap().gw,
            None
        );
        err(
            json!({"dst": "0.0.0.0"}),
            "ipam.routes[0].dst",
            "is not a CIDR",
        );
        err(
            json!({"gw": "10.1.0.1"}),
            "ipam.routes[0].dst",
            "missing dst",
        );
        err(
            json!({"dst": "::/0", "gw": "10.1.0.1"}),
            "ipam.routes[0].gw",
            "not of the family",
        );
        err(
            json!({"dst": "::/0", "gw": "x"}),
            "ipam.routes[0].gw",
            "\"x\"",
        );
        err(
            json!("0.0.0.0/0"),
            "ipam.routes[0]",
            "is not a route object",
        );
        err(
            json!({"dst": "0.0.0.0/0", "mtu": "x"}),
            "ipam.routes[0].mtu",
            "invalid type",
        );
        assert_eq!(
            parse_list("ipam.routes", None).unwrap(),
            Vec::<Route>::new()
        );
    }
}
