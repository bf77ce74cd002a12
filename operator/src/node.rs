//! Where a node keeps its CNI configuration and state, as the runtimes and
//! the plugins find them, and the networks configured there.

use cnitool::conf::{self, NetworkConfigList};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The runtimes' defaults.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";
pub const DEFAULT_BIN_DIR: &str = "/opt/cni/bin";
/// Go libcni's cache dir; the plugins' own default data dirs are under it.
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";
/// Where the plugins' default data dirs live on a node; with another
/// `--cache-dir` they are looked for under that one instead (so one flag
/// moves the whole of a test node's state).
const DEFAULT_STATE_ROOT: &str = "/var/lib/cni/";

/// The directories a command reads, each overridable.
#[derive(Debug, Clone)]
pub struct NodePaths {
    pub conf_dir: PathBuf,
    /// `CNI_PATH`: where the plugins are, searched in order.
    pub bin_path: Vec<PathBuf>,
    pub cache_dir: PathBuf,
    /// The dhcp daemon's `-leasedir`, if not its default.
    pub dhcp_lease_dir: Option<PathBuf>,
}

impl NodePaths {
    /// A plugin's default data dir (`/var/lib/cni/networks`), moved under
    /// the cache dir when that is not the default one.
    pub fn state_dir(&self, plugin_default: &str) -> PathBuf {
        match plugin_default.strip_prefix(DEFAULT_STATE_ROOT) {
            Some(rest) => self.cache_dir.join(rest),
            None => PathBuf::from(plugin_default),
        }
    }

    /// A data dir a config names, or the plugin's default.
    fn data_dir(&self, configured: Option<&str>, plugin_default: &str) -> PathBuf {
        match configured {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => self.state_dir(plugin_default),
        }
    }
}

/// A network configured in the conf dir, with what the state readers need
/// to know of its plugins.
#[derive(Debug, Clone)]
pub struct Network {
    pub list: NetworkConfigList,
    pub file: PathBuf,
    /// host-local's lease directory (`<dataDir>/<network>`), when a plugin
    /// (or flannel's delegate) takes addresses from host-local.
    pub lease_dir: Option<PathBuf>,
    /// flannel's `dataDir`, when the chain has flannel.
    pub flannel_dir: Option<PathBuf>,
    /// tuning's `dataDir`, when the chain has tuning.
    pub tuning_dir: Option<PathBuf>,
    /// The bridge the pods' host veths are ports of (the bridge plugin's,
    /// or flannel's delegate's).
    pub bridge: Option<String>,
    /// The dhcp daemon's lease directory, when a plugin takes addresses
    /// from dhcp.
    pub dhcp_lease_dir: Option<PathBuf>,
    /// The firewall plugin's owner records (`dataDir`), when the chain has
    /// firewall.
    pub firewall_dir: Option<PathBuf>,
    /// Whether its backend puts accept rules in `CNI-FORWARD` (iptables,
    /// nftables: not firewalld).
    pub firewall_rules: bool,
    /// bridge's `macspoofchk`.
    pub has_spoofcheck: bool,
    pub has_bandwidth: bool,
    pub has_portmap: bool,
    /// A plugin with `ipMasq: true` (bridge, ptp).
    pub has_masq: bool,
}

impl Network {
    pub fn name(&self) -> &str {
        &self.list.name
    }

