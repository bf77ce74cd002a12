//! tc-redirect-tap, black box, in throwaway namespaces: the plugins run in
//! a node namespace and hand the pod's network to a "VM" in the pod
//! namespace. The VM is a small Python program that does what a VM
//! monitor does: it opens `/dev/net/tun` inside the pod namespace and
//! attaches to the tap by name (`TUNSETIFF`, with the virtio-net header
//! Firecracker uses), as the tap's owner. It then speaks for the pod with
//! the veth's MAC and the pod's address: an ARP request for the gateway,
//! an ICMP echo request to it, the echo reply read back from the tap; and
//! it answers ARP and echo requests for the pod's address, so the node's
//! ping of the pod is answered by the VM (and by nobody once the VM is
//! gone: the pod's own stack sees no frame any more).
//!
//! Chains: bridge + host-local + tc-redirect-tap, and firecracker-
//! containerd's `fcnet` (ptp with ipMasq + host-local + firewall +
//! tc-redirect-tap, 0.4.0), each through go-cni-cri (containerd's CRI
//! path), go-cnitool and our cnitool. Then, plugin by plugin: DEL with and
//! without `prevResult`, after a killed ADD, when the namespace is gone;
//! CHECK against each missing piece; a foreign ingress qdisc and a clsact
//! one; awslabs' plugin's tap (no alias); failed ADDs; GC and STATUS. The
//! upstream suite has no such plugin: behaviour follows awslabs'
//! tc-redirect-tap (see plugins/tc-redirect-tap/README.md).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use tests::*;

/// The VM: `argv[1..]` = tap, MAC, IPv4 address, gateway, uid (-1: stays
/// root). Attaches (after becoming `uid`, which drops every capability),
/// then ARP + ICMP echo with the gateway (each request sent again every
/// second, up to 10 times, as a guest's stack would) and prints one JSON
/// line (`gateway_mac`, `reply`, `tries`; or `error`), then answers ARP and
/// echo requests for its address until killed.
const VM: &str = r#"
import fcntl, json, os, select, socket, struct, sys, time
name, mac = sys.argv[1], bytes.fromhex(sys.argv[2].replace(':', ''))
ip, gw, uid = socket.inet_aton(sys.argv[3]), socket.inet_aton(sys.argv[4]), int(sys.argv[5])
VNET_HDR = 10
fd = os.open('/dev/net/tun', os.O_RDWR)
if uid >= 0:
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
try:
    # IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, as Firecracker attaches.
    fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH22x', name.encode(), 0x0002 | 0x1000 | 0x4000))
except OSError as e:
    print(json.dumps({'error': 'attach: %s' % e}), flush=True)
    sys.exit(3)
def csum(b):
    if len(b) % 2:
        b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def send(frame):
    os.write(fd, bytes(VNET_HDR) + frame)
def arp(op, dst, tha, tpa):
    return dst + mac + b'\x08\x06' + struct.pack('!HHBBH', 1, 0x0800, 6, 4, op) + mac + ip + tha + tpa
def ipv4(dst, payload):
    h = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(payload), 1, 0x4000, 64, 1, 0, ip, dst)
    return h[:10] + struct.pack('!H', csum(h)) + h[12:] + payload
def icmp(kind, ident, seq, data):
    m = struct.pack('!BBHHH', kind, 0, 0, ident, seq) + data
    return m[:2] + struct.pack('!H', csum(m)) + m[4:]
def frames(deadline):
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if not select.select([fd], [], [], left)[0]:
            return
        f = os.read(fd, 65536)[VNET_HDR:]
        if len(f) < 42:
            continue
        src, kind = f[6:12], f[12:14]
        if kind == b'\x08\x06' and f[20:22] == b'\x00\x01' and f[38:42] == ip:
            send(arp(2, f[22:28], f[22:28], f[28:32]))
            continue
        m = f[14 + (f[14] & 15) * 4:]
        if kind == b'\x08\x00' and f[23] == 1 and f[30:34] == ip and m[0] == 8:
            ident, seq = struct.unpack('!HH', m[4:8])
            send(src + mac + b'\x08\x00' + ipv4(f[26:30], icmp(0, ident, seq, m[8:])))
            continue
        yield f
# Like a guest's stack, each request is sent again every second until it
# is answered (at most 10 times): the tap's queue only starts once the
# kernel's link watch has seen the carrier the attach brought, so a frame
# to the tap can be dropped in that moment (a guest boots for longer).
def ask(request, answer):
    for tries in range(1, 11):
        send(request)
        for f in frames(time.monotonic() + 1):
            got = answer(f)
            if got is not None:
                return got, tries
    return None, 10
def arp_reply(f):
    if f[12:14] == b'\x08\x06' and f[20:22] == b'\x00\x02' and f[28:32] == gw and f[38:42] == ip:
        return f[22:28]
gw_mac, arp_tries = ask(arp(1, b'\xff' * 6, bytes(6), gw), arp_reply)
if gw_mac is None:
    print(json.dumps({'error': 'no ARP reply from the gateway'}), flush=True)
    sys.exit(1)
ident = os.getpid() & 0xffff
def echo_reply(f):
    m = f[14 + (f[14] & 15) * 4:]
    if f[12:14] == b'\x08\x00' and f[23] == 1 and f[26:30] == gw and f[30:34] == ip \
            and m[0] == 0 and struct.unpack('!H', m[4:6])[0] == ident:
        return {'eth_src': f[6:12].hex(':'), 'eth_dst': f[0:6].hex(':'),
                'data': m[8:].decode(errors='replace')}
