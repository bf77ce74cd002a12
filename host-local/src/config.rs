//! The host-local config: parsed from stdin (and `CNI_ARGS`) into typed,
//! validated values. Every rejection is code 7 naming the key and the value
//! (code 4 for `CNI_ARGS`).
//!
//! Keys: `ipam.ranges` (range sets), the legacy top-level `ipam.subnet`,
//! `rangeStart`, `rangeEnd`, `gateway` (put in front as the first set),
//! `ipam.routes`, `ipam.dataDir`, `ipam.resolvConf`; requested addresses
//! from `CNI_ARGS` `IP=`, `args.cni.ips` and `runtimeConfig.ips`; extra
//! range sets from `runtimeConfig.ipRanges` (put in front of all others).

use crate::range::{Range, RangeError, RangeSet};
use libcni::args::CniArgs;
use libcni::skel::CmdArgs;
use libcni::types::{route_conf, IpPrefix, Route};
use libcni::{Error, Version};
use serde::Deserialize;
use serde_json::Value;
use std::net::IpAddr;
use std::path::PathBuf;

/// `dataDir` when the config has none, as in the reference plugin.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// Where a network's leases live: `<dataDir>/<network name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub data_dir: PathBuf,
    pub network: String,
}

impl Location {
    /// The network's lease directory.
    pub fn dir(&self) -> PathBuf {
        self.data_dir.join(&self.network)
    }

    /// Only what DEL and GC need: the network name and `ipam.dataDir`. The
    /// ranges are not validated, so a DEL still releases after a config
    /// change broke them.
    pub fn from_args(args: &CmdArgs) -> Result<Location, Error> {
        let raw: RawLocationNet = args.config()?;
        let ipam = raw.ipam.ok_or_else(missing_ipam)?;
        Location::new(&raw.name, ipam.data_dir.as_deref())
    }

    fn new(network: &str, data_dir: Option<&str>) -> Result<Location, Error> {
        // The skel already enforces the spec's name pattern; this is the
        // line that keeps a lease directory inside dataDir whatever calls us.
        if network.is_empty() || network == "." || network == ".." || network.contains(['/', '\0'])
        {
            return Err(Error::config(
                "name",
                format!("{network:?} cannot be used as a directory name under dataDir"),
            ));
        }
        let data_dir = match data_dir {
            None | Some("") => DEFAULT_DATA_DIR,
            Some(d) if d.contains('\0') => {
                return Err(Error::config(
                    "ipam.dataDir",
                    format!("{d:?} contains a NUL byte"),
                ))
            }
            Some(d) => d,
        };
        Ok(Location {
            data_dir: PathBuf::from(data_dir),
            network: network.to_string(),
        })
    }
}

fn missing_ipam() -> Error {
    Error::config(
        "ipam",
        "missing: host-local reads its settings from the ipam object",
    )
}

/// A range set and the config key it came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetConf {
    pub key: String,
    pub set: RangeSet,
}

impl SetConf {
    /// `"range set 1 (ipam.ranges[0]: 10.1.0.2-10.1.0.254)"`.
    pub fn describe(&self, index: usize) -> String {
        format!("range set {index} ({}: {})", self.key, self.set)
    }
}

/// Where a requested address came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `CNI_ARGS` `IP=`.
    CniArgs,
    /// A key of the config, e.g. `runtimeConfig.ips[0]`.
    Key(String),
}

/// An address the runtime asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requested {
    pub addr: IpAddr,
    pub source: Source,
}

impl Requested {
    /// An error about this request: code 4 for `CNI_ARGS`, 7 for a config
    /// key, naming the source and the address.
    pub fn error(&self, msg: &str) -> Error {
        match &self.source {
            Source::CniArgs => Error::InvalidEnv(format!("CNI_ARGS IP={}: {msg}", self.addr)),
            Source::Key(k) => Error::config(k.clone(), format!("{}: {msg}", self.addr)),
        }
    }
}

