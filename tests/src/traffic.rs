//! Real traffic between namespaces: Python listeners that answer each
//! connection, and one-shot Python clients.

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
    const CLIENT: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print(data.split(b"\r\n\r\n", 1)[-1].decode().strip())
"#;
    python_client(from, CLIENT, &[ip, &port.to_string()])
}
