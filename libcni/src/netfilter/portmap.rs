//! Host ports: forwarding `hostIP:hostPort` on the node to
//! `containerIP:containerPort`, on either backend.
//!
//! # nftables design
//!
//! One table, `inet cni_rs_hostport`, shared by every container:
//!
//! ```text
//! chain prerouting  (nat, prerouting, dstnat)   fib daddr type local jump hostports
//! chain output      (nat, output, dstnat)       fib daddr type local jump hostports
//! chain hostports   jump conditioned
//!                   meta nfproto ipv4 dnat ip to ip daddr . meta l4proto . th dport map @hostip_hostports4
//!                   meta nfproto ipv4 dnat ip to meta l4proto . th dport map @hostports4
//!                   (the same for ipv6 with @hostip_hostports6, @hostports6)
//! chain conditioned per-container rules of networks with conditionsV4/V6
//! chain postrouting (nat, postrouting, srcnat)
//!                   meta nfproto ipv4 ct status dnat ip saddr 127.0.0.0/8 masquerade
//!                   meta nfproto ipv6 ct status dnat ip6 saddr ::1 masquerade
//!                   meta nfproto ipv4 ct status dnat ip daddr @masq_all4 masquerade
//!                   meta nfproto ipv6 ct status dnat ip6 daddr @masq_all6 masquerade
//!                   jump hairpin
//! chain hairpin     one rule per pod subnet: ct status dnat ip saddr S ip daddr S masquerade
//! ```
//!
//! A container's mappings are elements of the four maps (`proto . port` or
//! `hostIP . proto . port` to `containerIP . containerPort`), each with its
//! [`Owner::tag`] as comment. ADD adds them (a key already owned by another
//! container is refused before anything changes, and `NLM_F_EXCL` closes
//! the race), DEL and GC dump the maps and delete the elements by tag. The
//! rules of the base chains are rewritten by every ADD in the same batch,
//! so the cost of ADD and DEL does not depend on how many other mappings
//! exist (DEL reads the maps once). Hairpin masquerade rules are per pod
//! subnet and shared, like the Go plugin's top-level chains; they stay.
//!
//! # iptables design
//!
//! Exactly the Go plugin's (nat table): `CNI-HOSTPORT-DNAT` jumped from
//! PREROUTING and OUTPUT for local destinations, a `CNI-DN-<hash>` chain per
//! container with the hairpin/localhost mark rules and the DNAT rules,
//! `CNI-HOSTPORT-SETMARK` and `CNI-HOSTPORT-MASQ`; see [`super::iptables`].

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use super::iptables::{self, IptFamily, IptTable, Restore, SavedTable};
use super::nft::expr::{self, CmpOp, Expr, MetaKey, NatType, PayloadBase, Verdict, REG_1};
use super::nft::{
    addr_field, port_field, proto_field, types, BaseChain, Batch, Elem, ElemData, Family, Hook,
    Nft, SetSpec, PRIORITY_DSTNAT, PRIORITY_SRCNAT, SET_MAP,
};
use super::Owner;
use crate::types::{Attachment, IpPrefix};
use crate::{Error, Result};

/// The nf_tables table of host ports.
pub const TABLE: &str = "cni_rs_hostport";
const F: Family = Family::Inet;

/// The CNI error code of a host port that another container already maps
/// (plugin-specific range: the config is valid, the node is not free).
pub const CONFLICT_CODE: u32 = crate::error::code::CONFLICT;

/// A transport protocol of a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Parses `tcp`, `udp` or `sctp` (any case, as the Go plugin lowercases).
    pub fn parse(s: &str) -> Option<Protocol> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            "sctp" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

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

/// The error of a host port that another owner holds.
pub fn conflict_error(m: &PortMapping, holder: &str) -> Error {
    Error::Conflict(format!(
        "runtimeConfig.portMappings: host port {} ({m}) is already mapped by {holder}",
        m.host_port
    ))
}

// ---- nftables -------------------------------------------------------------

/// The names of the maps of one family.
fn map_names(v6: bool) -> (&'static str, &'static str) {
    if v6 {
        ("hostports6", "hostip_hostports6")
    } else {
        ("hostports4", "hostip_hostports4")
    }
}

