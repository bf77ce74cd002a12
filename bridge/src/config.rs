//! The bridge plugin's config: its keys parsed from stdin, validated before
//! anything on the node is touched. Every rejection is code 7 (or 4 for
//! `CNI_ARGS`, 2 for what this build or kernel cannot do) naming the key.

use libcni::mac::{self, MacSource};
use libcni::mac::{MacArgs, MacKey};
use libcni::netfilter::Backend;
use libcni::skel::CmdArgs;
use libcni::types::config::validate_link_name;
use libcni::types::{Dns, DnsConf, IpamConf};
use libcni::Error;
use serde::Deserialize;

/// The bridge's name when the config has none.
pub const DEFAULT_BRIDGE: &str = "cni0";

/// The keys as they come (JSON types only; meaning is checked in
/// [`Conf::from_raw`]).
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    bridge: Option<String>,
    #[serde(rename = "isGateway", default)]
    is_gateway: bool,
    #[serde(rename = "isDefaultGateway", default)]
    is_default_gateway: bool,
    #[serde(rename = "forceAddress", default)]
    force_address: bool,
    #[serde(rename = "ipMasq", default)]
    ip_masq: bool,
    #[serde(rename = "ipMasqBackend", default)]
    ip_masq_backend: Option<String>,
    #[serde(default)]
    mtu: i64,
    #[serde(rename = "hairpinMode", default)]
    hairpin_mode: bool,
    #[serde(rename = "promiscMode", default)]
    promisc_mode: bool,
    #[serde(default)]
    vlan: i64,
    #[serde(rename = "vlanTrunk", default)]
    vlan_trunk: Option<Vec<RawTrunk>>,
    #[serde(rename = "preserveDefaultVlan", default)]
    preserve_default_vlan: bool,
    #[serde(default)]
    macspoofchk: bool,
    #[serde(default)]
    enabledad: bool,
    #[serde(rename = "disableContainerInterface", default)]
    disable_container_interface: bool,
    #[serde(rename = "portIsolation", default)]
    port_isolation: bool,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: MacKey,
    #[serde(default)]
    args: MacArgs,
    #[serde(default)]
    ipam: Option<IpamConf>,
    #[serde(default)]
    dns: Option<DnsConf>,
}

/// One `vlanTrunk` entry: `{"id": 5}` or `{"minID": 10, "maxID": 20}`.
#[derive(Debug, Default, Deserialize)]
struct RawTrunk {
    #[serde(rename = "minID", default)]
    min_id: Option<i64>,
    #[serde(rename = "maxID", default)]
    max_id: Option<i64>,
    #[serde(default)]
    id: Option<i64>,
}

/// A validated bridge config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// `bridge`.
    pub bridge: String,
    /// `isGateway`, forced on by `isDefaultGateway`.
    pub is_gateway: bool,
    pub is_default_gateway: bool,
    pub force_address: bool,
    /// `ipMasq`: masquerade the container's traffic leaving its subnet.
    pub ip_masq: bool,
    /// `ipMasqBackend`; `None` (absent) picks the Go v1.9 plugin's default
    /// at the time of use ([`Conf::masq_backend`]): iptables wherever the
    /// node has it, nftables where it has none.
    pub ip_masq_backend: Option<Backend>,
    /// `macspoofchk`: drop frames from the port whose source MAC is not
    /// the container's.
    pub macspoofchk: bool,
    /// `mtu`; `None` (0 in the config) keeps the kernel's default.
    pub mtu: Option<u32>,
    pub hairpin: bool,
    pub promisc: bool,
    /// `vlan`: the access VLAN of the port (with a trunk, its native
    /// VLAN: PVID, untagged), 0 for none.
    pub vlan: u16,
    /// `vlanTrunk`, as sorted VLAN ID ranges (no overlap, no adjacency).
    pub trunk: Vec<(u16, u16)>,
    pub preserve_default_vlan: bool,
    pub enable_dad: bool,
    pub disable_container_interface: bool,
    pub port_isolation: bool,
    /// The container MAC: `CNI_ARGS MAC=` < `args.cni.mac` < `runtimeConfig.mac`.
    pub mac: Option<[u8; 6]>,
    /// `ipam.type`; `None` for `"ipam": {}` (layer 2 only).
    pub ipam: Option<String>,
    /// `dns`, kept when it sets anything: it replaces IPAM's ([`libcni::attach::apply_dns`]).
    pub dns: Option<Dns>,
}

