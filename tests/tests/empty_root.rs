//! Every binary we ship is static (issue 35): it needs no loader and no
//! library of the node's, as the Go release binaries (`CGO_ENABLED=0`) need
//! none. The binaries under test ([`bin_dir`]: the build, the multicall
//! form's dir, or the release's, as `scripts/test.sh` runs it) are checked
//! as ELF files (no interpreter, no `DT_NEEDED`; `file` and `ldd` agree),
//! then run in a root that holds nothing but them, the
//! state dirs, `/proc`, `/sys` and the netns files: a tmpfs mounted in a
//! mount namespace of the test's own ([`EmptyRoot`]), never the machine's
//! root. There every plugin answers `VERSION`, and our `cnitool` runs a
//! bridge (ipMasq) + host-local + portmap + bandwidth chain (ADD, CHECK,
//! DEL) for a pod that is pinged and reached through its host port.
//!
//! A dynamic build fails here: in the empty root `exec` finds no loader
//! (`No such file or directory`).

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use tests::release::{dynamic_needs, suite_bins, DynamicNeeds};
use tests::*;

/// The root's plugin dir, where the chain's plugins and cnitool are.
const ROOT_BIN_DIR: &str = "/opt/cni/bin";

/// Every binary the tests run from [`bin_dir`] that the release ships:
/// the plugins, the tools, and the multicall `cni-rs`.
fn shipped() -> Vec<String> {
    let mut names = suite_bins();
    names.push("cni-rs".into());
    names
}

#[test]
fn every_shipped_binary_is_static() {
    for name in shipped() {
        let path = bin(&name);
        assert_eq!(
            dynamic_needs(&path),
            DynamicNeeds::NONE,
            "{name} ({}) needs the node's loader or libraries",
            path.display()
        );
        let out = Command::new("file")
            .arg("-L")
            .arg(&path)
            .output()
            .expect("file");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains("static-pie linked") || said.contains("statically linked"),
            "file {name}: {said}"
        );
        // glibc's ldd says so of a static or static-pie binary (and exits 1).
        let out = Command::new("ldd").arg(&path).output().expect("ldd");
        let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("statically linked") || said.contains("not a dynamic executable"),
            "ldd {name}: {said}"
        );
    }
}

/// The crash campaign's hook (`libcni::fault`, read from `CNI_FAULT_POINT`)
/// is in the test builds, where every fault point must be able to kill its
/// plugin, and in no release: `scripts/test.sh` runs this file against the
/// release's binaries with `CNI_TEST_RELEASE=1`. Either way, it is checked.
#[test]
fn the_fault_hook_is_in_test_builds_and_in_no_release() {
    let holds_hook = |name: &str| {
        let bytes = std::fs::read(bin(name)).expect("read binary");
        bytes.windows(15).any(|w| w == b"CNI_FAULT_POINT")
    };
    if std::env::var("CNI_TEST_RELEASE").as_deref() == Ok("1") {
        for name in shipped() {
            assert!(
                !holds_hook(&name),
                "the release's {name} holds the fault hook"
            );
        }
    } else {
        // The plugins the crash campaign kills, and the multicall form.
        for name in ["bridge", "host-local", "portmap", "cni-rs"] {
            assert!(
                holds_hook(name),
                "{name} was built without libcni's fault-points feature: build the \
                 workspace (cargo build --workspace --bins), as scripts/test.sh does"
            );
        }
    }
}

/// The reader is checked on binaries whose answers are known: a dynamic
/// program of the machine, and a static one (busybox-static, which the
/// containerd tests use too).
#[test]
fn the_elf_reader_tells_dynamic_from_static() {
    let sh = std::fs::canonicalize("/bin/sh").expect("/bin/sh");
    let dynamic = dynamic_needs(&sh);
    assert!(
        dynamic.interpreter && dynamic.needed >= 1,
        "{dynamic:?} of {}",
        sh.display()
    );
    assert_eq!(dynamic_needs(Path::new("/bin/busybox")), DynamicNeeds::NONE);
}

