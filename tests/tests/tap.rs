//! The tap plugin, black box, in throwaway namespaces: the plugin runs in a
//! node namespace and makes the tap in a pod namespace. Real traffic goes
//! through the tap: a small userspace "VM" (Python on `/dev/net/tun`)
//! attaches to it as its owner and answers ARP and ICMP echo for its
//! address, so the pod pings the VM through the tap, and a namespace on a
//! bridge in the pod pings it through the bridge port. The Go reference
//! 1.1.1 has no tap plugin, so its behaviour is checked against upstream
//! v1.9's sources (see plugins/tap/README.md).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use tests::*;

/// A VM's network card: becomes user and group `argv[1]` (which drops
/// every capability: only the tap's owner may attach then), attaches to
/// tap `argv[2]` (with `IFF_MULTI_QUEUE` when `argv[5]` is `mq`), says
/// `ready`, and answers ARP requests and ICMP echo requests for IPv4
/// address `argv[3]` with MAC `argv[4]`. An attach the kernel refuses
/// exits 3 with the error.
const VM: &str = r#"
import fcntl, os, struct, sys, socket
uid, name = int(sys.argv[1]), sys.argv[2]
ip, mac = socket.inet_aton(sys.argv[3]), bytes.fromhex(sys.argv[4].replace(':', ''))
flags = 0x0002 | 0x1000
if sys.argv[5] == 'mq':
    flags |= 0x0100
fd = os.open('/dev/net/tun', os.O_RDWR)
os.setgroups([])
os.setgid(uid)
os.setuid(uid)
try:
    fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH22x', name.encode(), flags))
except OSError as e:
    print('attach failed: %s' % e, flush=True)
    sys.exit(3)
print('ready', flush=True)
def csum(b):
    if len(b) % 2:
        b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return struct.pack('!H', ~s & 0xffff)
while True:
    f = os.read(fd, 65536)
    src, kind = f[6:12], f[12:14]
    if kind == b'\x08\x06' and f[20:22] == b'\x00\x01' and f[38:42] == ip:
        sha, spa = f[22:28], f[28:32]
        os.write(fd, sha + mac + b'\x08\x06\x00\x01\x08\x00\x06\x04\x00\x02' + mac + ip + sha + spa)
    elif kind == b'\x08\x00' and f[23] == 1 and f[30:34] == ip:
        h = bytearray(f[14:14 + (f[14] & 15) * 4])
        icmp = bytearray(f[14 + len(h):])
        if icmp[0] != 8:
            continue
        icmp[0], icmp[2:4] = 0, b'\0\0'
        icmp[2:4] = csum(bytes(icmp))
        h[12:16], h[16:20] = h[16:20], h[12:16]
        h[10:12] = b'\0\0'
        h[10:12] = csum(bytes(h))
        os.write(fd, src + mac + b'\x08\x00' + bytes(h) + bytes(icmp))
"#;

/// A VM process attached to a tap, killed on drop.
struct Vm(Child);