reply, echo_tries = ask(gw_mac + mac + b'\x08\x00' + ipv4(gw, icmp(8, ident, 1, b'tc-redirect-tap')),
                        echo_reply)
if reply is None:
    print(json.dumps({'error': 'no echo reply from the gateway'}), flush=True)
    sys.exit(1)
print(json.dumps({'gateway_mac': gw_mac.hex(':'), 'reply': reply,
                  'tries': [arp_tries, echo_tries]}), flush=True)
for _ in frames(time.monotonic() + 3600):
    pass
"#;

/// A VM attached to a tap, killed on drop.
struct Vm {
    child: Child,
    /// What it printed after its exchange with the gateway.
    said: Value,
}

impl Vm {
    /// Attaches to `tap` in `pod` as `uid` (root when `None`), speaking for
    /// `ip` with `mac`, and pings `gw`. `Err` with what it said when the
    /// attach or the exchange failed.
    fn start(
        pod: &Netns,
        tap: &str,
        mac: &str,
        ip: &str,
        gw: &str,
        uid: Option<u32>,
    ) -> Result<Vm, Value> {
        let uid = uid.map_or("-1".to_string(), |u| u.to_string());
        let mut child = pod
            .command("python3")
            .args(["-c", VM, tap, mac, ip, gw, &uid])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the VM");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the VM");
        let said: Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| json!({"error": format!("{e}: {line:?}")}));
        if said.get("error").is_some() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(said);
        }
        Ok(Vm { child, said })
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether one ping from `from` to `ip` is answered within `secs`.
fn pings(from: &Netns, ip: &str, secs: u32) -> bool {
    from.command("ping")
        .args(["-c1", &format!("-W{secs}"), ip])
        .output()
        .expect("ping")
        .status
        .success()
}

/// Asserts a ping from `from` to `ip` is answered: up to three one-ping
/// tries of 2 s each.
fn assert_pings(from: &Netns, ip: &str, what: &str) {
    assert!(
        (0..3).any(|_| pings(from, ip, 2)),
        "{what}: ping {ip} from {} is not answered",
        from.name()
    );
}

/// The runtimes that run a conflist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Cri,
    GoCnitool,
    Cnitool,
}

fn clients() -> Vec<(Client, PathBuf)> {
    let mut v = Vec::new();
    if let Some(t) = go_cni_cri() {
        v.push((Client::Cri, t));
    }
    if let Some(t) = go_cnitool() {
        v.push((Client::GoCnitool, t));
    }
    v.push((Client::Cnitool, bin("cnitool")));
    v
}

/// `verb` (add, check, del) of container `id` in `pod` through `client`,
/// with `CNI_ARGS` `cni_args` (go-cni-cri sends its own: the pod's
/// labels).
#[allow(clippy::too_many_arguments)]
fn run(
    client: Client,
    tool: &Path,
    node: &Node,
    net: &str,
    verb: &str,
    pod: &Netns,
    id: &str,
    cni_args: &str,
) -> PluginOutput {
    let netns = pod.path().display().to_string();
    match client {
        Client::Cri => {
            let verb = match verb {
                "add" => "setup",
                "del" => "remove",
                v => v,
            };
            node.cri(tool, verb, Some(pod), id, &[])
        }
        Client::GoCnitool => node.go_cnitool(
            tool,
            &[verb, net, &netns],
            &[("CNI_CONTAINERID", id), ("CNI_ARGS", cni_args)],
        ),
        Client::Cnitool => node.cnitool_with(
            tool,
            &[verb, net, &netns],
            &[("CNI_CONTAINERID", id), ("CNI_ARGS", cni_args)],
        ),
    }
}

/// The chains a microVM runtime runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chain {
    /// bridge (isGateway) + host-local, dual-stack, + tc-redirect-tap.
    Bridge,
    /// firecracker-containerd's `fcnet`: ptp (ipMasq) + host-local
    /// (subnet, resolvConf) + firewall + tc-redirect-tap, at 0.4.0.
    Ptp,
}

impl Chain {
    fn conflist(self, net: &str, state: &Path) -> Value {
        match self {
            Chain::Bridge => json!({"cniVersion": "1.0.0", "name": net, "plugins": [
                {"type": "bridge", "bridge": "fcbr0", "isGateway": true,
                 "ipam": {"type": "host-local", "dataDir": state.join("leases"),
                          "ranges": [[{"subnet": "10.78.0.0/24"}], [{"subnet": "fd00:78::/64"}]]}},
                {"type": "tc-redirect-tap"}
            ]}),
            Chain::Ptp => json!({"cniVersion": "0.4.0", "name": net, "plugins": [
                {"type": "ptp", "ipMasq": true,
                 "ipam": {"type": "host-local", "dataDir": state.join("leases"),
                          "subnet": "192.168.1.0/24", "resolvConf": state.join("resolv.conf")}},
                {"type": "firewall"},
                {"type": "tc-redirect-tap"}
            ]}),
        }
    }
}

/// The tap `name` in `pod` as `ip -d link` shows it: a persistent tap.
fn tap_link(pod: &Netns, name: &str, what: &str) -> Value {
    let l = pod
        .link(name)
        .unwrap_or_else(|| panic!("{what}: no tap {name:?} in the pod"));
    assert_eq!(l["linkinfo"]["info_kind"], "tun", "{what}: {l}");
    let d = &l["linkinfo"]["info_data"];
    assert_eq!(
        (&d["type"], &d["persist"]),
        (&json!("tap"), &json!(true)),
        "{what}: {l}"
    );
    l
}

