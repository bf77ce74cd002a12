//! `cni-rs metrics --listen`: `GET /metrics` (and `GET /healthz`) over
//! HTTP/1.x, one request per connection, to whatever else connects.
//!
//! One thread waits on every socket at once (`poll`), so a connection
//! costs a few kilobytes and no thread, and nothing a client does holds
//! up another: each connection has a deadline for its whole request
//! ([`READ_TIMEOUT`], then 408), for its answer to be taken
//! ([`WRITE_TIMEOUT`]) and at most [`MAX_REQUEST`] bytes buffered. At
//! capacity (the file descriptor limit, raised to its hard limit, and
//! [`MAX_CONNECTIONS`]) the oldest waiting request is shed to take the
//! new connection, never the new one refused; an accept that fails backs
//! off and is logged, never retried at once. Scrapes run on the worker of
//! `scraper`, which reads the node once per round of waiting scrapes.
//! Plugins never wait on any of it.

mod http;
mod scraper;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use super::{Metrics, Sources};
use crate::error::Error;
use crate::liveness::Judge;
use http::{Answer, Request, Route};
use scraper::{Scraper, Token};

/// Where `--listen` without an address binds: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9585";
/// A request's whole head must arrive within this of the connection.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// An answer must be taken within this, once ready.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// A scrape waits this long for the worker, then is answered 503 (a CRI
/// runtime that does not answer takes 10 s of a round).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(60);
/// After the answer, what the client still sends is read (so that closing
/// does not reset the connection and lose the answer) for this long, and
/// at most [`MAX_DRAIN`] bytes.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_DRAIN: usize = 64 << 10;
/// The largest request head taken; a body is refused.
pub const MAX_REQUEST: usize = 8 << 10;
/// Connections held at once, at most (fewer when the file descriptor
/// limit is lower): 2048 full request buffers are 16 MiB.
pub const MAX_CONNECTIONS: usize = 2048;
/// Connections held at least, however low the descriptor limit: past
/// what the limit leaves, a failed accept closes the oldest one.
const MIN_CONNECTIONS: usize = 8;
/// File descriptors kept for what a scrape opens (the node's files, the
/// CRI socket, namespaces).
const RESERVED_FDS: usize = 64;
/// A failed accept pauses accepting this long at first, doubling to
/// [`MAX_ACCEPT_PAUSE`] while it keeps failing.
const FIRST_ACCEPT_PAUSE: Duration = Duration::from_millis(10);
const MAX_ACCEPT_PAUSE: Duration = Duration::from_secs(1);

/// How the server learns the CRI runtime's sandboxes, per scrape.
pub type Judging = dyn Fn() -> crate::error::Result<Judge> + Send + Sync;

/// `--listen`'s value: `ADDR:PORT`, `[V6]:PORT`, or a bare IPv6 address
/// and its port (`fd00::1:9585`: what the DaemonSet's `$(NODE_IP):9585`
/// gives on an IPv6 node), the port after the last colon.
pub fn parse_listen(text: &str) -> Option<SocketAddr> {
    text.parse().ok().or_else(|| {
        let (host, port) = text.rsplit_once(':')?;
        let host: std::net::Ipv6Addr = host.parse().ok()?;
        Some(SocketAddr::new(host.into(), port.parse().ok()?))
    })
}

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
    listener.set_nonblocking(true).map_err(listening)?;
    let bound = listener.local_addr().map_err(listening)?;
    let (wake_rx, wake_tx) = UnixStream::pair().map_err(listening)?;
    for end in [&wake_rx, &wake_tx] {
        end.set_nonblocking(true).map_err(listening)?;
    }
    let capacity = connection_capacity();
    eprintln!("cni-rs metrics: serving http://{bound}/metrics, up to {capacity} connections");
    let scraper = Scraper::start(sources, metrics, judge, wake_tx);
    let mut server = Server {
        listener,
        addr: bound,
        wake: wake_rx,
        scraper,
        conns: BTreeMap::new(),
        next_token: 0,
        capacity,
        accept_pause: Pause::default(),
        out_of_fds_logged: None,
    };
    crate::repeat::until_stopped(move || server.run())
}

/// Raises the soft file descriptor limit to the hard one (as Go's runtime
/// does for node_exporter) and says how many connections fit under it.
fn connection_capacity() -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    };
    let fds = usize::try_from(soft).unwrap_or(usize::MAX);
    fds.saturating_sub(RESERVED_FDS)
        .clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)
}

/// One client connection, from accept to close.
struct Conn {
    stream: TcpStream,
    phase: Phase,
    /// When the current phase ends, done or not.
    deadline: Instant,
}

enum Phase {
    /// Reading the request head: what arrived so far.
    Reading(Vec<u8>),
    /// Waiting for the scrape worker.
    Scraping,
    /// Sending the answer: its head, body and how much is sent.
    Writing {
        head: Vec<u8>,
        body: Arc<str>,
        sent: usize,
    },
    /// Answered and shut for writing: reading what is left.
    Draining(usize),
}

