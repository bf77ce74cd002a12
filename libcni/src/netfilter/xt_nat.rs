//! iptables-nft's `nat` table (`ip nat`, `ip6 nat`) spoken over netlink:
//! the Go portmap plugin's and ipMasq's iptables rules written and read in
//! the encoding iptables-nft 1.8 itself uses, with no process.
//!
//! As [`super::firewall::native`] does for the filter table: the chains a
//! decision needs are read (their existence, and the rules of a few), each
//! rule of a known shape is rendered to its `iptables-save` line
//! ([`render`]), the iptables backend's own decision code turns that into
//! a change list (the lines of an `iptables-restore`), and the list is
//! encoded back ([`encode`]) into one atomic nf_tables batch. A rule of
//! any other shape renders as a line that matches nothing of ours.
//!
//! Encoding, as iptables-nft 1.8.9 writes it (the unit tests compare the
//! expressions read back with those of the same rules written by
//! `iptables`): `-p` a `meta l4proto` compare; `-s`/`-d` a payload load
//! of the address (only the prefix's bytes when it ends on a byte, else
//! masked) and an equal compare, `! -s`/`! -d` the same with a not-equal
//! one; `-m tcp|udp --dport` a transport payload load and compare;
//! `-m mark --mark v/m` a `meta mark` load, mask and compare; `-m comment`,
//! `-m multiport`, `-m addrtype`, `-m sctp` xtables matches through
//! `nft_compat`; a `counter`; the verdict, or the xtables targets `DNAT`
//! (rev 2), `MARK` (rev 2) and `MASQUERADE` (rev 0). Every rule carries
//! `NFTA_RULE_COMPAT` with its protocol, which `-m multiport` requires.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use super::iptables::{self, IptTable, Restore, SavedTable};
use super::iptables_nft::{be32, comment_info, data_value, family, is_changed, ATTEMPTS};
use super::ledger::Entry;
use super::nft::expr::{CmpOp, Expr, MetaKey, PayloadBase, Verdict, REG_1};
use super::nft::wire::AttrIter;
use super::nft::{BaseChain, Batch, Hook, Nft, RawExpr, RawRule, XtPlacement};
use crate::{Error, Result};

/// iptables-nft's table.
pub const TABLE: &str = "nat";
/// The base chains of iptables-nft's nat table: name, hook, priority.
const BASE_CHAINS: [(&str, Hook, i32); 4] = [
    ("PREROUTING", Hook::Prerouting, -100),
    ("INPUT", Hook::Input, 100),
    ("OUTPUT", Hook::Output, -100),
    ("POSTROUTING", Hook::Postrouting, 100),
];

/// `sizeof(struct xt_multiport_v1)`: flags, count, ports[15], pflags[15],
/// invert.
const MULTIPORT_LEN: usize = 48;
const XT_MULTIPORT_DESTINATION: u8 = 1;
/// `struct xt_addrtype_info_v1`: source, dest (u16), flags (u32).
const ADDRTYPE_LEN: usize = 8;
/// `XT_ADDRTYPE_LOCAL`.
const ADDRTYPE_LOCAL: u16 = 1 << 2;
/// `sizeof(struct xt_sctp_info)` (292: `chunkmap` is 64 words) aligned
/// to 8.
const SCTP_LEN: usize = 296;
/// `XT_SCTP_DEST_PORTS`, at offset 284 (`flags`).
const XT_SCTP_DEST_PORTS: u32 = 2;
const SCTP_FLAGS: usize = 284;
/// `flag_info[4]` (chunktype, flag, flag_mask) at 268: libxt_sctp sets
/// each chunktype to 0xff.
const SCTP_FLAG_INFO: usize = 268;
/// `sizeof(struct nf_nat_range2)` (42) aligned to 8.
const NAT_RANGE2_LEN: usize = 48;
/// `NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED`.
const NAT_MAP_IPS_PROTO: u32 = 1 | 2;
/// MASQUERADE rev 0: `struct nf_nat_ipv4_multi_range_compat` (20, aligned
/// 24) for IPv4, `struct nf_nat_range` (40) for IPv6.
const MASQ_V4_LEN: usize = 24;
const MASQ_V6_LEN: usize = 40;

fn addr_field(v6: bool, source: bool) -> (u32, u32) {
    super::nft::expr::ip_addr_offset(v6, source)
}

fn proto_number(name: &str) -> Option<u8> {
    super::Protocol::parse(name).map(super::Protocol::number)
}

fn proto_name(n: u8) -> Option<&'static str> {
    match n {
        6 => Some("tcp"),
        17 => Some("udp"),
        132 => Some("sctp"),
        _ => None,
    }
}

fn multiport_info(ports: &[u16]) -> Vec<u8> {
    let mut info = vec![0u8; MULTIPORT_LEN];
    info[0] = XT_MULTIPORT_DESTINATION;
    info[1] = ports.len() as u8;
    for (i, p) in ports.iter().enumerate() {
        info[2 + 2 * i..4 + 2 * i].copy_from_slice(&p.to_ne_bytes());
    }
    info
}

