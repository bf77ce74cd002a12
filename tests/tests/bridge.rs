//! The bridge plugin with our host-local, in real namespaces: every test
//! has its own node namespace (plugins run there) with pod namespaces
//! beside it, real traffic between them, and the Go reference side by side.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tests::*;

/// A node with a CNI_PATH (our bridge and host-local, plus any script
/// plugin a test adds) and a host-local data dir, all in temp dirs.
struct Net {
    node: Node,
    path: TempDir,
    data: TempDir,
}

impl Net {
    fn new(tag: &str) -> Net {
        let path = TempDir::new(&format!("path-{tag}"));
        for p in ["bridge", "host-local"] {
            std::os::unix::fs::symlink(bin(p), path.path().join(p)).expect("symlink");
        }
        Net {
            node: Node::new(tag),
            path,
            data: TempDir::new(&format!("data-{tag}")),
        }
    }

    /// A dual-stack config for network `net`, with `extra` keys on top.
    fn conf(&self, net: &str, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.1.0",
            "name": net,
            "type": "bridge",
            "ipam": {
                "type": "host-local",
                "dataDir": self.data.path(),
                "ranges": [[{"subnet": "10.88.0.0/24"}], [{"subnet": "fd88::/64"}]]
            }
        });
        merge(&mut c, extra);
        c
    }

    /// One plugin call in the node namespace; `pod` None means an empty
    /// `CNI_NETNS`.
    fn call(&self, cmd: &str, pod: Option<&Netns>, cid: &str, conf: &Value) -> PluginOutput {
        self.call_env(cmd, pod, cid, conf, &[])
    }

    fn call_env(
        &self,
        cmd: &str,
        pod: Option<&Netns>,
        cid: &str,
        conf: &Value,
        extra: &[(&str, &str)],
    ) -> PluginOutput {
        PluginCall {
            node: &self.node.ns,
            plugin: &bin("bridge"),
            cni_path: &self.path.path().display().to_string(),
            command: cmd,
            netns: pod.map(|p| p.path()),
            container_id: cid,
            conf,
            extra,
        }
        .run()
    }

    /// ADD that must succeed; returns the result.
    fn add(&self, pod: &Netns, cid: &str, conf: &Value) -> Value {
        self.call("ADD", Some(pod), cid, conf).result()
    }

    fn del(&self, pod: Option<&Netns>, cid: &str, conf: &Value) {
        self.call("DEL", pod, cid, conf).assert_silent_ok();
    }

    /// The addresses host-local holds for network `net`.
    fn leases(&self, net: &str) -> Vec<String> {
        leases_in(&self.data.path().join(net))
    }

    /// Names of the node's veths.
    fn veths(&self) -> Vec<String> {
        links_of_kind(&self.node.ns, "veth")
    }

    /// Writes an executable script plugin `name` into CNI_PATH.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        self.path
            .write_executable(name, &format!("#!/bin/sh\n{body}\n"))
    }
}

fn links_of_kind(ns: &Netns, kind: &str) -> Vec<String> {
    let links = ns.ip_json(&["-d", "link", "show"]);
    let mut v: Vec<String> = links
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["linkinfo"]["info_kind"] == kind)
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn sysctl(ns: &Netns, key: &str) -> String {
    let out = run_ok(ns.command("cat").arg(Path::new("/proc/sys").join(key)));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The host veth of the pod's `eth0` (its peer in the node).
fn host_veth_of(net: &Net, result: &Value) -> String {
    let name = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        net.veths().contains(&name),
        "{name} not in {:?}",
        net.veths()
    );
    name
}

