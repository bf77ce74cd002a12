//! Real traffic between namespaces, one kit for every test file: the echo
//! service ([`echo_server`], [`ask`], [`ask_udp`]: "who answered, and whom
//! did it see", so a test asserts both the path and any NAT on it), pings
//! ([`ping_ok`], [`assert_ping`]), an HTTP GET ([`http_get`]), and the
//! building blocks for a test's own Python listener or client
//! ([`Listener`], [`python_client`]).

use crate::Netns;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A `python3 -c <script> <args>` listener in a namespace, started once it
/// printed `ready` (bounded wait; asserted), killed on drop.
pub struct Listener(Child);

impl Listener {
    pub fn start(ns: &Netns, script: &str, args: &[&str]) -> Listener {
        let mut child = ns
            .command("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python3 listener");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        let listener = Listener(child);
        assert_eq!(
            line.trim(),
            "ready",
            "listener in {} did not start",
            ns.name()
        );
        listener
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the client `python3 -c <script> <args>` in `ns`: its trimmed
/// stdout when it exits 0, `None` otherwise (its stderr is discarded).
pub fn python_client(ns: &Netns, script: &str, args: &[&str]) -> Option<String> {
    let out = ns
        .command("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("run python3 client");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether one `ping -c1 -W1 ip` from `from` is answered.
pub fn ping_ok(from: &Netns, ip: &str) -> bool {
    from.output_in(std::process::Command::new("ping").args(["-c1", "-W1", ip]))
        .expect("ping")
        .status
        .success()
}

/// `GET /` over HTTP/1.0 from `from` to `ip:port` (one try, 3 s): the
/// response body, or `None` when nothing answered.
pub fn http_get(from: &Netns, ip: &str, port: u16) -> Option<String> {
    http_request(from, ip, port, "GET / HTTP/1.0\r\n\r\n").map(|(_, body)| body)
}

/// Sends `request` as it is from `from` to `ip:port` (one try, 3 s):
/// the response's status line and body (trimmed), or `None` when nothing
/// answered.
pub fn http_request(from: &Netns, ip: &str, port: u16, request: &str) -> Option<(String, String)> {
    const CLIENT: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
s.sendall(sys.argv[3].encode())
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
head, _, body = data.partition(b"\r\n\r\n")
print(head.split(b"\r\n", 1)[0].decode())
print(body.decode().strip())
"#;
    let out = python_client(from, CLIENT, &[ip, &port.to_string(), request])?;
    let (status, body) = out.split_once('\n').unwrap_or((out.as_str(), ""));
    Some((status.to_string(), body.to_string()))
}

/// The echo service: on `port`, TCP and UDP, IPv4 and IPv6, answers each
/// connection (or datagram) with "<name> <peer address>" (an IPv4 peer
/// written as IPv4).
const ECHO_SERVER: &str = r#"
import socket, sys, threading
name, port = sys.argv[1], int(sys.argv[2])
def peer(a):
    return a[7:] if a.startswith('::ffff:') else a
t = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
t.bind(('::', port))
t.listen(64)
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
u.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
u.bind(('::', port))
def udp():
    while True:
        d, a = u.recvfrom(100)
        u.sendto(('%s %s\n' % (name, peer(a[0]))).encode(), a)
threading.Thread(target=udp, daemon=True).start()
print('ready', flush=True)
while True:
    c, a = t.accept()
    c.sendall(('%s %s\n' % (name, peer(a[0]))).encode())
    c.close()
"#;

/// Connects (tcp) or sends one datagram (udp) and prints the answer; exits
/// non-zero after 3 s without one.
const ECHO_CLIENT: &str = r#"
import socket, sys
proto, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ':' in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM if proto == 'tcp' else socket.SOCK_DGRAM)
s.settimeout(3)
if proto == 'tcp':
    s.connect((host, port))
else:
    s.sendto(b'x', (host, port))
print(s.recv(100).decode().strip())
"#;

/// Starts the echo service in `ns` as `name` on `port` (TCP and UDP);
/// stopped when the listener is dropped.
pub fn echo_server(ns: &Netns, name: &str, port: u16) -> Listener {
    Listener::start(ns, ECHO_SERVER, &[name, &port.to_string()])
}

/// The echo service's answer to a TCP connection from `ns` to
/// `host`:`port` (`"<name> <address it saw>"`), or `None` when nothing
/// answered within 3 s.
pub fn ask(ns: &Netns, host: &str, port: u16) -> Option<String> {
    python_client(ns, ECHO_CLIENT, &["tcp", host, &port.to_string()])
}

/// [`ask`] that must be answered: the answer, or a panic naming the path.
pub fn ask_ok(ns: &Netns, host: &str, port: u16) -> String {
    ask(ns, host, port)
        .unwrap_or_else(|| panic!("no answer from {host} port {port} to {}", ns.name()))
}

/// [`ask`] over UDP: one datagram and its answer.
pub fn ask_udp(ns: &Netns, host: &str, port: u16) -> Option<String> {
    python_client(ns, ECHO_CLIENT, &["udp", host, &port.to_string()])
}

/// Asserts that a ping from `from` to `ip` is answered: up to three
/// one-ping tries of 2 s each (the count bounds it; the first answer ends
/// it). The last output in the failure.
pub fn assert_ping(from: &Netns, ip: &str) {
    let mut last = String::new();
    for _ in 0..3 {
        let out = from
            .output_in(std::process::Command::new("ping").args(["-c1", "-W2", ip]))
            .expect("ping");
        if out.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    panic!("ping {ip} from {} failed:\n{last}", from.name());
}
