//! iptables rules spoken over netlink in iptables-nft's own encoding, with
//! no process: the `nat` table (portmap's and ipMasq's rules, [`nat`]) and
//! the `filter` table (the firewall's, [`filter`]).
//!
//! One flow for both tables: the chains a decision needs are read (their
//! existence, and the rules of a few), each rule of a known shape is
//! rendered to its `iptables-save` line ([`render`]), the iptables
//! backend's own decision code turns that into a change list (the lines of
//! an `iptables-restore`), and the list is encoded back ([`encode`]) into
//! one atomic nf_tables batch ([`translate`], [`apply`]). A rule of any
//! other shape renders as a line that matches nothing of ours, so a node's
//! other rules (kube-proxy's) are never touched.

mod encode;
pub mod filter;
pub mod nat;
mod render;

use std::collections::{BTreeSet, HashMap};

pub use self::encode::{encode, Encoded};
pub use self::render::render;
use super::iptables::{self, IptTable, Restore, SavedTable};
use super::nft::{BaseChain, Batch, Family, Hook, Nft, RawRule, XtPlacement};
use super::wire::AttrIter;
use crate::IpFamily;
use crate::{Error, Result};

/// The table of iptables-nft a flow writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Nat,
    Filter,
}

impl Table {
    pub fn name(self) -> &'static str {
        match self {
            Table::Nat => "nat",
            Table::Filter => "filter",
        }
    }

    fn ipt(self) -> IptTable {
        match self {
            Table::Nat => IptTable::Nat,
            Table::Filter => IptTable::Filter,
        }
    }

    /// The base chains iptables-nft makes when a rule goes into one:
    /// name, hook, priority.
    fn base_chains(self) -> &'static [(&'static str, Hook, i32)] {
        match self {
            Table::Nat => &[
                ("PREROUTING", Hook::Prerouting, -100),
                ("INPUT", Hook::Input, 100),
                ("OUTPUT", Hook::Output, -100),
                ("POSTROUTING", Hook::Postrouting, 100),
            ],
            Table::Filter => &[
                ("INPUT", Hook::Input, 0),
                ("FORWARD", Hook::Forward, 0),
                ("OUTPUT", Hook::Output, 0),
            ],
        }
    }
}

/// How often a batch is tried when the table changed between our read
/// and our batch (a chain created or a rule deleted meanwhile).
pub const ATTEMPTS: usize = 3;

/// `sizeof(struct xt_comment_info)`: `char comment[256]`.
const COMMENT_INFO_LEN: usize = 256;

/// `-m comment --comment <c>`'s info (NUL-terminated, cut at 255 bytes).
pub fn comment_info(c: &str) -> Vec<u8> {
    let mut info = vec![0u8; COMMENT_INFO_LEN];
    let b = c.as_bytes();
    let n = b.len().min(COMMENT_INFO_LEN - 1);
    info[..n].copy_from_slice(&b[..n]);
    info
}

/// The value of a nested `NFTA_DATA_VALUE` (in attribute `ty` of `data`).
pub fn data_value(data: &[u8], ty: u16) -> Option<Vec<u8>> {
    let a = AttrIter::new(data).find(ty)?;
    Some(a.nested().find(1)?.data.to_vec())
}

/// A big-endian `u32` attribute `ty` of `data`.
pub fn be32(data: &[u8], ty: u16) -> Option<u32> {
    AttrIter::new(data).find(ty)?.be32()
}

/// Whether a batch failed because the table changed after our read.
pub fn is_changed(e: &Error) -> bool {
    crate::netlink::is_not_found(e) || e.to_string().contains("File exists")
}

/// The (chain, handle) of each rule line read back.
pub type Handles = HashMap<String, Vec<(String, u64)>>;

/// Reads the rules of `chains` (those of them in `saved`) into `saved`
/// and `handles`.
fn read_rules(
    nft: &mut Nft,
    table: Table,
    family: IpFamily,
    chains: impl IntoIterator<Item = String>,
    saved: &mut SavedTable,
) -> Result<Handles> {
    let mut handles = Handles::new();
    for chain in chains {
        if !saved.chains.contains(&chain) {
            continue;
        }
        for rule in nft.rules_raw(Family::of(family), table.name(), Some(&chain))? {
            push_rule(saved, &mut handles, &rule, family);
        }
    }
    Ok(handles)
}

