//! `cni-rs gc`: the CNI GC no runtime calls. A dry run lists the dead
//! attachments and what they hold; `--apply` removes them in three steps:
//! 1. DEL of each stale cached attachment through its chain (the current
//!    config, as Go libcni's GC does; the cached one for a network whose
//!    config is gone);
//! 2. DEL by identity (container ID and interface, no namespace, no cached
//!    result) of each dead attachment step 1 left something of: untied
//!    ones (`--untied`), failed DELs. A dead flannel attachment without its
//!    saved config gets its delegate rendered again from subnet.env;
//! 3. the removal of files no plugin took (a lease or saved config of a
//!    network whose config is gone, a cache file, a firewall record whose
//!    rules are gone), a lease under host-local's lock. Never a dhcp lease
//!    file: the daemon renews it and takes it up at start; only its
//!    release ends it.
//!
//! A network whose config sets `disableGC` (spec 1.1: its state may be
//! shared with another runtime) is skipped whole, and the report says so.
//!
//! The GC verb with `cni.dev/valid-attachments` is not sent: a plugin's GC
//! removes all its list does not name, and an ADD that starts after the
//! node was read is in no list, since nothing serializes us with the
//! runtime's ADDs (a runtime calling GC would hold its own lock). Every
//! step touches only the dead attachments found, so a live one, even one
//! whose ADD is in flight (young, hence live), is never touched.
//!
//! The node is read again before steps 2 and 3; what step 3 cannot
//! remove is reported as not removed (exit 1).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use cnitool::cache::{CacheKey, ResultCache};
use cnitool::conf::NetworkConfigList;
use cnitool::exec::{CniConfig, RuntimeConf};

use crate::collect::{self, AttachmentKey, Kind, NodeState, Piece, Row};
use crate::error::{Error, Result};
use crate::liveness::{Judge, Liveness, Verdicts};
use crate::node::NodePaths;

#[derive(Debug, Clone, Default)]
pub struct GcOptions {
    /// Only this network.
    pub network: Option<String>,
    pub apply: bool,
    /// Also remove untied state.
    pub untied: bool,
}

/// What a run found and did.
#[derive(Debug, Default)]
pub struct GcReport {
    pub text: String,
    /// Pieces of dead attachments still on the node, and failed steps.
    pub failures: Vec<String>,
    /// How many dead attachments were found (stale, and untied when asked).
    pub found: usize,
    /// How many attachments (rows) were read, live ones included.
    pub seen: usize,
    /// With `--apply`, the pieces of dead attachments that are gone
    /// after the pass, by kind (`lease`, `portMappings`, ...): what the
    /// pass collected. Empty when a read of the node failed midway.
    pub collected: BTreeMap<&'static str, usize>,
}

fn in_scope(row: &Row, opts: &GcOptions) -> bool {
    opts.network.as_deref().is_none_or(|n| row.key.network == n)
}

/// The attachments to remove: stale ones, and untied ones when asked. An
/// unknown one is never removed: it is most likely a live pod of a runtime
/// whose cache predates netns (containerd 1.7), and only the runtime can
/// tell (`--cri-socket`). Nor is state whose owner is not known (an empty
/// lease, an IFB without our alias that no cached attachment's name
/// matches): nothing says it is not an ADD's in flight.
fn is_target(l: Liveness, row: &Row, opts: &GcOptions) -> bool {
    l == Liveness::Stale || (opts.untied && l == Liveness::Untied && owner_known(row))
}

/// Whether the row's network, as configured (or as its cache entry ran
/// it), sets `disableGC`.
fn gc_disabled(state: &NodeState, row: &Row) -> bool {
    state
        .network(&row.key.network)
        .is_some_and(|n| n.list.disable_gc)
}

fn owner_known(row: &Row) -> bool {
    !row.key.network.is_empty() && !row.key.container_id.is_empty()
}

fn describe(row: &Row) -> String {
    let k = &row.key;
    let net = if k.network.is_empty() {
        "?"
    } else {
        &k.network
    };
    let cid = if k.container_id.is_empty() {
        "?"
    } else {
        &k.container_id
    };
    let ifname = if k.ifname.is_empty() { "?" } else { &k.ifname };
    format!("{net} {cid} {ifname}")
}

