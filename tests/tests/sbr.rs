//! The sbr plugin (source-based routing) in real namespaces: a two-interface
//! pod whose replies leave through the interface they came in on, through
//! our cnitool, the upstream Go libcni's `go-cnitool` and containerd's CRI
//! path (`go-cni-cri`); its rules and tables exactly, side by side with
//! Debian's Go 1.1.1 `sbr` (the same state but the deliberate
//! differences, each other's CHECK and DEL); `table`, `gateways` and
//! `addSourceHints`; DEL without `prevResult`, without the interface,
//! without the namespace; a failed ADD leaving nothing; GC and STATUS.
//!
//! The multi-homed pod: `eth0` on a bridge of the node (the default route,
//! via 10.88.0.1) and `net1`, a macvlan on the node's uplink `up0` to a
//! router namespace (10.70.0.1/24, fd70::1/64) behind which a client sits
//! (192.0.2.10, 2001:db8:2::10). The node has no route to the client: a
//! reply that left through `eth0` is lost.

use serde_json::{json, Value};
use std::path::Path;
use tests::*;

const PORT: u16 = 7171;

/// One ping from `ns` with source address `src`, which must be answered.
fn ping_from(ns: &Netns, src: &str, dst: &str) {
    let out = ns
        .command("ping")
        .args(["-c1", "-W1", "-I", src, dst])
        .output()
        .expect("ping");
    assert!(
        out.status.success(),
        "ping {dst} from {src} in {} failed: {}",
        ns.name(),
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn sbr_answers_version() {
    let out = call_plugin(None, &bin("sbr"), &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["supportedVersions"],
        json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
}

// ---- what the kernel holds ------------------------------------------------

/// `from <src> lookup <table>` of the source rules of one family of `ns`,
/// sorted, with the priority: `32765 from 10.70.0.10 lookup 100`.
fn rules(ns: &Netns, family: IpFamily) -> Vec<String> {
    let mut v: Vec<String> = ns
        .ip_json(&[ip_option(family), "rule", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["src"] != "all")
        .map(|r| {
            format!(
                "{} from {} lookup {}",
                r["priority"],
                r["src"].as_str().unwrap(),
                r["table"].as_str().unwrap()
            )
        })
        .collect();
    v.sort();
    v
}

/// `table dst via dev [src]` of the routes of one family in every table
/// but `local` (and without the kernel's link-local fe80::/64 routes when
/// `link_local` is false), sorted.
fn table_routes(ns: &Netns, family: IpFamily, link_local: bool) -> Vec<String> {
    let mut v: Vec<String> = ns
        .ip_json(&[ip_option(family), "route", "show", "table", "all"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["table"] != "local" && r["type"].as_str().unwrap_or("unicast") == "unicast")
        .filter(|r| link_local || !r["dst"].as_str().unwrap_or("").starts_with("fe80"))
        .map(|r| {
            let mut s = format!(
                "{} {} via {} dev {}",
                r["table"].as_str().unwrap_or("main"),
                r["dst"].as_str().unwrap_or(""),
                r["gateway"].as_str().unwrap_or("-"),
                r["dev"].as_str().unwrap_or("")
            );
            if let Some(src) = r["prefsrc"].as_str() {
                s.push_str(&format!(" src {src}"));
            }
            s
        })
        .collect();
    v.sort();
    v
}

/// The device `ip route get <dst> from <src>` in `ns` picks.
fn route_get_dev(ns: &Netns, dst: &str, src: &str) -> String {
    let v = ns.ip_json(&["route", "get", dst, "from", src]);
    v[0]["dev"].as_str().unwrap_or_default().to_string()
}

// ---- the multi-homed pod -----------------------------------------------------

/// The node, the router with the client behind it, and the conflists:
/// `podnet` (bridge + host-local, eth0) and `lan` (macvlan + static +
/// sbr, net1; the pod's address from the `ips` capability).
struct Site {
    node: Node,
    router: Netns,
    client: Netns,
    data: TempDir,
}

impl Site {
    fn new(tag: &str) -> Site {
        let site = Site {
            node: Node::new(tag),
            router: Netns::new(&format!("rt-{tag}")),
            client: Netns::new(&format!("cl-{tag}")),
            data: TempDir::new(&format!("data-{tag}")),
        };
        let (node, rt, cl) = (&site.node.ns, &site.router, &site.client);
        node.ip(&["link", "set", "lo", "up"]);
        node.ip(&[
            "link",
            "add",
            "up0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            rt.name(),
        ]);
        node.ip(&["link", "set", "up0", "up"]);
        rt.ip(&["link", "set", "lo", "up"]);
        rt.ip(&["link", "set", "eth0", "up"]);
        rt.ip(&["addr", "add", "10.70.0.1/24", "dev", "eth0"]);
        rt.ip(&["addr", "add", "fd70::1/64", "dev", "eth0", "nodad"]);
        rt.ip(&[
            "link",
            "add",
            "cl0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            cl.name(),
        ]);
        rt.ip(&["link", "set", "cl0", "up"]);
        rt.ip(&["addr", "add", "192.0.2.1/24", "dev", "cl0"]);
        rt.ip(&["addr", "add", "2001:db8:2::1/64", "dev", "cl0", "nodad"]);
        run_ok(rt.command("sh").args([
            "-c",
            "echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > /proc/sys/net/ipv6/conf/all/forwarding",
        ]));
        cl.ip(&["link", "set", "lo", "up"]);
        cl.ip(&["link", "set", "eth0", "up"]);
        cl.ip(&["addr", "add", "192.0.2.10/24", "dev", "eth0"]);
        cl.ip(&["addr", "add", "2001:db8:2::10/64", "dev", "eth0", "nodad"]);
        cl.ip(&["route", "add", "default", "via", "192.0.2.1"]);
        cl.ip(&["-6", "route", "add", "default", "via", "2001:db8:2::1"]);
        site.node.write_conf(
            "10-podnet.conflist",
            &json!({"cniVersion": "1.0.0", "name": "podnet", "plugins": [
                {"type": "bridge", "bridge": "sb-br0", "isDefaultGateway": true,
                 "ipam": {"type": "host-local", "dataDir": site.data.path(),
                          "ranges": [[{"subnet": "10.88.0.0/24"}]]}}
            ]}),
        );
        site.node.write_conf(
            "20-lan.conflist",
            &json!({"cniVersion": "1.0.0", "name": "lan", "plugins": [
                {"type": "macvlan", "master": "up0", "mode": "bridge",
                 "capabilities": {"ips": true},
                 "ipam": {"type": "static",
                          "addresses": [{"address": "10.70.0.10/24", "gateway": "10.70.0.1"},
                                        {"address": "fd70::10/64", "gateway": "fd70::1"}]}},
                // The addresses come from the ips capability, without
                // gateways: sbr's default routes go through these.
                {"type": "sbr", "gateways": ["10.70.0.1", "fd70::1"]}
            ]}),
        );
        site
    }

    /// `verb` of network `net` on `ifname` of `pod` through `tool`
    /// ("ours" or "go"), the container ID the pod's name.
    fn run(
        &self,
        tool: &str,
        verb: &str,
        net: &str,
        ifname: &str,
        pod: &Netns,
        env: &[(&str, &str)],
    ) -> PluginOutput {
        let path = pod.path();
        let args = [verb, net, path.to_str().unwrap()];
        let mut env = env.to_vec();
        env.extend([("CNI_CONTAINERID", pod.name()), ("CNI_IFNAME", ifname)]);
        match tool {
            "ours" => self.node.cnitool_with(&bin("cnitool"), &args, &env),
            _ => self
                .node
                .go_cnitool(&go_cnitool().expect("go-cnitool"), &args, &env),
        }
    }

    fn ok(&self, tool: &str, verb: &str, net: &str, ifname: &str, pod: &Netns, caps: &str) {
        let env: Vec<(&str, &str)> = if caps.is_empty() {
            vec![]
        } else {
            vec![("CAP_ARGS", caps)]
        };
        let out = self.run(tool, verb, net, ifname, pod, &env);
        assert_eq!(out.exit_code, 0, "{tool} {verb} {net}: {out:?}");
    }
}

#[test]
fn replies_leave_through_the_interface_they_came_in_on() {
    if !require_root("replies_leave_through_the_interface_they_came_in_on") {
        return;
    }
    if go_cnitool().is_none() {
        return;
    }
    let site = Site::new("sb-mh");
    // Pod a through our cnitool, pod b through go-cnitool.
    let pods = [Netns::new("sb-mh-a"), Netns::new("sb-mh-b")];
    let caps = [
        r#"{"ips": ["10.70.0.10/24", "fd70::10/64"]}"#,
        r#"{"ips": ["10.70.0.11/24", "fd70::11/64"]}"#,
    ];
    let empty: Vec<NetSnapshot> = pods.iter().map(NetSnapshot::take).collect();
    let tools = ["ours", "go"];
    for ((pod, tool), cap) in pods.iter().zip(tools).zip(caps) {
        site.ok(tool, "add", "podnet", "eth0", pod, "");
        site.ok(tool, "add", "lan", "net1", pod, cap);
    }
    let servers: Vec<Listener> = pods
        .iter()
        .zip(["a", "b"])
        .map(|(p, n)| echo_server(p, n, PORT))
        .collect();

    let a = &pods[0];
    // net1's IPv4 address got table 100, its IPv6 address table 101; the
    // main table lost net1's routes and kept eth0's.
    assert_eq!(rules(a, IpFamily::V4), ["32765 from 10.70.0.10 lookup 100"]);
    assert_eq!(rules(a, IpFamily::V6), ["32765 from fd70::10 lookup 101"]);
    assert_eq!(
        table_routes(a, IpFamily::V4, false),
        [
            "100 10.70.0.0/24 via - dev net1 src 10.70.0.10",
            "100 default via 10.70.0.1 dev net1",
            "main 10.88.0.0/24 via - dev eth0 src 10.88.0.2",
            "main default via 10.88.0.1 dev eth0",
        ]
    );
    assert_eq!(
        table_routes(a, IpFamily::V6, true),
        [
            "101 default via fd70::1 dev net1",
            "101 fd70::/64 via - dev net1",
            "101 fe80::/64 via - dev net1",
            "main fe80::/64 via - dev eth0",
        ]
    );
    for (pod, addr, addr6, eth0, name) in [
        (&pods[0], "10.70.0.10", "fd70::10", "10.88.0.2", "a"),
        (&pods[1], "10.70.0.11", "fd70::11", "10.88.0.3", "b"),
    ] {
        // The client reaches the pod on net1, and the reply finds its way
        // back through net1: the node has no route to the client.
        assert_eq!(route_get_dev(pod, "192.0.2.10", addr), "net1");
        assert_eq!(route_get_dev(pod, "192.0.2.10", eth0), "eth0");
        assert_eq!(
            ask(&site.client, addr, PORT).as_deref(),
            Some(format!("{name} 192.0.2.10").as_str())
        );
        assert_eq!(
            ask(&site.client, addr6, PORT).as_deref(),
            Some(format!("{name} 2001:db8:2::10").as_str())
        );
        // eth0 is untouched: the node still reaches the pod there.
        assert_ping(&site.node.ns, eth0);
    }

    // CHECK of both networks through both tools, each on the other's ADD:
    // the bridge's CHECK finds net1's routes... it checks eth0's; sbr's
    // CHECK finds its rules and tables.
    for ((pod, tool), cap) in pods.iter().zip(["go", "ours"]).zip(caps) {
        site.ok(tool, "check", "podnet", "eth0", pod, "");
        site.ok(tool, "check", "lan", "net1", pod, cap);
    }
    // Once the rule is gone, the routes of net1's address are nowhere its
    // traffic finds them: macvlan's CHECK already says so.
    let check_a = || site.run("ours", "check", "lan", "net1", a, &[("CAP_ARGS", caps[0])]);
    a.ip(&["rule", "del", "from", "10.70.0.10", "lookup", "100"]);
    let out = check_a();
    assert_ne!(out.exit_code, 0);
    assert!(
        out.stderr
            .contains("no route to 10.70.0.0/24 through \"net1\" for address 10.70.0.10/24"),
        "{out:?}"
    );
    a.ip(&["rule", "add", "from", "10.70.0.10", "lookup", "100"]);
    // The default route through the configured gateway gone: sbr's CHECK.
    a.ip(&["route", "del", "default", "table", "100"]);
    let out = check_a();
    assert_ne!(out.exit_code, 0);
    assert!(
        out.stderr.contains(
            "table 100 (of the rule from 10.70.0.10) has no default route via 10.70.0.1 through \"net1\""
        ),
        "{out:?}"
    );
    a.ip(&[
        "route",
        "add",
        "default",
        "via",
        "10.70.0.1",
        "dev",
        "net1",
        "table",
        "100",
    ]);
    check_a().assert_silent_ok();

    // Without sbr, the same network loses the client: the reply goes out
    // through eth0, to a node that has no route back.
    drop(servers);
    for ((pod, tool), cap) in pods.iter().zip(["go", "ours"]).zip(caps) {
        site.ok(tool, "del", "lan", "net1", pod, cap);
        assert_eq!(rules(pod, IpFamily::V4), Vec::<String>::new());
        assert_eq!(rules(pod, IpFamily::V6), Vec::<String>::new());
        site.ok(tool, "del", "podnet", "eth0", pod, "");
    }
    for (pod, e) in pods.iter().zip(&empty) {
        let now = NetSnapshot::take(pod);
        assert_eq!(now, *e, "{}: {:?}", pod.name(), e.diff(&now));
    }
    let file = site.node.conf_dir.path().join("20-lan.conflist");
    let mut conf: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    conf["plugins"].as_array_mut().unwrap().pop();
    site.node.write_conf("20-lan.conflist", &conf);
    site.ok("ours", "add", "podnet", "eth0", a, "");
    site.ok("ours", "add", "lan", "net1", a, caps[0]);
    let _server = echo_server(a, "a", PORT);
    assert_eq!(route_get_dev(a, "192.0.2.10", "10.70.0.10"), "eth0");
    assert_eq!(ask(&site.client, "10.70.0.10", PORT), None);
}

/// bridge + host-local + sbr: the whole chain's CHECK passes with ours;
/// with Go's plugins it fails at the bridge, whose CHECK looks for the
/// routes sbr moved in the main table only.
#[test]
fn the_chains_check_passes_where_gos_fails() {
    if !require_root("the_chains_check_passes_where_gos_fails") {
        return;
    }
    let (Some(_), Some(_)) = (go_plugin("sbr"), go_cnitool()) else {
        return;
    };
    let site = Site::new("sb-chk");
    site.node.write_conf(
        "05-chain.conflist",
        &json!({"cniVersion": "1.0.0", "name": "chain", "plugins": [
            {"type": "bridge", "bridge": "sb-br1", "isDefaultGateway": true,
             "ipam": {"type": "host-local", "dataDir": site.data.path(),
                      "ranges": [[{"subnet": "10.89.0.0/24"}], [{"subnet": "fd89::/64"}]]}},
            {"type": "sbr"}
        ]}),
    );
    let (ours, go) = (Netns::new("sb-chk-ours"), Netns::new("sb-chk-go"));
    let go_env = [("CNI_PATH", GO_PLUGIN_DIR)];
    let out = site.run("go", "add", "chain", "eth0", &go, &go_env);
    assert_eq!(out.exit_code, 0, "{out:?}");
    site.ok("ours", "add", "chain", "eth0", &ours, "");
    // Go's pod got the first addresses, ours the second (one lease dir).
    for (pod, n) in [(&go, 2), (&ours, 3)] {
        assert_eq!(
            rules(pod, IpFamily::V4),
            [format!("32765 from 10.89.0.{n} lookup 100")]
        );
        assert_eq!(
            rules(pod, IpFamily::V6),
            [format!("32765 from fd89::{n} lookup 101")]
        );
        assert_ping(&site.node.ns, &format!("10.89.0.{n}"));
    }
    let out = site.run("go", "check", "chain", "eth0", &go, &go_env);
    assert_ne!(out.exit_code, 0, "Go's chain CHECK passed: {out:?}");
    assert!(
        out.stderr
            .contains("Failed to find Gateway 10.89.0.1 for interface eth0"),
        "{out:?}"
    );
    for tool in ["ours", "go"] {
        site.ok(tool, "check", "chain", "eth0", &ours, "");
    }
    // Ours on Go's state passes too, and DEL leaves it empty.
    site.ok("ours", "check", "chain", "eth0", &go, "");
    for pod in [&ours, &go] {
        site.ok("ours", "del", "chain", "eth0", pod, "");
        assert_eq!(rules(pod, IpFamily::V4), Vec::<String>::new());
        assert_eq!(table_routes(pod, IpFamily::V4, true), Vec::<String>::new());
        assert!(pod.link("eth0").is_none());
    }
}

#[test]
fn bridge_host_local_sbr_through_containerds_cri() {
    if !require_root("bridge_host_local_sbr_through_containerds_cri") {
        return;
    }
    let Some(cri) = go_cni_cri() else {
        return;
    };
    let node = Node::new("sb-cri");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let data = TempDir::new("sb-cri-data");
    node.write_conf(
        "10-k8s.conflist",
        &json!({"cniVersion": "1.0.0", "name": "k8s", "plugins": [
            {"type": "bridge", "bridge": "sb-br2", "isDefaultGateway": true,
             "ipam": {"type": "host-local", "dataDir": data.path(),
                      "ranges": [[{"subnet": "10.90.0.0/24"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "sbr", "addSourceHints": true}
        ]}),
    );
    let pod = Netns::new("sb-cri-pod");
    let out = node.cri(
        &cri,
        "setup",
        Some(&pod),
        "sandbox-sb",
        &["-port", "8080:7171/tcp"],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["interfaces"]["eth0"]["IPConfigs"],
        json!([{"IP": "10.90.0.2", "Gateway": "10.90.0.1"}])
    );
    assert_eq!(
        rules(&pod, IpFamily::V4),
        ["32765 from 10.90.0.2 lookup 100"]
    );
    assert_eq!(
        table_routes(&pod, IpFamily::V4, false),
        [
            "100 10.90.0.0/24 via - dev eth0 src 10.90.0.2",
            "100 default via 10.90.0.1 dev eth0",
            "main 10.90.0.0/24 via - dev eth0 src 10.90.0.2",
        ]
    );
    // The pod's replies to the node go through its table; the host port
    // through portmap reaches it too.
    let _server = echo_server(&pod, "pod", PORT);
    assert_eq!(
        ask(&node.ns, "10.90.0.2", PORT).as_deref(),
        Some("pod 10.90.0.1")
    );
    assert_ping(&pod, "10.90.0.1");
    let out = node.cri(&cri, "status", None, "sandbox-sb", &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let out = node.cri(
        &cri,
        "remove",
        Some(&pod),
        "sandbox-sb",
        &["-port", "8080:7171/tcp"],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(rules(&pod, IpFamily::V4), Vec::<String>::new());
    assert!(pod.link("eth0").is_none());
    let out = node.cri(&cri, "remove", None, "sandbox-sb", &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
}

// ---- one plugin call at a time, on a wired pod ---------------------------------

/// A pod whose `eth0` (a veth to the node's `host`) has what a main plugin
/// gives it: 10.66.0.5/24 and fd66::5/64, default routes via .1, one more
/// route through the gateway and one on the link. Returns that plugin's
/// result.
fn wire(node: &Netns, pod: &Netns, host: &str) -> Value {
    node.ip(&[
        "link",
        "add",
        host,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        pod.name(),
    ]);
    node.ip(&["link", "set", host, "up"]);
    node.ip(&["addr", "add", "10.66.0.1/24", "dev", host]);
    node.ip(&["addr", "add", "fd66::1/64", "dev", host, "nodad"]);
    pod.ip(&["link", "set", "lo", "up"]);
    pod.ip(&["addr", "add", "10.66.0.5/24", "dev", "eth0"]);
    pod.ip(&["addr", "add", "fd66::5/64", "dev", "eth0", "nodad"]);
    pod.ip(&["link", "set", "eth0", "up"]);
    pod.ip(&["route", "add", "default", "via", "10.66.0.1"]);
    pod.ip(&["route", "add", "198.51.100.0/24", "via", "10.66.0.254"]);
    pod.ip(&["route", "add", "203.0.113.0/24", "dev", "eth0"]);
    pod.ip(&["-6", "route", "add", "default", "via", "fd66::1"]);
    // The link-local address comes a moment after the link: wait for it,
    // so it cannot appear in the middle of a comparison.
    wait_for("the link-local address of eth0", || {
        pod.ip(&["-6", "addr", "show", "dev", "eth0", "scope", "link"])
            .contains("fe80")
    });
    json!({"cniVersion": "1.0.0",
           "interfaces": [{"name": host}, {"name": "eth0", "sandbox": pod.path().display().to_string()}],
           "ips": [{"address": "10.66.0.5/24", "gateway": "10.66.0.1", "interface": 1},
                   {"address": "fd66::5/64", "gateway": "fd66::1", "interface": 1}],
           "routes": [{"dst": "0.0.0.0/0"}, {"dst": "198.51.100.0/24", "gw": "10.66.0.254"}],
           "dns": {}})
}

fn sbr_conf(prev: &Value, extra: Value) -> Value {
    let mut c = json!({"cniVersion": "1.0.0", "name": "sbnet", "type": "sbr", "prevResult": prev});
    merge(&mut c, extra);
    c
}

fn call(plugin: &Path, node: &Netns, verb: &str, pod: &Netns, conf: &Value) -> PluginOutput {
    call_eth0(
        plugin,
        node,
        verb,
        "ctr-sbr",
        pod.path().to_str().unwrap(),
        &conf.to_string(),
    )
}

/// Everything sbr touches, of one pod.
fn state(pod: &Netns) -> Value {
    json!({"rules4": rules(pod, IpFamily::V4), "rules6": rules(pod, IpFamily::V6),
           "routes4": table_routes(pod, IpFamily::V4, true), "routes6": table_routes(pod, IpFamily::V6, true)})
}

#[test]
fn same_state_as_the_go_reference_but_its_stray_copies() {
    if !require_root("same_state_as_the_go_reference_but_its_stray_copies") {
        return;
    }
    let Some(go) = go_plugin("sbr") else {
        return;
    };
    let ours = bin("sbr");
    // Twin pods, each on a node of its own (one subnet); the plugins run
    // in the first.
    let (node, node_go) = (Netns::new("sb-cmp-node"), Netns::new("sb-cmp-node-go"));
    let (pod_ours, pod_go) = (Netns::new("sb-cmp-ours"), Netns::new("sb-cmp-go"));
    let prev_ours = wire(&node, &pod_ours, "h-ours");
    let prev_go = wire(&node_go, &pod_go, "h-go");
    let before = state(&pod_ours);
    assert_eq!(state(&pod_go), before);

    let r_go = call(&go, &node, "ADD", &pod_go, &sbr_conf(&prev_go, json!({}))).result();
    let r_ours = call(
        &ours,
        &node,
        "ADD",
        &pod_ours,
        &sbr_conf(&prev_ours, json!({})),
    )
    .result();
    // prevResult passes through unchanged.
    assert_eq!(r_ours, prev_ours);
    assert_eq!(r_go, prev_go);

    let s = state(&pod_ours);
    assert_eq!(
        s,
        json!({
            "rules4": ["32765 from 10.66.0.5 lookup 100"],
            "rules6": ["32765 from fd66::5 lookup 101"],
            "routes4": [
                "100 10.66.0.0/24 via - dev eth0 src 10.66.0.5",
                "100 198.51.100.0/24 via 10.66.0.254 dev eth0",
                "100 203.0.113.0/24 via - dev eth0",
                "100 default via 10.66.0.1 dev eth0",
            ],
            "routes6": [
                "101 default via fd66::1 dev eth0",
                "101 fd66::/64 via - dev eth0",
                "101 fe80::/64 via - dev eth0",
            ],
        })
    );
    // Go's is the same but for its stray copies: the routes without a
    // source and a gateway also go into the table of every address of the
    // other family, which no rule leads to.
    let mut g = state(&pod_go);
    let stray4 = json!(["101 203.0.113.0/24 via - dev eth0"]);
    let stray6 = json!([
        "100 fd66::/64 via - dev eth0",
        "100 fe80::/64 via - dev eth0"
    ]);
    for (key, stray) in [("routes4", &stray4), ("routes6", &stray6)] {
        let list = g[key].as_array_mut().unwrap();
        for x in stray.as_array().unwrap() {
            let at = list.iter().position(|y| y == x);
            assert!(at.is_some(), "Go's {key} lack {x}: {list:?}");
            list.remove(at.unwrap());
        }
    }
    assert_eq!(g, s);
    // Traffic from the addresses goes through their tables; without a
    // source, the main table has nothing left (as with Go's: that is what
    // addSourceHints is for).
    assert_eq!(route_get_dev(&pod_ours, "192.0.2.1", "10.66.0.5"), "eth0");
    ping_from(&pod_ours, "10.66.0.5", "10.66.0.1");
    ping_from(&pod_ours, "fd66::5", "fd66::1");
    ping_from(&pod_go, "10.66.0.5", "10.66.0.1");
    assert!(!ping_ok(&pod_ours, "10.66.0.1"));
    assert_ping(&node, "10.66.0.5");
    assert_ping(&node_go, "fd66::5");

    // Each CHECKs the other's ADD.
    call(
        &ours,
        &node,
        "CHECK",
        &pod_go,
        &sbr_conf(&prev_go, json!({})),
    )
    .assert_silent_ok();
    call(
        &go,
        &node,
        "CHECK",
        &pod_ours,
        &sbr_conf(&prev_ours, json!({})),
    )
    .assert_silent_ok();

    // Ours DELs Go's ADD: rules and every table go, stray copies included.
    call(&ours, &node, "DEL", &pod_go, &sbr_conf(&prev_go, json!({}))).assert_silent_ok();
    let after = state(&pod_go);
    assert_eq!(after["rules4"], json!([]));
    assert_eq!(after["rules6"], json!([]));
    assert_eq!(
        after["routes4"]
            .as_array()
            .unwrap()
            .iter()
            .chain(after["routes6"].as_array().unwrap())
            .filter(|r| !r.as_str().unwrap().starts_with("main"))
            .count(),
        0,
        "{after}"
    );
    // Go DELs ours: the rules go, the tables stay (Go never empties them).
    call(
        &go,
        &node,
        "DEL",
        &pod_ours,
        &sbr_conf(&prev_ours, json!({})),
    )
    .assert_silent_ok();
    let after = state(&pod_ours);
    assert_eq!(
        (after["rules4"].clone(), after["rules6"].clone()),
        (json!([]), json!([]))
    );
    assert!(
        after["routes4"][0].as_str().unwrap().starts_with("100 "),
        "{after}"
    );

    // DEL when the namespace is gone: Go fails, ours succeeds.
    let gone = Netns::new("sb-cmp-gone");
    let path = gone.path();
    drop(gone);
    let conf = sbr_conf(&prev_ours, json!({})).to_string();
    let del = |plugin: &Path| {
        call_eth0(
            plugin,
            &node,
            "DEL",
            "ctr-sbr",
            path.to_str().unwrap(),
            &conf,
        )
    };
    assert_ne!(del(&go).exit_code, 0);
    let _ = std::fs::remove_file(&path); // the file Go's lock created
    del(&ours).assert_silent_ok();
    assert!(!path.exists());
}

#[test]
fn table_gateways_and_source_hints() {
    if !require_root("table_gateways_and_source_hints") {
        return;
    }
    let ours = bin("sbr");
    let node = Netns::new("sb-keys-node");
    let pod = Netns::new("sb-keys-pod");
    let prev = wire(&node, &pod, "h-keys");
    let before = state(&pod);

    // table: only the rules, to that table; the routes stay in main.
    let conf = sbr_conf(&prev, json!({"table": 500}));
    pod.ip(&[
        "route",
        "add",
        "default",
        "via",
        "10.66.0.1",
        "table",
        "500",
    ]);
    call(&ours, &node, "ADD", &pod, &conf).result();
    let s = state(&pod);
    assert_eq!(s["rules4"], json!(["32765 from 10.66.0.5 lookup 500"]));
    assert_eq!(s["rules6"], json!(["32765 from fd66::5 lookup 500"]));
    let main4: Vec<&Value> = s["routes4"].as_array().unwrap().iter().collect();
    assert_eq!(main4.len(), 5, "{s}");
    call(&ours, &node, "CHECK", &pod, &conf).assert_silent_ok();
    call(
        &ours,
        &node,
        "CHECK",
        &pod,
        &sbr_conf(&prev, json!({"table": 501})),
    )
    .assert_error(102, "no rule from 10.66.0.5 lookup 501");
    call(&ours, &node, "DEL", &pod, &conf).assert_silent_ok();
    // The administrator's table is left as it was.
    let mut with_500 = before.clone();
    with_500["routes4"]
        .as_array_mut()
        .unwrap()
        .push(json!("500 default via 10.66.0.1 dev eth0"));
    with_500["routes4"]
        .as_array_mut()
        .unwrap()
        .sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    assert_eq!(state(&pod), with_500);
    pod.ip(&["route", "flush", "table", "500"]);

    // gateways: the default route of each family through the static one.
    let conf = sbr_conf(&prev, json!({"gateways": ["10.66.0.254", "fd66::fe"]}));
    call(&ours, &node, "ADD", &pod, &conf).result();
    let s = state(&pod);
    assert!(
        s["routes4"]
            .as_array()
            .unwrap()
            .contains(&json!("100 default via 10.66.0.254 dev eth0")),
        "{s}"
    );
    assert!(
        s["routes6"]
            .as_array()
            .unwrap()
            .contains(&json!("101 default via fd66::fe dev eth0")),
        "{s}"
    );
    call(&ours, &node, "CHECK", &pod, &conf).assert_silent_ok();
    // The address's own gateway is not what was configured.
    call(
        &ours,
        &node,
        "CHECK",
        &pod,
        &sbr_conf(&prev, json!({"gateways": ["10.66.0.253"]})),
    )
    .assert_error(
        102,
        "table 100 (of the rule from 10.66.0.5) has no default route via 10.66.0.253",
    );
    call(&ours, &node, "DEL", &pod, &conf).assert_silent_ok();
    // DEL does not move routes back to main: the interface goes next.
    let after = state(&pod);
    assert_eq!(after["rules4"], json!([]));
    assert!(after["routes4"].as_array().unwrap().is_empty(), "{after}");

    // addSourceHints: the subnet routes stay in main with the address as
    // their source; only the others leave.
    let (node2, pod2) = (Netns::new("sb-keys-node2"), Netns::new("sb-keys-pod2"));
    let prev2 = wire(&node2, &pod2, "h-keys2");
    let conf = sbr_conf(&prev2, json!({"addSourceHints": true}));
    call(&ours, &node, "ADD", &pod2, &conf).result();
    let s = state(&pod2);
    assert_eq!(
        s["routes4"],
        json!([
            "100 10.66.0.0/24 via - dev eth0 src 10.66.0.5",
            "100 198.51.100.0/24 via 10.66.0.254 dev eth0",
            "100 203.0.113.0/24 via - dev eth0",
            "100 default via 10.66.0.1 dev eth0",
            "main 10.66.0.0/24 via - dev eth0 src 10.66.0.5",
            "main 203.0.113.0/24 via - dev eth0",
        ])
    );
    assert_eq!(
        s["routes6"],
        json!([
            "101 default via fd66::1 dev eth0",
            "101 fd66::/64 via - dev eth0",
            "101 fe80::/64 via - dev eth0",
            "main fd66::/64 via - dev eth0 src fd66::5",
        ])
    );
    // A connection without a chosen source still finds the subnet.
    assert_ping(&pod2, "10.66.0.1");
    call(&ours, &node, "CHECK", &pod2, &conf).assert_silent_ok();
    pod2.ip(&[
        "route",
        "del",
        "10.66.0.0/24",
        "dev",
        "eth0",
        "table",
        "main",
    ]);
    call(&ours, &node, "CHECK", &pod2, &conf).assert_error(
        102,
        "the main table has no route to 10.66.0.0/24 through \"eth0\" with source 10.66.0.5",
    );
    call(&ours, &node, "DEL", &pod2, &conf).assert_silent_ok();
    assert_eq!(rules(&pod2, IpFamily::V4), Vec::<String>::new());
    assert!(table_routes(&pod2, IpFamily::V4, true)
        .iter()
        .all(|r| r.starts_with("main")));
}

#[test]
fn del_finds_what_add_installed_without_prev_result() {
    if !require_root("del_finds_what_add_installed_without_prev_result") {
        return;
    }
    let ours = bin("sbr");
    let node = Netns::new("sb-del-node");
    let pod = Netns::new("sb-del-pod");
    let prev = wire(&node, &pod, "h-del");
    let bare = json!({"cniVersion": "1.0.0", "name": "sbnet", "type": "sbr"});
    // The interface still there: its addresses name the rules.
    call(&ours, &node, "ADD", &pod, &sbr_conf(&prev, json!({}))).result();
    assert_eq!(
        rules(&pod, IpFamily::V4),
        ["32765 from 10.66.0.5 lookup 100"]
    );
    for _ in 0..2 {
        call(&ours, &node, "DEL", &pod, &bare).assert_silent_ok();
        assert_eq!(rules(&pod, IpFamily::V4), Vec::<String>::new());
        assert_eq!(rules(&pod, IpFamily::V6), Vec::<String>::new());
        assert!(table_routes(&pod, IpFamily::V4, true).is_empty());
        assert!(table_routes(&pod, IpFamily::V6, true)
            .iter()
            .all(|r| r.starts_with("main")));
    }
    // An unusable prevResult is the same as none.
    let pod2 = Netns::new("sb-del-pod2");
    let prev2 = wire(&node, &pod2, "h-del2");
    call(&ours, &node, "ADD", &pod2, &sbr_conf(&prev2, json!({}))).result();
    call(
        &ours,
        &node,
        "DEL",
        &pod2,
        &sbr_conf(&json!({"ips": "x"}), json!({"gateways": 7})),
    )
    .assert_silent_ok();
    assert_eq!(rules(&pod2, IpFamily::V4), Vec::<String>::new());
    // The interface gone first (its routes with it) and no prevResult: the
    // rules it left are found as those from an address nobody holds to an
    // empty table; a rule to a table that has routes stays.
    let pod4 = Netns::new("sb-del-pod4");
    let prev4 = wire(&node, &pod4, "h-del4");
    call(&ours, &node, "ADD", &pod4, &sbr_conf(&prev4, json!({}))).result();
    pod4.ip(&["rule", "add", "from", "10.1.2.3", "lookup", "700"]);
    pod4.ip(&["route", "add", "blackhole", "10.0.0.0/8", "table", "700"]);
    pod4.ip(&["link", "del", "eth0"]);
    assert_eq!(
        rules(&pod4, IpFamily::V4),
        [
            "32764 from 10.1.2.3 lookup 700",
            "32765 from 10.66.0.5 lookup 100"
        ]
    );
    call(&ours, &node, "DEL", &pod4, &bare).assert_silent_ok();
    assert_eq!(
        rules(&pod4, IpFamily::V4),
        ["32764 from 10.1.2.3 lookup 700"]
    );
    assert_eq!(rules(&pod4, IpFamily::V6), Vec::<String>::new());
    // With prevResult, the interface gone: its addresses name the rules.
    let pod3 = Netns::new("sb-del-pod3");
    let prev3 = wire(&node, &pod3, "h-del3");
    call(&ours, &node, "ADD", &pod3, &sbr_conf(&prev3, json!({}))).result();
    pod3.ip(&["link", "del", "eth0"]);
    call(&ours, &node, "DEL", &pod3, &sbr_conf(&prev3, json!({}))).assert_silent_ok();
    assert_eq!(rules(&pod3, IpFamily::V4), Vec::<String>::new());
    assert_eq!(rules(&pod3, IpFamily::V6), Vec::<String>::new());
    // No CNI_NETNS at all, or a namespace that is gone: nothing to do.
    let out = call_plugin(
        Some(&node),
        &ours,
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_IFNAME", "eth0"),
        ],
        &bare.to_string(),
    );
    out.assert_silent_ok();
}

#[test]
fn a_failed_add_leaves_the_pod_as_it_was() {
    if !require_root("a_failed_add_leaves_the_pod_as_it_was") {
        return;
    }
    let ours = bin("sbr");
    let node = Netns::new("sb-fail-node");
    let pod = Netns::new("sb-fail-pod");
    let prev = wire(&node, &pod, "h-fail");
    let before = NetSnapshot::take_with(&pod, false);
    // The IPv6 static gateway is on no link: its default route is refused
    // after the IPv4 address's rule and table and the IPv6 rule were made.
    for extra in [
        json!({"gateways": ["fd99::1"]}),
        json!({"gateways": ["192.0.2.77"]}),
        json!({"gateways": ["fd99::1"], "addSourceHints": true}),
    ] {
        let conf = sbr_conf(&prev, extra.clone());
        call(&ours, &node, "ADD", &pod, &conf).assert_error(100, "add route");
        let now = NetSnapshot::take_with(&pod, false);
        assert_eq!(now, before, "{extra}: {:?}", before.diff(&now));
    }
    // The interface is not in the pod: refused before anything.
    let mut other = prev.clone();
    other["interfaces"][1]["name"] = json!("eth7");
    let out = call_plugin(
        Some(&node),
        &ours,
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_NETNS", pod.path().to_str().unwrap()),
            ("CNI_IFNAME", "eth7"),
        ],
        &sbr_conf(&other, json!({})).to_string(),
    );
    out.assert_error(4, "CNI_IFNAME \"eth7\": no such interface in the container");
    // prevResult without an address for the interface.
    let mut none = prev.clone();
    none["ips"] = json!([{"address": "10.9.9.9/24", "interface": 0}]);
    call(&ours, &node, "ADD", &pod, &sbr_conf(&none, json!({})))
        .assert_error(7, "prevResult: no address for interface \"eth0\"");
    let now = NetSnapshot::take_with(&pod, false);
    assert_eq!(now, before, "{:?}", before.diff(&now));
}

#[test]
fn gc_and_status() {
    let ours = bin("sbr");
    let call = |verb: &str, conf: &Value| {
        call_plugin(None, &ours, &[("CNI_COMMAND", verb)], &conf.to_string())
    };
    let conf = json!({"cniVersion": "1.1.0", "name": "sbnet", "type": "sbr",
                      "gateways": ["10.0.0.1"], "cni.dev/valid-attachments": []});
    call("GC", &conf).assert_silent_ok();
    call("STATUS", &conf).assert_silent_ok();
    let mut bad = conf.clone();
    bad["gateways"] = json!(["10.0.0.1", "10.0.0.2"]);
    call("STATUS", &bad).assert_error(7, "gateways[1]");
    call("GC", &bad).assert_silent_ok();
    let mut old = conf;
    old["cniVersion"] = json!("1.0.0");
    call("STATUS", &old).assert_error(1, "config version does not allow STATUS");
}
