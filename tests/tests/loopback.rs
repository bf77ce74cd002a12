//! loopback, the skel every plugin shares (checked on all of them), and
//! the runtime (our cnitool and the upstream Go libcni's), in real
//! namespaces.

use serde_json::{json, Value};
use tests::*;

/// The plugins that open `CNI_NETNS` on ADD.
const NETNS_PLUGINS: &[&str] = &["loopback", "bridge"];

const ALL_VERSIONS: &[&str] = &[
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];

/// What VERSION lists: all seven, except for the plugins that (as their
/// Go originals) need results with interfaces: bandwidth and
/// tc-redirect-tap from 0.3.0 on, vrf from 0.3.1.
fn supported_versions(plugin: &str) -> &'static [&'static str] {
    match plugin {
        "bandwidth" | "tc-redirect-tap" => &ALL_VERSIONS[2..],
        "vrf" => &ALL_VERSIONS[3..],
        _ => ALL_VERSIONS,
    }
}

fn env<'a>(cmd: &'a str, netns: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_COMMAND", cmd),
        ("CNI_CONTAINERID", "ctr-1"),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "lo"),
        ("CNI_PATH", "/opt/cni/bin"),
    ]
}

fn conf(version: &str) -> String {
    json!({"cniVersion": version, "name": "lo-net", "type": "loopback"}).to_string()
}

#[test]
fn every_plugin_answers_version_with_its_versions() {
    for p in &tests::release::plugins() {
        let out = call_plugin(None, &bin(p), &[("CNI_COMMAND", "VERSION")], "");
        assert_eq!(out.exit_code, 0, "{p}: {out:?}");
        assert_eq!(
            out.json(),
            json!({
                "cniVersion": "1.1.0",
                "supportedVersions": supported_versions(p),
                "pluginVersion": tests::release::PLUGIN_VERSION,
            }),
            "{p}"
        );
    }
}

#[test]
fn skel_rejects_bad_env_and_config_with_spec_codes() {
    for p in &tests::release::plugins() {
        let plugin = bin(p);
        // Missing env: code 4 naming the variables.
        let out = call_plugin(None, &plugin, &[("CNI_COMMAND", "ADD")], &conf("1.0.0"));
        out.assert_error(
            4,
            "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME] missing",
        );
        // Bad JSON: 6; unknown cniVersion: 1; bad ifname and container ID: 4.
        call_plugin(
            None,
            &plugin,
            &env("ADD", "/proc/self/ns/net"),
            "{\"name\":",
        )
        .assert_error(6, "not valid JSON");
        call_plugin(
            None,
            &plugin,
            &env("ADD", "/proc/self/ns/net"),
            &conf("0.9.9"),
        )
        .assert_error(1, "\"0.9.9\"");
        let mut e = env("ADD", "/proc/self/ns/net");
        e[3].1 = "a/b";
        call_plugin(None, &plugin, &e, &conf("1.0.0")).assert_error(4, "CNI_IFNAME");
        let mut e = env("ADD", "/proc/self/ns/net");
        e[1].1 = "../etc";
        call_plugin(None, &plugin, &e, &conf("1.0.0")).assert_error(4, "CNI_CONTAINERID");
        call_plugin(None, &plugin, &env("BOGUS", "/x"), &conf("1.0.0"))
            .assert_error(4, "unknown CNI_COMMAND: BOGUS");
        // CHECK below 0.4.0 is refused by version.
        call_plugin(
            None,
            &plugin,
            &env("CHECK", "/proc/self/ns/net"),
            &conf("0.3.1"),
        )
        .assert_error(1, "does not allow CHECK");
    }
}

