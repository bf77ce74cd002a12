//! What iptables-nft's encoding shares between the two tables we write
//! natively: the filter table ([`super::firewall::native`]) and the nat
//! table ([`super::xt_nat`]). Each owns its rule shapes; these are the
//! pieces common to both: the family of a table, the `comment` match's
//! info, reading values out of expression data, and when a batch is
//! retried.

use super::nft::wire::AttrIter;
use super::nft::Family;
use crate::Error;

/// How often a batch is tried when the table changed between our read
/// and our batch (a chain created or a rule deleted meanwhile).
pub const ATTEMPTS: usize = 3;

/// `sizeof(struct xt_comment_info)`: `char comment[256]`.
const COMMENT_INFO_LEN: usize = 256;

/// iptables-nft's table family: `ip` or `ip6`.
pub fn family(v6: bool) -> Family {
    if v6 {
        Family::Ip6
    } else {
        Family::Ip
    }
}

/// `-m comment --comment <c>`'s info (NUL-terminated, cut at 255 bytes).
pub fn comment_info(c: &str) -> Vec<u8> {
    let mut info = vec![0u8; COMMENT_INFO_LEN];
    let b = c.as_bytes();
    let n = b.len().min(COMMENT_INFO_LEN - 1);
    info[..n].copy_from_slice(&b[..n]);
    info
}

/// The value of a nested `NFTA_DATA_VALUE` (in attribute `ty` of `data`).
pub fn data_value(data: &[u8], ty: u16) -> Option<Vec<u8>> {
    let a = AttrIter::new(data).find(ty)?;
    Some(a.nested().find(1)?.data.to_vec())
}

/// A big-endian `u32` attribute `ty` of `data`.
pub fn be32(data: &[u8], ty: u16) -> Option<u32> {
    AttrIter::new(data).find(ty)?.be32()
}

/// Whether a batch failed because the table changed after our read.
pub fn is_changed(e: &Error) -> bool {
    crate::netlink::is_not_found(e) || e.to_string().contains("File exists")
}
