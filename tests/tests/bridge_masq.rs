//! The bridge plugin's firewall keys, `ipMasq` (both backends) and
//! `macspoofchk`, with our host-local, in real namespaces: a node where the
//! plugin runs, pods on its bridge, and an "upstream" namespace the test
//! attaches to the node by a veth, which routes the pod subnets back to the
//! node. So the upstream answers every connection and tells exactly which
//! source address it saw: the node's when masqueraded, the pod's when not.
//! The Go reference runs side by side on iptables.

use serde_json::{json, Value};
use std::process::Stdio;
use tests::*;

const NODE4: &str = "10.200.0.1";
const NODE6: &str = "fd00:200::1";
const UP4: &str = "10.200.0.2";
const UP6: &str = "fd00:200::2";
const PORT: u16 = 7000;

/// A node with our bridge and host-local on a CNI_PATH, a host-local data
/// dir, and the upstream namespace behind `up0`.
struct Site {
    node: Node,
    path: TempDir,
    data: TempDir,
    up: Netns,
}

impl Site {
    fn new(tag: &str) -> Site {
        let path = TempDir::new(&format!("path-{tag}"));
        for p in ["bridge", "host-local"] {
            std::os::unix::fs::symlink(bin(p), path.path().join(p)).expect("symlink");
        }
        let node = Node::new(tag);
        let up = Netns::new(&format!("up-{tag}"));
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
            up.name(),
        ]);
        n.ip(&["addr", "add", &format!("{NODE4}/24"), "dev", "up0"]);
        n.ip(&["addr", "add", &format!("{NODE6}/64"), "dev", "up0", "nodad"]);
        n.ip(&["link", "set", "up0", "up"]);
        up.ip(&["link", "set", "lo", "up"]);
        up.ip(&["addr", "add", &format!("{UP4}/24"), "dev", "eth0"]);
        up.ip(&["addr", "add", &format!("{UP6}/64"), "dev", "eth0", "nodad"]);
        up.ip(&["link", "set", "eth0", "up"]);
        // The way back to the pods, so unmasqueraded traffic is answered too.
        up.ip(&["route", "add", "10.88.0.0/16", "via", NODE4]);
        up.ip(&["route", "add", "fd88::/16", "via", NODE6]);
        Site {
            node,
            path,
            data: TempDir::new(&format!("data-{tag}")),
            up,
        }
    }

    /// A dual-stack config of network `net` (10.88.0.0/24, fd88::/64, the
    /// bridge as the pods' default gateway), with `extra` keys on top.
    fn conf(&self, net: &str, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.1.0",
            "name": net,
            "type": "bridge",
            "isDefaultGateway": true,
            "ipam": {
                "type": "host-local",
                "dataDir": self.data.path(),
                "ranges": [[{"subnet": "10.88.0.0/24"}], [{"subnet": "fd88::/64"}]]
            }
        });
        for (k, v) in extra.as_object().expect("object") {
            c[k] = v.clone();
        }
        c
    }

    fn call(&self, cmd: &str, pod: Option<&Netns>, cid: &str, conf: &Value) -> PluginOutput {
        self.call_env(cmd, pod, cid, conf, &[])
    }

    fn call_env(
        &self,
        cmd: &str,
        pod: Option<&Netns>,
        cid: &str,
        conf: &Value,
        extra: &[(&str, &str)],
    ) -> PluginOutput {
        PluginCall {
            node: &self.node.ns,
            plugin: &bin("bridge"),
            cni_path: &self.path.path().display().to_string(),
            command: cmd,
            netns: pod.map(|p| p.path()),
            container_id: cid,
            conf,
            extra,
        }
        .run()
    }

    fn add(&self, pod: &Netns, cid: &str, conf: &Value) -> Value {
        self.call("ADD", Some(pod), cid, conf).result()
    }

    fn del(&self, pod: Option<&Netns>, cid: &str, conf: &Value) {
        self.call("DEL", pod, cid, conf).assert_silent_ok();
    }

    /// GC of `conf`'s network with these container IDs (on eth0) valid.
    fn gc(&self, conf: &Value, valid: &[&str]) {
        let mut c = conf.clone();
        c["cni.dev/valid-attachments"] = valid
            .iter()
            .map(|cid| json!({"containerID": cid, "ifname": "eth0"}))
            .collect();
        let path = self.path.path().display().to_string();
        let out = call_plugin(
            Some(&self.node.ns),
            &bin("bridge"),
            &[("CNI_COMMAND", "GC"), ("CNI_PATH", path.as_str())],
            &c.to_string(),
        );
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (0, ""),
            "GC failed: {out:?}"
        );
    }

    /// The addresses host-local holds for network `net`.
    fn leases(&self, net: &str) -> Vec<String> {
        leases_in(&self.data.path().join(net))
    }

    /// Writes an executable script plugin `name` into CNI_PATH.
    fn script(&self, name: &str, body: &str) {
        self.path
            .write_executable(name, &format!("#!/bin/sh\n{body}\n"));
    }
}

/// The address (without prefix) of the result's IP number `i`.
fn addr_of(result: &Value, i: usize) -> String {
    let a = result["ips"][i]["address"].as_str().expect("address");
    a.split('/').next().unwrap().to_string()
}

// ---- traffic --------------------------------------------------------------