#[test]
fn bridge_answers_version() {
    let out = call_plugin(None, &bin("bridge"), &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["supportedVersions"],
        json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
}

#[test]
fn two_pods_talk_over_ipv4_and_ipv6_and_reach_the_gateway() {
    if !require_root("two_pods_talk_over_ipv4_and_ipv6_and_reach_the_gateway") {
        return;
    }
    let net = Net::new("br-traffic");
    let (a, b) = (Netns::new("pod-a"), Netns::new("pod-b"));
    let conf = net.conf("traffic", json!({"isGateway": true}));
    let ra = net.add(&a, "ctr-a", &conf);
    let rb = net.add(&b, "ctr-b", &conf);

    // The result, exactly.
    assert_eq!(ra["cniVersion"], "1.1.0");
    let ifs = ra["interfaces"].as_array().unwrap();
    assert_eq!(ifs.len(), 3, "{ra}");
    assert_eq!(ifs[0]["name"], "cni0");
    assert!(ifs[0].get("sandbox").is_none());
    let veth = ifs[1]["name"].as_str().unwrap();
    assert!(veth.len() == 12 && veth.starts_with("veth"), "{veth}");
    assert!(ifs[1].get("sandbox").is_none());
    assert_eq!(ifs[2]["name"], "eth0");
    assert_eq!(ifs[2]["sandbox"], a.path().display().to_string());
    assert!(
        ifs.iter().all(|i| is_mac(&i["mac"]) && i["mtu"] == 1500),
        "{ra}"
    );
    assert_eq!(
        ra["ips"],
        json!([
            {"interface": 2, "address": "10.88.0.2/24", "gateway": "10.88.0.1"},
            {"interface": 2, "address": "fd88::2/64", "gateway": "fd88::1"}
        ])
    );
    assert!(ra.get("routes").is_none(), "{ra}");
    assert_eq!(rb["ips"][0]["address"], "10.88.0.3/24");
    assert_eq!(rb["ips"][1]["address"], "fd88::3/64");
    // The pod's MAC is the one reported.
    let eth0 = a.link("eth0").unwrap();
    assert_eq!(eth0["address"], ifs[2]["mac"]);

    // Node state: gateway addresses on the bridge, forwarding on, RA off.
    assert_eq!(
        global_addrs(&net.node.ns, "cni0"),
        ["10.88.0.1/24", "fd88::1/64"]
    );
    assert_eq!(sysctl(&net.node.ns, "net/ipv4/ip_forward"), "1");
    assert_eq!(sysctl(&net.node.ns, "net/ipv6/conf/all/forwarding"), "1");
    assert_eq!(sysctl(&net.node.ns, "net/ipv6/conf/cni0/accept_ra"), "0");
    assert_eq!(
        sysctl(&net.node.ns, &format!("net/ipv6/conf/{veth}/accept_ra")),
        "0"
    );
    assert_eq!(
        net.leases("traffic"),
        ["10.88.0.2", "10.88.0.3", "fd88::2", "fd88::3"]
    );

    // Real traffic, at once: pod to pod and pod to gateway, both families.
    assert_ping(&a, "10.88.0.3");
    assert_ping(&a, "fd88::3");
    assert_ping(&b, "10.88.0.2");
    assert_ping(&a, "10.88.0.1");
    assert_ping(&a, "fd88::1");
    assert_ping(&b, "fd88::1");

    net.del(Some(&a), "ctr-a", &conf);
    net.del(Some(&b), "ctr-b", &conf);
    assert!(a.link("eth0").is_none());
    assert_eq!(net.veths(), Vec::<String>::new());
    assert_eq!(net.leases("traffic"), Vec::<String>::new());
    // The bridge and its address stay, as in the reference.
    assert_eq!(
        global_addrs(&net.node.ns, "cni0"),
        ["10.88.0.1/24", "fd88::1/64"]
    );
}

#[test]
fn enabledad_returns_only_when_dad_is_done() {
    if !require_root("enabledad_returns_only_when_dad_is_done") {
        return;
    }
    let net = Net::new("br-dad");
    let pod = Netns::new("pod-dad");
    let mut conf = net.conf("dad", json!({"enabledad": true, "isGateway": true}));
    conf["ipam"]["ranges"] = json!([[{"subnet": "fd89::/64"}]]);
    net.add(&pod, "ctr-dad", &conf);
    assert_eq!(sysctl(&pod, "net/ipv6/conf/eth0/accept_dad"), "1");
    assert_eq!(sysctl(&pod, "net/ipv6/conf/eth0/enhanced_dad"), "1");
    let v = pod.ip_json(&["addr", "show", "dev", "eth0"]);
    let a = v[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["local"] == "fd89::2")
        .cloned()
        .unwrap();
    assert!(
        a.get("tentative").is_none() && a.get("dadfailed").is_none(),
        "{a}"
    );
    assert_ping(&pod, "fd89::1");
    net.del(Some(&pod), "ctr-dad", &conf);

    // Without enabledad, DAD is off for the pod and the address usable at once.
    let pod2 = Netns::new("pod-nodad");
    conf["enabledad"] = json!(false);
    net.add(&pod2, "ctr-nodad", &conf);
    assert_eq!(sysctl(&pod2, "net/ipv6/conf/eth0/accept_dad"), "0");
    assert_eq!(sysctl(&pod2, "net/ipv6/conf/eth0/keep_addr_on_down"), "1");
    assert_ping(&pod2, "fd89::1");
}

#[test]
fn hairpin_isolation_and_mtu_on_all_three_links() {
    if !require_root("hairpin_isolation_and_mtu_on_all_three_links") {
        return;
    }
    let net = Net::new("br-hairpin");
    let pod = Netns::new("pod-hairpin");
    let conf = net.conf(
        "hairpin",
        json!({"hairpinMode": true, "portIsolation": true, "mtu": 1400, "bridge": "br-h0"}),
    );
    let r = net.add(&pod, "ctr-h", &conf);
    let veth = host_veth_of(&net, &r);
    let port = net.node.ns.link(&veth).unwrap();
    assert_eq!(port["master"], "br-h0");
    assert_eq!(port["linkinfo"]["info_slave_kind"], "bridge");
    assert_eq!(port["linkinfo"]["info_slave_data"]["hairpin"], true);
    assert_eq!(port["linkinfo"]["info_slave_data"]["isolated"], true);
    assert_eq!(port["linkinfo"]["info_slave_data"]["state"], "forwarding");
    assert_eq!(port["mtu"], 1400);
    assert_eq!(net.node.ns.link("br-h0").unwrap()["mtu"], 1400);
    assert_eq!(pod.link("eth0").unwrap()["mtu"], 1400);
    let mtus: Vec<&Value> = r["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["mtu"])
        .collect();
    assert_eq!(mtus, [1400, 1400, 1400]);

    // Without hairpinMode the flag is explicitly off.
    let pod2 = Netns::new("pod-nohairpin");
    let mut conf2 = conf.clone();
    conf2["hairpinMode"] = json!(false);
    conf2["portIsolation"] = json!(false);
    let r2 = net.add(&pod2, "ctr-h2", &conf2);
    let port2 = net.node.ns.link(&host_veth_of(&net, &r2)).unwrap();
    assert_eq!(port2["linkinfo"]["info_slave_data"]["hairpin"], false);
    assert_eq!(port2["linkinfo"]["info_slave_data"]["isolated"], false);
}

/// What the node and a pod look like after an ADD, in a form that does not
/// depend on random names and MACs.
fn node_state(node: &Netns, pod: &Netns, bridge: &str) -> Value {
    let veths = links_of_kind(node, "veth");
    assert_eq!(veths.len(), 1, "{veths:?}");
    let port = node.link(&veths[0]).unwrap();
    let eth0 = pod.link("eth0").unwrap();
    let routes = |args: &[&str]| {
        let mut v = pod.ip_json(args);
        for r in v.as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("expires");
        }
        v
    };
    json!({
        "bridge_addrs": global_addrs(node, bridge),
        "bridge_mtu": node.link(bridge).unwrap()["mtu"],
        "bridge_up": node.link_is_up(bridge),
        "veth_mtu": port["mtu"],
        "veth_master": port["master"],
        "hairpin": port["linkinfo"]["info_slave_data"]["hairpin"],
        "pod_mtu": eth0["mtu"],
        "pod_up": pod.link_is_up("eth0"),
        "pod_addrs": global_addrs(pod, "eth0"),
        "pod_routes4": routes(&["route", "show"]),
        "pod_routes6": routes(&["-6", "route", "show"]),
        "ip_forward": sysctl(node, "net/ipv4/ip_forward"),
        "ipv6_forwarding": sysctl(node, "net/ipv6/conf/all/forwarding"),
        "bridge_accept_ra": sysctl(node, &format!("net/ipv6/conf/{bridge}/accept_ra")),
        "veth_accept_ra": sysctl(node, &format!("net/ipv6/conf/{}/accept_ra", veths[0])),
        "pod_accept_dad": sysctl(pod, "net/ipv6/conf/eth0/accept_dad"),
        "pod_arp_notify": sysctl(pod, "net/ipv4/conf/eth0/arp_notify"),
        "pod_disable_ipv6": sysctl(pod, "net/ipv6/conf/eth0/disable_ipv6"),
    })
}

/// The result without what is random (MACs, the veth name, the netns path).
fn normalized(mut r: Value) -> Value {
    for i in r["interfaces"].as_array_mut().unwrap() {
        let o = i.as_object_mut().unwrap();
        o.remove("mtu"); // the Go 1.1.1 reference predates interfaces[].mtu
        assert!(is_mac(&o["mac"]), "{o:?}");
        o.insert("mac".into(), json!("<mac>"));
        if o["name"].as_str().unwrap().starts_with("veth") {
            o.insert("name".into(), json!("<veth>"));
        }
        if o.contains_key("sandbox") {
            o.insert("sandbox".into(), json!("<netns>"));
        }
    }
    r
}

#[test]
fn same_node_state_as_the_go_reference() {
    if !require_root("same_node_state_as_the_go_reference") {
        return;
    }
    let (Some(go_bridge), Some(_)) = (go_plugin("bridge"), go_plugin("host-local")) else {
        return;
    };
    let ours = Net::new("br-ours");
    let go_node = Node::new("br-go");
    let go_data = TempDir::new("data-br-go");
    let (pod_ours, pod_go) = (Netns::new("pod-ours"), Netns::new("pod-go"));
    let conf_for = |data: &Path| {
        json!({
            // The Go 1.1.1 reference speaks up to 1.0.0.
            "cniVersion": "1.0.0", "name": "cmp", "type": "bridge",
            "bridge": "cmp0", "isGateway": true, "isDefaultGateway": true,
            "mtu": 1450, "hairpinMode": true,
            "ipam": {"type": "host-local", "dataDir": data,
                     "ranges": [[{"subnet": "10.77.0.0/24"}], [{"subnet": "fd77::/64"}]],
                     "routes": [{"dst": "192.0.2.0/24"}]}
        })
    };
    let go_call = |cmd: &str, conf: &Value| {
        let netns = pod_go.path().display().to_string();
        call_plugin(
            Some(&go_node.ns),
            &go_bridge,
            &[
                ("CNI_COMMAND", cmd),
                ("CNI_CONTAINERID", "ctr-cmp"),
                ("CNI_NETNS", &netns),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", GO_PLUGIN_DIR),
            ],
            &conf.to_string(),
        )
    };
    let conf_go = conf_for(go_data.path());
    let out = go_call("ADD", &conf_go);
    assert_eq!(out.exit_code, 0, "Go ADD: {out:?}");
    let go_result = out.json();
    let conf_ours = conf_for(ours.data.path());
    let our_result = ours.add(&pod_ours, "ctr-cmp", &conf_ours);

    assert_eq!(normalized(our_result.clone()), normalized(go_result));
    assert_eq!(
        our_result["routes"],
        json!([{"dst": "192.0.2.0/24"}, {"dst": "0.0.0.0/0", "gw": "10.77.0.1"}, {"dst": "::/0", "gw": "fd77::1"}])
    );
    let ours_state = node_state(&ours.node.ns, &pod_ours, "cmp0");
    let go_state = node_state(&go_node.ns, &pod_go, "cmp0");
    assert_eq!(ours_state, go_state);
    // And what the state is, so the comparison cannot pass on two empty sides.
    assert_eq!(
        ours_state["bridge_addrs"],
        json!(["10.77.0.1/24", "fd77::1/64"])
    );
    assert_eq!(
        ours_state["pod_addrs"],
        json!(["10.77.0.2/24", "fd77::2/64"])
    );
    assert_eq!(
        (&ours_state["bridge_mtu"], &ours_state["pod_mtu"]),
        (&json!(1450), &json!(1450))
    );
    assert_eq!(ours_state["hairpin"], true);
    assert_eq!(ours_state["ip_forward"], "1");
    assert_eq!(ours_state["pod_routes4"][0]["dst"], "default");
    assert_eq!(ours_state["pod_routes4"][0]["gateway"], "10.77.0.1");

    // DEL: both leave the bridge, remove the pair and the lease.
    assert_eq!(go_call("DEL", &conf_go).exit_code, 0);
    ours.del(Some(&pod_ours), "ctr-cmp", &conf_ours);
    for (node, pod) in [(&go_node.ns, &pod_go), (&ours.node.ns, &pod_ours)] {
        assert_eq!(links_of_kind(node, "veth"), Vec::<String>::new());
        assert_eq!(links_of_kind(node, "bridge"), ["cmp0"]);
        assert!(pod.link("eth0").is_none());
    }
    assert_eq!(ours.leases("cmp"), Vec::<String>::new());
}

/// Whether this kernel lets a bridge filter VLANs (probed in `ns`).
fn kernel_has_bridge_vlan_filtering(ns: &Netns) -> bool {
    let ok = ns
        .command("ip")
        .args([
            "link",
            "add",
            "vlanprobe0",
            "type",
            "bridge",
            "vlan_filtering",
            "1",
        ])
        .output()
        .expect("ip")
        .status
        .success();
    if ok {
        run_ok(ns.command("ip").args(["link", "del", "vlanprobe0"]));
    }
    ok
}

#[test]
fn vlans_fail_clearly_on_this_kernel_and_leave_nothing() {
    if !require_root("vlans_fail_clearly_on_this_kernel_and_leave_nothing") {
        return;
    }
    let net = Net::new("br-vlan");
    let pod = Netns::new("pod-vlan");
    if kernel_has_bridge_vlan_filtering(&net.node.ns) {
        // A kernel that can: the port carries VLAN 100 as PVID, untagged.
        let conf = net.conf("vlan", json!({"vlan": 100}));
        let r = net.add(&pod, "ctr-v", &conf);
        let veth = host_veth_of(&net, &r);
        let out = run_ok(
            net.node
                .ns
                .command("bridge")
                .args(["-j", "vlan", "show", "dev", &veth]),
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let vlans = &v[0]["vlans"];
        assert_eq!(
            vlans,
            &json!([{"vlan": 100, "flags": ["PVID", "Egress Untagged"]}]),
            "{v}"
        );
        return;
    }
    eprintln!("note: this kernel has no bridge VLAN filtering: asserting the clear error");
    for (extra, key, value) in [
        (json!({"vlan": 100}), "vlan", "100"),
        (
            json!({"vlanTrunk": [{"id": 5}, {"minID": 10, "maxID": 12}]}),
            "vlanTrunk",
            "[5, 10-12]",
        ),
        // The native VLAN of a trunk (v1.8+): named by `vlan`.
        (json!({"vlan": 3, "vlanTrunk": [{"id": 4}]}), "vlan", "3"),
    ] {
        let conf = net.conf("vlan", extra);
        let out = net.call("ADD", Some(&pod), "ctr-v", &conf);
        out.assert_error(
            2,
            &format!(
                "unsupported field \"{key}\": {value}: this kernel has no bridge VLAN filtering"
            ),
        );
        // Nothing created: no bridge, no veth, no pod interface, no lease.
        assert_eq!(links_of_kind(&net.node.ns, "bridge"), Vec::<String>::new());
        assert_eq!(net.veths(), Vec::<String>::new());
        assert!(pod.link("eth0").is_none());
        assert_eq!(net.leases("vlan"), Vec::<String>::new());
    }

    // With the bridge already there (made by a plain ADD), the same: refused
    // before anything is touched, the bridge unchanged.
    let plain = net.conf("vlan", json!({}));
    let other = Netns::new("pod-plain");
    net.add(&other, "ctr-plain", &plain);
    let before = net.node.ns.link("cni0").unwrap();
    let out = net.call(
        "ADD",
        Some(&pod),
        "ctr-v",
        &net.conf("vlan", json!({"vlan": 7})),
    );
    out.assert_error(
        2,
        "unsupported field \"vlan\": 7: this kernel has no bridge VLAN filtering",
    );
    assert_eq!(net.veths().len(), 1);
    assert!(pod.link("eth0").is_none());
    assert_eq!(net.leases("vlan"), ["10.88.0.2", "fd88::2"]);
    let after = net.node.ns.link("cni0").unwrap();
    assert_eq!(after["linkinfo"]["info_data"]["vlan_filtering"], 0);
    assert_eq!(before["address"], after["address"]);
}

#[test]
fn a_failing_ipam_plugin_leaves_nothing() {
    if !require_root("a_failing_ipam_plugin_leaves_nothing") {
        return;
    }
    let net = Net::new("br-ipamfail");
    let log = net.path.path().join("ipam.log");
    net.script(
        "failing-ipam",
        &format!(
            "cat >/dev/null; echo \"$CNI_COMMAND\" >> {}\n\
             [ \"$CNI_COMMAND\" = ADD ] || exit 0\n\
             echo '{{\"code\":11,\"msg\":\"no addresses left, try later\"}}'; exit 1",
            log.display()
        ),
    );
    let pod = Netns::new("pod-ipamfail");
    let mut conf = net.conf("ipamfail", json!({}));
    conf["ipam"] = json!({"type": "failing-ipam"});
    let out = net.call("ADD", Some(&pod), "ctr-f", &conf);
    out.assert_error(11, "no addresses left, try later");
    assert!(pod.link("eth0").is_none());
    assert_eq!(net.veths(), Vec::<String>::new());
    // The failed delegate ADD was DELed, as the spec asks.
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ADD\nDEL\n");
}

#[test]
fn an_exhausted_range_leaves_nothing() {
    if !require_root("an_exhausted_range_leaves_nothing") {
        return;
    }
    let net = Net::new("br-full");
    let mut conf = net.conf("full", json!({"isGateway": true}));
    conf["ipam"]["ranges"] =
        json!([[{"subnet": "10.90.0.0/24", "rangeStart": "10.90.0.2", "rangeEnd": "10.90.0.2"}]]);
    let (a, b) = (Netns::new("pod-full-a"), Netns::new("pod-full-b"));
    net.add(&a, "ctr-a", &conf);
    let out = net.call("ADD", Some(&b), "ctr-b", &conf);
    assert_ne!(out.exit_code, 0, "{out:?}");
    assert!(
        out.json()["msg"].as_str().unwrap().contains("10.90.0.2"),
        "{out:?}"
    );
    assert!(b.link("eth0").is_none());
    assert_eq!(net.veths().len(), 1, "only pod a's pair is left");
    assert_eq!(net.leases("full"), ["10.90.0.2"]);
    let lease = std::fs::read_to_string(net.data.path().join("full/10.90.0.2")).unwrap();
    assert!(lease.starts_with("ctr-a"), "{lease:?}");
}

#[test]
fn a_failure_after_ipam_releases_the_address() {
    if !require_root("a_failure_after_ipam_releases_the_address") {
        return;
    }
    let net = Net::new("br-after");
    let pod = Netns::new("pod-after");
    // A route through a gateway that is not on the pod's link: the kernel
    // refuses it while the pod is configured, after IPAM allocated.
    let mut conf = net.conf("after", json!({}));
    conf["ipam"]["routes"] = json!([{"dst": "10.99.0.0/16", "gw": "192.0.2.1"}]);
    let out = net.call("ADD", Some(&pod), "ctr-x", &conf);
    out.assert_error(100, "add route 10.99.0.0/16 via 192.0.2.1");
    assert!(pod.link("eth0").is_none());
    assert_eq!(net.veths(), Vec::<String>::new());
    assert_eq!(net.leases("after"), Vec::<String>::new());
}

#[test]
fn a_different_gateway_needs_force_address() {
    if !require_root("a_different_gateway_needs_force_address") {
        return;
    }
    let net = Net::new("br-force");
    let first = net.conf("force", json!({"isGateway": true}));
    let (a, b) = (Netns::new("pod-force-a"), Netns::new("pod-force-b"));
    net.add(&a, "ctr-a", &first);
    // Another subnet on the same bridge: refused at the gateway step, and
    // rolled back (pair removed, lease released).
    let mut second = net.conf("force2", json!({"isGateway": true}));
    second["ipam"]["ranges"] = json!([[{"subnet": "10.91.0.0/24"}]]);
    let out = net.call("ADD", Some(&b), "ctr-b", &second);
    out.assert_error(
        7,
        "forceAddress: \"cni0\" already has an IP address different from 10.91.0.1/24 (10.88.0.1/24)",
    );
    assert!(b.link("eth0").is_none());
    assert_eq!(net.veths().len(), 1);
    assert_eq!(net.leases("force2"), Vec::<String>::new());
    assert_eq!(
        global_addrs(&net.node.ns, "cni0"),
        ["10.88.0.1/24", "fd88::1/64"]
    );
    // With forceAddress the IPv4 address is replaced; the IPv6 one, which
    // does not overlap, stays.
    second["forceAddress"] = json!(true);
    net.add(&b, "ctr-b", &second);
    assert_eq!(
        global_addrs(&net.node.ns, "cni0"),
        ["10.91.0.1/24", "fd88::1/64"]
    );
    assert_ping(&b, "10.91.0.1");
}

#[test]
fn a_crash_at_any_step_is_cleaned_up_by_del() {
    if !require_root("a_crash_at_any_step_is_cleaned_up_by_del") {
        return;
    }
    let net = Net::new("br-crash");
    let conf = net.conf("crash", json!({"isGateway": true}));
    for point in ["veth", "attach", "ipam", "configure", "gateway"] {
        let pod = Netns::new(&format!("pod-crash-{point}"));
        let fault = format!("bridge/{point}");
        let out = net.call_env(
            "ADD",
            Some(&pod),
            "ctr-c",
            &conf,
            &[("CNI_FAULT_POINT", &fault)],
        );
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (-1, ""),
            "{fault}: {out:?}"
        );
        assert!(
            pod.link("eth0").is_some(),
            "{fault}: the pair exists when killed"
        );
        net.del(Some(&pod), "ctr-c", &conf);
        assert!(pod.link("eth0").is_none(), "{fault}");
        assert_eq!(net.veths(), Vec::<String>::new(), "{fault}");
        assert_eq!(net.leases("crash"), Vec::<String>::new(), "{fault}");
    }
}

#[test]
fn del_after_the_namespace_is_gone_and_del_twice() {
    if !require_root("del_after_the_namespace_is_gone_and_del_twice") {
        return;
    }
    let net = Net::new("br-del");
    let conf = net.conf("del", json!({}));
    let pod = Netns::new("pod-del");
    let path = pod.path();
    net.add(&pod, "ctr-d", &conf);
    assert_eq!(net.leases("del"), ["10.88.0.2", "fd88::2"]);
    drop(pod); // the runtime removed the namespace first
    assert!(!path.exists());
    let netns = path.display().to_string();
    let path_dir = net.path.path().display().to_string();
    let env = [
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "ctr-d"),
        ("CNI_NETNS", netns.as_str()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", path_dir.as_str()),
    ];
    for _ in 0..2 {
        let out = call_plugin(Some(&net.node.ns), &bin("bridge"), &env, &conf.to_string());
        out.assert_silent_ok();
        assert_eq!(net.leases("del"), Vec::<String>::new());
    }
    // The kernel removes the pair with the namespace, asynchronously.
    wait_for("the host veth to go with the namespace", || {
        net.veths().is_empty()
    });

    // DEL with an empty CNI_NETNS, and DEL of an ADD that never happened.
    let pod2 = Netns::new("pod-del2");
    net.add(&pod2, "ctr-e", &conf);
    net.del(None, "ctr-e", &conf);
    assert_eq!(net.leases("del"), Vec::<String>::new());
    // Unlike the Go plugin's, the veth goes too, found by its owner alias:
    // the namespace outlives the runtime's record, and its eth0 would keep
    // the address just released.
    assert!(
        pod2.link("eth0").is_none(),
        "without a netns the veth its alias names goes with the lease"
    );
    assert_eq!(net.veths(), Vec::<String>::new());
    net.del(Some(&pod2), "ctr-e", &conf);
    net.del(Some(&pod2), "never-added", &conf);

    // CNI_NETNS naming the node itself: its own eth0 is not touched.
    net.node.ns.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
    ]);
    net.call("DEL", Some(&net.node.ns), "ctr-f", &conf)
        .assert_error(4, "is the plugin's own network namespace");
    assert!(net.node.ns.link("eth0").is_some());
}

