//! ADD: bridge, veth pair, MAC spoof check, IPAM, container addresses and
//! routes, gateway, masquerade (the reference's order), over the shared
//! flow of `libcni::attach`. A failure after the veth exists removes it
//! again, a failure after IPAM allocated releases the address, and the
//! spoof check and masquerade rules go too: a failed ADD leaves nothing
//! behind but a bridge others use (and its gateway address and the
//! forwarding sysctls), which are shared by every container on the node
//! and never removed, as in the reference; a bridge this ADD created and
//! nobody else uses is deleted again.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libcni::attach::{self, Add, Veth};
use libcni::fault;
use libcni::ipam::{self, IfaceOptions};
use libcni::netfilter::{masq, spoofcheck};
use libcni::netlink::link::Link;
use libcni::netlink::notify::{Notifications, RTNLGRP_LINK};
use libcni::netlink::Netlink;
use libcni::skel::CmdArgs;
use libcni::sysctl;
use libcni::types::net::{from_bits, to_bits};
use libcni::types::{CniResult, Interface, IpPrefix, Route};
use libcni::Error;

use crate::config::Conf;
use crate::firewall;
use crate::node;
use crate::veth;

/// ADD over the shared flow ([`libcni::attach`]): it opens the namespace,
/// refuses an existing `CNI_IFNAME`, finds the IPAM plugin before the
/// bridge is created (a rollback leaves a bridge that others use in
/// place), and undoes what `steps` recorded when they fail.
pub fn add(args: &CmdArgs) -> Result<CniResult, Error> {
    let conf = Conf::parse(args)?;
    attach::add(args, "bridge", conf.ipam.as_deref(), |a| steps(a, &conf))
}

/// The bridge, the veth pair on it, the spoof check, IPAM, the container's
/// addresses and routes, the gateway, the masquerade and the port wait,
/// each recorded for the rollback as it is made: the masquerade, the spoof
/// check, the veth pair, the IPAM lease, and last the bridge if this ADD
/// made it and no other attachment uses it.
fn steps(a: &mut Add<'_>, conf: &Conf) -> Result<CniResult, Error> {
    let args = a.args();
    // The bridge's lock ([`node::lock`]), held until this ADD's port is on
    // the bridge. On a failure it is dropped with this frame, before the
    // rollback, which takes it again to decide whether to delete the bridge.
    let mut bridge_lock = Some(node::lock(&conf.bridge)?);
    let br = node::ensure_bridge(a.host()?, conf)?;
    if br.created {
        let created = br.clone();
        a.undo_last(format!("deleting bridge {:?}", br.name), move || {
            let _held = node::lock(&created.name)?;
            node::remove_if_unused(&mut Netlink::open()?, &created)
        });
    }

    let pair = a.create_veth(conf.mtu, conf.mac)?;
    fault::point("bridge/veth");

    veth::attach(a.host()?, pair.host.index, &br, conf)?;
    // With our port on it, a failed ADD of another attachment keeps the bridge.
    bridge_lock.take();
    fault::point("bridge/attach");

    if conf.macspoofchk {
        spoof_check(a, &pair)?;
    }

    // Subscribed before the container end comes up, so the moment the port
    // is ready cannot be missed.
    let mut link_events = Notifications::open(&[RTNLGRP_LINK])?;
    let mut result = CniResult::default();
    let mut vlan_gateway = None;

    if let Some(plugin) = &conf.ipam {
        let allocated = a.ipam_add(plugin)?;
        fault::point("bridge/ipam");
        // As the result will list them (read again once the port is ready).
        result = allocated.on_interfaces(vec![
            Interface {
                name: br.name.clone(),
                ..Interface::default()
            },
            attach::interface_of(&pair.host, ""),
            attach::interface_of(&pair.container, &args.netns),
        ]);
        let gateways = calc_gateways(&mut result, conf);

        let opts = IfaceOptions {
            enable_dad: conf.enable_dad,
            ..IfaceOptions::default()
        };
        a.configure(&result, opts)?;
        fault::point("bridge/configure");

        if conf.is_gateway {
            vlan_gateway = gateway(a.host()?, &br, conf, &gateways)?;
        }
        fault::point("bridge/gateway");

        if conf.ip_masq {
            masquerade(a, conf, &result)?;
            fault::point("bridge/masq");
        }
    } else if !conf.disable_container_interface {
        // Layer 2 only: the container end still comes up.
        a.container().set_link_up(pair.container.index)?;
        fault::point("bridge/configure");
    }

    let host = a.host()?;
    if !conf.disable_container_interface {
        node::wait_port_ready(host, &mut link_events, pair.host.index, &pair.host.name)?;
    }
    result.interfaces = interfaces_now(host, &br, &pair, vlan_gateway, &args.netns)?;
    attach::apply_dns(&mut result, conf.dns.as_ref());
    Ok(result)
}

