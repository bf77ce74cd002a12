//! One check per fuzz target. Each takes arbitrary bytes, runs a parser of
//! the suite on them, and asserts what must hold for any input: no panic,
//! errors with a spec code and a message, and the round trips the code
//! promises. Shared by the fuzz targets and the corpus replay test
//! (`tests/tests/fuzz_corpus.rs`), which both depend on the plugin crates'
//! libraries.

use libcni::args::CniArgs;
use libcni::error::Error;
use libcni::gojson;
use libcni::skel::{self, CmdArgs, Command, Plugin};
use libcni::types::{CniResult, NetConf};
use libcni::version::{self, Version};
use serde_json::Value;
use std::path::Path;

/// The codes an error of the suite may carry.
fn assert_spec_code(e: &Error, what: &str) {
    let code = e.code();
    assert!(
        matches!(code, 1..=7 | 11 | 50 | 51 | 100..=103 | 999),
        "{what}: code {code} for {e}"
    );
    assert!(
        !e.to_string().is_empty(),
        "{what}: empty message (code {code})"
    );
}

/// `input` split at its first NUL: (before, after). No NUL: ("", input).
fn split_nul(input: &[u8]) -> (&[u8], &[u8]) {
    match input.iter().position(|b| *b == 0) {
        Some(i) => (&input[..i], &input[i + 1..]),
        None => (&[], input),
    }
}

/// What the skel would hand a plugin for `config` and `cni_args`, if it
/// accepted them.
fn cmd_args(command: Command, config: &[u8], cni_args: &str) -> Option<CmdArgs> {
    let conf: NetConf = skel::parse_config(config).ok()?;
    let version = Version::parse(&conf.cni_version)?;
    CniArgs::parse(cni_args).ok()?;
    Some(CmdArgs {
        command,
        container_id: "fuzz-ctr".into(),
        netns: "/run/netns/fuzz".into(),
        ifname: "eth0".into(),
        cni_args: cni_args.to_string(),
        path: vec![],
        stdin: config.to_vec(),
        conf,
        version,
    })
}

// ---- netconf -------------------------------------------------------------

/// A plugin config (the keys every plugin shares) and a runtime's conflist
/// or legacy single config, from the same bytes.
pub fn netconf(data: &[u8]) {
    match skel::parse_config::<NetConf>(data) {
        Ok(conf) => {
            if let Err(e) = libcni::types::config::validate_network_name(&conf.name) {
                assert_eq!(e.code(), 7, "{e}");
            }
            match version::parse_supported(&conf.cni_version, &version::ALL) {
                Ok(v) => {
                    if let Some(prev) = conf.prev_result.as_ref().filter(|p| !p.is_null()) {
                        if let Err(e) = CniResult::from_json(prev, v) {
                            assert_spec_code(&e, "prevResult");
                        }
                    }
                }
                Err(e) => assert_eq!(e.code(), 1, "{e}"),
            }
            let _ = conf.gc_valid_attachments();
            let _ = conf.args_cni::<Vec<String>>("ips");
            let _ = (conf.ipam(), conf.dns(), conf.capabilities());
            // What a plugin passes on to a delegate: re-encodable.
            serde_json::to_vec(&conf).expect("a parsed NetConf encodes");
        }
        Err(e) => assert!(matches!(e.code(), 6 | 7), "{e}"),
    }
    for (single, parsed) in [
        (false, cnitool::conf::conf_list_from_bytes(data)),
        (true, cnitool::conf::conf_from_single_bytes(data)),
    ] {
        match parsed {
            Ok(list) => {
                if !single {
                    assert_eq!(list.bytes, data, "a conflist keeps its bytes");
                }
                for p in &list.plugins {
                    serde_json::to_vec(p).expect("plugin object encodes");
                }
            }
            Err(e) => assert_spec_code(&e, "conflist"),
        }
    }
}

// ---- skel ----------------------------------------------------------------

/// A plugin that does nothing but read what the skel gives it.
struct Stub;

impl Plugin for Stub {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        let _: Value = args.config()?;
        Ok(args.prev_result()?.unwrap_or_default())
    }
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        args.prev_result().map(|_| ())
    }
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        args.prev_result().map(|_| ())
    }
    /// Keeps nothing, so collects nothing.
    fn gc(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }
}

