//! Host ports on iptables: exactly the Go plugin's (nat table): `CNI-HOSTPORT-DNAT` jumped from
//! PREROUTING and OUTPUT for local destinations, a `CNI-DN-<hash>` chain per
//! container with the hairpin/localhost mark rules and the DNAT rules,
//! `CNI-HOSTPORT-SETMARK` and `CNI-HOSTPORT-MASQ`; see [`libcni::netfilter::iptables`].
//! The decisions (what to add, what to delete) are made on the table as
//! `iptables-save` shows it; this file applies them by `iptables-restore`
//! (legacy iptables), and [`crate::ipt_netlink`] writes them over netlink
//! where the node's iptables is iptables-nft. With no `backend` key the default is the Go plugin's:
//! iptables wherever the node has it ([`libcni::netfilter::default_backend`]).

use std::collections::BTreeSet;

use libcni::netfilter::iptables::{self, IptTable, Restore, SavedTable};
use libcni::netfilter::Owner;
use libcni::types::{Attachment, IpPrefix};
use libcni::IpFamily;
use libcni::{Error, Result};

use crate::spec::*;

/// `CNI-HOSTPORT-DNAT`: jumped to for local destinations.
pub const IPT_DNAT_CHAIN: &str = "CNI-HOSTPORT-DNAT";
/// `CNI-HOSTPORT-SETMARK`: sets the masquerade mark.
pub const IPT_SETMARK_CHAIN: &str = "CNI-HOSTPORT-SETMARK";
/// `CNI-HOSTPORT-MASQ`: masquerades marked packets.
pub const IPT_MASQ_CHAIN: &str = "CNI-HOSTPORT-MASQ";
/// The chain of old plugin versions' SNAT rules, cleaned up on DEL.
pub(crate) const IPT_OLD_SNAT_CHAIN: &str = "CNI-HOSTPORT-SNAT";

/// The per-container chain `CNI-DN-<21 hex>`.
pub fn dnat_chain(owner: &Owner) -> String {
    libcni::netfilter::go_chain_name("DN-", &owner.network, &owner.container_id)
}

fn mark_def(bit: u8) -> String {
    let v = 1u32 << bit;
    format!("{v:#x}/{v:#x}")
}

/// The Go plugin's comment of the entry rules.
fn dnat_comment(owner: &Owner) -> String {
    let mut c = format!(
        "dnat name: \"{}\" id: \"{}\"",
        owner.network, owner.container_id
    );
    // iptables comments hold 255 bytes (Go's trimComment).
    c.truncate(255);
    c
}

/// Ports of one protocol as multiport lists of at most 15.
fn port_lists(ports: &[u16]) -> Vec<String> {
    ports
        .chunks(15)
        .map(|c| c.iter().map(u16::to_string).collect::<Vec<_>>().join(","))
        .collect()
}

/// iptables ADD for one family: `CNI-DN-<hash>` rebuilt from scratch, its
/// entry rules replaced, the shared chains completed where missing. One
/// `iptables-save` and one `iptables-restore`.
pub fn add(spec: &PortMapSpec, family: IpFamily) -> Result<()> {
    if spec.container(family).is_none() || spec.mappings.is_empty() {
        return Ok(());
    }
    iptables::save_and_restore(family, IptTable::Nat, |saved, r| {
        add_changes(spec, family, saved, r)
    })
}

/// The changes of an iptables ADD for one family against the nat table
/// `saved` (what [`add`] restores and [`crate::ipt_netlink::add`] encodes).
pub(crate) fn add_changes(
    spec: &PortMapSpec,
    family: IpFamily,
    saved: &SavedTable,
    r: &mut Restore,
) {
    let Some(container) = spec.container(family) else {
        return;
    };
    if masquerades(spec) {
        masquerade_skeleton(spec, saved, r);
    }
    dnat_skeleton(saved, r);
    container_rules(spec, family, container, saved, r);
}

/// Whether `spec` masquerades through the shared chains: `snat` without
/// an external mark chain.
fn masquerades(spec: &PortMapSpec) -> bool {
    spec.snat && spec.external_set_mark_chain.is_none()
}

/// POSTROUTING's jump to `CNI-HOSTPORT-MASQ`.
fn masquerade_jump() -> String {
    iptables::rule_line(
        "POSTROUTING",
        &[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd requiring masquerade",
            "-j",
            IPT_MASQ_CHAIN,
        ],
    )
}

/// PREROUTING's and OUTPUT's jumps to `CNI-HOSTPORT-DNAT` for local
/// destinations.
fn dnat_jumps() -> [String; 2] {
    ["PREROUTING", "OUTPUT"].map(|chain| {
        iptables::rule_line(
            chain,
            &[
                "-m",
                "addrtype",
                "--dst-type",
                "LOCAL",
                "-j",
                IPT_DNAT_CHAIN,
            ],
        )
    })
}

/// Every jump from the base chains into the shared chains an ADD may
/// add, each a line as `iptables-save` shows it.
pub(crate) fn shared_jumps() -> Vec<String> {
    let mut v = dnat_jumps().to_vec();
    v.push(masquerade_jump());
    v
}

