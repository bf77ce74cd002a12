//! The chains the README shows, run through the three clients that call
//! plugins on real nodes, as a runtime calls them:
//!
//! - `go-cni-cri`: containerd's go-cni library as containerd 1.6's CRI
//!   plugin drives it for kubelet (loopback first, `K8S_POD_*` args with
//!   `IgnoreUnknown`, capitalised `portMappings` and `bandwidth`, pod
//!   annotations, and a second teardown with an empty netns path);
//! - `go-cnitool`: the upstream Go libcni (as CRI-O and multus call it);
//! - our `cnitool`.
//!
//! For each chain and client: the pod gets its address, answers on a host
//! port from another namespace, is shaped when the chain shapes, passes
//! CHECK (through the libcni clients: containerd never checks), and its teardown leaves the node as it was (links, addresses,
//! routes, qdiscs, firewall, leases, saved files, caches); the teardown
//! without a netns that follows succeeds. A pod whose ADD failed half way
//! is torn down the same way.

use serde_json::{json, Value};
use tests::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Cri,
    GoLibcni,
    Ours,
}

/// A chain of the README, with what it can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chain {
    /// kube-flannel's `10-flannel.conflist`: flannel (bridge delegate) + portmap.
    KubeFlannel,
    /// bridge (ipMasq) + host-local + portmap + bandwidth.
    Full,
    /// podman's generated network: bridge + portmap + firewall + tuning.
    Podman,
    /// The multus second network: macvlan + host-local on a node link.
    Macvlan,
}

impl Chain {
    fn has_portmap(self) -> bool {
        self != Chain::Macvlan
    }

    fn shapes(self) -> bool {
        self == Chain::Full
    }

    fn net_name(self) -> &'static str {
        match self {
            Chain::KubeFlannel => "cbr0",
            Chain::Full => "k8s-pod-network",
            Chain::Podman => "podman",
            Chain::Macvlan => "lan",
        }
    }

    /// The subnet pods get, as `a.b.c.` (a /24, .1 the gateway).
    fn prefix(self) -> &'static str {
        match self {
            Chain::KubeFlannel => "10.244.1.",
            Chain::Full => "10.85.0.",
            Chain::Podman => "10.88.0.",
            Chain::Macvlan => "192.168.77.",
        }
    }
}

/// A node running one chain for one client, with a client namespace
/// behind it (for host ports), a LAN for macvlan, and its state dirs.
struct Bench {
    chain: Chain,
    client: Client,
    node: Node,
    state: TempDir,
    /// Attached to the node on v1 (10.1.0.2, the node is 10.1.0.1).
    outside: Peer,
    /// macvlan's LAN: `lan0` on the node, its peer here at .1.
    lan: Option<Netns>,
}

impl Bench {
    fn new(chain: Chain, client: Client) -> Bench {
        let tag = format!("{chain:?}-{client:?}").to_lowercase();
        let node = Node::new(&tag);
        node.ns.ip(&["link", "set", "lo", "up"]);
        let state = TempDir::new(&format!("state-{tag}"));
        let outside = Peer::attach(&node.ns, &format!("out-{tag}"), 1);
        let lan = (chain == Chain::Macvlan).then(|| {
            let lan = Netns::new(&format!("lan-{tag}"));
            node.ns.ip(&[
                "link",
                "add",
                "lan0",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                lan.name(),
            ]);
            node.ns.ip(&["link", "set", "lan0", "up"]);
            lan.ip(&["addr", "add", "192.168.77.1/24", "dev", "eth0"]);
            lan.ip(&["link", "set", "eth0", "up"]);
            lan.ip(&["link", "set", "lo", "up"]);
            lan
        });
        if chain == Chain::KubeFlannel {
            state.write(
                "subnet.env",
                "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n\
                 FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
            );
        }
        let bench = Bench {
            chain,
            client,
            node,
            state,
            outside,
            lan,
        };
        bench.node.write_conf(
            &format!("10-{}.conflist", chain.net_name()),
            &bench.conflist(),
        );
        bench
    }

    fn dir(&self, name: &str) -> String {
        self.state.path().join(name).display().to_string()
    }

