//! The static IPAM plugin: its results against Debian's Go 1.1.1 `static`
//! for every address source and version (and the deliberate differences),
//! CHECK and DEL side by side, then whole chains in real namespaces with
//! real traffic, through our cnitool, the upstream Go libcni's
//! `go-cnitool` and containerd's CRI path (`go-cni-cri`): a multus-style
//! macvlan + static network, and bridge + static.

use serde_json::{json, Value};
use std::path::Path;
use tests::*;

/// One direct call of `plugin` (ours or Go's; no namespace is needed:
/// static never opens one).
fn call(plugin: &Path, verb: &str, conf: &Value, cni_args: &str) -> PluginOutput {
    let mut env = vec![
        ("CNI_COMMAND", verb),
        ("CNI_CONTAINERID", "ctr-static"),
        ("CNI_NETNS", "/run/netns/unused"),
        ("CNI_IFNAME", "eth0"),
        // Go's skel requires it for every verb but VERSION.
        ("CNI_PATH", "/nonexistent"),
    ];
    if !cni_args.is_empty() {
        env.push(("CNI_ARGS", cni_args));
    }
    call_plugin(None, plugin, &env, &conf.to_string())
}

fn net(version: &str, ipam: Value) -> Value {
    json!({"cniVersion": version, "name": "stnet", "type": "macvlan", "ipam": ipam})
}

