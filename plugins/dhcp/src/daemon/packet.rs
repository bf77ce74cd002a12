//! The sockets one DHCP exchange uses, opened inside the container's
//! namespace on its interface (a thread enters the namespace, opens them
//! and ends; a socket stays in the namespace it was made in):
//!
//! - an `AF_PACKET` datagram socket bound to the interface, with a
//!   classic BPF filter passing only unfragmented UDP to port 68. Every
//!   message goes out through it, IPv4 and UDP headers built here, to the
//!   Ethernet broadcast address or to the server's MAC; every answer comes
//!   in through it, whether or not the interface has an address yet (a
//!   server answers a client without one at the offered address);
//! - a UDP socket bound to port 68 on the interface (`SO_BINDTODEVICE`),
//!   which only keeps the kernel from answering the server's unicasts with
//!   ICMP port-unreachable; its datagrams are read too. It is skipped when
//!   something else in the namespace holds the port.
//!
//! Checksums of received packets are not verified: on veth and macvlan a
//! locally sent packet is seen before its checksum is filled in.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use libcni::netns::NetNs;
use libcni::Error;

pub const CLIENT_PORT: u16 = 68;
pub const SERVER_PORT: u16 = 67;
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];

const ETH_P_IP: u16 = 0x0800;
const IPPROTO_UDP: u8 = 17;

/// A datagram that arrived: the UDP payload, the sender's address and,
/// from the packet socket, its link-layer address.
#[derive(Debug)]
pub struct Datagram {
    pub payload: Vec<u8>,
    pub src: Ipv4Addr,
    pub src_mac: Option<[u8; 6]>,
}

/// What a wait for a datagram ended with.
#[derive(Debug)]
pub enum Wait {
    Got(Datagram),
    Timeout,
    /// The wake descriptor became readable (the lease is being stopped).
    Woken,
}

/// The sockets of one exchange on one interface. Dropping them closes
/// them on a thread of their own: the close of a packet socket waits for
/// an RCU grace period (milliseconds), which no ADD or DEL should wait on.
pub struct Sockets {
    packet: Option<OwnedFd>,
    udp: Option<OwnedFd>,
    ifindex: u32,
}

impl Drop for Sockets {
    fn drop(&mut self) {
        let fds = (self.packet.take(), self.udp.take());
        let closer = std::thread::Builder::new()
            .name("close".into())
            .stack_size(64 << 10)
            .spawn(move || drop(fds));
        // No thread to be had: close them here.
        drop(closer);
    }
}

fn last_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn cvt(r: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(last_error(what))
    } else {
        Ok(r)
    }
}

fn setsockopt<T>(fd: RawFd, level: i32, name: i32, value: &T, what: &str) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    cvt(r, what).map(drop)
}

/// The filter on the packet socket: IPv4 payloads (the socket is of
/// `ETH_P_IP`) that are UDP, not a fragment, to port 68.
fn bootpc_filter() -> [libc::sock_filter; 9] {
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    [
        op(0x30, 0, 0, 9),      // ldb [9]            protocol
        op(0x15, 0, 6, 17),     // jeq #17 ? next : drop
        op(0x28, 0, 0, 6),      // ldh [6]            flags, fragment offset
        op(0x45, 4, 0, 0x1fff), // jset #0x1fff ? drop : next
        op(0xb1, 0, 0, 0),      // ldxb 4*([0]&0xf)   header length
        op(0x48, 0, 0, 2),      // ldh [x+2]          UDP destination port
        op(0x15, 0, 1, u32::from(CLIENT_PORT)),
        op(0x06, 0, 0, 0xffff), // accept
        op(0x06, 0, 0, 0),      // drop
    ]
}

fn open_packet(ifindex: u32) -> io::Result<OwnedFd> {
    // Protocol 0: the socket receives nothing until bind() names the
    // protocol and the interface at once. Created with ETH_P_IP it would
    // be hooked on every interface first, and the bind would unhook it,
    // which waits for an RCU grace period (milliseconds).
    // SAFETY: plain socket(2).
    let fd = cvt(
        unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        },
        "open a packet socket",
    )?;
    // SAFETY: a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut filter = bootpc_filter();
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    setsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_ATTACH_FILTER,
        &prog,
        "attach the DHCP filter",
    )?;
    // SAFETY: zeroed sockaddr_ll, then the fields bind(2) reads.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_IP.to_be();
    sll.sll_ifindex = ifindex as i32;
    cvt(
        // SAFETY: a valid sockaddr_ll of its size.
        unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        },
        "bind the packet socket to the interface",
    )?;
    Ok(fd)
}

