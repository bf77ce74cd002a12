//! The bandwidth plugin in real namespaces: a node namespace plays the host
//! (the plugin runs there), pods beside it are wired with a veth pair made
//! here with `ip` (the bridge plugin's job in a real chain), and the
//! prevResult names both ends. State is read back with `tc -j`/`ip -j`
//! inside the node; traffic is real TCP between a pod and the node.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use tests::*;

const NET: &str = "bwnet";
/// 8 Mbit/s = 1e6 bytes/s; a 800 kbit (100 kB) bucket: 100 ms, 1562500 ticks.
const RATE: u64 = 8_000_000;
const BURST: u64 = 800_000;

/// A node with pods, each wired to it by a veth: `veth<i>` (10.200.<i>.1/24)
/// in the node, `eth0` (10.200.<i>.2/24) in the pod.
struct Cluster {
    node: Node,
    pods: Vec<Netns>,
}

impl Cluster {
    fn new(tag: &str, pods: usize) -> Cluster {
        let node = Node::new(&format!("bw{tag}"));
        node.ns.ip(&["link", "set", "lo", "up"]);
        let mut c = Cluster {
            node,
            pods: Vec::new(),
        };
        for _ in 0..pods {
            c.add_pod(tag);
        }
        c
    }

    fn add_pod(&mut self, tag: &str) -> usize {
        let i = self.pods.len();
        let pod = Netns::new(&format!("pod{i}-bw{tag}"));
        let veth = format!("veth{i}");
        self.node.ns.ip(&[
            "link",
            "add",
            &veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pod.name(),
        ]);
        self.node
            .ns
            .ip(&["addr", "add", &format!("10.200.{i}.1/24"), "dev", &veth]);
        self.node.ns.ip(&["link", "set", &veth, "up"]);
        pod.ip(&["addr", "add", &format!("10.200.{i}.2/24"), "dev", "eth0"]);
        pod.ip(&["link", "set", "eth0", "up"]);
        pod.ip(&["link", "set", "lo", "up"]);
        self.pods.push(pod);
        i
    }

    fn netns(&self, i: usize) -> String {
        self.pods[i].path().to_str().unwrap().to_string()
    }

