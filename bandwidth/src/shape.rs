//! The kernel side: finding the host veth, installing the qdiscs, the
//! filter and the IFB (idempotently), checking them, and removing them.
//!
//! What one ADD leaves, all of it found again from the container ID and the
//! network name:
//! - ingress shaping: a TBF `1:` at the root of the host veth;
//! - egress shaping: the IFB `bwp` + 12 hex digits of
//!   sha512(network name + container ID) (the Go plugin's name), with the
//!   alias `cni-bandwidth:<containerID>:<ifname>` recording its owner for
//!   GC; a TBF `1:` at its root; an ingress qdisc on the host veth (or a
//!   clsact or ingress qdisc someone else put there, shared); on it a u32
//!   filter, priority 1, protocol all, redirecting everything to the IFB.

use crate::config::{Bandwidth, Limit};
use libcni::fault;
use libcni::netlink::ifb::IfbSpec;
use libcni::netlink::link::Link;
use libcni::netlink::tc::{
    self, PschedClock, Qdisc, RedirectFilter, CLSACT_INGRESS, ETH_P_ALL, INGRESS_HANDLE,
    INGRESS_PARENT, ROOT,
};
use libcni::netlink::{is_exists, is_not_found, Netlink};
use libcni::netns::NetNs;
use libcni::{Error, ErrorList};
use sha2::{Digest, Sha512};
use std::collections::HashSet;

/// Handle of our TBFs (`1:`), as the Go plugin.
pub const TBF_HANDLE: u32 = tc::handle(1, 0);
/// Priority of the redirect filter, as the Go plugin.
pub const FILTER_PRIORITY: u16 = 1;
/// Class the redirect filter reports (`1:1`), as the Go plugin.
pub const FILTER_CLASSID: u32 = tc::handle(1, 1);
/// The start of the alias that marks an IFB as ours.
pub const ALIAS_PREFIX: &str = "cni-bandwidth:";
/// The longest alias the kernel keeps (`IFALIASZ` - 1).
const MAX_ALIAS_LEN: usize = 255;

/// The IFB of a container on a network: `bwp` + the first 12 hex digits of
/// sha512(network name + container ID), 15 characters, as the Go plugin
/// names it (`utils.MustFormatHashWithPrefix`), so either plugin finds the
/// other's.
pub fn ifb_name(network: &str, container_id: &str) -> String {
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("bwp{hex}")
}

/// Who an ADD works for: the IFB's name and the alias that records the
/// attachment on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub ifb_name: String,
    /// `cni-bandwidth:<containerID>:<ifname>`; empty if that would be
    /// longer than the kernel keeps (GC then cannot see the IFB; DEL can).
    pub alias: String,
}

impl Owner {
    pub fn new(network: &str, container_id: &str, ifname: &str) -> Owner {
        let alias = format!("{ALIAS_PREFIX}{container_id}:{ifname}");
        Owner {
            ifb_name: ifb_name(network, container_id),
            alias: if alias.len() <= MAX_ALIAS_LEN {
                alias
            } else {
                String::new()
            },
        }
    }
}

/// The container ID and ifname an alias of ours records. Neither can hold
/// a ':' (the spec's patterns).
pub fn parse_alias(alias: &str) -> Option<(&str, &str)> {
    let rest = alias.strip_prefix(ALIAS_PREFIX)?;
    let (cid, ifname) = rest.split_once(':')?;
    (!cid.is_empty() && !ifname.is_empty() && !ifname.contains(':')).then_some((cid, ifname))
}

/// The host end of the container's veth `ifname`: the link here whose
/// index the container end names as its peer (`IFLA_LINK`), checked to
/// be a veth naming the container end back. Anything else is an error
/// that says what was found.
pub fn host_veth(ns: &NetNs, host: &mut Netlink, ifname: &str) -> Result<Link, Error> {
    let mut inside = Netlink::open_in(ns)?;
    let container = inside.link_by_name(ifname)?.ok_or_else(|| {
        Error::InvalidEnv(format!(
            "CNI_IFNAME {ifname:?}: no such interface in CNI_NETNS {:?}",
            ns.path()
        ))
    })?;
    if container.kind.as_deref() != Some("veth") {
        return Err(Error::config(
            "prevResult",
            format!(
                "container interface {ifname:?} is a {} link, not a veth: bandwidth shapes the host end of a veth pair",
                container.kind.as_deref().unwrap_or("kindless")
            ),
        ));
    }
    let peer = container.peer_index.ok_or_else(|| {
        Error::config(
            "prevResult",
            format!("container interface {ifname:?} has no veth peer"),
        )
    })?;
    match host.link_by_index(peer)? {
        Some(h) if h.kind.as_deref() == Some("veth") && h.peer_index == Some(container.index) => {
            Ok(h)
        }
        _ => Err(Error::config(
            "prevResult",
            format!(
                "the veth peer of container interface {ifname:?} (index {peer}) is not in the plugin's network namespace"
            ),
        )),
    }
}

