//! The `firewall` plugin's work: forwarded traffic from a container's
//! addresses, and replies to it, is let through, so a node whose FORWARD
//! policy is DROP still lets its containers out; `ingressPolicy:
//! same-bridge` drops traffic entering a bridge from another isolated
//! bridge, and `isolated` also between containers of the same bridge.
//! IPv4 and IPv6, three backends, laid out by libcni's netfilter contract
//! (one `Rules` trait; ADD and CHECK through `on_route`, DEL and GC
//! through `teardown` on the places `TeardownHint::visits` names):
//!
//! - iptables: the Go plugin's iptables chains and rules, byte for byte
//!   ([`ipt`]); where the node's iptables is iptables-nft they are written
//!   over netlink ([`ipt_netlink`], no process), on legacy iptables with
//!   one `iptables-save` and one `iptables-restore` per family and
//!   operation;
//! - nftables: the same rules over netlink ([`ipt_netlink`]) on every node
//!   (upstream has no nftables backend for the firewall: on an
//!   iptables-nft node its rules are these); [`nft`] is our previous
//!   release's own table, which DEL and GC still clean;
//! - firewalld ([`firewalld`]): the addresses bound to a firewalld zone
//!   over D-Bus, as Go does (isolation then goes to iptables, as in Go).
//!
//! Who holds each address is kept in [`records`] (files beside the rules,
//! which carry no owner), so DEL works without `prevResult`, GC finds the
//! attachments that are gone, and a late DEL of an old container leaves
//! the address's new owner alone. DEL and GC clean every backend: an
//! attachment is found wherever it was put (the config may have changed),
//! and the state of our previous release (owner records in the iptables
//! chain `CNI-FORWARD-OWNERS`, elements of `inet cni_rs_firewall`) is
//! removed as it is met.

pub mod chains;
pub mod firewalld;
pub mod ipt;
pub mod ipt_netlink;
pub mod nft;
pub mod records;

use std::collections::BTreeSet;
use std::net::IpAddr;

use self::ipt::Rules;
use self::records::{Record, Records};
use libcni::fault;
use libcni::netfilter::nft::Nft;
use libcni::netfilter::{on_route, teardown, Owner, Programs, Route, Verb, Visit};
use libcni::types::Attachment;
use libcni::IpFamily;
use libcni::{Error, ErrorList, Result};

pub use self::chains::DEFAULT_ADMIN_CHAIN as IPT_DEFAULT_ADMIN_CHAIN;

/// Longest iptables chain name.
const MAX_CHAIN_LEN: usize = 28;

/// `ingressPolicy` values that isolate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Traffic entering the bridge from another isolated bridge is dropped.
    SameBridge,
    /// That, and traffic between two ports of the bridge too.
    Isolated,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::SameBridge => "same-bridge",
            Policy::Isolated => "isolated",
        }
    }
}

/// The bridge to isolate, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    pub bridge: String,
    pub policy: Policy,
}

/// Where ADD and CHECK put and look for a container's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FwBackend {
    Iptables,
    Nftables,
    Firewalld { zone: String },
}

impl FwBackend {
    /// Where the iptables and nftables backends write: nftables is the
    /// iptables rules over netlink, iptables by the node's path. firewalld
    /// is not a netfilter route (its isolation goes to iptables).
    fn route(&self) -> Route {
        match self {
            FwBackend::Nftables => Route::Nftables,
            FwBackend::Iptables | FwBackend::Firewalld { .. } => Route::iptables(),
        }
    }

    /// Its `backend` value, as records and the call log name it.
    pub fn name(&self) -> &'static str {
        match self {
            FwBackend::Iptables => "iptables",
            FwBackend::Nftables => "nftables",
            FwBackend::Firewalld { .. } => "firewalld",
        }
    }
}

/// What DEL and GC know of the config's backend (read leniently: an
/// unusable value is `Auto`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TeardownHint {
    /// `backend` absent or empty: firewalld when it runs, else iptables.
    Auto {
        zone: String,
    },
    Iptables,
    Nftables,
    Firewalld {
        zone: String,
    },
}

