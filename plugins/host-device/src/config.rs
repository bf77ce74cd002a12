//! The host-device plugin's config: upstream v1.9's keys (`device`,
//! `hwaddr`, `kernelpath`, `pciBusID`, the `deviceID` capability in
//! `runtimeConfig`, Go's untagged `DPDKMode`, and the shared `ipam` and
//! `dns`) parsed from stdin with Go's rules and checked for form before
//! anything is touched: every rejection is code 7 naming the key. What
//! needs the node (sysfs, links) is in [`crate::sysfs`] and
//! [`crate::device`]. host-device reads no `CNI_ARGS`, as Go's.

use std::path::{Component, Path, PathBuf};

use libcni::gojson::Lenient;
use libcni::mac::parse_hardware_addr;
use libcni::skel::CmdArgs;
use libcni::types::config::validate_link_name;
use libcni::types::{Dns, DnsConf, IpamConf};
use libcni::Error;
use serde::Deserialize;

/// Where a `kernelpath` must point below (Go's check).
pub const SYS_DEVICES: &str = "/sys/devices/";

/// The keys as they come (JSON types only).
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    device: Option<String>,
    #[serde(default)]
    hwaddr: Option<String>,
    #[serde(default)]
    kernelpath: Option<String>,
    #[serde(rename = "pciBusID", default)]
    pci_bus_id: Option<String>,
    /// Go's `NetConf.DPDKMode` has no JSON tag, so it is a key of that name.
    #[serde(rename = "DPDKMode", default)]
    dpdk_mode: bool,
    #[serde(rename = "useInterfaceNetwork", default)]
    use_interface_network: bool,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: RawRuntimeConfig,
    #[serde(default)]
    ipam: Option<IpamConf>,
    #[serde(default)]
    dns: Option<DnsConf>,
}

/// `runtimeConfig`: the `deviceID` capability (what an SR-IOV or DPDK
/// device plugin allocated to the pod, through multus).
#[derive(Debug, Default, Deserialize)]
struct RawRuntimeConfig {
    #[serde(rename = "deviceID", default)]
    device_id: Option<String>,
}

/// A config whose keys are all well-formed. Empty strings are absent, as
/// in Go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conf {
    /// `device`: the device's name on the node.
    pub device: Option<String>,
    /// `hwaddr`: its hardware address (6, 8 or 20 bytes).
    pub hwaddr: Option<Vec<u8>>,
    /// `kernelpath`: its sysfs device directory, below `/sys/devices/`
    /// (lexically cleaned, as Go's `filepath.Join` does).
    pub kernelpath: Option<PathBuf>,
    /// `pciBusID`: its PCI address (`0000:3b:02.1`).
    pub pci_bus_id: Option<String>,
    /// `runtimeConfig.deviceID`: a PCI address or an auxiliary device
    /// (`mlx5_core.sf.4`); it overrides `pciBusID`.
    pub device_id: Option<String>,
    /// `DPDKMode`: no kernel device to move (set from the PCI device's
    /// driver whenever a PCI address is given).
    pub dpdk_mode: bool,
    /// `useInterfaceNetwork`: the device's own addresses and routes go
    /// into the container with it (`crate::interface_network`).
    pub use_interface_network: bool,
    /// `ipam.type`; `None` for no IPAM (layer 2 only).
    pub ipam: Option<String>,
    /// `dns`, kept when it sets anything: it replaces IPAM's ([`libcni::attach::apply_dns`]).
    pub dns: Option<Dns>,
}

