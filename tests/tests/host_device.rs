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
use tests::*;

/// Where the LAN peer and the pod sit.
const LAN_IP: &str = "10.70.0.1";
const POD_IP: &str = "10.70.0.2";

/// Static IPAM: the pod at 10.70.0.2/24, a route to 192.0.2.0/24 via the LAN.
fn static_ipam() -> Value {
    json!({"type": "static",
           "addresses": [{"address": format!("{POD_IP}/24"), "gateway": LAN_IP}],
           "routes": [{"dst": "192.0.2.0/24"}]})
}

/// [`static_ipam`] with the route's gateway written out.
fn static_ipam_gw() -> Value {
    let mut v = static_ipam();
    v["routes"][0]["gw"] = json!(LAN_IP);
    v
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

/// Waits (bounded) until the kernel's link watch has given `name` in `ns`,
/// when up, its carrier and qdisc: that runs a moment after a link comes
/// up, and snapshots hold qdiscs.
fn settled(ns: &Netns, name: &str) {
    wait_for(&format!("{name}'s qdisc in {}", ns.name()), || {
        ns.link(name).is_some_and(|l| {
            let flags = l["flags"].as_array().cloned().unwrap_or_default();
            !flags.iter().any(|x| x == "UP")
                || (flags.iter().any(|x| x == "LOWER_UP") && l["qdisc"] == "noqueue")
        })
    });
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
        // One script per target (ours and Go's share a file name).
        let name = target.display().to_string().replace('/', "_");
        let script = format!(
            "#!/bin/sh\nmount --bind '{root}/bus' /sys/bus && \
             mount --bind '{root}/devices' /sys/devices && exec '{}' \"$@\"\n",
            target.display()
        );
        self.dir.write_executable(&format!("bin/{name}"), &script)
    }
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
        assert_ping(&pod, LAN_IP);
        assert_ping(&pod, "192.0.2.1");
        let _l = echo_server(&site.lan, "lan", 7000);
        assert_eq!(
            ask_ok(&pod, LAN_IP, 7000),
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
        assert_ping(&pod2, LAN_IP);
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
    assert_ping(&pod, LAN_IP);
    assert_ping(&pod, "fd70::1");
    site.call("CHECK", Some(&pod), "net1", &with_prev(&c, &r))
        .assert_silent_ok();
    site.call("DEL", Some(&pod), "net1", &c).assert_silent_ok();
    assert_eq!(leases_in(&leases.join("dual")), Vec::<String>::new());
    dev_is(&site.node.ns, "hd0", "veth", mac, None, false);
}

// ---- every way of naming the device ----------------------------------------

/// A node with stand-in VFs `vf0`..`vf4` (veths, MACs `0a:58:0a:46:01:0N`)
/// and the stand-in sysfs: `0000:3b:02.N` holds `vfN` (`.3` as a virtio
/// NIC), `0000:3b:02.9` is bound to vfio-pci, auxiliary device
/// `mlx5_core.sf.4` holds `vf4`.
fn vf_site(tag: &str) -> (Site, FakeSysfs) {
    let site = Site::new(tag);
    for n in 0..5 {
        site.veth(
            &format!("vf{n}"),
            &format!("0a:58:0a:46:01:0{n}"),
            &format!("lan{n}"),
            None,
        );
    }
    let sys = FakeSysfs::new(tag);
    for n in 0..4 {
        sys.pci(
            &format!("0000:3b:02.{n}"),
            Some(&format!("vf{n}")),
            n == 3,
            "iavf",
        );
    }
    sys.pci("0000:3b:02.9", None, false, "vfio-pci")
        .aux("mlx5_core.sf.4", "vf4");
    (site, sys)
}

/// Each key names its device, in Go's precedence, read from sysfs where
/// it is a sysfs key; DEL gives each back. The result carries the PCI
/// address (`pciID`, 1.1.0) when a PCI address named the device.
#[test]
fn every_way_of_naming_the_device() {
    if !require_root("every_way_of_naming_the_device") {
        return;
    }
    let (site, sys) = vf_site("names");
    let plugin = sys.wrap(&bin("host-device"));
    let path = bin_dir().display().to_string();
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"device": "vf1"}), "vf1", ""),
        (json!({"hwaddr": "0a:58:0a:46:01:02"}), "vf2", ""),
        (json!({"hwaddr": "0a58.0a46.0100"}), "vf0", ""),
        (
            json!({"kernelpath": format!("/sys/{PCI_PARENT}/0000:3b:02.2")}),
            "vf2",
            "",
        ),
        (json!({"pciBusID": "0000:3b:02.1"}), "vf1", "0000:3b:02.1"),
        (json!({"pciBusID": "0000:3b:02.3"}), "vf3", "0000:3b:02.3"),
        (
            json!({"runtimeConfig": {"deviceID": "0000:3b:02.0"}}),
            "vf0",
            "0000:3b:02.0",
        ),
        // deviceID overrides pciBusID.
        (
            json!({"pciBusID": "0000:3b:02.1", "runtimeConfig": {"deviceID": "0000:3b:02.2"}}),
            "vf2",
            "0000:3b:02.2",
        ),
        (
            json!({"runtimeConfig": {"deviceID": "mlx5_core.sf.4"}}),
            "vf4",
            "",
        ),
        // device over hwaddr over kernelpath over pciBusID.
        (
            json!({"device": "vf3", "hwaddr": "0a:58:0a:46:01:01", "pciBusID": "0000:3b:02.2"}),
            "vf3",
            "",
        ),
        (
            json!({"hwaddr": "0a:58:0a:46:01:01", "kernelpath": format!("/sys/{PCI_PARENT}/0000:3b:02.2")}),
            "vf1",
            "",
        ),
    ];
    for (keys, want, pci) in cases {
        let pod = Netns::new("pod-names");
        let c = conf("vf", keys.clone());
        let r = site
            .call_with(&plugin, &path, "ADD", Some(&pod), "net1", "c-names", &c)
            .result();
        let n = want.trim_start_matches("vf");
        let mac = format!("0a:58:0a:46:01:0{n}");
        let mut iface = json!({"name": "net1", "mac": mac, "mtu": 1500, "sandbox": pod.path()});
        if !pci.is_empty() {
            iface["pciID"] = json!(pci);
        }
        assert_eq!(r["interfaces"], json!([iface]), "{keys}");
        dev_is(&pod, "net1", "veth", &mac, Some(want), true);
        assert!(site.node.ns.link(want).is_none(), "{keys}");
        site.call_with(
            &plugin,
            &path,
            "CHECK",
            Some(&pod),
            "net1",
            "c-names",
            &with_prev(&c, &r),
        )
        .assert_silent_ok();
        site.call_with(&plugin, &path, "DEL", Some(&pod), "net1", "c-names", &c)
            .assert_silent_ok();
        dev_is(&site.node.ns, want, "veth", &mac, None, false);
    }
}

/// DPDK: a PCI device bound to vfio-pci has no kernel network device;
/// nothing is moved, IPAM's addresses are reported on the interface (for
/// the DPDK application), CHECK and DEL have nothing to look at.
#[test]
fn dpdk_devices_are_reported_not_moved() {
    if !require_root("dpdk_devices_are_reported_not_moved") {
        return;
    }
    let (site, sys) = vf_site("dpdk");
    let plugin = sys.wrap(&bin("host-device"));
    let path = bin_dir().display().to_string();
    let pod = Netns::new("pod-dpdk");
    let before = (
        NetSnapshot::take(&site.node.ns),
        NetSnapshot::take_with(&pod, false),
    );
    for keys in [
        json!({"pciBusID": "0000:3b:02.9", "ipam": static_ipam()}),
        json!({"runtimeConfig": {"deviceID": "0000:3b:02.9"}, "ipam": static_ipam()}),
        // A `device` still wins the lookup, but there is none to look up.
        json!({"device": "vf0", "pciBusID": "0000:3b:02.9", "ipam": static_ipam()}),
    ] {
        let c = conf("dpdk", keys.clone());
        let r = site
            .call_with(&plugin, &path, "ADD", Some(&pod), "net1", "c-dpdk", &c)
            .result();
        assert_eq!(
            r,
            json!({"cniVersion": "1.1.0",
                   "interfaces": [{"name": "net1", "sandbox": pod.path(), "pciID": "0000:3b:02.9"}],
                   "ips": [{"interface": 0, "address": format!("{POD_IP}/24"), "gateway": LAN_IP}],
                   "routes": [{"dst": "192.0.2.0/24"}],
                   "dns": {}}),
            "{keys}"
        );
        let now = (
            NetSnapshot::take(&site.node.ns),
            NetSnapshot::take_with(&pod, false),
        );
        assert_eq!(now, before, "{keys}: DPDK moved something");
        // A DPDK device has no kernel network to carry along.
        let mut own = c.clone();
        own["useInterfaceNetwork"] = json!(true);
        site.call_with(&plugin, &path, "ADD", Some(&pod), "net1", "c-dpdk2", &own)
            .assert_error(
                7,
                "useInterfaceNetwork: not supported for a DPDK-bound device",
            );
        site.call_with(
            &plugin,
            &path,
            "CHECK",
            Some(&pod),
            "net1",
            "c-dpdk",
            &with_prev(&c, &r),
        )
        .assert_silent_ok();
        site.call_with(&plugin, &path, "DEL", Some(&pod), "net1", "c-dpdk", &c)
            .assert_silent_ok();
        site.call_with(&plugin, &path, "STATUS", None, "", "", &c)
            .assert_silent_ok();
    }
}

