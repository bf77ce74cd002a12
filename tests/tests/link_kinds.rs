//! vlan, ipvlan, dummy and vrf on a kernel without their link kinds (these
//! machines, and CI's): ADD fails at once with code 2, saying which kernel
//! support is missing and which module provides it, before anything is
//! made (the node and the pod are unchanged, IPAM was never called); so it
//! does through go-cni-cri, go-cnitool and our cnitool; STATUS says so
//! with code 50; DEL and GC succeed. What these plugins do on a kernel that
//! has the kinds is in `fullkernel.rs` (the full-kernel VM step).

use serde_json::{json, Value};
use tests::*;

/// The four plugins, the kind each makes and the module that provides it.
const PLUGINS: [(&str, &str, &str); 4] = [
    ("vlan", "802.1Q VLAN links (kind \"vlan\")", "8021q"),
    ("ipvlan", "ipvlan links (kind \"ipvlan\")", "ipvlan"),
    ("dummy", "dummy links (kind \"dummy\")", "dummy"),
    ("vrf", "VRF devices (kind \"vrf\")", "vrf"),
];

/// The message of a kernel without the plugin's kind.
fn missing(plugin: &str, what: &str, module: &str) -> String {
    format!(
        "unsupported field \"type\": {plugin}: this kernel has no {what}: load module \
         {module} (modprobe {module})"
    )
}

/// Whether this test is for this kernel: it lacks every one of the kinds.
/// On a full kernel the `fullkernel_*` tests cover the plugins instead.
fn kernel_lacks_the_kinds(test: &str) -> bool {
    if !require_root(test) {
        return false;
    }
    if kernel_is_full() {
        eprintln!("note: {test}: this kernel has the link kinds; fullkernel.rs tests them");
        return false;
    }
    true
}

/// A node with a master `up0` (a veth to an upstream namespace holding
/// 10.93.0.1/24, a default route through it), a pod whose `eth0` a plugin
/// before vrf made, and one conflist per plugin.
struct Site {
    node: Node,
    _upstream: Netns,
    pod: Netns,
    data: TempDir,
}

impl Site {
    fn new(tag: &str) -> Site {
        let node = Node::new(tag);
        let upstream = Netns::new(&format!("up-{tag}"));
        let pod = Netns::new(&format!("pod-{tag}"));
        let n = &node.ns;
        n.ip(&["link", "set", "lo", "up"]);
        n.ip(&[
            "link",
            "add",
            "up0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            upstream.name(),
        ]);
        // No IPv6 link-local address: the kernel would add it a moment
        // after the link comes up, in the middle of a test.
        n.ip(&["link", "set", "up0", "addrgenmode", "none"]);
        n.ip(&["addr", "add", "10.93.0.2/24", "dev", "up0"]);
        n.ip(&["link", "set", "up0", "up"]);
        n.ip(&["route", "add", "default", "via", "10.93.0.1"]);
        upstream.ip(&["addr", "add", "10.93.0.1/24", "dev", "eth0"]);
        upstream.ip(&["link", "set", "eth0", "up"]);
        Site {
            node,
            _upstream: upstream,
            pod,
            data: TempDir::new(&format!("data-{tag}")),
        }
    }

    /// The plugin's config (without `cniVersion` and `name`).
    fn plugin(&self, plugin: &str) -> Value {
        let ipam = json!({"type": "host-local", "dataDir": self.data.path(),
                          "ranges": [[{"subnet": "10.94.0.0/24"}]]});
        match plugin {
            "vlan" => json!({"type": "vlan", "master": "up0", "vlanId": 10, "ipam": ipam}),
            "ipvlan" => json!({"type": "ipvlan", "master": "up0", "mode": "l2", "ipam": ipam}),
            "dummy" => json!({"type": "dummy", "ipam": ipam}),
            _ => json!({"type": "vrf", "vrfname": "red"}),
        }
    }

    /// A conflist for `plugin`: vrf after a ptp that makes the interface.
    fn conflist(&self, plugin: &str) -> Value {
        let plugins = if plugin == "vrf" {
            let ipam = json!({"type": "host-local", "dataDir": self.data.path(),
                              "ranges": [[{"subnet": "10.95.0.0/24"}]]});
            vec![json!({"type": "ptp", "ipam": ipam}), self.plugin("vrf")]
        } else {
            vec![self.plugin(plugin)]
        };
        json!({"cniVersion": "1.0.0", "name": format!("{plugin}-net"), "plugins": plugins})
    }

    fn state(&self) -> (NetSnapshot, NetSnapshot, Vec<String>) {
        (
            NetSnapshot::take(&self.node.ns),
            NetSnapshot::take_with(&self.pod, false),
            leases_in(&self.data.path().join("vlan-net"))
                .into_iter()
                .chain(leases_in(&self.data.path().join("ipvlan-net")))
                .chain(leases_in(&self.data.path().join("dummy-net")))
                .chain(leases_in(&self.data.path().join("vrf-net")))
                .collect(),
        )
    }

    fn call(&self, verb: &str, plugin: &str, conf: &Value) -> PluginOutput {
        let netns = self.pod.path().display().to_string();
        let path = bin_dir().display().to_string();
        call_plugin(
            Some(&self.node.ns),
            &bin(plugin),
            &[
                ("CNI_COMMAND", verb),
                ("CNI_CONTAINERID", "ctr-kind"),
                ("CNI_NETNS", &netns),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", &path),
            ],
            &conf.to_string(),
        )
    }
}

