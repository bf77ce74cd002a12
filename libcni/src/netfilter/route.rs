//! The netfilter contract: where a feature's rules go, and the two
//! flows every feature with a choice of backend (masquerade, host ports,
//! the firewall) runs through, so that a backend's reach and the "both
//! backends on DEL" rule are decided once. (The spoof check has one
//! backend, nf_tables, as in Go: it has no route to choose.)
//!
//! A feature has a file per backend, named for what that backend writes:
//! `nft.rs` (nf_tables in the feature's own table), `ipt_netlink.rs`
//! (iptables rules written over netlink in iptables-nft's encoding) and
//! `ipt.rs` (iptables rules by `iptables-restore`, legacy x_tables); the
//! firewall adds `firewalld.rs`. Its facade implements the one trait,
//! [`Rules`], whose steps take the [`Verb`]: ADD and CHECK run through
//! [`on_route`] on the [`Route`] the config chose; DEL and GC through
//! [`teardown`], on the places a list of [`Visit`]s names
//! ([`Visit::both_backends`]: every backend whatever the config chose).
//! What was written is verified through [`super::ledger::verified`].

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

/// What a feature's rules are asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// ADD: write what is missing (idempotent), on one route.
    Add,
    /// CHECK: read, and fail with code 102 naming what is missing.
    Check,
    /// DEL: remove one attachment's rules, wherever they are.
    Del,
    /// GC: remove the rules of a network's attachments that are not
    /// valid.
    Gc,
}

impl Verb {
    /// The error of a facade asked for a verb it has no steps for: what
    /// each verb needs (an attachment's spec, or a network's valid
    /// attachments) differs, so each facade serves some.
    pub fn not_served_by(self, facade: &str) -> Error {
        Error::Internal(format!("netfilter: {facade} has no {self:?} step"))
    }

    /// For a facade that serves one verb: `Ok` when this is `served`.
    pub fn only(self, served: Verb, facade: &str) -> Result<()> {
        if self == served {
            Ok(())
        } else {
            Err(self.not_served_by(facade))
        }
    }
}

/// One feature's rules on each backend: the one trait of the contract.
/// [`on_route`] runs ADD and CHECK on one route; [`teardown`] runs DEL and
/// GC on the places its [`Visit`]s name.
pub trait Rules {
    /// nf_tables, in the feature's own table.
    fn nftables(&mut self, verb: Verb, nft: &mut nft::Nft) -> Result<()>;
    /// iptables rules over netlink, in iptables-nft's encoding, both
    /// families through one socket.
    fn iptables_over_netlink(&mut self, verb: Verb, nft: &mut nft::Nft) -> Result<()>;
    /// iptables rules of `family` by `iptables-save`/`-restore`.
    fn iptables_programs(&mut self, verb: Verb, family: IpFamily) -> Result<()>;
    /// For a teardown's [`Programs::WhereHeld`]: whether legacy iptables
    /// of `family` may hold something to remove, judged without a process
    /// (from iptables-nft's tables in `nft`, or with `None` when nf_tables
    /// could not be opened). Where nothing tells, it may.
    fn iptables_may_hold(&mut self, _nft: Option<&mut nft::Nft>, _family: IpFamily) -> bool {
        true
    }
}

/// Runs `verb` (ADD or CHECK) of `rules` on `route`, stopping at the first
/// error; the programs run IPv4, then IPv6.
pub fn on_route(route: Route, verb: Verb, rules: &mut impl Rules) -> Result<()> {
    match route {
        Route::Nftables => rules.nftables(verb, &mut nft::Nft::open()?),
        Route::Iptables(IptablesPath::Netlink) => {
            rules.iptables_over_netlink(verb, &mut nft::Nft::open()?)
        }
        Route::Iptables(IptablesPath::Programs) => {
            for family in IpFamily::BOTH {
                rules.iptables_programs(verb, family)?;
            }
            Ok(())
        }
    }
}

/// One place a teardown (DEL, GC) looks, in the order of its list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// The feature's nf_tables state. When `required`, nf_tables failing
    /// to open is an error; otherwise nf_tables is only looked at to
    /// spare iptables processes.
    Nftables { required: bool },
    /// iptables rules over netlink; where nf_tables does not open, the
    /// programs instead, as [`Programs`] says.
    IptablesOverNetlink(Programs),
    /// iptables rules by the programs, family by family.
    IptablesPrograms(Programs),
}

/// Which families' legacy iptables a teardown runs the programs for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Programs {
    /// Both: the config chose iptables.
    EveryFamily,
    /// Those that [may hold](Rules::iptables_may_hold) something.
    WhereHeld,
}

impl Visit {
    /// The Go plugins' teardown, whichever `backend` the config chose:
    /// nf_tables (required unless the config chose iptables); then this
    /// node's iptables side, over netlink on an iptables-nft node, else
    /// the programs, for every family when the config chose iptables and
    /// otherwise for those that may hold something.
    pub fn both_backends(backend: Backend) -> [Visit; 2] {
        let programs = match backend {
            Backend::Iptables => Programs::EveryFamily,
            Backend::Nftables => Programs::WhereHeld,
        };
        [
            Visit::Nftables {
                required: backend != Backend::Iptables,
            },
            Visit::iptables_of_node(programs),
        ]
    }

    /// This node's iptables side: over netlink where its iptables is
    /// iptables-nft, else the programs.
    pub fn iptables_of_node(programs: Programs) -> Visit {
        match IptablesPath::of_node() {
            IptablesPath::Netlink => Visit::IptablesOverNetlink(programs),
            IptablesPath::Programs => Visit::IptablesPrograms(programs),
        }
    }
}

/// Runs `verb` (DEL or GC) of `rules` on each of `visits`, in order. Every
/// step runs; their errors are kept in `errors`. nf_tables is opened once,
/// for every visit that reads it.
pub fn teardown(visits: &[Visit], verb: Verb, rules: &mut impl Rules, errors: &mut ErrorList) {
    let required = visits
        .iter()
        .any(|v| matches!(v, Visit::Nftables { required: true }));
    let mut nft = open_nft_for_teardown(required, errors);
    for visit in visits {
        let programs = match (visit, nft.as_mut()) {
            (Visit::Nftables { .. }, Some(n)) => {
                errors.record(rules.nftables(verb, n));
                continue;
            }
            (Visit::Nftables { .. }, None) => continue,
            (Visit::IptablesOverNetlink(_), Some(n)) => {
                errors.record(rules.iptables_over_netlink(verb, n));
                continue;
            }
            (Visit::IptablesOverNetlink(p) | Visit::IptablesPrograms(p), _) => *p,
        };
        for family in IpFamily::BOTH {
            if programs == Programs::EveryFamily || rules.iptables_may_hold(nft.as_mut(), family) {
                errors.record(rules.iptables_programs(verb, family));
            }
        }
    }
}

/// For a teardown: nf_tables, or `None` when it cannot be opened. That is
/// an error, kept in `errors`, when it is `required`; otherwise `None`
/// means running the iptables programs instead.
fn open_nft_for_teardown(required: bool, errors: &mut ErrorList) -> Option<nft::Nft> {
    match nft::Nft::open() {
        Ok(n) => Some(n),
        Err(_) if !required => None,
        Err(e) => {
            errors.push(Error::kernel(
                "open nf_tables",
                std::io::Error::other(e.to_string()),
            ));
            None
        }
    }
}