fn addrtype_local_info() -> Vec<u8> {
    let mut info = vec![0u8; ADDRTYPE_LEN];
    info[2..4].copy_from_slice(&ADDRTYPE_LOCAL.to_ne_bytes());
    info
}

fn sctp_info(port: u16) -> Vec<u8> {
    let mut info = vec![0u8; SCTP_LEN];
    info[0..2].copy_from_slice(&port.to_ne_bytes());
    info[2..4].copy_from_slice(&port.to_ne_bytes());
    for i in 0..4 {
        info[SCTP_FLAG_INFO + 3 * i] = 0xff;
    }
    info[SCTP_FLAGS..SCTP_FLAGS + 4].copy_from_slice(&XT_SCTP_DEST_PORTS.to_ne_bytes());
    info
}

fn dnat_info(addr: IpAddr, port: u16) -> Vec<u8> {
    let mut info = vec![0u8; NAT_RANGE2_LEN];
    info[0..4].copy_from_slice(&NAT_MAP_IPS_PROTO.to_ne_bytes());
    let a = super::nft::expr::ip_bytes(addr);
    info[4..4 + a.len()].copy_from_slice(&a);
    info[20..20 + a.len()].copy_from_slice(&a);
    info[36..38].copy_from_slice(&port.to_be_bytes());
    info[38..40].copy_from_slice(&port.to_be_bytes());
    info
}

fn masq_info(v6: bool) -> Vec<u8> {
    if v6 {
        vec![0u8; MASQ_V6_LEN]
    } else {
        let mut info = vec![0u8; MASQ_V4_LEN];
        info[0..4].copy_from_slice(&1u32.to_ne_bytes());
        info
    }
}

fn mark_info(value: u32, mask: u32) -> Vec<u8> {
    let mut info = value.to_ne_bytes().to_vec();
    info.extend(mask.to_ne_bytes());
    info
}

fn parse_hex(s: &str) -> Option<u32> {
    u32::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// `v/m` of `--mark` and `--set-xmark`.
fn parse_mark(s: &str) -> Option<(u32, u32)> {
    match s.split_once('/') {
        Some((v, m)) => Some((parse_hex(v)?, parse_hex(m)?)),
        None => Some((parse_hex(s)?, u32::MAX)),
    }
}

/// An encoded rule line: its chain, expressions and `-p` protocol.
pub struct Encoded {
    pub chain: String,
    pub exprs: Vec<Expr>,
    pub proto: u8,
}

/// The expressions of a rule line (`-A CHAIN ...`) of the shapes the
/// portmap plugin writes, in iptables-nft's order; `None` for anything
/// else.
pub fn encode(line: &str, v6: bool) -> Option<Encoded> {
    let tokens = iptables::split_tokens(line);
    let mut it = tokens.iter().map(String::as_str);
    if it.next()? != "-A" {
        return None;
    }
    let chain = it.next()?.to_string();
    let mut proto: u8 = 0;
    let mut addrs = Vec::new();
    let mut matches = Vec::new();
    let mut target = None;
    let mut negate = false;
    while let Some(t) = it.next() {
        if negate && t != "-s" && t != "-d" {
            return None;
        }
        match t {
            "!" => negate = true,
            "-s" | "-d" => {
                addrs.extend(encode_address(t == "-s", negate, it.next()?, v6)?);
                negate = false;
            }
            "-p" => proto = proto_number(it.next()?)?,
            "-m" => matches.extend(encode_match(&mut it, proto)?),
            "-j" => target = Some(encode_target(&mut it, v6)?),
            _ => return None,
        }
    }
    let mut exprs = Vec::new();
    if proto != 0 {
        exprs.push(Expr::Meta {
            key: MetaKey::L4Proto,
            dreg: REG_1,
        });
        exprs.push(Expr::Cmp {
            sreg: REG_1,
            op: CmpOp::Eq,
            data: vec![proto],
        });
    }
    exprs.extend(addrs);
    exprs.extend(matches);
    exprs.push(Expr::Counter);
    exprs.extend(target);
    Some(Encoded {
        chain,
        exprs,
        proto,
    })
}

/// `[!] -s|-d ADDR/LEN` (`source` for `-s`): a prefix match, or nothing
/// for `/0` (which iptables-nft does not encode); `! .../0` matches
/// nothing and is refused.
fn encode_address(source: bool, negate: bool, cidr: &str, v6: bool) -> Option<Vec<Expr>> {
    let (host, len) = cidr.split_once('/')?;
    let a: IpAddr = host.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    if a.is_ipv6() != v6 || u32::from(len) > addr_field(v6, true).1 * 8 {
        return None;
    }
    if len == 0 {
        return (!negate).then(Vec::new);
    }
    let op = if negate { CmpOp::Neq } else { CmpOp::Eq };
    Some(super::nft::expr::match_prefix_nft(source, op, a, len))
}

/// The match after `-m` (its name is the next token), for a rule of
/// protocol `proto`: native payload compares for `tcp`/`udp` ports, the
/// xtables matches iptables-nft keeps (`sctp`, `comment`, `multiport`,
/// `addrtype`), the mark as `meta` + `cmp`.
fn encode_match<'a>(it: &mut impl Iterator<Item = &'a str>, proto: u8) -> Option<Vec<Expr>> {
    let xt = |name: &str, rev: u32, info: Vec<u8>| Expr::Match {
        name: name.into(),
        rev,
        info,
    };
    Some(match it.next()? {
        m @ ("tcp" | "udp") => {
            if proto_number(m)? != proto || it.next()? != "--dport" {
                return None;
            }
            let port: u16 = it.next()?.parse().ok()?;
            vec![
                Expr::Payload {
                    base: PayloadBase::Transport,
                    offset: 2,
                    len: 2,
                    dreg: REG_1,
                },
                Expr::Cmp {
                    sreg: REG_1,
                    op: CmpOp::Eq,
                    data: port.to_be_bytes().to_vec(),
                },
            ]
        }
        "sctp" => {
            if proto != 132 || it.next()? != "--dport" {
                return None;
            }
            vec![xt("sctp", 0, sctp_info(it.next()?.parse().ok()?))]
        }
        "comment" => {
            if it.next()? != "--comment" {
                return None;
            }
            vec![xt("comment", 0, comment_info(it.next()?))]
        }
        "multiport" => {
            if proto == 0 || it.next()? != "--dports" {
                return None;
            }
            let ports: Vec<u16> = it
                .next()?
                .split(',')
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?;
            if ports.is_empty() || ports.len() > 15 {
                return None;
            }
            vec![xt("multiport", 1, multiport_info(&ports))]
        }
        "addrtype" => {
            if it.next()? != "--dst-type" || it.next()? != "LOCAL" {
                return None;
            }
            vec![xt("addrtype", 1, addrtype_local_info())]
        }
        "mark" => {
            if it.next()? != "--mark" {
                return None;
            }
            let (value, mask) = parse_mark(it.next()?)?;
            let mut exprs = vec![Expr::Meta {
                key: MetaKey::Mark,
                dreg: REG_1,
            }];
            if mask != u32::MAX {
                exprs.push(Expr::Bitwise {
                    sreg: REG_1,
                    dreg: REG_1,
                    mask: mask.to_ne_bytes().to_vec(),
                    xor: vec![0; 4],
                });
            }
            exprs.push(Expr::Cmp {
                sreg: REG_1,
                op: CmpOp::Eq,
                data: value.to_ne_bytes().to_vec(),
            });
            exprs
        }
        _ => return None,
    })
}

