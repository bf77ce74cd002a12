//! `cni-bench`: see `cni-bench --help` and the library's code map.

use bench::chains::{self, Side, StateDirs};
use bench::diagnose::{self, StartCosts, Syscalls};
use bench::interrupt;
use bench::machine::{self, Machine};
use bench::measure::{self, ChainOutcome, Setting};
use bench::namespaces::Namespaces;
use bench::options::{Options, USAGE};
use bench::report::{self, Report};
use bench::scratch::Scratch;
use bench::sweep::{self, Filling, Sweep};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn main() {
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cni-bench: {e}");
            if interrupt::interrupted() {
                130
            } else {
                1
            }
        }
    };
    std::process::exit(code);
}

fn canonical(p: &Path, what: &str) -> Result<PathBuf, String> {
    p.canonicalize()
        .map_err(|e| format!("{what} {}: {e}", p.display()))
}

/// Our binaries' directory (`--ours`, else this program's) and the
/// references', canonical, announced on stderr.
fn binary_dirs(opts: &Options) -> Result<(PathBuf, Vec<PathBuf>), String> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let ours_dir = canonical(opts.ours.as_deref().unwrap_or(&exe_dir), "--ours")?;
    let references: Vec<PathBuf> = opts
        .reference
        .iter()
        .map(|r| canonical(r, "--reference"))
        .collect::<Result<_, _>>()?;
    eprintln!(
        "cni-bench: ours {} against the reference {} ({})",
        ours_dir.display(),
        references
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(" and "),
        opts.summary()
    );
    Ok((ours_dir, references))
}

/// The node namespace, entered by this process, with its loopback up as a
/// host's is, and one pod namespace.
fn node_and_pod() -> Result<(Namespaces, String), String> {
    let mut ns = Namespaces::create().map_err(|e| format!("node namespace: {e}"))?;
    ns.enter_node()
        .map_err(|e| format!("entering {}: {e}", ns.node()))?;
    let up = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .map_err(|e| e.to_string())?;
    if !up.success() {
        return Err("ip link set lo up failed in the node namespace".into());
    }
    let pod = ns
        .add_pods(1)
        .map_err(|e| e.to_string())?
        .pop()
        .ok_or("no pod")?;
    Ok((ns, pod))
}

/// One run's fixed parts, which every phase reads.
struct Run<'a> {
    opts: &'a Options,
    started: Instant,
    set: Setting<'a>,
    pod: &'a str,
    /// The run's temp dir (programs it builds, conf dirs).
    scratch: &'a Path,
}

impl Run<'_> {
    /// One progress line, stamped with the seconds since the start.
    fn progress(&self, what: std::fmt::Arguments) {
        eprintln!("[{:>4.0}s] {what}", self.started.elapsed().as_secs_f64());
    }

    /// Whether `--chains` (absent: all) names the chain `key`; with
    /// `--floors-only`, only the chains the floors stand in for.
    fn wants(&self, key: &str) -> bool {
        let floors = !self.opts.floors_only || bench::floors::CHAINS.contains(&key);
        floors
            && self
                .opts
                .chains
                .as_ref()
                .is_none_or(|only| only.iter().any(|k| k == key))
    }

    /// The iterations of the diagnostics, fewer than the main table's.
    fn diagnostic_iterations(&self) -> usize {
        self.opts.iterations.clamp(5, 20)
    }
}

