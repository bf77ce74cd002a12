//! A real containerd (Debian's 1.6, with runc), started by a test for
//! itself: in the test's node network namespace, in a mount and pid
//! namespace of its own, with its own root, state, socket, CNI conf dir and
//! our plugins under test (or a node dir the test fills, as a DaemonSet's
//! installer does) as its CNI bin dir. It never touches the machine's
//! containerd or root network namespace:
//!
//! - `/run` is a tmpfs of its own (the shims' sockets, runc's state, the
//!   plugins' `/run/cni` and flannel's `/run/flannel/subnet.env`), a shared
//!   mount within that namespace, so a container's `HostToContainer`
//!   mount of `/run/netns` is allowed, as on a node;
//! - `/var/lib/cni` (go-cni's result cache, default IPAM leases) and
//!   `/run/cni` are bind mounts of the test's directories, so the test can
//!   compare them before and after;
//! - the pod namespaces are bind-mounted in containerd's mount namespace
//!   only; [`Containerd::sandbox_netns`] reaches them through
//!   `/proc/<pid>/root`;
//! - killing it (drop, or [`Containerd::kill`]) ends its pid namespace:
//!   every shim and sandbox process with it, and the pod namespaces.
//!
//! The sandbox ("pause") image is built from `busybox-static` and runs
//! `busybox httpd` on port 80, serving [`SANDBOX_PAGE`]: a pod answers on
//! its port as soon as the runtime says it is ready.