#[test]
fn a_netns_path_that_is_not_a_network_namespace_is_refused() {
    for p in NETNS_PLUGINS {
        let plugin = bin(p);
        // A path that is not a network namespace: a clear error naming it.
        call_plugin(None, &plugin, &env("ADD", "/etc/passwd"), &conf("1.0.0"))
            .assert_error(4, "/etc/passwd");
        call_plugin(
            None,
            &plugin,
            &env("ADD", "/proc/self/ns/mnt"),
            &conf("1.0.0"),
        )
        .assert_error(4, "not a network namespace");
        call_plugin(
            None,
            &plugin,
            &env("ADD", "/run/netns/cnit-does-not-exist"),
            &conf("1.0.0"),
        )
        .assert_error(4, "cnit-does-not-exist");
        // The plugin's own namespace is not a container's.
        call_plugin(
            None,
            &plugin,
            &env("ADD", "/proc/self/ns/net"),
            &conf("1.0.0"),
        )
        .assert_error(4, "own network namespace");
    }
}

fn expected_result(version: &str, netns: &str) -> Value {
    json!({
        "cniVersion": version,
        "interfaces": [{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": netns}],
        "ips": [{"interface": 0, "address": "127.0.0.1/8"}, {"interface": 0, "address": "::1/128"}],
        "dns": {}
    })
}

/// The result without the `version` keys 0.3.x/0.4.0 add.
fn without_ip_versions(mut v: Value) -> Value {
    if let Some(ips) = v["ips"].as_array_mut() {
        for ip in ips {
            ip.as_object_mut().map(|o| o.remove("version"));
        }
    }
    v
}

#[test]
fn add_check_del_in_a_pod_namespace() {
    if !require_root("add_check_del_in_a_pod_namespace") {
        return;
    }
    let node = Netns::new("node-lo");
    let pod = Netns::new("pod-lo");
    let netns = pod.path().to_str().unwrap().to_string();
    let plugin = bin("loopback");
    assert!(!pod.link_is_up("lo"), "a new namespace has lo down");

    let out = call_plugin(Some(&node), &plugin, &env("ADD", &netns), &conf("1.1.0"));
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(out.json(), expected_result("1.1.0", &netns));
    assert!(pod.link_is_up("lo"));
    assert!(!node.link_is_up("lo"), "the node's own lo was not touched");

    // 0.3.1 results carry ips[].version.
    let out = call_plugin(Some(&node), &plugin, &env("ADD", &netns), &conf("0.3.1"));
    assert_eq!(
        out.json()["ips"][1],
        json!({"version": "6", "interface": 0, "address": "::1/128"})
    );

    let out = call_plugin(Some(&node), &plugin, &env("CHECK", &netns), &conf("1.0.0"));
    out.assert_silent_ok();

    let out = call_plugin(Some(&node), &plugin, &env("DEL", &netns), &conf("1.0.0"));
    out.assert_silent_ok();
    assert!(!pod.link_is_up("lo"));
    call_plugin(Some(&node), &plugin, &env("CHECK", &netns), &conf("1.0.0"))
        .assert_error(102, "down");

    // Repeated DEL, DEL without CNI_NETNS and DEL after the namespace is gone.
    assert_eq!(
        call_plugin(Some(&node), &plugin, &env("DEL", &netns), &conf("1.0.0")).exit_code,
        0
    );
    assert_eq!(
        call_plugin(Some(&node), &plugin, &env("DEL", ""), &conf("1.0.0")).exit_code,
        0
    );
    drop(pod);
    let out = call_plugin(Some(&node), &plugin, &env("DEL", &netns), &conf("1.0.0"));
    assert_eq!(out.exit_code, 0, "{out:?}");
}

#[test]
fn chained_loopback_passes_prev_result_through() {
    if !require_root("chained_loopback_passes_prev_result_through") {
        return;
    }
    let node = Netns::new("node-lochain");
    let pod = Netns::new("pod-lochain");
    let netns = pod.path().to_str().unwrap().to_string();
    let prev = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": netns}],
        "ips": [{"address": "10.9.0.2/24", "gateway": "10.9.0.1", "interface": 0}],
        "dns": {}});
    let stdin = json!({"cniVersion": "1.0.0", "name": "n", "type": "loopback", "prevResult": prev});
    let mut e = env("ADD", &netns);
    e[3].1 = "lo";
    let out = call_plugin(Some(&node), &bin("loopback"), &e, &stdin.to_string());
    assert_eq!(out.json(), prev);
    assert!(pod.link_is_up("lo"));
}

