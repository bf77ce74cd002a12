//! The node-wide call log, opt-in: when the config file exists
//! (`/etc/cni/cni-rs.conf`, or the file `CNI_RS_CONFIG` names), every
//! plugin call appends one JSON line to the log it names: when, which
//! plugin and command, the attachment, the network, how long the call and
//! each of its steps took, the result's addresses or the error, and the
//! runtime's W3C trace context. Without the file a call costs one failed
//! open and nothing else. A log that cannot be written never fails a call:
//! every error here is dropped.
//!
//! Lines stay whole under concurrency: each is one `write` to a file opened
//! `O_APPEND`. The log is rotated to `<log>.1` when it passes its size cap,
//! by whichever call first holds its `flock`.

use serde::Deserialize;
use std::io::{Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// Where the config is read from unless [`CONFIG_ENV`] names another file.
pub const CONFIG_PATH: &str = "/etc/cni/cni-rs.conf";

/// The variable naming another config file (tests, a node's own layout).
pub const CONFIG_ENV: &str = "CNI_RS_CONFIG";

/// The size cap of a log unless the config gives one: 10 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 10 << 20;

/// The config file (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// The log file (absolute).
    pub log_file: PathBuf,
    /// `error` (failed calls only), `info` (every call but VERSION, the
    /// default) or `debug` (every call).
    #[serde(default)]
    pub log_level: Level,
    /// The size past which the log is moved to `<log>.1` (one kept).
    #[serde(default)]
    pub log_max_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    #[default]
    Info,
    Debug,
}

/// The steps a call's time is split into (`stepsMs` in the line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Opening and entering network namespaces.
    Namespace,
    /// rtnetlink requests on links.
    Links,
    /// The IPAM plugin's process.
    Ipam,
    /// Another delegate's process (flannel's).
    Delegate,
    /// rtnetlink requests on addresses, routes, rules and neighbours.
    AddressesRoutes,
    /// nf_tables, ctnetlink and iptables programs.
    Netfilter,
    /// rtnetlink requests on qdiscs, classes and filters.
    Tc,
}

const STEPS: [(Step, &str); 7] = [
    (Step::Namespace, "namespace"),
    (Step::Links, "links"),
    (Step::Ipam, "ipam"),
    (Step::Delegate, "delegate"),
    (Step::AddressesRoutes, "addressesRoutes"),
    (Step::Netfilter, "netfilter"),
    (Step::Tc, "tc"),
];

static ENABLED: AtomicBool = AtomicBool::new(false);
static STEP_NANOS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];
static NETWORK: OnceLock<String> = OnceLock::new();
static ADDRESSES: OnceLock<Vec<String>> = OnceLock::new();
static FALLBACKS: Mutex<Vec<Fallback>> = Mutex::new(Vec::new());

/// A config value the plugin did not use as written but read the way the
/// Go plugin does, falling back to a default (the firewall's unknown
/// `backend`): the line's `fallbacks`, so an operator sees why the node
/// did something the config does not literally say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// The config key (`backend`).
    pub key: &'static str,
    /// The value as written.
    pub value: String,
    /// What was used instead (`iptables`).
    pub used: String,
}

/// Runs `f`, adding its time to `step` when the log is on (else nothing
/// but one atomic load).
pub fn timed<T>(step: Step, f: impl FnOnce() -> T) -> T {
    if !ENABLED.load(Ordering::Relaxed) {
        return f();
    }
    let start = Instant::now();
    let out = f();
    add(step, start.elapsed());
    out
}

