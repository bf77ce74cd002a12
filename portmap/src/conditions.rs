//! portmap's `conditionsV4` / `conditionsV6` in nft syntax: the matches
//! real configs put in front of a host port's rule, parsed and encoded the
//! way `nft` encodes the same text (the tests compare the bytes with rules
//! `nft -f` made), since the suite writes rules without `nft`.
//!
//! Understood, in any order and number (the strings are joined with
//! spaces, as the Go plugin joins them into its rule):
//!
//! - `ip|ip6 saddr|daddr [==|!=] ADDR[/LEN]`, or a set
//!   `{ ADDR[/LEN], ... }` (an anonymous set of the rule, as `nft` makes);
//! - `[meta] iifname|oifname [==|!=] NAME` (quoted or not, `*` suffix for a
//!   prefix);
//! - `meta mark [and|& MASK] [==|!=] VALUE` (decimal or 0x hex);
//! - `fib saddr|daddr type [==|!=] TYPE` (`local`, `unicast`,
//!   `broadcast`, `multicast`, `anycast`, `blackhole`, `unreachable`,
//!   `prohibit`, `unspec`).
//!
//! Anything else is refused with code 7, naming the key, the word, and what
//! is understood.

use std::net::IpAddr;

use libcni::netfilter::nft::expr::{self, CmpOp, Expr, REG_1};
use libcni::netfilter::nft::{
    types, Batch, Family, SetSpec, ELEM_INTERVAL_END, SET_ANONYMOUS_CONSTANT, SET_INTERVAL,
};
use libcni::IpFamily;
use libcni::{Error, Result};

/// What the parser understands, for the refusal message.
pub const SUPPORTED: &str = "understood nft conditions: ip/ip6 saddr|daddr [==|!=] ADDR[/LEN] \
     or { ADDR[/LEN], ... }; [meta] iifname|oifname [==|!=] NAME; \
     meta mark [and MASK] [==|!=] VALUE; fib saddr|daddr type [==|!=] TYPE";

/// One parsed condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Expressions as they are.
    Exprs(Vec<Expr>),
    /// An address compared with a set of addresses and prefixes: the
    /// expressions load the address, then the set is looked up.
    AddrSet {
        source: bool,
        family: IpFamily,
        invert: bool,
        /// Merged, sorted, inclusive ranges of addresses (big-endian bytes).
        ranges: Vec<(Vec<u8>, Vec<u8>)>,
        /// Whether every member is a single address (a plain hash set).
        plain: bool,
    },
}

/// Parses one family's condition list (`key` names it in errors).
pub fn parse(key: &str, conds: &[String], family: IpFamily) -> Result<Vec<Condition>> {
    let text = conds.join(" ");
    let mut p = Parser {
        key,
        family,
        tokens: tokenize(&text),
        i: 0,
    };
    let mut out = Vec::new();
    while let Some(t) = p.peek(0).map(str::to_string) {
        let t = t.as_str();
        match t {
            "ip" | "ip6" => out.push(p.address(t)?),
            "meta" if matches!(p.peek(1), Some("iifname" | "oifname")) => p.i += 1,
            "iifname" | "oifname" => out.push(p.ifname(t)?),
            "meta" if p.peek(1) == Some("mark") => out.push(p.mark()?),
            "fib" => out.push(p.fib()?),
            other => return Err(p.bad(format!("unsupported condition {other:?}"))),
        }
    }
    Ok(out)
}

/// The tokens of one family's conditions and where the parse is.
struct Parser<'k> {
    key: &'k str,
    family: IpFamily,
    tokens: Vec<String>,
    i: usize,
}

