//! The iptables backend of the masquerade on legacy iptables: one
//! `iptables-save` and one `iptables-restore` per family and operation.

use std::collections::BTreeSet;

use crate::netfilter::iptables::{self, IptTable, Restore, SavedTable};
use crate::netfilter::{go_chain_name, parse_go_comment, Owner};
use crate::types::{Attachment, IpPrefix};
use crate::IpFamily;
use crate::{Error, Result};

/// The Go plugin's masquerade chain `CNI-<24 hex>`.
pub fn chain(owner: &Owner) -> String {
    go_chain_name("", &owner.network, &owner.container_id)
}

pub(super) fn comment(owner: &Owner) -> String {
    format!("name: \"{}\" id: \"{}\"", owner.network, owner.container_id)
}

pub(super) fn rules(owner: &Owner, a: &IpPrefix, fam: IpFamily) -> (String, String, String) {
    let chain = chain(owner);
    let comment = comment(owner);
    let subnet = format!("{}/{}", a.network(), a.prefix_len());
    let host = format!("{}/{}", a.addr(), if a.is_ipv4() { 32 } else { 128 });
    let accept = iptables::rule_line(
        &chain,
        &[
            "-d",
            &subnet,
            "-m",
            "comment",
            "--comment",
            &comment,
            "-j",
            "ACCEPT",
        ],
    );
    let masq = iptables::rule_line(
        &chain,
        &[
            "!",
            "-d",
            iptables::multicast(fam),
            "-m",
            "comment",
            "--comment",
            &comment,
            "-j",
            "MASQUERADE",
        ],
    );
    let entry = iptables::rule_line(
        "POSTROUTING",
        &[
            "-s",
            &host,
            "-m",
            "comment",
            "--comment",
            &comment,
            "-j",
            &chain,
        ],
    );
    (accept, masq, entry)
}

/// The changes of an iptables setup for the addresses of one family,
/// against what `saved` holds: the chain where missing, and the rules
/// missing from it.
pub(super) fn add_changes(
    owner: &Owner,
    addrs: &[IpPrefix],
    fam: IpFamily,
    saved: &SavedTable,
    r: &mut Restore,
) {
    let chain = chain(owner);
    if !saved.has_chain(&chain) {
        r.declare(&chain);
    }
    let mut added = BTreeSet::new();
    for a in addrs {
        let (accept, masq, entry) = rules(owner, a, fam);
        for line in [accept, masq, entry] {
            if !saved.has_rule(&line) && added.insert(line.clone()) {
                r.append(line);
            }
        }
    }
}

/// iptables ADD for the addresses of one family: one save, one restore.
pub fn add(owner: &Owner, addrs: &[IpPrefix], family: IpFamily) -> Result<()> {
    iptables::save_and_restore(family, IptTable::Nat, |saved, r| {
        add_changes(owner, addrs, family, saved, r)
    })
}

pub(super) fn remove(saved: &SavedTable, r: &mut Restore, chain: &str) {
    for line in &saved.rules {
        if iptables::rule_chain(line) != Some(chain)
            && iptables::rule_target(line).as_deref() == Some(chain)
        {
            r.delete(line);
        }
    }
    if saved.has_chain(chain) {
        r.remove_chain(chain);
    }
}

/// iptables DEL for one family, by the hashed chain name.
pub fn del(owner: &Owner, family: IpFamily) -> Result<()> {
    iptables::save_and_restore(family, IptTable::Nat, |saved, r| {
        remove(saved, r, &chain(owner))
    })
}

/// The changes of an iptables GC for one family: POSTROUTING rules whose
/// comment names a container of `network` not in `valid` lose their chain.
pub(super) fn gc_changes(network: &str, valid: &[Attachment], saved: &SavedTable, r: &mut Restore) {
    let mut done = BTreeSet::new();
    for line in saved.rules_of("POSTROUTING") {
        let (Some(comment), Some(target)) =
            (iptables::rule_comment(line), iptables::rule_target(line))
        else {
            continue;
        };
        let Some((net, cid)) = parse_go_comment(&comment) else {
            continue;
        };
        let owner = Owner::new(net, cid);
        if net != network || target != chain(&owner) || valid.iter().any(|a| a.container_id == cid)
        {
            continue;
        }
        if done.insert(target.clone()) {
            remove(saved, r, &target);
        }
    }
}

/// iptables GC for one family (one save, one restore).
pub fn gc(network: &str, valid: &[Attachment], family: IpFamily) -> Result<()> {
    iptables::save_and_restore(family, IptTable::Nat, |saved, r| {
        gc_changes(network, valid, saved, r)
    })
}

/// Whether `saved` holds the rules of `addrs` (of one family).
pub(super) fn check_saved(
    owner: &Owner,
    addrs: &[IpPrefix],
    family: IpFamily,
    saved: &SavedTable,
) -> Result<()> {
    let fam = family;
    for a in addrs {
        let (accept, masq, entry) = rules(owner, a, fam);
        for line in [accept, masq, entry] {
            if !saved.has_rule(&line) {
                return Err(Error::CheckFailed(format!(
                    "ipMasq: rule missing for {}: {line}",
                    a.addr()
                )));
            }
        }
    }
    Ok(())
}

/// iptables CHECK for the addresses of one family.
pub fn check(owner: &Owner, addrs: &[IpPrefix], family: IpFamily) -> Result<()> {
    let saved = iptables::save(family, IptTable::Nat)?;
    check_saved(owner, addrs, family, &saved)
}
