//! What the node holds of portmap's, for `cni-rs inspect` and `gc`.

use std::path::PathBuf;

use libcni::netfilter::ledger;
use libcni::netfilter::nft::{Family, Nft};

/// The containers of `network` whose mappings a ledger of ours records
/// (either backend): container ID and ledger path.
pub fn recorded(network: &str) -> Vec<(String, PathBuf)> {
    [crate::nft::LEDGER, crate::ipt_netlink::LEDGER]
        .into_iter()
        .flat_map(|feature| ledger::list(feature, network))
        .map(|(l, _)| (l.name().to_string(), l.path()))
        .collect()
}

/// The containers whose mappings are in the nf_tables host port chains
/// (ours and the Go plugin's nftables backend, whose rules carry the
/// container ID as their comment, cut to what `nft` keeps, and no network).
pub fn nft_rule_owners(nft: &mut Nft) -> libcni::Result<std::collections::BTreeSet<String>> {
    let mut owners = std::collections::BTreeSet::new();
    for family in [Family::Ip, Family::Ip6] {
        for chain in [crate::nft::HOSTPORTS, crate::nft::HOSTIP_HOSTPORTS] {
            let rules = nft.rules(family, crate::nft::TABLE, chain)?;
            owners.extend(rules.into_iter().filter_map(|r| r.comment));
        }
    }
    Ok(owners)
}
