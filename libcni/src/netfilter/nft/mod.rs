//! nf_tables over netlink, without the `nft` binary: an encoder of the
//! messages the suite needs (tables, chains, rules, sets/maps and their
//! elements, deletes), a [`Batch`] that the kernel applies atomically, and
//! readers that dump rules and set elements back (to find a container's
//! state by the owner tag in its comments).
//!
//! Comments are stored the way `nft` stores them (a `NFTNL_UDATA_*_COMMENT`
//! TLV in the rule's or element's user data), so `nft list ruleset` shows
//! them, and rules or elements made by `nft` with a comment read back here.

pub mod expr;

use std::net::IpAddr;

use self::expr::Expr;
use super::nfnetlink::{
    NfNetlink, Reply, Request, NFNL_SUBSYS_NFTABLES, NLM_F_APPEND, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_ECHO, NLM_F_EXCL,
};
use super::wire::{AttrIter, Attrs};
use crate::netlink::is_not_found;
use crate::netns::NetNs;
use crate::Result;

const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_DELCHAIN: u16 = 5;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_GETRULE: u16 = 7;
const NFT_MSG_DELRULE: u16 = 8;
const NFT_MSG_NEWSET: u16 = 9;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_GETSETELEM: u16 = 13;
const NFT_MSG_DELSETELEM: u16 = 14;
const NFT_MSG_GETGEN: u16 = 16;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_TABLE_USERDATA: u16 = 6;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_CHAIN_USERDATA: u16 = 12;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_COMPAT: u16 = 5;
const NFTA_RULE_USERDATA: u16 = 7;
const NFTA_RULE_COMPAT_PROTO: u16 = 1;
const NFTA_RULE_COMPAT_FLAGS: u16 = 2;
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_FLAGS: u16 = 3;
const NFTA_SET_KEY_TYPE: u16 = 4;
const NFTA_SET_KEY_LEN: u16 = 5;
const NFTA_SET_DATA_TYPE: u16 = 6;
const NFTA_SET_DATA_LEN: u16 = 7;
const NFTA_SET_ID: u16 = 10;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_SET_ELEM_USERDATA: u16 = 6;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;
const NFTA_EXPR_NAME: u16 = 1;

/// `NFT_SET_ANONYMOUS | NFT_SET_CONSTANT`: a set made for one rule (named
/// by the kernel, deleted with the rule), as `nft` makes for `{ a, b }`.
pub const SET_ANONYMOUS_CONSTANT: u32 = 0x1 | 0x2;
/// `NFT_SET_INTERVAL`: elements are ranges.
pub const SET_INTERVAL: u32 = 0x4;
/// `NFT_SET_ELEM_INTERVAL_END`: the element ends a range.
pub const ELEM_INTERVAL_END: u32 = 0x1;

/// `NFT_SET_MAP`: the set maps keys to data.
pub const SET_MAP: u32 = 0x8;
/// `NFT_DATA_VERDICT`: the data type of a verdict map.
pub const DATA_VERDICT: u32 = 0xffff_ff00;

/// `NFTNL_UDATA_RULE_COMMENT` / `NFTNL_UDATA_SET_ELEM_COMMENT`.
const UDATA_COMMENT: u8 = 0;
/// Longest comment [`comment_udata`] writes, with its NUL (the owner tags).
pub const MAX_COMMENT_LEN: usize = 128;
/// Longest comment `nft` accepts, without its NUL
/// (`NFTNL_UDATA_COMMENT_MAXLEN`): what knftables, and so the Go plugins,
/// may write.
pub const MAX_NFT_COMMENT_CHARS: usize = 128;

/// Datatype ids of `nft` (its `enum datatypes`): sets carry them so that
/// `nft list` prints keys and data as addresses and ports.
pub mod types {
    pub const VERDICT: u32 = 1;
    pub const IPADDR: u32 = 7;
    pub const IP6ADDR: u32 = 8;
    pub const ETHERADDR: u32 = 9;
    pub const INET_PROTOCOL: u32 = 12;
    pub const INET_SERVICE: u32 = 13;

    /// The type of a concatenation of `parts` (nft's `concat_subtype_add`).
    pub const fn concat(parts: &[u32]) -> u32 {
        let mut t = 0;
        let mut i = 0;
        while i < parts.len() {
            t = (t << 6) | parts[i];
            i += 1;
        }
        t
    }
}

/// Where [`Batch::add_rule_xt`] puts a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XtPlacement {
    /// At the end of the chain (`-A`).
    Append,
    /// At the end, echoed back with its handle.
    AppendEcho,
    /// At the top (`-I CHAIN 1`).
    First,
    /// At the top, echoed back with its handle.
    FirstEcho,
}

/// A table family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Inet,
    Ip,
    Ip6,
    Bridge,
}

impl Family {
    /// The table family of one IP family: `ip` or `ip6`.
    pub fn of(family: crate::IpFamily) -> Family {
        match family {
            crate::IpFamily::V4 => Family::Ip,
            crate::IpFamily::V6 => Family::Ip6,
        }
    }

    /// The IP family of an `ip` or `ip6` table; `None` for the others.
    pub fn ip(self) -> Option<crate::IpFamily> {
        match self {
            Family::Ip => Some(crate::IpFamily::V4),
            Family::Ip6 => Some(crate::IpFamily::V6),
            Family::Inet | Family::Bridge => None,
        }
    }

