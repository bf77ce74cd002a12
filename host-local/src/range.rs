//! Address ranges and range sets: the reference defaults, containment,
//! overlap, the allocation order (round robin from the last reserved
//! address, wrapping across the ranges of a set, skipping each range's
//! gateway) and how many addresses of a set are still free.
//!
//! Addresses are worked on as integers (`u128`, IPv4 in the low 32 bits);
//! every range is checked to lie inside its subnet, so `start..=end` never
//! leaves the family's width.

use libcni::types::net::{from_bits, to_bits};
use libcni::types::IpPrefix;
use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

/// Why a range is invalid: the key (`subnet`, `rangeStart`, `rangeEnd`,
/// `gateway`) and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeError {
    pub field: &'static str,
    pub msg: String,
}

fn range_error(field: &'static str, msg: String) -> RangeError {
    RangeError { field, msg }
}

/// One range: the inclusive addresses `start..=end` of `subnet`, handed out
/// with `gateway` (which is never handed out itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    subnet: IpPrefix,
    start: u128,
    end: u128,
    gateway: u128,
}

impl Range {
    /// A range with the reference defaults: `start` = network + 1 (the
    /// gateway there is skipped when allocating), `end` = broadcast − 1 for
    /// IPv4 and the last address for IPv6, `gateway` = network + 1.
    ///
    /// Refused: a subnet with host bits set, one too small to allocate from
    /// (IPv4 /31 and /32, IPv6 /127 and /128), an IPv4-mapped IPv6 subnet,
    /// a start, end or gateway of the other family or outside the subnet,
    /// and an end before the start.
    pub fn new(
        subnet: IpPrefix,
        start: Option<IpAddr>,
        end: Option<IpAddr>,
        gateway: Option<IpAddr>,
    ) -> Result<Range, RangeError> {
        let width: u8 = if subnet.is_ipv4() { 32 } else { 128 };
        if subnet.prefix_len() > width - 2 {
            return Err(range_error(
                "subnet",
                format!(
                    "{subnet} is too small to allocate from (at most /{} for this family)",
                    width - 2
                ),
            ));
        }
        if subnet.has_host_bits() {
            return Err(range_error(
                "subnet",
                format!(
                    "{subnet} has host bits set (the network is {})",
                    subnet.truncate()
                ),
            ));
        }
        if let IpAddr::V6(a) = subnet.addr() {
            if a.to_ipv4_mapped().is_some() {
                return Err(range_error(
                    "subnet",
                    format!(
                        "{subnet} is an IPv4-mapped IPv6 subnet; write the IPv4 subnet instead"
                    ),
                ));
            }
        }
        let network = to_bits(subnet.network());
        let last = to_bits(subnet.last());
        let inside = |field: &'static str, a: IpAddr| -> Result<u128, RangeError> {
            if a.is_ipv4() != subnet.is_ipv4() {
                return Err(range_error(
                    field,
                    format!("{a} is not of the same address family as subnet {subnet}"),
                ));
            }
            if !subnet.contains(a) {
                return Err(range_error(field, format!("{a} is not in subnet {subnet}")));
            }
            Ok(to_bits(a))
        };
        let start = match start {
            Some(a) => inside("rangeStart", a)?,
            None => network + 1,
        };
        let end = match end {
            Some(a) => inside("rangeEnd", a)?,
            None if subnet.is_ipv4() => last - 1,
            None => last,
        };
        if end < start {
            return Err(range_error(
                "rangeEnd",
                format!(
                    "{} is before rangeStart {}",
                    from_bits(subnet.addr(), end),
                    from_bits(subnet.addr(), start)
                ),
            ));
        }
        let gateway = match gateway {
            Some(a) => inside("gateway", a)?,
            None => network + 1,
        };
        Ok(Range {
            subnet,
            start,
            end,
            gateway,
        })
    }

    pub fn is_ipv4(&self) -> bool {
        self.subnet.is_ipv4()
    }

    pub fn start(&self) -> IpAddr {
        self.addr(self.start)
    }

    pub fn end(&self) -> IpAddr {
        self.addr(self.end)
    }

    pub fn gateway(&self) -> IpAddr {
        self.addr(self.gateway)
    }

    /// `addr` with this range's prefix length, as a result carries it.
    pub fn with_prefix(&self, addr: IpAddr) -> IpPrefix {
        IpPrefix::new(addr, self.subnet.prefix_len()).unwrap_or_else(|| IpPrefix::host(addr))
    }

    fn addr(&self, bits: u128) -> IpAddr {
        from_bits(self.subnet.addr(), bits)
    }

    /// True if `addr` is one of `start..=end` (same family).
    pub fn contains(&self, addr: IpAddr) -> bool {
        addr.is_ipv4() == self.is_ipv4() && (self.start..=self.end).contains(&to_bits(addr))
    }

    /// True if the two ranges share an address (their `start..=end`, not
    /// their subnets: two ranges may split one subnet).
    pub fn overlaps(&self, other: &Range) -> bool {
        self.is_ipv4() == other.is_ipv4() && self.start <= other.end && other.start <= self.end
    }

    /// How many addresses `start..=end` holds, the gateway included.
    /// Saturates at `u128::MAX` (an IPv6 /0).
    pub fn addresses(&self) -> u128 {
        (self.end - self.start).saturating_add(1)
    }

    /// Whether the gateway is one of `start..=end` (then it is never
    /// handed out: the range's one reserved address).
    pub fn holds_gateway(&self) -> bool {
        (self.start..=self.end).contains(&self.gateway)
    }

    /// How many addresses of this range can be handed out: all of
    /// `start..=end` but the gateway. Saturates at `u128::MAX` (an IPv6 /0).
    fn size(&self) -> u128 {
        let all = (self.end - self.start).saturating_add(1);
        if (self.start..=self.end).contains(&self.gateway) {
            all - 1
        } else {
            all
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start(), self.end())
    }
}