#[test]
fn static_answers_version() {
    let out = call_plugin(None, &bin("static"), &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["supportedVersions"],
        json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
}

/// The configs whose results must be Go's, byte for byte once parsed.
fn same_as_go_cases() -> Vec<(&'static str, Value, &'static str)> {
    let full = json!({
        "type": "static",
        "addresses": [
            {"address": "10.10.0.5/24", "gateway": "10.10.0.1"},
            {"address": "3ffe:ffff:0:1ff::5/64", "gateway": "3ffe:ffff:0:1ff::1"}
        ],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.0.254"},
                   {"dst": "3ffe:ffff:0:1ff::/48"}],
        "dns": {"nameservers": ["10.10.0.1"], "domain": "example.com",
                "search": ["example.com", "svc"], "options": ["ndots:2"]}
    });
    let mut with_args = net(
        "1.0.0",
        json!({"type": "static",
        "addresses": [{"address": "10.10.0.5/24"}]}),
    );
    with_args["args"] = json!({"cni": {"ips": ["10.30.0.5/24", "fd30::5/64"]}});
    let mut with_runtime = with_args.clone();
    with_runtime["runtimeConfig"] = json!({"ips": ["10.40.0.5/16"]});
    let mut empty_lists = net(
        "1.0.0",
        json!({"type": "static", "addresses": [{"address": "10.10.0.5/24"}]}),
    );
    empty_lists["args"] = json!({"cni": {"ips": []}});
    empty_lists["runtimeConfig"] = json!({"ips": []});
    let mut caps = net("1.0.0", json!({"TYPE": "static"}));
    caps["Args"] = json!({"CNI": {"IPs": ["10.30.0.5/24"]}});
    vec![
        ("every key, 1.0.0", net("1.0.0", full.clone()), ""),
        ("every key, 0.4.0", net("0.4.0", full.clone()), ""),
        ("every key, 0.3.1", net("0.3.1", full.clone()), ""),
        ("every key, 0.3.0", net("0.3.0", full.clone()), ""),
        ("every key, 0.2.0", net("0.2.0", full.clone()), ""),
        ("every key, 0.1.0", net("0.1.0", full), ""),
        (
            "CNI_ARGS IP= appended, GATEWAY= to the IP= address holding it",
            net(
                "1.0.0",
                json!({"type": "static", "addresses": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"}]}),
            ),
            "IgnoreUnknown=1;IP=10.20.0.5/24, fd20::5/64;GATEWAY=10.20.0.1,fd20::1,10.10.0.9",
        ),
        (
            "CNI_ARGS with an empty IP=",
            net(
                "1.0.0",
                json!({"type": "static", "addresses": [{"address": "10.10.0.5/24"}]}),
            ),
            "IP=;GATEWAY=",
        ),
        (
            "args.cni.ips replace the config's",
            with_args,
            "IP=10.20.0.5/24",
        ),
        ("runtimeConfig.ips replace args.cni.ips", with_runtime, ""),
        ("empty lists replace nothing", empty_lists, ""),
        (
            "an IPv4-mapped address is IPv4",
            net(
                "1.0.0",
                json!({"type": "static", "addresses": [{"address": "::ffff:10.10.0.5/120", "gateway": "::ffff:10.10.0.1"}]}),
            ),
            "",
        ),
        (
            "no address at all",
            net("1.0.0", json!({"type": "static"})),
            "",
        ),
        (
            "capitalised keys (Go folds every key but Address)",
            net(
                "1.0.0",
                json!({"type": "static", "Addresses": [{"ADDRESS": "10.10.0.5/24", "Gateway": "10.10.0.1", "Version": "4"}],
                       "Routes": [{"Dst": "0.0.0.0/0", "GW": "10.10.0.254"}],
                       "DNS": {"Nameservers": ["10.10.0.1"], "Search": ["s"]}}),
            ),
            "",
        ),
        ("capitalised args", caps, ""),
        // Go's own `Address` struct marshalled: the tagged `address` and
        // `gateway`, and the untagged `Address` (a net.IPNet) and `Version`.
        (
            "Go's Address struct as Go marshals it",
            net(
                "1.0.0",
                json!({"type": "static", "Name": "set over by the network's name",
                       "addresses": [
                    {"address": "10.10.0.5/24", "gateway": "10.10.0.1",
                     "Address": {"IP": "10.10.0.5", "Mask": "////AA=="}, "Version": "4"},
                    {"address": "3ffe:ffff:0:1ff::5/64",
                     "Address": {"IP": "3ffe:ffff:0:1ff::5", "Mask": "//////////8AAAAAAAAAAA=="},
                     "Version": "6"}
                ]}),
            ),
            "",
        ),
        (
            "an IPNet with an IP wins over address, which is then never read",
            net(
                "1.0.0",
                json!({"type": "static", "addresses": [
                    {"address": "not an address", "gateway": "10.10.0.1",
                     "Address": {"IP": "10.10.0.7", "Mask": "//8AAA=="}}
                ]}),
            ),
            "",
        ),
        (
            "an IPNet without an IP leaves address to be read",
            net(
                "1.0.0",
                json!({"type": "static", "addresses": [
                    {"address": "10.10.0.5/24", "Address": {"IP": null, "Mask": null}}
                ]}),
            ),
            "",
        ),
    ]
}

#[test]
fn results_are_the_go_references_for_every_source_and_version() {
    let Some(go) = go_plugin("static") else {
        return;
    };
    for (what, conf, cni_args) in same_as_go_cases() {
        let ours = call(&bin("static"), "ADD", &conf, cni_args);
        let theirs = call(&go, "ADD", &conf, cni_args);
        assert_eq!(theirs.exit_code, 0, "Go, {what}: {theirs:?}");
        assert_eq!(ours.result(), theirs.json(), "{what}");
    }
    // What the comparison is, so it cannot pass on two empty results.
    let (_, conf, cni_args) = &same_as_go_cases()[6];
    assert_eq!(
        call(&bin("static"), "ADD", conf, cni_args).result(),
        json!({"cniVersion": "1.0.0", "ips": [
            {"address": "10.10.0.5/24", "gateway": "10.10.0.1"},
            {"address": "10.20.0.5/24", "gateway": "10.20.0.1"},
            {"address": "fd20::5/64", "gateway": "fd20::1"}
        ], "dns": {}})
    );
    let (_, conf, _) = &same_as_go_cases()[4];
    assert_eq!(
        call(&bin("static"), "ADD", conf, "").result(),
        json!({"cniVersion": "0.2.0",
            "ip4": {"ip": "10.10.0.5/24", "gateway": "10.10.0.1",
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.0.254"}]},
            "ip6": {"ip": "3ffe:ffff:0:1ff::5/64", "gateway": "3ffe:ffff:0:1ff::1",
                    "routes": [{"dst": "3ffe:ffff:0:1ff::/48"}]},
            "dns": {"nameservers": ["10.10.0.1"], "domain": "example.com",
                    "search": ["example.com", "svc"], "options": ["ndots:2"]}})
    );
    // 1.1.0, which Go 1.1.1 does not speak.
    let out = call(
        &bin("static"),
        "ADD",
        &net(
            "1.1.0",
            json!({"addresses": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"}]}),
        ),
        "",
    );
    assert_eq!(
        out.result(),
        json!({"cniVersion": "1.1.0", "ips": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"}], "dns": {}})
    );
}

#[test]
fn errors_go_refuses_too_name_the_key() {
    let Some(go) = go_plugin("static") else {
        return;
    };
    let two_v4 = json!({"addresses": [{"address": "10.10.0.5/24"}, {"address": "10.20.0.5/24"}]});
    let cases: Vec<(&str, Value, &str, u64, &str)> = vec![
        (
            "an untagged Version that is no string",
            net(
                "1.0.0",
                json!({"addresses": [{"address": "10.10.0.5/24", "Version": 4}]}),
            ),
            "",
            7,
            "ipam.addresses[0].Version",
        ),
        (
            "an untagged IPAM Name that is no string",
            net(
                "1.0.0",
                json!({"Name": 5, "addresses": [{"address": "10.10.0.5/24"}]}),
            ),
            "",
            7,
            "ipam.Name",
        ),
        (
            "an IPNet whose IP is no address",
            net(
                "1.0.0",
                json!({"addresses": [{"Address": {"IP": "ten", "Mask": "////AA=="}}]}),
            ),
            "",
            7,
            "ipam.addresses[0].Address.IP: \"ten\" is not an IP address",
        ),
        (
            "an address without a prefix",
            net("1.0.0", json!({"addresses": [{"address": "10.10.0.5"}]})),
            "",
            7,
            "ipam.addresses[0].address: \"10.10.0.5\" is not an address in CIDR notation",
        ),
        (
            "a gateway that is no address",
            net(
                "1.0.0",
                json!({"addresses": [{"address": "10.10.0.5/24", "gateway": "gw"}]}),
            ),
            "",
            7,
            "ipam.addresses[0].gateway: \"gw\" is not an IP address",
        ),
        (
            "two IPv4 addresses at 0.2.0",
            net("0.2.0", two_v4.clone()),
            "",
            7,
            "cniVersion: 0.2.0 allows one address per family",
        ),
        (
            "CNI_ARGS IP= without a prefix",
            net("1.0.0", json!({})),
            "IP=10.20.0.5",
            4,
            "CNI_ARGS IP=10.20.0.5",
        ),
        (
            "CNI_ARGS GATEWAY= no address",
            net("1.0.0", json!({})),
            "IP=10.20.0.5/24;GATEWAY=x",
            4,
            "CNI_ARGS GATEWAY=x",
        ),
        (
            "an unknown CNI_ARGS key",
            net("1.0.0", json!({})),
            "FOO=bar",
            4,
            "FOO",
        ),
        (
            "runtimeConfig.ips without a prefix",
            {
                let mut c = net("1.0.0", json!({}));
                c["runtimeConfig"] = json!({"ips": ["10.40.0.5"]});
                c
            },
            "",
            7,
            "runtimeConfig.ips[0]",
        ),
        (
            "args.cni.ips not strings",
            {
                let mut c = net("1.0.0", json!({}));
                c["args"] = json!({"cni": {"ips": [5]}});
                c
            },
            "",
            7,
            "args.cni.ips[0]",
        ),
        (
            "no ipam",
            json!({"cniVersion": "1.0.0", "name": "stnet"}),
            "",
            7,
            "ipam: missing",
        ),
    ];
    for (what, conf, cni_args, code, needle) in cases {
        let theirs = call(&go, "ADD", &conf, cni_args);
        assert_ne!(theirs.exit_code, 0, "Go accepts {what}: {theirs:?}");
        call(&bin("static"), "ADD", &conf, cni_args).assert_error(code, needle);
    }
    assert_eq!(
        call(&go, "ADD", &net("0.3.0", two_v4.clone()), "").exit_code,
        0
    );
    assert_eq!(
        call(&bin("static"), "ADD", &net("0.3.0", two_v4), "").exit_code,
        0
    );
}

/// Where ours differs from Go 1.1.1 on purpose (the README lists each).
#[test]
fn deliberate_differences_from_go() {
    let Some(go) = go_plugin("static") else {
        return;
    };
    let ours = bin("static");
    // "Address" capitalised is Go's untagged net.IPNet field, not a
    // spelling of "address" (an exact key match wins): both refuse a CIDR
    // there, ours with code 7 naming the key (only the code differs).
    let conf = net(
        "1.0.0",
        json!({"Addresses": [{"Address": "10.10.0.5/24", "Gateway": "10.10.0.1"}]}),
    );
    call(&go, "ADD", &conf, "").assert_error(999, "cannot unmarshal string");
    call(&ours, "ADD", &conf, "").assert_error(7, "ipam.addresses[0].Address: ");
    // A route without dst: Go returns "dst": "<nil>".
    let conf = net(
        "1.0.0",
        json!({"addresses": [{"address": "10.10.0.5/24"}], "routes": [{"gw": "10.10.0.1"}]}),
    );
    assert_eq!(
        call(&go, "ADD", &conf, "").result()["routes"][0]["dst"],
        "<nil>"
    );
    call(&ours, "ADD", &conf, "").assert_error(7, "ipam.routes[0].dst: missing dst");
    // A gateway of the other family, the same address twice: Go returns
    // what no interface can be given.
    for (conf, needle) in [
        (
            net(
                "1.0.0",
                json!({"addresses": [{"address": "10.10.0.5/24", "gateway": "fd00::1"}]}),
            ),
            "ipam.addresses[0].gateway: fd00::1 is not of the family of address 10.10.0.5/24",
        ),
        (
            net(
                "1.0.0",
                json!({"addresses": [{"address": "10.10.0.5/24"}, {"address": "10.10.0.5/16"}]}),
            ),
            "ipam.addresses[1]: 10.10.0.5 is given twice (also by ipam.addresses[0])",
        ),
        (
            net("1.0.0", json!({"addresses": [{"address": "::ffff:10.10.0.5/64"}]})),
            "ipam.addresses[0].address: \"::ffff:10.10.0.5/64\" is an IPv4-mapped address with a prefix shorter than /96",
        ),
    ] {
        assert_eq!(call(&go, "ADD", &conf, "").exit_code, 0, "{conf}");
        call(&ours, "ADD", &conf, "").assert_error(7, needle);
    }
    // The Kubernetes CNI_ARGS without IgnoreUnknown (as every plugin of
    // the suite accepts them).
    let conf = net("1.0.0", json!({"addresses": [{"address": "10.10.0.5/24"}]}));
    call(&go, "ADD", &conf, "K8S_POD_NAME=web").assert_error(999, "unknown args");
    assert_eq!(call(&ours, "ADD", &conf, "K8S_POD_NAME=web").exit_code, 0);
    // A config address a later source replaces is still validated.
    let mut replaced = net("1.0.0", json!({"addresses": [{"address": "bad"}]}));
    replaced["runtimeConfig"] = json!({"ips": ["10.40.0.5/24"]});
    assert_eq!(call(&go, "ADD", &replaced, "").exit_code, 0);
    call(&ours, "ADD", &replaced, "").assert_error(7, "ipam.addresses[0].address");
}

#[test]
fn check_del_gc_and_status_side_by_side_with_go() {
    let Some(go) = go_plugin("static") else {
        return;
    };
    let ours = bin("static");
    let conf = net(
        "1.0.0",
        json!({"addresses": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"},
                              {"address": "fd10::5/64"}]}),
    );
    let result = call(&ours, "ADD", &conf, "").result();
    let with_prev = |prev: Value| {
        let mut c = conf.clone();
        c["prevResult"] = prev;
        c
    };
    // What a main plugin passes on: its interfaces, the addresses on them.
    let mut chained = result.clone();
    chained["interfaces"] = json!([{"name": "eth0", "sandbox": "/run/netns/x"}]);
    chained["ips"][0]["interface"] = json!(0);
    chained["ips"][1]["interface"] = json!(0);
    for plugin in [&ours, &go] {
        call(plugin, "CHECK", &with_prev(chained.clone()), "").assert_silent_ok();
    }
    // A gateway that is not the configured one: both fail.
    let mut wrong_gw = chained.clone();
    wrong_gw["ips"][0]["gateway"] = json!("10.10.0.2");
    assert_ne!(
        call(&go, "CHECK", &with_prev(wrong_gw.clone()), "").exit_code,
        0
    );
    call(&ours, "CHECK", &with_prev(wrong_gw), "").assert_error(
        102,
        "address 10.10.0.5/24 has gateway 10.10.0.2 in prevResult, configured 10.10.0.1",
    );
    // A configured address missing from prevResult: Go's CHECK passes (it
    // only compares the addresses it finds); ours fails.
    let mut missing = chained.clone();
    missing["ips"].as_array_mut().unwrap().remove(1);
    call(&go, "CHECK", &with_prev(missing.clone()), "").assert_silent_ok();
    call(&ours, "CHECK", &with_prev(missing), "")
        .assert_error(102, "address fd10::5/64 is not in prevResult");
    // No prevResult.
    assert_ne!(call(&go, "CHECK", &conf, "").exit_code, 0);
    call(&ours, "CHECK", &conf, "").assert_error(7, "prevResult");
    // CHECK reads CNI_ARGS too.
    call(
        &ours,
        "CHECK",
        &with_prev(chained.clone()),
        "IP=10.20.0.5/24",
    )
    .assert_error(102, "address 10.20.0.5/24 is not in prevResult");

    // DEL frees nothing and needs nothing: a config ADD would refuse too.
    let broken = net("1.0.0", json!({"addresses": "none"}));
    for plugin in [&ours, &go] {
        call(plugin, "DEL", &conf, "").assert_silent_ok();
        call(plugin, "DEL", &broken, "").assert_silent_ok();
    }

    // GC and STATUS (1.1.0): nothing to collect; ready when the config is.
    let mut conf11 = conf.clone();
    conf11["cniVersion"] = json!("1.1.0");
    conf11["cni.dev/valid-attachments"] = json!([]);
    let bare = |verb: &str, c: &Value| {
        call_plugin(
            None,
            &ours,
            &[("CNI_COMMAND", verb), ("CNI_PATH", "/nonexistent")],
            &c.to_string(),
        )
    };
    bare("GC", &conf11).assert_silent_ok();
    bare("STATUS", &conf11).assert_silent_ok();
    let mut bad11 = conf11.clone();
    bad11["ipam"]["addresses"][0]["address"] = json!("10.10.0.5");
    bare("STATUS", &bad11).assert_error(7, "ipam.addresses[0].address");
    bare("GC", &bad11).assert_silent_ok();
    bare("GC", &conf).assert_error(1, "config version does not allow GC");
}

// ---- chains in namespaces ---------------------------------------------------

/// A node with an uplink `up0` to an upstream namespace that holds
/// 10.70.0.1/24 and fd70::1/64: the LAN a multus macvlan network joins.
struct Lan {
    node: Node,
    upstream: Netns,
}

impl Lan {
    fn new(tag: &str) -> Lan {
        let lan = Lan {
            node: Node::new(tag),
            upstream: Netns::new(&format!("up-{tag}")),
        };
        lan.node.ns.ip(&["link", "set", "lo", "up"]);
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
}

/// A multus NetworkAttachmentDefinition with fixed addresses: macvlan on
/// `up0` with static IPAM, the `ips` capability for per-pod addresses.
fn multus_conflist(ipam: Value) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "lan",
        "plugins": [{
            "type": "macvlan", "master": "up0", "mode": "bridge",
            "capabilities": {"ips": true},
            "ipam": ipam
        }]
    })
}

/// `dst via gateway dev` of the routes of one family of `ns`, sorted.
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

/// Runs `verb` of conflist `lan` for `pod` through `tool` ("ours" or "go"),
/// with `env` (CNI_ARGS, CAP_ARGS, CNI_PATH, ...).
/// The container ID is the pod's name: the two tools derive different
/// ones from the namespace path, and a tool finds the other's cached result
/// by it.
fn via(lan: &Lan, tool: &str, verb: &str, pod: &Netns, env: &[(&str, &str)]) -> PluginOutput {
    let path = pod.path();
    let args = [verb, "lan", path.to_str().unwrap()];
    let mut env = env.to_vec();
    env.push(("CNI_CONTAINERID", pod.name()));
    match tool {
        "ours" => lan.node.cnitool_with(&bin("cnitool"), &args, &env),
        _ => lan
            .node
            .go_cnitool(&go_cnitool().expect("go-cnitool"), &args, &env),
    }
}

#[test]
fn multus_macvlan_pods_with_static_addresses_through_cnitool_and_go_cnitool() {
    if !require_root("multus_macvlan_pods_with_static_addresses_through_cnitool_and_go_cnitool") {
        return;
    }
    if go_cnitool().is_none() {
        return;
    }
    let lan = Lan::new("st-lan");
    lan.node.write_conf(
        "10-lan.conflist",
        &multus_conflist(json!({
            "type": "static",
            "addresses": [{"address": "10.70.0.10/24", "gateway": "10.70.0.1"},
                          {"address": "fd70::10/64", "gateway": "fd70::1"}],
            "routes": [{"dst": "192.0.2.0/24"}],
            "dns": {"nameservers": ["10.70.0.1"]}
        })),
    );
    let pods: Vec<Netns> = (0..3).map(|i| Netns::new(&format!("st-pod{i}"))).collect();
    let before: Vec<NetSnapshot> = pods.iter().map(NetSnapshot::take).collect();
    let node_before = NetSnapshot::take(&lan.node.ns);
    // Pod 0: the config's addresses, through our cnitool.
    let r0 = via(&lan, "ours", "add", &pods[0], &[]).result();
    let mac = r0["interfaces"][0]["mac"].clone();
    assert!(is_mac(&mac), "{r0}");
    assert_eq!(
        r0,
        json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "mac": mac, "mtu": 1500,
                            "sandbox": pods[0].path().display().to_string()}],
            "ips": [{"interface": 0, "address": "10.70.0.10/24", "gateway": "10.70.0.1"},
                    {"interface": 0, "address": "fd70::10/64", "gateway": "fd70::1"}],
            "routes": [{"dst": "192.0.2.0/24"}],
            "dns": {"nameservers": ["10.70.0.1"]}})
    );
    // Pod 1: the ips capability (CAP_ARGS), through go-cnitool.
    let caps = r#"{"ips": ["10.70.0.11/24", "fd70::11/64"]}"#;
    let r1 = via(&lan, "go", "add", &pods[1], &[("CAP_ARGS", caps)]).result();
    assert_eq!(
        r1["ips"],
        json!([{"interface": 0, "address": "10.70.0.11/24"},
               {"interface": 0, "address": "fd70::11/64"}])
    );
    // Pod 2: the ips capability through our cnitool.
    let r2 = via(
        &lan,
        "ours",
        "add",
        &pods[2],
        &[("CAP_ARGS", r#"{"ips": ["10.70.0.12/24"]}"#)],
    )
    .result();
    assert_eq!(r2["ips"][0]["address"], "10.70.0.12/24");

    assert_eq!(
        global_addrs(&pods[0], "eth0"),
        ["10.70.0.10/24", "fd70::10/64"]
    );
    assert_eq!(
        routes(&pods[0], IpFamily::V4),
        [
            "10.70.0.0/24 via - dev eth0",
            "192.0.2.0/24 via 10.70.0.1 dev eth0"
        ]
    );
    assert_eq!(
        global_addrs(&pods[1], "eth0"),
        ["10.70.0.11/24", "fd70::11/64"]
    );
    // Real traffic: pod to pod on the LAN, pods to and from upstream.
    assert_ping(&pods[0], "10.70.0.11");
    assert_ping(&pods[1], "fd70::10");
    assert_ping(&pods[2], "10.70.0.10");
    assert_ping(&pods[0], "10.70.0.1");
    assert_ping(&lan.upstream, "10.70.0.12");
    assert_ping(&lan.upstream, "fd70::11");

    // CHECK through both tools, each on the other's ADD.
    for (tool, pod) in [("go", &pods[0]), ("ours", &pods[1])] {
        let env: &[(&str, &str)] = if pod.name() == pods[1].name() {
            &[("CAP_ARGS", caps)]
        } else {
            &[]
        };
        let out = via(&lan, tool, "check", pod, env);
        assert_eq!(out.exit_code, 0, "{tool} check: {out:?}");
    }
    // DEL through the other tool than the ADD; a second DEL is fine too.
    for (tool, pod) in [("go", &pods[0]), ("ours", &pods[1]), ("go", &pods[2])] {
        for _ in 0..2 {
            let out = via(&lan, tool, "del", pod, &[]);
            assert_eq!(out.exit_code, 0, "{tool} del: {out:?}");
        }
    }
    for (pod, b) in pods.iter().zip(&before) {
        let now = NetSnapshot::take(pod);
        assert_eq!(now, *b, "{}: {:?}", pod.name(), b.diff(&now));
    }
    assert_eq!(NetSnapshot::take(&lan.node.ns), node_before);
}

#[test]
fn cni_args_ip_and_gateway_through_both_tools() {
    if !require_root("cni_args_ip_and_gateway_through_both_tools") {
        return;
    }
    if go_cnitool().is_none() {
        return;
    }
    let lan = Lan::new("st-args");
    lan.node.write_conf(
        "10-lan.conflist",
        &multus_conflist(json!({"type": "static", "routes": [{"dst": "0.0.0.0/0"}]})),
    );
    let (a, b) = (Netns::new("st-args-a"), Netns::new("st-args-b"));
    // macvlan reads CNI_ARGS too (MAC=) and, as Go's, refuses keys it
    // does not know unless IgnoreUnknown is set.
    let c = Netns::new("st-args-c");
    let empty = NetSnapshot::take(&c);
    let out = via(&lan, "ours", "add", &c, &[("CNI_ARGS", "IP=10.70.0.22/24")]);
    assert_ne!(out.exit_code, 0);
    assert!(out.stderr.contains("unknown args [\"IP\"]"), "{out:?}");
    let args_a = "IgnoreUnknown=1;K8S_POD_NAME=a;IP=10.70.0.20/24,fd70::20/64;GATEWAY=10.70.0.1";
    let args_b = "IgnoreUnknown=true;IP=10.70.0.21/24;GATEWAY=10.70.0.1";
    let ra = via(&lan, "ours", "add", &a, &[("CNI_ARGS", args_a)]).result();
    let rb = via(&lan, "go", "add", &b, &[("CNI_ARGS", args_b)]).result();
    assert_eq!(
        ra["ips"],
        json!([{"interface": 0, "address": "10.70.0.20/24", "gateway": "10.70.0.1"},
               {"interface": 0, "address": "fd70::20/64"}])
    );
    assert_eq!(
        rb["ips"],
        json!([{"interface": 0, "address": "10.70.0.21/24", "gateway": "10.70.0.1"}])
    );
    // The default route through the CNI_ARGS gateway.
    assert!(
        routes(&a, IpFamily::V4).contains(&"default via 10.70.0.1 dev eth0".to_string()),
        "{:?}",
        routes(&a, IpFamily::V4)
    );
    assert_ping(&a, "10.70.0.21");
    assert_ping(&lan.upstream, "fd70::20");
    // CHECK with the same CNI_ARGS; with others, the address is missing.
    assert_eq!(
        via(&lan, "go", "check", &a, &[("CNI_ARGS", args_a)]).exit_code,
        0
    );
    let out = via(&lan, "ours", "check", &b, &[("CNI_ARGS", args_a)]);
    assert_ne!(out.exit_code, 0, "{out:?}");
    assert!(
        out.stderr
            .contains("address 10.70.0.20/24 is not in prevResult"),
        "{out:?}"
    );
    // A bad CNI_ARGS is refused before anything is made.
    assert_eq!(NetSnapshot::take(&c), empty);
    let out = via(
        &lan,
        "ours",
        "add",
        &c,
        &[("CNI_ARGS", "IgnoreUnknown=1;IP=10.70.0.22")],
    );
    assert_ne!(out.exit_code, 0);
    assert!(out.stderr.contains("CNI_ARGS IP=10.70.0.22"), "{out:?}");
    assert_eq!(NetSnapshot::take(&c), empty);
    for (pod, args) in [(&a, args_a), (&b, args_b)] {
        assert_eq!(
            via(&lan, "ours", "del", pod, &[("CNI_ARGS", args)]).exit_code,
            0
        );
        assert!(pod.link("eth0").is_none());
    }
}

#[test]
fn bridge_with_static_through_containerds_cri() {
    if !require_root("bridge_with_static_through_containerds_cri") {
        return;
    }
    let Some(cri) = go_cni_cri() else {
        return;
    };
    let node = Node::new("st-cri");
    node.ns.ip(&["link", "set", "lo", "up"]);
    // go-cni sends its capitalised portMappings and the K8S_POD_* args.
    node.write_conf(
        "10-static.conflist",
        &json!({"cniVersion": "1.0.0", "name": "fixed", "plugins": [
            {"type": "bridge", "bridge": "st-br0", "isGateway": true,
             "ipam": {"type": "static",
                      "addresses": [{"address": "10.71.0.5/24", "gateway": "10.71.0.1"},
                                    {"address": "fd71::5/64", "gateway": "fd71::1"}],
                      "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]}),
    );
    let pod = Netns::new("st-cri-pod");
    let empty = NetSnapshot::take(&pod);
    let out = node.cri(&cri, "setup", Some(&pod), "sandbox-st", &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let r = out.json();
    // go-cni's own structs (no JSON tags).
    assert_eq!(
        r["interfaces"]["eth0"]["IPConfigs"],
        json!([{"IP": "10.71.0.5", "Gateway": "10.71.0.1"},
               {"IP": "fd71::5", "Gateway": "fd71::1"}]),
        "{r}"
    );
    assert_eq!(r["routes"], json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]));
    assert_eq!(global_addrs(&pod, "eth0"), ["10.71.0.5/24", "fd71::5/64"]);
    // The node's bridge holds the gateways: pod and node reach each other.
    assert_ping(&pod, "10.71.0.1");
    assert_ping(&pod, "fd71::1");
    assert_ping(&node.ns, "10.71.0.5");
    // (No CHECK: go-cni checks its loopback network too, whose 0.3.1
    // config does not allow CHECK, so containerd never calls it.)
    let out = node.cri(&cri, "status", None, "sandbox-st", &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let out = node.cri(&cri, "remove", Some(&pod), "sandbox-st", &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    // What the loopback network leaves on lo (its addresses once up) aside.
    let now = without_lo(NetSnapshot::take(&pod));
    let empty = without_lo(empty);
    assert_eq!(now, empty, "{:?}", empty.diff(&now));
    // A teardown after the namespace is gone, as containerd does it.
    let out = node.cri(&cri, "remove", None, "sandbox-st", &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
}

#[test]
fn gc_and_status_through_cnitool() {
    if !require_root("gc_and_status_through_cnitool") {
        return;
    }
    let lan = Lan::new("st-gc");
    let mut conf = multus_conflist(json!({"type": "static",
        "addresses": [{"address": "10.70.0.40/24"}]}));
    conf["cniVersion"] = json!("1.1.0");
    lan.node.write_conf("10-lan.conflist", &conf);
    let pod = Netns::new("st-gc-pod");
    // cnitool's own container ID (from the namespace path), which its GC
    // derives for the attachments it keeps.
    lan.node.cnitool("add", "lan", &pod).result();
    let status = lan
        .node
        .cnitool_with(&bin("cnitool"), &["status", "lan"], &[]);
    assert_eq!(
        (status.exit_code, status.stdout.as_str()),
        (0, ""),
        "{status:?}"
    );
    // GC keeping the pod: macvlan hands it to static, which frees nothing.
    let keep = format!("{}:eth0", pod.path().display());
    let gc = lan
        .node
        .cnitool_with(&bin("cnitool"), &["gc", "lan", &keep], &[]);
    assert_eq!(gc.exit_code, 0, "{gc:?}");
    assert_eq!(global_addrs(&pod, "eth0"), ["10.70.0.40/24"]);
    lan.node.cnitool("check", "lan", &pod).assert_silent_ok();
    // A static config ADD would refuse: STATUS says so, naming the key.
    conf["plugins"][0]["ipam"]["addresses"][0]["address"] = json!("10.70.0.40");
    lan.node.write_conf("10-lan.conflist", &conf);
    let status = lan
        .node
        .cnitool_with(&bin("cnitool"), &["status", "lan"], &[]);
    assert_ne!(status.exit_code, 0);
    assert!(
        status.stderr.contains("ipam.addresses[0].address"),
        "{status:?}"
    );
    // GC with no attachment kept DELs the pod's (from the cache).
    let gc = lan.node.cnitool_with(&bin("cnitool"), &["gc", "lan"], &[]);
    assert_eq!(gc.exit_code, 0, "{gc:?}");
    assert!(pod.link("eth0").is_none());
}

/// `s` without what is on `lo`.
fn without_lo(mut s: NetSnapshot) -> NetSnapshot {
    s.addrs.retain(|a| !a.starts_with("lo "));
    s.routes.retain(|r| !r.ends_with("dev=lo"));
    s.qdiscs.retain(|q| !q.starts_with("lo "));
    s
}

/// The same chain with Go's macvlan + static and with ours, in twin
/// nodes: the same result and pod state; then each side's CHECK and DEL
/// on the other's ADD (a node switching implementations).
#[test]
fn same_chain_state_as_the_go_reference() {
    if !require_root("same_chain_state_as_the_go_reference") {
        return;
    }
    let (Some(_), Some(_), Some(_)) = (go_plugin("static"), go_plugin("macvlan"), go_cnitool())
    else {
        return;
    };
    let conf = multus_conflist(json!({
        "type": "static",
        "addresses": [{"address": "10.70.0.30/24", "gateway": "10.70.0.1"}],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "198.51.100.0/24", "gw": "10.70.0.254"}]
        // No dns: Go's macvlan drops IPAM's (see plugins/macvlan/README.md).
    }));
    let mut results = Vec::new();
    let mut states = Vec::new();
    let lans = [Lan::new("st-cmp-go"), Lan::new("st-cmp-ours")];
    let pods = [Netns::new("st-cmp-go"), Netns::new("st-cmp-ours")];
    for (i, (lan, pod)) in lans.iter().zip(&pods).enumerate() {
        lan.node.write_conf("10-lan.conflist", &conf);
        let env: &[(&str, &str)] = if i == 0 {
            &[("CNI_PATH", GO_PLUGIN_DIR)]
        } else {
            &[]
        };
        let mut r = via(lan, "go", "add", pod, env).result();
        r["interfaces"][0]["mac"] = json!("<mac>");
        r["interfaces"][0]["sandbox"] = json!("<netns>");
        r["interfaces"][0].as_object_mut().unwrap().remove("mtu");
        results.push(r);
        states.push(json!({"addrs": global_addrs(pod, "eth0"),
                           "routes": routes(pod, IpFamily::V4), "up": pod.link_is_up("eth0")}));
        assert_ping(pod, "10.70.0.1");
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(states[0], states[1]);
    assert_eq!(
        states[1],
        json!({"addrs": ["10.70.0.30/24"], "up": true, "routes": [
            "10.70.0.0/24 via - dev eth0", "198.51.100.0/24 via 10.70.0.254 dev eth0",
            "default via 10.70.0.1 dev eth0"]})
    );
    // Ours CHECKs and DELs Go's ADD, Go's CHECKs and DELs ours.
    for (i, (lan, pod)) in lans.iter().zip(&pods).enumerate() {
        let env: &[(&str, &str)] = if i == 1 {
            &[("CNI_PATH", GO_PLUGIN_DIR)]
        } else {
            &[]
        };
        let out = via(lan, "go", "check", pod, env);
        assert_eq!(out.exit_code, 0, "check {i}: {out:?}");
        let out = via(lan, "go", "del", pod, env);
        assert_eq!(out.exit_code, 0, "del {i}: {out:?}");
        assert!(pod.link("eth0").is_none());
    }
}
