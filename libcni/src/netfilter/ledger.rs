//! The handles of the nf_tables rules an attachment added, kept on disk so
//! that its DEL deletes exactly those rules without listing the chains
//! they are in (chains the Go plugins share, which hold a rule per host
//! port or address of every container on the node).
//!
//! One small file per attachment, `<root>/<feature>/<netns>/<network>/<name>`
//! (`root` is `/run/cni`: handles die with the ruleset at reboot, and so
//! does tmpfs; `netns` is the inode number of the network namespace whose
//! ruleset holds the rules, so nodes that share a `/run`, as test nodes
//! do, keep apart), 0600, written atomically and never through a symlink. A
//! line per rule: `<family> <table> <chain> <handle> <note>`, the note
//! being what the feature wants back (a host port, an address).
//!
//! A node ledger ([`Ledger::node`], `<root>/<feature>/<netns>/<name>`)
//! keeps the handles of rules no attachment owns: the jumps from the base
//! chains into a feature's shared chains, which every ADD must know are
//! there and which no DEL removes. Nothing collects it: it stays as small
//! as the set of such rules, and a stale one only costs one listing.
//!
//! The file is a hint, never the truth: a handle is used only after the
//! rule it names was read back with the comment the attachment gave it
//! ([`super::nft::Nft::get_rule`]), and a missing or unreadable file makes
//! the caller fall back to one listing of the chains (state the Go plugins
//! or a killed ADD left).

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::nft::{Batch, Family, Nft};
use crate::files::{self, Contents, Durability};
use crate::{Error, Result};

/// What of a ledger is still true ([`verified`]).
pub struct Verified {
    /// The entries whose rule is still there with the attachment's comment.
    pub entries: Vec<Entry>,
    /// Whether every entry was: one missing means the chains changed
    /// behind the ledger, and the caller lists them instead.
    pub complete: bool,
}

/// Reads back the rule of every entry of `entries` (by its handle) and
/// keeps those that still carry `comment`: a handle is used only after
/// that ([`Verified`]).
pub fn verified(nft: &mut Nft, entries: &[Entry], comment: &str) -> Result<Verified> {
    let mut out = Verified {
        entries: Vec::new(),
        complete: true,
    };
    for e in entries {
        match nft.get_rule(e.family, &e.table, &e.chain, e.handle)? {
            Some(r) if r.comment.as_deref() == Some(comment) => out.entries.push(e.clone()),
            _ => out.complete = false,
        }
    }
    Ok(out)
}

/// Where the ledgers live.
pub const ROOT: &str = "/run/cni";

/// Largest ledger read back (a thousand rules).
const MAX_LEN: u64 = 128 * 1024;

/// The root in use: [`ROOT`], or a per-process directory in libcni's own
/// unit tests.
fn root() -> PathBuf {
    #[cfg(test)]
    {
        std::env::temp_dir().join(format!("libcni-ledger-{}", std::process::id()))
    }
    #[cfg(not(test))]
    {
        PathBuf::from(ROOT)
    }
}

/// One rule of a ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub family: Family,
    pub table: String,
    pub chain: String,
    pub handle: u64,
    /// Free text without spaces at the ends or newlines (`udp/5353`, an address).
    pub note: String,
}

/// The ledger of one attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    dir: PathBuf,
    name: String,
}

fn family_of(s: &str) -> Option<Family> {
    match s {
        "ip" => Some(Family::Ip),
        "ip6" => Some(Family::Ip6),
        "inet" => Some(Family::Inet),
        "bridge" => Some(Family::Bridge),
        _ => None,
    }
}

/// Whether `s` can be a path component we made from a network name, a
/// container ID and an interface name: one component, not hidden (temp
/// files start with a dot), one line.
fn safe_component(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.len() <= 255
        && !s.chars().any(|c| matches!(c, '/' | '\0' | '\n'))
}

/// The directory of `feature`'s ledgers in the calling thread's network
/// namespace.
fn namespace_dir(feature: &str) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata("/proc/thread-self/ns/net").ok()?.ino();
    Some(root().join(feature).join(format!("netns-{ino}")))
}