fn masq_all_set(v6: bool) -> &'static str {
    if v6 {
        "masq_all6"
    } else {
        "masq_all4"
    }
}

/// The map and key of a mapping.
fn map_key(m: &PortMapping, v6: bool) -> (&'static str, Vec<u8>) {
    let (any, with_ip) = map_names(v6);
    let mut key = Vec::new();
    let map = match m.dst() {
        Some(ip) => {
            key.extend(addr_field(ip));
            with_ip
        }
        None => any,
    };
    key.extend(proto_field(m.protocol.number()));
    key.extend(port_field(m.host_port));
    (map, key)
}

fn map_data(container: IpAddr, port: u16) -> Vec<u8> {
    let mut d = addr_field(container);
    d.extend(port_field(port));
    d
}

fn set_specs() -> Vec<SetSpec> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        let (addr_t, addr_len) = if v6 {
            (types::IP6ADDR, 16)
        } else {
            (types::IPADDR, 4)
        };
        let data = Some((types::concat(&[addr_t, types::INET_SERVICE]), addr_len + 4));
        let (any, with_ip) = map_names(v6);
        let base = if v6 { 10 } else { 0 };
        out.push(SetSpec {
            name: any.into(),
            id: base + 1,
            flags: SET_MAP,
            key_type: types::concat(&[types::INET_PROTOCOL, types::INET_SERVICE]),
            key_len: 8,
            data,
        });
        out.push(SetSpec {
            name: with_ip.into(),
            id: base + 2,
            flags: SET_MAP,
            key_type: types::concat(&[addr_t, types::INET_PROTOCOL, types::INET_SERVICE]),
            key_len: addr_len + 8,
            data,
        });
        out.push(SetSpec {
            name: masq_all_set(v6).into(),
            id: base + 3,
            flags: 0,
            key_type: addr_t,
            key_len: addr_len,
            data: None,
        });
    }
    out
}

/// `dnat ip to <key> map @map`: the lookup rule of one map.
fn dnat_map_rule(v6: bool, with_ip: bool, map: &str, set_id: u32) -> Vec<Expr> {
    let mut r = expr::match_nfproto(v6);
    let mut next = 0;
    if with_ip {
        let (offset, len) = expr::ip_addr_offset(v6, false);
        r.push(Expr::Payload {
            base: PayloadBase::Network,
            offset,
            len,
            dreg: expr::reg32(0),
        });
        next = len / 4;
    }
    r.push(Expr::Meta {
        key: MetaKey::L4Proto,
        dreg: expr::reg32(next),
    });
    r.push(Expr::Payload {
        base: PayloadBase::Transport,
        offset: 2,
        len: 2,
        dreg: expr::reg32(next + 1),
    });
    r.push(Expr::Lookup {
        set: map.into(),
        set_id: Some(set_id),
        sreg: expr::reg32(0),
        dreg: Some(expr::reg32(0)),
        invert: false,
    });
    r.push(Expr::Nat {
        kind: NatType::Dnat,
        family: if v6 {
            expr::NFPROTO_IPV6
        } else {
            expr::NFPROTO_IPV4
        },
        addr_reg: expr::reg32(0),
        port_reg: Some(expr::reg32(if v6 { 4 } else { 1 })),
    });
    r
}

/// The comment of the first rule of chain `prerouting`: which version of
/// the skeleton the table holds.
const SKELETON_MARK: &str = "cni-rs hostport skeleton v1";

/// The number of rules of each shared chain in a complete skeleton.
const SKELETON_RULES: [(&str, usize); 4] = [
    ("prerouting", 1),
    ("output", 1),
    ("hostports", 5),
    ("postrouting", 5),
];

/// Whether the rules read back hold the current skeleton, whole.
fn skeleton_intact(rules: &[super::nft::RuleInfo]) -> bool {
    let marked = rules
        .iter()
        .any(|r| r.chain == "prerouting" && r.comment.as_deref() == Some(SKELETON_MARK));
    marked
        && SKELETON_RULES
            .iter()
            .all(|(c, n)| rules.iter().filter(|r| r.chain == *c).count() == *n)
}