fn present(row: &Row) -> impl Iterator<Item = &Piece> {
    row.pieces.iter().filter(|p| p.present)
}

pub fn run(
    paths: &NodePaths,
    judge: &dyn Fn() -> crate::error::Result<Judge>,
    opts: &GcOptions,
) -> GcReport {
    let mut report = GcReport::default();
    let (state, verdicts) = match read(paths, judge) {
        Ok(read) => read,
        Err(e) => {
            report.failures.push(e.to_string());
            return report;
        }
    };
    let out = &mut report.text;
    for u in &state.unreadable {
        let _ = writeln!(out, "unreadable: {u}");
    }
    let mut targets = Vec::new();
    let mut kept_by_disable_gc: BTreeMap<&str, usize> = BTreeMap::new();
    for row in state.rows.iter().filter(|r| in_scope(r, opts)) {
        let l = verdicts[&row.key];
        if gc_disabled(&state, row) {
            // Spec 1.1: a runtime must not collect such a network, whose
            // state another runtime may share; not even what looks dead.
            let n = kept_by_disable_gc.entry(&row.key.network).or_default();
            *n += usize::from(matches!(l, Liveness::Stale | Liveness::Untied));
            continue;
        }
        match l {
            Liveness::Stale => {
                let why = match &row.cached {
                    Some(c) if c.namespace.is_gone() => c.namespace.why_not_live(),
                    _ => "the CRI runtime lists no such sandbox".to_string(),
                };
                let _ = writeln!(out, "stale   {} ({why})", describe(row));
            }
            Liveness::Untied => {
                let kept = if !owner_known(row) {
                    ": its owner is not known, kept"
                } else if opts.untied {
                    ""
                } else {
                    ": kept; --untied removes it"
                };
                let _ = writeln!(
                    out,
                    "untied  {} (no cache, no sandbox{kept})",
                    describe(row)
                );
            }
            Liveness::Unknown => {
                let why = row
                    .cached
                    .as_ref()
                    .map(|c| c.namespace.why_not_live())
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "unknown {} ({why}, and no CRI runtime was asked: \
                     kept; --cri-socket names the runtime that can tell)",
                    describe(row)
                );
            }
            _ => continue,
        }
        for p in present(row) {
            let verb = match (opts.apply, is_target(l, row, opts)) {
                (_, false) => "holds",
                (false, true) => "would remove",
                (true, true) => "removing",
            };
            let _ = writeln!(out, "  {verb} {} {}", p.kind.as_str(), p.location);
        }
        if is_target(l, row, opts) {
            targets.push(row.key.clone());
        }
    }
    for (network, dead) in &kept_by_disable_gc {
        let _ = writeln!(
            out,
            "skipped network {network:?}: it sets disableGC: true (its state may be shared \
             with another runtime); {dead} dead attachment(s) kept"
        );
    }
    report.found = targets.len();
    report.seen = state.rows.iter().filter(|r| in_scope(r, opts)).count();
    if opts.apply && !targets.is_empty() {
        let mut held: BTreeMap<Kind, usize> = BTreeMap::new();
        for row in state.rows.iter().filter(|r| targets.contains(&r.key)) {
            for p in present(row) {
                *held.entry(p.kind).or_default() += 1;
            }
        }
        match apply(paths, judge, &state, &targets, &mut report) {
            Ok(left) => {
                for (kind, n) in held {
                    let gone = n.saturating_sub(left.get(&kind).copied().unwrap_or(0));
                    if gone > 0 {
                        report.collected.insert(kind.as_str(), gone);
                    }
                }
            }
            Err(e) => report.failures.push(e.to_string()),
        }
    }
    report
}

