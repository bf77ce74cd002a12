//! The firewall on our own nf_tables table, spoken over netlink (no
//! process):
//!
//! ```text
//! table inet cni_rs_firewall
//!   set allowed4 { type ipv4_addr }   container addresses, comment = owner tag
//!   set allowed6 { type ipv6_addr }
//!   chain forward (filter, forward, priority filter; policy accept)
//!       jump isolation1
//!       jump admin
//!       meta nfproto ipv4 ip daddr @allowed4 ct state established,related accept
//!       meta nfproto ipv4 ip saddr @allowed4 accept
//!       (the same for ipv6 with @allowed6)
//!   chain admin          the admin's overrides; created, never written
//!   chain isolation1     per isolated bridge: iifname B oifname != B jump isolation2
//!                        and with ingressPolicy isolated: iifname B oifname B drop
//!   chain isolation2     per isolated bridge: oifname B drop
//! ```
//!
//! A container is its addresses' elements, tagged with [`Owner::tag`]: ADD
//! adds them (and the skeleton when it is missing), DEL deletes them by
//! key when the addresses are known and by tag otherwise, GC by tag. The
//! cost of ADD, CHECK and a DEL with `prevResult` does not depend on how
//! many containers exist. An `accept` here ends only this table's chain: a
//! DROP policy in another table (iptables' FORWARD) still drops, which is
//! why the plugin's default backend is not this one.

use std::net::IpAddr;

use super::{ipt, FirewallSpec, Policy};
use crate::netfilter::nft::expr::{self, CmpOp, Expr, Verdict};
use crate::netfilter::nft::{
    addr_field, types, BaseChain, Batch, Elem, Family, Hook, Nft, RuleInfo, SetSpec,
};
use crate::netfilter::Owner;
use crate::types::Attachment;
use crate::{Error, Result};

/// The nf_tables table of the firewall.
pub const TABLE: &str = "cni_rs_firewall";
const F: Family = Family::Inet;
/// How often a DEL is retried when a concurrent one deleted an element
/// between our read and our batch.
const ATTEMPTS: usize = 3;

/// The comment of the first rule of chain `forward`: which version of the
/// skeleton the table holds.
const SKELETON_MARK: &str = "cni-rs firewall skeleton v1";
/// The rules of chain `forward` in a complete skeleton.
const FORWARD_RULES: usize = 6;

/// The set of allowed addresses of one family.
pub fn nft_set_name(v6: bool) -> &'static str {
    if v6 {
        "allowed6"
    } else {
        "allowed4"
    }
}

fn set_specs() -> [SetSpec; 2] {
    [false, true].map(|v6| SetSpec {
        name: nft_set_name(v6).into(),
        id: if v6 { 2 } else { 1 },
        flags: 0,
        key_type: if v6 { types::IP6ADDR } else { types::IPADDR },
        key_len: if v6 { 16 } else { 4 },
        data: None,
    })
}

/// `meta nfproto ipvX ip saddr|daddr @set`.
fn match_in_set(v6: bool, source: bool, set: &SetSpec) -> Vec<Expr> {
    let mut r = expr::match_nfproto(v6);
    r.extend(expr::match_ip_in_set(v6, source, &set.name, set.id));
    r
}

/// Declares the table, chains and sets, and rewrites the rules of chain
/// `forward` (idempotent; chain `admin` and the isolation chains keep
/// their rules).
fn skeleton(b: &mut Batch) {
    b.add_table(F, TABLE);
    b.add_chain(
        F,
        TABLE,
        "forward",
        Some(&BaseChain {
            hook: Hook::Forward,
            priority: 0,
            chain_type: "filter",
        }),
    );
    for c in ["admin", "isolation1", "isolation2"] {
        b.add_chain(F, TABLE, c, None);
    }
    let sets = set_specs();
    for s in &sets {
        b.add_set(F, TABLE, s);
    }
    b.flush_chain(F, TABLE, "forward");
    b.add_rule(
        F,
        TABLE,
        "forward",
        &[Expr::Immediate(Verdict::Jump("isolation1".into()))],
        Some(SKELETON_MARK),
    );
    b.add_rule(
        F,
        TABLE,
        "forward",
        &[Expr::Immediate(Verdict::Jump("admin".into()))],
        None,
    );
    for v6 in [false, true] {
        let set = &sets[usize::from(v6)];
        let mut replies = match_in_set(v6, false, set);
        replies.extend(expr::match_ct_state_established());
        replies.push(Expr::Immediate(Verdict::Accept));
        b.add_rule(F, TABLE, "forward", &replies, None);
        let mut from = match_in_set(v6, true, set);
        from.push(Expr::Immediate(Verdict::Accept));
        b.add_rule(F, TABLE, "forward", &from, None);
    }
}