use crate::{run_ok, Netns, TempDir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The image reference containerd runs every sandbox from.
pub const SANDBOX_IMAGE: &str = "localhost/cni-rs/sandbox:1";

/// What a sandbox's web server answers on port 80.
pub const SANDBOX_PAGE: &str = "cni-rs sandbox";

/// A running containerd; killed, with everything it started, on drop.
pub struct Containerd {
    dir: TempDir,
    /// `unshare --kill-child`: its child, containerd, is PID 1 of the new
    /// pid namespace.
    child: Option<Child>,
    cgroup_parent: String,
}

impl Containerd {
    /// Starts containerd in `node`'s network namespace with `conf_dir` as
    /// its CNI conf dir (the runtime reloads it when it changes), after
    /// putting each `(path under /run, contents)` of `run_files` into its
    /// private `/run`. Waits (bounded) until its socket answers, then
    /// imports the sandbox image.
    pub fn start(node: &Netns, conf_dir: &Path, run_files: &[(&str, &str)]) -> Containerd {
        Containerd::start_with_bin_dir(node, conf_dir, run_files, &crate::bin_dir())
    }

    /// [`Containerd::start`] with `bin_dir` as its CNI bin dir.
    pub fn start_with_bin_dir(
        node: &Netns,
        conf_dir: &Path,
        run_files: &[(&str, &str)],
        bin_dir: &Path,
    ) -> Containerd {
        let dir = TempDir::new("containerd");
        for sub in ["root", "state", "var-lib-cni", "run-cni", "run-seed"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("create containerd dirs");
        }
        for (rel, contents) in run_files {
            let p = dir.path().join("run-seed").join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, contents).expect("write a /run file");
        }
        let config = dir.write("config.toml", &config_toml(dir.path(), conf_dir, bin_dir));
        let cgroup_parent = format!(
            "/{}",
            dir.path().file_name().expect("name").to_string_lossy()
        );
        // The mount namespace's own /run, then /run/cni and /var/lib/cni
        // from the test's directories.
        // The machine's /run/netns (and each namespace file in it) is
        // detached first: hidden under the tmpfs it would still be the
        // mount containerd finds for a hostPath of /run/netns.
        let script = "set -e; d=$0; umount -l /run/netns 2>/dev/null || true; \
             mount -t tmpfs -o mode=0755 tmpfs /run; mount --make-shared /run; \
             cp -a \"$d/run-seed/.\" /run/; mkdir -p /run/cni /var/lib/cni; \
             mount --bind \"$d/run-cni\" /run/cni; mount --bind \"$d/var-lib-cni\" /var/lib/cni; \
             exec containerd --config \"$1\"";
        let log = std::fs::File::create(dir.path().join("containerd.log")).expect("log file");
        let child = Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"])
            .args(["--propagation", "private", "nsenter"])
            .arg(format!("--net={}", node.path().display()))
            .args(["sh", "-c", script])
            .arg(dir.path())
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start containerd (unshare): {e}"));
        let ctd = Containerd {
            dir,
            child: Some(child),
            cgroup_parent,
        };
        ctd.wait_until_serving();
        ctd.import_sandbox_image();
        ctd
    }

    /// The directory holding the CRI socket as `containerd.sock`, where a
    /// node has `/run/containerd`.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CRI (and containerd API) socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// go-cni's result cache and the default IPAM lease dir
    /// (`/var/lib/cni` for containerd and the plugins it runs).
    pub fn var_lib_cni(&self) -> PathBuf {
        self.dir.path().join("var-lib-cni")
    }

    /// The plugins' `/run/cni` (locks, netfilter ledgers).
    pub fn run_cni(&self) -> PathBuf {
        self.dir.path().join("run-cni")
    }

    /// The cgroup parent to give sandboxes (`PodSpec::cgroup_parent`):
    /// one per containerd, removed on drop.
    pub fn cgroup_parent(&self) -> &str {
        &self.cgroup_parent
    }

    /// containerd's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// The host PID of containerd (PID 1 of its pid namespace).
    pub fn pid(&self) -> u32 {
        let unshare = self.child.as_ref().expect("containerd is running").id();
        let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
            .unwrap_or_default();
        children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("containerd (child of {unshare}) is not running"))
    }

    /// The network namespace of a sandbox, as a path this process can
    /// open, from its verbose `PodSandboxStatus` info (`info` is the map
    /// the CRI returns): the sandbox process's, through containerd's root
    /// and `/proc` (the process is in containerd's pid namespace, and the
    /// namespace's bind mount in its mount namespace only).
    pub fn sandbox_netns(&self, info: &std::collections::HashMap<String, String>) -> PathBuf {
        let raw = info.get("info").expect("verbose status has \"info\"");
        let v: Value = serde_json::from_str(raw).expect("info JSON");
        let pid = v["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("no sandbox pid in {v}"));
        PathBuf::from(format!("/proc/{}/root/proc/{pid}/ns/net", self.pid()))
    }

    /// `program` run inside the network namespace at `netns` (a path of
    /// [`Containerd::sandbox_netns`]).
    pub fn in_netns(netns: &Path, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", netns.display())).arg(program);
        c
    }

    /// Kills containerd and, with its pid namespace, every shim and
    /// sandbox process: a runtime that died (the pod namespaces go with
    /// its mount namespace).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.remove_cgroups();
    }

    fn wait_until_serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.ctr(&["version"]).output().expect("run ctr");
            if out.status.success() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "containerd did not answer on {} within 30 s:\n{}\nctr: {}",
                    self.socket().display(),
                    self.log(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `ctr` against this containerd, in CRI's `k8s.io` namespace.
    pub fn ctr(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ctr");
        c.arg("--address")
            .arg(self.socket())
            .args(["--namespace", "k8s.io"])
            .args(args);
        c
    }

    fn import_sandbox_image(&self) {
        let tar = build_sandbox_image(&self.dir.path().join("image"));
        self.import_image(&tar, &[]);
    }

    /// `ctr -n k8s.io images import [args] TAR`, as an operator imports an
    /// image on a node (`args`: `--base-name localhost/cni-rs`).
    pub fn import_image(&self, tar: &Path, args: &[&str]) {
        let out = self
            .ctr(&["images", "import"])
            .args(args)
            .arg(tar)
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr images import: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    /// Removes this containerd's cgroups (runc leaves the parents, and the
    /// leaves of sandboxes that were running when containerd was killed).
    fn remove_cgroups(&self) {
        remove_cgroups(&self.cgroup_parent, "containerd");
    }
}

/// Removes the cgroup tree `parent` (`/name`) from every hierarchy, after
/// `runtime` was killed with its processes. The killed processes leave
/// their cgroups a moment after the kill: a cgroup is retried until it is
/// empty (bounded).
pub(crate) fn remove_cgroups(parent: &str, runtime: &str) {
    fn remove_tree(dir: &Path) -> bool {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    remove_tree(&e.path());
                }
            }
        }
        std::fs::remove_dir(dir).is_ok() || !dir.exists()
    }
    let rel = parent.trim_start_matches('/');
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|c| c.path().join(rel))
        .filter(|d| d.exists())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dirs.is_empty() && Instant::now() < deadline {
        dirs.retain(|d| !remove_tree(d));
        if !dirs.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if !dirs.is_empty() {
        let msg = format!("cgroups left after {runtime} was killed: {dirs:?}");
        // A second panic while unwinding would abort the test binary.
        if std::thread::panicking() {
            eprintln!("{msg}");
        } else {
            panic!("{msg}");
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// containerd's configuration: everything in `dir`, CRI with runc and the
/// overlayfs snapshotter, `bin` as the CNI bin dir, the snapshotters and
/// tracing this machine has no use for off.
fn config_toml(dir: &Path, conf_dir: &Path, bin: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # These machines' root lacks CAP_SYS_RESOURCE: a sandbox's oom_score_adj
  # of -998 cannot be set; containerd clamps it to its own instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin}"
    conf_dir = "{conf}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
"#,
        bin = bin.display(),
        conf = conf_dir.display(),
    )
}

/// Writes the sandbox image as an OCI image layout tarball under `dir`:
/// one layer holding `/bin/busybox` (Debian's busybox-static) and
/// `/www/index.html`, run as `busybox httpd -f -p 80 -h /www`. Returns the
/// tarball's path.
pub fn build_sandbox_image(dir: &Path) -> PathBuf {
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.is_file(),
        "/bin/busybox is missing: install busybox-static (scripts/test.sh does)"
    );
    let rootfs = dir.join("rootfs");
    let layout = dir.join("layout");
    let blobs = layout.join("blobs/sha256");
    for d in [rootfs.join("bin"), rootfs.join("www"), blobs.clone()] {
        std::fs::create_dir_all(&d).expect("mkdir");
    }
    std::fs::copy(busybox, rootfs.join("bin/busybox")).expect("copy busybox");
    std::fs::write(rootfs.join("www/index.html"), format!("{SANDBOX_PAGE}\n")).expect("write");
    let layer = dir.join("layer.tar");
    run_ok(
        Command::new("tar")
            .args([
                "--sort=name",
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "--mtime=@0",
            ])
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&layer)
            .arg("."),
    );
    let layer = std::fs::read(&layer).expect("read layer");
    let layer_desc = add_blob(&blobs, &layer, "application/vnd.oci.image.layer.v1.tar");
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Entrypoint": ["/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www"] },
        "rootfs": { "type": "layers", "diff_ids": [layer_desc["digest"]] },
    });
    let config_desc = add_blob(
        &blobs,
        config.to_string().as_bytes(),
        "application/vnd.oci.image.config.v1+json",
    );
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
    });
    let mut manifest_desc = add_blob(
        &blobs,
        manifest.to_string().as_bytes(),
        "application/vnd.oci.image.manifest.v1+json",
    );
    manifest_desc["annotations"] = json!({ "io.containerd.image.name": SANDBOX_IMAGE });
    let index = json!({ "schemaVersion": 2, "manifests": [manifest_desc] });
    std::fs::write(layout.join("index.json"), index.to_string()).expect("write index");
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("write oci-layout");
    let tar = dir.join("sandbox-image.tar");
    run_ok(
        Command::new("tar")
            .arg("-C")
            .arg(&layout)
            .arg("-cf")
            .arg(&tar)
            .arg("."),
    );
    tar
}

/// Stores `data` as a blob of the layout; its OCI descriptor.
fn add_blob(blobs: &Path, data: &[u8], media_type: &str) -> Value {
    use sha2::Digest;
    let hex: String = sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(blobs.join(&hex), data).expect("write blob");
    json!({ "mediaType": media_type, "digest": format!("sha256:{hex}"), "size": data.len() })
}
