//! Host ports on iptables where the node's iptables is iptables-nft: the
//! Go plugin's rules ([`crate::ipt`]'s decisions, made on the nat table as
//! `iptables-save` would show it) written over netlink in iptables-nft's
//! own encoding by [`libcni::netfilter::iptables_nft::nat`], with no
//! process. The handles of a container's `CNI-HOSTPORT-DNAT` jumps go to a
//! ledger, so that neither ADD nor DEL lists that chain; those of the
//! base chains' jumps into the shared chains go to a node ledger, so that
//! ADD lists no base chain (POSTROUTING holds ipMasq's jump of every pod).

use std::collections::BTreeSet;

use libcni::netfilter::iptables::{self, SavedTable};
use libcni::netfilter::iptables_nft::{self, nat, Table};
use libcni::netfilter::ledger::{Entry, Ledger};
use libcni::netfilter::nft::{Family, Nft};
use libcni::netfilter::Owner;
use libcni::types::Attachment;
use libcni::IpFamily;
use libcni::Result;

use crate::ipt::{
    self, add_changes, check_saved, dnat_chain, gc_changes, remove_container, IPT_DNAT_CHAIN,
    IPT_MASQ_CHAIN, IPT_OLD_SNAT_CHAIN, IPT_SETMARK_CHAIN,
};
use crate::spec::*;

/// The ledger feature of the iptables rules written natively: the
/// handles of a container's jumps in `CNI-HOSTPORT-DNAT`.
pub(crate) const LEDGER: &str = "portmap-iptables";

fn ledger(owner: &Owner) -> Option<Ledger> {
    Ledger::new(LEDGER, &owner.network, &owner.container_id)
}

/// The node ledger feature of the base chains' jumps into the shared
/// chains ([`nat::SharedJumps`]).
pub(crate) const SHARED_JUMPS_LEDGER: &str = "portmap-iptables-jumps";

const NAT_BASE: [&str; 3] = ["PREROUTING", "OUTPUT", "POSTROUTING"];

/// iptables ADD on iptables-nft, both families, with no process: the same
/// changes as [`ipt::add`], one batch per family; the handles of the
/// container's jumps in `CNI-HOSTPORT-DNAT` go to its ledger, those of
/// the shared jumps it adds to the node ledger. A family
/// with `conditionsV4`/`conditionsV6` (free iptables text) is written by
/// `iptables-restore`.
pub fn add(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    let own = dnat_chain(&spec.owner);
    let kept = ipt::shared_jumps();
    let needed = ipt::shared_jumps_of(spec);
    let shared_jumps = nat::SharedJumps {
        ledger: Ledger::node(SHARED_JUMPS_LEDGER, "nat"),
        kept: &kept,
        needed: &needed,
    };
    let mut entries = Vec::new();
    for family in IpFamily::BOTH {
        if spec.container(family).is_none() || spec.mappings.is_empty() {
            continue;
        }
        if !spec.conditions.of(family).is_empty() {
            ipt::add(spec, family)?;
            continue;
        }
        let mut chains: Vec<String> = [IPT_SETMARK_CHAIN, IPT_MASQ_CHAIN, IPT_DNAT_CHAIN]
            .into_iter()
            .chain(NAT_BASE)
            .map(str::to_string)
            .collect();
        chains.push(own.clone());
        let rules_of = |found: &BTreeSet<String>| {
            let mut v: Vec<String> = [IPT_SETMARK_CHAIN, IPT_MASQ_CHAIN]
                .into_iter()
                .map(str::to_string)
                .collect();
            // Old jumps to the container's chain exist only with it.
            if found.contains(&own) {
                v.push(IPT_DNAT_CHAIN.to_string());
            }
            v
        };
        let plan = nat::ReadPlan {
            chains,
            rules_of: &rules_of,
            shared_jumps: Some(&shared_jumps),
        };
        let added = nat::apply_planned(
            nft,
            family,
            &plan,
            &mut |saved, r| add_changes(spec, family, saved, r),
            &|c| c == IPT_DNAT_CHAIN || NAT_BASE.contains(&c),
        )?;
        shared_jumps.record(family, &added);
        let container = added.into_iter().filter(|(_, c, _)| c == IPT_DNAT_CHAIN);
        entries.extend(container.map(|(_, chain, handle)| Entry {
            family: Family::of(family),
            table: nat::TABLE.to_string(),
            chain,
            handle,
            note: own.clone(),
        }));
        crate::fault::point("portmap/between-families");
    }
    let Some(ledger) = ledger(&spec.owner) else {
        return Ok(());
    };
    if let Err(e) = ledger.store(&entries) {
        // A failed ADD leaves nothing.
        let _ = del(nft, &spec.owner);
        return Err(e);
    }
    Ok(())
}

