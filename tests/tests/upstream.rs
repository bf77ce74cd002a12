//! Switching a node between ours and the current upstream release
//! (containernetworking/plugins v1.9.x), in both directions, on every
//! firewall backend setting, for portmap and ipMasq: nothing is left.
//!
//! Upstream's state comes from fixtures under `tests/fixtures/upstream/`:
//! the nft transactions upstream's portmap and ipMasq send for one input
//! (read from its sources, `plugins/meta/portmap/portmap_nftables.go` and
//! `pkg/ip/ipmasq_nftables_linux.go` with knftables' text format; checked
//! byte for byte against the rulesets upstream HEAD's own binaries write),
//! and the `iptables-save` text its iptables backends leave. They are
//! loaded into a throwaway node with `nft -f` / `iptables-restore`.
//!
//! - Go → ours: our DEL (through our cnitool and Go libcni's go-cnitool)
//!   removes upstream's rules, whatever backend the config names.
//! - Ours → Go: after our ADD, the node holds exactly the fixture's bytes
//!   (`nft --debug=netlink`), so what upstream's DEL removes is what we
//!   wrote; upstream's DEL is replayed as its source does it (list the
//!   chains, delete the rules whose comment is the container's) and
//!   nothing of the container is left.
//! - Our previous release's `inet cni_rs_*` tables (fixtures listed from
//!   that release's binaries) are removed by our DEL and GC.

use std::path::PathBuf;

use serde_json::{json, Value};
use tests::*;

const CID: &str = "upfix-ctr";

fn fixture(name: &str) -> PathBuf {
    workspace_root().join("tests/fixtures/upstream").join(name)
}

fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn load_nft(ns: &Netns, text: &str) {
    feed(ns, "nft", &["-f", "-"], text);
}

