//! portmap: real TCP and UDP connections through host ports, on nftables
//! and on iptables, validation, conflicts, DEL/CHECK/GC, conntrack, and the
//! Go reference plugin side by side (iptables rules and DEL interop).
//!
//! Topology of a traffic test: a node namespace with veth pairs to pod A
//! (10.1.0.2, fd00:1::2), pod B (10.2.0.2) and an upstream namespace
//! (10.9.0.2, fd00:9::2); the node ends are x.x.0.1 and forward. Pods run a
//! Python listener that answers every TCP connection and UDP datagram with
//! "<name> <peer address>", so each test asserts who answered and which
//! source address it saw (masqueraded or not).

use serde_json::{json, Value};
use tests::*;

/// The echo service's answer over `proto` (tcp, udp), or `None`.
fn connect(ns: &Netns, proto: &str, host: &str, port: u16) -> Option<String> {
    match proto {
        "udp" => ask_udp(ns, host, port),
        _ => ask(ns, host, port),
    }
}

/// What a pod's previous plugin returned.
trait PrevResult {
    fn prev_result(&self) -> Value;
}

impl PrevResult for Peer {
    /// The result of the plugin that set up this pod: eth0 with both addresses.
    fn prev_result(&self) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": self.ns.path()}],
            "ips": [
                {"address": format!("{}/24", self.v4()), "interface": 0},
                {"address": format!("{}/64", self.v6()), "interface": 0}
            ]
        })
    }
}

/// A portmap config for network `net`.
fn conf(net: &str, mappings: Value, extra: Value, prev: Option<&Value>) -> String {
    let mut c = json!({
        "cniVersion": "1.0.0",
        "name": net,
        "type": "portmap",
        "runtimeConfig": {"portMappings": mappings},
    });
    if let Some(p) = prev {
        c["prevResult"] = p.clone();
    }
    if let Some(o) = extra.as_object() {
        for (k, v) in o {
            c[k] = v.clone();
        }
    }
    c.to_string()
}

fn ours() -> std::path::PathBuf {
    bin("portmap")
}

/// `nft list` of the Go plugin's host port tables, both families (empty
/// when they do not exist).
fn nft_table(node: &Netns) -> String {
    let mut s = String::new();
    for fam in ["ip", "ip6"] {
        let out = node
            .command("nft")
            .args(["list", "table", fam, "cni_hostport"])
            .output()
            .expect("nft");
        s.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    s
}

fn nft_ruleset(node: &Netns) -> String {
    let out = run_ok(node.command("nft").args(["list", "ruleset"]));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rules of chain `chain` of table `fam cni_hostport`, one trimmed
/// line each, in order (none when the chain does not exist).
fn rules(node: &Netns, fam: &str, chain: &str) -> Vec<String> {
    let out = node
        .command("nft")
        .args(["list", "chain", fam, "cni_hostport", chain])
        .output()
        .expect("nft");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("table ")
                && !l.starts_with("chain ")
                && !l.starts_with("type ")
                && *l != "}"
        })
        .map(str::to_string)
        .collect()
}

/// The handle of the rule of `fam cni_hostport chain` holding `needle`.
fn handle_of(node: &Netns, fam: &str, chain: &str, needle: &str) -> String {
    let out = run_ok(
        node.command("nft")
            .args(["-a", "list", "chain", fam, "cni_hostport", chain]),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in\n{text}"));
    line.rsplit("# handle ").next().unwrap().trim().to_string()
}

fn iptables_save(node: &Netns, family: IpFamily) -> String {
    let cmd = iptables_program(family, "-save");
    let out = run_ok(node.command(cmd).args(["-t", "nat"]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

fn sysctl(ns: &Netns, path: &str) -> String {
    let out = run_ok(ns.command("cat").arg(format!("/proc/sys/{path}")));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

// ---- nftables ---------------------------------------------------------------

#[test]
fn portmap_nft_forwards_tcp_and_udp_from_everywhere() {
    if !require_root("portmap_nft_forwards_tcp_and_udp_from_everywhere") {
        return;
    }
    let node = forwarding_node("pmtraffic");
    let a = Peer::attach(&node, "pm-a", 1);
    let b = Peer::attach(&node, "pm-b", 2);
    let up = Peer::attach(&node, "pm-up", 9);
    let _srv = echo_server(&a.ns, "podA", 80);
    let maps = json!([
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8053, "containerPort": 80, "protocol": "udp"}
    ]);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    let c = conf("pmnet", maps, json!({"backend": "nftables"}), Some(&prev));
    let out = call_eth0(&ours(), &node, "ADD", "ctr-a", &netns, &c);
    assert_ok(&out);
    assert_eq!(out.json()["ips"], prev["ips"], "prevResult passes through");

    // The state: the Go plugin's rules, one per mapping and family, with
    // the container ID as comment.
    assert_eq!(
        rules(&node, "ip", "hostports"),
        [
            "tcp dport 8080 dnat to 10.1.0.2:80 comment \"ctr-a\"",
            "udp dport 8053 dnat to 10.1.0.2:80 comment \"ctr-a\""
        ]
    );
    assert_eq!(
        rules(&node, "ip6", "hostports"),
        [
            "tcp dport 8080 dnat to [fd00:1::2]:80 comment \"ctr-a\"",
            "udp dport 8053 dnat to [fd00:1::2]:80 comment \"ctr-a\""
        ]
    );
    for fam in ["ip", "ip6"] {
        assert_eq!(
            rules(&node, fam, "prerouting"),
            ["fib daddr type local jump hostports_all"]
        );
        assert_eq!(
            rules(&node, fam, "hostports_all"),
            ["jump hostip_hostports", "jump hostports"]
        );
    }
    assert_eq!(
        rules(&node, "ip", "masquerading"),
        [
            "ip saddr 10.1.0.0/24 ip daddr 10.1.0.2 masquerade comment \"ctr-a\"",
            "ip saddr 127.0.0.1 ip daddr 10.1.0.2 masquerade comment \"ctr-a\""
        ]
    );
    assert_eq!(
        rules(&node, "ip6", "masquerading"),
        ["ip6 saddr fd00:1::/64 ip6 daddr fd00:1::2 masquerade comment \"ctr-a\""]
    );
    assert_eq!(sysctl(&node, "net/ipv4/conf/v1/route_localnet"), "1");
    assert_eq!(sysctl(&node, "net/ipv4/conf/v2/route_localnet"), "0");

    let expect = |from: &Netns, proto: &str, host: &str, port: u16, seen: &str| {
        assert_eq!(
            connect(from, proto, host, port).as_deref(),
            Some(format!("podA {seen}").as_str()),
            "{proto} {host}:{port} from {}",
            from.name()
        );
    };
    let node_addr = up.node_v4();
    for proto in ["tcp", "udp"] {
        let port = if proto == "tcp" { 8080 } else { 8053 };
        // From upstream, to the node's address: no masquerade.
        expect(&up.ns, proto, &node_addr, port, &up.v4());
        expect(&up.ns, proto, &up.node_v6(), port, &up.v6());
        // From another pod (another subnet): its own address.
        expect(&b.ns, proto, &node_addr, port, &b.v4());
        // Hairpin: the pod through its own host port, masqueraded to the node.
        expect(&a.ns, proto, &node_addr, port, &a.node_v4());
        expect(&a.ns, proto, &up.node_v6(), port, &a.node_v6());
        // From the node itself, to 127.0.0.1 (route_localnet + masquerade)
        // and to its own addresses.
        expect(&node, proto, "127.0.0.1", port, &a.node_v4());
        expect(&node, proto, &node_addr, port, &node_addr);
        expect(&node, proto, &up.node_v6(), port, &up.node_v6());
        // IPv6 has no route_localnet: the kernel never lets a packet from
        // ::1 leave the host, masqueraded or not (neither does Go's plugin).
        assert_eq!(connect(&node, proto, "::1", port), None);
    }

    // DEL without mappings and without a namespace: everything of ctr-a goes.
    let del = conf("pmnet", json!([]), json!({"backend": "nftables"}), None);
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &del));
    for fam in ["ip", "ip6"] {
        assert_eq!(rules(&node, fam, "hostports"), Vec::<String>::new());
        assert_eq!(rules(&node, fam, "masquerading"), Vec::<String>::new());
    }
    assert_eq!(connect(&up.ns, "tcp", &node_addr, 8080), None);
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &del));
}