/// Adds a rule read back to `saved` and `handles`.
pub fn push_rule(saved: &mut SavedTable, handles: &mut Handles, rule: &RawRule, family: IpFamily) {
    let line = render(rule, family);
    handles
        .entry(line.clone())
        .or_default()
        .push((rule.chain.clone(), rule.handle));
    saved.rules.push(line);
}

/// The batch of a change list against what was read, and the batch index
/// of each rule line appended or inserted with `echo` (those whose chain
/// `echo` accepts; an inserted one as its `-A` line). The table and the
/// base chains the list writes to are created first when missing, as
/// iptables-nft does. Every rule carries `NFTA_RULE_COMPAT`, as
/// iptables-nft's do.
pub fn translate(
    table: Table,
    r: &Restore,
    family: IpFamily,
    saved: &SavedTable,
    handles: &mut Handles,
    echo: &dyn Fn(&str) -> bool,
) -> Result<(Batch, Vec<(usize, String)>)> {
    let fam = Family::of(family);
    let name = table.name();
    let mut b = Batch::new();
    let mut echoed = Vec::new();
    if r.is_empty() {
        return Ok((b, echoed));
    }
    b.add_table(fam, name);
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
    for &(base, hook, priority) in table.base_chains() {
        if written.contains(base) && !saved.has_chain(base) {
            b.add_chain(
                fam,
                name,
                base,
                Some(&BaseChain {
                    hook,
                    priority,
                    chain_type: name,
                }),
            );
        }
    }
    for c in r.declared() {
        if saved.has_chain(c) {
            b.flush_chain(fam, name, c);
        } else {
            b.add_chain(fam, name, c, None);
        }
    }
    let unsupported = |l: &str| Error::Internal(format!("iptables {name}: cannot encode {l:?}"));
    for l in r.lines() {
        let (cmd, rest) = l.split_once(' ').unwrap_or((l.as_str(), ""));
        match cmd {
            "-N" => b.create_chain(fam, name, rest),
            "-F" => b.flush_chain(fam, name, rest),
            "-X" => b.del_chain(fam, name, rest),
            "-A" => {
                let e = encode(l, family).ok_or_else(|| unsupported(l))?;
                let place = if echo(&e.chain) {
                    XtPlacement::AppendEcho
                } else {
                    XtPlacement::Append
                };
                let i = b.add_rule_xt(fam, name, &e.chain, &e.exprs, e.proto, place);
                if place == XtPlacement::AppendEcho {
                    echoed.push((i, l.clone()));
                }
            }
            "-I" => {
                let (chain, args) = rest.split_once(' ').ok_or_else(|| unsupported(l))?;
                let args = args.strip_prefix("1 ").ok_or_else(|| unsupported(l))?;
                let line = format!("-A {chain} {args}");
                let e = encode(&line, family).ok_or_else(|| unsupported(l))?;
                let place = if echo(chain) {
                    XtPlacement::FirstEcho
                } else {
                    XtPlacement::First
                };
                let i = b.add_rule_xt(fam, name, chain, &e.exprs, e.proto, place);
                if place == XtPlacement::FirstEcho {
                    echoed.push((i, line));
                }
            }
            "-D" => {
                let line = format!("-A {rest}");
                if let Some((chain, h)) = handles.get_mut(&line).and_then(Vec::pop) {
                    b.del_rule(fam, name, &chain, h);
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
/// added to chains `echo` accepts: (`-A` line, chain, handle).
pub fn apply(
    table: Table,
    nft: &mut Nft,
    family: IpFamily,
    read: &mut Reader,
    build: &mut dyn FnMut(&SavedTable, &mut Restore),
    echo: &dyn Fn(&str) -> bool,
) -> Result<Vec<(String, String, u64)>> {
    let mut attempt = 1;
    loop {
        let (saved, mut handles) = read(nft)?;
        let mut r = Restore::new(table.ipt());
        build(&saved, &mut r);
        let (b, echoed) = translate(table, &r, family, &saved, &mut handles, echo)?;
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
mod tests;
