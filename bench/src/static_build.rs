//! Static binaries against dynamic ones (issue 35): the same plugins built
//! static (the release's form, glibc's crt-static) and dynamic (a build with
//! `RUSTFLAGS=""`, the form before it), measured side by side in one run:
//! the start (`VERSION`, spawn to reaped) of every plugin, the full chain's
//! ADD and DEL through the runtime, and bursts ([`crate::burst`]); and the
//! sizes of both forms.

use crate::burst::{self, Bursts, BURST_PODS};
use crate::cells::{fine_ratio as x, megabytes as mb, p50_cell as ms};
use crate::chains::{Chain, Side};
use crate::measure::{self, ChainOutcome, Setting};
use crate::namespaces::Namespaces;
use crate::stats::{ratio, Samples};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Bursts per form (ADD of every pod, then DEL of every pod), after one
/// untimed burst each.
pub const BURST_ROUNDS: usize = 10;

/// VERSION calls per plugin and form.
pub const START_RUNS: usize = 100;

/// The full chain's iterations per form, as a multiple of the main
/// table's (a DEL's wall time is mostly the kernel's waits: see
/// [`crate::multicall::ITERATIONS_FACTOR`]).
pub const ITERATIONS_FACTOR: usize = 10;

/// Bytes on disk of one form.
#[derive(Debug, Clone, Copy, Default)]
pub struct FormSize {
    /// The separate plugin binaries.
    pub plugins: u64,
    /// The multicall binary.
    pub multicall: u64,
}

/// The measured comparison: "ours" is the static form, "reference" the
/// dynamic one, in the chain outcome.
pub struct Comparison {
    pub static_dir: PathBuf,
    pub dynamic_dir: PathBuf,
    /// Per plugin: the start of the static and of the dynamic binary.
    pub starts: Vec<(String, Samples, Samples)>,
    pub chain: ChainOutcome,
    pub iterations: usize,
    /// The bursts, static then dynamic.
    pub bursts: [Bursts; 2],
    pub sizes: [FormSize; 2],
    pub plugin_count: usize,
}

/// Measures the static binaries of `set.ours_dir` against the dynamic ones
/// in `dynamic_dir` on `full` (the full chain); `Ok(Err)`: not measured,
/// and why.
pub fn compare(
    set: &Setting,
    dynamic_dir: &Path,
    ns: &mut Namespaces,
    pod: &str,
    full: &Chain,
) -> Result<Result<Comparison, String>, String> {
    let plugins: Vec<String> =
        crate::machine::executables(set.ours_dir, &crate::machine::NOT_PLUGINS)
            .into_iter()
            .map(|(name, _)| name)
            .filter(|n| n != crate::multicall::BINARY && n != "build-script-build")
            .filter(|n| dynamic_dir.join(n).is_file())
            .collect();
    if plugins.is_empty() {
        return Ok(Err(format!(
            "no plugin of {} is in {}",
            set.ours_dir.display(),
            dynamic_dir.display()
        )));
    }
    let set = Setting {
        reference_dir: dynamic_dir,
        iterations: set.iterations * ITERATIONS_FACTOR,
        ..*set
    };
    let starts = crate::diagnose::start_pairs(&plugins, set.ours_dir, dynamic_dir, START_RUNS)?;
    let same_list = crate::multicall::chains_against_separate(std::slice::from_ref(full));
    let conf_dir = set.conf_dir.join("static-build");
    let chain_set = Setting {
        conf_dir: &conf_dir,
        ..set
    };
    let chain = measure::chain(&chain_set, ns, pod, &same_list[0])?;
    let bursts = bursts(&chain_set, ns, &same_list[0])?;
    let size = |d: &Path| FormSize {
        plugins: plugins
            .iter()
            .map(|p| std::fs::metadata(d.join(p)).map_or(0, |m| m.len()))
            .sum(),
        multicall: std::fs::metadata(d.join(crate::multicall::BINARY)).map_or(0, |m| m.len()),
    };
    Ok(Ok(Comparison {
        static_dir: set.ours_dir.to_path_buf(),
        dynamic_dir: dynamic_dir.to_path_buf(),
        starts,
        chain,
        iterations: set.iterations,
        bursts,
        sizes: [size(set.ours_dir), size(dynamic_dir)],
        plugin_count: plugins.len(),
    }))
}

/// [`BURST_ROUNDS`] bursts per form on [`BURST_PODS`] pods of their own.
fn bursts(set: &Setting, ns: &mut Namespaces, chain: &Chain) -> Result<[Bursts; 2], String> {
    let pods = ns.add_pods(BURST_PODS).map_err(|e| e.to_string())?;
    let forms = [
        measure::setup(set, chain, Side::Ours, "burst")?,
        measure::setup(set, chain, Side::Reference, "burst")?,
    ];
    let mut out = burst::measure(&forms, &pods, chain, BURST_ROUNDS)?.into_iter();
    let mut next = || out.next().unwrap_or_default();
    Ok([next(), next()])
}

