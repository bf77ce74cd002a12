//! The nftables backend: the Go plugin's iptables rules (see [`super::ipt`])
//! written over netlink in the encoding iptables-nft itself uses, into
//! iptables-nft's tables `ip filter` and `ip6 filter`, with no process.
//!
//! Upstream's firewall plugin has no nftables backend (it takes
//! `"backend": "nftables"` for its default: firewalld, else iptables), and
//! on a node with iptables-nft its iptables rules *are* nf_tables rules.
//! So writing them ourselves makes the two sides' state one: upstream's
//! DEL (`iptables -D`) removes what we wrote, ours removes what it wrote,
//! `iptables-save` shows both the same, and the accept rules sit in the
//! FORWARD chain that an iptables `-P FORWARD DROP` governs.
//!
//! How: the filter table is read with one netlink dump and each rule of
//! the shapes the plugin uses is rendered to its `iptables-save` line
//! ([`render`]); the same decision code as the iptables backend turns
//! that into a change list (the lines of an `iptables-restore`), which is
//! encoded back into nf_tables messages ([`encode`]) and sent as one
//! atomic batch. A rule of any other shape renders as a line that matches
//! nothing of ours, so it is never touched.
//!
//! Encoding, as iptables-nft 1.8 writes it: `-s`/`-d` a payload load of
//! the address field and a `cmp eq`; `-i`/`-o` a `meta iifname`/`oifname`
//! load and a `cmp` of the name with its NUL; `-m comment` and `-m
//! conntrack` the xtables matches through `nft_compat` (`match` with the
//! match's info struct); a `counter`; the verdict. The unit tests compare
//! it with what `iptables` writes on the same kernel.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use libcni::netfilter::iptables::{self, IptTable, Restore, SavedTable};
use libcni::netfilter::iptables_nft::{
    be32, comment_info, data_value, family, is_changed, ATTEMPTS,
};
use libcni::netfilter::nft::expr::{CmpOp, Expr, MetaKey, PayloadBase, Verdict, REG_1};
use libcni::netfilter::nft::wire::AttrIter;
use libcni::netfilter::nft::{BaseChain, Batch, Hook, Nft, RawExpr, RawRule};
use libcni::{Error, Result};

/// iptables-nft's table.
const TABLE: &str = "filter";

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
fn conntrack_info() -> Vec<u8> {
    let mut info = vec![0u8; CONNTRACK_INFO_LEN];
    info[CONNTRACK_MATCH_FLAGS..CONNTRACK_MATCH_FLAGS + 2]
        .copy_from_slice(&XT_CONNTRACK_STATE.to_ne_bytes());
    info[CONNTRACK_STATE_MASK..CONNTRACK_STATE_MASK + 2]
        .copy_from_slice(&CTSTATE_RELATED_ESTABLISHED.to_ne_bytes());
    info
}