/// The whole plugin entry point: the first byte picks the verb and the
/// environment (good, or with one bad variable), the rest is stdin. Every
/// outcome is exit 0 with a result (or nothing), or exit 1 with a spec
/// error JSON.
pub fn skel(data: &[u8]) {
    let Some((&sel, stdin)) = data.split_first() else {
        return;
    };
    let verbs = [
        "ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION", "BOGUS", "",
    ];
    let verb = verbs[usize::from(sel) % verbs.len()];
    let (cni_args, stdin) = split_nul(stdin);
    let cni_args = String::from_utf8_lossy(cni_args).into_owned();
    let bad_env = (sel / 8) % 6;
    let env = move |k: &str| -> Option<String> {
        let v = match k {
            "CNI_COMMAND" => verb.to_string(),
            "CNI_CONTAINERID" if bad_env == 1 => "../x".into(),
            "CNI_CONTAINERID" => "ctr1".into(),
            "CNI_NETNS" if bad_env == 2 => String::new(),
            "CNI_NETNS" => "/run/netns/fuzz".into(),
            "CNI_IFNAME" if bad_env == 3 => "eth0/../../x".into(),
            "CNI_IFNAME" => "eth0".into(),
            "CNI_ARGS" => cni_args.clone(),
            "CNI_PATH" if bad_env == 4 => String::new(),
            "CNI_PATH" => "/opt/cni/bin".into(),
            _ => return None,
        };
        Some(v)
    };
    let mut input = stdin;
    let out = skel::execute(&Stub, "fuzz", &env, &mut input);
    match out.exit_code {
        0 => {
            if !out.stdout.trim().is_empty() {
                let v: Value = gojson::parse_value(out.stdout.as_bytes())
                    .unwrap_or_else(|e| panic!("success output is not JSON ({e}): {}", out.stdout));
                assert!(v.is_object(), "{v}");
            }
        }
        1 => {
            let e: libcni::ErrorResult =
                gojson::from_slice(out.stdout.as_bytes()).unwrap_or_else(|e| {
                    panic!("error output is not an error JSON ({e}): {}", out.stdout)
                });
            assert!(
                matches!(e.code, 1..=7 | 11 | 50 | 51 | 100..=103 | 999),
                "code {} in {}",
                e.code,
                out.stdout
            );
            assert!(!e.msg.is_empty(), "{}", out.stdout);
        }
        c => panic!("exit code {c}"),
    }
}

// ---- result_versions -----------------------------------------------------

/// A result in any version, read with every default version, written in
/// every version. Asserted: writing is a fixpoint (what was written reads
/// back as the same result, and writes the same bytes), carries the
/// version it was asked for, and 1.1.0 loses nothing.
pub fn result_versions(data: &[u8]) {
    let Ok(value) = gojson::parse_value(data) else {
        return;
    };
    for default in version::ALL {
        let (result, _) = match CniResult::from_json(&value, default) {
            Ok(r) => r,
            Err(e) => {
                assert!(matches!(e.code(), 1 | 6), "{e}");
                continue;
            }
        };
        for target in version::ALL {
            let written = match result.to_json(target) {
                Ok(j) => j,
                Err(e) => {
                    // Only a legacy result without an address cannot be written.
                    assert!(target.is_legacy_result() && e.code() == 1, "{target}: {e}");
                    assert!(
                        result.ips.is_empty(),
                        "{target}: {e} with ips {:?}",
                        result.ips
                    );
                    continue;
                }
            };
            assert_eq!(written["cniVersion"], target.as_str(), "{written}");
            let (again, v) = CniResult::from_json(&written, default)
                .unwrap_or_else(|e| panic!("{target} output does not read back: {e}: {written}"));
            assert_eq!(v, target);
            let rewritten = again.to_json(target).expect("writes again");
            assert_eq!(rewritten, written, "{target} is not a fixpoint");
            if target == Version::V1_1_0 {
                assert_eq!(again, result, "1.1.0 lost something: {written}");
            }
        }
    }
}

// ---- cni_args --------------------------------------------------------------

/// `CNI_ARGS`: accepted strings are exactly `K=V` pairs joined by `;`
/// (they print back as they came); refused ones are code 4 naming
/// `CNI_ARGS`.
pub fn cni_args(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match CniArgs::parse(s) {
        Ok(args) => {
            let joined = args
                .pairs()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(";");
            assert_eq!(joined, s, "pairs do not print back");
            if let Some((k, v)) = args.pairs().last() {
                let got = args.get(k);
                // The last value of a key wins.
                assert_eq!(got, Some(v.as_str()));
            }
            let _ = args.ignore_unknown();
            if let Err(e) = args.check_known(&["IP", "MAC"]) {
                assert_eq!(e.code(), 4);
                assert!(e.to_string().starts_with("CNI_ARGS"), "{e}");
            }
        }
        Err(e) => {
            assert_eq!(e.code(), 4, "{e}");
            assert!(e.to_string().starts_with("CNI_ARGS"), "{e}");
        }
    }
}

