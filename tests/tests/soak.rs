//! Concurrency soak: 64 pods in parallel cycle ADD → CHECK → DEL through
//! kube-flannel's whole chain (flannel, with bridge (ipMasq on) and
//! host-local behind it, then portmap on nftables with one host port per
//! pod), via our
//! cnitool in one node namespace, for `CNI_SOAK_SECS` seconds (20 by
//! default), while a GC (`cnitool gc` listing every pod of the soak as
//! valid) runs over and over beside them.
//!
//! Asserted: every call succeeds; no address is ever handed to two pods at
//! once; after each ADD the pod's lease, saved flannel config and cache
//! file are its own and CHECK (which reads the veth, addresses, routes,
//! lease and host-port elements back) passes, whatever GC did meanwhile;
//! attachments that GC must collect (pods whose namespace is gone, with
//! and without a cache file) are collected; at the end nothing is left:
//! no veth, lease, saved config, cache file or host-port element.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tests::*;

const NET: &str = "cbr0";
const PODS: usize = 64;
/// Attachments left for GC: their namespaces are deleted; the first half
/// keep their cache file (cnitool gc DELs them), the others lose it (the
/// plugins' own GC must find their leases, saved configs and elements).
const STALE: usize = 6;

struct Soak {
    node: Node,
    state: TempDir,
}

impl Soak {
    fn path(&self, rel: &str) -> PathBuf {
        self.state.path().join(rel)
    }

    fn cnitool(&self, args: &[&str], cap_args: Option<&str>) -> PluginOutput {
        let env: Vec<(&str, &str)> = cap_args.map(|c| ("CAP_ARGS", c)).into_iter().collect();
        self.node.cnitool_with(&bin("cnitool"), args, &env)
    }

    fn lease_dir(&self) -> PathBuf {
        self.path("leases").join(NET)
    }

    fn leases(&self) -> Vec<String> {
        leases_in(&self.lease_dir())
    }

    fn cache_dir(&self) -> PathBuf {
        self.node.shared_cache_dir().join("results")
    }
}

/// One pod of the soak and what its cycles need.
#[derive(Clone)]
struct Pod {
    netns: String,
    cid: String,
    cap_args: String,
}

/// cnitool's container ID for a namespace path: `cnitool-` + the first 10
/// bytes of sha512(path) in hex (as upstream's cnitool).
fn cnitool_container_id(netns: &str) -> String {
    let out = run_ok(
        std::process::Command::new("sh")
            .arg("-c")
            .arg("printf %s \"$1\" | sha512sum")
            .arg("sh")
            .arg(netns),
    );
    let hex = String::from_utf8_lossy(&out.stdout);
    format!("cnitool-{}", &hex[..20])
}

fn host_port_args(port: u16) -> String {
    json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]})
        .to_string()
}

