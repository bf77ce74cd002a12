//! nf_tables expressions: the instructions of a rule, encoded as the
//! kernel's `NFTA_EXPR_*` attributes. Only what the suite's rules use:
//! meta, payload, cmp, bitwise, lookup, immediate (verdicts), nat, masq,
//! fib, ct and counter. Helpers at the end build the common matches
//! (`ip saddr 10.0.0.0/8`, `meta nfproto ipv4`, `ct status dnat`, ...) the
//! way `nft` does, so `nft list ruleset` prints them back as such.

use std::net::IpAddr;

use crate::netfilter::wire::Attrs;
use crate::IpFamily;

const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;

/// The verdict register.
pub const REG_VERDICT: u32 = 0;
/// The first 16-byte register (`NFT_REG_1`), the same storage as
/// [`reg32`]`(0)`.
pub const REG_1: u32 = 1;

/// The second 16-byte register (`NFT_REG_2`): where `nft` puts a NAT port.
pub const REG_2: u32 = 2;

/// The 32-bit register `n` (`NFT_REG32_00 + n`); concatenations put each
/// field in its own 32-bit slots.
pub const fn reg32(n: u32) -> u32 {
    8 + n
}

/// `NFT_META_*` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum MetaKey {
    Mark = 3,
    Iif = 4,
    Oif = 5,
    IifName = 6,
    OifName = 7,
    NfProto = 15,
    L4Proto = 16,
}

/// `NFT_PAYLOAD_*` bases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum PayloadBase {
    LinkLayer = 0,
    Network = 1,
    Transport = 2,
}

/// `NFT_CMP_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum CmpOp {
    Eq = 0,
    Neq = 1,
}

/// A verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Drop,
    Return,
    Jump(String),
    Goto(String),
}

impl Verdict {
    fn code(&self) -> i32 {
        match self {
            Verdict::Drop => 0,
            Verdict::Accept => 1,
            Verdict::Jump(_) => -3,
            Verdict::Goto(_) => -4,
            Verdict::Return => -5,
        }
    }

    /// `NFTA_DATA_VERDICT` content.
    pub(crate) fn encode(&self, a: &mut Attrs) {
        a.nest(NFTA_DATA_VERDICT, |v| {
            v.put_be32(NFTA_VERDICT_CODE, self.code() as u32);
            if let Verdict::Jump(c) | Verdict::Goto(c) = self {
                v.put_str(NFTA_VERDICT_CHAIN, c);
            }
        });
    }
}

/// `NFT_NAT_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatType {
    Snat = 0,
    Dnat = 1,
}

/// One expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Load a meta key into `dreg`.
    Meta {
        key: MetaKey,
        dreg: u32,
    },
    /// Load `len` bytes at `offset` of a header into `dreg`.
    Payload {
        base: PayloadBase,
        offset: u32,
        len: u32,
        dreg: u32,
    },
    /// Compare `sreg` with `data`; break the rule when it does not hold.
    Cmp {
        sreg: u32,
        op: CmpOp,
        data: Vec<u8>,
    },
    /// `dreg = (sreg & mask) ^ xor`.
    Bitwise {
        sreg: u32,
        dreg: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// Look `sreg` up in a set; with `dreg`, load the map's data there.
    Lookup {
        set: String,
        set_id: Option<u32>,
        sreg: u32,
        dreg: Option<u32>,
        invert: bool,
    },
    /// Load a verdict (into [`REG_VERDICT`]).
    Immediate(Verdict),
    /// Load a constant into `dreg`.
    Load {
        dreg: u32,
        data: Vec<u8>,
    },
    /// Source or destination NAT to the address (and port) in registers.
    Nat {
        kind: NatType,
        family: u8,
        addr_reg: u32,
        port_reg: Option<u32>,
    },
    /// Masquerade.
    Masq,
    /// `fib daddr type` into `dreg`.
    FibDaddrType {
        dreg: u32,
    },
    /// A fib lookup: `result` (`NFT_FIB_RESULT_*`) of the route found with
    /// `flags` (`NFTA_FIB_F_*`), into `dreg`.
    Fib {
        result: u32,
        flags: u32,
        dreg: u32,
    },
    /// Load a conntrack key (`NFT_CT_*`) into `dreg`.
    Ct {
        key: u32,
        dreg: u32,
    },
    Counter,
    /// An xtables match run by `nft_compat` (what iptables-nft writes for
    /// `-m comment`, `-m conntrack`...): its name, revision and the
    /// match's own info struct.
    Match {
        name: String,
        rev: u32,
        info: Vec<u8>,
    },
    /// An xtables target run by `nft_compat` (iptables-nft's `-j DNAT`,
    /// `-j MASQUERADE`, `-j MARK`): its name, revision and info struct.
    Target {
        name: String,
        rev: u32,
        info: Vec<u8>,
    },
}