/// Adds `d` to `step` (for a step that is not one closure).
pub fn add(step: Step, d: Duration) {
    if ENABLED.load(Ordering::Relaxed) {
        STEP_NANOS[step as usize].fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// Whether the log is on for this process.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The addresses of the result an ADD prints, so the line needs no second
/// parse of it.
pub fn note_addresses(addresses: impl Iterator<Item = String>) {
    if enabled() {
        let _ = ADDRESSES.set(addresses.collect());
    }
}

/// Records a [`Fallback`] for the line, and says it on stderr (where a
/// runtime's log shows it) whether or not the log is on.
pub fn note_fallback(fallback: Fallback) {
    eprintln!(
        "{}: {:?} is not a value this plugin knows; using {:?}, as the Go plugin does",
        fallback.key, fallback.value, fallback.used
    );
    if enabled() {
        if let Ok(mut all) = FALLBACKS.lock() {
            all.push(fallback);
        }
    }
}

/// The network's name, once the config is read.
pub fn note_network(name: &str) {
    if enabled() {
        let _ = NETWORK.set(name.to_string());
    }
}

/// The config at `path`: `None` when there is none or it cannot be read
/// as one (a broken config turns the log off, never a call).
pub fn read_config(path: &Path) -> Option<Config> {
    use std::io::Read;
    // Not `fs::read`: its size hint costs a `statx` on every call.
    let mut bytes = Vec::with_capacity(512);
    std::fs::File::open(path)
        .ok()?
        .take(MAX_CONFIG)
        .read_to_end(&mut bytes)
        .ok()?;
    parse_config(&bytes)
}

/// A config is a few keys; anything longer is not one.
const MAX_CONFIG: u64 = 64 << 10;

/// The config in `bytes`, read as every JSON of the suite is (Go's rules).
pub fn parse_config(bytes: &[u8]) -> Option<Config> {
    let value = crate::gojson::parse_value(bytes).ok()?;
    crate::gojson::from_value_at(&value, "").ok()
}

/// The config file this process reads.
pub fn config_path(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    env(CONFIG_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CONFIG_PATH))
}

/// One call being logged.
pub struct Call {
    config: Config,
    started: Instant,
    /// The line's keys known as the call starts, written then: a DEL
    /// ends after a long kernel wait (a veth's or an IFB's deletion), with
    /// the CPU's caches cold, and the log's closing work took about three
    /// times as long there as at an ADD's end (bridge, portmap, bandwidth).
    head: String,
    /// Whether the call writes its line when it succeeds (its level and
    /// command, known as it starts).
    logs_success: bool,
    /// The log, opened as the call starts for the same reason; `None` when
    /// it could not be, or when this call writes only if it fails.
    file: Option<std::fs::File>,
}

/// What a call ended with, for its line.
pub enum Outcome<'a> {
    /// Exit 0 and what was printed (ADD's result, else nothing).
    Done(&'a str),
    /// The error JSON printed.
    Failed(&'a str),
}

impl Call {
    /// Starts logging this call if the config says so (one `open` when it
    /// does not exist).
    pub fn start(plugin: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<Call> {
        let config = read_config(&config_path(env))?;
        ENABLED.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let command = env("CNI_COMMAND").unwrap_or_default();
        let mut line = Line(String::with_capacity(384));
        line.open();
        line.string("time", &rfc3339(SystemTime::now()));
        line.string("plugin", plugin);
        line.string("command", &command);
        for (key, var) in [
            ("containerID", "CNI_CONTAINERID"),
            ("netns", "CNI_NETNS"),
            ("ifname", "CNI_IFNAME"),
        ] {
            if let Some(val) = env(var).filter(|s| !s.is_empty()) {
                line.string(key, &val);
            }
        }
        let logs_success = logs_success(config.log_level, &command);
        let file = if logs_success {
            open_log(&config.log_file).ok()
        } else {
            None
        };
        Some(Call {
            config,
            started,
            head: line.0,
            logs_success,
            file,
        })
    }

    /// Appends the call's line, if its level is logged. Errors are dropped.
    pub fn finish(&self, env: &dyn Fn(&str) -> Option<String>, outcome: Outcome) {
        if matches!(outcome, Outcome::Done(_)) && !self.logs_success {
            return;
        }
        let mut line = self.line(env, outcome);
        line.push('\n');
        let max = self.config.log_max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
        let _ = match &self.file {
            Some(f) => append_to(f, &self.config.log_file, line.as_bytes(), max),
            None => append(&self.config.log_file, line.as_bytes(), max),
        };
    }

    /// The line, written directly (no JSON value built first: every
    /// plugin process pays for it).
    fn line(&self, env: &dyn Fn(&str) -> Option<String>, outcome: Outcome) -> String {
        let mut line = Line(self.head.clone());
        if let Some(n) = NETWORK.get() {
            line.string("network", n);
        }
        line.raw("durationMs", &millis(self.started.elapsed()));
        let steps: Vec<(&str, Duration)> = STEPS
            .iter()
            .map(|&(step, name)| {
                let nanos = STEP_NANOS[step as usize].load(Ordering::Relaxed);
                (name, Duration::from_nanos(nanos))
            })
            .filter(|&(_, d)| d.as_micros() > 0)
            .collect();
        if !steps.is_empty() {
            let mut inner = Line(String::new());
            inner.open();
            for (name, d) in steps {
                inner.raw(name, &millis(d));
            }
            inner.close();
            line.raw("stepsMs", &inner.0);
        }
        match outcome {
            Outcome::Done(_) => {
                if let Some(a) = ADDRESSES.get().filter(|a| !a.is_empty()) {
                    let quoted: Vec<String> = a.iter().map(|s| quote(s)).collect();
                    line.raw("ips", &format!("[{}]", quoted.join(",")));
                }
            }
            // A failure, rare: its JSON is read back for the code and message.
            Outcome::Failed(stdout) => {
                let parsed = crate::gojson::parse_value(stdout.as_bytes())
                    .unwrap_or(serde_json::Value::Null);
                let error =
                    serde_json::json!({"code": parsed.get("code"), "msg": parsed.get("msg")});
                line.raw("error", &error.to_string());
            }
        }
        let fallbacks = FALLBACKS.lock().map(|f| f.clone()).unwrap_or_default();
        if !fallbacks.is_empty() {
            let items: Vec<String> = fallbacks
                .iter()
                .map(|f| {
                    serde_json::json!({"key": f.key, "value": f.value, "used": f.used}).to_string()
                })
                .collect();
            line.raw("fallbacks", &format!("[{}]", items.join(",")));
        }
        for (key, var) in [("traceparent", "TRACEPARENT"), ("tracestate", "TRACESTATE")] {
            if let Some(val) = env(var).filter(|s| !s.is_empty()) {
                line.string(key, &val);
            }
        }
        line.close();
        line.0
    }
}

/// Whether a call of `command` that succeeds gets a line at `level` (a
/// failed call always does).
fn logs_success(level: Level, command: &str) -> bool {
    match level {
        Level::Error => false,
        Level::Info => command != "VERSION",
        Level::Debug => true,
    }
}

/// `d` in milliseconds to the microsecond (`30.678`), with integers only:
/// float formatting is a large body of code, and a plugin process runs
/// the log's code cold, once.
fn millis(d: Duration) -> String {
    let us = d.as_micros();
    format!("{}.{:03}", us / 1000, us % 1000)
}

/// A JSON object written key by key.
struct Line(String);

impl Line {
    fn open(&mut self) {
        self.0.push('{');
    }

    fn close(&mut self) {
        self.0.push('}');
    }

    /// `"key":<raw>`, `raw` being JSON already.
    fn raw(&mut self, key: &str, raw: &str) {
        if !self.0.ends_with('{') {
            self.0.push(',');
        }
        self.0.push_str(&quote(key));
        self.0.push(':');
        self.0.push_str(raw);
    }

    fn string(&mut self, key: &str, value: &str) {
        self.raw(key, &quote(value));
    }
}

/// `s` as a JSON string (serde_json's escaping; no value built).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Appends `line` with one `write` (`O_APPEND`: whole, whoever else
/// writes), then rotates the log to `<log>.1` if it is past `max`.
pub fn append(log: &Path, line: &[u8], max: u64) -> std::io::Result<()> {
    append_to(&open_log(log)?, log, line, max)
}

/// The log opened to append to (created `0600` when absent; never through
/// a symlink).
fn open_log(log: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(log)
}

/// [`append`] to `f`, the log at `log` as it was opened: if it was rotated
/// since, the line lands whole in `<log>.1`.
fn append_to(mut f: &std::fs::File, log: &Path, line: &[u8], max: u64) -> std::io::Result<()> {
    f.write_all(line)?;
    // After an O_APPEND write the offset is the file's end as this write
    // left it: an `lseek`, cheaper than the `fstat` needed only to rotate.
    if f.stream_position()? <= max {
        return Ok(());
    }
    let meta = f.metadata()?;
    if meta.len() > max && f.try_lock().is_ok() {
        // The holder of the lock on the file still at the log's path
        // moves it; a call that opened it before the move and locks it
        // after sees another file there and leaves it.
        let still_there = std::fs::symlink_metadata(log)
            .is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino()));
        if still_there {
            let mut rotated = log.as_os_str().to_owned();
            rotated.push(".1");
            std::fs::rename(log, rotated)?;
        }
    }
    Ok(())
}

/// `2026-12-02T04:06:47.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_json_whatever_the_strings_hold() {
        const ODD: [&str; 5] = [
            "plain",
            "quote \" and \\ back",
            "nl\ncr\rtab\t",
            "\u{1}\u{1f}",
            "é漢",
        ];
        let mut l = Line(String::new());
        l.open();
        for v in ODD {
            l.string(v, v);
        }
        l.raw("n", "1.5");
        l.close();
        let parsed = crate::gojson::parse_value(l.0.as_bytes()).unwrap();
        for v in ODD {
            assert_eq!(parsed[v], v, "{}", l.0);
        }
        assert_eq!(parsed["n"], 1.5);
    }

    #[test]
    fn durations_are_milliseconds_to_the_microsecond() {
        assert_eq!(millis(Duration::from_nanos(30_678_400)), "30.678");
        assert_eq!(millis(Duration::from_micros(1_500)), "1.500");
        assert_eq!(millis(Duration::from_micros(7)), "0.007");
        assert_eq!(millis(Duration::ZERO), "0.000");
    }

    #[test]
    fn times_are_rfc3339_utc() {
        let at = |s: u64, ms: u64| {
            rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(s) + Duration::from_millis(ms))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        // `date -u -d @1796185607`: Wed Dec  2 04:26:47 UTC 2026.
        assert_eq!(at(1_796_185_607, 123), "2026-12-02T04:26:47.123Z");
        // A leap day.
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn config_keys_and_defaults() {
        let c = parse_config(br#"{"logFile":"/var/log/cni-rs.log"}"#).unwrap();
        assert_eq!((c.log_level, c.log_max_bytes), (Level::Info, None), "{c:?}");
        let c = parse_config(br#"{"logFile":"/l","logLevel":"error","logMaxBytes":4096}"#).unwrap();
        assert_eq!((c.log_level, c.log_max_bytes), (Level::Error, Some(4096)));
        assert!(parse_config(br#"{"logLevel":"info"}"#).is_none());
        assert!(read_config(Path::new("/nonexistent/cni-rs.conf")).is_none());
    }

    #[test]
    fn append_rotates_past_the_cap_and_keeps_lines_whole() {
        let dir = std::env::temp_dir().join(format!("calllog-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("calls.log");
        for i in 0..10 {
            append(&log, format!("{{\"n\":{i}}}\n").as_bytes(), 30).unwrap();
        }
        let now = std::fs::read_to_string(&log).unwrap_or_default();
        let old = std::fs::read_to_string(dir.join("calls.log.1")).unwrap();
        for text in [&now, &old] {
            for l in text.lines() {
                crate::gojson::parse_value(l.as_bytes()).unwrap();
            }
        }
        assert!(old.len() > 30 && old.len() <= 40, "{old:?}");
        assert!(now.contains("{\"n\":9}") || old.contains("{\"n\":9}"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