/// Declares the table, chains and maps, and rewrites the rules of the
/// shared chains (idempotent). Only ADDs that find the skeleton missing or
/// outdated send it: rewriting rules that look maps up makes the kernel
/// walk every element of the maps.
fn skeleton(b: &mut Batch) {
    b.add_table(F, TABLE);
    let nat = |hook, priority| BaseChain {
        hook,
        priority,
        chain_type: "nat",
    };
    b.add_chain(
        F,
        TABLE,
        "prerouting",
        Some(&nat(Hook::Prerouting, PRIORITY_DSTNAT)),
    );
    b.add_chain(
        F,
        TABLE,
        "output",
        Some(&nat(Hook::Output, PRIORITY_DSTNAT)),
    );
    b.add_chain(
        F,
        TABLE,
        "postrouting",
        Some(&nat(Hook::Postrouting, PRIORITY_SRCNAT)),
    );
    for c in ["hostports", "conditioned", "hairpin"] {
        b.add_chain(F, TABLE, c, None);
    }
    let sets = set_specs();
    for s in &sets {
        b.add_set(F, TABLE, s);
    }
    for c in ["prerouting", "output", "hostports", "postrouting"] {
        b.flush_chain(F, TABLE, c);
    }
    for c in ["prerouting", "output"] {
        let mut r = expr::match_fib_daddr_local();
        r.push(Expr::Immediate(Verdict::Jump("hostports".into())));
        let mark = (c == "prerouting").then_some(SKELETON_MARK);
        b.add_rule(F, TABLE, c, &r, mark);
    }
    b.add_rule(
        F,
        TABLE,
        "hostports",
        &[Expr::Immediate(Verdict::Jump("conditioned".into()))],
        None,
    );
    for v6 in [false, true] {
        let (any, with_ip) = map_names(v6);
        let id = |name: &str| sets.iter().find(|s| s.name == name).map_or(0, |s| s.id);
        b.add_rule(
            F,
            TABLE,
            "hostports",
            &dnat_map_rule(v6, true, with_ip, id(with_ip)),
            None,
        );
        b.add_rule(
            F,
            TABLE,
            "hostports",
            &dnat_map_rule(v6, false, any, id(any)),
            None,
        );
    }
    for v6 in [false, true] {
        let mut r = expr::match_nfproto(v6);
        r.extend(expr::match_ct_status_dnat());
        let lo: IpAddr = if v6 {
            "::1"
                .parse()
                .unwrap_or(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST))
        } else {
            IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 0))
        };
        r.extend(expr::match_ip(
            true,
            CmpOp::Eq,
            lo,
            if v6 { 128 } else { 8 },
        ));
        r.push(Expr::Masq);
        b.add_rule(F, TABLE, "postrouting", &r, None);
    }
    for v6 in [false, true] {
        let set = masq_all_set(v6);
        let id = sets.iter().find(|s| s.name == set).map_or(0, |s| s.id);
        let mut r = expr::match_nfproto(v6);
        r.extend(expr::match_ct_status_dnat());
        r.extend(expr::match_ip_in_set(v6, false, set, id));
        r.push(Expr::Masq);
        b.add_rule(F, TABLE, "postrouting", &r, None);
    }
    b.add_rule(
        F,
        TABLE,
        "postrouting",
        &[Expr::Immediate(Verdict::Jump("hairpin".into()))],
        None,
    );
}

/// The comment of the shared hairpin rule of a pod subnet.
fn hairpin_comment(subnet: &IpPrefix) -> String {
    format!("hairpin {}/{}", subnet.network(), subnet.prefix_len())
}

fn hairpin_rule(subnet: &IpPrefix) -> Vec<Expr> {
    let v6 = !subnet.is_ipv4();
    let mut r = expr::match_nfproto(v6);
    r.extend(expr::match_ct_status_dnat());
    r.extend(expr::match_ip(
        true,
        CmpOp::Eq,
        subnet.network(),
        subnet.prefix_len(),
    ));
    r.extend(expr::match_ip(
        false,
        CmpOp::Eq,
        subnet.network(),
        subnet.prefix_len(),
    ));
    r.push(Expr::Masq);
    r
}