impl Parser<'_> {
    fn peek(&self, ahead: usize) -> Option<&str> {
        self.tokens.get(self.i + ahead).map(String::as_str)
    }

    /// Code 7 naming the key, what is wrong and what is understood.
    fn bad(&self, what: String) -> Error {
        Error::config(self.key, format!("{what} ({SUPPORTED})"))
    }

    /// The next token, which must be there (`what` names it otherwise).
    fn value(&mut self, what: &str) -> Result<String> {
        let v = self
            .peek(0)
            .ok_or_else(|| self.bad(format!("{what} without a value")))?
            .to_string();
        self.i += 1;
        Ok(v)
    }

    /// An optional `==` / `!=`.
    fn op(&mut self) -> CmpOp {
        match self.peek(0) {
            Some("!=") => {
                self.i += 1;
                CmpOp::Neq
            }
            Some("==") => {
                self.i += 1;
                CmpOp::Eq
            }
            _ => CmpOp::Eq,
        }
    }

    /// `ip|ip6 saddr|daddr [op] ADDR[/LEN]`, or `... { ADDR[/LEN], ... }`.
    fn address(&mut self, t: &str) -> Result<Condition> {
        let family = self.family;
        if (t == "ip6") != (family == IpFamily::V6) {
            return Err(self.bad(format!("{t:?} does not match the family of {}", self.key)));
        }
        let source = match self.peek(1) {
            Some("saddr") => true,
            Some("daddr") => false,
            other => {
                let other = other.unwrap_or("").to_string();
                return Err(self.bad(format!("unsupported match \"{t} {other}\"")));
            }
        };
        self.i += 2;
        let op = self.op();
        let not_of_family =
            |p: &Parser, v: &str| p.bad(format!("{v:?} is not an address or prefix of the family"));
        if self.peek(0) != Some("{") {
            let v = self.value(&format!("\"{t}\""))?;
            let (addr, len) = prefix(&v, family).ok_or_else(|| not_of_family(self, &v))?;
            return Ok(Condition::Exprs(expr::match_prefix_nft(
                source, op, addr, len,
            )));
        }
        let (members, next) = set_members(&self.tokens, self.i)
            .ok_or_else(|| self.bad(format!("unclosed set after \"{t}\"")))?;
        self.i = next;
        let mut ranges = Vec::new();
        let mut plain = true;
        for m in &members {
            let (addr, len) = prefix(m, family).ok_or_else(|| not_of_family(self, m))?;
            plain &= len == family.max_prefix();
            ranges.push(range_of(addr, len));
        }
        if ranges.is_empty() {
            return Err(self.bad("an empty set".to_string()));
        }
        ranges.sort();
        Ok(Condition::AddrSet {
            source,
            family,
            invert: op == CmpOp::Neq,
            ranges: merge(ranges),
            plain,
        })
    }

    /// `iifname|oifname [op] NAME` (quoted or not, `*` for a prefix).
    fn ifname(&mut self, t: &str) -> Result<Condition> {
        self.i += 1;
        let op = self.op();
        let v = self.value(&format!("\"{t}\""))?;
        let name = v.trim_matches('"');
        let bare = name.strip_suffix('*').unwrap_or(name);
        if name.is_empty() || bare.len() > 15 || name.contains(['{', '}', ',']) {
            return Err(self.bad(format!("{v:?} is not an interface name")));
        }
        Ok(Condition::Exprs(expr::match_ifname(
            t == "iifname",
            op,
            name,
        )))
    }

    /// `meta mark [and|& MASK] [op] VALUE`.
    fn mark(&mut self) -> Result<Condition> {
        self.i += 2;
        let mut mask = None;
        if matches!(self.peek(0), Some("and" | "&")) {
            self.i += 1;
            let m = self.value("\"meta mark and\"")?;
            mask = Some(number(&m).ok_or_else(|| self.bad(format!("{m:?} is not a number")))?);
        }
        let op = self.op();
        let v = self.value("\"meta mark\"")?;
        let value = number(&v).ok_or_else(|| self.bad(format!("{v:?} is not a number")))?;
        Ok(Condition::Exprs(expr::match_mark(mask, op, value)))
    }

    /// `fib saddr|daddr type [op] TYPE`.
    fn fib(&mut self) -> Result<Condition> {
        // NFTA_FIB_F_SADDR / DADDR.
        let flags = match self.peek(1) {
            Some("saddr") => 1,
            Some("daddr") => 2,
            other => {
                let other = other.unwrap_or("").to_string();
                return Err(self.bad(format!("unsupported match \"fib {other}\"")));
            }
        };
        self.i += 2;
        if self.peek(0) == Some(".") {
            // The kernel allows `. iif` only from prerouting and `. oif`
            // only from output: the host port rules are reached from both.
            let what = self.peek(1).unwrap_or("").to_string();
            return Err(self.bad(format!(
                "\"fib ... . {what}\" cannot be used: host port rules run in both prerouting and output"
            )));
        }
        if self.peek(0) != Some("type") {
            let what = self.peek(0).unwrap_or("").to_string();
            return Err(self.bad(format!("unsupported fib result {what:?} (only \"type\")")));
        }
        self.i += 1;
        let op = self.op();
        let v = self
            .peek(0)
            .ok_or_else(|| self.bad("\"fib ... type\" without a type".into()))?
            .to_string();
        let rtn = route_type(&v).ok_or_else(|| self.bad(format!("{v:?} is not a route type")))?;
        self.i += 1;
        Ok(Condition::Exprs(vec![
            Expr::Fib {
                result: 3, // NFT_FIB_RESULT_ADDRTYPE
                flags,
                dreg: REG_1,
            },
            Expr::Cmp {
                sreg: REG_1,
                op,
                data: rtn.to_ne_bytes().to_vec(),
            },
        ]))
    }
}

