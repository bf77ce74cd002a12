//! The scaling sweep: ADD and DEL of one more pod on a node that already
//! has 0, 100, 1,000 pods (and host-local alone with up to 10,000 leases).
//!
//! Pods: one network `bench-scale` (bridge `cbench9`, 10.210.0.0/16, with
//! `ipMasq`) in the node. It is filled with real pods, each ADDed by our
//! bridge + host-local + portmap chain with one port mapping, so the bridge
//! has that many ports, host-local that many leases, and our nftables
//! chains that many masquerade and host port rules, whoever measures. The
//! reference's port mappings and masquerade live in iptables, so each
//! filled pod also gets its mapping from the reference portmap (a real Go
//! portmap ADD with the pod's result as `prevResult`) and its masquerade in
//! the Go bridge's iptables format (written with one `iptables-restore` per
//! fill step: a Go bridge ADD would make a second veth): both sides then
//! find N of their own. Both sides are measured on that same node,
//! alternating, on one more pod.
//!
//! Growth is judged against an **empty twin** measured in the same minutes:
//! a second node namespace with the same network and an empty `dataDir`,
//! alternating with the filled node within every iteration. Levels are
//! minutes apart and the machine is shared, so comparing a level with the
//! level-0 run made earlier would measure the neighbours' load as much as
//! the pods.
//!
//! Leases: host-local alone, each side on its own `dataDir` holding the
//! leases its own plugin leaves there, consecutive from 10.220.0.2: ours
//! filled by real ADDs of our host-local (so each lease has the index link
//! it writes), the reference's written by hand in the Go format
//! (`<dataDir>/bench-hl/<ip>` holding `<cid>\r\n<ifname>`,
//! `last_reserved_ip.0` at the last one, as the Go plugin leaves it; 10,000
//! real Go ADDs would take many minutes as each reads every lease). Measured
//! through the runtime, alternating with the same config on an empty
//! `dataDir`; then, on the filled node, DEL without `prevResult` and STATUS
//! ([`LeaseVerbs`]), plugin by plugin.

use crate::chains::{self, Side};
use crate::diagnose;
use crate::interrupt;
use crate::measure::{self, Setting};
use crate::namespaces::{self, Namespaces};
use crate::runner::{runtime_conf, Mode, SideSetup};
use crate::stats::{ratio, Samples};
use crate::status;
use serde_json::{json, Map, Value};
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Instant;

/// ADD and DEL samples of both sides with `present` pods (or leases)
/// there, and on the empty twin in the same minutes.
#[derive(Debug, Clone, Default)]
pub struct Level {
    pub present: usize,
    pub ours_add: Samples,
    pub ours_del: Samples,
    pub ref_add: Samples,
    pub ref_del: Samples,
    pub empty_ours_add: Samples,
    pub empty_ours_del: Samples,
    pub empty_ref_add: Samples,
    pub empty_ref_del: Samples,
    /// The kernel's own veth create and delete at this level (pod sweep).
    pub floor: Option<diagnose::KernelFloor>,
    /// The verbs that find a lease without the cache (lease sweep).
    pub lease_verbs: Option<LeaseVerbs>,
}

/// host-local's verbs that do not go through the runtime's cached result,
/// on the filled node (lease sweep): DEL without `prevResult`, which must
/// find the container's leases by walking the `dataDir` (how a runtime that
/// lost its cache, or Go's host-local every time, releases), and STATUS,
/// which containerd 2.x calls every 5 s (ours only: Go 1.1.1 has none).
#[derive(Debug, Clone, Default)]
pub struct LeaseVerbs {
    pub ours_walk_del: Samples,
    pub ref_walk_del: Samples,
    pub ours_status: Samples,
}

impl LeaseVerbs {
    pub fn walk_del(&self, side: Side) -> &Samples {
        match side {
            Side::Ours => &self.ours_walk_del,
            Side::Reference => &self.ref_walk_del,
        }
    }

    fn walk_del_mut(&mut self, side: Side) -> &mut Samples {
        match side {
            Side::Ours => &mut self.ours_walk_del,
            Side::Reference => &mut self.ref_walk_del,
        }
    }
}

