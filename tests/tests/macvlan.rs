//! The macvlan plugin with our host-local, in real namespaces: every test
//! has its own node namespace (plugins run there) with an uplink veth whose
//! other end is in an "upstream" namespace holding the gateway address, pod
//! namespaces beside them, real traffic, and the Go reference side by side.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tests::*;

/// A node with an uplink `up0` (MTU 1500) to an upstream namespace that
/// holds 10.70.0.1/24 and fd70::1/64, a CNI_PATH with our macvlan, bridge
/// and host-local (plus any script plugin a test adds), and a host-local
/// data dir.
struct Lan {
    node: Node,
    upstream: Netns,
    path: TempDir,
    data: TempDir,
}

impl Lan {
    fn new(tag: &str) -> Lan {
        let path = TempDir::new(&format!("path-{tag}"));
        for p in ["macvlan", "bridge", "host-local"] {
            std::os::unix::fs::symlink(bin(p), path.path().join(p)).expect("symlink");
        }
        let lan = Lan {
            node: Node::new(tag),
            upstream: Netns::new(&format!("up-{tag}")),
            path,
            data: TempDir::new(&format!("data-{tag}")),
        };
        lan.node.ns.ip(&[
            "link",
            "add",
            "up0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            lan.upstream.name(),
        ]);
        lan.node.ns.ip(&["link", "set", "up0", "up"]);
        let up = &lan.upstream;
        up.ip(&["link", "set", "lo", "up"]);
        up.ip(&["link", "set", "eth0", "up"]);
        up.ip(&["addr", "add", "10.70.0.1/24", "dev", "eth0"]);
        up.ip(&["addr", "add", "fd70::1/64", "dev", "eth0", "nodad"]);
        lan
    }

    /// A multus-style second network on `up0`: a host-local range of part
    /// of the upstream subnet, its gateway, a default route and one more.
    fn conf(&self, net: &str, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.1.0",
            "name": net,
            "type": "macvlan",
            "master": "up0",
            "mode": "bridge",
            "ipam": {
                "type": "host-local",
                "dataDir": self.data.path(),
                "ranges": [
                    [{"subnet": "10.70.0.0/24", "rangeStart": "10.70.0.10",
                      "rangeEnd": "10.70.0.20", "gateway": "10.70.0.1"}],
                    [{"subnet": "fd70::/64", "rangeStart": "fd70::10",
                      "rangeEnd": "fd70::20", "gateway": "fd70::1"}]
                ],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.0.2.0/24", "gw": "10.70.0.254"}]
            }
        });
        merge(&mut c, extra);
        c
    }

    fn call(&self, cmd: &str, pod: Option<&Netns>, cid: &str, conf: &Value) -> PluginOutput {
        self.call_env(cmd, pod, cid, "net1", conf, &[])
    }

    fn call_env(
        &self,
        cmd: &str,
        pod: Option<&Netns>,
        cid: &str,
        ifname: &str,
        conf: &Value,
        extra: &[(&str, &str)],
    ) -> PluginOutput {
        let netns = pod
            .map(|p| p.path().display().to_string())
            .unwrap_or_default();
        let path = self.path.path().display().to_string();
        let plugin = conf["type"].as_str().unwrap().to_string();
        let mut env = vec![
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", netns.as_str()),
            ("CNI_IFNAME", ifname),
            ("CNI_PATH", path.as_str()),
        ];
        env.extend_from_slice(extra);
        call_plugin(Some(&self.node.ns), &bin(&plugin), &env, &conf.to_string())
    }

    fn add(&self, pod: &Netns, cid: &str, conf: &Value) -> Value {
        self.call("ADD", Some(pod), cid, conf).result()
    }

    fn del(&self, pod: Option<&Netns>, cid: &str, conf: &Value) {
        self.call("DEL", pod, cid, conf).assert_silent_ok();
    }

    /// The addresses host-local holds for network `net`.
    fn leases(&self, net: &str) -> Vec<String> {
        leases_in(&self.data.path().join(net))
    }

    /// Writes an executable script plugin `name` into CNI_PATH.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        self.path
            .write_executable(name, &format!("#!/bin/sh\n{body}\n"))
    }

    fn ifindex(&self, ns: &Netns, dev: &str) -> Value {
        ns.link(dev).unwrap()["ifindex"].clone()
    }
}

fn with_prev(conf: &Value, result: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = result.clone();
    c
}

