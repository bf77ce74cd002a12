//! The ptp plugin, black box, in throwaway namespaces: every test has its
//! own node namespace (the plugins and the runtimes run there) with an
//! "upstream" peer namespace wired to it (10.9.0.2, fd00:9::2; the node is
//! .1) and pod namespaces beside it. Real traffic: pod to pod through the
//! node, pod to node, a host port through ptp + portmap from the peer;
//! kind's kindnet chain through go-cni-cri (containerd's CRI path),
//! go-cnitool (upstream Go libcni) and our cnitool; and Debian's Go 1.1.1
//! `ptp` side by side: the same node and pod state, result, CHECK and DEL,
//! each deleting what the other made.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tests::*;

/// The pod subnets of this file's networks.
const V4_SUBNET: &str = "10.244.1.0/24";
const V6_SUBNET: &str = "fd00:10:244:1::/64";

/// kind's kindnet conflist (`ptp` + `host-local` + `portmap`, dual-stack),
/// at `version`, leases under `leases`.
fn kindnet(net: &str, version: &str, leases: &Path) -> Value {
    json!({
        "cniVersion": version,
        "name": net,
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "dataDir": leases,
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                    "ranges": [[{"subnet": V4_SUBNET}], [{"subnet": V6_SUBNET}]]
                },
                "mtu": 1500
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

/// A node with an upstream peer, a lease dir and a `CNI_PATH` of our
/// plugins plus any script a test adds.
struct Site {
    node: Node,
    peer: Peer,
    leases: TempDir,
    path: TempDir,
}

impl Site {
    fn new(tag: &str) -> Site {
        let node = Node::new(tag);
        node.ns.ip(&["link", "set", "lo", "up"]);
        let peer = Peer::attach(&node.ns, &format!("up-{tag}"), 9);
        let path = TempDir::new(&format!("path-{tag}"));
        for p in ["ptp", "host-local", "portmap", "loopback"] {
            std::os::unix::fs::symlink(bin(p), path.path().join(p)).expect("symlink");
        }
        Site {
            node,
            peer,
            leases: TempDir::new(&format!("leases-{tag}")),
            path,
        }
    }

    /// A single ptp config (dual-stack host-local) with `extra` on top.
    fn conf(&self, net: &str, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.1.0",
            "name": net,
            "type": "ptp",
            "ipam": {
                "type": "host-local",
                "dataDir": self.leases.path(),
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                "ranges": [[{"subnet": V4_SUBNET}], [{"subnet": V6_SUBNET}]]
            }
        });
        merge(&mut c, extra);
        c
    }

    fn call(&self, cmd: &str, pod: Option<&Netns>, cid: &str, conf: &Value) -> PluginOutput {
        PluginCall {
            node: &self.node.ns,
            plugin: &bin("ptp"),
            cni_path: &self.path.path().display().to_string(),
            command: cmd,
            netns: pod.map(|p| p.path()),
            container_id: cid,
            conf,
            extra: &[],
        }
        .run()
    }

    fn add(&self, pod: &Netns, cid: &str, conf: &Value) -> Value {
        self.call("ADD", Some(pod), cid, conf).result()
    }

    fn del(&self, pod: Option<&Netns>, cid: &str, conf: &Value) {
        self.call("DEL", pod, cid, conf).assert_silent_ok();
    }

    fn leases(&self, net: &str) -> Vec<String> {
        leases_in(&self.leases.path().join(net))
    }

    fn veths(&self) -> Vec<String> {
        links_of_kind(&self.node.ns, "veth")
            .into_iter()
            .filter(|v| v.starts_with("veth"))
            .collect()
    }

    fn script(&self, name: &str, body: &str) -> PathBuf {
        self.path
            .write_executable(name, &format!("#!/bin/sh\n{body}\n"))
    }

    /// The node and the files: what a DEL must bring back.
    fn state(&self) -> (NetSnapshot, Vec<String>) {
        let mut files = tree(self.leases.path());
        files.extend(tree(self.node.cache_dir.path()));
        files.retain(|f| !f.contains("last_reserved_ip."));
        (NetSnapshot::take(&self.node.ns), files)
    }
}

fn with_prev(conf: &Value, result: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = result.clone();
    c
}

/// The addresses of a pod's eth0: (IPv4, IPv6), without prefix.
fn pod_addrs(pod: &Netns) -> (String, String) {
    let a = global_addrs(pod, "eth0");
    let bare = |s: &String| s.split('/').next().unwrap().to_string();
    let v4 = a.iter().find(|a| !a.contains(':')).map(bare).expect("IPv4");
    let v6 = a.iter().find(|a| a.contains(':')).map(bare).expect("IPv6");
    (v4, v6)
}

#[test]
fn ptp_answers_version() {
    let out = call_plugin(None, &bin("ptp"), &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["supportedVersions"],
        json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
}

// ---- kindnet through the three runtimes ---------------------------------------

/// Who runs the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// go-cni-cri: containerd's CRI path (loopback first).
    Cri,
    /// go-cnitool: upstream Go libcni.
    GoCnitool,
    /// Our cnitool.
    Cnitool,
}

impl Client {
    /// The clients this machine has (a missing Go tool is said loudly, and
    /// fails under CI).
    fn available() -> Vec<(Client, PathBuf)> {
        let mut v = Vec::new();
        if let Some(t) = go_cni_cri() {
            v.push((Client::Cri, t));
        }
        if let Some(t) = go_cnitool() {
            v.push((Client::GoCnitool, t));
        }
        v.push((Client::Cnitool, bin("cnitool")));
        v
    }

