//! The result cache of the runtime: what an ADD returned, with the config
//! and runtime arguments it ran with, so DEL and CHECK get a `prevResult`
//! and GC can find stale attachments.
//!
//! On-disk format and paths are Go libcni's (`cniCacheV1`), so a node can
//! switch between the Go and the Rust tooling in either direction:
//! `<cache_dir>/results/<network>-<containerID>-<ifname>`, directory 0700,
//! file 0600. Unlike Go, writes are atomic (temp file, rename), a
//! symlink is never followed, and an empty or corrupt file reads as
//! [`Cached::Corrupt`], never as an error, so a crash mid-write cannot make
//! a later DEL fail.

use base64::Engine;
use libcni::error::{Error, Result};
use libcni::files::{self, Contents, Durability, WriteStep};
use libcni::types::config::validate_ifname;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The `kind` of a Go libcni cache file.
pub const CACHE_KIND_V1: &str = "cniCacheV1";

/// Cache files larger than this are not ours; they read as corrupt.
const MAX_CACHE_FILE: u64 = 16 << 20;

/// The identity of one cache file, built only from validated parts: the
/// network name and container ID match the spec's name pattern and the
/// interface name passes `validate_ifname`, so the file name has no `/` and
/// cannot be `.` or `..`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    network: String,
    container_id: String,
    ifname: String,
}

impl CacheKey {
    /// Validates the parts: network name (code 7), container ID (3 or 4),
    /// interface name (4).
    pub fn new(network: &str, container_id: &str, ifname: &str) -> Result<CacheKey> {
        libcni::types::config::validate_network_name(network)?;
        libcni::types::config::validate_container_id(container_id)?;
        validate_ifname(ifname)?;
        Ok(CacheKey {
            network: network.into(),
            container_id: container_id.into(),
            ifname: ifname.into(),
        })
    }

    /// `<network>-<containerID>-<ifname>`.
    pub fn file_name(&self) -> String {
        format!("{}-{}-{}", self.network, self.container_id, self.ifname)
    }

    pub fn network(&self) -> &str {
        &self.network
    }

    pub fn container_id(&self) -> &str {
        &self.container_id
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }
}

/// One cached ADD (`cniCacheV1`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheEntry {
    pub container_id: String,
    /// The network configuration list bytes the ADD ran with.
    pub config: Vec<u8>,
    pub ifname: String,
    pub network_name: String,
    pub netns: String,
    pub cni_args: Vec<(String, String)>,
    pub capability_args: Map<String, Value>,
    /// The final ADD result, as JSON (in the list's version when we wrote it).
    pub result: Option<Value>,
}

/// What reading a cache file found.
#[derive(Debug, Clone, PartialEq)]
pub enum Cached {
    /// No file.
    Absent,
    /// A file that is not a readable cache entry (empty, truncated, garbage,
    /// a symlink, not a regular file); the string says why. Never an error:
    /// the caller carries on as if absent, and may delete it.
    Corrupt(String),
    /// A `cniCacheV1` entry.
    Entry(Box<CacheEntry>),
    /// The legacy format: the raw result only.
    Legacy(Value),
}

impl Cached {
    /// The cached result JSON, if any.
    pub fn result(&self) -> Option<&Value> {
        match self {
            Cached::Entry(e) => e.result.as_ref(),
            Cached::Legacy(v) => Some(v),
            Cached::Absent | Cached::Corrupt(_) => None,
        }
    }
}

/// The JSON layout of Go's `cachedInfo`, field order included.
#[derive(Serialize, Deserialize)]
struct CacheFile {
    kind: String,
    #[serde(rename = "containerId", default)]
    container_id: Option<String>,
    #[serde(default)]
    config: Option<String>,
    #[serde(rename = "ifName", default)]
    ifname: Option<String>,
    #[serde(rename = "networkName", default)]
    network_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netns: Option<String>,
    #[serde(rename = "cniArgs", default, skip_serializing_if = "Option::is_none")]
    cni_args: Option<Vec<(String, String)>>,
    #[serde(
        rename = "capabilityArgs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    capability_args: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Map<String, Value>>,
}

