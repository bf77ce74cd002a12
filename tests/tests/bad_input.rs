//! Bad input, table-driven, for every plugin: malformed JSON, wrong types,
//! missing keys, out-of-range numbers, oversized stdin, bad CIDRs, unknown
//! versions, and a bad environment (`CNI_IFNAME` with `/` or over 15 bytes,
//! container IDs with `..` or `/`, a `CNI_NETNS` that is a regular file or
//! does not exist, no `CNI_PATH` for a plugin that delegates).
//!
//! Each case is one ADD of the plugin in a throwaway node namespace, with
//! a base config that is first shown to work (ADD then DEL) and then
//! changed in exactly one way. Asserted: a non-zero exit, a spec error JSON
//! on stdout with the exact code, a message naming the key or variable at
//! fault, and no change on the node: links, addresses, routes, qdiscs,
//! nftables and iptables of the node and the pod namespace, and every
//! file under the test's state dir (dataDirs, subnet.env, caches) are the
//! same before and after.

use serde_json::{json, Value};
use std::path::PathBuf;
use tests::*;

/// What a case sends on stdin.
enum Stdin {
    Json(Value),
    Raw(String),
}

/// One bad input and the error it must get.
struct Case {
    what: String,
    stdin: Stdin,
    /// Env changes: `Some` sets, `None` removes.
    env: Vec<(&'static str, Option<String>)>,
    code: u64,
    /// Must appear in `msg` or `details`: the key or variable at fault.
    needle: String,
}

fn case(what: &str, stdin: Value, code: u64, needle: &str) -> Case {
    Case {
        what: what.to_string(),
        stdin: Stdin::Json(stdin),
        env: Vec::new(),
        code,
        needle: needle.to_string(),
    }
}

/// A case on one line: `base` with the value at a JSON pointer replaced
/// (`"/ptr" => value`, a single token tree or parenthesized), the code and
/// the needle.
macro_rules! set {
    ($base:ident, $what:literal, $ptr:expr => $v:tt, $code:literal, $needle:expr) => {
        case($what, with(&$base, $ptr, json!($v)), $code, $needle)
    };
}

/// A case on one line: `base` with one environment variable set
/// (`"VAR" => "value"`), the code and the needle.
macro_rules! env_set {
    ($base:ident, $what:literal, $var:literal => $value:literal, $code:literal, $needle:expr) => {
        env_case($what, &$base, &[($var, Some($value))], $code, $needle)
    };
}

fn env_case(
    what: &str,
    base: &Value,
    env: &[(&'static str, Option<&str>)],
    code: u64,
    needle: &str,
) -> Case {
    Case {
        what: what.to_string(),
        stdin: Stdin::Json(base.clone()),
        env: env
            .iter()
            .map(|(k, v)| (*k, v.map(str::to_string)))
            .collect(),
        code,
        needle: needle.to_string(),
    }
}

/// `base` with the value at JSON pointer `ptr` replaced (created when its
/// parent exists).
fn with(base: &Value, ptr: &str, v: Value) -> Value {
    let mut out = base.clone();
    let (parent, key) = ptr.rsplit_once('/').expect("pointer");
    let slot = out
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no {parent} in {base}"));
    match slot {
        Value::Object(m) => {
            m.insert(key.to_string(), v);
        }
        Value::Array(a) => a[key.parse::<usize>().expect("index")] = v,
        other => panic!("{parent} is {other}"),
    }
    out
}

/// `base` without the key at JSON pointer `ptr`.
fn without(base: &Value, ptr: &str) -> Value {
    let mut out = base.clone();
    let (parent, key) = ptr.rsplit_once('/').expect("pointer");
    out.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .expect("parent object")
        .remove(key);
    out
}

/// Whether `plugin` reads `CNI_ARGS` (itself or through its delegates).
fn reads_cni_args(plugin: &str) -> bool {
    matches!(
        plugin,
        "host-local"
            | "bridge"
            | "flannel"
            | "tuning"
            | "macvlan"
            | "static"
            | "ptp"
            | "tap"
            | "host-device"
            | "tc-redirect-tap"
    )
}

/// A plugin under test: a node namespace, a pod, a state dir, the base
/// config and environment of a working ADD.
struct Bench {
    plugin: &'static str,
    node: Node,
    pod: Netns,
    state: TempDir,
    base: Value,
    ifname: &'static str,
    /// `CNI_PATH` in the base environment (for plugins that delegate).
    delegates: bool,
    /// The plugin makes links of this kind (`vlan`, `ipvlan`, `dummy`,
    /// `vrf`), which this kernel may lack: then the base ADD is refused
    /// with code 2 naming the module, and the bad inputs, all refused
    /// before the link would be made, are still checked.
    kind: Option<&'static str>,
}

#[derive(Debug, PartialEq, Eq)]
struct State {
    node: NetSnapshot,
    pod: NetSnapshot,
    files: Vec<String>,
}

impl Bench {
    fn new(plugin: &'static str, ifname: &'static str, delegates: bool) -> Bench {
        let node = Node::new(&format!("bad-{plugin}"));
        node.ns.ip(&["link", "set", "lo", "up"]);
        Bench {
            plugin,
            pod: Netns::new(&format!("pod-bad-{plugin}")),
            state: TempDir::new(&format!("bad-{plugin}")),
            node,
            base: Value::Null,
            ifname,
            delegates,
            kind: None,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.state.path().join(rel)
    }

    fn netns(&self) -> String {
        self.pod.path().to_str().expect("utf8").to_string()
    }

    fn state(&self) -> State {
        State {
            node: NetSnapshot::take(&self.node.ns),
            // Plugins never touch the pod's firewall.
            pod: NetSnapshot::take_with(&self.pod, false),
            files: tree(self.state.path()),
        }
    }

    fn call(
        &self,
        verb: &str,
        stdin: &str,
        changes: &[(&'static str, Option<String>)],
    ) -> PluginOutput {
        let path = bin_dir().to_str().expect("utf8").to_string();
        let mut env: Vec<(&str, String)> = vec![
            ("CNI_COMMAND", verb.to_string()),
            ("CNI_CONTAINERID", "bad-ctr".to_string()),
            ("CNI_NETNS", self.netns()),
            ("CNI_IFNAME", self.ifname.to_string()),
        ];
        if self.delegates {
            env.push(("CNI_PATH", path));
        }
        for (k, v) in changes {
            env.retain(|(ek, _)| ek != k);
            if let Some(v) = v {
                env.push((k, v.clone()));
            }
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        call_plugin(Some(&self.node.ns), &bin(self.plugin), &env, stdin)
    }

    /// The base config works: ADD then DEL succeed (on a kernel without
    /// the plugin's link kind, ADD is refused naming the module and
    /// changes nothing).
    fn prove_base(&self) {
        let before = self.state();
        let out = self.call("ADD", &self.base.to_string(), &[]);
        if let Some(kind) = self.kind {
            if out.exit_code != 0 {
                out.assert_error(2, &format!("{kind}: this kernel has no "));
                assert_eq!(
                    self.state(),
                    before,
                    "{}: the refused base ADD",
                    self.plugin
                );
                eprintln!("note: this kernel has no {kind} links: the base ADD is refused");
                let out = self.call("DEL", &self.base.to_string(), &[]);
                assert_eq!(
                    out.exit_code, 0,
                    "{}: base config DEL: {out:?}",
                    self.plugin
                );
                return;
            }
        }
        assert_eq!(
            out.exit_code, 0,
            "{}: base config ADD: {out:?}",
            self.plugin
        );
        let out = self.call("DEL", &self.base.to_string(), &[]);
        assert_eq!(
            out.exit_code, 0,
            "{}: base config DEL: {out:?}",
            self.plugin
        );
    }

    fn run(&self, cases: Vec<Case>) {
        self.prove_base();
        let mut failures = Vec::new();
        // Each case's "after" is the next one's "before".
        let mut before = self.state();
        for c in &cases {
            let stdin = match &c.stdin {
                Stdin::Json(v) => v.to_string(),
                Stdin::Raw(s) => s.clone(),
            };
            let out = self.call("ADD", &stdin, &c.env);
            let after = self.state();
            let what = format!("{} / {}", self.plugin, c.what);
            if let Some(why) = judge(c, &out) {
                failures.push(format!("{what}: {why}: {}", short(&out)));
            }
            if after != before {
                let mut diff = before.node.diff(&after.node);
                diff.extend(
                    before
                        .pod
                        .diff(&after.pod)
                        .into_iter()
                        .map(|d| format!("pod {d}")),
                );
                for f in after.files.iter().filter(|f| !before.files.contains(f)) {
                    diff.push(format!("file: + {f}"));
                }
                for f in before.files.iter().filter(|f| !after.files.contains(f)) {
                    diff.push(format!("file: - {f}"));
                }
                failures.push(format!(
                    "{what}: the node changed:\n    {}",
                    diff.join("\n    ")
                ));
                // What a runtime does next: DEL with the same input, then
                // with a good one; the next case starts from what is left.
                let _ = self.call("DEL", &stdin, &c.env);
                let _ = self.call("DEL", &self.base.to_string(), &[]);
                before = self.state();
                continue;
            }
            before = after;
        }
        eprintln!(
            "{}: {} bad inputs, {} failed",
            self.plugin,
            cases.len(),
            failures.len()
        );
        assert!(
            failures.is_empty(),
            "{} of {} cases failed:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n")
        );
    }

    /// The cases every plugin gets, built from its base config.
    fn common_cases(&self, netns_matters: bool) -> Vec<Case> {
        let b = &self.base;
        let huge = format!(
            r#"{{"cniVersion":"1.0.0","name":"big","type":"{}","pad":"{}"}}"#,
            self.plugin,
            "a".repeat((16 << 20) + 16)
        );
        let mut v = vec![
            Case {
                what: "malformed JSON".into(),
                stdin: Stdin::Raw(r#"{"cniVersion": "1.0.0", "name": "#.into()),
                env: vec![],
                code: 6,
                needle: "not valid JSON".into(),
            },
            Case {
                what: "a JSON array".into(),
                stdin: Stdin::Raw("[1, 2]".into()),
                env: vec![],
                code: 6,
                needle: "not a JSON object".into(),
            },
            Case {
                what: "empty stdin".into(),
                stdin: Stdin::Raw(String::new()),
                env: vec![],
                code: 6,
                needle: "not valid JSON".into(),
            },
            Case {
                what: "oversized stdin (16 MiB + 16 bytes)".into(),
                stdin: Stdin::Raw(huge),
                env: vec![],
                code: 5,
                needle: "stdin".into(),
            },
            case(
                "unknown version",
                with(b, "/cniVersion", json!("9.9.9")),
                1,
                "9.9.9",
            ),
            case(
                "version not a string",
                with(b, "/cniVersion", json!(100)),
                7,
                "cniVersion",
            ),
            case("name missing", without(b, "/name"), 7, "name"),
            case(
                "name not a string",
                with(b, "/name", json!(["x"])),
                7,
                "name",
            ),
            case(
                "name with a slash",
                with(b, "/name", json!("../etc")),
                7,
                "name",
            ),
            case(
                "capabilities not an object",
                with(b, "/capabilities", json!("all")),
                7,
                "capabilities",
            ),
            env_case(
                "CNI_COMMAND unknown",
                b,
                &[("CNI_COMMAND", Some("ATTACH"))],
                4,
                "CNI_COMMAND",
            ),
            env_case(
                "CNI_IFNAME with /",
                b,
                &[("CNI_IFNAME", Some("eth0/../x"))],
                4,
                "CNI_IFNAME",
            ),
            env_case(
                "CNI_IFNAME of 16 bytes",
                b,
                &[("CNI_IFNAME", Some("eth0123456789012"))],
                4,
                "CNI_IFNAME",
            ),
            env_case(
                "CNI_IFNAME ..",
                b,
                &[("CNI_IFNAME", Some(".."))],
                4,
                "CNI_IFNAME",
            ),
            env_case(
                "CNI_IFNAME missing",
                b,
                &[("CNI_IFNAME", None)],
                4,
                "CNI_IFNAME",
            ),
            env_case(
                "CNI_CONTAINERID ..",
                b,
                &[("CNI_CONTAINERID", Some(".."))],
                4,
                "CNI_CONTAINERID",
            ),
            env_case(
                "CNI_CONTAINERID ../../etc/passwd",
                b,
                &[("CNI_CONTAINERID", Some("../../etc/passwd"))],
                4,
                "CNI_CONTAINERID",
            ),
            env_case(
                "CNI_CONTAINERID a/b",
                b,
                &[("CNI_CONTAINERID", Some("a/b"))],
                4,
                "CNI_CONTAINERID",
            ),
            env_case(
                "CNI_CONTAINERID missing",
                b,
                &[("CNI_CONTAINERID", None)],
                4,
                "CNI_CONTAINERID",
            ),
            env_case(
                "CNI_NETNS missing",
                b,
                &[("CNI_NETNS", None)],
                4,
                "CNI_NETNS",
            ),
        ];
        // Only plugins that read CNI_ARGS fail on them, as in Go (loopback,
        // portmap and bandwidth never look: see `cni_args_of_others`).
        if reads_cni_args(self.plugin) {
            v.push(env_case(
                "CNI_ARGS not K=V",
                b,
                &[("CNI_ARGS", Some("IgnoreUnknown"))],
                4,
                "CNI_ARGS",
            ));
            v.push(env_case(
                "CNI_ARGS K=V=W",
                b,
                &[("CNI_ARGS", Some("A=b=c"))],
                4,
                "CNI_ARGS",
            ));
        }
        if netns_matters {
            let file = self.state.write("not-a-netns", "plain file\n");
            v.push(env_case(
                "CNI_NETNS a regular file",
                b,
                &[("CNI_NETNS", Some(file.to_str().unwrap()))],
                4,
                "CNI_NETNS",
            ));
            v.push(env_case(
                "CNI_NETNS that does not exist",
                b,
                &[("CNI_NETNS", Some("/run/netns/cnit-no-such-netns"))],
                4,
                "CNI_NETNS",
            ));
            v.push(env_case(
                "CNI_NETNS a directory",
                b,
                &[("CNI_NETNS", Some(self.state.path().to_str().unwrap()))],
                4,
                "CNI_NETNS",
            ));
        }
        v
    }
}

/// Why the output is not the expected error, if it is not.
fn judge(c: &Case, out: &PluginOutput) -> Option<String> {
    if out.exit_code == 0 {
        return Some("exit 0".into());
    }
    if out.exit_code < 0 {
        return Some("killed by a signal".into());
    }
    let Ok(v) = serde_json::from_str::<Value>(&out.stdout) else {
        return Some("stdout is not an error JSON".into());
    };
    if v["code"].as_u64() != Some(c.code) {
        return Some(format!("code {} instead of {}", v["code"], c.code));
    }
    if !v["msg"].is_string() || v["msg"].as_str() == Some("") {
        return Some("no msg".into());
    }
    let text = format!(
        "{} {}",
        v["msg"].as_str().unwrap_or(""),
        v["details"].as_str().unwrap_or("")
    );
    if !text.contains(&c.needle) {
        return Some(format!("the message does not name {:?}", c.needle));
    }
    None
}

fn short(out: &PluginOutput) -> String {
    let mut s = format!("exit {} stdout {}", out.exit_code, out.stdout.trim());
    if s.len() > 600 {
        s.truncate(600);
        s.push('…');
    }
    s
}

/// A veth between the node (`host`) and the pod (`eth0`, 10.66.0.2/24),
/// what the plugin before a chained one would have made; returns that
/// plugin's result.
fn wire_pod(b: &Bench, host: &str) -> Value {
    b.node.ns.ip(&[
        "link",
        "add",
        host,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        b.pod.name(),
    ]);
    // No IPv6 link-local address: the kernel would add it a moment after
    // the link comes up, in the middle of some case.
    b.node.ns.ip(&["link", "set", host, "addrgenmode", "none"]);
    b.pod.ip(&["link", "set", "eth0", "addrgenmode", "none"]);
    b.node.ns.ip(&["addr", "add", "10.66.0.1/24", "dev", host]);
    b.node.ns.ip(&["link", "set", host, "up"]);
    b.pod.ip(&["addr", "add", "10.66.0.2/24", "dev", "eth0"]);
    b.pod.ip(&["link", "set", "eth0", "up"]);
    json!({"cniVersion": "1.0.0",
           "interfaces": [{"name": host}, {"name": "eth0", "sandbox": b.netns()}],
           "ips": [{"address": "10.66.0.2/24", "gateway": "10.66.0.1", "interface": 1}],
           "dns": {}})
}

// ---- the plugins -------------------------------------------------------------

#[test]
fn bad_input_loopback() {
    if !require_root("bad_input_loopback") {
        return;
    }
    let mut b = Bench::new("loopback", "lo", false);
    b.base = json!({"cniVersion": "1.0.0", "name": "lo-net", "type": "loopback"});
    let cases = b.common_cases(true);
    b.run(cases);
}

#[test]
fn bad_input_host_local() {
    if !require_root("bad_input_host_local") {
        return;
    }
    let mut b = Bench::new("host-local", "eth0", false);
    b.base = json!({"cniVersion": "1.0.0", "name": "hl-net", "type": "host-local",
        "ipam": {"type": "host-local", "dataDir": b.path("leases"),
                 "ranges": [[{"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.10", "rangeEnd": "10.88.0.20"}]],
                 "routes": [{"dst": "0.0.0.0/0"}]}});
    let base = b.base.clone();
    let r = "/ipam/ranges/0/0";
    let mut cases = b.common_cases(false);
    cases.extend([
        case("ipam missing", without(&base, "/ipam"), 7, "ipam"),
        set!(base, "ipam not an object", "/ipam" => [], 7, "ipam"),
        set!(base, "ranges not a list", "/ipam/ranges" => "10.0.0.0/8", 7, "ipam.ranges"),
        set!(base, "no range at all", "/ipam/ranges" => [], 7, "ipam.ranges"),
        case(
            "subnet missing",
            without(&base, &format!("{r}/subnet")),
            7,
            "ipam.ranges[0][0].subnet",
        ),
        set!(base, "subnet /33", &format!("{r}/subnet") => "10.88.0.0/33", 7, "ipam.ranges[0][0].subnet"),
        set!(base, "subnet 300.0.0.0/8", &format!("{r}/subnet") => "300.0.0.0/8", 7, "ipam.ranges[0][0].subnet"),
        set!(base, "subnet without prefix", &format!("{r}/subnet") => "10.88.0.0", 7, "ipam.ranges[0][0].subnet"),
        set!(base, "subnet with host bits", &format!("{r}/subnet") => "10.88.0.5/24", 7, "ipam.ranges[0][0].subnet"),
        set!(base, "subnet /32 too small", &format!("{r}/subnet") => "10.88.0.0/32", 7, "ipam.ranges[0][0].subnet"),
        set!(base, "subnet IPv6 /129", &format!("{r}/subnet") => "fd00::/129", 7, "ipam.ranges[0][0].subnet"),
        set!(base, "subnet a number", &format!("{r}/subnet") => 10, 7, "ipam.ranges[0][0].subnet"),
        set!(base, "rangeStart outside", &format!("{r}/rangeStart") => "10.99.0.1", 7, "rangeStart"),
        set!(base, "rangeStart not an address", &format!("{r}/rangeStart") => "ten", 7, "rangeStart"),
        set!(base, "rangeEnd before rangeStart", &format!("{r}/rangeEnd") => "10.88.0.5", 7, "rangeEnd"),
        set!(base, "rangeEnd a number", &format!("{r}/rangeEnd") => 20, 7, "rangeEnd"),
        set!(base, "gateway not an address", &format!("{r}/gateway") => "10.88.0.256", 7, "gateway"),
        set!(base, "gateway outside the subnet", &format!("{r}/gateway") => "10.89.0.1", 7, "gateway"),
        set!(base, "route dst not a CIDR", "/ipam/routes/0/dst" => "0.0.0.0", 7, "ipam.routes[0].dst"),
        set!(base, "route gw not an address", "/ipam/routes/0/gw" => "x", 7, "ipam.routes[0].gw"),
        set!(base, "dataDir a number", "/ipam/dataDir" => 5, 7, "ipam.dataDir"),
        case(
            "overlapping range sets",
            with(
                &base,
                "/ipam/ranges",
                json!([[{"subnet": "10.88.0.0/24"}], [{"subnet": "10.88.0.0/16"}]]),
            ),
            7,
            "ipam.ranges[1]",
        ),
        case(
            "two IPv4 sets at 0.2.0",
            with(
                &with(&base, "/cniVersion", json!("0.2.0")),
                "/ipam/ranges",
                json!([[{"subnet": "10.88.0.0/24"}], [{"subnet": "10.87.0.0/24"}]]),
            ),
            7,
            "cniVersion",
        ),
        set!(base, "runtimeConfig.ips outside every set", "/runtimeConfig" => {"ips": ["10.99.0.5/24"]}, 7, "runtimeConfig.ips"),
        set!(base, "args.cni.ips not addresses", "/args" => {"cni": {"ips": ["x"]}}, 7, "args.cni.ips"),
        env_set!(base, "CNI_ARGS IP= not an address", "CNI_ARGS" => "IP=ten", 4, "CNI_ARGS"),
        env_set!(base, "CNI_ARGS IP= outside the range", "CNI_ARGS" => "IP=10.99.0.5", 4, "CNI_ARGS"),
        env_set!(base, "CNI_ARGS unknown key", "CNI_ARGS" => "FOO=bar", 4, "FOO"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_bridge() {
    if !require_root("bad_input_bridge") {
        return;
    }
    let mut b = Bench::new("bridge", "eth0", true);
    b.base = json!({"cniVersion": "1.0.0", "name": "br-net", "type": "bridge",
        "bridge": "cni-bad", "isGateway": true, "mtu": 1400,
        "ipam": {"type": "host-local", "dataDir": b.path("leases"),
                 "ranges": [[{"subnet": "10.89.0.0/24"}]]}});
    let base = b.base.clone();
    // Delegation failures with a bridge that does not exist yet: an ADD
    // that cannot even run its IPAM plugin must create nothing.
    let fresh = |n: u32| with(&base, "/bridge", json!(format!("cni-fresh{n}")));
    let mut cases = b.common_cases(true);
    cases.extend([
        set!(base, "mtu 70000", "/mtu" => 70000, 7, "mtu"),
        set!(base, "mtu -1", "/mtu" => (-1), 7, "mtu"),
        set!(base, "mtu a string", "/mtu" => "1400", 7, "mtu"),
        set!(base, "mtu 1e30", "/mtu" => 1e30, 7, "mtu"),
        set!(base, "vlan 5000", "/vlan" => 5000, 7, "vlan"),
        set!(base, "vlanTrunk maxID < minID", "/vlanTrunk" => [{"minID": 20, "maxID": 10}], 7, "vlanTrunk[0]"),
        set!(base, "bridge name of 16 bytes", "/bridge" => "cni-bridge-01234", 7, "bridge"),
        set!(base, "bridge name with /", "/bridge" => "a/b", 7, "bridge"),
        set!(base, "bridge a number", "/bridge" => 0, 7, "bridge"),
        set!(base, "isGateway a string", "/isGateway" => "yes", 7, "isGateway"),
        case(
            "hairpinMode and promiscMode",
            with(
                &with(&base, "/hairpinMode", json!(true)),
                "/promiscMode",
                json!(true),
            ),
            7,
            "hairpinMode",
        ),
        set!(base, "ipMasqBackend unknown", "/ipMasqBackend" => "pf", 7, "ipMasqBackend"),
        set!(base, "runtimeConfig.mac not a MAC", "/runtimeConfig" => {"mac": "zz:zz"}, 7, "runtimeConfig.mac"),
        set!(base, "args.cni.mac multicast", "/args" => {"cni": {"mac": "01:00:5e:00:00:01"}}, 7, "args.cni.mac"),
        set!(base, "ipam not an object", "/ipam" => "host-local", 7, "ipam"),
        set!(base, "an IPAM error keeps its code and key (its bridge exists)", "/ipam/ranges/0/0/subnet" => "10.89.0.0/33", 7, "ipam.ranges[0][0].subnet"),
        env_set!(base, "CNI_ARGS MAC= not a MAC", "CNI_ARGS" => "MAC=zz", 4, "CNI_ARGS"),
        env_case(
            "CNI_PATH missing (IPAM delegation)",
            &fresh(1),
            &[("CNI_PATH", None)],
            4,
            "CNI_PATH",
        ),
        case(
            "IPAM plugin not in CNI_PATH",
            with(&fresh(2), "/ipam/type", json!("no-such-ipam")),
            101,
            "no-such-ipam",
        ),
        case(
            "IPAM type with a slash",
            with(&fresh(3), "/ipam/type", json!("../host-local")),
            7,
            "type",
        ),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_bandwidth() {
    if !require_root("bad_input_bandwidth") {
        return;
    }
    let mut b = Bench::new("bandwidth", "eth0", false);
    let prev = wire_pod(&b, "bw-host");
    b.base = json!({"cniVersion": "1.0.0", "name": "bw-net", "type": "bandwidth",
        "ingressRate": 8000000, "ingressBurst": 800000,
        "egressRate": 8000000, "egressBurst": 800000, "prevResult": prev});
    let base = b.base.clone();
    let mut cases = b.common_cases(true);
    cases.extend([
        set!(base, "ingressRate negative", "/ingressRate" => (-8), 7, "ingressRate"),
        set!(base, "ingressRate a string", "/ingressRate" => "8M", 7, "ingressRate"),
        set!(base, "ingressRate fractional", "/ingressRate" => 1.5, 7, "ingressRate"),
        set!(base, "ingressRate 1e30", "/ingressRate" => 1e30, 7, "ingressRate"),
        set!(base, "egressRate u64::MAX", "/egressRate" => (u64::MAX), 7, "egressRate"),
        case(
            "egressBurst missing",
            without(&base, "/egressBurst"),
            7,
            "egressBurst",
        ),
        set!(base, "ingressBurst 2^40 bits", "/ingressBurst" => (1u64 << 40), 7, "ingressBurst"),
        case(
            "runtimeConfig.bandwidth bad",
            with(
                &without(
                    &without(
                        &without(&without(&base, "/ingressRate"), "/ingressBurst"),
                        "/egressRate",
                    ),
                    "/egressBurst",
                ),
                "/runtimeConfig",
                json!({"bandwidth": {"ingressRate": "x", "ingressBurst": 8}}),
            ),
            7,
            "runtimeConfig.bandwidth.ingressRate",
        ),
        case(
            "prevResult missing",
            without(&base, "/prevResult"),
            7,
            "prevResult",
        ),
        set!(base, "prevResult not a result", "/prevResult" => {"ips": [{"address": "nope"}]}, 7, "prevResult"),
        case(
            "prevResult names no host veth",
            with(
                &base,
                "/prevResult/interfaces",
                json!([{"name": "eth0", "sandbox": b.netns()}]),
            ),
            7,
            "prevResult",
        ),
        set!(base, "version 0.2.0 (no interfaces in results)", "/cniVersion" => "0.2.0", 1, "0.2.0"),
        env_set!(base, "CNI_IFNAME not in the pod", "CNI_IFNAME" => "eth7", 4, "CNI_IFNAME"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_flannel() {
    if !require_root("bad_input_flannel") {
        return;
    }
    let mut b = Bench::new("flannel", "eth0", true);
    let env = b.state.write(
        "subnet.env",
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.5.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
    );
    let broken = |name: &str, text: &str| b.state.write(name, text);
    // subnet.env with one line changed from the good one.
    let good = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.5.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n";
    let variant = |name: &str, from: &str, to: &str| broken(name, &good.replace(from, to));
    let no_subnet = variant("no-subnet.env", "FLANNEL_SUBNET=10.244.5.1/24\n", "");
    let bad_subnet = variant("bad-subnet.env", "10.244.5.1/24", "10.244.5.1/33");
    let v6_subnet = variant("v6-subnet.env", "10.244.5.1/24", "fd00::/64");
    let bad_mtu = variant("bad-mtu.env", "FLANNEL_MTU=1450", "FLANNEL_MTU=-1");
    let no_eq = broken(
        "no-eq.env",
        "FLANNEL_NETWORK\nFLANNEL_SUBNET=10.244.5.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
    );
    b.base = json!({"cniVersion": "1.0.0", "name": "fl-net", "type": "flannel",
        "subnetFile": env, "dataDir": b.path("flannel"),
        "delegate": {"bridge": "cni-fl", "hairpinMode": true},
        "ipam": {"dataDir": b.path("leases"), "routes": [{"dst": "10.96.0.0/12"}]}});
    let base = b.base.clone();
    let fresh = |n: u32| with(&base, "/delegate/bridge", json!(format!("cni-fresh{n}")));
    let mut cases = b.common_cases(true);
    let p = |f: &PathBuf| json!(f);
    cases.extend([
        set!(base, "subnetFile relative", "/subnetFile" => "run/flannel/subnet.env", 7, "subnetFile"),
        set!(base, "subnetFile a number", "/subnetFile" => 1, 7, "subnetFile"),
        set!(base, "dataDir relative", "/dataDir" => "flannel", 7, "dataDir"),
        set!(base, "dataDir an object", "/dataDir" => {}, 7, "dataDir"),
        set!(base, "delegate a string", "/delegate" => "bridge", 7, "delegate"),
        set!(base, "delegate.type a number", "/delegate/type" => 1, 7, "delegate.type"),
        set!(base, "delegate.type a path", "/delegate/type" => "../bridge", 7, "delegate.type"),
        set!(base, "delegate.name set", "/delegate/name" => "other", 7, "delegate.name"),
        set!(base, "delegate.ipam set", "/delegate/ipam" => {}, 7, "delegate.ipam"),
        set!(base, "ipam a list", "/ipam" => [], 7, "ipam"),
        set!(base, "ipam.routes an object", "/ipam/routes" => {}, 7, "ipam.routes"),
        set!(base, "ipam.routes[0].dst not a CIDR", "/ipam/routes/0/dst" => "10.96.0.0", 7, "ipam.routes[0].dst"),
        set!(base, "ipam.routes[0].gw not an address", "/ipam/routes/0/gw" => "gw", 7, "ipam.routes[0].gw"),
        set!(base, "subnet.env missing", "/subnetFile" => "/run/cnit-no-such/subnet.env", 11, "/run/cnit-no-such/subnet.env"),
        case(
            "subnet.env without FLANNEL_SUBNET",
            with(&base, "/subnetFile", p(&no_subnet)),
            11,
            "FLANNEL_SUBNET",
        ),
        case(
            "subnet.env FLANNEL_SUBNET /33",
            with(&base, "/subnetFile", p(&bad_subnet)),
            11,
            "FLANNEL_SUBNET",
        ),
        case(
            "subnet.env FLANNEL_SUBNET IPv6",
            with(&base, "/subnetFile", p(&v6_subnet)),
            11,
            "FLANNEL_SUBNET",
        ),
        case(
            "subnet.env FLANNEL_MTU -1",
            with(&base, "/subnetFile", p(&bad_mtu)),
            11,
            "FLANNEL_MTU",
        ),
        case(
            "subnet.env key without =",
            with(&base, "/subnetFile", p(&no_eq)),
            11,
            "FLANNEL_NETWORK",
        ),
        set!(base, "subnet.env a directory", "/subnetFile" => (b.path("leases-dir-as-env")), 11, "leases-dir-as-env"),
        case(
            "delegate not in CNI_PATH",
            with(&fresh(1), "/delegate/type", json!("no-such-plugin")),
            101,
            "no-such-plugin",
        ),
        case(
            "delegate's own error keeps its code and key",
            with(&fresh(2), "/delegate/mtu", json!(70000)),
            7,
            "mtu",
        ),
        env_case(
            "CNI_PATH missing (delegation)",
            &fresh(3),
            &[("CNI_PATH", None)],
            4,
            "CNI_PATH",
        ),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_portmap() {
    if !require_root("bad_input_portmap") {
        return;
    }
    let mut b = Bench::new("portmap", "eth0", false);
    let prev = wire_pod(&b, "pm-host");
    b.base = json!({"cniVersion": "1.0.0", "name": "pm-net", "type": "portmap",
        "capabilities": {"portMappings": true},
        "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
        "prevResult": prev});
    let base = b.base.clone();
    // The first mapping's key `k`, set to `v`; and its name in messages.
    let map = |k: &str, v: Value| with(&base, &format!("/runtimeConfig/portMappings/0/{k}"), v);
    let key = |k: &str| format!("runtimeConfig.portMappings[0].{k}");
    let twice = json!([{"hostPort": 8080, "containerPort": 80},
                       {"hostPort": 8080, "containerPort": 81}]);
    let mut cases = b.common_cases(false);
    cases.extend([
        case("hostPort 0", map("hostPort", json!(0)), 7, &key("hostPort")),
        case(
            "hostPort 70000",
            map("hostPort", json!(70000)),
            7,
            &key("hostPort"),
        ),
        case(
            "hostPort -1",
            map("hostPort", json!(-1)),
            7,
            &key("hostPort"),
        ),
        case(
            "hostPort a string",
            map("hostPort", json!("80")),
            7,
            &key("hostPort"),
        ),
        case(
            "containerPort missing",
            without(&base, "/runtimeConfig/portMappings/0/containerPort"),
            7,
            "containerPort",
        ),
        case(
            "protocol icmp",
            map("protocol", json!("icmp")),
            7,
            &key("protocol"),
        ),
        case(
            "hostIP not an address",
            map("hostIP", json!("1.2.3")),
            7,
            &key("hostIP"),
        ),
        set!(base, "portMappings an object", "/runtimeConfig/portMappings" => {}, 7, "runtimeConfig.portMappings"),
        case(
            "the same host port twice",
            with(&base, "/runtimeConfig/portMappings", twice),
            7,
            "runtimeConfig.portMappings[1].hostPort",
        ),
        set!(base, "markMasqBit 32", "/markMasqBit" => 32, 7, "markMasqBit"),
        case(
            "markMasqBit and externalSetMarkChain",
            with(
                &with(&base, "/markMasqBit", json!(3)),
                "/externalSetMarkChain",
                json!("X"),
            ),
            7,
            "externalSetMarkChain",
        ),
        set!(base, "backend unknown", "/backend" => "pf", 7, "backend"),
        set!(base, "conditionsV4 a string", "/conditionsV4" => "-s 1.2.3.4", 7, "conditionsV4"),
        set!(base, "snat a string", "/snat" => "true", 7, "snat"),
        case(
            "prevResult missing",
            without(&base, "/prevResult"),
            7,
            "prevResult",
        ),
        set!(base, "prevResult not a result", "/prevResult" => {"ips": "10.66.0.2"}, 7, "prevResult"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_tuning() {
    if !require_root("bad_input_tuning") {
        return;
    }
    let mut b = Bench::new("tuning", "eth0", false);
    let prev = wire_pod(&b, "tu-host");
    b.base = json!({"cniVersion": "1.0.0", "name": "tu-net", "type": "tuning",
        "dataDir": b.path("tuning"), "mtu": 1400, "promisc": true,
        "mac": "0a:58:0a:42:00:02",
        "sysctl": {"net.core.somaxconn": "1000", "net.ipv4.conf.IFNAME.arp_ignore": "1"},
        "prevResult": prev});
    let base = b.base.clone();
    let mut cases = b.common_cases(true);
    cases.extend([
        set!(base, "sysctl outside net", "/sysctl" => {"kernel.panic": "1"}, 7, "kernel.panic"),
        set!(base, "sysctl with ..", "/sysctl" => {"net/../../kernel/panic": "1"}, 7, "sysctl"),
        set!(base, "sysctl value a number", "/sysctl" => {"net.core.somaxconn": 1000}, 7, "sysctl"),
        set!(base, "sysctl a list", "/sysctl" => ["net.core.somaxconn"], 7, "sysctl"),
        set!(base, "mac not a MAC", "/mac" => "0a:58", 7, "mac"),
        set!(base, "mtu a string", "/mtu" => "1400", 7, "mtu"),
        // Above 65535 is the device's to refuse (lo takes more): no range
        // of ours, so only what no device takes.
        set!(base, "mtu -1", "/mtu" => (-1), 7, "mtu"),
        set!(base, "mtu 2^31", "/mtu" => (1u64 << 31), 7, "mtu"),
        set!(base, "txQLen -1", "/txQLen" => (-1), 7, "txQLen"),
        set!(base, "promisc a string", "/promisc" => "on", 7, "promisc"),
        set!(base, "dataDir relative", "/dataDir" => "tuning", 7, "dataDir"),
        case(
            "prevResult missing",
            without(&base, "/prevResult"),
            7,
            "prevResult",
        ),
        env_set!(base, "CNI_ARGS MAC= not a MAC", "CNI_ARGS" => "MAC=zz", 4, "CNI_ARGS"),
        env_set!(base, "CNI_IFNAME not in the pod", "CNI_IFNAME" => "eth7", 4, "eth7"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_firewall() {
    if !require_root("bad_input_firewall") {
        return;
    }
    let mut b = Bench::new("firewall", "eth0", false);
    let prev = wire_pod(&b, "fw-host");
    // No system bus (the harness's default): the default backend is
    // iptables; ingressPolicy isolated isolates fw-host.
    b.base = json!({"cniVersion": "1.0.0", "name": "fw-net", "type": "firewall",
        "backend": "", "ingressPolicy": "isolated", "dataDir": b.path("firewall"),
        "prevResult": prev});
    let base = b.base.clone();
    let mut cases = b.common_cases(false);
    cases.extend([
        set!(base, "backend a number", "/backend" => 1, 7, "backend"),
        set!(base, "backend firewalld where it does not run", "/backend" => "firewalld", 2, "\"backend\": \"firewalld\": firewalld is not running on this node"),
        set!(base, "ingressPolicy unknown", "/ingressPolicy" => "closed", 7, "ingressPolicy: unknown ingress policy \"closed\""),
        set!(base, "ingressPolicy a list", "/ingressPolicy" => ["isolated"], 7, "ingressPolicy"),
        case(
            "isolated without interfaces",
            without(&base, "/prevResult/interfaces"),
            7,
            "ingressPolicy: \"isolated\" needs the bridge as prevResult.interfaces[0]",
        ),
        case(
            "isolated with the container's interface first",
            with(
                &base,
                "/prevResult/interfaces",
                json!([{"name": "eth0", "sandbox": b.netns()}]),
            ),
            7,
            "prevResult.interfaces[0]",
        ),
        set!(base, "bridge name a wildcard", "/prevResult/interfaces/0/name" => "fw+", 7, "prevResult.interfaces[0].name: \"fw+\" is not a bridge name"),
        set!(base, "iptablesAdminChainName with a space", "/iptablesAdminChainName" => "MY ADMIN", 7, "iptablesAdminChainName: \"MY ADMIN\" is not a usable iptables chain name"),
        set!(base, "iptablesAdminChainName too long", "/iptablesAdminChainName" => ("A".repeat(29)), 7, "is longer than 28 characters"),
        set!(base, "iptablesAdminChainName a built-in chain", "/iptablesAdminChainName" => "INPUT", 7, "iptablesAdminChainName"),
        case(
            "iptablesAdminChainName a target, with nftables",
            with(
                &with(&base, "/backend", json!("nftables")),
                "/iptablesAdminChainName",
                json!("DROP"),
            ),
            7,
            "iptablesAdminChainName: \"DROP\" is not a usable iptables chain name",
        ),
        case(
            "firewalldZone not a zone name",
            with(
                &with(&base, "/backend", json!("firewalld")),
                "/firewalldZone",
                json!("my/zone"),
            ),
            7,
            "firewalldZone: \"my/zone\" is not a firewalld zone name",
        ),
        case(
            "firewalldZone too long",
            with(
                &with(&base, "/backend", json!("firewalld")),
                "/firewalldZone",
                json!("z".repeat(18)),
            ),
            7,
            "firewalldZone",
        ),
        set!(base, "firewalldZone a number", "/firewalldZone" => 3, 7, "firewalldZone"),
        set!(base, "dataDir relative", "/dataDir" => "firewall", 7, "dataDir: \"firewall\" is not an absolute path"),
        set!(base, "dataDir with ..", "/dataDir" => "/run/../etc", 7, "dataDir"),
        set!(base, "dataDir a number", "/dataDir" => 0, 7, "dataDir"),
        case(
            "prevResult missing",
            without(&base, "/prevResult"),
            7,
            "prevResult",
        ),
        set!(base, "prevResult address not a CIDR", "/prevResult/ips/0/address" => "10.66.0.2", 7, "prevResult"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_macvlan() {
    if !require_root("bad_input_macvlan") {
        return;
    }
    let mut b = Bench::new("macvlan", "eth0", true);
    b.node.ns.ip(&[
        "link", "add", "mv-up0", "type", "veth", "peer", "name", "mv-up1",
    ]);
    b.node.ns.ip(&["link", "set", "mv-up0", "up"]);
    b.base = json!({"cniVersion": "1.0.0", "name": "mv-net", "type": "macvlan",
        "master": "mv-up0", "mode": "bridge",
        "ipam": {"type": "host-local", "dataDir": b.path("leases"),
                 "ranges": [[{"subnet": "10.90.0.0/24"}]]}});
    let base = b.base.clone();
    let mut cases = b.common_cases(true);
    cases.extend([
        set!(base, "mode unknown", "/mode" => "tunnel", 7, "mode"),
        set!(base, "master of 16 bytes", "/master" => "master0123456789", 7, "master"),
        set!(base, "mtu 70000", "/mtu" => 70000, 7, "mtu"),
        set!(base, "mtu a string", "/mtu" => "1400", 7, "mtu"),
        set!(base, "mac not a MAC", "/mac" => "zz", 7, "mac"),
        set!(base, "bcqueuelen -1", "/bcqueuelen" => (-1), 7, "bcqueuelen"),
        set!(base, "an IPAM error keeps its code and key", "/ipam/ranges/0/0/subnet" => "10.90.0.0/33", 7, "ipam.ranges[0][0].subnet"),
        env_case(
            "CNI_PATH missing (IPAM delegation)",
            &base,
            &[("CNI_PATH", None)],
            4,
            "CNI_PATH",
        ),
        set!(base, "IPAM plugin not in CNI_PATH", "/ipam/type" => "no-such-ipam", 101, "no-such-ipam"),
    ]);
    b.run(cases);
}

/// A child process killed and reaped on drop (the DHCP server and daemon
/// of the dhcp cases).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn bad_input_dhcp() {
    if !require_root("bad_input_dhcp") {
        return;
    }
    let mut b = Bench::new("dhcp", "eth0", false);
    // The pod's eth0 is on a LAN namespace where dnsmasq serves; the daemon
    // runs in the node with its socket and leases under the state dir (so
    // they are part of what must not change).
    let lan = Netns::new("lan-bad-dhcp");
    let files = TempDir::new("bad-dhcp-server");
    b.pod.ip(&[
        "link",
        "add",
        "eth0",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        lan.name(),
    ]);
    b.pod.ip(&["link", "set", "eth0", "addrgenmode", "none"]);
    b.pod.ip(&["link", "set", "eth0", "up"]);
    lan.ip(&["link", "set", "eth0", "up"]);
    lan.ip(&["addr", "add", "10.78.0.1/24", "dev", "eth0"]);
    let log = files.path().join("dnsmasq.log");
    let _server = Killed(
        lan.command("dnsmasq")
            .args([
                "--no-daemon",
                "--conf-file=/dev/null",
                "--port=0",
                "--user=root",
                "--interface=eth0",
                "--bind-interfaces",
                "--no-ping",
                "--dhcp-range=10.78.0.100,10.78.0.199,255.255.255.0,1h",
            ])
            .arg(format!(
                "--dhcp-leasefile={}",
                files.path().join("leases").display()
            ))
            .arg(format!("--log-facility={}", log.display()))
            .spawn()
            .expect("dnsmasq"),
    );
    wait_for("dnsmasq", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("DHCP, IP range"))
    });
    let sock = b.path("run/dhcp.sock");
    let _daemon = Killed(
        b.node
            .ns
            .command(bin("dhcp"))
            .arg("daemon")
            .arg("-socketpath")
            .arg(&sock)
            .arg("-leasedir")
            .arg(b.path("leases"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("dhcp daemon"),
    );
    wait_for("the daemon", || {
        std::os::unix::net::UnixStream::connect(&sock).is_ok()
    });
    b.base = json!({"cniVersion": "1.0.0", "name": "dhcp-net", "type": "macvlan",
        "ipam": {"type": "dhcp", "daemonSocketPath": sock}});
    let base = b.base.clone();
    let no_daemon = b.path("nobody.sock");
    let plain = b.state.write("plain-file.sock", "not a socket\n");
    let long_arg = format!("H={}", "h".repeat(300));
    let provide = |v: Value| with(&base, "/ipam/provide", v);
    let request = |v: Value| with(&base, "/ipam/request", v);
    let mut cases = b.common_cases(true);
    cases.extend([
        set!(base, "daemonSocketPath relative", "/ipam/daemonSocketPath" => "run/dhcp.sock", 7, "ipam.daemonSocketPath"),
        case(
            "daemonSocketPath of 200 bytes",
            with(
                &base,
                "/ipam/daemonSocketPath",
                json!(format!("/{}", "s".repeat(199))),
            ),
            7,
            "ipam.daemonSocketPath",
        ),
        set!(base, "daemonSocketPath a number", "/ipam/daemonSocketPath" => 7, 7, "ipam.daemonSocketPath"),
        set!(base, "a daemon that is not running", "/ipam/daemonSocketPath" => no_daemon, 11, no_daemon.to_str().unwrap()),
        set!(base, "daemonSocketPath a regular file", "/ipam/daemonSocketPath" => plain, 11, plain.to_str().unwrap()),
        case(
            "provide an object",
            provide(json!({"option": "12"})),
            7,
            "ipam.provide",
        ),
        case(
            "provide an unknown option name",
            provide(json!([{"option": "host-nam", "value": "x"}])),
            7,
            "ipam.provide[0].option",
        ),
        case(
            "provide option 300",
            provide(json!([{"option": "300", "value": "x"}])),
            7,
            "ipam.provide[0].option",
        ),
        case(
            "provide option a number",
            provide(json!([{"option": 12, "value": "x"}])),
            7,
            "ipam.provide[0].option",
        ),
        case(
            "provide the message type",
            provide(json!([{"option": "12", "value": "a"}, {"option": "53", "value": "x"}])),
            7,
            "ipam.provide[1].option",
        ),
        case(
            "provide a value of 300 bytes",
            provide(json!([{"option": "host-name", "value": "v".repeat(300)}])),
            7,
            "ipam.provide[0].value",
        ),
        case(
            "provide a value not a string",
            provide(json!([{"option": "host-name", "value": 5}])),
            7,
            "ipam.provide[0].value",
        ),
        case(
            "provide fromArg not a string",
            provide(json!([{"option": "host-name", "fromArg": ["H"]}])),
            7,
            "ipam.provide[0].fromArg",
        ),
        Case {
            what: "provide fromArg of 300 bytes in CNI_ARGS".into(),
            stdin: Stdin::Json(provide(json!([{"option": "host-name", "fromArg": "H"}]))),
            env: vec![("CNI_ARGS", Some(long_arg))],
            code: 4,
            needle: "CNI_ARGS H".into(),
        },
        case(
            "request a string",
            request(json!("routers")),
            7,
            "ipam.request",
        ),
        case(
            "request an unknown option",
            request(json!([{"option": "routerz"}])),
            7,
            "ipam.request[0].option",
        ),
        case(
            "request option 0",
            request(json!([{"option": "routers"}, {"option": "0"}])),
            7,
            "ipam.request[1].option",
        ),
        case(
            "request skipDefault not a bool",
            request(json!([{"skipDefault": "yes"}])),
            7,
            "ipam.request[0].skipDefault",
        ),
        set!(base, "priority -5", "/ipam/priority" => (-5), 7, "ipam.priority"),
        env_set!(base, "CNI_IFNAME not in the pod", "CNI_IFNAME" => "eth7", 4, "eth7"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_ptp() {
    if !require_root("bad_input_ptp") {
        return;
    }
    let mut b = Bench::new("ptp", "eth0", true);
    b.base = json!({"cniVersion": "1.0.0", "name": "ptp-net", "type": "ptp",
        "ipMasq": true, "ipMasqBackend": "nftables",
        "ipam": {"type": "host-local", "dataDir": b.path("leases"),
                 "ranges": [[{"subnet": "10.91.0.0/24"}], [{"subnet": "fd91::/64"}]]}});
    let base = b.base.clone();
    let mut cases = b.common_cases(true);
    cases.extend([
        set!(base, "mtu 70000", "/mtu" => 70000, 7, "mtu"),
        set!(base, "mtu 67", "/mtu" => 67, 7, "mtu"),
        set!(base, "mtu a string", "/mtu" => "1400", 7, "mtu"),
        set!(base, "MTU capitalised, out of range", "/MTU" => (-5), 7, "mtu"),
        set!(base, "ipMasq a string", "/ipMasq" => "yes", 7, "ipMasq"),
        set!(base, "ipMasqBackend unknown", "/ipMasqBackend" => "pf", 7, "ipMasqBackend"),
        set!(base, "ipMasqBackend a number", "/ipMasqBackend" => 5, 7, "ipMasqBackend"),
        case("ipam missing", without(&base, "/ipam"), 7, "ipam"),
        set!(base, "ipam without a type", "/ipam" => {}, 7, "ipam"),
        set!(base, "ipam a string", "/ipam" => "host-local", 7, "ipam"),
        set!(base, "dns a list", "/dns" => ["10.0.0.53"], 7, "dns"),
        set!(base, "prevResult a string", "/prevResult" => "x", 7, "prevResult"),
        set!(base, "an IPAM error keeps its code and key", "/ipam/ranges/0/0/subnet" => "10.91.0.0/33", 7, "ipam.ranges[0][0].subnet"),
        env_case(
            "CNI_PATH missing (IPAM delegation)",
            &base,
            &[("CNI_PATH", None)],
            4,
            "CNI_PATH",
        ),
        set!(base, "IPAM plugin not in CNI_PATH", "/ipam/type" => "no-such-ipam", 101, "no-such-ipam"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_tap() {
    if !require_root("bad_input_tap") {
        return;
    }
    let mut b = Bench::new("tap", "eth0", true);
    b.pod.ip(&["link", "add", "br-tap", "type", "bridge"]);
    b.pod.ip(&[
        "link", "add", "not-br", "type", "veth", "peer", "name", "not-br1",
    ]);
    b.base = json!({"cniVersion": "1.0.0", "name": "tap-net", "type": "tap",
        "owner": 107, "group": 107, "multiQueue": true, "bridge": "br-tap",
        "ipam": {"type": "host-local", "dataDir": b.path("leases"),
                 "ranges": [[{"subnet": "10.92.0.0/24"}]]}});
    let base = b.base.clone();
    let mut cases = b.common_cases(true);
    cases.extend([
        set!(base, "mtu 70000", "/mtu" => 70000, 7, "mtu"),
        set!(base, "mtu a string", "/mtu" => "1400", 7, "mtu"),
        set!(base, "MTU capitalised, negative", "/MTU" => (-1), 7, "mtu"),
        set!(base, "multiQueue a string", "/multiQueue" => "yes", 7, "multiQueue"),
        set!(base, "owner negative", "/owner" => (-1), 7, "owner"),
        set!(base, "owner above 32 bits", "/owner" => 4294967296u64, 7, "owner"),
        set!(base, "owner a name", "/owner" => "qemu", 7, "owner"),
        set!(base, "group a fraction", "/group" => 1.5, 7, "group"),
        set!(base, "bridge a number", "/bridge" => 5, 7, "bridge"),
        set!(base, "bridge of 16 bytes", "/bridge" => "bridge0123456789", 7, "bridge"),
        set!(base, "bridge not in the pod", "/bridge" => "br-none", 7, "bridge"),
        set!(base, "bridge not a bridge", "/bridge" => "not-br", 7, "bridge"),
        set!(base, "mac not a MAC", "/mac" => "zz", 7, "mac"),
        set!(base, "runtimeConfig.mac multicast", "/runtimeConfig" => {"mac": "01:00:5e:00:00:01"}, 7, "runtimeConfig.mac"),
        set!(base, "args.cni.mac not a MAC", "/args" => {"cni": {"mac": "0a:00"}}, 7, "args.cni.mac"),
        env_set!(base, "CNI_ARGS MAC not a MAC", "CNI_ARGS" => "IgnoreUnknown=1;MAC=nope", 4, "CNI_ARGS MAC"),
        case(
            "selinuxContext without SELinux",
            with(
                &base,
                "/selinuxContext",
                json!("system_u:system_r:container_t:s0"),
            ),
            2,
            "selinuxContext",
        ),
        set!(base, "selinuxContext a number", "/selinuxContext" => 1, 7, "selinuxContext"),
        set!(base, "an IPAM error keeps its code and key", "/ipam/ranges/0/0/subnet" => "10.92.0.0/33", 7, "ipam.ranges[0][0].subnet"),
        env_case(
            "CNI_PATH missing (IPAM delegation)",
            &base,
            &[("CNI_PATH", None)],
            4,
            "CNI_PATH",
        ),
        set!(base, "IPAM plugin not in CNI_PATH", "/ipam/type" => "no-such-ipam", 101, "no-such-ipam"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_host_device() {
    if !require_root("bad_input_host_device") {
        return;
    }
    let mut b = Bench::new("host-device", "net1", true);
    let ns = &b.node.ns;
    for (dev, peer) in [
        ("hd-vf0", "hd-vf0p"),
        ("hd-port", "hd-portp"),
        ("hd-used", "hd-usedp"),
    ] {
        ns.ip(&["link", "add", dev, "type", "veth", "peer", "name", peer]);
    }
    ns.ip(&["link", "add", "hd-br", "type", "bridge"]);
    ns.ip(&["link", "set", "hd-port", "master", "hd-br"]);
    ns.ip(&["addr", "add", "10.94.0.1/24", "dev", "hd-used"]);
    b.base = json!({"cniVersion": "1.0.0", "name": "hd-net", "type": "host-device",
        "device": "hd-vf0",
        "ipam": {"type": "host-local", "dataDir": b.path("leases"),
                 "ranges": [[{"subnet": "10.93.0.0/24"}]]}});
    let base = b.base.clone();
    let other = |keys: Value| {
        let mut v = without(&base, "/device");
        merge(&mut v, keys);
        v
    };
    let mut cases = b.common_cases(true);
    cases.extend([
        case(
            "no key names a device",
            without(&base, "/device"),
            7,
            "device",
        ),
        set!(base, "device a number", "/device" => 5, 7, "device"),
        set!(base, "device of 16 bytes", "/device" => "device0123456789", 7, "device"),
        set!(base, "device with a slash", "/device" => "a/b", 7, "device"),
        set!(base, "device not on the node", "/device" => "hd-none", 7, "device"),
        set!(base, "device a bridge port", "/device" => "hd-port", 7, "device"),
        set!(base, "device with an address of the node", "/device" => "hd-used", 7, "device"),
        set!(base, "device a bridge (stays in its namespace)", "/device" => "hd-br", 7, "device"),
        case(
            "DEVICE capitalised, not on the node",
            other(json!({"DEVICE": "hd-none"})),
            7,
            "device",
        ),
        case(
            "hwaddr not a MAC",
            other(json!({"hwaddr": "zz"})),
            7,
            "hwaddr",
        ),
        case("hwaddr a number", other(json!({"hwaddr": 12})), 7, "hwaddr"),
        case(
            "hwaddr of 7 bytes",
            other(json!({"hwaddr": "0a:58:0a:00:00:01:02"})),
            7,
            "hwaddr",
        ),
        case(
            "hwaddr of no link",
            other(json!({"hwaddr": "0a:58:0a:5e:00:99"})),
            7,
            "hwaddr",
        ),
        case(
            "HWAddr capitalised, not a MAC",
            other(json!({"HWAddr": "0a:58"})),
            7,
            "hwaddr",
        ),
        case(
            "kernelpath relative",
            other(json!({"kernelpath": "sys/devices/virtual"})),
            7,
            "kernelpath",
        ),
        case(
            "kernelpath outside /sys/devices",
            other(json!({"kernelpath": "/sys/class/net/hd-vf0"})),
            7,
            "kernelpath",
        ),
        case(
            "kernelpath climbing out",
            other(json!({"kernelpath": "/sys/devices/../../etc"})),
            7,
            "kernelpath",
        ),
        case(
            "kernelpath without a net directory",
            other(json!({"kernelpath": "/sys/devices/system/cpu"})),
            7,
            "kernelpath",
        ),
        case(
            "kernelpath a list",
            other(json!({"kernelpath": ["/sys/devices/virtual"]})),
            7,
            "kernelpath",
        ),
        case(
            "pciBusID with a slash",
            other(json!({"pciBusID": "../../../etc"})),
            7,
            "pciBusID",
        ),
        case(
            "pciBusID ..",
            other(json!({"pciBusID": ".."})),
            7,
            "pciBusID",
        ),
        case(
            "pciBusID of no device",
            other(json!({"pciBusID": "0000:ff:1f.7"})),
            7,
            "pciBusID",
        ),
        case(
            "pciBusID a number",
            other(json!({"pciBusID": 3})),
            7,
            "pciBusID",
        ),
        case(
            "runtimeConfig.deviceID of no device",
            other(json!({"runtimeConfig": {"deviceID": "0000:ff:1f.7"}})),
            7,
            "runtimeConfig.deviceID",
        ),
        case(
            "runtimeConfig.deviceID with a slash",
            other(json!({"runtimeConfig": {"deviceID": "../x"}})),
            7,
            "runtimeConfig.deviceID",
        ),
        case(
            "runtimeConfig.deviceID a number",
            other(json!({"runtimeConfig": {"deviceID": 7}})),
            7,
            "runtimeConfig.deviceID",
        ),
        case(
            "RuntimeConfig.DeviceID capitalised, of no device",
            other(json!({"RuntimeConfig": {"DeviceID": "mlx5_core.sf.99"}})),
            7,
            "runtimeConfig.deviceID",
        ),
        set!(base, "runtimeConfig a string", "/runtimeConfig" => "x", 7, "runtimeConfig"),
        set!(base, "DPDKMode a string", "/DPDKMode" => "yes", 7, "DPDKMode"),
        set!(base, "dns a list", "/dns" => ["10.0.0.53"], 7, "dns"),
        set!(base, "ipam a string", "/ipam" => "host-local", 7, "ipam"),
        set!(base, "prevResult a string", "/prevResult" => "x", 7, "prevResult"),
        set!(base, "an IPAM error keeps its code and key", "/ipam/ranges/0/0/subnet" => "10.93.0.0/33", 7, "ipam.ranges[0][0].subnet"),
        env_case(
            "CNI_PATH missing (IPAM delegation)",
            &base,
            &[("CNI_PATH", None)],
            4,
            "CNI_PATH",
        ),
        set!(base, "IPAM plugin not in CNI_PATH", "/ipam/type" => "no-such-ipam", 101, "no-such-ipam"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_static() {
    if !require_root("bad_input_static") {
        return;
    }
    let mut b = Bench::new("static", "eth0", false);
    b.base = json!({"cniVersion": "1.0.0", "name": "st-net", "type": "macvlan",
        "ipam": {"type": "static",
                 "addresses": [{"address": "10.91.0.5/24", "gateway": "10.91.0.1"},
                               {"address": "fd91::5/64"}],
                 "routes": [{"dst": "0.0.0.0/0"}],
                 "dns": {"nameservers": ["10.91.0.1"]}}});
    let base = b.base.clone();
    // static never opens the namespace: a bad CNI_NETNS is not its concern.
    let mut cases = b.common_cases(false);
    let mut runtime = base.clone();
    runtime["runtimeConfig"] = json!({"ips": ["10.91.0.6/24"]});
    let mut args = base.clone();
    args["args"] = json!({"cni": {"ips": ["10.91.0.7/24"]}});
    cases.extend([
        case("ipam missing", without(&base, "/ipam"), 7, "ipam"),
        set!(base, "addresses not a list", "/ipam/addresses" => {"address": "10.91.0.5/24"}, 7, "ipam.addresses"),
        set!(base, "an address not an object", "/ipam/addresses/0" => "10.91.0.5/24", 7, "ipam.addresses[0]"),
        set!(base, "address without a prefix", "/ipam/addresses/0/address" => "10.91.0.5", 7, "ipam.addresses[0].address"),
        set!(base, "address /33", "/ipam/addresses/1/address" => "10.91.0.5/33", 7, "ipam.addresses[1].address"),
        case(
            "address missing",
            without(&base, "/ipam/addresses/1/address"),
            7,
            "ipam.addresses[1].address",
        ),
        set!(base, "address a number", "/ipam/addresses/0/address" => 5, 7, "ipam.addresses[0].address"),
        set!(base, "gateway not an address", "/ipam/addresses/0/gateway" => "10.91.0", 7, "ipam.addresses[0].gateway"),
        set!(base, "gateway of the other family", "/ipam/addresses/0/gateway" => "fd91::1", 7, "ipam.addresses[0].gateway"),
        set!(base, "the same address twice", "/ipam/addresses/1/address" => "10.91.0.5/16", 7, "ipam.addresses[1]"),
        case(
            "two IPv4 addresses at 0.2.0",
            with(
                &with(&base, "/cniVersion", json!("0.2.0")),
                "/ipam/addresses/1/address",
                json!("10.92.0.5/24"),
            ),
            7,
            "cniVersion",
        ),
        set!(base, "routes not a list", "/ipam/routes" => "0.0.0.0/0", 7, "ipam.routes"),
        set!(base, "route without dst", "/ipam/routes/0" => {"gw": "10.91.0.1"}, 7, "ipam.routes[0].dst"),
        case(
            "route gw not an address",
            with(
                &base,
                "/ipam/routes/0",
                json!({"dst": "0.0.0.0/0", "gw": "x"}),
            ),
            7,
            "ipam.routes[0].gw",
        ),
        set!(base, "dns not an object", "/ipam/dns" => ["10.91.0.1"], 7, "ipam.dns"),
        set!(base, "dns nameservers not a list", "/ipam/dns/nameservers" => "10.91.0.1", 7, "ipam.dns.nameservers"),
        case(
            "runtimeConfig.ips not CIDRs",
            with(&runtime, "/runtimeConfig/ips/0", json!("10.91.0.6")),
            7,
            "runtimeConfig.ips[0]",
        ),
        case(
            "runtimeConfig.ips not a list",
            with(&runtime, "/runtimeConfig/ips", json!("10.91.0.6/24")),
            7,
            "runtimeConfig.ips",
        ),
        case(
            "args.cni.ips not CIDRs",
            with(&args, "/args/cni/ips/0", json!("nope")),
            7,
            "args.cni.ips[0]",
        ),
        env_set!(base, "CNI_ARGS IP= without a prefix", "CNI_ARGS" => "IP=10.91.0.9", 4, "CNI_ARGS IP=10.91.0.9"),
        env_set!(base, "CNI_ARGS GATEWAY= not an address", "CNI_ARGS" => "IP=10.91.0.9/24;GATEWAY=gw", 4, "CNI_ARGS GATEWAY=gw"),
        env_set!(base, "CNI_ARGS an unknown key", "CNI_ARGS" => "IP=10.91.0.9/24;MAC=0a:58:00:00:00:01", 4, "MAC"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_sbr() {
    if !require_root("bad_input_sbr") {
        return;
    }
    let mut b = Bench::new("sbr", "eth0", false);
    let prev = wire_pod(&b, "sb-host");
    b.base = json!({"cniVersion": "1.0.0", "name": "sb-net", "type": "sbr",
        "gateways": ["10.66.0.1"], "addSourceHints": true, "prevResult": prev});
    let base = b.base.clone();
    let mut cases = b.common_cases(true);
    cases.extend([
        set!(base, "table 0", "/table" => 0, 7, "table"),
        set!(base, "table -5", "/table" => (-5), 7, "table"),
        set!(base, "table 2^32", "/table" => (1u64 << 32), 7, "table"),
        set!(base, "table main", "/table" => 254, 7, "table"),
        set!(base, "table a string", "/table" => "100", 7, "table"),
        set!(base, "gateways not a list", "/gateways" => "10.66.0.1", 7, "gateways"),
        set!(base, "a gateway not an address", "/gateways" => ["10.66.0"], 7, "gateways[0]"),
        set!(base, "two IPv4 gateways", "/gateways" => ["10.66.0.1", "10.66.0.254"], 7, "gateways[1]"),
        case(
            "three gateways",
            with(
                &base,
                "/gateways",
                json!(["10.66.0.1", "fd66::1", "fd66::2"]),
            ),
            7,
            "gateways",
        ),
        set!(base, "a multicast gateway", "/gateways" => ["224.0.0.1"], 7, "gateways[0]"),
        set!(base, "addSourceHints a string", "/addSourceHints" => "yes", 7, "addSourceHints"),
        case(
            "prevResult missing",
            without(&base, "/prevResult"),
            7,
            "prevResult",
        ),
        set!(base, "prevResult not a result", "/prevResult" => {"ips": [{"address": "nope"}]}, 7, "prevResult"),
        case(
            "prevResult without an address for the interface",
            with(
                &base,
                "/prevResult/ips",
                json!([{"address": "10.66.0.2/24", "interface": 0}]),
            ),
            7,
            "prevResult",
        ),
        set!(base, "a gateway the kernel refuses (rolled back)", "/gateways" => ["192.0.2.1"], 100, "192.0.2.1"),
        env_set!(base, "CNI_IFNAME not in the pod", "CNI_IFNAME" => "eth7", 7, "prevResult"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_tc_redirect_tap() {
    if !require_root("bad_input_tc_redirect_tap") {
        return;
    }
    let mut b = Bench::new("tc-redirect-tap", "eth0", false);
    let prev = wire_pod(&b, "trt-host");
    b.base = json!({"cniVersion": "1.0.0", "name": "trt-net", "type": "tc-redirect-tap",
        "prevResult": prev});
    let base = b.base.clone();
    let arg = |what: &str, args: &str, needle: &str| {
        env_case(what, &base, &[("CNI_ARGS", Some(args))], 4, needle)
    };
    let mut cases = b.common_cases(true);
    cases.extend([
        set!(base, "cniVersion 0.2.0 (no chaining)", "/cniVersion" => "0.2.0", 1, "0.2.0"),
        case(
            "prevResult missing",
            without(&base, "/prevResult"),
            7,
            "prevResult",
        ),
        set!(base, "prevResult not a result", "/prevResult" => {"ips": [{"address": "nope"}]}, 7, "prevResult"),
        case(
            "prevResult without a sandbox interface",
            with(
                &base,
                "/prevResult/interfaces",
                json!([{"name": "trt-host"}, {"name": "eth0"}]),
            ),
            7,
            "no interface with a sandbox",
        ),
        case(
            "prevResult without interfaces",
            without(&base, "/prevResult/interfaces"),
            7,
            "prevResult.interfaces",
        ),
        env_set!(base, "CNI_IFNAME not the sandbox interface", "CNI_IFNAME" => "eth7", 7, "CNI_IFNAME"),
        arg(
            "TC_REDIRECT_TAP_NAME of 16 bytes",
            "TC_REDIRECT_TAP_NAME=tap0123456789abc",
            "TC_REDIRECT_TAP_NAME",
        ),
        arg(
            "TC_REDIRECT_TAP_NAME with /",
            "TC_REDIRECT_TAP_NAME=a/b",
            "TC_REDIRECT_TAP_NAME",
        ),
        arg(
            "TC_REDIRECT_TAP_NAME ..",
            "TC_REDIRECT_TAP_NAME=..",
            "TC_REDIRECT_TAP_NAME",
        ),
        arg(
            "TC_REDIRECT_TAP_NAME with a space",
            "TC_REDIRECT_TAP_NAME=a b",
            "TC_REDIRECT_TAP_NAME",
        ),
        arg(
            "TC_REDIRECT_TAP_NAME a template of %s",
            "TC_REDIRECT_TAP_NAME=tap%s",
            "TC_REDIRECT_TAP_NAME",
        ),
        arg(
            "TC_REDIRECT_TAP_NAME a template of two %d",
            "TC_REDIRECT_TAP_NAME=t%d%d",
            "TC_REDIRECT_TAP_NAME",
        ),
        arg(
            "TC_REDIRECT_TAP_UID negative",
            "IgnoreUnknown=1;TC_REDIRECT_TAP_UID=-1",
            "TC_REDIRECT_TAP_UID",
        ),
        arg(
            "TC_REDIRECT_TAP_UID a name",
            "TC_REDIRECT_TAP_UID=nobody",
            "TC_REDIRECT_TAP_UID",
        ),
        arg(
            "TC_REDIRECT_TAP_UID empty",
            "TC_REDIRECT_TAP_UID=",
            "TC_REDIRECT_TAP_UID",
        ),
        arg(
            "TC_REDIRECT_TAP_UID the kernel's none",
            "TC_REDIRECT_TAP_UID=4294967295",
            "TC_REDIRECT_TAP_UID",
        ),
        arg(
            "TC_REDIRECT_TAP_UID past 32 bits",
            "TC_REDIRECT_TAP_UID=4294967296",
            "TC_REDIRECT_TAP_UID",
        ),
        arg(
            "TC_REDIRECT_TAP_GID hex",
            "TC_REDIRECT_TAP_GID=0x10",
            "TC_REDIRECT_TAP_GID",
        ),
        env_set!(base, "TC_REDIRECT_TAP_NAME taken (the veth's)", "CNI_ARGS" => "TC_REDIRECT_TAP_NAME=eth0", 100, "TC_REDIRECT_TAP_NAME"),
    ]);
    b.run(cases);
}

/// A node with the master `lk-up0` (a veth, MTU 1500) for the plugins that
/// stack a link on one.
fn stacked_bench(plugin: &'static str) -> Bench {
    let mut b = Bench::new(plugin, "eth0", true);
    b.kind = Some(plugin);
    b.node.ns.ip(&[
        "link", "add", "lk-up0", "type", "veth", "peer", "name", "lk-up1",
    ]);
    b.node.ns.ip(&["link", "set", "lk-up0", "up"]);
    b
}

fn ipam_of(b: &Bench) -> Value {
    json!({"type": "host-local", "dataDir": b.path("leases"),
           "ranges": [[{"subnet": "10.91.0.0/24"}]]})
}

/// The master cases vlan and ipvlan share: all refused before a link
/// would be made, so they are checked on this kernel too (an IPAM error,
/// which comes after the link, is in `tests/tests/fullkernel.rs`).
fn master_cases(b: &Bench) -> Vec<Case> {
    let base = &b.base;
    vec![
        case(
            "mtu above the master's",
            with(base, "/mtu", json!(1600)),
            7,
            "mtu: invalid MTU 1600: larger than the MTU of master \"lk-up0\" (1500)",
        ),
        case("mtu -1", with(base, "/mtu", json!(-1)), 7, "mtu"),
        case("mtu a string", with(base, "/mtu", json!("1400")), 7, "mtu"),
        case(
            "master missing on the node",
            with(base, "/master", json!("no-such-up0")),
            7,
            "master: \"no-such-up0\" not found in the plugin's network namespace",
        ),
        case(
            "master only in the container (linkInContainer)",
            with(base, "/linkInContainer", json!(true)),
            7,
            "master: \"lk-up0\" not found in the container's network namespace",
        ),
        case(
            "no master and no default route",
            without(base, "/master"),
            7,
            "master: not set, and the plugin's network namespace has no default route",
        ),
        case(
            "master of 16 bytes",
            with(base, "/master", json!("master0123456789")),
            7,
            "master",
        ),
        case(
            "master not a string",
            with(base, "/master", json!(1)),
            7,
            "master",
        ),
        case(
            "linkInContainer not a bool",
            with(base, "/linkInContainer", json!("yes")),
            7,
            "linkInContainer",
        ),
        case(
            "IPAM plugin not in CNI_PATH",
            with(base, "/ipam/type", json!("no-such-ipam")),
            101,
            "no-such-ipam",
        ),
        env_case(
            "CNI_PATH missing (IPAM delegation)",
            base,
            &[("CNI_PATH", None)],
            4,
            "CNI_PATH",
        ),
    ]
}

#[test]
fn bad_input_vlan() {
    if !require_root("bad_input_vlan") {
        return;
    }
    let mut b = stacked_bench("vlan");
    b.base = json!({"cniVersion": "1.0.0", "name": "vl-net", "type": "vlan",
        "master": "lk-up0", "vlanId": 100, "ipam": ipam_of(&b)});
    let base = b.base.clone();
    let mut cases = b.common_cases(true);
    cases.extend(master_cases(&b));
    cases.extend([
        set!(base, "vlanId 4095", "/vlanId" => 4095, 7, "vlanId: invalid VLAN ID 4095 (must be between 0 and 4094)"),
        set!(base, "vlanId -1", "/vlanId" => (-1), 7, "vlanId: invalid VLAN ID -1"),
        set!(base, "vlanId a string", "/vlanId" => "100", 7, "vlanId"),
        case(
            "VLANID 5000 (Go's case folding)",
            with(&without(&base, "/vlanId"), "/VLANID", json!(5000)),
            7,
            "vlanId",
        ),
        // No `ipam`, or one without a type, is layer 2 only (upstream
        // #1302), so only a type of the wrong JSON kind is refused.
        set!(base, "ipam.type a number", "/ipam" => {"type": 5}, 7, "type"),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_ipvlan() {
    if !require_root("bad_input_ipvlan") {
        return;
    }
    let mut b = stacked_bench("ipvlan");
    b.base = json!({"cniVersion": "1.0.0", "name": "ipvl-net", "type": "ipvlan",
        "master": "lk-up0", "mode": "l3", "ipam": ipam_of(&b)});
    let base = b.base.clone();
    let chained = json!({"cniVersion": "1.0.0", "name": "ipvl-net", "type": "ipvlan",
        "prevResult": {"cniVersion": "1.0.0",
                       "interfaces": [{"name": "lk-up0"}, {"name": "lk-up1"}],
                       "ips": [{"address": "10.91.0.9/24", "interface": 0}]}});
    let mut cases = b.common_cases(true);
    cases.extend(master_cases(&b));
    cases.extend([
        set!(base, "mode l4", "/mode" => "l4", 7, "mode: unknown ipvlan mode \"l4\" (want l2, l3 or l3s)"),
        set!(base, "mode L2", "/mode" => "L2", 7, "mode: unknown ipvlan mode \"L2\""),
        set!(base, "mode a number", "/mode" => 2, 7, "mode"),
        case(
            "no ipam and no prevResult",
            without(&base, "/ipam"),
            7,
            "ipam.type: missing",
        ),
        case(
            "chained: no master, a prevResult of two interfaces",
            chained.clone(),
            7,
            "master: not set, and the chained prevResult has 2 interfaces",
        ),
        case(
            "chained: a prevResult without addresses and no ipam",
            with(
                &with(&chained, "/prevResult/ips", json!([])),
                "/master",
                json!("lk-up0"),
            ),
            7,
            "ipam.type: missing",
        ),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_dummy() {
    if !require_root("bad_input_dummy") {
        return;
    }
    let mut b = Bench::new("dummy", "eth0", true);
    b.kind = Some("dummy");
    b.base = json!({"cniVersion": "1.0.0", "name": "dm-net", "type": "dummy", "ipam": ipam_of(&b)});
    let base = b.base.clone();
    let mut cases = b.common_cases(true);
    cases.extend([
        case("no ipam", without(&base, "/ipam"), 7, "ipam.type: missing"),
        set!(base, "ipam type empty", "/ipam/type" => "", 7, "ipam.type: missing"),
        set!(base, "ipam not an object", "/ipam" => [], 7, "ipam"),
        set!(base, "IPAM plugin not in CNI_PATH", "/ipam/type" => "no-such-ipam", 101, "no-such-ipam"),
        env_case(
            "CNI_PATH missing (IPAM delegation)",
            &base,
            &[("CNI_PATH", None)],
            4,
            "CNI_PATH",
        ),
    ]);
    b.run(cases);
}

#[test]
fn bad_input_vrf() {
    if !require_root("bad_input_vrf") {
        return;
    }
    let mut b = Bench::new("vrf", "eth0", false);
    b.kind = Some("vrf");
    let prev = wire_pod(&b, "vrf-h0");
    b.base = json!({"cniVersion": "1.0.0", "name": "vrf-net", "type": "vrf",
        "vrfname": "red", "table": 100, "prevResult": prev});
    let base = b.base.clone();
    // The pod's eth0 on a bridge of its own: a master already.
    b.pod.ip(&["link", "add", "pbr0", "type", "bridge"]);
    let mut cases = b.common_cases(true);
    cases.extend([
        case("vrfname missing", without(&base, "/vrfname"), 7, "vrfname: missing"),
        set!(base, "vrfname empty", "/vrfname" => "", 7, "vrfname: missing"),
        set!(base, "vrfname of 16 bytes", "/vrfname" => "vrf0123456789012", 7, "vrfname: interface name"),
        set!(base, "vrfname a number", "/vrfname" => 7, 7, "vrfname"),
        set!(base, "table -1", "/table" => (-1), 7, "table"),
        set!(base, "table 2^32", "/table" => 4294967296u64, 7, "table"),
        set!(base, "table a string", "/table" => "100", 7, "table"),
        set!(base, "table 254 (main)", "/table" => 254, 7, "table: 254 is a table of the kernel's own"),
        set!(base, "the VRF's name taken by a link that is not a VRF", "/vrfname" => "pbr0", 7, "vrfname: \"pbr0\" already exists in the container and is not a VRF (it is a bridge link)"),
        case(
            "no prevResult",
            without(&base, "/prevResult"),
            7,
            "prevResult: missing",
        ),
        env_set!(base, "CNI_IFNAME not in the container", "CNI_IFNAME" => "eth7", 4, "CNI_IFNAME \"eth7\": no such interface in the container"),
        set!(base, "a cniVersion before chaining (0.2.0)", "/cniVersion" => "0.2.0", 1, "0.2.0"),
    ]);
    b.run(cases);
    // The interface already has a master (the pod's bridge): refused, and
    // it stays on its bridge.
    b.pod.ip(&["link", "set", "eth0", "master", "pbr0"]);
    let before = b.state();
    let out = b.call("ADD", &base.to_string(), &[]);
    out.assert_error(
        103,
        "interface \"eth0\" already has a master (\"pbr0\"): it cannot join VRF \"red\"",
    );
    assert_eq!(b.state(), before);
}
