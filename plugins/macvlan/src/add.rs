//! ADD: the macvlan, created directly in the container's namespace under
//! `CNI_IFNAME` (`IFLA_NET_NS_FD`: no temporary name, no move), IPAM, the
//! container's addresses and routes. A failure after the link exists
//! deletes it again, and a failure after IPAM was called releases the
//! address: a failed ADD leaves nothing behind.

use std::io;

use libcni::fault;
use libcni::ipam::{self, IfaceOptions};
use libcni::netlink::link::MacvlanSpec;
use libcni::netlink::{is_exists, is_not_found, Netlink};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::sysctl::{self, Key};
use libcni::types::CniResult;
use libcni::Error;

use crate::config::Conf;
use crate::master;

/// What this ADD created so far, for the rollback.
#[derive(Default)]
struct Created {
    /// Index of the macvlan in the container.
    link: Option<u32>,
    /// `ipam.type`, once its ADD was called (the spec DELs a failed one too).
    ipam: Option<String>,
}

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    let ns = args.open_netns()?;
    let mut container = Netlink::open_in(&ns)?;
    // The master lives in the plugin's namespace, or in the container's.
    let mut host = if conf.link_in_container {
        None
    } else {
        Some(Netlink::open()?)
    };
    let master = match host.as_mut() {
        Some(h) => master::find_for_add(h, &conf)?,
        None => master::find_for_add(&mut container, &conf)?,
    };
    if container.link_by_name(&args.ifname)?.is_some() {
        return Err(ifname_exists(&args.ifname));
    }

    let spec = MacvlanSpec {
        name: &args.ifname,
        master_index: master.index,
        mode: conf.mode,
        mtu: conf.mtu,
        mac: conf.mac,
        bc_queue_len: conf.bc_queue_len,
        netns: if conf.link_in_container {
            None
        } else {
            Some(&ns)
        },
    };
    let created_link = match host.as_mut() {
        Some(h) => h.add_macvlan(&spec),
        None => container.add_macvlan(&spec),
    };
    created_link.map_err(|e| {
        if is_exists(&e) {
            ifname_exists(&args.ifname)
        } else {
            e
        }
    })?;

    let mut created = Created::default();
    let outcome = steps(args, &conf, &ns, &mut container, &mut created);
    if outcome.is_err() {
        rollback(args, &mut container, &created);
    }
    outcome
}

fn ifname_exists(ifname: &str) -> Error {
    Error::kernel(
        format!("container interface CNI_IFNAME {ifname:?} already exists in CNI_NETNS"),
        io::Error::from_raw_os_error(libc::EEXIST),
    )
}

/// Undoes `created`, best effort: the IPAM lease while the macvlan is
/// still there (dhcp releases through it), then the macvlan.
fn rollback(args: &CmdArgs, container: &mut Netlink, created: &Created) {
    if let Some(plugin) = &created.ipam {
        if let Err(e) = ipam::exec_del(plugin, &args.stdin) {
            eprintln!("macvlan: rollback: IPAM DEL: {e}");
        }
    }
    if let Some(index) = created.link {
        if let Err(e) = container.delete_link(index) {
            if !is_not_found(&e) {
                eprintln!("macvlan: rollback: deleting {:?}: {e}", args.ifname);
            }
        }
    }
}

fn steps(
    args: &CmdArgs,
    conf: &Conf,
    ns: &NetNs,
    container: &mut Netlink,
    created: &mut Created,
) -> Result<CniResult, Error> {
    let gone = || {
        Error::kernel(
            format!(
                "the new macvlan {:?} vanished from the container",
                args.ifname
            ),
            io::Error::from_raw_os_error(libc::ENODEV),
        )
    };
    let link = container.link_by_name(&args.ifname)?.ok_or_else(gone)?;
    created.link = Some(link.index);
    fault::point("macvlan/link");

    let mut result = CniResult {
        interfaces: vec![ipam::interface_of(&link, &args.netns)],
        ..CniResult::default()
    };

    if let Some(plugin) = &conf.ipam {
        // The spec asks for a DEL of a delegate whose ADD failed too, so the
        // rollback owns the lease from before the call.
        created.ipam = Some(plugin.clone());
        let allocated = ipam::exec_add(plugin, &args.stdin, args.version)?;
        fault::point("macvlan/ipam");
        ipam::require_ips(plugin, &allocated)?;
        result.ips = allocated.ips;
        for ip in &mut result.ips {
            ip.interface = Some(0); // every address is the macvlan's
        }
        result.routes = allocated.routes;
        result.dns = allocated.dns;
        // Neighbours learn the new MAC at once (the kernel announces on up
        // and on address changes); missing knobs (no IPv6) do not matter.
        ns.run(|| {
            for key in [
                Key::ipv4_conf(&args.ifname, "arp_notify"),
                Key::ipv6_conf(&args.ifname, "ndisc_notify"),
            ]
            .into_iter()
            .flatten()
            {
                let _ = sysctl::write_here(&key, "1");
            }
        })?;
        ipam::configure_interface(
            ns,
            container,
            &args.ifname,
            &result,
            IfaceOptions::default(),
        )?;
        fault::point("macvlan/configure");
    } else {
        // Layer 2 only: the link just comes up.
        container.set_link_up(link.index)?;
        fault::point("macvlan/up");
    }

    if let Some(dns) = &conf.dns {
        result.dns = dns.clone();
    }
    Ok(result)
}