/// `nft --debug=netlink list <what>`: every expression of every rule, with
/// its data and handle, as the kernel holds it.
fn nft_bytes(ns: &Netns, what: &[&str]) -> String {
    let mut args = vec!["--debug=netlink", "list"];
    args.extend_from_slice(what);
    let out = run_ok(ns.command("nft").args(&args));
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The handles of the rules of `fam table chain` whose comment is exactly
/// `comment`, or starts with it when `prefix` (none when the chain is not
/// there).
fn commented(
    ns: &Netns,
    fam: &str,
    table: &str,
    chain: &str,
    comment: &str,
    prefix: bool,
) -> Vec<String> {
    let out = ns
        .command("nft")
        .args(["-a", "list", "chain", fam, table, chain])
        .output()
        .expect("nft");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .filter(|l| {
            let Some((_, c)) = l.split_once(" comment \"") else {
                return false;
            };
            let c = c.rsplit_once("\" # handle ").map_or(c, |(c, _)| c);
            if prefix {
                c.starts_with(comment)
            } else {
                c == comment
            }
        })
        .filter_map(|l| l.rsplit("# handle ").next())
        .map(|h| h.trim().to_string())
        .collect()
}

/// Upstream portmap's nftables DEL, as its source does it: per family, the
/// rules of `hostports`, `hostip_hostports` and `masquerading` whose
/// comment is the container ID, deleted in one transaction.
fn upstream_portmap_nft_del(ns: &Netns, cid: &str) {
    for fam in ["ip", "ip6"] {
        let mut tx = String::new();
        for chain in ["hostports", "hostip_hostports", "masquerading"] {
            for h in commented(ns, fam, "cni_hostport", chain, cid, false) {
                tx.push_str(&format!(
                    "delete rule {fam} cni_hostport {chain} handle {h}\n"
                ));
            }
        }
        if !tx.is_empty() {
            load_nft(ns, &tx);
        }
    }
}

/// Upstream's ipMasq nftables teardown: the rules of `masq_checks` whose
/// comment starts with the attachment's hash.
fn upstream_masq_nft_teardown(ns: &Netns, hash: &str) {
    let mut tx = String::new();
    for h in commented(
        ns,
        "inet",
        "cni_plugins_masquerade",
        "masq_checks",
        hash,
        true,
    ) {
        tx.push_str(&format!(
            "delete rule inet cni_plugins_masquerade masq_checks handle {h}\n"
        ));
    }
    if !tx.is_empty() {
        load_nft(ns, &tx);
    }
}

/// sha512 hex of `s`, first `n` digits (upstream's `MustFormatHashWithPrefix`).
fn hash(s: &str, n: usize) -> String {
    libcni::netfilter::hex_sha512(s)[..n].to_string()
}

/// The fixture's state with the container's rules deleted the way
/// upstream's DEL does: what must remain after any DEL of the container.
fn skeleton_of(fixture_name: &str, del: &dyn Fn(&Netns)) -> String {
    let reference = Netns::new("upfx-ref");
    load_nft(&reference, &fixture_text(fixture_name));
    del(&reference);
    nft_ruleset(&reference)
}

/// The two clients that run a chain: ours, and Go libcni's.
fn tools() -> Vec<(&'static str, PathBuf)> {
    let mut v = vec![("cnitool", bin("cnitool"))];
    if let Some(go) = go_cnitool() {
        v.push(("go-cnitool", go));
    }
    v
}

fn run_tool(
    node: &Node,
    name: &str,
    tool: &std::path::Path,
    args: &[&str],
    cap: Option<&Value>,
) -> PluginOutput {
    let cap = cap.map(|c| c.to_string()).unwrap_or_default();
    let mut env = vec![("CNI_CONTAINERID", CID)];
    if !cap.is_empty() {
        env.push(("CAP_ARGS", cap.as_str()));
    }
    if name == "cnitool" {
        node.cnitool_with(tool, args, &env)
    } else {
        node.go_cnitool(tool, args, &env)
    }
}

/// A bridge + host-local (+ portmap) conflist whose first addresses are the
/// fixtures' container addresses.
fn chain_conf(net: &str, data: &TempDir, bridge: Value, portmap: Option<Value>) -> Value {
    let (v4, v6, start4, start6) = if net == "upfix" {
        ("10.22.0.0/24", "fd00:22::/64", "10.22.0.5", "fd00:22::5")
    } else {
        ("10.33.0.0/24", "fd00:33::/64", "10.33.0.2", "fd00:33::2")
    };
    let mut b = json!({
        "type": "bridge", "bridge": format!("br-{net}"),
        "ipam": {"type": "host-local", "dataDir": data.path(),
                 "ranges": [[{"subnet": v4, "rangeStart": start4}], [{"subnet": v6, "rangeStart": start6}]]}
    });
    merge(&mut b, bridge);
    let mut plugins = vec![b];
    if let Some(p) = portmap {
        let mut pm = json!({"type": "portmap", "capabilities": {"portMappings": true}});
        merge(&mut pm, p);
        plugins.push(pm);
    }
    json!({"cniVersion": "1.0.0", "name": net, "plugins": plugins})
}

/// The fixture's mappings, as a runtime passes them.
fn fixture_mappings() -> Value {
    json!({"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 5353, "containerPort": 53, "protocol": "udp"},
        {"hostPort": 9090, "containerPort": 90, "protocol": "tcp", "hostIP": "10.9.0.1"},
        {"hostPort": 9191, "containerPort": 91, "protocol": "tcp", "hostIP": "fd00:9::1"}
    ]})
}

// ---- portmap, nftables --------------------------------------------------------