impl Conf {
    /// Parses and checks the config of `args` (ADD, CHECK, STATUS).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        Conf::from_raw(args.config()?)
    }

    fn from_raw(raw: Raw) -> Result<Conf, Error> {
        let given = |v: Option<String>| v.filter(|s| !s.is_empty());
        let device = given(raw.device);
        if let Some(d) = &device {
            validate_link_name("device", d)?;
        }
        let hwaddr = given(raw.hwaddr).map(|h| hwaddr(&h)).transpose()?;
        let kernelpath = given(raw.kernelpath).map(|p| kernelpath(&p)).transpose()?;
        let pci_bus_id = given(raw.pci_bus_id);
        if let Some(id) = &pci_bus_id {
            sysfs_name("pciBusID", id)?;
        }
        let device_id = given(raw.runtime_config.device_id);
        if let Some(id) = &device_id {
            sysfs_name("runtimeConfig.deviceID", id)?;
        }
        let conf = Conf {
            device,
            hwaddr,
            kernelpath,
            pci_bus_id,
            device_id,
            dpdk_mode: raw.dpdk_mode,
            use_interface_network: raw.use_interface_network,
            ipam: IpamConf::plugin(raw.ipam),
            dns: raw.dns.and_then(DnsConf::into_set),
        };
        if !conf.names_a_device() {
            return Err(Error::config(
                "device",
                "no device given: specify one of \"device\", \"hwaddr\", \"kernelpath\", \
                 \"pciBusID\" or the deviceID capability (runtimeConfig.deviceID)",
            ));
        }
        Ok(conf)
    }

    /// Whether any key names the device.
    pub fn names_a_device(&self) -> bool {
        self.device.is_some()
            || self.hwaddr.is_some()
            || self.kernelpath.is_some()
            || self.pci_bus_id.is_some()
            || self.device_id.is_some()
    }

    /// What DEL and GC read, leniently: a key that cannot be read or is
    /// ill-formed is said on stderr and taken as absent (ADD refused it
    /// before it moved anything on its account). Never fails.
    pub fn for_teardown(args: &CmdArgs) -> Conf {
        let raw: RawTeardown = args.config().unwrap_or_default();
        let text = |v: Lenient<String>, key: &str| v.usable(key).filter(|s| !s.is_empty());
        let keep = |key: &str, r: Result<(), Error>| match r {
            Ok(()) => true,
            Err(e) => {
                eprintln!("ignoring {key}: {e}");
                false
            }
        };
        let device =
            text(raw.device, "device").filter(|d| keep("device", validate_link_name("device", d)));
        let hwaddr = text(raw.hwaddr, "hwaddr").and_then(|h| {
            hwaddr(&h)
                .map_err(|e| eprintln!("ignoring hwaddr: {e}"))
                .ok()
        });
        let kernelpath = text(raw.kernelpath, "kernelpath").and_then(|p| {
            kernelpath(&p)
                .map_err(|e| eprintln!("ignoring kernelpath: {e}"))
                .ok()
        });
        let pci_bus_id = text(raw.pci_bus_id, "pciBusID")
            .filter(|id| keep("pciBusID", sysfs_name("pciBusID", id)));
        let device_id = raw
            .runtime_config
            .usable("runtimeConfig")
            .and_then(|r| text(r.device_id, "runtimeConfig.deviceID"))
            .filter(|id| {
                keep(
                    "runtimeConfig.deviceID",
                    sysfs_name("runtimeConfig.deviceID", id),
                )
            });
        Conf {
            device,
            hwaddr,
            kernelpath,
            pci_bus_id,
            device_id,
            dpdk_mode: raw.dpdk_mode.usable("DPDKMode").unwrap_or(false),
            // DEL moves the device back as always; what was copied goes with
            // the container's namespace.
            use_interface_network: false,
            ipam: args.teardown_ipam_type(),
            dns: None,
        }
    }
}

/// The keys DEL and GC read, each on its own.
#[derive(Debug, Default, Deserialize)]
struct RawTeardown {
    #[serde(default)]
    device: Lenient<String>,
    #[serde(default)]
    hwaddr: Lenient<String>,
    #[serde(default)]
    kernelpath: Lenient<String>,
    #[serde(rename = "pciBusID", default)]
    pci_bus_id: Lenient<String>,
    #[serde(rename = "DPDKMode", default)]
    dpdk_mode: Lenient<bool>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Lenient<RawTeardownRuntime>,
}

#[derive(Debug, Default, Deserialize)]
struct RawTeardownRuntime {
    #[serde(rename = "deviceID", default)]
    device_id: Lenient<String>,
}

