//! One pass over the node: every piece of CNI state, ours and the Go
//! plugins' (the formats are the same), grouped by the attachment it
//! belongs to. A cached attachment says what it should have (its result's
//! addresses and host interfaces, its network's plugins); the other pieces
//! are found where each plugin keeps them and read by that plugin's code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::SystemTime;

use cnitool::cache::{CacheEntry, ResultCache};
use cnitool::conf;
use libcni::netfilter::iptables::{self, IptTable, SavedTable};
use libcni::netfilter::nft::{Family, Nft};
use libcni::netfilter::spoofcheck;
use libcni::netfilter::{IptablesPath, Owner};
use libcni::netlink::tc::{Qdisc, INGRESS_PARENT, ROOT};
use libcni::netlink::{Link, Netlink};
use libcni::types::IpPrefix;
use libcni::IpFamily;
use serde_json::Value;
use std::net::IpAddr;

use crate::namespace::{self, Namespace};
use crate::node::{self, key, Configured, Network, NodePaths};

/// Who a piece belongs to. `ifname` is empty when the state names only the
/// container (a portmap ledger, a pre-0.7 lease), and `container_id` too
/// when it names nobody (an empty lease, the Go plugin's alias-less IFB).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttachmentKey {
    pub network: String,
    pub container_id: String,
    pub ifname: String,
}

/// The kinds of state, as `inspect --json` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The runtime's result cache file (ours and Go libcni's format).
    Cache,
    /// The attachment's network namespace (its bind mount).
    Netns,
    /// A host-local lease file.
    Lease,
    /// flannel's saved delegate config.
    FlannelConfig,
    /// A host-side interface of the result (a veth, the bridge).
    HostInterface,
    /// bandwidth's IFB.
    Ifb,
    /// portmap's rules (its ledger, or the iptables chain).
    PortMappings,
    /// The masquerade rules (their ledger, or the iptables chain).
    Masquerade,
    /// tuning's backup of what it changed.
    TuningBackup,
    /// The host veth as a port of the network's bridge.
    BridgePort,
    /// bandwidth's qdiscs: the TBF on the host veth (ingress shaping), the
    /// ingress qdisc on it and the TBF on the IFB (egress shaping).
    Qdisc,
    /// The dhcp daemon's lease file (ours: the Go daemon keeps its leases
    /// in memory only).
    DhcpLease,
    /// The firewall plugin's owner record of an address.
    FirewallRecord,
    /// The firewall plugin's accept rules of an address in `CNI-FORWARD`.
    FirewallRules,
    /// bridge's MAC spoof check (`macspoofchk`): its chains in `bridge nat`.
    SpoofCheck,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Cache => "cache",
            Kind::Netns => "netns",
            Kind::Lease => "lease",
            Kind::FlannelConfig => "flannelConfig",
            Kind::HostInterface => "hostInterface",
            Kind::Ifb => "ifb",
            Kind::PortMappings => "portMappings",
            Kind::Masquerade => "masquerade",
            Kind::TuningBackup => "tuningBackup",
            Kind::BridgePort => "bridgePort",
            Kind::Qdisc => "qdisc",
            Kind::DhcpLease => "dhcpLease",
            Kind::FirewallRecord => "firewallRecord",
            Kind::FirewallRules => "firewallRules",
            Kind::SpoofCheck => "spoofCheck",
        }
    }
}

/// One piece of state: where it is, and whether it is there (a cached
/// attachment's expected pieces may be missing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub kind: Kind,
    /// A path, or an interface or chain name.
    pub location: String,
    pub present: bool,
    /// When it was last written, for files.
    pub modified: Option<SystemTime>,
}

/// What the result cache holds of an attachment.
#[derive(Debug, Clone)]
pub struct Cached {
    pub entry: CacheEntry,
    pub path: PathBuf,
    pub modified: SystemTime,
    pub addresses: Vec<String>,
    /// The attachment's own host-side interface: the last host-side one
    /// of the result that is not bandwidth's IFB (the bridge comes first).
    pub host_interface: Option<String>,
    pub host_ports: Vec<Value>,
    pub shaping: Option<String>,
    /// The rates it is shaped with (bits/s), as configured.
    pub ingress_rate: Option<u64>,
    pub egress_rate: Option<u64>,
    /// The namespace it was added in, from its records, probed.
    pub namespace: Namespace,
}

/// Everything found of one attachment.
#[derive(Debug, Clone)]
pub struct Row {
    pub key: AttachmentKey,
    pub cached: Option<Cached>,
    pub pieces: Vec<Piece>,
}

impl Row {
    pub(crate) fn new(key: AttachmentKey) -> Row {
        Row {
            key,
            cached: None,
            pieces: Vec::new(),
        }
    }

    /// The netns path its records name (the cache's, else the result's).
    pub fn netns(&self) -> &str {
        self.cached.as_ref().map_or("", |c| c.namespace.path())
    }

    pub fn missing(&self) -> impl Iterator<Item = &Piece> {
        self.pieces.iter().filter(|p| !p.present)
    }

