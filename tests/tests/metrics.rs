//! `cni-rs metrics` scraped by a real Prometheus (Debian's), both started
//! in a throwaway node namespace: pods through our cnitool with the call
//! log on (rotating as the plugins rotate it), one pod leaked, then a gc
//! pass; Prometheus' HTTP API must answer the scenario's exact numbers.
//! Also: `promtool check metrics` on the output, `promtool check rules` on
//! deploy/prometheus-rules.yaml (which the Prometheus here loads), every
//! query of deploy/grafana-dashboard.json accepted by Prometheus, and the
//! server's refusals.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use tests::*;

/// A process in the node namespace, killed on drop.
pub(crate) struct Background(Child);

impl Background {
    pub(crate) fn start(ns: &Netns, program: &str, args: &[&str]) -> Background {
        let child = ns
            .command(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        Background(child)
    }

    /// Its process ID (`ip netns exec` execs the program).
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const PORT: u16 = 9585;

/// Prometheus' HTTP API in `ns`: `path` with `query` (a PromQL
/// expression) URL-encoded; the JSON answer.
fn prometheus_api(ns: &Netns, path: &str, query: Option<&str>) -> Option<Value> {
    const CLIENT: &str = r#"
import sys, urllib.parse, urllib.request
url = "http://127.0.0.1:9090" + sys.argv[1]
if len(sys.argv) > 2:
    url += "?" + urllib.parse.urlencode({"query": sys.argv[2]})
print(urllib.request.urlopen(url, timeout=3).read().decode())
"#;
    let mut args = vec![path];
    args.extend(query);
    let out = python_client(ns, CLIENT, &args)?;
    serde_json::from_str(&out).ok()
}

/// The single value of `query` now, if it has exactly one series.
fn value(ns: &Netns, query: &str) -> Option<f64> {
    let v = prometheus_api(ns, "/api/v1/query", Some(query))?;
    let result = v["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

/// Waits (60 s at most: Prometheus starts, then scrapes every second)
/// until Prometheus answers `want` for each query; else fails naming
/// what it answered.
fn wait_for_values(ns: &Netns, want: &[(&str, f64)]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let got: Vec<Option<f64>> = want.iter().map(|(q, _)| value(ns, q)).collect();
        if want.iter().zip(&got).all(|((_, w), g)| *g == Some(*w)) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Prometheus' answers after 60 s: {:?}",
            want.iter()
                .zip(&got)
                .map(|((q, w), g)| format!("{q}: want {w}, got {g:?}"))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

fn conflist(leases: &Path) -> Value {
    json!({
        "cniVersion": "1.1.0", "name": "metricnet",
        "plugins": [
            {"type": "bridge", "bridge": "cni-met", "isGateway": true, "ipMasq": true,
             "ipam": {"type": "host-local", "dataDir": leases,
                      "ranges": [[{"subnet": "10.77.0.0/24"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

struct Scenario {
    node: Node,
    _state: TempDir,
    _logs: TempDir,
    log_conf: PathBuf,
    log: PathBuf,
}

impl Scenario {
    /// A node namespace (loopback up) with the network `metricnet` and
    /// the call log on (its config's `extra` keys too).
    fn new(tag: &str, extra: Value) -> Scenario {
        let node = Node::new(tag);
        node.ns.ip(&["link", "set", "lo", "up"]);
        let state = TempDir::new(&format!("{tag}-state"));
        let logs = TempDir::new(&format!("{tag}-log"));
        let log = logs.path().join("calls.log");
        let mut conf = json!({"logFile": log});
        if let (Some(c), Some(e)) = (conf.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        let log_conf = logs.write("cni-rs.conf", &conf.to_string());
        node.write_conf(
            "10-metricnet.conflist",
            &conflist(&state.path().join("leases")),
        );
        Scenario {
            node,
            _state: state,
            _logs: logs,
            log_conf,
            log,
        }
    }

    fn cnitool(&self, verb: &str, pod: Option<&Netns>, id: &str) -> PluginOutput {
        let path = pod.map(|p| p.path().display().to_string());
        let mut args = vec![verb, "metricnet"];
        args.extend(path.as_deref());
        let caps =
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
                .to_string();
        let env = [
            ("CNI_RS_CONFIG", self.log_conf.to_str().unwrap()),
            ("CNI_CONTAINERID", id),
            ("CAP_ARGS", caps.as_str()),
        ];
        self.node.cnitool_with(&bin("cnitool"), &args, &env)
    }

    fn node_args(&self) -> Vec<String> {
        vec![
            "--conf-dir".into(),
            self.node.conf_dir.path().display().to_string(),
            "--cache-dir".into(),
            self.node.shared_cache_dir().display().to_string(),
            "--cri-socket".into(),
            "none".into(),
            // The leaked pod died seconds ago.
            "--grace".into(),
            "0".into(),
            "--call-log".into(),
            self.log.display().to_string(),
        ]
    }
}

#[test]
fn prometheus_scrapes_the_scenarios_exact_numbers() {
    if !require_root("prometheus_scrapes_the_scenarios_exact_numbers") {
        return;
    }
    // A small cap: the plugins rotate the log during the scenario.
    let s = Scenario::new("metrics", json!({"logMaxBytes": 2500}));

    // Three pods; one removed, one leaked (its namespace gone, no DEL).
    let pods: Vec<Netns> = ["web", "gone", "lost"]
        .iter()
        .map(|n| Netns::new(&format!("met-{n}")))
        .collect();
    for (pod, id) in pods.iter().zip(["web", "gone", "lost"]) {
        assert_eq!(s.cnitool("add", Some(pod), id).exit_code, 0);
    }
    s.cnitool("del", Some(&pods[1]), "gone").assert_silent_ok();
    run_ok(Command::new("ip").args(["netns", "del", pods[2].name()]));
    s.cnitool("status", None, "status").assert_silent_ok();
    // A line that is not a call's: counted as a read error, skipped.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&s.log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"not a call\n"))
        .expect("append");

    // The metrics once, in the text format, as promtool reads it.
    let mut args = vec!["metrics".to_string()];
    args.extend(s.node_args());
    let once = run_ok(s.node.ns.command(bin("cni-rs")).args(&args));
    let text = String::from_utf8_lossy(&once.stdout).into_owned();
    assert!(
        text.contains(
            "cni_ipam_leaked_addresses{network=\"metricnet\",range=\"10.77.0.1-10.77.0.254\"} 1"
        ),
        "{text}"
    );
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    std::io::Write::write_all(check.stdin.as_mut().unwrap(), text.as_bytes()).unwrap();
    let checked = check.wait_with_output().expect("promtool");
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // The server, and a Prometheus scraping it every second with the
    // alert rules of deploy/ loaded.
    let listen = format!("127.0.0.1:{PORT}");
    let mut serve: Vec<String> = vec!["metrics".into(), "--listen".into(), listen];
    serve.extend(s.node_args());
    let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
    let _server = Background::start(&s.node.ns, bin("cni-rs").to_str().unwrap(), &serve);
    let prom_dir = TempDir::new("metrics-prom");
    let rules = workspace_root().join("deploy/prometheus-rules.yaml");
    let prom_conf = prom_dir.write(
        "prometheus.yml",
        &format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [{rules:?}]\n\
             scrape_configs:\n  - job_name: cni\n    static_configs: [{{targets: ['127.0.0.1:{PORT}']}}]\n",
        ),
    );
    let tsdb = prom_dir.path().join("data");
    let _prometheus = Background::start(
        &s.node.ns,
        "prometheus",
        &[
            &format!("--config.file={}", prom_conf.display()),
            &format!("--storage.tsdb.path={}", tsdb.display()),
            "--web.listen-address=127.0.0.1:9090",
        ],
    );
    let ns = &s.node.ns;
    let range = r#"network="metricnet",range="10.77.0.1-10.77.0.254""#;
    let q = |metric: &str| format!("{metric}{{{range}}}");
    wait_for_values(
        ns,
        &[
            (&q("cni_ipam_pool_addresses"), 254.0),
            (&q("cni_ipam_reserved_addresses"), 1.0),
            (&q("cni_ipam_used_addresses"), 2.0),
            (&q("cni_ipam_leaked_addresses"), 1.0),
            (r#"cni_attachments{network="metricnet",state="live"}"#, 1.0),
            (
                r#"cni_attachments{network="metricnet",state="leaked"}"#,
                1.0,
            ),
            (
                r#"cni_plugin_calls_total{plugin="bridge",command="ADD",code="0"}"#,
                3.0,
            ),
            (
                r#"cni_plugin_calls_total{plugin="host-local",command="ADD",code="0"}"#,
                3.0,
            ),
            (
                r#"cni_plugin_calls_total{plugin="portmap",command="DEL",code="0"}"#,
                1.0,
            ),
            (
                r#"cni_plugin_call_duration_seconds_count{plugin="bridge",command="ADD"}"#,
                3.0,
            ),
            (r#"cni_network_status_up{network="metricnet"}"#, 1.0),
            (r#"cni_metrics_read_errors_total{source="call_log"}"#, 1.0),
        ],
    );
    let rotated = s.log.with_extension("log.1");
    assert!(rotated.exists(), "the plugins rotated the log once already");

    // A fourth pod, read incrementally across the next rotation: each call
    // once.
    let fourth = Netns::new("met-four");
    assert_eq!(s.cnitool("add", Some(&fourth), "four").exit_code, 0);
    // A call that fails: CHECK of a pod never added.
    let never = Netns::new("met-never");
    let out = s.cnitool("check", Some(&never), "never");
    assert_ne!(out.exit_code, 0, "{out:?}");
    wait_for_values(
        ns,
        &[
            (
                r#"cni_plugin_calls_total{plugin="bridge",command="ADD",code="0"}"#,
                4.0,
            ),
            (
                r#"sum(cni_plugin_calls_total{plugin="bridge",command="CHECK",code!="0"})"#,
                1.0,
            ),
            (&q("cni_ipam_used_addresses"), 3.0),
        ],
    );

    // gc takes the leaked pod: its lease (and the rest) by kind.
    let mut gc = vec!["gc".to_string(), "--apply".to_string()];
    gc.extend(s.node_args().into_iter().take(8));
    let out = s.node.cnitool_with(
        &bin("cni-rs"),
        &gc.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    wait_for_values(
        ns,
        &[
            (r#"cni_gc_collected_total{kind="lease"}"#, 1.0),
            (r#"cni_gc_collected_total{kind="cache"}"#, 1.0),
            (&q("cni_ipam_leaked_addresses"), 0.0),
            (&q("cni_ipam_used_addresses"), 2.0),
            (
                r#"cni_attachments{network="metricnet",state="leaked"}"#,
                0.0,
            ),
        ],
    );
    assert!(value(ns, "cni_gc_last_run_timestamp_seconds").is_some_and(|t| t > 1.7e9));

    // The alert rules, loaded: five, in group cni-rs.
    let rules = prometheus_api(ns, "/api/v1/rules", None).expect("rules");
    let groups = rules["data"]["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 1, "{rules}");
    assert_eq!(groups[0]["name"], "cni-rs");
    assert_eq!(
        groups[0]["rules"].as_array().map(Vec::len),
        Some(5),
        "{rules}"
    );
    // Every query of the dashboard is one Prometheus accepts.
    let dashboard: Value = serde_json::from_slice(
        &std::fs::read(workspace_root().join("deploy/grafana-dashboard.json")).expect("dashboard"),
    )
    .expect("JSON");
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"]
                .as_str()
                .expect("expr")
                .replace("$instance", ".*")
                .replace("$__rate_interval", "1m");
            let v = prometheus_api(ns, "/api/v1/query", Some(&expr));
            assert_eq!(
                v.as_ref().map(|v| v["status"].clone()),
                Some(json!("success")),
                "{expr}: {v:?}"
            );
            queries += 1;
        }
    }
    assert!(queries >= 8, "{queries}");
}

/// `promtool check rules` on deploy/prometheus-rules.yaml.
#[test]
fn the_alert_rules_pass_promtool() {
    let rules = workspace_root().join("deploy/prometheus-rules.yaml");
    let out = run_ok(
        Command::new("promtool")
            .args(["check", "rules"])
            .arg(&rules),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("SUCCESS: 5 rules found"), "{text}");
}

/// The CRI runtime goes away between two scrapes: the second serves the
/// pools' sizes and used addresses, counts the read error, and has no
/// leaked addresses and no attachments by state, whose judgement needs
/// the runtime: never the first scrape's values again.
#[test]
fn a_scrape_without_the_cri_runtime_serves_no_old_judgement() {
    let test = "a_scrape_without_the_cri_runtime_serves_no_old_judgement";
    if !require_root(test) || step_skipped("containerd") {
        return;
    }
    let s = Scenario::new("metcri", json!({}));
    let pod = Netns::new("metcri-web");
    assert_eq!(s.cnitool("add", Some(&pod), "web").exit_code, 0);
    // A containerd of its own (no CNI config: it only answers CRI).
    let runtime_conf = TempDir::new("metcri-ctd-conf");
    let mut containerd = tests::containerd::Containerd::start(&s.node.ns, runtime_conf.path(), &[]);
    let socket = containerd.socket();
    let mut serve: Vec<String> = vec![
        "metrics".into(),
        "--listen".into(),
        format!("127.0.0.1:{PORT}"),
    ];
    serve.extend(s.node_args());
    let cri = serve
        .iter()
        .position(|a| a == "--cri-socket")
        .expect("--cri-socket")
        + 1;
    serve[cri] = socket.display().to_string();
    let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
    let _server = Background::start(&s.node.ns, bin("cni-rs").to_str().unwrap(), &serve);
    let scrape = || {
        let (status, body) = http_request(
            &s.node.ns,
            "127.0.0.1",
            PORT,
            "GET /metrics HTTP/1.0\r\n\r\n",
        )
        .expect("a scrape");
        assert_eq!(status, "HTTP/1.1 200 OK", "{test}: {body}");
        body
    };
    wait_for("the metrics server", || {
        http_request(
            &s.node.ns,
            "127.0.0.1",
            PORT,
            "GET /healthz HTTP/1.0\r\n\r\n",
        )
        .is_some()
    });
    const RANGE: &str = "network=\"metricnet\",range=\"10.77.0.1-10.77.0.254\"";
    let pools = [
        format!("cni_ipam_pool_addresses{{{RANGE}}} 254.0"),
        format!("cni_ipam_used_addresses{{{RANGE}}} 1"),
    ];
    let judged = [
        format!("cni_ipam_leaked_addresses{{{RANGE}}} 0"),
        "cni_attachments{network=\"metricnet\",state=\"live\"} 1".to_string(),
    ];
    let first = scrape();
    for line in pools.iter().chain(&judged) {
        assert!(first.contains(line.as_str()), "{test}: {line} in\n{first}");
    }
    assert!(!first.contains("source=\"cri\""), "{test}: {first}");

    containerd.kill();
    let _ = std::fs::remove_file(&socket);
    let second = scrape();
    for line in &pools {
        assert!(
            second.contains(line.as_str()),
            "{test}: {line} after the runtime went, in\n{second}"
        );
    }
    for family in ["cni_ipam_leaked_addresses{", "cni_attachments{"] {
        assert!(
            !second.contains(family),
            "{test}: {family} without the runtime's answer, in\n{second}"
        );
    }
    assert!(
        second.contains("cni_metrics_read_errors_total{source=\"cri\"} 1"),
        "{test}: {second}"
    );
    s.cnitool("del", Some(&pod), "web").assert_silent_ok();
}
