//! `cni-bench-floor`: the kernel's floor of a chain (issue 55). Linked as
//! `bridge`, `host-local`, `portmap` and `bandwidth` in a directory of its
//! own, it stands in for our plugins in the same conflist and does, per
//! plugin process, only the state changes that plugin must make, in the
//! same shape as ours: the same processes (bridge execs host-local), the
//! same netlink writes, one nf_tables transaction per plugin and verb,
//! each deleting process releasing one nf_tables socket, and DEL's
//! firewall teardown beside the IPAM and link steps as `attach::del_with`
//! runs them. Its one read is whether its nf_tables chain exists. What it
//! leaves out is everything a real plugin does besides: decoding and
//! validating the config, reading state back before changing it, results
//! in every version, rollback, the call log. So ours against
//! it is the cost of being a plugin, and it against the no-op floor is the
//! kernel's own work.
//!
//! It trusts its input: the benchmark's own conflists. Its leases live in
//! the config's `ipam.dataDir` (`floor-<network>/`), the handles of its
//! rules in [`bench::floors::FLOOR_STATE`].

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use libcni::netfilter::nft::{self, expr, BaseChain, Batch, Family, Hook, Nft};
use libcni::netlink::ifb::IfbSpec;
use libcni::netlink::route::Route;
use libcni::netlink::tc::{self, RedirectFilter, Tbf};
use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use libcni::IpFamily;
use serde_json::{json, Value};

type Outcome = Result<Option<Value>, String>;

/// The call, as the runtime gave it.
struct Call {
    command: String,
    container_id: String,
    netns: String,
    ifname: String,
    conf: Value,
    stdin: Vec<u8>,
}

/// The floor's own nf_tables table: its rules never meet the plugins'.
const TABLE: &str = "cni_bench_floor";
const F: Family = Family::Inet;
const TBF_HANDLE: u32 = tc::handle(1, 0);

fn main() {
    let name = std::env::args()
        .next()
        .as_deref()
        .map(|a| {
            Path::new(a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default()
        .unwrap_or_default();
    let outcome = read_call().and_then(|call| match (name.as_str(), call.command.as_str()) {
        (_, "VERSION") => Ok(Some(json!({
            "cniVersion": "1.0.0", "supportedVersions": ["1.0.0"]
        }))),
        ("bridge", "ADD") => bridge_add(&call),
        ("bridge", "DEL") => bridge_del(&call),
        ("host-local", "ADD") => lease_add(&call).map(|l| Some(json!(l.to_string()))),
        ("host-local", "DEL") => lease_del(&call).map(|()| None),
        ("portmap", "ADD") => portmap_add(&call),
        ("bandwidth", "ADD") => bandwidth_add(&call),
        ("portmap", "DEL") => delete_recorded_rule(&call, "portmap").map(|()| None),
        ("bandwidth", "DEL") => bandwidth_del(&call),
        (n, c) => Err(format!("the floor has no {c} for {n:?}")),
    });
    match outcome {
        Ok(Some(out)) => println!("{out}"),
        Ok(None) => {}
        Err(e) => {
            println!("{}", json!({"cniVersion": "1.0.0", "code": 999, "msg": e}));
            std::process::exit(1);
        }
    }
}

fn read_call() -> Result<Call, String> {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let mut stdin = Vec::new();
    std::io::stdin()
        .read_to_end(&mut stdin)
        .map_err(|e| e.to_string())?;
    let conf = if stdin.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&stdin).map_err(|e| format!("stdin: {e}"))?
    };
    Ok(Call {
        command: var("CNI_COMMAND"),
        container_id: var("CNI_CONTAINERID"),
        netns: var("CNI_NETNS"),
        ifname: var("CNI_IFNAME"),
        conf,
        stdin,
    })
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A short hash of the attachment, for the names of its links.
fn tag(call: &Call) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in call.container_id.bytes().chain(call.ifname.bytes()) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

fn host_veth(call: &Call) -> String {
    format!("fv{}", tag(call))
}

fn ifb_name(call: &Call) -> String {
    format!("fb{}", tag(call))
}

fn state_dir() -> PathBuf {
    PathBuf::from(bench::floors::FLOOR_STATE)
}

/// Where `plugin` records the handle of the attachment's rule.
fn ledger(call: &Call, plugin: &str) -> PathBuf {
    state_dir().join(format!("{plugin}-{}", tag(call)))
}

/// The IPv4 subnet of the config's host-local range: base and prefix.
fn subnet(conf: &Value) -> Result<(Ipv4Addr, u8), String> {
    let s = conf["ipam"]["ranges"][0][0]["subnet"]
        .as_str()
        .ok_or("no ipam.ranges[0][0].subnet")?;
    let (ip, len) = s.split_once('/').ok_or("a subnet without prefix")?;
    Ok((ip.parse().map_err(err)?, len.parse().map_err(err)?))
}

fn nth(base: Ipv4Addr, n: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base) + n)
}