/// The jumps from the base chains into the shared chains an ADD of
/// `spec` needs.
pub(crate) fn shared_jumps_of(spec: &PortMapSpec) -> Vec<String> {
    let mut v = dnat_jumps().to_vec();
    if masquerades(spec) {
        v.push(masquerade_jump());
    }
    v
}

/// The shared chains and rules of `snat` (without an external mark chain):
/// the mark set on host port traffic, its masquerade, and POSTROUTING's
/// jump, each only when missing.
fn masquerade_skeleton(spec: &PortMapSpec, saved: &SavedTable, r: &mut Restore) {
    let mark = mark_def(spec.mark_bit);
    let setmark_rule = iptables::rule_line(
        IPT_SETMARK_CHAIN,
        &[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd masquerade mark",
            "-j",
            "MARK",
            "--set-xmark",
            &mark,
        ],
    );
    if !saved.has_chain(IPT_SETMARK_CHAIN) {
        r.declare(IPT_SETMARK_CHAIN);
    }
    if !saved.has_rule(&setmark_rule) {
        r.append(setmark_rule);
    }
    let masq_rule = iptables::rule_line(
        IPT_MASQ_CHAIN,
        &["-m", "mark", "--mark", &mark, "-j", "MASQUERADE"],
    );
    if !saved.has_chain(IPT_MASQ_CHAIN) {
        r.declare(IPT_MASQ_CHAIN);
    }
    if !saved.has_rule(&masq_rule) {
        r.append(masq_rule);
    }
    let entry = masquerade_jump();
    if !saved.has_rule(&entry) {
        r.insert_first(&entry);
    }
}

/// The shared DNAT chain and the PREROUTING and OUTPUT jumps to it for
/// local destinations, each only when missing.
fn dnat_skeleton(saved: &SavedTable, r: &mut Restore) {
    if !saved.has_chain(IPT_DNAT_CHAIN) {
        r.declare(IPT_DNAT_CHAIN);
    }
    for entry in dnat_jumps() {
        if !saved.has_rule(&entry) {
            r.append(entry);
        }
    }
}

/// The container's own chain (declared, so an earlier ADD's rules go),
/// the shared chain's jumps to it (one per protocol and 15 ports), and in
/// it each mapping's mark (with `snat`) and DNAT.
fn container_rules(
    spec: &PortMapSpec,
    family: IpFamily,
    container: IpPrefix,
    saved: &SavedTable,
    r: &mut Restore,
) {
    let setmark = match &spec.external_set_mark_chain {
        Some(c) => c.clone(),
        None => IPT_SETMARK_CHAIN.to_string(),
    };
    let chain = dnat_chain(&spec.owner);
    // Declaring the chain creates it, or flushes what an earlier ADD left.
    r.declare(&chain);
    for old in saved.jumps_to(IPT_DNAT_CHAIN, &chain) {
        r.delete(old);
    }
    let comment = dnat_comment(&spec.owner);
    let conds = spec.conditions.of(family);
    let cond_args: Vec<String> = conds
        .iter()
        .flat_map(|c| c.split_whitespace())
        .map(str::to_string)
        .collect();
    // Entry rules: all mappings of each protocol (as the Go plugin does,
    // whatever their hostIP family), protocols in sorted order.
    let protocols: BTreeSet<Protocol> = spec.mappings.iter().map(|m| m.protocol).collect();
    for proto in protocols {
        let ports: Vec<u16> = spec
            .mappings
            .iter()
            .filter(|m| m.protocol == proto)
            .map(|m| m.host_port)
            .collect();
        for list in port_lists(&ports) {
            let mut args: Vec<&str> = vec![
                "-p",
                proto.as_str(),
                "-m",
                "comment",
                "--comment",
                &comment,
                "-m",
                "multiport",
                "--dports",
                &list,
            ];
            args.extend(cond_args.iter().map(String::as_str));
            args.extend(["-j", chain.as_str()]);
            r.append(iptables::rule_line(IPT_DNAT_CHAIN, &args));
        }
    }
    let masq_src = if spec.masq_all {
        if family == IpFamily::V6 {
            "::/0".to_string()
        } else {
            "0.0.0.0/0".to_string()
        }
    } else {
        format!("{}/{}", container.network(), container.prefix_len())
    };
    for m in spec.family_mappings(family) {
        let matched = mapping_match(&m, family);
        let base: Vec<&str> = matched.iter().map(String::as_str).collect();
        if spec.snat {
            let mut hp: Vec<&str> = vec!["-s", masq_src.as_str()];
            hp.extend(base.iter().copied());
            hp.extend(["-j", setmark.as_str()]);
            r.append(iptables::rule_line(&chain, &hp));
            if family == IpFamily::V4 && !spec.masq_all {
                let mut lo: Vec<&str> = vec!["-s", "127.0.0.1/32"];
                lo.extend(base.iter().copied());
                lo.extend(["-j", setmark.as_str()]);
                r.append(iptables::rule_line(&chain, &lo));
            }
        }
        r.append(dnat_rule(&chain, &m, container, family));
    }
}