    pub fn from_list(list: NetworkConfigList, file: PathBuf, paths: &NodePaths) -> Network {
        let mut net = Network {
            lease_dir: None,
            flannel_dir: None,
            tuning_dir: None,
            bridge: None,
            dhcp_lease_dir: None,
            firewall_dir: None,
            firewall_rules: false,
            has_spoofcheck: false,
            has_bandwidth: false,
            has_portmap: false,
            has_masq: false,
            list,
            file,
        };
        for plugin in &net.list.plugins {
            let ty = key(plugin, "type").and_then(Value::as_str).unwrap_or("");
            let ipam = key(plugin, "ipam").and_then(Value::as_object);
            let ipam_type = ipam.and_then(|i| key(i, "type")).and_then(Value::as_str);
            if ipam_type == Some("host-local") || ty == "flannel" {
                let dir = ipam.and_then(|i| key(i, "dataDir")).and_then(Value::as_str);
                let dir = paths.data_dir(dir, host_local::config::DEFAULT_DATA_DIR);
                net.lease_dir = Some(dir.join(&net.list.name));
            }
            if ipam_type == Some("dhcp") {
                // The daemon's `-leasedir`, as it runs by default.
                let default = || paths.state_dir(dhcp::daemon::flags::DEFAULT_LEASE_DIR);
                net.dhcp_lease_dir = Some(paths.dhcp_lease_dir.clone().unwrap_or_else(default));
            }
            let data_dir = key(plugin, "dataDir").and_then(Value::as_str);
            match ty {
                "flannel" => {
                    net.flannel_dir =
                        Some(paths.data_dir(data_dir, flannel_meta::config::DEFAULT_DATA_DIR));
                    // Its delegate is a bridge unless it names another type.
                    let delegate = key(plugin, "delegate").and_then(Value::as_object);
                    let of = |k| delegate.and_then(|d| key(d, k)).and_then(Value::as_str);
                    if of("type").is_none_or(|t| t == "bridge") {
                        let name = of("bridge").unwrap_or(bridge::config::DEFAULT_BRIDGE);
                        net.bridge = Some(name.to_string());
                    }
                }
                "tuning" => {
                    net.tuning_dir =
                        Some(paths.data_dir(data_dir, tuning::config::DEFAULT_DATA_DIR))
                }
                "bridge" => {
                    let name = key(plugin, "bridge").and_then(Value::as_str);
                    net.bridge = Some(name.unwrap_or(bridge::config::DEFAULT_BRIDGE).to_string());
                    net.has_spoofcheck |=
                        key(plugin, "macspoofchk").and_then(Value::as_bool) == Some(true);
                }
                "firewall" => {
                    net.firewall_dir =
                        Some(paths.data_dir(data_dir, firewall::rules::records::DEFAULT_DIR));
                    // firewalld keeps the addresses in a zone, not in rules.
                    net.firewall_rules =
                        key(plugin, "backend").and_then(Value::as_str) != Some("firewalld");
                }
                "bandwidth" => net.has_bandwidth = true,
                "portmap" => net.has_portmap = true,
                _ => {}
            }
            // flannel's delegate masquerades when flannel's ipMasq says so.
            if key(plugin, "ipMasq").and_then(Value::as_bool) == Some(true) {
                net.has_masq = true;
            }
        }
        net
    }
}

/// A key as Go's decoder finds it: the exact name, else the first that
/// folds to it.
pub fn key<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

/// What loading the conf dir found: the networks in the runtimes' order
/// (`.conflist` files sorted, then `.conf` and `.json`; the first of a
/// name wins), and each file that does not load, with why.
#[derive(Debug, Default)]
pub struct Configured {
    pub networks: Vec<Network>,
    pub broken: Vec<(PathBuf, String)>,
    /// Files whose network name an earlier file already took.
    pub shadowed: Vec<(PathBuf, String)>,
}

impl Configured {
    pub fn get(&self, name: &str) -> Option<&Network> {
        self.networks.iter().find(|n| n.name() == name)
    }
}

pub fn load_networks(paths: &NodePaths) -> Configured {
    let mut found = Configured::default();
    let mut load = |exts: &[&str], single: bool| {
        let files = match conf::conf_files(&paths.conf_dir, exts) {
            Ok(f) => f,
            Err(e) => {
                found.broken.push((paths.conf_dir.clone(), e.to_string()));
                return;
            }
        };
        for file in files {
            let list = if single {
                std::fs::read(&file)
                    .map_err(|e| e.to_string())
                    .and_then(|b| conf::conf_from_single_bytes(&b).map_err(|e| e.to_string()))
            } else {
                conf::conf_list_from_file(&file).map_err(|e| e.to_string())
            };
            match list {
                Ok(list) if found.get(&list.name).is_some() => {
                    found.shadowed.push((file, list.name))
                }
                Ok(list) => found.networks.push(Network::from_list(list, file, paths)),
                Err(why) => found.broken.push((file, why)),
            }
        }
    };
    load(&[".conflist"], false);
    load(&[".conf", ".json"], true);
    found
}

/// The directories directly under `dir` (host-local's per-network lease
/// directories), sorted; none when it does not exist.
pub fn subdirs(dir: &Path) -> Vec<String> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<String> = read
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    out.sort();
    out
}