/// The result cache under one cache directory (Go's `CacheDir`, by default
/// `/var/lib/cni`).
#[derive(Debug, Clone)]
pub struct ResultCache {
    cache_dir: PathBuf,
}

impl ResultCache {
    pub fn new(cache_dir: impl Into<PathBuf>) -> ResultCache {
        ResultCache {
            cache_dir: cache_dir.into(),
        }
    }

    /// `<cache_dir>/results`.
    pub fn results_dir(&self) -> PathBuf {
        self.cache_dir.join("results")
    }

    /// The path of the cache file of `key`.
    pub fn path(&self, key: &CacheKey) -> PathBuf {
        self.results_dir().join(key.file_name())
    }

    /// Opens `<cache_dir>/results` (created 0700 with `create`), refusing a
    /// symlink there: a planted link must not redirect what we write, read
    /// or remove. `None` when it does not exist.
    fn open_results(&self, create: bool) -> Result<Option<OwnedFd>> {
        let dir = self.results_dir();
        if create {
            files::create_dir_all(&self.cache_dir, 0o700).map_err(|e| {
                Error::io(
                    format!("creating cache directory {}", self.cache_dir.display()),
                    e,
                )
            })?;
        }
        files::open_subdir_nofollow(&self.cache_dir, "results", create.then_some(0o700)).map_err(
            |e| {
                let why = match e {
                    Errno::ELOOP | Errno::ENOTDIR => {
                        std::io::Error::other("it is a symlink or not a directory: refused")
                    }
                    e => std::io::Error::from(e),
                };
                Error::io(format!("opening cache directory {}", dir.display()), why)
            },
        )
    }

    /// Writes `entry` atomically under the key its own fields give
    /// ([`files::replace_at`]: a temp file in the same directory, O_EXCL,
    /// O_NOFOLLOW, 0600, renamed over the old file; a symlink there is
    /// replaced, not followed). The directory is created 0700 if missing,
    /// and refused if it is a symlink.
    ///
    /// Not fsynced, as Go libcni does not: a killed process never leaves a
    /// partial file, and what a power loss can leave (an empty file) reads
    /// as [`Cached::Corrupt`], which DEL deletes and goes on without, as Go
    /// does; the netns it described is gone with the reboot anyway. Two
    /// fsyncs cost every pod start 0.4 ms here and milliseconds on a disk
    /// with a journal.
    pub fn write(&self, entry: &CacheEntry) -> Result<()> {
        let key = CacheKey::new(&entry.network_name, &entry.container_id, &entry.ifname)?;
        let bytes = encode(entry)?;
        let dir = self.results_dir();
        let fd = self.open_results(true)?.ok_or_else(|| {
            Error::io(
                format!("creating cache directory {}", dir.display()),
                std::io::Error::from(Errno::ENOENT),
            )
        })?;
        let name = key.file_name();
        files::replace_hidden_at(fd.as_fd(), &name, &bytes, Durability::ProcessCrash).map_err(
            |e| {
                if e.step == WriteStep::CreateTemp {
                    Error::io(
                        format!("creating cache temp file {}", dir.join(&e.temp).display()),
                        e.source,
                    )
                } else {
                    Error::io(
                        format!("writing cache file {}", dir.join(&name).display()),
                        e.source,
                    )
                }
            },
        )?;
        Ok(())
    }

    /// Reads the cache file of `key`. Never fails: a missing file is
    /// [`Cached::Absent`], anything unreadable is [`Cached::Corrupt`].
    pub fn read(&self, key: &CacheKey) -> Cached {
        match self.open_results(false) {
            Ok(Some(fd)) => read_at(fd.as_fd(), &key.file_name(), &self.path(key)),
            Ok(None) => Cached::Absent,
            Err(e) => Cached::Corrupt(e.to_string()),
        }
    }

    /// Removes the cache file of `key`; a missing one is success.
    pub fn remove(&self, key: &CacheKey) -> Result<()> {
        let Some(fd) = self.open_results(false)? else {
            return Ok(());
        };
        match unlinkat(
            fd.as_fd(),
            key.file_name().as_str(),
            UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(Error::io(
                format!("removing cache file {}", self.path(key).display()),
                e.into(),
            )),
        }
    }

