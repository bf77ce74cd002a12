//! IP masquerade of a container's traffic (bridge and ptp `ipMasq`):
//! traffic from a container address to destinations outside its subnet,
//! multicast excepted, leaves with the node's address. IPv4 and IPv6, both
//! backends, each in the Go plugins' own format so that either side's DEL
//! and GC remove the other's rules.
//!
//! # nftables design
//!
//! Exactly the Go plugins' (v1.6+), encoded as `nft` encodes their text:
//!
//! ```text
//! table inet cni_plugins_masquerade       comment "Masquerading for plugins from ..."
//!   chain masq_checks                     comment "Masquerade traffic from certain IPs ..."
//!       per container address, comment "<hash(net)>-<hash(if:cid)>, net: N, if: I, id: C":
//!       ip saddr == 10.1.0.5 ip daddr != 10.1.0.0/24 masquerade
//!   chain postrouting (nat, postrouting, 100)
//!       ip daddr 224.0.0.0/4 return; ip6 daddr ff00::/8 return; goto masq_checks
//! ```
//!
//! Setup appends the container's rules with `NLM_F_ECHO` and keeps their
//! handles in the attachment's [`ledger`] (`/run/cni/ipmasq/<net>/<cid>:<if>`);
//! teardown reads each back, checks its comment and deletes it, so neither
//! lists `masq_checks` (a rule per address of every container). Without a
//! ledger (the Go plugins' rules, an ADD killed before its ledger) teardown
//! lists `masq_checks` once and deletes the rules whose comment starts with
//! the attachment's hash, as the Go plugins do; GC lists it and deletes the
//! network's rules of attachments that are not valid. `postrouting` is
//! rewritten only when it is not the Go plugins'. Our previous releases'
//! `inet cni_rs_masq` (address sets) is still cleaned by teardown and GC,
//! and deleted once it holds no container's address.
//!
//! # iptables design
//!
//! The Go plugin's: a chain `CNI-<24 hex of sha512(network + container)>`
//! with `-d <subnet> -j ACCEPT` and `! -d <multicast> -j MASQUERADE`, and
//! `POSTROUTING -s <address> -j CNI-...`, all with the comment
//! `name: "<net>" id: "<cid>"`. Teardown finds the chain by its hashed name
//! and every rule jumping to it, so it works without addresses too (the Go
//! plugin needs them and leaks without); GC reads the comments.
//!
//! The iptables backend is the default, as the Go plugins' (v1.9) is,
//! wherever the node has an `iptables` ([`super::default_backend`]). On
//! iptables-nft its rules are written and read over netlink
//! ([`super::iptables_nft::nat`], no process): ADD reads `POSTROUTING` only when the
//! container's chain already exists, and keeps the handles of its
//! `POSTROUTING` jumps in a ledger (`ipmasq-iptables/<net>/<cid>`), so DEL
//! reads them back instead of listing `POSTROUTING`. Elsewhere one
//! `iptables-save` and one `iptables-restore` per family and operation.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::iptables::{self, IptFamily, IptTable, Restore, SavedTable};
use super::ledger::{self, Entry, Ledger};
use super::nft::expr::{self, CmpOp, Expr, Verdict};
use super::nft::{BaseChain, Batch, Elem, Family, Hook, Nft, RuleInfo, PRIORITY_SRCNAT};
use super::{
    go_chain_name, iptables_nft::nat, open_nft_for_teardown, parse_go_comment, Backend,
    IptablesPath, Owner,
};
use crate::types::{Attachment, IpPrefix};
use crate::{Error, ErrorList, Result};

/// The Go plugins' nf_tables table of ipMasq.
pub const TABLE: &str = "cni_plugins_masquerade";
/// The chain of the per-address rules.
pub const CHAIN: &str = "masq_checks";
/// The table of our previous releases (address sets), still cleaned.
pub const OLD_TABLE: &str = "cni_rs_masq";
const F: Family = Family::Inet;
const TABLE_COMMENT: &str = "Masquerading for plugins from github.com/containernetworking/plugins";
const CHAIN_COMMENT: &str =
    "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet";