/// `NFT_CT_STATE`.
pub const CT_STATE: u32 = 0;
/// `NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED)`.
pub const CT_STATE_ESTABLISHED_RELATED: u32 = 0x2 | 0x4;
/// `NFT_CT_STATUS`.
pub const CT_STATUS: u32 = 2;
/// `IPS_DST_NAT`: the connection was destination-NATed.
pub const IPS_DST_NAT: u32 = 1 << 5;
/// `RTN_LOCAL`: fib address type of a local address.
pub const RTN_LOCAL: u32 = 2;

impl Expr {
    /// The kernel's name of the expression (`"payload"`, `"cmp"`, ...), as
    /// [`super::RuleInfo::exprs`] reads it back.
    pub fn kind(&self) -> &'static str {
        self.name()
    }

    fn name(&self) -> &'static str {
        match self {
            Expr::Meta { .. } => "meta",
            Expr::Payload { .. } => "payload",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Lookup { .. } => "lookup",
            Expr::Immediate(_) | Expr::Load { .. } => "immediate",
            Expr::Nat { .. } => "nat",
            Expr::Masq => "masq",
            Expr::FibDaddrType { .. } | Expr::Fib { .. } => "fib",
            Expr::Ct { .. } => "ct",
            Expr::Counter => "counter",
            Expr::Match { .. } => "match",
            Expr::Target { .. } => "target",
        }
    }

    fn encode_data(&self, a: &mut Attrs) {
        let value = |a: &mut Attrs, ty: u16, data: &[u8]| {
            a.nest(ty, |d| {
                d.put(NFTA_DATA_VALUE, data);
            });
        };
        match self {
            Expr::Meta { key, dreg } => {
                a.put_be32(2, *key as u32).put_be32(1, *dreg);
            }
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => {
                a.put_be32(1, *dreg)
                    .put_be32(2, *base as u32)
                    .put_be32(3, *offset)
                    .put_be32(4, *len);
            }
            Expr::Cmp { sreg, op, data } => {
                a.put_be32(1, *sreg).put_be32(2, *op as u32);
                value(a, 3, data);
            }
            Expr::Bitwise {
                sreg,
                dreg,
                mask,
                xor,
            } => {
                a.put_be32(1, *sreg)
                    .put_be32(2, *dreg)
                    .put_be32(3, mask.len() as u32);
                value(a, 4, mask);
                value(a, 5, xor);
            }
            Expr::Lookup {
                set,
                set_id,
                sreg,
                dreg,
                invert,
            } => {
                a.put_str(1, set).put_be32(2, *sreg);
                if let Some(d) = dreg {
                    a.put_be32(3, *d);
                }
                if let Some(id) = set_id {
                    a.put_be32(4, *id);
                }
                if *invert {
                    a.put_be32(5, 1);
                }
            }
            Expr::Immediate(v) => {
                a.put_be32(1, REG_VERDICT);
                a.nest(2, |d| v.encode(d));
            }
            Expr::Load { dreg, data } => {
                a.put_be32(1, *dreg);
                a.nest(2, |d| {
                    d.put(NFTA_DATA_VALUE, data);
                });
            }
            Expr::Nat {
                kind,
                family,
                addr_reg,
                port_reg,
            } => {
                a.put_be32(1, *kind as u32)
                    .put_be32(2, u32::from(*family))
                    .put_be32(3, *addr_reg);
                if let Some(p) = port_reg {
                    a.put_be32(5, *p);
                }
            }
            Expr::Masq => {}
            Expr::Fib {
                result,
                flags,
                dreg,
            } => {
                a.put_be32(1, *dreg)
                    .put_be32(2, *result)
                    .put_be32(3, *flags);
            }
            Expr::FibDaddrType { dreg } => {
                // NFT_FIB_RESULT_ADDRTYPE, NFTA_FIB_F_DADDR.
                a.put_be32(1, *dreg).put_be32(2, 3).put_be32(3, 2);
            }
            Expr::Ct { key, dreg } => {
                a.put_be32(1, *dreg).put_be32(2, *key);
            }
            Expr::Counter => {
                a.put_be64(1, 0).put_be64(2, 0);
            }
            Expr::Match { name, rev, info } | Expr::Target { name, rev, info } => {
                // NFTA_MATCH_* / NFTA_TARGET_*: NAME, REV, INFO.
                a.put_str(1, name).put_be32(2, *rev).put(3, info);
            }
        }
    }

    /// Appends this expression as one `NFTA_LIST_ELEM` of a rule.
    pub(crate) fn encode(&self, list: &mut Attrs) {
        list.nest(NFTA_LIST_ELEM, |e| {
            e.put_str(NFTA_EXPR_NAME, self.name());
            let mut data = Attrs::new();
            self.encode_data(&mut data);
            if !data.bytes().is_empty() {
                e.put(
                    NFTA_EXPR_DATA | crate::netfilter::wire::NLA_F_NESTED,
                    data.bytes(),
                );
            }
        });
    }
}

