//! `bench/RESULTS.md`: the targets of issue 8 with PASS/FAIL, the tables,
//! the machine, the method, and where the time of our plugins goes.

use crate::cells::{kib, ms, pair, thousands, x};
use crate::chains::{self, Chain, Side};
use crate::diagnose::{KernelFloor, NftFloor, StartCosts, Syscalls, KERNEL_WORK};
use crate::machine::{Machine, REFERENCE_FIVE};
use crate::measure::{ChainOutcome, PluginTimes, SideResult};
use crate::stats::{ratio, Samples};
use crate::sweep::{Filling, Sweep};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The anchor GitHub makes of the heading `Against <dir>`.
fn anchor(dir: &Path) -> String {
    dir.display()
        .to_string()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The targets of issue 8.
pub const ADD_TARGET: f64 = 0.15;
pub const DEL_TARGET: f64 = 0.05;
pub const GROWTH_TARGET: f64 = 1.5;
pub const RSS_TARGET_KIB: u64 = 4096;

/// A further reference measured in the same run (`--reference` again):
/// the main table against it.
#[derive(Debug, Clone)]
pub struct ExtraReference {
    pub dir: PathBuf,
    /// What its `bridge` says it is.
    pub version: String,
    pub chains: Vec<ChainOutcome>,
    pub sizes: Vec<(String, u64)>,
}

/// Everything the report is made of.
pub struct Report<'a> {
    pub machine: &'a Machine,
    pub command_line: String,
    pub settings: String,
    pub ours_dir: &'a Path,
    pub reference_dir: &'a Path,
    /// The references after the first, each with its own main table.
    pub extra_references: &'a [ExtraReference],
    pub chains: &'a [ChainOutcome],
    pub starts: Option<&'a StartCosts>,
    pub floor: Option<&'a KernelFloor>,
    pub nft_floor: Option<&'a NftFloor>,
    /// STATUS of each plugin of each chain (ours).
    pub status: &'a [crate::status::StatusCost],
    /// Syscall summaries (ours unless said), by where they were taken.
    pub syscalls: &'a [(String, Vec<Syscalls>)],
    pub sweeps: &'a [Sweep],
    pub sweep_errors: &'a [String],
    pub filling: Option<&'a Filling>,
    pub ours_sizes: &'a [(String, u64)],
    pub reference_sizes: &'a [(String, u64)],
    /// The multicall form against the separate binaries, when measured.
    pub multicall: Option<&'a crate::multicall::Comparison>,
    /// Static binaries against dynamic ones, when measured.
    pub static_build: Option<&'a crate::static_build::Comparison>,
    pub floors: Option<&'a crate::floors::Floors>,
    /// The call log on and off, when measured.
    pub calllog: Option<&'a crate::calllog_cost::LogCost>,
    pub cnitool_size: Option<u64>,
    pub plot_file: &'a str,
    pub notes: &'a [String],
    pub elapsed_s: f64,
    /// How busy the rest of the machine was.
    pub load: &'a str,
}

/// The lease sweep's DEL without `prevResult` and STATUS, per level.
fn lease_verbs_table(s: &mut String, sw: &Sweep) {
    if sw.levels.iter().all(|l| l.lease_verbs.is_none()) {
        return;
    }
    let _ = writeln!(
        s,
        "DEL without `prevResult` (the plugin must find the container's leases in the \
         `dataDir`, as after a lost result cache; Go's host-local always does this) and \
         STATUS (ours; Go 1.1.1 has none), called plugin by plugin on the filled node \
         (p50 / p90, ms):\n"
    );
    let _ = writeln!(
        s,
        "| {} present | DEL by walk ours | DEL by walk ref | ratio | STATUS ours |\n|---|---|---|---|---|",
        sw.unit
    );
    for l in &sw.levels {
        let Some(v) = &l.lease_verbs else { continue };
        let ours = v.walk_del(Side::Ours);
        let reference = v.walk_del(Side::Reference);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            thousands(l.present as u64),
            pair(ours),
            pair(reference),
            x(ratio(ours.p50(), reference.p50())),
            pair(&v.ours_status),
        );
    }
    let _ = writeln!(s);
}

fn verdict(pass: Option<bool>) -> &'static str {
    match pass {
        Some(true) => "**PASS**",
        Some(false) => "**FAIL**",
        None => "not measured",
    }
}

/// A process's name in the tables: the plugin name for ours and the
/// reference, else the program with "(helper)".
fn process_label(exe: &Path, ours: &Path, reference: &Path) -> (String, Option<Side>) {
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| exe.display().to_string());
    match exe.parent() {
        Some(d) if d == ours => (name, Some(Side::Ours)),
        Some(d) if d == reference => (name, Some(Side::Reference)),
        _ => (format!("{name} (helper)"), None),
    }
}

/// One row of the peak RSS table.
struct PeakRow {
    label: String,
    side: Option<Side>,
    kib: u64,
    chains: Vec<&'static str>,
}

