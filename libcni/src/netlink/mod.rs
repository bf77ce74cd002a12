//! A small synchronous rtnetlink client: links ([`link`]: lookup,
//! creation, attributes, state and details), bridge VLANs
//! ([`bridge_vlan`]), macvlans ([`macvlan`]), waiting on the kernel's
//! notifications ([`notify`]), addresses ([`addr`]) and routes ([`route`]);
//! policy routing rules ([`rule`]) and routes copied between tables with
//! every attribute ([`kernel_route`]); the link kinds a kernel may lack:
//! VLAN, ipvlan, dummy, VRF ([`link_kinds`]).
//!
//! This module owns the netlink socket and the request/reply exchange with
//! the kernel: sequence numbers, multipart dumps, ACKs, and turning
//! `NLMSG_ERROR` into [`Error::Kernel`] with the errno kept as the raw OS
//! error, so callers can tell "already gone" ([`is_not_found`]) or "already
//! there" ([`is_exists`]) apart from real failures.
//!
//! One [`Netlink`] talks to one network namespace: the one it was opened in.
//! [`Netlink::open_in`] creates the socket on a thread inside the namespace
//! and returns; the socket stays bound to that namespace, so no thread of
//! the caller ever moves.
//!
//! Messages are built and parsed with `netlink-packet-route`, whose API
//! changes with every minor release; none of its types appear in this
//! module's public API.

pub mod addr;
pub mod bridge_vlan;
pub mod ifb;
pub mod kernel_route;
pub mod link;
pub mod link_kinds;
pub mod macvlan;
pub mod notify;
pub mod route;
pub mod rule;
pub mod tc;

pub use addr::Address;
pub use kernel_route::KernelRoute;
pub use link::{BridgePortFlags, Link, LinkChange};
pub use route::Route;
pub use rule::Rule;

use std::io;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NlasIterator, NLMSG_DONE,
    NLMSG_ERROR, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::netns::NetNs;
use crate::{Error, Result};

/// Receive buffer size. The kernel fills dump datagrams up to 32 KiB; this
/// leaves room for single large messages.
const RECV_BUF_SIZE: usize = 64 * 1024;

/// How many times a dump that the kernel marked inconsistent
/// (`NLM_F_DUMP_INTR`, the table changed while it was read) is retried.
const DUMP_ATTEMPTS: usize = 5;

/// `NLMSGERR_ATTR_MSG`: the human-readable extended ACK message.
const NLMSGERR_ATTR_MSG: u16 = 1;

/// A rtnetlink socket bound to one network namespace.
#[derive(Debug)]
pub struct Netlink {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Netlink {
    /// Opens a `NETLINK_ROUTE` socket in the calling thread's network
    /// namespace.
    pub fn open() -> Result<Netlink> {
        let op = "open a NETLINK_ROUTE socket";
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| Error::kernel(op, e))?;
        socket.bind_auto().map_err(|e| Error::kernel(op, e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| Error::kernel(op, e))?;
        // Strict checking makes the kernel honour dump filters and reject
        // malformed requests instead of guessing. Kernels before 4.20 lack
        // it; dumps are filtered again here, so that only costs bandwidth.
        let _ = socket.set_netlink_get_strict_chk(true);
        // Extended ACKs only improve error messages.
        let _ = socket.set_ext_ack(true);
        Ok(Netlink {
            socket,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF_SIZE),
        })
    }

    /// Opens a `NETLINK_ROUTE` socket inside `ns`. The socket is created on
    /// a short-lived thread inside the namespace and stays bound to it; the
    /// caller's thread never changes namespace.
    pub fn open_in(ns: &NetNs) -> Result<Netlink> {
        ns.run(Netlink::open)?
    }