    /// `verb` (add, check, del) of container `id` in `pod` (`None`: an
    /// empty netns path, as a runtime whose sandbox is gone), with host
    /// port 8080 to 80 when `port`.
    #[allow(clippy::too_many_arguments)]
    fn run(
        self,
        tool: &Path,
        node: &Node,
        net: &str,
        verb: &str,
        pod: Option<&Netns>,
        id: &str,
        port: bool,
    ) -> PluginOutput {
        let netns = pod
            .map(|p| p.path().display().to_string())
            .unwrap_or_default();
        match self {
            Client::Cri => {
                let verb = match verb {
                    "add" => "setup",
                    "del" => "remove",
                    v => v,
                };
                let extra: &[&str] = if port { &["-port", "8080:80/tcp"] } else { &[] };
                node.cri(tool, verb, pod, id, extra)
            }
            Client::GoCnitool | Client::Cnitool => {
                let caps = if port {
                    r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#
                } else {
                    "{}"
                };
                let env = [("CNI_CONTAINERID", id), ("CAP_ARGS", caps)];
                let args = [verb, net, netns.as_str()];
                if self == Client::GoCnitool {
                    node.go_cnitool(tool, &args, &env)
                } else {
                    node.cnitool_with(tool, &args, &env)
                }
            }
        }
    }
}

/// kindnet's chain through `client` at `version`: two pods reach each
/// other (IPv4, IPv6), the node, and the first serves a host port to the
/// upstream peer (both families); CHECK passes where the version has it;
/// DEL (the second pod's after its namespace is gone) brings the node and
/// the files back to what they were after a warm-up ADD and DEL.
fn kindnet_through(client: Client, tool: &Path, version: &str) {
    let tag = format!("kn-{}-{}", client_tag(client), version.replace('.', ""));
    let site = Site::new(&tag);
    let net = "kindnet";
    site.node.write_conf(
        "10-kindnet.conflist",
        &kindnet(net, version, site.leases.path()),
    );
    let what = format!("{client:?} {version}");

    // The warm-up leaves what a cycle leaves by design (portmap's table).
    let warm = Netns::new(&format!("warm-{tag}"));
    let out = client.run(tool, &site.node, net, "add", Some(&warm), "warm-up", true);
    assert_eq!(out.exit_code, 0, "{what}: warm-up ADD: {out:?}");
    let out = client.run(tool, &site.node, net, "del", Some(&warm), "warm-up", true);
    assert_eq!(out.exit_code, 0, "{what}: warm-up DEL: {out:?}");
    let baseline = site.state();

    let pod1 = Netns::new(&format!("p1-{tag}"));
    let pod2 = Netns::new(&format!("p2-{tag}"));
    for (pod, id, port) in [(&pod1, "kn-pod1", true), (&pod2, "kn-pod2", false)] {
        let out = client.run(tool, &site.node, net, "add", Some(pod), id, port);
        assert_eq!(out.exit_code, 0, "{what}: ADD {id}: {out:?}");
    }
    let (a4, a6) = pod_addrs(&pod1);
    let (b4, b6) = pod_addrs(&pod2);
    assert!(a4.starts_with("10.244.1.") && b4.starts_with("10.244.1."));
    assert!(a6.starts_with("fd00:10:244:1::") && b6.starts_with("fd00:10:244:1::"));
    // Both node ends carry the one gateway.
    let veths = site.veths();
    assert_eq!(veths.len(), 2, "{what}: {veths:?}");
    for v in &veths {
        assert_eq!(
            global_addrs(&site.node.ns, v),
            ["10.244.1.1/32", "fd00:10:244:1::1/128"],
            "{what}: {v}"
        );
    }
    // go-cni's own loopback network is at 0.3.1, which has no CHECK, so
    // containerd's path cannot CHECK (containerd never does).
    if version != "0.3.1" && client != Client::Cri {
        for (pod, id, port) in [(&pod1, "kn-pod1", true), (&pod2, "kn-pod2", false)] {
            let out = client.run(tool, &site.node, net, "check", Some(pod), id, port);
            assert_eq!(out.exit_code, 0, "{what}: CHECK {id}: {out:?}");
        }
    }

    // Pod to pod, through the node.
    for (from, to) in [(&pod1, &b4), (&pod1, &b6), (&pod2, &a4), (&pod2, &a6)] {
        assert_ping(from, to);
    }
    let l2 = echo_server(&pod2, "pod2", 5000);
    assert_eq!(ask_ok(&pod1, &b4, 5000), format!("pod2 {a4}"), "{what}");
    assert_eq!(ask_ok(&pod1, &b6, 5000), format!("pod2 {a6}"), "{what}");
    // Pod to node: the gateway and the node's own address upstream.
    let _ln = echo_server(&site.node.ns, "node", 6000);
    for node_ip in ["10.244.1.1", "fd00:10:244:1::1", "10.9.0.1", "fd00:9::1"] {
        assert_ping(&pod1, node_ip);
    }
    assert_eq!(
        ask_ok(&pod1, "10.9.0.1", 6000),
        format!("node {a4}"),
        "{what}"
    );
    assert_eq!(
        ask_ok(&pod2, "fd00:9::1", 6000),
        format!("node {b6}"),
        "{what}"
    );
    // The host port, from upstream, in both families.
    let _l1 = echo_server(&pod1, "pod1", 80);
    let peer = &site.peer;
    assert_eq!(
        ask_ok(&peer.ns, &peer.node_v4(), 8080),
        format!("pod1 {}", peer.v4()),
        "{what}"
    );
    assert_eq!(
        ask_ok(&peer.ns, &peer.node_v6(), 8080),
        format!("pod1 {}", peer.v6()),
        "{what}"
    );

    // DEL: pod1 as usual; pod2 once its sandbox is gone (an empty netns
    // path, as containerd tears down a dead sandbox).
    let out = client.run(tool, &site.node, net, "del", Some(&pod1), "kn-pod1", true);
    assert_eq!(out.exit_code, 0, "{what}: DEL pod1: {out:?}");
    // The other pod keeps its gateway.
    assert_ping(&pod2, "10.244.1.1");
    assert_ping(&pod2, "fd00:10:244:1::1");
    // Gone: nothing runs in it any more, and its name is deleted.
    drop(l2);
    drop(pod2);
    let empty = if client == Client::Cri {
        None
    } else {
        // The cnitools need a path; a gone one works the same.
        Some(&pod1)
    };
    let out = client.run(tool, &site.node, net, "del", empty, "kn-pod2", false);
    assert_eq!(out.exit_code, 0, "{what}: DEL pod2: {out:?}");
    wait_for("the gone pod's veth to go", || site.veths().is_empty());
    assert_eq!(site.leases(net), Vec::<String>::new(), "{what}: leases");
    let now = site.state();
    assert_eq!(
        now.0.diff(&baseline.0),
        Vec::<String>::new(),
        "{what}: the node differs from before"
    );
    assert_eq!(now.1, baseline.1, "{what}: files");
}

