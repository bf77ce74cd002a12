//! Policy routing rules (`ip rule`): dump, add, delete (`RTM_GETRULE`,
//! `RTM_NEWRULE`, `RTM_DELRULE`).
//!
//! A [`Rule`] holds the selectors and the action the suite reads and
//! writes: source and destination prefixes, input and output interface,
//! firewall mark, priority, and the table looked up. A rule read from the
//! kernel can be deleted exactly as it was listed: the delete request
//! carries its priority and every selector.

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleHeader, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::Netlink;
use crate::IpFamily;
use crate::Result;

/// `RT_TABLE_DEFAULT`, `RT_TABLE_MAIN`, `RT_TABLE_LOCAL`: the tables the
/// kernel's own rules look up.
pub const RESERVED_TABLES: [u32; 3] = [253, 254, 255];

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Look the route up in [`Rule::table`] (`FR_ACT_TO_TBL`).
    Lookup,
    /// Anything else (goto, nop, blackhole, unreachable, prohibit).
    Other(u8),
}

/// A policy routing rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub family: IpFamily,
    /// `from <src>/<src_len>`; `None` is "from all".
    pub src: Option<(IpAddr, u8)>,
    /// `to <dst>/<dst_len>`; `None` is "to all".
    pub dst: Option<(IpAddr, u8)>,
    /// `iif`.
    pub iif: Option<String>,
    /// `oif`.
    pub oif: Option<String>,
    /// `fwmark`.
    pub fwmark: Option<u32>,
    /// `not`: the selectors are inverted.
    pub invert: bool,
    /// `pref`; `None` when adding lets the kernel pick one (just below the
    /// first rule with a non-zero priority, as `ip rule add` without
    /// `pref` does).
    pub priority: Option<u32>,
    pub action: Action,
    /// The table looked up (0 for actions that look up none).
    pub table: u32,
}

impl Rule {
    /// `from <src>/<full length> lookup <table>`, priority left to the
    /// kernel.
    pub fn from_source(src: IpAddr, table: u32) -> Rule {
        let family = IpFamily::of(&src);
        let len = match family {
            IpFamily::V4 => 32,
            IpFamily::V6 => 128,
        };
        Rule {
            family,
            src: Some((src, len)),
            dst: None,
            iif: None,
            oif: None,
            fwmark: None,
            invert: false,
            priority: None,
            action: Action::Lookup,
            table,
        }
    }

    /// Whether this rule is exactly `from <ip>` (a host prefix) with no
    /// other selector, looking a table up.
    pub fn is_source_lookup_of(&self, ip: IpAddr) -> bool {
        let full = match self.family {
            IpFamily::V4 => 32,
            IpFamily::V6 => 128,
        };
        self.src == Some((ip, full))
            && self.dst.is_none()
            && self.iif.is_none()
            && self.oif.is_none()
            && self.fwmark.is_none()
            && !self.invert
            && self.action == Action::Lookup
    }

    fn from_message(msg: RuleMessage) -> Option<Rule> {
        let family = match msg.header.family {
            AddressFamily::Inet => IpFamily::V4,
            AddressFamily::Inet6 => IpFamily::V6,
            _ => return None,
        };
        let mut rule = Rule {
            family,
            src: None,
            dst: None,
            iif: None,
            oif: None,
            fwmark: None,
            invert: msg
                .header
                .flags
                .contains(netlink_packet_route::rule::RuleFlags::Invert),
            priority: None,
            action: match msg.header.action {
                RuleAction::ToTable => Action::Lookup,
                other => Action::Other(other.into()),
            },
            table: u32::from(msg.header.table),
        };
        for attr in msg.attributes {
            match attr {
                RuleAttribute::Source(ip) => rule.src = Some((ip, msg.header.src_len)),
                RuleAttribute::Destination(ip) => rule.dst = Some((ip, msg.header.dst_len)),
                RuleAttribute::Iifname(n) => rule.iif = Some(n),
                RuleAttribute::Oifname(n) => rule.oif = Some(n),
                RuleAttribute::FwMark(m) => rule.fwmark = Some(m),
                RuleAttribute::Priority(p) => rule.priority = Some(p),
                RuleAttribute::Table(t) => rule.table = t,
                _ => {}
            }
        }
        Some(rule)
    }

