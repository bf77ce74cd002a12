//! podman's generated network (CNI backend, `podman network create`):
//! bridge + portmap + firewall + tuning at cniVersion 0.4.0, run through
//! our `cnitool` against a pod on a node whose FORWARD policy is DROP, as
//! podman and firewalld hosts often have. Checks traffic to the gateway,
//! out through the node and to a host port, the firewall rules, a sysctl
//! set by tuning, CHECK, and that DEL takes all of it back.

use serde_json::{json, Value};
use tests::*;

const SERVER: &str = r#"
import socket, sys
name, port = sys.argv[1], int(sys.argv[2])
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(('0.0.0.0', port))
t.listen(16)
print('ready', flush=True)
while True:
    c, a = t.accept()
    c.sendall(('%s %s\n' % (name, a[0])).encode())
    c.close()
"#;

const CLIENT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET)
s.settimeout(2)
s.connect((sys.argv[1], int(sys.argv[2])))
print(s.recv(100).decode().strip())
"#;

/// A listener answering "<name> <peer address>", killed on drop.
fn server(ns: &Netns, name: &str, port: u16) -> Listener {
    Listener::start(ns, SERVER, &[name, &port.to_string()])
}

fn connect(ns: &Netns, host: &str, port: u16) -> Option<String> {
    python_client(ns, CLIENT, &[host, &port.to_string()])
}

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
/// test's data dirs (host-local leases, tuning backups) and a sysctl for
/// tuning to set.
fn podman_conflist(leases: &TempDir, backups: &TempDir, ip_masq: bool) -> Value {
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
                    "dataDir": leases.path()
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": ""},
            {
                "type": "tuning",
                "sysctl": {"net.core.somaxconn": "1024"},
                "dataDir": backups.path()
            }
        ]
    })
}

#[test]
fn podman_generated_network_runs_on_the_suite_alone() {
    if !require_root("podman_generated_network_runs_on_the_suite_alone") {
        return;
    }
    // Every plugin of the chain must be ours and built: a missing one is a
    // failure, never a skip.
    for p in [
        "bridge",
        "host-local",
        "portmap",
        "firewall",
        "tuning",
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
    let leases = TempDir::new("podman-leases");
    let backups = TempDir::new("podman-tuning");
    let pod = Netns::new("podman-pod");
    let pod_path = pod.path().to_str().expect("utf8").to_string();
    let cid = cnitool_container_id(&pod_path);

    // An upstream namespace behind the node, which drops forwarding by
    // default; upstream routes the pod subnet back through the node.
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
    run_ok(node.ns.command("iptables").args(["-P", "FORWARD", "DROP"]));

    let somaxconn = "/proc/sys/net/core/somaxconn";
    let original = cat(&pod, somaxconn);
    assert_ne!(original, "1024");

    node.write_conf(
        "87-podman.conflist",
        &podman_conflist(&leases, &backups, true),
    );
    let caps = json!({"portMappings": [
        {"hostPort": 8080, "containerPort": 7070, "protocol": "tcp"}
    ]})
    .to_string();
    let cnitool = bin("cnitool");
    let add = node.cnitool_with(
        &cnitool,
        &["add", "podman", &pod_path],
        &[("CAP_ARGS", &caps)],
    );
    assert_eq!(add.exit_code, 0, "{add:?}");
    let result = add.json();
    assert_eq!(result["cniVersion"], "0.4.0", "{result}");
    assert_eq!(result["ips"][0]["version"], "4", "{result}");
    assert_eq!(result["ips"][0]["address"], "10.88.0.2/16", "{result}");
    assert_eq!(result["ips"][0]["gateway"], "10.88.0.1", "{result}");
    assert_eq!(result["interfaces"][0]["name"], "cni-podman0", "{result}");

    // Traffic to the gateway, out through the node (allowed by firewall,
    // masqueraded by bridge's ipMasq), and to the host port.
    let _gw = server(&node.ns, "node", 7071);
    assert_eq!(
        connect(&pod, "10.88.0.1", 7071).as_deref(),
        Some("node 10.88.0.2")
    );
    let _up = server(&up, "up", 7072);
    assert_eq!(
        connect(&pod, "10.9.0.2", 7072).as_deref(),
        Some("up 10.9.0.1"),
        "forwarded despite the DROP policy, and masqueraded"
    );
    let _pod_srv = server(&pod, "pod", 7070);
    assert_eq!(
        connect(&node.ns, "10.88.0.1", 8080).as_deref(),
        Some("pod 10.88.0.1"),
        "host port 8080 reaches the pod"
    );

    // The firewall's rules, the Go plugin's shapes plus our owner record.
    let rules = filter_rules(&node.ns);
    for want in [
        "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD".to_string(),
        "-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN"
            .to_string(),
        "-A CNI-FORWARD -d 10.88.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
            .to_string(),
        "-A CNI-FORWARD -s 10.88.0.2/32 -j ACCEPT".to_string(),
        format!(
            "-A CNI-FORWARD-OWNERS -s 10.88.0.2/32 -m comment --comment \"name: \\\"podman\\\" id: \\\"{cid}\\\"\""
        ),
    ] {
        assert!(rules.contains(&want), "{want}\nnot in\n{rules:#?}");
    }
    // tuning's sysctl in the pod.
    assert_eq!(cat(&pod, somaxconn), "1024");

    let check = node.cnitool_with(
        &cnitool,
        &["check", "podman", &pod_path],
        &[("CAP_ARGS", &caps)],
    );
    assert_eq!(check.exit_code, 0, "{check:?}");

    let del = node.cnitool_with(
        &cnitool,
        &["del", "podman", &pod_path],
        &[("CAP_ARGS", &caps)],
    );
    assert_eq!(del.exit_code, 0, "{del:?}");
    let rules = filter_rules(&node.ns);
    assert!(!rules.iter().any(|r| r.contains("10.88.0.2")), "{rules:#?}");
    assert_eq!(cat(&pod, somaxconn), original, "tuning restored the sysctl");
    assert!(pod.link("eth0").is_none(), "bridge removed the pod's eth0");
    assert_eq!(
        connect(&pod, "10.9.0.2", 7072),
        None,
        "the pod has no way out after DEL"
    );
    assert_eq!(
        tree(backups.path()),
        Vec::<String>::new(),
        "tuning's backup removed"
    );
}
