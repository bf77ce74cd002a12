//! The lease directory `<dataDir>/<network>/`, in the reference plugin's
//! format, so a node can switch between it and this plugin either way:
//!
//! - one file per leased address, named by the address (`10.1.0.5`,
//!   `2001:db8::5`), holding `<containerID>\r\n<ifname>` with no trailing
//!   newline (older versions wrote only the container ID; those are read too);
//! - `last_reserved_ip.<range set index>`, holding the last address handed
//!   out from that set;
//! - `lock`, taken with `flock(LOCK_EX)` as the Go plugin's go-filemutex
//!   does, so the two exclude each other.
//!
//! Everything is done relative to one directory descriptor opened with
//! `O_NOFOLLOW`, and no symlink is ever followed: an entry that is a symlink
//! (or anything but a regular file) where a lease should be is refused.
//!
//! A lease is never visible half-written: its content goes into a temp file
//! (`.tmp-host-local-*`, a name that is no address, so the Go plugin never
//! takes it for a lease; written by [`libcni::files::write_temp_at`]),
//! then `link()`ed to the address name; the link fails atomically if the
//! address is taken. A temp file left by a crash is removed by the next
//! scan under the lock. `last_reserved_ip.*` is replaced the same way, by
//! `rename()`.
//!
//! Each lease we write gets a second name, an *index link*
//! `.held-by-<hash>-<address>` (a hard link: same file, same content),
//! where `<hash>` is [`attachment_hash`] of the holder. An ADD must find
//! every lease of its attachment (the reference refuses a duplicate
//! allocation), and without the index that means opening every lease; with
//! it, one directory listing tells which leases are ours to read: those
//! linked under our hash, and those with no index link at all (written by
//! the Go plugin or by a version of ours before the index). An index link
//! counts only while it is the same inode as its lease (`d_ino` in the
//! listing, no extra syscall); anything else is stale and removed under the
//! lock. The Go plugin ignores the links on ADD (not an address) and
//! removes them on DEL (it removes every file holding `id\r\nifname`), so a
//! node still switches either way.
//!
//! Nothing is fsynced ([`LEASE_DURABILITY`]), as the Go plugin does not: a
//! killed plugin never leaves a partial lease, and what a power loss can
//! leave (an empty lease file, blocking only its own address) is harmless
//! and removed by GC, while an fsync costs milliseconds of every ADD.

use crate::config::Location;
use libcni::fault;
use libcni::files::{self, Durability, EntryKind, WriteError, WriteStep};
use libcni::types::Attachment;
use libcni::Error;
use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{linkat, unlinkat, UnlinkatFlags};
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Leases and `last_reserved_ip.*` survive a killed process, not a power
/// loss (see the module comment).
pub const LEASE_DURABILITY: Durability = Durability::ProcessCrash;

/// The lock file, shared with the Go plugin.
pub const LOCK_FILE: &str = "lock";
/// `last_reserved_ip.<range set index>`.
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";
/// Temp files: never an address, so neither plugin takes one for a lease.
pub const TEMP_PREFIX: &str = ".tmp-host-local-";

/// Index links: `.held-by-<attachment hash, 16 hex digits>-<address>`.
pub const INDEX_PREFIX: &str = ".held-by-";

/// The hash naming `who`'s index links: 64-bit FNV-1a of the lease content,
/// a fixed function so every version of the plugin computes the same name.
pub fn attachment_hash(who: &Attachment) -> u64 {
    fnv1a64(Holder::content_for(who).as_bytes())
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The index link of `addr` held by the attachment hashing to `hash`.
pub fn index_name(hash: u64, addr: IpAddr) -> String {
    format!("{INDEX_PREFIX}{hash:016x}-{addr}")
}

/// The hash and address of an index link's name.
fn parse_index_name(name: &str) -> Option<(u64, IpAddr)> {
    let rest = name.strip_prefix(INDEX_PREFIX)?;
    let (hash, addr) = rest.split_once('-')?;
    if hash.len() != 16 {
        return None;
    }
    Some((u64::from_str_radix(hash, 16).ok()?, addr.parse().ok()?))
}

/// A lease file is `<id>\r\n<ifname>`: a few dozen bytes. Anything longer
/// is garbage (and not read to the end).
const MAX_LEASE_LEN: u64 = 4096;

/// Who holds a lease, as its file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// `<containerID>\r\n<ifname>`.
    Attachment(Attachment),
    /// A bare container ID, as versions before 0.7 wrote.
    LegacyId(String),
    /// Empty (a crash of the Go plugin between create and write), not
    /// UTF-8, or too long. Blocks its own address and nothing else.
    Unknown,
}

