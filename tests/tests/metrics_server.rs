//! `cni-rs metrics --listen` against whatever else connects: each test
//! starts the server in a throwaway node namespace, lets one kind of
//! misbehaving client loose on it (idle connections, a thousand of them,
//! byte-a-second requests, endless headers, pipelined requests, clients
//! that never read), and scrapes it meanwhile as Prometheus would
//! (`GET /metrics`, 2 s timeout). Every scrape must be answered, as
//! node_exporter answers them under the same load, and the server's RSS
//! stay bounded. Also the refusals the server keeps: 405, 404, 413, 400,
//! 431, 408.

use crate::metrics::Background;
use tests::*;

const PORT: u16 = 9585;

/// The clients of one test, in one Python process: `hostile.py MODE PID`
/// runs MODE's misbehaving clients on threads while the main thread
/// scrapes, and prints `answered asked max_rss_kib` (the server's RSS,
/// PID's, read while the load is on).
const HOSTILE: &str = r#"
import resource, socket, sys, threading, time
mode, pid = sys.argv[1], int(sys.argv[2])
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
ADDR = ("127.0.0.1", 9585)
stop = threading.Event()
held = []
max_rss = 0

def rss():
    global max_rss
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            max_rss = max(max_rss, int(line.split()[1]))

def scrape():
    try:
        s = socket.create_connection(ADDR, timeout=2)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n")
        data = b""
        deadline = time.time() + 2
        while time.time() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        return data.startswith(b"HTTP/1.1 200 OK") and b"cni_build_info" in data
    except OSError:
        return False

def connect():
    return socket.create_connection(ADDR, timeout=5)

def hold_idle(n):
    for _ in range(n):
        held.append(connect())

def renew_idle(n, every):
    # n idle connections, all replaced by new ones every `every` s.
    while not stop.is_set():
        fresh = [connect() for _ in range(n)]
        for s in held[:]:
            s.close()
            held.remove(s)
        held.extend(fresh)
        stop.wait(every)

def byte_a_second(n):
    # n clients sending a request a byte a second; one cut off starts over.
    request = b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n"
    def client():
        while not stop.is_set():
            try:
                s = connect()
                for b in request:
                    if stop.wait(1):
                        break
                    s.sendall(bytes([b]))
                s.close()
            except OSError:
                stop.wait(0.1)
    for _ in range(n):
        threading.Thread(target=client, daemon=True).start()

def endless_headers(n):
    # n clients sending header lines as fast as the server takes them.
    def client():
        while not stop.is_set():
            try:
                s = connect()
                s.sendall(b"GET /metrics HTTP/1.1\r\n")
                while not stop.is_set():
                    s.sendall(b"X-Endless: " + b"a" * 1000 + b"\r\n")
            except OSError:
                stop.wait(0.05)
    for _ in range(n):
        threading.Thread(target=client, daemon=True).start()

def never_read(n):
    # n clients that send a scrape each and never read the answer.
    for _ in range(n):
        s = connect()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n")
        held.append(s)

asked = answered = 0
def scrapes(count, every):
    global asked, answered
    for i in range(count):
        start = time.time()
        asked += 1
        answered += scrape()
        rss()
        time.sleep(max(0, every - (time.time() - start)))

if mode == "quiet":
    scrapes(1, 0)
elif mode.startswith("idle-"):
    hold_idle(int(mode[5:]))
    scrapes(3, 0.5)
elif mode == "renewed":
    threading.Thread(target=renew_idle, args=(20, 4), daemon=True).start()
    time.sleep(0.5)
    scrapes(12, 1)
elif mode == "byte-a-second":
    byte_a_second(50)
    time.sleep(1)
    scrapes(6, 2)
elif mode == "endless-headers":
    endless_headers(20)
    time.sleep(0.5)
    scrapes(6, 1)
elif mode == "never-read":
    never_read(300)
    time.sleep(0.5)
    scrapes(3, 0.5)
rss()
stop.set()
print(answered, asked, max_rss)
"#;

/// Starts the server in a node namespace of its own, runs `mode`'s
/// clients against it, and returns (answered, asked, the server's peak
/// RSS in KiB).
fn under_load(test: &str, tag: &str, mode: &str) -> Option<(u32, u32, u64)> {
    if !require_root(test) {
        return None;
    }
    let node = Node::new(tag);
    node.ns.ip(&["link", "set", "lo", "up"]);
    let server = start_server(&node);
    let pid = server.pid().to_string();
    let out = python_client(&node.ns, HOSTILE, &[mode, &pid])
        .unwrap_or_else(|| panic!("{test}: the clients of {mode} failed"));
    let n: Vec<u64> = out
        .split_whitespace()
        .map(|w| w.parse().unwrap_or_else(|_| panic!("{test}: {out}")))
        .collect();
    assert_eq!(n.len(), 3, "{test}: {out}");
    // Still serving once the load is gone.
    let after = http_request(&node.ns, "127.0.0.1", PORT, "GET /healthz HTTP/1.0\r\n\r\n");
    assert_eq!(
        after.map(|a| a.0).as_deref(),
        Some("HTTP/1.1 200 OK"),
        "{test}: /healthz after {mode}"
    );
    Some((n[0] as u32, n[1] as u32, n[2]))
}