#[test]
fn portmap_nft_host_ip_selects_the_address_and_family() {
    if !require_root("portmap_nft_host_ip_selects_the_address_and_family") {
        return;
    }
    let node = forwarding_node("pmhostip");
    let a = Peer::attach(&node, "pmh-a", 1);
    let up = Peer::attach(&node, "pmh-up", 9);
    let _srv = echo_server(&a.ns, "podA", 80);
    let maps = json!([
        {"hostPort": 8081, "containerPort": 80, "protocol": "tcp", "hostIP": "10.9.0.1"},
        {"hostPort": 8082, "containerPort": 80, "protocol": "tcp", "hostIP": "0.0.0.0"},
        {"hostPort": 8083, "containerPort": 80, "protocol": "tcp", "hostIP": "fd00:9::1"}
    ]);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "ADD",
        "ctr-h",
        &netns,
        &conf("pmnet", maps, json!({"backend": "nftables"}), Some(&prev)),
    ));
    // A host IP is matched in the mapping's rule; 0.0.0.0 is "every IPv4
    // address", and only IPv4.
    assert_eq!(
        rules(&node, "ip", "hostports"),
        [
            "ip daddr 10.9.0.1 tcp dport 8081 dnat to 10.1.0.2:80 comment \"ctr-h\"",
            "tcp dport 8082 dnat to 10.1.0.2:80 comment \"ctr-h\""
        ]
    );
    assert_eq!(
        rules(&node, "ip6", "hostports"),
        ["ip6 daddr fd00:9::1 tcp dport 8083 dnat to [fd00:1::2]:80 comment \"ctr-h\""]
    );
    assert_eq!(rules(&node, "ip", "hostip_hostports"), Vec::<String>::new());
    let seen = format!("podA {}", up.v4());
    assert_eq!(
        connect(&up.ns, "tcp", "10.9.0.1", 8081).as_deref(),
        Some(seen.as_str())
    );
    // Another local address of the node does not match the hostIP.
    assert_eq!(connect(&up.ns, "tcp", "10.1.0.1", 8081), None);
    assert_eq!(
        connect(&up.ns, "tcp", "10.1.0.1", 8082).as_deref(),
        Some(seen.as_str())
    );
    assert_eq!(connect(&up.ns, "tcp", &up.node_v6(), 8082), None);
    let seen6 = format!("podA {}", up.v6());
    assert_eq!(
        connect(&up.ns, "tcp", &up.node_v6(), 8083).as_deref(),
        Some(seen6.as_str())
    );
}

#[test]
fn portmap_validation_rejects_bad_mappings_before_touching_anything() {
    if !require_root("portmap_validation_rejects_bad_mappings_before_touching_anything") {
        return;
    }
    let node = forwarding_node("pmvalid");
    let pod = Netns::new("pmv-pod");
    let v4_only = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.1.0.2/24", "interface": 0}]
    });
    let netns = pod.path().to_str().unwrap().to_string();
    let m = |v: Value| json!([v]);
    let cases: Vec<(Value, Value, &str, &str)> = vec![
        (
            m(json!({"hostPort": 0, "containerPort": 80, "protocol": "tcp"})),
            json!({}),
            "portMappings[0].hostPort",
            "0 is not a port",
        ),
        (
            m(json!({"hostPort": 70000, "containerPort": 80, "protocol": "tcp"})),
            json!({}),
            "portMappings[0].hostPort",
            "70000",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": -1, "protocol": "tcp"})),
            json!({}),
            "portMappings[0].containerPort",
            "-1",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "icmp"})),
            json!({}),
            "portMappings[0].protocol",
            "\"icmp\"",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp", "hostIP": "1.2.3"})),
            json!({}),
            "portMappings[0].hostIP",
            "\"1.2.3\"",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp", "hostIP": "fd00::1"})),
            json!({}),
            "portMappings[0].hostIP",
            "fd00::1",
        ),
        (
            json!([{"hostPort": 80, "containerPort": 80, "protocol": "tcp"}, {"hostPort": 80, "containerPort": 81, "protocol": "tcp"}]),
            json!({}),
            "portMappings[1].hostPort",
            "tcp 80 -> 81",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp"})),
            json!({"backend": "nftables", "externalSetMarkChain": "X"}),
            "externalSetMarkChain",
            "nftables",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp"})),
            json!({"backend": "nftables", "conditionsV4": ["-s", "1.2.3.4"]}),
            "conditionsV4",
            "nftables",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp"})),
            json!({"backend": "iptables", "conditionsV4": ["ip saddr 1.2.3.4"]}),
            "conditionsV4",
            "iptables",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp"})),
            json!({"backend": "nftables", "conditionsV4": ["tcp flags syn"]}),
            "conditionsV4",
            "\"tcp\"",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp"})),
            json!({"backend": "pf"}),
            "backend",
            "\"pf\"",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp"})),
            json!({"markMasqBit": 32}),
            "markMasqBit",
            "32",
        ),
        (
            m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp"})),
            json!({"markMasqBit": 3, "externalSetMarkChain": "X"}),
            "externalSetMarkChain",
            "markMasqBit",
        ),
    ];
    for (maps, extra, key, value) in cases {
        let out = call_eth0(
            &ours(),
            &node,
            "ADD",
            "ctr-v",
            &netns,
            &conf("pmnet", maps.clone(), extra.clone(), Some(&v4_only)),
        );
        out.assert_error(7, key);
        out.assert_error(7, value);
    }
    // A missing prevResult is a config error too.
    let one = m(json!({"hostPort": 80, "containerPort": 80, "protocol": "tcp"}));
    call_eth0(
        &ours(),
        &node,
        "ADD",
        "ctr-v",
        &netns,
        &conf("pmnet", one, json!({}), None),
    )
    .assert_error(7, "prevResult");
    // Nothing was installed, on either backend.
    assert_eq!(nft_ruleset(&node), "");
    assert!(!iptables_save(&node, IpFamily::V4).contains("CNI-"));
}