/// host-local's share: under the network's lock, the first free address
/// as a lease file holding the container ID, and a link naming it by the
/// container, as host-local keeps its leases.
fn lease_add(call: &Call) -> Result<Ipv4Addr, String> {
    let (base, _) = subnet(&call.conf)?;
    let dir = lease_dir(call)?;
    let _lock = lock(&dir)?;
    for n in 2..65_000 {
        let ip = nth(base, n);
        match std::fs::File::create_new(dir.join(ip.to_string())) {
            Ok(mut f) => {
                write!(f, "{}\r\n{}", call.container_id, call.ifname).map_err(err)?;
                symlink(ip.to_string(), dir.join(format!("cid-{}", tag(call)))).map_err(err)?;
                return Ok(ip);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(err(e)),
        }
    }
    Err("no free address".into())
}

fn lease_del(call: &Call) -> Result<(), String> {
    let dir = lease_dir(call)?;
    let _lock = lock(&dir)?;
    let link = dir.join(format!("cid-{}", tag(call)));
    if let Ok(ip) = std::fs::read_link(&link) {
        let _ = std::fs::remove_file(dir.join(ip));
        let _ = std::fs::remove_file(&link);
    }
    Ok(())
}

fn lease_dir(call: &Call) -> Result<PathBuf, String> {
    let data = call.conf["ipam"]["dataDir"]
        .as_str()
        .ok_or("no ipam.dataDir")?;
    let dir = Path::new(data).join(format!(
        "floor-{}",
        call.conf["name"].as_str().unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir).map_err(err)?;
    Ok(dir)
}

fn lock(dir: &Path) -> Result<std::fs::File, String> {
    let f = std::fs::File::create(dir.join("lock")).map_err(err)?;
    f.lock().map_err(err)?;
    Ok(f)
}

/// Runs this directory's `host-local` with the call's stdin, as bridge
/// runs its IPAM plugin: the address it printed.
fn exec_ipam(call: &Call) -> Result<String, String> {
    // Beside the name this process was started by, as a runtime finds
    // plugins on CNI_PATH.
    let me = PathBuf::from(std::env::args().next().unwrap_or_default());
    let ipam = me.with_file_name("host-local");
    let mut child = Command::new(ipam)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(err)?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(&call.stdin).map_err(err)?;
    }
    let out = child.wait_with_output().map_err(err)?;
    if !out.status.success() {
        return Err(format!(
            "host-local: {}",
            String::from_utf8_lossy(&out.stdout)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_matches('"')
        .to_string())
}

fn bridge_add(call: &Call) -> Outcome {
    let (base, prefix) = subnet(&call.conf)?;
    let gateway = nth(base, 1);
    let bridge = call.conf["bridge"].as_str().ok_or("no bridge")?;
    let mut node = Netlink::open().map_err(err)?;
    let br = match node.link_by_name(bridge).map_err(err)? {
        Some(l) => l,
        None => {
            node.add_bridge(bridge, None).map_err(err)?;
            let l = node.link_by_name(bridge).map_err(err)?.ok_or("no bridge")?;
            node.add_address(l.index, IpAddr::V4(gateway), prefix)
                .map_err(err)?;
            node.set_link_up(l.index).map_err(err)?;
            l
        }
    };
    let ip: Ipv4Addr = exec_ipam(call)?.parse().map_err(err)?;
    let pod = NetNs::open(Path::new(&call.netns)).map_err(err)?;
    let host = host_veth(call);
    node.add_veth(&host, None, &call.ifname, &pod, None)
        .map_err(err)?;
    let mut inside = Netlink::open_in(&pod).map_err(err)?;
    let eth = inside
        .link_by_name(&call.ifname)
        .map_err(err)?
        .ok_or("no veth")?;
    inside
        .add_address(eth.index, IpAddr::V4(ip), prefix)
        .map_err(err)?;
    inside.set_link_up(eth.index).map_err(err)?;
    let default = Route::new(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        0,
        Some(IpAddr::V4(gateway)),
        Some(eth.index),
    );
    inside.add_route(&default).map_err(err)?;
    let h = node
        .link_by_name(&host)
        .map_err(err)?
        .ok_or("no host veth")?;
    node.set_master(h.index, br.index).map_err(err)?;
    node.set_link_up(h.index).map_err(err)?;
    if call.conf["ipMasq"].as_bool() == Some(true) {
        let mut rule = expr::match_nfproto(IpFamily::V4);
        rule.extend(expr::match_prefix_nft(
            true,
            expr::CmpOp::Eq,
            IpAddr::V4(ip),
            32,
        ));
        rule.extend(expr::match_prefix_nft(
            false,
            expr::CmpOp::Neq,
            IpAddr::V4(base),
            prefix,
        ));
        rule.push(expr::Expr::Masq);
        let chain = BaseChain {
            hook: Hook::Postrouting,
            priority: nft::PRIORITY_SRCNAT,
            chain_type: "nat",
        };
        add_recorded_rule(call, "bridge", "masq", &chain, &rule)?;
    }
    Ok(Some(json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": host}, {"name": call.ifname, "sandbox": call.netns}],
        "ips": [{"address": format!("{ip}/{prefix}"), "gateway": gateway.to_string(), "interface": 1}],
        "routes": [{"dst": "0.0.0.0/0"}],
    })))
}

fn bridge_del(call: &Call) -> Outcome {
    std::thread::scope(|s| {
        let interface = s.spawn(|| -> Result<(), String> {
            exec_ipam(call)?;
            if let Ok(pod) = NetNs::open(Path::new(&call.netns)) {
                Netlink::open_in(&pod)
                    .map_err(err)?
                    .delete_link_if_present(&call.ifname)
                    .map_err(err)?;
            }
            Ok(())
        });
        let masq = delete_recorded_rule(call, "bridge");
        interface
            .join()
            .map_err(|_| "the link step panicked".to_string())??;
        masq
    })?;
    Ok(None)
}

/// One transaction: `rule` in the floor's `chain`, whose handle is
/// recorded, with the table and chain when they are missing. Only then:
/// re-adding an existing base chain is an update the kernel destroys after
/// a grace period, which our plugins avoid by the same one read.
fn add_recorded_rule(
    call: &Call,
    plugin: &str,
    chain: &str,
    base: &BaseChain,
    rule: &[expr::Expr],
) -> Result<(), String> {
    let mut n = Nft::open().map_err(err)?;
    let mut b = Batch::new();
    if !n.has_chain(F, TABLE, chain).map_err(err)? {
        b.add_table(F, TABLE);
        b.add_chain(F, TABLE, chain, Some(base));
    }
    b.add_rule_echo(F, TABLE, chain, rule, &call.container_id);
    let echoed = n.commit_echo(&b).map_err(err)?;
    let handle = echoed
        .first()
        .map(|(_, r)| r.handle)
        .ok_or("no rule echoed")?;
    std::fs::create_dir_all(state_dir()).map_err(err)?;
    std::fs::write(ledger(call, plugin), format!("{chain} {handle}")).map_err(err)
}

/// One transaction deleting the rule `plugin` recorded, if any; its
/// socket is released here, in the calling thread.
fn delete_recorded_rule(call: &Call, plugin: &str) -> Result<(), String> {
    let path = ledger(call, plugin);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let (chain, handle) = text.split_once(' ').ok_or("a bad record")?;
    let mut b = Batch::new();
    b.del_rule(F, TABLE, chain, handle.parse().map_err(err)?);
    Nft::open().map_err(err)?.commit(&b).map_err(err)?;
    std::fs::remove_file(path).map_err(err)
}

fn portmap_add(call: &Call) -> Outcome {
    let prev = &call.conf["prevResult"];
    let addr = prev["ips"][0]["address"]
        .as_str()
        .ok_or("no prevResult address")?;
    let ip: IpAddr = addr
        .split('/')
        .next()
        .unwrap_or_default()
        .parse()
        .map_err(err)?;
    if let Some(m) = call.conf["runtimeConfig"]["portMappings"].get(0) {
        let host_port = m["hostPort"].as_u64().ok_or("no hostPort")? as u16;
        let to = m["containerPort"].as_u64().ok_or("no containerPort")? as u16;
        let mut rule = expr::match_nfproto(IpFamily::V4);
        rule.extend(expr::match_l4_dport(libc::IPPROTO_TCP as u8, host_port));
        rule.extend(expr::dnat_to_nft(ip, to));
        let chain = BaseChain {
            hook: Hook::Prerouting,
            priority: nft::PRIORITY_DSTNAT,
            chain_type: "nat",
        };
        add_recorded_rule(call, "portmap", "hostports", &chain, &rule)?;
    }
    Ok(Some(prev.clone()))
}

fn rate_limit(limits: &Value, rate: &str, burst: &str, clock: &tc::PschedClock) -> Option<Tbf> {
    let rate_bytes = limits[rate].as_u64()? / 8;
    let burst_bytes = (limits[burst].as_u64()? / 8) as u32;
    Some(Tbf {
        rate: rate_bytes,
        buffer: tc::tbf_buffer_ticks(rate_bytes, burst_bytes, clock).min(u64::from(u32::MAX))
            as u32,
        limit: tc::tbf_limit(rate_bytes, 25_000, burst_bytes).min(u64::from(u32::MAX)) as u32,
        burst: None,
    })
}

/// bandwidth's share: the ingress TBF on the host veth, and for egress an
/// IFB with its TBF, the veth's ingress qdisc and the redirect to the IFB.
fn bandwidth_add(call: &Call) -> Outcome {
    let limits = &call.conf["runtimeConfig"]["bandwidth"];
    let clock = tc::PschedClock::read().map_err(err)?;
    let mut node = Netlink::open().map_err(err)?;
    let veth = node
        .link_by_name(&host_veth(call))
        .map_err(err)?
        .ok_or("no host veth")?;
    if let Some(tbf) = rate_limit(limits, "ingressRate", "ingressBurst", &clock) {
        node.replace_tbf(veth.index, tc::ROOT, TBF_HANDLE, &tbf)
            .map_err(err)?;
    }
    if let Some(tbf) = rate_limit(limits, "egressRate", "egressBurst", &clock) {
        let name = ifb_name(call);
        let ifb = node
            .add_ifb(&IfbSpec {
                name: &name,
                mtu: 1500,
                txqueuelen: 0,
                alias: "",
            })
            .map_err(err)?;
        node.replace_tbf(ifb.index, tc::ROOT, TBF_HANDLE, &tbf)
            .map_err(err)?;
        node.add_ingress_qdisc(veth.index).map_err(err)?;
        let filter = RedirectFilter {
            priority: 1,
            classid: tc::handle(1, 1),
            target: ifb.index,
        };
        node.add_redirect_filter(veth.index, tc::INGRESS_PARENT, &filter)
            .map_err(err)?;
    }
    Ok(Some(call.conf["prevResult"].clone()))
}

/// bandwidth DEL: the IFB, and the host veth's qdiscs (the link stays
/// until bridge's DEL).
fn bandwidth_del(call: &Call) -> Outcome {
    let mut node = Netlink::open().map_err(err)?;
    if let Some(ifb) = node.link_by_name(&ifb_name(call)).map_err(err)? {
        node.delete_link(ifb.index).map_err(err)?;
    }
    if let Some(veth) = node.link_by_name(&host_veth(call)).map_err(err)? {
        let _ = node.delete_qdisc(veth.index, tc::ROOT, TBF_HANDLE);
        let _ = node.delete_qdisc(veth.index, tc::INGRESS_PARENT, tc::INGRESS_HANDLE);
    }
    Ok(None)
}