/// The redirect filters of `pod` as [`NetSnapshot`] lists them: `dev`'s
/// ingress sends every frame to `to`.
fn redirect_line(dev: &str, to: &str) -> String {
    format!(
        "{dev} ingress all 49152 u32 match={} actions=mirred:redirect:egress:{to}",
        json!({"value": "0", "mask": "0", "offmask": "", "off": 0})
    )
}

/// A whole microVM network through `client` on `chain`: the tap beside
/// eth0 (name, owner, group, MTU, alias), the redirects both ways, the
/// result; the VM attached as the owner pings the gateway and answers the
/// node's ping; CHECK; DEL leaves the pod as it was.
fn vm_network(chain: Chain, client: Client, tool: &Path) {
    let tag = format!("trt-{chain:?}-{client:?}").to_lowercase();
    let node = Node::new(&tag);
    node.ns.ip(&["link", "set", "lo", "up"]);
    let state = TempDir::new(&format!("state-{tag}"));
    state.write("resolv.conf", "nameserver 10.0.0.53\nsearch fc.internal\n");
    let net = "fcnet";
    node.write_conf("10-fcnet.conflist", &chain.conflist(net, state.path()));
    let what = format!("{chain:?} via {client:?}");
    let pod = Netns::new(&format!("pod-{tag}"));
    pod.ip(&["link", "set", "lo", "up"]);
    if client == Client::Cri {
        // go-cni's loopback network sets lo down again on DEL.
        pod.ip(&["link", "set", "lo", "down"]);
    }
    let pod_before = NetSnapshot::take_with(&pod, false);
    let cid = "vm-1";
    // go-cni-cri sends only the pod's labels: the default name and owner.
    let (cni_args, tap, owner) = match client {
        Client::Cri => ("", "tap0", None),
        Client::GoCnitool => (
            "IgnoreUnknown=1;TC_REDIRECT_TAP_NAME=fc-tap;TC_REDIRECT_TAP_UID=65534;\
             TC_REDIRECT_TAP_GID=65534",
            "fc-tap",
            Some(65534),
        ),
        Client::Cnitool => (
            "IgnoreUnknown=1;TC_REDIRECT_TAP_NAME=vm%d;TC_REDIRECT_TAP_UID=65534;\
             TC_REDIRECT_TAP_GID=65534",
            "vm0",
            Some(65534),
        ),
    };
    let out = run(client, tool, &node, net, "add", &pod, cid, cni_args);
    assert_eq!(out.exit_code, 0, "{what}: ADD: {out:?}");
    let printed = out.json();

    // The kernel: eth0 keeps its addresses, the tap is beside it.
    let eth0 = pod.link("eth0").expect("eth0");
    let eth0_mac = eth0["address"].as_str().unwrap().to_string();
    let addrs = global_addrs(&pod, "eth0");
    let v4 = addrs
        .iter()
        .find(|a| !a.contains(':'))
        .unwrap_or_else(|| panic!("{what}: no IPv4 on eth0: {addrs:?}"))
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let t = tap_link(&pod, tap, &what);
    let data = &t["linkinfo"]["info_data"];
    let (user, group) = match owner {
        Some(_) => ("nobody", "nogroup"),
        None => ("root", "root"),
    };
    assert_eq!(
        (&data["user"], &data["group"]),
        (&json!(user), &json!(group)),
        "{what}: {t}"
    );
    assert_eq!(t["mtu"], eth0["mtu"], "{what}: the tap's MTU");
    assert_eq!(
        t["ifalias"],
        json!(format!("tc-redirect-tap/{net}/{cid}/eth0")),
        "{what}: {t}"
    );
    assert!(pod.link_is_up(tap), "{what}: the tap is down");
    let snap = NetSnapshot::take_with(&pod, false);
    assert_eq!(
        snap.filters,
        {
            let mut v = vec![redirect_line("eth0", tap), redirect_line(tap, "eth0")];
            v.sort();
            v
        },
        "{what}"
    );
    for dev in ["eth0", tap] {
        let q = format!("{dev} ingress ffff: ffff:fff1");
        assert!(
            snap.qdiscs.contains(&q),
            "{what}: no {q:?}: {:?}",
            snap.qdiscs
        );
    }

    // The result: prevResult, the tap, and the VM's interface with the
    // veth's MAC and addresses.
    let gw = match client {
        Client::Cri => {
            // go-cni keys interfaces by name: "tap0" is the VM's (last).
            let ifs = &printed["interfaces"];
            assert_eq!(ifs[tap]["Sandbox"], json!(cid), "{what}: {printed}");
            assert_eq!(ifs[tap]["Mac"], json!(eth0_mac), "{what}: {printed}");
            assert_eq!(
                ifs[tap]["IPConfigs"], ifs["eth0"]["IPConfigs"],
                "{what}: {printed}"
            );
            ifs["eth0"]["IPConfigs"][0]["Gateway"]
                .as_str()
                .unwrap()
                .to_string()
        }
        _ => {
            let ifs = printed["interfaces"].as_array().unwrap();
            let n = ifs.len();
            let eth0_at = ifs.iter().position(|i| i["name"] == "eth0").unwrap();
            assert_eq!(
                ifs[n - 2..],
                [
                    json!({"name": tap, "mac": t["address"], "sandbox": pod.path()}),
                    json!({"name": tap, "mac": eth0_mac, "sandbox": cid}),
                ],
                "{what}: {printed}"
            );
            let ips = printed["ips"].as_array().unwrap();
            let of = |at: usize| -> Vec<Value> {
                ips.iter()
                    .filter(|ip| ip["interface"] == json!(at))
                    .map(|ip| json!([ip["address"], ip["gateway"]]))
                    .collect()
            };
            assert!(!of(eth0_at).is_empty(), "{what}: {printed}");
            assert_eq!(of(n - 1), of(eth0_at), "{what}: {printed}");
            assert_eq!(ips.len(), 2 * of(eth0_at).len(), "{what}: {printed}");
            if chain == Chain::Ptp {
                assert_eq!(
                    printed["dns"],
                    json!({"nameservers": ["10.0.0.53"], "search": ["fc.internal"]}),
                    "{what}"
                );
            }
            ips[0]["gateway"].as_str().unwrap().to_string()
        }
    };

    // The gateway's MAC: the bridge's, or ptp's node end of the veth.
    let gw_dev = match chain {
        Chain::Bridge => "fcbr0".to_string(),
        Chain::Ptp => {
            let peer = eth0["link_index"].as_u64().unwrap();
            node.ns
                .ip_json(&["link", "show"])
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["ifindex"].as_u64() == Some(peer))
                .map(|l| l["ifname"].as_str().unwrap().to_string())
                .expect("ptp's node end")
        }
    };
    let gw_mac = node.ns.link(&gw_dev).unwrap()["address"].clone();

    // Only the owner may attach; the VM, as the owner, reaches the node.
    if let Some(uid) = owner {
        let e = Vm::start(&pod, tap, &eth0_mac, &v4, &gw, Some(uid - 1)).err();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.to_string().contains("Operation not permitted")),
            "{what}: another user attached: {e:?}"
        );
    }
    let vm = Vm::start(&pod, tap, &eth0_mac, &v4, &gw, owner)
        .unwrap_or_else(|e| panic!("{what}: the VM: {e}"));
    eprintln!(
        "{what}: the VM's requests sent (ARP, echo): {}",
        vm.said["tries"]
    );
    assert_eq!(vm.said["gateway_mac"], gw_mac, "{what}: {}", vm.said);
    assert_eq!(
        vm.said["reply"],
        json!({"eth_src": gw_mac, "eth_dst": eth0_mac, "data": "tc-redirect-tap"}),
        "{what}"
    );
    // The node reaches the pod's address: the VM answers.
    assert_pings(&node.ns, &v4, &what);
    drop(vm);
    // Nobody else does: the pod's stack no longer sees eth0's frames.
    assert!(!pings(&node.ns, &v4, 1), "{what}: answered without the VM");

    if client != Client::Cri {
        // (go-cni's loopback network is 0.3.1: containerd has no CHECK.)
        let out = run(client, tool, &node, net, "check", &pod, cid, cni_args);
        assert_eq!(out.exit_code, 0, "{what}: CHECK: {out:?}");
    }
    let out = run(client, tool, &node, net, "del", &pod, cid, cni_args);
    assert_eq!(out.exit_code, 0, "{what}: DEL: {out:?}");
    assert_eq!(
        pod_before.diff(&NetSnapshot::take_with(&pod, false)),
        Vec::<String>::new(),
        "{what}: the pod after DEL"
    );
    assert_eq!(
        links_of_kind(&node.ns, "veth"),
        Vec::<String>::new(),
        "{what}"
    );
    assert_eq!(
        leases_in(&state.path().join("leases").join(net)),
        Vec::<String>::new(),
        "{what}"
    );
    assert_eq!(
        tree(&node.shared_cache_dir().join("results")),
        Vec::<String>::new(),
        "{what}"
    );
    assert!(
        !nft_ruleset(&node.ns).contains(cid) && !iptables_rules(&node.ns).contains(cid),
        "{what}: a firewall rule of {cid} is left"
    );

    // A VM whose namespace went first: the runtime's DEL still succeeds
    // (containerd's sends no netns at all) and releases the address.
    let gone = Netns::new(&format!("gone-{tag}"));
    let out = run(client, tool, &node, net, "add", &gone, "vm-2", cni_args);
    assert_eq!(out.exit_code, 0, "{what}: ADD: {out:?}");
    let path = gone.path();
    drop(gone);
    wait_for("the veth to go with the namespace", || {
        links_of_kind(&node.ns, "veth").is_empty()
    });
    let out = match client {
        Client::Cri => node.cri(tool, "remove", None, "vm-2", &[]),
        Client::GoCnitool | Client::Cnitool => {
            let netns = path.display().to_string();
            let env = [("CNI_CONTAINERID", "vm-2"), ("CNI_ARGS", cni_args)];
            if client == Client::GoCnitool {
                node.go_cnitool(tool, &["del", net, &netns], &env)
            } else {
                node.cnitool_with(tool, &["del", net, &netns], &env)
            }
        }
    };
    assert_eq!(
        out.exit_code, 0,
        "{what}: DEL without the namespace: {out:?}"
    );
    assert_eq!(
        leases_in(&state.path().join("leases").join(net)),
        Vec::<String>::new(),
        "{what}: DEL without the namespace"
    );
}

