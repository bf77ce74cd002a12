//! The multicall form against the separate binaries (issue 26): the
//! chains again, with our separate binaries on one side and `cni-rs` with
//! a link per plugin on the other (the same conflists), alternating in
//! every iteration as the main table does; the sizes of the suite in each
//! form beside Debian's Go package; and the section of RESULTS.md.

use crate::cells::{fine_ratio as x, megabytes as mb, p50_cell as ms};
use crate::chains::Chain;
use crate::measure::{self, ChainOutcome, Setting};
use crate::namespaces::Namespaces;
use crate::stats::{ratio, Samples};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The multicall binary's name in a build directory.
pub const BINARY: &str = "cni-rs";

/// How much slower a plugin may be as a link to the multicall binary, at
/// p50, than as its own binary (the bound).
pub const SLOWER_BOUND: f64 = 1.05;

/// Each side's chain iterations here, as a multiple of the main table's:
/// a DEL's wall time is mostly waits in the kernel (a veth's removal waits
/// for RCU grace periods), whose spread needs more samples for a p50 that
/// can show 5%: at 3x, one plugin's DEL ratio still moved between 0.96x
/// and 1.18x from chain to chain in one run, its CPU time within 1.03x.
pub const ITERATIONS_FACTOR: usize = 10;

/// VERSION calls per plugin and form for the start costs.
pub const START_RUNS: usize = 100;

/// The measured comparison.
pub struct Comparison {
    /// The multicall binary measured (a copy of it, with its links, in the
    /// run's temp dir is what ran).
    pub binary: PathBuf,
    /// Each chain: "ours" the separate binaries, "reference" the links.
    pub chains: Vec<ChainOutcome>,
    /// Per plugin (all of them, not only the chains'): the start cost
    /// (`VERSION`, spawn to reaped) of its own binary and of its link.
    pub starts: Vec<(String, Samples, Samples)>,
    pub iterations: usize,
    pub sizes: Sizes,
}

/// Bytes on disk of the whole suite of plugins in each form.
pub struct Sizes {
    pub plugins: usize,
    pub separate: u64,
    pub multicall: u64,
    /// Every executable of the Go reference directory (Debian's package).
    pub debian: u64,
    pub debian_files: usize,
}

