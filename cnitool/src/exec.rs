//! Running a network configuration list: what Go's `libcni/api.go` does for
//! ADD, CHECK, DEL, GC and STATUS. Builds each plugin's stdin from the list
//! (inserting `cniVersion`, `name`, `prevResult`, `runtimeConfig`), sets the
//! six `CNI_*` variables, runs the plugins in order (DEL in reverse), and
//! keeps the result cache of [`super::cache`] in step.
//!
//! Deliberately like Go: a failed ADD is **not** rolled back here (no
//! automatic DEL, containernetworking/cni#797); the spec makes the runtime
//! responsible for DELing every ADD, failed or not. DEL stops at the first
//! failing plugin and keeps the cache so a retry still has the `prevResult`.

use super::cache::{CacheEntry, CacheKey, Cached, ResultCache};
use super::conf::{NetworkConfigList, PluginKeys};
use libcni::error::{Error, ErrorList, ErrorResult, Result};
use libcni::invoke::{exec_plugin, find_in_path};
use libcni::skel::Command;
use libcni::types::{Attachment, CniResult};
use libcni::version::Version;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// Go libcni's default cache directory.
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";

/// The arguments of one attachment (Go's `RuntimeConf`), apart from the
/// network configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeConf {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS` pairs, in order.
    pub args: Vec<(String, String)>,
    /// Capability arguments; a plugin gets in `runtimeConfig` only those its
    /// `capabilities` enable.
    pub capability_args: Map<String, Value>,
}

/// Where plugins are found and results cached (Go's `CNIConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniConfig {
    /// The `CNI_PATH` directories, searched in order.
    pub path: Vec<PathBuf>,
    /// The cache directory; results go to `<cache_dir>/results`.
    pub cache_dir: PathBuf,
}

/// How Go's error messages name a verb: `failed (add)`, `failed (delete)`.
fn label(verb: Command) -> &'static str {
    match verb {
        Command::Add => "add",
        Command::Check => "check",
        Command::Del => "delete",
        Command::Gc => "gc",
        Command::Status => "status",
        Command::Version => "version",
    }
}

impl CniConfig {
    pub fn new(path: Vec<PathBuf>, cache_dir: impl Into<PathBuf>) -> CniConfig {
        CniConfig {
            path,
            cache_dir: cache_dir.into(),
        }
    }

    /// The result cache under [`CniConfig::cache_dir`].
    pub fn cache(&self) -> ResultCache {
        ResultCache::new(&self.cache_dir)
    }

    /// ADD: validates the container ID, network name and interface name,
    /// runs the plugins in order, each getting the previous one's result as
    /// `prevResult` (in the list's version), and caches the final result once
    /// all succeeded. A result without `cniVersion` is read as the list's
    /// version. A failure names the plugin and keeps the plugin's code:
    /// `plugin type="x" name="net" failed (add): ...`. Nothing is rolled back.
    pub fn add_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<CniResult> {
        cache_key(list, rt)?;
        ensure_plugins(list)?;
        let version = list.cni_version;
        let mut last: Option<(CniResult, Value)> = None;
        for plugin in &list.plugins {
            let prev = last.as_ref().map(|(_, json)| json);
            let stdin = plugin_stdin(list, plugin, prev, Some(rt));
            let out = self.run(list, plugin, Command::Add, Some(rt), &stdin)?;
            let parsed = CniResult::from_slice(&out, version)
                .and_then(|(result, _)| Ok((result.to_json(version)?, result)));
            let (json, result) =
                parsed.map_err(|e| plugin_failed(list, plugin, Command::Add, e))?;
            last = Some((result, json));
        }
        let Some((result, json)) = last else {
            return Err(no_plugins());
        };
        let entry = CacheEntry {
            container_id: rt.container_id.clone(),
            config: list.bytes.clone(),
            ifname: rt.ifname.clone(),
            network_name: list.name.clone(),
            netns: rt.netns.clone(),
            cni_args: rt.args.clone(),
            capability_args: rt.capability_args.clone(),
            result: Some(json),
        };
        self.cache().write(&entry).map_err(|e| {
            with_context(
                e,
                &format!("failed to set network {:?} cached result", list.name),
            )
        })?;
        Ok(result)
    }

    /// CHECK: needs a list version of 0.4.0 or later (else code 1, nothing
    /// run); with `disableCheck` succeeds without running anything.
    /// Otherwise runs the plugins in order with the cached result as
    /// `prevResult` (none when there is no readable cache); the first error
    /// stops.
    pub fn check_network_list(&self, list: &NetworkConfigList, rt: &RuntimeConf) -> Result<()> {
        if !list.cni_version.allows_check() {
            return Err(Error::IncompatibleVersion {
                msg: format!(
                    "configuration version {:?} does not support the CHECK command",
                    list.cni_version.as_str()
                ),
                details: "CHECK needs cniVersion 0.4.0 or later".into(),
            });
        }
        if list.disable_check {
            return Ok(());
        }
        let key = cache_key(list, rt)?;
        ensure_plugins(list)?;
        let prev = prev_result(&self.cache().read(&key), list.cni_version).map_err(|e| {
            with_context(
                e,
                &format!("failed to get network {:?} cached result", list.name),
            )
        })?;
        for plugin in &list.plugins {
            let stdin = plugin_stdin(list, plugin, prev.as_ref(), Some(rt));
            self.run(list, plugin, Command::Check, Some(rt), &stdin)?;
        }
        Ok(())
    }

