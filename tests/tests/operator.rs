//! `cni-rs inspect` and `cni-rs gc` on a node whose leaks were made the
//! way they happen: a pod's namespace removed without DEL (ours and the
//! Go 1.1.1 plugins' attachments), a lease no cache names, an ADD in
//! flight. `gc --apply` must remove exactly the dead pieces: the node
//! afterwards is, link for link and rule for rule, the node of the live
//! pods alone.

use serde_json::{json, Value};
use std::path::Path;
use tests::*;

/// Our chain: every plugin with state of its own on the node.
fn our_conflist(state: &TempDir) -> Value {
    json!({
        "cniVersion": "1.1.0", "name": "opnet",
        "plugins": [
            {"type": "bridge", "bridge": "cni-op0", "isGateway": true, "ipMasq": true,
             "ipam": {"type": "host-local", "dataDir": state.path().join("leases"),
                      "ranges": [[{"subnet": "10.89.0.0/24"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "egressRate": 8000000, "egressBurst": 800000},
            {"type": "tuning", "mtu": 1400, "dataDir": state.path().join("tuning")}
        ]
    })
}

/// The Go 1.1.1 plugins' chain (Debian's package), at a version they speak.
fn go_conflist(state: &TempDir) -> Value {
    json!({
        "cniVersion": "1.0.0", "name": "gonet",
        "plugins": [
            {"type": "bridge", "bridge": "cni-op1", "isGateway": true, "ipMasq": true,
             "ipam": {"type": "host-local", "dataDir": state.path().join("leases"),
                      "ranges": [[{"subnet": "10.89.1.0/24"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

/// `cni-rs <command> <args>` in the node (our plugins on `CNI_PATH`),
/// asking no CRI runtime.
fn operator(node: &Node, command: &str, args: &[&str]) -> PluginOutput {
    let mut full = vec![command, "--cri-socket", "none"];
    full.extend_from_slice(args);
    node.cnitool_with(&bin("cni-rs"), &full, &[])
}

/// The node's own dirs for `cni-rs`.
fn dirs(node: &Node) -> Vec<String> {
    vec![
        "--cache-dir".into(),
        node.shared_cache_dir().display().to_string(),
        "--conf-dir".into(),
        node.conf_dir.path().display().to_string(),
    ]
}

fn inspect(node: &Node, extra: &[&str]) -> Vec<Value> {
    let d = dirs(node);
    let mut args: Vec<&str> = d.iter().map(String::as_str).collect();
    args.push("--json");
    args.extend_from_slice(extra);
    let out = operator(node, "inspect", &args);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["schemaVersion"], 1);
    v["attachments"].as_array().unwrap().clone()
}

fn gc(node: &Node, extra: &[&str]) -> PluginOutput {
    let d = dirs(node);
    let mut args: Vec<&str> = d.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    operator(node, "gc", &args)
}

fn kinds(row: &Value) -> Vec<String> {
    let mut k: Vec<String> = row["pieces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap().to_string())
        .collect();
    k.sort();
    k.dedup();
    k
}

fn cid_of(row: &Value) -> &str {
    row["containerID"].as_str().unwrap()
}

/// Every file under `dir`, relative, sorted (leases, backups, caches).
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn gc_removes_exactly_the_dead_and_inspect_shows_the_live() {
    if !require_root("gc_removes_exactly_the_dead_and_inspect_shows_the_live") {
        return;
    }
    let node = Node::new("op");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let state = TempDir::new("op-state");
    node.write_conf("10-opnet.conflist", &our_conflist(&state));
    node.write_conf("20-gonet.conflist", &go_conflist(&state));
    let go_cnitool = go_cnitool().expect("go-cnitool");
    let go_dir = go_plugin("bridge").unwrap().parent().unwrap().to_path_buf();

    // `go`: the Go plugins, run by the Go libcni cnitool (whose cache
    // records no netns, as containerd 1.7's does), or by ours.
    let add = |net: &str, pod: &Netns, cid: &str, port: u16, go: Option<bool>| {
        let caps =
            json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]})
                .to_string();
        let path = pod.path().display().to_string();
        let env = [("CAP_ARGS", caps.as_str()), ("CNI_CONTAINERID", cid)];
        let dir = go_dir.display().to_string();
        let mut go_env = env.to_vec();
        go_env.push(("CNI_PATH", &dir));
        let out = match go {
            Some(true) => node.go_cnitool(&go_cnitool, &["add", net, &path], &go_env),
            Some(false) => node.cnitool_with(&bin("cnitool"), &["add", net, &path], &go_env),
            None => node.cnitool_with(&bin("cnitool"), &["add", net, &path], &env),
        };
        assert_eq!(out.exit_code, 0, "{out:?}");
        out.json()["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string()
    };

    // The live pods: three of ours, one of the Go plugins'.
    let live: Vec<Netns> = (0..4).map(|i| Netns::new(&format!("op-live{i}"))).collect();
    let mut live_ips = Vec::new();
    for (i, pod) in live.iter().enumerate() {
        let (net, go) = if i == 3 {
            ("gonet", Some(true))
        } else {
            ("opnet", None)
        };
        live_ips.push(add(net, pod, &format!("live-{i}"), 9000 + i as u16, go));
    }
    let only_live = NetSnapshot::take(&node.ns);
    let live_files = (
        files_under(state.path()),
        files_under(&node.shared_cache_dir()),
    );

    // The leaked: two of ours and one of Go's, their namespaces removed
    // without DEL, as a runtime that died (or a person) leaves them.
    for (i, (net, go)) in [("opnet", None), ("opnet", None), ("gonet", Some(false))]
        .into_iter()
        .enumerate()
    {
        let pod = Netns::new(&format!("op-dead{i}"));
        add(net, &pod, &format!("dead-{i}"), 9100 + i as u16, go);
        drop(pod);
    }
    // A lease no cache names (a runtime without a cache), written long ago.
    let ghost = state.path().join("leases/opnet/10.89.0.250");
    std::fs::write(&ghost, "ghost\r\neth0").unwrap();
    run_ok(
        std::process::Command::new("touch")
            .args(["-d", "2020-01-01"])
            .arg(&ghost),
    );

    // inspect: the live four with every piece present, the three stale
    // ones and the untied lease.
    let rows = inspect(&node, &["--grace", "0"]);
    let by = |l: &str| -> Vec<&Value> { rows.iter().filter(|r| r["liveness"] == l).collect() };
    let mut live_cids: Vec<&str> = by("netns").iter().map(|r| cid_of(r)).collect();
    live_cids.sort();
    assert_eq!(live_cids, ["live-0", "live-1", "live-2"], "{rows:#?}");
    // Go libcni's cache names no netns: without a CRI runtime to ask, the
    // Go pod cannot be proven dead, and is kept.
    let unknown = by("unknown");
    assert_eq!(unknown.len(), 1, "{rows:#?}");
    assert_eq!(cid_of(unknown[0]), "live-3");
    for r in by("netns").into_iter().chain(unknown) {
        assert_eq!(r["missing"], json!([]), "{r:#}");
        assert_eq!(r["live"], r["network"] == "opnet");
        let mut want = vec![
            "cache",
            "hostInterface",
            "lease",
            "masquerade",
            "portMappings",
        ];
        if r["network"] == "opnet" {
            want.extend(["ifb", "netns", "tuningBackup"]);
            assert_eq!(r["shaping"], "in - out 8000000bit/s", "{r:#}");
        }
        want.sort();
        assert_eq!(kinds(r), want, "{r:#}");
        let i: usize = cid_of(r)[5..].parse().unwrap();
        assert_eq!(
            r["addresses"][0]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap(),
            live_ips[i]
        );
        assert_eq!(r["hostPorts"][0]["hostPort"], 9000 + i as u64);
        assert!(
            r["hostInterface"].as_str().unwrap().starts_with("veth"),
            "{r:#}"
        );
    }
    let mut stale: Vec<&str> = by("stale").iter().map(|r| cid_of(r)).collect();
    stale.sort();
    assert_eq!(stale, ["dead-0", "dead-1", "dead-2"], "{rows:#?}");
    for r in by("stale") {
        assert_eq!(r["live"], false);
        let missing: Vec<&str> = r["missing"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        assert!(
            missing.contains(&"netns") && missing.contains(&"hostInterface"),
            "{r:#}"
        );
        assert!(
            !missing.contains(&"lease") && !missing.contains(&"portMappings"),
            "{r:#}"
        );
    }
    let untied = by("untied");
    assert_eq!(untied.len(), 1, "{rows:#?}");
    assert_eq!(cid_of(untied[0]), "ghost");
    assert_eq!(kinds(untied[0]), ["lease"]);

    // The table says the same.
    let d = dirs(&node);
    let mut args: Vec<&str> = d.iter().map(String::as_str).collect();
    args.extend(["--grace", "0"]);
    let table = operator(&node, "inspect", &args);
    assert_eq!(table.exit_code, 0, "{table:?}");
    assert!(table.stdout.starts_with("NETWORK"), "{table:?}");
    assert!(table.stdout.contains("missing netns"), "{table:?}");

    // The dry run lists exactly the three and changes nothing.
    let before = NetSnapshot::take(&node.ns);
    let dry = gc(&node, &["--grace", "0"]);
    assert_eq!(dry.exit_code, 1, "{dry:?}");
    let stale_lines: Vec<&str> = dry
        .stdout
        .lines()
        .filter(|l| l.starts_with("stale"))
        .collect();
    assert_eq!(stale_lines.len(), 3, "{dry:?}");
    for cid in ["dead-0", "dead-1", "dead-2"] {
        assert!(stale_lines.iter().any(|l| l.contains(cid)), "{dry:?}");
    }
    assert!(
        dry.stdout
            .contains("untied  opnet ghost eth0 (no cache, no sandbox: kept"),
        "{dry:?}"
    );
    assert!(
        dry.stdout
            .contains("unknown gonet live-3 eth0 (its cache records no netns"),
        "{dry:?}"
    );
    assert!(dry.stdout.contains("would remove lease"), "{dry:?}");
    assert_eq!(
        before.diff(&NetSnapshot::take(&node.ns)),
        Vec::<String>::new()
    );

    // --apply: the node is the live pods' node again, file for file and
    // rule for rule, but for the untied lease, kept.
    let apply = gc(&node, &["--grace", "0", "--apply"]);
    assert_eq!(apply.exit_code, 0, "{apply:?}");
    assert_eq!(
        only_live.diff(&NetSnapshot::take(&node.ns)),
        Vec::<String>::new(),
        "{apply:?}"
    );
    let mut want_state = live_files.0.clone();
    want_state.push("leases/opnet/10.89.0.250".into());
    want_state.sort();
    assert_eq!(files_under(state.path()), want_state, "{apply:?}");
    assert_eq!(
        files_under(&node.shared_cache_dir()),
        live_files.1,
        "{apply:?}"
    );

    // A second run finds nothing; --untied takes the lease.
    let again = gc(&node, &["--grace", "0"]);
    assert_eq!(again.exit_code, 0, "{again:?}");
    assert!(!again.stdout.contains("stale"), "{again:?}");
    let untied = gc(&node, &["--grace", "0", "--apply", "--untied"]);
    assert_eq!(untied.exit_code, 0, "{untied:?}");
    assert!(!ghost.exists(), "{untied:?}");
    assert_eq!(
        only_live.diff(&NetSnapshot::take(&node.ns)),
        Vec::<String>::new()
    );

    // The live pods still answer, and DEL cleanly.
    for ip in &live_ips {
        assert!(traffic::ping_ok(&node.ns, ip), "{ip} after gc --apply");
    }
    for (i, pod) in live.iter().enumerate() {
        let path = pod.path().display().to_string();
        let env = [("CNI_CONTAINERID", format!("live-{i}"))];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let net = if i == 3 { "gonet" } else { "opnet" };
        let out = node.cnitool_with(&bin("cnitool"), &["del", net, &path], &env);
        assert_eq!(out.exit_code, 0, "{out:?}");
    }
}
