//! A small synchronous `NETLINK_NETFILTER` client: the transport under
//! nf_tables ([`super::nft`]) and conntrack ([`super::conntrack`]).
//!
//! It owns the socket, sequence numbers and the reading of replies: one
//! request with its ACK or its dump, and nf_tables batches, where every
//! message is acknowledged on its own and the kernel applies the batch
//! whole or not at all. Kernel errors keep their errno as the raw OS error
//! ([`crate::netlink::is_not_found`], [`crate::netlink::is_exists`] apply).

use std::io;
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use super::wire::{AttrIter, Attrs};
use crate::netns::NetNs;
use crate::{Error, Result};

const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_ECHO: u16 = 0x8;
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLM_F_EXCL: u16 = 0x200;
pub(crate) const NLM_F_CREATE: u16 = 0x400;
pub(crate) const NLM_F_APPEND: u16 = 0x800;
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;

/// `NFNL_MSG_BATCH_BEGIN` / `END`.
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
/// nfnetlink subsystems.
pub(crate) const NFNL_SUBSYS_CTNETLINK: u16 = 1;
pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;

/// `NLMSGERR_ATTR_MSG`.
const NLMSGERR_ATTR_MSG: u16 = 1;

/// Receive buffer per `recv`: dumps come in datagrams of up to 32 KiB.
const RECV_BUF_SIZE: usize = 64 * 1024;
/// A reply the kernel owes us never takes this long; past it, give up.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries of a dump the kernel marked inconsistent (`NLM_F_DUMP_INTR`).
const DUMP_ATTEMPTS: usize = 5;

/// One nfnetlink message to send.
#[derive(Debug, Clone)]
pub struct Request {
    /// `(subsystem << 8) | message type`.
    pub ty: u16,
    /// `NLM_F_*` beyond `NLM_F_REQUEST` (and `NLM_F_ACK` in batches).
    pub flags: u16,
    /// `nfgen_family`: the table family, or the address family.
    pub family: u8,
    pub attrs: Attrs,
    /// What this message does, for error messages ("add chain ...").
    pub what: String,
}

/// One message received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// `(subsystem << 8) | message type`.
    pub ty: u16,
    pub flags: u16,
    pub family: u8,
    /// The attributes after the `nfgenmsg` header.
    pub attrs: Vec<u8>,
}

impl Reply {
    pub fn attrs(&self) -> AttrIter<'_> {
        AttrIter::new(&self.attrs)
    }
}

/// A `NETLINK_NETFILTER` socket bound to one network namespace.
#[derive(Debug)]
pub struct NfNetlink {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl NfNetlink {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> Result<NfNetlink> {
        let op = "open a NETLINK_NETFILTER socket";
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(|e| Error::kernel(op, e))?;
        socket.bind_auto().map_err(|e| Error::kernel(op, e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| Error::kernel(op, e))?;
        let _ = socket.set_ext_ack(true);
        set_recv_timeout(&socket, REPLY_TIMEOUT).map_err(|e| Error::kernel(op, e))?;
        // Seed the sequence from the clock, so replies to an earlier socket
        // of this port id can never be taken for ours.
        let seq = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(1);
        Ok(NfNetlink {
            socket,
            seq,
            buf: Vec::with_capacity(RECV_BUF_SIZE),
        })
    }

    /// Opens a socket inside `ns`; it stays bound to that namespace and the
    /// caller's thread never moves.
    pub fn open_in(ns: &NetNs) -> Result<NfNetlink> {
        ns.run(NfNetlink::open)?
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        if self.seq == 0 {
            self.seq = 1;
        }
        self.seq
    }

    /// Sends one request (with `NLM_F_ACK`) and returns the messages it
    /// produced up to the ACK or the end of the dump. A dump the kernel
    /// marks inconsistent is retried.
    pub fn request(&mut self, req: &Request) -> Result<Vec<Reply>> {
        let mut attempt = 1;
        loop {
            match crate::calllog::timed(crate::calllog::Step::Netfilter, || self.exchange(req)) {
                Err(Failure::Interrupted) if attempt < DUMP_ATTEMPTS => attempt += 1,
                Err(f) => return Err(f.into_error(&req.what)),
                Ok(r) => return Ok(r),
            }
        }
    }