/// Why a range set is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetError {
    Empty,
    MixedFamilies {
        first: IpPrefix,
        other: IpPrefix,
        index: usize,
    },
    Overlap {
        a: usize,
        b: usize,
        text: String,
    },
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetError::Empty => write!(f, "a range set needs at least one range"),
            SetError::MixedFamilies { first, other, index } => write!(
                f,
                "mixed address families in one range set: range {index} ({other}) is not of the family of range 0 ({first})"
            ),
            SetError::Overlap { a, b, text } => write!(f, "ranges {a} and {b} overlap: {text}"),
        }
    }
}

/// A range set: one address is allocated from it per ADD, from any of its
/// ranges. All ranges are of one family and none overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<Range>,
}

impl RangeSet {
    pub fn new(ranges: Vec<Range>) -> Result<RangeSet, SetError> {
        let first = ranges.first().ok_or(SetError::Empty)?;
        if let Some((index, other)) = ranges
            .iter()
            .enumerate()
            .find(|(_, r)| r.is_ipv4() != first.is_ipv4())
        {
            return Err(SetError::MixedFamilies {
                first: first.subnet,
                other: other.subnet,
                index,
            });
        }
        for (a, ra) in ranges.iter().enumerate() {
            for (b, rb) in ranges.iter().enumerate().skip(a + 1) {
                if ra.overlaps(rb) {
                    return Err(SetError::Overlap {
                        a,
                        b,
                        text: format!("{ra} and {rb}"),
                    });
                }
            }
        }
        Ok(RangeSet { ranges })
    }

