//! Network configuration lists on the runtime side: parsing a `.conflist`
//! (and upconverting a legacy single-plugin `.conf`/`.json`), and finding the
//! list of a network in a config directory, as Go's `libcni/conf.go` does.
//!
//! Plugin objects are kept as JSON maps, key order and unknown keys intact:
//! they go to the plugins unchanged apart from the keys the runtime inserts.

use libcni::error::{Error, Result};
use libcni::gojson;
use libcni::types::config::is_valid_name;
use libcni::types::{Dns, IpamConf};
use libcni::version::Version;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A parsed network configuration list (spec §"Network configuration").
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    /// The network name (`name`). Not validated here; every verb checks it.
    pub name: String,
    /// The version picked from `cniVersion` / `cniVersions`.
    pub cni_version: Version,
    /// `disableCheck`: CHECK succeeds without running any plugin.
    pub disable_check: bool,
    /// `disableGC`: GC does nothing.
    pub disable_gc: bool,
    /// `loadOnlyInlinedPlugins`: do not merge `<dir>/<name>/*.conf`.
    pub load_only_inlined_plugins: bool,
    /// The plugin objects, in chain order, exactly as configured.
    pub plugins: Vec<Map<String, Value>>,
    /// The bytes the list was parsed from; cached (base64) after an ADD.
    pub bytes: Vec<u8>,
}

/// Parses a configuration list as Go's `ConfListFromBytes` does.
///
/// Errors: code 6 when the bytes are not a JSON object, code 7 naming the
/// key for an invalid list, code 1 when the chosen `cniVersion` is not one we
/// speak. A list without a `plugins` key parses with no plugins (as in Go);
/// [`load_conf_list`] then rejects it unless `<dir>/<name>/*.conf` adds some.
pub fn conf_list_from_bytes(bytes: &[u8]) -> Result<NetworkConfigList> {
    let raw: Value = gojson::parse_value(bytes)
        .map_err(|e| Error::Decode(format!("error parsing configuration list: {e}")))?;
    let Value::Object(raw) = raw else {
        return Err(Error::Decode(format!(
            "error parsing configuration list: expected a JSON object, got {}",
            type_name(&raw)
        )));
    };

    let name = match raw.get("name") {
        None => return Err(Error::config("name", "no name")),
        Some(Value::String(s)) => s.clone(),
        Some(v) => {
            return Err(Error::config(
                "name",
                format!("invalid type {}, want a string", type_name(v)),
            ))
        }
    };
    let cni_version = pick_version(&raw)?;
    let disable_check = read_bool(&raw, "disableCheck")?;
    let disable_gc = read_bool(&raw, "disableGC")?;
    let load_only_inlined_plugins = read_bool(&raw, "loadOnlyInlinedPlugins")?;

    let mut list = NetworkConfigList {
        name,
        cni_version,
        disable_check,
        disable_gc,
        load_only_inlined_plugins,
        plugins: Vec::new(),
        bytes: bytes.to_vec(),
    };
    let plugins = match raw.get("plugins") {
        None if load_only_inlined_plugins => {
            return Err(Error::config(
                "plugins",
                "loadOnlyInlinedPlugins is true, and there is no 'plugins' key",
            ))
        }
        None => return Ok(list),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(Error::config(
                "plugins",
                format!("invalid type {}, want a list", type_name(v)),
            ))
        }
    };
    if plugins.is_empty() {
        return Err(Error::config("plugins", "no plugins in list"));
    }
    for (i, plugin) in plugins.iter().enumerate() {
        list.plugins
            .push(check_plugin(&format!("plugins[{i}]"), plugin)?);
    }
    Ok(list)
}

/// Parses a legacy single-plugin config (`.conf`/`.json`) and upconverts it
/// to a list `{cniVersion, name, plugins: [obj]}`, as Go's `ConfFromBytes`
/// followed by `ConfListFromConf`. The list's `bytes` are the upconverted list.
pub fn conf_from_single_bytes(bytes: &[u8]) -> Result<NetworkConfigList> {
    let raw: Value = gojson::parse_value(bytes)
        .map_err(|e| Error::Decode(format!("error parsing configuration: {e}")))?;
    let plugin = check_plugin("", &raw)?;
    let keys = PluginKeys::of(&plugin, "")?;
    let mut upconverted = Map::new();
    upconverted.insert("cniVersion".into(), Value::String(keys.cni_version));
    upconverted.insert("name".into(), Value::String(keys.name));
    upconverted.insert("plugins".into(), Value::Array(vec![Value::Object(plugin)]));
    let bytes = serde_json::to_vec(&Value::Object(upconverted))
        .map_err(|e| Error::Internal(format!("encoding upconverted config: {e}")))?;
    conf_list_from_bytes(&bytes)
}

