//! IP masquerade of a container's traffic (bridge `ipMasq`): traffic from a
//! container address to destinations outside its subnet, multicast
//! excepted, leaves with the node's address. IPv4 and IPv6, both backends.
//!
//! # nftables design
//!
//! ```text
//! table inet cni_rs_masq
//!   set masq4 { type ipv4_addr }   container addresses, comment = owner tag
//!   set masq6 { type ipv6_addr }
//!   chain postrouting (nat, postrouting, srcnat)
//!       meta nfproto ipv4 ip daddr 224.0.0.0/4 return
//!       meta nfproto ipv6 ip6 daddr ff00::/8 return
//!       jump subnets
//!   chain subnets   one rule per container subnet, shared:
//!       ip saddr S ip saddr @masq4 ip daddr != S masquerade comment "subnet S"
//! ```
//!
//! Setup adds the container's addresses to the sets (and its subnet's rule
//! when missing); teardown and GC delete elements by [`Owner::tag`], so
//! they need neither the namespace nor the addresses. Subnet rules stay,
//! like the Go plugins' shared chains.
//!
//! # iptables design
//!
//! The Go plugin's: a chain `CNI-<24 hex of sha512(network + container)>`
//! with `-d <subnet> -j ACCEPT` and `! -d <multicast> -j MASQUERADE`, and
//! `POSTROUTING -s <address> -j CNI-...`, all with the comment
//! `name: "<net>" id: "<cid>"`. Teardown finds the chain by its hashed name
//! and every rule jumping to it, so it works without addresses too (the Go
//! plugin needs them and leaks without); GC reads the comments.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::iptables::{self, IptFamily, IptTable, Restore, SavedTable};
use super::nft::expr::{self, CmpOp, Expr, Verdict};
use super::nft::{
    addr_field, types, BaseChain, Batch, Elem, Family, Hook, Nft, SetSpec, PRIORITY_SRCNAT,
};
use super::{go_chain_name, open_nft_for_teardown, parse_go_comment, Backend, Owner};
use crate::types::{Attachment, IpPrefix};
use crate::{Error, ErrorList, Result};

/// The nf_tables table of ipMasq.
pub const TABLE: &str = "cni_rs_masq";
const F: Family = Family::Inet;

fn set_name(v6: bool) -> &'static str {
    if v6 {
        "masq6"
    } else {
        "masq4"
    }
}

