//! The network configuration a plugin receives on stdin: the keys every
//! plugin shares. A plugin parses its own keys from the same bytes into its
//! own struct; unknown keys are never dropped, since delegates get stdin as
//! it came.
//!
//! Only `cniVersion` and `name` are decoded up front (they must be
//! strings): every other shared part is kept as it came and decoded, with
//! Go's rules ([`crate::gojson`]), by the verb that needs it. So DEL and GC
//! work on a config whose `runtimeConfig`, `prevResult`, `dns` or `args`
//! is unusable: only what a verb reads can fail it.

use super::result::Dns;
use crate::error::Error;
use crate::gojson;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The keys every plugin config has (spec §"Plugin configuration objects").
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NetConf {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    #[serde(default)]
    pub name: String,
    /// `type`, as it came (a plugin knows its own type; the runtime checks it).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub plugin_type: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Value>,
    #[serde(
        rename = "runtimeConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub runtime_config: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(
        rename = "prevResult",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub prev_result: Option<Value>,
    /// GC: the attachments that are still in use.
    #[serde(
        rename = "cni.dev/valid-attachments",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub valid_attachments: Option<Value>,
    /// GC: the name libcni used before the rename, still sent alongside.
    #[serde(
        rename = "cni.dev/attachments",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_attachments: Option<Value>,
}

/// The `ipam` key: a `type` and whatever that IPAM plugin reads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IpamConf {
    #[serde(rename = "type", default)]
    pub plugin_type: String,
}

impl IpamConf {
    /// The plugin an `ipam` key names: its `type`; `None` when the key is
    /// absent or names none (`"ipam": {}`, layer 2 only).
    pub fn plugin(ipam: Option<IpamConf>) -> Option<String> {
        ipam.map(|i| i.plugin_type).filter(|t| !t.is_empty())
    }
}

/// The `args` key as the IPAM plugins read it: `args.cni.ips`, the
/// addresses asked for (the `ips` convention).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct IpsArgs {
    #[serde(default)]
    cni: Option<IpsArgsCni>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct IpsArgsCni {
    #[serde(default)]
    ips: Option<Vec<String>>,
}

impl IpsArgs {
    /// `args.cni.ips`, when given.
    pub fn ips(self) -> Option<Vec<String>> {
        self.cni.and_then(|c| c.ips)
    }
}

/// One container attachment: what identifies an ADD (spec §GC).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// Decodes the shared part `value` (at key `key`) with Go's rules.
fn part<T: DeserializeOwned>(value: &Option<Value>, key: &str) -> Result<Option<T>, Error> {
    match value {
        None => Ok(None),
        Some(v) => gojson::from_value_at(v, key).map(Some),
    }
}

impl NetConf {
    /// The valid attachments of a GC request: `cni.dev/valid-attachments`,
    /// or the legacy `cni.dev/attachments` when only that one is present.
    pub fn gc_valid_attachments(&self) -> Result<Vec<Attachment>, Error> {
        match part(&self.valid_attachments, "cni.dev/valid-attachments")? {
            Some(v) => Ok(v),
            None => Ok(part(&self.legacy_attachments, "cni.dev/attachments")?.unwrap_or_default()),
        }
    }

    /// Whether a GC request lists its valid attachments at all (under
    /// either name): without a list, nothing may be collected.
    pub fn has_gc_attachments(&self) -> bool {
        self.valid_attachments.is_some() || self.legacy_attachments.is_some()
    }

    /// Decodes every shared part, as a Go plugin's decode of its embedded
    /// `types.NetConf` does: ADD, CHECK and STATUS refuse a config whose
    /// `type`, `capabilities`, `ipam`, `dns`, `prevResult` or GC list is
    /// unusable (code 7 naming it), while DEL and GC go on without them.
    pub fn check_shared(&self) -> Result<(), Error> {
        part::<String>(&self.plugin_type, "type")?;
        self.capabilities()?;
        self.ipam()?;
        self.dns()?;
        part::<serde_json::Map<String, Value>>(&self.prev_result, "prevResult")?;
        self.gc_valid_attachments()?;
        Ok(())
    }

