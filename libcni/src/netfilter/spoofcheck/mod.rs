//! The MAC spoof check of bridge `macspoofchk`, as the Go plugin builds it
//! (`pkg/link/spoofcheck.go`): in table `bridge nat`, base chain
//! `PREROUTING` (filter, prerouting, priority -300) holds
//! `iifname <host veth> jump cni-br-iface-<cid>-<if>`, which jumps to
//! `cni-br-iface-<cid>-<if>-mac`: `ether saddr <mac> return`, then `drop`.
//! Every rule carries the comment `macspoofchk-<cid>-<if>`. Frames from the
//! container's host veth with another source MAC are dropped.
//!
//! Laid out by the netfilter contract ([`super::route`]) with its one
//! backend: the Go plugin writes the spoof check in nf_tables only, on
//! every node, so there is no iptables file and no route to choose, and a
//! teardown has one side to visit ([`nft`]).
//!
//! ADD is one batch, replacing an earlier ADD of the same attachment;
//! DEL removes the jump rule and both chains by name, with nothing but
//! the container ID and interface name.

pub mod nft;
#[cfg(test)]
mod tests;

pub use nft::{attachments, chain_of, ref_id, BASE_CHAIN, TABLE};

use super::nft::Nft;
use crate::types::Attachment;
use crate::Result;

/// Drops frames from `host_ifname` whose source MAC is not `mac`, for the
/// attachment (`container_id`, `ifname`). Idempotent.
pub fn add(host_ifname: &str, mac: [u8; 6], container_id: &str, ifname: &str) -> Result<()> {
    nft::add(&mut Nft::open()?, host_ifname, mac, container_id, ifname)
}

/// Removes the spoof check of (`container_id`, `ifname`); nothing there is
/// success.
pub fn del(container_id: &str, ifname: &str) -> Result<()> {
    nft::del(&mut Nft::open()?, container_id, ifname)
}

/// GC: removes the spoof checks of attachments not in `valid` whose host
/// interface `is_ours` accepts (the caller's bridge ports, or interfaces
/// that no longer exist): the Go naming has no network, so the caller says
/// which interfaces belong to its network. Returns the removed references.
pub fn gc(valid: &[Attachment], is_ours: &dyn Fn(&str) -> bool) -> Result<Vec<String>> {
    nft::gc(&mut Nft::open()?, valid, is_ours)
}