    /// DEL: at 0.4.0 or later the cached result is the `prevResult` (an
    /// unreadable or unconvertible cache is deleted and DEL goes on without
    /// one). Plugins run in reverse order and the first error stops, keeping
    /// the cache for a retry; on success the cache file is removed.
    pub fn del_network_list(&self, list: &NetworkConfigList, rt: &RuntimeConf) -> Result<()> {
        let key = cache_key(list, rt)?;
        ensure_plugins(list)?;
        let cache = self.cache();
        let mut prev = None;
        if list.cni_version.del_has_prev_result() {
            let cached = cache.read(&key);
            match prev_result(&cached, list.cni_version) {
                Ok(p) if !matches!(cached, Cached::Corrupt(_)) => prev = p,
                _ => {
                    let _ = cache.remove(&key);
                }
            }
        }
        for plugin in list.plugins.iter().rev() {
            let stdin = plugin_stdin(list, plugin, prev.as_ref(), Some(rt));
            self.run(list, plugin, Command::Del, Some(rt), &stdin)?;
        }
        // As Go: a cache that cannot be removed does not fail the DEL.
        let _ = cache.remove(&key);
        Ok(())
    }

    /// GC: with `disableGC` does nothing. Otherwise DELs (with the current
    /// config, and the cached netns, args and capability args) every cached
    /// attachment of this network not in `valid` (every one when `valid` is
    /// `None`), then at 1.1.0 or later sends GC to each plugin in order with
    /// `cni.dev/valid-attachments` and the legacy `cni.dev/attachments` (the
    /// same list; both left out when `valid` is `None`, as Go does). Goes on
    /// past failures and reports them all together, with the first one's code.
    pub fn gc_network_list(
        &self,
        list: &NetworkConfigList,
        valid: Option<&[Attachment]>,
    ) -> Result<()> {
        if list.disable_gc {
            return Ok(());
        }
        ensure_plugins(list)?;
        let mut errors = ErrorList::new();
        match self.cache().attachments(&list.name) {
            Ok(cached) => {
                for entry in cached {
                    let attachment = Attachment {
                        container_id: entry.container_id.clone(),
                        ifname: entry.ifname.clone(),
                    };
                    if valid.is_some_and(|v| v.contains(&attachment)) {
                        continue;
                    }
                    let rt = RuntimeConf {
                        container_id: entry.container_id,
                        netns: entry.netns,
                        ifname: entry.ifname,
                        args: entry.cni_args,
                        capability_args: entry.capability_args,
                    };
                    if let Err(e) = self.del_network_list(list, &rt) {
                        errors.push(with_context(
                            e,
                            &format!(
                                "failed to delete stale attachment {} {}",
                                rt.container_id, rt.ifname
                            ),
                        ));
                    }
                }
            }
            Err(e) => errors.push(with_context(e, "failed to list cached attachments")),
        }
        if list.cni_version.allows_gc_and_status() {
            let attachments = valid.map(|v| {
                Value::Array(
                    v.iter()
                        .map(|a| {
                            let mut m = Map::new();
                            m.insert("containerID".into(), a.container_id.clone().into());
                            m.insert("ifname".into(), a.ifname.clone().into());
                            Value::Object(m)
                        })
                        .collect(),
                )
            });
            for plugin in &list.plugins {
                let mut stdin = plugin_stdin(list, plugin, None, None);
                if let Some(a) = &attachments {
                    stdin.insert("cni.dev/valid-attachments".into(), a.clone());
                    stdin.insert("cni.dev/attachments".into(), a.clone());
                }
                if let Err(e) = self.run(list, plugin, Command::Gc, None, &stdin) {
                    errors.push(e);
                }
            }
        }
        errors.finish_joined()
    }

    /// STATUS: below 1.1.0 succeeds without running anything (as Go does);
    /// otherwise asks each plugin in order and returns the first error with
    /// its code (50/51 stay 50/51).
    pub fn status_network_list(&self, list: &NetworkConfigList) -> Result<()> {
        if !list.cni_version.allows_gc_and_status() {
            return Ok(());
        }
        ensure_plugins(list)?;
        for plugin in &list.plugins {
            let stdin = plugin_stdin(list, plugin, None, None);
            self.run(list, plugin, Command::Status, None, &stdin)?;
        }
        Ok(())
    }

