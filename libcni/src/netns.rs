//! Network namespaces: opening and validating the namespace a runtime names
//! in `CNI_NETNS`, and running code with a thread inside a namespace.
//!
//! This module owns every `setns(2)` of the suite. The namespace of a thread
//! is per-thread state, so [`NetNs::run`] never moves the caller's thread: it
//! runs the closure on a short-lived scoped thread that enters the namespace
//! and then ends. Netlink does not even need that much: a netlink socket
//! stays bound to the namespace it was created in, so
//! [`crate::netlink::Netlink::open_in`] only uses `run` to create the socket.
//! Only writes that go through the calling thread's namespace (sysctls under
//! `/proc/sys/net`) need the closure to do real work inside.

use crate::calllog::Step;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use nix::sys::statfs::{fstatfs, NSFS_MAGIC, PROC_SUPER_MAGIC};

use crate::{Error, Result};

/// The current thread's network namespace.
const CURRENT_THREAD_NETNS: &str = "/proc/thread-self/ns/net";

/// An open handle on a network namespace.
///
/// Holding the handle keeps the namespace alive, even after every process in
/// it has exited. The handle was checked to really be a network namespace
/// when it was opened.
#[derive(Debug)]
pub struct NetNs {
    file: File,
    path: PathBuf,
}

/// What tells one network namespace from another: its nsfs device and
/// inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NsIdentity {
    pub dev: u64,
    pub ino: u64,
}

/// `CNI_NETNS_OVERRIDE` is `1` or `true`: a "container" namespace may be
/// the plugin's own (as the Go skeleton allows).
fn own_allowed() -> bool {
    matches!(
        std::env::var("CNI_NETNS_OVERRIDE").as_deref(),
        Ok("1") | Ok("true")
    )
}

