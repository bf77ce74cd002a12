//! The network configuration a plugin receives on stdin: the keys every
//! plugin shares. A plugin parses its own keys from the same bytes into its
//! own struct; unknown keys are never dropped, since delegates get stdin as
//! it came.

use super::result::Dns;
use crate::error::Error;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The keys every plugin config has (spec §"Plugin configuration objects").
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NetConf {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capabilities: BTreeMap<String, bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<IpamConf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    #[serde(
        rename = "runtimeConfig",
        default,
        skip_serializing_if = "Map::is_empty"
    )]
    pub runtime_config: Map<String, Value>,
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
    pub valid_attachments: Option<Vec<Attachment>>,
    /// GC: the name libcni used before the rename, still sent alongside.
    #[serde(
        rename = "cni.dev/attachments",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_attachments: Option<Vec<Attachment>>,
}

/// The `ipam` key: a `type` and whatever that IPAM plugin reads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IpamConf {
    #[serde(rename = "type", default)]
    pub plugin_type: String,
}

/// One container attachment: what identifies an ADD (spec §GC).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

impl NetConf {
    /// The valid attachments of a GC request: `cni.dev/valid-attachments`, or
    /// the legacy `cni.dev/attachments` when only that one is present.
    pub fn gc_valid_attachments(&self) -> Vec<Attachment> {
        self.valid_attachments
            .clone()
            .or_else(|| self.legacy_attachments.clone())
            .unwrap_or_default()
    }

    /// `ipam.type`, when it names a plugin (`"ipam": {}` names none).
    pub fn ipam_type(&self) -> Option<&str> {
        self.ipam
            .as_ref()
            .map(|i| i.plugin_type.as_str())
            .filter(|t| !t.is_empty())
    }

    /// The `args.cni.<key>` value, if any (CONVENTIONS.md `args`).
    pub fn args_cni(&self, key: &str) -> Option<&Value> {
        self.args.as_ref()?.get("cni")?.get(key)
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

    #[test]
    fn unknown_keys_do_not_break_parsing_and_gc_keys_are_read() {
        let c: NetConf = serde_json::from_value(json!({
            "cniVersion": "1.1.0", "name": "n", "type": "bridge", "whatever": {"x": 1},
            "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"},
            "cni.dev/attachments": [{"containerID": "c1", "ifname": "eth0"}]
        }))
        .unwrap();
        assert_eq!(c.ipam.as_ref().unwrap().plugin_type, "host-local");
        assert_eq!(c.ipam_type(), Some("host-local"));
        assert_eq!(
            c.gc_valid_attachments(),
            vec![Attachment {
                container_id: "c1".into(),
                ifname: "eth0".into()
            }]
        );
    }

    #[test]
    fn args_cni_lookup() {
        let c: NetConf = serde_json::from_value(json!({
            "name": "n", "args": {"cni": {"ips": ["10.0.0.5/24"], "mac": "02:00:00:00:00:01"}}
        }))
        .unwrap();
        assert_eq!(c.args_cni("mac").unwrap(), "02:00:00:00:00:01");
        assert!(c.args_cni("nope").is_none());
    }
}
