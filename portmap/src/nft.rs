//! Host ports on nftables: exactly the Go plugin's (v1.6+) tables, chains and rule shapes, so that
//! either side's DEL removes the other's rules. Per family, `ip` and `ip6`:
//!
//! ```text
//! table ip cni_hostport              comment "CNI portmap plugin"
//!   chain hostports                  a rule per mapping, comment "<container ID>":
//!                                    [ip daddr HOSTIP] tcp dport 8080 dnat to 10.0.0.5:80
//!   chain hostip_hostports           empty (upstream's former chain, kept)
//!   chain hostports_all              jump hostip_hostports; jump hostports
//!   chain prerouting (nat, prerouting, -100)   fib daddr type local jump hostports_all
//!   chain output     (nat, output, -100)       fib daddr type local jump hostports_all
//!   chain masquerading (nat, postrouting, 100) per container, comment "<container ID>":
//!                                    ip saddr SUBNET ip daddr C masquerade
//!                                    ip saddr 127.0.0.1 ip daddr C masquerade (IPv4)
//! ```
//!
//! The rules are encoded as `nft` encodes the same text (the tests compare
//! the bytes with rulesets loaded by `nft -f` from the Go plugin's
//! transactions). ADD appends its rules with `NLM_F_ECHO` and keeps their
//! handles in the container's [`ledger`]; DEL reads each one back, checks
//! its comment and deletes it, so neither lists a chain that holds every
//! container's rules. Without a ledger (rules the Go plugin wrote, or an
//! ADD killed before it wrote its ledger) DEL lists the three chains once,
//! as the Go plugin's DEL does. Every ADD, DEL and GC is one batch, both
//! families included. The shared chains are rewritten only when they are
//! not the Go plugin's.
//!
//! Our previous releases kept map elements in `inet cni_rs_hostport`; DEL
//! and GC still remove a container's elements there, and the table when
//! nothing else is left in it.
//!

use std::net::IpAddr;

use crate::conditions::{self, Condition};
use libcni::netfilter::ledger::{self, Ledger};
use libcni::netfilter::nft::expr::{self, CmpOp, Expr, Verdict};
use libcni::netfilter::nft::{
    BaseChain, Batch, Elem, Family, Hook, Nft, RuleInfo, PRIORITY_DSTNAT, PRIORITY_SRCNAT,
};
use libcni::netfilter::Owner;
use libcni::types::{Attachment, IpPrefix};
use libcni::{Error, Result};
use libcni::{IpFamily, PerFamily};

use crate::spec::*;

/// The Go plugin's table of host ports, one per family (`ip` and `ip6`).
pub const TABLE: &str = "cni_hostport";
/// The `inet` table of host ports of this suite's previous releases: DEL
/// and GC still remove what a container owns there, and the table once it
/// holds no container's state.
pub const OLD_TABLE: &str = "cni_rs_hostport";
const TABLE_COMMENT: &str = "CNI portmap plugin";
/// The chain of every mapping rule.
pub const HOSTPORTS: &str = "hostports";
/// Upstream's former chain of mappings with a host IP: created, kept
/// empty, still searched by DEL.
pub const HOSTIP_HOSTPORTS: &str = "hostip_hostports";
const HOSTPORTS_ALL: &str = "hostports_all";
/// The chain of the hairpin and localhost masquerade rules.
pub const MASQUERADING: &str = "masquerading";
/// The chains a container's rules are in.
const OWNED_CHAINS: [&str; 3] = [HOSTPORTS, HOSTIP_HOSTPORTS, MASQUERADING];
/// The ledger feature name (`/run/cni/portmap/<network>/<container ID>`).
pub(crate) const LEDGER: &str = "portmap";

/// The config key of one family's conditions, for errors.
fn conditions_key(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "conditionsV4",
        IpFamily::V6 => "conditionsV6",
    }
}

/// The comment of every rule of a container: its ID, as the Go plugin
/// writes it (cut to what `nft` stores).
pub fn rule_comment(owner: &Owner) -> String {
    let mut c = owner.container_id.clone();
    c.truncate(libcni::netfilter::nft::MAX_NFT_COMMENT_CHARS);
    c
}

fn ledger(owner: &Owner) -> Option<Ledger> {
    Ledger::new(LEDGER, &owner.network, &owner.container_id)
}

