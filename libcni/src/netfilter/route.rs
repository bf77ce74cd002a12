//! The netfilter contract: where a feature's rules go, and the two
//! flows every feature (masquerade, host ports, the firewall, the spoof
//! check) runs through, so that a backend's reach and the "both backends
//! on DEL" rule are decided once.
//!
//! A feature has a file per backend, named for what that backend writes:
//! `nft.rs` (nf_tables in the feature's own table), `ipt_netlink.rs`
//! (iptables rules written over netlink in iptables-nft's encoding) and
//! `ipt.rs` (iptables rules by `iptables-restore`, legacy x_tables); the
//! firewall adds `firewalld.rs`. Its ADD and CHECK implement [`OnRoute`]
//! and run through [`on_route`] on the [`Route`] the config chose; its DEL
//! and GC implement [`BothBackends`] and run through [`teardown_both`],
//! which visits every backend whatever the config chose. What was written
//! is verified through [`super::ledger::verified`].

use super::{nft, Backend};
use crate::IpFamily;
use crate::{Error, ErrorList, Result};

/// Which `iptables` the node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeIptables {
    /// iptables-nft: its rules are nf_tables rules, which we write
    /// ourselves ([`super::iptables_nft`]).
    Nft,
    /// Another `iptables` (legacy x_tables): written by `iptables-restore`.
    Legacy,
    /// No `iptables` command.
    Absent,
}

/// The `PATH` the Go plugin's iptables library searches when none is set.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Which `iptables` the node runs, from where the first executable
/// `iptables` on `PATH` leads (the alternatives symlinks end at
/// `xtables-nft-multi` or `xtables-legacy-multi`); no process is run.
pub fn node_iptables() -> NodeIptables {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    for dir in std::env::split_paths(&path) {
        let p = dir.join("iptables");
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            continue;
        }
        let real = std::fs::canonicalize(&p).unwrap_or(p);
        let name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return if name.contains("nft") {
            NodeIptables::Nft
        } else {
            NodeIptables::Legacy
        };
    }
    NodeIptables::Absent
}

/// How iptables rules reach the kernel: the one choice every feature with
/// an iptables backend (masq, portmap, the firewall) makes the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IptablesPath {
    /// `iptables-save` / `iptables-restore` (and `ip6tables-*`), one per
    /// family per operation: the node's iptables is legacy x_tables.
    Programs,
    /// nf_tables over netlink in iptables-nft's own encoding
    /// ([`super::iptables_nft`]), no process: the node's iptables is iptables-nft,
    /// whose rules are nf_tables rules.
    Netlink,
}

impl IptablesPath {
    /// The node's: over netlink where its `iptables` is iptables-nft,
    /// with the programs where it is legacy ([`node_iptables`]; no process
    /// is run to tell). Where no `iptables` is found, as in a container
    /// from our image (`cni-rs gc` in the DaemonSet), over netlink too,
    /// unless the kernel holds legacy x_tables tables in this namespace:
    /// rules only iptables-nft could have written are still reached, and
    /// legacy ones are never silently passed over (the programs' absence
    /// is then the error).
    pub fn of_node() -> IptablesPath {
        match node_iptables() {
            NodeIptables::Nft => IptablesPath::Netlink,
            NodeIptables::Legacy => IptablesPath::Programs,
            NodeIptables::Absent if legacy_tables_in_use() => IptablesPath::Programs,
            NodeIptables::Absent => IptablesPath::Netlink,
        }
    }
}

/// Where one operation's rules go: the one dispatch over [`Backend`] ×
/// [`IptablesPath`] that masq, portmap and the firewall make, so a
/// backend's reach is decided in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// nf_tables, in the feature's own table.
    Nftables,
    /// iptables rules, reaching the kernel by the node's path.
    Iptables(IptablesPath),
}

impl Route {
    /// The route of `backend` on this node: nftables as it is, iptables
    /// by [`IptablesPath::of_node`].
    pub fn of(backend: Backend) -> Route {
        match backend {
            Backend::Nftables => Route::Nftables,
            Backend::Iptables => Route::iptables(),
        }
    }

    /// The iptables side of this node. A teardown (DEL, GC) visits it
    /// after the nftables side whatever the config chose: an attachment's
    /// rules are found wherever they were put.
    pub fn iptables() -> Route {
        Route::Iptables(IptablesPath::of_node())
    }
}

/// Whether legacy x_tables (`ip_tables`, `ip6_tables`) has a table in this
/// network namespace: what `iptables-legacy` writes, and nf_tables cannot
/// show.
fn legacy_tables_in_use() -> bool {
    ["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"]
        .iter()
        .any(|f| std::fs::read_to_string(f).is_ok_and(|t| !t.trim().is_empty()))
}

