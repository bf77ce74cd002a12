//! The backend facade: one attachment's host ports added, checked, removed
//! and collected on the backend the config chose, nftables ([`crate::nft`])
//! or iptables ([`crate::ipt`]), and on iptables by the node's
//! [`Route`]: over netlink in iptables-nft's encoding, or by
//! `iptables-restore` on legacy iptables. DEL and GC look at both backends,
//! as the Go plugins' teardown does, and report the UDP host ports they
//! removed (for the conntrack flush).

use libcni::fault;
use libcni::netfilter::conntrack::IPPROTO_UDP;
use libcni::netfilter::nft::{Family as NftFamily, Nft};
use libcni::netfilter::{Backend, IptablesPath, Owner, Route};
use libcni::types::Attachment;
use libcni::IpFamily;
use libcni::{ErrorList, Result};

use crate::spec::{PortMapSpec, RemovedPort};
use crate::{ipt, nft};

/// ADD's rules on `backend`.
pub fn add(backend: Backend, spec: &PortMapSpec) -> Result<()> {
    match Route::of(backend) {
        Route::Nftables => nft::add(&mut Nft::open()?, spec),
        Route::Iptables(IptablesPath::Netlink) => ipt::netlink_add(&mut Nft::open()?, spec),
        Route::Iptables(IptablesPath::Programs) => {
            for family in IpFamily::BOTH {
                ipt::restore_add(spec, family)?;
                fault::point("portmap/between-families");
            }
            Ok(())
        }
    }
}

/// CHECK on `backend`: code 102 naming what is missing.
pub fn check(backend: Backend, spec: &PortMapSpec) -> Result<()> {
    match Route::of(backend) {
        Route::Nftables => nft::check(&mut Nft::open()?, spec),
        Route::Iptables(IptablesPath::Netlink) => ipt::netlink_check(&mut Nft::open()?, spec),
        Route::Iptables(IptablesPath::Programs) => {
            for family in IpFamily::BOTH {
                ipt::restore_check(spec, family)?;
            }
            Ok(())
        }
    }
}

/// DEL of `owner`'s rules on both backends: the nftables side reads back
/// the rules of the container's ledger (or lists the chains once, for
/// rules the Go plugin wrote); the iptables side runs processes only when
/// its chain is there, or when `iptables_chosen`. Every step runs; the
/// UDP host ports removed.
pub fn del(owner: &Owner, iptables_chosen: bool, errors: &mut ErrorList) -> Vec<RemovedPort> {
    let mut udp_ports = Vec::new();
    let mut keep_udp = |removed: Vec<RemovedPort>| {
        udp_ports.extend(removed.into_iter().filter(|r| r.protocol == IPPROTO_UDP));
    };
    match Nft::open() {
        Ok(mut n) => {
            if let Some(removed) = errors.record(nft::del(&mut n, owner)) {
                keep_udp(removed);
            }
            if Route::iptables() == Route::Iptables(IptablesPath::Netlink) {
                if let Some(removed) = errors.record(ipt::netlink_del(&mut n, owner)) {
                    keep_udp(removed);
                }
            } else {
                for family in IpFamily::BOTH {
                    if iptables_chosen || iptables_has_container(&mut n, owner, family) {
                        errors.record(ipt::restore_del(owner, family));
                    }
                }
            }
        }
        Err(e) => {
            if !iptables_chosen {
                errors.push(e);
            }
            for family in IpFamily::BOTH {
                errors.record(ipt::restore_del(owner, family));
            }
        }
    }
    udp_ports
}

/// GC of `network`'s attachments not in `valid`, on both backends (on
/// iptables by processes only when the host port chains are there, or
/// when `iptables_chosen`).
pub fn gc(network: &str, valid: &[Attachment], iptables_chosen: bool, errors: &mut ErrorList) {
    let mut n = Nft::open();
    if let Ok(n) = n.as_mut() {
        errors.record(nft::gc(n, network, valid));
        if Route::iptables() == Route::Iptables(IptablesPath::Netlink) {
            errors.record(ipt::netlink_gc(n, network, valid));
            return;
        }
    }
    for family in IpFamily::BOTH {
        if iptables_chosen
            || n.as_mut()
                .map_or(true, |n| iptables_has_hostports(n, family))
        {
            errors.record(ipt::restore_gc(network, valid, family));
        }
    }
}

/// Whether iptables-nft holds this container's chain (seen through
/// nf_tables, without running iptables).
fn iptables_has_container(nft: &mut Nft, owner: &Owner, family: IpFamily) -> bool {
    let family = NftFamily::of(family);
    nft.has_chain(family, "nat", &ipt::dnat_chain(owner))
        .unwrap_or(true)
}

/// Whether iptables-nft holds the host port chains at all.
fn iptables_has_hostports(nft: &mut Nft, family: IpFamily) -> bool {
    let family = NftFamily::of(family);
    nft.has_chain(family, "nat", ipt::IPT_DNAT_CHAIN)
        .unwrap_or(true)
}