    /// The newest modification time of its files.
    pub fn newest(&self) -> Option<SystemTime> {
        self.pieces.iter().filter_map(|p| p.modified).max()
    }

    /// Marks the expected piece at `location` present, or adds it.
    fn found(&mut self, kind: Kind, location: String, modified: Option<SystemTime>) {
        // The expected piece at that place; else one of the kind expected
        // elsewhere (a ledger where the Go plugins' chain was looked for).
        let i = self
            .pieces
            .iter()
            .position(|p| p.kind == kind && p.location == location)
            .or_else(|| {
                self.pieces
                    .iter()
                    .position(|p| p.kind == kind && !p.present)
            });
        match i.map(|i| &mut self.pieces[i]) {
            Some(p) => {
                p.present = true;
                p.location = location;
                p.modified = modified;
            }
            None => self.pieces.push(Piece {
                kind,
                location,
                present: true,
                modified,
            }),
        }
    }

    fn expect(&mut self, kind: Kind, location: String, present: bool) {
        self.pieces.push(Piece {
            kind,
            location,
            present,
            modified: None,
        });
    }
}

/// The node's state: the configured networks and a row per attachment.
pub struct NodeState {
    pub configured: Configured,
    /// Every network known: the conf dir's, then those only a cache entry
    /// names (with the config it ran with).
    pub networks: BTreeMap<String, Network>,
    pub rows: Vec<Row>,
    /// What could not be read (a directory, the kernel), with why.
    pub unreadable: Vec<String>,
}

impl NodeState {
    /// The network config of `name`: the conf dir's, else the one its
    /// cached attachments ran with.
    pub fn network(&self, name: &str) -> Option<&Network> {
        self.networks.get(name)
    }
}

/// The network a cache entry ran with, from its cached config.
fn cached_network(c: &Cached, paths: &NodePaths) -> Option<Network> {
    let list = conf::conf_list_from_bytes(&c.entry.config).ok()?;
    (list.name == c.entry.network_name).then(|| Network::from_list(list, c.path.clone(), paths))
}

struct Collector {
    rows: BTreeMap<AttachmentKey, Row>,
    unreadable: Vec<String>,
}

impl Collector {
    fn row(&mut self, network: &str, container_id: &str, ifname: &str) -> &mut Row {
        let key = AttachmentKey {
            network: network.into(),
            container_id: container_id.into(),
            ifname: ifname.into(),
        };
        self.rows
            .entry(key.clone())
            .or_insert_with(|| Row::new(key))
    }

    /// State naming only the container: every row of that container on
    /// the network gets it, or a row with no interface.
    fn found_for_container(
        &mut self,
        network: &str,
        container_id: &str,
        kind: Kind,
        location: String,
        modified: Option<SystemTime>,
    ) {
        let mut any = false;
        for row in self.rows.values_mut() {
            if row.key.network == network && row.key.container_id == container_id {
                row.found(kind, location.clone(), modified);
                any = true;
            }
        }
        if !any {
            self.row(network, container_id, "")
                .found(kind, location, modified);
        }
    }
}

/// Reads the whole node: `paths` for the files, the calling thread's
/// network namespace for links and rules. Each step adds the pieces of one
/// kind of state to the rows; the result cache comes first, so the others
/// find the rows of the cached attachments.
pub fn collect(paths: &NodePaths) -> NodeState {
    let configured = node::load_networks(paths);
    let mut c = Collector {
        rows: BTreeMap::new(),
        unreadable: Vec::new(),
    };
    let kernel = read_kernel(&configured, &mut c.unreadable);
    let networks = c.cached_attachments(paths, &configured, &kernel);
    c.leases(paths, &networks);
    c.flannel_configs(paths, &networks);
    c.rule_ledgers(&networks);
    c.unledgered_rules(&kernel, &networks);
    // bandwidth's IFBs, ours by their alias, the Go plugin's by name; and
    // the node ends of bridge's and ptp's veths by their alias (a namespace
    // can outlive its runtime's record, and with it its veth).
    collect_ifbs(&mut c, kernel.links.values(), &networks);
    collect_host_veths(&mut c, kernel.links.values());
    c.tuning_backups(paths, &networks);
    c.dhcp_leases(&networks);
    c.firewall_records(&networks, &kernel);
    NodeState {
        configured,
        networks,
        rows: c.rows.into_values().collect(),
        unreadable: c.unreadable,
    }
}