    fn exchange(&mut self, req: &Request) -> std::result::Result<Vec<Reply>, Failure> {
        let seq = self.next_seq();
        let mut out = Vec::new();
        encode(
            &mut out,
            req.ty,
            NLM_F_REQUEST | NLM_F_ACK | req.flags,
            seq,
            req.family,
            0,
            req.attrs.bytes(),
        );
        self.socket
            .send(&out, 0)
            .map_err(|e| Failure::Io(e, None))?;
        let mut replies = Vec::new();
        let mut interrupted = false;
        loop {
            for msg in self.recv_batch()? {
                if msg.seq != seq {
                    continue;
                }
                if msg.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match msg.ty {
                    NLMSG_ERROR => {
                        return match msg.error {
                            Some((0, _)) => finish(replies, interrupted),
                            Some((errno, ext)) => {
                                Err(Failure::Io(io::Error::from_raw_os_error(errno), ext))
                            }
                            None => Err(Failure::bad("truncated NLMSG_ERROR")),
                        }
                    }
                    NLMSG_DONE => {
                        if let Some((errno, ext)) = msg.error.filter(|(e, _)| *e != 0) {
                            return Err(Failure::Io(io::Error::from_raw_os_error(errno), ext));
                        }
                        return finish(replies, interrupted);
                    }
                    NLMSG_OVERRUN => return Err(Failure::bad("netlink overrun")),
                    _ => replies.push(msg.reply),
                }
            }
        }
    }

    /// Sends `msgs` as one nf_tables batch and waits for the ACK of every
    /// message. The kernel commits the batch only if every message
    /// succeeded; otherwise nothing of it is applied, and the error of the
    /// first failing message is returned, naming what it did.
    pub fn batch(&mut self, msgs: &[Request]) -> Result<()> {
        self.batch_echo(msgs).map(|_| ())
    }

    /// [`NfNetlink::batch`], also returning the messages the kernel sent
    /// back for requests with `NLM_F_ECHO` (by the request's index). The
    /// kernel sends them while it commits, before the acknowledgements, so
    /// they are all in once every request is acknowledged.
    pub fn batch_echo(&mut self, msgs: &[Request]) -> Result<Vec<(usize, Reply)>> {
        crate::calllog::timed(crate::calllog::Step::Netfilter, || {
            self.batch_echo_untimed(msgs)
        })
    }

