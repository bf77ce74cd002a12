//! The veth and tap of one attachment as the result and the kernel record
//! them.
//!
//! The result is awslabs' shape: `prevResult`, then the tap (its name, its
//! MAC, `sandbox` the namespace path), then the VM's interface, a
//! "pseudo-interface" that no kernel holds: the tap's name, the veth's MAC
//! (the VM takes over the pod's identity) and `sandbox` the container ID
//! (for a VM runtime, the VM's ID). Each address of the veth is listed a
//! second time for the VM's interface; the first listing and the veth's
//! addresses in the kernel stay as they are. firecracker-go-sdk's `vmconf`
//! reads the VM's network configuration from exactly that.
//!
//! In the kernel the tap carries an alias naming its attachment (network,
//! container ID, interface), so that DEL finds it with no `prevResult` or
//! `CNI_ARGS` at all: after a crashed ADD the runtime has no result to give.

use libcni::netlink::Link;
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, Interface, IpConfig};
use libcni::Error;
use sha2::{Digest, Sha256};

/// What every alias of ours starts with.
pub const ALIAS_PREFIX: &str = "tc-redirect-tap/";
/// `IFALIASZ` - 1: the longest alias the kernel keeps.
const MAX_ALIAS: usize = 255;

/// The alias of the attachment's tap: `tc-redirect-tap/<network>/<container
/// ID>/<interface>`, or, when that is too long for the kernel,
/// `tc-redirect-tap/sha256/<hex of the three, NUL-separated>`.
pub fn alias(args: &CmdArgs) -> String {
    let plain = format!(
        "{ALIAS_PREFIX}{}/{}/{}",
        args.conf.name, args.container_id, args.ifname
    );
    if plain.len() <= MAX_ALIAS {
        return plain;
    }
    let mut h = Sha256::new();
    for part in [&args.conf.name, &args.container_id, &args.ifname] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{ALIAS_PREFIX}sha256/{hex}")
}

/// The index in `prev` of the container interface to redirect: the one
/// named `CNI_IFNAME` with a `sandbox`. Its absence is code 7 naming
/// `prevResult.interfaces`.
pub fn sandbox_interface(prev: &CniResult, ifname: &str) -> Result<usize, Error> {
    if let Some(i) = prev.container_interface(ifname) {
        return Ok(i);
    }
    let listed: Vec<&str> = prev
        .interfaces
        .iter()
        .filter(|i| !i.sandbox.is_empty())
        .map(|i| i.name.as_str())
        .collect();
    let why = if listed.is_empty() {
        format!(
            "no interface with a sandbox (a container interface) to redirect to a tap: \
             tc-redirect-tap goes after the plugin that makes CNI_IFNAME {ifname:?}"
        )
    } else {
        format!(
            "no interface {ifname:?} (CNI_IFNAME) with a sandbox to redirect to a tap; \
             the container interfaces listed are {listed:?}"
        )
    };
    Err(Error::config("prevResult.interfaces", why))
}

/// `prev` with the tap and the VM's interface added, and the addresses of
/// interface `veth_at` of `prev` listed again for the VM's interface.
pub fn result_with_tap(
    prev: &CniResult,
    veth_at: usize,
    veth: &Link,
    tap: &Link,
    args: &CmdArgs,
) -> CniResult {
    let mut r = prev.clone();
    r.interfaces.push(Interface {
        name: tap.name.clone(),
        mac: tap.mac_string(),
        sandbox: args.netns.clone(),
        ..Interface::default()
    });
    r.interfaces.push(Interface {
        name: tap.name.clone(),
        mac: veth.mac_string(),
        sandbox: args.container_id.clone(),
        ..Interface::default()
    });
    let vm = r.interfaces.len() - 1;
    let copies: Vec<IpConfig> = prev
        .ips
        .iter()
        .filter(|ip| ip.interface == Some(veth_at))
        .map(|ip| IpConfig {
            interface: Some(vm),
            ..ip.clone()
        })
        .collect();
    r.ips.extend(copies);
    r
}

