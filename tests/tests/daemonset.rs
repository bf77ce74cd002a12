//! The cluster install (issue 35): `deploy/cni-rs.yaml` run as kubelet
//! runs a DaemonSet's pod, over CRI, against a real containerd
//! ([`tests::containerd`]) whose CNI bin dir is an empty node dir.
//!
//! The image is written by `scripts/image.sh` (what `scripts/release.sh`
//! ships) from the multicall binary under test, stripped, and imported
//! with `ctr images import --base-name`, as an operator imports it. The
//! pod is a host-network sandbox (no CNI call for it); its init container
//! and its gc container are the manifest's own: image, args (the image's
//! entry point stays), mounts, privilege, with each hostPath volume on a
//! directory of the test's. The init container installs the suite into the
//! node dir; a pod started through it gets its address and its host port;
//! the gc container's passes keep that live pod, and SIGTERM stops it at
//! once with exit status 0.

use cri_client::{ContainerSpec, ContainerState, CriClient, MountSpec, PodSpec, SecuritySpec};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tests::containerd::{Containerd, SANDBOX_PAGE};
use tests::release::{commit_time, host_arch, PLUGIN_VERSION, SUITE_VERSION};
use tests::*;
use yaml_rust2::{Yaml, YamlLoader};

/// The DaemonSet's pod template (`spec.template.spec`), on a node whose
/// address (kubelet's `status.hostIP`) is `host_ip`.
struct Manifest {
    pod: Yaml,
    host_ip: String,
}