impl TeardownHint {
    /// Where a teardown looks: our previous release's own table in
    /// nf_tables (which must open when the config names nftables); then,
    /// when the rules need an iptables pass, for the nftables backend its
    /// rules over netlink on every node (they are iptables-nft's), for any
    /// other this node's iptables side, every family. Legacy iptables is
    /// read only when the config chose it (or firewalld, or nothing): the
    /// nftables backend never writes there.
    fn visits(&self, iptables: bool) -> Vec<Visit> {
        let nftables = matches!(self, TeardownHint::Nftables);
        let mut visits = vec![Visit::Nftables { required: nftables }];
        if iptables && nftables {
            // Teardown::iptables_may_hold: no programs if nf_tables fails.
            visits.push(Visit::IptablesOverNetlink(Programs::WhereHeld));
        } else if iptables {
            visits.push(Visit::iptables_of_node(Programs::EveryFamily));
        }
        visits
    }
}

/// What one container's firewall needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallSpec {
    pub owner: Owner,
    /// `CNI_IFNAME`, recorded with the owner.
    pub ifname: String,
    /// The container's addresses (every address of `prevResult`).
    pub addrs: Vec<IpAddr>,
    /// `ingressPolicy: same-bridge` or `isolated`: the bridge to isolate.
    pub isolate: Option<Isolation>,
    /// iptables only: the admin override chain (default `CNI-ADMIN`).
    pub admin_chain: String,
}

impl FirewallSpec {
    fn family_addrs(&self, family: IpFamily) -> Vec<IpAddr> {
        of_family(&self.addrs, family)
    }
}

fn of_family(addrs: &[IpAddr], family: IpFamily) -> Vec<IpAddr> {
    addrs
        .iter()
        .filter(|a| IpFamily::of(a) == family)
        .copied()
        .collect()
}

/// Checks an iptables chain name given in config key `key` (code 7): 1 to
/// 28 printable ASCII characters without quotes or backslashes, not
/// starting with `-` or `!`, and neither a built-in chain or target nor one
/// of the plugin's own chains.
pub fn validate_chain_name(key: &str, name: &str) -> Result<()> {
    const RESERVED: [&str; 15] = [
        "INPUT",
        "FORWARD",
        "OUTPUT",
        "PREROUTING",
        "POSTROUTING",
        "ACCEPT",
        "DROP",
        "RETURN",
        "QUEUE",
        "NFQUEUE",
        "REJECT",
        chains::FORWARD_CHAIN,
        chains::OWNERS_CHAIN,
        chains::ISOLATION_STAGE_1,
        chains::ISOLATION_STAGE_2,
    ];
    let why = if name.is_empty() {
        Some("is empty".to_string())
    } else if name.len() > MAX_CHAIN_LEN {
        Some(format!("is longer than {MAX_CHAIN_LEN} characters"))
    } else if !name
        .chars()
        .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\'))
    {
        Some("may only hold printable ASCII without quotes or backslashes".to_string())
    } else if name.starts_with('-') || name.starts_with('!') {
        Some("may not start with '-' or '!'".to_string())
    } else if RESERVED.contains(&name) {
        Some("is a built-in chain or target, or a chain of the plugin itself".to_string())
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::config(
            key,
            format!("{name:?} is not a usable iptables chain name: it {why}"),
        )),
        None => Ok(()),
    }
}

/// Checks the name of the bridge to isolate, read from config key `key`
/// (code 7): an interface name (1 to 15 printable ASCII characters) that
/// iptables and nftables take literally, so without quotes, backslashes
/// and the wildcards `+` and `*`, and not starting with `!` or `-`.
pub fn validate_bridge_name(key: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name.chars().all(|c| {
            c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\' | '+' | '*' | '/' | ':')
        })
        && !name.starts_with('!')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::config(
            key,
            format!(
                "{name:?} is not a bridge name the isolation rules can match (1-15 printable \
                 characters, no quotes, '/', ':', '+' or '*')"
            ),
        ))
    }
}