    /// The conflist as the README shows it, with the test's state dirs.
    fn conflist(&self) -> Value {
        let leases = self.dir("leases");
        match self.chain {
            Chain::KubeFlannel => json!({
                "name": "cbr0",
                "cniVersion": "1.0.0",
                "plugins": [
                    {
                        "type": "flannel",
                        "subnetFile": self.dir("subnet.env"),
                        "dataDir": self.dir("flannel"),
                        "ipam": {"dataDir": leases},
                        "delegate": {"hairpinMode": true, "isDefaultGateway": true}
                    },
                    {"type": "portmap", "capabilities": {"portMappings": true}}
                ]
            }),
            Chain::Full => json!({
                "cniVersion": "1.0.0",
                "name": "k8s-pod-network",
                "plugins": [
                    {
                        "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
                        "hairpinMode": true,
                        "ipam": {
                            "type": "host-local", "dataDir": leases,
                            "ranges": [[{"subnet": "10.85.0.0/24"}]],
                            "routes": [{"dst": "0.0.0.0/0"}]
                        }
                    },
                    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
                    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
                ]
            }),
            Chain::Podman => json!({
                "cniVersion": "0.4.0",
                "name": "podman",
                "plugins": [
                    {
                        "type": "bridge", "bridge": "cni-podman0", "isGateway": true,
                        "ipMasq": true, "hairpinMode": true,
                        "ipam": {
                            "type": "host-local", "dataDir": leases,
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "ranges": [[{"subnet": "10.88.0.0/24", "gateway": "10.88.0.1"}]]
                        }
                    },
                    {"type": "portmap", "capabilities": {"portMappings": true}},
                    {"type": "firewall"},
                    {"type": "tuning", "dataDir": self.dir("tuning")}
                ]
            }),
            Chain::Macvlan => json!({
                "cniVersion": "1.0.0",
                "name": "lan",
                "plugins": [{
                    "type": "macvlan", "master": "lan0", "mode": "bridge",
                    "ipam": {
                        "type": "host-local", "dataDir": leases,
                        "ranges": [[{"subnet": "192.168.77.0/24", "rangeStart": "192.168.77.10",
                                     "rangeEnd": "192.168.77.11", "gateway": "192.168.77.1"}]]
                    }
                }]
            }),
        }
    }

    /// One verb for sandbox `id` in `pod` (`None`: the netns is gone),
    /// with host port `host_port` mapped to 80 and, on a shaping chain,
    /// 10 Mbit/s both ways.
    fn call(&self, verb: &str, pod: Option<&Netns>, id: &str, host_port: u16) -> PluginOutput {
        self.call_on(verb, pod, id, host_port, None)
    }

    /// [`Bench::call`] with the host port bound to `host_ip`.
    fn call_on(
        &self,
        verb: &str,
        pod: Option<&Netns>,
        id: &str,
        host_port: u16,
        host_ip: Option<&str>,
    ) -> PluginOutput {
        let port = match host_ip {
            Some(ip) => format!("{host_port}:80/tcp@{ip}"),
            None => format!("{host_port}:80/tcp"),
        };
        let shaped = self.chain.shapes();
        match self.client {
            Client::Cri => {
                let cri = go_cni_cri().expect("go-cni-cri");
                let verb = match verb {
                    "add" => "setup",
                    "del" => "remove",
                    v => v,
                };
                let mut extra = vec!["-port", &port, "-name", "web", "-namespace", "default"];
                if shaped {
                    extra.extend(["-ingress", "10M", "-egress", "10M"]);
                }
                self.node.cri(&cri, verb, pod, id, &extra)
            }
            Client::GoLibcni | Client::Ours => {
                let mut caps = json!({"portMappings": [
                    {"hostPort": host_port, "containerPort": 80, "protocol": "tcp",
                     "hostIP": host_ip.unwrap_or("")}
                ]});
                if shaped {
                    // As CRI-O sends the kubelet annotations: bits/s and bits.
                    caps["bandwidth"] = json!({
                        "ingressRate": 10_000_000, "ingressBurst": 4_294_967_295u64,
                        "egressRate": 10_000_000, "egressBurst": 4_294_967_295u64
                    });
                }
                let caps = caps.to_string();
                let netns = pod
                    .map(|p| p.path().display().to_string())
                    .unwrap_or_default();
                let args = [verb, self.chain.net_name(), netns.as_str()];
                let env = [
                    ("CAP_ARGS", caps.as_str()),
                    ("CNI_CONTAINERID", id),
                    (
                        "CNI_ARGS",
                        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web",
                    ),
                ];
                if self.client == Client::GoLibcni {
                    let go = go_cnitool().expect("go-cnitool");
                    self.node.go_cnitool(&go, &args, &env)
                } else {
                    self.node.cnitool_with(&bin("cnitool"), &args, &env)
                }
            }
        }
    }

