//! What needs a kernel these machines lack (802.1Q VLAN, ipvlan, dummy and
//! VRF links, bridge VLAN filtering): vlan, ipvlan (l2, l3, l3s), dummy and
//! vrf, and the bridge's VLANs, with real traffic between throwaway pod
//! namespaces, side by side with Debian's Go 1.1.1 plugins, through
//! go-cni-cri, go-cnitool and our cnitool.
//!
//! Every test is named `fullkernel_*`: `scripts/test.sh` runs them in one
//! VM with Debian's full kernel (`scripts/fullkernel.sh`); on a kernel
//! without the support they say so and return (`tests::full_kernel`).
//! Inside the VM the usual rules hold: a node namespace plays the host,
//! pods and "upstream" namespaces beside it, nothing outside is touched.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tests::*;

// ---- helpers -------------------------------------------------------------------

/// One plugin call in `node` for `ifname` of `pod`, with `CNI_PATH`
/// `cni_path` (our bin dir, or Go's `/usr/lib/cni`).
#[allow(clippy::too_many_arguments)]
fn call(
    node: &Netns,
    plugin: &Path,
    cni_path: &Path,
    cmd: &str,
    pod: Option<&Netns>,
    cid: &str,
    ifname: &str,
    conf: &Value,
) -> PluginOutput {
    let netns = pod
        .map(|p| p.path().display().to_string())
        .unwrap_or_default();
    let cni_path = cni_path.display().to_string();
    call_plugin_entered(
        node,
        plugin,
        &[
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", &netns),
            ("CNI_IFNAME", ifname),
            ("CNI_PATH", &cni_path),
        ],
        &conf.to_string(),
    )
}

/// `program args` in `ns`, started from a thread inside it (one exec; see
/// `Netns::output_in`).
fn exec_in(ns: &Netns, program: &str, args: &[&str]) -> std::process::Output {
    ns.output_in(std::process::Command::new(program).args(args))
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

/// Ours, with our `CNI_PATH`.
fn ours(
    node: &Netns,
    cmd: &str,
    pod: Option<&Netns>,
    cid: &str,
    ifname: &str,
    conf: &Value,
) -> PluginOutput {
    let plugin = conf["type"].as_str().expect("type");
    call(node, &bin(plugin), &bin_dir(), cmd, pod, cid, ifname, conf)
}

/// Go 1.1.1's, with Go's `CNI_PATH` (its host-local).
fn gos(
    node: &Netns,
    cmd: &str,
    pod: Option<&Netns>,
    cid: &str,
    ifname: &str,
    conf: &Value,
) -> Option<PluginOutput> {
    let plugin = conf["type"].as_str().expect("type");
    let p = go_plugin(plugin)?;
    Some(call(
        node,
        &p,
        Path::new(GO_PLUGIN_DIR),
        cmd,
        pod,
        cid,
        ifname,
        conf,
    ))
}

fn with_prev(conf: &Value, result: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = result.clone();
    c
}

/// A veth `name` in `a` whose peer `peer` is in `b`, both up, no IPv6
/// link-local address (it would come a moment later, mid-test).
fn wire(a: &Netns, name: &str, b: &Netns, peer: &str) {
    a.ip(&[
        "link",
        "add",
        name,
        "type",
        "veth",
        "peer",
        "name",
        peer,
        "netns",
        b.name(),
    ]);
    a.ip(&["link", "set", name, "addrgenmode", "none", "up"]);
    b.ip(&["link", "set", peer, "addrgenmode", "none", "up"]);
}

/// `ip -d -j link show dev` in `ns`.
fn link_of(ns: &Netns, dev: &str) -> Value {
    ns.link(dev)
        .unwrap_or_else(|| panic!("no {dev} in {}", ns.name()))
}

fn mac_of(ns: &Netns, dev: &str) -> Value {
    link_of(ns, dev)["address"].clone()
}

/// A runtime client: containerd's CRI path, Go's libcni, or our cnitool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Cri,
    GoCnitool,
    Cnitool,
}

fn tool_of(client: Client) -> Option<PathBuf> {
    match client {
        Client::Cri => go_cni_cri(),
        Client::GoCnitool => go_cnitool(),
        Client::Cnitool => Some(bin("cnitool")),
    }
}

/// `verb` (add, check, del) of container `id` in `pod` through `client`:
/// go-cni-cri runs the node's first conflist (after loopback), the others
/// the one named `net`.
fn run(client: Client, node: &Node, net: &str, verb: &str, pod: &Netns, id: &str) -> PluginOutput {
    let Some(tool) = tool_of(client) else {
        panic!("{client:?} is not installed");
    };
    let netns = pod.path().display().to_string();
    match client {
        Client::Cri => {
            let verb = match verb {
                "add" => "setup",
                "del" => "remove",
                v => v,
            };
            node.cri(&tool, verb, Some(pod), id, &[])
        }
        Client::GoCnitool => {
            node.go_cnitool(&tool, &[verb, net, &netns], &[("CNI_CONTAINERID", id)])
        }
        Client::Cnitool => {
            node.cnitool_with(&tool, &[verb, net, &netns], &[("CNI_CONTAINERID", id)])
        }
    }
}

fn run_ok(
    client: Client,
    node: &Node,
    net: &str,
    verb: &str,
    pod: &Netns,
    id: &str,
) -> PluginOutput {
    let out = run(client, node, net, verb, pod, id);
    assert_eq!(out.exit_code, 0, "{client:?} {verb} {net}: {out:?}");
    out
}

