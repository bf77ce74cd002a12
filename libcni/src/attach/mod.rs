//! The flow every main plugin shares: a plugin that gives the container its
//! interface (bridge, macvlan, ptp, tap, and the vlan/ipvlan/dummy/
//! host-device family) does the same things around the part only it knows.
//!
//! This module owns that flow:
//!
//! - **ADD** ([`add`], [`Add`]): open `CNI_NETNS` and a netlink socket in
//!   it, refuse an existing `CNI_IFNAME` (the spec's "must error if the
//!   interface already exists"), find the IPAM plugin before anything is
//!   created, create the link directly in the container namespace
//!   ([`Add::create_link`], [`Add::create_link_named`], [`Add::create_kind`],
//!   [`Add::create_veth`]; the lower device of a stacked link in
//!   [`master`]), delegate to IPAM
//!   ([`Add::ipam_add`]), apply the result ([`Add::configure`]), and undo
//!   everything a failed ADD created ([`Add::undo`], [`Add::undo_last`]).
//! - **DEL** ([`del`], [`del_with`]): the container link, if the namespace and the link
//!   are still there, and IPAM DEL, best effort, beside the plugin's own
//!   teardown; "already gone" is success and the errors come together.
//! - **CHECK** ([`Check`]): IPAM CHECK, `prevResult`, the container link
//!   and its addresses and routes.
//! - **GC** and **STATUS** ([`gc`], [`status`]): forwarded to IPAM with
//!   the same stdin, after the plugin's own part.
//!
//! A plugin whose one piece of state is its link in the container
//! implements [`ContainerLinkPlugin`] (ADD, CHECK, its STATUS checks) and
//! gets DEL, GC and the rest of STATUS from it.
//!
//! # The rollback
//!
//! An [`Add`] records what it creates as it goes: the links it made (on the
//! node or in the container), the IPAM plugin once its ADD was called (the
//! spec DELs a delegate whose ADD failed too), and closures for the rest
//! (firewall rules and such, [`Add::undo`]; shared objects this ADD made,
//! [`Add::undo_last`]). When the plugin's steps fail, [`add`] undoes them in
//! this order, best effort, each failure said on stderr:
//!
//! 1. the [`Add::undo`] closures, newest first;
//! 2. IPAM DEL, while the container's interface is still there: the dhcp
//!    IPAM sends its DHCPRELEASE out of it (the reference's order too);
//! 3. the links, newest first (a link's addresses and routes go with it; a
//!    concurrent ADD handed the address meanwhile replaces a host route to
//!    it rather than failing on it);
//! 4. the [`Add::undo_last`] closures, newest first: shared objects (the
//!    bridge) that this ADD created and that must outlive its own parts.
//!
//! # Fault points
//!
//! The crash campaign finds `fault::point("<plugin>/<step>")` calls in each
//! plugin's sources, so the points stay in the plugins, right after the
//! call to this module that creates the state they name.

pub mod master;
pub mod veth;

use std::io;
use std::path::Path;

use crate::invoke;
use crate::ipam::{self, IfaceOptions};
use crate::netlink::link_kinds::{is_unknown_kind, LinkKindSupport, NewKind, NewLink};
use crate::netlink::{is_exists, is_not_found, Link, Netlink};
use crate::netns::NetNs;
use crate::skel::CmdArgs;
use crate::sysctl::{self, Key};
use crate::types::{CniResult, Dns, Interface, IpConfig, IpPrefix};
use crate::{Error, ErrorList, Result};

pub use veth::Veth;

/// Where the lower device of a new container link is: the namespace whose
/// netlink socket creates the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lower {
    /// The node's (a master in the plugin's namespace).
    OnNode,
    /// The container's (`linkInContainer`).
    InContainer,
    /// None (a dummy): made in the container.
    None,
}

impl Lower {
    /// The lower device of a plugin with a `linkInContainer` key.
    pub fn of_link_in_container(link_in_container: bool) -> Lower {
        if link_in_container {
            Lower::InContainer
        } else {
            Lower::OnNode
        }
    }
}

/// A link of a kind [`Add::create_kind`] makes as `CNI_IFNAME`.
#[derive(Debug, Clone, Copy)]
pub struct KindLink<'s> {
    pub kind: NewKind,
    /// `None`: the kernel's default.
    pub mtu: Option<u32>,
    pub lower: Lower,
    /// What provides the kind, named when the kernel lacks it.
    pub support: &'s LinkKindSupport,
}