/// A root holding nothing but the shipped binaries (in [`ROOT_BIN_DIR`]),
/// the state dirs (`/etc/cni/net.d`, `/var/lib/cni`, `/run/cni`: the
/// test's temp dirs), `/proc`, `/sys` and the netns files (`/run/netns`).
/// Each [`EmptyRoot::command`] builds it anew: a tmpfs mounted in a private
/// mount namespace (`unshare`), entered with `chroot` after the node's
/// network namespace (so `/sys` is the node's). The setup runs the
/// machine's `sh`, `mount` and `chroot`; after `chroot` nothing of the
/// machine's is reachable.
struct EmptyRoot {
    mount_point: TempDir,
    conf: TempDir,
    state: TempDir,
    run: TempDir,
    /// `(name, what)`: a binary's file to bind-mount, or the target of a
    /// link to keep (the multicall form's `bridge -> cni-rs`).
    binaries: Vec<(String, RootEntry)>,
}

enum RootEntry {
    File(PathBuf),
    Link(String),
}

impl EmptyRoot {
    fn new() -> EmptyRoot {
        let binaries = shipped()
            .into_iter()
            .map(|name| {
                let path = bin(&name);
                // A link to a sibling stays a link; anything else is the
                // file it leads to.
                let entry = match std::fs::read_link(&path) {
                    Ok(t) if !t.to_string_lossy().contains('/') => {
                        RootEntry::Link(t.to_string_lossy().into_owned())
                    }
                    _ => RootEntry::File(std::fs::canonicalize(&path).expect("canonicalize")),
                };
                (name, entry)
            })
            .collect();
        EmptyRoot {
            mount_point: TempDir::new("root"),
            conf: TempDir::new("root-conf"),
            state: TempDir::new("root-state"),
            run: TempDir::new("root-run"),
            binaries,
        }
    }

    /// `program` (a path inside the root) run in the root, in `ns`'s
    /// network namespace, with only `env` in its environment.
    fn command(&self, ns: &Netns, program: &str, env: &[(&str, &str)]) -> Command {
        let mut setup = String::from(
            "set -e; r=$CNIT_ROOT; mount -t tmpfs -o mode=0755 tmpfs \"$r\"; \
             mkdir -p \"$r/proc\" \"$r/sys\" \"$r/opt/cni/bin\" \"$r/etc/cni/net.d\" \
             \"$r/var/lib/cni\" \"$r/run/cni\" \"$r/run/netns\"; \
             mount -t proc proc \"$r/proc\"; mount -t sysfs sysfs \"$r/sys\"; \
             mount --rbind /run/netns \"$r/run/netns\"; \
             mount --bind \"$CNIT_CONF\" \"$r/etc/cni/net.d\"; \
             mount --bind \"$CNIT_STATE\" \"$r/var/lib/cni\"; \
             mount --bind \"$CNIT_RUN\" \"$r/run/cni\"; ",
        );
        for (name, entry) in &self.binaries {
            let at = format!("\"$r{ROOT_BIN_DIR}/{name}\"");
            match entry {
                RootEntry::Link(target) => setup += &format!("ln -s '{target}' {at}; "),
                RootEntry::File(file) => {
                    setup += &format!(": > {at}; mount --bind '{}' {at}; ", file.display())
                }
            }
        }
        setup += "unset CNIT_ROOT CNIT_CONF CNIT_STATE CNIT_RUN; exec chroot \"$r\" \"$@\"";
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", ns.path().display()))
            .args(["unshare", "--mount", "--propagation", "private"])
            .args(["/bin/sh", "-c", &setup, "sh", program])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNIT_ROOT", self.mount_point.path())
            .env("CNIT_CONF", self.conf.path())
            .env("CNIT_STATE", self.state.path())
            .env("CNIT_RUN", self.run.path())
            .envs(env.iter().copied());
        c
    }

    /// Runs `program args` in the root (see [`EmptyRoot::command`]) with
    /// `stdin`.
    fn call(
        &self,
        ns: &Netns,
        program: &str,
        args: &[&str],
        env: &[(&str, &str)],
        stdin: &str,
    ) -> PluginOutput {
        let mut cmd = self.command(ns, program, &[]);
        cmd.args(args);
        call_plugin_cmd(cmd, env, stdin)
    }
}