impl Level {
    /// The samples on the filled node.
    pub fn here(&self, side: Side, add: bool) -> &Samples {
        match (side, add) {
            (Side::Ours, true) => &self.ours_add,
            (Side::Ours, false) => &self.ours_del,
            (Side::Reference, true) => &self.ref_add,
            (Side::Reference, false) => &self.ref_del,
        }
    }

    /// The samples on the empty twin, taken in the same minutes.
    pub fn twin(&self, side: Side, add: bool) -> &Samples {
        match (side, add) {
            (Side::Ours, true) => &self.empty_ours_add,
            (Side::Ours, false) => &self.empty_ours_del,
            (Side::Reference, true) => &self.empty_ref_add,
            (Side::Reference, false) => &self.empty_ref_del,
        }
    }

    /// Growth against the empty node (`empty`, the level-0 run): what the
    /// target is about.
    pub fn growth(&self, empty: &Level, side: Side, add: bool) -> Option<f64> {
        ratio(self.here(side, add).p50(), empty.here(side, add).p50())
    }

    /// Growth against the empty twin measured in the same minutes: only
    /// what this node's own state (ports, leases, rules) costs.
    pub fn growth_vs_twin(&self, side: Side, add: bool) -> Option<f64> {
        ratio(self.here(side, add).p50(), self.twin(side, add).p50())
    }

    fn push(&mut self, on: Node, side: Side, add: f64, del: f64) {
        let (a, d) = match (on, side) {
            (Node::Filled, Side::Ours) => (&mut self.ours_add, &mut self.ours_del),
            (Node::Filled, Side::Reference) => (&mut self.ref_add, &mut self.ref_del),
            (Node::Empty, Side::Ours) => (&mut self.empty_ours_add, &mut self.empty_ours_del),
            (Node::Empty, Side::Reference) => (&mut self.empty_ref_add, &mut self.empty_ref_del),
        };
        a.push(add);
        d.push(del);
    }
}

/// One curve family of the sweep.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub title: String,
    /// What is present: "pods", "leases".
    pub unit: &'static str,
    pub levels: Vec<Level>,
    /// Why it is missing or incomplete; `None` when complete.
    pub problem: Option<String>,
}

impl Sweep {
    fn new(title: &str, unit: &'static str) -> Sweep {
        Sweep {
            title: title.to_string(),
            unit,
            levels: Vec::new(),
            problem: None,
        }
    }

    fn skipped(title: &str, unit: &'static str, why: String) -> Sweep {
        Sweep {
            problem: Some(why),
            ..Sweep::new(title, unit)
        }
    }
}

/// How long filling the node took, for the report.
#[derive(Debug, Clone, Default)]
pub struct Filling {
    /// (pods reached, seconds of our chain ADDs, seconds of reference portmap ADDs)
    pub steps: Vec<(usize, f64, f64)>,
    /// After each step: seconds waited for the machine to be quiet, and
    /// whether it got quiet within the limit.
    pub settled: Vec<(f64, bool)>,
}

/// Syscall summaries taken in the sweep, with where they were taken.
pub type Traced = (String, Vec<diagnose::Syscalls>);

pub const CHAIN_TITLE: &str = "bridge (ipMasq) + host-local";
pub const PORTMAP_TITLE: &str = "bridge (ipMasq) + host-local + portmap (1 mapping per pod)";
pub const PORTMAP_ALONE_TITLE: &str = "portmap plugin alone (1 mapping per pod)";
pub const HOST_LOCAL_TITLE: &str = "host-local alone";

/// Which node a measurement ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Filled,
    Empty,
}

impl Node {
    /// Iteration `i`'s order of the two sides and of the two nodes: each
    /// goes first every other iteration, so drift hits both alike.
    fn alternation(i: usize) -> ([usize; 2], [Node; 2]) {
        if i.is_multiple_of(2) {
            ([0, 1], [Node::Filled, Node::Empty])
        } else {
            ([1, 0], [Node::Empty, Node::Filled])
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Node::Filled => "f",
            Node::Empty => "e",
        }
    }
}

/// The chains of the pod sweep on one node: bridge + host-local (`a`) and
/// bridge + host-local + portmap (`b`), each for ours and the reference.
struct NodeChains {
    a: [SideSetup; 2],
    b: [SideSetup; 2],
}

