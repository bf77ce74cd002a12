//! ADD over the shared flow (`libcni::attach`), in the reference's order:
//! IPAM, forwarding, the veth pair (the container end created directly in
//! the container namespace), the container's addresses and routes, the
//! node end's addresses and routes, the masquerade.
//!
//! The point-to-point routing, as the reference sets it up: a veth cannot
//! be `IFF_POINTOPOINT`, so the container keeps its address with its
//! prefix (`10.244.1.5/24`), but its prefix route goes and every other
//! destination goes through the gateway:
//!
//! ```text
//! container                                 node
//! eth0 10.244.1.5/24                        vethXXXX 10.244.1.1/32 (every ptp veth)
//!   10.244.1.1 dev eth0 scope link src .5     10.244.1.5 dev vethXXXX scope host
//!   10.244.1.0/24 via 10.244.1.1 src .5
//!   (IPAM's routes, e.g. default via .1)
//! ```
//!
//! so even a neighbour in the same subnet is reached through the node,
//! which routes to each container by its host route. A failure at any step
//! deletes the pair (its addresses and routes go with it), removes the
//! masquerade and releases the lease.

use std::net::IpAddr;

use libcni::attach::{self, Add};
use libcni::fault;
use libcni::ipam::IfaceOptions;
use libcni::netfilter::masq;
use libcni::netlink::route::{RT_SCOPE_HOST, RT_SCOPE_LINK};
use libcni::netlink::{is_exists, is_not_found, Netlink, Route};
use libcni::skel::CmdArgs;
use libcni::sysctl;
use libcni::types::{CniResult, IpConfig, IpPrefix};
use libcni::Error;

use crate::config::{self, Conf};

pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    attach::add(args, "ptp", Some(&conf.ipam), |a| steps(a, &conf))
}

