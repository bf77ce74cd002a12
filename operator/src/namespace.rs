//! The network namespace an attachment was added in, from every record that
//! names it, and whether the path still holds that namespace.
//!
//! The records, in order:
//! 1. the cache's `netns` (our cnitool; Go libcni from v1.2: containerd
//!    2.x, CRI-O);
//! 2. else the `sandbox` of the cached result's interfaces (Go libcni
//!    before v1.2 writes no `netns`, but the main plugin puts the path it
//!    was given in the container interface's `sandbox`): every interface
//!    that names one must name the same, else nothing is known
//!    (tc-redirect-tap's VM interface names a container ID there).
//!
//! A recorded path is probed as the kernel sees it: it must open as a
//! network namespace (nsfs), not be a plain file (what an unmounted bind
//! mount leaves), a directory or another kind of namespace. And it must be
//! the namespace of the ADD, as far as the records tell:
//! - a bind-mounted namespace's nsfs inode is made when it is first bound,
//!   before the runtime's ADD, and kept while it is mounted: one changed
//!   after the cache file was written is a namespace bound at the reused
//!   path later (not for `/proc/<pid>/ns/net` paths, whose inode the
//!   kernel makes again at each open when nothing pins it);
//! - the container interface of the result, if the namespace has a link
//!   of that name, has the MAC address the result recorded.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cnitool::cache::CacheEntry;
use libcni::mac;
use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use serde_json::Value;

/// Which record named the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The cache's `netns`.
    Cache,
    /// The `sandbox` of the result's interfaces.
    Result,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Cache => "cache",
            Source::Result => "result",
        }
    }
}

/// What the records say of the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Neither the cache nor the result names one.
    Nothing,
    /// The result's interfaces name different sandboxes.
    Disagreeing(Vec<String>),
    /// The path, and which record gave it.
    Path { path: String, source: Source },
}

/// What the recorded path holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A network namespace, and by every check the ADD's.
    Same,
    /// No network namespace there: why.
    Gone(String),
    /// A network namespace, but not the ADD's: why.
    Other(String),
}

/// The namespace of one cached attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    pub recorded: Recorded,
    /// The probe of the recorded path; `None` when none is recorded.
    pub probe: Option<Probe>,
}

impl Namespace {
    /// The recorded path, or "".
    pub fn path(&self) -> &str {
        match &self.recorded {
            Recorded::Path { path, .. } => path,
            _ => "",
        }
    }

    /// The attachment's namespace exists and is the ADD's.
    pub fn is_live(&self) -> bool {
        self.probe == Some(Probe::Same)
    }

    /// Its death is proven: a namespace was recorded and is gone.
    pub fn is_gone(&self) -> bool {
        matches!(self.probe, Some(Probe::Gone(_)))
    }

    /// Why it is not live, for a report; "" when it is.
    pub fn why_not_live(&self) -> String {
        match (&self.recorded, &self.probe) {
            (Recorded::Nothing, _) => "its cache records no netns, nor its result a sandbox".into(),
            (Recorded::Disagreeing(paths), _) => {
                format!(
                    "its result's interfaces name different sandboxes: {}",
                    paths.join(", ")
                )
            }
            (Recorded::Path { path, source }, Some(Probe::Gone(why))) => {
                format!("netns {path} (from the {}) {why}", source.as_str())
            }
            (Recorded::Path { path, source }, Some(Probe::Other(why))) => {
                format!("netns {path} (from the {}) {why}", source.as_str())
            }
            _ => String::new(),
        }
    }
}

/// The namespace the records of `entry` (written at `written`) name, probed.
pub fn of(entry: &CacheEntry, written: SystemTime) -> Namespace {
    let recorded = recorded(entry);
    let probe = match &recorded {
        Recorded::Path { path, .. } => {
            Some(probe(Path::new(path), written, &interface(entry, path)))
        }
        _ => None,
    };
    Namespace { recorded, probe }
}