    /// The result of the plugin before bandwidth (what bridge returns).
    fn prev_result(&self, i: usize) -> Value {
        json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": format!("veth{i}")}, {"name": "eth0", "sandbox": self.netns(i)}],
            "ips": [{"address": format!("10.200.{i}.2/24"), "gateway": format!("10.200.{i}.1"), "interface": 1}],
            "dns": {}})
    }

    /// A config with the keys of `bw` and pod `i`'s prevResult.
    fn conf(&self, i: usize, bw: Value) -> String {
        let mut c = json!({"cniVersion": "1.0.0", "name": NET, "type": "bandwidth",
            "prevResult": self.prev_result(i)});
        c.as_object_mut()
            .unwrap()
            .extend(bw.as_object().unwrap().clone());
        c.to_string()
    }

    /// Calls `plugin` in the node for pod `i`'s eth0 as container `cid`.
    fn call(
        &self,
        plugin: &std::path::Path,
        cmd: &str,
        cid: &str,
        i: usize,
        conf: &str,
    ) -> PluginOutput {
        self.call_env(plugin, cmd, cid, &self.netns(i), conf, &[])
    }

    fn call_env(
        &self,
        plugin: &std::path::Path,
        cmd: &str,
        cid: &str,
        netns: &str,
        conf: &str,
        extra: &[(&str, &str)],
    ) -> PluginOutput {
        let mut env = vec![
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ];
        env.extend_from_slice(extra);
        call_plugin(Some(&self.node.ns), plugin, &env, conf)
    }

    fn ours(&self, cmd: &str, cid: &str, i: usize, conf: &str) -> PluginOutput {
        self.call(&bin("bandwidth"), cmd, cid, i, conf)
    }

    /// `tc -j -raw qdisc show dev <dev>` in the node.
    fn qdiscs(&self, dev: &str) -> Vec<Value> {
        tc_json(&self.node.ns, &["-raw", "qdisc", "show", "dev", dev])
    }

    /// The qdisc of `dev` whose handle or parent is `at` ("root" for the root).
    fn qdisc(&self, dev: &str, at: &str) -> Option<Value> {
        self.qdiscs(dev).into_iter().find(|q| {
            if at == "root" {
                q["root"] == true
            } else {
                q["parent"] == at
            }
        })
    }

    /// The filters on the ingress hook of `dev`.
    fn ingress_filters(&self, dev: &str) -> Vec<Value> {
        tc_json(&self.node.ns, &["filter", "show", "dev", dev, "ingress"])
    }

    /// Every qdisc and IFB of the node, to compare before and after.
    fn snapshot(&self) -> (Vec<Value>, Vec<Value>) {
        let qdiscs = tc_json(&self.node.ns, &["-raw", "qdisc", "show"]);
        let ifbs = self.ifbs();
        (qdiscs, ifbs)
    }

    fn ifbs(&self) -> Vec<Value> {
        self.node
            .ns
            .ip_json(&["-d", "link", "show", "type", "ifb"])
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

fn tc_json(ns: &Netns, args: &[&str]) -> Vec<Value> {
    let mut a = vec!["-j"];
    a.extend_from_slice(args);
    let out = run_ok(ns.command("tc").args(&a));
    let s = String::from_utf8_lossy(&out.stdout);
    if s.trim().is_empty() {
        return vec![];
    }
    serde_json::from_str::<Value>(&s)
        .unwrap_or_else(|e| panic!("tc {a:?}: {e}: {s}"))
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// `bwp` + 12 hex of sha512(network + container ID), computed by sha512sum.
fn expected_ifb(net: &str, cid: &str) -> String {
    let out =
        run_ok(Command::new("sh").args(["-c", &format!("printf %s '{net}{cid}' | sha512sum")]));
    format!("bwp{}", &String::from_utf8_lossy(&out.stdout)[..12])
}

/// The TBF `tc -j -raw` shows for rate/burst in bits, as both plugins
/// compute it for round numbers (rate and burst in bytes, 25 ms latency).
fn expected_tbf_options(rate_bits: u64, burst_bits: u64) -> Value {
    let rate = rate_bits / 8;
    let burst = burst_bits / 8;
    // burst / rate seconds in 64 ns ticks.
    let ticks = burst * 1_000_000_000 / rate / 64;
    json!({"rate": rate, "burst": burst, "burst_raw": format!("{ticks:x}"),
        "lat": 25000, "limit": rate * 25 / 1000 + burst})
}

fn bw_both() -> Value {
    json!({"ingressRate": RATE, "ingressBurst": BURST, "egressRate": RATE, "egressBurst": BURST})
}

/// Asserts the full shaping of pod `i` (container `cid`) is in place.
fn assert_shaped(c: &Cluster, i: usize, cid: &str) -> Value {
    let veth = format!("veth{i}");
    let ifb_name = expected_ifb(NET, cid);
    let root = c.qdisc(&veth, "root").expect("root qdisc");
    assert_eq!(
        (root["kind"].as_str(), root["handle"].as_str()),
        (Some("tbf"), Some("1:"))
    );
    assert_eq!(root["options"], expected_tbf_options(RATE, BURST));
    let ingress = c.qdisc(&veth, "ffff:fff1").expect("ingress qdisc");
    assert_eq!(
        (ingress["kind"].as_str(), ingress["handle"].as_str()),
        (Some("ingress"), Some("ffff:"))
    );
    let filters: Vec<Value> = c
        .ingress_filters(&veth)
        .into_iter()
        .filter(|f| f["options"]["actions"].is_array())
        .collect();
    assert_eq!(filters.len(), 1, "{filters:?}");
    let f = &filters[0];
    assert_eq!(
        (
            f["kind"].as_str(),
            f["protocol"].as_str(),
            f["pref"].as_u64()
        ),
        (Some("u32"), Some("all"), Some(1))
    );
    assert_eq!(f["options"]["flowid"], "1:1");
    assert_eq!(
        f["options"]["match"],
        json!({"value": "0", "mask": "0", "offmask": "", "off": 0})
    );
    let actions = f["options"]["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(
        (
            actions[0]["kind"].as_str(),
            actions[0]["mirred_action"].as_str(),
            actions[0]["direction"].as_str()
        ),
        (Some("mirred"), Some("redirect"), Some("egress"))
    );
    assert_eq!(actions[0]["to_dev"], ifb_name.as_str());
    assert_eq!(actions[0]["control_action"]["type"], "stolen");

    let ifb = c.node.ns.link(&ifb_name).expect("ifb");
    let veth_link = c.node.ns.link(&veth).unwrap();
    assert_eq!(ifb["linkinfo"]["info_kind"], "ifb");
    assert_eq!(ifb["mtu"], veth_link["mtu"]);
    assert!(
        ifb.get("txqlen").is_none_or(|q| q == 0),
        "txqueuelen 0: {ifb}"
    );
    assert_eq!(ifb["ifalias"], format!("cni-bandwidth:{cid}:eth0"));
    assert!(c.node.ns.link_is_up(&ifb_name));
    let ifb_root = c.qdisc(&ifb_name, "root").expect("ifb root qdisc");
    assert_eq!(
        (ifb_root["kind"].as_str(), ifb_root["handle"].as_str()),
        (Some("tbf"), Some("1:"))
    );
    assert_eq!(ifb_root["options"], expected_tbf_options(RATE, BURST));
    ifb
}

/// Asserts nothing of ours is left on pod `i`'s veth and no IFB remains.
fn assert_clean(c: &Cluster, i: usize) {
    let veth = format!("veth{i}");
    let qdiscs = c.qdiscs(&veth);
    assert_eq!(qdiscs.len(), 1, "{qdiscs:?}");
    assert_eq!(qdiscs[0]["kind"], "noqueue");
    assert!(c.ingress_filters(&veth).is_empty());
    assert_eq!(c.ifbs(), Vec::<Value>::new());
}

const SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
s.settimeout(60)
print("ready", flush=True)
c, _ = s.accept()
c.settimeout(60)
n = 0
while True:
    b = c.recv(65536)
    if not b:
        break
    n += len(b)
c.sendall(str(n).encode())
c.close()
"#;

const CLIENT: &str = r#"
import socket, sys, time
n = int(sys.argv[3])
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
t = time.monotonic()
buf = b"x" * 65536
sent = 0
while sent < n:
    k = min(len(buf), n - sent)
    s.sendall(buf[:k])
    sent += k
s.shutdown(socket.SHUT_WR)
r = s.recv(64)
print(r.decode(), time.monotonic() - t)
"#;

/// Sends `bytes` over TCP from `from` to `to_ip` (a server in `to`):
/// returns the bytes the server counted and the seconds from connect to
/// the server's answer (which includes the whole transfer).
fn transfer(from: &Netns, to: &Netns, to_ip: &str, bytes: u64) -> (u64, f64) {
    let mut server = to
        .command("python3")
        .args(["-c", SERVER, to_ip, "5201"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 server");
    let mut ready = String::new();
    BufReader::new(server.stdout.as_mut().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready");
    let out =
        run_ok(
            from.command("python3")
                .args(["-c", CLIENT, to_ip, "5201", &bytes.to_string()]),
        );
    assert!(server.wait().unwrap().success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace();
    let n: u64 = parts.next().unwrap().parse().unwrap();
    let secs: f64 = parts.next().unwrap().parse().unwrap();
    (n, secs)
}

/// Shaping is an upper bound: in `secs` a TBF lets through at most the
/// bucket plus the rate times the time (the TCP payload is less than what
/// the TBF counts). 10% margin for clock reading.
fn assert_within_rate(what: &str, n: u64, secs: f64) {
    let allowed = (BURST / 8) as f64 + (RATE / 8) as f64 * secs * 1.1;
    eprintln!(
        "{what}: {n} bytes in {secs:.2} s = {:.2} Mbit/s (shaped to {} Mbit/s)",
        n as f64 * 8.0 / secs / 1e6,
        RATE / 1_000_000
    );
    assert!(
        (n as f64) <= allowed,
        "{what}: {n} bytes in {secs} s exceeds {allowed}"
    );
}

#[test]
fn bandwidth_shapes_real_traffic_both_ways_and_del_removes_everything() {
    if !require_root("bandwidth_shapes_real_traffic_both_ways_and_del_removes_everything") {
        return;
    }
    let c = Cluster::new("traffic", 1);
    let conf = c.conf(0, bw_both());
    let out = c.ours("ADD", "ctr-1", 0, &conf);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let ifb = assert_shaped(&c, 0, "ctr-1");
    let mut want = c.prev_result(0);
    want["interfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": expected_ifb(NET, "ctr-1"), "mac": ifb["address"]}));
    assert_eq!(out.json(), want);

    // 2.5 MB each way at 1 MB/s: about 2.4 s each.
    let (n, secs) = transfer(&c.node.ns, &c.pods[0], "10.200.0.2", 2_500_000);
    assert_eq!(n, 2_500_000);
    assert_within_rate("ingress (node to pod)", n, secs);
    let (n, secs) = transfer(&c.pods[0], &c.node.ns, "10.200.0.1", 2_500_000);
    assert_eq!(n, 2_500_000);
    assert_within_rate("egress (pod to node)", n, secs);
    // The egress bytes went through the IFB's TBF.
    let stats = tc_json(
        &c.node.ns,
        &["-s", "qdisc", "show", "dev", &expected_ifb(NET, "ctr-1")],
    );
    assert!(stats[0]["bytes"].as_u64().unwrap() > 2_500_000, "{stats:?}");

    let out = c.ours("CHECK", "ctr-1", 0, &conf);
    out.assert_silent_ok();

    for _ in 0..2 {
        let out = c.ours("DEL", "ctr-1", 0, &conf);
        out.assert_silent_ok();
        assert_clean(&c, 0);
    }
}

#[test]
fn bandwidth_unshaped_direction_for_contrast() {
    if !require_root("bandwidth_unshaped_direction_for_contrast") {
        return;
    }
    // Only ingress shaped: no IFB, no ingress qdisc, egress unshaped.
    let c = Cluster::new("contrast", 1);
    let conf = c.conf(0, json!({"ingressRate": RATE, "ingressBurst": BURST}));
    let out = c.ours("ADD", "ctr-1", 0, &conf);
    assert_eq!(out.json(), c.prev_result(0), "no IFB in the result");
    assert_eq!(
        c.qdisc("veth0", "root").unwrap()["options"],
        expected_tbf_options(RATE, BURST)
    );
    assert_eq!(c.qdisc("veth0", "ffff:fff1"), None);
    assert!(c.ifbs().is_empty());
    let (n, secs) = transfer(&c.pods[0], &c.node.ns, "10.200.0.1", 2_500_000);
    eprintln!("unshaped egress: {:.1} Mbit/s", n as f64 * 8.0 / secs / 1e6);
    let (n, secs) = transfer(&c.node.ns, &c.pods[0], "10.200.0.2", 2_500_000);
    assert_within_rate("ingress only", n, secs);
    assert_eq!(c.ours("CHECK", "ctr-1", 0, &conf).exit_code, 0);
    assert_eq!(c.ours("DEL", "ctr-1", 0, &conf).exit_code, 0);
    assert_clean(&c, 0);
}

#[test]
fn bandwidth_add_twice_is_idempotent() {
    if !require_root("bandwidth_add_twice_is_idempotent") {
        return;
    }
    let c = Cluster::new("twice", 1);
    let conf = c.conf(0, bw_both());
    // A root qdisc of another kind holding handle 1: (what the Go plugin's
    // short-lived HTB version left) is replaced, not an error.
    run_ok(c.node.ns.command("tc").args([
        "qdisc", "add", "dev", "veth0", "root", "handle", "1:", "htb",
    ]));
    let first = c.ours("ADD", "ctr-1", 0, &conf);
    assert_eq!(first.exit_code, 0, "{first:?}");
    let ifb = assert_shaped(&c, 0, "ctr-1");
    let second = c.ours("ADD", "ctr-1", 0, &conf);
    assert_eq!(second.exit_code, 0, "{second:?}");
    assert_eq!(second.json(), first.json());
    let again = assert_shaped(&c, 0, "ctr-1");
    assert_eq!(again["ifindex"], ifb["ifindex"], "the IFB was reused");
    // A retried ADD after a change of rate replaces the TBFs in place.
    let faster = c.conf(0, json!({"ingressRate": 2 * RATE, "ingressBurst": BURST, "egressRate": 2 * RATE, "egressBurst": BURST}));
    assert_eq!(c.ours("ADD", "ctr-1", 0, &faster).exit_code, 0);
    assert_eq!(
        c.qdisc("veth0", "root").unwrap()["options"],
        expected_tbf_options(2 * RATE, BURST)
    );
    assert_eq!(
        c.qdisc(&expected_ifb(NET, "ctr-1"), "root").unwrap()["options"],
        expected_tbf_options(2 * RATE, BURST)
    );
    assert_eq!(
        c.ingress_filters("veth0")
            .iter()
            .filter(|f| f["options"]["actions"].is_array())
            .count(),
        1
    );
    assert_eq!(c.ours("DEL", "ctr-1", 0, &conf).exit_code, 0);
    assert_clean(&c, 0);
}

#[test]
fn bandwidth_shares_a_foreign_ingress_or_clsact_qdisc() {
    if !require_root("bandwidth_shares_a_foreign_ingress_or_clsact_qdisc") {
        return;
    }
    let c = Cluster::new("foreign", 2);
    let tc = |args: &[&str]| run_ok(c.node.ns.command("tc").args(args));
    // veth0: someone's ingress qdisc with a filter of theirs (after ours).
    tc(&["qdisc", "add", "dev", "veth0", "ingress"]);
    tc(&[
        "filter", "add", "dev", "veth0", "parent", "ffff:", "protocol", "ip", "prio", "100", "u32",
        "match", "u32", "0", "0", "flowid", "1:2",
    ]);
    // veth1: a clsact qdisc.
    tc(&["qdisc", "add", "dev", "veth1", "clsact"]);
    for i in 0..2 {
        let conf = c.conf(i, json!({"egressRate": RATE, "egressBurst": BURST}));
        let cid = format!("ctr-{i}");
        let out = c.ours("ADD", &cid, i, &conf);
        assert_eq!(out.exit_code, 0, "{out:?}");
        let filters = c.ingress_filters(&format!("veth{i}"));
        let redirects: Vec<&Value> = filters
            .iter()
            .filter(|f| f["options"]["actions"][0]["kind"] == "mirred")
            .collect();
        assert_eq!(redirects.len(), 1, "{filters:?}");
        assert_eq!(
            redirects[0]["options"]["actions"][0]["to_dev"],
            expected_ifb(NET, &cid)
        );
        // Traffic still shaped through the shared hook.
        if i == 0 {
            let (n, secs) = transfer(&c.pods[0], &c.node.ns, "10.200.0.1", 1_500_000);
            assert_within_rate("egress via a shared ingress qdisc", n, secs);
        }
        assert_eq!(c.ours("CHECK", &cid, i, &conf).exit_code, 0);
        assert_eq!(c.ours("DEL", &cid, i, &conf).exit_code, 0);
    }
    // Theirs stays: the ingress qdisc with its prio-100 filter, the clsact.
    let ingress = c.qdisc("veth0", "ffff:fff1").unwrap();
    assert_eq!(ingress["kind"], "ingress");
    let left = c.ingress_filters("veth0");
    assert!(left.iter().all(|f| f["pref"] == 100), "{left:?}");
    assert!(
        left.iter().any(|f| f["options"]["flowid"] == "1:2"),
        "{left:?}"
    );
    assert_eq!(c.qdisc("veth1", "ffff:fff1").unwrap()["kind"], "clsact");
    assert!(c.ingress_filters("veth1").is_empty());
    assert!(c.ifbs().is_empty());
}

#[test]
fn bandwidth_rejects_bad_values_with_code_7_and_installs_nothing() {
    if !require_root("bandwidth_rejects_bad_values_with_code_7_and_installs_nothing") {
        return;
    }
    let c = Cluster::new("invalid", 1);
    let before = c.snapshot();
    let cases = [
        (
            json!({"ingressRate": RATE}),
            "ingressBurst",
            "must be set (and not 0) when ingressRate is set",
        ),
        (
            json!({"egressBurst": BURST}),
            "egressRate",
            "must be set (and not 0) when egressBurst is set",
        ),
        (
            json!({"ingressRate": 0, "ingressBurst": BURST}),
            "ingressRate",
            "must be set",
        ),
        (
            json!({"egressRate": -1, "egressBurst": BURST}),
            "egressRate",
            "-1 is negative",
        ),
        (
            json!({"ingressRate": RATE, "ingressBurst": 34_359_738_360u64}),
            "ingressBurst",
            "cannot be 4 GiB or more",
        ),
        (
            json!({"egressRate": RATE, "egressBurst": 34_359_738_352u64}),
            "egressBurst",
            "more than the kernel's 32 bits hold",
        ),
        (
            json!({"ingressRate": "fast", "ingressBurst": BURST}),
            "ingressRate",
            "is not a number",
        ),
        (
            json!({"runtimeConfig": {"bandwidth": {"egressRate": RATE}}}),
            "runtimeConfig.bandwidth.egressBurst",
            "must be set",
        ),
        // Egress valid, ingress not: nothing at all is installed.
        (
            json!({"egressRate": RATE, "egressBurst": BURST, "ingressRate": 4, "ingressBurst": BURST}),
            "ingressRate",
            "4 bits per second is less than one byte per second",
        ),
    ];
    for (bw, key, msg) in cases {
        let out = c.ours("ADD", "ctr-1", 0, &c.conf(0, bw.clone()));
        out.assert_error(7, &format!("invalid network config: {key}: "));
        out.assert_error(7, msg);
        assert_eq!(c.snapshot(), before, "{bw}");
    }
    // CHECK validates the same way.
    c.ours(
        "CHECK",
        "ctr-1",
        0,
        &c.conf(0, json!({"ingressRate": RATE})),
    )
    .assert_error(7, "ingressBurst");
}

#[test]
fn bandwidth_without_settings_passes_prev_result_through() {
    if !require_root("bandwidth_without_settings_passes_prev_result_through") {
        return;
    }
    let c = Cluster::new("passthru", 1);
    let before = c.snapshot();
    let out = c.ours(
        "ADD",
        "ctr-1",
        0,
        &c.conf(0, json!({"capabilities": {"bandwidth": true}})),
    );
    assert_eq!(out.json(), c.prev_result(0));
    // 0 everywhere means "no limit", as in Go.
    let out = c.ours(
        "ADD",
        "ctr-1",
        0,
        &c.conf(0, json!({"ingressRate": 0, "ingressBurst": 0})),
    );
    assert_eq!(out.json(), c.prev_result(0));
    // runtimeConfig without bandwidth.
    let out = c.ours(
        "ADD",
        "ctr-1",
        0,
        &c.conf(0, json!({"runtimeConfig": {"portMappings": []}})),
    );
    assert_eq!(out.json(), c.prev_result(0));
    assert_eq!(c.snapshot(), before);
    // 0.3.1 keeps the result's shape.
    let mut conf: Value = serde_json::from_str(&c.conf(0, json!({}))).unwrap();
    conf["cniVersion"] = json!("0.3.1");
    conf["prevResult"]["cniVersion"] = json!("0.3.1");
    let out = c.ours("ADD", "ctr-1", 0, &conf.to_string());
    assert_eq!(out.json()["ips"][0]["version"], "4");
    assert_eq!(out.json()["cniVersion"], "0.3.1");
}

#[test]
fn bandwidth_runtime_config_is_used_when_no_top_level_key_is_set() {
    if !require_root("bandwidth_runtime_config_is_used_when_no_top_level_key_is_set") {
        return;
    }
    let c = Cluster::new("rtconf", 1);
    let conf = c.conf(
        0,
        json!({"capabilities": {"bandwidth": true},
        "runtimeConfig": {"bandwidth": {"ingressRate": RATE, "ingressBurst": BURST}}}),
    );
    assert_eq!(c.ours("ADD", "ctr-1", 0, &conf).exit_code, 0);
    assert_eq!(
        c.qdisc("veth0", "root").unwrap()["options"],
        expected_tbf_options(RATE, BURST)
    );
    // CHECK names the runtimeConfig key when its value differs.
    let other = c.conf(
        0,
        json!({"runtimeConfig": {"bandwidth": {"ingressRate": 2 * RATE, "ingressBurst": BURST}}}),
    );
    c.ours("CHECK", "ctr-1", 0, &other).assert_error(
        102,
        "runtimeConfig.bandwidth.ingressRate 16000000 asks for 2000000",
    );
    // containerd's "unlimited" burst (MaxUint32 bits) at 1 Mbit/s: a bucket
    // of ~4295 s, past the 32-bit ticks field (Go wraps it): the kernel
    // gets the burst in bytes.
    let big = c.conf(0, json!({"runtimeConfig": {"bandwidth": {"ingressRate": 1_000_000, "ingressBurst": 4_294_967_295u64}}}));
    assert_eq!(c.ours("ADD", "ctr-1", 0, &big).exit_code, 0);
    let q = c.qdisc("veth0", "root").unwrap();
    assert_eq!(
        (
            q["options"]["rate"].as_u64(),
            q["options"]["limit"].as_u64()
        ),
        (Some(125_000), Some(3125 + 536_870_911))
    );
    assert_eq!(c.ours("CHECK", "ctr-1", 0, &big).exit_code, 0);
    assert_eq!(c.ours("DEL", "ctr-1", 0, &conf).exit_code, 0);
    assert_clean(&c, 0);
}

#[test]
fn bandwidth_check_reports_what_differs_with_code_102() {
    if !require_root("bandwidth_check_reports_what_differs_with_code_102") {
        return;
    }
    let c = Cluster::new("check", 1);
    let conf = c.conf(0, bw_both());
    let ifb = expected_ifb(NET, "ctr-1");
    let tc = |args: &[&str]| run_ok(c.node.ns.command("tc").args(args));
    let readd = || assert_eq!(c.ours("ADD", "ctr-1", 0, &conf).exit_code, 0);
    readd();
    assert_eq!(c.ours("CHECK", "ctr-1", 0, &conf).exit_code, 0);

    tc(&["qdisc", "del", "dev", "veth0", "root"]);
    c.ours("CHECK", "ctr-1", 0, &conf).assert_error(
        102,
        "ingress: \"veth0\" has no tbf 1: at its root (found noqueue 0:)",
    );
    readd();
    tc(&[
        "qdisc", "replace", "dev", "veth0", "root", "handle", "1:", "tbf", "rate", "8mbit",
        "burst", "50kb", "latency", "25ms",
    ]);
    c.ours("CHECK", "ctr-1", 0, &conf).assert_error(
        102,
        "ingress: the tbf of \"veth0\" has a bucket of 51200 bytes",
    );
    readd();
    tc(&[
        "qdisc", "replace", "dev", "veth0", "root", "handle", "1:", "tbf", "rate", "8mbit",
        "burst", "100000b", "limit", "99999",
    ]);
    c.ours("CHECK", "ctr-1", 0, &conf)
        .assert_error(102, "ingress: the tbf of \"veth0\" has limit 99999 bytes, ingressRate and ingressBurst ask for 125000");
    readd();
    tc(&["qdisc", "del", "dev", &ifb, "root"]);
    c.ours("CHECK", "ctr-1", 0, &conf).assert_error(
        102,
        &format!("egress: \"{ifb}\" has no tbf 1: at its root (found noqueue 0:)"),
    );
    readd();
    tc(&["qdisc", "del", "dev", "veth0", "ingress"]);
    c.ours("CHECK", "ctr-1", 0, &conf)
        .assert_error(102, "egress: \"veth0\" has no ingress qdisc");
    readd();
    run_ok(c.node.ns.command("ip").args(["link", "set", &ifb, "down"]));
    c.ours("CHECK", "ctr-1", 0, &conf)
        .assert_error(102, &format!("egress: the ifb \"{ifb}\" is down"));
    readd();
    run_ok(c.node.ns.command("ip").args(["link", "del", &ifb]));
    c.ours("CHECK", "ctr-1", 0, &conf)
        .assert_error(102, &format!("egress: the ifb \"{ifb}\" is missing"));
    readd();
    let slower = c.conf(0, json!({"egressRate": RATE / 2, "egressBurst": BURST}));
    c.ours("CHECK", "ctr-1", 0, &slower)
        .assert_error(102, "egress: the tbf of");
    c.ours("CHECK", "ctr-1", 0, &slower).assert_error(
        102,
        "has rate 1000000 bytes/s, egressRate 4000000 asks for 500000",
    );
    // A re-ADD after the hand edits left exactly one redirect.
    assert_shaped(&c, 0, "ctr-1");
    assert_eq!(c.ours("CHECK", "ctr-1", 0, &conf).exit_code, 0);
    assert_eq!(c.ours("DEL", "ctr-1", 0, &conf).exit_code, 0);
    assert_clean(&c, 0);
}

#[test]
fn bandwidth_del_succeeds_when_the_namespace_or_the_ifb_is_gone() {
    if !require_root("bandwidth_del_succeeds_when_the_namespace_or_the_ifb_is_gone") {
        return;
    }
    let mut c = Cluster::new("delgone", 2);
    let conf0 = c.conf(0, bw_both());
    let conf1 = c.conf(1, bw_both());
    assert_eq!(c.ours("ADD", "ctr-0", 0, &conf0).exit_code, 0);
    assert_eq!(c.ours("ADD", "ctr-1", 1, &conf1).exit_code, 0);
    // Pod 0's namespace goes away (its veth with it): DEL removes the IFB.
    let netns0 = c.netns(0);
    drop(c.pods.remove(0));
    let out = c.call_env(&bin("bandwidth"), "DEL", "ctr-0", &netns0, &conf0, &[]);
    out.assert_silent_ok();
    assert!(c.node.ns.link(&expected_ifb(NET, "ctr-0")).is_none());
    let out = c.call_env(&bin("bandwidth"), "DEL", "ctr-0", "", &conf0, &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    // Pod 1's IFB deleted by hand: DEL still clears its veth (the dangling
    // redirect would drop every packet) and succeeds.
    run_ok(
        c.node
            .ns
            .command("ip")
            .args(["link", "del", &expected_ifb(NET, "ctr-1")]),
    );
    let out = c.call_env(&bin("bandwidth"), "DEL", "ctr-1", &c.netns(0), &conf1, &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let qdiscs = c.qdiscs("veth1");
    assert_eq!(
        (qdiscs.len(), qdiscs[0]["kind"].as_str()),
        (1, Some("noqueue")),
        "{qdiscs:?}"
    );
    assert!(c.ifbs().is_empty());
}

#[test]
fn bandwidth_gc_removes_orphan_ifbs_only() {
    if !require_root("bandwidth_gc_removes_orphan_ifbs_only") {
        return;
    }
    let c = Cluster::new("gc", 2);
    assert_eq!(
        c.ours("ADD", "ctr-a", 0, &c.conf(0, bw_both())).exit_code,
        0
    );
    assert_eq!(
        c.ours("ADD", "ctr-b", 1, &c.conf(1, bw_both())).exit_code,
        0
    );
    // Not ours: an IFB without our alias, and one of another network.
    c.node.ns.ip(&["link", "add", "ifbforeign", "type", "ifb"]);
    let other = expected_ifb("othernet", "ctr-b");
    c.node.ns.ip(&["link", "add", &other, "type", "ifb"]);
    c.node
        .ns
        .ip(&["link", "set", &other, "alias", "cni-bandwidth:ctr-b:eth0"]);
    let gc = json!({"cniVersion": "1.1.0", "name": NET, "type": "bandwidth",
        "cni.dev/valid-attachments": [{"containerID": "ctr-a", "ifname": "eth0"}]});
    let out = call_plugin(
        Some(&c.node.ns),
        &bin("bandwidth"),
        &[("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")],
        &gc.to_string(),
    );
    out.assert_silent_ok();
    let mut names: Vec<String> = c
        .ifbs()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    let mut want = vec![expected_ifb(NET, "ctr-a"), "ifbforeign".to_string(), other];
    want.sort();
    assert_eq!(names, want);
    // The legacy key works the same; nothing valid: ctr-a's goes too.
    let gc =
        json!({"cniVersion": "1.1.0", "name": NET, "type": "bandwidth", "cni.dev/attachments": []});
    let out = call_plugin(
        Some(&c.node.ns),
        &bin("bandwidth"),
        &[("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")],
        &gc.to_string(),
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(c.node.ns.link(&expected_ifb(NET, "ctr-a")).is_none());
    assert_eq!(c.ifbs().len(), 2);
}

#[test]
fn bandwidth_refuses_what_it_cannot_shape() {
    if !require_root("bandwidth_refuses_what_it_cannot_shape") {
        return;
    }
    let c = Cluster::new("refuse", 1);
    let before = c.snapshot();
    // 0.1.0/0.2.0: results without interfaces.
    let mut conf: Value = serde_json::from_str(&c.conf(0, bw_both())).unwrap();
    conf["cniVersion"] = json!("0.2.0");
    conf.as_object_mut().unwrap().remove("prevResult");
    c.ours("ADD", "ctr-1", 0, &conf.to_string()).assert_error(
        1,
        "config is \"0.2.0\", plugin supports [\"0.3.0\" \"0.3.1\" \"0.4.0\" \"1.0.0\" \"1.1.0\"]",
    );
    // No prevResult.
    let mut conf: Value = serde_json::from_str(&c.conf(0, bw_both())).unwrap();
    conf.as_object_mut().unwrap().remove("prevResult");
    c.ours("ADD", "ctr-1", 0, &conf.to_string()).assert_error(
        7,
        "prevResult: missing: bandwidth must be called as a chained plugin",
    );
    // The host veth not listed in prevResult.
    let mut conf: Value = serde_json::from_str(&c.conf(0, bw_both())).unwrap();
    conf["prevResult"]["interfaces"][0]["name"] = json!("veth9");
    c.ours("ADD", "ctr-1", 0, &conf.to_string()).assert_error(
        7,
        "prevResult.interfaces: the host end \"veth0\" of container interface \"eth0\" is not listed",
    );
    // A container interface that is not a veth (a tap).
    c.pods[0].ip(&["tuntap", "add", "dev", "tap0", "mode", "tap"]);
    let mut e = c.conf(0, bw_both());
    e = e.replace("\"eth0\"", "\"tap0\"");
    let out = call_plugin(
        Some(&c.node.ns),
        &bin("bandwidth"),
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "ctr-1"),
            ("CNI_NETNS", &c.netns(0)),
            ("CNI_IFNAME", "tap0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        &e,
    );
    out.assert_error(7, "container interface \"tap0\" is a tun link, not a veth");
    // No such interface.
    let out = call_plugin(
        Some(&c.node.ns),
        &bin("bandwidth"),
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "ctr-1"),
            ("CNI_NETNS", &c.netns(0)),
            ("CNI_IFNAME", "eth7"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        &e,
    );
    out.assert_error(4, "CNI_IFNAME \"eth7\": no such interface");
    assert_eq!(c.snapshot(), before);
}

#[test]
fn bandwidth_killed_at_each_step_leaves_nothing_after_del() {
    if !require_root("bandwidth_killed_at_each_step_leaves_nothing_after_del") {
        return;
    }
    let c = Cluster::new("fault", 1);
    let conf = c.conf(0, bw_both());
    for point in [
        "ingress-tbf",
        "ifb",
        "egress-tbf",
        "ingress-qdisc",
        "filter",
    ] {
        let fault = format!("bandwidth/{point}");
        let out = c.call_env(
            &bin("bandwidth"),
            "ADD",
            "ctr-1",
            &c.netns(0),
            &conf,
            &[("CNI_FAULT_POINT", &fault)],
        );
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (-1, ""),
            "{point}: killed: {out:?}"
        );
        // A retried ADD completes what the killed one started...
        if point == "ifb" {
            assert_eq!(c.ours("ADD", "ctr-1", 0, &conf).exit_code, 0);
            assert_shaped(&c, 0, "ctr-1");
        }
        // ... and DEL removes whatever is there.
        let out = c.ours("DEL", "ctr-1", 0, &conf);
        assert_eq!(out.exit_code, 0, "{point}: {out:?}");
        assert_clean(&c, 0);
    }
    for point in ["del-ingress-tbf", "del-filter", "del-ifb"] {
        assert_eq!(c.ours("ADD", "ctr-1", 0, &conf).exit_code, 0);
        let fault = format!("bandwidth/{point}");
        let out = c.call_env(
            &bin("bandwidth"),
            "DEL",
            "ctr-1",
            &c.netns(0),
            &conf,
            &[("CNI_FAULT_POINT", &fault)],
        );
        assert_eq!(out.exit_code, -1, "{point}: killed: {out:?}");
        assert_eq!(c.ours("DEL", "ctr-1", 0, &conf).exit_code, 0, "{point}");
        assert_clean(&c, 0);
    }
}

#[test]
fn bandwidth_matches_the_go_plugin_side_by_side() {
    if !require_root("bandwidth_matches_the_go_plugin_side_by_side") {
        return;
    }
    let Some(go) = go_plugin("bandwidth") else {
        return;
    };
    let c = Cluster::new("vsgo", 2);
    // Round numbers and odd ones: both truncate the bucket to whole
    // microseconds the same way.
    for (rate, burst) in [
        (RATE, BURST),
        (10_000_000u64, 123_456u64),
        (1_000_000_000, 8_000_000),
        (5_000_000, 65_432),
    ] {
        let bw = json!({"ingressRate": rate, "ingressBurst": burst, "egressRate": rate, "egressBurst": burst});
        let out = c.call(&go, "ADD", "go-ctr", 0, &c.conf(0, bw.clone()));
        assert_eq!(out.exit_code, 0, "go: {out:?}");
        let go_ifb = out.json()["interfaces"][2]["name"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            go_ifb,
            expected_ifb(NET, "go-ctr"),
            "same IFB name derivation"
        );
        let out = c.ours("ADD", "rs-ctr", 1, &c.conf(1, bw.clone()));
        assert_eq!(out.exit_code, 0, "ours: {out:?}");
        let ours_ifb = expected_ifb(NET, "rs-ctr");
        for (g, o) in [("veth0", "veth1"), (go_ifb.as_str(), ours_ifb.as_str())] {
            let gq = c.qdisc(g, "root").unwrap();
            let oq = c.qdisc(o, "root").unwrap();
            assert_eq!(
                (gq["kind"].as_str(), gq["handle"].as_str()),
                (Some("tbf"), Some("1:"))
            );
            assert_eq!(
                (oq["kind"].as_str(), oq["handle"].as_str()),
                (Some("tbf"), Some("1:"))
            );
            for key in ["rate", "burst", "burst_raw", "lat", "limit"] {
                assert_eq!(
                    gq["options"][key], oq["options"][key],
                    "{key} of {g} (Go) vs {o} (ours) at {rate}/{burst}: {gq} {oq}"
                );
            }
            let (rate_b, burst_b) = (rate / 8, burst / 8);
            assert_eq!(oq["options"]["rate"], rate_b);
            assert_eq!(oq["options"]["limit"], rate_b * 25 / 1000 + burst_b);
            // Whole microseconds, then ticks of 64 ns.
            let ticks = (burst_b * 1_000_000 / rate_b) * 1000 / 64;
            assert_eq!(oq["options"]["burst_raw"], format!("{ticks:x}"));
        }
        let go_ifb_link = c.node.ns.link(&go_ifb).unwrap();
        let ours_ifb_link = c.node.ns.link(&ours_ifb).unwrap();
        assert_eq!(go_ifb_link["mtu"], ours_ifb_link["mtu"]);
        // Each plugin's CHECK accepts the other's state too.
        assert_eq!(
            c.ours("CHECK", "go-ctr", 0, &c.conf(0, bw.clone()))
                .exit_code,
            0
        );
        let out = c.call(&go, "CHECK", "rs-ctr", 1, &c.conf(1, bw.clone()));
        assert_eq!(out.exit_code, 0, "go CHECK of ours: {out:?}");
        // Our DEL removes what Go made (Go's own DEL leaves the veth's qdiscs).
        assert_eq!(
            c.ours("DEL", "go-ctr", 0, &c.conf(0, bw.clone())).exit_code,
            0
        );
        assert_eq!(c.ours("DEL", "rs-ctr", 1, &c.conf(1, bw)).exit_code, 0);
        assert_clean(&c, 0);
        assert_clean(&c, 1);
    }
}

#[test]
fn bandwidth_takes_over_what_the_go_plugin_left() {
    if !require_root("bandwidth_takes_over_what_the_go_plugin_left") {
        return;
    }
    let Some(go) = go_plugin("bandwidth") else {
        return;
    };
    let c = Cluster::new("gotakeover", 1);
    let conf = c.conf(0, bw_both());
    assert_eq!(c.call(&go, "ADD", "ctr-1", 0, &conf).exit_code, 0);
    // Go's DEL deletes the IFB only: the TBF stays, and so does the
    // redirect, now to a missing device (it drops every packet).
    assert_eq!(c.call(&go, "DEL", "ctr-1", 0, &conf).exit_code, 0);
    assert_eq!(c.qdisc("veth0", "root").unwrap()["kind"], "tbf");
    let dangling = c.ingress_filters("veth0");
    assert!(
        dangling
            .iter()
            .any(|f| f["options"]["actions"][0]["to_dev"] == "*"),
        "{dangling:?}"
    );
    // Our ADD for the same attachment replaces the dangling redirect.
    assert_eq!(c.ours("ADD", "ctr-1", 0, &conf).exit_code, 0);
    assert_shaped(&c, 0, "ctr-1");
    let (n, secs) = transfer(&c.pods[0], &c.node.ns, "10.200.0.1", 1_000_000);
    assert_eq!(n, 1_000_000);
    assert_within_rate("egress after taking over", n, secs);
    assert_eq!(c.ours("DEL", "ctr-1", 0, &conf).exit_code, 0);
    assert_clean(&c, 0);
}

/// IFBs the Go plugin made (`bwp<hash>`, without our alias) are recognised
/// by GC: one that is no valid attachment's and that nothing redirects to
/// any more goes; one still in use (maybe another network's) stays. Through
/// the plugin directly and through our cnitool's GC.
#[test]
fn bandwidth_gc_collects_the_go_plugins_orphan_ifbs() {
    if !require_root("bandwidth_gc_collects_the_go_plugins_orphan_ifbs") {
        return;
    }
    let c = Cluster::new("gcgo", 1);
    let stale = expected_ifb(NET, "go-stale");
    let valid = expected_ifb(NET, "go-valid");
    let busy = expected_ifb("othernet", "go-busy");
    for n in [&stale, &valid, &busy] {
        c.node.ns.ip(&["link", "add", n, "type", "ifb"]);
    }
    // A live container's host veth redirecting its ingress to `busy`, as
    // the Go plugin's egress shaping does.
    c.node.ns.ip(&[
        "link", "add", "vbusy", "type", "veth", "peer", "name", "vbusy-p",
    ]);
    run_ok(
        c.node
            .ns
            .command("tc")
            .args(["qdisc", "add", "dev", "vbusy", "ingress"]),
    );
    run_ok(c.node.ns.command("tc").args([
        "filter", "add", "dev", "vbusy", "parent", "ffff:", "protocol", "all", "u32", "match",
        "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", &busy,
    ]));
    let names = |c: &Cluster| {
        let mut v: Vec<String> = c
            .ifbs()
            .iter()
            .map(|l| l["ifname"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let gc = json!({"cniVersion": "1.1.0", "name": NET, "type": "bandwidth",
        "cni.dev/valid-attachments": [{"containerID": "go-valid", "ifname": "eth0"}]});
    let out = call_plugin(
        Some(&c.node.ns),
        &bin("bandwidth"),
        &[("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")],
        &gc.to_string(),
    );
    out.assert_silent_ok();
    let mut want = vec![valid.clone(), busy.clone()];
    want.sort();
    assert_eq!(names(&c), want);

    // cnitool's GC with nothing valid: the unused one goes, the busy one stays.
    c.node.write_conf(
        "10-bw.conflist",
        &json!({"cniVersion": "1.1.0", "name": NET, "plugins": [{"type": "bandwidth"}]}),
    );
    let out = c.node.cnitool_with(&bin("cnitool"), &["gc", NET], &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(names(&c), vec![busy.clone()]);
}
