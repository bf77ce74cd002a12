//! The firewall on iptables: the Go plugin's chains, rules and comments in
//! the filter table, byte for byte as `iptables-save` prints what the Go
//! plugin (v1.7 and later) writes, so either side's DEL removes the
//! other's rules and neither side's ADD duplicates them.
//!
//! ```text
//! FORWARD                -m comment --comment "CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)" -j CNI-ISOLATION-STAGE-1
//!                        -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
//! CNI-FORWARD            -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
//!                        -d 10.88.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//!                        -s 10.88.0.2/32 -j ACCEPT
//! CNI-ADMIN              (the admin's; never written)
//! CNI-ISOLATION-STAGE-1  -i br1 -o br1 -m comment --comment "... (ingressPolicy: isolated)" -j DROP
//!                        -i br1 ! -o br1 -m comment --comment "... (ingressPolicy: isolated)" -j CNI-ISOLATION-STAGE-2
//!                        -i br0 ! -o br0 -m comment --comment "... (ingressPolicy: same-bridge)" -j CNI-ISOLATION-STAGE-2
//!                        -m comment --comment "... (ingressPolicy: same-bridge|isolated)" -j RETURN
//! CNI-ISOLATION-STAGE-2  -o br1 -m comment --comment "... (ingressPolicy: same-bridge|isolated)" -j DROP
//!                        -o br0 -m comment --comment "... (ingressPolicy: same-bridge|isolated)" -j DROP
//!                        -m comment --comment "... (ingressPolicy: same-bridge|isolated)" -j RETURN
//! ```
//!
//! Before v1.7 (Debian's 1.1.1) every isolation rule had the comment
//! `... (ingressPolicy: same-bridge)`: such a rule counts as present (no
//! duplicate is added, CHECK accepts it); new rules get v1.7's comments.
//!
//! Our previous release also kept owner records in a chain of its own,
//! `CNI-FORWARD-OWNERS` (one rule without target per address, commented
//! `name: "<net>" id: "<cid>"`). Owners now live in files
//! ([`super::records`]); the chain is still read, its records removed by
//! DEL, GC and by the ADD of an address's new owner, and the chain itself
//! deleted once empty.
//!
//! Each operation is one `iptables-save -t filter` and at most one
//! `iptables-restore --noflush` per family; or, on the netlink path
//! ([`super::ipt_netlink`]), the same reads and writes in iptables-nft's
//! encoding, one batch per family. Chains are created with `-N`,
//! never declared (a declaration flushes an existing chain), so two
//! plugins racing to create them make one restore fail, and it is retried
//! on a fresh save.

use std::collections::BTreeSet;
use std::net::IpAddr;

pub use super::chains::*;
use super::ipt_netlink;
use super::{FirewallSpec, Policy};
use libcni::netfilter::iptables::{self, IptTable, Restore, SavedTable};
use libcni::netfilter::nft::Nft;
use libcni::netfilter::{parse_go_comment, Owner};
use libcni::IpFamily;
use libcni::{Error, Result};

const FORWARD_COMMENT: &str = "CNI firewall plugin rules";
const ADMIN_COMMENT: &str = "CNI firewall plugin admin overrides";
/// v1.7+: the comment of the shared isolation rules (the FORWARD jump, the
/// RETURNs) and of stage 2's per-bridge drop.
const ISOLATION_SHARED_COMMENT: &str =
    "CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)";
/// Before v1.7: the comment of every isolation rule.
const ISOLATION_OLD_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: same-bridge)";

/// How often an operation is retried after another process changed the
/// same chains between our save and our restore.
const ATTEMPTS: usize = 3;

/// v1.7+: the comment of stage 1's per-bridge rules.
fn policy_comment(p: Policy) -> String {
    format!("CNI firewall plugin rules (ingressPolicy: {})", p.as_str())
}

/// The owner comment of our previous release's records.
pub fn owner_comment(owner: &Owner) -> String {
    let mut c = format!("name: \"{}\" id: \"{}\"", owner.network, owner.container_id);
    c.truncate(255);
    c
}

/// `FORWARD -j CNI-FORWARD`.
pub fn forward_jump() -> String {
    iptables::rule_line(
        "FORWARD",
        &[
            "-m",
            "comment",
            "--comment",
            FORWARD_COMMENT,
            "-j",
            FORWARD_CHAIN,
        ],
    )
}

/// `CNI-FORWARD -j <admin chain>`.
pub fn admin_jump(admin: &str) -> String {
    iptables::rule_line(
        FORWARD_CHAIN,
        &["-m", "comment", "--comment", ADMIN_COMMENT, "-j", admin],
    )
}