#[test]
fn portmap_nft_a_host_port_mapped_twice_goes_to_the_first_until_its_del() {
    if !require_root("portmap_nft_a_host_port_mapped_twice_goes_to_the_first_until_its_del") {
        return;
    }
    let node = forwarding_node("pmtwice");
    let a = Peer::attach(&node, "pmc-a", 1);
    let b = Peer::attach(&node, "pmc-b", 2);
    let up = Peer::attach(&node, "pmc-up", 9);
    let _sa = echo_server(&a.ns, "podA", 80);
    let _sb = echo_server(&b.ns, "podB", 80);
    let pa = a.prev_result();
    let pb = b.prev_result();
    let na = a.ns.path().to_str().unwrap().to_string();
    let nb = b.ns.path().to_str().unwrap().to_string();
    let first = json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]);
    let ca = conf(
        "pmtwice",
        first.clone(),
        json!({"backend": "nftables"}),
        Some(&pa),
    );
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-a", &na, &ca));
    // ADD again for the same container replaces its rules (from its
    // ledger) instead of adding a second copy.
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-a", &na, &ca));
    assert_eq!(
        rules(&node, "ip", "hostports"),
        ["tcp dport 8080 dnat to 10.1.0.2:80 comment \"ctr-a\""]
    );
    assert_eq!(rules(&node, "ip", "masquerading").len(), 2);
    // Another container on the same host port: as with the Go plugin both
    // rules are there and the first one takes the connections.
    let cb = conf("pmtwice", first, json!({"backend": "nftables"}), Some(&pb));
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-b", &nb, &cb));
    assert_eq!(
        rules(&node, "ip", "hostports"),
        [
            "tcp dport 8080 dnat to 10.1.0.2:80 comment \"ctr-a\"",
            "tcp dport 8080 dnat to 10.2.0.2:80 comment \"ctr-b\""
        ]
    );
    let seen = |pod: &str| format!("{pod} {}", up.v4());
    assert_eq!(connect(&up.ns, "tcp", "10.9.0.1", 8080), Some(seen("podA")));
    let del = conf("pmtwice", json!([]), json!({}), None);
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-a", "", &del));
    assert_eq!(connect(&up.ns, "tcp", "10.9.0.1", 8080), Some(seen("podB")));
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-b", "", &del));
    assert_eq!(rules(&node, "ip", "hostports"), Vec::<String>::new());
}

#[test]
fn portmap_nft_del_check_and_gc_find_containers_by_id() {
    if !require_root("portmap_nft_del_check_and_gc_find_containers_by_id") {
        return;
    }
    let node = forwarding_node("pmlife");
    let a = Peer::attach(&node, "pml-a", 1);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    // DEL where nothing was ever installed succeeds.
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "DEL",
        "ctr-x",
        "",
        &conf("pmnet", json!([]), json!({}), None),
    ));
    assert_eq!(nft_ruleset(&node), "");

    let add = |cid: &str, net: &str, port: u16| {
        let maps = json!([{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]);
        let c = conf(
            net,
            maps,
            json!({"cniVersion": "1.1.0", "backend": "nftables"}),
            Some(&prev),
        );
        assert_ok(&call_eth0(&ours(), &node, "ADD", cid, &netns, &c));
        c
    };
    let c1 = add("ctr-1", "neta", 8001);
    add("ctr-2", "neta", 8002);
    add("ctr-3", "netb", 8003);
    assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-1", &netns, &c1));

    // CHECK notices a mapping removed by hand.
    let h = handle_of(&node, "ip", "hostports", "dport 8001");
    run_ok(node.command("nft").args([
        "delete",
        "rule",
        "ip",
        "cni_hostport",
        "hostports",
        "handle",
        &h,
    ]));
    call_eth0(&ours(), &node, "CHECK", "ctr-1", &netns, &c1).assert_error(
        102,
        "mapping tcp 8001 -> 80 has no rule to 10.1.0.2 in chain ip cni_hostport hostports",
    );
    call_eth0(
        &ours(),
        &node,
        "CHECK",
        "ctr-1",
        &netns,
        &conf("neta", json!([]), json!({}), None),
    )
    .assert_error(7, "prevResult");

    // GC of neta with only ctr-1 valid: ctr-2 goes, netb's ctr-3 stays.
    let gc = json!({
        "cniVersion": "1.1.0", "name": "neta", "type": "portmap",
        "cni.dev/valid-attachments": [{"containerID": "ctr-1", "ifname": "eth0"}]
    })
    .to_string();
    let out = call_plugin(
        Some(&node),
        &ours(),
        &[("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")],
        &gc,
    );
    assert_ok(&out);
    assert_eq!(
        rules(&node, "ip", "hostports"),
        ["tcp dport 8003 dnat to 10.1.0.2:80 comment \"ctr-3\""]
    );
    // ctr-1 is valid: its IPv6 mapping (the IPv4 one went by hand) stays.
    assert_eq!(
        rules(&node, "ip6", "hostports"),
        [
            "tcp dport 8001 dnat to [fd00:1::2]:80 comment \"ctr-1\"",
            "tcp dport 8003 dnat to [fd00:1::2]:80 comment \"ctr-3\""
        ]
    );
    assert!(
        !rules(&node, "ip", "masquerading")
            .iter()
            .any(|r| r.contains("\"ctr-2\"")),
        "ctr-2's masquerade went too"
    );
}

#[test]
fn portmap_without_mappings_passes_the_result_through() {
    if !require_root("portmap_without_mappings_passes_the_result_through") {
        return;
    }
    let node = forwarding_node("pmnone");
    let pod = Netns::new("pmn-pod");
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1", "interface": 0}],
        "dns": {"nameservers": ["10.1.0.1"]}
    });
    let netns = pod.path().to_str().unwrap().to_string();
    let out = call_eth0(
        &ours(),
        &node,
        "ADD",
        "ctr-n",
        &netns,
        &conf("pmnet", json!([]), json!({}), Some(&prev)),
    );
    assert_ok(&out);
    assert_eq!(out.json(), prev);
    assert_eq!(nft_ruleset(&node), "", "nothing installed without mappings");
}

/// The UDP conntrack entries of the node whose destination port is `port`.
fn udp_entries(node: &Netns, port: u16) -> usize {
    let out = run_ok(node.command("cat").arg("/proc/net/nf_conntrack"));
    let needle = format!("dport={port} ");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" udp ") && l.contains(&needle))
        .count()
}

#[test]
fn portmap_removes_stale_udp_conntrack_entries_on_add_and_del() {
    if !require_root("portmap_removes_stale_udp_conntrack_entries_on_add_and_del") {
        return;
    }
    let node = forwarding_node("pmct");
    let a = Peer::attach(&node, "pmct-a", 1);
    let up = Peer::attach(&node, "pmct-up", 9);
    let _srv = echo_server(&a.ns, "podA", 80);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    // A first container makes the table exist, so the node tracks connections.
    let other = json!([{"hostPort": 7000, "containerPort": 80, "protocol": "tcp"}]);
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "ADD",
        "ctr-0",
        &netns,
        &conf("pmnet", other, json!({}), Some(&prev)),
    ));
    // A UDP flow to port 5353 before any mapping: a conntrack entry without DNAT.
    assert_eq!(connect(&up.ns, "udp", "10.9.0.1", 5353), None);
    assert_eq!(udp_entries(&node, 5353), 1);
    let maps = json!([{"hostPort": 5353, "containerPort": 80, "protocol": "udp"}]);
    let c = conf("pmnet", maps, json!({}), Some(&prev));
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-u", &netns, &c));
    assert_eq!(udp_entries(&node, 5353), 0, "ADD removed the stale entry");
    let seen = format!("podA {}", up.v4());
    assert_eq!(
        connect(&up.ns, "udp", "10.9.0.1", 5353).as_deref(),
        Some(seen.as_str())
    );
    assert_eq!(udp_entries(&node, 5353), 1);
    // DEL, even without mappings in its config, removes the DNATed entry.
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "DEL",
        "ctr-u",
        &netns,
        &conf("pmnet", json!([]), json!({}), None),
    ));
    assert_eq!(udp_entries(&node, 5353), 0, "DEL removed the entry");
}

