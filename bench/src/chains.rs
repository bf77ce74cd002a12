//! The chains the benchmark runs, each as a conflist (`cniVersion` 1.0.0,
//! the highest the Go 1.1.1 plugins speak), the same for our plugins and the
//! reference, except the kube-flannel chain: Debian does not package a Go
//! `flannel`, so the reference runs the chain flannel renders and delegates
//! to (bridge + host-local + portmap, the same rendered config).

use serde_json::{json, Map, Value};
use std::path::Path;

/// Whose binaries run a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Ours,
    Reference,
}

impl Side {
    pub fn label(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::Reference => "reference",
        }
    }

    /// One letter, for container IDs.
    pub fn tag(self) -> &'static str {
        match self {
            Side::Ours => "o",
            Side::Reference => "r",
        }
    }
}

/// One chain of the benchmark.
#[derive(Debug, Clone)]
pub struct Chain {
    /// Short name: a container ID part, and `--chains` selects by it.
    pub key: &'static str,
    pub title: &'static str,
    pub ifname: &'static str,
    pub ours: Value,
    pub reference: Value,
    /// What the runtime passes as capability arguments (`CAP_ARGS`).
    pub capability_args: Map<String, Value>,
    /// Said under the chain's row in the report.
    pub note: Option<&'static str>,
}

/// The keys of every chain, in the order they run.
pub const KEYS: [&str; 7] = [
    "bridge",
    "portmap",
    "bandwidth",
    "flannel",
    "full",
    "dhcp",
    "loopback",
];

/// The one port mapping of the chains with portmap.
pub fn port_mapping(host_port: u16) -> Value {
    json!([{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}])
}

fn bandwidth_limits() -> Value {
    // 100 Mbit/s each way, bursts of 2 Mbit (250 KB).
    json!({"ingressRate": 100_000_000u64, "ingressBurst": 2_000_000u64,
           "egressRate": 100_000_000u64, "egressBurst": 2_000_000u64})
}

/// A bridge with host-local IPAM, as a containerd-style node config has it.
pub fn bridge(bridge: &str, subnet: &str, ip_masq: bool, data_dir: &Path) -> Value {
    json!({
        "type": "bridge",
        "bridge": bridge,
        "isGateway": true,
        "ipMasq": ip_masq,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": subnet}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": data_dir
        }
    })
}

pub fn portmap() -> Value {
    json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true})
}

fn bandwidth() -> Value {
    json!({"type": "bandwidth", "capabilities": {"bandwidth": true}})
}

pub fn conflist(name: &str, plugins: Vec<Value>) -> Value {
    json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins})
}

/// The subnet.env flanneld would write on this node.
pub const SUBNET_ENV: &str = "FLANNEL_NETWORK=10.244.0.0/16\n\
FLANNEL_SUBNET=10.244.1.1/24\n\
FLANNEL_MTU=1450\n\
FLANNEL_IPMASQ=true\n";

/// Where the chains keep their state: all inside the run's temp dir.
pub struct StateDirs<'a> {
    /// host-local `dataDir`.
    pub ipam: &'a Path,
    /// flannel's `dataDir` (the saved delegate configs).
    pub flannel: &'a Path,
    /// The subnet.env file (holding [`SUBNET_ENV`]).
    pub subnet_env: &'a Path,
    /// The sockets of the two dhcp daemons ([`crate::dhcp`]).
    pub dhcp_ours: &'a Path,
    pub dhcp_reference: &'a Path,
}

/// macvlan on the LAN's master with dhcp IPAM asking the daemon at `socket`.
fn macvlan_dhcp(socket: &Path) -> Value {
    conflist(
        "bench-dhcp",
        vec![json!({
            "type": "macvlan",
            "master": crate::dhcp::MASTER,
            "mode": "bridge",
            "ipam": {"type": "dhcp", "daemonSocketPath": socket}
        })],
    )
}

