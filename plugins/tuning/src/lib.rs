//! The `tuning` meta plugin: chained after a plugin that created
//! `CNI_IFNAME`, it sets network sysctls in the container's namespace and
//! the interface's MAC, promiscuous mode, MTU, all-multicast mode and
//! transmit queue length, keeps the previous values in a backup file, and
//! puts them back on DEL. Behaviour follows the Go reference
//! (containernetworking/plugins `plugins/meta/tuning`); the deliberate
//! differences are in the README.

pub mod allowlist;
pub mod backup;
pub mod config;
pub mod tune;

use std::path::Path;

use libcni::gojson::Lenient;
use libcni::mac::format_mac;
use libcni::netlink::Netlink;
use libcni::netns::NetNs;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::CniResult;
use libcni::{fault, Error};

use backup::{BackupFile, Stored};
use config::Conf;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI tuning plugin v…`).
pub const NAME: &str = "tuning";

pub struct Tuning;

impl Plugin for Tuning {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        check(args)
    }

    /// Nothing, as Go's tuning has no GC. Its only state is a backup per
    /// attachment in `dataDir`; a dead container's is collected by the node
    /// command (`cni-rs gc`, the operator's `tuningBackup` rows), which
    /// finds it under every runtime, containerd too, which never calls GC.
    fn gc(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }

    /// STATUS: backups can be written under `dataDir` (code 50 naming the
    /// path otherwise), since no ADD can succeed until that is mended. The
    /// sysctls are ADD's to judge: they name the interface, which STATUS
    /// has none of.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        #[derive(serde::Deserialize, Default)]
        struct StatusKeys {
            #[serde(rename = "dataDir", default)]
            data_dir: Option<String>,
        }
        let keys: StatusKeys = args.config()?;
        let dir = config::data_dir(keys.data_dir.as_deref())?;
        libcni::files::check_writable_dir(&dir)
            .map_err(|why| Error::NotAvailable(format!("backups cannot be written: {why}")))
    }
}

fn prev_result(args: &CmdArgs) -> Result<CniResult, Error> {
    args.required_prev_result(
        "missing: tuning must be chained after a plugin that creates the interface",
    )
}

/// ADD: validate everything, read the current values, write the backup,
/// then change; a failure puts back what was changed and the backup as it
/// was. Prints `prevResult` with the new MAC (and MTU) on the interface.
fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    allowlist::check(&conf.sysctls)?;
    let mut result = prev_result(args)?;
    let ns = args.open_netns()?;
    let mut nl = Netlink::open_in(&ns)?;
    let link = if conf.changes_link() {
        Some(tune::container_link(&mut nl, &args.ifname)?)
    } else {
        None
    };
    let before = tune::snapshot(&ns, link.as_ref(), &conf)?;

    let file = BackupFile::new(&conf.data_dir, &args.container_id, &args.ifname);
    let old = match file.read() {
        Stored::Present(b, bytes) => Some((b, bytes)),
        Stored::Absent => None,
        Stored::Corrupt(why) => {
            eprintln!("tuning: replacing an unreadable backup: {why}");
            None
        }
    };
    let to_store = match &old {
        Some((older, _)) => before.clone().merged_under(older),
        None => before.clone(),
    };
    if !to_store.is_empty() {
        file.write(&to_store.encode()?)?;
    }
    fault::point("tuning/backup");

    if let Err(e) = tune::apply(&ns, &mut nl, link.as_ref(), &conf) {
        for failed in tune::restore(&ns, &mut nl, &args.ifname, &before) {
            eprintln!("tuning: rollback: {failed}");
        }
        let put_back = match &old {
            Some((_, bytes)) => file.write(bytes),
            None => file.remove(),
        };
        if let Err(failed) = put_back {
            eprintln!("tuning: rollback: {failed}");
        }
        return Err(e);
    }

    // The interface in the container: matched by name and sandbox, or by
    // name alone when the result does not say which is in the container.
    let in_sandbox = result
        .interfaces
        .iter()
        .any(|i| i.name == args.ifname && !i.sandbox.is_empty());
    for i in &mut result.interfaces {
        if i.name != args.ifname || (in_sandbox && i.sandbox.is_empty()) {
            continue;
        }
        if let Some(mac) = &conf.mac {
            i.mac = format_mac(mac);
        }
        if let (Some(mtu), Some(_)) = (conf.mtu, i.mtu) {
            i.mtu = Some(mtu);
        }
    }
    Ok(result)
}

/// DEL: puts back what the backup holds and removes it. A missing backup,
/// namespace or interface is success. Reads only `dataDir` from the config,
/// so a config ADD refused can still be deleted.
fn del(args: &CmdArgs) -> Result<(), Error> {
    #[derive(serde::Deserialize, Default)]
    struct DelKeys {
        #[serde(rename = "dataDir", default)]
        data_dir: Lenient<String>,
    }
    let keys: DelKeys = args.config().unwrap_or_default();
    let Ok(data_dir) = config::data_dir(keys.data_dir.usable("dataDir").as_deref()) else {
        return Ok(()); // ADD refuses such a dataDir: it cannot hold a backup
    };
    let file = BackupFile::new(&data_dir, &args.container_id, &args.ifname);
    let backup = match file.read() {
        Stored::Absent => return Ok(()),
        Stored::Corrupt(why) => {
            eprintln!("tuning: removing an unreadable backup, nothing restored: {why}");
            return file.remove();
        }
        Stored::Present(b, _) => b,
    };
    // Never "restore" the node's own interfaces.
    let Some(ns) = NetNs::open_container_if_present(Path::new(&args.netns))? else {
        return file.remove(); // the namespace is gone, and all it held
    };
    let mut nl = Netlink::open_in(&ns)?;
    let mut errors = tune::restore(&ns, &mut nl, &args.ifname, &backup);
    // Removed even when a step failed: the failure is reported once, and a
    // retried DEL does not fail forever on something that cannot be put back.
    errors.record(file.remove());
    errors.finish()
}

/// CHECK: the sysctls and the interface as configured. A difference is
/// code 102 naming it.
fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    prev_result(args)?;
    let ns = args.open_netns()?;
    let differs = ns.run(|| {
        for s in &conf.sysctls {
            let now = match libcni::sysctl::read_here(&s.key) {
                Ok(v) => v,
                Err(e) if libcni::sysctl::is_missing(&e) => {
                    return Some(format!("sysctl {} does not exist", s.key))
                }
                Err(e) => return Some(format!("sysctl {}: {e}", s.key)),
            };
            if !tune::same_value(&now, &s.value) {
                return Some(format!(
                    "sysctl {} is {now:?}, configured {:?}",
                    s.key, s.value
                ));
            }
        }
        None
    })?;
    if let Some(msg) = differs {
        return Err(Error::CheckFailed(msg));
    }
    let mut nl = Netlink::open_in(&ns)?;
    let ifname = &args.ifname;
    let d = nl
        .link_details_by_name(ifname)?
        .ok_or_else(|| Error::CheckFailed(format!("container interface {ifname:?} not found")))?;
    let failed = |what: &str, now: String, want: String| {
        Err(Error::CheckFailed(format!(
            "{ifname:?} {what} is {now}, configured {want}"
        )))
    };
    if let Some(mac) = &conf.mac {
        if d.link.mac.as_ref() != Some(mac) {
            let now = d.link.mac.as_ref().map(format_mac);
            return failed("MAC", now.unwrap_or_else(|| "none".into()), format_mac(mac));
        }
    }
    if d.link.promisc != conf.promisc {
        return failed(
            "promiscuous mode",
            d.link.promisc.to_string(),
            conf.promisc.to_string(),
        );
    }
    if let Some(mtu) = conf.mtu {
        if d.link.mtu != mtu {
            return failed("MTU", d.link.mtu.to_string(), mtu.to_string());
        }
    }
    if let Some(on) = conf.allmulti {
        if d.allmulti != on {
            return failed("all-multicast mode", d.allmulti.to_string(), on.to_string());
        }
    }
    if let Some(q) = conf.txqlen {
        if d.txqlen != q {
            return failed("txqlen", d.txqlen.to_string(), q.to_string());
        }
    }
    Ok(())
}
