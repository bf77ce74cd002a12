//! The dhcp IPAM plugin and its daemon against a real DHCP server: Debian's
//! dnsmasq, started by each test in a throwaway "LAN" namespace wired to
//! the test's node namespace (a veth the pods' macvlans sit on, or a
//! bridge the bridge plugin plugs the pods into). The daemon runs in the
//! node namespace with a socket and a lease directory under a temp dir;
//! all DHCP traffic stays between the pods' namespaces and the LAN's.
//!
//! The waits on lease times (T1 of a 2-minute lease is 60 s, its end 120 s,
//! dnsmasq's shortest) all happen in one test, on threads of their own.

use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tests::*;

const NET: &str = "lan";

/// Waits until `cond` holds, at most `limit`; panics naming `what`.
fn wait_long(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out ({limit:?}) waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A child process killed (SIGKILL) and reaped on drop.
struct Proc(Option<Child>);

impl Proc {
    fn pid(&self) -> i32 {
        self.0.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    fn signal(&mut self, sig: i32) {
        if let Some(mut c) = self.0.take() {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(c.id() as i32, sig) };
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// One line of dnsmasq's lease file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServerLease {
    expiry: u64,
    mac: String,
    ip: String,
    hostname: String,
    client_id: String,
}

/// dnsmasq's client-id column for `text` (type 0, then the bytes).
fn client_id_hex(text: &str) -> String {
    std::iter::once(0u8)
        .chain(text.bytes())
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Macvlan,
    Bridge,
}

/// A node namespace, a LAN namespace with dnsmasq on 10.77.0.1/24, and the
/// wiring between them; the daemon is started by each test.
struct Lan {
    node: Node,
    lan: Netns,
    dir: TempDir,
    kind: Kind,
    dnsmasq: Proc,
}

impl Lan {
    /// A LAN whose dnsmasq hands out `range` for `lease`, with `extra`
    /// options (besides the router, DNS servers, domain and search list).
    fn new(tag: &str, kind: Kind, lease: &str, extra: &[&str]) -> Lan {
        let node = Node::new(tag);
        let lan = Netns::new(&format!("lan-{tag}"));
        node.ns.ip(&["link", "set", "lo", "up"]);
        lan.ip(&["link", "set", "lo", "up"]);
        let port = if kind == Kind::Macvlan { "up0" } else { "lanport" };
        node.ns.ip(&[
            "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", lan.name(),
        ]);
        if kind == Kind::Bridge {
            node.ns.ip(&["link", "add", "brlan", "type", "bridge"]);
            node.ns.ip(&["link", "set", "lanport", "master", "brlan"]);
            node.ns.ip(&["link", "set", "brlan", "up"]);
        }
        node.ns.ip(&["link", "set", port, "up"]);
        lan.ip(&["link", "set", "eth0", "up"]);
        lan.ip(&["addr", "add", "10.77.0.1/24", "dev", "eth0"]);
        let mut l = Lan {
            node,
            lan,
            dir: TempDir::new(&format!("dhcp-{tag}")),
            kind,
            dnsmasq: Proc(None),
        };
        l.start_dnsmasq("10.77.0.100,10.77.0.199", lease, extra);
        l
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn socket(&self) -> PathBuf {
        self.path("run/dhcp.sock")
    }

    fn lease_dir(&self) -> PathBuf {
        self.path("leases")
    }

    fn start_dnsmasq(&mut self, range: &str, lease: &str, extra: &[&str]) {
        self.dnsmasq.signal(libc::SIGKILL);
        let leases = self.path("dnsmasq.leases");
        let log = self.path("dnsmasq.log");
        let mut cmd = self.lan.command("dnsmasq");
        cmd.args([
            "--no-daemon",
            "--conf-file=/dev/null",
            "--port=0",
            "--user=root",
            "--interface=eth0",
            "--bind-interfaces",
            "--no-ping",
            "--dhcp-authoritative",
            "--log-dhcp",
        ])
        .arg(format!("--dhcp-range={range},255.255.255.0,{lease}"))
        .args([
            "--dhcp-option=option:router,10.77.0.1",
            "--dhcp-option=option:dns-server,10.77.0.53,10.77.0.54",
            "--dhcp-option=option:domain-name,lan.test",
            "--dhcp-option=option:domain-search,a.lan.test,b.test",
        ])
        .args(extra)
        .arg(format!("--dhcp-leasefile={}", leases.display()))
        .arg(format!("--log-facility={}", log.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        self.dnsmasq = Proc(Some(cmd.spawn().expect("dnsmasq (package dnsmasq-base)")));
        wait_for("dnsmasq to listen", || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("DHCP, IP range"))
        });
    }

    /// dnsmasq's leases.
    fn server_leases(&self) -> Vec<ServerLease> {
        let text = std::fs::read_to_string(self.path("dnsmasq.leases")).unwrap_or_default();
        text.lines()
            .filter(|l| !l.starts_with("duid"))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(f.len(), 5, "dnsmasq lease line {l:?}");
                ServerLease {
                    expiry: f[0].parse().unwrap(),
                    mac: f[1].into(),
                    ip: f[2].into(),
                    hostname: f[3].into(),
                    client_id: f[4].into(),
                }
            })
            .collect()
    }

    fn server_lease_of(&self, ip: &str) -> Option<ServerLease> {
        self.server_leases().into_iter().find(|l| l.ip == ip)
    }

    /// The daemon with `extra` flags; it answers when this returns.
    fn daemon(&self, extra: &[&str]) -> Daemon {
        let log = self.path("daemon.log");
        let mut cmd = self.node.ns.command(bin("dhcp"));
        cmd.arg("daemon")
            .arg("-socketpath")
            .arg(self.socket())
            .arg("-leasedir")
            .arg(self.lease_dir())
            .args(extra);
        Daemon::spawn(cmd, &log, &self.socket())
    }

    /// The daemon started as systemd starts it through cni-dhcp.socket:
    /// the test listens on the socket and passes it as descriptor 3 with
    /// `LISTEN_FDS=1` and `LISTEN_PID` the daemon's.
    fn daemon_activated(&self) -> Daemon {
        let sock = self.socket();
        let _ = std::fs::remove_file(&sock);
        std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
        let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
        let mut cmd = self.node.ns.command("sh");
        cmd.args(["-c", "LISTEN_PID=$$ LISTEN_FDS=1 exec \"$@\"", "sh"])
            .arg(bin("dhcp"))
            .arg("daemon")
            .arg("-leasedir")
            .arg(self.lease_dir())
            // Ignored under activation: the socket is the one passed.
            .arg("-socketpath")
            .arg(self.path("unused.sock"));
        // SAFETY: dup2 and fcntl are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if fd == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0);
                } else if libc::dup2(fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let d = Daemon::spawn(cmd, &self.path("daemon.log"), &sock);
        drop(listener);
        assert!(!self.path("unused.sock").exists(), "-socketpath is not bound under activation");
        d
    }

    /// The conflist, at 1.0.0: the Go libcni of go-cnitool reads no 1.1.0
    /// result.
    fn conf(&self) -> Value {
        self.conf_at("1.0.0")
    }

    fn conf_at(&self, version: &str) -> Value {
        let ipam = json!({"type": "dhcp", "daemonSocketPath": self.socket()});
        let plugin = match self.kind {
            Kind::Macvlan => json!({"type": "macvlan", "master": "up0", "ipam": ipam}),
            Kind::Bridge => json!({"type": "bridge", "bridge": "brlan", "ipam": ipam}),
        };
        json!({"cniVersion": version, "name": NET, "plugins": [plugin]})
    }

    fn write_conf(&self) {
        self.node.write_conf("10-lan.conflist", &self.conf());
    }

    fn cnitool(&self, verb: &str, pod: &Netns) -> PluginOutput {
        self.node.cnitool(verb, NET, pod)
    }

    /// The daemon's log so far.
    fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.path("daemon.log")).unwrap_or_default()
    }

    /// The daemon's lease files.
    fn lease_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.lease_dir())
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    fn lease_file_json(&self) -> Value {
        let files = self.lease_files();
        assert_eq!(files.len(), 1, "{files:?}");
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap()
    }
}

