//! GC as a runtime sends it, plugin by plugin: with `cni.dev/valid-attachments`
//! listing a pod, that pod's state stays and a stale pod's goes; without
//! any list (Go libcni's `GCNetworkList(ctx, list, nil)`), nothing of any
//! pod is collected, since a plugin cannot tell "nothing is valid" from
//! "the runtime did not say".

use serde_json::{json, Value};
use tests::*;

/// bridge (ipMasq, macspoofchk) + host-local + portmap + bandwidth +
/// firewall, every plugin with state of its own on the node.
fn conflist(state: &TempDir) -> Value {
    json!({
        "cniVersion": "1.1.0", "name": "gcnet",
        "plugins": [
            {"type": "bridge", "bridge": "cni-gc", "isGateway": true, "ipMasq": true,
             "ipMasqBackend": "nftables", "macspoofchk": true,
             "ipam": {"type": "host-local", "dataDir": state.path().join("leases"),
                      "ranges": [[{"subnet": "10.87.0.0/24"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}, "backend": "nftables"},
            {"type": "bandwidth", "ingressRate": 8000000, "ingressBurst": 800000,
             "egressRate": 8000000, "egressBurst": 800000},
            {"type": "firewall", "backend": "nftables",
             "dataDir": state.path().join("firewall")}
        ]
    })
}

/// Every plugin's GC, called as a runtime calls it: the plugin's config
/// with the list's name and version, and `valid` (absent when `None`).
fn gc_each(node: &Node, list: &Value, valid: Option<Value>) -> Vec<PluginOutput> {
    list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let mut conf = p.clone();
            conf["cniVersion"] = list["cniVersion"].clone();
            conf["name"] = list["name"].clone();
            if let Some(v) = &valid {
                conf["cni.dev/valid-attachments"] = v.clone();
                conf["cni.dev/attachments"] = v.clone();
            }
            let plugin = bin(conf["type"].as_str().unwrap());
            call_plugin(
                Some(&node.ns),
                &plugin,
                &[
                    ("CNI_COMMAND", "GC"),
                    ("CNI_PATH", &bin_dir().display().to_string()),
                ],
                &conf.to_string(),
            )
        })
        .collect()
}

#[test]
fn gc_keeps_the_listed_pods_and_collects_nothing_without_a_list() {
    if !require_root("gc_keeps_the_listed_pods_and_collects_nothing_without_a_list") {
        return;
    }
    let node = Node::new("gc");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let state = TempDir::new("gc-state");
    let list = conflist(&state);
    node.write_conf("10-gc.conflist", &list);
    let cnitool = bin("cnitool");
    let add = |pod: &Netns, cid: &str, port: u16| {
        let caps =
            json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]})
                .to_string();
        let out = node.cnitool_with(
            &cnitool,
            &["add", "gcnet", &pod.path().display().to_string()],
            &[("CAP_ARGS", &caps), ("CNI_CONTAINERID", cid)],
        );
        assert_eq!(out.exit_code, 0, "{out:?}");
    };
    let (keep, stale) = (Netns::new("gc-keep"), Netns::new("gc-stale"));
    add(&keep, "keep-ctr", 8181);
    let only_keep = NetSnapshot::take(&node.ns);
    add(&stale, "stale-ctr", 8182);
    let both = NetSnapshot::take(&node.ns);
    assert_ne!(only_keep, both);

    // No list: nothing collected, said on stderr, exit 0.
    for out in gc_each(&node, &list, None) {
        out.assert_silent_ok();
        assert!(out.stderr.contains("lists no valid attachments"), "{out:?}");
    }
    assert_eq!(
        both.diff(&NetSnapshot::take(&node.ns)),
        Vec::<String>::new()
    );

    // The kept pod listed: the stale pod's veth (by its owner alias),
    // masquerade, spoof check, host port, shaping (its IFB) and firewall
    // rules go. The node is the kept pod's alone again, link for link and
    // rule for rule.
    let valid = json!([{"containerID": "keep-ctr", "ifname": "eth0"}]);
    for out in gc_each(&node, &list, Some(valid)) {
        out.assert_silent_ok();
    }
    let after = NetSnapshot::take(&node.ns);
    assert_eq!(only_keep.diff(&after), Vec::<String>::new());
    assert!(
        stale.link("eth0").is_none(),
        "the stale pod's end of the pair went with its node end"
    );
    assert!(
        leases_in(&state.path().join("leases/gcnet")).len() == 1,
        "host-local kept only the listed pod's lease"
    );
}