/// The links of `ns` but `lo`, as `name kind`.
fn pod_links(ns: &Netns) -> Vec<String> {
    let mut v: Vec<String> = ns
        .ip_json(&["-d", "link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["ifname"] != "lo")
        .map(|l| {
            format!(
                "{} {}",
                l["ifname"].as_str().unwrap(),
                l["linkinfo"]["info_kind"].as_str().unwrap_or("-")
            )
        })
        .collect();
    v.sort();
    v
}

/// A pod's state as both Go and ours leave it, for side-by-side
/// comparison: links (kind, MTU, VLAN ID, ipvlan mode, VRF table, master),
/// addresses but IPv6 link-local ones (they follow the random MACs), and
/// routes in every table. One process in the pod for all of it (each costs
/// much under emulation).
fn pod_state(ns: &Netns) -> Vec<String> {
    let out = exec_in(
        ns,
        "sh",
        &[
            "-c",
            "ip -d -j link show && echo && ip -j addr show && echo && \
             ip -4 -j route show table all && echo && ip -6 -j route show table all",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let parts: Vec<Value> = text
        .split("\n\n")
        .map(|p| serde_json::from_str(p.trim()).unwrap_or(json!([])))
        .collect();
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or("-").to_string();
    let mut v = Vec::new();
    for l in parts[0].as_array().into_iter().flatten() {
        let d = &l["linkinfo"]["info_data"];
        v.push(format!(
            "link {} {} mtu={} up={} id={} mode={} table={} master={}",
            s(l, "ifname"),
            l["linkinfo"]["info_kind"].as_str().unwrap_or("-"),
            l["mtu"],
            l["flags"]
                .as_array()
                .is_some_and(|f| f.contains(&json!("UP"))),
            d["id"],
            d["mode"],
            d["table"],
            s(l, "master")
        ));
    }
    for l in parts[1].as_array().into_iter().flatten() {
        for a in l["addr_info"].as_array().into_iter().flatten() {
            if !s(a, "local").starts_with("fe80:") {
                v.push(format!(
                    "addr {} {}/{}",
                    s(l, "ifname"),
                    s(a, "local"),
                    a["prefixlen"]
                ));
            }
        }
    }
    for r in parts[2..]
        .iter()
        .flat_map(|p| p.as_array().cloned().unwrap_or_default())
    {
        if r["table"] == "local" && s(&r, "dst").starts_with("fe80:") {
            continue;
        }
        v.push(format!(
            "route {} {} {} via={} dev={}",
            r["table"].as_str().unwrap_or("main"),
            r["type"].as_str().unwrap_or("unicast"),
            s(&r, "dst"),
            s(&r, "gateway"),
            s(&r, "dev")
        ));
    }
    v.sort();
    v
}

/// `r` with the fields that differ by construction between two pods
/// (the sandbox path; with `mac`, the MAC) blanked.
fn normalised(r: &Value, mac: bool) -> Value {
    let mut r = r.clone();
    if let Some(ifs) = r["interfaces"].as_array_mut() {
        for i in ifs {
            if i.get("sandbox").is_some() {
                i["sandbox"] = json!("<pod>");
            }
            if mac && i.get("mac").is_some() {
                i["mac"] = json!("<mac>");
            }
        }
    }
    r
}

// ---- vlan ----------------------------------------------------------------------

/// Two nodes on one switch (a plain bridge in its own namespace, which
/// carries tagged frames as they are), pods on VLAN 100 on both and one on
/// VLAN 200 in the same subnet: the VLAN 100 pods reach each other over
/// the wire, the VLAN 200 pod reaches neither. Each pod through another
/// client: our cnitool, go-cnitool, go-cni-cri. Node 1 has a link named
/// like the pod's interface (`eth0`), which kernels before 6.x refuse as
/// the name of a new link in another namespace: the plugin takes a
/// temporary name there. CHECK, DEL; nothing left.
#[test]
fn fullkernel_vlan_pods_reach_each_other_on_one_vlan_and_not_across() {
    if !full_kernel("fullkernel_vlan_pods_reach_each_other_on_one_vlan_and_not_across") {
        return;
    }
    let sw = Netns::new("vl-sw");
    sw.ip(&["link", "add", "br0", "type", "bridge"]);
    sw.ip(&["link", "set", "br0", "up"]);
    let nodes = [Node::new("vl-1"), Node::new("vl-2")];
    let data = TempDir::new("vl-data");
    for (i, n) in nodes.iter().enumerate() {
        let port = format!("p{i}");
        wire(&sw, &port, &n.ns, "up0");
        sw.ip(&["link", "set", &port, "master", "br0"]);
    }
    nodes[0].ns.ip(&["link", "add", "eth0", "type", "dummy"]);
    let conf = |net: &str, vlan: u16, node: usize, first: u8, mtu: u32| {
        json!({"cniVersion": "1.0.0", "name": net, "plugins": [{
            "type": "vlan", "master": "up0", "vlanId": vlan, "mtu": mtu,
            "ipam": {"type": "host-local", "dataDir": data.path().join(format!("n{node}")),
                     "ranges": [[{"subnet": "10.100.0.0/24",
                                  "rangeStart": format!("10.100.0.{first}"),
                                  "rangeEnd": format!("10.100.0.{}", first + 9)}]]}}]})
    };
    nodes[0].write_conf("10-vl100.conflist", &conf("vl100", 100, 0, 10, 1400));
    nodes[1].write_conf("20-vl100.conflist", &conf("vl100", 100, 1, 20, 1500));
    // go-cni-cri takes the node's first conflist.
    nodes[1].write_conf("10-vl200.conflist", &conf("vl200", 200, 1, 30, 1500));

    let (a, b, c) = (Netns::new("vl-a"), Netns::new("vl-b"), Netns::new("vl-c"));
    let bare: Vec<Vec<String>> = [&a, &b, &c].iter().map(|p| pod_links(p)).collect();
    let node_before: Vec<NetSnapshot> = nodes
        .iter()
        .map(|n| NetSnapshot::take_with(&n.ns, false))
        .collect();

    let out = run_ok(Client::Cnitool, &nodes[0], "vl100", "add", &a, "vl-a");
    let ra: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        ra,
        json!({"cniVersion": "1.0.0",
               "interfaces": [{"name": "eth0", "mac": mac_of(&nodes[0].ns, "up0"), "mtu": 1400,
                               "sandbox": a.path().display().to_string()}],
               "ips": [{"interface": 0, "address": "10.100.0.10/24", "gateway": "10.100.0.1"}],
               "dns": {}}),
        "{ra}"
    );
    run_ok(Client::GoCnitool, &nodes[1], "vl100", "add", &b, "vl-b");
    run_ok(Client::Cri, &nodes[1], "vl200", "add", &c, "vl-c");

    let l = link_of(&a, "eth0");
    assert_eq!(
        (
            &l["linkinfo"]["info_kind"],
            &l["linkinfo"]["info_data"]["id"],
            &l["mtu"]
        ),
        (&json!("vlan"), &json!(100), &json!(1400))
    );
    assert!(
        l["link_netnsid"].is_number(),
        "the master is the node's: {l}"
    );
    assert_eq!(link_of(&c, "eth0")["linkinfo"]["info_data"]["id"], 200);
    assert_eq!(
        link_of(&nodes[0].ns, "eth0")["linkinfo"]["info_kind"],
        "dummy"
    );
    assert_eq!(global_addrs(&b, "eth0"), ["10.100.0.20/24"]);
    assert_eq!(global_addrs(&c, "eth0"), ["10.100.0.30/24"]);

    assert!(
        ping_ok(&a, "10.100.0.20"),
        "VLAN 100 to VLAN 100 over the switch"
    );
    assert!(ping_ok(&b, "10.100.0.10"));
    assert!(!ping_ok(&a, "10.100.0.30"), "VLAN 100 reached VLAN 200");
    assert!(!ping_ok(&c, "10.100.0.20"), "VLAN 200 reached VLAN 100");

    // (go-cni-cri cannot CHECK: containerd's loopback network is 0.3.1.)
    run_ok(Client::Cnitool, &nodes[0], "vl100", "check", &a, "vl-a");
    run_ok(Client::GoCnitool, &nodes[1], "vl100", "check", &b, "vl-b");
    // Another VLAN ID in the config is a CHECK difference.
    let mut other = conf("vl100", 101, 0, 10, 1400)["plugins"][0].clone();
    other["cniVersion"] = json!("1.0.0");
    other["name"] = json!("vl100");
    ours(
        &nodes[0].ns,
        "CHECK",
        Some(&a),
        "vl-a",
        "eth0",
        &with_prev(&other, &ra),
    )
    .assert_error(
        102,
        "container VLAN \"eth0\" has VLAN ID 100, vlanId is 101",
    );

    run_ok(Client::Cnitool, &nodes[0], "vl100", "del", &a, "vl-a");
    run_ok(Client::GoCnitool, &nodes[1], "vl100", "del", &b, "vl-b");
    run_ok(Client::Cri, &nodes[1], "vl200", "del", &c, "vl-c");
    for (p, bare) in [&a, &b, &c].iter().zip(&bare) {
        assert_eq!(&pod_links(p), bare, "{}", p.name());
    }
    for (n, before) in nodes.iter().zip(&node_before) {
        assert_eq!(
            &NetSnapshot::take_with(&n.ns, false),
            before,
            "{}",
            n.ns.name()
        );
    }
    assert_eq!(
        tree(&data.path().join("n0/vl100")),
        ["last_reserved_ip.0", "lock"]
    );
}

/// A node whose masters for ours and Go's are twins: `up0` and `go0`, veths
/// to upstream namespaces holding 10.71.0.1/24 (ours) and the same on Go's
/// side, so both plugins see the same world. Go 1.1.1's results predate
/// `interfaces[].mtu`, so that field is left out of the comparison.
struct Twins {
    node: Node,
    ups: [Netns; 2],
    data: TempDir,
}

impl Twins {
    fn new(tag: &str) -> Twins {
        let node = Node::new(tag);
        node.ns.ip(&["link", "set", "lo", "up"]);
        let ups = [
            Netns::new(&format!("up-{tag}")),
            Netns::new(&format!("gup-{tag}")),
        ];
        for (up, name) in ups.iter().zip(["up0", "go0"]) {
            wire(&node.ns, name, up, "eth0");
            up.ip(&["addr", "add", "10.71.0.1/24", "dev", "eth0"]);
            up.ip(&["link", "set", "lo", "up"]);
        }
        Twins {
            node,
            ups,
            data: TempDir::new(&format!("data-{tag}")),
        }
    }

    /// `plugin` (a `vlan` or `ipvlan` config) over `master`, with
    /// host-local in a data dir of its own per side.
    fn conf(&self, side: &str, plugin: Value) -> Value {
        let mut c = json!({"cniVersion": "1.0.0", "name": "twin",
            "ipam": {"type": "host-local", "dataDir": self.data.path().join(side),
                     "ranges": [[{"subnet": "10.71.0.0/24", "rangeStart": "10.71.0.10"}]],
                     "routes": [{"dst": "192.0.2.0/24", "gw": "10.71.0.1"}]}});
        merge(&mut c, plugin);
        c
    }
}

/// The same config (but for the master) to ours and to Go 1.1.1's vlan and
/// ipvlan (l2, l3, and chained on a prevResult), each into a pod of its
/// own: the same result (but for the MAC, each the master's own) and the
/// same pod; CHECK passes on each; DEL leaves both pods bare.
#[test]
fn fullkernel_vlan_and_ipvlan_side_by_side_with_go() {
    if !full_kernel("fullkernel_vlan_and_ipvlan_side_by_side_with_go") {
        return;
    }
    let t = Twins::new("twin");
    let cases = [
        ("vlan", json!({"type": "vlan", "vlanId": 42, "mtu": 1400})),
        ("ipvlan l2", json!({"type": "ipvlan", "mode": "l2"})),
        ("ipvlan l3", json!({"type": "ipvlan", "mode": "l3"})),
    ];
    for (what, plugin) in cases {
        let pods = [Netns::new("tw-ours"), Netns::new("tw-go")];
        let mut results = Vec::new();
        let mut states = Vec::new();
        for (i, (side, master)) in [("ours", "up0"), ("go", "go0")].into_iter().enumerate() {
            let mut p = plugin.clone();
            p["master"] = json!(master);
            let conf = t.conf(side, p);
            let out = if side == "ours" {
                ours(&t.node.ns, "ADD", Some(&pods[i]), "tw", "eth0", &conf)
            } else {
                match gos(&t.node.ns, "ADD", Some(&pods[i]), "tw", "eth0", &conf) {
                    Some(o) => o,
                    None => return,
                }
            };
            let r = out.result();
            assert_eq!(
                r["interfaces"][0]["mac"],
                mac_of(&t.node.ns, master),
                "{what} {side}: {r}"
            );
            let mut n = normalised(&r, true);
            n["interfaces"][0].as_object_mut().unwrap().remove("mtu");
            results.push(n);
            states.push(pod_state(&pods[i]));
            let check = with_prev(&conf, &r);
            let out = if side == "ours" {
                ours(&t.node.ns, "CHECK", Some(&pods[i]), "tw", "eth0", &check)
            } else {
                gos(&t.node.ns, "CHECK", Some(&pods[i]), "tw", "eth0", &check).unwrap()
            };
            assert_eq!(out.exit_code, 0, "{what} {side} CHECK: {out:?}");
            // Traffic to the master's upstream, on each side (the VLANs'
            // traffic is in the test above: the upstream here is untagged).
            // (ipvlan l3 routes through the node, which has no route here.)
            if what == "ipvlan l2" {
                assert!(ping_ok(&pods[i], "10.71.0.1"), "{what} {side}: no traffic");
            }
        }
        assert_eq!(results[0], results[1], "{what}: ours vs Go");
        assert_eq!(states[0], states[1], "{what}: the pods differ");
        for (i, (side, master)) in [("ours", "up0"), ("go", "go0")].into_iter().enumerate() {
            let mut p = plugin.clone();
            p["master"] = json!(master);
            let conf = t.conf(side, p);
            let out = if side == "ours" {
                ours(&t.node.ns, "DEL", Some(&pods[i]), "tw", "eth0", &conf)
            } else {
                gos(&t.node.ns, "DEL", Some(&pods[i]), "tw", "eth0", &conf).unwrap()
            };
            assert_eq!(out.exit_code, 0, "{what} {side} DEL: {out:?}");
            assert_eq!(pod_links(&pods[i]), Vec::<String>::new(), "{what} {side}");
        }
    }

    // Chained ipvlan: no master and no ipam, both from the prevResult of
    // the plugin before (a result naming the master and the address).
    let pods = [Netns::new("tw-ch-ours"), Netns::new("tw-ch-go")];
    let mut results = Vec::new();
    let mut states = Vec::new();
    for (i, (side, master)) in [("ours", "up0"), ("go", "go0")].into_iter().enumerate() {
        let conf = json!({"cniVersion": "1.0.0", "name": "twin", "type": "ipvlan", "mode": "l2",
            "prevResult": {"cniVersion": "1.0.0", "interfaces": [{"name": master}],
                           "ips": [{"address": "10.71.0.50/24", "gateway": "10.71.0.1", "interface": 0}],
                           "routes": [{"dst": "0.0.0.0/0"}], "dns": {}}});
        let out = if side == "ours" {
            ours(&t.node.ns, "ADD", Some(&pods[i]), "tw", "eth0", &conf)
        } else {
            gos(&t.node.ns, "ADD", Some(&pods[i]), "tw", "eth0", &conf).unwrap()
        };
        let r = out.result();
        let mut n = normalised(&r, true);
        n["interfaces"][0].as_object_mut().unwrap().remove("mtu");
        results.push(n);
        states.push(pod_state(&pods[i]));
        assert!(ping_ok(&pods[i], "10.71.0.1"), "chained {side}: no traffic");
        let out = if side == "ours" {
            ours(&t.node.ns, "DEL", Some(&pods[i]), "tw", "eth0", &conf)
        } else {
            gos(&t.node.ns, "DEL", Some(&pods[i]), "tw", "eth0", &conf).unwrap()
        };
        assert_eq!(out.exit_code, 0, "chained {side} DEL: {out:?}");
    }
    assert_eq!(results[0], results[1], "chained: ours vs Go");
    assert_eq!(states[0], states[1], "chained: the pods differ");
    assert_eq!(
        results[0]["ips"],
        json!([{"address": "10.71.0.50/24", "gateway": "10.71.0.1", "interface": 0}])
    );
    let _ = &t.ups;
}

// ---- ipvlan ----------------------------------------------------------------------

/// ipvlan in each mode, three pods on one master, each through another
/// client (go-cni-cri, go-cnitool, our cnitool): the pods reach each other
/// (the master switches between its slaves) and the upstream namespace
/// behind the master (l2: in its subnet, by ARP with the master's MAC; l3
/// and l3s: routed, the upstream holding a route to the pods through the
/// node). The result carries the master's MAC, as the reference's. CHECK,
/// DEL; nothing left.
#[test]
fn fullkernel_ipvlan_pods_talk_in_l2_l3_and_l3s() {
    if !full_kernel("fullkernel_ipvlan_pods_talk_in_l2_l3_and_l3s") {
        return;
    }
    let clients = [Client::Cri, Client::GoCnitool, Client::Cnitool];
    for mode in ["l2", "l3", "l3s"] {
        let node = Node::new(&format!("ipv-{mode}"));
        let up = Netns::new(&format!("ipv-up-{mode}"));
        let data = TempDir::new(&format!("ipv-{mode}"));
        node.ns.ip(&["link", "set", "lo", "up"]);
        wire(&node.ns, "up0", &up, "eth0");
        up.ip(&["link", "set", "lo", "up"]);
        // l2: the pods in the upstream's subnet; l3: a subnet of their own,
        // which the upstream reaches through the node's address.
        let (subnet, routes) = if mode == "l2" {
            up.ip(&["addr", "add", "10.72.0.1/24", "dev", "eth0"]);
            ("10.72.0.0/24", json!([]))
        } else {
            node.ns.ip(&["addr", "add", "10.72.0.2/24", "dev", "up0"]);
            up.ip(&["addr", "add", "10.72.0.1/24", "dev", "eth0"]);
            up.ip(&["route", "add", "10.73.0.0/24", "via", "10.72.0.2"]);
            ("10.73.0.0/24", json!([{"dst": "0.0.0.0/0"}]))
        };
        let net = format!("ipv{mode}");
        node.write_conf(
            "10-ipvlan.conflist",
            &json!({"cniVersion": "1.0.0", "name": net, "plugins": [{
                "type": "ipvlan", "master": "up0", "mode": mode,
                "ipam": {"type": "host-local", "dataDir": data.path(),
                         "ranges": [[{"subnet": subnet, "rangeStart": subnet.replace(".0/24", ".10")}]],
                         "routes": routes}}]}),
        );
        let pods: Vec<Netns> = clients
            .iter()
            .map(|c| Netns::new(&format!("ipv-{mode}-{c:?}").to_lowercase()))
            .collect();
        let node_before = NetSnapshot::take_with(&node.ns, false);
        for (pod, client) in pods.iter().zip(clients) {
            let out = run_ok(client, &node, &net, "add", pod, pod.name());
            if client != Client::Cri {
                let r: Value = serde_json::from_str(&out.stdout).unwrap();
                assert_eq!(
                    r["interfaces"][0]["mac"],
                    mac_of(&node.ns, "up0"),
                    "{mode}: {r}"
                );
            }
            let l = link_of(pod, "eth0");
            assert_eq!(
                (
                    &l["linkinfo"]["info_kind"],
                    &l["linkinfo"]["info_data"]["mode"]
                ),
                (&json!("ipvlan"), &json!(mode)),
                "{mode}: {l}"
            );
            assert_eq!(l["address"], mac_of(&node.ns, "up0"), "{mode}");
        }
        let addr = |i: usize| subnet.replace(".0/24", &format!(".{}", 10 + i));
        assert!(ping_ok(&pods[0], &addr(1)), "{mode}: pod to pod");
        assert!(ping_ok(&pods[1], &addr(2)), "{mode}: pod to pod");
        assert!(ping_ok(&pods[2], "10.72.0.1"), "{mode}: pod to upstream");
        assert!(ping_ok(&up, &addr(0)), "{mode}: upstream to pod");
        for (pod, client) in pods.iter().zip(clients) {
            // (go-cni-cri cannot CHECK: containerd's loopback network is 0.3.1.)
            if client != Client::Cri {
                run_ok(client, &node, &net, "check", pod, pod.name());
            }
            run_ok(client, &node, &net, "del", pod, pod.name());
            assert_eq!(pod_links(pod), Vec::<String>::new(), "{mode} {client:?}");
        }
        assert_eq!(
            NetSnapshot::take_with(&node.ns, false),
            node_before,
            "{mode}"
        );
        assert_eq!(leases_in(&data.path().join(&net)), Vec::<String>::new());
    }
}

/// A master that is itself an ipvlan: the kernel stacks the new ipvlan on
/// that one's own master, for ours as for Go's; CHECK accepts it.
#[test]
fn fullkernel_ipvlan_on_an_ipvlan_master_goes_on_its_master() {
    if !full_kernel("fullkernel_ipvlan_on_an_ipvlan_master_goes_on_its_master") {
        return;
    }
    let t = Twins::new("ipv-stk");
    let n = &t.node.ns;
    for (m, lower) in [("ipv0", "up0"), ("gipv0", "go0")] {
        n.ip(&[
            "link", "add", m, "link", lower, "type", "ipvlan", "mode", "l2",
        ]);
        n.ip(&["link", "set", m, "up"]);
    }
    let pods = [Netns::new("stk-ours"), Netns::new("stk-go")];
    let mut states = Vec::new();
    for (i, (side, master, lower)) in [("ours", "ipv0", "up0"), ("go", "gipv0", "go0")]
        .into_iter()
        .enumerate()
    {
        let conf = t.conf(
            side,
            json!({"type": "ipvlan", "mode": "l2", "master": master}),
        );
        let out = if side == "ours" {
            ours(n, "ADD", Some(&pods[i]), "stk", "eth0", &conf)
        } else {
            match gos(n, "ADD", Some(&pods[i]), "stk", "eth0", &conf) {
                Some(o) => o,
                None => return,
            }
        };
        let r = out.result();
        let l = link_of(&pods[i], "eth0");
        let lower_index = link_of(n, lower)["ifindex"].clone();
        assert_eq!(
            l["link_index"], lower_index,
            "{side}: on the master's master: {l}"
        );
        states.push(pod_state(&pods[i]));
        if side == "ours" {
            ours(
                n,
                "CHECK",
                Some(&pods[i]),
                "stk",
                "eth0",
                &with_prev(&conf, &r),
            )
            .assert_silent_ok();
        }
        assert!(ping_ok(&pods[i], "10.71.0.1"), "{side}");
    }
    assert_eq!(states[0], states[1]);
}

// ---- dummy -----------------------------------------------------------------------

/// A dummy in the pod through each client, after loopback in a chain: the
/// address on a link with nowhere to send (reachable from the pod itself),
/// the result exact, CHECK, DEL; a down dummy is a CHECK difference.
#[test]
fn fullkernel_dummy_gives_the_pod_an_address_without_a_link() {
    if !full_kernel("fullkernel_dummy_gives_the_pod_an_address_without_a_link") {
        return;
    }
    for client in [Client::Cri, Client::GoCnitool, Client::Cnitool] {
        let tag = format!("dm-{client:?}").to_lowercase();
        let node = Node::new(&tag);
        let data = TempDir::new(&tag);
        node.write_conf(
            "10-dummy.conflist",
            &json!({"cniVersion": "1.0.0", "name": "dm", "plugins": [
                {"type": "dummy", "ipam": {"type": "host-local", "dataDir": data.path(),
                    "ranges": [[{"subnet": "10.74.0.0/24"}], [{"subnet": "fd74::/64"}]]}}]}),
        );
        let pod = Netns::new(&format!("{tag}-pod"));
        let node_before = NetSnapshot::take_with(&node.ns, false);
        let out = run_ok(client, &node, "dm", "add", &pod, "dm-1");
        if client == Client::Cnitool {
            let r: Value = serde_json::from_str(&out.stdout).unwrap();
            assert_eq!(
                r,
                json!({"cniVersion": "1.0.0",
                       "interfaces": [{"name": "eth0", "mac": mac_of(&pod, "eth0"), "mtu": 1500,
                                       "sandbox": pod.path().display().to_string()}],
                       "ips": [{"interface": 0, "address": "10.74.0.2/24", "gateway": "10.74.0.1"},
                               {"interface": 0, "address": "fd74::2/64", "gateway": "fd74::1"}],
                       "dns": {}}),
                "{r}"
            );
        }
        assert_eq!(link_of(&pod, "eth0")["linkinfo"]["info_kind"], "dummy");
        assert!(pod.link_is_up("eth0"));
        assert_eq!(global_addrs(&pod, "eth0"), ["10.74.0.2/24", "fd74::2/64"]);
        pod.ip(&["link", "set", "lo", "up"]);
        assert!(ping_ok(&pod, "10.74.0.2"), "{client:?}");
        assert_eq!(
            NetSnapshot::take_with(&node.ns, false),
            node_before,
            "{client:?}: the node changed"
        );
        if client != Client::Cri {
            run_ok(client, &node, "dm", "check", &pod, "dm-1");
        }
        if client == Client::Cnitool {
            pod.ip(&["link", "set", "eth0", "down"]);
            let out = run(client, &node, "dm", "check", &pod, "dm-1");
            assert!(
                out.stderr.contains("container interface \"eth0\" is down"),
                "{out:?}"
            );
            pod.ip(&["link", "set", "eth0", "up"]);
        }
        run_ok(client, &node, "dm", "del", &pod, "dm-1");
        assert_eq!(pod_links(&pod), Vec::<String>::new(), "{client:?}");
        assert_eq!(leases_in(&data.path().join("dm")), Vec::<String>::new());
    }
}

// ---- vrf -------------------------------------------------------------------------

/// A pod on two networks with the same subnet (10.75.0.0/24) and the same
/// default route, each to another upstream holding 10.75.0.1: without
/// VRFs the second would clash with the first; with `vrf` each lives in
/// the table of its own VRF (red, blue). Pings bound to a VRF reach that
/// VRF's upstream only (each upstream also answers on an address of its
/// own, routed only in its VRF). A third interface joins red: one VRF, two
/// members; DEL of one keeps the VRF, DEL of the last removes it. Chains
/// through go-cnitool (red), our cnitool (blue) and go-cni-cri (the third,
/// the node's first conflist). The main plugin's CHECK finds its routes in
/// the VRF's table.
#[test]
fn fullkernel_vrf_carries_overlapping_networks_in_one_pod() {
    if !full_kernel("fullkernel_vrf_carries_overlapping_networks_in_one_pod") {
        return;
    }
    let node = Node::new("vrf");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let data = TempDir::new("vrf");
    let ups = [Netns::new("vrf-red"), Netns::new("vrf-blue")];
    for (i, (up, own)) in ups.iter().zip(["198.51.100.1", "203.0.113.1"]).enumerate() {
        let m = format!("m{i}");
        wire(&node.ns, &m, up, "eth0");
        up.ip(&["addr", "add", "10.75.0.1/24", "dev", "eth0"]);
        up.ip(&["addr", "add", &format!("{own}/32"), "dev", "lo"]);
        up.ip(&["link", "set", "lo", "up"]);
    }
    let chain = |net: &str, master: &str, vrf: &str, first: &str, own: &str| {
        json!({"cniVersion": "1.0.0", "name": net, "plugins": [
            {"type": "ipvlan", "master": master, "mode": "l2",
             "ipam": {"type": "host-local", "dataDir": data.path(),
                      "ranges": [[{"subnet": "10.75.0.0/24", "rangeStart": first}]],
                      "routes": [{"dst": "0.0.0.0/0"}, {"dst": format!("{own}/32"), "gw": "10.75.0.1"}]}},
            {"type": "vrf", "vrfname": vrf}]})
    };
    node.write_conf(
        "20-red.conflist",
        &chain("red", "m0", "red", "10.75.0.10", "198.51.100.1"),
    );
    node.write_conf(
        "30-blue.conflist",
        &chain("blue", "m1", "blue", "10.75.0.20", "203.0.113.1"),
    );
    node.write_conf(
        "10-red2.conflist",
        &chain("red2", "m0", "red", "10.75.0.30", "198.51.100.1"),
    );
    let pod = Netns::new("vrf-pod");
    pod.ip(&["link", "set", "lo", "up"]);
    let netns = pod.path().display().to_string();
    let add = |client: Client, net: &str, ifname: &str| {
        let tool = tool_of(client).unwrap();
        let out = match client {
            Client::Cri => node.cri(&tool, "setup", Some(&pod), "vrf-pod", &[]),
            Client::GoCnitool => node.go_cnitool(
                &tool,
                &["add", net, &netns],
                &[("CNI_CONTAINERID", "vrf-pod"), ("CNI_IFNAME", ifname)],
            ),
            Client::Cnitool => node.cnitool_with(
                &tool,
                &["add", net, &netns],
                &[("CNI_CONTAINERID", "vrf-pod"), ("CNI_IFNAME", ifname)],
            ),
        };
        assert_eq!(out.exit_code, 0, "{client:?} {net}: {out:?}");
        out
    };
    let r = add(Client::GoCnitool, "red", "net1");
    let r: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        r["interfaces"][0]["name"], "net1",
        "vrf passes prevResult through: {r}"
    );
    add(Client::Cnitool, "blue", "net2");
    // go-cni-cri names its interface eth0.
    add(Client::Cri, "red2", "eth0");

    let vrf_table = |name: &str| link_of(&pod, name)["linkinfo"]["info_data"]["table"].clone();
    assert_eq!((vrf_table("red"), vrf_table("blue")), (json!(1), json!(2)));
    for (dev, vrf) in [("net1", "red"), ("net2", "blue"), ("eth0", "red")] {
        assert_eq!(link_of(&pod, dev)["master"], vrf, "{dev}");
    }
    // The same default route twice, in two tables; none left in main.
    let routes = |table: &str| -> Vec<String> {
        pod.ip_json(&["route", "show", "table", table])
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["protocol"] != "kernel")
            .map(|r| {
                format!(
                    "{} via {} dev {}",
                    r["dst"].as_str().unwrap(),
                    r["gateway"].as_str().unwrap_or("-"),
                    r["dev"].as_str().unwrap()
                )
            })
            .collect()
    };
    // Two members with the same routes: the later one's replace the
    // earlier one's (`ip route replace`, as the reference).
    let mut red = routes("1");
    red.sort();
    assert_eq!(
        red,
        [
            "198.51.100.1 via 10.75.0.1 dev eth0",
            "default via 10.75.0.1 dev eth0"
        ]
    );
    assert_eq!(
        routes("2"),
        [
            "default via 10.75.0.1 dev net2",
            "203.0.113.1 via 10.75.0.1 dev net2"
        ]
    );
    assert_eq!(routes("main"), Vec::<String>::new());
    // Each VRF reaches its own upstream.
    let ping_in = |vrf: &str, ip: &str| {
        exec_in(&pod, "ping", &["-c1", "-W1", "-I", vrf, ip])
            .status
            .success()
    };
    assert!(ping_in("red", "198.51.100.1"));
    assert!(ping_in("blue", "203.0.113.1"));
    assert!(
        !ping_in("red", "203.0.113.1"),
        "red reached blue's upstream"
    );
    assert!(
        !ping_in("blue", "198.51.100.1"),
        "blue reached red's upstream"
    );
    assert!(ping_in("red", "10.75.0.1") && ping_in("blue", "10.75.0.1"));

    // CHECK of the chains: ipvlan finds its routes in the VRF's table.
    for (net, ifname) in [("red", "net1"), ("blue", "net2")] {
        let out = node.cnitool_with(
            &bin("cnitool"),
            &["check", net, &netns],
            &[("CNI_CONTAINERID", "vrf-pod"), ("CNI_IFNAME", ifname)],
        );
        assert_eq!(out.exit_code, 0, "CHECK {net}: {out:?}");
    }

    // red has two members: DEL of one keeps it, of the last removes it.
    let del = |client: Client, net: &str, ifname: &str| {
        let tool = tool_of(client).unwrap();
        let out = match client {
            Client::Cri => node.cri(&tool, "remove", Some(&pod), "vrf-pod", &[]),
            Client::GoCnitool => node.go_cnitool(
                &tool,
                &["del", net, &netns],
                &[("CNI_CONTAINERID", "vrf-pod"), ("CNI_IFNAME", ifname)],
            ),
            Client::Cnitool => node.cnitool_with(
                &tool,
                &["del", net, &netns],
                &[("CNI_CONTAINERID", "vrf-pod"), ("CNI_IFNAME", ifname)],
            ),
        };
        assert_eq!(out.exit_code, 0, "{client:?} DEL {net}: {out:?}");
    };
    del(Client::GoCnitool, "red", "net1");
    assert_eq!(
        pod_links(&pod),
        ["blue vrf", "eth0 ipvlan", "net2 ipvlan", "red vrf"]
    );
    del(Client::Cri, "red2", "eth0");
    assert_eq!(pod_links(&pod), ["blue vrf", "net2 ipvlan"]);
    del(Client::Cnitool, "blue", "net2");
    assert_eq!(pod_links(&pod), Vec::<String>::new());
    assert_eq!(routes("1"), Vec::<String>::new());
}

/// Ours and Go 1.1.1's vrf after the same interface (a veth the test makes,
/// as a main plugin would, with an IPv4 and an IPv6 address and a route
/// through a gateway): the same VRF, table and membership, the same result
/// (prevResult unchanged), the IPv6 address that the kernel drops on
/// joining (no `keep_addr_on_down`) back on the interface. What v1.4 added
/// and 1.1.1 lacks: the route follows the interface into the VRF's table
/// (1.1.1 loses it). DEL: the interface leaves, the VRF goes.
#[test]
fn fullkernel_vrf_side_by_side_with_go() {
    if !full_kernel("fullkernel_vrf_side_by_side_with_go") {
        return;
    }
    let node = Node::new("vrf-cmp");
    let pods = [Netns::new("vrfc-ours"), Netns::new("vrfc-go")];
    let mut results = Vec::new();
    let mut states = Vec::new();
    for (i, side) in ["ours", "go"].into_iter().enumerate() {
        let pod = &pods[i];
        let peer = format!("h{i}");
        wire(&node.ns, &peer, pod, "eth0");
        pod.ip(&["link", "set", "eth0", "addrgenmode", "eui64"]);
        pod.ip(&["addr", "add", "10.76.0.5/24", "dev", "eth0"]);
        pod.ip(&["addr", "add", "fd76::5/64", "dev", "eth0", "nodad"]);
        pod.ip(&["route", "add", "10.77.0.0/16", "via", "10.76.0.1"]);
        let prev = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": pod.path().display().to_string()}],
            "ips": [{"address": "10.76.0.5/24", "gateway": "10.76.0.1", "interface": 0},
                    {"address": "fd76::5/64", "interface": 0}],
            "routes": [{"dst": "10.77.0.0/16", "gw": "10.76.0.1"}], "dns": {}});
        let conf = json!({"cniVersion": "1.0.0", "name": "vrfc", "type": "vrf",
                          "vrfname": "green", "table": 500, "prevResult": prev});
        let out = if side == "ours" {
            ours(&node.ns, "ADD", Some(pod), "vrfc", "eth0", &conf)
        } else {
            match gos(&node.ns, "ADD", Some(pod), "vrfc", "eth0", &conf) {
                Some(o) => o,
                None => return,
            }
        };
        let r = out.result();
        assert_eq!(
            normalised(&r, false),
            normalised(&prev, false),
            "{side}: prevResult unchanged"
        );
        results.push(normalised(&r, false));
        let l = link_of(pod, "green");
        assert_eq!(
            (
                &l["linkinfo"]["info_kind"],
                &l["linkinfo"]["info_data"]["table"]
            ),
            (&json!("vrf"), &json!(500)),
            "{side}"
        );
        assert_eq!(link_of(pod, "eth0")["master"], "green", "{side}");
        let table: Vec<String> = pod
            .ip_json(&["route", "show", "table", "500"])
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| {
                r["gateway"]
                    .as_str()
                    .map(|g| format!("{} via {g}", r["dst"].as_str().unwrap()))
            })
            .collect();
        let v6 = global_addrs(pod, "eth0");
        states.push((table, v6));
        let out = if side == "ours" {
            ours(&node.ns, "CHECK", Some(pod), "vrfc", "eth0", &conf)
        } else {
            gos(&node.ns, "CHECK", Some(pod), "vrfc", "eth0", &conf).unwrap()
        };
        assert_eq!(out.exit_code, 0, "{side} CHECK: {out:?}");
        let out = if side == "ours" {
            ours(&node.ns, "DEL", Some(pod), "vrfc", "eth0", &conf)
        } else {
            gos(&node.ns, "DEL", Some(pod), "vrfc", "eth0", &conf).unwrap()
        };
        assert_eq!(out.exit_code, 0, "{side} DEL: {out:?}");
        assert!(pod.link("green").is_none(), "{side}: the VRF is left");
        assert_eq!(link_of(pod, "eth0")["master"], Value::Null, "{side}");
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(
        states[0],
        (
            vec!["10.77.0.0/16 via 10.76.0.1".to_string()],
            vec!["10.76.0.5/24".to_string(), "fd76::5/64".to_string()]
        ),
        "ours: the route and the IPv6 address followed the interface"
    );
    assert_eq!(
        states[1],
        (
            Vec::<String>::new(),
            vec!["10.76.0.5/24".to_string(), "fd76::5/64".to_string()]
        ),
        "Go 1.1.1 loses the route (upstream moves it since v1.4)"
    );
}

