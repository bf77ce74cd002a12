//! What `cni-rs gc --apply` collected, kept on the node for `cni-rs
//! metrics`: the pieces taken since the file was made, by kind, and when
//! the last pass ran. One small JSON file under the cache dir
//! (`<cache dir>/cni-rs/gc.json`), which the DaemonSet's gc and metrics
//! containers share through the host's `/var/lib/cni`:
//!
//! ```json
//! {"lastRunSeconds": 1764950000, "collected": {"lease": 12, "portMappings": 4}}
//! ```
//!
//! Written atomically (temp file and rename); a pass that cannot write it
//! says so on stderr and still succeeds: the record is for metrics only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::error::{Error, Result};

/// The record's directory under the cache dir, and its file.
const DIR: &str = "cni-rs";
const FILE: &str = "gc.json";

/// The record as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GcRecord {
    /// When the last `--apply` pass ended (seconds since the epoch).
    pub last_run_seconds: f64,
    /// Pieces collected since the record was made, by kind.
    pub collected: BTreeMap<String, u64>,
}

/// The record's path for a node whose cache dir is `cache_dir`.
pub fn path(cache_dir: &Path) -> PathBuf {
    cache_dir.join(DIR).join(FILE)
}

/// The record at `path`: `Ok(None)` when there is none yet, an error
/// naming the file when it cannot be read as one.
pub fn load(path: &Path) -> Result<Option<GcRecord>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::File {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let malformed = |problem: String| Error::Malformed {
        path: path.to_path_buf(),
        problem,
    };
    let v = libcni::gojson::parse_value(&bytes).map_err(|e| malformed(format!("not JSON: {e}")))?;
    let last_run_seconds = v["lastRunSeconds"]
        .as_f64()
        .ok_or_else(|| malformed("no lastRunSeconds".into()))?;
    let mut collected = BTreeMap::new();
    for (kind, n) in v["collected"].as_object().into_iter().flatten() {
        let n = n
            .as_u64()
            .ok_or_else(|| malformed(format!("collected.{kind} is not a count")))?;
        collected.insert(kind.clone(), n);
    }
    Ok(Some(GcRecord {
        last_run_seconds,
        collected,
    }))
}

/// Adds one `--apply` pass that collected `collected` and ended `now`.
pub fn add_pass(
    cache_dir: &Path,
    collected: &BTreeMap<&'static str, usize>,
    now: SystemTime,
) -> Result<()> {
    let file = path(cache_dir);
    let mut record = load(&file)?.unwrap_or_default();
    for (kind, n) in collected {
        *record.collected.entry(kind.to_string()).or_default() += *n as u64;
    }
    record.last_run_seconds = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    let dir = cache_dir.join(DIR);
    libcni::files::create_dir_all(&dir, 0o755).map_err(|source| Error::File {
        path: dir.clone(),
        source,
    })?;
    let v: Value = json!({
        "lastRunSeconds": record.last_run_seconds,
        "collected": record.collected,
    });
    libcni::files::write_atomic(&dir, ".gc", FILE, v.to_string().as_bytes()).map_err(|e| {
        Error::Write {
            path: file,
            step: e.step,
            temp: e.temp,
            source: e.source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_add_up_and_read_back() {
        let dir = std::env::temp_dir().join(format!("gc-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(load(&path(&dir)).unwrap(), None);
        let at = UNIX_EPOCH + std::time::Duration::from_secs(1_000);
        let pass = BTreeMap::from([("lease", 2usize), ("cache", 1)]);
        add_pass(&dir, &pass, at).unwrap();
        add_pass(&dir, &BTreeMap::from([("lease", 1usize)]), at).unwrap();
        let r = load(&path(&dir)).unwrap().unwrap();
        assert_eq!(r.last_run_seconds, 1_000.0);
        assert_eq!(
            r.collected,
            BTreeMap::from([("cache".to_string(), 1), ("lease".to_string(), 3)])
        );
        std::fs::write(path(&dir), "{").unwrap();
        let e = load(&path(&dir)).unwrap_err();
        assert!(matches!(e, Error::Malformed { .. }), "{e}");
        assert!(e.to_string().contains("not JSON"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