/// Lays out the multicall form of `ours` (its `cni-rs`, copied, and a link
/// to it named after each plugin it lists) in `dir`.
pub fn lay_out(ours: &Path, dir: &Path) -> Result<Vec<String>, String> {
    let binary = ours.join(BINARY);
    if !binary.is_file() {
        return Err(format!("{} is not built", binary.display()));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::copy(&binary, dir.join(BINARY)).map_err(|e| format!("copying {BINARY}: {e}"))?;
    let out = std::process::Command::new(dir.join(BINARY))
        .arg("--list")
        .output()
        .map_err(|e| format!("{BINARY} --list: {e}"))?;
    let plugins: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    for p in &plugins {
        std::os::unix::fs::symlink(BINARY, dir.join(p)).map_err(|e| format!("link {p}: {e}"))?;
    }
    Ok(plugins)
}

/// The sizes of the suite's `plugins` in `ours` (separate) and of the
/// multicall binary in `dir`, and of the Go package in `reference`.
pub fn sizes(ours: &Path, dir: &Path, reference: &Path, plugins: &[String]) -> Sizes {
    let len = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let debian = crate::machine::executables(reference, &[]);
    Sizes {
        plugins: plugins.len(),
        separate: plugins.iter().map(|p| len(ours.join(p))).sum(),
        multicall: len(dir.join(BINARY)),
        debian: debian.iter().map(|(_, b)| b).sum(),
        debian_files: debian.len(),
    }
}

/// Every chain with the multicall form as its other side: the same
/// conflist on both.
pub fn chains_against_separate(chains: &[Chain]) -> Vec<Chain> {
    chains
        .iter()
        .map(|c| Chain {
            reference: c.ours.clone(),
            note: None,
            ..c.clone()
        })
        .collect()
}

/// Lays out the multicall form of `set.ours_dir` in `dir` and measures
/// `chains` with the separate binaries against it; `Ok(None)`: there is no
/// multicall binary to measure, and why.
pub fn compare(
    set: &Setting,
    dir: &Path,
    ns: &Namespaces,
    pod: &str,
    chains: &[Chain],
) -> Result<Result<Comparison, String>, String> {
    let plugins = match lay_out(set.ours_dir, dir) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    let set = Setting {
        iterations: set.iterations * ITERATIONS_FACTOR,
        ..*set
    };
    let starts = crate::diagnose::start_pairs(&plugins, set.ours_dir, dir, START_RUNS)?;
    Ok(Ok(Comparison {
        binary: set.ours_dir.join(BINARY),
        chains: measure(&set, dir, ns, pod, chains)?,
        starts,
        iterations: set.iterations,
        sizes: sizes(set.ours_dir, dir, set.reference_dir, &plugins),
    }))
}

/// Measures `chains` with the separate binaries of `set.ours_dir` against
/// the multicall form in `dir`.
pub fn measure(
    set: &Setting,
    dir: &Path,
    ns: &Namespaces,
    pod: &str,
    chains: &[Chain],
) -> Result<Vec<ChainOutcome>, String> {
    let conf_dir = set.conf_dir.join("multicall");
    let set = Setting {
        reference_dir: dir,
        conf_dir: &conf_dir,
        ..*set
    };
    chains_against_separate(chains)
        .iter()
        .map(|c| measure::chain(&set, ns, pod, c))
        .collect()
}

/// Which numbers of a plugin's runs a ratio compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Spawn to reaped.
    Wall,
    /// User + system time of the process and its children.
    Cpu,
}

/// The largest multicall / separate p50 ratio over every plugin's ADD and
/// DEL, by `measure`, with where it is.
pub fn worst_ratio(chains: &[ChainOutcome], measure: Measure) -> Option<(f64, String)> {
    let mut worst: Option<(f64, String)> = None;
    for c in chains {
        let ChainOutcome::Measured {
            chain,
            ours,
            reference,
        } = c
        else {
            continue;
        };
        for (o, m) in ours.plugins.iter().zip(&reference.plugins) {
            let pairs = match measure {
                Measure::Wall => [("ADD", &o.add, &m.add), ("DEL", &o.del, &m.del)],
                Measure::Cpu => [
                    ("ADD", &o.add_cpu, &m.add_cpu),
                    ("DEL", &o.del_cpu, &m.del_cpu),
                ],
            };
            for (verb, a, b) in pairs {
                if let Some(r) = ratio(b.p50(), a.p50()) {
                    if worst.as_ref().is_none_or(|(w, _)| r > *w) {
                        worst = Some((r, format!("{} {verb} in the {} chain", o.name, chain.key)));
                    }
                }
            }
        }
    }
    worst
}

fn verdict(worst: Option<(f64, String)>) -> String {
    match worst {
        Some((r, at)) if r <= SLOWER_BOUND => format!("**PASS**, at most {r:.3}x ({at})"),
        Some((r, at)) => format!("**FAIL**, {r:.3}x ({at})"),
        None => "not measured".into(),
    }
}