fn strings(y: &Yaml) -> Vec<String> {
    y.as_vec()
        .map(|v| {
            v.iter()
                .map(|s| s.as_str().expect("a string").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A container's `securityContext` as kubelet passes it to CRI. A key the
/// test does not carry over fails it, so that none is silently left out.
fn security_of(sc: &Yaml) -> SecuritySpec {
    const KNOWN: [&str; 7] = [
        "privileged",
        "capabilities",
        "allowPrivilegeEscalation",
        "readOnlyRootFilesystem",
        "runAsUser",
        "runAsNonRoot",
        "seccompProfile",
    ];
    if let Some(map) = sc.as_hash() {
        for key in map.keys() {
            let key = key.as_str().unwrap_or("?");
            assert!(
                KNOWN.contains(&key),
                "securityContext.{key}: the test does not pass it on"
            );
        }
    }
    let seccomp = sc["seccompProfile"]["type"].as_str();
    assert!(
        matches!(seccomp, None | Some("RuntimeDefault")),
        "seccompProfile {seccomp:?}: the test passes RuntimeDefault only"
    );
    SecuritySpec {
        privileged: sc["privileged"].as_bool() == Some(true),
        drop_capabilities: strings(&sc["capabilities"]["drop"]),
        add_capabilities: strings(&sc["capabilities"]["add"]),
        no_new_privileges: sc["allowPrivilegeEscalation"].as_bool() == Some(false),
        read_only_root: sc["readOnlyRootFilesystem"].as_bool() == Some(true),
        run_as_user: sc["runAsUser"].as_i64(),
        seccomp_runtime_default: seccomp == Some("RuntimeDefault"),
    }
}

impl Manifest {
    fn read(host_ip: &str) -> Manifest {
        let path = workspace_root().join("deploy/cni-rs.yaml");
        let text = std::fs::read_to_string(&path).expect("read deploy/cni-rs.yaml");
        let docs = YamlLoader::load_from_str(&text).expect("deploy/cni-rs.yaml is YAML");
        assert_eq!(docs.len(), 1, "one document");
        assert_eq!(docs[0]["kind"].as_str(), Some("DaemonSet"));
        Manifest {
            pod: docs[0]["spec"]["template"]["spec"].clone(),
            host_ip: host_ip.to_string(),
        }
    }

    /// `args` with each `$(NAME)` of the container's `env` replaced, as
    /// kubelet does before it calls CRI: a `value`, or the downward API's
    /// `status.hostIP` (the only field the manifest may name).
    fn expand(&self, container: &Yaml, args: Vec<String>) -> Vec<String> {
        let env: Vec<(String, String)> = container["env"]
            .as_vec()
            .into_iter()
            .flatten()
            .map(|e| {
                let name = e["name"].as_str().expect("env name").to_string();
                let value = match (
                    e["value"].as_str(),
                    e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
                ) {
                    (Some(v), None) => v.to_string(),
                    (None, Some("status.hostIP")) => self.host_ip.clone(),
                    other => panic!("env {name}: the test knows no {other:?}"),
                };
                (name, value)
            })
            .collect();
        args.into_iter()
            .map(|arg| {
                env.iter().fold(arg, |a, (name, value)| {
                    a.replace(&format!("$({name})"), value)
                })
            })
            .collect()
    }

    fn host_network(&self) -> bool {
        self.pod["hostNetwork"].as_bool() == Some(true)
    }

    /// The container `name` of `list` (`initContainers`, `containers`) as
    /// kubelet hands it to the runtime: no command means the image's entry
    /// point; each volume mount's hostPath is the directory `host_dirs`
    /// gives for it (every one must be given).
    fn container(
        &self,
        list: &str,
        name: &str,
        host_dirs: &HashMap<&str, PathBuf>,
        log_path: &str,
    ) -> ContainerSpec {
        let c = self.pod[list]
            .as_vec()
            .and_then(|v| v.iter().find(|c| c["name"].as_str() == Some(name)))
            .unwrap_or_else(|| panic!("no {list} {name} in deploy/cni-rs.yaml"));
        let volumes = self.pod["volumes"].as_vec().expect("volumes");
        let mounts = c["volumeMounts"]
            .as_vec()
            .into_iter()
            .flatten()
            .map(|m| {
                let volume = m["name"].as_str().expect("volume name");
                let host_path = volumes
                    .iter()
                    .find(|v| v["name"].as_str() == Some(volume))
                    .and_then(|v| v["hostPath"]["path"].as_str())
                    .unwrap_or_else(|| panic!("volume {volume} is no hostPath"));
                MountSpec {
                    container_path: m["mountPath"].as_str().expect("mountPath").to_string(),
                    host_path: host_dirs
                        .get(host_path)
                        .unwrap_or_else(|| panic!("the test gives no dir for {host_path}"))
                        .clone(),
                    readonly: m["readOnly"].as_bool() == Some(true),
                    host_to_container: m["mountPropagation"].as_str() == Some("HostToContainer"),
                }
            })
            .collect();
        ContainerSpec {
            name: name.to_string(),
            image: c["image"].as_str().expect("image").to_string(),
            command: strings(&c["command"]),
            args: self.expand(c, strings(&c["args"])),
            mounts,
            security: security_of(&c["securityContext"]),
            log_path: log_path.to_string(),
        }
    }
}

/// The image of the binaries under test: their multicall `cni-rs`,
/// stripped as the release's, through `scripts/image.sh` into `dir`.
fn build_image(dir: &Path) -> PathBuf {
    let stage = dir.join("multicall");
    std::fs::create_dir_all(&stage).expect("mkdir");
    run_ok(
        Command::new("objcopy")
            .arg("--strip-all")
            .arg(std::fs::canonicalize(bin("cni-rs")).expect("cni-rs"))
            .arg(stage.join("cni-rs")),
    );
    let list = run_ok(Command::new(stage.join("cni-rs")).arg("--list"));
    for plugin in String::from_utf8_lossy(&list.stdout).split_whitespace() {
        std::os::unix::fs::symlink("cni-rs", stage.join(plugin)).expect("link a plugin");
    }
    let tar = dir.join(format!("cni-rs-image-v{SUITE_VERSION}.tar"));
    let out = run_ok(
        Command::new("bash")
            .arg(workspace_root().join("scripts/image.sh"))
            .arg(&tar)
            .arg(format!("{}={}", host_arch(), stage.display()))
            .env("SOURCE_DATE_EPOCH", commit_time()),
    );
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(digest.starts_with("sha256:"), "image.sh printed {digest:?}");
    tar
}

/// The capability bits of `names` (`NET_ADMIN`), as `/proc/PID/status`
/// prints them.
fn capability_mask(names: &[String]) -> u64 {
    names
        .iter()
        .map(|n| match n.as_str() {
            "NET_ADMIN" => 1 << 12,
            "NET_RAW" => 1 << 13,
            "SYS_ADMIN" => 1 << 21,
            "SYS_PTRACE" => 1 << 19,
            other => panic!("capability {other}: add its bit here"),
        })
        .fold(0, |a, b| a | b)
}

/// `/proc/PID/status` and `/proc/PID/mountinfo` of the running process
/// whose arguments end with `args`: how the runtime really started a
/// container's process (containerd has a pid namespace of its own).
fn process_of(args: &[String]) -> (String, String) {
    let want: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let dir = entry.path();
        let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        if cmdline.ends_with(&want) && cmdline.len() > want.len() {
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let mounts = std::fs::read_to_string(dir.join("mountinfo")).unwrap_or_default();
            return (status, mounts);
        }
    }
    panic!("no process runs {args:?}");
}

/// Asserts that the container `c`'s process runs with `c`'s security
/// context: exactly its added capabilities (none else, in any set that
/// counts), no_new_privs, a seccomp filter, a read-only root, as root.
fn assert_confined(test: &str, c: &ContainerSpec) {
    let (status, mounts) = process_of(&c.args);
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{test}: no {name} in\n{status}"))
            .to_string()
    };
    let mask = format!("{:016x}", capability_mask(&c.security.add_capabilities));
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(field(set), mask, "{test}: {} {set}:\n{status}", c.name);
    }
    assert_eq!(field("NoNewPrivs"), "1", "{test}: {} no_new_privs", c.name);
    assert_eq!(field("Seccomp"), "2", "{test}: {} seccomp filter", c.name);
    assert!(
        field("Uid").split_whitespace().all(|u| u == "0"),
        "{test}: {} runs as root",
        c.name
    );
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap_or_else(|| panic!("{test}: no root mount in\n{mounts}"));
    let options = root.split_whitespace().nth(5).unwrap_or("");
    assert!(
        options.split(',').any(|o| o == "ro"),
        "{test}: {}'s root is read-only: {root}",
        c.name
    );
}

/// `c` without the added capability `cap`, under a name and log of its
/// own: to show what the capability is for.
fn without_capability(c: &ContainerSpec, cap: &str) -> ContainerSpec {
    let mut weaker = c.clone();
    weaker.name = format!(
        "{}-without-{}",
        c.name,
        cap.to_lowercase().replace('_', "-")
    );
    weaker.log_path = format!("{}.log", weaker.name);
    weaker.security.add_capabilities.retain(|a| a != cap);
    weaker
}

/// Waits (bounded by `secs`) until `cond` holds, saying `what` otherwise.
fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_exited(
    cri: &mut CriClient,
    id: &str,
    what: &str,
    secs: u64,
) -> cri_client::ContainerStatus {
    let mut last = None;
    wait_until(secs, what, || {
        let s = cri.container_status(id).expect("ContainerStatus");
        let done = s.state == ContainerState::Exited;
        last = Some(s);
        done
    });
    last.expect("a status")
}

#[test]
fn the_daemonset_installs_the_suite_from_its_image_and_a_pod_starts_through_it() {
    let test = "the DaemonSet under containerd";
    if !require_root(test) || step_skipped("containerd") {
        return;
    }
    let work = TempDir::new("ds-image");
    let image_tar = build_image(work.path());

    let node = forwarding_node("ctd-ds");
    let outside = Peer::attach(&node, "ctd-ds-out", 3);
    let manifest = Manifest::read(&outside.node_v4());
    assert!(
        manifest.host_network(),
        "the DaemonSet's pod is on the node's network"
    );
    let conf = TempDir::new("ctd-ds-conf");
    let opt_cni_bin = TempDir::new("ctd-ds-opt-cni-bin");
    let logs = TempDir::new("ctd-ds-logs");
    let call_logs = TempDir::new("ctd-ds-call-logs");
    let containerd = Containerd::start_with_bin_dir(&node, conf.path(), &[], opt_cni_bin.path());
    // host-local's default dataDir, as the gc and metrics containers find
    // it through their /var/lib/cni.
    let leases = containerd.var_lib_cni().join("networks/k8s-pod-network");
    // As the manifest's header says an operator imports it.
    containerd.import_image(&image_tar, &["--base-name", "localhost/cni-rs"]);
    let mut cri = CriClient::connect(&containerd.socket())
        .unwrap_or_else(|e| panic!("{e}\n{}", containerd.log()));

    // The node's paths of the manifest, as this node has them: the node dir
    // (empty), containerd's conf dir, cache, /run/cni and socket, and the
    // pod namespaces' dir in containerd's mount namespace (where the
    // runtime resolves a hostPath).
    let host_dirs: HashMap<&str, PathBuf> = HashMap::from([
        ("/opt/cni/bin", opt_cni_bin.path().to_path_buf()),
        ("/etc/cni/net.d", conf.path().to_path_buf()),
        ("/var/lib/cni", containerd.var_lib_cni()),
        ("/run/cni", containerd.run_cni()),
        ("/run/netns", PathBuf::from("/run/netns")),
        ("/run/containerd", containerd.socket_dir().to_path_buf()),
        ("/var/log/cni-rs", call_logs.path().to_path_buf()),
    ]);
    let ds_pod = PodSpec {
        name: "cni-rs-node1".into(),
        namespace: "kube-system".into(),
        uid: "uid-cni-rs-node1".into(),
        host_network: true,
        // No container of the manifest is privileged (kubelet would say
        // so of the sandbox too).
        privileged: false,
        log_directory: logs.path().display().to_string(),
        cgroup_parent: containerd.cgroup_parent().to_string(),
        ..PodSpec::default()
    };
    let ds_id = cri
        .run_pod_sandbox(&ds_pod)
        .unwrap_or_else(|e| panic!("{test}: {e}\n{}", containerd.log()));
    assert!(
        tree(&containerd.var_lib_cni().join("results")).is_empty(),
        "{test}: no CNI call for a host-network sandbox"
    );

    // The init container: the suite into the node dir.
    let init = manifest.container(
        "initContainers",
        "install-cni-plugins",
        &host_dirs,
        "install.log",
    );
    assert_eq!(init.image, format!("localhost/cni-rs:{SUITE_VERSION}"));
    assert!(
        init.command.is_empty(),
        "the image's own entry point: {init:?}"
    );
    let init_id = cri
        .create_container(&ds_id, &ds_pod, &init)
        .unwrap_or_else(|e| panic!("{test}: {e}\n{}", containerd.log()));
    cri.start_container(&init_id).expect("StartContainer");
    let status = wait_exited(&mut cri, &init_id, "the init container's exit", 60);
    let install_log = std::fs::read_to_string(logs.path().join("install.log")).unwrap_or_default();
    assert_eq!(
        status.exit_code, 0,
        "{test}: the installer: {status:?}\n{install_log}"
    );
    let list = run_ok(Command::new(bin("cni-rs")).arg("--list"));
    let mut want: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|p| format!("{p} -> cni-rs"))
        .collect();
    want.push("cni-rs".into());
    want.sort();
    assert_eq!(tree(opt_cni_bin.path()), want, "{test}: the node dir");
    assert_eq!(
        std::fs::read(opt_cni_bin.path().join("cni-rs")).expect("read"),
        std::fs::read(work.path().join("multicall/cni-rs")).expect("read"),
        "{test}: the image's binary, installed"
    );

    // A pod through the installed suite.
    let conflist = json!({
        "cniVersion": "1.0.0",
        "name": "k8s-pod-network",
        "plugins": [
            {
                "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.86.0.0/24"}]],
                    "routes": [{"dst": "0.0.0.0/0"}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}
        ]
    });
    conf.write("10-pods.conflist", &conflist.to_string());
    wait_until(30, "NetworkReady", || {
        cri.network_condition().expect("Status").ready
    });
    let web = PodSpec {
        name: "web".into(),
        namespace: "default".into(),
        uid: "uid-web".into(),
        ports: vec![(8086, 80, "tcp", String::new())],
        cgroup_parent: containerd.cgroup_parent().to_string(),
        ..PodSpec::default()
    };
    let web_id = cri
        .run_pod_sandbox(&web)
        .unwrap_or_else(|e| panic!("{test}: {e}\n{}", containerd.log()));
    let status = cri.pod_sandbox_status(&web_id).expect("PodSandboxStatus");
    assert!(status.ready, "{test}: {status:?}");
    assert_eq!(status.ips.len(), 1, "{test}: {status:?}");
    let ip = status.ips[0].clone();
    assert!(ip.starts_with("10.86.0."), "{test}: pod address {ip}");
    assert_eq!(leases_in(&leases), [ip.as_str()]);
    assert_eq!(
        http_get(&outside.ns, &outside.node_v4(), 8086).as_deref(),
        Some(SANDBOX_PAGE),
        "{test}: host port 8086 from another namespace"
    );

    // Pods that died without their DEL (a runtime that crashed, a node
    // rebooted): ADD through our cnitool with the installed suite, on
    // containerd's cache, lease dir and /run/cni, with a host port; then
    // the namespace removed (its veth goes with it) and the files aged
    // past gc's grace period. What stays is the lease, the cache and the
    // host port and masquerade rules.
    let host_port_rules = |port: u16| {
        let out = run_ok(Command::new("ip").args([
            "netns",
            "exec",
            node.name(),
            "nft",
            "list",
            "ruleset",
        ]));
        String::from_utf8_lossy(&out.stdout).contains(&format!("dport {port} "))
    };
    let leak = |id: &str, host_port: u16| -> String {
        let pod_ns = Netns::new(&format!("ctd-ds-{id}"));
        let mut add = Command::new("ip");
        add.args(["netns", "exec", node.name(), "unshare", "-m", "sh", "-c"])
            .arg("mount --bind \"$0\" /run/cni && mount --bind \"$1\" /var/lib/cni && shift && exec \"$@\"")
            .arg(containerd.run_cni())
            .arg(containerd.var_lib_cni())
            .arg(bin("cnitool"))
            .args(["add", "k8s-pod-network"])
            .arg(pod_ns.path())
            .env("NETCONFPATH", conf.path())
            .env("CNI_PATH", opt_cni_bin.path())
            .env("CNI_CONTAINERID", id)
            .env(
                "CAP_ARGS",
                json!({"portMappings": [{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}]})
                    .to_string(),
            )
            .env_remove("CNI_CACHE_DIR");
        let before = leases_in(&leases);
        run_ok(&mut add);
        let lease = leases_in(&leases)
            .into_iter()
            .find(|l| !before.contains(l))
            .unwrap_or_else(|| panic!("{test}: {id}'s lease"));
        assert!(host_port_rules(host_port), "{test}: {id}'s host port");
        run_ok(Command::new("ip").args(["netns", "del", pod_ns.name()]));
        let aged = run_ok(
            Command::new("find")
                .arg(containerd.var_lib_cni())
                .arg(containerd.run_cni())
                .args([
                    "-newer",
                    conf.path().join("10-pods.conflist").to_str().unwrap(),
                ])
                .args(["-exec", "touch", "-h", "-d", "1 hour ago", "{}", "+"]),
        );
        assert!(aged.status.success());
        lease
    };
    let lost_ip = leak("lost-pod", 8087);

    // The metrics container serves the node's metrics on the node's own
    // address (kubelet's hostIP), not on loopback: the live pod and the
    // lost one, their pool, our version; as confined as the manifest says.
    let metrics = manifest.container("containers", "metrics", &host_dirs, "metrics.log");
    assert!(
        metrics.command.is_empty() && !metrics.security.privileged,
        "{metrics:?}"
    );
    let on_node_ip = format!("{}:9585", outside.node_v4());
    assert_eq!(
        metrics.args[..3],
        ["metrics", "--listen", on_node_ip.as_str()]
    );
    let scrape = || {
        http_request(
            &outside.ns,
            &outside.node_v4(),
            9585,
            "GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n",
        )
        .filter(|(status, _)| status == "HTTP/1.1 200 OK")
        .map(|(_, body)| body)
    };
    let run_metrics = |cri: &mut CriClient, spec: &ContainerSpec| -> (String, String) {
        let id = cri
            .create_container(&ds_id, &ds_pod, spec)
            .unwrap_or_else(|e| panic!("{test}: {e}\n{}", containerd.log()));
        cri.start_container(&id).expect("StartContainer");
        wait_until(30, "the metrics container's answer", || scrape().is_some());
        (id, scrape().expect("a scrape"))
    };
    let (metrics_id, body) = run_metrics(&mut cri, &metrics);
    assert_confined(test, &metrics);
    const RANGE: &str = "network=\"k8s-pod-network\",range=\"10.86.0.1-10.86.0.254\"";
    for line in [
        "cni_attachments{network=\"k8s-pod-network\",state=\"live\"} 1",
        "cni_attachments{network=\"k8s-pod-network\",state=\"leaked\"} 1",
        &format!("cni_ipam_pool_addresses{{{RANGE}}} 254.0"),
        &format!("cni_ipam_leaked_addresses{{{RANGE}}} 1"),
        &format!("cni_build_info{{version=\"{PLUGIN_VERSION}\""),
    ] {
        assert!(body.contains(line), "{test}: {line} in\n{body}");
    }
    assert!(
        !body.contains("cni_metrics_read_errors_total"),
        "{test}: {body}"
    );
    cri.stop_container(&metrics_id, 30).expect("StopContainer");
    // Without NET_ADMIN, the node's host port rules cannot be read.
    let weaker = without_capability(&metrics, "NET_ADMIN");
    let (weaker_id, body) = run_metrics(&mut cri, &weaker);
    assert!(
        body.contains("cni_metrics_read_errors_total{source=\"node\"}"),
        "{test}: metrics without NET_ADMIN reads the node whole:\n{body}"
    );
    cri.stop_container(&weaker_id, 30).expect("StopContainer");

    // The gc container, as the manifest says: it collects the lost pod's
    // rules, lease and cache, keeps the live pod, and ends on SIGTERM.
    let gc = manifest.container("containers", "gc", &host_dirs, "gc.log");
    assert!(gc.command.is_empty() && !gc.security.privileged, "{gc:?}");
    assert_eq!(gc.args[..2], ["gc", "--apply"], "{gc:?}");
    let run_gc = |cri: &mut CriClient, spec: &ContainerSpec| -> (String, String) {
        let id = cri
            .create_container(&ds_id, &ds_pod, spec)
            .unwrap_or_else(|e| panic!("{test}: {e}\n{}", containerd.log()));
        cri.start_container(&id).expect("StartContainer");
        let log = || std::fs::read_to_string(logs.path().join(&spec.log_path)).unwrap_or_default();
        wait_until(60, "the gc container's first pass", || {
            log().contains("cni-rs gc: pass done:")
        });
        (id, log())
    };
    let (gc_id, log) = run_gc(&mut cri, &gc);
    assert_confined(test, &gc);
    assert!(
        log.contains("1 dead found, 0 not removed"),
        "{test}: the gc pass:\n{log}"
    );
    assert!(
        !host_port_rules(8087),
        "{test}: the lost pod's host port after gc:\n{log}"
    );
    assert!(
        !leases_in(&leases).contains(&lost_ip),
        "{test}: the lost pod's lease after gc:\n{log}"
    );
    assert!(
        !containerd
            .var_lib_cni()
            .join("results/k8s-pod-network-lost-pod-eth0")
            .exists(),
        "{test}: the lost pod's cache after gc:\n{log}"
    );
    assert_eq!(
        cri.container_status(&gc_id).expect("status").state,
        ContainerState::Running,
        "{test}: gc waits for its next pass:\n{log}"
    );
    assert_eq!(
        http_get(&outside.ns, &outside.node_v4(), 8086).as_deref(),
        Some(SANDBOX_PAGE),
        "{test}: the live pod after gc's pass"
    );
    assert_eq!(leases_in(&leases), [ip.as_str()]);
    let stopped = Instant::now();
    cri.stop_container(&gc_id, 30).expect("StopContainer");
    let status = wait_exited(&mut cri, &gc_id, "gc's stop", 40);
    assert_eq!(
        status.exit_code, 0,
        "{test}: gc ends on SIGTERM, not by the SIGKILL after the grace period: {status:?}"
    );
    assert!(
        stopped.elapsed() < Duration::from_secs(20),
        "{test}: gc took {:?} to stop",
        stopped.elapsed()
    );
    // The capability is what it is there for: without NET_ADMIN, gc's
    // pass cannot remove another lost pod's rules, and says so.
    let second_ip = leak("second-lost-pod", 8088);
    let weaker = without_capability(&gc, "NET_ADMIN");
    assert!(
        weaker.security.add_capabilities.is_empty(),
        "{test}: gc adds NET_ADMIN alone"
    );
    let (weaker_id, log) = run_gc(&mut cri, &weaker);
    cri.stop_container(&weaker_id, 30).expect("StopContainer");
    assert!(
        host_port_rules(8088),
        "{test}: gc without NET_ADMIN took the rules:\n{log}"
    );
    assert!(
        log.contains("1 dead found, 2 not removed") && log.contains("Operation not permitted"),
        "{test}: gc without NET_ADMIN:\n{log}"
    );
    // (Its lease and cache went, its rules stayed: they go with this
    // throwaway node.)
    assert!(!leases_in(&leases).contains(&second_ip), "{test}: {log}");

    // kubelet's teardown, through the installed plugins.
    cri.stop_pod_sandbox(&web_id).expect("StopPodSandbox");
    cri.remove_pod_sandbox(&web_id).expect("RemovePodSandbox");
    assert!(leases_in(&leases).is_empty());
    for id in [&init_id, &gc_id, &metrics_id] {
        cri.remove_container(id).expect("RemoveContainer");
    }
    cri.stop_pod_sandbox(&ds_id).expect("StopPodSandbox");
    cri.remove_pod_sandbox(&ds_id).expect("RemovePodSandbox");
}