/// The target after `-j`: a verdict, a jump to a chain, or the xtables
/// `MASQUERADE`, `DNAT` and `MARK` targets with their options.
fn encode_target<'a>(it: &mut impl Iterator<Item = &'a str>, v6: bool) -> Option<Expr> {
    let xt = |name: &str, rev: u32, info: Vec<u8>| Expr::Target {
        name: name.into(),
        rev,
        info,
    };
    Some(match it.next()? {
        "ACCEPT" => Expr::Immediate(Verdict::Accept),
        "DROP" => Expr::Immediate(Verdict::Drop),
        "RETURN" => Expr::Immediate(Verdict::Return),
        "MASQUERADE" => xt("MASQUERADE", 0, masq_info(v6)),
        "DNAT" => {
            if it.next()? != "--to-destination" {
                return None;
            }
            let (host, port) = it.next()?.rsplit_once(':')?;
            let host = if v6 {
                host.strip_prefix('[')?.strip_suffix(']')?
            } else {
                host
            };
            let a: IpAddr = host.parse().ok()?;
            if a.is_ipv6() != v6 {
                return None;
            }
            xt("DNAT", 2, dnat_info(a, port.parse().ok()?))
        }
        "MARK" => {
            if it.next()? != "--set-xmark" {
                return None;
            }
            let (value, mask) = parse_mark(it.next()?)?;
            xt("MARK", 2, mark_info(value, mask))
        }
        t if t.starts_with('-') => return None,
        chain => Expr::Immediate(Verdict::Jump(chain.to_string())),
    })
}

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn ip_of(b: &[u8], v6: bool) -> Option<IpAddr> {
    Some(if v6 {
        <[u8; 16]>::try_from(b.get(..16)?).ok()?.into()
    } else {
        <[u8; 4]>::try_from(b.get(..4)?).ok()?.into()
    })
}