/// `kernelpath` on the node's real sysfs: a veth's device directory is
/// `/sys/devices/virtual/net/<name>`, so the kernel path that holds it is
/// `/sys/devices/virtual`, whose `net` lists every virtual device of the
/// node; the first by name is taken, as Go's does (here the stand-in,
/// which sorts before `lo`).
#[test]
fn kernelpath_of_a_virtual_device_on_the_real_sysfs() {
    if !require_root("kernelpath_of_a_virtual_device_on_the_real_sysfs") {
        return;
    }
    let site = Site::new("kpath");
    let mac = "0a:58:0a:46:02:01";
    site.veth("hdk0", mac, "lan0", Some(LAN_IP));
    let listed = run_ok(site.node.ns.command("ls").arg("/sys/devices/virtual/net"));
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "hdk0\nlo\n");
    let pod = Netns::new("pod-kpath");
    let c = conf(
        "kp",
        json!({"kernelpath": "/sys/devices/virtual", "ipam": static_ipam()}),
    );
    let r = site.call("ADD", Some(&pod), "net1", &c).result();
    assert_eq!(r["interfaces"][0]["mac"], mac);
    dev_is(&pod, "net1", "veth", mac, Some("hdk0"), true);
    assert_ping(&pod, LAN_IP);
    // With hdk0 gone from the node, the first is lo, which the node uses.
    let pod2 = Netns::new("pod2-kpath");
    site.call("ADD", Some(&pod2), "net1", &c).assert_error(
        7,
        "kernelpath: \"lo\" is in use on the node: it carries 127.0.0.1/8, ::1/128",
    );
    site.call("DEL", Some(&pod), "net1", &c).assert_silent_ok();
    dev_is(&site.node.ns, "hdk0", "veth", mac, None, false);
}

// ---- failures leave the node as it was --------------------------------------

/// An IPAM plugin that logs each verb to `$LOG` and fails ADD (code 11).
const FAILING_IPAM: &str = r#"#!/bin/sh
echo "$CNI_COMMAND" >> "$(dirname "$0")/log"
if [ "$CNI_COMMAND" = ADD ]; then
  echo '{"cniVersion":"1.1.0","code":11,"msg":"no address today"}'
  exit 1
fi
"#;

/// A failed ADD, at each step after the move (IPAM ADD, the addresses or
/// routes in the pod, a bad CNI_ARGS for host-local), puts the device back
/// on the node under its name with its own alias and up state, and a
/// failed IPAM ADD gets its DEL. A device in use on the node, missing, or
/// one the kernel keeps in its namespace is refused before anything moves.
#[test]
fn failed_adds_put_the_device_back() {
    if !require_root("failed_adds_put_the_device_back") {
        return;
    }
    let site = Site::new("fail");
    let mac = "0a:58:0a:46:03:01";
    site.veth("hd0", mac, "lan0", Some(LAN_IP));
    site.node
        .ns
        .ip(&["link", "set", "hd0", "alias", "spare port 3"]);
    let scripts = TempDir::new("fail-ipam");
    scripts.write_executable("fail-ipam", FAILING_IPAM);
    let path = format!("{}:{}", scripts.path().display(), bin_dir().display());
    let pod = Netns::new("pod-fail");
    let before = (
        NetSnapshot::take(&site.node.ns),
        NetSnapshot::take_with(&pod, false),
    );
    let unreachable = json!({"type": "static",
        "addresses": [{"address": format!("{POD_IP}/24")}],
        "routes": [{"dst": "192.0.2.0/24", "gw": "10.99.0.1"}]});
    let leases = site.state.path().join("leases");
    let host_local = json!({"type": "host-local", "dataDir": leases,
                            "ranges": [[{"subnet": "10.70.0.0/24"}]]});
    // Down first: a device never up has no qdisc yet, as after a move.
    for (up, ipam, env_args, code, needle) in [
        (
            false,
            json!({"type": "fail-ipam"}),
            "",
            11,
            "no address today",
        ),
        (
            true,
            json!({"type": "fail-ipam"}),
            "",
            11,
            "no address today",
        ),
        (true, unreachable.clone(), "", 100, "192.0.2.0/24"),
        (true, host_local, "IP=10.70.9.9", 4, "CNI_ARGS IP=10.70.9.9"),
    ] {
        site.node
            .ns
            .ip(&["link", "set", "hd0", if up { "up" } else { "down" }]);
        settled(&site.node.ns, "hd0");
        let state = (
            NetSnapshot::take(&site.node.ns),
            NetSnapshot::take_with(&pod, false),
        );
        let c = conf("fail", json!({"device": "hd0", "ipam": ipam}));
        let netns = pod.path().display().to_string();
        let out = call_plugin(
            Some(&site.node.ns),
            &bin("host-device"),
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c-fail"),
                ("CNI_NETNS", &netns),
                ("CNI_IFNAME", "net1"),
                ("CNI_PATH", &path),
                ("CNI_ARGS", env_args),
            ],
            &c.to_string(),
        );
        out.assert_error(code, needle);
        dev_is(&site.node.ns, "hd0", "veth", mac, Some("spare port 3"), up);
        settled(&site.node.ns, "hd0");
        let now = (
            NetSnapshot::take(&site.node.ns),
            NetSnapshot::take_with(&pod, false),
        );
        assert_eq!(now, state, "{}: the node or the pod changed", out.stdout);
    }
    assert_eq!(
        std::fs::read_to_string(scripts.path().join("log")).unwrap(),
        "ADD\nDEL\nADD\nDEL\n"
    );
    assert_eq!(leases_in(&leases.join("fail")), Vec::<String>::new());

    // Refused before anything moves.
    site.node.ns.ip(&["link", "add", "br0", "type", "bridge"]);
    site.veth("port0", "0a:58:0a:46:03:02", "lan1", None);
    site.node.ns.ip(&["link", "set", "port0", "master", "br0"]);
    site.veth("used0", "0a:58:0a:46:03:03", "lan2", None);
    site.node
        .ns
        .ip(&["addr", "add", "10.80.0.1/24", "dev", "used0"]);
    site.veth("used6", "0a:58:0a:46:03:04", "lan3", None);
    site.node
        .ns
        .ip(&["-6", "addr", "add", "fd80::1/64", "dev", "used6", "nodad"]);
    site.veth("ll0", "0a:58:0a:46:03:05", "lan4", None);
    site.node
        .ns
        .ip(&["-6", "addr", "add", "fe80::5/64", "dev", "ll0", "nodad"]);
    let refused = (
        NetSnapshot::take(&site.node.ns),
        NetSnapshot::take_with(&pod, false),
    );
    for (keys, needle) in [
        (
            json!({"device": "port0"}),
            "device: \"port0\" is in use on the node: it is a port of \"br0\" (bridge)",
        ),
        (
            json!({"hwaddr": "0a:58:0a:46:03:03"}),
            "hwaddr: \"used0\" is in use on the node: it carries 10.80.0.1/24",
        ),
        (
            json!({"device": "used6"}),
            "device: \"used6\" is in use on the node: it carries fd80::1/64",
        ),
        (
            json!({"device": "br0"}),
            "device: \"br0\" cannot leave the node's network namespace",
        ),
        (
            json!({"device": "lo"}),
            "device: \"lo\" is in use on the node",
        ),
        (
            json!({"device": "nosuch0"}),
            "device: \"nosuch0\" not found in the node's network namespace",
        ),
        (
            json!({"hwaddr": "0a:58:0a:46:03:ff"}),
            "hwaddr: no link with hardware address 0a:58:0a:46:03:ff",
        ),
        (
            json!({"kernelpath": "/sys/devices/virtual/nosuch"}),
            "kernelpath: cannot read /sys/devices/virtual/nosuch/net",
        ),
        (
            json!({"pciBusID": "0000:ff:1f.7"}),
            "pciBusID: no PCI device \"0000:ff:1f.7\"",
        ),
        (
            json!({"runtimeConfig": {"deviceID": "0000:ff:1f.7"}}),
            "runtimeConfig.deviceID: \"0000:ff:1f.7\" is neither",
        ),
    ] {
        let c = conf("refused", keys.clone());
        site.call("ADD", Some(&pod), "net1", &c)
            .assert_error(7, needle);
        let now = (
            NetSnapshot::take(&site.node.ns),
            NetSnapshot::take_with(&pod, false),
        );
        assert_eq!(now, refused, "{keys}: the node or the pod changed");
    }
    // An IPv6 link-local address is no use of the device: it moves.
    let c = conf("ll", json!({"device": "ll0"}));
    site.call("ADD", Some(&pod), "net1", &c).result();
    site.call("DEL", Some(&pod), "net1", &c).assert_silent_ok();
    assert_eq!(before.1, NetSnapshot::take_with(&pod, false));
}

