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
    let plugins = side.plugin_types().len();
    let mut cost = LogCost {
        chain: chain.title.to_string(),
        off_add: Samples::default(),
        off_del: Samples::default(),
        on_add: Samples::default(),
        on_del: Samples::default(),
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
            let timed = side.runtime_add_del(&rt);
            std::env::remove_var(libcni::calllog::CONFIG_ENV);
            let (add, del) = timed?;
            if logged {
                cost.on_add.push(add);
                cost.on_del.push(del);
                cost.calls += 2 * plugins;
            } else {
                cost.off_add.push(add);
                cost.off_del.push(del);
            }
        }
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
        "| Verb | off p50 | on p50 | on − off | within {BOUND_MS} ms |\n|---|---|---|---|---|"
    );
    for (verb, off, on) in [
        ("ADD", &c.off_add, &c.on_add),
        ("DEL", &c.off_del, &c.on_del),
    ] {
        let (o, n) = (off.p50(), on.p50());
        let diff = o.zip(n).map(|(o, n)| n - o);
        let _ = writeln!(
            s,
            "| {verb} | {} | {} | {} | {} |",
            o.map(|v| format!("{v:.2}")).unwrap_or_else(|| "–".into()),
            n.map(|v| format!("{v:.2}")).unwrap_or_else(|| "–".into()),
            diff.map(|d| format!("{d:+.3}"))
                .unwrap_or_else(|| "–".into()),
            match diff {
                Some(d) if d <= BOUND_MS => "**PASS**",
                Some(_) => "**FAIL**",
                None => "not measured",
            }
        );
    }
    let _ = writeln!(s);
    s
}
