//! Rule lines to expressions, as iptables-nft 1.8 encodes them (the unit
//! tests compare, byte for byte, with the rules `iptables` itself writes).
//!
//! `-i`/`-o` a `meta iifname|oifname` compare of the name with its NUL
//! (`!` a not-equal one); `-p` a `meta l4proto` compare; `-s`/`-d` a
//! payload load of the address (only the prefix's bytes when it ends on a
//! byte, else masked) and an equal compare, `! -s`/`! -d` a not-equal
//! one; `-m tcp|udp --dport` a transport payload load and compare; `-m
//! mark --mark v/m` a `meta mark` load, mask and compare; `-m comment`,
//! `-m conntrack`, `-m multiport`, `-m addrtype`, `-m sctp` xtables matches
//! through `nft_compat`; a `counter`; the verdict, or the xtables targets
//! `DNAT` (rev 2), `MARK` (rev 2) and `MASQUERADE` (rev 0). The rule's
//! `-p` also goes into `NFTA_RULE_COMPAT`, which `-m multiport` requires.

use std::net::IpAddr;

use super::comment_info;
use crate::netfilter::iptables;
use crate::netfilter::nft::expr::{self, CmpOp, Expr, MetaKey, Verdict, REG_1};
use crate::IpFamily;

/// `XT_CONNTRACK_STATE`: `match_flags` of `--ctstate`.
const XT_CONNTRACK_STATE: u16 = 1;
/// `--ctstate RELATED,ESTABLISHED`: `XT_CONNTRACK_STATE_BIT` of
/// `IP_CT_ESTABLISHED` (1 << 1) and `IP_CT_RELATED` (1 << 2).
const CTSTATE_RELATED_ESTABLISHED: u16 = 0x2 | 0x4;
/// `sizeof(struct xt_conntrack_mtinfo3)` (164), aligned to 8 (`XT_ALIGN`).
const CONNTRACK_INFO_LEN: usize = 168;
/// Offsets of `match_flags` and `state_mask` in `xt_conntrack_mtinfo3`.
const CONNTRACK_MATCH_FLAGS: usize = 146;
const CONNTRACK_STATE_MASK: usize = 150;

/// `-m conntrack --ctstate RELATED,ESTABLISHED`'s info.
pub(super) fn conntrack_info() -> Vec<u8> {
    let mut info = vec![0u8; CONNTRACK_INFO_LEN];
    info[CONNTRACK_MATCH_FLAGS..CONNTRACK_MATCH_FLAGS + 2]
        .copy_from_slice(&XT_CONNTRACK_STATE.to_ne_bytes());
    info[CONNTRACK_STATE_MASK..CONNTRACK_STATE_MASK + 2]
        .copy_from_slice(&CTSTATE_RELATED_ESTABLISHED.to_ne_bytes());
    info
}

/// `sizeof(struct xt_multiport_v1)`: flags, count, ports[15], pflags[15],
/// invert.
pub(super) const MULTIPORT_LEN: usize = 48;
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

pub(super) fn addr_field(family: IpFamily, source: bool) -> (u32, u32) {
    crate::netfilter::nft::expr::ip_addr_offset(family, source)
}

pub(super) fn proto_number(name: &str) -> Option<u8> {
    crate::netfilter::Protocol::parse(name).map(crate::netfilter::Protocol::number)
}

pub(super) fn proto_name(n: u8) -> Option<&'static str> {
    match n {
        6 => Some("tcp"),
        17 => Some("udp"),
        132 => Some("sctp"),
        _ => None,
    }
}

pub(super) fn multiport_info(ports: &[u16]) -> Vec<u8> {
    let mut info = vec![0u8; MULTIPORT_LEN];
    info[0] = XT_MULTIPORT_DESTINATION;
    info[1] = ports.len() as u8;
    for (i, p) in ports.iter().enumerate() {
        info[2 + 2 * i..4 + 2 * i].copy_from_slice(&p.to_ne_bytes());
    }
    info
}

pub(super) fn addrtype_local_info() -> Vec<u8> {
    let mut info = vec![0u8; ADDRTYPE_LEN];
    info[2..4].copy_from_slice(&ADDRTYPE_LOCAL.to_ne_bytes());
    info
}

pub(super) fn sctp_info(port: u16) -> Vec<u8> {
    let mut info = vec![0u8; SCTP_LEN];
    info[0..2].copy_from_slice(&port.to_ne_bytes());
    info[2..4].copy_from_slice(&port.to_ne_bytes());
    for i in 0..4 {
        info[SCTP_FLAG_INFO + 3 * i] = 0xff;
    }
    info[SCTP_FLAGS..SCTP_FLAGS + 4].copy_from_slice(&XT_SCTP_DEST_PORTS.to_ne_bytes());
    info
}

pub(super) fn dnat_info(addr: IpAddr, port: u16) -> Vec<u8> {
    let mut info = vec![0u8; NAT_RANGE2_LEN];
    info[0..4].copy_from_slice(&NAT_MAP_IPS_PROTO.to_ne_bytes());
    let a = crate::netfilter::nft::expr::ip_bytes(addr);
    info[4..4 + a.len()].copy_from_slice(&a);
    info[20..20 + a.len()].copy_from_slice(&a);
    info[36..38].copy_from_slice(&port.to_be_bytes());
    info[38..40].copy_from_slice(&port.to_be_bytes());
    info
}