/// One sample of the pod sweep: which curve, which side, ADD and DEL ms.
type Sample = (usize, Side, f64, f64);

/// One iteration on one node: chain a, chain b, then portmap alone (the
/// curves 0, 1, 2), each side in `order`.
fn pod_round(
    chains: &NodeChains,
    with_portmap: bool,
    pod: &str,
    caps: &Map<String, Value>,
    order: [usize; 2],
    id: &str,
) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for &k in &order {
        interrupt::check()?;
        let s = &chains.a[k];
        let rt = runtime_conf(
            format!("sa-{}-{id}", s.side.tag()),
            pod,
            "eth0",
            &Map::new(),
        );
        let (add, del) = s
            .runtime_add_del(&rt)
            .map_err(|e| format!("{} {CHAIN_TITLE}: {e}", s.side.label()))?;
        out.push((0, s.side, add, del));
    }
    if !with_portmap {
        return Ok(out);
    }
    for &k in &order {
        interrupt::check()?;
        let s = &chains.b[k];
        let rt = runtime_conf(format!("sb-{}-{id}", s.side.tag()), pod, "eth0", caps);
        let (add, del) = s
            .runtime_add_del(&rt)
            .map_err(|e| format!("{} {PORTMAP_TITLE}: {e}", s.side.label()))?;
        out.push((1, s.side, add, del));
    }
    for &k in &order {
        interrupt::check()?;
        let s = &chains.b[k];
        let rt = runtime_conf(format!("sp-{}-{id}", s.side.tag()), pod, "eth0", caps);
        let run = s
            .direct_add_del(&rt, Mode::Timed)
            .map_err(|e| format!("{} portmap plugin by plugin: {e}", s.side.label()))?;
        if let (Some(add), Some(del)) = (run.add.get(1), run.del.get(1)) {
            out.push((2, s.side, add.wall_ms, del.wall_ms));
        }
    }
    Ok(out)
}

fn node_chains(set: &Setting, ipam_dir: &Path, tag: &str) -> Result<NodeChains, String> {
    let (a, b) = pod_chains(ipam_dir);
    let key_a = format!("scale-a-{tag}");
    let key_b = format!("scale-b-{tag}");
    Ok(NodeChains {
        a: [
            measure::setup(set, &a, Side::Ours, &key_a)?,
            measure::setup(set, &a, Side::Reference, &key_a)?,
        ],
        b: [
            measure::setup(set, &b, Side::Ours, &key_b)?,
            measure::setup(set, &b, Side::Reference, &key_b)?,
        ],
    })
}

fn pod_chains(ipam_dir: &Path) -> (chains::Chain, chains::Chain) {
    // Masquerade on: every filled pod has its masquerade rule, so both
    // masquerade and port mappings are measured with N others present.
    let base = chains::bridge("cbench9", "10.210.0.0/16", true, ipam_dir);
    let as_chain = |list: Value, key: &'static str| chains::Chain {
        key,
        title: key,
        ifname: "eth0",
        ours: list.clone(),
        reference: list,
        capability_args: Map::new(),
        note: None,
    };
    (
        as_chain(
            chains::conflist("bench-scale", vec![base.clone()]),
            "scale-a",
        ),
        as_chain(
            chains::conflist("bench-scale", vec![base, chains::portmap()]),
            "scale-b",
        ),
    )
}