/// The Go plugin's two accept rules of an address.
pub fn accept_rules(addr: IpAddr) -> [String; 2] {
    let h = host(addr);
    [
        iptables::rule_line(
            FORWARD_CHAIN,
            &[
                "-d",
                &h,
                "-m",
                "conntrack",
                "--ctstate",
                "RELATED,ESTABLISHED",
                "-j",
                "ACCEPT",
            ],
        ),
        iptables::rule_line(FORWARD_CHAIN, &["-s", &h, "-j", "ACCEPT"]),
    ]
}

/// Our previous release's owner record of an address.
pub fn legacy_owner_rule(owner: &Owner, addr: IpAddr) -> String {
    iptables::rule_line(
        OWNERS_CHAIN,
        &[
            "-s",
            &host(addr),
            "-m",
            "comment",
            "--comment",
            &owner_comment(owner),
        ],
    )
}

/// Where a missing isolation rule goes in its chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    First,
    Last,
}

/// One isolation rule: what v1.7+ writes, what counts as it (the pre-v1.7
/// form), where it goes, and whether CHECK requires it.
#[derive(Debug, Clone)]
pub struct IsolationRule {
    pub line: String,
    pub old_form: Option<String>,
    place: Place,
    pub checked: bool,
}

impl IsolationRule {
    fn present(&self, saved: &SavedTable) -> bool {
        saved.has_rule(&self.line) || self.old_form.as_ref().is_some_and(|o| saved.has_rule(o))
    }
}

/// The isolation rules of `bridge` under `policy`, in the order the Go
/// plugin inserts them (each `First` one goes to the top of its chain, so
/// `isolated`'s drop ends up above its stage-1 rule).
pub fn isolation_rules(bridge: &str, policy: Policy) -> Vec<IsolationRule> {
    let with = |chain: &str, matches: &[&str], comment: &str, target: &str| {
        let mut args: Vec<&str> = matches.to_vec();
        args.extend(["-m", "comment", "--comment", comment, "-j", target]);
        iptables::rule_line(chain, &args)
    };
    let shared = |chain: &str, matches: &[&str], target: &str| {
        (
            with(chain, matches, ISOLATION_SHARED_COMMENT, target),
            Some(with(chain, matches, ISOLATION_OLD_COMMENT, target)),
        )
    };
    let rule = |(line, old_form): (String, Option<String>), place, checked| IsolationRule {
        line,
        old_form,
        place,
        checked,
    };
    let pc = policy_comment(policy);
    let mut v = vec![
        rule(
            shared("FORWARD", &[], ISOLATION_STAGE_1),
            Place::First,
            true,
        ),
        rule(
            (
                with(
                    ISOLATION_STAGE_1,
                    &["-i", bridge, "!", "-o", bridge],
                    &pc,
                    ISOLATION_STAGE_2,
                ),
                None,
            ),
            Place::First,
            true,
        ),
    ];
    if policy == Policy::Isolated {
        v.push(rule(
            (
                with(
                    ISOLATION_STAGE_1,
                    &["-i", bridge, "-o", bridge],
                    &pc,
                    "DROP",
                ),
                None,
            ),
            Place::First,
            true,
        ));
    }
    v.extend([
        rule(shared(ISOLATION_STAGE_1, &[], "RETURN"), Place::Last, false),
        rule(
            shared(ISOLATION_STAGE_2, &["-o", bridge], "DROP"),
            Place::First,
            true,
        ),
        rule(shared(ISOLATION_STAGE_2, &[], "RETURN"), Place::Last, false),
    ]);
    v
}

/// A record of our previous release read back from `CNI-FORWARD-OWNERS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyRecord {
    line: String,
    pub addr: IpAddr,
    pub comment: String,
}

impl LegacyRecord {
    /// The network and container it names.
    pub fn owner(&self) -> Option<(&str, &str)> {
        parse_go_comment(&self.comment)
    }
}

fn legacy_records(saved: &SavedTable) -> Vec<LegacyRecord> {
    saved
        .rules_of(OWNERS_CHAIN)
        .filter_map(|line| {
            let tokens = iptables::split_tokens(line);
            let i = tokens.iter().position(|t| t == "-s")?;
            let src = tokens.get(i + 1)?;
            let addr: IpAddr = src.split('/').next()?.parse().ok()?;
            Some(LegacyRecord {
                line: line.clone(),
                addr,
                comment: iptables::rule_comment(line)?,
            })
        })
        .collect()
}

/// Deletes the legacy records `gone` and, when no other is left, the
/// legacy chain.
fn drop_legacy(saved: &SavedTable, r: &mut Restore, gone: &[LegacyRecord]) {
    for rec in gone {
        r.delete(&rec.line);
    }
    if saved.has_chain(OWNERS_CHAIN) && saved.rules_of(OWNERS_CHAIN).count() == gone.len() {
        r.remove_chain(OWNERS_CHAIN);
    }
}

