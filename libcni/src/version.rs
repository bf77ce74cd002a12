//! CNI spec versions: which exist, which we speak, and which verbs each allows.

use crate::error::Error;
use std::fmt;

/// A CNI spec version we speak. Ordered oldest to newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

/// All versions a plugin of this suite supports, oldest first.
pub const ALL: [Version; 7] = [
    Version::V0_1_0,
    Version::V0_2_0,
    Version::V0_3_0,
    Version::V0_3_1,
    Version::V0_4_0,
    Version::V1_0_0,
    Version::V1_1_0,
];

impl Version {
    /// The newest version: what VERSION reports as `cniVersion`.
    pub const CURRENT: Version = Version::V1_1_0;

    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_1_0 => "0.1.0",
            Version::V0_2_0 => "0.2.0",
            Version::V0_3_0 => "0.3.0",
            Version::V0_3_1 => "0.3.1",
            Version::V0_4_0 => "0.4.0",
            Version::V1_0_0 => "1.0.0",
            Version::V1_1_0 => "1.1.0",
        }
    }

    /// Exact match against a supported version, as Go's reconciler does.
    /// An empty string is 0.1.0 (the spec's default when `cniVersion` is absent).
    pub fn parse(s: &str) -> Option<Version> {
        if s.is_empty() {
            return Some(Version::V0_1_0);
        }
        ALL.iter().copied().find(|v| v.as_str() == s)
    }

    /// Like [`Version::parse`], with the spec's error (code 1) for unknown ones.
    pub fn parse_config(s: &str) -> Result<Version, Error> {
        parse_supported(s, &ALL)
    }

    /// Results of this version have the 0.1/0.2 shape (`ip4`/`ip6`).
    pub fn is_legacy_result(self) -> bool {
        self <= Version::V0_2_0
    }

    /// CHECK exists from 0.4.0 on.
    pub fn allows_check(self) -> bool {
        self >= Version::V0_4_0
    }

    /// GC and STATUS exist from 1.1.0 on.
    pub fn allows_gc_and_status(self) -> bool {
        self >= Version::V1_1_0
    }

    /// DEL receives a `prevResult` from 0.4.0 on.
    pub fn del_has_prev_result(self) -> bool {
        self >= Version::V0_4_0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The suite's own release (the workspace's `version`, shared by every
/// crate): what the release tarball, package and image are named after.
pub const SUITE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The upstream release (`containernetworking/plugins`) whose behaviour
/// the suite matches: the version clients compare against.
pub const UPSTREAM_VERSION: &str = "1.9.1";

/// What every binary says it is, to people and to clients that probe
/// (`--version`, the about line, VERSION's `pluginVersion`): the upstream
/// release as the semver, ours as build metadata, `1.9.1+cni-rs.0.1.0`.
/// Nomad's and nerdctl's version rules compare by semver precedence,
/// which ignores build metadata, so they see exactly upstream's version
/// (docs/clients.md says why).
pub const PLUGIN_VERSION: &str = concat!("1.9.1", "+cni-rs.", env!("CARGO_PKG_VERSION"));

/// The answer to VERSION for a plugin speaking `supported`:
/// `{"cniVersion": "1.1.0", "supportedVersions": [...], "pluginVersion": "<PLUGIN_VERSION>"}`.
/// `pluginVersion` is ours: the spec names only the first two keys, and Go
/// libcni's decoder (`version.PluginDecoder`, behind `invoke.GetVersionInfo`)
/// ignores any other, as `encoding/json` does.
pub fn version_info_json(supported: &[Version]) -> String {
    let versions: Vec<&str> = supported.iter().map(|v| v.as_str()).collect();
    serde_json::json!({
        "cniVersion": Version::CURRENT.as_str(),
        "supportedVersions": versions,
        "pluginVersion": PLUGIN_VERSION,
    })
    .to_string()
}

/// Like [`Version::parse_config`], for a plugin that speaks only `supported`.
pub fn parse_supported(s: &str, supported: &[Version]) -> Result<Version, Error> {
    match Version::parse(s) {
        Some(v) if supported.contains(&v) => Ok(v),
        _ => Err(Error::IncompatibleVersion {
            msg: "incompatible CNI versions".into(),
            details: format!(
                "config is {s:?}, plugin supports [{}]",
                supported
                    .iter()
                    .map(|v| format!("{:?}", v.as_str()))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly_the_seven_versions() {
        for v in ALL {
            assert_eq!(Version::parse(v.as_str()), Some(v));
        }
        assert_eq!(Version::parse(""), Some(Version::V0_1_0));
        for bad in ["1.0", "0.3", "1.1.1", "v1.0.0", "2.0.0", " 1.0.0"] {
            assert_eq!(Version::parse(bad), None, "{bad}");
            assert_eq!(Version::parse_config(bad).unwrap_err().code(), 1);
        }
    }

    #[test]
    fn verb_gates() {
        assert!(!Version::V0_3_1.allows_check());
        assert!(Version::V0_4_0.allows_check());
        assert!(!Version::V1_0_0.allows_gc_and_status());
        assert!(Version::V1_1_0.allows_gc_and_status());
        assert!(Version::V0_2_0.is_legacy_result());
        assert!(!Version::V0_3_0.is_legacy_result());
    }

    #[test]
    fn version_info_lists_all() {
        let v = crate::gojson::parse_value(version_info_json(&ALL).as_bytes()).unwrap();
        assert_eq!(v["cniVersion"], "1.1.0");
        assert_eq!(v["supportedVersions"].as_array().unwrap().len(), 7);
        assert_eq!(v["pluginVersion"], PLUGIN_VERSION);
        assert_eq!(v.as_object().unwrap().len(), 3);
        let e = parse_supported("0.2.0", &ALL[2..]).unwrap_err();
        assert_eq!(e.code(), 1);
        assert!(e.to_string().contains("incompatible"));
        assert_eq!(
            parse_supported("0.3.0", &ALL[2..]).unwrap(),
            Version::V0_3_0
        );
    }

    #[test]
    fn plugin_version_is_upstreams_with_ours_as_build_metadata() {
        assert_eq!(
            PLUGIN_VERSION,
            format!("{UPSTREAM_VERSION}+cni-rs.{SUITE_VERSION}")
        );
    }
}
