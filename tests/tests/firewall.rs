//! firewall: the rules on both backends, real traffic through a node whose
//! FORWARD policy is DROP, same-bridge isolation, DEL/CHECK/GC by
//! container ID, validation, crashes around the commits, and the Go
//! reference plugin side by side (the same iptables rules; either side's
//! DEL removes the other's).
//!
//! Topology of a traffic test: a node namespace with veth pairs to pods
//! (10.<i>.0.2, fd00:<i>::2; the node ends `v<i>` are x.x.0.1 and forward)
//! and an upstream namespace (index 9). Every namespace runs a Python
//! listener answering each TCP connection with "<name> <peer address>".

use serde_json::{json, Value};
use std::cell::RefCell;
use std::path::PathBuf;
use std::process::Stdio;
use tests::*;

thread_local! {
    /// The owner records directory (`dataDir`) of the current test: every
    /// config this file builds carries it, so no test writes to the
    /// default `/run/cni/firewall` and parallel tests never share records.
    static RECORDS: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// A forwarding node and the test's records directory.
struct FwNode {
    ns: Netns,
    _records: TempDir,
}

impl std::ops::Deref for FwNode {
    type Target = Netns;
    fn deref(&self) -> &Netns {
        &self.ns
    }
}

/// A forwarding node; its records directory becomes the `dataDir` of the
/// configs this thread builds from now on.
fn fw_node(tag: &str) -> FwNode {
    let ns = forwarding_node(tag);
    let records = TempDir::new(&format!("fwrec-{tag}"));
    RECORDS.with(|r| *r.borrow_mut() = Some(records.path().to_path_buf()));
    FwNode {
        ns,
        _records: records,
    }
}

/// The current test's records directory.
fn records_dir() -> PathBuf {
    RECORDS
        .with(|r| r.borrow().clone())
        .expect("fw_node() makes the records directory first")
}

/// The owner records on disk: `<address> <containerID> <backend>`, sorted.
fn records() -> Vec<String> {
    let dir = records_dir();
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rec: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap())
                .unwrap_or_else(|e| panic!("record {name}: {e}"));
            format!(
                "{name} {} {}",
                rec["containerID"].as_str().unwrap_or_default(),
                rec["backend"].as_str().unwrap_or_default()
            )
        })
        .collect();
    v.sort();
    v
}

const PORT: u16 = 7070;

/// What a pod's previous plugin returned.
trait PrevResult {
    fn prev_result(&self) -> Value;
}

impl PrevResult for Peer {
    /// The result of a bridge-like plugin for this pod: `v<idx>` plays the
    /// bridge (listed first, as the bridge plugin does), then eth0.
    fn prev_result(&self) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": format!("v{}", self.idx)},
                {"name": "eth0", "sandbox": self.ns.path()}
            ],
            "ips": [
                {"address": format!("{}/24", self.v4()), "interface": 1},
                {"address": format!("{}/64", self.v6()), "interface": 1}
            ]
        })
    }
}

/// The FORWARD policy DROP of a podman/firewalld host, in `node`.
fn forward_policy_drop(node: &Netns) {
    run_ok(node.command("iptables").args(["-P", "FORWARD", "DROP"]));
    run_ok(node.command("ip6tables").args(["-P", "FORWARD", "DROP"]));
}

/// A firewall config for network `net` with `extra` keys.
fn conf(net: &str, extra: Value, prev: Option<&Value>) -> String {
    let mut c = json!({"cniVersion": "1.0.0", "name": net, "type": "firewall",
                       "dataDir": records_dir()});
    if let Some(p) = prev {
        c["prevResult"] = p.clone();
    }
    for (k, v) in extra.as_object().into_iter().flatten() {
        c[k] = v.clone();
    }
    c.to_string()
}

fn ours() -> PathBuf {
    bin("firewall")
}

fn gc(node: &Netns, net: &str, extra: Value, valid: &[&str]) -> PluginOutput {
    let valid: Vec<Value> = valid
        .iter()
        .map(|c| json!({"containerID": c, "ifname": "eth0"}))
        .collect();
    let mut c = json!({"cniVersion": "1.1.0", "name": net, "type": "firewall",
                       "dataDir": records_dir(), "cni.dev/valid-attachments": valid});
    for (k, v) in extra.as_object().into_iter().flatten() {
        c[k] = v.clone();
    }
    call_plugin(
        Some(node),
        &ours(),
        &[("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")],
        &c.to_string(),
    )
}

/// `iptables-save -t filter` (or ip6tables) without the `#` lines.
fn filter_table(node: &Netns, family: IpFamily) -> String {
    let cmd = iptables_program(family, "-save");
    let out = run_ok(node.command(cmd).args(["-t", "filter"]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// [`filter_table`] of both families, IPv4 first.
fn filter_tables(node: &Netns) -> (String, String) {
    (
        filter_table(node, IpFamily::V4),
        filter_table(node, IpFamily::V6),
    )
}

/// The rule lines (`-A ...`) of the filter table.
fn rules(node: &Netns, family: IpFamily) -> Vec<String> {
    filter_table(node, family)
        .lines()
        .filter(|l| l.starts_with("-A "))
        .map(str::to_string)
        .collect()
}

/// `nft list table inet cni_rs_firewall` (empty when there is none).
fn nft_table(node: &Netns) -> String {
    let out = node
        .command("nft")
        .args(["list", "table", "inet", "cni_rs_firewall"])
        .output()
        .expect("nft");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The elements of set `allowed4`/`allowed6`, sorted, whitespace-normalised.
fn elements(node: &Netns, set: &str) -> Vec<String> {
    let out = node
        .command("nft")
        .args(["-j", "list", "set", "inet", "cni_rs_firewall", set])
        .output()
        .expect("nft");
    if !out.status.success() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&out.stdout).expect("nft -j");
    let mut items: Vec<String> = v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["set"]["elem"].as_array().cloned())
        .flatten()
        .map(|e| {
            format!(
                "{} {}",
                e["elem"]["val"].as_str().unwrap_or_default(),
                e["elem"]["comment"].as_str().unwrap_or_default()
            )
        })
        .collect();
    items.sort();
    items
}

/// The accept rules of the Go plugin for one address.
fn accept_rules(addr: &str, family: IpFamily) -> [String; 2] {
    let len = family.max_prefix();
    [
        format!(
            "-A CNI-FORWARD -d {addr}/{len} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
        ),
        format!("-A CNI-FORWARD -s {addr}/{len} -j ACCEPT"),
    ]
}

/// An owner record of our previous release (in `CNI-FORWARD-OWNERS`).
fn legacy_owner_rule(addr: &str, family: IpFamily, net: &str, cid: &str) -> String {
    let len = family.max_prefix();
    format!(
        "-A CNI-FORWARD-OWNERS -s {addr}/{len} -m comment --comment \"name: \\\"{net}\\\" id: \\\"{cid}\\\"\""
    )
}

fn no_address_left(node: &Netns, a: &Peer) {
    let recs = records();
    assert!(
        !recs
            .iter()
            .any(|r| r.starts_with(&format!("{} ", a.v4()))
                || r.starts_with(&format!("{} ", a.v6()))),
        "{recs:?}"
    );
    let v4 = filter_table(node, IpFamily::V4);
    assert!(!v4.contains(&a.v4()), "{v4}");
    let v6 = filter_table(node, IpFamily::V6);
    assert!(!v6.contains(&a.v6()), "{v6}");
    assert_eq!(elements(node, "allowed4"), Vec::<String>::new());
    assert_eq!(elements(node, "allowed6"), Vec::<String>::new());
}

// ---- traffic ------------------------------------------------------------------

#[test]
fn firewall_iptables_lets_the_pod_through_a_drop_policy_only_while_added() {
    if !require_root("firewall_iptables_lets_the_pod_through_a_drop_policy_only_while_added") {
        return;
    }
    let node = fw_node("fwdrop");
    let a = Peer::attach(&node, "fwd-a", 1);
    let up = Peer::attach(&node, "fwd-up", 9);
    let _sa = echo_server(&a.ns, "podA", PORT);
    let _su = echo_server(&up.ns, "up", PORT);
    forward_policy_drop(&node);
    let prev = a.prev_result();
    let from_a = format!("up {}", a.v4());
    let from_a6 = format!("up {}", a.v6());
    assert_eq!(ask(&a.ns, &up.v4(), PORT), None, "FORWARD drops");
    assert_eq!(ask(&a.ns, &up.v6(), PORT), None, "FORWARD drops");

    // The default backend ("" and absent alike) is iptables where
    // firewalld does not run.
    let c = conf("fwnet", json!({"backend": ""}), Some(&prev));
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-a", &a.netns(), &c));
    assert_eq!(ask(&a.ns, &up.v4(), PORT).as_deref(), Some(from_a.as_str()));
    assert_eq!(
        ask(&a.ns, &up.v6(), PORT).as_deref(),
        Some(from_a6.as_str())
    );
    // Only the pod's own connections and their replies: new connections
    // into the pod still meet the node's policy.
    assert_eq!(ask(&up.ns, &a.v4(), PORT), None);
    assert_eq!(ask(&up.ns, &a.v6(), PORT), None);
    assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-a", &a.netns(), &c));

    // DEL without the namespace and without prevResult.
    let bare = conf("fwnet", json!({}), None);
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &bare));
    assert_eq!(ask(&a.ns, &up.v4(), PORT), None);
    assert_eq!(ask(&a.ns, &up.v6(), PORT), None);
    no_address_left(&node, &a);
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &bare));

    // The nftables backend writes the same rules itself, in the FORWARD
    // chain the DROP policy governs: the pod gets out just the same.
    let n = conf("fwnet", json!({"backend": "nftables"}), Some(&prev));
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-a", &a.netns(), &n));
    assert!(rules(&node, IpFamily::V4).contains(&accept_rules(&a.v4(), IpFamily::V4)[1]));
    assert_eq!(ask(&a.ns, &up.v4(), PORT).as_deref(), Some(from_a.as_str()));
    assert_eq!(
        ask(&a.ns, &up.v6(), PORT).as_deref(),
        Some(from_a6.as_str())
    );
    assert_eq!(ask(&up.ns, &a.v4(), PORT), None);
    assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-a", &a.netns(), &n));
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &bare));
    assert_eq!(ask(&a.ns, &up.v4(), PORT), None);
    no_address_left(&node, &a);
}

