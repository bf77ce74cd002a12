//! `dhcp daemon`: listens on a unix socket (its own, or the one systemd
//! passes with `LISTEN_FDS`), serves the plugin's requests ([`registry`])
//! on a thread per connection, keeps every lease on a thread of its own
//! ([`lease`]) and on disk ([`store`]), and takes up the leases on disk
//! when it starts. SIGTERM or SIGINT end it at once, leases kept on disk
//! (not released): the next daemon renews them.
//!
//! No async runtime: a thread per lease sleeps until its next event, and
//! a DHCP exchange is a few packets on two sockets polled with a timeout.

pub mod exchange;
pub mod flags;
pub mod lease;
pub mod packet;
pub mod registry;
pub mod store;

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use libcni::Error;

use self::exchange::Timing;
use self::flags::{Flags, Parsed};
use self::lease::Context;
use self::registry::Registry;
use self::store::Store;
use crate::proto::{self, ReadError, Request, Response};

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;

/// How long a connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One line on stderr (the journal under systemd), with the UTC time.
pub fn log(msg: std::fmt::Arguments<'_>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86400, secs % 86400);
    let (y, mo, d) = civil(days as i64);
    let line = format!(
        "{y:04}/{mo:02}/{d:02} {:02}:{:02}:{:02}.{:03} {msg}\n",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        now.subsec_millis()
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Year, month, day of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `dhcp daemon ARGS...`; returns the exit code.
pub fn main(args: &[String]) -> i32 {
    let flags = match flags::parse(args) {
        Ok(Parsed::Run(f)) => f,
        Ok(Parsed::Help) => {
            eprint!("{}", flags::USAGE);
            return 0;
        }
        Err(e) => {
            eprintln!("dhcp daemon: {e}\n{}", flags::USAGE);
            return 2;
        }
    };
    match run(&flags) {
        Ok(()) => 0,
        Err(e) => {
            log(format_args!("{e}"));
            1
        }
    }
}

/// The listening socket and whether we made its file (then we remove it
/// when we stop).
struct Listening {
    listener: UnixListener,
    path: Option<PathBuf>,
}

/// Why the daemon has no socket to serve on, naming the socket or the
/// setting to look at.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// `LISTEN_FDS` is set to something else than a count.
    #[error("LISTEN_FDS={0:?} is not a number")]
    FdsNotANumber(String),
    /// systemd's descriptor 3 is not a socket.
    #[error("LISTEN_FDS=1 but descriptor 3 is not a socket: {0}")]
    NotASocket(#[source] std::io::Error),
    /// It is a socket, but not a listening unix stream one.
    #[error(
        "LISTEN_FDS=1 but descriptor 3 is not a listening unix stream socket \
         (ListenStream= of a .socket unit)"
    )]
    NotAUnixListener,
    /// More than the one socket the daemon serves.
    #[error("Too many ({0}) descriptors passed through socket activation: one is expected")]
    TooMany(u32),
    /// `-socketpath` names a file that is not a socket.
    #[error("{} exists and is not a socket: remove it or choose another -socketpath", .0.display())]
    NotASocketFile(PathBuf),
    /// A daemon answers on `-socketpath` already.
    #[error("another daemon already listens on {}", .0.display())]
    InUse(PathBuf),
    /// A step on the socket's path that the system refused.
    #[error("{doing} {}: {source}", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The socket systemd passed (`LISTEN_FDS`/`LISTEN_PID`), if any; the
/// variables are cleared so nothing we run inherits them.
fn activated() -> Result<Option<UnixListener>, ListenError> {
    let fds = std::env::var("LISTEN_FDS").ok();
    let pid = std::env::var("LISTEN_PID").ok();
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDNAMES");
    let Some(fds) = fds else {
        return Ok(None);
    };
    if let Some(pid) = pid {
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return Ok(None); // meant for another process
        }
    }
    let n: u32 = fds
        .parse()
        .map_err(|_| ListenError::FdsNotANumber(fds.clone()))?;
    match n {
        0 => Ok(None),
        1 => {
            let fd = LISTEN_FDS_START;
            let (mut ty, mut listening, mut domain): (libc::c_int, libc::c_int, libc::c_int) =
                (0, 0, 0);
            let get = |opt, out: &mut libc::c_int| {
                let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                // SAFETY: reads an int option into a local.
                unsafe {
                    libc::getsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        opt,
                        (out as *mut libc::c_int).cast(),
                        &mut len,
                    )
                }
            };
            if get(libc::SO_TYPE, &mut ty) != 0
                || get(libc::SO_ACCEPTCONN, &mut listening) != 0
                || get(libc::SO_DOMAIN, &mut domain) != 0
            {
                return Err(ListenError::NotASocket(std::io::Error::last_os_error()));
            }
            if domain != libc::AF_UNIX || ty != libc::SOCK_STREAM || listening == 0 {
                return Err(ListenError::NotAUnixListener);
            }
            // SAFETY: descriptor 3 was handed to us and is used only here.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            // SAFETY: as above; the listener owns it from now on.
            Ok(Some(unsafe { UnixListener::from_raw_fd(fd) }))
        }
        n => Err(ListenError::TooMany(n)),
    }
}