/// `--apply`'s three steps on `targets`, found in `state`: the pieces of
/// the targets left on the node after them, by kind. An error is a read
/// of the node (the CRI runtime) that failed between steps.
fn apply(
    paths: &NodePaths,
    judge: &dyn Fn() -> crate::error::Result<Judge>,
    state: &NodeState,
    targets: &[AttachmentKey],
    report: &mut GcReport,
) -> Result<BTreeMap<Kind, usize>> {
    let runner = CniConfig::new(paths.bin_path.clone(), &paths.cache_dir);

    // 1. DEL through the chain.
    for row in state.rows.iter().filter(|r| targets.contains(&r.key)) {
        let Some(cached) = &row.cached else { continue };
        let Some(net) = state.network(&row.key.network) else {
            report.failures.push(format!(
                "{}: no config of network {:?} in the conf dir or the cache",
                describe(row),
                row.key.network
            ));
            continue;
        };
        let e = &cached.entry;
        let rt = RuntimeConf {
            container_id: e.container_id.clone(),
            netns: e.netns.clone(),
            ifname: e.ifname.clone(),
            args: e.cni_args.clone(),
            capability_args: e.capability_args.clone(),
        };
        let done = runner.del_network_list(&net.list, &rt);
        note_del(report, &describe(row), done);
    }

    // 2. DEL by identity of what step 1 left of the dead: an untied
    //    attachment, a DEL that failed. Not the GC verb: a plugin's GC
    //    removes whatever its list does not name, and an ADD that started
    //    after the node was read is in no list (nothing serializes ADD
    //    with us, as a runtime would); a DEL touches only its attachment.
    let (state, verdicts) = read(paths, judge)?;
    for row in state.rows.iter().filter(|r| targets.contains(&r.key)) {
        if verdicts[&row.key].is_live() || present(row).next().is_none() {
            continue;
        }
        let (Some(net), false) = (
            state.network(&row.key.network),
            row.key.container_id.is_empty(),
        ) else {
            continue;
        };
        let list = del_list(&net.list, row);
        let rt = RuntimeConf {
            container_id: row.key.container_id.clone(),
            netns: String::new(),
            // State naming only the container (a portmap ledger, a
            // pre-0.7 lease) is found by the container ID alone.
            ifname: if row.key.ifname.is_empty() {
                "eth0".into()
            } else {
                row.key.ifname.clone()
            },
            ..RuntimeConf::default()
        };
        let done = runner.del_network_list(&list, &rt);
        note_del(report, &format!("{} (no cache)", describe(row)), done);
    }

    // 3. What no plugin claimed.
    let (state, verdicts) = read(paths, judge)?;
    let mut left: BTreeMap<Kind, usize> = BTreeMap::new();
    for row in state.rows.iter().filter(|r| targets.contains(&r.key)) {
        if verdicts[&row.key].is_live() {
            // Taken again meanwhile.
            for p in present(row) {
                *left.entry(p.kind).or_default() += 1;
            }
            continue;
        }
        for p in present(row) {
            if let Err(why) = remove_piece(paths, &state, row, p) {
                *left.entry(p.kind).or_default() += 1;
                report.failures.push(format!(
                    "{}: {} {}: {why}",
                    describe(row),
                    p.kind.as_str(),
                    p.location
                ));
            } else {
                let _ = writeln!(report.text, "removed {} {}", p.kind.as_str(), p.location);
            }
        }
    }
    Ok(left)
}

/// The node read, and each row judged (the CRI runtime asked again).
fn read(
    paths: &NodePaths,
    judge: &dyn Fn() -> crate::error::Result<Judge>,
) -> Result<(NodeState, Verdicts)> {
    let judged = judge()?;
    let state = collect::collect(paths);
    let verdicts = judged.judge(&state.rows);
    Ok((state, verdicts))
}

/// A DEL's outcome in the report: a failed one leaves pieces, which step
/// 3 reports as not removed.
fn note_del(report: &mut GcReport, what: &str, done: libcni::Result<()>) {
    let _ = match done {
        Ok(()) => writeln!(report.text, "DEL {what}: done"),
        Err(err) => writeln!(report.text, "DEL {what}: {err}"),
    };
}

/// The chain to DEL a dead attachment through: the network's, except
/// that flannel, whose DEL only replays the delegate config it saved at
/// ADD, is replaced by that config rendered again from subnet.env when the
/// saved one is gone (what the Go flannel leaves when its delegate's DEL
/// failed: it deletes the file anyway). DEL of what is already gone
/// succeeds, so a rendering that changed since (a new subnet) is harmless.
fn del_list(list: &NetworkConfigList, row: &Row) -> NetworkConfigList {
    if has(row, Kind::FlannelConfig) {
        return list.clone();
    }
    let mut out = list.clone();
    for plugin in &mut out.plugins {
        if crate::node::key(plugin, "type").and_then(|t| t.as_str()) != Some("flannel") {
            continue;
        }
        let mut stdin = plugin.clone();
        stdin.insert("name".into(), list.name.clone().into());
        stdin.insert("cniVersion".into(), list.cni_version.as_str().into());
        let bytes = serde_json::to_vec(&stdin).unwrap_or_default();
        let Ok(conf) = flannel_meta::config::FlannelConf::parse(&bytes) else {
            continue;
        };
        if let Ok(env) = flannel_meta::subnet_env::SubnetEnv::load(&conf.subnet_file) {
            *plugin = flannel_meta::delegate_conf::render(&conf, &env);
        }
    }
    out
}