/// One ADD → check → CHECK → DEL cycle. `held` maps each address to the
/// pod holding it right now.
fn cycle(soak: &Soak, pod: &Pod, held: &Mutex<HashMap<String, String>>) -> Result<(), String> {
    let out = soak.cnitool(&["add", NET, &pod.netns], Some(&pod.cap_args));
    if out.exit_code != 0 {
        return Err(format!("{}: ADD: {out:?}", pod.cid));
    }
    let result: Value =
        serde_json::from_str(&out.stdout).map_err(|e| format!("{}: ADD result: {e}", pod.cid))?;
    let addr = result["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .ok_or_else(|| format!("{}: no address in {result}", pod.cid))?
        .to_string();
    if let Some(other) = held
        .lock()
        .expect("held")
        .insert(addr.clone(), pod.cid.clone())
    {
        return Err(format!(
            "duplicate address {addr}: given to {} while {other} holds it",
            pod.cid
        ));
    }
    let lease = std::fs::read_to_string(soak.lease_dir().join(&addr)).unwrap_or_default();
    if lease != format!("{}\r\neth0", pod.cid) {
        return Err(format!("{}: lease {addr} holds {lease:?}", pod.cid));
    }
    let saved = soak.path("flannel").join(format!("{}@eth0", pod.cid));
    if !saved.is_file() {
        return Err(format!("{}: no saved flannel config {saved:?}", pod.cid));
    }
    let cache = soak.cache_dir().join(format!("{NET}-{}-eth0", pod.cid));
    if !cache.is_file() {
        return Err(format!("{}: no cache file {cache:?}", pod.cid));
    }
    // The plugins' own reading of the node: veth, addresses, routes, the
    // lease, the host-port elements. GC may have run since the ADD.
    let out = soak.cnitool(&["check", NET, &pod.netns], Some(&pod.cap_args));
    if out.exit_code != 0 {
        return Err(format!("{}: CHECK after ADD: {out:?}", pod.cid));
    }
    held.lock().expect("held").remove(&addr);
    let out = soak.cnitool(&["del", NET, &pod.netns], Some(&pod.cap_args));
    if out.exit_code != 0 {
        return Err(format!("{}: DEL: {out:?}", pod.cid));
    }
    Ok(())
}

#[test]
fn soak_64_pods_through_the_kube_flannel_chain_with_gc_beside() {
    if !require_root("soak_64_pods_through_the_kube_flannel_chain_with_gc_beside") {
        return;
    }
    let duration = campaign_secs("CNI_SOAK_SECS", 20);
    let soak = Arc::new(Soak {
        node: Node::new("soak"),
        state: TempDir::new("soak-state"),
    });
    soak.node.ns.ip(&["link", "set", "lo", "up"]);
    // FLANNEL_IPMASQ=false: the bridge masquerades (ipMasq), so its
    // nftables set is churned by every cycle too.
    std::fs::write(
        soak.path("subnet.env"),
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
    )
    .expect("subnet.env");
    soak.node.write_conf(
        "10-flannel.conflist",
        &json!({"name": NET, "cniVersion": "1.1.0", "plugins": [
            {"type": "flannel",
             "delegate": {"hairpinMode": true, "isDefaultGateway": true},
             "subnetFile": soak.path("subnet.env"),
             "dataDir": soak.path("flannel"),
             "ipam": {"dataDir": soak.path("leases")}},
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
        ]}),
    );
    let namespaces: Vec<Netns> = (0..PODS).map(|i| Netns::new(&format!("soak{i}"))).collect();
    let pods: Vec<Pod> = namespaces
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let netns = ns.path().to_str().expect("utf8").to_string();
            Pod {
                cid: cnitool_container_id(&netns),
                netns,
                cap_args: host_port_args(20000 + i as u16),
            }
        })
        .collect();

    // Stale attachments for GC to find.
    let mut stale = Vec::new();
    for i in 0..STALE {
        let ns = Netns::new(&format!("soak-stale{i}"));
        let netns = ns.path().to_str().expect("utf8").to_string();
        let pod = Pod {
            cid: cnitool_container_id(&netns),
            netns: netns.clone(),
            cap_args: host_port_args(30000 + i as u16),
        };
        let out = soak.cnitool(&["add", NET, &netns], Some(&pod.cap_args));
        assert_eq!(out.exit_code, 0, "stale {i}: {out:?}");
        let addr = out.json()["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        if i >= STALE / 2 {
            let cache = soak.cache_dir().join(format!("{NET}-{}-eth0", pod.cid));
            std::fs::remove_file(&cache).expect("remove cache");
        }
        drop(ns); // the pod is gone, and its veth with it
        stale.push((pod, addr));
    }
    // portmap names no backend: Go's default, iptables (the entry rule's
    // comment names the container).
    let ipt = iptables_rules(&soak.node.ns);
    for (pod, _) in &stale {
        assert!(ipt.contains(&format!("id: \\\"{}\\\"", pod.cid)), "{ipt}");
    }

    let held: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicU64::new(0));
    let gc_runs = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = mpsc::channel::<String>();
    let start = Instant::now();
    let deadline = start + duration;

    let mut workers = Vec::new();
    for pod in pods.clone() {
        let (soak, held, errors, stop, cycles, done) = (
            soak.clone(),
            held.clone(),
            errors.clone(),
            stop.clone(),
            cycles.clone(),
            done_tx.clone(),
        );
        workers.push(std::thread::spawn(move || {
            // Every pod does at least one cycle, however short the soak.
            let mut first = true;
            while first || (Instant::now() < deadline && !stop.load(Ordering::SeqCst)) {
                first = false;
                if let Err(e) = cycle(&soak, &pod, &held) {
                    errors.lock().expect("errors").push(e);
                    stop.store(true, Ordering::SeqCst);
                    break;
                }
                cycles.fetch_add(1, Ordering::SeqCst);
            }
            let _ = done.send(pod.cid.clone());
        }));
    }
    let gc = {
        let (soak, errors, stop, gc_runs, done) = (
            soak.clone(),
            errors.clone(),
            stop.clone(),
            gc_runs.clone(),
            done_tx.clone(),
        );
        let mut args: Vec<String> = vec!["gc".into(), NET.into()];
        args.extend(pods.iter().map(|p| p.netns.clone()));
        std::thread::spawn(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            // At least one full GC, however short the soak.
            let mut first = true;
            while first || (Instant::now() < deadline && !stop.load(Ordering::SeqCst)) {
                first = false;
                let out = soak.cnitool(&args, None);
                if out.exit_code != 0 {
                    errors.lock().expect("errors").push(format!("GC: {out:?}"));
                    stop.store(true, Ordering::SeqCst);
                    break;
                }
                gc_runs.fetch_add(1, Ordering::SeqCst);
            }
            let _ = done.send("gc".into());
        })
    };
    drop(done_tx);

    // Bounded wait: a hung call fails the test instead of the suite.
    let grace = Duration::from_secs(180);
    let mut finished = 0;
    while finished < PODS + 1 {
        let left = (deadline + grace).saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok(_) => finished += 1,
            Err(_) => panic!(
                "soak: {} of {} workers still running {grace:?} after the deadline; errors so far: {:?}",
                PODS + 1 - finished,
                PODS + 1,
                errors.lock().expect("errors")
            ),
        }
    }
    for w in workers {
        w.join().expect("worker");
    }
    gc.join().expect("gc");
    let elapsed = start.elapsed();
    let (cycles, gc_runs) = (
        cycles.load(Ordering::SeqCst),
        gc_runs.load(Ordering::SeqCst),
    );
    eprintln!(
        "soak: {PODS} pods, {cycles} ADD/CHECK/DEL cycles and {gc_runs} GC runs in {:.1} s \
         ({:.1} cycles/s)",
        elapsed.as_secs_f64(),
        cycles as f64 / elapsed.as_secs_f64()
    );
    let errors = errors.lock().expect("errors").clone();
    assert_eq!(errors, Vec::<String>::new(), "soak errors");
    assert!(cycles >= PODS as u64, "{cycles} cycles");
    assert!(gc_runs >= 1);
    assert!(held.lock().expect("held").is_empty());

    // Collected by the GC runs beside the soak: nothing of the stale
    // attachments is left; and nothing of the soak's pods.
    assert_eq!(
        links_of_kind(&soak.node.ns, "veth"),
        Vec::<String>::new(),
        "veths left"
    );
    assert_eq!(soak.leases(), Vec::<String>::new(), "leases left");
    assert_eq!(
        tree(&soak.path("flannel")),
        Vec::<String>::new(),
        "saved configs left"
    );
    assert_eq!(
        tree(&soak.cache_dir()),
        Vec::<String>::new(),
        "cache files left"
    );
    let nft = nft_ruleset(&soak.node.ns);
    assert!(
        !nft.contains("dnat to") && !nft.contains("masquerade comment"),
        "host-port or masquerade rules left:\n{nft}"
    );
    // portmap names no backend: Go's default, iptables.
    let ipt = iptables_rules(&soak.node.ns);
    assert!(
        !ipt.contains("CNI-DN-") && !ipt.contains("-j DNAT"),
        "host-port rules left in iptables:\n{ipt}"
    );
    // ipMasq names no backend: Go's default, iptables.
    assert!(
        !ipt.contains("-A POSTROUTING -s ") && !ipt.contains("id: \\\""),
        "masquerade rules left in iptables:\n{ipt}"
    );
    for (pod, addr) in &stale {
        assert!(
            !soak.lease_dir().join(addr).exists(),
            "stale {}: lease {addr}",
            pod.cid
        );
    }
    for ns in &namespaces {
        assert!(ns.link("eth0").is_none(), "{}: eth0 left", ns.name());
    }
    let ports = soak.node.ns.ip_json(&["link", "show", "master", "cni0"]);
    assert_eq!(ports, json!([]), "bridge ports left");
}