    /// The set's ranges, in the config's order.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    pub fn is_ipv4(&self) -> bool {
        self.ranges[0].is_ipv4()
    }

    /// The range holding `addr`, if any.
    pub fn range_for(&self, addr: IpAddr) -> Option<&Range> {
        self.ranges.iter().find(|r| r.contains(addr))
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        self.range_for(addr).is_some()
    }

    /// True if any range of `self` overlaps any range of `other`.
    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.ranges
            .iter()
            .any(|a| other.ranges.iter().any(|b| a.overlaps(b)))
    }

    /// True if `addr` is the gateway of the range that holds it: such an
    /// address is never handed out.
    pub fn is_gateway(&self, addr: IpAddr) -> bool {
        self.range_for(addr)
            .is_some_and(|r| r.gateway == to_bits(addr))
    }

    /// The allocation order of the reference plugin. Starts just after
    /// `last_reserved` when that address is in the set, otherwise at the
    /// first range's start; walks each range to its end, goes on with the
    /// next range (wrapping to the first), skips every range's gateway, and
    /// stops after one full turn (`last_reserved` itself comes last).
    pub fn candidates(&self, last_reserved: Option<IpAddr>) -> Candidates<'_> {
        let resume = last_reserved.and_then(|a| {
            self.ranges
                .iter()
                .position(|r| r.contains(a))
                .map(|i| (i, to_bits(a)))
        });
        match resume {
            Some((range, cur)) => Candidates {
                set: self,
                range,
                cur: Some(cur),
                first: None,
                done: false,
            },
            None => Candidates {
                set: self,
                range: 0,
                cur: None,
                first: None,
                done: false,
            },
        }
    }

    /// How many addresses of the set are free: every address of every
    /// range but the gateways and the addresses in `taken`. Saturates.
    pub fn free_count(&self, taken: &HashSet<IpAddr>) -> u128 {
        let size = self
            .ranges
            .iter()
            .fold(0u128, |acc, r| acc.saturating_add(r.size()));
        let used = taken
            .iter()
            .filter(|a| self.contains(**a) && !self.is_gateway(**a))
            .count() as u128;
        size.saturating_sub(used)
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// The iterator of [`RangeSet::candidates`]: yields each address with the
/// range it belongs to.
pub struct Candidates<'a> {
    set: &'a RangeSet,
    range: usize,
    /// The address last yielded (or the last reserved one, at the start).
    cur: Option<u128>,
    /// The first address visited: meeting it again ends the walk.
    first: Option<u128>,
    done: bool,
}