/// What CRI-O's GC at its start meets when it lost a pod in a crash while
/// the pod's namespace stayed: no cache entry of the pod, so no DEL, and a
/// valid list without it. Through our cnitool's `gc` (Go libcni's
/// `GCNetworkList`: DEL of each cached attachment not listed, then GC to
/// each plugin with the list), on bridge (ipMasq) + host-local + portmap at
/// 1.1.0. The lost pod's veth goes with its lease, so the bridge has only
/// the live pod's port, and a new pod handed the freed address reaches its
/// peer with no duplicate answering on the bridge.
#[test]
fn gc_verb_takes_the_veth_of_a_pod_its_runtime_lost() {
    if !require_root("gc_verb_takes_the_veth_of_a_pod_its_runtime_lost") {
        return;
    }
    let node = Node::new("gclost");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let state = TempDir::new("gclost-state");
    // Two addresses: the new pod can only be given the one GC freed.
    let list = json!({
        "cniVersion": "1.1.0", "name": "lostnet",
        "plugins": [
            {"type": "bridge", "bridge": "cni-lost", "isGateway": true, "ipMasq": true,
             "ipam": {"type": "host-local", "dataDir": state.path().join("leases"),
                      "ranges": [[{"subnet": "10.84.0.0/24",
                                   "rangeStart": "10.84.0.2", "rangeEnd": "10.84.0.3"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    node.write_conf("10-lost.conflist", &list);
    let cnitool = bin("cnitool");
    // cnitool's container IDs, derived from the namespace path as `gc`
    // derives those it keeps.
    let add = |pod: &Netns, port: u16| -> String {
        let caps =
            json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]})
                .to_string();
        let out = node.cnitool_with(
            &cnitool,
            &["add", "lostnet", &path_of(pod)],
            &[("CAP_ARGS", &caps)],
        );
        assert_eq!(out.exit_code, 0, "{out:?}");
        out.json()["ips"][0]["address"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let ports = || -> Vec<String> {
        let mut p: Vec<String> = node
            .ns
            .ip_json(&["link", "show", "master", "cni-lost"])
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["ifname"].as_str().unwrap().to_string())
            .collect();
        p.sort();
        p
    };
    let (live, lost, new) = (
        Netns::new("gclost-live"),
        Netns::new("gclost-lost"),
        Netns::new("gclost-new"),
    );
    let live_ip = add(&live, 8281);
    let live_ports = ports();
    let only_live = NetSnapshot::take(&node.ns);
    let lost_ip = add(&lost, 8282);
    assert_eq!(ports().len(), 2);
    // The runtime's record of the lost pod is gone; its namespace stays.
    let results = node.shared_cache_dir().join("results");
    let lost_cache: Vec<_> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let entry: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
            entry["netns"] == path_of(&lost)
        })
        .collect();
    assert_eq!(lost_cache.len(), 1, "{lost_cache:?}");
    std::fs::remove_file(&lost_cache[0]).unwrap();

    let out = node.cnitool_with(&cnitool, &["gc", "lostnet", &path_of(&live)], &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(ports(), live_ports, "only the live pod's port is left");
    assert_eq!(
        only_live.diff(&NetSnapshot::take(&node.ns)),
        Vec::<String>::new(),
        "the node is the live pod's alone: its veth, masquerade and host port gone"
    );
    assert!(lost.link("eth0").is_none(), "the lost pod's end went too");
    assert_eq!(leases_in(&state.path().join("leases/lostnet")).len(), 1);

    // The freed address, handed to a new pod: one answer per ping, from it.
    let new_ip = add(&new, 8283);
    assert_eq!(new_ip, lost_ip);
    let bare = |a: &str| a.split('/').next().unwrap().to_string();
    for (from, to) in [(&new, bare(&live_ip)), (&live, bare(&new_ip))] {
        let out = from
            .output_in(std::process::Command::new("ping").args(["-c3", "-i0.2", "-W1", &to]))
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(!text.contains("DUP!"), "{text}");
    }
    let out = node.cnitool_with(
        &cnitool,
        &["gc", "lostnet", &path_of(&live), &path_of(&new)],
        &[],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(ports().len(), 2, "both listed pods keep their ports");
    for pod in [&live, &new] {
        let out = node.cnitool_with(&cnitool, &["del", "lostnet", &path_of(pod)], &[]);
        assert_eq!(out.exit_code, 0, "{out:?}");
    }
}

fn path_of(pod: &Netns) -> String {
    pod.path().display().to_string()
}

/// ptp's GC verb, as bridge's: the veth of an attachment the list leaves
/// out goes (and with it the node's route to its address), a listed one's
/// stays; without a list, nothing goes.
#[test]
fn ptp_gc_takes_the_veths_the_list_leaves_out() {
    if !require_root("ptp_gc_takes_the_veths_the_list_leaves_out") {
        return;
    }
    let node = Node::new("gcptp");
    let state = TempDir::new("gcptp-state");
    let list = json!({
        "cniVersion": "1.1.0", "name": "ptpgc",
        "plugins": [{"type": "ptp", "ipMasq": true,
                     "ipam": {"type": "host-local", "dataDir": state.path().join("leases"),
                              "ranges": [[{"subnet": "10.83.0.0/24"}]]}}]
    });
    node.write_conf("10-ptp.conflist", &list);
    let cnitool = bin("cnitool");
    let (keep, gone) = (Netns::new("gcptp-keep"), Netns::new("gcptp-gone"));
    let out = node.cnitool_with(
        &cnitool,
        &["add", "ptpgc", &path_of(&keep)],
        &[("CNI_CONTAINERID", "keep-ctr")],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    let only_keep = NetSnapshot::take(&node.ns);
    let out = node.cnitool_with(
        &cnitool,
        &["add", "ptpgc", &path_of(&gone)],
        &[("CNI_CONTAINERID", "gone-ctr")],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    let both = NetSnapshot::take(&node.ns);
    for out in gc_each(&node, &list, None) {
        out.assert_silent_ok();
    }
    assert_eq!(
        both.diff(&NetSnapshot::take(&node.ns)),
        Vec::<String>::new()
    );
    // The runtime's GC of the listed pod alone, its record of the other
    // lost: no DEL of it, only the plugins' GC.
    for out in gc_each(
        &node,
        &list,
        Some(json!([{"containerID": "keep-ctr", "ifname": "eth0"}])),
    ) {
        out.assert_silent_ok();
    }
    assert_eq!(
        only_keep.diff(&NetSnapshot::take(&node.ns)),
        Vec::<String>::new()
    );
    assert!(gone.link("eth0").is_none());
    assert_eq!(leases_in(&state.path().join("leases/ptpgc")).len(), 1);
}
