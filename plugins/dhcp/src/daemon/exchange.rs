//! The client's side of RFC 2131's exchanges, over the sockets of
//! [`super::packet`]: DISCOVER/OFFER/REQUEST/ACK to get a lease, REQUEST/ACK
//! to renew (unicast to the server) or rebind (broadcast), RELEASE to give
//! the address back. Messages are built and read with `dhcproto`.
//!
//! A message is sent again when no answer came: four times about 2 s
//! apart, then after 4 s, 8 s, ... up to `-resendmax`, each wait at most
//! `-timeout` and randomized by up to a second (RFC 2131 §4.1; the
//! reference's schedule), until the exchange's deadline.

use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use dhcproto::v4::{DhcpOption, Flags, Message, MessageType, Opcode, OptionCode, UnknownOption};
use dhcproto::Encodable;

use super::packet::{Sockets, Wait, BROADCAST_MAC};
use crate::ack;
use crate::config::DhcpOptions;

/// The daemon's retransmission flags.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// `-timeout`: the longest wait for the answer to one message.
    pub timeout: Duration,
    /// `-resendmax`: the longest backoff between two sends.
    pub resend_max: Duration,
    /// `-resendtimeout`: how long an acquisition tries before it fails.
    pub resend_timeout: Duration,
}

/// How many NAKs an acquisition takes before it gives up (a server NAKs a
/// REQUEST for an address it just offered to another client too).
const MAX_NAKS: u32 = 8;

/// An answer the exchange accepted.
#[derive(Debug)]
pub struct Answer {
    pub msg: Message,
    pub src: Ipv4Addr,
    pub src_mac: Option<[u8; 6]>,
}

/// How an exchange ended.
#[derive(Debug)]
pub enum Outcome {
    Ack(Answer),
    /// The server said no; its message, if it gave one.
    Nak(String),
    /// No answer before the deadline.
    TimedOut,
    /// The lease was stopped while waiting.
    Stopped,
}

/// One client on one interface for the length of an exchange.
pub struct Client<'a> {
    pub socks: &'a Sockets,
    pub mac: [u8; 6],
    pub mtu: u32,
    pub client_id: Vec<u8>,
    pub options: &'a DhcpOptions,
    pub broadcast_flag: bool,
    pub timing: Timing,
    pub wake: Option<RawFd>,
}

/// 32 random bits.
pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: fills a local buffer of its size.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    if n != 4 {
        // No entropy source: the clock's low bits vary enough for an xid.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.subsec_nanos() ^ std::process::id();
    }
    u32::from_ne_bytes(b)
}

/// The wait after send number `n` (0-based).
fn backoff(n: u32, t: &Timing) -> Duration {
    let base = if n < 4 {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(4)
            .saturating_mul(1 << (n - 4).min(16))
            .min(t.resend_max)
    };
    // Up to a second either way.
    let jitter = Duration::from_millis(u64::from(random_u32() % 2000));
    let w = (base + jitter).saturating_sub(Duration::from_secs(1));
    w.min(t.timeout).max(Duration::from_millis(100))
}

fn message_type(m: &Message) -> Option<MessageType> {
    m.opts().msg_type()
}