impl Collector {
    /// The result cache: what each attachment should have. Returns every
    /// network known: the conf dir's, then those only a cache entry names
    /// (with the config it ran with).
    fn cached_attachments(
        &mut self,
        paths: &NodePaths,
        configured: &Configured,
        kernel: &Kernel,
    ) -> BTreeMap<String, Network> {
        let cache = ResultCache::new(&paths.cache_dir);
        let cached = cache.every_attachment().unwrap_or_else(|e| {
            self.unreadable.push(format!("result cache: {e}"));
            Vec::new()
        });
        let mut networks: BTreeMap<String, Network> = configured
            .networks
            .iter()
            .map(|n| (n.name().to_string(), n.clone()))
            .collect();
        for (entry, modified) in cached {
            let path = cache.results_dir().join(format!(
                "{}-{}-{}",
                entry.network_name, entry.container_id, entry.ifname
            ));
            let info = describe(entry, path.clone(), modified);
            if !networks.contains_key(&info.entry.network_name) {
                if let Some(n) = cached_network(&info, paths) {
                    networks.insert(n.name().to_string(), n);
                }
            }
            let net = networks.get(&info.entry.network_name).cloned();
            let e = &info.entry;
            let row = self.row(&e.network_name, &e.container_id, &e.ifname);
            row.found(Kind::Cache, path.display().to_string(), Some(modified));
            if !info.namespace.path().is_empty() {
                let live = info.namespace.is_live();
                row.expect(Kind::Netns, info.namespace.path().to_string(), live);
            }
            // Its own host interface only: the bridge is every pod's.
            if let Some(name) = &info.host_interface {
                let present = kernel.links.contains_key(name);
                row.expect(Kind::HostInterface, name.clone(), present);
            }
            if let Some(net) = &net {
                expect_plugin_state(row, net, &info, kernel);
            }
            row.cached = Some(info);
        }
        networks
    }

    /// host-local's leases: the known networks' directories, and every
    /// network directory under the default one (a network whose config
    /// went, the Go plugins' leftovers).
    fn leases(&mut self, paths: &NodePaths, networks: &BTreeMap<String, Network>) {
        let mut lease_dirs: BTreeMap<PathBuf, String> = networks
            .values()
            .filter_map(|n| Some((n.lease_dir.clone()?, n.name().to_string())))
            .collect();
        let default_leases = paths.state_dir(host_local::config::DEFAULT_DATA_DIR);
        for net in node::subdirs(&default_leases) {
            lease_dirs.entry(default_leases.join(&net)).or_insert(net);
        }
        for (dir, network) in &lease_dirs {
            collect_leases(self, dir, network);
        }
    }

    /// flannel's saved delegate configs.
    fn flannel_configs(&mut self, paths: &NodePaths, networks: &BTreeMap<String, Network>) {
        let mut dirs: BTreeSet<PathBuf> = networks
            .values()
            .filter_map(|n| n.flannel_dir.clone())
            .collect();
        dirs.insert(paths.state_dir(flannel_meta::config::DEFAULT_DATA_DIR));
        for dir in &dirs {
            collect_flannel(self, dir, networks);
        }
    }

    /// The rule ledgers of portmap and masquerading, per network.
    fn rule_ledgers(&mut self, networks: &BTreeMap<String, Network>) {
        for net in networks.keys() {
            for (cid, path) in portmap::node_state::recorded(net) {
                let m = mtime(&path);
                self.found_for_container(
                    net,
                    &cid,
                    Kind::PortMappings,
                    path.display().to_string(),
                    m,
                );
            }
            for (cid, ifname, path) in libcni::netfilter::masq::recorded(net) {
                let m = mtime(&path);
                let location = path.display().to_string();
                match ifname {
                    Some(i) => self.row(net, &cid, &i).found(Kind::Masquerade, location, m),
                    None => self.found_for_container(net, &cid, Kind::Masquerade, location, m),
                }
            }
        }
    }

    /// The rules no ledger of ours records, found by the attachment their
    /// comment or chain names: portmap's nf_tables rules as the Go v1.9
    /// plugin leaves them and bridge's spoof checks (when no row claimed
    /// them), and the nf_tables masquerade rules (the Go plugins' nftables
    /// backend keeps no ledger).
    fn unledgered_rules(&mut self, kernel: &Kernel, networks: &BTreeMap<String, Network>) {
        collect_unclaimed_port_mappings(self, kernel, networks);
        collect_unclaimed_spoof_checks(self, kernel, networks);
        for comment in &kernel.nft.masq_comments {
            if let Some((net, ifname, cid)) = libcni::netfilter::masq::parse_rule_comment(comment) {
                let location = format!(
                    "inet {} {} \"{comment}\"",
                    libcni::netfilter::masq::TABLE,
                    libcni::netfilter::masq::CHAIN
                );
                self.row(&net, &cid, &ifname)
                    .found(Kind::Masquerade, location, None);
            }
        }
    }

    /// tuning's backups: `<containerID>_<ifname>.json`, no network named.
    fn tuning_backups(&mut self, paths: &NodePaths, networks: &BTreeMap<String, Network>) {
        let mut dirs: BTreeSet<PathBuf> = networks
            .values()
            .filter_map(|n| n.tuning_dir.clone())
            .collect();
        dirs.insert(paths.state_dir(tuning::config::DEFAULT_DATA_DIR));
        for dir in &dirs {
            collect_tuning(self, dir, networks);
        }
    }

