//! The master (lower device) of a link stacked on another one: a macvlan,
//! an ipvlan or a VLAN sub-interface. Named by the config's `master`, or
//! the interface of the default route; looked up in the plugin's namespace
//! or, with `linkInContainer`, in the container's. Every refusal is code 7
//! naming `master` (or `mtu`).
//!
//! The three stacked-link plugins share here what is not their link's
//! own: the keys they read alike ([`StackedConf`]), CHECK's lookup of the
//! master ([`find_for_check`]) and STATUS ([`check_status`]).

use serde::Deserialize;

use crate::netlink::link_kinds::LinkKindSupport;
use crate::netlink::{Link, Netlink};
use crate::skel::{AddFn, CheckFn, CmdArgs};
use crate::types::config::validate_link_name;
use crate::types::{CniResult, Dns, DnsConf, IpamConf};
use crate::Error;
use crate::IpFamily;

/// The keys the stacked-link plugins share, as they come (JSON types
/// only). Each plugin decodes its own keys from the same stdin beside
/// these (Go ignores the keys a struct does not name, and so do we), and
/// validates both only once both decoded: a key of the wrong type is
/// reported before a value out of range, as in one decode.
#[derive(Debug, Default, Deserialize)]
pub struct RawStacked {
    #[serde(default)]
    master: Option<String>,
    #[serde(default)]
    mtu: i64,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: bool,
    #[serde(default)]
    ipam: Option<IpamConf>,
    #[serde(default)]
    dns: Option<DnsConf>,
}

/// The validated keys of a stacked-link plugin's config that macvlan,
/// ipvlan and vlan read alike. Every rejection is code 7 naming the key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StackedConf {
    /// `master`; `None` takes the interface of the default route (ipvlan,
    /// chained, the single interface of `prevResult` first).
    pub master: Option<String>,
    /// `mtu`; `None` (0) takes the master's.
    pub mtu: Option<u32>,
    /// `linkInContainer`: the master is in the container's namespace.
    pub link_in_container: bool,
    /// `ipam.type`; `None` (no `ipam`, or no type): layer 2 only, or, for
    /// ipvlan, the chained `prevResult`'s addresses.
    pub ipam: Option<String>,
    /// `dns`, kept when it sets anything: it replaces IPAM's ([`super::apply_dns`]).
    pub dns: Option<Dns>,
}

impl RawStacked {
    /// Decodes the shared keys of `config` (the plugin's stdin), then the
    /// plugin's own keys `Own`: every key's type is checked before any
    /// value is.
    pub fn decode<Own: serde::de::DeserializeOwned>(
        config: &[u8],
    ) -> Result<(RawStacked, Own), Error> {
        crate::gojson::from_slice_twice(config)
    }

    /// Validates them.
    pub fn validate(self) -> Result<StackedConf, Error> {
        let raw = self;
        let master = match raw.master.filter(|m| !m.is_empty()) {
            Some(m) => {
                validate_link_name("master", &m)?;
                Some(m)
            }
            None => None,
        };
        let mtu = match raw.mtu {
            0 => None,
            m @ 1..=0x7fff_ffff => Some(m as u32),
            m => {
                return Err(Error::config(
                    "mtu",
                    format!("invalid MTU {m}: must be 0 (the master's) or positive"),
                ))
            }
        };
        Ok(StackedConf {
            master,
            mtu,
            link_in_container: raw.link_in_container,
            ipam: IpamConf::plugin(raw.ipam),
            dns: raw.dns.and_then(DnsConf::into_set),
        })
    }
}

/// What STATUS reads: only what it needs, so a config that ADD would
/// refuse for another key still gets an answer about the master.
#[derive(Deserialize, Default)]
struct StatusKeys {
    #[serde(default)]
    master: Option<String>,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: bool,
}

/// What a stacked-link plugin's STATUS checks besides the master.
pub struct StatusOf {
    /// The link kind, when a kernel may lack it (checked first, code 50).
    pub kind: Option<&'static LinkKindSupport>,
    /// Chained (no `master`, no `ipam.type`), the master comes from
    /// `prevResult`, which STATUS does not have: not checked (ipvlan).
    pub master_may_be_chained: bool,
}

/// A plugin whose link is stacked on a master (ipvlan, macvlan, vlan),
/// given as values: its ADD, its CHECK and what its STATUS checks. It is a
/// [`super::ContainerLinkPlugin`] with them, so DEL, GC and the rest of
/// STATUS come from the shared flow.
pub trait StackedLinkPlugin {
    /// ADD, over [`super::add`].
    const ADD: AddFn;
    /// CHECK, over [`super::Check`].
    const CHECK: CheckFn;
    /// What STATUS checks before IPAM ([`check_status`]).
    const STATUS: StatusOf;
}

impl<P: StackedLinkPlugin> super::ContainerLinkPlugin for P {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        (P::ADD)(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        (P::CHECK)(args)
    }

    fn status_before_ipam(&self, args: &CmdArgs) -> Result<(), Error> {
        check_status(args, &P::STATUS)
    }
}