/// The pod sweep (see the module comment). Returns the chain sweep, the
/// portmap chain sweep, the portmap-alone sweep, how filling went, and our
/// chain's syscalls on the fullest node.
pub fn pods(
    set: &Setting,
    ns: &mut Namespaces,
    ipam_dir: &Path,
    levels: &[usize],
    iterations: usize,
    strace: Option<&Path>,
) -> Result<(Vec<Sweep>, Filling, Vec<Traced>), String> {
    let mut filling = Filling::default();
    let mut traced = Vec::new();
    let (a, b) = pod_chains(ipam_dir);
    let missing_a = measure::missing(set.ours_dir, &a.ours);
    if !missing_a.is_empty() {
        let why = format!("not built yet: {} missing", missing_a.join(", "));
        return Ok((
            vec![
                Sweep::skipped(CHAIN_TITLE, "pods", why.clone()),
                Sweep::skipped(PORTMAP_TITLE, "pods", why.clone()),
                Sweep::skipped(PORTMAP_ALONE_TITLE, "pods", why),
            ],
            filling,
            traced,
        ));
    }
    let with_portmap = measure::missing(set.ours_dir, &b.ours).is_empty()
        && measure::missing(set.reference_dir, &b.reference).is_empty();
    let filled = node_chains(set, &ipam_dir.join("filled"), "filled")?;
    let empty = node_chains(set, &ipam_dir.join("empty"), "empty")?;
    let twin: File = ns.add_node("empty").map_err(|e| e.to_string())?;
    let mut sweeps = [
        Sweep::new(CHAIN_TITLE, "pods"),
        Sweep::new(PORTMAP_TITLE, "pods"),
        Sweep::new(PORTMAP_ALONE_TITLE, "pods"),
    ];
    if !with_portmap {
        for s in &mut sweeps[1..] {
            s.problem = Some("not built yet: portmap missing".into());
        }
    }
    let measured = ns
        .add_pods(1)
        .map_err(|e| e.to_string())?
        .pop()
        .ok_or("no measurement pod")?;
    let bench = PodBench {
        filled,
        empty,
        twin,
        with_portmap,
        measured,
        caps: caps(19999),
    };
    let mut present = 0;
    let mut recreated = 0;
    for &level in levels {
        if level > present {
            let (ours_s, ref_s) = fill(ns, &bench.filled, with_portmap, present, level)
                .map_err(|e| format!("filling the node to {level} pods: {e}"))?;
            filling.steps.push((level, ours_s, ref_s));
            let (waited, quiet) = crate::machine::settle(std::time::Duration::from_secs(60));
            eprintln!(
                "  waited {waited:.1} s for the machine to be quiet{}",
                if quiet { "" } else { " (it never was)" }
            );
            filling.settled.push((waited, quiet));
            present = level;
        }
        eprintln!("  {present} pods present: measuring, alternating with the empty twin");
        let mut curves = measure_level(ns, &bench, present, iterations, &mut recreated)?;
        // The kernel's own cost at this level, on the filled node.
        let floor = diagnose::kernel_floor(&bench.measured, 7).ok();
        for c in &mut curves {
            c.floor = floor.clone();
        }
        let vanished = ns.vanished_pods();
        if vanished > 0 || recreated > 0 {
            let why = format!(
                "with {present} pods present, {vanished} pod namespaces had been deleted by \
                 something else (a concurrent test run cleaning up `cnit-` namespaces?) and the \
                 measured pod was re-created {recreated} times: the numbers of this level and \
                 later ones are not trustworthy"
            );
            eprintln!("  {why}");
            for s in &mut sweeps {
                s.problem.get_or_insert_with(|| why.clone());
            }
        }
        let [ca, cb, cp] = curves;
        sweeps[0].levels.push(ca);
        if with_portmap {
            sweeps[1].levels.push(cb);
            sweeps[2].levels.push(cp);
        }
    }
    // Where the time goes on the fullest node: our chain under strace.
    if let Some(dir) = strace {
        let (s, title) = if with_portmap {
            (&bench.filled.b[0], PORTMAP_TITLE)
        } else {
            (&bench.filled.a[0], CHAIN_TITLE)
        };
        let label = format!("{title}, {present} pods present");
        let key = format!("scale-{present}");
        match diagnose::strace_chain(s, &bench.measured, "eth0", &bench.caps, &key, dir) {
            Ok(list) => traced.push((label, list)),
            Err(e) => traced.push((format!("{label}: strace failed: {e}"), Vec::new())),
        }
    }
    Ok((sweeps.to_vec(), filling, traced))
}

/// The two nodes of the pod sweep and the pod measured on them.
struct PodBench {
    filled: NodeChains,
    empty: NodeChains,
    /// The empty twin's node namespace.
    twin: File,
    with_portmap: bool,
    measured: String,
    caps: Map<String, Value>,
}

