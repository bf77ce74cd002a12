//! The backend facade, by libcni's netfilter contract ([`Rules`]): one
//! attachment's host ports added and checked on the [`Route`] the config
//! chose ([`on_route`]: nftables in [`crate::nft`], iptables over netlink
//! in [`crate::ipt_netlink`], legacy iptables in [`crate::ipt`]), removed
//! and collected on both backends ([`teardown`] with
//! [`Visit::both_backends`]), as the Go plugins' teardown does. DEL
//! reports the UDP host ports it removed (for the conntrack flush).

use libcni::fault;
use libcni::netfilter::conntrack::IPPROTO_UDP;
use libcni::netfilter::nft::{Family as NftFamily, Nft};
use libcni::netfilter::{on_route, teardown, Backend, Owner, Route, Rules, Verb, Visit};
use libcni::types::Attachment;
use libcni::IpFamily;
use libcni::{ErrorList, Result};

use crate::spec::{PortMapSpec, RemovedPort};
use crate::{ipt, ipt_netlink, nft};

/// ADD's rules on `backend`.
pub fn add(backend: Backend, spec: &PortMapSpec) -> Result<()> {
    on_route(Route::of(backend), Verb::Add, &mut Wanted { spec })
}

/// CHECK on `backend`: code 102 naming what is missing.
pub fn check(backend: Backend, spec: &PortMapSpec) -> Result<()> {
    on_route(Route::of(backend), Verb::Check, &mut Wanted { spec })
}

/// One attachment's host ports, as ADD writes them and CHECK reads them.
struct Wanted<'a> {
    spec: &'a PortMapSpec,
}

/// What [`Wanted`] serves no verb of.
const WANTED: &str = "an attachment's wanted host ports";

impl Rules for Wanted<'_> {
    fn nftables(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        match verb {
            Verb::Add => nft::add(n, self.spec),
            Verb::Check => nft::check(n, self.spec),
            Verb::Del | Verb::Gc => Err(verb.not_served_by(WANTED)),
        }
    }

    fn iptables_over_netlink(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        match verb {
            Verb::Add => ipt_netlink::add(n, self.spec),
            Verb::Check => ipt_netlink::check(n, self.spec),
            Verb::Del | Verb::Gc => Err(verb.not_served_by(WANTED)),
        }
    }

    fn iptables_programs(&mut self, verb: Verb, family: IpFamily) -> Result<()> {
        match verb {
            Verb::Add => {
                ipt::add(self.spec, family)?;
                fault::point("portmap/between-families");
                Ok(())
            }
            Verb::Check => ipt::check(self.spec, family),
            Verb::Del | Verb::Gc => Err(verb.not_served_by(WANTED)),
        }
    }
}

/// DEL of `owner`'s rules on both backends ([`Visit::both_backends`]): the
/// nftables side reads back the rules of the container's ledger (or lists
/// the chains once, for rules the Go plugin wrote); on legacy iptables a
/// process runs only when iptables-nft shows the container's chain, or
/// when `backend` (the config's, if it could be read) is iptables. Every
/// step runs; the UDP host ports removed.
pub fn del(owner: &Owner, backend: Backend, errors: &mut ErrorList) -> Vec<RemovedPort> {
    let mut state = Del {
        owner,
        udp_ports: Vec::new(),
    };
    teardown(
        &Visit::both_backends(backend),
        Verb::Del,
        &mut state,
        errors,
    );
    state.udp_ports
}

/// One attachment's host ports, for [`del`].
struct Del<'a> {
    owner: &'a Owner,
    /// The UDP host ports removed so far.
    udp_ports: Vec<RemovedPort>,
}

impl Del<'_> {
    fn keep_udp(&mut self, removed: Vec<RemovedPort>) {
        let udp = removed.into_iter().filter(|r| r.protocol == IPPROTO_UDP);
        self.udp_ports.extend(udp);
    }
}

/// What [`Del`] serves no verb of.
const DEL: &str = "an attachment's host ports to remove";

impl Rules for Del<'_> {
    fn nftables(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        verb.only(Verb::Del, DEL)?;
        let removed = nft::del(n, self.owner)?;
        self.keep_udp(removed);
        Ok(())
    }

    fn iptables_over_netlink(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        verb.only(Verb::Del, DEL)?;
        let removed = ipt_netlink::del(n, self.owner)?;
        self.keep_udp(removed);
        Ok(())
    }

    fn iptables_programs(&mut self, verb: Verb, family: IpFamily) -> Result<()> {
        verb.only(Verb::Del, DEL)?;
        ipt::del(self.owner, family)
    }

    fn iptables_may_hold(&mut self, n: Option<&mut Nft>, family: IpFamily) -> bool {
        n.is_none_or(|n| iptables_has_container(n, self.owner, family))
    }
}

/// GC of `network`'s attachments not in `valid`, on both backends (on
/// legacy iptables by processes only when the host port chains are there,
/// or when `backend` is iptables).
pub fn gc(network: &str, valid: &[Attachment], backend: Backend, errors: &mut ErrorList) {
    let mut stale = Stale { network, valid };
    teardown(&Visit::both_backends(backend), Verb::Gc, &mut stale, errors);
}

/// A network's host ports of attachments not in `valid`, for [`gc`].
struct Stale<'a> {
    network: &'a str,
    valid: &'a [Attachment],
}

/// What [`Stale`] serves no verb of.
const STALE: &str = "a network's stale host ports";

impl Rules for Stale<'_> {
    /// The UDP ports it removes are not flushed, as Go's GC does not.
    fn nftables(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        verb.only(Verb::Gc, STALE)?;
        nft::gc(n, self.network, self.valid).map(drop)
    }

    fn iptables_over_netlink(&mut self, verb: Verb, n: &mut Nft) -> Result<()> {
        verb.only(Verb::Gc, STALE)?;
        ipt_netlink::gc(n, self.network, self.valid)
    }

    fn iptables_programs(&mut self, verb: Verb, family: IpFamily) -> Result<()> {
        verb.only(Verb::Gc, STALE)?;
        ipt::gc(self.network, self.valid, family)
    }

    fn iptables_may_hold(&mut self, n: Option<&mut Nft>, family: IpFamily) -> bool {
        n.is_none_or(|n| iptables_has_hostports(n, family))
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
