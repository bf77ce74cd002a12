//! The `firewall` plugin's rules: forwarded traffic from a container's
//! addresses, and replies to it, is accepted, so a node whose FORWARD
//! policy is DROP still lets its containers out. `ingressPolicy:
//! same-bridge` also drops traffic entering a bridge from another isolated
//! bridge. IPv4 and IPv6, both backends.
//!
//! # iptables design (the Go plugin's, filter table)
//!
//! ```text
//! FORWARD                -m comment --comment "CNI firewall plugin rules (ingressPolicy: same-bridge)" -j CNI-ISOLATION-STAGE-1
//!                        -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
//! CNI-FORWARD            -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
//!                        -d 10.88.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//!                        -s 10.88.0.2/32 -j ACCEPT
//! CNI-ADMIN              (the admin's; never written)
//! CNI-ISOLATION-STAGE-1  -i br0 ! -o br0 -m comment --comment "..." -j CNI-ISOLATION-STAGE-2
//!                        -m comment --comment "..." -j RETURN
//! CNI-ISOLATION-STAGE-2  -o br0 -m comment --comment "..." -j DROP
//!                        -m comment --comment "..." -j RETURN
//! CNI-FORWARD-OWNERS     -s 10.88.0.2/32 -m comment --comment "name: \"net\" id: \"cid\""
//! ```
//!
//! Everything but `CNI-FORWARD-OWNERS` is exactly what the Go plugin
//! writes, so either side's DEL removes the other's accept rules (Go's
//! per-address rules carry no comment, and `iptables -D` matches the whole
//! rule). `CNI-FORWARD-OWNERS` is ours: a chain nothing jumps to (no cost
//! per packet) holding one rule without target per address, whose comment
//! names the owner. It lets DEL work without `prevResult` and GC find the
//! containers that are gone, and it tells which container holds an address
//! now, so a late DEL of an old container never removes the accept rules
//! of the address's new owner. Shared chains and isolation rules stay
//! (the Go plugin never removes them either). Each operation is one
//! `iptables-save` and one `iptables-restore --noflush` per family; chains
//! are created with `-N` (never declared, which would flush them), so two
//! plugins racing make one restore fail, and it is retried on a fresh save.
//!
//! # nftables design
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
//!   chain isolation2     per isolated bridge: oifname B drop
//! ```
//!
//! A container is its addresses' elements, tagged with [`Owner::tag`]: ADD
//! adds them (and the skeleton when it is missing), DEL deletes them by
//! key when the addresses are known and by tag otherwise, GC by tag. The
//! cost of ADD, CHECK and a DEL with `prevResult` does not depend on how
//! many containers exist. An `accept` here ends only this table's chain: a
//! DROP policy in another table (iptables' FORWARD) still drops, which is
//! why the plugin's default backend is iptables.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::iptables::{self, IptFamily, IptTable, Restore, SavedTable};
use super::nft::expr::{self, CmpOp, Expr, Verdict};
use super::nft::{addr_field, types, BaseChain, Batch, Elem, Family, Hook, Nft, RuleInfo, SetSpec};
use super::{open_nft_for_teardown, parse_go_comment, Backend, Owner};
use crate::fault;
use crate::types::Attachment;
use crate::{Error, ErrorList, Result};

/// The nf_tables table of the firewall.
pub const TABLE: &str = "cni_rs_firewall";
const F: Family = Family::Inet;

/// The Go plugin's chain of per-container accept rules.
pub const IPT_FORWARD_CHAIN: &str = "CNI-FORWARD";
/// The default admin override chain (`iptablesAdminChainName`).
pub const IPT_DEFAULT_ADMIN_CHAIN: &str = "CNI-ADMIN";
/// Our owner records: which container holds each address.
pub const IPT_OWNERS_CHAIN: &str = "CNI-FORWARD-OWNERS";
/// The Go plugin's isolation chains (`ingressPolicy: same-bridge`).
pub const IPT_ISOLATION_STAGE_1: &str = "CNI-ISOLATION-STAGE-1";
pub const IPT_ISOLATION_STAGE_2: &str = "CNI-ISOLATION-STAGE-2";