/// How one operation's rules reach the filter table: with the programs
/// (legacy iptables), or over netlink in iptables-nft's encoding
/// ([`super::ipt_netlink`]).
pub enum Filter<'a> {
    Programs,
    Netlink(&'a mut Nft),
}

/// Whether a restore failed because the table changed after our save (a
/// chain created or a rule deleted by another process meanwhile).
fn is_conflict(e: &Error) -> bool {
    let s = e.to_string();
    s.contains("already exists") || s.contains("does a matching rule exist")
}

/// One read of the filter table, the changes `build` derives from it, one
/// write (none when there is nothing to change); retried on a fresh read
/// when another process changed the chains in between.
fn apply(fam: IpFamily, via: &mut Filter, build: &dyn Fn(&SavedTable, &mut Restore)) -> Result<()> {
    if let Filter::Netlink(nft) = via {
        return ipt_netlink::apply(nft, fam, build);
    }
    let mut attempt = 1;
    loop {
        let saved = iptables::save(fam, IptTable::Filter)?;
        let mut r = Restore::new(IptTable::Filter);
        build(&saved, &mut r);
        match iptables::restore(fam, &r) {
            Ok(()) => return Ok(()),
            Err(e) if is_conflict(&e) && attempt < ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Which of the plugin's iptables rules an ADD or CHECK covers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rules {
    /// The accept rules and the isolation rules: the nftables and
    /// iptables backends.
    AcceptAndIsolation,
    /// Only the isolation rules: the firewalld backend, which leaves
    /// forwarding to firewalld but isolates through iptables as Go does.
    IsolationOnly,
}

/// What one family's ADD or CHECK covers: the `rules` of `spec` for its
/// addresses `addrs` of `family`.
pub struct FamilyRules<'a> {
    pub spec: &'a FirewallSpec,
    pub addrs: &'a [IpAddr],
    pub family: IpFamily,
    pub rules: Rules,
}

/// ADD for one family.
pub fn add(want: &FamilyRules, via: &mut Filter) -> Result<()> {
    let (spec, addrs, rules) = (want.spec, want.addrs, want.rules);
    apply(want.family, via, &|saved, r| {
        if rules == Rules::AcceptAndIsolation {
            for c in [FORWARD_CHAIN, spec.admin_chain.as_str()] {
                if !saved.has_chain(c) {
                    r.create_chain(c);
                }
            }
            for first in [forward_jump(), admin_jump(&spec.admin_chain)] {
                if !saved.has_rule(&first) {
                    r.insert_first(&first);
                }
            }
            for a in addrs {
                for rule in accept_rules(*a) {
                    if !saved.has_rule(&rule) {
                        r.append(rule);
                    }
                }
            }
            // The address's new owner replaces the old release's record.
            let gone: Vec<LegacyRecord> = legacy_records(saved)
                .into_iter()
                .filter(|rec| addrs.contains(&rec.addr))
                .collect();
            if !gone.is_empty() {
                drop_legacy(saved, r, &gone);
            }
        }
        if let Some(iso) = &spec.isolate {
            for c in [ISOLATION_STAGE_1, ISOLATION_STAGE_2] {
                if !saved.has_chain(c) {
                    r.create_chain(c);
                }
            }
            for rule in isolation_rules(&iso.bridge, iso.policy) {
                if rule.present(saved) {
                    continue;
                }
                match rule.place {
                    Place::First => r.insert_first(&rule.line),
                    Place::Last => r.append(rule.line),
                }
            }
        }
    })
}

/// DEL or GC for one family: removes the accept rules of `remove` and of
/// the legacy records `doomed` accepts (which go too), except addresses
/// in `held` or in a legacy record that stays.
pub fn remove(
    remove: &[IpAddr],
    held: &[IpAddr],
    doomed: &dyn Fn(&LegacyRecord) -> bool,
    family: IpFamily,
    via: &mut Filter,
) -> Result<()> {
    apply(family, via, &|saved, r| {
        let (gone, kept): (Vec<LegacyRecord>, Vec<LegacyRecord>) = legacy_records(saved)
            .into_iter()
            .partition(|rec| doomed(rec));
        let held: BTreeSet<IpAddr> = kept
            .iter()
            .map(|rec| rec.addr)
            .chain(held.iter().copied())
            .collect();
        let addrs: BTreeSet<IpAddr> = remove
            .iter()
            .copied()
            .chain(gone.iter().map(|rec| rec.addr))
            .filter(|a| IpFamily::of(a) == family && !held.contains(a))
            .collect();
        for a in addrs {
            let accept = accept_rules(a);
            for line in saved.rules.iter().filter(|l| accept.contains(l)) {
                r.delete(line);
            }
        }
        if !gone.is_empty() {
            drop_legacy(saved, r, &gone);
        }
    })
}

/// CHECK for one family.
pub fn check(want: &FamilyRules, via: &mut Filter) -> Result<()> {
    let (spec, addrs, family, rules) = (want.spec, want.addrs, want.family, want.rules);
    let saved = match via {
        Filter::Programs => iptables::save(family, IptTable::Filter)?,
        Filter::Netlink(nft) => ipt_netlink::read(nft, family)?,
    };
    let tool = iptables::program(family);
    let failed = |what: String| Error::CheckFailed(format!("firewall: {what}"));
    if rules == Rules::AcceptAndIsolation {
        for c in [FORWARD_CHAIN, spec.admin_chain.as_str()] {
            if !saved.has_chain(c) {
                return Err(failed(format!(
                    "chain {c} is missing from the {tool} filter table"
                )));
            }
        }
        let mut wanted = vec![forward_jump(), admin_jump(&spec.admin_chain)];
        for a in addrs {
            wanted.extend(accept_rules(*a));
        }
        for line in wanted {
            if !saved.has_rule(&line) {
                return Err(failed(format!("{tool} rule missing: {line}")));
            }
        }
    }
    if let Some(iso) = &spec.isolate {
        for rule in isolation_rules(&iso.bridge, iso.policy) {
            if rule.checked && !rule.present(&saved) {
                return Err(failed(format!("{tool} rule missing: {}", rule.line)));
            }
        }
    }
    Ok(())
}

/// Whether a legacy record names a container of `network` not in `valid`.
pub fn legacy_stale(
    rec: &LegacyRecord,
    network: &str,
    valid: &[libcni::types::Attachment],
) -> bool {
    match rec.owner() {
        Some((net, cid)) => net == network && !valid.iter().any(|a| a.container_id == cid),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_firewall_iptables_rules_are_in_iptables_save_form() {
        assert_eq!(
            forward_jump(),
            "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD"
        );
        assert_eq!(
            accept_rules("10.88.0.2".parse().unwrap()),
            [
                "-A CNI-FORWARD -d 10.88.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
                    .to_string(),
                "-A CNI-FORWARD -s 10.88.0.2/32 -j ACCEPT".to_string()
            ]
        );
        assert_eq!(
            legacy_owner_rule(&Owner::new("n", "c"), "fd00::2".parse().unwrap()),
            "-A CNI-FORWARD-OWNERS -s fd00::2/128 -m comment --comment \"name: \\\"n\\\" id: \\\"c\\\"\""
        );
        let saved = SavedTable::parse(&format!(
            "*filter\n:CNI-FORWARD-OWNERS - [0:0]\n{}\n{}\n",
            legacy_owner_rule(&Owner::new("n", "a"), "10.0.0.2".parse().unwrap()),
            legacy_owner_rule(&Owner::new("n", "b"), "10.0.0.3".parse().unwrap()),
        ));
        let recs = legacy_records(&saved);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].addr, "10.0.0.3".parse::<IpAddr>().unwrap());
        assert_eq!(recs[1].owner(), Some(("n", "b")));
    }

    #[test]
    fn netfilter_firewall_isolation_rules_are_v1_7s() {
        let lines = |p| -> Vec<String> {
            isolation_rules("br0", p)
                .into_iter()
                .map(|r| r.line)
                .collect()
        };
        let c = "\"CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)\"";
        assert_eq!(
            lines(Policy::Isolated),
            vec![
                format!("-A FORWARD -m comment --comment {c} -j CNI-ISOLATION-STAGE-1"),
                "-A CNI-ISOLATION-STAGE-1 -i br0 ! -o br0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: isolated)\" -j CNI-ISOLATION-STAGE-2".to_string(),
                "-A CNI-ISOLATION-STAGE-1 -i br0 -o br0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: isolated)\" -j DROP".to_string(),
                format!("-A CNI-ISOLATION-STAGE-1 -m comment --comment {c} -j RETURN"),
                format!("-A CNI-ISOLATION-STAGE-2 -o br0 -m comment --comment {c} -j DROP"),
                format!("-A CNI-ISOLATION-STAGE-2 -m comment --comment {c} -j RETURN"),
            ]
        );
        let same = isolation_rules("br0", Policy::SameBridge);
        assert_eq!(same.len(), 5);
        assert_eq!(
            same[1].line,
            "-A CNI-ISOLATION-STAGE-1 -i br0 ! -o br0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\" -j CNI-ISOLATION-STAGE-2"
        );
        // The pre-v1.7 forms count as present.
        let old = SavedTable::parse(
            "-A FORWARD -m comment --comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\" -j CNI-ISOLATION-STAGE-1\n\
             -A CNI-ISOLATION-STAGE-2 -o br0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\" -j DROP\n",
        );
        assert!(same[0].present(&old));
        assert!(same[3].present(&old));
        assert!(!same[1].present(&old));
    }
}
