//! The saved delegate configs under `dataDir` (`/var/lib/cni/flannel`):
//! what DEL, CHECK and GC hand the delegate, since subnet.env may have
//! changed or be gone by then.
//!
//! Two names per attachment, both holding the rendered config's bytes
//! exactly (compact JSON, no newline), directory 0700, files 0600:
//!
//! - `<containerID>@<ifname>`: ours, one per attachment, so two flannel
//!   attachments in one sandbox no longer overwrite each other (the Go
//!   plugin keys by container ID only). A container ID never contains `@`,
//!   so the name splits back unambiguously.
//! - `<containerID>`: the Go plugin's name, written too (last writer wins,
//!   as in Go), so the Go plugin's DEL still finds a config if the node
//!   goes back to it.
//!
//! A `<containerID>` with no `<containerID>@*` beside it was written by the
//! Go plugin (or is the copy of an attachment whose own file is already
//! gone): DEL and CHECK of any interface of that container use it, as the
//! Go plugin would. A `<containerID>` beside a `<containerID>@*` is the copy
//! of another attachment and is left alone.
//!
//! Writes are atomic: a temp file (`.tmp-flannel-*`, a name no container
//! ID can have) is written, fsynced and renamed over the name. No symlink
//! is followed: an entry that is a symlink or not a regular file where a
//! saved config should be is refused, never written through nor read.
//! `dataDir` itself may be a symlink (as `/var/lib/cni` sometimes is).

use libcni::files::{self, Durability, EntryKind, WriteStep};
use libcni::types::config::is_valid_name;
use libcni::types::Attachment;
use libcni::Error;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode};
use nix::unistd::{fsync, unlinkat, UnlinkatFlags};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Separates container ID and interface in our file names.
pub const SEP: char = '@';
/// Temp files; a leading `.` is never a container ID.
pub const TEMP_PREFIX: &str = ".tmp-flannel-";
/// A temp file older than this was left by a crash (a write takes
/// milliseconds), so GC may remove it.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(120);
/// A saved config is a few hundred bytes; a file larger than this is not
/// one (and is not read to the end).
const MAX_LEN: u64 = 1 << 20;

/// Which of the two names a saved config was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `<containerID>@<ifname>`.
    Attachment,
    /// `<containerID>`, written by the Go plugin.
    Legacy,
}

/// A saved config, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub bytes: Vec<u8>,
    pub source: Source,
    pub path: PathBuf,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found(Saved),
    Absent,
    /// A symlink or another non-regular file sits where a saved config
    /// would be: never followed.
    NotRegular(PathBuf),
}

/// One entry of the directory, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `<containerID>@<ifname>`.
    Attachment(Attachment),
    /// `<containerID>`.
    Legacy(String),
    /// A temp file older than [`STALE_TEMP_AGE`].
    StaleTemp(String),
}

impl Entry {
    /// The file name of the entry.
    pub fn file_name(&self) -> String {
        match self {
            Entry::Attachment(a) => attachment_name(a),
            Entry::Legacy(id) => id.clone(),
            Entry::StaleTemp(name) => name.clone(),
        }
    }
}

/// `<containerID>@<ifname>`.
pub fn attachment_name(who: &Attachment) -> String {
    format!("{}{SEP}{}", who.container_id, who.ifname)
}

/// The saved configs of one `dataDir`.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

enum FileRead {
    Content(Vec<u8>),
    Missing,
    NotRegular,
}

impl Store {
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Saves `bytes` for `who` under both names, creating the directory
    /// (0700) when missing. Refuses, before writing anything, when either
    /// name is taken by something that is not a regular file.
    pub fn save(&self, who: &Attachment, bytes: &[u8]) -> Result<(), Error> {
        files::create_dir_all(&self.dir, 0o700)
            .map_err(|e| Error::io(format!("creating dataDir {}", self.dir.display()), e))?;
        let dir = self
            .open_dir()?
            .ok_or_else(|| self.io_error("opening", Errno::ENOENT))?;
        let names = [attachment_name(who), who.container_id.clone()];
        for name in &names {
            if self.entry_kind(&dir, name)? == EntryKind::NotRegular {
                return Err(self.refused(name));
            }
        }
        for (i, name) in names.iter().enumerate() {
            if let Err(e) = self.replace(&dir, name, bytes) {
                if i > 0 {
                    // Half saved: undo, so the failed ADD leaves nothing.
                    let _ = self.unlink(&dir, &names[0]);
                }
                return Err(e);
            }
        }
        // The renames, durable: after a crash the runtime's DEL needs them.
        fsync(&dir).map_err(|e| self.io_error("syncing", e))
    }