/// `cni-rs metrics --listen` in `node`, once it answers.
fn start_server(node: &Node) -> Background {
    let args = [
        "metrics",
        "--listen",
        "127.0.0.1:9585",
        "--conf-dir",
        node.conf_dir.path().to_str().unwrap(),
        "--cache-dir",
        node.cache_dir.path().to_str().unwrap(),
        "--cri-socket",
        "none",
    ];
    let server = Background::start(&node.ns, bin("cni-rs").to_str().unwrap(), &args);
    wait_for("the metrics server", || {
        http_request(&node.ns, "127.0.0.1", PORT, "GET /healthz HTTP/1.0\r\n\r\n").is_some()
    });
    server
}

/// The bound on the server's memory, whatever connects.
const MAX_RSS_KIB: u64 = 64 << 10;

fn assert_all_answered(test: &str, got: Option<(u32, u32, u64)>, asked: u32) {
    let Some((answered, n, rss)) = got else {
        return;
    };
    assert_eq!(
        (answered, n),
        (asked, asked),
        "{test}: scrapes answered of asked"
    );
    assert!(rss > 0 && rss < MAX_RSS_KIB, "{test}: RSS {rss} KiB");
}

#[test]
fn metrics_server_answers_with_nothing_else_connected() {
    let test = "metrics_server_answers_with_nothing_else_connected";
    assert_all_answered(test, under_load(test, "msquiet", "quiet"), 1);
}

#[test]
fn metrics_server_answers_beside_16_idle_connections() {
    let test = "metrics_server_answers_beside_16_idle_connections";
    assert_all_answered(test, under_load(test, "msidle16", "idle-16"), 3);
}

#[test]
fn metrics_server_answers_beside_40_idle_connections() {
    let test = "metrics_server_answers_beside_40_idle_connections";
    assert_all_answered(test, under_load(test, "msidle40", "idle-40"), 3);
}

/// 20 idle connections, all renewed every 4 s, for the 12 s of 12 scrapes.
#[test]
fn metrics_server_answers_beside_renewed_idle_connections() {
    let test = "metrics_server_answers_beside_renewed_idle_connections";
    assert_all_answered(test, under_load(test, "msrenew", "renewed"), 12);
}

/// 50 clients sending their request a byte a second, for 6 scrapes.
#[test]
fn metrics_server_answers_beside_byte_a_second_clients() {
    let test = "metrics_server_answers_beside_byte_a_second_clients";
    assert_all_answered(test, under_load(test, "msslow", "byte-a-second"), 6);
}

/// 1,000 connections open (more than the old limit of 16 threads by far),
/// with the server's RSS under 64 MiB.
#[test]
fn metrics_server_answers_beside_1000_open_connections() {
    let test = "metrics_server_answers_beside_1000_open_connections";
    assert_all_answered(test, under_load(test, "msthousand", "idle-1000"), 3);
}

/// 20 clients sending endless headers as fast as they can.
#[test]
fn metrics_server_answers_beside_endless_headers() {
    let test = "metrics_server_answers_beside_endless_headers";
    assert_all_answered(test, under_load(test, "msendless", "endless-headers"), 6);
}

/// 300 clients that asked for a scrape and never read the answer.
#[test]
fn metrics_server_answers_beside_clients_that_never_read() {
    let test = "metrics_server_answers_beside_clients_that_never_read";
    assert_all_answered(test, under_load(test, "msnoread", "never-read"), 3);
}