/// The `mtu` key of a plugin that makes its own link (bridge, ptp, tap):
/// 0 leaves the kernel's default (`None`), 68 to 65535 is the MTU, and
/// anything else is an error naming the key.
pub fn own_link_mtu(mtu: i64) -> Result<Option<u32>> {
    match mtu {
        0 => Ok(None),
        m @ 68..=65535 => Ok(Some(m as u32)),
        m => Err(Error::config(
            "mtu",
            format!("{m} is out of range (68-65535, or 0 for the kernel default)"),
        )),
    }
}

/// The spec's "must error if the interface already exists" (code 100,
/// `EEXIST`).
pub fn ifname_exists(ifname: &str) -> Error {
    Error::kernel(
        format!("container interface CNI_IFNAME {ifname:?} already exists in CNI_NETNS"),
        io::Error::from_raw_os_error(libc::EEXIST),
    )
}

/// Code 2 naming `type`: the kernel has no links of the kind plugin
/// `plugin` makes, and what provides them ([`LinkKindSupport::missing`]).
pub fn kind_missing(plugin: &str, support: &LinkKindSupport) -> Error {
    Error::UnsupportedField {
        key: "type".into(),
        value: format!("{plugin}: {}", support.missing()),
    }
}

/// An undo step: what it undoes (for the message) and how.
type Step<'a> = (String, Box<dyn FnOnce() -> Result<()> + 'a>);

/// A link this ADD created.
#[derive(Debug, Clone)]
struct CreatedLink {
    index: u32,
    name: String,
    /// In the container namespace (else in the plugin's own).
    in_container: bool,
}

/// What an ADD created so far, for the rollback.
#[derive(Default)]
struct Undo<'a> {
    steps: Vec<Step<'a>>,
    links: Vec<CreatedLink>,
    ipam: Option<String>,
    last: Vec<Step<'a>>,
}

/// An ADD in progress: the container's namespace with a netlink socket in
/// it, a socket in the plugin's own namespace (opened on first use), and
/// the record of what was created. Made by [`add`], which rolls it back
/// when the plugin's steps fail.
pub struct Add<'a> {
    args: &'a CmdArgs,
    plugin: &'static str,
    ns: NetNs,
    container: Netlink,
    host: Option<Netlink>,
    undo: Undo<'a>,
}

/// Runs the ADD `steps` of plugin `plugin` (its binary name, for messages):
///
/// 1. opens `CNI_NETNS` (refusing anything that is not a network namespace
///    other than the plugin's own) and a netlink socket inside it;
/// 2. fails when `CNI_IFNAME` already exists there ([`ifname_exists`]);
/// 3. with `ipam` (the config's `ipam.type`), finds that plugin in
///    `CNI_PATH`, so a missing one fails the ADD before anything exists;
/// 4. calls `steps`; when they fail, or return a result the config's
///    version cannot carry (a layer-2 result below 0.3.0, which has no
///    `interfaces`), undoes what they recorded (see the module
///    documentation) and returns the error.
pub fn add<'a>(
    args: &'a CmdArgs,
    plugin: &'static str,
    ipam: Option<&str>,
    steps: impl FnOnce(&mut Add<'a>) -> Result<CniResult>,
) -> Result<CniResult> {
    let ns = args.open_netns()?;
    let mut container = Netlink::open_in(&ns)?;
    if container.link_by_name(&args.ifname)?.is_some() {
        return Err(ifname_exists(&args.ifname));
    }
    if let Some(plugin) = ipam {
        invoke::find_in_path(plugin, &invoke::cni_path_from_env())?;
    }
    let mut a = Add {
        args,
        plugin,
        ns,
        container,
        host: None,
        undo: Undo::default(),
    };
    let mut outcome = steps(&mut a);
    // A result the config's version cannot carry (no address below 0.3.0)
    // fails the ADD after all: undo it now, not after the print fails.
    if let Ok(result) = &outcome {
        if let Err(e) = result.to_json(args.version) {
            outcome = Err(e);
        }
    }
    if outcome.is_err() {
        a.rollback();
    }
    outcome
}