// ---- ADD and CHECK ---------------------------------------------------------------

fn record_of(backend: &FwBackend, spec: &FirewallSpec) -> Record {
    Record {
        network: spec.owner.network.clone(),
        container_id: spec.owner.container_id.clone(),
        ifname: spec.ifname.clone(),
        backend: backend.name().to_string(),
        zone: match backend {
            FwBackend::Firewalld { zone } => zone.clone(),
            _ => String::new(),
        },
    }
}

/// Lets `spec`'s addresses through (and isolates its bridge) on
/// `backend`, in the calling thread's namespace, after recording the
/// owner of each address. Idempotent. A failure undoes this ADD.
pub fn add(backend: &FwBackend, spec: &FirewallSpec, records: &Records) -> Result<()> {
    let rec = record_of(backend, spec);
    for a in &spec.addrs {
        records.put(*a, &rec)?;
    }
    let done = match backend {
        FwBackend::Firewalld { zone } => firewalld_add(zone, spec),
        FwBackend::Iptables | FwBackend::Nftables => {
            fault::point("firewall/add-before-commit");
            let mut wanted = Wanted::new(spec, Rules::AcceptAndIsolation);
            on_route(backend.route(), Verb::Add, &mut wanted)
        }
    };
    if let Err(e) = done {
        // What this ADD wrote is found again by its records.
        let hint = match backend {
            FwBackend::Iptables => TeardownHint::Iptables,
            FwBackend::Nftables => TeardownHint::Nftables,
            FwBackend::Firewalld { zone } => TeardownHint::Firewalld { zone: zone.clone() },
        };
        let _ = del(&hint, records, &spec.owner, &spec.ifname, &spec.addrs);
        return Err(e);
    }
    fault::point("firewall/add-after-commit");
    Ok(())
}

fn firewalld_add(zone: &str, spec: &FirewallSpec) -> Result<()> {
    let mut fw = firewalld::Firewalld::connect()?;
    fault::point("firewall/add-before-commit");
    for a in &spec.addrs {
        fw.add_source(zone, *a)?;
    }
    firewalld_isolation(Verb::Add, spec)
}

/// firewalld leaves isolation to iptables, as Go does.
fn firewalld_isolation(verb: Verb, spec: &FirewallSpec) -> Result<()> {
    if spec.isolate.is_none() {
        return Ok(());
    }
    let mut wanted = Wanted::new(spec, Rules::IsolationOnly);
    on_route(Route::iptables(), verb, &mut wanted)
}

/// Whether `spec`'s rules are all there (CHECK); code 102 naming what is
/// missing otherwise. Only reads.
pub fn check(backend: &FwBackend, spec: &FirewallSpec) -> Result<()> {
    match backend {
        FwBackend::Iptables | FwBackend::Nftables => {
            let mut wanted = Wanted::new(spec, Rules::AcceptAndIsolation);
            on_route(backend.route(), Verb::Check, &mut wanted)
        }
        FwBackend::Firewalld { zone } => {
            let mut fw = firewalld::Firewalld::connect()?;
            for a in &spec.addrs {
                if !fw.query_source(zone, *a)? {
                    return Err(Error::CheckFailed(format!(
                        "firewall: {} is not a source of firewalld zone {zone:?}",
                        firewalld::source(*a)
                    )));
                }
            }
            firewalld_isolation(Verb::Check, spec)
        }
    }
}

/// One container's iptables rules, as ADD writes them and CHECK reads
/// them ([`ipt`]).
struct Wanted<'a> {
    spec: &'a FirewallSpec,
    rules: Rules,
}

/// What [`Wanted`] serves no verb of.
const WANTED: &str = "a container's wanted firewall rules";