impl Report<'_> {
    fn measured(&self, key: &str) -> Option<(&Chain, &SideResult, &SideResult)> {
        self.chains.iter().find_map(|c| match c {
            ChainOutcome::Measured {
                chain,
                ours,
                reference,
            } if chain.key == key => Some((chain, &**ours, &**reference)),
            _ => None,
        })
    }

    fn sweep(&self, title: &str) -> Option<&Sweep> {
        self.sweeps.iter().find(|s| s.title == title)
    }

    fn start_of(&self, program: &Path) -> Option<f64> {
        self.starts?.version.get(program)?.p50()
    }

    /// Every traced process: its label, side, peak and the chains it ran in.
    fn all_peaks(&self) -> Vec<PeakRow> {
        // Ours first, then the reference, then helpers; by name within.
        let mut map: BTreeMap<(u8, String), PeakRow> = BTreeMap::new();
        for c in self.chains {
            let ChainOutcome::Measured {
                chain,
                ours,
                reference,
            } = c
            else {
                continue;
            };
            for p in ours.peaks.iter().chain(reference.peaks.iter()) {
                let (label, side) = process_label(&p.exe, self.ours_dir, self.reference_dir);
                let order = match side {
                    Some(Side::Ours) => 0,
                    Some(Side::Reference) => 1,
                    None => 2,
                };
                let row = map.entry((order, label.clone())).or_insert(PeakRow {
                    label,
                    side,
                    kib: 0,
                    chains: Vec::new(),
                });
                row.kib = row.kib.max(p.hwm_kib);
                if !row.chains.contains(&chain.key) {
                    row.chains.push(chain.key);
                }
            }
        }
        map.into_values().collect()
    }

    /// Renders the whole document.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let m = self.machine;
        let _ = writeln!(
            s,
            "# Benchmark: our CNI plugins against the Go reference plugins\n"
        );
        let _ = writeln!(
            s,
            "Written by `cni-bench` (`./scripts/bench.sh`); do not edit by hand. Issue 8.\n"
        );
        let _ = writeln!(s, "| | |\n|---|---|");
        let _ = writeln!(s, "| Date | {} |", m.date);
        let _ = writeln!(s, "| CPUs (`nproc`) | {} |", m.cpus);
        let _ = writeln!(s, "| CPU model | {} |", m.cpu_model);
        let _ = writeln!(s, "| Kernel (`uname -r`) | {} |", m.kernel);
        let _ = writeln!(
            s,
            "| Reference | Debian `containernetworking-plugins` {} in `{}` |",
            m.go_plugins,
            self.reference_dir.display()
        );
        for e in self.extra_references {
            let _ = writeln!(
                s,
                "| Further reference | `{}` ({}): the chain and plugin tables [against it](#against-{}) |",
                e.dir.display(),
                e.version,
                anchor(&e.dir)
            );
        }
        let _ = writeln!(
            s,
            "| Ours | build in `{}` ({}) |",
            self.ours_dir.display(),
            m.rustc
        );
        let _ = writeln!(s, "| Run | `{}`: {} |", self.command_line, self.settings);
        let _ = writeln!(s, "| Duration | {:.0} s |", self.elapsed_s);
        let _ = writeln!(s, "| Machine load | {} |\n", self.load);
        let _ = writeln!(
            s,
            "Times are milliseconds, written `p50 / p90`; a ratio is ours / reference at p50. \
             The machine is shared with other work: the two sides alternate within every \
             iteration, so noise hits both alike; single numbers still move between runs.\n"
        );

        self.targets(&mut s);
        self.chain_table(&mut s);
        self.plugin_tables(&mut s);
        self.extra_tables(&mut s);
        if let Some(m) = self.multicall {
            s.push_str(&crate::multicall::render(m));
        }
        if let Some(f) = self.floors {
            s.push_str(&crate::floors::render(f));
        }
        if let Some(c) = self.static_build {
            s.push_str(&crate::static_build::render(c));
        }
        if let Some(c) = self.calllog {
            s.push_str(&crate::calllog_cost::render(c));
        }
        self.status_table(&mut s);
        self.peak_table(&mut s);
        self.size_table(&mut s);
        self.sweep_tables(&mut s);
        self.time_notes(&mut s);
        self.method(&mut s);
        self.skipped(&mut s);
        self.configs(&mut s);
        s
    }

    fn status_table(&self, s: &mut String) {
        if self.status.is_empty() {
            return;
        }
        let _ = writeln!(s, "## STATUS per plugin\n");
        let _ = writeln!(
            s,
            "containerd 2.x runs CNI STATUS for every plugin of the pod network on each \
             runtime status poll (kubelet's, every 5 s), on every node. Each plugin of each \
             chain, ours, alone with its config at cniVersion 1.1.0 (Debian's Go 1.1.1 has no \
             STATUS): wall time of the whole process, `p50 / p90` ms. A meta plugin's time \
             includes its delegates' (flannel: bridge, then host-local), and the main \
             plugins' their IPAM's.\n"
        );
        let _ = writeln!(s, "| Chain | Plugin | STATUS |\n|---|---|---|");
        for c in self.status {
            let cell = match &c.error {
                Some(e) => format!("failed: {}", e.replace('|', "\\|")),
                None => pair(&c.wall_ms),
            };
            let _ = writeln!(s, "| {} | `{}` | {} |", c.chain, c.plugin, cell);
        }
        let _ = writeln!(s);
    }

    fn targets(&self, s: &mut String) {
        let _ = writeln!(s, "## Targets (issue 8)\n");
        let _ = writeln!(s, "| Target | Measured | Verdict |\n|---|---|---|");
        self.full_chain_targets(s);
        self.growth_targets(s);
        self.footprint_targets(s);
        let _ = writeln!(s);
    }

    /// The full chain's ADD and DEL against the reference's.
    fn full_chain_targets(&self, s: &mut String) {
        let full = self.measured("full");
        let (add, del) = match full {
            Some((_, o, r)) => (
                ratio(o.chain_add.p50(), r.chain_add.p50()),
                ratio(o.chain_del.p50(), r.chain_del.p50()),
            ),
            None => (None, None),
        };
        let ours_error = full.and_then(|(_, o, _)| o.errors.first().cloned());
        let detail = |o: &Samples, r: &Samples, rt: Option<f64>| {
            if o.is_empty() {
                return format!(
                    "ours failed: {}",
                    ours_error.clone().unwrap_or_default().replace('|', "/")
                );
            }
            let precise = rt.map(|v| format!("{v:.3}x")).unwrap_or_else(|| "–".into());
            format!("{precise} ({} ms vs {} ms)", ms(o.p50()), ms(r.p50()))
        };
        match full {
            Some((_, o, r)) => {
                let _ = writeln!(
                    s,
                    "| Full chain ADD ≤ {ADD_TARGET}x the reference | {} | {} |",
                    detail(&o.chain_add, &r.chain_add, add),
                    verdict(add.map(|v| v <= ADD_TARGET))
                );
                let _ = writeln!(
                    s,
                    "| Full chain DEL ≤ {DEL_TARGET}x the reference | {} | {} |",
                    detail(&o.chain_del, &r.chain_del, del),
                    verdict(del.map(|v| v <= DEL_TARGET))
                );
            }
            None => {
                let why = self
                    .chains
                    .iter()
                    .find_map(|c| match c {
                        ChainOutcome::Skipped { chain, reason } if chain.key == "full" => {
                            Some(reason.clone())
                        }
                        _ => None,
                    })
                    .unwrap_or_else(|| "not run".into());
                let _ = writeln!(
                    s,
                    "| Full chain ADD ≤ {ADD_TARGET}x the reference | {why} | not measured |"
                );
                let _ = writeln!(
                    s,
                    "| Full chain DEL ≤ {DEL_TARGET}x the reference | {why} | not measured |"
                );
            }
        }
    }

    /// Each sweep's growth from the empty node to 1,000 (and 10,000 leases).
    fn growth_targets(&self, s: &mut String) {
        // The issue's growth target is at 1,000; 10,000 leases is reported
        // beside it, judged by the same bound but not a target.
        for (title, big, is_target) in [
            (crate::sweep::CHAIN_TITLE, 1000usize, true),
            (crate::sweep::PORTMAP_TITLE, 1000, true),
            (crate::sweep::PORTMAP_ALONE_TITLE, 1000, true),
            (crate::sweep::HOST_LOCAL_TITLE, 1000, true),
            (crate::sweep::HOST_LOCAL_TITLE, 10000, false),
        ] {
            let Some(sw) = self.sweep(title) else {
                continue;
            };
            let zero = sw.levels.iter().find(|l| l.present == 0);
            let at = sw.levels.iter().find(|l| l.present == big);
            for verb in ["ADD", "DEL"] {
                let add = verb == "ADD";
                let what = format!(
                    "Ours: {verb} with {} {} present ≤ {GROWTH_TARGET}x the empty node, {}",
                    thousands(big as u64),
                    sw.unit,
                    sw.title
                );
                match (zero, at) {
                    (Some(z), Some(a)) => {
                        let g = a.growth(z, Side::Ours, add);
                        let judged = verdict(g.map(|v| v <= GROWTH_TARGET));
                        let judged = if is_target {
                            judged.to_string()
                        } else {
                            format!(
                                "{} (reported; the target is at 1,000)",
                                judged.replace('*', "")
                            )
                        };
                        let _ = writeln!(
                            s,
                            "| {what} | {} ({} ms vs {} ms; reference {}; against the empty twin in the same minutes {}) | {judged} |",
                            x(g),
                            ms(a.here(Side::Ours, add).p50()),
                            ms(z.here(Side::Ours, add).p50()),
                            x(a.growth(z, Side::Reference, add)),
                            x(a.growth_vs_twin(Side::Ours, add)),
                        );
                    }
                    _ => {
                        let why = sw
                            .problem
                            .clone()
                            .unwrap_or_else(|| "level not run (see --pods/--leases)".into());
                        let _ = writeln!(s, "| {what} | {why} | not measured |");
                    }
                }
            }
        }
    }

    /// Peak RSS and the binaries' size.
    fn footprint_targets(&self, s: &mut String) {
        let ours_peaks: Vec<_> = self
            .all_peaks()
            .into_iter()
            .filter(|p| p.side == Some(Side::Ours))
            .collect();
        match ours_peaks.iter().max_by_key(|p| p.kib) {
            Some(PeakRow { label, kib, .. }) => {
                let _ = writeln!(
                    s,
                    "| Peak RSS of every plugin process of ours < {} KiB | largest: {label}, {kib} KiB | {} |",
                    RSS_TARGET_KIB,
                    verdict(Some(*kib < RSS_TARGET_KIB))
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "| Peak RSS of every plugin process of ours < {RSS_TARGET_KIB} KiB | no traced run | not measured |"
                );
            }
        }
        let ours_total: u64 = self.ours_sizes.iter().map(|(_, b)| b).sum();
        let ref_total: u64 = self.reference_sizes.iter().map(|(_, b)| b).sum();
        let built: Vec<&str> = self.ours_sizes.iter().map(|(n, _)| n.as_str()).collect();
        let all_built = REFERENCE_FIVE.iter().all(|n| built.contains(n));
        let _ = writeln!(
            s,
            "| All our plugin binaries together smaller than the reference's five | {} bytes ({} binaries{}) vs {} bytes | {}{} |",
            thousands(ours_total),
            self.ours_sizes.len(),
            if all_built { "" } else { ", not all built yet" },
            thousands(ref_total),
            verdict(Some(ours_total < ref_total)),
            if all_built { "" } else { " (so far)" }
        );
    }

    fn chain_table(&self, s: &mut String) {
        let _ = writeln!(s, "## Chains, end to end through the runtime\n");
        self.chain_rows(s, self.chains);
    }

    /// The sections of the further references: their chain and plugin
    /// tables, against the same runs of ours' binaries.
    fn extra_tables(&self, s: &mut String) {
        for e in self.extra_references {
            let _ = writeln!(s, "## Against {}\n", e.dir.display());
            let _ = writeln!(
                s,
                "`{}` says: {}. Measured in the same run, after the main table, \
                 the same way (ours and this reference alternating). The sweep and the targets \
                 use the first reference only.\n",
                e.dir.display(),
                e.version
            );
            let total: u64 = e.sizes.iter().map(|(_, b)| b).sum();
            let _ = writeln!(
                s,
                "Its five binaries ({}): {} bytes.\n",
                e.sizes
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                thousands(total)
            );
            self.chain_rows(s, &e.chains);
            self.plugin_rows(s, &e.chains, &e.dir, "###");
        }
    }

    fn chain_rows(&self, s: &mut String, chains: &[ChainOutcome]) {
        let _ = writeln!(
            s,
            "ADD and DEL of one pod, the chain run by libcni's runtime in-process (result cache included), \
             as containerd or CRI-O would run it.\n"
        );
        let _ = writeln!(
            s,
            "| Chain | ADD ours | ADD reference | ADD ratio | DEL ours | DEL reference | DEL ratio | n |\n|---|---|---|---|---|---|---|---|"
        );
        for c in chains {
            match c {
                ChainOutcome::Measured {
                    chain,
                    ours,
                    reference,
                } => {
                    let _ = writeln!(
                        s,
                        "| {}{} | {} | {} | {} | {} | {} | {} | {} |",
                        chain.title,
                        if chain.note.is_some() { " ¹" } else { "" },
                        pair(&ours.chain_add),
                        pair(&reference.chain_add),
                        x(ratio(ours.chain_add.p50(), reference.chain_add.p50())),
                        pair(&ours.chain_del),
                        pair(&reference.chain_del),
                        x(ratio(ours.chain_del.p50(), reference.chain_del.p50())),
                        ours.chain_add.len().min(reference.chain_add.len())
                    );
                }
                ChainOutcome::Skipped { chain, reason } => {
                    let _ = writeln!(s, "| {} | {reason} | | | | | | |", chain.title);
                }
            }
        }
        for c in chains {
            if let Some(note) = c.chain().note {
                let _ = writeln!(s, "\n¹ {note}");
            }
        }
        let _ = writeln!(s);
    }

    fn plugin_tables(&self, s: &mut String) {
        let _ = writeln!(s, "## Per plugin\n");
        let _ = writeln!(
            s,
            "Each plugin process of the chain run on its own (same stdin as the runtime builds, \
             `prevResult` threaded), timed from spawn to reaped. A plugin's time includes the \
             delegates it runs (bridge runs host-local; flannel runs bridge, which runs host-local). \
             *CPU* is user + system time of the process and its children (p50). *start* is the \
             same binary answering `VERSION` (process start and runtime init, nothing else; p50). \
             *peak RSS* is `VmHWM` of that plugin process (KiB, the largest seen in traced runs).\n"
        );
        self.plugin_rows(s, self.chains, self.reference_dir, "###");
    }

    fn plugin_rows(
        &self,
        s: &mut String,
        chains: &[ChainOutcome],
        reference_dir: &Path,
        level: &str,
    ) {
        for c in chains {
            let ChainOutcome::Measured {
                chain,
                ours,
                reference,
            } = c
            else {
                continue;
            };
            let _ = writeln!(s, "{level} {}\n", chain.title);
            let _ = writeln!(
                s,
                "| Plugin (ours / reference) | ADD ours | ADD ref | ratio | DEL ours | DEL ref | ratio | CPU ADD ours / ref | CPU DEL ours / ref | start ours / ref | peak RSS ours / ref |\n|---|---|---|---|---|---|---|---|---|---|---|"
            );
            for (o, r) in ours.plugins.iter().zip(&reference.plugins) {
                let name = if o.name == r.name {
                    o.name.clone()
                } else {
                    format!("{} / {}", o.name, r.name)
                };
                let op = self.ours_dir.join(&o.name);
                let rp = reference_dir.join(&r.name);
                let _ = writeln!(
                    s,
                    "| {name} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} / {} | {} / {} |",
                    pair(&o.add),
                    pair(&r.add),
                    x(ratio(o.add.p50(), r.add.p50())),
                    pair(&o.del),
                    pair(&r.del),
                    x(ratio(o.del.p50(), r.del.p50())),
                    ms(o.add_cpu.p50()),
                    ms(r.add_cpu.p50()),
                    ms(o.del_cpu.p50()),
                    ms(r.del_cpu.p50()),
                    ms(self.start_of(&op)),
                    ms(self.start_of(&rp)),
                    kib(ours.peak_of(&op)),
                    kib(reference.peak_of(&rp)),
                );
            }
            let _ = writeln!(s);
        }
    }

    fn peak_table(&self, s: &mut String) {
        let _ = writeln!(s, "## Peak RSS of every process\n");
        let _ = writeln!(
            s,
            "Every process the chains started, delegates and helpers included, followed with \
             ptrace: `VmHWM` read when it exits (KiB, the largest over the traced runs).\n"
        );
        let _ = writeln!(
            s,
            "| Process | Side | Peak RSS (KiB) | In chains |\n|---|---|---|---|"
        );
        for row in self.all_peaks() {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                row.label,
                row.side.map(Side::label).unwrap_or("started by a plugin"),
                row.kib,
                row.chains.join(", ")
            );
        }
        let _ = writeln!(s);
    }

    fn size_table(&self, s: &mut String) {
        let _ = writeln!(s, "## Binary sizes (bytes)\n");
        let mut names: Vec<String> = REFERENCE_FIVE.iter().map(|n| n.to_string()).collect();
        for (n, _) in self.ours_sizes {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        let _ = writeln!(s, "| Binary | Ours | Reference |\n|---|---|---|");
        let find = |list: &[(String, u64)], n: &str| {
            list.iter()
                .find(|(m, _)| m == n)
                .map(|(_, b)| thousands(*b))
                .unwrap_or_else(|| "–".into())
        };
        for n in &names {
            let reference = if REFERENCE_FIVE.contains(&n.as_str()) {
                find(self.reference_sizes, n)
            } else {
                "(not compared)".into()
            };
            let _ = writeln!(s, "| {n} | {} | {reference} |", find(self.ours_sizes, n));
        }
        let ours_total: u64 = self.ours_sizes.iter().map(|(_, b)| b).sum();
        let ref_total: u64 = self.reference_sizes.iter().map(|(_, b)| b).sum();
        let _ = writeln!(
            s,
            "| **total** | **{}** | **{}** |\n",
            thousands(ours_total),
            thousands(ref_total)
        );
        let _ = writeln!(
            s,
            "Ours: every plugin binary in `{}` (not `cnitool`{}, nor `cni-bench`). \
             Reference: the five Go binaries bridge, host-local, portmap, bandwidth, loopback.\n",
            self.ours_dir.display(),
            self.cnitool_size
                .map(|b| format!(", {} bytes", thousands(b)))
                .unwrap_or_default()
        );
    }

    fn sweep_tables(&self, s: &mut String) {
        let _ = writeln!(s, "## Scaling sweep\n");
        let _ = writeln!(s, "![latency against pods present]({})\n", self.plot_file);
        let _ = writeln!(
            s,
            "ADD then DEL of one more pod (p50 / p90, ms), with that many pods (or leases) \
             already on the node. *growth* is p50 against the empty node (the level-0 run), \
             what the target is about; in brackets, against an *empty twin* (a second node \
             namespace with the same network and an empty `dataDir`) measured alternately with \
             the filled node in the same minutes: that part is what the node's own state \
             (bridge ports, leases, rules) costs, free of load drift between levels. The twin \
             shares the kernel with the filled node, so machine-wide costs of many namespaces \
             and devices slow it too: *kernel veth* is creating / deleting a veth pair \
             in-process over netlink at that level (p50 ms), the kernel's share whoever runs it. \
             How the node was filled: see Method.\n"
        );
        for sw in self.sweeps {
            let _ = writeln!(s, "### {}\n", sw.title);
            if let Some(p) = &sw.problem {
                let _ = writeln!(s, "Not complete: {p}\n");
            }
            if sw.levels.is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "| {} present | ADD ours | ADD ref | DEL ours | DEL ref | growth ADD ours / ref | growth DEL ours / ref | twin ADD ours / ref | twin DEL ours / ref | kernel veth |\n|---|---|---|---|---|---|---|---|---|---|",
                sw.unit
            );
            let zero = sw.levels.iter().find(|l| l.present == 0);
            for l in &sw.levels {
                let g = |side: Side, add: bool| {
                    format!(
                        "{} ({})",
                        x(zero.and_then(|z| l.growth(z, side, add))),
                        x(l.growth_vs_twin(side, add))
                    )
                };
                let floor = l
                    .floor
                    .as_ref()
                    .map(|f| format!("{} / {}", ms(f.add.p50()), ms(f.del.p50())))
                    .unwrap_or_else(|| "–".into());
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} / {} | {} / {} | {} / {} | {} / {} | {floor} |",
                    thousands(l.present as u64),
                    pair(&l.ours_add),
                    pair(&l.ref_add),
                    pair(&l.ours_del),
                    pair(&l.ref_del),
                    g(Side::Ours, true),
                    g(Side::Reference, true),
                    g(Side::Ours, false),
                    g(Side::Reference, false),
                    ms(l.empty_ours_add.p50()),
                    ms(l.empty_ref_add.p50()),
                    ms(l.empty_ours_del.p50()),
                    ms(l.empty_ref_del.p50()),
                );
            }
            let _ = writeln!(s);
            lease_verbs_table(s, sw);
        }
        for e in self.sweep_errors {
            let _ = writeln!(s, "- Sweep stopped: {e}");
        }
        if let Some(f) = self.filling {
            if !f.steps.is_empty() {
                let _ = writeln!(s, "Filling the node (real ADDs):\n");
                let mut from = 0;
                for (i, (to, ours, reference)) in f.steps.iter().enumerate() {
                    let n = (to - from).max(1) as f64;
                    let settled = match f.settled.get(i) {
                        Some((waited, true)) => {
                            format!("; then {waited:.1} s until the machine was quiet")
                        }
                        Some((waited, false)) => {
                            format!("; the machine was still busy {waited:.0} s later")
                        }
                        None => String::new(),
                    };
                    let _ = writeln!(
                        s,
                        "- pods {from}..{to}: our chain ADDs {ours:.1} s ({:.1} ms each); reference portmap ADDs {reference:.1} s ({:.1} ms each){settled}",
                        ours * 1e3 / n,
                        reference * 1e3 / n
                    );
                    from = *to;
                }
                let _ = writeln!(s);
            }
        }
    }

    fn time_notes(&self, s: &mut String) {
        let _ = writeln!(s, "## Where the time goes\n");
        self.start_costs(s);
        self.kernel_floors(s);
        self.kernel_waits(s);
        self.full_chain_breakdown(s);
        for note in self.miss_notes() {
            let _ = writeln!(s, "- {note}");
        }
        let _ = writeln!(s);
        self.syscall_tables(s);
    }

    /// The floor of starting a process, and each binary's start.
    fn start_costs(&self, s: &mut String) {
        if let Some(st) = self.starts {
            let _ = writeln!(
                s,
                "Floor of starting any process here (`/bin/true`, spawned and reaped like a plugin): \
                 {} ms p50.{} Start of each binary (`VERSION`, p50 ms):\n",
                ms(st.floor.p50()),
                bare_starts(st)
            );
            let _ = writeln!(s, "| Binary | Ours | Reference |\n|---|---|---|");
            let mut names: Vec<String> = Vec::new();
            for p in st.version.keys() {
                if let Some(n) = p.file_name() {
                    let n = n.to_string_lossy().into_owned();
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
            }
            for n in names {
                let _ = writeln!(
                    s,
                    "| {n} | {} | {} |",
                    ms(self.start_of(&self.ours_dir.join(&n))),
                    ms(self.start_of(&self.reference_dir.join(&n)))
                );
            }
            let _ = writeln!(s);
        }
    }

    /// What the kernel itself takes: veth pairs, nftables objects.
    fn kernel_floors(&self, s: &mut String) {
        if let Some(f) = self.floor {
            let _ = writeln!(
                s,
                "Kernel floor of a bridge ADD and DEL, whoever runs it: creating a veth pair with its \
                 peer directly in the pod namespace takes {} ms (p50; p90 {}), deleting it {} ms \
                 (p50; p90 {}), measured in-process over netlink (no process start). The delete \
                 blocks in the netlink `sendto` while the kernel unregisters both devices \
                 (RCU grace periods), so no plugin DEL that removes the veth can be faster.\n",
                ms(f.add.p50()),
                ms(f.add.p90()),
                ms(f.del.p50()),
                ms(f.del.p90())
            );
        }
        if let Some(f) = self.nft_floor {
            let _ = writeln!(
                s,
                "nftables: the `nft` command adding one set element takes {} ms (p50, a whole \
                 process), deleting it {} ms. A process that deleted nftables objects waits when \
                 it releases its netlink socket (`close`, or exit) until the kernel has destroyed \
                 them (a grace period), so every plugin call that deletes nftables state pays \
                 about {} ms more, on ADD as on DEL; one that only adds does not.\n",
                ms(f.add.p50()),
                ms(f.del.p50()),
                ms(f.del.p50().zip(f.add.p50()).map(|(d, a)| d - a))
            );
        }
    }

    /// The syscalls in which our plugins waited 3 ms or more for the kernel.
    fn kernel_waits(&self, s: &mut String) {
        let mut blocking = Vec::new();
        for c in self.chains {
            let title = c.chain().title;
            let Some((_, list)) = self.syscalls.iter().find(|(l, _)| l == title) else {
                continue;
            };
            for sc in list {
                for (name, calls, secs) in &sc.rows {
                    if *secs >= 0.003 && KERNEL_WORK.contains(&name.as_str()) {
                        blocking.push(format!(
                            "{} {} in `{name}` ×{calls}: {:.1} ms ({})",
                            sc.plugin,
                            sc.command,
                            secs * 1e3,
                            c.chain().key
                        ));
                    }
                }
            }
        }
        if !blocking.is_empty() {
            let _ = writeln!(
                s,
                "Where our plugins wait for the kernel on the empty node (wall time under strace \
                 in a syscall that does kernel work, 3 ms or more; netlink requests block in \
                 `sendto` until the kernel is done, `close` of a netlink socket can wait for it too): \
                 {}.\n",
                blocking.join("; ")
            );
        }
    }

    /// The full chain plugin by plugin, when a target is missed.
    fn full_chain_breakdown(&self, s: &mut String) {
        if let Some((chain, o, r)) = self.measured("full") {
            let add = ratio(o.chain_add.p50(), r.chain_add.p50());
            let del = ratio(o.chain_del.p50(), r.chain_del.p50());
            let missed = add.is_some_and(|v| v > ADD_TARGET) || del.is_some_and(|v| v > DEL_TARGET);
            if missed {
                let _ = writeln!(
                    s,
                    "**Full chain targets missed.** Our full chain, plugin by plugin (p50 ms):\n"
                );
                let add_of: fn(&PluginTimes) -> &Samples = |p| &p.add;
                let del_of: fn(&PluginTimes) -> &Samples = |p| &p.del;
                for (verb, chain_t, pick) in
                    [("ADD", &o.chain_add, add_of), ("DEL", &o.chain_del, del_of)]
                {
                    let parts: Vec<String> = o
                        .plugins
                        .iter()
                        .map(|p| format!("{} {}", p.name, ms(pick(p).p50())))
                        .collect();
                    let starts: f64 = chains::binaries(&chain.ours)
                        .iter()
                        .filter_map(|b| self.start_of(&self.ours_dir.join(b)))
                        .sum();
                    let target = if verb == "ADD" {
                        ADD_TARGET
                    } else {
                        DEL_TARGET
                    };
                    let ref_p50 = if verb == "ADD" {
                        r.chain_add.p50()
                    } else {
                        r.chain_del.p50()
                    };
                    let waits: f64 = self
                        .syscalls
                        .iter()
                        .find(|(l, _)| l == chain.title)
                        .map(|(_, list)| {
                            list.iter()
                                .filter(|sc| sc.command == verb)
                                .map(|sc| sc.wall(&["sendto", "sendmsg", "close"]))
                                .sum::<f64>()
                                * 1e3
                        })
                        .unwrap_or(0.0);
                    let _ = writeln!(
                        s,
                        "- {verb}: {} ms through the runtime = {}; the bare starts of those processes \
                         (VERSION, delegates included) add up to {starts:.2} ms; under strace, \
                         {waits:.1} ms went by blocked in netlink `sendto` and `close`, waiting for \
                         the kernel (devices and nftables objects being destroyed: see the floors \
                         above). The target is {} ms ({target}x of the reference's {} ms).",
                        ms(chain_t.p50()),
                        parts.join(" + "),
                        ms(ref_p50.map(|v| v * target)),
                        ms(ref_p50)
                    );
                }
                let _ = writeln!(s);
            }
        }
    }

    /// Syscall counts of each plugin, and the full chain's strace tables.
    fn syscall_tables(&self, s: &mut String) {
        if self.syscalls.is_empty() {
            let _ = writeln!(s, "No syscall summaries (strace not installed).\n");
            return;
        }
        let _ = writeln!(
            s,
            "Syscalls of one ADD and one DEL of each of our plugins in its chain on the empty \
             node, and on the fullest node of each sweep (host-local alone: both sides), from \
             `strace -f -C -T` (delegates included; counts). *netlink* = `sendto` + `sendmsg` \
             (requests; each waits for its answer), *exec* = `execve` (1 = the plugin itself), \
             *clone* = processes and threads started, *sleep* = `nanosleep` + `clock_nanosleep`, \
             *open / dirents* = `openat` / `getdents64`, *nf sockets* = `NETLINK_NETFILTER` \
             sockets opened / closed (of those closes, how many waited 1 ms or more for the \
             kernel to destroy deleted nf_tables objects; one left open is released, and \
             waits, at exit).\n"
        );
        let _ = writeln!(
            s,
            "| Where | Plugin | Verb | syscalls | exec | clone | netlink | sleep | open / dirents | nf sockets | busiest (s of wall time in the syscall) |\n|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for (key, list) in self.syscalls {
            if list.is_empty() {
                let _ = writeln!(s, "| {key} | | | | | | | | | | |");
            }
            for sc in list {
                let top: Vec<String> = sc
                    .rows
                    .iter()
                    .take(3)
                    .map(|(n, c, t)| format!("{n} ×{c} {t:.4}"))
                    .collect();
                let _ = writeln!(
                    s,
                    "| {key} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} ({}) | {} |",
                    sc.plugin,
                    sc.command,
                    sc.total(),
                    sc.calls(&["execve", "execveat"]),
                    sc.calls(&["clone", "clone3", "fork", "vfork"]),
                    sc.calls(&["sendto", "sendmsg"]),
                    sc.calls(&["nanosleep", "clock_nanosleep"]),
                    sc.calls(&["openat", "open"]),
                    sc.calls(&["getdents64", "getdents"]),
                    sc.netfilter.opened,
                    sc.netfilter.closes.len(),
                    sc.netfilter.waiting(),
                    top.join(", ")
                );
            }
        }
        let _ = writeln!(s);
        let full_title = self.measured("full").map(|(c, _, _)| c.title);
        if let Some((_, list)) = self
            .syscalls
            .iter()
            .find(|(k, _)| Some(k.as_str()) == full_title)
        {
            let _ = writeln!(
                s,
                "<details><summary>strace -c tables, full chain</summary>\n"
            );
            for sc in list {
                let _ = writeln!(s, "{} {}:\n\n```\n{}```\n", sc.plugin, sc.command, sc.raw);
            }
            let _ = writeln!(s, "</details>\n");
        }
    }

    /// The syscall summary of our `plugin`'s `verb` taken where the label
    /// starts with `place`.
    fn syscalls_of(&self, place: &str, plugin: &str, verb: &str) -> Option<(&str, &Syscalls)> {
        self.syscalls.iter().find_map(|(label, list)| {
            if !label.starts_with(place) || label.ends_with("(reference)") {
                return None;
            }
            list.iter()
                .find(|sc| sc.plugin == plugin && sc.command == verb)
                .map(|sc| (label.as_str(), sc))
        })
    }

    /// What our `plugin`'s `verb` did where `place` labels the fullest
    /// node's summary, against `empty` (a label; "" for none).
    fn growth_syscalls(
        &self,
        place: &str,
        empty: &str,
        plugin: &str,
        verb: &str,
        present: usize,
    ) -> Option<String> {
        let (_, full) = self.syscalls_of(place, plugin, verb)?;
        let base = if empty.is_empty() {
            None
        } else {
            self.syscalls
                .iter()
                .find(|(l, _)| l == empty)
                .and_then(|(_, list)| {
                    list.iter()
                        .find(|sc| sc.plugin == plugin && sc.command == verb)
                })
        };
        let opens = full.calls(&["openat", "open"]);
        let dirents = full.calls(&["getdents64", "getdents"]);
        let netlink = full.calls(&["sendto", "sendmsg"]);
        let nl_ms = full.wall(&["sendto", "sendmsg"]) * 1e3;
        let mut part = format!(
            "{plugin} {verb} made {} syscalls ({opens} opens, {dirents} directory reads, \
             {netlink} netlink requests waiting {nl_ms:.1} ms)",
            full.total()
        );
        if let Some(b) = base {
            let _ = write!(
                part,
                " against {} ({} opens, {} netlink requests waiting {:.1} ms) on the empty node",
                b.total(),
                b.calls(&["openat", "open"]),
                b.calls(&["sendto", "sendmsg"]),
                b.wall(&["sendto", "sendmsg"]) * 1e3
            );
        }
        if let Some(grew) = base
            .map(|b| requests_that_grew(b, full))
            .filter(|g| !g.is_empty())
        {
            let _ = write!(part, "; the netlink requests that grew most: {grew}");
        }
        if opens as usize >= present / 2 && present >= 100 {
            part.push_str(": it opens about one file per lease present, so it reads the whole lease directory");
        }
        Some(part)
    }

    /// How much longer `plugins`' `verb` waited in netlink requests where
    /// `place` labels the fullest node's summary than on the empty node
    /// (`empty`), in ms; `None` without both summaries.
    fn netlink_growth(
        &self,
        place: &str,
        empty: &str,
        plugins: &[&str],
        verb: &str,
    ) -> Option<f64> {
        let base = &self.syscalls.iter().find(|(l, _)| l == empty)?.1;
        let mut grown = 0.0;
        for plugin in plugins {
            let (_, full) = self.syscalls_of(place, plugin, verb)?;
            let before = base
                .iter()
                .find(|sc| sc.plugin == *plugin && sc.command == verb)?;
            grown +=
                (full.wall(&["sendto", "sendmsg"]) - before.wall(&["sendto", "sendmsg"])) * 1e3;
        }
        Some(grown)
    }

    /// Notes on each missed growth, RSS or size target: what our plugins
    /// did on the fullest node against the empty one.
    fn miss_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for sw in self.sweeps {
            for verb in ["ADD", "DEL"] {
                let Some(Growth {
                    present,
                    ratio: g,
                    vs_twin: twin,
                    grown_ms,
                }) = Growth::of(sw, verb == "ADD")
                else {
                    continue;
                };
                if g <= GROWTH_TARGET {
                    continue;
                }
                let t = sw.title.as_str();
                let (place, empty, plugins): (String, &str, &[&str]) =
                    if t == crate::sweep::HOST_LOCAL_TITLE {
                        (
                            format!("{t}, {present} leases present"),
                            "",
                            &["host-local"],
                        )
                    } else {
                        let plugins: &[&str] = if t == crate::sweep::CHAIN_TITLE {
                            &["bridge"]
                        } else if t == crate::sweep::PORTMAP_ALONE_TITLE {
                            &["portmap"]
                        } else {
                            &["bridge", "portmap"]
                        };
                        (
                            format!("{}, {present} pods present", crate::sweep::PORTMAP_TITLE),
                            "bridge + host-local + portmap",
                            plugins,
                        )
                    };
                let parts: Vec<String> = plugins
                    .iter()
                    .filter_map(|plugin| self.growth_syscalls(&place, empty, plugin, verb, present))
                    .collect();
                let kernel = self
                    .netlink_growth(&place, empty, plugins, verb)
                    .map(|k| {
                        if k < 0.05 {
                            format!(
                                " The kernel's share: none of the {grown_ms:.1} ms it grew is in \
                                 our plugins' netlink requests (their traced time did not grow)."
                            )
                        } else {
                            format!(
                                " The kernel's share: of the {grown_ms:.1} ms it grew, {k:.1} ms is \
                                 the growth of our plugins' netlink requests (the kernel's work \
                                 on the node's state and its locks, traced: the requests are \
                                 named below)."
                            )
                        }
                    })
                    .unwrap_or_default();
                let floor = sw.levels.iter().find(|l| l.present == present).and_then(|l| {
                    let z = sw.levels.iter().find(|l| l.present == 0)?.floor.as_ref()?;
                    let f = l.floor.as_ref()?;
                    Some(format!(
                        " The kernel's own veth create went from {} to {} ms and delete from {} to {} ms \
                         over the same levels (machine-wide costs of the namespaces and devices present).",
                        ms(z.add.p50()),
                        ms(f.add.p50()),
                        ms(z.del.p50()),
                        ms(f.del.p50())
                    ))
                });
                notes.push(format!(
                    "**{} {verb} grows {}** with {} {} present (target {GROWTH_TARGET}x); against \
                     the empty twin in the same minutes it is {}: the difference is load drift \
                     between levels or machine-wide cost.{}{kernel} On that node: {}.",
                    sw.title,
                    x(Some(g)),
                    thousands(present as u64),
                    sw.unit,
                    x(twin),
                    floor.unwrap_or_default(),
                    if parts.is_empty() {
                        "no syscall summary".to_string()
                    } else {
                        parts.join("; ")
                    }
                ));
            }
        }
        for row in self.all_peaks() {
            if row.side == Some(Side::Ours) && row.kib >= RSS_TARGET_KIB {
                notes.push(format!(
                    "**Peak RSS**: our {} reached {} KiB (target < {RSS_TARGET_KIB}).",
                    row.label, row.kib
                ));
            }
        }
        notes
    }

    fn method(&self, s: &mut String) {
        let _ = writeln!(s, "## Method\n");
        let _ = writeln!(
            s,
            "- **Isolation.** `cni-bench` creates a node network namespace `cnit-bench-<pid>-node` and \
             pod namespaces `cnit-bench-<pid>-pod<N>` (`ip -batch`), and moves its own main thread into \
             the node namespace (`setns`) before starting any thread: every plugin it starts inherits \
             the node namespace, with no extra process per call (no `ip netns exec`). Bridges, \
             firewall rules and sysctls live in the node only; no traffic is sent. Conf dirs, the \
             result cache, host-local `dataDir`s, flannel's `dataDir` and `subnet.env` are in a \
             temp dir. A guard deletes all of it on exit, error, panic and SIGINT/SIGTERM.\n\
             - **Configs.** The same conflists for both sides, `cniVersion` 1.0.0 (the Go 1.1.1 \
             plugins stop there); listed at the end. Port mapping via the `portMappings` \
             capability (hostPort 18080 → 80/tcp), bandwidth via the `bandwidth` capability \
             (100 Mbit/s each way). Each chain has its own bridge and /16; ours and the reference \
             share it (and its `dataDir`), one after the other.\n\
             - **Chains, end to end.** libcni's runtime in-process (`CniConfig::add_network_list` / \
             `del_network_list`, as `cnitool` and a container runtime call it, result cache \
             written and read), so the only processes are the plugins; wall time around each call. \
             Per iteration: ours ADD, ours DEL, reference ADD, reference DEL (which side goes \
             first alternates), then the same plugin by plugin. One untimed warm-up round per side.\n\
             - **Per plugin.** Each plugin spawned directly the way a runtime spawns it \
             (`posix_spawn`, stdin/stdout/stderr piped, the six `CNI_*` variables), with the stdin \
             libcni builds (`prevResult` from the previous plugin's output; DEL in reverse with the \
             final ADD result), wall time from spawn to `wait4()`, CPU from `wait4()`'s rusage.\n\
             - **Peak RSS.** Separate runs under `ptrace` (never timed) that follow every process \
             started (`PTRACE_O_TRACEFORK/VFORK/CLONE/EXEC/EXIT`) and read `VmHWM` from \
             `/proc/<pid>/status` at each process's exit. Not `ru_maxrss`: at `execve` Linux folds \
             the parent's high-water mark into the child's (with `fork` and `posix_spawn` alike), \
             so `ru_maxrss` reports the benchmark's own size whenever that is larger.\n\
             - **Scaling sweep.** One node network `bench-scale` (bridge `cbench9`, 10.210.0.0/16, \
             `ipMasq`), filled with real pods: each ADDed by *our* bridge + host-local + portmap \
             chain with one port mapping (its own host port), so the bridge has N ports, the \
             `dataDir` N leases and our nftables chains N masquerade and host port rules for whoever \
             measures. The reference's mappings and masquerade live in iptables, so each filled pod \
             also gets its mapping from the *reference* portmap (a real Go ADD with the pod's result \
             as `prevResult`) and its masquerade chain in the Go bridge's iptables format (one \
             `iptables-restore` per fill step): each side then finds N of its own (and the other's \
             rules beside them). Both sides are then measured alternately on the \
             same node, ADD then DEL of one more pod (hostPort 19999). Filling with our plugins only \
             is fair for bridge + host-local: the kernel and the lease files look the same whoever \
             wrote them. **Growth** is p50 at a level against p50 on the empty node \
             (level 0), as the target says. Levels are minutes apart on a shared machine, so a \
             control runs beside it: an empty twin (`cnit-bench-<pid>-node-empty`, a second node \
             namespace with the same network and its own empty `dataDir`), measured alternately \
             with the filled node in every iteration; growth against the twin is what the node's \
             own state costs, free of drift, but it misses machine-wide costs of the namespaces \
             and devices present (the twin pays them too), which the kernel veth floor measured \
             at each level shows. After each fill the bench waits until the machine is quiet \
             (new pods keep the kernel busy for a moment). host-local alone: each side on a \
             `dataDir` holding the leases its own plugin leaves, consecutive from 10.220.0.2: ours \
             filled by real ADDs of our host-local (each lease with its index link), the \
             reference's written in the Go format (`<ip>` holding `<cid>\\r\\n<ifname>`, \
             `last_reserved_ip.0` at the last one as the Go plugin leaves it), run through the \
             runtime (DEL gets the cached result as `prevResult`), alternating with the same \
             config on an empty `dataDir`.\n\
             - **Where the time goes.** `VERSION` runs of each binary (process start + init only), \
             `/bin/true` as the floor of any process, and `strace -f -C -T` of one ADD and one DEL of \
             each of our plugins.\n"
        );
    }

    fn skipped(&self, s: &mut String) {
        let mut lines = Vec::new();
        for c in self.chains {
            match c {
                ChainOutcome::Skipped { chain, reason } => {
                    lines.push(format!("- {}: skipped, {reason}", chain.title));
                }
                ChainOutcome::Measured {
                    chain,
                    ours,
                    reference,
                } => {
                    for (side, r) in [(Side::Ours, ours), (Side::Reference, reference)] {
                        if let Some(first) = r.errors.first() {
                            lines.push(format!(
                                "- {}: {} failed {} time(s); first: `{}`",
                                chain.title,
                                side.label(),
                                r.errors.len(),
                                first.replace('`', "'").replace('\n', " ")
                            ));
                        }
                    }
                }
            }
        }
        for sw in self.sweeps {
            if let Some(p) = &sw.problem {
                lines.push(format!("- Sweep {}: {p}", sw.title));
            }
        }
        lines.extend(self.notes.iter().map(|n| format!("- {n}")));
        if lines.is_empty() {
            return;
        }
        let _ = writeln!(s, "## Skipped, failed, not measured\n");
        for l in lines {
            let _ = writeln!(s, "{l}");
        }
        let _ = writeln!(s);
    }

    fn configs(&self, s: &mut String) {
        let _ = writeln!(s, "## Configs\n");
        let _ = writeln!(
            s,
            "Paths under the run's temp dir are shown as they were. \
             subnet.env of the flannel chain:\n\n```\n{}```\n",
            chains::SUBNET_ENV
        );
        for c in self.chains {
            let chain = c.chain();
            let pretty =
                |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
            let _ = writeln!(s, "<details><summary>{}</summary>\n", chain.title);
            if chain.ours == chain.reference {
                let _ = writeln!(s, "```json\n{}\n```", pretty(&chain.ours));
            } else {
                let _ = writeln!(
                    s,
                    "Ours:\n\n```json\n{}\n```\n\nReference:\n\n```json\n{}\n```",
                    pretty(&chain.ours),
                    pretty(&chain.reference)
                );
            }
            let _ = writeln!(
                s,
                "\nCapability arguments: `{}`\n\n</details>\n",
                serde_json::Value::Object(chain.capability_args.clone())
            );
        }
    }
}