/// `hwaddr` in one of Go's `ParseMAC` forms.
fn hwaddr(s: &str) -> Result<Vec<u8>, Error> {
    parse_hardware_addr(s).ok_or_else(|| {
        Error::config(
            "hwaddr",
            format!(
                "{s:?} is not a hardware address (want 6, 8 or 20 hex pairs such as \
                 aa:bb:cc:dd:ee:ff)"
            ),
        )
    })
}

/// `kernelpath`: absolute, below `/sys/devices/` as written and once
/// cleaned (a `..` may not climb out of it; Go checks only the text), and
/// naming something below it.
fn kernelpath(s: &str) -> Result<PathBuf, Error> {
    let bad = |why: &str| Error::config("kernelpath", format!("{s:?} {why}"));
    if !s.starts_with(SYS_DEVICES) {
        return Err(bad("must be an absolute path beginning with /sys/devices/"));
    }
    if s.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in Path::new(s).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(p) => parts.push(p),
            Component::Prefix(_) => return Err(bad("is not a Linux path")),
        }
    }
    let clean: PathBuf = std::iter::once(std::ffi::OsStr::new("/"))
        .chain(parts.iter().copied())
        .collect();
    if parts.len() < 3 || !clean.starts_with(SYS_DEVICES) {
        return Err(bad("must name a device directory below /sys/devices/"));
    }
    Ok(clean)
}

