//! The two floors of a chain (issue 55), measured with the same runtime,
//! namespaces and conflist as ours:
//!
//! - **no-op**: every plugin a static C program that reads its stdin,
//!   prints a valid result and exits: what the client and process starts
//!   cost, whatever the plugins do;
//! - **kernel**: every plugin `cni-bench-floor` (`src/bin/floor.rs`), a
//!   minimal process making only the state changes that plugin must make,
//!   in the same shape as ours (processes, netlink writes, one nf_tables
//!   transaction per plugin and verb).
//!
//! Each chain is measured per call (one pod, ADD then DEL) and in bursts
//! ([`crate::burst`]), the three forms taking turns.

use crate::burst::{self, Bursts, BURST_PODS};
use crate::cells::{fine_ratio as x, p50_cell as ms};
use crate::chains::{self, Chain, Side};
use crate::measure::{self, Setting};
use crate::namespaces::Namespaces;
use crate::runner::SideSetup;
use crate::stats::{ratio, Samples};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The chains measured against their floors: those the kernel floor can
/// stand in for.
pub const CHAINS: [&str; 4] = ["bridge", "portmap", "bandwidth", "full"];

/// Bursts per form and chain, after one untimed burst each.
pub const BURST_ROUNDS: usize = 10;

/// Where `cni-bench-floor` keeps its records (rule handles) between ADD
/// and DEL; removed after the measurement.
pub const FLOOR_STATE: &str = "/run/cni-bench-floor";

/// The no-op plugin.
const NOOP_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(void) {
  char buf[65536];
  while (read(0, buf, sizeof buf) > 0) {}
  const char *cmd = getenv("CNI_COMMAND");
  if (cmd && strcmp(cmd, "ADD") == 0)
    fputs("{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.99.0.2/16\"}]}\n", stdout);
  return 0;
}
"#;

/// The forms, in the order of [`ChainFloors::calls`] and `bursts`.
pub const FORMS: [&str; 3] = ["no-op", "kernel", "ours"];

/// One form's calls of one pod: ADD and DEL through the runtime (ms).
#[derive(Debug, Clone, Default)]
pub struct Calls {
    pub add: Samples,
    pub del: Samples,
    pub errors: Vec<String>,
}

/// One chain against its floors, per form in [`FORMS`] order.
#[derive(Debug, Clone)]
pub struct ChainFloors {
    pub key: &'static str,
    pub title: &'static str,
    pub calls: Vec<Calls>,
    pub bursts: Vec<Bursts>,
}

/// The measured floors.
#[derive(Debug, Clone)]
pub struct Floors {
    pub chains: Vec<ChainFloors>,
    pub iterations: usize,
    /// `/sys/kernel/rcu_expedited` during the run.
    pub rcu_expedited: String,
}

/// The directories of the two floors, each holding one binary per plugin
/// name of `chains`.
struct FloorDirs {
    noop: PathBuf,
    kernel: PathBuf,
}

/// The kernel floor's records ([`FLOOR_STATE`]) for one measurement: none
/// at its start (a killed run's go), none at its end, however it ends.
struct FloorState;

impl FloorState {
    fn fresh() -> FloorState {
        let _ = std::fs::remove_dir_all(FLOOR_STATE);
        FloorState
    }
}

impl Drop for FloorState {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(FLOOR_STATE);
    }
}

/// Measures `chains` (those of [`CHAINS`] that ran) against their floors;
/// `Ok(Err)`: not measured, and why.
pub fn measure(
    set: &Setting,
    ns: &mut Namespaces,
    scratch: &Path,
    chains: &[Chain],
) -> Result<Result<Floors, String>, String> {
    let chains: Vec<&Chain> = chains.iter().filter(|c| CHAINS.contains(&c.key)).collect();
    if chains.is_empty() {
        return Ok(Err("none of the chains it stands in for ran".into()));
    }
    let dirs = match lay_out(scratch, &chains) {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
    };
    let pods = ns.add_pods(BURST_PODS).map_err(|e| e.to_string())?;
    let _state = FloorState::fresh();
    let mut out = Vec::new();
    for chain in chains {
        crate::interrupt::check()?;
        let forms = forms(set, &dirs, chain)?;
        let calls = calls(&forms, &pods[0], chain, set.iterations)?;
        let bursts = burst::measure(&forms, &pods, chain, BURST_ROUNDS)?;
        out.push(ChainFloors {
            key: chain.key,
            title: chain.title,
            calls,
            bursts,
        });
    }
    Ok(Ok(Floors {
        chains: out,
        iterations: set.iterations,
        rcu_expedited: std::fs::read_to_string("/sys/kernel/rcu_expedited")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into()),
    }))
}

/// Builds the no-op program and links both floors under every plugin name
/// the chains use.
fn lay_out(scratch: &Path, chains: &[&Chain]) -> Result<FloorDirs, String> {
    let io = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    let dirs = FloorDirs {
        noop: scratch.join("noop"),
        kernel: scratch.join("kernel"),
    };
    for d in [&dirs.noop, &dirs.kernel] {
        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
    }
    let noop = crate::cprog::build(scratch, "noop-plugin", NOOP_C, &[])?;
    let floor = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("cni-bench-floor");
    if !floor.is_file() {
        return Err(format!("{} is not built", floor.display()));
    }
    for chain in chains {
        for name in chains::binaries(&chain.ours) {
            for (binary, dir) in [(&noop, &dirs.noop), (&floor, &dirs.kernel)] {
                let link = dir.join(&name);
                if !link.exists() {
                    std::fs::copy(binary, &link).map_err(|e| io(&link, e))?;
                }
            }
        }
    }
    Ok(dirs)
}

