//! Go's JSON rules, plugin by plugin: every key of every plugin's config,
//! written with the capitals containerd's go-cni sends (`HostPort`,
//! `IngressRate`) and in a mixed case (`hOsTpOrT`), reads exactly as
//! written in the documented case; map keys (sysctl names, capability
//! names, flannel's delegate) stay as they are, as Go keeps them. And a
//! DEL whose `runtimeConfig`, `prevResult` or plugin keys cannot be read
//! still removes everything the ADD made, and exits 0; so does GC.

use libcni::skel::CmdArgs;
use serde_json::{json, Value};
use tests::*;

/// How keys are rewritten.
#[derive(Clone, Copy, Debug)]
enum Case {
    /// `hostPort` → `HostPort`: go-cni's structs without JSON tags.
    UpperFirst,
    /// `hostPort` → `hOsTpOrT`.
    Mixed,
}

fn recase_key(k: &str, case: Case) -> String {
    match case {
        Case::UpperFirst => {
            let mut c = k.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect())
                .unwrap_or_default()
        }
        Case::Mixed => k
            .chars()
            .enumerate()
            .map(|(i, ch)| {
                if i % 2 == 0 {
                    ch.to_ascii_lowercase()
                } else {
                    ch.to_ascii_uppercase()
                }
            })
            .collect(),
    }
}

/// `v` with every object key recased, except the keys of the objects at
/// the paths in `maps` (dotted, `[]` for any list element: `args.cni.sysctl`).
fn recase(v: &Value, case: Case, maps: &[&str], path: &str) -> Value {
    match v {
        Value::Object(m) => {
            let keep = maps.contains(&path);
            Value::Object(
                m.iter()
                    .map(|(k, v)| {
                        let child = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}.{k}")
                        };
                        let k = if keep { k.clone() } else { recase_key(k, case) };
                        (k, recase(v, case, maps, &child))
                    })
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| recase(x, case, maps, &format!("{path}[]")))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The `CmdArgs` a plugin gets for `conf`, with `CNI_ARGS` `cni_args`.
fn args_of(conf: &Value, cni_args: &str) -> CmdArgs {
    CmdArgs {
        cni_args: cni_args.to_string(),
        ..libcni::skel::test_args(&conf.to_string())
    }
}

/// Parses `conf` and both recasings of it with `parse`, and asserts the
/// three give the same (debug-printed) config, and that it parsed at all.
fn same_in_every_case<T: std::fmt::Debug, E: std::fmt::Display>(
    plugin: &str,
    conf: Value,
    maps: &[&str],
    parse: impl Fn(&Value) -> Result<T, E>,
) {
    let want = match parse(&conf) {
        Ok(c) => format!("{c:?}"),
        Err(e) => panic!("{plugin}: the documented spelling is refused: {e}\n{conf:#}"),
    };
    for case in [Case::UpperFirst, Case::Mixed] {
        let recased = recase(&conf, case, maps, "");
        assert_ne!(recased, conf, "{plugin}: {case:?} changed nothing");
        match parse(&recased) {
            Ok(c) => assert_eq!(format!("{c:?}"), want, "{plugin} {case:?}:\n{recased:#}"),
            Err(e) => panic!("{plugin} {case:?}: {e}\n{recased:#}"),
        }
    }
}

fn base(plugin: &str) -> Value {
    json!({"cniVersion": "1.1.0", "name": "net1", "type": plugin})
}

fn with(mut v: Value, extra: Value) -> Value {
    merge(&mut v, extra);
    v
}

/// The keys every plugin shares (libcni's `NetConf`): `capabilities`'
/// keys are capability names, exact.
#[test]
fn shared_keys() {
    let conf = with(
        base("bridge"),
        json!({
            "capabilities": {"portMappings": true, "io.kubernetes.cri.pod-annotations": false},
            "ipam": {"type": "host-local"},
            "dns": {"nameservers": ["10.0.0.10"], "domain": "d", "search": ["s"], "options": ["o"]},
            "prevResult": {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0}],
                           "interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": "/x", "mtu": 1500}],
                           "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}], "dns": {"nameservers": ["1.1.1.1"]}},
            "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]
        }),
    );
    same_in_every_case("NetConf", conf, &["capabilities"], |v| {
        let a = args_of(v, "");
        a.conf.check_shared()?;
        Ok::<_, libcni::Error>((
            a.conf.cni_version.clone(),
            a.conf.name.clone(),
            a.conf.capabilities()?,
            a.conf.ipam_type()?,
            a.conf.dns()?,
            a.prev_result()?,
            a.conf.gc_valid_attachments()?,
        ))
    });
}

