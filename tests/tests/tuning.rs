//! The tuning meta plugin in real namespaces: chained after an interface
//! the test makes (a veth from the node into the pod) or after our bridge,
//! every change read back in the pod, DEL restoring the exact previous
//! state, and the Go reference side by side, backups crossing over.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tests::*;

/// The sysctls the tests set, as paths under /proc/sys, and what they read.
const SYSCTLS: &[&str] = &[
    "net/ipv4/conf/eth0/arp_ignore",
    "net/ipv4/conf/eth0/arp_announce",
    "net/core/somaxconn",
];

/// A node, a CNI_PATH with our tuning, bridge and host-local, and data dirs.
struct Net {
    node: Node,
    path: TempDir,
    data: TempDir,
}

impl Net {
    fn new(tag: &str) -> Net {
        let path = TempDir::new(&format!("path-{tag}"));
        for p in ["tuning", "bridge", "host-local"] {
            std::os::unix::fs::symlink(bin(p), path.path().join(p)).expect("symlink");
        }
        Net {
            node: Node::new(tag),
            path,
            data: TempDir::new(&format!("data-{tag}")),
        }
    }

    /// A pod whose `eth0` is a veth from the node (`<host>` there), up,
    /// with 10.80.0.<n>/24; returns the pod and the prevResult a main
    /// plugin would have printed for it.
    fn pod(&self, tag: &str, host: &str, n: u8) -> (Netns, Value) {
        let pod = Netns::new(tag);
        self.node.ns.ip(&[
            "link",
            "add",
            host,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pod.name(),
        ]);
        self.node.ns.ip(&["link", "set", host, "up"]);
        pod.ip(&["link", "set", "eth0", "up"]);
        pod.ip(&["addr", "add", &format!("10.80.0.{n}/24"), "dev", "eth0"]);
        let mac = pod.link("eth0").unwrap()["address"].clone();
        let host_mac = self.node.ns.link(host).unwrap()["address"].clone();
        let prev = json!({
            "cniVersion": "1.1.0",
            "interfaces": [
                {"name": host, "mac": host_mac, "mtu": 1500},
                {"name": "eth0", "mac": mac, "mtu": 1500, "sandbox": pod.path().display().to_string()}
            ],
            "ips": [{"address": format!("10.80.0.{n}/24"), "gateway": "10.80.0.1", "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.80.0.53"]}
        });
        (pod, prev)
    }

    fn backup_dir(&self) -> PathBuf {
        self.data.path().join("tuning")
    }

    /// The tuning config with `extra` on top, backups in a temp dir.
    fn conf(&self, prev: &Value, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.1.0",
            "name": "tune",
            "type": "tuning",
            "dataDir": self.backup_dir(),
            "prevResult": prev,
        });
        if let (Some(b), Value::Object(e)) = (c.as_object_mut(), extra) {
            for (k, v) in e {
                b.insert(k, v);
            }
        }
        c
    }

    fn call(
        &self,
        plugin: &Path,
        cmd: &str,
        pod: Option<&Netns>,
        cid: &str,
        conf: &Value,
        extra: &[(&str, &str)],
    ) -> PluginOutput {
        PluginCall {
            node: &self.node.ns,
            plugin,
            cni_path: &self.path.path().display().to_string(),
            command: cmd,
            netns: pod.map(|p| p.path()),
            container_id: cid,
            conf,
            extra,
        }
        .run()
    }

    fn ours(&self, cmd: &str, pod: Option<&Netns>, cid: &str, conf: &Value) -> PluginOutput {
        self.call(&bin("tuning"), cmd, pod, cid, conf, &[])
    }

    fn add(&self, pod: &Netns, cid: &str, conf: &Value) -> Value {
        self.ours("ADD", Some(pod), cid, conf).result()
    }

    fn del(&self, pod: Option<&Netns>, cid: &str, conf: &Value) {
        self.ours("DEL", pod, cid, conf).assert_silent_ok();
    }

    /// The names in the backup directory.
    fn backups(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.backup_dir())
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

