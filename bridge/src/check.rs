//! CHECK: IPAM's CHECK first, then the node and the container against
//! `prevResult`: the bridge (a bridge, its MAC, promiscuous mode as
//! configured), the container veth (its MAC), the host veth that is its
//! peer and a port of the bridge (hairpin, isolation and VLANs as
//! configured), the container's addresses and routes, and with `ipMasq`
//! the masquerade of those addresses. A difference is code 102 naming what
//! differs.

use libcni::attach::Check;
use libcni::ipam;
use libcni::netfilter::masq;
use libcni::netlink::{Link, Netlink};
use libcni::skel::CmdArgs;
use libcni::types::{CniResult, Interface};
use libcni::Error;

use crate::config::Conf;
use crate::firewall;

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let mut c = Check::begin(args, conf.ipam.as_deref())?;
    let mut host = Netlink::open()?;

    let br = check_bridge(&mut host, &c.prev, &conf)?;
    let cont = c.container_link("veth")?;
    check_host_veth(&mut host, &c.prev, &conf, &br, &cont, &args.ifname)?;

    // Addresses the result gives to the container interface (or to no
    // interface in particular), and every route.
    let addrs = c.addresses_and_routes()?;
    if conf.ip_masq {
        masq::check(
            conf.masq_backend(),
            &firewall::owner(args),
            &args.ifname,
            &addrs,
        )?;
    }
    Ok(())
}

fn failed(msg: String) -> Error {
    Error::CheckFailed(msg)
}

fn check_bridge(host: &mut Netlink, prev: &CniResult, conf: &Conf) -> Result<Link, Error> {
    let name = &conf.bridge;
    let want = prev
        .interfaces
        .iter()
        .find(|i| &i.name == name)
        .ok_or_else(|| failed(format!("prevResult has no interface for bridge {name:?}")))?;
    if !want.sandbox.is_empty() {
        return Err(failed(format!(
            "prevResult puts bridge {name:?} in sandbox {:?}, it belongs to the node",
            want.sandbox
        )));
    }
    let br = host
        .link_by_name(name)?
        .ok_or_else(|| failed(format!("bridge {name:?} not found on the node")))?;
    if br.kind.as_deref() != Some("bridge") {
        return Err(failed(format!(
            "{name:?} is not a bridge (kind {})",
            br.kind.as_deref().unwrap_or("none")
        )));
    }
    ipam::check_mac(&format!("bridge {name:?}"), want, &br)?;
    if br.promisc != conf.promisc {
        return Err(failed(format!(
            "bridge {name:?} promiscuous mode is {}, promiscMode is {}",
            br.promisc, conf.promisc
        )));
    }
    Ok(br)
}

fn check_host_veth(
    host: &mut Netlink,
    prev: &CniResult,
    conf: &Conf,
    br: &Link,
    cont: &Link,
    ifname: &str,
) -> Result<(), Error> {
    let candidates = prev
        .interfaces
        .iter()
        .filter(|i| i.sandbox.is_empty() && i.name != conf.bridge);
    let mut port: Option<(&Interface, Link)> = None;
    for want in candidates {
        let Some(l) = host.link_by_name(&want.name)? else {
            continue;
        };
        if l.kind.as_deref() == Some("veth")
            && Some(l.index) == cont.peer_index
            && l.peer_index == Some(cont.index)
            && l.master == Some(br.index)
        {
            port = Some((want, l));
            break;
        }
    }
    let (want, l) = port.ok_or_else(|| {
        failed(format!(
            "no host veth in prevResult is the peer of {ifname:?} and a port of bridge {:?}",
            conf.bridge
        ))
    })?;
    ipam::check_mac(&format!("host veth {:?}", l.name), want, &l)?;
    let flags = l.bridge_port.unwrap_or_default();
    if flags.hairpin.unwrap_or(false) != conf.hairpin {
        return Err(failed(format!(
            "bridge port {:?} hairpin mode is {}, hairpinMode is {}",
            l.name,
            flags.hairpin.unwrap_or(false),
            conf.hairpin
        )));
    }
    if conf.wants_vlans() {
        let have = host.bridge_port_vlans(l.index)?;
        if !crate::veth::vlans_match(conf, &have) {
            let show: Vec<String> = have
                .iter()
                .map(|v| {
                    let mut s = v.vid.to_string();
                    if v.last > v.vid {
                        s.push_str(&format!("-{}", v.last));
                    }
                    if v.pvid {
                        s.push_str(" PVID");
                    }
                    if v.untagged {
                        s.push_str(" untagged");
                    }
                    s
                })
                .collect();
            return Err(failed(format!(
                "bridge port {:?} has VLANs [{}], not what vlan/vlanTrunk/preserveDefaultVlan ask for",
                l.name,
                show.join(", ")
            )));
        }
    }
    if conf.port_isolation && flags.isolated != Some(true) {
        return Err(failed(format!(
            "bridge port {:?} is not isolated, portIsolation is true",
            l.name
        )));
    }
    Ok(())
}