/// Reads and parses one `.conflist` file, then (unless
/// `loadOnlyInlinedPlugins`) appends the plugin objects of
/// `<dir of file>/<name>/*.conf`, sorted. A list left with no plugin is an
/// error (code 7), as in Go's `NetworkConfFromFile`.
pub fn conf_list_from_file(path: &Path) -> Result<NetworkConfigList> {
    let bytes = read_file(path)?;
    let mut list = conf_list_from_bytes(&bytes).map_err(|e| in_file(e, path))?;
    // A name that could leave the directory never selects a sibling folder;
    // such a list is rejected anyway when it is run.
    if !list.load_only_inlined_plugins && is_valid_name(&list.name) {
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        let sibling = dir.join(&list.name);
        for file in conf_files(&sibling, &[".conf"])? {
            let bytes = read_file(&file)?;
            let raw: Value = gojson::parse_value(&bytes).map_err(|e| {
                Error::Decode(format!(
                    "{}: error parsing configuration: {e}",
                    file.display()
                ))
            })?;
            list.plugins
                .push(check_plugin("", &raw).map_err(|e| in_file(e, &file))?);
        }
    }
    if list.plugins.is_empty() {
        return Err(in_file(
            Error::config("plugins", "no plugin configs found"),
            path,
        ));
    }
    Ok(list)
}

/// Finds the configuration of network `name` in `dir`, as Go's
/// `LoadConfList`: first the `*.conflist` files in lexical order (each is
/// parsed, so a broken file before the match aborts the search), then the
/// legacy `*.conf` and `*.json` files, sorted, upconverted to a list.
/// A missing directory holds no configurations.
pub fn load_conf_list(dir: &Path, name: &str) -> Result<NetworkConfigList> {
    let lists = conf_files(dir, &[".conflist"])?;
    for file in &lists {
        let list = conf_list_from_file(file)?;
        if list.name == name {
            return Ok(list);
        }
    }
    let singles = conf_files(dir, &[".conf", ".json"])?;
    if lists.is_empty() && singles.is_empty() {
        return Err(Error::config(
            "name",
            format!(
                "no network configuration named {name:?}: no configurations found in {}",
                dir.display()
            ),
        ));
    }
    for file in &singles {
        let bytes = read_file(file)?;
        let list = conf_from_single_bytes(&bytes).map_err(|e| in_file(e, file))?;
        if list.name == name {
            return Ok(list);
        }
    }
    Err(Error::config(
        "name",
        format!(
            "no network configuration named {name:?} in {}",
            dir.display()
        ),
    ))
}

/// The files of `dir` (not recursive, directories skipped) whose extension
/// (from the last `.`, as Go's `filepath.Ext`) is one of `exts`, sorted
/// bytewise. A missing directory gives an empty list.
pub fn conf_files(dir: &Path, exts: &[&str]) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("reading {}", dir.display()), e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = entry.file_name();
        let bytes = name.as_bytes();
        let ext = match bytes.iter().rposition(|&b| b == b'.') {
            Some(i) => &bytes[i..],
            None => continue,
        };
        if exts.iter().any(|e| e.as_bytes() == ext) {
            files.push(entry.path());
        }
    }
    files.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    Ok(files)
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(format!("error reading {}", path.display()), e))
}

/// Adds the file name to a parse error, keeping its code.
fn in_file(e: Error, path: &Path) -> Error {
    let file = path.display();
    match e {
        Error::InvalidConfig { key, msg } => Error::InvalidConfig {
            key,
            msg: format!("{msg} (in {file})"),
        },
        Error::Decode(msg) => Error::Decode(format!("{file}: {msg}")),
        Error::IncompatibleVersion { msg, details } => Error::IncompatibleVersion {
            msg: format!("{file}: {msg}"),
            details,
        },
        other => other,
    }
}

