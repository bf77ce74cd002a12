//! The throwaway namespaces of one benchmark run: a node namespace
//! `cnit-bench-<pid>-node` that plays the host (the bench process enters it,
//! so every plugin it starts runs there), and pod namespaces
//! `cnit-bench-<pid>-pod<N>` beside it. All are created and deleted with
//! `ip -batch` (one process however many), and deleted by [`Namespaces`]'s
//! `Drop`, which also runs when the run is interrupted or panics.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The prefix every benchmark namespace name starts with.
pub const PREFIX: &str = "cnit-bench-";

/// The namespaces of this run. Dropping it returns the process to the
/// namespace it started in and deletes every namespace it created.
pub struct Namespaces {
    prefix: String,
    node: String,
    /// More node namespaces (the sweep's empty twin).
    nodes: Vec<String>,
    pods: Vec<String>,
    original: Option<File>,
}

impl Namespaces {
    /// Creates the node namespace (named after this process).
    pub fn create() -> io::Result<Namespaces> {
        let prefix = format!("{PREFIX}{}-", std::process::id());
        let node = format!("{prefix}node");
        let ns = Namespaces {
            prefix,
            node,
            nodes: Vec::new(),
            pods: Vec::new(),
            original: None,
        };
        ip_batch(&[format!("netns add {}", ns.node)], false)?;
        Ok(ns)
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// Moves the calling thread into the node namespace. Call it on the main
    /// thread before any other thread exists: threads started later and
    /// every child process inherit the namespace, so the plugins run in the
    /// node and nothing touches the namespace the bench was started in.
    pub fn enter_node(&mut self) -> io::Result<()> {
        let original = File::open("/proc/thread-self/ns/net")?;
        let node = File::open(path_of(&self.node))?;
        setns(&node)?;
        self.original = Some(original);
        Ok(())
    }

    /// Creates another node namespace `cnit-bench-<pid>-node-<suffix>`, its
    /// loopback up, and returns it opened, for [`run_in`].
    pub fn add_node(&mut self, suffix: &str) -> io::Result<File> {
        let name = format!("{}node-{suffix}", self.prefix);
        self.nodes.push(name.clone());
        ip_batch(&[format!("netns add {name}")], false)?;
        let file = File::open(path_of(&name))?;
        let up = run_in(&file, || ip_batch(&["link set lo up".to_string()], false))?;
        up.map(|()| file)
    }

    /// Creates `count` more pod namespaces and returns their names.
    pub fn add_pods(&mut self, count: usize) -> io::Result<Vec<String>> {
        let first = self.pods.len();
        let names: Vec<String> = (first..first + count)
            .map(|n| format!("{}pod{n}", self.prefix))
            .collect();
        let lines: Vec<String> = names.iter().map(|n| format!("netns add {n}")).collect();
        // Record them first, so a half-done batch is still cleaned up.
        self.pods.extend(names.iter().cloned());
        ip_batch(&lines, false)?;
        Ok(names)
    }

    /// Deletes and re-creates pod `name`: a clean pod after a failed step.
    pub fn recreate_pod(&self, name: &str) -> io::Result<()> {
        ip_batch(&[format!("netns del {name}")], true)?;
        ip_batch(&[format!("netns add {name}")], false)
    }

    /// The pods created so far.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// The pods created that no longer exist: something else deleted them
    /// (e.g. a test run cleaning up every `cnit-` namespace).
    pub fn vanished_pods(&self) -> usize {
        self.pods.iter().filter(|p| !path_of(p).exists()).count()
    }

    /// Re-creates pod `name` if something else deleted it; true if it did.
    pub fn ensure_pod(&self, name: &str) -> io::Result<bool> {
        if path_of(name).exists() {
            return Ok(false);
        }
        ip_batch(&[format!("netns add {name}")], false)?;
        Ok(true)
    }
}

/// The bind-mounted namespace file of `name`, what `CNI_NETNS` carries.
pub fn path_of(name: &str) -> PathBuf {
    PathBuf::from("/run/netns").join(name)
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        if let Some(original) = self.original.take() {
            if let Err(e) = setns(&original) {
                eprintln!("cni-bench: cannot leave the node namespace: {e}");
            }
        }
        // The rule ledgers our portmap and ipMasq kept for the nodes'
        // rules (`/run/cni/<feature>/netns-<inode>`): their rules go with
        // the namespaces, the filled pods are never DELed.
        for n in self.nodes.iter().chain(std::iter::once(&self.node)) {
            if let Ok(m) = std::fs::metadata(path_of(n)) {
                use std::os::unix::fs::MetadataExt;
                for feature in [
                    "portmap",
                    "ipmasq",
                    "portmap-iptables",
                    "ipmasq-iptables",
                    "portmap-iptables-jumps",
                ] {
                    let dir = std::path::Path::new(libcni::netfilter::ledger::ROOT)
                        .join(feature)
                        .join(format!("netns-{}", m.ino()));
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
        }
        let mut lines: Vec<String> = self.pods.iter().map(|p| format!("netns del {p}")).collect();
        lines.extend(self.nodes.iter().map(|n| format!("netns del {n}")));
        lines.push(format!("netns del {}", self.node));
        if let Err(e) = ip_batch(&lines, true) {
            eprintln!("cni-bench: deleting the benchmark namespaces: {e}");
        }
        let left = leftovers(&self.prefix);
        if !left.is_empty() {
            eprintln!("cni-bench: namespaces left behind: {}", left.join(" "));
        }
    }
}

/// The namespaces named with `prefix` that still exist.
fn leftovers(prefix: &str) -> Vec<String> {
    match std::fs::read_dir("/run/netns") {
        Ok(dir) => dir
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with(prefix))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Runs `f` on a thread inside namespace `node` (an opened namespace
/// file): the processes `f` starts run there. The calling thread stays
/// where it is.
pub fn run_in<T: Send>(node: &File, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            setns(node)?;
            Ok(f())
        })
        .join()
        .map_err(|_| io::Error::other("the thread inside the namespace panicked"))?
    })
}

fn setns(file: &File) -> io::Result<()> {
    // SAFETY: a plain syscall on a descriptor we own.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `ip -batch -` with `lines`; with `force`, goes on past failing lines
/// (deleting what may already be gone) and does not report them.
fn ip_batch(lines: &[String], force: bool) -> io::Result<()> {
    let mut cmd = Command::new("ip");
    if force {
        cmd.arg("-force");
    }
    let mut child = cmd
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(if force { Stdio::null() } else { Stdio::piped() })
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("running ip: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        let mut text = lines.join("\n");
        text.push('\n');
        stdin.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() && !force {
        return Err(io::Error::other(format!(
            "ip -batch ({}...) failed: {}",
            lines.first().map(String::as_str).unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