/// A mapping of a network with conditions, as a rule of chain `conditioned`.
fn conditioned_rule(m: &PortMapping, container: IpAddr, conds: &[Vec<Expr>]) -> Vec<Expr> {
    let v6 = container.is_ipv6();
    let mut r = expr::match_nfproto(v6);
    for c in conds {
        r.extend(c.iter().cloned());
    }
    if let Some(dst) = m.dst() {
        r.extend(expr::match_ip(
            false,
            CmpOp::Eq,
            dst,
            if v6 { 128 } else { 32 },
        ));
    }
    r.push(Expr::Meta {
        key: MetaKey::L4Proto,
        dreg: REG_1,
    });
    r.push(Expr::Cmp {
        sreg: REG_1,
        op: CmpOp::Eq,
        data: vec![m.protocol.number()],
    });
    r.push(Expr::Payload {
        base: PayloadBase::Transport,
        offset: 2,
        len: 2,
        dreg: REG_1,
    });
    r.push(Expr::Cmp {
        sreg: REG_1,
        op: CmpOp::Eq,
        data: m.host_port.to_be_bytes().to_vec(),
    });
    r.extend(nat_to(container, m.container_port));
    r
}

/// `dnat ip to addr:port` with immediates.
fn nat_to(addr: IpAddr, port: u16) -> Vec<Expr> {
    let v6 = addr.is_ipv6();
    vec![
        Expr::Load {
            dreg: REG_1,
            data: expr::ip_bytes(addr),
        },
        Expr::Load {
            dreg: expr::reg32(if v6 { 4 } else { 1 }),
            data: port.to_be_bytes().to_vec(),
        },
        Expr::Nat {
            kind: NatType::Dnat,
            family: if v6 {
                expr::NFPROTO_IPV6
            } else {
                expr::NFPROTO_IPV4
            },
            addr_reg: REG_1,
            port_reg: Some(expr::reg32(if v6 { 4 } else { 1 })),
        },
    ]
}

/// Parses `conditionsV4`/`conditionsV6` written in nft syntax. The suite
/// encodes rules itself, so it understands a subset: `ip saddr|daddr`,
/// `ip6 saddr|daddr` (an address or prefix, optionally after `!=` or `==`)
/// and `[meta] iifname|oifname` (a name, `*` suffix for a prefix). Anything
/// else is code 7 naming `key` and the token.
pub fn parse_nft_conditions(key: &str, conds: &[String], v6: bool) -> Result<Vec<Vec<Expr>>> {
    let tokens: Vec<String> = conds
        .iter()
        .flat_map(|c| c.split_whitespace())
        .map(str::to_string)
        .collect();
    let bad = |what: &str| {
        Error::config(
            key,
            format!(
                "{what} (understood nft conditions: ip/ip6 saddr|daddr [!=] ADDR[/LEN], \
                 [meta] iifname|oifname [!=] NAME)"
            ),
        )
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let mut t = tokens[i].as_str();
        if t == "meta" {
            i += 1;
            t = tokens.get(i).map_or("", String::as_str);
        }
        let take_op = |i: &mut usize| -> CmpOp {
            match tokens.get(*i + 1).map(String::as_str) {
                Some("!=") => {
                    *i += 1;
                    CmpOp::Neq
                }
                Some("==") => {
                    *i += 1;
                    CmpOp::Eq
                }
                _ => CmpOp::Eq,
            }
        };
        match t {
            "ip" | "ip6" => {
                if (t == "ip6") != v6 {
                    return Err(bad(&format!("{t:?} does not match the family of {key}")));
                }
                let field = tokens.get(i + 1).map_or("", String::as_str);
                let source = match field {
                    "saddr" => true,
                    "daddr" => false,
                    other => return Err(bad(&format!("unsupported match \"{t} {other}\""))),
                };
                i += 1;
                let op = take_op(&mut i);
                let value = tokens
                    .get(i + 1)
                    .ok_or_else(|| bad(&format!("\"{t} {field}\" without a value")))?;
                i += 1;
                let (addr, len) = match value.split_once('/') {
                    Some((a, l)) => (a, l.parse::<u8>().ok()),
                    None => (value.as_str(), Some(if v6 { 128 } else { 32 })),
                };
                let addr: IpAddr = addr
                    .parse()
                    .map_err(|_| bad(&format!("{value:?} is not an address or prefix")))?;
                let max = if v6 { 128 } else { 32 };
                let len = len
                    .filter(|l| *l <= max && addr.is_ipv6() == v6)
                    .ok_or_else(|| {
                        bad(&format!(
                            "{value:?} is not an address or prefix of the family"
                        ))
                    })?;
                out.push(expr::match_ip(source, op, addr, len));
            }
            "iifname" | "oifname" => {
                let op = take_op(&mut i);
                let value = tokens
                    .get(i + 1)
                    .ok_or_else(|| bad(&format!("\"{t}\" without a value")))?;
                i += 1;
                let name = value.trim_matches('"');
                if name.is_empty() || name.len() > 15 {
                    return Err(bad(&format!("{value:?} is not an interface name")));
                }
                out.push(expr::match_ifname(t == "iifname", op, name));
            }
            other => return Err(bad(&format!("unsupported condition {other:?}"))),
        }
        i += 1;
    }
    Ok(out)
}