/// The keys of a plugin object the runtime reads, decoded as Go libcni
/// decodes a plugin object into `types.NetConf` (so with Go's rules: a
/// `"Type"` or `"Capabilities"` key counts).
#[derive(Debug, Default, Deserialize)]
pub struct PluginKeys {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    /// Capability name to enabled (names exact, as Go's map keys).
    #[serde(default)]
    pub capabilities: BTreeMap<String, bool>,
    /// Decoded only to be checked, as Go's decode checks them.
    #[serde(default)]
    pub ipam: Option<IpamConf>,
    #[serde(default)]
    pub dns: Option<Dns>,
}

impl PluginKeys {
    /// Decodes the keys of `plugin`; a key of the wrong type is code 7
    /// naming it under `at` (`plugins[1]`).
    pub fn of(plugin: &Map<String, Value>, at: &str) -> Result<PluginKeys> {
        gojson::from_value_at(&Value::Object(plugin.clone()), at)
    }
}

/// Checks one plugin object the way Go's decoding into `types.NetConf`
/// would, and returns it unchanged. `at` prefixes the keys in errors.
fn check_plugin(at: &str, raw: &Value) -> Result<Map<String, Value>> {
    let Value::Object(obj) = raw else {
        let what = if at.is_empty() { "configuration" } else { at };
        return Err(Error::config(
            what,
            format!("invalid type {}, want an object", type_name(raw)),
        ));
    };
    let keys = PluginKeys::of(obj, at)?;
    if keys.plugin_type.is_empty() {
        let key = if at.is_empty() {
            "type".to_string()
        } else {
            format!("{at}.type")
        };
        return Err(Error::config(key, "missing 'type'"));
    }
    Ok(obj.clone())
}

/// `disableCheck` and friends: a bool, or "true"/"false" in any case.
fn read_bool(raw: &Map<String, Value>, key: &str) -> Result<bool> {
    match raw.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(Error::config(
                key,
                format!("invalid value {s:?}, want true or false"),
            )),
        },
        Some(v) => Err(Error::config(
            key,
            format!("invalid type {}, want a bool", type_name(v)),
        )),
    }
}

/// `cniVersion`, or with `cniVersions` (spec 1.1) the highest version among
/// both that we support: entries newer than 1.1.0 or unknown to us are
/// dropped, as Go drops the ones newer than its own.
fn pick_version(raw: &Map<String, Value>) -> Result<Version> {
    let declared = match raw.get("cniVersion") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => {
            return Err(Error::config(
                "cniVersion",
                format!("invalid type {}, want a string", type_name(v)),
            ))
        }
    };
    let Some(versions) = raw.get("cniVersions") else {
        return Version::parse_config(&declared);
    };
    let Value::Array(versions) = versions else {
        return Err(Error::config(
            "cniVersions",
            format!(
                "invalid type {}, want a list of strings",
                type_name(versions)
            ),
        ));
    };
    let mut candidates = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let Value::String(s) = v else {
            return Err(Error::config(
                format!("cniVersions[{i}]"),
                format!("invalid type {}, want a string", type_name(v)),
            ));
        };
        if semver(s).is_none() {
            return Err(Error::config(
                format!("cniVersions[{i}]"),
                format!("invalid version {s:?}"),
            ));
        }
        candidates.extend(Version::parse(s));
    }
    if !declared.is_empty() {
        if semver(&declared).is_none() {
            return Err(Error::config(
                "cniVersion",
                format!("invalid version {declared:?}"),
            ));
        }
        candidates.extend(Version::parse(&declared));
    }
    match candidates.into_iter().max() {
        Some(v) => Ok(v),
        None if declared.is_empty() => Err(Error::IncompatibleVersion {
            msg: "incompatible CNI versions".into(),
            details: format!(
                "none of cniVersions {} is supported, runtime supports [{}]",
                Value::Array(versions.clone()),
                libcni::version::ALL
                    .iter()
                    .map(|v| format!("{:?}", v.as_str()))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        }),
        None => Version::parse_config(&declared),
    }
}

