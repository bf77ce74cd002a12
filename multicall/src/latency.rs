//! `cni-rs latency [LOG]`: p50 and p90 of the call log's durations per
//! plugin and command ([`libcni::calllog`]), over the log and the one
//! rotated before it.

use libcni::calllog;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const USAGE: &str = "\
Usage: cni-rs latency [LOG]

Sums up the call log: one row per plugin and command with the number of
calls, of failed ones, and the p50 and p90 of their durations (ms), from LOG
and LOG.1 (the rotated one). LOG defaults to the logFile of the config
(/etc/cni/cni-rs.conf, or the file CNI_RS_CONFIG names).
";

/// One row of the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub plugin: String,
    pub command: String,
    pub calls: usize,
    pub errors: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
}

/// The summary of the lines in `texts` (lines that are not a call's JSON
/// are skipped), sorted by plugin and command.
pub fn summarize(texts: &[String]) -> Vec<Row> {
    let mut groups: BTreeMap<(String, String), (Vec<f64>, usize)> = BTreeMap::new();
    for line in texts.iter().flat_map(|t| t.lines()) {
        let Ok(v) = libcni::gojson::parse_value(line.as_bytes()) else {
            continue;
        };
        let (Some(p), Some(c), Some(d)) = (
            v["plugin"].as_str(),
            v["command"].as_str(),
            v["durationMs"].as_f64(),
        ) else {
            continue;
        };
        let g = groups.entry((p.to_string(), c.to_string())).or_default();
        g.0.push(d);
        g.1 += usize::from(v.get("error").is_some());
    }
    groups
        .into_iter()
        .map(|((plugin, command), (mut d, errors))| {
            d.sort_by(f64::total_cmp);
            let q = |p: f64| d[((d.len() - 1) as f64 * p).round() as usize];
            Row {
                plugin,
                command,
                calls: d.len(),
                errors,
                p50_ms: q(0.5),
                p90_ms: q(0.9),
            }
        })
        .collect()
}

/// The table as printed.
pub fn render(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<16} {:<8} {:>7} {:>7} {:>9} {:>9}\n",
        "PLUGIN", "COMMAND", "CALLS", "ERRORS", "P50_MS", "P90_MS"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<16} {:<8} {:>7} {:>7} {:>9.2} {:>9.2}\n",
            r.plugin, r.command, r.calls, r.errors, r.p50_ms, r.p90_ms
        ));
    }
    s
}

/// The subcommand; `Err` is the message of a failure (exit 1).
pub fn run(args: &[String]) -> Result<String, String> {
    let log: PathBuf = match args {
        [] => {
            let path = calllog::config_path(&|k| std::env::var(k).ok());
            calllog::read_config(&path)
                .map(|c| c.log_file)
                .ok_or_else(|| {
                    format!(
                        "no LOG given and no call log configured in {}",
                        path.display()
                    )
                })?
        }
        [log] => PathBuf::from(log),
        _ => return Err(format!("expected at most one LOG, got {args:?}")),
    };
    let rotated = {
        let mut r = log.as_os_str().to_owned();
        r.push(".1");
        PathBuf::from(r)
    };
    // Right after a rotation the log itself may not exist yet.
    let read = |p: &Path| std::fs::read_to_string(p);
    let (current, older) = match (read(&log), read(&rotated)) {
        (Err(e), Err(_)) => return Err(format!("{}: {e}", log.display())),
        (c, o) => (c.unwrap_or_default(), o.unwrap_or_default()),
    };
    Ok(render(&summarize(&[older, current])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_quantiles() {
        let log = [
            r#"{"plugin":"bridge","command":"ADD","durationMs":5.0}"#,
            r#"{"plugin":"bridge","command":"ADD","durationMs":1.0}"#,
            r#"{"plugin":"bridge","command":"ADD","durationMs":3.0,"error":{"code":7}}"#,
            "not json",
            r#"{"plugin":"portmap","command":"DEL","durationMs":2.5}"#,
        ]
        .join("\n");
        let rows = summarize(&[log]);
        assert_eq!(
            rows,
            [
                Row {
                    plugin: "bridge".into(),
                    command: "ADD".into(),
                    calls: 3,
                    errors: 1,
                    p50_ms: 3.0,
                    p90_ms: 5.0
                },
                Row {
                    plugin: "portmap".into(),
                    command: "DEL".into(),
                    calls: 1,
                    errors: 0,
                    p50_ms: 2.5,
                    p90_ms: 2.5
                }
            ]
        );
        let text = render(&rows);
        assert!(text.starts_with("PLUGIN"), "{text}");
        assert!(
            text.contains("bridge           ADD            3       1      3.00      5.00"),
            "{text}"
        );
    }
}
