//! The node operator's commands, run as `cni-rs inspect`, `cni-rs gc`,
//! `cni-rs doctor` and `cni-rs metrics` (the multicall binary dispatches to
//! [`inspect_main`], [`gc_main`], [`doctor_main`] and [`metrics_main`]).
//!
//! They read what the runtimes read (the conf dir, the plugin path, the
//! result cache) and what each plugin keeps on the node, through that
//! plugin's own code ([`collect`]); decide which attachments are live
//! ([`liveness`], asking a CRI runtime through [`cri`]); and print
//! ([`inspect`]) or collect ([`gc`]) them; [`doctor`] checks the rest, and
//! [`metrics`] turns it all into Prometheus metrics.

pub mod collect;
pub mod cri;
pub mod doctor;
pub mod error;
pub mod gc;
pub mod gc_record;
pub mod inspect;
pub mod liveness;
pub mod metrics;
pub mod namespace;
pub mod node;
pub mod repeat;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use error::Error;
use liveness::Judge;
use node::NodePaths;

/// The options every node command takes, after its own help.
pub const COMMON_OPTIONS: &str = "\
OPTIONS
  --conf-dir DIR     the runtimes' conf dir (default $NETCONFPATH or /etc/cni/net.d)
  --bin-dir DIRS     the plugin path, ':'-separated (default $CNI_PATH or /opt/cni/bin)
  --cache-dir DIR    the result cache dir (default $CNI_CACHE_DIR or /var/lib/cni); the
                     plugins' default data dirs under /var/lib/cni are looked for under
                     it (networks/, flannel/, dhcp/)
  --dhcp-lease-dir DIR  the dhcp daemon's -leasedir (default /var/lib/cni/dhcp, under
                     --cache-dir as above)
  --cri-socket PATH  the CRI runtime whose sandboxes are live (default: containerd's
                     /run/containerd/containerd.sock, else CRI-O's /var/run/crio/crio.sock,
                     when there); `none` asks no runtime
  --grace SECONDS    state younger than this is live: an ADD in flight (default 120)
";

pub const INSPECT_USAGE: &str = "\
NAME
  cni-rs inspect - every CNI attachment on this node, and where its pieces are

SYNOPSIS
  cni-rs inspect [NETWORK] [--json] [OPTIONS]

DESCRIPTION
  One row per attachment (network, container ID, interface), built from every
  piece of state the suite and the Go plugins leave: the result cache,
  host-local's leases, our dhcp daemon's lease files, flannel's saved
  configs, portmap's and the masquerade rules (their ledgers in /run/cni,
  the iptables-nft chains, the nftables rules by their comments), the
  firewall plugin's owner records and accept rules, bandwidth's IFBs and
  qdiscs (with the rates the kernel has), tuning's backups, and the
  host-side interfaces the result names, as ports of their bridge. An
  attachment with a cache entry shows what it should have and marks what is
  missing (`!lease`); state that no cache names gets a row of its own.

  LIVE says why an attachment counts as live (netns: the namespace of its
  ADD is there; sandbox: the CRI runtime lists it; young: newer than --grace)
  or that it is not (stale: cached, and its namespace gone or its sandbox not
  listed; unknown: cached, no namespace of its ADD known either way, and no
  CRI runtime asked; untied: no cache and no sandbox). The namespace is the
  cache's netns, else the sandbox its result's interfaces name (Go libcni
  before v1.2 writes no netns), and counts only when the path opens as a
  network namespace (not a plain file or a directory) that is the ADD's: a
  bind mount made after the cache entry was written, or a container
  interface whose MAC is not the result's, is a reused path (unknown).

  --json prints the stable schema documented in docs/operating.md (schemaVersion 1).

EXIT STATUS
  0, or 1 when something could not be read, 2 for a usage error.

";

pub const GC_USAGE: &str = "\
NAME
  cni-rs gc - collect the CNI state of dead attachments (the GC no runtime calls)

SYNOPSIS
  cni-rs gc [NETWORK] [--apply] [--untied] [--every INTERVAL] [OPTIONS]

