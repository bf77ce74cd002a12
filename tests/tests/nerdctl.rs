//! nerdctl, as it probes and calls the plugins (`tests/go/nerdctl-cni`, on
//! containerd's go-cni): its probe of the firewall's version, which picks
//! `ingressPolicy: isolated` for a network created with
//! `enable_icc=false`; the conflists `nerdctl network create` writes (the
//! default network on `nerdctl0`, a user-defined one on `br-<id>`); and
//! its OCI hook's calls: a remove without a netns before every setup, and
//! the remove without a netns at stop.

use serde_json::Value;
use std::path::PathBuf;
use tests::release::PLUGIN_VERSION;
use tests::*;

fn nerdctl_cni() -> Option<PathBuf> {
    go_client("nerdctl-cni")
}

fn run_tool(tool: &PathBuf, args: &[&str]) -> std::process::Output {
    run_ok(std::process::Command::new(tool).args(args))
}

/// nerdctl reads our firewall's version from its stderr line and finds it
/// new enough for `isolated` (>= 1.7.1) and user networks (>= 1.1.0).
#[test]
fn nerdctls_probe_reads_the_firewalls_version() {
    let Some(tool) = nerdctl_cni() else {
        return;
    };
    let bin = bin_dir().display().to_string();
    let out = run_tool(&tool, &["probe", "-bindir", &bin]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("probe JSON");
    assert_eq!(v["version"], format!("v{PLUGIN_VERSION}"), "{v}");
    assert_eq!(v["isolated"], true, "{v}");
    assert_eq!(v["userNetworks"], true, "{v}");
}

/// A network as `nerdctl network create` writes it, into the node's conf
/// dir; returns the file.
fn create(node: &Node, tool: &PathBuf, name: &str, subnet: &str, icc: bool) -> (PathBuf, Value) {
    let bin = bin_dir().display().to_string();
    let icc = format!("-icc={icc}");
    let out = run_tool(
        tool,
        &[
            "create", "-bindir", &bin, "-name", name, "-subnet", subnet, &icc,
        ],
    );
    assert!(out.stderr.is_empty(), "no warning: {out:?}");
    let conf: Value = serde_json::from_slice(&out.stdout).expect("conflist");
    (
        node.write_conf(&format!("nerdctl-{name}.conflist"), &conf),
        conf,
    )
}

struct Container<'a> {
    node: &'a Node,
    tool: &'a PathBuf,
    conflist: PathBuf,
    id: String,
    ns: Netns,
    ports: Vec<&'static str>,
}

impl Container<'_> {
    fn hook(&self, verb: &str) -> PluginOutput {
        let bin = bin_dir().display().to_string();
        let conflist = self.conflist.display().to_string();
        let netns = self.ns.path().display().to_string();
        let mut args = vec![
            verb,
            "-bindir",
            &bin,
            "-conflist",
            &conflist,
            "-netns",
            &netns,
            "-id",
            &self.id,
        ];
        for p in &self.ports {
            args.extend(["-port", p]);
        }
        self.node.go_cnitool(self.tool, &args, &[])
    }

    /// Starts the container's network; its IPv4 address.
    fn start(&self) -> String {
        let out = self.hook("start");
        assert_eq!(out.exit_code, 0, "{}: {out:?}", self.id);
        out.json()["interfaces"]["eth0"]["IPConfigs"][0]["IP"]
            .as_str()
            .expect("an address")
            .to_string()
    }
}

/// The default network and an `enable_icc=false` one, through go-cni as
/// nerdctl calls it: containers of the isolated network cannot reach each
/// other, the two networks cannot reach each other, a published port
/// still reaches its container from the node and from outside, and the
/// stops leave the node as it was.
#[test]
fn nerdctl_networks_isolate_and_publish_through_go_cni() {
    if !require_root("nerdctl_networks_isolate_and_publish_through_go_cni") {
        return;
    }
    let Some(tool) = nerdctl_cni() else {
        return;
    };
    let node = Node::new("nerdctl");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let outside = Peer::attach(&node.ns, "nerd-out", 1);
    let (default_net, conf) = create(&node, &tool, "bridge", "10.4.0.0/24", true);
    assert_eq!(conf["plugins"][0]["bridge"], "nerdctl0", "{conf}");
    assert_eq!(conf["plugins"][2]["ingressPolicy"], "same-bridge", "{conf}");
    let (isolated_net, conf) = create(&node, &tool, "quiet", "10.4.1.0/24", false);
    assert_eq!(
        conf["plugins"][2]["ingressPolicy"], "isolated",
        "nerdctl chose isolated from our version: {conf}"
    );
    let container = |conflist: &PathBuf, id: &str, ports: Vec<&'static str>| Container {
        node: &node,
        tool: &tool,
        conflist: conflist.clone(),
        id: format!("{id}0123456789abcdef"),
        ns: Netns::new(&format!("nerd-{id}")),
        ports,
    };

    // A first container on each network makes what they share, and stops.
    let state = || {
        (
            NetSnapshot::take(&node.ns),
            state_tree(node.cache_dir.path()),
        )
    };
    for (net, id) in [(&default_net, "warmd"), (&isolated_net, "warmq")] {
        let c = container(net, id, vec!["18080:7070"]);
        c.start();
        c.hook("stop").assert_silent_ok();
    }
    let before = state();

    let web = container(&default_net, "web", vec!["8080:7070"]);
    let one = container(&isolated_net, "one", vec!["8081:7070"]);
    let two = container(&isolated_net, "two", vec![]);
    let web_ip = web.start();
    let one_ip = one.start();
    let two_ip = two.start();
    assert!(web_ip.starts_with("10.4.0.") && one_ip.starts_with("10.4.1."));
    let _servers: Vec<_> = [(&web, "web"), (&one, "one"), (&two, "two")]
        .into_iter()
        .map(|(c, name)| echo_server(&c.ns, name, 7070))
        .collect();

    // enable_icc=false: no traffic between the network's containers.
    assert_eq!(ask(&one.ns, &two_ip, 7070), None, "one -> two");
    assert_eq!(ask(&two.ns, &one_ip, 7070), None, "two -> one");
    // Nor between the networks.
    assert_eq!(ask(&web.ns, &one_ip, 7070), None, "default -> quiet");
    assert_eq!(ask(&one.ns, &web_ip, 7070), None, "quiet -> default");
    // Published ports reach their containers, from the node and from
    // outside, on both networks.
    let node_ip = outside.node_v4();
    assert_eq!(
        ask(&outside.ns, &node_ip, 8080),
        Some(format!("web {}", outside.v4()))
    );
    assert_eq!(
        ask(&outside.ns, &node_ip, 8081),
        Some(format!("one {}", outside.v4()))
    );
    assert!(ask(&node.ns, &node_ip, 8080).is_some_and(|a| a.starts_with("web ")));
    assert!(ask(&node.ns, &node_ip, 8081).is_some_and(|a| a.starts_with("one ")));
    // The node reaches the containers themselves.
    assert!(ask(&node.ns, &two_ip, 7070).is_some_and(|a| a.starts_with("two ")));

    for c in [&web, &one, &two] {
        c.hook("stop").assert_silent_ok();
        assert!(c.ns.link("eth0").is_none(), "{}: its veth went", c.id);
    }
    let after = state();
    assert_eq!(before.0.diff(&after.0), Vec::<String>::new());
    assert_eq!(before.1, after.1, "leases and result cache");
    assert_eq!(ask(&outside.ns, &node_ip, 8080), None);
}
