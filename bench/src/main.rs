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
    let reference_dir = references[0].clone();
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

    // Declared first, dropped last: the namespaces go before their files.
    let scratch = Scratch::create().map_err(|e| format!("temp dir: {e}"))?;
    let mut ns = Namespaces::create().map_err(|e| format!("node namespace: {e}"))?;
    ns.enter_node()
        .map_err(|e| format!("entering {}: {e}", ns.node()))?;
    let io = |e: std::io::Error| e.to_string();
    // A host has its loopback up; a new namespace does not.
    let up = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .map_err(io)?;
    if !up.success() {
        return Err("ip link set lo up failed in the node namespace".into());
    }
    let pod = ns.add_pods(1).map_err(io)?.pop().ok_or("no pod")?;
    let ipam = scratch.dir("ipam").map_err(io)?;
    let flannel = scratch.dir("flannel").map_err(io)?;
    let subnet_env = scratch.root().join("subnet.env");
    std::fs::write(&subnet_env, chains::SUBNET_ENV).map_err(io)?;
    let conf_dir = scratch.dir("conf").map_err(io)?;
    let cache_dir = scratch.dir("cache").map_err(io)?;
    let set = Setting {
        ours_dir: &ours_dir,
        reference_dir: &reference_dir,
        conf_dir: &conf_dir,
        cache_dir: &cache_dir,
        iterations: opts.iterations,
        rss_runs: opts.rss_runs,
    };

    // The dhcp chain's LAN and daemons, when that chain runs.
    let wants = |key: &str| {
        opts.chains
            .as_ref()
            .is_none_or(|only| only.iter().any(|k| k == key))
    };
    let dhcp_dir = scratch.dir("dhcp").map_err(io)?;
    let dhcp_lan = if wants("dhcp") {
        Some(bench::dhcp::DhcpLan::start(
            &mut ns,
            &dhcp_dir,
            &ours_dir,
            &reference_dir,
        ))
    } else {
        None
    };
    let (dhcp_ours, dhcp_reference) = match &dhcp_lan {
        Some(Ok(l)) => (l.ours_socket.clone(), l.reference_socket.clone()),
        _ => (dhcp_dir.join("none.sock"), dhcp_dir.join("none.sock")),
    };

    // The main table.
    let dirs = StateDirs {
        ipam: &ipam,
        flannel: &flannel,
        subnet_env: &subnet_env,
        dhcp_ours: &dhcp_ours,
        dhcp_reference: &dhcp_reference,
    };
    let mut outcomes = Vec::new();
    for chain in chains::all(&dirs) {
        if !wants(chain.key) {
            continue;
        }
        if let (true, Some(Err(e))) = (chain.key == "dhcp", &dhcp_lan) {
            eprintln!("  skipped {}: {e}", chain.key);
            outcomes.push(ChainOutcome::Skipped {
                chain: chain.clone(),
                reason: format!("no LAN for it: {e}"),
            });
            continue;
        }
        eprintln!(
            "[{:>4.0}s] chain {}: {} iterations",
            started.elapsed().as_secs_f64(),
            chain.title,
            opts.iterations
        );
        let outcome = match measure::chain(&set, &ns, &pod, &chain) {
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

    // The further references: the main table again, against each.
    let mut extra: Vec<report::ExtraReference> = Vec::new();
    for dir in references.iter().skip(1) {
        let set = Setting {
            reference_dir: dir,
            ..set
        };
        let mut outcomes = Vec::new();
        for chain in chains::all(&dirs) {
            if let Some(only) = &opts.chains {
                if !only.iter().any(|k| k == chain.key) {
                    continue;
                }
            }
            eprintln!(
                "[{:>4.0}s] chain {} against {}: {} iterations",
                started.elapsed().as_secs_f64(),
                chain.title,
                dir.display(),
                opts.iterations
            );
            let outcome = match measure::chain(&set, &ns, &pod, &chain) {
                Ok(o) => o,
                Err(e) => {
                    interrupt::check()?;
                    ChainOutcome::Skipped {
                        chain: chain.clone(),
                        reason: format!("error: {e}"),
                    }
                }
            };
            outcomes.push(outcome);
        }
        extra.push(report::ExtraReference {
            dir: dir.clone(),
            version: machine::plugin_version(dir),
            chains: outcomes,
            sizes: machine::sizes_of(dir, &machine::REFERENCE_FIVE),
        });
    }

    // STATUS of each plugin of each chain that ran (ours), while the dhcp
    // daemon is still up.
    eprintln!(
        "[{:>4.0}s] STATUS per plugin",
        started.elapsed().as_secs_f64()
    );
    let mut status_costs = Vec::new();
    for o in &outcomes {
        if let ChainOutcome::Measured { chain, .. } = o {
            status_costs.extend(bench::status::chain_costs(
                &ours_dir,
                chain,
                opts.iterations,
            ));
        }
    }

    let mut notes = Vec::new();
    if let Some(Ok(l)) = &dhcp_lan {
        let mib = |k: Option<u64>| {
            k.map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
                .unwrap_or_else(|| "?".into())
        };
        let (o, r) = l.daemon_peaks();
        notes.push(format!(
            "dhcp daemons' peak RSS over the run: ours {}, the reference's {}",
            mib(o),
            mib(r)
        ));
    }

    // Where the time goes.
    eprintln!(
        "[{:>4.0}s] start costs and syscall summaries",
        started.elapsed().as_secs_f64()
    );
    let mut programs: Vec<PathBuf> = Vec::new();
    let with_extra = outcomes.iter().map(|o| (&reference_dir, o)).chain(
        extra
            .iter()
            .flat_map(|e| e.chains.iter().map(move |o| (&e.dir, o))),
    );
    for (ref_dir, o) in with_extra {
        if let ChainOutcome::Measured { chain, .. } = o {
            for (dir, list) in [(&ours_dir, &chain.ours), (ref_dir, &chain.reference)] {
                for b in chains::binaries(list) {
                    let p = dir.join(b);
                    if !programs.contains(&p) {
                        programs.push(p);
                    }
                }
            }
        }
    }
    let starts: Option<StartCosts> =
        match diagnose::start_costs(&programs, opts.iterations.clamp(5, 20)) {
            Ok(s) => Some(s),
            Err(e) => {
                interrupt::check()?;
                notes.push(format!("start costs not measured: {e}"));
                None
            }
        };
    let floor = match diagnose::kernel_floor(&pod, opts.iterations.clamp(5, 20)) {
        Ok(f) => Some(f),
        Err(e) => {
            interrupt::check()?;
            notes.push(format!("kernel floor not measured: {e}"));
            None
        }
    };
    let nft_floor = match diagnose::nft_floor(opts.iterations.clamp(5, 20)) {
        Ok(f) => Some(f),
        Err(e) => {
            interrupt::check()?;
            notes.push(format!("nftables floor not measured: {e}"));
            None
        }
    };
    let mut syscalls: Vec<(String, Vec<Syscalls>)> = Vec::new();
    let strace_dir = if diagnose::have_strace() {
        Some(scratch.dir("strace").map_err(io)?)
    } else {
        None
    };
    if let Some(out_dir) = &strace_dir {
        for o in &outcomes {
            let ChainOutcome::Measured { chain, .. } = o else {
                continue;
            };
            let traced = measure::setup(&set, chain, Side::Ours, chain.key).and_then(|side| {
                diagnose::strace_chain(
                    &side,
                    &pod,
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
                    let _ = ns.recreate_pod(&pod);
                    notes.push(format!("strace of our {} chain failed: {e}", chain.key));
                }
            }
        }
    } else {
        notes.push("strace is not installed: no syscall summaries".into());
    }

    drop(dhcp_lan);

    // The sweeps.
    let mut sweeps: Vec<Sweep> = Vec::new();
    let mut sweep_errors = Vec::new();
    let mut filling: Option<Filling> = None;
    if opts.sweep {
        eprintln!(
            "[{:>4.0}s] sweep: host-local with {:?} leases",
            started.elapsed().as_secs_f64(),
            opts.leases
        );
        let hl_dir = scratch.dir("hl").map_err(io)?;
        let leases = sweep::leases(
            &set,
            &mut ns,
            &hl_dir,
            &opts.leases,
            opts.sweep_iterations,
            strace_dir.as_deref(),
        );
        match leases {
            Ok((s, traced)) => {
                sweeps.push(s);
                syscalls.extend(traced);
            }
            Err(e) => {
                interrupt::check()?;
                sweep_errors.push(format!("host-local: {e}"));
            }
        }
        eprintln!(
            "[{:>4.0}s] sweep: pods {:?}",
            started.elapsed().as_secs_f64(),
            opts.pods
        );
        let scale_ipam = scratch.dir("scale-ipam").map_err(io)?;
        let pods = sweep::pods(
            &set,
            &mut ns,
            &scale_ipam,
            &opts.pods,
            opts.sweep_iterations,
            strace_dir.as_deref(),
        );
        match pods {
            Ok((s, f, traced)) => {
                syscalls.extend(traced);
                // Pods first, as in the plot.
                let hl = std::mem::take(&mut sweeps);
                sweeps = s;
                sweeps.extend(hl);
                filling = Some(f);
            }
            Err(e) => {
                interrupt::check()?;
                sweep_errors.push(format!("pods: {e}"));
            }
        }
    }

    // Sizes.
    let mut skip: Vec<&str> = machine::NOT_PLUGINS.to_vec();
    skip.push("build-script-build");
    let ours_sizes = machine::executables(&ours_dir, &skip);
    let reference_sizes = machine::sizes_of(&reference_dir, &machine::REFERENCE_FIVE);
    let cnitool_size = std::fs::metadata(ours_dir.join("cnitool"))
        .ok()
        .map(|m| m.len());

    let plot_link = relative_link(&opts.results, &opts.plot);
    let command_line = std::iter::once("cni-bench".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let others = machine::CpuSnapshot::take().others_since(&cpu_before);
    let load = format!(
        "other work kept {} of the CPUs busy during the run (load average {} at the start, {} at the end)",
        others
            .map(|o| format!("{:.0}%", o * 100.0))
            .unwrap_or_else(|| "?".into()),
        load_before,
        machine::load_average()
    );
    let rep = Report {
        machine: &machine,
        command_line,
        settings: opts.summary(),
        ours_dir: &ours_dir,
        reference_dir: &reference_dir,
        extra_references: &extra,
        chains: &outcomes,
        starts: starts.as_ref(),
        floor: floor.as_ref(),
        nft_floor: nft_floor.as_ref(),
        status: &status_costs,
        syscalls: &syscalls,
        sweeps: &sweeps,
        sweep_errors: &sweep_errors,
        filling: filling.as_ref(),
        ours_sizes: &ours_sizes,
        reference_sizes: &reference_sizes,
        cnitool_size,
        plot_file: &plot_link,
        notes: &notes,
        elapsed_s: started.elapsed().as_secs_f64(),
        load: &load,
    };
    report::write(&opts.results, &rep.render())?;
    let subtitle = format!(
        "{} · {} CPUs · kernel {} · Go plugins {} · {} iterations per point",
        machine.date, machine.cpus, machine.kernel, machine.go_plugins, opts.sweep_iterations
    );
    report::write(&opts.plot, &bench::plot::svg(&sweeps, &subtitle))?;
    eprintln!(
        "[{:>4.0}s] wrote {} and {}",
        started.elapsed().as_secs_f64(),
        opts.results.display(),
        opts.plot.display()
    );
    drop(ns);
    drop(scratch);
    Ok(())
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
