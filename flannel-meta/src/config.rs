//! The flannel plugin's own keys, parsed and validated from stdin before
//! anything else happens. Every rejection is code 7 naming the key.
//!
//! | key | default | |
//! |---|---|---|
//! | `subnetFile` | `/run/flannel/subnet.env` | flanneld's lease file |
//! | `dataDir` | `/var/lib/cni/flannel` | where the rendered delegate configs are saved |
//! | `delegate` | `{}` | the delegate's config; `type` a string, no `name`, no `ipam` |
//! | `ipam` | – | the starting point of the delegate's `ipam` |
//! | `runtimeConfig` | – | copied to the delegate |
//!
//! `null` counts as absent for every key, as in the Go plugin.

use crate::subnet_env;
use libcni::gojson;
use libcni::types::IpPrefix;
use libcni::Error;
use serde_json::{Map, Value};
use std::net::IpAddr;
use std::path::PathBuf;

/// Where the rendered delegate configs go when the config names no `dataDir`.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/flannel";

/// The delegate type when `delegate.type` is absent.
pub const DEFAULT_DELEGATE: &str = "bridge";

/// The IPAM type when `ipam.type` is absent.
pub const DEFAULT_IPAM: &str = "host-local";

/// A validated flannel config.
#[derive(Debug, Clone, PartialEq)]
pub struct FlannelConf {
    /// The network name (the delegate's `name` is forced to it).
    pub name: String,
    /// `cniVersion`, when the config has one (copied to the delegate).
    pub cni_version: Option<String>,
    pub subnet_file: PathBuf,
    pub data_dir: PathBuf,
    /// `delegate`, as written (key order kept).
    pub delegate: Map<String, Value>,
    /// `ipam`, as written; `ipam.routes` checked to be routes.
    pub ipam: Option<Map<String, Value>>,
    /// `runtimeConfig`, as written.
    pub runtime_config: Option<Map<String, Value>>,
}

impl FlannelConf {
    /// Parses and validates the whole config (ADD, CHECK, GC, STATUS).
    pub fn parse(stdin: &[u8]) -> Result<FlannelConf, Error> {
        let top = object_of(stdin)?;
        let name = match key_of(&top, "name") {
            Some(Value::String(s)) => s,
            _ => String::new(), // skel has validated the name already
        };
        let cni_version = match key_of(&top, "cniVersion") {
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            _ => None,
        };
        let subnet_file = path_key(&top, "subnetFile", subnet_env::DEFAULT_PATH)?;
        let data_dir = path_key(&top, "dataDir", DEFAULT_DATA_DIR)?;
        let delegate = match object_key(&top, "delegate")? {
            Some(d) => validate_delegate(d)?,
            None => Map::new(),
        };
        let ipam = object_key(&top, "ipam")?;
        if let Some(ipam) = &ipam {
            validate_ipam(ipam)?;
        }
        let runtime_config = object_key(&top, "runtimeConfig")?;
        Ok(FlannelConf {
            name,
            cni_version,
            subnet_file,
            data_dir,
            delegate,
            ipam,
            runtime_config,
        })
    }

    /// DEL reads only `dataDir`: it must work with whatever config comes,
    /// even one whose other keys are no longer valid.
    pub fn data_dir_of(stdin: &[u8]) -> Result<PathBuf, Error> {
        path_key(&object_of(stdin)?, "dataDir", DEFAULT_DATA_DIR)
    }

    /// The delegate's type: `delegate.type`, or `bridge`.
    pub fn delegate_type(&self) -> &str {
        self.delegate
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_DELEGATE)
    }
}

fn object_of(stdin: &[u8]) -> Result<Map<String, Value>, Error> {
    match gojson::parse_value(stdin) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Error::Decode("config is not a JSON object".into())),
        Err(e) => Err(Error::Decode(format!("config is not valid JSON: {e}"))),
    }
}

/// A top-level key of the config as Go's struct field `key` reads it
/// (case folded; the Go plugin's `delegate`, `ipam` and `runtimeConfig`
/// are maps, whose own keys stay exact).
fn key_of(top: &Map<String, Value>, key: &str) -> Option<Value> {
    gojson::lookup_in(top, key)
}

