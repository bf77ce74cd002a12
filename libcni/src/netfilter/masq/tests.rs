//! The masquerade's tests: real traffic through each backend.
use super::ipt_netlink::{ipt_ledger, POSTROUTING};
use super::nft::ledger_of;
use super::*;
use crate::netfilter::nft::kernel_tests::nft_list;
use crate::netfilter::testing::{attach, forwarding_node, peer_seen, run_in, Listener};
use crate::netfilter::IptablesPath;
use crate::netns::testing::privileged;

fn prefix(s: &str) -> IpPrefix {
    s.parse().unwrap()
}

/// Pod 10.1.0.2 behind the node; upstream 10.9.0.2 has no route back to
/// the pod, so only masqueraded connections (from the node's 10.9.0.1)
/// are answered.
fn masq_traffic(backend: Backend) {
    let node = forwarding_node();
    let pod = attach(&node, 1, true);
    let up = attach(&node, 9, false);
    let _l = Listener::start(&up, 7000);
    let owner = Owner::new("mnet", "ctr-m");
    let addrs = [prefix("10.1.0.2/24"), prefix("fd00:1::2/64")];
    assert_eq!(peer_seen(&pod, "10.9.0.2", 7000), None, "no masquerade yet");
    node.run(|| add(backend, &owner, "eth0", &addrs))
        .unwrap()
        .unwrap();
    node.run(|| add(backend, &owner, "eth0", &addrs))
        .unwrap()
        .unwrap();
    node.run(|| check(backend, &owner, "eth0", &addrs))
        .unwrap()
        .unwrap();
    assert_eq!(
        peer_seen(&pod, "10.9.0.2", 7000).as_deref(),
        Some("10.9.0.1")
    );
    assert_eq!(
        peer_seen(&pod, "fd00:9::2", 7000).as_deref(),
        Some("fd00:9::1")
    );
    // Inside its own subnet nothing is masqueraded.
    let _l2 = Listener::start(&node, 7001);
    assert_eq!(
        peer_seen(&pod, "10.1.0.1", 7001).as_deref(),
        Some("10.1.0.2")
    );
    // Teardown with nothing but the owner (the namespace may be gone).
    node.run(|| del(backend, &owner, "eth0")).unwrap().unwrap();
    node.run(|| del(backend, &owner, "eth0")).unwrap().unwrap();
    assert_eq!(peer_seen(&pod, "10.9.0.2", 7000), None);
    let e = node
        .run(|| check(backend, &owner, "eth0", &addrs))
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), 102, "{e}");
}

#[test]
fn netfilter_masq_nft_masquerades_outside_the_subnet_until_teardown() {
    if !privileged("netfilter_masq_nft_masquerades_outside_the_subnet_until_teardown") {
        return;
    }
    masq_traffic(Backend::Nftables);
}

#[test]
fn netfilter_masq_iptables_masquerades_outside_the_subnet_until_teardown() {
    if !privileged("netfilter_masq_iptables_masquerades_outside_the_subnet_until_teardown") {
        return;
    }
    masq_traffic(Backend::Iptables);
}

#[test]
fn netfilter_masq_nft_ruleset_and_gc() {
    if !privileged("netfilter_masq_nft_ruleset_and_gc") {
        return;
    }
    let node = crate::netns::testing::new_netns();
    let a = Owner::new("mnet", "ctr-a");
    let b = Owner::new("mnet", "ctr-b");
    let other = Owner::new("othernet", "ctr-c");
    node.run(|| {
        add(
            Backend::Nftables,
            &a,
            "eth0",
            &[prefix("10.1.0.2/24"), prefix("fd00:1::2/64")],
        )?;
        add(Backend::Nftables, &b, "eth0", &[prefix("10.1.0.3/24")])?;
        add(Backend::Nftables, &other, "eth0", &[prefix("10.7.0.3/16")])
    })
    .unwrap()
    .unwrap();
    let listed = nft_list(&node);
    let ca = rule_comment("mnet", "eth0", "ctr-a");
    assert_eq!(
        ca,
        format!(
            "{}-{}, net: mnet, if: eth0, id: ctr-a",
            &super::super::hex_sha512("mnet")[..16],
            &super::super::hex_sha512("eth0:ctr-a")[..16]
        )
    );
    for want in [
        "comment \"Masquerading for plugins from github.com/containernetworking/plugins\""
            .to_string(),
        "ip daddr 224.0.0.0/4 return".to_string(),
        "ip6 daddr ff00::/8 return".to_string(),
        "goto masq_checks".to_string(),
        format!("ip saddr 10.1.0.2 ip daddr != 10.1.0.0/24 masquerade comment \"{ca}\""),
        format!("ip6 saddr fd00:1::2 ip6 daddr != fd00:1::/64 masquerade comment \"{ca}\""),
        "ip saddr 10.7.0.3 ip daddr != 10.7.0.0/16 masquerade".to_string(),
    ] {
        assert!(listed.contains(&want), "{want:?} not in\n{listed}");
    }
    let valid = vec![Attachment {
        container_id: "ctr-a".into(),
        ifname: "eth0".into(),
    }];
    node.run(|| gc(Backend::Nftables, "mnet", &valid))
        .unwrap()
        .unwrap();
    let listed = nft_list(&node);
    assert!(!listed.contains("ctr-b"), "{listed}");
    assert!(
        listed.contains("id: ctr-a") && listed.contains("id: ctr-c"),
        "{listed}"
    );
    // Ledgers are per network namespace: read them from the node's.
    let ledgers = node
        .run(|| {
            (
                ledger_of(&a, "eth0").unwrap().load(),
                ledger_of(&b, "eth0").unwrap().load(),
            )
        })
        .unwrap();
    assert_eq!(ledgers.0.map(|e| e.len()), Some(2), "ctr-a's two rules");
    assert_eq!(ledgers.1, None, "ctr-b's ledger went with its rules");
}

