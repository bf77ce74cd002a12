//! Crash at every step, through whole chains: every ADD is killed by
//! SIGKILL at each fault point of every plugin in the chain (our cnitool
//! passes `CNI_FAULT_POINT` through to the plugins it runs, and they to
//! their delegates), then the runtime's DEL must leave the node exactly as
//! it was before the ADD: no veth, IFB, lease, saved flannel config, result
//! cache file, nftables element or iptables rule. Then the same container
//! is ADDed again, must get a working attachment, and is DELeted again.
//! Points on the DEL path (host-local's release, bandwidth's teardown) kill
//! the DEL instead, and a second DEL must finish the job.
//!
//! "As it was" is a snapshot of the node and pod namespaces (links,
//! addresses, routes in every table, qdiscs, `nft list ruleset`,
//! `iptables-save`/`ip6tables-save`) and of every file under the lease
//! dir, the flannel dataDir and the cache dir, taken after a warm-up
//! ADD+DEL of another container: what such a cycle leaves by design (the
//! bridge and its address, the hostport table skeleton, `lock` and
//! `last_reserved_ip.*`) is in it, and nothing else may be added.
//!
//! The fault points are read from the plugins' source, so a point added
//! later is crashed too, and a test fails when one is on no campaign's
//! path.

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::PathBuf;
use tests::*;

/// The crates whose fault points the chain campaigns below reach.
const CRATES: &[&str] = &[
    "host-local",
    "bridge",
    "flannel-meta",
    "portmap",
    "bandwidth",
    "plugins/tuning",
    "plugins/macvlan",
    "plugins/sbr",
    "plugins/ptp",
    "plugins/tap",
    "plugins/host-device",
    "plugins/tc-redirect-tap",
    "plugins/firewall",
];

/// The attachment that is crashed over and over.
const CID: &str = "crash-ctr";

/// A node namespace, a pod, temp dirs for every piece of state, and our
/// cnitool with one conflist.
struct Site {
    node: Node,
    pod: Netns,
    /// Warm-up pod: its ADD+DEL makes the shared state the baseline holds.
    warm: Netns,
    state: TempDir,
    net: String,
    cap_args: String,
    /// Namespace-wide sysctls of the pod (paths under /proc/sys) that a
    /// plugin of the chain sets: they outlive the interface.
    pod_sysctls: Vec<&'static str>,
    /// The chain has no IPAM: ADD gives an interface and no address.
    l2: bool,
}

/// What a campaign compares before and after.
#[derive(Debug, PartialEq, Eq)]
struct State {
    node: NetSnapshot,
    pod: NetSnapshot,
    /// Everything under the state dir (leases, flannel dataDir, subnet.env)
    /// and the cache dir.
    files: Vec<String>,
    /// `path=value` of each of `Site::pod_sysctls`.
    pod_sysctls: Vec<String>,
}

/// How a fault point was met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Met {
    Add,
    Del,
    Never,
}