/// The whole validated config of an ADD, CHECK or STATUS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamConfig {
    pub location: Location,
    /// Index = the range set index of `last_reserved_ip.<index>`.
    pub sets: Vec<SetConf>,
    pub routes: Vec<Route>,
    pub resolv_conf: Option<PathBuf>,
    /// In order: `CNI_ARGS` `IP=`, `args.cni.ips`, `runtimeConfig.ips`.
    pub requested: Vec<Requested>,
}

impl IpamConfig {
    pub fn from_args(args: &CmdArgs) -> Result<IpamConfig, Error> {
        let raw: RawNet = args.config()?;
        IpamConfig::build(raw, &args.cni_args()?, args.version)
    }

    /// The config a network's plugin (with its `name` and `ipam`) gives
    /// host-local, with no runtime arguments: what a node reader
    /// (`cni-rs metrics`) needs of its ranges and lease directory.
    pub fn from_network_plugin(conf: &[u8]) -> Result<IpamConfig, Error> {
        let raw: RawNet = libcni::gojson::from_slice(conf)?;
        IpamConfig::build(raw, &CniArgs::default(), Version::CURRENT)
    }

    fn build(raw: RawNet, env: &CniArgs, version: Version) -> Result<IpamConfig, Error> {
        let ipam = raw.ipam.ok_or_else(missing_ipam)?;
        let location = Location::new(&raw.name, ipam.data_dir.as_deref())?;
        let runtime = raw.runtime_config.unwrap_or_default();

        let mut requested = requested_from_env(env)?;
        let arg_ips = raw.args.and_then(|a| a.ips());
        requested.extend(requested_from_list(
            "args.cni.ips",
            arg_ips.unwrap_or_default(),
        )?);
        requested.extend(requested_from_list(
            "runtimeConfig.ips",
            runtime.ips.unwrap_or_default(),
        )?);

        let mut sets = Vec::new();
        for (i, set) in runtime.ip_ranges.unwrap_or_default().iter().enumerate() {
            sets.push(range_set(&format!("runtimeConfig.ipRanges[{i}]"), set)?);
        }
        if ipam.subnet.is_some() {
            let legacy = RawRange {
                subnet: ipam.subnet.clone(),
                range_start: ipam.range_start.clone(),
                range_end: ipam.range_end.clone(),
                gateway: ipam.gateway.clone(),
            };
            let r = range("ipam", &legacy)?;
            let set = RangeSet::new(vec![r]).map_err(|e| Error::config("ipam", e.to_string()))?;
            sets.push(SetConf {
                key: "ipam.subnet".into(),
                set,
            });
        }
        for (i, set) in ipam.ranges.unwrap_or_default().iter().enumerate() {
            sets.push(range_set(&format!("ipam.ranges[{i}]"), set)?);
        }
        if sets.is_empty() {
            return Err(Error::config(
                "ipam.ranges",
                "no IP ranges: set ipam.ranges, ipam.subnet or runtimeConfig.ipRanges",
            ));
        }
        for (b, sb) in sets.iter().enumerate() {
            if let Some((a, sa)) = sets[..b]
                .iter()
                .enumerate()
                .find(|(_, sa)| sa.set.overlaps(&sb.set))
            {
                return Err(Error::config(
                    sb.key.clone(),
                    format!(
                        "{} overlaps {}: an address would belong to two sets",
                        sb.describe(b),
                        sa.describe(a)
                    ),
                ));
            }
        }
        let v4 = sets.iter().filter(|s| s.set.is_ipv4()).count();
        let v6 = sets.len() - v4;
        if version < Version::V0_3_0 && (v4 > 1 || v6 > 1) {
            return Err(Error::config(
                "cniVersion",
                format!(
                    "{version} allows one address per family, but the config has {v4} IPv4 and {v6} IPv6 range sets (0.3.0 or later allows more)"
                ),
            ));
        }

        let routes = route_conf::parse_list("ipam.routes", ipam.routes)?;
        let resolv_conf = ipam
            .resolv_conf
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        Ok(IpamConfig {
            location,
            sets,
            routes,
            resolv_conf,
            requested,
        })
    }
}

