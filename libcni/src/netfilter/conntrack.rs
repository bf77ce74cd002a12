//! Conntrack over netlink (ctnetlink), without the `conntrack` binary:
//! listing entries and deleting those of a protocol and original
//! destination port (stale UDP entries that would keep sending a host
//! port's traffic where it went before a mapping changed).

use std::net::IpAddr;

use super::nfnetlink::{NfNetlink, Request, NFNL_SUBSYS_CTNETLINK, NLM_F_DUMP};
use super::wire::{Attr, Attrs, NLA_F_NESTED};
use crate::netlink::is_not_found;
use crate::IpFamily;
use crate::Result;

const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_ZONE: u16 = 18;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;

/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// The original-direction tuple of a conntrack entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub proto: u8,
    pub src: Option<IpAddr>,
    pub dst: Option<IpAddr>,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    /// The encoded `CTA_TUPLE_ORIG`, to delete the entry with.
    tuple: Vec<u8>,
    zone: Option<u16>,
}

fn ct_type(t: u16) -> u16 {
    (NFNL_SUBSYS_CTNETLINK << 8) | t
}

fn ip_of(a: &Attr<'_>) -> Option<IpAddr> {
    match a.data.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(a.data).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(a.data).ok()?)),
        _ => None,
    }
}

/// The conntrack entries of one family in the calling thread's namespace.
pub fn entries(nl: &mut NfNetlink, family: IpFamily) -> Result<Vec<Entry>> {
    let req = Request {
        ty: ct_type(IPCTNL_MSG_CT_GET),
        flags: NLM_F_DUMP,
        family: family.nfproto(),
        attrs: Attrs::new(),
        what: "dump the conntrack table".into(),
    };
    let replies = match nl.request(&req) {
        Ok(r) => r,
        // No conntrack in this namespace yet: no entries.
        Err(e) if is_not_found(&e) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for r in replies
        .iter()
        .filter(|r| r.ty == ct_type(IPCTNL_MSG_CT_NEW))
    {
        let Some(orig) = r.attrs().find(CTA_TUPLE_ORIG) else {
            continue;
        };
        let mut e = Entry {
            proto: 0,
            src: None,
            dst: None,
            src_port: None,
            dst_port: None,
            tuple: orig.data.to_vec(),
            zone: r.attrs().find(CTA_ZONE).and_then(|z| z.be16()),
        };
        for a in orig.nested() {
            match a.ty {
                CTA_TUPLE_IP => {
                    for ip in a.nested() {
                        match ip.ty {
                            CTA_IP_V4_SRC | CTA_IP_V6_SRC => e.src = ip_of(&ip),
                            CTA_IP_V4_DST | CTA_IP_V6_DST => e.dst = ip_of(&ip),
                            _ => {}
                        }
                    }
                }
                CTA_TUPLE_PROTO => {
                    for p in a.nested() {
                        match p.ty {
                            CTA_PROTO_NUM => e.proto = p.u8().unwrap_or(0),
                            CTA_PROTO_SRC_PORT => e.src_port = p.be16(),
                            CTA_PROTO_DST_PORT => e.dst_port = p.be16(),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        out.push(e);
    }
    Ok(out)
}

/// Deletes the entries of protocol `proto` whose original destination port
/// is one of `ports`; returns how many went. Entries that vanish meanwhile
/// count as deleted.
pub fn delete_by_dst_port(
    nl: &mut NfNetlink,
    family: IpFamily,
    proto: u8,
    ports: &[u16],
) -> Result<usize> {
    if ports.is_empty() {
        return Ok(0);
    }
    let mut n = 0;
    for e in entries(nl, family)? {
        if e.proto != proto || !e.dst_port.is_some_and(|p| ports.contains(&p)) {
            continue;
        }
        let mut a = Attrs::new();
        a.put(CTA_TUPLE_ORIG | NLA_F_NESTED, &e.tuple);
        if let Some(z) = e.zone {
            a.put_be16(CTA_ZONE, z);
        }
        let req = Request {
            ty: ct_type(IPCTNL_MSG_CT_DELETE),
            flags: 0,
            family: family.nfproto(),
            attrs: a,
            what: format!(
                "delete conntrack entry proto {proto} dport {}",
                e.dst_port.unwrap_or(0)
            ),
        };
        match nl.request(&req) {
            Ok(_) => n += 1,
            Err(err) if is_not_found(&err) => n += 1,
            Err(err) => return Err(err),
        }
    }
    Ok(n)
}
