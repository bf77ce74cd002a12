//! `cni-rs doctor`: what a node needs for its CNI configs to work, checked
//! the way the runtime and the plugins would find it, then `gc`'s
//! findings. Each line is `ok`, `note` (worth knowing, nothing to do) or
//! `FAIL` (needs attention); the exit status is 0 only without a `FAIL`.

use std::fmt::Write as _;

use cnitool::conf::NetworkConfigList;
use cnitool::exec::CniConfig;
use libcni::netfilter::{node_iptables, NodeIptables};
use libcni::netlink::Netlink;
use libcni::version::Version;
use serde_json::{Map, Value};

use crate::liveness::Judge;
use crate::node::{self, key, NodePaths};

#[derive(Default)]
pub struct Findings {
    pub text: String,
    pub failures: usize,
}

impl Findings {
    fn ok(&mut self, what: impl AsRef<str>) {
        let _ = writeln!(self.text, "ok    {}", what.as_ref());
    }
    fn note(&mut self, what: impl AsRef<str>) {
        let _ = writeln!(self.text, "note  {}", what.as_ref());
    }
    fn fail(&mut self, what: impl AsRef<str>) {
        self.failures += 1;
        let _ = writeln!(self.text, "FAIL  {}", what.as_ref());
    }
}

/// The link kinds a plugin creates on the node or in the pod.
fn link_kinds(plugin_type: &str) -> &'static [&'static str] {
    match plugin_type {
        "bridge" | "flannel" => &["bridge", "veth"],
        "ptp" => &["veth"],
        "macvlan" => &["macvlan"],
        "ipvlan" => &["ipvlan"],
        "vlan" => &["vlan"],
        "dummy" => &["dummy"],
        "vrf" => &["vrf"],
        "bandwidth" => &["ifb"],
        _ => &[],
    }
}

fn plugin_type(plugin: &Map<String, Value>) -> &str {
    key(plugin, "type").and_then(Value::as_str).unwrap_or("")
}

