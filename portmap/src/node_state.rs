//! What the node holds of portmap's, for `cni-rs inspect` and `gc`.

use std::path::PathBuf;

use libcni::netfilter::ledger;
use libcni::netfilter::nft::{Family, Nft};
use libcni::netfilter::Owner;

/// The containers of `network` whose mappings a ledger of ours records
/// (either backend): container ID and ledger path.
pub fn recorded(network: &str) -> Vec<(String, PathBuf)> {
    [crate::nft::LEDGER, crate::ipt::IPT_LEDGER]
        .into_iter()
        .flat_map(|feature| ledger::list(feature, network))
        .map(|(l, _)| (l.name().to_string(), l.path()))
        .collect()
}

/// Whether iptables-nft holds `owner`'s DNAT chain (ours or the Go
/// plugin's), in either family.
pub fn ipt_chain_present(nft: &mut Nft, owner: &Owner) -> bool {
    let chain = crate::ipt::dnat_chain(owner);
    [Family::Ip, Family::Ip6]
        .into_iter()
        .any(|f| nft.has_chain(f, "nat", &chain).unwrap_or(false))
}