#[test]
fn same_result_and_state_as_the_go_reference() {
    if !require_root("same_result_and_state_as_the_go_reference") {
        return;
    }
    let Some(go) = go_plugin("loopback") else {
        return;
    };
    let node = Netns::new("node-locmp");
    // Debian's Go plugins (1.1.1) speak up to 1.0.0. Below 1.0.0 they print
    // the 1.0 shape under the old label: without the `ips[].version` that
    // 0.3.x/0.4.0 require, and at 0.1.0/0.2.0 without `ip4`/`ip6`. We follow
    // the spec there, so the comparison leaves `version` out.
    for version in ["1.0.0", "0.4.0", "0.3.1", "0.3.0"] {
        let ours_pod = Netns::new("pod-ours");
        let go_pod = Netns::new("pod-go");
        let ours_ns = ours_pod.path().to_str().unwrap().to_string();
        let go_ns = go_pod.path().to_str().unwrap().to_string();
        let ours = call_plugin(
            Some(&node),
            &bin("loopback"),
            &env("ADD", &ours_ns),
            &conf(version),
        );
        let theirs = call_plugin(Some(&node), &go, &env("ADD", &go_ns), &conf(version));
        assert_eq!(theirs.exit_code, 0, "{theirs:?}");
        let mut ours_json = ours.json();
        ours_json["interfaces"][0]["sandbox"] = json!(go_ns);
        if version != "1.0.0" {
            assert_eq!(ours_json["ips"][0]["version"], "4");
            assert_eq!(ours_json["ips"][1]["version"], "6");
        }
        assert_eq!(without_ip_versions(ours_json), theirs.json(), "{version}");
        assert_eq!(ours_pod.link_is_up("lo"), go_pod.link_is_up("lo"));
        assert_eq!(
            ours_pod.ip_json(&["addr", "show", "lo"])[0]["addr_info"],
            go_pod.ip_json(&["addr", "show", "lo"])[0]["addr_info"]
        );
    }
}

fn lo_conflist(version: &str) -> Value {
    json!({"cniVersion": version, "name": "lo-net", "plugins": [{"type": "loopback"}]})
}

fn cache_file(node: &Node, cid: &str) -> std::path::PathBuf {
    node.shared_cache_dir()
        .join(format!("results/lo-net-{cid}-lo"))
}