/// The `iptables-save` line of a rule read back, for the shapes
/// [`encode`] writes (and the same rules written by iptables-nft); a line
/// that matches nothing of ours for anything else.
///
/// An unknown rule that ends in a jump still says where it jumps (`-A
/// CHAIN #unrecognised-rule-<handle> -j TARGET`), so that removing a
/// container's chain also removes the jumps to it of shapes we do not
/// write (the Go plugin's with iptables `conditionsV4`), as its DEL does.
pub fn render(rule: &RawRule, v6: bool) -> String {
    render_known(rule, v6).unwrap_or_else(|| {
        let jump = rule.exprs.last().and_then(|e| {
            if e.name != "immediate" {
                return None;
            }
            let v = AttrIter::new(&e.data).find(2)?;
            let verdict = v.nested().find(2)?;
            (verdict.nested().find(1)?.be32()? as i32 == -3)
                .then(|| verdict.nested().find(2).map(|c| c.str()))
                .flatten()
        });
        match jump {
            Some(t) => format!(
                "-A {} #unrecognised-rule-{} -j {t}",
                rule.chain, rule.handle
            ),
            None => format!("-A {} #unrecognised-rule-{}", rule.chain, rule.handle),
        }
    })
}

/// What a rule read back says, in `iptables-save`'s order of parts.
#[derive(Default)]
struct Parts {
    src: Option<String>,
    dst: Option<String>,
    proto: Option<&'static str>,
    matches: Vec<String>,
    target: Option<String>,
}

impl Parts {
    fn line(self, chain: &str) -> String {
        let mut s = format!("-A {chain}");
        for v in [self.src, self.dst].into_iter().flatten() {
            s.push(' ');
            s.push_str(&v);
        }
        if let Some(p) = self.proto {
            s.push_str(&format!(" -p {p}"));
        }
        for m in self.matches {
            s.push(' ');
            s.push_str(&m);
        }
        if let Some(t) = self.target {
            s.push_str(&format!(" -j {t}"));
        }
        s
    }
}

type Exprs<'a> = std::iter::Peekable<std::slice::Iter<'a, RawExpr>>;

/// A rule of the shapes [`encode`] writes, as its `iptables-save` line;
/// `None` for anything else.
fn render_known(rule: &RawRule, v6: bool) -> Option<String> {
    let mut parts = Parts::default();
    let mut exprs = rule.exprs.iter().peekable();
    while let Some(RawExpr { name, data }) = exprs.next() {
        match name.as_str() {
            "meta" => render_meta(data, &mut exprs, &mut parts)?,
            "payload" => render_payload(data, &mut exprs, &mut parts, v6)?,
            "match" => parts.matches.push(render_xt_match(data)?),
            "counter" => {}
            "immediate" => parts.target = Some(render_verdict(data)?),
            "target" => parts.target = Some(render_xt_target(data, v6)?),
            _ => return None,
        }
    }
    Some(parts.line(&rule.chain))
}

/// The `cmp` equality of a meta or payload load: its data.
fn cmp_eq(e: &RawExpr) -> Option<Vec<u8>> {
    if e.name != "cmp" || be32(&e.data, 2)? != CmpOp::Eq as u32 {
        return None;
    }
    data_value(&e.data, 3)
}

/// `meta l4proto` (the `-p` protocol) or `meta mark` (`-m mark`), with the
/// expressions that follow it.
fn render_meta(data: &[u8], exprs: &mut Exprs<'_>, parts: &mut Parts) -> Option<()> {
    let key = be32(data, 2)?;
    let mut next = exprs.next()?;
    if key == MetaKey::L4Proto as u32 {
        let v = cmp_eq(next)?;
        parts.proto = Some(proto_name(*v.first().filter(|_| v.len() == 1)?)?);
        return Some(());
    }
    if key != MetaKey::Mark as u32 {
        return None;
    }
    let mut mask = u32::MAX;
    if next.name == "bitwise" {
        mask = ne_u32(&data_value(&next.data, 4)?, 0)?;
        if data_value(&next.data, 5)? != [0; 4] {
            return None;
        }
        next = exprs.next()?;
    }
    let value = ne_u32(&cmp_eq(next)?, 0)?;
    parts.matches.push(if mask == u32::MAX {
        format!("-m mark --mark {value:#x}")
    } else {
        format!("-m mark --mark {value:#x}/{mask:#x}")
    });
    Some(())
}