fn client_tag(c: Client) -> &'static str {
    match c {
        Client::Cri => "cri",
        Client::GoCnitool => "gotool",
        Client::Cnitool => "tool",
    }
}

/// kind writes 0.3.1 (no CHECK there); 1.0.0 adds CHECK.
fn kindnet_with(client: Client) {
    let Some((_, tool)) = Client::available().into_iter().find(|(c, _)| *c == client) else {
        return; // said loudly, a failure under CI
    };
    for version in ["0.3.1", "1.0.0"] {
        kindnet_through(client, &tool, version);
    }
}

#[test]
fn kindnet_chain_through_go_cni_cri() {
    if require_root("kindnet_chain_through_go_cni_cri") {
        kindnet_with(Client::Cri);
    }
}

#[test]
fn kindnet_chain_through_go_cnitool() {
    if require_root("kindnet_chain_through_go_cnitool") {
        kindnet_with(Client::GoCnitool);
    }
}

#[test]
fn kindnet_chain_through_our_cnitool() {
    if require_root("kindnet_chain_through_our_cnitool") {
        kindnet_with(Client::Cnitool);
    }
}

// ---- side by side with Go 1.1.1 ---------------------------------------------

/// Our ptp or Go's, with its own host-local, in its own node.
struct Side {
    node: Netns,
    pod: Netns,
    plugin: PathBuf,
    cni_path: String,
    leases: TempDir,
    /// Whether the config names `ipMasqBackend` (iptables).
    masq_key: bool,
}

impl Side {
    fn new(tag: &str, plugin: PathBuf, cni_path: &str, masq_key: bool) -> Side {
        let node = Netns::new(&format!("node-{tag}"));
        node.ip(&["link", "set", "lo", "up"]);
        Side {
            pod: Netns::new(&format!("pod-{tag}")),
            node,
            plugin,
            cni_path: cni_path.to_string(),
            leases: TempDir::new(&format!("leases-{tag}")),
            masq_key,
        }
    }

    fn conf(&self) -> Value {
        let mut c = json!({
            // The Go 1.1.1 reference speaks up to 1.0.0; it ignores
            // ipMasqBackend (it only has iptables).
            "cniVersion": "1.0.0", "name": "cmp", "type": "ptp",
            "ipMasq": true, "ipMasqBackend": "iptables", "mtu": 1400,
            "ipam": {"type": "host-local", "dataDir": self.leases.path(),
                     "ranges": [[{"subnet": V4_SUBNET}], [{"subnet": V6_SUBNET}]],
                     "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.0.2.0/24", "gw": "10.244.1.254"},
                                {"dst": "::/0"}]}
        });
        if !self.masq_key {
            c.as_object_mut().unwrap().remove("ipMasqBackend");
        }
        c
    }

    /// `cmd` with `plugin` (this side's, or the other's) and `cni_path`.
    fn call_with(&self, plugin: &Path, cni_path: &str, cmd: &str, conf: &Value) -> PluginOutput {
        let netns = self.pod.path().display().to_string();
        call_plugin(
            Some(&self.node),
            plugin,
            &[
                ("CNI_COMMAND", cmd),
                ("CNI_CONTAINERID", "ctr-cmp"),
                ("CNI_NETNS", &netns),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", cni_path),
            ],
            &conf.to_string(),
        )
    }

    fn call(&self, cmd: &str, conf: &Value) -> PluginOutput {
        self.call_with(&self.plugin, &self.cni_path, cmd, conf)
    }

    /// Everything ptp makes, without what is random (the veth name, MACs).
    fn state(&self) -> Value {
        let veths = links_of_kind(&self.node, "veth");
        assert_eq!(veths.len(), 1, "{veths:?}");
        let veth = &veths[0];
        let host = self.node.link(veth).unwrap();
        let eth0 = self.pod.link("eth0").unwrap();
        let routes = |ns: &Netns, args: &[&str]| {
            let mut v = ns.ip_json(args);
            for r in v.as_array_mut().unwrap() {
                let o = r.as_object_mut().unwrap();
                o.remove("expires");
                if o.get("dev").and_then(Value::as_str) == Some(veth.as_str()) {
                    o.insert("dev".into(), json!("<veth>"));
                }
            }
            v
        };
        let sysctl = |ns: &Netns, k: &str| {
            let out = run_ok(ns.command("cat").arg(Path::new("/proc/sys").join(k)));
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        json!({
            "veth_kind": host["linkinfo"]["info_kind"],
            "veth_mtu": host["mtu"],
            "veth_up": self.node.link_is_up(veth),
            "veth_addrs": global_addrs(&self.node, veth),
            "node_routes4": routes(&self.node, &["route", "show"]),
            "node_routes6": routes(&self.node, &["-6", "route", "show"]),
            "veth_accept_ra": sysctl(&self.node, &format!("net/ipv6/conf/{veth}/accept_ra")),
            "ip_forward": sysctl(&self.node, "net/ipv4/ip_forward"),
            "ipv6_forwarding": sysctl(&self.node, "net/ipv6/conf/all/forwarding"),
            "pod_kind": eth0["linkinfo"]["info_kind"],
            "pod_mtu": eth0["mtu"],
            "pod_up": self.pod.link_is_up("eth0"),
            "pod_addrs": global_addrs(&self.pod, "eth0"),
            "pod_routes4": routes(&self.pod, &["route", "show"]),
            "pod_routes6": routes(&self.pod, &["-6", "route", "show"]),
            "nat": nat_rules(&self.node),
        })
    }
}