pub fn run(paths: &NodePaths, judge: &dyn Fn() -> crate::error::Result<Judge>) -> Findings {
    let mut f = Findings::default();
    let runner = CniConfig::new(paths.bin_path.clone(), &paths.cache_dir);
    let configured = node::load_networks(paths);
    if configured.networks.is_empty() && configured.broken.is_empty() {
        f.fail(format!(
            "no network configuration in {}: the runtime reports NetworkReady=false",
            paths.conf_dir.display()
        ));
    }
    for (file, why) in &configured.broken {
        f.fail(format!("{}: {why}", file.display()));
    }
    for (file, name) in &configured.shadowed {
        f.note(format!(
            "{}: network {name:?} is also in an earlier file, which the runtimes use",
            file.display()
        ));
    }
    let mut kinds: Vec<&str> = Vec::new();
    let mut wants_forwarding = false;
    for net in &configured.networks {
        let list = &net.list;
        f.ok(format!(
            "network {:?} ({}, cniVersion {}): {}",
            list.name,
            net.file.display(),
            list.cni_version.as_str(),
            list.plugins
                .iter()
                .map(plugin_type)
                .collect::<Vec<_>>()
                .join(" + ")
        ));
        let mut all_speak_gc = true;
        for plugin in &list.plugins {
            let ty = plugin_type(plugin);
            kinds.extend(link_kinds(ty));
            wants_forwarding |= matches!(ty, "bridge" | "ptp" | "flannel");
            match libcni::invoke::find_in_path(ty, &paths.bin_path) {
                Err(e) => {
                    f.fail(format!("network {:?}: plugin {ty:?}: {e}", list.name));
                    all_speak_gc = false;
                    continue;
                }
                Ok(path) => {
                    let about = about_line(&path);
                    match runner.supported_versions(list, plugin) {
                        Ok(v) if v.iter().any(|v| v == list.cni_version.as_str()) => {
                            all_speak_gc &= v.iter().any(|v| v == Version::V1_1_0.as_str());
                            f.ok(format!("  {ty}: {} ({about})", path.display()))
                        }
                        Ok(v) => {
                            all_speak_gc = false;
                            f.fail(format!(
                                "  {ty}: {} ({about}) does not speak cniVersion {} (it speaks {})",
                                path.display(),
                                list.cni_version.as_str(),
                                v.join(", ")
                            ))
                        }
                        Err(e) => {
                            all_speak_gc = false;
                            f.fail(format!("  {ty}: {}: VERSION failed: {e}", path.display()))
                        }
                    }
                }
            }
        }
        status(&mut f, &runner, list, all_speak_gc);
    }

    // The node's basics.
    let forwarding = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward")
        .map(|s| s.trim() == "1")
        .unwrap_or(false);
    match (forwarding, wants_forwarding) {
        (true, _) => f.ok("IPv4 forwarding is on"),
        (false, true) => f.fail(
            "IPv4 forwarding is off (net.ipv4.ip_forward=0): pods of a bridge, ptp or flannel \
             network reach nothing beyond the node",
        ),
        (false, false) => f.note("IPv4 forwarding is off"),
    }
    match node_iptables() {
        NodeIptables::Nft => f.ok("iptables is iptables-nft: rules are written over netlink"),
        NodeIptables::Legacy => f.ok("iptables is legacy: rules are written by iptables-restore"),
        NodeIptables::Absent => f.note(
            "no iptables command: the nftables backend is used (iptables-nft rules are reached over netlink)",
        ),
    }
    kinds.sort_unstable();
    kinds.dedup();
    match Netlink::open() {
        Ok(mut nl) => {
            for kind in kinds {
                match nl.kernel_has_kind(kind) {
                    Ok(true) => f.ok(format!("the kernel makes {kind} links")),
                    Ok(false) => f.fail(format!(
                        "the kernel has no {kind} links (its module is not loaded and cannot be)"
                    )),
                    Err(e) => f.fail(format!("probing {kind} links: {e}")),
                }
            }
        }
        Err(e) => f.fail(format!("netlink: {e}")),
    }

    // Then gc's findings.
    let report = crate::gc::run(paths, judge, &crate::gc::GcOptions::default());
    for line in report.text.lines() {
        if line.starts_with("stale") {
            f.fail(format!("gc: {line}"));
        } else if line.starts_with("untied") || line.starts_with("unknown") {
            f.note(format!("gc: {line}"));
        }
    }
    for e in report.failures {
        f.fail(format!("gc: {e}"));
    }
    if report.found == 0 {
        f.ok("gc: no stale attachment");
    }
    f
}

/// The line a plugin prints about itself when run by a person (Go's and
/// ours: `CNI bridge plugin v1.1.1`).
fn about_line(path: &std::path::Path) -> String {
    let out = std::process::Command::new(path)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) => String::from_utf8_lossy(if o.stderr.is_empty() {
            &o.stdout
        } else {
            &o.stderr
        })
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string(),
        Err(e) => format!("cannot run: {e}"),
    }
}

/// STATUS as containerd 2.x asks it every 5 s for a 1.1.0 list; an older
/// list whose plugins all speak 1.1.0 is asked at 1.1.0 too (its
/// configuration is then read as the plugins read it), the answer marked
/// as not what a runtime sees.
fn status(f: &mut Findings, runner: &CniConfig, list: &NetworkConfigList, all_speak: bool) {
    let (asked, upgraded) = if list.cni_version.allows_gc_and_status() {
        (list.clone(), false)
    } else if all_speak {
        let mut l = list.clone();
        l.cni_version = Version::V1_1_0;
        (l, true)
    } else {
        f.note(format!(
            "network {:?}: STATUS not asked (cniVersion {} and plugins that do not all speak 1.1.0)",
            list.name,
            list.cni_version.as_str()
        ));
        return;
    };
    let how = if upgraded { " (asked at 1.1.0)" } else { "" };
    match runner.status_network_list(&asked) {
        Ok(()) => f.ok(format!("network {:?}: STATUS ready{how}", list.name)),
        Err(e) => f.fail(format!("network {:?}: STATUS{how}: {e}", list.name)),
    }
}