/// Whether the rules read back hold the current skeleton, whole.
fn skeleton_intact(rules: &[RuleInfo]) -> bool {
    let forward: Vec<&RuleInfo> = rules.iter().filter(|r| r.chain == "forward").collect();
    forward.len() == FORWARD_RULES
        && forward
            .first()
            .is_some_and(|r| r.comment.as_deref() == Some(SKELETON_MARK))
}

/// The comment of a bridge's isolation rules.
fn isolation_comment(bridge: &str) -> String {
    format!("same-bridge {bridge}")
}

/// `iifname B oifname != B jump isolation2`.
fn isolation1_rule(bridge: &str) -> Vec<Expr> {
    let mut r = expr::match_ifname(true, CmpOp::Eq, bridge);
    r.extend(expr::match_ifname(false, CmpOp::Neq, bridge));
    r.push(Expr::Immediate(Verdict::Jump("isolation2".into())));
    r
}

/// `iifname B oifname B drop` (`isolated`: no traffic within the bridge).
fn isolated_rule(bridge: &str) -> Vec<Expr> {
    let mut r = expr::match_ifname(true, CmpOp::Eq, bridge);
    r.extend(expr::match_ifname(false, CmpOp::Eq, bridge));
    r.push(Expr::Immediate(Verdict::Drop));
    r
}

/// The comment of a bridge's `isolated` drop rule.
fn isolated_comment(bridge: &str) -> String {
    format!("isolated {bridge}")
}

/// `oifname B drop`.
fn isolation2_rule(bridge: &str) -> Vec<Expr> {
    let mut r = expr::match_ifname(false, CmpOp::Eq, bridge);
    r.push(Expr::Immediate(Verdict::Drop));
    r
}

fn has_rule(rules: &[RuleInfo], chain: &str, comment: &str) -> bool {
    rules
        .iter()
        .any(|r| r.chain == chain && r.comment.as_deref() == Some(comment))
}

/// The isolation rules of `spec`: (chain, comment, expressions).
fn isolation_wanted(spec: &FirewallSpec) -> Vec<(&'static str, String, Vec<Expr>)> {
    let Some(iso) = &spec.isolate else {
        return Vec::new();
    };
    let b = iso.bridge.as_str();
    let mut v = vec![
        ("isolation1", isolation_comment(b), isolation1_rule(b)),
        ("isolation2", isolation_comment(b), isolation2_rule(b)),
    ];
    if iso.policy == Policy::Isolated {
        v.push(("isolation1", isolated_comment(b), isolated_rule(b)));
    }
    v
}

/// ADD: the skeleton when missing, the bridge's isolation rules
/// when missing, the addresses' elements (replacing another owner's), in
/// one batch. Nothing is sent when everything is already there.
pub fn add(nft: &mut Nft, spec: &FirewallSpec) -> Result<()> {
    let tag = spec.owner.tag();
    let rules = nft.table_rules(F, TABLE)?;
    let mut b = Batch::new();
    if !skeleton_intact(&rules) {
        skeleton(&mut b);
    }
    for (chain, comment, exprs) in isolation_wanted(spec) {
        if !has_rule(&rules, chain, &comment) {
            b.add_rule(F, TABLE, chain, &exprs, Some(&comment));
        }
    }
    for addr in &spec.addrs {
        let set = nft_set_name(addr.is_ipv6());
        let key = addr_field(*addr);
        if let Some(old) = nft.get_elem(F, TABLE, set, &key)? {
            if old.comment.as_deref() == Some(tag.as_str()) {
                continue;
            }
            // The address belongs to its latest owner.
            b.del_elems(F, TABLE, set, &[old], "the address's old owner");
        }
        let elem = Elem {
            key,
            data: None,
            comment: Some(tag.clone()),
        };
        b.add_elems(F, TABLE, set, &[elem], false, &format!("address {addr}"));
    }
    if b.is_empty() {
        return Ok(());
    }
    nft.commit(&b)
}