    /// The dhcp daemon's lease files.
    fn dhcp_leases(&mut self, networks: &BTreeMap<String, Network>) {
        let dirs: BTreeSet<PathBuf> = networks
            .values()
            .filter_map(|n| n.dhcp_lease_dir.clone())
            .collect();
        for dir in &dirs {
            collect_dhcp(self, dir);
        }
    }

    /// The firewall plugin's owner records, and its rules of each.
    fn firewall_records(&mut self, networks: &BTreeMap<String, Network>, kernel: &Kernel) {
        let dirs: BTreeSet<PathBuf> = networks
            .values()
            .filter_map(|n| n.firewall_dir.clone())
            .collect();
        for dir in &dirs {
            collect_firewall(self, dir, kernel);
        }
    }
}

/// What a cache entry says of its attachment.
fn describe(entry: CacheEntry, path: PathBuf, modified: SystemTime) -> Cached {
    let result = entry.result.clone().unwrap_or(Value::Null);
    let mut addresses = Vec::new();
    if let Some(ips) = result.get("ips").and_then(Value::as_array) {
        addresses.extend(
            ips.iter()
                .filter_map(|ip| ip.get("address")?.as_str().map(str::to_string)),
        );
    }
    // 0.1.0 and 0.2.0 results.
    for old in ["ip4", "ip6"] {
        if let Some(a) = result
            .get(old)
            .and_then(|v| v.get("ip"))
            .and_then(Value::as_str)
        {
            addresses.push(a.to_string());
        }
    }
    let host_interfaces: Vec<String> = result
        .get("interfaces")
        .and_then(Value::as_array)
        .map(|ifs| {
            ifs.iter()
                .filter(|i| {
                    i.get("sandbox")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .is_empty()
                })
                .filter_map(|i| i.get("name")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let host_interface = host_interfaces
        .iter()
        .rev()
        .find(|n| !bandwidth::shape::is_go_ifb_name(n))
        .cloned();
    let host_ports = key(&entry.capability_args, "portMappings")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (ingress_rate, egress_rate) = rates_of(&entry);
    let namespace = namespace::of(&entry, modified);
    let shaping = (ingress_rate.is_some() || egress_rate.is_some()).then(|| {
        let show = |r: Option<u64>| r.map_or("-".to_string(), |r| format!("{r}bit/s"));
        format!("in {} out {}", show(ingress_rate), show(egress_rate))
    });
    Cached {
        entry,
        path,
        modified,
        addresses,
        host_interface,
        host_ports,
        shaping,
        ingress_rate,
        egress_rate,
        namespace,
    }
}

/// The rates the attachment is shaped with (ingress, egress): the
/// runtime's `bandwidth` capability, else the bandwidth plugin's own keys.
fn rates_of(entry: &CacheEntry) -> (Option<u64>, Option<u64>) {
    let from_caps = key(&entry.capability_args, "bandwidth")
        .and_then(Value::as_object)
        .cloned();
    let from_conf = conf::conf_list_from_bytes(&entry.config)
        .ok()
        .and_then(|l| {
            l.plugins
                .into_iter()
                .find(|p| key(p, "type").and_then(Value::as_str) == Some("bandwidth"))
        });
    let Some(obj) = from_caps.or(from_conf) else {
        return (None, None);
    };
    let rate = |k: &str| key(&obj, k).and_then(Value::as_u64).filter(|r| *r > 0);
    (rate("ingressRate"), rate("egressRate"))
}

/// What the kernel holds, read once per pass: links, qdiscs, and the
/// rules of the plugins that keep per-container state in netfilter.
#[derive(Default)]
struct Kernel {
    links: BTreeMap<String, Link>,
    names: BTreeMap<u32, String>,
    qdiscs: BTreeMap<u32, Vec<Qdisc>>,
    nft: NftRules,
    /// The firewall's `CNI-FORWARD` rule lines, both families.
    forward_rules: BTreeSet<String>,
    /// The spoof checks' attachments, `<containerID>-<ifname>`.
    spoof_checks: BTreeSet<String>,
}

impl Kernel {
    /// The root qdisc of `link` when it is a TBF: its rate (bits/s).
    fn root_tbf_rate(&self, link: &str) -> Option<u64> {
        let index = self.links.get(link)?.index;
        let q = self.qdiscs.get(&index)?.iter().find(|q| q.parent == ROOT)?;
        Some(q.tbf.as_ref()?.rate * 8)
    }

    fn has_ingress_qdisc(&self, link: &str) -> bool {
        self.links
            .get(link)
            .and_then(|l| self.qdiscs.get(&l.index))
            .is_some_and(|qs| qs.iter().any(|q| q.parent == INGRESS_PARENT))
    }

    /// Whether the firewall's two accept rules of `addr` are there.
    fn firewall_accepts(&self, addr: IpAddr) -> bool {
        firewall::rules::ipt::accept_rules(addr)
            .iter()
            .all(|line| self.forward_rules.contains(line))
    }
}

/// The nf_tables side: the iptables-nft nat chains, and the rules that
/// name their owner in a comment.
#[derive(Default)]
struct NftRules {
    /// Both families' `nat` chains (`CNI-DN-*`, `CNI-*`: per container).
    nat_chains: BTreeSet<String>,
    /// portmap's: the container ID (cut to what `nft` keeps).
    portmap_owners: BTreeSet<String>,
    /// The masquerade rules': network, interface and container ID.
    masq_comments: Vec<String>,
}

/// The pieces a cached attachment's network makes it expect.
fn expect_plugin_state(row: &mut Row, net: &Network, info: &Cached, kernel: &Kernel) {
    let rules = &kernel.nft;
    let e = &info.entry;
    if let Some(dir) = &net.lease_dir {
        for a in &info.addresses {
            if let Some((ip, _)) = a.split_once('/') {
                // Marked present by the lease scan below, as found.
                row.expect(Kind::Lease, dir.join(ip).display().to_string(), false);
            }
        }
    }
    if let Some(dir) = &net.flannel_dir {
        let who = libcni::types::Attachment {
            container_id: e.container_id.clone(),
            ifname: e.ifname.clone(),
        };
        // Marked present by the scan of the saved configs below (either
        // name: Go's is the container ID alone).
        let path = dir.join(flannel_meta::store::attachment_name(&who));
        row.expect(Kind::FlannelConfig, path.display().to_string(), false);
    }
    if let (Some(bridge), Some(veth)) = (&net.bridge, &info.host_interface) {
        let master = kernel.links.get(veth).and_then(|l| l.master);
        let present = master.and_then(|m| kernel.names.get(&m)) == Some(bridge);
        row.expect(Kind::BridgePort, format!("{veth} on {bridge}"), present);
    }
    if net.has_bandwidth {
        expect_shaping(row, info, kernel);
    }
    if net.has_spoofcheck {
        let present = kernel
            .spoof_checks
            .contains(&spoofcheck::ref_id(&e.container_id, &e.ifname));
        row.expect(
            Kind::SpoofCheck,
            spoof_location(&e.container_id, &e.ifname),
            present,
        );
    }
    let owner = Owner::new(&e.network_name, &e.container_id);
    if net.has_portmap && !info.host_ports.is_empty() {
        let chain = portmap::ipt::dnat_chain(&owner);
        let in_ipt = rules.nat_chains.contains(&chain);
        let in_nft = rules
            .portmap_owners
            .contains(&portmap::nft::rule_comment(&owner));
        let location = if in_nft && !in_ipt {
            format!(
                "{} {}",
                portmap::nft::TABLE,
                portmap::nft::rule_comment(&owner)
            )
        } else {
            chain
        };
        row.expect(Kind::PortMappings, location, in_ipt || in_nft);
    }
    if net.has_masq {
        let chain = libcni::netfilter::masq::ipt_chain(&owner);
        let in_ipt = rules.nat_chains.contains(&chain);
        row.expect(Kind::Masquerade, chain, in_ipt);
    }
    if let Some(dir) = &net.dhcp_lease_dir {
        let key = dhcp::proto::Key {
            container_id: e.container_id.clone(),
            network: e.network_name.clone(),
            ifname: e.ifname.clone(),
        };
        // Marked present by the scan of the daemon's leases below.
        let path = dhcp::daemon::store::Store::at(dir).path_of(&key);
        row.expect(Kind::DhcpLease, path.display().to_string(), false);
    }
    if let Some(dir) = &net.firewall_dir {
        let addrs = info
            .addresses
            .iter()
            .filter_map(|a| a.parse::<IpPrefix>().ok());
        for addr in addrs.map(|p| p.addr()) {
            // Marked present by the scan of the records below.
            let path = dir.join(addr.to_string());
            row.expect(Kind::FirewallRecord, path.display().to_string(), false);
            if net.firewall_rules {
                let present = kernel.firewall_accepts(addr);
                row.expect(Kind::FirewallRules, forward_location(addr), present);
            }
        }
    }
}

fn spoof_location(container_id: &str, ifname: &str) -> String {
    let chain = spoofcheck::chain_of(container_id, ifname);
    format!("bridge {} {chain}", spoofcheck::TABLE)
}

fn forward_location(addr: IpAddr) -> String {
    format!("{} {addr}", firewall::rules::chains::FORWARD_CHAIN)
}

/// bandwidth's IFB and qdiscs: ingress shaping is a TBF at the host
/// veth's root; egress shaping an ingress qdisc on the veth redirecting to
/// the IFB, and a TBF at the IFB's root. A TBF found is shown with its
/// rate as the kernel has it.
fn expect_shaping(row: &mut Row, info: &Cached, kernel: &Kernel) {
    let e = &info.entry;
    let ifb = bandwidth::shape::ifb_name(&e.network_name, &e.container_id);
    let tbf = |row: &mut Row, link: &str| {
        let rate = kernel.root_tbf_rate(link);
        let location = match rate {
            Some(r) => format!("{link} root tbf {r}bit/s"),
            None => format!("{link} root tbf"),
        };
        row.expect(Kind::Qdisc, location, rate.is_some());
    };
    if info.egress_rate.is_some() {
        // Marked present by the scan of the IFBs below.
        row.expect(Kind::Ifb, ifb.clone(), false);
        if let Some(veth) = &info.host_interface {
            let present = kernel.has_ingress_qdisc(veth);
            row.expect(Kind::Qdisc, format!("{veth} ingress"), present);
        }
        tbf(row, &ifb);
    }
    if let (Some(_), Some(veth)) = (info.ingress_rate, &info.host_interface) {
        tbf(row, veth);
    }
}

/// Reads the kernel's side once: the node's links and qdiscs, the
/// iptables-nft nat chains (the Go plugins' per-container chains), the
/// nf_tables rules of portmap and masquerading, and the firewall's
/// `CNI-FORWARD` when a network has the firewall.
fn read_kernel(configured: &Configured, unreadable: &mut Vec<String>) -> Kernel {
    let mut kernel = Kernel::default();
    match Netlink::open().and_then(|mut h| Ok((h.links()?, h.qdiscs(0)?))) {
        Ok((links, qdiscs)) => {
            for q in qdiscs {
                kernel.qdiscs.entry(q.index).or_default().push(q);
            }
            for l in links {
                kernel.names.insert(l.index, l.name.clone());
                kernel.links.insert(l.name.clone(), l);
            }
        }
        Err(e) => unreadable.push(format!("links and qdiscs: {e}")),
    }
    // A table that is not there reads as empty; any other failure (no
    // CAP_NET_ADMIN, which nfnetlink asks even to read) is unreadable,
    // never taken for "no rules".
    let mut nft = match Nft::open() {
        Ok(n) => Some(n),
        Err(e) => {
            unreadable.push(format!("nf_tables: {e}"));
            None
        }
    };
    if let Some(n) = nft.as_mut() {
        let mut read =
            |what: &str, e: libcni::Error| unreadable.push(format!("nf_tables {what}: {e}"));
        for family in [Family::Ip, Family::Ip6] {
            match n.chain_names(family, "nat") {
                Ok(chains) => kernel.nft.nat_chains.extend(chains),
                Err(e) => read("nat chains", e),
            }
        }
        match portmap::node_state::nft_rule_owners(n) {
            Ok(owners) => kernel.nft.portmap_owners = owners,
            Err(e) => read("host port rules", e),
        }
        match libcni::netfilter::masq::nft_rule_comments(n) {
            Ok(comments) => kernel.nft.masq_comments = comments,
            Err(e) => read("masquerade rules", e),
        }
        match spoofcheck::attachments(n) {
            Ok(checks) => kernel.spoof_checks = checks.into_iter().collect(),
            Err(e) => read("spoof check chains", e),
        }
    }
    let legacy = IptablesPath::of_node() == IptablesPath::Programs;
    if legacy {
        // The Go plugins' per-container chains live in x_tables here.
        kernel
            .nft
            .nat_chains
            .extend(saved_tables(IptTable::Nat, unreadable).chains);
    }
    if configured.networks.iter().any(|n| n.firewall_rules) {
        kernel.forward_rules = forward_rules(nft.as_mut(), legacy, unreadable);
    }
    kernel
}

/// `iptables-save -t <table>` of both families, merged (on a legacy
/// x_tables node: an operator command may run a program).
fn saved_tables(table: IptTable, unreadable: &mut Vec<String>) -> SavedTable {
    let mut all = SavedTable::default();
    for fam in IpFamily::BOTH {
        match iptables::save(fam, table) {
            Ok(saved) => {
                all.chains.extend(saved.chains);
                all.rules.extend(saved.rules);
            }
            Err(e) => unreadable.push(format!("iptables {} table: {e}", table.as_str())),
        }
    }
    all
}

/// The firewall's `CNI-FORWARD` rules, both families: from nf_tables (the
/// plugin's nftables backend, and iptables-nft), and from `iptables-save`
/// where the node's iptables is legacy.
fn forward_rules(
    nft: Option<&mut Nft>,
    legacy: bool,
    unreadable: &mut Vec<String>,
) -> BTreeSet<String> {
    use firewall::rules::chains::FORWARD_CHAIN;
    let mut lines = BTreeSet::new();
    if let Some(n) = nft {
        for family in IpFamily::BOTH {
            // A family without the table has no such rules.
            match libcni::netfilter::iptables_nft::filter::read(n, family, &[FORWARD_CHAIN]) {
                Ok((saved, _)) => lines.extend(saved.rules_of(FORWARD_CHAIN).cloned()),
                Err(e) => unreadable.push(format!("nf_tables filter table: {e}")),
            }
        }
    }
    if legacy {
        let saved = saved_tables(IptTable::Filter, unreadable);
        lines.extend(saved.rules_of(FORWARD_CHAIN).cloned());
    }
    lines
}

fn mtime(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::symlink_metadata(path).ok()?.modified().ok()
}

fn collect_leases(c: &mut Collector, dir: &std::path::Path, network: &str) {
    use host_local::store::{Holder, Store};
    let loc = host_local::config::Location {
        data_dir: dir.parent().unwrap_or(dir).to_path_buf(),
        network: network.to_string(),
    };
    let store = match Store::open_unlocked(&loc) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            c.unreadable.push(e.to_string());
            return;
        }
    };
    let scan = match store.scan(&|_, _| true) {
        Ok(s) => s,
        Err(e) => {
            c.unreadable.push(e.to_string());
            return;
        }
    };
    for lease in scan.leases {
        let path = dir.join(&lease.name);
        let (location, m) = (path.display().to_string(), mtime(&path));
        match lease.holder {
            Some(Holder::Attachment(a)) => {
                c.row(network, &a.container_id, &a.ifname)
                    .found(Kind::Lease, location, m)
            }
            Some(Holder::LegacyId(id)) => {
                c.found_for_container(network, &id, Kind::Lease, location, m)
            }
            Some(Holder::Unknown) | None => c.row(network, "", "").found(Kind::Lease, location, m),
        }
    }
}

/// The network a saved flannel config is of: its `name` key.
fn collect_flannel(c: &mut Collector, dir: &std::path::Path, networks: &BTreeMap<String, Network>) {
    use flannel_meta::store::{Entry, Store};
    let store = Store::new(dir);
    let entries = match store.list() {
        Ok(e) => e,
        Err(e) => {
            c.unreadable.push(e.to_string());
            return;
        }
    };
    // Without a readable name, the flannel network using this directory.
    let dir_network = networks
        .values()
        .find(|n| n.flannel_dir.as_deref() == Some(dir))
        .map(|n| n.name().to_string())
        .unwrap_or_default();
    for entry in entries {
        let path = dir.join(entry.file_name());
        let network = store
            .read_entry(&entry)
            .ok()
            .flatten()
            .and_then(|b| libcni::gojson::parse_value(&b).ok())
            .and_then(|v| v.get("name")?.as_str().map(str::to_string))
            .unwrap_or_else(|| dir_network.clone());
        let (location, m) = (path.display().to_string(), mtime(&path));
        match entry {
            Entry::Attachment(a) => {
                c.row(&network, &a.container_id, &a.ifname)
                    .found(Kind::FlannelConfig, location, m)
            }
            Entry::Legacy(id) => {
                c.found_for_container(&network, &id, Kind::FlannelConfig, location, m)
            }
            Entry::StaleTemp(_) => c
                .row(&network, "", "")
                .found(Kind::FlannelConfig, location, m),
        }
    }
}

fn collect_ifbs<'a>(
    c: &mut Collector,
    links: impl Iterator<Item = &'a Link>,
    networks: &BTreeMap<String, Network>,
) {
    for link in links.filter(|l| l.kind.as_deref() == Some("ifb")) {
        let owner = link
            .alias
            .as_deref()
            .and_then(bandwidth::shape::parse_alias);
        // The network whose name hashes to the IFB's, for this container.
        let network_of = |cid: &str| {
            networks
                .keys()
                .find(|n| bandwidth::shape::ifb_name(n, cid) == link.name)
                .cloned()
        };
        if let Some((cid, ifname)) = owner {
            let net = network_of(cid).unwrap_or_default();
            c.row(&net, cid, ifname)
                .found(Kind::Ifb, link.name.clone(), None);
            continue;
        }
        if !bandwidth::shape::is_go_ifb_name(&link.name) {
            continue;
        }
        // The Go plugin's: tied to a cached attachment whose name it is.
        let tied = c.rows.values_mut().find(|r| {
            r.pieces
                .iter()
                .any(|p| p.kind == Kind::Ifb && p.location == link.name)
        });
        match tied {
            Some(row) => row.found(Kind::Ifb, link.name.clone(), None),
            None => c
                .row("", "", &link.name)
                .found(Kind::Ifb, link.name.clone(), None),
        }
    }
}