/// Two pods on two "bridges" (`v1`, `v2`, listed first in their results)
/// and an upstream: with same-bridge, traffic from one isolated bridge to
/// the other is dropped both ways, everything else passes.
fn same_bridge_isolation(backend: &str) {
    let node = fw_node(&format!("fwiso-{backend}"));
    let a = Peer::attach(&node, "fwi-a", 1);
    let b = Peer::attach(&node, "fwi-b", 2);
    let up = Peer::attach(&node, "fwi-up", 9);
    let _sa = echo_server(&a.ns, "podA", PORT);
    let _sb = echo_server(&b.ns, "podB", PORT);
    let _su = echo_server(&up.ns, "up", PORT);
    let ab = format!("podB {}", a.v4());
    assert_eq!(ask(&a.ns, &b.v4(), PORT).as_deref(), Some(ab.as_str()));
    let extra = json!({"backend": backend, "ingressPolicy": "same-bridge"});
    for (p, cid) in [(&a, "ctr-a"), (&b, "ctr-b")] {
        let c = conf("fwiso", extra.clone(), Some(&p.prev_result()));
        assert_ok(&call_eth0(&ours(), &node, "ADD", cid, &p.netns(), &c));
        assert_ok(&call_eth0(&ours(), &node, "CHECK", cid, &p.netns(), &c));
    }
    assert_eq!(ask(&a.ns, &b.v4(), PORT), None, "{backend}: a -> b");
    assert_eq!(ask(&b.ns, &a.v4(), PORT), None, "{backend}: b -> a");
    assert_eq!(ask(&a.ns, &b.v6(), PORT), None, "{backend}: a -> b v6");
    let a_up = format!("up {}", a.v4());
    assert_eq!(ask(&a.ns, &up.v4(), PORT).as_deref(), Some(a_up.as_str()));
    let up_a = format!("podA {}", up.v4());
    assert_eq!(ask(&up.ns, &a.v4(), PORT).as_deref(), Some(up_a.as_str()));
    // Isolation is per bridge and stays after the containers' DEL, as in Go.
    for cid in ["ctr-a", "ctr-b"] {
        assert_ok(&call_eth0(
            &ours(),
            &node,
            "DEL",
            cid,
            "",
            &conf("fwiso", json!({}), None),
        ));
    }
    assert_eq!(ask(&a.ns, &b.v4(), PORT), None, "{backend}: still isolated");
    no_address_left(&node, &a);
    no_address_left(&node, &b);
}

#[test]
fn firewall_iptables_same_bridge_drops_traffic_between_bridges() {
    if !require_root("firewall_iptables_same_bridge_drops_traffic_between_bridges") {
        return;
    }
    same_bridge_isolation("iptables");
}

#[test]
fn firewall_nft_same_bridge_drops_traffic_between_bridges() {
    if !require_root("firewall_nft_same_bridge_drops_traffic_between_bridges") {
        return;
    }
    same_bridge_isolation("nftables");
}

// ---- rules, DEL, CHECK, GC --------------------------------------------------------

#[test]
fn firewall_iptables_writes_exactly_the_go_plugins_rules() {
    if !require_root("firewall_iptables_writes_exactly_the_go_plugins_rules") {
        return;
    }
    let Some(go) = go_plugin("firewall") else {
        return;
    };
    let go_node = fw_node("fwgo-rules");
    let our_node = fw_node("fwrs-rules");
    let pod = Netns::new("fwr-pod");
    let netns = pod.path().to_str().unwrap().to_string();
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "cni-podman0"}, {"name": "veth0"},
                       {"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.88.0.2/16", "interface": 2},
                {"address": "fd00:88::2/64", "interface": 2}]
    });
    let c = conf(
        "podman",
        json!({"backend": "iptables", "ingressPolicy": "same-bridge",
               "iptablesAdminChainName": "MY-ADMIN"}),
        Some(&prev),
    );
    assert_ok(&call_eth0(&go, &go_node, "ADD", "ctr1", &netns, &c));
    assert_ok(&call_eth0(&ours(), &our_node, "ADD", "ctr1", &netns, &c));
    for (family, addr) in [(IpFamily::V4, "10.88.0.2"), (IpFamily::V6, "fd00:88::2")] {
        let theirs = filter_table(&go_node, family);
        // Go 1.7 changed the comment of the shared isolation rules (the
        // FORWARD jump, the RETURNs, stage 2's drop); we write v1.7's.
        let theirs_v1_7: String = theirs
            .lines()
            .map(|l| {
                if l.contains("ISOLATION") && !l.contains("-j CNI-ISOLATION-STAGE-2") {
                    l.replace(
                        "(ingressPolicy: same-bridge)",
                        "(ingressPolicy: same-bridge|isolated)",
                    )
                } else {
                    l.to_string()
                }
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            filter_table(&our_node, family),
            theirs_v1_7,
            "{family:?}: our table vs Go 1.1.1's in v1.7's comments"
        );
        let [est, src] = accept_rules(addr, family);
        assert!(theirs.contains(&est) && theirs.contains(&src), "{theirs}");
        assert!(
            theirs.contains("-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j MY-ADMIN"),
            "{theirs}"
        );
    }
    // The owner is recorded on disk, not in the firewall.
    assert_eq!(
        records(),
        vec!["10.88.0.2 ctr1 iptables", "fd00:88::2 ctr1 iptables"]
    );
    // Our ADD on Go 1.1.1's rules adds nothing: its comments count.
    let before = filter_tables(&go_node);
    assert_ok(&call_eth0(&ours(), &go_node, "ADD", "ctr1", &netns, &c));
    assert_eq!(before, filter_tables(&go_node));
    // A second ADD (ours) changes nothing: every rule once.
    assert_ok(&call_eth0(&ours(), &our_node, "ADD", "ctr1", &netns, &c));
    let again = rules(&our_node, IpFamily::V4);
    let mut dedup = again.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(again.len(), dedup.len(), "{again:?}");
    // Each side's CHECK accepts the other's rules.
    assert_ok(&call_eth0(&go, &our_node, "CHECK", "ctr1", &netns, &c));
    assert_ok(&call_eth0(&ours(), &go_node, "CHECK", "ctr1", &netns, &c));
}

/// A `backend` Go does not know (Nomad's dual-stack `ip6tables`, a value
/// in capitals) is Go's default, firewalld where it runs, else iptables:
/// the same rules as Go 1.1.1 writes for it, and the call log says what
/// was used instead.
#[test]
fn firewall_an_unknown_backend_is_the_default_as_in_go() {
    if !require_root("firewall_an_unknown_backend_is_the_default_as_in_go") {
        return;
    }
    let Some(go) = go_plugin("firewall") else {
        return;
    };
    let go_node = fw_node("fwgo-unk");
    let our_node = fw_node("fwrs-unk");
    let pod = Netns::new("fwu-pod");
    let netns = pod.path().to_str().unwrap().to_string();
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "nomad"}, {"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "172.26.64.2/20", "interface": 1},
                {"address": "fd26::2/64", "interface": 1}]
    });
    let log_dir = TempDir::new("fwu-log");
    let log = log_dir.path().join("calls.log");
    let log_conf = log_dir.write("cni-rs.conf", &json!({"logFile": log}).to_string());
    let log_env = [("CNI_RS_CONFIG", log_conf.to_str().unwrap())];
    // A first container makes the chains containers share, and goes.
    let warm = conf(
        "nomad",
        json!({"backend": "iptables", "iptablesAdminChainName": "NOMAD-ADMIN"}),
        Some(&prev),
    );
    assert_ok(&call_eth0(&ours(), &our_node, "ADD", "warm", &netns, &warm));
    assert_ok(&call_eth0(&ours(), &our_node, "DEL", "warm", &netns, &warm));
    let before = (filter_tables(&our_node), nft_ruleset(&our_node));
    for (i, backend) in ["ip6tables", "IPTABLES"].into_iter().enumerate() {
        let c = conf(
            "nomad",
            json!({"backend": backend, "iptablesAdminChainName": "NOMAD-ADMIN"}),
            Some(&prev),
        );
        let cid = format!("alloc{i}");
        assert_ok(&call_eth0(&go, &go_node, "ADD", &cid, &netns, &c));
        let call = |verb| {
            let env = [
                ("CNI_COMMAND", verb),
                ("CNI_CONTAINERID", cid.as_str()),
                ("CNI_NETNS", netns.as_str()),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/opt/cni/bin"),
                log_env[0],
            ];
            call_plugin(Some(&our_node), &ours(), &env, &c)
        };
        let out = call("ADD");
        assert_ok(&out);
        let result = out.result();
        assert_eq!(
            (&result["ips"], &result["interfaces"]),
            (&prev["ips"], &prev["interfaces"]),
            "{backend}: passed through"
        );
        assert!(
            out.stderr
                .contains(&format!("backend: \"{backend}\" is not a value")),
            "{out:?}"
        );
        assert_eq!(
            filter_tables(&our_node),
            filter_tables(&go_node),
            "{backend}: Go's rules for it"
        );
        assert_eq!(
            records(),
            vec![
                format!("172.26.64.2 {cid} iptables"),
                format!("fd26::2 {cid} iptables")
            ]
        );
        assert_ok(&call("CHECK"));
        assert_ok(&call_eth0(&go, &our_node, "CHECK", &cid, &netns, &c));
        assert_ok(&call("DEL"));
        assert_ok(&call_eth0(&go, &go_node, "DEL", &cid, &netns, &c));
        assert_eq!(
            (filter_tables(&our_node), nft_ruleset(&our_node)),
            before,
            "{backend}: DEL left nothing"
        );
    }
    // The call log names each fallback, on ADD and CHECK (DEL reads the
    // backend leniently and notes nothing).
    let text = std::fs::read_to_string(&log).expect("call log");
    let fallbacks: Vec<(String, Value)> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .map(|v| {
            (
                v["command"].as_str().unwrap().to_string(),
                v["fallbacks"].clone(),
            )
        })
        .collect();
    let noted = |b: &str| json!([{"key": "backend", "value": b, "used": "iptables"}]);
    assert_eq!(
        fallbacks,
        vec![
            ("ADD".to_string(), noted("ip6tables")),
            ("CHECK".to_string(), noted("ip6tables")),
            ("DEL".to_string(), Value::Null),
            ("ADD".to_string(), noted("IPTABLES")),
            ("CHECK".to_string(), noted("IPTABLES")),
            ("DEL".to_string(), Value::Null),
        ]
    );
}

