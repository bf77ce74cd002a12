//! The main table: every chain, ours and the reference alternating in each
//! iteration (the side that goes first alternates too), each side doing
//! ADD then DEL through the runtime, then ADD then DEL plugin by plugin;
//! then a few traced runs per side for peak RSS.

use crate::chains::{self, Chain, Side};
use crate::interrupt;
use crate::namespaces::Namespaces;
use crate::process::ProcessPeak;
use crate::runner::{runtime_conf, Mode, SideSetup};
use crate::stats::Samples;
use std::path::{Path, PathBuf};

/// Times of one plugin of a chain, from the plugin-by-plugin runs.
#[derive(Debug, Clone, Default)]
pub struct PluginTimes {
    pub name: String,
    pub add: Samples,
    pub del: Samples,
    pub add_cpu: Samples,
    pub del_cpu: Samples,
}

/// Everything measured for one side of one chain.
#[derive(Debug, Clone, Default)]
pub struct SideResult {
    /// The whole chain through the runtime.
    pub chain_add: Samples,
    pub chain_del: Samples,
    /// Per plugin, in chain order.
    pub plugins: Vec<PluginTimes>,
    /// Peak RSS of every process of the traced runs.
    pub peaks: Vec<ProcessPeak>,
    pub errors: Vec<String>,
}

impl SideResult {
    fn new(types: &[String]) -> SideResult {
        SideResult {
            plugins: types
                .iter()
                .map(|t| PluginTimes {
                    name: t.clone(),
                    ..PluginTimes::default()
                })
                .collect(),
            ..SideResult::default()
        }
    }

    /// After this many failures without a single success a side is given up.
    fn hopeless(&self) -> bool {
        self.errors.len() >= 3 && self.chain_add.is_empty()
    }

    /// The peak RSS, in KiB, of the processes started by the name `name`
    /// (a plugin's, whichever form: a link's name is the process's name).
    pub fn peak_named(&self, name: &str) -> Option<u64> {
        let name = &name[..name.len().min(15)];
        self.peaks
            .iter()
            .filter(|p| p.name == name)
            .map(|p| p.hwm_kib)
            .max()
    }

    /// The peak RSS, in KiB, of the processes that ran `program`.
    pub fn peak_of(&self, program: &Path) -> Option<u64> {
        self.peaks
            .iter()
            .filter(|p| p.exe == program)
            .map(|p| p.hwm_kib)
            .max()
    }
}

/// A chain's measurements, or why it was not measured.
#[derive(Debug, Clone)]
pub enum ChainOutcome {
    Measured {
        chain: Chain,
        ours: Box<SideResult>,
        reference: Box<SideResult>,
    },
    Skipped {
        chain: Chain,
        reason: String,
    },
}

impl ChainOutcome {
    pub fn chain(&self) -> &Chain {
        match self {
            ChainOutcome::Measured { chain, .. } | ChainOutcome::Skipped { chain, .. } => chain,
        }
    }
}

/// What the measurement needs from the run.
#[derive(Debug, Clone, Copy)]
pub struct Setting<'a> {
    pub ours_dir: &'a Path,
    pub reference_dir: &'a Path,
    /// Where the conflists are written (`<conf>/<side>/<key>.conflist`).
    pub conf_dir: &'a Path,
    /// The runtime's result cache.
    pub cache_dir: &'a Path,
    pub iterations: usize,
    pub rss_runs: usize,
}

/// The binaries of `list` missing from `dir`.
pub fn missing(dir: &Path, list: &serde_json::Value) -> Vec<String> {
    chains::binaries(list)
        .into_iter()
        .filter(|b| !dir.join(b).is_file())
        .collect()
}

/// Writes the chain's conflist for `side` and loads it.
pub fn setup(set: &Setting, chain: &Chain, side: Side, key: &str) -> Result<SideSetup, String> {
    let (dir, list) = match side {
        Side::Ours => (set.ours_dir, &chain.ours),
        Side::Reference => (set.reference_dir, &chain.reference),
    };
    let conf_dir: PathBuf = set.conf_dir.join(side.label());
    std::fs::create_dir_all(&conf_dir).map_err(|e| format!("{}: {e}", conf_dir.display()))?;
    let path = conf_dir.join(format!("{key}.conflist"));
    let text = serde_json::to_string_pretty(list).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    SideSetup::load(side, dir, &path, set.cache_dir)
}

