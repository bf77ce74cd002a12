//! The leases on disk, one file per attachment under `-leasedir` (0700):
//! `<sha256 of containerID/network/ifname>.json`, 0600, replaced atomically
//! (temp file + rename) at every ACK and removed when the lease ends. A
//! daemon that starts takes up every file it finds, so a restart loses no
//! lease. Files are not fsynced: a power loss takes every pod's namespace
//! with it, so no lease of it is worth keeping.

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dhcproto::v4::Message;
use dhcproto::Encodable;
use libcni::files::{self, Contents, Durability};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ack::{self, Binding, MessageError};
use crate::config::DhcpOptions;
use crate::proto::Key;

/// Why a lease cannot be kept or taken up: its ACK, its record, or the
/// file it is written to.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The ACK gives no lease one can configure, or does not decode.
    #[error(transparent)]
    Message(#[from] MessageError),
    /// The ACK or the record could not be encoded.
    #[error("encode the {what}: {reason}")]
    Encode { what: &'static str, reason: String },
    /// A record of another daemon's format.
    #[error("format {0} (this daemon reads {FORMAT})")]
    Format(u32),
    /// A record whose attachment key is not one a plugin sends.
    #[error(transparent)]
    Key(libcni::Error),
    /// A record whose ACK is not hex.
    #[error("its ack is not hex")]
    AckNotHex,
    /// A record that is not the daemon's JSON.
    #[error("{0}")]
    Json(String),
    /// The lease directory is not there to write in.
    #[error("{} is gone", .0.display())]
    DirGone(PathBuf),
    /// The lease directory or file could not be opened or written.
    #[error("{doing} {}: {source}", path.display())]
    Io {
        doing: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Version of the lease file format.
const FORMAT: u32 = 1;
const TEMP_PREFIX: &str = ".tmp-";
const MAX_FILE: u64 = 1 << 20;

/// A lease as it is kept on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub format: u32,
    pub key: Key,
    /// `CNI_NETNS` as the plugin gave it (the daemon prefixes `-hostprefix`).
    pub netns: String,
    #[serde(rename = "netnsDev")]
    pub netns_dev: u64,
    #[serde(rename = "netnsIno")]
    pub netns_ino: u64,
    pub options: DhcpOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// The last DHCPACK, as it came (hex).
    pub ack: String,
    /// Where the ACK came from: its IP source and link-layer source (the
    /// server's MAC, or its relay's), where RENEW and RELEASE go.
    #[serde(rename = "ackFrom")]
    pub ack_from: Ipv4Addr,
    #[serde(
        rename = "serverMac",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub server_mac: String,
    /// When the ACK came, in milliseconds since the epoch: the lease's
    /// times count from here.
    #[serde(rename = "boundAt")]
    pub bound_at_ms: u64,
}

/// A lease in memory: its record and what its ACK says.
#[derive(Debug, Clone)]
pub struct Held {
    pub record: Record,
    pub ack: Message,
    pub binding: Binding,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

pub fn format_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Held {
    /// A new lease from an ACK that just came.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: Key,
        netns: String,
        netns_id: (u64, u64),
        options: DhcpOptions,
        priority: Option<u32>,
        ack: Message,
        from: Ipv4Addr,
        from_mac: Option<[u8; 6]>,
    ) -> Result<Held, LeaseError> {
        let binding = ack::binding(&ack, Some(from))?;
        let bytes = ack.to_vec().map_err(|e| LeaseError::Encode {
            what: "ACK",
            reason: e.to_string(),
        })?;
        Ok(Held {
            record: Record {
                format: FORMAT,
                key,
                netns,
                netns_dev: netns_id.0,
                netns_ino: netns_id.1,
                options,
                priority,
                ack: hex(&bytes),
                ack_from: from,
                server_mac: from_mac.as_ref().map(format_mac).unwrap_or_default(),
                bound_at_ms: now_ms(),
            },
            ack,
            binding,
        })
    }

    /// The lease after a renewal's ACK.
    pub fn renewed(
        &self,
        ack: Message,
        from: Ipv4Addr,
        from_mac: Option<[u8; 6]>,
    ) -> Result<Held, LeaseError> {
        let mut h = Held::new(
            self.record.key.clone(),
            self.record.netns.clone(),
            (self.record.netns_dev, self.record.netns_ino),
            self.record.options.clone(),
            self.record.priority,
            ack,
            from,
            from_mac,
        )?;
        if h.record.server_mac.is_empty() {
            // Answered through the UDP socket: the server's MAC is unchanged.
            h.record.server_mac = self.record.server_mac.clone();
        }
        Ok(h)
    }

    fn from_record(record: Record) -> Result<Held, LeaseError> {
        if record.format != FORMAT {
            return Err(LeaseError::Format(record.format));
        }
        record.key.validate().map_err(LeaseError::Key)?;
        let bytes = unhex(&record.ack).ok_or(LeaseError::AckNotHex)?;
        let ack = ack::decode(&bytes)?;
        let binding = ack::binding(&ack, Some(record.ack_from))?;
        Ok(Held {
            record,
            ack,
            binding,
        })
    }

    pub fn server_mac(&self) -> Option<[u8; 6]> {
        parse_mac(&self.record.server_mac)
    }

    /// When the lease began (the ACK's arrival), as a wall-clock time.
    pub fn bound_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.record.bound_at_ms)
    }
}