#[test]
fn tc_redirect_tap_answers_version() {
    let out = call_plugin(
        None,
        &bin("tc-redirect-tap"),
        &[("CNI_COMMAND", "VERSION")],
        "",
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["supportedVersions"],
        json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
}

#[test]
fn a_vm_on_the_tap_of_a_bridge_chain_reaches_the_node_through_every_runtime() {
    if !require_root("a_vm_on_the_tap_of_a_bridge_chain_reaches_the_node_through_every_runtime") {
        return;
    }
    for (client, tool) in clients() {
        vm_network(Chain::Bridge, client, &tool);
    }
}

#[test]
fn a_vm_on_the_tap_of_firecracker_containerds_ptp_chain_reaches_the_node_through_every_runtime() {
    if !require_root(
        "a_vm_on_the_tap_of_firecracker_containerds_ptp_chain_reaches_the_node_through_every_runtime",
    ) {
        return;
    }
    for (client, tool) in clients() {
        vm_network(Chain::Ptp, client, &tool);
    }
}

// ---- the plugin alone ---------------------------------------------------------

/// A node, a pod wired by our bridge plugin (the prevResult), and calls of
/// tc-redirect-tap after it.
struct Site {
    node: Node,
    pod: Netns,
    path: TempDir,
    leases: TempDir,
    /// bridge's result: what tc-redirect-tap gets as prevResult.
    prev: Value,
}

const CID: &str = "vm-7";

impl Site {
    fn new(tag: &str) -> Site {
        let node = Node::new(tag);
        node.ns.ip(&["link", "set", "lo", "up"]);
        let path = TempDir::new(&format!("path-{tag}"));
        for p in ["bridge", "host-local", "tc-redirect-tap"] {
            std::os::unix::fs::symlink(bin(p), path.path().join(p)).expect("symlink");
        }
        let leases = TempDir::new(&format!("leases-{tag}"));
        let pod = Netns::new(&format!("pod-{tag}"));
        pod.ip(&["link", "set", "lo", "up"]);
        let mut site = Site {
            node,
            pod,
            path,
            leases,
            prev: Value::Null,
        };
        let bridge = json!({"cniVersion": "1.1.0", "name": "vmnet", "type": "bridge",
            "bridge": "vmbr0", "isGateway": true,
            "ipam": {"type": "host-local", "dataDir": site.leases.path(),
                     "ranges": [[{"subnet": "10.79.0.0/24"}]]}});
        site.prev = site
            .call_with(&bin("bridge"), "ADD", Some(&site.pod), &bridge, &[])
            .result();
        site
    }

    fn conf(&self, prev: Option<&Value>) -> Value {
        let mut c = json!({"cniVersion": "1.1.0", "name": "vmnet", "type": "tc-redirect-tap"});
        if let Some(p) = prev {
            c["prevResult"] = p.clone();
        }
        c
    }

    fn call_with(
        &self,
        plugin: &Path,
        cmd: &str,
        pod: Option<&Netns>,
        conf: &Value,
        extra: &[(&str, &str)],
    ) -> PluginOutput {
        PluginCall {
            node: &self.node.ns,
            plugin,
            cni_path: &self.path.path().display().to_string(),
            command: cmd,
            netns: pod.map(|p| p.path()),
            container_id: CID,
            conf,
            extra,
        }
        .run()
    }

    /// tc-redirect-tap `cmd` with `CNI_ARGS` `cni_args`.
    fn call(&self, cmd: &str, conf: &Value, cni_args: &str) -> PluginOutput {
        self.call_with(
            &bin("tc-redirect-tap"),
            cmd,
            Some(&self.pod),
            conf,
            &[("CNI_ARGS", cni_args)],
        )
    }

    fn add(&self, cni_args: &str) -> Value {
        self.call("ADD", &self.conf(Some(&self.prev)), cni_args)
            .result()
    }

    fn snapshot(&self) -> NetSnapshot {
        NetSnapshot::take_with(&self.pod, false)
    }

    fn assert_back_to(&self, before: &NetSnapshot, what: &str) {
        assert_eq!(
            before.diff(&self.snapshot()),
            Vec::<String>::new(),
            "{what}: the pod differs"
        );
    }
}

const NAMED: &str = "TC_REDIRECT_TAP_NAME=vmtap;TC_REDIRECT_TAP_UID=107;TC_REDIRECT_TAP_GID=108";

#[test]
fn del_finds_everything_with_or_without_prev_result_or_namespace() {
    if !require_root("del_finds_everything_with_or_without_prev_result_or_namespace") {
        return;
    }
    let site = Site::new("trt-del");
    let before = site.snapshot();

    // With the result, as a runtime's DEL.
    let r = site.add(NAMED);
    assert!(site.pod.link("vmtap").is_some());
    site.call("DEL", &site.conf(Some(&r)), NAMED)
        .assert_silent_ok();
    site.assert_back_to(&before, "DEL with prevResult");

    // Without prevResult or CNI_ARGS (the alias finds the tap), twice.
    site.add(NAMED);
    for _ in 0..2 {
        site.call("DEL", &site.conf(None), "").assert_silent_ok();
        site.assert_back_to(&before, "DEL without prevResult");
    }

    // A kernel-named tap, and DEL with an unusable prevResult.
    let r = site.add("");
    assert_eq!(r["interfaces"][3]["name"], "tap0", "{r}");
    let mut bad = site.conf(None);
    bad["prevResult"] = json!({"ips": "garbage"});
    site.call("DEL", &bad, "TC_REDIRECT_TAP_UID=garbage")
        .assert_silent_ok();
    site.assert_back_to(&before, "DEL with garbage");

    // Another attachment's tap in the same pod stays.
    let other = site.call_with(
        &bin("tc-redirect-tap"),
        "ADD",
        Some(&site.pod),
        &json!({"cniVersion": "1.1.0", "name": "othernet", "type": "tc-redirect-tap",
                "prevResult": site.prev}),
        &[("CNI_ARGS", "TC_REDIRECT_TAP_NAME=othertap")],
    );
    let other = other.result();
    site.add(NAMED);
    site.call("DEL", &site.conf(None), "").assert_silent_ok();
    assert!(site.pod.link("vmtap").is_none());
    let t = tap_link(&site.pod, "othertap", "the other attachment's tap");
    assert_eq!(t["ifalias"], "tc-redirect-tap/othernet/vm-7/eth0");
    let filters = site.snapshot().filters;
    assert_eq!(filters, {
        let mut v = vec![
            redirect_line("eth0", "othertap"),
            redirect_line("othertap", "eth0"),
        ];
        v.sort();
        v
    });
    site.call_with(
        &bin("tc-redirect-tap"),
        "DEL",
        Some(&site.pod),
        &json!({"cniVersion": "1.1.0", "name": "othernet", "type": "tc-redirect-tap",
                "prevResult": other}),
        &[],
    )
    .assert_silent_ok();
    site.assert_back_to(&before, "both DELs");

    // No namespace: an empty CNI_NETNS, then one that is gone.
    site.call_with(&bin("tc-redirect-tap"), "DEL", None, &site.conf(None), &[])
        .assert_silent_ok();
    let r = site.add(NAMED);
    let gone = Netns::new("trt-del-gone");
    let gone_path = gone.path();
    drop(gone);
    assert!(!gone_path.exists());
    let out = PluginCall {
        node: &site.node.ns,
        plugin: &bin("tc-redirect-tap"),
        cni_path: "",
        command: "DEL",
        netns: Some(gone_path),
        container_id: CID,
        conf: &site.conf(Some(&r)),
        extra: &[],
    }
    .run();
    out.assert_silent_ok();
}

#[test]
fn del_removes_a_killed_adds_pieces_and_a_tap_of_awslabs_plugin() {
    if !require_root("del_removes_a_killed_adds_pieces_and_a_tap_of_awslabs_plugin") {
        return;
    }
    let site = Site::new("trt-killed");
    let before = site.snapshot();
    // Killed at each step: no result, the runtime's DEL has none either.
    for point in fault_points_in("plugins/tc-redirect-tap")
        .iter()
        .filter(|p| !p.contains("del-"))
    {
        let out = site.call_with(
            &bin("tc-redirect-tap"),
            "ADD",
            Some(&site.pod),
            &site.conf(Some(&site.prev)),
            &[("CNI_ARGS", NAMED), ("CNI_FAULT_POINT", point)],
        );
        assert_eq!(out.exit_code, -1, "{point}: not killed: {out:?}");
        site.call("DEL", &site.conf(None), "").assert_silent_ok();
        site.assert_back_to(&before, &format!("killed at {point}, then DEL"));
    }
    // A DEL killed after the filters: the next DEL finds the tap by its
    // alias and the veth's redirects are gone already.
    site.add(NAMED);
    let out = site.call_with(
        &bin("tc-redirect-tap"),
        "DEL",
        Some(&site.pod),
        &site.conf(None),
        &[("CNI_FAULT_POINT", "tc-redirect-tap/del-filters")],
    );
    assert_eq!(out.exit_code, -1, "{out:?}");
    assert!(site.pod.link("vmtap").is_some());
    site.call("DEL", &site.conf(None), "").assert_silent_ok();
    site.assert_back_to(&before, "DEL killed, DEL again");

    // awslabs' plugin's tap (no alias), as its ADD leaves it, goes by the
    // name in prevResult; the veth's redirect and qdisc with it.
    let eth0_mac = site.pod.link("eth0").unwrap()["address"].clone();
    for cmd in [
        "ip tuntap add dev tap0 mode tap vnet_hdr",
        "ip link set tap0 up",
        "tc qdisc add dev tap0 ingress",
        "tc qdisc add dev eth0 ingress",
        "tc filter add dev tap0 parent ffff: protocol all u32 match u32 0 0 action mirred egress redirect dev eth0",
        "tc filter add dev eth0 parent ffff: protocol all u32 match u32 0 0 action mirred egress redirect dev tap0",
    ] {
        run_ok(site.pod.command("sh").args(["-c", cmd]));
    }
    let mut prev: Value = site.prev.clone();
    let ifs = prev["interfaces"].as_array_mut().unwrap();
    ifs.push(json!({"name": "tap0", "sandbox": site.pod.path()}));
    ifs.push(json!({"name": "tap0", "mac": eth0_mac, "sandbox": CID}));
    // CHECK reads it as its own.
    site.call("CHECK", &site.conf(Some(&prev)), "")
        .assert_silent_ok();
    site.call("DEL", &site.conf(Some(&prev)), "")
        .assert_silent_ok();
    site.assert_back_to(&before, "awslabs' tap, DEL");

    // Without prevResult such a tap is nobody's: it stays (as it would
    // with awslabs' plugin), and so does a tap another attachment marks.
    run_ok(
        site.pod
            .command("ip")
            .args(["tuntap", "add", "dev", "tap0", "mode", "tap"]),
    );
    run_ok(
        site.pod
            .command("ip")
            .args(["tuntap", "add", "dev", "tap1", "mode", "tap"]),
    );
    site.pod.ip(&[
        "link",
        "set",
        "tap1",
        "alias",
        "tc-redirect-tap/other/vm-7/eth0",
    ]);
    let mut named_tap1 = site.prev.clone();
    let ifs = named_tap1["interfaces"].as_array_mut().unwrap();
    ifs.push(json!({"name": "tap1", "sandbox": site.pod.path()}));
    ifs.push(json!({"name": "tap1", "sandbox": CID}));
    site.call("DEL", &site.conf(None), "").assert_silent_ok();
    site.call("DEL", &site.conf(Some(&named_tap1)), "")
        .assert_silent_ok();
    assert!(site.pod.link("tap0").is_some() && site.pod.link("tap1").is_some());
}

/// One way to break what ADD made, and what CHECK says.
struct Break {
    what: &'static str,
    /// Shell commands in the pod (`TAP` is the tap's name).
    cmds: &'static [&'static str],
    /// Something in the error (code 102 unless `code` says otherwise).
    needle: &'static str,
}