    /// The saved config for `who`: its own file, else a Go plugin's
    /// `<containerID>` that no other attachment's copy explains.
    pub fn load(&self, who: &Attachment) -> Result<Lookup, Error> {
        let Some(dir) = self.open_dir()? else {
            return Ok(Lookup::Absent);
        };
        let own = attachment_name(who);
        match self.read(&dir, &own)? {
            FileRead::Content(bytes) => {
                return Ok(Lookup::Found(Saved {
                    bytes,
                    source: Source::Attachment,
                    path: self.dir.join(own),
                }))
            }
            FileRead::NotRegular => return Ok(Lookup::NotRegular(self.dir.join(own))),
            FileRead::Missing => {}
        }
        let legacy = &who.container_id;
        match self.read(&dir, legacy)? {
            FileRead::Missing => Ok(Lookup::Absent),
            FileRead::NotRegular => Ok(Lookup::NotRegular(self.dir.join(legacy))),
            FileRead::Content(bytes) => {
                if self.has_attachments_of(&dir, legacy)? {
                    // The copy of another attachment of this container.
                    Ok(Lookup::Absent)
                } else {
                    Ok(Lookup::Found(Saved {
                        bytes,
                        source: Source::Legacy,
                        path: self.dir.join(legacy),
                    }))
                }
            }
        }
    }

    /// Removes what `load` found for `who`, once the delegate's DEL has
    /// succeeded. With its own file, the `<containerID>` copy goes too
    /// unless another attachment of the container still has a file; the
    /// copy goes first, so the attachment's own file is the last to go.
    pub fn remove(&self, who: &Attachment, source: Source) -> Result<(), Error> {
        let Some(dir) = self.open_dir()? else {
            return Ok(());
        };
        let own = attachment_name(who);
        match source {
            Source::Legacy => self.unlink(&dir, &who.container_id),
            Source::Attachment => {
                let others = self
                    .attachments_of(&dir, &who.container_id)?
                    .into_iter()
                    .any(|n| n != own);
                if !others {
                    self.unlink(&dir, &who.container_id)?;
                }
                self.unlink(&dir, &own)
            }
        }
    }

    /// Removes `who`'s files after a failed ADD was rolled back.
    pub fn discard(&self, who: &Attachment) -> Result<(), Error> {
        self.remove(who, Source::Attachment)
    }

    /// Every saved config and stale temp file, by name (for GC). Entries
    /// that are not regular files, and names that are neither, are left
    /// out.
    pub fn list(&self) -> Result<Vec<Entry>, Error> {
        let Some(dir) = self.open_dir()? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for name in self.names(&dir)? {
            if name.starts_with(TEMP_PREFIX) {
                if self.is_stale_temp(&dir, &name)? {
                    out.push(Entry::StaleTemp(name));
                }
                continue;
            }
            let entry = match name.split_once(SEP) {
                Some((id, ifname)) if is_valid_name(id) && !ifname.is_empty() => {
                    Entry::Attachment(Attachment {
                        container_id: id.to_string(),
                        ifname: ifname.to_string(),
                    })
                }
                None if is_valid_name(&name) => Entry::Legacy(name.clone()),
                _ => continue,
            };
            if self.entry_kind(&dir, &name)? == EntryKind::Regular {
                out.push(entry);
            }
        }
        out.sort_by_key(Entry::file_name);
        Ok(out)
    }

    /// The content of a listed entry; `None` if it is gone or not a
    /// regular file.
    pub fn read_entry(&self, entry: &Entry) -> Result<Option<Vec<u8>>, Error> {
        let Some(dir) = self.open_dir()? else {
            return Ok(None);
        };
        match self.read(&dir, &entry.file_name())? {
            FileRead::Content(b) => Ok(Some(b)),
            _ => Ok(None),
        }
    }

    /// Removes a listed entry (GC).
    pub fn remove_entry(&self, entry: &Entry) -> Result<(), Error> {
        match self.open_dir()? {
            Some(dir) => self.unlink(&dir, &entry.file_name()),
            None => Ok(()),
        }
    }

    // ---- internals --------------------------------------------------------

    /// The directory, `None` when it does not exist. `dataDir` itself may
    /// be a symlink; the entries in it are never followed.
    fn open_dir(&self) -> Result<Option<OwnedFd>, Error> {
        files::open_dir(&self.dir).map_err(|e| self.io_error("opening", e))
    }

    /// Writes `bytes` to a new temp file (0600, fsynced) and renames it
    /// over `name`.
    fn replace(&self, dir: &OwnedFd, name: &str, bytes: &[u8]) -> Result<(), Error> {
        files::replace_at(dir.as_fd(), TEMP_PREFIX, name, bytes, Durability::PowerLoss).map_err(
            |e| match e.step {
                WriteStep::CreateTemp => self.io_error(&format!("creating {}", e.temp), e.source),
                WriteStep::Rename => {
                    self.io_error(&format!("renaming {} to {name}", e.temp), e.source)
                }
                _ => Error::io(
                    format!("writing {}", self.dir.join(&e.temp).display()),
                    e.source,
                ),
            },
        )
    }