    /// `NFPROTO_*`.
    pub fn proto(self) -> u8 {
        match self {
            Family::Inet => 1,
            Family::Ip => 2,
            Family::Bridge => 7,
            Family::Ip6 => 10,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Bridge => "bridge",
        }
    }
}

/// `NF_INET_*` / `NF_BR_*` hook numbers (the same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Hook {
    Prerouting = 0,
    Input = 1,
    Forward = 2,
    Output = 3,
    Postrouting = 4,
}

/// A base chain's hook, priority and type (`"nat"`, `"filter"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseChain {
    pub hook: Hook,
    pub priority: i32,
    pub chain_type: &'static str,
}

/// `dstnat` and `srcnat` priorities.
pub const PRIORITY_DSTNAT: i32 = -100;
pub const PRIORITY_SRCNAT: i32 = 100;

/// A set or map declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetSpec {
    pub name: String,
    /// Batch-local id, so rules in the same batch can refer to a new set.
    pub id: u32,
    pub flags: u32,
    pub key_type: u32,
    pub key_len: u32,
    /// `(type, len)` for a map: `(DATA_VERDICT, 0)` for a verdict map.
    pub data: Option<(u32, u32)>,
}

/// The data of a map element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElemData {
    Value(Vec<u8>),
    Verdict(expr::Verdict),
}

/// A set element: key, data for maps, comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elem {
    pub key: Vec<u8>,
    pub data: Option<ElemData>,
    pub comment: Option<String>,
}

/// A rule read back from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleInfo {
    pub table: String,
    pub chain: String,
    pub handle: u64,
    pub comment: Option<String>,
    /// The names of its expressions, in order ("meta", "cmp", ...).
    pub exprs: Vec<String>,
    /// The data its `cmp` expressions compare with, in order.
    pub cmp_data: Vec<Vec<u8>>,
    /// The data its `immediate` expressions load into data registers (not
    /// verdicts), in order: a DNAT rule's address and port.
    pub imm_data: Vec<Vec<u8>>,
}

/// The user data TLV `nft` writes for a comment.
pub fn comment_udata(comment: &str) -> Vec<u8> {
    let mut c = comment.as_bytes().to_vec();
    c.truncate(MAX_COMMENT_LEN - 1);
    c.push(0);
    let mut out = vec![UDATA_COMMENT, c.len() as u8];
    out.extend_from_slice(&c);
    out
}

/// The user data TLV `nft` writes for a comment of up to
/// [`MAX_NFT_COMMENT_CHARS`] characters (longer ones are cut there, as
/// knftables cuts them).
pub fn nft_comment_udata(comment: &str) -> Vec<u8> {
    let mut c = comment.as_bytes().to_vec();
    c.truncate(MAX_NFT_COMMENT_CHARS);
    c.push(0);
    let mut out = vec![UDATA_COMMENT, c.len() as u8];
    out.extend_from_slice(&c);
    out
}

/// The comment in user data written by `nft` or [`comment_udata`].
pub fn parse_comment_udata(udata: &[u8]) -> Option<String> {
    let mut rest = udata;
    while rest.len() >= 2 {
        let (ty, len) = (rest[0], rest[1] as usize);
        let value = rest.get(2..2 + len)?;
        if ty == UDATA_COMMENT {
            let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
            return Some(String::from_utf8_lossy(&value[..end]).into_owned());
        }
        rest = &rest[2 + len..];
    }
    None
}

fn msg_type(t: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | t
}

/// A list of nf_tables changes, sent as one batch by [`Nft::commit`].
#[derive(Debug, Default)]
pub struct Batch {
    msgs: Vec<Request>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    /// Appends the messages of `other`.
    pub fn extend(&mut self, other: Batch) {
        self.msgs.extend(other.msgs);
    }

    fn push(&mut self, t: u16, flags: u16, family: Family, attrs: Attrs, what: String) {
        self.msgs.push(Request {
            ty: msg_type(t),
            flags,
            family: family.proto(),
            attrs,
            what,
        });
    }

    /// Adds the table if it does not exist (never touches its content).
    pub fn add_table(&mut self, family: Family, table: &str) {
        self.add_table_commented(family, table, None);
    }

    /// [`Batch::add_table`] with the comment `nft` stores for
    /// `add table ... { comment "..." ; }` (kept by an existing table).
    pub fn add_table_commented(&mut self, family: Family, table: &str, comment: Option<&str>) {
        let mut a = table_attrs(table);
        if let Some(c) = comment {
            a.put(NFTA_TABLE_USERDATA, &nft_comment_udata(c));
        }
        let what = format!("add table {} {table}", family.as_str());
        self.push(NFT_MSG_NEWTABLE, NLM_F_CREATE, family, a, what);
    }

    /// Deletes the table and everything in it.
    pub fn del_table(&mut self, family: Family, table: &str) {
        let a = table_attrs(table);
        let what = format!("delete table {} {table}", family.as_str());
        self.push(NFT_MSG_DELTABLE, 0, family, a, what);
    }

    /// Adds a chain if it does not exist; `base` makes it a base chain
    /// (with policy accept).
    pub fn add_chain(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        base: Option<&BaseChain>,
    ) {
        self.add_chain_commented(family, table, chain, base, None);
    }