/// Go's `version.ParseVersion`: up to three dot-separated integers.
fn semver(s: &str) -> Option<(u64, u64, u64)> {
    if s.is_empty() {
        return Some((0, 1, 0));
    }
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() > 3 {
        return None;
    }
    let num = |i: usize| -> Option<u64> {
        match parts.get(i) {
            Some(p) => p.parse().ok(),
            None => Some(0),
        }
    };
    Some((num(0)?, num(1)?, num(2)?))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tempdir(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("libcni-runtime-conf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &Path, v: &Value) {
        std::fs::write(path, serde_json::to_vec(v).unwrap()).unwrap();
    }

    fn parse(v: Value) -> Result<NetworkConfigList> {
        conf_list_from_bytes(&serde_json::to_vec(&v).unwrap())
    }

    fn config_key(e: &Error) -> &str {
        match e {
            Error::InvalidConfig { key, .. } => key,
            other => panic!("not a config error: {other:?}"),
        }
    }

    #[test]
    fn parses_a_list_and_keeps_plugin_keys_exactly() {
        let text = br#"{"cniVersion":"1.0.0","name":"net1","disableCheck":true,
            "plugins":[{"type":"bridge","zeta":1,"alpha":{"x":[1,2]},"capabilities":{"portMappings":true}},
                       {"type":"portmap"}]}"#;
        let l = conf_list_from_bytes(text).unwrap();
        assert_eq!(l.name, "net1");
        assert_eq!(l.cni_version, Version::V1_0_0);
        assert!(l.disable_check && !l.disable_gc && !l.load_only_inlined_plugins);
        assert_eq!(l.bytes, text.to_vec());
        assert_eq!(l.plugins.len(), 2);
        let keys: Vec<&str> = l.plugins[0].keys().map(String::as_str).collect();
        assert_eq!(keys, ["type", "zeta", "alpha", "capabilities"]);
        assert_eq!(l.plugins[0]["alpha"], json!({"x": [1, 2]}));
        assert_eq!(
            l.plugins[1],
            json!({"type": "portmap"}).as_object().unwrap().clone()
        );
    }

    #[test]
    fn cni_versions_picks_the_highest_supported() {
        let l = parse(json!({"name":"n","cniVersion":"0.4.0",
            "cniVersions":["1.0.0","0.3.1","2.0.0","1.1.0","1.5.0"],"plugins":[{"type":"x"}]}))
        .unwrap();
        assert_eq!(l.cni_version, Version::V1_1_0);
        // Newer than us and unknown entries are dropped; cniVersion joins in.
        let l = parse(json!({"name":"n","cniVersion":"1.0.0",
            "cniVersions":["0.3.1","3.0.0","0.5.0"],"plugins":[{"type":"x"}]}))
        .unwrap();
        assert_eq!(l.cni_version, Version::V1_0_0);
        let l =
            parse(json!({"name":"n","cniVersions":["0.4.0"],"plugins":[{"type":"x"}]})).unwrap();
        assert_eq!(l.cni_version, Version::V0_4_0);
        // Nothing usable at all: code 1.
        let e = parse(json!({"name":"n","cniVersions":["2.0.0"],"plugins":[{"type":"x"}]}))
            .unwrap_err();
        assert_eq!(e.code(), 1);
        // A malformed entry: code 7 naming it.
        let e = parse(json!({"name":"n","cniVersions":["1.0.0","x.y"],"plugins":[{"type":"x"}]}))
            .unwrap_err();
        assert_eq!((e.code(), config_key(&e)), (7, "cniVersions[1]"));
        let e =
            parse(json!({"name":"n","cniVersions":"1.0.0","plugins":[{"type":"x"}]})).unwrap_err();
        assert_eq!((e.code(), config_key(&e)), (7, "cniVersions"));
    }

    #[test]
    fn missing_cni_version_is_0_1_0_and_unsupported_is_code_1() {
        let l = parse(json!({"name":"n","plugins":[{"type":"x"}]})).unwrap();
        assert_eq!(l.cni_version, Version::V0_1_0);
        let e =
            parse(json!({"name":"n","cniVersion":"1.2.0","plugins":[{"type":"x"}]})).unwrap_err();
        assert_eq!(e.code(), 1);
        let e = parse(json!({"name":"n","cniVersion":1,"plugins":[{"type":"x"}]})).unwrap_err();
        assert_eq!((e.code(), config_key(&e)), (7, "cniVersion"));
    }

    #[test]
    fn bools_accept_strings_in_any_case() {
        let l = parse(
            json!({"name":"n","cniVersion":"1.1.0","disableCheck":"TRUE",
            "disableGC":"True","loadOnlyInlinedPlugins":"false","plugins":[{"type":"x"}]}),
        )
        .unwrap();
        assert!(l.disable_check && l.disable_gc && !l.load_only_inlined_plugins);
        for (key, bad, want) in [
            (
                "disableCheck",
                json!("yes"),
                "invalid value \"yes\", want true or false",
            ),
            ("disableGC", json!(1), "invalid type number, want a bool"),
            (
                "loadOnlyInlinedPlugins",
                json!(null),
                "invalid type null, want a bool",
            ),
        ] {
            let mut v = json!({"name":"n","cniVersion":"1.1.0","plugins":[{"type":"x"}]});
            v[key] = bad;
            let e = parse(v).unwrap_err();
            assert_eq!(e.code(), 7);
            assert_eq!(
                e.to_string(),
                format!("invalid network config: {key}: {want}")
            );
        }
    }

    #[test]
    fn invalid_lists_name_the_key() {
        let e = conf_list_from_bytes(b"{\"name\":").unwrap_err();
        assert_eq!(e.code(), 6);
        let e = conf_list_from_bytes(b"[1]").unwrap_err();
        assert_eq!(e.code(), 6);
        let e = parse(json!({"cniVersion":"1.0.0","plugins":[{"type":"x"}]})).unwrap_err();
        assert_eq!(e.to_string(), "invalid network config: name: no name");
        let e = parse(json!({"name":7,"plugins":[{"type":"x"}]})).unwrap_err();
        assert_eq!((e.code(), config_key(&e)), (7, "name"));
        let e = parse(json!({"name":"n","plugins":[]})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid network config: plugins: no plugins in list"
        );
        let e = parse(json!({"name":"n","plugins":{"type":"x"}})).unwrap_err();
        assert_eq!((e.code(), config_key(&e)), (7, "plugins"));
        let e = parse(json!({"name":"n","plugins":[{"type":"x"},{"mtu":1500}]})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid network config: plugins[1].type: missing 'type'"
        );
        let e = parse(json!({"name":"n","plugins":[{"type":"x","capabilities":{"mac":"yes"}}]}))
            .unwrap_err();
        assert_eq!(
            (e.code(), config_key(&e)),
            (7, "plugins[0].capabilities.mac")
        );
        let e = parse(json!({"name":"n","plugins":[{"type":"x","ipam":{"type":3}}]})).unwrap_err();
        assert_eq!((e.code(), config_key(&e)), (7, "plugins[0].ipam.type"));
        let e = parse(json!({"name":"n","plugins":[5]})).unwrap_err();
        assert_eq!((e.code(), config_key(&e)), (7, "plugins[0]"));
        let e = parse(json!({"name":"n","loadOnlyInlinedPlugins":true})).unwrap_err();
        assert_eq!((e.code(), config_key(&e)), (7, "plugins"));
        // No plugins key at all parses (Go's behaviour); loading rejects it.
        assert!(parse(json!({"name":"n"})).unwrap().plugins.is_empty());
    }

    #[test]
    fn single_conf_is_upconverted() {
        let l = conf_from_single_bytes(
            br#"{"cniVersion":"0.4.0","name":"legacy","type":"bridge","bridge":"cni0"}"#,
        )
        .unwrap();
        assert_eq!(
            (l.name.as_str(), l.cni_version),
            ("legacy", Version::V0_4_0)
        );
        assert_eq!(
            gojson::parse_value(&l.bytes).unwrap(),
            json!({"cniVersion":"0.4.0","name":"legacy",
                   "plugins":[{"cniVersion":"0.4.0","name":"legacy","type":"bridge","bridge":"cni0"}]})
        );
        assert_eq!(l.plugins[0]["bridge"], "cni0");
        let e = conf_from_single_bytes(br#"{"cniVersion":"0.4.0","name":"x"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid network config: type: missing 'type'"
        );
    }

    #[test]
    fn load_takes_the_first_match_in_lexical_order() {
        let d = tempdir("order");
        let list = |name: &str, tag: &str| json!({"cniVersion":"1.0.0","name":name,"plugins":[{"type":"x","tag":tag}]});
        write(&d.join("20-b.conflist"), &list("net", "second"));
        write(&d.join("10-a.conflist"), &list("net", "first"));
        write(&d.join("05-other.conflist"), &list("other", "other"));
        write(
            &d.join("00-net.conf"),
            &json!({"name":"net","type":"legacy"}),
        );
        std::fs::create_dir(d.join("99-dir.conflist")).unwrap();
        let l = load_conf_list(&d, "net").unwrap();
        assert_eq!(l.plugins[0]["tag"], "first");
        assert_eq!(l.bytes, std::fs::read(d.join("10-a.conflist")).unwrap());
        assert_eq!(
            load_conf_list(&d, "other").unwrap().plugins[0]["tag"],
            "other"
        );
        assert_eq!(
            conf_files(&d, &[".conflist"]).unwrap(),
            vec![
                d.join("05-other.conflist"),
                d.join("10-a.conflist"),
                d.join("20-b.conflist")
            ]
        );
    }

    #[test]
    fn a_broken_earlier_file_aborts_the_load() {
        let d = tempdir("broken");
        std::fs::write(d.join("01-broken.conflist"), b"{not json").unwrap();
        write(
            &d.join("02-net.conflist"),
            &json!({"cniVersion":"1.0.0","name":"net","plugins":[{"type":"x"}]}),
        );
        let e = load_conf_list(&d, "net").unwrap_err();
        assert_eq!(e.code(), 6);
        assert!(e.to_string().contains("01-broken.conflist"), "{e}");
    }

    #[test]
    fn falls_back_to_conf_and_json_files() {
        let d = tempdir("fallback");
        write(
            &d.join("10-other.conflist"),
            &json!({"cniVersion":"1.0.0","name":"other","plugins":[{"type":"x"}]}),
        );
        write(
            &d.join("b.json"),
            &json!({"cniVersion":"0.3.1","name":"net","type":"json"}),
        );
        write(
            &d.join("c.conf"),
            &json!({"cniVersion":"0.3.1","name":"net","type":"conf2"}),
        );
        write(
            &d.join("a.conf"),
            &json!({"cniVersion":"0.3.1","name":"x","type":"conf"}),
        );
        let l = load_conf_list(&d, "net").unwrap();
        assert_eq!(l.plugins.len(), 1);
        assert_eq!(l.plugins[0]["type"], "json");
        assert_eq!(l.cni_version, Version::V0_3_1);

        let e = load_conf_list(&d, "missing").unwrap_err();
        assert_eq!(e.code(), 7);
        assert_eq!(
            e.to_string(),
            format!(
                "invalid network config: name: no network configuration named \"missing\" in {}",
                d.display()
            )
        );
        let empty = tempdir("fallback-empty");
        let e = load_conf_list(&empty.join("nope"), "net").unwrap_err();
        assert!(e.to_string().contains("no configurations found in"), "{e}");
    }

    #[test]
    fn sibling_plugin_confs_are_appended_unless_inlined_only() {
        let d = tempdir("sibling");
        write(
            &d.join("net.conflist"),
            &json!({"cniVersion":"1.0.0","name":"net","plugins":[{"type":"inline"}]}),
        );
        std::fs::create_dir(d.join("net")).unwrap();
        write(&d.join("net/20-b.conf"), &json!({"type":"b"}));
        write(&d.join("net/10-a.conf"), &json!({"type":"a"}));
        write(&d.join("net/ignored.json"), &json!({"type":"no"}));
        let l = load_conf_list(&d, "net").unwrap();
        let types: Vec<&str> = l
            .plugins
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["inline", "a", "b"]);

        write(
            &d.join("net.conflist"),
            &json!({"cniVersion":"1.0.0","name":"net","loadOnlyInlinedPlugins":"true",
                    "plugins":[{"type":"inline"}]}),
        );
        assert_eq!(load_conf_list(&d, "net").unwrap().plugins.len(), 1);

        // Only sibling plugins: fine. None at all: "no plugin configs found".
        write(
            &d.join("net.conflist"),
            &json!({"cniVersion":"1.0.0","name":"net"}),
        );
        assert_eq!(load_conf_list(&d, "net").unwrap().plugins.len(), 2);
        write(
            &d.join("lonely.conflist"),
            &json!({"cniVersion":"1.0.0","name":"lonely"}),
        );
        let e = load_conf_list(&d, "lonely").unwrap_err();
        assert_eq!((e.code(), config_key(&e)), (7, "plugins"));
        assert!(e.to_string().contains("no plugin configs found"), "{e}");
    }
}