#[test]
fn every_plugin_answers_version_in_an_empty_root() {
    if !require_root("every_plugin_answers_version_in_an_empty_root") {
        return;
    }
    let node = Netns::new("root-version");
    let root = EmptyRoot::new();
    for name in shipped() {
        let program = format!("{ROOT_BIN_DIR}/{name}");
        let out = root.call(&node, &program, &["--version"], &[], "");
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (
                0,
                format!("{name} {}\n", tests::release::PLUGIN_VERSION).as_str()
            ),
            "{name} --version in the empty root: {out:?}"
        );
    }
    let plugins = suite_bins()
        .into_iter()
        .filter(|b| b != "cnitool" && b != "cni-rs-install");
    for name in plugins {
        let program = format!("{ROOT_BIN_DIR}/{name}");
        let out = root.call(&node, &program, &[], &[("CNI_COMMAND", "VERSION")], "");
        assert_eq!(
            out.exit_code, 0,
            "{name} VERSION in the empty root: {out:?}"
        );
        let v = out.json();
        assert_eq!(v["cniVersion"], "1.1.0", "{name}: {v}");
        assert_eq!(
            v["pluginVersion"],
            tests::release::PLUGIN_VERSION,
            "{name}: {v}"
        );
    }
}

/// The chain of the issue: bridge (ipMasq) + host-local + portmap (snat) +
/// bandwidth. The root has no `iptables`, so portmap and the masquerade
/// take nftables, as the Go plugins do on such a node.
fn chain() -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": "rootnet",
        "plugins": [
            {
                "type": "bridge", "bridge": "cni-root0", "isGateway": true, "ipMasq": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.98.0.0/24"}]],
                    "routes": [{"dst": "0.0.0.0/0"}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
}

#[test]
fn a_full_chain_runs_through_cnitool_in_an_empty_root() {
    if !require_root("a_full_chain_runs_through_cnitool_in_an_empty_root") {
        return;
    }
    let node = forwarding_node("root-chain");
    let outside = Peer::attach(&node, "root-out", 61);
    let pod = Netns::new("root-pod");
    let root = EmptyRoot::new();
    std::fs::write(
        root.conf.path().join("10-rootnet.conflist"),
        chain().to_string(),
    )
    .expect("write the conflist");
    let caps = json!({
        "portMappings": [{"hostPort": 8061, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 8_000_000, "ingressBurst": 80_000,
                      "egressRate": 8_000_000, "egressBurst": 80_000}
    })
    .to_string();
    let netns = format!("/run/netns/{}", pod.name());
    let cnitool = format!("{ROOT_BIN_DIR}/cnitool");
    let env = [
        ("NETCONFPATH", "/etc/cni/net.d"),
        ("CNI_PATH", ROOT_BIN_DIR),
        ("CAP_ARGS", caps.as_str()),
    ];
    let cnitool_call =
        |verb: &str, netns: &str| root.call(&node, &cnitool, &[verb, "rootnet", netns], &env, "");
    // A first pod, ADDed and DELed, leaves what stays for the node's
    // life, as with the Go plugins: the bridge, and the nftables tables
    // with their base chains. Every pod after it must leave nothing.
    let first = Netns::new("root-pod0");
    let first_netns = format!("/run/netns/{}", first.name());
    cnitool_call("add", &first_netns).result();
    cnitool_call("del", &first_netns).assert_silent_ok();
    let before = NetSnapshot::take(&node);

    let result = cnitool_call("add", &netns).result();
    let ip = result["ips"][0]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("no address in {result}"))
        .split('/')
        .next()
        .expect("address")
        .to_string();
    assert!(ip.starts_with("10.98.0."), "{result}");
    assert_eq!(
        leases_in(&root.state.path().join("networks/rootnet")),
        [ip.as_str()],
        "host-local's lease, in the root's /var/lib/cni"
    );

    // The pod is reached: a ping from the node, its service through the
    // host port from a namespace outside the node (DNAT, then the
    // masquerade back).
    assert_ping(&node, &ip);
    let _server = echo_server(&pod, "rootpod", 80);
    let answer = ask_ok(&outside.ns, &outside.node_v4(), 8061);
    assert!(answer.starts_with("rootpod "), "{answer}");
    // The rules are nftables rules (the root has no iptables) and the
    // shaping is in place.
    let ruleset = nft_ruleset(&node);
    assert!(ruleset.contains("8061"), "portmap's rule: {ruleset}");
    let qdiscs = node.ip(&["-d", "link", "show"]);
    assert!(qdiscs.contains("ifb"), "bandwidth's IFB: {qdiscs}");

    cnitool_call("check", &netns).assert_silent_ok();
    cnitool_call("del", &netns).assert_silent_ok();
    assert!(leases_in(&root.state.path().join("networks/rootnet")).is_empty());
    assert_eq!(
        before.diff(&NetSnapshot::take(&node)),
        Vec::<String>::new(),
        "what the pod's DEL left"
    );
}