/// The RESULTS.md section.
pub fn render(c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Static and dynamic binaries\n");
    let _ = writeln!(
        s,
        "The same plugins built static (`{}`, glibc's crt-static: what the release ships) and \
         dynamic (`{}`, `RUSTFLAGS=\"\"`: the form before issue 35, with GCC's unwinder linked \
         in), alternating as above. A ratio is static / dynamic at p50 (below 1: static is \
         faster).\n",
        c.static_dir.display(),
        c.dynamic_dir.display()
    );
    let start_ratios: Vec<f64> = c
        .starts
        .iter()
        .filter_map(|(_, st, dy)| ratio(st.p50(), dy.p50()))
        .collect();
    let [st, dy] = &c.sizes;
    let _ = writeln!(s, "| | static | dynamic | ratio |\n|---|---|---|---|");
    if !start_ratios.is_empty() {
        let mut sorted = start_ratios.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        let _ = writeln!(
            s,
            "| start (`VERSION`), the median plugin's ratio ({} plugins, {START_RUNS} calls each; range {:.3}x to {:.3}x) | | | {median:.3}x |",
            c.starts.len(),
            sorted[0],
            sorted[sorted.len() - 1]
        );
    }
    if let ChainOutcome::Measured {
        ours, reference, ..
    } = &c.chain
    {
        for (verb, a, b) in [
            ("ADD", &ours.chain_add, &reference.chain_add),
            ("DEL", &ours.chain_del, &reference.chain_del),
        ] {
            let _ = writeln!(
                s,
                "| full chain {verb} through the runtime ({} iterations, ms p50) | {} | {} | {} |",
                c.iterations,
                ms(a),
                ms(b),
                x(ratio(a.p50(), b.p50()))
            );
        }
    }
    let [bs, bd] = &c.bursts;
    for (verb, a, b) in [("ADD", &bs.add, &bd.add), ("DEL", &bs.del, &bd.del)] {
        let _ = writeln!(
            s,
            "| burst of {BURST_PODS} pods, full chain {verb} at once ({BURST_ROUNDS} bursts, ms p50 until the last is done) | {} | {} | {} |",
            ms(a),
            ms(b),
            x(ratio(a.p50(), b.p50()))
        );
    }
    let _ = writeln!(
        s,
        "| the {} plugins on disk, separate | {} | {} | {} |",
        c.plugin_count,
        mb(st.plugins),
        mb(dy.plugins),
        x(ratio(Some(st.plugins as f64), Some(dy.plugins as f64)))
    );
    let _ = writeln!(
        s,
        "| the multicall binary (under 6 MB: **{}**) | {} | {} | {} |",
        if st.multicall > 0 && st.multicall < 6_000_000 {
            "PASS"
        } else {
            "FAIL"
        },
        mb(st.multicall),
        mb(dy.multicall),
        x(ratio(Some(st.multicall as f64), Some(dy.multicall as f64)))
    );
    for (form, b) in [("static", bs), ("dynamic", bd)] {
        if !b.errors.is_empty() {
            let _ = writeln!(
                s,
                "\nBursts of the {form} form that failed: {} ({}).",
                b.errors.len(),
                b.errors
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
    }
    match &c.chain {
        ChainOutcome::Measured {
            ours, reference, ..
        } => {
            let _ = writeln!(
                s,
                "\n| Plugin (full chain) | ADD static | ADD dynamic | ratio | DEL static | DEL dynamic | ratio | CPU ADD ratio | CPU DEL ratio |\n|---|---|---|---|---|---|---|---|---|"
            );
            for (a, b) in ours.plugins.iter().zip(&reference.plugins) {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    a.name,
                    ms(&a.add),
                    ms(&b.add),
                    x(ratio(a.add.p50(), b.add.p50())),
                    ms(&a.del),
                    ms(&b.del),
                    x(ratio(a.del.p50(), b.del.p50())),
                    x(ratio(a.add_cpu.p50(), b.add_cpu.p50())),
                    x(ratio(a.del_cpu.p50(), b.del_cpu.p50())),
                );
            }
        }
        ChainOutcome::Skipped { reason, .. } => {
            let _ = writeln!(s, "\nThe full chain was not measured: {reason}.");
        }
    }
    let _ = writeln!(
        s,
        "\n| Plugin | start static | start dynamic | ratio |\n|---|---|---|---|"
    );
    for (p, st, dy) in &c.starts {
        let _ = writeln!(
            s,
            "| {p} | {} | {} | {} |",
            ms(st),
            ms(dy),
            x(ratio(st.p50(), dy.p50()))
        );
    }
    s.push('\n');
    s
}
