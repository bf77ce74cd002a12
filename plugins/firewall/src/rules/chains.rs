//! The names both iptables paths write: the Go plugin's chains and how
//! iptables-save prints a host address.

use std::net::IpAddr;

/// The Go plugin's chain of per-container accept rules.
pub const FORWARD_CHAIN: &str = "CNI-FORWARD";
/// The default admin override chain (`iptablesAdminChainName`).
pub const DEFAULT_ADMIN_CHAIN: &str = "CNI-ADMIN";
/// Our previous release's owner records.
pub const OWNERS_CHAIN: &str = "CNI-FORWARD-OWNERS";
/// The Go plugin's isolation chains.
pub const ISOLATION_STAGE_1: &str = "CNI-ISOLATION-STAGE-1";
pub const ISOLATION_STAGE_2: &str = "CNI-ISOLATION-STAGE-2";

/// `addr/32` or `addr/128`, as iptables-save prints a host.
pub fn host(addr: IpAddr) -> String {
    format!("{addr}/{}", if addr.is_ipv4() { 32 } else { 128 })
}