    /// [`Batch::add_chain`] with a chain comment, stored as `nft` does.
    pub fn add_chain_commented(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        base: Option<&BaseChain>,
        comment: Option<&str>,
    ) {
        let mut a = chain_attrs(table, chain);
        if let Some(c) = comment {
            a.put(NFTA_CHAIN_USERDATA, &nft_comment_udata(c));
        }
        if let Some(b) = base {
            a.nest(NFTA_CHAIN_HOOK, |h| {
                h.put_be32(NFTA_HOOK_HOOKNUM, b.hook as u32)
                    .put_be32(NFTA_HOOK_PRIORITY, b.priority as u32);
            });
            a.put_be32(NFTA_CHAIN_POLICY, 1);
            a.put_str(NFTA_CHAIN_TYPE, b.chain_type);
        }
        let what = format!("add chain {} {table} {chain}", family.as_str());
        self.push(NFT_MSG_NEWCHAIN, NLM_F_CREATE, family, a, what);
    }

    /// Removes every rule of a chain.
    pub fn flush_chain(&mut self, family: Family, table: &str, chain: &str) {
        let a = rule_attrs(table, chain);
        let what = format!("flush chain {} {table} {chain}", family.as_str());
        self.push(NFT_MSG_DELRULE, 0, family, a, what);
    }

    /// Deletes an (empty, unreferenced) chain.
    pub fn del_chain(&mut self, family: Family, table: &str, chain: &str) {
        let a = chain_attrs(table, chain);
        let what = format!("delete chain {} {table} {chain}", family.as_str());
        self.push(NFT_MSG_DELCHAIN, 0, family, a, what);
    }

    /// Appends a rule.
    pub fn add_rule(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        exprs: &[Expr],
        comment: Option<&str>,
    ) {
        let mut a = rule_attrs(table, chain);
        a.nest(NFTA_RULE_EXPRESSIONS, |list| {
            for e in exprs {
                e.encode(list);
            }
        });
        if let Some(c) = comment {
            a.put(NFTA_RULE_USERDATA, &comment_udata(c));
        }
        let what = match comment {
            Some(c) => format!("add rule to {} {table} {chain} ({c})", family.as_str()),
            None => format!("add rule to {} {table} {chain}", family.as_str()),
        };
        self.push(
            NFT_MSG_NEWRULE,
            NLM_F_CREATE | NLM_F_APPEND,
            family,
            a,
            what,
        );
    }

    /// Appends a rule whose comment is stored as `nft` stores it (up to
    /// [`MAX_NFT_COMMENT_CHARS`]), asking the kernel to echo it back with
    /// its handle: [`Nft::commit_echo`] returns the handle under the index
    /// this returns.
    pub fn add_rule_echo(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        exprs: &[Expr],
        comment: &str,
    ) -> usize {
        let mut a = rule_attrs(table, chain);
        a.nest(NFTA_RULE_EXPRESSIONS, |list| {
            for e in exprs {
                e.encode(list);
            }
        });
        a.put(NFTA_RULE_USERDATA, &nft_comment_udata(comment));
        let what = format!(
            "add rule to {} {table} {chain} ({comment})",
            family.as_str()
        );
        self.push(
            NFT_MSG_NEWRULE,
            NLM_F_CREATE | NLM_F_APPEND | NLM_F_ECHO,
            family,
            a,
            what,
        );
        self.msgs.len() - 1
    }

    /// Deletes the rule with `handle`.
    pub fn del_rule(&mut self, family: Family, table: &str, chain: &str, handle: u64) {
        let mut a = rule_attrs(table, chain);
        a.put_be64(NFTA_RULE_HANDLE, handle);
        let what = format!(
            "delete rule {handle} of {} {table} {chain}",
            family.as_str()
        );
        self.push(NFT_MSG_DELRULE, 0, family, a, what);
    }

    /// Inserts a rule at the top of its chain (iptables' `-I CHAIN 1`).
    pub fn insert_rule(&mut self, family: Family, table: &str, chain: &str, exprs: &[Expr]) {
        let mut a = rule_attrs(table, chain);
        a.nest(NFTA_RULE_EXPRESSIONS, |list| {
            for e in exprs {
                e.encode(list);
            }
        });
        let what = format!("insert rule into {} {table} {chain}", family.as_str());
        self.push(NFT_MSG_NEWRULE, NLM_F_CREATE, family, a, what);
    }

    /// A rule as iptables-nft sends it: its expressions and the
    /// `NFTA_RULE_COMPAT` attribute carrying the rule's `-p` protocol (0
    /// for none), which `nft_compat` hands to xtables matches as the
    /// entry's protocol (`-m multiport` refuses a rule without one).
    /// Appended (`-A`), or inserted at the top (`-I CHAIN 1`); `echo` asks
    /// the kernel to echo it back with its handle ([`Nft::commit_echo`]
    /// returns it under the index this returns).
    pub fn add_rule_xt(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        exprs: &[Expr],
        proto: u8,
        placement: XtPlacement,
    ) -> usize {
        let mut a = rule_attrs(table, chain);
        a.nest(NFTA_RULE_EXPRESSIONS, |list| {
            for e in exprs {
                e.encode(list);
            }
        });
        a.nest(NFTA_RULE_COMPAT, |c| {
            c.put_be32(NFTA_RULE_COMPAT_PROTO, u32::from(proto))
                .put_be32(NFTA_RULE_COMPAT_FLAGS, 0);
        });
        let (flags, verb) = match placement {
            XtPlacement::Append => (NLM_F_CREATE | NLM_F_APPEND, "append rule to"),
            XtPlacement::AppendEcho => (NLM_F_CREATE | NLM_F_APPEND | NLM_F_ECHO, "append rule to"),
            XtPlacement::First => (NLM_F_CREATE, "insert rule into"),
            XtPlacement::FirstEcho => (NLM_F_CREATE | NLM_F_ECHO, "insert rule into"),
        };
        let what = format!("{verb} {} {table} {chain}", family.as_str());
        self.push(NFT_MSG_NEWRULE, flags, family, a, what);
        self.msgs.len() - 1
    }

