//! The tuning plugin's config: its keys parsed from stdin and validated
//! before anything in the container is touched. Every rejection is code 7
//! naming the key (code 4 for `CNI_ARGS`).
//!
//! Sysctl keys follow sysctl.d(5): when the first separator is a dot
//! (`net.ipv4.conf.eth0.arp_ignore`), dots and slashes are interchanged;
//! when it is a slash (`net/ipv4/conf/eth0.100/arp_ignore`), the key is a
//! path as it stands, so interface names with dots can be named. Then, as
//! in the Go reference, the first `IFNAME` is replaced by `CNI_IFNAME`
//! (after the separators, so the interface's own dots survive). The result
//! must be a [`Key`]: under `net/`, no empty, `.` or `..` component.

use libcni::mac::MacKey;
use std::fmt;
use std::path::PathBuf;

use libcni::mac::{self, MacSource};
use libcni::skel::CmdArgs;
use libcni::sysctl::Key;
use libcni::Error;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Where backups go unless `dataDir` says otherwise (as in the reference).
pub const DEFAULT_DATA_DIR: &str = "/run/cni/tuning";

/// A sysctl map as given: its entries in order (a key given twice keeps
/// its later value, as Go's map would; [`Conf::parse`] refuses the config
/// first, as upstream does).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SysctlMap(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for SysctlMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SysctlMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of sysctl keys to string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SysctlMap, A::Error> {
                let mut entries: Vec<(String, String)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    // A key given twice: the later value, as Go's map keeps it.
                    entries.retain(|(e, _)| *e != k);
                    entries.push((k, v));
                }
                Ok(SysctlMap(entries))
            }
        }
        d.deserialize_map(V)
    }
}

/// The keys as they come (JSON types only).
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(rename = "dataDir", default)]
    data_dir: Option<String>,
    #[serde(default)]
    sysctl: Option<SysctlMap>,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(rename = "txQLen", default)]
    txqlen: Option<i64>,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<MacKey>,
    #[serde(default)]
    args: Option<RawArgs>,
}

#[derive(Debug, Default, Deserialize)]
struct RawArgs {
    #[serde(default)]
    cni: Option<RawArgsCni>,
}

/// `args.cni`: the same keys as the config, which they override.
#[derive(Debug, Default, Deserialize)]
struct RawArgsCni {
    #[serde(default)]
    sysctl: Option<SysctlMap>,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(rename = "txQLen", default)]
    txqlen: Option<i64>,
    #[serde(default)]
    allmulti: Option<bool>,
}

/// One sysctl to set: the key as the config wrote it, the resolved key and
/// the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysctl {
    /// Where it came from, for messages: `sysctl` or `args.cni.sysctl`.
    pub source: &'static str,
    /// The key as written in the config.
    pub raw: String,
    pub key: Key,
    pub value: String,
}

/// A validated tuning config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// `dataDir`: where the backups of changed values go.
    pub data_dir: PathBuf,
    /// `sysctl` then `args.cni.sysctl` (which overrides a key of the same
    /// resolved path in place).
    pub sysctls: Vec<Sysctl>,
    /// The MAC: `mac` < `CNI_ARGS` `MAC` < `runtimeConfig.mac` <
    /// `args.cni.mac`, in the reference's order.
    pub mac: Option<[u8; 6]>,
    /// Promiscuous mode on (only `true` does something; `false` is what
    /// CHECK expects).
    pub promisc: bool,
    pub mtu: Option<u32>,
    pub txqlen: Option<u32>,
    pub allmulti: Option<bool>,
}

impl Conf {
    /// Whether ADD changes anything on the link itself.
    pub fn changes_link(&self) -> bool {
        self.mac.is_some()
            || self.promisc
            || self.mtu.is_some()
            || self.txqlen.is_some()
            || self.allmulti.is_some()
    }

