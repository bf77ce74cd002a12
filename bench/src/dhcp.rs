//! The LAN of the dhcp chain: a namespace `cnit-bench-<pid>-node-lan`
//! wired to the node by a veth (`dhcpup0` in the node, the macvlans'
//! master), Debian's dnsmasq serving 10.210.0.0/16 there (`--no-ping`, so
//! it answers at once), and both sides' daemons in the node: ours and the
//! Go reference's, each on its own socket in the run's temp dir. All DHCP
//! traffic stays between the pod and the LAN namespace.
//!
//! The three run detached (started through a shell that exits at once), so
//! they are not children of the bench: its traced runs wait for every
//! child to end.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::namespaces::Namespaces;

/// The node's end of the LAN: the master of the chain's macvlans.
pub const MASTER: &str = "dhcpup0";

pub struct DhcpLan {
    children: Vec<(&'static str, Detached)>,
    pub ours_socket: PathBuf,
    pub reference_socket: PathBuf,
}

/// A process started detached: its pid, killed on drop.
struct Detached(i32);

impl Detached {
    /// Runs `cmd` in the background of a shell that prints its pid and exits.
    fn spawn(cmd: &Command) -> io::Result<Detached> {
        let mut sh = Command::new("sh");
        sh.args(["-c", "\"$@\" </dev/null >/dev/null 2>&1 & echo $!", "sh"])
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        let out = sh.output()?;
        let pid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| io::Error::other(format!("starting {:?}", cmd.get_program())))?;
        Ok(Detached(pid))
    }

    fn id(&self) -> i32 {
        self.0
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        // SAFETY: a signal to a process we started.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Path::new(&format!("/proc/{}", self.0)).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn ip(args: &[&str]) -> io::Result<()> {
    let st = Command::new("ip")
        .args(args)
        .stderr(Stdio::null())
        .status()?;
    if st.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("ip {} failed", args.join(" "))))
    }
}

fn wait_socket(path: &Path, what: &str) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(path).is_err() {
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "{what} did not listen on {}",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

impl DhcpLan {
    /// Makes the LAN, starts dnsmasq and the two daemons (the calling
    /// process is in the node namespace; children inherit it).
    pub fn start(
        ns: &mut Namespaces,
        dir: &Path,
        ours_dir: &Path,
        reference_dir: &Path,
    ) -> io::Result<DhcpLan> {
        let dnsmasq = Path::new("/usr/sbin/dnsmasq");
        if !dnsmasq.is_file() {
            return Err(io::Error::other(
                "dnsmasq is not installed (package dnsmasq-base)",
            ));
        }
        for (side, d) in [("ours", ours_dir), ("reference", reference_dir)] {
            if !d.join("dhcp").is_file() {
                return Err(io::Error::other(format!(
                    "no dhcp binary on the {side} side"
                )));
            }
        }
        ns.add_node("lan")?;
        let lan = format!("{}-lan", ns.node());
        ip(&[
            "link", "add", MASTER, "type", "veth", "peer", "name", "eth0", "netns", &lan,
        ])?;
        ip(&["link", "set", MASTER, "up"])?;
        ip(&["-n", &lan, "link", "set", "eth0", "up"])?;
        ip(&["-n", &lan, "addr", "add", "10.210.0.1/16", "dev", "eth0"])?;
        let mut l = DhcpLan {
            children: Vec::new(),
            ours_socket: dir.join("ours/dhcp.sock"),
            reference_socket: dir.join("reference/dhcp.sock"),
        };
        let log = dir.join("dnsmasq.log");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &lan])
            .arg(dnsmasq)
            .args([
                "--no-daemon",
                "--conf-file=/dev/null",
                "--port=0",
                "--user=root",
                "--interface=eth0",
                "--bind-interfaces",
                "--no-ping",
                "--dhcp-authoritative",
                "--dhcp-range=10.210.0.10,10.210.255.250,255.255.0.0,1h",
                "--dhcp-lease-max=70000",
                "--dhcp-option=option:router,10.210.0.1",
                "--dhcp-option=option:dns-server,10.210.0.53",
            ])
            .arg(format!(
                "--dhcp-leasefile={}",
                dir.join("dnsmasq.leases").display()
            ))
            .arg(format!("--log-facility={}", log.display()));
        l.children.push(("dnsmasq", Detached::spawn(&cmd)?));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("DHCP, IP range")) {
            if Instant::now() > deadline {
                return Err(io::Error::other("dnsmasq did not start"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut ours = Command::new(ours_dir.join("dhcp"));
        ours.arg("daemon")
            .arg("-socketpath")
            .arg(&l.ours_socket)
            .arg("-leasedir")
            .arg(dir.join("ours/leases"));
        l.children
            .push(("our dhcp daemon", Detached::spawn(&ours)?));
        let mut reference = Command::new(reference_dir.join("dhcp"));
        reference
            .arg("daemon")
            .arg("-socketpath")
            .arg(&l.reference_socket);
        l.children
            .push(("the reference's dhcp daemon", Detached::spawn(&reference)?));
        wait_socket(&l.ours_socket, "our dhcp daemon")?;
        wait_socket(&l.reference_socket, "the reference's dhcp daemon")?;
        Ok(l)
    }

    /// The daemons' peak RSS (`VmHWM`, KiB): ours, the reference's.
    pub fn daemon_peaks(&self) -> (Option<u64>, Option<u64>) {
        let hwm = |name: &str| {
            let (_, c) = self.children.iter().find(|(n, _)| *n == name)?;
            let status = std::fs::read_to_string(format!("/proc/{}/status", c.id())).ok()?;
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        };
        (hwm("our dhcp daemon"), hwm("the reference's dhcp daemon"))
    }

    /// The report's line on the daemons' peak RSS.
    pub fn peaks_note(&self) -> String {
        let mib = |k: Option<u64>| {
            k.map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
                .unwrap_or_else(|| "?".into())
        };
        let (o, r) = self.daemon_peaks();
        format!(
            "dhcp daemons' peak RSS over the run: ours {}, the reference's {}",
            mib(o),
            mib(r)
        )
    }
}