/// The rule of mapping `m` to `container` in chain `hostports`:
/// `[conditions] [ip daddr HOSTIP] tcp dport P dnat to C:P`.
fn mapping_rule(m: &PortMapping, container: IpAddr, conds: Vec<Expr>) -> Vec<Expr> {
    let mut r = conds;
    if let Some(dst) = m.dst() {
        let width = if dst.is_ipv6() { 128 } else { 32 };
        r.extend(expr::match_prefix_nft(false, CmpOp::Eq, dst, width));
    }
    r.extend(expr::match_l4_dport(m.protocol.number(), m.host_port));
    r.extend(expr::dnat_to_nft(container, m.container_port));
    r
}

/// The masquerade rules of a container in chain `masquerading`: from its
/// subnet (hairpin: the Go plugin's nftables backend matches the container
/// alone, its iptables backend the subnet, which other pods of the bridge
/// reaching the host port need) or from anywhere (`masqAll`), and for IPv4
/// from the node's 127.0.0.1.
fn masq_rules(spec: &PortMapSpec, container: IpPrefix) -> Vec<Vec<Expr>> {
    let family = container.family();
    let cip = container.addr();
    let width = family.max_prefix();
    let rule = |src: IpAddr, len: u8| {
        let mut r = expr::match_prefix_nft(true, CmpOp::Eq, src, len);
        r.extend(expr::match_prefix_nft(false, CmpOp::Eq, cip, width));
        r.push(Expr::Masq);
        r
    };
    let mut out = Vec::new();
    if spec.masq_all {
        let any = if family == IpFamily::V6 {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        };
        out.push(rule(any, 0));
    } else {
        let subnet = container.truncate();
        out.push(rule(subnet.addr(), subnet.prefix_len()));
        if family == IpFamily::V4 {
            out.push(rule(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 32));
        }
    }
    out
}

/// The Go plugin's table, chains and shared rules of one family, in its
/// order (so a fresh table lists, and numbers its handles, as Go's does).
fn skeleton(b: &mut Batch, family: IpFamily, snat: bool) {
    let f = Family::of(family);
    let nat = |hook, priority| BaseChain {
        hook,
        priority,
        chain_type: "nat",
    };
    b.add_table_commented(f, TABLE, Some(TABLE_COMMENT));
    for c in [HOSTPORTS, HOSTIP_HOSTPORTS, HOSTPORTS_ALL] {
        b.add_chain(f, TABLE, c, None);
    }
    b.flush_chain(f, TABLE, HOSTPORTS_ALL);
    for target in [HOSTIP_HOSTPORTS, HOSTPORTS] {
        b.add_rule(
            f,
            TABLE,
            HOSTPORTS_ALL,
            &[Expr::Immediate(Verdict::Jump(target.into()))],
            None,
        );
    }
    for (chain, hook) in [("prerouting", Hook::Prerouting), ("output", Hook::Output)] {
        b.add_chain(f, TABLE, chain, Some(&nat(hook, PRIORITY_DSTNAT)));
        b.flush_chain(f, TABLE, chain);
        let mut r = expr::match_fib_daddr_local();
        r.push(Expr::Immediate(Verdict::Jump(HOSTPORTS_ALL.into())));
        b.add_rule(f, TABLE, chain, &r, None);
    }
    if snat {
        b.add_chain(
            f,
            TABLE,
            MASQUERADING,
            Some(&nat(Hook::Postrouting, PRIORITY_SRCNAT)),
        );
    }
}

/// Whether one family's shared chains hold the Go plugin's rules (three
/// chains of one or two rules: no listing of the mapping chains). Only an
/// ADD that finds them otherwise rewrites them: flushing is a deletion,
/// and a commit with deletions makes closing the socket wait for an RCU
/// grace period.
fn skeleton_intact(nft: &mut Nft, family: IpFamily, snat: bool) -> Result<bool> {
    let f = Family::of(family);
    let jump_local = |rules: &[RuleInfo]| {
        rules.len() == 1
            && rules[0].exprs == ["fib", "cmp", "immediate"]
            && rules[0].cmp_data == [expr::RTN_LOCAL.to_ne_bytes().to_vec()]
    };
    let all = nft.rules(f, TABLE, HOSTPORTS_ALL)?;
    if all.len() != 2 || all.iter().any(|r| r.exprs != ["immediate"]) {
        return Ok(false);
    }
    for chain in ["prerouting", "output"] {
        if !jump_local(&nft.rules(f, TABLE, chain)?) {
            return Ok(false);
        }
    }
    Ok(!snat || nft.has_chain(f, TABLE, MASQUERADING)?)
}