#[test]
fn upstream_portmap_nftables_our_add_is_upstreams_and_its_del_removes_it() {
    if !require_root("upstream_portmap_nftables_our_add_is_upstreams_and_its_del_removes_it") {
        return;
    }
    // The one deliberate difference: the hairpin masquerade covers the
    // container's subnet (as upstream's iptables backend does), not the
    // container alone, so that other pods of the bridge reach its ports.
    let want_text = fixture_text("portmap-nftables.nft")
        .replace(
            "ip saddr 10.22.0.5 ip daddr",
            "ip saddr 10.22.0.0/24 ip daddr",
        )
        .replace(
            "ip6 saddr fd00:22::5 ip6 daddr",
            "ip6 saddr fd00:22::/64 ip6 daddr",
        );
    let want = Netns::new("upfx-want");
    load_nft(&want, &want_text);
    let skeleton = skeleton_of("portmap-nftables.nft", &|ns| {
        upstream_portmap_nft_del(ns, CID)
    });
    for (name, tool) in tools() {
        let node = Node::new(&format!("upfx-pm-{name}"));
        let pod = Netns::new("upfx-pm-pod");
        let data = TempDir::new("upfx-pm-ipam");
        let conf = chain_conf(
            "upfix",
            &data,
            json!({}),
            Some(json!({"backend": "nftables"})),
        );
        node.write_conf("10-upfix.conflist", &conf);
        let path = pod.path();
        let args = ["add", "upfix", path.to_str().unwrap()];
        let out = run_tool(&node, name, &tool, &args, Some(&fixture_mappings()));
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        for fam in ["ip", "ip6"] {
            assert_eq!(
                nft_bytes(&node.ns, &["table", fam, "cni_hostport"]),
                nft_bytes(&want, &["table", fam, "cni_hostport"]),
                "{name}: table {fam} cni_hostport is upstream's, byte for byte"
            );
        }
        // Upstream's DEL finds every rule of the container.
        upstream_portmap_nft_del(&node.ns, CID);
        assert_eq!(nft_ruleset(&node.ns), skeleton, "{name}");
        // Our DEL afterwards: nothing to do, success, and the ledger goes.
        let out = run_tool(
            &node,
            name,
            &tool,
            &["del", "upfix", path.to_str().unwrap()],
            None,
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        assert_eq!(nft_ruleset(&node.ns), skeleton, "{name}");
    }
}

#[test]
fn upstream_portmap_nftables_rules_go_with_our_del() {
    if !require_root("upstream_portmap_nftables_rules_go_with_our_del") {
        return;
    }
    let skeleton = skeleton_of("portmap-nftables.nft", &|ns| {
        upstream_portmap_nft_del(ns, CID)
    });
    // Every backend setting: our DEL looks at both backends.
    for backend in [None, Some("nftables"), Some("iptables")] {
        for (name, tool) in tools() {
            let node = Node::new(&format!("upfx-pmdel-{name}"));
            let pod = Netns::new("upfx-pmdel-pod");
            load_nft(&node.ns, &fixture_text("portmap-nftables.nft"));
            let mut pm = json!({"type": "portmap", "capabilities": {"portMappings": true}});
            if let Some(b) = backend {
                pm["backend"] = json!(b);
            }
            node.write_conf(
                "10-upfix.conflist",
                &json!({"cniVersion": "1.0.0", "name": "upfix", "plugins": [pm]}),
            );
            let path = pod.path();
            // No cached result, no mappings: the DEL of a node that ran Go.
            let out = run_tool(
                &node,
                name,
                &tool,
                &["del", "upfix", path.to_str().unwrap()],
                None,
            );
            assert_eq!(out.exit_code, 0, "{name} {backend:?}: {out:?}");
            assert_eq!(nft_ruleset(&node.ns), skeleton, "{name} {backend:?}");
        }
    }
}

#[test]
fn upstream_portmap_chain_through_the_cri_path() {
    if !require_root("upstream_portmap_chain_through_the_cri_path") {
        return;
    }
    let Some(cri) = go_cni_cri() else {
        return;
    };
    let ports = [
        "-port",
        "8080:80/tcp",
        "-port",
        "5353:53/udp",
        "-port",
        "9090:90/tcp@10.9.0.1",
        "-port",
        "9191:91/tcp@fd00:9::1",
    ];
    let want_text = fixture_text("portmap-nftables.nft")
        .replace(
            "ip saddr 10.22.0.5 ip daddr",
            "ip saddr 10.22.0.0/24 ip daddr",
        )
        .replace(
            "ip6 saddr fd00:22::5 ip6 daddr",
            "ip6 saddr fd00:22::/64 ip6 daddr",
        );
    let want = Netns::new("upfx-cwant");
    load_nft(&want, &want_text);
    let skeleton = skeleton_of("portmap-nftables.nft", &|ns| {
        upstream_portmap_nft_del(ns, CID)
    });
    let data = TempDir::new("upfx-cri-ipam");
    let conf = chain_conf(
        "upfix",
        &data,
        json!({}),
        Some(json!({"backend": "nftables"})),
    );

    // containerd's setup through ours: upstream's bytes; upstream's DEL
    // removes them, and containerd's teardown then succeeds.
    let node = Node::new("upfx-cri");
    let pod = Netns::new("upfx-cri-pod");
    node.write_conf("10-upfix.conflist", &conf);
    let out = node.cri(&cri, "setup", Some(&pod), CID, &ports);
    assert_eq!(out.exit_code, 0, "{out:?}");
    for fam in ["ip", "ip6"] {
        assert_eq!(
            nft_bytes(&node.ns, &["table", fam, "cni_hostport"]),
            nft_bytes(&want, &["table", fam, "cni_hostport"]),
            "table {fam} cni_hostport through the CRI path"
        );
    }
    upstream_portmap_nft_del(&node.ns, CID);
    assert_eq!(nft_ruleset(&node.ns), skeleton);
    let out = node.cri(&cri, "remove", None, CID, &ports);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(nft_ruleset(&node.ns), skeleton);

    // And the other way: containerd's teardown through ours, after the
    // namespace is gone, removes upstream's rules.
    let node = Node::new("upfx-cri2");
    node.write_conf("10-upfix.conflist", &conf);
    load_nft(&node.ns, &fixture_text("portmap-nftables.nft"));
    let out = node.cri(&cri, "remove", None, CID, &ports);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(nft_ruleset(&node.ns), skeleton);
}

// ---- ipMasq, nftables ---------------------------------------------------------

#[test]
fn upstream_ipmasq_nftables_both_ways() {
    if !require_root("upstream_ipmasq_nftables_both_ways") {
        return;
    }
    let instance = format!(
        "{}-{}",
        hash("upfixm", 16),
        hash(&format!("eth0:{CID}"), 16)
    );
    let want = Netns::new("upfx-mwant");
    load_nft(&want, &fixture_text("ipmasq-nftables.nft"));
    let skeleton = skeleton_of("ipmasq-nftables.nft", &|ns| {
        upstream_masq_nft_teardown(ns, &instance)
    });
    for (name, tool) in tools() {
        // Ours → Go: our ADD writes upstream's bytes; upstream's teardown
        // (which always looks at both backends) removes them.
        let node = Node::new(&format!("upfx-m-{name}"));
        let pod = Netns::new("upfx-m-pod");
        let data = TempDir::new("upfx-m-ipam");
        let conf = chain_conf(
            "upfixm",
            &data,
            json!({"ipMasq": true, "ipMasqBackend": "nftables"}),
            None,
        );
        node.write_conf("10-upfixm.conflist", &conf);
        let path = pod.path();
        let out = run_tool(
            &node,
            name,
            &tool,
            &["add", "upfixm", path.to_str().unwrap()],
            None,
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        assert_eq!(
            nft_bytes(&node.ns, &["table", "inet", "cni_plugins_masquerade"]),
            nft_bytes(&want, &["table", "inet", "cni_plugins_masquerade"]),
            "{name}: upstream's bytes"
        );
        upstream_masq_nft_teardown(&node.ns, &instance);
        assert_eq!(nft_ruleset(&node.ns), skeleton, "{name}");
        let out = run_tool(
            &node,
            name,
            &tool,
            &["del", "upfixm", path.to_str().unwrap()],
            None,
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");

        // Go → ours, every backend setting: our DEL removes upstream's rules.
        for backend in [None, Some("nftables"), Some("iptables")] {
            let node = Node::new(&format!("upfx-mdel-{name}"));
            let pod = Netns::new("upfx-mdel-pod");
            load_nft(&node.ns, &fixture_text("ipmasq-nftables.nft"));
            let mut extra = json!({"ipMasq": true});
            if let Some(b) = backend {
                extra["ipMasqBackend"] = json!(b);
            }
            node.write_conf(
                "10-upfixm.conflist",
                &chain_conf("upfixm", &data, extra, None),
            );
            let path = pod.path();
            let out = run_tool(
                &node,
                name,
                &tool,
                &["del", "upfixm", path.to_str().unwrap()],
                None,
            );
            assert_eq!(out.exit_code, 0, "{name} {backend:?}: {out:?}");
            assert_eq!(nft_ruleset(&node.ns), skeleton, "{name} {backend:?}");
        }
    }
}

// ---- iptables (upstream's default where iptables works) ----------------------

fn nat_of(ns: &Netns, family: IpFamily) -> Vec<String> {
    let tool = iptables_program(family, "-save");
    let out = run_ok(ns.command(tool).args(["-t", "nat"]));
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("-A ") || (l.starts_with(':') && l.contains("CNI-")))
        .map(|l| l.split(" [").next().unwrap_or(l).to_string())
        .collect();
    v.sort();
    v
}

fn fixture_lines(name: &str) -> Vec<String> {
    let mut v: Vec<String> = fixture_text(name)
        .lines()
        .filter(|l| l.starts_with("-A ") || (l.starts_with(':') && l.contains("CNI-")))
        .map(|l| l.split(" [").next().unwrap_or(l).to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn upstream_iptables_state_both_ways() {
    if !require_root("upstream_iptables_state_both_ways") {
        return;
    }
    for (name, tool) in tools() {
        // Go → ours: upstream's default backend left iptables rules; our
        // DEL removes them on every backend setting of the config.
        for backend in [None, Some("nftables"), Some("iptables")] {
            let node = Node::new(&format!("upfx-i-{name}"));
            let pod = Netns::new("upfx-i-pod");
            let data = TempDir::new("upfx-i-ipam");
            feed(
                &node.ns,
                "iptables-restore",
                &[],
                &fixture_text("portmap-iptables.v4"),
            );
            feed(
                &node.ns,
                "ip6tables-restore",
                &[],
                &fixture_text("portmap-iptables.v6"),
            );
            let mut pm = json!({});
            if let Some(b) = backend {
                pm["backend"] = json!(b);
            }
            node.write_conf(
                "10-upfix.conflist",
                &chain_conf("upfix", &data, json!({}), Some(pm)),
            );
            let path = pod.path();
            let out = run_tool(
                &node,
                name,
                &tool,
                &["del", "upfix", path.to_str().unwrap()],
                None,
            );
            assert_eq!(out.exit_code, 0, "{name} {backend:?}: {out:?}");
            for family in IpFamily::BOTH {
                let left: Vec<String> = nat_of(&node.ns, family)
                    .into_iter()
                    .filter(|l| l.contains("CNI-DN-") || l.contains(CID))
                    .collect();
                assert_eq!(left, Vec::<String>::new(), "{name} {backend:?} {family:?}");
            }
            let node = Node::new(&format!("upfx-im-{name}"));
            feed(
                &node.ns,
                "iptables-restore",
                &[],
                &fixture_text("ipmasq-iptables.v4"),
            );
            feed(
                &node.ns,
                "ip6tables-restore",
                &[],
                &fixture_text("ipmasq-iptables.v6"),
            );
            let mut extra = json!({"ipMasq": true});
            if let Some(b) = backend {
                extra["ipMasqBackend"] = json!(b);
            }
            node.write_conf(
                "10-upfixm.conflist",
                &chain_conf("upfixm", &data, extra, None),
            );
            let out = run_tool(
                &node,
                name,
                &tool,
                &["del", "upfixm", path.to_str().unwrap()],
                None,
            );
            assert_eq!(out.exit_code, 0, "{name} {backend:?}: {out:?}");
            for family in IpFamily::BOTH {
                assert_eq!(
                    nat_of(&node.ns, family),
                    Vec::<String>::new(),
                    "{name} {backend:?} {family:?}"
                );
            }
        }

        // Ours → Go with `iptables`: our ADD writes upstream's rules, line
        // for line, which upstream's DEL (by the same chain names) removes.
        let node = Node::new(&format!("upfx-io-{name}"));
        let pod = Netns::new("upfx-io-pod");
        let data = TempDir::new("upfx-io-ipam");
        node.write_conf(
            "10-upfix.conflist",
            &chain_conf(
                "upfix",
                &data,
                json!({}),
                Some(json!({"backend": "iptables"})),
            ),
        );
        let path = pod.path();
        let out = run_tool(
            &node,
            name,
            &tool,
            &["add", "upfix", path.to_str().unwrap()],
            Some(&fixture_mappings()),
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        assert_eq!(
            nat_of(&node.ns, IpFamily::V4),
            fixture_lines("portmap-iptables.v4"),
            "{name}"
        );
        assert_eq!(
            nat_of(&node.ns, IpFamily::V6),
            fixture_lines("portmap-iptables.v6"),
            "{name}"
        );
        let out = run_tool(
            &node,
            name,
            &tool,
            &["del", "upfix", path.to_str().unwrap()],
            None,
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");

        let node = Node::new(&format!("upfx-imo-{name}"));
        let pod = Netns::new("upfx-imo-pod");
        let data = TempDir::new("upfx-imo-ipam");
        node.write_conf(
            "10-upfixm.conflist",
            &chain_conf(
                "upfixm",
                &data,
                json!({"ipMasq": true, "ipMasqBackend": "iptables"}),
                None,
            ),
        );
        let path = pod.path();
        let out = run_tool(
            &node,
            name,
            &tool,
            &["add", "upfixm", path.to_str().unwrap()],
            None,
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        assert_eq!(
            nat_of(&node.ns, IpFamily::V4),
            fixture_lines("ipmasq-iptables.v4"),
            "{name}"
        );
        assert_eq!(
            nat_of(&node.ns, IpFamily::V6),
            fixture_lines("ipmasq-iptables.v6"),
            "{name}"
        );
        let out = run_tool(
            &node,
            name,
            &tool,
            &["del", "upfixm", path.to_str().unwrap()],
            None,
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
    }
}

/// Upstream portmap's iptables DEL (`chain.teardown` through go-iptables),
/// replayed with the node's own `iptables`: per family, when the
/// container's chain exists, each rule of `CNI-HOSTPORT-DNAT` that jumps
/// to it is deleted by its spec (`iptables -D`, which must recognise our
/// rules), then the chain is flushed and deleted.
fn upstream_portmap_ipt_del(ns: &Netns, net: &str, cid: &str) {
    let chain = libcni::netfilter::go_chain_name("DN-", net, cid);
    for cmd in ["iptables", "ip6tables"] {
        let listed = ns
            .command(cmd)
            .args(["-t", "nat", "-S", "CNI-HOSTPORT-DNAT"])
            .output()
            .expect(cmd);
        let text = String::from_utf8_lossy(&listed.stdout).into_owned();
        for line in text.lines().filter(|l| l.ends_with(&format!("-j {chain}"))) {
            let mut args = vec!["-t".to_string(), "nat".to_string()];
            args.extend(libcni::netfilter::iptables::split_tokens(line));
            args[2] = "-D".into();
            run_ok(ns.command(cmd).args(&args));
        }
        let exists = ns
            .command(cmd)
            .args(["-t", "nat", "-S", &chain])
            .output()
            .expect(cmd)
            .status
            .success();
        if exists {
            run_ok(ns.command(cmd).args(["-t", "nat", "-F", &chain]));
            run_ok(ns.command(cmd).args(["-t", "nat", "-X", &chain]));
        }
    }
}

/// A config naming no backend (kube-flannel's, podman's): our ADD writes
/// upstream's default, its iptables rules, line for line and nothing in
/// nftables, so upstream's DEL (which looks only at iptables then) leaves
/// nothing; our DEL afterwards has nothing left to do.
#[test]
fn upstream_portmap_no_backend_our_add_is_upstreams_default_and_its_del_removes_it() {
    if !require_root(
        "upstream_portmap_no_backend_our_add_is_upstreams_default_and_its_del_removes_it",
    ) {
        return;
    }
    for (name, tool) in tools() {
        let node = Node::new(&format!("upfx-nb-{name}"));
        let pod = Netns::new("upfx-nb-pod");
        let data = TempDir::new("upfx-nb-ipam");
        node.write_conf(
            "10-upfix.conflist",
            &chain_conf("upfix", &data, json!({}), Some(json!({}))),
        );
        let path = pod.path();
        let out = run_tool(
            &node,
            name,
            &tool,
            &["add", "upfix", path.to_str().unwrap()],
            Some(&fixture_mappings()),
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        assert_eq!(
            nat_of(&node.ns, IpFamily::V4),
            fixture_lines("portmap-iptables.v4"),
            "{name}"
        );
        assert_eq!(
            nat_of(&node.ns, IpFamily::V6),
            fixture_lines("portmap-iptables.v6"),
            "{name}"
        );
        upstream_portmap_ipt_del(&node.ns, "upfix", CID);
        for family in IpFamily::BOTH {
            let left: Vec<String> = nat_of(&node.ns, family)
                .into_iter()
                .filter(|l| l.contains("CNI-DN-") || l.contains(CID))
                .collect();
            assert_eq!(left, Vec::<String>::new(), "{name} {family:?}");
        }
        let ruleset = nft_ruleset(&node.ns);
        assert!(
            !ruleset.contains("cni_hostport") && !ruleset.contains(CID),
            "{name}: nothing of the container in nftables:\n{ruleset}"
        );
        let out = run_tool(
            &node,
            name,
            &tool,
            &["del", "upfix", path.to_str().unwrap()],
            None,
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
    }
}

/// Upstream's ipMasq iptables teardown (`teardownIPMasqIPTables`), replayed
/// with the node's own `iptables`: per family, the POSTROUTING jump of each
/// container address is deleted by its spec (`iptables -D`, which must
/// recognise our rule), then the container's chain is flushed and deleted.
fn upstream_masq_ipt_teardown(ns: &Netns, fixture_name: &str, family: IpFamily) {
    let cmd = libcni::netfilter::iptables::program(family);
    for line in fixture_lines(fixture_name)
        .iter()
        .filter(|l| l.starts_with("-A POSTROUTING "))
    {
        let mut args = vec!["-t".to_string(), "nat".to_string()];
        args.extend(libcni::netfilter::iptables::split_tokens(line));
        args[2] = "-D".into();
        run_ok(ns.command(cmd).args(&args));
    }
    let chain = libcni::netfilter::go_chain_name("", "upfixm", CID);
    run_ok(ns.command(cmd).args(["-t", "nat", "-F", &chain]));
    run_ok(ns.command(cmd).args(["-t", "nat", "-X", &chain]));
}

/// ipMasq with no `ipMasqBackend`: our ADD writes upstream v1.9's default,
/// its iptables rules line for line and nothing in nftables, which
/// upstream's iptables teardown removes; our DEL then has nothing to do.
#[test]
fn upstream_ipmasq_no_backend_our_add_is_upstreams_default_and_its_del_removes_it() {
    if !require_root(
        "upstream_ipmasq_no_backend_our_add_is_upstreams_default_and_its_del_removes_it",
    ) {
        return;
    }
    for (name, tool) in tools() {
        let node = Node::new(&format!("upfx-mnb-{name}"));
        let pod = Netns::new("upfx-mnb-pod");
        let data = TempDir::new("upfx-mnb-ipam");
        node.write_conf(
            "10-upfixm.conflist",
            &chain_conf("upfixm", &data, json!({"ipMasq": true}), None),
        );
        let path = pod.path();
        let out = run_tool(
            &node,
            name,
            &tool,
            &["add", "upfixm", path.to_str().unwrap()],
            None,
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        assert_eq!(
            nat_of(&node.ns, IpFamily::V4),
            fixture_lines("ipmasq-iptables.v4"),
            "{name}"
        );
        assert_eq!(
            nat_of(&node.ns, IpFamily::V6),
            fixture_lines("ipmasq-iptables.v6"),
            "{name}"
        );
        let ruleset = nft_ruleset(&node.ns);
        assert!(
            !ruleset.contains("cni_plugins_masquerade"),
            "{name}: nothing in upstream's nftables table:\n{ruleset}"
        );
        upstream_masq_ipt_teardown(&node.ns, "ipmasq-iptables.v4", IpFamily::V4);
        upstream_masq_ipt_teardown(&node.ns, "ipmasq-iptables.v6", IpFamily::V6);
        for family in IpFamily::BOTH {
            assert_eq!(
                nat_of(&node.ns, family),
                Vec::<String>::new(),
                "{name} {family:?}"
            );
        }
        let out = run_tool(
            &node,
            name,
            &tool,
            &["del", "upfixm", path.to_str().unwrap()],
            None,
        );
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
    }
}

// ---- our previous release ----------------------------------------------------

/// The old tables' lines naming `cid`.
fn old_state_of(ns: &Netns, cid: &str) -> Vec<String> {
    nft_ruleset(ns)
        .lines()
        .filter(|l| l.contains(&format!("cid={cid}\"")))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn previous_release_state_goes_with_our_del_and_gc() {
    if !require_root("previous_release_state_goes_with_our_del_and_gc") {
        return;
    }
    // The previous release's portmap and ipMasq state of two containers of
    // network upold (listed from that release's own binaries).
    let previous = fixture_text("previous-release.nft");
    for (name, tool) in tools() {
        let node = Node::new(&format!("upold-{name}"));
        let pod = Netns::new("upold-pod");
        let data = TempDir::new("upold-ipam");
        load_nft(&node.ns, &previous);
        let conf = json!({"cniVersion": "1.0.0", "name": "upold", "plugins": [
            {"type": "bridge", "bridge": "upold0", "ipMasq": true,
             "ipam": {"type": "host-local", "dataDir": data.path(),
                      "ranges": [[{"subnet": "10.44.0.0/24"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]});
        node.write_conf("10-upold.conflist", &conf);
        let path = pod.path();
        let del = |cid: &str| {
            let out = if name == "cnitool" {
                node.cnitool_with(
                    &tool,
                    &["del", "upold", path.to_str().unwrap()],
                    &[("CNI_CONTAINERID", cid)],
                )
            } else {
                node.go_cnitool(
                    &tool,
                    &["del", "upold", path.to_str().unwrap()],
                    &[("CNI_CONTAINERID", cid)],
                )
            };
            assert_eq!(out.exit_code, 0, "{name} DEL {cid}: {out:?}");
        };
        assert_eq!(old_state_of(&node.ns, "prev-ctr-a").len(), 6);
        del("prev-ctr-a");
        assert_eq!(
            old_state_of(&node.ns, "prev-ctr-a"),
            Vec::<String>::new(),
            "{name}"
        );
        assert_eq!(
            old_state_of(&node.ns, "prev-ctr-b").len(),
            6,
            "{name}: the other container's stays"
        );
        del("prev-ctr-b");
        // The last container gone, the old tables go with it.
        let left = nft_ruleset(&node.ns);
        assert!(
            !left.contains("cni_rs_hostport") && !left.contains("cni_rs_masq"),
            "{name}:\n{left}"
        );
    }

    // GC alone (no DEL: the containers are long gone) removes the old state
    // of the network's stale containers, keeps the valid one's, and the
    // tables once empty.
    let node = Node::new("upold-gc");
    load_nft(&node.ns, &previous);
    for plugin in ["portmap", "bridge"] {
        let gc = json!({
            "cniVersion": "1.1.0", "name": "upold", "type": plugin, "ipMasq": true,
            "ipam": {"type": "host-local", "dataDir": TempDir::new("upold-gc1").path(),
                     "ranges": [[{"subnet": "10.44.0.0/24"}]]},
            "cni.dev/valid-attachments": [{"containerID": "prev-ctr-b", "ifname": "eth0"}]
        });
        let out = call_plugin(
            Some(&node.ns),
            &bin(plugin),
            &[
                ("CNI_COMMAND", "GC"),
                ("CNI_PATH", bin_dir().to_str().unwrap()),
            ],
            &gc.to_string(),
        );
        assert_eq!(out.exit_code, 0, "{plugin} GC: {out:?}");
    }
    assert_eq!(old_state_of(&node.ns, "prev-ctr-a"), Vec::<String>::new());
    assert_eq!(old_state_of(&node.ns, "prev-ctr-b").len(), 6);
    node.write_conf(
        "10-upold.conflist",
        &json!({"cniVersion": "1.1.0", "name": "upold", "plugins": [
            {"type": "bridge", "bridge": "upold0", "ipMasq": true,
             "ipam": {"type": "host-local", "dataDir": TempDir::new("upold-gc-ipam").path(),
                      "ranges": [[{"subnet": "10.44.0.0/24"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]}),
    );
    let out = node.cnitool_with(&bin("cnitool"), &["gc", "upold"], &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let left = nft_ruleset(&node.ns);
    assert!(
        !left.contains("cni_rs_hostport") && !left.contains("cni_rs_masq"),
        "{left}"
    );
}
