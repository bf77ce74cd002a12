//! Helpers of the netfilter tests: throwaway namespaces wired with veth
//! pairs, commands run inside them, and a Python listener/client that
//! reports the peer address it saw.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::netlink::Netlink;
use crate::netns::testing::new_netns;
use crate::netns::NetNs;

/// Runs `prog args` with its thread inside `ns`; panics on failure.
pub fn run_in(ns: &NetNs, prog: &str, args: &[&str]) -> String {
    let out: Output = ns
        .run(|| Command::new(prog).args(args).output())
        .unwrap()
        .unwrap_or_else(|e| panic!("{prog}: {e}"));
    assert!(
        out.status.success(),
        "{prog} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A namespace joined to `node` by `v<idx>` (node) / `eth0` (peer), with
/// `10.<idx>.0.0/24` and `fd00:<idx>::/64`, the node at .1 and ::1.
pub fn attach(node: &NetNs, idx: u8, default_route: bool) -> NetNs {
    let peer = new_netns();
    let nif = format!("v{idx}");
    Netlink::open_in(node)
        .unwrap()
        .add_veth(&nif, None, "eth0", &peer, None)
        .unwrap();
    run_in(
        node,
        "ip",
        &["addr", "add", &format!("10.{idx}.0.1/24"), "dev", &nif],
    );
    run_in(
        node,
        "ip",
        &[
            "-6",
            "addr",
            "add",
            &format!("fd00:{idx}::1/64"),
            "dev",
            &nif,
            "nodad",
        ],
    );
    run_in(node, "ip", &["link", "set", &nif, "up"]);
    run_in(
        &peer,
        "ip",
        &["addr", "add", &format!("10.{idx}.0.2/24"), "dev", "eth0"],
    );
    run_in(
        &peer,
        "ip",
        &[
            "-6",
            "addr",
            "add",
            &format!("fd00:{idx}::2/64"),
            "dev",
            "eth0",
            "nodad",
        ],
    );
    run_in(&peer, "ip", &["link", "set", "eth0", "up"]);
    run_in(&peer, "ip", &["link", "set", "lo", "up"]);
    if default_route {
        run_in(
            &peer,
            "ip",
            &["route", "add", "default", "via", &format!("10.{idx}.0.1")],
        );
        run_in(
            &peer,
            "ip",
            &[
                "-6",
                "route",
                "add",
                "default",
                "via",
                &format!("fd00:{idx}::1"),
            ],
        );
    }
    peer
}

/// A node namespace that forwards.
pub fn forwarding_node() -> NetNs {
    let node = new_netns();
    run_in(&node, "ip", &["link", "set", "lo", "up"]);
    node.run(|| {
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").unwrap();
        std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1").unwrap();
    })
    .unwrap();
    node
}

const SERVER: &str = r#"
import socket, sys
t = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
t.bind(('::', int(sys.argv[1])))
t.listen(16)
print('ready', flush=True)
while True:
    c, a = t.accept()
    p = a[0][7:] if a[0].startswith('::ffff:') else a[0]
    c.sendall((p + '\n').encode())
    c.close()
"#;

const CLIENT: &str = r#"
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
s.settimeout(3)
s.connect((host, port))
print(s.recv(100).decode().strip())
"#;

/// A TCP listener answering with the peer's address; killed on drop.
pub struct Listener(Child);

impl Listener {
    pub fn start(ns: &NetNs, port: u16) -> Listener {
        let mut child = ns
            .run(|| {
                Command::new("python3")
                    .args(["-c", SERVER, &port.to_string()])
                    .stdout(Stdio::piped())
                    .spawn()
            })
            .unwrap()
            .expect("python3");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut l = String::new();
            let _ = BufReader::new(stdout).read_line(&mut l);
            let _ = tx.send(l);
        });
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        let l = Listener(child);
        assert_eq!(line.trim(), "ready");
        l
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The peer address a listener at `host:port` saw, or `None` (3 s bound).
pub fn peer_seen(from: &NetNs, host: &str, port: u16) -> Option<String> {
    let out = from
        .run(|| {
            Command::new("python3")
                .args(["-c", CLIENT, host, &port.to_string()])
                .stderr(Stdio::null())
                .output()
        })
        .unwrap()
        .expect("python3");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
