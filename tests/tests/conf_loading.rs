//! libcni v1.3's loading rules in our runtime side (cnitool), run for real:
//! a conflist's plugins may live in a folder named after the network beside
//! it (`<confdir>/<name>/*.conf`, upstream cni #928): appended, sorted by
//! file name, after the inlined ones, and the only ones when the list has
//! no `plugins` key; `loadOnlyInlinedPlugins` (a bool, or "true"/"false" in
//! any case) ignores the folder. What Go's `libcni/conf.go` does at v1.3
//! (Debian's libcni predates it, so the rules are read from upstream's
//! code); the parser's own cases are unit tests of `cnitool::conf`.

use serde_json::{json, Value};
use tests::*;

fn write(dir: &std::path::Path, rel: &str, v: &Value) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

#[test]
fn plugins_in_the_networks_folder_run_after_the_inlined_ones() {
    if !require_root("plugins_in_the_networks_folder_run_after_the_inlined_ones") {
        return;
    }
    let node = Node::new("folder");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let leases = TempDir::new("folder-leases");
    let conf = node.conf_dir.path();
    // No `plugins` key: the chain is the folder's, in file-name order.
    write(
        conf,
        "10-folded.conflist",
        &json!({"cniVersion": "1.1.0", "name": "folded"}),
    );
    write(
        conf,
        "folded/10-bridge.conf",
        &json!({"type": "bridge", "bridge": "cni-fold", "isGateway": true,
                "ipam": {"type": "host-local", "dataDir": leases.path(),
                         "ranges": [[{"subnet": "10.86.0.0/24"}]]}}),
    );
    write(
        conf,
        "folded/20-tuning.conf",
        &json!({"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_ignore": "1"}}),
    );
    // Not a plugin config: only `.conf` files are.
    write(
        conf,
        "folded/30-ignored.json",
        &json!({"type": "no-such-plugin"}),
    );
    let pod = Netns::new("folder-pod");
    let netns = pod.path().display().to_string();
    let out = node.cnitool_with(&bin("cnitool"), &["add", "folded", &netns], &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let r = out.json();
    assert_eq!(r["ips"][0]["address"], "10.86.0.2/24", "{r}");
    let arp_ignore = run_ok(
        pod.command("cat")
            .arg("/proc/sys/net/ipv4/conf/eth0/arp_ignore"),
    );
    assert_eq!(
        String::from_utf8_lossy(&arp_ignore.stdout).trim(),
        "1",
        "tuning ran"
    );
    let out = node.cnitool_with(&bin("cnitool"), &["del", "folded", &netns], &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(pod.link("eth0").is_none());

    // Inlined plugins first, then the folder's; with
    // loadOnlyInlinedPlugins ("TRUE" is read as true) the folder is not read:
    // the broken plugin config there is never parsed.
    write(
        conf,
        "10-folded.conflist",
        &json!({"cniVersion": "1.1.0", "name": "folded", "loadOnlyInlinedPlugins": "TRUE",
                "plugins": [{"type": "loopback"}]}),
    );
    write(conf, "folded/05-broken.conf", &json!({"no": "type"}));
    let out = node.cnitool_with(&bin("cnitool"), &["add", "folded", &netns], &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(out.json()["interfaces"][0]["name"], "lo", "loopback alone");
    assert!(
        pod.link("eth0").is_none(),
        "the folder's bridge did not run"
    );
    node.cnitool_with(&bin("cnitool"), &["del", "folded", &netns], &[])
        .assert_silent_ok();

    // Read again, the folder's broken config fails the load, naming the file.
    write(
        conf,
        "10-folded.conflist",
        &json!({"cniVersion": "1.1.0", "name": "folded", "plugins": [{"type": "loopback"}]}),
    );
    let out = node.cnitool_with(&bin("cnitool"), &["add", "folded", &netns], &[]);
    assert_ne!(out.exit_code, 0, "{out:?}");
    assert!(out.stderr.contains("05-broken.conf"), "{out:?}");
    // loadOnlyInlinedPlugins without `plugins` is refused.
    write(
        conf,
        "10-folded.conflist",
        &json!({"cniVersion": "1.1.0", "name": "folded", "loadOnlyInlinedPlugins": true}),
    );
    let out = node.cnitool_with(&bin("cnitool"), &["add", "folded", &netns], &[]);
    assert_ne!(out.exit_code, 0, "{out:?}");
    assert!(out.stderr.contains("loadOnlyInlinedPlugins"), "{out:?}");
}