/// The node-side veths whose alias names their attachment
/// (`libcni::attach::veth::OwnerAlias`), joined to the row of that
/// attachment when other state made one (a lease no cache names: the pod a
/// runtime lost while its namespace stayed). A veth alone makes no row: it
/// has no age, and an ADD in flight makes it before its lease. The Go
/// plugins' veths carry no alias, and are found only as a cached result's
/// host interface.
fn collect_host_veths<'a>(c: &mut Collector, links: impl Iterator<Item = &'a Link>) {
    use libcni::attach::veth::OwnerAlias;
    for link in links.filter(|l| l.kind.as_deref() == Some("veth")) {
        let Some(o) = link.alias.as_deref().and_then(OwnerAlias::parse) else {
            continue;
        };
        let key = AttachmentKey {
            network: o.network,
            container_id: o.container_id,
            ifname: o.ifname,
        };
        if let Some(row) = c.rows.get_mut(&key) {
            row.found(Kind::HostInterface, link.name.clone(), None);
        }
    }
}

/// The one network `wanted` picks, or "" (state naming no network is
/// tied to the only network that could have made it).
fn sole_network(networks: &BTreeMap<String, Network>, wanted: impl Fn(&Network) -> bool) -> String {
    let mut picked = networks.values().filter(|n| wanted(n));
    match (picked.next(), picked.next()) {
        (Some(only), None) => only.name().to_string(),
        _ => String::new(),
    }
}