DESCRIPTION
  Lists each stale attachment (cached, older than --grace, and its
  namespace gone or its sandbox not listed by the CRI runtime) and each
  piece it holds. The namespace is the first record of these that names
  one: the cache's netns (Go libcni v1.2 and later, our cnitool), else the
  sandbox of the cached result's interfaces (every interface naming one must
  name the same; Go libcni before v1.2, as in containerd 1.6/1.7 and
  podman 4), else none. It is gone when the path does not open as a network
  namespace (missing, a plain file an unmounted bind mount leaves, a
  directory); it is live only when it is the ADD's namespace (a bind mount
  older than the cache entry, and the container interface, if there, with
  the result's MAC).
  Untied state (no cache entry, no sandbox, older than --grace: a lease only
  a runtime without a cache knows) is listed and kept, and so is an unknown
  attachment (no namespace recorded, sandboxes that disagree, or a path that
  now holds another namespace, and no CRI runtime could be asked about its
  sandbox): it is never removed without a runtime that says it is gone.

  --apply removes them: DEL of each stale attachment through its chain (with
  its cached result), then DEL by identity (container ID and interface) of
  each dead attachment the first DEL left something of, then the removal of
  files no plugin took (leases under host-local's lock, saved configs, cache
  files, firewall records whose rules are gone; never a dhcp lease, which
  only its daemon's release ends). Only the dead attachments found are
  touched: the plugins' GC verb, which removes all that its list of valid
  attachments does not name, is not sent, since an ADD in flight would be
  in no list.
  --untied also removes untied state.
  A network whose config sets \"disableGC\": true (spec 1.1: its state may be
  shared with another runtime) is skipped whole, dry run or --apply, and a
  line says so with the number of its dead attachments kept.
  --every INTERVAL runs a pass, then another every INTERVAL (`600`, `600s`,
  `10m`, `1h`), until SIGTERM or SIGINT ends it (exit 0): a DaemonSet's
  container from an image with no shell (deploy/cni-rs.yaml). A pass that
  fails is reported on stderr and the next one runs at its time.

EXIT STATUS
  0 when nothing is left to remove (a dry run: when nothing was found);
  1 when something was found (dry run) or could not be removed (--apply);
  2 for a usage error.

";

pub const DOCTOR_USAGE: &str = "\
NAME
  cni-rs doctor - check what this node's CNI configs need, then gc's findings

SYNOPSIS
  cni-rs doctor [OPTIONS]

DESCRIPTION
  Every conflist of the conf dir parsed as the runtimes parse it (a broken or
  shadowed file is named), each plugin found in the plugin path with its
  version line and the CNI versions it speaks, STATUS of each network (a list
  older than 1.1.0 is asked at 1.1.0 when all its plugins speak it, so its
  keys are read as the plugins read them), IPv4 forwarding, the iptables
  flavour, the link kinds the configs need (bridge, veth, macvlan, ipvlan,
  vlan, dummy, vrf, ifb), then the findings of `cni-rs gc` (a stale
  attachment needs attention; untied and unknown ones are noted).

  Each line is `ok`, `note` or `FAIL`.

EXIT STATUS
  0 when nothing needs attention (no FAIL line), 1 otherwise, 2 for a usage
  error.

";

pub const METRICS_USAGE: &str = "\
NAME
  cni-rs metrics - the node's CNI metrics for Prometheus

SYNOPSIS
  cni-rs metrics [--listen [ADDR]] [--call-log LOG] [OPTIONS]