// ---- subnet_env --------------------------------------------------------------

/// flanneld's subnet.env: parsed values are normalised and of the right
/// family; errors are code 11; a good file renders a delegate config that
/// is a JSON object naming its type.
pub fn subnet_env(data: &[u8]) {
    use flannel_meta::subnet_env::SubnetEnv;
    let text = String::from_utf8_lossy(data);
    let path = Path::new("/run/flannel/subnet.env");
    let env = match SubnetEnv::parse(&text, path) {
        Ok(env) => env,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            let e: Error = e.into();
            assert_eq!(e.code(), 11, "{e}");
            return;
        }
    };
    for n in &env.networks {
        assert!(n.is_ipv4() && !n.has_host_bits(), "{n}");
    }
    for n in &env.ipv6_networks {
        assert!(!n.is_ipv4() && !n.has_host_bits(), "{n}");
    }
    if let Some(s) = env.subnet {
        assert!(s.is_ipv4() && !s.has_host_bits(), "{s}");
    }
    if let Some(s) = env.ipv6_subnet {
        assert!(!s.is_ipv4() && !s.has_host_bits(), "{s}");
    }
    let conf = flannel_meta::config::FlannelConf::parse(
        br#"{"cniVersion":"1.0.0","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true},"ipam":{"routes":[{"dst":"10.96.0.0/12"}]}}"#,
    )
    .expect("the fixed flannel config parses");
    let rendered = flannel_meta::delegate_conf::render(&conf, &env);
    let bytes = flannel_meta::delegate_conf::to_bytes(&rendered);
    let v: Value = gojson::parse_value(&bytes).expect("rendered config is JSON");
    assert_eq!(v["type"], "bridge", "{v}");
    assert_eq!(v["name"], "cbr0", "{v}");
}

// ---- plugin_config -------------------------------------------------------------

