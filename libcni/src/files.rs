//! Files the suite keeps on disk (the runtime's result cache, host-local's
//! leases, flannel's saved delegate configs, tuning's backups): how they
//! are created, replaced and read, so that none is ever written or read
//! through a symlink and none is ever seen half-written. Which files there
//! are, their names (built only from validated parts), their formats and
//! the error messages belong to the callers: these functions give the OS
//! error and, for writes, the step that failed.
//!
//! - [`write_temp_at`]: a new temp file `<prefix><pid>-<n>`, created with
//!   `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600, written and fsynced. The
//!   caller then `link()`s it to its name (an exclusive create, as
//!   host-local's leases) or renames it.
//! - [`replace_at`]: the same, renamed over the file's name (a symlink
//!   there is replaced, not followed).
//! - [`write_atomic`]: [`replace_at`] by path, then fsync of the directory.
//! - [`read_regular`]: reads a file by path without following a symlink or
//!   blocking on a FIFO, and only when it is a regular file of sane size.
//! - [`lock_exclusive`]: a node-wide lock file (`flock`), as Go's plugins
//!   lock theirs.
//! - [`check_writable_dir`]: STATUS's question, whether ADD could write
//!   under a data directory, answered without creating it.
//! - [`create_dir_all`], [`open_dir`], [`open_nofollow_at`],
//!   [`entry_kind_at`], [`remove_if_present`]: the building blocks.
//!
//! The directory a file is in may itself be reached through a symlink
//! (`/var/lib/cni` sometimes is one); only the entries in it are never
//! followed.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use nix::unistd::{fsync, unlinkat, UnlinkatFlags};

/// The mode of every file written here.
pub const FILE_MODE: u32 = 0o600;

/// How many temp names one write tries: a name can only be taken by what
/// an earlier process with our pid left behind.
const TEMP_ATTEMPTS: u32 = 1000;

static TEMP_COUNTER: AtomicU32 = AtomicU32::new(0);

/// The step of a write that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    /// Opening the directory ([`write_atomic`]).
    OpenDir,
    /// Creating the temp file.
    CreateTemp,
    /// Writing or syncing the temp file.
    Write,
    /// Renaming the temp file over the file's name.
    Rename,
    /// Syncing the directory ([`write_atomic`]).
    SyncDir,
}

/// A failed write. The temp file, if one was made, is removed again.
#[derive(Debug)]
pub struct WriteError {
    pub step: WriteStep,
    /// The temp file's name in its directory; empty before there was one
    /// (for [`WriteStep::CreateTemp`], the last name tried).
    pub temp: String,
    pub source: io::Error,
}

impl WriteError {
    fn new(step: WriteStep, temp: &str, source: impl Into<io::Error>) -> WriteError {
        WriteError {
            step,
            temp: temp.to_string(),
            source: source.into(),
        }
    }
}

/// Takes an exclusive `flock` on `<dir>/<name>` (created 0600, never
/// through a symlink; `dir` created 0700 when missing), blocking until it
/// is free. The lock lasts as long as the returned file is open.
pub fn lock_exclusive(dir: &Path, name: &str) -> io::Result<File> {
    create_dir_all(dir, 0o700)?;
    let dir_fd = open_dir(dir)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    let flags = OFlag::O_RDONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(
        dir_fd.as_fd(),
        name,
        flags,
        Mode::from_bits_truncate(FILE_MODE),
    )?;
    let file = File::from(fd);
    file.lock()?;
    Ok(file)
}

/// Creates directory `path` and its missing parents with `mode` (a
/// directory already there, or a symlink to one, is fine).
pub fn create_dir_all(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
}

