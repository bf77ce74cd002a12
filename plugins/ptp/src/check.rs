//! CHECK over the shared flow (`libcni::attach::Check`): IPAM's CHECK
//! first, then the container and the node against `prevResult`: the
//! container veth (its MAC), its peer on the node (recorded in the result,
//! its MAC), the point-to-point routing of each address (the gateway's
//! scope-link route in the container, the gateway address on the node end
//! and the host route to the container address), the container's addresses
//! and routes, and with `ipMasq` the masquerade of those addresses. A
//! difference is code 102 naming what differs.

use libcni::attach::Check;
use libcni::ipam;
use libcni::netfilter::masq;
use libcni::netlink::{Link, Netlink};
use libcni::skel::CmdArgs;
use libcni::types::IpConfig;
use libcni::Error;
use libcni::IpFamily;

use crate::add::full_len;
use crate::config::{self, Conf};

fn failed(msg: String) -> Error {
    Error::CheckFailed(msg)
}

pub fn check(args: &CmdArgs) -> Result<(), Error> {
    let conf = Conf::parse(args)?;
    let mut c = Check::begin(args, Some(&conf.ipam))?;
    let cont = c.container_link("veth")?;
    let mut host = Netlink::open()?;
    let peer = host_veth(&mut host, &c, &cont)?;
    let ips = c.addresses();
    for ip in &ips {
        point_to_point(&mut host, &mut c.container, &peer, &cont, ip)?;
    }
    let addrs = c.addresses_and_routes()?;
    if conf.ip_masq {
        masq::check(
            conf.masq_backend(),
            &config::owner(args),
            &args.ifname,
            &addrs,
        )?;
    }
    Ok(())
}

/// The node end of the pair: an interface of `prevResult` on the node
/// (no sandbox) that is the container veth's peer, with its recorded MAC.
fn host_veth(host: &mut Netlink, c: &Check<'_>, cont: &Link) -> Result<Link, Error> {
    for want in c.prev.interfaces.iter().filter(|i| i.sandbox.is_empty()) {
        let Some(l) = host.link_by_name(&want.name)? else {
            continue;
        };
        if l.kind.as_deref() == Some("veth")
            && Some(l.index) == cont.peer_index
            && l.peer_index == Some(cont.index)
        {
            ipam::check_mac(&format!("host veth {:?}", l.name), want, &l)?;
            return Ok(l);
        }
    }
    Err(failed(format!(
        "no interface of prevResult on the node is the peer of container veth {:?}",
        cont.name
    )))
}

/// One address's point-to-point routing: the gateway's scope-link route
/// out of the container veth, the gateway on the node end, and the node's
/// host route to the address through it.
fn point_to_point(
    host: &mut Netlink,
    container: &mut Netlink,
    peer: &Link,
    cont: &Link,
    ip: &IpConfig,
) -> Result<(), Error> {
    let addr = ip.address.addr();
    let gw = ip
        .gateway
        .ok_or_else(|| failed(format!("prevResult gives {} no gateway", ip.address)))?;
    let family = IpFamily::of(&addr);
    let full = full_len(&addr);
    let routes = container.routes(family)?;
    if !routes.iter().any(|r| {
        r.dst == gw && r.dst_len == full && r.gateway.is_none() && r.oif == Some(cont.index)
    }) {
        return Err(failed(format!(
            "no route to gateway {gw}/{full} on container veth {:?}",
            cont.name
        )));
    }
    let on_peer = host.addresses(Some(peer.index), Some(family))?;
    if !on_peer.iter().any(|a| a.addr == gw && a.prefix_len == full) {
        return Err(failed(format!(
            "gateway {gw}/{full} is not on host veth {:?}",
            peer.name
        )));
    }
    let node_routes = host.routes(family)?;
    if !node_routes
        .iter()
        .any(|r| r.dst == addr && r.dst_len == full && r.oif == Some(peer.index))
    {
        return Err(failed(format!(
            "no host route to {addr}/{full} through host veth {:?}",
            peer.name
        )));
    }
    Ok(())
}