/// The checks `checkov` (PyPI) fails on `deploy/`: exactly those that
/// docs/install.md lists with their reason ("What each container may
/// do"), none for privileged containers, privilege escalation, a
/// writable root, seccomp, limits, probes on the server or a mounted token.
#[test]
fn checkov_fails_only_the_documented_checks() {
    let test = "checkov on deploy/";
    let out = Command::new("checkov")
        .arg("-f")
        .arg(workspace_root().join("deploy/cni-rs.yaml"))
        .args([
            "--framework",
            "kubernetes",
            "--skip-download",
            "-o",
            "json",
            "--quiet",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{test}: checkov (scripts/deps.sh installs it): {e}"));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{test}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let report = if report.is_array() {
        &report[0]
    } else {
        &report
    };
    let failed: std::collections::BTreeSet<String> = report["results"]["failed_checks"]
        .as_array()
        .expect("failed_checks")
        .iter()
        .map(|c| c["check_id"].as_str().expect("check_id").to_string())
        .collect();
    let passed = report["summary"]["passed"].as_u64().unwrap_or(0);
    assert!(
        passed >= 50,
        "{test}: only {passed} checks passed: {report}"
    );
    let docs = std::fs::read_to_string(workspace_root().join("docs/install.md")).expect("docs");
    let documented: std::collections::BTreeSet<String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("| `CKV"))
        .filter_map(|l| l.split('`').next())
        .map(|id| format!("CKV{id}"))
        .collect();
    assert_eq!(
        failed, documented,
        "{test}: failed checks against docs/install.md's table"
    );
    // The DaemonSet fails no more than kube-prometheus' node-exporter (11).
    assert!(failed.len() <= 11, "{test}: {failed:?}");
    for forbidden in [
        "CKV_K8S_16", // privileged
        "CKV_K8S_20", // allowPrivilegeEscalation
        "CKV_K8S_22", // read-only root file system
        "CKV_K8S_31", // seccomp
        "CKV_K8S_28", // NET_RAW not dropped
        "CKV_K8S_37", // capabilities not minimized
        "CKV_K8S_10", // CPU requests
        "CKV_K8S_11", // CPU limits
        "CKV_K8S_12", // memory requests
        "CKV_K8S_13", // memory limits
        "CKV_K8S_38", // service account token
    ] {
        assert!(!failed.contains(forbidden), "{test}: {forbidden} fails");
    }
}
