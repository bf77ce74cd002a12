//! Both tables against `iptables` itself: for every shape we write,
//! iptables-nft and we write the same expressions, byte for byte; what
//! iptables writes we render as its `iptables-save` line; what we write
//! `iptables-save` prints and `iptables -D` deletes.

use super::*;
use crate::netfilter::testing::run_in;
use crate::netns::testing::{new_netns, privileged};
use crate::netns::NetNs;

const NAT_CHAINS: [&str; 5] = [
    "CNI-HOSTPORT-SETMARK",
    "CNI-HOSTPORT-MASQ",
    "CNI-HOSTPORT-DNAT",
    "CNI-DN-abc",
    "CNI-abc",
];

const NAT_V4: [&str; 17] = [
    "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
    "-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
    "-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ",
    "-A CNI-HOSTPORT-SETMARK -m comment --comment \"CNI portfwd masquerade mark\" -j MARK --set-xmark 0x2000/0x2000",
    "-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
    "-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"n\\\" id: \\\"c\\\"\" -m multiport --dports 8080,8081 -j CNI-DN-abc",
    "-A CNI-HOSTPORT-DNAT -p sctp -m comment --comment x -m multiport --dports 9 -j CNI-DN-abc",
    "-A CNI-DN-abc -s 10.0.0.0/24 -d 1.2.3.4/32 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK",
    "-A CNI-DN-abc -s 10.0.16.0/20 -p udp -m udp --dport 53 -j CNI-HOSTPORT-SETMARK",
    "-A CNI-DN-abc -s 127.0.0.1/32 -p udp -m udp --dport 53 -j CNI-HOSTPORT-SETMARK",
    "-A CNI-DN-abc -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.0.0.5:80",
    "-A CNI-DN-abc -p sctp -m sctp --dport 9 -j DNAT --to-destination 10.0.0.5:90",
    "-A CNI-DN-abc -j RETURN",
    // ipMasq's (the Go plugins' iptables masquerade).
    "-A POSTROUTING -s 10.1.17.5/32 -m comment --comment \"name: \\\"cbr0\\\" id: \\\"c\\\"\" -j CNI-abc",
    "-A CNI-abc -d 10.1.17.0/24 -m comment --comment \"name: \\\"cbr0\\\" id: \\\"c\\\"\" -j ACCEPT",
    "-A CNI-abc ! -d 224.0.0.0/4 -m comment --comment \"name: \\\"cbr0\\\" id: \\\"c\\\"\" -j MASQUERADE",
    "-A CNI-abc ! -s 10.2.0.0/16 -d 10.3.0.0/16 -j ACCEPT",
];

const NAT_V6: [&str; 12] = [
    "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
    "-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ",
    "-A CNI-HOSTPORT-SETMARK -m comment --comment \"CNI portfwd masquerade mark\" -j MARK --set-xmark 0x2000/0x2000",
    "-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
    "-A CNI-HOSTPORT-DNAT -p udp -m comment --comment x -m multiport --dports 53,54 -j CNI-DN-abc",
    "-A CNI-DN-abc -s fd00::/64 -d fd00::1/128 -p udp -m udp --dport 53 -j CNI-HOSTPORT-SETMARK",
    "-A CNI-DN-abc -s fd00:1:2::/56 -p tcp -m tcp --dport 80 -j CNI-HOSTPORT-SETMARK",
    "-A CNI-DN-abc -p udp -m udp --dport 53 -j DNAT --to-destination [fd00::5]:5353",
    "-A CNI-DN-abc -p sctp -m sctp --dport 9 -j DNAT --to-destination [fd00::5]:90",
    "-A POSTROUTING -s fd00:1::5/128 -m comment --comment x -j CNI-abc",
    "-A CNI-abc -d fd00:1::/64 -m comment --comment x -j ACCEPT",
    "-A CNI-abc ! -d ff00::/8 -m comment --comment x -j MASQUERADE",
];

const FILTER_CHAINS: [&str; 4] = [
    "CNI-FORWARD",
    "CNI-ISOLATION-STAGE-1",
    "CNI-ISOLATION-STAGE-2",
    "CNI-FORWARD-OWNERS",
];

/// The firewall plugin's shapes.
const FILTER_V4: [&str; 6] = [
    "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD",
    "-A CNI-FORWARD -d 10.88.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
    "-A CNI-FORWARD -s 10.88.0.2/32 -j ACCEPT",
    "-A CNI-ISOLATION-STAGE-1 -i cni-podman0 ! -o cni-podman0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\" -j CNI-ISOLATION-STAGE-2",
    "-A CNI-ISOLATION-STAGE-1 -i br1 -o br1 -m comment --comment x -j DROP",
    "-A CNI-FORWARD-OWNERS -s 10.88.0.3/32 -m comment --comment \"name: \\\"n\\\" id: \\\"c\\\"\"",
];

const FILTER_V6: [&str; 3] = [
    "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD",
    "-A CNI-FORWARD -d fd00::2/128 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
    "-A CNI-FORWARD -s fd00::2/128 -j ACCEPT",
];

#[test]
fn netfilter_iptables_nft_encodes_our_shapes() {
    for l in NAT_V4.iter().chain(&FILTER_V4) {
        assert!(encode(l, IpFamily::V4).is_some(), "{l}");
    }
    for l in NAT_V6.iter().chain(&FILTER_V6) {
        assert!(encode(l, IpFamily::V6).is_some(), "{l}");
    }
}