    /// Creates a regular chain that must not exist yet (iptables' `-N`):
    /// the batch fails with `EEXIST` if another process made it meanwhile.
    pub fn create_chain(&mut self, family: Family, table: &str, chain: &str) {
        let a = chain_attrs(table, chain);
        let what = format!("create chain {} {table} {chain}", family.as_str());
        self.push(NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL, family, a, what);
    }

    /// Adds a set or map if it does not exist.
    pub fn add_set(&mut self, family: Family, table: &str, set: &SetSpec) {
        let mut a = Attrs::new();
        a.put_str(NFTA_SET_TABLE, table)
            .put_str(NFTA_SET_NAME, &set.name)
            .put_be32(NFTA_SET_FLAGS, set.flags)
            .put_be32(NFTA_SET_KEY_TYPE, set.key_type)
            .put_be32(NFTA_SET_KEY_LEN, set.key_len);
        if let Some((ty, len)) = set.data {
            a.put_be32(NFTA_SET_DATA_TYPE, ty);
            if ty != DATA_VERDICT {
                a.put_be32(NFTA_SET_DATA_LEN, len);
            }
        }
        a.put_be32(NFTA_SET_ID, set.id);
        let what = format!("add set {} {table} {}", family.as_str(), set.name);
        self.push(NFT_MSG_NEWSET, NLM_F_CREATE, family, a, what);
    }

    /// Adds elements; with `exclusive`, an element whose key exists fails
    /// the batch with `EEXIST`.
    pub fn add_elems(
        &mut self,
        family: Family,
        table: &str,
        set: &str,
        elems: &[Elem],
        exclusive: bool,
        what: &str,
    ) {
        if elems.is_empty() {
            return;
        }
        let a = elem_list(table, set, elems, true);
        let flags = NLM_F_CREATE | if exclusive { NLM_F_EXCL } else { 0 };
        self.push(
            NFT_MSG_NEWSETELEM,
            flags,
            family,
            a,
            format!("add {what} to {set}"),
        );
    }

    /// Adds the elements of a set created in this batch under `set_id`
    /// (an anonymous set, which has no name yet): `(key, flags)` pairs,
    /// flags [`ELEM_INTERVAL_END`] or 0.
    pub fn add_elems_to_new_set(
        &mut self,
        family: Family,
        table: &str,
        set_id: u32,
        elems: &[(Vec<u8>, u32)],
    ) {
        if elems.is_empty() {
            return;
        }
        let mut a = Attrs::new();
        a.put_str(NFTA_SET_ELEM_LIST_TABLE, table)
            .put_be32(NFTA_SET_ELEM_LIST_SET_ID, set_id);
        a.nest(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
            for (key, flags) in elems {
                list.nest(NFTA_LIST_ELEM, |el| {
                    el.nest(NFTA_SET_ELEM_KEY, |k| {
                        k.put(NFTA_DATA_VALUE, key);
                    });
                    if *flags != 0 {
                        el.put_be32(NFTA_SET_ELEM_FLAGS, *flags);
                    }
                });
            }
        });
        self.push(
            NFT_MSG_NEWSETELEM,
            NLM_F_CREATE,
            family,
            a,
            format!("add elements to anonymous set {set_id}"),
        );
    }

    /// Deletes elements (by key).
    pub fn del_elems(
        &mut self,
        family: Family,
        table: &str,
        set: &str,
        elems: &[Elem],
        what: &str,
    ) {
        if elems.is_empty() {
            return;
        }
        let a = elem_list(table, set, elems, false);
        self.push(
            NFT_MSG_DELSETELEM,
            0,
            family,
            a,
            format!("delete {what} from {set}"),
        );
    }
}

/// The attributes naming a table.
fn table_attrs(table: &str) -> Attrs {
    let mut a = Attrs::new();
    a.put_str(NFTA_TABLE_NAME, table);
    a
}

/// The attributes naming a chain (of chain messages).
fn chain_attrs(table: &str, chain: &str) -> Attrs {
    let mut a = Attrs::new();
    a.put_str(NFTA_CHAIN_TABLE, table)
        .put_str(NFTA_CHAIN_NAME, chain);
    a
}

/// The attributes naming the chain of rule messages.
fn rule_attrs(table: &str, chain: &str) -> Attrs {
    let mut a = Attrs::new();
    a.put_str(NFTA_RULE_TABLE, table)
        .put_str(NFTA_RULE_CHAIN, chain);
    a
}