#[test]
fn check_catches_each_missing_piece() {
    if !require_root("check_catches_each_missing_piece") {
        return;
    }
    let site = Site::new("trt-check");
    let before = site.snapshot();
    let r = site.add(NAMED);
    site.call("CHECK", &site.conf(Some(&r)), NAMED)
        .assert_silent_ok();
    // Without CNI_ARGS the owner, group and name are not compared.
    site.call("CHECK", &site.conf(Some(&r)), "")
        .assert_silent_ok();
    for (args, needle) in [
        (
            "TC_REDIRECT_TAP_UID=108",
            "owner 107, TC_REDIRECT_TAP_UID says 108",
        ),
        (
            "TC_REDIRECT_TAP_GID=0",
            "group 108, TC_REDIRECT_TAP_GID says 0",
        ),
        (
            "TC_REDIRECT_TAP_NAME=other",
            "TC_REDIRECT_TAP_NAME says \"other\"",
        ),
    ] {
        site.call("CHECK", &site.conf(Some(&r)), args)
            .assert_error(102, needle);
    }
    site.call("CHECK", &site.conf(None), "")
        .assert_error(7, "prevResult");
    site.call("CHECK", &site.conf(Some(&site.prev)), "")
        .assert_error(102, "no VM interface");
    site.call("DEL", &site.conf(Some(&r)), "")
        .assert_silent_ok();
    let breaks = [
        Break {
            what: "the veth's redirect",
            cmds: &["tc filter del dev eth0 ingress"],
            needle: "\"eth0\" has no filter redirecting every frame to \"vmtap\"",
        },
        Break {
            what: "the tap's redirect",
            cmds: &["tc filter del dev vmtap ingress"],
            needle: "\"vmtap\" has no filter redirecting every frame to \"eth0\"",
        },
        Break {
            what: "the veth's qdisc",
            cmds: &["tc qdisc del dev eth0 ingress"],
            needle: "\"eth0\" has no ingress qdisc",
        },
        Break {
            what: "the tap's qdisc",
            cmds: &["tc qdisc del dev vmtap ingress"],
            needle: "\"vmtap\" has no ingress qdisc",
        },
        Break {
            what: "a redirect elsewhere",
            cmds: &[
                "tc filter del dev eth0 ingress",
                "ip tuntap add dev decoy mode tap",
                "tc filter add dev eth0 parent ffff: protocol all u32 match u32 0 0 action mirred egress redirect dev decoy",
            ],
            needle: "\"eth0\" has no filter redirecting every frame to \"vmtap\"",
        },
        Break {
            what: "the tap",
            cmds: &["ip link del vmtap"],
            needle: "tap \"vmtap\" is not in the container's namespace",
        },
        Break {
            what: "a tun in its place",
            cmds: &["ip link del vmtap", "ip tuntap add dev vmtap mode tun"],
            needle: "\"vmtap\" in the container's namespace is not a tap",
        },
        Break {
            what: "the tap's MAC",
            cmds: &["ip link set vmtap address 0a:58:00:00:00:99"],
            needle: "tap \"vmtap\" has MAC 0a:58:00:00:00:99",
        },
        Break {
            what: "the tap's MTU",
            cmds: &["ip link set vmtap mtu 1400"],
            needle: "tap \"vmtap\" has MTU 1400",
        },
        Break {
            what: "the veth's MAC",
            cmds: &["ip link set eth0 address 0a:58:00:00:00:98"],
            needle: "\"eth0\" has MAC 0a:58:00:00:00:98",
        },
    ];
    for b in breaks {
        let r = site.add(NAMED);
        site.call("CHECK", &site.conf(Some(&r)), NAMED)
            .assert_silent_ok();
        for cmd in b.cmds {
            run_ok(site.pod.command("sh").args(["-c", cmd]));
        }
        let out = site.call("CHECK", &site.conf(Some(&r)), NAMED);
        assert_ne!(out.exit_code, 0, "{}: {out:?}", b.what);
        let v = out.json();
        assert_eq!(v["code"], 102, "{}: {v}", b.what);
        assert!(
            v["msg"].as_str().unwrap().contains(b.needle),
            "{}: {v}",
            b.what
        );
        // The decoy first: DEL then takes its redirect for a dead one.
        let _ = site
            .pod
            .command("ip")
            .args(["link", "del", "decoy"])
            .output();
        site.call("DEL", &site.conf(Some(&r)), "")
            .assert_silent_ok();
        // A tun in the tap's place is nobody's: DEL leaves it.
        let _ = site
            .pod
            .command("ip")
            .args(["link", "del", "vmtap"])
            .output();
        site.assert_back_to(&before, b.what);
    }
}