/// A payload load: the tcp/udp destination port (`-m tcp --dport`), or
/// the source or destination address with its prefix (`[!] -s|-d`).
fn render_payload(data: &[u8], exprs: &mut Exprs<'_>, parts: &mut Parts, v6: bool) -> Option<()> {
    let (base, offset, len) = (be32(data, 2)?, be32(data, 3)?, be32(data, 4)?);
    let mut next = exprs.next()?;
    if base == PayloadBase::Transport as u32 {
        let p = parts.proto.filter(|p| *p == "tcp" || *p == "udp")?;
        if (offset, len) != (2, 2) {
            return None;
        }
        let port = u16::from_be_bytes(cmp_eq(next)?.as_slice().try_into().ok()?);
        parts.matches.push(format!("-m {p} --dport {port}"));
        return Some(());
    }
    if base != PayloadBase::Network as u32 {
        return None;
    }
    let source = if (offset, addr_field(v6, true).1) == addr_field(v6, true) {
        true
    } else if (offset, addr_field(v6, false).1) == addr_field(v6, false) {
        false
    } else {
        return None;
    };
    let full = addr_field(v6, true).1;
    let mut mask_len = len * 8;
    if next.name == "bitwise" {
        mask_len = data_value(&next.data, 4)?
            .iter()
            .map(|b| b.count_ones())
            .sum();
        next = exprs.next()?;
    }
    if next.name != "cmp" || len > full {
        return None;
    }
    let neg = match be32(&next.data, 2)? {
        op if op == CmpOp::Eq as u32 => "",
        op if op == CmpOp::Neq as u32 => "! ",
        _ => return None,
    };
    let mut v = data_value(&next.data, 3)?;
    v.resize(full as usize, 0);
    let a = ip_of(&v, v6)?;
    let s = format!("{neg}{} {a}/{mask_len}", if source { "-s" } else { "-d" });
    if source {
        parts.src = Some(s);
    } else {
        parts.dst = Some(s);
    }
    Some(())
}

/// An xtables match kept through `nft_compat`, as its `-m` text.
fn render_xt_match(data: &[u8]) -> Option<String> {
    let a = AttrIter::new(data);
    let name = a.clone().find(1)?.str();
    let rev = a.clone().find(2)?.be32()?;
    let info = a.clone().find(3)?.data;
    Some(match (name.as_str(), rev) {
        ("comment", 0) => {
            let end = info.iter().position(|&b| b == 0).unwrap_or(info.len());
            let c = String::from_utf8(info[..end].to_vec()).ok()?;
            format!("-m comment --comment {}", iptables::quote(&c))
        }
        ("multiport", 1) => {
            let n = usize::from(*info.get(1)?);
            if info.len() != MULTIPORT_LEN || n == 0 || n > 15 {
                return None;
            }
            let ports: Vec<u16> = (0..n)
                .map(|i| ne_u16(info, 2 + 2 * i))
                .collect::<Option<_>>()?;
            if info != multiport_info(&ports).as_slice() {
                return None;
            }
            let list: Vec<String> = ports.iter().map(u16::to_string).collect();
            format!("-m multiport --dports {}", list.join(","))
        }
        ("addrtype", 1) if info == addrtype_local_info().as_slice() => {
            "-m addrtype --dst-type LOCAL".into()
        }
        ("sctp", 0) => {
            let port = ne_u16(info, 0)?;
            if info != sctp_info(port).as_slice() {
                return None;
            }
            format!("-m sctp --dport {port}")
        }
        _ => return None,
    })
}

/// An `immediate` verdict: `ACCEPT`, `DROP`, `RETURN` or a jump's chain.
fn render_verdict(data: &[u8]) -> Option<String> {
    let v = AttrIter::new(data).find(2)?;
    let verdict = v.nested().find(2)?;
    let code = verdict.nested().find(1)?.be32()? as i32;
    Some(match code {
        1 => "ACCEPT".to_string(),
        0 => "DROP".to_string(),
        -5 => "RETURN".to_string(),
        -3 => verdict.nested().find(2)?.str(),
        _ => return None,
    })
}

/// An xtables target kept through `nft_compat`, as its `-j` text.
fn render_xt_target(data: &[u8], v6: bool) -> Option<String> {
    let a = AttrIter::new(data);
    let name = a.clone().find(1)?.str();
    let rev = a.clone().find(2)?.be32()?;
    let info = a.clone().find(3)?.data;
    Some(match (name.as_str(), rev) {
        ("MASQUERADE", 0) if info == masq_info(v6).as_slice() => "MASQUERADE".into(),
        ("MARK", 2) if info.len() == 8 => format!(
            "MARK --set-xmark {:#x}/{:#x}",
            ne_u32(info, 0)?,
            ne_u32(info, 4)?
        ),
        ("DNAT", 2) => {
            let addr = ip_of(info.get(4..)?, v6)?;
            let port = u16::from_be_bytes(info.get(36..38)?.try_into().ok()?);
            if info != dnat_info(addr, port).as_slice() {
                return None;
            }
            if v6 {
                format!("DNAT --to-destination [{addr}]:{port}")
            } else {
                format!("DNAT --to-destination {addr}:{port}")
            }
        }
        _ => return None,
    })
}

/// The (chain, handle) of each rule line read back.
pub type Handles = HashMap<String, Vec<(String, u64)>>;

/// What a decision reads: which chains' existence, and (given the chains
/// found) which chains' rules.
pub struct ReadPlan<'a> {
    pub chains: Vec<String>,
    pub rules_of: &'a (dyn Fn(&BTreeSet<String>) -> Vec<String> + Sync),
}