/// The nat table rules of both families (`-A ...` lines and chain names).
fn nat_rules(ns: &Netns) -> Vec<String> {
    let mut v = Vec::new();
    for tool in ["iptables-save", "ip6tables-save"] {
        let out = run_ok(ns.command(tool).args(["-t", "nat"]));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line.starts_with("-A ") {
                v.push(format!("{tool} {line}"));
            } else if let Some(chain) = line.strip_prefix(':') {
                v.push(format!("{tool} :{}", chain.split(' ').next().unwrap_or("")));
            }
        }
    }
    v
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
fn same_state_result_check_and_del_as_the_go_reference() {
    if !require_root("same_state_result_check_and_del_as_the_go_reference") {
        return;
    }
    same_as_the_go_reference(true);
}

/// With no `ipMasqBackend` our ADD writes Go's iptables rules, so Go
/// 1.1.1's DEL (iptables only) removes them (on main it failed on the
/// missing chain and our nft rule stayed).
#[test]
fn same_state_result_check_and_del_as_the_go_reference_with_no_backend_key() {
    if !require_root("same_state_result_check_and_del_as_the_go_reference_with_no_backend_key") {
        return;
    }
    same_as_the_go_reference(false);
}

fn same_as_the_go_reference(masq_key: bool) {
    let (Some(go_ptp), Some(_)) = (go_plugin("ptp"), go_plugin("host-local")) else {
        return;
    };
    let ours_path = bin_dir().display().to_string();
    let t = if masq_key { "" } else { "d" };
    let ours = Side::new(&format!("ptp{t}-ours"), bin("ptp"), &ours_path, masq_key);
    let go = Side::new(
        &format!("ptp{t}-go"),
        go_ptp.clone(),
        GO_PLUGIN_DIR,
        masq_key,
    );

    let go_result = go.call("ADD", &go.conf()).result();
    let our_result = ours.call("ADD", &ours.conf()).result();
    assert_eq!(
        normalized(our_result.clone()),
        normalized(go_result.clone())
    );
    assert_eq!(
        our_result["ips"],
        json!([
            {"interface": 1, "address": "10.244.1.2/24", "gateway": "10.244.1.1"},
            {"interface": 1, "address": "fd00:10:244:1::2/64", "gateway": "fd00:10:244:1::1"}
        ])
    );
    assert_eq!(our_result["interfaces"][1]["mtu"], 1400);

    let our_state = ours.state();
    assert_eq!(our_state, go.state());
    // What the state is, so the comparison cannot pass on two empty sides.
    assert_eq!(
        our_state["veth_addrs"],
        json!(["10.244.1.1/32", "fd00:10:244:1::1/128"])
    );
    assert_eq!(
        our_state["pod_addrs"],
        json!(["10.244.1.2/24", "fd00:10:244:1::2/64"])
    );
    assert_eq!(
        (&our_state["veth_mtu"], &our_state["pod_mtu"]),
        (&json!(1400), &json!(1400))
    );
    let show = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{} via={} src={} scope={}",
                    r["dst"].as_str().unwrap_or(""),
                    r["gateway"].as_str().unwrap_or("-"),
                    r["prefsrc"].as_str().unwrap_or("-"),
                    r["scope"].as_str().unwrap_or("-")
                )
            })
            .collect()
    };
    assert_eq!(
        show(&our_state["pod_routes4"]),
        [
            "default via=10.244.1.1 src=- scope=-",
            "10.244.1.0/24 via=10.244.1.1 src=10.244.1.2 scope=-",
            "10.244.1.1 via=- src=10.244.1.2 scope=link",
            "192.0.2.0/24 via=10.244.1.254 src=- scope=-",
        ]
    );
    assert_eq!(
        show(&our_state["node_routes4"]),
        ["10.244.1.2 via=- src=- scope=host"]
    );
    assert!(
        show(&our_state["pod_routes6"]).contains(
            &"fd00:10:244:1::/64 via=fd00:10:244:1::1 src=fd00:10:244:1::2 scope=-".to_string()
        ),
        "{}",
        our_state["pod_routes6"]
    );
    assert_eq!(
        (&our_state["ip_forward"], &our_state["ipv6_forwarding"]),
        (&json!("1"), &json!("1"))
    );
    assert_eq!(our_state["veth_accept_ra"], "0");
    let nat = our_state["nat"].as_array().unwrap();
    assert!(
        nat.iter()
            .any(|l| l.as_str().unwrap().contains("-A POSTROUTING -s 10.244.1.2/32 -m comment --comment \"name: \\\"cmp\\\" id: \\\"ctr-cmp\\\"\" -j CNI-")),
        "{nat:?}"
    );

    // CHECK: each on its own state, and each on the other's (the same
    // state, the same leases on disk).
    let ours_path = bin_dir().display().to_string();
    for (side, prev) in [(&ours, &our_result), (&go, &go_result)] {
        for (plugin, path) in [
            (bin("ptp"), ours_path.as_str()),
            (go_ptp.clone(), GO_PLUGIN_DIR),
        ] {
            let out = side.call_with(&plugin, path, "CHECK", &with_prev(&side.conf(), prev));
            assert_eq!(
                out.exit_code,
                0,
                "CHECK by {} on {}: {out:?}",
                plugin.display(),
                side.node.name()
            );
        }
    }
    // A node switching in either direction: each DEL removes what the
    // other ADD made.
    for (side, plugin, path) in [
        (&go, bin("ptp"), ours_path.as_str()),
        (&ours, go_ptp.clone(), GO_PLUGIN_DIR),
    ] {
        side.call_with(&plugin, path, "DEL", &side.conf())
            .assert_silent_ok();
        assert_eq!(links_of_kind(&side.node, "veth"), Vec::<String>::new());
        assert!(side.pod.link("eth0").is_none());
        assert_eq!(
            leases_in(&side.leases.path().join("cmp")),
            Vec::<String>::new()
        );
        assert_eq!(
            nat_rules(&side.node)
                .iter()
                .filter(|l| l.contains("CNI-"))
                .count(),
            0,
            "{:?}",
            nat_rules(&side.node)
        );
        assert_eq!(nft_masqueraded(&side.node), Vec::<String>::new());
        // A second DEL, by the other plugin too, is fine.
        side.call("DEL", &side.conf()).assert_silent_ok();
    }
}