/// The holder of an element, for a conflict message.
fn holder(comment: Option<&str>) -> String {
    match comment {
        Some(c) => format!("another container ({c})"),
        None => "a rule this plugin did not write (no owner comment)".to_string(),
    }
}

/// nftables ADD: the skeleton, this container's elements (replacing its
/// own leftovers), hairpin rules of its subnets, in one batch. A key held
/// by another container fails with [`CONFLICT_CODE`] before any change.
pub fn nft_add(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    let tag = spec.owner.tag();
    // One dump of the table's rules (not of its maps): the skeleton's
    // state, the hairpin rules, this container's conditioned rules.
    let rules = nft.table_rules(F, TABLE)?;
    let mut b = Batch::new();
    if !skeleton_intact(&rules) {
        skeleton(&mut b);
    }
    let mut hairpin_rules: BTreeSet<String> = rules
        .iter()
        .filter(|r| r.chain == "hairpin")
        .filter_map(|r| r.comment.clone())
        .collect();
    let conditioned_own: Vec<u64> = rules
        .iter()
        .filter(|r| r.chain == "conditioned" && r.comment.as_deref() == Some(tag.as_str()))
        .map(|r| r.handle)
        .collect();
    for v6 in [false, true] {
        let Some(container) = spec.container(v6) else {
            continue;
        };
        let key = if v6 { "conditionsV6" } else { "conditionsV4" };
        let conds = parse_nft_conditions(key, spec.conditions.of(v6), v6)?;
        let mappings = spec.family_mappings(v6);
        if mappings.is_empty() {
            continue;
        }
        for m in &mappings {
            let (map, key) = map_key(m, v6);
            if let Some(existing) = nft.get_elem(F, TABLE, map, &key)? {
                if existing.comment.as_deref() != Some(tag.as_str()) {
                    return Err(conflict_error(m, &holder(existing.comment.as_deref())));
                }
                b.del_elems(F, TABLE, map, &[existing], "this container's old mapping");
            }
            if !conds.is_empty() {
                let r = conditioned_rule(m, container.addr(), &conds);
                b.add_rule(F, TABLE, "conditioned", &r, Some(&tag));
                continue;
            }
            let elem = Elem {
                key,
                data: Some(ElemData::Value(map_data(
                    container.addr(),
                    m.container_port,
                ))),
                comment: Some(tag.clone()),
            };
            b.add_elems(F, TABLE, map, &[elem], true, &format!("mapping {m}"));
        }
        if spec.snat && spec.masq_all {
            let set = masq_all_set(v6);
            let key = addr_field(container.addr());
            if let Some(existing) = nft.get_elem(F, TABLE, set, &key)? {
                b.del_elems(F, TABLE, set, &[existing], "the old masqAll entry");
            }
            let elem = Elem {
                key,
                data: None,
                comment: Some(tag.clone()),
            };
            b.add_elems(F, TABLE, set, &[elem], false, "masqAll entry");
        }
        if spec.snat {
            let subnet = container.truncate();
            let comment = hairpin_comment(&subnet);
            if hairpin_rules.insert(comment.clone()) {
                b.add_rule(F, TABLE, "hairpin", &hairpin_rule(&subnet), Some(&comment));
            }
        }
    }
    // Rules of an earlier ADD of this container with conditions go, before
    // the new ones are added.
    if !conditioned_own.is_empty() {
        let mut first = Batch::new();
        for h in conditioned_own {
            first.del_rule(F, TABLE, "conditioned", h);
        }
        first.extend(b);
        b = first;
    }
    match nft.commit(&b) {
        // A concurrent ADD took a key between our lookup and the commit.
        Err(e) if crate::netlink::is_exists(&e) => Err(Error::Conflict(format!(
            "runtimeConfig.portMappings: a host port was mapped meanwhile: {e}"
        ))),
        other => other,
    }
}