/// The family's nat table, as far as `plan` asks: a [`SavedTable`] of the
/// chains found (among those asked) and the rule lines of the chains
/// whose rules were asked, with the handle of each line.
pub fn read(nft: &mut Nft, v6: bool, plan: &ReadPlan) -> Result<(SavedTable, Handles)> {
    let fam = family(v6);
    let mut saved = SavedTable::default();
    if !nft.has_table(fam, TABLE)? {
        return Ok((saved, Handles::new()));
    }
    for c in &plan.chains {
        if nft.has_chain(fam, TABLE, c)? {
            saved.chains.insert(c.clone());
        }
    }
    let mut handles = Handles::new();
    for chain in (plan.rules_of)(&saved.chains) {
        if !saved.chains.contains(&chain) {
            continue;
        }
        for rule in nft.rules_raw(fam, TABLE, Some(&chain))? {
            push_rule(&mut saved, &mut handles, &rule, v6);
        }
    }
    Ok((saved, handles))
}

/// Adds a rule read back to `saved` and `handles`.
pub fn push_rule(saved: &mut SavedTable, handles: &mut Handles, rule: &RawRule, v6: bool) {
    let line = render(rule, v6);
    handles
        .entry(line.clone())
        .or_default()
        .push((rule.chain.clone(), rule.handle));
    saved.rules.push(line);
}

/// The rules of `shared` that jump to `target`, as a DEL needs them: the
/// ledger's handles (`entries`, this family's), each read back alone and
/// checked to still jump there; when one is missing or another rule now
/// sits at its handle, or there is no ledger, the whole of `shared`, once
/// (rules the Go plugin wrote, an ADD killed before its ledger).
pub fn jumps_by_ledger(
    nft: &mut Nft,
    v6: bool,
    entries: &[Entry],
    target: &str,
    shared: &str,
) -> Result<Vec<RawRule>> {
    let fam = family(v6);
    let mine: Vec<&Entry> = entries.iter().filter(|e| e.family == fam).collect();
    let mut found = Vec::new();
    for e in &mine {
        match nft.get_rule_raw(fam, TABLE, &e.chain, e.handle)? {
            Some(r) if iptables::rule_target(&render(&r, v6)).as_deref() == Some(target) => {
                found.push(r)
            }
            _ => break,
        }
    }
    if !mine.is_empty() && found.len() == mine.len() {
        Ok(found)
    } else {
        nft.rules_raw(fam, TABLE, Some(shared))
    }
}

/// The batch of a change list against what `read` found, and the batch
/// index of each rule line appended with `echo` (those whose chain `echo`
/// accepts). The table and the base chains the list writes to are created
/// first when missing, as iptables-nft does.
pub fn translate(
    r: &Restore,
    v6: bool,
    saved: &SavedTable,
    handles: &mut Handles,
    echo: &dyn Fn(&str) -> bool,
) -> Result<(Batch, Vec<(usize, String)>)> {
    let fam = family(v6);
    let mut b = Batch::new();
    let mut echoed = Vec::new();
    if r.is_empty() {
        return Ok((b, echoed));
    }
    b.add_table(fam, TABLE);
    let written: BTreeSet<&str> = r
        .lines()
        .iter()
        .filter_map(|l| {
            let mut t = l.split(' ');
            match t.next() {
                Some("-A" | "-I") => t.next(),
                _ => None,
            }
        })
        .collect();
    for (name, hook, priority) in BASE_CHAINS {
        if written.contains(name) && !saved.has_chain(name) {
            b.add_chain(
                fam,
                TABLE,
                name,
                Some(&BaseChain {
                    hook,
                    priority,
                    chain_type: "nat",
                }),
            );
        }
    }
    for c in r.declared() {
        if saved.has_chain(c) {
            b.flush_chain(fam, TABLE, c);
        } else {
            b.add_chain(fam, TABLE, c, None);
        }
    }
    let unsupported = |l: &str| Error::Internal(format!("iptables nat: cannot encode {l:?}"));
    for l in r.lines() {
        let (cmd, rest) = l.split_once(' ').unwrap_or((l.as_str(), ""));
        match cmd {
            "-N" => b.create_chain(fam, TABLE, rest),
            "-F" => b.flush_chain(fam, TABLE, rest),
            "-X" => b.del_chain(fam, TABLE, rest),
            "-A" => {
                let e = encode(l, v6).ok_or_else(|| unsupported(l))?;
                let place = if echo(&e.chain) {
                    XtPlacement::AppendEcho
                } else {
                    XtPlacement::Append
                };
                let i = b.add_rule_xt(fam, TABLE, &e.chain, &e.exprs, e.proto, place);
                if place == XtPlacement::AppendEcho {
                    echoed.push((i, l.clone()));
                }
            }
            "-I" => {
                let (chain, args) = rest.split_once(' ').ok_or_else(|| unsupported(l))?;
                let args = args.strip_prefix("1 ").ok_or_else(|| unsupported(l))?;
                let e = encode(&format!("-A {chain} {args}"), v6).ok_or_else(|| unsupported(l))?;
                b.add_rule_xt(fam, TABLE, chain, &e.exprs, e.proto, XtPlacement::First);
            }
            "-D" => {
                let line = format!("-A {rest}");
                if let Some((chain, h)) = handles.get_mut(&line).and_then(Vec::pop) {
                    b.del_rule(fam, TABLE, &chain, h);
                }
            }
            _ => return Err(unsupported(l)),
        }
    }
    Ok((b, echoed))
}