/// Bad input that needs the full kernel, each refused naming the key with
/// the node and the pod unchanged: a VRF table clash (the VRF exists with
/// another table; the table is another VRF's), a VLAN ID a master already
/// carries, an ipvlan master with macvlans on it, an IPAM error after the
/// link was made (rolled back). And ADD of an interface name the pod
/// already has is code 100.
#[test]
fn fullkernel_bad_input_leaves_the_node_unchanged() {
    if !full_kernel("fullkernel_bad_input_leaves_the_node_unchanged") {
        return;
    }
    let t = Twins::new("fk-bad");
    let n = &t.node.ns;
    let pod = Netns::new("fk-bad-pod");
    wire(n, "h0", &pod, "eth1");
    pod.ip(&["link", "add", "blue", "type", "vrf", "table", "7"]);
    pod.ip(&["link", "add", "gray", "type", "vrf", "table", "8"]);
    n.ip(&[
        "link", "add", "vl9", "link", "up0", "type", "vlan", "id", "9",
    ]);
    n.ip(&["link", "add", "mv0", "link", "go0", "type", "macvlan"]);
    let prev = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth1", "sandbox": pod.path().display().to_string()}],
        "ips": [{"address": "10.78.0.5/24", "interface": 0}]});
    let snap = || {
        (
            NetSnapshot::take_with(n, false),
            NetSnapshot::take_with(&pod, false),
            tree(t.data.path()),
        )
    };
    let before = snap();
    let vrf = |extra: Value| {
        let mut c =
            json!({"cniVersion": "1.0.0", "name": "bad", "type": "vrf", "prevResult": prev});
        merge(&mut c, extra);
        c
    };
    let cases = [
        ("eth1", vrf(json!({"vrfname": "blue", "table": 9})), 7,
         "table: VRF \"blue\" already exists in the container with table 7, not 9"),
        ("eth1", vrf(json!({"vrfname": "green", "table": 8})), 7,
         "table: table 8 is the table of VRF \"gray\" in the container: two VRFs cannot share one"),
        ("eth0", t.conf("a", json!({"type": "vlan", "master": "up0", "vlanId": 9})), 100,
         "add vlan 9 on link"),
        ("eth0", t.conf("a", json!({"type": "ipvlan", "master": "go0"})), 100,
         "add ipvlan (mode l2) on link"),
        ("eth0", {
            let mut c = t.conf("a", json!({"type": "vlan", "master": "up0", "vlanId": 10}));
            c["ipam"]["ranges"][0][0]["subnet"] = json!("10.71.0.0/33");
            c
        }, 7, "ipam.ranges[0][0].subnet"),
        ("eth1", t.conf("a", json!({"type": "dummy"})), 100,
         "container interface CNI_IFNAME \"eth1\" already exists in CNI_NETNS"),
    ];
    for (ifname, conf, code, needle) in cases {
        let out = ours(n, "ADD", Some(&pod), "bad", ifname, &conf);
        out.assert_error(code, needle);
        let after = snap();
        assert_eq!(
            after,
            before,
            "{needle}: {:?} {:?}",
            before.0.diff(&after.0),
            before.1.diff(&after.1)
        );
    }
    // The same VRF with its own table, or none, is joined.
    let ok = vrf(json!({"vrfname": "blue"}));
    ours(n, "ADD", Some(&pod), "bad", "eth1", &ok).result();
    assert_eq!(link_of(&pod, "eth1")["master"], "blue");
    ours(
        n,
        "CHECK",
        Some(&pod),
        "bad",
        "eth1",
        &vrf(json!({"vrfname": "blue", "table": 7})),
    )
    .assert_silent_ok();
    ours(
        n,
        "CHECK",
        Some(&pod),
        "bad",
        "eth1",
        &vrf(json!({"vrfname": "gray"})),
    )
    .assert_error(102, "\"eth1\" is not a member of VRF \"gray\"");
    ours(n, "DEL", Some(&pod), "bad", "eth1", &ok).assert_silent_ok();
    assert!(pod.link("blue").is_none(), "its last member left");
    assert_eq!(link_of(&pod, "eth1")["master"], Value::Null);
}

