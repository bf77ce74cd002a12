//! The backup of what ADD changed, so DEL can put it back:
//! `<dataDir>/<containerID>_<ifname>.json`, the Go reference's path and
//! format (its `configToRestore`: `mac`, `promisc`, `mtu`, `allmulti`, and
//! newer releases' `txQLen`, written with one-space indentation), so either
//! implementation's DEL restores the other's ADD. This one adds `sysctl`,
//! the previous values of the sysctls it wrote, which the reference ignores
//! as an unknown key.
//!
//! Files are written atomically with [`libcni::files`] (temp file with
//! `O_EXCL|O_NOFOLLOW`, 0600, fsync, rename, fsync of the directory) and
//! read without following a symlink. Names are built only from the container ID and interface name,
//! which skel validated (no `/`, not `.` or `..`).

use std::path::{Path, PathBuf};

use libcni::files::{self, Contents};
use libcni::sysctl::Key;
use libcni::Error;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Largest backup file read; a real one is a few hundred bytes.
const MAX_BACKUP: u64 = 1 << 20;

/// The previous values of what ADD changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allmulti: Option<bool>,
    #[serde(rename = "txQLen", default, skip_serializing_if = "Option::is_none")]
    pub txqlen: Option<u32>,
    /// Sysctl path (`net/core/somaxconn`) to its previous value, in the
    /// order ADD wrote them.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub sysctl: Map<String, Value>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl Backup {
    pub fn is_empty(&self) -> bool {
        self == &Backup::default()
    }

    /// Keeps what `older` (a backup already on disk for this attachment)
    /// recorded: it holds the values from before the first ADD.
    pub fn merged_under(mut self, older: &Backup) -> Backup {
        if !older.mac.is_empty() {
            self.mac = older.mac.clone();
        }
        if older.promisc.is_some() {
            self.promisc = older.promisc;
        }
        if older.mtu != 0 {
            self.mtu = older.mtu;
        }
        if older.allmulti.is_some() {
            self.allmulti = older.allmulti;
        }
        if older.txqlen.is_some() {
            self.txqlen = older.txqlen;
        }
        let mut sysctl = older.sysctl.clone();
        for (k, v) in std::mem::take(&mut self.sysctl) {
            sysctl.entry(k).or_insert(v);
        }
        self.sysctl = sysctl;
        self
    }

    /// The sysctls to restore, in the order they were written. Entries that
    /// are not a valid key under `net/` or not a string are skipped (a
    /// backup file must not be a way to write anywhere else).
    pub fn sysctls(&self) -> Vec<(Key, String)> {
        self.sysctl
            .iter()
            .filter_map(|(k, v)| Some((Key::new(k).ok()?, v.as_str()?.to_string())))
            .collect()
    }

    /// The bytes of the file: Go's `json.MarshalIndent(v, "", " ")`.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        self.serialize(&mut ser)
            .map_err(|e| Error::Internal(format!("encoding the tuning backup: {e}")))?;
        Ok(out)
    }
}

/// What reading a backup found.
#[derive(Debug)]
pub enum Stored {
    Absent,
    /// The backup, and the file's bytes as they were.
    Present(Backup, Vec<u8>),
    /// Not a backup this code can read; why.
    Corrupt(String),
}

/// The backup file of one attachment.
#[derive(Debug, Clone)]
pub struct BackupFile {
    dir: PathBuf,
    name: String,
}