struct Daemon(Proc);

impl Daemon {
    fn spawn(mut cmd: Command, log: &Path, sock: &Path) -> Daemon {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        let d = Daemon(Proc(Some(cmd.spawn().expect("dhcp daemon"))));
        wait_for("the daemon's socket", || {
            std::os::unix::net::UnixStream::connect(sock).is_ok()
        });
        d
    }

    /// SIGKILL: no chance to clean up anything.
    fn kill(mut self) {
        self.0.signal(libc::SIGKILL);
    }

    fn term(mut self) {
        self.0.signal(libc::SIGTERM);
    }
}

/// The single global IPv4 address of `eth0` in `pod`.
fn pod_addr(pod: &Netns) -> String {
    let a = global_addrs(pod, "eth0");
    assert_eq!(a.len(), 1, "{a:?}");
    a[0].clone()
}

fn ip_of(cidr: &str) -> &str {
    cidr.split('/').next().unwrap()
}

/// `dst via` of the pod's IPv4 routes (main table), sorted.
fn pod_routes(pod: &Netns) -> Vec<String> {
    let v = pod.ip_json(&["-4", "route", "show"]);
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| match r["gateway"].as_str() {
            Some(g) => format!("{} via {g}", r["dst"].as_str().unwrap()),
            None => r["dst"].as_str().unwrap().to_string(),
        })
        .collect();
    out.sort();
    out
}

