//! The MAC spoof check of bridge `macspoofchk`, as the Go plugin builds it
//! (`pkg/link/spoofcheck.go`): in table `bridge nat`, base chain
//! `PREROUTING` (filter, prerouting, priority -300) holds
//! `iifname <host veth> jump cni-br-iface-<cid>-<if>`, which jumps to
//! `cni-br-iface-<cid>-<if>-mac`: `ether saddr <mac> return`, then `drop`.
//! Every rule carries the comment `macspoofchk-<cid>-<if>`. Frames from the
//! container's host veth with another source MAC are dropped.
//!
//! Setup is one batch, replacing an earlier setup of the same attachment;
//! teardown removes the jump rule and both chains by name, with nothing but
//! the container ID and interface name.

use super::nft::expr::{self, CmpOp, Expr, PayloadBase, Verdict, REG_1};
use super::nft::{BaseChain, Batch, Family, Hook, Nft};
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
pub fn attachments(nft: &mut Nft) -> Vec<String> {
    let chains: std::collections::BTreeSet<String> = nft
        .chain_names(F, TABLE)
        .unwrap_or_default()
        .into_iter()
        .collect();
    // An attachment's chain is the one with its `-mac` chain beside it.
    chains
        .iter()
        .filter(|c| chains.contains(&format!("{c}-mac")))
        .filter_map(|c| c.strip_prefix(IFACE_CHAIN_PREFIX).map(str::to_string))
        .collect()
}

fn comment(r: &str) -> String {
    format!("macspoofchk-{r}")
}

/// Drops frames from `host_ifname` whose source MAC is not `mac`, for the
/// attachment (`container_id`, `ifname`). Idempotent.
pub fn add(host_ifname: &str, mac: [u8; 6], container_id: &str, ifname: &str) -> Result<()> {
    let mut nft = Nft::open()?;
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

/// Removes the spoof check of (`container_id`, `ifname`); nothing there is
/// success.
pub fn del(container_id: &str, ifname: &str) -> Result<()> {
    let mut nft = Nft::open()?;
    teardown_ref(&mut nft, &ref_id(container_id, ifname))
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

/// GC: removes the spoof checks of attachments not in `valid` whose host
/// interface `is_ours` accepts (the caller's bridge ports, or interfaces
/// that no longer exist): the Go naming has no network, so the caller says
/// which interfaces belong to its network. Returns the removed references.
pub fn gc(valid: &[Attachment], is_ours: &dyn Fn(&str) -> bool) -> Result<Vec<String>> {
    let mut nft = Nft::open()?;
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
        if errors.record(teardown_ref(&mut nft, r)).is_some() {
            removed.push(r.to_string());
        }
    }
    errors.finish_first().map(|()| removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::nft::kernel_tests::nft_list;
    use crate::netfilter::testing::{peer_seen, run_in, Listener};
    use crate::netlink::Netlink;
    use crate::netns::testing::{new_netns, privileged};

    #[test]
    fn netfilter_spoofcheck_drops_other_source_macs_until_teardown() {
        if !privileged("netfilter_spoofcheck_drops_other_source_macs_until_teardown") {
            return;
        }
        // node: bridge br0 (10.1.0.1/24) with port vhost; pod: eth0 10.1.0.2.
        let node = new_netns();
        let pod = new_netns();
        run_in(&node, "ip", &["link", "add", "br0", "type", "bridge"]);
        run_in(&node, "ip", &["addr", "add", "10.1.0.1/24", "dev", "br0"]);
        run_in(&node, "ip", &["link", "set", "br0", "up"]);
        let mac = [0x02, 0, 0, 0, 0, 0x42];
        Netlink::open_in(&node)
            .unwrap()
            .add_veth("vhost", None, "eth0", &pod, Some(mac))
            .unwrap();
        run_in(
            &node,
            "ip",
            &["link", "set", "vhost", "master", "br0", "up"],
        );
        run_in(&pod, "ip", &["addr", "add", "10.1.0.2/24", "dev", "eth0"]);
        run_in(&pod, "ip", &["link", "set", "eth0", "up"]);
        let _l = Listener::start(&node, 7100);
        assert_eq!(
            peer_seen(&pod, "10.1.0.1", 7100).as_deref(),
            Some("10.1.0.2")
        );

        // The container's MAC passes.
        node.run(|| add("vhost", mac, "ctr-s", "eth0"))
            .unwrap()
            .unwrap();
        node.run(|| add("vhost", mac, "ctr-s", "eth0"))
            .unwrap()
            .unwrap();
        let listed = nft_list(&node);
        for want in [
            "table bridge nat {",
            // nft names the bridge family's -300 "dstnat".
            "type filter hook prerouting priority dstnat; policy accept;",
            "iifname \"vhost\" jump cni-br-iface-ctr-s-eth0 comment \"macspoofchk-ctr-s-eth0\"",
            "jump cni-br-iface-ctr-s-eth0-mac comment \"macspoofchk-ctr-s-eth0\"",
            "ether saddr 02:00:00:00:00:42 return comment \"macspoofchk-ctr-s-eth0\"",
            "drop comment \"macspoofchk-ctr-s-eth0\"",
        ] {
            assert!(listed.contains(want), "{want:?} not in\n{listed}");
        }
        assert_eq!(
            listed.matches("iifname \"vhost\"").count(),
            1,
            "setup is idempotent"
        );
        assert_eq!(
            peer_seen(&pod, "10.1.0.1", 7100).as_deref(),
            Some("10.1.0.2")
        );
        // A spoofed source MAC is dropped.
        run_in(
            &pod,
            "ip",
            &["link", "set", "eth0", "address", "02:00:00:00:00:99"],
        );
        run_in(&node, "ip", &["neigh", "flush", "dev", "br0"]);
        assert_eq!(peer_seen(&pod, "10.1.0.1", 7100), None);

        // GC with the attachment still valid keeps it; without, removes it.
        let valid = vec![Attachment {
            container_id: "ctr-s".into(),
            ifname: "eth0".into(),
        }];
        let removed = node.run(|| gc(&valid, &|_| true)).unwrap().unwrap();
        assert!(removed.is_empty());
        let removed = node.run(|| gc(&[], &|i| i != "vhost")).unwrap().unwrap();
        assert!(removed.is_empty(), "not ours: kept");
        node.run(|| del("ctr-s", "eth0")).unwrap().unwrap();
        node.run(|| del("ctr-s", "eth0")).unwrap().unwrap();
        let listed = nft_list(&node);
        assert!(!listed.contains("macspoofchk"), "{listed}");
        assert_eq!(
            peer_seen(&pod, "10.1.0.1", 7100).as_deref(),
            Some("10.1.0.2")
        );

        node.run(|| add("vhost", mac, "ctr-t", "eth0"))
            .unwrap()
            .unwrap();
        let removed = node.run(|| gc(&valid, &|i| i == "vhost")).unwrap().unwrap();
        assert_eq!(removed, vec!["ctr-t-eth0".to_string()]);
        assert!(!nft_list(&node).contains("cni-br-iface"));
    }
}
