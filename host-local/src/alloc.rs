//! The allocator: what ADD, DEL, CHECK, GC and STATUS do with the lease
//! store, following the reference plugin's rules and order.
//!
//! ADD, DEL and GC run under the store's lock, held for the whole verb, and
//! read the directory once. CHECK and STATUS only read.
//!
//! Error codes: a request that no config can satisfy (a requested address
//! outside every range set, or a gateway) is code 7 (4 for `CNI_ARGS`);
//! a conflict with the current leases (range set exhausted, requested
//! address taken, this attachment already holding an address) is code 11,
//! "try again later": it clears when other attachments are released.

use crate::config::{IpamConfig, Requested, SetConf};
use crate::range::Range;
use crate::store::{self, Holder, Store};
use libcni::fault;
use libcni::types::{Attachment, IpConfig};
use libcni::Error;
use std::collections::HashSet;
use std::net::IpAddr;

/// ADD: one address from each range set, for `who`. On any failure, every
/// lease taken by this call is released again.
pub fn allocate(
    store: &Store,
    conf: &IpamConfig,
    who: &Attachment,
) -> Result<Vec<IpConfig>, Error> {
    let wanted = match_requests(conf)?;
    // Read only the leases that can be `who`'s: its own index links and
    // unindexed leases, in the sets of this config.
    let maybe_ours = store::maybe_held_by(who);
    let scan = store.scan(&|a, indexed_as| {
        maybe_ours(a, indexed_as) && conf.sets.iter().any(|s| s.set.contains(a))
    })?;
    if let Some(name) = scan.refused.first() {
        return Err(Error::io(
            format!("refusing {}", store.path().join(name).display()),
            std::io::Error::other(
                "a lease that is a symlink or not a regular file; host-local never creates one: remove it",
            ),
        ));
    }
    let mut taken: HashSet<IpAddr> = scan.leases.iter().map(|l| l.addr).collect();
    // The reference's rule: no second address in a set for the same
    // attachment (the spec forbids a second ADD without a DEL between).
    for (i, sc) in conf.sets.iter().enumerate() {
        if let Some(lease) = scan.leases.iter().find(|l| {
            sc.set.contains(l.addr) && l.holder.as_ref().is_some_and(|h| h.belongs_to(who))
        }) {
            return Err(Error::TryAgainLater(format!(
                "{} has been allocated to {} (interface {}) in {}, duplicate allocation is not allowed: DEL it first",
                lease.addr,
                who.container_id,
                who.ifname,
                sc.describe(i)
            )));
        }
    }

    let mut created: Vec<IpAddr> = Vec::new();
    let result = allocate_sets(store, conf, who, &wanted, &mut taken, &mut created);
    if result.is_err() {
        let key = store::attachment_hash(who);
        for addr in &created {
            let link = store::index_name(key, *addr);
            if let Err(e) = store.release(&addr.to_string(), &[link]) {
                eprintln!("host-local: releasing {addr} after a failed ADD: {e}");
            }
        }
    }
    result
}

fn allocate_sets(
    store: &Store,
    conf: &IpamConfig,
    who: &Attachment,
    wanted: &[Option<&Requested>],
    taken: &mut HashSet<IpAddr>,
    created: &mut Vec<IpAddr>,
) -> Result<Vec<IpConfig>, Error> {
    let mut ips = Vec::with_capacity(conf.sets.len());
    for (i, sc) in conf.sets.iter().enumerate() {
        let (range, addr) = match wanted[i] {
            Some(req) => reserve_requested(store, sc, i, req, who)?,
            None => reserve_next(store, sc, i, who, taken)?,
        };
        created.push(addr);
        taken.insert(addr);
        store.set_last_reserved(i, addr)?;
        ips.push(IpConfig {
            address: range.with_prefix(addr),
            gateway: Some(range.gateway()),
            interface: None,
        });
    }
    Ok(ips)
}

fn reserve_requested<'a>(
    store: &Store,
    sc: &'a SetConf,
    index: usize,
    req: &Requested,
    who: &Attachment,
) -> Result<(&'a Range, IpAddr), Error> {
    let range = sc
        .set
        .range_for(req.addr)
        .ok_or_else(|| req.error(&format!("is not in {}", sc.describe(index))))?;
    if !store.reserve(req.addr, who)? {
        return Err(Error::TryAgainLater(format!(
            "requested IP address {} is not available in {}: it is leased to another attachment",
            req.addr,
            sc.describe(index)
        )));
    }
    Ok((range, req.addr))
}