/// Whether an ADD could create files under directory `path`, without
/// creating anything (STATUS): `path`, or else its nearest existing
/// ancestor (the ADD creates the rest), must be a directory this process
/// may write in, on a writable filesystem. The error says which path is
/// not and why. Two syscalls per existing level, at most.
pub fn check_writable_dir(path: &Path) -> Result<(), String> {
    let mut at = path;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => {
                return nix::unistd::access(at, nix::unistd::AccessFlags::W_OK)
                    .map_err(|e| format!("{} is not writable: {}", at.display(), e.desc()));
            }
            Ok(_) => return Err(format!("{} is not a directory", at.display())),
            // ENOTDIR: a file on the way, which the level above shows.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                match at.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => at = parent,
                    _ => return Err(format!("no part of {} exists", path.display())),
                }
            }
            Err(e) => return Err(format!("{}: {e}", at.display())),
        }
    }
}

/// Opens directory `path` (following symlinks on the way, as a data
/// directory may be one) for the `*at` functions; `None` when it does not
/// exist.
pub fn open_dir(path: &Path) -> Result<Option<OwnedFd>, Errno> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    match nix::fcntl::open(path, flags, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens the subdirectory `name` of directory `parent` without following a
/// symlink at `name` (`ELOOP`, or `ENOTDIR` for anything not a directory):
/// for directories a tool creates itself under a configured root, where a
/// planted symlink must not redirect its writes. With `create`, a missing
/// `name` is made with that mode first; without, a missing one is `None`.
pub fn open_subdir_nofollow(
    parent: &Path,
    name: &str,
    create: Option<u32>,
) -> Result<Option<OwnedFd>, Errno> {
    let Some(parent) = open_dir(parent)? else {
        return Ok(None);
    };
    if let Some(mode) = create {
        match nix::sys::stat::mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(e),
        }
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match openat(parent.as_fd(), name, flags, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens `name` in `dir` for reading without following a symlink (`ELOOP`)
/// or blocking on a FIFO planted under that name.
pub fn open_nofollow_at(dir: BorrowedFd<'_>, name: &str) -> Result<File, Errno> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    openat(dir, name, flags, Mode::empty()).map(File::from)
}

/// What is at a name in a directory, looked at without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Missing,
    Regular,
    /// A symlink, a directory, a FIFO...: never followed nor used where a
    /// file should be.
    NotRegular,
}

/// What is at `name` in `dir` (`fstatat` with `AT_SYMLINK_NOFOLLOW`).
pub fn entry_kind_at(dir: BorrowedFd<'_>, name: &str) -> Result<EntryKind, Errno> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let fmt = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
            Ok(if fmt == SFlag::S_IFREG {
                EntryKind::Regular
            } else {
                EntryKind::NotRegular
            })
        }
        Err(Errno::ENOENT) => Ok(EntryKind::Missing),
        Err(e) => Err(e),
    }
}

/// What a write must survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A killed process: the file appears whole or not at all (temp file,
    /// then link or rename), nothing is fsynced. For state that a power
    /// loss makes moot or that GC repairs (host-local's leases, as Go
    /// writes them); an fsync costs milliseconds on the ADD path.
    ProcessCrash,
    /// A power loss as well: the temp file is fsynced before it is linked
    /// or renamed (and callers fsync the directory after).
    PowerLoss,
}

/// Creates a temp file `<prefix><pid>-<n>` in `dir` that did not exist
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600 whatever the umask), writes
/// `bytes` into it and, for [`Durability::PowerLoss`], fsyncs it. Returns
/// its name; the caller links or renames it, and removes it when that fails.
pub fn write_temp_at(
    dir: BorrowedFd<'_>,
    prefix: &str,
    bytes: &[u8],
    durability: Durability,
) -> Result<String, WriteError> {
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mode = Mode::from_bits_truncate(FILE_MODE);
    let pid = std::process::id();
    let mut attempt = 0;
    let (name, fd) = loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}{pid}-{n}");
        attempt += 1;
        match openat(dir, name.as_str(), flags, mode) {
            Ok(fd) => break (name, fd),
            // Left by an earlier process with our pid: try the next name.
            Err(Errno::EEXIST) if attempt < TEMP_ATTEMPTS => continue,
            Err(e) => return Err(WriteError::new(WriteStep::CreateTemp, &name, e)),
        }
    };
    let mut file = File::from(fd);
    let written = file
        .set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| match durability {
            Durability::PowerLoss => file.sync_all(),
            Durability::ProcessCrash => Ok(()),
        });
    if let Err(e) = written {
        let _ = unlinkat(dir, name.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(WriteError::new(WriteStep::Write, &name, e));
    }
    Ok(name)
}