pub(super) fn masq_info(family: IpFamily) -> Vec<u8> {
    if family == IpFamily::V6 {
        vec![0u8; MASQ_V6_LEN]
    } else {
        let mut info = vec![0u8; MASQ_V4_LEN];
        info[0..4].copy_from_slice(&1u32.to_ne_bytes());
        info
    }
}

pub(super) fn mark_info(value: u32, mask: u32) -> Vec<u8> {
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

/// The expressions of a rule line (`-A CHAIN ...`) of the shapes our
/// plugins write, in iptables-nft's order (interfaces, `-p`, addresses,
/// matches, the counter, the target); `None` for anything else.
pub fn encode(line: &str, family: IpFamily) -> Option<Encoded> {
    let tokens = iptables::split_tokens(line);
    let mut it = tokens.iter().map(String::as_str);
    if it.next()? != "-A" {
        return None;
    }
    let chain = it.next()?.to_string();
    let mut proto: u8 = 0;
    let (mut ifaces, mut addrs, mut matches) = (Vec::new(), Vec::new(), Vec::new());
    let mut target = None;
    let mut negate = false;
    while let Some(t) = it.next() {
        if negate && !matches!(t, "-s" | "-d" | "-i" | "-o") {
            return None;
        }
        match t {
            "!" => negate = true,
            "-s" | "-d" => {
                addrs.extend(encode_address(t == "-s", negate, it.next()?, family)?);
                negate = false;
            }
            "-i" | "-o" => {
                ifaces.extend(encode_iface(t == "-i", negate, it.next()?)?);
                negate = false;
            }
            "-p" => proto = proto_number(it.next()?)?,
            "-m" => matches.extend(encode_match(&mut it, proto)?),
            "-j" => target = Some(encode_target(&mut it, family)?),
            _ => return None,
        }
    }
    let mut exprs = ifaces;
    if proto != 0 {
        exprs.extend(expr::match_l4proto(proto));
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

/// `[!] -i|-o NAME` (`input` for `-i`): the name with its NUL, compared
/// whole (`nft` pads it to 16 bytes instead: [`expr::match_ifname`]).
/// Wildcards (`br+`) are not a shape we write.
fn encode_iface(input: bool, negate: bool, name: &str) -> Option<Vec<Expr>> {
    if name.ends_with('+') || name.is_empty() || name.len() > 15 {
        return None;
    }
    let mut data = name.as_bytes().to_vec();
    data.push(0);
    let key = if input {
        MetaKey::IifName
    } else {
        MetaKey::OifName
    };
    let op = if negate { CmpOp::Neq } else { CmpOp::Eq };
    Some(vec![
        Expr::Meta { key, dreg: REG_1 },
        Expr::Cmp {
            sreg: REG_1,
            op,
            data,
        },
    ])
}

/// `[!] -s|-d ADDR/LEN` (`source` for `-s`): a prefix match, or nothing
/// for `/0` (which iptables-nft does not encode); `! .../0` matches
/// nothing and is refused.
fn encode_address(source: bool, negate: bool, cidr: &str, family: IpFamily) -> Option<Vec<Expr>> {
    let (host, len) = cidr.split_once('/')?;
    let a: IpAddr = host.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    if IpFamily::of(&a) != family || u32::from(len) > addr_field(family, true).1 * 8 {
        return None;
    }
    if len == 0 {
        return (!negate).then(Vec::new);
    }
    let op = if negate { CmpOp::Neq } else { CmpOp::Eq };
    Some(crate::netfilter::nft::expr::match_prefix_nft(
        source, op, a, len,
    ))
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
            expr::match_dport(it.next()?.parse().ok()?)
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
        "conntrack" => {
            if it.next()? != "--ctstate" || it.next()? != "RELATED,ESTABLISHED" {
                return None;
            }
            vec![xt("conntrack", 3, conntrack_info())]
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
            // iptables-nft leaves out the mask when it is all ones.
            expr::match_mark((mask != u32::MAX).then_some(mask), CmpOp::Eq, value)
        }
        _ => return None,
    })
}

/// The target after `-j`: a verdict, a jump to a chain, or the xtables
/// `MASQUERADE`, `DNAT` and `MARK` targets with their options.
fn encode_target<'a>(it: &mut impl Iterator<Item = &'a str>, family: IpFamily) -> Option<Expr> {
    let xt = |name: &str, rev: u32, info: Vec<u8>| Expr::Target {
        name: name.into(),
        rev,
        info,
    };
    Some(match it.next()? {
        "ACCEPT" => Expr::Immediate(Verdict::Accept),
        "DROP" => Expr::Immediate(Verdict::Drop),
        "RETURN" => Expr::Immediate(Verdict::Return),
        "MASQUERADE" => xt("MASQUERADE", 0, masq_info(family)),
        "DNAT" => {
            if it.next()? != "--to-destination" {
                return None;
            }
            let (host, port) = it.next()?.rsplit_once(':')?;
            let host = if family == IpFamily::V6 {
                host.strip_prefix('[')?.strip_suffix(']')?
            } else {
                host
            };
            let a: IpAddr = host.parse().ok()?;
            if IpFamily::of(&a) != family {
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