/// One level's samples of the three curves: `iterations` rounds, each on
/// the filled node and the empty twin, alternating which goes first (and
/// which side, ours or the reference's).
fn measure_level(
    ns: &mut Namespaces,
    bench: &PodBench,
    present: usize,
    iterations: usize,
    recreated: &mut usize,
) -> Result<[Level; 3], String> {
    let mut curves: [Level; 3] = std::array::from_fn(|_| Level {
        present,
        ..Level::default()
    });
    for i in 0..iterations {
        let (order, nodes) = Node::alternation(i);
        for on in nodes {
            if ns.ensure_pod(&bench.measured).map_err(|e| e.to_string())? {
                *recreated += 1;
            }
            let id = format!("{}-{present}-{i}", on.tag());
            let samples = match on {
                Node::Filled => pod_round(
                    &bench.filled,
                    bench.with_portmap,
                    &bench.measured,
                    &bench.caps,
                    order,
                    &id,
                ),
                Node::Empty => namespaces::run_in(&bench.twin, || {
                    pod_round(
                        &bench.empty,
                        bench.with_portmap,
                        &bench.measured,
                        &bench.caps,
                        order,
                        &id,
                    )
                })
                .map_err(|e| format!("entering the empty twin: {e}"))?,
            }
            .map_err(|e| {
                format!(
                    "{} pods, {} node: {e}",
                    present,
                    if on == Node::Filled {
                        "filled"
                    } else {
                        "empty"
                    }
                )
            })?;
            for (curve, side, add, del) in samples {
                curves[curve].push(on, side, add, del);
            }
        }
    }
    Ok(curves)
}