/// The reference's order: round robin from the set's last reserved address.
fn reserve_next<'a>(
    store: &Store,
    sc: &'a SetConf,
    index: usize,
    who: &Attachment,
    taken: &mut HashSet<IpAddr>,
) -> Result<(&'a Range, IpAddr), Error> {
    let exhausted = || {
        Error::TryAgainLater(format!(
            "no IP addresses available in {}",
            sc.describe(index)
        ))
    };
    if sc.set.free_count(taken) == 0 {
        return Err(exhausted());
    }
    let last = store.last_reserved(index)?;
    for (range, addr) in sc.set.candidates(last) {
        if taken.contains(&addr) {
            continue;
        }
        if store.reserve(addr, who)? {
            return Ok((range, addr));
        }
        // Taken by a writer that ignores the lock: skip it.
        taken.insert(addr);
    }
    Err(exhausted())
}

/// Pairs each requested address with the first range set holding it
/// (checked before anything is allocated). One address per set; the same
/// address asked twice counts once.
fn match_requests(conf: &IpamConfig) -> Result<Vec<Option<&Requested>>, Error> {
    let mut wanted: Vec<Option<&Requested>> = vec![None; conf.sets.len()];
    let mut seen = HashSet::new();
    for req in &conf.requested {
        if !seen.insert(req.addr) {
            continue;
        }
        let Some(i) = conf.sets.iter().position(|s| s.set.contains(req.addr)) else {
            let all: Vec<String> = conf
                .sets
                .iter()
                .enumerate()
                .map(|(i, s)| s.describe(i))
                .collect();
            return Err(req.error(&format!("is not inside any range set ({})", all.join("; "))));
        };
        let sc = &conf.sets[i];
        if sc.set.is_gateway(req.addr) {
            return Err(req.error(&format!("is the gateway of {}", sc.describe(i))));
        }
        if let Some(other) = wanted[i] {
            return Err(req.error(&format!(
                "{} is requested too, and both are in {}: a range set yields one address",
                other.addr,
                sc.describe(i)
            )));
        }
        wanted[i] = Some(req);
    }
    Ok(wanted)
}