    /// Sends `msg` with `NLM_F_REQUEST | NLM_F_ACK | flags` and collects the
    /// replies up to the ACK (or `NLMSG_DONE` of a dump). A kernel error
    /// becomes [`Error::Kernel`] with `op()` as the operation and the errno
    /// as raw OS error; `op` is only called on failure. A dump the kernel
    /// marks inconsistent (`NLM_F_DUMP_INTR`) is retried a few times.
    pub(crate) fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        op: impl Fn() -> String,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        let step = step_of(&msg);
        let mut attempt = 1;
        loop {
            match crate::calllog::timed(step, || self.exchange(&msg, flags)) {
                Ok(replies) => return Ok(replies),
                Err(Failure::Interrupted) if attempt < DUMP_ATTEMPTS => attempt += 1,
                Err(f) => return Err(f.into_error(&op())),
            }
        }
    }

    /// One request and its replies.
    fn exchange(
        &mut self,
        msg: &RouteNetlinkMessage,
        flags: u16,
    ) -> std::result::Result<Vec<RouteNetlinkMessage>, Failure> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg.clone()));
        packet.finalize();
        let mut out = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut out);
        self.socket
            .send(&out, 0)
            .map_err(|e| Failure::Io(e, None))?;

        let mut replies = Vec::new();
        let mut interrupted = false;
        // A reply the crate cannot decode is kept as the error, but the
        // exchange goes on to the end so no stale reply stays queued.
        let mut undecodable: Option<String> = None;
        loop {
            self.buf.clear();
            let len = self
                .socket
                .recv(&mut self.buf, libc::MSG_TRUNC)
                .map_err(|e| Failure::Io(e, None))?;
            if len > self.buf.len() {
                return Err(Failure::Io(
                    io::Error::other(format!(
                        "netlink reply of {len} bytes does not fit the {} bytes buffer",
                        self.buf.len()
                    )),
                    None,
                ));
            }
            let mut offset = 0;
            while offset < len {
                let chunk = &self.buf[offset..len];
                let nl = NetlinkBuffer::new_checked(chunk).map_err(|e| {
                    Failure::Io(
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("bad netlink reply: {e}"),
                        ),
                        None,
                    )
                })?;
                let msg_len = nl.length() as usize;
                let msg_type = nl.message_type();
                let msg_flags = nl.flags();
                let msg_seq = nl.sequence_number();
                if msg_len < 16 || msg_len > chunk.len() {
                    return Err(Failure::Io(
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("bad netlink reply: message length {msg_len}"),
                        ),
                        None,
                    ));
                }
                offset += (msg_len + 3) & !3;
                if msg_seq != seq {
                    // A late reply to an earlier request that was abandoned.
                    continue;
                }
                let bytes = &chunk[..msg_len];
                if msg_flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                let parsed = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes);
                let parsed = match parsed {
                    Ok(p) => p,
                    Err(e) if msg_type != NLMSG_ERROR && msg_type != NLMSG_DONE => {
                        undecodable.get_or_insert_with(|| e.to_string());
                        continue;
                    }
                    Err(e) => {
                        return Err(Failure::Io(
                            io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("bad netlink reply: {e}"),
                            ),
                            None,
                        ))
                    }
                };
                match parsed.payload {
                    NetlinkPayload::InnerMessage(m) => replies.push(m),
                    NetlinkPayload::Noop => {}
                    NetlinkPayload::Overrun(_) => {
                        return Err(Failure::Io(
                            io::Error::other("netlink reported an overrun"),
                            None,
                        ))
                    }
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => finish(replies, interrupted, undecodable),
                            Some(code) => Err(Failure::Io(
                                io::Error::from_raw_os_error(-code.get()),
                                ext_ack_message_of_error(msg_flags, &e.header),
                            )),
                        }
                    }
                    NetlinkPayload::Done(d) => {
                        if d.code != 0 {
                            let ext = if msg_flags & NLM_F_ACK_TLVS != 0 {
                                ext_ack_message(&d.extended_ack)
                            } else {
                                None
                            };
                            return Err(Failure::Io(io::Error::from_raw_os_error(-d.code), ext));
                        }
                        return finish(replies, interrupted, undecodable);
                    }
                    // `NetlinkPayload` is non-exhaustive.
                    _ => {}
                }
            }
        }
    }
}

/// What went wrong in one exchange.
enum Failure {
    /// The kernel or the socket failed; with the extended ACK message.
    Io(io::Error, Option<String>),
    /// The dump was inconsistent (`NLM_F_DUMP_INTR`) and may be retried.
    Interrupted,
}