fn caps(host_port: u16) -> Map<String, Value> {
    json!({"portMappings": chains::port_mapping(host_port)})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// Adds pods `from..to`: our chain ADD for each (with portmap when
/// measured), then the reference portmap's own ADD of the same mapping.
/// Returns the seconds spent in ours and in the reference portmap.
fn fill(
    ns: &mut Namespaces,
    filled: &NodeChains,
    with_portmap: bool,
    from: usize,
    to: usize,
) -> Result<(f64, f64), String> {
    eprintln!("  filling the node: pods {from}..{to}");
    let pods = ns.add_pods(to - from).map_err(|e| e.to_string())?;
    let (mut ours_s, mut ref_s) = (0.0, 0.0);
    let mut ref_masq = String::from("*nat\n");
    for (n, pod) in (from..to).zip(&pods) {
        interrupt::check()?;
        let host_port = 20000 + n as u16;
        let rt = runtime_conf(format!("fill-{n}"), pod, "eth0", &caps(host_port));
        let ours = if with_portmap {
            &filled.b[0]
        } else {
            &filled.a[0]
        };
        let start = Instant::now();
        let (_, result) = ours.runtime_add(&rt)?;
        ours_s += start.elapsed().as_secs_f64();
        if let Some(addr) = result["ips"][0]["address"].as_str() {
            ref_masq.push_str(&go_masq_rules(&format!("fill-{n}"), addr));
        }
        if with_portmap {
            // The bridge's result is portmap's prevResult (portmap passes it
            // through unchanged).
            let start = Instant::now();
            filled.b[1].run_plugin(1, "ADD", Some(&result), &rt)?;
            ref_s += start.elapsed().as_secs_f64();
        }
    }
    // The reference's masquerade of the same pods, in its own format (the
    // rules its bridge writes), in one iptables-restore.
    ref_masq.push_str("COMMIT\n");
    let start = Instant::now();
    restore_nat(&ref_masq)?;
    ref_s += start.elapsed().as_secs_f64();
    Ok((ours_s, ref_s))
}

/// The Go bridge's iptables masquerade of container `cid` of network
/// `bench-scale` at `addr` (`a.b.c.d/len`): its chain, the chain's two
/// rules and the POSTROUTING jump, all commented with the owner.
fn go_masq_rules(cid: &str, addr: &str) -> String {
    use libcni::netfilter::iptables::rule_line;
    let chain = libcni::netfilter::go_chain_name("", "bench-scale", cid);
    let comment = format!("name: \"bench-scale\" id: \"{cid}\"");
    let ip = addr.split('/').next().unwrap_or(addr);
    let net = "10.210.0.0/16";
    let mut s = format!(":{chain} - [0:0]\n");
    for line in [
        rule_line(
            &chain,
            &[
                "-d",
                net,
                "-m",
                "comment",
                "--comment",
                &comment,
                "-j",
                "ACCEPT",
            ],
        ),
        rule_line(
            &chain,
            &[
                "!",
                "-d",
                "224.0.0.0/4",
                "-m",
                "comment",
                "--comment",
                &comment,
                "-j",
                "MASQUERADE",
            ],
        ),
        rule_line(
            "POSTROUTING",
            &[
                "-s",
                &format!("{ip}/32"),
                "-m",
                "comment",
                "--comment",
                &comment,
                "-j",
                &chain,
            ],
        ),
    ] {
        s.push_str(&line);
        s.push('\n');
    }
    s
}

fn restore_nat(input: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = std::process::Command::new("iptables-restore")
        .arg("--noflush")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("iptables-restore: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("iptables-restore: no stdin")?
        .write_all(input.as_bytes())
        .map_err(|e| format!("iptables-restore: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("iptables-restore: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "iptables-restore: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

fn host_local_list(data_dir: &Path) -> Value {
    chains::conflist(
        "bench-hl",
        vec![json!({"type": "host-local", "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.220.0.0/16"}]],
            "dataDir": data_dir
        }})],
    )
}

fn host_local_sides(set: &Setting, data_dir: &Path, key: &str) -> Result<[SideSetup; 2], String> {
    let list = host_local_list(data_dir);
    let chain = chains::Chain {
        key: "scale-hl",
        title: HOST_LOCAL_TITLE,
        ifname: "eth0",
        ours: list.clone(),
        reference: list,
        capability_args: Map::new(),
        note: None,
    };
    Ok([
        measure::setup(set, &chain, Side::Ours, key)?,
        measure::setup(set, &chain, Side::Reference, key)?,
    ])
}

/// The host-local sweep (see the module comment).
pub fn leases(
    set: &Setting,
    ns: &mut Namespaces,
    data_dir: &Path,
    levels: &[usize],
    iterations: usize,
    strace: Option<&Path>,
) -> Result<(Sweep, Vec<Traced>), String> {
    let ours_dir = data_dir.join("filled-ours");
    let reference_dir = data_dir.join("filled-reference");
    let missing = measure::missing(set.ours_dir, &host_local_list(&ours_dir));
    if !missing.is_empty() {
        let why = format!("not built yet: {} missing", missing.join(", "));
        return Ok((Sweep::skipped(HOST_LOCAL_TITLE, "leases", why), Vec::new()));
    }
    let [ours, _] = host_local_sides(set, &ours_dir, "scale-hl-filled-ours")?;
    let [_, reference] = host_local_sides(set, &reference_dir, "scale-hl-filled-ref")?;
    let filled = [ours, reference];
    let empty = host_local_sides(set, &data_dir.join("empty"), "scale-hl-empty")?;
    let pod = ns
        .add_pods(1)
        .map_err(|e| e.to_string())?
        .pop()
        .ok_or("no pod")?;
    let dir = reference_dir.join("bench-hl");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ours_list = host_local_list(&ours_dir);
    let status_stdin = status::stdin_at_1_1_0(&ours_list, &ours_list["plugins"][0]);
    let mut sweep = Sweep::new(HOST_LOCAL_TITLE, "leases");
    let mut present = 0;
    for &level in levels {
        add_leases(&filled[0], &pod, present, level)?;
        write_leases(&dir, present, level)?;
        present = present.max(level);
        eprintln!("  {present} leases present: measuring, alternating with an empty dataDir");
        let mut l = Level {
            present,
            ..Level::default()
        };
        for i in 0..iterations {
            let (order, nodes) = Node::alternation(i);
            for on in nodes {
                let sides = if on == Node::Filled { &filled } else { &empty };
                for &k in &order {
                    interrupt::check()?;
                    let s = &sides[k];
                    let rt = runtime_conf(
                        format!("hl-{}-{}-{present}-{i}", s.side.tag(), on.tag()),
                        &pod,
                        "eth0",
                        &Map::new(),
                    );
                    let (add, del) = s.runtime_add_del(&rt).map_err(|e| {
                        format!("{} host-local with {present} leases: {e}", s.side.label())
                    })?;
                    l.push(on, s.side, add, del);
                }
            }
            let verbs = l.lease_verbs.get_or_insert_with(LeaseVerbs::default);
            for &k in &order {
                interrupt::check()?;
                let s = &filled[k];
                let rt = runtime_conf(
                    format!("hl-walk-{}-{present}-{i}", s.side.tag()),
                    &pod,
                    "eth0",
                    &Map::new(),
                );
                let del = walk_del(s, &rt).map_err(|e| {
                    format!("{} host-local with {present} leases: {e}", s.side.label())
                })?;
                verbs.walk_del_mut(s.side).push(del);
            }
            let ms = status::call(
                &filled[0].dir.join("host-local"),
                &filled[0].dir,
                &status_stdin,
            )
            .map_err(|e| format!("STATUS of our host-local with {present} leases: {e}"))?;
            verbs.ours_status.push(ms);
        }
        sweep.levels.push(l);
    }
    let mut traced = Vec::new();
    if let Some(dir) = strace {
        let label = format!("{HOST_LOCAL_TITLE}, {present} leases present");
        for s in &filled {
            let label = format!("{label} ({})", s.side.label());
            let key = format!("hl-{present}-{}", s.side.tag());
            match diagnose::strace_chain(s, &pod, "eth0", &Map::new(), &key, dir) {
                Ok(list) => traced.push((label, list)),
                Err(e) => traced.push((format!("{label}: strace failed: {e}"), Vec::new())),
            }
        }
    }
    Ok((sweep, traced))
}

/// ADD (untimed) then DEL without `prevResult` of host-local alone, plugin
/// by plugin: the DEL's wall time in ms.
fn walk_del(s: &SideSetup, rt: &cnitool::RuntimeConf) -> Result<f64, String> {
    s.run_plugin(0, "ADD", None, rt)?;
    Ok(s.run_plugin(0, "DEL", None, rt)?.wall_ms)
}

/// The `n`th filled address: 10.220.0.2 onwards.
fn lease_ip(n: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 220, 0, 2)) + n as u32)
}