#[test]
fn a_foreign_ingress_qdisc_or_clsact_on_the_veth_stays() {
    if !require_root("a_foreign_ingress_qdisc_or_clsact_on_the_veth_stays") {
        return;
    }
    let site = Site::new("trt-foreign");
    let drop_ip =
        "tc filter add dev eth0 {parent} prio 5 protocol ip u32 match ip dst 10.0.0.0/8 flowid 1:1";
    for (qdisc, parent, foreign_filter) in [
        ("ingress", "parent ffff:", true),
        ("clsact", "ingress", true),
        ("clsact", "ingress", false),
    ] {
        let what = format!("{qdisc}, a filter of its own: {foreign_filter}");
        run_ok(
            site.pod
                .command("tc")
                .args(["qdisc", "add", "dev", "eth0", qdisc]),
        );
        if foreign_filter {
            run_ok(
                site.pod
                    .command("sh")
                    .args(["-c", &drop_ip.replace("{parent}", parent)]),
            );
        }
        let before = site.snapshot();
        let r = site.add(NAMED);
        // The kernel gives the redirect 49152, after the filters already
        // there (as awslabs' plugin's): theirs still run first.
        let ours = redirect_line("eth0", "vmtap");
        let filters = site.snapshot().filters;
        assert!(filters.contains(&ours), "{what}: {filters:?}");
        site.call("CHECK", &site.conf(Some(&r)), NAMED)
            .assert_silent_ok();
        site.call("DEL", &site.conf(Some(&r)), "")
            .assert_silent_ok();
        site.assert_back_to(&before, &what);
        run_ok(
            site.pod
                .command("tc")
                .args(["qdisc", "del", "dev", "eth0", qdisc]),
        );
    }
}

