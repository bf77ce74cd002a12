//! Address pools and attachments, from one read of the node (what `gc`
//! reads) judged by `gc`'s liveness rules: per network and host-local
//! range, the addresses of the range, those never handed out (its
//! gateway), those leased, and those leased by no live attachment; and
//! per network, the attachments by state.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use host_local::config::IpamConfig;
use serde_json::{json, Map, Value};

use crate::collect::{Kind, NodeState};
use crate::error::Result;
use crate::liveness::{Liveness, Verdicts};
use crate::node::{key, Network};

/// One host-local range of a network, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pool {
    /// `start..=end` (the gateway included).
    pub addresses: u128,
    /// Never handed out: the gateway, when inside the range.
    pub reserved: u128,
    /// Leased.
    pub used: u64,
    /// Leased by no live attachment (stale or untied, as `gc` says).
    pub leaked: u64,
}

/// Attachments by state: `live`, `leaked` (stale or untied) and `unknown`.
pub type States = BTreeMap<&'static str, u64>;

/// What one read of the node gives the metrics.
#[derive(Debug, Default)]
pub struct Counted {
    /// (network, range) → pool; the range as host-local names it
    /// (`10.85.0.2-10.85.0.254`).
    pub pools: BTreeMap<(String, String), Pool>,
    pub attachments: BTreeMap<String, States>,
    /// What could not be read (a network's IPAM config, a lease, a piece
    /// of the node): each a line of why.
    pub unreadable: Vec<String>,
}

/// The state label of a liveness (a live attachment's siblings, young
/// ones and those in a listed sandbox are live).
pub fn state_of(l: Liveness) -> &'static str {
    match l {
        Liveness::Stale | Liveness::Untied => "leaked",
        Liveness::Unknown => "unknown",
        _ => "live",
    }
}

/// Counts `state`, judged by `verdicts`.
pub fn count(state: &NodeState, verdicts: &Verdicts) -> Counted {
    let mut out = Counted {
        unreadable: state.unreadable.clone(),
        ..Counted::default()
    };
    // Which lease file is held how: its row's liveness.
    let mut leases: BTreeMap<PathBuf, Liveness> = BTreeMap::new();
    for row in &state.rows {
        let l = verdicts.get(&row.key).copied().unwrap_or(Liveness::Unknown);
        if !row.key.network.is_empty() {
            let states = out.attachments.entry(row.key.network.clone()).or_default();
            *states.entry(state_of(l)).or_default() += 1;
        }
        for p in row
            .pieces
            .iter()
            .filter(|p| p.present && p.kind == Kind::Lease)
        {
            leases.insert(PathBuf::from(&p.location), l);
        }
    }
    for net in &state.configured.networks {
        match ipam_configs(net) {
            Ok(confs) => {
                for conf in confs {
                    // Where the node reader looks (the cache dir moves
                    // the default data dir), else where host-local would.
                    let dir = net.lease_dir.clone().unwrap_or_else(|| conf.location.dir());
                    count_pools(net.name(), &conf, &dir, &leases, &mut out.pools);
                }
            }
            Err(why) => out
                .unreadable
                .push(format!("network {:?}: its IPAM config: {why}", net.name())),
        }
    }
    out
}

fn count_pools(
    network: &str,
    conf: &IpamConfig,
    dir: &Path,
    leases: &BTreeMap<PathBuf, Liveness>,
    pools: &mut BTreeMap<(String, String), Pool>,
) {
    let held: Vec<(IpAddr, Liveness)> = leases
        .iter()
        .filter(|(path, _)| path.parent() == Some(dir))
        .filter_map(|(path, l)| Some((lease_address(path)?, *l)))
        .collect();
    for set in &conf.sets {
        for range in set.set.ranges() {
            let pool = pools
                .entry((network.to_string(), range.to_string()))
                .or_default();
            pool.addresses = range.addresses();
            pool.reserved = u128::from(range.holds_gateway());
            for (addr, l) in held.iter().filter(|(a, _)| range.contains(*a)) {
                if *addr == range.gateway() {
                    continue;
                }
                pool.used += 1;
                pool.leaked += u64::from(state_of(*l) == "leaked");
            }
        }
    }
}

/// The address a lease file is named after.
fn lease_address(path: &Path) -> Option<IpAddr> {
    path.file_name()?.to_str()?.parse().ok()
}

/// host-local's config in each plugin of `net` that takes addresses from
/// it: an `ipam` of type host-local, or flannel's delegate as flannel
/// renders it from its subnet.env.
fn ipam_configs(net: &Network) -> Result<Vec<IpamConfig>> {
    let mut out = Vec::new();
    for plugin in &net.list.plugins {
        let ty = key(plugin, "type").and_then(Value::as_str).unwrap_or("");
        let ipam = if ty == "flannel" {
            flannel_ipam(net, plugin)?
        } else {
            key(plugin, "ipam").and_then(Value::as_object).cloned()
        };
        let Some(ipam) = ipam else { continue };
        if key(&ipam, "type").and_then(Value::as_str) != Some("host-local") {
            continue;
        }
        let conf = json!({"name": net.name(), "cniVersion": "1.1.0", "ipam": ipam});
        let conf = IpamConfig::from_network_plugin(conf.to_string().as_bytes())?;
        out.push(conf);
    }
    Ok(out)
}

/// The `ipam` flannel hands its delegate, rendered from subnet.env.
fn flannel_ipam(net: &Network, plugin: &Map<String, Value>) -> Result<Option<Map<String, Value>>> {
    let mut stdin = plugin.clone();
    stdin.insert("name".into(), json!(net.name()));
    let bytes = Value::Object(stdin).to_string();
    let conf = flannel_meta::config::FlannelConf::parse(bytes.as_bytes())?;
    let env = flannel_meta::subnet_env::SubnetEnv::load(&conf.subnet_file)?;
    let delegate = flannel_meta::delegate_conf::render(&conf, &env);
    Ok(key(&delegate, "ipam").and_then(Value::as_object).cloned())
}