/// The ledger feature name.
pub(crate) const LEDGER: &str = "ipmasq";

/// Masquerades traffic of `owner`'s addresses on `ifname` (with their
/// prefix, which gives the subnet left alone) on `backend`, in the calling
/// thread's namespace. Idempotent.
/// The iptables backend is written over netlink where the node's
/// iptables is iptables-nft ([`ipt_setup_netlink`]), by `iptables-restore`
/// elsewhere.
pub fn setup(backend: Backend, owner: &Owner, ifname: &str, addrs: &[IpPrefix]) -> Result<()> {
    match backend {
        Backend::Nftables => nft_setup(&mut Nft::open()?, owner, ifname, addrs),
        Backend::Iptables if IptablesPath::of_node() == IptablesPath::Netlink => {
            ipt_setup_netlink(&mut Nft::open()?, owner, addrs)
        }
        Backend::Iptables => per_family(addrs, |fam, v6| ipt_setup(owner, fam, v6)),
    }
}

/// Calls `f` with the addresses of each family that has any (IPv4 first),
/// stopping at the first error.
fn per_family(addrs: &[IpPrefix], f: impl Fn(&[IpPrefix], bool) -> Result<()>) -> Result<()> {
    for v6 in [false, true] {
        let fam: Vec<IpPrefix> = addrs
            .iter()
            .filter(|a| a.is_ipv4() != v6)
            .copied()
            .collect();
        if !fam.is_empty() {
            f(&fam, v6)?;
        }
    }
    Ok(())
}

/// Removes `owner`'s masquerade on `ifname` on both backends, as the Go
/// plugins do: on iptables-nft the iptables side is read and written over
/// netlink; elsewhere it runs a process only when iptables-nft shows the
/// container's chain, or when `backend` is iptables. Needs no address:
/// DEL works after the namespace is gone. Best effort: every step runs,
/// the first error is returned.
pub fn teardown(backend: Backend, owner: &Owner, ifname: &str) -> Result<()> {
    let mut errors = ErrorList::new();
    let mut nft = open_nft_for_teardown(backend, &mut errors);
    if let Some(n) = nft.as_mut() {
        errors.record(nft_teardown(n, owner, ifname));
        if IptablesPath::of_node() == IptablesPath::Netlink {
            errors.record(ipt_teardown_netlink(n, owner));
            return errors.finish_first();
        }
    }
    let chain = ipt_chain(owner);
    for v6 in [false, true] {
        let visible = nft.as_mut().is_none_or(|n| {
            let family = if v6 { Family::Ip6 } else { Family::Ip };
            n.has_chain(family, "nat", &chain).unwrap_or(true)
        });
        if backend == Backend::Iptables || visible {
            errors.record(ipt_teardown(owner, v6));
        }
    }
    errors.finish_first()
}

/// Removes the masquerade of attachments of `network` that are not in
/// `valid` (GC): on nf_tables always (the Go plugins' rules and ours look
/// alike), on iptables when `backend` is iptables.
pub fn gc(backend: Backend, network: &str, valid: &[Attachment]) -> Result<()> {
    let mut errors = ErrorList::new();
    let mut nft = open_nft_for_teardown(backend, &mut errors);
    if let Some(n) = nft.as_mut() {
        errors.record(nft_gc(n, network, valid));
        if IptablesPath::of_node() == IptablesPath::Netlink {
            errors.record(ipt_gc_netlink(n, network, valid));
            return errors.finish_first();
        }
    }
    if backend == Backend::Iptables {
        for v6 in [false, true] {
            errors.record(ipt_gc(network, valid, v6));
        }
    }
    errors.finish_first()
}

