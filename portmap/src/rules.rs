//! Host ports: forwarding `hostIP:hostPort` on the node to
//! `containerIP:containerPort`, on either backend.
//!
//! # nftables design
//!
//! Exactly the Go plugin's (v1.6+) tables, chains and rule shapes, so that
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
//! # iptables design
//!
//! Exactly the Go plugin's (nat table): `CNI-HOSTPORT-DNAT` jumped from
//! PREROUTING and OUTPUT for local destinations, a `CNI-DN-<hash>` chain per
//! container with the hairpin/localhost mark rules and the DNAT rules,
//! `CNI-HOSTPORT-SETMARK` and `CNI-HOSTPORT-MASQ`; see [`libcni::netfilter::iptables`].
//! The decisions (what to add, what to delete) are made on the table as
//! `iptables-save` shows it; they are applied by `iptables-restore`, or, on
//! a node whose iptables is iptables-nft, written over netlink by
//! [`libcni::netfilter::xt_nat`] (`ipt_*_native`), with the handles of a container's
//! `CNI-HOSTPORT-DNAT` rules in a ledger so that neither ADD nor DEL lists
//! that chain. With no `backend` key the default is the Go plugin's:
//! iptables wherever the node has it ([`libcni::netfilter::default_backend`]).

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use crate::conditions::{self, Condition};
use libcni::netfilter::iptables::{self, IptFamily, IptTable, Restore, SavedTable};
use libcni::netfilter::ledger::{self, Entry, Ledger};
use libcni::netfilter::nft::expr::{self, CmpOp, Expr, Verdict};
use libcni::netfilter::nft::{
    BaseChain, Batch, Elem, Family, Hook, Nft, RuleInfo, PRIORITY_DSTNAT, PRIORITY_SRCNAT,
};
use libcni::netfilter::xt_nat;
use libcni::netfilter::Owner;
use libcni::types::{Attachment, IpPrefix};
use libcni::{Error, Result};

pub use libcni::netfilter::Protocol;

/// One validated port mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    /// `None`: every local address of both families. An unspecified address
    /// (`0.0.0.0`, `::`) means every local address of that family only.
    pub host_ip: Option<IpAddr>,
}

impl PortMapping {
    /// Whether the mapping applies to the IPv6 (or IPv4) container address.
    pub fn applies_to(&self, v6: bool) -> bool {
        self.host_ip.is_none_or(|ip| ip.is_ipv6() == v6)
    }

    /// The destination address to match, if the mapping names one.
    pub fn dst(&self) -> Option<IpAddr> {
        self.host_ip.filter(|ip| !ip.is_unspecified())
    }
}

impl fmt::Display for PortMapping {
    /// `tcp 8080 -> 80`, `udp [fd00::1]:53 -> 5353`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.protocol.as_str();
        match self.host_ip {
            Some(IpAddr::V6(ip)) => write!(f, "{p} [{ip}]:{}", self.host_port)?,
            Some(ip) => write!(f, "{p} {ip}:{}", self.host_port)?,
            None => write!(f, "{p} {}", self.host_port)?,
        }
        write!(f, " -> {}", self.container_port)
    }
}

/// Extra match conditions on the DNAT entry, per family (the config's
/// `conditionsV4` / `conditionsV6`), in the syntax of the backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions {
    pub v4: Vec<String>,
    pub v6: Vec<String>,
}

impl Conditions {
    /// The conditions of one family.
    pub fn of(&self, v6: bool) -> &[String] {
        if v6 {
            &self.v6
        } else {
            &self.v4
        }
    }
}

/// Which syntax a condition list is written in: the Go plugin's rule (a
/// first token starting with `-` or `!` is iptables syntax).
pub fn conditions_are_iptables(conds: &[String]) -> Option<bool> {
    let first = conds.iter().flat_map(|c| c.split_whitespace()).next()?;
    Some(first.starts_with('-') || first.starts_with('!'))
}

/// Everything one container's host ports need.
#[derive(Debug, Clone)]
pub struct PortMapSpec {
    pub owner: Owner,
    pub mappings: Vec<PortMapping>,
    /// The container's first IPv4 and IPv6 address (with prefix).
    pub container_v4: Option<IpPrefix>,
    pub container_v6: Option<IpPrefix>,
    /// Masquerade hairpin and localhost traffic (default true).
    pub snat: bool,
    /// Masquerade every connection to the mapped ports.
    pub masq_all: bool,
    pub conditions: Conditions,
    /// iptables only: the mark bit of `CNI-HOSTPORT-SETMARK` (default 13).
    pub mark_bit: u8,
    /// iptables only: a chain of the user that sets the masquerade mark.
    pub external_set_mark_chain: Option<String>,
}