impl Failure {
    fn into_error(self, op: &str) -> Error {
        match self {
            Failure::Io(e, Some(ext)) => Error::kernel(format!("{op} ({ext})"), e),
            Failure::Io(e, None) => Error::kernel(op, e),
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

fn finish(
    replies: Vec<RouteNetlinkMessage>,
    interrupted: bool,
    undecodable: Option<String>,
) -> std::result::Result<Vec<RouteNetlinkMessage>, Failure> {
    if interrupted {
        return Err(Failure::Interrupted);
    }
    if let Some(e) = undecodable {
        return Err(Failure::Io(
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("cannot decode a reply: {e}"),
            ),
            None,
        ));
    }
    Ok(replies)
}

/// The extended ACK message of an `NLMSG_ERROR`, whose payload is the
/// request's header (and body, unless capped) followed by the TLVs.
fn ext_ack_message_of_error(flags: u16, payload: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    let request_len = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        let len = payload.get(..4)?;
        u32::from_ne_bytes([len[0], len[1], len[2], len[3]]) as usize
    };
    ext_ack_message(payload.get((request_len + 3) & !3..)?)
}

/// `NLMSGERR_ATTR_MSG` among extended ACK TLVs.
fn ext_ack_message(tlvs: &[u8]) -> Option<String> {
    NlasIterator::new(tlvs)
        .filter_map(|nla| nla.ok())
        .find(|nla| nla.kind() == NLMSGERR_ATTR_MSG)
        .map(|nla| {
            String::from_utf8_lossy(nla.value())
                .trim_end_matches('\0')
                .to_string()
        })
        .filter(|m| !m.is_empty())
}

/// The call-log step a request belongs to ([`crate::calllog`]).
fn step_of(msg: &RouteNetlinkMessage) -> crate::calllog::Step {
    use crate::calllog::Step;
    use RouteNetlinkMessage as M;
    match msg {
        M::NewAddress(_) | M::DelAddress(_) | M::GetAddress(_) => Step::AddressesRoutes,
        M::NewRoute(_) | M::DelRoute(_) | M::GetRoute(_) => Step::AddressesRoutes,
        M::NewRule(_) | M::DelRule(_) | M::GetRule(_) => Step::AddressesRoutes,
        M::NewNeighbour(_) | M::DelNeighbour(_) | M::GetNeighbour(_) => Step::AddressesRoutes,
        M::NewQueueDiscipline(_)
        | M::DelQueueDiscipline(_)
        | M::GetQueueDiscipline(_)
        | M::NewTrafficClass(_)
        | M::DelTrafficClass(_)
        | M::GetTrafficClass(_)
        | M::NewTrafficFilter(_)
        | M::DelTrafficFilter(_)
        | M::GetTrafficFilter(_)
        | M::NewTrafficChain(_)
        | M::DelTrafficChain(_)
        | M::GetTrafficChain(_) => Step::Tc,
        _ => Step::Links,
    }
}

/// The errno of a failed kernel operation, if `e` is one.
pub fn errno(e: &Error) -> Option<i32> {
    match e {
        Error::Kernel { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

/// Whether `e` says the object is already gone: no such device (`ENODEV`),
/// entry (`ENOENT`), process/route (`ESRCH`) or address (`EADDRNOTAVAIL`).
/// DEL treats that as success.
pub fn is_not_found(e: &Error) -> bool {
    matches!(
        errno(e),
        Some(libc::ENODEV | libc::ENOENT | libc::ESRCH | libc::EADDRNOTAVAIL)
    )
}

/// Whether `e` says the object already exists (`EEXIST`).
pub fn is_exists(e: &Error) -> bool {
    errno(e) == Some(libc::EEXIST)
}

/// The full-kernel policy of the `fullkernel_*` tests, beside the
/// privileged-test policy ([`crate::netns::testing`]).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::Netlink;
    use crate::netns::testing::{new_netns, privileged};
    use std::io::Write;

    /// Whether a `fullkernel_*` test can run: root, and a kernel with the
    /// link kinds these machines lack ([`kernel_is_full`]). Without them it
    /// says loudly that it runs in the full-kernel VM step of
    /// `scripts/test.sh` and returns false. That is a failure inside the
    /// VM (`FULLKERNEL_GUEST=1`), and under `CI=true`, where a
    /// `fullkernel_*` test that passes empty would hide a skipped step:
    /// `scripts/test.sh` leaves them out here (`--skip fullkernel_`) and
    /// runs them in the VM.
    pub fn full_kernel(test: &str) -> bool {
        if !privileged(test) {
            return false;
        }
        if kernel_is_full() {
            return true;
        }
        if std::env::var("FULLKERNEL_GUEST").as_deref() == Ok("1") {
            panic!("{test}: inside the full-kernel VM, and the kernel lacks a link kind or bridge VLAN filtering");
        }
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!(
                "{test}: needs 802.1Q VLAN, ipvlan, dummy, VRF and bridge VLAN filtering, which \
                 this kernel lacks, and CI=true: fullkernel_* tests run in the full-kernel VM \
                 step of scripts/test.sh (outside it, pass --skip fullkernel_)"
            );
        }
        let _ = writeln!(
            std::io::stderr(),
            "!!! {test}: needs 802.1Q VLAN, ipvlan, dummy, VRF and bridge VLAN filtering, \
             which this kernel lacks: it runs in the full-kernel VM step of scripts/test.sh !!!"
        );
        false
    }

    /// Whether the kernel has 802.1Q VLAN, ipvlan, dummy and VRF links and
    /// bridge VLAN filtering (probed once per process, in a throwaway
    /// namespace; needs root).
    pub fn kernel_is_full() -> bool {
        static FULL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FULL.get_or_init(|| {
            let ns = new_netns();
            let mut nl = Netlink::open_in(&ns).expect("netlink in a new namespace");
            let kinds = ["vlan", "ipvlan", "dummy", "vrf"]
                .iter()
                .all(|k| nl.kernel_has_kind(k).expect("probe a link kind"));
            kinds && nl.add_bridge_vlan_filtering("probebr0", None).is_ok()
        })
    }
}

/// An empty link message for the link with `index` (0: none, for a new
/// link or a dump).
fn link_message(index: u32) -> netlink_packet_route::link::LinkMessage {
    let mut msg = netlink_packet_route::link::LinkMessage::default();
    msg.header.index = index;
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    #[test]
    fn netlink_errno_helpers_read_the_raw_os_error() {
        let gone = Error::kernel("delete link 7", io::Error::from_raw_os_error(libc::ENODEV));
        assert_eq!(errno(&gone), Some(libc::ENODEV));
        assert!(is_not_found(&gone));
        assert!(!is_exists(&gone));
        let there = Error::kernel(
            "add bridge \"cni0\"",
            io::Error::from_raw_os_error(libc::EEXIST),
        );
        assert!(is_exists(&there));
        assert!(!is_not_found(&there));
        assert_eq!(errno(&Error::InvalidEnv("CNI_NETNS".into())), None);
    }

    #[test]
    fn netlink_ext_ack_message_is_read_from_capped_and_full_errors() {
        // nlmsghdr of 20 bytes (a 4-byte body), then NLMSGERR_ATTR_MSG "bad\0".
        let mut full = Vec::new();
        full.extend_from_slice(&20u32.to_ne_bytes());
        full.extend_from_slice(&[0; 16]);
        full.extend_from_slice(&8u16.to_ne_bytes());
        full.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        full.extend_from_slice(b"bad\0");
        assert_eq!(
            ext_ack_message_of_error(NLM_F_ACK_TLVS, &full).as_deref(),
            Some("bad")
        );
        let mut capped = full[..16].to_vec();
        capped.extend_from_slice(&full[20..]);
        assert_eq!(
            ext_ack_message_of_error(NLM_F_ACK_TLVS | NLM_F_CAPPED, &capped).as_deref(),
            Some("bad")
        );
        assert_eq!(ext_ack_message_of_error(0, &full), None);
    }

    #[test]
    fn netlink_open_in_binds_the_socket_to_the_namespace() {
        if !privileged("netlink_open_in_binds_the_socket_to_the_namespace") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        // A fresh namespace holds exactly one link: its loopback.
        let links = nl.links().unwrap();
        assert_eq!(links.len(), 1, "{links:?}");
        assert_eq!(links[0].name, "lo");
        assert_eq!(links[0].index, 1);
        assert!(!links[0].up);
    }
}