/// How our side of a sweep grew from the empty node to its fullest level.
struct Growth {
    /// What the fullest level has present (pods, leases).
    present: usize,
    /// p50 there against the empty node.
    ratio: f64,
    /// p50 there against the empty twin in the same minutes.
    vs_twin: Option<f64>,
    /// p50 there minus the empty node's, in ms.
    grown_ms: f64,
}

impl Growth {
    /// `None` when the sweep has no empty level or no fuller one.
    fn of(sw: &Sweep, add: bool) -> Option<Growth> {
        let zero = sw.levels.iter().find(|l| l.present == 0)?;
        let top = sw
            .levels
            .iter()
            .filter(|l| l.present > 0)
            .max_by_key(|l| l.present)?;
        Some(Growth {
            present: top.present,
            ratio: top.growth(zero, Side::Ours, add)?,
            vs_twin: top.growth_vs_twin(Side::Ours, add),
            grown_ms: top.here(Side::Ours, add).p50()? - zero.here(Side::Ours, add).p50()?,
        })
    }
}

/// The bare start floors, as a sentence: what `execve` alone costs here
/// and what static glibc's start adds (on x86 its `init_cpu_features` and
/// cache-size probing run `CPUID` dozens of times, each a VM exit on a
/// virtual machine), which every static glibc plugin pays.
fn bare_starts(st: &StartCosts) -> String {
    if st.bare.is_empty() {
        return String::new();
    }
    let each: Vec<String> = st
        .bare
        .iter()
        .map(|f| format!("{}: {} ms", f.label, ms(f.samples.p50())))
        .collect();
    format!(
        " Under it ({}): the difference is the C library's start, which our static \
         plugins, the no-op floor and the kernel floor pay alike (static glibc probes the \
         CPU with `CPUID` dozens of times, a VM exit each on a virtual machine; a C \
         library without it, musl, would spare it).",
        each.join("; ")
    )
}

