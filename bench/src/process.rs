//! Running one plugin process directly, as a runtime does (its stdin, the
//! six `CNI_*` variables, stdout and stderr piped), in two ways:
//!
//! - [`run_timed`]: spawned the way a runtime spawns it (`posix_spawn`, no
//!   `pre_exec`), wall time from spawn to reaped, and its CPU time from
//!   `wait4()` rusage.
//! - [`run_traced`]: under `ptrace`, following every process it starts
//!   (delegates, `iptables`, `nft`), to read each one's peak RSS (`VmHWM`)
//!   when it exits. `wait4()`'s `ru_maxrss` cannot be used for that: at
//!   `execve` the kernel folds the *parent's* high-water mark into the
//!   child's, with `fork` and `vfork`/`posix_spawn` alike, so it reports
//!   the benchmark's own size whenever that is larger than the plugin.
//!   Timings are never taken from traced runs.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::time::Instant;

/// One call of a plugin binary.
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    /// A program (and its arguments) to run the plugin under, e.g. strace.
    pub wrapper: &'a [String],
    pub program: &'a Path,
    /// `CNI_COMMAND`: `ADD`, `DEL`, `VERSION`.
    pub command: &'a str,
    pub container_id: &'a str,
    pub netns: &'a str,
    pub ifname: &'a str,
    /// `CNI_PATH`, where the plugin finds its delegates.
    pub cni_path: &'a str,
    pub stdin: &'a [u8],
}

/// How a plugin process ended and what it printed.
#[derive(Debug, Clone)]
pub struct Exit {
    /// From just before the spawn to just after the process was reaped.
    pub wall_ms: f64,
    /// User plus system time of the process and the children it waited for.
    pub cpu_ms: f64,
    pub success: bool,
    pub status: String,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Exit {
    /// The plugin's error: its spec error message when it printed one, else
    /// its stderr, else how it exited.
    pub fn error_text(&self) -> String {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&self.stdout) {
            if let Some(msg) = v.get("msg").and_then(|m| m.as_str()) {
                let details = v.get("details").and_then(|d| d.as_str()).unwrap_or("");
                let code = v.get("code").map(|c| c.to_string()).unwrap_or_default();
                return format!("code {code}: {msg} {details}").trim().to_string();
            }
        }
        let stderr = String::from_utf8_lossy(&self.stderr);
        let stderr = stderr.trim();
        if !stderr.is_empty() {
            return format!("{}: {}", self.status, last_lines(stderr, 3));
        }
        self.status.clone()
    }
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// The peak resident set of one process that exited during a traced run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPeak {
    /// The program it was running when it exited (`/proc/<pid>/exe`).
    pub exe: PathBuf,
    /// The name it was started by (`Name:`, the executed path's last part,
    /// 15 bytes at most): a link's name, where `exe` is the multicall
    /// binary for every plugin.
    pub name: String,
    /// `VmHWM`: the most memory it ever had resident, in KiB.
    pub hwm_kib: u64,
}