/// Replaces `name` in `dir` with a file holding exactly `bytes`: a temp
/// file `<prefix><pid>-<n>` ([`write_temp_at`]) renamed over `name`, so
/// the file is whole or absent, and a symlink at `name` is replaced, never
/// written through. The rename is durable once the caller fsyncs `dir`
/// (several renames may share one fsync).
pub fn replace_at(
    dir: BorrowedFd<'_>,
    prefix: &str,
    name: &str,
    bytes: &[u8],
    durability: Durability,
) -> Result<(), WriteError> {
    let temp = write_temp_at(dir, prefix, bytes, durability)?;
    if let Err(e) = renameat(dir, temp.as_str(), dir, name) {
        let _ = unlinkat(dir, temp.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(WriteError::new(WriteStep::Rename, &temp, e));
    }
    Ok(())
}

/// [`replace_at`] with the temp file `.<name>.tmp-…`: hidden, and so out
/// of every listing of names (a network's `<network>-*`, the addresses of
/// a records directory).
pub fn replace_hidden_at(
    dir: BorrowedFd<'_>,
    name: &str,
    bytes: &[u8],
    durability: Durability,
) -> Result<(), WriteError> {
    replace_at(dir, &format!(".{name}.tmp-"), name, bytes, durability)
}

/// [`replace_at`] for `name` in directory `dir` (which must exist), then
/// fsync of the directory: when this returns, the file is on disk.
pub fn write_atomic(dir: &Path, prefix: &str, name: &str, bytes: &[u8]) -> Result<(), WriteError> {
    let fd = match open_dir(dir) {
        Ok(Some(fd)) => fd,
        Ok(None) => return Err(WriteError::new(WriteStep::OpenDir, "", Errno::ENOENT)),
        Err(e) => return Err(WriteError::new(WriteStep::OpenDir, "", e)),
    };
    replace_at(fd.as_fd(), prefix, name, bytes, Durability::PowerLoss)?;
    fsync(fd.as_fd()).map_err(|e| WriteError::new(WriteStep::SyncDir, "", e))
}

/// What [`read_regular`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contents {
    /// No file.
    Absent,
    /// The file's bytes.
    Bytes(Vec<u8>),
    /// Not readable as the file it should be: a symlink, not a regular
    /// file, larger than the limit, or an error; the message says which,
    /// naming the path.
    Unreadable(String),
}