// ---- DEL, CHECK, failures, GC, STATUS ---------------------------------------

/// The masqueraded container addresses on nftables, as `addr cid`, sorted:
/// the Go plugins' rules in `inet cni_plugins_masquerade`, `ip saddr A ip
/// daddr != NET masquerade comment "<hash>, net: N, if: eth0, id: C"`.
fn nft_masqueraded(ns: &Netns) -> Vec<String> {
    let mut v: Vec<String> = nft_ruleset(ns)
        .lines()
        .map(str::trim)
        .filter(|l| {
            (l.starts_with("ip saddr ") || l.starts_with("ip6 saddr "))
                && l.contains("masquerade comment")
        })
        .map(|l| {
            let addr = l.split_whitespace().nth(2).unwrap_or_default();
            let cid = l
                .split(", id: ")
                .nth(1)
                .and_then(|t| t.split('"').next())
                .unwrap_or_default();
            format!("{addr} {cid}")
        })
        .collect();
    v.sort();
    v
}

#[test]
fn ipv4_only_and_ipv6_only_networks() {
    if !require_root("ipv4_only_and_ipv6_only_networks") {
        return;
    }
    let site = Site::new("ptp-single");
    for (net, subnet, gw, node_ip) in [
        ("v4only", V4_SUBNET, "10.244.1.1", "10.9.0.1"),
        ("v6only", V6_SUBNET, "fd00:10:244:1::1", "fd00:9::1"),
    ] {
        let pod = Netns::new(&format!("pod-{net}"));
        let mut conf = site.conf(net, json!({}));
        conf["ipam"]["ranges"] = json!([[{"subnet": subnet}]]);
        conf["ipam"]["routes"] =
            json!([{"dst": if net == "v4only" { "0.0.0.0/0" } else { "::/0" }}]);
        let r = site.add(&pod, "ctr-1", &conf);
        assert_eq!(r["ips"].as_array().unwrap().len(), 1, "{r}");
        assert_eq!(r["ips"][0]["gateway"], gw);
        let veth = r["interfaces"][0]["name"].as_str().unwrap();
        let full = if net == "v4only" { 32 } else { 128 };
        assert_eq!(global_addrs(&site.node.ns, veth), [format!("{gw}/{full}")]);
        assert_ping(&pod, gw);
        assert_ping(&pod, node_ip);
        site.call("CHECK", Some(&pod), "ctr-1", &with_prev(&conf, &r))
            .assert_silent_ok();
        site.del(Some(&pod), "ctr-1", &conf);
        assert_eq!(site.veths(), Vec::<String>::new());
        assert_eq!(site.leases(net), Vec::<String>::new());
    }
}

