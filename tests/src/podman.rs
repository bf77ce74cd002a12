//! A real podman (Debian's 4.3, with runc and conmon) on its CNI backend,
//! run by a test for itself as a node that can be rebooted: a "boot" is a
//! mount and pid namespace of its own in the test's node network
//! namespace, with
//!
//! - `/run` a tmpfs of its own: podman's run root and tmp dir, the pod
//!   namespaces' bind mounts (`/run/netns/netns-<uuid>`), the plugins'
//!   `/run/cni`;
//! - `/var/lib/cni` (Go libcni's result cache, the plugins' default data
//!   dirs) a bind mount of the test's directory, and podman's root (its
//!   containers' records) a test directory: the disk, which a reboot keeps;
//! - the test's conf dir as podman's `network_config_dir` and our plugins
//!   under test as its `cni_plugin_dirs`.
//!
//! [`Podman::reboot`] kills the boot's pid namespace, every conmon and
//! container with it, so the pod namespaces go and `/run` is empty, as a
//! power cut leaves a node; what is on disk stays. Containers run from a
//! root file system of `busybox-static` (`--rootfs`): no image, no
//! registry.

use crate::{call_plugin_cmd, PluginOutput, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A podman node; its boot and every container are killed on drop.
pub struct Podman {
    dir: TempDir,
    node: PathBuf,
    /// `unshare --kill-child` of the current boot: its child is PID 1 of
    /// the boot's pid namespace.
    boot: Option<Child>,
    cgroup_parent: String,
}

impl Podman {
    /// Boots podman's node in network namespace `node` (a path), with
    /// `conf_dir` holding its CNI networks and `bin_dir` its plugins.
    pub fn boot(node: &Path, conf_dir: &Path, bin_dir: &Path) -> Podman {
        let dir = TempDir::new("podman");
        for sub in ["root", "var-lib-cni", "rootfs/bin"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("podman dirs");
        }
        std::fs::copy("/bin/busybox", dir.path().join("rootfs/bin/busybox"))
            .expect("copy /bin/busybox (busybox-static) into the root file system");
        std::os::unix::fs::symlink("busybox", dir.path().join("rootfs/bin/sh")).expect("sh");
        dir.write(
            "containers.conf",
            &format!(
                "[containers]\ndefault_ulimits = []\n\
                 [network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [{:?}]\n\
                 network_config_dir = {:?}\n\
                 [engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
                 tmp_dir = \"/run/libpod\"\n",
                bin_dir.display().to_string(),
                conf_dir.display().to_string()
            ),
        );
        let cgroup_parent = format!(
            "/{}",
            dir.path().file_name().expect("name").to_string_lossy()
        );
        let mut p = Podman {
            dir,
            node: node.to_path_buf(),
            boot: None,
            cgroup_parent,
        };
        p.start_boot();
        p
    }

    fn start_boot(&mut self) {
        // The machine's /run/netns is detached first, as on a node's own
        // /run: the pods' namespaces are this boot's alone.
        let script = "set -e; umount -l /run/netns 2>/dev/null || true; \
             mount -t tmpfs -o mode=0755 tmpfs /run; mkdir -p /var/lib/cni; \
             mount --bind \"$0/var-lib-cni\" /var/lib/cni; exec sleep infinity";
        let child = Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"])
            .args(["--propagation", "private", "nsenter"])
            .arg(format!("--net={}", self.node.display()))
            .args(["sh", "-c", script])
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("boot podman's node (unshare): {e}"));
        self.boot = Some(child);
        // Booted when PID 1 is `sleep`, its mounts made.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{}/comm", self.pid()))
            .ok()
            .as_deref()
            != Some("sleep\n")
        {
            assert!(Instant::now() < deadline, "podman's node did not boot");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// PID 1 of the current boot, as this process sees it.
    fn pid(&self) -> u32 {
        let unshare = self.boot.as_ref().expect("booted").id();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let children =
                std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
                    .unwrap_or_default();
            if let Some(pid) = children
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
            {
                return pid;
            }
            assert!(
                Instant::now() < deadline,
                "podman's node (child of {unshare}) is gone"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `program args` inside the current boot (its mounts, pid and node
    /// namespaces).
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--target={}", self.pid()))
            .args(["--mount", "--net", "--pid", "--"])
            .arg(program);
        cmd
    }

    /// `podman args` in the current boot.
    pub fn podman(&self, args: &[&str]) -> PluginOutput {
        let mut cmd = self.command(Path::new("podman"));
        cmd.env("CONTAINERS_CONF", self.dir.path().join("containers.conf"))
            .arg("--root")
            .arg(self.dir.path().join("root"))
            .args([
                "--runroot",
                "/run/containers/storage",
                "--storage-driver",
                "vfs",
            ])
            .args(["--cgroup-manager", "cgroupfs"])
            .args(args);
        call_plugin_cmd(cmd, &[], "")
    }

    /// Runs container `name` detached on network `network`, host port
    /// `port` to its port 80, where `busybox httpd` serves `page`; returns
    /// its ID.
    pub fn run_web(&self, name: &str, network: &str, port: u16, page: &str) -> String {
        let www = self.dir.path().join("rootfs/www").join(name);
        std::fs::create_dir_all(&www).expect("www");
        std::fs::write(www.join("index.html"), page).expect("page");
        let home = format!("/www/{name}");
        let rootfs = self.dir.path().join("rootfs").display().to_string();
        let out = self.podman(&[
            "run",
            "-d",
            "--name",
            name,
            "--cgroup-parent",
            &self.cgroup_parent,
            "--network",
            network,
            "-p",
            &format!("{port}:80"),
            "--rootfs",
            &rootfs,
            "/bin/busybox",
            "httpd",
            "-f",
            "-p",
            "80",
            "-h",
            &home,
        ]);
        assert_eq!(out.exit_code, 0, "podman run {name}: {out:?}");
        out.stdout.trim().to_string()
    }

    /// The test's directory that is the node's `/var/lib/cni`.
    pub fn var_lib_cni(&self) -> PathBuf {
        self.dir.path().join("var-lib-cni")
    }

    /// Power off and on: the boot's pid namespace is killed (conmon and
    /// the containers with it, so their network namespaces go, with no
    /// DEL), then a new boot starts with an empty `/run`.
    pub fn reboot(&mut self) {
        self.power_off();
        self.start_boot();
    }

    fn power_off(&mut self) {
        if let Some(mut child) = self.boot.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        if self.boot.is_some() {
            // Removed through podman first: its DELs leave the node clean.
            let _ = self.podman(&["rm", "-f", "-a"]);
        }
        self.power_off();
        crate::containerd::remove_cgroups(&self.cgroup_parent, "podman");
        crate::containerd::remove_cgroups("/libpod_parent", "podman");
    }
}
