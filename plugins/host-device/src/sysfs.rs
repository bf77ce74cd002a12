//! What the node's sysfs says about the device a config names, as Go's
//! host-device reads it: whether `runtimeConfig.deviceID` is a PCI or an
//! auxiliary device, which driver a PCI device is bound to (a userspace
//! one, `vfio-pci`, `uio_pci_generic` or `igb_uio`, means DPDK: no kernel
//! device to move), and which network device a sysfs device directory
//! holds (`<dir>/net/<name>`, the first by name; for a PCI device also
//! `virtio*/net/<name>`). The result is a [`Plan`]: which device to look
//! for on the node, and how.
//!
//! sysfs shows the network devices of the namespace it was mounted from:
//! the node's, where runtimes run plugins.

use std::io;
use std::path::{Path, PathBuf};

use libcni::Error;

use crate::config::Conf;

/// Drivers that hand a PCI network device to userspace (DPDK).
pub const USERSPACE_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio"];

/// PCI devices, by address.
pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// Auxiliary bus devices (sub-functions of a NIC, `mlx5_core.sf.4`).
pub const AUX_DEVICES: &str = "/sys/bus/auxiliary/devices";

/// A sysfs tree: the node's `/sys`, or a directory standing for it (unit
/// tests).
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// The node's `/sys`.
    pub fn node() -> Sysfs {
        Sysfs {
            root: PathBuf::from("/sys"),
        }
    }

    /// A tree at `root` standing for `/sys`.
    pub fn at(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    /// Where `/sys/...` is in this tree.
    fn real(&self, sys_path: &Path) -> PathBuf {
        match sys_path.strip_prefix("/sys") {
            Ok(rest) => self.root.join(rest),
            Err(_) => sys_path.to_path_buf(),
        }
    }

    fn exists(&self, sys_path: &Path) -> bool {
        self.real(sys_path).exists()
    }

    /// The name of the driver PCI device `id` is bound to (the last
    /// component of its `driver` link).
    pub fn pci_driver(&self, id: &str) -> io::Result<String> {
        let link = self.real(&Path::new(PCI_DEVICES).join(id).join("driver"));
        let target = std::fs::canonicalize(link)?;
        Ok(target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default())
    }

    /// The network device directory of PCI device `id`: `net`, or the
    /// first `virtio*/net` (a virtio NIC's netdev hangs off its virtio
    /// device).
    pub fn pci_net_dir(&self, id: &str) -> Option<PathBuf> {
        let dev = Path::new(PCI_DEVICES).join(id);
        let net = dev.join("net");
        if std::fs::symlink_metadata(self.real(&net)).is_ok() {
            return Some(net);
        }
        let mut virtio: Vec<String> = std::fs::read_dir(self.real(&dev))
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("virtio"))
            .filter(|n| self.exists(&dev.join(n).join("net")))
            .collect();
        virtio.sort();
        virtio.first().map(|v| dev.join(v).join("net"))
    }

    /// The first network device (by name) in the sysfs `net` directory
    /// `dir`: `Ok(None)` when it holds none.
    pub fn first_netdev(&self, dir: &Path) -> io::Result<Option<String>> {
        let mut names: Vec<String> = std::fs::read_dir(self.real(dir))?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<io::Result<_>>()?;
        names.sort();
        Ok(names.into_iter().next())
    }
}

/// How the device is found on the node, in Go's precedence: `device`,
/// `hwaddr`, `kernelpath`, then the PCI address (`runtimeConfig.deviceID`
/// over `pciBusID`), then an auxiliary device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// By name (`device`).
    Name(String),
    /// The first link with this hardware address (`hwaddr`).
    HwAddr(Vec<u8>),
    /// The first network device in a sysfs `net` directory: `key` named
    /// it (`kernelpath`, `pciBusID`, `runtimeConfig.deviceID`); `dir` is
    /// `None` for a PCI device with neither `net` nor `virtio*/net`.
    Sysfs {
        key: &'static str,
        what: String,
        dir: Option<PathBuf>,
    },
}