#[test]
fn failed_adds_leave_the_pod_unchanged() {
    if !require_root("failed_adds_leave_the_pod_unchanged") {
        return;
    }
    let site = Site::new("trt-fail");
    // A link already has the name.
    site.pod.ip(&["link", "add", "taken0", "type", "bridge"]);
    let before = site.snapshot();
    site.call(
        "ADD",
        &site.conf(Some(&site.prev)),
        "TC_REDIRECT_TAP_NAME=taken0",
    )
    .assert_error(100, "create tap \"taken0\" (TC_REDIRECT_TAP_NAME)");
    site.assert_back_to(&before, "name taken");
    // An MTU no tap can have (a veth's 65535; a tap's most is 65521).
    site.pod.ip(&["link", "set", "eth0", "mtu", "65535"]);
    let before = site.snapshot();
    let out = site.call("ADD", &site.conf(Some(&site.prev)), NAMED);
    out.assert_error(100, "set mtu 65535");
    site.assert_back_to(&before, "MTU refused");
    site.pod.ip(&["link", "set", "eth0", "mtu", "1500"]);
    // The veth gone though prevResult lists it.
    let mut prev = site.prev.clone();
    prev["interfaces"][2]["name"] = json!("eth1");
    let out = call_plugin(
        Some(&site.node.ns),
        &bin("tc-redirect-tap"),
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", CID),
            ("CNI_NETNS", site.pod.path().to_str().unwrap()),
            ("CNI_IFNAME", "eth1"),
        ],
        &site.conf(Some(&prev)).to_string(),
    );
    out.assert_error(100, "\"eth1\" (CNI_IFNAME, listed in prevResult)");
    site.assert_back_to(&before, "no eth1");
}