impl Holder {
    /// Reads file content as the reference does: surrounding whitespace
    /// trimmed, then `id\r\nifname` or a bare ID.
    pub fn parse(bytes: &[u8]) -> Holder {
        if bytes.len() as u64 > MAX_LEASE_LEN {
            return Holder::Unknown;
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Holder::Unknown;
        };
        let text = text.trim();
        if text.is_empty() {
            return Holder::Unknown;
        }
        match text.split_once("\r\n") {
            Some((id, ifname)) => Holder::Attachment(Attachment {
                container_id: id.to_string(),
                ifname: ifname.to_string(),
            }),
            None => Holder::LegacyId(text.to_string()),
        }
    }

    /// The lease content for `who`, exactly as the reference writes it.
    pub fn content_for(who: &Attachment) -> String {
        format!("{}\r\n{}", who.container_id.trim(), who.ifname)
    }

    /// True if the file names exactly this container ID and interface.
    pub fn is(&self, who: &Attachment) -> bool {
        matches!(self, Holder::Attachment(a)
            if a.container_id == who.container_id.trim() && a.ifname == who.ifname)
    }

    /// True if this is a legacy file holding just `container_id`.
    pub fn is_legacy_of(&self, container_id: &str) -> bool {
        matches!(self, Holder::LegacyId(id) if id == container_id.trim())
    }

    /// True if the lease belongs to `who`, in either format.
    pub fn belongs_to(&self, who: &Attachment) -> bool {
        self.is(who) || self.is_legacy_of(&who.container_id)
    }
}

/// One lease file found by a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The file name, as found (the address in the reference's spelling).
    pub name: String,
    pub addr: IpAddr,
    /// The attachment hash its index link names; `None` when the lease has
    /// no index link (the holder is then known only by reading it).
    pub indexed_as: Option<u64>,
    /// Its index links, removed with it.
    pub links: Vec<String>,
    /// The content, when the scan was asked to read it.
    pub holder: Option<Holder>,
}

/// What a scan is told of a lease when deciding whether to read it: the
/// address and the attachment hash of its index link, if any.
pub type ReadFilter<'a> = &'a dyn Fn(IpAddr, Option<u64>) -> bool;

/// A read filter for the leases that can belong to `who`: those indexed
/// under its hash and those with no index (their holder is unknown).
pub fn maybe_held_by(who: &Attachment) -> impl Fn(IpAddr, Option<u64>) -> bool {
    let key = attachment_hash(who);
    move |_, indexed_as| indexed_as.is_none_or(|h| h == key)
}

/// What one pass over the directory found.
#[derive(Debug, Default)]
pub struct Scan {
    pub leases: Vec<Lease>,
    /// Entries named like an address that are not regular files (a
    /// symlink, a directory, a FIFO...): never followed nor touched.
    pub refused: Vec<String>,
}

/// An open lease directory; holds the lock when opened with it.
pub struct Store {
    path: PathBuf,
    dir: OwnedFd,
    /// The flocked lock file; `None` for read-only verbs (CHECK, STATUS).
    lock: Option<File>,
}