/// Whether `owner`'s addresses are masqueraded (CHECK); code 102 otherwise.
pub fn check(backend: Backend, owner: &Owner, ifname: &str, addrs: &[IpPrefix]) -> Result<()> {
    match backend {
        Backend::Nftables => nft_check(&mut Nft::open()?, owner, ifname, addrs),
        Backend::Iptables if IptablesPath::of_node() == IptablesPath::Netlink => {
            ipt_check_netlink(&mut Nft::open()?, owner, addrs)
        }
        Backend::Iptables => per_family(addrs, |fam, v6| ipt_check(owner, fam, v6)),
    }
}

// ---- nftables -------------------------------------------------------------

/// The first `len` hex digits of sha512(`s`) (Go's `MustFormatHashWithPrefix`
/// with no prefix).
fn hash(len: usize, s: &str) -> String {
    super::hex_sha512(s)[..len].to_string()
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
    let mut cut = super::nft::MAX_NFT_COMMENT_CHARS.min(c.len());
    while !c.is_char_boundary(cut) {
        cut -= 1;
    }
    c.truncate(cut);
    c
}

fn ledger_of(owner: &Owner, ifname: &str) -> Option<Ledger> {
    Ledger::new(
        LEDGER,
        &owner.network,
        &format!("{}:{ifname}", owner.container_id),
    )
}