fn open_udp(ifname: &str) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let fd = cvt(
        unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        },
        "open a UDP socket",
    )?;
    // SAFETY: a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    setsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_REUSEADDR,
        &one,
        "SO_REUSEADDR",
    )?;
    let mut dev = [0u8; libc::IFNAMSIZ];
    dev[..ifname.len().min(libc::IFNAMSIZ - 1)]
        .copy_from_slice(&ifname.as_bytes()[..ifname.len().min(libc::IFNAMSIZ - 1)]);
    setsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_BINDTODEVICE,
        &dev,
        "SO_BINDTODEVICE",
    )?;
    // SAFETY: zeroed sockaddr_in, then the fields bind(2) reads.
    let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sin.sin_family = libc::AF_INET as u16;
    sin.sin_port = CLIENT_PORT.to_be();
    cvt(
        // SAFETY: a valid sockaddr_in of its size.
        unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sin as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        },
        "bind UDP port 68",
    )?;
    Ok(fd)
}

impl Sockets {
    /// Opens the sockets of an exchange on interface `ifindex` (`ifname`)
    /// of namespace `ns`.
    pub fn open(ns: &NetNs, ifindex: u32, ifname: &str) -> Result<Sockets, Error> {
        let name = ifname.to_string();
        ns.run(move || -> Result<Sockets, Error> {
            let packet = open_packet(ifindex).map_err(|e| {
                Error::kernel(format!("DHCP socket on {name:?} in {:?}", ns.path()), e)
            })?;
            Ok(Sockets {
                packet: Some(packet),
                udp: open_udp(&name).ok(),
                ifindex,
            })
        })?
    }

    /// Sends `payload` from `src`:68 to `dst`:67 in a frame to `dst_mac`.
    pub fn send(
        &self,
        dst_mac: [u8; 6],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        payload: &[u8],
    ) -> io::Result<()> {
        let frame = ipv4_udp(src, dst, payload);
        let packet = self
            .packet
            .as_ref()
            .ok_or_else(|| io::Error::other("closed"))?;
        // SAFETY: zeroed sockaddr_ll, then the fields sendto(2) reads.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_IP.to_be();
        sll.sll_ifindex = self.ifindex as i32;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&dst_mac);
        // SAFETY: a buffer and a sockaddr_ll we own, of the sizes given.
        let n = unsafe {
            libc::sendto(
                packet.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(last_error("send a DHCP message"));
        }
        Ok(())
    }

