//! The bridge's firewall state, built by `libcni::netfilter` in the node
//! namespace the plugin runs in: masquerade of the container's addresses
//! (`ipMasq`, owned by network name + container ID) and the MAC spoof check
//! of its port (`macspoofchk`, owned by container ID + interface name).
//! ADD sets them up (see `add.rs`); this module holds what DEL and GC do,
//! which needs neither the container's namespace nor its addresses.

use std::collections::BTreeSet;

use libcni::gojson::Lenient;
use libcni::netfilter::{masq, spoofcheck, Backend, Owner};
use libcni::netlink::Netlink;
use libcni::skel::CmdArgs;
use libcni::types::Attachment;
use libcni::{Error, ErrorList};
use serde::Deserialize;

use crate::config::DEFAULT_BRIDGE;

/// The keys DEL and GC act on, read leniently: DEL must work for a config
/// ADD refused (runtimes DEL failed ADDs), so a key that cannot be read is
/// said on stderr and counts as absent instead of failing the DEL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// `bridge`.
    pub bridge: String,
    /// `ipMasq` is `true`.
    pub ip_masq: bool,
    /// `ipMasqBackend`, when it names a backend.
    pub backend: Option<Backend>,
    /// `macspoofchk` is `true`.
    pub macspoofchk: bool,
}

#[derive(Debug, Default, Deserialize)]
struct RawKeys {
    #[serde(default)]
    bridge: Lenient<String>,
    #[serde(rename = "ipMasq", default)]
    ip_masq: Lenient<bool>,
    #[serde(rename = "ipMasqBackend", default)]
    backend: Lenient<String>,
    #[serde(default)]
    macspoofchk: Lenient<bool>,
}

impl Keys {
    pub fn lenient(args: &CmdArgs) -> Keys {
        let raw: RawKeys = args.config().unwrap_or_default();
        Keys {
            bridge: raw
                .bridge
                .usable("bridge")
                .unwrap_or_else(|| DEFAULT_BRIDGE.to_string()),
            ip_masq: raw.ip_masq.usable("ipMasq").unwrap_or(false),
            backend: raw
                .backend
                .usable("ipMasqBackend")
                .and_then(|b| Backend::parse("ipMasqBackend", &b).ok()),
            macspoofchk: raw.macspoofchk.usable("macspoofchk").unwrap_or(false),
        }
    }

    /// `ipMasqBackend`, or the Go plugins' default (iptables wherever the
    /// node has it).
    pub fn masq_backend(&self) -> Backend {
        self.backend
            .unwrap_or_else(libcni::netfilter::default_backend)
    }
}

/// The masquerade owner of this call's container.
pub fn owner(args: &CmdArgs) -> Owner {
    Owner::new(&args.conf.name, &args.container_id)
}

/// DEL's share: the spoof check, then the masquerade (the Go plugin's
/// order), by name alone. Both run; the errors are returned.
pub fn del(args: &CmdArgs, keys: &Keys) -> ErrorList {
    let mut errors = ErrorList::new();
    if keys.macspoofchk {
        errors.record(spoofcheck::del(&args.container_id, &args.ifname));
    }
    if keys.ip_masq {
        // Both backends: nftables by owner tag, iptables by the hashed chain
        // name (which also finds the Go plugin's rules).
        errors.record(masq::del(keys.masq_backend(), &owner(args), &args.ifname));
    }
    errors
}

/// GC's share: the masquerade of this network's containers that are not in
/// `valid` (`cni.dev/valid-attachments`), and the spoof checks of
/// attachments not in it whose host veth is a port of this network's
/// bridge or is gone (the spoof check's names carry no network, so the port
/// says whose it is).
pub fn gc(args: &CmdArgs, keys: &Keys, valid: &[Attachment]) -> ErrorList {
    let mut errors = ErrorList::new();
    if keys.ip_masq {
        errors.record(masq::gc(keys.masq_backend(), &args.conf.name, valid));
    }
    if keys.macspoofchk {
        errors.record(ports_of(&keys.bridge).and_then(|(ports, all)| {
            spoofcheck::gc(valid, &|ifname| {
                ports.contains(ifname) || !all.contains(ifname)
            })
        }));
    }
    errors
}

/// The names of the ports of bridge `bridge` and of every link of the
/// node, from one dump.
fn ports_of(bridge: &str) -> Result<(BTreeSet<String>, BTreeSet<String>), Error> {
    let links = Netlink::open()?.links()?;
    let br = links
        .iter()
        .find(|l| l.name == bridge && l.kind.as_deref() == Some("bridge"))
        .map(|l| l.index);
    let ports = links
        .iter()
        .filter(|l| br.is_some() && l.master == br)
        .map(|l| l.name.clone())
        .collect();
    let all = links.into_iter().map(|l| l.name).collect();
    Ok((ports, all))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(stdin: &str) -> Keys {
        Keys::lenient(&libcni::skel::test_args(stdin))
    }

    #[test]
    fn del_and_gc_read_their_keys_leniently() {
        let k = keys(
            r#"{"name": "n", "IPMasq": true, "ipMasqBackend": "iptables", "macSpoofChk": true, "Bridge": "br9"}"#,
        );
        assert_eq!(
            k,
            Keys {
                bridge: "br9".into(),
                ip_masq: true,
                backend: Some(Backend::Iptables),
                macspoofchk: true
            }
        );
        assert_eq!(k.masq_backend(), Backend::Iptables);
        let k = keys(
            r#"{"name": "n", "ipMasq": "yes", "ipMasqBackend": "pf", "bridge": 5, "macspoofchk": true}"#,
        );
        assert_eq!(
            k,
            Keys {
                bridge: "cni0".into(),
                ip_masq: false,
                backend: None,
                macspoofchk: true
            }
        );
    }
}