// ---- raw shapes (what serde reads) ----------------------------------------

#[derive(Deserialize)]
struct RawLocationNet {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ipam: Option<RawLocationIpam>,
}

#[derive(Deserialize)]
struct RawLocationIpam {
    #[serde(rename = "dataDir", default)]
    data_dir: Option<String>,
}

#[derive(Deserialize)]
struct RawNet {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ipam: Option<RawIpam>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RawRuntime>,
    #[serde(default)]
    args: Option<libcni::types::IpsArgs>,
}

#[derive(Deserialize, Default)]
struct RawRuntime {
    #[serde(rename = "ipRanges", default)]
    ip_ranges: Option<Vec<Vec<RawRange>>>,
    #[serde(default)]
    ips: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RawIpam {
    /// Go's untagged `IPAMConfig.Name` (host-local copies the network's
    /// name over it): a key of that name, or one folding to it (`name`),
    /// must be a string, and is otherwise unused.
    #[serde(rename = "Name", default)]
    #[allow(dead_code)]
    name: Option<String>,
    #[serde(default)]
    ranges: Option<Vec<Vec<RawRange>>>,
    #[serde(default)]
    subnet: Option<String>,
    #[serde(rename = "rangeStart", default)]
    range_start: Option<String>,
    #[serde(rename = "rangeEnd", default)]
    range_end: Option<String>,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    routes: Option<Vec<Value>>,
    #[serde(rename = "dataDir", default)]
    data_dir: Option<String>,
    #[serde(rename = "resolvConf", default)]
    resolv_conf: Option<String>,
}

#[derive(Deserialize, Clone)]
struct RawRange {
    #[serde(default)]
    subnet: Option<String>,
    #[serde(rename = "rangeStart", default)]
    range_start: Option<String>,
    #[serde(rename = "rangeEnd", default)]
    range_end: Option<String>,
    #[serde(default)]
    gateway: Option<String>,
}

// ---- validation ------------------------------------------------------------

fn range_set(key: &str, raw: &[RawRange]) -> Result<SetConf, Error> {
    let ranges = raw
        .iter()
        .enumerate()
        .map(|(j, r)| range(&format!("{key}[{j}]"), r))
        .collect::<Result<Vec<_>, _>>()?;
    let set = RangeSet::new(ranges).map_err(|e| Error::config(key, e.to_string()))?;
    Ok(SetConf {
        key: key.to_string(),
        set,
    })
}

/// One range; `key` is the object holding its fields.
fn range(key: &str, raw: &RawRange) -> Result<Range, Error> {
    let subnet_key = format!("{key}.subnet");
    let subnet = match raw.subnet.as_deref() {
        None | Some("") => return Err(Error::config(subnet_key, "missing subnet")),
        Some(s) => s.parse::<IpPrefix>().map_err(|_| {
            Error::config(
                &subnet_key,
                format!("{s:?} is not a subnet in CIDR notation (a.b.c.d/n)"),
            )
        })?,
    };
    let start = optional_ip(&format!("{key}.rangeStart"), raw.range_start.as_deref())?;
    let end = optional_ip(&format!("{key}.rangeEnd"), raw.range_end.as_deref())?;
    let gateway = optional_ip(&format!("{key}.gateway"), raw.gateway.as_deref())?;
    Range::new(subnet, start, end, gateway)
        .map_err(|RangeError { field, msg }| Error::config(format!("{key}.{field}"), msg))
}

/// An optional address field; empty means unset, as in the reference.
fn optional_ip(key: &str, s: Option<&str>) -> Result<Option<IpAddr>, Error> {
    match s {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse::<IpAddr>()
            .map(|a| Some(a.to_canonical()))
            .map_err(|_| Error::config(key, format!("{s:?} is not an IP address"))),
    }
}

/// An address with an optional prefix length, which is ignored.
fn requested_ip(s: &str) -> Option<IpAddr> {
    let addr = if s.contains('/') {
        s.parse::<IpPrefix>().ok()?.addr()
    } else {
        s.parse::<IpAddr>().ok()?
    };
    Some(addr.to_canonical())
}

/// `CNI_ARGS` `IP=`: one address or a comma-separated list, each with an
/// optional prefix length.
fn requested_from_env(env: &CniArgs) -> Result<Vec<Requested>, Error> {
    let Some(list) = env.get("IP") else {
        return Ok(Vec::new());
    };
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            requested_ip(s)
                .map(|addr| Requested {
                    addr,
                    source: Source::CniArgs,
                })
                .ok_or_else(|| {
                    Error::InvalidEnv(format!(
                        "CNI_ARGS IP={list}: {s:?} is not an IP address (a.b.c.d or a.b.c.d/n)"
                    ))
                })
        })
        .collect()
}

