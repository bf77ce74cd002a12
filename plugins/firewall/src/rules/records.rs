//! Which attachment holds each address the firewall plugin let through:
//! one small file per address, `<dataDir>/<address>` (default
//! `/run/cni/firewall`), holding `{"network", "containerID", "ifname",
//! "backend", "zone"}`.
//!
//! The firewall objects themselves cannot carry an owner: the Go plugin's
//! accept rules and firewalld's zone sources have no comment, and both
//! sides must find and remove each other's. So the owner lives beside
//! them, and is what lets a DEL without `prevResult` find its addresses,
//! GC find the attachments that are gone, and a late DEL of an old
//! container see that its address now belongs to a newer one (whose rules
//! it must leave). Firewall rules and firewalld's runtime sources do not
//! survive a reboot; neither does `/run`.
//!
//! An address has at most one record: its latest owner. Records are
//! written before the rules (a crash in between leaves a record whose DEL
//! or GC finds nothing else to remove) and removed after them. Writes are
//! atomic (temp file + rename, 0600, never through a symlink), not
//! fsynced: `/run` is memory.

use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use libcni::files::{self, Contents, Durability};
use libcni::{Error, Result};

/// `dataDir` when the config names none.
pub const DEFAULT_DIR: &str = "/run/cni/firewall";

/// Largest record file read.
const MAX_RECORD: u64 = 4096;

/// The owner of one address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub network: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(default)]
    pub ifname: String,
    /// `iptables`, `nftables` or `firewalld`: where the address was let
    /// through.
    pub backend: String,
    /// The firewalld zone (firewalld only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub zone: String,
}

impl Record {
    /// Whether this record names the attachment (`ifname` is compared
    /// only when both sides know it).
    pub fn names(&self, network: &str, container_id: &str, ifname: &str) -> bool {
        self.network == network
            && self.container_id == container_id
            && (self.ifname.is_empty() || ifname.is_empty() || self.ifname == ifname)
    }
}

/// The records of one data directory.
#[derive(Debug, Clone)]
pub struct Records {
    dir: PathBuf,
}

impl Records {
    pub fn new(dir: &Path) -> Records {
        Records {
            dir: dir.to_path_buf(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The record of `addr`; `None` when there is none or it is not one
    /// (a corrupt record is as good as none: it is replaced or removed).
    pub fn get(&self, addr: IpAddr) -> Option<Record> {
        match files::read_regular(&self.dir.join(addr.to_string()), MAX_RECORD, "record") {
            Contents::Bytes(b) => libcni::gojson::from_slice(&b).ok(),
            _ => None,
        }
    }

    /// Makes `rec` the owner of `addr`.
    pub fn put(&self, addr: IpAddr, rec: &Record) -> Result<()> {
        let fail = |e: std::io::Error| {
            Error::io(
                format!(
                    "dataDir: writing the firewall record {}",
                    self.dir.join(addr.to_string()).display()
                ),
                e,
            )
        };
        files::create_dir_all(&self.dir, 0o700).map_err(fail)?;
        let fd = match files::open_dir(&self.dir) {
            Ok(Some(fd)) => fd,
            Ok(None) => return Err(fail(std::io::ErrorKind::NotFound.into())),
            Err(e) => return Err(fail(e.into())),
        };
        let bytes = serde_json::to_vec(rec).map_err(|e| Error::Internal(e.to_string()))?;
        let name = addr.to_string();
        files::replace_hidden_at(fd.as_fd(), &name, &bytes, Durability::ProcessCrash)
            .map_err(|e| fail(e.source))
    }

    /// Removes the record of `addr` (none is success).
    pub fn remove(&self, addr: IpAddr) -> Result<()> {
        let path = self.dir.join(addr.to_string());
        files::remove_if_present(&path).map_err(|e| {
            Error::io(
                format!("dataDir: removing the firewall record {}", path.display()),
                e,
            )
        })
    }

    /// Every record, by address (files that are not records are skipped).
    pub fn all(&self) -> Result<Vec<(IpAddr, Record)>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(Error::io(
                    format!("dataDir: listing {}", self.dir.display()),
                    e,
                ))
            }
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Some(addr) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<IpAddr>().ok())
            else {
                continue;
            };
            if let Some(rec) = self.get(addr) {
                out.push((addr, rec));
            }
        }
        out.sort_by_key(|(a, _)| *a);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_firewall_records_round_trip() {
        let dir = std::env::temp_dir().join(format!("fw-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = Records::new(&dir);
        assert_eq!(r.all().unwrap(), vec![]);
        let rec = Record {
            network: "podman".into(),
            container_id: "c1".into(),
            ifname: "eth0".into(),
            backend: "firewalld".into(),
            zone: "trusted".into(),
        };
        let a: IpAddr = "10.88.0.2".parse().unwrap();
        let b: IpAddr = "fd00::2".parse().unwrap();
        r.put(a, &rec).unwrap();
        r.put(b, &rec).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("10.88.0.2")).unwrap(),
            r#"{"network":"podman","containerID":"c1","ifname":"eth0","backend":"firewalld","zone":"trusted"}"#
        );
        assert_eq!(r.get(a), Some(rec.clone()));
        std::fs::write(dir.join("junk"), "x").unwrap();
        std::fs::write(dir.join("10.0.0.9"), "not json").unwrap();
        assert_eq!(r.all().unwrap(), vec![(a, rec.clone()), (b, rec.clone())]);
        assert!(rec.names("podman", "c1", "eth0"));
        assert!(rec.names("podman", "c1", ""));
        assert!(!rec.names("podman", "c1", "eth1"));
        assert!(!rec.names("other", "c1", "eth0"));
        r.remove(a).unwrap();
        r.remove(a).unwrap();
        assert_eq!(r.get(a), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