#[test]
fn del_after_the_namespace_is_gone_twice_and_without_netns() {
    if !require_root("del_after_the_namespace_is_gone_twice_and_without_netns") {
        return;
    }
    let site = Site::new("ptp-del");
    let conf = site.conf(
        "delnet",
        json!({"ipMasq": true, "ipMasqBackend": "nftables"}),
    );
    let warm = Netns::new("pod-del-warm");
    site.add(&warm, "warm", &conf);
    site.del(Some(&warm), "warm", &conf);
    let baseline = site.state();

    let pod = Netns::new("pod-del");
    let r = site.add(&pod, "ctr-del", &conf);
    let addr = r["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    assert_eq!(
        nft_masqueraded(&site.node.ns),
        [
            format!("{addr} ctr-del"),
            format!(
                "{} ctr-del",
                r["ips"][1]["address"]
                    .as_str()
                    .unwrap()
                    .split('/')
                    .next()
                    .unwrap()
            )
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    let path = pod.path();
    drop(pod);
    wait_for("the veth to go with the namespace", || {
        site.veths().is_empty()
    });
    // The namespace is gone: DEL still releases the lease and the masquerade.
    let out = PluginCall {
        node: &site.node.ns,
        plugin: &bin("ptp"),
        cni_path: &site.path.path().display().to_string(),
        command: "DEL",
        netns: Some(path),
        container_id: "ctr-del",
        conf: &conf,
        extra: &[],
    }
    .run();
    out.assert_silent_ok();
    assert_eq!(site.leases("delnet"), Vec::<String>::new());
    assert_eq!(nft_masqueraded(&site.node.ns), Vec::<String>::new());
    // Again, and with no CNI_NETNS at all.
    site.del(None, "ctr-del", &conf);
    site.del(None, "ctr-del", &conf);
    let now = site.state();
    assert_eq!(now.0.diff(&baseline.0), Vec::<String>::new());
    assert_eq!(now.1, baseline.1);
}

/// One CHECK case: what to break after the ADD, and the error it gives.
type Break = fn(&Site, &Netns, &Value);

#[test]
fn check_reports_each_difference() {
    if !require_root("check_reports_each_difference") {
        return;
    }
    let site = Site::new("ptp-check");
    let conf = site.conf("chk", json!({"ipMasq": true, "ipMasqBackend": "nftables"}));
    let veth = |r: &Value| r["interfaces"][0]["name"].as_str().unwrap().to_string();
    let cases: Vec<(&str, Break, u64, &str)> = vec![
        ("nothing", |_, _, _| {}, 0, ""),
        (
            "the host route",
            |s, _, r| {
                let v = r["interfaces"][0]["name"].as_str().unwrap();
                let a = r["ips"][0]["address"]
                    .as_str()
                    .unwrap()
                    .replace("/24", "/32");
                s.node.ns.ip(&["route", "del", &a, "dev", v]);
            },
            102,
            "no host route to 10.244.1.",
        ),
        (
            "the node end's gateway",
            |s, _, r| {
                let v = r["interfaces"][0]["name"].as_str().unwrap();
                s.node
                    .ns
                    .ip(&["-6", "addr", "del", "fd00:10:244:1::1/128", "dev", v]);
            },
            102,
            "gateway fd00:10:244:1::1/128 is not on host veth",
        ),
        (
            "the container's route to the gateway",
            |_, p, _| {
                p.ip(&["route", "del", "10.244.1.1/32", "dev", "eth0"]);
            },
            102,
            "no route to gateway 10.244.1.1/32 on container veth \"eth0\"",
        ),
        (
            "the container's route through the gateway",
            |_, p, _| {
                p.ip(&["route", "del", "default"]);
            },
            102,
            "route 0.0.0.0/0 not found",
        ),
        (
            "the container's IPv6 address",
            |_, p, _| {
                p.ip(&["-6", "addr", "flush", "dev", "eth0", "scope", "global"]);
            },
            102,
            "address fd00:10:244:1::",
        ),
        (
            "the masquerade",
            |s, _, r| {
                let a = r["ips"][0]["address"].as_str().unwrap().replace("/24", "");
                // The rule of that address, by its handle.
                let out = run_ok(s.node.ns.command("nft").args([
                    "-a",
                    "list",
                    "chain",
                    "inet",
                    "cni_plugins_masquerade",
                    "masq_checks",
                ]));
                let listing = String::from_utf8_lossy(&out.stdout).into_owned();
                let handle = listing
                    .lines()
                    .find(|l| l.trim().starts_with(&format!("ip saddr {a} ")))
                    .and_then(|l| l.rsplit("# handle ").next())
                    .map(|h| h.trim().to_string())
                    .unwrap_or_else(|| panic!("no rule of {a} in\n{listing}"));
                run_ok(s.node.ns.command("nft").args([
                    "delete",
                    "rule",
                    "inet",
                    "cni_plugins_masquerade",
                    "masq_checks",
                    "handle",
                    &handle,
                ]));
            },
            102,
            "ipMasq: chain inet cni_plugins_masquerade masq_checks has no rule for 10.244.1.",
        ),
        (
            "the container veth's MAC",
            |_, p, _| {
                p.ip(&["link", "set", "eth0", "address", "0a:00:00:00:00:99"]);
            },
            102,
            "container interface \"eth0\" has MAC 0a:00:00:00:00:99",
        ),
    ];
    for (what, breaks, code, needle) in cases {
        let pod = Netns::new("pod-chk");
        let r = site.add(&pod, "ctr-chk", &conf);
        assert_eq!(veth(&r).len(), 12);
        breaks(&site, &pod, &r);
        let out = site.call("CHECK", Some(&pod), "ctr-chk", &with_prev(&conf, &r));
        if code == 0 {
            out.assert_silent_ok();
            // Without the ADD's result there is nothing to compare with.
            site.call("CHECK", Some(&pod), "ctr-chk", &conf)
                .assert_error(7, "prevResult");
        } else {
            out.assert_error(code, needle);
            eprintln!("CHECK after breaking {what}: {}", out.stdout.trim());
        }
        site.del(Some(&pod), "ctr-chk", &conf);
        assert_eq!(site.veths(), Vec::<String>::new(), "{what}");
    }
    assert_eq!(site.leases("chk"), Vec::<String>::new());
}

#[test]
fn failed_adds_leave_nothing() {
    if !require_root("failed_adds_leave_nothing") {
        return;
    }
    let site = Site::new("ptp-fail");
    let marks = TempDir::new("ptp-fail-marks");
    // An IPAM plugin whose address has no gateway: ptp has nothing to
    // route through. It notes every DEL it gets.
    site.script(
        "nogw-ipam",
        &format!(
            r#"if [ "$CNI_COMMAND" = DEL ]; then echo "$CNI_CONTAINERID" >> {}/del; exit 0; fi
echo '{{"cniVersion":"1.0.0","ips":[{{"address":"10.244.1.7/24"}}]}}'"#,
            marks.path().display()
        ),
    );
    // One that fails outright, with a code of its own.
    site.script(
        "bad-ipam",
        &format!(
            r#"if [ "$CNI_COMMAND" = DEL ]; then echo "$CNI_CONTAINERID" >> {}/del; exit 0; fi
echo '{{"cniVersion":"1.0.0","code":11,"msg":"pool busy"}}'; exit 1"#,
            marks.path().display()
        ),
    );
    let good = site.conf(
        "failnet",
        json!({"ipMasq": true, "ipMasqBackend": "nftables"}),
    );
    let warm = Netns::new("pod-fail-warm");
    site.add(&warm, "warm", &good);
    site.del(Some(&warm), "warm", &good);
    let before = site.state();
    let pod = Netns::new("pod-fail");
    let pod_before = NetSnapshot::take_with(&pod, false);

    let mut nogw = good.clone();
    nogw["ipam"] = json!({"type": "nogw-ipam"});
    site.call("ADD", Some(&pod), "ctr-nogw", &nogw)
        .assert_error(7, "ipam: the IPAM result gives 10.244.1.7/24 no gateway");
    let mut bad = good.clone();
    bad["ipam"] = json!({"type": "bad-ipam"});
    site.call("ADD", Some(&pod), "ctr-bad", &bad)
        .assert_error(11, "pool busy");
    // A missing IPAM plugin fails before anything exists.
    let mut missing = good.clone();
    missing["ipam"] = json!({"type": "no-such-ipam"});
    site.call("ADD", Some(&pod), "ctr-missing", &missing)
        .assert_error(101, "no-such-ipam");
    // CNI_IFNAME taken in the pod: refused before IPAM is asked.
    pod.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
    ]);
    site.call("ADD", Some(&pod), "ctr-taken", &good)
        .assert_error(100, "CNI_IFNAME \"eth0\" already exists");
    pod.ip(&["link", "del", "eth0"]);

    // Each failed delegate got its DEL, as the spec asks.
    let dels = std::fs::read_to_string(marks.path().join("del")).unwrap();
    assert_eq!(dels, "ctr-nogw\nctr-bad\n");
    let after = site.state();
    assert_eq!(after.0.diff(&before.0), Vec::<String>::new());
    assert_eq!(after.1, before.1);
    assert_eq!(NetSnapshot::take_with(&pod, false), pod_before);
}

