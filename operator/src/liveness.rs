//! Which attachments are live. An attachment is live when any of these
//! holds, checked in this order:
//! 1. the network namespace its records name is there, and is the one of
//!    its ADD ([`crate::namespace`]: the cache's `netns`, else the
//!    `sandbox` of its result's interfaces, opened as nsfs and checked);
//! 2. the CRI runtime lists its sandbox (ready or not: the runtime will
//!    call DEL when it stops it);
//! 3. its newest file is younger than the grace period: an ADD in flight
//!    already holds a lease and rules, but the runtime caches its result
//!    only when the whole chain succeeded.
//!
//! A cached attachment that is not live is *stale* when its death is
//! proven: the namespace its records name is gone (no such path, or no
//! network namespace there), or a CRI runtime was asked and does not list
//! it. Otherwise it is *unknown*: its records name no namespace, their
//! sandboxes disagree, or the path holds a namespace that is not the
//! ADD's (a reused path, which proves nothing about the pod). State that
//! no cache entry names and that is not live by 2 or 3 is *untied*: a
//! runtime without a cache may still own it. Unknown and untied state is
//! only removed on request.
//!
//! An attachment with a live sibling (another interface of the same
//! container on the same network) is live too: the rules and the IFB of
//! a network are per container, so removing one interface's would take
//! the other's.

use std::time::{Duration, SystemTime};

use std::collections::{BTreeMap, BTreeSet as Set};

use crate::collect::{AttachmentKey, Row};

/// Kubelet's default pod start timeout is 4 minutes; an ADD taking longer
/// than 2 is far beyond anything normal.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Netns,
    Sandbox,
    Young,
    /// Another interface of its container on its network is live.
    Sibling,
    /// Cached, and none of the above.
    Stale,
    /// Cached, no namespace of its ADD known to be there or gone, and no
    /// CRI runtime asked.
    Unknown,
    /// Not cached, and not a sandbox nor young.
    Untied,
}

impl Liveness {
    pub fn is_live(self) -> bool {
        matches!(
            self,
            Liveness::Netns | Liveness::Sandbox | Liveness::Young | Liveness::Sibling
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Netns => "netns",
            Liveness::Sandbox => "sandbox",
            Liveness::Young => "young",
            Liveness::Sibling => "sibling",
            Liveness::Stale => "stale",
            Liveness::Unknown => "unknown",
            Liveness::Untied => "untied",
        }
    }
}

/// What the rule is judged against.
pub struct Judge {
    /// The runtime's sandboxes, when a CRI socket was asked.
    pub sandboxes: Option<Set<String>>,
    pub grace: Duration,
    pub now: SystemTime,
}

/// Each row's liveness, by its key.
pub type Verdicts = BTreeMap<AttachmentKey, Liveness>;

impl Judge {
    /// The liveness of every row, siblings of live rows made live.
    pub fn judge(&self, rows: &[Row]) -> Verdicts {
        let mut verdicts: Verdicts = rows
            .iter()
            .map(|r| (r.key.clone(), self.own_liveness(r)))
            .collect();
        let live: Set<(String, String)> = verdicts
            .iter()
            .filter(|(k, l)| l.is_live() && !k.container_id.is_empty())
            .map(|(k, _)| (k.network.clone(), k.container_id.clone()))
            .collect();
        for (k, l) in verdicts.iter_mut() {
            if !l.is_live() && live.contains(&(k.network.clone(), k.container_id.clone())) {
                *l = Liveness::Sibling;
            }
        }
        verdicts
    }

