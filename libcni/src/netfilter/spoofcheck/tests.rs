use super::*;
use crate::netfilter::nft::kernel_tests::nft_list;
use crate::netfilter::testing::{peer_seen, run_in, Listener};
use crate::netlink::Netlink;
use crate::netns::testing::{new_netns, privileged};

#[test]
fn netfilter_spoofcheck_drops_other_source_macs_until_teardown() {
    if !privileged("netfilter_spoofcheck_drops_other_source_macs_until_teardown") {
        return;
    }
    // node: bridge br0 (10.1.0.1/24) with port vhost; pod: eth0 10.1.0.2.
    let node = new_netns();
    let pod = new_netns();
    run_in(&node, "ip", &["link", "add", "br0", "type", "bridge"]);
    run_in(&node, "ip", &["addr", "add", "10.1.0.1/24", "dev", "br0"]);
    run_in(&node, "ip", &["link", "set", "br0", "up"]);
    let mac = [0x02, 0, 0, 0, 0, 0x42];
    Netlink::open_in(&node)
        .unwrap()
        .add_veth("vhost", None, "eth0", &pod, Some(mac))
        .unwrap();
    run_in(
        &node,
        "ip",
        &["link", "set", "vhost", "master", "br0", "up"],
    );
    run_in(&pod, "ip", &["addr", "add", "10.1.0.2/24", "dev", "eth0"]);
    run_in(&pod, "ip", &["link", "set", "eth0", "up"]);
    let _l = Listener::start(&node, 7100);
    assert_eq!(
        peer_seen(&pod, "10.1.0.1", 7100).as_deref(),
        Some("10.1.0.2")
    );

    // The container's MAC passes.
    node.run(|| add("vhost", mac, "ctr-s", "eth0"))
        .unwrap()
        .unwrap();
    node.run(|| add("vhost", mac, "ctr-s", "eth0"))
        .unwrap()
        .unwrap();
    let listed = nft_list(&node);
    for want in [
        "table bridge nat {",
        // nft names the bridge family's -300 "dstnat".
        "type filter hook prerouting priority dstnat; policy accept;",
        "iifname \"vhost\" jump cni-br-iface-ctr-s-eth0 comment \"macspoofchk-ctr-s-eth0\"",
        "jump cni-br-iface-ctr-s-eth0-mac comment \"macspoofchk-ctr-s-eth0\"",
        "ether saddr 02:00:00:00:00:42 return comment \"macspoofchk-ctr-s-eth0\"",
        "drop comment \"macspoofchk-ctr-s-eth0\"",
    ] {
        assert!(listed.contains(want), "{want:?} not in\n{listed}");
    }
    assert_eq!(
        listed.matches("iifname \"vhost\"").count(),
        1,
        "setup is idempotent"
    );
    assert_eq!(
        peer_seen(&pod, "10.1.0.1", 7100).as_deref(),
        Some("10.1.0.2")
    );
    // A spoofed source MAC is dropped.
    run_in(
        &pod,
        "ip",
        &["link", "set", "eth0", "address", "02:00:00:00:00:99"],
    );
    run_in(&node, "ip", &["neigh", "flush", "dev", "br0"]);
    assert_eq!(peer_seen(&pod, "10.1.0.1", 7100), None);

    // GC with the attachment still valid keeps it; without, removes it.
    let valid = vec![Attachment {
        container_id: "ctr-s".into(),
        ifname: "eth0".into(),
    }];
    let removed = node.run(|| gc(&valid, &|_| true)).unwrap().unwrap();
    assert!(removed.is_empty());
    let removed = node.run(|| gc(&[], &|i| i != "vhost")).unwrap().unwrap();
    assert!(removed.is_empty(), "not ours: kept");
    node.run(|| del("ctr-s", "eth0")).unwrap().unwrap();
    node.run(|| del("ctr-s", "eth0")).unwrap().unwrap();
    let listed = nft_list(&node);
    assert!(!listed.contains("macspoofchk"), "{listed}");
    assert_eq!(
        peer_seen(&pod, "10.1.0.1", 7100).as_deref(),
        Some("10.1.0.2")
    );

    node.run(|| add("vhost", mac, "ctr-t", "eth0"))
        .unwrap()
        .unwrap();
    let removed = node.run(|| gc(&valid, &|i| i == "vhost")).unwrap().unwrap();
    assert_eq!(removed, vec!["ctr-t-eth0".to_string()]);
    assert!(!nft_list(&node).contains("cni-br-iface"));
}