/// The lease directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// The file name of `key`'s lease.
pub fn file_name(key: &Key) -> String {
    let digest = Sha256::digest(key.to_string().as_bytes());
    format!("{}.json", hex(&digest))
}

impl Store {
    /// Opens (creating it 0700) the lease directory `dir`, and removes the
    /// temp files a killed daemon left.
    pub fn open(dir: &Path) -> std::io::Result<Store> {
        files::create_dir_all(dir, 0o700)?;
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.starts_with(TEMP_PREFIX) {
                let _ = files::remove_if_present(&dir.join(&name));
            }
        }
        Ok(Store {
            dir: dir.to_path_buf(),
        })
    }

    /// The lease directory `dir` as it is, for reading only (an operator's
    /// `inspect`: it neither creates the directory nor tidies it).
    pub fn at(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path_of(&self, key: &Key) -> PathBuf {
        self.dir.join(file_name(key))
    }

    /// Writes `held` (whole or not at all).
    pub fn write(&self, held: &Held) -> Result<(), LeaseError> {
        let mut bytes =
            serde_json::to_vec_pretty(&held.record).map_err(|e| LeaseError::Encode {
                what: "lease",
                reason: e.to_string(),
            })?;
        bytes.push(b'\n');
        let dir = files::open_dir(&self.dir)
            .map_err(|source| LeaseError::Io {
                doing: "open".into(),
                path: self.dir.clone(),
                source: source.into(),
            })?
            .ok_or_else(|| LeaseError::DirGone(self.dir.clone()))?;
        files::replace_at(
            dir.as_fd(),
            TEMP_PREFIX,
            &file_name(&held.record.key),
            &bytes,
            Durability::ProcessCrash,
        )
        .map_err(|e| LeaseError::Io {
            doing: format!("write ({:?})", e.step),
            path: self.path_of(&held.record.key),
            source: e.source,
        })
    }

    pub fn remove(&self, key: &Key) -> std::io::Result<()> {
        files::remove_if_present(&self.path_of(key))
    }

    /// Every lease on disk; a file that cannot be read is reported and left.
    pub fn load(&self) -> std::io::Result<(Vec<Held>, Vec<String>)> {
        let mut held = Vec::new();
        let mut bad = Vec::new();
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
            .collect();
        names.sort();
        for name in names {
            let path = self.dir.join(&name);
            let bytes = match files::read_regular(&path, MAX_FILE, "lease file") {
                Contents::Bytes(b) => b,
                Contents::Absent => continue,
                Contents::Unreadable(why) => {
                    bad.push(why);
                    continue;
                }
            };
            let parsed = libcni::gojson::from_slice::<Record>(&bytes)
                .map_err(|e| LeaseError::Json(e.to_string()))
                .and_then(Held::from_record);
            match parsed {
                Ok(h) if file_name(&h.record.key) == name => held.push(h),
                Ok(_) => bad.push(format!("{}: named for another attachment", path.display())),
                Err(e) => bad.push(format!("{}: {e}", path.display())),
            }
        }
        Ok((held, bad))
    }
}