/// `NFPROTO_*` values (`meta nfproto`, nat family).
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;

/// `meta nfproto ipv4|ipv6`: the guard an `inet` table needs before it
/// reads an IP header field.
pub fn match_nfproto(family: IpFamily) -> Vec<Expr> {
    vec![
        Expr::Meta {
            key: MetaKey::NfProto,
            dreg: REG_1,
        },
        Expr::Cmp {
            sreg: REG_1,
            op: CmpOp::Eq,
            data: vec![family.nfproto()],
        },
    ]
}

/// Offset of the source (or destination) address in the IPv4/IPv6 header.
pub fn ip_addr_offset(family: IpFamily, source: bool) -> (u32, u32) {
    match (family, source) {
        (IpFamily::V4, true) => (12, 4),
        (IpFamily::V4, false) => (16, 4),
        (IpFamily::V6, true) => (8, 16),
        (IpFamily::V6, false) => (24, 16),
    }
}

/// `ip saddr|daddr [!=] addr/len` (`ip6` for IPv6 addresses).
pub fn match_ip(source: bool, op: CmpOp, addr: IpAddr, prefix_len: u8) -> Vec<Expr> {
    let (offset, len) = ip_addr_offset(IpFamily::of(&addr), source);
    let bytes = ip_bytes(addr);
    let width = bytes.len() as u32 * 8;
    let mut out = vec![Expr::Payload {
        base: PayloadBase::Network,
        offset,
        len,
        dreg: REG_1,
    }];
    let plen = u32::from(prefix_len).min(width);
    if plen == width {
        out.push(Expr::Cmp {
            sreg: REG_1,
            op,
            data: bytes,
        });
        return out;
    }
    let mask = prefix_mask(bytes.len(), plen);
    let net: Vec<u8> = bytes.iter().zip(&mask).map(|(b, m)| b & m).collect();
    // nft loads only the bytes the prefix covers when it ends on a byte
    // boundary; the full-width bitwise form is what it prints back as a
    // prefix in every case.
    out.push(Expr::Bitwise {
        sreg: REG_1,
        dreg: REG_1,
        mask,
        xor: vec![0; bytes.len()],
    });
    out.push(Expr::Cmp {
        sreg: REG_1,
        op,
        data: net,
    });
    out
}

/// `ct status dnat`.
pub fn match_ct_status_dnat() -> Vec<Expr> {
    match_ct_bits(CT_STATUS, IPS_DST_NAT)
}

/// `ct state established,related`.
pub fn match_ct_state_established() -> Vec<Expr> {
    match_ct_bits(CT_STATE, CT_STATE_ESTABLISHED_RELATED)
}

/// Conntrack key `key` has one of the bits of `mask` set.
fn match_ct_bits(key: u32, mask: u32) -> Vec<Expr> {
    vec![
        Expr::Ct { key, dreg: REG_1 },
        Expr::Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            mask: mask.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        },
        Expr::Cmp {
            sreg: REG_1,
            op: CmpOp::Neq,
            data: vec![0; 4],
        },
    ]
}