/// Reads `path` without following a symlink or blocking on a FIFO, and
/// only when it is a regular file of at most `max` bytes. `what` names the
/// file in the message of a file that is not one (`"<path> is not a
/// <what>"`).
pub fn read_regular(path: &Path, max: u64, what: &str) -> Contents {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    match file {
        Ok(f) => read_opened(f, max, what, path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Contents::Absent,
        Err(e) => Contents::Unreadable(format!("opening {}: {e}", path.display())),
    }
}

/// The bytes of an opened `file` when it is a regular file of at most `max`
/// bytes; `shown` is its path in messages.
fn read_opened(file: File, max: u64, what: &str, shown: &Path) -> Contents {
    match file.metadata() {
        Ok(m) if m.is_file() && m.len() <= max => {}
        Ok(_) => return Contents::Unreadable(format!("{} is not a {what}", shown.display())),
        Err(e) => return Contents::Unreadable(format!("reading {}: {e}", shown.display())),
    }
    let mut bytes = Vec::new();
    if let Err(e) = file.take(max).read_to_end(&mut bytes) {
        return Contents::Unreadable(format!("reading {}: {e}", shown.display()));
    }
    Contents::Bytes(bytes)
}

/// [`read_regular`] for `name` in directory `dir`; `shown` is the path
/// used in messages.
pub fn read_regular_at(
    dir: BorrowedFd<'_>,
    name: &str,
    max: u64,
    what: &str,
    shown: &Path,
) -> Contents {
    match open_nofollow_at(dir, name) {
        Ok(f) => read_opened(f, max, what, shown),
        Err(Errno::ENOENT) => Contents::Absent,
        Err(e) => Contents::Unreadable(format!("opening {}: {e}", shown.display())),
    }
}

/// Removes the file `path` (a symlink there is removed, not its target);
/// a file that is not there is success.
pub fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};
    use std::path::PathBuf;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("libcni-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        create_dir_all(&d, 0o700).unwrap();
        d
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn files_write_atomic_replaces_a_symlink_and_leaves_no_temp() {
        let d = tempdir("atomic");
        write_atomic(&d, ".f.tmp-", "f", b"one").unwrap();
        assert_eq!(std::fs::read(d.join("f")).unwrap(), b"one");
        assert_eq!(
            std::fs::metadata(d.join("f")).unwrap().mode() & 0o777,
            0o600
        );
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::fs::remove_file(d.join("f")).unwrap();
        symlink(&victim, d.join("f")).unwrap();
        write_atomic(&d, ".f.tmp-", "f", b"two").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(d.join("f")).unwrap().is_file());
        assert_eq!(names(&d), ["f", "victim"]);
        let e = write_atomic(&d.join("nope"), ".f.tmp-", "f", b"x").unwrap_err();
        assert_eq!(e.step, WriteStep::OpenDir);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_temp_names_pass_over_leftovers() {
        let d = tempdir("temp");
        let dir = open_dir(&d).unwrap().unwrap();
        let first = write_temp_at(dir.as_fd(), ".tmp-x-", b"a", Durability::PowerLoss).unwrap();
        assert!(first.starts_with(&format!(".tmp-x-{}-", std::process::id())));
        // The next name is planted (as a crashed process with our pid
        // could leave it): it is passed over, not opened.
        let n = TEMP_COUNTER.load(Ordering::Relaxed);
        let planted = format!(".tmp-x-{}-{n}", std::process::id());
        symlink(d.join("nowhere"), d.join(&planted)).unwrap();
        let second = write_temp_at(dir.as_fd(), ".tmp-x-", b"b", Durability::ProcessCrash).unwrap();
        assert_ne!(second, planted);
        assert_eq!(std::fs::read(d.join(&second)).unwrap(), b"b");
        let kind = |name: &str| entry_kind_at(dir.as_fd(), name).unwrap();
        assert_eq!(kind(&planted), EntryKind::NotRegular);
        assert_eq!(kind(&first), EntryKind::Regular);
        assert_eq!(kind("."), EntryKind::NotRegular);
        assert_eq!(kind("gone"), EntryKind::Missing);
        assert_eq!(
            open_nofollow_at(dir.as_fd(), &planted).unwrap_err(),
            Errno::ELOOP
        );
        replace_at(dir.as_fd(), ".tmp-x-", "final", b"c", Durability::PowerLoss).unwrap();
        assert_eq!(std::fs::read(d.join("final")).unwrap(), b"c");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_read_regular_refuses_what_is_not_a_regular_file() {
        let d = tempdir("read");
        let f = d.join("f");
        assert_eq!(read_regular(&f, 10, "thing"), Contents::Absent);
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(
            read_regular(&f, 10, "thing"),
            Contents::Bytes(b"12345".to_vec())
        );
        assert_eq!(
            read_regular(&f, 4, "thing"),
            Contents::Unreadable(format!("{} is not a thing", f.display()))
        );
        let link = d.join("link");
        symlink(&f, &link).unwrap();
        assert!(
            matches!(read_regular(&link, 10, "thing"), Contents::Unreadable(m) if m.starts_with("opening"))
        );
        assert!(matches!(
            read_regular(&d, 10, "thing"),
            Contents::Unreadable(_)
        ));
        remove_if_present(&link).unwrap();
        remove_if_present(&link).unwrap();
        assert!(f.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