/// Every chain, in [`KEYS`] order.
pub fn all(dirs: &StateDirs) -> Vec<Chain> {
    let same = |key, title, ifname, list: Value, caps: Value, note| Chain {
        key,
        title,
        ifname,
        ours: list.clone(),
        reference: list,
        capability_args: caps.as_object().cloned().unwrap_or_default(),
        note,
    };
    let ports = port_mapping(18080);
    vec![
        same(
            "bridge",
            "bridge + host-local",
            "eth0",
            conflist(
                "bench-bridge",
                vec![bridge("cbench1", "10.201.0.0/16", false, dirs.ipam)],
            ),
            json!({}),
            None,
        ),
        same(
            "portmap",
            "bridge + host-local + portmap",
            "eth0",
            conflist(
                "bench-portmap",
                vec![
                    bridge("cbench2", "10.202.0.0/16", false, dirs.ipam),
                    portmap(),
                ],
            ),
            json!({"portMappings": ports}),
            None,
        ),
        same(
            "bandwidth",
            "bridge + host-local + bandwidth",
            "eth0",
            conflist(
                "bench-bandwidth",
                vec![
                    bridge("cbench3", "10.203.0.0/16", false, dirs.ipam),
                    bandwidth(),
                ],
            ),
            json!({"bandwidth": bandwidth_limits()}),
            None,
        ),
        flannel(dirs, &ports),
        same(
            "full",
            "full: bridge (ipMasq) + host-local + portmap + bandwidth",
            "eth0",
            conflist(
                "bench-full",
                vec![
                    bridge("cbench4", "10.204.0.0/16", true, dirs.ipam),
                    portmap(),
                    bandwidth(),
                ],
            ),
            json!({"portMappings": ports, "bandwidth": bandwidth_limits()}),
            None,
        ),
        Chain {
            key: "dhcp",
            title: "macvlan + dhcp (a local dnsmasq, --no-ping)",
            ifname: "eth0",
            ours: macvlan_dhcp(dirs.dhcp_ours),
            reference: macvlan_dhcp(dirs.dhcp_reference),
            capability_args: Map::new(),
            note: Some(
                "Each side asks its own daemon (ours, or the Go reference's `dhcp daemon`), \
                 both in the node; dnsmasq serves in a LAN namespace on the macvlans' master. \
                 DEL releases the lease.",
            ),
        },
        same(
            "loopback",
            "loopback",
            "lo",
            conflist("bench-lo", vec![json!({"type": "loopback"})]),
            json!({}),
            None,
        ),
    ]
}

/// kube-flannel's chain: ours runs flannel, the reference the chain Go's
/// flannel renders (Debian packages no Go flannel).
fn flannel(dirs: &StateDirs, ports: &Value) -> Chain {
    let flannel_ours = conflist(
        "cbr0",
        vec![
            json!({
                "type": "flannel",
                "subnetFile": dirs.subnet_env,
                "dataDir": dirs.flannel,
                "ipam": {"dataDir": dirs.ipam},
                "delegate": {"hairpinMode": true, "isDefaultGateway": true}
            }),
            portmap(),
        ],
    );
    // What flannel renders from SUBNET_ENV and the delegate above (the
    // runtime then inserts cniVersion and name, as flannel does).
    let flannel_rendered = conflist(
        "cbr0",
        vec![
            json!({
                "type": "bridge",
                "hairpinMode": true,
                "isDefaultGateway": true,
                "ipMasq": false,
                "isGateway": true,
                "mtu": 1450,
                "ipam": {
                    "type": "host-local",
                    "dataDir": dirs.ipam,
                    "ranges": [[{"subnet": "10.244.1.0/24"}]],
                    "routes": [{"dst": "10.244.0.0/16"}]
                }
            }),
            portmap(),
        ],
    );
    Chain {
        key: "flannel",
        title: "kube-flannel: flannel (bridge + host-local) + portmap",
        ifname: "eth0",
        ours: flannel_ours,
        reference: flannel_rendered,
        capability_args: json!({"portMappings": ports})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        note: Some(
            "Debian packages no Go flannel: the reference side runs the chain flannel \
             renders (bridge with hairpin, default gateway, MTU 1450 + host-local on \
             FLANNEL_SUBNET + portmap), so ours pays one process more (flannel itself).",
        ),
    }
}

/// Every binary a conflist runs, delegates included, in order.
pub fn binaries(list: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |name: &str| {
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    };
    let plugins = list.get("plugins").and_then(Value::as_array);
    for plugin in plugins.into_iter().flatten() {
        let ty = plugin.get("type").and_then(Value::as_str).unwrap_or("");
        add(ty);
        if ty == "flannel" {
            let delegate = plugin
                .pointer("/delegate/type")
                .and_then(Value::as_str)
                .unwrap_or("bridge");
            add(delegate);
            add(plugin
                .pointer("/ipam/type")
                .and_then(Value::as_str)
                .unwrap_or("host-local"));
        } else if let Some(ipam) = plugin.pointer("/ipam/type").and_then(Value::as_str) {
            add(ipam);
        }
    }
    out
}

/// The top-level plugin types of a conflist, in chain order.
pub fn plugin_types(list: &Value) -> Vec<String> {
    list.get("plugins")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            p.get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binaries_include_delegates() {
        let p = Path::new("/x");
        let dirs = StateDirs {
            ipam: p,
            flannel: p,
            subnet_env: p,
            dhcp_ours: p,
            dhcp_reference: p,
        };
        let chains = all(&dirs);
        let keys: Vec<&str> = chains.iter().map(|c| c.key).collect();
        assert_eq!(keys, KEYS);
        let flannel = chains.iter().find(|c| c.key == "flannel").unwrap();
        assert_eq!(
            binaries(&flannel.ours),
            ["flannel", "bridge", "host-local", "portmap"]
        );
        assert_eq!(
            binaries(&flannel.reference),
            ["bridge", "host-local", "portmap"]
        );
        let full = chains.iter().find(|c| c.key == "full").unwrap();
        assert_eq!(plugin_types(&full.ours), ["bridge", "portmap", "bandwidth"]);
        assert_eq!(full.ours, full.reference);
        let dhcp = chains.iter().find(|c| c.key == "dhcp").unwrap();
        assert_eq!(binaries(&dhcp.ours), ["macvlan", "dhcp"]);
    }
}