impl<'a> Add<'a> {
    /// The call's arguments.
    pub fn args(&self) -> &'a CmdArgs {
        self.args
    }

    /// The container's network namespace.
    pub fn ns(&self) -> &NetNs {
        &self.ns
    }

    /// The netlink socket inside the container's namespace.
    pub fn container(&mut self) -> &mut Netlink {
        &mut self.container
    }

    /// The container's namespace and the socket inside it, together (for
    /// code that needs both, such as [`crate::tuntap::create_tap`]).
    pub fn container_parts(&mut self) -> (&NetNs, &mut Netlink) {
        (&self.ns, &mut self.container)
    }

    /// The netlink socket in the plugin's own namespace (the node), opened
    /// on first use.
    pub fn host(&mut self) -> Result<&mut Netlink> {
        let nl = match self.host.take() {
            Some(nl) => nl,
            None => Netlink::open()?,
        };
        Ok(self.host.insert(nl))
    }

    /// The node's socket, the container's socket and the container's
    /// namespace, together.
    pub fn sockets(&mut self) -> Result<(&mut Netlink, &mut Netlink, &NetNs)> {
        let nl = match self.host.take() {
            Some(nl) => nl,
            None => Netlink::open()?,
        };
        Ok((self.host.insert(nl), &mut self.container, &self.ns))
    }

    /// Creates the container's link `CNI_IFNAME`: `create` sends the
    /// request (through either socket, or an ioctl: whatever makes a link
    /// of that name inside the container's namespace), then the link is
    /// looked up there and recorded, so a failed ADD deletes it. A request
    /// refused with `EEXIST` while the name is taken in the container is
    /// [`ifname_exists`] (a concurrent ADD of the same interface).
    pub fn create_link(&mut self, create: impl FnOnce(&mut Add<'a>) -> Result<()>) -> Result<Link> {
        let args = self.args;
        let ifname = &args.ifname;
        if let Err(e) = create(self) {
            if is_exists(&e) && self.container.link_by_name(ifname)?.is_some() {
                return Err(ifname_exists(ifname));
            }
            return Err(e);
        }
        // Not recorded yet: deleted by name if the lookup fails.
        self.adopt(ifname)
    }

    /// [`Add::create_link`] for a link that `create` makes under the name
    /// it is given, through the node's socket and into the container (a
    /// macvlan, an ipvlan, a VLAN): `CNI_IFNAME` first. Kernels before 6.x
    /// (Debian 12's 6.1, RHEL 9's 5.14) look the new name up in the
    /// socket's namespace too, so a node link of that name (a node's own
    /// `eth0`) makes them refuse it with `EEXIST`; then, as the reference
    /// always does, the link is made under a temporary `veth…` name and
    /// renamed in the container. Recorded as soon as it exists, so a failed
    /// rename deletes it. `EEXIST` with the name taken in the container is
    /// [`ifname_exists`].
    pub fn create_link_named(
        &mut self,
        mut create: impl FnMut(&mut Add<'a>, &str) -> Result<()>,
    ) -> Result<Link> {
        let args = self.args;
        let ifname = &args.ifname;
        let first = create(self, ifname);
        match first {
            Ok(()) => return self.adopt(ifname),
            Err(e) if !is_exists(&e) => return Err(e),
            Err(_) if self.container.link_by_name(ifname)?.is_some() => {
                return Err(ifname_exists(ifname))
            }
            Err(_) => {}
        }
        let mut attempt = 0;
        let tmp = loop {
            attempt += 1;
            let tmp = veth::random_name()?;
            match create(self, &tmp) {
                Ok(()) => break tmp,
                Err(e) if is_exists(&e) && attempt < veth::NAME_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        };
        let link = self.adopt(&tmp)?;
        match self.container.set_link_name(link.index, ifname) {
            Ok(()) => {}
            Err(e) if is_exists(&e) => return Err(ifname_exists(ifname)),
            Err(e) => return Err(e),
        }
        self.container.link_by_index(link.index)?.ok_or_else(|| {
            Error::kernel(
                format!("the new link {ifname:?} vanished from the container"),
                io::Error::from_raw_os_error(libc::ENODEV),
            )
        })
    }

    /// Creates `CNI_IFNAME` as the link `new` describes (a VLAN, an
    /// ipvlan, a dummy) in the container: through the node's socket into
    /// the container when its lower device is the node's (see
    /// [`Add::create_link_named`]), else through the container's own
    /// socket. A kernel without the kind ([`is_unknown_kind`]) refuses it
    /// before anything exists, which is [`kind_missing`] for this plugin.
    pub fn create_kind(&mut self, new: KindLink<'_>) -> Result<Link> {
        let plugin = self.plugin;
        let KindLink {
            kind,
            mtu,
            lower,
            support,
        } = new;
        self.create_link_named(|a, name| {
            let made = if lower != Lower::OnNode {
                a.container().add_link(&NewLink {
                    name,
                    kind,
                    mtu,
                    netns: None,
                })
            } else {
                let (host, _, ns) = a.sockets()?;
                host.add_link(&NewLink {
                    name,
                    kind,
                    mtu,
                    netns: Some(ns),
                })
            };
            made.map_err(|e| {
                if is_unknown_kind(&e) {
                    kind_missing(plugin, support)
                } else {
                    e
                }
            })
        })
    }

    /// Looks up the link `name` this ADD just made in the container and
    /// records it; gone already, it is deleted by name before giving up.
    fn adopt(&mut self, name: &str) -> Result<Link> {
        let link = match self.container.link_by_name(name) {
            Ok(Some(link)) => link,
            other => {
                let _ = self.container.delete_link_if_present(name);
                other?;
                return Err(Error::kernel(
                    format!("the new link {name:?} vanished from the container"),
                    io::Error::from_raw_os_error(libc::ENODEV),
                ));
            }
        };
        self.record_link(&link, true);
        Ok(link)
    }

    /// Records a link this ADD created (`in_container`: in the container's
    /// namespace, else in the plugin's own) for the rollback.
    pub fn record_link(&mut self, link: &Link, in_container: bool) {
        self.undo.links.push(CreatedLink {
            index: link.index,
            name: link.name.clone(),
            in_container,
        });
    }

    /// Runs IPAM ADD with the plugin's stdin and returns its addresses,
    /// routes and DNS, on no interface yet: [`CniResult::on_interfaces`]
    /// puts them on the container interface of the plugin's result.
    /// Recorded before the call: the spec asks for a DEL of a delegate
    /// whose ADD failed too. A result without addresses is the reference's
    /// code-999 error.
    pub fn ipam_add(&mut self, plugin: &str) -> Result<CniResult> {
        self.undo.ipam = Some(plugin.to_string());
        let allocated = ipam::exec_add(plugin, &self.args.stdin, self.args.version)?;
        ipam::require_ips(plugin, &allocated)?;
        Ok(CniResult {
            ips: allocated.ips,
            routes: allocated.routes,
            dns: allocated.dns,
            ..CniResult::default()
        }
        .on_interfaces(Vec::new()))
    }

    /// Applies `result` to `CNI_IFNAME` in the container
    /// ([`ipam::configure_interface`]): sysctls, addresses, link up, the DAD
    /// wait if asked, routes. `result.interfaces` must name the container
    /// interface at the index its addresses carry.
    pub fn configure(&mut self, result: &CniResult, opts: IfaceOptions) -> Result<()> {
        ipam::configure_interface(
            &self.ns,
            &mut self.container,
            &self.args.ifname,
            result,
            opts,
        )
    }

    /// The result of a plugin whose container interface is the one link
    /// `link` (a macvlan, an ipvlan, a VLAN, a dummy): `link` as interface
    /// 0, the addresses, routes and DNS of `addresses` (an IPAM result, or
    /// a chained `prevResult`) with every address on interface 0, applied
    /// to the link ([`Add::configure`]: addresses, up, routes).
    pub fn configure_single(
        &mut self,
        link: &Link,
        addresses: CniResult,
        opts: IfaceOptions,
    ) -> Result<CniResult> {
        let result = addresses.on_interfaces(vec![interface_of(link, &self.args.netns)]);
        self.configure(&result, opts)?;
        Ok(result)
    }

    /// `arp_notify` and `ndisc_notify` on `CNI_IFNAME`, so neighbours learn
    /// its MAC at once (the kernel announces on up and on address changes):
    /// for a link that takes a MAC a neighbour may have seen elsewhere (a
    /// macvlan's new one, an ipvlan's shared one). Knobs that are missing
    /// (no IPv6) do not matter.
    pub fn notify_neighbours(&mut self) -> Result<()> {
        let ifname = &self.args.ifname;
        self.ns.run(|| {
            for key in [
                Key::ipv4_conf(ifname, "arp_notify"),
                Key::ipv6_conf(ifname, "ndisc_notify"),
            ]
            .into_iter()
            .flatten()
            {
                let _ = sysctl::write_here(&key, "1");
            }
        })
    }

    /// Records `undo` (what it undoes is `what`, for the message) to run
    /// if the ADD fails, before the links are deleted. Record it before
    /// the step it undoes: undoing what was never done must be harmless.
    pub fn undo(&mut self, what: impl Into<String>, undo: impl FnOnce() -> Result<()> + 'a) {
        self.undo.steps.push((what.into(), Box::new(undo)));
    }

    /// Records `undo` to run if the ADD fails, after the links are deleted
    /// and the lease is released: for a shared object (a bridge) this ADD
    /// created, which the undo removes only if nothing else uses it.
    pub fn undo_last(&mut self, what: impl Into<String>, undo: impl FnOnce() -> Result<()> + 'a) {
        self.undo.last.push((what.into(), Box::new(undo)));
    }

    /// Undoes what was recorded, best effort (see the module
    /// documentation for the order); each failure is said on stderr.
    fn rollback(mut self) {
        let plugin = self.plugin;
        let say = |what: &str, e: &Error| eprintln!("{plugin}: rollback: {what}: {e}");
        for (what, undo) in self.undo.steps.drain(..).rev() {
            if let Err(e) = undo() {
                say(&what, &e);
            }
        }
        if let Some(plugin) = &self.undo.ipam {
            if let Err(e) = ipam::exec_del(plugin, &self.args.stdin) {
                say("IPAM DEL", &e);
            }
        }
        for link in std::mem::take(&mut self.undo.links).into_iter().rev() {
            let nl = if link.in_container {
                Ok(&mut self.container)
            } else {
                self.host()
            };
            if let Err(e) = nl.and_then(|nl| nl.delete_link(link.index)) {
                if !is_not_found(&e) {
                    say(&format!("deleting link {:?}", link.name), &e);
                }
            }
        }
        for (what, undo) in self.undo.last.drain(..).rev() {
            if let Err(e) = undo() {
                say(&what, &e);
            }
        }
    }
}

/// The config's `dns` replaces the IPAM plugin's in the result when it
/// sets any of it (`dns` is what [`crate::types::DnsConf::into_set`] kept:
/// a list present, even empty, or a domain), as the reference's bridge and
/// ptp do.
pub fn apply_dns(result: &mut CniResult, dns: Option<&Dns>) {
    if let Some(dns) = dns {
        result.dns = dns.clone();
    }
}

/// The record of `link` in a result: its name, MAC and MTU, in `sandbox`
/// (the container's `CNI_NETNS`; empty for a link of the node).
pub fn interface_of(link: &Link, sandbox: &str) -> Interface {
    ipam::interface_of(link, sandbox)
}

// ---- DEL, GC, STATUS --------------------------------------------------------

/// A main plugin whose one piece of state is its link in the container
/// (dummy, tap; ipvlan, macvlan and vlan through
/// [`master::StackedLinkPlugin`]): it writes ADD, CHECK and what
/// STATUS checks before IPAM's answer, and [`crate::skel::Plugin`] comes
/// with the rest, written once:
/// - DEL: [`del`], the container link and IPAM DEL, best effort; it reads
///   only `ipam.type`, so a config ADD refused is still deletable;
/// - GC: the link lives in the container and goes with it, so there is
///   nothing of the plugin's own to collect: GC goes to IPAM ([`gc`]),
///   with the same stdin (and so the same `cni.dev/valid-attachments`);
/// - STATUS: [`ContainerLinkPlugin::status_before_ipam`], then IPAM's
///   answer ([`status`]).
pub trait ContainerLinkPlugin {
    /// ADD, over [`add`].
    fn add(&self, args: &CmdArgs) -> Result<CniResult>;
    /// CHECK, over [`Check`].
    fn check(&self, args: &CmdArgs) -> Result<()>;
    /// What STATUS checks before IPAM: the kernel's support for the link
    /// kind, the master the link would be stacked on.
    fn status_before_ipam(&self, args: &CmdArgs) -> Result<()>;
}

impl<P: ContainerLinkPlugin> crate::skel::Plugin for P {
    fn add(&self, args: &CmdArgs) -> Result<CniResult> {
        ContainerLinkPlugin::add(self, args)
    }

    fn del(&self, args: &CmdArgs) -> Result<()> {
        del(args, ErrorList::new)
    }

    fn check(&self, args: &CmdArgs) -> Result<()> {
        ContainerLinkPlugin::check(self, args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<()> {
        gc(args, ErrorList::new())
    }

    fn status(&self, args: &CmdArgs) -> Result<()> {
        self.status_before_ipam(args)?;
        status(args)
    }
}

/// DEL's shared part, best effort: IPAM DEL (the config's `ipam.type`,
/// read leniently) and then the deletion of `CNI_IFNAME` in the container
/// ([`delete_container_link`]), in that order (the dhcp IPAM releases its
/// lease out of the interface, as in the reference), on their own thread
/// while `more` (the plugin's own teardown, returning its errors) runs on
/// this one: deleting a link waits for the kernel's RCU grace periods (some
/// 15 ms for a veth), and a firewall teardown for one more. Every step
/// runs; the errors are reported together.
pub fn del(args: &CmdArgs, more: impl FnOnce() -> ErrorList) -> Result<()> {
    del_with(args, || delete_container_link(args), more)
}

/// [`del`] with the plugin's own link step instead of deleting
/// `CNI_IFNAME` (a plugin that moves a device back to the node rather
/// than deleting it): `link` runs after IPAM DEL, on their thread beside
/// `more`.
pub fn del_with(
    args: &CmdArgs,
    link: impl FnOnce() -> Result<()> + Send,
    more: impl FnOnce() -> ErrorList,
) -> Result<()> {
    let mut errors = ErrorList::new();
    std::thread::scope(|s| {
        let interface = s.spawn(|| {
            let mut errors = ErrorList::new();
            if let Some(plugin) = args.teardown_ipam_type() {
                errors.record(ipam::exec_del(&plugin, &args.stdin));
            }
            errors.record(link());
            errors
        });
        errors.extend(more());
        match interface.join() {
            Ok(e) => errors.extend(e),
            Err(_) => errors.push(Error::Internal(
                "the IPAM and container link steps of DEL panicked".into(),
            )),
        }
    });
    errors.finish()
}

/// Deletes `CNI_IFNAME` in the container, if the namespace and the link
/// are still there (a namespace that is gone took its links with it). A
/// `CNI_NETNS` that is the plugin's own namespace is refused (code 4), so
/// DEL never deletes an interface of the node.
pub fn delete_container_link(args: &CmdArgs) -> Result<()> {
    match NetNs::open_container_if_present(Path::new(&args.netns))? {
        Some(ns) => Netlink::open_in(&ns)?.delete_link_if_present(&args.ifname),
        None => Ok(()),
    }
}

/// GC's shared part: IPAM GC (the config's `ipam.type`, read leniently)
/// with the same stdin, so the same `cni.dev/valid-attachments`, after the
/// plugin's own part whose errors are `errors`; all reported together.
pub fn gc(args: &CmdArgs, mut errors: ErrorList) -> Result<()> {
    if let Some(plugin) = args.teardown_ipam_type() {
        errors.record(ipam::exec_gc(&plugin, &args.stdin));
    }
    errors.finish()
}

/// STATUS's kernel check: code 50 when the kernel cannot make links of
/// the kind plugin `plugin` makes ([`Netlink::kernel_has_kind`], which
/// creates nothing), saying what provides them.
pub fn kind_status(plugin: &str, support: &LinkKindSupport) -> Result<()> {
    if Netlink::open()?.kernel_has_kind(support.kind)? {
        return Ok(());
    }
    Err(Error::NotAvailable(format!(
        "{plugin}: {}",
        support.missing()
    )))
}

/// STATUS's shared part: IPAM's answer, with the same stdin (no IPAM: the
/// plugin can serve ADD).
pub fn status(args: &CmdArgs) -> Result<()> {
    match args.conf.ipam_type()? {
        Some(plugin) => ipam::exec_status(&plugin, &args.stdin),
        None => Ok(()),
    }
}

// ---- CHECK ------------------------------------------------------------------

/// A CHECK in progress: the container's namespace with a socket in it and
/// the `prevResult` to compare with. Differences are [`Error::CheckFailed`]
/// (code 102) naming what differs.
pub struct Check<'a> {
    args: &'a CmdArgs,
    /// The container's namespace.
    pub ns: NetNs,
    /// A netlink socket inside it.
    pub container: Netlink,
    /// The ADD's result, converted to the current shape.
    pub prev: CniResult,
}

impl<'a> Check<'a> {
    /// Opens `CNI_NETNS`, runs IPAM CHECK (with `ipam`, the config's
    /// `ipam.type`), reads the `prevResult` (required: code 7 naming it
    /// without one) and opens a socket in the namespace.
    pub fn begin(args: &'a CmdArgs, ipam: Option<&str>) -> Result<Check<'a>> {
        let ns = args.open_netns()?;
        if let Some(plugin) = ipam {
            ipam::exec_check(plugin, &args.stdin)?;
        }
        let prev = args.required_prev_result("CHECK needs the ADD result (prevResult)")?;
        let container = Netlink::open_in(&ns)?;
        Ok(Check {
            args,
            ns,
            container,
            prev,
        })
    }

    /// The record of the container interface (`CNI_IFNAME` in this
    /// sandbox) in `prevResult`.
    pub fn record(&self) -> Result<&Interface> {
        ipam::container_interface(&self.prev, &self.args.ifname, &self.args.netns)
    }

    /// The container interface: recorded in `prevResult`, present in the
    /// container, a link of `kind` (`IFLA_INFO_KIND`: "veth", "tun", ...),
    /// with the recorded MAC.
    pub fn container_link(&mut self, kind: &str) -> Result<Link> {
        let args = self.args;
        let ifname = &args.ifname;
        let want = self.record()?.clone();
        let link = self.container.link_by_name(ifname)?.ok_or_else(|| {
            Error::CheckFailed(format!("container interface {ifname:?} not found"))
        })?;
        if link.kind.as_deref() != Some(kind) {
            return Err(Error::CheckFailed(format!(
                "container interface {ifname:?} is not a {kind} (kind {})",
                link.kind.as_deref().unwrap_or("none")
            )));
        }
        ipam::check_mac(&format!("container interface {ifname:?}"), &want, &link)?;
        Ok(link)
    }

    /// The addresses `prevResult` gives the container interface (or no
    /// interface in particular).
    pub fn addresses(&self) -> Vec<IpConfig> {
        ipam::container_addresses(&self.prev, &self.args.ifname, &self.args.netns)
            .into_iter()
            .cloned()
            .collect()
    }

    /// Those addresses are on the container interface (with their prefix
    /// routes), and every route of `prevResult` is in the container.
    /// Returns the addresses, for the plugin's own checks.
    pub fn addresses_and_routes(&mut self) -> Result<Vec<IpPrefix>> {
        let ips = self.addresses();
        let refs: Vec<&IpConfig> = ips.iter().collect();
        ipam::check_addresses(&mut self.container, &self.args.ifname, &refs)?;
        ipam::check_routes(&mut self.container, &self.prev.routes)?;
        Ok(ips.iter().map(|ip| ip.address).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_own_link_mtu_is_0_or_68_to_65535() {
        assert_eq!(own_link_mtu(0).unwrap(), None);
        assert_eq!(own_link_mtu(68).unwrap(), Some(68));
        assert_eq!(own_link_mtu(65535).unwrap(), Some(65535));
        for bad in [-1, 67, 65536] {
            crate::error::testing::assert_config_error(
                own_link_mtu(bad),
                &format!("mtu: {bad} is out of range (68-65535, or 0 for the kernel default)"),
            );
        }
    }
    use crate::netns::testing::{new_netns, privileged};
    use crate::skel::{test_args, Command};
    use std::os::fd::AsRawFd;
    use std::sync::Mutex;

    /// An ADD of `eth0` into `pod`, for a plugin run in `node`.
    fn args_for(pod: &NetNs) -> CmdArgs {
        let mut args = test_args(r#"{"cniVersion":"1.1.0","name":"n"}"#);
        args.command = Command::Add;
        args.netns = format!("/proc/self/fd/{}", pod.as_raw_fd());
        args
    }

    #[test]
    fn attach_a_failed_add_undoes_in_order_and_a_good_one_keeps_all() {
        if !privileged("attach_a_failed_add_undoes_in_order_and_a_good_one_keeps_all") {
            return;
        }
        let (node, pod) = (new_netns(), new_netns());
        let args = args_for(&pod);
        let log = Mutex::new(Vec::new());
        let note = |s: String| log.lock().unwrap().push(s);
        let veths_on_node = || {
            let links = Netlink::open().unwrap().links().unwrap();
            links
                .iter()
                .filter(|l| l.kind.as_deref() == Some("veth"))
                .count()
        };
        node.run(|| {
            let e = add(&args, "test", None, |a| {
                a.undo_last("the shared object", || {
                    note(format!("last: {} veths", veths_on_node()));
                    Ok(())
                });
                let pair = a.create_veth(Some(1400), None)?;
                assert_eq!((pair.host.mtu, pair.container.mtu), (1400, 1400));
                assert!(pair.host.name.starts_with("veth"));
                a.undo("the first rule", || {
                    note(format!("first: {} veths", veths_on_node()));
                    Ok(())
                });
                a.undo("the second rule", || {
                    note("second".into());
                    Err(Error::Internal("cannot undo".into()))
                });
                Err::<CniResult, _>(Error::Internal("step failed".into()))
            })
            .unwrap_err();
            assert_eq!(e.to_string(), "step failed");
        })
        .unwrap();
        // Newest first; the links after the closures, the shared object
        // last; a failing undo does not stop the others.
        assert_eq!(
            *log.lock().unwrap(),
            ["second", "first: 1 veths", "last: 0 veths"]
        );
        assert!(Netlink::open_in(&pod)
            .unwrap()
            .link_by_name("eth0")
            .unwrap()
            .is_none());

        // A good ADD keeps everything; the name is then taken.
        node.run(|| {
            add(&args, "test", None, |a| {
                a.undo("never", || panic!("a good ADD undoes nothing"));
                let pair = a.create_veth(None, Some([0x0a, 0, 0, 0, 0, 1]))?;
                Ok(CniResult {
                    interfaces: vec![interface_of(&pair.container, "/pod")],
                    ..CniResult::default()
                })
            })
            .unwrap();
            let e = add(&args, "test", None, |_| panic!("not reached")).unwrap_err();
            assert_eq!(e.code(), 100);
            assert_eq!(
                e.to_string(),
                "container interface CNI_IFNAME \"eth0\" already exists in CNI_NETNS: \
                 File exists (os error 17)"
            );
            assert_eq!(veths_on_node(), 1);
        })
        .unwrap();
        let eth0 = Netlink::open_in(&pod)
            .unwrap()
            .link_by_name("eth0")
            .unwrap()
            .unwrap();
        assert_eq!(eth0.mac, Some([0x0a, 0, 0, 0, 0, 1]));
        // A result the version cannot carry undoes the ADD.
        let mut old = args_for(&pod);
        old.ifname = "eth1".into();
        old.version = crate::version::Version::V0_2_0;
        node.run(|| {
            let e = add(&old, "test", None, |a| {
                let pair = a.create_veth(None, None)?;
                Ok(CniResult {
                    interfaces: vec![interface_of(&pair.container, "/pod")],
                    ..CniResult::default()
                })
            })
            .unwrap_err();
            assert_eq!(e.code(), 1, "{e}");
            assert_eq!(veths_on_node(), 1);
        })
        .unwrap();
        assert!(Netlink::open_in(&pod)
            .unwrap()
            .link_by_name("eth1")
            .unwrap()
            .is_none());
        // DEL's link step takes it, and then finds nothing to do.
        let mut del_args = args.clone();
        del_args.command = Command::Del;
        delete_container_link(&del_args).unwrap();
        delete_container_link(&del_args).unwrap();
        assert!(Netlink::open_in(&pod)
            .unwrap()
            .link_by_name("eth0")
            .unwrap()
            .is_none());
    }
}
