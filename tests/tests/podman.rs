//! podman's generated network (CNI backend, `podman network create`):
//! bridge + portmap + firewall + tuning at cniVersion 0.4.0, run through
//! our `cnitool`, upstream Go libcni's `cnitool` and containerd's go-cni
//! against a pod on a node whose forwarding is closed: by a FORWARD policy
//! DROP, as podman hosts often have, or by firewalld's zones (a real
//! firewalld on a private system bus), where the firewall plugin's default
//! backend is firewalld, as on RHEL and Fedora. Checks traffic to the
//! gateway, out through the node and to a host port, the firewall's state,
//! a sysctl set by tuning, CHECK, and that DEL takes all of it back. And a
//! real podman 4.3 on its CNI backend, rebooted with a container running:
//! what the power cut leaves is found and collected by `cni-rs gc`.

use serde_json::{json, Value};
use tests::podman::Podman;
use tests::traffic::http_get;
use tests::*;

fn cat(ns: &Netns, path: &str) -> String {
    let out = run_ok(ns.command("cat").arg(path));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The filter rules (`-A ...`) of the node.
fn filter_rules(node: &Netns) -> Vec<String> {
    let out = run_ok(node.command("iptables-save").args(["-t", "filter"]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("-A "))
        .map(str::to_string)
        .collect()
}

/// cnitool's container ID for a namespace path: `cnitool-` + 20 hex of
/// sha512(path).
fn cnitool_container_id(netns: &str) -> String {
    let out = run_ok(std::process::Command::new("sh").args([
        "-c",
        "printf %s \"$1\" | sha512sum",
        "sh",
        netns,
    ]));
    format!("cnitool-{}", &String::from_utf8_lossy(&out.stdout)[..20])
}

/// What `podman network create` writes with the CNI backend, with the
/// test's data dirs (host-local leases, firewall records, tuning backups)
/// and a sysctl for tuning to set.
fn podman_conflist(dirs: &Dirs, ip_masq: bool) -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": "podman",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni-podman0",
                "isGateway": true,
                "ipMasq": ip_masq,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "ranges": [[{"subnet": "10.88.0.0/16", "gateway": "10.88.0.1"}]],
                    "dataDir": dirs.leases.path()
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": "", "dataDir": dirs.firewall.path()},
            {
                "type": "tuning",
                "sysctl": {"net.core.somaxconn": "1024"},
                "dataDir": dirs.backups.path()
            }
        ]
    })
}

/// The chain's data dirs.
struct Dirs {
    leases: TempDir,
    firewall: TempDir,
    backups: TempDir,
}

/// Who runs the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// Our `cnitool`.
    Ours,
    /// Upstream Go libcni's `cnitool`.
    GoCnitool,
    /// containerd's CRI path (go-cni): loopback first, `-port` as CRI's
    /// capitalised `PortMappings`.
    Cri,
}

/// A pod's chain run by one client, inside `bus`'s namespaces when the
/// node has a (private) system bus.
struct Run<'a> {
    node: &'a Node,
    bus: Option<&'a PrivateBus>,
    client: Client,
    tool: std::path::PathBuf,
    pod: &'a Netns,
}

const CRI_ID: &str = "podman-cri-sandbox";

impl Run<'_> {
    fn verb(&self, verb: &str) -> PluginOutput {
        let pod_path = self.pod.path().to_str().expect("utf8").to_string();
        let caps = json!({"portMappings": [
            {"hostPort": 8080, "containerPort": 7070, "protocol": "tcp"}
        ]})
        .to_string();
        match self.client {
            Client::Ours => self.node.cnitool_in(
                self.bus,
                &self.tool,
                &[verb, "podman", &pod_path],
                &[("CAP_ARGS", &caps)],
            ),
            Client::GoCnitool => self.node.go_cnitool_in(
                self.bus,
                &self.tool,
                &[verb, "podman", &pod_path],
                &[("CAP_ARGS", &caps)],
            ),
            Client::Cri => {
                let cri_verb = match verb {
                    "add" => "setup",
                    "del" => "remove",
                    other => other,
                };
                self.node.cri_in(
                    self.bus,
                    &self.tool,
                    cri_verb,
                    Some(self.pod),
                    CRI_ID,
                    &["-port", "8080:7070/tcp"],
                )
            }
        }
    }

    /// The container ID the client gives the pod.
    fn container_id(&self) -> String {
        let ours = cnitool_container_id(self.pod.path().to_str().expect("utf8"));
        match self.client {
            Client::Cri => CRI_ID.to_string(),
            Client::Ours => ours,
            // Go libcni's cnitool (Debian's build) keeps 6 bytes of the hash.
            Client::GoCnitool => ours[.."cnitool-".len() + 12].to_string(),
        }
    }
}

