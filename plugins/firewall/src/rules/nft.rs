//! Our previous release's nftables backend: its own table,
//!
//! ```text
//! table inet cni_rs_firewall
//!   set allowed4 { type ipv4_addr }   container addresses, comment = owner tag
//!   set allowed6 { type ipv6_addr }
//!   chain forward (filter, forward, priority filter; policy accept)
//!       jump isolation1; jump admin
//!       ip daddr @allowed4 ct state established,related accept
//!       ip saddr @allowed4 accept (and the same for ipv6)
//!   chain admin, isolation1, isolation2
//! ```
//!
//! Nothing writes it any more (the nftables backend now writes the Go
//! plugin's rules into iptables-nft's tables, [`super::ipt`], which
//! upstream's DEL finds). DEL and GC still remove the elements it holds,
//! by key when the addresses are known and by their owner tag otherwise,
//! so a node upgraded with containers live on it is cleaned up. The
//! table itself stays, empty, as shared chains do (its `admin` chain may
//! hold the admin's rules).

use std::net::IpAddr;

use libcni::netfilter::nft::{addr_field, Batch, Family, Nft};
use libcni::netfilter::Owner;
use libcni::types::Attachment;
use libcni::IpFamily;
use libcni::Result;

/// Our previous release's nf_tables table.
pub const TABLE: &str = "cni_rs_firewall";
const F: Family = Family::Inet;
/// How often a DEL is retried when a concurrent one deleted an element
/// between our read and our batch.
const ATTEMPTS: usize = 3;

/// The set of allowed addresses of one family.
pub fn nft_set_name(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "allowed4",
        IpFamily::V6 => "allowed6",
    }
}

/// DEL: by key when the addresses are known (elements of another
/// owner are left alone), else every element tagged with `owner`.
pub fn del(nft: &mut Nft, owner: &Owner, known: &[IpAddr]) -> Result<()> {
    let tag = owner.tag();
    if known.is_empty() {
        let sets = IpFamily::BOTH.map(nft_set_name);
        return nft
            .delete_tagged(F, TABLE, &sets, &[], &|c| c == tag)
            .map(|_| ());
    }
    let mut attempt = 1;
    loop {
        let mut b = Batch::new();
        for addr in known {
            let set = nft_set_name(IpFamily::of(addr));
            if let Some(e) = nft.get_elem(F, TABLE, set, &addr_field(*addr))? {
                if e.comment.as_deref() == Some(tag.as_str()) {
                    b.del_elems(F, TABLE, set, &[e], &format!("address {addr}"));
                }
            }
        }
        if b.is_empty() {
            return Ok(());
        }
        match nft.commit(&b) {
            Ok(()) => return Ok(()),
            // Deleted meanwhile by a concurrent DEL or GC: read again.
            Err(e) if libcni::netlink::is_not_found(&e) && attempt < ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// GC: elements of containers of `network` not in `valid`.
pub fn gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
    let sets = IpFamily::BOTH.map(nft_set_name);
    nft.delete_tagged(F, TABLE, &sets, &[], &|c| {
        Owner::is_stale_tag(c, network, valid)
    })
    .map(|_| ())
}