/// The VM's interface and the tap of `result` (as [`result_with_tap`]
/// makes them): the one interface whose sandbox is the container ID, and
/// the one interface of its name in another sandbox. What is missing or
/// more than once is said in `Err`.
pub fn vm_and_tap<'a>(
    result: &'a CniResult,
    container_id: &str,
) -> Result<(&'a Interface, &'a Interface), String> {
    let vm: Vec<&Interface> = result
        .interfaces
        .iter()
        .filter(|i| i.sandbox == container_id)
        .collect();
    let vm = match vm.as_slice() {
        [one] => *one,
        [] => {
            return Err(format!(
                "no VM interface (sandbox {container_id:?}, the container ID) in prevResult"
            ))
        }
        more => {
            return Err(format!(
                "{} interfaces with sandbox {container_id:?} (the container ID) in prevResult, \
                 one expected",
                more.len()
            ))
        }
    };
    let taps: Vec<&Interface> = result
        .interfaces
        .iter()
        .filter(|i| i.name == vm.name && i.sandbox != container_id)
        .collect();
    match taps.as_slice() {
        [one] => Ok((vm, *one)),
        [] => Err(format!("no tap {:?} in prevResult", vm.name)),
        more => Err(format!(
            "{} interfaces named {:?} besides the VM's in prevResult, one expected",
            more.len(),
            vm.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::Version;
    use serde_json::json;

    fn args(net: &str, cid: &str) -> CmdArgs {
        let mut a = libcni::skel::test_args(
            &json!({"cniVersion": "1.0.0", "name": net, "type": "tc-redirect-tap"}).to_string(),
        );
        a.container_id = cid.into();
        a.netns = "/run/netns/pod".into();
        a
    }

    fn prev() -> CniResult {
        CniResult::from_json(
            &json!({"cniVersion": "1.0.0",
                "interfaces": [
                    {"name": "cni0", "mac": "0a:00:00:00:00:01"},
                    {"name": "veth1", "mac": "0a:00:00:00:00:02"},
                    {"name": "eth0", "mac": "0a:00:00:00:00:03", "sandbox": "/run/netns/pod"}],
                "ips": [
                    {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 2},
                    {"address": "fd00::5/64", "interface": 2},
                    {"address": "10.9.0.1/24", "interface": 0},
                    {"address": "10.8.0.1/24"}],
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}],
                "dns": {"nameservers": ["10.1.0.10"]}}),
            Version::V1_0_0,
        )
        .unwrap()
        .0
    }

    fn link(name: &str, mac: [u8; 6]) -> Link {
        Link {
            index: 5,
            name: name.into(),
            mtu: 1500,
            mac: Some(mac),
            hw_addr: mac.to_vec(),
            up: true,
            ..Link::default()
        }
    }

    #[test]
    fn the_alias_names_the_attachment() {
        assert_eq!(
            alias(&args("fcnet", "vm-1")),
            "tc-redirect-tap/fcnet/vm-1/eth0"
        );
        let long = "c".repeat(300);
        let a = alias(&args("fcnet", &long));
        assert!(a.starts_with("tc-redirect-tap/sha256/"), "{a}");
        assert_eq!(a.len(), "tc-redirect-tap/sha256/".len() + 64);
        assert_ne!(a, alias(&args("fcnet2", &long)));
    }

    #[test]
    fn the_sandbox_interface_is_cni_ifname_with_a_sandbox() {
        let p = prev();
        assert_eq!(sandbox_interface(&p, "eth0").unwrap(), 2);
        let e = sandbox_interface(&p, "net1").unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(e.to_string().contains("prevResult.interfaces"), "{e}");
        assert!(e.to_string().contains("[\"eth0\"]"), "{e}");
        // A host-side interface of that name is not it.
        let e = sandbox_interface(&p, "veth1").unwrap_err();
        assert!(e.to_string().contains("CNI_IFNAME"), "{e}");
        let mut none = p.clone();
        none.interfaces.retain(|i| i.sandbox.is_empty());
        let e = sandbox_interface(&none, "eth0").unwrap_err();
        assert!(e.to_string().contains("no interface with a sandbox"), "{e}");
    }

    #[test]
    fn the_result_is_prev_plus_the_tap_and_the_vm() {
        let p = prev();
        let a = args("fcnet", "vm-1");
        let veth = link("eth0", [0x0a, 0, 0, 0, 0, 3]);
        let tap = link("tap0", [0x0a, 0, 0, 0, 0, 9]);
        let r = result_with_tap(&p, 2, &veth, &tap, &a);
        let v = r.to_json(Version::V1_0_0).unwrap();
        assert_eq!(
            v,
            json!({"cniVersion": "1.0.0",
                "interfaces": [
                    {"name": "cni0", "mac": "0a:00:00:00:00:01"},
                    {"name": "veth1", "mac": "0a:00:00:00:00:02"},
                    {"name": "eth0", "mac": "0a:00:00:00:00:03", "sandbox": "/run/netns/pod"},
                    {"name": "tap0", "mac": "0a:00:00:00:00:09", "sandbox": "/run/netns/pod"},
                    {"name": "tap0", "mac": "0a:00:00:00:00:03", "sandbox": "vm-1"}],
                "ips": [
                    {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 2},
                    {"address": "fd00::5/64", "interface": 2},
                    {"address": "10.9.0.1/24", "interface": 0},
                    {"address": "10.8.0.1/24"},
                    {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 4},
                    {"address": "fd00::5/64", "interface": 4}],
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}],
                "dns": {"nameservers": ["10.1.0.10"]}})
        );
        let (vm, t) = vm_and_tap(&r, "vm-1").unwrap();
        assert_eq!(
            (vm.name.as_str(), vm.mac.as_str()),
            ("tap0", "0a:00:00:00:00:03")
        );
        assert_eq!(
            (t.sandbox.as_str(), t.mac.as_str()),
            ("/run/netns/pod", "0a:00:00:00:00:09")
        );
    }

    #[test]
    fn the_vm_and_its_tap_are_found_once_each() {
        let p = prev();
        let a = args("fcnet", "vm-1");
        let r = result_with_tap(
            &p,
            2,
            &link("eth0", [0x0a, 0, 0, 0, 0, 3]),
            &link("tap0", [0x0a, 0, 0, 0, 0, 9]),
            &a,
        );
        assert!(vm_and_tap(&p, "vm-1")
            .unwrap_err()
            .contains("no VM interface"));
        assert!(vm_and_tap(&r, "vm-2")
            .unwrap_err()
            .contains("no VM interface"));
        let mut no_tap = r.clone();
        no_tap.interfaces.remove(3);
        assert!(vm_and_tap(&no_tap, "vm-1")
            .unwrap_err()
            .contains("no tap \"tap0\""));
        let mut two = r.clone();
        two.interfaces.push(two.interfaces[4].clone());
        assert!(vm_and_tap(&two, "vm-1")
            .unwrap_err()
            .contains("2 interfaces"));
    }
}