impl<'a> Iterator for Candidates<'a> {
    type Item = (&'a Range, IpAddr);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let ranges = &self.set.ranges;
            let next = match self.cur {
                None => ranges[self.range].start,
                Some(cur) if cur == ranges[self.range].end => {
                    self.range = (self.range + 1) % ranges.len();
                    ranges[self.range].start
                }
                Some(cur) => cur + 1,
            };
            self.cur = Some(next);
            match self.first {
                None => self.first = Some(next),
                Some(first) if first == next => {
                    self.done = true;
                    return None;
                }
                Some(_) => {}
            }
            let r = &ranges[self.range];
            if next != r.gateway {
                return Some((r, r.addr(next)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn range(subnet: &str, start: Option<&str>, end: Option<&str>, gw: Option<&str>) -> Range {
        Range::new(
            subnet.parse().unwrap(),
            start.map(ip),
            end.map(ip),
            gw.map(ip),
        )
        .unwrap()
    }

    fn range_err(
        subnet: &str,
        start: Option<&str>,
        end: Option<&str>,
        gw: Option<&str>,
    ) -> RangeError {
        Range::new(
            subnet.parse().unwrap(),
            start.map(ip),
            end.map(ip),
            gw.map(ip),
        )
        .unwrap_err()
    }

    fn walk(set: &RangeSet, last: Option<&str>) -> Vec<String> {
        set.candidates(last.map(ip))
            .map(|(_, a)| a.to_string())
            .collect()
    }

    #[test]
    fn ipv4_defaults_follow_the_reference() {
        let r = range("10.1.0.0/24", None, None, None);
        assert_eq!(
            r.start(),
            ip("10.1.0.1"),
            "start is network+1; the gateway there is skipped"
        );
        assert_eq!(r.end(), ip("10.1.0.254"), "end is broadcast-1");
        assert_eq!(r.gateway(), ip("10.1.0.1"));
        assert_eq!(r.to_string(), "10.1.0.1-10.1.0.254");
        let r = range("10.1.0.0/30", None, None, None);
        assert_eq!((r.start(), r.end()), (ip("10.1.0.1"), ip("10.1.0.2")));
    }

    #[test]
    fn ipv6_defaults_end_at_the_last_address() {
        let r = range("2001:db8::/64", None, None, None);
        assert_eq!(r.start(), ip("2001:db8::1"));
        assert_eq!(r.end(), ip("2001:db8::ffff:ffff:ffff:ffff"));
        assert_eq!(r.gateway(), ip("2001:db8::1"));
        let r = range("2001:db8::/126", None, None, None);
        assert_eq!(r.end(), ip("2001:db8::3"));
    }

    #[test]
    fn explicit_values_are_kept() {
        let r = range(
            "10.1.0.0/16",
            Some("10.1.2.10"),
            Some("10.1.2.20"),
            Some("10.1.255.254"),
        );
        assert_eq!(r.to_string(), "10.1.2.10-10.1.2.20");
        assert_eq!(r.gateway(), ip("10.1.255.254"));
        assert!(r.contains(ip("10.1.2.10")) && r.contains(ip("10.1.2.20")));
        assert!(!r.contains(ip("10.1.2.9")) && !r.contains(ip("10.1.2.21")));
        assert!(!r.contains(ip("::a01:20a")), "other family");
        assert_eq!(r.with_prefix(ip("10.1.2.11")).to_string(), "10.1.2.11/16");
    }

    #[test]
    fn invalid_ranges_name_the_field_and_value() {
        let e = range_err("10.1.0.5/24", None, None, None);
        assert_eq!(e.field, "subnet");
        assert_eq!(
            e.msg,
            "10.1.0.5/24 has host bits set (the network is 10.1.0.0/24)"
        );
        for small in [
            "10.1.0.0/31",
            "10.1.0.0/32",
            "2001:db8::/127",
            "2001:db8::/128",
        ] {
            let e = range_err(small, None, None, None);
            assert_eq!(e.field, "subnet", "{small}");
            assert!(
                e.msg.starts_with(&format!("{small} is too small")),
                "{}",
                e.msg
            );
        }
        let e = range_err("::ffff:10.0.0.0/120", None, None, None);
        assert!(e.msg.contains("IPv4-mapped"), "{}", e.msg);
        let e = range_err("10.1.0.0/24", Some("10.2.0.1"), None, None);
        assert_eq!(
            (e.field, e.msg.as_str()),
            ("rangeStart", "10.2.0.1 is not in subnet 10.1.0.0/24")
        );
        let e = range_err("10.1.0.0/24", None, Some("10.1.1.0"), None);
        assert_eq!(
            (e.field, e.msg.as_str()),
            ("rangeEnd", "10.1.1.0 is not in subnet 10.1.0.0/24")
        );
        let e = range_err("10.1.0.0/24", Some("10.1.0.20"), Some("10.1.0.10"), None);
        assert_eq!(
            (e.field, e.msg.as_str()),
            ("rangeEnd", "10.1.0.10 is before rangeStart 10.1.0.20")
        );
        let e = range_err("10.1.0.0/24", None, None, Some("10.9.0.1"));
        assert_eq!(
            (e.field, e.msg.as_str()),
            ("gateway", "10.9.0.1 is not in subnet 10.1.0.0/24")
        );
        let e = range_err("10.1.0.0/24", None, None, Some("2001:db8::1"));
        assert_eq!(e.field, "gateway");
        assert!(e.msg.contains("same address family"), "{}", e.msg);
        let e = range_err("2001:db8::/64", Some("10.1.0.1"), None, None);
        assert_eq!(e.field, "rangeStart");
    }

    #[test]
    fn first_walk_starts_at_range_start_and_skips_the_gateway() {
        let set = RangeSet::new(vec![range("10.1.0.0/29", None, None, None)]).unwrap();
        assert_eq!(
            walk(&set, None),
            ["10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"]
        );
        let set = RangeSet::new(vec![range("10.1.0.0/29", None, None, Some("10.1.0.4"))]).unwrap();
        assert_eq!(
            walk(&set, None),
            ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.5", "10.1.0.6"]
        );
    }

    #[test]
    fn walk_resumes_after_last_reserved_and_wraps() {
        let set = RangeSet::new(vec![range("10.1.0.0/29", None, None, None)]).unwrap();
        assert_eq!(
            walk(&set, Some("10.1.0.4")),
            ["10.1.0.5", "10.1.0.6", "10.1.0.2", "10.1.0.3", "10.1.0.4"],
            "the last reserved address comes last"
        );
        assert_eq!(
            walk(&set, Some("10.1.0.6")),
            ["10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"]
        );
        // Outside the set (a config change): start over at rangeStart.
        assert_eq!(
            walk(&set, Some("10.9.0.1")).first().map(String::as_str),
            Some("10.1.0.2")
        );
    }

    #[test]
    fn walk_crosses_the_ranges_of_a_set() {
        let set = RangeSet::new(vec![
            range("10.1.0.0/24", Some("10.1.0.10"), Some("10.1.0.11"), None),
            range("10.2.0.0/24", Some("10.2.0.1"), Some("10.2.0.3"), None),
        ])
        .unwrap();
        assert_eq!(
            walk(&set, None),
            ["10.1.0.10", "10.1.0.11", "10.2.0.2", "10.2.0.3"]
        );
        assert_eq!(
            walk(&set, Some("10.1.0.11")),
            ["10.2.0.2", "10.2.0.3", "10.1.0.10", "10.1.0.11"]
        );
        let (r, a) = set
            .candidates(Some("10.1.0.11".parse().unwrap()))
            .next()
            .unwrap();
        assert_eq!((r.gateway(), a), (ip("10.2.0.1"), ip("10.2.0.2")));
    }

    #[test]
    fn ipv6_walk_wraps_at_the_last_address() {
        let set = RangeSet::new(vec![range("2001:db8::/126", None, None, None)]).unwrap();
        assert_eq!(walk(&set, None), ["2001:db8::2", "2001:db8::3"]);
        assert_eq!(
            walk(&set, Some("2001:db8::3")),
            ["2001:db8::2", "2001:db8::3"]
        );
        let big = RangeSet::new(vec![range("2001:db8::/64", None, None, None)]).unwrap();
        let mut it = big.candidates(Some(ip("2001:db8::ffff:ffff:ffff:fffe")));
        assert_eq!(it.next().unwrap().1, ip("2001:db8::ffff:ffff:ffff:ffff"));
        assert_eq!(
            it.next().unwrap().1,
            ip("2001:db8::2"),
            "wraps, skipping the gateway ::1"
        );
    }

    #[test]
    fn a_range_holding_only_its_gateway_yields_nothing() {
        let set = RangeSet::new(vec![range(
            "10.1.0.0/24",
            Some("10.1.0.1"),
            Some("10.1.0.1"),
            None,
        )])
        .unwrap();
        assert!(walk(&set, None).is_empty());
        assert!(walk(&set, Some("10.1.0.1")).is_empty());
        assert_eq!(set.free_count(&HashSet::new()), 0);
    }

    #[test]
    fn free_count_ignores_gateways_and_foreign_addresses() {
        let set = RangeSet::new(vec![range("10.1.0.0/29", None, None, None)]).unwrap();
        let mut taken: HashSet<IpAddr> = HashSet::new();
        assert_eq!(set.free_count(&taken), 5);
        taken.extend([
            ip("10.1.0.2"),
            ip("10.1.0.1"),
            ip("10.9.0.2"),
            ip("2001:db8::2"),
        ]);
        assert_eq!(set.free_count(&taken), 4);
        let whole = RangeSet::new(vec![range("::/0", Some("::"), None, Some("::1"))]).unwrap();
        assert_eq!(
            whole.free_count(&HashSet::new()),
            u128::MAX - 1,
            "saturates, less the gateway"
        );
    }

    #[test]
    fn sets_refuse_mixed_families_and_overlaps() {
        let e = RangeSet::new(vec![
            range("10.1.0.0/24", None, None, None),
            range("2001:db8::/64", None, None, None),
        ])
        .unwrap_err();
        assert!(matches!(e, SetError::MixedFamilies { index: 1, .. }), "{e}");
        let e = RangeSet::new(vec![
            range("10.1.0.0/24", Some("10.1.0.10"), Some("10.1.0.20"), None),
            range("10.1.0.0/24", Some("10.1.0.20"), Some("10.1.0.30"), None),
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ranges 0 and 1 overlap: 10.1.0.10-10.1.0.20 and 10.1.0.20-10.1.0.30"
        );
        // Disjoint ranges of one subnet are fine.
        let ok = RangeSet::new(vec![
            range("10.1.0.0/24", Some("10.1.0.10"), Some("10.1.0.19"), None),
            range("10.1.0.0/24", Some("10.1.0.20"), Some("10.1.0.30"), None),
        ])
        .unwrap();
        assert_eq!(ok.to_string(), "10.1.0.10-10.1.0.19,10.1.0.20-10.1.0.30");
        assert_eq!(RangeSet::new(vec![]).unwrap_err(), SetError::Empty);
    }

    #[test]
    fn set_overlap_and_gateway_lookup() {
        let a = RangeSet::new(vec![range("10.1.0.0/16", None, None, None)]).unwrap();
        let b = RangeSet::new(vec![range("10.1.4.0/24", None, None, None)]).unwrap();
        let c = RangeSet::new(vec![range("2001:db8::/64", None, None, None)]).unwrap();
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c));
        assert!(a.is_gateway(ip("10.1.0.1")));
        assert!(!a.is_gateway(ip("10.1.0.2")));
        assert!(!a.is_gateway(ip("10.2.0.1")));
    }
}