/// The echo service on `PORT`; killed on drop.
fn listener(ns: &Netns) -> Listener {
    echo_server(ns, "srv", PORT)
}

/// The source address the listener at `host` saw for a connection from
/// `from`; panics when the connection fails (3 s bound).
fn peer_seen(from: &Netns, host: &str) -> String {
    let answer = ask_ok(from, host, PORT);
    answer
        .strip_prefix("srv ")
        .unwrap_or_else(|| panic!("not the echo service: {answer:?}"))
        .to_string()
}

// ---- firewall state ---------------------------------------------------------

/// Feeds `input` to `tool` (`ip6tables-restore`) with `--noflush` in `ns`.
fn restore_in(ns: &Netns, tool: &str, input: &str) {
    feed(ns, tool, &["--noflush"], input);
}

fn nat_saves(ns: &Netns) -> String {
    let mut s = String::new();
    for tool in ["iptables-save", "ip6tables-save"] {
        let out = run_ok(ns.command(tool).args(["-t", "nat"]));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if !line.starts_with('#') {
                s.push_str(line);
                s.push('\n');
            }
        }
    }
    s
}

/// The masqueraded container addresses on `backend`, as `addr cid`,
/// sorted: the nftables set elements with their owner tag, or the
/// POSTROUTING jumps with the Go comment (each to a chain that holds the
/// Go plugin's two rules, checked here).
fn masqueraded(ns: &Netns, backend: &str) -> Vec<String> {
    let mut v = Vec::new();
    if backend == "nftables" {
        // The Go plugins' rules: `ip saddr A ip daddr != NET masquerade
        // comment "<hash>, net: N, if: eth0, id: C"`.
        let rules = nft_ruleset(ns);
        for line in rules.lines().map(str::trim).filter(|l| {
            (l.starts_with("ip saddr ") || l.starts_with("ip6 saddr "))
                && l.contains("masquerade comment")
        }) {
            let addr = line.split_whitespace().nth(2).unwrap_or_default();
            let cid = line
                .split(", id: ")
                .nth(1)
                .and_then(|t| t.split('"').next())
                .unwrap_or_default();
            v.push(format!("{addr} {cid}"));
        }
    } else {
        for tool in ["iptables-save", "ip6tables-save"] {
            let out = run_ok(ns.command(tool).args(["-t", "nat"]));
            let saved = String::from_utf8_lossy(&out.stdout);
            for line in saved
                .lines()
                .filter(|l| l.starts_with("-A POSTROUTING -s "))
            {
                let tokens: Vec<&str> = line.split_whitespace().collect();
                let src = tokens[3].split('/').next().unwrap();
                let chain = *tokens.last().unwrap();
                let cid = line
                    .split("id: \\\"")
                    .nth(1)
                    .and_then(|t| t.split('\\').next())
                    .unwrap_or_default();
                let body: Vec<&str> = saved
                    .lines()
                    .filter(|l| l.starts_with(&format!("-A {chain} ")))
                    .collect();
                assert_eq!(body.len(), 2, "{chain}: {saved}");
                assert!(body[0].ends_with("-j ACCEPT") && body[1].ends_with("-j MASQUERADE"));
                v.push(format!("{src} {cid}"));
            }
        }
    }
    v.sort();
    v
}

/// The attachments with a MAC spoof check in `ns`, as `cid-ifname`, sorted.
fn spoofchecked(ns: &Netns) -> Vec<String> {
    let rules = nft_ruleset(ns);
    let mut v: Vec<String> = rules
        .lines()
        .filter(|l| l.contains(" jump cni-br-iface-") && l.starts_with("iifname"))
        .filter_map(|l| l.split("comment \"macspoofchk-").nth(1))
        .map(|c| c.trim_end_matches('"').to_string())
        .collect();
    v.sort();
    v
}

/// Exactly what a spoof check of host veth `veth` for `cid`/eth0 with
/// `mac` is in `nft list ruleset`.
fn assert_spoofcheck_rules(ns: &Netns, veth: &str, cid: &str, mac: &str) {
    let rules = nft_ruleset(ns);
    let c = format!("comment \"macspoofchk-{cid}-eth0\"");
    for want in [
        "type filter hook prerouting priority dstnat; policy accept;".to_string(),
        format!("iifname \"{veth}\" jump cni-br-iface-{cid}-eth0 {c}"),
        format!("chain cni-br-iface-{cid}-eth0 {{"),
        format!("jump cni-br-iface-{cid}-eth0-mac {c}"),
        format!("chain cni-br-iface-{cid}-eth0-mac {{"),
        format!("ether saddr {mac} return {c}"),
        format!("drop {c}"),
    ] {
        assert!(rules.contains(&want), "{want:?} not in\n{rules}");
    }
}

fn nothing_for(ns: &Netns, cids: &[&str]) {
    let rules = nft_ruleset(ns);
    let saved = nat_saves(ns);
    for cid in cids {
        assert!(!rules.contains(&format!("id: {cid}\"")), "{cid}:\n{rules}");
        assert!(
            !rules.contains(&format!("macspoofchk-{cid}-")),
            "{cid}:\n{rules}"
        );
        assert!(
            !saved.contains(&format!("id: \\\"{cid}\\\"")),
            "{cid}:\n{saved}"
        );
    }
}

// ---- ipMasq -----------------------------------------------------------------