/// Removes one piece nothing claimed, if it is of a kind removed by file.
fn remove_piece(paths: &NodePaths, state: &NodeState, row: &Row, p: &Piece) -> Result<()> {
    match p.kind {
        Kind::Cache => {
            let k = &row.key;
            let key = CacheKey::new(&k.network, &k.container_id, &k.ifname)?;
            Ok(ResultCache::new(&paths.cache_dir).remove(&key)?)
        }
        Kind::Lease => remove_lease(&p.location),
        Kind::FlannelConfig | Kind::TuningBackup => remove_file(&p.location),
        // A record without its rules names nothing left to remove; with
        // them, it is what a DEL needs to find them: kept.
        Kind::FirewallRecord if !has(row, Kind::FirewallRules) => remove_file(&p.location),
        // The daemon holds the lease (and renews it): only its release
        // ends it, and the daemon takes up at start every file it finds.
        Kind::DhcpLease => Err(Error::LeftAlone(
            "the dhcp daemon's: a DEL through it releases it (is the daemon running?)",
        )),
        _ => {
            let why = if state.network(&row.key.network).is_some() {
                "still there after its DEL"
            } else {
                "no config of its network to DEL it with"
            };
            Err(Error::LeftAlone(why))
        }
    }
}

fn has(row: &Row, kind: Kind) -> bool {
    row.pieces.iter().any(|p| p.kind == kind && p.present)
}

fn remove_file(path: &str) -> Result<()> {
    let path = std::path::Path::new(path);
    libcni::files::remove_if_present(path).map_err(|source| Error::File {
        path: path.to_path_buf(),
        source,
    })
}

/// Releases a lease under host-local's lock, with its index links.
fn remove_lease(location: &str) -> Result<()> {
    use host_local::store::Store;
    let path = std::path::Path::new(location);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(Error::LeftAlone("not a lease path"));
    };
    let loc = host_local::config::Location {
        data_dir: dir.parent().unwrap_or(dir).to_path_buf(),
        network: dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string(),
    };
    let Some(store) = Store::open_locked(&loc)? else {
        return Ok(());
    };
    let scan = store.scan(&|_, _| false)?;
    match scan.leases.iter().find(|l| l.name == name) {
        Some(l) => Ok(store.release(name, &l.links).map(|_| ())?),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(network: &str, cid: &str) -> Row {
        Row::new(AttachmentKey {
            network: network.into(),
            container_id: cid.into(),
            ifname: "eth0".into(),
        })
    }

    #[test]
    fn only_the_proven_dead_and_asked_for_untied_are_targets() {
        let plain = GcOptions::default();
        let untied = GcOptions {
            untied: true,
            ..GcOptions::default()
        };
        #[rustfmt::skip]
        let cases = [
            ("stale", Liveness::Stale, row("n", "c"), &plain, true),
            ("stale, with --untied", Liveness::Stale, row("n", "c"), &untied, true),
            ("untied, not asked for", Liveness::Untied, row("n", "c"), &plain, false),
            ("untied, asked for", Liveness::Untied, row("n", "c"), &untied, true),
            ("untied, no owner", Liveness::Untied, row("", ""), &untied, false),
            ("untied, no container", Liveness::Untied, row("n", ""), &untied, false),
            ("unknown, even with --untied", Liveness::Unknown, row("n", "c"), &untied, false),
            ("netns", Liveness::Netns, row("n", "c"), &untied, false),
            ("sandbox", Liveness::Sandbox, row("n", "c"), &untied, false),
            ("young", Liveness::Young, row("n", "c"), &untied, false),
            ("sibling", Liveness::Sibling, row("n", "c"), &untied, false),
        ];
        for (what, l, r, opts, want) in cases {
            assert_eq!(is_target(l, &r, opts), want, "{what}");
        }
    }
}
