//! Our plugins under a real containerd (Debian's 1.6), driven over its CRI
//! socket as kubelet drives it: the test starts containerd itself in
//! throwaway namespaces ([`tests::containerd`]), with our debug build as
//! its CNI bin dir, and calls RunPodSandbox (port mappings and bandwidth
//! annotations), PodSandboxStatus, StopPodSandbox twice (the second time
//! the namespace is gone: containerd's DEL with an empty netns path),
//! RemovePodSandbox and Status (NetworkReady), for two chains:
//! kube-flannel's conflist (flannel + portmap, over a subnet.env the test
//! writes) and bridge + host-local + portmap + bandwidth.
//!
//! Each checks the pod's IP (the runtime's and the one in the pod), a host
//! port answered by the sandbox's own process from another namespace, the
//! shaping qdiscs, the node left exactly as before (links, addresses,
//! routes, qdiscs, filters, nftables and iptables, leases, go-cni's cache,
//! the plugins' ledgers), and that a pod whose ADD fails is cleaned up.

use cri_client::{CriClient, PodSpec};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tests::containerd::{Containerd, SANDBOX_PAGE};
use tests::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chain {
    /// kube-flannel's `10-flannel.conflist`, as its manifest ships it.
    KubeFlannel,
    /// bridge (ipMasq) + host-local + portmap + bandwidth.
    Full,
}

