//! The tap plugin's config: its keys (upstream v1.9's `mac`, `mtu`,
//! `multiQueue`, `owner`, `group`, `selinuxContext`, `bridge`, the `mac`
//! capability, and the shared `ipam` and `dns`; plus `args.cni.mac`)
//! parsed from stdin with Go's rules and validated before anything is
//! touched. Every rejection is code 7 naming the key (code 4 for
//! `CNI_ARGS`, code 2 for what this node cannot do).

use libcni::mac::{MacArgs, MacKey};
use std::path::Path;

use libcni::mac::{self, MacSource};
use libcni::skel::CmdArgs;
use libcni::types::config::validate_link_name;
use libcni::types::{Dns, DnsConf, IpamConf};
use libcni::Error;
use serde::Deserialize;

/// Where SELinux's filesystem is mounted when SELinux is enabled.
pub const SELINUXFS: &str = "/sys/fs/selinux";

/// The keys as they come (JSON types only).
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    mtu: i64,
    #[serde(rename = "multiQueue", default)]
    multi_queue: bool,
    #[serde(default)]
    owner: Option<u32>,
    #[serde(default)]
    group: Option<u32>,
    #[serde(rename = "selinuxContext", default)]
    selinux_context: Option<String>,
    #[serde(default)]
    bridge: Option<String>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: MacKey,
    #[serde(default)]
    args: MacArgs,
    #[serde(default)]
    ipam: Option<IpamConf>,
    #[serde(default)]
    dns: Option<DnsConf>,
}

/// A validated tap config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// The tap's MAC: `mac` < `CNI_ARGS` `MAC` < `args.cni.mac` <
    /// `runtimeConfig.mac`; `None` keeps the kernel's random one.
    pub mac: Option<[u8; 6]>,
    /// `mtu`; `None` (0) keeps the kernel's default.
    pub mtu: Option<u32>,
    /// `multiQueue`.
    pub multi_queue: bool,
    /// `owner`: the user that may attach to the tap.
    pub owner: Option<u32>,
    /// `group`: the group that may attach to the tap.
    pub group: Option<u32>,
    /// `bridge`: a bridge in the container's namespace the tap becomes a
    /// port of.
    pub bridge: Option<String>,
    /// `ipam.type`; `None` for layer 2 only.
    pub ipam: Option<String>,
    /// `dns`, kept when it sets anything: it replaces IPAM's ([`libcni::attach::apply_dns`]).
    pub dns: Option<Dns>,
}

impl Conf {
    /// Parses and validates the config of `args` (ADD and CHECK).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        let raw: Raw = args.config()?;
        let env_mac = libcni::mac::from_cni_args(&args.cni_args()?)?;
        Conf::from_raw(raw, env_mac.as_deref(), Path::new(SELINUXFS))
    }

    fn from_raw(raw: Raw, env_mac: Option<&str>, selinuxfs: &Path) -> Result<Conf, Error> {
        let mtu = libcni::attach::own_link_mtu(raw.mtu)?;
        let bridge = raw.bridge.filter(|b| !b.is_empty());
        if let Some(b) = &bridge {
            validate_link_name("bridge", b)?;
        }
        if let Some(ctx) = raw.selinux_context.filter(|c| !c.is_empty()) {
            return Err(selinux_refused(&ctx, selinuxfs));
        }
        // Lowest to highest precedence; only the one that wins is parsed.
        let mac = mac::choose([
            (MacSource::Config, raw.mac.as_deref()),
            (MacSource::CniArgs, env_mac),
            (MacSource::ArgsCni, raw.args.cni.mac.as_deref()),
            (MacSource::RuntimeConfig, raw.runtime_config.mac.as_deref()),
        ])?;
        Ok(Conf {
            mac,
            mtu,
            multi_queue: raw.multi_queue,
            owner: raw.owner,
            group: raw.group,
            bridge,
            ipam: IpamConf::plugin(raw.ipam),
            dns: raw.dns.and_then(DnsConf::into_set),
        })
    }
}

