//! The nftables backend of the masquerade: the Go plugins' (v1.6+) table
//! `inet cni_plugins_masquerade`, with our ledgers of rule handles.

use super::*;
use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::netfilter::ledger::{self, Ledger};
use crate::netfilter::nft::expr::{self, CmpOp, Expr, Verdict};
use crate::netfilter::nft::{BaseChain, Batch, Elem, Family, Hook, Nft, RuleInfo, PRIORITY_SRCNAT};
use crate::netfilter::Owner;
use crate::types::{Attachment, IpPrefix};
use crate::{Error, Result};

/// The table's family: both IP families in one table, as the Go plugins'.
pub(super) const F: Family = Family::Inet;
const TABLE_COMMENT: &str = "Masquerading for plugins from github.com/containernetworking/plugins";
const CHAIN_COMMENT: &str =
    "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet";
/// The ledger feature name of the rule handles of an attachment.
pub(crate) const LEDGER: &str = "ipmasq";

/// The first `len` hex digits of sha512(`s`) (Go's `MustFormatHashWithPrefix`
/// with no prefix).
fn hash(len: usize, s: &str) -> String {
    crate::netfilter::hex_sha512(s)[..len].to_string()
}

/// The comment prefix of a network's rules.
fn network_hash(network: &str) -> String {
    hash(16, network)
}

/// The comment prefix of one attachment's rules.
fn instance_hash(network: &str, ifname: &str, container_id: &str) -> String {
    format!(
        "{}-{}",
        network_hash(network),
        hash(16, &format!("{ifname}:{container_id}"))
    )
}

/// The Go plugins' comment of an attachment's rules: its hash, then a
/// readable description, cut to what `nft` stores.
pub fn rule_comment(network: &str, ifname: &str, container_id: &str) -> String {
    let mut c = format!(
        "{}, net: {}, if: {}, id: {}",
        instance_hash(network, ifname, container_id),
        network.replace('"', ""),
        ifname.replace('"', ""),
        container_id.replace('"', "")
    );
    let mut cut = crate::netfilter::nft::MAX_NFT_COMMENT_CHARS.min(c.len());
    while !c.is_char_boundary(cut) {
        cut -= 1;
    }
    c.truncate(cut);
    c
}

pub(super) fn ledger_of(owner: &Owner, ifname: &str) -> Option<Ledger> {
    Ledger::new(
        LEDGER,
        &owner.network,
        &format!("{}:{ifname}", owner.container_id),
    )
}

/// The rule of one container address in `masq_checks`.
fn address_rule(a: &IpPrefix) -> Vec<Expr> {
    let family = a.family();
    let net = a.truncate();
    let mut r = expr::match_nfproto(family);
    r.extend(expr::match_prefix_nft(
        true,
        CmpOp::Eq,
        a.addr(),
        family.max_prefix(),
    ));
    r.extend(expr::match_prefix_nft(
        false,
        CmpOp::Neq,
        net.addr(),
        net.prefix_len(),
    ));
    r.push(Expr::Masq);
    r
}

/// The three rules of `postrouting`.
fn postrouting_rules() -> Vec<Vec<Expr>> {
    let mut out = Vec::new();
    for (family, mcast, len) in [
        (IpFamily::V4, "224.0.0.0", 4u8),
        (IpFamily::V6, "ff00::", 8),
    ] {
        let addr: IpAddr = mcast
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        let mut r = expr::match_nfproto(family);
        r.extend(expr::match_prefix_nft(false, CmpOp::Eq, addr, len));
        r.push(Expr::Immediate(Verdict::Return));
        out.push(r);
    }
    out.push(vec![Expr::Immediate(Verdict::Goto(CHAIN.into()))]);
    out
}