impl Vm {
    /// Attaches to `tap` in `pod` as user and group `uid` (no capability
    /// left: only the tap's owner may attach), answering for `ip`/`mac`.
    /// `Err` with what the VM said when the kernel refused the attach.
    fn attach(
        pod: &Netns,
        uid: u32,
        tap: &str,
        ip: &str,
        mac: &str,
        mq: bool,
    ) -> Result<Vm, String> {
        let id = uid.to_string();
        let mut cmd = pod.command("python3");
        cmd.args([
            "-c",
            VM,
            id.as_str(),
            tap,
            ip,
            mac,
            if mq { "mq" } else { "sq" },
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("start the VM");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the VM");
        if line.trim() == "ready" {
            return Ok(Vm(child));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(line.trim().to_string())
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The user the VM runs as: `nobody`.
const VM_UID: u32 = 65534;
const VM_MAC: &str = "0a:58:0a:4d:00:32";

/// A node with a `CNI_PATH` of our plugins plus any script a test adds,
/// and a lease dir.
struct Site {
    node: Node,
    path: TempDir,
    leases: TempDir,
}

impl Site {
    fn new(tag: &str) -> Site {
        let path = TempDir::new(&format!("path-{tag}"));
        for p in ["tap", "host-local", "loopback"] {
            std::os::unix::fs::symlink(bin(p), path.path().join(p)).expect("symlink");
        }
        Site {
            node: Node::new(tag),
            path,
            leases: TempDir::new(&format!("leases-{tag}")),
        }
    }

    /// A tap for a VM in 10.77.0.0/24 and fd77::/64, with `extra` on top.
    fn conf(&self, net: &str, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.1.0",
            "name": net,
            "type": "tap",
            "ipam": {
                "type": "host-local",
                "dataDir": self.leases.path(),
                "ranges": [[{"subnet": "10.77.0.0/24", "rangeStart": "10.77.0.10"}],
                           [{"subnet": "fd77::/64"}]],
                "routes": [{"dst": "0.0.0.0/0"}]
            }
        });
        merge(&mut c, extra);
        c
    }

    fn call_env(
        &self,
        cmd: &str,
        pod: Option<&Netns>,
        cid: &str,
        conf: &Value,
        extra: &[(&str, &str)],
    ) -> PluginOutput {
        PluginCall {
            node: &self.node.ns,
            plugin: &bin("tap"),
            cni_path: &self.path.path().display().to_string(),
            command: cmd,
            netns: pod.map(|p| p.path()),
            container_id: cid,
            conf,
            extra,
        }
        .run()
    }

    fn call(&self, cmd: &str, pod: Option<&Netns>, cid: &str, conf: &Value) -> PluginOutput {
        self.call_env(cmd, pod, cid, conf, &[])
    }

    fn add(&self, pod: &Netns, cid: &str, conf: &Value) -> Value {
        self.call("ADD", Some(pod), cid, conf).result()
    }

    fn del(&self, pod: Option<&Netns>, cid: &str, conf: &Value) {
        self.call("DEL", pod, cid, conf).assert_silent_ok();
    }

    fn leases(&self, net: &str) -> Vec<String> {
        leases_in(&self.leases.path().join(net))
    }

    fn script(&self, name: &str, body: &str) -> PathBuf {
        self.path
            .write_executable(name, &format!("#!/bin/sh\n{body}\n"))
    }
}

fn with_prev(conf: &Value, result: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = result.clone();
    c
}

/// The tap's settings as `ip -d link` shows them (`info_data` of kind tun).
fn tun_data(pod: &Netns, dev: &str) -> Value {
    let l = pod
        .link(dev)
        .unwrap_or_else(|| panic!("no {dev} in {}", pod.name()));
    assert_eq!(l["linkinfo"]["info_kind"], "tun", "{l}");
    l["linkinfo"]["info_data"].clone()
}

#[test]
fn tap_answers_version() {
    let out = call_plugin(None, &bin("tap"), &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json()["supportedVersions"],
        json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
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

/// `verb` (add, check, del) of container `id` in `pod` through `client`.
fn run(
    client: Client,
    tool: &Path,
    node: &Node,
    net: &str,
    verb: &str,
    pod: &Netns,
    id: &str,
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
        Client::GoCnitool => {
            node.go_cnitool(tool, &[verb, net, &netns], &[("CNI_CONTAINERID", id)])
        }
        Client::Cnitool => {
            node.cnitool_with(tool, &[verb, net, &netns], &[("CNI_CONTAINERID", id)])
        }
    }
}

/// A VM network through each runtime: the tap in the pod with its owner,
/// group, queues, MTU and MAC; the VM attaches as the owner (another user
/// cannot, nor can a single-queue attach) and the pod pings it through
/// the tap; CHECK (where the runtime has it), DEL, nothing left.
#[test]
fn a_vm_behind_the_tap_answers_the_pod_through_every_runtime() {
    if !require_root("a_vm_behind_the_tap_answers_the_pod_through_every_runtime") {
        return;
    }
    for (client, tool) in clients() {
        let tag = format!("tap-vm-{client:?}").to_lowercase();
        let site = Site::new(&tag);
        let net = "vmnet";
        let mut plugin = site.conf(
            net,
            json!({"owner": VM_UID, "group": VM_UID, "multiQueue": true, "mtu": 1400,
                   "mac": "0a:58:0a:4d:00:0a"}),
        );
        let obj = plugin.as_object_mut().unwrap();
        obj.remove("cniVersion");
        obj.remove("name");
        site.node.write_conf(
            "10-vmnet.conflist",
            &json!({"cniVersion": "1.0.0", "name": net, "plugins": [plugin]}),
        );
        let what = format!("{client:?}");
        let pod = Netns::new(&format!("pod-{tag}"));
        let node_before = NetSnapshot::take(&site.node.ns);
        let out = run(client, &tool, &site.node, net, "add", &pod, "vm-1");
        assert_eq!(out.exit_code, 0, "{what}: ADD: {out:?}");

        let data = tun_data(&pod, "eth0");
        assert_eq!(
            (
                &data["type"],
                &data["pi"],
                &data["vnet_hdr"],
                &data["multi_queue"],
                &data["persist"]
            ),
            (
                &json!("tap"),
                &json!(false),
                &json!(true),
                &json!(true),
                &json!(true)
            ),
            "{what}: {data}"
        );
        // `ip` names them: 65534 is nobody, nogroup.
        assert_eq!(
            (&data["user"], &data["group"]),
            (&json!("nobody"), &json!("nogroup")),
            "{what}"
        );
        let link = pod.link("eth0").unwrap();
        assert_eq!(
            (&link["mtu"], &link["address"]),
            (&json!(1400), &json!("0a:58:0a:4d:00:0a"))
        );
        assert_eq!(global_addrs(&pod, "eth0")[0], "10.77.0.10/24", "{what}");
        assert!(pod.link_is_up("eth0"), "{what}");
        // Nothing on the node but what host-local and the runtime keep.
        assert_eq!(NetSnapshot::take(&site.node.ns), node_before, "{what}");
        if client != Client::Cri {
            let out = run(client, &tool, &site.node, net, "check", &pod, "vm-1");
            assert_eq!(out.exit_code, 0, "{what}: CHECK: {out:?}");
        }

        // Only the owner may attach, and only with the tap's queue mode.
        let e = Vm::attach(&pod, 65533, "eth0", "10.77.0.50", VM_MAC, true).err();
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("Operation not permitted")),
            "{what}: another user attached: {e:?}"
        );
        let e = Vm::attach(&pod, VM_UID, "eth0", "10.77.0.50", VM_MAC, false).err();
        assert!(
            e.as_deref().is_some_and(|e| e.contains("Invalid argument")),
            "{what}: a single-queue attach: {e:?}"
        );
        let vm = Vm::attach(&pod, VM_UID, "eth0", "10.77.0.50", VM_MAC, true)
            .unwrap_or_else(|e| panic!("{what}: the owner cannot attach: {e}"));
        assert_ping(&pod, "10.77.0.50");
        drop(vm);

        let out = run(client, &tool, &site.node, net, "del", &pod, "vm-1");
        assert_eq!(out.exit_code, 0, "{what}: DEL: {out:?}");
        assert!(pod.link("eth0").is_none(), "{what}: the tap is left");
        assert_eq!(site.leases(net), Vec::<String>::new(), "{what}");
        assert_eq!(
            tree(&site.node.shared_cache_dir().join("results")),
            Vec::<String>::new()
        );
    }
}

#[test]
fn a_tap_on_a_bridge_in_the_pod_carries_the_lans_traffic() {
    if !require_root("a_tap_on_a_bridge_in_the_pod_carries_the_lans_traffic") {
        return;
    }
    let site = Site::new("tap-br");
    let pod = Netns::new("pod-tap-br");
    let lan = Netns::new("lan-tap-br");
    pod.ip(&["link", "add", "br1", "type", "bridge"]);
    pod.ip(&["link", "set", "br1", "up"]);
    pod.ip(&[
        "link",
        "add",
        "lan0",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        lan.name(),
    ]);
    pod.ip(&["link", "set", "lan0", "master", "br1", "up"]);
    lan.ip(&["addr", "add", "10.78.0.2/24", "dev", "eth0"]);
    lan.ip(&["link", "set", "eth0", "up"]);
    let mut conf = site.conf("brnet", json!({"bridge": "br1", "owner": VM_UID}));
    conf.as_object_mut().unwrap().remove("ipam");

    let r = site
        .call_env("ADD", Some(&pod), "vm-br", &conf, &[("CNI_IFNAME", "tap0")])
        .result();
    assert_eq!(r["ips"], Value::Null, "layer 2 only: {r}");
    assert_eq!(r["interfaces"][0]["name"], "tap0");
    let tap = pod.link("tap0").unwrap();
    assert_eq!(tap["master"], "br1");
    assert!(pod.link_is_up("tap0"));
    let check = |conf: &Value| {
        site.call_env(
            "CHECK",
            Some(&pod),
            "vm-br",
            &with_prev(conf, &r),
            &[("CNI_IFNAME", "tap0")],
        )
    };
    check(&conf).assert_silent_ok();

    let vm = Vm::attach(&pod, VM_UID, "tap0", "10.78.0.50", VM_MAC, false).expect("attach");
    assert_ping(&lan, "10.78.0.50");
    drop(vm);

    // CHECK sees the tap leave the bridge.
    pod.ip(&["link", "set", "tap0", "nomaster"]);
    check(&conf).assert_error(102, "tap \"tap0\" is not a port of bridge \"br1\"");
    let mut other = conf.clone();
    other.as_object_mut().unwrap().remove("bridge");
    check(&other).assert_silent_ok();
    pod.ip(&["link", "set", "tap0", "master", "br1"]);
    check(&other).assert_error(102, "is a port of a bridge, and the config names none");

    site.call_env("DEL", Some(&pod), "vm-br", &conf, &[("CNI_IFNAME", "tap0")])
        .assert_silent_ok();
    assert!(pod.link("tap0").is_none());
    assert!(
        pod.link("br1").is_some(),
        "the bridge is the pod's, and stays"
    );

    // A bridge that is not there, or not a bridge: code 7, nothing made.
    for (name, needle) in [
        (
            "br9",
            "bridge: \"br9\" not found in the container's network namespace",
        ),
        (
            "lan0",
            "bridge: \"lan0\" in the container's network namespace is not a bridge",
        ),
    ] {
        let mut c = conf.clone();
        c["bridge"] = json!(name);
        let before = NetSnapshot::take_with(&pod, false);
        site.call_env("ADD", Some(&pod), "vm-br", &c, &[("CNI_IFNAME", "tap0")])
            .assert_error(7, needle);
        assert_eq!(NetSnapshot::take_with(&pod, false), before);
    }
}

#[test]
fn mac_sources_layer_2_del_and_check() {
    if !require_root("mac_sources_layer_2_del_and_check") {
        return;
    }
    let site = Site::new("tap-mac");
    let base = site.conf("macnet", json!({"mac": "0a:00:00:00:00:01"}));
    let pod = Netns::new("pod-tap-mac");
    // mac < CNI_ARGS MAC < args.cni.mac < runtimeConfig.mac. IgnoreUnknown:
    // host-local reads CNI_ARGS too, and knows no MAC.
    let mut args = base.clone();
    args["args"] = json!({"cni": {"mac": "0a:00:00:00:00:03"}});
    let mut rc = args.clone();
    rc["runtimeConfig"] = json!({"mac": "0a:00:00:00:00:04"});
    for (conf, env, want) in [
        (&base, "", "0a:00:00:00:00:01"),
        (
            &base,
            "IgnoreUnknown=1;MAC=0a:00:00:00:00:02",
            "0a:00:00:00:00:02",
        ),
        (
            &args,
            "IgnoreUnknown=1;MAC=0a:00:00:00:00:02",
            "0a:00:00:00:00:03",
        ),
        (
            &rc,
            "IgnoreUnknown=1;MAC=0a:00:00:00:00:02",
            "0a:00:00:00:00:04",
        ),
    ] {
        let r = site
            .call_env("ADD", Some(&pod), "ctr-mac", conf, &[("CNI_ARGS", env)])
            .result();
        assert_eq!(r["interfaces"][0]["mac"], want, "{env}: {r}");
        assert_eq!(pod.link("eth0").unwrap()["address"], want);
        assert_eq!(
            r["interfaces"][0]["sandbox"],
            pod.path().display().to_string()
        );
        assert_eq!(r["ips"][0]["interface"], 0);
        site.call_env(
            "CHECK",
            Some(&pod),
            "ctr-mac",
            &with_prev(conf, &r),
            &[("CNI_ARGS", env)],
        )
        .assert_silent_ok();
        site.del(Some(&pod), "ctr-mac", conf);
        assert!(pod.link("eth0").is_none());
    }
    // The mac capability through our cnitool (CAP_ARGS).
    let mut plugin = site.conf("macnet", json!({"capabilities": {"mac": true}}));
    plugin.as_object_mut().unwrap().remove("cniVersion");
    plugin.as_object_mut().unwrap().remove("name");
    site.node.write_conf(
        "10-macnet.conflist",
        &json!({"cniVersion": "1.0.0", "name": "macnet", "plugins": [plugin]}),
    );
    let netns = pod.path().display().to_string();
    let env = [
        ("CNI_CONTAINERID", "ctr-cap"),
        ("CAP_ARGS", r#"{"mac":"0a:00:00:00:00:05"}"#),
    ];
    let out = site
        .node
        .cnitool_with(&bin("cnitool"), &["add", "macnet", &netns], &env);
    assert_eq!(
        out.json()["interfaces"][0]["mac"],
        "0a:00:00:00:00:05",
        "{out:?}"
    );
    let out = site
        .node
        .cnitool_with(&bin("cnitool"), &["del", "macnet", &netns], &env);
    out.assert_silent_ok();

    // Layer 2: no IPAM, the tap just comes up.
    let mut l2 = base.clone();
    l2["ipam"] = json!({});
    let r = site.add(&pod, "ctr-l2", &l2);
    assert_eq!(r["ips"], Value::Null, "{r}");
    assert!(pod.link_is_up("eth0"));
    assert_eq!(global_addrs(&pod, "eth0"), Vec::<String>::new());
    site.call("CHECK", Some(&pod), "ctr-l2", &with_prev(&l2, &r))
        .assert_silent_ok();

    // CHECK: a veth under the tap's name is no tap.
    site.del(Some(&pod), "ctr-l2", &l2);
    let r = site.add(&pod, "ctr-chk", &base);
    let chk = with_prev(&base, &r);
    site.call("CHECK", Some(&pod), "ctr-chk", &chk)
        .assert_silent_ok();
    let mut mq = chk.clone();
    mq["multiQueue"] = json!(true);
    site.call("CHECK", Some(&pod), "ctr-chk", &mq)
        .assert_error(102, "tap \"eth0\" multi_queue is false, multiQueue is true");
    let mut owned = chk.clone();
    owned["owner"] = json!(1000);
    site.call("CHECK", Some(&pod), "ctr-chk", &owned)
        .assert_error(102, "tap \"eth0\" has owner none, the config says 1000");
    pod.ip(&["addr", "flush", "dev", "eth0"]);
    site.call("CHECK", Some(&pod), "ctr-chk", &chk)
        .assert_error(102, "address 10.77.0.");
    pod.ip(&["link", "del", "eth0"]);
    pod.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
    ]);
    site.call("CHECK", Some(&pod), "ctr-chk", &chk)
        .assert_error(102, "container interface \"eth0\" is not a tun (kind veth)");
    pod.ip(&["link", "del", "eth0"]);
    // The tap is gone (deleted by hand): DEL still releases the lease; and
    // DEL without a netns path, then with the namespace gone.
    site.del(Some(&pod), "ctr-chk", &base);
    let r = site.add(&pod, "ctr-gone", &base);
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    let path = pod.path();
    drop(pod);
    site.call("DEL", None, "ctr-gone", &base).assert_silent_ok();
    let out = PluginCall {
        node: &site.node.ns,
        plugin: &bin("tap"),
        cni_path: &site.path.path().display().to_string(),
        command: "DEL",
        netns: Some(path),
        container_id: "ctr-gone",
        conf: &base,
        extra: &[],
    }
    .run();
    out.assert_silent_ok();
    assert_eq!(site.leases("macnet"), Vec::<String>::new());
}

#[test]
fn selinux_context_is_refused_here_and_nothing_changes() {
    if !require_root("selinux_context_is_refused_here_and_nothing_changes") {
        return;
    }
    assert!(
        !Path::new("/sys/fs/selinux/enforce").exists(),
        "this test expects a machine without SELinux"
    );
    let site = Site::new("tap-selinux");
    let pod = Netns::new("pod-tap-selinux");
    let conf = site.conf(
        "senet",
        json!({"selinuxContext": "system_u:system_r:container_t:s0"}),
    );
    let before = (
        NetSnapshot::take(&site.node.ns),
        NetSnapshot::take_with(&pod, false),
    );
    site.call("ADD", Some(&pod), "ctr-se", &conf).assert_error(
        2,
        "unsupported field \"selinuxContext\": \"system_u:system_r:container_t:s0\": \
         SELinux is not enabled on this node",
    );
    assert_eq!(
        (
            NetSnapshot::take(&site.node.ns),
            NetSnapshot::take_with(&pod, false)
        ),
        before
    );
    assert_eq!(site.leases("senet"), Vec::<String>::new());
    // DEL of the refused ADD is fine (it reads only ipam.type).
    site.del(Some(&pod), "ctr-se", &conf);
}

#[test]
fn failures_leave_nothing_gc_and_status() {
    if !require_root("failures_leave_nothing_gc_and_status") {
        return;
    }
    let site = Site::new("tap-gc");
    let conf = site.conf("gcnet", json!({}));
    let (p1, p2) = (Netns::new("pod-tap-gc1"), Netns::new("pod-tap-gc2"));
    site.add(&p1, "ctr-keep", &conf);
    site.add(&p2, "ctr-stale", &conf);
    assert_eq!(site.leases("gcnet").len(), 4);
    site.call("STATUS", None, "", &conf).assert_silent_ok();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-keep", "ifname": "eth0"}]);
    site.call("GC", None, "", &gc).assert_silent_ok();
    assert_eq!(site.leases("gcnet").len(), 2);
    site.del(Some(&p1), "ctr-keep", &conf);
    site.del(Some(&p2), "ctr-stale", &conf);
    let mut l2 = conf.clone();
    l2.as_object_mut().unwrap().remove("ipam");
    site.call("STATUS", None, "", &l2).assert_silent_ok();
    site.call("GC", None, "", &l2).assert_silent_ok();
    site.script(
        "full-ipam",
        r#"echo '{"cniVersion":"1.1.0","code":50,"msg":"no free addresses"}'; exit 1"#,
    );
    let mut full = conf.clone();
    full["ipam"] = json!({"type": "full-ipam"});
    site.call("STATUS", None, "", &full)
        .assert_error(50, "no free addresses");

    // A failing IPAM: the tap goes again, and the IPAM plugin got its DEL.
    let marks = TempDir::new("tap-gc-marks");
    site.script(
        "bad-ipam",
        &format!(
            r#"if [ "$CNI_COMMAND" = DEL ]; then echo "$CNI_CONTAINERID" >> {}/del; exit 0; fi
echo '{{"cniVersion":"1.0.0","code":11,"msg":"pool busy"}}'; exit 1"#,
            marks.path().display()
        ),
    );
    let mut bad = conf.clone();
    bad["ipam"] = json!({"type": "bad-ipam"});
    let before = NetSnapshot::take_with(&p1, false);
    site.call("ADD", Some(&p1), "ctr-bad", &bad)
        .assert_error(11, "pool busy");
    assert_eq!(NetSnapshot::take_with(&p1, false), before);
    assert_eq!(
        std::fs::read_to_string(marks.path().join("del")).unwrap(),
        "ctr-bad\n"
    );
    // The interface name taken in the pod.
    p1.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
    ]);
    site.call("ADD", Some(&p1), "ctr-taken", &conf)
        .assert_error(100, "CNI_IFNAME \"eth0\" already exists");
    assert_eq!(site.leases("gcnet"), Vec::<String>::new());
}