impl Store {
    /// ADD: creates the directory (mode 0755, as the reference) when
    /// missing, opens it and takes the lock.
    pub fn create_locked(loc: &Location) -> Result<Store, Error> {
        let path = loc.dir();
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(&loc.data_dir)
            .map_err(|e| Error::io(format!("creating dataDir {}", loc.data_dir.display()), e))?;
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o755).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(format!("creating {}", path.display()), e)),
        }
        let store = Store::open(path, true)?;
        store.ok_or_else(|| {
            Error::io(
                format!("opening {}", loc.dir().display()),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            )
        })
    }

    /// DEL and GC: opens and locks the directory; `None` when there is none
    /// (nothing to release, and nothing is created).
    pub fn open_locked(loc: &Location) -> Result<Option<Store>, Error> {
        Store::open(loc.dir(), true)
    }

    /// CHECK and STATUS: opens without the lock (they only read, and every
    /// lease we write appears whole).
    pub fn open_unlocked(loc: &Location) -> Result<Option<Store>, Error> {
        Store::open(loc.dir(), false)
    }

    fn open(path: PathBuf, lock: bool) -> Result<Option<Store>, Error> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let dir = match nix::fcntl::open(&path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => {
                return Err(refused(&path, "the network's lease directory is a symlink"));
            }
            Err(Errno::ENOTDIR) => {
                return Err(refused(
                    &path,
                    "the network's lease directory is not a directory",
                ));
            }
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e.into())),
        };
        let mut store = Store {
            path,
            dir,
            lock: None,
        };
        if lock {
            store.lock = Some(store.take_lock()?);
        }
        Ok(Some(store))
    }

    /// Opens `lock` (creating it) and blocks on `flock(LOCK_EX)`.
    fn take_lock(&self) -> Result<File, Error> {
        let flags = OFlag::O_RDONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd =
            openat(&self.dir, LOCK_FILE, flags, Mode::from_bits_truncate(0o600)).map_err(|e| {
                if e == Errno::ELOOP {
                    refused(&self.path.join(LOCK_FILE), "the lock file is a symlink")
                } else {
                    self.io_error(&format!("opening {LOCK_FILE}"), e)
                }
            })?;
        let file = File::from(fd);
        file.lock().map_err(|e| {
            Error::io(
                format!("locking {}", self.path.join(LOCK_FILE).display()),
                e,
            )
        })?;
        Ok(file)
    }

    /// The directory, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One pass over the directory. Lists every lease with its index links,
    /// reads the content of those for which `read(addr, indexed_as)` is
    /// true, and (under the lock) removes temp files left by a crash (no ADD
    /// of ours is running, so they are stale) and stale index links. Nothing
    /// else is touched.
    pub fn scan(&self, read: ReadFilter) -> Result<Scan, Error> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut dir = Dir::openat(&self.dir, ".", flags, Mode::empty())
            .map_err(|e| self.io_error("listing", e))?;
        let mut scan = Scan::default();
        let mut inodes: HashMap<IpAddr, (usize, u64)> = HashMap::new();
        let mut links: Vec<(String, u64, IpAddr, u64)> = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| self.io_error("listing", e))?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name.starts_with(TEMP_PREFIX) {
                if self.lock.is_some() {
                    self.remove_stale(name);
                }
                continue;
            }
            if let Some((hash, addr)) = parse_index_name(name) {
                links.push((name.to_string(), hash, addr, entry.ino()));
                continue;
            }
            let Ok(addr) = name.parse::<IpAddr>() else {
                continue;
            };
            let kind = match entry.file_type() {
                Some(Type::File) => EntryKind::Regular,
                Some(_) => EntryKind::NotRegular,
                None => self.entry_kind(name)?,
            };
            match kind {
                EntryKind::Missing => continue, // gone since readdir
                EntryKind::Regular => {}
                EntryKind::NotRegular => {
                    scan.refused.push(name.to_string());
                    continue;
                }
            }
            inodes.insert(addr, (scan.leases.len(), entry.ino()));
            scan.leases.push(Lease {
                name: name.to_string(),
                addr,
                indexed_as: None,
                links: Vec::new(),
                holder: None,
            });
        }
        for (name, hash, addr, ino) in links {
            match inodes.get(&addr) {
                Some(&(i, lease_ino)) if lease_ino == ino => {
                    let lease = &mut scan.leases[i];
                    lease.indexed_as = Some(hash);
                    lease.links.push(name);
                }
                // Its lease is gone, or the address was leased again since.
                _ if self.lock.is_some() => self.remove_stale(&name),
                _ => {}
            }
        }
        let mut gone = Vec::new();
        for (i, lease) in scan.leases.iter_mut().enumerate() {
            if !read(lease.addr, lease.indexed_as) {
                continue;
            }
            match self.read_lease_file(&lease.name)? {
                LeaseRead::Content(h) => lease.holder = Some(h),
                LeaseRead::Missing => gone.push(i),
                LeaseRead::NotRegular => {
                    scan.refused.push(lease.name.clone());
                    gone.push(i);
                }
            }
        }
        for i in gone.into_iter().rev() {
            scan.leases.remove(i);
        }
        Ok(scan)
    }

    /// What the entry is, without following it.
    fn entry_kind(&self, name: &str) -> Result<EntryKind, Error> {
        files::entry_kind_at(self.dir.as_fd(), name)
            .map_err(|e| self.io_error(&format!("inspecting {name}"), e))
    }

    /// Removes a stale temp file or index link; a failure only costs speed
    /// (the next scan under the lock tries again), so it is only logged.
    fn remove_stale(&self, name: &str) {
        match unlinkat(&self.dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => eprintln!(
                "host-local: cannot remove stale {}: {e}",
                self.path.join(name).display()
            ),
        }
    }

    fn read_lease_file(&self, name: &str) -> Result<LeaseRead, Error> {
        let file = match files::open_nofollow_at(self.dir.as_fd(), name) {
            Ok(f) => f,
            Err(Errno::ENOENT) => return Ok(LeaseRead::Missing),
            Err(Errno::ELOOP) => return Ok(LeaseRead::NotRegular),
            Err(e) => return Err(self.io_error(&format!("opening {name}"), e)),
        };
        let mut bytes = Vec::with_capacity(80);
        file.take(MAX_LEASE_LEN + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(format!("reading {}", self.path.join(name).display()), e))?;
        Ok(LeaseRead::Content(Holder::parse(&bytes)))
    }

    /// The holder of `addr`'s lease, `None` if there is no lease. A lease
    /// that is not a regular file is refused.
    pub fn read_lease(&self, addr: IpAddr) -> Result<Option<Holder>, Error> {
        let name = addr.to_string();
        if self.entry_kind(&name)? == EntryKind::NotRegular {
            return Err(refused(
                &self.path.join(&name),
                "a lease that is not a regular file",
            ));
        }
        match self.read_lease_file(&name)? {
            LeaseRead::Content(h) => Ok(Some(h)),
            LeaseRead::Missing => Ok(None),
            LeaseRead::NotRegular => {
                Err(refused(&self.path.join(&name), "a lease that is a symlink"))
            }
        }
    }

    /// Takes `addr` for `who`; false if it is already taken. The lease
    /// appears whole or not at all, then gets its index link (a lease left
    /// without one by a crash is read by every scan instead: slower, never
    /// wrong).
    pub fn reserve(&self, addr: IpAddr, who: &Attachment) -> Result<bool, Error> {
        let name = addr.to_string();
        let temp = files::write_temp_at(
            self.dir.as_fd(),
            TEMP_PREFIX,
            Holder::content_for(who).as_bytes(),
            LEASE_DURABILITY,
        )
        .map_err(|e| self.write_error(e))?;
        fault::point("host-local/temp-written");
        let linked = match linkat(
            &self.dir,
            temp.as_str(),
            &self.dir,
            name.as_str(),
            AtFlags::empty(),
        ) {
            Ok(()) => Ok(true),
            Err(Errno::EEXIST) => Ok(false),
            Err(e) => Err(self.io_error(&format!("linking the lease {name}"), e)),
        };
        if matches!(linked, Ok(true)) {
            fault::point("host-local/linked");
            self.link_index(&temp, index_name(attachment_hash(who), addr));
        }
        // If this fails the temp file stays until the next scan under the lock.
        self.remove_stale(&temp);
        linked
    }

    /// Links the just written lease (still under its temp name) as `link`.
    /// A stale link of that name (a lease of `who` at that address released
    /// by someone who left the link) is replaced.
    fn link_index(&self, temp: &str, link: String) {
        for _ in 0..2 {
            match linkat(&self.dir, temp, &self.dir, link.as_str(), AtFlags::empty()) {
                Err(Errno::EEXIST) => self.remove_stale(&link),
                Ok(()) => return,
                // No index for this lease: scans read it instead.
                Err(_) => return,
            }
        }
    }

    /// Removes the lease file `name` and its index `links` (the links
    /// first: a crash between leaves an unindexed lease, which scans read,
    /// rather than a stale link); false if the lease was already gone.
    pub fn release(&self, name: &str, links: &[String]) -> Result<bool, Error> {
        for link in links {
            match unlinkat(&self.dir, link.as_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => return Err(self.io_error(&format!("removing the index link {link}"), e)),
            }
        }
        match unlinkat(&self.dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(self.io_error(&format!("removing the lease {name}"), e)),
        }
    }

    /// The address in `last_reserved_ip.<set>`; `None` when there is no
    /// such file or it holds no address (the walk then starts over).
    pub fn last_reserved(&self, set: usize) -> Result<Option<IpAddr>, Error> {
        let name = format!("{LAST_RESERVED_PREFIX}{set}");
        let file = match files::open_nofollow_at(self.dir.as_fd(), &name) {
            Ok(f) => f,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => return Err(refused(&self.path.join(&name), "it is a symlink")),
            Err(e) => return Err(self.io_error(&format!("opening {name}"), e)),
        };
        let mut bytes = Vec::new();
        file.take(MAX_LEASE_LEN)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(format!("reading {}", self.path.join(&name).display()), e))?;
        Ok(std::str::from_utf8(&bytes)
            .ok()
            .and_then(|s| s.trim().parse::<IpAddr>().ok()))
    }

    /// Replaces `last_reserved_ip.<set>` with `addr`, atomically.
    pub fn set_last_reserved(&self, set: usize, addr: IpAddr) -> Result<(), Error> {
        let name = format!("{LAST_RESERVED_PREFIX}{set}");
        let content = addr.to_string();
        files::replace_at(
            self.dir.as_fd(),
            TEMP_PREFIX,
            &name,
            content.as_bytes(),
            LEASE_DURABILITY,
        )
        .map_err(|e| match e.step {
            WriteStep::Rename => self.io_error(&format!("replacing {name}"), e.source),
            _ => self.write_error(e),
        })?;
        fault::point("host-local/last-reserved");
        Ok(())
    }

    /// The error of a temp file that could not be created or written.
    fn write_error(&self, e: WriteError) -> Error {
        match e.step {
            WriteStep::CreateTemp => self.io_error("creating a temp file", e.source),
            _ => Error::io(
                format!("writing {}", self.path.join(&e.temp).display()),
                e.source,
            ),
        }
    }

    fn io_error(&self, what: &str, e: impl Into<std::io::Error>) -> Error {
        Error::io(format!("{what} in {}", self.path.display()), e.into())
    }
}