fn elem_list(table: &str, set: &str, elems: &[Elem], full: bool) -> Attrs {
    let mut a = Attrs::new();
    a.put_str(NFTA_SET_ELEM_LIST_TABLE, table)
        .put_str(NFTA_SET_ELEM_LIST_SET, set);
    a.nest(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
        for e in elems {
            list.nest(NFTA_LIST_ELEM, |el| {
                el.nest(NFTA_SET_ELEM_KEY, |k| {
                    k.put(NFTA_DATA_VALUE, &e.key);
                });
                if !full {
                    return;
                }
                match &e.data {
                    Some(ElemData::Value(v)) => {
                        el.nest(NFTA_SET_ELEM_DATA, |d| {
                            d.put(NFTA_DATA_VALUE, v);
                        });
                    }
                    Some(ElemData::Verdict(v)) => {
                        el.nest(NFTA_SET_ELEM_DATA, |d| v.encode(d));
                    }
                    None => {}
                }
                if let Some(c) = &e.comment {
                    el.put(NFTA_SET_ELEM_USERDATA, &comment_udata(c));
                }
            });
        }
    });
    a
}

/// An nf_tables client bound to one network namespace.
#[derive(Debug)]
pub struct Nft {
    nl: NfNetlink,
}

impl Nft {
    /// Opens a client in the calling thread's network namespace.
    pub fn open() -> Result<Nft> {
        Ok(Nft {
            nl: NfNetlink::open()?,
        })
    }

    /// Opens a client in `ns`.
    pub fn open_in(ns: &NetNs) -> Result<Nft> {
        Ok(Nft {
            nl: NfNetlink::open_in(ns)?,
        })
    }

    /// Whether the kernel speaks nf_tables (asks for the ruleset generation).
    pub fn available(&mut self) -> bool {
        let req = Request {
            ty: msg_type(NFT_MSG_GETGEN),
            flags: 0,
            family: 0,
            attrs: Attrs::new(),
            what: "get the nf_tables generation".into(),
        };
        self.nl.request(&req).is_ok()
    }

    /// Applies `batch` atomically: all of it or, on any error, none of it.
    pub fn commit(&mut self, batch: &Batch) -> Result<()> {
        self.nl.batch(&batch.msgs)
    }

    /// [`Nft::commit`], returning the rules the kernel echoed for
    /// [`Batch::add_rule_echo`] messages, by the index that returned.
    pub fn commit_echo(&mut self, batch: &Batch) -> Result<Vec<(usize, RuleInfo)>> {
        let replies = self.nl.batch_echo(&batch.msgs)?;
        Ok(replies
            .into_iter()
            .filter(|(_, r)| r.ty == msg_type(NFT_MSG_NEWRULE))
            .filter_map(|(i, r)| parse_rule(&r).map(|info| (i, info)))
            .collect())
    }

    /// The rule with `handle` in `chain` (one lookup, no dump); `None` when
    /// the table, the chain or the rule does not exist.
    pub fn get_rule(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        handle: u64,
    ) -> Result<Option<RuleInfo>> {
        self.rule_by_handle(family, table, chain, handle)
    }

    /// One rule by its handle, read as `R`.
    fn rule_by_handle<R: ReadRule>(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        handle: u64,
    ) -> Result<Option<R>> {
        let mut a = rule_attrs(table, chain);
        a.put_be64(NFTA_RULE_HANDLE, handle);
        let what = format!("get rule {handle} of {} {table} {chain}", family.as_str());
        let Some(replies) = self.get(NFT_MSG_GETRULE, 0, family, a, what)? else {
            return Ok(None);
        };
        let found = R::from_replies(&replies).find(|r| r.handle() == handle && r.chain() == chain);
        Ok(found)
    }

    /// The rules of `chain`, or of every chain of `table` with `None`, read
    /// as `R`, in order (empty when the table or chain does not exist).
    fn rules_as<R: ReadRule>(
        &mut self,
        family: Family,
        table: &str,
        chain: Option<&str>,
    ) -> Result<Vec<R>> {
        let mut a = Attrs::new();
        a.put_str(NFTA_RULE_TABLE, table);
        if let Some(c) = chain {
            a.put_str(NFTA_RULE_CHAIN, c);
        }
        let what = match chain {
            Some(c) => format!("list chain {} {table} {c}", family.as_str()),
            None => format!("list table {} {table}", family.as_str()),
        };
        let replies = self
            .get(NFT_MSG_GETRULE, NLM_F_DUMP, family, a, what)?
            .unwrap_or_default();
        Ok(R::from_replies(&replies)
            .filter(|r| chain.is_none_or(|c| r.chain() == c))
            .collect())
    }