    fn own_liveness(&self, row: &Row) -> Liveness {
        let namespace = row.cached.as_ref().map(|c| &c.namespace);
        if namespace.is_some_and(|n| n.is_live()) {
            return Liveness::Netns;
        }
        let cid = &row.key.container_id;
        if self
            .sandboxes
            .as_ref()
            .is_some_and(|s| !cid.is_empty() && s.contains(cid))
        {
            return Liveness::Sandbox;
        }
        let young = row
            .newest()
            .is_some_and(|t| self.now.duration_since(t).unwrap_or_default() < self.grace);
        if young {
            return Liveness::Young;
        }
        match namespace {
            Some(n) if n.is_gone() || self.sandboxes.is_some() => Liveness::Stale,
            Some(_) => Liveness::Unknown,
            None => Liveness::Untied,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::{Cached, Kind, Piece};
    use crate::namespace::{Namespace, Probe, Recorded, Source};
    use cnitool::cache::CacheEntry;
    use std::path::PathBuf;

    const NOW: Duration = Duration::from_secs(1_800_000_000);

    fn at(age_secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + NOW - Duration::from_secs(age_secs)
    }

    fn key(network: &str, cid: &str, ifname: &str) -> AttachmentKey {
        AttachmentKey {
            network: network.into(),
            container_id: cid.into(),
            ifname: ifname.into(),
        }
    }

    fn path(probe: Probe) -> Namespace {
        Namespace {
            recorded: Recorded::Path {
                path: "/run/netns/p".into(),
                source: Source::Result,
            },
            probe: Some(probe),
        }
    }

    /// A row of `cid` on `net`: cached with `namespace` when given, its
    /// one file (a lease) written `age` seconds ago.
    fn row(cid: &str, ifname: &str, namespace: Option<Namespace>, age: u64) -> Row {
        let mut r = Row::new(key("net", cid, ifname));
        r.pieces.push(Piece {
            kind: Kind::Lease,
            location: format!("/var/lib/cni/networks/net/{cid}"),
            present: true,
            modified: Some(at(age)),
        });
        r.cached = namespace.map(|namespace| Cached {
            entry: CacheEntry::default(),
            path: PathBuf::new(),
            modified: at(age),
            addresses: Vec::new(),
            host_interface: None,
            host_ports: Vec::new(),
            shaping: None,
            ingress_rate: None,
            egress_rate: None,
            namespace,
        });
        r
    }

    fn judge(listed: Option<&[&str]>) -> Judge {
        Judge {
            sandboxes: listed.map(|l| l.iter().map(|s| s.to_string()).collect()),
            grace: DEFAULT_GRACE,
            now: SystemTime::UNIX_EPOCH + NOW,
        }
    }

    #[test]
    fn one_rule_per_record() {
        let gone = || path(Probe::Gone("does not exist".into()));
        let reused = || path(Probe::Other("bound after the ADD".into()));
        let nothing = || Namespace {
            recorded: Recorded::Nothing,
            probe: None,
        };
        let disagreeing = || Namespace {
            recorded: Recorded::Disagreeing(vec!["/run/netns/a".into(), "c1".into()]),
            probe: None,
        };
        let old = 3600;
        #[rustfmt::skip]
        let cases: Vec<(&str, Row, Option<&[&str]>, Liveness)> = vec![
            ("the ADD's namespace is there", row("c", "eth0", Some(path(Probe::Same)), old), None, Liveness::Netns),
            ("the namespace beats a runtime that lists nothing", row("c", "eth0", Some(path(Probe::Same)), old), Some(&[]), Liveness::Netns),
            ("listed by the runtime, namespace gone", row("c", "eth0", Some(gone()), old), Some(&["c"]), Liveness::Sandbox),
            ("listed by the runtime, nothing recorded", row("c", "eth0", Some(nothing()), old), Some(&["c"]), Liveness::Sandbox),
            ("young, namespace gone", row("c", "eth0", Some(gone()), 10), None, Liveness::Young),
            ("young, not cached (an ADD in flight)", row("c", "eth0", None, 10), None, Liveness::Young),
            ("namespace gone: stale", row("c", "eth0", Some(gone()), old), None, Liveness::Stale),
            ("nothing recorded, no runtime asked", row("c", "eth0", Some(nothing()), old), None, Liveness::Unknown),
            ("nothing recorded, the runtime lists it not", row("c", "eth0", Some(nothing()), old), Some(&["other"]), Liveness::Stale),
            ("a reused path, no runtime asked", row("c", "eth0", Some(reused()), old), None, Liveness::Unknown),
            ("a reused path, the runtime lists it not", row("c", "eth0", Some(reused()), old), Some(&[]), Liveness::Stale),
            ("sandboxes that disagree", row("c", "eth0", Some(disagreeing()), old), None, Liveness::Unknown),
            ("not cached, old", row("c", "eth0", None, old), None, Liveness::Untied),
            ("not cached, the runtime lists it not", row("c", "eth0", None, old), Some(&[]), Liveness::Untied),
            ("not cached, listed", row("c", "eth0", None, old), Some(&["c"]), Liveness::Sandbox),
        ];
        for (what, r, listed, want) in cases {
            let verdicts = judge(listed).judge(std::slice::from_ref(&r));
            assert_eq!(verdicts[&r.key], want, "{what}");
            assert_eq!(want.is_live(), verdicts[&r.key].is_live(), "{what}");
        }
    }

    #[test]
    fn a_live_interface_keeps_its_siblings_and_nobody_elses() {
        let gone = || Some(path(Probe::Gone("does not exist".into())));
        let rows = [
            row("c", "eth0", Some(path(Probe::Same)), 3600),
            row("c", "net1", gone(), 3600),
            // A container-only row (a portmap ledger): the same container.
            row("c", "", None, 3600),
            row("d", "eth0", gone(), 3600),
            // State naming nobody is nobody's sibling.
            row("", "bwp0123456789ab", None, 3600),
        ];
        let v = judge(None).judge(&rows);
        let of = |cid: &str, ifname: &str| v[&key("net", cid, ifname)];
        assert_eq!(of("c", "eth0"), Liveness::Netns);
        assert_eq!(of("c", "net1"), Liveness::Sibling);
        assert_eq!(of("c", ""), Liveness::Sibling);
        assert_eq!(of("d", "eth0"), Liveness::Stale);
        assert_eq!(of("", "bwp0123456789ab"), Liveness::Untied);
        let mut other_net = row("c", "eth0", gone(), 3600);
        other_net.key.network = "other".into();
        let v = judge(None).judge(&[rows[0].clone(), other_net.clone()]);
        assert_eq!(
            v[&other_net.key],
            Liveness::Stale,
            "siblings share a network"
        );
    }
}