/// portmap's nf_tables rules no row claims (the Go v1.9 plugin's, of an
/// attachment no cache names): the comment is the container ID alone.
fn collect_unclaimed_port_mappings(
    c: &mut Collector,
    kernel: &Kernel,
    networks: &BTreeMap<String, Network>,
) {
    for owner in &kernel.nft.portmap_owners {
        let claimed = c.rows.values().any(|r| {
            r.key.container_id.starts_with(owner.as_str())
                && r.pieces
                    .iter()
                    .any(|p| p.kind == Kind::PortMappings && p.present)
        });
        if !claimed {
            // A comment `nft` cut short holds part of the ID: no DEL by it.
            let cut = owner.len() >= libcni::netfilter::nft::MAX_NFT_COMMENT_CHARS;
            let net = if cut {
                String::new()
            } else {
                sole_network(networks, |n| n.has_portmap)
            };
            let location = format!("{} {owner}", portmap::nft::TABLE);
            c.found_for_container(&net, owner, Kind::PortMappings, location, None);
        }
    }
}

/// The spoof checks no cached row expected: the row whose container ID
/// and interface make the chain's name, else one of their own (split at
/// the last dash: interface names seldom have one).
fn collect_unclaimed_spoof_checks(
    c: &mut Collector,
    kernel: &Kernel,
    networks: &BTreeMap<String, Network>,
) {
    for r in &kernel.spoof_checks {
        let expected = |row: &Row| {
            row.pieces.iter().any(|p| p.kind == Kind::SpoofCheck)
                && spoofcheck::ref_id(&row.key.container_id, &row.key.ifname) == *r
        };
        if c.rows.values().any(expected) {
            continue;
        }
        let Some((cid, ifname)) = r.rsplit_once('-') else {
            continue;
        };
        let net = sole_network(networks, |n| n.has_spoofcheck);
        c.row(&net, cid, ifname)
            .found(Kind::SpoofCheck, spoof_location(cid, ifname), None);
    }
}