// ---- DEL after the namespace is gone, the kernel's return, GC -----------------

/// What the kernel does with a physical device whose pod namespace dies
/// (moves it to the root namespace under its pod name, or `dev<N>` when
/// that is taken, alias kept), done by hand for a veth, which the kernel
/// would delete instead: `name` in `pod` goes to the node as `as_name`,
/// then the pod namespace goes.
fn kernel_returns(site: &Site, pod: Netns, name: &str, as_name: &str) {
    let node = site.node.ns.name().to_string();
    pod.ip(&["link", "set", name, "netns", &node, "name", as_name]);
    drop(pod);
}

/// DEL once the namespace is gone: a veth or a macvlan died with it
/// (nothing to do, the lease released); a device the kernel gave back to
/// the node under its pod name gets its node name back. Go's DEL fails on
/// both ("failed to open netns") and keeps the lease.
#[test]
fn del_after_the_namespace_is_gone() {
    if !require_root("del_after_the_namespace_is_gone") {
        return;
    }
    let site = Site::new("gone");
    site.veth("hd0", "0a:58:0a:46:04:01", "lan0", Some(LAN_IP));
    site.macvlan("hdmv0", "0a:58:0a:46:04:02", "uplink0", "lan1", "10.71.0.1");
    let leases = site.state.path().join("leases");
    let ipam = json!({"type": "host-local", "dataDir": leases,
                      "ranges": [[{"subnet": "10.70.0.0/24"}]]});
    for (dev, ifname) in [("hd0", "net1"), ("hdmv0", "eth0")] {
        let c = conf("gone", json!({"device": dev, "ipam": ipam}));
        let pod = Netns::new("pod-gone");
        let path = pod.path();
        site.call("ADD", Some(&pod), ifname, &c).result();
        assert_eq!(leases_in(&leases.join("gone")).len(), 1);
        drop(pod);
        wait_for("the pod's devices to go", || {
            site.node.ns.link(dev).is_none()
        });
        let out = call_plugin(
            Some(&site.node.ns),
            &bin("host-device"),
            &[
                ("CNI_COMMAND", "DEL"),
                ("CNI_CONTAINERID", "hd-ctr"),
                ("CNI_NETNS", path.to_str().unwrap()),
                ("CNI_IFNAME", ifname),
                ("CNI_PATH", bin_dir().to_str().unwrap()),
            ],
            &c.to_string(),
        );
        out.assert_silent_ok();
        assert_eq!(
            leases_in(&leases.join("gone")),
            Vec::<String>::new(),
            "{dev}"
        );
        // An empty CNI_NETNS (containerd, the sandbox gone) too.
        site.call("DEL", None, ifname, &c).assert_silent_ok();
    }
    // The kernel's return of a physical device: under its pod name, and
    // under dev<N> when that name is taken on the node.
    site.veth("hd1", "0a:58:0a:46:04:03", "lan2", None);
    site.veth("hd2", "0a:58:0a:46:04:04", "lan3", None);
    for (keys, name, back_as) in [
        (json!({"device": "hd1"}), "hd1", "net1"),
        (json!({"hwaddr": "0a:58:0a:46:04:04"}), "hd2", "dev77"),
    ] {
        let c = conf("ret", keys.clone());
        let pod = Netns::new("pod-ret");
        site.call("ADD", Some(&pod), "net1", &c).result();
        kernel_returns(&site, pod, "net1", back_as);
        let mac = dev(&site.node.ns, back_as).unwrap()["mac"].clone();
        dev_is(
            &site.node.ns,
            back_as,
            "veth",
            mac.as_str().unwrap(),
            Some(name),
            false,
        );
        let out = site.call_with(
            &bin("host-device"),
            bin_dir().to_str().unwrap(),
            "DEL",
            None,
            "net1",
            "hd-ctr",
            &c,
        );
        out.assert_silent_ok();
        dev_is(
            &site.node.ns,
            name,
            "veth",
            mac.as_str().unwrap(),
            None,
            false,
        );
        assert!(site.node.ns.link(back_as).is_none(), "{keys}");
    }
    // Go's DEL, on a namespace that is gone.
    let Some(go) = go_plugin("host-device") else {
        return;
    };
    site.veth("hd3", "0a:58:0a:46:04:05", "lan4", None);
    let mut c = conf("gone", json!({"device": "hd3", "ipam": ipam}));
    c["cniVersion"] = json!("1.0.0");
    let pod = Netns::new("pod-gone-go");
    let path = pod.path();
    site.call_with(&go, GO_PLUGIN_DIR, "ADD", Some(&pod), "net1", "go-ctr", &c)
        .result();
    drop(pod);
    wait_for("the pod's veth to go", || {
        site.node.ns.link("hd3").is_none()
    });
    let out = call_plugin(
        Some(&site.node.ns),
        &go,
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "go-ctr"),
            ("CNI_NETNS", path.to_str().unwrap()),
            ("CNI_IFNAME", "net1"),
            ("CNI_PATH", GO_PLUGIN_DIR),
        ],
        &c.to_string(),
    );
    out.assert_error(999, "failed to open netns");
    // The lease stays; ours releases it.
    assert_eq!(leases_in(&leases.join("gone")).len(), 1);
    let out = call_plugin(
        Some(&site.node.ns),
        &bin("host-device"),
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "go-ctr"),
            ("CNI_NETNS", path.to_str().unwrap()),
            ("CNI_IFNAME", "net1"),
            ("CNI_PATH", bin_dir().to_str().unwrap()),
        ],
        &c.to_string(),
    );
    out.assert_silent_ok();
    assert_eq!(leases_in(&leases.join("gone")), Vec::<String>::new());
}

