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

/// Iterations per side, as a multiple of the main table's: the difference
/// is small against DEL's spread, and the median's interval narrows as
/// the square root of the count (2,400 by default: about 6 minutes; at
/// 1,200 DEL's CPU interval was about ±0.035 ms wide, a sixth of the bound).
pub const ITERATIONS_FACTOR: usize = 80;

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
        "| Verb | off p50 | on p50 | on − off, paired: median [95 % interval] | CPU on − off, paired: median [95 % interval] | within {BOUND_MS} ms |\n|---|---|---|---|---|---|"
    );
    let p50 = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.2}"));
    let diff = |d: &Samples| match (d.p50(), d.median_interval()) {
        (Some(m), Some((lo, hi))) => format!("{m:+.3} [{lo:+.3}, {hi:+.3}]"),
        (Some(m), None) => format!("{m:+.3}"),
        _ => "–".into(),
    };
    for (verb, off, on, paired, cpu) in [
        ("ADD", &c.off_add, &c.on_add, &c.paired_add, &c.cpu_add),
        ("DEL", &c.off_del, &c.on_del, &c.paired_del, &c.cpu_del),
    ] {
        let _ = writeln!(
            s,
            "| {verb} | {} | {} | {} | {} | {} |",
            p50(off.p50()),
            p50(on.p50()),
            diff(paired),
            diff(cpu),
            verdict(paired.median_interval(), cpu.median_interval())
        );
    }
    let _ = writeln!(
        s,
        "\nThe two sides of an iteration run back to back, so the paired difference (on minus \
         off within an iteration) leaves out the drift the two p50s carry; the interval is the \
         median's, from order statistics. The CPU time is the plugin processes' (user + \
         system, from the runtime's waited-for children): the log's own work (reading its \
         config, building and appending a line) is all CPU and file system calls, while \
         DEL's wall time is mostly the kernel's waits (a veth's deletion), whose spread is \
         larger than the bound. The verdict: PASS when the CPU difference is within the \
         bound at the top of its interval and the wall difference is not shown to exceed it \
         (the bottom of its interval within the bound)."
    );
    let _ = writeln!(s);
    s
}

/// PASS when the log's CPU cost is within the bound with 95 % confidence
/// and its wall cost is not shown to be over it.
fn verdict(wall: Option<(f64, f64)>, cpu: Option<(f64, f64)>) -> &'static str {
    match (wall, cpu) {
        (Some((wall_lo, _)), Some((_, cpu_hi))) if cpu_hi <= BOUND_MS && wall_lo <= BOUND_MS => {
            "**PASS**"
        }
        (Some(_), Some(_)) => "**FAIL**",
        _ => "not measured",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_needs_the_cpu_interval_within_the_bound() {
        assert_eq!(verdict(Some((-0.5, 0.6)), Some((0.10, 0.18))), "**PASS**");
        // The median within, the interval not: not shown.
        assert_eq!(verdict(Some((-0.5, 0.6)), Some((0.15, 0.25))), "**FAIL**");
        // The wall difference shown over the bound.
        assert_eq!(verdict(Some((0.25, 0.4)), Some((0.10, 0.18))), "**FAIL**");
        assert_eq!(verdict(None, Some((0.1, 0.1))), "not measured");
    }
}