/// The RESULTS.md section.
pub fn render(c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Separate binaries and the multicall form\n");
    let _ = writeln!(
        s,
        "The same chains and conflists, our separate plugin binaries against the multicall \
         binary `{}` called through a link per plugin (a copy with its links, as installed), alternating \
         within every iteration as above. A ratio is multicall / separate at p50 (above 1: the \
         multicall form is slower). Peak RSS is `VmHWM` of the process started under the \
         plugin's name (KiB).\n",
        c.binary.display()
    );
    let worst_start = c
        .starts
        .iter()
        .filter_map(|(p, own, link)| ratio(link.p50(), own.p50()).map(|r| (r, p.clone())))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let _ = writeln!(
        s,
        "No plugin more than 5% slower as a link, p50 of multicall / separate, {} iterations \
         per chain and side ({ITERATIONS_FACTOR}x the main table's):\n",
        c.iterations
    );
    let _ = writeln!(
        s,
        "- ADD and DEL, wall time: {}.",
        verdict(worst_ratio(&c.chains, Measure::Wall))
    );
    let _ = writeln!(
        s,
        "- ADD and DEL, CPU time: {}.",
        verdict(worst_ratio(&c.chains, Measure::Cpu))
    );
    let _ = writeln!(
        s,
        "- Start (`VERSION`, {START_RUNS} calls per plugin and form, all {} plugins): {}.",
        c.starts.len(),
        verdict(worst_start)
    );
    let z = &c.sizes;
    let _ = writeln!(
        s,
        "- The suite's {} plugins on disk under 6 MB in the multicall form: **{}**, {} \
         (separate binaries: {}; Debian's Go package: {} in {} files).\n",
        z.plugins,
        if z.multicall < 6_000_000 {
            "PASS"
        } else {
            "FAIL"
        },
        mb(z.multicall),
        mb(z.separate),
        mb(z.debian),
        z.debian_files
    );
    let _ = writeln!(
        s,
        "| Chain | Plugin | ADD separate | ADD multicall | ratio | DEL separate | DEL multicall | ratio | CPU ADD ratio | CPU DEL ratio | peak RSS separate / multicall |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for outcome in &c.chains {
        match outcome {
            ChainOutcome::Measured {
                chain,
                ours,
                reference,
            } => {
                let _ = writeln!(
                    s,
                    "| {} | **whole chain** (runtime) | {} | {} | {} | {} | {} | {} | | | |",
                    chain.key,
                    ms(&ours.chain_add),
                    ms(&reference.chain_add),
                    x(ratio(reference.chain_add.p50(), ours.chain_add.p50())),
                    ms(&ours.chain_del),
                    ms(&reference.chain_del),
                    x(ratio(reference.chain_del.p50(), ours.chain_del.p50())),
                );
                for (o, m) in ours.plugins.iter().zip(&reference.plugins) {
                    let peak = |r: &measure::SideResult| {
                        r.peak_named(&o.name)
                            .map(|k| k.to_string())
                            .unwrap_or_else(|| "–".into())
                    };
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
                        chain.key,
                        o.name,
                        ms(&o.add),
                        ms(&m.add),
                        x(ratio(m.add.p50(), o.add.p50())),
                        ms(&o.del),
                        ms(&m.del),
                        x(ratio(m.del.p50(), o.del.p50())),
                        x(ratio(m.add_cpu.p50(), o.add_cpu.p50())),
                        x(ratio(m.del_cpu.p50(), o.del_cpu.p50())),
                        peak(ours),
                        peak(reference),
                    );
                }
            }
            ChainOutcome::Skipped { chain, reason } => {
                let _ = writeln!(s, "| {} | skipped: {reason} | | | | | | | | | |", chain.key);
            }
        }
    }
    let _ = writeln!(
        s,
        "\n| Plugin | start separate | start multicall | ratio |\n|---|---|---|---|"
    );
    for (p, own, link) in &c.starts {
        let _ = writeln!(
            s,
            "| {p} | {} | {} | {} |",
            ms(own),
            ms(link),
            x(ratio(link.p50(), own.p50()))
        );
    }
    let _ = writeln!(
        s,
        "\nNot measured: the cold-cache start after `echo 3 > /proc/sys/vm/drop_caches`. \
         Dropping the page cache is machine-wide on this shared machine, and the full-kernel \
         VM reads its root over 9p from the host, so neither gives a cold start of a node's \
         disk. Upstream's release tarball is not measured here either (no download); \
         issue 26 quotes about 72 MB for its plugins.\n"
    );
    s
}
