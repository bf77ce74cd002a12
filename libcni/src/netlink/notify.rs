//! Waiting on the kernel instead of sleeping: a socket subscribed to
//! rtnetlink multicast groups (link and address changes).

use std::os::fd::AsRawFd;

use crate::netns::NetNs;
use crate::Result;

/// rtnetlink multicast group of link changes (`RTNLGRP_LINK`).
pub const RTNLGRP_LINK: u32 = 1;
/// rtnetlink multicast group of IPv6 address changes (`RTNLGRP_IPV6_IFADDR`).
pub const RTNLGRP_IPV6_IFADDR: u32 = 9;

/// A netlink socket subscribed to rtnetlink multicast groups
/// ([`RTNLGRP_LINK`], [`RTNLGRP_IPV6_IFADDR`], ...), to wait on the
/// kernel's answer instead of sleeping: subscribe, read the state, and only
/// if it is not there yet, [`Notifications::wait_until`] something changes
/// and read again. Subscribing before reading means no change is missed.
#[derive(Debug)]
pub struct Notifications {
    socket: netlink_sys::Socket,
    buf: Vec<u8>,
}

impl Notifications {
    /// Subscribes to `groups` in the calling thread's namespace.
    pub fn open(groups: &[u32]) -> Result<Notifications> {
        let op = "open a NETLINK_ROUTE notification socket";
        let mut socket = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_ROUTE)
            .map_err(|e| crate::Error::kernel(op, e))?;
        socket
            .bind_auto()
            .map_err(|e| crate::Error::kernel(op, e))?;
        for &group in groups {
            socket
                .add_membership(group)
                .map_err(|e| crate::Error::kernel(format!("{op}: join group {group}"), e))?;
        }
        socket
            .set_non_blocking(true)
            .map_err(|e| crate::Error::kernel(op, e))?;
        Ok(Notifications {
            socket,
            buf: Vec::with_capacity(64 * 1024),
        })
    }

    /// Subscribes to `groups` inside `ns` (the socket stays bound to it).
    pub fn open_in(ns: &NetNs, groups: &[u32]) -> Result<Notifications> {
        ns.run(|| Notifications::open(groups))?
    }

    /// Waits until a notification arrives or `deadline` passes, then
    /// discards every queued notification (the caller reads the state
    /// again). Returns `false` on timeout. A lost-notification overrun
    /// (`ENOBUFS`) counts as "something changed".
    pub fn wait_until(&mut self, deadline: std::time::Instant) -> Result<bool> {
        let fd = self.socket.as_raw_fd();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(crate::Error::kernel("wait for netlink notifications", e));
            }
            if n == 0 {
                continue; // the loop re-checks the deadline
            }
            let mut got = false;
            loop {
                self.buf.clear();
                match self.socket.recv(&mut self.buf, libc::MSG_DONTWAIT) {
                    Ok(_) => got = true,
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => got = true,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(crate::Error::kernel("read netlink notifications", e)),
                }
            }
            if got {
                return Ok(true);
            }
        }
    }
}