impl Ledger {
    /// The ledger `name` of `network` for `feature` (`portmap`, `ipmasq`),
    /// in the calling thread's network namespace. Names the spec would
    /// refuse never reach here; if one does, the ledger is `None` and
    /// callers use the listing path.
    pub fn new(feature: &str, network: &str, name: &str) -> Option<Ledger> {
        if !safe_component(name) {
            return None;
        }
        Some(Ledger {
            dir: Ledger::network_dir(feature, network)?,
            name: name.to_string(),
        })
    }

    /// The ledger `name` of the node's namespace for `feature`: rules no
    /// attachment owns. Its feature must differ from every attachment
    /// ledger's, whose directory holds a directory per network.
    pub fn node(feature: &str, name: &str) -> Option<Ledger> {
        if !safe_component(name) {
            return None;
        }
        Some(Ledger {
            dir: namespace_dir(feature)?,
            name: name.to_string(),
        })
    }

    /// The directory of a network's ledgers for `feature`.
    pub fn network_dir(feature: &str, network: &str) -> Option<PathBuf> {
        if !safe_component(network) {
            return None;
        }
        Some(namespace_dir(feature)?.join(network))
    }

    /// The attachment's name the ledger is kept under (its file name).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// The entries; `None` when there is no ledger, or it cannot be read
    /// or parsed (then the caller lists the chains instead).
    pub fn load(&self) -> Option<Vec<Entry>> {
        load_path(&self.path())
    }

    /// Replaces the ledger with `entries` (removes it when empty).
    pub fn store(&self, entries: &[Entry]) -> Result<()> {
        // Callers store right after their commit: a kill here leaves rules
        // without a ledger, which DEL finds by listing.
        crate::fault::point("netfilter/before-ledger");
        if entries.is_empty() {
            return self.remove();
        }
        let mut text = String::new();
        for e in entries {
            text.push_str(&format!(
                "{} {} {} {} {}\n",
                e.family.as_str(),
                e.table,
                e.chain,
                e.handle,
                e.note
            ));
        }
        let op = format!("write {}", self.path().display());
        files::create_dir_all(&self.dir, 0o700).map_err(|e| Error::kernel(&op, e))?;
        let dir = files::open_dir(&self.dir)
            .map_err(|e| Error::kernel(&op, std::io::Error::from(e)))?
            .ok_or_else(|| {
                Error::kernel(&op, std::io::Error::from(std::io::ErrorKind::NotFound))
            })?;
        files::replace_at(
            dir.as_fd(),
            ".tmp-",
            &self.name,
            text.as_bytes(),
            Durability::ProcessCrash,
        )
        .map_err(|e| Error::kernel(&op, e.source))
    }

    /// Records the rules one batch just added (`entries`, with the handles
    /// its echo gave) or, when that fails, deletes them again: a failed ADD
    /// leaves nothing.
    pub fn record_or_undo(&self, entries: &[Entry], nft: &mut Nft) -> Result<()> {
        let stored = self.store(entries);
        if stored.is_err() {
            let mut undo = Batch::new();
            for en in entries {
                undo.del_rule(en.family, &en.table, &en.chain, en.handle);
            }
            let _ = nft.commit(&undo);
        }
        stored
    }

    /// Removes the ledger (a missing one is fine), and its network's and
    /// namespace's directories once they are empty.
    pub fn remove(&self) -> Result<()> {
        let path = self.path();
        files::remove_if_present(&path)
            .map_err(|e| Error::kernel(format!("remove {}", path.display()), e))?;
        // Not empty (another attachment's ledger) or gone: both fine.
        if std::fs::remove_dir(&self.dir).is_ok() {
            if let Some(ns) = self.dir.parent() {
                let _ = std::fs::remove_dir(ns);
            }
        }
        Ok(())
    }
}

/// A rule a batch adds with echo ([`Batch::add_rule_echo`]) to be kept in
/// a ledger: its index in the batch, where it goes, and its note.
pub struct Echoed {
    pub index: usize,
    pub family: Family,
    pub table: String,
    pub note: String,
}