#[test]
fn firewall_iptables_del_removes_the_go_plugins_rules_and_back() {
    if !require_root("firewall_iptables_del_removes_the_go_plugins_rules_and_back") {
        return;
    }
    let Some(go) = go_plugin("firewall") else {
        return;
    };
    let node = fw_node("fwipt-interop");
    let a = Peer::attach(&node, "fwii-a", 1);
    let prev = a.prev_result();
    let c = conf("fwnet", json!({"backend": "iptables"}), Some(&prev));
    let all_accepts = |node: &Netns| -> Vec<String> {
        IpFamily::BOTH
            .into_iter()
            .flat_map(|family| rules(node, family))
            .filter(|r| r.starts_with("-A CNI-FORWARD ") && r.ends_with("-j ACCEPT"))
            .collect()
    };
    // Go ADD, our DEL with the runtime's prevResult (Go writes no owner
    // record, so the addresses come from the result).
    assert_ok(&call_eth0(&go, &node, "ADD", "ctr-go", &a.netns(), &c));
    assert_eq!(all_accepts(&node).len(), 4);
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-go", "", &c));
    assert_eq!(all_accepts(&node), Vec::<String>::new());

    // Our ADD, Go's DEL: nothing of ours is left in the firewall (the
    // owner records are files beside it); our GC removes the records.
    let bare_tables = filter_tables(&node);
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-rs", &a.netns(), &c));
    assert_eq!(all_accepts(&node).len(), 4);
    assert_ok(&call_eth0(&go, &node, "DEL", "ctr-rs", &a.netns(), &c));
    assert_eq!(filter_tables(&node), bare_tables);
    assert_eq!(records().len(), 2, "{:?}", records());
    assert_ok(&gc(&node, "fwnet", json!({"backend": "iptables"}), &[]));
    assert_eq!(records(), Vec::<String>::new());
    assert_eq!(filter_tables(&node), bare_tables);

    // Our ADD, our DEL (default backend) without prevResult and namespace:
    // found by the owner records.
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-rs2", &a.netns(), &c));
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "DEL",
        "ctr-rs2",
        "",
        &conf("fwnet", json!({}), None),
    ));
    assert_eq!(all_accepts(&node), Vec::<String>::new());
    no_address_left(&node, &a);

    // A DEL configured for nftables still removes iptables rules the ADD
    // wrote (visible through nf_tables, so only then are processes run).
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-rs3", &a.netns(), &c));
    let nft_bare = conf("fwnet", json!({"backend": "nftables"}), None);
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-rs3", "", &nft_bare));
    no_address_left(&node, &a);
    // And the shared chains stay, as the Go plugin leaves them.
    let table = filter_table(&node, IpFamily::V4);
    assert!(
        table.contains(
            "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD"
        ),
        "{table}"
    );
}

#[test]
fn firewall_nft_writes_what_the_iptables_backend_writes_without_a_process() {
    if !require_root("firewall_nft_writes_what_the_iptables_backend_writes_without_a_process") {
        return;
    }
    let ipt_node = fw_node("fwnft-ipt");
    let a = Peer::attach(&ipt_node, "fwn-a", 1);
    let extra = |backend: &str| json!({"backend": backend, "ingressPolicy": "isolated", "iptablesAdminChainName": "MY-ADMIN"});
    let c = conf("fwnet", extra("iptables"), Some(&a.prev_result()));
    assert_ok(&call_eth0(
        &ours(),
        &ipt_node,
        "ADD",
        "ctr-a",
        &a.netns(),
        &c,
    ));
    let by_programs = filter_tables(&ipt_node);
    let node = fw_node("fwnft");
    let b = Peer::attach(&node, "fwn-b", 1);
    let n = conf("fwnet", extra("nftables"), Some(&b.prev_result()));
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-a", &b.netns(), &n));
    assert_eq!(
        filter_tables(&node),
        by_programs,
        "iptables-save of the nftables backend's rules"
    );
    assert_eq!(nft_table(&node), "", "our old table is not written");
    // An admin rule survives the plugin's ADDs; DEL without namespace and
    // prevResult, twice.
    run_ok(
        node.command("iptables")
            .args(["-A", "MY-ADMIN", "-d", "10.1.0.99/32", "-j", "DROP"]),
    );
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-a", &b.netns(), &n));
    let bare = conf("fwnet", json!({"backend": "nftables"}), None);
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &bare));
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &bare));
    no_address_left(&node, &b);
    assert!(rules(&node, IpFamily::V4).contains(&"-A MY-ADMIN -d 10.1.0.99/32 -j DROP".to_string()));
    // DEL with prevResult only removes what this container owns.
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-new", &b.netns(), &n));
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &n));
    assert!(rules(&node, IpFamily::V4).contains(&accept_rules(&b.v4(), IpFamily::V4)[1]));
    assert_eq!(
        records(),
        vec![
            format!("{} ctr-new nftables", b.v4()),
            format!("{} ctr-new nftables", b.v6())
        ]
    );
}

#[test]
fn firewall_check_names_what_was_removed_by_hand() {
    if !require_root("firewall_check_names_what_was_removed_by_hand") {
        return;
    }
    let node = fw_node("fwcheck");
    let a = Peer::attach(&node, "fwc-a", 1);
    let prev = a.prev_result();
    // iptables: delete the pod's source rule by hand.
    let c = conf(
        "fwnet",
        json!({"ingressPolicy": "same-bridge"}),
        Some(&prev),
    );
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-a", &a.netns(), &c));
    assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-a", &a.netns(), &c));
    run_ok(node.command("iptables").args([
        "-D",
        "CNI-FORWARD",
        "-s",
        "10.1.0.2/32",
        "-j",
        "ACCEPT",
    ]));
    call_eth0(&ours(), &node, "CHECK", "ctr-a", &a.netns(), &c).assert_error(
        102,
        "iptables rule missing: -A CNI-FORWARD -s 10.1.0.2/32 -j ACCEPT",
    );
    // ADD again repairs it.
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-a", &a.netns(), &c));
    assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-a", &a.netns(), &c));
    // An isolation rule removed by hand.
    run_ok(node.command("ip6tables").args([
        "-D",
        "CNI-ISOLATION-STAGE-2",
        "-o",
        "v1",
        "-m",
        "comment",
        "--comment",
        "CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)",
        "-j",
        "DROP",
    ]));
    call_eth0(&ours(), &node, "CHECK", "ctr-a", &a.netns(), &c).assert_error(
        102,
        "ip6tables rule missing: -A CNI-ISOLATION-STAGE-2 -o v1",
    );

    // nftables: the same rules, removed by hand with iptables.
    let n = conf("fwnet", json!({"backend": "nftables"}), Some(&prev));
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-n", &a.netns(), &n));
    assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-n", &a.netns(), &n));
    run_ok(node.command("ip6tables").args([
        "-D",
        "CNI-FORWARD",
        "-s",
        "fd00:1::2/128",
        "-j",
        "ACCEPT",
    ]));
    call_eth0(&ours(), &node, "CHECK", "ctr-n", &a.netns(), &n).assert_error(
        102,
        "ip6tables rule missing: -A CNI-FORWARD -s fd00:1::2/128 -j ACCEPT",
    );
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-n", &a.netns(), &n));
    assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-n", &a.netns(), &n));
}

fn gc_collects(backend: &str) {
    let node = fw_node(&format!("fwgc-{backend}"));
    let a = Peer::attach(&node, "fwg-a", 1);
    let b = Peer::attach(&node, "fwg-b", 2);
    let o = Peer::attach(&node, "fwg-o", 3);
    let extra = json!({"backend": backend});
    for (p, net, cid) in [
        (&a, "fwnet", "ctr-a"),
        (&b, "fwnet", "ctr-b"),
        (&o, "other", "ctr-o"),
    ] {
        let c = conf(net, extra.clone(), Some(&p.prev_result()));
        assert_ok(&call_eth0(&ours(), &node, "ADD", cid, &p.netns(), &c));
    }
    assert_ok(&gc(&node, "fwnet", extra.clone(), &["ctr-a"]));
    let c = |p: &Peer, net: &str| conf(net, extra.clone(), Some(&p.prev_result()));
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "CHECK",
        "ctr-a",
        &a.netns(),
        &c(&a, "fwnet"),
    ));
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "CHECK",
        "ctr-o",
        &o.netns(),
        &c(&o, "other"),
    ));
    call_eth0(
        &ours(),
        &node,
        "CHECK",
        "ctr-b",
        &b.netns(),
        &c(&b, "fwnet"),
    )
    .assert_error(102, "10.2.0.2");
    {
        for family in IpFamily::BOTH {
            let r = rules(&node, family);
            assert!(
                !r.iter().any(|l| l.contains(match family {
                    IpFamily::V4 => "10.2.0.2",
                    IpFamily::V6 => "fd00:2::2",
                })),
                "{r:?}"
            );
        }
    }
    {
        let recs = records();
        assert!(
            recs.contains(&format!("{} ctr-a {backend}", a.v4()))
                && recs.contains(&format!("{} ctr-o {backend}", o.v4()))
                && !recs.iter().any(|r| r.contains("ctr-b")),
            "{recs:?}"
        );
    }
    // A GC with every container valid removes nothing.
    let before = (nft_table(&node), filter_tables(&node));
    assert_ok(&gc(&node, "fwnet", extra, &["ctr-a"]));
    assert_eq!(before, (nft_table(&node), filter_tables(&node)));
}