#[test]
fn bridge_keys() {
    let parse = |v: &Value| bridge::config::Conf::parse(&args_of(v, "IgnoreUnknown=1"));
    let every = with(
        base("bridge"),
        json!({
            "bridge": "br9", "isGateway": true, "isDefaultGateway": true, "forceAddress": true,
            "ipMasq": true, "ipMasqBackend": "iptables", "mtu": 1400, "hairpinMode": true,
            "vlan": 7, "preserveDefaultVlan": true, "macspoofchk": true, "enabledad": true,
            "portIsolation": true,
            "runtimeConfig": {"mac": "02:00:00:00:00:02"},
            "args": {"cni": {"mac": "02:00:00:00:00:03"}},
            "ipam": {"type": "host-local"},
            "dns": {"nameservers": ["10.0.0.10"], "domain": "d", "search": ["s"], "options": ["o"]}
        }),
    );
    same_in_every_case("bridge", every, &[], parse);
    // The keys that cannot go with the ones above.
    let other = with(
        base("bridge"),
        json!({
            "promiscMode": true, "disableContainerInterface": true, "ipam": {},
            "vlanTrunk": [{"id": 5}, {"minID": 10, "maxID": 20}]
        }),
    );
    same_in_every_case("bridge", other, &[], parse);
}

#[test]
fn host_local_keys() {
    let parse = |v: &Value| host_local::config::IpamConfig::from_args(&args_of(v, ""));
    let every = with(
        base("bridge"),
        json!({
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.10",
                             "rangeEnd": "10.1.0.20", "gateway": "10.1.0.254"}]],
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.254", "mtu": 1400, "advmss": 1300,
                            "priority": 5, "table": 100, "scope": 0}],
                "dataDir": "/tmp/x", "resolvConf": "/etc/resolv.conf"
            },
            "runtimeConfig": {"ips": ["10.1.0.11/24"], "ipRanges": [[{"subnet": "10.2.0.0/24"}]]},
            "args": {"cni": {"ips": ["10.2.0.9"]}}
        }),
    );
    same_in_every_case("host-local", every, &[], parse);
    let legacy = with(
        base("bridge"),
        json!({"ipam": {"type": "host-local", "subnet": "10.3.0.0/24", "rangeStart": "10.3.0.5",
                        "rangeEnd": "10.3.0.9", "gateway": "10.3.0.1"}}),
    );
    same_in_every_case("host-local", legacy, &[], parse);
}

#[test]
fn portmap_keys() {
    let parse = |v: &Value| portmap::config::PortMapConf::parse(&args_of(v, ""));
    let mapping = json!({"runtimeConfig": {"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "udp", "hostIP": "10.0.0.1"}
    ]}});
    let iptables = with(
        with(base("portmap"), mapping.clone()),
        json!({"snat": false, "masqAll": true, "markMasqBit": 5, "backend": "iptables",
               "conditionsV4": ["-s", "1.2.3.4"], "conditionsV6": ["!", "-s", "::1"]}),
    );
    same_in_every_case("portmap", iptables, &[], parse);
    let chain = with(
        with(base("portmap"), mapping.clone()),
        json!({"externalSetMarkChain": "KUBE-MARK-MASQ"}),
    );
    same_in_every_case("portmap", chain, &[], parse);
    let nft = with(
        with(base("portmap"), mapping),
        json!({"backend": "nftables", "conditionsV4": ["ip saddr 10.0.0.0/8"]}),
    );
    same_in_every_case("portmap", nft, &[], parse);
}

#[test]
fn bandwidth_keys() {
    let parse = |v: &Value| bandwidth::config::parse(&args_of(v, ""));
    let top = with(
        base("bandwidth"),
        json!({"ingressRate": 8000000, "ingressBurst": 800000,
               "egressRate": 16000000, "egressBurst": 1600000}),
    );
    same_in_every_case("bandwidth", top, &[], parse);
    // containerd's annotations, as go-cni writes them.
    let capability = with(
        base("bandwidth"),
        json!({"runtimeConfig": {"bandwidth": {"ingressRate": 10000000, "ingressBurst": 4294967295u64,
                                               "egressRate": 10000000, "egressBurst": 4294967295u64}}}),
    );
    same_in_every_case("bandwidth", capability, &[], parse);
}