fn sysctl(ns: &Netns, key: &str) -> String {
    let out = run_ok(ns.command("cat").arg(Path::new("/proc/sys").join(key)));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn set_sysctl(ns: &Netns, key: &str, value: &str) {
    run_ok(
        ns.command("sh")
            .args(["-c", &format!("echo {value} > /proc/sys/{key}")]),
    );
}

/// What tuning can change in `pod`, read with `ip -j -d link` and from
/// /proc/sys.
fn state(pod: &Netns) -> Value {
    let l = pod.link("eth0").expect("eth0");
    let flags: Vec<&str> = l["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let mut sysctls = serde_json::Map::new();
    for k in SYSCTLS {
        sysctls.insert(k.to_string(), json!(sysctl(pod, k)));
    }
    json!({
        "mac": l["address"],
        "mtu": l["mtu"],
        "txqlen": l["txqlen"],
        "promisc": flags.contains(&"PROMISC"),
        "promiscuity": l["promiscuity"],
        "allmulti": flags.contains(&"ALLMULTI"),
        "up": flags.contains(&"UP"),
        "sysctl": sysctls,
    })
}

/// A config that changes everything tuning can change.
fn everything() -> Value {
    json!({
        "sysctl": {
            "net.ipv4.conf.IFNAME.arp_ignore": "1",
            "net/ipv4/conf/eth0/arp_announce": "2",
            "net.core.somaxconn": "512"
        },
        "mac": "0a:58:0a:50:00:63",
        "mtu": 1400,
        "promisc": true,
        "allmulti": true,
        "txQLen": 5000
    })
}

#[test]
fn tuning_answers_version() {
    let out = call_plugin(None, &bin("tuning"), &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["supportedVersions"],
        json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
}

#[test]
fn everything_is_applied_passed_through_and_restored_exactly() {
    if !require_root("everything_is_applied_passed_through_and_restored_exactly") {
        return;
    }
    let net = Net::new("tu-all");
    let (pod, prev) = net.pod("tu-pod-all", "vh-all", 2);
    let before = state(&pod);
    assert_eq!(before["sysctl"]["net/core/somaxconn"], "4096", "{before}");
    let conf = net.conf(&prev, everything());
    let r = net.add(&pod, "ctr-1", &conf);

    // prevResult, passed through with the new MAC and MTU on eth0.
    let mut want = prev.clone();
    want["interfaces"][1]["mac"] = json!("0a:58:0a:50:00:63");
    want["interfaces"][1]["mtu"] = json!(1400);
    assert_eq!(r, want);

    // Everything read back in the pod.
    assert_eq!(
        state(&pod),
        json!({
            "mac": "0a:58:0a:50:00:63", "mtu": 1400, "txqlen": 5000,
            "promisc": true, "promiscuity": 1, "allmulti": true, "up": true,
            "sysctl": {
                "net/ipv4/conf/eth0/arp_ignore": "1",
                "net/ipv4/conf/eth0/arp_announce": "2",
                "net/core/somaxconn": "512"
            }
        })
    );
    // The node's own sysctls are untouched.
    assert_eq!(sysctl(&net.node.ns, "net/core/somaxconn"), "4096");

    // The backup, in the Go reference's format plus the sysctls.
    assert_eq!(net.backups(), ["ctr-1_eth0.json"]);
    let file = net.backup_dir().join("ctr-1_eth0.json");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        text,
        format!(
            "{{\n \"mac\": {},\n \"promisc\": false,\n \"mtu\": 1500,\n \"allmulti\": false,\n \
             \"txQLen\": 1000,\n \"sysctl\": {{\n  \"net/ipv4/conf/eth0/arp_ignore\": \"0\",\n  \
             \"net/ipv4/conf/eth0/arp_announce\": \"0\",\n  \"net/core/somaxconn\": \"4096\"\n }}\n}}",
            before["mac"]
        )
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // CHECK agrees, and then finds what is changed by hand.
    let checked = net.conf(&r, everything());
    let out = net.ours("CHECK", Some(&pod), "ctr-1", &checked);
    out.assert_silent_ok();
    set_sysctl(&pod, "net/core/somaxconn", "100");
    net.ours("CHECK", Some(&pod), "ctr-1", &checked)
        .assert_error(
            102,
            "sysctl net/core/somaxconn is \"100\", configured \"512\"",
        );
    set_sysctl(&pod, "net/core/somaxconn", "512");
    pod.ip(&["link", "set", "eth0", "txqueuelen", "10"]);
    net.ours("CHECK", Some(&pod), "ctr-1", &checked)
        .assert_error(102, "\"eth0\" txqlen is 10, configured 5000");
    pod.ip(&[
        "link",
        "set",
        "eth0",
        "txqueuelen",
        "5000",
        "promisc",
        "off",
    ]);
    net.ours("CHECK", Some(&pod), "ctr-1", &checked)
        .assert_error(102, "\"eth0\" promiscuous mode is false, configured true");
    pod.ip(&["link", "set", "eth0", "promisc", "on"]);
    let out = net.ours("CHECK", Some(&pod), "ctr-1", &checked);
    out.assert_silent_ok();

    // DEL puts back exactly what was there, and removes the backup.
    net.del(Some(&pod), "ctr-1", &conf);
    assert_eq!(state(&pod), before);
    assert_eq!(net.backups(), Vec::<String>::new());
    // DEL again: nothing to do.
    net.del(Some(&pod), "ctr-1", &conf);
    assert_eq!(state(&pod), before);
}

#[test]
fn del_succeeds_without_the_namespace_and_removes_the_backup() {
    if !require_root("del_succeeds_without_the_namespace_and_removes_the_backup") {
        return;
    }
    let net = Net::new("tu-gone");
    let (pod, prev) = net.pod("tu-pod-gone", "vh-gone", 2);
    let conf = net.conf(&prev, everything());
    net.add(&pod, "ctr-g", &conf);
    assert_eq!(net.backups(), ["ctr-g_eth0.json"]);
    let path = pod.path();
    drop(pod);
    assert!(!path.exists());
    let netns = path.display().to_string();
    let dir = net.path.path().display().to_string();
    for _ in 0..2 {
        let out = call_plugin(
            Some(&net.node.ns),
            &bin("tuning"),
            &[
                ("CNI_COMMAND", "DEL"),
                ("CNI_CONTAINERID", "ctr-g"),
                ("CNI_NETNS", netns.as_str()),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", dir.as_str()),
            ],
            &conf.to_string(),
        );
        out.assert_silent_ok();
        assert_eq!(net.backups(), Vec::<String>::new());
    }
    // An empty CNI_NETNS, and the interface gone from a live namespace.
    let (pod2, prev2) = net.pod("tu-pod-gone2", "vh-gone2", 3);
    let conf2 = net.conf(&prev2, everything());
    net.add(&pod2, "ctr-h", &conf2);
    net.del(None, "ctr-h", &conf2);
    assert_eq!(net.backups(), Vec::<String>::new());
    net.add(&pod2, "ctr-i", &net.conf(&prev2, json!({"mtu": 1300})));
    pod2.ip(&["link", "del", "eth0"]);
    net.del(Some(&pod2), "ctr-i", &conf2);
    assert_eq!(net.backups(), Vec::<String>::new());
    // A DEL for a config ADD would refuse, and one that never was.
    net.del(
        Some(&pod2),
        "ctr-j",
        &net.conf(
            &prev2,
            json!({"sysctl": {"kernel.hostname": "x"}, "mtu": -1}),
        ),
    );
}

#[test]
fn invalid_keys_and_values_change_nothing() {
    if !require_root("invalid_keys_and_values_change_nothing") {
        return;
    }
    let net = Net::new("tu-invalid");
    let (pod, prev) = net.pod("tu-pod-invalid", "vh-inv", 2);
    let before = state(&pod);
    // Each case sets a good sysctl and MAC too, which must not happen.
    let good = json!({"net.core.somaxconn": "77"});
    let cases = [
        (
            json!({"sysctl": {"net.core.somaxconn": "77", "kernel.x": "1"}}),
            "sysctl: key \"kernel.x\": \"kernel/x\" is not under net/",
        ),
        (
            json!({"sysctl": {"net.core.somaxconn": "77", "net/../../x": "1"}}),
            "sysctl: key \"net/../../x\": \"net/../../x\" has an empty, \".\" or \"..\" component",
        ),
        (
            json!({"sysctl": {"net.core.somaxconn": "77", "net.ipv4..x": "1"}}),
            "sysctl: key \"net.ipv4..x\": \"net/ipv4//x\" has an empty",
        ),
        (
            json!({"sysctl": {"net.core.somaxconn": "77", "net.ipv4.conf.eth9.arp_ignore": "1"}}),
            "sysctl: key \"net.ipv4.conf.eth9.arp_ignore\": net/ipv4/conf/eth9/arp_ignore does \
             not exist in the container's network namespace",
        ),
        (
            json!({"sysctl": {"net.core.somaxconn": "77", "net.ipv4.conf": "1"}}),
            "sysctl: key \"net.ipv4.conf\": net/ipv4/conf is a directory, not a sysctl",
        ),
        (
            json!({"sysctl": good.clone(), "args": {"cni": {"sysctl": {"kernel.hostname": "x"}}}}),
            "args.cni.sysctl: key \"kernel.hostname\"",
        ),
        (
            json!({"sysctl": good.clone(), "mtu": -1}),
            "mtu: -1 is out of range",
        ),
        (
            json!({"sysctl": good.clone(), "mac": "01:00:5e:00:00:01"}),
            "mac: \"01:00:5e:00:00:01\" is a multicast address",
        ),
        (
            json!({"sysctl": good.clone(), "txQLen": -2}),
            "txQLen: -2 is out of range",
        ),
        (
            json!({"sysctl": good.clone(), "dataDir": "relative/dir"}),
            "dataDir: \"relative/dir\" is not an absolute path",
        ),
    ];
    for (extra, needle) in cases {
        let conf = net.conf(&prev, extra);
        let out = net.ours("ADD", Some(&pod), "ctr-x", &conf);
        out.assert_error(7, &format!("invalid network config: {needle}"));
        assert_eq!(state(&pod), before, "{needle}");
        assert_eq!(net.backups(), Vec::<String>::new(), "{needle}");
    }
    // Without prevResult: tuning only follows a main plugin.
    let mut conf = net.conf(&prev, json!({"sysctl": good.clone()}));
    conf.as_object_mut().unwrap().remove("prevResult");
    net.ours("ADD", Some(&pod), "ctr-x", &conf)
        .assert_error(7, "prevResult: missing");

    // The kernel refuses a value after sysctls and the MAC were set: all of
    // it is put back, and no backup stays.
    let conf = net.conf(
        &prev,
        json!({"sysctl": good.clone(), "mac": "0a:58:0a:50:00:07", "mtu": 70000}),
    );
    net.ours("ADD", Some(&pod), "ctr-x", &conf)
        .assert_error(100, "mtu: set mtu 70000 on link");
    assert_eq!(state(&pod), before);
    assert_eq!(net.backups(), Vec::<String>::new());
    let conf = net.conf(
        &prev,
        json!({"sysctl": {"net.core.somaxconn": "77", "net.ipv4.conf.eth0.arp_ignore": "abc"}}),
    );
    net.ours("ADD", Some(&pod), "ctr-x", &conf).assert_error(
        100,
        "sysctl: write \"abc\" to sysctl net/ipv4/conf/eth0/arp_ignore",
    );
    assert_eq!(state(&pod), before);
    assert_eq!(net.backups(), Vec::<String>::new());
}

#[test]
fn args_runtime_config_and_cni_args_feed_the_config() {
    if !require_root("args_runtime_config_and_cni_args_feed_the_config") {
        return;
    }
    let net = Net::new("tu-args");
    let (pod, prev) = net.pod("tu-pod-args", "vh-args", 2);
    let before = state(&pod);
    let conf = net.conf(
        &prev,
        json!({
            "mac": "0a:58:0a:50:00:01", "mtu": 1450, "sysctl": {"net.core.somaxconn": "300"},
            "runtimeConfig": {"mac": "0a:58:0a:50:00:02"},
            "args": {"cni": {"mac": "0a:58:0a:50:00:03", "mtu": 1420, "allmulti": true,
                             "txQLen": 7, "sysctl": {"net/core/somaxconn": "301"}}}
        }),
    );
    let out = net.call(
        &bin("tuning"),
        "ADD",
        Some(&pod),
        "ctr-a",
        &conf,
        &[(
            "CNI_ARGS",
            "IgnoreUnknown=1;MAC=0a:58:0a:50:00:04;K8S_POD_NAME=p",
        )],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(out.json()["interfaces"][1]["mac"], "0a:58:0a:50:00:03");
    let s = state(&pod);
    assert_eq!(
        (
            &s["mac"],
            &s["mtu"],
            &s["allmulti"],
            &s["txqlen"],
            &s["promisc"]
        ),
        (
            &json!("0a:58:0a:50:00:03"),
            &json!(1420),
            &json!(true),
            &json!(7),
            &json!(false)
        )
    );
    assert_eq!(s["sysctl"]["net/core/somaxconn"], "301");
    net.del(Some(&pod), "ctr-a", &conf);
    assert_eq!(state(&pod), before);

    // CNI_ARGS MAC over the config's; unknown CNI_ARGS keys are refused.
    let conf = net.conf(&prev, json!({"mac": "0a:58:0a:50:00:01"}));
    let out = net.call(
        &bin("tuning"),
        "ADD",
        Some(&pod),
        "ctr-b",
        &conf,
        &[("CNI_ARGS", "MAC=0a:58:0a:50:00:04")],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(state(&pod)["mac"], "0a:58:0a:50:00:04");
    net.del(Some(&pod), "ctr-b", &conf);
    net.call(
        &bin("tuning"),
        "ADD",
        Some(&pod),
        "ctr-c",
        &conf,
        &[("CNI_ARGS", "FOO=1")],
    )
    .assert_error(4, "FOO");
    // Another spec version: prevResult and output in 0.4.0.
    let mut old = net.conf(&prev, json!({"mac": "0a:58:0a:50:00:05"}));
    old["cniVersion"] = json!("0.4.0");
    old["prevResult"] = json!({"cniVersion": "0.4.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path().display().to_string()}],
        "ips": [{"version": "4", "address": "10.80.0.2/24", "interface": 0}]});
    let r = net.add(&pod, "ctr-d", &old);
    assert_eq!(
        r,
        json!({"cniVersion": "0.4.0",
               "interfaces": [{"name": "eth0", "mac": "0a:58:0a:50:00:05",
                               "sandbox": pod.path().display().to_string()}],
               "ips": [{"version": "4", "address": "10.80.0.2/24", "interface": 0}],
               "dns": {}})
    );
    net.del(Some(&pod), "ctr-d", &old);
    assert_eq!(state(&pod), before);
}

#[test]
fn a_crash_at_any_step_is_restored_by_del() {
    if !require_root("a_crash_at_any_step_is_restored_by_del") {
        return;
    }
    let net = Net::new("tu-crash");
    for (n, point) in ["backup", "sysctl", "link"].iter().enumerate() {
        let (pod, prev) = net.pod(&format!("tu-pod-crash-{point}"), &format!("vh-crash{n}"), 2);
        let before = state(&pod);
        let conf = net.conf(&prev, everything());
        let fault = format!("tuning/{point}");
        let out = net.call(
            &bin("tuning"),
            "ADD",
            Some(&pod),
            "ctr-c",
            &conf,
            &[("CNI_FAULT_POINT", &fault)],
        );
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (-1, ""),
            "{fault}: {out:?}"
        );
        assert_eq!(net.backups(), ["ctr-c_eth0.json"], "{fault}");
        if *point == "link" {
            assert_eq!(state(&pod)["mtu"], 1400, "{fault}: changed when killed");
        }
        net.del(Some(&pod), "ctr-c", &conf);
        assert_eq!(state(&pod), before, "{fault}");
        assert_eq!(net.backups(), Vec::<String>::new(), "{fault}");
    }
}

#[test]
fn chained_after_our_bridge_through_cnitool() {
    if !require_root("chained_after_our_bridge_through_cnitool") {
        return;
    }
    let net = Net::new("tu-chain");
    let pod = Netns::new("tu-pod-chain");
    let conflist = json!({
        "cniVersion": "1.1.0", "name": "podnet",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isDefaultGateway": true,
             "ipam": {"type": "host-local", "dataDir": net.data.path(),
                      "ranges": [[{"subnet": "10.88.0.0/24"}]]}},
            {"type": "tuning", "dataDir": net.backup_dir(), "mac": "0a:58:0a:58:00:42",
             "sysctl": {"net.ipv4.conf.IFNAME.arp_ignore": "1", "net.core.somaxconn": "1024"}}
        ]
    });
    net.node.write_conf("10-podnet.conflist", &conflist);
    let out = net.node.cnitool("add", "podnet", &pod);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let r = out.json();
    assert_eq!(r["interfaces"][2]["name"], "eth0");
    assert_eq!(r["interfaces"][2]["mac"], "0a:58:0a:58:00:42");
    assert_eq!(pod.link("eth0").unwrap()["address"], "0a:58:0a:58:00:42");
    assert_eq!(sysctl(&pod, "net/ipv4/conf/eth0/arp_ignore"), "1");
    assert_eq!(sysctl(&pod, "net/core/somaxconn"), "1024");
    // Traffic with the new MAC, both ways.
    let ping = |from: &Netns, ip: &str| {
        let ok = from
            .command("ping")
            .args(["-c1", "-W1", ip])
            .output()
            .expect("ping")
            .status
            .success();
        assert!(ok, "ping {ip} from {}", from.name());
    };
    ping(&pod, "10.88.0.1");
    ping(&net.node.ns, "10.88.0.2");
    let out = net.node.cnitool("check", "podnet", &pod);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        net.backups(),
        [format!("{}_eth0.json", cnitool_container_id(&net, &pod))]
    );
    let out = net.node.cnitool("del", "podnet", &pod);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(pod.link("eth0").is_none());
    assert_eq!(net.backups(), Vec::<String>::new());
    assert_eq!(sysctl(&pod, "net/core/somaxconn"), "4096", "restored");
}

/// The container ID cnitool used (from its cache file name).
fn cnitool_container_id(net: &Net, _pod: &Netns) -> String {
    let dir = net.node.shared_cache_dir().join("results");
    let name = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("podnet-"))
        .unwrap_or_else(|| panic!("no cache file in {}", dir.display()));
    name.trim_start_matches("podnet-")
        .trim_end_matches("-eth0")
        .to_string()
}