#[test]
fn firewall_iptables_gc_removes_containers_that_are_not_valid() {
    if !require_root("firewall_iptables_gc_removes_containers_that_are_not_valid") {
        return;
    }
    gc_collects("iptables");
}

#[test]
fn firewall_nft_gc_removes_containers_that_are_not_valid() {
    if !require_root("firewall_nft_gc_removes_containers_that_are_not_valid") {
        return;
    }
    gc_collects("nftables");
}

// ---- validation and pass-through ------------------------------------------------

#[test]
fn firewall_validation_rejects_bad_keys_before_touching_anything() {
    if !require_root("firewall_validation_rejects_bad_keys_before_touching_anything") {
        return;
    }
    let node = fw_node("fwval");
    let pod = Netns::new("fwv-pod");
    let netns = pod.path().to_str().unwrap().to_string();
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.1.0.2/24", "interface": 0}]
    });
    let before = (filter_tables(&node), nft_ruleset(&node));
    let cases: Vec<(Value, Option<&Value>, u64, &str)> = vec![
        (json!({"backend": 4}), Some(&prev), 7, "backend"),
        (
            json!({"backend": "firewalld"}),
            Some(&prev),
            2,
            "\"backend\": \"firewalld\": firewalld is not running on this node (no system bus at /nonexistent/",
        ),
        // The zone is checked before firewalld is looked for.
        (
            json!({"backend": "firewalld", "firewalldZone": "no such zone"}),
            Some(&prev),
            7,
            "firewalldZone: \"no such zone\" is not a firewalld zone name",
        ),
        (json!({"firewalldZone": 7}), Some(&prev), 7, "firewalldZone"),
        (json!({"dataDir": "records"}), Some(&prev), 7, "dataDir: \"records\" is not an absolute path"),
        (
            json!({"ingressPolicy": "closed"}),
            Some(&prev),
            7,
            "ingressPolicy: unknown ingress policy \"closed\" (expected \"open\", \"same-bridge\" or \"isolated\")",
        ),
        (
            json!({"iptablesAdminChainName": "MY ADMIN"}),
            Some(&prev),
            7,
            "iptablesAdminChainName: \"MY ADMIN\" is not a usable iptables chain name",
        ),
        (
            json!({"iptablesAdminChainName": "A23456789012345678901234567890"}),
            Some(&prev),
            7,
            "is longer than 28 characters",
        ),
        (
            json!({"iptablesAdminChainName": "FORWARD"}),
            Some(&prev),
            7,
            "is a built-in chain or target",
        ),
        // same-bridge needs the bridge first in prevResult; here the first
        // interface is the container's.
        (
            json!({"ingressPolicy": "same-bridge"}),
            Some(&prev),
            7,
            "prevResult.interfaces[0]: ingressPolicy \"same-bridge\" isolates the bridge listed first, but \"eth0\" is inside the container",
        ),
        (json!({}), None, 7, "prevResult: missing"),
    ];
    for (extra, p, code, needle) in &cases {
        let c = conf("fwnet", extra.clone(), *p);
        for verb in ["ADD", "CHECK"] {
            call_eth0(&ours(), &node, verb, "ctr-v", &netns, &c).assert_error(*code, needle);
        }
        // DEL never fails on a config value (a runtime's DEL after a
        // failed ADD must get through to the plugins before this one).
        assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-v", &netns, &c));
    }
    let bad_bridge = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "br+"}],
        "ips": [{"address": "10.1.0.2/24"}]
    });
    let c = conf(
        "fwnet",
        json!({"ingressPolicy": "same-bridge"}),
        Some(&bad_bridge),
    );
    call_eth0(&ours(), &node, "ADD", "ctr-v", &netns, &c).assert_error(
        7,
        "prevResult.interfaces[0].name: \"br+\" is not a bridge name",
    );
    let none = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.2/24"}]});
    let c = conf(
        "fwnet",
        json!({"ingressPolicy": "same-bridge"}),
        Some(&none),
    );
    call_eth0(&ours(), &node, "ADD", "ctr-v", &netns, &c).assert_error(
        7,
        "ingressPolicy: \"same-bridge\" needs the bridge as prevResult.interfaces[0]",
    );
    assert_eq!(
        before,
        (filter_tables(&node), nft_ruleset(&node)),
        "a rejected config touches nothing"
    );
}

#[test]
fn firewall_add_passes_the_previous_result_through() {
    if !require_root("firewall_add_passes_the_previous_result_through") {
        return;
    }
    let node = fw_node("fwpass");
    let pod = Netns::new("fwp-pod");
    let netns = pod.path().to_str().unwrap().to_string();
    let prev = json!({
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "cni0", "mac": "0a:58:0a:01:00:01"},
                       {"name": "eth0", "mac": "0a:58:0a:01:00:02", "sandbox": pod.path()}],
        "ips": [{"version": "4", "address": "10.1.0.2/24", "gateway": "10.1.0.1", "interface": 1}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.1.0.1"]}
    });
    let mut c: Value = serde_json::from_str(&conf("fwnet", json!({}), Some(&prev))).unwrap();
    c["cniVersion"] = json!("0.4.0");
    let out = call_eth0(&ours(), &node, "ADD", "ctr-p", &netns, &c.to_string());
    assert_ok(&out);
    assert_eq!(out.json(), prev, "0.4.0 in, the same 0.4.0 result out");
    let rules_added = rules(&node, IpFamily::V4);
    assert!(
        rules_added.contains(&accept_rules("10.1.0.2", IpFamily::V4)[1]),
        "{rules_added:?}"
    );
    // No addresses: nothing to do, the result passes through.
    let before = filter_tables(&node);
    let empty = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}], "dns": {}});
    let out = call_eth0(
        &ours(),
        &node,
        "ADD",
        "ctr-e",
        &netns,
        &conf("fwnet", json!({}), Some(&empty)),
    );
    assert_ok(&out);
    assert_eq!(out.json(), empty);
    assert_eq!(before, filter_tables(&node));
}

// ---- crashes ------------------------------------------------------------------

fn crash_around_commits(backend: &str) {
    let node = fw_node(&format!("fwfault-{backend}"));
    let a = Peer::attach(&node, "fwf-a", 1);
    let c = conf("fwnet", json!({"backend": backend}), Some(&a.prev_result()));
    let run = |verb: &str, netns: &str, stdin: &str, point: &str| {
        call_plugin(
            Some(&node),
            &ours(),
            &[
                ("CNI_COMMAND", verb),
                ("CNI_CONTAINERID", "ctr-f"),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/opt/cni/bin"),
                ("CNI_FAULT_POINT", point),
            ],
            stdin,
        )
    };
    // Which of the pod's two addresses are allowed, as (v4, v6).
    let allowed = |node: &Netns| -> (bool, bool) {
        (
            rules(node, IpFamily::V4).contains(&accept_rules(&a.v4(), IpFamily::V4)[1]),
            rules(node, IpFamily::V6).contains(&accept_rules(&a.v6(), IpFamily::V6)[1]),
        )
    };
    let bare = conf("fwnet", json!({"backend": backend}), None);
    // One commit per family on both backends.
    let points = vec![
        ("firewall/add-before-commit", (false, false)),
        ("firewall/add-between-families", (true, false)),
        ("firewall/add-after-commit", (true, true)),
    ];
    for (point, want) in points {
        let out = run("ADD", &a.netns(), &c, point);
        assert_eq!(out.exit_code, -1, "{point}: killed: {out:?}");
        assert_eq!(allowed(&node), want, "{point}: all or nothing per commit");
        // The runtime's DEL after the failed ADD cleans up by container ID.
        assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-f", "", &bare));
        assert_eq!(allowed(&node), (false, false), "{point}: DEL cleaned up");
        no_address_left(&node, &a);
    }
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-f", &a.netns(), &c));
    let out = run("DEL", "", &bare, "firewall/del-before-commit");
    assert_eq!(out.exit_code, -1, "{out:?}");
    assert_eq!(allowed(&node), (true, true));
    let out = run("DEL", "", &bare, "firewall/del-after-commit");
    assert_eq!(out.exit_code, -1, "{out:?}");
    assert_eq!(allowed(&node), (false, false));
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-f", "", &bare));
    no_address_left(&node, &a);
}

#[test]
fn firewall_iptables_crash_around_the_commits_leaves_all_or_nothing() {
    if !require_root("firewall_iptables_crash_around_the_commits_leaves_all_or_nothing") {
        return;
    }
    crash_around_commits("iptables");
}

#[test]
fn firewall_nft_crash_around_the_commit_leaves_all_or_nothing() {
    if !require_root("firewall_nft_crash_around_the_commit_leaves_all_or_nothing") {
        return;
    }
    crash_around_commits("nftables");
}

// ---- processes and concurrency ----------------------------------------------------