/// Accepting paused after a failed accept: until when, and the next
/// pause's length.
#[derive(Default)]
struct Pause {
    until: Option<Instant>,
    next: Option<Duration>,
}

struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    /// Readable when the scrape worker has answers.
    wake: UnixStream,
    scraper: Scraper,
    /// By token, which grows: the first is the oldest.
    conns: BTreeMap<Token, Conn>,
    next_token: Token,
    capacity: usize,
    accept_pause: Pause,
    /// When running out of descriptors was last logged (once a minute
    /// at most: under a flood it happens at every accept).
    out_of_fds_logged: Option<Instant>,
}

/// What the last poll said of each socket.
struct Ready {
    listener: bool,
    wake: bool,
    conns: Vec<Token>,
}

impl Server {
    /// Serves until polling itself fails.
    fn run(&mut self) -> crate::error::Result<()> {
        loop {
            let now = Instant::now();
            self.expire(now);
            let ready = self.poll(now).map_err(|errno| Error::Listen {
                addr: self.addr.to_string(),
                source: std::io::Error::from(errno),
            })?;
            if ready.wake {
                self.take_answers();
            }
            for token in ready.conns {
                self.step(token);
            }
            if ready.listener {
                self.accept();
            }
        }
    }

    /// Waits for a socket or the nearest deadline.
    fn poll(&self, now: Instant) -> nix::Result<Ready> {
        let accepting = self.accept_pause.until.is_none_or(|t| t <= now);
        let mut fds = Vec::with_capacity(self.conns.len() + 2);
        fds.push(PollFd::new(self.wake.as_fd(), PollFlags::POLLIN));
        if accepting {
            fds.push(PollFd::new(self.listener.as_fd(), PollFlags::POLLIN));
        }
        let mut tokens = Vec::with_capacity(self.conns.len());
        for (token, conn) in &self.conns {
            let events = match conn.phase {
                Phase::Reading(_) | Phase::Draining(_) => PollFlags::POLLIN,
                Phase::Writing { .. } => PollFlags::POLLOUT,
                Phase::Scraping => continue,
            };
            fds.push(PollFd::new(conn.stream.as_fd(), events));
            tokens.push(*token);
        }
        let nearest = self
            .conns
            .values()
            .map(|c| c.deadline)
            .chain(self.accept_pause.until.filter(|_| !accepting))
            .min();
        let timeout = match nearest {
            // Rounded up, so that the deadline has passed when poll returns.
            Some(t) => {
                PollTimeout::try_from(t.saturating_duration_since(now) + Duration::from_millis(1))
                    .unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        match nix::poll::poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {
                return Ok(Ready {
                    listener: false,
                    wake: false,
                    conns: Vec::new(),
                })
            }
            Err(e) => return Err(e),
        }
        let fired = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        let conns_from = if accepting { 2 } else { 1 };
        Ok(Ready {
            wake: fired(&fds[0]),
            listener: accepting && fired(&fds[1]),
            conns: fds[conns_from..]
                .iter()
                .zip(tokens)
                .filter(|(fd, _)| fired(fd))
                .map(|(_, token)| token)
                .collect(),
        })
    }

    /// Ends the phases whose deadline has passed: a request not whole is
    /// answered 408, a scrape the worker did not answer 503; an answer not
    /// taken, or the drain after it, closes the connection.
    fn expire(&mut self, now: Instant) {
        let expired: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        for token in expired {
            let Some(conn) = self.conns.get_mut(&token) else {
                continue;
            };
            match conn.phase {
                Phase::Reading(_) => conn.answer(Answer::timeout(), now),
                Phase::Scraping => conn.answer(
                    Answer::plain(
                        "503 Service Unavailable",
                        "the scrape did not finish in time",
                    ),
                    now,
                ),
                Phase::Writing { .. } | Phase::Draining(_) => {
                    self.conns.remove(&token);
                    continue;
                }
            }
            self.step(token);
        }
    }

    /// Gives the worker's answers to the scrapes still waiting for them.
    fn take_answers(&mut self) {
        let mut signal = [0u8; 64];
        while matches!(self.wake.read(&mut signal), Ok(n) if n > 0) {}
        let now = Instant::now();
        let mut answered = Vec::new();
        for done in self.scraper.answers() {
            if let Some(conn) = self.conns.get_mut(&done.token) {
                if matches!(conn.phase, Phase::Scraping) {
                    conn.answer(done.answer, now);
                    answered.push(done.token);
                }
            }
        }
        // Most answers fit the socket's buffer at once.
        for token in answered {
            self.step(token);
        }
    }

    /// Does what the connection's phase can do now, and closes it when done.
    fn step(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let now = Instant::now();
        let open = match &mut conn.phase {
            Phase::Reading(received) => match read_request(&mut conn.stream, received) {
                Progress::Closed => false,
                Progress::Waiting => true,
                Progress::Whole(Route::Answer(answer)) => {
                    conn.answer(answer, now);
                    conn.write(now)
                }
                Progress::Whole(Route::Scrape(format)) => {
                    conn.phase = Phase::Scraping;
                    conn.deadline = now + SCRAPE_TIMEOUT;
                    self.scraper.ask(token, format);
                    true
                }
            },
            Phase::Scraping => true,
            Phase::Writing { .. } => conn.write(now),
            Phase::Draining(_) => conn.drain(),
        };
        if !open {
            self.conns.remove(&token);
        }
    }

    /// Takes every connection waiting on the listening socket.
    fn accept(&mut self) {
        let mut shed_for_fds = false;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    self.accept_pause.next = None;
                    shed_for_fds = false;
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if self.conns.len() >= self.capacity {
                        self.shed();
                    }
                    let token = self.next_token;
                    self.next_token += 1;
                    self.conns.insert(
                        token,
                        Conn {
                            stream,
                            phase: Phase::Reading(Vec::new()),
                            deadline: Instant::now() + READ_TIMEOUT,
                        },
                    );
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // The client gave up before we took it, or a signal.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionAborted | ErrorKind::Interrupted
                    ) => {}
                // Out of file descriptors or memory: free one connection's
                // and try once more, then pause.
                Err(e) if is_out_of_resources(&e) && !shed_for_fds && self.shed() => {
                    shed_for_fds = true;
                    let now = Instant::now();
                    if self
                        .out_of_fds_logged
                        .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
                    {
                        self.out_of_fds_logged = Some(now);
                        eprintln!(
                            "cni-rs metrics: accepting on {}: {e}; closed the oldest of {} \
                             connections for the new one",
                            self.addr,
                            self.conns.len() + 1
                        );
                    }
                }
                Err(e) => {
                    self.pause_accepting(&e);
                    return;
                }
            }
        }
    }

    /// Closes the oldest connection still reading its request (else the
    /// oldest of all): the one closest to its own deadline, and never the
    /// newcomer. False when there is none.
    fn shed(&mut self) -> bool {
        let oldest_reading = self
            .conns
            .iter()
            .find(|(_, c)| matches!(c.phase, Phase::Reading(_)))
            .map(|(t, _)| *t);
        let victim = oldest_reading.or_else(|| self.conns.keys().next().copied());
        victim.is_some_and(|t| self.conns.remove(&t).is_some())
    }

    fn pause_accepting(&mut self, error: &std::io::Error) {
        let pause = self.accept_pause.next.unwrap_or(FIRST_ACCEPT_PAUSE);
        eprintln!(
            "cni-rs metrics: accepting on {}: {error}; pausing {} ms ({} connections open)",
            self.addr,
            pause.as_millis(),
            self.conns.len()
        );
        self.accept_pause = Pause {
            until: Some(Instant::now() + pause),
            next: Some((pause * 2).min(MAX_ACCEPT_PAUSE)),
        };
    }
}