/// `macspoofchk`: the container end's MAC is the only source its frames
/// may carry (undone on a failed ADD).
fn spoof_check(a: &mut Add<'_>, pair: &Veth) -> Result<(), Error> {
    let args = a.args();
    let mac = pair.container.mac.ok_or_else(|| {
        Error::kernel(
            format!("container veth {:?} has no Ethernet address", args.ifname),
            std::io::Error::from_raw_os_error(libc::EADDRNOTAVAIL),
        )
    })?;
    a.undo("removing the MAC spoof check", move || {
        spoofcheck::del(&args.container_id, &args.ifname)
    });
    spoofcheck::add(&pair.host.name, mac, &args.container_id, &args.ifname)?;
    fault::point("bridge/spoofchk");
    Ok(())
}

/// `isGateway`: the gateway addresses on the bridge (or on the VLAN's
/// gateway veth, which is returned), the bridge's MAC pinned, forwarding
/// on for the families that have a gateway.
fn gateway(
    host: &mut Netlink,
    br: &node::Bridge,
    conf: &Conf,
    gateways: &[IpPrefix],
) -> Result<Option<Link>, Error> {
    let mut vlan_gateway = None;
    let (target, target_name) = if conf.vlan != 0 {
        let l = veth::ensure_vlan_gateway(host, br, conf)?;
        let r = (l.index, l.name.clone());
        vlan_gateway = Some(l);
        r
    } else {
        (br.index, br.name.clone())
    };
    for gw in gateways {
        node::ensure_gateway_address(host, target, &target_name, *gw, conf.force_address)?;
    }
    if conf.vlan == 0 && !gateways.is_empty() {
        node::pin_mac(host, br)?;
    }
    sysctl::enable_forwarding(gateways.iter().map(IpPrefix::addr))?;
    Ok(vlan_gateway)
}

/// `ipMasq`: the container's addresses masqueraded out of their networks
/// (undone on a failed ADD).
fn masquerade(a: &mut Add<'_>, conf: &Conf, result: &CniResult) -> Result<(), Error> {
    let args = a.args();
    let backend = conf.masq_backend();
    let owner = firewall::owner(args);
    let addrs: Vec<IpPrefix> = result.ips.iter().map(|ip| ip.address).collect();
    a.undo("removing the masquerade", {
        let owner = owner.clone();
        let ifname = args.ifname.clone();
        move || masq::del(backend, &owner, &ifname)
    });
    masq::add(backend, &owner, &args.ifname, &addrs)
}

/// The result's interfaces as the kernel has them now (the host veth's
/// and the bridge's MAC may have changed as the port joined): the bridge,
/// the host veth, the container end, and the VLAN gateway if any.
fn interfaces_now(
    host: &mut Netlink,
    br: &node::Bridge,
    pair: &Veth,
    vlan_gateway: Option<Link>,
    netns: &str,
) -> Result<Vec<Interface>, Error> {
    let gone = |what: &str| {
        Error::kernel(
            format!("{what} vanished during ADD"),
            std::io::Error::from_raw_os_error(libc::ENODEV),
        )
    };
    let br_link = host
        .link_by_index(br.index)?
        .ok_or_else(|| gone("the bridge"))?;
    let host_link = host
        .link_by_index(pair.host.index)?
        .ok_or_else(|| gone("the host veth"))?;
    let mut interfaces = vec![
        ipam::interface_of(&br_link, ""),
        ipam::interface_of(&host_link, ""),
        ipam::interface_of(&pair.container, netns),
    ];
    if let Some(l) = vlan_gateway {
        interfaces.push(ipam::interface_of(&l, ""));
    }
    Ok(interfaces)
}

