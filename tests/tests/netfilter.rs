//! The nftables design at scale: with 1,000 other containers' mappings in
//! the maps, ADD, CHECK and DEL of one container still do exactly their
//! own work. Timings are printed for the record (never asserted: these
//! machines are shared); `cargo test -p tests --test netfilter -- --nocapture`
//! shows them.

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

/// How many elements `nft` lists in map `hostports4`.
fn element_count(node: &Netns) -> usize {
    let out =
        run_ok(
            node.command("nft")
                .args(["list", "map", "inet", "cni_rs_hostport", "hostports4"]),
        );
    String::from_utf8_lossy(&out.stdout)
        .matches(" comment ")
        .count()
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

    // 1,000 mappings of 1,000 other containers, loaded in one nft run.
    let mut script = String::from("add element inet cni_rs_hostport hostports4 { ");
    let elems: Vec<String> = (0..1000u16)
        .map(|i| {
            format!(
                "tcp . {} comment \"net=scale cid=other-{i}\" : 10.1.{}.{} . 80",
                20000 + i,
                i / 250,
                i % 250 + 2
            )
        })
        .collect();
    script.push_str(&elems.join(", "));
    script.push_str(" }\n");
    let mut child = node
        .command("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nft");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(element_count(&node), 1000);

    measure("1000 other mappings");
    // The others are untouched; a conflicting ADD names the holder.
    assert_eq!(element_count(&node), 1000);
    let (out, _) = call(&node, "ADD", "ctr-probe", &netns, &conf(20500));
    out.assert_error(103, "net=scale cid=other-500");
    assert_eq!(element_count(&node), 1000);
}
