//! The iptables backend of the masquerade on iptables-nft: the Go
//! plugin's rules written and read over netlink in iptables-nft's own
//! encoding, no process.

use super::*;
use std::collections::BTreeSet;

use crate::netfilter::iptables::SavedTable;
use crate::netfilter::iptables_nft::{self, nat, Table};
use crate::netfilter::ledger::{Entry, Ledger};
use crate::netfilter::nft::{Family, Nft};
use crate::netfilter::Owner;
use crate::types::{Attachment, IpPrefix};
use crate::IpFamily;
use crate::Result;

/// The ledger feature of the iptables rules written over netlink: the
/// handles of a container's jumps in `POSTROUTING`.
pub(crate) const LEDGER: &str = "ipmasq-iptables";
pub(super) const POSTROUTING: &str = "POSTROUTING";

pub(super) fn ipt_ledger(owner: &Owner) -> Option<Ledger> {
    Ledger::new(LEDGER, &owner.network, &owner.container_id)
}

/// iptables setup on iptables-nft with no process: the same changes as
/// [`ipt::add`], one batch per family. `POSTROUTING` is read only when
/// the container's chain already exists (jumps to it exist only with it);
/// the handles of the new jumps go to the container's ledger, which DEL
/// reads instead of listing `POSTROUTING`. A setup that finds the chain
/// (a repeated ADD) drops the ledger, so DEL lists.
pub fn add(nft: &mut Nft, owner: &Owner, addrs: &[IpPrefix]) -> Result<()> {
    let chain = ipt::chain(owner);
    let mut entries = Vec::new();
    let mut fresh = true;
    for family in IpFamily::BOTH {
        let fam = super::of_family(addrs, family);
        if fam.is_empty() {
            continue;
        }
        let rules_of = |found: &BTreeSet<String>| {
            if found.contains(&chain) {
                vec![chain.clone(), POSTROUTING.to_string()]
            } else {
                Vec::new()
            }
        };
        let plan = nat::ReadPlan {
            chains: vec![chain.clone(), POSTROUTING.to_string()],
            rules_of: &rules_of,
            shared_jumps: None,
        };
        let added = nat::apply_planned(
            nft,
            family,
            &plan,
            &mut |saved, r| {
                if saved.has_chain(&chain) {
                    fresh = false;
                }
                ipt::add_changes(owner, &fam, family, saved, r)
            },
            &|c| c == POSTROUTING,
        )?;
        entries.extend(added.into_iter().map(|(_, c, handle)| Entry {
            family: Family::of(family),
            table: nat::TABLE.to_string(),
            chain: c,
            handle,
            note: chain.clone(),
        }));
    }
    let Some(ledger) = ipt_ledger(owner) else {
        return Ok(());
    };
    let stored = if fresh {
        ledger.store(&entries)
    } else {
        ledger.remove()
    };
    if let Err(e) = stored {
        // A failed ADD leaves nothing.
        let _ = del(nft, owner);
        return Err(e);
    }
    Ok(())
}

/// What a netlink teardown reads of one family: the container's chain and
/// its rules, and the jumps to it, from the ledger when each of its
/// entries of the family reads back as such a jump, else by listing
/// `POSTROUTING`. One lookup when the family has no such chain.
fn ipt_read_container(
    nft: &mut Nft,
    family: IpFamily,
    owner: &Owner,
    entries: &[Entry],
) -> Result<(SavedTable, nat::Handles)> {
    let own = ipt::chain(owner);
    let plan = nat::ReadPlan {
        chains: vec![own.clone()],
        rules_of: &|found| found.iter().cloned().collect(),
        shared_jumps: None,
    };
    let (mut saved, mut handles) = nat::read(nft, family, &plan)?;
    if !saved.has_chain(&own) {
        return Ok((saved, handles));
    }
    let rules = nat::jumps_by_ledger(nft, family, entries, &own, POSTROUTING)?;
    for r in &rules {
        nat::push_rule(&mut saved, &mut handles, r, family);
    }
    Ok((saved, handles))
}

/// iptables teardown on iptables-nft, both families, with no process: the
/// same changes as [`ipt::del`] (the Go plugins' rules go too).
pub fn del(nft: &mut Nft, owner: &Owner) -> Result<()> {
    let ledger = ipt_ledger(owner);
    let entries = ledger.as_ref().and_then(Ledger::load).unwrap_or_default();
    let own = ipt::chain(owner);
    for family in IpFamily::BOTH {
        iptables_nft::apply(
            Table::Nat,
            nft,
            family,
            &mut |n| ipt_read_container(n, family, owner, &entries),
            &mut |saved, r| ipt::remove(saved, r, &own),
            &|_| false,
        )?;
    }
    match ledger {
        Some(l) => l.remove(),
        None => Ok(()),
    }
}

/// iptables GC on iptables-nft, both families, with no process (lists the
/// table's chains and `POSTROUTING`, as the Go plugins' GC does).
pub fn gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
    nat::gc(
        nft,
        &[POSTROUTING],
        &mut |saved, r| ipt::gc_changes(network, valid, saved, r),
        LEDGER,
        network,
        valid,
    )
}

/// iptables CHECK on iptables-nft, read over netlink.
pub fn check(nft: &mut Nft, owner: &Owner, addrs: &[IpPrefix]) -> Result<()> {
    let own = ipt::chain(owner);
    for family in IpFamily::BOTH {
        let fam = super::of_family(addrs, family);
        if fam.is_empty() {
            continue;
        }
        let plan = nat::ReadPlan {
            chains: vec![own.clone(), POSTROUTING.to_string()],
            rules_of: &|found| found.iter().cloned().collect(),
            shared_jumps: None,
        };
        let (saved, _) = nat::read(nft, family, &plan)?;
        ipt::check_saved(owner, &fam, family, &saved)?;
    }
    Ok(())
}