fn collect_dhcp(c: &mut Collector, dir: &std::path::Path) {
    if !dir.exists() {
        return;
    }
    let store = dhcp::daemon::store::Store::at(dir);
    match store.load() {
        Ok((held, bad)) => {
            c.unreadable.extend(bad);
            for h in held {
                let k = &h.record.key;
                let path = store.path_of(k);
                let (location, m) = (path.display().to_string(), mtime(&path));
                c.row(&k.network, &k.container_id, &k.ifname)
                    .found(Kind::DhcpLease, location, m);
            }
        }
        Err(e) => c.unreadable.push(format!("{}: {e}", dir.display())),
    }
}

/// Each record names its address's owner; the address's accept rules go
/// to the same row.
fn collect_firewall(c: &mut Collector, dir: &std::path::Path, kernel: &Kernel) {
    let records = match firewall::rules::records::Records::new(dir).all() {
        Ok(r) => r,
        Err(e) => {
            c.unreadable.push(e.to_string());
            return;
        }
    };
    for (addr, rec) in records {
        let path = dir.join(addr.to_string());
        let (location, m) = (path.display().to_string(), mtime(&path));
        let row = c.row(&rec.network, &rec.container_id, &rec.ifname);
        row.found(Kind::FirewallRecord, location, m);
        if rec.backend != "firewalld" && kernel.firewall_accepts(addr) {
            row.found(Kind::FirewallRules, forward_location(addr), None);
        }
    }
}

fn collect_tuning(c: &mut Collector, dir: &std::path::Path, networks: &BTreeMap<String, Network>) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let tuning_networks: Vec<&str> = networks
        .values()
        .filter(|n| n.tuning_dir.as_deref() == Some(dir))
        .map(|n| n.name())
        .collect();
    for entry in read.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Some((cid, ifname)) = name.strip_suffix(".json").and_then(|s| s.rsplit_once('_'))
        else {
            continue;
        };
        let path = entry.path();
        let (location, m) = (path.display().to_string(), mtime(&path));
        let mut tied = false;
        for row in c.rows.values_mut() {
            if row.key.container_id == cid
                && row.key.ifname == ifname
                && tuning_networks.contains(&row.key.network.as_str())
            {
                row.found(Kind::TuningBackup, location.clone(), m);
                tied = true;
            }
        }
        if !tied {
            let net = sole_network(networks, |n| n.tuning_dir.as_deref() == Some(dir));
            c.row(&net, cid, ifname)
                .found(Kind::TuningBackup, location, m);
        }
    }
}