fn with_prev(conf: &Value, result: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = result.clone();
    c
}

#[test]
fn check_fails_once_the_container_address_is_deleted() {
    if !require_root("check_fails_once_the_container_address_is_deleted") {
        return;
    }
    let net = Net::new("br-check");
    let pod = Netns::new("pod-check");
    let conf = net.conf(
        "check",
        json!({"isGateway": true, "isDefaultGateway": true}),
    );
    let r = net.add(&pod, "ctr-k", &conf);
    let checked = with_prev(&conf, &r);
    let out = net.call("CHECK", Some(&pod), "ctr-k", &checked);
    out.assert_silent_ok();

    // CHECK without prevResult is a config error.
    net.call("CHECK", Some(&pod), "ctr-k", &conf)
        .assert_error(7, "prevResult");

    // The hairpin flag turned on by hand: the port differs from the config.
    let veth = host_veth_of(&net, &r);
    run_ok(net.node.ns.command("ip").args([
        "link",
        "set",
        &veth,
        "type",
        "bridge_slave",
        "hairpin",
        "on",
    ]));
    net.call("CHECK", Some(&pod), "ctr-k", &checked)
        .assert_error(
            102,
            &format!("bridge port \"{veth}\" hairpin mode is true, hairpinMode is false"),
        );
    run_ok(net.node.ns.command("ip").args([
        "link",
        "set",
        &veth,
        "type",
        "bridge_slave",
        "hairpin",
        "off",
    ]));
    assert_eq!(
        net.call("CHECK", Some(&pod), "ctr-k", &checked).exit_code,
        0
    );

    // Someone deletes the container's address.
    pod.ip(&["addr", "del", "10.88.0.2/24", "dev", "eth0"]);
    net.call("CHECK", Some(&pod), "ctr-k", &checked)
        .assert_error(102, "address 10.88.0.2/24 not found on \"eth0\"");

    // A MAC that is not the container's.
    let pod2 = Netns::new("pod-check2");
    let r2 = net.add(&pod2, "ctr-k2", &conf);
    let mut wrong = r2.clone();
    wrong["interfaces"][2]["mac"] = json!("02:00:00:00:00:99");
    net.call("CHECK", Some(&pod2), "ctr-k2", &with_prev(&conf, &wrong))
        .assert_error(102, "prevResult says 02:00:00:00:00:99");
    // A route that is not there.
    let mut wrong = r2.clone();
    wrong["routes"] = json!([{"dst": "10.123.0.0/16", "gw": "10.88.0.1"}]);
    net.call("CHECK", Some(&pod2), "ctr-k2", &with_prev(&conf, &wrong))
        .assert_error(102, "route 10.123.0.0/16 via 10.88.0.1 not found");
    // And IPAM's CHECK is asked first: host-local no longer holds the lease.
    let lease = net.data.path().join("check/10.88.0.3");
    std::fs::remove_file(&lease).unwrap();
    let out = net.call("CHECK", Some(&pod2), "ctr-k2", &with_prev(&conf, &r2));
    assert_ne!(out.exit_code, 0, "{out:?}");
}