/// The chain's three forms, in [`FORMS`] order, each with its own conf dir.
fn forms(set: &Setting, dirs: &FloorDirs, chain: &Chain) -> Result<Vec<SideSetup>, String> {
    let mut out = Vec::new();
    for (form, dir) in FORMS
        .iter()
        .zip([Some(&dirs.noop), Some(&dirs.kernel), None])
    {
        let conf_dir = set.conf_dir.join("floors").join(form);
        let form_set = Setting {
            reference_dir: dir.map_or(set.reference_dir, |d| d.as_path()),
            conf_dir: &conf_dir,
            ..*set
        };
        let side = if dir.is_some() {
            Side::Reference
        } else {
            Side::Ours
        };
        out.push(measure::setup(&form_set, chain, side, chain.key)?);
    }
    Ok(out)
}

/// `iterations` ADD + DEL of one pod per form, the forms taking turns.
fn calls(
    forms: &[SideSetup],
    pod: &str,
    chain: &Chain,
    iterations: usize,
) -> Result<Vec<Calls>, String> {
    let mut out = vec![Calls::default(); forms.len()];
    for (i, k) in burst::turns(iterations, forms.len()) {
        crate::interrupt::check()?;
        let pods = [pod.to_string()];
        let rts = burst::attachments(chain, &pods, &format!("floor-{k}-{i}"));
        match forms[k].runtime_add_del(&rts[0]) {
            // The first iteration warms each form.
            Ok(_) if i == 0 => {}
            Ok((add, del)) => {
                out[k].add.push(add);
                out[k].del.push(del);
            }
            Err(e) => out[k].errors.push(e),
        }
    }
    Ok(out)
}

/// `ours / floor` at p50.
fn over(ours: &Samples, floor: &Samples) -> Option<f64> {
    ratio(ours.p50(), floor.p50())
}

/// The RESULTS.md section.
pub fn render(f: &Floors) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## The floors: plugins that do nothing, and the kernel's own work\n"
    );
    let _ = writeln!(
        s,
        "Each chain through the same runtime, namespaces and conflist with every plugin replaced \
         by a floor (issue 55). **no-op**: a static C program that reads its stdin, prints a \
         valid result and exits. **kernel**: `cni-bench-floor` (`bench/src/bin/floor.rs`), a \
         minimal process per plugin making only the state changes that plugin must make, in \
         our plugins' shape: bridge execs host-local, which writes its lease under a lock; the \
         same netlink writes; one nf_tables transaction per plugin and verb, so each deleting \
         process releases one nf_tables socket; DEL's firewall step beside the IPAM and link \
         steps. Its one read is whether its nf_tables chain exists (re-adding a base chain is an update the kernel destroys after a grace period); it decodes no config, checks nothing else and keeps no call log. \
         `/sys/kernel/rcu_expedited` was {} during the run (see docs/operating.md). Bursts: \
         {BURST_PODS} pods at once, {BURST_ROUNDS} bursts per form, ms p50 until the last is \
         done; single calls: {} iterations, ms p50; the forms take turns.\n",
        f.rcu_expedited, f.iterations
    );
    for (what, burst) in [("Bursts of 32 pods", true), ("One pod at a time", false)] {
        let _ = writeln!(
            s,
            "{what}:\n\n| Chain | ADD no-op | ADD kernel | ADD ours | ours / no-op | ours / kernel | DEL no-op | DEL kernel | DEL ours | ours / no-op | ours / kernel |\n|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for c in &f.chains {
            let [noop, kernel, ours] = verbs(c, burst);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.title,
                ms(noop.0),
                ms(kernel.0),
                ms(ours.0),
                x(over(ours.0, noop.0)),
                x(over(ours.0, kernel.0)),
                ms(noop.1),
                ms(kernel.1),
                ms(ours.1),
                x(over(ours.1, noop.1)),
                x(over(ours.1, kernel.1)),
            );
        }
        let _ = writeln!(s);
    }
    if let Some(full) = f.chains.iter().find(|c| c.key == "full") {
        let [noop, kernel, ours] = verbs(full, true);
        let del = over(ours.1, kernel.1);
        let add = over(ours.0, noop.0);
        let verdict = |r: Option<f64>, bound: f64| match r {
            Some(r) if r <= bound => "**PASS**",
            _ => "**FAIL**",
        };
        let _ = writeln!(
            s,
            "| Target (issue 55), full chain, bursts | Measured | Verdict |\n|---|---|---|\n\
             | DEL ≤ 1.2x the kernel floor | {} | {} |\n\
             | ADD ≤ 1.5x the no-op floor | {} | {} |\n",
            x(del),
            verdict(del, 1.2),
            x(add),
            verdict(add, 1.5)
        );
    }
    for c in &f.chains {
        for (k, form) in FORMS.iter().enumerate() {
            let errors: Vec<&String> = c.calls[k]
                .errors
                .iter()
                .chain(&c.bursts[k].errors)
                .collect();
            if let Some(first) = errors.first() {
                let _ = writeln!(
                    s,
                    "{} calls of {form} on {} failed, the first: {first}\n",
                    errors.len(),
                    c.key
                );
            }
        }
    }
    s
}

/// (ADD, DEL) samples of each form, in [`FORMS`] order.
fn verbs(c: &ChainFloors, burst: bool) -> [(&Samples, &Samples); 3] {
    let pick = |k: usize| {
        if burst {
            (&c.bursts[k].add, &c.bursts[k].del)
        } else {
            (&c.calls[k].add, &c.calls[k].del)
        }
    };
    [pick(0), pick(1), pick(2)]
}
