//! iptables-nft's `filter` table (`ip filter`, `ip6 filter`): the
//! firewall plugin's iptables rules.

use super::{read_rules, Handles, Table};
use crate::netfilter::iptables::{Restore, SavedTable};
use crate::netfilter::nft::{Family, Nft};
use crate::IpFamily;
use crate::Result;

/// The family's filter table as `iptables-save` would print it: every
/// chain, and the rule lines of `rules_of` (only those: a node's filter
/// table may hold thousands of other rules), with the handles of each line.
pub fn read(nft: &mut Nft, family: IpFamily, rules_of: &[&str]) -> Result<(SavedTable, Handles)> {
    let chains = nft.chain_names(Family::of(family), Table::Filter.name())?;
    let mut saved = SavedTable {
        chains: chains.into_iter().collect(),
        rules: Vec::new(),
    };
    let chains = rules_of.iter().map(|c| c.to_string());
    let handles = read_rules(nft, Table::Filter, family, chains, &mut saved)?;
    Ok((saved, handles))
}

/// One read of the family's filter table (the rules of `rules_of`), the
/// changes `build` derives from it, one batch (none when there is nothing
/// to change); retried on a fresh read when another process changed the
/// table in between.
pub fn apply(
    nft: &mut Nft,
    family: IpFamily,
    rules_of: &[&str],
    build: &dyn Fn(&SavedTable, &mut Restore),
) -> Result<()> {
    super::apply(
        Table::Filter,
        nft,
        family,
        &mut |nft| read(nft, family, rules_of),
        &mut |saved, r| build(saved, r),
        &|_| false,
    )
    .map(drop)
}
