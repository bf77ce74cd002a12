//! The host-device plugin, black box, in throwaway namespaces. There is no
//! spare physical NIC here, so the device a test hands to a pod is a veth
//! end (its peer in a "LAN" namespace, the other end of the cable) or a
//! macvlan on such a veth: real traffic goes from the pod through the
//! moved device to the LAN. Both are virtual, so they die with a pod
//! namespace that goes; a physical device instead comes back to the root
//! namespace: `a_usb_nic_under_debians_full_kernel` runs the plugin on a
//! real driver's NIC (USB gadget Ethernet over `dummy_hcd`, whose two ends
//! are a real cable) in a VM with Debian's kernel, where that happens.
//!
//! `kernelpath`, `pciBusID` and `runtimeConfig.deviceID` name a device by
//! its sysfs directory. For a veth, `kernelpath` means
//! `/sys/devices/virtual` (every virtual network device hangs there, so it
//! picks the first by name, as Go's does), tested on the node's real
//! sysfs. PCI and auxiliary devices cannot be made here, so the tests run
//! the plugin (ours and Go's, and the runtimes that run it) in a mount
//! namespace where `/sys/bus` and `/sys/devices` are a tree written by the
//! test: PCI devices whose `net/<name>` (or `virtio*/net/<name>`) names a
//! veth of the node, one bound to `vfio-pci` (DPDK: no kernel device), an
//! auxiliary device; the plugin reads those paths exactly as it reads the
//! real ones, and finds the named veth over netlink.
//!
//! Side by side with Debian's Go 1.1.1 host-device: the same result JSON,
//! pod and node state, CHECK and DEL (each deleting what the other made);
//! Go's known failures (a second DEL, DEL after the namespace is gone)
//! asserted as they are. Through go-cni-cri, go-cnitool and our cnitool.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use tests::*;

/// Answers each TCP connection with "<name> <peer address>".
const SERVER: &str = r#"
import socket, sys
name, port = sys.argv[1], int(sys.argv[2])
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(('0.0.0.0', port))
t.listen(16)
print('ready', flush=True)
while True:
    c, a = t.accept()
    c.sendall(('%s %s\n' % (name, a[0])).encode())
    c.close()
"#;

/// Connects and prints the answer; exits non-zero after 5 s without one.
const CLIENT: &str = r#"
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET)
s.settimeout(5)
s.connect((host, port))
print(s.recv(100).decode().strip())
"#;

fn server(ns: &Netns, name: &str, port: u16) -> Listener {
    Listener::start(ns, SERVER, &[name, &port.to_string()])
}

fn connect(ns: &Netns, host: &str, port: u16) -> String {
    python_client(ns, CLIENT, &[host, &port.to_string()])
        .unwrap_or_else(|| panic!("no answer from {host} port {port} to {}", ns.name()))
}

