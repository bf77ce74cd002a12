//! Where the time of a plugin call goes: the floor of starting a process
//! at all (`/bin/true`), the start of each plugin binary (`CNI_COMMAND=VERSION`:
//! exec, dynamic loading, runtime init, printing a line), and a syscall
//! summary (`strace -f -C -T`) of one ADD and one DEL of each of our plugins in
//! its chain: process starts (`execve`, `clone`), netlink round trips
//! (`sendto`/`sendmsg` and `recvfrom`/`recvmsg`), sleeps.

use crate::interrupt;
use crate::process::{self, Invocation};
use crate::runner::{runtime_conf, Mode, SideSetup};
use crate::stats::Samples;
use crate::trace::{self, NetfilterSockets};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The start cost of each binary (VERSION), and the exec floor.
#[derive(Debug, Clone, Default)]
pub struct StartCosts {
    /// `/bin/true`, spawned and reaped the same way.
    pub floor: Samples,
    /// The floors under it, when they could be built: a static program
    /// with no C library, and a static glibc one whose `main` returns.
    pub bare: Vec<StartFloor>,
    /// By binary path.
    pub version: BTreeMap<PathBuf, Samples>,
}

/// A program started and reaped as a plugin is, to time what starting
/// any process costs here.
#[derive(Debug, Clone)]
pub struct StartFloor {
    pub label: &'static str,
    pub program: PathBuf,
    pub samples: Samples,
}

impl StartFloor {
    /// The bare start floors, compiled into `dir` with
    /// [`crate::cprog::build`] (label, file name, source, compiler flags);
    /// one that does not build is left out, and why goes to `notes`.
    pub fn build(dir: &Path, notes: &mut Vec<String>) -> Vec<StartFloor> {
        let programs = [
            (
                "static, no C library (`_start` exits)",
                "start-nolibc",
                crate::cprog::NO_LIBC,
                &["-nostdlib"][..],
            ),
            (
                "static glibc (`main` returns)",
                "start-glibc",
                crate::cprog::EMPTY_MAIN,
                &[][..],
            ),
        ];
        let mut out = Vec::new();
        for (label, name, source, flags) in programs {
            match crate::cprog::build(dir, name, source, flags) {
                Ok(program) => out.push(StartFloor {
                    label,
                    program,
                    samples: Samples::default(),
                }),
                Err(e) => notes.push(format!("start floor {label}: {e}")),
            }
        }
        out
    }
}

/// Each plugin's start (`VERSION`) from two directories, measured in one
/// alternating run: `(plugin, start in a, start in b)`.
pub fn start_pairs(
    plugins: &[String],
    a: &Path,
    b: &Path,
    runs: usize,
) -> Result<Vec<(String, Samples, Samples)>, String> {
    let programs: Vec<PathBuf> = plugins
        .iter()
        .flat_map(|p| [a.join(p), b.join(p)])
        .collect();
    let mut costs = start_costs(&programs, Vec::new(), runs)?;
    Ok(plugins
        .iter()
        .map(|p| {
            let mut take = |d: &Path| costs.version.remove(&d.join(p)).unwrap_or_default();
            (p.clone(), take(a), take(b))
        })
        .collect())
}

/// Times `program` with `CNI_COMMAND=VERSION`, `runs` times.
fn version_runs(program: &Path, runs: usize) -> Result<Samples, String> {
    let mut s = Samples::default();
    let stdin = br#"{"cniVersion":"1.0.0"}"#;
    for _ in 0..runs {
        interrupt::check()?;
        let inv = Invocation {
            wrapper: &[],
            program,
            command: "VERSION",
            container_id: "",
            netns: "",
            ifname: "",
            cni_path: "",
            stdin,
        };
        let exit = process::run_timed(&inv).map_err(|e| format!("{}: {e}", program.display()))?;
        if !exit.success {
            return Err(format!(
                "{} VERSION: {}",
                program.display(),
                exit.error_text()
            ));
        }
        s.push(exit.wall_ms);
    }
    Ok(s)
}