    fn read(&self, dir: &OwnedFd, name: &str) -> Result<FileRead, Error> {
        let file = match files::open_nofollow_at(dir.as_fd(), name) {
            Ok(f) => f,
            Err(Errno::ENOENT) => return Ok(FileRead::Missing),
            Err(Errno::ELOOP) => return Ok(FileRead::NotRegular),
            Err(e) => return Err(self.io_error(&format!("opening {name}"), e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("inspecting {}", self.dir.join(name).display()), e))?;
        if !meta.is_file() {
            return Ok(FileRead::NotRegular);
        }
        let mut bytes = Vec::with_capacity(512);
        file.take(MAX_LEN)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(format!("reading {}", self.dir.join(name).display()), e))?;
        Ok(FileRead::Content(bytes))
    }

    fn entry_kind(&self, dir: &OwnedFd, name: &str) -> Result<EntryKind, Error> {
        files::entry_kind_at(dir.as_fd(), name)
            .map_err(|e| self.io_error(&format!("inspecting {name}"), e))
    }

    fn is_stale_temp(&self, dir: &OwnedFd, name: &str) -> Result<bool, Error> {
        match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let mtime = SystemTime::UNIX_EPOCH
                    + Duration::from_secs(u64::try_from(st.st_mtime).unwrap_or(0));
                Ok(SystemTime::now()
                    .duration_since(mtime)
                    .is_ok_and(|age| age > STALE_TEMP_AGE))
            }
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(self.io_error(&format!("inspecting {name}"), e)),
        }
    }

    fn names(&self, dir: &OwnedFd) -> Result<Vec<String>, Error> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut d =
            Dir::openat(dir, ".", flags, Mode::empty()).map_err(|e| self.io_error("listing", e))?;
        let mut out = Vec::new();
        for entry in d.iter() {
            let entry = entry.map_err(|e| self.io_error("listing", e))?;
            if let Ok(name) = entry.file_name().to_str() {
                if name != "." && name != ".." {
                    out.push(name.to_string());
                }
            }
        }
        Ok(out)
    }

    /// The names `<id>@*` in the directory.
    fn attachments_of(&self, dir: &OwnedFd, id: &str) -> Result<Vec<String>, Error> {
        let prefix = format!("{id}{SEP}");
        Ok(self
            .names(dir)?
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect())
    }

    fn has_attachments_of(&self, dir: &OwnedFd, id: &str) -> Result<bool, Error> {
        Ok(!self.attachments_of(dir, id)?.is_empty())
    }

    fn unlink(&self, dir: &OwnedFd, name: &str) -> Result<(), Error> {
        match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(self.io_error(&format!("removing {name}"), e)),
        }
    }

    fn io_error(&self, what: &str, e: impl Into<std::io::Error>) -> Error {
        Error::io(
            format!("{what} in flannel dataDir {}", self.dir.display()),
            e.into(),
        )
    }

    fn refused(&self, name: &str) -> Error {
        Error::io(
            format!(
                "refusing to save the delegate config to {}",
                self.dir.join(name).display()
            ),
            std::io::Error::other("it exists and is not a regular file (a symlink?)"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::sync::atomic::{AtomicU32, Ordering};

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tmp(tag: &str) -> Tmp {
        static DIRS: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "flannel-store-{tag}-{}-{}",
            std::process::id(),
            DIRS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        Tmp(p)
    }

    fn who(id: &str, ifname: &str) -> Attachment {
        Attachment {
            container_id: id.into(),
            ifname: ifname.into(),
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn save_writes_both_names_with_go_modes() {
        let t = tmp("save");
        let data = t.0.join("a/b/flannel");
        let s = Store::new(&data);
        s.save(&who("c1", "eth0"), b"{\"type\":\"bridge\"}")
            .unwrap();
        assert_eq!(names(&data), ["c1", "c1@eth0"]);
        for n in ["c1", "c1@eth0"] {
            assert_eq!(
                std::fs::read(data.join(n)).unwrap(),
                b"{\"type\":\"bridge\"}"
            );
            let mode = std::fs::metadata(data.join(n)).unwrap().mode() & 0o777;
            assert_eq!(mode & !0o600, 0, "{n}: {mode:o}");
        }
        let mode = std::fs::metadata(&data).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o700, 0, "{mode:o}");
        let found = s.load(&who("c1", "eth0")).unwrap();
        assert_eq!(
            found,
            Lookup::Found(Saved {
                bytes: b"{\"type\":\"bridge\"}".to_vec(),
                source: Source::Attachment,
                path: data.join("c1@eth0"),
            })
        );
        s.remove(&who("c1", "eth0"), Source::Attachment).unwrap();
        assert!(names(&data).is_empty());
        assert_eq!(s.load(&who("c1", "eth0")).unwrap(), Lookup::Absent);
    }

    #[test]
    fn a_go_file_is_read_for_any_interface_of_its_container() {
        let t = tmp("legacy");
        std::fs::create_dir_all(&t.0).unwrap();
        std::fs::write(t.0.join("c1"), b"{\"go\":1}").unwrap();
        let s = Store::new(&t.0);
        match s.load(&who("c1", "net1")).unwrap() {
            Lookup::Found(saved) => {
                assert_eq!(saved.source, Source::Legacy);
                assert_eq!(saved.bytes, b"{\"go\":1}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.load(&who("c2", "eth0")).unwrap(), Lookup::Absent);
        s.remove(&who("c1", "net1"), Source::Legacy).unwrap();
        assert!(names(&t.0).is_empty());
    }

    #[test]
    fn two_attachments_of_one_container_keep_their_own_configs() {
        let t = tmp("two");
        let s = Store::new(&t.0);
        s.save(&who("c1", "eth0"), b"A").unwrap();
        s.save(&who("c1", "net1"), b"B").unwrap();
        assert_eq!(names(&t.0), ["c1", "c1@eth0", "c1@net1"]);
        assert_eq!(
            std::fs::read(t.0.join("c1")).unwrap(),
            b"B",
            "last writer, as Go"
        );
        let load = |ifname| match s.load(&who("c1", ifname)).unwrap() {
            Lookup::Found(saved) => saved.bytes,
            other => panic!("{other:?}"),
        };
        assert_eq!((load("eth0"), load("net1")), (b"A".to_vec(), b"B".to_vec()));
        s.remove(&who("c1", "net1"), Source::Attachment).unwrap();
        assert_eq!(names(&t.0), ["c1", "c1@eth0"], "the copy stays for eth0");
        // A repeated DEL of net1 does not take eth0's config for its own.
        assert_eq!(s.load(&who("c1", "net1")).unwrap(), Lookup::Absent);
        s.remove(&who("c1", "eth0"), Source::Attachment).unwrap();
        assert!(names(&t.0).is_empty());
    }

    #[test]
    fn symlinks_are_refused_and_never_followed() {
        let t = tmp("symlink");
        std::fs::create_dir_all(&t.0).unwrap();
        let outside = tmp("outside");
        std::fs::create_dir_all(&outside.0).unwrap();
        let target = outside.0.join("target");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, t.0.join("c1@eth0")).unwrap();
        std::os::unix::fs::symlink(&target, t.0.join("c2")).unwrap();
        let s = Store::new(&t.0);
        let e = s.save(&who("c1", "eth0"), b"x").unwrap_err();
        assert_eq!(e.code(), 5);
        assert!(e.to_string().contains("c1@eth0"), "{e}");
        let e = s.save(&who("c2", "eth0"), b"x").unwrap_err();
        assert!(e.to_string().contains("/c2:"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(
            !t.0.join("c2@eth0").exists(),
            "nothing written when refused"
        );
        assert_eq!(
            s.load(&who("c1", "eth0")).unwrap(),
            Lookup::NotRegular(t.0.join("c1@eth0"))
        );
        assert_eq!(
            s.load(&who("c2", "eth0")).unwrap(),
            Lookup::NotRegular(t.0.join("c2"))
        );
        assert!(s.list().unwrap().is_empty(), "{:?}", s.list());
    }

    #[test]
    fn list_splits_names_and_skips_the_rest() {
        let t = tmp("list");
        let s = Store::new(&t.0);
        s.save(&who("c1", "eth0"), b"A").unwrap();
        std::fs::write(t.0.join("go-cid"), b"G").unwrap();
        std::fs::write(t.0.join(".tmp-flannel-fresh"), b"").unwrap();
        std::fs::write(t.0.join("not a cid"), b"").unwrap();
        std::fs::create_dir(t.0.join("c9@eth0")).unwrap();
        assert_eq!(
            s.list().unwrap(),
            vec![
                Entry::Legacy("c1".into()),
                Entry::Attachment(who("c1", "eth0")),
                Entry::Legacy("go-cid".into()),
            ]
        );
        assert_eq!(
            s.read_entry(&Entry::Legacy("go-cid".into())).unwrap(),
            Some(b"G".to_vec())
        );
        assert!(Store::new(t.0.join("none")).list().unwrap().is_empty());
    }
}