/// Whether `postrouting` holds the Go plugins' three rules (one small
/// listing). Only an ADD that finds it otherwise rewrites it: flushing is a
/// deletion, and a commit with deletions makes closing the nf_tables
/// socket wait for an RCU grace period (some 10 ms).
fn skeleton_intact(nft: &mut Nft) -> Result<bool> {
    let have = nft.rules(F, TABLE, "postrouting")?;
    let want = postrouting_rules();
    Ok(have.len() == want.len()
        && have.iter().zip(&want).all(|(h, w)| {
            let names: Vec<&str> = w.iter().map(expr_name).collect();
            let cmp: Vec<Vec<u8>> = w
                .iter()
                .filter_map(|e| match e {
                    Expr::Cmp { data, .. } => Some(data.clone()),
                    _ => None,
                })
                .collect();
            h.exprs == names && h.cmp_data == cmp
        }))
}

fn expr_name(e: &Expr) -> &'static str {
    e.kind()
}

/// The Go plugins' table, chains and `postrouting` rules, in their order.
fn skeleton(b: &mut Batch) {
    b.add_table_commented(F, TABLE, Some(TABLE_COMMENT));
    b.add_chain_commented(F, TABLE, CHAIN, None, Some(CHAIN_COMMENT));
    let base = BaseChain {
        hook: Hook::Postrouting,
        priority: PRIORITY_SRCNAT,
        chain_type: "nat",
    };
    b.add_chain(F, TABLE, "postrouting", Some(&base));
    b.flush_chain(F, TABLE, "postrouting");
    for r in postrouting_rules() {
        b.add_rule(F, TABLE, "postrouting", &r, None);
    }
}

/// The rules of `masq_checks` whose comment starts with `prefix` (one
/// listing; none when the table is not there).
fn listed(nft: &mut Nft, prefix: &str) -> Result<Vec<RuleInfo>> {
    Ok(nft
        .rules(F, TABLE, CHAIN)?
        .into_iter()
        .filter(|r| r.comment.as_deref().is_some_and(|c| c.starts_with(prefix)))
        .collect())
}

/// Deletes, in `b`, the addresses `doomed` owners hold in our previous
/// release's `inet cni_rs_masq`, or the whole table when no other
/// container's address is left in it. One `GETTABLE` where it never was.
fn old_teardown(nft: &mut Nft, b: &mut Batch, doomed: &dyn Fn(&str) -> bool) -> Result<()> {
    if !nft.has_table(F, OLD_TABLE)? {
        return Ok(());
    }
    let mut inner = Batch::new();
    let mut kept = 0;
    for set in ["masq4", "masq6"] {
        let (mine, other): (Vec<Elem>, Vec<Elem>) = nft
            .elems(F, OLD_TABLE, set)?
            .into_iter()
            .partition(|e| e.comment.as_deref().is_some_and(doomed));
        kept += other.len();
        inner.del_elems(F, OLD_TABLE, set, &mine, "addresses");
    }
    if kept == 0 {
        b.del_table(F, OLD_TABLE);
    } else {
        b.extend(inner);
    }
    Ok(())
}

/// nftables setup: the skeleton where it is not the Go plugins', a rule
/// per address (echoed, its handle kept in the ledger), and the deletion of
/// the attachment's rules of an earlier ADD, in one batch.
pub fn add(nft: &mut Nft, owner: &Owner, ifname: &str, addrs: &[IpPrefix]) -> Result<()> {
    let comment = rule_comment(&owner.network, ifname, &owner.container_id);
    let ledger = ledger_of(owner, ifname);
    ledger::commit_recorded(nft, ledger.as_ref(), &mut |nft, b| {
        if !skeleton_intact(nft)? {
            skeleton(b);
        }
        if let Some(old) = ledger.as_ref().and_then(Ledger::load) {
            for e in ledger::verified(nft, &old, &comment)?.entries {
                b.del_rule(e.family, &e.table, &e.chain, e.handle);
            }
        }
        Ok(addrs
            .iter()
            .map(|a| ledger::Echoed {
                index: b.add_rule_echo(F, TABLE, CHAIN, &address_rule(a), &comment),
                family: F,
                table: TABLE.to_string(),
                note: a.addr().to_string(),
            })
            .collect())
    })
}