/// An object-valued key; `null` or absent is `None`.
fn object_key(top: &Map<String, Value>, key: &str) -> Result<Option<Map<String, Value>>, Error> {
    match key_of(top, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => Err(Error::config(
            key,
            format!("must be an object, not {}", kind(&other)),
        )),
    }
}

/// A path-valued key: an absolute path (a relative one would depend on the
/// runtime's working directory); `null` or absent is `default`.
fn path_key(top: &Map<String, Value>, key: &str, default: &str) -> Result<PathBuf, Error> {
    match key_of(top, key) {
        None | Some(Value::Null) => Ok(PathBuf::from(default)),
        Some(Value::String(s)) if s.starts_with('/') => Ok(PathBuf::from(s)),
        Some(Value::String(s)) => Err(Error::config(key, format!("{s:?} is not an absolute path"))),
        Some(other) => Err(Error::config(
            key,
            format!("must be a string, not {}", kind(&other)),
        )),
    }
}

fn validate_delegate(d: Map<String, Value>) -> Result<Map<String, Value>, Error> {
    match d.get("type") {
        None => {}
        Some(Value::String(t)) if is_plugin_name(t) => {}
        Some(Value::String(t)) => {
            return Err(Error::config(
                "delegate.type",
                format!("{t:?} is not a plugin name"),
            ))
        }
        Some(other) => {
            return Err(Error::config(
                "delegate.type",
                format!("must be a string, not {}", kind(other)),
            ))
        }
    }
    if d.contains_key("name") {
        return Err(Error::config(
            "delegate.name",
            "must not be set: flannel sets it to the network's name",
        ));
    }
    if d.contains_key("ipam") {
        return Err(Error::config(
            "delegate.ipam",
            "must not be set: flannel builds it from subnet.env and the top-level \"ipam\"",
        ));
    }
    Ok(d)
}

/// `ipam.type`, when given, names a plugin; `ipam.routes` is a list of
/// routes (`dst` a CIDR, `gw` an address): flannel appends to it.
fn validate_ipam(ipam: &Map<String, Value>) -> Result<(), Error> {
    match ipam.get("type") {
        None => {}
        Some(Value::String(t)) if !t.is_empty() => {}
        Some(other) => {
            return Err(Error::config(
                "ipam.type",
                format!("must be a plugin name, not {other}"),
            ))
        }
    }
    let routes = match ipam.get("routes") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(r)) => r,
        Some(other) => {
            return Err(Error::config(
                "ipam.routes",
                format!("must be a list of routes, not {}", kind(other)),
            ))
        }
    };
    for (i, r) in routes.iter().enumerate() {
        let key = |k: &str| format!("ipam.routes[{i}]{k}");
        let Value::Object(r) = r else {
            return Err(Error::config(
                key(""),
                format!("must be an object, not {}", kind(r)),
            ));
        };
        match r.get("dst") {
            Some(Value::String(s)) if s.parse::<IpPrefix>().is_ok() => {}
            Some(v) => return Err(Error::config(key(".dst"), format!("{v} is not a CIDR"))),
            None => return Err(Error::config(key(".dst"), "missing")),
        }
        match r.get("gw") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.parse::<IpAddr>().is_ok() => {}
            Some(v) => {
                return Err(Error::config(
                    key(".gw"),
                    format!("{v} is not an IP address"),
                ))
            }
        }
    }
    Ok(())
}