    fn batch_echo_untimed(&mut self, msgs: &[Request]) -> Result<Vec<(usize, Reply)>> {
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let begin = self.next_seq();
        encode(
            &mut out,
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            begin,
            0,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
        let mut pending = std::collections::BTreeMap::new();
        for (i, m) in msgs.iter().enumerate() {
            let seq = self.next_seq();
            encode(
                &mut out,
                m.ty,
                NLM_F_REQUEST | NLM_F_ACK | m.flags,
                seq,
                m.family,
                0,
                m.attrs.bytes(),
            );
            pending.insert(seq, i);
        }
        let index_of = pending.clone();
        let mut echoed = Vec::new();
        let end = self.next_seq();
        encode(
            &mut out,
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            end,
            0,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
        // Every ACK is queued before send() returns; make room for them all.
        let want = (msgs.len() * 1024 + 64 * 1024).max(RECV_BUF_SIZE);
        set_buffers(&self.socket, out.len() + 4096, want);
        self.socket
            .send(&out, 0)
            .map_err(|e| Error::kernel("send an nf_tables batch", e))?;

        let mut first_error: Option<(usize, io::Error, Option<String>)> = None;
        while !pending.is_empty() {
            let msgs_in = self
                .recv_batch()
                .map_err(|f| f.into_error("read the nf_tables batch acknowledgements"))?;
            for msg in msgs_in {
                if msg.ty != NLMSG_ERROR {
                    if let Some(&index) = index_of.get(&msg.seq) {
                        if msgs[index].flags & NLM_F_ECHO != 0 && msg.ty == msgs[index].ty {
                            echoed.push((index, msg.reply));
                        }
                    }
                    continue;
                }
                let Some(index) = pending.remove(&msg.seq) else {
                    // An error for the batch as a whole (begin or end).
                    if msg.seq == begin || msg.seq == end {
                        if let Some((errno, ext)) = msg.error.filter(|(e, _)| *e != 0) {
                            let e = io::Error::from_raw_os_error(errno);
                            return Err(with_ext(
                                Error::kernel("nf_tables batch", e),
                                ext.as_deref(),
                            ));
                        }
                    }
                    continue;
                };
                match msg.error {
                    Some((0, _)) => {}
                    Some((errno, ext)) => {
                        let better = first_error.as_ref().is_none_or(|(i, _, _)| index < *i);
                        if better {
                            first_error = Some((index, io::Error::from_raw_os_error(errno), ext));
                        }
                    }
                    None => {
                        first_error.get_or_insert((
                            index,
                            io::Error::new(io::ErrorKind::InvalidData, "truncated ACK"),
                            None,
                        ));
                    }
                }
            }
        }
        match first_error {
            None => Ok(echoed),
            Some((index, e, ext)) => Err(with_ext(
                Error::kernel(format!("nf_tables: {}", msgs[index].what), e),
                ext.as_deref(),
            )),
        }
    }

    /// Reads one datagram and splits it into messages.
    fn recv_batch(&mut self) -> std::result::Result<Vec<Received>, Failure> {
        self.buf.clear();
        if self.buf.capacity() < RECV_BUF_SIZE {
            self.buf.reserve(RECV_BUF_SIZE);
        }
        let len = loop {
            match self.socket.recv(&mut self.buf, libc::MSG_TRUNC) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(Failure::Io(
                        io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no reply from the kernel within {REPLY_TIMEOUT:?}"),
                        ),
                        None,
                    ))
                }
                Err(e) => return Err(Failure::Io(e, None)),
            }
        };
        if len > self.buf.len() {
            return Err(Failure::bad(&format!(
                "netlink message of {len} bytes does not fit the {} bytes buffer",
                self.buf.len()
            )));
        }
        parse_datagram(&self.buf[..len])
    }
}

/// One message of a datagram, decoded far enough to route it.
struct Received {
    ty: u16,
    flags: u16,
    seq: u32,
    /// For `NLMSG_ERROR` and `NLMSG_DONE` with an error: the positive errno
    /// (0 for an ACK) and the extended ACK message.
    error: Option<(i32, Option<String>)>,
    reply: Reply,
}

fn parse_datagram(buf: &[u8]) -> std::result::Result<Vec<Received>, Failure> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + NLMSG_HDRLEN <= buf.len() {
        let h = &buf[off..];
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if len < NLMSG_HDRLEN || len > h.len() {
            return Err(Failure::bad(&format!("bad netlink message length {len}")));
        }
        let ty = u16::from_ne_bytes([h[4], h[5]]);
        let flags = u16::from_ne_bytes([h[6], h[7]]);
        let seq = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
        let body = &h[NLMSG_HDRLEN..len];
        let error = match ty {
            NLMSG_ERROR => parse_error(flags, body),
            NLMSG_DONE if body.len() >= 4 => {
                let code = i32::from_ne_bytes([body[0], body[1], body[2], body[3]]);
                let ext = if flags & NLM_F_ACK_TLVS != 0 {
                    ext_ack_message(&body[4..])
                } else {
                    None
                };
                Some((-code, ext))
            }
            _ => None,
        };
        let (family, attrs) = if ty >= 0x10 && body.len() >= NFGENMSG_LEN {
            (body[0], body[NFGENMSG_LEN..].to_vec())
        } else {
            (0, Vec::new())
        };
        out.push(Received {
            ty,
            flags,
            seq,
            error,
            reply: Reply {
                ty,
                flags,
                family,
                attrs,
            },
        });
        off += (len + 3) & !3;
    }
    Ok(out)
}

/// `struct nlmsgerr`: the negative errno, then the request's header (and
/// body unless capped), then extended ACK TLVs.
fn parse_error(flags: u16, body: &[u8]) -> Option<(i32, Option<String>)> {
    let code = i32::from_ne_bytes(body.get(..4)?.try_into().ok()?);
    let ext = if flags & NLM_F_ACK_TLVS != 0 {
        let req = body.get(4..)?;
        let req_len = if flags & NLM_F_CAPPED != 0 {
            NLMSG_HDRLEN
        } else {
            u32::from_ne_bytes(req.get(..4)?.try_into().ok()?) as usize
        };
        req.get((req_len + 3) & !3..).and_then(ext_ack_message)
    } else {
        None
    };
    Some((-code, ext))
}