const FORWARD_COMMENT: &str = "CNI firewall plugin rules";
const ADMIN_COMMENT: &str = "CNI firewall plugin admin overrides";
const ISOLATION_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: same-bridge)";

/// Longest iptables chain name.
const MAX_CHAIN_LEN: usize = 28;
/// How often an iptables operation is retried after another process
/// changed the same chains between our save and our restore.
const IPT_ATTEMPTS: usize = 3;

/// What one container's firewall needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallSpec {
    pub owner: Owner,
    /// The container's addresses (every address of `prevResult`).
    pub addrs: Vec<IpAddr>,
    /// `ingressPolicy: same-bridge`: the bridge to isolate.
    pub isolate: Option<String>,
    /// iptables only: the admin override chain (default `CNI-ADMIN`).
    pub admin_chain: String,
}

impl FirewallSpec {
    fn family_addrs(&self, v6: bool) -> Vec<IpAddr> {
        of_family(&self.addrs, v6)
    }
}

fn of_family(addrs: &[IpAddr], v6: bool) -> Vec<IpAddr> {
    addrs
        .iter()
        .filter(|a| a.is_ipv6() == v6)
        .copied()
        .collect()
}

/// Checks an iptables chain name given in config key `key` (code 7): 1 to
/// 28 printable ASCII characters without quotes or backslashes, not
/// starting with `-` or `!`, and neither a built-in chain or target nor one
/// of the plugin's own chains.
pub fn validate_chain_name(key: &str, name: &str) -> Result<()> {
    const RESERVED: [&str; 15] = [
        "INPUT",
        "FORWARD",
        "OUTPUT",
        "PREROUTING",
        "POSTROUTING",
        "ACCEPT",
        "DROP",
        "RETURN",
        "QUEUE",
        "NFQUEUE",
        "REJECT",
        IPT_FORWARD_CHAIN,
        IPT_OWNERS_CHAIN,
        IPT_ISOLATION_STAGE_1,
        IPT_ISOLATION_STAGE_2,
    ];
    let why = if name.is_empty() {
        Some("is empty".to_string())
    } else if name.len() > MAX_CHAIN_LEN {
        Some(format!("is longer than {MAX_CHAIN_LEN} characters"))
    } else if !name
        .chars()
        .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\'))
    {
        Some("may only hold printable ASCII without quotes or backslashes".to_string())
    } else if name.starts_with('-') || name.starts_with('!') {
        Some("may not start with '-' or '!'".to_string())
    } else if RESERVED.contains(&name) {
        Some("is a built-in chain or target, or a chain of the plugin itself".to_string())
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::config(
            key,
            format!("{name:?} is not a usable iptables chain name: it {why}"),
        )),
        None => Ok(()),
    }
}

/// Checks the name of the bridge to isolate, read from config key `key`
/// (code 7): an interface name (1 to 15 printable ASCII characters) that
/// iptables and nftables take literally, so without quotes, backslashes
/// and the wildcards `+` and `*`, and not starting with `!` or `-`.
pub fn validate_bridge_name(key: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name.chars().all(|c| {
            c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\' | '+' | '*' | '/' | ':')
        })
        && !name.starts_with('!')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::config(
            key,
            format!(
                "{name:?} is not a bridge name the isolation rules can match (1-15 printable \
                 characters, no quotes, '/', ':', '+' or '*')"
            ),
        ))
    }
}

// ---- entry points -------------------------------------------------------------

/// Accepts forwarding for `spec`'s addresses (and isolates its bridge) on
/// `backend`, in the calling thread's namespace. Idempotent.
pub fn add(backend: Backend, spec: &FirewallSpec) -> Result<()> {
    match backend {
        Backend::Nftables => {
            let mut nft = Nft::open()?;
            fault::point("firewall/add-before-commit");
            nft_add(&mut nft, spec)?;
        }
        Backend::Iptables => {
            fault::point("firewall/add-before-commit");
            let mut first = true;
            for v6 in [false, true] {
                let addrs = spec.family_addrs(v6);
                if addrs.is_empty() {
                    continue;
                }
                if !first {
                    fault::point("firewall/add-between-families");
                }
                ipt_add(spec, &addrs, v6)?;
                first = false;
            }
        }
    }
    fault::point("firewall/add-after-commit");
    Ok(())
}

