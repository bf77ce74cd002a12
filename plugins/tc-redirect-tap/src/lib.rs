//! The `tc-redirect-tap` chained plugin: hands a pod's network to a
//! microVM. Chained after the plugin that made the container's interface
//! (bridge, ptp, ...), it creates a tap beside that interface in the
//! container's namespace and redirects every frame between the two with tc
//! (an ingress qdisc and a u32 match-all `mirred egress redirect` each
//! way, Kata's "tcfilter" model), so a VM monitor that attaches to the tap
//! takes over the pod's MAC and addresses. The upstream suite has no such
//! plugin: behaviour, `CNI_ARGS` and result follow awslabs'
//! `tc-redirect-tap` (used by firecracker-go-sdk and firecracker-containerd);
//! the deliberate differences are in the README.
//!
//! - `config`: `CNI_ARGS` (`TC_REDIRECT_TAP_NAME`, `_UID`, `_GID`);
//! - `pair`: the result (the tap and the VM's interface) and the alias that
//!   marks the tap;
//! - `add`, `del`, `check`: the verbs.

pub mod add;
pub mod check;
pub mod config;
pub mod del;
pub mod pair;

use std::os::unix::fs::FileTypeExt;

use libcni::skel::{CmdArgs, Plugin};
use libcni::tuntap::TUN_DEVICE;
use libcni::types::CniResult;
use libcni::{Error, Version};

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI tc-redirect-tap plugin v…`).
pub const NAME: &str = "tc-redirect-tap";

pub struct TcRedirectTap;

impl Plugin for TcRedirectTap {
    /// 0.3.0 on, as awslabs' plugin: a chained plugin needs a `prevResult`
    /// with interfaces.
    fn supported_versions(&self) -> &'static [Version] {
        &libcni::version::ALL[2..]
    }

    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check::check(args)
    }

    /// Everything the plugin makes lives in the container's namespace and
    /// goes with it: nothing on the node to collect.
    fn gc(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }

    /// Ready when taps can be made: `/dev/net/tun` is the tun device.
    fn status(&self, _args: &CmdArgs) -> Result<(), Error> {
        tun_device_status(std::path::Path::new(TUN_DEVICE))
    }
}

/// Code 50 unless `path` is a character device (the tun driver's).
pub fn tun_device_status(path: &std::path::Path) -> Result<(), Error> {
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_char_device() => Ok(()),
        Ok(_) => Err(Error::NotAvailable(format!(
            "{} is not a character device: no taps can be made",
            path.display()
        ))),
        Err(e) => Err(Error::NotAvailable(format!(
            "{}: {e}: no taps can be made (is the tun module loaded?)",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_wants_the_tun_device() {
        assert!(tun_device_status(std::path::Path::new(TUN_DEVICE)).is_ok());
        for p in ["/nonexistent/tun", "/etc/hostname"] {
            let e = tun_device_status(std::path::Path::new(p)).unwrap_err();
            assert_eq!(e.code(), 50, "{p}: {e}");
            assert!(e.to_string().contains(p), "{e}");
        }
    }
}
