//! `cni-rs metrics`: the node's CNI metrics for Prometheus, printed once
//! or served at `/metrics` ([`server`]). Encoded by the official client
//! crate (`prometheus-client`): the Prometheus text format (what
//! node_exporter's textfile collector reads) or OpenMetrics, as the
//! scraper asks.
//!
//! Each scrape reads the node anew ([`pools`]: what `gc` reads, judged by
//! its liveness rules) and the call log's new lines only ([`calls`]), so
//! the call counters count each line once, in bounded memory. Labels are
//! bounded: network, range, plugin, command, error code, state, kind;
//! never a pod, a container ID or an address. What cannot be read is
//! counted in `cni_metrics_read_errors_total`, and the families that
//! depend on it go away until it can be read again: a scrape never
//! serves an old value as current (the CRI runtime's answer judges the
//! leaked addresses and the attachments, not the pools' sizes and used
//! addresses; the call log gives each network's STATUS; gc's record its
//! last run).

pub mod calls;
pub mod pools;
pub mod server;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::gc_record;
use crate::liveness::{Judge, Verdicts};
use crate::node::NodePaths;

/// A metric's labels, as name and value pairs.
type Labels = Vec<(&'static str, String)>;
type GaugeF = Gauge<f64, AtomicU64>;

/// The two encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4.
    Text,
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the `Accept` header names it (Prometheus asks for
    /// it first), else the text format.
    pub fn from_accept(accept: &str) -> Format {
        if accept.contains("application/openmetrics-text") {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The buckets of call durations: 1 ms to about 16 s, doubling.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Where the metrics come from.
pub struct Sources {
    pub paths: NodePaths,
    /// The call log, when the suite's config names one (or `--call-log`).
    pub call_log: Option<PathBuf>,
}

/// Registers each metric under its name and help (and unit, in
/// brackets), in order: the order of the exposition.
macro_rules! register_all {
    ($registry:ident; $($name:literal $([$unit:expr])?: $help:literal => $metric:expr;)*) => {
        $( register_all!(@one $registry, $name, $help, $metric $(, $unit)?); )*
    };
    (@one $registry:ident, $name:expr, $help:expr, $metric:expr) => {
        $registry.register($name, $help, $metric)
    };
    (@one $registry:ident, $name:expr, $help:expr, $metric:expr, $unit:expr) => {
        $registry.register_with_unit($name, $help, $unit, $metric)
    };
}

/// The registry and what it remembers between scrapes.
pub struct Metrics {
    registry: Registry,
    pool_addresses: Family<Labels, GaugeF>,
    reserved_addresses: Family<Labels, GaugeF>,
    used_addresses: Family<Labels, Gauge>,
    leaked_addresses: Family<Labels, Gauge>,
    attachments: Family<Labels, Gauge>,
    calls: Family<Labels, Counter>,
    durations: Family<Labels, Histogram, fn() -> Histogram>,
    status_up: Family<Labels, Gauge>,
    gc_collected: Family<Labels, Counter>,
    /// No labels: a family, so that it can go away.
    gc_last_run: Family<Labels, GaugeF>,
    read_errors: Family<Labels, Counter>,
    tail: Option<calls::Tail>,
}

impl Metrics {
    pub fn new(call_log: Option<&Path>) -> Metrics {
        let mut registry = Registry::with_prefix("cni");
        let m = Metrics {
            pool_addresses: Family::default(),
            reserved_addresses: Family::default(),
            used_addresses: Family::default(),
            leaked_addresses: Family::default(),
            attachments: Family::default(),
            calls: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
            status_up: Family::default(),
            gc_collected: Family::default(),
            gc_last_run: Family::default(),
            read_errors: Family::default(),
            tail: call_log.map(calls::Tail::new),
            registry: Registry::default(),
        };
        registry.register(
            "build",
            "The suite's version (upstream's release, ours as build metadata)",
            Info::new(vec![
                ("version", libcni::PLUGIN_VERSION),
                ("upstream", libcni::UPSTREAM_VERSION),
                ("release", libcni::SUITE_VERSION),
            ]),
        );
        register_all!(registry;
            "ipam_pool_addresses": "Addresses of a host-local range, start to end" => m.pool_addresses.clone();
            "ipam_reserved_addresses": "Addresses of a range host-local never hands out (its gateway)" => m.reserved_addresses.clone();
            "ipam_used_addresses": "Addresses of a range held by a lease" => m.used_addresses.clone();
            "ipam_leaked_addresses": "Addresses of a range leased to no live attachment (gc's liveness rules)" => m.leaked_addresses.clone();
            "attachments": "Attachments on the node by state: live, leaked (stale or untied), unknown" => m.attachments.clone();
            "plugin_calls": "Plugin calls in the call log, by plugin, command and error code (0: success)" => m.calls.clone();
            "plugin_call_duration" [Unit::Seconds]: "Plugin calls' durations in the call log" => m.durations.clone();
            "network_status_up": "The network's last STATUS answer in the call log: 1 success, 0 failure" => m.status_up.clone();
            "gc_collected": "Pieces of dead attachments cni-rs gc --apply removed, by kind" => m.gc_collected.clone();
            "gc_last_run_timestamp_seconds": "When the last cni-rs gc --apply pass ended" => m.gc_last_run.clone();
            "metrics_read_errors": "What cni-rs metrics could not read and skipped, by source" => m.read_errors.clone();
        );
        Metrics { registry, ..m }
    }

    fn read_error(&self, source: &str) {
        self.read_errors
            .get_or_create(&vec![("source", source.to_string())])
            .inc();
    }

    /// Reads the node and the call log's new lines into the registry.
    pub fn refresh(&mut self, paths: &NodePaths, judge: &dyn Fn() -> crate::error::Result<Judge>) {
        self.refresh_node(paths, judge);
        self.refresh_calls();
        self.refresh_gc(paths);
    }

    /// The pools and attachments, read anew. Without the runtime's
    /// answer no attachment can be judged: the leaked addresses and the
    /// attachments by state go away, the pools' sizes and used addresses
    /// stay current.
    fn refresh_node(&mut self, paths: &NodePaths, judge: &dyn Fn() -> crate::error::Result<Judge>) {
        let judge = match judge() {
            Ok(j) => Some(j),
            Err(e) => {
                eprintln!("cni-rs metrics: {e}");
                self.read_error("cri");
                None
            }
        };
        let state = crate::collect::collect(paths);
        let verdicts = judge.as_ref().map(|j| j.judge(&state.rows));
        let counted = pools::count(&state, verdicts.as_ref().unwrap_or(&Verdicts::new()));
        for why in &counted.unreadable {
            eprintln!("cni-rs metrics: unreadable: {why}");
            self.read_error("node");
        }
        for family in [&self.pool_addresses, &self.reserved_addresses] {
            family.clear();
        }
        for family in [
            &self.used_addresses,
            &self.leaked_addresses,
            &self.attachments,
        ] {
            family.clear();
        }
        let judged = verdicts.is_some();
        for ((network, range), pool) in &counted.pools {
            let labels = vec![("network", network.clone()), ("range", range.clone())];
            let sizes = [
                (&self.pool_addresses, pool.addresses),
                (&self.reserved_addresses, pool.reserved),
            ];
            for (gauge, n) in sizes {
                gauge.get_or_create(&labels).set(n as f64);
            }
            self.used_addresses
                .get_or_create(&labels)
                .set(pool.used as i64);
            if judged {
                self.leaked_addresses
                    .get_or_create(&labels)
                    .set(pool.leaked as i64);
            }
        }
        if !judged {
            return;
        }
        for (network, states) in &counted.attachments {
            for state in ["live", "leaked", "unknown"] {
                let labels = vec![("network", network.clone()), ("state", state.to_string())];
                let n = states.get(state).copied().unwrap_or(0);
                self.attachments.get_or_create(&labels).set(n as i64);
            }
        }
    }

    fn refresh_calls(&mut self) {
        let Some(mut tail) = self.tail.take() else {
            return;
        };
        let mut bad = 0u64;
        let read = tail.read_new(&mut |line| match calls::Call::parse(line) {
            Ok(call) => self.count_call(&call),
            Err(_) => bad += 1,
        });
        if bad > 0 {
            self.read_errors
                .get_or_create(&vec![("source", "call_log".to_string())])
                .inc_by(bad);
        }
        if let Err(e) = read {
            eprintln!("cni-rs metrics: the call log: {e}");
            self.read_error("call_log");
            // The last STATUS it gave may be old.
            self.status_up.clear();
        }
        self.tail = Some(tail);
    }

    fn count_call(&self, call: &calls::Call) {
        let code = call.error_code.unwrap_or(0).to_string();
        self.calls
            .get_or_create(&vec![
                ("plugin", call.plugin.clone()),
                ("command", call.command.clone()),
                ("code", code),
            ])
            .inc();
        self.durations
            .get_or_create(&vec![
                ("plugin", call.plugin.clone()),
                ("command", call.command.clone()),
            ])
            .observe(call.seconds);
        if call.command == "STATUS" {
            if let Some(network) = &call.network {
                self.status_up
                    .get_or_create(&vec![("network", network.clone())])
                    .set(i64::from(call.error_code.is_none()));
            }
        }
    }

    fn refresh_gc(&mut self, paths: &NodePaths) {
        let last_run = self.gc_last_run.get_or_create(&Vec::new()).clone();
        let record = match gc_record::load(&gc_record::path(&paths.cache_dir)) {
            Ok(Some(r)) => r,
            Ok(None) => {
                last_run.set(0.0);
                return;
            }
            Err(e) => {
                eprintln!("cni-rs metrics: the gc record: {e}");
                self.read_error("gc_record");
                self.gc_last_run.clear();
                return;
            }
        };
        last_run.set(record.last_run_seconds);
        for (kind, total) in &record.collected {
            let counter = self
                .gc_collected
                .get_or_create(&vec![("kind", kind.clone())]);
            // The record only grows; a record made anew counts on from
            // what was already counted.
            let seen = counter.get();
            if *total > seen {
                counter.inc_by(*total - seen);
            }
        }
    }

    /// The registry in `format`.
    pub fn encode(&self, format: Format) -> String {
        let mut out = String::new();
        let done = match format {
            Format::Text => prometheus_text::encode(&mut out, &self.registry),
            Format::OpenMetrics => text::encode(&mut out, &self.registry),
        };
        if done.is_err() {
            out.clear();
        }
        out
    }
}