#[test]
fn netfilter_iptables_nft_refuses_other_shapes() {
    for bad in [
        "-A X -i br+ -j DROP",
        "-A X ! -m comment --comment x -j DROP",
        "-A X -m conntrack --ctstate NEW -j ACCEPT",
        "-A X -m multiport --dports 1 -j X",
        "-A X -p tcp -m udp --dport 1 -j X",
        "-A X -s fd00::/64 -j ACCEPT",
        "-A X ! -p tcp -j ACCEPT",
        "-A X ! -d 0.0.0.0/0 -j ACCEPT",
        "-A X -m addrtype --dst-type UNICAST -j X",
        "-A X -j SNAT --to-source 1.2.3.4",
        "-N X",
    ] {
        assert!(encode(bad, IpFamily::V4).is_none(), "{bad}");
    }
}

/// A rule read back: its chain and its expressions (name, data).
type Raw = (String, Vec<(String, Vec<u8>)>);

fn raw(nft: &mut Nft, table: Table, family: IpFamily, chains: &[String]) -> Vec<Raw> {
    let mut out = Vec::new();
    for c in chains {
        if !nft.has_chain(Family::of(family), table.name(), c).unwrap() {
            continue;
        }
        for r in nft
            .rules_raw(Family::of(family), table.name(), Some(c))
            .unwrap()
        {
            let e = r.exprs.into_iter().map(|e| (e.name, e.data)).collect();
            out.push((r.chain, e));
        }
    }
    out
}

/// Runs `iptables -t <table>` with a rule line's arguments, `verb`
/// replacing its `-A`.
fn iptables_line(ns: &NetNs, table: Table, family: IpFamily, line: &str, verb: &str) {
    let mut args = vec!["-t".to_string(), table.name().to_string()];
    args.extend(iptables::split_tokens(line));
    args[2] = verb.into();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_in(ns, crate::netfilter::iptables::program(family), &args);
}

/// The comparison of the module comment for one table and family.
fn same_as_iptables(table: Table, family: IpFamily, chains: &[&str], lines: &[&str]) {
    let cmd = crate::netfilter::iptables::program(family);
    let save = format!("{cmd}-save");
    let base = table.base_chains().iter().map(|(c, _, _)| c.to_string());
    let all: Vec<String> = base.chain(chains.iter().map(|c| c.to_string())).collect();
    let read_all = |nft: &mut Nft| -> Result<(SavedTable, Handles)> {
        let mut saved = SavedTable::default();
        for c in &all {
            if nft.has_chain(Family::of(family), table.name(), c)? {
                saved.chains.insert(c.clone());
            }
        }
        let handles = read_rules(nft, table, family, all.clone(), &mut saved)?;
        Ok((saved, handles))
    };

    let theirs = new_netns();
    for c in chains {
        run_in(&theirs, cmd, &["-t", table.name(), "-N", c]);
    }
    for l in lines {
        iptables_line(&theirs, table, family, l, "-A");
    }
    let (saved, _) = theirs.run(|| read_all(&mut Nft::open()?)).unwrap().unwrap();
    let mut got = saved.rules.clone();
    got.sort();
    let mut want: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    want.sort();
    assert_eq!(got, want, "{table:?} {family:?}");

    let ours = new_netns();
    ours.run(|| {
        apply(
            table,
            &mut Nft::open()?,
            family,
            &mut |nft| read_all(nft),
            &mut |saved, r| {
                for c in chains {
                    if !saved.has_chain(c) {
                        r.create_chain(c);
                    }
                }
                for l in lines {
                    r.append(l.to_string());
                }
            },
            &|_| false,
        )
    })
    .unwrap()
    .unwrap();
    let a = theirs
        .run(|| raw(&mut Nft::open().unwrap(), table, family, &all))
        .unwrap();
    let b = ours
        .run(|| raw(&mut Nft::open().unwrap(), table, family, &all))
        .unwrap();
    assert_eq!(a.len(), b.len(), "{table:?} {family:?}");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "{table:?} {family:?}");
    }
    let text = run_in(&ours, &save, &["-t", table.name()]);
    for l in lines {
        assert!(text.lines().any(|t| t == *l), "{l:?} not in\n{text}");
    }
    for l in lines {
        iptables_line(&ours, table, family, l, "-D");
    }
    let text = run_in(&ours, &save, &["-t", table.name()]);
    assert!(!text.contains("-A "), "{text}");
}

#[test]
fn netfilter_iptables_nft_nat_matches_iptables() {
    if !privileged("netfilter_iptables_nft_nat_matches_iptables") {
        return;
    }
    same_as_iptables(Table::Nat, IpFamily::V4, &NAT_CHAINS, &NAT_V4);
    same_as_iptables(Table::Nat, IpFamily::V6, &NAT_CHAINS, &NAT_V6);
}

#[test]
fn netfilter_iptables_nft_filter_matches_iptables() {
    if !privileged("netfilter_iptables_nft_filter_matches_iptables") {
        return;
    }
    same_as_iptables(Table::Filter, IpFamily::V4, &FILTER_CHAINS, &FILTER_V4);
    same_as_iptables(Table::Filter, IpFamily::V6, &FILTER_CHAINS, &FILTER_V6);
}