    /// The cached attachments of `network`, sorted by file name: every
    /// readable `cniCacheV1` file named `<network>-*` whose `networkName` is
    /// `network` and whose name is the one its own fields give (so a DEL
    /// from it removes that very file). Others are skipped.
    pub fn attachments(&self, network: &str) -> Result<Vec<CacheEntry>> {
        libcni::types::config::validate_network_name(network)?;
        Ok(self
            .listed(&format!("{network}-"))?
            .into_iter()
            .filter(|(e, _)| e.network_name == network)
            .map(|(e, _)| e)
            .collect())
    }

    /// Every cached attachment of every network (the node operator's
    /// view), with its file's modification time, sorted by file name; the
    /// same files [`ResultCache::attachments`] reads.
    pub fn every_attachment(&self) -> Result<Vec<(CacheEntry, std::time::SystemTime)>> {
        self.listed("")
    }

    /// The readable `cniCacheV1` files whose name starts with `prefix` and
    /// is the one their own fields give.
    fn listed(&self, prefix: &str) -> Result<Vec<(CacheEntry, std::time::SystemTime)>> {
        let dir = self.results_dir();
        let Some(fd) = self.open_results(false)? else {
            return Ok(Vec::new());
        };
        let listing = Dir::openat(
            fd.as_fd(),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e.into()))?;
        let mut names: Vec<String> = listing
            .into_iter()
            .filter_map(|e| {
                let e = e.ok()?;
                e.file_name().to_str().ok().map(str::to_string)
            })
            .filter(|n| n.starts_with(prefix) && !n.starts_with('.'))
            .collect();
        names.sort();
        let mut found = Vec::new();
        for name in names {
            let Cached::Entry(entry) = read_at(fd.as_fd(), &name, &dir.join(&name)) else {
                continue;
            };
            match CacheKey::new(&entry.network_name, &entry.container_id, &entry.ifname) {
                Ok(key) if key.file_name() == name => {
                    let modified = nix::sys::stat::fstatat(
                        fd.as_fd(),
                        name.as_str(),
                        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .map(|st| {
                        std::time::UNIX_EPOCH
                            + std::time::Duration::new(
                                st.st_mtime.max(0) as u64,
                                st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
                            )
                    })
                    .unwrap_or(std::time::UNIX_EPOCH);
                    found.push((*entry, modified))
                }
                _ => continue,
            }
        }
        Ok(found)
    }
}

/// The exact bytes of a `cniCacheV1` file. Maps are written with sorted keys,
/// as Go's encoder writes them.
fn encode(entry: &CacheEntry) -> Result<Vec<u8>> {
    let result = match &entry.result {
        None => None,
        Some(Value::Object(m)) => Some(sorted_map(m)),
        Some(other) => {
            return Err(Error::Internal(format!(
                "cached result must be a JSON object, not {other}"
            )))
        }
    };
    let file = CacheFile {
        kind: CACHE_KIND_V1.into(),
        container_id: Some(entry.container_id.clone()),
        config: Some(base64::engine::general_purpose::STANDARD.encode(&entry.config)),
        ifname: Some(entry.ifname.clone()),
        network_name: Some(entry.network_name.clone()),
        netns: (!entry.netns.is_empty()).then(|| entry.netns.clone()),
        cni_args: (!entry.cni_args.is_empty()).then(|| entry.cni_args.clone()),
        capability_args: (!entry.capability_args.is_empty())
            .then(|| sorted_map(&entry.capability_args)),
        result: result.filter(|m| !m.is_empty()),
    };
    serde_json::to_vec(&file).map_err(|e| Error::Internal(format!("encoding cache entry: {e}")))
}

fn sorted_map(m: &Map<String, Value>) -> Map<String, Value> {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    keys.into_iter()
        .map(|k| (k.clone(), sorted_value(&m[k])))
        .collect()
}