/// GC gives a device the kernel returned to the node (under a pod name or
/// `dev<N>`, its alias naming its node name) its name back when no DEL
/// did, and leaves alone a device whose alias is the admin's; then it is
/// IPAM's GC (host-local's leases of no valid attachment go).
#[test]
fn gc_gives_returned_devices_their_names_back() {
    if !require_root("gc_gives_returned_devices_their_names_back") {
        return;
    }
    let site = Site::new("gc");
    site.veth("hd0", "0a:58:0a:46:05:01", "lan0", None);
    site.veth("hd1", "0a:58:0a:46:05:02", "lan1", None);
    // An admin's alias on a device named by hwaddr: not the kernel's return.
    site.veth("ens9", "0a:58:0a:46:05:03", "lan2", None);
    site.node.ns.ip(&["link", "set", "ens9", "alias", "uplink"]);
    let leases = site.state.path().join("leases");
    let ipam = json!({"type": "host-local", "dataDir": leases,
                      "ranges": [[{"subnet": "10.70.0.0/24"}]]});
    let by_name = conf("gcnet", json!({"device": "hd0", "ipam": ipam}));
    let pod = Netns::new("pod-gc");
    site.call("ADD", Some(&pod), "net1", &by_name).result();
    kernel_returns(&site, pod, "net1", "net1");
    let by_mac = conf("gcmac", json!({"hwaddr": "0a:58:0a:46:05:02"}));
    let pod = Netns::new("pod-gc2");
    site.call("ADD", Some(&pod), "eth3", &by_mac).result();
    kernel_returns(&site, pod, "eth3", "dev42");
    // Named by an altname, which the device keeps wherever it goes.
    site.veth("hd5", "0a:58:0a:46:05:05", "lan5", None);
    site.node.ns.ip(&[
        "link",
        "property",
        "add",
        "dev",
        "hd5",
        "altname",
        "sriov-vf-a",
    ]);
    let by_alt = conf("gcalt", json!({"device": "sriov-vf-a"}));
    let pod = Netns::new("pod-gc3");
    site.call("ADD", Some(&pod), "net7", &by_alt).result();
    dev_is(&pod, "net7", "veth", "0a:58:0a:46:05:05", Some("hd5"), true);
    kernel_returns(&site, pod, "net7", "net7");
    let admin = conf("gcadmin", json!({"hwaddr": "0a:58:0a:46:05:03"}));
    assert_eq!(leases_in(&leases.join("gcnet")).len(), 1);

    let gc = |c: &Value| {
        let mut c = c.clone();
        c["cni.dev/valid-attachments"] = json!([]);
        site.call("GC", None, "", &c).assert_silent_ok();
    };
    gc(&by_name);
    dev_is(
        &site.node.ns,
        "hd0",
        "veth",
        "0a:58:0a:46:05:01",
        None,
        false,
    );
    assert!(site.node.ns.link("net1").is_none());
    assert_eq!(leases_in(&leases.join("gcnet")), Vec::<String>::new());
    gc(&by_mac);
    dev_is(
        &site.node.ns,
        "hd1",
        "veth",
        "0a:58:0a:46:05:02",
        None,
        false,
    );
    gc(&by_alt);
    dev_is(
        &site.node.ns,
        "hd5",
        "veth",
        "0a:58:0a:46:05:05",
        None,
        false,
    );
    assert!(site.node.ns.link("net7").is_none());
    let before = NetSnapshot::take(&site.node.ns);
    gc(&admin);
    gc(&by_name);
    assert_eq!(NetSnapshot::take(&site.node.ns), before);
    dev_is(
        &site.node.ns,
        "ens9",
        "veth",
        "0a:58:0a:46:05:03",
        Some("uplink"),
        false,
    );
}

/// STATUS: ADD can be served while the device is on the node and free;
/// once a pod has it, or when the node uses it, code 50 naming the key.
/// IPAM's STATUS is asked too.
#[test]
fn status_says_whether_the_device_can_be_had() {
    if !require_root("status_says_whether_the_device_can_be_had") {
        return;
    }
    let site = Site::new("status");
    site.veth("hd0", "0a:58:0a:46:06:01", "lan0", None);
    let c = conf("st", json!({"device": "hd0", "ipam": static_ipam()}));
    site.call("STATUS", None, "", &c).assert_silent_ok();
    let pod = Netns::new("pod-status");
    site.call("ADD", Some(&pod), "net1", &c).result();
    site.call("STATUS", None, "", &c).assert_error(
        50,
        "device: \"hd0\" not found in the node's network namespace",
    );
    site.call("DEL", Some(&pod), "net1", &c).assert_silent_ok();
    site.call("STATUS", None, "", &c).assert_silent_ok();
    site.node
        .ns
        .ip(&["addr", "add", "10.80.0.1/24", "dev", "hd0"]);
    site.call("STATUS", None, "", &c).assert_error(
        50,
        "device: \"hd0\" is in use on the node: it carries 10.80.0.1/24",
    );
    site.node.ns.ip(&["addr", "flush", "dev", "hd0"]);
    let by_mac = conf("st", json!({"hwaddr": "0a:58:0a:46:06:09"}));
    site.call("STATUS", None, "", &by_mac).assert_error(
        50,
        "hwaddr: no link with hardware address 0a:58:0a:46:06:09",
    );
    // IPAM's answer: a missing IPAM plugin.
    let no_ipam = conf(
        "st",
        json!({"device": "hd0", "ipam": {"type": "no-such-ipam"}}),
    );
    site.call("STATUS", None, "", &no_ipam)
        .assert_error(101, "no-such-ipam");
}

/// CHECK: code 102 naming what differs from `prevResult` and the config.
#[test]
fn check_reports_each_difference() {
    if !require_root("check_reports_each_difference") {
        return;
    }
    let site = Site::new("check");
    let mac = "0a:58:0a:46:07:01";
    site.veth("hd0", mac, "lan0", Some(LAN_IP));
    let pod = Netns::new("pod-check");
    let c = conf("ck", json!({"device": "hd0", "ipam": static_ipam()}));
    let r = site.call("ADD", Some(&pod), "net1", &c).result();
    let check =
        |conf: &Value, prev: &Value| site.call("CHECK", Some(&pod), "net1", &with_prev(conf, prev));
    check(&c, &r).assert_silent_ok();
    let mut other_mac = r.clone();
    other_mac["interfaces"][0]["mac"] = json!("0a:58:0a:46:07:99");
    check(&c, &other_mac).assert_error(
        102,
        "container interface \"net1\" has hardware address 0a:58:0a:46:07:01, prevResult says 0a:58:0a:46:07:99",
    );
    let mut no_iface = r.clone();
    no_iface["interfaces"][0]["name"] = json!("net9");
    no_iface["ips"][0]
        .as_object_mut()
        .unwrap()
        .remove("interface");
    check(&c, &no_iface).assert_error(102, "prevResult has no interface \"net1\"");
    pod.ip(&["addr", "del", &format!("{POD_IP}/24"), "dev", "net1"]);
    check(&c, &r).assert_error(102, POD_IP);
    pod.ip(&["link", "set", "net1", "alias", ""]);
    check(&c, &r).assert_error(102, "has no alias naming its node device");
    let mut no_prev = c.clone();
    no_prev.as_object_mut().unwrap().remove("prevResult");
    site.call("CHECK", Some(&pod), "net1", &no_prev)
        .assert_error(7, "prevResult");
    // Without the alias, DEL still knows the name from `device`.
    site.call("DEL", Some(&pod), "net1", &c).assert_silent_ok();
    dev_is(&site.node.ns, "hd0", "veth", mac, None, false);
    site.call("CHECK", Some(&pod), "net1", &with_prev(&c, &r))
        .assert_error(102, "container interface \"net1\" not found");
}

// ---- side by side with Go 1.1.1 ---------------------------------------------

/// Our host-device or Go's, on its own node with the same stand-ins (the
/// same names and MACs) and stand-in sysfs.
struct Side {
    site: Site,
    sys: FakeSysfs,
    pod: Netns,
    /// This side's plugin, under the stand-in sysfs.
    plugin: PathBuf,
    cni_path: String,
}

impl Side {
    fn new(tag: &str, plugin: &Path, cni_path: &str) -> Side {
        let (site, sys) = vf_site(tag);
        Side {
            plugin: sys.wrap(plugin),
            pod: Netns::new(&format!("pod-{tag}")),
            site,
            sys,
            cni_path: cni_path.to_string(),
        }
    }

    /// `cmd` by `plugin` (this side's or the other's, under this side's
    /// sysfs) with `cni_path`.
    fn call_by(&self, plugin: &Path, cni_path: &str, cmd: &str, conf: &Value) -> PluginOutput {
        let wrapped = self.sys.wrap(plugin);
        self.site.call_with(
            &wrapped,
            cni_path,
            cmd,
            Some(&self.pod),
            "net1",
            "ctr-cmp",
            conf,
        )
    }

    fn call(&self, cmd: &str, conf: &Value) -> PluginOutput {
        self.site.call_with(
            &self.plugin,
            &self.cni_path,
            cmd,
            Some(&self.pod),
            "net1",
            "ctr-cmp",
            conf,
        )
    }