#[test]
fn same_state_as_the_go_reference_and_backups_cross_over() {
    if !require_root("same_state_as_the_go_reference_and_backups_cross_over") {
        return;
    }
    let Some(go_tuning) = go_plugin("tuning") else {
        return;
    };
    let net = Net::new("tu-go");
    // What Go 1.1.1 knows: no txQLen.
    let mut extra = everything();
    extra.as_object_mut().unwrap().remove("txQLen");
    let mut go_extra = extra.clone();
    go_extra["cniVersion"] = json!("1.0.0");

    // Same config, one pod each: same result, same state.
    let (pod_go, prev_go) = net.pod("tu-pod-go", "vh-go", 2);
    let (pod_ours, prev_ours) = net.pod("tu-pod-ours", "vh-ours", 3);
    let before_go = state(&pod_go);
    let before_ours = state(&pod_ours);
    let mut p_go = prev_go.clone();
    p_go["cniVersion"] = json!("1.0.0");
    let mut p_ours = prev_ours.clone();
    p_ours["cniVersion"] = json!("1.0.0");
    let conf_go = net.conf(&p_go, go_extra.clone());
    let conf_ours = net.conf(&p_ours, go_extra);
    let out = net.call(&go_tuning, "ADD", Some(&pod_go), "ctr-go", &conf_go, &[]);
    assert_eq!(out.exit_code, 0, "Go ADD: {out:?}");
    let go_result = out.json();
    let our_result = net.add(&pod_ours, "ctr-ours", &conf_ours);
    let normalize = |mut r: Value| {
        for i in r["interfaces"].as_array_mut().unwrap() {
            let o = i.as_object_mut().unwrap();
            o.remove("mtu"); // Go 1.1.1's result types predate interfaces[].mtu
            o.remove("sandbox");
            if o["name"] != "eth0" {
                o.insert("mac".into(), json!("<host mac>"));
                o.insert("name".into(), json!("<host veth>"));
            }
        }
        r["ips"][0]["address"] = json!("<address>");
        r
    };
    assert_eq!(normalize(our_result.clone()), normalize(go_result.clone()));
    assert_eq!(our_result["interfaces"][1]["mac"], "0a:58:0a:50:00:63");
    let (s_go, s_ours) = (state(&pod_go), state(&pod_ours));
    assert_eq!(s_ours, s_go);
    assert_eq!(
        (&s_ours["mtu"], &s_ours["promisc"], &s_ours["allmulti"]),
        (&json!(1400), &json!(true), &json!(true))
    );
    assert_eq!(s_ours["sysctl"]["net/ipv4/conf/eth0/arp_ignore"], "1");

    // The backups: the same, but for the sysctls ours also keeps.
    let read = |cid: &str| -> Value {
        let p = net.backup_dir().join(format!("{cid}_eth0.json"));
        serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
    };
    let go_backup = read("ctr-go");
    let mut our_backup = read("ctr-ours");
    assert!(our_backup
        .as_object_mut()
        .unwrap()
        .remove("sysctl")
        .is_some());
    let norm_mac = |mut v: Value| {
        v["mac"] = json!("<mac>");
        v
    };
    assert_eq!(norm_mac(our_backup), norm_mac(go_backup.clone()));
    assert_eq!(go_backup["mac"], before_go["mac"]);

    // Each DELs the other's ADD: the link comes back exactly. (Go neither
    // keeps nor restores sysctls.)
    let out = net.call(
        &go_tuning,
        "DEL",
        Some(&pod_ours),
        "ctr-ours",
        &conf_ours,
        &[],
    );
    assert_eq!(out.exit_code, 0, "Go DEL of ours: {out:?}");
    let mut want = before_ours.clone();
    want["sysctl"] = s_ours["sysctl"].clone();
    assert_eq!(state(&pod_ours), want);
    net.del(Some(&pod_go), "ctr-go", &conf_go);
    let mut want = before_go.clone();
    want["sysctl"] = s_go["sysctl"].clone();
    assert_eq!(state(&pod_go), want);
    assert_eq!(net.backups(), Vec::<String>::new());
}

