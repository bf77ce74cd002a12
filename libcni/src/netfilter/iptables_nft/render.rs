//! Rules read back to their `iptables-save` lines: the inverse of
//! [`super::encode`] for every shape it writes (and the same rules written
//! by iptables-nft), and a line that matches nothing of ours otherwise.

use std::net::IpAddr;

use super::encode::{
    addr_field, addrtype_local_info, conntrack_info, dnat_info, masq_info, multiport_info,
    proto_name, sctp_info, MULTIPORT_LEN,
};
use super::{be32, data_value};
use crate::netfilter::iptables;
use crate::netfilter::nft::expr::{CmpOp, MetaKey, PayloadBase};
use crate::netfilter::nft::{RawExpr, RawRule};
use crate::netfilter::wire::AttrIter;
use crate::IpFamily;

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn ip_of(b: &[u8], family: IpFamily) -> Option<IpAddr> {
    Some(if family == IpFamily::V6 {
        <[u8; 16]>::try_from(b.get(..16)?).ok()?.into()
    } else {
        <[u8; 4]>::try_from(b.get(..4)?).ok()?.into()
    })
}

/// The `iptables-save` line of a rule read back, for the shapes
/// [`super::encode`] writes (and the same rules written by iptables-nft); a line
/// that matches nothing of ours for anything else.
///
/// An unknown rule that ends in a jump still says where it jumps (`-A
/// CHAIN #unrecognised-rule-<handle> -j TARGET`), so that removing a
/// container's chain also removes the jumps to it of shapes we do not
/// write (the Go plugin's with iptables `conditionsV4`), as its DEL does.
pub fn render(rule: &RawRule, family: IpFamily) -> String {
    render_known(rule, family).unwrap_or_else(|| {
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
    /// `-i`/`-o`, with their `!`.
    iif: Option<String>,
    oif: Option<String>,
    proto: Option<&'static str>,
    matches: Vec<String>,
    target: Option<String>,
}

impl Parts {
    fn line(self, chain: &str) -> String {
        let mut s = format!("-A {chain}");
        for v in [self.src, self.dst, self.iif, self.oif]
            .into_iter()
            .flatten()
        {
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

/// A rule of the shapes [`super::encode`] writes, as its `iptables-save` line;
/// `None` for anything else.
fn render_known(rule: &RawRule, family: IpFamily) -> Option<String> {
    let mut parts = Parts::default();
    let mut exprs = rule.exprs.iter().peekable();
    while let Some(RawExpr { name, data }) = exprs.next() {
        match name.as_str() {
            "meta" => render_meta(data, &mut exprs, &mut parts)?,
            "payload" => render_payload(data, &mut exprs, &mut parts, family)?,
            "match" => parts.matches.push(render_xt_match(data)?),
            "counter" => {}
            "immediate" => parts.target = Some(render_verdict(data)?),
            "target" => parts.target = Some(render_xt_target(data, family)?),
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

/// `meta iifname|oifname` (`[!] -i|-o`), `meta l4proto` (the `-p`
/// protocol) or `meta mark` (`-m mark`), with the expressions that follow
/// it.
fn render_meta(data: &[u8], exprs: &mut Exprs<'_>, parts: &mut Parts) -> Option<()> {
    let key = be32(data, 2)?;
    let mut next = exprs.next()?;
    if key == MetaKey::IifName as u32 || key == MetaKey::OifName as u32 {
        let iface = render_iface(next)?;
        let slot = if key == MetaKey::IifName as u32 {
            (&mut parts.iif, "-i")
        } else {
            (&mut parts.oif, "-o")
        };
        *slot.0 = Some(match iface {
            (true, name) => format!("! {} {name}", slot.1),
            (false, name) => format!("{} {name}", slot.1),
        });
        return Some(());
    }
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

/// The compare of an interface name: whether negated, and the name (with
/// its NUL; without one it is a prefix, `+`).
fn render_iface(cmp: &RawExpr) -> Option<(bool, String)> {
    if cmp.name != "cmp" {
        return None;
    }
    let neg = match be32(&cmp.data, 2)? {
        op if op == CmpOp::Eq as u32 => false,
        op if op == CmpOp::Neq as u32 => true,
        _ => return None,
    };
    let value = data_value(&cmp.data, 3)?;
    let name = match value.iter().position(|&b| b == 0) {
        Some(i) => String::from_utf8(value[..i].to_vec()).ok()?,
        None => format!("{}+", String::from_utf8(value).ok()?),
    };
    Some((neg, name))
}

/// A payload load: the tcp/udp destination port (`-m tcp --dport`), or
/// the source or destination address with its prefix (`[!] -s|-d`).
fn render_payload(
    data: &[u8],
    exprs: &mut Exprs<'_>,
    parts: &mut Parts,
    family: IpFamily,
) -> Option<()> {
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
    let source = if (offset, addr_field(family, true).1) == addr_field(family, true) {
        true
    } else if (offset, addr_field(family, false).1) == addr_field(family, false) {
        false
    } else {
        return None;
    };
    let full = addr_field(family, true).1;
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
    let a = ip_of(&v, family)?;
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
        ("conntrack", 3) if info == conntrack_info().as_slice() => {
            "-m conntrack --ctstate RELATED,ESTABLISHED".into()
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
fn render_xt_target(data: &[u8], family: IpFamily) -> Option<String> {
    let a = AttrIter::new(data);
    let name = a.clone().find(1)?.str();
    let rev = a.clone().find(2)?.be32()?;
    let info = a.clone().find(3)?.data;
    Some(match (name.as_str(), rev) {
        ("MASQUERADE", 0) if info == masq_info(family).as_slice() => "MASQUERADE".into(),
        ("MARK", 2) if info.len() == 8 => format!(
            "MARK --set-xmark {:#x}/{:#x}",
            ne_u32(info, 0)?,
            ne_u32(info, 4)?
        ),
        ("DNAT", 2) => {
            let addr = ip_of(info.get(4..)?, family)?;
            let port = u16::from_be_bytes(info.get(36..38)?.try_into().ok()?);
            if info != dnat_info(addr, port).as_slice() {
                return None;
            }
            if family == IpFamily::V6 {
                format!("DNAT --to-destination [{addr}]:{port}")
            } else {
                format!("DNAT --to-destination {addr}:{port}")
            }
        }
        _ => return None,
    })
}