#[test]
fn netfilter_masq_iptables_writes_the_go_rules_and_collects() {
    if !privileged("netfilter_masq_iptables_writes_the_go_rules_and_collects") {
        return;
    }
    let node = crate::netns::testing::new_netns();
    let a = Owner::new("cbr0", "ctr-a");
    let b = Owner::new("cbr0", "ctr-b");
    node.run(|| {
        add(
            Backend::Iptables,
            &a,
            "eth0",
            &[prefix("10.1.17.5/24"), prefix("fd00:1::5/64")],
        )?;
        add(Backend::Iptables, &b, "eth0", &[prefix("10.1.17.6/24")])
    })
    .unwrap()
    .unwrap();
    let chain = ipt::chain(&a);
    assert_eq!(
        chain,
        format!("CNI-{}", &super::super::hex_sha512("cbr0ctr-a")[..24])
    );
    let saved = run_in(&node, "iptables-save", &["-t", "nat"]);
    let c = "\"name: \\\"cbr0\\\" id: \\\"ctr-a\\\"\"";
    for want in [
        format!("-A POSTROUTING -s 10.1.17.5/32 -m comment --comment {c} -j {chain}"),
        format!("-A {chain} -d 10.1.17.0/24 -m comment --comment {c} -j ACCEPT"),
        format!("-A {chain} ! -d 224.0.0.0/4 -m comment --comment {c} -j MASQUERADE"),
    ] {
        assert!(saved.contains(&want), "{want}\nnot in\n{saved}");
    }
    let saved6 = run_in(&node, "ip6tables-save", &["-t", "nat"]);
    assert!(
        saved6.contains(&format!(
            "-A {chain} ! -d ff00::/8 -m comment --comment {c} -j MASQUERADE"
        )),
        "{saved6}"
    );
    let valid = vec![Attachment {
        container_id: "ctr-a".into(),
        ifname: "eth0".into(),
    }];
    node.run(|| gc(Backend::Iptables, "cbr0", &valid))
        .unwrap()
        .unwrap();
    let saved = run_in(&node, "iptables-save", &["-t", "nat"]);
    assert!(saved.contains(&chain), "{saved}");
    assert!(!saved.contains(&ipt::chain(&b)), "{saved}");
}

/// The nat table as `iptables-save` prints it, without the header,
/// counters and comments lines that differ between two namespaces.
fn nat_text(node: &crate::netns::NetNs, save: &str) -> String {
    run_in(node, save, &["-t", "nat"])
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(" [").next().unwrap_or(l).to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// On iptables-nft the iptables backend is written over netlink; its
/// rules are those `iptables-restore` writes (as `iptables-save` prints
/// both), and each side's teardown removes the other's rules.
#[test]
fn netfilter_masq_iptables_native_equals_iptables_restore() {
    if !privileged("netfilter_masq_iptables_native_equals_iptables_restore") {
        return;
    }
    assert_eq!(
        IptablesPath::of_node(),
        IptablesPath::Netlink,
        "this test needs iptables-nft"
    );
    let owner = Owner::new("cbr0", "ctr-n");
    let addrs = [prefix("10.1.17.5/24"), prefix("fd00:1::5/64")];
    let native = crate::netns::testing::new_netns();
    let process = crate::netns::testing::new_netns();
    native
        .run(|| ipt_netlink::add(&mut Nft::open()?, &owner, &addrs))
        .unwrap()
        .unwrap();
    process
        .run(|| {
            let mut masq = Masquerade {
                owner: &owner,
                ifname: "eth0",
                addrs: &addrs,
            };
            on_route(
                Route::Iptables(IptablesPath::Programs),
                Verb::Add,
                &mut masq,
            )
        })
        .unwrap()
        .unwrap();
    for save in ["iptables-save", "ip6tables-save"] {
        let (a, b) = (nat_text(&native, save), nat_text(&process, save));
        assert_eq!(a, b);
        assert!(a.contains(&ipt::chain(&owner)), "{a}");
    }
    // The ledger holds the two POSTROUTING jumps.
    let entries = native
        .run(|| ipt_ledger(&owner).unwrap().load())
        .unwrap()
        .unwrap();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries.iter().all(|e| e.chain == POSTROUTING));
    // Each side's teardown removes the other's rules.
    native
        .run(|| {
            IpFamily::BOTH
                .into_iter()
                .try_for_each(|f| ipt::del(&owner, f))
        })
        .unwrap()
        .unwrap();
    process
        .run(|| ipt_netlink::del(&mut Nft::open()?, &owner))
        .unwrap()
        .unwrap();
    for node in [&native, &process] {
        for save in ["iptables-save", "ip6tables-save"] {
            let t = nat_text(node, save);
            assert!(!t.contains("CNI-"), "{t}");
        }
    }
    // A teardown whose ledger is stale lists POSTROUTING.
    native
        .run(|| {
            ipt_netlink::add(&mut Nft::open()?, &owner, &addrs)?;
            let l = ipt_ledger(&owner).unwrap();
            let mut e = l.load().unwrap();
            e[0].handle += 1000;
            l.store(&e)?;
            ipt_netlink::del(&mut Nft::open()?, &owner)
        })
        .unwrap()
        .unwrap();
    let t = nat_text(&native, "iptables-save");
    assert!(!t.contains("CNI-"), "{t}");
}