impl<'a> Wanted<'a> {
    fn new(spec: &'a FirewallSpec, rules: Rules) -> Wanted<'a> {
        Wanted { spec, rules }
    }

    /// `verb` on the rules of `family`'s addresses through `via`; a family
    /// without addresses has none.
    fn family(&self, verb: Verb, family: IpFamily, via: &mut ipt::Filter) -> Result<()> {
        let addrs = self.spec.family_addrs(family);
        if addrs.is_empty() {
            return Ok(());
        }
        let want = ipt::FamilyRules {
            spec: self.spec,
            addrs: &addrs,
            family,
            rules: self.rules,
        };
        match verb {
            Verb::Add => {
                // For IsolationOnly, firewalld_add has passed the fault
                // points already.
                let second =
                    family == IpFamily::V6 && !self.spec.family_addrs(IpFamily::V4).is_empty();
                if second && self.rules == Rules::AcceptAndIsolation {
                    fault::point("firewall/add-between-families");
                }
                ipt::add(&want, via)
            }
            Verb::Check => ipt::check(&want, via),
            Verb::Del | Verb::Gc => Err(verb.not_served_by(WANTED)),
        }
    }
}

impl libcni::netfilter::Rules for Wanted<'_> {
    /// The firewall's nftables rules are its iptables rules in
    /// iptables-nft's encoding, so both go over netlink.
    fn nftables(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        self.iptables_over_netlink(verb, n)
    }

    fn iptables_over_netlink(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        for family in IpFamily::BOTH {
            self.family(verb, family, &mut ipt::Filter::Netlink(n))?;
        }
        Ok(())
    }

    fn iptables_programs(&mut self, verb: Verb, family: IpFamily) -> Result<()> {
        self.family(verb, family, &mut ipt::Filter::Programs)
    }
}

// ---- DEL and GC ----------------------------------------------------------------

/// Addresses to take out of firewalld, with their zone.
type Sources = Vec<(IpAddr, String)>;

/// Removes the firewalld sources `sources` (best effort). firewalld not
/// running means its runtime sources are gone already.
fn firewalld_remove(sources: &Sources, errors: &mut ErrorList) {
    if sources.is_empty() || !firewalld::is_running() {
        return;
    }
    match firewalld::Firewalld::connect() {
        Ok(mut fw) => {
            for (a, zone) in sources {
                errors.record(fw.remove_source(zone, *a));
            }
        }
        Err(e) => errors.push(e),
    }
}

/// The netfilter side of a DEL or GC, on the places
/// [`TeardownHint::visits`] names.
struct Teardown<'a> {
    /// What our previous release's own table (`inet cni_rs_firewall`)
    /// holds of this teardown.
    previous_release: &'a dyn Fn(&mut Nft) -> Result<()>,
    /// The accept rules to remove, except those of `held`.
    remove: &'a [IpAddr],
    held: &'a [IpAddr],
    /// Which of our previous release's owner records go.
    doomed: &'a dyn Fn(&ipt::LegacyRecord) -> bool,
}

/// What [`Teardown`] serves no verb of.
const TEARDOWN: &str = "a firewall teardown";

impl Teardown<'_> {
    /// The accept rules of `family` in `remove`, and the doomed records,
    /// through `via`, for DEL and GC alike (what goes was chosen by the
    /// verb's caller).
    fn family(&self, verb: Verb, family: IpFamily, via: &mut ipt::Filter) -> Result<()> {
        match verb {
            Verb::Del | Verb::Gc => {
                let addrs = of_family(self.remove, family);
                ipt::remove(&addrs, self.held, self.doomed, family, via)
            }
            Verb::Add | Verb::Check => Err(verb.not_served_by(TEARDOWN)),
        }
    }
}

impl libcni::netfilter::Rules for Teardown<'_> {
    /// Our previous release's table.
    fn nftables(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        match verb {
            Verb::Del | Verb::Gc => (self.previous_release)(n),
            Verb::Add | Verb::Check => Err(verb.not_served_by(TEARDOWN)),
        }
    }

    fn iptables_over_netlink(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        let mut errors = ErrorList::new();
        for family in IpFamily::BOTH {
            errors.record(self.family(verb, family, &mut ipt::Filter::Netlink(n)));
        }
        errors.finish_joined()
    }

    fn iptables_programs(&mut self, verb: Verb, family: IpFamily) -> Result<()> {
        self.family(verb, family, &mut ipt::Filter::Programs)
    }

    /// The nftables backend never writes to legacy iptables: where
    /// nf_tables does not open, its teardown runs no program.
    fn iptables_may_hold(&mut self, _: Option<&mut Nft>, _: IpFamily) -> bool {
        false
    }
}