/// Where an address field is in the IPv4 or IPv6 header.
fn addr_field(v6: bool, source: bool) -> (u32, u32) {
    libcni::netfilter::nft::expr::ip_addr_offset(v6, source)
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The expressions of a rule line of the shapes the plugin writes (`-A
/// CHAIN` then `-s`/`-d` of a host, `-i`, `[!] -o`, `-m comment
/// --comment`, `-m conntrack --ctstate RELATED,ESTABLISHED`, `-j`), in
/// iptables-nft's order; `None` for anything else.
pub fn encode(line: &str, v6: bool) -> Option<(String, Vec<Expr>)> {
    let tokens = iptables::split_tokens(line);
    let mut it = tokens.iter().map(String::as_str).peekable();
    if it.next()? != "-A" {
        return None;
    }
    let chain = it.next()?.to_string();
    let (mut iface, mut addrs, mut matches) = (Vec::new(), Vec::new(), Vec::new());
    let mut verdict = None;
    while let Some(t) = it.next() {
        match t {
            "-s" | "-d" => {
                let (host, len) = it.next()?.split_once('/')?;
                let a: IpAddr = host.parse().ok()?;
                let full = if v6 { "128" } else { "32" };
                if a.is_ipv6() != v6 || len != full {
                    return None;
                }
                let (offset, flen) = addr_field(v6, t == "-s");
                addrs.push(Expr::Payload {
                    base: PayloadBase::Network,
                    offset,
                    len: flen,
                    dreg: REG_1,
                });
                addrs.push(Expr::Cmp {
                    sreg: REG_1,
                    op: CmpOp::Eq,
                    data: addr_bytes(a),
                });
            }
            "-i" | "-o" | "!" => {
                let (op, opt) = if t == "!" {
                    (CmpOp::Neq, it.next()?)
                } else {
                    (CmpOp::Eq, t)
                };
                let name = it.next()?;
                if name.ends_with('+') || name.len() > 15 {
                    return None;
                }
                let key = match opt {
                    "-i" => MetaKey::IifName,
                    "-o" => MetaKey::OifName,
                    _ => return None,
                };
                let mut data = name.as_bytes().to_vec();
                data.push(0);
                iface.push(Expr::Meta { key, dreg: REG_1 });
                iface.push(Expr::Cmp {
                    sreg: REG_1,
                    op,
                    data,
                });
            }
            "-m" => match it.next()? {
                "comment" => {
                    if it.next()? != "--comment" {
                        return None;
                    }
                    matches.push(Expr::Match {
                        name: "comment".into(),
                        rev: 0,
                        info: comment_info(it.next()?),
                    });
                }
                "conntrack" => {
                    if it.next()? != "--ctstate" || it.next()? != "RELATED,ESTABLISHED" {
                        return None;
                    }
                    matches.push(Expr::Match {
                        name: "conntrack".into(),
                        rev: 3,
                        info: conntrack_info(),
                    });
                }
                _ => return None,
            },
            "-j" => {
                verdict = Some(match it.next()? {
                    "ACCEPT" => Verdict::Accept,
                    "DROP" => Verdict::Drop,
                    "RETURN" => Verdict::Return,
                    target => Verdict::Jump(target.to_string()),
                });
            }
            _ => return None,
        }
    }
    // iptables-nft: interfaces, then addresses, then matches, the
    // counter, the target.
    let mut exprs = iface;
    exprs.extend(addrs);
    exprs.extend(matches);
    exprs.push(Expr::Counter);
    if let Some(v) = verdict {
        exprs.push(Expr::Immediate(v));
    }
    Some((chain, exprs))
}

/// The `iptables-save` line of a rule read back, for the shapes
/// [`encode`] writes (and the same rules written by iptables-nft); a line
/// that matches nothing of ours for anything else.
pub fn render(rule: &RawRule, v6: bool) -> String {
    render_known(rule, v6)
        .unwrap_or_else(|| format!("-A {} #unrecognised-rule-{}", rule.chain, rule.handle))
}

fn render_known(rule: &RawRule, v6: bool) -> Option<String> {
    let (mut src, mut dst, mut iif, mut oif) = (None, None, None, None);
    let mut matches: Vec<String> = Vec::new();
    let mut target = None;
    let mut exprs = rule.exprs.iter().peekable();
    while let Some(RawExpr { name, data }) = exprs.next() {
        match name.as_str() {
            "payload" => {
                let (base, offset, len) = (be32(data, 2)?, be32(data, 3)?, be32(data, 4)?);
                let cmp = exprs.next().filter(|e| e.name == "cmp")?;
                if base != PayloadBase::Network as u32 || be32(&cmp.data, 2)? != CmpOp::Eq as u32 {
                    return None;
                }
                let value = data_value(&cmp.data, 3)?;
                let addr: IpAddr = match value.len() {
                    4 if !v6 => <[u8; 4]>::try_from(value.as_slice()).ok()?.into(),
                    16 if v6 => <[u8; 16]>::try_from(value.as_slice()).ok()?.into(),
                    _ => return None,
                };
                let host = super::ipt::host(addr);
                match (offset, len) {
                    f if f == addr_field(v6, true) => src = Some(host),
                    f if f == addr_field(v6, false) => dst = Some(host),
                    _ => return None,
                }
            }
            "meta" => {
                let key = be32(data, 2)?;
                let cmp = exprs.next().filter(|e| e.name == "cmp")?;
                let neg = match be32(&cmp.data, 2)? {
                    op if op == CmpOp::Eq as u32 => false,
                    op if op == CmpOp::Neq as u32 => true,
                    _ => return None,
                };
                let value = data_value(&cmp.data, 3)?;
                // A name with its NUL; without one it is a prefix (`+`).
                let name = match value.iter().position(|&b| b == 0) {
                    Some(i) => String::from_utf8(value[..i].to_vec()).ok()?,
                    None => format!("{}+", String::from_utf8(value).ok()?),
                };
                let slot = if key == MetaKey::IifName as u32 {
                    &mut iif
                } else if key == MetaKey::OifName as u32 {
                    &mut oif
                } else {
                    return None;
                };
                *slot = Some((neg, name));
            }
            "match" => {
                let a = AttrIter::new(data);
                let mname = a.clone().find(1)?.str();
                let rev = a.clone().find(2)?.be32()?;
                let info = a.clone().find(3)?.data;
                match (mname.as_str(), rev) {
                    ("comment", 0) => {
                        let end = info.iter().position(|&b| b == 0).unwrap_or(info.len());
                        let c = String::from_utf8(info[..end].to_vec()).ok()?;
                        matches.push(format!("-m comment --comment {}", iptables::quote(&c)));
                    }
                    ("conntrack", 3) if info == conntrack_info().as_slice() => {
                        matches.push("-m conntrack --ctstate RELATED,ESTABLISHED".into());
                    }
                    _ => return None,
                }
            }
            "counter" => {}
            "immediate" => {
                let v = AttrIter::new(data).find(2)?;
                let verdict = v.nested().find(2)?;
                let code = verdict.nested().find(1)?.be32()? as i32;
                target = Some(match code {
                    1 => "ACCEPT".to_string(),
                    0 => "DROP".to_string(),
                    -5 => "RETURN".to_string(),
                    -3 => verdict.nested().find(2)?.str(),
                    _ => return None,
                });
            }
            _ => return None,
        }
    }
    let mut s = format!("-A {}", rule.chain);
    for (opt, v) in [("-s", src), ("-d", dst)] {
        if let Some(v) = v {
            s.push_str(&format!(" {opt} {v}"));
        }
    }
    for (opt, v) in [("-i", iif), ("-o", oif)] {
        if let Some((neg, name)) = v {
            s.push_str(&format!("{} {opt} {name}", if neg { " !" } else { "" }));
        }
    }
    for m in matches {
        s.push(' ');
        s.push_str(&m);
    }
    if let Some(t) = target {
        s.push_str(&format!(" -j {t}"));
    }
    Some(s)
}

/// The (chain, handle) of each rule line read back.
pub type Handles = HashMap<String, Vec<(String, u64)>>;

/// The chains whose rules the plugin's decisions look at (the admin chain
/// only matters by existence).
const READ_CHAINS: [&str; 5] = [
    "FORWARD",
    super::ipt::FORWARD_CHAIN,
    super::ipt::OWNERS_CHAIN,
    super::ipt::ISOLATION_STAGE_1,
    super::ipt::ISOLATION_STAGE_2,
];

/// The family's filter table, read over netlink: as `iptables-save` would
/// print it (every chain, and the rule lines of the plugin's chains), and
/// the handles of each line.
pub fn read(nft: &mut Nft, v6: bool) -> Result<(SavedTable, Handles)> {
    let fam = family(v6);
    let chains: BTreeSet<String> = nft.chain_names(fam, TABLE)?.into_iter().collect();
    let mut saved = SavedTable {
        chains,
        rules: Vec::new(),
    };
    let mut handles: Handles = HashMap::new();
    // Only the chains the plugin writes: a node's filter table may hold
    // thousands of other rules (kube-proxy's), which are not read.
    let mut rules = Vec::new();
    for chain in READ_CHAINS {
        if saved.chains.contains(chain) {
            rules.extend(nft.rules_raw(fam, TABLE, Some(chain))?);
        }
    }
    for rule in rules {
        let line = render(&rule, v6);
        handles
            .entry(line.clone())
            .or_default()
            .push((rule.chain.clone(), rule.handle));
        saved.rules.push(line);
    }
    Ok((saved, handles))
}

/// The batch of a change list, against what `read` found. The table and
/// its FORWARD base chain are created first when missing, as iptables-nft
/// does (hook forward, priority filter, policy accept).
fn translate(r: &Restore, v6: bool, saved: &SavedTable, handles: &mut Handles) -> Result<Batch> {
    let fam = family(v6);
    let mut b = Batch::new();
    if r.is_empty() {
        return Ok(b);
    }
    if !saved.has_chain("FORWARD") {
        b.add_table(fam, TABLE);
        b.add_chain(
            fam,
            TABLE,
            "FORWARD",
            Some(&BaseChain {
                hook: Hook::Forward,
                priority: 0,
                chain_type: "filter",
            }),
        );
    }
    let unsupported = |l: &str| Error::Internal(format!("firewall nftables: cannot encode {l:?}"));
    for l in r.lines() {
        let (cmd, rest) = l.split_once(' ').unwrap_or((l.as_str(), ""));
        match cmd {
            "-N" => b.create_chain(fam, TABLE, rest),
            "-F" => b.flush_chain(fam, TABLE, rest),
            "-X" => b.del_chain(fam, TABLE, rest),
            "-A" => {
                let (chain, exprs) = encode(l, v6).ok_or_else(|| unsupported(l))?;
                b.add_rule(fam, TABLE, &chain, &exprs, None);
            }
            "-I" => {
                // `-I CHAIN 1 <args>` (the only insert the plugin makes).
                let (chain, args) = rest.split_once(' ').ok_or_else(|| unsupported(l))?;
                let args = args.strip_prefix("1 ").ok_or_else(|| unsupported(l))?;
                let (_, exprs) =
                    encode(&format!("-A {chain} {args}"), v6).ok_or_else(|| unsupported(l))?;
                b.insert_rule(fam, TABLE, chain, &exprs);
            }
            "-D" => {
                let line = format!("-A {rest}");
                // Deleted meanwhile: the read found it, so it is gone.
                if let Some((chain, h)) = handles.get_mut(&line).and_then(Vec::pop) {
                    b.del_rule(fam, TABLE, &chain, h);
                }
            }
            _ => return Err(unsupported(l)),
        }
    }
    Ok(b)
}

/// One read of the family's filter table, the changes `build` derives
/// from it, one batch (none when there is nothing to change); retried on
/// a fresh read when another process changed the table in between.
pub fn apply(v6: bool, build: &dyn Fn(&SavedTable, &mut Restore)) -> Result<()> {
    with_nft(|nft| apply_with(nft, v6, build))
}

thread_local! {
    /// One nf_tables socket per thread for both families: closing a socket
    /// that deleted rules waits for an RCU grace period, paid once.
    static NFT: std::cell::RefCell<Option<Nft>> = const { std::cell::RefCell::new(None) };
}

fn with_nft<T>(f: impl FnOnce(&mut Nft) -> Result<T>) -> Result<T> {
    NFT.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(Nft::open()?);
        }
        match slot.as_mut() {
            Some(nft) => f(nft),
            None => Err(Error::Internal("nf_tables socket".into())),
        }
    })
}