fn in_pool(cidr: &str) -> bool {
    let ip: std::net::Ipv4Addr = ip_of(cidr).parse().unwrap();
    let last = ip.octets()[3];
    cidr.ends_with("/24") && ip.octets()[..3] == [10, 77, 0] && (100..=199).contains(&last)
}

/// What every client's ADD leaves: the address from the pool on the pod's
/// eth0 with the router as default route (plus `routes`), dnsmasq's lease
/// for it under the attachment's client identifier, the daemon's lease
/// file (0600 in a 0700 directory). Returns the address.
fn assert_bound(lan: &Lan, pod: &Netns, cid_suffix: &str, hostname: &str, routes: &[&str]) -> String {
    let addr = pod_addr(pod);
    assert!(in_pool(&addr), "{addr} is not from dnsmasq's pool");
    let mut want: Vec<String> = routes.iter().map(|s| s.to_string()).collect();
    want.push("10.77.0.0/24".into());
    want.sort();
    assert_eq!(pod_routes(pod), want);
    let l = lan.server_lease_of(ip_of(&addr)).expect("dnsmasq's lease");
    let mac = pod.link("eth0").unwrap()["address"].as_str().unwrap().to_string();
    assert_eq!(l.mac, mac);
    assert_eq!(l.hostname, hostname);
    assert!(
        l.client_id.starts_with("00:") && l.client_id.ends_with(&client_id_hex(cid_suffix)[3..]),
        "client id {} is not <container ID>{cid_suffix}",
        l.client_id
    );
    assert!(ping_ok(pod, "10.77.0.1"), "the pod reaches the LAN");
    assert_eq!(mode_of(&lan.lease_dir()), 0o700);
    addr
}

fn assert_released(lan: &Lan, addr: &str) {
    assert_eq!(lan.server_lease_of(ip_of(addr)), None, "dnsmasq still leases {addr}");
}

/// The DNS every LAN hands out.
fn lan_dns() -> Value {
    json!({"nameservers": ["10.77.0.53", "10.77.0.54"], "domain": "lan.test",
           "search": ["a.lan.test", "b.test"]})
}