impl Site {
    fn new(tag: &str, net: &str, cap_args: Value) -> Site {
        let node = Node::new(tag);
        node.ns.ip(&["link", "set", "lo", "up"]);
        Site {
            pod: Netns::new(&format!("pod-{tag}")),
            warm: Netns::new(&format!("warm-{tag}")),
            state: TempDir::new(&format!("state-{tag}")),
            node,
            net: net.to_string(),
            cap_args: cap_args.to_string(),
            pod_sysctls: Vec::new(),
            l2: false,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.state.path().join(rel)
    }

    fn cnitool(&self, verb: &str, pod: &Netns, cid: &str, fault: Option<&str>) -> PluginOutput {
        let netns = pod.path();
        let mut env = vec![
            ("CNI_CONTAINERID", cid),
            ("CAP_ARGS", self.cap_args.as_str()),
        ];
        if let Some(f) = fault {
            env.push(("CNI_FAULT_POINT", f));
        }
        self.node.cnitool_with(
            &bin("cnitool"),
            &[verb, &self.net, netns.to_str().expect("utf8")],
            &env,
        )
    }

    fn ok(&self, verb: &str, pod: &Netns, cid: &str, what: &str) -> PluginOutput {
        let out = self.cnitool(verb, pod, cid, None);
        assert_eq!(out.exit_code, 0, "{what}: {verb}: {out:?}");
        out
    }

    fn state(&self) -> State {
        let mut files = tree(self.state.path());
        files.extend(
            tree(self.node.cache_dir.path())
                .into_iter()
                .map(|f| format!("cache/{f}")),
        );
        // The bookkeeping a cycle leaves by design; its content moves on.
        files.retain(|f| !f.contains("/last_reserved_ip."));
        State {
            node: NetSnapshot::take(&self.node.ns),
            pod: NetSnapshot::take(&self.pod),
            files,
            pod_sysctls: self
                .pod_sysctls
                .iter()
                .map(|k| format!("{k}={}", pod_sysctl(&self.pod, k)))
                .collect(),
        }
    }

    /// The lease files of the network under the lease dir, with content.
    fn leases(&self) -> Vec<(String, String)> {
        lease_files_in(&self.path("leases").join(&self.net))
    }

    fn cache_file(&self, cid: &str) -> PathBuf {
        self.node
            .shared_cache_dir()
            .join("results")
            .join(format!("{}-{cid}-eth0", self.net))
    }

    /// The named, exact leftovers first (for a readable failure), then the
    /// whole state against the baseline.
    fn assert_clean(&self, baseline: &State, what: &str) {
        // The veths the test made itself (a macvlan master) are in the
        // baseline; no other may be there.
        let own: Vec<String> = baseline
            .node
            .links
            .iter()
            .filter(|l| l.split(' ').nth(1) == Some("veth"))
            .map(|l| l.split(' ').next().unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            links_of_kind(&self.node.ns, "veth"),
            own,
            "{what}: veth left"
        );
        assert_eq!(
            links_of_kind(&self.node.ns, "ifb"),
            Vec::<String>::new(),
            "{what}: IFB left"
        );
        assert!(
            self.pod.link("eth0").is_none(),
            "{what}: eth0 left in the pod"
        );
        assert_eq!(
            self.leases(),
            Vec::<(String, String)>::new(),
            "{what}: lease left"
        );
        assert_eq!(
            tree(&self.path("flannel")),
            Vec::<String>::new(),
            "{what}: flannel file left"
        );
        assert_eq!(
            tree(&self.path("tuning")),
            Vec::<String>::new(),
            "{what}: tuning backup left"
        );
        assert!(!self.cache_file(CID).exists(), "{what}: cache file left");
        let nft = nft_ruleset(&self.node.ns);
        for owned in [
            format!("cid={CID}"),
            format!("comment \"{CID}\""),
            format!("id: {CID}\""),
        ] {
            assert!(
                !nft.contains(&owned),
                "{what}: nft state of {CID} left:\n{nft}"
            );
        }
        let ipt = iptables_rules(&self.node.ns);
        assert!(!ipt.contains(CID), "{what}: iptables rule left:\n{ipt}");
        let now = self.state();
        assert_eq!(
            now, *baseline,
            "{what}: the node differs from before the ADD"
        );
    }

    /// ADD of the crashed container, checked end to end: the pod has the
    /// result's addresses on eth0, each leased to it, the result is cached.
    fn add_and_verify(&self, what: &str) -> Value {
        let out = self.ok("add", &self.pod, CID, what);
        let result = out.json();
        let ips: Vec<String> = result["ips"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|ip| ip["address"].as_str().expect("address").to_string())
            .collect();
        assert!(
            self.pod.link_is_up("eth0"),
            "{what}: eth0 is not up in the pod"
        );
        assert!(self.cache_file(CID).is_file(), "{what}: no cache file");
        assert_eq!(mode_of(&self.cache_file(CID)), 0o600, "{what}: cache mode");
        if self.l2 {
            assert_eq!(ips, Vec::<String>::new(), "{what}: layer 2 only: {result}");
            return result;
        }
        assert!(!ips.is_empty(), "{what}: no address: {result}");
        let pod_addrs: BTreeSet<String> = self
            .pod
            .ip_json(&["addr", "show", "dev", "eth0"])
            .as_array()
            .and_then(|a| a.first().cloned())
            .map(|l| {
                l["addr_info"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .filter(|a| a["scope"] == "global")
                    .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            pod_addrs,
            ips.iter().cloned().collect::<BTreeSet<_>>(),
            "{what}: eth0 in the pod"
        );
        let want: Vec<(String, String)> = ips
            .iter()
            .map(|a| {
                let addr = a.split('/').next().unwrap().to_string();
                (addr, format!("{CID}\r\neth0"))
            })
            .collect();
        let mut want = want;
        want.sort();
        // A result may list an address twice (tc-redirect-tap's VM).
        want.dedup();
        assert_eq!(self.leases(), want, "{what}: leases");
        result
    }

    /// The whole campaign: warm-up, baseline, then each point. Returns how
    /// each point was met.
    fn campaign(
        &self,
        points: &[String],
        check_more: &dyn Fn(&Site, &Value, &str),
    ) -> Vec<(String, Met)> {
        self.ok("add", &self.warm, "warm-up", "warm-up");
        self.ok("del", &self.warm, "warm-up", "warm-up");
        let baseline = self.state();
        let mut met = Vec::new();
        for point in points {
            let what = format!("{} at {point}", self.net);
            let out = self.cnitool("add", &self.pod, CID, Some(point));
            let how = if out.exit_code != 0 {
                assert!(
                    out.stderr.contains("SIGKILL"),
                    "{what}: ADD failed, but not by the fault: {out:?}"
                );
                self.ok("del", &self.pod, CID, &what);
                Met::Add
            } else {
                // Not on the ADD path: kill the DEL there instead.
                let out = self.cnitool("del", &self.pod, CID, Some(point));
                if out.exit_code != 0 {
                    assert!(
                        out.stderr.contains("SIGKILL"),
                        "{what}: DEL failed, but not by the fault: {out:?}"
                    );
                    assert!(
                        self.cache_file(CID).is_file(),
                        "{what}: a failed DEL must keep the cache for the retry"
                    );
                    self.ok("del", &self.pod, CID, &what);
                    Met::Del
                } else {
                    Met::Never
                }
            };
            self.assert_clean(&baseline, &format!("{what} (killed in {how:?}), after DEL"));
            // The same container again: a whole, working attachment.
            let result = self.add_and_verify(&format!("{what}: ADD again"));
            check_more(self, &result, &what);
            self.ok("del", &self.pod, CID, &what);
            self.assert_clean(&baseline, &format!("{what}: ADD again, DEL"));
            eprintln!(
                "crash campaign {}: {point}: killed in {how:?}, nothing left",
                self.net
            );
            met.push((point.clone(), how));
        }
        met
    }
}

/// `/proc/sys/<key>` inside `ns`.
fn pod_sysctl(ns: &Netns, key: &str) -> String {
    let out = run_ok(ns.command("cat").arg(format!("/proc/sys/{key}")));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn points_of(crates: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = crates.iter().flat_map(|c| fault_points_in(c)).collect();
    v.sort();
    v.dedup();
    v
}

fn assert_met(met: &[(String, Met)], never_ok: &[&str]) {
    let never: Vec<&str> = met
        .iter()
        .filter(|(_, m)| *m == Met::Never)
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(never, never_ok, "fault points this chain never reached");
}

/// kube-flannel's conflist: flannel (bridge + host-local behind it) and
/// portmap naming no backend (iptables, written over netlink), one host
/// port per pod.
#[test]
fn crash_kube_flannel_chain_at_every_fault_point() {
    if !require_root("crash_kube_flannel_chain_at_every_fault_point") {
        return;
    }
    let site = Site::new(
        "crash-fl",
        "cbr0",
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
                                 {"hostPort": 8053, "containerPort": 53, "protocol": "udp"}]}),
    );
    std::fs::write(
        site.path("subnet.env"),
        // FLANNEL_IPMASQ=false: flanneld leaves masquerading to the
        // delegate (ipMasq: true on the bridge).
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
    )
    .expect("subnet.env");
    site.node.write_conf(
        "10-flannel.conflist",
        &json!({"name": "cbr0", "cniVersion": "1.0.0", "plugins": [
            {"type": "flannel",
             "delegate": {"hairpinMode": true, "isDefaultGateway": true},
             "subnetFile": site.path("subnet.env"),
             "dataDir": site.path("flannel"),
             "ipam": {"dataDir": site.path("leases")}},
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
        ]}),
    );
    let points = points_of(&["flannel-meta", "bridge", "host-local", "portmap"]);
    let met = site.campaign(&points, &|site, result, what| {
        let addr = result["ips"][0]["address"].as_str().unwrap();
        let addr = addr.split('/').next().unwrap();
        // No portmap backend named: Go's default, its iptables rules.
        let ipt = iptables_rules(&site.node.ns);
        for rule in [
            format!("-p tcp -m tcp --dport 8080 -j DNAT --to-destination {addr}:80"),
            format!("-p udp -m udp --dport 8053 -j DNAT --to-destination {addr}:53"),
        ] {
            assert!(
                ipt.contains(&rule),
                "{what}: ADD again: no {rule:?} in\n{ipt}"
            );
        }
        // ipMasq names no backend either: Go's default, the iptables jump
        // of the pod's address to its chain.
        let masq = format!("-A POSTROUTING -s {addr}/32 -m comment --comment");
        assert!(
            ipt.contains(&masq),
            "{what}: ADD again: no {masq:?} in\n{ipt}"
        );
        let nft = nft_ruleset(&site.node.ns);
        assert!(
            !nft.contains("cni_plugins_masquerade"),
            "{what}: nothing in nftables:\n{nft}"
        );
        let saved = site.path("flannel").join(format!("{CID}@eth0"));
        assert_eq!(mode_of(&saved), 0o600, "{what}: saved config");
    });
    // The MAC spoof check is the other campaigns' business.
    assert_met(&met, &["bridge/spoofchk"]);
    let del: Vec<&str> = met
        .iter()
        .filter(|(_, m)| *m == Met::Del)
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(del, ["host-local/released"], "points met in DEL");
}

/// bridge + host-local (dual-stack) + portmap on iptables + bandwidth,
/// through our cnitool.
#[test]
fn crash_bridge_portmap_bandwidth_chain_at_every_fault_point() {
    if !require_root("crash_bridge_portmap_bandwidth_chain_at_every_fault_point") {
        return;
    }
    let site = Site::new(
        "crash-br",
        "brchain",
        json!({"portMappings": [{"hostPort": 9080, "containerPort": 80, "protocol": "tcp"}]}),
    );
    site.node.write_conf(
        "20-brchain.conflist",
        &json!({"name": "brchain", "cniVersion": "1.1.0", "plugins": [
            {"type": "bridge", "bridge": "cni7", "isGateway": true, "hairpinMode": true,
             "ipMasq": true, "ipMasqBackend": "iptables", "macspoofchk": true,
             "ipam": {"type": "host-local", "dataDir": site.path("leases"),
                      "ranges": [[{"subnet": "10.77.0.0/24"}], [{"subnet": "fd00:77::/64"}]],
                      "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}, "backend": "iptables"},
            {"type": "bandwidth", "ingressRate": 8000000, "ingressBurst": 800000,
             "egressRate": 8000000, "egressBurst": 800000}
        ]}),
    );
    let points = points_of(&["bridge", "host-local", "portmap", "bandwidth"]);
    let met = site.campaign(&points, &|site, result, what| {
        let ipt = iptables_rules(&site.node.ns);
        for tool in ["iptables-save", "ip6tables-save"] {
            assert!(
                ipt.lines().any(|l| l.starts_with(tool)
                    && l.contains("-j DNAT")
                    && l.contains("--dport 9080")),
                "{what}: ADD again: no {tool} DNAT rule for 9080:\n{ipt}"
            );
        }
        // ipMasq on iptables: the Go plugin's per-container chain.
        let masq = ipt
            .lines()
            .filter(|l| l.contains("MASQUERADE") && l.contains(CID))
            .count();
        assert_eq!(
            masq, 2,
            "{what}: ADD again: one MASQUERADE rule per family:\n{ipt}"
        );
        let ifbs = links_of_kind(&site.node.ns, "ifb");
        assert_eq!(ifbs.len(), 1, "{what}: ADD again: one IFB: {ifbs:?}");
        let names: Vec<&str> = result["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&ifbs[0].as_str()),
            "{what}: the IFB is in the result: {result}"
        );
    });
    assert_met(&met, &[]);
    let del: Vec<&str> = met
        .iter()
        .filter(|(_, m)| *m == Met::Del)
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(
        del,
        [
            "bandwidth/del-filter",
            "bandwidth/del-ifb",
            "bandwidth/del-ingress-tbf",
            "host-local/released"
        ],
        "points met in DEL"
    );
}

/// bridge + host-local + tuning: sysctls (one namespace-wide, which
/// outlives the interface), MAC, MTU and promiscuous mode, restored from
/// the backup file by DEL.
#[test]
fn crash_tuning_chain_at_every_fault_point() {
    if !require_root("crash_tuning_chain_at_every_fault_point") {
        return;
    }
    if !bin_dir().join("tuning").is_file() {
        panic!("tuning is not built: run `cargo build --workspace` first");
    }
    let mut site = Site::new("crash-tu", "tunet", json!({}));
    site.pod_sysctls = vec!["net/core/somaxconn", "net/ipv4/conf/all/arp_ignore"];
    site.node.write_conf(
        "40-tunet.conflist",
        &json!({"name": "tunet", "cniVersion": "1.1.0", "plugins": [
            {"type": "bridge", "bridge": "br-tu",
             "ipam": {"type": "host-local", "dataDir": site.path("leases"),
                      "ranges": [[{"subnet": "10.78.0.0/24"}]]}},
            {"type": "tuning", "dataDir": site.path("tuning"),
             "sysctl": {"net.core.somaxconn": "1000", "net.ipv4.conf.all.arp_ignore": "2",
                        "net.ipv4.conf.IFNAME.arp_ignore": "1"},
             "mac": "0a:58:0a:4e:00:63", "mtu": 1400, "promisc": true}
        ]}),
    );
    let points = points_of(&["bridge", "host-local", "plugins/tuning"]);
    let met = site.campaign(&points, &|site, _result, what| {
        let eth0 = site.pod.link("eth0").expect("eth0");
        assert_eq!(eth0["address"], "0a:58:0a:4e:00:63", "{what}: MAC");
        assert_eq!(eth0["mtu"], 1400, "{what}: MTU");
        assert_eq!(eth0["promiscuity"], 1, "{what}: promisc");
        assert_eq!(
            pod_sysctl(&site.pod, "net/core/somaxconn"),
            "1000",
            "{what}"
        );
        assert_eq!(
            pod_sysctl(&site.pod, "net/ipv4/conf/eth0/arp_ignore"),
            "1",
            "{what}"
        );
        let backup = site.path("tuning").join(format!("{CID}_eth0.json"));
        assert_eq!(mode_of(&backup), 0o600, "{what}: backup file");
    });
    assert_met(&met, &["bridge/masq", "bridge/spoofchk"]);
    let del: Vec<&str> = met
        .iter()
        .filter(|(_, m)| *m == Met::Del)
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(del, ["host-local/released"], "points met in DEL");
}

/// A layer-2-only bridge (`"ipam": {}`): its own path to the container
/// interface coming up.
#[test]
fn crash_layer2_bridge_at_every_fault_point() {
    if !require_root("crash_layer2_bridge_at_every_fault_point") {
        return;
    }
    let mut site = Site::new("crash-l2", "l2net", json!({}));
    site.l2 = true;
    site.node.write_conf(
        "30-l2net.conflist",
        &json!({"name": "l2net", "cniVersion": "1.1.0", "plugins": [
            {"type": "bridge", "bridge": "br-l2", "ipam": {}, "macspoofchk": true}
        ]}),
    );
    let met = site.campaign(&points_of(&["bridge"]), &|_, result, what| {
        assert_eq!(result["interfaces"][2]["name"], "eth0", "{what}: {result}");
    });
    assert_met(&met, &["bridge/gateway", "bridge/ipam", "bridge/masq"]);
}

/// macvlan on a master in the node (a veth: this kernel has no dummy
/// links), with host-local, then layer 2 only.
#[test]
fn crash_macvlan_at_every_fault_point() {
    if !require_root("crash_macvlan_at_every_fault_point") {
        return;
    }
    if !bin_dir().join("macvlan").is_file() {
        panic!("macvlan is not built: run `cargo build --workspace` first");
    }
    let points = points_of(&["plugins/macvlan", "host-local"]);
    for l2 in [false, true] {
        let net = if l2 { "mvl2" } else { "mvnet" };
        let mut site = Site::new(&format!("crash-{net}"), net, json!({}));
        site.l2 = l2;
        site.node.ns.ip(&[
            "link", "add", "mv-up0", "type", "veth", "peer", "name", "mv-up1",
        ]);
        for end in ["mv-up0", "mv-up1"] {
            site.node
                .ns
                .ip(&["link", "set", end, "addrgenmode", "none"]);
        }
        site.node.ns.ip(&["link", "set", "mv-up0", "up"]);
        site.node.ns.ip(&["link", "set", "mv-up1", "up"]);
        let ipam = if l2 {
            json!({})
        } else {
            json!({"type": "host-local", "dataDir": site.path("leases"),
                   "ranges": [[{"subnet": "10.79.0.0/24"}]]})
        };
        site.node.write_conf(
            "50-mv.conflist",
            &json!({"name": net, "cniVersion": "1.1.0", "plugins": [
                {"type": "macvlan", "master": "mv-up0", "mode": "bridge", "ipam": ipam}
            ]}),
        );
        let met = site.campaign(&points, &|site, _result, what| {
            let eth0 = site.pod.link("eth0").expect("eth0");
            assert_eq!(eth0["linkinfo"]["info_kind"], "macvlan", "{what}: {eth0}");
        });
        // Links other than the two veths of the master are what a
        // campaign must not leave: the snapshot holds them.
        if l2 {
            assert_met(
                &met,
                &[
                    "host-local/last-reserved",
                    "host-local/linked",
                    "host-local/released",
                    "host-local/temp-written",
                    "macvlan/configure",
                    "macvlan/ipam",
                ],
            );
        } else {
            assert_met(&met, &["macvlan/up"]);
        }
    }
}

/// kind's kindnet chain (ptp + host-local + portmap naming no backend,
/// dual-stack) with ipMasq on nftables and a host port, through our
/// cnitool.
#[test]
fn crash_kindnet_ptp_chain_at_every_fault_point() {
    if !require_root("crash_kindnet_ptp_chain_at_every_fault_point") {
        return;
    }
    let site = Site::new(
        "crash-ptp",
        "kindnet",
        json!({"portMappings": [{"hostPort": 9081, "containerPort": 80, "protocol": "tcp"}]}),
    );
    site.node.write_conf(
        "10-kindnet.conflist",
        &json!({"name": "kindnet", "cniVersion": "1.1.0", "plugins": [
            {"type": "ptp", "ipMasq": true, "ipMasqBackend": "nftables", "mtu": 1500,
             "ipam": {"type": "host-local", "dataDir": site.path("leases"),
                      "ranges": [[{"subnet": "10.244.2.0/24"}], [{"subnet": "fd00:10:244:2::/64"}]],
                      "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]}),
    );
    let points = points_of(&["plugins/ptp", "host-local", "portmap"]);
    let met = site.campaign(&points, &|site, result, what| {
        let addr = result["ips"][0]["address"].as_str().unwrap();
        let addr = addr.split('/').next().unwrap();
        let veth = result["interfaces"][0]["name"].as_str().unwrap();
        let routes = site.node.ns.ip(&["route", "show", "dev", veth]);
        assert!(
            routes.contains(&format!("{addr} scope host")),
            "{what}: ADD again: no host route to {addr}: {routes}"
        );
        let nft = nft_ruleset(&site.node.ns);
        let rule = format!("ip saddr {addr} ip daddr != 10.244.2.0/24 masquerade comment");
        assert!(
            nft.contains(&rule),
            "{what}: ADD again: no {rule:?} in\n{nft}"
        );
        // No portmap backend named: Go's default, its iptables rules.
        let ipt = iptables_rules(&site.node.ns);
        let rule = format!("-p tcp -m tcp --dport 9081 -j DNAT --to-destination {addr}:80");
        assert!(
            ipt.contains(&rule),
            "{what}: ADD again: no {rule:?} in\n{ipt}"
        );
    });
    assert_met(&met, &[]);
}

/// tap in the pod, with host-local, then layer 2 only, through our cnitool.
#[test]
fn crash_tap_at_every_fault_point() {
    if !require_root("crash_tap_at_every_fault_point") {
        return;
    }
    let points = points_of(&["plugins/tap", "host-local"]);
    for l2 in [false, true] {
        let net = if l2 { "tapl2" } else { "tapnet" };
        let mut site = Site::new(&format!("crash-{net}"), net, json!({}));
        site.l2 = l2;
        let ipam = if l2 {
            json!({})
        } else {
            json!({"type": "host-local", "dataDir": site.path("leases"),
                   "ranges": [[{"subnet": "10.82.0.0/24"}], [{"subnet": "fd00:82::/64"}]]})
        };
        site.pod.ip(&["link", "add", "br-vm", "type", "bridge"]);
        site.warm.ip(&["link", "add", "br-vm", "type", "bridge"]);
        site.node.write_conf(
            "50-tap.conflist",
            &json!({"name": net, "cniVersion": "1.1.0", "plugins": [
                {"type": "tap", "owner": 107, "multiQueue": true, "bridge": "br-vm", "ipam": ipam}
            ]}),
        );
        let met = site.campaign(&points, &|site, _result, what| {
            let eth0 = site.pod.link("eth0").expect("eth0");
            assert_eq!(eth0["linkinfo"]["info_kind"], "tun", "{what}: {eth0}");
            assert_eq!(eth0["master"], "br-vm", "{what}: {eth0}");
        });
        if l2 {
            assert_met(
                &met,
                &[
                    "host-local/last-reserved",
                    "host-local/linked",
                    "host-local/released",
                    "host-local/temp-written",
                    "tap/configure",
                    "tap/ipam",
                ],
            );
        } else {
            assert_met(&met, &["tap/up"]);
        }
    }
}

/// host-device moving a node device (a veth end: this kernel has no
/// dummy links) into the pod, with host-local, then layer 2 only: a kill
/// after the move leaves it in the pod, and the runtime's DEL gives it
/// back to the node under its name.
#[test]
fn crash_host_device_at_every_fault_point() {
    if !require_root("crash_host_device_at_every_fault_point") {
        return;
    }
    let points = points_of(&["plugins/host-device", "host-local"]);
    for l2 in [false, true] {
        let net = if l2 { "hdl2" } else { "hdnet" };
        let mut site = Site::new(&format!("crash-{net}"), net, json!({}));
        site.l2 = l2;
        site.node.ns.ip(&[
            "link", "add", "hd-vf0", "type", "veth", "peer", "name", "hd-vf0p",
        ]);
        for end in ["hd-vf0", "hd-vf0p"] {
            site.node
                .ns
                .ip(&["link", "set", end, "addrgenmode", "none"]);
        }
        site.node.ns.ip(&["link", "set", "hd-vf0p", "up"]);
        let ipam = if l2 {
            json!({})
        } else {
            json!({"type": "host-local", "dataDir": site.path("leases"),
                   "ranges": [[{"subnet": "10.83.0.0/24"}], [{"subnet": "fd00:83::/64"}]]})
        };
        site.node.write_conf(
            "50-hd.conflist",
            &json!({"name": net, "cniVersion": "1.1.0", "plugins": [
                {"type": "host-device", "device": "hd-vf0", "ipam": ipam}
            ]}),
        );
        let met = site.campaign(&points, &|site, result, what| {
            let eth0 = site.pod.link("eth0").expect("eth0");
            assert_eq!(eth0["ifalias"], "hd-vf0", "{what}: {eth0}");
            assert_eq!(result["interfaces"][0]["mac"], eth0["address"], "{what}");
            assert!(
                site.node.ns.link("hd-vf0").is_none(),
                "{what}: hd-vf0 on the node"
            );
        });
        if l2 {
            assert_met(
                &met,
                &[
                    "host-device/configure",
                    "host-device/ipam",
                    "host-local/last-reserved",
                    "host-local/linked",
                    "host-local/released",
                    "host-local/temp-written",
                ],
            );
        } else {
            assert_met(&met, &["host-device/up"]);
        }
    }
}

/// bridge + host-local (dual-stack) + sbr with addSourceHints: the rules
/// and tables of a killed ADD are found by DEL (from the interface's
/// addresses, without a cached result) before the bridge deletes the veth.
#[test]
fn crash_sbr_chain_at_every_fault_point() {
    if !require_root("crash_sbr_chain_at_every_fault_point") {
        return;
    }
    if !bin_dir().join("sbr").is_file() {
        panic!("sbr is not built: run `cargo build --workspace` first");
    }
    let site = Site::new("crash-sbr", "sbrnet", json!({}));
    site.node.write_conf(
        "70-sbr.conflist",
        &json!({"name": "sbrnet", "cniVersion": "1.0.0", "plugins": [
            {"type": "bridge", "bridge": "br-sbr", "isDefaultGateway": true,
             "ipam": {"type": "host-local", "dataDir": site.path("leases"),
                      "ranges": [[{"subnet": "10.83.0.0/24"}], [{"subnet": "fd00:83::/64"}]]}},
            {"type": "sbr", "addSourceHints": true}
        ]}),
    );
    let met = site.campaign(&points_of(&["plugins/sbr"]), &|site, result, what| {
        let addr = result["ips"][0]["address"].as_str().unwrap();
        let addr = addr.split('/').next().unwrap();
        let rules = site.pod.ip(&["-4", "rule", "show"]);
        assert!(
            rules.contains(&format!("from {addr} lookup 100")),
            "{what}: ADD again: no rule from {addr}:\n{rules}"
        );
        let table = site.pod.ip(&["-4", "route", "show", "table", "100"]);
        assert!(
            table.contains("default via 10.83.0.1"),
            "{what}: ADD again: table 100:\n{table}"
        );
    });
    assert_met(&met, &[]);
}

/// bridge + host-local + tc-redirect-tap (a microVM's network): a killed
/// ADD's tap, qdiscs and redirects are found by DEL with no cached result
/// (the tap by its alias), and a killed DEL is finished by the next.
#[test]
fn crash_tc_redirect_tap_chain_at_every_fault_point() {
    if !require_root("crash_tc_redirect_tap_chain_at_every_fault_point") {
        return;
    }
    let site = Site::new("crash-trt", "fcnet", json!({}));
    site.node.write_conf(
        "80-fcnet.conflist",
        &json!({"name": "fcnet", "cniVersion": "1.0.0", "plugins": [
            {"type": "bridge", "bridge": "br-fc", "isGateway": true,
             "ipam": {"type": "host-local", "dataDir": site.path("leases"),
                      "ranges": [[{"subnet": "10.84.0.0/24"}], [{"subnet": "fd00:84::/64"}]]}},
            {"type": "tc-redirect-tap"}
        ]}),
    );
    let points = points_of(&["plugins/tc-redirect-tap"]);
    let met = site.campaign(&points, &|site, result, what| {
        let ifs = result["interfaces"].as_array().expect("interfaces");
        assert_eq!(ifs.len(), 5, "{what}: {result}");
        assert_eq!(
            (&ifs[3]["name"], &ifs[4]["sandbox"]),
            (&json!("tap0"), &json!(CID)),
            "{what}: {result}"
        );
        let tap = site.pod.link("tap0").expect("tap0");
        assert_eq!(
            tap["ifalias"],
            json!(format!("tc-redirect-tap/fcnet/{CID}/eth0")),
            "{what}"
        );
        let filters = NetSnapshot::take_with(&site.pod, false).filters;
        assert_eq!(filters.len(), 2, "{what}: {filters:?}");
        assert!(
            filters[0].starts_with("eth0 ingress all 49152 u32")
                && filters[0].ends_with("mirred:redirect:egress:tap0")
                && filters[1].starts_with("tap0 ingress all 49152 u32")
                && filters[1].ends_with("mirred:redirect:egress:eth0"),
            "{what}: {filters:?}"
        );
    });
    let del_only: Vec<&str> = met
        .iter()
        .filter(|(_, m)| *m == Met::Del)
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(del_only, ["tc-redirect-tap/del-filters"]);
    assert_met(&met, &[]);
}

/// The firewall's fault points (its rules module, `plugins/firewall`).
fn firewall_points() -> Vec<String> {
    fault_points_in("plugins/firewall")
        .into_iter()
        .filter(|p| p.starts_with("firewall/"))
        .collect()
}

/// bridge (ipMasq) + firewall, on each firewall backend: the rules of both
/// are found and removed by DEL whatever step the ADD died at.
#[test]
fn crash_firewall_chain_at_every_fault_point() {
    if !require_root("crash_firewall_chain_at_every_fault_point") {
        return;
    }
    if !bin_dir().join("firewall").is_file() {
        panic!("firewall is not built: run `cargo build --workspace` first");
    }
    let mut points = points_of(&["bridge", "host-local"]);
    points.extend(firewall_points());
    for backend in ["iptables", "nftables"] {
        let net = format!("fw{backend}");
        let site = Site::new(&format!("crash-{net}"), &net, json!({}));
        site.node.write_conf(
            "60-fw.conflist",
            &json!({"name": net, "cniVersion": "1.0.0", "plugins": [
                {"type": "bridge", "bridge": format!("br-{backend}"), "isGateway": true,
                 "ipMasq": true,
                 "ipam": {"type": "host-local", "dataDir": site.path("leases"),
                          "ranges": [[{"subnet": "10.81.0.0/24"}], [{"subnet": "fd00:81::/64"}]]}},
                {"type": "firewall", "backend": backend, "dataDir": site.path("firewall")}
            ]}),
        );
        let met = site.campaign(&points, &|site, result, what| {
            let addr = result["ips"][0]["address"].as_str().unwrap();
            let addr = addr.split('/').next().unwrap();
            // The nftables backend writes the same iptables-nft rules.
            let rules = iptables_rules(&site.node.ns);
            assert!(
                rules.contains(addr),
                "{what}: ADD again: the firewall does not allow {addr}:\n{rules}"
            );
        });
        // Both backends commit one family at a time.
        let never = vec!["bridge/spoofchk"];
        // Points met only in DEL count as met; what matters is that every
        // firewall point was reached on one backend or the other.
        let never_here: Vec<&str> = met
            .iter()
            .filter(|(_, m)| *m == Met::Never)
            .map(|(p, _)| p.as_str())
            .collect();
        assert_eq!(
            never_here, never,
            "{backend}: fault points this chain never reached"
        );
    }
}

/// Every fault point in the source is on some campaign's path, so none
/// goes uncrashed; a plugin crate with points that no campaign above runs
/// is named here.
#[test]
fn every_fault_point_is_crashed_by_a_campaign() {
    let covered = points_of(CRATES);
    let mut missing = Vec::new();
    let root = workspace_root();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for top in [root.clone(), root.join("plugins")] {
        for e in std::fs::read_dir(&top).expect("read workspace").flatten() {
            if e.path().join("Cargo.toml").is_file() && e.path().join("src").is_dir() {
                dirs.push(e.path());
            }
        }
    }
    for dir in dirs {
        let rel = dir.strip_prefix(&root).unwrap().display().to_string();
        if CRATES.contains(&rel.as_str()) || rel == "libcni" || rel == "tests" {
            continue;
        }
        for p in fault_points_in(&rel) {
            if !covered.contains(&p) {
                missing.push(format!("{rel}: {p}"));
            }
        }
    }
    assert_eq!(
        missing,
        Vec::<String>::new(),
        "fault points no crash campaign in tests/tests/crash.rs runs: add the plugin to a chain"
    );
    // The firewall's campaign above covers its points.
    assert!(
        firewall_points().len() >= 4,
        "firewall fault points: {:?}",
        firewall_points()
    );
    // And the campaigns see the points they expect (the parse works).
    let hl = fault_points_in("host-local");
    assert!(hl.contains(&"host-local/linked".to_string()), "{hl:?}");
}