impl Pick {
    /// The config key this pick comes from.
    pub fn key(&self) -> &'static str {
        match self {
            Pick::Name(_) => "device",
            Pick::HwAddr(_) => "hwaddr",
            Pick::Sysfs { key, .. } => key,
        }
    }
}

/// What an ADD does with the config's device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// How to find the kernel network device.
    pub pick: Pick,
    /// DPDK: the PCI device is bound to a userspace driver (or the config
    /// says `DPDKMode` and gives no PCI address), so there is no kernel
    /// device: nothing is moved, IPAM's addresses are only reported.
    pub dpdk: bool,
    /// The PCI address, when the device was named by one (the result's
    /// `pciID`).
    pub pci: Option<String>,
}

impl Plan {
    /// Reads what the config needs from `sys`, as Go's `loadConf` does. A
    /// `deviceID` that is neither a PCI nor an auxiliary device, or a PCI
    /// device without a driver, is code 7 naming the key.
    pub fn resolve(conf: &Conf, sys: &Sysfs) -> Result<Plan, Error> {
        // The PCI address and the key it came from; or an auxiliary device.
        let mut pci = conf.pci_bus_id.clone().map(|id| (id, "pciBusID"));
        let mut aux = None;
        if let Some(id) = &conf.device_id {
            let key = "runtimeConfig.deviceID";
            if sys.exists(&Path::new(PCI_DEVICES).join(id)) {
                pci = Some((id.clone(), key));
            } else if sys.exists(&Path::new(AUX_DEVICES).join(id)) {
                pci = None;
                aux = Some(id.clone());
            } else {
                return Err(Error::config(
                    key,
                    format!(
                        "{id:?} is neither a PCI device ({PCI_DEVICES}/{id}) nor an auxiliary \
                         device ({AUX_DEVICES}/{id}) of this node"
                    ),
                ));
            }
        }
        let mut dpdk = conf.dpdk_mode;
        if let Some((id, key)) = &pci {
            if !sys.exists(&Path::new(PCI_DEVICES).join(id)) {
                return Err(Error::config(
                    *key,
                    format!("no PCI device {id:?} on this node ({PCI_DEVICES}/{id})"),
                ));
            }
            let driver = sys.pci_driver(id).map_err(|e| {
                Error::config(
                    *key,
                    format!(
                        "PCI device {id:?} has no driver bound ({PCI_DEVICES}/{id}/driver: {e})"
                    ),
                )
            })?;
            dpdk = USERSPACE_DRIVERS.contains(&driver.as_str());
        }
        let pick = if let Some(d) = &conf.device {
            Pick::Name(d.clone())
        } else if let Some(h) = &conf.hwaddr {
            Pick::HwAddr(h.clone())
        } else if let Some(p) = &conf.kernelpath {
            Pick::Sysfs {
                key: "kernelpath",
                what: p.display().to_string(),
                dir: Some(p.join("net")),
            }
        } else if let Some((id, key)) = &pci {
            Pick::Sysfs {
                key,
                what: format!("PCI device {id}"),
                dir: sys.pci_net_dir(id),
            }
        } else if let Some(id) = &aux {
            Pick::Sysfs {
                key: "runtimeConfig.deviceID",
                what: format!("auxiliary device {id}"),
                dir: Some(Path::new(AUX_DEVICES).join(id).join("net")),
            }
        } else {
            // Conf::parse refuses a config naming no device.
            return Err(Error::config("device", "no device given"));
        };
        let by_pci = matches!(&pick, Pick::Sysfs { key, .. } if *key != "kernelpath");
        Ok(Plan {
            pci: pci.filter(|_| by_pci || dpdk).map(|(id, _)| id),
            pick,
            dpdk,
        })
    }