/// DEL: releases what `who` holds. With `hint` (the addresses of the
/// `prevResult`) it goes straight to those files, removing each one whose
/// content names `who`; only when none did does it walk the directory,
/// once, removing every lease of `who`, or (when there is none) every
/// legacy lease holding just its container ID, as the reference does.
/// Best effort: goes on past a failed removal and reports them together.
pub fn release(store: &Store, who: &Attachment, hint: &[IpAddr]) -> Result<(), Error> {
    let mut errors: Vec<String> = Vec::new();
    let mut removed = 0usize;
    let mut remove =
        |name: &str, links: &[String], errors: &mut Vec<String>| match store.release(name, links) {
            Ok(true) => {
                removed += 1;
                if removed == 1 {
                    fault::point("host-local/released");
                }
                true
            }
            Ok(false) => false,
            Err(e) => {
                errors.push(e.to_string());
                false
            }
        };
    let mut direct = 0;
    let key = store::attachment_hash(who);
    for addr in hint {
        // A symlink or other odd entry cannot be our lease: leave it.
        if let Ok(Some(h)) = store.read_lease(*addr) {
            let link = store::index_name(key, *addr);
            if h.is(who) && remove(&addr.to_string(), &[link], &mut errors) {
                direct += 1;
            }
        }
    }
    if direct == 0 {
        match store.scan(&store::maybe_held_by(who)) {
            Ok(scan) => {
                let held = |f: &dyn Fn(&Holder) -> bool| -> Vec<&store::Lease> {
                    scan.leases
                        .iter()
                        .filter(|l| l.holder.as_ref().is_some_and(f))
                        .collect()
                };
                let mut leases = held(&|h| h.is(who));
                if leases.is_empty() {
                    leases = held(&|h| h.is_legacy_of(&who.container_id));
                }
                for lease in leases {
                    remove(&lease.name, &lease.links, &mut errors);
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::io(
            format!(
                "releasing the leases of {}/{} in {}",
                who.container_id,
                who.ifname,
                store.path().display()
            ),
            std::io::Error::other(errors.join("; ")),
        ))
    }
}

/// CHECK: every address of `prev` is leased to `who` (stricter than the
/// reference, which is content with any lease of `who`). Without addresses
/// to check, `who` must hold at least one lease.
pub fn check(
    store: Option<&Store>,
    dir: &std::path::Path,
    who: &Attachment,
    prev: &[IpAddr],
) -> Result<(), Error> {
    let Some(store) = store else {
        return Err(Error::CheckFailed(format!(
            "no lease of {}/{}: {} does not exist",
            who.container_id,
            who.ifname,
            dir.display()
        )));
    };
    if prev.is_empty() {
        let scan = store.scan(&store::maybe_held_by(who))?;
        if scan
            .leases
            .iter()
            .any(|l| l.holder.as_ref().is_some_and(|h| h.belongs_to(who)))
        {
            return Ok(());
        }
        return Err(Error::CheckFailed(format!(
            "no address is leased to {}/{} in {}",
            who.container_id,
            who.ifname,
            dir.display()
        )));
    }
    for addr in prev {
        let holder = store
            .read_lease(*addr)
            .map_err(|e| Error::CheckFailed(format!("address {addr} of prevResult: {e}")))?;
        match holder {
            Some(h) if h.belongs_to(who) => {}
            Some(h) => {
                return Err(Error::CheckFailed(format!(
                    "address {addr} of prevResult is not leased to {}/{}: its lease in {} holds {}",
                    who.container_id,
                    who.ifname,
                    dir.display(),
                    describe_holder(&h)
                )))
            }
            None => {
                return Err(Error::CheckFailed(format!(
                    "address {addr} of prevResult is not leased to {}/{}: no lease file {}",
                    who.container_id,
                    who.ifname,
                    dir.join(addr.to_string()).display()
                )))
            }
        }
    }
    Ok(())
}

fn describe_holder(h: &Holder) -> String {
    match h {
        Holder::Attachment(a) => format!("{}/{}", a.container_id, a.ifname),
        Holder::LegacyId(id) => format!("container {id}"),
        Holder::Unknown => "nothing readable".into(),
    }
}

/// GC: releases every lease whose holder is not among `valid`: a legacy
/// lease (bare container ID) stays while any valid attachment has that
/// container ID; an empty or garbage lease (from a crash of the Go plugin
/// between create and write) has no holder and goes. The lock, the
/// `last_reserved_ip.*` files and anything not named like an address stay.
pub fn gc(store: &Store, valid: &[Attachment]) -> Result<(), Error> {
    let keys: HashSet<String> = valid.iter().map(Holder::content_for).collect();
    let ids: HashSet<&str> = valid.iter().map(|a| a.container_id.trim()).collect();
    let scan = store.scan(&|_, _| true)?;
    let mut errors: Vec<String> = scan
        .refused
        .iter()
        .map(|n| {
            format!(
                "refusing {}: not a regular file (left alone; remove it)",
                store.path().join(n).display()
            )
        })
        .collect();
    for lease in &scan.leases {
        let keep = match &lease.holder {
            Some(Holder::Attachment(a)) => keys.contains(&Holder::content_for(a)),
            Some(Holder::LegacyId(id)) => ids.contains(id.as_str()),
            Some(Holder::Unknown) | None => false,
        };
        if !keep {
            if let Err(e) = store.release(&lease.name, &lease.links) {
                errors.push(e.to_string());
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::io(
            format!("GC in {}", store.path().display()),
            std::io::Error::other(errors.join("; ")),
        ))
    }
}

/// STATUS: whether an ADD could be served on this node. Code 50 when it
/// never could until the node or config changes: a range set with no
/// address to hand out at all (nothing but its gateway), or a lease
/// directory that cannot be written (a file in the way, read-only, a
/// symlink, which ADD refuses). A pool whose addresses are all taken is
/// not one: ADD reports it (code 11) and STATUS succeeds, since runtimes
/// (containerd 2.x) turn a STATUS failure into NetworkReady=false, and
/// kubelet a NotReady node into evicted pods: a capacity problem must not
/// become an outage. Reads no lease (STATUS runs every few seconds).
pub fn status(conf: &IpamConfig) -> Result<(), Error> {
    let nothing_taken = HashSet::new();
    for (i, sc) in conf.sets.iter().enumerate() {
        if sc.set.free_count(&nothing_taken) == 0 {
            return Err(Error::NotAvailable(format!(
                "{} holds no address to hand out",
                sc.describe(i)
            )));
        }
    }
    let dir = conf.location.dir();
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(Error::NotAvailable(format!(
            "the lease directory {} is a symlink, which host-local refuses",
            dir.display()
        )));
    }
    libcni::files::check_writable_dir(&dir)
        .map_err(|why| Error::NotAvailable(format!("leases cannot be written: {why}")))
}