/// A name `CNI_PATH` can be searched for: no path separator, not `.`/`..`.
fn is_plugin_name(t: &str) -> bool {
    !(t.is_empty() || t.contains('/') || t.contains('\\') || t == "." || t == "..")
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<FlannelConf, Error> {
        FlannelConf::parse(v.to_string().as_bytes())
    }

    fn rejects(v: Value, key: &str, needle: &str) {
        let e = parse(v.clone()).unwrap_err();
        assert_eq!(e.code(), 7, "{v}: {e}");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("invalid network config: {key}: ")),
            "{key} not named in {msg}"
        );
        assert!(msg.contains(needle), "{needle:?} not in {msg}");
    }

    #[test]
    fn defaults() {
        let c = parse(json!({"name": "cbr0", "type": "flannel"})).unwrap();
        assert_eq!(c.subnet_file, PathBuf::from("/run/flannel/subnet.env"));
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/cni/flannel"));
        assert_eq!(c.delegate, Map::new());
        assert_eq!(c.delegate_type(), "bridge");
        assert_eq!(
            (c.ipam, c.runtime_config, c.cni_version),
            (None, None, None)
        );
        let c = parse(json!({"name": "n", "delegate": null, "subnetFile": null, "ipam": null}))
            .unwrap();
        assert_eq!(c.delegate, Map::new());
        assert_eq!(c.subnet_file, PathBuf::from("/run/flannel/subnet.env"));
    }

    #[test]
    fn keys_are_read() {
        let c = parse(json!({"name": "cbr0", "cniVersion": "1.0.0", "subnetFile": "/tmp/s.env",
            "dataDir": "/tmp/d", "delegate": {"type": "ptp", "hairpinMode": true},
            "ipam": {"dataDir": "/tmp/l", "routes": [{"dst": "10.96.0.0/12"}, {"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]},
            "runtimeConfig": {"portMappings": []}}))
        .unwrap();
        assert_eq!(c.cni_version.as_deref(), Some("1.0.0"));
        assert_eq!(c.subnet_file, PathBuf::from("/tmp/s.env"));
        assert_eq!(c.data_dir, PathBuf::from("/tmp/d"));
        assert_eq!(c.delegate_type(), "ptp");
        assert_eq!(
            Value::Object(c.runtime_config.unwrap()),
            json!({"portMappings": []})
        );
    }

    #[test]
    fn delegate_rules_of_the_reference() {
        rejects(
            json!({"name": "n", "delegate": {"type": 5}}),
            "delegate.type",
            "must be a string, not a number",
        );
        rejects(
            json!({"name": "n", "delegate": {"type": ""}}),
            "delegate.type",
            "\"\" is not a plugin name",
        );
        rejects(
            json!({"name": "n", "delegate": {"type": "../bridge"}}),
            "delegate.type",
            "not a plugin name",
        );
        rejects(
            json!({"name": "n", "delegate": {"name": "x"}}),
            "delegate.name",
            "must not be set",
        );
        rejects(
            json!({"name": "n", "delegate": {"ipam": {}}}),
            "delegate.ipam",
            "must not be set",
        );
        rejects(
            json!({"name": "n", "delegate": "bridge"}),
            "delegate",
            "must be an object, not a string",
        );
    }

    #[test]
    fn paths_and_ipam_are_checked() {
        rejects(
            json!({"name": "n", "subnetFile": 3}),
            "subnetFile",
            "must be a string",
        );
        rejects(
            json!({"name": "n", "dataDir": "var/lib"}),
            "dataDir",
            "\"var/lib\" is not an absolute path",
        );
        rejects(
            json!({"name": "n", "dataDir": ""}),
            "dataDir",
            "not an absolute path",
        );
        rejects(
            json!({"name": "n", "ipam": []}),
            "ipam",
            "must be an object",
        );
        rejects(
            json!({"name": "n", "ipam": {"type": ""}}),
            "ipam.type",
            "must be a plugin name",
        );
        rejects(
            json!({"name": "n", "ipam": {"routes": {}}}),
            "ipam.routes",
            "must be a list of routes",
        );
        rejects(
            json!({"name": "n", "ipam": {"routes": [{"dst": "10.0.0.0/8"}, {"dst": "10.0.0.0"}]}}),
            "ipam.routes[1].dst",
            "\"10.0.0.0\" is not a CIDR",
        );
        rejects(
            json!({"name": "n", "ipam": {"routes": [{"gw": "10.0.0.1"}]}}),
            "ipam.routes[0].dst",
            "missing",
        );
        rejects(
            json!({"name": "n", "ipam": {"routes": [{"dst": "10.0.0.0/8", "gw": "x"}]}}),
            "ipam.routes[0].gw",
            "not an IP address",
        );
        rejects(
            json!({"name": "n", "runtimeConfig": 1}),
            "runtimeConfig",
            "must be an object",
        );
    }

    #[test]
    fn del_reads_only_the_data_dir() {
        let stdin = json!({"name": "n", "dataDir": "/tmp/d", "delegate": {"name": "bad"}});
        assert_eq!(
            FlannelConf::data_dir_of(stdin.to_string().as_bytes()).unwrap(),
            PathBuf::from("/tmp/d")
        );
        let e = FlannelConf::data_dir_of(br#"{"name":"n","dataDir":1}"#).unwrap_err();
        assert_eq!(e.code(), 7);
    }
}