/// `/etc/cni/tuning/allowlist.conf`, as the Go plugin enforces it: a
/// sysctl no line matches is refused (code 7 naming it) before anything is
/// changed. The file is put there for the plugins of this test only (an
/// overlay of `/etc` in their private mount namespace), and read through
/// each client: the plugin directly, our cnitool and Go libcni's.
#[test]
fn the_sysctl_allowlist_refuses_what_it_does_not_match() {
    if !require_root("the_sysctl_allowlist_refuses_what_it_does_not_match") {
        return;
    }
    let net = Net::new("tu-allow");
    net.node.ns.etc_file(
        "cni/tuning/allowlist.conf",
        "^net\\.core\\.somaxconn$\n\n  ^net\\.ipv4\\.conf\\.IFNAME\\.arp_ignore$  \n",
    );
    let (pod, prev) = net.pod("tu-allow-pod", "veth-al", 7);
    let before: Vec<String> = SYSCTLS.iter().map(|k| sysctl(&pod, k)).collect();
    let ok = net.conf(
        &prev,
        json!({"sysctl": {"net.core.somaxconn": "512", "net.ipv4.conf.IFNAME.arp_ignore": "1"}}),
    );
    net.add(&pod, "ctr-al", &ok);
    assert_eq!(sysctl(&pod, "net/core/somaxconn"), "512");
    net.del(Some(&pod), "ctr-al", &ok);
    assert_eq!(
        SYSCTLS.iter().map(|k| sysctl(&pod, k)).collect::<Vec<_>>(),
        before
    );

    for (extra, key) in [
        (
            json!({"sysctl": {"net.core.somaxconn": "512", "net.ipv4.conf.IFNAME.arp_announce": "2"}}),
            "sysctl.net.ipv4.conf.IFNAME.arp_announce",
        ),
        (
            json!({"sysctl": {"net.core.somaxconn": "512"},
                   "args": {"cni": {"sysctl": {"net.ipv4.conf.eth0.arp_ignore": "1"}}}}),
            "args.cni.sysctl.net.ipv4.conf.eth0.arp_ignore",
        ),
    ] {
        let out = net.ours("ADD", Some(&pod), "ctr-al", &net.conf(&prev, extra.clone()));
        out.assert_error(7, key);
        out.assert_error(7, "is not allowed by /etc/cni/tuning/allowlist.conf");
        assert_eq!(
            SYSCTLS.iter().map(|k| sysctl(&pod, k)).collect::<Vec<_>>(),
            before,
            "{extra}: nothing changed"
        );
        assert_eq!(net.backups(), Vec::<String>::new(), "{extra}: no backup");
    }
    // No pattern that parses: refused naming the file's line.
    net.node
        .ns
        .etc_file("cni/tuning/allowlist.conf", "^net\\.core\\.(somaxconn$\n");
    net.ours("ADD", Some(&pod), "ctr-al", &ok)
        .assert_error(7, "/etc/cni/tuning/allowlist.conf line 1");

    // Through the runtimes: a bridge + tuning chain refused by the allowlist.
    net.node
        .ns
        .etc_file("cni/tuning/allowlist.conf", "^net\\.core\\.somaxconn$\n");
    let conflist = json!({
        "cniVersion": "1.0.0", "name": "allownet",
        "plugins": [
            {"type": "bridge", "bridge": "cni-al",
             "ipam": {"type": "host-local", "dataDir": net.data.path(),
                      "ranges": [[{"subnet": "10.87.0.0/24"}]]}},
            {"type": "tuning", "dataDir": net.backup_dir(),
             "sysctl": {"net.core.somaxconn": "256", "net.ipv4.ip_forward": "1"}}
        ]
    });
    net.node.write_conf("10-allownet.conflist", &conflist);
    let mut tools = vec![("cnitool", bin("cnitool"))];
    if let Some(go) = go_cnitool() {
        tools.push(("go-cnitool", go));
    }
    for (name, tool) in tools {
        let p = Netns::new("tu-allow-rt");
        let path = p.path();
        let args = ["add", "allownet", path.to_str().unwrap()];
        let env = [("CNI_CONTAINERID", "ctr-alrt")];
        let out = if name == "cnitool" {
            net.node.cnitool_with(&tool, &args, &env)
        } else {
            net.node.go_cnitool(&tool, &args, &env)
        };
        assert_eq!(out.exit_code, 1, "{name}: {out:?}");
        assert!(
            out.stderr.contains("net.ipv4.ip_forward"),
            "{name}: {out:?}"
        );
        assert_eq!(
            sysctl(&p, "net/core/somaxconn"),
            "4096",
            "{name}: unchanged"
        );
        // The runtime DELs a failed ADD: nothing is left.
        let del = ["del", "allownet", path.to_str().unwrap()];
        let out = if name == "cnitool" {
            net.node.cnitool_with(&tool, &del, &env)
        } else {
            net.node.go_cnitool(&tool, &del, &env)
        };
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        assert!(p.link("eth0").is_none(), "{name}");
    }
}