/// The `cmp` and immediate data of a rule: what [`RuleInfo`] reads back.
fn summary(exprs: &[Expr]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut cmp = Vec::new();
    let mut imm = Vec::new();
    for e in exprs {
        match e {
            Expr::Cmp { data, .. } => cmp.push(data.clone()),
            Expr::Load { data, .. } => imm.push(data.clone()),
            _ => {}
        }
    }
    (cmp, imm)
}

/// The `proto/port` note of a mapping rule's ledger entry.
fn port_note(m: &PortMapping) -> String {
    format!("{}/{}", m.protocol.number(), m.host_port)
}

/// The host port of a ledger note (`proto/port`).
fn note_port(family: IpFamily, note: &str) -> Option<RemovedPort> {
    let (p, port) = note.split_once('/')?;
    Some(RemovedPort {
        family,
        protocol: p.parse().ok()?,
        port: port.parse().ok()?,
    })
}

/// The host port of a mapping rule read back (`meta l4proto` compared with
/// one byte, then the port with two), for rules found by listing.
fn rule_port(family: IpFamily, r: &RuleInfo) -> Option<RemovedPort> {
    let i = r.cmp_data.iter().position(|d| d.len() == 1)?;
    let port = r.cmp_data.get(i + 1).filter(|d| d.len() == 2)?;
    Some(RemovedPort {
        family,
        protocol: r.cmp_data[i][0],
        port: u16::from_be_bytes([port[0], port[1]]),
    })
}

/// The rules of `comment` in the owned chains of both families, by one
/// listing of each chain: state the Go plugin wrote, or an ADD killed
/// before it wrote its ledger.
fn listed(nft: &mut Nft, comment: &str) -> Result<Vec<(IpFamily, RuleInfo)>> {
    let mut out = Vec::new();
    for family in IpFamily::BOTH {
        let f = Family::of(family);
        if !nft.has_table(f, TABLE)? {
            continue;
        }
        for chain in OWNED_CHAINS {
            for r in nft.rules(f, TABLE, chain)? {
                if r.comment.as_deref() == Some(comment) {
                    out.push((family, r));
                }
            }
        }
    }
    Ok(out)
}

/// Deletes, in `b`, what `doomed` owners hold in our previous release's
/// `inet cni_rs_hostport`, or the whole table when nothing else is left in
/// it. Returns the host ports of the deleted map elements. Costs one
/// `GETTABLE` on a node that never had the table.
fn old_teardown(
    nft: &mut Nft,
    b: &mut Batch,
    doomed: &dyn Fn(&str) -> bool,
) -> Result<Vec<RemovedPort>> {
    const OLD_SETS: [&str; 6] = [
        "hostports4",
        "hostip_hostports4",
        "hostports6",
        "hostip_hostports6",
        "masq_all4",
        "masq_all6",
    ];
    let f = Family::Inet;
    if !nft.has_table(f, OLD_TABLE)? {
        return Ok(Vec::new());
    }
    let mut gone = Vec::new();
    let mut kept = 0;
    let mut inner = Batch::new();
    for set in OLD_SETS {
        let (mine, other): (Vec<Elem>, Vec<Elem>) = nft
            .elems(f, OLD_TABLE, set)?
            .into_iter()
            .partition(|e| e.comment.as_deref().is_some_and(doomed));
        kept += other.len();
        inner.del_elems(f, OLD_TABLE, set, &mine, "elements");
        if set.starts_with("host") {
            let family = if set.ends_with('6') {
                IpFamily::V6
            } else {
                IpFamily::V4
            };
            for e in &mine {
                let n = e.key.len();
                if n >= 8 {
                    let port = u16::from_be_bytes([e.key[n - 4], e.key[n - 3]]);
                    gone.push(RemovedPort {
                        family,
                        protocol: e.key[n - 8],
                        port,
                    });
                }
            }
        }
    }
    for r in nft.rules(f, OLD_TABLE, "conditioned")? {
        if r.comment.as_deref().is_some_and(doomed) {
            inner.del_rule(f, OLD_TABLE, "conditioned", r.handle);
        } else {
            kept += 1;
        }
    }
    if kept == 0 {
        b.del_table(f, OLD_TABLE);
    } else {
        b.extend(inner);
    }
    Ok(gone)
}