impl NetNs {
    /// Opens the network namespace at `path` (normally the value of
    /// `CNI_NETNS`: a bind mount such as `/var/run/netns/x` or a
    /// `/proc/<pid>/ns/net` link).
    ///
    /// Anything that is not a network namespace is refused with
    /// [`Error::InvalidEnv`] (code 4) naming `CNI_NETNS`, the path and the
    /// reason: a missing path, a regular file, a directory, a namespace of
    /// another kind (mount, pid, ...).
    pub fn open(path: &Path) -> Result<NetNs> {
        let invalid = |why: String| Error::InvalidEnv(format!("CNI_NETNS {path:?} {why}"));
        let opening = std::time::Instant::now();
        // O_NONBLOCK: opening a FIFO must not hang; O_NOCTTY: nor may a tty
        // become our controlling terminal. Neither matters for a real nsfs file.
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => invalid("does not exist".to_string()),
                _ => invalid(format!("cannot be opened: {e}")),
            })?;
        check_is_netns(&file).map_err(invalid)?;
        crate::calllog::add(Step::Namespace, opening.elapsed());
        Ok(NetNs {
            file,
            path: path.to_path_buf(),
        })
    }

    /// For DEL: opens `path` when it still names a network namespace, and
    /// returns `None` otherwise: the variable is empty, the path does not
    /// exist, it is the plain file an unmounted namespace bind mount leaves,
    /// or anything else that is not a network namespace. There is then no
    /// container network to clean up inside, and DEL must go on with the
    /// rest (the lease, the node's rules) and succeed.
    pub fn open_if_present(path: &Path) -> Result<Option<NetNs>> {
        if path.as_os_str().is_empty() {
            return Ok(None);
        }
        Ok(Self::open(path).ok())
    }

    /// Opens the network namespace of the calling thread.
    pub fn current() -> Result<NetNs> {
        let path = Path::new(CURRENT_THREAD_NETNS);
        let file = File::open(path).map_err(|e| {
            Error::kernel(format!("open the current network namespace {path:?}"), e)
        })?;
        Ok(NetNs {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Opens the container's network namespace `path` (the value of
    /// `CNI_NETNS`), like [`NetNs::open`], and additionally refuses the
    /// plugin's own namespace: configuring a container network there would
    /// rewire the host. Setting `CNI_NETNS_OVERRIDE` to `1` or `true` allows
    /// it (as the Go skeleton does).
    pub fn open_container(path: &Path) -> Result<NetNs> {
        Self::open_container_checked(path, own_allowed())
    }

    /// For DEL: [`NetNs::open_container`], or `None` when the container's
    /// namespace is already gone (as [`NetNs::open_if_present`] sees it).
    pub fn open_container_if_present(path: &Path) -> Result<Option<NetNs>> {
        match Self::open_if_present(path)? {
            Some(ns) => ns.refusing_own(own_allowed()).map(Some),
            None => Ok(None),
        }
    }

    fn open_container_checked(path: &Path, allow_own: bool) -> Result<NetNs> {
        Self::open(path)?.refusing_own(allow_own)
    }

    /// `self`, unless it is the plugin's own namespace and that is not
    /// allowed.
    fn refusing_own(self, allow_own: bool) -> Result<NetNs> {
        if !allow_own && self.is_same_as_current()? {
            return Err(Error::InvalidEnv(format!(
                "CNI_NETNS {:?} is the plugin's own network namespace, not a container's \
                 (set CNI_NETNS_OVERRIDE=1 to allow this)",
                self.path
            )));
        }
        Ok(self)
    }

    /// The namespace's device and inode numbers: what names a namespace
    /// for as long as it lives (`ip netns identify` compares the same).
    pub fn identity(&self) -> Result<NsIdentity> {
        // std's metadata is statx/fstat64: 64-bit numbers on every
        // architecture, where `libc::stat`'s are 32-bit on 32-bit arm.
        let meta = self
            .file
            .metadata()
            .map_err(|e| Error::kernel(format!("stat network namespace {:?}", self.path), e))?;
        Ok(NsIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// Whether this is the network namespace of the calling thread (compares
    /// device and inode numbers).
    pub fn is_same_as_current(&self) -> Result<bool> {
        let ours = self.identity()?;
        let current = std::fs::metadata(CURRENT_THREAD_NETNS).map_err(|e| {
            Error::kernel(
                format!("stat the current network namespace {CURRENT_THREAD_NETNS:?}"),
                e,
            )
        })?;
        Ok(ours.dev == current.dev() && ours.ino == current.ino())
    }

    /// Runs `f` on a thread inside this namespace and returns its result.
    ///
    /// The work happens on a new scoped thread that enters the namespace and
    /// ends with `f`, so the caller's thread never changes namespace and
    /// nothing has to be restored. A failed `setns` is a kernel error naming
    /// the path; a panic in `f` is resumed on the caller's thread.
    pub fn run<T: Send, F: FnOnce() -> T + Send>(&self, f: F) -> Result<T> {
        let entering = std::time::Instant::now();
        std::thread::scope(|scope| {
            let inside = std::thread::Builder::new()
                .name("netns".to_string())
                .spawn_scoped(scope, || {
                    nix::sched::setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(
                        |e| Error::kernel(format!("setns into {:?}", self.path), e.into()),
                    )?;
                    // The thread and the setns, not the work inside.
                    crate::calllog::add(Step::Namespace, entering.elapsed());
                    Ok(f())
                })
                .map_err(|e| {
                    Error::kernel(format!("spawn a thread to enter {:?}", self.path), e)
                })?;
            match inside.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// The path the namespace was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// An exclusive lock on a namespace's file (flock), held for as long as it
/// lives: the Go plugins' lock on `CNI_NETNS` (sbr's), so two meta plugin
/// runs for interfaces of one pod, ours or Go's, never interleave their
/// changes (sbr's tables, a VRF one interface joins and another leaves).
pub struct NetnsLock(#[allow(dead_code)] File);

impl NetnsLock {
    /// Waits for and takes the lock on `ns`.
    pub fn take(ns: &NetNs) -> Result<NetnsLock> {
        let what = format!("lock the container's namespace {:?}", ns.path());
        let fd = ns
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io(what.clone(), e))?;
        let file = File::from(fd);
        file.lock().map_err(|e| Error::io(what, e))?;
        Ok(NetnsLock(file))
    }
}

impl AsFd for NetNs {
    /// The namespace file descriptor, e.g. for `IFLA_NET_NS_FD`.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for NetNs {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Checks that `file` is a network namespace; the error says what it is
/// instead, worded to follow the path.
fn check_is_netns(file: &File) -> std::result::Result<(), String> {
    let fs = fstatfs(file)
        .map_err(|e| format!("cannot be inspected (fstatfs: {e})"))?
        .filesystem_type();
    // Namespace files live on nsfs; kernels before 3.19 showed them on proc.
    if fs != NSFS_MAGIC && fs != PROC_SUPER_MAGIC {
        let what = match file.metadata() {
            Ok(m) if m.is_dir() => "is a directory, not",
            Ok(m) if m.is_file() => "is a regular file, not",
            _ => "is not",
        };
        return Err(format!(
            "{what} a network namespace (filesystem magic {:#x})",
            fs.0
        ));
    }
    // SAFETY: NS_GET_NSTYPE takes no argument; it only inspects the open fd.
    let nstype = unsafe { libc::ioctl(file.as_raw_fd(), libc::NS_GET_NSTYPE) };
    if nstype < 0 {
        let e = io::Error::last_os_error();
        return Err(format!("is not a namespace (NS_GET_NSTYPE: {e})"));
    }
    if nstype != libc::CLONE_NEWNET {
        return Err(format!(
            "is a {} namespace, not a network namespace",
            namespace_kind(nstype)
        ));
    }
    Ok(())
}

fn namespace_kind(nstype: libc::c_int) -> String {
    match nstype {
        libc::CLONE_NEWNS => "mount".to_string(),
        libc::CLONE_NEWPID => "pid".to_string(),
        libc::CLONE_NEWUTS => "uts".to_string(),
        libc::CLONE_NEWIPC => "ipc".to_string(),
        libc::CLONE_NEWUSER => "user".to_string(),
        libc::CLONE_NEWCGROUP => "cgroup".to_string(),
        // CLONE_NEWTIME
        0x80 => "time".to_string(),
        other => format!("{other:#x}"),
    }
}

/// Helpers for privileged unit tests: throwaway namespaces and the
/// root/CI skip policy. Shared with the netlink tests.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::NetNs;
    use nix::sched::CloneFlags;
    use std::io::Write;

    /// Whether the test may use privileged operations. When not root it says
    /// so loudly and returns false; under `CI=true` it fails the test instead.
    pub fn privileged(test: &str) -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            return true;
        }
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test}: needs root, and skipping is not allowed when CI=true");
        }
        // Straight to the stderr stream: libtest would capture `eprintln!`.
        let _ = writeln!(std::io::stderr(), "!!! {test}: SKIPPED (needs root) !!!");
        false
    }

    /// A fresh, empty network namespace. A helper thread unshares into it and
    /// opens it; the returned handle keeps it alive after that thread ended,
    /// and dropping the handle destroys it (with the links inside). The
    /// calling thread never changes namespace.
    pub fn new_netns() -> NetNs {
        std::thread::spawn(|| {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
            NetNs::current().expect("open the new namespace")
        })
        .join()
        .expect("namespace helper thread")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{new_netns, privileged};
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn ino_of_current() -> u64 {
        std::fs::metadata(CURRENT_THREAD_NETNS).unwrap().ino()
    }

    fn expect_invalid_env(path: &Path, reason: &str) {
        let err = NetNs::open(path).unwrap_err();
        assert_eq!(err.code(), 4, "{err}");
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("CNI_NETNS {path:?} ")), "{msg}");
        assert!(msg.contains(reason), "{msg:?} should contain {reason:?}");
    }

    #[test]
    fn netns_open_if_present_treats_gone_as_none() {
        assert!(NetNs::open_if_present(Path::new("")).unwrap().is_none());
        let missing = Path::new("/nonexistent/cni-netns-test");
        assert!(NetNs::open_if_present(missing).unwrap().is_none());
        // An unmounted bind mount point is an empty regular file.
        let path = std::env::temp_dir().join(format!("cni-netns-gone-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let gone = NetNs::open_if_present(&path);
        std::fs::remove_file(&path).unwrap();
        assert!(gone.unwrap().is_none());
        // Not a namespace at all: nothing of a container to clean up there.
        assert!(NetNs::open_if_present(Path::new("/tmp")).unwrap().is_none());
        let here = NetNs::open_if_present(Path::new(CURRENT_THREAD_NETNS)).unwrap();
        assert!(here.is_some());
    }

    #[test]
    fn netns_open_refuses_a_missing_path() {
        expect_invalid_env(Path::new("/nonexistent/cni-netns-test"), "does not exist");
    }

    #[test]
    fn netns_open_refuses_a_regular_file() {
        let path = std::env::temp_dir().join(format!("cni-netns-test-{}", std::process::id()));
        std::fs::write(&path, b"not a namespace").unwrap();
        let result = std::panic::catch_unwind(|| {
            expect_invalid_env(&path, "is a regular file, not a network namespace")
        });
        std::fs::remove_file(&path).unwrap();
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }

    #[test]
    fn netns_open_refuses_a_directory() {
        expect_invalid_env(Path::new("/"), "is a directory, not a network namespace");
    }

    #[test]
    fn netns_open_refuses_other_namespace_kinds() {
        expect_invalid_env(
            Path::new("/proc/self/ns/mnt"),
            "is a mount namespace, not a network namespace",
        );
        expect_invalid_env(
            Path::new("/proc/self/ns/uts"),
            "is a uts namespace, not a network namespace",
        );
    }

    #[test]
    fn netns_open_refuses_a_proc_file_that_is_not_a_namespace() {
        expect_invalid_env(Path::new("/proc/self/status"), "is not a namespace");
    }

    #[test]
    fn netns_open_refuses_a_device() {
        expect_invalid_env(
            Path::new("/dev/null"),
            "is not a network namespace (filesystem magic",
        );
    }

    #[test]
    fn netns_open_accepts_the_proc_link_of_a_netns() {
        let ns = NetNs::open(Path::new("/proc/thread-self/ns/net")).unwrap();
        assert_eq!(ns.path(), Path::new("/proc/thread-self/ns/net"));
        assert!(ns.is_same_as_current().unwrap());
        assert_eq!(
            ns.file.metadata().unwrap().ino(),
            NetNs::current().unwrap().file.metadata().unwrap().ino()
        );
    }

    #[test]
    fn netns_open_container_refuses_the_plugins_own_namespace() {
        let path = Path::new("/proc/thread-self/ns/net");
        let err = NetNs::open_container_checked(path, false).unwrap_err();
        assert_eq!(err.code(), 4);
        assert_eq!(
            err.to_string(),
            "CNI_NETNS \"/proc/thread-self/ns/net\" is the plugin's own network namespace, \
             not a container's (set CNI_NETNS_OVERRIDE=1 to allow this)"
        );
        assert!(NetNs::open_container_checked(path, true).is_ok());
    }

    #[test]
    fn netns_open_container_accepts_another_namespace() {
        if !privileged("netns_open_container_accepts_another_namespace") {
            return;
        }
        let other = new_netns();
        // The same namespace reached by another path, as a runtime would pass it.
        let by_fd = format!("/proc/self/fd/{}", other.as_raw_fd());
        let ns = NetNs::open_container_checked(Path::new(&by_fd), false).unwrap();
        assert_eq!(
            ns.file.metadata().unwrap().ino(),
            other.file.metadata().unwrap().ino()
        );
        assert_eq!(ns.path(), Path::new(&by_fd));
        // From a thread inside it, it is that thread's own namespace: refused.
        let err = other
            .run(|| NetNs::open_container_checked(Path::new(&by_fd), false).map(drop))
            .unwrap()
            .unwrap_err();
        assert_eq!(err.code(), 4);
        assert!(
            err.to_string()
                .contains("is the plugin's own network namespace"),
            "{err}"
        );
        assert!(!ns.is_same_as_current().unwrap());
    }

    #[test]
    fn netns_run_executes_inside_the_namespace() {
        if !privileged("netns_run_executes_inside_the_namespace") {
            return;
        }
        let before = ino_of_current();
        let ns = new_netns();
        let ns_ino = ns.file.metadata().unwrap().ino();
        assert_ne!(ns_ino, before);
        let (inside, same) = ns
            .run(|| (ino_of_current(), ns.is_same_as_current().unwrap()))
            .unwrap();
        assert_eq!(inside, ns_ino);
        assert!(same);
        // The caller's thread never moved.
        assert_eq!(ino_of_current(), before);
        assert!(!ns.is_same_as_current().unwrap());
    }

    #[test]
    fn netns_run_resumes_a_panic_of_the_closure() {
        if !privileged("netns_run_resumes_a_panic_of_the_closure") {
            return;
        }
        let ns = new_netns();
        let panic = std::panic::catch_unwind(|| ns.run(|| panic!("boom inside")))
            .expect_err("the panic must reach the caller");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"boom inside"));
    }
}