#[test]
fn flannel_keys() {
    // delegate, ipam and runtimeConfig are Go maps: their keys go to the
    // delegate as written.
    let conf = with(
        base("flannel"),
        json!({"subnetFile": "/tmp/subnet.env", "dataDir": "/tmp/fl",
               "delegate": {"type": "bridge", "hairpinMode": true},
               "ipam": {"dataDir": "/tmp/l", "routes": [{"dst": "10.96.0.0/12"}]},
               "runtimeConfig": {"portMappings": []}}),
    );
    same_in_every_case(
        "flannel",
        conf,
        &["delegate", "ipam", "ipam.routes[]", "runtimeConfig"],
        |v| flannel_meta::config::FlannelConf::parse(v.to_string().as_bytes()),
    );
}

#[test]
fn firewall_keys() {
    let parse = |v: &Value| firewall::config::FirewallConf::parse(&args_of(v, ""));
    let conf = with(
        base("firewall"),
        json!({"backend": "iptables", "ingressPolicy": "isolated",
               "iptablesAdminChainName": "MY-ADMIN", "firewalldZone": "public",
               "dataDir": "/run/cni/fw-test"}),
    );
    same_in_every_case("firewall", conf, &[], parse);
}

#[test]
fn tuning_keys() {
    let parse = |v: &Value| tuning::config::Conf::parse(&args_of(v, ""));
    let conf = with(
        base("tuning"),
        json!({"sysctl": {"net.core.somaxconn": "512"}, "mac": "02:00:00:00:00:04",
               "promisc": true, "mtu": 1400, "txQLen": 100, "allmulti": true, "dataDir": "/tmp/t",
               "runtimeConfig": {"mac": "02:00:00:00:00:05"},
               "args": {"cni": {"sysctl": {"net.ipv4.conf.IFNAME.arp_ignore": "1"},
                                "mac": "02:00:00:00:00:06", "promisc": false, "mtu": 1300,
                                "txQLen": 50, "allmulti": false}}}),
    );
    same_in_every_case("tuning", conf, &["sysctl", "args.cni.sysctl"], parse);
}

#[test]
fn macvlan_keys() {
    let parse = |v: &Value| macvlan::config::Conf::parse(&args_of(v, ""));
    let conf = with(
        base("macvlan"),
        json!({"master": "eth9", "mode": "private", "mtu": 1400, "mac": "02:00:00:00:00:07",
               "linkInContainer": true, "bcqueuelen": 100,
               "runtimeConfig": {"mac": "02:00:00:00:00:08"},
               "ipam": {"type": "host-local"},
               "dns": {"nameservers": ["10.0.0.10"]}}),
    );
    same_in_every_case("macvlan", conf, &[], parse);
}

#[test]
fn static_keys() {
    let parse = |v: &Value| static_ipam::config::StaticConfig::from_args(&args_of(v, ""));
    // `Address` is Go's untagged net.IPNet field, which that exact key
    // reaches first: a string there is refused, by Go too. Every other
    // case of the key folds onto `address`, so the recasings below start
    // from "ADDRESS", which both of them leave folding there.
    let go_field = with(
        base("macvlan"),
        json!({"ipam": {"type": "static", "addresses": [{"Address": "10.10.0.5/24"}]}}),
    );
    let e = parse(&go_field).expect_err("a string in Go's net.IPNet field");
    assert!(e.to_string().contains("ipam.addresses[0].Address"), "{e}");
    let conf = with(
        base("macvlan"),
        json!({"ipam": {"type": "static",
                        "addresses": [{"ADDRESS": "10.10.0.5/24", "gateway": "10.10.0.1"},
                                      {"ADDRESS": "fd10::5/64"}],
                        "routes": [{"dst": "0.0.0.0/0", "gw": "10.10.0.1"}],
                        "dns": {"nameservers": ["10.10.0.1"], "domain": "d", "search": ["s"], "options": ["o"]}}}),
    );
    same_in_every_case("static", conf.clone(), &[], parse);
    let replaced = with(
        conf,
        json!({"args": {"cni": {"ips": ["10.10.0.9/24"]}}, "runtimeConfig": {"ips": ["10.10.0.7/24"]}}),
    );
    same_in_every_case("static", replaced, &[], parse);
}