fn run() -> Result<(), String> {
    let opts = Options::parse(std::env::args().skip(1))?;
    if opts.help {
        print!("{USAGE}");
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "needs root (network namespaces, netlink, ptrace): run it as root, \
                    e.g. through ./scripts/bench.sh"
                .into(),
        );
    }
    interrupt::install();
    let started = Instant::now();
    let cpu_before = machine::CpuSnapshot::take();
    let load_before = machine::load_average();
    let machine = Machine::probe();
    let (ours_dir, references) = binary_dirs(&opts)?;
    let reference_dir = references[0].clone();

    // Declared first, dropped last: the namespaces go before their files.
    let scratch = Scratch::create().map_err(|e| format!("temp dir: {e}"))?;
    let (mut ns, pod) = node_and_pod()?;
    let io = |e: std::io::Error| e.to_string();
    let ipam = scratch.dir("ipam").map_err(io)?;
    let flannel = scratch.dir("flannel").map_err(io)?;
    let subnet_env = scratch.root().join("subnet.env");
    std::fs::write(&subnet_env, chains::SUBNET_ENV).map_err(io)?;
    let conf_dir = scratch.dir("conf").map_err(io)?;
    let cache_dir = scratch.dir("cache").map_err(io)?;
    let run = Run {
        opts: &opts,
        started,
        scratch: scratch.root(),
        set: Setting {
            ours_dir: &ours_dir,
            reference_dir: &reference_dir,
            conf_dir: &conf_dir,
            cache_dir: &cache_dir,
            iterations: opts.iterations,
            rss_runs: opts.rss_runs,
        },
        pod: &pod,
    };

    // The dhcp chain's LAN and daemons, when that chain runs.
    let dhcp_dir = scratch.dir("dhcp").map_err(io)?;
    let dhcp_lan = if run.wants("dhcp") {
        Some(bench::dhcp::DhcpLan::start(
            &mut ns,
            &dhcp_dir,
            &ours_dir,
            &reference_dir,
        ))
    } else {
        None
    };
    let (dhcp_ours, dhcp_reference, no_lan) = lan_sockets(&dhcp_lan, &dhcp_dir);
    let dirs = StateDirs {
        ipam: &ipam,
        flannel: &flannel,
        subnet_env: &subnet_env,
        dhcp_ours: &dhcp_ours,
        dhcp_reference: &dhcp_reference,
    };

    if opts.floors_only {
        return floors_only(&run, &mut ns, &scratch, &dirs);
    }

    // The main table, then again against each further reference.
    let outcomes = main_table(&run, &run.set, &ns, &dirs, no_lan.as_deref())?;
    let extra = further_references(&run, &references[1..], &ns, &dirs, no_lan.as_deref())?;

    // STATUS of each plugin of each chain that ran (ours), while the dhcp
    // daemon is still up.
    let status_costs = status_costs(&run, &outcomes);

    let mut notes: Vec<String> = dhcp_lan
        .iter()
        .flatten()
        .map(bench::dhcp::DhcpLan::peaks_note)
        .collect();
    let chains_run: Vec<chains::Chain> = measured(&outcomes).cloned().collect();

    // The call log on and off, on the full chain.
    let calllog = match chains_run.iter().find(|c| c.key == "full") {
        Some(full) => {
            run.progress(format_args!("the call log on and off"));
            let dir = scratch.dir("calllog").map_err(io)?;
            match bench::calllog_cost::measure(&run.set, &pod, full, &dir) {
                Ok(c) => Some(c),
                Err(e) => {
                    interrupt::check()?;
                    let _ = ns.recreate_pod(&pod);
                    notes.push(format!("the call log's cost is not measured: {e}"));
                    None
                }
            }
        }
        None => None,
    };

    // The multicall form against the separate binaries, on the same chains
    // (the dhcp chain's daemon is still up).
    run.progress(format_args!(
        "the multicall form against the separate binaries"
    ));
    let multicall = match bench::multicall::compare(
        &run.set,
        &scratch.root().join("multicall"),
        &ns,
        &pod,
        &chains_run,
    )? {
        Ok(c) => Some(c),
        Err(e) => {
            notes.push(format!("the multicall form is not measured: {e}"));
            None
        }
    };

    // Static against dynamic, on the full chain.
    let static_build = match (&opts.dynamic, chains_run.iter().find(|c| c.key == "full")) {
        (Some(dir), Some(full)) => {
            run.progress(format_args!("static binaries against dynamic ones"));
            let dir = canonical(dir, "--dynamic")?;
            match bench::static_build::compare(&run.set, &dir, &mut ns, &pod, full)? {
                Ok(c) => Some(c),
                Err(e) => {
                    notes.push(format!("static against dynamic is not measured: {e}"));
                    None
                }
            }
        }
        (Some(_), None) => {
            notes.push("static against dynamic is not measured: the full chain did not run".into());
            None
        }
        (None, _) => None,
    };

    // Each chain against its two floors.
    run.progress(format_args!(
        "the floors: no-op plugins and the kernel's own work"
    ));
    let floors = match bench::floors::measure(
        &run.set,
        &mut ns,
        &scratch.dir("floors").map_err(io)?,
        &chains_run,
    )? {
        Ok(f) => Some(f),
        Err(e) => {
            notes.push(format!("the floors are not measured: {e}"));
            None
        }
    };

    let strace_dir = if diagnose::have_strace() {
        Some(scratch.dir("strace").map_err(io)?)
    } else {
        notes.push("strace is not installed: no syscall summaries".into());
        None
    };
    let mut diagnosis = where_time_goes(
        &run,
        &ns,
        &outcomes,
        &extra,
        strace_dir.as_deref(),
        &mut notes,
    )?;
    drop(dhcp_lan);

    let mut sweeps = if opts.sweep {
        run_sweeps(&run, &mut ns, &scratch, strace_dir.as_deref())?
    } else {
        Sweeps::default()
    };
    diagnosis
        .syscalls
        .extend(std::mem::take(&mut sweeps.syscalls));

    let measured = Measured {
        outcomes,
        extra,
        multicall,
        static_build,
        floors,
        calllog,
        status_costs,
        diagnosis,
        sweeps,
        notes,
    };
    write_results(&run, &machine, &measured, &cpu_before, &load_before)?;
    drop(ns);
    drop(scratch);
    Ok(())
}