/// `selinuxContext` asks for the tap to be created in an SELinux context:
/// code 2 naming the key. Without SELinux (no selinuxfs) there is no such
/// context; with it, this build does not switch contexts (see the README).
fn selinux_refused(ctx: &str, selinuxfs: &Path) -> Error {
    let why = if selinuxfs.join("enforce").exists() {
        "this build does not create taps in an SELinux context (the reference runs \
         `ip tuntap` under that exec label); leave selinuxContext out"
            .to_string()
    } else {
        format!(
            "SELinux is not enabled on this node (no selinuxfs at {}), so the tap \
             cannot be created in an SELinux context; leave selinuxContext out",
            selinuxfs.display()
        )
    };
    Error::UnsupportedField {
        key: "selinuxContext".into(),
        value: format!("{ctx:?}: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn conf_env(v: Value, env_mac: Option<&str>) -> Result<Conf, Error> {
        let raw: Raw = libcni::skel::parse_config(v.to_string().as_bytes())?;
        Conf::from_raw(raw, env_mac, Path::new("/nonexistent/selinuxfs"))
    }

    fn conf(v: Value) -> Result<Conf, Error> {
        conf_env(v, None)
    }

    #[test]
    fn defaults_are_layer_2_with_the_kernels_settings() {
        assert_eq!(
            conf(json!({"name": "n", "type": "tap"})).unwrap(),
            Conf {
                mac: None,
                mtu: None,
                multi_queue: false,
                owner: None,
                group: None,
                bridge: None,
                ipam: None,
                dns: None,
            }
        );
        let c = conf(json!({"bridge": "", "ipam": {}, "mtu": 0, "selinuxContext": ""})).unwrap();
        assert_eq!((c.bridge, c.ipam, c.mtu), (None, None, None));
    }

    #[test]
    fn every_key_with_go_s_mixed_case() {
        let c = conf(json!({
            "MAC": "0a:00:00:00:00:01", "MTU": 9000, "MultiQueue": true,
            "Owner": 107, "GROUP": 36, "Bridge": "br0",
            "IPAM": {"Type": "host-local"}, "Dns": {"Search": ["svc"]}
        }))
        .unwrap();
        assert_eq!(
            c,
            Conf {
                mac: Some([0x0a, 0, 0, 0, 0, 1]),
                mtu: Some(9000),
                multi_queue: true,
                owner: Some(107),
                group: Some(36),
                bridge: Some("br0".into()),
                ipam: Some("host-local".into()),
                dns: Some(Dns {
                    search: vec!["svc".into()],
                    ..Dns::default()
                }),
            }
        );
        let c = conf(json!({"RuntimeConfig": {"MAC": "0a:00:00:00:00:02"},
                            "Args": {"CNI": {"Mac": "0a:00:00:00:00:03"}}}))
        .unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 2]));
        let e = conf(json!({"SELinuxContext": "system_u:system_r:container_t:s0"})).unwrap_err();
        assert_eq!(e.code(), 2, "{e}");
    }

    #[test]
    fn mac_precedence() {
        let all = json!({"mac": "0a:00:00:00:00:01",
                         "args": {"cni": {"mac": "0a:00:00:00:00:03"}},
                         "runtimeConfig": {"mac": "0a:00:00:00:00:04"}});
        let c = conf_env(all.clone(), Some("0a:00:00:00:00:02")).unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 4]));
        let mut v = all.clone();
        v.as_object_mut().unwrap().remove("runtimeConfig");
        let c = conf_env(v.clone(), Some("0a:00:00:00:00:02")).unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 3]));
        v.as_object_mut().unwrap().remove("args");
        let c = conf_env(v.clone(), Some("0a:00:00:00:00:02")).unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 2]));
        let c = conf_env(v, None).unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 1]));
    }

    #[test]
    fn invalid_keys_are_named() {
        for (v, code, want) in [
            (
                json!({"mtu": 67}),
                7,
                "invalid network config: mtu: 67 is out of range",
            ),
            (
                json!({"mtu": "1500"}),
                7,
                "invalid network config: mtu: invalid type",
            ),
            (
                json!({"multiQueue": 1}),
                7,
                "invalid network config: multiQueue: invalid type",
            ),
            (
                json!({"owner": -1}),
                7,
                "invalid network config: owner: invalid value",
            ),
            (
                json!({"owner": 4294967296u64}),
                7,
                "invalid network config: owner: invalid value",
            ),
            (
                json!({"owner": "root"}),
                7,
                "invalid network config: owner: invalid type",
            ),
            (
                json!({"group": 1.5}),
                7,
                "invalid network config: group: invalid type",
            ),
            (
                json!({"bridge": 3}),
                7,
                "invalid network config: bridge: invalid type",
            ),
            (
                json!({"bridge": "a-bridge-name-too-long"}),
                7,
                "invalid network config: bridge: interface name",
            ),
            (
                json!({"bridge": "a/b"}),
                7,
                "invalid network config: bridge: interface name",
            ),
            (
                json!({"mac": "zz"}),
                7,
                "invalid network config: mac: \"zz\" is not a MAC",
            ),
            (
                json!({"mac": "01:00:5e:00:00:01"}),
                7,
                "invalid network config: mac: \"01:00:5e:00:00:01\" is a multicast",
            ),
            (
                json!({"runtimeConfig": {"mac": "00:00:00:00:00:00"}}),
                7,
                "invalid network config: runtimeConfig.mac: \"00:00:00:00:00:00\" is the zero",
            ),
            (
                json!({"args": {"cni": {"mac": 5}}}),
                7,
                "invalid network config: args.cni.mac: invalid type",
            ),
            (
                json!({"selinuxContext": "system_u:system_r:container_t:s0"}),
                2,
                "unsupported field \"selinuxContext\": \
                 \"system_u:system_r:container_t:s0\": SELinux is not enabled on this node",
            ),
            (
                json!({"selinuxContext": 1}),
                7,
                "invalid network config: selinuxContext: invalid type",
            ),
        ] {
            let e = conf(v.clone()).unwrap_err();
            assert_eq!(e.code(), code, "{v}: {e}");
            assert!(e.to_string().starts_with(want), "{v}: {e}");
        }
        let e = conf_env(json!({}), Some("nope")).unwrap_err();
        assert_eq!(e.code(), 4);
        assert!(e.to_string().starts_with("CNI_ARGS MAC: \"nope\""), "{e}");
    }
}