    /// The pod's IPv4 address in the client's own output.
    fn pod_ip(&self, out: &PluginOutput) -> String {
        assert_eq!(
            out.exit_code, 0,
            "{:?} {:?}: {out:?}",
            self.chain, self.client
        );
        let v = out.json();
        let ip = match self.client {
            Client::Cri => v["interfaces"]["eth0"]["IPConfigs"][0]["IP"]
                .as_str()
                .map(str::to_string),
            _ => v["ips"][0]["address"]
                .as_str()
                .and_then(|a| a.split('/').next())
                .map(str::to_string),
        };
        ip.unwrap_or_else(|| panic!("no pod address in {v}"))
    }

    /// Everything a teardown must put back: the node's network state and
    /// every file under the state dir and the result cache.
    fn state_now(&self) -> (NetSnapshot, Vec<String>, Vec<String>) {
        (
            NetSnapshot::take(&self.node.ns),
            state_tree(self.state.path()),
            tree(self.node.cache_dir.path()),
        )
    }

    /// Asserts that the node is as `before`, naming what differs.
    fn assert_unchanged(&self, before: &(NetSnapshot, Vec<String>, Vec<String>), when: &str) {
        let now = self.state_now();
        let who = format!("{:?} via {:?}, {when}", self.chain, self.client);
        assert_eq!(before.0.diff(&now.0), Vec::<String>::new(), "{who}");
        assert_eq!(before.1, now.1, "{who}: state files");
        assert_eq!(before.2, now.2, "{who}: result cache");
    }
}

fn run(chain: Chain, client: Client) {
    let test = format!("{chain:?} via {client:?}");
    if !require_root(&test) {
        return;
    }
    if (client == Client::Cri && go_cni_cri().is_none())
        || (client == Client::GoLibcni && go_cnitool().is_none())
    {
        return; // said loudly; a failure under CI=true
    }
    let b = Bench::new(chain, client);

    // A first pod makes what pods share (the bridge, base chains) and goes.
    let warm = Netns::new("warm");
    let out = b.call("add", Some(&warm), "warm0000", 18080);
    b.pod_ip(&out);
    b.call("del", Some(&warm), "warm0000", 18080)
        .assert_silent_ok();
    let before = b.state_now();

    // The pod: its address, a host port from outside, shaping, CHECK.
    let pod = Netns::new("pod");
    let id = "0123456789abcdef0123";
    let ip = b.pod_ip(&b.call("add", Some(&pod), id, 8080));
    assert!(ip.starts_with(chain.prefix()), "{test}: pod address {ip}");
    assert_eq!(global_addrs(&pod, "eth0")[0], format!("{ip}/24"), "{test}");
    let _srv = echo_server(&pod, "pod", 80);
    match &b.lan {
        Some(lan) => assert!(ping_ok(lan, &ip), "{test}: the LAN reaches the pod"),
        None => assert!(ping_ok(&pod, &format!("{}1", chain.prefix())), "{test}"),
    }
    if chain.has_portmap() {
        let answer = ask(&b.outside.ns, &b.outside.node_v4(), 8080);
        assert_eq!(
            answer,
            Some(format!("pod {}", b.outside.v4())),
            "{test}: host port 8080 from another namespace"
        );
    }
    if chain.shapes() {
        let qdiscs = b.node.ns.ip_json(&["link", "show", "type", "ifb"]);
        assert_eq!(qdiscs.as_array().map(Vec::len), Some(1), "{test}: one IFB");
        let out = run_ok(b.node.ns.command("tc").args(["-j", "qdisc", "show"]));
        let tbf = String::from_utf8_lossy(&out.stdout)
            .matches("\"tbf\"")
            .count();
        assert_eq!(tbf, 2, "{test}: ingress and egress shaped");
    }
    // containerd never CHECKs (and go-cni's loopback network is 0.3.1,
    // which has no CHECK); the libcni clients do.
    if client != Client::Cri {
        b.call("check", Some(&pod), id, 8080).assert_silent_ok();
    }

    // Teardown, then containerd's second one without the namespace.
    b.call("del", Some(&pod), id, 8080).assert_silent_ok();
    assert!(pod.link("eth0").is_none(), "{test}");
    b.assert_unchanged(&before, "after remove");
    b.call("del", None, id, 8080).assert_silent_ok();
    b.assert_unchanged(&before, "after the second remove, without a netns");

    // A pod whose ADD fails half way (portmap refuses a host address of a
    // family the pod has none of, after the main plugin made its interface;
    // macvlan: no address left in the range) is removed all the same, with
    // another pod beside it.
    let holder = Netns::new("holder");
    b.pod_ip(&b.call("add", Some(&holder), "holder00", 9090));
    if chain == Chain::Macvlan {
        let other = Netns::new("other");
        b.pod_ip(&b.call("add", Some(&other), "other000", 9091));
        let held = b.state_now();
        let failed = Netns::new("failed");
        let out = b.call("add", Some(&failed), "failed00", 9092);
        assert_ne!(out.exit_code, 0, "{test}: the range is full: {out:?}");
        b.call("del", Some(&failed), "failed00", 9092)
            .assert_silent_ok();
        b.call("del", None, "failed00", 9092).assert_silent_ok();
        b.assert_unchanged(&held, "after removing the pod whose ADD failed");
        b.call("del", Some(&other), "other000", 9091)
            .assert_silent_ok();
    } else {
        let held = b.state_now();
        let failed = Netns::new("failed");
        let out = b.call_on("add", Some(&failed), "failed00", 9093, Some("fd00::99"));
        assert_ne!(out.exit_code, 0, "{test}: an IPv6 host address: {out:?}");
        assert!(
            out.stderr.contains("hostIP") || out.stdout.contains("hostIP"),
            "{out:?}"
        );
        b.call("del", Some(&failed), "failed00", 9093)
            .assert_silent_ok();
        b.call("del", None, "failed00", 9093).assert_silent_ok();
        b.assert_unchanged(&held, "after removing the pod whose ADD failed");
    }
    b.call("del", Some(&holder), "holder00", 9090)
        .assert_silent_ok();
    b.assert_unchanged(&before, "after removing every pod");
}