/// The reference's `calcGateways`: every address goes on interface 2 (the
/// container veth); with `isGateway` an address without gateway gets the
/// first address of its network; with `isDefaultGateway` each family gets a
/// default route through its gateway unless IPAM already returned a default
/// route for it. Returns the gateway addresses for the bridge, with the
/// prefix length of their container address.
fn calc_gateways(result: &mut CniResult, conf: &Conf) -> Vec<IpPrefix> {
    let mut gateways = Vec::new();
    let mut default_done = [false; 2];
    for ip in &mut result.ips {
        ip.interface = Some(2);
        let v4 = ip.address.is_ipv4();
        if ip.gateway.is_none() && conf.is_gateway {
            let network = ip.address.network();
            ip.gateway = Some(from_bits(network, to_bits(network) + 1));
        }
        let fam = usize::from(!v4);
        if conf.is_default_gateway && !default_done[fam] {
            let any: IpAddr = if v4 {
                Ipv4Addr::UNSPECIFIED.into()
            } else {
                Ipv6Addr::UNSPECIFIED.into()
            };
            // Unlike the reference, a default route without a gateway
            // counts too: configure_interface sends it through the gateway
            // anyway, and a second identical route would fail with EEXIST.
            let has_default = result
                .routes
                .iter()
                .any(|r| r.dst.is_ipv4() == v4 && r.dst.prefix_len() == 0);
            if !has_default {
                if let Some(dst) = IpPrefix::new(any, 0) {
                    result.routes.push(Route::new(dst, ip.gateway));
                }
            }
            default_done[fam] = true;
        }
        if conf.is_gateway {
            if let Some(gw) = ip
                .gateway
                .and_then(|g| IpPrefix::new(g, ip.address.prefix_len()))
            {
                gateways.push(gw);
            }
        }
    }
    gateways
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::types::IpConfig;

    fn conf(gw: bool, default_gw: bool) -> Conf {
        Conf {
            bridge: "cni0".into(),
            is_gateway: gw || default_gw,
            is_default_gateway: default_gw,
            force_address: false,
            ip_masq: false,
            ip_masq_backend: None,
            macspoofchk: false,
            mtu: None,
            hairpin: false,
            promisc: false,
            vlan: 0,
            trunk: vec![],
            preserve_default_vlan: false,
            enable_dad: false,
            disable_container_interface: false,
            port_isolation: false,
            mac: None,
            ipam: Some("host-local".into()),
            dns: None,
        }
    }

    fn ip(a: &str, gw: Option<&str>) -> IpConfig {
        IpConfig {
            address: a.parse().unwrap(),
            gateway: gw.map(|g| g.parse().unwrap()),
            interface: None,
        }
    }

    #[test]
    fn gateways_default_to_the_first_address_of_the_network() {
        let mut r = CniResult {
            ips: vec![
                ip("10.1.2.7/24", None),
                ip("fd00:1::7/64", Some("fd00:1::fe")),
            ],
            ..CniResult::default()
        };
        let gws = calc_gateways(&mut r, &conf(true, false));
        assert_eq!(r.ips[0].gateway, Some("10.1.2.1".parse().unwrap()));
        assert_eq!(r.ips[1].gateway, Some("fd00:1::fe".parse().unwrap()));
        assert!(r.ips.iter().all(|i| i.interface == Some(2)));
        let gws: Vec<String> = gws.iter().map(|g| g.to_string()).collect();
        assert_eq!(gws, ["10.1.2.1/24", "fd00:1::fe/64"]);
        assert!(r.routes.is_empty());
    }

    #[test]
    fn default_gateway_adds_one_default_route_per_family() {
        let mut r = CniResult {
            ips: vec![
                ip("10.1.2.7/24", None),
                ip("10.9.0.7/16", None),
                ip("fd00:1::7/64", None),
            ],
            routes: vec![Route::new("::/0".parse().unwrap(), None)],
            ..CniResult::default()
        };
        calc_gateways(&mut r, &conf(false, true));
        let routes: Vec<String> = r
            .routes
            .iter()
            .map(|r| format!("{} {:?}", r.dst, r.gw))
            .collect();
        assert_eq!(routes, ["::/0 None", "0.0.0.0/0 Some(10.1.2.1)"]);
    }

    #[test]
    fn without_gateway_nothing_is_added() {
        let mut r = CniResult {
            ips: vec![ip("10.1.2.7/24", None)],
            ..CniResult::default()
        };
        assert!(calc_gateways(&mut r, &conf(false, false)).is_empty());
        assert_eq!(r.ips[0].gateway, None);
        assert_eq!(r.ips[0].interface, Some(2));
    }
}