/// What selects mapping `m`'s traffic in the container's chain:
/// `[-d <hostIP>/32|128] -p <proto> -m <proto> --dport <hostPort>`.
fn mapping_match(m: &PortMapping, family: IpFamily) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(ip) = m.dst() {
        args.extend(["-d".to_string(), format!("{ip}/{}", family.max_prefix())]);
    }
    let proto = m.protocol.as_str();
    args.extend(["-p", proto, "-m", proto, "--dport"].map(str::to_string));
    args.push(m.host_port.to_string());
    args
}

/// The DNAT rule of mapping `m` in the container's chain `chain`, to the
/// container address `container`.
fn dnat_rule(chain: &str, m: &PortMapping, container: IpPrefix, family: IpFamily) -> String {
    let to = if family == IpFamily::V6 {
        format!("[{}]:{}", container.addr(), m.container_port)
    } else {
        format!("{}:{}", container.addr(), m.container_port)
    };
    let mut args = mapping_match(m, family);
    args.extend(["-j", "DNAT", "--to-destination"].map(str::to_string));
    args.push(to);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    iptables::rule_line(chain, &args)
}

/// iptables DEL for one family: entry rules jumping to `CNI-DN-<hash>` (and
/// the old `CNI-SN-<hash>`) removed, the chains flushed and deleted; found
/// by the hashed name, so no mapping needs to be known. Nothing is run
/// when nothing is there.
pub fn del(owner: &Owner, family: IpFamily) -> Result<()> {
    iptables::save_and_restore(family, IptTable::Nat, |saved, r| {
        remove_container(saved, r, owner)
    })
}

pub(crate) fn remove_container(saved: &SavedTable, r: &mut Restore, owner: &Owner) {
    for (chain, entry) in [
        (dnat_chain(owner), IPT_DNAT_CHAIN),
        (
            libcni::netfilter::go_chain_name("SN-", &owner.network, &owner.container_id),
            IPT_OLD_SNAT_CHAIN,
        ),
    ] {
        for line in saved.rules.iter().filter(|l| {
            iptables::rule_chain(l) == Some(entry)
                && iptables::rule_target(l).as_deref() == Some(chain.as_str())
        }) {
            r.delete(line);
        }
        if saved.has_chain(&chain) {
            r.remove_chain(&chain);
        }
    }
}

/// iptables GC for one family: containers of `network` whose entry rules'
/// comment names a container not in `valid` lose their chain.
pub fn gc(network: &str, valid: &[Attachment], family: IpFamily) -> Result<()> {
    iptables::save_and_restore(family, IptTable::Nat, |saved, r| {
        gc_changes(network, valid, saved, r)
    })
}

pub(crate) fn gc_changes(network: &str, valid: &[Attachment], saved: &SavedTable, r: &mut Restore) {
    let mut done = BTreeSet::new();
    for line in saved.rules_of(IPT_DNAT_CHAIN) {
        let Some(comment) = iptables::rule_comment(line) else {
            continue;
        };
        let Some(tag) = comment.strip_prefix("dnat ") else {
            continue;
        };
        let Some((net, cid)) = libcni::netfilter::parse_go_comment(tag) else {
            continue;
        };
        if net != network || valid.iter().any(|a| a.container_id == cid) {
            continue;
        }
        let owner = Owner::new(net, cid);
        if done.insert(cid.to_string()) {
            remove_container(saved, r, &owner);
        }
    }
}

/// iptables CHECK for one family: the container's chain exists and holds
/// the DNAT rule of every mapping.
pub fn check(spec: &PortMapSpec, family: IpFamily) -> Result<()> {
    if spec.container(family).is_none() {
        return Ok(());
    }
    let fam = family;
    let saved = iptables::save(fam, IptTable::Nat)?;
    check_saved(spec, family, &saved)
}

/// [`ipt_check`] against the nat table `saved`.
pub(crate) fn check_saved(spec: &PortMapSpec, family: IpFamily, saved: &SavedTable) -> Result<()> {
    let Some(container) = spec.container(family) else {
        return Ok(());
    };
    let chain = dnat_chain(&spec.owner);
    if !saved.has_chain(&chain) {
        return Err(Error::CheckFailed(format!(
            "portmap: chain {chain} is missing from the {} nat table",
            iptables::program(family)
        )));
    }
    if saved.jumps_to(IPT_DNAT_CHAIN, &chain).is_empty() {
        return Err(Error::CheckFailed(format!(
            "portmap: {IPT_DNAT_CHAIN} has no rule jumping to {chain}"
        )));
    }
    for m in spec.family_mappings(family) {
        if !saved.has_rule(&dnat_rule(&chain, &m, container, family)) {
            return Err(Error::CheckFailed(format!(
                "portmap: mapping {m} has no DNAT rule in {chain}"
            )));
        }
    }
    Ok(())
}