/// nftables teardown: the attachment's rules from its ledger (each read
/// back first), or, without one or when one of its rules is gone, from one
/// listing of `masq_checks` by the attachment's hash (so the Go plugins'
/// rules go too); and its addresses in our previous release's table. One
/// batch.
pub fn del(nft: &mut Nft, owner: &Owner, ifname: &str) -> Result<()> {
    const ATTEMPTS: usize = 3;
    let comment = rule_comment(&owner.network, ifname, &owner.container_id);
    let prefix = instance_hash(&owner.network, ifname, &owner.container_id);
    let ledger = ledger_of(owner, ifname);
    let tag = owner.tag();
    let mut attempt = 1;
    loop {
        let mut b = Batch::new();
        let (mut handles, complete): (Vec<u64>, bool) = match ledger.as_ref().and_then(Ledger::load)
        {
            Some(entries) => {
                let v = ledger::verified(nft, &entries, &comment)?;
                (v.entries.iter().map(|e| e.handle).collect(), v.complete)
            }
            None => (Vec::new(), false),
        };
        if !complete {
            for r in listed(nft, &prefix)? {
                if !handles.contains(&r.handle) {
                    handles.push(r.handle);
                }
            }
        }
        for h in &handles {
            b.del_rule(F, TABLE, CHAIN, *h);
        }
        old_teardown(nft, &mut b, &|c| c == tag)?;
        match nft.commit(&b) {
            Ok(()) => break,
            Err(e) if crate::netlink::is_not_found(&e) && attempt < ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
    match ledger {
        Some(l) => l.remove(),
        None => Ok(()),
    }
}

/// nftables GC: one listing of `masq_checks`; the network's rules (by its
/// hash) whose comment is no valid attachment's go, the Go plugins' as
/// ours; and the addresses of containers not in `valid` in our previous
/// release's table. The ledgers of the removed attachments go too.
pub fn gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
    let keep: BTreeSet<String> = valid
        .iter()
        .map(|a| rule_comment(network, &a.ifname, &a.container_id))
        .collect();
    let mut b = Batch::new();
    for r in listed(nft, &network_hash(network))? {
        if !r.comment.as_ref().is_some_and(|c| keep.contains(c)) {
            b.del_rule(F, TABLE, CHAIN, r.handle);
        }
    }
    old_teardown(nft, &mut b, &|c| Owner::is_stale_tag(c, network, valid))?;
    nft.commit(&b)?;
    ledger::remove_unlisted(LEDGER, network, |name| {
        name.split_once(':').is_some_and(|(cid, ifname)| {
            valid
                .iter()
                .any(|a| a.container_id == cid && a.ifname == ifname)
        })
    })?;
    Ok(())
}

/// nftables CHECK: `postrouting` is the Go plugins', and every address has
/// its rule with the attachment's comment.
pub fn check(nft: &mut Nft, owner: &Owner, ifname: &str, addrs: &[IpPrefix]) -> Result<()> {
    let comment = rule_comment(&owner.network, ifname, &owner.container_id);
    if !skeleton_intact(nft)? {
        return Err(Error::CheckFailed(format!(
            "ipMasq: chain inet {TABLE} postrouting is missing or changed"
        )));
    }
    let mut have: Vec<RuleInfo> = Vec::new();
    let mut complete = false;
    if let Some(entries) = ledger_of(owner, ifname).and_then(|l| l.load()) {
        complete = true;
        for e in &entries {
            match nft.get_rule(e.family, &e.table, &e.chain, e.handle)? {
                Some(r) if r.comment.as_deref() == Some(comment.as_str()) => have.push(r),
                _ => complete = false,
            }
        }
    }
    if !complete {
        have = listed(nft, &comment)?;
    }
    for a in addrs {
        let want: Vec<Vec<u8>> = address_rule(a)
            .iter()
            .filter_map(|e| match e {
                Expr::Cmp { data, .. } => Some(data.clone()),
                _ => None,
            })
            .collect();
        let found = have
            .iter()
            .any(|r| r.comment.as_deref() == Some(comment.as_str()) && r.cmp_data == want);
        if !found {
            return Err(Error::CheckFailed(format!(
                "ipMasq: chain inet {TABLE} {CHAIN} has no rule for {} of {}",
                a.addr(),
                owner.tag()
            )));
        }
    }
    Ok(())
}