DESCRIPTION
  Prints the metrics once in the Prometheus text format (what node_exporter's
  textfile collector reads), or with --listen serves them over HTTP at
  /metrics (OpenMetrics when the scraper asks for it; /healthz answers ok).
  ADDR defaults to 127.0.0.1:9585 (loopback only); the DaemonSet binds the
  node's address (a bare IPv6 address and port, fd00::1:9585, is taken
  too). Only GET is answered; a request must arrive whole within 5 s and
  8 KiB, and its answer be taken within 10 s. Up to 2048 connections are
  held at once (fewer under a lower file descriptor limit, which is raised
  to its hard limit); past that the oldest one still sending its request
  is closed, so idle or slow clients never keep a scrape out.

  Per network and host-local range (flannel's from its subnet.env): the
  range's addresses, those never handed out (its gateway), those leased,
  and those leased to no live attachment, by gc's liveness rules. Per
  network: attachments live, leaked (stale or untied) and unknown. From the
  call log (LOG, default the logFile of /etc/cni/cni-rs.conf or the file
  CNI_RS_CONFIG names, and LOG.1): calls by plugin, command and error code,
  a duration histogram by plugin and command, each line counted once across
  rotation (a server reads only new lines; a new one starts with what LOG.1
  and LOG hold), and each network's last STATUS answer. What gc --apply
  collected by kind and when it last ran (<cache dir>/cni-rs/gc.json). What
  cannot be read is counted in cni_metrics_read_errors_total and skipped.
  docs/operating.md lists every metric.

EXIT STATUS
  0, 1 when the server cannot listen, 2 for a usage error.

";

#[derive(Clone)]
struct Common {
    paths: NodePaths,
    cri: Option<PathBuf>,
    grace: Duration,
    network: Option<String>,
    flags: Vec<String>,
    /// `--every`: run again at this interval (gc only).
    every: Option<Duration>,
}

fn env_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

/// The options both commands take; the rest are returned as flags.
fn parse(args: &[String], flags_known: &[&str]) -> error::Result<Common> {
    let usage = |msg: String| Error::Usage(msg);
    let bin_path = std::env::var("CNI_PATH")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| node::DEFAULT_BIN_DIR.into());
    let mut c = Common {
        paths: NodePaths {
            conf_dir: env_path("NETCONFPATH", node::DEFAULT_CONF_DIR),
            bin_path: split_path(&bin_path),
            cache_dir: env_path("CNI_CACHE_DIR", node::DEFAULT_CACHE_DIR),
            dhcp_lease_dir: None,
        },
        cri: cri::default_socket(),
        grace: liveness::DEFAULT_GRACE,
        network: None,
        flags: Vec::new(),
        every: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match a.as_str() {
            "--conf-dir" => c.paths.conf_dir = value(a)?.into(),
            "--bin-dir" => c.paths.bin_path = split_path(&value(a)?),
            "--cache-dir" => c.paths.cache_dir = value(a)?.into(),
            "--dhcp-lease-dir" => c.paths.dhcp_lease_dir = Some(value(a)?.into()),
            "--cri-socket" => {
                let v = value(a)?;
                c.cri = (v != "none").then(|| v.into());
            }
            "--grace" => {
                let v = value(a)?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| usage(format!("--grace {v:?}: not a number of seconds")))?;
                c.grace = Duration::from_secs(secs);
            }
            "--every" if flags_known.contains(&"--every") => {
                c.every = Some(repeat::parse_interval(&value(a)?)?)
            }
            f if flags_known.contains(&f) => c.flags.push(f.to_string()),
            f if f.starts_with('-') => return Err(usage(format!("unknown option {f:?}"))),
            n if c.network.is_none() => c.network = Some(n.to_string()),
            n => return Err(usage(format!("one network at most ({n:?} is a second)"))),
        }
    }
    Ok(c)
}

fn split_path(p: &str) -> Vec<PathBuf> {
    p.split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect()
}

impl Common {
    fn judge(&self) -> error::Result<Judge> {
        let sandboxes = match &self.cri {
            Some(s) => Some(cri::sandbox_ids(s, Duration::from_secs(10))?),
            None => None,
        };
        Ok(Judge {
            sandboxes,
            grace: self.grace,
            now: SystemTime::now(),
        })
    }
}

fn usage_error(cmd: &str, msg: &dyn std::fmt::Display, usage: &str) -> ExitCode {
    eprintln!("cni-rs {cmd}: {msg}\n\n{usage}");
    ExitCode::from(2)
}

pub fn inspect_main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{INSPECT_USAGE}{COMMON_OPTIONS}");
        return ExitCode::SUCCESS;
    }
    let c = match parse(args, &["--json"]) {
        Ok(c) => c,
        Err(e) => return usage_error("inspect", &e, INSPECT_USAGE),
    };
    let judge = match c.judge() {
        Ok(j) => j,
        Err(e) => {
            eprintln!("cni-rs inspect: {e} (--cri-socket none to ask no runtime)");
            return ExitCode::FAILURE;
        }
    };
    let state = collect::collect(&c.paths);
    let network = c.network.as_deref();
    if c.flags.iter().any(|f| f == "--json") {
        let v = inspect::to_json(&state, &judge, network);
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", inspect::to_table(&state, &judge, network));
    }
    if state.unreadable.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