/// Whether `spec`'s rules are all there (CHECK); code 102 naming what is
/// missing otherwise.
pub fn check(backend: Backend, spec: &FirewallSpec) -> Result<()> {
    match backend {
        Backend::Nftables => nft_check(&mut Nft::open()?, spec),
        Backend::Iptables => {
            for v6 in [false, true] {
                let addrs = spec.family_addrs(v6);
                if !addrs.is_empty() {
                    ipt_check(spec, &addrs, v6)?;
                }
            }
            Ok(())
        }
    }
}

/// Removes `owner`'s rules on both backends: the addresses in `known`
/// (from `prevResult`, may be empty) and whatever the owner records name.
/// Needs neither the namespace nor the addresses. The nftables side is a
/// few netlink reads; the iptables side runs processes only when `backend`
/// is iptables or nf_tables shows iptables state this DEL may concern.
/// Best effort: every step runs, the errors are reported together.
pub fn del(backend: Backend, owner: &Owner, known: &[IpAddr]) -> Result<()> {
    let mut errors = ErrorList::new();
    fault::point("firewall/del-before-commit");
    let mut nft = open_nft_for_teardown(backend, &mut errors);
    if let Some(n) = nft.as_mut() {
        errors.record(nft_del(n, owner, known));
    }
    for v6 in [false, true] {
        let addrs = of_family(known, v6);
        let wanted = backend == Backend::Iptables
            || nft
                .as_mut()
                .is_none_or(|n| ipt_state_visible(n, v6, &addrs, known.is_empty()));
        if wanted {
            errors.record(ipt_del(owner, &addrs, v6));
        }
    }
    fault::point("firewall/del-after-commit");
    errors.finish_kernel("firewall DEL")
}

/// Removes the rules of containers of `network` that are not in `valid`
/// (GC), on both backends as [`del`] does.
pub fn gc(backend: Backend, network: &str, valid: &[Attachment]) -> Result<()> {
    let mut errors = ErrorList::new();
    let mut nft = open_nft_for_teardown(backend, &mut errors);
    if let Some(n) = nft.as_mut() {
        errors.record(nft_gc(n, network, valid));
    }
    for v6 in [false, true] {
        let wanted = backend == Backend::Iptables
            || nft
                .as_mut()
                .is_none_or(|n| ipt_state_visible(n, v6, &[], true));
        if wanted {
            errors.record(ipt_gc(network, valid, v6));
        }
    }
    errors.finish_kernel("firewall GC")
}

// ---- nftables -----------------------------------------------------------------

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

/// `oifname B drop`.
fn isolation2_rule(bridge: &str) -> Vec<Expr> {
    let mut r = expr::match_ifname(false, CmpOp::Eq, bridge);
    r.push(Expr::Immediate(Verdict::Drop));
    r
}

fn has_isolation(rules: &[RuleInfo], chain: &str, bridge: &str) -> bool {
    let c = isolation_comment(bridge);
    rules
        .iter()
        .any(|r| r.chain == chain && r.comment.as_deref() == Some(c.as_str()))
}

