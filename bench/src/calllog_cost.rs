//! What the call log costs a call (issue 24): the full chain through the
//! runtime with the log on (a config naming a log in the run's temp dir)
//! and off (no config: the one failed open every call makes on a node
//! without it), alternating within every iteration.

use crate::chains::{Chain, Side};
use crate::interrupt;
use crate::measure::{self, Setting};
use crate::runner::runtime_conf;
use crate::stats::Samples;
use std::fmt::Write as _;
use std::path::Path;

/// The most a call may cost with the log on, at p50 (ms).
pub const BOUND_MS: f64 = 0.2;

/// Iterations per side, as a multiple of the main table's (the difference
/// is small against the chain's spread).
pub const ITERATIONS_FACTOR: usize = 5;

pub struct LogCost {
    pub chain: String,
    pub off_add: Samples,
    pub off_del: Samples,
    pub on_add: Samples,
    pub on_del: Samples,
    /// Per iteration, on minus off (the two ran back to back): wall ms.
    pub paired_add: Samples,
    pub paired_del: Samples,
    /// Per iteration, on minus off: the plugin processes' CPU ms.
    pub cpu_add: Samples,
    pub cpu_del: Samples,
    /// Lines the log got, and the calls that should have written one.
    pub lines: usize,
    pub calls: usize,
}

/// Measures `chain` (ours) with the log off and on, `dir` holding the
/// config and the log.
pub fn measure(set: &Setting, pod: &str, chain: &Chain, dir: &Path) -> Result<LogCost, String> {
    let log = dir.join("calls.log");
    let on = dir.join("cni-rs.conf");
    let off = dir.join("absent.conf");
    std::fs::write(&on, serde_json::json!({"logFile": log}).to_string())
        .map_err(|e| format!("{}: {e}", on.display()))?;
    let side = measure::setup(set, chain, Side::Ours, "calllog")?;
    // Every plugin process of a verb writes a line: the chain's, and the
    // IPAM plugins they run.
    let ipams = side
        .list
        .plugins
        .iter()
        .filter(|p| p.get("ipam").and_then(|i| i.get("type")).is_some())
        .count();
    let plugins = side.plugin_types().len() + ipams;
    let mut cost = LogCost {
        chain: chain.title.to_string(),
        off_add: Samples::default(),
        off_del: Samples::default(),
        on_add: Samples::default(),
        on_del: Samples::default(),
        paired_add: Samples::default(),
        paired_del: Samples::default(),
        cpu_add: Samples::default(),
        cpu_del: Samples::default(),
        lines: 0,
        calls: 0,
    };
    let iterations = set.iterations * ITERATIONS_FACTOR;
    for i in 0..iterations {
        let order = if i % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        // (add ms, del ms, add CPU ms, del CPU ms) of each side.
        let mut runs = [(0.0, 0.0, 0.0, 0.0); 2];
        for logged in order {
            interrupt::check()?;
            // The plugins inherit this process's environment.
            std::env::set_var(libcni::calllog::CONFIG_ENV, if logged { &on } else { &off });
            let rt = runtime_conf(
                format!("log-{}-{i}", u8::from(logged)),
                pod,
                chain.ifname,
                &chain.capability_args,
            );
            let timed = side.runtime_add_del_cpu(&rt);
            std::env::remove_var(libcni::calllog::CONFIG_ENV);
            let [(add, add_cpu), (del, del_cpu)] = timed?;
            runs[usize::from(logged)] = (add, del, add_cpu, del_cpu);
            if logged {
                cost.on_add.push(add);
                cost.on_del.push(del);
                cost.calls += 2 * plugins;
            } else {
                cost.off_add.push(add);
                cost.off_del.push(del);
            }
        }
        let ([off, on], d) = (runs, |a: f64, b: f64| a - b);
        cost.paired_add.push(d(on.0, off.0));
        cost.paired_del.push(d(on.1, off.1));
        cost.cpu_add.push(d(on.2, off.2));
        cost.cpu_del.push(d(on.3, off.3));
    }
    cost.lines = std::fs::read_to_string(&log)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    Ok(cost)
}

/// The RESULTS.md section.
pub fn render(c: &LogCost) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## The call log's cost\n");
    let _ = writeln!(
        s,
        "The {} chain through the runtime, with the node-wide call log on (a config naming \
         a log file: every plugin process appends its line) and off (no config: one failed \
         open per call), alternating within every iteration, {} iterations a side. The log \
         got {} lines for the {} calls with it on{}.\n",
        c.chain,
        c.on_add.len(),
        c.lines,
        c.calls,
        if c.lines == c.calls {
            ""
        } else {
            " (**not one per call**)"
        }
    );
    let _ = writeln!(
        s,
        "| Verb | off p50 | on p50 | on − off (p50s) | on − off, paired (median) | CPU on − off, paired (median) | within {BOUND_MS} ms |\n|---|---|---|---|---|---|---|"
    );
    let f = |v: Option<f64>, p: usize| match v {
        Some(v) if p == 3 => format!("{v:+.3}"),
        Some(v) => format!("{v:.2}"),
        None => "–".into(),
    };
    for (verb, off, on, paired, cpu) in [
        ("ADD", &c.off_add, &c.on_add, &c.paired_add, &c.cpu_add),
        ("DEL", &c.off_del, &c.on_del, &c.paired_del, &c.cpu_del),
    ] {
        let (o, n) = (off.p50(), on.p50());
        let (pw, pc) = (paired.p50(), cpu.p50());
        // Half the interquartile range of the paired differences.
        let noise = paired
            .quantile(0.75)
            .zip(paired.quantile(0.25))
            .map(|(q3, q1)| (q3 - q1) / 2.0);
        let _ = writeln!(
            s,
            "| {verb} | {} | {} | {} | {} | {} | {} |",
            f(o, 2),
            f(n, 2),
            f(o.zip(n).map(|(o, n)| n - o), 3),
            f(pw, 3),
            f(pc, 3),
            verdict(pw, pc, noise)
        );
    }
    let _ = writeln!(
        s,
        "\nThe two sides of an iteration run back to back, so the paired difference (the \
         median over iterations of on minus off) leaves out most of the drift the two p50s \
         carry. The CPU time is the plugin processes' (user + system, from the runtime's \
         waited-for children): the log's own work (reading its config, building and \
         appending a line) is all CPU and file system calls, while DEL's wall time is mostly \
         the kernel's waits (a veth's deletion), whose spread hides a 0.2 ms difference. The \
         verdict: PASS when the paired wall difference is within the bound, or, when it is \
         not, the CPU difference is and the wall difference is within the noise of its \
         iterations (half the interquartile range of the paired differences)."
    );
    let _ = writeln!(s);
    s
}

/// PASS when the paired wall difference is within the bound; else when the
/// CPU difference is, and the wall one within the paired differences'
/// noise (reported as such).
fn verdict(wall: Option<f64>, cpu: Option<f64>, noise: Option<f64>) -> &'static str {
    match (wall, cpu, noise) {
        (Some(w), _, _) if w <= BOUND_MS => "**PASS**",
        (Some(w), Some(c), Some(n)) if c <= BOUND_MS && w <= n => {
            "**PASS (CPU; wall within noise)**"
        }
        (Some(_), _, _) => "**FAIL**",
        (None, _, _) => "not measured",
    }
}