    /// The name of the network device of a sysfs pick (in the node's
    /// sysfs): none there is code 7 naming the key.
    pub fn sysfs_netdev(
        sys: &Sysfs,
        key: &'static str,
        what: &str,
        dir: Option<&Path>,
    ) -> Result<String, Error> {
        let Some(dir) = dir else {
            return Err(Error::config(
                key,
                format!(
                    "{what} has no network device (no net/ or virtio*/net/ directory): \
                     is it bound to a network driver?"
                ),
            ));
        };
        match sys.first_netdev(dir) {
            Ok(Some(name)) => Ok(name),
            Ok(None) => Err(Error::config(
                key,
                format!("no network device in {} ({what})", dir.display()),
            )),
            Err(e) => Err(Error::config(
                key,
                format!("cannot read {} ({what}): {e}", dir.display()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs stand-in: PCI devices with network devices, a virtio NIC, a
    /// DPDK-bound one, one without driver, an auxiliary device.
    fn tree(tag: &str) -> (PathBuf, Sysfs) {
        let root = std::env::temp_dir().join(format!("hd-sysfs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = root.join("devices/pci0000:3a/0000:3a:00.0");
        for (addr, inner) in [
            ("0000:3b:02.1", "net/ens1f0v1"),
            ("0000:3b:02.2", "net/ens1f0v2"),
            ("0000:3b:02.3", "virtio7/net/eth9"),
            ("0000:3b:02.4", "iommu_group"),
            ("0000:3b:02.5", "power"),
        ] {
            std::fs::create_dir_all(dev.join(addr).join(inner)).unwrap();
        }
        std::fs::create_dir_all(dev.join("0000:3b:02.2/net/ens1f0v0")).unwrap();
        let bus = root.join("bus/pci");
        std::fs::create_dir_all(bus.join("devices")).unwrap();
        for d in ["iavf", "virtio-pci", "vfio-pci"] {
            std::fs::create_dir_all(bus.join("drivers").join(d)).unwrap();
        }
        for (addr, driver) in [
            ("0000:3b:02.1", Some("iavf")),
            ("0000:3b:02.2", Some("iavf")),
            ("0000:3b:02.3", Some("virtio-pci")),
            ("0000:3b:02.4", Some("vfio-pci")),
            ("0000:3b:02.5", None),
        ] {
            symlink(
                format!("../../../devices/pci0000:3a/0000:3a:00.0/{addr}"),
                bus.join("devices").join(addr),
            )
            .unwrap();
            if let Some(d) = driver {
                symlink(
                    format!("../../../../bus/pci/drivers/{d}"),
                    dev.join(addr).join("driver"),
                )
                .unwrap();
            }
        }
        std::fs::create_dir_all(root.join("bus/auxiliary/devices/mlx5_core.sf.4/net/enp59s0f0s4"))
            .unwrap();
        (root.clone(), Sysfs::at(root))
    }

    fn conf(f: impl FnOnce(&mut Conf)) -> Conf {
        let mut c = Conf::default();
        f(&mut c);
        c
    }

    fn netdev(sys: &Sysfs, plan: &Plan) -> Result<String, Error> {
        match &plan.pick {
            Pick::Sysfs { key, what, dir } => Plan::sysfs_netdev(sys, key, what, dir.as_deref()),
            other => panic!("not a sysfs pick: {other:?}"),
        }
    }

    #[test]
    fn plans_follow_go_s_precedence_and_sysfs() {
        let (root, sys) = tree("plans");
        // deviceID is a PCI address: it overrides pciBusID.
        let p = Plan::resolve(
            &conf(|c| {
                c.pci_bus_id = Some("0000:3b:02.1".into());
                c.device_id = Some("0000:3b:02.2".into());
            }),
            &sys,
        )
        .unwrap();
        assert_eq!((p.dpdk, p.pci.as_deref()), (false, Some("0000:3b:02.2")));
        assert_eq!(p.pick.key(), "runtimeConfig.deviceID");
        // The first device by name.
        assert_eq!(netdev(&sys, &p).unwrap(), "ens1f0v0");
        let p = Plan::resolve(&conf(|c| c.pci_bus_id = Some("0000:3b:02.1".into())), &sys).unwrap();
        assert_eq!(netdev(&sys, &p).unwrap(), "ens1f0v1");
        // A virtio NIC.
        let p = Plan::resolve(&conf(|c| c.pci_bus_id = Some("0000:3b:02.3".into())), &sys).unwrap();
        assert_eq!(netdev(&sys, &p).unwrap(), "eth9");
        // DPDK: bound to vfio-pci.
        let p = Plan::resolve(&conf(|c| c.device_id = Some("0000:3b:02.4".into())), &sys).unwrap();
        assert_eq!((p.dpdk, p.pci.as_deref()), (true, Some("0000:3b:02.4")));
        let e = netdev(&sys, &p).unwrap_err();
        assert!(e.to_string().contains("has no network device"), "{e}");
        // An auxiliary device: the PCI address is dropped, as in Go.
        let p = Plan::resolve(
            &conf(|c| {
                c.pci_bus_id = Some("0000:3b:02.1".into());
                c.device_id = Some("mlx5_core.sf.4".into());
            }),
            &sys,
        )
        .unwrap();
        assert_eq!((p.dpdk, p.pci.as_deref()), (false, None));
        assert_eq!(netdev(&sys, &p).unwrap(), "enp59s0f0s4");
        // device wins over everything; a PCI address still sets DPDK mode.
        let p = Plan::resolve(
            &conf(|c| {
                c.device = Some("eth1".into());
                c.hwaddr = Some(vec![2, 0, 0, 0, 0, 1]);
                c.device_id = Some("0000:3b:02.4".into());
            }),
            &sys,
        )
        .unwrap();
        assert_eq!((p.pick, p.dpdk), (Pick::Name("eth1".into()), true));
        let p = Plan::resolve(
            &conf(|c| {
                c.hwaddr = Some(vec![2, 0, 0, 0, 0, 1]);
                c.kernelpath = Some("/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1".into());
            }),
            &sys,
        )
        .unwrap();
        assert_eq!(p.pick, Pick::HwAddr(vec![2, 0, 0, 0, 0, 1]));
        // kernelpath: the net directory below it.
        let p = Plan::resolve(
            &conf(|c| {
                c.kernelpath = Some("/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:02.2".into())
            }),
            &sys,
        )
        .unwrap();
        assert_eq!(
            (netdev(&sys, &p).unwrap(), p.pci),
            ("ens1f0v0".into(), None)
        );
        let p = Plan::resolve(
            &conf(|c| c.kernelpath = Some("/sys/devices/pci0000:3a/0000:3a:00.0".into())),
            &sys,
        )
        .unwrap();
        let e = netdev(&sys, &p).unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(
            e.to_string()
                .starts_with("invalid network config: kernelpath: cannot read"),
            "{e}"
        );
        // DPDKMode from the config, without a PCI address.
        let p = Plan::resolve(
            &conf(|c| {
                c.device = Some("eth1".into());
                c.dpdk_mode = true;
            }),
            &sys,
        )
        .unwrap();
        assert_eq!((p.dpdk, p.pci), (true, None));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn sysfs_refusals_name_the_key() {
        let (root, sys) = tree("refusals");
        for (c, want) in [
            (
                conf(|c| c.device_id = Some("0000:ff:00.0".into())),
                "runtimeConfig.deviceID: \"0000:ff:00.0\" is neither a PCI device",
            ),
            (
                conf(|c| c.pci_bus_id = Some("0000:ff:00.0".into())),
                "pciBusID: no PCI device \"0000:ff:00.0\"",
            ),
            (
                conf(|c| {
                    c.device = Some("eth1".into());
                    c.pci_bus_id = Some("0000:3b:02.5".into());
                }),
                "pciBusID: PCI device \"0000:3b:02.5\" has no driver bound",
            ),
            (
                conf(|c| c.device_id = Some("0000:3b:02.5".into())),
                "runtimeConfig.deviceID: PCI device \"0000:3b:02.5\" has no driver bound",
            ),
        ] {
            let e = Plan::resolve(&c, &sys).unwrap_err();
            assert_eq!(e.code(), 7, "{e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("invalid network config: {want}")),
                "{e}"
            );
        }
        std::fs::remove_dir_all(root).unwrap();
    }
}