#[test]
fn sbr_keys() {
    let parse = |v: &Value| sbr::config::Conf::parse(&args_of(v, ""));
    let conf = with(
        base("sbr"),
        json!({"table": 500, "gateways": ["10.0.0.1", "fd00::1"], "addSourceHints": true}),
    );
    same_in_every_case("sbr", conf, &[], parse);
}

#[test]
fn ptp_keys() {
    let parse = |v: &Value| ptp::config::Conf::parse(&args_of(v, ""));
    let conf = with(
        base("ptp"),
        json!({"ipMasq": true, "ipMasqBackend": "nftables", "mtu": 1400,
               "ipam": {"type": "host-local"},
               "dns": {"nameservers": ["10.0.0.10"], "domain": "d", "search": ["s"], "options": ["o"]}}),
    );
    same_in_every_case("ptp", conf, &[], parse);
}

#[test]
fn tap_keys() {
    let parse = |v: &Value| tap::config::Conf::parse(&args_of(v, ""));
    let conf = with(
        base("tap"),
        json!({"mac": "02:00:00:00:00:09", "mtu": 1400, "multiQueue": true, "owner": 1000,
               "group": 1000, "bridge": "br0",
               "runtimeConfig": {"mac": "02:00:00:00:00:0a"},
               "args": {"cni": {"mac": "02:00:00:00:00:0b"}},
               "ipam": {"type": "host-local"}, "dns": {"nameservers": ["10.0.0.10"]}}),
    );
    same_in_every_case("tap", conf, &[], parse);
}

#[test]
fn dhcp_keys() {
    let parse =
        |v: &Value| dhcp::config::Conf::parse(&args_of(v, "IgnoreUnknown=1;K8S_POD_NAME=web"));
    let conf = with(
        base("macvlan"),
        json!({"ipam": {"type": "dhcp", "daemonSocketPath": "/run/cni/other.sock", "priority": 3,
                        "request": [{"option": "domain-name"}, {"skipDefault": true}],
                        "provide": [{"option": "host-name", "fromArg": "K8S_POD_NAME"},
                                    {"option": "user-class", "value": "x"}]}}),
    );
    same_in_every_case("dhcp", conf, &[], parse);
}

#[test]
fn host_device_keys() {
    let parse = |v: &Value| host_device::config::Conf::parse(&args_of(v, ""));
    let conf = with(
        base("host-device"),
        json!({"device": "ens1f0v3", "hwaddr": "0a:58:0a:46:01:01",
               "kernelpath": "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1",
               "pciBusID": "0000:3b:02.1", "DPDKMode": true, "useInterfaceNetwork": true,
               "runtimeConfig": {"deviceID": "0000:3b:02.2"},
               "ipam": {"type": "host-local"}, "dns": {"nameservers": ["10.0.0.10"]}}),
    );
    same_in_every_case("host-device", conf.clone(), &[], parse);
    // DEL and GC read the same keys the same way.
    let teardown =
        |v: &Value| Ok::<_, String>(host_device::config::Conf::for_teardown(&args_of(v, "")));
    same_in_every_case("host-device teardown", conf, &[], teardown);
}