/// Leases `from..to` taken by real ADDs of `ours` (container `fill-<n>`).
fn add_leases(ours: &SideSetup, pod: &str, from: usize, to: usize) -> Result<(), String> {
    if to > from {
        eprintln!("  filling: {} ADDs of our host-local", to - from);
    }
    for n in from..to {
        interrupt::check()?;
        let rt = runtime_conf(format!("fill-{n}"), pod, "eth0", &Map::new());
        ours.run_plugin(0, "ADD", None, &rt)
            .map_err(|e| format!("filling lease {n} with our host-local: {e}"))?;
    }
    Ok(())
}

/// Writes leases `from..to` in the Go format and points
/// `last_reserved_ip.0` at the last one.
fn write_leases(dir: &Path, from: usize, to: usize) -> Result<(), String> {
    for n in from..to {
        let path = dir.join(lease_ip(n).to_string());
        std::fs::write(&path, format!("fill-{n}\r\neth0"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if to > 0 {
        let path = dir.join("last_reserved_ip.0");
        std::fs::write(&path, lease_ip(to - 1).to_string())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_consecutive_from_dot_two() {
        assert_eq!(lease_ip(0), Ipv4Addr::new(10, 220, 0, 2));
        assert_eq!(lease_ip(254), Ipv4Addr::new(10, 220, 1, 0));
        assert_eq!(lease_ip(9999), Ipv4Addr::new(10, 220, 39, 17));
    }

    #[test]
    fn growth_against_the_empty_node_and_the_twin() {
        let mut zero = Level::default();
        zero.push(Node::Filled, Side::Ours, 2.0, 10.0);
        let mut l = Level::default();
        l.push(Node::Filled, Side::Ours, 6.0, 30.0);
        l.push(Node::Empty, Side::Ours, 3.0, 20.0);
        assert_eq!(l.growth(&zero, Side::Ours, true), Some(3.0));
        assert_eq!(l.growth_vs_twin(Side::Ours, true), Some(2.0));
        assert_eq!(l.growth_vs_twin(Side::Ours, false), Some(1.5));
        assert_eq!(l.growth(&zero, Side::Reference, true), None);
    }
}