fn is_out_of_resources(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// What reading a request got to.
enum Progress {
    Waiting,
    Whole(Route),
    /// The connection failed: nothing to answer on.
    Closed,
}

/// Reads what has arrived, up to [`MAX_REQUEST`] in all.
fn read_request(stream: &mut TcpStream, received: &mut Vec<u8>) -> Progress {
    let mut chunk = [0u8; 4096];
    let mut ended = false;
    loop {
        let room = (MAX_REQUEST - received.len()).min(chunk.len());
        if room == 0 {
            break;
        }
        match stream.read(&mut chunk[..room]) {
            Ok(0) => {
                ended = true;
                break;
            }
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Progress::Closed,
        }
    }
    match http::parse(received) {
        Request::Whole(route) => Progress::Whole(route),
        Request::Partial if ended => Progress::Whole(Route::Answer(Answer::incomplete())),
        Request::Partial => Progress::Waiting,
    }
}

impl Conn {
    /// Starts sending `answer`.
    fn answer(&mut self, answer: Answer, now: Instant) {
        self.phase = Phase::Writing {
            head: answer.head(),
            body: answer.body,
            sent: 0,
        };
        self.deadline = now + WRITE_TIMEOUT;
    }

    /// Sends what the socket takes; once all is sent, shuts the writing
    /// side and drains. False when the connection is done with.
    fn write(&mut self, now: Instant) -> bool {
        let Phase::Writing { head, body, sent } = &mut self.phase else {
            return true;
        };
        let total = head.len() + body.len();
        while *sent < total {
            let rest = if *sent < head.len() {
                &head[*sent..]
            } else {
                &body.as_bytes()[*sent - head.len()..]
            };
            match self.stream.write(rest) {
                Ok(0) => return false,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if self.stream.shutdown(Shutdown::Write).is_err() {
            return false;
        }
        self.phase = Phase::Draining(0);
        self.deadline = now + DRAIN_TIMEOUT;
        self.drain()
    }

    /// Reads and drops what the client still sends. False once it is
    /// done (closed, failed, or past [`MAX_DRAIN`]).
    fn drain(&mut self) -> bool {
        let Phase::Draining(drained) = &mut self.phase else {
            return true;
        };
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    *drained += n;
                    if *drained > MAX_DRAIN {
                        return false;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }
}
