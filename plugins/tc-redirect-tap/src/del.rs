//! DEL, best effort: everything ADD made lives in the container's
//! namespace, so a namespace that is gone (or an empty `CNI_NETNS`) is
//! success. Otherwise, with neither the config's other keys nor
//! `CNI_ARGS` needed:
//!
//! - the taps: each tap carrying this attachment's alias (so a killed
//!   ADD's tap is found with no result), and the tap `prevResult` names
//!   (awslabs' plugin's, which carries no alias) unless it carries another
//!   attachment's alias;
//! - on `CNI_IFNAME`, each u32 match-all redirect to one of those taps or
//!   to a link that is gone (the tap of an earlier, interrupted DEL), and
//!   then the ingress qdisc when no filter is left on it (awslabs' plugin
//!   always deletes it);
//! - then the taps, their qdisc and filter with them.
//!
//! A link, qdisc or filter already gone is success; a failed step does not
//! stop the next, and the errors are reported together.

use std::collections::BTreeSet;
use std::path::Path;

use libcni::netlink::tc::{Filter, ETH_P_ALL, INGRESS_HANDLE, INGRESS_PARENT};
use libcni::netlink::{errno, is_not_found, Link, Netlink};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::tuntap;
use libcni::{fault, Error, ErrorList};

use crate::pair::{self, ALIAS_PREFIX};

pub fn del(args: &CmdArgs) -> Result<(), Error> {
    let Some(ns) = NetNs::open_container_if_present(Path::new(&args.netns))? else {
        return Ok(()); // the tap and the filters went with the namespace
    };
    let mut nl = Netlink::open_in(&ns)?;
    let links = nl.links()?;
    let taps = our_taps(&mut nl, &links, args);
    let mut errors = ErrorList::new();
    if let Some(veth) = links.iter().find(|l| l.name == args.ifname) {
        let live: BTreeSet<u32> = links.iter().map(|l| l.index).collect();
        let ours = |target: u32| taps.contains(&target) || !live.contains(&target);
        unredirect(&mut nl, veth, &ours, &mut errors);
    }
    fault::point("tc-redirect-tap/del-filters");
    for &tap in &taps {
        match nl.delete_link(tap) {
            Err(e) if !is_not_found(&e) => errors.push(e),
            _ => {}
        }
    }
    errors.finish_kernel("tc-redirect-tap DEL")
}

/// The indexes of the attachment's taps among `links` (see the module
/// documentation).
fn our_taps(nl: &mut Netlink, links: &[Link], args: &CmdArgs) -> BTreeSet<u32> {
    let alias = pair::alias(args);
    let named = args.prev_result_for_teardown().and_then(|r| {
        pair::vm_and_tap(&r, &args.container_id)
            .ok()
            .map(|(_, tap)| tap.name.clone())
    });
    links
        .iter()
        .filter(|l| l.kind.as_deref() == Some("tun"))
        .filter(|l| match l.alias.as_deref() {
            Some(a) if a == alias => true,
            Some(a) if a.starts_with(ALIAS_PREFIX) => false,
            _ => {
                named.as_deref() == Some(l.name.as_str())
                    && tuntap::tun_info(nl, l.index)
                        .ok()
                        .flatten()
                        .is_some_and(|t| t.tap)
            }
        })
        .map(|l| l.index)
        .collect()
}

/// Removes the match-all redirects on `veth`'s ingress whose target is
/// `ours`, then its ingress qdisc if no filter is left.
fn unredirect(nl: &mut Netlink, veth: &Link, ours: &dyn Fn(u32) -> bool, errors: &mut ErrorList) {
    let (parent, kind) = match nl.ingress_hook(veth.index) {
        Ok(Some(hook)) => hook,
        Ok(None) => return,
        Err(e) => return errors.push(e),
    };
    let Some(filters) = errors.record(nl.filters(veth.index, parent, 0, 0)) else {
        return;
    };
    for f in filters
        .iter()
        .filter(|f| f.match_all_redirect().is_some_and(ours))
    {
        // A u32 rule alone at its priority goes with the whole classifier
        // instance (its hash table would stay behind); else just the rule.
        let alone = !filters
            .iter()
            .any(|o| o.priority == f.priority && o.is_rule() && o.handle != f.handle);
        let r = if alone {
            nl.delete_filter_priority(veth.index, parent, f.priority, ETH_P_ALL, "u32")
        } else {
            nl.delete_filter(f)
        };
        match r {
            Err(e) if !gone(&e) => errors.push(e),
            _ => {}
        }
    }
    if kind != "ingress" {
        return; // a clsact qdisc is never ours
    }
    let Some(left) = errors.record(nl.filters(veth.index, parent, 0, 0)) else {
        return;
    };
    if left.iter().any(Filter::is_rule) {
        return;
    }
    match nl.delete_qdisc(veth.index, INGRESS_PARENT, INGRESS_HANDLE) {
        Err(e) if !gone(&e) => errors.push(e),
        _ => {}
    }
}

/// A link, qdisc or filter that is no longer there: `ENODEV`, `ENOENT`,
/// or `EINVAL` where the kernel finds no qdisc of that handle.
fn gone(e: &Error) -> bool {
    is_not_found(e) || matches!(errno(e), Some(libc::ENOENT) | Some(libc::EINVAL))
}