    /// Waits until a datagram for port 68 arrives, `deadline` passes or
    /// `wake` becomes readable.
    pub fn recv(&self, deadline: Instant, wake: Option<RawFd>) -> io::Result<Wait> {
        let packet = self
            .packet
            .as_ref()
            .ok_or_else(|| io::Error::other("closed"))?;
        loop {
            if let Some(d) = self.try_recv()? {
                return Ok(Wait::Got(d));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Wait::Timeout);
            }
            let mut fds = vec![libc::pollfd {
                fd: packet.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            if let Some(u) = &self.udp {
                fds.push(libc::pollfd {
                    fd: u.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            if let Some(w) = wake {
                fds.push(libc::pollfd {
                    fd: w,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: pollfds we own, their count.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if wake.is_some() && fds.last().is_some_and(|f| f.revents != 0) {
                return Ok(Wait::Woken);
            }
        }
    }

    /// One queued datagram, if any (a malformed packet is skipped).
    fn try_recv(&self) -> io::Result<Option<Datagram>> {
        let mut buf = vec![0u8; 65536];
        while let Some(packet) = &self.packet {
            let Some((n, sll)) = recv_queued::<libc::sockaddr_ll>(packet.as_raw_fd(), &mut buf)?
            else {
                break;
            };
            // Our own broadcasts come back as outgoing packets: not answers.
            if sll.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            if let Some((src, payload)) = parse_ipv4_udp(&buf[..n]) {
                let mac = (sll.sll_halen == 6).then(|| {
                    let mut m = [0u8; 6];
                    m.copy_from_slice(&sll.sll_addr[..6]);
                    m
                });
                return Ok(Some(Datagram {
                    payload: payload.to_vec(),
                    src,
                    src_mac: mac,
                }));
            }
        }
        // The absorber is best effort: its errors end the read.
        if let Some(u) = &self.udp {
            if let Ok(Some((n, sin))) = recv_queued::<libc::sockaddr_in>(u.as_raw_fd(), &mut buf) {
                return Ok(Some(Datagram {
                    payload: buf[..n].to_vec(),
                    src: Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                    src_mac: None,
                }));
            }
        }
        Ok(None)
    }
}

/// A socket address type `recvfrom(2)` fills in.
///
/// # Safety
/// Plain C data, for which all zero bytes is a valid value.
unsafe trait SockAddr {}
// SAFETY: a C struct of integers and byte arrays.
unsafe impl SockAddr for libc::sockaddr_ll {}
// SAFETY: a C struct of integers and byte arrays.
unsafe impl SockAddr for libc::sockaddr_in {}

/// One datagram queued on `fd` into `buf`, with its length and sender;
/// `None` when nothing is queued.
fn recv_queued<A: SockAddr>(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<(usize, A)>> {
    loop {
        // SAFETY: `A` is plain C data (`SockAddr`), valid zeroed; recvfrom(2)
        // fills it in.
        let mut addr: A = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<A>() as libc::socklen_t;
        // SAFETY: a buffer and an address we own, of the sizes given.
        let n = unsafe {
            libc::recvfrom(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
                (&mut addr as *mut A).cast(),
                &mut len,
            )
        };
        if n >= 0 {
            return Ok(Some((n as usize, addr)));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// The Internet checksum of `data` folded onto `sum`.
fn checksum(mut sum: u32, data: &[u8]) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 packet carrying `payload` in UDP from `src`:68 to `dst`:67.
pub fn ipv4_udp(src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let total = 20 + udp_len;
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&[0x45, 0x10]); // version 4, 5 words; low delay
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]); // id, no flags, no offset
    p.extend_from_slice(&[64, IPPROTO_UDP, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let ip_sum = checksum(0, &p[..20]);
    p[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    p.extend_from_slice(&CLIENT_PORT.to_be_bytes());
    p.extend_from_slice(&SERVER_PORT.to_be_bytes());
    p.extend_from_slice(&(udp_len as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    // The pseudo-header: addresses, protocol, UDP length.
    let mut pseudo = 0u32;
    for w in src.octets().chunks(2).chain(dst.octets().chunks(2)) {
        pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    pseudo += u32::from(IPPROTO_UDP) + udp_len as u32;
    let udp_sum = match checksum(pseudo, &p[20..]) {
        0 => 0xffff,
        s => s,
    };
    p[26..28].copy_from_slice(&udp_sum.to_be_bytes());
    p
}

/// The source address and UDP payload of an unfragmented IPv4 UDP packet
/// to port 68.
pub fn parse_ipv4_udp(p: &[u8]) -> Option<(Ipv4Addr, &[u8])> {
    if p.len() < 20 || p[0] >> 4 != 4 || p[9] != IPPROTO_UDP {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if ihl < 20 || total < ihl + 8 || total > p.len() {
        return None;
    }
    if u16::from_be_bytes([p[6], p[7]]) & 0x3fff != 0 {
        return None; // a fragment, or more to come
    }
    let udp = &p[ihl..total];
    if u16::from_be_bytes([udp[2], udp[3]]) != CLIENT_PORT {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if len < 8 || len > udp.len() {
        return None;
    }
    let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
    Some((src, &udp[8..len]))
}

/// An eventfd that stops the waits of a lease's exchanges: once written,
/// every later wait returns at once.
pub struct Wake(OwnedFd);

impl Wake {
    pub fn new() -> io::Result<Wake> {
        // SAFETY: plain eventfd(2).
        let fd = cvt(
            unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) },
            "eventfd",
        )?;
        // SAFETY: a descriptor we just opened and own.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fire(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Waits until `deadline` (`None`: forever) or until fired; true when fired.
    pub fn wait_until(&self, deadline: Option<Instant>) -> bool {
        loop {
            let ms = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    left.as_millis().clamp(1, i32::MAX as u128) as i32
                }
            };
            let mut pfd = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd we own.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n > 0 {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_packets_round_trip_with_valid_checksums() {
        let payload = b"hello dhcp!";
        let src = Ipv4Addr::new(10, 0, 0, 2);
        let p = ipv4_udp(src, Ipv4Addr::BROADCAST, payload);
        assert_eq!(p.len(), 20 + 8 + payload.len());
        assert_eq!(checksum(0, &p[..20]), 0, "IP header checksum");
        // Swap ports so the packet looks like an answer to port 68.
        let mut answer = p.clone();
        answer[20..22].copy_from_slice(&SERVER_PORT.to_be_bytes());
        answer[22..24].copy_from_slice(&CLIENT_PORT.to_be_bytes());
        let (s, body) = parse_ipv4_udp(&answer).unwrap();
        assert_eq!((s, body), (src, &payload[..]));
        assert!(parse_ipv4_udp(&p).is_none(), "to port 67: not ours");
        let mut frag = answer.clone();
        frag[6] = 0x20; // more fragments
        assert!(parse_ipv4_udp(&frag).is_none());
        assert!(parse_ipv4_udp(&answer[..25]).is_none());
    }
}