    /// `ipam`, decoded.
    pub fn ipam(&self) -> Result<Option<IpamConf>, Error> {
        part(&self.ipam, "ipam")
    }

    /// `ipam.type`, when it names a plugin (`"ipam": {}` names none).
    pub fn ipam_type(&self) -> Result<Option<String>, Error> {
        Ok(IpamConf::plugin(self.ipam()?))
    }

    /// `dns`, decoded.
    pub fn dns(&self) -> Result<Option<Dns>, Error> {
        part(&self.dns, "dns")
    }

    /// `capabilities`, decoded (its keys are capability names, exact).
    pub fn capabilities(&self) -> Result<BTreeMap<String, bool>, Error> {
        Ok(part(&self.capabilities, "capabilities")?.unwrap_or_default())
    }

    /// `runtimeConfig` decoded into a plugin's own struct of the
    /// capabilities it reads (absent: `T::default()`).
    pub fn runtime_config<T: DeserializeOwned + Default>(&self) -> Result<T, Error> {
        Ok(part(&self.runtime_config, "runtimeConfig")?.unwrap_or_default())
    }

    /// `args` decoded into a plugin's own struct of the keys it reads
    /// (conventionally under `cni`; absent: `T::default()`).
    pub fn args<T: DeserializeOwned + Default>(&self) -> Result<T, Error> {
        Ok(part(&self.args, "args")?.unwrap_or_default())
    }

    /// `args.cni.<key>` decoded, if present (CONVENTIONS.md `args`).
    pub fn args_cni<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, Error> {
        let Some(args) = &self.args else {
            return Ok(None);
        };
        let Some(cni) = gojson::lookup(args, "cni") else {
            return Ok(None);
        };
        match gojson::lookup(&cni, key) {
            None => Ok(None),
            Some(v) => gojson::from_value_at(&v, &format!("args.cni.{key}")).map(Some),
        }
    }
}

/// Checks a network or container name against the spec's pattern
/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
pub fn is_valid_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Validates a network name (code 7 naming the key `name`).
pub fn validate_network_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::config("name", "missing network name"));
    }
    if !is_valid_name(name) {
        return Err(Error::config(
            "name",
            format!("{name:?} must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"),
        ));
    }
    Ok(())
}

/// Validates `CNI_CONTAINERID` (code 4; empty is reported as missing earlier).
pub fn validate_container_id(id: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::UnknownContainer(
            "CNI_CONTAINERID: missing container ID".into(),
        ));
    }
    if !is_valid_name(id) {
        return Err(Error::InvalidEnv(format!(
            "CNI_CONTAINERID {id:?} must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"
        )));
    }
    Ok(())
}

/// Validates `CNI_IFNAME` as the spec and Go's `ValidateInterfaceName` do
/// (code 4): 1 to 15 bytes, not `.` or `..`, no `/`, `:` or whitespace.
pub fn validate_ifname(name: &str) -> Result<(), Error> {
    match link_name_fault(name, "is not a valid name") {
        Some(why) => Err(Error::InvalidEnv(format!("CNI_IFNAME {name:?} {why}"))),
        None => Ok(()),
    }
}

/// Validates the value of config key `key` as an interface name the kernel
/// accepts (code 7 naming the key), with the rules of [`validate_ifname`].
pub fn validate_link_name(key: &str, name: &str) -> Result<(), Error> {
    match link_name_fault(name, "is not a valid interface name") {
        Some(why) => Err(Error::config(key, format!("interface name {name:?} {why}"))),
        None => Ok(()),
    }
}