/// `ip saddr|daddr @set` (`ip6` for [`IpFamily::V6`]): the address looked up in the
/// set `set`, whose `set_id` names it when the same batch creates it.
pub fn match_ip_in_set(family: IpFamily, source: bool, set: &str, set_id: u32) -> Vec<Expr> {
    let (offset, len) = ip_addr_offset(family, source);
    vec![
        Expr::Payload {
            base: PayloadBase::Network,
            offset,
            len,
            dreg: REG_1,
        },
        Expr::Lookup {
            set: set.to_string(),
            set_id: Some(set_id),
            sreg: REG_1,
            dreg: None,
            invert: false,
        },
    ]
}

/// `fib daddr type local`.
pub fn match_fib_daddr_local() -> Vec<Expr> {
    vec![
        Expr::FibDaddrType { dreg: REG_1 },
        Expr::Cmp {
            sreg: REG_1,
            op: CmpOp::Eq,
            data: RTN_LOCAL.to_ne_bytes().to_vec(),
        },
    ]
}

/// `iifname|oifname [!=] "name"` (a trailing `*` matches a prefix, as in nft).
pub fn match_ifname(input: bool, op: CmpOp, name: &str) -> Vec<Expr> {
    let key = if input {
        MetaKey::IifName
    } else {
        MetaKey::OifName
    };
    let mut out = vec![Expr::Meta { key, dreg: REG_1 }];
    let data = match name.strip_suffix('*') {
        Some(prefix) => prefix.as_bytes().to_vec(),
        None => {
            let mut d = vec![0u8; 16];
            d[..name.len().min(15)].copy_from_slice(&name.as_bytes()[..name.len().min(15)]);
            d
        }
    };
    out.push(Expr::Cmp {
        sreg: REG_1,
        op,
        data,
    });
    out
}

/// `ip saddr|daddr [!=] addr/len` (`ip6` for IPv6) exactly as `nft` 1.0
/// encodes it, so that a rule made here and the same rule made by `nft -f`
/// are the same bytes: a whole address is compared as is; a prefix that
/// ends on a byte boundary loads and compares only its bytes; any other
/// prefix (and `/0`) loads the address and masks it. No `meta nfproto`
/// guard: an `inet` table's caller puts [`match_nfproto`] first.
pub fn match_prefix_nft(source: bool, op: CmpOp, addr: IpAddr, prefix_len: u8) -> Vec<Expr> {
    let (offset, len) = ip_addr_offset(IpFamily::of(&addr), source);
    let bytes = ip_bytes(addr);
    let width = len * 8;
    let plen = u32::from(prefix_len).min(width);
    let mask = prefix_mask(bytes.len(), plen);
    let net: Vec<u8> = bytes.iter().zip(&mask).map(|(b, m)| b & m).collect();
    if plen == width {
        return vec![
            Expr::Payload {
                base: PayloadBase::Network,
                offset,
                len,
                dreg: REG_1,
            },
            Expr::Cmp {
                sreg: REG_1,
                op,
                data: bytes,
            },
        ];
    }
    if plen > 0 && plen % 8 == 0 {
        let n = plen / 8;
        return vec![
            Expr::Payload {
                base: PayloadBase::Network,
                offset,
                len: n,
                dreg: REG_1,
            },
            Expr::Cmp {
                sreg: REG_1,
                op,
                data: net[..n as usize].to_vec(),
            },
        ];
    }
    vec![
        Expr::Payload {
            base: PayloadBase::Network,
            offset,
            len,
            dreg: REG_1,
        },
        Expr::Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            mask,
            xor: vec![0; bytes.len()],
        },
        Expr::Cmp {
            sreg: REG_1,
            op,
            data: net,
        },
    ]
}

/// `tcp|udp|sctp dport PORT` as `nft` encodes it in an `ip`/`ip6` table:
/// `meta l4proto` compared with the protocol, then the transport header's
/// destination port.
pub fn match_l4_dport(proto: u8, port: u16) -> Vec<Expr> {
    let mut exprs = match_l4proto(proto);
    exprs.extend(match_dport(port));
    exprs
}

