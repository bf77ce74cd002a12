//! A real firewalld for the firewall plugin's tests, on a private system
//! bus, never the machine's: a mount namespace of its own (inside the
//! node's network namespace) where `/run/dbus` and `/run/firewalld` are
//! fresh tmpfs mounts, a `dbus-daemon` with a temp config listening on
//! `/run/dbus/system_bus_socket` there (the default path, so plugins find
//! it as on a real node), and `firewalld` with a temp copy of
//! `/etc/firewalld`, logging to the console. Commands enter that mount
//! namespace and the node's network namespace with `nsenter`. Everything
//! is killed on drop; the namespaces go with their processes.
//!
//! Every other test sees no bus: [`crate::Netns::command`] points
//! `DBUS_SYSTEM_BUS_ADDRESS` at a path that does not exist ([`NO_BUS`]),
//! so no test ever reaches a firewalld of the machine.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{run_ok, Netns, TempDir};

/// The bus address every test command gets: no bus.
pub const NO_BUS: &str = "unix:path=/nonexistent/cni-rs-tests/system_bus_socket";

/// How long firewalld may take to come up (it is Python; about 1 s here).
const FIREWALLD_DEADLINE: Duration = Duration::from_secs(60);

const BUS_CONFIG: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=/run/dbus/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_destination="*"/>
    <allow receive_type="*"/>
  </policy>
</busconfig>
"#;

/// A private system bus (and, once started, firewalld) for one test.
pub struct PrivateBus {
    dir: TempDir,
    holder: Child,
    dbus: Child,
    firewalld: Option<Child>,
}

fn kill(child: &mut Child) {
    // SAFETY: signalling a child we spawned and have not reaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
}

/// `program` in the mount and network namespaces of process `pid`.
fn enter(pid: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("nsenter");
    c.args(["--target", &pid.to_string(), "--mount", "--net"])
        .arg(program)
        .env_remove("DBUS_SYSTEM_BUS_ADDRESS");
    c
}

impl PrivateBus {
    /// Makes the mount namespace inside `node` and starts the bus; returns
    /// once it listens (dbus-daemon prints its address then).
    pub fn start(node: &Netns) -> PrivateBus {
        let dir = TempDir::new("private-bus");
        let conf = dir.write("bus.conf", BUS_CONFIG);
        // The holder: a shell that makes the mounts, says so, and sleeps;
        // `unshare` execs it, so its pid is the namespace's handle.
        let mut holder = node
            .command("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                "mkdir -p /run/dbus /run/firewalld && mount -t tmpfs tmpfs /run/dbus && \
                 mount -t tmpfs tmpfs /run/firewalld && echo ready && exec sleep infinity",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the mount namespace holder");
        let mut line = String::new();
        BufReader::new(holder.stdout.take().expect("holder stdout"))
            .read_line(&mut line)
            .expect("read holder");
        assert_eq!(line.trim(), "ready", "the mount namespace holder failed");
        let mut dbus = enter(holder.id(), "dbus-daemon")
            .args([
                "--nofork",
                "--nopidfile",
                "--print-address",
                "--config-file",
            ])
            .arg(&conf)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dbus-daemon");
        let mut addr = String::new();
        BufReader::new(dbus.stdout.take().expect("dbus stdout"))
            .read_line(&mut addr)
            .expect("read the bus address");
        assert!(
            addr.contains("/run/dbus/system_bus_socket"),
            "dbus-daemon: {addr:?}"
        );
        PrivateBus {
            dir,
            holder,
            dbus,
            firewalld: None,
        }
    }

    /// A command running `program` in the node's network namespace and
    /// the private mount namespace, with the bus at its default path.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        enter(self.holder.id(), program)
    }

    /// Starts firewalld on this bus (a temp copy of `/etc/firewalld`, log
    /// to the console) and waits until it answers `firewall-cmd --state`.
    pub fn start_firewalld(&mut self) {
        assert!(self.firewalld.is_none(), "firewalld runs already");
        let etc = self.dir.path().join("etc-firewalld");
        run_ok(Command::new("cp").arg("-a").arg("/etc/firewalld").arg(&etc));
        let child = self
            .command("firewalld")
            .args(["--nofork", "--nopid", "--log-target", "console"])
            .arg("--system-config")
            .arg(&etc)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start firewalld (apt-get install firewalld)");
        self.firewalld = Some(child);
        let start = Instant::now();
        loop {
            let out = self
                .command("firewall-cmd")
                .arg("--state")
                .output()
                .expect("firewall-cmd");
            if out.status.success() {
                return;
            }
            if let Some(Ok(Some(status))) = self.firewalld.as_mut().map(Child::try_wait) {
                panic!("firewalld exited: {status}");
            }
            assert!(
                start.elapsed() < FIREWALLD_DEADLINE,
                "firewalld did not come up in {FIREWALLD_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops firewalld (its runtime sources go with it).
    pub fn stop_firewalld(&mut self) {
        if let Some(mut c) = self.firewalld.take() {
            kill(&mut c);
        }
    }

    /// `firewall-cmd --zone=<zone> --list-sources`, sorted.
    pub fn sources(&self, zone: &str) -> Vec<String> {
        let out = run_ok(
            self.command("firewall-cmd")
                .arg(format!("--zone={zone}"))
                .arg("--list-sources"),
        );
        let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        v.sort();
        v
    }

    /// Runs `firewall-cmd <args>` and asserts it succeeded.
    pub fn firewall_cmd(&self, args: &[&str]) -> String {
        let out = run_ok(self.command("firewall-cmd").args(args));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The temp dir of this bus (config, firewalld's copy of /etc).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        self.stop_firewalld();
        kill(&mut self.dbus);
        kill(&mut self.holder);
    }
}