    /// Parses and validates the config of `args` (ADD and CHECK).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        // A sysctl key written twice: upstream (since v1.2.0) refuses the
        // config on ADD and CHECK rather than pick one of the values.
        if let Some(key) = libcni::gojson::repeated_key_under(&args.stdin, "sysctl") {
            return Err(Error::config(
                "sysctl",
                format!("{key:?} is given twice: duplicated sysctl keys are not allowed"),
            ));
        }
        let raw: Raw = args.config()?;
        let env_mac = libcni::mac::from_cni_args(&args.cni_args()?)?;
        Conf::from_raw(raw, env_mac.as_deref(), &args.ifname)
    }

    fn from_raw(raw: Raw, env_mac: Option<&str>, ifname: &str) -> Result<Conf, Error> {
        let data_dir = data_dir(raw.data_dir.as_deref())?;
        let cni = raw.args.and_then(|a| a.cni).unwrap_or_default();

        let mut sysctls: Vec<Sysctl> = Vec::new();
        for (source, map) in [("sysctl", raw.sysctl), ("args.cni.sysctl", cni.sysctl)] {
            let mut seen: Vec<Key> = Vec::new();
            for (k, v) in map.unwrap_or_default().0 {
                let key = resolve_key(source, &k, ifname)?;
                if seen.contains(&key) {
                    return Err(Error::config(
                        source,
                        format!("two keys name the same sysctl {key} (the second is {k:?})"),
                    ));
                }
                seen.push(key.clone());
                let entry = Sysctl {
                    source,
                    raw: k,
                    key,
                    value: v,
                };
                match sysctls.iter_mut().find(|s| s.key == entry.key) {
                    Some(existing) => *existing = entry,
                    None => sysctls.push(entry),
                }
            }
        }

        // Lowest to highest precedence, as the reference reads them.
        let runtime_mac = raw.runtime_config.and_then(|r| r.mac);
        let mac = mac::choose([
            (MacSource::Config, raw.mac.as_deref()),
            (MacSource::CniArgs, env_mac),
            (MacSource::RuntimeConfig, runtime_mac.as_deref()),
            (MacSource::ArgsCni, cni.mac.as_deref()),
        ])?;

        let promisc = cni.promisc.or(raw.promisc).unwrap_or(false);
        let (mtu_key, mtu) = match cni.mtu {
            Some(m) => ("args.cni.mtu", Some(m)),
            None => ("mtu", raw.mtu),
        };
        let mtu = match mtu {
            None | Some(0) => None,
            Some(m @ 1..=0x7fff_ffff) => Some(m as u32),
            Some(m) => {
                return Err(Error::config(
                    mtu_key,
                    format!("{m} is out of range (1-2147483647, or 0 to leave it)"),
                ))
            }
        };
        let (txq_key, txqlen) = match cni.txqlen {
            Some(q) => ("args.cni.txQLen", Some(q)),
            None => ("txQLen", raw.txqlen),
        };
        let txqlen = match txqlen {
            None => None,
            Some(q @ 0..=0xffff_ffff) => Some(q as u32),
            Some(q) => {
                return Err(Error::config(
                    txq_key,
                    format!("{q} is out of range (0-4294967295)"),
                ))
            }
        };
        let allmulti = cni.allmulti.or(raw.allmulti);

        Ok(Conf {
            data_dir,
            sysctls,
            mac,
            promisc,
            mtu,
            txqlen,
            allmulti,
        })
    }
}

/// `dataDir`, which must be an absolute path (the backups must be found
/// again by DEL whatever the runtime's working directory).
pub fn data_dir(value: Option<&str>) -> Result<PathBuf, Error> {
    match value {
        None | Some("") => Ok(PathBuf::from(DEFAULT_DATA_DIR)),
        Some(d) if d.starts_with('/') && !d.contains('\0') => Ok(PathBuf::from(d)),
        Some(d) => Err(Error::config(
            "dataDir",
            format!("{d:?} is not an absolute path"),
        )),
    }
}