/// nftables ADD: the Go plugin's skeleton where it is missing, then a rule
/// per mapping in `hostports` and the masquerade rules in `masquerading`,
/// each commented with the container ID (what the Go plugin's DEL looks
/// for), in one batch that also deletes this container's rules of an
/// earlier ADD. The kernel echoes the new rules' handles, which go to the
/// container's ledger, so DEL needs no listing.
pub fn add(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    let comment = rule_comment(&spec.owner);
    let ledger = ledger(&spec.owner);
    // Conditions are checked before anything is read or written.
    let conds = PerFamily::try_from_fn(|family| {
        parse_conditions(conditions_key(family), spec.conditions.of(family), family)
    })?;
    ledger::commit_recorded(nft, ledger.as_ref(), &mut |nft, b| {
        if let Some(old) = ledger.as_ref().and_then(Ledger::load) {
            for e in ledger::verified(nft, &old, &comment)?.entries {
                b.del_rule(e.family, &e.table, &e.chain, e.handle);
            }
        }
        let mut echoed = Vec::new();
        let mut set_id = 0;
        for family in IpFamily::BOTH {
            let Some(container) = spec.container(family) else {
                continue;
            };
            let f = Family::of(family);
            if !skeleton_intact(nft, family, spec.snat)? {
                skeleton(b, family, spec.snat);
            }
            let note = |index, note: String| ledger::Echoed {
                index,
                family: f,
                table: TABLE.to_string(),
                note,
            };
            for m in spec.family_mappings(family) {
                let c = conditions::emit(conds.of(family), b, f, TABLE, &mut set_id);
                let r = mapping_rule(&m, container.addr(), c);
                let i = b.add_rule_echo(f, TABLE, HOSTPORTS, &r, &comment);
                echoed.push(note(i, port_note(&m)));
            }
            if spec.snat {
                for r in masq_rules(spec, container) {
                    let i = b.add_rule_echo(f, TABLE, MASQUERADING, &r, &comment);
                    echoed.push(note(i, String::new()));
                }
            }
        }
        Ok(echoed)
    })
}