    fn get(
        &mut self,
        t: u16,
        flags: u16,
        family: Family,
        attrs: Attrs,
        what: String,
    ) -> Result<Option<Vec<Reply>>> {
        let req = Request {
            ty: msg_type(t),
            flags,
            family: family.proto(),
            attrs,
            what,
        };
        match self.nl.request(&req) {
            Ok(r) => Ok(Some(r)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the table exists.
    pub fn has_table(&mut self, family: Family, table: &str) -> Result<bool> {
        let a = table_attrs(table);
        let what = format!("get table {} {table}", family.as_str());
        Ok(self.get(NFT_MSG_GETTABLE, 0, family, a, what)?.is_some())
    }

    /// Whether the chain exists.
    pub fn has_chain(&mut self, family: Family, table: &str, chain: &str) -> Result<bool> {
        let a = chain_attrs(table, chain);
        let what = format!("get chain {} {table} {chain}", family.as_str());
        Ok(self.get(NFT_MSG_GETCHAIN, 0, family, a, what)?.is_some())
    }

    /// The rules of a chain (empty when the table or chain does not exist).
    pub fn rules(&mut self, family: Family, table: &str, chain: &str) -> Result<Vec<RuleInfo>> {
        self.rules_as(family, table, Some(chain))
    }

    /// Every rule of a table, all chains (empty when it does not exist).
    pub fn table_rules(&mut self, family: Family, table: &str) -> Result<Vec<RuleInfo>> {
        self.rules_as(family, table, None)
    }

    /// The elements of a set (empty when the table or set does not exist).
    pub fn elems(&mut self, family: Family, table: &str, set: &str) -> Result<Vec<Elem>> {
        let mut a = Attrs::new();
        a.put_str(NFTA_SET_ELEM_LIST_TABLE, table)
            .put_str(NFTA_SET_ELEM_LIST_SET, set);
        let what = format!("list set {} {table} {set}", family.as_str());
        let replies = self
            .get(NFT_MSG_GETSETELEM, NLM_F_DUMP, family, a, what)?
            .unwrap_or_default();
        Ok(replies.iter().flat_map(parse_elems).collect())
    }

    /// The element of `set` with this key, if any (one lookup, no dump).
    pub fn get_elem(
        &mut self,
        family: Family,
        table: &str,
        set: &str,
        key: &[u8],
    ) -> Result<Option<Elem>> {
        let probe = Elem {
            key: key.to_vec(),
            data: None,
            comment: None,
        };
        let a = elem_list(table, set, std::slice::from_ref(&probe), false);
        let what = format!("get element of {} {table} {set}", family.as_str());
        let Some(replies) = self.get(NFT_MSG_GETSETELEM, 0, family, a, what)? else {
            return Ok(None);
        };
        Ok(replies.iter().flat_map(parse_elems).find(|e| e.key == key))
    }
}

/// One expression of a rule read back: its name and its
/// `NFTA_EXPR_DATA` attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawExpr {
    pub name: String,
    pub data: Vec<u8>,
}

/// A rule read back with its expressions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRule {
    pub chain: String,
    pub handle: u64,
    pub exprs: Vec<RawExpr>,
}

/// A rule reply with its expressions.
fn parse_raw_rule(r: &Reply) -> Option<RawRule> {
    let mut rule = RawRule {
        chain: String::new(),
        handle: 0,
        exprs: Vec::new(),
    };
    for a in r.attrs() {
        match a.ty {
            NFTA_RULE_CHAIN => rule.chain = a.str(),
            NFTA_RULE_HANDLE => rule.handle = a.be64()?,
            NFTA_RULE_EXPRESSIONS => {
                for e in a.nested() {
                    let name = e.nested().find(NFTA_EXPR_NAME)?.str();
                    let data = e.nested().find(2).map(|d| d.data.to_vec());
                    rule.exprs.push(RawExpr {
                        name,
                        data: data.unwrap_or_default(),
                    });
                }
            }
            _ => {}
        }
    }
    Some(rule)
}

impl Nft {
    /// The rule with `handle` in `chain` with its expressions (one lookup,
    /// no dump); `None` when the table, the chain or the rule does not
    /// exist.
    pub fn get_rule_raw(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        handle: u64,
    ) -> Result<Option<RawRule>> {
        self.rule_by_handle(family, table, chain, handle)
    }

    /// The names of a table's chains (empty when it does not exist).
    pub fn chain_names(&mut self, family: Family, table: &str) -> Result<Vec<String>> {
        let mut a = Attrs::new();
        a.put_str(NFTA_CHAIN_TABLE, table);
        let what = format!("list chains of {} {table}", family.as_str());
        let replies = self
            .get(NFT_MSG_GETCHAIN, NLM_F_DUMP, family, a, what)?
            .unwrap_or_default();
        Ok(replies
            .iter()
            .filter(|r| r.ty == msg_type(NFT_MSG_NEWCHAIN))
            .filter(|r| {
                r.attrs()
                    .find(NFTA_CHAIN_TABLE)
                    .is_some_and(|t| t.str() == table)
            })
            .filter_map(|r| r.attrs().find(NFTA_CHAIN_NAME).map(|n| n.str()))
            .collect())
    }