    /// The pod's interface, addresses and routes, and whether `name` is
    /// on the node.
    fn state(&self, name: &str) -> Value {
        // The kernel's local route of the IPv6 link-local address comes
        // once its DAD is over: ours turns DAD off (accept_dad=0), Go's
        // waits, so it is left out.
        let routes = |args: &[&str]| {
            let mut v = self.pod.ip_json(args);
            let a = v.as_array_mut().unwrap();
            a.retain(|r| {
                !(r["type"] == "local" && r["dst"].as_str().unwrap_or("").starts_with("fe80:"))
            });
            for r in a.iter_mut() {
                r.as_object_mut().unwrap().remove("expires");
            }
            v
        };
        json!({
            "pod_dev": dev(&self.pod, "net1"),
            "pod_addrs": self.pod.link("net1").map(|_| global_addrs(&self.pod, "net1")),
            "pod_routes4": routes(&["-4", "route", "show", "table", "all"]),
            "pod_routes6": routes(&["-6", "route", "show", "table", "all"]),
            "on_node": dev(&self.site.node.ns, name),
        })
    }
}

/// The result with the sandbox path (the pod's name differs) and the MTU
/// (the Go 1.1.1 reference predates `interfaces[].mtu`) left out.
fn normalized(mut r: Value) -> Value {
    let ifaces = r.get_mut("interfaces").and_then(Value::as_array_mut);
    for i in ifaces.into_iter().flatten() {
        let o = i.as_object_mut().unwrap();
        o.remove("mtu");
        assert!(o.contains_key("sandbox"), "{o:?}");
        o.insert("sandbox".into(), json!("<netns>"));
    }
    r
}

#[test]
fn same_result_state_check_and_del_as_the_go_reference() {
    if !require_root("same_result_state_check_and_del_as_the_go_reference") {
        return;
    }
    let Some(go_hd) = go_plugin("host-device") else {
        return;
    };
    let ours_path = bin_dir().display().to_string();
    let ours = Side::new("cmp-ours", &bin("host-device"), &ours_path);
    let go = Side::new("cmp-go", &go_hd, GO_PLUGIN_DIR);
    // (keys, the device, whether it is moved)
    let cases = [
        (json!({"device": "vf1", "ipam": static_ipam()}), "vf1", true),
        (json!({"hwaddr": "0A:58:0A:46:01:02"}), "vf2", true),
        (
            json!({"kernelpath": format!("/sys/{PCI_PARENT}/0000:3b:02.0"), "ipam": static_ipam_gw()}),
            "vf0",
            true,
        ),
        (
            json!({"pciBusID": "0000:3b:02.3", "ipam": static_ipam_gw()}),
            "vf3",
            true,
        ),
        (
            json!({"runtimeConfig": {"deviceID": "0000:3b:02.2"}}),
            "vf2",
            true,
        ),
        (
            json!({"pciBusID": "0000:3b:02.9", "ipam": static_ipam()}),
            "-",
            false,
        ),
    ];
    for (keys, name, moved) in cases {
        // The Go 1.1.1 reference speaks up to 1.0.0.
        let mut c = conf("cmp", keys.clone());
        c["cniVersion"] = json!("1.0.0");
        let go_result = go.call("ADD", &c).result();
        let our_result = ours.call("ADD", &c).result();
        if moved {
            assert_eq!(
                normalized(our_result.clone()),
                normalized(go_result.clone()),
                "{keys}"
            );
        } else {
            // DPDK: Go 1.1.1 lists no interface; v1.9 (and ours) the
            // container's, without MAC. The rest is the same.
            assert!(go_result.get("interfaces").is_none(), "{go_result}");
            let mut without = our_result.clone();
            without.as_object_mut().unwrap().remove("interfaces");
            assert_eq!(without, go_result, "{keys}");
        }
        let want_iface = if moved {
            let mac = dev(&ours.pod, "net1").unwrap()["mac"].clone();
            json!({"name": "net1", "mac": mac, "mtu": 1500, "sandbox": ours.pod.path()})
        } else {
            json!({"name": "net1", "sandbox": ours.pod.path()})
        };
        assert_eq!(our_result["interfaces"], json!([want_iface]), "{keys}");
        let our_state = ours.state(name);
        assert_eq!(our_state, go.state(name), "{keys}: pod and node after ADD");
        if moved {
            assert_eq!(our_state["pod_dev"]["alias"], name, "{keys}");
            assert_eq!(our_state["pod_dev"]["up"], true, "{keys}");
            assert_eq!(our_state["on_node"], Value::Null, "{keys}");
        } else {
            assert_eq!(our_state["pod_dev"], Value::Null, "{keys}");
        }
        if keys.get("ipam").is_some() && moved {
            assert_eq!(
                our_state["pod_addrs"],
                json!([format!("{POD_IP}/24")]),
                "{keys}"
            );
        }
        // CHECK: each on its own state and on the other's. Go's fails on
        // its own state too when a result's route has no gateway (it looks
        // for the route without one; the kernel has it via the IPAM
        // gateway): a known bug, not shared.
        let gwless = our_result["routes"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r.get("gw").is_none()));
        for (side, prev) in [(&ours, &our_result), (&go, &go_result)] {
            let with = with_prev(&c, prev);
            side.call_by(&bin("host-device"), &ours_path, "CHECK", &with)
                .assert_silent_ok();
            let out = side.call_by(&go_hd, GO_PLUGIN_DIR, "CHECK", &with);
            if gwless && moved {
                out.assert_error(
                    999,
                    "Expected Route {Dst:{IP:192.0.2.0 Mask:ffffff00} GW:<nil>} not found",
                );
            } else {
                assert_eq!(
                    out.exit_code,
                    0,
                    "{keys}: Go's CHECK on {}: {out:?}",
                    side.site.node.ns.name()
                );
            }
        }
        // DEL: each removes what the other made. Go 1.1.1 leaves the
        // alias on the device it gives back (v1.9 removes it, as ours).
        go.call_by(&bin("host-device"), &ours_path, "DEL", &c)
            .assert_silent_ok();
        ours.call_by(&go_hd, GO_PLUGIN_DIR, "DEL", &c)
            .assert_silent_ok();
        if moved {
            let mac = our_state["pod_dev"]["mac"].as_str().unwrap().to_string();
            dev_is(&go.site.node.ns, name, "veth", &mac, None, false);
            dev_is(&ours.site.node.ns, name, "veth", &mac, Some(name), false);
            assert!(go.pod.link("net1").is_none() && ours.pod.link("net1").is_none());
        }
        // A second DEL: ours has nothing to do; Go's fails once it moved
        // a device.
        for side in [&ours, &go] {
            side.call_by(&bin("host-device"), &ours_path, "DEL", &c)
                .assert_silent_ok();
            let out = side.call_by(&go_hd, GO_PLUGIN_DIR, "DEL", &c);
            if moved {
                out.assert_error(999, "failed to find \"net1\": Link not found");
            } else {
                out.assert_silent_ok();
            }
        }
    }
}

/// Go's failures that ours does not share, on the same input: an IPAM
/// error after the move, and a layer-2 ADD at 0.2.0 (no result shape),
/// leave Go's device in the pod; ours goes back to the node.
#[test]
fn where_go_leaves_the_device_in_the_pod_ours_goes_back() {
    if !require_root("where_go_leaves_the_device_in_the_pod_ours_goes_back") {
        return;
    }
    let Some(go_hd) = go_plugin("host-device") else {
        return;
    };
    let scripts = TempDir::new("go-fail-ipam");
    scripts.write_executable("fail-ipam", FAILING_IPAM);
    for (plugin, dir) in [
        (bin("host-device"), bin_dir()),
        (go_hd.clone(), PathBuf::from(GO_PLUGIN_DIR)),
    ] {
        let ours = plugin == bin("host-device");
        let site = Site::new(if ours { "gofail-ours" } else { "gofail-go" });
        let mac = "0a:58:0a:46:08:01";
        site.veth("hd0", mac, "lan0", None);
        let path = format!("{}:{}", scripts.path().display(), dir.display());
        for (keys, version, needle) in [
            (
                json!({"device": "hd0", "ipam": {"type": "fail-ipam"}}),
                "1.0.0",
                "no address today",
            ),
            (json!({"device": "hd0"}), "0.2.0", "cannot convert"),
        ] {
            let pod = Netns::new("pod-gofail");
            let mut c = conf("gofail", keys);
            c["cniVersion"] = json!(version);
            let out = site.call_with(&plugin, &path, "ADD", Some(&pod), "net1", "c", &c);
            assert_ne!(out.exit_code, 0, "{out:?}");
            assert!(out.stdout.contains(needle), "{out:?}");
            if ours {
                assert!(pod.link("net1").is_none());
                dev_is(&site.node.ns, "hd0", "veth", mac, None, false);
            } else {
                dev_is(&pod, "net1", "veth", mac, Some("hd0"), true);
                assert!(site.node.ns.link("hd0").is_none());
                // The runtime's DEL (ours) brings it back.
                site.call_with(
                    &bin("host-device"),
                    &path,
                    "DEL",
                    Some(&pod),
                    "net1",
                    "c",
                    &c,
                )
                .assert_silent_ok();
                dev_is(&site.node.ns, "hd0", "veth", mac, None, false);
            }
        }
    }
}