/// The Go plugins' default backend (v1.9 portmap's `ensureBackend`, and
/// ipMasq's `SetupIPMasqForNetworks`): iptables
/// wherever the node has it, nftables only where it has no `iptables` and
/// the kernel speaks nf_tables.
pub fn default_backend() -> Backend {
    if node_iptables() == NodeIptables::Absent && Backend::detect() == Backend::Nftables {
        Backend::Nftables
    } else {
        Backend::Iptables
    }
}

/// What an [`OnRoute`] step does: write the rules, or only read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// ADD: write what is missing (idempotent).
    Add,
    /// CHECK: read, and fail with code 102 naming what is missing.
    Check,
}

/// One feature's ADD or CHECK on the one route the config chose:
/// [`on_route`] opens what the route needs and calls the matching step.
pub trait OnRoute {
    /// nf_tables, in the feature's own table.
    fn nftables(&mut self, nft: &mut nft::Nft) -> Result<()>;
    /// iptables rules over netlink, in iptables-nft's encoding, both
    /// families through one socket.
    fn iptables_over_netlink(&mut self, nft: &mut nft::Nft) -> Result<()>;
    /// iptables rules of `family` by `iptables-restore` (IPv4, then IPv6).
    fn iptables_programs(&mut self, family: IpFamily) -> Result<()>;
}

/// Runs `op` on `route`, stopping at the first error.
pub fn on_route(route: Route, op: &mut impl OnRoute) -> Result<()> {
    match route {
        Route::Nftables => op.nftables(&mut nft::Nft::open()?),
        Route::Iptables(IptablesPath::Netlink) => op.iptables_over_netlink(&mut nft::Nft::open()?),
        Route::Iptables(IptablesPath::Programs) => {
            for family in IpFamily::BOTH {
                op.iptables_programs(family)?;
            }
            Ok(())
        }
    }
}

/// One feature's state (masquerade, host ports) on both backends, as a
/// teardown (DEL, GC) visits it: [`teardown_both`] runs the steps in the
/// one order every feature shares.
pub trait BothBackends {
    /// The nf_tables side, in the feature's own table.
    fn nftables(&mut self, nft: &mut nft::Nft) -> Result<()>;
    /// The iptables side where the node's iptables is iptables-nft: read
    /// and written over netlink, no process.
    fn iptables_over_netlink(&mut self, nft: &mut nft::Nft) -> Result<()>;
    /// Whether iptables of `family` may hold something to remove, judged
    /// without a process (from iptables-nft's tables in `nft`, or with
    /// `None` when nf_tables could not be opened); only asked when the
    /// config did not choose iptables.
    fn iptables_may_hold(&mut self, nft: Option<&mut nft::Nft>, family: IpFamily) -> bool;
    /// The iptables side of `family` by `iptables-save`/`-restore`.
    fn iptables_programs(&mut self, family: IpFamily) -> Result<()>;
}

/// Tears `state` down on both backends, whichever `backend` the config
/// chose, as the Go plugins' teardown does: nf_tables first; then on an
/// iptables-nft node the iptables side over netlink; elsewhere the
/// iptables programs of each family, where the config chose iptables or
/// the family [may hold](BothBackends::iptables_may_hold) something. Every
/// step runs; their errors are kept in `errors`.
pub fn teardown_both(backend: Backend, state: &mut impl BothBackends, errors: &mut ErrorList) {
    let mut nft = open_nft_for_teardown(backend, errors);
    if let Some(n) = nft.as_mut() {
        errors.record(state.nftables(n));
        if IptablesPath::of_node() == IptablesPath::Netlink {
            errors.record(state.iptables_over_netlink(n));
            return;
        }
    }
    for family in IpFamily::BOTH {
        if backend == Backend::Iptables || state.iptables_may_hold(nft.as_mut(), family) {
            errors.record(state.iptables_programs(family));
        }
    }
}

/// For a teardown that covers both backends: nf_tables, or `None` when it
/// cannot be opened. That is an error, kept in `errors`, unless `backend`
/// is iptables: then nf_tables is only looked at to spare iptables
/// processes, and `None` means running them.
fn open_nft_for_teardown(backend: Backend, errors: &mut ErrorList) -> Option<nft::Nft> {
    match nft::Nft::open() {
        Ok(n) => Some(n),
        Err(_) if backend == Backend::Iptables => None,
        Err(e) => {
            errors.push(Error::kernel(
                "open nf_tables",
                std::io::Error::other(e.to_string()),
            ));
            None
        }
    }
}