/// A ping from `from` to `ip` is answered: up to three one-ping tries of
/// 2 s each (the first answer ends it).
fn ping(from: &Netns, ip: &str) {
    let mut last = String::new();
    for _ in 0..3 {
        let out = from
            .command("ping")
            .args(["-c1", "-W2", ip])
            .output()
            .expect("ping");
        if out.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    panic!("ping {ip} from {} failed:\n{last}", from.name());
}

/// Where the LAN peer and the pod sit.
const LAN_IP: &str = "10.70.0.1";
const POD_IP: &str = "10.70.0.2";

/// Static IPAM: the pod at 10.70.0.2/24, a route to 192.0.2.0/24 via the LAN.
fn static_ipam() -> Value {
    json!({"type": "static",
           "addresses": [{"address": format!("{POD_IP}/24"), "gateway": LAN_IP}],
           "routes": [{"dst": "192.0.2.0/24"}]})
}

/// `/proc/sys/<key>` in `ns` set to `value`.
fn sysctl(ns: &Netns, key: &str, value: &str) {
    run_ok(
        ns.command("sh")
            .args(["-c", &format!("echo {value} > /proc/sys/{key}")]),
    );
}

/// A node with a LAN namespace to hang stand-in devices on.
struct Site {
    node: Node,
    lan: Netns,
    state: TempDir,
}

impl Site {
    fn new(tag: &str) -> Site {
        let node = Node::new(tag);
        node.ns.ip(&["link", "set", "lo", "up"]);
        // A device that comes back gets no IPv6 link-local address, whose
        // arrival a moment after it comes up would race the snapshots.
        sysctl(&node.ns, "net/ipv6/conf/default/addr_gen_mode", "1");
        let lan = Netns::new(&format!("lan-{tag}"));
        lan.ip(&["link", "set", "lo", "up"]);
        Site {
            node,
            lan,
            state: TempDir::new(&format!("hd-{tag}")),
        }
    }

    /// A veth `name` (MAC `mac`) on the node, its peer `peer` in the LAN,
    /// up there with `lan_ip`/24 when given.
    fn veth(&self, name: &str, mac: &str, peer: &str, lan_ip: Option<&str>) {
        self.node.ns.ip(&[
            "link",
            "add",
            name,
            "address",
            mac,
            "type",
            "veth",
            "peer",
            "name",
            peer,
            "netns",
            self.lan.name(),
        ]);
        self.lan.ip(&["link", "set", peer, "addrgenmode", "none"]);
        if let Some(ip) = lan_ip {
            self.lan
                .ip(&["addr", "add", &format!("{ip}/24"), "dev", peer]);
        }
        self.lan.ip(&["link", "set", peer, "up"]);
    }

    /// A macvlan `name` (MAC `mac`) on the node over `lower`, a veth whose
    /// peer `peer` is in the LAN with `lan_ip`/24.
    fn macvlan(&self, name: &str, mac: &str, lower: &str, peer: &str, lan_ip: &str) {
        self.veth(lower, "0a:58:0a:46:00:f0", peer, Some(lan_ip));
        self.node.ns.ip(&["link", "set", lower, "up"]);
        self.node.ns.ip(&[
            "link", "add", name, "link", lower, "address", mac, "type", "macvlan", "mode", "bridge",
        ]);
    }

    /// One call of `plugin` in the node: `CNI_PATH` our binaries (with
    /// `cni_path` in front when given).
    #[allow(clippy::too_many_arguments)]
    fn call_with(
        &self,
        plugin: &Path,
        cni_path: &str,
        cmd: &str,
        pod: Option<&Netns>,
        ifname: &str,
        cid: &str,
        conf: &Value,
    ) -> PluginOutput {
        let netns = pod
            .map(|p| p.path().display().to_string())
            .unwrap_or_default();
        call_plugin(
            Some(&self.node.ns),
            plugin,
            &[
                ("CNI_COMMAND", cmd),
                ("CNI_CONTAINERID", cid),
                ("CNI_NETNS", &netns),
                ("CNI_IFNAME", ifname),
                ("CNI_PATH", cni_path),
            ],
            &conf.to_string(),
        )
    }

    fn call(&self, cmd: &str, pod: Option<&Netns>, ifname: &str, conf: &Value) -> PluginOutput {
        let path = bin_dir().display().to_string();
        self.call_with(&bin("host-device"), &path, cmd, pod, ifname, "hd-ctr", conf)
    }
}

/// A config of network `net` at 1.1.0 with `keys`.
fn conf(net: &str, keys: Value) -> Value {
    let mut c = json!({"cniVersion": "1.1.0", "name": net, "type": "host-device"});
    merge(&mut c, keys);
    c
}

fn with_prev(conf: &Value, result: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = result.clone();
    c
}

/// A link as the tests compare it: name, kind, MAC, MTU, alias, up.
fn dev(ns: &Netns, name: &str) -> Option<Value> {
    let l = ns.link(name)?;
    Some(json!({
        "name": l["ifname"],
        "kind": l["linkinfo"]["info_kind"],
        "mac": l["address"],
        "mtu": l["mtu"],
        "alias": l.get("ifalias").cloned().unwrap_or(Value::Null),
        "up": l["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "UP")),
    }))
}

/// `dev` with its fields as `json!` gives them.
fn dev_is(ns: &Netns, name: &str, kind: &str, mac: &str, alias: Option<&str>, up: bool) {
    assert_eq!(
        dev(ns, name),
        Some(json!({"name": name, "kind": kind, "mac": mac, "mtu": 1500,
                    "alias": alias, "up": up})),
        "{name} in {}",
        ns.name()
    );
}

// ---- the stand-in sysfs ------------------------------------------------------

/// A `/sys/bus` and `/sys/devices` written by the test, bind-mounted over
/// the real ones (in the private mount namespace each `ip netns exec`
/// makes) by [`FakeSysfs::wrap`]ped commands.
struct FakeSysfs {
    dir: TempDir,
}

/// The PCI bridge the stand-in devices sit behind.
const PCI_PARENT: &str = "devices/pci0000:3a/0000:3a:00.0";

impl FakeSysfs {
    fn new(tag: &str) -> FakeSysfs {
        let dir = TempDir::new(&format!("sysfs-{tag}"));
        for d in [
            "bus/pci/devices",
            "bus/pci/drivers/iavf",
            "bus/pci/drivers/virtio-pci",
            "bus/pci/drivers/vfio-pci",
            "bus/auxiliary/devices",
            PCI_PARENT,
            "devices/virtual/net",
            "bin",
        ] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        FakeSysfs { dir }
    }

    /// PCI device `addr`, bound to `driver`, holding network device
    /// `netdev` in `net/` (or in `virtio3/net/` when `virtio`).
    fn pci(&self, addr: &str, netdev: Option<&str>, virtio: bool, driver: &str) -> &Self {
        let dev = self.dir.path().join(PCI_PARENT).join(addr);
        std::fs::create_dir_all(&dev).unwrap();
        if let Some(n) = netdev {
            let net = if virtio {
                dev.join("virtio3/net")
            } else {
                dev.join("net")
            };
            std::fs::create_dir_all(net.join(n)).unwrap();
        }
        std::os::unix::fs::symlink(
            format!("../../../../bus/pci/drivers/{driver}"),
            dev.join("driver"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            format!("../../../{PCI_PARENT}/{addr}"),
            self.dir.path().join("bus/pci/devices").join(addr),
        )
        .unwrap();
        self
    }

    /// Auxiliary device `name` holding network device `netdev`.
    fn aux(&self, name: &str, netdev: &str) -> &Self {
        let net = self
            .dir
            .path()
            .join("bus/auxiliary/devices")
            .join(name)
            .join("net")
            .join(netdev);
        std::fs::create_dir_all(net).unwrap();
        self
    }

    /// A script that mounts this tree over `/sys/bus` and `/sys/devices`,
    /// then runs `target` with its arguments.
    fn wrap(&self, target: &Path) -> PathBuf {
        let root = self.dir.path().display();
        let name = target.file_name().unwrap().to_str().unwrap();
        let script = format!(
            "#!/bin/sh\nmount --bind '{root}/bus' /sys/bus && \
             mount --bind '{root}/devices' /sys/devices && exec '{}' \"$@\"\n",
            target.display()
        );
        self.dir.write_executable(&format!("bin/{name}"), &script)
    }
}

/// The PCI address of the stand-in VF, its kernel path.
const VF: &str = "0000:3b:02.1";
fn vf_path() -> String {
    format!("/sys/{PCI_PARENT}/{VF}")
}

// ---- VERSION ------------------------------------------------------------------

#[test]
fn host_device_answers_version() {
    let out = call_plugin(None, &bin("host-device"), &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["supportedVersions"],
        json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
}

// ---- traffic through the moved device ---------------------------------------

/// A veth end, then a macvlan on a veth, moved into a pod by name: the pod
/// reaches the LAN peer through it (ping, TCP) and the route IPAM gave;
/// CHECK passes; DEL gives the device back to the node under its name,
/// alias removed, down; a second DEL finds nothing to do and succeeds.
#[test]
fn traffic_through_a_moved_veth_and_a_moved_macvlan() {
    if !require_root("traffic_through_a_moved_veth_and_a_moved_macvlan") {
        return;
    }
    for kind in ["veth", "macvlan"] {
        let site = Site::new(&format!("tr-{kind}"));
        let mac = "0a:58:0a:46:00:02";
        if kind == "veth" {
            site.veth("hd0", mac, "lan0", Some(LAN_IP));
        } else {
            site.macvlan("hd0", mac, "uplink0", "lan0", LAN_IP);
        }
        site.lan.ip(&["addr", "add", "192.0.2.1/32", "dev", "lo"]);
        let before = NetSnapshot::take(&site.node.ns);
        let pod = Netns::new(&format!("pod-tr-{kind}"));
        let c = conf("lan", json!({"device": "hd0", "ipam": static_ipam()}));
        let result = site.call("ADD", Some(&pod), "net1", &c).result();
        assert_eq!(
            result,
            json!({"cniVersion": "1.1.0",
                   "interfaces": [{"name": "net1", "mac": mac, "mtu": 1500,
                                   "sandbox": pod.path()}],
                   "ips": [{"interface": 0, "address": format!("{POD_IP}/24"), "gateway": LAN_IP}],
                   "routes": [{"dst": "192.0.2.0/24"}],
                   "dns": {}}),
            "{kind}"
        );
        assert!(
            site.node.ns.link("hd0").is_none(),
            "{kind}: hd0 still on the node"
        );
        dev_is(&pod, "net1", kind, mac, Some("hd0"), true);
        assert_eq!(global_addrs(&pod, "net1"), [format!("{POD_IP}/24")]);
        let routes = pod.ip(&["route", "show"]);
        assert!(
            routes.contains(&format!("192.0.2.0/24 via {LAN_IP} dev net1")),
            "{kind}: {routes}"
        );
        ping(&pod, LAN_IP);
        ping(&pod, "192.0.2.1");
        let _l = server(&site.lan, "lan", 7000);
        assert_eq!(
            connect(&pod, LAN_IP, 7000),
            format!("lan {POD_IP}"),
            "{kind}"
        );
        site.call("CHECK", Some(&pod), "net1", &with_prev(&c, &result))
            .assert_silent_ok();

        site.call("DEL", Some(&pod), "net1", &c).assert_silent_ok();
        assert!(pod.link("net1").is_none(), "{kind}: net1 left in the pod");
        dev_is(&site.node.ns, "hd0", kind, mac, None, false);
        let after = NetSnapshot::take(&site.node.ns);
        assert_eq!(
            after.diff(&before),
            Vec::<String>::new(),
            "{kind}: the node"
        );
        // Go's second DEL fails ("Link not found"); ours has nothing to do.
        site.call("DEL", Some(&pod), "net1", &c).assert_silent_ok();
        site.call("DEL", None, "net1", &c).assert_silent_ok();
        assert_eq!(
            NetSnapshot::take(&site.node.ns),
            after,
            "{kind}: a second DEL changed the node"
        );
        // The device serves the next pod.
        let pod2 = Netns::new(&format!("pod2-tr-{kind}"));
        site.call("ADD", Some(&pod2), "eth0", &c).result();
        ping(&pod2, LAN_IP);
        site.call("DEL", Some(&pod2), "eth0", &c).assert_silent_ok();
        dev_is(&site.node.ns, "hd0", kind, mac, None, false);
    }
}

/// Layer 2 only (no IPAM): the device just comes up in the pod, every
/// version's result shape (none below 0.3.0, so an error there); IPv4 and IPv6 (host-local, dual stack) with
/// the IPAM plugin's DNS kept when the config has none.
#[test]
fn layer_2_only_every_version_and_dual_stack() {
    if !require_root("layer_2_only_every_version_and_dual_stack") {
        return;
    }
    let site = Site::new("l2");
    let mac = "0a:58:0a:46:00:03";
    site.veth("hd0", mac, "lan0", Some(LAN_IP));
    site.lan
        .ip(&["-6", "addr", "add", "fd70::1/64", "dev", "lan0", "nodad"]);
    for version in [
        "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
    ] {
        let pod = Netns::new("pod-l2");
        let mut c = conf("l2", json!({"hwaddr": mac.to_uppercase()}));
        c["cniVersion"] = json!(version);
        if matches!(version, "0.1.0" | "0.2.0") {
            // A result without an address has no shape there: refused,
            // with the device left on the node (Go's stays in the pod).
            site.call("ADD", Some(&pod), "net1", &c)
                .assert_error(1, "cannot convert: no valid IP addresses");
            assert!(pod.link("net1").is_none(), "{version}");
            dev_is(&site.node.ns, "hd0", "veth", mac, None, false);
            continue;
        }
        let r = site.call("ADD", Some(&pod), "net1", &c).result();
        let want = match version {
            "1.0.0" | "1.1.0" => json!({"cniVersion": version, "dns": {},
                              "interfaces": [{"name": "net1", "mac": mac, "mtu": 1500,
                                              "sandbox": pod.path()}]}),
            _ => json!({"cniVersion": version, "dns": {},
                        "interfaces": [{"name": "net1", "mac": mac, "sandbox": pod.path()}]}),
        };
        assert_eq!(r, want, "{version}");
        dev_is(&pod, "net1", "veth", mac, Some("hd0"), true);
        site.call("DEL", Some(&pod), "net1", &c).assert_silent_ok();
        dev_is(&site.node.ns, "hd0", "veth", mac, None, false);
    }
    let pod = Netns::new("pod-l2-v6");
    let leases = site.state.path().join("leases");
    let resolv = site
        .state
        .write("resolv.conf", "nameserver 10.70.0.53\nsearch lan\n");
    let c = conf(
        "dual",
        json!({"device": "hd0", "ipam": {
        "type": "host-local", "dataDir": leases, "resolvConf": resolv,
        "ranges": [[{"subnet": "10.70.0.0/24", "rangeStart": "10.70.0.20"}],
                   [{"subnet": "fd70::/64", "rangeStart": "fd70::20"}]]}}),
    );
    let r = site.call("ADD", Some(&pod), "net1", &c).result();
    assert_eq!(
        r["ips"],
        json!([{"interface": 0, "address": "10.70.0.20/24", "gateway": "10.70.0.1"},
               {"interface": 0, "address": "fd70::20/64", "gateway": "fd70::1"}])
    );
    // Go's host-device drops the IPAM plugin's DNS for the config's (none).
    assert_eq!(
        r["dns"],
        json!({"nameservers": ["10.70.0.53"], "search": ["lan"]})
    );
    ping(&pod, LAN_IP);
    ping(&pod, "fd70::1");
    site.call("CHECK", Some(&pod), "net1", &with_prev(&c, &r))
        .assert_silent_ok();
    site.call("DEL", Some(&pod), "net1", &c).assert_silent_ok();
    assert_eq!(leases_in(&leases.join("dual")), Vec::<String>::new());
    dev_is(&site.node.ns, "hd0", "veth", mac, None, false);
}