    /// The cached ADD result of `rt` on `list`, in the list's version (Go's
    /// `GetNetworkListCachedResult`). `None` when there is no readable cache.
    pub fn cached_result(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<CniResult>> {
        let key = cache_key(list, rt)?;
        match prev_result(&self.cache().read(&key), list.cni_version)? {
            Some(v) => Ok(Some(CniResult::from_json(&v, list.cni_version)?.0)),
            None => Ok(None),
        }
    }

    /// The config bytes and runtime arguments an ADD ran with (Go's
    /// `GetNetworkListCachedConfig`): `rt` with the cached args and
    /// capability args. `None` without a readable `cniCacheV1` entry.
    pub fn cached_config(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<(Vec<u8>, RuntimeConf)>> {
        let key = cache_key(list, rt)?;
        let Cached::Entry(entry) = self.cache().read(&key) else {
            return Ok(None);
        };
        let entry = *entry;
        let mut cached_rt = rt.clone();
        if !entry.cni_args.is_empty() {
            cached_rt.args = entry.cni_args;
        }
        cached_rt.capability_args = entry.capability_args;
        Ok(Some((entry.config, cached_rt)))
    }

    /// The versions a plugin of `list` says it speaks (VERSION), as
    /// `supportedVersions` lists them.
    pub fn supported_versions(
        &self,
        list: &NetworkConfigList,
        plugin: &Map<String, Value>,
    ) -> Result<Vec<String>> {
        let mut stdin = Map::new();
        stdin.insert("cniVersion".into(), list.cni_version.as_str().into());
        let out = self.run(list, plugin, Command::Version, None, &stdin)?;
        let v = libcni::gojson::parse_value(&out)
            .map_err(|e| Error::Decode(format!("VERSION answer: {e}")))?;
        Ok(match libcni::gojson::lookup(&v, "supportedVersions") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        })
    }

    /// Finds and runs one plugin; every error names the plugin and keeps its
    /// code. `rt` is `None` for GC and STATUS, which get empty
    /// `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME` and `CNI_ARGS`.
    fn run(
        &self,
        list: &NetworkConfigList,
        plugin: &Map<String, Value>,
        verb: Command,
        rt: Option<&RuntimeConf>,
        stdin: &Map<String, Value>,
    ) -> Result<Vec<u8>> {
        let fail = |e| plugin_failed(list, plugin, verb, e);
        let path = find_in_path(&plugin_type(plugin), &self.path).map_err(fail)?;
        let stdin = serde_json::to_vec(stdin)
            .map_err(|e| fail(Error::Internal(format!("encoding plugin config: {e}"))))?;
        let empty = RuntimeConf::default();
        let rt = rt.unwrap_or(&empty);
        let args = rt
            .args
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";");
        let cni_path = self
            .path
            .iter()
            .map(|p| p.to_string_lossy())
            .collect::<Vec<_>>()
            .join(":");
        let env = [
            ("CNI_COMMAND", verb.as_str()),
            ("CNI_CONTAINERID", rt.container_id.as_str()),
            ("CNI_NETNS", rt.netns.as_str()),
            ("CNI_IFNAME", rt.ifname.as_str()),
            ("CNI_ARGS", args.as_str()),
            ("CNI_PATH", cni_path.as_str()),
        ];
        exec_plugin(&path, &env, &stdin).map_err(fail)
    }
}

/// Validates the parts of the cache file name, which are exactly what the
/// spec requires of `CNI_CONTAINERID`, the network name and `CNI_IFNAME`.
fn cache_key(list: &NetworkConfigList, rt: &RuntimeConf) -> Result<CacheKey> {
    CacheKey::new(&list.name, &rt.container_id, &rt.ifname)
}

fn ensure_plugins(list: &NetworkConfigList) -> Result<()> {
    if list.plugins.is_empty() {
        return Err(no_plugins());
    }
    Ok(())
}

fn no_plugins() -> Error {
    Error::config("plugins", "no plugins in list")
}

/// The plugin's `type` (checked to be there when the list was loaded).
fn plugin_type(plugin: &Map<String, Value>) -> String {
    PluginKeys::of(plugin, "")
        .map(|k| k.plugin_type)
        .unwrap_or_default()
}

/// A plugin's stdin: `cniVersion` and `name` of the list, then the plugin's
/// own keys as configured (`capabilities` included, as libcni leaves it),
/// then `prevResult` if any, then `runtimeConfig` with the capability
/// arguments the plugin enabled and the runtime supplied (only if there is at
/// least one; it then replaces a static `runtimeConfig`).
pub fn plugin_stdin(
    list: &NetworkConfigList,
    plugin: &Map<String, Value>,
    prev_result: Option<&Value>,
    rt: Option<&RuntimeConf>,
) -> Map<String, Value> {
    let mut stdin = Map::new();
    stdin.insert("cniVersion".into(), list.cni_version.as_str().into());
    stdin.insert("name".into(), list.name.clone().into());
    for (k, v) in plugin {
        if k != "cniVersion" && k != "name" {
            stdin.insert(k.clone(), v.clone());
        }
    }
    if let Some(prev) = prev_result {
        stdin.insert("prevResult".into(), prev.clone());
    }
    if let Some(rt) = rt {
        let mut runtime_config = Map::new();
        let caps = PluginKeys::of(plugin, "")
            .map(|k| k.capabilities)
            .unwrap_or_default();
        for (cap, enabled) in caps {
            if !enabled {
                continue;
            }
            if let Some(arg) = rt.capability_args.get(&cap) {
                runtime_config.insert(cap, arg.clone());
            }
        }
        if !runtime_config.is_empty() {
            stdin.insert("runtimeConfig".into(), Value::Object(runtime_config));
        }
    }
    stdin
}

/// The cached result converted to `version`; `None` when there is none.
fn prev_result(cached: &Cached, version: Version) -> Result<Option<Value>> {
    match cached.result() {
        None => Ok(None),
        Some(raw) => {
            let (result, _) = CniResult::from_json(raw, version)?;
            result.to_json(version).map(Some)
        }
    }
}