impl Client<'_> {
    /// A request of `kind` with the options every request carries.
    fn message(&self, kind: MessageType, xid: u32, ciaddr: Ipv4Addr) -> Message {
        let z = Ipv4Addr::UNSPECIFIED;
        let mut m = Message::new_with_id(xid, ciaddr, z, z, z, &self.mac);
        m.set_opcode(Opcode::BootRequest);
        if self.broadcast_flag && ciaddr.is_unspecified() {
            m.set_flags(Flags::default().set_broadcast());
        }
        let o = m.opts_mut();
        o.insert(DhcpOption::MessageType(kind));
        o.insert(DhcpOption::ClientIdentifier(self.client_id.clone()));
        if kind != MessageType::Release {
            let max = self.mtu.clamp(576, 1500) as u16;
            o.insert(DhcpOption::MaxMessageSize(max));
            if !self.options.request.is_empty() {
                o.insert(DhcpOption::ParameterRequestList(
                    self.options
                        .request
                        .iter()
                        .map(|c| OptionCode::from(*c))
                        .collect(),
                ));
            }
            for p in &self.options.provide {
                o.insert(DhcpOption::Unknown(UnknownOption::new(
                    OptionCode::from(p.code),
                    p.value.as_bytes().to_vec(),
                )));
            }
        } else if let Some(p) = self.options.provide.iter().find(|o| o.code == 61) {
            o.insert(DhcpOption::Unknown(UnknownOption::new(
                OptionCode::ClientIdentifier,
                p.value.as_bytes().to_vec(),
            )));
        }
        m
    }

    /// Whether `m` answers our message `xid`.
    fn answers(&self, m: &Message, xid: u32) -> bool {
        m.opcode() == Opcode::BootReply && m.xid() == xid && m.chaddr().get(..6) == Some(&self.mac)
    }

    fn send(
        &self,
        m: &Message,
        dst_mac: [u8; 6],
        src: Ipv4Addr,
        dst: Ipv4Addr,
    ) -> std::io::Result<()> {
        let bytes = m
            .to_vec()
            .map_err(|e| std::io::Error::other(format!("encode a DHCP message: {e}")))?;
        self.socks.send(dst_mac, src, dst, &bytes)
    }

    /// Sends `m` (again and again) until an answer `accept` takes comes,
    /// the deadline passes or the lease is stopped.
    fn transact(
        &self,
        m: &mut Message,
        to: (Ipv4Addr, [u8; 6]),
        deadline: Instant,
        accept: &dyn Fn(&Message, Ipv4Addr) -> bool,
    ) -> std::io::Result<Outcome> {
        let started = Instant::now();
        let mut n = 0u32;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(Outcome::TimedOut);
            }
            m.set_secs(started.elapsed().as_secs().min(u64::from(u16::MAX)) as u16);
            self.send(m, to.1, m.ciaddr(), to.0)?;
            let until = (now + backoff(n, &self.timing)).min(deadline);
            n += 1;
            loop {
                match self.socks.recv(until, self.wake)? {
                    Wait::Timeout => break,
                    Wait::Woken => return Ok(Outcome::Stopped),
                    Wait::Got(d) => {
                        let Ok(reply) = ack::decode(&d.payload) else {
                            continue;
                        };
                        if !self.answers(&reply, m.xid()) {
                            continue;
                        }
                        match message_type(&reply) {
                            Some(MessageType::Nak) => {
                                let why = match reply.opts().get(OptionCode::Message) {
                                    Some(DhcpOption::Message(s)) => s.clone(),
                                    _ => String::new(),
                                };
                                return Ok(Outcome::Nak(why));
                            }
                            _ if accept(&reply, d.src) => {
                                return Ok(Outcome::Ack(Answer {
                                    msg: reply,
                                    src: d.src,
                                    src_mac: d.src_mac,
                                }))
                            }
                            _ => continue,
                        }
                    }
                }
            }
        }
    }

    /// INIT → SELECTING → REQUESTING → BOUND: a new lease, before
    /// `deadline`. A NAK restarts with a new DISCOVER (at most
    /// `MAX_NAKS` times).
    pub fn acquire(&self, deadline: Instant) -> std::io::Result<Outcome> {
        let bcast = (Ipv4Addr::BROADCAST, BROADCAST_MAC);
        let mut naks = 0;
        let mut last_nak = String::new();
        loop {
            let mut discover =
                self.message(MessageType::Discover, random_u32(), Ipv4Addr::UNSPECIFIED);
            let offer = match self.transact(&mut discover, bcast, deadline, &|r, _| {
                message_type(r) == Some(MessageType::Offer) && !r.yiaddr().is_unspecified()
            })? {
                Outcome::Ack(o) => o,
                Outcome::Nak(_) => continue, // a NAK to a DISCOVER means nothing
                other => return Ok(other),
            };
            let server = match offer.msg.opts().get(OptionCode::ServerIdentifier) {
                Some(DhcpOption::ServerIdentifier(s)) => *s,
                _ => offer.src,
            };
            let offered = offer.msg.yiaddr();
            // Same xid as the DISCOVER: the REQUEST answers its OFFER.
            let mut request =
                self.message(MessageType::Request, discover.xid(), Ipv4Addr::UNSPECIFIED);
            request
                .opts_mut()
                .insert(DhcpOption::RequestedIpAddress(offered));
            request
                .opts_mut()
                .insert(DhcpOption::ServerIdentifier(server));
            match self.transact(&mut request, bcast, deadline, &|r, _| {
                message_type(r) == Some(MessageType::Ack) && r.yiaddr() == offered
            })? {
                Outcome::Nak(why) => {
                    naks += 1;
                    last_nak = why;
                    if naks >= MAX_NAKS {
                        return Ok(Outcome::Nak(last_nak));
                    }
                }
                Outcome::Ack(mut a) => {
                    if a.src_mac.is_none() {
                        a.src_mac = offer.src_mac;
                    }
                    return Ok(Outcome::Ack(a));
                }
                other => {
                    if naks > 0 && matches!(other, Outcome::TimedOut) {
                        return Ok(Outcome::Nak(last_nak));
                    }
                    return Ok(other);
                }
            }
        }
    }

    /// RENEWING (`server` given: unicast to it, through `server_mac`) or
    /// REBINDING (broadcast): a REQUEST for `address`, before `deadline`.
    pub fn renew(
        &self,
        address: Ipv4Addr,
        server: Option<(Ipv4Addr, [u8; 6])>,
        deadline: Instant,
    ) -> std::io::Result<Outcome> {
        let mut request = self.message(MessageType::Request, random_u32(), address);
        let to = server.unwrap_or((Ipv4Addr::BROADCAST, BROADCAST_MAC));
        self.transact(&mut request, to, deadline, &|r, _| {
            message_type(r) == Some(MessageType::Ack) && r.yiaddr() == address
        })
    }

    /// DHCPRELEASE of `address` to `server` (through `server_mac`, or as
    /// a broadcast frame when it is unknown). No answer comes.
    pub fn release(
        &self,
        address: Ipv4Addr,
        server: Ipv4Addr,
        server_mac: Option<[u8; 6]>,
    ) -> std::io::Result<()> {
        let mut m = self.message(MessageType::Release, random_u32(), address);
        m.opts_mut().insert(DhcpOption::ServerIdentifier(server));
        self.send(&m, server_mac.unwrap_or(BROADCAST_MAC), address, server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_follows_the_schedule() {
        let t = Timing {
            timeout: Duration::from_secs(10),
            resend_max: Duration::from_secs(62),
            resend_timeout: Duration::from_secs(208),
        };
        for n in 0..4 {
            let w = backoff(n, &t);
            assert!(
                w >= Duration::from_secs(1) && w <= Duration::from_secs(3),
                "{n}: {w:?}"
            );
        }
        let w = backoff(4, &t);
        assert!(
            w >= Duration::from_secs(3) && w <= Duration::from_secs(5),
            "{w:?}"
        );
        assert!(
            backoff(9, &t) <= Duration::from_secs(10),
            "capped by -timeout"
        );
        let slow = Timing {
            timeout: Duration::from_secs(600),
            ..t
        };
        assert!(
            backoff(20, &slow) <= Duration::from_secs(63),
            "capped by -resendmax"
        );
        let fast = Timing {
            timeout: Duration::from_millis(300),
            ..t
        };
        assert_eq!(backoff(0, &fast), Duration::from_millis(300));
    }
}