/// `meta mark [& MASK] OP VALUE` (host byte order, as the kernel keeps
/// the mark); no mask compares the whole mark.
pub fn match_mark(mask: Option<u32>, op: CmpOp, value: u32) -> Vec<Expr> {
    let mut exprs = vec![Expr::Meta {
        key: MetaKey::Mark,
        dreg: REG_1,
    }];
    if let Some(m) = mask {
        exprs.push(Expr::Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            mask: m.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        });
    }
    exprs.push(Expr::Cmp {
        sreg: REG_1,
        op,
        data: value.to_ne_bytes().to_vec(),
    });
    exprs
}

/// `meta l4proto PROTO`.
pub fn match_l4proto(proto: u8) -> Vec<Expr> {
    vec![
        Expr::Meta {
            key: MetaKey::L4Proto,
            dreg: REG_1,
        },
        Expr::Cmp {
            sreg: REG_1,
            op: CmpOp::Eq,
            data: vec![proto],
        },
    ]
}

/// The transport header's destination port (tcp, udp and sctp keep it at
/// the same offset), without the protocol check.
pub fn match_dport(port: u16) -> Vec<Expr> {
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

/// `dnat to ADDR:PORT` (`[ADDR]:PORT` for IPv6) as `nft` encodes it: the
/// address in register 1, the port in register 2.
pub fn dnat_to_nft(addr: IpAddr, port: u16) -> Vec<Expr> {
    vec![
        Expr::Load {
            dreg: REG_1,
            data: ip_bytes(addr),
        },
        Expr::Load {
            dreg: REG_2,
            data: port.to_be_bytes().to_vec(),
        },
        Expr::Nat {
            kind: NatType::Dnat,
            family: if addr.is_ipv6() {
                NFPROTO_IPV6
            } else {
                NFPROTO_IPV4
            },
            addr_reg: REG_1,
            port_reg: Some(REG_2),
        },
    ]
}

/// The address in network byte order.
pub fn ip_bytes(addr: IpAddr) -> Vec<u8> {
    match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn prefix_mask(len: usize, plen: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let bits = plen.saturating_sub(i as u32 * 8).min(8);
            if bits == 0 {
                0
            } else {
                0xffu8 << (8 - bits)
            }
        })
        .collect()
}

/// Pads a concatenation field to whole 32-bit registers, as set keys and
/// registers hold it.
pub fn pad4(mut field: Vec<u8>) -> Vec<u8> {
    field.resize((field.len() + 3) & !3, 0);
    field
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_prefix_masks_cover_the_prefix_bits() {
        assert_eq!(prefix_mask(4, 8), vec![255, 0, 0, 0]);
        assert_eq!(prefix_mask(4, 4), vec![0xf0, 0, 0, 0]);
        assert_eq!(prefix_mask(4, 20), vec![255, 255, 0xf0, 0]);
        let m = match_ip(true, CmpOp::Eq, "10.1.2.3".parse().unwrap(), 16);
        assert_eq!(
            m[2],
            Expr::Cmp {
                sreg: REG_1,
                op: CmpOp::Eq,
                data: vec![10, 1, 0, 0]
            }
        );
        assert_eq!(
            match_ip(false, CmpOp::Eq, "::1".parse().unwrap(), 128).len(),
            2
        );
    }

    #[test]
    fn netfilter_expressions_encode_name_and_data() {
        let mut list = Attrs::new();
        Expr::Masq.encode(&mut list);
        // One LIST_ELEM holding only the name "masq\0" (8 bytes + 4).
        assert_eq!(list.bytes().len(), 4 + 4 + 8);
        let mut list = Attrs::new();
        Expr::Immediate(Verdict::Jump("hostports".into())).encode(&mut list);
        let elem = crate::netfilter::wire::AttrIter::new(list.bytes())
            .next()
            .unwrap();
        let data = elem.nested().find(NFTA_EXPR_DATA).unwrap();
        let verdict = data
            .nested()
            .find(2)
            .unwrap()
            .nested()
            .find(NFTA_DATA_VERDICT)
            .unwrap();
        assert_eq!(
            verdict.nested().find(NFTA_VERDICT_CODE).unwrap().be32(),
            Some(-3i32 as u32)
        );
        assert_eq!(
            verdict.nested().find(NFTA_VERDICT_CHAIN).unwrap().str(),
            "hostports"
        );
    }
}
