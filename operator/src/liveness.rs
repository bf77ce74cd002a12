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