// ---- iptables ---------------------------------------------------------------

/// Mappings covering both protocols, a host IP per family and `0.0.0.0`.
fn ipt_mappings() -> Value {
    json!([
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8081, "containerPort": 81, "protocol": "tcp", "hostIP": "10.9.0.1"},
        {"hostPort": 8082, "containerPort": 82, "protocol": "tcp", "hostIP": "fd00:9::1"},
        {"hostPort": 8053, "containerPort": 80, "protocol": "udp"}
    ])
}

#[test]
fn portmap_iptables_writes_exactly_the_go_plugins_rules() {
    if !require_root("portmap_iptables_writes_exactly_the_go_plugins_rules") {
        return;
    }
    let Some(go) = go_plugin("portmap") else {
        return;
    };
    let go_node = forwarding_node("pmipt-go");
    let our_node = forwarding_node("pmipt-rs");
    let pod = Netns::new("pmipt-pod");
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.1.0.2/24", "interface": 0}, {"address": "fd00:1::2/64", "interface": 0}]
    });
    let netns = pod.path().to_str().unwrap().to_string();
    for (extra, tag) in [
        (json!({"backend": "iptables"}), "iptables"),
        // No backend key: Go's default, iptables (written over netlink).
        (json!({}), "default"),
        (json!({"markMasqBit": 5}), "markbit"),
        (
            json!({"backend": "iptables", "snat": false, "conditionsV4": ["-s", "192.0.2.0/24"]}),
            "conditions",
        ),
    ] {
        let cid = format!("ctr-{tag}");
        // The Go plugin 1.1.1 knows no "backend" key and ignores it.
        let c = conf("pmnet", ipt_mappings(), extra, Some(&prev));
        assert_ok(&call_eth0(&go, &go_node, "ADD", &cid, &netns, &c));
        assert_ok(&call_eth0(&ours(), &our_node, "ADD", &cid, &netns, &c));
        for family in IpFamily::BOTH {
            assert_eq!(
                iptables_save(&our_node, family),
                iptables_save(&go_node, family),
                "{tag}, {family:?}"
            );
        }
        assert_eq!(nft_table(&our_node), "", "{tag}: no nftables table of ours");
        assert_ok(&call_eth0(&go, &go_node, "DEL", &cid, &netns, &c));
        assert_ok(&call_eth0(&ours(), &our_node, "DEL", &cid, &netns, &c));
        for family in IpFamily::BOTH {
            assert_eq!(
                iptables_save(&our_node, family),
                iptables_save(&go_node, family),
                "after DEL: {tag}, {family:?}"
            );
        }
    }
    let saved = iptables_save(&our_node, IpFamily::V4);
    assert!(!saved.contains("CNI-DN-"), "{saved}");
    assert!(
        saved.contains(":CNI-HOSTPORT-DNAT - [0:0]"),
        "shared chains stay, as with Go: {saved}"
    );

    // masqAll (newer than Go 1.1.1, which ignores it): every source is
    // marked, as the current Go plugin does (-s 0.0.0.0/0 is implicit).
    let c = conf(
        "pmnet",
        ipt_mappings(),
        json!({"backend": "iptables", "masqAll": true}),
        Some(&prev),
    );
    assert_ok(&call_eth0(&ours(), &our_node, "ADD", "ctr-all", &netns, &c));
    let chain = "CNI-DN-a70f204f205a1e06e2d36";
    let saved = iptables_save(&our_node, IpFamily::V4);
    let rules: Vec<&str> = saved
        .lines()
        .filter(|l| l.starts_with(&format!("-A {chain}")))
        .collect();
    assert_eq!(
        rules,
        [
            format!("-A {chain} -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK"),
            format!("-A {chain} -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.1.0.2:80"),
            format!("-A {chain} -d 10.9.0.1/32 -p tcp -m tcp --dport 8081 -j CNI-HOSTPORT-SETMARK"),
            format!("-A {chain} -d 10.9.0.1/32 -p tcp -m tcp --dport 8081 -j DNAT --to-destination 10.1.0.2:81"),
            format!("-A {chain} -p udp -m udp --dport 8053 -j CNI-HOSTPORT-SETMARK"),
            format!("-A {chain} -p udp -m udp --dport 8053 -j DNAT --to-destination 10.1.0.2:80"),
        ]
    );
}

#[test]
fn portmap_iptables_del_removes_the_go_plugins_rules_and_back() {
    if !require_root("portmap_iptables_del_removes_the_go_plugins_rules_and_back") {
        return;
    }
    let Some(go) = go_plugin("portmap") else {
        return;
    };
    let node = forwarding_node("pmipt-interop");
    let pod = Netns::new("pmipti-pod");
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.1.0.2/24", "interface": 0}, {"address": "fd00:1::2/64", "interface": 0}]
    });
    let netns = pod.path().to_str().unwrap().to_string();
    let chain = "CNI-DN-"; // every per-container chain
    for extra in [json!({"backend": "iptables"}), json!({})] {
        let c = conf("pmnet", ipt_mappings(), extra.clone(), Some(&prev));
        // Go ADD, our DEL (no mappings, no namespace: found by the hashed name).
        assert_ok(&call_eth0(&go, &node, "ADD", "ctr-go", &netns, &c));
        assert!(iptables_save(&node, IpFamily::V4).contains(chain));
        let bare = conf("pmnet", json!([]), extra.clone(), None);
        assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-go", "", &bare));
        for family in IpFamily::BOTH {
            let saved = iptables_save(&node, family);
            assert!(!saved.contains(chain), "{extra} {family:?}: {saved}");
        }
        // Our ADD, Go's DEL: nothing of the container is left anywhere.
        assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-rs", &netns, &c));
        assert!(iptables_save(&node, IpFamily::V6).contains(chain));
        // Go's ADD beside ours recognises the shared rules we wrote (its
        // `iptables -C`), and ours Go's: each is there once.
        assert_ok(&call_eth0(&go, &node, "ADD", "ctr-go3", &netns, &c));
        assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-rs2", &netns, &c));
        for family in IpFamily::BOTH {
            let saved = iptables_save(&node, family);
            for shared in [
                "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
                "-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
                "-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ",
                "-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
            ] {
                assert_eq!(
                    saved.lines().filter(|l| *l == shared).count(),
                    1,
                    "{extra} {family:?} {shared}:\n{saved}"
                );
            }
        }
        assert_ok(&call_eth0(&go, &node, "DEL", "ctr-go3", &netns, &c));
        assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-rs2", "", &c));
        assert_ok(&call_eth0(&go, &node, "DEL", "ctr-rs", &netns, &c));
        for family in IpFamily::BOTH {
            let saved = iptables_save(&node, family);
            assert!(!saved.contains(chain), "{extra} {family:?}: {saved}");
        }
        assert_eq!(nft_table(&node), "", "{extra}");
        // Our DEL afterwards: nothing to do, success.
        assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-rs", &netns, &c));
    }
    let c = conf(
        "pmnet",
        ipt_mappings(),
        json!({"backend": "iptables"}),
        Some(&prev),
    );
    // An nftables DEL still cleans up iptables rules Go left.
    assert_ok(&call_eth0(&go, &node, "ADD", "ctr-go2", &netns, &c));
    let nft_del = conf("pmnet", json!([]), json!({"backend": "nftables"}), None);
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-go2", "", &nft_del));
    assert!(!iptables_save(&node, IpFamily::V4).contains(chain));
    assert!(!iptables_save(&node, IpFamily::V6).contains(chain));
}