/// Measures the start costs of `programs` (interleaved, so noise spreads
/// evenly), of `/bin/true` and of the `bare` floors.
pub fn start_costs(
    programs: &[PathBuf],
    bare: Vec<StartFloor>,
    runs: usize,
) -> Result<StartCosts, String> {
    let mut costs = StartCosts {
        bare,
        ..StartCosts::default()
    };
    for _ in 0..runs {
        costs.floor.push(
            version_runs(Path::new("/bin/true"), 1)?
                .p50()
                .unwrap_or(0.0),
        );
        for f in &mut costs.bare {
            f.samples
                .push(version_runs(&f.program, 1)?.p50().unwrap_or(0.0));
        }
        for p in programs {
            let s = version_runs(p, 1)?;
            let entry = costs.version.entry(p.clone()).or_default();
            if let Some(v) = s.p50() {
                entry.push(v);
            }
        }
    }
    Ok(costs)
}

/// The syscall summary of one plugin call.
#[derive(Debug, Clone, Default)]
pub struct Syscalls {
    pub plugin: String,
    pub command: String,
    /// (syscall, calls, seconds) from strace's table, busiest first.
    pub rows: Vec<(String, u64, f64)>,
    /// The table as strace wrote it.
    pub raw: String,
    /// Its `NETLINK_NETFILTER` sockets, from the trace.
    pub netfilter: NetfilterSockets,
    /// Its netlink requests by message type: count and ms, from the trace.
    pub requests: Vec<(String, usize, f64)>,
}

/// strace's summary table at the end of a `-C` trace.
fn summary_of(text: &str) -> &str {
    text.find("% time").map_or(text, |i| &text[i..])
}

impl Syscalls {
    pub fn calls(&self, names: &[&str]) -> u64 {
        self.rows
            .iter()
            .filter(|(n, _, _)| names.contains(&n.as_str()))
            .map(|(_, c, _)| c)
            .sum()
    }

    /// Wall seconds spent in `names` (strace `-w`).
    pub fn wall(&self, names: &[&str]) -> f64 {
        self.rows
            .iter()
            .filter(|(n, _, _)| names.contains(&n.as_str()))
            .map(|(_, _, t)| t)
            .sum::<f64>()
            + 0.0 // an empty sum is -0.0
    }

    pub fn total(&self) -> u64 {
        self.rows.iter().map(|(_, c, _)| c).sum()
    }
}

/// Syscalls in which a plugin waits for the kernel's own work (not for a
/// child process or a pipe): where a slow one shows what the kernel does.
pub const KERNEL_WORK: [&str; 14] = [
    "sendto",
    "sendmsg",
    "recvfrom",
    "recvmsg",
    "close",
    "write",
    "openat",
    "fsync",
    "fdatasync",
    "unlinkat",
    "renameat",
    "linkat",
    "nanosleep",
    "clock_nanosleep",
];

/// Parses `strace -c` output.
pub fn parse_strace(text: &str) -> Vec<(String, u64, f64)> {
    let mut rows = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 5 || fields[0].starts_with('%') || fields[0].starts_with('-') {
            continue;
        }
        let Some(name) = fields.last() else { continue };
        if *name == "total" {
            continue;
        }
        let (Ok(secs), Ok(calls)) = (fields[1].parse::<f64>(), fields[3].parse::<u64>()) else {
            continue;
        };
        rows.push((name.to_string(), calls, secs));
    }
    rows
}

/// Runs `side`'s chain once plugin by plugin under `strace -f -C -T` and
/// returns the summary of each plugin's ADD and DEL.
pub fn strace_chain(
    side: &SideSetup,
    pod: &str,
    ifname: &str,
    caps: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    out_dir: &Path,
) -> Result<Vec<Syscalls>, String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let cid = format!("strace-{key}");
    let rt = runtime_conf(cid.clone(), pod, ifname, caps);
    side.direct_add_del(&rt, Mode::Strace(out_dir))?;
    let mut out = Vec::new();
    for ty in side.plugin_types() {
        for command in ["ADD", "DEL"] {
            let path = out_dir.join(format!("{cid}-{ty}-{command}"));
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let raw = summary_of(&text).to_string();
            let calls = trace::calls(&text);
            let mut rows = parse_strace(&raw);
            rows.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.1.cmp(&a.1)));
            out.push(Syscalls {
                plugin: ty.clone(),
                command: command.into(),
                rows,
                raw,
                netfilter: trace::netfilter_sockets(&calls),
                requests: trace::netlink_requests(&calls),
            });
        }
    }
    Ok(out)
}