/// DEL when things are gone (the namespace, the link, the VRF) succeeds;
/// GC succeeds; STATUS is 0 with the master there and 50 without.
#[test]
fn fullkernel_del_gc_and_status() {
    if !full_kernel("fullkernel_del_gc_and_status") {
        return;
    }
    let t = Twins::new("fk-life");
    let n = &t.node.ns;
    for plugin in [
        json!({"type": "vlan", "master": "up0", "vlanId": 11}),
        json!({"type": "ipvlan", "master": "up0"}),
        json!({"type": "dummy"}),
    ] {
        let kind = plugin["type"].as_str().unwrap().to_string();
        let conf = t.conf("life", plugin);
        let pod = Netns::new(&format!("life-{kind}"));
        ours(n, "ADD", Some(&pod), "life", "eth0", &conf).result();
        assert_eq!(
            leases_in(&t.data.path().join("life/twin")).len(),
            1,
            "{kind}"
        );
        // The pod's namespace goes with its link: DEL releases the lease.
        let path = pod.path();
        drop(pod);
        let gone = Netns::new("life-gone");
        let out = call(
            n,
            &bin(&kind),
            &bin_dir(),
            "DEL",
            None,
            "life",
            "eth0",
            &conf,
        );
        out.assert_silent_ok();
        let out = call_plugin_entered(
            n,
            &bin(&kind),
            &[
                ("CNI_COMMAND", "DEL"),
                ("CNI_CONTAINERID", "life"),
                ("CNI_NETNS", path.to_str().unwrap()),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", bin_dir().to_str().unwrap()),
            ],
            &conf.to_string(),
        );
        out.assert_silent_ok();
        assert_eq!(
            leases_in(&t.data.path().join("life/twin")),
            Vec::<String>::new(),
            "{kind}"
        );
        ours(n, "DEL", Some(&gone), "life", "eth0", &conf).assert_silent_ok();
        let mut gc = conf.clone();
        gc["cniVersion"] = json!("1.1.0");
        gc["cni.dev/valid-attachments"] = json!([]);
        call(n, &bin(&kind), &bin_dir(), "GC", None, "", "", &gc).assert_silent_ok();
        call(n, &bin(&kind), &bin_dir(), "STATUS", None, "", "", &gc).assert_silent_ok();
        if kind != "dummy" {
            let mut missing = gc.clone();
            missing["master"] = json!("nosuch0");
            call(n, &bin(&kind), &bin_dir(), "STATUS", None, "", "", &missing).assert_error(
                50,
                "master \"nosuch0\" not found in the plugin's network namespace",
            );
        }
    }
    // vrf: DEL with the VRF, or the interface, or the namespace gone.
    let pod = Netns::new("life-vrf");
    wire(n, "h9", &pod, "eth0");
    let conf = json!({"cniVersion": "1.1.0", "name": "life", "type": "vrf", "vrfname": "red",
        "prevResult": {"cniVersion": "1.1.0", "interfaces": [{"name": "eth0", "sandbox": pod.path()}], "ips": []}});
    ours(n, "ADD", Some(&pod), "life", "eth0", &conf).result();
    n.ip(&["link", "del", "h9"]);
    ours(n, "DEL", Some(&pod), "life", "eth0", &conf).assert_silent_ok();
    assert!(pod.link("red").is_none(), "no member left: the VRF goes");
    ours(n, "DEL", Some(&pod), "life", "eth0", &conf).assert_silent_ok();
    call(n, &bin("vrf"), &bin_dir(), "STATUS", None, "", "", &conf).assert_silent_ok();
    call(n, &bin("vrf"), &bin_dir(), "GC", None, "", "", &conf).assert_silent_ok();
}