/// For DEL: the host veth if the container interface is still there and is
/// a veth whose peer is here; `None` when anything of that is gone.
pub fn host_veth_if_present(
    ns: &NetNs,
    host: &mut Netlink,
    ifname: &str,
) -> Result<Option<Link>, Error> {
    let mut inside = Netlink::open_in(ns)?;
    let Some(container) = inside.link_by_name(ifname)? else {
        return Ok(None);
    };
    let Some(peer) = container
        .peer_index
        .filter(|_| container.kind.as_deref() == Some("veth"))
    else {
        return Ok(None);
    };
    Ok(host
        .link_by_index(peer)?
        .filter(|h| h.kind.as_deref() == Some("veth") && h.peer_index == Some(container.index)))
}

/// Installs the shaping of `bw` for the host veth `veth`. Safe to repeat:
/// every step replaces or reuses what a previous run left. Returns the
/// IFB when egress is shaped.
pub fn apply(
    host: &mut Netlink,
    veth: &Link,
    bw: &Bandwidth,
    owner: &Owner,
    clock: &PschedClock,
) -> Result<Option<Link>, Error> {
    if let Some(limit) = &bw.ingress {
        install_tbf(host, veth.index, limit, clock)?;
        fault::point("bandwidth/ingress-tbf");
    }
    let Some(limit) = &bw.egress else {
        return Ok(None);
    };
    let ifb = host.ensure_ifb(&IfbSpec {
        name: &owner.ifb_name,
        mtu: veth.mtu,
        txqueuelen: 0,
        alias: &owner.alias,
    })?;
    fault::point("bandwidth/ifb");
    // The IFB's TBF comes before the redirect, so no packet goes through
    // the IFB unshaped.
    install_tbf(host, ifb.index, limit, clock)?;
    fault::point("bandwidth/egress-tbf");
    let parent = ensure_ingress_qdisc(host, veth)?;
    fault::point("bandwidth/ingress-qdisc");
    ensure_redirect(host, veth, parent, ifb.index)?;
    fault::point("bandwidth/filter");
    Ok(Some(ifb))
}

/// Puts the TBF of `limit` at the root of link `index` (replacing what is
/// there). A root qdisc of another kind holding our handle is deleted
/// first: the kernel does not change a qdisc's kind in place.
fn install_tbf(
    host: &mut Netlink,
    index: u32,
    limit: &Limit,
    clock: &PschedClock,
) -> Result<(), Error> {
    if let Some(q) = host.qdisc_at(index, ROOT)? {
        if q.handle == TBF_HANDLE && q.kind != "tbf" {
            host.delete_qdisc(index, ROOT, TBF_HANDLE)?;
        }
    }
    host.replace_tbf(index, ROOT, TBF_HANDLE, &limit.tbf(clock))
}

/// The filter parent of the veth's ingress hook: the ingress qdisc there,
/// or a clsact qdisc someone else installed; adds an ingress qdisc if
/// there is neither.
fn ensure_ingress_qdisc(host: &mut Netlink, veth: &Link) -> Result<u32, Error> {
    let mut existing = host.qdisc_at(veth.index, INGRESS_PARENT)?;
    if existing.is_none() {
        match host.add_ingress_qdisc(veth.index) {
            Ok(()) => return Ok(INGRESS_HANDLE),
            Err(e) if is_exists(&e) => existing = host.qdisc_at(veth.index, INGRESS_PARENT)?,
            Err(e) => return Err(e),
        }
    }
    match existing {
        Some(q) => ingress_filter_parent(&q).ok_or_else(|| {
            Error::kernel(
                format!("add ingress qdisc to {:?}", veth.name),
                std::io::Error::other(format!("its ingress hook holds a {} qdisc", q.kind)),
            )
        }),
        None => Err(Error::kernel(
            format!("add ingress qdisc to {:?}", veth.name),
            std::io::Error::other("the kernel reported it exists, then that it does not"),
        )),
    }
}