    /// The rules of a chain (every chain of the table with `None`) with
    /// their expressions, in order (empty when the table or chain does not
    /// exist).
    pub fn rules_raw(
        &mut self,
        family: Family,
        table: &str,
        chain: Option<&str>,
    ) -> Result<Vec<RawRule>> {
        self.rules_as(family, table, chain)
    }
}

impl Nft {
    /// Deletes, in one batch, the elements of `sets` and the rules of
    /// `chains` of a table whose comment `doomed` accepts; returns the
    /// deleted elements (with their set) and the number of deleted rules.
    /// Something deleted concurrently between the read and the batch is
    /// retried (it would fail the batch with `ENOENT`); a missing table is
    /// nothing to delete.
    pub fn delete_tagged(
        &mut self,
        family: Family,
        table: &str,
        sets: &[&str],
        chains: &[&str],
        doomed: &dyn Fn(&str) -> bool,
    ) -> Result<(Vec<(String, Elem)>, usize)> {
        const ATTEMPTS: usize = 3;
        let mut attempt = 1;
        loop {
            if !self.has_table(family, table)? {
                return Ok((Vec::new(), 0));
            }
            let mut b = Batch::new();
            let mut gone = Vec::new();
            let mut rules = 0;
            for set in sets {
                let mine: Vec<Elem> = self
                    .elems(family, table, set)?
                    .into_iter()
                    .filter(|e| e.comment.as_deref().is_some_and(doomed))
                    .collect();
                b.del_elems(family, table, set, &mine, "elements");
                gone.extend(mine.into_iter().map(|e| (set.to_string(), e)));
            }
            for chain in chains {
                for r in self.rules(family, table, chain)? {
                    if r.comment.as_deref().is_some_and(doomed) {
                        b.del_rule(family, table, chain, r.handle);
                        rules += 1;
                    }
                }
            }
            match self.commit(&b) {
                Ok(()) => return Ok((gone, rules)),
                Err(e) if is_not_found(&e) && attempt < ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// A rule as one of the readers parses a rule reply.
trait ReadRule: Sized + 'static {
    fn parse(reply: &Reply) -> Option<Self>;
    fn chain(&self) -> &str;
    fn handle(&self) -> u64;

    /// The rules among `replies`.
    fn from_replies(replies: &[Reply]) -> impl Iterator<Item = Self> + '_ {
        replies
            .iter()
            .filter(|r| r.ty == msg_type(NFT_MSG_NEWRULE))
            .filter_map(Self::parse)
    }
}

impl ReadRule for RuleInfo {
    fn parse(reply: &Reply) -> Option<RuleInfo> {
        parse_rule(reply)
    }
    fn chain(&self) -> &str {
        &self.chain
    }
    fn handle(&self) -> u64 {
        self.handle
    }
}

impl ReadRule for RawRule {
    fn parse(reply: &Reply) -> Option<RawRule> {
        parse_raw_rule(reply)
    }
    fn chain(&self) -> &str {
        &self.chain
    }
    fn handle(&self) -> u64 {
        self.handle
    }
}

fn parse_rule(r: &Reply) -> Option<RuleInfo> {
    let mut info = RuleInfo {
        table: String::new(),
        chain: String::new(),
        handle: 0,
        comment: None,
        exprs: Vec::new(),
        cmp_data: Vec::new(),
        imm_data: Vec::new(),
    };
    for a in r.attrs() {
        match a.ty {
            NFTA_RULE_TABLE => info.table = a.str(),
            NFTA_RULE_CHAIN => info.chain = a.str(),
            NFTA_RULE_HANDLE => info.handle = a.be64()?,
            NFTA_RULE_USERDATA => info.comment = parse_comment_udata(a.data),
            NFTA_RULE_EXPRESSIONS => {
                for e in a.nested() {
                    let Some(name) = e.nested().find(NFTA_EXPR_NAME).map(|n| n.str()) else {
                        continue;
                    };
                    if name == "cmp" {
                        // NFTA_EXPR_DATA > NFTA_CMP_DATA (3) > NFTA_DATA_VALUE.
                        let data = e
                            .nested()
                            .find(2)
                            .and_then(|d| d.nested().find(3))
                            .and_then(|c| c.nested().find(NFTA_DATA_VALUE))
                            .map(|v| v.data.to_vec());
                        info.cmp_data.extend(data);
                    }
                    if name == "immediate" {
                        // NFTA_EXPR_DATA > NFTA_IMMEDIATE_DATA (2) > NFTA_DATA_VALUE.
                        let data = e
                            .nested()
                            .find(2)
                            .and_then(|d| d.nested().find(2))
                            .and_then(|c| c.nested().find(NFTA_DATA_VALUE))
                            .map(|v| v.data.to_vec());
                        info.imm_data.extend(data);
                    }
                    info.exprs.push(name);
                }
            }
            _ => {}
        }
    }
    Some(info)
}

fn parse_elems(r: &Reply) -> Vec<Elem> {
    let Some(list) = r.attrs().find(NFTA_SET_ELEM_LIST_ELEMENTS) else {
        return Vec::new();
    };
    list.nested()
        .filter_map(|el| {
            let mut e = Elem {
                key: Vec::new(),
                data: None,
                comment: None,
            };
            for a in el.nested() {
                match a.ty {
                    NFTA_SET_ELEM_KEY => e.key = a.nested().find(NFTA_DATA_VALUE)?.data.to_vec(),
                    NFTA_SET_ELEM_DATA => e.data = parse_data(AttrIter::new(a.data)),
                    NFTA_SET_ELEM_USERDATA => e.comment = parse_comment_udata(a.data),
                    _ => {}
                }
            }
            Some(e)
        })
        .collect()
}

fn parse_data(mut attrs: AttrIter<'_>) -> Option<ElemData> {
    let a = attrs.next()?;
    match a.ty {
        NFTA_DATA_VALUE => Some(ElemData::Value(a.data.to_vec())),
        NFTA_DATA_VERDICT => {
            let code = a.nested().find(NFTA_VERDICT_CODE)?.be32()? as i32;
            let chain = a.nested().find(NFTA_VERDICT_CHAIN).map(|c| c.str());
            Some(ElemData::Verdict(match (code, chain) {
                (0, _) => expr::Verdict::Drop,
                (1, _) => expr::Verdict::Accept,
                (-3, Some(c)) => expr::Verdict::Jump(c),
                (-4, Some(c)) => expr::Verdict::Goto(c),
                _ => expr::Verdict::Return,
            }))
        }
        _ => None,
    }
}

/// A set key or map data field of an address, padded to registers.
pub fn addr_field(addr: IpAddr) -> Vec<u8> {
    expr::pad4(expr::ip_bytes(addr))
}

/// A set key or map data field of a port (network byte order, padded).
pub fn port_field(port: u16) -> Vec<u8> {
    expr::pad4(port.to_be_bytes().to_vec())
}

/// A set key field of an IP protocol number (padded).
pub fn proto_field(proto: u8) -> Vec<u8> {
    expr::pad4(vec![proto])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_comments_use_the_nft_udata_format() {
        let u = comment_udata("abc");
        assert_eq!(u, vec![0, 4, b'a', b'b', b'c', 0]);
        assert_eq!(parse_comment_udata(&u).as_deref(), Some("abc"));
        // Other TLVs before the comment are skipped.
        let mut v = vec![1, 1, 9];
        v.extend_from_slice(&u);
        assert_eq!(parse_comment_udata(&v).as_deref(), Some("abc"));
        assert_eq!(comment_udata(&"x".repeat(300)).len(), 2 + MAX_COMMENT_LEN);
    }

    #[test]
    fn netfilter_concat_types_follow_nft() {
        // ipv4_addr . inet_service, as nft computes it.
        assert_eq!(types::concat(&[types::IPADDR, types::INET_SERVICE]), 461);
        assert_eq!(types::concat(&[types::INET_SERVICE]), 13);
    }
}

#[cfg(test)]
pub(crate) mod kernel_tests {
    use super::expr::*;
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    /// `nft list ruleset` inside `ns`.
    pub(crate) fn nft_list(ns: &NetNs) -> String {
        let out = ns
            .run(|| {
                std::process::Command::new("nft")
                    .args(["list", "ruleset"])
                    .output()
            })
            .unwrap()
            .expect("run nft");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn netfilter_nft_batch_builds_what_nft_lists() {
        if !privileged("netfilter_nft_batch_builds_what_nft_lists") {
            return;
        }
        let ns = new_netns();
        let mut nft = Nft::open_in(&ns).unwrap();
        assert!(nft.available());
        let f = Family::Inet;
        let mut b = Batch::new();
        b.add_table(f, "t");
        b.add_chain(
            f,
            "t",
            "pre",
            Some(&BaseChain {
                hook: Hook::Prerouting,
                priority: PRIORITY_DSTNAT,
                chain_type: "nat",
            }),
        );
        b.add_chain(f, "t", "ports", None);
        let map = SetSpec {
            name: "m4".into(),
            id: 1,
            flags: SET_MAP,
            key_type: types::concat(&[types::INET_PROTOCOL, types::INET_SERVICE]),
            key_len: 8,
            data: Some((types::concat(&[types::IPADDR, types::INET_SERVICE]), 8)),
        };
        b.add_set(f, "t", &map);
        let mut r = match_fib_daddr_local();
        r.push(Expr::Immediate(Verdict::Jump("ports".into())));
        b.add_rule(f, "t", "pre", &r, Some("skeleton"));
        let mut r = match_nfproto(crate::IpFamily::V4);
        r.extend([
            Expr::Meta {
                key: MetaKey::L4Proto,
                dreg: reg32(0),
            },
            Expr::Payload {
                base: PayloadBase::Transport,
                offset: 2,
                len: 2,
                dreg: reg32(1),
            },
            Expr::Lookup {
                set: "m4".into(),
                set_id: Some(1),
                sreg: reg32(0),
                dreg: Some(reg32(0)),
                invert: false,
            },
            Expr::Nat {
                kind: NatType::Dnat,
                family: NFPROTO_IPV4,
                addr_reg: reg32(0),
                port_reg: Some(reg32(1)),
            },
        ]);
        b.add_rule(f, "t", "ports", &r, None);
        let mut key = proto_field(6);
        key.extend(port_field(8080));
        let mut data = addr_field("10.1.2.3".parse().unwrap());
        data.extend(port_field(80));
        b.add_elems(
            f,
            "t",
            "m4",
            &[Elem {
                key: key.clone(),
                data: Some(ElemData::Value(data.clone())),
                comment: Some("owner a".into()),
            }],
            true,
            "element",
        );
        nft.commit(&b).unwrap();
        let listed = nft_list(&ns);
        eprintln!("{listed}");
        let got = nft.get_elem(f, "t", "m4", &key).unwrap().unwrap();
        assert_eq!(got.comment.as_deref(), Some("owner a"));
        assert_eq!(got.data, Some(ElemData::Value(data)));
        let rules = nft.rules(f, "t", "pre").unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].comment.as_deref(), Some("skeleton"));
        // A failing batch applies nothing.
        let mut bad = Batch::new();
        bad.add_chain(f, "t", "other", None);
        let other = ElemData::Value(vec![10, 9, 9, 9, 0, 81, 0, 0]);
        bad.add_elems(
            f,
            "t",
            "m4",
            &[Elem {
                key: key.clone(),
                data: Some(other),
                comment: None,
            }],
            true,
            "dup",
        );
        let e = nft.commit(&bad).unwrap_err();
        assert!(crate::netlink::is_exists(&e), "{e}");
        assert!(e.to_string().contains("add dup to m4"), "{e}");
        assert!(!nft.has_chain(f, "t", "other").unwrap());
        assert!(nft.has_chain(f, "t", "ports").unwrap());
    }
}