impl BackupFile {
    pub fn new(data_dir: &Path, container_id: &str, ifname: &str) -> BackupFile {
        BackupFile {
            dir: data_dir.to_path_buf(),
            name: format!("{container_id}_{ifname}.json"),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// Reads the backup without following a symlink or blocking on a FIFO.
    /// A missing file is [`Stored::Absent`]; anything else unreadable or
    /// undecodable is [`Stored::Corrupt`].
    pub fn read(&self) -> Stored {
        let path = self.path();
        match files::read_regular(&path, MAX_BACKUP, "backup file") {
            Contents::Absent => Stored::Absent,
            Contents::Unreadable(why) => Stored::Corrupt(why),
            Contents::Bytes(bytes) => match libcni::gojson::from_slice::<Backup>(&bytes) {
                Ok(b) => Stored::Present(b, bytes),
                Err(e) => Stored::Corrupt(format!("decoding {}: {e}", path.display())),
            },
        }
    }

    /// Writes `bytes` atomically ([`files::write_atomic`]: a temp file in
    /// the same directory, `O_EXCL`, `O_NOFOLLOW`, 0600, fsync, rename over
    /// the old file (a symlink there is replaced, not followed), fsync of
    /// the directory). The directory is created 0700 if missing.
    pub fn write(&self, bytes: &[u8]) -> Result<(), Error> {
        files::create_dir_all(&self.dir, 0o700)
            .map_err(|e| Error::io(format!("dataDir: creating {}", self.dir.display()), e))?;
        let temp_prefix = format!(".{}.tmp-", self.name);
        files::write_atomic(&self.dir, &temp_prefix, &self.name, bytes).map_err(|e| {
            Error::io(
                format!("writing the tuning backup {}", self.path().display()),
                e.source,
            )
        })
    }

    /// Removes the backup; a missing one is success.
    pub fn remove(&self) -> Result<(), Error> {
        let path = self.path();
        files::remove_if_present(&path)
            .map_err(|e| Error::io(format!("removing the tuning backup {}", path.display()), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tuning-backup-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn encoding_is_gos_marshal_indent() {
        let b = Backup {
            mac: "0a:58:0a:58:00:05".into(),
            promisc: Some(false),
            mtu: 1500,
            allmulti: Some(true),
            txqlen: None,
            sysctl: Map::new(),
        };
        assert_eq!(
            String::from_utf8(b.encode().unwrap()).unwrap(),
            "{\n \"mac\": \"0a:58:0a:58:00:05\",\n \"promisc\": false,\n \"mtu\": 1500,\n \"allmulti\": true\n}"
        );
        let mut s = Backup {
            txqlen: Some(1000),
            ..Backup::default()
        };
        s.sysctl.insert("net/core/somaxconn".into(), json!("4096"));
        assert_eq!(
            String::from_utf8(s.encode().unwrap()).unwrap(),
            "{\n \"txQLen\": 1000,\n \"sysctl\": {\n  \"net/core/somaxconn\": \"4096\"\n }\n}"
        );
        assert!(Backup::default().is_empty());
        assert_eq!(Backup::default().encode().unwrap(), b"{}");
    }

    #[test]
    fn a_go_backup_is_read_and_unknown_keys_are_ignored() {
        let go = br#"{
 "mac": "c2:b0:57:49:47:f1",
 "promisc": true,
 "mtu": 1454,
 "future": {"x": 1}
}"#;
        let b: Backup = libcni::gojson::from_slice(go).unwrap();
        assert_eq!(
            (b.mac.as_str(), b.promisc, b.mtu, b.allmulti, b.txqlen),
            ("c2:b0:57:49:47:f1", Some(true), 1454, None, None)
        );
        assert!(b.sysctls().is_empty());
    }

    #[test]
    fn sysctls_outside_net_are_never_restored() {
        let b: Backup = libcni::gojson::from_value_at(
            &json!({"sysctl": {
                "net/core/somaxconn": "128",
                "kernel/hostname": "evil",
                "net/../../etc/x": "1",
                "net/ipv4/ip_forward": 1
            }}),
            "",
        )
        .unwrap();
        let got: Vec<(String, String)> = b
            .sysctls()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(got, [("net/core/somaxconn".to_string(), "128".to_string())]);
    }

    #[test]
    fn merging_keeps_the_older_values() {
        let mut older = Backup {
            mtu: 1500,
            ..Backup::default()
        };
        older.sysctl.insert("net/a".into(), json!("1"));
        let mut newer = Backup {
            mtu: 1400,
            mac: "0a:00:00:00:00:01".into(),
            ..Backup::default()
        };
        newer.sysctl.insert("net/a".into(), json!("2"));
        newer.sysctl.insert("net/b".into(), json!("3"));
        let m = newer.merged_under(&older);
        assert_eq!((m.mtu, m.mac.as_str()), (1500, "0a:00:00:00:00:01"));
        assert_eq!(
            m.sysctl,
            json!({"net/a": "1", "net/b": "3"})
                .as_object()
                .unwrap()
                .clone()
        );
    }

    #[test]
    fn write_read_remove_atomically_and_never_through_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("rw");
        let f = BackupFile::new(&dir.join("sub"), "ctr-1", "eth0");
        assert!(matches!(f.read(), Stored::Absent));
        let b = Backup {
            mtu: 9000,
            ..Backup::default()
        };
        f.write(&b.encode().unwrap()).unwrap();
        let meta = std::fs::metadata(f.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let dmeta = std::fs::metadata(dir.join("sub")).unwrap();
        assert_eq!(dmeta.permissions().mode() & 0o777, 0o700);
        assert_eq!(f.path(), dir.join("sub/ctr-1_eth0.json"));
        match f.read() {
            Stored::Present(got, bytes) => {
                assert_eq!(got, b);
                assert_eq!(bytes, b"{\n \"mtu\": 9000\n}");
            }
            other => panic!("{other:?}"),
        }
        // Nothing else is left in the directory (no temp file).
        let names: Vec<String> = std::fs::read_dir(dir.join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["ctr-1_eth0.json"]);
        f.remove().unwrap();
        f.remove().unwrap();
        assert!(matches!(f.read(), Stored::Absent));

        // A symlink in its place is not followed for reading, and replaced
        // (not written through) on writing.
        let target = dir.join("target");
        std::fs::write(&target, b"{\"mtu\": 1}").unwrap();
        std::os::unix::fs::symlink(&target, f.path()).unwrap();
        assert!(matches!(f.read(), Stored::Corrupt(_)));
        f.write(b"{}").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"{\"mtu\": 1}");
        assert!(!std::fs::symlink_metadata(f.path())
            .unwrap()
            .file_type()
            .is_symlink());
        std::fs::write(f.path(), b"not json").unwrap();
        assert!(matches!(f.read(), Stored::Corrupt(m) if m.starts_with("decoding")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