/// Every plugin's own config parser on one config (`CNI_ARGS` before a NUL
/// byte, if any): no panic, and every refusal a spec error. What parses
/// goes a step further: bandwidth's kernel numbers, flannel's rendering.
pub fn plugin_config(data: &[u8]) {
    let (cni_args, config) = split_nul(data);
    let Ok(cni_args) = std::str::from_utf8(cni_args) else {
        return;
    };
    let Some(args) = cmd_args(Command::Add, config, cni_args) else {
        return;
    };

    match host_local::config::IpamConfig::from_args(&args) {
        Ok(c) => {
            assert!(!c.sets.is_empty());
            assert!(!c.location.network.contains('/'));
        }
        Err(e) => assert_spec_code(&e, "host-local"),
    }
    if let Err(e) = host_local::config::Location::from_args(&args) {
        assert_spec_code(&e, "host-local location");
    }
    if let Err(e) = bridge::config::Conf::parse(&args) {
        assert_spec_code(&e, "bridge");
    }
    match bandwidth::config::parse(&args) {
        Ok(bw) => {
            let clock =
                libcni::netlink::tc::PschedClock::parse("000003e8 00000040 000f4240 3b9aca00")
                    .expect("clock");
            for limit in [bw.ingress, bw.egress].into_iter().flatten() {
                let tbf = limit.tbf(&clock);
                assert!(limit.buffer_matches(tbf.buffer, &clock) || tbf.burst.is_some());
                let _ = limit.limit_bytes();
            }
        }
        Err(e) => assert_spec_code(&e, "bandwidth"),
    }
    if let Err(e) = portmap::config::PortMapConf::parse(&args) {
        assert_spec_code(&e, "portmap");
    }
    match flannel_meta::config::FlannelConf::parse(config) {
        Ok(conf) => {
            let env = flannel_meta::subnet_env::SubnetEnv::parse(
                "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
                Path::new("/run/flannel/subnet.env"),
            )
            .expect("fixed subnet.env");
            let rendered = flannel_meta::delegate_conf::render(&conf, &env);
            let v: Value = gojson::parse_value(&flannel_meta::delegate_conf::to_bytes(&rendered))
                .expect("rendered config is JSON");
            assert!(v.is_object());
        }
        Err(e) => assert_spec_code(&e, "flannel"),
    }
    if let Err(e) = tuning::config::Conf::parse(&args) {
        assert_spec_code(&e, "tuning");
    }
    if let Err(e) = macvlan::config::Conf::parse(&args) {
        assert_spec_code(&e, "macvlan");
    }
    match static_ipam::config::StaticConfig::from_args(&args) {
        Ok(c) => {
            // One address per family below 0.3.0, each address once.
            for (i, a) in c.addresses.iter().enumerate() {
                assert!(
                    c.addresses[..i]
                        .iter()
                        .all(|b| b.address.addr() != a.address.addr()),
                    "static: {} twice",
                    a.address
                );
                if let Some(gw) = a.gateway {
                    assert_eq!(gw.is_ipv4(), a.address.is_ipv4(), "static: gateway family");
                }
            }
            if args.version < Version::V0_3_0 {
                let v4 = c.addresses.iter().filter(|a| a.address.is_ipv4()).count();
                assert!(
                    v4 <= 1 && c.addresses.len() - v4 <= 1,
                    "static: per-version limit"
                );
            }
        }
        Err(e) => assert_spec_code(&e, "static"),
    }
    match sbr::config::Conf::parse(&args) {
        Ok(c) => {
            assert!(c.table.is_none_or(|t| t > 0 && !(253..=255).contains(&t)));
            assert!(c.gateway_v4.is_none_or(|g| g.is_ipv4()));
            assert!(c.gateway_v6.is_none_or(|g| g.is_ipv6()));
        }
        Err(e) => assert_spec_code(&e, "sbr"),
    }
    let _ = sbr::config::Conf::for_teardown(&args);
    match ptp::config::Conf::parse(&args) {
        Ok(c) => {
            assert!(!c.ipam.is_empty());
            assert!(c.mtu.is_none_or(|m| (68..=65535).contains(&m)));
        }
        Err(e) => assert_spec_code(&e, "ptp"),
    }
    // What DEL and GC read never fails.
    let _ = ptp::config::MasqKeys::lenient(&args);
    match tap::config::Conf::parse(&args) {
        Ok(c) => {
            assert!(c.mtu.is_none_or(|m| (68..=65535).contains(&m)));
            assert!(c.mac.is_none_or(|m| m[0] & 1 == 0 && m != [0; 6]));
            if let Some(b) = &c.bridge {
                assert!(!b.is_empty() && b.len() <= 15 && !b.contains('/'));
            }
        }
        Err(e) => assert_spec_code(&e, "tap"),
    }
    match dhcp::config::Conf::parse(&args) {
        Ok(c) => {
            assert!(c.socket.is_absolute(), "{c:?}");
            let codes = &c.options.request;
            assert!(!codes.contains(&0) && !codes.contains(&255), "{c:?}");
            let mut unique = codes.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), codes.len(), "{c:?}");
            for p in &c.options.provide {
                assert!(p.value.len() <= 255 && ![0, 50, 53, 54, 55, 255].contains(&p.code));
            }
        }
        Err(e) => assert_spec_code(&e, "dhcp"),
    }
    match host_device::config::Conf::parse(&args) {
        Ok(c) => {
            assert!(c.names_a_device());
            if let Some(d) = &c.device {
                assert!(!d.is_empty() && d.len() <= 15 && !d.contains('/'));
            }
            assert!(c
                .hwaddr
                .as_ref()
                .is_none_or(|h| matches!(h.len(), 6 | 8 | 20)));
            if let Some(p) = &c.kernelpath {
                assert!(
                    p.starts_with("/sys/devices/") && p.components().count() > 3,
                    "{p:?}"
                );
                assert!(!p.components().any(|c| c == std::path::Component::ParentDir));
            }
            for id in [&c.pci_bus_id, &c.device_id].into_iter().flatten() {
                assert!(!id.is_empty() && !id.contains('/') && id != "..");
            }
        }
        Err(e) => assert_spec_code(&e, "host-device"),
    }
    // What DEL and GC read never fails.
    let _ = host_device::config::Conf::for_teardown(&args);
    match vlan::config::Conf::parse(&args) {
        Ok(c) => {
            assert!(c.vlan_id <= 4094);
            assert!(c.link.ipam.as_deref().is_none_or(|t| !t.is_empty()));
            assert!(c.link.mtu.is_none_or(|m| m > 0));
        }
        Err(e) => assert_spec_code(&e, "vlan"),
    }
    match ipvlan::config::Conf::parse(&args) {
        Ok(c) => {
            assert!(c.link.mtu.is_none_or(|m| m > 0));
            // The chained master and addresses, from any prevResult.
            let prev = args.prev_result();
            if let Ok(prev) = &prev {
                match c.master_for_add(prev.as_ref()) {
                    Ok(Some(m)) => assert!(!m.is_empty() && m.len() <= 15 && !m.contains('/')),
                    Ok(None) => assert!(prev.is_none()),
                    Err(e) => assert_spec_code(&e, "ipvlan master"),
                }
                if let Err(e) = c.addresses(prev.as_ref()) {
                    assert_spec_code(&e, "ipvlan addresses");
                }
            }
        }
        Err(e) => assert_spec_code(&e, "ipvlan"),
    }
    if let Err(e) = dummy::config::Conf::parse(&args) {
        assert_spec_code(&e, "dummy");
    }
    match vrf::config::Conf::parse(&args) {
        Ok(c) => {
            assert!(!c.vrf_name.is_empty() && c.vrf_name.len() <= 15);
            assert!(c.table.is_none_or(|t| t > 0 && !(253..=255).contains(&t)));
        }
        Err(e) => assert_spec_code(&e, "vrf"),
    }
    // What DEL reads never fails.
    let _ = vrf::config::Conf::for_teardown(&args);
    tc_redirect_tap_config(&args);
}

