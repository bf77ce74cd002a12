//! host-local, black box: the built binary against temp `dataDir`s, side by
//! side with the Go reference plugin where behaviour must match. host-local
//! touches nothing but its dataDir, so none of this needs root or a
//! namespace, and nothing here goes near /var/lib/cni.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tests::*;

/// The network name, hence the lease directory under each dataDir.
const NET: &str = "hlnet";
/// host-local never opens the namespace; the skel only wants the variable.
const NETNS: &str = "/run/netns/cnit-host-local-unused";
/// What both plugins speak (Debian's Go plugins stop at 1.0.0).
const V: &str = "1.0.0";

fn ours() -> PathBuf {
    bin("host-local")
}

/// A network: a temp dataDir and the `ipam` object to use with it.
struct Net {
    data: TempDir,
    ipam: Value,
}

impl Net {
    fn new(tag: &str, mut ipam: Value) -> Net {
        let data = TempDir::new(&format!("hl-{tag}"));
        ipam["type"] = json!("host-local");
        ipam["dataDir"] = json!(data.path());
        Net { data, ipam }
    }

    /// `<dataDir>/<network>`.
    fn dir(&self) -> PathBuf {
        self.data.path().join(NET)
    }

    fn conf(&self) -> Value {
        self.conf_v(V)
    }

    fn conf_v(&self, version: &str) -> Value {
        json!({"cniVersion": version, "name": NET, "type": "host-local", "ipam": self.ipam})
    }

    /// Every file of the lease directory with its bytes, but our index
    /// links (checked here: each is its lease under a second name): what
    /// the Go plugin would have written.
    fn files(&self) -> BTreeMap<String, Vec<u8>> {
        let mut files = files_of(&self.dir());
        for link in index_links_in(&self.dir()) {
            files.remove(&link);
        }
        files
    }

    fn names(&self) -> Vec<String> {
        self.files().into_keys().collect()
    }

    fn lease(&self, name: &str) -> String {
        String::from_utf8(std::fs::read(self.dir().join(name)).expect("lease")).expect("utf8")
    }
}

fn files_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    rd.map(|e| {
        let e = e.expect("entry");
        let name = e.file_name().into_string().expect("utf8 name");
        let bytes = std::fs::read(e.path()).unwrap_or_default();
        (name, bytes)
    })
    .collect()
}

/// Runs `plugin` with the verb, attachment and config; `extra` adds env.
fn call(
    plugin: &Path,
    verb: &str,
    id: &str,
    ifname: &str,
    conf: &Value,
    extra: &[(&str, &str)],
) -> PluginOutput {
    let mut env = vec![
        ("CNI_COMMAND", verb),
        ("CNI_CONTAINERID", id),
        ("CNI_NETNS", NETNS),
        ("CNI_IFNAME", ifname),
        ("CNI_PATH", "/nonexistent"),
    ];
    if verb == "GC" || verb == "STATUS" {
        env.retain(|(k, _)| !matches!(*k, "CNI_CONTAINERID" | "CNI_NETNS" | "CNI_IFNAME"));
    }
    env.extend_from_slice(extra);
    call_plugin(None, plugin, &env, &conf.to_string())
}

/// ADD that must succeed; returns the result.
fn add_ok(plugin: &Path, id: &str, conf: &Value, extra: &[(&str, &str)]) -> Value {
    let out = call(plugin, "ADD", id, "eth0", conf, extra);
    assert_eq!(out.exit_code, 0, "ADD {id}: {out:?}");
    out.json()
}

/// The addresses of a result, in order.
fn addrs(result: &Value) -> Vec<String> {
    result["ips"]
        .as_array()
        .expect("ips")
        .iter()
        .map(|ip| ip["address"].as_str().expect("address").to_string())
        .collect()
}

fn ok(out: PluginOutput) {
    out.assert_silent_ok();
}

/// `conf` with the `prevResult` of an ADD.
fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = prev.clone();
    c
}

fn only_bookkeeping(names: &[String]) -> bool {
    names
        .iter()
        .all(|n| n == "lock" || n.starts_with("last_reserved_ip."))
}

