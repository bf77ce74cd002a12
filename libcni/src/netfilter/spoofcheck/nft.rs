//! The spoof check in nf_tables, the Go plugin's table `bridge nat`.

use super::super::nft::expr::{self, CmpOp, Expr, PayloadBase, Verdict, REG_1};
use super::super::nft::{BaseChain, Batch, Family, Hook, Nft};
use crate::types::Attachment;
use crate::{ErrorList, Result};

/// The table and base chain the Go plugin uses.
pub const TABLE: &str = "nat";
pub const BASE_CHAIN: &str = "PREROUTING";
const F: Family = Family::Bridge;

/// How the chains and comments name an attachment: `<containerID>-<ifname>`,
/// as [`attachments`] lists them.
pub fn ref_id(container_id: &str, ifname: &str) -> String {
    format!("{container_id}-{ifname}")
}

fn iface_chain(r: &str) -> String {
    format!("{IFACE_CHAIN_PREFIX}{r}")
}

const IFACE_CHAIN_PREFIX: &str = "cni-br-iface-";

/// The attachment's chain (the one the jump rule targets).
pub fn chain_of(container_id: &str, ifname: &str) -> String {
    iface_chain(&ref_id(container_id, ifname))
}

/// The attachments whose spoof check is in the kernel, as [`ref_id`]s
/// (the two parts cannot be told apart when the container ID has a dash:
/// match them with [`ref_id`]), read from the chain names of `bridge nat`.
pub fn attachments(nft: &mut Nft) -> Result<Vec<String>> {
    let chains: std::collections::BTreeSet<String> =
        nft.chain_names(F, TABLE)?.into_iter().collect();
    // An attachment's chain is the one with its `-mac` chain beside it.
    Ok(chains
        .iter()
        .filter(|c| chains.contains(&format!("{c}-mac")))
        .filter_map(|c| c.strip_prefix(IFACE_CHAIN_PREFIX).map(str::to_string))
        .collect())
}

fn comment(r: &str) -> String {
    format!("macspoofchk-{r}")
}

/// [`super::add`], as one batch on `nft`.
pub fn add(
    nft: &mut Nft,
    host_ifname: &str,
    mac: [u8; 6],
    container_id: &str,
    ifname: &str,
) -> Result<()> {
    let r = ref_id(container_id, ifname);
    let iface = iface_chain(&r);
    let mac_chain = format!("{iface}-mac");
    let c = comment(&r);
    let mut b = Batch::new();
    b.add_table(F, TABLE);
    let base = BaseChain {
        hook: Hook::Prerouting,
        priority: -300,
        chain_type: "filter",
    };
    b.add_chain(F, TABLE, BASE_CHAIN, Some(&base));
    b.add_chain(F, TABLE, &iface, None);
    b.add_chain(F, TABLE, &mac_chain, None);
    for old in nft.rules(F, TABLE, BASE_CHAIN)? {
        if old.comment.as_deref() == Some(c.as_str()) {
            b.del_rule(F, TABLE, BASE_CHAIN, old.handle);
        }
    }
    b.flush_chain(F, TABLE, &iface);
    b.flush_chain(F, TABLE, &mac_chain);
    let mut jump = expr::match_ifname(true, CmpOp::Eq, host_ifname);
    jump.push(Expr::Immediate(Verdict::Jump(iface.clone())));
    b.add_rule(F, TABLE, BASE_CHAIN, &jump, Some(&c));
    b.add_rule(
        F,
        TABLE,
        &iface,
        &[Expr::Immediate(Verdict::Jump(mac_chain.clone()))],
        Some(&c),
    );
    let mac_rule = vec![
        Expr::Payload {
            base: PayloadBase::LinkLayer,
            offset: 6,
            len: 6,
            dreg: REG_1,
        },
        Expr::Cmp {
            sreg: REG_1,
            op: CmpOp::Eq,
            data: mac.to_vec(),
        },
        Expr::Immediate(Verdict::Return),
    ];
    b.add_rule(F, TABLE, &mac_chain, &mac_rule, Some(&c));
    b.add_rule(
        F,
        TABLE,
        &mac_chain,
        &[Expr::Immediate(Verdict::Drop)],
        Some(&c),
    );
    nft.commit(&b)
}

/// [`super::del`] on `nft`.
pub fn del(nft: &mut Nft, container_id: &str, ifname: &str) -> Result<()> {
    teardown_ref(nft, &ref_id(container_id, ifname))
}

fn teardown_ref(nft: &mut Nft, r: &str) -> Result<()> {
    if !nft.has_table(F, TABLE)? {
        return Ok(());
    }
    let iface = iface_chain(r);
    let mac_chain = format!("{iface}-mac");
    let c = comment(r);
    let mut b = Batch::new();
    for old in nft.rules(F, TABLE, BASE_CHAIN)? {
        if old.comment.as_deref() == Some(c.as_str()) {
            b.del_rule(F, TABLE, BASE_CHAIN, old.handle);
        }
    }
    for chain in [&iface, &mac_chain] {
        if nft.has_chain(F, TABLE, chain)? {
            b.flush_chain(F, TABLE, chain);
        }
    }
    for chain in [&iface, &mac_chain] {
        if nft.has_chain(F, TABLE, chain)? {
            b.del_chain(F, TABLE, chain);
        }
    }
    match nft.commit(&b) {
        Err(e) if crate::netlink::is_not_found(&e) => Ok(()),
        other => other,
    }
}

/// [`super::gc`] on `nft`.
pub fn gc(
    nft: &mut Nft,
    valid: &[Attachment],
    is_ours: &dyn Fn(&str) -> bool,
) -> Result<Vec<String>> {
    let valid_refs: Vec<String> = valid
        .iter()
        .map(|a| ref_id(&a.container_id, &a.ifname))
        .collect();
    let mut removed = Vec::new();
    let mut errors = ErrorList::new();
    for rule in nft.rules(F, TABLE, BASE_CHAIN)? {
        let Some(r) = rule
            .comment
            .as_deref()
            .and_then(|c| c.strip_prefix("macspoofchk-"))
        else {
            continue;
        };
        if valid_refs.iter().any(|v| v == r) {
            continue;
        }
        let host = rule
            .cmp_data
            .first()
            .map(|d| {
                String::from_utf8_lossy(d)
                    .trim_end_matches('\0')
                    .to_string()
            })
            .unwrap_or_default();
        if !is_ours(&host) {
            continue;
        }
        if errors.record(teardown_ref(nft, r)).is_some() {
            removed.push(r.to_string());
        }
    }
    errors.finish_first().map(|()| removed)
}