fn apply_with(nft: &mut Nft, v6: bool, build: &dyn Fn(&SavedTable, &mut Restore)) -> Result<()> {
    let mut attempt = 1;
    loop {
        let (saved, mut handles) = read(nft, v6)?;
        let mut r = Restore::new(IptTable::Filter);
        build(&saved, &mut r);
        let b = translate(&r, v6, &saved, &mut handles)?;
        if b.is_empty() {
            return Ok(());
        }
        match nft.commit(&b) {
            Ok(()) => return Ok(()),
            Err(e) if attempt < ATTEMPTS && is_changed(&e) => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The family's filter table as `iptables-save` would print it, read over
/// netlink (CHECK).
pub fn saved(v6: bool) -> Result<SavedTable> {
    with_nft(|nft| Ok(read(nft, v6)?.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::netfilter::testing::run_in;
    use libcni::netns::testing::{new_netns, privileged};

    const LINES: [&str; 6] = [
        "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD",
        "-A CNI-FORWARD -d 10.88.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "-A CNI-FORWARD -s 10.88.0.2/32 -j ACCEPT",
        "-A CNI-ISOLATION-STAGE-1 -i cni-podman0 ! -o cni-podman0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\" -j CNI-ISOLATION-STAGE-2",
        "-A CNI-ISOLATION-STAGE-1 -i br1 -o br1 -m comment --comment x -j DROP",
        "-A CNI-FORWARD-OWNERS -s 10.88.0.3/32 -m comment --comment \"name: \\\"n\\\" id: \\\"c\\\"\"",
    ];

    #[test]
    fn netfilter_firewall_native_encodes_only_its_shapes() {
        for l in LINES {
            assert!(encode(l, false).is_some(), "{l}");
        }
        assert!(encode("-A CNI-FORWARD -s fd00::2/128 -j ACCEPT", true).is_some());
        for bad in [
            "-A X -s 10.0.0.0/8 -j ACCEPT",
            "-A X -s fd00::2/128 -j ACCEPT",
            "-A X -p tcp -j ACCEPT",
            "-A X -i br+ -j DROP",
            "-A X -m conntrack --ctstate NEW -j ACCEPT",
            "-N X",
        ] {
            assert!(encode(bad, false).is_none(), "{bad}");
        }
    }

    /// What iptables-nft writes for each shape, read back and rendered,
    /// is the line; and what we write, `iptables-save` prints as the line
    /// and `iptables -D` deletes.
    #[test]
    fn netfilter_firewall_native_matches_iptables_nft() {
        if !privileged("netfilter_firewall_native_matches_iptables_nft") {
            return;
        }
        let chains = [
            "CNI-FORWARD",
            "CNI-ISOLATION-STAGE-1",
            "CNI-ISOLATION-STAGE-2",
            "CNI-FORWARD-OWNERS",
        ];
        // iptables writes, we read.
        let node = new_netns();
        for c in chains {
            run_in(&node, "iptables", &["-N", c]);
        }
        for l in LINES {
            let args = iptables::split_tokens(l);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_in(&node, "iptables", &args);
        }
        let (saved, _) = node
            .run(|| read(&mut Nft::open()?, false))
            .unwrap()
            .unwrap();
        let mut got = saved.rules.clone();
        got.sort();
        let mut want: Vec<String> = LINES.iter().map(|l| l.to_string()).collect();
        want.sort();
        assert_eq!(got, want);
        // We write (into a fresh node, the table made by us), iptables reads.
        let node = new_netns();
        node.run(|| {
            apply(false, &|saved, r| {
                for c in chains {
                    if !saved.has_chain(c) {
                        r.create_chain(c);
                    }
                }
                for l in LINES {
                    r.append(l.to_string());
                }
            })
        })
        .unwrap()
        .unwrap();
        let text = run_in(&node, "iptables-save", &["-t", "filter"]);
        for l in LINES {
            assert!(text.lines().any(|t| t == l), "{l:?} not in\n{text}");
        }
        // And iptables finds our rules: -C, then -D, each of them.
        for l in LINES {
            let mut args: Vec<String> = iptables::split_tokens(l);
            args[0] = "-C".into();
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            run_in(&node, "iptables", &a);
            args[0] = "-D".into();
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            run_in(&node, "iptables", &a);
        }
        let text = run_in(&node, "iptables-save", &["-t", "filter"]);
        assert!(!text.contains("-A "), "{text}");
    }
}
