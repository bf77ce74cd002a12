//! iptables-nft's `nat` table (`ip nat`, `ip6 nat`): the Go portmap
//! plugin's and ipMasq's iptables rules. A decision reads only the chains
//! it names (a node's nat table holds kube-proxy's thousands), a DEL
//! finds its jumps by the ledger's handles, and an ADD finds the shared
//! jumps in the base chains by a node ledger's handles ([`SharedJumps`]):
//! POSTROUTING holds a jump per pod (ipMasq's), which no ADD should list.

use std::collections::BTreeSet;

pub use super::{push_rule, Handles};
use super::{read_rules, render, Table};
use crate::netfilter::iptables::{self, Restore, SavedTable};
use crate::netfilter::ledger::{self, Entry, Ledger};
use crate::netfilter::nft::{Family, Nft, RawRule};
use crate::types::Attachment;
use crate::IpFamily;
use crate::Result;

/// iptables-nft's table.
pub const TABLE: &str = "nat";

/// What a decision reads: which chains' existence, (given the chains
/// found) which chains' rules, and which shared jumps of the base chains.
pub struct ReadPlan<'a> {
    pub chains: Vec<String>,
    pub rules_of: &'a (dyn Fn(&BTreeSet<String>) -> Vec<String> + Sync),
    pub shared_jumps: Option<&'a SharedJumps<'a>>,
}

/// Rules of the base chains that a decision needs only to know are there:
/// the jumps into a feature's shared chains, added by the first ADD on
/// the node and removed by none. Their handles live in a node ledger
/// (`ledger`, each entry's note being the rule's line); each needed one
/// is read back alone and must render as its line, else the chains of
/// the needed lines are listed and the ledger written again from what
/// the listing found. The chains of the lines must be among the plan's
/// `chains` (a chain not found is not listed).
pub struct SharedJumps<'a> {
    pub ledger: Option<Ledger>,
    /// The lines the ledger keeps a handle of, when found.
    pub kept: &'a [String],
    /// The lines this decision reads (among `kept`).
    pub needed: &'a [String],
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
    let read = (plan.rules_of)(&saved.chains);
    let mut handles = read_rules(nft, Table::Nat, family, read.clone(), &mut saved)?;
    if let Some(jumps) = plan.shared_jumps {
        read_shared_jumps(nft, family, jumps, &read, &mut saved, &mut handles)?;
    }
    Ok((saved, handles))
}

/// Adds the needed lines of `jumps` to `saved` and `handles`: by the node
/// ledger's handles when every needed line reads back so, else by listing
/// their chains (those not in `listed`, which are read already), after
/// which the ledger keeps this family's kept lines found.
fn read_shared_jumps(
    nft: &mut Nft,
    family: IpFamily,
    jumps: &SharedJumps,
    listed: &[String],
    saved: &mut SavedTable,
    handles: &mut Handles,
) -> Result<()> {
    let fam = Family::of(family);
    let recorded = jumps
        .ledger
        .as_ref()
        .and_then(Ledger::load)
        .unwrap_or_default();
    let mut found = Vec::new();
    for line in jumps.needed {
        let Some(e) = recorded
            .iter()
            .find(|e| e.family == fam && e.table == TABLE && &e.note == line)
        else {
            break;
        };
        match nft.get_rule_raw(fam, TABLE, &e.chain, e.handle)? {
            Some(r) if &render(&r, family) == line => found.push(r),
            _ => break,
        }
    }
    if found.len() == jumps.needed.len() {
        for r in &found {
            push_rule(saved, handles, r, family);
        }
        return Ok(());
    }
    let chains: BTreeSet<String> = jumps
        .needed
        .iter()
        .filter_map(|l| iptables::rule_chain(l))
        .filter(|c| !listed.iter().any(|l| l == c))
        .map(str::to_string)
        .collect();
    let more = read_rules(nft, Table::Nat, family, chains.iter().cloned(), saved)?;
    for (line, at) in more {
        handles.entry(line).or_default().extend(at);
    }
    let mut entries: Vec<Entry> = recorded.into_iter().filter(|e| e.family != fam).collect();
    for line in jumps.kept {
        if let Some(at) = handles.get(line).and_then(|h| h.first()) {
            entries.push(jump_entry(fam, line, at));
        }
    }
    jumps.store(&entries);
    Ok(())
}

/// The node ledger's entry of the shared jump `line` found at `at`
/// (chain, handle).
fn jump_entry(family: Family, line: &str, at: &(String, u64)) -> Entry {
    Entry {
        family,
        table: TABLE.to_string(),
        chain: at.0.clone(),
        handle: at.1,
        note: line.to_string(),
    }
}

impl SharedJumps<'_> {
    /// Adds the kept jumps an ADD's batch inserted or appended to the
    /// node ledger, from what [`super::apply`] returned: (line, chain, handle).
    pub fn record(&self, family: IpFamily, added: &[(String, String, u64)]) {
        let fam = Family::of(family);
        let added: Vec<Entry> = added
            .iter()
            .filter(|(line, _, _)| self.kept.contains(line))
            .map(|(line, chain, handle)| jump_entry(fam, line, &(chain.clone(), *handle)))
            .collect();
        if added.is_empty() {
            return;
        }
        let mut entries: Vec<Entry> = self
            .ledger
            .as_ref()
            .and_then(Ledger::load)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| {
                !added
                    .iter()
                    .any(|a| a.family == e.family && a.note == e.note)
            })
            .collect();
        entries.extend(added);
        self.store(&entries);
    }

    /// Writes the node ledger. A hint only: an ADD goes on without it.
    fn store(&self, entries: &[Entry]) {
        if let Some(ledger) = &self.ledger {
            let _ = ledger.store(entries);
        }
    }
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