impl PortMapSpec {
    fn container(&self, v6: bool) -> Option<IpPrefix> {
        if v6 {
            self.container_v6
        } else {
            self.container_v4
        }
    }

    /// The mappings of one family, when the container has an address there.
    fn family_mappings(&self, v6: bool) -> Vec<PortMapping> {
        if self.container(v6).is_none() {
            return Vec::new();
        }
        self.mappings
            .iter()
            .filter(|m| m.applies_to(v6))
            .copied()
            .collect()
    }
}

// ---- nftables -------------------------------------------------------------

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
const LEDGER: &str = "portmap";

fn family(v6: bool) -> Family {
    if v6 {
        Family::Ip6
    } else {
        Family::Ip
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
    let v6 = !container.is_ipv4();
    let cip = container.addr();
    let width = if v6 { 128 } else { 32 };
    let rule = |src: IpAddr, len: u8| {
        let mut r = expr::match_prefix_nft(true, CmpOp::Eq, src, len);
        r.extend(expr::match_prefix_nft(false, CmpOp::Eq, cip, width));
        r.push(Expr::Masq);
        r
    };
    let mut out = Vec::new();
    if spec.masq_all {
        let any = if v6 {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        };
        out.push(rule(any, 0));
    } else {
        let subnet = container.truncate();
        out.push(rule(subnet.addr(), subnet.prefix_len()));
        if !v6 {
            out.push(rule(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 32));
        }
    }
    out
}

/// The Go plugin's table, chains and shared rules of one family, in its
/// order (so a fresh table lists, and numbers its handles, as Go's does).
fn skeleton(b: &mut Batch, v6: bool, snat: bool) {
    let f = family(v6);
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
fn skeleton_intact(nft: &mut Nft, v6: bool, snat: bool) -> Result<bool> {
    let f = family(v6);
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

/// A removed host port: (IPv6, IP protocol number, port).
pub type RemovedPort = (bool, u8, u16);

/// The host port of a ledger note (`proto/port`).
fn note_port(v6: bool, note: &str) -> Option<RemovedPort> {
    let (p, port) = note.split_once('/')?;
    Some((v6, p.parse().ok()?, port.parse().ok()?))
}

/// The host port of a mapping rule read back (`meta l4proto` compared with
/// one byte, then the port with two), for rules found by listing.
fn rule_port(v6: bool, r: &RuleInfo) -> Option<RemovedPort> {
    let i = r.cmp_data.iter().position(|d| d.len() == 1)?;
    let port = r.cmp_data.get(i + 1).filter(|d| d.len() == 2)?;
    Some((v6, r.cmp_data[i][0], u16::from_be_bytes([port[0], port[1]])))
}

/// The ledger's entries whose rule still exists with `comment`, and
/// whether every entry did (a missing one means the chains changed behind
/// the ledger: the caller lists them instead).
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

/// The rules of `comment` in the owned chains of both families, by one
/// listing of each chain: state the Go plugin wrote, or an ADD killed
/// before it wrote its ledger.
fn listed(nft: &mut Nft, comment: &str) -> Result<Vec<(bool, RuleInfo)>> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        let f = family(v6);
        if !nft.has_table(f, TABLE)? {
            continue;
        }
        for chain in OWNED_CHAINS {
            for r in nft.rules(f, TABLE, chain)? {
                if r.comment.as_deref() == Some(comment) {
                    out.push((v6, r));
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
            let v6 = set.ends_with('6');
            for e in &mine {
                let n = e.key.len();
                if n >= 8 {
                    let port = u16::from_be_bytes([e.key[n - 4], e.key[n - 3]]);
                    gone.push((v6, e.key[n - 8], port));
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
pub fn nft_add(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    const ATTEMPTS: usize = 3;
    let comment = rule_comment(&spec.owner);
    let ledger = ledger(&spec.owner);
    // Conditions are checked before anything is read or written.
    let mut conds = [Vec::new(), Vec::new()];
    for v6 in [false, true] {
        let key = if v6 { "conditionsV6" } else { "conditionsV4" };
        conds[usize::from(v6)] = parse_nft_conditions(key, spec.conditions.of(v6), v6)?;
    }
    let mut attempt = 1;
    loop {
        let mut b = Batch::new();
        if let Some(old) = ledger.as_ref().and_then(Ledger::load) {
            for e in verified(nft, &old, &comment)?.0 {
                b.del_rule(e.family, &e.table, &e.chain, e.handle);
            }
        }
        let mut notes: Vec<(usize, bool, String)> = Vec::new();
        let mut set_id = 0;
        for v6 in [false, true] {
            let Some(container) = spec.container(v6) else {
                continue;
            };
            let f = family(v6);
            if !skeleton_intact(nft, v6, spec.snat)? {
                skeleton(&mut b, v6, spec.snat);
            }
            for m in spec.family_mappings(v6) {
                let c = conditions::emit(&conds[usize::from(v6)], &mut b, f, TABLE, &mut set_id);
                let r = mapping_rule(&m, container.addr(), c);
                let i = b.add_rule_echo(f, TABLE, HOSTPORTS, &r, &comment);
                notes.push((i, v6, port_note(&m)));
            }
            if spec.snat {
                for r in masq_rules(spec, container) {
                    let i = b.add_rule_echo(f, TABLE, MASQUERADING, &r, &comment);
                    notes.push((i, v6, String::new()));
                }
            }
        }
        let echoed = match nft.commit_echo(&b) {
            Ok(e) => e,
            // A rule of the earlier ADD went meanwhile: read again.
            Err(e) if libcni::netlink::is_not_found(&e) && attempt < ATTEMPTS => {
                attempt += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let entries: Vec<Entry> = notes
            .iter()
            .filter_map(|(i, v6, note)| {
                let (_, r) = echoed.iter().find(|(j, _)| j == i)?;
                Some(Entry {
                    family: family(*v6),
                    table: TABLE.to_string(),
                    chain: r.chain.clone(),
                    handle: r.handle,
                    note: note.clone(),
                })
            })
            .collect();
        let Some(ledger) = ledger else {
            return Ok(());
        };
        if let Err(e) = ledger.store(&entries) {
            // Without its ledger the container's rules would still be
            // found by listing; but a failed ADD leaves nothing.
            let mut undo = Batch::new();
            for en in &entries {
                undo.del_rule(en.family, &en.table, &en.chain, en.handle);
            }
            let _ = nft.commit(&undo);
            return Err(e);
        }
        return Ok(());
    }
}

/// nftables DEL: the container's rules, from its ledger (each handle read
/// back first, with the container ID as comment), or, without a ledger or
/// when one of its rules is gone, from one listing of the Go plugin's
/// chains: rules the Go plugin wrote are removed too. Also what the
/// container owns in our previous release's table. One batch. Returns the
/// host ports that were mapped.
pub fn nft_del(nft: &mut Nft, owner: &Owner) -> Result<Vec<RemovedPort>> {
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
                let (ok, all) = verified(nft, &entries, &comment)?;
                let doomed: Vec<(bool, u64, String, Option<RemovedPort>)> = ok
                    .iter()
                    .map(|e| {
                        let v6 = e.family == Family::Ip6;
                        (v6, e.handle, e.chain.clone(), note_port(v6, &e.note))
                    })
                    .collect();
                (doomed, all)
            }
            None => (Vec::new(), false),
        };
        if !complete {
            for (v6, r) in listed(nft, &comment)? {
                if !doomed.iter().any(|d| d.0 == v6 && d.1 == r.handle) {
                    let port = (r.chain != MASQUERADING)
                        .then(|| rule_port(v6, &r))
                        .flatten();
                    doomed.push((v6, r.handle, r.chain.clone(), port));
                }
            }
        }
        for (v6, handle, chain, port) in &doomed {
            b.del_rule(family(*v6), TABLE, chain, *handle);
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
pub fn nft_gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<Vec<RemovedPort>> {
    let mut b = Batch::new();
    let mut removed = Vec::new();
    let mut stale = Vec::new();
    for (l, entries) in ledger::list(LEDGER, network) {
        let cid = l.name().to_string();
        if valid.iter().any(|a| a.container_id == cid) {
            continue;
        }
        let comment = rule_comment(&Owner::new(network, &cid));
        for e in verified(nft, &entries, &comment)?.0 {
            let v6 = e.family == Family::Ip6;
            removed.extend(note_port(v6, &e.note));
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
pub fn nft_check(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    let comment = rule_comment(&spec.owner);
    let failed = |what: String| Error::CheckFailed(format!("portmap: {what}"));
    // The ledger's rules when every one of them is there; otherwise one
    // listing, as the Go plugin's CHECK does.
    let mut have: Vec<(bool, RuleInfo)> = Vec::new();
    let mut complete = false;
    if let Some(entries) = ledger(&spec.owner).and_then(|l| l.load()) {
        complete = true;
        for e in &entries {
            match nft.get_rule(e.family, &e.table, &e.chain, e.handle)? {
                Some(r) if r.comment.as_deref() == Some(comment.as_str()) => {
                    have.push((e.family == Family::Ip6, r))
                }
                _ => complete = false,
            }
        }
    }
    if !complete {
        have = listed(nft, &comment)?;
    }
    let has = |v6: bool, chain: &str, exprs: &[Expr]| {
        let (cmp, imm) = summary(exprs);
        have.iter()
            .any(|(f, r)| *f == v6 && r.chain == chain && r.cmp_data == cmp && r.imm_data == imm)
    };
    for v6 in [false, true] {
        let Some(container) = spec.container(v6) else {
            continue;
        };
        let f = family(v6);
        if !skeleton_intact(nft, v6, spec.snat)? {
            return Err(failed(format!(
                "the shared chains of table {} {TABLE} are missing or changed",
                f.as_str()
            )));
        }
        let key = if v6 { "conditionsV6" } else { "conditionsV4" };
        let conds = parse_nft_conditions(key, spec.conditions.of(v6), v6)?;
        for m in spec.family_mappings(v6) {
            let mut scratch = Batch::new();
            let c = conditions::emit(&conds, &mut scratch, f, TABLE, &mut 0);
            if !has(v6, HOSTPORTS, &mapping_rule(&m, container.addr(), c)) {
                return Err(failed(format!(
                    "mapping {m} has no rule to {} in chain {} {TABLE} {HOSTPORTS}",
                    container.addr(),
                    f.as_str()
                )));
            }
        }
        if spec.snat {
            for r in masq_rules(spec, container) {
                if !has(v6, MASQUERADING, &r) {
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
pub fn parse_nft_conditions(key: &str, conds: &[String], v6: bool) -> Result<Vec<Condition>> {
    conditions::parse(key, conds, v6)
}

// ---- iptables ---------------------------------------------------------------

/// `CNI-HOSTPORT-DNAT`: jumped to for local destinations.
pub const IPT_DNAT_CHAIN: &str = "CNI-HOSTPORT-DNAT";
/// `CNI-HOSTPORT-SETMARK`: sets the masquerade mark.
pub const IPT_SETMARK_CHAIN: &str = "CNI-HOSTPORT-SETMARK";
/// `CNI-HOSTPORT-MASQ`: masquerades marked packets.
pub const IPT_MASQ_CHAIN: &str = "CNI-HOSTPORT-MASQ";
/// The chain of old plugin versions' SNAT rules, cleaned up on DEL.
const IPT_OLD_SNAT_CHAIN: &str = "CNI-HOSTPORT-SNAT";

/// The per-container chain `CNI-DN-<21 hex>`.
pub fn ipt_dnat_chain(owner: &Owner) -> String {
    libcni::netfilter::go_chain_name("DN-", &owner.network, &owner.container_id)
}

fn mark_def(bit: u8) -> String {
    let v = 1u32 << bit;
    format!("{v:#x}/{v:#x}")
}

/// The Go plugin's comment of the entry rules.
fn ipt_dnat_comment(owner: &Owner) -> String {
    let mut c = format!(
        "dnat name: \"{}\" id: \"{}\"",
        owner.network, owner.container_id
    );
    // iptables comments hold 255 bytes (Go's trimComment).
    c.truncate(255);
    c
}

/// Ports of one protocol as multiport lists of at most 15.
fn port_lists(ports: &[u16]) -> Vec<String> {
    ports
        .chunks(15)
        .map(|c| c.iter().map(u16::to_string).collect::<Vec<_>>().join(","))
        .collect()
}

/// iptables ADD for one family: `CNI-DN-<hash>` rebuilt from scratch, its
/// entry rules replaced, the shared chains completed where missing. One
/// `iptables-save` and one `iptables-restore`.
pub fn ipt_add(spec: &PortMapSpec, v6: bool) -> Result<()> {
    if spec.container(v6).is_none() || spec.mappings.is_empty() {
        return Ok(());
    }
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    let mut r = Restore::new(IptTable::Nat);
    ipt_add_changes(spec, v6, &saved, &mut r);
    iptables::restore(fam, &r)
}

/// The changes of an iptables ADD for one family against the nat table
/// `saved` (what [`ipt_add`] restores and [`ipt_add_native`] encodes).
fn ipt_add_changes(spec: &PortMapSpec, v6: bool, saved: &SavedTable, r: &mut Restore) {
    let Some(container) = spec.container(v6) else {
        return;
    };
    if spec.snat && spec.external_set_mark_chain.is_none() {
        ipt_masquerade_skeleton(spec, saved, r);
    }
    ipt_dnat_skeleton(saved, r);
    ipt_container_rules(spec, v6, container, saved, r);
}

/// The shared chains and rules of `snat` (without an external mark chain):
/// the mark set on host port traffic, its masquerade, and POSTROUTING's
/// jump, each only when missing.
fn ipt_masquerade_skeleton(spec: &PortMapSpec, saved: &SavedTable, r: &mut Restore) {
    let mark = mark_def(spec.mark_bit);
    let setmark_rule = iptables::rule_line(
        IPT_SETMARK_CHAIN,
        &[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd masquerade mark",
            "-j",
            "MARK",
            "--set-xmark",
            &mark,
        ],
    );
    if !saved.has_chain(IPT_SETMARK_CHAIN) {
        r.declare(IPT_SETMARK_CHAIN);
    }
    if !saved.has_rule(&setmark_rule) {
        r.append(setmark_rule);
    }
    let masq_rule = iptables::rule_line(
        IPT_MASQ_CHAIN,
        &["-m", "mark", "--mark", &mark, "-j", "MASQUERADE"],
    );
    if !saved.has_chain(IPT_MASQ_CHAIN) {
        r.declare(IPT_MASQ_CHAIN);
    }
    if !saved.has_rule(&masq_rule) {
        r.append(masq_rule);
    }
    let entry = iptables::rule_line(
        "POSTROUTING",
        &[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd requiring masquerade",
            "-j",
            IPT_MASQ_CHAIN,
        ],
    );
    if !saved.has_rule(&entry) {
        r.insert_first(&entry);
    }
}

/// The shared DNAT chain and the PREROUTING and OUTPUT jumps to it for
/// local destinations, each only when missing.
fn ipt_dnat_skeleton(saved: &SavedTable, r: &mut Restore) {
    if !saved.has_chain(IPT_DNAT_CHAIN) {
        r.declare(IPT_DNAT_CHAIN);
    }
    for chain in ["PREROUTING", "OUTPUT"] {
        let entry = iptables::rule_line(
            chain,
            &[
                "-m",
                "addrtype",
                "--dst-type",
                "LOCAL",
                "-j",
                IPT_DNAT_CHAIN,
            ],
        );
        if !saved.has_rule(&entry) {
            r.append(entry);
        }
    }
}

/// The container's own chain (declared, so an earlier ADD's rules go),
/// the shared chain's jumps to it (one per protocol and 15 ports), and in
/// it each mapping's mark (with `snat`) and DNAT.
fn ipt_container_rules(
    spec: &PortMapSpec,
    v6: bool,
    container: IpPrefix,
    saved: &SavedTable,
    r: &mut Restore,
) {
    let setmark = match &spec.external_set_mark_chain {
        Some(c) => c.clone(),
        None => IPT_SETMARK_CHAIN.to_string(),
    };
    let chain = ipt_dnat_chain(&spec.owner);
    // Declaring the chain creates it, or flushes what an earlier ADD left.
    r.declare(&chain);
    for old in saved.jumps_to(IPT_DNAT_CHAIN, &chain) {
        r.delete(old);
    }
    let comment = ipt_dnat_comment(&spec.owner);
    let conds = spec.conditions.of(v6);
    let cond_args: Vec<String> = conds
        .iter()
        .flat_map(|c| c.split_whitespace())
        .map(str::to_string)
        .collect();
    // Entry rules: all mappings of each protocol (as the Go plugin does,
    // whatever their hostIP family), protocols in sorted order.
    let protocols: BTreeSet<Protocol> = spec.mappings.iter().map(|m| m.protocol).collect();
    for proto in protocols {
        let ports: Vec<u16> = spec
            .mappings
            .iter()
            .filter(|m| m.protocol == proto)
            .map(|m| m.host_port)
            .collect();
        for list in port_lists(&ports) {
            let mut args: Vec<&str> = vec![
                "-p",
                proto.as_str(),
                "-m",
                "comment",
                "--comment",
                &comment,
                "-m",
                "multiport",
                "--dports",
                &list,
            ];
            args.extend(cond_args.iter().map(String::as_str));
            args.extend(["-j", chain.as_str()]);
            r.append(iptables::rule_line(IPT_DNAT_CHAIN, &args));
        }
    }
    let masq_src = if spec.masq_all {
        if v6 {
            "::/0".to_string()
        } else {
            "0.0.0.0/0".to_string()
        }
    } else {
        format!("{}/{}", container.network(), container.prefix_len())
    };
    for m in spec.family_mappings(v6) {
        let matched = ipt_mapping_match(&m, v6);
        let base: Vec<&str> = matched.iter().map(String::as_str).collect();
        if spec.snat {
            let mut hp: Vec<&str> = vec!["-s", masq_src.as_str()];
            hp.extend(base.iter().copied());
            hp.extend(["-j", setmark.as_str()]);
            r.append(iptables::rule_line(&chain, &hp));
            if !v6 && !spec.masq_all {
                let mut lo: Vec<&str> = vec!["-s", "127.0.0.1/32"];
                lo.extend(base.iter().copied());
                lo.extend(["-j", setmark.as_str()]);
                r.append(iptables::rule_line(&chain, &lo));
            }
        }
        r.append(ipt_dnat_rule(&chain, &m, container, v6));
    }
}

/// What selects mapping `m`'s traffic in the container's chain:
/// `[-d <hostIP>/32|128] -p <proto> -m <proto> --dport <hostPort>`.
fn ipt_mapping_match(m: &PortMapping, v6: bool) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(ip) = m.dst() {
        args.extend([
            "-d".to_string(),
            format!("{ip}/{}", if v6 { 128 } else { 32 }),
        ]);
    }
    let proto = m.protocol.as_str();
    args.extend(["-p", proto, "-m", proto, "--dport"].map(str::to_string));
    args.push(m.host_port.to_string());
    args
}

/// The DNAT rule of mapping `m` in the container's chain `chain`, to the
/// container address `container`.
fn ipt_dnat_rule(chain: &str, m: &PortMapping, container: IpPrefix, v6: bool) -> String {
    let to = if v6 {
        format!("[{}]:{}", container.addr(), m.container_port)
    } else {
        format!("{}:{}", container.addr(), m.container_port)
    };
    let mut args = ipt_mapping_match(m, v6);
    args.extend(["-j", "DNAT", "--to-destination"].map(str::to_string));
    args.push(to);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    iptables::rule_line(chain, &args)
}

/// iptables DEL for one family: entry rules jumping to `CNI-DN-<hash>` (and
/// the old `CNI-SN-<hash>`) removed, the chains flushed and deleted; found
/// by the hashed name, so no mapping needs to be known. Nothing is run
/// when nothing is there.
pub fn ipt_del(owner: &Owner, v6: bool) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    let mut r = Restore::new(IptTable::Nat);
    ipt_remove_container(&saved, &mut r, owner);
    iptables::restore(fam, &r)
}

fn ipt_remove_container(saved: &SavedTable, r: &mut Restore, owner: &Owner) {
    for (chain, entry) in [
        (ipt_dnat_chain(owner), IPT_DNAT_CHAIN),
        (
            libcni::netfilter::go_chain_name("SN-", &owner.network, &owner.container_id),
            IPT_OLD_SNAT_CHAIN,
        ),
    ] {
        for line in saved.rules.iter().filter(|l| {
            iptables::rule_chain(l) == Some(entry)
                && iptables::rule_target(l).as_deref() == Some(chain.as_str())
        }) {
            r.delete(line);
        }
        if saved.has_chain(&chain) {
            r.remove_chain(&chain);
        }
    }
}

/// iptables GC for one family: containers of `network` whose entry rules'
/// comment names a container not in `valid` lose their chain.
pub fn ipt_gc(network: &str, valid: &[Attachment], v6: bool) -> Result<()> {
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    let mut r = Restore::new(IptTable::Nat);
    ipt_gc_changes(network, valid, &saved, &mut r);
    iptables::restore(fam, &r)
}

fn ipt_gc_changes(network: &str, valid: &[Attachment], saved: &SavedTable, r: &mut Restore) {
    let mut done = BTreeSet::new();
    for line in saved.rules_of(IPT_DNAT_CHAIN) {
        let Some(comment) = iptables::rule_comment(line) else {
            continue;
        };
        let Some(tag) = comment.strip_prefix("dnat ") else {
            continue;
        };
        let Some((net, cid)) = libcni::netfilter::parse_go_comment(tag) else {
            continue;
        };
        if net != network || valid.iter().any(|a| a.container_id == cid) {
            continue;
        }
        let owner = Owner::new(net, cid);
        if done.insert(cid.to_string()) {
            ipt_remove_container(saved, r, &owner);
        }
    }
}

/// iptables CHECK for one family: the container's chain exists and holds
/// the DNAT rule of every mapping.
pub fn ipt_check(spec: &PortMapSpec, v6: bool) -> Result<()> {
    if spec.container(v6).is_none() {
        return Ok(());
    }
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    ipt_check_saved(spec, v6, &saved)
}

/// [`ipt_check`] against the nat table `saved`.
fn ipt_check_saved(spec: &PortMapSpec, v6: bool, saved: &SavedTable) -> Result<()> {
    let Some(container) = spec.container(v6) else {
        return Ok(());
    };
    let chain = ipt_dnat_chain(&spec.owner);
    if !saved.has_chain(&chain) {
        return Err(Error::CheckFailed(format!(
            "portmap: chain {chain} is missing from the {} nat table",
            if v6 { "ip6tables" } else { "iptables" }
        )));
    }
    if saved.jumps_to(IPT_DNAT_CHAIN, &chain).is_empty() {
        return Err(Error::CheckFailed(format!(
            "portmap: {IPT_DNAT_CHAIN} has no rule jumping to {chain}"
        )));
    }
    for m in spec.family_mappings(v6) {
        if !saved.has_rule(&ipt_dnat_rule(&chain, &m, container, v6)) {
            return Err(Error::CheckFailed(format!(
                "portmap: mapping {m} has no DNAT rule in {chain}"
            )));
        }
    }
    Ok(())
}

// ---- iptables rules on iptables-nft, natively -------------------------------

/// The ledger feature of the iptables rules written natively: the
/// handles of a container's jumps in `CNI-HOSTPORT-DNAT`.
const IPT_LEDGER: &str = "portmap-iptables";

fn ipt_ledger(owner: &Owner) -> Option<Ledger> {
    Ledger::new(IPT_LEDGER, &owner.network, &owner.container_id)
}

const NAT_BASE: [&str; 3] = ["PREROUTING", "OUTPUT", "POSTROUTING"];

/// iptables ADD on iptables-nft, both families, with no process: the same
/// changes as [`ipt_add`], one batch per family; the handles of the
/// container's jumps in `CNI-HOSTPORT-DNAT` go to its ledger. A family
/// with `conditionsV4`/`conditionsV6` (free iptables text) is written by
/// `iptables-restore`.
pub fn ipt_add_native(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    let own = ipt_dnat_chain(&spec.owner);
    let mut entries = Vec::new();
    for v6 in [false, true] {
        if spec.container(v6).is_none() || spec.mappings.is_empty() {
            continue;
        }
        if !spec.conditions.of(v6).is_empty() {
            ipt_add(spec, v6)?;
            continue;
        }
        let mut chains: Vec<String> = [IPT_SETMARK_CHAIN, IPT_MASQ_CHAIN, IPT_DNAT_CHAIN]
            .into_iter()
            .chain(NAT_BASE)
            .map(str::to_string)
            .collect();
        chains.push(own.clone());
        let rules_of = |found: &BTreeSet<String>| {
            let mut v: Vec<String> = NAT_BASE
                .into_iter()
                .chain([IPT_SETMARK_CHAIN, IPT_MASQ_CHAIN])
                .map(str::to_string)
                .collect();
            // Old jumps to the container's chain exist only with it.
            if found.contains(&own) {
                v.push(IPT_DNAT_CHAIN.to_string());
            }
            v
        };
        let plan = xt_nat::ReadPlan {
            chains,
            rules_of: &rules_of,
        };
        let added = xt_nat::apply(
            nft,
            v6,
            &mut |n| xt_nat::read(n, v6, &plan),
            &mut |saved, r| ipt_add_changes(spec, v6, saved, r),
            &|c| c == IPT_DNAT_CHAIN,
        )?;
        entries.extend(added.into_iter().map(|(_, chain, handle)| Entry {
            family: family(v6),
            table: xt_nat::TABLE.to_string(),
            chain,
            handle,
            note: own.clone(),
        }));
        crate::fault::point("portmap/between-families");
    }
    let Some(ledger) = ipt_ledger(&spec.owner) else {
        return Ok(());
    };
    if let Err(e) = ledger.store(&entries) {
        // A failed ADD leaves nothing.
        let _ = ipt_del_native(nft, &spec.owner);
        return Err(e);
    }
    Ok(())
}

/// What a native DEL reads of one family: the container's chains, and the
/// jumps to them, from the ledger when each of its entries of the family
/// reads back as such a jump, else by listing `CNI-HOSTPORT-DNAT`.
fn ipt_read_container(
    nft: &mut Nft,
    v6: bool,
    owner: &Owner,
    entries: &[Entry],
) -> Result<(SavedTable, xt_nat::Handles)> {
    let own = ipt_dnat_chain(owner);
    let old = libcni::netfilter::go_chain_name("SN-", &owner.network, &owner.container_id);
    let plan = xt_nat::ReadPlan {
        chains: vec![
            own.clone(),
            old.clone(),
            IPT_DNAT_CHAIN.to_string(),
            IPT_OLD_SNAT_CHAIN.to_string(),
        ],
        rules_of: &|_| Vec::new(),
    };
    let (mut saved, mut handles) = xt_nat::read(nft, v6, &plan)?;
    let fam = family(v6);
    if saved.has_chain(&own) {
        for r in nft.rules_raw(fam, xt_nat::TABLE, Some(&own))? {
            xt_nat::push_rule(&mut saved, &mut handles, &r, v6);
        }
        let rules = xt_nat::jumps_by_ledger(nft, v6, entries, &own, IPT_DNAT_CHAIN)?;
        for r in &rules {
            xt_nat::push_rule(&mut saved, &mut handles, r, v6);
        }
    }
    if saved.has_chain(&old) && saved.has_chain(IPT_OLD_SNAT_CHAIN) {
        for r in nft.rules_raw(fam, xt_nat::TABLE, Some(IPT_OLD_SNAT_CHAIN))? {
            xt_nat::push_rule(&mut saved, &mut handles, &r, v6);
        }
    }
    Ok((saved, handles))
}

/// The host port of a DNAT rule line of a container's chain.
fn ipt_rule_port(v6: bool, line: &str) -> Option<RemovedPort> {
    let t = iptables::split_tokens(line);
    if !t.iter().any(|x| x == "DNAT") {
        return None;
    }
    let after = |k: &str| t.iter().position(|x| x == k).and_then(|i| t.get(i + 1));
    let proto = Protocol::parse(after("-p")?)?.number();
    Some((v6, proto, after("--dport")?.parse().ok()?))
}

/// iptables DEL on iptables-nft, both families, with no process: the same
/// changes as [`ipt_del`]. Costs a few lookups when the container has no
/// chain; with one, its own rules are listed and its ledger spares
/// listing `CNI-HOSTPORT-DNAT`. Returns the host ports its DNAT rules
/// mapped.
pub fn ipt_del_native(nft: &mut Nft, owner: &Owner) -> Result<Vec<RemovedPort>> {
    let ledger = ipt_ledger(owner);
    let entries = ledger.as_ref().and_then(Ledger::load).unwrap_or_default();
    let own = ipt_dnat_chain(owner);
    let mut removed = Vec::new();
    for v6 in [false, true] {
        let mut ports = Vec::new();
        xt_nat::apply(
            nft,
            v6,
            &mut |n| ipt_read_container(n, v6, owner, &entries),
            &mut |saved, r| {
                ports = saved
                    .rules_of(&own)
                    .filter_map(|l| ipt_rule_port(v6, l))
                    .collect();
                ipt_remove_container(saved, r, owner)
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
pub fn ipt_gc_native(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<()> {
    for v6 in [false, true] {
        xt_nat::apply(
            nft,
            v6,
            &mut |n| {
                let chains = n.chain_names(family(v6), xt_nat::TABLE)?;
                let plan = xt_nat::ReadPlan {
                    chains,
                    rules_of: &|_| vec![IPT_DNAT_CHAIN.into(), IPT_OLD_SNAT_CHAIN.into()],
                };
                xt_nat::read(n, v6, &plan)
            },
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
pub fn ipt_check_native(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    let own = ipt_dnat_chain(&spec.owner);
    for v6 in [false, true] {
        if spec.container(v6).is_none() {
            continue;
        }
        let plan = xt_nat::ReadPlan {
            chains: vec![own.clone(), IPT_DNAT_CHAIN.to_string()],
            rules_of: &|_| vec![own.clone(), IPT_DNAT_CHAIN.to_string()],
        };
        let (saved, _) = xt_nat::read(nft, v6, &plan)?;
        ipt_check_saved(spec, v6, &saved)?;
    }
    Ok(())
}

/// Whether the nat table of iptables-nft holds the host port chains at
/// all (seen through nf_tables).
pub fn ipt_native_has_hostports(nft: &mut Nft, v6: bool) -> Result<bool> {
    nft.has_chain(family(v6), xt_nat::TABLE, IPT_DNAT_CHAIN)
}