/// What [`apply`] reads: the table as far as a decision needs it.
pub type Reader<'a> = dyn FnMut(&mut Nft) -> Result<(SavedTable, Handles)> + 'a;

/// One read (`read`), the changes `build` derives from it, one batch
/// (none when there is nothing to change), retried on a fresh read when
/// another process changed the table in between. Returns the rules
/// appended to chains `echo` accepts: (line, chain, handle).
pub fn apply(
    nft: &mut Nft,
    v6: bool,
    read: &mut Reader,
    build: &mut dyn FnMut(&SavedTable, &mut Restore),
    echo: &dyn Fn(&str) -> bool,
) -> Result<Vec<(String, String, u64)>> {
    let mut attempt = 1;
    loop {
        let (saved, mut handles) = read(nft)?;
        let mut r = Restore::new(IptTable::Nat);
        build(&saved, &mut r);
        let (b, echoed) = translate(&r, v6, &saved, &mut handles, echo)?;
        if b.is_empty() {
            return Ok(Vec::new());
        }
        let result = if echoed.is_empty() {
            nft.commit(&b).map(|()| Vec::new())
        } else {
            nft.commit_echo(&b)
        };
        match result {
            Ok(replies) => {
                let mut out = Vec::new();
                for (i, line) in echoed {
                    if let Some((_, info)) = replies.iter().find(|(j, _)| *j == i) {
                        let chain = iptables::rule_chain(&line).unwrap_or_default().to_string();
                        out.push((line, chain, info.handle));
                    }
                }
                return Ok(out);
            }
            Err(e) if attempt < ATTEMPTS && is_changed(&e) => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::testing::run_in;
    use crate::netns::testing::{new_netns, privileged};

    const CHAINS: [&str; 5] = [
        "CNI-HOSTPORT-SETMARK",
        "CNI-HOSTPORT-MASQ",
        "CNI-HOSTPORT-DNAT",
        "CNI-DN-abc",
        "CNI-abc",
    ];

    const V4: [&str; 17] = [
        "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        "-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        "-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ",
        "-A CNI-HOSTPORT-SETMARK -m comment --comment \"CNI portfwd masquerade mark\" -j MARK --set-xmark 0x2000/0x2000",
        "-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
        "-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"n\\\" id: \\\"c\\\"\" -m multiport --dports 8080,8081 -j CNI-DN-abc",
        "-A CNI-HOSTPORT-DNAT -p sctp -m comment --comment x -m multiport --dports 9 -j CNI-DN-abc",
        "-A CNI-DN-abc -s 10.0.0.0/24 -d 1.2.3.4/32 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK",
        "-A CNI-DN-abc -s 10.0.16.0/20 -p udp -m udp --dport 53 -j CNI-HOSTPORT-SETMARK",
        "-A CNI-DN-abc -s 127.0.0.1/32 -p udp -m udp --dport 53 -j CNI-HOSTPORT-SETMARK",
        "-A CNI-DN-abc -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.0.0.5:80",
        "-A CNI-DN-abc -p sctp -m sctp --dport 9 -j DNAT --to-destination 10.0.0.5:90",
        "-A CNI-DN-abc -j RETURN",
        // ipMasq's (the Go plugins' iptables masquerade).
        "-A POSTROUTING -s 10.1.17.5/32 -m comment --comment \"name: \\\"cbr0\\\" id: \\\"c\\\"\" -j CNI-abc",
        "-A CNI-abc -d 10.1.17.0/24 -m comment --comment \"name: \\\"cbr0\\\" id: \\\"c\\\"\" -j ACCEPT",
        "-A CNI-abc ! -d 224.0.0.0/4 -m comment --comment \"name: \\\"cbr0\\\" id: \\\"c\\\"\" -j MASQUERADE",
        "-A CNI-abc ! -s 10.2.0.0/16 -d 10.3.0.0/16 -j ACCEPT",
    ];

    const V6: [&str; 12] = [
        "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        "-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ",
        "-A CNI-HOSTPORT-SETMARK -m comment --comment \"CNI portfwd masquerade mark\" -j MARK --set-xmark 0x2000/0x2000",
        "-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
        "-A CNI-HOSTPORT-DNAT -p udp -m comment --comment x -m multiport --dports 53,54 -j CNI-DN-abc",
        "-A CNI-DN-abc -s fd00::/64 -d fd00::1/128 -p udp -m udp --dport 53 -j CNI-HOSTPORT-SETMARK",
        "-A CNI-DN-abc -s fd00:1:2::/56 -p tcp -m tcp --dport 80 -j CNI-HOSTPORT-SETMARK",
        "-A CNI-DN-abc -p udp -m udp --dport 53 -j DNAT --to-destination [fd00::5]:5353",
        "-A CNI-DN-abc -p sctp -m sctp --dport 9 -j DNAT --to-destination [fd00::5]:90",
        "-A POSTROUTING -s fd00:1::5/128 -m comment --comment x -j CNI-abc",
        "-A CNI-abc -d fd00:1::/64 -m comment --comment x -j ACCEPT",
        "-A CNI-abc ! -d ff00::/8 -m comment --comment x -j MASQUERADE",
    ];

    fn all_chains() -> Vec<String> {
        ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]
            .into_iter()
            .chain(CHAINS)
            .map(str::to_string)
            .collect()
    }

    /// A rule read back: its chain and its expressions (name, data).
    type Raw = (String, Vec<(String, Vec<u8>)>);

    fn raw(nft: &mut Nft, v6: bool) -> Vec<Raw> {
        let mut out = Vec::new();
        for c in all_chains() {
            if !nft.has_chain(family(v6), TABLE, &c).unwrap() {
                continue;
            }
            for r in nft.rules_raw(family(v6), TABLE, Some(&c)).unwrap() {
                let e = r.exprs.into_iter().map(|e| (e.name, e.data)).collect();
                out.push((r.chain, e));
            }
        }
        out
    }

    #[test]
    fn netfilter_xt_nat_encodes_only_its_shapes() {
        for l in V4 {
            assert!(encode(l, false).is_some(), "{l}");
        }
        for l in V6 {
            assert!(encode(l, true).is_some(), "{l}");
        }
        for bad in [
            "-A X -i eth0 -j ACCEPT",
            "-A X -m multiport --dports 1 -j X",
            "-A X -p tcp -m udp --dport 1 -j X",
            "-A X -s fd00::/64 -j ACCEPT",
            "-A X ! -p tcp -j ACCEPT",
            "-A X ! -d 0.0.0.0/0 -j ACCEPT",
            "-A X -m addrtype --dst-type UNICAST -j X",
            "-A X -j SNAT --to-source 1.2.3.4",
            "-N X",
        ] {
            assert!(encode(bad, false).is_none(), "{bad}");
        }
    }

    /// iptables-nft and we write the same expressions, byte for byte, for
    /// every shape; what iptables writes we render as its `iptables-save`
    /// line; what we write `iptables-save` prints and `iptables -D`
    /// deletes.
    #[test]
    fn netfilter_xt_nat_matches_iptables_nft() {
        if !privileged("netfilter_xt_nat_matches_iptables_nft") {
            return;
        }
        for (v6, lines, cmd, save) in [
            (false, &V4[..], "iptables", "iptables-save"),
            (true, &V6[..], "ip6tables", "ip6tables-save"),
        ] {
            let theirs = new_netns();
            for c in CHAINS {
                run_in(&theirs, cmd, &["-t", "nat", "-N", c]);
            }
            for l in lines {
                let mut args = vec!["-t".to_string(), "nat".to_string()];
                args.extend(iptables::split_tokens(l));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                run_in(&theirs, cmd, &args);
            }
            let plan = ReadPlan {
                chains: all_chains(),
                rules_of: &|found| found.iter().cloned().collect(),
            };
            let (saved, _) = theirs
                .run(|| read(&mut Nft::open()?, v6, &plan))
                .unwrap()
                .unwrap();
            let mut got = saved.rules.clone();
            got.sort();
            let mut want: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            want.sort();
            assert_eq!(got, want);

            let ours = new_netns();
            ours.run(|| {
                apply(
                    &mut Nft::open()?,
                    v6,
                    &mut |nft| read(nft, v6, &plan),
                    &mut |saved, r| {
                        for c in CHAINS {
                            if !saved.has_chain(c) {
                                r.create_chain(c);
                            }
                        }
                        for l in lines {
                            r.append(l.to_string());
                        }
                    },
                    &|_| false,
                )
            })
            .unwrap()
            .unwrap();
            let a = theirs.run(|| raw(&mut Nft::open().unwrap(), v6)).unwrap();
            let b = ours.run(|| raw(&mut Nft::open().unwrap(), v6)).unwrap();
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x, y, "v6={v6}");
            }
            let text = run_in(&ours, save, &["-t", "nat"]);
            for l in lines {
                assert!(text.lines().any(|t| t == *l), "{l:?} not in\n{text}");
            }
            for l in lines {
                let mut args = vec!["-t".to_string(), "nat".to_string()];
                args.extend(iptables::split_tokens(l));
                args[2] = "-D".into();
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                run_in(&ours, cmd, &a);
            }
            let text = run_in(&ours, save, &["-t", "nat"]);
            assert!(!text.contains("-A "), "{text}");
        }
    }
}