macro_rules! chains {
    ($($name:ident: $chain:ident, $client:ident;)*) => {$(
        #[test]
        fn $name() {
            run(Chain::$chain, Client::$client);
        }
    )*};
}

chains! {
    kube_flannel_via_containerd: KubeFlannel, Cri;
    kube_flannel_via_go_libcni: KubeFlannel, GoLibcni;
    kube_flannel_via_our_cnitool: KubeFlannel, Ours;
    full_chain_via_containerd: Full, Cri;
    full_chain_via_go_libcni: Full, GoLibcni;
    full_chain_via_our_cnitool: Full, Ours;
    podman_via_containerd: Podman, Cri;
    podman_via_go_libcni: Podman, GoLibcni;
    podman_via_our_cnitool: Podman, Ours;
    multus_macvlan_via_containerd: Macvlan, Cri;
    multus_macvlan_via_go_libcni: Macvlan, GoLibcni;
    multus_macvlan_via_our_cnitool: Macvlan, Ours;
}

/// containerd passes its `K8S_POD_*` args to every plugin of a chain, and
/// a plugin that does not read `CNI_ARGS` must never fail on them, however
/// they look: loopback, portmap, bandwidth and firewall never look, as
/// their Go counterparts (`cni_args_of_others` in bad_input.rs).
#[test]
fn cni_args_of_others() {
    if !require_root("cni_args_of_others") {
        return;
    }
    let node = Node::new("cniargs");
    let pod = Netns::new("cniargs-pod");
    let netns = pod.path().display().to_string();
    for args in [
        "none",
        "K8S_POD_NAME=web;K8S_POD_NAMESPACE=default;FOO=bar",
        "A=b=c",
    ] {
        for (plugin, verbs) in [
            ("loopback", &["ADD", "DEL"][..]),
            ("portmap", &["DEL"][..]),
            ("bandwidth", &["DEL"][..]),
            ("firewall", &["DEL"][..]),
        ] {
            let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": plugin});
            let mut sides = vec![("ours", bin(plugin))];
            if plugin == "loopback" {
                sides.extend(go_plugin(plugin).map(|p| ("Go 1.1.1", p)));
            }
            for (side, exe) in &sides {
                for verb in verbs {
                    let out = call_plugin(
                        Some(&node.ns),
                        exe,
                        &[
                            ("CNI_COMMAND", verb),
                            ("CNI_CONTAINERID", "c1"),
                            ("CNI_NETNS", &netns),
                            (
                                "CNI_IFNAME",
                                if plugin == "loopback" { "lo" } else { "eth0" },
                            ),
                            ("CNI_PATH", "/opt/cni/bin"),
                            ("CNI_ARGS", args),
                        ],
                        &conf.to_string(),
                    );
                    assert_eq!(
                        out.exit_code, 0,
                        "{side} {plugin} {verb} CNI_ARGS={args}: {out:?}"
                    );
                }
            }
        }
    }
    // A plugin that reads CNI_ARGS still refuses a malformed pair (code 4).
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "host-local",
                      "ipam": {"type": "host-local", "subnet": "10.9.9.0/24"}});
    let out = call_plugin(
        Some(&node.ns),
        &bin("host-local"),
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", &netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", "none"),
        ],
        &conf.to_string(),
    );
    out.assert_error(4, "CNI_ARGS");
}