#[test]
fn portmap_iptables_forwards_traffic_and_checks_and_collects() {
    if !require_root("portmap_iptables_forwards_traffic_and_checks_and_collects") {
        return;
    }
    let node = forwarding_node("pmipt-traffic");
    let a = Peer::attach(&node, "pmit-a", 1);
    let up = Peer::attach(&node, "pmit-up", 9);
    let _srv = echo_server(&a.ns, "podA", 80);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    let maps = json!([
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8053, "containerPort": 80, "protocol": "udp"}
    ]);
    // With `backend: iptables`, and with no backend key (Go's default).
    for backend in [Some("iptables"), None] {
        let mut extra = json!({"cniVersion": "1.1.0"});
        if let Some(b) = backend {
            extra["backend"] = json!(b);
        }
        let c = conf("pmnet", maps.clone(), extra.clone(), Some(&prev));
        assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-i", &netns, &c));
        assert_eq!(
            nft_table(&node),
            "",
            "the iptables backend writes no table of ours"
        );
        for proto in ["tcp", "udp"] {
            let port = if proto == "tcp" { 8080 } else { 8053 };
            let from_up = format!("podA {}", up.v4());
            assert_eq!(
                connect(&up.ns, proto, "10.9.0.1", port).as_deref(),
                Some(from_up.as_str())
            );
            let from_up6 = format!("podA {}", up.v6());
            assert_eq!(
                connect(&up.ns, proto, "fd00:9::1", port).as_deref(),
                Some(from_up6.as_str())
            );
            let hairpin = format!("podA {}", a.node_v4());
            assert_eq!(
                connect(&a.ns, proto, "10.9.0.1", port).as_deref(),
                Some(hairpin.as_str())
            );
            assert_eq!(
                connect(&node, proto, "127.0.0.1", port).as_deref(),
                Some(hairpin.as_str())
            );
        }
        assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-i", &netns, &c));
        // Remove the UDP DNAT rule by hand: CHECK names the mapping.
        let saved = iptables_save(&node, IpFamily::V4);
        let dnat = saved
            .lines()
            .find(|l| l.contains("--dport 8053 -j DNAT"))
            .expect("udp DNAT rule")
            .replacen("-A ", "-D ", 1);
        let args: Vec<&str> = dnat.split_whitespace().collect();
        run_ok(node.command("iptables").args(["-t", "nat"]).args(&args));
        call_eth0(&ours(), &node, "CHECK", "ctr-i", &netns, &c)
            .assert_error(102, "mapping udp 8053 -> 80 has no DNAT rule");
        // GC with no valid attachment removes the container's chains.
        let mut gc = json!({"cniVersion": "1.1.0", "name": "pmnet", "type": "portmap",
                    "cni.dev/valid-attachments": []});
        if let Some(b) = backend {
            gc["backend"] = json!(b);
        }
        let gc = gc.to_string();
        assert_ok(&call_plugin(
            Some(&node),
            &ours(),
            &[("CNI_COMMAND", "GC"), ("CNI_PATH", "/x")],
            &gc,
        ));
        for family in IpFamily::BOTH {
            let saved = iptables_save(&node, family);
            assert!(!saved.contains("CNI-DN-"), "{family:?}: {saved}");
        }
        assert_eq!(connect(&up.ns, "tcp", "10.9.0.1", 8080), None);
    }
}

/// A forwarding node with pod A (an echo service on port 80) and an
/// upstream peer, for the tests that map one host port at a time.
struct OneMappingSite {
    node: Netns,
    a: Peer,
    up: Peer,
    _srv: Listener,
    prev: Value,
    netns: String,
}

impl OneMappingSite {
    fn new(tag: &str) -> OneMappingSite {
        let node = forwarding_node(tag);
        let a = Peer::attach(&node, &format!("{tag}-a"), 1);
        let up = Peer::attach(&node, &format!("{tag}-up"), 9);
        let _srv = echo_server(&a.ns, "podA", 80);
        let prev = a.prev_result();
        let netns = a.ns.path().to_str().unwrap().to_string();
        OneMappingSite {
            node,
            a,
            up,
            _srv,
            prev,
            netns,
        }
    }

    /// The config mapping host port `port` to pod A's port 80 on `backend`.
    fn conf(&self, port: u16, backend: &str) -> String {
        conf(
            "pmnet",
            json!([{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]),
            json!({ "backend": backend }),
            Some(&self.prev),
        )
    }
}

/// The node ledger of the jumps from the base chains into the shared
/// chains, as `<feature>/netns-<inode>/nat` under the node's `/run/cni`:
/// its lines.
fn shared_jumps_ledger(node: &Netns) -> (std::path::PathBuf, Vec<String>) {
    let dir = node.run_dir().join("portmap-iptables-jumps");
    let ns = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .next()
        .expect("a namespace directory");
    let path = ns.path().join("nat");
    let text = std::fs::read_to_string(&path).expect("the node ledger");
    (path, text.lines().map(str::to_string).collect())
}

/// An ADD finds the jumps of PREROUTING, OUTPUT and POSTROUTING into the
/// shared chains by their handles in a node ledger, but never trusts one
/// it has not read back: a jump removed by hand, or a handle that now
/// names another rule, is noticed, and the jump added again, once.
#[test]
fn portmap_iptables_add_reads_back_the_shared_jumps_the_node_ledger_names() {
    if !require_root("portmap_iptables_add_reads_back_the_shared_jumps_the_node_ledger_names") {
        return;
    }
    let site = OneMappingSite::new("pmij");
    let OneMappingSite {
        node, a, up, netns, ..
    } = &site;
    let mk = |port: u16| site.conf(port, "iptables");
    let jumps = [
        "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        "-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        "-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ",
    ];
    let each_once = |when: &str| {
        for family in IpFamily::BOTH {
            let saved = iptables_save(node, family);
            for j in jumps {
                let n = saved.lines().filter(|l| *l == j).count();
                assert_eq!(n, 1, "{when}, {family:?}, {j}:\n{saved}");
            }
        }
    };
    // The first ADD adds the jumps and records their handles; the second
    // finds them by those handles.
    assert_ok(&call_eth0(&ours(), node, "ADD", "ctr-1", netns, &mk(8080)));
    let (path, lines) = shared_jumps_ledger(node);
    assert_eq!(lines.len(), 6, "three jumps in each family: {lines:?}");
    assert_ok(&call_eth0(&ours(), node, "ADD", "ctr-2", netns, &mk(8081)));
    each_once("two ADDs");
    assert_eq!(shared_jumps_ledger(node).1, lines);

    // The ledger's PREROUTING entry now names another rule of
    // PREROUTING, while the jump stays where it was: the ADD must not
    // take the jump for missing (a second copy), but list and record.
    run_ok(node.command("iptables").args([
        "-t",
        "nat",
        "-I",
        "PREROUTING",
        "-p",
        "tcp",
        "--dport",
        "9",
        "-j",
        "ACCEPT",
    ]));
    let listed =
        run_ok(
            node.command("nft")
                .args(["-a", "list", "chain", "ip", "nat", "PREROUTING"]),
        );
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let foreign = listed
        .lines()
        .find(|l| l.contains("dport 9"))
        .and_then(|l| l.rsplit("# handle ").next())
        .unwrap_or_else(|| panic!("the foreign rule in\n{listed}"))
        .trim()
        .to_string();
    let pointed: Vec<String> = lines
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, ' ').collect();
            if f[..3] == ["ip", "nat", "PREROUTING"] {
                format!("ip nat PREROUTING {foreign} {}", f[4])
            } else {
                l.clone()
            }
        })
        .collect();
    assert_ne!(pointed, lines);
    std::fs::write(&path, pointed.join("\n") + "\n").unwrap();
    assert_ok(&call_eth0(&ours(), node, "ADD", "ctr-3", netns, &mk(8082)));
    each_once("a ledger handle naming another rule");
    let saved = iptables_save(node, IpFamily::V4);
    assert!(
        saved.contains("-A PREROUTING -p tcp -m tcp --dport 9 -j ACCEPT"),
        "the foreign rule stays:\n{saved}"
    );
    let (_, lines) = shared_jumps_ledger(node);
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with(&format!("ip nat PREROUTING {foreign} "))),
        "the ledger names the jump again: {lines:?}"
    );

    // POSTROUTING's jump removed by hand: hairpin traffic is no longer
    // masqueraded until the next ADD puts the jump back.
    let unjump = libcni::netfilter::iptables::split_tokens(&jumps[2].replacen("-A ", "-D ", 1));
    run_ok(node.command("iptables").args(["-t", "nat"]).args(&unjump));
    let hairpin = format!("podA {}", a.node_v4());
    assert_ne!(
        connect(&a.ns, "tcp", "10.9.0.1", 8082).as_deref(),
        Some(hairpin.as_str())
    );
    assert_ok(&call_eth0(&ours(), node, "ADD", "ctr-4", netns, &mk(8083)));
    each_once("a jump removed by hand");
    let (_, repaired) = shared_jumps_ledger(node);
    assert_eq!(
        repaired.len(),
        6,
        "the jump put back is recorded: {repaired:?}"
    );
    assert_eq!(
        connect(&a.ns, "tcp", "10.9.0.1", 8083).as_deref(),
        Some(hairpin.as_str())
    );
    let from_up = format!("podA {}", up.v4());
    assert_eq!(
        connect(&up.ns, "tcp", "10.9.0.1", 8080).as_deref(),
        Some(from_up.as_str())
    );
    for (cid, port) in [
        ("ctr-1", 8080),
        ("ctr-2", 8081),
        ("ctr-3", 8082),
        ("ctr-4", 8083),
    ] {
        assert_ok(&call_eth0(&ours(), node, "DEL", cid, netns, &mk(port)));
    }
    let saved = iptables_save(node, IpFamily::V4);
    assert!(!saved.contains("CNI-DN-"), "{saved}");
}