/// What reading a lease file gave.
enum LeaseRead {
    Content(Holder),
    Missing,
    NotRegular,
}

/// An entry we will not use: names it and says why.
fn refused(path: &Path, why: &str) -> Error {
    Error::io(
        format!("refusing {}", path.display()),
        std::io::Error::other(format!(
            "{why}; host-local never follows symlinks and never creates them in its dataDir: remove it"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    struct Tmp(PathBuf);

    impl Tmp {
        fn new(tag: &str) -> Tmp {
            let p = std::env::temp_dir().join(format!("hl-store-{}-{tag}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Tmp(p)
        }
        fn loc(&self) -> Location {
            Location {
                data_dir: self.0.clone(),
                network: "net".into(),
            }
        }
        fn dir(&self) -> PathBuf {
            self.0.join("net")
        }
        fn names(&self) -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(self.dir())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        }
    }

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn who(id: &str, ifname: &str) -> Attachment {
        Attachment {
            container_id: id.into(),
            ifname: ifname.into(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn holder_parsing_matches_the_reference() {
        assert_eq!(
            Holder::parse(b"c1\r\neth0"),
            Holder::Attachment(who("c1", "eth0"))
        );
        assert_eq!(
            Holder::parse(b" c1\r\neth0\n"),
            Holder::Attachment(who("c1", "eth0"))
        );
        assert_eq!(Holder::parse(b"c1"), Holder::LegacyId("c1".into()));
        assert_eq!(Holder::parse(b""), Holder::Unknown);
        assert_eq!(Holder::parse(b" \n"), Holder::Unknown);
        assert_eq!(Holder::parse(b"\xff\xfe"), Holder::Unknown);
        assert_eq!(Holder::parse(&[b'a'; 5000]), Holder::Unknown);
        assert!(Holder::parse(b"c1\r\neth0").is(&who("c1", "eth0")));
        assert!(!Holder::parse(b"c1\r\neth0").is(&who("c1", "eth1")));
        assert!(Holder::parse(b"c1").belongs_to(&who("c1", "eth1")));
        assert!(!Holder::parse(b"c1").is(&who("c1", "eth1")));
        assert_eq!(Holder::content_for(&who("c1", "eth0")), "c1\r\neth0");
    }

    #[test]
    fn reserve_writes_the_reference_format_atomically() {
        let t = Tmp::new("reserve");
        let s = Store::create_locked(&t.loc()).unwrap();
        assert!(s.reserve(ip("10.1.0.5"), &who("c1", "eth0")).unwrap());
        assert!(
            !s.reserve(ip("10.1.0.5"), &who("c2", "eth0")).unwrap(),
            "taken"
        );
        assert!(s.reserve(ip("2001:db8::5"), &who("c1", "eth0")).unwrap());
        s.set_last_reserved(0, ip("10.1.0.5")).unwrap();
        let key = attachment_hash(&who("c1", "eth0"));
        let (link4, link6) = (
            index_name(key, ip("10.1.0.5")),
            index_name(key, ip("2001:db8::5")),
        );
        let mut expected = vec![
            "10.1.0.5".to_string(),
            "2001:db8::5".into(),
            "last_reserved_ip.0".into(),
            "lock".into(),
            link4.clone(),
            link6.clone(),
        ];
        expected.sort();
        assert_eq!(t.names(), expected);
        // The index link is the lease itself under a second name.
        assert_eq!(std::fs::read(t.dir().join(&link4)).unwrap(), b"c1\r\neth0");
        assert_eq!(
            std::fs::read(t.dir().join("10.1.0.5")).unwrap(),
            b"c1\r\neth0"
        );
        assert_eq!(
            std::fs::read(t.dir().join("last_reserved_ip.0")).unwrap(),
            b"10.1.0.5"
        );
        let mode = std::fs::metadata(t.dir().join("10.1.0.5"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(s.last_reserved(0).unwrap(), Some(ip("10.1.0.5")));
        assert_eq!(s.last_reserved(1).unwrap(), None);
        assert_eq!(
            s.read_lease(ip("10.1.0.5")).unwrap(),
            Some(Holder::Attachment(who("c1", "eth0")))
        );
        assert_eq!(s.read_lease(ip("10.1.0.6")).unwrap(), None);
        assert!(s.release("10.1.0.5", std::slice::from_ref(&link4)).unwrap());
        assert!(
            !t.dir().join(&link4).exists(),
            "the link goes with its lease"
        );
        assert!(!s.release("10.1.0.5", &[link4]).unwrap(), "already gone");
    }

    #[test]
    fn scan_lists_leases_cleans_temps_and_refuses_symlinks() {
        let t = Tmp::new("scan");
        let s = Store::create_locked(&t.loc()).unwrap();
        std::fs::write(t.dir().join("10.1.0.2"), "a\r\neth0").unwrap();
        std::fs::write(t.dir().join("10.1.0.3"), "").unwrap();
        std::fs::write(t.dir().join(format!("{TEMP_PREFIX}1-1")), "x\r\neth0").unwrap();
        std::fs::write(t.dir().join("last_reserved_ip.0"), "10.1.0.3").unwrap();
        std::fs::write(t.dir().join("notes.txt"), "ignored").unwrap();
        symlink("/etc/passwd", t.dir().join("10.1.0.9")).unwrap();
        std::fs::create_dir(t.dir().join("10.1.0.10")).unwrap();
        let scan = s.scan(&|a, _| a != ip("10.1.0.3")).unwrap();
        let mut leases: Vec<(String, Option<Holder>)> = scan
            .leases
            .iter()
            .map(|l| (l.name.clone(), l.holder.clone()))
            .collect();
        leases.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            leases,
            [
                (
                    "10.1.0.2".to_string(),
                    Some(Holder::Attachment(who("a", "eth0")))
                ),
                ("10.1.0.3".to_string(), None),
            ]
        );
        let mut refused = scan.refused.clone();
        refused.sort();
        assert_eq!(refused, ["10.1.0.10", "10.1.0.9"]);
        assert!(
            !t.dir().join(format!("{TEMP_PREFIX}1-1")).exists(),
            "stale temp removed under the lock"
        );
        let e = s.read_lease(ip("10.1.0.9")).unwrap_err();
        assert!(e.to_string().contains("refusing"), "{e}");
    }

    #[test]
    fn unlocked_scan_leaves_temp_files() {
        let t = Tmp::new("unlocked");
        drop(Store::create_locked(&t.loc()).unwrap());
        std::fs::write(t.dir().join(format!("{TEMP_PREFIX}1-1")), "x").unwrap();
        let s = Store::open_unlocked(&t.loc()).unwrap().unwrap();
        s.scan(&|_, _| true).unwrap();
        assert!(t.dir().join(format!("{TEMP_PREFIX}1-1")).exists());
    }

    #[test]
    fn attachment_hash_is_fnv1a_of_the_lease_content() {
        // Fixed forever: every version must name the same links.
        // The published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(attachment_hash(&who("c1", "eth0")), fnv1a64(b"c1\r\neth0"));
        assert_ne!(
            attachment_hash(&who("c1", "eth0")),
            attachment_hash(&who("c1", "eth1"))
        );
        let name = index_name(0xab, ip("2001:db8::5"));
        assert_eq!(name, ".held-by-00000000000000ab-2001:db8::5");
        assert_eq!(parse_index_name(&name), Some((0xab, ip("2001:db8::5"))));
        assert_eq!(parse_index_name(".held-by-ab-10.1.0.1"), None);
        assert_eq!(parse_index_name(".held-by-00000000000000ab-lock"), None);
        assert!(name.parse::<IpAddr>().is_err(), "never taken for a lease");
    }

    #[test]
    fn scan_reads_only_what_the_index_cannot_rule_out() {
        let t = Tmp::new("index");
        let s = Store::create_locked(&t.loc()).unwrap();
        let (a, b) = (who("a", "eth0"), who("b", "eth0"));
        assert!(s.reserve(ip("10.1.0.2"), &a).unwrap());
        assert!(s.reserve(ip("10.1.0.3"), &b).unwrap());
        // Written by the Go plugin: no index link.
        std::fs::write(t.dir().join("10.1.0.4"), "c\r\neth0").unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        let scan = s
            .scan(&|addr, indexed_as| {
                seen.borrow_mut().push(addr);
                maybe_held_by(&a)(addr, indexed_as)
            })
            .unwrap();
        assert_eq!(seen.borrow().len(), 3);
        let holder = |addr: &str| {
            let l = scan.leases.iter().find(|l| l.name == addr).unwrap();
            (l.indexed_as, l.holder.clone())
        };
        assert_eq!(
            holder("10.1.0.2"),
            (
                Some(attachment_hash(&a)),
                Some(Holder::Attachment(a.clone()))
            )
        );
        assert_eq!(holder("10.1.0.3"), (Some(attachment_hash(&b)), None));
        assert_eq!(
            holder("10.1.0.4"),
            (None, Some(Holder::Attachment(who("c", "eth0"))))
        );
    }

    #[test]
    fn stale_index_links_are_ignored_and_removed_under_the_lock() {
        let t = Tmp::new("stale");
        let s = Store::create_locked(&t.loc()).unwrap();
        let (a, b) = (who("a", "eth0"), who("b", "eth0"));
        assert!(s.reserve(ip("10.1.0.2"), &a).unwrap());
        let link_a = index_name(attachment_hash(&a), ip("10.1.0.2"));
        // Released by something that left the link (an older version of
        // ours), then leased again by the Go plugin to b.
        std::fs::remove_file(t.dir().join("10.1.0.2")).unwrap();
        std::fs::write(t.dir().join("10.1.0.2"), "b\r\neth0").unwrap();
        // And a link whose lease is gone altogether.
        let link_gone = index_name(attachment_hash(&a), ip("10.1.0.9"));
        std::fs::write(t.dir().join(&link_gone), "a\r\neth0").unwrap();

        let unlocked = Store::open_unlocked(&t.loc()).unwrap().unwrap();
        let scan = unlocked.scan(&maybe_held_by(&a)).unwrap();
        assert_eq!(scan.leases.len(), 1);
        assert_eq!(scan.leases[0].indexed_as, None, "not the same inode");
        assert_eq!(scan.leases[0].holder, Some(Holder::Attachment(b.clone())));
        assert!(
            t.dir().join(&link_a).exists(),
            "an unlocked scan removes nothing"
        );

        s.scan(&|_, _| false).unwrap();
        assert!(!t.dir().join(&link_a).exists());
        assert!(!t.dir().join(&link_gone).exists());
        // A new lease of a at that address replaces a stale link of the same name.
        std::fs::write(t.dir().join(&link_a), "a\r\neth0").unwrap();
        assert!(s.release("10.1.0.2", &[]).unwrap());
        assert!(s.reserve(ip("10.1.0.2"), &a).unwrap());
        let scan = s.scan(&|_, _| false).unwrap();
        assert_eq!(scan.leases[0].indexed_as, Some(attachment_hash(&a)));
        assert_eq!(scan.leases[0].links, [link_a]);
    }

    #[test]
    fn missing_directory_is_not_created_by_del_or_check() {
        let t = Tmp::new("missing");
        assert!(Store::open_locked(&t.loc()).unwrap().is_none());
        assert!(Store::open_unlocked(&t.loc()).unwrap().is_none());
        assert!(!t.dir().exists());
    }

    #[test]
    fn symlinked_directory_lock_and_last_reserved_are_refused() {
        let t = Tmp::new("symlinks");
        let elsewhere = t.0.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, t.dir()).unwrap();
        let e = Store::create_locked(&t.loc()).err().unwrap();
        assert!(e.to_string().contains("refusing"), "{e}");
        assert!(Store::open_locked(&t.loc()).is_err());
        std::fs::remove_file(t.dir()).unwrap();

        std::fs::create_dir(t.dir()).unwrap();
        symlink(elsewhere.join("lock"), t.dir().join("lock")).unwrap();
        let e = Store::create_locked(&t.loc()).err().unwrap();
        assert!(e.to_string().contains("lock"), "{e}");
        assert!(
            !elsewhere.join("lock").exists(),
            "never created through the link"
        );
        std::fs::remove_file(t.dir().join("lock")).unwrap();

        symlink("/etc/hostname", t.dir().join("last_reserved_ip.0")).unwrap();
        let s = Store::create_locked(&t.loc()).unwrap();
        assert!(s.last_reserved(0).is_err());
        // Replacing it replaces the link itself, never what it points to.
        s.set_last_reserved(0, ip("10.1.0.7")).unwrap();
        assert_eq!(
            std::fs::read(t.dir().join("last_reserved_ip.0")).unwrap(),
            b"10.1.0.7"
        );
    }
}