/// Masquerades traffic of `owner`'s addresses (with their prefix, which
/// gives the subnet left alone) on `backend`, in the calling thread's
/// namespace. Idempotent.
pub fn setup(backend: Backend, owner: &Owner, addrs: &[IpPrefix]) -> Result<()> {
    match backend {
        Backend::Nftables => nft_setup(&mut Nft::open()?, owner, addrs),
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

/// Removes `owner`'s masquerade on both backends (the iptables side only
/// runs a process when iptables-nft shows the container's chain, or when
/// `backend` is iptables). Needs no address: DEL works after the namespace
/// is gone. Best effort: every step runs, the first error is returned.
pub fn teardown(backend: Backend, owner: &Owner) -> Result<()> {
    let mut errors = ErrorList::new();
    let mut nft = open_nft_for_teardown(backend, &mut errors);
    if let Some(n) = nft.as_mut() {
        errors.record(nft_teardown(n, owner));
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

/// Removes the masquerade of containers of `network` that are not in
/// `valid` (GC), on `backend`.
pub fn gc(backend: Backend, network: &str, valid: &[Attachment]) -> Result<()> {
    match backend {
        Backend::Nftables => nft_gc(&mut Nft::open()?, network, valid),
        Backend::Iptables => {
            for v6 in [false, true] {
                ipt_gc(network, valid, v6)?;
            }
            Ok(())
        }
    }
}

/// Whether `owner`'s addresses are masqueraded (CHECK); code 102 otherwise.
pub fn check(backend: Backend, owner: &Owner, addrs: &[IpPrefix]) -> Result<()> {
    match backend {
        Backend::Nftables => nft_check(&mut Nft::open()?, owner, addrs),
        Backend::Iptables => per_family(addrs, |fam, v6| ipt_check(owner, fam, v6)),
    }
}

// ---- nftables -------------------------------------------------------------

fn subnet_comment(subnet: &IpPrefix) -> String {
    format!("subnet {}/{}", subnet.network(), subnet.prefix_len())
}

/// The comment of the first rule of chain `postrouting`: which version of
/// the skeleton the table holds.
const SKELETON_MARK: &str = "cni-rs masq skeleton v1";

/// Rules of chain `postrouting` in a complete skeleton: two multicast
/// returns and the jump to `subnets`.
const SKELETON_RULES: usize = 3;

/// Whether the `postrouting` rules read back are the current skeleton.
fn skeleton_intact(postrouting: &[super::nft::RuleInfo]) -> bool {
    postrouting.len() == SKELETON_RULES
        && postrouting
            .first()
            .is_some_and(|r| r.comment.as_deref() == Some(SKELETON_MARK))
}

/// The sets of container addresses, per family.
fn set_specs() -> [SetSpec; 2] {
    [
        SetSpec {
            name: set_name(false).into(),
            id: 1,
            flags: 0,
            key_type: types::IPADDR,
            key_len: 4,
            data: None,
        },
        SetSpec {
            name: set_name(true).into(),
            id: 2,
            flags: 0,
            key_type: types::IP6ADDR,
            key_len: 16,
            data: None,
        },
    ]
}

/// Declares the table, chains and sets and rewrites `postrouting`. Only an
/// ADD that finds the skeleton missing or outdated sends it: flushing a
/// chain is a deletion, and a commit with deletions makes closing the
/// nf_tables socket wait for an RCU grace period (the kernel flushes its
/// transaction cleanup then), some 10 ms on every ADD.
fn skeleton(b: &mut Batch) {
    b.add_table(F, TABLE);
    let base = BaseChain {
        hook: Hook::Postrouting,
        priority: PRIORITY_SRCNAT,
        chain_type: "nat",
    };
    b.add_chain(F, TABLE, "postrouting", Some(&base));
    b.add_chain(F, TABLE, "subnets", None);
    for s in &set_specs() {
        b.add_set(F, TABLE, s);
    }
    b.flush_chain(F, TABLE, "postrouting");
    for (v6, mcast, len) in [(false, "224.0.0.0", 4u8), (true, "ff00::", 8)] {
        let mut r = expr::match_nfproto(v6);
        let addr: IpAddr = mcast
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        r.extend(expr::match_ip(false, CmpOp::Eq, addr, len));
        r.push(Expr::Immediate(Verdict::Return));
        let mark = (!v6).then_some(SKELETON_MARK);
        b.add_rule(F, TABLE, "postrouting", &r, mark);
    }
    b.add_rule(
        F,
        TABLE,
        "postrouting",
        &[Expr::Immediate(Verdict::Jump("subnets".into()))],
        None,
    );
}

fn subnet_rule(subnet: &IpPrefix, set: &SetSpec) -> Vec<Expr> {
    let v6 = !subnet.is_ipv4();
    let mut r = expr::match_nfproto(v6);
    r.extend(expr::match_ip(
        true,
        CmpOp::Eq,
        subnet.network(),
        subnet.prefix_len(),
    ));
    r.extend(expr::match_ip_in_set(v6, true, &set.name, set.id));
    r.extend(expr::match_ip(
        false,
        CmpOp::Neq,
        subnet.network(),
        subnet.prefix_len(),
    ));
    r.push(Expr::Masq);
    r
}

/// nftables setup: one batch.
pub fn nft_setup(nft: &mut Nft, owner: &Owner, addrs: &[IpPrefix]) -> Result<()> {
    let tag = owner.tag();
    let mut b = Batch::new();
    // One dump of the table's rules: the skeleton's state and the subnet
    // rules that exist.
    let rules = nft.table_rules(F, TABLE)?;
    let postrouting: Vec<_> = rules
        .iter()
        .filter(|r| r.chain == "postrouting")
        .cloned()
        .collect();
    if !skeleton_intact(&postrouting) {
        skeleton(&mut b);
    }
    let sets = set_specs();
    let mut have: BTreeSet<String> = rules
        .into_iter()
        .filter(|r| r.chain == "subnets")
        .filter_map(|r| r.comment)
        .collect();
    for a in addrs {
        let v6 = !a.is_ipv4();
        let set = &sets[usize::from(v6)];
        let subnet = a.truncate();
        let comment = subnet_comment(&subnet);
        if have.insert(comment.clone()) {
            b.add_rule(
                F,
                TABLE,
                "subnets",
                &subnet_rule(&subnet, set),
                Some(&comment),
            );
        }
        let key = addr_field(a.addr());
        // The address belongs to the latest owner: replace an old element.
        if let Some(old) = nft.get_elem(F, TABLE, &set.name, &key)? {
            b.del_elems(F, TABLE, &set.name, &[old], "old address");
        }
        let elem = Elem {
            key,
            data: None,
            comment: Some(tag.clone()),
        };
        b.add_elems(
            F,
            TABLE,
            &set.name,
            &[elem],
            false,
            &format!("address {}", a.addr()),
        );
    }
    nft.commit(&b)
}

/// nftables teardown: deletes the elements tagged with `owner`.
pub fn nft_teardown(nft: &mut Nft, owner: &Owner) -> Result<()> {
    let tag = owner.tag();
    nft.delete_tagged(F, TABLE, &[set_name(false), set_name(true)], &[], &|c| {
        c == tag
    })
    .map(|_| ())
}

/// nftables GC.
pub fn nft_gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
    nft.delete_tagged(F, TABLE, &[set_name(false), set_name(true)], &[], &|c| {
        Owner::is_stale_tag(c, network, valid)
    })
    .map(|_| ())
}

/// nftables CHECK.
pub fn nft_check(nft: &mut Nft, owner: &Owner, addrs: &[IpPrefix]) -> Result<()> {
    let tag = owner.tag();
    let comments: BTreeSet<String> = nft
        .rules(F, TABLE, "subnets")?
        .into_iter()
        .filter_map(|r| r.comment)
        .collect();
    for a in addrs {
        let v6 = !a.is_ipv4();
        let subnet = subnet_comment(&a.truncate());
        if !comments.contains(&subnet) {
            return Err(Error::CheckFailed(format!(
                "ipMasq: chain inet {TABLE} subnets has no rule for {subnet}"
            )));
        }
        let e = nft.get_elem(F, TABLE, set_name(v6), &addr_field(a.addr()))?;
        if e.and_then(|e| e.comment).as_deref() != Some(tag.as_str()) {
            return Err(Error::CheckFailed(format!(
                "ipMasq: address {} of {tag} is not in set {}",
                a.addr(),
                set_name(v6)
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

/// iptables setup for the addresses of one family: one save, one restore.
pub fn ipt_setup(owner: &Owner, addrs: &[IpPrefix], v6: bool) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    let chain = ipt_chain(owner);
    let mut r = Restore::new(IptTable::Nat);
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

/// iptables GC for one family: POSTROUTING rules whose comment names a
/// container of `network` not in `valid` lose their chain.
pub fn ipt_gc(network: &str, valid: &[Attachment], v6: bool) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    let mut r = Restore::new(IptTable::Nat);
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
            ipt_remove(&saved, &mut r, &target);
        }
    }
    iptables::restore(fam, &r)
}

/// iptables CHECK for the addresses of one family.
pub fn ipt_check(owner: &Owner, addrs: &[IpPrefix], v6: bool) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
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
        node.run(|| setup(backend, &owner, &addrs))
            .unwrap()
            .unwrap();
        node.run(|| setup(backend, &owner, &addrs))
            .unwrap()
            .unwrap();
        node.run(|| check(backend, &owner, &addrs))
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
        node.run(|| teardown(backend, &owner)).unwrap().unwrap();
        node.run(|| teardown(backend, &owner)).unwrap().unwrap();
        assert_eq!(peer_seen(&pod, "10.9.0.2", 7000), None);
        let e = node
            .run(|| check(backend, &owner, &addrs))
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
                &[prefix("10.1.0.2/24"), prefix("fd00:1::2/64")],
            )?;
            setup(Backend::Nftables, &b, &[prefix("10.1.0.3/24")])?;
            setup(Backend::Nftables, &other, &[prefix("10.7.0.3/16")])
        })
        .unwrap()
        .unwrap();
        let listed = nft_list(&node);
        for want in [
            "ip daddr 224.0.0.0/4 return",
            "ip6 daddr ff00::/8 return",
            "ip saddr 10.1.0.0/24 ip saddr @masq4 ip daddr != 10.1.0.0/24 masquerade comment \"subnet 10.1.0.0/24\"",
            "ip6 saddr fd00:1::/64 ip6 saddr @masq6 ip6 daddr != fd00:1::/64 masquerade comment \"subnet fd00:1::/64\"",
            "ip saddr 10.7.0.0/16 ip saddr @masq4 ip daddr != 10.7.0.0/16 masquerade comment \"subnet 10.7.0.0/16\"",
            "10.1.0.2 comment \"net=mnet cid=ctr-a\"",
            "fd00:1::2 comment \"net=mnet cid=ctr-a\"",
        ] {
            assert!(listed.contains(want), "{want:?} not in\n{listed}");
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
            listed.contains("cid=ctr-a") && listed.contains("cid=ctr-c"),
            "{listed}"
        );
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
                &[prefix("10.1.17.5/24"), prefix("fd00:1::5/64")],
            )?;
            setup(Backend::Iptables, &b, &[prefix("10.1.17.6/24")])
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
}