    fn to_message(&self) -> RuleMessage {
        let mut msg = RuleMessage::default();
        msg.header = RuleHeader {
            family: family_of(self.family),
            dst_len: self.dst.map_or(0, |d| d.1),
            src_len: self.src.map_or(0, |s| s.1),
            table: u8::try_from(self.table).unwrap_or(0),
            action: match self.action {
                Action::Lookup => RuleAction::ToTable,
                Action::Other(a) => RuleAction::from(a),
            },
            ..RuleHeader::default()
        };
        if self.invert {
            msg.header.flags = netlink_packet_route::rule::RuleFlags::Invert;
        }
        let attrs = &mut msg.attributes;
        if let Some((ip, _)) = self.src {
            attrs.push(RuleAttribute::Source(ip));
        }
        if let Some((ip, _)) = self.dst {
            attrs.push(RuleAttribute::Destination(ip));
        }
        if let Some(n) = &self.iif {
            attrs.push(RuleAttribute::Iifname(n.clone()));
        }
        if let Some(n) = &self.oif {
            attrs.push(RuleAttribute::Oifname(n.clone()));
        }
        if let Some(m) = self.fwmark {
            attrs.push(RuleAttribute::FwMark(m));
        }
        if let Some(p) = self.priority {
            attrs.push(RuleAttribute::Priority(p));
        }
        if self.action == Action::Lookup {
            attrs.push(RuleAttribute::Table(self.table));
        }
        msg
    }

    /// `from 10.1.0.5/32 lookup 100 pref 32765`, for messages.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if self.invert {
            s.push_str("not ");
        }
        match self.src {
            Some((ip, len)) => s.push_str(&format!("from {ip}/{len}")),
            None => s.push_str("from all"),
        }
        if let Some((ip, len)) = self.dst {
            s.push_str(&format!(" to {ip}/{len}"));
        }
        if let Some(m) = self.fwmark {
            s.push_str(&format!(" fwmark {m:#x}"));
        }
        if let Some(n) = &self.iif {
            s.push_str(&format!(" iif {n}"));
        }
        if let Some(n) = &self.oif {
            s.push_str(&format!(" oif {n}"));
        }
        match self.action {
            Action::Lookup => s.push_str(&format!(" lookup {}", self.table)),
            Action::Other(a) => s.push_str(&format!(" action {a}")),
        }
        if let Some(p) = self.priority {
            s.push_str(&format!(" pref {p}"));
        }
        s
    }
}

fn family_of(f: IpFamily) -> AddressFamily {
    match f {
        IpFamily::V4 => AddressFamily::Inet,
        IpFamily::V6 => AddressFamily::Inet6,
    }
}

impl Netlink {
    /// The rules of `family`, in the kernel's order (by priority).
    pub fn rules(&mut self, family: IpFamily) -> Result<Vec<Rule>> {
        let mut msg = RuleMessage::default();
        msg.header.family = family_of(family);
        let replies = self.request(RouteNetlinkMessage::GetRule(msg), NLM_F_DUMP, || {
            format!("list {} rules", family_name(family))
        })?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRule(r) => Rule::from_message(r),
                _ => None,
            })
            .filter(|r| r.family == family)
            .collect())
    }

    /// Adds `rule`; one already there (same priority and selectors) is an
    /// error with errno `EEXIST` ([`super::is_exists`]).
    pub fn add_rule(&mut self, rule: &Rule) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewRule(rule.to_message()),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add rule {}", rule.describe()),
        )?;
        Ok(())
    }

    /// Deletes the rule matching `rule`'s priority (when set), selectors
    /// and table. One that is not there is an error with errno `ENOENT`
    /// ([`super::is_not_found`]).
    pub fn del_rule(&mut self, rule: &Rule) -> Result<()> {
        self.request(RouteNetlinkMessage::DelRule(rule.to_message()), 0, || {
            format!("delete rule {}", rule.describe())
        })?;
        Ok(())
    }
}

fn family_name(f: IpFamily) -> &'static str {
    match f {
        IpFamily::V4 => "IPv4",
        IpFamily::V6 => "IPv6",
    }
}

