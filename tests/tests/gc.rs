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

    // The kept pod listed: the stale pod's masquerade, spoof check, host
    // port, shaping (its IFB) and firewall rules go; its veth is the
    // runtime's to DEL. What is left is what the kept pod alone had, plus
    // the stale pod's veth and its routes.
    let valid = json!([{"containerID": "keep-ctr", "ifname": "eth0"}]);
    for out in gc_each(&node, &list, Some(valid)) {
        out.assert_silent_ok();
    }
    let after = NetSnapshot::take(&node.ns);
    assert_eq!(
        after.nft, only_keep.nft,
        "nftables: the stale pod's rules gone"
    );
    let ifbs = |s: &NetSnapshot| s.links.iter().filter(|l| l.contains(" ifb ")).count();
    assert_eq!(
        (ifbs(&only_keep), ifbs(&after)),
        (1, 1),
        "{:?}",
        after.links
    );
    assert!(
        leases_in(&state.path().join("leases/gcnet")).len() == 1,
        "host-local kept only the listed pod's lease"
    );
}