fn ingress_filter_parent(q: &Qdisc) -> Option<u32> {
    match q.kind.as_str() {
        "ingress" => Some(INGRESS_HANDLE),
        "clsact" => Some(CLSACT_INGRESS),
        _ => None,
    }
}

/// Our redirect filters on the veth's ingress hook at `parent`: u32 at
/// our priority redirecting to `ifb`, or to a link that no longer exists
/// (left by an IFB deleted earlier: such a filter drops every packet).
fn our_filters(
    host: &mut Netlink,
    veth: &Link,
    parent: u32,
    ifb: Option<u32>,
) -> Result<Vec<tc::Filter>, Error> {
    let mut ours = Vec::new();
    for f in host.filters(veth.index, parent, FILTER_PRIORITY, ETH_P_ALL)? {
        let Some(target) = f.redirect.filter(|_| f.kind == "u32") else {
            continue;
        };
        if Some(target) == ifb || host.link_by_index(target)?.is_none() {
            ours.push(f);
        }
    }
    Ok(ours)
}

/// Makes sure exactly one of our filters redirects the veth's ingress to
/// the IFB, removing duplicates and dangling ones.
fn ensure_redirect(host: &mut Netlink, veth: &Link, parent: u32, ifb: u32) -> Result<(), Error> {
    let mut present = false;
    for f in our_filters(host, veth, parent, Some(ifb))? {
        if f.redirect == Some(ifb) && f.match_all && !present {
            present = true;
        } else {
            host.delete_filter(&f)?;
        }
    }
    if !present {
        host.add_redirect_filter(
            veth.index,
            parent,
            &RedirectFilter {
                priority: FILTER_PRIORITY,
                classid: FILTER_CLASSID,
                target: ifb,
            },
        )?;
    }
    Ok(())
}