fn command(inv: &Invocation) -> Command {
    let mut cmd = match inv.wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(inv.program);
            c
        }
        None => Command::new(inv.program),
    };
    cmd.env("CNI_COMMAND", inv.command)
        .env("CNI_CONTAINERID", inv.container_id)
        .env("CNI_NETNS", inv.netns)
        .env("CNI_IFNAME", inv.ifname)
        .env("CNI_ARGS", "")
        .env("CNI_PATH", inv.cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Writes the whole stdin and closes it. A plugin may exit without reading
/// it (VERSION, an early error): a broken pipe is not our error.
fn feed(child: &mut Child, stdin: &[u8]) -> io::Result<()> {
    if let Some(mut pipe) = child.stdin.take() {
        if let Err(e) = pipe.write_all(stdin) {
            if e.kind() != io::ErrorKind::BrokenPipe {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Reads stdout and stderr to their end, whichever has data, so a plugin
/// that writes much to one cannot block on the other.
fn read_both(
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut files: [Option<File>; 2] = [
        stdout.map(|p| File::from(OwnedFd::from(p))),
        stderr.map(|p| File::from(OwnedFd::from(p))),
    ];
    let mut bufs = [Vec::new(), Vec::new()];
    let mut chunk = [0u8; 16384];
    loop {
        let mut fds = Vec::with_capacity(2);
        let mut which = Vec::with_capacity(2);
        for (i, f) in files.iter().enumerate() {
            if let Some(f) = f {
                fds.push(libc::pollfd {
                    fd: f.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                which.push(i);
            }
        }
        if fds.is_empty() {
            return Ok((std::mem::take(&mut bufs[0]), std::mem::take(&mut bufs[1])));
        }
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for (pfd, &i) in fds.iter().zip(&which) {
            if pfd.revents == 0 {
                continue;
            }
            let Some(file) = files[i].as_mut() else {
                continue;
            };
            match file.read(&mut chunk) {
                Ok(0) => files[i] = None,
                Ok(n) => bufs[i].extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn describe_status(status: libc::c_int) -> (bool, String) {
    if libc::WIFEXITED(status) {
        let code = libc::WEXITSTATUS(status);
        (code == 0, format!("exit status {code}"))
    } else if libc::WIFSIGNALED(status) {
        (
            false,
            format!("killed by signal {}", libc::WTERMSIG(status)),
        )
    } else {
        (false, format!("wait status {status:#x}"))
    }
}

fn ms_of(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 * 1e3 + tv.tv_usec as f64 / 1e3
}

/// Runs the plugin and times it (see the module comment).
pub fn run_timed(inv: &Invocation) -> io::Result<Exit> {
    let mut cmd = command(inv);
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    let io_result = feed(&mut child, inv.stdin)
        .and_then(|()| read_both(child.stdout.take(), child.stderr.take()));
    let mut status: libc::c_int = 0;
    // SAFETY: all-zero is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: plain syscall with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let wall_ms = start.elapsed().as_secs_f64() * 1e3;
    let (stdout, stderr) = io_result?;
    let (success, status) = describe_status(status);
    Ok(Exit {
        wall_ms,
        cpu_ms: ms_of(usage.ru_utime) + ms_of(usage.ru_stime),
        success,
        status,
        stdout,
        stderr,
    })
}

const TRACE_OPTIONS: libc::c_int = libc::PTRACE_O_TRACEEXIT
    | libc::PTRACE_O_TRACEFORK
    | libc::PTRACE_O_TRACEVFORK
    | libc::PTRACE_O_TRACECLONE
    | libc::PTRACE_O_TRACEEXEC
    | libc::PTRACE_O_EXITKILL;

fn ptrace(request: libc::c_uint, tid: libc::pid_t, data: usize) -> io::Result<()> {
    // SAFETY: requests that take no pointer (CONT, SETOPTIONS, TRACEME).
    let r = unsafe { libc::ptrace(request, tid, std::ptr::null_mut::<libc::c_void>(), data) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs the plugin under `ptrace` and returns, besides how it ended, the
/// peak RSS of it and of every process it started (see the module comment).
/// Its wall and CPU times are meaningless and left at zero.
pub fn run_traced(inv: &Invocation) -> io::Result<(Exit, Vec<ProcessPeak>)> {
    let mut cmd = command(inv);
    // SAFETY: PTRACE_TRACEME is a single async-signal-safe syscall.
    unsafe {
        cmd.pre_exec(|| ptrace(libc::PTRACE_TRACEME, 0, 0));
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    feed(&mut child, inv.stdin)?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || read_both(stdout, stderr));

    let mut status: libc::c_int = 0;
    // The first stop: the SIGTRAP a PTRACE_TRACEME child gets after execve.
    // SAFETY: plain syscall with a valid out-pointer.
    if unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } != pid {
        return Err(io::Error::last_os_error());
    }
    ptrace(libc::PTRACE_SETOPTIONS, pid, TRACE_OPTIONS as usize)?;
    ptrace(libc::PTRACE_CONT, pid, 0)?;

    let mut peaks = Vec::new();
    let mut child_status = None;
    loop {
        // SAFETY: plain syscall with a valid out-pointer.
        let tid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
        if tid < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => break,
                _ => return Err(e),
            }
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            if tid == pid {
                child_status = Some(status);
            }
            continue;
        }
        if !libc::WIFSTOPPED(status) {
            continue;
        }
        let event = (status >> 16) & 0xff;
        let sig = libc::WSTOPSIG(status);
        let inject = if event == libc::PTRACE_EVENT_EXIT {
            if let Some(peak) = peak_of(tid) {
                peaks.push(peak);
            }
            0
        } else if event != 0 || sig == libc::SIGTRAP || sig == libc::SIGSTOP {
            // fork/clone/exec events, and the first stop of a new tracee.
            0
        } else {
            // A real signal: deliver it.
            sig
        };
        // The tracee may have been killed meanwhile: nothing to continue.
        let _ = ptrace(libc::PTRACE_CONT, tid, inject as usize);
    }
    let (stdout, stderr) = reader
        .join()
        .map_err(|_| io::Error::other("pipe reader panicked"))??;
    let (success, status) = match child_status {
        Some(s) => describe_status(s),
        None => (false, "exit status lost".to_string()),
    };
    Ok((
        Exit {
            wall_ms: 0.0,
            cpu_ms: 0.0,
            success,
            status,
            stdout,
            stderr,
        },
        peaks,
    ))
}

/// The peak RSS of thread `tid`'s process, if `tid` is the process's main
/// thread (other threads share its memory and are skipped).
fn peak_of(tid: libc::pid_t) -> Option<ProcessPeak> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().trim_end_matches("kB").trim().to_string())
    };
    if field("Tgid:")?.parse::<libc::pid_t>().ok()? != tid {
        return None;
    }
    let hwm_kib = field("VmHWM:")?.parse().ok()?;
    let exe = std::fs::read_link(format!("/proc/{tid}/exe")).ok()?;
    let name = field("Name:")?;
    Some(ProcessPeak { exe, name, hwm_kib })
}