/// Why `name` cannot be an interface name, if it cannot (`dots` for `.`
/// and `..`).
fn link_name_fault(name: &str, dots: &'static str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.len() > 15 {
        Some("is longer than 15 bytes")
    } else if name == "." || name == ".." {
        Some(dots)
    } else if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        Some("contains '/', ':' or whitespace")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_spec_pattern() {
        for ok in ["a", "net1", "my-net_2.x", "0abc"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "_a", "a/b", "a b", "..", "a:b", "ä"] {
            assert!(!is_valid_name(bad), "{bad}");
        }
        assert_eq!(validate_network_name("").unwrap_err().code(), 7);
        assert_eq!(validate_network_name("a/b").unwrap_err().code(), 7);
        assert_eq!(validate_container_id("../x").unwrap_err().code(), 4);
        assert_eq!(validate_container_id("").unwrap_err().code(), 3);
        assert!(validate_container_id("abc123").is_ok());
    }

    #[test]
    fn ifnames_follow_the_spec() {
        assert!(validate_ifname("eth0").is_ok());
        assert!(validate_ifname("a23456789012345").is_ok());
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "a234567890123456",
        ] {
            let e = validate_ifname(bad).unwrap_err();
            assert_eq!(e.code(), 4, "{bad}");
            assert!(e.to_string().contains("CNI_IFNAME"));
        }
    }

    #[test]
    fn link_names_in_config_keys_name_the_key() {
        assert!(validate_link_name("master", "eth0").is_ok());
        for (bad, why) in [
            ("", "is empty"),
            ("a234567890123456", "is longer than 15 bytes"),
            ("..", "is not a valid interface name"),
            ("a/b", "contains '/', ':' or whitespace"),
        ] {
            let e = validate_link_name("bridge", bad).unwrap_err();
            assert_eq!(e.code(), 7);
            assert_eq!(
                e.to_string(),
                format!("invalid network config: bridge: interface name {bad:?} {why}")
            );
        }
        assert_eq!(
            validate_ifname(".").unwrap_err().to_string(),
            "CNI_IFNAME \".\" is not a valid name"
        );
    }

    fn parse(v: Value) -> NetConf {
        gojson::from_value_at(&v, "").unwrap()
    }

    #[test]
    fn unknown_keys_do_not_break_parsing_and_gc_keys_are_read() {
        let c = parse(json!({
            "cniVersion": "1.1.0", "name": "n", "type": "bridge", "whatever": {"x": 1},
            "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"},
            "cni.dev/attachments": [{"containerID": "c1", "ifname": "eth0"}]
        }));
        assert_eq!(c.ipam().unwrap().unwrap().plugin_type, "host-local");
        assert_eq!(c.ipam_type().unwrap().as_deref(), Some("host-local"));
        assert!(c.has_gc_attachments());
        assert_eq!(
            c.gc_valid_attachments().unwrap(),
            vec![Attachment {
                container_id: "c1".into(),
                ifname: "eth0".into()
            }]
        );
    }

    #[test]
    fn shared_parts_are_decoded_only_when_asked_for() {
        let c = parse(json!({
            "cniVersion": "1.0.0", "name": "n", "type": 5, "dns": "x", "runtimeConfig": [],
            "IPAM": {"Type": "host-local"}, "prevResult": "nope"
        }));
        assert_eq!(c.name, "n");
        assert_eq!(c.ipam_type().unwrap().as_deref(), Some("host-local"));
        let e = c.dns().unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(e.to_string().contains("dns"), "{e}");
        #[derive(serde::Deserialize, Default, Debug)]
        struct Rc {}
        let e = c.runtime_config::<Rc>().unwrap_err();
        assert!(e.to_string().contains("runtimeConfig"), "{e}");
        let e = gojson::from_value_at::<NetConf>(&json!({"name": 5}), "").unwrap_err();
        assert!(e.to_string().contains("name"), "{e}");
    }

    #[test]
    fn args_cni_lookup() {
        let c = parse(json!({
            "name": "n", "Args": {"CNI": {"ips": ["10.0.0.5/24"], "MAC": "02:00:00:00:00:01"}}
        }));
        assert_eq!(
            c.args_cni::<String>("mac").unwrap().as_deref(),
            Some("02:00:00:00:00:01")
        );
        assert!(c.args_cni::<String>("nope").unwrap().is_none());
        let e = c.args_cni::<String>("ips").unwrap_err();
        assert!(e.to_string().contains("args.cni.ips"), "{e}");
    }
}