/// Names of the links of `ns` other than `lo`.
fn links(ns: &Netns) -> Vec<String> {
    let mut v: Vec<String> = ns
        .ip_json(&["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .filter(|n| n != "lo")
        .collect();
    v.sort();
    v
}

/// `dst gateway dev` of the routes of `ns` (one family), sorted.
fn routes(ns: &Netns, family: IpFamily) -> Vec<String> {
    let mut v: Vec<String> = ns
        .ip_json(&[ip_option(family), "route", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["dst"].as_str().unwrap_or("").starts_with("fe80"))
        .map(|r| {
            format!(
                "{} via {} dev {}",
                r["dst"].as_str().unwrap_or(""),
                r["gateway"].as_str().unwrap_or("-"),
                r["dev"].as_str().unwrap_or("")
            )
        })
        .collect();
    v.sort();
    v
}

/// The macvlan `dev` of `ns` as `ip -d link` shows it: kind, mode, MTU.
fn macvlan_of(ns: &Netns, dev: &str) -> (String, String, u64) {
    let l = ns
        .link(dev)
        .unwrap_or_else(|| panic!("no {dev} in {}", ns.name()));
    (
        l["linkinfo"]["info_kind"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        l["linkinfo"]["info_data"]["mode"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        l["mtu"].as_u64().unwrap(),
    )
}

/// One plugin call in `node` for container `ctr-cmp` / `net1` in `pod`.
fn call_in(
    node: &Netns,
    plugin: &Path,
    cmd: &str,
    pod: &Netns,
    cni_path: &Path,
    conf: &Value,
) -> PluginOutput {
    let netns = pod.path().display().to_string();
    let cni_path = cni_path.display().to_string();
    call_plugin(
        Some(node),
        plugin,
        &[
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", "ctr-cmp"),
            ("CNI_NETNS", &netns),
            ("CNI_IFNAME", "net1"),
            ("CNI_PATH", &cni_path),
        ],
        &conf.to_string(),
    )
}

#[test]
fn macvlan_answers_version() {
    let out = call_plugin(None, &bin("macvlan"), &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["supportedVersions"],
        json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
}

#[test]
fn pods_in_bridge_mode_reach_each_other_and_upstream() {
    if !require_root("pods_in_bridge_mode_reach_each_other_and_upstream") {
        return;
    }
    let lan = Lan::new("mv-bridge");
    let (a, b) = (Netns::new("mv-pod-a"), Netns::new("mv-pod-b"));
    let conf = lan.conf("second", json!({}));
    let ra = lan.add(&a, "ctr-a", &conf);
    let rb = lan.add(&b, "ctr-b", &conf);

    // The result, exactly.
    let mac = ra["interfaces"][0]["mac"].clone();
    assert!(is_mac(&mac), "{ra}");
    assert_eq!(
        ra,
        json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "net1", "mac": mac, "mtu": 1500,
                            "sandbox": a.path().display().to_string()}],
            "ips": [
                {"interface": 0, "address": "10.70.0.10/24", "gateway": "10.70.0.1"},
                {"interface": 0, "address": "fd70::10/64", "gateway": "fd70::1"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.0.2.0/24", "gw": "10.70.0.254"}],
            "dns": {}
        })
    );
    assert_eq!(rb["ips"][0]["address"], "10.70.0.11/24");
    assert_eq!(rb["ips"][1]["address"], "fd70::11/64");

    // The pod: a macvlan in bridge mode on up0 (in the node), nothing else.
    assert_eq!(links(&a), ["net1"]);
    let net1 = a.link("net1").unwrap();
    assert_eq!(net1["address"], mac);
    assert_eq!(net1["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(net1["linkinfo"]["info_data"]["mode"], "bridge");
    assert_eq!(net1["link_index"], lan.ifindex(&lan.node.ns, "up0"));
    assert!(net1.get("link_netnsid").is_some(), "{net1}");
    assert!(a.link_is_up("net1"));
    assert_eq!(global_addrs(&a, "net1"), ["10.70.0.10/24", "fd70::10/64"]);
    assert_eq!(
        routes(&a, IpFamily::V4),
        [
            "10.70.0.0/24 via - dev net1",
            "192.0.2.0/24 via 10.70.0.254 dev net1",
            "default via 10.70.0.1 dev net1",
        ]
    );
    assert_eq!(routes(&a, IpFamily::V6), ["fd70::/64 via - dev net1"]);
    // Nothing was created in the node.
    assert_eq!(links(&lan.node.ns), ["up0"]);
    assert_eq!(
        lan.leases("second"),
        ["10.70.0.10", "10.70.0.11", "fd70::10", "fd70::11"]
    );

    // Real traffic: pod to pod (bridge mode) and to upstream, both families.
    assert_ping(&a, "10.70.0.11");
    assert_ping(&b, "10.70.0.10");
    assert_ping(&a, "fd70::11");
    assert_ping(&a, "10.70.0.1");
    assert_ping(&b, "fd70::1");
    assert_ping(&lan.upstream, "10.70.0.10");

    lan.del(Some(&a), "ctr-a", &conf);
    lan.del(Some(&b), "ctr-b", &conf);
    assert_eq!(links(&a), Vec::<String>::new());
    assert_eq!(links(&b), Vec::<String>::new());
    assert_eq!(lan.leases("second"), Vec::<String>::new());
    assert_eq!(links(&lan.node.ns), ["up0"]);
}

#[test]
fn a_multus_style_pod_has_eth0_on_the_bridge_and_net1_on_macvlan() {
    if !require_root("a_multus_style_pod_has_eth0_on_the_bridge_and_net1_on_macvlan") {
        return;
    }
    let lan = Lan::new("mv-multus");
    let pod = Netns::new("mv-pod-multus");
    let primary = json!({
        "cniVersion": "1.0.0", "name": "podnet", "type": "bridge",
        "bridge": "cni0", "isDefaultGateway": true,
        "ipam": {"type": "host-local", "dataDir": lan.data.path(),
                 "ranges": [[{"subnet": "10.88.0.0/24"}]]}
    });
    let mut second = lan.conf("second", json!({"cniVersion": "1.0.0"}));
    // As multus second networks usually are: no default route over net1.
    second["ipam"]["routes"] = json!([{"dst": "10.71.0.0/16"}]);
    let out = lan.call_env("ADD", Some(&pod), "ctr-m", "eth0", &primary, &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(out.json()["ips"][0]["address"], "10.88.0.2/24");
    let out = lan.call_env("ADD", Some(&pod), "ctr-m", "net1", &second, &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let r = out.json();
    assert_eq!(r["interfaces"][0]["name"], "net1");
    assert_eq!(r["ips"][0]["address"], "10.70.0.10/24");

    assert_eq!(links(&pod), ["eth0", "net1"]);
    assert_eq!(macvlan_of(&pod, "net1").0, "macvlan");
    assert_eq!(
        routes(&pod, IpFamily::V4),
        [
            "10.70.0.0/24 via - dev net1",
            "10.71.0.0/16 via 10.70.0.1 dev net1",
            "10.88.0.0/24 via - dev eth0",
            "default via 10.88.0.1 dev eth0",
        ]
    );
    // Both reachable: eth0 from the node (the bridge's gateway), net1 from
    // upstream; and the pod reaches both sides.
    assert_ping(&lan.node.ns, "10.88.0.2");
    assert_ping(&lan.upstream, "10.70.0.10");
    assert_ping(&lan.upstream, "fd70::10");
    assert_ping(&pod, "10.88.0.1");
    assert_ping(&pod, "10.70.0.1");

    // CHECK of both, then DEL in reverse order.
    let checked = with_prev(&second, &r);
    let out = lan.call_env("CHECK", Some(&pod), "ctr-m", "net1", &checked, &[]);
    out.assert_silent_ok();
    let out = lan.call_env("DEL", Some(&pod), "ctr-m", "net1", &second, &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(links(&pod), ["eth0"]);
    assert_ping(&lan.node.ns, "10.88.0.2");
    let out = lan.call_env("DEL", Some(&pod), "ctr-m", "eth0", &primary, &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(links(&pod), Vec::<String>::new());
    assert_eq!(lan.leases("second"), Vec::<String>::new());
    assert_eq!(lan.leases("podnet"), Vec::<String>::new());
}

#[test]
fn private_mode_isolates_pods_vepa_and_passthru_are_set() {
    if !require_root("private_mode_isolates_pods_vepa_and_passthru_are_set") {
        return;
    }
    let lan = Lan::new("mv-modes");
    let (a, b) = (Netns::new("mv-pod-pa"), Netns::new("mv-pod-pb"));
    let private = lan.conf("private", json!({"mode": "private"}));
    lan.add(&a, "ctr-a", &private);
    lan.add(&b, "ctr-b", &private);
    assert_eq!(
        macvlan_of(&a, "net1"),
        ("macvlan".into(), "private".into(), 1500)
    );
    // Each reaches upstream, not the other.
    assert_ping(&a, "10.70.0.1");
    assert_ping(&b, "10.70.0.1");
    assert!(
        !ping_ok(&a, "10.70.0.11"),
        "private mode let pod a reach pod b"
    );
    lan.del(Some(&a), "ctr-a", &private);
    lan.del(Some(&b), "ctr-b", &private);

    let vepa = lan.conf("vepa", json!({"mode": "vepa"}));
    lan.add(&a, "ctr-a", &vepa);
    assert_eq!(
        macvlan_of(&a, "net1"),
        ("macvlan".into(), "vepa".into(), 1500)
    );
    assert_ping(&a, "10.70.0.1");
    lan.del(Some(&a), "ctr-a", &vepa);

    // passthru: one macvlan takes the master over; a second is refused and
    // rolled back (no link, no lease).
    let passthru = lan.conf("passthru", json!({"mode": "passthru"}));
    lan.add(&a, "ctr-a", &passthru);
    assert_eq!(macvlan_of(&a, "net1").1, "passthru");
    assert_ping(&a, "10.70.0.1");
    let out = lan.call("ADD", Some(&b), "ctr-b", &passthru);
    out.assert_error(100, "add macvlan \"net1\" (mode passthru) on link");
    assert_eq!(links(&b), Vec::<String>::new());
    assert_eq!(lan.leases("passthru"), ["10.70.0.10", "fd70::10"]);
    lan.del(Some(&a), "ctr-a", &passthru);
    assert_eq!(lan.leases("passthru"), Vec::<String>::new());
}

#[test]
fn config_and_master_errors_create_nothing() {
    if !require_root("config_and_master_errors_create_nothing") {
        return;
    }
    let lan = Lan::new("mv-invalid");
    let pod = Netns::new("mv-pod-invalid");
    let cases = [
        (
            json!({"mtu": 9000}),
            "mtu: invalid MTU 9000: larger than the MTU of master \"up0\" (1500)",
        ),
        (
            json!({"master": "nosuch0"}),
            "master: \"nosuch0\" not found in the plugin's network namespace",
        ),
        (
            json!({"master": ""}),
            "master: not set, and the plugin's network namespace has no default route",
        ),
        (
            json!({"master": "up0", "linkInContainer": true}),
            "master: \"up0\" not found in the container's network namespace (linkInContainer)",
        ),
        (
            json!({"mode": "fast"}),
            "mode: unknown macvlan mode \"fast\" (want bridge, private, vepa or passthru)",
        ),
        (json!({"mtu": -1}), "mtu: invalid MTU -1"),
        (
            json!({"mac": "01:00:5e:00:00:01"}),
            "mac: \"01:00:5e:00:00:01\" is a multicast address",
        ),
    ];
    for (extra, needle) in cases {
        let conf = lan.conf("invalid", extra);
        let out = lan.call("ADD", Some(&pod), "ctr-i", &conf);
        out.assert_error(7, &format!("invalid network config: {needle}"));
        assert_eq!(out.json()["cniVersion"], "1.1.0");
    }
    // An interface of that name already in the pod.
    pod.ip(&[
        "link", "add", "net1", "type", "veth", "peer", "name", "net1p",
    ]);
    lan.call("ADD", Some(&pod), "ctr-i", &lan.conf("invalid", json!({})))
        .assert_error(100, "CNI_IFNAME \"net1\" already exists");
    assert_eq!(macvlan_of(&pod, "net1").0, "veth");
    pod.ip(&["link", "del", "net1"]);
    // Nothing was created, no lease taken.
    assert_eq!(links(&pod), Vec::<String>::new());
    assert_eq!(links(&lan.node.ns), ["up0"]);
    assert_eq!(lan.leases("invalid"), Vec::<String>::new());
    // A DEL of what ADD refused still succeeds.
    lan.del(
        Some(&pod),
        "ctr-i",
        &lan.conf("invalid", json!({"mode": "fast", "master": "nosuch0"})),
    );

    // Within the limit, the MTU is set; a MAC from runtimeConfig is used.
    let conf = lan.conf(
        "mtu",
        json!({"mtu": 1400, "runtimeConfig": {"mac": "0a:58:0a:46:00:63"}}),
    );
    let r = lan.add(&pod, "ctr-mtu", &conf);
    assert_eq!(
        macvlan_of(&pod, "net1"),
        ("macvlan".into(), "bridge".into(), 1400)
    );
    assert_eq!(r["interfaces"][0]["mtu"], 1400);
    assert_eq!(r["interfaces"][0]["mac"], "0a:58:0a:46:00:63");
    assert_eq!(pod.link("net1").unwrap()["address"], "0a:58:0a:46:00:63");
    assert_ping(&pod, "10.70.0.1");
}

#[test]
fn the_default_route_interface_is_the_default_master() {
    if !require_root("the_default_route_interface_is_the_default_master") {
        return;
    }
    let lan = Lan::new("mv-default");
    lan.node.ns.ip(&[
        "link", "add", "other0", "type", "veth", "peer", "name", "other1",
    ]);
    lan.node.ns.ip(&["link", "set", "other0", "up"]);
    lan.node.ns.ip(&["route", "add", "default", "dev", "up0"]);
    let pod = Netns::new("mv-pod-default");
    let mut conf = lan.conf("dflt", json!({}));
    conf.as_object_mut().unwrap().remove("master");
    lan.add(&pod, "ctr-d", &conf);
    let net1 = pod.link("net1").unwrap();
    assert_eq!(net1["link_index"], lan.ifindex(&lan.node.ns, "up0"));
    assert_ping(&pod, "10.70.0.1");
}

#[test]
fn link_in_container_takes_the_master_from_the_pod() {
    if !require_root("link_in_container_takes_the_master_from_the_pod") {
        return;
    }
    let lan = Lan::new("mv-incont");
    let pod = Netns::new("mv-pod-incont");
    // The pod's own uplink to the upstream namespace: inner0.
    pod.ip(&[
        "link",
        "add",
        "inner0",
        "type",
        "veth",
        "peer",
        "name",
        "eth1",
        "netns",
        lan.upstream.name(),
    ]);
    pod.ip(&["link", "set", "inner0", "up"]);
    lan.upstream.ip(&["link", "set", "eth1", "up"]);
    lan.upstream
        .ip(&["addr", "add", "10.72.0.1/24", "dev", "eth1"]);
    let mut conf = lan.conf(
        "incont",
        json!({"master": "inner0", "linkInContainer": true}),
    );
    conf["ipam"]["ranges"] = json!([[{"subnet": "10.72.0.0/24", "rangeStart": "10.72.0.10",
                                       "rangeEnd": "10.72.0.20", "gateway": "10.72.0.1"}]]);
    conf["ipam"]["routes"] = json!([]);
    let r = lan.add(&pod, "ctr-c", &conf);
    let net1 = pod.link("net1").unwrap();
    assert_eq!(net1["linkinfo"]["info_kind"], "macvlan");
    // The lower device is in the same namespace: `ip` names it.
    assert_eq!(net1["link"], "inner0");
    assert!(net1.get("link_netnsid").is_none(), "{net1}");
    assert_eq!(links(&lan.node.ns), ["up0"]);
    assert_ping(&pod, "10.72.0.1");
    let out = lan.call("CHECK", Some(&pod), "ctr-c", &with_prev(&conf, &r));
    out.assert_silent_ok();
    // The same config without linkInContainer: up0's index is another link.
    let mut other = with_prev(&conf, &r);
    other["master"] = json!("up0");
    other["linkInContainer"] = json!(false);
    lan.call("CHECK", Some(&pod), "ctr-c", &other)
        .assert_error(102, "container macvlan \"net1\" is not on master \"up0\"");
    lan.del(Some(&pod), "ctr-c", &conf);
    assert_eq!(links(&pod), ["inner0"]);
    assert_eq!(lan.leases("incont"), Vec::<String>::new());
}

#[test]
fn del_without_the_namespace_twice_and_without_netns() {
    if !require_root("del_without_the_namespace_twice_and_without_netns") {
        return;
    }
    let lan = Lan::new("mv-del");
    let conf = lan.conf("del", json!({}));
    let pod = Netns::new("mv-pod-del");
    let path = pod.path();
    lan.add(&pod, "ctr-d", &conf);
    assert_eq!(lan.leases("del"), ["10.70.0.10", "fd70::10"]);
    drop(pod); // the runtime removed the namespace first
    assert!(!path.exists());
    let netns = path.display().to_string();
    let dir = lan.path.path().display().to_string();
    for _ in 0..2 {
        let out = call_plugin(
            Some(&lan.node.ns),
            &bin("macvlan"),
            &[
                ("CNI_COMMAND", "DEL"),
                ("CNI_CONTAINERID", "ctr-d"),
                ("CNI_NETNS", netns.as_str()),
                ("CNI_IFNAME", "net1"),
                ("CNI_PATH", dir.as_str()),
            ],
            &conf.to_string(),
        );
        out.assert_silent_ok();
        assert_eq!(lan.leases("del"), Vec::<String>::new());
    }
    // An empty CNI_NETNS releases the lease only; the link stays until a
    // DEL with the namespace.
    let pod2 = Netns::new("mv-pod-del2");
    lan.add(&pod2, "ctr-e", &conf);
    lan.del(None, "ctr-e", &conf);
    assert_eq!(lan.leases("del"), Vec::<String>::new());
    assert_eq!(links(&pod2), ["net1"]);
    lan.del(Some(&pod2), "ctr-e", &conf);
    lan.del(Some(&pod2), "ctr-e", &conf);
    lan.del(Some(&pod2), "never-added", &conf);
    assert_eq!(links(&pod2), Vec::<String>::new());
    // CNI_NETNS naming the node itself: its links are not touched, the
    // error says why, and IPAM is still released.
    lan.node.ns.ip(&[
        "link", "add", "net1", "type", "veth", "peer", "name", "net1p",
    ]);
    lan.call("DEL", Some(&lan.node.ns), "ctr-f", &conf)
        .assert_error(4, "is the plugin's own network namespace");
    assert!(lan.node.ns.link("net1").is_some());
}

#[test]
fn check_fails_once_the_address_is_removed() {
    if !require_root("check_fails_once_the_address_is_removed") {
        return;
    }
    let lan = Lan::new("mv-check");
    let pod = Netns::new("mv-pod-check");
    let conf = lan.conf("check", json!({}));
    let r = lan.add(&pod, "ctr-k", &conf);
    let checked = with_prev(&conf, &r);
    let out = lan.call("CHECK", Some(&pod), "ctr-k", &checked);
    out.assert_silent_ok();
    lan.call("CHECK", Some(&pod), "ctr-k", &conf)
        .assert_error(7, "prevResult");
    // Another mode than the link's.
    let mut vepa = checked.clone();
    vepa["mode"] = json!("vepa");
    lan.call("CHECK", Some(&pod), "ctr-k", &vepa).assert_error(
        102,
        "container macvlan \"net1\" is in mode bridge, configured vepa",
    );
    // A MAC that is not the link's.
    let mut wrong = r.clone();
    wrong["interfaces"][0]["mac"] = json!("0a:00:00:00:00:99");
    lan.call("CHECK", Some(&pod), "ctr-k", &with_prev(&conf, &wrong))
        .assert_error(102, "prevResult says 0a:00:00:00:00:99");
    // A route that is not there.
    let mut wrong = r.clone();
    wrong["routes"] = json!([{"dst": "10.123.0.0/16", "gw": "10.70.0.1"}]);
    lan.call("CHECK", Some(&pod), "ctr-k", &with_prev(&conf, &wrong))
        .assert_error(102, "route 10.123.0.0/16 via 10.70.0.1 not found");
    // Someone deletes the address by hand.
    pod.ip(&["addr", "del", "10.70.0.10/24", "dev", "net1"]);
    lan.call("CHECK", Some(&pod), "ctr-k", &checked)
        .assert_error(102, "address 10.70.0.10/24 not found on \"net1\"");
    // The link itself gone.
    pod.ip(&["link", "del", "net1"]);
    lan.call("CHECK", Some(&pod), "ctr-k", &checked)
        .assert_error(102, "container interface \"net1\" not found");
}

#[test]
fn failures_after_the_link_exists_leave_no_link_and_no_lease() {
    if !require_root("failures_after_the_link_exists_leave_no_link_and_no_lease") {
        return;
    }
    let lan = Lan::new("mv-fail");
    let pod = Netns::new("mv-pod-fail");
    // An IPAM plugin whose ADD fails: the link goes, and its DEL is called.
    let log = lan.path.path().join("ipam.log");
    lan.script(
        "failing-ipam",
        &format!(
            "cat >/dev/null; echo \"$CNI_COMMAND\" >> {}\n\
             [ \"$CNI_COMMAND\" = ADD ] || exit 0\n\
             echo '{{\"code\":11,\"msg\":\"no addresses left, try later\"}}'; exit 1",
            log.display()
        ),
    );
    let mut conf = lan.conf("fail", json!({}));
    conf["ipam"] = json!({"type": "failing-ipam"});
    lan.call("ADD", Some(&pod), "ctr-f", &conf)
        .assert_error(11, "no addresses left, try later");
    assert_eq!(links(&pod), Vec::<String>::new());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ADD\nDEL\n");

    // host-local allocates, then the pod cannot be configured (a route
    // through a gateway that is not on the link): link and lease go.
    let mut conf = lan.conf("after", json!({}));
    conf["ipam"]["routes"] = json!([{"dst": "10.99.0.0/16", "gw": "192.0.2.1"}]);
    lan.call("ADD", Some(&pod), "ctr-x", &conf)
        .assert_error(100, "add route 10.99.0.0/16 via 192.0.2.1");
    assert_eq!(links(&pod), Vec::<String>::new());
    assert_eq!(lan.leases("after"), Vec::<String>::new());
    assert_eq!(links(&lan.node.ns), ["up0"]);
}

#[test]
fn a_crash_at_any_step_is_cleaned_up_by_del() {
    if !require_root("a_crash_at_any_step_is_cleaned_up_by_del") {
        return;
    }
    let lan = Lan::new("mv-crash");
    let conf = lan.conf("crash", json!({}));
    for point in ["link", "ipam", "configure"] {
        let pod = Netns::new(&format!("mv-pod-crash-{point}"));
        let fault = format!("macvlan/{point}");
        let out = lan.call_env(
            "ADD",
            Some(&pod),
            "ctr-c",
            "net1",
            &conf,
            &[("CNI_FAULT_POINT", &fault)],
        );
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (-1, ""),
            "{fault}: {out:?}"
        );
        assert_eq!(
            links(&pod),
            ["net1"],
            "{fault}: the link exists when killed"
        );
        lan.del(Some(&pod), "ctr-c", &conf);
        assert_eq!(links(&pod), Vec::<String>::new(), "{fault}");
        assert_eq!(lan.leases("crash"), Vec::<String>::new(), "{fault}");
    }
    // Layer 2 only (no IPAM): the link comes up, no address.
    let pod = Netns::new("mv-pod-l2");
    let mut l2 = lan.conf("l2", json!({}));
    l2["ipam"] = json!({});
    let r = lan.add(&pod, "ctr-l2", &l2);
    assert!(r.get("ips").is_none(), "{r}");
    assert!(pod.link_is_up("net1"));
    assert_eq!(global_addrs(&pod, "net1"), Vec::<String>::new());
    lan.del(Some(&pod), "ctr-l2", &l2);
    assert_eq!(links(&pod), Vec::<String>::new());
}

#[test]
fn status_and_gc_go_to_ipam_and_status_checks_the_master() {
    if !require_root("status_and_gc_go_to_ipam_and_status_checks_the_master") {
        return;
    }
    let lan = Lan::new("mv-status");
    let dir = lan.path.path().display().to_string();
    lan.script(
        "recording-ipam",
        &format!("cat > {dir}/$CNI_COMMAND.stdin; exit 0"),
    );
    let mut conf = lan.conf("status", json!({}));
    conf["ipam"] = json!({"type": "recording-ipam"});
    conf["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "net1"}]);
    let call = |verb: &str, conf: &Value| {
        call_plugin(
            Some(&lan.node.ns),
            &bin("macvlan"),
            &[("CNI_COMMAND", verb), ("CNI_PATH", dir.as_str())],
            &conf.to_string(),
        )
    };
    for verb in ["GC", "STATUS"] {
        let out = call(verb, &conf);
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (0, ""),
            "{verb}: {out:?}"
        );
        let got = std::fs::read_to_string(lan.path.path().join(format!("{verb}.stdin"))).unwrap();
        assert_eq!(got, conf.to_string(), "{verb}");
    }
    let mut gone = conf.clone();
    gone["master"] = json!("nosuch0");
    call("STATUS", &gone).assert_error(
        50,
        "master \"nosuch0\" not found in the plugin's network namespace",
    );
    let mut none = conf.clone();
    none.as_object_mut().unwrap().remove("master");
    call("STATUS", &none).assert_error(50, "no master configured and no default route");
}

/// The pod's macvlan state in a form without what is random.
fn pod_state(pod: &Netns) -> Value {
    let (kind, mode, mtu) = macvlan_of(pod, "net1");
    json!({
        "kind": kind, "mode": mode, "mtu": mtu,
        "up": pod.link_is_up("net1"),
        "addrs": global_addrs(pod, "net1"),
        "routes4": routes(pod, IpFamily::V4),
        "routes6": routes(pod, IpFamily::V6),
    })
}

fn normalized(mut r: Value) -> Value {
    for i in r["interfaces"].as_array_mut().unwrap() {
        let o = i.as_object_mut().unwrap();
        o.remove("mtu"); // the Go 1.1.1 reference predates interfaces[].mtu
        assert!(is_mac(&o["mac"]), "{o:?}");
        o.insert("mac".into(), json!("<mac>"));
        o.insert("sandbox".into(), json!("<netns>"));
    }
    r
}

#[test]
fn same_state_as_the_go_reference() {
    if !require_root("same_state_as_the_go_reference") {
        return;
    }
    let (Some(go_macvlan), Some(_)) = (go_plugin("macvlan"), go_plugin("host-local")) else {
        return;
    };
    let ours = Lan::new("mv-ours");
    let go = Lan::new("mv-go");
    let (pod_ours, pod_go) = (Netns::new("mv-pod-ours"), Netns::new("mv-pod-go"));
    let conf_for = |lan: &Lan, mode: &str| {
        let mut c = lan.conf(
            &format!("cmp-{mode}"),
            // The Go 1.1.1 reference speaks up to 1.0.0; IPv4 only, as Go
            // 1.1.1 waits for IPv6 duplicate address detection.
            json!({"cniVersion": "1.0.0", "mode": mode, "mtu": 1450}),
        );
        c["ipam"]["ranges"] = json!([[{"subnet": "10.70.0.0/24", "rangeStart": "10.70.0.10",
                                         "rangeEnd": "10.70.0.20", "gateway": "10.70.0.1"}]]);
        c
    };
    let go_call = |cmd: &str, conf: &Value| {
        let netns = pod_go.path().display().to_string();
        call_plugin(
            Some(&go.node.ns),
            &go_macvlan,
            &[
                ("CNI_COMMAND", cmd),
                ("CNI_CONTAINERID", "ctr-cmp"),
                ("CNI_NETNS", &netns),
                ("CNI_IFNAME", "net1"),
                ("CNI_PATH", GO_PLUGIN_DIR),
            ],
            &conf.to_string(),
        )
    };
    for mode in ["bridge", "private", "vepa"] {
        let conf_go = conf_for(&go, mode);
        let out = go_call("ADD", &conf_go);
        assert_eq!(out.exit_code, 0, "Go ADD ({mode}): {out:?}");
        let go_result = out.json();
        let conf_ours = conf_for(&ours, mode);
        let our_result = ours.add(&pod_ours, "ctr-cmp", &conf_ours);
        assert_eq!(
            normalized(our_result.clone()),
            normalized(go_result.clone()),
            "{mode}"
        );
        let (s_ours, s_go) = (pod_state(&pod_ours), pod_state(&pod_go));
        assert_eq!(s_ours, s_go, "{mode}");
        // What the state is, so the comparison cannot pass on two empty sides.
        assert_eq!(
            s_ours,
            json!({
                "kind": "macvlan", "mode": mode, "mtu": 1450, "up": true,
                "addrs": ["10.70.0.10/24"],
                "routes4": ["10.70.0.0/24 via - dev net1",
                            "192.0.2.0/24 via 10.70.0.254 dev net1",
                            "default via 10.70.0.1 dev net1"],
                "routes6": [],
            }),
            "{mode}"
        );
        assert_ping(&pod_ours, "10.70.0.1");
        assert_ping(&pod_go, "10.70.0.1");
        // Each CHECKs the other's ADD (run in that one's node): a node can
        // switch implementations between ADD and CHECK.
        let out = call_in(
            &go.node.ns,
            &bin("macvlan"),
            "CHECK",
            &pod_go,
            ours.path.path(),
            &with_prev(&conf_go, &go_result),
        );
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (0, ""),
            "ours on Go's: {out:?}"
        );
        let out = call_in(
            &ours.node.ns,
            &go_macvlan,
            "CHECK",
            &pod_ours,
            Path::new(GO_PLUGIN_DIR),
            &with_prev(&conf_ours, &our_result),
        );
        assert_eq!(out.exit_code, 0, "Go's on ours: {out:?}");
        let out = go_call("DEL", &conf_go);
        assert_eq!(out.exit_code, 0, "Go DEL: {out:?}");
        ours.del(Some(&pod_ours), "ctr-cmp", &conf_ours);
        for pod in [&pod_go, &pod_ours] {
            assert_eq!(links(pod), Vec::<String>::new(), "{mode}");
        }
        let net = format!("cmp-{mode}");
        assert_eq!(ours.leases(&net), Vec::<String>::new());
        assert_eq!(go.leases(&net), Vec::<String>::new());
    }
}
