//! IP masquerade of a container's traffic (bridge and ptp `ipMasq`):
//! traffic from a container address to destinations outside its subnet,
//! multicast excepted, leaves with the node's address. IPv4 and IPv6, both
//! backends, each in the Go plugins' own format so that either side's DEL
//! and GC remove the other's rules.
//!
//! # nftables design
//!
//! Exactly the Go plugins' (v1.6+), encoded as `nft` encodes their text:
//!
//! ```text
//! table inet cni_plugins_masquerade       comment "Masquerading for plugins from ..."
//!   chain masq_checks                     comment "Masquerade traffic from certain IPs ..."
//!       per container address, comment "<hash(net)>-<hash(if:cid)>, net: N, if: I, id: C":
//!       ip saddr == 10.1.0.5 ip daddr != 10.1.0.0/24 masquerade
//!   chain postrouting (nat, postrouting, 100)
//!       ip daddr 224.0.0.0/4 return; ip6 daddr ff00::/8 return; goto masq_checks
//! ```
//!
//! Setup appends the container's rules with `NLM_F_ECHO` and keeps their
//! handles in the attachment's [`ledger`] (`/run/cni/ipmasq/<net>/<cid>:<if>`);
//! teardown reads each back, checks its comment and deletes it, so neither
//! lists `masq_checks` (a rule per address of every container). Without a
//! ledger (the Go plugins' rules, an ADD killed before its ledger) teardown
//! lists `masq_checks` once and deletes the rules whose comment starts with
//! the attachment's hash, as the Go plugins do; GC lists it and deletes the
//! network's rules of attachments that are not valid. `postrouting` is
//! rewritten only when it is not the Go plugins'. Our previous releases'
//! `inet cni_rs_masq` (address sets) is still cleaned by teardown and GC,
//! and deleted once it holds no container's address.
//!
//! # iptables design
//!
//! The Go plugin's: a chain `CNI-<24 hex of sha512(network + container)>`
//! with `-d <subnet> -j ACCEPT` and `! -d <multicast> -j MASQUERADE`, and
//! `POSTROUTING -s <address> -j CNI-...`, all with the comment
//! `name: "<net>" id: "<cid>"`. Teardown finds the chain by its hashed name
//! and every rule jumping to it, so it works without addresses too (the Go
//! plugin needs them and leaks without); GC reads the comments.
//!
//! The iptables backend is the default, as the Go plugins' (v1.9) is,
//! wherever the node has an `iptables` ([`super::default_backend`]). On
//! iptables-nft its rules are written and read over netlink
//! ([`super::iptables_nft::nat`], no process): ADD reads `POSTROUTING` only when the
//! container's chain already exists, and keeps the handles of its
//! `POSTROUTING` jumps in a ledger (`ipmasq-iptables/<net>/<cid>`), so DEL
//! reads them back instead of listing `POSTROUTING`. Elsewhere one
//! `iptables-save` and one `iptables-restore` per family and operation.

pub mod ipt;
pub mod ipt_netlink;
pub mod nft;
#[cfg(test)]
mod tests;

pub use ipt::chain as ipt_chain;
pub use nft::rule_comment;

use super::ledger;
use super::nft::{Family, Nft};
use super::{on_route, teardown, Backend, Owner, Route, Rules, Verb, Visit};
use crate::types::{Attachment, IpPrefix};
use crate::IpFamily;
use crate::{ErrorList, Result};

/// The Go plugins' nf_tables table of ipMasq.
pub const TABLE: &str = "cni_plugins_masquerade";
/// The chain of the per-address rules.
pub const CHAIN: &str = "masq_checks";
/// The table of our previous releases (address sets), still cleaned.
pub const OLD_TABLE: &str = "cni_rs_masq";

/// Masquerades traffic of `owner`'s addresses on `ifname` (with their
/// prefix, which gives the subnet left alone) on `backend`, in the calling
/// thread's namespace. Idempotent.
/// The iptables backend is written over netlink where the node's
/// iptables is iptables-nft ([`ipt_netlink::add`]), by `iptables-restore`
/// elsewhere.
pub fn add(backend: Backend, owner: &Owner, ifname: &str, addrs: &[IpPrefix]) -> Result<()> {
    let mut masq = Masquerade {
        owner,
        ifname,
        addrs,
    };
    on_route(Route::of(backend), Verb::Add, &mut masq)
}

/// Whether `owner`'s addresses are masqueraded (CHECK); code 102 otherwise.
pub fn check(backend: Backend, owner: &Owner, ifname: &str, addrs: &[IpPrefix]) -> Result<()> {
    let mut masq = Masquerade {
        owner,
        ifname,
        addrs,
    };
    on_route(Route::of(backend), Verb::Check, &mut masq)
}

/// One attachment's masquerade: ADD writes it, CHECK reads it, DEL
/// removes it (which needs no address: DEL works after the namespace is
/// gone).
struct Masquerade<'a> {
    owner: &'a Owner,
    ifname: &'a str,
    addrs: &'a [IpPrefix],
}

/// What [`Masquerade`] serves no verb of.
const MASQUERADE: &str = "an attachment's masquerade";