/// A name that is one entry of a sysfs directory (a PCI address, an
/// auxiliary device): no `/`, not `.` or `..`.
fn sysfs_name(key: &str, s: &str) -> Result<(), Error> {
    if s.contains('/') || s.contains('\0') || s == "." || s == ".." {
        return Err(Error::config(
            key,
            format!("{s:?} is not a device name (a PCI address such as 0000:3b:02.1)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn conf(v: Value) -> Result<Conf, Error> {
        Conf::from_raw(libcni::skel::parse_config(v.to_string().as_bytes())?)
    }

    #[test]
    fn every_key_and_go_s_spellings() {
        let c = conf(json!({
            "device": "ens1f0v3", "HWAddr": "0A-58-0A-00-00-05",
            "kernelpath": "/sys/devices/pci0000:3a/0000:3a:00.0/./0000:3b:02.1/",
            "PCIBusID": "0000:3b:02.1", "dpdkmode": true,
            "RuntimeConfig": {"DeviceID": "0000:3b:02.2"},
            "IPAM": {"type": "static"}, "dns": {"nameservers": ["10.0.0.10"]},
            "UseInterfaceNetwork": true
        }))
        .unwrap();
        assert_eq!(
            c,
            Conf {
                device: Some("ens1f0v3".into()),
                hwaddr: Some(vec![0x0a, 0x58, 0x0a, 0, 0, 5]),
                kernelpath: Some("/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1".into()),
                pci_bus_id: Some("0000:3b:02.1".into()),
                device_id: Some("0000:3b:02.2".into()),
                dpdk_mode: true,
                use_interface_network: true,
                ipam: Some("static".into()),
                dns: Some(Dns {
                    nameservers: vec!["10.0.0.10".into()],
                    ..Dns::default()
                }),
            }
        );
        // Empty strings are absent; IPAM is optional.
        let c = conf(json!({"device": "", "hwaddr": "", "kernelpath": "",
                            "runtimeConfig": {"deviceID": "mlx5_core.sf.4"}, "ipam": {}}))
        .unwrap();
        assert_eq!(
            (c.device, c.hwaddr, c.device_id.as_deref(), c.ipam),
            (None, None, Some("mlx5_core.sf.4"), None)
        );
        let ib = "00:00:00:48:fe:80:00:00:00:00:00:00:02:c9:03:00:00:0f:01:02";
        assert_eq!(
            conf(json!({"hwaddr": ib})).unwrap().hwaddr.unwrap().len(),
            20
        );
        // A `..` that stays below /sys/devices/ is cleaned as Go does.
        let c =
            conf(json!({"kernelpath": "/sys/devices/virtual/net/../../pci0000:00/0000:00:03.0"}))
                .unwrap();
        assert_eq!(
            c.kernelpath.unwrap(),
            Path::new("/sys/devices/pci0000:00/0000:00:03.0")
        );
    }

    #[test]
    fn invalid_keys_are_named() {
        for (v, want) in [
            (json!({}), "device: no device given"),
            (json!({"device": ""}), "device: no device given"),
            (json!({"runtimeConfig": {}}), "device: no device given"),
            (json!({"device": 5}), "device: invalid type"),
            (
                json!({"device": "a-device-name-too-long"}),
                "device: interface name",
            ),
            (
                json!({"device": "a/b"}),
                "device: interface name \"a/b\" contains",
            ),
            (
                json!({"hwaddr": "zz"}),
                "hwaddr: \"zz\" is not a hardware address",
            ),
            (
                json!({"hwaddr": "0a:58:0a:00:00"}),
                "hwaddr: \"0a:58:0a:00:00\"",
            ),
            (json!({"hwaddr": 1}), "hwaddr: invalid type"),
            (
                json!({"kernelpath": "sys/devices/x"}),
                "kernelpath: \"sys/devices/x\" must be",
            ),
            (
                json!({"kernelpath": "/proc/self"}),
                "kernelpath: \"/proc/self\" must be",
            ),
            (
                json!({"kernelpath": "/sys/devices"}),
                "kernelpath: \"/sys/devices\" must be",
            ),
            (
                json!({"kernelpath": "/sys/devices/"}),
                "kernelpath: \"/sys/devices/\" must name",
            ),
            (
                json!({"kernelpath": "/sys/devices/../../etc/x"}),
                "kernelpath: \"/sys/devices/../../etc/x\" must name",
            ),
            (
                json!({"kernelpath": "/sys/devices/a/../.."}),
                "kernelpath: \"/sys/devices/a/../..\" must name",
            ),
            (
                json!({"kernelpath": ["/sys/devices/x"]}),
                "kernelpath: invalid type",
            ),
            (
                json!({"pciBusID": "../../../etc"}),
                "pciBusID: \"../../../etc\" is not",
            ),
            (json!({"pciBusID": ".."}), "pciBusID: \"..\" is not"),
            (json!({"pciBusID": 3}), "pciBusID: invalid type"),
            (
                json!({"runtimeConfig": {"deviceID": "x/y"}}),
                "runtimeConfig.deviceID: \"x/y\" is not",
            ),
            (
                json!({"runtimeConfig": {"deviceID": 7}}),
                "runtimeConfig.deviceID: invalid type",
            ),
            (
                json!({"device": "eth1", "DPDKMode": "yes"}),
                "DPDKMode: invalid type",
            ),
            (json!({"device": "eth1", "dns": [1]}), "dns: invalid type"),
            (json!({"device": "eth1", "ipam": "x"}), "ipam: invalid type"),
        ] {
            let e = conf(v.clone()).unwrap_err();
            assert_eq!(e.code(), 7, "{v}: {e}");
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("invalid network config: {want}")),
                "{v}: {text}"
            );
        }
    }

    #[test]
    fn teardown_reads_what_it_can() {
        let args = |v: Value| libcni::skel::test_args(&v.to_string());
        let c = Conf::for_teardown(&args(json!({
            "cniVersion": "1.1.0", "name": "n", "device": 5, "hwaddr": "zz",
            "kernelpath": "/etc", "pciBusID": "0000:3b:02.1",
            "runtimeConfig": "garbage", "DPDKMode": "no", "ipam": {"type": "static"}
        })));
        assert_eq!(
            c,
            Conf {
                pci_bus_id: Some("0000:3b:02.1".into()),
                ipam: Some("static".into()),
                ..Conf::default()
            }
        );
        let c = Conf::for_teardown(&args(json!({
            "cniVersion": "1.1.0", "name": "n", "device": "ens1",
            "runtimeConfig": {"deviceID": "../x"}, "DPDKMode": true
        })));
        assert_eq!(
            (c.device.as_deref(), c.device_id, c.dpdk_mode),
            (Some("ens1"), None, true)
        );
        assert_eq!(
            Conf::for_teardown(&args(json!("not an object"))),
            Conf::default()
        );
    }
}