/// The owner records of the firewall: `<address> <containerID> <backend>`.
fn records(dir: &TempDir) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.path())
        .expect("records dir")
        .flatten()
        .map(|e| {
            let rec: Value =
                serde_json::from_slice(&std::fs::read(e.path()).expect("record")).expect("json");
            format!(
                "{} {} {}",
                e.file_name().to_string_lossy(),
                rec["containerID"].as_str().unwrap_or_default(),
                rec["backend"].as_str().unwrap_or_default()
            )
        })
        .collect();
    v.sort();
    v
}

/// The tools of `client`, or `None` (said loudly; a failure in CI).
fn tool(client: Client) -> Option<std::path::PathBuf> {
    match client {
        Client::Ours => Some(bin("cnitool")),
        Client::GoCnitool => go_cnitool(),
        Client::Cri => go_cni_cri(),
    }
}

/// Runs podman's chain for one pod through `client` on a node whose
/// forwarding is closed: by the FORWARD policy DROP of iptables, or, with
/// firewalld (`with_firewalld`), by its zones (the bridge in `drop`, the
/// uplink in `block`). The firewall plugin's default backend finds
/// iptables there, or firewalld.
fn podman_chain(client: Client, with_firewalld: bool) {
    let Some(tool) = tool(client) else {
        return;
    };
    // Every plugin of the chain must be ours and built: a missing one is a
    // failure, never a skip.
    for p in [
        "bridge",
        "host-local",
        "portmap",
        "firewall",
        "tuning",
        "loopback",
        "cnitool",
    ] {
        assert!(
            bin_dir().join(p).is_file(),
            "podman's conflist needs our `{p}`, which is not built in {}: \
             `cargo build --workspace` (or it does not exist yet)",
            bin_dir().display()
        );
    }
    let node = Node::new("podman");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let dirs = Dirs {
        leases: TempDir::new("podman-leases"),
        firewall: TempDir::new("podman-firewall"),
        backups: TempDir::new("podman-tuning"),
    };
    let pod = Netns::new("podman-pod");

    // An upstream namespace behind the node; upstream routes the pod
    // subnet back through the node.
    let up = Netns::new("podman-up");
    node.ns.ip(&[
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
    node.ns.ip(&["addr", "add", "10.9.0.1/24", "dev", "up0"]);
    node.ns.ip(&["link", "set", "up0", "up"]);
    up.ip(&["addr", "add", "10.9.0.2/24", "dev", "eth0"]);
    up.ip(&["link", "set", "eth0", "up"]);
    up.ip(&["link", "set", "lo", "up"]);
    up.ip(&["route", "add", "10.88.0.0/16", "via", "10.9.0.1"]);
    let mut bus = None;
    if with_firewalld {
        let mut b = PrivateBus::start(&node.ns);
        b.start_firewalld();
        b.firewall_cmd(&["--zone=drop", "--change-interface=cni-podman0"]);
        b.firewall_cmd(&["--zone=block", "--change-interface=up0"]);
        bus = Some(b);
    } else {
        run_ok(node.ns.command("iptables").args(["-P", "FORWARD", "DROP"]));
    }

    let somaxconn = "/proc/sys/net/core/somaxconn";
    let original = cat(&pod, somaxconn);
    assert_ne!(original, "1024");

    node.write_conf("87-podman.conflist", &podman_conflist(&dirs, true));
    let run = Run {
        node: &node,
        bus: bus.as_ref(),
        client,
        tool,
        pod: &pod,
    };
    let cid = run.container_id();
    let add = run.verb("add");
    assert_eq!(add.exit_code, 0, "{client:?}: {add:?}");
    let result = add.json();
    if client == Client::Cri {
        assert_eq!(
            result["interfaces"]["eth0"]["IPConfigs"][0],
            json!({"IP": "10.88.0.2", "Gateway": "10.88.0.1"}),
            "{result}"
        );
    } else {
        assert_eq!(result["cniVersion"], "0.4.0", "{result}");
        assert_eq!(result["ips"][0]["version"], "4", "{result}");
        assert_eq!(result["ips"][0]["address"], "10.88.0.2/16", "{result}");
        assert_eq!(result["ips"][0]["gateway"], "10.88.0.1", "{result}");
        assert_eq!(result["interfaces"][0]["name"], "cni-podman0", "{result}");
    }

    // Traffic to the gateway, out through the node (allowed by firewall,
    // masqueraded by bridge's ipMasq), and to the host port.
    let _gw = echo_server(&node.ns, "node", 7071);
    assert_eq!(
        ask(&pod, "10.88.0.1", 7071).as_deref(),
        Some("node 10.88.0.2")
    );
    let _up = echo_server(&up, "up", 7072);
    assert_eq!(
        ask(&pod, "10.9.0.2", 7072).as_deref(),
        Some("up 10.9.0.1"),
        "{client:?}: forwarded through the closed node, and masqueraded"
    );
    let _pod_srv = echo_server(&pod, "pod", 7070);
    assert_eq!(
        ask(&node.ns, "10.88.0.1", 8080).as_deref(),
        Some("pod 10.88.0.1"),
        "host port 8080 reaches the pod"
    );

    // The firewall's state: the Go plugin's rules, or the zone's sources,
    // and the owner record beside them.
    let rules = filter_rules(&node.ns);
    let ours = [
        "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD",
        "-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN",
        "-A CNI-FORWARD -d 10.88.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "-A CNI-FORWARD -s 10.88.0.2/32 -j ACCEPT",
    ];
    let backend = match &bus {
        Some(b) => {
            assert_eq!(b.sources("trusted"), vec!["10.88.0.2/32"]);
            assert!(
                !rules.iter().any(|r| r.contains("CNI-FORWARD")),
                "{rules:#?}"
            );
            "firewalld"
        }
        None => {
            for want in ours {
                assert!(
                    rules.iter().any(|r| r == want),
                    "{want}\nnot in\n{rules:#?}"
                );
            }
            "iptables"
        }
    };
    assert_eq!(
        records(&dirs.firewall),
        vec![format!("10.88.0.2 {cid} {backend}")]
    );
    // tuning's sysctl in the pod.
    assert_eq!(cat(&pod, somaxconn), "1024");

    let check = run.verb("check");
    if client == Client::Cri {
        // go-cni's own loopback network is 0.3.1, which has no CHECK:
        // libcni refuses before any plugin runs (containerd never checks).
        assert!(
            check
                .stderr
                .contains("configuration version \"0.3.1\" does not support the CHECK command"),
            "{check:?}"
        );
    } else {
        assert_eq!(check.exit_code, 0, "{client:?}: {check:?}");
    }

    let del = run.verb("del");
    assert_eq!(del.exit_code, 0, "{client:?}: {del:?}");
    let rules = filter_rules(&node.ns);
    assert!(!rules.iter().any(|r| r.contains("10.88.0.2")), "{rules:#?}");
    if let Some(b) = &bus {
        assert_eq!(b.sources("trusted"), Vec::<String>::new());
    }
    assert_eq!(records(&dirs.firewall), Vec::<String>::new());
    assert_eq!(cat(&pod, somaxconn), original, "tuning restored the sysctl");
    assert!(pod.link("eth0").is_none(), "bridge removed the pod's eth0");
    assert_eq!(
        ask(&pod, "10.9.0.2", 7072),
        None,
        "the pod has no way out after DEL"
    );
    assert_eq!(
        tree(dirs.backups.path()),
        Vec::<String>::new(),
        "tuning's backup removed"
    );
}

#[test]
fn podman_generated_network_runs_on_the_suite_alone() {
    if !require_root("podman_generated_network_runs_on_the_suite_alone") {
        return;
    }
    podman_chain(Client::Ours, false);
}

#[test]
fn podman_generated_network_through_go_cnitool_and_go_cni() {
    if !require_root("podman_generated_network_through_go_cnitool_and_go_cni") {
        return;
    }
    podman_chain(Client::GoCnitool, false);
    podman_chain(Client::Cri, false);
}

#[test]
fn podman_generated_network_on_a_firewalld_node() {
    if !require_root("podman_generated_network_on_a_firewalld_node") {
        return;
    }
    for client in [Client::Ours, Client::GoCnitool, Client::Cri] {
        podman_chain(client, true);
    }
}

/// The leases of podman's network, by address.
fn leased(dirs: &Dirs) -> Vec<String> {
    leases_in(&dirs.leases.path().join("podman"))
}

/// A real podman 4.3 on its CNI backend (Go libcni 1.1.2 inside: its cache
/// records no netns) with its generated network, rebooted while container
/// `a` runs: `/run` comes back empty, with no DEL, and the leases, cache,
/// rules and records stay. After the boot container `b` runs. `cni-rs gc`
/// finds exactly `a` dead (the namespace its result names is gone), and
/// `gc --apply` removes its lease, host-port, masquerade and firewall
/// rules, cache entry and tuning backup; `b` keeps every piece and answers
/// on its address and its host port; a second `gc` finds nothing.
#[test]
fn podman_reboot_leaves_what_gc_collects() {
    if !require_root("podman_reboot_leaves_what_gc_collects") {
        return;
    }
    let node = Node::new("pmboot");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let dirs = Dirs {
        leases: TempDir::new("pmboot-leases"),
        firewall: TempDir::new("pmboot-firewall"),
        backups: TempDir::new("pmboot-tuning"),
    };
    node.write_conf("87-podman.conflist", &podman_conflist(&dirs, true));
    let mut podman = Podman::boot(&node.ns.path(), node.conf_dir.path(), &bin_dir());
    let gc = |podman: &Podman, extra: &[&str]| -> PluginOutput {
        let mut cmd = podman.command(&bin("cni-rs"));
        cmd.args(["gc", "--cri-socket", "none", "--grace", "0"])
            .arg("--cache-dir")
            .arg(podman.var_lib_cni())
            .arg("--conf-dir")
            .arg(node.conf_dir.path())
            .arg("--bin-dir")
            .arg(bin_dir())
            .args(extra);
        call_plugin_cmd(cmd, &[], "")
    };
    let results = |podman: &Podman| tree(&podman_results(podman));

    let a = podman.run_web("a", "podman", 8080, "container a");
    assert_eq!(leased(&dirs), ["10.88.0.2"]);
    let cache = podman_results(&podman).join(format!("podman-{a}-eth0"));
    let entry: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    assert!(entry.get("netns").is_none(), "{entry:#}");
    let sandbox = entry["result"]["interfaces"][2]["sandbox"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(sandbox.starts_with("/run/netns/netns-"), "{entry:#}");
    let out = gc(&podman, &[]);
    assert_eq!(out.exit_code, 0, "a runs: nothing to collect: {out:?}");

    podman.reboot();
    let b = podman.run_web("b", "podman", 8081, "container b");
    // Nothing of `a` was deleted by the power cut or by podman's refresh.
    assert_eq!(leased(&dirs), ["10.88.0.2", "10.88.0.3"]);
    assert_eq!(records(&dirs.firewall).len(), 2);
    let before = filter_rules(&node.ns);
    assert!(
        before.iter().any(|r| r.contains("10.88.0.2/32")),
        "{before:#?}"
    );

    let dry = gc(&podman, &[]);
    assert_eq!(dry.exit_code, 1, "{dry:?}");
    let listed: Vec<&str> = dry
        .stdout
        .lines()
        .filter(|l| !l.starts_with("  "))
        .collect();
    assert_eq!(
        listed,
        [format!(
            "stale   podman {a} eth0 (netns {sandbox} (from the result) does not exist)"
        )],
        "{dry:?}"
    );

    let out = gc(&podman, &["--apply"]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(leased(&dirs), ["10.88.0.3"], "{out:?}");
    assert_eq!(results(&podman), [format!("podman-{b}-eth0")], "{out:?}");
    assert_eq!(
        records(&dirs.firewall),
        [format!("10.88.0.3 {b} iptables")],
        "{out:?}"
    );
    assert_eq!(tree(dirs.backups.path()), [format!("{b}_eth0.json")]);
    let nat = String::from_utf8_lossy(
        &run_ok(node.ns.command("iptables-save").args(["-t", "nat"])).stdout,
    )
    .to_string();
    assert!(!nat.contains("10.88.0.2"), "{nat}");
    assert!(!nat.contains("--dport 8080"), "{nat}");
    assert!(nat.contains("--dport 8081"), "{nat}");
    let filter = filter_rules(&node.ns);
    assert!(
        !filter.iter().any(|r| r.contains("10.88.0.2/32")),
        "{filter:#?}"
    );
    assert!(
        filter.iter().any(|r| r.contains("10.88.0.3/32")),
        "{filter:#?}"
    );

    // b answers, on its address and through its host port.
    assert_eq!(
        http_get(&node.ns, "10.88.0.3", 80).as_deref(),
        Some("container b")
    );
    assert_eq!(
        http_get(&node.ns, "10.88.0.1", 8081).as_deref(),
        Some("container b")
    );
    let again = gc(&podman, &[]);
    assert_eq!(again.exit_code, 0, "{again:?}");
    assert_eq!(again.stdout, "", "{again:?}");

    // podman's own removal of both: b's DEL leaves the node clean.
    let out = podman.podman(&["rm", "-f", "a", "b"]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(leased(&dirs), Vec::<String>::new());
    assert_eq!(results(&podman), Vec::<String>::new());
}

fn podman_results(podman: &Podman) -> std::path::PathBuf {
    podman.var_lib_cni().join("results")
}