/// The netlink request types whose time grew most from `base` (the empty
/// node) to `full` (the fullest), at most three: "RTM_NEWLINK ×2 0.4 → 8.1
/// ms".
fn requests_that_grew(base: &Syscalls, full: &Syscalls) -> String {
    let mut grew: Vec<(f64, String)> = full
        .requests
        .iter()
        .filter_map(|(ty, n, ms)| {
            let before = base.requests.iter().find(|(t, _, _)| t == ty);
            let (bn, bms) = before.map_or((0, 0.0), |(_, n, ms)| (*n, *ms));
            let more = ms - bms;
            let count = if bn == *n {
                format!("×{n}")
            } else {
                format!("×{bn} → ×{n}")
            };
            (more >= 0.5).then(|| (more, format!("{ty} {count} {bms:.1} → {ms:.1} ms")))
        })
        .collect();
    grew.sort_by(|a, b| b.0.total_cmp(&a.0));
    grew.into_iter()
        .take(3)
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes `text` to `path` (via a temp file and a rename).
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    let tmp: PathBuf = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(ms(Some(3.456)), "3.46");
        assert_eq!(ms(Some(31.4159)), "31.4");
        assert_eq!(ms(Some(314.159)), "314");
        assert_eq!(x(Some(0.123)), "0.12x");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(verdict(Some(false)), "**FAIL**");
    }

    #[test]
    fn processes_are_named_by_side() {
        let o = Path::new("/o");
        let r = Path::new("/r");
        assert_eq!(
            process_label(Path::new("/o/bridge"), o, r),
            ("bridge".to_string(), Some(Side::Ours))
        );
        assert_eq!(
            process_label(Path::new("/usr/sbin/xtables-nft-multi"), o, r),
            ("xtables-nft-multi (helper)".to_string(), None)
        );
    }
}
