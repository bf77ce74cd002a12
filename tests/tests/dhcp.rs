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
        assert!(
            Instant::now() < deadline,
            "timed out ({limit:?}) waiting for {what}"
        );
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
        let port = if kind == Kind::Macvlan {
            "up0"
        } else {
            "lanport"
        };
        node.ns.ip(&[
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            lan.name(),
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

    /// dnsmasq's lease of `ip`, once it wrote it (it writes its file after
    /// it answered).
    fn server_lease_written(&self, ip: &str) -> ServerLease {
        wait_for(&format!("dnsmasq's lease of {ip}"), || {
            self.server_lease_of(ip).is_some()
        });
        self.server_lease_of(ip).unwrap()
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
        assert!(
            !self.path("unused.sock").exists(),
            "-socketpath is not bound under activation"
        );
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
fn assert_bound(
    lan: &Lan,
    pod: &Netns,
    cid_suffix: &str,
    hostname: &str,
    routes: &[&str],
) -> String {
    let addr = pod_addr(pod);
    assert!(in_pool(&addr), "{addr} is not from dnsmasq's pool");
    let mut want: Vec<String> = routes.iter().map(|s| s.to_string()).collect();
    want.push("10.77.0.0/24".into());
    want.sort();
    assert_eq!(pod_routes(pod), want);
    let l = lan.server_lease_written(ip_of(&addr));
    let mac = pod.link("eth0").unwrap()["address"]
        .as_str()
        .unwrap()
        .to_string();
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

/// dnsmasq drops the lease of `addr` (it handles the RELEASE after the
/// DEL returned). dnsmasq finds the lease a DHCPRELEASE names by its client
/// address (`ciaddr`): upstream's daemon sends it since v1.10 (#1279), ours
/// always has, and this is the proof.
fn assert_released(lan: &Lan, addr: &str) {
    wait_for(&format!("dnsmasq to drop its lease of {addr}"), || {
        lan.server_lease_of(ip_of(addr)).is_none()
    });
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
    assert_eq!(
        r["interfaces"][r["ips"][0]["interface"].as_u64().unwrap() as usize]["name"],
        "eth0"
    );
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
        let out = lan
            .node
            .cri(&tool, "setup", Some(&pod), id, &["-name", "web-0"]);
        let r = out.result();
        let addr = assert_bound(lan, &pod, &format!("{id}/lan/eth0"), "web-0", routes);
        let l = lan.server_lease_of(ip_of(&addr)).unwrap();
        assert_eq!(l.client_id, client_id_hex(&format!("{id}/lan/eth0")));
        assert_eq!(
            r["interfaces"]["eth0"]["IPConfigs"][0]["IP"],
            ip_of(&addr),
            "{r}"
        );
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

/// The container ID [`ours`] gives `pod`.
fn cid_of(pod: &Netns) -> String {
    format!("ctr-{}", pod.name())
}

/// Our cnitool: `verb` of `pod` on `lan` (conflist at 1.1.0), container
/// ID [`cid_of`].
fn ours(lan: &Lan, verb: &str, pod: &Netns) -> PluginOutput {
    lan.node
        .write_conf("10-lan.conflist", &lan.conf_at("1.1.0"));
    let cid = cid_of(pod);
    let netns = pod.path().to_str().unwrap().to_string();
    lan.node.cnitool_with(
        &bin("cnitool"),
        &[verb, NET, &netns],
        &[("CNI_CONTAINERID", &cid)],
    )
}

/// [`ours`] ADD; the address.
fn add_ours(lan: &Lan, pod: &Netns) -> String {
    ours(lan, "add", pod).result();
    pod_addr(pod)
}

/// The dhcp plugin itself (as the main plugin delegates to it): `verb`
/// for `pod`'s eth0, with `extra` keys on the config.
fn ipam(lan: &Lan, verb: &str, pod: &Netns, extra: Value) -> PluginOutput {
    let mut conf = json!({"cniVersion": "1.1.0", "name": NET, "type": "macvlan",
        "ipam": {"type": "dhcp", "daemonSocketPath": lan.socket()}});
    merge(&mut conf, extra);
    let cid = cid_of(pod);
    let netns = pod.path().to_str().unwrap().to_string();
    call_plugin(
        Some(&lan.node.ns),
        &bin("dhcp"),
        &[
            ("CNI_COMMAND", verb),
            ("CNI_CONTAINERID", &cid),
            ("CNI_NETNS", &netns),
            ("CNI_IFNAME", "eth0"),
        ],
        &conf.to_string(),
    )
}

/// With a 2-minute lease (T1 60 s, T2 105 s): one pod's lease is renewed
/// at T1 and it keeps its address; for another the server dies after
/// ADD: renewal (unicast) from T1, rebinding (broadcast) from T2, and at
/// the lease's end the address comes off the interface. Both on their own
/// threads, so the whole waits about as long as one lease.
#[test]
fn dhcp_lease_renewed_at_t1_and_runs_out_without_a_server() {
    if !require_root("dhcp_lease_renewed_at_t1_and_runs_out_without_a_server") {
        return;
    }
    let renewed = std::thread::spawn(|| {
        let lan = Lan::new("t1", Kind::Macvlan, "2m", &[]);
        let _d = lan.daemon(&[]);
        let pod = Netns::new("dhcp-pod-t1");
        let addr = add_ours(&lan, &pod);
        let first = lan.server_lease_written(ip_of(&addr));
        let bound_at = lan.lease_file_json()["boundAt"].as_u64().unwrap();
        wait_long(
            "dnsmasq to see the renewal at T1",
            Duration::from_secs(100),
            || {
                lan.server_lease_of(ip_of(&addr))
                    .is_some_and(|l| l.expiry > first.expiry)
            },
        );
        let log = lan.daemon_log();
        let t1 = log.find("T1: renewing").expect(&log);
        assert!(log[t1..].contains(&format!("renewed {addr}")), "{log}");
        assert_eq!(pod_addr(&pod), addr, "the pod keeps its address after T1");
        assert!(lan.lease_file_json()["boundAt"].as_u64().unwrap() >= bound_at + 55_000);
        assert!(ping_ok(&pod, "10.77.0.1"));
        ours(&lan, "check", &pod).assert_silent_ok();
        ours(&lan, "del", &pod).assert_silent_ok();
        assert_released(&lan, &addr);
    });
    let ran_out = std::thread::spawn(|| {
        let mut lan = Lan::new("exp", Kind::Macvlan, "2m", &[]);
        let _d = lan.daemon(&[]);
        let pod = Netns::new("dhcp-pod-exp");
        let started = Instant::now();
        let addr = add_ours(&lan, &pod);
        lan.dnsmasq.signal(libc::SIGKILL); // the server stops answering
        wait_long(
            "the address to come off at the lease's end",
            Duration::from_secs(150),
            || global_addrs(&pod, "eth0").is_empty(),
        );
        assert!(
            started.elapsed() >= Duration::from_secs(115),
            "not before the lease's end"
        );
        let log = lan.daemon_log();
        let steps = [
            "T1: renewing".to_string(),
            "T2: no answer to the renewal, rebinding".to_string(),
            format!("the lease ran out: {addr} taken off \"eth0\""),
        ];
        let mut at = 0;
        for s in &steps {
            at += log[at..]
                .find(s.as_str())
                .unwrap_or_else(|| panic!("{s:?} not in order in {log}"));
        }
        // Cleanly: no routes through it, no lease file, the link still up,
        // CHECK says why, DEL succeeds.
        assert_eq!(pod_routes(&pod), Vec::<String>::new());
        assert!(pod.link_is_up("eth0"));
        assert!(lan.lease_files().is_empty(), "{:?}", lan.lease_files());
        ipam(&lan, "CHECK", &pod, json!({})).assert_error(102, "expired");
        ours(&lan, "del", &pod).assert_silent_ok();
        ours(&lan, "del", &pod).assert_silent_ok();
    });
    let a = renewed.join();
    let b = ran_out.join();
    if let Err(e) = a.and(b) {
        std::panic::resume_unwind(e);
    }
}

/// The daemon is SIGKILLed and started again (by socket activation, as
/// systemd starts it): it takes the lease up from disk and renews it at
/// once; the pod keeps its address, and DEL still releases it.
#[test]
fn dhcp_daemon_restart_keeps_and_renews_the_lease() {
    if !require_root("dhcp_daemon_restart_keeps_and_renews_the_lease") {
        return;
    }
    let lan = Lan::new("restart", Kind::Macvlan, "1h", &[]);
    let d = lan.daemon(&[]);
    let pod = Netns::new("dhcp-pod-restart");
    let addr = add_ours(&lan, &pod);
    let first = lan.server_lease_written(ip_of(&addr));
    let file = lan.lease_file_json();
    // dnsmasq's expiry has a one-second grain.
    std::thread::sleep(Duration::from_millis(1100));
    d.kill();
    assert_eq!(
        lan.lease_file_json(),
        file,
        "the lease survives a killed daemon"
    );
    let _d = lan.daemon_activated();
    wait_long(
        "the restarted daemon to renew",
        Duration::from_secs(20),
        || {
            lan.server_lease_of(ip_of(&addr))
                .is_some_and(|l| l.expiry > first.expiry)
        },
    );
    let log = lan.daemon_log();
    assert!(
        log.contains("listening on the socket systemd passed"),
        "{log}"
    );
    assert!(
        log.contains(&format!("taking up {addr} from disk")),
        "{log}"
    );
    assert!(log.contains(&format!("renewed {addr}")), "{log}");
    assert_eq!(pod_addr(&pod), addr);
    assert_eq!(
        lan.server_lease_of(ip_of(&addr)).unwrap().client_id,
        first.client_id
    );
    ours(&lan, "check", &pod).assert_silent_ok();
    ours(&lan, "del", &pod).assert_silent_ok();
    assert_released(&lan, &addr);
    assert!(lan.lease_files().is_empty());
}

/// A server that NAKs the renewal (its range changed while the daemon was
/// down): the address comes off at once and the lease ends (RFC 2131
/// §4.4.5).
#[test]
fn dhcp_nak_on_renewal_takes_the_address_off() {
    if !require_root("dhcp_nak_on_renewal_takes_the_address_off") {
        return;
    }
    let mut lan = Lan::new("nak", Kind::Macvlan, "1h", &[]);
    let d = lan.daemon(&[]);
    let pod = Netns::new("dhcp-pod-nak");
    let addr = add_ours(&lan, &pod);
    d.kill();
    let _ = std::fs::remove_file(lan.path("dnsmasq.leases"));
    lan.start_dnsmasq("10.77.0.200,10.77.0.250", "1h", &[]);
    let _d = lan.daemon(&[]);
    wait_for("the NAK to take the address off", || {
        global_addrs(&pod, "eth0").is_empty()
    });
    let log = lan.daemon_log();
    assert!(
        log.contains("DHCPNAK") && log.contains(&format!("{addr} taken off")),
        "{log}"
    );
    assert!(lan.lease_files().is_empty());
    ipam(&lan, "CHECK", &pod, json!({})).assert_error(102, "DHCPNAK");
    ours(&lan, "del", &pod).assert_silent_ok();
    // A new ADD gets an address of the new range.
    let pod2 = Netns::new("dhcp-pod-nak2");
    let addr2 = add_ours(&lan, &pod2);
    assert!(
        ip_of(&addr2)
            .rsplit('.')
            .next()
            .unwrap()
            .parse::<u8>()
            .unwrap()
            >= 200,
        "{addr2}"
    );
    ours(&lan, "del", &pod2).assert_silent_ok();
}

/// 64 pods acquiring at once get 64 distinct addresses, and the daemon
/// answers STATUS while they do; 64 DELs at once release them all.
#[test]
fn dhcp_64_pods_at_once() {
    if !require_root("dhcp_64_pods_at_once") {
        return;
    }
    let lan = Lan::new("64", Kind::Macvlan, "1h", &[]);
    let _d = lan.daemon(&[]);
    lan.node
        .write_conf("10-lan.conflist", &lan.conf_at("1.1.0"));
    let pods: Vec<Netns> = (0..64)
        .map(|i| Netns::new(&format!("dhcp-64-{i}")))
        .collect();
    let lan = &lan;
    let results: Vec<PluginOutput> = std::thread::scope(|s| {
        let adds: Vec<_> = pods
            .iter()
            .map(|p| s.spawn(move || lan.cnitool("add", p)))
            .collect();
        let status = lan
            .node
            .cnitool_with(&bin("cnitool"), &["status", NET], &[]);
        status.assert_silent_ok();
        adds.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut addrs: Vec<String> = results
        .iter()
        .map(|r| {
            r.result()["ips"][0]["address"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for (p, a) in pods.iter().zip(&addrs) {
        assert_eq!(&pod_addr(p), a);
        assert!(in_pool(a), "{a}");
    }
    addrs.sort();
    addrs.dedup();
    assert_eq!(addrs.len(), 64, "distinct addresses");
    wait_for("dnsmasq to write 64 leases", || {
        lan.server_leases().len() == 64
    });
    assert_eq!(lan.lease_files().len(), 64);
    std::thread::scope(|s| {
        for p in &pods {
            s.spawn(move || lan.cnitool("del", p).assert_silent_ok());
        }
    });
    // The server handles the RELEASEs after the DELs returned.
    wait_for("dnsmasq to drop every released lease", || {
        lan.server_leases().is_empty()
    });
    assert!(lan.lease_files().is_empty());
}

/// STATUS, GC and CHECK: GC releases the leases of attachments not in the
/// valid list; CHECK finds a lease whose address was taken off; STATUS
/// fails with code 50 naming the socket when the daemon is gone, and DEL
/// then still succeeds.
#[test]
fn dhcp_status_gc_and_check() {
    if !require_root("dhcp_status_gc_and_check") {
        return;
    }
    let lan = Lan::new("gc", Kind::Macvlan, "1h", &[]);
    let d = lan.daemon(&[]);
    let keep = Netns::new("dhcp-pod-keep");
    let stale = Netns::new("dhcp-pod-stale");
    let kept = add_ours(&lan, &keep);
    let gone = add_ours(&lan, &stale);
    lan.node
        .cnitool_with(&bin("cnitool"), &["status", NET], &[])
        .assert_silent_ok();
    // GC keeping only `keep`: the stale lease is released.
    let valid =
        json!({"cni.dev/valid-attachments": [{"containerID": cid_of(&keep), "ifname": "eth0"}]});
    ipam(&lan, "GC", &keep, valid).assert_silent_ok();
    assert_released(&lan, &gone);
    lan.server_lease_written(ip_of(&kept));
    assert_eq!(lan.lease_files().len(), 1);
    assert!(lan
        .daemon_log()
        .contains("collected (not a valid attachment)"));
    // GC without a list collects nothing.
    ipam(&lan, "GC", &keep, json!({})).assert_silent_ok();
    assert_eq!(lan.lease_files().len(), 1);
    // CHECK: the address must be on the interface.
    ours(&lan, "check", &keep).assert_silent_ok();
    keep.ip(&["addr", "del", &kept, "dev", "eth0"]);
    ipam(&lan, "CHECK", &keep, json!({})).assert_error(102, &format!("address {kept} not found"));
    // CHECK of an attachment the daemon holds nothing for.
    ipam(&lan, "CHECK", &stale, json!({})).assert_error(102, "holds no lease");
    d.kill();
    let sock = lan.socket().display().to_string();
    let out = lan
        .node
        .cnitool_with(&bin("cnitool"), &["status", NET], &[]);
    assert_ne!(out.exit_code, 0);
    assert!(
        out.stderr.contains("code 50") || out.stderr.contains(&sock),
        "{out:?}"
    );
    let direct = call_plugin(
        Some(&lan.node.ns),
        &bin("dhcp"),
        &[("CNI_COMMAND", "STATUS")],
        &json!({"cniVersion": "1.1.0", "name": NET, "type": "dhcp",
                "ipam": {"type": "dhcp", "daemonSocketPath": sock}})
        .to_string(),
    );
    direct.assert_error(50, &sock);
    direct.assert_error(50, "dhcp daemon");
    // DEL without a daemon: nothing to release, success.
    ours(&lan, "del", &keep).assert_silent_ok();
    ours(&lan, "del", &stale).assert_silent_ok();
}

/// The daemon's files: the socket directory 0700 and the socket 0600, the
/// pidfile; SIGTERM removes the socket and the pidfile but keeps the
/// leases (on disk and at the server: a restart renews them); a second
/// daemon on a live socket refuses to start.
#[test]
fn dhcp_daemon_files_and_signals() {
    if !require_root("dhcp_daemon_files_and_signals") {
        return;
    }
    let lan = Lan::new("files", Kind::Macvlan, "1h", &[]);
    let pidfile = lan.path("dhcp.pid");
    let d = lan.daemon(&["-pidfile", pidfile.to_str().unwrap()]);
    assert_eq!(mode_of(&lan.path("run")), 0o700);
    assert_eq!(mode_of(&lan.socket()) & 0o777, 0o600);
    wait_for("the pidfile", || pidfile.exists());
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        pid,
        d.0.pid(),
        "ip netns exec runs the daemon in its own process"
    );
    let again = lan
        .node
        .ns
        .command(bin("dhcp"))
        .args(["daemon", "-socketpath"])
        .arg(lan.socket())
        .arg("-leasedir")
        .arg(lan.path("other"))
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("another daemon already listens"));
    let pod = Netns::new("dhcp-pod-files");
    let addr = add_ours(&lan, &pod);
    d.term();
    assert!(!lan.socket().exists() && !pidfile.exists());
    assert_eq!(lan.lease_files().len(), 1, "leases stay on disk");
    lan.server_lease_written(ip_of(&addr)); // and at the server
    assert!(lan.daemon_log().contains("the leases stay on disk"));
    let _d = lan.daemon(&[]);
    ours(&lan, "check", &pod).assert_silent_ok();
    ours(&lan, "del", &pod).assert_silent_ok();
    assert_released(&lan, &addr);
    // Bad flags: Go's flag package's words, exit 2.
    let bad = lan
        .node
        .ns
        .command(bin("dhcp"))
        .args(["daemon", "-nope"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("flag provided but not defined: -nope"));
}

/// `provide` and `request` reach the server: the provided vendor class,
/// user class (from `CNI_ARGS`) and hostname are in dnsmasq's log and lease,
/// the requested interface MTU in its request list; with `skipDefault` only
/// the listed options are requested (no DNS then). The MTU is not applied
/// (as the reference: the main plugin's `mtu` is the link's). `priority`
/// is every route's metric.
#[test]
fn dhcp_provide_request_and_priority() {
    if !require_root("dhcp_provide_request_and_priority") {
        return;
    }
    let lan = Lan::new(
        "opts",
        Kind::Macvlan,
        "1h",
        &["--dhcp-option=option:mtu,1400"],
    );
    let _d = lan.daemon(&[]);
    let mut conf = lan.conf_at("1.1.0");
    conf["plugins"][0]["ipam"]["provide"] = json!([
        {"option": "vendor-class-identifier", "value": "cni-test-vendor"},
        {"option": "user-class", "value": "ignored", "fromArg": "UC"},
        {"option": "host-name", "value": "fixed-name"}
    ]);
    conf["plugins"][0]["ipam"]["request"] = json!([
        {"skipDefault": true}, {"option": "subnet-mask"}, {"option": "routers"}, {"option": "26"}
    ]);
    conf["plugins"][0]["ipam"]["priority"] = json!(30);
    lan.node.write_conf("10-lan.conflist", &conf);
    let pod = Netns::new("dhcp-pod-opts");
    let netns = pod.path().to_str().unwrap().to_string();
    let out = lan.node.cnitool_with(
        &bin("cnitool"),
        &["add", NET, &netns],
        &[(
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAME=web-1;UC=class-from-args",
        )],
    );
    let r = out.result();
    assert_eq!(
        r["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.77.0.1", "priority": 30}])
    );
    assert_eq!(r["dns"], json!({}), "no DNS asked for: {r}");
    let addr = pod_addr(&pod);
    assert_eq!(
        lan.server_lease_written(ip_of(&addr)).hostname,
        "fixed-name"
    );
    let log = std::fs::read_to_string(lan.path("dnsmasq.log")).unwrap();
    assert!(log.contains("vendor class: cni-test-vendor"), "{log}");
    assert!(log.contains("user class: class-from-args"), "{log}");
    assert!(log.contains("26:mtu"), "{log}");
    assert!(!log.contains("6:dns-server"), "{log}");
    assert_eq!(
        pod.link("eth0").unwrap()["mtu"],
        1500,
        "option 26 is not applied"
    );
    let routes = pod.ip_json(&["-4", "route", "show", "default"]);
    assert_eq!(routes[0]["metric"], 30);
    lan.node
        .cnitool_with(&bin("cnitool"), &["del", NET, &netns], &[])
        .assert_silent_ok();
    assert_released(&lan, &addr);
}

/// Only root (or the daemon's own user) may ask the daemon anything, even
/// through a socket whose mode would let others connect.
#[test]
fn dhcp_daemon_serves_only_root() {
    if !require_root("dhcp_daemon_serves_only_root") {
        return;
    }
    let lan = Lan::new("uid", Kind::Macvlan, "1h", &[]);
    let _d = lan.daemon(&[]);
    let sock = lan.socket().display().to_string();
    let conf = json!({"cniVersion": "1.1.0", "name": NET, "type": "macvlan",
        "ipam": {"type": "dhcp", "daemonSocketPath": sock}})
    .to_string();
    let status_as = |uid: Option<&str>| {
        let mut cmd = match uid {
            Some(u) => {
                let mut c = lan.node.ns.command("setpriv");
                c.args([&format!("--reuid={u}"), "--regid=65534", "--clear-groups"])
                    .arg(bin("dhcp"));
                c
            }
            None => lan.node.ns.command(bin("dhcp")),
        };
        use std::io::Write;
        let mut child = cmd
            .env("CNI_COMMAND", "STATUS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(conf.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        PluginOutput {
            exit_code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    status_as(None).assert_silent_ok();
    // The socket's mode keeps others out (the directory is 0700 too)...
    status_as(Some("65534")).assert_error(50, "Permission denied");
    // ...and with both opened up, the daemon itself refuses them.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(lan.path("run"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(lan.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(lan.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    status_as(Some("65534")).assert_error(4, "serves only root");
    assert!(lan.daemon_log().contains("refusing a request of uid 65534"));
}

/// `cni-rs inspect` and `gc` see the daemon's leases: each pod's lease
/// file is a piece of its attachment; a pod whose namespace was removed
/// without DEL is let go by the daemon through `gc --apply`'s DEL, the
/// live pod keeps its own; with the daemon gone, a lease left is
/// reported, never removed behind the daemon's back.
#[test]
fn dhcp_leases_seen_and_collected_by_the_operator() {
    if !require_root("dhcp_leases_seen_and_collected_by_the_operator") {
        return;
    }
    let lan = Lan::new("op", Kind::Macvlan, "1h", &[]);
    let d = lan.daemon(&[]);
    let keep = Netns::new("dhcp-op-keep");
    let stale = Netns::new("dhcp-op-stale");
    let kept = add_ours(&lan, &keep);
    let gone = add_ours(&lan, &stale);
    let operator = |cmd: &str, extra: &[&str]| {
        let (cache, conf) = (lan.node.shared_cache_dir(), lan.node.conf_dir.path());
        let lease_dir = lan.lease_dir();
        // Grace 0: the pods were made a moment ago, and none is in flight.
        let mut args = vec![cmd, "--cri-socket", "none", "--grace", "0", "--cache-dir"];
        args.extend([
            cache.to_str().unwrap(),
            "--conf-dir",
            conf.to_str().unwrap(),
        ]);
        args.extend(["--dhcp-lease-dir", lease_dir.to_str().unwrap()]);
        args.extend_from_slice(extra);
        lan.node.cnitool_with(&bin("cni-rs"), &args, &[])
    };
    let rows = |out: PluginOutput| -> Vec<Value> {
        assert_eq!(out.exit_code, 0, "{out:?}");
        out.json()["attachments"].as_array().unwrap().clone()
    };
    let leases_of = |rows: &[Value], pod: &Netns| -> Vec<Value> {
        let row = rows
            .iter()
            .find(|r| r["containerID"] == cid_of(pod))
            .unwrap_or_else(|| panic!("no row of {}: {rows:#?}", pod.name()));
        assert_eq!(row["missing"], json!([]), "{row:#}");
        row["pieces"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] == "dhcpLease")
            .cloned()
            .collect()
    };
    let before = rows(operator("inspect", &["--json"]));
    assert_eq!(before.len(), 2, "{before:#?}");
    for (pod, addr) in [(&keep, &kept), (&stale, &gone)] {
        let leases = leases_of(&before, pod);
        assert_eq!(leases.len(), 1, "{before:#?}");
        let path = leases[0]["location"].as_str().unwrap();
        assert!(lan.lease_files().iter().any(|f| f.to_str() == Some(path)));
        let row = before
            .iter()
            .find(|r| r["containerID"] == cid_of(pod))
            .unwrap();
        assert_eq!(row["addresses"], json!([addr]), "{row:#}");
    }

    // The stale pod: its namespace removed without DEL.
    drop(stale);
    let dry = operator("gc", &[]);
    assert_eq!(dry.exit_code, 1, "{dry:?}");
    assert!(dry.stdout.contains("dhcpLease"), "{dry:?}");
    assert_eq!(lan.lease_files().len(), 2, "a dry run changes nothing");
    let applied = operator("gc", &["--apply"]);
    assert_eq!(applied.exit_code, 0, "{applied:?}");
    // The daemon let the lease go (no RELEASE reaches the server: the
    // macvlan went with the namespace; the server's lease runs out).
    assert_eq!(lan.lease_files().len(), 1);
    lan.server_lease_written(ip_of(&kept));
    let after = rows(operator("inspect", &["--json"]));
    assert_eq!(after.len(), 1, "{after:#?}");
    assert_eq!(leases_of(&after, &keep).len(), 1);

    // The daemon killed, then the last pod's namespace removed: gc's DEL
    // finds no daemon to let the lease go, and the file is reported, not
    // removed (the daemon takes it up again when it starts).
    d.kill();
    let gone_too = keep.path().to_path_buf();
    drop(keep);
    assert!(!gone_too.exists());
    let out = operator("gc", &["--apply"]);
    assert_eq!(out.exit_code, 1, "{out:?}");
    assert!(out.stderr.contains("dhcp daemon"), "{out:?}");
    assert_eq!(
        lan.lease_files().len(),
        1,
        "never removed behind the daemon"
    );
}