#[test]
fn concurrent_adds_create_the_bridge_once() {
    if !require_root("concurrent_adds_create_the_bridge_once") {
        return;
    }
    // Round 0 is dual-stack (both ADDs add and wait for the IPv6 gateway);
    // the others race on IPv4 only, which is quicker.
    for round in 0..4 {
        let net = Net::new(&format!("br-race{round}"));
        let mut conf = net.conf("race", json!({"isGateway": true}));
        if round > 0 {
            conf["ipam"]["ranges"] = json!([[{"subnet": "10.88.0.0/24"}]]);
        }
        let pods: Vec<Netns> = (0..2)
            .map(|i| Netns::new(&format!("pod-race{i}")))
            .collect();
        let outs: Vec<PluginOutput> = std::thread::scope(|s| {
            let handles: Vec<_> = pods
                .iter()
                .enumerate()
                .map(|(i, pod)| {
                    let (net, conf) = (&net, &conf);
                    s.spawn(move || net.call("ADD", Some(pod), &format!("ctr-{i}"), conf))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for o in &outs {
            assert_eq!(o.exit_code, 0, "round {round}: {o:?}");
        }
        assert_eq!(links_of_kind(&net.node.ns, "bridge"), ["cni0"]);
        let want: &[&str] = if round == 0 {
            &["10.88.0.1/24", "fd88::1/64"]
        } else {
            &["10.88.0.1/24"]
        };
        assert_eq!(global_addrs(&net.node.ns, "cni0"), want);
        assert_eq!(net.veths().len(), 2);
        assert_ping(&pods[0], "10.88.0.1");
        let other = outs[1].json()["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        assert_ping(&pods[0], &other);
    }
}

#[test]
fn invalid_configs_are_rejected_by_key_before_anything_is_touched() {
    if !require_root("invalid_configs_are_rejected_by_key_before_anything_is_touched") {
        return;
    }
    let net = Net::new("br-invalid");
    let pod = Netns::new("pod-invalid");
    let cases = [
        (
            json!({"hairpinMode": true, "promiscMode": true}),
            7,
            "hairpinMode, promiscMode: cannot both be true",
        ),
        (
            json!({"disableContainerInterface": true}),
            7,
            "ipam, disableContainerInterface:",
        ),
        (
            json!({"vlan": 4095}),
            7,
            "vlan: invalid VLAN ID 4095 (must be between 0 and 4094)",
        ),
        (json!({"vlan": -1}), 7, "vlan: invalid VLAN ID -1"),
        (
            json!({"vlanTrunk": [{"minID": 20, "maxID": 10}]}),
            7,
            "vlanTrunk[0]: minID 20 is greater than maxID 10",
        ),
        (
            json!({"vlanTrunk": [{"minID": 20}]}),
            7,
            "vlanTrunk[0].maxID: missing",
        ),
        (
            json!({"ipam": {}, "ipMasq": true}),
            7,
            "ipam, ipMasq: masquerading needs the container addresses an IPAM plugin gives",
        ),
        (
            json!({"ipMasqBackend": "ipfw"}),
            7,
            "ipMasqBackend: unknown backend \"ipfw\" (expected \"nftables\" or \"iptables\")",
        ),
        (json!({"ipMasq": 1}), 7, "ipMasq: invalid type"),
        (
            json!({"macspoofchk": "true"}),
            7,
            "macspoofchk: invalid type",
        ),
        (json!({"mtu": 20}), 7, "mtu: 20 is out of range"),
        (json!({"mtu": "1400"}), 7, "mtu: invalid type"),
        (
            json!({"bridge": "a-very-long-bridge-name"}),
            7,
            "bridge: interface name",
        ),
        (
            json!({"runtimeConfig": {"mac": "01:00:5e:00:00:01"}}),
            7,
            "runtimeConfig.mac: \"01:00:5e:00:00:01\" is a multicast address",
        ),
        (
            json!({"args": {"cni": {"mac": "nope"}}}),
            7,
            "args.cni.mac: \"nope\" is not a MAC address",
        ),
    ];
    for (extra, code, needle) in cases {
        let conf = net.conf("invalid", extra.clone());
        let out = net.call("ADD", Some(&pod), "ctr-i", &conf);
        out.assert_error(code, needle);
        assert!(
            out.json()["msg"]
                .as_str()
                .unwrap()
                .starts_with("invalid network config: "),
            "{out:?}"
        );
        assert_eq!(out.json()["cniVersion"], "1.1.0");
    }
    // CNI_ARGS: a bad MAC, and keys the plugin does not know, are code 4.
    let conf = net.conf("invalid", json!({}));
    net.call_env("ADD", Some(&pod), "ctr-i", &conf, &[("CNI_ARGS", "MAC=zz")])
        .assert_error(4, "CNI_ARGS MAC");
    net.call_env(
        "ADD",
        Some(&pod),
        "ctr-i",
        &conf,
        &[("CNI_ARGS", "FOO=bar")],
    )
    .assert_error(4, "FOO");
    // An existing link of the bridge's name that is not a bridge.
    net.node.ns.ip(&[
        "link", "add", "cni0", "type", "veth", "peer", "name", "cni0p",
    ]);
    net.call("ADD", Some(&pod), "ctr-i", &conf).assert_error(
        7,
        "bridge: \"cni0\" already exists but is not a bridge (it is a veth link)",
    );
    // An interface already in the pod under CNI_IFNAME.
    pod.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
    ]);
    net.call(
        "ADD",
        Some(&pod),
        "ctr-i",
        &net.conf("invalid", json!({"bridge": "br-ok"})),
    )
    .assert_error(100, "CNI_IFNAME \"eth0\" already exists");
    // Nothing was created by any of them.
    assert_eq!(links_of_kind(&net.node.ns, "bridge"), Vec::<String>::new());
    assert_eq!(net.veths(), ["cni0", "cni0p"]);
    assert_eq!(net.leases("invalid"), Vec::<String>::new());
    // DEL of a config ADD rejects still succeeds (runtimes DEL failed ADDs).
    net.del(
        Some(&pod),
        "ctr-i",
        &net.conf(
            "invalid",
            json!({"ipMasq": true, "macspoofchk": true, "ipMasqBackend": "ipfw", "vlan": 9999}),
        ),
    );
}

#[test]
fn layer2_only_mac_and_disabled_container_interface() {
    if !require_root("layer2_only_mac_and_disabled_container_interface") {
        return;
    }
    let net = Net::new("br-l2");
    let pod = Netns::new("pod-l2");
    let mut conf = net.conf(
        "l2",
        json!({"runtimeConfig": {"mac": "0a:58:0a:58:00:09"},
                                          "args": {"cni": {"mac": "0a:58:0a:58:00:08"}}}),
    );
    conf["ipam"] = json!({});
    let out = net.call_env(
        "ADD",
        Some(&pod),
        "ctr-l2",
        &conf,
        &[(
            "CNI_ARGS",
            "IgnoreUnknown=1;MAC=0a:58:0a:58:00:07;K8S_POD_NAME=x",
        )],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    let r = out.json();
    assert!(r.get("ips").is_none(), "{r}");
    assert_eq!(r["interfaces"][2]["mac"], "0a:58:0a:58:00:09");
    let eth0 = pod.link("eth0").unwrap();
    assert_eq!(eth0["address"], "0a:58:0a:58:00:09");
    assert!(pod.link_is_up("eth0"));
    assert_eq!(global_addrs(&pod, "eth0"), Vec::<String>::new());
    assert_eq!(global_addrs(&net.node.ns, "cni0"), Vec::<String>::new());
    net.del(Some(&pod), "ctr-l2", &conf);

    let pod2 = Netns::new("pod-l2-down");
    conf["disableContainerInterface"] = json!(true);
    let out = net.call_env(
        "ADD",
        Some(&pod2),
        "ctr-l2b",
        &conf,
        &[("CNI_ARGS", "MAC=0a:58:0a:58:00:07")],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(!pod2.link_is_up("eth0"));
    assert_eq!(pod2.link("eth0").unwrap()["address"], "0a:58:0a:58:00:09");
}

#[test]
fn dns_from_the_config_replaces_ipams() {
    if !require_root("dns_from_the_config_replaces_ipams") {
        return;
    }
    let net = Net::new("br-dns");
    let pod = Netns::new("pod-dns");
    let conf = net.conf(
        "dns",
        json!({"dns": {"nameservers": ["10.88.0.53"], "search": ["svc.local"]}}),
    );
    let r = net.add(&pod, "ctr-dns", &conf);
    assert_eq!(
        r["dns"],
        json!({"nameservers": ["10.88.0.53"], "search": ["svc.local"]})
    );
}

#[test]
fn status_and_gc_go_to_ipam_with_the_same_stdin() {
    if !require_root("status_and_gc_go_to_ipam_with_the_same_stdin") {
        return;
    }
    let net = Net::new("br-gc");
    let dir = net.path.path().display().to_string();
    net.script(
        "recording-ipam",
        &format!("cat > {dir}/$CNI_COMMAND.stdin; exit 0"),
    );
    let mut conf = net.conf("gc", json!({}));
    conf["ipam"] = json!({"type": "recording-ipam"});
    conf["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
    let path = dir.clone();
    for verb in ["GC", "STATUS"] {
        let out = call_plugin(
            Some(&net.node.ns),
            &bin("bridge"),
            &[("CNI_COMMAND", verb), ("CNI_PATH", path.as_str())],
            &conf.to_string(),
        );
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (0, ""),
            "{verb}: {out:?}"
        );
        let got = std::fs::read_to_string(net.path.path().join(format!("{verb}.stdin"))).unwrap();
        assert_eq!(got, conf.to_string(), "{verb}");
    }
    // An IPAM error keeps its code.
    net.script(
        "recording-ipam",
        "cat >/dev/null; echo '{\"code\":50,\"msg\":\"pool offline\"}'; exit 1",
    );
    let out = call_plugin(
        Some(&net.node.ns),
        &bin("bridge"),
        &[("CNI_COMMAND", "STATUS"), ("CNI_PATH", path.as_str())],
        &conf.to_string(),
    );
    out.assert_error(50, "pool offline");
}

#[test]
fn cnitool_add_check_del_a_bridge_conflist() {
    if !require_root("cnitool_add_check_del_a_bridge_conflist") {
        return;
    }
    let net = Net::new("br-cnitool");
    let pod = Netns::new("pod-cnitool");
    let conflist = json!({
        "cniVersion": "1.1.0", "name": "podnet",
        "plugins": [net.conf("podnet", json!({"isDefaultGateway": true}))]
    });
    net.node.write_conf("10-podnet.conflist", &conflist);
    let out = net.node.cnitool("add", "podnet", &pod);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let r = out.json();
    assert_eq!(r["ips"][0]["address"], "10.88.0.2/24");
    assert_eq!(
        r["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.88.0.1"}, {"dst": "::/0", "gw": "fd88::1"}])
    );
    assert_ping(&pod, "10.88.0.1");
    let out = net.node.cnitool("check", "podnet", &pod);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let out = net.node.cnitool("del", "podnet", &pod);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(pod.link("eth0").is_none());
    assert_eq!(net.leases("podnet"), Vec::<String>::new());
}

/// The MAC of link `name` in `ns`.
fn mac_of(ns: &Netns, name: &str) -> String {
    ns.link(name).expect("link")["address"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn the_bridge_keeps_its_own_mac_across_add_and_del() {
    if !require_root("the_bridge_keeps_its_own_mac_across_add_and_del") {
        return;
    }
    // An existing bridge whose MAC was never pinned, as a node's cni0 after
    // a reboot or one made by hand: the gateway must not take a port's MAC
    // (every pod's ARP entry for it would go stale when that pod leaves).
    let net = Net::new("br-mac");
    net.node.ns.ip(&["link", "add", "cni0", "type", "bridge"]);
    let before = mac_of(&net.node.ns, "cni0");
    let conf = net.conf("mac", json!({"isGateway": true}));
    let pod = Netns::new("pod-mac");
    let r = net.add(&pod, "ctr-mac", &conf);
    assert_eq!(mac_of(&net.node.ns, "cni0"), before, "after ADD");
    assert_eq!(r["interfaces"][0]["mac"], before.as_str(), "{r}");
    let veth = host_veth_of(&net, &r);
    assert_ne!(mac_of(&net.node.ns, &veth), before);
    net.del(Some(&pod), "ctr-mac", &conf);
    assert_eq!(mac_of(&net.node.ns, "cni0"), before, "after DEL");
    // A second pod, and the first back: the address stays the bridge's.
    let (a, b) = (Netns::new("pod-mac-a"), Netns::new("pod-mac-b"));
    net.add(&a, "ctr-a", &conf);
    net.add(&b, "ctr-b", &conf);
    net.del(Some(&a), "ctr-a", &conf);
    assert_eq!(mac_of(&net.node.ns, "cni0"), before);
    assert_ping(&b, "10.88.0.1");
}

#[test]
fn a_bridge_whose_ports_all_left_unpinned_gets_pinned() {
    if !require_root("a_bridge_whose_ports_all_left_unpinned_gets_pinned") {
        return;
    }
    // The kernel gives a bridge without ports the zero address; Go's
    // plugin then fails setting it. Ours pins what the first port gave.
    let net = Net::new("br-zero");
    net.node.ns.ip(&["link", "add", "cni0", "type", "bridge"]);
    net.node
        .ns
        .ip(&["link", "add", "tmp0", "type", "veth", "peer", "tmp1"]);
    net.node.ns.ip(&["link", "set", "tmp0", "master", "cni0"]);
    net.node.ns.ip(&["link", "del", "tmp0"]);
    assert_eq!(mac_of(&net.node.ns, "cni0"), "00:00:00:00:00:00");
    let conf = net.conf("zero", json!({"isGateway": true}));
    let pod = Netns::new("pod-zero");
    let r = net.add(&pod, "ctr-zero", &conf);
    let pinned = mac_of(&net.node.ns, "cni0");
    assert_ne!(pinned, "00:00:00:00:00:00");
    assert_eq!(r["interfaces"][0]["mac"], pinned.as_str());
    net.del(Some(&pod), "ctr-zero", &conf);
    assert_eq!(
        mac_of(&net.node.ns, "cni0"),
        pinned,
        "pinned: kept after DEL"
    );
}

#[test]
fn a_failed_add_deletes_the_bridge_it_created_unless_another_pod_uses_it() {
    if !require_root("a_failed_add_deletes_the_bridge_it_created_unless_another_pod_uses_it") {
        return;
    }
    let net = Net::new("br-made");
    // IPAM refuses each config after the bridge was made: nothing is left,
    // the new bridge included.
    for (what, ranges) in [
        (
            "a subnet that is not one",
            json!([[{"subnet": "10.88.0.0/33"}]]),
        ),
        (
            "rangeStart after rangeEnd",
            json!([[{"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.9", "rangeEnd": "10.88.0.3"}]]),
        ),
        (
            "a gateway outside the subnet",
            json!([[{"subnet": "10.88.0.0/24", "gateway": "10.99.0.1"}]]),
        ),
    ] {
        let mut conf = net.conf("made", json!({"isGateway": true}));
        conf["ipam"]["ranges"] = ranges;
        let before = NetSnapshot::take(&net.node.ns);
        let pod = Netns::new("pod-made");
        let out = net.call("ADD", Some(&pod), "ctr-made", &conf);
        assert_eq!(out.json()["code"], 7, "{what}: {out:?}");
        assert!(net.node.ns.link("cni0").is_none(), "{what}: cni0 left");
        assert_eq!(
            before.diff(&NetSnapshot::take(&net.node.ns)),
            Vec::<String>::new(),
            "{what}"
        );
    }
    // A bridge another pod is on stays.
    let good = net.conf("made", json!({"isGateway": true}));
    let a = Netns::new("pod-made-a");
    net.add(&a, "ctr-a", &good);
    let mut bad = good.clone();
    bad["ipam"]["ranges"] = json!([[{"subnet": "10.88.0.0/33"}]]);
    let b = Netns::new("pod-made-b");
    let out = net.call("ADD", Some(&b), "ctr-b", &bad);
    assert_eq!(out.json()["code"], 7, "{out:?}");
    assert!(net.node.ns.link("cni0").is_some());
    assert_ping(&a, "10.88.0.1");
    // A bridge that was there before a failed ADD stays too.
    net.del(Some(&a), "ctr-a", &good);
    let out = net.call("ADD", Some(&b), "ctr-b", &bad);
    assert_eq!(out.json()["code"], 7, "{out:?}");
    assert!(net.node.ns.link("cni0").is_some());
}