/// Removes `owner`'s rules on every backend: the addresses in `known`
/// (from `prevResult`, may be empty) and those its records name, except
/// addresses whose record names another owner (they were given to a newer
/// container). Needs neither the namespace nor `prevResult`. Best effort:
/// every step runs, the errors are reported together; records go last.
pub fn del(
    hint: &TeardownHint,
    records: &Records,
    owner: &Owner,
    ifname: &str,
    known: &[IpAddr],
) -> Result<()> {
    let mut errors = ErrorList::new();
    fault::point("firewall/del-before-commit");
    // With the runtime's prevResult, the records of its addresses; without
    // it, every record (to find this attachment's).
    let all = if known.is_empty() {
        match records.all() {
            Ok(a) => a,
            Err(e) => {
                errors.push(e);
                Vec::new()
            }
        }
    } else {
        known
            .iter()
            .filter_map(|a| records.get(*a).map(|r| (*a, r)))
            .collect()
    };
    let mine: Vec<&(IpAddr, Record)> = all
        .iter()
        .filter(|(_, r)| r.names(&owner.network, &owner.container_id, ifname))
        .collect();
    let held: Vec<IpAddr> = all
        .iter()
        .filter(|(_, r)| !r.names(&owner.network, &owner.container_id, ifname))
        .map(|(a, _)| *a)
        .collect();
    let unrecorded: Vec<IpAddr> = known
        .iter()
        .filter(|a| !all.iter().any(|(r, _)| r == *a))
        .copied()
        .collect();

    // firewalld: recorded sources in their zone; addresses without a
    // record in the config's zone when the config's backend is (or, by
    // default, would have been) firewalld.
    let mut sources: Sources = mine
        .iter()
        .filter(|(_, r)| r.backend == "firewalld")
        .map(|(a, r)| (*a, r.zone.clone()))
        .collect();
    match hint {
        TeardownHint::Firewalld { zone } => {
            sources.extend(unrecorded.iter().map(|a| (*a, zone.clone())))
        }
        TeardownHint::Auto { zone } if !unrecorded.is_empty() && firewalld::is_running() => {
            sources.extend(unrecorded.iter().map(|a| (*a, zone.clone())))
        }
        _ => {}
    }
    firewalld_remove(&sources, &mut errors);

    // nf_tables and iptables: every address that is not firewalld's.
    let remove: Vec<IpAddr> = mine
        .iter()
        .filter(|(_, r)| r.backend != "firewalld")
        .map(|(a, _)| *a)
        .chain(unrecorded.iter().copied())
        .collect::<BTreeSet<IpAddr>>()
        .into_iter()
        .collect();
    // Our previous release's own table: by key, or by tag when no address
    // is known. Known addresses that are all firewalld's need no iptables
    // pass; otherwise the rules of `remove`, and our previous release's
    // records of this owner (found only by reading the chain).
    let legacy_mine = ipt::owner_comment(owner);
    let mut state = Teardown {
        previous_release: &|n| nft::del(n, owner, &remove),
        remove: &remove,
        held: &held,
        doomed: &|rec| rec.comment == legacy_mine,
    };
    let iptables = !remove.is_empty() || known.is_empty();
    teardown(&hint.visits(iptables), Verb::Del, &mut state, &mut errors);
    fault::point("firewall/del-after-commit");
    if errors.is_empty() {
        for (a, _) in &mine {
            errors.record(records.remove(*a));
        }
    }
    errors.finish_kernel("firewall DEL")
}