fn ext_ack_message(tlvs: &[u8]) -> Option<String> {
    AttrIter::new(tlvs)
        .find(NLMSGERR_ATTR_MSG)
        .map(|a| a.str())
        .filter(|m| !m.is_empty())
}

fn encode(out: &mut Vec<u8>, ty: u16, flags: u16, seq: u32, family: u8, res_id: u16, attrs: &[u8]) {
    let len = NLMSG_HDRLEN + NFGENMSG_LEN + attrs.len();
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.push(family);
    out.push(0); // NFNETLINK_V0
    out.extend_from_slice(&res_id.to_be_bytes());
    out.extend_from_slice(attrs);
    out.resize((out.len() + 3) & !3, 0);
}

fn set_recv_timeout(socket: &Socket, timeout: Duration) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: setsockopt reads `tv` for the given length only.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Grows the send and receive buffers for a large batch. As root the
/// `*FORCE` variants pass the sysctl limits; failures only risk `ENOBUFS`
/// on very large batches, which is then reported.
fn set_buffers(socket: &Socket, send: usize, recv: usize) {
    use std::os::fd::AsRawFd;
    let set = |opt: libc::c_int, force: libc::c_int, size: usize| {
        let v = size.min(i32::MAX as usize) as libc::c_int;
        for o in [force, opt] {
            // SAFETY: setsockopt reads one c_int.
            let rc = unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::SOL_SOCKET,
                    o,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                return;
            }
        }
    };
    if send > 200 * 1024 {
        set(libc::SO_SNDBUF, libc::SO_SNDBUFFORCE, send);
    }
    if recv > 200 * 1024 {
        set(libc::SO_RCVBUF, libc::SO_RCVBUFFORCE, recv);
    }
}

enum Failure {
    Io(io::Error, Option<String>),
    Interrupted,
}

impl Failure {
    fn bad(msg: &str) -> Failure {
        Failure::Io(
            io::Error::new(io::ErrorKind::InvalidData, msg.to_string()),
            None,
        )
    }

    fn into_error(self, op: &str) -> Error {
        match self {
            Failure::Io(e, ext) => with_ext(Error::kernel(op, e), ext.as_deref()),
            Failure::Interrupted => Error::kernel(
                op,
                io::Error::new(
                    io::ErrorKind::Interrupted,
                    format!("the dump changed while being read, {DUMP_ATTEMPTS} times"),
                ),
            ),
        }
    }
}

fn finish(replies: Vec<Reply>, interrupted: bool) -> std::result::Result<Vec<Reply>, Failure> {
    if interrupted {
        Err(Failure::Interrupted)
    } else {
        Ok(replies)
    }
}

/// Appends the kernel's extended ACK message to the operation.
fn with_ext(e: Error, ext: Option<&str>) -> Error {
    match (e, ext) {
        (Error::Kernel { op, source }, Some(ext)) => Error::Kernel {
            op: format!("{op} ({ext})"),
            source,
        },
        (e, _) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_messages_carry_the_nfgenmsg_header() {
        let mut out = Vec::new();
        let mut a = Attrs::new();
        a.put_str(1, "t");
        encode(&mut out, 0x0a00, NLM_F_REQUEST, 7, 1, 10, a.bytes());
        assert_eq!(out.len(), 16 + 4 + 8);
        assert_eq!(u32::from_ne_bytes(out[0..4].try_into().unwrap()), 28);
        assert_eq!(
            &out[16..20],
            &[1, 0, 0, 10],
            "family, version, res_id big-endian"
        );
        let parsed = parse_datagram(&out).ok().unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].seq, 7);
        assert_eq!(parsed[0].reply.family, 1);
        assert_eq!(parsed[0].reply.attrs().find(1).unwrap().str(), "t");
    }

    #[test]
    fn netfilter_errors_are_read_with_their_errno() {
        // nlmsgerr: -ENOENT, then a capped request header, then "nope".
        let mut body = Vec::new();
        body.extend_from_slice(&(-libc::ENOENT).to_ne_bytes());
        body.extend_from_slice(&[0u8; 16]);
        let mut tlv = Attrs::new();
        tlv.put_str(NLMSGERR_ATTR_MSG, "nope");
        body.extend_from_slice(tlv.bytes());
        let e = parse_error(NLM_F_CAPPED | NLM_F_ACK_TLVS, &body).unwrap();
        assert_eq!(e, (libc::ENOENT, Some("nope".to_string())));
    }
}