fn requested_from_list(key: &str, list: Vec<String>) -> Result<Vec<Requested>, Error> {
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            let key = format!("{key}[{i}]");
            match requested_ip(s) {
                Some(addr) => Ok(Requested {
                    addr,
                    source: Source::Key(key),
                }),
                None => Err(Error::config(
                    key,
                    format!("{s:?} is not an IP address (a.b.c.d or a.b.c.d/n)"),
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn build(conf: Value, cni_args: &str, version: Version) -> Result<IpamConfig, Error> {
        let raw: RawNet = libcni::skel::parse_config(conf.to_string().as_bytes())?;
        IpamConfig::build(raw, &CniArgs::parse(cni_args)?, version)
    }

    fn ok(conf: Value) -> IpamConfig {
        build(conf, "", Version::V1_0_0).unwrap()
    }

    /// Asserts code 7 with `key` named and `needle` in the message.
    fn err7(conf: Value, key: &str, needle: &str) {
        err_at(conf, "", Version::V1_0_0, 7, key, needle)
    }

    fn err_at(conf: Value, cni_args: &str, v: Version, code: u32, key: &str, needle: &str) {
        let e = build(conf, cni_args, v).unwrap_err();
        let text = e.to_string();
        assert_eq!(e.code(), code, "{text}");
        assert!(text.contains(key), "key {key:?} not in {text:?}");
        assert!(text.contains(needle), "{needle:?} not in {text:?}");
        if code == 7 {
            assert!(
                matches!(&e, Error::InvalidConfig { key: k, .. } if k == key),
                "{e:?}"
            );
        }
    }

    fn net(ipam: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "net1", "ipam": ipam})
    }

    fn sets(c: &IpamConfig) -> Vec<String> {
        c.sets
            .iter()
            .map(|s| format!("{}={}", s.key, s.set))
            .collect()
    }

    #[test]
    fn every_key_is_read() {
        let c = ok(net(json!({
            "type": "host-local",
            "ranges": [
                [{"subnet": "10.1.0.0/16", "rangeStart": "10.1.2.10", "rangeEnd": "10.1.2.20", "gateway": "10.1.0.254"},
                 {"subnet": "172.16.5.0/24"}],
                [{"subnet": "2001:db8::/64", "rangeStart": "2001:db8::10", "rangeEnd": "2001:db8::20"}]
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.1.5.1"}, {"dst": "2001:db8::1/64", "mtu": 1400}],
            "dataDir": "/run/ipam-state",
            "resolvConf": "/etc/my-resolv.conf"
        })));
        assert_eq!(
            sets(&c),
            [
                "ipam.ranges[0]=10.1.2.10-10.1.2.20,172.16.5.1-172.16.5.254",
                "ipam.ranges[1]=2001:db8::10-2001:db8::20"
            ]
        );
        assert_eq!(
            c.sets[0].set.ranges()[0].gateway().to_string(),
            "10.1.0.254"
        );
        assert_eq!(
            c.sets[0].set.ranges()[1].gateway().to_string(),
            "172.16.5.1"
        );
        assert_eq!(c.location.dir(), PathBuf::from("/run/ipam-state/net1"));
        assert_eq!(c.resolv_conf, Some(PathBuf::from("/etc/my-resolv.conf")));
        assert_eq!(c.routes.len(), 3);
        assert_eq!(c.routes[1].gw, Some("10.1.5.1".parse().unwrap()));
        assert_eq!(
            c.routes[2].dst.to_string(),
            "2001:db8::1/64",
            "returned verbatim, host bits kept"
        );
        assert_eq!(c.routes[2].mtu, Some(1400));
        assert!(c.requested.is_empty());
    }

    #[test]
    fn defaults() {
        let c = ok(net(json!({"subnet": "10.1.0.0/24"})));
        assert_eq!(c.location.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(sets(&c), ["ipam.subnet=10.1.0.1-10.1.0.254"]);
        assert!(c.routes.is_empty() && c.resolv_conf.is_none());
        let c = ok(net(
            json!({"subnet": "10.1.0.0/24", "dataDir": "", "resolvConf": "", "rangeStart": ""}),
        ));
        assert_eq!(c.location.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert!(c.resolv_conf.is_none());
    }

    #[test]
    fn legacy_range_goes_first_and_ip_ranges_before_it() {
        let mut conf = net(json!({
            "subnet": "10.1.0.0/24", "rangeStart": "10.1.0.100", "gateway": "10.1.0.254",
            "ranges": [[{"subnet": "10.2.0.0/24"}]]
        }));
        let c = ok(conf.clone());
        assert_eq!(
            sets(&c),
            [
                "ipam.subnet=10.1.0.100-10.1.0.254",
                "ipam.ranges[0]=10.2.0.1-10.2.0.254"
            ]
        );
        conf["runtimeConfig"] =
            json!({"ipRanges": [[{"subnet": "10.3.0.0/24"}], [{"subnet": "2001:db8::/120"}]]});
        let c = ok(conf);
        assert_eq!(
            sets(&c),
            [
                "runtimeConfig.ipRanges[0]=10.3.0.1-10.3.0.254",
                "runtimeConfig.ipRanges[1]=2001:db8::1-2001:db8::ff",
                "ipam.subnet=10.1.0.100-10.1.0.254",
                "ipam.ranges[0]=10.2.0.1-10.2.0.254"
            ]
        );
    }

    #[test]
    fn ip_ranges_alone_are_enough() {
        let c = ok(
            json!({"name": "n", "ipam": {}, "runtimeConfig": {"ipRanges": [[{"subnet": "10.3.0.0/24"}]]}}),
        );
        assert_eq!(sets(&c), ["runtimeConfig.ipRanges[0]=10.3.0.1-10.3.0.254"]);
    }

    #[test]
    fn requested_ips_in_order_env_replaces_then_args_then_runtime() {
        let mut conf = net(json!({"subnet": "10.1.0.0/24"}));
        conf["args"] = json!({"cni": {"ips": ["10.1.0.7", "10.1.0.8/24"], "labels": []}});
        conf["runtimeConfig"] = json!({"ips": ["10.1.0.9/24"], "portMappings": []});
        let c = build(
            conf,
            "IgnoreUnknown=1;IP=10.1.0.5/24, 10.1.0.6;K8S_POD_NAME=x",
            Version::V1_0_0,
        )
        .unwrap();
        let got: Vec<(String, Source)> = c
            .requested
            .iter()
            .map(|r| (r.addr.to_string(), r.source.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("10.1.0.5".to_string(), Source::CniArgs),
                ("10.1.0.6".to_string(), Source::CniArgs),
                (
                    "10.1.0.7".to_string(),
                    Source::Key("args.cni.ips[0]".into())
                ),
                (
                    "10.1.0.8".to_string(),
                    Source::Key("args.cni.ips[1]".into())
                ),
                (
                    "10.1.0.9".to_string(),
                    Source::Key("runtimeConfig.ips[0]".into())
                ),
            ]
        );
        let c = build(
            net(json!({"subnet": "10.1.0.0/24"})),
            "IP=::ffff:10.1.0.5",
            Version::V1_0_0,
        )
        .unwrap();
        assert_eq!(
            c.requested[0].addr.to_string(),
            "10.1.0.5",
            "IPv4-mapped becomes IPv4"
        );
        let c = build(
            net(json!({"subnet": "10.1.0.0/24"})),
            "IP=",
            Version::V1_0_0,
        )
        .unwrap();
        assert!(c.requested.is_empty());
    }

    #[test]
    fn bad_requested_ips_name_their_source() {
        let base = net(json!({"subnet": "10.1.0.0/24"}));
        err_at(
            base.clone(),
            "IP=10.1.0.300",
            Version::V1_0_0,
            4,
            "CNI_ARGS IP=10.1.0.300",
            "\"10.1.0.300\" is not an IP address",
        );
        err_at(
            base.clone(),
            "IP=10.1.0.5,x",
            Version::V1_0_0,
            4,
            "CNI_ARGS",
            "\"x\"",
        );
        let mut c = base.clone();
        c["runtimeConfig"] = json!({"ips": ["10.1.0.5/33"]});
        err7(
            c,
            "runtimeConfig.ips[0]",
            "\"10.1.0.5/33\" is not an IP address",
        );
        let mut c = base.clone();
        c["args"] = json!({"cni": {"ips": ["nope"]}});
        err7(c, "args.cni.ips[0]", "\"nope\"");
        let mut c = base;
        c["args"] = json!({"cni": {"ips": [5]}});
        err7(c, "args.cni.ips[0]", "invalid type");
    }

    #[test]
    fn subnet_errors() {
        err7(
            net(json!({"subnet": "10.1.0.5/24"})),
            "ipam.subnet",
            "10.1.0.5/24 has host bits set (the network is 10.1.0.0/24)",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/31"})),
            "ipam.subnet",
            "10.1.0.0/31 is too small",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/32"})),
            "ipam.subnet",
            "10.1.0.0/32 is too small",
        );
        err7(
            net(json!({"ranges": [[{"subnet": "2001:db8::/127"}]]})),
            "ipam.ranges[0][0].subnet",
            "2001:db8::/127 is too small",
        );
        err7(
            net(json!({"ranges": [[{"subnet": "2001:db8::/128"}]]})),
            "ipam.ranges[0][0].subnet",
            "2001:db8::/128 is too small",
        );
        err7(
            net(json!({"subnet": "10.1.0.0"})),
            "ipam.subnet",
            "\"10.1.0.0\" is not a subnet in CIDR notation",
        );
        err7(net(json!({"subnet": ""})), "ipam.subnet", "missing subnet");
        err7(
            net(json!({"ranges": [[{"rangeStart": "10.1.0.1"}]]})),
            "ipam.ranges[0][0].subnet",
            "missing subnet",
        );
        err7(net(json!({"subnet": 24})), "ipam.subnet", "invalid type");
    }

    #[test]
    fn start_end_and_gateway_errors() {
        err7(
            net(json!({"subnet": "10.1.0.0/24", "rangeStart": "10.1.1.1"})),
            "ipam.rangeStart",
            "10.1.1.1 is not in subnet 10.1.0.0/24",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/24", "rangeEnd": "10.2.0.1"})),
            "ipam.rangeEnd",
            "10.2.0.1 is not in subnet 10.1.0.0/24",
        );
        err7(
            net(
                json!({"ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.50", "rangeEnd": "10.1.0.40"}]]}),
            ),
            "ipam.ranges[0][0].rangeEnd",
            "10.1.0.40 is before rangeStart 10.1.0.50",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/24", "rangeStart": "10.1.0"})),
            "ipam.rangeStart",
            "\"10.1.0\" is not an IP address",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/24", "gateway": "gw"})),
            "ipam.gateway",
            "\"gw\" is not an IP address",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/24", "gateway": "10.1.1.1"})),
            "ipam.gateway",
            "10.1.1.1 is not in subnet 10.1.0.0/24",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/24", "gateway": "2001:db8::1"})),
            "ipam.gateway",
            "same address family",
        );
    }

    #[test]
    fn set_errors() {
        err7(
            net(json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "2001:db8::/64"}]]})),
            "ipam.ranges[0]",
            "mixed address families",
        );
        err7(
            net(json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "10.1.0.0/25"}]]})),
            "ipam.ranges[0]",
            "ranges 0 and 1 overlap: 10.1.0.1-10.1.0.254 and 10.1.0.1-10.1.0.126",
        );
        err7(
            net(json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/16"}]]})),
            "ipam.ranges[1]",
            "range set 1 (ipam.ranges[1]: 10.1.0.1-10.1.255.254) overlaps range set 0 (ipam.ranges[0]: 10.1.0.1-10.1.0.254)",
        );
        let mut c = net(json!({"subnet": "10.1.0.0/24"}));
        c["runtimeConfig"] = json!({"ipRanges": [[{"subnet": "10.1.0.128/25"}]]});
        err7(
            c,
            "ipam.subnet",
            "overlaps range set 0 (runtimeConfig.ipRanges[0]",
        );
        err7(
            net(json!({"ranges": [[]]})),
            "ipam.ranges[0]",
            "a range set needs at least one range",
        );
        err7(net(json!({"ranges": []})), "ipam.ranges", "no IP ranges");
        err7(
            net(json!({"type": "host-local"})),
            "ipam.ranges",
            "no IP ranges",
        );
        err7(json!({"name": "n"}), "ipam", "missing");
        err7(
            net(json!({"ranges": "10.1.0.0/24"})),
            "ipam.ranges",
            "invalid type",
        );
    }

    #[test]
    fn one_address_per_family_below_030() {
        let two_v4 =
            net(json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.2.0.0/24"}]]}));
        err_at(
            two_v4.clone(),
            "",
            Version::V0_2_0,
            7,
            "cniVersion",
            "0.2.0 allows one address per family, but the config has 2 IPv4",
        );
        assert!(build(two_v4, "", Version::V0_3_0).is_ok());
        let dual =
            net(json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "2001:db8::/64"}]]}));
        assert!(build(dual, "", Version::V0_1_0).is_ok());
    }

    #[test]
    fn route_errors() {
        err7(
            net(json!({"subnet": "10.1.0.0/24", "routes": [{"dst": "0.0.0.0"}]})),
            "ipam.routes[0].dst",
            "\"0.0.0.0\" is not a CIDR",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/24", "routes": [{"gw": "10.1.0.1"}]})),
            "ipam.routes[0].dst",
            "missing dst",
        );
        err7(
            net(
                json!({"subnet": "10.1.0.0/24", "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "10.1.0.1"}]}),
            ),
            "ipam.routes[1].gw",
            "10.1.0.1 is not of the family of dst ::/0",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/24", "routes": [{"dst": "0.0.0.0/0", "gw": "x"}]})),
            "ipam.routes[0].gw",
            "\"x\" is not an IP address",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/24", "routes": ["0.0.0.0/0"]})),
            "ipam.routes[0]",
            "is not a route object",
        );
        err7(
            net(json!({"subnet": "10.1.0.0/24", "routes": [{"dst": "0.0.0.0/0", "mtu": "x"}]})),
            "ipam.routes[0].mtu",
            "invalid type",
        );
        let c = ok(net(
            json!({"subnet": "10.1.0.0/24", "routes": [{"dst": "0.0.0.0/0", "gw": ""}]}),
        ));
        assert_eq!(c.routes[0].gw, None);
    }

    #[test]
    fn location_refuses_names_that_escape_the_data_dir() {
        for bad in ["", ".", "..", "a/b", "../x", "a\0b"] {
            let e = Location::new(bad, Some("/tmp/x")).unwrap_err();
            assert_eq!(e.code(), 7, "{bad:?}");
            assert!(e.to_string().contains("name"), "{e}");
        }
        let e = Location::new("n", Some("/tmp/\0x")).unwrap_err();
        assert!(e.to_string().contains("ipam.dataDir"));
        assert_eq!(
            Location::new("n", None).unwrap().dir(),
            PathBuf::from("/var/lib/cni/networks/n")
        );
    }
}