/// `backend` is the `ipMasqBackend` value, or "default" for none (Go's
/// default: iptables, as this node has iptables-nft).
fn masquerade_to_upstream(backend: &str) {
    let site = Site::new(&format!("masq-{}", &backend[..3]));
    let net = format!("masq{}", &backend[..3]);
    let conf = if backend == "default" {
        site.conf(&net, json!({"ipMasq": true}))
    } else {
        site.conf(&net, json!({"ipMasq": true, "ipMasqBackend": backend}))
    };
    let backend = if backend == "default" {
        "iptables"
    } else {
        backend
    };
    let (a, b) = (Netns::new("pod-masq-a"), Netns::new("pod-masq-b"));
    let ra = site.add(&a, "ctr-a", &conf);
    let rb = site.add(&b, "ctr-b", &conf);
    assert_eq!(
        (addr_of(&ra, 0), addr_of(&ra, 1)),
        ("10.88.0.2".into(), "fd88::2".into())
    );
    assert_eq!(
        (addr_of(&rb, 0), addr_of(&rb, 1)),
        ("10.88.0.3".into(), "fd88::3".into())
    );
    assert_eq!(
        masqueraded(&site.node.ns, backend),
        [
            "10.88.0.2 ctr-a",
            "10.88.0.3 ctr-b",
            "fd88::2 ctr-a",
            "fd88::3 ctr-b"
        ]
    );

    // Leaving the subnet: the upstream sees the node's address.
    let _up = listener(&site.up);
    assert_eq!(peer_seen(&a, UP4), NODE4);
    assert_eq!(peer_seen(&a, UP6), NODE6);
    assert_eq!(peer_seen(&b, UP4), NODE4);
    // Inside the subnet: the peer sees the pod's own address.
    let _b = listener(&b);
    assert_eq!(peer_seen(&a, "10.88.0.3"), "10.88.0.2");
    assert_eq!(peer_seen(&a, "fd88::3"), "fd88::2");

    // CHECK passes, then names the masquerade someone removed.
    let mut checked = conf.clone();
    checked["prevResult"] = rb.clone();
    let out = site.call("CHECK", Some(&b), "ctr-b", &checked);
    out.assert_silent_ok();
    if backend == "nftables" {
        let out = run_ok(site.node.ns.command("nft").args([
            "-a",
            "list",
            "chain",
            "inet",
            "cni_plugins_masquerade",
            "masq_checks",
        ]));
        let listed = String::from_utf8_lossy(&out.stdout).into_owned();
        let handle = listed
            .lines()
            .find(|l| l.contains("ip6 saddr fd88::3 "))
            .and_then(|l| l.rsplit("# handle ").next())
            .expect("the IPv6 rule of ctr-b")
            .trim()
            .to_string();
        run_ok(site.node.ns.command("nft").args([
            "delete",
            "rule",
            "inet",
            "cni_plugins_masquerade",
            "masq_checks",
            "handle",
            &handle,
        ]));
        site.call("CHECK", Some(&b), "ctr-b", &checked)
            .assert_error(
                102,
                &format!("ipMasq: chain inet cni_plugins_masquerade masq_checks has no rule for fd88::3 of net={net} cid=ctr-b"),
            );
    } else {
        let saved = nat_saves(&site.node.ns);
        let jump = saved
            .lines()
            .find(|l| l.starts_with("-A POSTROUTING -s fd88::3/128"))
            .expect("the IPv6 jump");
        restore_in(
            &site.node.ns,
            "ip6tables-restore",
            &format!("*nat\n-D {}\nCOMMIT\n", &jump[3..]),
        );
        site.call("CHECK", Some(&b), "ctr-b", &checked)
            .assert_error(
                102,
                "ipMasq: rule missing for fd88::3: -A POSTROUTING -s fd88::3/128",
            );
    }
    assert_eq!(peer_seen(&b, UP6), "fd88::3", "no longer masqueraded");
    assert_eq!(peer_seen(&b, UP4), NODE4, "the other family still is");

    // DEL after the runtime removed the namespace: the owner is enough.
    let a_path = a.path();
    drop(a);
    assert!(!a_path.exists());
    let out = PluginCall {
        node: &site.node.ns,
        plugin: &bin("bridge"),
        cni_path: &site.path.path().display().to_string(),
        command: "DEL",
        netns: Some(a_path.clone()),
        container_id: "ctr-a",
        conf: &conf,
        extra: &[],
    }
    .run();
    out.assert_silent_ok();
    assert_eq!(masqueraded(&site.node.ns, backend), ["10.88.0.3 ctr-b"]);
    nothing_for(&site.node.ns, &["ctr-a"]);
    // DEL with an empty CNI_NETNS (the Go plugin leaks the rules there,
    // and leaves the veth): the veth its alias names goes too.
    site.del(None, "ctr-b", &conf);
    assert_eq!(masqueraded(&site.node.ns, backend), Vec::<String>::new());
    nothing_for(&site.node.ns, &["ctr-a", "ctr-b"]);
    assert!(b.link("eth0").is_none(), "the veth went with the rules");
    // Repeated DELs succeed.
    site.del(Some(&b), "ctr-b", &conf);
    site.del(Some(&b), "ctr-b", &conf);
    site.del(None, "ctr-a", &conf);
    assert!(b.link("eth0").is_none());
    assert_eq!(site.leases(&net), Vec::<String>::new());
    if backend == "iptables" {
        let saved = nat_saves(&site.node.ns);
        assert!(!saved.contains("CNI-"), "{saved}");
    }
}

