//! The `dhcp` IPAM plugin and its daemon, one binary as the Go reference
//! (containernetworking/plugins `plugins/ipam/dhcp`): `dhcp daemon` holds
//! every lease and renews it for the pod's whole life; without `daemon`
//! the binary is the IPAM plugin, which asks the daemon over a unix
//! socket ([`proto`]). The deliberate differences from Go are in the
//! README.

pub mod ack;
pub mod client;
pub mod config;
pub mod daemon;
pub mod proto;

use std::path::Path;
use std::time::Duration;

use libcni::ipam;
use libcni::netlink::Netlink;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::{CniResult, IpConfig, IpPrefix};
use libcni::version::Version;
use libcni::Error;

use crate::client::Failure;
use crate::config::Conf;
use crate::proto::{Key, Request};

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI dhcp plugin v…`).
pub const NAME: &str = "dhcp";

/// How long a plugin waits for the daemon's answer to an ADD: the daemon
/// gives up on a silent server after `-resendtimeout` (208 s by default).
const ADD_TIMEOUT: Duration = Duration::from_secs(600);

/// ... and to the other verbs, which never wait on a DHCP server.
const OTHER_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Dhcp;

/// The `dhcp` program: `dhcp daemon ...` runs the daemon, anything else
/// the IPAM plugin. `args[0]` is the program's name (the multicall binary
/// passes its own arguments the same way).
pub fn program_main(args: Vec<std::ffi::OsString>) -> ! {
    if args.get(1).is_some_and(|a| a == "daemon") {
        let rest: Vec<String> = args[2..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        std::process::exit(daemon::main(&rest));
    }
    libcni::skel::plugin_main_with_args(Dhcp, NAME, args)
}

fn key(args: &CmdArgs) -> Key {
    Key {
        container_id: args.container_id.clone(),
        network: args.conf.name.clone(),
        ifname: args.ifname.clone(),
    }
}

fn request(op: &str) -> Request {
    Request {
        version: proto::VERSION,
        op: op.to_string(),
        ..Request::default()
    }
}

impl Plugin for Dhcp {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        let conf = Conf::parse(args)?;
        let ns = args.open_netns()?;
        let id = ns.identity()?;
        // The daemon runs elsewhere: it needs the namespace's absolute path.
        let netns = std::path::absolute(&args.netns)
            .map_err(|e| Error::InvalidEnv(format!("CNI_NETNS {:?}: {e}", args.netns)))?;
        let req = Request {
            key: Some(key(args)),
            netns: netns.to_string_lossy().into_owned(),
            netns_dev: id.dev,
            netns_ino: id.ino,
            options: conf.options.clone(),
            priority: conf.priority,
            ..request("add")
        };
        let resp = client::call(&conf.socket, &req, ADD_TIMEOUT)
            .map_err(|f| f.into_error(&conf.socket))?;
        if let Some(e) = client::response_error(&resp) {
            return Err(e);
        }
        let value = resp
            .result
            .ok_or_else(|| client::broken(&conf.socket, "an ADD answer without a result"))?;
        CniResult::from_json(&value, Version::V1_1_0)
            .map(|(r, _)| r)
            .map_err(|e| client::broken(&conf.socket, &format!("its result: {e}")))
    }

    /// Releases the lease. What is gone is success: the lease, the
    /// interface, the namespace, and the daemon itself (a daemon that is
    /// not running holds nothing; one that starts later drops a kept
    /// lease whose interface is gone).
    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        let socket = config::teardown_socket_path(args);
        let req = Request {
            key: Some(key(args)),
            ..request("del")
        };
        match client::call(&socket, &req, OTHER_TIMEOUT) {
            Ok(resp) => client::response_error(&resp).map_or(Ok(()), Err),
            Err(Failure::Unreachable(e)) => {
                eprintln!(
                    "dhcp: DEL: nothing released: {}",
                    client::unreachable(&socket, &e)
                );
                Ok(())
            }
            Err(Failure::Broken(why)) => Err(client::broken(&socket, &why)),
        }
    }

    /// The daemon holds a lease for the attachment, and its address is on
    /// the interface.
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = Conf::parse(args)?;
        let ns = args.open_netns()?;
        let req = Request {
            key: Some(key(args)),
            ..request("check")
        };
        let resp = client::call(&conf.socket, &req, OTHER_TIMEOUT)
            .map_err(|f| f.into_error(&conf.socket))?;
        if let Some(e) = client::response_error(&resp) {
            return Err(e);
        }
        let lease = resp
            .lease
            .ok_or_else(|| client::broken(&conf.socket, "a CHECK answer without a lease"))?;
        if !matches!(lease.state.as_str(), "bound" | "renewing" | "rebinding") {
            return Err(Error::CheckFailed(format!(
                "the DHCP lease of {} for {} is {}: {}",
                lease.address,
                key(args),
                lease.state,
                lease.reason
            )));
        }
        let address: IpPrefix = lease
            .address
            .parse()
            .map_err(|_| client::broken(&conf.socket, "a lease address that is no CIDR"))?;
        let ip = IpConfig {
            address,
            gateway: None,
            interface: None,
        };
        let mut nl = Netlink::open_in(&ns)?;
        ipam::check_addresses(&mut nl, &args.ifname, &[&ip])
    }

    /// Releases the network's leases whose attachment is not in
    /// `cni.dev/valid-attachments`; without that list, nothing.
    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        if !args.conf.has_gc_attachments() {
            return Ok(());
        }
        let valid = args.conf.gc_valid_attachments()?;
        let socket = config::teardown_socket_path(args);
        let req = Request {
            network: args.conf.name.clone(),
            valid,
            ..request("gc")
        };
        match client::call(&socket, &req, OTHER_TIMEOUT) {
            Ok(resp) => client::response_error(&resp).map_or(Ok(()), Err),
            Err(Failure::Unreachable(e)) => {
                eprintln!(
                    "dhcp: GC: nothing collected: {}",
                    client::unreachable(&socket, &e)
                );
                Ok(())
            }
            Err(Failure::Broken(why)) => Err(client::broken(&socket, &why)),
        }
    }

    /// ADD can be served when the daemon answers (code 50 otherwise).
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = Conf::parse(args)?;
        status_of(&conf.socket)
    }
}

fn status_of(socket: &Path) -> Result<(), Error> {
    match client::call(socket, &request("status"), OTHER_TIMEOUT) {
        Ok(resp) => client::response_error(&resp).map_or(Ok(()), Err),
        Err(Failure::Unreachable(e)) => Err(Error::NotAvailable(client::unreachable(socket, &e))),
        Err(Failure::Broken(why)) => Err(Error::NotAvailable(format!(
            "the dhcp daemon at {} did not answer as this plugin's daemon: {why}",
            socket.display()
        ))),
    }
}