/// The full-length prefix of `ip`'s family: 32 or 128.
pub fn full_len(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// The gateway of each address, which ptp routes everything through: an
/// address without one is refused (code 7 naming `ipam`), before the
/// container is touched.
pub fn gateways(ips: &[IpConfig]) -> Result<Vec<IpAddr>, Error> {
    ips.iter()
        .map(|ip| {
            ip.gateway
                .filter(|gw| gw.is_ipv4() == ip.address.is_ipv4())
                .ok_or_else(|| {
                    Error::config(
                        "ipam",
                        format!(
                            "the IPAM result gives {} no gateway of its family: ptp routes \
                             the container's traffic through the gateway",
                            ip.address
                        ),
                    )
                })
        })
        .collect()
}

fn steps(a: &mut Add<'_>, conf: &Conf) -> Result<CniResult, Error> {
    let args = a.args();
    let allocated = a.ipam_add(&conf.ipam)?;
    fault::point("ptp/ipam");
    let gws = gateways(&allocated.ips)?;
    sysctl::enable_forwarding(allocated.ips.iter().map(|ip| ip.address.addr()))?;

    let pair = a.create_veth(conf.mtu, None)?;
    fault::point("ptp/veth");
    let mut result = allocated.on_interfaces(vec![
        attach::interface_of(&pair.host, ""),
        attach::interface_of(&pair.container, &args.netns),
    ]);

    // The routes below name the container's address as their source,
    // which the kernel refuses while an IPv6 address is still tentative:
    // configure returns once none is.
    let opts = IfaceOptions {
        settle: true,
        ..IfaceOptions::default()
    };
    a.configure(&result, opts)?;
    point_to_point_routes(a.container(), pair.container.index, &result.ips, &gws)?;
    fault::point("ptp/configure");

    host_side(a.host()?, pair.host.index, &result.ips, &gws)?;
    fault::point("ptp/host");

    if conf.ip_masq {
        let backend = conf.masq_backend();
        let owner = config::owner(args);
        let addrs: Vec<IpPrefix> = result.ips.iter().map(|ip| ip.address).collect();
        a.undo("removing the masquerade", {
            let owner = owner.clone();
            let ifname = args.ifname.clone();
            move || masq::del(backend, &owner, &ifname)
        });
        masq::add(backend, &owner, &args.ifname, &addrs)?;
        fault::point("ptp/masq");
    }

    attach::apply_dns(&mut result, conf.dns.as_ref());
    Ok(result)
}

/// In the container (`nl`, link `index`): for each address, its prefix
/// route goes, the gateway gets a scope-link route, and the address's
/// subnet goes through the gateway; both with the address as source.
/// The reference's steps; two addresses sharing a gateway share its route.
fn point_to_point_routes(
    nl: &mut Netlink,
    index: u32,
    ips: &[IpConfig],
    gws: &[IpAddr],
) -> Result<(), Error> {
    for (ip, gw) in ips.iter().zip(gws) {
        let (addr, len) = (ip.address.addr(), ip.address.prefix_len());
        let full = full_len(&addr);
        let subnet = ip.address.network();
        if len < full {
            let prefix = Route::new(subnet, len, None, Some(index));
            match nl.del_route(&prefix) {
                Err(e) if !is_not_found(&e) => return Err(e),
                _ => {}
            }
        }
        let mut to_gw = Route::new(*gw, full, None, Some(index));
        to_gw.scope = RT_SCOPE_LINK;
        to_gw.prefsrc = Some(addr);
        match nl.add_route(&to_gw) {
            Err(e) if !is_exists(&e) => return Err(e),
            _ => {}
        }
        if len < full {
            let mut via = Route::new(subnet, len, Some(*gw), Some(index));
            via.prefsrc = Some(addr);
            match nl.add_route(&via) {
                Err(e) if !is_exists(&e) => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// On the node (`nl`, the node end `index`): each gateway as a /32 or /128
/// (every ptp veth of the node carries the same one), and a host route to
/// each container address. The IPv6 gateway skips duplicate address
/// detection: it is the node's by construction, and the container can use
/// it as soon as ADD returns. The host route replaces one to the same
/// address: the lease was released by a DEL whose veth the kernel may
/// still be deleting, and that veth's routes must not keep the new pod's
/// address.
fn host_side(nl: &mut Netlink, index: u32, ips: &[IpConfig], gws: &[IpAddr]) -> Result<(), Error> {
    for (ip, gw) in ips.iter().zip(gws) {
        let full = full_len(gw);
        let added = if gw.is_ipv4() {
            nl.add_address(index, *gw, full)
        } else {
            nl.add_address_nodad(index, *gw, full)
        };
        match added {
            Err(e) if !is_exists(&e) => return Err(e),
            _ => {}
        }
        let mut host_route = Route::new(ip.address.addr(), full, None, Some(index));
        host_route.scope = RT_SCOPE_HOST;
        nl.replace_route(&host_route)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(a: &str, gw: Option<&str>) -> IpConfig {
        IpConfig {
            address: a.parse().unwrap(),
            gateway: gw.map(|g| g.parse().unwrap()),
            interface: Some(1),
        }
    }

    #[test]
    fn every_address_needs_a_gateway_of_its_family() {
        let ips = [
            ip("10.244.1.5/24", Some("10.244.1.1")),
            ip("fd00:10:244::5/64", Some("fd00:10:244::1")),
        ];
        let gws = gateways(&ips).unwrap();
        assert_eq!(gws[0].to_string(), "10.244.1.1");
        assert_eq!(gws[1].to_string(), "fd00:10:244::1");
        for bad in [
            ip("10.244.1.5/24", None),
            ip("10.244.1.5/24", Some("fd00::1")),
        ] {
            let e = gateways(&[bad]).unwrap_err();
            assert_eq!(e.code(), 7);
            assert!(
                e.to_string().starts_with(
                    "invalid network config: ipam: the IPAM result gives 10.244.1.5/24 no gateway"
                ),
                "{e}"
            );
        }
        assert_eq!(full_len(&gws[0]), 32);
        assert_eq!(full_len(&gws[1]), 128);
    }
}
