//! Netfilter: host ports (portmap), masquerade (bridge `ipMasq`), the MAC
//! spoof check (bridge `macspoofchk`) and the firewall plugin's forwarding
//! rules, on two backends.
//!
//! - [`nft`]: nf_tables spoken over netlink by this crate ([`nfnetlink`]),
//!   no `nft` process. Every ADD, DEL or GC is one atomic batch. A
//!   container's state is a few map/set elements tagged with its [`Owner`],
//!   so the cost of an operation does not grow with the number of other
//!   containers' mappings.
//! - [`iptables`]: one `iptables-restore --noflush` (and
//!   `ip6tables-restore`) per operation, writing the chains, rules and
//!   comments of the Go plugins, so either side's DEL removes the other's
//!   rules.
//!
//! - [`iptables_nft`]: the same iptables rules written over netlink into
//!   iptables-nft's `nat` and `filter` tables, in iptables-nft's own
//!   encoding (the default on iptables-nft nodes, no process).
//!
//! [`masq`] builds its rules for both backends here (portmap and the
//! firewall build theirs in their own crates), [`spoofcheck`] on nf_tables
//! (as the Go plugin does);
//! [`conntrack`] removes stale UDP conntrack entries.
//! Everything acts on the network namespace of the calling thread (the
//! plugin's own): tests call it inside [`crate::netns::NetNs::run`].

pub mod conntrack;
pub mod iptables;
pub mod iptables_nft;
pub mod ledger;
pub mod masq;
pub mod nfnetlink;
pub mod nft;
pub mod spoofcheck;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wire;

use sha2::{Digest, Sha512};

use crate::types::Attachment;
use crate::IpFamily;
use crate::{Error, ErrorList, Result};

/// A transport protocol of a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Parses `tcp`, `udp` or `sctp` (any case, as the Go plugin lowercases).
    pub fn parse(s: &str) -> Option<Protocol> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            "sctp" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// Which firewall backend an operation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// nf_tables over netlink.
    Nftables,
    /// `iptables-restore` / `ip6tables-restore`, Go-compatible rules.
    Iptables,
}

impl Backend {
    /// Parses the value of config key `key` (`"nftables"` or `"iptables"`);
    /// anything else is code 7 naming the key and the value.
    pub fn parse(key: &str, value: &str) -> Result<Backend> {
        match value {
            "nftables" => Ok(Backend::Nftables),
            "iptables" => Ok(Backend::Iptables),
            other => Err(Error::config(
                key,
                format!("unknown backend {other:?} (expected \"nftables\" or \"iptables\")"),
            )),
        }
    }

    /// The default: nftables when the kernel of the calling thread's
    /// namespace speaks nf_tables, iptables otherwise.
    pub fn detect() -> Backend {
        match nft::Nft::open() {
            Ok(n) => {
                let mut n = n;
                if n.available() {
                    Backend::Nftables
                } else {
                    Backend::Iptables
                }
            }
            Err(_) => Backend::Iptables,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Nftables => "nftables",
            Backend::Iptables => "iptables",
        }
    }
}

/// Which `iptables` the node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeIptables {
    /// iptables-nft: its rules are nf_tables rules, which we write
    /// ourselves ([`iptables_nft`]).
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
    /// ([`iptables_nft`]), no process: the node's iptables is iptables-nft,
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
pub fn open_nft_for_teardown(backend: Backend, errors: &mut ErrorList) -> Option<nft::Nft> {
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

/// Who installed a piece of firewall state: a network and a container. Its
/// [`Owner::tag`] is written in the comment of every nf_tables element and
/// rule made for the container, so DEL and GC find them with nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub network: String,
    pub container_id: String,
}

/// Longest tag: a comment holds 127 bytes.
const MAX_TAG_LEN: usize = nft::MAX_COMMENT_LEN - 1;

impl Owner {
    pub fn new(network: &str, container_id: &str) -> Owner {
        Owner {
            network: network.to_string(),
            container_id: container_id.to_string(),
        }
    }

