//! DEL, best effort: removes the container end of the veth pair (which
//! takes the host end with it), always calls IPAM DEL, then removes the
//! spoof check and the masquerade (with `macspoofchk` / `ipMasq`) by
//! container ID and network name alone, so they go even when the namespace
//! or the interface is already gone. What is already gone (the namespace,
//! the interface, the lease, the rules) is success; a step that fails does
//! not stop the next, and the failures are reported together. The bridge,
//! its address and the forwarding sysctls stay, as in the reference.
//!
//! DEL reads only `ipam.type` and, leniently, the firewall keys from the
//! config: a config ADD rejected (a contradiction, a bad value) must still
//! be deletable, since runtimes DEL every ADD, a failed one too.

use std::path::Path;

use libcni::ipam;
use libcni::netlink::{is_not_found, Netlink};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::{Error, ErrorResult};

use crate::firewall;

pub fn del(args: &CmdArgs) -> Result<(), Error> {
    let mut errors = Vec::new();
    if let Err(e) = delete_container_link(args) {
        errors.push(e);
    }
    if let Some(plugin) = args
        .conf
        .ipam
        .as_ref()
        .map(|i| i.plugin_type.as_str())
        .filter(|t| !t.is_empty())
    {
        if let Err(e) = ipam::exec_del(plugin, &args.stdin) {
            errors.push(e);
        }
    }
    errors.extend(firewall::del(args, &firewall::Keys::lenient(&args.stdin)));
    combine(errors)
}

fn delete_container_link(args: &CmdArgs) -> Result<(), Error> {
    let path = Path::new(&args.netns);
    if NetNs::open_if_present(path)?.is_none() {
        return Ok(()); // no namespace: its links are gone with it
    }
    // Never delete an interface of the node's own namespace.
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
        _ => {
            let code = errors[0].code();
            let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            Err(Error::Plugin(ErrorResult {
                cni_version: String::new(),
                code,
                msg: format!("{} errors: {}", errors.len(), msgs.join("; ")),
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
        let one = combine(vec![Error::Delegate("no host-local".into())]).unwrap_err();
        assert_eq!(
            (one.code(), one.to_string()),
            (101, "no host-local".to_string())
        );
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