/// Calls our plugin in `node` with `PATH` set to `path`.
fn call_with_path(
    node: &Netns,
    path: &str,
    cmd: &str,
    cid: &str,
    netns: &str,
    stdin: &str,
) -> PluginOutput {
    use std::io::Write;
    let mut c = node.command("/usr/bin/env");
    c.arg(format!("PATH={path}"))
        .arg(ours())
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/opt/cni/bin")
        .env_remove("CNI_ARGS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn firewall");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    PluginOutput {
        exit_code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn firewall_nft_runs_no_process_at_all() {
    if !require_root("firewall_nft_runs_no_process_at_all") {
        return;
    }
    let node = fw_node("fwnoproc");
    let a = Peer::attach(&node, "fwnp-a", 1);
    let empty = TempDir::new("fw-empty-path");
    let path = empty.path().to_str().unwrap().to_string();
    let n = conf(
        "fwnet",
        json!({"backend": "nftables"}),
        Some(&a.prev_result()),
    );
    let bare = conf("fwnet", json!({"backend": "nftables"}), None);
    // No program is reachable: every verb still works on nftables.
    assert_ok(&call_with_path(
        &node,
        &path,
        "ADD",
        "ctr-a",
        &a.netns(),
        &n,
    ));
    assert_ok(&call_with_path(
        &node,
        &path,
        "CHECK",
        "ctr-a",
        &a.netns(),
        &n,
    ));
    assert_ok(&call_with_path(&node, &path, "DEL", "ctr-a", "", &n));
    assert_ok(&call_with_path(
        &node,
        &path,
        "ADD",
        "ctr-a",
        &a.netns(),
        &n,
    ));
    assert_ok(&call_with_path(&node, &path, "DEL", "ctr-a", "", &bare));
    no_address_left(&node, &a);
    assert_ok(&call_with_path(
        &node,
        &path,
        "ADD",
        "ctr-b",
        &a.netns(),
        &n,
    ));
    let gc_conf = json!({"cniVersion": "1.1.0", "name": "fwnet", "type": "firewall",
                         "backend": "nftables", "dataDir": records_dir(),
                         "cni.dev/valid-attachments": []});
    assert_ok(&call_with_path(
        &node,
        &path,
        "GC",
        "",
        "",
        &gc_conf.to_string(),
    ));
    no_address_left(&node, &a);
    // The iptables backend with no iptables command (a FROM-scratch
    // container) and no legacy x_tables table in the namespace: iptables-
    // nft's rules, written and removed over netlink, no process either.
    let i = conf(
        "fwnet",
        json!({"backend": "iptables"}),
        Some(&a.prev_result()),
    );
    assert_ok(&call_with_path(
        &node,
        &path,
        "ADD",
        "ctr-i",
        &a.netns(),
        &i,
    ));
    let v4 = filter_table(&node, IpFamily::V4);
    assert!(v4.contains(&a.v4()), "iptables-save shows the rule: {v4}");
    assert_ok(&call_with_path(&node, &path, "DEL", "ctr-i", "", &i));
    no_address_left(&node, &a);
}

/// The iptables backend, named or the default (no firewalld here), on a
/// node whose `iptables` is iptables-nft: the Go plugin's rules written
/// over netlink, with no program reachable on `PATH` but `iptables`
/// itself (whose link only tells which iptables the node runs).
#[test]
fn firewall_iptables_and_default_run_no_process_on_iptables_nft() {
    if !require_root("firewall_iptables_and_default_run_no_process_on_iptables_nft") {
        return;
    }
    let node = fw_node("fwipnp");
    let a = Peer::attach(&node, "fwipnp-a", 1);
    let dir = TempDir::new("fw-nft-path");
    // `iptables` leads to xtables-nft-multi, as on Debian, RHEL and
    // Fedora; nothing else is on PATH, so a program run would fail.
    std::os::unix::fs::symlink("/usr/sbin/xtables-nft-multi", dir.path().join("iptables")).unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    for backend in [json!({"backend": "iptables"}), json!({})] {
        let c = conf("fwnet", backend.clone(), Some(&a.prev_result()));
        assert_ok(&call_with_path(
            &node,
            &path,
            "ADD",
            "ctr-a",
            &a.netns(),
            &c,
        ));
        let v4 = rules(&node, IpFamily::V4);
        assert!(v4.iter().any(|r| r.contains(&a.v4())), "{backend}: {v4:?}");
        assert!(
            rules(&node, IpFamily::V6)
                .iter()
                .any(|r| r.contains(&a.v6())),
            "{backend}"
        );
        assert_ok(&call_with_path(
            &node,
            &path,
            "CHECK",
            "ctr-a",
            &a.netns(),
            &c,
        ));
        let bare = conf("fwnet", backend.clone(), None);
        assert_ok(&call_with_path(&node, &path, "DEL", "ctr-a", "", &bare));
        no_address_left(&node, &a);
    }
}

/// A directory of shims that log each run of the iptables programs to
/// `log` before running the real one.
fn counting_shims(dir: &TempDir) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let log = dir.path().join("runs.log");
    // An `iptables` that does not lead to xtables-nft-multi is what a
    // legacy node has: the iptables backend then runs the programs. The
    // shims still run this machine's (iptables-nft) programs, so the rules
    // can be compared with what the nftables backend sees.
    for prog in [
        "iptables",
        "iptables-save",
        "iptables-restore",
        "ip6tables-save",
        "ip6tables-restore",
    ] {
        let real = ["/usr/sbin", "/sbin", "/usr/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(prog))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{prog} is not installed"));
        let p = dir.write(
            prog,
            &format!(
                "#!/bin/sh\necho {prog} >> '{}'\nexec '{}' \"$@\"\n",
                log.display(),
                real.display()
            ),
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    log
}

/// The programs run since the last call (sorted), emptying the log.
fn runs(log: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn firewall_iptables_runs_one_save_and_at_most_one_restore_per_family() {
    if !require_root("firewall_iptables_runs_one_save_and_at_most_one_restore_per_family") {
        return;
    }
    let node = fw_node("fwprocs");
    let a = Peer::attach(&node, "fwpr-a", 1);
    let shims = TempDir::new("fw-shims");
    let log = counting_shims(&shims);
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", shims.path().display());
    let c = conf(
        "fwnet",
        json!({"ingressPolicy": "same-bridge"}),
        Some(&a.prev_result()),
    );
    let bare = conf("fwnet", json!({}), None);
    let both = |save: bool, restore: bool| -> Vec<String> {
        let mut v = Vec::new();
        for fam in ["iptables", "ip6tables"] {
            if save {
                v.push(format!("{fam}-save"));
            }
            if restore {
                v.push(format!("{fam}-restore"));
            }
        }
        v.sort();
        v
    };
    assert_ok(&call_with_path(
        &node,
        &path,
        "ADD",
        "ctr-a",
        &a.netns(),
        &c,
    ));
    assert_eq!(runs(&log), both(true, true), "ADD");
    assert_ok(&call_with_path(
        &node,
        &path,
        "ADD",
        "ctr-a",
        &a.netns(),
        &c,
    ));
    assert_eq!(
        runs(&log),
        both(true, false),
        "ADD again: nothing to change"
    );
    assert_ok(&call_with_path(
        &node,
        &path,
        "CHECK",
        "ctr-a",
        &a.netns(),
        &c,
    ));
    assert_eq!(runs(&log), both(true, false), "CHECK");
    assert_ok(&call_with_path(&node, &path, "DEL", "ctr-a", "", &bare));
    assert_eq!(runs(&log), both(true, true), "DEL");
    assert_ok(&call_with_path(&node, &path, "DEL", "ctr-a", "", &bare));
    assert_eq!(
        runs(&log),
        both(true, false),
        "DEL again: nothing to remove"
    );
    no_address_left(&node, &a);
    // An IPv4-only container: only the IPv4 programs run on ADD.
    let v4only = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "v1"}, {"name": "eth0", "sandbox": a.ns.path()}],
        "ips": [{"address": "10.1.0.2/24", "interface": 1}]
    });
    let c4 = conf("fwnet", json!({}), Some(&v4only));
    assert_ok(&call_with_path(
        &node,
        &path,
        "ADD",
        "ctr-4",
        &a.netns(),
        &c4,
    ));
    assert_eq!(runs(&log), vec!["iptables-restore", "iptables-save"]);
    // A DEL configured for nftables removes the rules an iptables ADD
    // wrote (iptables-nft's are nf_tables rules) without any program.
    let n = conf("fwnet", json!({"backend": "nftables"}), Some(&v4only));
    assert_ok(&call_with_path(&node, &path, "DEL", "ctr-4", "", &n));
    assert_eq!(runs(&log), Vec::<String>::new());
    assert!(!rules(&node, IpFamily::V4)
        .iter()
        .any(|r| r.contains("10.1.0.2")));
    assert_eq!(records(), Vec::<String>::new());
}

fn concurrent(backend: &str) {
    let node = fw_node(&format!("fwconc-{backend}"));
    let n = 8u8;
    let pods: Vec<Peer> = (1..=n)
        .map(|i| Peer::attach(&node, &format!("fwcc-{i}"), i))
        .collect();
    let extra = json!({"backend": backend, "ingressPolicy": "same-bridge"});
    // Configs are built here: the records directory is this thread's.
    let confs: Vec<String> = pods
        .iter()
        .map(|p| conf("fwnet", extra.clone(), Some(&p.prev_result())))
        .collect();
    std::thread::scope(|s| {
        for (i, p) in pods.iter().enumerate() {
            let node = &node;
            let c = &confs[i];
            s.spawn(move || {
                assert_ok(&call_eth0(
                    &ours(),
                    node,
                    "ADD",
                    &format!("ctr-{i}"),
                    &p.netns(),
                    c,
                ));
            });
        }
    });
    for (i, p) in pods.iter().enumerate() {
        let c = conf("fwnet", extra.clone(), Some(&p.prev_result()));
        assert_ok(&call_eth0(
            &ours(),
            &node,
            "CHECK",
            &format!("ctr-{i}"),
            &p.netns(),
            &c,
        ));
    }
    assert_eq!(records().len(), 2 * n as usize, "{:?}", records());
    {
        for family in IpFamily::BOTH {
            let r = rules(&node, family);
            let count = |needle: &str| r.iter().filter(|l| l.contains(needle)).count();
            assert_eq!(count("-j CNI-FORWARD"), 1, "{r:#?}");
            assert_eq!(count("-j CNI-ADMIN"), 1, "{r:#?}");
            assert_eq!(count("-j CNI-ISOLATION-STAGE-1"), 1, "{r:#?}");
            assert_eq!(count("CNI-FORWARD-OWNERS"), 0, "{r:#?}");
            assert_eq!(count("-A CNI-FORWARD -s "), n as usize, "{r:#?}");
            assert_eq!(count("-A CNI-ISOLATION-STAGE-2 -o v"), n as usize, "{r:#?}");
        }
    }
    let bare = conf("fwnet", json!({"backend": backend}), None);
    std::thread::scope(|s| {
        for i in 0..pods.len() {
            let node = &node;
            let bare = &bare;
            s.spawn(move || {
                assert_ok(&call_eth0(
                    &ours(),
                    node,
                    "DEL",
                    &format!("ctr-{i}"),
                    "",
                    bare,
                ));
            });
        }
    });
    for p in &pods {
        no_address_left(&node, p);
    }
}