#[test]
fn gc_status_mtu_and_dns() {
    if !require_root("gc_status_mtu_and_dns") {
        return;
    }
    let site = Site::new("ptp-gc");
    let conf = site.conf(
        "gcnet",
        json!({"ipMasq": true, "ipMasqBackend": "nftables", "mtu": 1280,
               "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]}}),
    );
    let (p1, p2) = (Netns::new("pod-gc1"), Netns::new("pod-gc2"));
    let r1 = site.add(&p1, "ctr-keep", &conf);
    site.add(&p2, "ctr-stale", &conf);
    assert_eq!(
        r1["dns"],
        json!({"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]})
    );
    for i in 0..2 {
        assert_eq!(r1["interfaces"][i]["mtu"], 1280);
    }
    assert_eq!(p1.link("eth0").unwrap()["mtu"], 1280);
    assert_eq!(site.leases("gcnet").len(), 4);
    assert_eq!(nft_masqueraded(&site.node.ns).len(), 4);

    // STATUS: IPAM's answer.
    site.call("STATUS", None, "", &conf).assert_silent_ok();
    // GC without a list collects nothing, and says so.
    let out = site.call("GC", None, "", &conf);
    out.assert_silent_ok();
    assert!(out.stderr.contains("lists no valid attachments"), "{out:?}");
    assert_eq!(nft_masqueraded(&site.node.ns).len(), 4);
    assert_eq!(site.leases("gcnet").len(), 4);
    // GC: the stale container's masquerade and leases go, the valid stay.
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-keep", "ifname": "eth0"}]);
    site.call("GC", None, "", &gc).assert_silent_ok();
    let masq = nft_masqueraded(&site.node.ns);
    assert_eq!(masq.len(), 2, "{masq:?}");
    assert!(masq.iter().all(|m| m.ends_with(" ctr-keep")), "{masq:?}");
    assert_eq!(site.leases("gcnet").len(), 2);
    site.del(Some(&p1), "ctr-keep", &conf);
    site.del(Some(&p2), "ctr-stale", &conf);
    assert_eq!(nft_masqueraded(&site.node.ns), Vec::<String>::new());

    // STATUS of IPAM that cannot serve, of a config ptp would refuse.
    site.script(
        "full-ipam",
        r#"echo '{"cniVersion":"1.1.0","code":50,"msg":"no free addresses"}'; exit 1"#,
    );
    let mut full = conf.clone();
    full["ipam"] = json!({"type": "full-ipam"});
    site.call("STATUS", None, "", &full)
        .assert_error(50, "no free addresses");
    let mut noipam = conf.clone();
    noipam["ipam"] = json!({});
    site.call("STATUS", None, "", &noipam)
        .assert_error(7, "ipam");
    site.call("STATUS", None, "", &with_prev(&conf, &json!({})))
        .assert_silent_ok();
}

/// ipMasq on `backend`: traffic leaving the pods' subnet leaves with the
/// node's address, traffic between pods keeps its source; CHECK sees the
/// rules, DEL takes them away.
/// `backend` "default" names none (Go's default: iptables on this node).
fn masquerade_on(backend: &str) {
    let site = Site::new(&format!("ptp-masq-{}", &backend[..3]));
    let net = format!("masq{}", &backend[..3]);
    let conf = if backend == "default" {
        site.conf(&net, json!({"ipMasq": true}))
    } else {
        site.conf(&net, json!({"ipMasq": true, "ipMasqBackend": backend}))
    };
    let backend = if backend == "default" {
        "iptables"
    } else {
        backend
    };
    let (p1, p2) = (Netns::new("pod-masq1"), Netns::new("pod-masq2"));
    let r1 = site.add(&p1, "ctr-m1", &conf);
    let r2 = site.add(&p2, "ctr-m2", &conf);
    let (a4, a6) = pod_addrs(&p1);
    let (b4, _) = pod_addrs(&p2);
    let peer = &site.peer;
    let _up = echo_server(&peer.ns, "peer", 7000);
    assert_eq!(
        ask_ok(&p1, &peer.v4(), 7000),
        format!("peer {}", peer.node_v4())
    );
    assert_eq!(
        ask_ok(&p1, &peer.v6(), 7000),
        format!("peer {}", peer.node_v6())
    );
    let _l2 = echo_server(&p2, "pod2", 7001);
    assert_eq!(ask_ok(&p1, &b4, 7001), format!("pod2 {a4}"));
    for (pod, cid, r) in [(&p1, "ctr-m1", &r1), (&p2, "ctr-m2", &r2)] {
        site.call("CHECK", Some(pod), cid, &with_prev(&conf, r))
            .assert_silent_ok();
    }
    if backend == "iptables" {
        assert_eq!(nft_masqueraded(&site.node.ns), Vec::<String>::new());
        let nat = nat_rules(&site.node.ns);
        for a in [&a4, &a6] {
            let len = if a.contains(':') { 128 } else { 32 };
            assert!(
                nat.iter()
                    .any(|l| l.contains(&format!("-A POSTROUTING -s {a}/{len} "))
                        && l.contains("id: \\\"ctr-m1\\\"")),
                "{a}: {nat:?}"
            );
        }
    } else {
        let m = nft_masqueraded(&site.node.ns);
        assert!(m.contains(&format!("{a4} ctr-m1")), "{m:?}");
        assert!(m.contains(&format!("{a6} ctr-m1")), "{m:?}");
    }
    site.del(Some(&p1), "ctr-m1", &conf);
    site.del(Some(&p2), "ctr-m2", &conf);
    assert!(
        !nat_rules(&site.node.ns).iter().any(|l| l.contains("CNI-")),
        "{:?}",
        nat_rules(&site.node.ns)
    );
    assert_eq!(nft_masqueraded(&site.node.ns), Vec::<String>::new());
}

#[test]
fn ipmasq_on_iptables() {
    if require_root("ipmasq_on_iptables") {
        masquerade_on("iptables");
    }
}

#[test]
fn ipmasq_on_the_default_backend() {
    if require_root("ipmasq_on_the_default_backend") {
        masquerade_on("default");
    }
}

#[test]
fn ipmasq_on_nftables() {
    if require_root("ipmasq_on_nftables") {
        masquerade_on("nftables");
    }
}

/// The config's `dns` replaces IPAM's (host-local's `resolvConf`) when it
/// sets anything, a present but empty list included, as upstream's
/// `dnsConfSet` counts it; an absent `dns`, `{}` or lists that are `null`
/// keep IPAM's.
#[test]
fn dns_lists_present_but_empty_replace_ipams() {
    if !require_root("dns_lists_present_but_empty_replace_ipams") {
        return;
    }
    let site = Site::new("ptp-dns");
    let resolv = site.leases.write(
        "resolv.conf",
        "nameserver 10.96.0.10\nsearch svc.cluster.local\n",
    );
    let ipams = json!({"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]});
    for (i, (dns, want)) in [
        (None, ipams.clone()),
        (Some(json!({})), ipams.clone()),
        (
            Some(json!({"nameservers": null, "search": null})),
            ipams.clone(),
        ),
        (Some(json!({"domain": ""})), ipams.clone()),
        (Some(json!({"nameservers": []})), json!({})),
        (Some(json!({"search": [], "options": []})), json!({})),
        (
            Some(json!({"domain": "cluster.local"})),
            json!({"domain": "cluster.local"}),
        ),
        (
            Some(json!({"nameservers": ["10.0.0.53"], "search": []})),
            json!({"nameservers": ["10.0.0.53"]}),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let mut conf = site.conf("dnsnet", json!({}));
        conf["ipam"]["resolvConf"] = json!(resolv);
        if let Some(dns) = &dns {
            conf["dns"] = dns.clone();
        }
        let pod = Netns::new("pod-dns");
        let cid = format!("ctr-dns-{i}");
        let r = site.add(&pod, &cid, &conf);
        assert_eq!(r["dns"], want, "dns {dns:?}");
        site.del(Some(&pod), &cid, &conf);
    }
}