impl Rules for Masquerade<'_> {
    fn nftables(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        match verb {
            Verb::Add => nft::add(n, self.owner, self.ifname, self.addrs),
            Verb::Check => nft::check(n, self.owner, self.ifname, self.addrs),
            Verb::Del => nft::del(n, self.owner, self.ifname),
            Verb::Gc => Err(verb.not_served_by(MASQUERADE)),
        }
    }

    fn iptables_over_netlink(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        match verb {
            Verb::Add => ipt_netlink::add(n, self.owner, self.addrs),
            Verb::Check => ipt_netlink::check(n, self.owner, self.addrs),
            Verb::Del => ipt_netlink::del(n, self.owner),
            Verb::Gc => Err(verb.not_served_by(MASQUERADE)),
        }
    }

    /// A family without addresses has nothing to write or read.
    fn iptables_programs(&mut self, verb: Verb, family: IpFamily) -> Result<()> {
        let addrs = of_family(self.addrs, family);
        match verb {
            Verb::Add | Verb::Check if addrs.is_empty() => Ok(()),
            Verb::Add => ipt::add(self.owner, &addrs, family),
            Verb::Check => ipt::check(self.owner, &addrs, family),
            Verb::Del => ipt::del(self.owner, family),
            Verb::Gc => Err(verb.not_served_by(MASQUERADE)),
        }
    }

    /// Where iptables-nft does not show the container's chain, legacy
    /// iptables is not read.
    fn iptables_may_hold(&mut self, n: Option<&mut Nft>, family: IpFamily) -> bool {
        n.is_none_or(|n| {
            n.has_chain(Family::of(family), "nat", &ipt::chain(self.owner))
                .unwrap_or(true)
        })
    }
}

/// The addresses of `family` in `addrs`.
fn of_family(addrs: &[IpPrefix], family: IpFamily) -> Vec<IpPrefix> {
    addrs
        .iter()
        .filter(|a| a.family() == family)
        .copied()
        .collect()
}

/// Removes `owner`'s masquerade on `ifname` on both backends, as the Go
/// plugins do ([`Visit::both_backends`]): on legacy iptables a process
/// runs only when iptables-nft shows the container's chain, or when
/// `backend` is iptables. Needs no address: DEL works after the namespace
/// is gone. Best effort: every step runs, the first error is returned.
pub fn del(backend: Backend, owner: &Owner, ifname: &str) -> Result<()> {
    let mut errors = ErrorList::new();
    let mut masq = Masquerade {
        owner,
        ifname,
        addrs: &[],
    };
    teardown(
        &Visit::both_backends(backend),
        Verb::Del,
        &mut masq,
        &mut errors,
    );
    errors.finish_first()
}

/// Removes the masquerade of attachments of `network` that are not in
/// `valid` (GC): on nf_tables always (the Go plugins' rules and ours look
/// alike), on legacy iptables only when `backend` is iptables.
pub fn gc(backend: Backend, network: &str, valid: &[Attachment]) -> Result<()> {
    let mut errors = ErrorList::new();
    let mut stale = Stale { network, valid };
    teardown(
        &Visit::both_backends(backend),
        Verb::Gc,
        &mut stale,
        &mut errors,
    );
    errors.finish_first()
}

/// A network's masquerade of attachments not in `valid`, for GC.
struct Stale<'a> {
    network: &'a str,
    valid: &'a [Attachment],
}

/// What [`Stale`] serves no verb of.
const STALE: &str = "a network's stale masquerade";

impl Rules for Stale<'_> {
    fn nftables(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        verb.only(Verb::Gc, STALE)?;
        nft::gc(n, self.network, self.valid)
    }

    fn iptables_over_netlink(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        verb.only(Verb::Gc, STALE)?;
        ipt_netlink::gc(n, self.network, self.valid)
    }

    fn iptables_programs(&mut self, verb: Verb, family: IpFamily) -> Result<()> {
        verb.only(Verb::Gc, STALE)?;
        ipt::gc(self.network, self.valid, family)
    }

    /// The rules of every container hang off `POSTROUTING`: no chain
    /// tells, so legacy iptables is read only when the config chose it.
    fn iptables_may_hold(&mut self, _: Option<&mut Nft>, _: IpFamily) -> bool {
        false
    }
}

// ---- node inspection ----------------------------------------------------------

/// The attachments of `network` whose masquerade rules a ledger of ours
/// records (either backend): container ID, interface (the nftables ledger
/// names it), ledger path.
pub fn recorded(network: &str) -> Vec<(String, Option<String>, std::path::PathBuf)> {
    let mut out = Vec::new();
    for (l, _) in ledger::list(nft::LEDGER, network) {
        if let Some((cid, ifname)) = l.name().split_once(':') {
            out.push((cid.to_string(), Some(ifname.to_string()), l.path()));
        }
    }
    for (l, _) in ledger::list(ipt_netlink::LEDGER, network) {
        out.push((l.name().to_string(), None, l.path()));
    }
    out
}

/// The comments of the per-address rules in the Go plugins' nf_tables
/// masquerade table (ours are the same): one per attachment and address,
/// [`rule_comment`].
pub fn nft_rule_comments(nft: &mut Nft) -> Result<Vec<String>> {
    Ok(nft
        .rules(nft::F, TABLE, CHAIN)?
        .into_iter()
        .filter_map(|r| r.comment)
        .collect())
}

/// The network, interface and container ID a [`rule_comment`] names;
/// `None` for another comment or one cut short (the ID would be partial).
pub fn parse_rule_comment(comment: &str) -> Option<(String, String, String)> {
    if comment.len() >= super::nft::MAX_NFT_COMMENT_CHARS {
        return None;
    }
    let (_, rest) = comment.split_once(", net: ")?;
    let (network, rest) = rest.split_once(", if: ")?;
    let (ifname, cid) = rest.split_once(", id: ")?;
    Some((network.into(), ifname.into(), cid.into()))
}