/// What a native DEL reads of one family: the container's chains, and the
/// jumps to them, from the ledger when each of its entries of the family
/// reads back as such a jump, else by listing `CNI-HOSTPORT-DNAT`.
fn read_container(
    nft: &mut Nft,
    family: IpFamily,
    owner: &Owner,
    entries: &[Entry],
) -> Result<(SavedTable, nat::Handles)> {
    let own = dnat_chain(owner);
    let old = libcni::netfilter::go_chain_name("SN-", &owner.network, &owner.container_id);
    let plan = nat::ReadPlan {
        chains: vec![
            own.clone(),
            old.clone(),
            IPT_DNAT_CHAIN.to_string(),
            IPT_OLD_SNAT_CHAIN.to_string(),
        ],
        rules_of: &|_| Vec::new(),
        shared_jumps: None,
    };
    let (mut saved, mut handles) = nat::read(nft, family, &plan)?;
    let fam = Family::of(family);
    if saved.has_chain(&own) {
        for r in nft.rules_raw(fam, nat::TABLE, Some(&own))? {
            nat::push_rule(&mut saved, &mut handles, &r, family);
        }
        let rules = nat::jumps_by_ledger(nft, family, entries, &own, IPT_DNAT_CHAIN)?;
        for r in &rules {
            nat::push_rule(&mut saved, &mut handles, r, family);
        }
    }
    if saved.has_chain(&old) && saved.has_chain(IPT_OLD_SNAT_CHAIN) {
        for r in nft.rules_raw(fam, nat::TABLE, Some(IPT_OLD_SNAT_CHAIN))? {
            nat::push_rule(&mut saved, &mut handles, &r, family);
        }
    }
    Ok((saved, handles))
}

/// The host port of a DNAT rule line of a container's chain.
fn rule_port(family: IpFamily, line: &str) -> Option<RemovedPort> {
    let t = iptables::split_tokens(line);
    if !t.iter().any(|x| x == "DNAT") {
        return None;
    }
    let after = |k: &str| t.iter().position(|x| x == k).and_then(|i| t.get(i + 1));
    let proto = Protocol::parse(after("-p")?)?.number();
    Some(RemovedPort {
        family,
        protocol: proto,
        port: after("--dport")?.parse().ok()?,
    })
}

/// iptables DEL on iptables-nft, both families, with no process: the same
/// changes as [`ipt::del`]. Costs a few lookups when the container has no
/// chain; with one, its own rules are listed and its ledger spares
/// listing `CNI-HOSTPORT-DNAT`. Returns the host ports its DNAT rules
/// mapped.
pub fn del(nft: &mut Nft, owner: &Owner) -> Result<Vec<RemovedPort>> {
    let ledger = ledger(owner);
    let entries = ledger.as_ref().and_then(Ledger::load).unwrap_or_default();
    let own = dnat_chain(owner);
    let mut removed = Vec::new();
    for family in IpFamily::BOTH {
        let mut ports = Vec::new();
        iptables_nft::apply(
            Table::Nat,
            nft,
            family,
            &mut |n| read_container(n, family, owner, &entries),
            &mut |saved, r| {
                ports = saved
                    .rules_of(&own)
                    .filter_map(|l| rule_port(family, l))
                    .collect();
                remove_container(saved, r, owner)
            },
            &|_| false,
        )?;
        removed.extend(ports);
    }
    if let Some(l) = ledger {
        l.remove()?;
    }
    Ok(removed)
}

/// iptables GC on iptables-nft, both families, with no process (lists the
/// table's chains and `CNI-HOSTPORT-DNAT`, as the Go plugin's GC does).
pub fn gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
    nat::gc(
        nft,
        &[IPT_DNAT_CHAIN, IPT_OLD_SNAT_CHAIN],
        &mut |saved, r| gc_changes(network, valid, saved, r),
        LEDGER,
        network,
        valid,
    )
}

/// iptables CHECK on iptables-nft, read over netlink.
pub fn check(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    let own = dnat_chain(&spec.owner);
    for family in IpFamily::BOTH {
        if spec.container(family).is_none() {
            continue;
        }
        let plan = nat::ReadPlan {
            chains: vec![own.clone(), IPT_DNAT_CHAIN.to_string()],
            rules_of: &|_| vec![own.clone(), IPT_DNAT_CHAIN.to_string()],
            shared_jumps: None,
        };
        let (saved, _) = nat::read(nft, family, &plan)?;
        check_saved(spec, family, &saved)?;
    }
    Ok(())
}

/// Whether the nat table of iptables-nft holds the host port chains at
/// all (seen through nf_tables).
pub fn has_hostports(nft: &mut Nft, family: IpFamily) -> Result<bool> {
    nft.has_chain(Family::of(family), nat::TABLE, IPT_DNAT_CHAIN)
}