/// The expressions of `conds` for one rule, declaring in `b` the anonymous
/// sets they need (ids from `next_id`, unique in the batch).
pub fn emit(
    conds: &[Condition],
    b: &mut Batch,
    nft_family: Family,
    table: &str,
    next_id: &mut u32,
) -> Vec<Expr> {
    let mut out = Vec::new();
    for c in conds {
        match c {
            Condition::Exprs(e) => out.extend(e.iter().cloned()),
            Condition::AddrSet {
                source,
                family,
                invert,
                ranges,
                plain,
            } => {
                *next_id += 1;
                let id = *next_id;
                let len = family.address_len() as u32;
                b.add_set(
                    nft_family,
                    table,
                    &SetSpec {
                        name: "__set%d".into(),
                        id,
                        flags: SET_ANONYMOUS_CONSTANT | if *plain { 0 } else { SET_INTERVAL },
                        key_type: match family {
                            IpFamily::V4 => types::IPADDR,
                            IpFamily::V6 => types::IP6ADDR,
                        },
                        key_len: len,
                        data: None,
                    },
                );
                let mut elems = Vec::new();
                for (lo, hi) in ranges {
                    elems.push((lo.clone(), 0));
                    if !*plain {
                        if let Some(end) = successor(hi) {
                            elems.push((end, ELEM_INTERVAL_END));
                        }
                    }
                }
                if !*plain
                    && ranges
                        .first()
                        .is_some_and(|(lo, _)| lo.iter().any(|&x| x != 0))
                {
                    // As nft: the range below the first member is "not in".
                    elems.insert(0, (vec![0; len as usize], ELEM_INTERVAL_END));
                }
                b.add_elems_to_new_set(nft_family, table, id, &elems);
                let (offset, l) = expr::ip_addr_offset(*family, *source);
                out.push(Expr::Payload {
                    base: expr::PayloadBase::Network,
                    offset,
                    len: l,
                    dreg: REG_1,
                });
                out.push(Expr::Lookup {
                    set: "__set%d".into(),
                    set_id: Some(id),
                    sreg: REG_1,
                    dreg: None,
                    invert: *invert,
                });
            }
        }
    }
    out
}

/// Splits on whitespace, with `{`, `}` and `,` as tokens of their own.
fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let mut cur = String::new();
        for c in word.chars() {
            if matches!(c, '{' | '}' | ',') {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                out.push(c.to_string());
            } else {
                cur.push(c);
            }
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

/// The members of the set opening at `tokens[i]` (`{`) and the index after
/// its `}`.
fn set_members(tokens: &[String], i: usize) -> Option<(Vec<String>, usize)> {
    let mut members = Vec::new();
    let mut j = i + 1;
    loop {
        match tokens.get(j)?.as_str() {
            "}" => return Some((members, j + 1)),
            "," => {}
            m => members.push(m.to_string()),
        }
        j += 1;
    }
}

/// `ADDR` or `ADDR/LEN` of the family.
fn prefix(s: &str, family: IpFamily) -> Option<(IpAddr, u8)> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, l.parse::<u8>().ok()?),
        None => (s, family.max_prefix()),
    };
    let addr: IpAddr = a.parse().ok()?;
    (IpFamily::of(&addr) == family && l <= family.max_prefix()).then_some((addr, l))
}