impl Conf {
    /// Parses and validates the config of `args` (ADD and CHECK).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        let raw: Raw = args.config()?;
        let env_mac = libcni::mac::from_cni_args(&args.cni_args()?)?;
        Conf::from_raw(raw, env_mac.as_deref())
    }

    fn from_raw(raw: Raw, env_mac: Option<&str>) -> Result<Conf, Error> {
        let ipam = IpamConf::plugin(raw.ipam.clone());
        let dns = raw.dns.clone();
        let bridge = raw.bridge.unwrap_or_else(|| DEFAULT_BRIDGE.to_string());
        validate_link_name("bridge", &bridge)?;

        let ip_masq_backend = raw
            .ip_masq_backend
            .as_deref()
            .map(|b| Backend::parse("ipMasqBackend", b))
            .transpose()?;
        if raw.ip_masq && ipam.is_none() {
            return Err(Error::config(
                "ipam, ipMasq",
                "masquerading needs the container addresses an IPAM plugin gives; \
                 set ipam.type or remove ipMasq",
            ));
        }
        if raw.hairpin_mode && raw.promisc_mode {
            return Err(Error::config(
                "hairpinMode, promiscMode",
                "cannot both be true",
            ));
        }
        if ipam.is_some() && raw.disable_container_interface {
            return Err(Error::config(
                "ipam, disableContainerInterface",
                "an IPAM plugin cannot configure a container interface that is left down; \
                 use \"ipam\": {} with disableContainerInterface",
            ));
        }
        let mtu = libcni::attach::own_link_mtu(raw.mtu)?;
        let vlan = match raw.vlan {
            v @ 0..=4094 => v as u16,
            v => {
                return Err(Error::config(
                    "vlan",
                    format!("invalid VLAN ID {v} (must be between 0 and 4094)"),
                ))
            }
        };
        let trunk = match &raw.vlan_trunk {
            Some(items) => collect_trunk(items)?,
            None => Vec::new(),
        };
        let is_gateway = raw.is_gateway || raw.is_default_gateway;
        if vlan != 0 && is_gateway {
            // The gateway then lives on a veth named <bridge>.<vlan>.
            validate_link_name("bridge, vlan", &format!("{bridge}.{vlan}"))?;
        }

        // Lowest to highest precedence; only the one that wins is parsed.
        let mac = mac::choose([
            (MacSource::CniArgs, env_mac),
            (MacSource::ArgsCni, raw.args.cni.mac.as_deref()),
            (MacSource::RuntimeConfig, raw.runtime_config.mac.as_deref()),
        ])?;

        Ok(Conf {
            bridge,
            is_gateway,
            is_default_gateway: raw.is_default_gateway,
            force_address: raw.force_address,
            ip_masq: raw.ip_masq,
            ip_masq_backend,
            macspoofchk: raw.macspoofchk,
            mtu,
            hairpin: raw.hairpin_mode,
            promisc: raw.promisc_mode,
            vlan,
            trunk,
            preserve_default_vlan: raw.preserve_default_vlan,
            enable_dad: raw.enabledad,
            disable_container_interface: raw.disable_container_interface,
            port_isolation: raw.port_isolation,
            mac,
            ipam,
            dns: dns.and_then(DnsConf::into_set),
        })
    }

    /// The backend of `ipMasq`: `ipMasqBackend`, or the Go plugins' default
    /// (iptables wherever the node has it, nftables otherwise).
    pub fn masq_backend(&self) -> Backend {
        self.ip_masq_backend
            .unwrap_or_else(libcni::netfilter::default_backend)
    }

    /// Whether the port gets VLANs (so the bridge needs VLAN filtering).
    pub fn wants_vlans(&self) -> bool {
        self.vlan != 0 || !self.trunk.is_empty()
    }

    /// The config key that asks for VLANs, with its value, for errors.
    pub fn vlan_key(&self) -> (&'static str, String) {
        if self.vlan != 0 {
            ("vlan", self.vlan.to_string())
        } else {
            let ranges: Vec<String> = self
                .trunk
                .iter()
                .map(|(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect();
            ("vlanTrunk", format!("[{}]", ranges.join(", ")))
        }
    }
}

/// `vlanTrunk` as Go's `collectVlanTrunk` reads it (IDs 1-4094, `minID`
/// and `maxID` together), merged into sorted, disjoint ranges.
fn collect_trunk(items: &[RawTrunk]) -> Result<Vec<(u16, u16)>, Error> {
    let mut ids = vec![false; 4095];
    let in_range = |key: String, v: i64| -> Result<usize, Error> {
        if (1..=4094).contains(&v) {
            Ok(v as usize)
        } else {
            Err(Error::config(
                key,
                format!("invalid VLAN ID {v} (must be between 1 and 4094)"),
            ))
        }
    };
    for (i, item) in items.iter().enumerate() {
        match (item.min_id, item.max_id) {
            (Some(min), Some(max)) => {
                let min = in_range(format!("vlanTrunk[{i}].minID"), min)?;
                let max = in_range(format!("vlanTrunk[{i}].maxID"), max)?;
                if max < min {
                    return Err(Error::config(
                        format!("vlanTrunk[{i}]"),
                        format!("minID {min} is greater than maxID {max}"),
                    ));
                }
                ids[min..=max].iter_mut().for_each(|x| *x = true);
            }
            (None, Some(_)) => {
                return Err(Error::config(
                    format!("vlanTrunk[{i}].minID"),
                    "missing: minID and maxID go together",
                ))
            }
            (Some(_), None) => {
                return Err(Error::config(
                    format!("vlanTrunk[{i}].maxID"),
                    "missing: minID and maxID go together",
                ))
            }
            (None, None) => {}
        }
        if let Some(id) = item.id {
            ids[in_range(format!("vlanTrunk[{i}].id"), id)?] = true;
        }
    }
    let mut ranges: Vec<(u16, u16)> = Vec::new();
    for (id, on) in ids.iter().enumerate() {
        if !on {
            continue;
        }
        let id = id as u16;
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == id => *last = id,
            _ => ranges.push((id, id)),
        }
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn conf(v: Value) -> Result<Conf, Error> {
        conf_with(v, None, None)
    }

    fn conf_with(
        mut v: Value,
        env_mac: Option<&str>,
        args_mac: Option<&str>,
    ) -> Result<Conf, Error> {
        if let Some(m) = args_mac {
            v["args"] = json!({"cni": {"mac": m}});
        }
        let raw: Raw = libcni::skel::parse_config(v.to_string().as_bytes())?;
        Conf::from_raw(raw, env_mac)
    }

    fn err(v: Value) -> (u32, String) {
        let e = conf(v).unwrap_err();
        (e.code(), e.to_string())
    }

    #[test]
    fn defaults() {
        let c =
            conf(json!({"name": "n", "type": "bridge", "ipam": {"type": "host-local"}})).unwrap();
        assert_eq!(c.bridge, "cni0");
        assert_eq!(c.ipam.as_deref(), Some("host-local"));
        assert!(!c.is_gateway && !c.hairpin && !c.promisc && !c.wants_vlans());
        assert_eq!((c.mtu, c.vlan, c.mac, c.dns), (None, 0, None, None));
        assert!(!c.preserve_default_vlan, "false since v1.8.0");
        let c = conf(json!({"ipam": {}})).unwrap();
        assert_eq!(c.ipam, None, "ipam {{}} is layer 2 only");
    }

    #[test]
    fn default_gateway_forces_gateway() {
        let c = conf(json!({"isDefaultGateway": true})).unwrap();
        assert!(c.is_gateway && c.is_default_gateway);
    }

    #[test]
    fn contradictions_are_code_7_naming_both_keys() {
        let (code, msg) = err(json!({"hairpinMode": true, "promiscMode": true}));
        assert_eq!(code, 7);
        assert_eq!(
            msg,
            "invalid network config: hairpinMode, promiscMode: cannot both be true"
        );
        let (code, msg) =
            err(json!({"ipam": {"type": "host-local"}, "disableContainerInterface": true}));
        assert_eq!(code, 7);
        assert!(
            msg.starts_with("invalid network config: ipam, disableContainerInterface: "),
            "{msg}"
        );
        assert!(conf(json!({"ipam": {}, "disableContainerInterface": true})).is_ok());
    }

    #[test]
    fn vlan_with_a_trunk_is_the_native_vlan() {
        // Since v1.8 `vlan` and `vlanTrunk` go together: `vlan` is the
        // trunk port's native (PVID, untagged) VLAN.
        let c =
            conf(json!({"vlan": 5, "vlanTrunk": [{"id": 6}, {"minID": 10, "maxID": 12}]})).unwrap();
        assert_eq!((c.vlan, c.trunk.as_slice()), (5, &[(6, 6), (10, 12)][..]));
        assert_eq!(c.vlan_key(), ("vlan", "5".to_string()));
        assert!(c.wants_vlans());
    }

    #[test]
    fn vlan_ids_are_checked() {
        for bad in [-1, 4095, 100000] {
            let (code, msg) = err(json!({"vlan": bad}));
            assert_eq!(code, 7);
            assert_eq!(
                msg,
                format!("invalid network config: vlan: invalid VLAN ID {bad} (must be between 0 and 4094)")
            );
        }
        assert_eq!(conf(json!({"vlan": 4094})).unwrap().vlan, 4094);
        let (code, msg) = err(json!({"vlan": "5"}));
        assert_eq!(code, 7);
        assert!(
            msg.starts_with("invalid network config: vlan: invalid type"),
            "{msg}"
        );
    }

    #[test]
    fn trunk_ranges_are_checked_and_merged() {
        let c = conf(json!({"vlanTrunk": [
            {"minID": 10, "maxID": 20}, {"id": 21}, {"id": 5}, {"minID": 15, "maxID": 30}, {"id": 4094}
        ]}))
        .unwrap();
        assert_eq!(c.trunk, [(5, 5), (10, 30), (4094, 4094)]);
        assert!(c.wants_vlans());
        assert_eq!(c.vlan_key(), ("vlanTrunk", "[5, 10-30, 4094]".to_string()));
        let cases = [
            (
                json!([{"minID": 0, "maxID": 5}]),
                "vlanTrunk[0].minID: invalid VLAN ID 0",
            ),
            (
                json!([{"id": 1}, {"minID": 3, "maxID": 4095}]),
                "vlanTrunk[1].maxID: invalid VLAN ID 4095",
            ),
            (
                json!([{"minID": 9, "maxID": 3}]),
                "vlanTrunk[0]: minID 9 is greater than maxID 3",
            ),
            (json!([{"maxID": 3}]), "vlanTrunk[0].minID: missing"),
            (json!([{"minID": 3}]), "vlanTrunk[0].maxID: missing"),
            (json!([{"id": -2}]), "vlanTrunk[0].id: invalid VLAN ID -2"),
        ];
        for (trunk, want) in cases {
            let (code, msg) = err(json!({"vlanTrunk": trunk}));
            assert_eq!(code, 7, "{msg}");
            assert!(
                msg.starts_with(&format!("invalid network config: {want}")),
                "{msg} vs {want}"
            );
        }
        assert!(!conf(json!({"vlanTrunk": []})).unwrap().wants_vlans());
    }

    #[test]
    fn netfilter_keys() {
        let c = conf(json!({"ipam": {"type": "host-local"}})).unwrap();
        assert_eq!(
            (c.ip_masq, c.ip_masq_backend, c.macspoofchk),
            (false, None, false)
        );
        let c = conf(json!({"ipam": {"type": "host-local"}, "ipMasq": true,
                            "ipMasqBackend": "iptables", "macspoofchk": true}))
        .unwrap();
        assert_eq!(
            (c.ip_masq, c.ip_masq_backend, c.macspoofchk),
            (true, Some(Backend::Iptables), true)
        );
        assert_eq!(c.masq_backend(), Backend::Iptables);
        let c = conf(json!({"ipam": {"type": "host-local"}, "ipMasqBackend": "nftables"})).unwrap();
        assert_eq!(c.ip_masq_backend, Some(Backend::Nftables));
        // Layer 2 only: a spoof check is fine, masquerade has no address.
        assert!(
            conf(json!({"ipam": {}, "macspoofchk": true}))
                .unwrap()
                .macspoofchk
        );
        let (code, msg) = err(json!({"ipam": {}, "ipMasq": true}));
        assert_eq!(code, 7);
        assert!(
            msg.starts_with("invalid network config: ipam, ipMasq: masquerading needs"),
            "{msg}"
        );
        let (code, msg) = err(json!({"ipMasqBackend": "pf"}));
        assert_eq!(code, 7);
        assert_eq!(
            msg,
            "invalid network config: ipMasqBackend: unknown backend \"pf\" \
             (expected \"nftables\" or \"iptables\")"
        );
        let (code, msg) = err(json!({"ipMasq": "yes"}));
        assert_eq!(code, 7);
        assert!(
            msg.starts_with("invalid network config: ipMasq: invalid type"),
            "{msg}"
        );
    }

    #[test]
    fn names_and_mtu() {
        let (code, msg) = err(json!({"bridge": "a-name-that-is-too-long"}));
        assert_eq!(code, 7);
        assert!(
            msg.starts_with("invalid network config: bridge: interface name"),
            "{msg}"
        );
        assert_eq!(err(json!({"bridge": "a/b"})).0, 7);
        assert_eq!(err(json!({"bridge": ""})).0, 7);
        let (_, msg) = err(json!({"bridge": "br-0123456789", "vlan": 100, "isGateway": true}));
        assert!(
            msg.contains("bridge, vlan: interface name \"br-0123456789.100\""),
            "{msg}"
        );
        assert_eq!(conf(json!({"mtu": 1400})).unwrap().mtu, Some(1400));
        assert_eq!(conf(json!({"mtu": 0})).unwrap().mtu, None);
        for bad in [-1, 67, 65536] {
            let (code, msg) = err(json!({"mtu": bad}));
            assert_eq!(code, 7);
            assert!(msg.starts_with(&format!(
                "invalid network config: mtu: {bad} is out of range"
            )));
        }
    }

    #[test]
    fn mac_precedence_and_validation() {
        let base = json!({"args": {"cni": {"mac": "02:00:00:00:00:02"}},
                          "runtimeConfig": {"mac": "02:00:00:00:00:03"}});
        let c = conf_with(base, Some("02:00:00:00:00:01"), Some("02:00:00:00:00:02")).unwrap();
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 3]));
        let c = conf_with(
            json!({}),
            Some("02:00:00:00:00:01"),
            Some("0A-00-00-00-00-02"),
        )
        .unwrap();
        assert_eq!(c.mac, Some([0x0a, 0, 0, 0, 0, 2]));
        let c = conf_with(json!({}), Some("02:00:00:00:00:01"), None).unwrap();
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 1]));

        let e = conf_with(
            json!({"runtimeConfig": {"mac": "01:00:5e:00:00:01"}}),
            None,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(
            e.to_string()
                .contains("runtimeConfig.mac: \"01:00:5e:00:00:01\" is a multicast"),
            "{e}"
        );
        let e = conf_with(json!({}), None, Some("zz")).unwrap_err();
        assert!(
            e.to_string()
                .contains("args.cni.mac: \"zz\" is not a MAC address"),
            "{e}"
        );
        let e = conf_with(json!({}), Some("1:2:3"), None).unwrap_err();
        assert_eq!(e.code(), 4);
        assert!(e.to_string().starts_with("CNI_ARGS MAC:"), "{e}");
        let e = conf_with(json!({"runtimeConfig": {"mac": 5}}), None, None).unwrap_err();
        assert!(
            e.to_string()
                .contains("runtimeConfig.mac: invalid type: integer `5`, expected a string"),
            "{e}"
        );
    }

    #[test]
    fn dns_replaces_only_when_set() {
        let c = conf(json!({"dns": {"nameservers": ["10.0.0.53"]}})).unwrap();
        assert_eq!(c.dns.unwrap().nameservers, ["10.0.0.53"]);
        assert_eq!(conf(json!({"dns": {}})).unwrap().dns, None);
    }
}