/// `plugin type="x" name="net" failed (verb): <inner>`, keeping the inner
/// error's code and details.
fn plugin_failed(
    list: &NetworkConfigList,
    plugin: &Map<String, Value>,
    verb: Command,
    e: Error,
) -> Error {
    with_context(
        e,
        &format!(
            "plugin type={:?} name={:?} failed ({})",
            plugin_type(plugin),
            list.name,
            label(verb)
        ),
    )
}

/// Prefixes an error's message, keeping its code (and a plugin's details).
fn with_context(e: Error, context: &str) -> Error {
    let code = e.code();
    let (msg, details, cni_version) = match e {
        Error::Plugin(inner) => (inner.msg, inner.details, inner.cni_version),
        other => (other.to_string(), String::new(), String::new()),
    };
    Error::Plugin(ErrorResult {
        cni_version,
        code,
        msg: format!("{context}: {msg}"),
        details,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::conf_list_from_bytes;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    /// A temp dir with fake plugins in `bin/` that log every call to
    /// `log/`: `calls` (one line `<plugin> <CNI_COMMAND> <CNI_CONTAINERID>
    /// <CNI_IFNAME>` per call), `<n>.stdin` and `<n>.env` (the six CNI_*
    /// variables) for the n-th call, counted from 1.
    struct Fixture {
        dir: PathBuf,
    }

    const RESULT_A: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/p1"}],"ips":[{"address":"10.1.0.2/24","gateway":"10.1.0.1","interface":0}]}"#;
    const RESULT_B: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/p1"}],"ips":[{"address":"10.1.0.2/24","gateway":"10.1.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}]}"#;

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            let dir = std::env::temp_dir()
                .join(format!("libcni-runtime-exec-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("bin")).unwrap();
            std::fs::create_dir_all(dir.join("log")).unwrap();
            Fixture { dir }
        }

        /// A plugin whose `case "$CNI_COMMAND"` body is `cases`.
        fn plugin(&self, name: &str, cases: &str) {
            let log = self.dir.join("log");
            let script = format!(
                r#"#!/bin/sh
d='{log}'
n=$(cat "$d/seq" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$d/seq"
cat > "$d/$n.stdin"
printf 'CNI_COMMAND=%s\nCNI_CONTAINERID=%s\nCNI_NETNS=%s\nCNI_IFNAME=%s\nCNI_ARGS=%s\nCNI_PATH=%s\n' \
  "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_NETNS" "$CNI_IFNAME" "$CNI_ARGS" "$CNI_PATH" > "$d/$n.env"
echo "{name} $CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME" >> "$d/calls"
case "$CNI_COMMAND" in
{cases}
esac
exit 0
"#,
                log = log.display()
            );
            let path = self.dir.join("bin").join(name);
            std::fs::write(&path, script).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }

        /// A plugin that prints `result` on ADD and succeeds otherwise.
        fn ok_plugin(&self, name: &str, result: &str) {
            self.plugin(name, &format!("ADD) echo '{result}' ;;"));
        }

        fn config(&self) -> CniConfig {
            CniConfig::new(vec![self.dir.join("bin")], self.dir.join("cache"))
        }

        fn calls(&self) -> Vec<String> {
            std::fs::read_to_string(self.dir.join("log/calls"))
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect()
        }

        fn stdin(&self, n: usize) -> Value {
            let bytes = std::fs::read(self.dir.join(format!("log/{n}.stdin"))).unwrap();
            libcni::gojson::parse_value(&bytes).unwrap()
        }

        fn env(&self, n: usize) -> String {
            std::fs::read_to_string(self.dir.join(format!("log/{n}.env"))).unwrap()
        }

        fn bin(&self) -> String {
            self.dir.join("bin").display().to_string()
        }

        fn cache_file(&self, net: &str, cid: &str, ifname: &str) -> PathBuf {
            self.dir
                .join("cache/results")
                .join(format!("{net}-{cid}-{ifname}"))
        }

        fn reset_log(&self) {
            let _ = std::fs::remove_dir_all(self.dir.join("log"));
            std::fs::create_dir_all(self.dir.join("log")).unwrap();
        }
    }

    fn list(v: Value) -> NetworkConfigList {
        conf_list_from_bytes(&serde_json::to_vec(&v).unwrap()).unwrap()
    }

    fn rt(cid: &str) -> RuntimeConf {
        RuntimeConf {
            container_id: cid.into(),
            netns: "/run/netns/p1".into(),
            ifname: "eth0".into(),
            args: vec![
                ("K8S_POD_NAME".into(), "web".into()),
                ("IgnoreUnknown".into(), "1".into()),
            ],
            capability_args: json!({
                "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
                "mac": "c2:11:22:33:44:55",
                "ips": ["10.1.0.9/24"]
            })
            .as_object()
            .unwrap()
            .clone(),
        }
    }

    fn two_plugin_list(version: &str) -> NetworkConfigList {
        list(json!({
            "cniVersion": version, "name": "net1",
            "plugins": [
                {"type": "a", "keep": {"x": 1}},
                {"type": "b", "capabilities": {"portMappings": true, "mac": false, "bandwidth": true}}
            ]
        }))
    }

    fn env_text(cmd: &str, cid: &str, netns: &str, ifname: &str, args: &str, path: &str) -> String {
        format!(
            "CNI_COMMAND={cmd}\nCNI_CONTAINERID={cid}\nCNI_NETNS={netns}\nCNI_IFNAME={ifname}\nCNI_ARGS={args}\nCNI_PATH={path}\n"
        )
    }

    fn json_of(s: &str) -> Value {
        libcni::gojson::parse_value(s.as_bytes()).unwrap()
    }

    /// RESULT_x as the runtime re-encodes it at 1.0.0 (`dns` always present).
    fn encoded(s: &str) -> Value {
        let mut v = json_of(s);
        v["dns"] = json!({});
        v
    }

    #[test]
    fn add_threads_prev_result_and_sets_env_and_runtime_config() {
        let f = Fixture::new("add");
        f.ok_plugin("a", RESULT_A);
        f.ok_plugin("b", RESULT_B);
        let l = two_plugin_list("1.0.0");
        let result = f.config().add_network_list(&l, &rt("c1")).unwrap();

        assert_eq!(f.calls(), ["a ADD c1 eth0", "b ADD c1 eth0"]);
        // First plugin: no prevResult, no runtimeConfig (no capabilities).
        assert_eq!(
            f.stdin(1),
            json!({"cniVersion": "1.0.0", "name": "net1", "type": "a", "keep": {"x": 1}})
        );
        // Second: the first's result, and only the enabled, supplied capability.
        assert_eq!(
            f.stdin(2),
            json!({
                "cniVersion": "1.0.0", "name": "net1", "type": "b",
                "capabilities": {"portMappings": true, "mac": false, "bandwidth": true},
                "prevResult": encoded(RESULT_A),
                "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}
            })
        );
        let want_env = env_text(
            "ADD",
            "c1",
            "/run/netns/p1",
            "eth0",
            "K8S_POD_NAME=web;IgnoreUnknown=1",
            &f.bin(),
        );
        assert_eq!(f.env(1), want_env);
        assert_eq!(f.env(2), want_env);
        // The result is the last plugin's.
        assert_eq!(result.to_json(Version::V1_0_0).unwrap(), encoded(RESULT_B));

        // The cache holds the final result, the list bytes and the runtime args.
        let cached: Value = libcni::gojson::parse_value(
            &std::fs::read(f.cache_file("net1", "c1", "eth0")).unwrap(),
        )
        .unwrap();
        assert_eq!(cached["kind"], "cniCacheV1");
        assert_eq!(cached["result"], encoded(RESULT_B));
        assert_eq!(cached["netns"], "/run/netns/p1");
        assert_eq!(
            cached["cniArgs"],
            json!([["K8S_POD_NAME", "web"], ["IgnoreUnknown", "1"]])
        );
        assert_eq!(cached["capabilityArgs"]["mac"], "c2:11:22:33:44:55");
        use base64::Engine;
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(cached["config"].as_str().unwrap())
                .unwrap(),
            l.bytes
        );
        assert_eq!(
            f.config().cached_result(&l, &rt("c1")).unwrap().unwrap(),
            result
        );
        let (bytes, cached_rt) = f.config().cached_config(&l, &rt("c1")).unwrap().unwrap();
        assert_eq!((bytes, cached_rt), (l.bytes.clone(), rt("c1")));
    }

    #[test]
    fn add_reads_a_versionless_result_as_the_list_version() {
        let f = Fixture::new("versionless");
        f.ok_plugin("a", r#"{"ips":[{"version":"4","address":"10.1.0.2/24"}]}"#);
        f.ok_plugin(
            "b",
            r#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.1.0.2/24"}]}"#,
        );
        let l = two_plugin_list("0.4.0");
        f.config().add_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(
            f.stdin(2)["prevResult"],
            json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.1.0.2/24"}], "dns": {}})
        );
        assert_eq!(f.stdin(2)["cniVersion"], "0.4.0");
    }

    #[test]
    fn add_errors_name_the_plugin_and_keep_the_code() {
        let f = Fixture::new("add-error");
        f.ok_plugin("a", RESULT_A);
        f.plugin(
            "b",
            r#"ADD) echo '{"code":11,"msg":"try later","details":"lock held"}'; exit 1 ;;"#,
        );
        let l = two_plugin_list("1.0.0");
        let e = f.config().add_network_list(&l, &rt("c1")).unwrap_err();
        assert_eq!(e.code(), 11);
        match &e {
            Error::Plugin(r) => {
                assert_eq!(
                    r.msg,
                    r#"plugin type="b" name="net1" failed (add): try later"#
                );
                assert_eq!(r.details, "lock held");
            }
            other => panic!("{other:?}"),
        }
        // No cache, and no automatic DEL.
        assert!(!f.cache_file("net1", "c1", "eth0").exists());
        assert_eq!(f.calls(), ["a ADD c1 eth0", "b ADD c1 eth0"]);

        // A missing binary: code 101, named.
        let missing = list(json!({"cniVersion":"1.0.0","name":"net1","plugins":[{"type":"nope"}]}));
        let e = f
            .config()
            .add_network_list(&missing, &rt("c1"))
            .unwrap_err();
        assert_eq!(e.code(), 101);
        assert!(
            e.to_string().starts_with(
                r#"plugin type="nope" name="net1" failed (add): failed to find plugin "nope""#
            ),
            "{e}"
        );
        // A result that is not JSON: code 6, named.
        f.plugin("garbage", "ADD) echo 'not json' ;;");
        let bad = list(json!({"cniVersion":"1.0.0","name":"net1","plugins":[{"type":"garbage"}]}));
        let e = f.config().add_network_list(&bad, &rt("c1")).unwrap_err();
        assert_eq!(e.code(), 6);
        assert!(e
            .to_string()
            .starts_with(r#"plugin type="garbage" name="net1" failed (add): "#));
    }

    #[test]
    fn invalid_identifiers_are_rejected_before_any_plugin_runs() {
        let f = Fixture::new("validate");
        f.ok_plugin("a", RESULT_A);
        f.ok_plugin("b", RESULT_B);
        let l = two_plugin_list("1.0.0");
        let mut r = rt("../c1");
        assert_eq!(f.config().add_network_list(&l, &r).unwrap_err().code(), 4);
        r.container_id = "c1".into();
        r.ifname = "a/b".into();
        assert_eq!(f.config().del_network_list(&l, &r).unwrap_err().code(), 4);
        let mut bad_name = l.clone();
        bad_name.name = "bad/name".into();
        assert_eq!(
            f.config()
                .add_network_list(&bad_name, &rt("c1"))
                .unwrap_err()
                .code(),
            7
        );
        assert!(f.calls().is_empty());
    }

    #[test]
    fn del_runs_in_reverse_with_the_cached_prev_result() {
        let f = Fixture::new("del");
        f.ok_plugin("a", RESULT_A);
        f.ok_plugin("b", RESULT_B);
        let l = two_plugin_list("1.0.0");
        let c = f.config();
        c.add_network_list(&l, &rt("c1")).unwrap();
        f.reset_log();
        c.del_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(f.calls(), ["b DEL c1 eth0", "a DEL c1 eth0"]);
        assert_eq!(
            f.stdin(1),
            json!({
                "cniVersion": "1.0.0", "name": "net1", "type": "b",
                "capabilities": {"portMappings": true, "mac": false, "bandwidth": true},
                "prevResult": encoded(RESULT_B),
                "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}
            })
        );
        assert_eq!(f.stdin(2)["prevResult"], encoded(RESULT_B));
        assert_eq!(
            f.env(1),
            env_text(
                "DEL",
                "c1",
                "/run/netns/p1",
                "eth0",
                "K8S_POD_NAME=web;IgnoreUnknown=1",
                &f.bin()
            )
        );
        assert!(!f.cache_file("net1", "c1", "eth0").exists());
        // DEL again: no cache, no prevResult, still success.
        f.reset_log();
        c.del_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(f.stdin(1).get("prevResult"), None);
    }

    #[test]
    fn del_stops_at_the_first_error_and_keeps_the_cache() {
        let f = Fixture::new("del-error");
        f.ok_plugin("a", RESULT_A);
        f.plugin(
            "b",
            &format!(
                r#"ADD) echo '{RESULT_B}' ;;
DEL) echo '{{"code":7,"msg":"bad config"}}'; exit 1 ;;"#
            ),
        );
        let l = two_plugin_list("1.0.0");
        let c = f.config();
        c.add_network_list(&l, &rt("c1")).unwrap();
        f.reset_log();
        let e = c.del_network_list(&l, &rt("c1")).unwrap_err();
        assert_eq!(e.code(), 7);
        assert_eq!(
            e.to_string(),
            r#"plugin type="b" name="net1" failed (delete): bad config"#
        );
        assert_eq!(f.calls(), ["b DEL c1 eth0"]);
        assert!(f.cache_file("net1", "c1", "eth0").exists());
        // The retry still gets the prevResult.
        f.ok_plugin("b", RESULT_B);
        f.reset_log();
        c.del_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(f.stdin(1)["prevResult"], encoded(RESULT_B));
        assert!(!f.cache_file("net1", "c1", "eth0").exists());
    }

    #[test]
    fn del_with_a_corrupt_cache_goes_on_without_prev_result() {
        let f = Fixture::new("del-corrupt");
        f.ok_plugin("a", RESULT_A);
        let l = list(json!({"cniVersion":"1.0.0","name":"net1","plugins":[{"type":"a"}]}));
        let path = f.cache_file("net1", "c1", "eth0");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for garbage in [
            &b""[..],
            b"{\"kind\":\"cniCacheV1\",\"resu",
            b"{\"cniVersion\":\"1.0.0\",\"ips\":7}",
        ] {
            std::fs::write(&path, garbage).unwrap();
            f.reset_log();
            f.config().del_network_list(&l, &rt("c1")).unwrap();
            assert_eq!(f.calls(), ["a DEL c1 eth0"]);
            assert_eq!(f.stdin(1).get("prevResult"), None);
            assert!(!path.exists());
        }
        // A legacy (result-only) cache is used as prevResult.
        std::fs::write(&path, RESULT_A).unwrap();
        f.reset_log();
        f.config().del_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(f.stdin(1)["prevResult"], encoded(RESULT_A));
        assert!(!path.exists());
    }

    #[test]
    fn del_below_0_4_0_sends_no_prev_result_but_removes_the_cache() {
        let f = Fixture::new("del-old");
        f.ok_plugin(
            "a",
            r#"{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.1.0.2/24"}]}"#,
        );
        let l = list(json!({"cniVersion":"0.3.1","name":"net1","plugins":[{"type":"a"}]}));
        f.config().add_network_list(&l, &rt("c1")).unwrap();
        assert!(f.cache_file("net1", "c1", "eth0").exists());
        f.reset_log();
        f.config().del_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(f.stdin(1).get("prevResult"), None);
        assert!(!f.cache_file("net1", "c1", "eth0").exists());
    }

    #[test]
    fn check_is_gated_by_version_and_disable_check() {
        let f = Fixture::new("check");
        f.ok_plugin("a", RESULT_A);
        f.ok_plugin("b", RESULT_B);
        let c = f.config();
        let e = c
            .check_network_list(&two_plugin_list("0.3.1"), &rt("c1"))
            .unwrap_err();
        assert_eq!(e.code(), 1);
        assert_eq!(
            e.to_string(),
            r#"configuration version "0.3.1" does not support the CHECK command"#
        );
        let mut disabled = two_plugin_list("1.0.0");
        disabled.disable_check = true;
        c.check_network_list(&disabled, &rt("c1")).unwrap();
        assert!(f.calls().is_empty());

        // No cache: CHECK runs in order without prevResult.
        let l = two_plugin_list("1.0.0");
        c.check_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(f.calls(), ["a CHECK c1 eth0", "b CHECK c1 eth0"]);
        assert_eq!(f.stdin(1).get("prevResult"), None);
        assert_eq!(
            f.env(1),
            env_text(
                "CHECK",
                "c1",
                "/run/netns/p1",
                "eth0",
                "K8S_POD_NAME=web;IgnoreUnknown=1",
                &f.bin()
            )
        );
        // After ADD: the cached result, in order.
        c.add_network_list(&l, &rt("c1")).unwrap();
        f.reset_log();
        c.check_network_list(&l, &rt("c1")).unwrap();
        assert_eq!(f.calls(), ["a CHECK c1 eth0", "b CHECK c1 eth0"]);
        assert_eq!(f.stdin(1)["prevResult"], encoded(RESULT_B));
        assert_eq!(f.stdin(2)["prevResult"], encoded(RESULT_B));
        assert_eq!(
            f.stdin(2)["runtimeConfig"]["portMappings"][0]["hostPort"],
            8080
        );

        // The first error stops.
        f.plugin(
            "a",
            r#"CHECK) echo '{"code":100,"msg":"eth0 is gone"}'; exit 1 ;;"#,
        );
        f.reset_log();
        let e = c.check_network_list(&l, &rt("c1")).unwrap_err();
        assert_eq!(e.code(), 100);
        assert_eq!(
            e.to_string(),
            r#"plugin type="a" name="net1" failed (check): eth0 is gone"#
        );
        assert_eq!(f.calls(), ["a CHECK c1 eth0"]);
    }

    #[test]
    fn gc_deletes_stale_attachments_and_sends_both_keys() {
        let f = Fixture::new("gc");
        f.ok_plugin("a", RESULT_A);
        f.ok_plugin("b", RESULT_B);
        let c = f.config();
        let l = two_plugin_list("1.1.0");
        let mut stale = rt("c2");
        stale.netns = "/run/netns/p2".into();
        stale.args = vec![("K".into(), "v".into())];
        stale.capability_args = json!({"portMappings": [{"hostPort": 9}]})
            .as_object()
            .unwrap()
            .clone();
        c.add_network_list(&l, &rt("c1")).unwrap();
        c.add_network_list(&l, &stale).unwrap();
        let other = list(json!({"cniVersion":"1.1.0","name":"net2","plugins":[{"type":"a"}]}));
        c.add_network_list(&other, &rt("c3")).unwrap();
        f.reset_log();

        let valid = [Attachment {
            container_id: "c1".into(),
            ifname: "eth0".into(),
        }];
        c.gc_network_list(&l, Some(&valid)).unwrap();
        assert_eq!(
            f.calls(),
            ["b DEL c2 eth0", "a DEL c2 eth0", "a GC  ", "b GC  "]
        );
        // The stale DEL uses the cached netns, args and capability args.
        assert_eq!(
            f.env(1),
            env_text("DEL", "c2", "/run/netns/p2", "eth0", "K=v", &f.bin())
        );
        assert_eq!(
            f.stdin(1)["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 9}]})
        );
        let mut prev = encoded(RESULT_B);
        prev["cniVersion"] = json!("1.1.0");
        assert_eq!(f.stdin(1)["prevResult"], prev);
        // GC: both keys, the same list; no runtimeConfig; empty CNI_* but PATH.
        assert_eq!(
            f.stdin(3),
            json!({
                "cniVersion": "1.1.0", "name": "net1", "type": "a", "keep": {"x": 1},
                "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}],
                "cni.dev/attachments": [{"containerID": "c1", "ifname": "eth0"}]
            })
        );
        assert_eq!(f.stdin(4).get("runtimeConfig"), None);
        assert_eq!(f.env(3), env_text("GC", "", "", "", "", &f.bin()));
        assert!(f.cache_file("net1", "c1", "eth0").exists());
        assert!(!f.cache_file("net1", "c2", "eth0").exists());
        assert!(f.cache_file("net2", "c3", "eth0").exists());

        // No valid set: every cached attachment of the network goes; no keys.
        f.reset_log();
        c.gc_network_list(&l, None).unwrap();
        assert_eq!(
            f.calls(),
            ["b DEL c1 eth0", "a DEL c1 eth0", "a GC  ", "b GC  "]
        );
        assert_eq!(
            f.stdin(3),
            json!({"cniVersion": "1.1.0", "name": "net1", "type": "a", "keep": {"x": 1}})
        );
        assert!(!f.cache_file("net1", "c1", "eth0").exists());
        assert!(f.cache_file("net2", "c3", "eth0").exists());
    }

    #[test]
    fn gc_below_1_1_0_only_deletes_and_disable_gc_does_nothing() {
        let f = Fixture::new("gc-old");
        f.ok_plugin("a", RESULT_A);
        f.ok_plugin("b", RESULT_B);
        let c = f.config();
        let l = two_plugin_list("1.0.0");
        c.add_network_list(&l, &rt("c1")).unwrap();
        f.reset_log();
        let mut disabled = l.clone();
        disabled.disable_gc = true;
        c.gc_network_list(&disabled, None).unwrap();
        assert!(f.calls().is_empty());
        assert!(f.cache_file("net1", "c1", "eth0").exists());
        c.gc_network_list(&l, Some(&[])).unwrap();
        assert_eq!(f.calls(), ["b DEL c1 eth0", "a DEL c1 eth0"]);
        assert!(!f.cache_file("net1", "c1", "eth0").exists());
    }

    #[test]
    fn gc_goes_on_past_errors_and_reports_them_together() {
        let f = Fixture::new("gc-errors");
        f.ok_plugin("a", RESULT_A);
        f.plugin(
            "b",
            &format!(
                r#"ADD) echo '{RESULT_B}' ;;
DEL) echo '{{"code":11,"msg":"del busy"}}'; exit 1 ;;
GC) echo '{{"code":5,"msg":"gc failed"}}'; exit 1 ;;"#
            ),
        );
        let c = f.config();
        let l = two_plugin_list("1.1.0");
        c.add_network_list(&l, &rt("c1")).unwrap();
        f.reset_log();
        let e = c.gc_network_list(&l, Some(&[])).unwrap_err();
        assert_eq!(e.code(), 11);
        assert_eq!(
            e.to_string(),
            concat!(
                r#"failed to delete stale attachment c1 eth0: plugin type="b" name="net1" failed (delete): del busy; "#,
                r#"plugin type="b" name="net1" failed (gc): gc failed"#
            )
        );
        // a was still GC'd after b's DEL failed; b was GC'd after a.
        assert_eq!(f.calls(), ["b DEL c1 eth0", "a GC  ", "b GC  "]);
        assert!(f.cache_file("net1", "c1", "eth0").exists());
    }

    #[test]
    fn status_runs_nothing_below_1_1_0_and_stops_at_the_first_error() {
        let f = Fixture::new("status");
        f.plugin("a", "");
        f.plugin(
            "b",
            r#"STATUS) echo '{"code":50,"msg":"no IPs left"}'; exit 1 ;;"#,
        );
        f.plugin("c", "");
        let c = f.config();
        let three = |v: &str| {
            list(json!({"cniVersion": v, "name": "net1",
                "plugins": [{"type": "a", "capabilities": {"mac": true}}, {"type": "b"}, {"type": "c"}]}))
        };
        c.status_network_list(&three("1.0.0")).unwrap();
        assert!(f.calls().is_empty());
        let e = c.status_network_list(&three("1.1.0")).unwrap_err();
        assert_eq!(e.code(), 50);
        assert_eq!(
            e.to_string(),
            r#"plugin type="b" name="net1" failed (status): no IPs left"#
        );
        assert_eq!(f.calls(), ["a STATUS  ", "b STATUS  "]);
        assert_eq!(
            f.stdin(1),
            json!({"cniVersion": "1.1.0", "name": "net1", "type": "a", "capabilities": {"mac": true}})
        );
        assert_eq!(f.env(1), env_text("STATUS", "", "", "", "", &f.bin()));
        f.plugin("b", "");
        f.reset_log();
        c.status_network_list(&three("1.1.0")).unwrap();
        assert_eq!(f.calls(), ["a STATUS  ", "b STATUS  ", "c STATUS  "]);
    }

    #[test]
    fn runtime_config_replaces_a_static_one_only_when_non_empty() {
        let l = list(json!({"cniVersion":"1.0.0","name":"n","plugins":[
            {"type":"a","cniVersion":"0.1.0","name":"ignored","runtimeConfig":{"static":1},
             "capabilities":{"mac":true}}]}));
        let mut r = rt("c1");
        let s = plugin_stdin(&l, &l.plugins[0], None, Some(&r));
        assert_eq!(
            Value::Object(s),
            json!({"cniVersion":"1.0.0","name":"n","type":"a",
                   "runtimeConfig":{"mac":"c2:11:22:33:44:55"},"capabilities":{"mac":true}})
        );
        r.capability_args.clear();
        let s = plugin_stdin(&l, &l.plugins[0], None, Some(&r));
        assert_eq!(s["runtimeConfig"], json!({"static": 1}));
    }
}