#[test]
fn link_kind_plugins_answer_version() {
    for (plugin, _, _) in PLUGINS {
        let out = call_plugin(None, &bin(plugin), &[("CNI_COMMAND", "VERSION")], "");
        assert_eq!(out.exit_code, 0, "{plugin}: {out:?}");
        let all = json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]);
        let want = if plugin == "vrf" {
            json!(["0.3.1", "0.4.0", "1.0.0", "1.1.0"])
        } else {
            all
        };
        assert_eq!(out.json()["supportedVersions"], want, "{plugin}");
    }
}

/// Called directly: code 2 naming the module, nothing made, no lease;
/// STATUS is code 50 saying the same; DEL and GC succeed.
#[test]
fn link_kinds_missing_in_the_kernel_fail_add_at_once_and_leave_nothing() {
    if !kernel_lacks_the_kinds(
        "link_kinds_missing_in_the_kernel_fail_add_at_once_and_leave_nothing",
    ) {
        return;
    }
    let site = Site::new("kinds-direct");
    let prev = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": site.pod.path()}],
        "ips": [{"address": "10.95.0.2/24", "interface": 0}]});
    let mut before = site.state();
    for (plugin, what, module) in PLUGINS {
        if plugin == "vrf" {
            // vrf's interface: what the plugin before it made.
            site.pod.ip(&[
                "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
            ]);
            before = site.state();
        }
        let mut conf = site.plugin(plugin);
        conf["cniVersion"] = json!("1.1.0");
        conf["name"] = json!(format!("{plugin}-net"));
        if plugin == "vrf" {
            conf["prevResult"] = prev.clone();
        }
        let out = site.call("ADD", plugin, &conf);
        out.assert_error(2, &missing(plugin, what, module));
        assert!(
            out.json()["msg"].as_str().unwrap().ends_with(&format!(
                "or use a kernel built with CONFIG_{}",
                match plugin {
                    "vlan" => "VLAN_8021Q",
                    "ipvlan" => "IPVLAN",
                    "dummy" => "DUMMY",
                    _ => "NET_VRF",
                }
            )),
            "{plugin}: {out:?}"
        );
        assert_eq!(
            site.state(),
            before,
            "{plugin}: the refused ADD changed something"
        );

        let mut status = conf.clone();
        status.as_object_mut().unwrap().remove("prevResult");
        let out = site.call("STATUS", plugin, &status);
        out.assert_error(
            50,
            &format!("{plugin}: this kernel has no {what}: load module {module}"),
        );

        // DEL of what never was, and GC: success, nothing changes.
        site.call("DEL", plugin, &conf).assert_silent_ok();
        let mut gc = status;
        gc["cni.dev/valid-attachments"] = json!([]);
        site.call("GC", plugin, &gc).assert_silent_ok();
        assert_eq!(
            site.state(),
            before,
            "{plugin}: DEL or GC changed something"
        );
    }
}

/// Through the three runtimes: ADD fails with the module named, and what
/// the runtime does next (DEL) leaves the node and the pod as they were,
/// no lease and no cached result.
#[test]
fn link_kinds_missing_in_the_kernel_fail_through_every_runtime() {
    if !kernel_lacks_the_kinds("link_kinds_missing_in_the_kernel_fail_through_every_runtime") {
        return;
    }
    let mut clients = vec![("cnitool", bin("cnitool"))];
    if let Some(t) = go_cnitool() {
        clients.push(("go-cnitool", t));
    }
    if let Some(t) = go_cni_cri() {
        clients.push(("go-cni-cri", t));
    }
    for (plugin, what, module) in PLUGINS {
        for (client, tool) in &clients {
            let site = Site::new(&format!("kinds-{plugin}-{client}"));
            let net = format!("{plugin}-net");
            site.node
                .write_conf("10-net.conflist", &site.conflist(plugin));
            let before = site.state();
            let netns = site.pod.path().display().to_string();
            let run = |verb: &str| match *client {
                "go-cni-cri" => {
                    let verb = if verb == "add" { "setup" } else { "remove" };
                    site.node.cri(tool, verb, Some(&site.pod), "ctr-kind", &[])
                }
                "go-cnitool" => site.node.go_cnitool(
                    tool,
                    &[verb, &net, &netns],
                    &[("CNI_CONTAINERID", "ctr-kind")],
                ),
                _ => site.node.cnitool_with(
                    tool,
                    &[verb, &net, &netns],
                    &[("CNI_CONTAINERID", "ctr-kind")],
                ),
            };
            let out = run("add");
            assert_ne!(out.exit_code, 0, "{plugin} {client}: {out:?}");
            let said = format!("{}{}", out.stdout, out.stderr);
            assert!(
                said.contains(&format!(
                    "{plugin}: this kernel has no {what}: load module {module}"
                )),
                "{plugin} {client}: {said}"
            );
            let out = run("del");
            assert_eq!(out.exit_code, 0, "{plugin} {client}: DEL: {out:?}");
            // go-cni-cri brings the pod's lo up (containerd's loopback first).
            let (node, mut pod, leases) = site.state();
            let (bnode, mut bpod, bleases) = before.clone();
            for p in [&mut pod, &mut bpod] {
                p.addrs.retain(|a| !a.starts_with("lo "));
                p.routes.retain(|r| !r.contains("dev=lo"));
                p.qdiscs.retain(|q| !q.starts_with("lo "));
            }
            assert_eq!(node, bnode, "{plugin} {client}: {:?}", bnode.diff(&node));
            assert_eq!(pod, bpod, "{plugin} {client}: {:?}", bpod.diff(&pod));
            assert_eq!(leases, bleases, "{plugin} {client}");
            assert_eq!(
                tree(&site.node.shared_cache_dir().join("results")),
                Vec::<String>::new(),
                "{plugin} {client}"
            );
        }
    }
}