/// The sets holding containers' elements.
const OWNED_SETS: [&str; 6] = [
    "hostports4",
    "hostip_hostports4",
    "hostports6",
    "hostip_hostports6",
    "masq_all4",
    "masq_all6",
];

/// A removed host port: (IPv6, IP protocol number, port).
pub type RemovedPort = (bool, u8, u16);

/// The host ports of removed map elements (the key ends in proto . port).
fn removed_ports(gone: &[(String, Elem)]) -> Vec<RemovedPort> {
    gone.iter()
        .filter(|(set, _)| set.starts_with("host"))
        .filter_map(|(set, e)| {
            let n = e.key.len();
            let proto = *e.key.get(n.checked_sub(8)?)?;
            let port = u16::from_be_bytes([*e.key.get(n - 4)?, *e.key.get(n - 3)?]);
            Some((set.ends_with('6'), proto, port))
        })
        .collect()
}

/// nftables DEL: removes every element and rule tagged with `owner`, by
/// reading the maps (no mapping needs to be known). Returns the host ports
/// that were mapped (rules of conditioned networks are not included).
pub fn nft_del(nft: &mut Nft, owner: &Owner) -> Result<Vec<RemovedPort>> {
    let tag = owner.tag();
    let (gone, _) = nft.delete_tagged(F, TABLE, &OWNED_SETS, &["conditioned"], &|c| c == tag)?;
    Ok(removed_ports(&gone))
}