/// ADD, CHECK, DEL, DEL again through our cnitool, go-cnitool and
/// go-cni-cri, one pod each, on `lan`; `routes` are the pod's routes
/// besides the subnet's, `result_routes` the result's.
fn every_client(lan: &Lan, routes: &[&str], result_routes: Value) {
    let _d = lan.daemon(&[]);
    lan.write_conf();

    // Our cnitool.
    let pod = Netns::new("dhcp-pod-ours");
    let r = lan.cnitool("add", &pod).result();
    let addr = assert_bound(lan, &pod, "/lan/eth0", "*", routes);
    assert_eq!(
        r["ips"],
        json!([{"address": addr, "gateway": "10.77.0.1", "interface": r["ips"][0]["interface"]}])
    );
    assert_eq!(r["routes"], result_routes);
    assert_eq!(r["dns"], lan_dns());
    assert_eq!(r["interfaces"][r["ips"][0]["interface"].as_u64().unwrap() as usize]["name"], "eth0");
    lan.cnitool("check", &pod).assert_silent_ok();
    let file = lan.lease_file_json();
    assert_eq!(file["key"]["network"], NET);
    assert_eq!(file["key"]["ifname"], "eth0");
    assert_eq!(file["netns"], pod.path().to_str().unwrap());
    for f in lan.lease_files() {
        assert_eq!(mode_of(&f), 0o600);
    }
    lan.cnitool("del", &pod).assert_silent_ok();
    assert_released(lan, &addr);
    assert!(lan.lease_files().is_empty(), "{:?}", lan.lease_files());
    assert!(pod.link("eth0").is_none());
    lan.cnitool("del", &pod).assert_silent_ok();

    // go-cnitool (upstream Go libcni).
    if let Some(tool) = go_cnitool() {
        let pod = Netns::new("dhcp-pod-go");
        let netns = pod.path().to_str().unwrap().to_string();
        let out = lan.node.go_cnitool(&tool, &["add", NET, &netns], &[]);
        let r = out.result();
        let addr = assert_bound(lan, &pod, "/lan/eth0", "*", routes);
        assert_eq!(r["ips"][0]["address"], addr);
        assert_eq!(r["routes"], result_routes);
        assert_eq!(r["dns"], lan_dns());
        lan.node
            .go_cnitool(&tool, &["check", NET, &netns], &[])
            .assert_silent_ok();
        lan.node
            .go_cnitool(&tool, &["del", NET, &netns], &[])
            .assert_silent_ok();
        assert_released(lan, &addr);
        assert!(lan.lease_files().is_empty());
        lan.node
            .go_cnitool(&tool, &["del", NET, &netns], &[])
            .assert_silent_ok();
    }

    // go-cni-cri (containerd's CRI path): the pod name is the hostname.
    if let Some(tool) = go_cni_cri() {
        let pod = Netns::new("dhcp-pod-cri");
        let id = "sandbox0123456789";
        let out = lan.node.cri(&tool, "setup", Some(&pod), id, &["-name", "web-0"]);
        let r = out.result();
        let addr = assert_bound(lan, &pod, &format!("{id}/lan/eth0"), "web-0", routes);
        let l = lan.server_lease_of(ip_of(&addr)).unwrap();
        assert_eq!(l.client_id, client_id_hex(&format!("{id}/lan/eth0")));
        assert_eq!(r["interfaces"]["eth0"]["IPConfigs"][0]["IP"], ip_of(&addr), "{r}");
        assert_eq!(r["dns"][1]["nameservers"], lan_dns()["nameservers"], "{r}");
        // (containerd's CRI never CHECKs; go-cni's loopback is 0.3.1, which
        // has no CHECK: our cnitool's CHECK above covers it.)
        lan.node
            .cri(&tool, "remove", Some(&pod), id, &["-name", "web-0"])
            .assert_silent_ok();
        assert_released(lan, &addr);
        assert!(lan.lease_files().is_empty());
        // containerd's teardown after the namespace is gone.
        drop(pod);
        lan.node
            .cri(&tool, "remove", None, id, &["-name", "web-0"])
            .assert_silent_ok();
    }
}

#[test]
fn dhcp_macvlan_through_every_client() {
    if !require_root("dhcp_macvlan_through_every_client") {
        return;
    }
    // A classful static route (option 33) besides the router.
    let lan = Lan::new(
        "mv",
        Kind::Macvlan,
        "1h",
        &["--dhcp-option=option:static-route,172.16.5.0,10.77.0.9"],
    );
    every_client(
        &lan,
        &["172.16.0.0/16 via 10.77.0.9", "default via 10.77.0.1"],
        json!([{"dst": "172.16.0.0/16", "gw": "10.77.0.9"}, {"dst": "0.0.0.0/0", "gw": "10.77.0.1"}]),
    );
}

#[test]
fn dhcp_bridge_through_every_client() {
    if !require_root("dhcp_bridge_through_every_client") {
        return;
    }
    // Classless routes (option 121): the router is then no route (RFC 3442).
    let lan = Lan::new(
        "br",
        Kind::Bridge,
        "1h",
        &["--dhcp-option=option:classless-static-route,192.0.2.0/24,10.77.0.254,0.0.0.0/0,10.77.0.2"],
    );
    every_client(
        &lan,
        &["192.0.2.0/24 via 10.77.0.254", "default via 10.77.0.2"],
        json!([{"dst": "192.0.2.0/24", "gw": "10.77.0.254"}, {"dst": "0.0.0.0/0", "gw": "10.77.0.2"}]),
    );
}
