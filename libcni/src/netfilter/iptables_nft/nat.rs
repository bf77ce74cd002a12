//! iptables-nft's `nat` table (`ip nat`, `ip6 nat`): the Go portmap
//! plugin's and ipMasq's iptables rules. A decision reads only the chains
//! it names (a node's nat table holds kube-proxy's thousands), and a DEL
//! finds its jumps by the ledger's handles.

use std::collections::BTreeSet;

pub use super::{push_rule, Handles};
use super::{read_rules, render, Table};
use crate::netfilter::iptables::{self, Restore, SavedTable};
use crate::netfilter::ledger::{self, Entry};
use crate::netfilter::nft::{Family, Nft, RawRule};
use crate::types::Attachment;
use crate::IpFamily;
use crate::Result;

/// iptables-nft's table.
pub const TABLE: &str = "nat";

/// What a decision reads: which chains' existence, and (given the chains
/// found) which chains' rules.
pub struct ReadPlan<'a> {
    pub chains: Vec<String>,
    pub rules_of: &'a (dyn Fn(&BTreeSet<String>) -> Vec<String> + Sync),
}

/// [`super::apply`] on the family's nat table, read as `plan` asks.
pub fn apply_planned(
    nft: &mut Nft,
    family: IpFamily,
    plan: &ReadPlan,
    build: &mut dyn FnMut(&SavedTable, &mut Restore),
    echo: &dyn Fn(&str) -> bool,
) -> Result<Vec<(String, String, u64)>> {
    super::apply(
        Table::Nat,
        nft,
        family,
        &mut |n| read(n, family, plan),
        build,
        echo,
    )
}

/// The family's nat table, as far as `plan` asks: a [`SavedTable`] of the
/// chains found (among those asked) and the rule lines of the chains
/// whose rules were asked, with the handle of each line.
pub fn read(nft: &mut Nft, family: IpFamily, plan: &ReadPlan) -> Result<(SavedTable, Handles)> {
    let fam = Family::of(family);
    let mut saved = SavedTable::default();
    if !nft.has_table(fam, TABLE)? {
        return Ok((saved, Handles::new()));
    }
    for c in &plan.chains {
        if nft.has_chain(fam, TABLE, c)? {
            saved.chains.insert(c.clone());
        }
    }
    let handles = read_rules(
        nft,
        Table::Nat,
        family,
        (plan.rules_of)(&saved.chains),
        &mut saved,
    )?;
    Ok((saved, handles))
}

/// The family's nat table as GC reads it: every chain (one dump, no
/// lookup per chain: the dump names only chains that exist) and the rules
/// of `rules_of` among them.
pub fn read_every_chain(
    nft: &mut Nft,
    family: IpFamily,
    rules_of: &[&str],
) -> Result<(SavedTable, Handles)> {
    let mut saved = SavedTable {
        chains: nft
            .chain_names(Family::of(family), TABLE)?
            .into_iter()
            .collect(),
        ..SavedTable::default()
    };
    let handles = read_rules(
        nft,
        Table::Nat,
        family,
        rules_of.iter().map(|c| c.to_string()),
        &mut saved,
    )?;
    Ok((saved, handles))
}

/// The rules of `shared` that jump to `target`, as a DEL needs them: the
/// ledger's handles (`entries`, this family's), each read back alone and
/// checked to still jump there; when one is missing or another rule now
/// sits at its handle, or there is no ledger, the whole of `shared`, once
/// (rules the Go plugin wrote, an ADD killed before its ledger).
pub fn jumps_by_ledger(
    nft: &mut Nft,
    family: IpFamily,
    entries: &[Entry],
    target: &str,
    shared: &str,
) -> Result<Vec<RawRule>> {
    let fam = Family::of(family);
    let mine: Vec<&Entry> = entries.iter().filter(|e| e.family == fam).collect();
    let mut found = Vec::new();
    for e in &mine {
        match nft.get_rule_raw(fam, TABLE, &e.chain, e.handle)? {
            Some(r) if iptables::rule_target(&render(&r, family)).as_deref() == Some(target) => {
                found.push(r)
            }
            _ => break,
        }
    }
    if !mine.is_empty() && found.len() == mine.len() {
        Ok(found)
    } else {
        nft.rules_raw(fam, TABLE, Some(shared))
    }
}

/// GC of a nat feature's iptables rules over netlink: in each family, the
/// changes `changes` makes (`iptables-save`'s view of `chains`, then the
/// rules of attachments not in `valid` taken out), and then the ledgers
/// (`feature`) of `network` whose container is not in `valid`.
pub fn gc(
    nft: &mut Nft,
    chains: &[&str],
    changes: &mut dyn FnMut(&SavedTable, &mut Restore),
    feature: &str,
    network: &str,
    valid: &[Attachment],
) -> Result<()> {
    for family in IpFamily::BOTH {
        super::apply(
            Table::Nat,
            nft,
            family,
            &mut |n| read_every_chain(n, family, chains),
            changes,
            &|_| false,
        )?;
    }
    ledger::remove_unlisted(feature, network, |cid| {
        valid.iter().any(|a| a.container_id == cid)
    })
}