/// nftables DEL when the mappings are known (the runtime passes the ADD's
/// `runtimeConfig` and `prevResult` to DEL): looks up exactly this
/// container's keys instead of reading the maps, so its cost does not grow
/// with other containers' mappings. Elements whose comment is another
/// owner's are left alone. Conditioned rules and masqAll entries are found
/// as in [`nft_del`].
pub fn nft_del_known(nft: &mut Nft, spec: &PortMapSpec) -> Result<Vec<RemovedPort>> {
    let tag = spec.owner.tag();
    const ATTEMPTS: usize = 3;
    let mut attempt = 1;
    loop {
        let mut b = Batch::new();
        let mut removed = Vec::new();
        for v6 in [false, true] {
            let Some(container) = spec.container(v6) else {
                continue;
            };
            for m in spec.family_mappings(v6) {
                let (map, key) = map_key(&m, v6);
                if let Some(e) = nft.get_elem(F, TABLE, map, &key)? {
                    if e.comment.as_deref() == Some(tag.as_str()) {
                        b.del_elems(F, TABLE, map, &[e], &format!("mapping {m}"));
                        removed.push((v6, m.protocol.number(), m.host_port));
                    }
                }
            }
            let set = masq_all_set(v6);
            if let Some(e) = nft.get_elem(F, TABLE, set, &addr_field(container.addr()))? {
                if e.comment.as_deref() == Some(tag.as_str()) {
                    b.del_elems(F, TABLE, set, &[e], "masqAll entry");
                }
            }
        }
        let conditioned = !spec.conditions.v4.is_empty() || !spec.conditions.v6.is_empty();
        if conditioned {
            for r in nft.rules(F, TABLE, "conditioned")? {
                if r.comment.as_deref() == Some(tag.as_str()) {
                    b.del_rule(F, TABLE, "conditioned", r.handle);
                }
            }
        }
        match nft.commit(&b) {
            Ok(()) => return Ok(removed),
            Err(e) if crate::netlink::is_not_found(&e) && attempt < ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// nftables GC: removes the elements and rules of containers of `network`
/// that are not in `valid`; returns the host ports that were mapped.
pub fn nft_gc(nft: &mut Nft, network: &str, valid: &[Attachment]) -> Result<Vec<RemovedPort>> {
    let (gone, _) = nft.delete_tagged(F, TABLE, &OWNED_SETS, &["conditioned"], &|c| {
        Owner::is_stale_tag(c, network, valid)
    })?;
    Ok(removed_ports(&gone))
}

/// nftables CHECK: every mapping is in its map with this container's
/// address and tag, and the shared chains have their rules.
pub fn nft_check(nft: &mut Nft, spec: &PortMapSpec) -> Result<()> {
    let tag = spec.owner.tag();
    let failed = |what: String| Error::CheckFailed(format!("portmap: {what}"));
    for (chain, want) in [
        ("prerouting", 1),
        ("output", 1),
        ("hostports", 5),
        ("postrouting", 5),
    ] {
        let have = nft.rules(F, TABLE, chain)?.len();
        if have < want {
            return Err(failed(format!(
                "chain inet {TABLE} {chain} has {have} rules, expected {want}"
            )));
        }
    }
    let mut conditioned: Option<usize> = None;
    for v6 in [false, true] {
        let Some(container) = spec.container(v6) else {
            continue;
        };
        let conds = spec.conditions.of(v6);
        for m in spec.family_mappings(v6) {
            if !conds.is_empty() {
                let n = match conditioned {
                    Some(n) => n,
                    None => {
                        let n = nft
                            .rules(F, TABLE, "conditioned")?
                            .iter()
                            .filter(|r| r.comment.as_deref() == Some(tag.as_str()))
                            .count();
                        conditioned = Some(n);
                        n
                    }
                };
                if n == 0 {
                    return Err(failed(format!(
                        "mapping {m} has no rule in chain conditioned"
                    )));
                }
                continue;
            }
            let (map, key) = map_key(&m, v6);
            let want = ElemData::Value(map_data(container.addr(), m.container_port));
            match nft.get_elem(F, TABLE, map, &key)? {
                None => return Err(failed(format!("mapping {m} is missing from map {map}"))),
                Some(e) if e.comment.as_deref() != Some(tag.as_str()) => {
                    return Err(failed(format!(
                        "mapping {m} in map {map} belongs to {}",
                        holder(e.comment.as_deref())
                    )))
                }
                Some(e) if e.data.as_ref() != Some(&want) => {
                    return Err(failed(format!(
                        "mapping {m} in map {map} does not point to {}",
                        container.addr()
                    )))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
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
    super::go_chain_name("DN-", &owner.network, &owner.container_id)
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
    let Some(container) = spec.container(v6) else {
        return Ok(());
    };
    if spec.mappings.is_empty() {
        return Ok(());
    }
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
    let mut r = Restore::new(IptTable::Nat);
    let setmark = match &spec.external_set_mark_chain {
        Some(c) => c.clone(),
        None => IPT_SETMARK_CHAIN.to_string(),
    };
    if spec.snat && spec.external_set_mark_chain.is_none() {
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
    iptables::restore(fam, &r)
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
            super::go_chain_name("SN-", &owner.network, &owner.container_id),
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
    let mut done = BTreeSet::new();
    for line in saved.rules_of(IPT_DNAT_CHAIN) {
        let Some(comment) = iptables::rule_comment(line) else {
            continue;
        };
        let Some(tag) = comment.strip_prefix("dnat ") else {
            continue;
        };
        let Some((net, cid)) = super::parse_go_comment(tag) else {
            continue;
        };
        if net != network || valid.iter().any(|a| a.container_id == cid) {
            continue;
        }
        let owner = Owner::new(net, cid);
        if done.insert(cid.to_string()) {
            ipt_remove_container(&saved, &mut r, &owner);
        }
    }
    iptables::restore(fam, &r)
}

/// iptables CHECK for one family: the container's chain exists and holds
/// the DNAT rule of every mapping.
pub fn ipt_check(spec: &PortMapSpec, v6: bool) -> Result<()> {
    let Some(container) = spec.container(v6) else {
        return Ok(());
    };
    let fam = IptFamily::of_v6(v6);
    let saved = iptables::save(fam, IptTable::Nat)?;
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