    /// `net=<network> cid=<container ID>` (both match
    /// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`, so the tag needs no quoting in
    /// `nft list` output). When that would not fit in a comment, each part
    /// is replaced by `#` and a hash of it, still deterministic, so DEL and
    /// GC compare tags.
    pub fn tag(&self) -> String {
        let plain = format!("net={} cid={}", self.network, self.container_id);
        if plain.len() <= MAX_TAG_LEN {
            return plain;
        }
        format!(
            "net={} cid={}",
            tag_part(&self.network, 24),
            tag_part(&self.container_id, 64)
        )
    }

    /// Whether the tag `tag` (read back from a comment) belongs to a
    /// container of `network` that is not in `valid`: what GC removes.
    pub fn is_stale_tag(tag: &str, network: &str, valid: &[Attachment]) -> bool {
        let Some((net, id)) = parse_tag(tag) else {
            return false;
        };
        if net != network && net != tag_part(network, 24) {
            return false;
        }
        !valid
            .iter()
            .any(|a| Owner::new(network, &a.container_id).tag() == tag || a.container_id == id)
    }
}

/// `#` + the first `len` hex digits of sha512(`s`).
fn tag_part(s: &str, len: usize) -> String {
    format!("#{}", &hex_sha512(s)[..len])
}

/// The network and container parts of a tag.
fn parse_tag(tag: &str) -> Option<(&str, &str)> {
    let rest = tag.strip_prefix("net=")?;
    let (net, id) = rest.split_once(" cid=")?;
    Some((net, id))
}

/// The network and container of the Go plugins' iptables comment
/// `name: "<net>" id: "<cid>"`.
pub fn parse_go_comment(comment: &str) -> Option<(&str, &str)> {
    let rest = comment.strip_prefix("name: \"")?;
    let (net, rest) = rest.split_once("\" id: \"")?;
    let id = rest.strip_suffix('"')?;
    Some((net, id))
}

/// Lowercase hex of sha512(`s`).
pub fn hex_sha512(s: &str) -> String {
    Sha512::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The Go plugins' hashed chain name: `CNI-` + `prefix` + hex of
/// sha512(`network` + `container_id`), cut to 28 characters
/// (`utils.MustFormatChainNameWithPrefix`).
pub fn go_chain_name(prefix: &str, network: &str, container_id: &str) -> String {
    let mut s = format!(
        "CNI-{prefix}{}",
        hex_sha512(&format!("{network}{container_id}"))
    );
    s.truncate(28);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_go_chain_names_hash_network_and_container() {
        // sha512("net1" + "ctr1") starts with these digits (sha512sum).
        let full = hex_sha512("net1ctr1");
        assert_eq!(
            go_chain_name("", "net1", "ctr1"),
            format!("CNI-{}", &full[..24])
        );
        assert_eq!(
            go_chain_name("DN-", "net1", "ctr1"),
            format!("CNI-DN-{}", &full[..21])
        );
        assert_eq!(go_chain_name("DN-", "net1", "ctr1").len(), 28);
    }

    #[test]
    fn netfilter_owner_tags_round_trip_and_find_stale_containers() {
        let o = Owner::new("net1", "ctr1");
        assert_eq!(o.tag(), "net=net1 cid=ctr1");
        assert_eq!(parse_go_comment("name: \"n\" id: \"c\""), Some(("n", "c")));
        let valid = vec![Attachment {
            container_id: "ctr1".into(),
            ifname: "eth0".into(),
        }];
        assert!(!Owner::is_stale_tag(&o.tag(), "net1", &valid));
        assert!(Owner::is_stale_tag(&o.tag(), "net1", &[]));
        assert!(
            !Owner::is_stale_tag(&o.tag(), "net2", &[]),
            "other networks are left alone"
        );
        assert!(!Owner::is_stale_tag("hairpin 10.0.0.0/24", "net1", &[]));
        let long = Owner::new(&"n".repeat(100), &"c".repeat(100));
        let tag = long.tag();
        assert!(tag.len() <= MAX_TAG_LEN, "{tag}");
        let valid_long = vec![Attachment {
            container_id: "c".repeat(100),
            ifname: "eth0".into(),
        }];
        assert!(!Owner::is_stale_tag(&tag, &"n".repeat(100), &valid_long));
        assert!(Owner::is_stale_tag(&tag, &"n".repeat(100), &valid));
    }
}