/// Resolves a sysctl key of the config (see the module comment); the error
/// is code 7 naming `source` and the key.
pub fn resolve_key(source: &str, raw: &str, ifname: &str) -> Result<Key, Error> {
    let first_sep = raw.find(['.', '/']).map(|i| raw.as_bytes()[i]);
    let path: String = if first_sep == Some(b'.') {
        raw.chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect()
    } else {
        raw.to_string()
    };
    let path = path.replacen("IFNAME", ifname, 1);
    Key::new(&path).map_err(|e| {
        let why = match e {
            Error::InvalidConfig { msg, .. } => msg,
            other => other.to_string(),
        };
        Error::config(source, format!("key {raw:?}: {why}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::testing::assert_config_error;
    use serde_json::{json, Value};

    fn conf(v: Value) -> Result<Conf, Error> {
        conf_env(v, None)
    }

    fn conf_env(v: Value, env_mac: Option<&str>) -> Result<Conf, Error> {
        let raw: Raw = libcni::skel::parse_config(v.to_string().as_bytes())?;
        Conf::from_raw(raw, env_mac, "eth0")
    }

    fn keys(c: &Conf) -> Vec<(String, String)> {
        c.sysctls
            .iter()
            .map(|s| (s.key.to_string(), s.value.clone()))
            .collect()
    }

    fn err(v: Value) -> String {
        let e = conf(v).unwrap_err();
        assert_eq!(e.code(), 7, "{e}");
        e.to_string()
    }

    #[test]
    fn sysctl_keys_take_dots_or_slashes_and_ifname() {
        let c = conf(json!({"sysctl": {
            "net.core.somaxconn": "500",
            "net.ipv4.conf.IFNAME.arp_ignore": "1",
            "net/ipv4/conf/eth0.100/arp_filter": "1",
            "net.ipv4.conf.eth0/100.rp_filter": "2",
            "/net/ipv6/conf/all/forwarding": "0"
        }}))
        .unwrap();
        assert_eq!(
            keys(&c),
            [
                ("net/core/somaxconn".into(), "500".into()),
                ("net/ipv4/conf/eth0/arp_ignore".into(), "1".into()),
                ("net/ipv4/conf/eth0.100/arp_filter".into(), "1".into()),
                ("net/ipv4/conf/eth0.100/rp_filter".into(), "2".into()),
                ("net/ipv6/conf/all/forwarding".into(), "0".into()),
            ]
        );
        // IFNAME is replaced after the separators: the interface keeps its dots.
        let k = resolve_key("sysctl", "net.ipv4.conf.IFNAME.arp_ignore", "eth0.7").unwrap();
        assert_eq!(k.as_str(), "net/ipv4/conf/eth0.7/arp_ignore");
    }

    #[test]
    fn sysctl_keys_outside_net_or_with_escapes_are_refused() {
        for (bad, why) in [
            ("kernel.x", "is not under net/"),
            ("net/../../x", "has an empty, \".\" or \"..\" component"),
            ("net.ipv4..x", "has an empty, \".\" or \"..\" component"),
            ("net", "names no sysctl"),
            ("net.", "has an empty"),
            ("", "is not under net/"),
            ("net/core/ x", "contains NUL or whitespace"),
            ("/proc/sys/net/core/somaxconn", "is not under net/"),
        ] {
            let msg = err(json!({"sysctl": {bad: "1"}}));
            assert!(
                msg.starts_with(&format!("invalid network config: sysctl: key {bad:?}: ")),
                "{msg}"
            );
            assert!(msg.contains(why), "{bad:?}: {msg}");
        }
        let msg = err(json!({"args": {"cni": {"sysctl": {"kernel.hostname": "x"}}}}));
        assert!(
            msg.starts_with("invalid network config: args.cni.sysctl: key \"kernel.hostname\""),
            "{msg}"
        );
        // An interface name cannot smuggle a path in: skel refuses '/' in it,
        // and ".." as a whole component is refused here.
        assert!(resolve_key("sysctl", "net.ipv4.conf.IFNAME.x", "..").is_err());
    }

    #[test]
    fn two_keys_naming_one_sysctl_are_refused() {
        // The same key twice is one map entry, the last, as in Go's map.
        let raw = libcni::skel::parse_config::<Raw>(
            br#"{"sysctl": {"net.core.somaxconn": "1", "net.core.somaxconn": "2"}}"#,
        )
        .unwrap();
        assert_eq!(
            raw.sysctl.unwrap().0,
            [("net.core.somaxconn".to_string(), "2".to_string())]
        );
        let msg = err(json!({"sysctl": {"net.core.somaxconn": "1", "net/core/somaxconn": "2"}}));
        assert!(
            msg.contains("two keys name the same sysctl net/core/somaxconn"),
            "{msg}"
        );
        let msg = err(json!({"sysctl": {"net.core.somaxconn": 5}}));
        assert!(msg.starts_with("invalid network config: sysctl"), "{msg}");
    }

    #[test]
    fn args_cni_overrides_the_config() {
        let c = conf(json!({
            "sysctl": {"net.core.somaxconn": "500", "net.ipv4.ip_forward": "1"},
            "mac": "0a:00:00:00:00:01", "mtu": 1400, "promisc": true, "txQLen": 5,
            "allmulti": true,
            "runtimeConfig": {"mac": "0a:00:00:00:00:02"},
            "args": {"cni": {"sysctl": {"net/core/somaxconn": "600", "net.core.rmem_max": "9"},
                             "mac": "0a:00:00:00:00:03", "mtu": 1300, "promisc": false,
                             "txQLen": 0, "allmulti": false}}
        }))
        .unwrap();
        assert_eq!(
            keys(&c),
            [
                ("net/core/somaxconn".into(), "600".into()),
                ("net/ipv4/ip_forward".into(), "1".into()),
                ("net/core/rmem_max".into(), "9".into()),
            ]
        );
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 3]));
        assert_eq!(
            (c.mtu, c.promisc, c.txqlen, c.allmulti),
            (Some(1300), false, Some(0), Some(false))
        );
        assert!(c.changes_link());
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    }

    #[test]
    fn mac_precedence_is_the_references() {
        let v = json!({"mac": "0a:00:00:00:00:01"});
        assert_eq!(conf(v.clone()).unwrap().mac, Some([0x0a, 0, 0, 0, 0, 1]));
        let env = conf_env(v.clone(), Some("0a:00:00:00:00:04")).unwrap();
        assert_eq!(env.mac, Some([0x0a, 0, 0, 0, 0, 4]));
        let mut rc = v.clone();
        rc["runtimeConfig"] = json!({"mac": "0a:00:00:00:00:05"});
        let c = conf_env(rc, Some("0a:00:00:00:00:04")).unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 5]));
        let e = conf_env(json!({}), Some("zz")).unwrap_err();
        assert_eq!(e.code(), 4);
        assert!(e.to_string().starts_with("CNI_ARGS MAC: \"zz\""), "{e}");
    }

    #[test]
    fn values_are_checked_by_key() {
        for (v, needle) in [
            (
                json!({"mac": "01:00:5e:00:00:01"}),
                "mac: \"01:00:5e:00:00:01\" is a multicast",
            ),
            (json!({"mac": "nope"}), "mac: \"nope\" is not a MAC address"),
            (
                json!({"runtimeConfig": {"mac": "00:00:00:00:00:00"}}),
                "runtimeConfig.mac: \"00:00:00:00:00:00\" is the zero address",
            ),
            (
                json!({"args": {"cni": {"mac": "x"}}}),
                "args.cni.mac: \"x\" is not",
            ),
            (json!({"mtu": -1}), "mtu: -1 is out of range"),
            (
                json!({"args": {"cni": {"mtu": -5}}}),
                "args.cni.mtu: -5 is out of range",
            ),
            (json!({"txQLen": -1}), "txQLen: -1 is out of range"),
            (
                json!({"txQLen": 5000000000u64}),
                "txQLen: 5000000000 is out of range",
            ),
            (
                json!({"dataDir": "run/x"}),
                "dataDir: \"run/x\" is not an absolute path",
            ),
            (json!({"promisc": "yes"}), "promisc: invalid type"),
            (
                json!({"args": {"cni": {"allmulti": 1}}}),
                "args.cni.allmulti: invalid type",
            ),
        ] {
            assert_config_error(conf(v), needle);
        }
        // Zero MTU means "leave it", and nothing else set changes nothing.
        let c = conf(json!({"mtu": 0, "promisc": false, "args": {"cni": {"labels": []}}})).unwrap();
        assert!(!c.changes_link());
        assert!(c.sysctls.is_empty());
    }
}