/// tc-redirect-tap has no keys of its own (its tap comes from `CNI_ARGS`,
/// whose names are exact); what it reads from stdin is `prevResult`, as
/// Go's `types100.Result` reads it: `Interfaces`, `Sandbox`, `IPs`,
/// `Interface`, `Gateway` in any case.
#[test]
fn tc_redirect_tap_keys() {
    let parse = |v: &Value| {
        let args = args_of(
            v,
            "TC_REDIRECT_TAP_NAME=vmtap;TC_REDIRECT_TAP_UID=107;TC_REDIRECT_TAP_GID=108",
        );
        let conf = tc_redirect_tap::config::Conf::parse(&args)?;
        let prev = args.required_prev_result("chained")?;
        let at = tc_redirect_tap::pair::sandbox_interface(&prev, "eth0")?;
        let vm = tc_redirect_tap::pair::vm_and_tap(&prev, "c1")
            .map(|(vm, tap)| (vm.clone(), tap.clone()))
            .ok();
        Ok::<_, libcni::Error>((conf, prev, at, vm))
    };
    let conf = with(
        base("tc-redirect-tap"),
        json!({"prevResult": {"cniVersion": "1.0.0",
            "interfaces": [{"name": "veth1", "mac": "0a:00:00:00:00:01"},
                           {"name": "eth0", "mac": "0a:00:00:00:00:02", "sandbox": "/run/netns/p"},
                           {"name": "tap0", "mac": "0a:00:00:00:00:03", "sandbox": "/run/netns/p"},
                           {"name": "tap0", "mac": "0a:00:00:00:00:02", "sandbox": "c1"}],
            "ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 1},
                    {"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 3}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
            "dns": {"nameservers": ["10.0.0.10"]}}}),
    );
    same_in_every_case("tc-redirect-tap", conf.clone(), &[], parse);
    // And it did read them: the VM's interface and the tap were found.
    let (_, prev, at, vm) = parse(&recase(&conf, Case::UpperFirst, &[], "")).unwrap();
    assert_eq!((at, prev.ips.len()), (1, 2));
    let (vm, tap) = vm.expect("the VM's interface and its tap");
    assert_eq!(
        (vm.mac.as_str(), tap.sandbox.as_str()),
        ("0a:00:00:00:00:02", "/run/netns/p")
    );
}

#[test]
fn vlan_keys() {
    let parse = |v: &Value| vlan::config::Conf::parse(&args_of(v, ""));
    let conf = with(
        base("vlan"),
        json!({"master": "eth9", "vlanId": 100, "mtu": 1400, "linkInContainer": true,
               "ipam": {"type": "host-local"},
               "dns": {"nameservers": ["10.0.0.10"], "domain": "d", "search": ["s"], "options": ["o"]}}),
    );
    same_in_every_case("vlan", conf, &[], parse);
}

#[test]
fn ipvlan_keys() {
    let parse = |v: &Value| {
        let a = args_of(v, "");
        let c = ipvlan::config::Conf::parse(&a)?;
        let prev = a.prev_result()?;
        Ok::<_, libcni::Error>((
            c.master_for_add(prev.as_ref())?,
            c.addresses(prev.as_ref())?,
            c,
        ))
    };
    let conf = with(
        base("ipvlan"),
        json!({"master": "eth9", "mode": "l3s", "mtu": 1400, "linkInContainer": true,
               "ipam": {"type": "host-local"},
               "dns": {"nameservers": ["10.0.0.10"], "domain": "d", "search": ["s"], "options": ["o"]}}),
    );
    same_in_every_case("ipvlan", conf, &[], parse);
    // Chained: the master and the addresses from prevResult.
    let chained = with(
        base("ipvlan"),
        json!({"mode": "l2",
               "prevResult": {"cniVersion": "1.1.0", "interfaces": [{"name": "eth1", "mac": "02:00:00:00:00:0c"}],
                              "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0}],
                              "routes": [{"dst": "0.0.0.0/0"}]}}),
    );
    same_in_every_case("ipvlan", chained, &[], parse);
}

#[test]
fn dummy_keys() {
    let parse = |v: &Value| dummy::config::Conf::parse(&args_of(v, ""));
    let conf = with(base("dummy"), json!({"ipam": {"type": "host-local"}}));
    same_in_every_case("dummy", conf, &[], parse);
}

#[test]
fn vrf_keys() {
    let parse = |v: &Value| vrf::config::Conf::parse(&args_of(v, ""));
    let conf = with(base("vrf"), json!({"vrfname": "red", "table": 1001}));
    same_in_every_case("vrf", conf, &[], parse);
}

/// The runtime side: Go libcni reads a conflist's own keys from a map
/// (exactly) and each plugin's `type` and `capabilities` from a struct.
#[test]
fn runtime_reads_plugin_keys_as_go_libcni() {
    let list = json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
        {"Type": "portmap", "Capabilities": {"portMappings": true}}
    ]});
    let l = cnitool::conf::conf_list_from_bytes(list.to_string().as_bytes()).unwrap();
    let keys = cnitool::conf::PluginKeys::of(&l.plugins[0], "plugins[0]").unwrap();
    assert_eq!(keys.plugin_type, "portmap");
    assert_eq!(keys.capabilities.get("portMappings"), Some(&true));
    // List keys are map keys in Go libcni: "Name" is not the name.
    let e =
        cnitool::conf::conf_list_from_bytes(br#"{"Name": "n", "plugins": [{"type": "bridge"}]}"#)
            .unwrap_err();
    assert!(e.to_string().contains("name"), "{e}");
}