/// Removes the rules of attachments of `network` that are not in `valid`
/// (GC), on every backend, by their records (and our previous release's
/// owner records and nf_tables tags).
pub fn gc(
    hint: &TeardownHint,
    records: &Records,
    network: &str,
    valid: &[Attachment],
) -> Result<()> {
    let mut errors = ErrorList::new();
    let all = match records.all() {
        Ok(a) => a,
        Err(e) => {
            errors.push(e);
            Vec::new()
        }
    };
    let stale: Vec<&(IpAddr, Record)> = all
        .iter()
        .filter(|(_, r)| {
            r.network == network
                && !valid
                    .iter()
                    .any(|v| r.names(network, &v.container_id, &v.ifname))
        })
        .collect();
    let sources: Sources = stale
        .iter()
        .filter(|(_, r)| r.backend == "firewalld")
        .map(|(a, r)| (*a, r.zone.clone()))
        .collect();
    firewalld_remove(&sources, &mut errors);
    let remove: Vec<IpAddr> = stale
        .iter()
        .filter(|(_, r)| r.backend != "firewalld")
        .map(|(a, _)| *a)
        .collect();
    let mut state = Teardown {
        previous_release: &|n| nft::gc(n, network, valid),
        remove: &remove,
        held: &[],
        doomed: &|rec| ipt::legacy_stale(rec, network, valid),
    };
    teardown(&hint.visits(true), Verb::Gc, &mut state, &mut errors);
    if errors.is_empty() {
        for (a, _) in &stale {
            errors.record(records.remove(*a));
        }
    }
    errors.finish_kernel("firewall GC")
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::netfilter::testing::run_in;
    use libcni::netns::testing::{new_netns, privileged};

    fn spec(cid: &str, addrs: &[&str], isolate: Option<(&str, Policy)>) -> FirewallSpec {
        FirewallSpec {
            owner: Owner::new("fwnet", cid),
            ifname: "eth0".into(),
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
            isolate: isolate.map(|(b, policy)| Isolation {
                bridge: b.to_string(),
                policy,
            }),
            admin_chain: IPT_DEFAULT_ADMIN_CHAIN.into(),
        }
    }

    fn temp_records(tag: &str) -> Records {
        let d = std::env::temp_dir().join(format!("fw-unit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Records::new(&d)
    }

    #[test]
    fn netfilter_firewall_names_are_validated() {
        for ok in ["CNI-ADMIN", "MY_ADMIN.1", &"A".repeat(28)] {
            validate_chain_name("iptablesAdminChainName", ok).unwrap();
        }
        for bad in [
            "",
            "a b",
            "-x",
            "!x",
            "FORWARD",
            "ACCEPT",
            "CNI-FORWARD",
            "a\"b",
            &"A".repeat(29),
        ] {
            let e = validate_chain_name("iptablesAdminChainName", bad).unwrap_err();
            assert_eq!(e.code(), 7, "{bad}");
            assert!(e.to_string().contains("iptablesAdminChainName"), "{e}");
        }
        validate_bridge_name("k", "cni-podman0").unwrap();
        for bad in ["", "br+", "br*", "a b", "x\"", "!br", "a234567890123456"] {
            assert_eq!(
                validate_bridge_name("k", bad).unwrap_err().code(),
                7,
                "{bad}"
            );
        }
    }

    #[test]
    fn netfilter_firewall_nftables_writes_the_iptables_rules_and_collects() {
        if !privileged("netfilter_firewall_nftables_writes_the_iptables_rules_and_collects") {
            return;
        }
        let node = new_netns();
        let recs = temp_records("nft");
        let a = spec(
            "ctr-a",
            &["10.1.0.2", "fd00:1::2"],
            Some(("cni0", Policy::Isolated)),
        );
        let b = spec("ctr-b", &["10.1.0.3"], Some(("cni0", Policy::SameBridge)));
        let n = FwBackend::Nftables;
        node.run(|| {
            add(&n, &a, &recs)?;
            add(&n, &a, &recs)?;
            add(&n, &b, &recs)?;
            check(&n, &a)?;
            check(&n, &b)
        })
        .unwrap()
        .unwrap();
        // iptables-save shows the Go plugin's rules, each once.
        let saved = run_in(&node, "iptables-save", &["-t", "filter"]);
        let rules: Vec<&str> = saved.lines().filter(|l| l.starts_with("-A ")).collect();
        let mut want = vec![ipt::forward_jump(), ipt::admin_jump("CNI-ADMIN")];
        for addr in ["10.1.0.2", "10.1.0.3"] {
            want.extend(ipt::accept_rules(addr.parse().unwrap()));
        }
        want.extend(
            ipt::isolation_rules("cni0", Policy::Isolated)
                .into_iter()
                .map(|r| r.line),
        );
        want.push(
            ipt::isolation_rules("cni0", Policy::SameBridge)[1]
                .line
                .clone(),
        );
        for w in &want {
            assert_eq!(
                rules.iter().filter(|l| *l == w).count(),
                1,
                "{w} in\n{saved}"
            );
        }
        assert_eq!(rules.len(), want.len(), "{saved}");
        let saved6 = run_in(&node, "ip6tables-save", &["-t", "filter"]);
        assert!(
            saved6.contains("-A CNI-FORWARD -s fd00:1::2/128 -j ACCEPT"),
            "{saved6}"
        );
        assert_eq!(recs.all().unwrap().len(), 3);
        let valid = vec![Attachment {
            container_id: "ctr-a".into(),
            ifname: "eth0".into(),
        }];
        node.run(|| gc(&TeardownHint::Nftables, &recs, "fwnet", &valid))
            .unwrap()
            .unwrap();
        let saved = run_in(&node, "iptables-save", &["-t", "filter"]);
        assert!(!saved.contains("10.1.0.3"), "{saved}");
        assert!(saved.contains("10.1.0.2"), "{saved}");
        assert_eq!(recs.all().unwrap().len(), 2);
        // DEL without addresses finds them by record.
        node.run(|| del(&TeardownHint::Nftables, &recs, &a.owner, "eth0", &[]))
            .unwrap()
            .unwrap();
        let saved = run_in(&node, "iptables-save", &["-t", "filter"]);
        assert!(!saved.contains("10.1.0.2"), "{saved}");
        assert_eq!(recs.all().unwrap(), vec![]);
        let e = node.run(|| check(&n, &a)).unwrap().unwrap_err();
        assert_eq!(e.code(), 102, "{e}");
    }

    #[test]
    fn netfilter_firewall_iptables_records_owners_and_spares_a_new_owner() {
        if !privileged("netfilter_firewall_iptables_records_owners_and_spares_a_new_owner") {
            return;
        }
        let node = new_netns();
        let recs = temp_records("ipt");
        let old = spec("ctr-old", &["10.1.0.2"], None);
        let new = spec("ctr-new", &["10.1.0.2"], None);
        let i = FwBackend::Iptables;
        node.run(|| {
            add(&i, &old, &recs)?;
            add(&i, &new, &recs)?;
            // A late DEL of the old container leaves the new owner's rules.
            del(
                &TeardownHint::Iptables,
                &recs,
                &old.owner,
                "eth0",
                &old.addrs,
            )?;
            check(&i, &new)
        })
        .unwrap()
        .unwrap();
        let saved = run_in(&node, "iptables-save", &["-t", "filter"]);
        assert_eq!(
            saved
                .matches("-A CNI-FORWARD -s 10.1.0.2/32 -j ACCEPT")
                .count(),
            1,
            "{saved}"
        );
        assert!(!saved.contains("CNI-FORWARD-OWNERS"), "{saved}");
        let addr: IpAddr = "10.1.0.2".parse().unwrap();
        assert_eq!(recs.get(addr).unwrap().container_id, "ctr-new");
        node.run(|| del(&TeardownHint::Iptables, &recs, &new.owner, "eth0", &[]))
            .unwrap()
            .unwrap();
        let saved = run_in(&node, "iptables-save", &["-t", "filter"]);
        assert!(!saved.contains("10.1.0.2"), "{saved}");
        assert_eq!(recs.all().unwrap(), vec![]);
    }
}