#[test]
fn portmap_nft_conditions_restrict_who_reaches_the_host_port() {
    if !require_root("portmap_nft_conditions_restrict_who_reaches_the_host_port") {
        return;
    }
    let node = forwarding_node("pmcond");
    let a = Peer::attach(&node, "pmcd-a", 1);
    let b = Peer::attach(&node, "pmcd-b", 2);
    let up = Peer::attach(&node, "pmcd-up", 9);
    let _srv = echo_server(&a.ns, "podA", 80);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    let maps = json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]);
    let extra = json!({"conditionsV4": ["ip saddr { 10.9.0.0/24, 10.8.0.1 }", "iifname \"v9\"",
                                        "meta mark 0", "fib daddr type local"],
                       "conditionsV6": ["ip6 saddr != fd00:2::/64"]});
    let c = conf("pmnet", maps, extra, Some(&prev));
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-c", &netns, &c));
    assert_eq!(
        rules(&node, "ip", "hostports"),
        ["ip saddr { 10.8.0.1, 10.9.0.0/24 } iifname \"v9\" meta mark 0x00000000 fib daddr type local tcp dport 8080 dnat to 10.1.0.2:80 comment \"ctr-c\""]
    );
    assert_eq!(
        rules(&node, "ip6", "hostports"),
        ["ip6 saddr != fd00:2::/64 tcp dport 8080 dnat to [fd00:1::2]:80 comment \"ctr-c\""]
    );
    assert_eq!(
        rules(&node, "ip", "prerouting"),
        ["fib daddr type local jump hostports_all"],
        "conditions go in the mapping's rule, not in the shared jump"
    );
    let from_up = format!("podA {}", up.v4());
    assert_eq!(
        connect(&up.ns, "tcp", "10.9.0.1", 8080).as_deref(),
        Some(from_up.as_str())
    );
    assert_eq!(
        connect(&b.ns, "tcp", "10.9.0.1", 8080),
        None,
        "10.2.0.2 is not 10.9.0.0/24"
    );
    let from_up6 = format!("podA {}", up.v6());
    assert_eq!(
        connect(&up.ns, "tcp", &up.node_v6(), 8080).as_deref(),
        Some(from_up6.as_str())
    );
    assert_eq!(
        connect(&b.ns, "tcp", &up.node_v6(), 8080),
        None,
        "fd00:2::/64 is excluded"
    );
    assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-c", &netns, &c));
    // ADD again replaces the rules instead of duplicating them.
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-c", &netns, &c));
    assert_eq!(nft_table(&node).matches("dport 8080").count(), 2);
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "DEL",
        "ctr-c",
        "",
        &conf("pmnet", json!([]), json!({}), None),
    ));
    assert!(!nft_table(&node).contains("\"ctr-c\""));
    assert_eq!(connect(&up.ns, "tcp", "10.9.0.1", 8080), None);
}

#[test]
fn portmap_nft_check_notices_a_broken_skeleton_and_add_repairs_it() {
    if !require_root("portmap_nft_check_notices_a_broken_skeleton_and_add_repairs_it") {
        return;
    }
    let site = OneMappingSite::new("pmskel");
    let OneMappingSite {
        node, up, netns, ..
    } = &site;
    let mk = |port: u16| site.conf(port, "nftables");
    assert_ok(&call_eth0(&ours(), node, "ADD", "ctr-1", netns, &mk(8080)));
    run_ok(
        node.command("nft")
            .args(["flush", "chain", "ip", "cni_hostport", "prerouting"]),
    );
    call_eth0(&ours(), node, "CHECK", "ctr-1", netns, &mk(8080)).assert_error(
        102,
        "the shared chains of table ip cni_hostport are missing or changed",
    );
    assert_eq!(connect(&up.ns, "tcp", "10.9.0.1", 8080), None);
    // The next ADD finds the skeleton incomplete and rewrites it whole.
    assert_ok(&call_eth0(&ours(), node, "ADD", "ctr-2", netns, &mk(8081)));
    assert_ok(&call_eth0(
        &ours(),
        node,
        "CHECK",
        "ctr-1",
        netns,
        &mk(8080),
    ));
    let seen = format!("podA {}", up.v4());
    assert_eq!(
        connect(&up.ns, "tcp", "10.9.0.1", 8080).as_deref(),
        Some(seen.as_str())
    );
    assert_eq!(
        nft_table(node)
            .matches("fib daddr type local jump hostports_all")
            .count(),
        4,
        "prerouting and output of both families"
    );
}

