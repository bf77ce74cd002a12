//! The nftables design at scale: with 1,000 other containers' rules in the
//! Go plugin's host port chains (as the Go plugin writes them), ADD, CHECK
//! and DEL of one container still do exactly their own work: the others'
//! rules are untouched, and the container's own are found from its ledger.
//! Timings are printed for the record (never asserted: these machines are
//! shared); `cargo test -p tests --test suite -- netfilter:: --nocapture` shows them.

use serde_json::json;
use std::time::{Duration, Instant};
use tests::*;

fn call(node: &Netns, cmd: &str, cid: &str, netns: &str, stdin: &str) -> (PluginOutput, Duration) {
    let t = Instant::now();
    let out = call_plugin(
        Some(node),
        &bin("portmap"),
        &[
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        stdin,
    );
    (out, t.elapsed())
}

/// `nft list chain ip cni_hostport <chain>`.
fn chain(node: &Netns, name: &str) -> String {
    let out = run_ok(
        node.command("nft")
            .args(["list", "chain", "ip", "cni_hostport", name]),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn netfilter_portmap_cost_does_not_depend_on_other_containers() {
    if !require_root("netfilter_portmap_cost_does_not_depend_on_other_containers") {
        return;
    }
    let node = Netns::new("node-nfscale");
    let pod = Netns::new("nfscale-pod");
    let netns = pod.path().to_str().unwrap().to_string();
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.1.0.2/24", "interface": 0}]
    });
    let conf = |port: u16| {
        json!({
            "cniVersion": "1.0.0", "name": "scale", "type": "portmap", "backend": "nftables",
            "runtimeConfig": {"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]},
            "prevResult": prev,
        })
        .to_string()
    };
    let measure = |label: &str| {
        let (out, add) = call(&node, "ADD", "ctr-probe", &netns, &conf(40000));
        assert_eq!(out.exit_code, 0, "{out:?}");
        let (out, check) = call(&node, "CHECK", "ctr-probe", &netns, &conf(40000));
        assert_eq!(out.exit_code, 0, "{out:?}");
        let (out, del) = call(&node, "DEL", "ctr-probe", "", &conf(40000));
        assert_eq!(out.exit_code, 0, "{out:?}");
        eprintln!("portmap nftables, {label}: ADD {add:?}, CHECK {check:?}, DEL {del:?}");
    };
    measure("empty node");

    // 1,000 other containers, each with a mapping and its two masquerade
    // rules, loaded in one nft run in the Go plugin's shapes.
    let mut script = String::new();
    for i in 0..1000u16 {
        let ip = format!("10.1.{}.{}", i / 250, i % 250 + 2);
        script.push_str(&format!(
            "add rule ip cni_hostport hostports tcp dport {} dnat to {ip}:80 comment \"other-{i}\"\n\
             add rule ip cni_hostport masquerading ip saddr {ip} ip daddr {ip} masquerade comment \"other-{i}\"\n\
             add rule ip cni_hostport masquerading ip saddr 127.0.0.1 ip daddr {ip} masquerade comment \"other-{i}\"\n",
            20000 + i
        ));
    }
    feed(&node, "nft", &["-f", "-"], &script);
    let (hostports, masquerading) = (chain(&node, "hostports"), chain(&node, "masquerading"));
    assert_eq!(hostports.matches(" comment ").count(), 1000);
    assert_eq!(masquerading.matches(" comment ").count(), 2000);

    measure("1000 other containers");
    // The others are untouched, to the byte.
    assert_eq!(chain(&node, "hostports"), hostports);
    assert_eq!(chain(&node, "masquerading"), masquerading);
    // A second mapping of a held port goes in (as with the Go plugin) and
    // out again, and only its own rule does.
    let (out, _) = call(&node, "ADD", "ctr-probe", &netns, &conf(20500));
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(chain(&node, "hostports").matches("dport 20500 ").count(), 2);
    let (out, _) = call(&node, "DEL", "ctr-probe", "", &conf(20500));
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(chain(&node, "hostports"), hostports);
}
