//! ADD: the tap beside the container's interface, and every frame of each
//! redirected to the other (Kata's "tcfilter" model, awslabs'
//! tc-redirect-tap).
//!
//! In the container's namespace, in this order:
//! 1. the tap (`libcni::tuntap`): the name from `TC_REDIRECT_TAP_NAME` or
//!    the kernel's `tap%d`, the owner and group, the MTU of the veth, and
//!    the alias naming the attachment, all set before it is made
//!    persistent; then up;
//! 2. an ingress qdisc on the tap and a u32 match-all filter with a
//!    `mirred egress redirect` to the veth: what the VM sends leaves
//!    through the veth;
//! 3. the veth's ingress qdisc (one it already has, `ingress` or `clsact`,
//!    is used as it is) and the same filter the other way: what arrives
//!    for the pod goes out of the tap to the VM. Last, so the pod's
//!    traffic moves to the tap only once the way back is there.
//!
//! The veth keeps its addresses: the VM takes over the pod's MAC and
//! addresses (the result says which), and the pod's own stack no longer
//! sees a frame. A failure undoes what this ADD made: the tap (its qdisc
//! and filter go with it) and a qdisc it added to the veth.

use std::io;

use libcni::fault;
use libcni::netlink::tc::{RedirectFilter, INGRESS_HANDLE, INGRESS_PARENT};
use libcni::netlink::{is_exists, Link, Netlink};
use libcni::skel::CmdArgs;
use libcni::tuntap::{self, TapSpec};
use libcni::types::CniResult;
use libcni::Error;

use crate::config::{Conf, ARG_NAME};
use crate::pair;

/// What this ADD made, to undo on failure.
#[derive(Default)]
struct Created {
    tap: Option<u32>,
    /// The veth's ingress qdisc, when this ADD added it.
    veth_qdisc: Option<u32>,
}

impl Created {
    /// Best effort; what cannot be undone is said on stderr.
    fn rollback(&self, nl: &mut Netlink) {
        if let Some(veth) = self.veth_qdisc {
            if let Err(e) = nl.delete_qdisc(veth, INGRESS_PARENT, INGRESS_HANDLE) {
                eprintln!("rollback: {e}");
            }
        }
        if let Some(tap) = self.tap {
            if let Err(e) = nl.delete_link(tap) {
                eprintln!("rollback: {e}");
            }
        }
    }
}

/// The filter every redirect is: all packets to `target`, at a priority
/// the kernel picks.
pub fn redirect_to(target: u32) -> RedirectFilter {
    RedirectFilter {
        priority: 0,
        classid: 0,
        target,
    }
}

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    let prev = args.required_prev_result(
        "missing: tc-redirect-tap is chained after the plugin that makes the container's \
         interface (bridge, ptp, ...) and redirects that interface to a tap",
    )?;
    let veth_at = pair::sandbox_interface(&prev, &args.ifname)?;
    let ns = args.open_netns()?;
    let mut nl = Netlink::open_in(&ns)?;
    let veth = nl.link_by_name(&args.ifname)?.ok_or_else(|| {
        Error::kernel(
            format!(
                "find {:?} (CNI_IFNAME, listed in prevResult) in the container's namespace {:?}",
                args.ifname, args.netns
            ),
            io::Error::from_raw_os_error(libc::ENODEV),
        )
    })?;
    let alias = pair::alias(args);
    let spec = TapSpec {
        name: conf.tap_name(),
        mtu: Some(veth.mtu),
        owner: Some(conf.owner()),
        group: Some(conf.group()),
        alias: Some(&alias),
        ..TapSpec::default()
    };
    let tap = tuntap::create_tap(&ns, &mut nl, &spec).map_err(|e| {
        if is_exists(&e) {
            Error::kernel(
                format!(
                    "create tap {:?} ({ARG_NAME}) in the container's namespace {:?}: \
                     a link of that name is there",
                    conf.tap_name(),
                    args.netns
                ),
                io::Error::from_raw_os_error(libc::EEXIST),
            )
        } else {
            e
        }
    })?;
    fault::point("tc-redirect-tap/tap");
    let mut created = Created {
        tap: Some(tap.index),
        ..Created::default()
    };
    match redirect(&mut nl, &veth, &tap, &mut created) {
        Ok(()) => Ok(pair::result_with_tap(&prev, veth_at, &veth, &tap, args)),
        Err(e) => {
            created.rollback(&mut nl);
            Err(e)
        }
    }
}

/// Steps 1 (up) to 3 of the module documentation.
fn redirect(nl: &mut Netlink, veth: &Link, tap: &Link, created: &mut Created) -> Result<(), Error> {
    nl.set_link_up(tap.index)?;
    fault::point("tc-redirect-tap/tap-up");
    nl.add_ingress_qdisc(tap.index)?;
    nl.add_redirect_filter(tap.index, INGRESS_HANDLE, &redirect_to(veth.index))?;
    fault::point("tc-redirect-tap/tap-filter");
    let parent = match nl.ingress_hook(veth.index)? {
        Some((parent, _)) => parent,
        None => {
            nl.add_ingress_qdisc(veth.index)?;
            created.veth_qdisc = Some(veth.index);
            fault::point("tc-redirect-tap/veth-qdisc");
            INGRESS_HANDLE
        }
    };
    nl.add_redirect_filter(veth.index, parent, &redirect_to(tap.index))?;
    fault::point("tc-redirect-tap/veth-filter");
    Ok(())
}