/// The first and last address of `addr/len`.
fn range_of(addr: IpAddr, len: u8) -> (Vec<u8>, Vec<u8>) {
    let bytes = expr::ip_bytes(addr);
    let mut lo = bytes.clone();
    let mut hi = bytes;
    for bit in usize::from(len)..lo.len() * 8 {
        lo[bit / 8] &= !(0x80 >> (bit % 8));
        hi[bit / 8] |= 0x80 >> (bit % 8);
    }
    (lo, hi)
}

/// Sorted ranges with overlapping and adjacent ones joined (the kernel
/// refuses overlapping intervals).
fn merge(ranges: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for (lo, hi) in ranges {
        if let Some(last) = out.last_mut() {
            let joins = successor(&last.1).is_none_or(|next| lo <= next);
            if joins {
                if hi > last.1 {
                    last.1 = hi;
                }
                continue;
            }
        }
        out.push((lo, hi));
    }
    out
}

/// The address after `a`, `None` past the last one.
fn successor(a: &[u8]) -> Option<Vec<u8>> {
    let mut v = a.to_vec();
    for i in (0..v.len()).rev() {
        if v[i] == 0xff {
            v[i] = 0;
        } else {
            v[i] += 1;
            return Some(v);
        }
    }
    None
}

/// A number, decimal or `0x` hex.
fn number(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `RTN_*` of a route type name.
fn route_type(s: &str) -> Option<u32> {
    Some(match s {
        "unspec" => 0,
        "unicast" => 1,
        "local" => 2,
        "broadcast" => 3,
        "anycast" => 4,
        "multicast" => 5,
        "blackhole" => 6,
        "unreachable" => 7,
        "prohibit" => 8,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn netfilter_conditions_parse_what_real_configs_use() {
        for ok in [
            vec!["ip saddr 10.0.0.0/8"],
            vec!["ip", "daddr", "!=", "192.168.0.0/16"],
            vec!["ip saddr { 10.0.0.1, 10.1.0.0/16 }"],
            vec!["ip saddr != {10.0.0.1,10.0.0.2}"],
            vec!["iifname \"eth0\"", "oifname != eth1"],
            vec!["meta iifname eth*"],
            vec!["meta mark 0x1"],
            vec!["meta mark and 0xff == 0x1"],
            vec!["fib daddr type local", "fib saddr type != local"],
        ] {
            parse("conditionsV4", &strs(&ok), IpFamily::V4)
                .unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        parse(
            "conditionsV6",
            &strs(&["ip6 saddr { fd00::/64, fd01::1 }"]),
            IpFamily::V6,
        )
        .unwrap();
        for (bad, word) in [
            (vec!["tcp flags syn"], "\"tcp\""),
            (vec!["ip6 saddr fd00::1"], "\"ip6\" does not match"),
            (vec!["ip saddr 10.0.0.0/33"], "\"10.0.0.0/33\""),
            (vec!["ip saddr { 10.0.0.1"], "unclosed set"),
            (vec!["meta mark x"], "\"x\" is not a number"),
            (vec!["fib daddr oif"], "only \"type\""),
            (vec!["fib saddr . iif type local"], "prerouting and output"),
            (vec!["ct state new"], "\"ct\""),
        ] {
            let e = parse("conditionsV4", &strs(&bad), IpFamily::V4).unwrap_err();
            assert_eq!(e.code(), 7);
            let m = e.to_string();
            assert!(
                m.contains("conditionsV4")
                    && m.contains(word)
                    && m.contains("understood nft conditions"),
                "{m}"
            );
        }
    }

    #[test]
    fn netfilter_condition_sets_merge_and_end_ranges() {
        let a = |s: &str| expr::ip_bytes(s.parse().unwrap());
        let r = merge(vec![
            range_of("10.0.0.0".parse().unwrap(), 24),
            range_of("10.0.0.128".parse().unwrap(), 25),
            range_of("10.0.1.0".parse().unwrap(), 24),
        ]);
        assert_eq!(r, vec![(a("10.0.0.0"), a("10.0.1.255"))]);
        assert_eq!(successor(&a("10.0.0.255")), Some(a("10.0.1.0")));
        assert_eq!(successor(&a("255.255.255.255")), None);
    }
}