#[test]
fn firewall_iptables_concurrent_adds_and_dels_keep_every_rule_once() {
    if !require_root("firewall_iptables_concurrent_adds_and_dels_keep_every_rule_once") {
        return;
    }
    concurrent("iptables");
}

#[test]
fn firewall_nft_concurrent_adds_and_dels_keep_every_rule_once() {
    if !require_root("firewall_nft_concurrent_adds_and_dels_keep_every_rule_once") {
        return;
    }
    concurrent("nftables");
}

// ---- upstream v1.7+ and our previous release, from fixtures ---------------------

/// `tests/fixtures/firewall/<name>`.
fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/firewall")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Upstream's plugins built locally (`CNI_UPSTREAM_PLUGINS`, a directory
/// holding upstream HEAD's `firewall`): when set, the fixture tests also
/// run the real binary; the fixtures alone always run.
fn upstream_firewall() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var_os("CNI_UPSTREAM_PLUGINS")?).join("firewall");
    assert!(
        p.is_file(),
        "CNI_UPSTREAM_PLUGINS has no firewall: {}",
        p.display()
    );
    eprintln!("also running upstream's {}", p.display());
    Some(p)
}

/// The pods of the fixtures: (container ID, ingressPolicy, bridge, IPv4,
/// IPv6), ADDed in this order.
const PODMAN_PODS: [(&str, &str, &str, &str, &str); 3] = [
    (
        "c1",
        "same-bridge",
        "cni-podman0",
        "10.88.0.2",
        "fd00:88::2",
    ),
    ("c2", "isolated", "cni-podman1", "10.89.0.2", "fd00:89::2"),
    (
        "c3",
        "same-bridge",
        "cni-podman0",
        "10.88.0.3",
        "fd00:88::3",
    ),
];

/// The config of a fixture pod, with the bridge's `prevResult` (or none).
fn podman_conf(pod: &(&str, &str, &str, &str, &str), extra: Value, with_prev: bool) -> String {
    let (_, policy, bridge, v4, v6) = *pod;
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": bridge}, {"name": "eth0", "sandbox": "/run/netns/fixture-pod"}],
        "ips": [{"address": format!("{v4}/16"), "interface": 1},
                {"address": format!("{v6}/64"), "interface": 1}]
    });
    let mut e = json!({"ingressPolicy": policy});
    for (k, v) in extra.as_object().into_iter().flatten() {
        e[k] = v.clone();
    }
    conf("podman", e, with_prev.then_some(&prev))
}

/// Loads an `iptables-save` text into the node's filter table.
fn restore(node: &Netns, family: IpFamily, text: &str) {
    feed(node, &iptables_program(family, "-restore"), &[], text);
}

/// A filter table text without the per-address accept rules (what is
/// left when every container is gone: the Go plugin never removes shared
/// chains and isolation rules).
fn without_accepts(table: &str) -> String {
    table
        .lines()
        .filter(|l| !l.starts_with("-A CNI-FORWARD -d ") && !l.starts_with("-A CNI-FORWARD -s "))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// What upstream's DEL runs for one address (`iptables.go`: `Delete` of
/// its two rules, through go-iptables, errors ignored).
fn upstream_del_commands(node: &Netns, v4: &str, v6: &str) {
    for (prog, host) in [
        ("iptables", format!("{v4}/32")),
        ("ip6tables", format!("{v6}/128")),
    ] {
        for rule in [
            vec![
                "-d",
                &host,
                "-m",
                "conntrack",
                "--ctstate",
                "RELATED,ESTABLISHED",
                "-j",
                "ACCEPT",
            ],
            vec!["-s", &host, "-j", "ACCEPT"],
        ] {
            let mut args = vec!["-t", "filter", "-D", "CNI-FORWARD"];
            args.extend(rule);
            args.push("--wait");
            run_ok(node.command(prog).args(&args));
        }
    }
}

#[test]
fn firewall_iptables_writes_exactly_what_upstream_v1_9_writes() {
    if !require_root("firewall_iptables_writes_exactly_what_upstream_v1_9_writes") {
        return;
    }
    let want = (
        fixture("upstream-v1.9-podman.ipv4.rules"),
        fixture("upstream-v1.9-podman.ipv6.rules"),
    );
    // The default backend (no firewalld here), "iptables" and "nftables"
    // alike.
    for backend in ["", "iptables", "nftables"] {
        let node = fw_node("fwup-write");
        for pod in &PODMAN_PODS {
            let c = podman_conf(pod, json!({"backend": backend}), true);
            assert_ok(&call_eth0(&ours(), &node, "ADD", pod.0, "/run/netns/x", &c));
        }
        assert_eq!(
            filter_tables(&node),
            want,
            "backend {backend:?}: our rules vs upstream v1.9's"
        );
    }
    if let Some(up) = upstream_firewall() {
        let node = fw_node("fwup-real");
        for pod in &PODMAN_PODS {
            let c = podman_conf(pod, json!({"backend": "iptables"}), true);
            assert_ok(&call_eth0(&up, &node, "ADD", pod.0, "/run/netns/x", &c));
        }
        assert_eq!(
            filter_tables(&node),
            want,
            "the real upstream binary vs the fixture"
        );
    }
}

fn takes_over_what_upstream_v1_9_wrote(backend: &str) {
    let up = upstream_firewall();
    let node = fw_node(&format!("fwup-over-{backend}"));
    let v4 = fixture("upstream-v1.9-podman.ipv4.rules");
    let v6 = fixture("upstream-v1.9-podman.ipv6.rules");
    match &up {
        Some(up) => {
            for pod in &PODMAN_PODS {
                let c = podman_conf(pod, json!({"backend": "iptables"}), true);
                assert_ok(&call_eth0(up, &node, "ADD", pod.0, "/run/netns/x", &c));
            }
        }
        None => {
            restore(&node, IpFamily::V4, &v4);
            restore(&node, IpFamily::V6, &v6);
        }
    }
    assert_eq!(filter_tables(&node), (v4.clone(), v6.clone()));
    // Our CHECK accepts upstream's rules; our ADD adds no duplicate.
    for pod in &PODMAN_PODS {
        let c = podman_conf(pod, json!({"backend": backend}), true);
        assert_ok(&call_eth0(
            &ours(),
            &node,
            "CHECK",
            pod.0,
            "/run/netns/x",
            &c,
        ));
        assert_ok(&call_eth0(&ours(), &node, "ADD", pod.0, "/run/netns/x", &c));
    }
    assert_eq!(filter_tables(&node), (v4.clone(), v6.clone()));
    // Our DEL, with the prevResult the runtime keeps, removes each pod's
    // rules; shared chains and isolation stay, as upstream leaves them.
    for pod in &PODMAN_PODS {
        let c = podman_conf(pod, json!({"backend": backend}), true);
        assert_ok(&call_eth0(&ours(), &node, "DEL", pod.0, "", &c));
    }
    assert_eq!(
        filter_tables(&node),
        (without_accepts(&v4), without_accepts(&v6))
    );
    assert_eq!(records(), Vec::<String>::new());
}

fn removed_by_upstream_v1_9s_del(backend: &str) {
    let up = upstream_firewall();
    let v4 = fixture("upstream-v1.9-podman.ipv4.rules");
    let v6 = fixture("upstream-v1.9-podman.ipv6.rules");
    let node = fw_node(&format!("fwup-del-{backend}"));
    for pod in &PODMAN_PODS {
        let c = podman_conf(pod, json!({"backend": backend}), true);
        assert_ok(&call_eth0(&ours(), &node, "ADD", pod.0, "/run/netns/x", &c));
    }
    // Upstream's CHECK on our rules, then its DEL: with the binary when
    // there is one, else the commands its DEL runs (the tables are the
    // fixture's, so upstream's CHECK would look for exactly these rules).
    for pod in &PODMAN_PODS {
        let c = podman_conf(pod, json!({"backend": "iptables"}), true);
        match &up {
            Some(up) => {
                assert_ok(&call_eth0(up, &node, "CHECK", pod.0, "/run/netns/x", &c));
                assert_ok(&call_eth0(up, &node, "DEL", pod.0, "/run/netns/x", &c));
            }
            None => upstream_del_commands(&node, pod.3, pod.4),
        }
    }
    // Nothing of ours is left in the firewall.
    assert_eq!(
        filter_tables(&node),
        (without_accepts(&v4), without_accepts(&v6))
    );
    // The owner records, files beside the firewall, go with our next GC.
    assert_eq!(records().len(), 6, "{:?}", records());
    assert_ok(&gc(&node, "podman", json!({"backend": backend}), &[]));
    assert_eq!(records(), Vec::<String>::new());
    assert_eq!(
        filter_tables(&node),
        (without_accepts(&v4), without_accepts(&v6))
    );
}

#[test]
fn firewall_iptables_takes_over_what_upstream_v1_9_wrote() {
    if !require_root("firewall_iptables_takes_over_what_upstream_v1_9_wrote") {
        return;
    }
    takes_over_what_upstream_v1_9_wrote("iptables");
}

#[test]
fn firewall_nft_takes_over_what_upstream_v1_9_wrote() {
    if !require_root("firewall_nft_takes_over_what_upstream_v1_9_wrote") {
        return;
    }
    takes_over_what_upstream_v1_9_wrote("nftables");
}

#[test]
fn firewall_iptables_rules_are_removed_by_upstream_v1_9s_del() {
    if !require_root("firewall_iptables_rules_are_removed_by_upstream_v1_9s_del") {
        return;
    }
    removed_by_upstream_v1_9s_del("iptables");
}

#[test]
fn firewall_nft_rules_are_removed_by_upstream_v1_9s_del() {
    if !require_root("firewall_nft_rules_are_removed_by_upstream_v1_9s_del") {
        return;
    }
    removed_by_upstream_v1_9s_del("nftables");
}

/// Loads our previous release's state (fixtures): its iptables owner
/// records and its nf_tables elements of `c1` and `c2`.
fn load_previous_release(node: &Netns) -> (String, String) {
    let v4 = fixture("cni-rs-v0.1-owners.ipv4.rules");
    let v6 = fixture("cni-rs-v0.1-owners.ipv6.rules");
    restore(node, IpFamily::V4, &v4);
    restore(node, IpFamily::V6, &v6);
    let dir = TempDir::new("fw-prev-nft");
    let f = dir.write("ruleset.nft", &fixture("cni-rs-v0.1-nft.ruleset"));
    run_ok(node.command("nft").arg("-f").arg(&f));
    assert!(v4.contains(&legacy_owner_rule(
        "10.88.0.2",
        IpFamily::V4,
        "podman",
        "c1"
    )));
    (v4, v6)
}

#[test]
fn firewall_del_and_gc_remove_what_our_previous_release_left() {
    if !require_root("firewall_del_and_gc_remove_what_our_previous_release_left") {
        return;
    }
    let node = fw_node("fwprev");
    let (v4, v6) = load_previous_release(&node);
    let bare = conf("podman", json!({}), None);
    // DEL of c1 without prevResult: its old owner records name it.
    assert_ok(&call_eth0(&ours(), &node, "DEL", "c1", "", &bare));
    let t4 = filter_table(&node, IpFamily::V4);
    assert!(
        !t4.contains("10.88.0.2") && t4.contains("10.88.0.3"),
        "{t4}"
    );
    assert!(
        t4.contains(&legacy_owner_rule(
            "10.88.0.3",
            IpFamily::V4,
            "podman",
            "c2"
        )),
        "{t4}"
    );
    assert_eq!(
        elements(&node, "allowed4"),
        vec!["10.88.0.3 net=podman cid=c2".to_string()]
    );
    // GC with no valid attachment: c2 goes, and so does the old chain.
    assert_ok(&gc(&node, "podman", json!({}), &[]));
    let gone = |t: &str| -> String {
        without_accepts(t)
            .lines()
            .filter(|l| !l.contains("CNI-FORWARD-OWNERS"))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    assert_eq!(filter_tables(&node), (gone(&v4), gone(&v6)));
    assert_eq!(elements(&node, "allowed4"), Vec::<String>::new());
    assert_eq!(elements(&node, "allowed6"), Vec::<String>::new());
    assert_eq!(records(), Vec::<String>::new());
}

#[test]
fn firewall_an_address_new_owner_replaces_our_previous_releases_record() {
    if !require_root("firewall_an_address_new_owner_replaces_our_previous_releases_record") {
        return;
    }
    let node = fw_node("fwprev-own");
    load_previous_release(&node);
    // c9 gets c1's old address: c1's old record goes, c2's stays.
    let pod = ("c9", "open", "cni-podman0", "10.88.0.2", "fd00:88::2");
    let c = podman_conf(&pod, json!({"backend": "iptables"}), true);
    assert_ok(&call_eth0(&ours(), &node, "ADD", "c9", "/run/netns/x", &c));
    let t4 = filter_table(&node, IpFamily::V4);
    assert!(!t4.contains("id: \\\"c1\\\""), "{t4}");
    assert!(
        t4.contains(&legacy_owner_rule(
            "10.88.0.3",
            IpFamily::V4,
            "podman",
            "c2"
        )),
        "{t4}"
    );
    // A late DEL of c1, with its old prevResult, leaves c9's rules.
    let late = podman_conf(
        &("c1", "open", "cni-podman0", "10.88.0.2", "fd00:88::2"),
        json!({}),
        true,
    );
    assert_ok(&call_eth0(&ours(), &node, "DEL", "c1", "", &late));
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "CHECK",
        "c9",
        "/run/netns/x",
        &c,
    ));
    assert_eq!(
        records(),
        vec!["10.88.0.2 c9 iptables", "fd00:88::2 c9 iptables"]
    );
    // c2's DEL empties the old chain, which goes with its last record.
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "DEL",
        "c2",
        "",
        &conf("podman", json!({}), None),
    ));
    for family in IpFamily::BOTH {
        let t = filter_table(&node, family);
        assert!(!t.contains("CNI-FORWARD-OWNERS"), "{t}");
        assert!(!t.contains("10.88.0.3") && !t.contains("fd00:88::3"), "{t}");
    }
}