/// How often [`commit_recorded`] builds its batch again.
const COMMIT_ATTEMPTS: usize = 3;

/// The ADD of a writer that keeps a ledger: `build` reads what it needs and
/// fills a batch (deleting the attachment's rules of an earlier ADD, adding
/// its rules with echo, which it returns); the batch is committed whole,
/// built again from a fresh read when a rule it deletes went in between
/// (another process's DEL or GC), and the echoed handles go to `ledger`
/// (`None`: kept nowhere), or the rules are deleted again when the ledger
/// cannot be written.
pub fn commit_recorded(
    nft: &mut Nft,
    ledger: Option<&Ledger>,
    build: &mut dyn FnMut(&mut Nft, &mut Batch) -> Result<Vec<Echoed>>,
) -> Result<()> {
    let mut attempt = 1;
    loop {
        let mut batch = Batch::new();
        let wanted = build(nft, &mut batch)?;
        let echoed = match nft.commit_echo(&batch) {
            Ok(e) => e,
            Err(e) if crate::netlink::is_not_found(&e) && attempt < COMMIT_ATTEMPTS => {
                attempt += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(ledger) = ledger else {
            return Ok(());
        };
        let entries: Vec<Entry> = wanted
            .into_iter()
            .filter_map(|w| {
                let (_, r) = echoed.iter().find(|(i, _)| *i == w.index)?;
                Some(Entry {
                    family: w.family,
                    table: w.table,
                    chain: r.chain.clone(),
                    handle: r.handle,
                    note: w.note,
                })
            })
            .collect();
        return ledger.record_or_undo(&entries, nft);
    }
}

fn load_path(path: &Path) -> Option<Vec<Entry>> {
    let Contents::Bytes(bytes) = files::read_regular(path, MAX_LEN, "ledger") else {
        return None;
    };
    let text = String::from_utf8(bytes).ok()?;
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.splitn(5, ' ');
        let family = family_of(it.next()?)?;
        let table = it.next()?.to_string();
        let chain = it.next()?.to_string();
        let handle = it.next()?.parse().ok()?;
        let note = it.next().unwrap_or("").to_string();
        out.push(Entry {
            family,
            table,
            chain,
            handle,
            note,
        });
    }
    Some(out)
}

/// The ledgers of a network (for GC): `(name, entries)`, unreadable ones
/// with no entries.
pub fn list(feature: &str, network: &str) -> Vec<(Ledger, Vec<Entry>)> {
    let Some(dir) = Ledger::network_dir(feature, network) else {
        return Vec::new();
    };
    let Ok(read) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in read.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if name.starts_with('.') || !safe_component(&name) {
            continue;
        }
        let ledger = Ledger {
            dir: dir.clone(),
            name,
        };
        let entries = load_path(&ledger.path()).unwrap_or_default();
        out.push((ledger, entries));
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    out
}

/// GC's last step: removes the ledgers of a network whose name `live`
/// does not keep.
pub fn remove_unlisted(feature: &str, network: &str, live: impl Fn(&str) -> bool) -> Result<()> {
    for (l, _) in list(feature, network) {
        if !live(l.name()) {
            l.remove()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_ledgers_round_trip_and_refuse_odd_names() {
        let l = Ledger::new("unit", "net1", "ctr-1").unwrap();
        assert_eq!(l.load(), None);
        let entries = vec![
            Entry {
                family: Family::Ip,
                table: "cni_hostport".into(),
                chain: "hostports".into(),
                handle: 11,
                note: "udp/5353".into(),
            },
            Entry {
                family: Family::Ip6,
                table: "cni_hostport".into(),
                chain: "masquerading".into(),
                handle: 7,
                note: String::new(),
            },
        ];
        l.store(&entries).unwrap();
        assert_eq!(l.load(), Some(entries.clone()));
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(l.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let listed = list("unit", "net1");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].1, entries);
        l.store(&[]).unwrap();
        assert_eq!(l.load(), None);
        assert!(Ledger::new("unit", "..", "x").is_none());
        assert!(Ledger::new("unit", "n", "a/b").is_none());
    }
}