#[test]
fn portmap_crash_around_the_commit_leaves_all_or_nothing() {
    if !require_root("portmap_crash_around_the_commit_leaves_all_or_nothing") {
        return;
    }
    let node = forwarding_node("pmfault");
    let a = Peer::attach(&node, "pmf-a", 1);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    let c = conf(
        "pmnet",
        json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        json!({"backend": "nftables"}),
        Some(&prev),
    );
    let run = |point: &str| {
        call_plugin(
            Some(&node),
            &ours(),
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "ctr-f"),
                ("CNI_NETNS", &netns),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/opt/cni/bin"),
                ("CNI_FAULT_POINT", point),
            ],
            &c,
        )
    };
    let out = run("portmap/before-commit");
    assert_eq!(out.exit_code, -1, "killed: {out:?}");
    assert_eq!(nft_ruleset(&node), "", "nothing before the commit");
    // Killed after the commit, before or after the ledger is written: the
    // runtime's DEL after the failed ADD finds the rules either way (by the
    // ledger, or by listing the chains).
    for point in ["netfilter/before-ledger", "portmap/after-commit"] {
        let out = run(point);
        assert_eq!(out.exit_code, -1, "killed: {out:?}");
        assert_eq!(
            rules(&node, "ip", "hostports"),
            ["tcp dport 8080 dnat to 10.1.0.2:80 comment \"ctr-f\""]
        );
        assert_ok(&call_eth0(
            &ours(),
            &node,
            "DEL",
            "ctr-f",
            "",
            &conf("pmnet", json!([]), json!({}), None),
        ));
        assert_eq!(rules(&node, "ip", "hostports"), Vec::<String>::new());
        assert_eq!(rules(&node, "ip", "masquerading"), Vec::<String>::new());
    }
}

/// Our encoding of each supported condition is `nft`'s: the expressions of
/// the rule our ADD writes equal those of the same rule loaded by `nft -f`.
#[test]
fn portmap_nft_conditions_are_encoded_as_nft_encodes_them() {
    if !require_root("portmap_nft_conditions_are_encoded_as_nft_encodes_them") {
        return;
    }
    let pod = Netns::new("pmenc-pod");
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.1.0.2/24", "interface": 0}]
    });
    let netns = pod.path().to_str().unwrap().to_string();
    let exprs = |ns: &Netns| nft_exprs(ns, "ip", "cni_hostport", "hostports");
    for cond in [
        "ip saddr 10.9.0.0/24",
        "ip saddr 10.9.0.0/20",
        "ip daddr != 192.168.1.7",
        "ip saddr { 10.9.0.0/24, 10.8.0.1 }",
        "ip saddr != { 10.8.0.1, 10.8.0.2 }",
        "iifname \"eth0\"",
        "oifname != \"veth*\"",
        "meta mark 0x10",
        "meta mark and 0xff != 0x1",
        "fib daddr type local",
        "fib saddr type != local",
    ] {
        let node = Netns::new("pmenc-node");
        let c = conf(
            "pmenc",
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
            json!({"backend": "nftables", "snat": false, "conditionsV4": [cond]}),
            Some(&prev),
        );
        assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-e", &netns, &c));
        let reference = Netns::new("pmenc-ref");
        let text = format!(
            "add table ip cni_hostport\nadd chain ip cni_hostport hostports\n\
             add rule ip cni_hostport hostports {cond} tcp dport 8080 dnat to 10.1.0.2:80 comment \"ctr-e\"\n"
        );
        feed(&reference, "nft", &["-f", "-"], &text);
        assert_eq!(exprs(&node), exprs(&reference), "{cond}");
        assert_ok(&call_eth0(
            &ours(),
            &node,
            "DEL",
            "ctr-e",
            "",
            &conf("pmenc", json!([]), json!({}), None),
        ));
        assert_eq!(exprs(&node), Vec::<String>::new(), "{cond}: DEL");
    }
}

/// `markMasqBit` is an iptables option the Go plugin also accepts with the
/// nftables backend (and ignores there): so do we.
#[test]
fn portmap_nft_accepts_and_ignores_mark_masq_bit() {
    if !require_root("portmap_nft_accepts_and_ignores_mark_masq_bit") {
        return;
    }
    let node = forwarding_node("pmmark");
    let a = Peer::attach(&node, "pmm-a", 1);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    let maps = json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]);
    let extra = json!({"backend": "nftables", "markMasqBit": 5});
    let c = conf("pmmark", maps.clone(), extra.clone(), Some(&prev));
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-m", &netns, &c));
    assert_eq!(
        rules(&node, "ip", "hostports"),
        ["tcp dport 8080 dnat to 10.1.0.2:80 comment \"ctr-m\""],
        "{extra}"
    );
    assert!(
        !iptables_save(&node, IpFamily::V4).contains("CNI-"),
        "{extra}: no iptables rule"
    );
    assert_ok(&call_eth0(&ours(), &node, "CHECK", "ctr-m", &netns, &c));
    assert_ok(&call_eth0(&ours(), &node, "DEL", "ctr-m", "", &c));
    assert_eq!(rules(&node, "ip", "hostports"), Vec::<String>::new());
}

// ---- the default backend, by the node's iptables ---------------------------