/// nftables DEL: the container's rules, from its ledger (each handle read
/// back first, with the container ID as comment), or, without a ledger or
/// when one of its rules is gone, from one listing of the Go plugin's
/// chains: rules the Go plugin wrote are removed too. Also what the
/// container owns in our previous release's table. One batch. Returns the
/// host ports that were mapped.
pub fn del(nft: &mut Nft, owner: &Owner) -> Result<Vec<RemovedPort>> {
    const ATTEMPTS: usize = 3;
    let comment = rule_comment(owner);
    let ledger = ledger(owner);
    let tag = owner.tag();
    let mut attempt = 1;
    let removed = loop {
        let mut b = Batch::new();
        let mut removed = Vec::new();
        let (mut doomed, complete) = match ledger.as_ref().and_then(Ledger::load) {
            Some(entries) => {
                let v = ledger::verified(nft, &entries, &comment)?;
                let doomed: Vec<(IpFamily, u64, String, Option<RemovedPort>)> = v
                    .entries
                    .iter()
                    .map(|e| {
                        let family = e.family.ip().unwrap_or(IpFamily::V4);
                        (
                            family,
                            e.handle,
                            e.chain.clone(),
                            note_port(family, &e.note),
                        )
                    })
                    .collect();
                (doomed, v.complete)
            }
            None => (Vec::new(), false),
        };
        if !complete {
            for (family, r) in listed(nft, &comment)? {
                if !doomed.iter().any(|d| d.0 == family && d.1 == r.handle) {
                    let port = (r.chain != MASQUERADING)
                        .then(|| rule_port(family, &r))
                        .flatten();
                    doomed.push((family, r.handle, r.chain.clone(), port));
                }
            }
        }
        for (family, handle, chain, port) in &doomed {
            b.del_rule(Family::of(*family), TABLE, chain, *handle);
            removed.extend(*port);
        }
        removed.extend(old_teardown(nft, &mut b, &|c| c == tag)?);
        match nft.commit(&b) {
            Ok(()) => break removed,
            Err(e) if libcni::netlink::is_not_found(&e) && attempt < ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    };
    if let Some(l) = ledger {
        l.remove()?;
    }
    Ok(removed)
}

/// nftables GC: the rules of this network's containers that are not in
/// `valid`, from their ledgers (the Go plugin's rules carry no network
/// name, so only the ledgers tell whose network a rule is of; rules the
/// Go plugin wrote are left to its DEL), and their state in our previous
/// release's table. Returns the host ports that were mapped.
pub fn gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<Vec<RemovedPort>> {
    let mut b = Batch::new();
    let mut removed = Vec::new();
    let mut stale = Vec::new();
    for (l, entries) in ledger::list(LEDGER, network) {
        let cid = l.name().to_string();
        if valid.iter().any(|a| a.container_id == cid) {
            continue;
        }
        let comment = rule_comment(&Owner::new(network, &cid));
        for e in ledger::verified(nft, &entries, &comment)?.entries {
            let family = e.family.ip().unwrap_or(IpFamily::V4);
            removed.extend(note_port(family, &e.note));
            b.del_rule(e.family, &e.table, &e.chain, e.handle);
        }
        stale.push(l);
    }
    removed.extend(old_teardown(nft, &mut b, &|c| {
        Owner::is_stale_tag(c, network, valid)
    })?);
    nft.commit(&b)?;
    for l in stale {
        l.remove()?;
    }
    Ok(removed)
}

/// nftables CHECK: each family's shared chains are the Go plugin's, and
/// every rule the container should have is there with its comment (found
/// from the ledger, or by listing the chains as the Go plugin's CHECK
/// does): code 102 naming what is missing.
pub fn check(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    let comment = rule_comment(&spec.owner);
    let failed = |what: String| Error::CheckFailed(format!("portmap: {what}"));
    // The ledger's rules when every one of them is there; otherwise one
    // listing, as the Go plugin's CHECK does.
    let mut have: Vec<(IpFamily, RuleInfo)> = Vec::new();
    let mut complete = false;
    if let Some(entries) = ledger(&spec.owner).and_then(|l| l.load()) {
        complete = true;
        for e in &entries {
            match nft.get_rule(e.family, &e.table, &e.chain, e.handle)? {
                Some(r) if r.comment.as_deref() == Some(comment.as_str()) => {
                    have.push((e.family.ip().unwrap_or(IpFamily::V4), r))
                }
                _ => complete = false,
            }
        }
    }
    if !complete {
        have = listed(nft, &comment)?;
    }
    let has = |family: IpFamily, chain: &str, exprs: &[Expr]| {
        let (cmp, imm) = summary(exprs);
        have.iter().any(|(f, r)| {
            *f == family && r.chain == chain && r.cmp_data == cmp && r.imm_data == imm
        })
    };
    for family in IpFamily::BOTH {
        let Some(container) = spec.container(family) else {
            continue;
        };
        let f = Family::of(family);
        if !skeleton_intact(nft, family, spec.snat)? {
            return Err(failed(format!(
                "the shared chains of table {} {TABLE} are missing or changed",
                f.as_str()
            )));
        }
        let key = conditions_key(family);
        let conds = parse_conditions(key, spec.conditions.of(family), family)?;
        for m in spec.family_mappings(family) {
            let mut scratch = Batch::new();
            let c = conditions::emit(&conds, &mut scratch, f, TABLE, &mut 0);
            if !has(family, HOSTPORTS, &mapping_rule(&m, container.addr(), c)) {
                return Err(failed(format!(
                    "mapping {m} has no rule to {} in chain {} {TABLE} {HOSTPORTS}",
                    container.addr(),
                    f.as_str()
                )));
            }
        }
        if spec.snat {
            for r in masq_rules(spec, container) {
                if !has(family, MASQUERADING, &r) {
                    return Err(failed(format!(
                        "a masquerade rule of {} is missing from chain {} {TABLE} {MASQUERADING}",
                        container.addr(),
                        f.as_str()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Parses `conditionsV4`/`conditionsV6` written in nft syntax (see
/// [`crate::conditions`]): code 7 naming `key` for anything else.
pub fn parse_conditions(key: &str, conds: &[String], family: IpFamily) -> Result<Vec<Condition>> {
    conditions::parse(key, conds, family)
}