#[test]
fn cnitool_add_check_del_a_loopback_conflist() {
    if !require_root("cnitool_add_check_del_a_loopback_conflist") {
        return;
    }
    let node = Node::new("cnitool-lo");
    node.write_conf("10-lo.conflist", &lo_conflist("1.1.0"));
    let pod = Netns::new("pod-cnitool");
    let netns = pod.path().to_str().unwrap().to_string();
    let run = |args: &[&str]| {
        node.cnitool_with(
            &bin("cnitool"),
            args,
            &[("CNI_IFNAME", "lo"), ("CNI_CONTAINERID", "ctr-7")],
        )
    };

    let out = run(&["add", "lo-net", &netns]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(out.json(), expected_result("1.1.0", &netns));
    assert!(pod.link_is_up("lo"));
    let cached: Value =
        serde_json::from_str(&std::fs::read_to_string(cache_file(&node, "ctr-7")).unwrap())
            .unwrap();
    assert_eq!(cached["kind"], "cniCacheV1");
    assert_eq!(cached["containerId"], "ctr-7");
    assert_eq!(cached["networkName"], "lo-net");
    assert_eq!(cached["ifName"], "lo");
    assert_eq!(cached["netns"], netns);
    assert_eq!(cached["result"], expected_result("1.1.0", &netns));

    let out = run(&["check", "lo-net", &netns]);
    out.assert_silent_ok();
    let out = run(&["status", "lo-net", &netns]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let out = run(&["del", "lo-net", &netns]);
    out.assert_silent_ok();
    assert!(!pod.link_is_up("lo"));
    assert!(
        !cache_file(&node, "ctr-7").exists(),
        "DEL removes the cache"
    );
    let out = run(&["del", "lo-net", &netns]);
    assert_eq!(out.exit_code, 0, "repeated DEL: {out:?}");

    // Errors name the failing plugin and exit 1.
    node.write_conf(
        "20-bad.conflist",
        &json!({"cniVersion": "1.0.0", "name": "bad-net", "plugins": [{"type": "loopback"}, {"type": "no-such-plugin"}]}),
    );
    let out = run(&["add", "bad-net", &netns]);
    assert_eq!(out.exit_code, 1, "{out:?}");
    assert!(out.stderr.contains("no-such-plugin"), "{out:?}");
}

#[test]
fn cnitool_derives_the_container_id_like_upstream() {
    if !require_root("cnitool_derives_the_container_id_like_upstream") {
        return;
    }
    let node = Node::new("cnitool-cid");
    node.write_conf("10-lo.conflist", &lo_conflist("1.0.0"));
    let pod = Netns::new("pod-cid");
    let netns = pod.path().to_str().unwrap().to_string();
    let out = node.cnitool_with(
        &bin("cnitool"),
        &["add", "lo-net", &netns],
        &[("CNI_IFNAME", "lo")],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    let names: Vec<String> = std::fs::read_dir(node.shared_cache_dir().join("results"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1);
    let cid = names[0]
        .strip_prefix("lo-net-")
        .unwrap()
        .strip_suffix("-lo")
        .unwrap();
    // "cnitool-" + 20 hex digits of sha512(netns path).
    let expected = String::from_utf8(
        run_ok(
            std::process::Command::new("sh")
                .args(["-c", &format!("printf %s '{netns}' | sha512sum")]),
        )
        .stdout,
    )
    .unwrap();
    assert_eq!(cid, format!("cnitool-{}", &expected[..20]));
}

#[test]
fn the_upstream_go_libcni_runs_our_plugin_and_shares_the_cache() {
    if !require_root("the_upstream_go_libcni_runs_our_plugin_and_shares_the_cache") {
        return;
    }
    let Some(go) = go_cnitool() else { return };
    let node = Node::new("gocnitool");
    node.write_conf("10-lo.conflist", &lo_conflist("1.0.0"));
    let pod = Netns::new("pod-go");
    let netns = pod.path().to_str().unwrap().to_string();
    let env = [("CNI_IFNAME", "lo"), ("CNI_CONTAINERID", "ctr-go")];

    // Go libcni → our loopback: add, check, del.
    let out = node.go_cnitool(&go, &["add", "lo-net", &netns], &env);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(out.json(), expected_result("1.0.0", &netns));
    assert!(pod.link_is_up("lo"));
    let go_cache: Value =
        serde_json::from_str(&std::fs::read_to_string(cache_file(&node, "ctr-go")).unwrap())
            .unwrap();
    let out = node.go_cnitool(&go, &["check", "lo-net", &netns], &env);
    assert_eq!(out.exit_code, 0, "{out:?}");

    // A cache Go wrote is read and removed by our DEL...
    let out = node.cnitool_with(&bin("cnitool"), &["del", "lo-net", &netns], &env);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(!pod.link_is_up("lo"));
    assert!(!cache_file(&node, "ctr-go").exists());

    // ...and one we wrote has the same keys and is read and removed by Go's.
    let out = node.cnitool_with(&bin("cnitool"), &["add", "lo-net", &netns], &env);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let ours: Value =
        serde_json::from_str(&std::fs::read_to_string(cache_file(&node, "ctr-go")).unwrap())
            .unwrap();
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    // Go libcni 1.1 has no `netns` key; upstream HEAD added it (GC needs it).
    let mut go_keys = keys(&go_cache);
    go_keys.push("netns".into());
    go_keys.sort();
    assert_eq!(keys(&ours), go_keys);
    assert_eq!(
        ours["config"], go_cache["config"],
        "same base64 of the same conflist bytes"
    );
    let out = node.go_cnitool(&go, &["check", "lo-net", &netns], &env);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let out = node.go_cnitool(&go, &["del", "lo-net", &netns], &env);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(!pod.link_is_up("lo"));
    assert!(!cache_file(&node, "ctr-go").exists());
}

/// Upstream's loopback (v1.x): `lo` whatever `CNI_IFNAME` says, the first
/// IPv4 and first IPv6 address of `lo` in the result, and a refusal when
/// `lo` carries an address outside the loopback ranges; through our
/// cnitool and Go libcni's.
#[test]
fn loopback_acts_on_lo_whatever_the_ifname_and_refuses_a_foreign_address() {
    if !require_root("loopback_acts_on_lo_whatever_the_ifname_and_refuses_a_foreign_address") {
        return;
    }
    let mut tools = vec![("cnitool", bin("cnitool"))];
    if let Some(go) = go_cnitool() {
        tools.push(("go-cnitool", go));
    }
    for (name, tool) in tools {
        let node = Node::new(&format!("lo-up-{name}"));
        // The Go libcni built here speaks up to 1.0.0.
        node.write_conf("10-lo.conflist", &lo_conflist("1.0.0"));
        let pod = Netns::new("pod-lo-up");
        let netns = pod.path().to_str().unwrap().to_string();
        // A loopback address added while lo is down comes before the
        // kernel's 127.0.0.1 (added when lo comes up): only the first
        // address of each family is reported.
        pod.ip(&["addr", "add", "127.0.0.2/8", "dev", "lo"]);
        pod.ip(&[
            "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
        ]);
        let env = [("CNI_IFNAME", "eth0"), ("CNI_CONTAINERID", "ctr-lo-up")];
        let run = |args: &[&str]| {
            if name == "cnitool" {
                node.cnitool_with(&tool, args, &env)
            } else {
                node.go_cnitool(&tool, args, &env)
            }
        };
        let out = run(&["add", "lo-net", &netns]);
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        let mut want = expected_result("1.0.0", &netns);
        want["ips"][0]["address"] = json!("127.0.0.2/8");
        assert_eq!(out.json(), want, "{name}");
        assert!(
            pod.ip(&["-4", "addr", "show", "dev", "lo"])
                .contains("127.0.0.1/8"),
            "{name}: lo has both; the result holds the first"
        );
        assert!(pod.link_is_up("lo"), "{name}");
        assert!(
            !pod.link_is_up("eth0"),
            "{name}: CNI_IFNAME eth0 was not touched"
        );
        let out = run(&["check", "lo-net", &netns]);
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        let out = run(&["del", "lo-net", &netns]);
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        assert!(!pod.link_is_up("lo"), "{name}: DEL took lo down");

        // lo with an address that is not a loopback one is refused, and
        // nothing is changed.
        pod.ip(&["addr", "add", "10.9.9.9/32", "dev", "lo"]);
        let out = run(&["add", "lo-net", &netns]);
        assert_eq!(out.exit_code, 1, "{name}: {out:?}");
        assert!(
            out.stderr.contains("non-loopback address 10.9.9.9")
                || out.stdout.contains("non-loopback address 10.9.9.9"),
            "{name}: {out:?}"
        );
    }
    // The plugin itself: the code and the message.
    let node = Netns::new("node-lo-bad");
    let pod = Netns::new("pod-lo-bad");
    pod.ip(&["addr", "add", "fd00:9::9/128", "dev", "lo"]);
    let netns = pod.path().to_str().unwrap().to_string();
    let mut e = env("ADD", &netns);
    e[3].1 = "eth0";
    call_plugin(Some(&node), &bin("loopback"), &e, &conf("1.1.0"))
        .assert_error(103, "loopback interface \"lo\"");
    call_plugin(Some(&node), &bin("loopback"), &e, &conf("1.1.0"))
        .assert_error(103, "non-loopback address fd00:9::9");
    assert!(!pod.link_is_up("lo"), "refused before anything changed");
}