// ---- DEL with unusable parts ---------------------------------------------

/// `conf` with `runtimeConfig` and `prevResult` unusable and `bad` keys of
/// the plugin's own set to values ADD would refuse.
fn unusable(conf: &Value, bad: Value) -> Value {
    let mut v = conf.clone();
    v["runtimeConfig"] = json!("garbage");
    v["prevResult"] = json!(["not", "a", "result"]);
    v["dns"] = json!(5);
    merge(&mut v, bad);
    v
}

#[test]
fn del_removes_everything_whatever_else_the_config_holds() {
    if !require_root("del_removes_everything_whatever_else_the_config_holds") {
        return;
    }
    let node = Node::new("del-unusable");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let state = TempDir::new("del-unusable");
    let leases = state.path().join("leases");
    let tuning_dir = state.path().join("tuning");
    // Every plugin with state of its own, in one chain.
    let list = json!({
        "cniVersion": "1.1.0", "name": "delnet",
        "plugins": [
            {"type": "bridge", "bridge": "cni-del", "isGateway": true, "ipMasq": true, "macspoofchk": true,
             "ipam": {"type": "host-local", "dataDir": leases, "ranges": [[{"subnet": "10.86.0.0/24"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "ingressRate": 8000000, "ingressBurst": 800000,
             "egressRate": 8000000, "egressBurst": 800000},
            {"type": "firewall", "backend": "nftables"},
            {"type": "tuning", "dataDir": tuning_dir, "mtu": 1400, "sysctl": {"net.core.somaxconn": "777"}},
            {"type": "tc-redirect-tap"}
        ]
    });
    node.write_conf("10-del.conflist", &list);
    let caps =
        json!({"portMappings": [{"hostPort": 8081, "containerPort": 80, "protocol": "udp"}]})
            .to_string();
    // Shared objects first, so the baseline has them.
    let warm = Netns::new("del-warm");
    let cnitool = bin("cnitool");
    let warm_path = warm.path().display().to_string();
    let out = node.cnitool_with(
        &cnitool,
        &["add", "delnet", &warm_path],
        &[("CAP_ARGS", &caps)],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    node.cnitool_with(&cnitool, &["del", "delnet", &warm_path], &[])
        .assert_silent_ok();
    let before = (NetSnapshot::take(&node.ns), tree(state.path()));

    let pod = Netns::new("del-pod");
    let pod_path = pod.path().display().to_string();
    let out = node.cnitool_with(
        &cnitool,
        &["add", "delnet", &pod_path],
        &[("CAP_ARGS", &caps), ("CNI_CONTAINERID", "ctr-del")],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_ne!(
        before.0,
        NetSnapshot::take(&node.ns),
        "ADD changed the node"
    );
    assert!(pod.link("tap0").is_some(), "no tap from tc-redirect-tap");

    // Each plugin's DEL, in reverse, as a runtime would send it, but with
    // the parts it does not need unusable.
    let plugins = list["plugins"].as_array().unwrap().clone();
    // Keys each plugin's DEL does not need, unusable, and whether it reads
    // any of them and so says it ignores it (bandwidth's and tuning's DEL
    // read none). A key DEL needs (a dataDir) is the ADD's, since the
    // config does not change between ADD and DEL.
    let bad_keys = [
        (
            json!({"mtu": "x", "hairpinMode": 3, "vlan": -1, "ipMasqBackend": 5}),
            true,
        ),
        (
            json!({"snat": "yes", "markMasqBit": "x", "conditionsV4": 5}),
            true,
        ),
        (json!({"ingressRate": "fast", "egressBurst": -3}), false),
        (
            json!({"ingressPolicy": 7, "iptablesAdminChainName": []}),
            true,
        ),
        (
            json!({"mtu": "x", "sysctl": "net.core.somaxconn", "txQLen": "long"}),
            false,
        ),
        // No keys of its own; the unusable prevResult is said.
        (json!({"tapName": 5}), true),
    ];
    for (plugin, (bad, says)) in plugins.iter().zip(bad_keys).rev() {
        let mut conf = plugin.clone();
        conf["cniVersion"] = json!("1.1.0");
        conf["name"] = json!("delnet");
        let conf = unusable(&conf, bad);
        let name = conf["type"].as_str().unwrap().to_string();
        let out = PluginCall {
            node: &node.ns,
            plugin: &bin(&name),
            cni_path: &bin_dir().display().to_string(),
            command: "DEL",
            netns: Some(pod.path()),
            container_id: "ctr-del",
            conf: &conf,
            extra: &[],
        }
        .run();
        out.assert_silent_ok();
        if says {
            assert!(
                out.stderr.contains("ignor") || out.stderr.contains("cannot be read"),
                "{name}: says on stderr what it did not read: {out:?}"
            );
        }
    }
    assert!(pod.link("eth0").is_none());
    assert!(pod.link("tap0").is_none(), "tc-redirect-tap's tap is left");
    assert_eq!(
        before.0.diff(&NetSnapshot::take(&node.ns)),
        Vec::<String>::new()
    );
    // GC with the same unusable parts goes through too.
    for plugin in &plugins {
        let mut conf = plugin.clone();
        conf["cniVersion"] = json!("1.1.0");
        conf["name"] = json!("delnet");
        conf["cni.dev/valid-attachments"] = json!([]);
        let conf = unusable(&conf, json!({}));
        let name = conf["type"].as_str().unwrap().to_string();
        let out = call_plugin(
            Some(&node.ns),
            &bin(&name),
            &[
                ("CNI_COMMAND", "GC"),
                ("CNI_PATH", &bin_dir().display().to_string()),
            ],
            &conf.to_string(),
        );
        out.assert_silent_ok();
    }
    // The result cache of the ADD is the runtime's; the rest is gone.
    assert_eq!(before.1, tree(state.path()));
}

/// host-device's DEL gives the device back, and its GC goes through,
/// whatever else the config holds (its own keys unusable too, the
/// `device` it needs aside).
#[test]
fn host_device_del_gives_the_device_back_whatever_else_the_config_holds() {
    if !require_root("host_device_del_gives_the_device_back_whatever_else_the_config_holds") {
        return;
    }
    let node = Node::new("hd-unusable");
    node.ns.ip(&[
        "link", "add", "hd-u0", "type", "veth", "peer", "name", "hd-u0p",
    ]);
    let state = TempDir::new("hd-unusable");
    let leases = state.path().join("leases");
    let conf = with(
        base("host-device"),
        json!({"device": "hd-u0", "ipam": {"type": "host-local", "dataDir": leases,
                                            "ranges": [[{"subnet": "10.87.0.0/24"}]]}}),
    );
    let before = NetSnapshot::take(&node.ns);
    let pod = Netns::new("hd-unusable-pod");
    let path = bin_dir().display().to_string();
    let call = |cmd: &str, c: &Value| {
        PluginCall {
            node: &node.ns,
            plugin: &bin("host-device"),
            cni_path: &path,
            command: cmd,
            netns: Some(pod.path()),
            container_id: "ctr-hd",
            conf: c,
            extra: &[],
        }
        .run()
    };
    assert_eq!(call("ADD", &conf).exit_code, 0);
    assert!(pod.link("eth0").is_some());
    let bad = unusable(
        &conf,
        json!({"hwaddr": 5, "kernelpath": "/etc", "pciBusID": [], "DPDKMode": "x"}),
    );
    let out = call("DEL", &bad);
    out.assert_silent_ok();
    assert!(out.stderr.contains("ignor"), "{out:?}");
    assert!(pod.link("eth0").is_none());
    assert_eq!(
        before.diff(&NetSnapshot::take(&node.ns)),
        Vec::<String>::new()
    );
    assert_eq!(leases_in(&leases.join("net1")), Vec::<String>::new());
    let mut gc = bad.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    let out = call_plugin(
        Some(&node.ns),
        &bin("host-device"),
        &[("CNI_COMMAND", "GC"), ("CNI_PATH", &path)],
        &gc.to_string(),
    );
    out.assert_silent_ok();
}