#[test]
fn add_returns_addresses_gateways_routes_and_dns() {
    let net = Net::new(
        "result",
        json!({
            "ranges": [[{"subnet": "10.10.0.0/24"}], [{"subnet": "2001:db8:10::/64"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.0.254"}, {"dst": "::/0"}],
        }),
    );
    let resolv = net.data.write(
        "resolv.conf",
        "nameserver 10.10.0.53\nsearch a.example b.example\ndomain example\noptions ndots:2\n",
    );
    let mut conf = net.conf();
    conf["ipam"]["resolvConf"] = json!(resolv);
    let out = call(&ours(), "ADD", "c1", "eth0", &conf, &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        out.json(),
        json!({
            "cniVersion": "1.0.0",
            "ips": [
                {"address": "10.10.0.2/24", "gateway": "10.10.0.1"},
                {"address": "2001:db8:10::2/64", "gateway": "2001:db8:10::1"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.0.254"}, {"dst": "::/0"}],
            "dns": {"nameservers": ["10.10.0.53"], "domain": "example", "search": ["a.example", "b.example"], "options": ["ndots:2"]}
        })
    );
    assert_eq!(
        net.files(),
        BTreeMap::from([
            ("10.10.0.2".to_string(), b"c1\r\neth0".to_vec()),
            ("2001:db8:10::2".to_string(), b"c1\r\neth0".to_vec()),
            ("last_reserved_ip.0".to_string(), b"10.10.0.2".to_vec()),
            ("last_reserved_ip.1".to_string(), b"2001:db8:10::2".to_vec()),
            ("lock".to_string(), Vec::new()),
        ])
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |n: &str| {
        std::fs::metadata(net.dir().join(n))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("10.10.0.2"), 0o600);
    assert_eq!(
        std::fs::metadata(net.dir()).unwrap().permissions().mode() & 0o777,
        0o755
    );

    // Old result shapes: 0.2.0 has ip4/ip6, 0.3.1 has ips[].version.
    let v = add_ok(&ours(), "c2", &net.conf_v("0.2.0"), &[]);
    assert_eq!(v["ip4"]["ip"], "10.10.0.3/24");
    assert_eq!(v["ip6"]["ip"], "2001:db8:10::3/64");
    let v = add_ok(&ours(), "c3", &net.conf_v("0.3.1"), &[]);
    assert_eq!(
        v["ips"][1],
        json!({"version": "6", "address": "2001:db8:10::4/64", "gateway": "2001:db8:10::1"})
    );
}

#[test]
fn sixty_four_parallel_adds_get_distinct_addresses_and_parallel_dels_leave_only_bookkeeping() {
    let net = Net::new("parallel", json!({"subnet": "10.11.0.0/24"}));
    let conf = net.conf();
    let results: Vec<(String, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..64)
            .map(|i| {
                let conf = &conf;
                s.spawn(move || {
                    let id = format!("par-{i}");
                    let r = add_ok(&ours(), &id, conf, &[]);
                    (id, r)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let all: BTreeSet<String> = results.iter().flat_map(|(_, r)| addrs(r)).collect();
    assert_eq!(all.len(), 64, "64 distinct addresses: {all:?}");
    let expected: BTreeSet<String> = (2..66).map(|i| format!("10.11.0.{i}/24")).collect();
    assert_eq!(
        all, expected,
        "the first 64 after the gateway, in some order"
    );
    for (id, r) in &results {
        let a = addrs(r)[0].trim_end_matches("/24").to_string();
        assert_eq!(net.lease(&a), format!("{id}\r\neth0"));
    }
    assert_eq!(net.names().len(), 64 + 2);

    // Half the DELs carry the prevResult (straight to the file), half walk.
    std::thread::scope(|s| {
        for (n, (id, r)) in results.iter().enumerate() {
            let conf = if n % 2 == 0 {
                with_prev(&conf, r)
            } else {
                conf.clone()
            };
            s.spawn(move || ok(call(&ours(), "DEL", id, "eth0", &conf, &[])));
        }
    });
    assert_eq!(net.names(), ["last_reserved_ip.0", "lock"]);
}

#[test]
fn exhaustion_is_a_clear_error_status_stays_ok_and_releases_what_it_took() {
    let net = Net::new(
        "exhaust",
        json!({"ranges": [
            [{"subnet": "10.12.0.0/24", "rangeStart": "10.12.0.10", "rangeEnd": "10.12.0.12"}],
            [{"subnet": "10.13.0.0/24", "rangeStart": "10.13.0.10", "rangeEnd": "10.13.0.11"}]
        ]}),
    );
    let conf = net.conf();
    let status_conf = net.conf_v("1.1.0");
    ok(call(&ours(), "STATUS", "", "", &status_conf, &[]));
    assert_eq!(
        addrs(&add_ok(&ours(), "a", &conf, &[])),
        ["10.12.0.10/24", "10.13.0.10/24"]
    );
    assert_eq!(
        addrs(&add_ok(&ours(), "b", &conf, &[])),
        ["10.12.0.11/24", "10.13.0.11/24"]
    );
    let before = net.files();
    // Set 0 still has .12, set 1 is full: the .12 taken for set 0 is given back.
    call(&ours(), "ADD", "c", "eth0", &conf, &[]).assert_error(
        11,
        "no IP addresses available in range set 1 (ipam.ranges[1]: 10.13.0.10-10.13.0.11)",
    );
    let after = net.files();
    assert!(!after.contains_key("10.12.0.12"), "nothing stays allocated");
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    // A full pool is capacity, not a broken node: ADD says so (11) and
    // STATUS, the node's readiness under containerd 2.x, stays green.
    ok(call(&ours(), "STATUS", "", "", &status_conf, &[]));
    ok(call(&ours(), "DEL", "a", "eth0", &conf, &[]));
    ok(call(&ours(), "STATUS", "", "", &status_conf, &[]));
    // Round robin: set 0 goes on after .12 (reserved by the failed ADD),
    // wrapping to .10; set 1 wraps to the freed .10.
    assert_eq!(
        addrs(&add_ok(&ours(), "c", &conf, &[])),
        ["10.12.0.10/24", "10.13.0.10/24"]
    );
}

#[test]
fn status_counts_the_gateway_and_range_bounds() {
    // Only the gateway in the range: never serviceable.
    let net = Net::new(
        "status-gw",
        json!({"subnet": "10.14.0.0/24", "rangeStart": "10.14.0.1", "rangeEnd": "10.14.0.1"}),
    );
    call(&ours(), "STATUS", "", "", &net.conf_v("1.1.0"), &[]).assert_error(
        50,
        "range set 0 (ipam.subnet: 10.14.0.1-10.14.0.1) holds no address to hand out",
    );
    assert!(!net.dir().exists(), "STATUS creates nothing");
    call(&ours(), "ADD", "a", "eth0", &net.conf(), &[])
        .assert_error(11, "no IP addresses available in range set 0");
    // Bad config: 7, not 50.
    let bad = Net::new("status-bad", json!({"subnet": "10.14.0.0/31"}));
    call(&ours(), "STATUS", "", "", &bad.conf_v("1.1.0"), &[]).assert_error(7, "ipam.subnet");
}

#[test]
fn requested_addresses_from_cni_args_args_and_runtime_config() {
    let net = Net::new(
        "requested",
        json!({"ranges": [
            [{"subnet": "10.15.0.0/24"}],
            [{"subnet": "2001:db8:15::/64"}]
        ]}),
    );
    let conf = net.conf();
    // CNI_ARGS IP= with and without a prefix length, a comma list for both families.
    let r = add_ok(
        &ours(),
        "a",
        &conf,
        &[(
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.15.0.50/24",
        )],
    );
    assert_eq!(addrs(&r), ["10.15.0.50/24", "2001:db8:15::2/64"]);
    let r = add_ok(
        &ours(),
        "b",
        &conf,
        &[("CNI_ARGS", "IP=10.15.0.51,2001:db8:15::51")],
    );
    assert_eq!(addrs(&r), ["10.15.0.51/24", "2001:db8:15::51/64"]);
    assert_eq!(net.lease("10.15.0.51"), "b\r\neth0");
    assert_eq!(
        net.lease("last_reserved_ip.0"),
        "10.15.0.51",
        "a requested address is the last reserved, as in Go"
    );
    // args.cni.ips and runtimeConfig.ips (capability "ips").
    let mut c = conf.clone();
    c["args"] = json!({"cni": {"ips": ["10.15.0.52"]}});
    c["runtimeConfig"] = json!({"ips": ["2001:db8:15::52/64"]});
    assert_eq!(
        addrs(&add_ok(&ours(), "c", &c, &[])),
        ["10.15.0.52/24", "2001:db8:15::52/64"]
    );

    // The same address asked for twice (CNI_ARGS and the capability) is one request.
    let mut c = conf.clone();
    c["runtimeConfig"] = json!({"ips": ["10.15.0.53/24"]});
    let r = add_ok(&ours(), "e", &c, &[("CNI_ARGS", "IP=10.15.0.53")]);
    assert_eq!(addrs(&r), ["10.15.0.53/24", "2001:db8:15::53/64"]);

    // Leases only: like Go, a failed ADD may have moved last_reserved_ip.
    let leases = || {
        let mut f = net.files();
        f.retain(|n, _| !only_bookkeeping(std::slice::from_ref(n)));
        f
    };
    let before = leases();
    let fail = |id: &str, c: &Value, args: &str, code: u64, needle: &str| {
        call(&ours(), "ADD", id, "eth0", c, &[("CNI_ARGS", args)]).assert_error(code, needle);
        assert_eq!(leases(), before, "{needle}: nothing stays allocated");
    };
    // Taken: set 0 is reserved first, then given back when set 1 fails.
    fail(
        "d",
        &conf,
        "IP=10.15.0.60,2001:db8:15::51",
        11,
        "requested IP address 2001:db8:15::51 is not available in range set 1",
    );
    fail(
        "d",
        &conf,
        "IP=10.15.0.50",
        11,
        "requested IP address 10.15.0.50 is not available in range set 0",
    );
    // Outside every set, the gateway, two in one set, not an address.
    fail("d", &conf, "IP=10.99.0.5", 4, "CNI_ARGS IP=10.99.0.5: is not inside any range set (range set 0 (ipam.ranges[0]: 10.15.0.1-10.15.0.254)");
    fail(
        "d",
        &conf,
        "IP=10.15.0.1",
        4,
        "CNI_ARGS IP=10.15.0.1: is the gateway of range set 0",
    );
    fail(
        "d",
        &conf,
        "IP=10.15.0.70,10.15.0.71",
        4,
        "10.15.0.70 is requested too",
    );
    fail(
        "d",
        &conf,
        "IP=10.15.0.300",
        4,
        "\"10.15.0.300\" is not an IP address",
    );
    fail("d", &conf, "IP=10.15.0.61;FOO=bar", 4, "unknown args");
    let mut c = conf.clone();
    c["runtimeConfig"] = json!({"ips": ["10.16.0.5/24"]});
    fail(
        "d",
        &c,
        "",
        7,
        "runtimeConfig.ips[0]: 10.16.0.5: is not inside any range set",
    );
    let mut c = conf.clone();
    c["args"] = json!({"cni": {"ips": ["2001:db8:15::1"]}});
    fail(
        "d",
        &c,
        "",
        7,
        "args.cni.ips[0]: 2001:db8:15::1: is the gateway of range set 1",
    );
}

#[test]
fn ip_ranges_capability_goes_first() {
    let net = Net::new(
        "ipranges",
        json!({"ranges": [[{"subnet": "10.17.0.0/24"}]]}),
    );
    let mut conf = net.conf();
    conf["runtimeConfig"] =
        json!({"ipRanges": [[{"subnet": "10.18.0.0/24", "rangeStart": "10.18.0.100"}]]});
    assert_eq!(
        addrs(&add_ok(&ours(), "a", &conf, &[])),
        ["10.18.0.100/24", "10.17.0.2/24"]
    );
    assert_eq!(net.lease("last_reserved_ip.0"), "10.18.0.100");
    assert_eq!(net.lease("last_reserved_ip.1"), "10.17.0.2");
    conf["runtimeConfig"] = json!({"ipRanges": [[{"subnet": "10.17.0.128/25"}]]});
    call(&ours(), "ADD", "b", "eth0", &conf, &[])
        .assert_error(7, "overlaps range set 0 (runtimeConfig.ipRanges[0]");
}

#[test]
fn validation_errors_are_code_7_naming_key_and_value() {
    let cases = [
        (
            json!({"subnet": "10.19.0.5/24"}),
            "ipam.subnet: 10.19.0.5/24 has host bits set",
        ),
        (
            json!({"subnet": "10.19.0.0/32"}),
            "ipam.subnet: 10.19.0.0/32 is too small",
        ),
        (
            json!({"ranges": [[{"subnet": "2001:db8::/127"}]]}),
            "ipam.ranges[0][0].subnet: 2001:db8::/127 is too small",
        ),
        (
            json!({"subnet": "10.19.0.0/24", "rangeStart": "10.20.0.1"}),
            "ipam.rangeStart: 10.20.0.1 is not in subnet 10.19.0.0/24",
        ),
        (
            json!({"subnet": "10.19.0.0/24", "rangeStart": "10.19.0.9", "rangeEnd": "10.19.0.8"}),
            "ipam.rangeEnd: 10.19.0.8 is before rangeStart 10.19.0.9",
        ),
        (
            json!({"subnet": "10.19.0.0/24", "gateway": "10.19.0"}),
            "ipam.gateway: \"10.19.0\" is not an IP address",
        ),
        (
            json!({"ranges": [[{"subnet": "10.19.0.0/24"}, {"subnet": "2001:db8::/64"}]]}),
            "ipam.ranges[0]: mixed address families",
        ),
        (
            json!({"ranges": [[{"subnet": "10.19.0.0/24"}], [{"subnet": "10.19.0.0/25"}]]}),
            "ipam.ranges[1]: range set 1",
        ),
        (
            json!({"subnet": "10.19.0.0/24", "routes": [{"dst": "10.0.0.0"}]}),
            "ipam.routes[0].dst: \"10.0.0.0\" is not a CIDR",
        ),
        (json!({}), "ipam.ranges: no IP ranges"),
    ];
    for (ipam, needle) in cases {
        let net = Net::new("invalid", ipam);
        call(&ours(), "ADD", "a", "eth0", &net.conf(), &[]).assert_error(7, needle);
        assert!(!net.dir().exists(), "{needle}: nothing created");
    }
    let net = Net::new(
        "old",
        json!({"ranges": [[{"subnet": "10.19.0.0/24"}], [{"subnet": "10.20.0.0/24"}]]}),
    );
    call(&ours(), "ADD", "a", "eth0", &net.conf_v("0.2.0"), &[])
        .assert_error(7, "cniVersion: 0.2.0 allows one address per family");
    let out = call(
        &ours(),
        "ADD",
        "a",
        "eth0",
        &json!({"cniVersion": V, "name": NET}),
        &[],
    );
    out.assert_error(7, "invalid network config: ipam: missing");
}

#[test]
fn leases_written_by_hand_in_the_reference_format_are_honoured_and_released() {
    let net = Net::new(
        "prewritten",
        json!({"subnet": "10.21.0.0/24", "rangeEnd": "10.21.0.9"}),
    );
    std::fs::create_dir_all(net.dir()).unwrap();
    let put = |name: &str, content: &[u8]| std::fs::write(net.dir().join(name), content).unwrap();
    put("10.21.0.2", b"other\r\neth0");
    put("10.21.0.3", b"legacy-id");
    put("10.21.0.4", b""); // a Go ADD killed between create and write
    put("10.21.0.5", b"\xff\xfegarbage");
    put("10.21.0.6", b"other\r\neth1");
    put("last_reserved_ip.0", b"10.21.0.1");
    // Honoured: the new lease skips every one of them.
    let r = add_ok(&ours(), "mine", &net.conf(), &[]);
    assert_eq!(addrs(&r), ["10.21.0.7/24"]);
    // Legacy: the bare ID counts as held by that container (duplicate).
    call(&ours(), "ADD", "legacy-id", "eth0", &net.conf(), &[])
        .assert_error(11, "10.21.0.3 has been allocated to legacy-id (interface eth0) in range set 0 (ipam.subnet: 10.21.0.1-10.21.0.9), duplicate allocation is not allowed");
    call(&ours(), "ADD", "other", "eth0", &net.conf(), &[])
        .assert_error(11, "10.21.0.2 has been allocated to other");

    // DEL by container ID + ifname: only that file.
    ok(call(&ours(), "DEL", "other", "eth0", &net.conf(), &[]));
    assert!(!net.dir().join("10.21.0.2").exists());
    assert_eq!(
        net.lease("10.21.0.6"),
        "other\r\neth1",
        "the other interface keeps its lease"
    );
    // Legacy: released by container ID when nothing matches id+ifname.
    ok(call(&ours(), "DEL", "legacy-id", "eth0", &net.conf(), &[]));
    assert!(!net.dir().join("10.21.0.3").exists());
    // The empty and garbage leases block only their own addresses.
    assert_eq!(
        net.names(),
        [
            "10.21.0.4",
            "10.21.0.5",
            "10.21.0.6",
            "10.21.0.7",
            "last_reserved_ip.0",
            "lock"
        ]
    );
    ok(call(
        &ours(),
        "DEL",
        "mine",
        "eth0",
        &with_prev(&net.conf(), &r),
        &[],
    ));
    let r = add_ok(&ours(), "next", &net.conf(), &[]);
    assert_eq!(addrs(&r), ["10.21.0.8/24"]);
    // GC clears what nobody holds, including the empty and garbage leases.
    let mut gc = net.conf_v("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "next", "ifname": "eth0"}]);
    ok(call(&ours(), "GC", "", "", &gc, &[]));
    assert_eq!(net.names(), ["10.21.0.8", "last_reserved_ip.0", "lock"]);
}

#[test]
fn del_is_idempotent_and_creates_nothing() {
    let net = Net::new("del", json!({"subnet": "10.22.0.0/24"}));
    ok(call(&ours(), "DEL", "ghost", "eth0", &net.conf(), &[]));
    assert!(
        !net.dir().exists(),
        "DEL of a network without a directory creates none"
    );
    let r = add_ok(&ours(), "a", &net.conf(), &[]);
    ok(call(
        &ours(),
        "DEL",
        "a",
        "eth0",
        &with_prev(&net.conf(), &r),
        &[],
    ));
    ok(call(
        &ours(),
        "DEL",
        "a",
        "eth0",
        &with_prev(&net.conf(), &r),
        &[],
    ));
    ok(call(&ours(), "DEL", "a", "eth0", &net.conf(), &[]));
    // A DEL after the ranges were broken still releases (only dataDir matters).
    add_ok(&ours(), "b", &net.conf(), &[]);
    let mut broken = net.conf();
    broken["ipam"]["subnet"] = json!("10.22.0.5/24");
    ok(call(
        &ours(),
        "DEL",
        "b",
        "eth0",
        &broken,
        &[("CNI_ARGS", "FOO=1")],
    ));
    assert_eq!(net.names(), ["last_reserved_ip.0", "lock"]);
    // A prevResult whose addresses are not ours: falls back to the walk.
    let r = add_ok(&ours(), "c", &net.conf(), &[]);
    let foreign = json!({"cniVersion": V, "ips": [{"address": "10.22.0.200/24"}]});
    ok(call(
        &ours(),
        "DEL",
        "c",
        "eth0",
        &with_prev(&net.conf(), &foreign),
        &[],
    ));
    assert!(!net
        .dir()
        .join(addrs(&r)[0].trim_end_matches("/24"))
        .exists());
}

#[test]
fn del_with_prev_result_removes_only_files_that_name_the_attachment() {
    let net = Net::new("del-prev", json!({"subnet": "10.23.0.0/24"}));
    let a = add_ok(&ours(), "a", &net.conf(), &[]);
    add_ok(&ours(), "b", &net.conf(), &[]);
    // b's DEL carries a's result (a runtime bug): a's lease is not b's.
    ok(call(
        &ours(),
        "DEL",
        "b",
        "eth0",
        &with_prev(&net.conf(), &a),
        &[],
    ));
    assert_eq!(net.lease("10.23.0.2"), "a\r\neth0");
    assert!(
        !net.dir().join("10.23.0.3").exists(),
        "b's own lease found by the walk"
    );
}

#[test]
fn check_passes_for_the_holder_and_names_the_address_otherwise() {
    let net = Net::new(
        "check",
        json!({"ranges": [[{"subnet": "10.24.0.0/24"}], [{"subnet": "2001:db8:24::/64"}]]}),
    );
    let r = add_ok(&ours(), "a", &net.conf(), &[]);
    let conf = with_prev(&net.conf(), &r);
    ok(call(&ours(), "CHECK", "a", "eth0", &conf, &[]));
    call(&ours(), "CHECK", "a", "eth1", &conf, &[]).assert_error(
        102,
        "address 10.24.0.2 of prevResult is not leased to a/eth1: its lease in",
    );
    call(&ours(), "CHECK", "b", "eth0", &conf, &[]).assert_error(102, "holds a/eth0");
    // One address of two missing is enough to fail, and it is named.
    std::fs::remove_file(net.dir().join("2001:db8:24::2")).unwrap();
    call(&ours(), "CHECK", "a", "eth0", &conf, &[]).assert_error(
        102,
        "address 2001:db8:24::2 of prevResult is not leased to a/eth0: no lease file",
    );
    // Without a prevResult: any lease of the attachment will do, as in Go.
    ok(call(&ours(), "CHECK", "a", "eth0", &net.conf(), &[]));
    ok(call(&ours(), "DEL", "a", "eth0", &net.conf(), &[]));
    call(&ours(), "CHECK", "a", "eth0", &net.conf(), &[])
        .assert_error(102, "no address is leased to a/eth0");
    call(&ours(), "CHECK", "a", "eth0", &conf, &[]).assert_error(102, "10.24.0.2");
    let gone = Net::new("check-none", json!({"subnet": "10.24.0.0/24"}));
    call(&ours(), "CHECK", "a", "eth0", &gone.conf(), &[]).assert_error(102, "does not exist");
    assert!(!gone.dir().exists());
}

#[test]
fn gc_releases_every_lease_not_listed_with_either_attachment_key() {
    for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
        let net = Net::new("gc", json!({"subnet": "10.25.0.0/24"}));
        for (id, ifname) in [("a", "eth0"), ("a", "eth1"), ("b", "eth0")] {
            ok_add(&net, id, ifname);
        }
        std::fs::write(net.dir().join("10.25.0.100"), "legacy-kept").unwrap();
        std::fs::write(net.dir().join("10.25.0.101"), "legacy-gone").unwrap();
        std::fs::write(net.dir().join("10.25.0.102"), "").unwrap();
        std::fs::write(net.dir().join("notes"), "not a lease").unwrap();
        let mut gc = net.conf_v("1.1.0");
        gc[key] = json!([
            {"containerID": "a", "ifname": "eth0"},
            {"containerID": "legacy-kept", "ifname": "eth0"},
            {"containerID": "zzz", "ifname": "eth0"}
        ]);
        ok(call(&ours(), "GC", "", "", &gc, &[]));
        assert_eq!(
            net.names(),
            [
                "10.25.0.100",
                "10.25.0.2",
                "last_reserved_ip.0",
                "lock",
                "notes"
            ],
            "{key}"
        );
        assert_eq!(net.lease("10.25.0.2"), "a\r\neth0");
        // An empty list releases everything.
        gc[key] = json!([]);
        ok(call(&ours(), "GC", "", "", &gc, &[]));
        assert_eq!(
            net.names(),
            ["last_reserved_ip.0", "lock", "notes"],
            "{key}"
        );
    }
    let net = Net::new("gc-none", json!({"subnet": "10.25.0.0/24"}));
    ok_add(&net, "a", "eth0");
    let out = call(&ours(), "GC", "", "", &net.conf_v("1.1.0"), &[]);
    out.assert_silent_ok();
    assert!(out.stderr.contains("lists no valid attachments"), "{out:?}");
    assert!(
        net.dir().join("10.25.0.2").exists(),
        "no list, nothing released"
    );
    let empty = Net::new("gc-nodir", json!({"subnet": "10.25.0.0/24"}));
    let mut gc = empty.conf_v("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([]);
    ok(call(&ours(), "GC", "", "", &gc, &[]));
    assert!(!empty.dir().exists());
}

fn ok_add(net: &Net, id: &str, ifname: &str) {
    let out = call(&ours(), "ADD", id, ifname, &net.conf(), &[]);
    assert_eq!(out.exit_code, 0, "{out:?}");
}

#[test]
fn symlinks_in_the_data_dir_are_refused_and_never_followed() {
    let net = Net::new("symlink", json!({"subnet": "10.26.0.0/24"}));
    let victim = net.data.write("victim", "precious");
    std::fs::create_dir_all(net.dir()).unwrap();
    std::os::unix::fs::symlink(&victim, net.dir().join("10.26.0.2")).unwrap();
    let lease = net.dir().join("10.26.0.2");
    call(&ours(), "ADD", "a", "eth0", &net.conf(), &[])
        .assert_error(5, &format!("refusing {}", lease.display()));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    // DEL never follows it either, and still succeeds (it is nobody's lease).
    std::fs::write(net.dir().join("10.26.0.3"), "b\r\neth0").unwrap();
    ok(call(&ours(), "DEL", "b", "eth0", &net.conf(), &[]));
    assert!(!net.dir().join("10.26.0.3").exists());
    let prev = json!({"cniVersion": V, "ips": [{"address": "10.26.0.2/24"}]});
    ok(call(
        &ours(),
        "DEL",
        "b",
        "eth0",
        &with_prev(&net.conf(), &prev),
        &[],
    ));
    // GC reports it and leaves it alone.
    let mut gc = net.conf_v("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([]);
    call(&ours(), "GC", "", "", &gc, &[]).assert_error(5, "refusing");
    assert!(lease.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");

    // The network directory itself, and the lock file.
    let net = Net::new("symlink-dir", json!({"subnet": "10.26.0.0/24"}));
    let elsewhere = net.data.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, net.dir()).unwrap();
    call(&ours(), "ADD", "a", "eth0", &net.conf(), &[])
        .assert_error(5, &format!("refusing {}", net.dir().display()));
    call(&ours(), "DEL", "a", "eth0", &net.conf(), &[]).assert_error(5, "refusing");
    assert_eq!(
        files_of(&elsewhere).len(),
        0,
        "nothing written through the link"
    );
    let net = Net::new("symlink-lock", json!({"subnet": "10.26.0.0/24"}));
    std::fs::create_dir_all(net.dir()).unwrap();
    std::os::unix::fs::symlink(&victim, net.dir().join("lock")).unwrap();
    call(&ours(), "ADD", "a", "eth0", &net.conf(), &[]).assert_error(5, "lock");
    assert_eq!(net.names(), ["lock"]);
}

/// Fault points inside ADD, in the order they are reached.
const ADD_FAULTS: &[&str] = &[
    "host-local/temp-written",
    "host-local/linked",
    "host-local/last-reserved",
];

#[test]
fn a_killed_add_leaves_nothing_that_blocks_the_next_add_or_del() {
    for point in ADD_FAULTS {
        let net = Net::new(
            "killed-add",
            json!({"ranges": [[{"subnet": "10.27.0.0/24"}], [{"subnet": "2001:db8:27::/64"}]]}),
        );
        let out = call(
            &ours(),
            "ADD",
            "killed",
            "eth0",
            &net.conf(),
            &[("CNI_FAULT_POINT", point)],
        );
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (-1, ""),
            "{point}: killed by SIGKILL: {out:?}"
        );
        // Killed before the temp file was unlinked, it is left behind.
        let temps = net
            .names()
            .into_iter()
            .filter(|n| n.starts_with(".tmp-"))
            .count();
        assert_eq!(
            temps,
            usize::from(*point != "host-local/last-reserved"),
            "{point}: {:?}",
            net.names()
        );
        let held_v4 = net.dir().join("10.27.0.2").exists();
        assert_eq!(held_v4, *point != "host-local/temp-written", "{point}");
        // The next ADD is not blocked, and cleans the stale temp file.
        let r = add_ok(&ours(), "next", &net.conf(), &[]);
        let expected_v4 = if held_v4 {
            "10.27.0.3/24"
        } else {
            "10.27.0.2/24"
        };
        assert_eq!(addrs(&r), [expected_v4, "2001:db8:27::2/64"], "{point}");
        assert!(
            net.names().iter().all(|n| !n.starts_with('.')),
            "{point}: {:?}",
            net.names()
        );
        // DEL of the killed attachment releases all it got; then it can ADD again.
        ok(call(&ours(), "DEL", "killed", "eth0", &net.conf(), &[]));
        let mut names = net.names();
        names.retain(|n| !only_bookkeeping(std::slice::from_ref(n)));
        assert_eq!(
            names,
            [expected_v4.trim_end_matches("/24"), "2001:db8:27::2"],
            "{point}"
        );
        add_ok(&ours(), "killed", &net.conf(), &[]);
        ok(call(&ours(), "DEL", "killed", "eth0", &net.conf(), &[]));
        ok(call(
            &ours(),
            "DEL",
            "next",
            "eth0",
            &with_prev(&net.conf(), &r),
            &[],
        ));
        assert!(only_bookkeeping(&net.names()), "{point}: {:?}", net.names());
    }
}

#[test]
fn a_killed_del_is_finished_by_the_next_del() {
    let net = Net::new(
        "killed-del",
        json!({"ranges": [[{"subnet": "10.28.0.0/24"}], [{"subnet": "2001:db8:28::/64"}]]}),
    );
    let r = add_ok(&ours(), "a", &net.conf(), &[]);
    for conf in [with_prev(&net.conf(), &r), net.conf()] {
        let out = call(
            &ours(),
            "DEL",
            "a",
            "eth0",
            &conf,
            &[("CNI_FAULT_POINT", "host-local/released")],
        );
        assert_eq!(out.exit_code, -1, "{out:?}");
        assert_eq!(
            net.names().len(),
            4,
            "one of two leases released: {:?}",
            net.names()
        );
        ok(call(&ours(), "DEL", "a", "eth0", &conf, &[]));
        assert_eq!(
            net.names(),
            ["last_reserved_ip.0", "last_reserved_ip.1", "lock"]
        );
        add_ok(&ours(), "a", &net.conf(), &[]);
    }
}

#[test]
fn scale_ten_thousand_leases_in_a_slash_16() {
    let net = Net::new("scale", json!({"subnet": "10.29.0.0/16"}));
    std::fs::create_dir_all(net.dir()).unwrap();
    for i in 0..10_000u32 {
        let a = 0x0a1d_0002 + i;
        let name = std::net::Ipv4Addr::from(a).to_string();
        std::fs::write(net.dir().join(name), format!("pre-{i}\r\neth0")).unwrap();
    }
    std::fs::write(net.dir().join("last_reserved_ip.0"), "10.29.39.17").unwrap();
    let r = add_ok(&ours(), "new", &net.conf(), &[]);
    // 10.29.0.2 + 10000 - 1 = 10.29.39.17; the next free one follows.
    assert_eq!(addrs(&r), ["10.29.39.18/16"]);
    ok(call(&ours(), "STATUS", "", "", &net.conf_v("1.1.0"), &[]));
    ok(call(
        &ours(),
        "DEL",
        "new",
        "eth0",
        &with_prev(&net.conf(), &r),
        &[],
    ));
    ok(call(&ours(), "DEL", "pre-5000", "eth0", &net.conf(), &[]));
    assert!(
        !net.dir().join("10.29.19.138").exists(),
        "pre-5000 held 10.29.19.138"
    );
    assert_eq!(net.names().len(), 10_000 - 1 + 2);
    call(&ours(), "ADD", "pre-1", "eth0", &net.conf(), &[])
        .assert_error(11, "10.29.0.3 has been allocated to pre-1");
}

// ---- side by side with the Go reference plugin ------------------------------

/// A scripted run: ADDs and DELs, some with requested addresses.
enum Step {
    Add(&'static str),
    AddIp(&'static str, &'static str),
    Del(&'static str),
}

#[test]
fn same_addresses_and_same_file_bytes_as_the_go_plugin() {
    let Some(go) = go_plugin("host-local") else {
        return;
    };
    // Set 0 spans two ranges (wrapping across them, skipping each gateway);
    // set 1 is IPv6.
    let ipam = json!({
        "ranges": [
            [{"subnet": "10.30.0.0/29", "rangeStart": "10.30.0.1", "rangeEnd": "10.30.0.3", "gateway": "10.30.0.2"},
             {"subnet": "10.31.0.0/24", "rangeStart": "10.31.0.5", "rangeEnd": "10.31.0.6", "gateway": "10.31.0.6"}],
            [{"subnet": "2001:db8:30::/125"}]
        ],
        "routes": [{"dst": "0.0.0.0/0"}]
    });
    use Step::*;
    let script = [
        Add("c0"),
        Add("c1"),
        Add("c2"),
        Add("c3"), // set 0 is full: fails
        Del("c1"),
        Add("c4"), // wraps to the freed address
        Del("c0"),
        AddIp("c5", "10.30.0.1"),
        Add("c6"), // full again
        Del("c2"),
        Del("c3"), // c3 holds nothing
        Add("c7"),
        Del("c4"),
        Add("c8"), // set 1 wraps too
        Add("c9"),
    ];
    let go_net = Net::new("same-go", ipam.clone());
    let our_net = Net::new("same-ours", ipam);
    for (n, step) in script.iter().enumerate() {
        let run = |plugin: &Path, net: &Net| -> (i32, Value) {
            let out = match step {
                Add(id) => call(plugin, "ADD", id, "eth0", &net.conf(), &[]),
                AddIp(id, ip) => call(
                    plugin,
                    "ADD",
                    id,
                    "eth0",
                    &net.conf(),
                    &[("CNI_ARGS", &format!("IP={ip}"))],
                ),
                Del(id) => call(plugin, "DEL", id, "eth0", &net.conf(), &[]),
            };
            let v = if out.exit_code == 0 && !out.stdout.is_empty() {
                out.json()
            } else {
                Value::Null
            };
            (out.exit_code, v)
        };
        let (go_code, go_out) = run(&go, &go_net);
        let (our_code, our_out) = run(&ours(), &our_net);
        assert_eq!(
            go_code == 0,
            our_code == 0,
            "step {n}: go {go_code} {go_out}, ours {our_code} {our_out}"
        );
        assert_eq!(our_out, go_out, "step {n}: same result");
        let mut go_files = go_net.files();
        let mut our_files = our_net.files();
        go_files.remove("lock");
        our_files.remove("lock");
        assert_eq!(our_files, go_files, "step {n}: same files, same bytes");
    }
    let leases: BTreeMap<String, String> = our_net
        .files()
        .into_iter()
        .filter(|(n, _)| !only_bookkeeping(std::slice::from_ref(n)))
        .map(|(n, b)| (n, String::from_utf8(b).unwrap()))
        .collect();
    let expected: BTreeMap<String, String> = [
        ("10.30.0.1", "c5"),
        ("10.30.0.3", "c8"),
        ("10.31.0.5", "c7"),
        ("2001:db8:30::2", "c8"),
        ("2001:db8:30::6", "c5"),
        ("2001:db8:30::7", "c7"),
    ]
    .into_iter()
    .map(|(a, id)| (a.to_string(), format!("{id}\r\neth0")))
    .collect();
    assert_eq!(leases, expected, "the run wrapped and exhausted as planned");
}

#[test]
fn go_and_rust_share_one_data_dir_both_ways() {
    let Some(go) = go_plugin("host-local") else {
        return;
    };
    let net = Net::new(
        "shared",
        json!({"ranges": [[{"subnet": "10.32.0.0/24"}], [{"subnet": "2001:db8:32::/64"}]]}),
    );
    let conf = net.conf();
    let g1 = add_ok(&go, "go-1", &conf, &[]);
    let r1 = add_ok(&ours(), "rs-1", &conf, &[]);
    let g2 = add_ok(&go, "go-2", &conf, &[]);
    let r2 = add_ok(&ours(), "rs-2", &conf, &[]);
    let all: Vec<Vec<String>> = [&g1, &r1, &g2, &r2].iter().map(|r| addrs(r)).collect();
    assert_eq!(
        all,
        [
            ["10.32.0.2/24", "2001:db8:32::2/64"],
            ["10.32.0.3/24", "2001:db8:32::3/64"],
            ["10.32.0.4/24", "2001:db8:32::4/64"],
            ["10.32.0.5/24", "2001:db8:32::5/64"],
        ],
        "one round robin, whoever writes"
    );
    // Ours index their leases (a second name, same file); Go's have none.
    let mut links: Vec<String> = index_links_in(&net.dir())
        .iter()
        .map(|l| l.rsplit_once('-').unwrap().1.to_string())
        .collect();
    links.sort();
    assert_eq!(
        links,
        ["10.32.0.3", "10.32.0.5", "2001:db8:32::3", "2001:db8:32::5"]
    );
    // Each one sees the other's leases as taken and as duplicates.
    call(&go, "ADD", "rs-1", "eth0", &conf, &[])
        .assert_error(999, "duplicate allocation is not allowed");
    call(&ours(), "ADD", "go-1", "eth0", &conf, &[])
        .assert_error(11, "duplicate allocation is not allowed");
    // Each one releases the other's, and CHECKs them.
    ok(call(
        &ours(),
        "CHECK",
        "go-1",
        "eth0",
        &with_prev(&conf, &g1),
        &[],
    ));
    ok(call(
        &go,
        "CHECK",
        "rs-1",
        "eth0",
        &with_prev(&conf, &r1),
        &[],
    ));
    ok(call(
        &ours(),
        "DEL",
        "go-1",
        "eth0",
        &with_prev(&conf, &g1),
        &[],
    ));
    ok(call(&go, "DEL", "rs-1", "eth0", &conf, &[]));
    ok(call(&ours(), "DEL", "go-2", "eth0", &conf, &[]));
    ok(call(&go, "DEL", "rs-2", "eth0", &conf, &[]));
    assert_eq!(
        net.names(),
        ["last_reserved_ip.0", "last_reserved_ip.1", "lock"]
    );
    assert_eq!(
        index_links_in(&net.dir()),
        Vec::<String>::new(),
        "Go's DEL removes our index links with the leases"
    );
    // A stale temp file of ours is no lease to Go, and ours removes it.
    std::fs::write(net.dir().join(".tmp-host-local-1-1"), "x\r\neth0").unwrap();
    assert_eq!(addrs(&add_ok(&go, "go-3", &conf, &[]))[0], "10.32.0.6/24");
    assert_eq!(
        addrs(&add_ok(&ours(), "rs-3", &conf, &[]))[0],
        "10.32.0.7/24"
    );
    assert!(!net.dir().join(".tmp-host-local-1-1").exists());
}

#[test]
fn the_lock_excludes_go_and_rust_alike() {
    let net = Net::new("lock", json!({"subnet": "10.33.0.0/24"}));
    ok_add(&net, "first", "eth0");
    let lock = std::fs::File::open(net.dir().join("lock")).unwrap();
    lock.lock().unwrap();
    let mut plugins = vec![ours()];
    plugins.extend(go_plugin("host-local"));
    let children: Vec<std::process::Child> = plugins
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut c = std::process::Command::new(p);
            c.env("CNI_COMMAND", "ADD")
                .env("CNI_CONTAINERID", format!("waiter-{i}"))
                .env("CNI_NETNS", NETNS)
                .env("CNI_IFNAME", "eth0")
                .env("CNI_PATH", "/nonexistent")
                .env_remove("CNI_ARGS")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped());
            let mut child = c.spawn().unwrap();
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(net.conf().to_string().as_bytes())
                .unwrap();
            child
        })
        .collect();
    // However slow the machine, a plugin that honours the lock is still
    // waiting here: it cannot have written a lease.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        net.names(),
        ["10.33.0.2", "last_reserved_ip.0", "lock"],
        "nothing written under a held lock"
    );
    drop(lock);
    let mut got = BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        got.extend(addrs(&v));
    }
    let expected: BTreeSet<String> = (0..plugins.len())
        .map(|i| format!("10.33.0.{}/24", 3 + i))
        .collect();
    assert_eq!(got, expected);
}

/// Go's `IPAMConfig` has an untagged `Name` string field: `Name` or `name`
/// in the ipam object goes there (and is then overwritten by the network's
/// name), so a string is accepted and anything else refused, by both.
#[test]
fn the_untagged_ipam_name_is_a_string_as_in_go() {
    let Some(go) = go_plugin("host-local") else {
        return;
    };
    for (key, value, ok) in [
        ("Name", json!("anything"), true),
        ("name", json!("anything"), true),
        ("Name", json!(5), false),
        ("NAME", json!(["x"]), false),
    ] {
        let mut ipam = json!({"ranges": [[{"subnet": "10.33.0.0/24"}]]});
        ipam[key] = value.clone();
        let net = Net::new("hl-name", ipam);
        let conf = net.conf();
        let theirs = call(&go, "ADD", "c-go", "eth0", &conf, &[]);
        let mine = call(&ours(), "ADD", "c-rs", "eth0", &conf, &[]);
        assert_eq!(theirs.exit_code == 0, ok, "Go, {key}: {value}: {theirs:?}");
        if ok {
            assert_eq!(addrs(&mine.result()), ["10.33.0.3/24"], "{key}: {value}");
        } else {
            // The path names the field (Go's name for it), whatever the case.
            mine.assert_error(7, "ipam.Name");
        }
    }
}

/// STATUS fails (50, naming the path) when the lease directory cannot be
/// written, as no ADD could succeed until the node is mended; it creates
/// nothing and reads no lease.
#[test]
fn status_fails_when_leases_cannot_be_written() {
    let net = Net::new("status-dir", json!({"subnet": "10.16.0.0/24"}));
    let conf = net.conf_v("1.1.0");
    ok(call(&ours(), "STATUS", "", "", &conf, &[]));
    assert!(!net.dir().exists(), "STATUS creates nothing");

    // A file where the data dir should be.
    std::fs::remove_dir(net.data.path()).expect("rmdir");
    std::fs::write(net.data.path(), "not a dir").expect("write");
    call(&ours(), "STATUS", "", "", &conf, &[]).assert_error(
        50,
        &format!("{} is not a directory", net.data.path().display()),
    );
    std::fs::remove_file(net.data.path()).expect("rm");

    // The lease directory a symlink, which ADD refuses.
    std::fs::create_dir_all(net.data.path()).expect("mkdir");
    let elsewhere = TempDir::new("status-elsewhere");
    std::os::unix::fs::symlink(elsewhere.path(), net.dir()).expect("symlink");
    call(&ours(), "STATUS", "", "", &conf, &[]).assert_error(50, "is a symlink");
    std::fs::remove_file(net.dir()).expect("rm");
    ok(call(&ours(), "STATUS", "", "", &conf, &[]));
}

/// Upstream v1.10's host-local validation, already ours: an explicit
/// gateway must be of the subnet's family and inside it (upstream #1303),
/// and a range whose bounds end up reversed once the defaults are filled
/// in is refused (upstream #1293: a `rangeStart` past the default
/// `rangeEnd` handed out the broadcast address). Each refusal is code 7
/// naming the key, before any lease exists.
#[test]
fn v1_10_gateway_and_range_bounds_are_validated() {
    for (what, ipam, key, needle) in [
        (
            "a gateway outside the subnet",
            json!({"subnet": "10.0.0.0/24", "gateway": "192.168.1.1"}),
            "ipam.gateway",
            "192.168.1.1 is not in subnet 10.0.0.0/24",
        ),
        (
            "an IPv6 gateway for an IPv4 subnet",
            json!({"ranges": [[{"subnet": "10.0.0.0/24", "gateway": "fd00::1"}]]}),
            "ipam.ranges[0][0].gateway",
            "is not of the same address family as subnet 10.0.0.0/24",
        ),
        (
            "an IPv4 gateway for an IPv6 subnet",
            json!({"ranges": [[{"subnet": "fd00::/64", "gateway": "10.0.0.1"}]]}),
            "ipam.ranges[0][0].gateway",
            "is not of the same address family as subnet fd00::/64",
        ),
        (
            "rangeStart past the default rangeEnd (the broadcast address)",
            json!({"subnet": "10.0.0.0/30", "rangeStart": "10.0.0.3"}),
            "ipam.rangeEnd",
            "10.0.0.2 is before rangeStart 10.0.0.3",
        ),
        (
            "rangeEnd before rangeStart",
            json!({"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.200", "rangeEnd": "10.0.0.100"}]]}),
            "ipam.ranges[0][0].rangeEnd",
            "10.0.0.100 is before rangeStart 10.0.0.200",
        ),
    ] {
        let net = Net::new("v110", ipam);
        let out = call(&ours(), "ADD", "c-v110", "eth0", &net.conf(), &[]);
        out.assert_error(7, &format!("{key}: "));
        out.assert_error(7, needle);
        assert!(!net.dir().exists(), "{what}: no lease directory");
    }
}