#[cfg(test)]
mod tests {
    use super::super::{is_exists, is_not_found};
    use super::*;
    use crate::netns::testing::{new_netns, privileged};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn netlink_rule_describe_and_source_lookup() {
        let r = Rule::from_source(ip("10.1.0.5"), 100);
        assert_eq!(r.describe(), "from 10.1.0.5/32 lookup 100");
        assert!(r.is_source_lookup_of(ip("10.1.0.5")));
        assert!(!r.is_source_lookup_of(ip("10.1.0.6")));
        let mut marked = r.clone();
        marked.fwmark = Some(1);
        assert!(!marked.is_source_lookup_of(ip("10.1.0.5")));
        let v6 = Rule::from_source(ip("fd00::5"), 70000);
        assert_eq!(v6.src, Some((ip("fd00::5"), 128)));
        assert_eq!(v6.describe(), "from fd00::5/128 lookup 70000");
    }

    #[test]
    fn netlink_rule_add_list_delete_v4_and_v6() {
        if !privileged("netlink_rule_add_list_delete_v4_and_v6") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        // A fresh namespace: local, main, default (IPv6 has no default).
        let v4 = nl.rules(IpFamily::V4).unwrap();
        let prios: Vec<(Option<u32>, u32)> = v4.iter().map(|r| (r.priority, r.table)).collect();
        assert_eq!(
            prios,
            [(None, 255), (Some(32766), 254), (Some(32767), 253)],
            "{v4:?}"
        );
        assert!(v4.iter().all(|r| r.src.is_none()));

        // Without a priority the kernel picks one below main's: 32765, 32764.
        let a = Rule::from_source(ip("10.1.0.5"), 100);
        let b = Rule::from_source(ip("10.1.0.6"), 70000);
        nl.add_rule(&a).unwrap();
        nl.add_rule(&b).unwrap();
        let v6 = Rule::from_source(ip("fd00::5"), 101);
        nl.add_rule(&v6).unwrap();
        let v4 = nl.rules(IpFamily::V4).unwrap();
        let ours: Vec<&Rule> = v4.iter().filter(|r| r.src.is_some()).collect();
        assert_eq!(ours.len(), 2, "{v4:?}");
        assert_eq!(
            (ours[0].priority, ours[0].table, ours[0].src),
            (Some(32764), 70000, Some((ip("10.1.0.6"), 32)))
        );
        assert_eq!(
            (ours[1].priority, ours[1].table, ours[1].src),
            (Some(32765), 100, Some((ip("10.1.0.5"), 32)))
        );
        assert!(ours[1].is_source_lookup_of(ip("10.1.0.5")));
        let got6: Vec<Rule> = nl
            .rules(IpFamily::V6)
            .unwrap()
            .into_iter()
            .filter(|r| r.src.is_some())
            .collect();
        assert_eq!(got6.len(), 1);
        assert_eq!(
            (got6[0].priority, got6[0].table, got6[0].src),
            (Some(32765), 101, Some((ip("fd00::5"), 128)))
        );

        // A rule with a priority, twice.
        let mut fixed = Rule::from_source(ip("10.1.0.7"), 100);
        fixed.priority = Some(1000);
        nl.add_rule(&fixed).unwrap();
        assert!(is_exists(&nl.add_rule(&fixed).unwrap_err()));

        // Deleting what was listed removes exactly that rule.
        let listed = ours[1].clone();
        nl.del_rule(&listed).unwrap();
        let err = nl.del_rule(&listed).unwrap_err();
        assert!(is_not_found(&err), "{err}");
        assert_eq!(
            err.to_string().split(": ").next(),
            Some("delete rule from 10.1.0.5/32 lookup 100 pref 32765")
        );
        let left: Vec<String> = nl
            .rules(IpFamily::V4)
            .unwrap()
            .iter()
            .filter(|r| r.src.is_some())
            .map(Rule::describe)
            .collect();
        assert_eq!(
            left,
            [
                "from 10.1.0.7/32 lookup 100 pref 1000",
                "from 10.1.0.6/32 lookup 70000 pref 32764"
            ]
        );
        nl.del_rule(&got6[0]).unwrap();
        assert!(nl
            .rules(IpFamily::V6)
            .unwrap()
            .iter()
            .all(|r| r.src.is_none()));
    }
}