/// What the records name: the cache's `netns`, else the result's sandboxes.
pub fn recorded(entry: &CacheEntry) -> Recorded {
    if !entry.netns.is_empty() {
        return Recorded::Path {
            path: entry.netns.clone(),
            source: Source::Cache,
        };
    }
    let mut sandboxes: Vec<String> = interfaces(entry)
        .filter_map(|i| i.get("sandbox")?.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    sandboxes.sort();
    sandboxes.dedup();
    match sandboxes.len() {
        0 => Recorded::Nothing,
        1 => Recorded::Path {
            path: sandboxes.remove(0),
            source: Source::Result,
        },
        _ => Recorded::Disagreeing(sandboxes),
    }
}

fn interfaces(entry: &CacheEntry) -> impl Iterator<Item = &Value> {
    entry
        .result
        .as_ref()
        .and_then(|r| r.get("interfaces"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The container interface as the result recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordedInterface {
    pub name: String,
    pub mac: Option<[u8; 6]>,
}

/// The result's interface named `CNI_IFNAME` in sandbox `path`.
fn interface(entry: &CacheEntry, path: &str) -> RecordedInterface {
    let found = interfaces(entry).find(|i| {
        i.get("name").and_then(Value::as_str) == Some(entry.ifname.as_str())
            && i.get("sandbox").and_then(Value::as_str) == Some(path)
    });
    RecordedInterface {
        name: entry.ifname.clone(),
        mac: found
            .and_then(|i| i.get("mac")?.as_str())
            .and_then(mac::parse_mac),
    }
}

/// Whether `path` holds a network namespace, and the ADD's: see the
/// module's text. `written` is when the cache entry was written.
pub fn probe(path: &Path, written: SystemTime, iface: &RecordedInterface) -> Probe {
    let ns = match NetNs::open(path) {
        Ok(ns) => ns,
        Err(e) => return Probe::Gone(gone_why(&e.to_string())),
    };
    if !path.starts_with("/proc") {
        if let Some(bound) = changed(path) {
            if bound > written {
                return Probe::Other(format!(
                    "holds a namespace bound after the ADD's cache was written \
                     ({} s later): the path was reused",
                    bound.duration_since(written).unwrap_or_default().as_secs()
                ));
            }
        }
    }
    let Some(want) = iface.mac else {
        return Probe::Same;
    };
    let link = Netlink::open_in(&ns).and_then(|mut nl| nl.link_by_name(&iface.name));
    match link {
        Ok(Some(l)) if l.mac.is_some_and(|m| m != want) => Probe::Other(format!(
            "holds a namespace whose {} has MAC {}, not the ADD's {}",
            iface.name,
            mac::format_mac(&l.mac.unwrap_or_default()),
            mac::format_mac(&want)
        )),
        _ => Probe::Same,
    }
}

/// The inode change time of the namespace file (its nsfs inode).
fn changed(path: &Path) -> Option<SystemTime> {
    let m = std::fs::metadata(path).ok()?;
    let secs = u64::try_from(m.ctime()).ok()?;
    let nanos = u32::try_from(m.ctime_nsec()).ok()?;
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}

/// `NetNs::open`'s message, without its `CNI_NETNS "<path>"` start.
fn gone_why(message: &str) -> String {
    match message.split_once("\" ") {
        Some((_, why)) => why.to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(netns: &str, result: Value) -> CacheEntry {
        CacheEntry {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            network_name: "net".into(),
            netns: netns.into(),
            result: Some(result),
            ..CacheEntry::default()
        }
    }

    #[test]
    fn the_records_are_read_in_order() {
        let one = json!({"interfaces": [
            {"name": "cni0", "mac": "aa:bb:cc:dd:ee:01"},
            {"name": "veth1", "mac": "aa:bb:cc:dd:ee:02"},
            {"name": "eth0", "mac": "aa:bb:cc:dd:ee:03", "sandbox": "/var/run/netns/p1"}]});
        let two = json!({"interfaces": [
            {"name": "eth0", "sandbox": "/var/run/netns/p1"},
            {"name": "tap0", "sandbox": "c1"}]});
        let cases = [
            (
                "the cache's netns first",
                entry("/run/netns/a", one.clone()),
                Recorded::Path {
                    path: "/run/netns/a".into(),
                    source: Source::Cache,
                },
            ),
            (
                "else the result's one sandbox",
                entry("", one.clone()),
                Recorded::Path {
                    path: "/var/run/netns/p1".into(),
                    source: Source::Result,
                },
            ),
            (
                "two sandboxes are no record",
                entry("", two),
                Recorded::Disagreeing(vec!["/var/run/netns/p1".into(), "c1".into()]),
            ),
            (
                "no sandbox at all",
                entry("", json!({"ips": []})),
                Recorded::Nothing,
            ),
            ("no result", CacheEntry::default(), Recorded::Nothing),
        ];
        for (what, e, want) in cases {
            let mut got = recorded(&e);
            if let Recorded::Disagreeing(p) = &mut got {
                p.sort();
            }
            let mut want = want;
            if let Recorded::Disagreeing(p) = &mut want {
                p.sort();
            }
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn the_container_interface_is_the_one_in_the_sandbox() {
        let e = entry(
            "",
            json!({"interfaces": [
                {"name": "eth0", "mac": "aa:bb:cc:dd:ee:01"},
                {"name": "eth0", "mac": "aa:bb:cc:dd:ee:02", "sandbox": "/run/netns/p"}]}),
        );
        let i = interface(&e, "/run/netns/p");
        assert_eq!(i.mac, Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x02]));
        assert_eq!(interface(&e, "/run/netns/q").mac, None);
    }

    #[test]
    fn a_path_that_is_no_namespace_is_gone() {
        let dir = std::env::temp_dir().join(format!("ns-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("plain");
        std::fs::write(&file, "").unwrap();
        let none = RecordedInterface::default();
        for (path, want) in [
            (file.clone(), "is a regular file, not a network namespace"),
            (dir.join("absent"), "does not exist"),
            (dir.clone(), "is a directory, not a network namespace"),
        ] {
            match probe(&path, SystemTime::now(), &none) {
                Probe::Gone(why) => assert!(why.starts_with(want), "{path:?}: {why}"),
                other => panic!("{path:?}: {other:?}"),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
