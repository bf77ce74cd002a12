//! `cni-rs metrics --listen`: `GET /metrics` (and `GET /healthz`) over
//! HTTP/1.x, one request per connection. The request is parsed by
//! `httparse`; the sockets are std's, so that each has a deadline:
//! tiny_http and the like read without one, and a client that never
//! finishes its request would hold their thread. Here a request must
//! arrive whole within [`READ_TIMEOUT`] and [`MAX_REQUEST`] bytes, at most
//! [`MAX_CLIENTS`] at once; anything else is answered with an error and
//! closed. Scrapes run one at a time (a lock), each reading the node and
//! the call log's new lines; plugins never wait on any of it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Format, Metrics, Sources};
use crate::error::Error;
use crate::liveness::Judge;

/// Where `--listen` without an address binds: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9585";
/// A request's whole head must arrive within this.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head taken; a body is refused.
pub const MAX_REQUEST: usize = 8 << 10;
/// Connections served at once; more are closed at once.
pub const MAX_CLIENTS: usize = 16;

/// What the server answers a request with.
struct Answer {
    status: &'static str,
    content_type: &'static str,
    body: String,
}

impl Answer {
    fn plain(status: &'static str, body: &str) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{body}\n"),
        }
    }
}

type Judging = dyn Fn() -> crate::error::Result<Judge> + Send + Sync;

/// Binds `addr`, then serves until SIGTERM or SIGINT.
pub fn serve(
    addr: SocketAddr,
    sources: Sources,
    metrics: Metrics,
    judge: Box<Judging>,
) -> crate::error::Result<()> {
    let listening = |source| Error::Listen {
        addr: addr.to_string(),
        source,
    };
    let listener = TcpListener::bind(addr).map_err(listening)?;
    let bound = listener.local_addr().map_err(listening)?;
    eprintln!("cni-rs metrics: serving http://{bound}/metrics");
    crate::repeat::until_stopped(move || accept(listener, sources, metrics, judge))
}

fn accept(
    listener: TcpListener,
    sources: Sources,
    metrics: Metrics,
    judge: Box<Judging>,
) -> crate::error::Result<()> {
    let addr = listener.local_addr().map_err(|source| Error::Listen {
        addr: "?".into(),
        source,
    })?;
    let shared = Arc::new((sources, Mutex::new(metrics), judge));
    let clients = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
            clients.fetch_sub(1, Ordering::SeqCst);
            drop(stream);
            continue;
        }
        let shared = Arc::clone(&shared);
        let clients = Arc::clone(&clients);
        std::thread::spawn(move || {
            let (sources, metrics, judge) = &*shared;
            handle(stream, &|format| {
                let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
                m.refresh(&sources.paths, &|| judge());
                m.encode(format)
            });
            clients.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Err(Error::Listen {
        addr: addr.to_string(),
        source: std::io::Error::other("the listening socket stopped accepting"),
    })
}

/// Reads one request from `stream` and answers it.
fn handle(mut stream: TcpStream, scrape: &dyn Fn(Format) -> String) {
    let answer = match read_head(&mut stream) {
        Ok(head) => route(&head, scrape),
        Err(answer) => answer,
    };
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        answer.status,
        answer.content_type,
        answer.body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(answer.body.as_bytes());
    // Closing with unread input would reset the connection, and the
    // client could lose the answer (a refused large request): read what
    // is left, within bounds, after saying we are done.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut left = [0u8; 4096];
    let mut drained = 0;
    while drained < MAX_REQUEST * 8 {
        match stream.read(&mut left) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

/// A request's method, path and `Accept`.
struct Head {
    method: String,
    path: String,
    accept: String,
    has_body: bool,
}

fn read_head(stream: &mut TcpStream) -> Result<Head, Answer> {
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(Answer::plain("408 Request Timeout", "request timeout"));
        }
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Err(Answer::plain("400 Bad Request", "incomplete request")),
            Ok(n) => n,
            Err(_) => return Err(Answer::plain("408 Request Timeout", "request timeout")),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                let header = |name: &str| {
                    req.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .map(|h| String::from_utf8_lossy(h.value).into_owned())
                };
                let has_body = header("content-length").is_some_and(|v| v.trim() != "0")
                    || header("transfer-encoding").is_some();
                return Ok(Head {
                    method: req.method.unwrap_or_default().to_string(),
                    path: req.path.unwrap_or_default().to_string(),
                    accept: header("accept").unwrap_or_default(),
                    has_body,
                });
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_REQUEST => {}
            Ok(httparse::Status::Partial) => {
                return Err(Answer::plain(
                    "431 Request Header Fields Too Large",
                    "request too large",
                ))
            }
            Err(e) => return Err(Answer::plain("400 Bad Request", &e.to_string())),
        }
    }
}

fn route(head: &Head, scrape: &dyn Fn(Format) -> String) -> Answer {
    let path = head.path.split('?').next().unwrap_or("");
    if head.has_body {
        return Answer::plain("413 Content Too Large", "no request body is taken");
    }
    match (head.method.as_str(), path) {
        ("GET", "/metrics") => {
            let format = Format::from_accept(&head.accept);
            Answer {
                status: "200 OK",
                content_type: format.content_type(),
                body: scrape(format),
            }
        }
        ("GET", "/healthz") => Answer::plain("200 OK", "ok"),
        (_, "/metrics" | "/healthz") => Answer::plain("405 Method Not Allowed", "GET only"),
        _ => Answer::plain("404 Not Found", "only /metrics and /healthz"),
    }
}