// ---- dhcp_message --------------------------------------------------------------

/// What a DHCP server (or anyone on the LAN) can send the dhcp daemon, and
/// what a local peer can send its socket: the bytes as an IPv4/UDP packet
/// to port 68, as a DHCP message (binding, CNI result in every version),
/// and as a protocol request. No panic; a result that is built converts.
pub fn dhcp_message(data: &[u8]) {
    if let Some((_, payload)) = dhcp::daemon::packet::parse_ipv4_udp(data) {
        assert!(payload.len() <= data.len());
    }
    if let Ok(msg) = dhcp::ack::decode(data) {
        if let Ok(b) = dhcp::ack::binding(&msg, Some(std::net::Ipv4Addr::new(10, 0, 0, 1))) {
            assert!(b.prefix_len <= 32);
            assert!(b.t1 <= b.t2 && b.t2 <= b.lease, "{b:?}");
            let r = dhcp::ack::result(&msg, &b, Some(7));
            for v in version::ALL {
                match r.to_json(v) {
                    Ok(j) => assert!(j.is_object()),
                    Err(e) => assert_spec_code(&e, "dhcp result"),
                }
            }
        }
    }
    let _ = dhcp::proto::read_message::<dhcp::proto::Request>(&mut &data[..]);
}

/// tc-redirect-tap: `CNI_ARGS` (a tap name and IDs the kernel takes), and
/// what ADD and CHECK read of `prevResult` (the interface to redirect, the
/// VM's interface and its tap), then the result ADD would print.
fn tc_redirect_tap_config(args: &CmdArgs) {
    use tc_redirect_tap::pair;
    match tc_redirect_tap::config::Conf::parse(args) {
        Ok(c) => {
            let n = c.tap_name();
            assert!(!n.is_empty() && n.len() <= 15, "tap name {n:?}");
            assert!(!n.contains(['/', ':', ' ', '\0']) && n != "." && n != "..");
            assert!(n.matches('%').count() <= 1 && (!n.contains('%') || n.contains("%d")));
            assert!(c.uid.is_none_or(|u| u != u32::MAX));
            assert!(c.gid.is_none_or(|g| g != u32::MAX));
        }
        Err(e) => assert_spec_code(&e, "tc-redirect-tap"),
    }
    let prev = match args.prev_result() {
        Ok(Some(p)) => p,
        Ok(None) => return,
        Err(e) => return assert_spec_code(&e, "tc-redirect-tap prevResult"),
    };
    let _ = pair::vm_and_tap(&prev, &args.container_id);
    let at = match pair::sandbox_interface(&prev, &args.ifname) {
        Ok(at) => at,
        Err(e) => return assert_spec_code(&e, "tc-redirect-tap sandbox interface"),
    };
    assert_eq!(prev.interfaces[at].name, args.ifname);
    let link = |name: &str, mac| libcni::netlink::Link {
        index: 2,
        name: name.into(),
        kind: None,
        mtu: 1500,
        mac: Some(mac),
        hw_addr: mac.to_vec(),
        up: true,
        promisc: false,
        master: None,
        peer_index: None,
        link_netnsid: None,
        alias: None,
        bridge_port: None,
    };
    let r = pair::result_with_tap(
        &prev,
        at,
        &link(&args.ifname, [2, 0, 0, 0, 0, 1]),
        &link("fuzz-tap0", [2, 0, 0, 0, 0, 2]),
        args,
    );
    assert_eq!(r.interfaces.len(), prev.interfaces.len() + 2);
    let copies = prev
        .ips
        .iter()
        .filter(|ip| ip.interface == Some(at))
        .count();
    assert_eq!(r.ips.len(), prev.ips.len() + copies);
    let v = r.to_json(Version::V1_1_0).expect("a 1.1.0 result");
    let (back, _) = CniResult::from_json(&v, Version::V1_1_0).expect("reads back");
    assert_eq!(back, r);
}