#[test]
fn ipmasq_nftables_masquerades_only_outside_the_subnet_until_del() {
    if !require_root("ipmasq_nftables_masquerades_only_outside_the_subnet_until_del") {
        return;
    }
    masquerade_to_upstream("nftables");
}

#[test]
fn ipmasq_default_masquerades_only_outside_the_subnet_until_del() {
    if !require_root("ipmasq_default_masquerades_only_outside_the_subnet_until_del") {
        return;
    }
    masquerade_to_upstream("default");
    let site = Site::new("masq-defnft");
    let conf = site.conf("masqdefnft", json!({"ipMasq": true}));
    let pod = Netns::new("pod-masq-defnft");
    site.add(&pod, "ctr-a", &conf);
    let table = nft_ruleset(&site.node.ns);
    assert!(!table.contains("cni_plugins_masquerade"), "{table}");
    site.del(Some(&pod), "ctr-a", &conf);
}

/// A `PATH` of traps: `iptables` leads to iptables-nft (what decides the
/// default), every other program it could run logs its call and fails.
fn trap_path(dir: &TempDir) {
    fake_path(dir, Some("/usr/sbin/xtables-nft-multi"), &[]);
}

/// A `PATH` whose `iptables` leads to `iptables_target` (none: no
/// `iptables`), the programs in `links` to theirs, and every other program
/// the plugin could run to a trap that logs its call and fails.
fn fake_path(dir: &TempDir, iptables_target: Option<&str>, links: &[(&str, &str)]) {
    use std::os::unix::fs::{symlink, PermissionsExt};
    if let Some(t) = iptables_target {
        symlink(t, dir.path().join("iptables")).unwrap();
    }
    let log = dir.path().join("trap.log");
    for prog in [
        "iptables-save",
        "iptables-restore",
        "ip6tables",
        "ip6tables-save",
        "ip6tables-restore",
        "nft",
    ] {
        let p = dir.path().join(prog);
        if let Some((_, t)) = links.iter().find(|(n, _)| *n == prog) {
            symlink(t, &p).unwrap();
            continue;
        }
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho \"$0 $*\" >> {}\nexit 1\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Our bridge in `site`'s node with `PATH` set to `dir` (for the plugin
/// alone: `env` sets it after the namespace is entered).
fn call_in_path(
    site: &Site,
    dir: &TempDir,
    cmd: &str,
    pod: Option<&Netns>,
    cid: &str,
    conf: &Value,
) -> PluginOutput {
    let mut command = site.node.ns.command("/usr/bin/env");
    command
        .arg(format!("PATH={}", dir.path().display()))
        .arg(bin("bridge"));
    let netns = pod
        .map(|p| p.path().display().to_string())
        .unwrap_or_default();
    let cni_path = site.path.path().display().to_string();
    call_plugin_cmd(
        command,
        &[
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", &netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", &cni_path),
        ],
        &conf.to_string(),
    )
}

/// As Go picks its default: a legacy `iptables` gets the masquerade
/// through `iptables-legacy-restore` (nothing in nf_tables); no `iptables`
/// at all gets the nftables backend (the Go plugins' v1.6+ table).
#[test]
fn ipmasq_default_follows_the_nodes_iptables() {
    if !require_root("ipmasq_default_follows_the_nodes_iptables") {
        return;
    }
    let site = Site::new("masq-legacy");
    let conf = site.conf("masqlg", json!({"ipMasq": true}));
    let pod = Netns::new("pod-masq-legacy");
    let legacy_save = |family: IpFamily| {
        let cmd = iptables_program(family, "-legacy-save");
        let out = run_ok(site.node.ns.command(cmd).args(["-t", "nat"]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let legacy = TempDir::new("masq-legacy-path");
    fake_path(
        &legacy,
        Some("/usr/sbin/xtables-legacy-multi"),
        &[
            ("iptables-save", "/usr/sbin/iptables-legacy-save"),
            ("iptables-restore", "/usr/sbin/iptables-legacy-restore"),
            ("ip6tables", "/usr/sbin/ip6tables-legacy"),
            ("ip6tables-save", "/usr/sbin/ip6tables-legacy-save"),
            ("ip6tables-restore", "/usr/sbin/ip6tables-legacy-restore"),
        ],
    );
    let r = call_in_path(&site, &legacy, "ADD", Some(&pod), "ctr-l", &conf).result();
    let c = "\"name: \\\"masqlg\\\" id: \\\"ctr-l\\\"\"";
    for (family, jump) in [
        (
            IpFamily::V4,
            format!("-A POSTROUTING -s 10.88.0.2/32 -m comment --comment {c} -j CNI-"),
        ),
        (
            IpFamily::V6,
            format!("-A POSTROUTING -s fd88::2/128 -m comment --comment {c} -j CNI-"),
        ),
    ] {
        let saved = legacy_save(family);
        assert!(saved.contains(&jump), "{jump}\nnot in\n{saved}");
    }
    assert_eq!(
        masqueraded(&site.node.ns, "iptables"),
        Vec::<String>::new(),
        "not in nf_tables"
    );
    assert_eq!(masqueraded(&site.node.ns, "nftables"), Vec::<String>::new());
    let mut checked = conf.clone();
    checked["prevResult"] = r;
    call_in_path(&site, &legacy, "CHECK", Some(&pod), "ctr-l", &checked).assert_silent_ok();
    call_in_path(&site, &legacy, "DEL", Some(&pod), "ctr-l", &conf).assert_silent_ok();
    for family in IpFamily::BOTH {
        let saved = legacy_save(family);
        assert!(!saved.contains("CNI-"), "{family:?}: {saved}");
    }
    let log = std::fs::read_to_string(legacy.path().join("trap.log")).unwrap_or_default();
    assert_eq!(log, "", "only the legacy programs were run");

    let none = TempDir::new("masq-none-path");
    fake_path(&none, None, &[]);
    let r = call_in_path(&site, &none, "ADD", Some(&pod), "ctr-x", &conf).result();
    assert_eq!(
        masqueraded(&site.node.ns, "nftables"),
        ["10.88.0.3 ctr-x", "fd88::3 ctr-x"]
    );
    assert_eq!(masqueraded(&site.node.ns, "iptables"), Vec::<String>::new());
    let mut checked = conf.clone();
    checked["prevResult"] = r;
    call_in_path(&site, &none, "CHECK", Some(&pod), "ctr-x", &checked).assert_silent_ok();
    call_in_path(&site, &none, "DEL", Some(&pod), "ctr-x", &conf).assert_silent_ok();
    assert_eq!(masqueraded(&site.node.ns, "nftables"), Vec::<String>::new());
    nothing_for(&site.node.ns, &["ctr-l", "ctr-x"]);
    let log = std::fs::read_to_string(none.path().join("trap.log")).unwrap_or_default();
    assert_eq!(log, "", "no program was run");
}

/// With no `ipMasqBackend` on a node whose `iptables` is iptables-nft,
/// ADD, CHECK, DEL and GC write and read Go's iptables rules over
/// netlink: no program is run (every one reachable is a trap).
#[test]
fn ipmasq_default_runs_no_process_on_iptables_nft() {
    if !require_root("ipmasq_default_runs_no_process_on_iptables_nft") {
        return;
    }
    let site = Site::new("masq-noproc");
    let conf = site.conf("masqnp", json!({"ipMasq": true}));
    let pod = Netns::new("pod-masq-noproc");
    let dir = TempDir::new("masq-trap-path");
    trap_path(&dir);
    let call = |cmd: &str, pod: Option<&Netns>, cid: &str, conf: &Value| {
        call_in_path(&site, &dir, cmd, pod, cid, conf)
    };
    let out = call("ADD", Some(&pod), "ctr-n", &conf);
    let r = out.result();
    assert_eq!(
        masqueraded(&site.node.ns, "iptables"),
        ["10.88.0.2 ctr-n", "fd88::2 ctr-n"]
    );
    let mut checked = conf.clone();
    checked["prevResult"] = r;
    call("CHECK", Some(&pod), "ctr-n", &checked).assert_silent_ok();
    call("DEL", Some(&pod), "ctr-n", &conf).assert_silent_ok();
    assert_eq!(masqueraded(&site.node.ns, "iptables"), Vec::<String>::new());
    let _ = call("ADD", Some(&pod), "ctr-n", &conf).result();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    call("GC", None, "", &gc).assert_silent_ok();
    assert_eq!(masqueraded(&site.node.ns, "iptables"), Vec::<String>::new());
    nothing_for(&site.node.ns, &["ctr-n"]);
    let log = std::fs::read_to_string(dir.path().join("trap.log")).unwrap_or_default();
    assert_eq!(log, "", "no program was run");
}

#[test]
fn ipmasq_iptables_masquerades_only_outside_the_subnet_until_del() {
    if !require_root("ipmasq_iptables_masquerades_only_outside_the_subnet_until_del") {
        return;
    }
    masquerade_to_upstream("iptables");
}

#[test]
fn ipmasq_gc_removes_containers_not_in_the_valid_set() {
    if !require_root("ipmasq_gc_removes_containers_not_in_the_valid_set") {
        return;
    }
    for backend in ["nftables", "iptables"] {
        let site = Site::new(&format!("mgc-{}", &backend[..3]));
        let _up = listener(&site.up);
        let conf = site.conf("mgc", json!({"ipMasq": true, "ipMasqBackend": backend}));
        // Another network's container, on another bridge and subnet.
        let mut other = site.conf(
            "mgc-other",
            json!({"ipMasq": true, "ipMasqBackend": backend,
                                                       "bridge": "cni1"}),
        );
        other["ipam"]["ranges"] = json!([[{"subnet": "10.88.1.0/24"}]]);
        let (a, b, o) = (
            Netns::new("pod-mgc-a"),
            Netns::new("pod-mgc-b"),
            Netns::new("pod-mgc-o"),
        );
        site.add(&a, "ctr-a", &conf);
        site.add(&b, "ctr-b", &conf);
        site.add(&o, "ctr-o", &other);
        assert_eq!(peer_seen(&b, UP4), NODE4, "{backend}");

        site.gc(&conf, &["ctr-a"]);
        assert_eq!(
            masqueraded(&site.node.ns, backend),
            ["10.88.0.2 ctr-a", "10.88.1.2 ctr-o", "fd88::2 ctr-a"],
            "{backend}"
        );
        assert_eq!(peer_seen(&a, UP4), NODE4, "{backend}: valid, kept");
        assert_eq!(peer_seen(&a, UP6), NODE6, "{backend}: valid, kept");
        assert!(
            b.link("eth0").is_none(),
            "{backend}: collected, its veth too"
        );
        assert_eq!(peer_seen(&o, UP4), NODE4, "{backend}: other network kept");
        // GC went on to IPAM with the same valid set.
        assert_eq!(site.leases("mgc"), ["10.88.0.2", "fd88::2"], "{backend}");
        assert_eq!(site.leases("mgc-other"), ["10.88.1.2"], "{backend}");

        // An empty valid set collects the rest of the network.
        site.gc(&conf, &[]);
        assert_eq!(
            masqueraded(&site.node.ns, backend),
            ["10.88.1.2 ctr-o"],
            "{backend}"
        );
        assert!(a.link("eth0").is_none(), "{backend}");
    }
}

/// The `iptables-save -t nat` of both families and the `bridge nat` table,
/// with the host veth name and the pod MAC (random) replaced.
fn firewall_shape(node: &Netns, pod: &Netns) -> String {
    let mut veths = links_of_kind(node, "veth");
    veths.retain(|v| v != "up0");
    assert_eq!(veths.len(), 1, "{veths:?}");
    let mac = pod.link("eth0").unwrap()["address"]
        .as_str()
        .unwrap()
        .to_string();
    let table = run_ok(node.command("nft").args(["list", "table", "bridge", "nat"]));
    format!(
        "{}{}",
        nat_saves(node),
        String::from_utf8_lossy(&table.stdout)
    )
    .replace(&veths[0], "<veth>")
    .replace(&mac, "<mac>")
}

#[test]
fn same_rules_as_the_go_reference_and_each_deletes_the_others() {
    if !require_root("same_rules_as_the_go_reference_and_each_deletes_the_others") {
        return;
    }
    same_rules_as_the_go_reference(Some("iptables"));
}

/// With no `ipMasqBackend` we write Go's iptables rules too, so Go
/// 1.1.1's DEL (which knows only iptables) removes ours (on main it
/// failed: "Chain ... does not exist", and our nft rule stayed).
#[test]
fn same_rules_as_the_go_reference_with_no_backend_key() {
    if !require_root("same_rules_as_the_go_reference_with_no_backend_key") {
        return;
    }
    same_rules_as_the_go_reference(None);
}

fn same_rules_as_the_go_reference(backend: Option<&str>) {
    let (Some(go_bridge), Some(_)) = (go_plugin("bridge"), go_plugin("host-local")) else {
        return;
    };
    let t = if backend.is_some() { "i" } else { "d" };
    let ours = Site::new(&format!("mgo{t}-ours"));
    let go = Site::new(&format!("mgo{t}-go"));
    let (pod_ours, pod_go) = (
        Netns::new(&format!("pod-mgo{t}-ours")),
        Netns::new(&format!("pod-mgo{t}-go")),
    );
    let conf_for = |site: &Site| {
        let mut c = site.conf(
            "cmp",
            json!({"ipMasq": true, "macspoofchk": true, "isGateway": true}),
        );
        if let Some(b) = backend {
            c["ipMasqBackend"] = json!(b);
        }
        // The Go 1.1.1 reference speaks up to 1.0.0.
        c["cniVersion"] = json!("1.0.0");
        c
    };
    let (conf_ours, conf_go) = (conf_for(&ours), conf_for(&go));
    // The same container ID on both nodes, so the hashed names match.
    let cid = "ctr-same";
    let go_call = |cmd: &str, node: &Site, pod: &Netns, conf: &Value| {
        PluginCall {
            node: &node.node.ns,
            plugin: &go_bridge,
            cni_path: GO_PLUGIN_DIR,
            command: cmd,
            netns: Some(pod.path()),
            container_id: cid,
            conf,
            extra: &[],
        }
        .run()
    };
    let out = go_call("ADD", &go, &pod_go, &conf_go);
    assert_eq!(out.exit_code, 0, "Go ADD: {out:?}");
    ours.add(&pod_ours, cid, &conf_ours);

    let shape = firewall_shape(&ours.node.ns, &pod_ours);
    assert_eq!(shape, firewall_shape(&go.node.ns, &pod_go));
    // And what the shape is, so the comparison cannot pass on two empty sides.
    let chain = format!("CNI-{}", &sha512_hex(&format!("cmp{cid}"))[..24]);
    let c = "\"name: \\\"cmp\\\" id: \\\"ctr-same\\\"\"";
    for want in [
        format!("-A POSTROUTING -s 10.88.0.2/32 -m comment --comment {c} -j {chain}"),
        format!("-A {chain} -d 10.88.0.0/24 -m comment --comment {c} -j ACCEPT"),
        format!("-A {chain} ! -d 224.0.0.0/4 -m comment --comment {c} -j MASQUERADE"),
        format!("-A POSTROUTING -s fd88::2/128 -m comment --comment {c} -j {chain}"),
        format!("-A {chain} -d fd88::/64 -m comment --comment {c} -j ACCEPT"),
        format!("-A {chain} ! -d ff00::/8 -m comment --comment {c} -j MASQUERADE"),
        "iifname \"<veth>\" jump cni-br-iface-ctr-same-eth0 comment \"macspoofchk-ctr-same-eth0\""
            .to_string(),
        "ether saddr <mac> return comment \"macspoofchk-ctr-same-eth0\"".to_string(),
    ] {
        assert!(shape.contains(&want), "{want}\nnot in\n{shape}");
    }
    let _up = listener(&ours.up);
    let _up_go = listener(&go.up);
    assert_eq!(peer_seen(&pod_ours, UP4), NODE4);
    assert_eq!(peer_seen(&pod_go, UP4), NODE4);
    assert_eq!(peer_seen(&pod_ours, UP6), NODE6);
    assert_eq!(peer_seen(&pod_go, UP6), NODE6);

    // Our DEL on the Go node, with the namespace gone first, removes the
    // Go plugin's rules (the Go DEL itself would leak them here).
    let go_pod_path = pod_go.path();
    drop(pod_go);
    let out = PluginCall {
        node: &go.node.ns,
        plugin: &bin("bridge"),
        cni_path: &go.path.path().display().to_string(),
        command: "DEL",
        netns: Some(go_pod_path),
        container_id: cid,
        conf: &conf_go,
        extra: &[],
    }
    .run();
    out.assert_silent_ok();
    // The Go DEL on our node removes ours.
    let out = go_call("DEL", &ours, &pod_ours, &conf_ours);
    assert_eq!(
        (out.exit_code, out.stdout.as_str()),
        (0, ""),
        "Go DEL: {out:?}"
    );
    for site in [&ours, &go] {
        let saved = nat_saves(&site.node.ns);
        assert!(!saved.contains("CNI-") && !saved.contains("-A "), "{saved}");
        assert_eq!(spoofchecked(&site.node.ns), Vec::<String>::new());
        let table = nft_ruleset(&site.node.ns);
        assert!(!table.contains("cni-br-iface"), "{table}");
        assert!(!table.contains("masquerade"), "{table}");
        assert_eq!(site.leases("cmp"), Vec::<String>::new());
    }
    assert!(pod_ours.link("eth0").is_none());
}

fn sha512_hex(s: &str) -> String {
    let out = {
        use std::io::Write;
        let mut child = std::process::Command::new("sha512sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sha512sum");
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

// ---- macspoofchk ----------------------------------------------------------

fn set_mac(pod: &Netns, node: &Netns, mac: &str) {
    pod.ip(&["link", "set", "eth0", "address", mac]);
    // Forget the old neighbours both ways, so ARP runs with the new MAC.
    pod.ip(&["neigh", "flush", "dev", "eth0"]);
    node.ip(&["neigh", "flush", "dev", "cni0"]);
}

fn mac_of(pod: &Netns) -> String {
    pod.link("eth0").unwrap()["address"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn macspoofchk_drops_spoofed_frames_and_del_and_gc_remove_it() {
    if !require_root("macspoofchk_drops_spoofed_frames_and_del_and_gc_remove_it") {
        return;
    }
    let site = Site::new("spoof");
    let node = &site.node.ns;
    let conf = site.conf("spoof", json!({"macspoofchk": true, "isGateway": true}));
    let (a, b, c) = (
        Netns::new("pod-spoof-a"),
        Netns::new("pod-spoof-b"),
        Netns::new("pod-spoof-c"),
    );
    let ra = site.add(&a, "ctr-s", &conf);
    site.add(&b, "ctr-b", &conf);
    site.add(&c, "ctr-c", &conf);
    // Another network's container, a port of another bridge.
    let mut other = site.conf(
        "spoof-other",
        json!({"macspoofchk": true, "bridge": "cni1"}),
    );
    other["ipam"]["ranges"] = json!([[{"subnet": "10.88.1.0/24"}]]);
    let o = Netns::new("pod-spoof-o");
    site.add(&o, "ctr-o", &other);

    let mac_a = mac_of(&a);
    assert_eq!(ra["interfaces"][2]["mac"], json!(mac_a));
    let veth_a = ra["interfaces"][1]["name"].as_str().unwrap();
    assert_spoofcheck_rules(node, veth_a, "ctr-s", &mac_a);
    assert_eq!(
        spoofchecked(node),
        ["ctr-b-eth0", "ctr-c-eth0", "ctr-o-eth0", "ctr-s-eth0"]
    );

    // The container's own MAC passes; a spoofed one is dropped; back again.
    assert!(ping_ok(&a, "10.88.0.1"));
    set_mac(&a, node, "02:00:00:00:00:99");
    assert!(
        !ping_ok(&a, "10.88.0.1"),
        "spoofed source MAC must be dropped"
    );
    set_mac(&a, node, &mac_a);
    assert!(ping_ok(&a, "10.88.0.1"));
    let mac_b = mac_of(&b);
    set_mac(&b, node, "02:00:00:00:00:98");
    assert!(!ping_ok(&b, "10.88.0.1"));

    // Pod c's namespace goes without a DEL: its port is gone with it.
    drop(c);
    wait_for("pod c's host veth to go", || {
        links_of_kind(node, "veth").len() == 4 // up0, a, b, o
    });

    // GC of network "spoof" with only ctr-s valid: b's (a port of cni0) and
    // c's (port gone) checks go, and b's veth with them; ctr-s (valid) and
    // ctr-o (another bridge's port) stay.
    site.gc(&conf, &["ctr-s"]);
    assert_eq!(spoofchecked(node), ["ctr-o-eth0", "ctr-s-eth0"]);
    assert_spoofcheck_rules(node, veth_a, "ctr-s", &mac_a);
    assert!(b.link("eth0").is_none(), "b's veth went with its check");
    let _ = mac_b;
    set_mac(&a, node, "02:00:00:00:00:97");
    assert!(!ping_ok(&a, "10.88.0.1"), "a is still checked");
    assert_eq!(site.leases("spoof"), ["10.88.0.2", "fd88::2"]);
    assert_eq!(site.leases("spoof-other"), ["10.88.1.2"]);

    // DEL after the namespace is gone, and again.
    let a_path = a.path();
    drop(a);
    for _ in 0..2 {
        PluginCall {
            node,
            plugin: &bin("bridge"),
            cni_path: &site.path.path().display().to_string(),
            command: "DEL",
            netns: Some(a_path.clone()),
            container_id: "ctr-s",
            conf: &conf,
            extra: &[],
        }
        .run()
        .assert_silent_ok();
    }
    assert_eq!(spoofchecked(node), ["ctr-o-eth0"]);
    assert!(!nft_ruleset(node).contains("cni-br-iface-ctr-s"));
    // DEL with an empty CNI_NETNS removes it too.
    site.del(None, "ctr-o", &other);
    assert_eq!(spoofchecked(node), Vec::<String>::new());
    assert!(!nft_ruleset(node).contains("cni-br-iface-"));
}

// ---- failures ---------------------------------------------------------------

#[test]
fn a_failure_after_the_masquerade_leaves_no_rules() {
    if !require_root("a_failure_after_the_masquerade_leaves_no_rules") {
        return;
    }
    for backend in ["nftables", "iptables"] {
        let site = Site::new(&format!("mfail-{}", &backend[..3]));
        // host-local behind a wrapper that, during ADD, takes the new port of
        // cni0 down: the ADD then fails waiting for the port, after the
        // spoof check and the masquerade were set up.
        let hl = site.path.path().join("host-local");
        site.script(
            "downing-ipam",
            &format!(
                "out=$({hl}) || {{ printf '%s' \"$out\"; exit 1; }}\n\
                 if [ \"$CNI_COMMAND\" = ADD ]; then\n\
                 for v in $(ip -o link show master cni0 | sed -n 's/^[0-9]*: \\([^@:]*\\).*/\\1/p'); do\n\
                 ip link set \"$v\" down\n\
                 done\n\
                 fi\n\
                 printf '%s' \"$out\"",
                hl = hl.display()
            ),
        );
        let mut conf = site.conf(
            "mfail",
            json!({"ipMasq": true, "ipMasqBackend": backend, "macspoofchk": true}),
        );
        conf["ipam"]["type"] = json!("downing-ipam");
        // A working container beside it, whose rules must stay.
        let mut plain = conf.clone();
        plain["ipam"]["type"] = json!("host-local");
        let keep = Netns::new("pod-mfail-keep");
        site.add(&keep, "ctr-keep", &plain);

        let pod = Netns::new("pod-mfail");
        let out = site.call("ADD", Some(&pod), "ctr-f", &conf);
        out.assert_error(100, "in error state");
        assert!(pod.link("eth0").is_none(), "{backend}");
        assert_eq!(
            links_of_kind(&site.node.ns, "veth").len(),
            2,
            "up0 and keep's"
        );
        assert_eq!(site.leases("mfail"), ["10.88.0.2", "fd88::2"], "{backend}");
        nothing_for(&site.node.ns, &["ctr-f"]);
        assert_eq!(
            masqueraded(&site.node.ns, backend),
            ["10.88.0.2 ctr-keep", "fd88::2 ctr-keep"],
            "{backend}"
        );
        assert_eq!(spoofchecked(&site.node.ns), ["ctr-keep-eth0"], "{backend}");
    }
}

#[test]
fn a_crash_after_the_firewall_steps_is_cleaned_up_by_del() {
    if !require_root("a_crash_after_the_firewall_steps_is_cleaned_up_by_del") {
        return;
    }
    let site = Site::new("mcrash");
    // No ipMasqBackend: this node has iptables(-nft), so iptables is chosen.
    let conf = site.conf("mcrash", json!({"ipMasq": true, "macspoofchk": true}));
    for (point, masq) in [("spoofchk", false), ("masq", true)] {
        let pod = Netns::new(&format!("pod-mcrash-{point}"));
        let fault = format!("bridge/{point}");
        let out = site.call_env(
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
        assert_eq!(spoofchecked(&site.node.ns), ["ctr-c-eth0"], "{fault}");
        let want: &[&str] = if masq {
            &["10.88.0.2 ctr-c", "fd88::2 ctr-c"]
        } else {
            &[]
        };
        assert_eq!(masqueraded(&site.node.ns, "iptables"), want, "{fault}");
        site.del(Some(&pod), "ctr-c", &conf);
        nothing_for(&site.node.ns, &["ctr-c"]);
        assert_eq!(spoofchecked(&site.node.ns), Vec::<String>::new(), "{fault}");
        assert_eq!(links_of_kind(&site.node.ns, "veth"), ["up0"], "{fault}");
        assert_eq!(site.leases("mcrash"), Vec::<String>::new(), "{fault}");
    }
}