/// A `PATH` directory whose `iptables` leads to `iptables_target` (or
/// none), and whose other netfilter programs are either `links` (name,
/// target) or traps that record their call in `trap.log` and fail.
fn fake_path(dir: &TempDir, iptables_target: Option<&str>, links: &[(&str, &str)]) {
    use std::os::unix::fs::{symlink, PermissionsExt};
    if let Some(t) = iptables_target {
        symlink(t, dir.path().join("iptables")).unwrap();
    }
    let log = dir.path().join("trap.log");
    for prog in [
        "iptables-save",
        "iptables-restore",
        "ip6tables",
        "ip6tables-save",
        "ip6tables-restore",
        "nft",
    ] {
        let p = dir.path().join(prog);
        if let Some((_, t)) = links.iter().find(|(n, _)| *n == prog) {
            symlink(t, &p).unwrap();
            continue;
        }
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho \"$0 $*\" >> {}\nexit 1\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Runs our plugin in `node` with `PATH` set to `path` (for the plugin
/// alone: `env` sets it after the namespace is entered).
fn call_in_path(
    node: &Netns,
    path: &str,
    cmd: &str,
    cid: &str,
    netns: &str,
    c: &str,
) -> PluginOutput {
    let mut command = node.command("/usr/bin/env");
    command.arg(format!("PATH={path}")).arg(ours());
    call_plugin_cmd(
        command,
        &[
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        c,
    )
}

/// With no backend key on a node whose `iptables` is iptables-nft, ADD,
/// CHECK, DEL and GC write and read Go's iptables rules over netlink: no
/// program is run (every one reachable is a trap).
#[test]
fn portmap_default_backend_runs_no_process_on_iptables_nft() {
    if !require_root("portmap_default_backend_runs_no_process_on_iptables_nft") {
        return;
    }
    let node = forwarding_node("pmnoproc");
    let a = Peer::attach(&node, "pmnp-a", 1);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    let dir = TempDir::new("pm-nft-path");
    fake_path(&dir, Some("/usr/sbin/xtables-nft-multi"), &[]);
    let path = dir.path().to_str().unwrap().to_string();
    let c = conf(
        "pmnet",
        ipt_mappings(),
        json!({"cniVersion": "1.1.0"}),
        Some(&prev),
    );
    let bare = conf("pmnet", json!([]), json!({"cniVersion": "1.1.0"}), None);
    assert_ok(&call_in_path(&node, &path, "ADD", "ctr-n", &netns, &c));
    let chain = "CNI-DN-";
    assert!(iptables_save(&node, IpFamily::V4).contains(chain));
    assert!(iptables_save(&node, IpFamily::V6).contains(chain));
    assert_eq!(nft_table(&node), "");
    assert_ok(&call_in_path(&node, &path, "CHECK", "ctr-n", &netns, &c));
    assert_ok(&call_in_path(&node, &path, "DEL", "ctr-n", "", &bare));
    for family in IpFamily::BOTH {
        assert!(!iptables_save(&node, family).contains(chain), "{family:?}");
    }
    assert_ok(&call_in_path(&node, &path, "ADD", "ctr-n", &netns, &c));
    let gc = json!({"cniVersion": "1.1.0", "name": "pmnet", "type": "portmap",
                    "cni.dev/valid-attachments": []})
    .to_string();
    assert_ok(&call_in_path(&node, &path, "GC", "", "", &gc));
    for family in IpFamily::BOTH {
        assert!(!iptables_save(&node, family).contains(chain), "{family:?}");
    }
    let log = std::fs::read_to_string(dir.path().join("trap.log")).unwrap_or_default();
    assert_eq!(log, "", "no program was run");
}

/// As Go picks its default: a legacy `iptables` gets its rules through
/// `iptables-legacy-restore` (nothing in nf_tables); no `iptables` at all
/// gets the nftables backend.
#[test]
fn portmap_default_backend_follows_the_nodes_iptables() {
    if !require_root("portmap_default_backend_follows_the_nodes_iptables") {
        return;
    }
    let node = forwarding_node("pmlegacy");
    let a = Peer::attach(&node, "pmlg-a", 1);
    let prev = a.prev_result();
    let netns = a.ns.path().to_str().unwrap().to_string();
    let c = conf("pmnet", ipt_mappings(), json!({}), Some(&prev));
    let bare = conf("pmnet", json!([]), json!({}), None);
    let chain = "CNI-DN-";
    let legacy_save = |family: IpFamily| {
        let cmd = iptables_program(family, "-legacy-save");
        let out = run_ok(node.command(cmd).args(["-t", "nat"]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    let legacy = TempDir::new("pm-legacy-path");
    fake_path(
        &legacy,
        Some("/usr/sbin/xtables-legacy-multi"),
        &[
            ("iptables-save", "/usr/sbin/iptables-legacy-save"),
            ("iptables-restore", "/usr/sbin/iptables-legacy-restore"),
            ("ip6tables", "/usr/sbin/ip6tables-legacy"),
            ("ip6tables-save", "/usr/sbin/ip6tables-legacy-save"),
            ("ip6tables-restore", "/usr/sbin/ip6tables-legacy-restore"),
        ],
    );
    let path = legacy.path().to_str().unwrap().to_string();
    assert_ok(&call_in_path(&node, &path, "ADD", "ctr-l", &netns, &c));
    for family in IpFamily::BOTH {
        assert!(
            legacy_save(family).contains(chain),
            "{family:?}: legacy tables"
        );
        assert!(
            !iptables_save(&node, family).contains(chain),
            "{family:?}: not nf_tables"
        );
    }
    assert_eq!(nft_table(&node), "");
    assert_ok(&call_in_path(&node, &path, "CHECK", "ctr-l", &netns, &c));
    assert_ok(&call_in_path(&node, &path, "DEL", "ctr-l", "", &bare));
    for family in IpFamily::BOTH {
        assert!(!legacy_save(family).contains(chain), "{family:?}");
    }

    let none = TempDir::new("pm-none-path");
    fake_path(&none, None, &[]);
    let path = none.path().to_str().unwrap().to_string();
    assert_ok(&call_in_path(&node, &path, "ADD", "ctr-x", &netns, &c));
    assert_eq!(
        rules(&node, "ip", "hostports"),
        [
            "tcp dport 8080 dnat to 10.1.0.2:80 comment \"ctr-x\"",
            "ip daddr 10.9.0.1 tcp dport 8081 dnat to 10.1.0.2:81 comment \"ctr-x\"",
            "udp dport 8053 dnat to 10.1.0.2:80 comment \"ctr-x\""
        ]
    );
    assert!(!iptables_save(&node, IpFamily::V4).contains(chain));
    assert_ok(&call_in_path(&node, &path, "DEL", "ctr-x", "", &bare));
    assert_eq!(rules(&node, "ip", "hostports"), Vec::<String>::new());
    let log = std::fs::read_to_string(none.path().join("trap.log")).unwrap_or_default();
    assert_eq!(log, "", "nftables runs no program");
}

/// `masqAll` on nftables, as upstream v1.10 writes it (#1235): one
/// masquerading rule per family from any source (`ip saddr 0.0.0.0/0`,
/// `ip6 saddr ::/0`) to the container, and no separate 127.0.0.1 rule,
/// which that one covers. The rules are encoded as `nft` encodes
/// upstream's text (netlink expressions compared), CHECK passes on them,
/// and DEL removes them.
#[test]
fn portmap_nft_masq_all_masquerades_every_source_as_upstream() {
    if !require_root("portmap_nft_masq_all_masquerades_every_source_as_upstream") {
        return;
    }
    let pod = Netns::new("pmall-pod");
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.1.0.2/24", "interface": 0}, {"address": "fd00:1::2/64", "interface": 0}]
    });
    let netns = pod.path().to_str().unwrap().to_string();
    let node = forwarding_node("pmall");
    let c = conf(
        "pmall",
        json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        json!({"backend": "nftables", "masqAll": true}),
        Some(&prev),
    );
    assert_ok(&call_eth0(&ours(), &node, "ADD", "ctr-all", &netns, &c));
    let masq_v4 = rules(&node, "ip", "masquerading");
    let masq_v6 = rules(&node, "ip6", "masquerading");
    assert_eq!(masq_v4.len(), 1, "{masq_v4:?}");
    assert_eq!(masq_v6.len(), 1, "{masq_v6:?}");
    assert!(
        masq_v4[0].contains("ip daddr 10.1.0.2 masquerade") && !masq_v4[0].contains("127.0.0.1"),
        "{masq_v4:?}"
    );
    assert!(
        masq_v6[0].contains("ip6 daddr fd00:1::2 masquerade"),
        "{masq_v6:?}"
    );

    // What nft makes of upstream's text, expression by expression.
    let exprs = |ns: &Netns, fam: &str| nft_exprs(ns, fam, "cni_hostport", "masquerading");
    let reference = Netns::new("pmall-ref");
    let text = "add table ip cni_hostport\nadd chain ip cni_hostport masquerading\n\
         add rule ip cni_hostport masquerading ip saddr 0.0.0.0/0 ip daddr 10.1.0.2 masquerade comment \"ctr-all\"\n\
         add table ip6 cni_hostport\nadd chain ip6 cni_hostport masquerading\n\
         add rule ip6 cni_hostport masquerading ip6 saddr ::/0 ip6 daddr fd00:1::2 masquerade comment \"ctr-all\"\n";
    feed(&reference, "nft", &["-f", "-"], text);
    for fam in ["ip", "ip6"] {
        let ours_exprs = exprs(&node, fam);
        assert!(!ours_exprs.is_empty(), "{fam}");
        assert_eq!(ours_exprs, exprs(&reference, fam), "{fam}");
    }

    let mut check: Value = serde_json::from_str(&c).unwrap();
    check["prevResult"] = prev.clone();
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "CHECK",
        "ctr-all",
        &netns,
        &check.to_string(),
    ));
    assert_ok(&call_eth0(
        &ours(),
        &node,
        "DEL",
        "ctr-all",
        "",
        &conf("pmall", json!([]), json!({"backend": "nftables"}), None),
    ));
    assert_eq!(rules(&node, "ip", "masquerading"), Vec::<String>::new());
    assert_eq!(rules(&node, "ip6", "masquerading"), Vec::<String>::new());
}