fn sorted_value(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(sorted_map(m)),
        Value::Array(a) => Value::Array(a.iter().map(sorted_value).collect()),
        other => other.clone(),
    }
}

/// Decodes a cache file's bytes.
fn decode(bytes: &[u8]) -> Cached {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Cached::Corrupt("empty file".into());
    }
    let value: Value = match libcni::gojson::parse_value(bytes) {
        Ok(v) => v,
        Err(e) => return Cached::Corrupt(format!("not valid JSON: {e}")),
    };
    if !value.is_object() {
        return Cached::Corrupt("not a JSON object".into());
    };
    // Go libcni decodes the cache into a struct: its rules apply.
    match libcni::gojson::lookup(&value, "kind") {
        Some(Value::String(k)) if k == CACHE_KIND_V1 => {}
        // Go's legacy cache: the bare result, which always has a cniVersion.
        None if libcni::gojson::lookup(&value, "cniVersion").is_some_and(|v| v.is_string()) => {
            return Cached::Legacy(value)
        }
        _ => return Cached::Corrupt("unknown cache kind".into()),
    }
    let file: CacheFile = match libcni::gojson::decode(&value) {
        Ok(f) => f,
        Err((at, e)) => {
            return Cached::Corrupt(format!("invalid {CACHE_KIND_V1} entry at {at:?}: {e}"))
        }
    };
    let config = match file.config {
        None => Vec::new(),
        Some(b64) => match base64::engine::general_purpose::STANDARD.decode(b64) {
            Ok(c) => c,
            Err(e) => return Cached::Corrupt(format!("config is not base64: {e}")),
        },
    };
    Cached::Entry(Box::new(CacheEntry {
        container_id: file.container_id.unwrap_or_default(),
        config,
        ifname: file.ifname.unwrap_or_default(),
        network_name: file.network_name.unwrap_or_default(),
        netns: file.netns.unwrap_or_default(),
        cni_args: file.cni_args.unwrap_or_default(),
        capability_args: file.capability_args.unwrap_or_default(),
        result: file.result.map(Value::Object),
    }))
}

