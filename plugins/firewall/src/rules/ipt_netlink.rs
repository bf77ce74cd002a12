//! The firewall's iptables rules over netlink, in iptables-nft's encoding
//! ([`libcni::netfilter::iptables_nft::filter`]), no process: the iptables
//! backend on an iptables-nft node, and the nftables backend everywhere
//! (upstream has no nftables firewall; on an iptables-nft node its rules
//! are these). [`super::ipt`] builds the changes; this reads the filter
//! table and writes them, one batch per family.

use super::chains::{FORWARD_CHAIN, ISOLATION_STAGE_1, ISOLATION_STAGE_2, OWNERS_CHAIN};
use libcni::netfilter::iptables::{Restore, SavedTable};
use libcni::netfilter::iptables_nft::filter;
use libcni::netfilter::nft::Nft;
use libcni::IpFamily;
use libcni::Result;

/// The chains whose rules the plugin's decisions look at (the admin chain
/// only matters by existence).
const READ_CHAINS: [&str; 5] = [
    "FORWARD",
    FORWARD_CHAIN,
    OWNERS_CHAIN,
    ISOLATION_STAGE_1,
    ISOLATION_STAGE_2,
];

/// One read of `family`'s filter table, the changes `build` derives from
/// it, one batch (none when there is nothing to change).
pub fn apply(
    nft: &mut Nft,
    family: IpFamily,
    build: &dyn Fn(&SavedTable, &mut Restore),
) -> Result<()> {
    filter::apply(nft, family, &READ_CHAINS, build)
}

/// `family`'s filter table, as `iptables-save` would print the chains the
/// plugin reads.
pub fn read(nft: &mut Nft, family: IpFamily) -> Result<SavedTable> {
    Ok(filter::read(nft, family, &READ_CHAINS)?.0)
}