/// Out of file descriptors (a limit of 12, which the server cannot raise,
/// below what its 8 connections at least need, and 40 idle connections):
/// a failed accept sheds the oldest connection or pauses, never spins.
/// Every scrape is answered (what it cannot open counted as a read
/// error), and the server spent less than a second of CPU on the whole
/// phase (a spinning accept loop burns one core).
#[test]
fn metrics_server_out_of_descriptors_sheds_and_does_not_spin() {
    let test = "metrics_server_out_of_descriptors_sheds_and_does_not_spin";
    if !require_root(test) {
        return;
    }
    let node = Node::new("msfds");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let cni_rs = bin("cni-rs");
    let args = [
        "--nofile=12:12",
        cni_rs.to_str().unwrap(),
        "metrics",
        "--listen",
        "127.0.0.1:9585",
        "--conf-dir",
        node.conf_dir.path().to_str().unwrap(),
        "--cache-dir",
        node.cache_dir.path().to_str().unwrap(),
        "--cri-socket",
        "none",
    ];
    let server = Background::start(&node.ns, "prlimit", &args);
    wait_for("the metrics server", || {
        http_request(&node.ns, "127.0.0.1", PORT, "GET /healthz HTTP/1.0\r\n\r\n").is_some()
    });
    // prlimit execs the server: the same process.
    let pid = server.pid();
    let cpu = || -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .expect("stat")
            .1
            .split_whitespace()
            .collect();
        // utime and stime, fields 14 and 15 of stat(5), in clock ticks.
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let before = cpu();
    let out =
        python_client(&node.ns, HOSTILE, &["idle-40", &pid.to_string()]).expect("the clients");
    let used = cpu() - before;
    let n: Vec<u64> = out.split_whitespace().map(|w| w.parse().unwrap()).collect();
    assert_eq!(
        (n[0], n[1]),
        (3, 3),
        "{test}: scrapes answered of asked: {out}"
    );
    // 100 ticks a second on Linux.
    assert!(
        used < 100,
        "{test}: {used} ticks of CPU while out of descriptors"
    );
}

/// Requests pipelined on one connection get one answer, then the close.
#[test]
fn metrics_server_answers_one_request_per_connection() {
    let test = "metrics_server_answers_one_request_per_connection";
    if !require_root(test) {
        return;
    }
    let node = Node::new("mspipe");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let _server = start_server(&node);
    let pipelined = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".repeat(200);
    // The client reads to the close: one status line and a body of one
    // answer alone ("ok") mean one answer, then the close.
    let answer =
        http_request(&node.ns, "127.0.0.1", PORT, &pipelined).expect("an answer, then the close");
    assert_eq!(
        answer,
        ("HTTP/1.1 200 OK".to_string(), "ok".to_string()),
        "{test}: one answer to 200 pipelined requests"
    );
}

/// The server answers only `GET /metrics` and `/healthz`, refuses bodies,
/// large and slow requests, and a slow client holds no scrape up.
#[test]
fn the_metrics_server_refuses_what_it_does_not_serve() {
    if !require_root("the_metrics_server_refuses_what_it_does_not_serve") {
        return;
    }
    let node = Node::new("metsrv");
    node.ns.ip(&["link", "set", "lo", "up"]);
    let _server = start_server(&node);
    let ask = |request: &str| http_request(&node.ns, "127.0.0.1", PORT, request);
    // A client that sends half a request and waits, beside a scrape.
    let slow = Background::start(
        &node.ns,
        "python3",
        &[
            "-c",
            "import socket,time; s=socket.create_connection(('127.0.0.1',9585)); \
             s.sendall(b'GET /metr'); time.sleep(30)",
        ],
    );
    let scrape = ask("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n")
        .expect("a scrape beside a slow client");
    assert_eq!(scrape.0, "HTTP/1.1 200 OK");
    assert!(
        scrape.1.ends_with("# EOF"),
        "OpenMetrics when asked: {}",
        scrape.1
    );
    assert!(scrape.1.contains("# TYPE cni_build info"), "{}", scrape.1);
    let plain = ask("GET /metrics HTTP/1.0\r\n\r\n").expect("answer");
    assert!(
        plain.1.contains("# TYPE cni_build_info gauge"),
        "{}",
        plain.1
    );
    assert!(!plain.1.contains("# EOF"));
    drop(slow);
    for (request, status) in [
        (
            "POST /metrics HTTP/1.0\r\n\r\n",
            "HTTP/1.1 405 Method Not Allowed",
        ),
        ("GET /debug HTTP/1.0\r\n\r\n", "HTTP/1.1 404 Not Found"),
        (
            "GET /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
            "HTTP/1.1 413 Content Too Large",
        ),
        ("NOT HTTP\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    ] {
        assert_eq!(
            ask(request).map(|a| a.0).as_deref(),
            Some(status),
            "{request:?}"
        );
    }
    let huge = format!(
        "GET /metrics HTTP/1.0\r\nX-Big: {}\r\n\r\n",
        "a".repeat(9000)
    );
    assert_eq!(
        ask(&huge).map(|a| a.0).as_deref(),
        Some("HTTP/1.1 431 Request Header Fields Too Large")
    );
    // Half a request, then nothing: answered 408 after the 5 s deadline.
    const HALF: &str = r#"
import socket, time
s = socket.create_connection(("127.0.0.1", 9585), timeout=10)
s.sendall(b"GET /metrics HTTP/1.0\r\n")
start = time.time()
data = s.recv(100)
print(data.split(b"\r\n")[0].decode(), round(time.time() - start))
"#;
    let out = python_client(&node.ns, HALF, &[]).expect("an answer");
    assert!(out.starts_with("HTTP/1.1 408 Request Timeout"), "{out}");
}