/// CHECK.
pub fn check(nft: &mut Nft, spec: &FirewallSpec) -> Result<()> {
    let failed = |what: String| Error::CheckFailed(format!("firewall: {what}"));
    let rules = nft.table_rules(F, TABLE)?;
    if !skeleton_intact(&rules) {
        return Err(failed(format!(
            "chain inet {TABLE} forward does not hold the plugin's {FORWARD_RULES} rules"
        )));
    }
    for (chain, comment, _) in isolation_wanted(spec) {
        if !has_rule(&rules, chain, &comment) {
            return Err(failed(format!(
                "chain inet {TABLE} {chain} has no rule {comment:?}"
            )));
        }
    }
    let tag = spec.owner.tag();
    for addr in &spec.addrs {
        let set = nft_set_name(addr.is_ipv6());
        let e = nft.get_elem(F, TABLE, set, &addr_field(*addr))?;
        match e.and_then(|e| e.comment) {
            Some(c) if c == tag => {}
            Some(c) => {
                return Err(failed(format!(
                    "address {addr} in set {set} belongs to another container ({c})"
                )))
            }
            None => {
                return Err(failed(format!(
                    "address {addr} of {tag} is not in set inet {TABLE} {set}"
                )))
            }
        }
    }
    Ok(())
}

/// DEL: by key when the addresses are known (elements of another
/// owner are left alone), else every element tagged with `owner`.
pub fn del(nft: &mut Nft, owner: &Owner, known: &[IpAddr]) -> Result<()> {
    let tag = owner.tag();
    if known.is_empty() {
        let sets = [nft_set_name(false), nft_set_name(true)];
        return nft
            .delete_tagged(F, TABLE, &sets, &[], &|c| c == tag)
            .map(|_| ());
    }
    let mut attempt = 1;
    loop {
        let mut b = Batch::new();
        for addr in known {
            let set = nft_set_name(addr.is_ipv6());
            if let Some(e) = nft.get_elem(F, TABLE, set, &addr_field(*addr))? {
                if e.comment.as_deref() == Some(tag.as_str()) {
                    b.del_elems(F, TABLE, set, &[e], &format!("address {addr}"));
                }
            }
        }
        if b.is_empty() {
            return Ok(());
        }
        match nft.commit(&b) {
            Ok(()) => return Ok(()),
            // Deleted meanwhile by a concurrent DEL or GC: read again.
            Err(e) if crate::netlink::is_not_found(&e) && attempt < ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// GC: elements of containers of `network` not in `valid`.
pub fn gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
    let sets = [nft_set_name(false), nft_set_name(true)];
    nft.delete_tagged(F, TABLE, &sets, &[], &|c| {
        Owner::is_stale_tag(c, network, valid)
    })
    .map(|_| ())
}

/// Whether iptables-nft shows state in the family's filter table that a
/// DEL or GC of `addrs` may have to remove: our previous release's owner
/// records, or an accept rule of one of the addresses. Read through
/// nf_tables, without a process; a failed read answers yes.
pub fn ipt_state_visible(nft: &mut Nft, v6: bool, addrs: &[IpAddr]) -> bool {
    let family = if v6 { Family::Ip6 } else { Family::Ip };
    match nft.rules(family, "filter", ipt::OWNERS_CHAIN) {
        Ok(r) if !r.is_empty() => return true,
        Ok(_) => {}
        Err(_) => return true,
    }
    if addrs.is_empty() {
        return false;
    }
    let forward = match nft.rules(family, "filter", ipt::FORWARD_CHAIN) {
        Ok(r) => r,
        Err(_) => return true,
    };
    let wanted: Vec<Vec<u8>> = addrs.iter().map(|a| expr::ip_bytes(*a)).collect();
    forward
        .iter()
        .any(|r| r.cmp_data.iter().any(|d| wanted.contains(d)))
}