/// What the run measured, for the report.
struct Measured {
    outcomes: Vec<ChainOutcome>,
    extra: Vec<report::ExtraReference>,
    multicall: Option<bench::multicall::Comparison>,
    static_build: Option<bench::static_build::Comparison>,
    floors: Option<bench::floors::Floors>,
    calllog: Option<bench::calllog_cost::LogCost>,
    status_costs: Vec<bench::status::StatusCost>,
    diagnosis: Diagnosis,
    sweeps: Sweeps,
    notes: Vec<String>,
}

/// STATUS of each plugin of each chain that ran (ours).
fn status_costs(run: &Run, outcomes: &[ChainOutcome]) -> Vec<bench::status::StatusCost> {
    run.progress(format_args!("STATUS per plugin"));
    measured(outcomes)
        .flat_map(|chain| bench::status::chain_costs(run.set.ours_dir, chain, run.opts.iterations))
        .collect()
}

/// The results file (with the sizes of the binaries and how busy the
/// machine was) and the plot.
fn write_results(
    run: &Run,
    machine: &Machine,
    m: &Measured,
    cpu_before: &machine::CpuSnapshot,
    load_before: &str,
) -> Result<(), String> {
    // Sizes.
    let mut skip: Vec<&str> = machine::NOT_PLUGINS.to_vec();
    skip.push("build-script-build");
    let ours_sizes = machine::executables(run.set.ours_dir, &skip);
    let reference_sizes = machine::sizes_of(run.set.reference_dir, &machine::REFERENCE_FIVE);
    let cnitool_size = std::fs::metadata(run.set.ours_dir.join("cnitool"))
        .ok()
        .map(|m| m.len());

    let plot_link = relative_link(&run.opts.results, &run.opts.plot);
    let command_line = std::iter::once("cni-bench".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let others = machine::CpuSnapshot::take().others_since(cpu_before);
    let load = format!(
        "other work kept {} of the CPUs busy during the run (load average {} at the start, {} at the end)",
        others
            .map(|o| format!("{:.0}%", o * 100.0))
            .unwrap_or_else(|| "?".into()),
        load_before,
        machine::load_average()
    );
    let rep = Report {
        machine,
        command_line,
        settings: run.opts.summary(),
        ours_dir: run.set.ours_dir,
        reference_dir: run.set.reference_dir,
        extra_references: &m.extra,
        chains: &m.outcomes,
        multicall: m.multicall.as_ref(),
        static_build: m.static_build.as_ref(),
        floors: m.floors.as_ref(),
        calllog: m.calllog.as_ref(),
        starts: m.diagnosis.starts.as_ref(),
        floor: m.diagnosis.floor.as_ref(),
        nft_floor: m.diagnosis.nft_floor.as_ref(),
        status: &m.status_costs,
        syscalls: &m.diagnosis.syscalls,
        sweeps: &m.sweeps.sweeps,
        sweep_errors: &m.sweeps.errors,
        filling: m.sweeps.filling.as_ref(),
        ours_sizes: &ours_sizes,
        reference_sizes: &reference_sizes,
        cnitool_size,
        plot_file: &plot_link,
        notes: &m.notes,
        elapsed_s: run.started.elapsed().as_secs_f64(),
        load: &load,
    };
    report::write(&run.opts.results, &rep.render())?;
    let subtitle = format!(
        "{} · {} CPUs · kernel {} · Go plugins {} · {} iterations per point",
        machine.date, machine.cpus, machine.kernel, machine.go_plugins, run.opts.sweep_iterations
    );
    report::write(
        &run.opts.plot,
        &bench::plot::svg(&m.sweeps.sweeps, &subtitle),
    )?;
    run.progress(format_args!(
        "wrote {} and {}",
        run.opts.results.display(),
        run.opts.plot.display()
    ));
    Ok(())
}

/// The main table again against each further reference.
fn further_references(
    run: &Run,
    references: &[PathBuf],
    ns: &Namespaces,
    dirs: &StateDirs,
    no_lan: Option<&str>,
) -> Result<Vec<report::ExtraReference>, String> {
    let mut extra = Vec::new();
    for dir in references {
        let set = Setting {
            reference_dir: dir,
            ..run.set
        };
        extra.push(report::ExtraReference {
            dir: dir.clone(),
            version: machine::plugin_version(dir),
            chains: main_table(run, &set, ns, dirs, no_lan)?,
            sizes: machine::sizes_of(dir, &machine::REFERENCE_FIVE),
        });
    }
    Ok(extra)
}

/// `--floors-only`: the chains `--chains` names against their floors,
/// that section alone written to `--results`.
fn floors_only(
    run: &Run,
    ns: &mut Namespaces,
    scratch: &Scratch,
    dirs: &StateDirs,
) -> Result<(), String> {
    let chains: Vec<chains::Chain> = chains::all(dirs)
        .into_iter()
        .filter(|c| run.wants(c.key))
        .collect();
    run.progress(format_args!(
        "the floors: no-op plugins and the kernel's own work"
    ));
    let dir = scratch.dir("floors").map_err(|e| e.to_string())?;
    let floors = bench::floors::measure(&run.set, ns, &dir, &chains)?
        .map_err(|e| format!("the floors are not measured: {e}"))?;
    report::write(&run.opts.results, &bench::floors::render(&floors))?;
    run.progress(format_args!("wrote {}", run.opts.results.display()));
    Ok(())
}

/// The sockets of the two dhcp daemons (dummies without a LAN) and why
/// there is no LAN, if there is none.
fn lan_sockets(
    lan: &Option<std::io::Result<bench::dhcp::DhcpLan>>,
    dhcp_dir: &Path,
) -> (PathBuf, PathBuf, Option<String>) {
    match lan {
        Some(Ok(l)) => (l.ours_socket.clone(), l.reference_socket.clone(), None),
        Some(Err(e)) => (
            dhcp_dir.join("none.sock"),
            dhcp_dir.join("none.sock"),
            Some(e.to_string()),
        ),
        None => (dhcp_dir.join("none.sock"), dhcp_dir.join("none.sock"), None),
    }
}

/// Every chain `--chains` names, measured against `set`'s reference. A
/// chain that fails is reported skipped with its error; without a LAN
/// (`no_lan`), the dhcp chain is skipped.
fn main_table(
    run: &Run,
    set: &Setting,
    ns: &Namespaces,
    dirs: &StateDirs,
    no_lan: Option<&str>,
) -> Result<Vec<ChainOutcome>, String> {
    let mut outcomes = Vec::new();
    for chain in chains::all(dirs) {
        if !run.wants(chain.key) {
            continue;
        }
        if let (true, Some(e)) = (chain.key == "dhcp", no_lan) {
            eprintln!("  skipped {}: {e}", chain.key);
            outcomes.push(ChainOutcome::Skipped {
                chain: chain.clone(),
                reason: format!("no LAN for it: {e}"),
            });
            continue;
        }
        run.progress(format_args!(
            "chain {} against {}: {} iterations",
            chain.title,
            set.reference_dir.display(),
            set.iterations
        ));
        let outcome = match measure::chain(set, ns, run.pod, &chain) {
            Ok(o) => o,
            Err(e) => {
                interrupt::check()?;
                ChainOutcome::Skipped {
                    chain: chain.clone(),
                    reason: format!("error: {e}"),
                }
            }
        };
        if let ChainOutcome::Skipped { reason, .. } = &outcome {
            eprintln!("  skipped: {reason}");
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// Where the time goes: start costs, the kernel's floors, syscalls.
struct Diagnosis {
    starts: Option<StartCosts>,
    floor: Option<diagnose::KernelFloor>,
    nft_floor: Option<diagnose::NftFloor>,
    /// Syscall summaries by where they were taken.
    syscalls: Vec<(String, Vec<Syscalls>)>,
}

/// Measures what [`Diagnosis`] holds; what cannot be measured becomes a
/// note instead.
fn where_time_goes(
    run: &Run,
    ns: &Namespaces,
    outcomes: &[ChainOutcome],
    extra: &[report::ExtraReference],
    strace_dir: Option<&Path>,
    notes: &mut Vec<String>,
) -> Result<Diagnosis, String> {
    run.progress(format_args!("start costs and syscall summaries"));
    let programs = programs_measured(run, outcomes, extra);
    let iterations = run.diagnostic_iterations();
    let bare = diagnose::StartFloor::build(&run.scratch.join("start"), notes);
    let starts = or_note(
        diagnose::start_costs(&programs, bare, iterations),
        "start costs",
        notes,
    )?;
    let floor = or_note(
        diagnose::kernel_floor(run.pod, iterations),
        "kernel floor",
        notes,
    )?;
    let nft_floor = or_note(diagnose::nft_floor(iterations), "nftables floor", notes)?;
    let mut syscalls = Vec::new();
    if let Some(out_dir) = strace_dir {
        for chain in measured(outcomes) {
            let traced = measure::setup(&run.set, chain, Side::Ours, chain.key).and_then(|side| {
                diagnose::strace_chain(
                    &side,
                    run.pod,
                    chain.ifname,
                    &chain.capability_args,
                    chain.key,
                    out_dir,
                )
            });
            match traced {
                Ok(list) => syscalls.push((chain.title.to_string(), list)),
                Err(e) => {
                    interrupt::check()?;
                    let _ = ns.recreate_pod(run.pod);
                    notes.push(format!("strace of our {} chain failed: {e}", chain.key));
                }
            }
        }
    }
    Ok(Diagnosis {
        starts,
        floor,
        nft_floor,
        syscalls,
    })
}

/// A diagnostic's value, or `None` and a note saying why it is missing (an
/// interruption ends the run instead).
fn or_note<T>(
    measured: Result<T, String>,
    what: &str,
    notes: &mut Vec<String>,
) -> Result<Option<T>, String> {
    match measured {
        Ok(v) => Ok(Some(v)),
        Err(e) => {
            interrupt::check()?;
            notes.push(format!("{what} not measured: {e}"));
            Ok(None)
        }
    }
}

/// The chains of `outcomes` that were measured.
fn measured(outcomes: &[ChainOutcome]) -> impl Iterator<Item = &chains::Chain> {
    outcomes.iter().filter_map(|o| match o {
        ChainOutcome::Measured { chain, .. } => Some(chain),
        _ => None,
    })
}

/// Every plugin binary of every measured chain, ours and each reference's,
/// once.
fn programs_measured(
    run: &Run,
    outcomes: &[ChainOutcome],
    extra: &[report::ExtraReference],
) -> Vec<PathBuf> {
    let with_extra = measured(outcomes)
        .map(|c| (run.set.reference_dir, c))
        .chain(
            extra
                .iter()
                .flat_map(|e| measured(&e.chains).map(move |c| (e.dir.as_path(), c))),
        );
    let mut programs: Vec<PathBuf> = Vec::new();
    for (ref_dir, chain) in with_extra {
        for (dir, list) in [(run.set.ours_dir, &chain.ours), (ref_dir, &chain.reference)] {
            for b in chains::binaries(list) {
                let p = dir.join(b);
                if !programs.contains(&p) {
                    programs.push(p);
                }
            }
        }
    }
    programs
}

/// The sweeps' results, pods first as in the plot.
#[derive(Default)]
struct Sweeps {
    sweeps: Vec<Sweep>,
    errors: Vec<String>,
    filling: Option<Filling>,
    syscalls: Vec<(String, Vec<Syscalls>)>,
}

/// The host-local leases sweep and the pods sweep.
fn run_sweeps(
    run: &Run,
    ns: &mut Namespaces,
    scratch: &Scratch,
    strace_dir: Option<&Path>,
) -> Result<Sweeps, String> {
    let io = |e: std::io::Error| e.to_string();
    let opts = run.opts;
    let mut out = Sweeps::default();
    run.progress(format_args!(
        "sweep: host-local with {:?} leases",
        opts.leases
    ));
    let hl_dir = scratch.dir("hl").map_err(io)?;
    let hl = match sweep::leases(
        &run.set,
        ns,
        &hl_dir,
        &opts.leases,
        opts.sweep_iterations,
        strace_dir,
    ) {
        Ok((s, traced)) => {
            out.syscalls.extend(traced);
            Some(s)
        }
        Err(e) => {
            interrupt::check()?;
            out.errors.push(format!("host-local: {e}"));
            None
        }
    };
    run.progress(format_args!("sweep: pods {:?}", opts.pods));
    let scale_ipam = scratch.dir("scale-ipam").map_err(io)?;
    match sweep::pods(
        &run.set,
        ns,
        &scale_ipam,
        &opts.pods,
        opts.sweep_iterations,
        strace_dir,
    ) {
        Ok((s, f, traced)) => {
            out.syscalls.extend(traced);
            out.sweeps = s;
            out.filling = Some(f);
        }
        Err(e) => {
            interrupt::check()?;
            out.errors.push(format!("pods: {e}"));
        }
    }
    out.sweeps.extend(hl);
    Ok(out)
}

/// The plot's path as the results file should link it: its file name when
/// both are in one directory.
fn relative_link(results: &Path, plot: &Path) -> String {
    let same_dir = results.parent().map(Path::to_path_buf).unwrap_or_default()
        == plot.parent().map(Path::to_path_buf).unwrap_or_default();
    match plot.file_name() {
        Some(name) if same_dir => name.to_string_lossy().into_owned(),
        _ => plot.display().to_string(),
    }
}