/// Removes what [`apply`] made for `owner` (on `veth` when it is known),
/// going on past failures; "already gone" is success. Returns the errors.
pub fn teardown(host: &mut Netlink, veth: Option<&Link>, owner: &Owner) -> ErrorList {
    let mut errors = ErrorList::new();
    let mut keep = |r: Result<(), Error>| {
        if let Err(e) = r {
            if !is_not_found(&e) {
                errors.push(e);
            }
        }
    };
    let ifb = match host.link_by_name(&owner.ifb_name) {
        Ok(l) => l.filter(|l| l.kind.as_deref() == Some("ifb")),
        Err(e) => {
            keep(Err(e));
            None
        }
    };
    if let Some(veth) = veth {
        keep(match host.qdisc_at(veth.index, ROOT) {
            Ok(Some(q)) if q.kind == "tbf" && q.handle == TBF_HANDLE => {
                host.delete_qdisc(veth.index, ROOT, TBF_HANDLE)
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        });
        fault::point("bandwidth/del-ingress-tbf");
        keep(remove_redirect(host, veth, ifb.as_ref().map(|l| l.index)));
        fault::point("bandwidth/del-filter");
    }
    if let Some(ifb) = ifb {
        keep(host.delete_link(ifb.index));
        fault::point("bandwidth/del-ifb");
    }
    errors
}

/// Deletes our redirect filters from the veth, and the ingress qdisc when
/// nothing else is left on it (a clsact qdisc is never ours: it stays).
fn remove_redirect(host: &mut Netlink, veth: &Link, ifb: Option<u32>) -> Result<(), Error> {
    let Some(q) = host.qdisc_at(veth.index, INGRESS_PARENT)? else {
        return Ok(());
    };
    let Some(parent) = ingress_filter_parent(&q) else {
        return Ok(());
    };
    for f in our_filters(host, veth, parent, ifb)? {
        host.delete_filter(&f)?;
    }
    // Deleting the last rule of a u32 sharing the hook with other filters
    // leaves its empty instance (a hash table) at our priority: remove it.
    let left = host.filters(veth.index, parent, FILTER_PRIORITY, ETH_P_ALL)?;
    if !left.is_empty() && left.iter().all(|f| f.kind == "u32" && !f.is_u32_rule()) {
        host.delete_filter_priority(veth.index, parent, FILTER_PRIORITY, ETH_P_ALL, "u32")?;
    }
    // Filters we cannot read are someone else's: then the qdisc stays.
    if q.kind == "ingress"
        && host
            .filters(veth.index, parent, 0, 0)
            .is_ok_and(|f| f.is_empty())
    {
        host.delete_qdisc(veth.index, INGRESS_PARENT, INGRESS_HANDLE)?;
    }
    Ok(())
}

/// CHECK: the TBFs hold the config's rate, burst and limit, the IFB is
/// there and up, and the filter redirects to it. The first difference is
/// the error (code 102), naming the direction, the device and the key.
pub fn check(
    host: &mut Netlink,
    veth: &Link,
    bw: &Bandwidth,
    owner: &Owner,
    clock: &PschedClock,
) -> Result<(), Error> {
    if let Some(limit) = &bw.ingress {
        check_tbf(host, veth, "ingress", limit, bw, clock)?;
    }
    let Some(limit) = &bw.egress else {
        return Ok(());
    };
    let ifb = host
        .link_by_name(&owner.ifb_name)?
        .filter(|l| l.kind.as_deref() == Some("ifb"))
        .ok_or_else(|| {
            Error::CheckFailed(format!("egress: the ifb {:?} is missing", owner.ifb_name))
        })?;
    if !ifb.up {
        return Err(Error::CheckFailed(format!(
            "egress: the ifb {:?} is down",
            ifb.name
        )));
    }
    check_tbf(host, &ifb, "egress", limit, bw, clock)?;
    let parent = host
        .qdisc_at(veth.index, INGRESS_PARENT)?
        .as_ref()
        .and_then(ingress_filter_parent)
        .ok_or_else(|| {
            Error::CheckFailed(format!("egress: {:?} has no ingress qdisc", veth.name))
        })?;
    let redirected = host
        .filters(veth.index, parent, FILTER_PRIORITY, ETH_P_ALL)?
        .iter()
        .any(|f| f.kind == "u32" && f.match_all && f.redirect == Some(ifb.index));
    if !redirected {
        return Err(Error::CheckFailed(format!(
            "egress: no filter on the ingress of {:?} redirects to the ifb {:?}",
            veth.name, ifb.name
        )));
    }
    Ok(())
}

fn check_tbf(
    host: &mut Netlink,
    link: &Link,
    dir: &str,
    limit: &Limit,
    bw: &Bandwidth,
    clock: &PschedClock,
) -> Result<(), Error> {
    let q = host.qdisc_at(link.index, ROOT)?;
    let tbf = match &q {
        Some(Qdisc {
            kind,
            handle: TBF_HANDLE,
            tbf: Some(tbf),
            ..
        }) if kind == "tbf" => *tbf,
        other => {
            let found = other.as_ref().map_or("none".to_string(), |q| {
                format!("{} {}", q.kind, tc::format_handle(q.handle))
            });
            return Err(Error::CheckFailed(format!(
                "{dir}: {:?} has no tbf {} at its root (found {found})",
                link.name,
                tc::format_handle(TBF_HANDLE)
            )));
        }
    };
    let want = limit.tbf(clock);
    let rate_key = bw.key(&format!("{dir}Rate"));
    let burst_key = bw.key(&format!("{dir}Burst"));
    if tbf.rate != want.rate {
        return Err(Error::CheckFailed(format!(
            "{dir}: the tbf of {:?} has rate {} bytes/s, {rate_key} {} asks for {}",
            link.name, tbf.rate, limit.rate_bits, want.rate
        )));
    }
    if !limit.buffer_matches(tbf.buffer, clock) {
        return Err(Error::CheckFailed(format!(
            "{dir}: the tbf of {:?} has a bucket of {} bytes ({} ticks), {burst_key} {} asks for {}",
            link.name,
            tc::tbf_burst_bytes(tbf.rate, tbf.buffer, clock),
            tbf.buffer,
            limit.burst_bits,
            limit.burst_bytes()
        )));
    }
    if tbf.limit != want.limit {
        return Err(Error::CheckFailed(format!(
            "{dir}: the tbf of {:?} has limit {} bytes, {rate_key} and {burst_key} ask for {}",
            link.name, tbf.limit, want.limit
        )));
    }
    Ok(())
}

/// Whether `name` is an IFB name the Go plugin makes: `bwp` + 12 lowercase
/// hex digits.
pub fn is_go_ifb_name(name: &str) -> bool {
    name.strip_prefix("bwp").is_some_and(|h| {
        h.len() == 12
            && h.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

/// GC: deletes this network's IFBs whose container has no valid
/// attachment (an IFB is per container and network, so any valid
/// attachment of its container keeps it):
/// - ours, found by our alias and the name the network and container ID
///   give;
/// - the Go plugin's (`bwp<hash>`, no alias): its name hashes network and
///   container ID and names neither, so one is collected only when it is
///   no valid attachment's IFB of this network and nothing redirects to it
///   any more (its host veth, and with it its container, is gone): an IFB
///   in use may be another network's.
///
/// Returns the errors.
pub fn collect_garbage(
    host: &mut Netlink,
    network: &str,
    valid: &HashSet<(String, String)>,
) -> Result<ErrorList, Error> {
    let in_use: HashSet<&str> = valid.iter().map(|(cid, _)| cid.as_str()).collect();
    let valid_names: HashSet<String> = in_use.iter().map(|cid| ifb_name(network, cid)).collect();
    let mut errors = ErrorList::new();
    let links = host.links()?;
    // The links something redirects to, read only when an alias-less IFB
    // asks for it.
    let mut targets: Option<HashSet<u32>> = None;
    for link in &links {
        if link.kind.as_deref() != Some("ifb") {
            continue;
        }
        let doomed = match link.alias.as_deref() {
            Some(alias) => match parse_alias(alias) {
                Some((cid, _ifname)) => {
                    link.name == ifb_name(network, cid) && !in_use.contains(cid)
                }
                None => false,
            },
            None if is_go_ifb_name(&link.name) && !valid_names.contains(&link.name) => {
                let t = match &targets {
                    Some(t) => t,
                    None => targets.insert(redirect_targets(host, &links)),
                };
                !t.contains(&link.index)
            }
            None => false,
        };
        if !doomed {
            continue;
        }
        match host.delete_link(link.index) {
            Err(e) if !is_not_found(&e) => errors.push(e),
            _ => {}
        }
    }
    Ok(errors)
}

/// Every link an ingress filter of some link of `links` redirects to (a
/// link without an ingress qdisc has nothing to list).
fn redirect_targets(host: &mut Netlink, links: &[Link]) -> HashSet<u32> {
    let mut out = HashSet::new();
    for l in links {
        for parent in [INGRESS_PARENT, CLSACT_INGRESS] {
            if let Ok(filters) = host.filters(l.index, parent, 0, 0) {
                out.extend(filters.iter().filter_map(|f| f.redirect));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_ifb_names_are_recognised() {
        assert!(is_go_ifb_name(&ifb_name("n", "c")));
        for not in [
            "bwp",
            "bwp12345678901",
            "bwp12345678901g",
            "ifbforeign",
            "bwp1234567890123",
        ] {
            assert!(!is_go_ifb_name(not), "{not}");
        }
    }

    #[test]
    fn ifb_names_are_the_go_plugins() {
        // printf %s 'mynetctr-1' | sha512sum | cut -c1-12
        let name = ifb_name("mynet", "ctr-1");
        assert_eq!(name.len(), 15);
        assert!(name.starts_with("bwp"));
        let sum = std::process::Command::new("sh")
            .args(["-c", "printf %s 'mynetctr-1' | sha512sum"])
            .output()
            .unwrap();
        assert_eq!(&name[3..], &String::from_utf8_lossy(&sum.stdout)[..12]);
        assert_ne!(ifb_name("mynet", "ctr-2"), name);
        assert_ne!(ifb_name("othernet", "ctr-1"), name);
    }

    #[test]
    fn owner_alias_round_trips() {
        let o = Owner::new("net", "ctr-1", "eth0");
        assert_eq!(o.alias, "cni-bandwidth:ctr-1:eth0");
        assert_eq!(o.ifb_name, ifb_name("net", "ctr-1"));
        assert_eq!(parse_alias(&o.alias), Some(("ctr-1", "eth0")));
        for bad in [
            "",
            "cni-bandwidth:",
            "cni-bandwidth:x",
            "cni-bandwidth::eth0",
            "other:x:y",
            "cni-bandwidth:a:b:c",
        ] {
            assert_eq!(parse_alias(bad), None, "{bad:?}");
        }
        let long = "c".repeat(300);
        assert_eq!(Owner::new("net", &long, "eth0").alias, "");
    }
}
