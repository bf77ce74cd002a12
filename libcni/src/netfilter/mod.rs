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
//! Every feature with a choice of backend is laid out by one contract
//! ([`route`]): a file per backend under a facade that implements
//! [`Rules`], ADD and CHECK through [`on_route`], DEL and GC through
//! [`teardown`]. [`masq`] lives here, portmap and the firewall in their
//! own crates; [`spoofcheck`] (nf_tables only, as the Go plugin) has no
//! route to choose. [`conntrack`] removes stale UDP conntrack entries.
//! Everything acts on the network namespace of the calling thread (the
//! plugin's own): tests call it inside [`crate::netns::NetNs::run`].

pub mod conntrack;
pub mod iptables;
pub mod iptables_nft;
pub mod ledger;
pub mod masq;
pub mod nfnetlink;
pub mod nft;
pub mod route;
pub mod spoofcheck;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wire;

use sha2::{Digest, Sha512};

pub use route::{
    default_backend, node_iptables, on_route, teardown, IptablesPath, NodeIptables, Programs,
    Route, Rules, Verb, Visit,
};

use crate::types::Attachment;
use crate::{Error, Result};

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