/// nftables ADD: the skeleton when missing, the bridge's isolation rules
/// when missing, the addresses' elements (replacing another owner's), in
/// one batch. Nothing is sent when everything is already there.
pub fn nft_add(nft: &mut Nft, spec: &FirewallSpec) -> Result<()> {
    let tag = spec.owner.tag();
    let rules = nft.table_rules(F, TABLE)?;
    let mut b = Batch::new();
    if !skeleton_intact(&rules) {
        skeleton(&mut b);
    }
    if let Some(bridge) = &spec.isolate {
        let comment = isolation_comment(bridge);
        if !has_isolation(&rules, "isolation1", bridge) {
            b.add_rule(
                F,
                TABLE,
                "isolation1",
                &isolation1_rule(bridge),
                Some(&comment),
            );
        }
        if !has_isolation(&rules, "isolation2", bridge) {
            b.add_rule(
                F,
                TABLE,
                "isolation2",
                &isolation2_rule(bridge),
                Some(&comment),
            );
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

/// nftables CHECK.
pub fn nft_check(nft: &mut Nft, spec: &FirewallSpec) -> Result<()> {
    let failed = |what: String| Error::CheckFailed(format!("firewall: {what}"));
    let rules = nft.table_rules(F, TABLE)?;
    if !skeleton_intact(&rules) {
        return Err(failed(format!(
            "chain inet {TABLE} forward does not hold the plugin's {FORWARD_RULES} rules"
        )));
    }
    if let Some(bridge) = &spec.isolate {
        for chain in ["isolation1", "isolation2"] {
            if !has_isolation(&rules, chain, bridge) {
                return Err(failed(format!(
                    "chain inet {TABLE} {chain} has no rule isolating bridge {bridge}"
                )));
            }
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

/// nftables DEL: by key when the addresses are known (elements of another
/// owner are left alone), else every element tagged with `owner`.
pub fn nft_del(nft: &mut Nft, owner: &Owner, known: &[IpAddr]) -> Result<()> {
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
            Err(e) if crate::netlink::is_not_found(&e) && attempt < IPT_ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// nftables GC: elements of containers of `network` not in `valid`.
pub fn nft_gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
    let sets = [nft_set_name(false), nft_set_name(true)];
    nft.delete_tagged(F, TABLE, &sets, &[], &|c| {
        Owner::is_stale_tag(c, network, valid)
    })
    .map(|_| ())
}

/// Whether iptables-nft shows state in the family's filter table that a
/// DEL of `addrs` (or, with `unknown`, of a container whose addresses are
/// not known) or a GC may have to remove: owner records, or an accept rule
/// of one of the addresses. Read through nf_tables, without a process; a
/// failed read answers yes.
fn ipt_state_visible(nft: &mut Nft, v6: bool, addrs: &[IpAddr], unknown: bool) -> bool {
    let family = if v6 { Family::Ip6 } else { Family::Ip };
    let owners = match nft.rules(family, "filter", IPT_OWNERS_CHAIN) {
        Ok(r) => r,
        Err(_) => return true,
    };
    if unknown {
        return !owners.is_empty();
    }
    if addrs.is_empty() {
        return false;
    }
    let forward = match nft.rules(family, "filter", IPT_FORWARD_CHAIN) {
        Ok(r) => r,
        Err(_) => return true,
    };
    let wanted: Vec<Vec<u8>> = addrs.iter().map(|a| expr::ip_bytes(*a)).collect();
    owners
        .iter()
        .chain(forward.iter())
        .any(|r| r.cmp_data.iter().any(|d| wanted.contains(d)))
}

// ---- iptables -----------------------------------------------------------------

/// Whether a restore failed because the table changed after our save (a
/// chain created or a rule deleted by another process meanwhile).
fn is_conflict(e: &Error) -> bool {
    let s = e.to_string();
    s.contains("already exists") || s.contains("does a matching rule exist")
}

/// One save of the filter table, the changes `build` derives from it, one
/// restore (none when there is nothing to change); retried on a fresh save
/// when another process changed the chains in between.
fn ipt_apply(fam: IptFamily, build: &dyn Fn(&SavedTable, &mut Restore)) -> Result<()> {
    let mut attempt = 1;
    loop {
        let saved = iptables::save(fam, IptTable::Filter)?;
        let mut r = Restore::new(IptTable::Filter);
        build(&saved, &mut r);
        match iptables::restore(fam, &r) {
            Ok(()) => return Ok(()),
            Err(e) if is_conflict(&e) && attempt < IPT_ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// `addr/32` or `addr/128`, as iptables-save prints a host.
fn host(addr: IpAddr) -> String {
    format!("{addr}/{}", if addr.is_ipv4() { 32 } else { 128 })
}

/// The owner comment, in the Go plugins' format (cut to the 255 bytes an
/// iptables comment holds; names are ASCII).
pub fn ipt_comment(owner: &Owner) -> String {
    let mut c = format!("name: \"{}\" id: \"{}\"", owner.network, owner.container_id);
    c.truncate(255);
    c
}

/// `FORWARD -j CNI-FORWARD`.
pub fn ipt_forward_jump() -> String {
    iptables::rule_line(
        "FORWARD",
        &[
            "-m",
            "comment",
            "--comment",
            FORWARD_COMMENT,
            "-j",
            IPT_FORWARD_CHAIN,
        ],
    )
}

/// `CNI-FORWARD -j <admin chain>`.
pub fn ipt_admin_jump(admin: &str) -> String {
    iptables::rule_line(
        IPT_FORWARD_CHAIN,
        &["-m", "comment", "--comment", ADMIN_COMMENT, "-j", admin],
    )
}

/// The Go plugin's two accept rules of an address.
pub fn ipt_accept_rules(addr: IpAddr) -> [String; 2] {
    let h = host(addr);
    [
        iptables::rule_line(
            IPT_FORWARD_CHAIN,
            &[
                "-d",
                &h,
                "-m",
                "conntrack",
                "--ctstate",
                "RELATED,ESTABLISHED",
                "-j",
                "ACCEPT",
            ],
        ),
        iptables::rule_line(IPT_FORWARD_CHAIN, &["-s", &h, "-j", "ACCEPT"]),
    ]
}

/// Our owner record of an address.
pub fn ipt_owner_rule(owner: &Owner, addr: IpAddr) -> String {
    iptables::rule_line(
        IPT_OWNERS_CHAIN,
        &[
            "-s",
            &host(addr),
            "-m",
            "comment",
            "--comment",
            &ipt_comment(owner),
        ],
    )
}

/// The Go plugin's isolation rules of `bridge`: the FORWARD jump, the
/// stage-1 and stage-2 bridge rules and the two RETURNs.
pub fn ipt_isolation_rules(bridge: &str) -> [String; 5] {
    let c = ISOLATION_COMMENT;
    [
        iptables::rule_line(
            "FORWARD",
            &["-m", "comment", "--comment", c, "-j", IPT_ISOLATION_STAGE_1],
        ),
        iptables::rule_line(
            IPT_ISOLATION_STAGE_1,
            &[
                "-i",
                bridge,
                "!",
                "-o",
                bridge,
                "-m",
                "comment",
                "--comment",
                c,
                "-j",
                IPT_ISOLATION_STAGE_2,
            ],
        ),
        iptables::rule_line(
            IPT_ISOLATION_STAGE_1,
            &["-m", "comment", "--comment", c, "-j", "RETURN"],
        ),
        iptables::rule_line(
            IPT_ISOLATION_STAGE_2,
            &["-o", bridge, "-m", "comment", "--comment", c, "-j", "DROP"],
        ),
        iptables::rule_line(
            IPT_ISOLATION_STAGE_2,
            &["-m", "comment", "--comment", c, "-j", "RETURN"],
        ),
    ]
}

/// An owner record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OwnerRecord {
    line: String,
    addr: IpAddr,
    comment: String,
}

fn owner_records(saved: &SavedTable) -> Vec<OwnerRecord> {
    saved
        .rules_of(IPT_OWNERS_CHAIN)
        .filter_map(|line| {
            let tokens = iptables::split_tokens(line);
            let i = tokens.iter().position(|t| t == "-s")?;
            let src = tokens.get(i + 1)?;
            let addr: IpAddr = src.split('/').next()?.parse().ok()?;
            Some(OwnerRecord {
                line: line.clone(),
                addr,
                comment: iptables::rule_comment(line)?,
            })
        })
        .collect()
}

/// iptables ADD for the addresses of one family.
pub fn ipt_add(spec: &FirewallSpec, addrs: &[IpAddr], v6: bool) -> Result<()> {
    let mine = ipt_comment(&spec.owner);
    ipt_apply(IptFamily::of_v6(v6), &|saved, r| {
        let mut chains = vec![
            IPT_FORWARD_CHAIN,
            spec.admin_chain.as_str(),
            IPT_OWNERS_CHAIN,
        ];
        if spec.isolate.is_some() {
            chains.extend([IPT_ISOLATION_STAGE_1, IPT_ISOLATION_STAGE_2]);
        }
        for c in chains {
            if !saved.has_chain(c) {
                r.create_chain(c);
            }
        }
        for first in [ipt_forward_jump(), ipt_admin_jump(&spec.admin_chain)] {
            if !saved.has_rule(&first) {
                r.insert_first(&first);
            }
        }
        for a in addrs {
            for rule in ipt_accept_rules(*a) {
                if !saved.has_rule(&rule) {
                    r.append(rule);
                }
            }
        }
        // An address belongs to its latest owner.
        for rec in owner_records(saved) {
            if addrs.contains(&rec.addr) && rec.comment != mine {
                r.delete(&rec.line);
            }
        }
        for a in addrs {
            let rec = ipt_owner_rule(&spec.owner, *a);
            if !saved.has_rule(&rec) {
                r.append(rec);
            }
        }
        if let Some(bridge) = &spec.isolate {
            // Inserted after the CNI-FORWARD jump, so it ends up first, as
            // the Go plugin has it; bridge rules go before the RETURNs.
            let [jump, stage1, return1, stage2, return2] = ipt_isolation_rules(bridge);
            for (rule, first) in [
                (jump, true),
                (stage1, true),
                (return1, false),
                (stage2, true),
                (return2, false),
            ] {
                if saved.has_rule(&rule) {
                    continue;
                }
                if first {
                    r.insert_first(&rule);
                } else {
                    r.append(rule);
                }
            }
        }
    })
}

/// Removes the owner records `doomed` accepts and the accept rules of
/// their addresses and of `extra`, except addresses another record still
/// holds.
fn ipt_removal(
    saved: &SavedTable,
    r: &mut Restore,
    doomed: &dyn Fn(&OwnerRecord) -> bool,
    extra: &[IpAddr],
) {
    let (gone, kept): (Vec<OwnerRecord>, Vec<OwnerRecord>) =
        owner_records(saved).into_iter().partition(|r| doomed(r));
    let held: BTreeSet<IpAddr> = kept.iter().map(|r| r.addr).collect();
    let addrs: BTreeSet<IpAddr> = gone
        .iter()
        .map(|r| r.addr)
        .chain(extra.iter().copied())
        .filter(|a| !held.contains(a))
        .collect();
    for a in addrs {
        let accept = ipt_accept_rules(a);
        for line in saved.rules.iter().filter(|r| accept.contains(r)) {
            r.delete(line);
        }
    }
    for rec in gone {
        r.delete(&rec.line);
    }
}

/// iptables DEL for one family: `owner`'s records and the accept rules of
/// their addresses and of `known`.
pub fn ipt_del(owner: &Owner, known: &[IpAddr], v6: bool) -> Result<()> {
    let mine = ipt_comment(owner);
    ipt_apply(IptFamily::of_v6(v6), &|saved, r| {
        ipt_removal(saved, r, &|rec| rec.comment == mine, known)
    })
}

/// iptables GC for one family: records naming a container of `network`
/// that is not in `valid`, and their addresses' accept rules.
pub fn ipt_gc(network: &str, valid: &[Attachment], v6: bool) -> Result<()> {
    ipt_apply(IptFamily::of_v6(v6), &|saved, r| {
        ipt_removal(
            saved,
            r,
            &|rec| match parse_go_comment(&rec.comment) {
                Some((net, cid)) => net == network && !valid.iter().any(|a| a.container_id == cid),
                None => false,
            },
            &[],
        )
    })
}

/// iptables CHECK for the addresses of one family (the owner records are
/// not required: a container the Go plugin added has none).
pub fn ipt_check(spec: &FirewallSpec, addrs: &[IpAddr], v6: bool) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Filter)?;
    let tool = if v6 { "ip6tables" } else { "iptables" };
    let failed = |what: String| Error::CheckFailed(format!("firewall: {what}"));
    for c in [IPT_FORWARD_CHAIN, spec.admin_chain.as_str()] {
        if !saved.has_chain(c) {
            return Err(failed(format!(
                "chain {c} is missing from the {tool} filter table"
            )));
        }
    }
    let mut wanted = vec![ipt_forward_jump(), ipt_admin_jump(&spec.admin_chain)];
    for a in addrs {
        wanted.extend(ipt_accept_rules(*a));
    }
    if let Some(bridge) = &spec.isolate {
        let [jump, stage1, _, stage2, _] = ipt_isolation_rules(bridge);
        wanted.extend([jump, stage1, stage2]);
    }
    for line in wanted {
        if !saved.has_rule(&line) {
            return Err(failed(format!("{tool} rule missing: {line}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::nft::kernel_tests::nft_list;
    use crate::netfilter::testing::run_in;
    use crate::netns::testing::{new_netns, privileged};

    fn spec(cid: &str, addrs: &[&str], isolate: Option<&str>) -> FirewallSpec {
        FirewallSpec {
            owner: Owner::new("fwnet", cid),
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
            isolate: isolate.map(str::to_string),
            admin_chain: IPT_DEFAULT_ADMIN_CHAIN.into(),
        }
    }

    #[test]
    fn netfilter_firewall_iptables_rules_are_in_iptables_save_form() {
        assert_eq!(
            ipt_forward_jump(),
            "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD"
        );
        assert_eq!(
            ipt_accept_rules("10.88.0.2".parse().unwrap()),
            [
                "-A CNI-FORWARD -d 10.88.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
                    .to_string(),
                "-A CNI-FORWARD -s 10.88.0.2/32 -j ACCEPT".to_string()
            ]
        );
        assert_eq!(
            ipt_owner_rule(&Owner::new("n", "c"), "fd00::2".parse().unwrap()),
            "-A CNI-FORWARD-OWNERS -s fd00::2/128 -m comment --comment \"name: \\\"n\\\" id: \\\"c\\\"\""
        );
        let saved = SavedTable::parse(&format!(
            "*filter\n:CNI-FORWARD-OWNERS - [0:0]\n{}\n{}\n",
            ipt_owner_rule(&Owner::new("n", "a"), "10.0.0.2".parse().unwrap()),
            ipt_owner_rule(&Owner::new("n", "b"), "10.0.0.3".parse().unwrap()),
        ));
        let recs = owner_records(&saved);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].addr, "10.0.0.3".parse::<IpAddr>().unwrap());
        assert_eq!(recs[1].comment, "name: \"n\" id: \"b\"");
    }

    #[test]
    fn netfilter_firewall_names_are_validated() {
        for ok in ["CNI-ADMIN", "MY_ADMIN.1", &"A".repeat(28)] {
            validate_chain_name("iptablesAdminChainName", ok).unwrap();
        }
        for bad in [
            "",
            "a b",
            "-x",
            "!x",
            "FORWARD",
            "ACCEPT",
            "CNI-FORWARD",
            "a\"b",
            &"A".repeat(29),
        ] {
            let e = validate_chain_name("iptablesAdminChainName", bad).unwrap_err();
            assert_eq!(e.code(), 7, "{bad}");
            assert!(e.to_string().contains("iptablesAdminChainName"), "{e}");
        }
        validate_bridge_name("k", "cni-podman0").unwrap();
        for bad in ["", "br+", "br*", "a b", "x\"", "!br", "a234567890123456"] {
            assert_eq!(
                validate_bridge_name("k", bad).unwrap_err().code(),
                7,
                "{bad}"
            );
        }
    }

    #[test]
    fn netfilter_firewall_nft_lists_the_design_and_collects() {
        if !privileged("netfilter_firewall_nft_lists_the_design_and_collects") {
            return;
        }
        let node = new_netns();
        let a = spec("ctr-a", &["10.1.0.2", "fd00:1::2"], Some("cni0"));
        let b = spec("ctr-b", &["10.1.0.3"], Some("cni0"));
        node.run(|| {
            add(Backend::Nftables, &a)?;
            add(Backend::Nftables, &a)?;
            add(Backend::Nftables, &b)?;
            check(Backend::Nftables, &a)?;
            check(Backend::Nftables, &b)
        })
        .unwrap()
        .unwrap();
        let listed = nft_list(&node);
        for want in [
            "type filter hook forward priority filter; policy accept;",
            "jump isolation1 comment \"cni-rs firewall skeleton v1\"",
            "jump admin",
            "ip daddr @allowed4 ct state established,related accept",
            "ip saddr @allowed4 accept",
            "ip6 daddr @allowed6 ct state established,related accept",
            "ip6 saddr @allowed6 accept",
            "iifname \"cni0\" oifname != \"cni0\" jump isolation2 comment \"same-bridge cni0\"",
            "oifname \"cni0\" drop comment \"same-bridge cni0\"",
            "10.1.0.2 comment \"net=fwnet cid=ctr-a\"",
            "fd00:1::2 comment \"net=fwnet cid=ctr-a\"",
            "10.1.0.3 comment \"net=fwnet cid=ctr-b\"",
        ] {
            assert!(listed.contains(want), "{want:?} not in\n{listed}");
        }
        assert_eq!(
            listed.matches("same-bridge cni0").count(),
            2,
            "one rule per stage per bridge:\n{listed}"
        );
        let valid = vec![Attachment {
            container_id: "ctr-a".into(),
            ifname: "eth0".into(),
        }];
        node.run(|| gc(Backend::Nftables, "fwnet", &valid))
            .unwrap()
            .unwrap();
        let listed = nft_list(&node);
        assert!(!listed.contains("ctr-b"), "{listed}");
        assert!(listed.contains("cid=ctr-a"), "{listed}");
        // DEL without addresses finds the elements by tag.
        node.run(|| del(Backend::Nftables, &a.owner, &[]))
            .unwrap()
            .unwrap();
        let listed = nft_list(&node);
        assert!(!listed.contains("cid=ctr-a"), "{listed}");
        let e = node
            .run(|| check(Backend::Nftables, &a))
            .unwrap()
            .unwrap_err();
        assert_eq!(e.code(), 102, "{e}");
    }

    #[test]
    fn netfilter_firewall_iptables_records_owners_and_spares_a_new_owner() {
        if !privileged("netfilter_firewall_iptables_records_owners_and_spares_a_new_owner") {
            return;
        }
        let node = new_netns();
        let old = spec("ctr-old", &["10.1.0.2"], None);
        let new = spec("ctr-new", &["10.1.0.2"], None);
        node.run(|| {
            add(Backend::Iptables, &old)?;
            add(Backend::Iptables, &new)?;
            // A late DEL of the old container leaves the new owner's rules.
            del(Backend::Iptables, &old.owner, &old.addrs)?;
            check(Backend::Iptables, &new)
        })
        .unwrap()
        .unwrap();
        let saved = run_in(&node, "iptables-save", &["-t", "filter"]);
        assert!(saved.contains("id: \\\"ctr-new\\\""), "{saved}");
        assert!(!saved.contains("ctr-old"), "{saved}");
        assert_eq!(
            saved
                .matches("-A CNI-FORWARD -s 10.1.0.2/32 -j ACCEPT")
                .count(),
            1,
            "{saved}"
        );
        node.run(|| del(Backend::Iptables, &new.owner, &[]))
            .unwrap()
            .unwrap();
        let saved = run_in(&node, "iptables-save", &["-t", "filter"]);
        assert!(!saved.contains("10.1.0.2"), "{saved}");
    }
}