// ---- through the runtimes ---------------------------------------------------

/// Who runs the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// go-cni-cri: containerd's CRI path (loopback first, eth0).
    Cri,
    /// go-cnitool: upstream Go libcni.
    GoCnitool,
    /// Our cnitool.
    Cnitool,
}

/// An SR-IOV network as multus runs it: host-device with the VF the
/// device plugin allocated (`deviceID`; go-cni-cri cannot pass
/// capabilities of that kind, so its network names the VF by `pciBusID`),
/// host-local, then tuning (MTU 1400, restored on DEL); through `client`,
/// with the stand-in sysfs under the runtime: traffic from the pod
/// through the VF to the LAN, CHECK, DEL (the VF back on the node, the
/// lease and the cache gone), and DEL after the pod's namespace is gone.
fn sriov_network_through(client: Client) {
    let tool = match client {
        Client::Cri => go_cni_cri(),
        Client::GoCnitool => go_cnitool(),
        Client::Cnitool => Some(bin("cnitool")),
    };
    let Some(tool) = tool else {
        return; // said loudly, a failure under CI
    };
    let tag = format!("{client:?}").to_lowercase();
    let (site, sys) = vf_site(&format!("rt-{tag}"));
    let tool = sys.wrap(&tool);
    site.lan
        .ip(&["addr", "add", &format!("{LAN_IP}/24"), "dev", "lan1"]);
    let leases = site.state.path().join("leases");
    let mut hd = json!({"type": "host-device",
        "ipam": {"type": "host-local", "dataDir": leases,
                 "ranges": [[{"subnet": "10.70.0.0/24", "rangeStart": "10.70.0.10"}]],
                 "routes": [{"dst": "192.0.2.0/24", "gw": LAN_IP}]}});
    if client == Client::Cri {
        hd["pciBusID"] = json!("0000:3b:02.1");
    } else {
        hd["capabilities"] = json!({"deviceID": true});
    }
    site.node.write_conf(
        "10-sriov.conflist",
        &json!({"cniVersion": "1.0.0", "name": "sriov-net", "plugins": [
            hd,
            {"type": "tuning", "mtu": 1400, "dataDir": site.state.path().join("tuning")}
        ]}),
    );
    let run = |verb: &str, pod: Option<&Netns>, id: &str| -> PluginOutput {
        match client {
            Client::Cri => {
                let verb = match verb {
                    "add" => "setup",
                    "del" => "remove",
                    v => v,
                };
                site.node.cri(&tool, verb, pod, id, &[])
            }
            _ => {
                let netns = pod
                    .map(|p| p.path().display().to_string())
                    .unwrap_or_else(|| "/run/netns/cnit-gone".into());
                let env = [
                    ("CNI_CONTAINERID", id),
                    ("CAP_ARGS", r#"{"deviceID": "0000:3b:02.1"}"#),
                ];
                let args = [verb, "sriov-net", netns.as_str()];
                if client == Client::GoCnitool {
                    site.node.go_cnitool(&tool, &args, &env)
                } else {
                    site.node.cnitool_with(&tool, &args, &env)
                }
            }
        }
    };
    let what = format!("{client:?}");
    let before = NetSnapshot::take(&site.node.ns);
    let pod = Netns::new(&format!("pod-rt-{tag}"));
    let out = run("add", Some(&pod), "sriov-pod1");
    assert_eq!(out.exit_code, 0, "{what}: ADD: {out:?}");
    let eth0 = dev(&pod, "eth0").expect("eth0 in the pod");
    assert_eq!(
        eth0,
        json!({"name": "eth0", "kind": "veth", "mac": "0a:58:0a:46:01:01", "mtu": 1400,
               "alias": "vf1", "up": true}),
        "{what}"
    );
    assert_eq!(global_addrs(&pod, "eth0"), ["10.70.0.10/24"], "{what}");
    assert_ping(&pod, LAN_IP);
    let _l = echo_server(&site.lan, "lan", 7100);
    assert_eq!(ask_ok(&pod, LAN_IP, 7100), "lan 10.70.0.10", "{what}");
    if client != Client::Cri {
        let out = run("check", Some(&pod), "sriov-pod1");
        assert_eq!(out.exit_code, 0, "{what}: CHECK: {out:?}");
    }
    let out = run("del", Some(&pod), "sriov-pod1");
    assert_eq!(out.exit_code, 0, "{what}: DEL: {out:?}");
    assert!(pod.link("eth0").is_none(), "{what}");
    dev_is(
        &site.node.ns,
        "vf1",
        "veth",
        "0a:58:0a:46:01:01",
        None,
        false,
    );
    assert_eq!(
        NetSnapshot::take(&site.node.ns).diff(&before),
        Vec::<String>::new(),
        "{what}"
    );
    assert_eq!(
        leases_in(&leases.join("sriov-net")),
        Vec::<String>::new(),
        "{what}"
    );
    assert_eq!(
        tree(&site.state.path().join("tuning")),
        Vec::<String>::new(),
        "{what}"
    );
    assert_eq!(
        tree(&site.node.shared_cache_dir().join("results")),
        Vec::<String>::new(),
        "{what}"
    );
    // Again, then the pod's namespace goes first (the stand-in dies with it).
    let pod2 = Netns::new(&format!("pod2-rt-{tag}"));
    let out = run("add", Some(&pod2), "sriov-pod2");
    assert_eq!(out.exit_code, 0, "{what}: ADD 2: {out:?}");
    assert_ping(&pod2, LAN_IP);
    drop(pod2);
    let out = run("del", None, "sriov-pod2");
    assert_eq!(
        out.exit_code, 0,
        "{what}: DEL after the namespace is gone: {out:?}"
    );
    assert_eq!(
        leases_in(&leases.join("sriov-net")),
        Vec::<String>::new(),
        "{what}"
    );
    assert_eq!(
        tree(&site.node.shared_cache_dir().join("results")),
        Vec::<String>::new(),
        "{what}"
    );
}

#[test]
fn sriov_network_through_go_cni_cri() {
    if require_root("sriov_network_through_go_cni_cri") {
        sriov_network_through(Client::Cri);
    }
}

#[test]
fn sriov_network_through_go_cnitool() {
    if require_root("sriov_network_through_go_cnitool") {
        sriov_network_through(Client::GoCnitool);
    }
}

#[test]
fn sriov_network_through_our_cnitool() {
    if require_root("sriov_network_through_our_cnitool") {
        sriov_network_through(Client::Cnitool);
    }
}

// ---- a physical NIC, under Debian's full kernel -----------------------------

/// The same test, run again inside a VM with Debian's kernel (11 s of
/// boot and more: one call for the whole scenario), where it takes the
/// other branch: see [`usb_nic_in_the_vm`].
#[test]
fn a_usb_nic_under_debians_full_kernel() {
    const NAME: &str = "a_usb_nic_under_debians_full_kernel";
    if std::env::var("FULLKERNEL_GUEST").is_ok_and(|v| v == "1") {
        usb_nic_in_the_vm();
        return;
    }
    if !require_root(NAME) {
        return;
    }
    let Some(run) = tests::release::fullkernel_runner() else {
        return;
    };
    let out = std::process::Command::new(run)
        .arg(std::env::current_exe().expect("current_exe"))
        .args(["--exact", &test_name(module_path!(), NAME)])
        .args(["--nocapture", "--test-threads=1"])
        .env("CNI_TEST_BIN_DIR", bin_dir())
        .output()
        .expect("scripts/vm/run.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "in the VM:\n{text}");
    assert!(
        text.contains("usb nic in the VM: done"),
        "in the VM:\n{text}"
    );
    eprintln!("in the VM:\n{text}");
}

/// The network devices whose sysfs device is below `dir_part`
/// (`/dummy_hcd.`: the USB host side; `/dummy_udc.`: the gadget).
fn netdevs_below(dir_part: &str) -> Vec<(String, PathBuf)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/sys/class/net").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Ok(dev) = std::fs::canonicalize(e.path().join("device")) {
            if dev.display().to_string().contains(dir_part) {
                v.push((name, dev));
            }
        }
    }
    v
}