// ---- firewalld (a real one, on a private system bus) ------------------------------

/// A plugin call inside `bus`'s namespaces (the node's network namespace,
/// the private bus at its default path).
fn call_in_bus(
    bus: &PrivateBus,
    plugin: &std::path::Path,
    verb: &str,
    cid: &str,
    netns: &str,
    stdin: &str,
) -> PluginOutput {
    call_plugin_cmd(
        bus.command(plugin),
        &[
            ("CNI_COMMAND", verb),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        stdin,
    )
}

fn gc_in_bus(bus: &PrivateBus, net: &str, extra: Value, valid: &[&str]) -> PluginOutput {
    let valid: Vec<Value> = valid
        .iter()
        .map(|c| json!({"containerID": c, "ifname": "eth0"}))
        .collect();
    let mut c = json!({"cniVersion": "1.1.0", "name": net, "type": "firewall",
                       "dataDir": records_dir(), "cni.dev/valid-attachments": valid});
    for (k, v) in extra.as_object().into_iter().flatten() {
        c[k] = v.clone();
    }
    call_plugin_cmd(
        bus.command(ours()),
        &[("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")],
        &c.to_string(),
    )
}

/// The sources firewalld holds for a pod in `zone`.
fn pod_sources(a: &Peer) -> Vec<String> {
    let mut v = vec![format!("{}/32", a.v4()), format!("fd00:{}::2/128", a.idx)];
    v.sort();
    v
}

#[test]
fn firewall_firewalld_puts_the_pod_in_the_zone_while_added() {
    if !require_root("firewall_firewalld_puts_the_pod_in_the_zone_while_added") {
        return;
    }
    let node = fw_node("fwfd");
    let a = Peer::attach(&node, "fwfd-a", 1);
    let up = Peer::attach(&node, "fwfd-up", 9);
    let _sa = echo_server(&a.ns, "podA", PORT);
    let _su = echo_server(&up.ns, "up", PORT);
    let mut bus = PrivateBus::start(&node);
    bus.start_firewalld();
    // The pod's side of the node in zone drop, the upstream side in zone
    // block: no policy forwards between them, so only a source bound to
    // trusted gets out.
    bus.firewall_cmd(&["--zone=drop", "--change-interface=v1"]);
    bus.firewall_cmd(&["--zone=block", "--change-interface=v9"]);
    assert_eq!(ask(&a.ns, &up.v4(), PORT), None, "firewalld drops the pod");
    let before_iptables = filter_tables(&node);
    let prev = a.prev_result();
    let c = conf("fwnet", json!({"backend": "firewalld"}), Some(&prev));
    assert_ok(&call_in_bus(&bus, &ours(), "ADD", "ctr-a", &a.netns(), &c));
    assert_eq!(bus.sources("trusted"), pod_sources(&a));
    assert_eq!(
        records(),
        vec![
            format!("{} ctr-a firewalld", a.v4()),
            format!("{} ctr-a firewalld", a.v6())
        ]
    );
    assert_eq!(
        filter_tables(&node),
        before_iptables,
        "the firewalld backend writes no iptables rule"
    );
    let from_a = format!("up {}", a.v4());
    assert_eq!(ask(&a.ns, &up.v4(), PORT).as_deref(), Some(from_a.as_str()));
    let from_a6 = format!("up {}", a.v6());
    assert_eq!(
        ask(&a.ns, &up.v6(), PORT).as_deref(),
        Some(from_a6.as_str())
    );
    assert_ok(&call_in_bus(
        &bus,
        &ours(),
        "CHECK",
        "ctr-a",
        &a.netns(),
        &c,
    ));
    assert_ok(&call_in_bus(&bus, &ours(), "ADD", "ctr-a", &a.netns(), &c));
    assert_eq!(
        bus.sources("trusted"),
        pod_sources(&a),
        "ADD again: once each"
    );

    // Removed behind the plugin's back: CHECK says which; ADD repairs.
    bus.firewall_cmd(&["--zone=trusted", "--remove-source=fd00:1::2/128"]);
    call_in_bus(&bus, &ours(), "CHECK", "ctr-a", &a.netns(), &c).assert_error(
        102,
        "fd00:1::2/128 is not a source of firewalld zone \"trusted\"",
    );
    assert_ok(&call_in_bus(&bus, &ours(), "ADD", "ctr-a", &a.netns(), &c));
    assert_ok(&call_in_bus(
        &bus,
        &ours(),
        "CHECK",
        "ctr-a",
        &a.netns(),
        &c,
    ));

    // DEL without prevResult and namespace: found by the records.
    let bare = conf("fwnet", json!({"backend": "firewalld"}), None);
    assert_ok(&call_in_bus(&bus, &ours(), "DEL", "ctr-a", "", &bare));
    assert_eq!(bus.sources("trusted"), Vec::<String>::new());
    assert_eq!(ask(&a.ns, &up.v4(), PORT), None, "dropped again after DEL");
    no_address_left(&node, &a);
    assert_ok(&call_in_bus(&bus, &ours(), "DEL", "ctr-a", "", &bare));

    // Another zone; and a zone firewalld does not have (code 7, nothing left).
    let public = conf(
        "fwnet",
        json!({"backend": "firewalld", "firewalldZone": "public"}),
        Some(&prev),
    );
    assert_ok(&call_in_bus(
        &bus,
        &ours(),
        "ADD",
        "ctr-p",
        &a.netns(),
        &public,
    ));
    assert_eq!(bus.sources("public"), pod_sources(&a));
    assert_ok(&call_in_bus(&bus, &ours(), "DEL", "ctr-p", "", &public));
    assert_eq!(bus.sources("public"), Vec::<String>::new());
    let nosuch = conf(
        "fwnet",
        json!({"backend": "firewalld", "firewalldZone": "nosuch"}),
        Some(&prev),
    );
    call_in_bus(&bus, &ours(), "ADD", "ctr-n", &a.netns(), &nosuch)
        .assert_error(7, "firewalldZone: firewalld has no zone \"nosuch\"");
    assert_eq!(
        records(),
        Vec::<String>::new(),
        "a failed ADD leaves no record"
    );

    // An address bound to another zone is a conflict (code 103).
    bus.firewall_cmd(&["--zone=public", "--add-source=10.1.0.2/32"]);
    call_in_bus(&bus, &ours(), "ADD", "ctr-x", &a.netns(), &c)
        .assert_error(103, "10.1.0.2/32 is bound to another zone than \"trusted\"");
    assert_eq!(bus.sources("trusted"), Vec::<String>::new(), "undone");
    assert_eq!(records(), Vec::<String>::new());
    bus.firewall_cmd(&["--zone=public", "--remove-source=10.1.0.2/32"]);
}

#[test]
fn firewall_firewalld_gc_removes_attachments_that_are_not_valid() {
    if !require_root("firewall_firewalld_gc_removes_attachments_that_are_not_valid") {
        return;
    }
    let node = fw_node("fwfd-gc");
    let a = Peer::attach(&node, "fwfg-a", 1);
    let b = Peer::attach(&node, "fwfg-b", 2);
    let o = Peer::attach(&node, "fwfg-o", 3);
    let mut bus = PrivateBus::start(&node);
    bus.start_firewalld();
    let extra = json!({"backend": "firewalld"});
    for (p, net, cid) in [
        (&a, "fwnet", "ctr-a"),
        (&b, "fwnet", "ctr-b"),
        (&o, "other", "ctr-o"),
    ] {
        let c = conf(net, extra.clone(), Some(&p.prev_result()));
        assert_ok(&call_in_bus(&bus, &ours(), "ADD", cid, &p.netns(), &c));
    }
    // An address the admin put in the zone is not ours: GC leaves it.
    bus.firewall_cmd(&["--zone=trusted", "--add-source=192.0.2.7/32"]);
    assert_ok(&gc_in_bus(&bus, "fwnet", extra.clone(), &["ctr-a"]));
    let mut want: Vec<String> = pod_sources(&a)
        .into_iter()
        .chain(pod_sources(&o))
        .chain(["192.0.2.7/32".to_string()])
        .collect();
    want.sort();
    assert_eq!(bus.sources("trusted"), want);
    let recs = records();
    assert!(!recs.iter().any(|r| r.contains("ctr-b")), "{recs:?}");
    assert_eq!(recs.len(), 4, "{recs:?}");
    // With firewalld gone its runtime sources are gone too: DEL and GC
    // still succeed and drop the records.
    bus.stop_firewalld();
    assert_ok(&gc_in_bus(&bus, "fwnet", extra.clone(), &[]));
    assert_ok(&call_in_bus(
        &bus,
        &ours(),
        "DEL",
        "ctr-o",
        "",
        &conf("other", extra, None),
    ));
    assert_eq!(records(), Vec::<String>::new());
}

#[test]
fn firewall_default_backend_is_firewalld_only_where_it_runs() {
    if !require_root("firewall_default_backend_is_firewalld_only_where_it_runs") {
        return;
    }
    let node = fw_node("fwfd-auto");
    let a = Peer::attach(&node, "fwfa-a", 1);
    let prev = a.prev_result();
    let auto = conf("fwnet", json!({}), Some(&prev));
    let bare = conf("fwnet", json!({}), None);
    // No bus socket at all (every test command's default): iptables.
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "ADD",
        "ctr-a",
        &a.netns(),
        &auto,
    ));
    assert!(rules(&node, IpFamily::V4).contains(&accept_rules(&a.v4(), IpFamily::V4)[1]));
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &bare));
    no_address_left(&node, &a);
    // A system bus without firewalld: iptables; "firewalld" is refused.
    let mut bus = PrivateBus::start(&node);
    assert_ok(&call_in_bus(
        &bus,
        &ours(),
        "ADD",
        "ctr-a",
        &a.netns(),
        &auto,
    ));
    assert_eq!(
        records(),
        vec![
            format!("{} ctr-a iptables", a.v4()),
            format!("{} ctr-a iptables", a.v6())
        ]
    );
    assert_ok(&call_in_bus(&bus, &ours(), "DEL", "ctr-a", "", &bare));
    no_address_left(&node, &a);
    let explicit = conf("fwnet", json!({"backend": "firewalld"}), Some(&prev));
    call_in_bus(&bus, &ours(), "ADD", "ctr-a", &a.netns(), &explicit).assert_error(
        2,
        "firewalld is not running on this node (org.fedoraproject.FirewallD1 is not on the system bus)",
    );
    // firewalld running: the default is firewalld, as in Go.
    bus.start_firewalld();
    let before = filter_tables(&node);
    assert_ok(&call_in_bus(
        &bus,
        &ours(),
        "ADD",
        "ctr-a",
        &a.netns(),
        &auto,
    ));
    assert_eq!(bus.sources("trusted"), pod_sources(&a));
    assert_eq!(before, filter_tables(&node));
    assert_ok(&call_in_bus(
        &bus,
        &ours(),
        "CHECK",
        "ctr-a",
        &a.netns(),
        &auto,
    ));
    assert_ok(&call_in_bus(&bus, &ours(), "DEL", "ctr-a", "", &bare));
    assert_eq!(bus.sources("trusted"), Vec::<String>::new());
    no_address_left(&node, &a);
    // ingressPolicy with firewalld isolates through iptables, as Go does.
    let iso = conf("fwnet", json!({"ingressPolicy": "isolated"}), Some(&prev));
    assert_ok(&call_in_bus(
        &bus,
        &ours(),
        "ADD",
        "ctr-a",
        &a.netns(),
        &iso,
    ));
    assert_eq!(bus.sources("trusted"), pod_sources(&a));
    let r = rules(&node, IpFamily::V4);
    assert!(
        r.contains(&"-A CNI-ISOLATION-STAGE-1 -i v1 -o v1 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: isolated)\" -j DROP".to_string()),
        "{r:#?}"
    );
    assert!(!r.iter().any(|l| l.contains("-A CNI-FORWARD")), "{r:#?}");
    assert_ok(&call_in_bus(
        &bus,
        &ours(),
        "CHECK",
        "ctr-a",
        &a.netns(),
        &iso,
    ));
    assert_ok(&call_in_bus(&bus, &ours(), "DEL", "ctr-a", "", &bare));
    no_address_left(&node, &a);
}

