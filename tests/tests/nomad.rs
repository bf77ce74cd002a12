//! Nomad, as its client calls the plugins (`tests/go/nomad-cni`, on
//! containerd's go-cni): the fingerprint that decides whether a
//! bridge-mode job may be placed on the node, and an allocation's network
//! in bridge mode with the conflist Nomad generates (dual stack, as since
//! Nomad 1.9 with `bridge_network_subnet_ipv6`): loopback, the `nomad`
//! bridge with host-local's two ranges, firewall with the `NOMAD-ADMIN`
//! chain, portmap with `snat`. Its host-local `dataDir` is Nomad's
//! `/var/run/cni`, which the node's command sees as its own directory
//! ([`Netns::plugin_command`]), never the machine's.

use serde_json::{json, Value};
use tests::release::{plugins, PLUGIN_VERSION};
use tests::*;

fn nomad_cni() -> Option<std::path::PathBuf> {
    go_client("nomad-cni")
}

/// Nomad's fingerprint of our bin dir: every plugin's attribute is our
/// version, and the five plugins a bridge-mode job constrains pass
/// `semver >= 0.4.0`; the bridge passes the `>= 1.3.0` that makes Nomad
/// CHECK an allocation after a client restart.
///
/// Nomad runs every executable of the dir with no arguments (and kills it
/// after 3 s), so the dir is a node's: the plugins and nothing else. The
/// build dir would have it start the benchmark (`cni-bench`) and kill it
/// half done, its namespaces and daemons left behind.
#[test]
fn nomads_fingerprint_places_bridge_mode_jobs_on_the_node() {
    let Some(tool) = nomad_cni() else {
        return;
    };
    let node_bin_dir = TempDir::new("nomad-bin");
    for p in plugins() {
        std::os::unix::fs::symlink(bin(&p), node_bin_dir.path().join(&p)).expect("link");
    }
    let out = run_ok(
        std::process::Command::new(&tool)
            .args(["fingerprint"])
            .arg(node_bin_dir.path()),
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("fingerprint JSON");
    let expected = format!("v{PLUGIN_VERSION}");
    for p in plugins() {
        assert_eq!(
            v["attributes"][&p], expected,
            "plugins.cni.version.{p}: {v}"
        );
    }
    assert_eq!(v["bridgeMode"], true, "{v}");
    assert_eq!(v["checkOnRestart"], true, "{v}");
}

/// The conflist Nomad writes for bridge mode (`NewNomadBridgeConflist`,
/// with an IPv6 subnet configured).
fn nomad_conflist() -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": "nomad",
        "plugins": [
            {"type": "loopback"},
            {
                "type": "bridge",
                "bridge": "nomad",
                "ipMasq": true,
                "isGateway": true,
                "forceAddress": true,
                "hairpinMode": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "172.26.64.0/20"}], [{"subnet": "fd26:64::/120"}]],
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                    "dataDir": "/var/run/cni"
                }
            },
            {"type": "firewall", "backend": "iptables", "iptablesAdminChainName": "NOMAD-ADMIN"},
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
        ]
    })
}

struct NomadNode {
    node: Node,
    tool: std::path::PathBuf,
    conflist: std::path::PathBuf,
}

impl NomadNode {
    fn call(&self, verb: &str, alloc: &str, pod: &Netns, ports: &[&str]) -> PluginOutput {
        let netns = pod.path().display().to_string();
        let bin = bin_dir().display().to_string();
        let conflist = self.conflist.display().to_string();
        let mut args = vec![
            verb,
            "-bindir",
            &bin,
            "-conflist",
            &conflist,
            "-netns",
            &netns,
            "-alloc",
            alloc,
            "-subnet",
            "172.26.64.0/20",
            "-subnet",
            "fd26:64::/120",
        ];
        for p in ports {
            args.extend(["-port", p]);
        }
        self.node.go_cnitool(&self.tool, &args, &[])
    }