// ---- bridge VLANs ----------------------------------------------------------------

/// The VLANs of bridge port `dev` in `ns` as `bridge -j vlan show`
/// reports them (each VLAN, or range, with its flags), merged into ranges
/// of consecutive VLANs with the same flags: `id[-end] [PVID] [untagged]`.
fn port_vlans(ns: &Netns, dev: &str) -> Vec<String> {
    let out = exec_in(ns, "bridge", &["-j", "vlan", "show", "dev", dev]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut ids: Vec<(u64, String)> = Vec::new();
    for x in v[0]["vlans"].as_array().into_iter().flatten() {
        let mut flags = String::new();
        for f in x["flags"].as_array().into_iter().flatten() {
            flags.push_str(match f.as_str() {
                Some("PVID") => " PVID",
                Some("Egress Untagged") => " untagged",
                _ => " ?",
            });
        }
        let first = x["vlan"].as_u64().unwrap();
        let last = x["vlanEnd"].as_u64().unwrap_or(first);
        ids.extend((first..=last).map(|id| (id, flags.clone())));
    }
    ids.sort();
    let mut out: Vec<(u64, u64, String)> = Vec::new();
    for (id, flags) in ids {
        match out.last_mut() {
            Some((_, last, f)) if *last + 1 == id && *f == flags => *last = id,
            _ => out.push((id, id, flags)),
        }
    }
    out.into_iter()
        .map(|(a, b, f)| {
            if a == b {
                format!("{a}{f}")
            } else {
                format!("{a}-{b}{f}")
            }
        })
        .collect()
}

/// The host veth of a bridge result.
fn host_veth(r: &Value) -> String {
    r["interfaces"][1]["name"].as_str().unwrap().to_string()
}

/// One bridge, pods on VLANs: access ports on 100 (two pods, one through
/// go-cnitool), 200 (through go-cni-cri) and 300, a trunk port carrying
/// 100 and 200 tagged with 300 native (`vlan` + `vlanTrunk`, v1.8+), a
/// trunk without `vlan` (VLAN 1 native), an access port with
/// `preserveDefaultVlan`, and a gateway on VLAN 400 (`isGateway`: the
/// `<bridge>.400` veth). The port VLANs read back exactly; pods on one
/// VLAN reach each other, none across; the trunk pod reaches each VLAN
/// through its sub-interfaces and VLAN 300 untagged; the VLAN 400 pod its
/// gateway. CHECK passes, and fails once a port lost its VLAN. DEL leaves
/// the bridge without ports.
#[test]
fn fullkernel_bridge_vlans_trunks_and_native_vlans() {
    if !full_kernel("fullkernel_bridge_vlans_trunks_and_native_vlans") {
        return;
    }
    let node = Node::new("brv");
    node.ns.ip(&["link", "set", "lo", "up"]);
    // A bridge whose MAC is set does not take its ports' (which would make
    // every earlier pod's CHECK see another bridge MAC): without a gateway
    // the plugin leaves the MAC alone, as the reference.
    node.ns.ip(&[
        "link",
        "add",
        "vbr",
        "address",
        "02:00:00:00:01:00",
        "type",
        "bridge",
        "vlan_filtering",
        "1",
    ]);
    let data = TempDir::new("brv");
    let net = |name: &str, first: u8, extra: Value| {
        let mut p = json!({"type": "bridge", "bridge": "vbr",
            "ipam": {"type": "host-local", "dataDir": data.path(),
                     "ranges": [[{"subnet": "10.110.0.0/24",
                                  "rangeStart": format!("10.110.0.{first}"),
                                  "rangeEnd": format!("10.110.0.{}", first + 9)}]]}});
        merge(&mut p, extra);
        json!({"cniVersion": "1.0.0", "name": name, "plugins": [p]})
    };
    // go-cni-cri takes the first conflist.
    node.write_conf("05-v200.conflist", &net("v200", 20, json!({"vlan": 200})));
    node.write_conf("10-v100.conflist", &net("v100", 10, json!({"vlan": 100})));
    node.write_conf("20-v300.conflist", &net("v300", 40, json!({"vlan": 300})));
    node.write_conf(
        "30-trunk.conflist",
        &net(
            "trunk",
            30,
            json!({"vlan": 300, "vlanTrunk": [{"id": 100}, {"minID": 200, "maxID": 201}]}),
        ),
    );
    node.write_conf(
        "40-tronly.conflist",
        &net("tronly", 50, json!({"vlanTrunk": [{"id": 100}]})),
    );
    node.write_conf(
        "50-keep.conflist",
        &net(
            "keep",
            60,
            json!({"vlan": 100, "preserveDefaultVlan": true}),
        ),
    );
    let mut gw = net("gw", 70, json!({"vlan": 400, "isGateway": true}));
    gw["plugins"][0]["ipam"]["ranges"][0][0] = json!({"subnet": "10.113.0.0/24"});
    node.write_conf("60-gw.conflist", &gw);

    let pods: Vec<Netns> = ["a", "b", "c", "d", "t", "o", "k", "g"]
        .iter()
        .map(|p| Netns::new(&format!("brv-{p}")))
        .collect();
    let [a, b, c, d, t, o, k, g] = &pods[..] else {
        unreachable!()
    };
    let mut results = Vec::new();
    for (client, net, pod) in [
        (Client::Cnitool, "v100", a),
        (Client::GoCnitool, "v100", b),
        (Client::Cri, "v200", c),
        (Client::Cnitool, "v300", d),
        (Client::Cnitool, "trunk", t),
        (Client::Cnitool, "tronly", o),
        (Client::Cnitool, "keep", k),
        (Client::Cnitool, "gw", g),
    ] {
        let out = run_ok(client, &node, net, "add", pod, pod.name());
        let r: Value = match client {
            Client::Cri => json!(null),
            _ => serde_json::from_str(&out.stdout).unwrap(),
        };
        results.push((client, net, pod, r));
    }
    let n = &node.ns;
    let br = link_of(n, "vbr");
    assert_eq!(br["linkinfo"]["info_data"]["vlan_filtering"], 1, "{br}");
    let vlans = |i: usize| port_vlans(n, &host_veth(&results[i].3));
    assert_eq!(vlans(0), ["100 PVID untagged"]);
    assert_eq!(vlans(3), ["300 PVID untagged"]);
    assert_eq!(
        vlans(4),
        ["100", "200-201", "300 PVID untagged"],
        "trunk with a native VLAN"
    );
    assert_eq!(
        vlans(5),
        ["1 PVID untagged", "100"],
        "a trunk alone: VLAN 1 native"
    );
    assert_eq!(
        vlans(6),
        ["1 untagged", "100 PVID untagged"],
        "preserveDefaultVlan"
    );
    // The gateway veth's peer is the bridge port in VLAN 400.
    let gw_port = n
        .ip_json(&["link", "show", "master", "vbr"])
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["link"] == "vbr.400")
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .expect("the VLAN gateway's port");
    assert_eq!(
        port_vlans(n, &gw_port),
        ["400 PVID untagged"],
        "the gateway veth"
    );
    assert_eq!(results[7].3["interfaces"][3]["name"], "vbr.400");

    // Traffic: one VLAN yes, across no.
    assert!(ping_ok(a, "10.110.0.11"), "VLAN 100 to VLAN 100");
    assert!(!ping_ok(a, "10.110.0.20"), "VLAN 100 reached VLAN 200");
    assert!(!ping_ok(c, "10.110.0.40"), "VLAN 200 reached VLAN 300");
    // The trunk pod: untagged is VLAN 300 (native), tagged 100 and 200.
    assert!(ping_ok(t, "10.110.0.40"), "the trunk's native VLAN");
    assert!(
        !ping_ok(t, "10.110.0.10"),
        "untagged from the trunk reached VLAN 100"
    );
    for (vid, peer, addr) in [("100", a, "10.111.0.10"), ("200", c, "10.112.0.20")] {
        let sub = format!("eth0.{vid}");
        t.ip(&[
            "link", "add", "link", "eth0", "name", &sub, "type", "vlan", "id", vid,
        ]);
        let mine = addr.rsplit_once('.').unwrap().0.to_string() + ".1/24";
        t.ip(&["addr", "add", &mine, "dev", &sub]);
        t.ip(&["link", "set", &sub, "up"]);
        peer.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
        assert!(ping_ok(t, addr), "the trunk's tagged VLAN {vid}");
    }
    assert!(ping_ok(g, "10.113.0.1"), "the VLAN 400 gateway");

    // CHECK: passes; a port without its VLAN fails.
    for (client, net, pod, _) in &results {
        if *client != Client::Cri {
            run_ok(*client, &node, net, "check", pod, pod.name());
        }
    }
    let veth = host_veth(&results[4].3);
    let out = exec_in(n, "bridge", &["vlan", "del", "dev", &veth, "vid", "200"]);
    assert!(out.status.success(), "{out:?}");
    let out = run(Client::Cnitool, &node, "trunk", "check", t, t.name());
    assert!(
        out.stderr.contains("has VLANs [100, 201, 300 PVID untagged], not what vlan/vlanTrunk/preserveDefaultVlan ask for"),
        "{out:?}"
    );
    for (client, net, pod, _) in &results {
        run_ok(*client, &node, net, "del", pod, pod.name());
    }
    let ports: Vec<String> = n
        .ip_json(&["link", "show", "master", "vbr"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        ports.len(),
        1,
        "only the VLAN gateway's port stays: {ports:?}"
    );
}

/// Go 1.1.1's bridge keeps the default VLAN on an access port (it predates
/// `preserveDefaultVlan`); ours with `preserveDefaultVlan` gives the very
/// same port VLANs, and the same pod.
#[test]
fn fullkernel_bridge_vlan_side_by_side_with_go() {
    if !full_kernel("fullkernel_bridge_vlan_side_by_side_with_go") {
        return;
    }
    let node = Node::new("brv-go");
    let data = TempDir::new("brv-go");
    let pods = [Netns::new("brvg-ours"), Netns::new("brvg-go")];
    let mut seen = Vec::new();
    for (i, side) in ["ours", "go"].into_iter().enumerate() {
        let mut conf = json!({"cniVersion": "1.0.0", "name": "brvg", "type": "bridge",
            "bridge": format!("{side}br"), "vlan": 100,
            "ipam": {"type": "host-local", "dataDir": data.path().join(side),
                     "ranges": [[{"subnet": "10.114.0.0/24"}]]}});
        if side == "ours" {
            conf["preserveDefaultVlan"] = json!(true);
        }
        let out = if side == "ours" {
            ours(&node.ns, "ADD", Some(&pods[i]), "brvg", "eth0", &conf)
        } else {
            match gos(&node.ns, "ADD", Some(&pods[i]), "brvg", "eth0", &conf) {
                Some(o) => o,
                None => return,
            }
        };
        let r = out.result();
        seen.push((port_vlans(&node.ns, &host_veth(&r)), pod_state(&pods[i])));
        let out = if side == "ours" {
            ours(&node.ns, "DEL", Some(&pods[i]), "brvg", "eth0", &conf)
        } else {
            gos(&node.ns, "DEL", Some(&pods[i]), "brvg", "eth0", &conf).unwrap()
        };
        assert_eq!(out.exit_code, 0, "{side}: {out:?}");
    }
    assert_eq!(seen[0].0, ["1 untagged", "100 PVID untagged"]);
    assert_eq!(seen[0], seen[1]);
}

// ---- the shared flow on this kernel ------------------------------------------------

/// Debian's 6.1 refuses a new link whose name the node has, even when it is
/// made in another namespace (this machine's 6.18 does not): a macvlan and
/// an ipvlan named `eth0` into pods of a node that has its own `eth0` go
/// through a temporary name, and nothing of it is left on the node or in
/// the pods after DEL; a pod that has `eth0` already is still code 100.
#[test]
fn fullkernel_links_named_like_a_node_link_are_made_in_the_pod() {
    if !full_kernel("fullkernel_links_named_like_a_node_link_are_made_in_the_pod") {
        return;
    }
    let t = Twins::new("fk-name");
    let n = &t.node.ns;
    n.ip(&["link", "add", "eth0", "type", "dummy"]);
    let before = NetSnapshot::take_with(n, false);
    for plugin in [
        json!({"type": "macvlan", "master": "up0"}),
        json!({"type": "ipvlan", "master": "go0"}),
    ] {
        let kind = plugin["type"].as_str().unwrap().to_string();
        let conf = t.conf(&kind, plugin);
        let pod = Netns::new(&format!("name-{kind}"));
        let r = ours(n, "ADD", Some(&pod), "name", "eth0", &conf).result();
        assert_eq!(r["interfaces"][0]["name"], "eth0", "{kind}");
        assert_eq!(
            link_of(&pod, "eth0")["linkinfo"]["info_kind"],
            kind.as_str()
        );
        assert_eq!(pod_links(&pod), [format!("eth0 {kind}")]);
        ours(
            n,
            "CHECK",
            Some(&pod),
            "name",
            "eth0",
            &with_prev(&conf, &r),
        )
        .assert_silent_ok();
        ours(n, "ADD", Some(&pod), "name2", "eth0", &conf).assert_error(
            100,
            "container interface CNI_IFNAME \"eth0\" already exists in CNI_NETNS",
        );
        ours(n, "DEL", Some(&pod), "name", "eth0", &conf).assert_silent_ok();
        assert_eq!(pod_links(&pod), Vec::<String>::new(), "{kind}");
    }
    assert_eq!(NetSnapshot::take_with(n, false), before);
}

/// vlan without IPAM (upstream v1.10, #1302): an omitted or empty `ipam`
/// gives a VLAN interface that is up with no address (the workload
/// addresses it: SLAAC in a router namespace), through the three clients;
/// CHECK passes, STATUS answers, DEL removes it.
#[test]
fn fullkernel_vlan_without_ipam_is_layer_2_only() {
    if !full_kernel("fullkernel_vlan_without_ipam_is_layer_2_only") {
        return;
    }
    for (client, ipam) in [
        (Client::Cri, None),
        (Client::GoCnitool, Some(json!({}))),
        (Client::Cnitool, None),
    ] {
        let tag = format!("vl2-{client:?}").to_lowercase();
        let node = Node::new(&tag);
        node.ns.ip(&["link", "add", "trunk0", "type", "dummy"]);
        node.ns.ip(&["link", "set", "trunk0", "up"]);
        let mut plugin = json!({"type": "vlan", "master": "trunk0", "vlanId": 42});
        if let Some(ipam) = &ipam {
            plugin["ipam"] = ipam.clone();
        }
        // Debian's Go libcni (go-cni's too) reads results up to 1.0.0.
        let version = if client == Client::Cnitool {
            "1.1.0"
        } else {
            "1.0.0"
        };
        node.write_conf(
            "10-vl2.conflist",
            &json!({"cniVersion": version, "name": "vl2", "plugins": [plugin]}),
        );
        let pod = Netns::new(&format!("{tag}-pod"));
        let out = run_ok(client, &node, "vl2", "add", &pod, "vl2-a");
        if client == Client::Cnitool {
            let r: Value = serde_json::from_str(&out.stdout).unwrap();
            assert_eq!(
                r,
                json!({"cniVersion": "1.1.0",
                       "interfaces": [{"name": "eth0", "mac": mac_of(&pod, "eth0"), "mtu": 1500,
                                       "sandbox": pod.path().display().to_string()}],
                       "dns": {}}),
                "{r}"
            );
        }
        let link = link_of(&pod, "eth0");
        assert_eq!(link["linkinfo"]["info_kind"], "vlan", "{client:?}");
        assert_eq!(link["linkinfo"]["info_data"]["id"], 42, "{client:?}");
        assert!(pod.link_is_up("eth0"), "{client:?}");
        assert_eq!(
            global_addrs(&pod, "eth0"),
            Vec::<String>::new(),
            "{client:?}"
        );
        if client != Client::Cri {
            run_ok(client, &node, "vl2", "check", &pod, "vl2-a");
        }
        if client == Client::Cnitool {
            let out = node.cnitool_with(&bin("cnitool"), &["status", "vl2"], &[]);
            assert_eq!(out.exit_code, 0, "{out:?}");
        }
        run_ok(client, &node, "vl2", "del", &pod, "vl2-a");
        assert_eq!(pod_links(&pod), Vec::<String>::new(), "{client:?}");
    }
}
