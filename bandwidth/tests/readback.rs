//! What the plugin installs, read back through libcni's netlink tc dump
//! (the same code the plugin's CHECK uses), in throwaway namespaces: a node
//! where the plugin runs and a pod wired to it by a veth made with `ip`.

use libcni::netlink::tc::{
    self, PschedClock, Tbf, ETH_P_ALL, INGRESS_HANDLE, INGRESS_PARENT, ROOT,
};
use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use serde_json::json;
use tests::{bin, call_plugin, require_root, Netns, Node};

#[test]
fn bandwidth_state_reads_back_over_netlink() {
    if !require_root("bandwidth_state_reads_back_over_netlink") {
        return;
    }
    let node = Node::new("bwreadback");
    let pod = Netns::new("pod-bwreadback");
    node.ns.ip(&[
        "link",
        "add",
        "veth0",
        "mtu",
        "1400",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        pod.name(),
    ]);
    node.ns.ip(&["link", "set", "veth0", "up"]);
    pod.ip(&["link", "set", "eth0", "up"]);
    let netns = pod.path().to_str().unwrap().to_string();
    let conf = json!({"cniVersion": "1.0.0", "name": "rbnet", "type": "bandwidth",
        "ingressRate": 16_000_000, "ingressBurst": 160_000,
        "egressRate": 8_000_000, "egressBurst": 800_000,
        "prevResult": {"cniVersion": "1.0.0",
            "interfaces": [{"name": "veth0"}, {"name": "eth0", "sandbox": netns}]}})
    .to_string();
    let env = |cmd| {
        vec![
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", "ctr-rb"),
            ("CNI_NETNS", netns.as_str()),
            ("CNI_IFNAME", "eth0"),
        ]
    };
    let out = call_plugin(Some(&node.ns), &bin("bandwidth"), &env("ADD"), &conf);
    assert_eq!(out.exit_code, 0, "{out:?}");

    let mut nl = Netlink::open_in(&NetNs::open(&node.ns.path()).unwrap()).unwrap();
    let veth = nl.link_by_name("veth0").unwrap().unwrap();
    let ifb_name = out.json()["interfaces"][2]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let ifb = nl.link_by_name(&ifb_name).unwrap().unwrap();
    assert_eq!(ifb.kind.as_deref(), Some("ifb"));
    assert_eq!((ifb.mtu, ifb.up), (1400, true));
    assert_eq!(ifb.alias.as_deref(), Some("cni-bandwidth:ctr-rb:eth0"));

    let clock = PschedClock::read().unwrap();
    // Ingress: 2e6 bytes/s, 20000 bytes = 10 ms = 156250 ticks, limit 50000 + 20000.
    let root = nl.qdisc_at(veth.index, ROOT).unwrap().unwrap();
    assert_eq!((root.kind.as_str(), root.handle), ("tbf", tc::handle(1, 0)));
    let want_in = Tbf {
        rate: 2_000_000,
        buffer: 156_250,
        limit: 70_000,
        burst: None,
    };
    assert_eq!(root.tbf, Some(want_in));
    assert_eq!(
        u64::from(want_in.buffer),
        tc::tbf_buffer_ticks(2_000_000, 20_000, &clock)
    );
    // Egress: on the IFB.
    let ifb_root = nl.qdisc_at(ifb.index, ROOT).unwrap().unwrap();
    assert_eq!(
        ifb_root.tbf,
        Some(Tbf {
            rate: 1_000_000,
            buffer: 1_562_500,
            limit: 125_000,
            burst: None
        })
    );
    let ingress = nl.qdisc_at(veth.index, INGRESS_PARENT).unwrap().unwrap();
    assert_eq!(
        (ingress.kind.as_str(), ingress.handle),
        ("ingress", INGRESS_HANDLE)
    );
    let rules: Vec<tc::Filter> = nl
        .filters(veth.index, INGRESS_HANDLE, 0, 0)
        .unwrap()
        .into_iter()
        .filter(|f| f.is_u32_rule())
        .collect();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        (
            rules[0].priority,
            rules[0].protocol,
            rules[0].classid,
            rules[0].match_all,
            rules[0].redirect
        ),
        (1, ETH_P_ALL, Some(tc::handle(1, 1)), true, Some(ifb.index))
    );

    // DEL: nothing of it is left.
    let out = call_plugin(Some(&node.ns), &bin("bandwidth"), &env("DEL"), &conf);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let qdiscs = nl.qdiscs(veth.index).unwrap();
    assert_eq!(qdiscs.len(), 1, "{qdiscs:?}");
    assert_eq!((qdiscs[0].kind.as_str(), qdiscs[0].handle), ("noqueue", 0));
    assert_eq!(nl.link_by_name(&ifb_name).unwrap(), None);
}