    /// The allocation's IPv4 and IPv6 addresses from go-cni's result.
    fn add(&self, alloc: &str, pod: &Netns, ports: &[&str]) -> (String, String) {
        let out = self.call("setup", alloc, pod, ports);
        assert_eq!(out.exit_code, 0, "{alloc}: {out:?}");
        let v = out.json();
        let ips = &v["interfaces"]["eth0"]["IPConfigs"];
        let ip = |i: usize| ips[i]["IP"].as_str().expect("an address").to_string();
        (ip(0), ip(1))
    }

    /// The node's network state and Nomad's host-local leases.
    fn state(&self) -> (NetSnapshot, Vec<String>) {
        let leases = state_tree(&self.node.ns.run_dir());
        (NetSnapshot::take(&self.node.ns), leases)
    }
}

/// Two allocations of a bridge-mode job: each port mapped for tcp and
/// udp reaches its allocation through the node's address from outside;
/// one allocation reaches the other directly on both families and
/// through the host port; Nomad's CHECK passes; the teardown leaves the
/// node as it was.
#[test]
fn nomad_bridge_mode_allocations_through_go_cni() {
    if !require_root("nomad_bridge_mode_allocations_through_go_cni") {
        return;
    }
    let Some(tool) = nomad_cni() else {
        return;
    };
    let node = Node::new("nomad");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let outside = Peer::attach(&node.ns, "nomad-out", 1);
    let conflist = node.write_conf("nomad.conflist", &nomad_conflist());
    let n = NomadNode {
        node,
        tool,
        conflist,
    };

    // A first allocation makes what allocations share (the bridge, the
    // NOMAD-ADMIN chain Nomad keeps, the plugins' base chains) and goes.
    let warm = Netns::new("nomad-warm");
    n.add("warm-alloc", &warm, &["25999:7070"]);
    n.call("remove", "warm-alloc", &warm, &["25999:7070"])
        .assert_silent_ok();
    let before = n.state();

    let web = Netns::new("nomad-web");
    let api = Netns::new("nomad-api");
    let (web4, web6) = n.add("web-alloc-0000", &web, &["25000:7070"]);
    let (api4, api6) = n.add("api-alloc-0000", &api, &["25001:7070"]);
    assert!(web4.starts_with("172.26.64."), "{web4}");
    assert!(web6.starts_with("fd26:64::"), "{web6}");
    let _web = echo_server(&web, "web", 7070);
    let _api = echo_server(&api, "api", 7070);

    // From outside, through the node's address: tcp and udp.
    let node_ip = outside.node_v4();
    let from_outside = Some(format!("web {}", outside.v4()));
    assert_eq!(ask(&outside.ns, &node_ip, 25000), from_outside, "tcp");
    assert_eq!(ask_udp(&outside.ns, &node_ip, 25000), from_outside, "udp");
    assert_eq!(
        ask(&outside.ns, &outside.node_v6(), 25001),
        Some(format!("api {}", outside.v6())),
        "IPv6 host port"
    );
    // From one allocation to the other: directly, and through the host
    // port on the node's address (masqueraded by snat, as the bridge is
    // not hairpinned).
    assert_eq!(ask(&api, &web4, 7070), Some(format!("web {api4}")));
    assert_eq!(ask(&api, &web6, 7070), Some(format!("web {api6}")));
    assert!(ask(&api, &node_ip, 25000).is_some_and(|a| a.starts_with("web ")));

    // Nomad CHECKs an allocation after a client restart (our bridge is
    // past its 1.3.0).
    n.call("check", "web-alloc-0000", &web, &["25000:7070"])
        .assert_silent_ok();

    n.call("remove", "web-alloc-0000", &web, &["25000:7070"])
        .assert_silent_ok();
    n.call("remove", "api-alloc-0000", &api, &["25001:7070"])
        .assert_silent_ok();
    let after = n.state();
    assert_eq!(before.0.diff(&after.0), Vec::<String>::new());
    assert_eq!(before.1, after.1, "host-local's leases under /var/run/cni");
    assert!(ask(&outside.ns, &node_ip, 25000).is_none());
}