/// A sysctl key written twice in the config: upstream (since v1.2.0)
/// refuses the config on ADD and CHECK, and so do we, naming the key; the
/// pod is left as it was and DEL still succeeds.
#[test]
fn a_sysctl_key_given_twice_is_refused() {
    if !require_root("a_sysctl_key_given_twice_is_refused") {
        return;
    }
    let net = Net::new("tun-dup");
    let (pod, prev) = net.pod("pod-tun-dup", "vdup", 9);
    let before = state(&pod);
    let conf = net.conf(&prev, json!({"sysctl": "PLACEHOLDER"}));
    // Duplicate keys cannot be built as a Value: write the text.
    let stdin = serde_json::to_string(&conf).expect("json").replace(
        "\"PLACEHOLDER\"",
        r#"{"net.core.somaxconn": "1000", "net.ipv4.conf.eth0.arp_ignore": "1", "net.core.somaxconn": "2000"}"#,
    );
    let path = net.path.path().display().to_string();
    let netns = pod.path().display().to_string();
    for cmd in ["ADD", "CHECK"] {
        let env = [
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", "ctr-dup"),
            ("CNI_NETNS", netns.as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", path.as_str()),
        ];
        let out = call_plugin(Some(&net.node.ns), &bin("tuning"), &env, &stdin);
        out.assert_error(7, "sysctl");
        assert!(
            out.stdout.contains("net.core.somaxconn") && out.stdout.contains("twice"),
            "{cmd}: {out:?}"
        );
        assert_eq!(state(&pod), before, "{cmd} changed the pod");
    }
    assert!(
        !net.backup_dir().exists() || tree(&net.backup_dir()).is_empty(),
        "no backup is written"
    );
    let env = [
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "ctr-dup"),
        ("CNI_NETNS", netns.as_str()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", path.as_str()),
    ];
    call_plugin(Some(&net.node.ns), &bin("tuning"), &env, &stdin).assert_silent_ok();
}

/// STATUS: fails (50, naming the path) only when backups cannot be
/// written under `dataDir`, which no ADD could get past; a config whose
/// sysctls name the interface (which STATUS has none of) is fine.
#[test]
fn status_checks_the_backup_dir() {
    let net = Net::new("tun-status");
    let conf = net.conf(
        &json!({}),
        json!({"cniVersion": "1.1.0", "sysctl": {"net.ipv4.conf.IFNAME.arp_ignore": "1"}}),
    );
    let env = [("CNI_COMMAND", "STATUS"), ("CNI_PATH", "/nonexistent")];
    call_plugin(None, &bin("tuning"), &env, &conf.to_string()).assert_silent_ok();
    std::fs::write(net.backup_dir(), "in the way").expect("write");
    call_plugin(None, &bin("tuning"), &env, &conf.to_string()).assert_error(
        50,
        &format!(
            "backups cannot be written: {} is not a directory",
            net.backup_dir().display()
        ),
    );
}
