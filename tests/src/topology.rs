//! Namespaces wired to a node: forwarding nodes and veth peers.

use crate::{run_ok, Netns};

/// A node namespace that forwards (IPv4 and IPv6), with loopback up.
pub fn forwarding_node(tag: &str) -> Netns {
    let node = Netns::new(&format!("node-{tag}"));
    node.ip(&["link", "set", "lo", "up"]);
    run_ok(node.command("sh").args([
        "-c",
        "echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > /proc/sys/net/ipv6/conf/all/forwarding",
    ]));
    node
}

/// A namespace joined to the node by a veth pair: `eth0` inside, `v<idx>`
/// on the node, `10.<idx>.0.0/24` and `fd00:<idx>::/64` with the node at .1
/// and the peer at .2, default routes via the node.
pub struct Peer {
    pub ns: Netns,
    pub idx: u8,
}

impl Peer {
    pub fn attach(node: &Netns, tag: &str, idx: u8) -> Peer {
        let ns = Netns::new(tag);
        let nif = format!("v{idx}");
        node.ip(&[
            "link",
            "add",
            &nif,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns.name(),
        ]);
        node.ip(&["addr", "add", &format!("10.{idx}.0.1/24"), "dev", &nif]);
        node.ip(&[
            "-6",
            "addr",
            "add",
            &format!("fd00:{idx}::1/64"),
            "dev",
            &nif,
            "nodad",
        ]);
        node.ip(&["link", "set", &nif, "up"]);
        ns.ip(&["addr", "add", &format!("10.{idx}.0.2/24"), "dev", "eth0"]);
        ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("fd00:{idx}::2/64"),
            "dev",
            "eth0",
            "nodad",
        ]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["link", "set", "lo", "up"]);
        ns.ip(&["route", "add", "default", "via", &format!("10.{idx}.0.1")]);
        ns.ip(&[
            "-6",
            "route",
            "add",
            "default",
            "via",
            &format!("fd00:{idx}::1"),
        ]);
        Peer { ns, idx }
    }

    pub fn v4(&self) -> String {
        format!("10.{}.0.2", self.idx)
    }

    pub fn v6(&self) -> String {
        format!("fd00:{}::2", self.idx)
    }

    pub fn node_v4(&self) -> String {
        format!("10.{}.0.1", self.idx)
    }

    pub fn node_v6(&self) -> String {
        format!("fd00:{}::1", self.idx)
    }

    /// The namespace path as a string, what `CNI_NETNS` carries.
    pub fn netns(&self) -> String {
        self.ns.path().to_str().expect("utf8").to_string()
    }
}