/// The kernel's own share of a bridge ADD and DEL: creating a veth pair
/// with its peer directly in a pod namespace, and deleting it, over netlink
/// in-process (no process start, nothing else). Both sides pay it.
#[derive(Debug, Clone, Default)]
pub struct KernelFloor {
    pub add: Samples,
    pub del: Samples,
}

/// Measures [`KernelFloor`] `runs` times against pod namespace `pod`.
pub fn kernel_floor(pod: &str, runs: usize) -> Result<KernelFloor, String> {
    use libcni::netlink::Netlink;
    use libcni::netns::NetNs;
    let err = |e: libcni::Error| e.to_string();
    let mut nl = Netlink::open().map_err(err)?;
    let pod_ns = NetNs::open(&crate::namespaces::path_of(pod)).map_err(err)?;
    let mut floor = KernelFloor::default();
    for _ in 0..runs {
        interrupt::check()?;
        let start = Instant::now();
        nl.add_veth("cbenchfloor0", None, "eth9", &pod_ns, None)
            .map_err(err)?;
        floor.add.push(start.elapsed().as_secs_f64() * 1e3);
        let link = nl
            .link_by_name("cbenchfloor0")
            .map_err(err)?
            .ok_or("the veth just created is not there")?;
        let start = Instant::now();
        nl.delete_link(link.index).map_err(err)?;
        floor.del.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(floor)
}

/// What deleting nftables state costs a process, against adding it: the
/// `nft` command adding, then deleting, one element of a set (each a whole
/// process). A process that deleted nftables objects waits at the release
/// of its netlink socket (at `close`, or at exit) until the kernel has
/// destroyed them, so the difference is that wait.
#[derive(Debug, Clone, Default)]
pub struct NftFloor {
    pub add: Samples,
    pub del: Samples,
}

fn nft(args: &str) -> Result<f64, String> {
    let start = Instant::now();
    let out = std::process::Command::new("nft")
        .arg(args)
        .output()
        .map_err(|e| format!("running nft: {e}"))?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if !out.status.success() {
        return Err(format!(
            "nft {args}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(ms)
}

/// Measures [`NftFloor`] `runs` times (in the calling thread's namespace,
/// in a table of its own that it removes again).
pub fn nft_floor(runs: usize) -> Result<NftFloor, String> {
    nft("add table inet cbench_floor")?;
    let measured = (|| {
        nft("add set inet cbench_floor s { type inet_service; }")?;
        let mut floor = NftFloor::default();
        for _ in 0..runs {
            interrupt::check()?;
            floor
                .add
                .push(nft("add element inet cbench_floor s { 80 }")?);
            floor
                .del
                .push(nft("delete element inet cbench_floor s { 80 }")?);
        }
        Ok(floor)
    })();
    let _ = nft("delete table inet cbench_floor");
    measured
}

/// Whether `strace` can be run.
pub fn have_strace() -> bool {
    std::process::Command::new("strace")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_strace_summaries() {
        let text = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 41.29    0.000225          16        14           sendto
 20.00    0.000109           5        20         3 openat
  0.00    0.000000           0         1           execve
------ ----------- ----------- --------- --------- ----------------
100.00    0.000545           7        35         3 total
";
        let rows = parse_strace(text);
        assert_eq!(
            rows,
            [
                ("sendto".to_string(), 14, 0.000225),
                ("openat".to_string(), 20, 0.000109),
                ("execve".to_string(), 1, 0.0)
            ]
        );
        let s = Syscalls {
            rows,
            ..Syscalls::default()
        };
        assert_eq!(s.calls(&["sendto", "sendmsg"]), 14);
        assert_eq!(s.total(), 35);
    }

    #[test]
    fn the_summary_is_what_follows_the_trace() {
        assert_eq!(
            summary_of("11 close(3) = 0\n% time  seconds\n"),
            "% time  seconds\n"
        );
    }
}