#[test]
fn gc_and_status() {
    if !require_root("gc_and_status") {
        return;
    }
    let site = Site::new("trt-gc");
    site.add(NAMED);
    let before = site.snapshot();
    let gc = json!({"cniVersion": "1.1.0", "name": "vmnet", "type": "tc-redirect-tap",
        "cni.dev/valid-attachments": []});
    let out = call_plugin(
        Some(&site.node.ns),
        &bin("tc-redirect-tap"),
        &[("CNI_COMMAND", "GC")],
        &gc.to_string(),
    );
    out.assert_silent_ok();
    // GC never reaches into a pod: the tap of a "stale" attachment is the
    // pod's, and goes with it.
    site.assert_back_to(&before, "GC");
    let status = json!({"cniVersion": "1.1.0", "name": "vmnet", "type": "tc-redirect-tap"});
    call_plugin(
        Some(&site.node.ns),
        &bin("tc-redirect-tap"),
        &[("CNI_COMMAND", "STATUS")],
        &status.to_string(),
    )
    .assert_silent_ok();
    // With /dev/net/tun out of sight (a mount namespace of its own), no
    // tap can be made: code 50.
    let mut child = site
        .node
        .ns
        .command("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount -t tmpfs none /dev/net && exec \"$0\"",
        ])
        .arg(bin("tc-redirect-tap"))
        .env("CNI_COMMAND", "STATUS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(status.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("an error JSON");
    assert_eq!(v["code"], 50, "{v}");
    assert!(v["msg"].as_str().unwrap().contains("/dev/net/tun"), "{v}");
    // And the 1.0.0 verbs only up to 1.0.0: GC is 1.1.0's.
    let old = json!({"cniVersion": "1.0.0", "name": "vmnet", "type": "tc-redirect-tap"});
    let out = call_plugin(
        Some(&site.node.ns),
        &bin("tc-redirect-tap"),
        &[("CNI_COMMAND", "GC")],
        &old.to_string(),
    );
    out.assert_error(1, "GC");
}