/// Waits up to 60 s (the VM is emulated) for `cond`.
fn slow_wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Runs `ip` in the VM's root namespace (the node here); stdout.
fn root_ip(args: &[&str]) -> String {
    let out = run_ok(std::process::Command::new("ip").args(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A link of the VM's root namespace: name, alias, up.
fn root_link(name: &str) -> Option<Value> {
    let out = std::process::Command::new("ip")
        .args(["-j", "link", "show", "dev", name])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let l = v.as_array()?.first()?.clone();
    Some(json!({
        "name": l["ifname"],
        "alias": l.get("ifalias").cloned().unwrap_or(Value::Null),
        "up": l["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "UP")),
    }))
}

/// Inside the VM: the USB gadget Ethernet of `dummy_hcd` is a real
/// driver's NIC (no `rtnl_link_ops`: a physical device to the kernel),
/// whose host side the plugin moves and whose gadget side, in a LAN
/// namespace, is the other end of the cable. The VM's root namespace is
/// the node. Moved by `kernelpath` (its real sysfs directory), `hwaddr`
/// and `device`; traffic through it; DEL gives it back. When the pod's
/// namespace dies, the kernel returns the NIC to the root namespace under
/// its pod name (`dev<N>` when that is taken) with the alias: Go's DEL
/// fails and leaves it so, ours (and GC) give it its name back. And a
/// node switching plugins: Go's ADD undone by our DEL, ours by Go's.
fn usb_nic_in_the_vm() {
    run_ok(std::process::Command::new("modprobe").args([
        "-a",
        "dummy_hcd",
        "g_ether",
        "cdc_ether",
        "rndis_host",
        "dummy",
    ]));
    slow_wait("the USB NIC's two ends", || {
        netdevs_below("/dummy_hcd.").len() == 1 && netdevs_below("/dummy_udc.").len() == 1
    });
    let (nic, nic_dev) = netdevs_below("/dummy_hcd.").remove(0);
    let (gadget, _) = netdevs_below("/dummy_udc.").remove(0);
    let kernelpath = nic_dev.display().to_string();
    assert!(
        kernelpath.starts_with("/sys/devices/platform/dummy_hcd.0/"),
        "{kernelpath}"
    );
    let mac = std::fs::read_to_string(format!("/sys/class/net/{nic}/address"))
        .unwrap()
        .trim()
        .to_string();
    eprintln!("usb nic {nic} ({mac}) at {kernelpath}, gadget {gadget}");
    let lan = Netns::new("usb-lan");
    root_ip(&["link", "set", &gadget, "netns", lan.name()]);
    lan.ip(&["addr", "add", "10.72.0.1/24", "dev", &gadget]);
    lan.ip(&["link", "set", &gadget, "up"]);
    let ipam = json!({"type": "static", "addresses": [{"address": "10.72.0.2/24"}]});
    let ours = bin("host-device");
    let go = go_plugin("host-device");
    let call = |plugin: &Path, cni_path: &str, cmd: &str, netns: &str, ifname: &str, c: &Value| {
        call_plugin(
            None,
            plugin,
            &[
                ("CNI_COMMAND", cmd),
                ("CNI_CONTAINERID", "usb-ctr"),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", ifname),
                ("CNI_PATH", cni_path),
            ],
            &c.to_string(),
        )
    };
    let our_path = bin_dir().display().to_string();
    let ours_call = |cmd: &str, netns: &str, ifname: &str, c: &Value| {
        call(&ours, &our_path, cmd, netns, ifname, c)
    };

    // By its real kernel path: traffic to the other end of the cable.
    let pod = Netns::new("usb-pod");
    let netns = pod.path().display().to_string();
    let c = conf("usb", json!({"kernelpath": kernelpath, "ipam": ipam}));
    let r = ours_call("ADD", &netns, "net1", &c).result();
    assert_eq!(r["interfaces"][0]["mac"], mac.as_str(), "{r}");
    assert_eq!(r["interfaces"][0]["name"], "net1", "{r}");
    assert!(root_link(&nic).is_none());
    let l = pod.link("net1").expect("net1 in the pod");
    assert_eq!(l["ifalias"], nic.as_str());
    // Carrier (LOWER_UP) is what traffic needs; the operstate can lag it,
    // and everything is slow in the emulated VM, more so on a busy host.
    // The host side learns of carrier from the gadget's ECM "connected"
    // notification, sent when the gadget's interface opens; one sent while
    // the NIC was being moved can be lost (seen once in CI: no carrier in
    // 120 s), so the other end is re-plugged (down, up) every 20 s without
    // carrier, as a person would replug a cable.
    let mut last = None;
    let started = std::time::Instant::now();
    let mut replugs = 0;
    while !last.as_ref().is_some_and(|l: &Value| {
        l["operstate"] == "UP"
            || l["flags"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "LOWER_UP"))
    }) {
        let waited = started.elapsed().as_secs();
        assert!(
            waited < 120,
            "timed out waiting for the USB link's carrier ({replugs} replugs): {last:?}"
        );
        if waited >= 20 * (replugs + 1) {
            lan.ip(&["link", "set", &gadget, "down"]);
            lan.ip(&["link", "set", &gadget, "up"]);
            replugs += 1;
            eprintln!("usb nic: no carrier after {waited} s, gadget side replugged");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        last = pod.link("net1");
    }
    assert_ping(&pod, "10.72.0.1");
    ours_call("CHECK", &netns, "net1", &with_prev(&c, &r)).assert_silent_ok();
    ours_call("DEL", &netns, "net1", &c).assert_silent_ok();
    assert_eq!(
        root_link(&nic),
        Some(json!({"name": nic, "alias": null, "up": false}))
    );
    ours_call("DEL", &netns, "net1", &c).assert_silent_ok();
    drop(pod);

    // The pod's namespace dies: the kernel returns the NIC as net1.
    let by_mac = conf("usb", json!({"hwaddr": mac, "ipam": ipam}));
    let pod = Netns::new("usb-pod2");
    let netns = pod.path().display().to_string();
    ours_call("ADD", &netns, "net1", &by_mac).result();
    drop(pod);
    slow_wait("the kernel to return the NIC", || {
        root_link("net1").is_some()
    });
    assert_eq!(
        root_link("net1"),
        Some(json!({"name": "net1", "alias": nic, "up": false}))
    );
    if let Some(go) = &go {
        let mut c = by_mac.clone();
        c["cniVersion"] = json!("1.0.0");
        call(go, GO_PLUGIN_DIR, "DEL", &netns, "net1", &c)
            .assert_error(999, "failed to open netns");
        assert!(root_link("net1").is_some(), "Go's DEL renamed it");
    }
    ours_call("DEL", &netns, "net1", &by_mac).assert_silent_ok();
    assert_eq!(
        root_link(&nic),
        Some(json!({"name": nic, "alias": null, "up": false}))
    );
    assert!(root_link("net1").is_none());

    // Its pod name taken on the node: the kernel names it dev<N>; GC
    // gives its name back.
    root_ip(&["link", "add", "net9", "type", "dummy"]);
    let by_name = conf("usb", json!({"device": nic, "ipam": ipam}));
    let pod = Netns::new("usb-pod3");
    let netns = pod.path().display().to_string();
    ours_call("ADD", &netns, "net9", &by_name).result();
    drop(pod);
    let index = || -> Option<String> {
        let v: Value = serde_json::from_str(&root_ip(&["-j", "link", "show"])).ok()?;
        v.as_array()?
            .iter()
            .find(|l| l["ifalias"] == nic.as_str())
            .map(|l| l["ifname"].as_str().unwrap_or_default().to_string())
    };
    slow_wait("the kernel to return the NIC", || index().is_some());
    let returned = index().unwrap();
    assert!(returned.starts_with("dev"), "{returned}");
    let mut gc = by_name.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    ours_call("GC", "", "", &gc).assert_silent_ok();
    assert_eq!(
        root_link(&nic),
        Some(json!({"name": nic, "alias": null, "up": false}))
    );
    root_ip(&["link", "del", "net9"]);

    // A node switching plugins, both ways.
    if let Some(go) = &go {
        let mut c = conf("usb", json!({"kernelpath": kernelpath, "ipam": ipam}));
        c["cniVersion"] = json!("1.0.0");
        let pod = Netns::new("usb-pod4");
        let netns = pod.path().display().to_string();
        call(go, GO_PLUGIN_DIR, "ADD", &netns, "net1", &c).result();
        ours_call("DEL", &netns, "net1", &c).assert_silent_ok();
        assert_eq!(
            root_link(&nic),
            Some(json!({"name": nic, "alias": null, "up": false}))
        );
        ours_call("ADD", &netns, "net1", &c).result();
        call(go, GO_PLUGIN_DIR, "DEL", &netns, "net1", &c).assert_silent_ok();
        assert_eq!(
            root_link(&nic),
            Some(json!({"name": nic, "alias": nic, "up": false}))
        );
    }
    println!("usb nic in the VM: done");
}

/// Two pods' ADDs race for one device, many times: one gets it, the other
/// a clear error (not found: code 7; taken while it was moving it: code
/// 103), and the loser's pod is left as it was.
#[test]
fn two_adds_racing_for_one_device() {
    if !require_root("two_adds_racing_for_one_device") {
        return;
    }
    let site = Site::new("race");
    let mac = "0a:58:0a:46:09:01";
    site.veth("hd0", mac, "lan0", None);
    let c = conf("race", json!({"device": "hd0"}));
    let pods = [Netns::new("pod-race-a"), Netns::new("pod-race-b")];
    let mut codes = std::collections::BTreeMap::new();
    for round in 0..15 {
        let outs: Vec<PluginOutput> = std::thread::scope(|s| {
            let handles: Vec<_> = pods
                .iter()
                .map(|pod| s.spawn(|| site.call("ADD", Some(pod), "net1", &c)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<usize> = (0..2).filter(|&i| outs[i].exit_code == 0).collect();
        assert_eq!(won.len(), 1, "round {round}: {outs:?}");
        let (w, l) = (won[0], 1 - won[0]);
        let code = outs[l].json()["code"].as_u64().unwrap();
        assert!(matches!(code, 7 | 103), "round {round}: {:?}", outs[l]);
        assert!(outs[l].stdout.contains("hd0"), "{:?}", outs[l]);
        *codes.entry(code).or_insert(0) += 1;
        assert!(pods[l].link("net1").is_none(), "round {round}");
        dev_is(&pods[w], "net1", "veth", mac, Some("hd0"), true);
        site.call("DEL", Some(&pods[w]), "net1", &c)
            .assert_silent_ok();
        site.call("DEL", Some(&pods[l]), "net1", &c)
            .assert_silent_ok();
        dev_is(&site.node.ns, "hd0", "veth", mac, None, false);
    }
    eprintln!("losers' codes: {codes:?}");
}

/// `useInterfaceNetwork` (upstream v1.10, #1257), as a cloud's secondary
/// NIC is set up: the device comes with its own address (IPv4 and IPv6,
/// static), a route to a remote network through the LAN's router and a
/// default route in a table of its own. ADD takes them from the node
/// before the move and applies them in the pod (the kernel would drop
/// them), reporting them after IPAM's addresses; addresses with a lifetime
/// (SLAAC-style) and the kernel's own routes are not taken. The pod reaches
/// the LAN and the remote network; CHECK passes; DEL moves the device back
/// (without them: the node's network manager sets it up again there).
/// A DPDK-bound device cannot use it (code 7, before anything happens).
#[test]
fn use_interface_network_carries_the_devices_own_addresses_and_routes() {
    if !require_root("use_interface_network_carries_the_devices_own_addresses_and_routes") {
        return;
    }
    let site = Site::new("uin");
    let mac = "0a:58:0a:46:00:07";
    site.veth("hd0", mac, "lan0", Some(LAN_IP));
    site.lan
        .ip(&["-6", "addr", "add", "fd70::1/64", "dev", "lan0", "nodad"]);
    site.lan.ip(&["addr", "add", "192.0.2.1/32", "dev", "lo"]);
    let n = &site.node.ns;
    n.ip(&["link", "set", "hd0", "up"]);
    n.ip(&["addr", "add", "10.70.0.50/24", "dev", "hd0"]);
    n.ip(&["-6", "addr", "add", "fd70::50/64", "dev", "hd0", "nodad"]);
    // A dynamic address, as SLAAC leaves one: not taken.
    n.ip(&[
        "-6",
        "addr",
        "add",
        "fd70::99/64",
        "dev",
        "hd0",
        "nodad",
        "valid_lft",
        "3600",
        "preferred_lft",
        "3600",
    ]);
    n.ip(&[
        "route",
        "add",
        "192.0.2.0/24",
        "via",
        LAN_IP,
        "dev",
        "hd0",
        "metric",
        "50",
    ]);
    n.ip(&[
        "route", "add", "default", "via", LAN_IP, "dev", "hd0", "table", "77",
    ]);
    let pod = Netns::new("pod-uin");
    let c = conf(
        "cloud",
        json!({"device": "hd0", "useInterfaceNetwork": true,
               "ipam": {"type": "static", "addresses": [{"address": "10.71.0.5/24"}]}}),
    );
    let result = site.call("ADD", Some(&pod), "eth1", &c).result();
    assert_eq!(
        result,
        json!({"cniVersion": "1.1.0",
               "interfaces": [{"name": "eth1", "mac": mac, "mtu": 1500, "sandbox": pod.path()}],
               "ips": [{"interface": 0, "address": "10.71.0.5/24"},
                       {"interface": 0, "address": "10.70.0.50/24"},
                       {"interface": 0, "address": "fd70::50/64"}],
               // In the kernel's listing order (table 77 comes first).
               "routes": [{"dst": "0.0.0.0/0", "gw": LAN_IP, "table": 77},
                          {"dst": "192.0.2.0/24", "gw": LAN_IP, "priority": 50, "table": 254}],
               "dns": {}})
    );
    let mut addrs = global_addrs(&pod, "eth1");
    addrs.sort();
    assert_eq!(addrs, ["10.70.0.50/24", "10.71.0.5/24", "fd70::50/64"]);
    let routes = pod.ip(&["route", "show"]);
    assert!(
        routes.contains(&format!("192.0.2.0/24 via {LAN_IP} dev eth1 metric 50")),
        "{routes}"
    );
    let table = pod.ip(&["route", "show", "table", "77"]);
    assert!(
        table.contains(&format!("default via {LAN_IP} dev eth1")),
        "{table}"
    );
    assert_ping(&pod, LAN_IP);
    assert_ping(&pod, "192.0.2.1");
    assert_ping(&pod, "fd70::1");
    site.call("CHECK", Some(&pod), "eth1", &with_prev(&c, &result))
        .assert_silent_ok();

    site.call("DEL", Some(&pod), "eth1", &c).assert_silent_ok();
    assert!(pod.link("eth1").is_none());
    dev_is(&site.node.ns, "hd0", "veth", mac, None, false);
    assert_eq!(global_addrs(&site.node.ns, "hd0"), Vec::<String>::new());

    // Layer 2 with the device's own network only, at 1.0.0: the same
    // addresses, nothing from IPAM.
    n.ip(&["addr", "add", "10.70.0.50/24", "dev", "hd0"]);
    n.ip(&["link", "set", "hd0", "up"]);
    let only = conf(
        "cloud",
        json!({"device": "hd0", "useInterfaceNetwork": true}),
    );
    let mut only10 = only.clone();
    only10["cniVersion"] = json!("1.0.0");
    let pod2 = Netns::new("pod-uin2");
    let r = site.call("ADD", Some(&pod2), "eth1", &only10).result();
    assert_eq!(
        r["ips"],
        json!([{"interface": 0, "address": "10.70.0.50/24"}]),
        "{r}"
    );
    assert_ping(&pod2, LAN_IP);
    site.call("DEL", Some(&pod2), "eth1", &only10)
        .assert_silent_ok();

    // Without the key, a device with addresses is refused as before.
    n.ip(&["addr", "add", "10.70.0.50/24", "dev", "hd0"]);
    let plain = conf("cloud", json!({"device": "hd0"}));
    site.call("ADD", Some(&pod2), "eth1", &plain)
        .assert_error(7, "is in use on the node");
}
