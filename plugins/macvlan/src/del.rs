//! DEL, best effort: deletes the macvlan in the container and always calls
//! IPAM DEL. What is already gone (the namespace, the link, the lease) is
//! success; a step that fails does not stop the next, and the failures are
//! reported together.
//!
//! DEL reads only `ipam.type` from the config: a config ADD refused (an
//! unknown mode, a master that is gone, ...) must still be deletable, since
//! runtimes DEL every ADD, a failed one too.

use std::path::Path;

use libcni::ipam;
use libcni::netlink::{is_not_found, Netlink};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::{Error, ErrorResult};

use crate::config::ipam_type;

pub fn del(args: &CmdArgs) -> Result<(), Error> {
    let mut errors = Vec::new();
    if let Err(e) = delete_container_link(args) {
        errors.push(e);
    }
    if let Some(plugin) = ipam_type(args) {
        if let Err(e) = ipam::exec_del(&plugin, &args.stdin) {
            errors.push(e);
        }
    }
    combine(errors)
}

fn delete_container_link(args: &CmdArgs) -> Result<(), Error> {
    let path = Path::new(&args.netns);
    if NetNs::open_if_present(path)?.is_none() {
        return Ok(()); // no namespace: its links are gone with it
    }
    // Never delete an interface of the plugin's own namespace.
    let ns = NetNs::open_container(path)?;
    let mut nl = Netlink::open_in(&ns)?;
    let Some(link) = nl.link_by_name(&args.ifname)? else {
        return Ok(());
    };
    match nl.delete_link(link.index) {
        Err(e) if !is_not_found(&e) => Err(e),
        _ => Ok(()),
    }
}

/// One error as it is; several as one message, with the first one's code.
pub fn combine(mut errors: Vec<Error>) -> Result<(), Error> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        n => {
            let code = errors[0].code();
            let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            Err(Error::Plugin(ErrorResult {
                cni_version: String::new(),
                code,
                msg: format!("{n} errors: {}", msgs.join("; ")),
                details: String::new(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_reported_together() {
        assert!(combine(vec![]).is_ok());
        let two = combine(vec![
            Error::InvalidEnv("CNI_NETNS \"/x\" is a directory".into()),
            Error::Delegate("no host-local".into()),
        ])
        .unwrap_err();
        assert_eq!(two.code(), 4);
        assert_eq!(
            two.to_string(),
            "2 errors: CNI_NETNS \"/x\" is a directory; no host-local"
        );
    }
}