/// The rule of one container address in `masq_checks`.
fn address_rule(a: &IpPrefix) -> Vec<Expr> {
    let v6 = !a.is_ipv4();
    let width = if v6 { 128 } else { 32 };
    let net = a.truncate();
    let mut r = expr::match_nfproto(v6);
    r.extend(expr::match_prefix_nft(true, CmpOp::Eq, a.addr(), width));
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
    for (v6, mcast, len) in [(false, "224.0.0.0", 4u8), (true, "ff00::", 8)] {
        let addr: IpAddr = mcast
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        let mut r = expr::match_nfproto(v6);
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

/// The entries of `entries` whose rule is still there with `comment`, and
/// whether all were.
fn verified(nft: &mut Nft, entries: &[Entry], comment: &str) -> Result<(Vec<Entry>, bool)> {
    let mut out = Vec::new();
    let mut all = true;
    for e in entries {
        match nft.get_rule(e.family, &e.table, &e.chain, e.handle)? {
            Some(r) if r.comment.as_deref() == Some(comment) => out.push(e.clone()),
            _ => all = false,
        }
    }
    Ok((out, all))
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
pub fn nft_setup(nft: &mut Nft, owner: &Owner, ifname: &str, addrs: &[IpPrefix]) -> Result<()> {
    let comment = rule_comment(&owner.network, ifname, &owner.container_id);
    let ledger = ledger_of(owner, ifname);
    ledger::commit_recorded(nft, ledger.as_ref(), &mut |nft, b| {
        if !skeleton_intact(nft)? {
            skeleton(b);
        }
        if let Some(old) = ledger.as_ref().and_then(Ledger::load) {
            for e in verified(nft, &old, &comment)?.0 {
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
pub fn nft_teardown(nft: &mut Nft, owner: &Owner, ifname: &str) -> Result<()> {
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
                let (ok, all) = verified(nft, &entries, &comment)?;
                (ok.iter().map(|e| e.handle).collect(), all)
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
pub fn nft_gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
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
pub fn nft_check(nft: &mut Nft, owner: &Owner, ifname: &str, addrs: &[IpPrefix]) -> Result<()> {
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

// ---- iptables ---------------------------------------------------------------

/// The Go plugin's masquerade chain `CNI-<24 hex>`.
pub fn ipt_chain(owner: &Owner) -> String {
    go_chain_name("", &owner.network, &owner.container_id)
}

fn ipt_comment(owner: &Owner) -> String {
    format!("name: \"{}\" id: \"{}\"", owner.network, owner.container_id)
}

fn ipt_rules(owner: &Owner, a: &IpPrefix, fam: IptFamily) -> (String, String, String) {
    let chain = ipt_chain(owner);
    let comment = ipt_comment(owner);
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
            fam.multicast(),
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
fn ipt_setup_changes(
    owner: &Owner,
    addrs: &[IpPrefix],
    fam: IptFamily,
    saved: &SavedTable,
    r: &mut Restore,
) {
    let chain = ipt_chain(owner);
    if !saved.has_chain(&chain) {
        r.declare(&chain);
    }
    let mut added = BTreeSet::new();
    for a in addrs {
        let (accept, masq, entry) = ipt_rules(owner, a, fam);
        for line in [accept, masq, entry] {
            if !saved.has_rule(&line) && added.insert(line.clone()) {
                r.append(line);
            }
        }
    }
}

/// iptables setup for the addresses of one family: one save, one restore.
pub fn ipt_setup(owner: &Owner, addrs: &[IpPrefix], v6: bool) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    let mut r = Restore::new(IptTable::Nat);
    ipt_setup_changes(owner, addrs, fam, &saved, &mut r);
    iptables::restore(fam, &r)
}

fn ipt_remove(saved: &SavedTable, r: &mut Restore, chain: &str) {
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

/// iptables teardown for one family, by the hashed chain name.
pub fn ipt_teardown(owner: &Owner, v6: bool) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    let mut r = Restore::new(IptTable::Nat);
    ipt_remove(&saved, &mut r, &ipt_chain(owner));
    iptables::restore(fam, &r)
}

/// The changes of an iptables GC for one family: POSTROUTING rules whose
/// comment names a container of `network` not in `valid` lose their chain.
fn ipt_gc_changes(network: &str, valid: &[Attachment], saved: &SavedTable, r: &mut Restore) {
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
        if net != network
            || target != ipt_chain(&owner)
            || valid.iter().any(|a| a.container_id == cid)
        {
            continue;
        }
        if done.insert(target.clone()) {
            ipt_remove(saved, r, &target);
        }
    }
}

/// iptables GC for one family (one save, one restore).
pub fn ipt_gc(network: &str, valid: &[Attachment], v6: bool) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    let mut r = Restore::new(IptTable::Nat);
    ipt_gc_changes(network, valid, &saved, &mut r);
    iptables::restore(fam, &r)
}

/// Whether `saved` holds the rules of `addrs` (of one family).
fn ipt_check_saved(owner: &Owner, addrs: &[IpPrefix], v6: bool, saved: &SavedTable) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    for a in addrs {
        let (accept, masq, entry) = ipt_rules(owner, a, fam);
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
pub fn ipt_check(owner: &Owner, addrs: &[IpPrefix], v6: bool) -> Result<()> {
    let saved = iptables::save(IptFamily::of_v6(v6), IptTable::Nat)?;
    ipt_check_saved(owner, addrs, v6, &saved)
}

// ---- iptables rules on iptables-nft, over netlink --------------------------------

/// The ledger feature of the iptables rules written over netlink: the
/// handles of a container's jumps in `POSTROUTING`.
pub(crate) const IPT_LEDGER: &str = "ipmasq-iptables";
const POSTROUTING: &str = "POSTROUTING";

fn ipt_ledger(owner: &Owner) -> Option<Ledger> {
    Ledger::new(IPT_LEDGER, &owner.network, &owner.container_id)
}

fn ipt_family(v6: bool) -> Family {
    if v6 {
        Family::Ip6
    } else {
        Family::Ip
    }
}

/// iptables setup on iptables-nft with no process: the same changes as
/// [`ipt_setup`], one batch per family. `POSTROUTING` is read only when
/// the container's chain already exists (jumps to it exist only with it);
/// the handles of the new jumps go to the container's ledger, which DEL
/// reads instead of listing `POSTROUTING`. A setup that finds the chain
/// (a repeated ADD) drops the ledger, so DEL lists.
pub fn ipt_setup_netlink(nft: &mut Nft, owner: &Owner, addrs: &[IpPrefix]) -> Result<()> {
    let chain = ipt_chain(owner);
    let mut entries = Vec::new();
    let mut fresh = true;
    for v6 in [false, true] {
        let fam: Vec<IpPrefix> = addrs
            .iter()
            .filter(|a| a.is_ipv4() != v6)
            .copied()
            .collect();
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
        };
        let added = nat::apply(
            nft,
            v6,
            &mut |n| nat::read(n, v6, &plan),
            &mut |saved, r| {
                if saved.has_chain(&chain) {
                    fresh = false;
                }
                ipt_setup_changes(owner, &fam, IptFamily::of_v6(v6), saved, r)
            },
            &|c| c == POSTROUTING,
        )?;
        entries.extend(added.into_iter().map(|(_, c, handle)| Entry {
            family: ipt_family(v6),
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
        let _ = ipt_teardown_netlink(nft, owner);
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
    v6: bool,
    owner: &Owner,
    entries: &[Entry],
) -> Result<(SavedTable, nat::Handles)> {
    let own = ipt_chain(owner);
    let plan = nat::ReadPlan {
        chains: vec![own.clone()],
        rules_of: &|found| found.iter().cloned().collect(),
    };
    let (mut saved, mut handles) = nat::read(nft, v6, &plan)?;
    if !saved.has_chain(&own) {
        return Ok((saved, handles));
    }
    let rules = nat::jumps_by_ledger(nft, v6, entries, &own, POSTROUTING)?;
    for r in &rules {
        nat::push_rule(&mut saved, &mut handles, r, v6);
    }
    Ok((saved, handles))
}

/// iptables teardown on iptables-nft, both families, with no process: the
/// same changes as [`ipt_teardown`] (the Go plugins' rules go too).
pub fn ipt_teardown_netlink(nft: &mut Nft, owner: &Owner) -> Result<()> {
    let ledger = ipt_ledger(owner);
    let entries = ledger.as_ref().and_then(Ledger::load).unwrap_or_default();
    let own = ipt_chain(owner);
    for v6 in [false, true] {
        nat::apply(
            nft,
            v6,
            &mut |n| ipt_read_container(n, v6, owner, &entries),
            &mut |saved, r| ipt_remove(saved, r, &own),
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
pub fn ipt_gc_netlink(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
    for v6 in [false, true] {
        nat::apply(
            nft,
            v6,
            &mut |n| nat::read_every_chain(n, v6, &[POSTROUTING]),
            &mut |saved, r| ipt_gc_changes(network, valid, saved, r),
            &|_| false,
        )?;
    }
    ledger::remove_unlisted(IPT_LEDGER, network, |cid| {
        valid.iter().any(|a| a.container_id == cid)
    })?;
    Ok(())
}

/// iptables CHECK on iptables-nft, read over netlink.
pub fn ipt_check_netlink(nft: &mut Nft, owner: &Owner, addrs: &[IpPrefix]) -> Result<()> {
    let own = ipt_chain(owner);
    for v6 in [false, true] {
        let fam: Vec<IpPrefix> = addrs
            .iter()
            .filter(|a| a.is_ipv4() != v6)
            .copied()
            .collect();
        if fam.is_empty() {
            continue;
        }
        let plan = nat::ReadPlan {
            chains: vec![own.clone(), POSTROUTING.to_string()],
            rules_of: &|found| found.iter().cloned().collect(),
        };
        let (saved, _) = nat::read(nft, v6, &plan)?;
        ipt_check_saved(owner, &fam, v6, &saved)?;
    }
    Ok(())
}

// ---- node inspection ----------------------------------------------------------

/// The attachments of `network` whose masquerade rules a ledger of ours
/// records (either backend): container ID, interface (the nftables ledger
/// names it), ledger path.
pub fn recorded(network: &str) -> Vec<(String, Option<String>, std::path::PathBuf)> {
    let mut out = Vec::new();
    for (l, _) in ledger::list(LEDGER, network) {
        if let Some((cid, ifname)) = l.name().split_once(':') {
            out.push((cid.to_string(), Some(ifname.to_string()), l.path()));
        }
    }
    for (l, _) in ledger::list(IPT_LEDGER, network) {
        out.push((l.name().to_string(), None, l.path()));
    }
    out
}

/// The comments of the per-address rules in the Go plugins' nf_tables
/// masquerade table (ours are the same): one per attachment and address,
/// [`rule_comment`].
pub fn nft_rule_comments(nft: &mut Nft) -> Vec<String> {
    nft.rules(F, TABLE, CHAIN)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| r.comment)
        .collect()
}

/// The network, interface and container ID a [`rule_comment`] names;
/// `None` for another comment or one cut short (the ID would be partial).
pub fn parse_rule_comment(comment: &str) -> Option<(String, String, String)> {
    if comment.len() >= super::nft::MAX_NFT_COMMENT_CHARS {
        return None;
    }
    let (_, rest) = comment.split_once(", net: ")?;
    let (network, rest) = rest.split_once(", if: ")?;
    let (ifname, cid) = rest.split_once(", id: ")?;
    Some((network.into(), ifname.into(), cid.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::nft::kernel_tests::nft_list;
    use crate::netfilter::testing::{attach, forwarding_node, peer_seen, run_in, Listener};
    use crate::netns::testing::privileged;

    fn prefix(s: &str) -> IpPrefix {
        s.parse().unwrap()
    }

    /// Pod 10.1.0.2 behind the node; upstream 10.9.0.2 has no route back to
    /// the pod, so only masqueraded connections (from the node's 10.9.0.1)
    /// are answered.
    fn masq_traffic(backend: Backend) {
        let node = forwarding_node();
        let pod = attach(&node, 1, true);
        let up = attach(&node, 9, false);
        let _l = Listener::start(&up, 7000);
        let owner = Owner::new("mnet", "ctr-m");
        let addrs = [prefix("10.1.0.2/24"), prefix("fd00:1::2/64")];
        assert_eq!(peer_seen(&pod, "10.9.0.2", 7000), None, "no masquerade yet");
        node.run(|| setup(backend, &owner, "eth0", &addrs))
            .unwrap()
            .unwrap();
        node.run(|| setup(backend, &owner, "eth0", &addrs))
            .unwrap()
            .unwrap();
        node.run(|| check(backend, &owner, "eth0", &addrs))
            .unwrap()
            .unwrap();
        assert_eq!(
            peer_seen(&pod, "10.9.0.2", 7000).as_deref(),
            Some("10.9.0.1")
        );
        assert_eq!(
            peer_seen(&pod, "fd00:9::2", 7000).as_deref(),
            Some("fd00:9::1")
        );
        // Inside its own subnet nothing is masqueraded.
        let _l2 = Listener::start(&node, 7001);
        assert_eq!(
            peer_seen(&pod, "10.1.0.1", 7001).as_deref(),
            Some("10.1.0.2")
        );
        // Teardown with nothing but the owner (the namespace may be gone).
        node.run(|| teardown(backend, &owner, "eth0"))
            .unwrap()
            .unwrap();
        node.run(|| teardown(backend, &owner, "eth0"))
            .unwrap()
            .unwrap();
        assert_eq!(peer_seen(&pod, "10.9.0.2", 7000), None);
        let e = node
            .run(|| check(backend, &owner, "eth0", &addrs))
            .unwrap()
            .unwrap_err();
        assert_eq!(e.code(), 102, "{e}");
    }

    #[test]
    fn netfilter_masq_nft_masquerades_outside_the_subnet_until_teardown() {
        if !privileged("netfilter_masq_nft_masquerades_outside_the_subnet_until_teardown") {
            return;
        }
        masq_traffic(Backend::Nftables);
    }

    #[test]
    fn netfilter_masq_iptables_masquerades_outside_the_subnet_until_teardown() {
        if !privileged("netfilter_masq_iptables_masquerades_outside_the_subnet_until_teardown") {
            return;
        }
        masq_traffic(Backend::Iptables);
    }

    #[test]
    fn netfilter_masq_nft_ruleset_and_gc() {
        if !privileged("netfilter_masq_nft_ruleset_and_gc") {
            return;
        }
        let node = crate::netns::testing::new_netns();
        let a = Owner::new("mnet", "ctr-a");
        let b = Owner::new("mnet", "ctr-b");
        let other = Owner::new("othernet", "ctr-c");
        node.run(|| {
            setup(
                Backend::Nftables,
                &a,
                "eth0",
                &[prefix("10.1.0.2/24"), prefix("fd00:1::2/64")],
            )?;
            setup(Backend::Nftables, &b, "eth0", &[prefix("10.1.0.3/24")])?;
            setup(Backend::Nftables, &other, "eth0", &[prefix("10.7.0.3/16")])
        })
        .unwrap()
        .unwrap();
        let listed = nft_list(&node);
        let ca = rule_comment("mnet", "eth0", "ctr-a");
        assert_eq!(
            ca,
            format!(
                "{}-{}, net: mnet, if: eth0, id: ctr-a",
                &super::super::hex_sha512("mnet")[..16],
                &super::super::hex_sha512("eth0:ctr-a")[..16]
            )
        );
        for want in [
            "comment \"Masquerading for plugins from github.com/containernetworking/plugins\""
                .to_string(),
            "ip daddr 224.0.0.0/4 return".to_string(),
            "ip6 daddr ff00::/8 return".to_string(),
            "goto masq_checks".to_string(),
            format!("ip saddr 10.1.0.2 ip daddr != 10.1.0.0/24 masquerade comment \"{ca}\""),
            format!("ip6 saddr fd00:1::2 ip6 daddr != fd00:1::/64 masquerade comment \"{ca}\""),
            "ip saddr 10.7.0.3 ip daddr != 10.7.0.0/16 masquerade".to_string(),
        ] {
            assert!(listed.contains(&want), "{want:?} not in\n{listed}");
        }
        let valid = vec![Attachment {
            container_id: "ctr-a".into(),
            ifname: "eth0".into(),
        }];
        node.run(|| gc(Backend::Nftables, "mnet", &valid))
            .unwrap()
            .unwrap();
        let listed = nft_list(&node);
        assert!(!listed.contains("ctr-b"), "{listed}");
        assert!(
            listed.contains("id: ctr-a") && listed.contains("id: ctr-c"),
            "{listed}"
        );
        // Ledgers are per network namespace: read them from the node's.
        let ledgers = node
            .run(|| {
                (
                    ledger_of(&a, "eth0").unwrap().load(),
                    ledger_of(&b, "eth0").unwrap().load(),
                )
            })
            .unwrap();
        assert_eq!(ledgers.0.map(|e| e.len()), Some(2), "ctr-a's two rules");
        assert_eq!(ledgers.1, None, "ctr-b's ledger went with its rules");
    }

    #[test]
    fn netfilter_masq_iptables_writes_the_go_rules_and_collects() {
        if !privileged("netfilter_masq_iptables_writes_the_go_rules_and_collects") {
            return;
        }
        let node = crate::netns::testing::new_netns();
        let a = Owner::new("cbr0", "ctr-a");
        let b = Owner::new("cbr0", "ctr-b");
        node.run(|| {
            setup(
                Backend::Iptables,
                &a,
                "eth0",
                &[prefix("10.1.17.5/24"), prefix("fd00:1::5/64")],
            )?;
            setup(Backend::Iptables, &b, "eth0", &[prefix("10.1.17.6/24")])
        })
        .unwrap()
        .unwrap();
        let chain = ipt_chain(&a);
        assert_eq!(
            chain,
            format!("CNI-{}", &super::super::hex_sha512("cbr0ctr-a")[..24])
        );
        let saved = run_in(&node, "iptables-save", &["-t", "nat"]);
        let c = "\"name: \\\"cbr0\\\" id: \\\"ctr-a\\\"\"";
        for want in [
            format!("-A POSTROUTING -s 10.1.17.5/32 -m comment --comment {c} -j {chain}"),
            format!("-A {chain} -d 10.1.17.0/24 -m comment --comment {c} -j ACCEPT"),
            format!("-A {chain} ! -d 224.0.0.0/4 -m comment --comment {c} -j MASQUERADE"),
        ] {
            assert!(saved.contains(&want), "{want}\nnot in\n{saved}");
        }
        let saved6 = run_in(&node, "ip6tables-save", &["-t", "nat"]);
        assert!(
            saved6.contains(&format!(
                "-A {chain} ! -d ff00::/8 -m comment --comment {c} -j MASQUERADE"
            )),
            "{saved6}"
        );
        let valid = vec![Attachment {
            container_id: "ctr-a".into(),
            ifname: "eth0".into(),
        }];
        node.run(|| gc(Backend::Iptables, "cbr0", &valid))
            .unwrap()
            .unwrap();
        let saved = run_in(&node, "iptables-save", &["-t", "nat"]);
        assert!(saved.contains(&chain), "{saved}");
        assert!(!saved.contains(&ipt_chain(&b)), "{saved}");
    }

    /// The nat table as `iptables-save` prints it, without the header,
    /// counters and comments lines that differ between two namespaces.
    fn nat_text(node: &crate::netns::NetNs, save: &str) -> String {
        run_in(node, save, &["-t", "nat"])
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(" [").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// On iptables-nft the iptables backend is written over netlink; its
    /// rules are those `iptables-restore` writes (as `iptables-save` prints
    /// both), and each side's teardown removes the other's rules.
    #[test]
    fn netfilter_masq_iptables_native_equals_iptables_restore() {
        if !privileged("netfilter_masq_iptables_native_equals_iptables_restore") {
            return;
        }
        assert_eq!(
            IptablesPath::of_node(),
            IptablesPath::Netlink,
            "this test needs iptables-nft"
        );
        let owner = Owner::new("cbr0", "ctr-n");
        let addrs = [prefix("10.1.17.5/24"), prefix("fd00:1::5/64")];
        let native = crate::netns::testing::new_netns();
        let process = crate::netns::testing::new_netns();
        native
            .run(|| ipt_setup_netlink(&mut Nft::open()?, &owner, &addrs))
            .unwrap()
            .unwrap();
        process
            .run(|| per_family(&addrs, |fam, v6| ipt_setup(&owner, fam, v6)))
            .unwrap()
            .unwrap();
        for save in ["iptables-save", "ip6tables-save"] {
            let (a, b) = (nat_text(&native, save), nat_text(&process, save));
            assert_eq!(a, b);
            assert!(a.contains(&ipt_chain(&owner)), "{a}");
        }
        // The ledger holds the two POSTROUTING jumps.
        let entries = native
            .run(|| ipt_ledger(&owner).unwrap().load())
            .unwrap()
            .unwrap();
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert!(entries.iter().all(|e| e.chain == POSTROUTING));
        // Each side's teardown removes the other's rules.
        native
            .run(|| per_family(&addrs, |_, v6| ipt_teardown(&owner, v6)))
            .unwrap()
            .unwrap();
        process
            .run(|| ipt_teardown_netlink(&mut Nft::open()?, &owner))
            .unwrap()
            .unwrap();
        for node in [&native, &process] {
            for save in ["iptables-save", "ip6tables-save"] {
                let t = nat_text(node, save);
                assert!(!t.contains("CNI-"), "{t}");
            }
        }
        // A teardown whose ledger is stale lists POSTROUTING.
        native
            .run(|| {
                ipt_setup_netlink(&mut Nft::open()?, &owner, &addrs)?;
                let l = ipt_ledger(&owner).unwrap();
                let mut e = l.load().unwrap();
                e[0].handle += 1000;
                l.store(&e)?;
                ipt_teardown_netlink(&mut Nft::open()?, &owner)
            })
            .unwrap()
            .unwrap();
        let t = nat_text(&native, "iptables-save");
        assert!(!t.contains("CNI-"), "{t}");
    }
}