pub fn gc_main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{GC_USAGE}{COMMON_OPTIONS}");
        return ExitCode::SUCCESS;
    }
    let c = match parse(args, &["--apply", "--untied", "--every"]) {
        Ok(c) => c,
        Err(e) => return usage_error("gc", &e, GC_USAGE),
    };
    let opts = gc::GcOptions {
        network: c.network.clone(),
        apply: c.flags.iter().any(|f| f == "--apply"),
        untied: c.flags.iter().any(|f| f == "--untied"),
    };
    let pass = || {
        let report = gc::run(&c.paths, &|| c.judge(), &opts);
        print!("{}", report.text);
        for f in &report.failures {
            eprintln!("cni-rs gc: not removed: {f}");
        }
        if opts.apply {
            let done =
                gc_record::add_pass(&c.paths.cache_dir, &report.collected, SystemTime::now());
            if let Err(e) = done {
                eprintln!("cni-rs gc: the record for cni-rs metrics was not written: {e}");
            }
        }
        report
    };
    let Some(interval) = c.every else {
        let report = pass();
        return if report.failures.is_empty() && (opts.apply || report.found == 0) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    };
    // Each pass ends with a line of its own, for `kubectl logs`.
    match repeat::every(interval, || {
        let report = pass();
        let _ = std::io::Write::flush(&mut std::io::stdout());
        eprintln!(
            "cni-rs gc: pass done: {} attachments read, {} dead found, {} not removed; \
             the next in {} s",
            report.seen,
            report.found,
            report.failures.len(),
            interval.as_secs()
        );
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cni-rs gc: --every: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn doctor_main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{DOCTOR_USAGE}{COMMON_OPTIONS}");
        return ExitCode::SUCCESS;
    }
    let c = match parse(args, &[]) {
        Ok(c) if c.network.is_none() => c,
        Ok(_) => return usage_error("doctor", &"doctor takes no network", DOCTOR_USAGE),
        Err(e) => return usage_error("doctor", &e, DOCTOR_USAGE),
    };
    let findings = doctor::run(&c.paths, &|| c.judge());
    print!("{}", findings.text);
    if findings.failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

pub fn metrics_main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{METRICS_USAGE}{COMMON_OPTIONS}");
        return ExitCode::SUCCESS;
    }
    // --listen takes an optional value; --call-log a value.
    let mut listen: Option<String> = None;
    let mut call_log: Option<PathBuf> = None;
    let mut rest = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--listen" => {
                let addr = match it.peek() {
                    Some(v) if !v.starts_with("--") => it.next().cloned(),
                    _ => None,
                };
                listen = Some(addr.unwrap_or_else(|| metrics::server::DEFAULT_LISTEN.into()));
            }
            "--call-log" => match it.next() {
                Some(v) => call_log = Some(v.into()),
                None => return usage_error("metrics", &"--call-log needs a value", METRICS_USAGE),
            },
            _ => rest.push(a.clone()),
        }
    }
    let c = match parse(&rest, &[]) {
        Ok(c) if c.network.is_none() => c,
        Ok(_) => return usage_error("metrics", &"metrics takes no network", METRICS_USAGE),
        Err(e) => return usage_error("metrics", &e, METRICS_USAGE),
    };
    let call_log = call_log.or_else(|| {
        let env = |k: &str| std::env::var(k).ok();
        libcni::calllog::read_config(&libcni::calllog::config_path(&env)).map(|c| c.log_file)
    });
    let mut m = metrics::Metrics::new(call_log.as_deref());
    let sources = metrics::Sources {
        paths: c.paths.clone(),
        call_log,
    };
    let Some(addr) = listen else {
        m.refresh(&sources.paths, &|| c.judge());
        print!("{}", m.encode(metrics::Format::Text));
        return ExitCode::SUCCESS;
    };
    let addr = match metrics::server::parse_listen(&addr) {
        Some(a) => a,
        None => {
            return usage_error(
                "metrics",
                &format!("--listen {addr:?}: not an address and port (127.0.0.1:9585, [::]:9585, fd00::1:9585)"),
                METRICS_USAGE,
            )
        }
    };
    let judge = move || c.judge();
    match metrics::server::serve(addr, sources, m, Box::new(judge)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cni-rs metrics: {e}");
            ExitCode::FAILURE
        }
    }
}