#[test]
fn firewall_firewalld_switches_with_the_go_plugin_both_ways() {
    if !require_root("firewall_firewalld_switches_with_the_go_plugin_both_ways") {
        return;
    }
    let Some(go) = go_plugin("firewall") else {
        return;
    };
    let node = fw_node("fwfd-go");
    let a = Peer::attach(&node, "fwfgo-a", 1);
    let mut bus = PrivateBus::start(&node);
    bus.start_firewalld();
    let prev = a.prev_result();
    // What podman writes: no backend, so firewalld where it runs.
    let c = conf("fwnet", json!({"backend": ""}), Some(&prev));
    let mut sides = vec![("Go 1.1.1", go)];
    if let Some(up) = upstream_firewall() {
        sides.push(("upstream v1.9", up));
    }
    for (name, go) in &sides {
        // Go ADD, our CHECK and DEL (with the runtime's prevResult).
        assert_ok(&call_in_bus(&bus, go, "ADD", "ctr-go", &a.netns(), &c));
        assert_eq!(bus.sources("trusted"), pod_sources(&a), "{name} ADD");
        assert_ok(&call_in_bus(
            &bus,
            &ours(),
            "CHECK",
            "ctr-go",
            &a.netns(),
            &c,
        ));
        assert_ok(&call_in_bus(&bus, &ours(), "DEL", "ctr-go", "", &c));
        assert_eq!(
            bus.sources("trusted"),
            Vec::<String>::new(),
            "our DEL of {name}'s"
        );
        // Our ADD, Go's CHECK and DEL: nothing left in firewalld.
        assert_ok(&call_in_bus(&bus, &ours(), "ADD", "ctr-rs", &a.netns(), &c));
        assert_ok(&call_in_bus(&bus, go, "CHECK", "ctr-rs", &a.netns(), &c));
        assert_ok(&call_in_bus(&bus, go, "DEL", "ctr-rs", &a.netns(), &c));
        assert_eq!(
            bus.sources("trusted"),
            Vec::<String>::new(),
            "{name}'s DEL of ours"
        );
        // Our record of it goes with our GC.
        assert_ok(&gc_in_bus(&bus, "fwnet", json!({}), &[]));
        assert_eq!(records(), Vec::<String>::new());
    }
}