/// Reads a cache file without following a symlink or blocking on a FIFO,
/// and only a regular file of sane size.
fn read_at(dir: BorrowedFd<'_>, name: &str, shown: &Path) -> Cached {
    match files::read_regular_at(dir, name, MAX_CACHE_FILE, "cache file", shown) {
        Contents::Absent => Cached::Absent,
        Contents::Unreadable(why) => Cached::Corrupt(why),
        Contents::Bytes(bytes) => decode(&bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::MetadataExt;

    fn tempdir(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("libcni-runtime-cache-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn entry(net: &str, cid: &str, ifname: &str) -> CacheEntry {
        CacheEntry {
            container_id: cid.into(),
            config: br#"{"name":"net1"}"#.to_vec(),
            ifname: ifname.into(),
            network_name: net.into(),
            netns: "/run/netns/p1".into(),
            cni_args: vec![
                ("K8S_POD_NAME".into(), "web".into()),
                ("A".into(), "b".into()),
            ],
            capability_args:
                json!({"portMappings":[{"hostPort":80,"containerPort":8080}],"mac":"m"})
                    .as_object()
                    .unwrap()
                    .clone(),
            result: Some(json!({"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]})),
        }
    }

    fn key(net: &str, cid: &str, ifname: &str) -> CacheKey {
        CacheKey::new(net, cid, ifname).unwrap()
    }

    #[test]
    fn writes_go_cni_cache_v1_exactly() {
        let d = tempdir("exact");
        let cache = ResultCache::new(&d);
        cache.write(&entry("net1", "c1", "eth0")).unwrap();
        let path = d.join("results/net1-c1-eth0");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"kind":"cniCacheV1","containerId":"c1","config":"eyJuYW1lIjoibmV0MSJ9","#,
                r#""ifName":"eth0","networkName":"net1","netns":"/run/netns/p1","#,
                r#""cniArgs":[["K8S_POD_NAME","web"],["A","b"]],"#,
                r#""capabilityArgs":{"mac":"m","portMappings":[{"containerPort":8080,"hostPort":80}]},"#,
                r#""result":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}}"#
            )
        );
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode("eyJuYW1lIjoibmV0MSJ9")
                .unwrap(),
            br#"{"name":"net1"}"#
        );
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::metadata(d.join("results")).unwrap().mode() & 0o777,
            0o700
        );
        // Nothing else left behind by the atomic write.
        let names: Vec<String> = std::fs::read_dir(d.join("results"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["net1-c1-eth0"]);
        // Round trip.
        assert_eq!(
            cache.read(&key("net1", "c1", "eth0")),
            Cached::Entry(Box::new(entry("net1", "c1", "eth0")))
        );
    }

    #[test]
    fn empty_fields_are_omitted_as_go_does() {
        let d = tempdir("omit");
        let cache = ResultCache::new(&d);
        let e = CacheEntry {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            network_name: "n".into(),
            ..CacheEntry::default()
        };
        cache.write(&e).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("results/n-c1-eth0")).unwrap(),
            r#"{"kind":"cniCacheV1","containerId":"c1","config":"","ifName":"eth0","networkName":"n"}"#
        );
        assert_eq!(
            cache.read(&key("n", "c1", "eth0")),
            Cached::Entry(Box::new(e))
        );
    }

    #[test]
    fn overwrite_replaces_and_leaves_no_temp_files() {
        let d = tempdir("overwrite");
        let cache = ResultCache::new(&d);
        let mut e = entry("n", "c1", "eth0");
        cache.write(&e).unwrap();
        e.netns = "/run/netns/other".into();
        cache.write(&e).unwrap();
        match cache.read(&key("n", "c1", "eth0")) {
            Cached::Entry(got) => assert_eq!(got.netns, "/run/netns/other"),
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_dir(d.join("results")).unwrap().count(), 1);
    }

    #[test]
    fn empty_truncated_or_corrupt_files_read_as_corrupt() {
        let d = tempdir("corrupt");
        let cache = ResultCache::new(&d);
        let k = key("n", "c1", "eth0");
        assert_eq!(cache.read(&k), Cached::Absent);
        std::fs::create_dir_all(d.join("results")).unwrap();
        let full = encode(&entry("n", "c1", "eth0")).unwrap();
        for bad in [
            &b""[..],
            b"  \n",
            &full[..full.len() / 2],
            b"\x00\x00\x00",
            b"[1,2]",
            br#"{"kind":"cniCacheV2"}"#,
            br#"{"kind":"cniCacheV1","config":"@@notbase64"}"#,
            br#"{"kind":"cniCacheV1","cniArgs":[["a"]]}"#,
        ] {
            std::fs::write(cache.path(&k), bad).unwrap();
            let got = cache.read(&k);
            assert!(
                matches!(got, Cached::Corrupt(_)),
                "{:?} -> {got:?}",
                String::from_utf8_lossy(bad)
            );
            assert_eq!(got.result(), None);
        }
        // A directory at the path is not a cache file either.
        std::fs::remove_file(cache.path(&k)).unwrap();
        std::fs::create_dir(cache.path(&k)).unwrap();
        assert!(matches!(cache.read(&k), Cached::Corrupt(_)));
    }

    #[test]
    fn legacy_result_only_files_are_accepted() {
        let d = tempdir("legacy");
        let cache = ResultCache::new(&d);
        let k = key("n", "c1", "eth0");
        std::fs::create_dir_all(d.join("results")).unwrap();
        let legacy = json!({"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]});
        std::fs::write(cache.path(&k), legacy.to_string()).unwrap();
        let got = cache.read(&k);
        assert_eq!(got, Cached::Legacy(legacy.clone()));
        assert_eq!(got.result(), Some(&legacy));
    }

    #[test]
    fn a_planted_symlink_is_never_followed() {
        let d = tempdir("symlink");
        let cache = ResultCache::new(&d);
        let k = key("n", "c1", "eth0");
        std::fs::create_dir_all(d.join("results")).unwrap();
        let victim = d.join("victim");
        let valid = encode(&entry("n", "c1", "eth0")).unwrap();
        std::fs::write(&victim, &valid).unwrap();
        std::os::unix::fs::symlink(&victim, cache.path(&k)).unwrap();
        // Reading does not follow it, even to a valid entry.
        assert!(matches!(cache.read(&k), Cached::Corrupt(_)));
        // Writing replaces the link, the target is untouched.
        let mut e = entry("n", "c1", "eth0");
        e.netns = "/run/netns/new".into();
        cache.write(&e).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), valid);
        let meta = std::fs::symlink_metadata(cache.path(&k)).unwrap();
        assert!(meta.file_type().is_file());
        assert!(matches!(cache.read(&k), Cached::Entry(got) if got.netns == "/run/netns/new"));
        // Removing a planted link removes the link only.
        std::fs::remove_file(cache.path(&k)).unwrap();
        std::os::unix::fs::symlink(&victim, cache.path(&k)).unwrap();
        cache.remove(&k).unwrap();
        assert!(victim.exists());
        assert!(std::fs::symlink_metadata(cache.path(&k)).is_err());
    }

    #[test]
    fn remove_of_a_missing_file_is_ok() {
        let d = tempdir("remove");
        let cache = ResultCache::new(&d);
        let k = key("n", "c1", "eth0");
        cache.remove(&k).unwrap();
        cache.write(&entry("n", "c1", "eth0")).unwrap();
        cache.remove(&k).unwrap();
        assert_eq!(cache.read(&k), Cached::Absent);
    }

    #[test]
    fn keys_only_accept_validated_parts() {
        assert_eq!(key("net", "c1", "eth0").file_name(), "net-c1-eth0");
        assert_eq!(CacheKey::new("../x", "c1", "eth0").unwrap_err().code(), 7);
        assert_eq!(CacheKey::new("n", "../c1", "eth0").unwrap_err().code(), 4);
        assert_eq!(CacheKey::new("n", "", "eth0").unwrap_err().code(), 3);
        assert_eq!(CacheKey::new("n", "c1", "a/b").unwrap_err().code(), 4);
        assert_eq!(CacheKey::new("n", "c1", "..").unwrap_err().code(), 4);
        let d = tempdir("keys");
        let mut e = entry("n", "c1", "eth0");
        e.ifname = "../../x".into();
        assert_eq!(ResultCache::new(&d).write(&e).unwrap_err().code(), 4);
        assert!(!d.join("results").exists());
    }

    #[test]
    fn attachments_match_the_network_name() {
        let d = tempdir("attachments");
        let cache = ResultCache::new(&d);
        cache.write(&entry("a", "c2", "eth0")).unwrap();
        cache.write(&entry("a", "c1", "eth1")).unwrap();
        cache.write(&entry("a-b", "c1", "eth0")).unwrap(); // other network, same prefix
        cache.write(&entry("b", "c1", "eth0")).unwrap();
        // A legacy file, a corrupt one and a misnamed copy are skipped.
        std::fs::write(d.join("results/a-c3-eth0"), br#"{"cniVersion":"1.0.0"}"#).unwrap();
        std::fs::write(d.join("results/a-c4-eth0"), b"").unwrap();
        std::fs::copy(d.join("results/a-c2-eth0"), d.join("results/a-c9-eth0")).unwrap();
        let got: Vec<(String, String, String)> = cache
            .attachments("a")
            .unwrap()
            .into_iter()
            .map(|e| (e.network_name, e.container_id, e.ifname))
            .collect();
        assert_eq!(
            got,
            [
                ("a".into(), "c1".into(), "eth1".into()),
                ("a".into(), "c2".into(), "eth0".into())
            ]
        );
        let first = &cache.attachments("a").unwrap()[0];
        assert_eq!(first.netns, "/run/netns/p1");
        assert_eq!(
            first.cni_args[0],
            ("K8S_POD_NAME".to_string(), "web".to_string())
        );
        assert!(ResultCache::new(d.join("nope"))
            .attachments("a")
            .unwrap()
            .is_empty());
        assert_eq!(cache.attachments("../a").unwrap_err().code(), 7);
    }
}