impl Chain {
    /// The conflist; leases of the full chain under `leases`.
    fn conflist(self, leases: &str) -> Value {
        match self {
            Chain::KubeFlannel => json!({
                "name": "cbr0",
                "cniVersion": "0.3.1",
                "plugins": [
                    {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
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
        }
    }

    /// The files the chain needs in the node's `/run`.
    fn run_files(self) -> Vec<(&'static str, &'static str)> {
        match self {
            // What flanneld writes for a node leased 10.244.1.0/24.
            Chain::KubeFlannel => vec![(
                "flannel/subnet.env",
                "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n\
                 FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
            )],
            Chain::Full => vec![],
        }
    }

    /// Pods get `<prefix>N`, the gateway is `<prefix>1`.
    fn prefix(self) -> &'static str {
        match self {
            Chain::KubeFlannel => "10.244.1.",
            Chain::Full => "10.85.0.",
        }
    }

    fn shapes(self) -> bool {
        self == Chain::Full
    }
}

/// A node running containerd for one chain, with a namespace outside it
/// (for host ports) and the directories whose contents a teardown must
/// restore.
struct Site {
    chain: Chain,
    node: Netns,
    outside: Peer,
    conf: TempDir,
    leases: TempDir,
    containerd: Containerd,
    cri: CriClient,
}

impl Site {
    /// containerd with an empty conf dir: the network is not ready until
    /// the chain's conflist is written (the runtime watches the dir).
    fn new(chain: Chain) -> Site {
        for tool in ["containerd", "containerd-shim-runc-v2", "runc", "ctr"] {
            assert!(
                Command::new("sh")
                    .args(["-c", &format!("command -v {tool}")])
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success()),
                "{tool} is missing: install Debian's containerd and runc (scripts/test.sh does)"
            );
        }
        let tag = format!("{chain:?}").to_lowercase();
        let node = forwarding_node(&format!("ctd-{tag}"));
        let outside = Peer::attach(&node, &format!("ctd-out-{tag}"), 1);
        let conf = TempDir::new(&format!("ctd-conf-{tag}"));
        let leases = TempDir::new(&format!("ctd-leases-{tag}"));
        let containerd = Containerd::start(&node, conf.path(), &chain.run_files());
        let cri = CriClient::connect(&containerd.socket())
            .unwrap_or_else(|e| panic!("{e}\n{}", containerd.log()));
        Site {
            chain,
            node,
            outside,
            conf,
            leases,
            containerd,
            cri,
        }
    }

    fn write_conflist(&self) {
        let list = self
            .chain
            .conflist(&self.leases.path().display().to_string());
        self.conf.write(
            "10-pods.conflist",
            &serde_json::to_string_pretty(&list).expect("json"),
        );
    }

    /// Waits (bounded) until `Status` says NetworkReady is `ready`.
    fn wait_network_ready(&mut self, ready: bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let c = self.cri.network_condition().expect("Status");
            if c.ready == ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{:?}: NetworkReady is still {} after 30 s ({} {})",
                self.chain,
                c.ready,
                c.reason,
                c.message
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A pod as kubelet describes it: host port `host_port` (on
    /// `host_ip`, "" for every address) to its port 80, and 10 Mbit/s
    /// each way in the bandwidth annotations.
    fn pod(&self, name: &str, host_port: i32, host_ip: &str) -> PodSpec {
        PodSpec {
            name: name.to_string(),
            namespace: "default".to_string(),
            uid: format!("uid-{name}"),
            ports: vec![(host_port, 80, "tcp", host_ip.to_string())],
            annotations: HashMap::from([
                (
                    "kubernetes.io/ingress-bandwidth".to_string(),
                    "10M".to_string(),
                ),
                (
                    "kubernetes.io/egress-bandwidth".to_string(),
                    "10M".to_string(),
                ),
            ]),
            cgroup_parent: self.containerd.cgroup_parent().to_string(),
            ..PodSpec::default()
        }
    }

    fn run_pod(&mut self, pod: &PodSpec) -> String {
        self.cri
            .run_pod_sandbox(pod)
            .unwrap_or_else(|e| panic!("{:?}: {e}\n{}", self.chain, self.containerd.log()))
    }

    fn stop_and_remove(&mut self, id: &str) {
        self.cri.stop_pod_sandbox(id).expect("StopPodSandbox");
        self.cri.remove_pod_sandbox(id).expect("RemovePodSandbox");
    }

    /// Everything a teardown must put back: the node's network state, the
    /// leases, go-cni's cache (and flannel's files) under /var/lib/cni, and
    /// the plugins' ledgers under /run/cni (their lock files stay, as
    /// Go's).
    fn state_now(&self) -> (NetSnapshot, Vec<String>) {
        let mut files: Vec<String> = [
            ("leases", self.leases.path().to_path_buf()),
            ("var-lib-cni", self.containerd.var_lib_cni()),
            ("run-cni", self.containerd.run_cni()),
        ]
        .iter()
        .flat_map(|(name, dir)| tree(dir).into_iter().map(move |f| format!("{name}/{f}")))
        .filter(|f| !f.contains("lock") && !f.contains("last_reserved_ip"))
        .collect();
        files.sort();
        (NetSnapshot::take(&self.node), files)
    }

    fn assert_unchanged(&self, before: &(NetSnapshot, Vec<String>), when: &str) {
        let now = self.state_now();
        let who = format!("{:?} under containerd, {when}", self.chain);
        assert_eq!(before.0.diff(&now.0), Vec::<String>::new(), "{who}");
        assert_eq!(before.1, now.1, "{who}: state files");
    }
}

fn run(chain: Chain) {
    let test = format!("{chain:?} under containerd");
    if !require_root(&test) || step_skipped("containerd") {
        return;
    }
    let mut site = Site::new(chain);

    // No conflist yet: the runtime reports the network not ready.
    let c = site.cri.network_condition().expect("Status");
    assert!(!c.ready, "{test}: NetworkReady with no CNI config: {c:?}");
    assert_eq!(c.reason, "NetworkPluginNotReady", "{test}: {c:?}");
    site.write_conflist();
    site.wait_network_ready(true);

    // A first pod makes what pods share (the bridge, base chains) and goes.
    let warm = site.pod("warm", 18080, "");
    let id = site.run_pod(&warm);
    site.stop_and_remove(&id);
    let before = site.state_now();

    // The pod: its address, its port from outside the node, its shaping.
    let pod = site.pod("web", 8080, "");
    let id = site.run_pod(&pod);
    let status = site.cri.pod_sandbox_status(&id).expect("PodSandboxStatus");
    assert!(status.ready, "{test}: sandbox not ready: {status:?}");
    assert_eq!(status.ips.len(), 1, "{test}: {status:?}");
    let ip = status.ips[0].clone();
    assert!(ip.starts_with(chain.prefix()), "{test}: pod address {ip}");
    let netns = site.containerd.sandbox_netns(&status.info);
    let out = run_ok(Containerd::in_netns(&netns, "ip").args(["-j", "addr", "show", "eth0"]));
    let addrs: Value = serde_json::from_slice(&out.stdout).expect("ip -j");
    let in_pod: Vec<String> = addrs[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["family"] == "inet")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect();
    assert_eq!(in_pod, vec![format!("{ip}/24")], "{test}: the pod's eth0");
    assert_eq!(
        http_get(&site.outside.ns, &site.outside.node_v4(), 8080).as_deref(),
        Some(SANDBOX_PAGE),
        "{test}: host port 8080 from another namespace"
    );
    assert_eq!(
        http_get(&site.node, &ip, 80).as_deref(),
        Some(SANDBOX_PAGE),
        "{test}: the node reaches the pod"
    );
    if chain.shapes() {
        let ifbs = site.node.ip_json(&["link", "show", "type", "ifb"]);
        assert_eq!(ifbs.as_array().map(Vec::len), Some(1), "{test}: one IFB");
        let out = run_ok(site.node.command("tc").args(["-j", "qdisc", "show"]));
        let qdiscs: Value = serde_json::from_slice(&out.stdout).expect("tc -j");
        let rates: Vec<&Value> = qdiscs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|q| q["kind"] == "tbf")
            .map(|q| &q["options"]["rate"])
            .collect();
        assert_eq!(
            rates,
            vec![&json!(1250000), &json!(1250000)],
            "{test}: ingress and egress shaped at 10 Mbit/s (bytes/s): {qdiscs}"
        );
    }

    // kubelet's teardown: stop (DEL), stop again once the namespace is
    // gone (DEL with an empty netns path), remove.
    site.cri.stop_pod_sandbox(&id).expect("StopPodSandbox");
    site.assert_unchanged(&before, "after StopPodSandbox");
    assert!(
        !netns.exists(),
        "{test}: the sandbox process outlived the stop"
    );
    site.cri
        .stop_pod_sandbox(&id)
        .expect("the second StopPodSandbox");
    site.cri.remove_pod_sandbox(&id).expect("RemovePodSandbox");
    site.assert_unchanged(&before, "after RemovePodSandbox");
    assert!(
        !site
            .cri
            .list_pod_sandboxes()
            .expect("ListPodSandbox")
            .contains(&id),
        "{test}: the sandbox is still listed"
    );

    // A pod whose ADD fails half way (portmap refuses a host address of a
    // family the pod has no address of, after the main plugin made its
    // interface), beside a pod that stays: the runtime's cleanup leaves
    // the node as it was.
    let holder = site.pod("holder", 9090, "");
    let holder_id = site.run_pod(&holder);
    let held = site.state_now();
    let failed = site.pod("failed", 9091, "fd00:1::1");
    let err = site
        .cri
        .run_pod_sandbox(&failed)
        .expect_err("RunPodSandbox with an IPv6 host IP for an IPv4 pod");
    assert!(
        err.to_string().contains("portmap") || err.to_string().contains("fd00:1::1"),
        "{test}: the error names the plugin or the address: {err}"
    );
    for other in site.cri.list_pod_sandboxes().expect("ListPodSandbox") {
        if other != holder_id {
            site.stop_and_remove(&other);
        }
    }
    site.assert_unchanged(&held, "after the pod whose ADD failed");
    assert_eq!(
        http_get(&site.outside.ns, &site.outside.node_v4(), 9090).as_deref(),
        Some(SANDBOX_PAGE),
        "{test}: the pod beside it still answers"
    );
    site.stop_and_remove(&holder_id);
    site.assert_unchanged(&before, "after the last pod");
}

#[test]
fn kube_flannel_chain_under_containerd() {
    run(Chain::KubeFlannel);
}

#[test]
fn bridge_portmap_bandwidth_chain_under_containerd() {
    run(Chain::Full);
}