/// Measures one chain on pod `pod` (see the module comment).
pub fn chain(
    set: &Setting,
    ns: &Namespaces,
    pod: &str,
    chain: &Chain,
) -> Result<ChainOutcome, String> {
    let ours_missing = missing(set.ours_dir, &chain.ours);
    if !ours_missing.is_empty() {
        return Ok(ChainOutcome::Skipped {
            chain: chain.clone(),
            reason: format!(
                "not built yet: {} missing from {}",
                ours_missing.join(", "),
                set.ours_dir.display()
            ),
        });
    }
    let ref_missing = missing(set.reference_dir, &chain.reference);
    if !ref_missing.is_empty() {
        return Ok(ChainOutcome::Skipped {
            chain: chain.clone(),
            reason: format!(
                "reference binaries missing from {}: {}",
                set.reference_dir.display(),
                ref_missing.join(", ")
            ),
        });
    }
    let sides = [
        setup(set, chain, Side::Ours, chain.key)?,
        setup(set, chain, Side::Reference, chain.key)?,
    ];
    let mut results = [
        SideResult::new(&sides[0].plugin_types()),
        SideResult::new(&sides[1].plugin_types()),
    ];
    let rt = |pass: &str, side: Side, i: usize| {
        runtime_conf(
            format!("{pass}-{}-{}-{i}", side.tag(), chain.key),
            pod,
            chain.ifname,
            &chain.capability_args,
        )
    };
    let fail = |result: &mut SideResult, e: String| {
        eprintln!("  {}: {e}", chain.key);
        result.errors.push(e);
        // Whatever the failed step left in the pod must not fail the next.
        if let Err(e) = ns.recreate_pod(pod) {
            eprintln!("  recreating {pod}: {e}");
        }
    };

    // One untimed round per side: creates the bridge, warms the page cache.
    for (s, result) in sides.iter().zip(results.iter_mut()) {
        interrupt::check()?;
        if let Err(e) = s.runtime_add_del(&rt("warm", s.side, 0)) {
            fail(result, format!("warm-up: {e}"));
        }
    }
    for i in 0..set.iterations {
        let order: [usize; 2] = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        if ns.ensure_pod(pod).map_err(|e| e.to_string())? {
            let why = format!(
                "iteration {i}: the pod namespace had been deleted by something else; re-created"
            );
            eprintln!("  {}: {why}", chain.key);
            results[0].errors.push(why.clone());
            results[1].errors.push(why);
        }
        for &k in &order {
            interrupt::check()?;
            if results[k].hopeless() {
                continue;
            }
            match sides[k].runtime_add_del(&rt("rt", sides[k].side, i)) {
                Ok((add, del)) => {
                    results[k].chain_add.push(add);
                    results[k].chain_del.push(del);
                }
                Err(e) => fail(&mut results[k], e),
            }
        }
        for &k in &order {
            interrupt::check()?;
            if results[k].hopeless() {
                continue;
            }
            match sides[k].direct_add_del(&rt("pp", sides[k].side, i), Mode::Timed) {
                Ok(run) => {
                    for (p, exit) in results[k].plugins.iter_mut().zip(&run.add) {
                        p.add.push(exit.wall_ms);
                        p.add_cpu.push(exit.cpu_ms);
                    }
                    for (p, exit) in results[k].plugins.iter_mut().zip(&run.del) {
                        p.del.push(exit.wall_ms);
                        p.del_cpu.push(exit.cpu_ms);
                    }
                }
                Err(e) => fail(&mut results[k], format!("plugin by plugin: {e}")),
            }
        }
    }
    for r in 0..set.rss_runs {
        for (s, result) in sides.iter().zip(results.iter_mut()) {
            interrupt::check()?;
            if result.hopeless() {
                continue;
            }
            match s.direct_add_del(&rt("rss", s.side, r), Mode::Traced) {
                Ok(run) => result.peaks.extend(run.peaks),
                Err(e) => fail(result, format!("traced: {e}")),
            }
        }
    }
    let [ours, reference] = results;
    Ok(ChainOutcome::Measured {
        chain: chain.clone(),
        ours: Box::new(ours),
        reference: Box::new(reference),
    })
}