/// A stacked-link plugin's STATUS before IPAM's answer: the kernel's
/// support for the kind, then the master ([`status`]).
pub fn check_status(args: &CmdArgs, of: &StatusOf) -> Result<(), Error> {
    if let Some(support) = of.kind {
        super::kind_status(support.kind, support)?;
    }
    let keys: StatusKeys = args.config()?;
    let name = keys.master.filter(|m| !m.is_empty());
    let chained = of.master_may_be_chained && name.is_none() && args.conf.ipam_type()?.is_none();
    if chained {
        return Ok(());
    }
    status(name.as_deref(), keys.link_in_container)
}

/// CHECK's master: [`find`] in the namespace it lives in (the container's,
/// `container`, with `in_container`); one that is not there is a failed
/// check naming `master`.
pub fn find_for_check(
    container: &mut Netlink,
    name: Option<&str>,
    in_container: bool,
) -> Result<Link, Error> {
    let found = if in_container {
        find(container, name, true)
    } else {
        find(&mut Netlink::open()?, name, false)
    };
    found.map_err(|e| match e {
        Error::InvalidConfig { msg, .. } => Error::CheckFailed(format!("master: {msg}")),
        other => other,
    })
}

/// Whether `link`, in the container, is stacked directly on `master`: its
/// lower device is `master`, in the container with `in_container` (no
/// netnsid), else in the plugin's namespace (a netnsid is reported).
pub fn is_on(link: &Link, master: &Link, in_container: bool) -> bool {
    link.peer_index == Some(master.index) && link.link_netnsid.is_some() != in_container
}

/// The failed check of a `what` (`"container VLAN \"eth0\""`) that is
/// not on `master`.
pub fn not_on(what: &str, master: &Link, in_container: bool) -> Error {
    Error::CheckFailed(format!(
        "{what} is not on master {:?} (index {}) of {}",
        master.name,
        master.index,
        place(in_container)
    ))
}

/// Where the master is looked up, for messages.
pub fn place(in_container: bool) -> &'static str {
    if in_container {
        "the container's network namespace (linkInContainer)"
    } else {
        "the plugin's network namespace"
    }
}

/// The interface of the first default route of the main table (IPv4
/// first, then IPv6), as the reference picks it; `None` without one.
pub fn default_route_interface(nl: &mut Netlink) -> Result<Option<Link>, Error> {
    for family in IpFamily::BOTH {
        for r in nl.routes(family)? {
            if r.dst_len != 0 {
                continue;
            }
            if let Some(link) = r.oif.map(|i| nl.link_by_index(i)).transpose()?.flatten() {
                return Ok(Some(link));
            }
        }
    }
    Ok(None)
}

/// The master `name` (`None`: the default route's interface) as `nl`, a
/// socket in the namespace it lives in, sees it; `in_container` says which
/// namespace that is, for messages. A master that is not there, or no
/// master and no default route, is code 7 naming `master`.
pub fn find(nl: &mut Netlink, name: Option<&str>, in_container: bool) -> Result<Link, Error> {
    match name {
        Some(name) => nl.link_by_name(name)?.ok_or_else(|| {
            Error::config(
                "master",
                format!("{name:?} not found in {}", place(in_container)),
            )
        }),
        None => default_route_interface(nl)?.ok_or_else(|| {
            Error::config(
                "master",
                format!(
                    "not set, and {} has no default route to take it from",
                    place(in_container)
                ),
            )
        }),
    }
}

/// A link stacked on `master` may not have a larger MTU (code 7 naming
/// `mtu`).
pub fn check_mtu(master: &Link, mtu: Option<u32>) -> Result<(), Error> {
    match mtu {
        Some(mtu) if mtu > master.mtu => Err(Error::config(
            "mtu",
            format!(
                "invalid MTU {mtu}: larger than the MTU of master {:?} ({})",
                master.name, master.mtu
            ),
        )),
        _ => Ok(()),
    }
}

/// STATUS's master check: ADD can be served when the master `name` (or a
/// default route to take it from) is in the plugin's namespace; with
/// `in_container` there is no container to look in, so it passes. Code 50
/// otherwise.
pub fn status(name: Option<&str>, in_container: bool) -> Result<(), Error> {
    if in_container {
        return Ok(());
    }
    let mut nl = Netlink::open()?;
    match name {
        Some(name) => {
            if nl.link_by_name(name)?.is_none() {
                return Err(Error::NotAvailable(format!(
                    "master {name:?} not found in the plugin's network namespace"
                )));
            }
        }
        None => {
            if default_route_interface(&mut nl)?.is_none() {
                return Err(Error::NotAvailable(
                    "no master configured and no default route to take it from".into(),
                ));
            }
        }
    }
    Ok(())
}

impl super::Add<'_> {
    /// The master of the link this ADD stacks on it ([`find`]: in the
    /// container's namespace with `in_container`, else in the plugin's),
    /// with [`check_mtu`] for the link's `mtu`.
    pub fn master(
        &mut self,
        name: Option<&str>,
        in_container: bool,
        mtu: Option<u32>,
    ) -> Result<Link, Error> {
        let nl = if in_container {
            self.container()
        } else {
            self.host()?
        };
        let m = find(nl, name, in_container)?;
        check_mtu(&m, mtu)?;
        Ok(m)
    }
}