/// Binds `path`: its directory created 0700, the socket 0600. A stale
/// socket file (nobody accepting) is replaced; a live one is an error.
fn bind(path: &Path) -> Result<UnixListener, ListenError> {
    let failed = |doing, path: &Path| {
        let path = path.to_path_buf();
        move |source| ListenError::Io {
            doing,
            path,
            source,
        }
    };
    if let Some(dir) = path.parent() {
        libcni::files::create_dir_all(dir, 0o700).map_err(failed("creating", dir))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            if !m.file_type().is_socket() {
                return Err(ListenError::NotASocketFile(path.to_path_buf()));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(ListenError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(failed("removing the stale socket", path))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed("reading", path)(e)),
    }
    // Nothing else runs yet: the umask makes the socket 0600 from the start.
    // SAFETY: umask(2) cannot fail.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = bound.map_err(failed("listening on", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(failed("chmod", path))?;
    Ok(listener)
}

fn listen(flags: &Flags) -> Result<Listening, ListenError> {
    if let Some(l) = activated()? {
        log(format_args!("listening on the socket systemd passed"));
        return Ok(Listening {
            listener: l,
            path: None,
        });
    }
    let path = PathBuf::from(format!(
        "{}{}",
        flags.host_prefix,
        flags.socket_path.display()
    ));
    let listener = bind(&path)?;
    log(format_args!("listening on {}", path.display()));
    Ok(Listening {
        listener,
        path: Some(path),
    })
}

/// Blocks SIGTERM and SIGINT in this thread (and every thread it starts
/// from now on) and returns the set, for [`wait_for_signal`].
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local, then pthread_sigmask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    // SAFETY: waits on a set we own.
    unsafe { libc::sigwait(set, &mut sig) };
    sig
}

fn run(flags: &Flags) -> Result<(), Error> {
    let fail = |what: String| Error::io(what, std::io::Error::other(""));
    let set = block_signals();
    let listening =
        listen(flags).map_err(|e| Error::io(e.to_string(), std::io::Error::other("listen")))?;
    // The pidfile is not under -hostprefix (as the reference's).
    if let Some(path) = &flags.pidfile {
        write_pidfile(path)
            .map_err(|e| fail(format!("Error writing pidfile {}: {e}", path.display())))?;
    }
    let lease_dir = PathBuf::from(format!(
        "{}{}",
        flags.host_prefix,
        flags.lease_dir.display()
    ));
    let store = Store::open(&lease_dir)
        .map_err(|e| fail(format!("the lease directory {}: {e}", lease_dir.display())))?;
    let ctx = Arc::new(Context {
        host_prefix: flags.host_prefix.clone(),
        timing: Timing {
            timeout: flags.timeout,
            resend_max: flags.resend_max,
            resend_timeout: flags.resend_timeout,
        },
        broadcast: flags.broadcast,
        store,
    });
    let registry = Arc::new(Registry::new(ctx));
    registry.restore();

    // The signal thread ends the process; leases stay on disk.
    let socket_file = listening.path.clone();
    let pidfile = flags.pidfile.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let sig = wait_for_signal(&set);
            if let Some(p) = &socket_file {
                let _ = std::fs::remove_file(p);
            }
            if let Some(p) = &pidfile {
                let _ = std::fs::remove_file(p);
            }
            log(format_args!(
                "signal {sig}: stopping; the leases stay on disk for the next daemon"
            ));
            std::process::exit(0);
        })
        .map_err(|e| Error::io("starting the signal thread", e))?;

    // SAFETY: geteuid(2) cannot fail.
    let euid = unsafe { libc::geteuid() };
    for conn in listening.listener.incoming() {
        match conn {
            Ok(stream) => {
                let registry = registry.clone();
                let spawned = std::thread::Builder::new()
                    .name("conn".into())
                    .stack_size(512 << 10)
                    .spawn(move || serve(&registry, stream, euid));
                if let Err(e) = spawned {
                    log(format_args!("cannot serve a connection: {e}"));
                }
            }
            Err(e) => {
                log(format_args!("accept: {e}"));
                // Out of descriptors or memory: let the others finish first.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    Ok(())
}

fn write_pidfile(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| std::io::Error::other("no file name"))?;
    libcni::files::write_atomic(
        dir,
        ".tmp-dhcp-pid-",
        &name,
        format!("{}", std::process::id()).as_bytes(),
    )
    .map_err(|e| e.source)
}

/// The uid of the peer of `stream` (`SO_PEERCRED`).
fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    // SAFETY: reads a ucred into a local of its size.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(2) writes at most `len` bytes into `cred`, a
    // local of that size, and the descriptor is the stream's, open.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// One connection: only root or the daemon's own user may ask anything.
fn serve(registry: &Registry, mut stream: UnixStream, euid: u32) {
    match peer_uid(&stream) {
        Ok(uid) if uid == 0 || uid == euid => {}
        Ok(uid) => {
            log(format_args!("refusing a request of uid {uid}"));
            let e = Error::InvalidEnv(format!(
                "the dhcp daemon serves only root (or uid {euid}), not uid {uid}"
            ));
            let _ = proto::write_message(&mut stream, &Response::error(&e));
            return;
        }
        Err(e) => {
            log(format_args!("cannot identify a peer: {e}"));
            return;
        }
    }
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let resp = match proto::read_message::<Request>(&mut stream) {
        Ok(req) if req.version != proto::VERSION => Response::error(&Error::IncompatibleVersion {
            msg: format!(
                "the dhcp daemon speaks protocol version {}, the plugin {}: install one build of both",
                proto::VERSION,
                req.version
            ),
            details: String::new(),
        }),
        Ok(req) => registry.handle(&req),
        Err(ReadError::Empty) => return,
        Err(e) => {
            log(format_args!("a bad request: {e}"));
            Response::error(&Error::Decode(format!("the dhcp daemon could not read the request: {e}")))
        }
    };
    let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
    if let Err(e) = proto::write_message(&mut stream, &resp) {
        log(format_args!("answering a request: {e}"));
    }
}
