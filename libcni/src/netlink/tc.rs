//! Traffic control: qdiscs and filters, and the arithmetic behind a token
//! bucket's parameters.
//!
//! This module owns what the bandwidth and tc-redirect-tap plugins put on
//! links through the kernel's tc interface: the TBF (token bucket filter)
//! qdisc, the ingress qdisc, and a u32 match-all filter whose `mirred`
//! action redirects every packet to another link (bandwidth: to an IFB;
//! tc-redirect-tap: between a veth and a tap, both ways, Kata's "tcfilter"
//! model). Each can be added or replaced, dumped and read back, and
//! deleted. The redirect filter is the one `tc filter add ... protocol all
//! u32 match u32 0 0 action mirred egress redirect dev T` sends, and the
//! one vishvananda/netlink builds for a `U32` without a selector (under
//! awslabs' tc-redirect-tap), so each side reads the other's.
//!
//! netlink-packet-route 0.34 has no TBF, so the options of everything sent
//! from here (TBF, and the u32 filter with its action) are encoded by hand,
//! field for field as `tc` sends them. Replies are read with the crate where it
//! understands the kind (u32, mirred) and by hand where it does not (TBF).
//!
//! The arithmetic ([`PschedClock`], [`tbf_buffer_ticks`], [`tbf_limit`],
//! [`kernel_buffer_ticks`]) is the one of `tc` and of the Go bandwidth
//! plugin (through vishvananda/netlink), plus the kernel's own conversion of
//! a burst in bytes into the bucket it keeps, so a caller can compute
//! exactly what a read back must show.

use netlink_packet_core::{
    DefaultNla, Emitable, Nla, NlasIterator, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE,
};
use netlink_packet_route::tc::{
    TcActionAttribute, TcActionMirrorOption, TcActionOption, TcActionType, TcAttribute,
    TcFilterU32Option, TcMessage, TcMirrorActionType, TcOption,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::Netlink;
use crate::{Error, Result};

/// `TC_H_ROOT`: the parent of a link's root qdisc.
pub const ROOT: u32 = 0xffff_ffff;
/// `TC_H_INGRESS` (= `TC_H_CLSACT`): the parent of the ingress or clsact qdisc.
pub const INGRESS_PARENT: u32 = 0xffff_fff1;
/// `ffff:`, the handle of the ingress (or clsact) qdisc, and the parent
/// `tc filter add ... parent ffff:` attaches ingress filters to.
pub const INGRESS_HANDLE: u32 = 0xffff_0000;
/// `ffff:fff2`: the ingress hook of a clsact qdisc, as a filter parent.
pub const CLSACT_INGRESS: u32 = 0xffff_fff2;
/// `ETH_P_ALL`: a filter protocol matching every packet.
pub const ETH_P_ALL: u16 = 0x0003;

/// tc's time unit: microseconds per second (`TIME_UNITS_PER_SEC`).
pub const TIME_UNITS_PER_SEC: u64 = 1_000_000;
/// Where the kernel publishes its packet scheduler clock.
pub const PSCHED_PATH: &str = "/proc/net/psched";

const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
const TCA_TBF_BURST: u16 = 6;
/// `TC_LINKLAYER_ETHERNET`: rates count Ethernet frames (what `tc` sends).
const TC_LINKLAYER_ETHERNET: u8 = 1;
/// `sizeof(struct tc_tbf_qopt)`: two `tc_ratespec` of 12 bytes, then
/// limit, buffer and mtu.
const TBF_QOPT_LEN: usize = 36;

const TCA_U32_CLASSID: u16 = 1;
const TCA_U32_SEL: u16 = 5;
const TCA_U32_ACT: u16 = 7;
/// `TC_U32_TERMINAL`: a match ends classification.
const TC_U32_TERMINAL: u8 = 1;
const TCA_ACT_KIND: u16 = 1;
const TCA_ACT_OPTIONS: u16 = 2;
const TCA_MIRRED_PARMS: u16 = 2;
/// `TC_ACT_STOLEN`: the packet left this pipeline (redirected).
const TC_ACT_STOLEN: i32 = 4;
/// `TCA_EGRESS_REDIR`: mirred sends the packet out of the target link.
const TCA_EGRESS_REDIR: i32 = 1;

/// `major:minor` as a tc handle.
pub const fn handle(major: u16, minor: u16) -> u32 {
    ((major as u32) << 16) | minor as u32
}

/// A handle as `tc` prints it: `root`, `1:`, `ffff:`, `ffff:fff1`.
pub fn format_handle(h: u32) -> String {
    match h {
        ROOT => "root".to_string(),
        _ if h & 0xffff == 0 => format!("{:x}:", h >> 16),
        _ => format!("{:x}:{:x}", h >> 16, h & 0xffff),
    }
}

// ---- arithmetic -------------------------------------------------------------

/// The kernel's packet scheduler clock as `/proc/net/psched` describes it:
/// how many psched ticks make a microsecond. tc and vishvananda/netlink
/// (under the Go plugins) convert between times and ticks with it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PschedClock {
    tick_in_usec: f64,
}

impl PschedClock {
    /// Reads [`PSCHED_PATH`].
    pub fn read() -> Result<PschedClock> {
        let text = std::fs::read_to_string(PSCHED_PATH)
            .map_err(|e| Error::kernel(format!("read {PSCHED_PATH}"), e))?;
        PschedClock::parse(&text).ok_or_else(|| {
            Error::kernel(
                format!("read {PSCHED_PATH}"),
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unexpected contents {:?}", text.trim()),
                ),
            )
        })
    }

    /// Parses the file's hex words `t2us us2t clock_res ...` as
    /// `tc_core_init` does, with its compatibility rule: a clock resolution
    /// of 1 GHz advertises a tick multiplier of 1000 that really is 1.
    pub fn parse(text: &str) -> Option<PschedClock> {
        let mut words = text.split_whitespace().map(|w| u32::from_str_radix(w, 16));
        let mut t2us = f64::from(words.next()?.ok()?);
        let us2t = f64::from(words.next()?.ok()?);
        let clock_res = f64::from(words.next()?.ok()?);
        if us2t == 0.0 || t2us == 0.0 {
            return None;
        }
        if clock_res == 1e9 {
            t2us = us2t;
        }
        let clock_factor = clock_res / TIME_UNITS_PER_SEC as f64;
        Some(PschedClock {
            tick_in_usec: t2us / us2t * clock_factor,
        })
    }

    /// Ticks per microsecond (15.625 on current kernels: a tick is 64 ns).
    pub fn ticks_per_usec(&self) -> f64 {
        self.tick_in_usec
    }

    /// `tc_core_time2tick`: microseconds to ticks, truncated. Not wrapped
    /// to 32 bits: the caller decides what a larger value means.
    pub fn time_to_ticks(&self, usec: u64) -> u64 {
        (usec as f64 * self.tick_in_usec) as u64
    }

    /// `tc_core_tick2time`: ticks to microseconds, truncated.
    pub fn ticks_to_time(&self, ticks: u64) -> u64 {
        (ticks as f64 / self.tick_in_usec) as u64
    }
}

/// The bucket of `burst` bytes at `rate` bytes/s as the time to send it,
/// in psched ticks: what the Go plugin sends as TBF `buffer` (its
/// `buffer(rate, burst)`, also `tc`'s `tc_calc_xmittime`): microseconds
/// truncated, then ticks truncated. Not wrapped to 32 bits (Go wraps it).
/// `rate` must not be 0.
pub fn tbf_buffer_ticks(rate: u64, burst: u32, clock: &PschedClock) -> u64 {
    let usec = (f64::from(burst) * TIME_UNITS_PER_SEC as f64 / rate as f64) as u64;
    clock.time_to_ticks(usec)
}

/// The TBF `limit` of the Go plugin: the bytes `rate` sends in
/// `latency_usec`, truncated, plus the burst. Not wrapped to 32 bits.
pub fn tbf_limit(rate: u64, latency_usec: u32, burst: u32) -> u64 {
    (rate as f64 * f64::from(latency_usec) / TIME_UNITS_PER_SEC as f64) as u64 + u64::from(burst)
}

/// The bytes a bucket of `buffer` ticks holds at `rate` bytes/s, as `tc`
/// prints the burst of a TBF it reads back (`tc_calc_xmitsize`).
pub fn tbf_burst_bytes(rate: u64, buffer: u32, clock: &PschedClock) -> u64 {
    let usec = clock.ticks_to_time(u64::from(buffer));
    (rate as f64 * usec as f64 / TIME_UNITS_PER_SEC as f64) as u64
}

/// The kernel's `psched_ratecfg_precompute`: the multiplier and shift that
/// turn a length in bytes into nanoseconds at `rate` bytes/s.
fn ratecfg_precompute(rate: u64) -> (u32, u8) {
    let mut factor: u64 = 1_000_000_000;
    let (mut mult, mut shift) = (1u32, 0u8);
    if rate == 0 {
        return (mult, shift);
    }
    loop {
        mult = (factor / rate) as u32;
        if mult & (1 << 31) != 0 || factor & (1 << 63) != 0 {
            break;
        }
        factor <<= 1;
        shift += 1;
    }
    (mult, shift)
}

/// The `buffer` the kernel reports (in ticks) for a TBF given
/// `TCA_TBF_BURST` = `burst` bytes at `rate` bytes/s: it keeps
/// `psched_l2t_ns(rate, burst)` nanoseconds and reports them as 64 ns ticks
/// in a 32-bit field (so a bucket of more than ~275 s wraps in the report,
/// not in the shaping).
pub fn kernel_buffer_ticks(rate: u64, burst: u32) -> u32 {
    let (mult, shift) = ratecfg_precompute(rate);
    let ns = (u64::from(burst) * u64::from(mult)) >> shift;
    (ns >> 6) as u32
}

// ---- TBF --------------------------------------------------------------------

/// A TBF (token bucket filter) qdisc's parameters, in the kernel's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    /// Rate in bytes per second.
    pub rate: u64,
    /// The bucket, as the time to send it at `rate`, in psched ticks.
    pub buffer: u32,
    /// Bytes that may wait for tokens (the limit of TBF's bfifo).
    pub limit: u32,
    /// The bucket in bytes (`TCA_TBF_BURST`). When sent, the kernel derives
    /// its bucket from it with 64-bit precision and ignores `buffer`. The
    /// kernel never reports it: always `None` in what is read back.
    pub burst: Option<u32>,
}

/// The `TCA_OPTIONS` attributes of `tbf`, as `tc qdisc ... tbf` sends them
/// (without the rate table, which kernels since 3.13 ignore):
/// `TCA_TBF_PARMS`, `TCA_TBF_RATE64` when the rate needs 64 bits, and
/// `TCA_TBF_BURST` when `burst` is set.
fn tbf_options(tbf: &Tbf) -> Vec<DefaultNla> {
    let mut parms = Vec::with_capacity(TBF_QOPT_LEN);
    // struct tc_ratespec rate: cell_log, linklayer, overhead, cell_align, mpu, rate.
    parms.push(0u8);
    parms.push(TC_LINKLAYER_ETHERNET);
    parms.extend_from_slice(&0u16.to_ne_bytes());
    parms.extend_from_slice(&0i16.to_ne_bytes());
    parms.extend_from_slice(&0u16.to_ne_bytes());
    parms.extend_from_slice(&u32::try_from(tbf.rate).unwrap_or(u32::MAX).to_ne_bytes());
    // struct tc_ratespec peakrate: none.
    parms.extend_from_slice(&[0u8; 12]);
    parms.extend_from_slice(&tbf.limit.to_ne_bytes());
    parms.extend_from_slice(&tbf.buffer.to_ne_bytes());
    // mtu: the peak bucket, unused without a peak rate.
    parms.extend_from_slice(&0u32.to_ne_bytes());
    let mut nlas = vec![DefaultNla::new(TCA_TBF_PARMS, parms)];
    if tbf.rate > u64::from(u32::MAX) {
        nlas.push(DefaultNla::new(
            TCA_TBF_RATE64,
            tbf.rate.to_ne_bytes().to_vec(),
        ));
    }
    if let Some(burst) = tbf.burst {
        nlas.push(DefaultNla::new(TCA_TBF_BURST, burst.to_ne_bytes().to_vec()));
    }
    nlas
}

/// Reads a TBF's parameters from the contents of its `TCA_OPTIONS`.
fn parse_tbf(options: &[u8]) -> Option<Tbf> {
    let mut tbf = None;
    let mut rate64 = None;
    for nla in NlasIterator::new(options) {
        let nla = nla.ok()?;
        let v = nla.value();
        match nla.kind() {
            TCA_TBF_PARMS if v.len() >= TBF_QOPT_LEN => {
                let word = |at: usize| u32::from_ne_bytes([v[at], v[at + 1], v[at + 2], v[at + 3]]);
                tbf = Some(Tbf {
                    rate: u64::from(word(8)),
                    limit: word(24),
                    buffer: word(28),
                    burst: None,
                });
            }
            TCA_TBF_RATE64 if v.len() >= 8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&v[..8]);
                rate64 = Some(u64::from_ne_bytes(b));
            }
            _ => {}
        }
    }
    let mut tbf = tbf?;
    if let Some(r) = rate64 {
        tbf.rate = tbf.rate.max(r);
    }
    Some(tbf)
}

// ---- the u32 redirect filter -------------------------------------------------

/// A u32 filter matching every packet, with a `mirred egress redirect`
/// action to another link: `tc filter add dev D parent P protocol all prio
/// N u32 match u32 0 0 classid C action mirred egress redirect dev T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedirectFilter {
    /// The filter's priority (`pref`); lower runs first. 0 lets the kernel
    /// pick, as `tc` without `prio` does: one below the lowest priority of
    /// 32768 or more under that parent, or 49152 when there is none, so
    /// the filter runs after those with a priority chosen below 32768.
    pub priority: u16,
    /// The class the match reports (`flowid`/`classid`); 0 for none.
    pub classid: u32,
    /// Index of the link packets are redirected to.
    pub target: u32,
}

/// Appends one netlink attribute (header, value, padding) to `out`.
fn push_nla(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len() + (4 - len % 4) % 4, 0);
}

/// The `TCA_OPTIONS` attributes of `filter` as a u32 filter:
/// `TCA_U32_CLASSID` (when set), `TCA_U32_SEL` (one key, mask 0, terminal:
/// matches everything), and `TCA_U32_ACT` with one `mirred` action.
fn redirect_filter_options(filter: &RedirectFilter) -> Vec<DefaultNla> {
    // struct tc_u32_sel: flags, offshift, nkeys, pad, offmask (be16), off,
    // offoff, hoff, hmask (be32); then one struct tc_u32_key: mask and val
    // (be32), off, offmask: all zero.
    let mut sel = vec![TC_U32_TERMINAL, 0, 1, 0];
    sel.extend_from_slice(&[0u8; 12]);
    sel.extend_from_slice(&[0u8; 16]);
    // struct tc_mirred: tc_gen (index, capab, action, refcnt, bindcnt),
    // eaction, ifindex.
    let mut mirred = Vec::with_capacity(28);
    mirred.extend_from_slice(&0u32.to_ne_bytes());
    mirred.extend_from_slice(&0u32.to_ne_bytes());
    mirred.extend_from_slice(&TC_ACT_STOLEN.to_ne_bytes());
    mirred.extend_from_slice(&0i32.to_ne_bytes());
    mirred.extend_from_slice(&0i32.to_ne_bytes());
    mirred.extend_from_slice(&TCA_EGRESS_REDIR.to_ne_bytes());
    mirred.extend_from_slice(&filter.target.to_ne_bytes());
    let mut mirred_options = Vec::new();
    push_nla(&mut mirred_options, TCA_MIRRED_PARMS, &mirred);
    let mut action = Vec::new();
    push_nla(&mut action, TCA_ACT_KIND, b"mirred\0");
    push_nla(&mut action, TCA_ACT_OPTIONS, &mirred_options);
    let mut actions = Vec::new();
    // Actions are numbered from 1 in the order they run.
    push_nla(&mut actions, 1, &action);

    let mut nlas = Vec::new();
    if filter.classid != 0 {
        nlas.push(DefaultNla::new(
            TCA_U32_CLASSID,
            filter.classid.to_ne_bytes().to_vec(),
        ));
    }
    nlas.push(DefaultNla::new(TCA_U32_SEL, sel));
    nlas.push(DefaultNla::new(TCA_U32_ACT, actions));
    nlas
}

/// The `RTM_NEWTFILTER` body of `filter` (protocol all) under `parent` of
/// link `index`.
fn redirect_filter_message(index: u32, parent: u32, filter: &RedirectFilter) -> TcMessage {
    let mut msg = tc_message(index, parent, 0, filter_info(filter.priority, ETH_P_ALL));
    msg.attributes.push(TcAttribute::Kind("u32".to_string()));
    msg.attributes.push(TcAttribute::Options(
        redirect_filter_options(filter)
            .into_iter()
            .map(TcOption::Other)
            .collect(),
    ));
    msg
}

/// The `RTM_NEWQDISC` body of the ingress qdisc of link `index`:
/// `tc qdisc add dev D handle ffff: ingress`.
fn ingress_qdisc_message(index: u32) -> TcMessage {
    let mut msg = tc_message(index, INGRESS_PARENT, INGRESS_HANDLE, 0);
    msg.attributes
        .push(TcAttribute::Kind("ingress".to_string()));
    msg
}

// ---- what is read back -------------------------------------------------------

/// A qdisc as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    /// Index of the link.
    pub index: u32,
    /// Its handle (`1:` is `0x0001_0000`).
    pub handle: u32,
    /// Its parent: [`ROOT`], [`INGRESS_PARENT`] or a class.
    pub parent: u32,
    /// Its kind: "tbf", "ingress", "clsact", "fq_codel", ...
    pub kind: String,
    /// For a TBF, its parameters.
    pub tbf: Option<Tbf>,
}

/// A filter as the kernel reports it. A u32 filter's hash table shows up
/// as an entry of its own, with no match and no action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Index of the link.
    pub index: u32,
    /// The parent it is attached to.
    pub parent: u32,
    /// The filter's handle (for u32, `800::800` is `0x8000_0800`).
    pub handle: u32,
    /// Priority (`pref`).
    pub priority: u16,
    /// Protocol, host byte order ([`ETH_P_ALL`], `ETH_P_IP`, ...).
    pub protocol: u16,
    /// Its kind: "u32", "matchall", "bpf", "flower", ...
    pub kind: String,
    /// u32: the class it reports, if any.
    pub classid: Option<u32>,
    /// u32: whether its selector matches every packet (one key, mask 0).
    pub match_all: bool,
    /// u32: the target link of a `mirred egress redirect` action, if any.
    pub redirect: Option<u32>,
}

impl Filter {
    /// A u32 filter's key node (a rule), as opposed to the hash table
    /// entries and the per-priority header a u32 dump also holds: its
    /// handle has a node id (the low 12 bits).
    pub fn is_u32_rule(&self) -> bool {
        self.kind == "u32" && self.handle & 0xfff != 0
    }

    /// Whether this is a rule of any classifier, not the bookkeeping a u32
    /// dump adds (its hash tables): what makes a qdisc's filters non-empty.
    pub fn is_rule(&self) -> bool {
        self.kind != "u32" || self.is_u32_rule()
    }

    /// The target of a [`RedirectFilter`] as read back: a u32 rule of
    /// protocol all that matches every packet and redirects it to that
    /// link.
    pub fn match_all_redirect(&self) -> Option<u32> {
        if self.is_u32_rule() && self.match_all && self.protocol == ETH_P_ALL {
            self.redirect
        } else {
            None
        }
    }
}

fn tc_message(index: u32, parent: u32, handle: u32, info: u32) -> TcMessage {
    let mut msg = TcMessage::with_index(index as i32);
    msg.header.parent = parent.into();
    msg.header.handle = handle.into();
    msg.header.info = info;
    msg
}

/// `tcm_info` of a filter: priority in the upper half, protocol in network
/// byte order in the lower.
fn filter_info(priority: u16, protocol: u16) -> u32 {
    (u32::from(priority) << 16) | u32::from(protocol.to_be())
}

fn kind_of(attrs: &[TcAttribute]) -> String {
    attrs
        .iter()
        .find_map(|a| match a {
            TcAttribute::Kind(k) => Some(k.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

impl Qdisc {
    fn from_message(msg: TcMessage) -> Qdisc {
        let kind = kind_of(&msg.attributes);
        let mut tbf = None;
        if kind == "tbf" {
            for attr in &msg.attributes {
                if let TcAttribute::Options(options) = attr {
                    for option in options {
                        if let TcOption::Other(nla) = option {
                            let mut raw = vec![0u8; nla.buffer_len()];
                            nla.emit(&mut raw);
                            // The crate keeps an unknown kind's TCA_OPTIONS as
                            // one attribute; its value holds TBF's attributes.
                            tbf = tbf.or_else(|| parse_tbf(&raw[4..4 + nla.value_len()]));
                        }
                    }
                }
            }
        }
        Qdisc {
            index: msg.header.index as u32,
            handle: msg.header.handle.into(),
            parent: msg.header.parent.into(),
            kind,
            tbf,
        }
    }
}

impl Filter {
    fn from_message(msg: TcMessage) -> Filter {
        let kind = kind_of(&msg.attributes);
        let mut filter = Filter {
            index: msg.header.index as u32,
            parent: msg.header.parent.into(),
            handle: msg.header.handle.into(),
            priority: (msg.header.info >> 16) as u16,
            protocol: u16::from_be(msg.header.info as u16),
            kind,
            classid: None,
            match_all: false,
            redirect: None,
        };
        for attr in msg.attributes {
            let TcAttribute::Options(options) = attr else {
                continue;
            };
            for option in options {
                let TcOption::U32(u) = option else { continue };
                match u {
                    TcFilterU32Option::ClassId(c) => filter.classid = Some(c.into()),
                    TcFilterU32Option::Selector(sel) => {
                        filter.match_all = sel.keys.len() == 1 && sel.keys[0].mask == 0;
                    }
                    TcFilterU32Option::Action(actions) => {
                        for action in actions {
                            filter.redirect =
                                filter.redirect.or_else(|| redirect_of(&action.attributes));
                        }
                    }
                    _ => {}
                }
            }
        }
        filter
    }
}

/// The target of a `mirred egress redirect` action.
fn redirect_of(attrs: &[TcActionAttribute]) -> Option<u32> {
    attrs.iter().find_map(|a| match a {
        TcActionAttribute::Options(options) => options.iter().find_map(|o| match o {
            TcActionOption::Mirror(TcActionMirrorOption::Parms(m))
                if m.eaction == TcMirrorActionType::EgressRedir
                    && m.generic.action == TcActionType::Stolen =>
            {
                Some(m.ifindex)
            }
            _ => None,
        }),
        _ => None,
    })
}

impl Netlink {
    /// The qdiscs of link `index`, or of every link when `index` is 0,
    /// including a visible default root (handle 0, e.g. `noqueue`).
    pub fn qdiscs(&mut self, index: u32) -> Result<Vec<Qdisc>> {
        let replies = self.request(
            RouteNetlinkMessage::GetQueueDiscipline(tc_message(index, 0, 0, 0)),
            NLM_F_DUMP,
            || format!("list qdiscs of link {index}"),
        )?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewQueueDiscipline(q) => Some(Qdisc::from_message(q)),
                _ => None,
            })
            .filter(|q| index == 0 || q.index == index)
            .collect())
    }

    /// The qdisc of link `index` whose parent is `parent` ([`ROOT`] or
    /// [`INGRESS_PARENT`]), if the kernel reports one there.
    pub fn qdisc_at(&mut self, index: u32, parent: u32) -> Result<Option<Qdisc>> {
        Ok(self.qdiscs(index)?.into_iter().find(|q| q.parent == parent))
    }

    /// Adds a TBF with `handle` under `parent` of link `index`, or replaces
    /// the qdisc there (`tc qdisc replace`): a TBF with the same handle is
    /// changed in place, a qdisc with another handle is swapped out. A
    /// qdisc of another kind with the same handle is refused by the kernel
    /// (`EINVAL`): delete it first.
    pub fn replace_tbf(&mut self, index: u32, parent: u32, handle: u32, tbf: &Tbf) -> Result<()> {
        let mut msg = tc_message(index, parent, handle, 0);
        msg.attributes.push(TcAttribute::Kind("tbf".to_string()));
        msg.attributes.push(TcAttribute::Options(
            tbf_options(tbf).into_iter().map(TcOption::Other).collect(),
        ));
        self.request(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
            || {
                format!(
                    "replace qdisc {} {} of link {index} with tbf rate {} bytes/s buffer {} ticks limit {} bytes",
                    format_handle(parent),
                    format_handle(handle),
                    tbf.rate,
                    tbf.buffer,
                    tbf.limit
                )
            },
        )?;
        Ok(())
    }

    /// Adds the ingress qdisc (`ffff:`) to link `index`. If the link
    /// already has one (or a clsact qdisc), the error has errno `EEXIST`
    /// ([`super::is_exists`]).
    pub fn add_ingress_qdisc(&mut self, index: u32) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewQueueDiscipline(ingress_qdisc_message(index)),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add ingress qdisc to link {index}"),
        )?;
        Ok(())
    }

    /// Where the ingress filters of link `index` attach, and the kind of
    /// the qdisc that holds them: [`INGRESS_HANDLE`] under an `ingress`
    /// qdisc, [`CLSACT_INGRESS`] under a `clsact` one; `None` when the link
    /// has neither (or is gone).
    pub fn ingress_hook(&mut self, index: u32) -> Result<Option<(u32, String)>> {
        let q = match self.qdisc_at(index, INGRESS_PARENT) {
            Ok(q) => q,
            Err(e) if super::is_not_found(&e) => None,
            Err(e) => return Err(e),
        };
        Ok(q.and_then(|q| match q.kind.as_str() {
            "ingress" => Some((INGRESS_HANDLE, q.kind)),
            "clsact" => Some((CLSACT_INGRESS, q.kind)),
            _ => None,
        }))
    }

    /// Deletes the qdisc `handle` under `parent` of link `index` (with its
    /// filters and children). A link that is gone is `ENODEV`; a qdisc that
    /// is not there is `ENOENT` or, where the kernel finds the default
    /// qdisc instead, `EINVAL`: look before deleting.
    pub fn delete_qdisc(&mut self, index: u32, parent: u32, handle: u32) -> Result<()> {
        self.request(
            RouteNetlinkMessage::DelQueueDiscipline(tc_message(index, parent, handle, 0)),
            0,
            || {
                format!(
                    "delete qdisc {} {} of link {index}",
                    format_handle(parent),
                    format_handle(handle)
                )
            },
        )?;
        Ok(())
    }

    /// The filters attached to `parent` of link `index`; `priority` and
    /// `protocol` narrow the dump when not 0 (the kernel filters, so other
    /// filters are not even decoded).
    pub fn filters(
        &mut self,
        index: u32,
        parent: u32,
        priority: u16,
        protocol: u16,
    ) -> Result<Vec<Filter>> {
        let msg = tc_message(index, parent, 0, filter_info(priority, protocol));
        let replies = self.request(
            RouteNetlinkMessage::GetTrafficFilter(msg),
            NLM_F_DUMP,
            || format!("list filters of {} of link {index}", format_handle(parent)),
        )?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewTrafficFilter(f) => Some(Filter::from_message(f)),
                _ => None,
            })
            .collect())
    }

    /// Adds `filter` (protocol all) under `parent` of link `index`. The
    /// kernel picks the new filter's handle, so adding twice adds two.
    pub fn add_redirect_filter(
        &mut self,
        index: u32,
        parent: u32,
        filter: &RedirectFilter,
    ) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewTrafficFilter(redirect_filter_message(index, parent, filter)),
            NLM_F_CREATE | NLM_F_EXCL,
            || {
                format!(
                    "add u32 filter prio {} to {} of link {index} redirecting to link {}",
                    filter.priority,
                    format_handle(parent),
                    filter.target
                )
            },
        )?;
        Ok(())
    }

    /// Deletes every filter of `kind` at `priority` and `protocol` under
    /// `parent` of link `index`: the whole classifier instance, e.g. a u32
    /// whose rules are all gone but whose hash table stays behind.
    pub fn delete_filter_priority(
        &mut self,
        index: u32,
        parent: u32,
        priority: u16,
        protocol: u16,
        kind: &str,
    ) -> Result<()> {
        let mut msg = tc_message(index, parent, 0, filter_info(priority, protocol));
        msg.attributes.push(TcAttribute::Kind(kind.to_string()));
        self.request(RouteNetlinkMessage::DelTrafficFilter(msg), 0, || {
            format!(
                "delete {kind} filters prio {priority} of {} of link {index}",
                format_handle(parent)
            )
        })?;
        Ok(())
    }

    /// Deletes one filter, as read back by [`Netlink::filters`] (by its
    /// handle: the other filters of its priority stay).
    pub fn delete_filter(&mut self, filter: &Filter) -> Result<()> {
        let mut msg = tc_message(
            filter.index,
            filter.parent,
            filter.handle,
            filter_info(filter.priority, filter.protocol),
        );
        msg.attributes.push(TcAttribute::Kind(filter.kind.clone()));
        self.request(RouteNetlinkMessage::DelTrafficFilter(msg), 0, || {
            format!(
                "delete {} filter {:x} prio {} of link {}",
                filter.kind, filter.handle, filter.priority, filter.index
            )
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// For a kernel test (`None` without root): a fresh namespace, a
    /// socket in it, and two IFBs named `names`, without a queue.
    fn two_ifbs(
        test: &str,
        names: [&'static str; 2],
    ) -> Option<(crate::netns::NetNs, Netlink, [crate::netlink::Link; 2])> {
        use crate::netlink::ifb::IfbSpec;
        use crate::netns::testing::{new_netns, privileged};
        if !privileged(test) {
            return None;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        let links = names.map(|name| {
            let spec = IfbSpec {
                name,
                mtu: 1500,
                txqueuelen: 0,
                alias: "",
            };
            nl.ensure_ifb(&spec).unwrap()
        });
        Some((ns, nl, links))
    }

    fn emit(nlas: &[DefaultNla]) -> Vec<u8> {
        let mut out = vec![0u8; nlas.buffer_len()];
        nlas.emit(&mut out);
        out
    }

    const CLOCK: &str = "000003e8 00000040 000f4240 3b9aca00\n";

    #[test]
    fn tc_handles_format_like_tc() {
        assert_eq!(handle(1, 0), 0x0001_0000);
        assert_eq!(handle(0xffff, 0), INGRESS_HANDLE);
        assert_eq!(format_handle(handle(1, 0)), "1:");
        assert_eq!(format_handle(INGRESS_HANDLE), "ffff:");
        assert_eq!(format_handle(INGRESS_PARENT), "ffff:fff1");
        assert_eq!(format_handle(handle(1, 1)), "1:1");
        assert_eq!(format_handle(ROOT), "root");
        assert_eq!(filter_info(1, ETH_P_ALL), 0x0001_0300);
    }

    #[test]
    fn tc_psched_clock_parses_like_tc_core_init() {
        let c = PschedClock::parse(CLOCK).unwrap();
        assert_eq!(c.ticks_per_usec(), 15.625);
        assert_eq!(c.time_to_ticks(10_000), 156_250);
        assert_eq!(c.ticks_to_time(156_250), 10_000);
        // A 1 GHz clock resolution advertises 1000 meaning 1.
        let ns = PschedClock::parse("000003e8 00000001 3b9aca00 3b9aca00").unwrap();
        assert_eq!(ns.ticks_per_usec(), 1000.0);
        let old = PschedClock::parse("00000001 00000001 000f4240 00000064").unwrap();
        assert_eq!(old.ticks_per_usec(), 1.0);
        for bad in ["", "x y z", "1 0 1", "000003e8 00000040"] {
            assert_eq!(PschedClock::parse(bad), None, "{bad:?}");
        }
        // The clock of this kernel is readable.
        assert!(PschedClock::read().unwrap().ticks_per_usec() > 0.0);
    }

    #[test]
    fn tc_tbf_arithmetic_matches_the_go_plugin() {
        let c = PschedClock::parse(CLOCK).unwrap();
        // 8 Mbit/s, 80 kbit burst: 1e6 bytes/s, 10000 bytes = 10 ms.
        assert_eq!(tbf_buffer_ticks(1_000_000, 10_000, &c), 156_250);
        // limit: 25 ms at 1e6 bytes/s = 25000, plus the burst.
        assert_eq!(tbf_limit(1_000_000, 25_000, 10_000), 35_000);
        assert_eq!(tbf_burst_bytes(1_000_000, 156_250, &c), 10_000);
        // Truncation: 1000 bytes at 3 bytes/s = 333333333.33 us.
        assert_eq!(
            tbf_buffer_ticks(3, 1000, &c),
            (333_333_333.0f64 * 15.625) as u64
        );
        assert_eq!(tbf_limit(3, 25_000, 1000), 1000);
        // 1 Mbit/s with the 4 Gbit burst containerd asks for: ticks past u32.
        let big = tbf_buffer_ticks(125_000, 536_870_911, &c);
        assert!(big > u64::from(u32::MAX), "{big}");
        assert_eq!(
            tbf_limit(125_000_000_000, 25_000, u32::MAX),
            3_125_000_000 + u64::from(u32::MAX)
        );
    }

    #[test]
    fn tc_kernel_buffer_follows_psched_ratecfg() {
        assert_eq!(ratecfg_precompute(1_000_000), (4_194_304_000, 22));
        assert_eq!(ratecfg_precompute(1), (4_000_000_000, 2));
        assert_eq!(ratecfg_precompute(0), (1, 0));
        // 10000 bytes at 1e6 bytes/s: 10 ms = 156250 ticks of 64 ns.
        assert_eq!(kernel_buffer_ticks(1_000_000, 10_000), 156_250);
        // Same as Go's arithmetic on round numbers.
        let c = PschedClock::parse(CLOCK).unwrap();
        for (rate, burst) in [
            (125_000u64, 12_500u32),
            (1_250_000, 1_000_000),
            (12_500_000, 64_000),
        ] {
            assert_eq!(
                u64::from(kernel_buffer_ticks(rate, burst)),
                tbf_buffer_ticks(rate, burst, &c),
                "{rate} {burst}"
            );
        }
    }

    #[test]
    fn tc_tbf_options_are_encoded_like_tc() {
        let tbf = Tbf {
            rate: 1_000_000,
            buffer: 156_250,
            limit: 35_000,
            burst: Some(10_000),
        };
        let mut want = Vec::new();
        // TCA_TBF_PARMS: len 40, type 1.
        want.extend_from_slice(&40u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // cell_log, linklayer ethernet, overhead, cell_align, mpu
        want.extend_from_slice(&1_000_000u32.to_ne_bytes());
        want.extend_from_slice(&[0; 12]); // peakrate
        want.extend_from_slice(&35_000u32.to_ne_bytes());
        want.extend_from_slice(&156_250u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes()); // mtu
                                                     // TCA_TBF_BURST: len 8, type 6.
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&6u16.to_ne_bytes());
        want.extend_from_slice(&10_000u32.to_ne_bytes());
        let bytes = emit(&tbf_options(&tbf));
        assert_eq!(bytes, want);
        assert_eq!(parse_tbf(&bytes), Some(Tbf { burst: None, ..tbf }));

        // A rate past 32 bits: rate field saturated, TCA_TBF_RATE64 (type 4).
        let fast = Tbf {
            rate: 5_000_000_000,
            buffer: 1,
            limit: 2,
            burst: None,
        };
        let bytes = emit(&tbf_options(&fast));
        assert_eq!(bytes.len(), 40 + 12);
        assert_eq!(&bytes[12..16], &u32::MAX.to_ne_bytes());
        assert_eq!(&bytes[40..44], &[12, 0, 4, 0]);
        assert_eq!(&bytes[44..52], &5_000_000_000u64.to_ne_bytes());
        assert_eq!(parse_tbf(&bytes), Some(fast));
    }

    #[test]
    fn tc_redirect_filter_options_are_encoded_like_tc() {
        let bytes = emit(&redirect_filter_options(&RedirectFilter {
            priority: 1,
            classid: handle(1, 1),
            target: 7,
        }));
        let mut want = Vec::new();
        // TCA_U32_CLASSID 1:1.
        want.extend_from_slice(&[8, 0, 1, 0]);
        want.extend_from_slice(&0x0001_0001u32.to_ne_bytes());
        want.extend(match_all_mirred_to(7));
        assert_eq!(bytes, want);
    }

    /// The u32 options of a match-all redirect to `target`, after the
    /// classid: TCA_U32_SEL, a 16-byte selector (terminal, 1 key) and one
    /// zero key; then TCA_U32_ACT { 1 { KIND "mirred", OPTIONS { PARMS
    /// tc_mirred: egress redirect to `target` } } }.
    fn match_all_mirred_to(target: i32) -> Vec<u8> {
        let mut v = vec![36, 0, 5, 0, 1, 0, 1, 0];
        v.extend_from_slice(&[0; 28]);
        v.extend_from_slice(&[56, 0, 7, 0, 52, 0, 1, 0]);
        v.extend_from_slice(&[11, 0, 1, 0]);
        v.extend_from_slice(b"mirred\0\0");
        v.extend_from_slice(&[36, 0, 2, 0, 32, 0, 2, 0]);
        for word in [0i32, 0, 4, 0, 0, 1, target] {
            v.extend_from_slice(&word.to_ne_bytes());
        }
        v
    }

    fn emit_message(msg: &TcMessage) -> Vec<u8> {
        let mut out = vec![0u8; msg.buffer_len()];
        msg.emit(&mut out);
        out
    }

    /// The `struct tcmsg` header: family, pads, ifindex, handle, parent, info.
    fn tcmsg(index: i32, handle: u32, parent: u32, info: u32) -> Vec<u8> {
        let mut v = vec![0u8, 0, 0, 0];
        v.extend_from_slice(&index.to_ne_bytes());
        v.extend_from_slice(&handle.to_ne_bytes());
        v.extend_from_slice(&parent.to_ne_bytes());
        v.extend_from_slice(&info.to_ne_bytes());
        v
    }

    #[test]
    fn tc_ingress_qdisc_message_is_the_one_tc_sends() {
        // `tc qdisc add dev D handle ffff: ingress`, as strace shows it:
        // handle ffff:, parent ffff:fff1, info 0, TCA_KIND "ingress".
        let mut want = tcmsg(7, 0xffff_0000, 0xffff_fff1, 0);
        want.extend_from_slice(&[12, 0, 1, 0]);
        want.extend_from_slice(b"ingress\0");
        assert_eq!(emit_message(&ingress_qdisc_message(7)), want);
    }

    #[test]
    fn tc_redirect_filter_message_is_a_match_all_mirred_redirect() {
        // tc-redirect-tap's filter: `tc filter add dev #7 parent ffff:
        // protocol all u32 match u32 0 0 action mirred egress redirect dev
        // #9`, no prio (the kernel picks) and no classid.
        let msg = redirect_filter_message(
            7,
            INGRESS_HANDLE,
            &RedirectFilter {
                priority: 0,
                classid: 0,
                target: 9,
            },
        );
        // info: priority 0 above, ETH_P_ALL in network order below.
        let mut want = tcmsg(7, 0, 0xffff_0000, u32::from(0x0003u16.to_be()));
        want.extend_from_slice(&[8, 0, 1, 0]);
        want.extend_from_slice(b"u32\0");
        // TCA_OPTIONS: the selector (36 bytes) and the action (56).
        want.extend_from_slice(&[96, 0, 2, 0]);
        want.extend(match_all_mirred_to(9));
        assert_eq!(emit_message(&msg), want);
        // `tc` (iproute2 6.x, strace'd) sends these very attributes, with
        // TCA_U32_ACT before TCA_U32_SEL and NLA_F_NESTED on the action's
        // options; vishvananda/netlink (the Go plugins, awslabs'
        // tc-redirect-tap) sends them in this order, without the flag.
        // The kernel reads both by type.
        let tc_options: &[u8] = &[
            0x38, 0, 7, 0, 0x34, 0, 1, 0, 0x0b, 0, 1, 0, b'm', b'i', b'r', b'r', b'e', b'd', 0, 0,
            0x24, 0, 2, 0x80, 0x20, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0x24, 0, 5, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let ours = &want[want.len() - 92..];
        assert_eq!(ours[..36], tc_options[56..]);
        let mut act = tc_options[..56].to_vec();
        act[23] &= 0x7f; // NLA_F_NESTED off
        assert_eq!(ours[36..], act[..]);
    }

    #[test]
    fn tc_filters_tell_rules_from_u32_bookkeeping() {
        let rule = Filter {
            index: 3,
            parent: INGRESS_HANDLE,
            handle: 0x8000_0800,
            priority: 49152,
            protocol: ETH_P_ALL,
            kind: "u32".into(),
            classid: None,
            match_all: true,
            redirect: Some(9),
        };
        assert!(rule.is_rule());
        assert_eq!(rule.match_all_redirect(), Some(9));
        // The hash table entry of the same u32 instance is no rule.
        let table = Filter {
            handle: 0x8000_0000,
            match_all: false,
            redirect: None,
            ..rule.clone()
        };
        assert!(!table.is_rule());
        assert_eq!(table.match_all_redirect(), None);
        // Only protocol all, matching everything, counts as a redirect.
        for other in [
            Filter {
                protocol: 0x0800,
                ..rule.clone()
            },
            Filter {
                match_all: false,
                ..rule.clone()
            },
        ] {
            assert_eq!(other.match_all_redirect(), None, "{other:?}");
        }
        // Any other classifier's entry is a rule.
        let bpf = Filter {
            kind: "bpf".into(),
            handle: 1,
            match_all: false,
            redirect: None,
            ..rule
        };
        assert!(bpf.is_rule());
    }

    #[test]
    fn tc_a_redirect_pair_under_ingress_and_clsact() {
        let Some((_ns, mut nl, [a, b])) = two_ifbs(
            "tc_a_redirect_pair_under_ingress_and_clsact",
            ["pair0", "pair1"],
        ) else {
            return;
        };
        assert_eq!(nl.ingress_hook(a.index).unwrap(), None);
        assert_eq!(nl.ingress_hook(9999).unwrap(), None);
        nl.add_ingress_qdisc(a.index).unwrap();
        assert_eq!(
            nl.ingress_hook(a.index).unwrap(),
            Some((INGRESS_HANDLE, "ingress".to_string()))
        );
        // The kernel picks the priority: 49152, then one below the lowest.
        let to_b = RedirectFilter {
            priority: 0,
            classid: 0,
            target: b.index,
        };
        nl.add_redirect_filter(a.index, INGRESS_HANDLE, &to_b)
            .unwrap();
        nl.add_redirect_filter(a.index, INGRESS_HANDLE, &to_b)
            .unwrap();
        let rules: Vec<Filter> = nl
            .filters(a.index, INGRESS_HANDLE, 0, 0)
            .unwrap()
            .into_iter()
            .filter(Filter::is_rule)
            .collect();
        let got: Vec<(u16, Option<u32>)> = rules
            .iter()
            .map(|f| (f.priority, f.match_all_redirect()))
            .collect();
        assert_eq!(
            got,
            [(49151, Some(b.index)), (49152, Some(b.index))],
            "{rules:?}"
        );
        for f in &rules {
            nl.delete_filter_priority(a.index, INGRESS_HANDLE, f.priority, ETH_P_ALL, "u32")
                .unwrap();
        }
        assert_eq!(nl.filters(a.index, INGRESS_HANDLE, 0, 0).unwrap(), vec![]);

        // Under a clsact qdisc the ingress filters hang off ffff:fff2.
        let mut msg = tc_message(b.index, INGRESS_PARENT, INGRESS_HANDLE, 0);
        msg.attributes.push(TcAttribute::Kind("clsact".to_string()));
        nl.request(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || "add clsact".to_string(),
        )
        .unwrap();
        assert_eq!(
            nl.ingress_hook(b.index).unwrap(),
            Some((CLSACT_INGRESS, "clsact".to_string()))
        );
        let to_a = RedirectFilter {
            target: a.index,
            ..to_b
        };
        nl.add_redirect_filter(b.index, CLSACT_INGRESS, &to_a)
            .unwrap();
        let found: Vec<Option<u32>> = nl
            .filters(b.index, CLSACT_INGRESS, 0, 0)
            .unwrap()
            .iter()
            .filter(|f| f.is_rule())
            .map(Filter::match_all_redirect)
            .collect();
        assert_eq!(found, [Some(a.index)]);
    }

    #[test]
    fn tc_qdiscs_and_filters_round_trip_through_the_kernel() {
        use crate::netlink::{errno, is_exists};
        let Some((_ns, mut nl, [dev, target])) = two_ifbs(
            "tc_qdiscs_and_filters_round_trip_through_the_kernel",
            ["tctest0", "tctest1"],
        ) else {
            return;
        };
        // With txqueuelen 0 an IFB's default root is noqueue, handle 0.
        let q = nl.qdisc_at(dev.index, ROOT).unwrap().unwrap();
        assert_eq!((q.kind.as_str(), q.handle, q.tbf), ("noqueue", 0, None));
        assert_eq!(nl.qdisc_at(dev.index, INGRESS_PARENT).unwrap(), None);

        // TBF with TCA_TBF_BURST: the kernel keeps its own bucket.
        let clock = PschedClock::read().unwrap();
        let mut tbf = Tbf {
            rate: 1_000_000,
            buffer: tbf_buffer_ticks(1_000_000, 10_000, &clock) as u32,
            limit: 35_000,
            burst: Some(10_000),
        };
        nl.replace_tbf(dev.index, ROOT, handle(1, 0), &tbf).unwrap();
        let q = nl.qdisc_at(dev.index, ROOT).unwrap().unwrap();
        let want = Tbf {
            buffer: kernel_buffer_ticks(1_000_000, 10_000),
            burst: None,
            ..tbf
        };
        assert_eq!(
            q,
            Qdisc {
                index: dev.index,
                handle: handle(1, 0),
                parent: ROOT,
                kind: "tbf".into(),
                tbf: Some(want),
            }
        );
        // Replaced in place, with a 64-bit rate and without a burst: the
        // kernel takes the buffer as sent.
        tbf = Tbf {
            rate: 6_000_000_000,
            buffer: 4242,
            limit: 1 << 20,
            burst: None,
        };
        nl.replace_tbf(dev.index, ROOT, handle(1, 0), &tbf).unwrap();
        let qs = nl.qdiscs(dev.index).unwrap();
        assert_eq!(qs.len(), 1, "{qs:?}");
        assert_eq!(qs[0].tbf, Some(tbf));
        assert!(nl.qdiscs(0).unwrap().iter().any(|q| q.index == dev.index));

        // Ingress qdisc: once.
        nl.add_ingress_qdisc(dev.index).unwrap();
        let err = nl.add_ingress_qdisc(dev.index).unwrap_err();
        assert!(is_exists(&err), "{err}");
        let ing = nl.qdisc_at(dev.index, INGRESS_PARENT).unwrap().unwrap();
        assert_eq!((ing.handle, ing.kind.as_str()), (INGRESS_HANDLE, "ingress"));

        // The redirect filter, read back; a second one gets its own handle.
        let f = RedirectFilter {
            priority: 1,
            classid: handle(1, 1),
            target: target.index,
        };
        nl.add_redirect_filter(dev.index, INGRESS_HANDLE, &f)
            .unwrap();
        nl.add_redirect_filter(
            dev.index,
            INGRESS_HANDLE,
            &RedirectFilter {
                target: dev.index,
                ..f
            },
        )
        .unwrap();
        let filters = nl.filters(dev.index, INGRESS_HANDLE, 1, ETH_P_ALL).unwrap();
        let rules: Vec<&Filter> = filters.iter().filter(|f| f.redirect.is_some()).collect();
        assert_eq!(rules.len(), 2, "{filters:?}");
        assert_eq!(
            *rules[0],
            Filter {
                index: dev.index,
                parent: INGRESS_HANDLE,
                handle: 0x8000_0800,
                priority: 1,
                protocol: ETH_P_ALL,
                kind: "u32".into(),
                classid: Some(handle(1, 1)),
                match_all: true,
                redirect: Some(target.index),
            }
        );
        assert_eq!(
            (rules[1].handle, rules[1].redirect),
            (0x8000_0801, Some(dev.index))
        );
        // The dump is narrowed by priority.
        assert!(nl
            .filters(dev.index, INGRESS_HANDLE, 2, 0)
            .unwrap()
            .is_empty());
        // Deleting one leaves the other.
        nl.delete_filter(rules[0]).unwrap();
        let left: Vec<Filter> = nl
            .filters(dev.index, INGRESS_HANDLE, 0, 0)
            .unwrap()
            .into_iter()
            .filter(|f| f.redirect.is_some())
            .collect();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].redirect, Some(dev.index));
        assert!(left[0].is_u32_rule());
        nl.delete_filter(&left[0]).unwrap();
        // The u32 instance may stay with only its hash table: no rules.
        let rest = nl.filters(dev.index, INGRESS_HANDLE, 1, ETH_P_ALL).unwrap();
        assert!(
            rest.iter()
                .all(|f| !f.is_u32_rule() && f.redirect.is_none()),
            "{rest:?}"
        );
        nl.add_redirect_filter(dev.index, INGRESS_HANDLE, &f)
            .unwrap();
        nl.delete_filter_priority(dev.index, INGRESS_HANDLE, 1, ETH_P_ALL, "u32")
            .unwrap();
        assert_eq!(nl.filters(dev.index, INGRESS_HANDLE, 0, 0).unwrap(), vec![]);

        // Deleting the qdiscs; a second delete of the ingress is EINVAL.
        nl.delete_qdisc(dev.index, INGRESS_PARENT, INGRESS_HANDLE)
            .unwrap();
        assert_eq!(nl.filters(dev.index, INGRESS_HANDLE, 0, 0).unwrap(), vec![]);
        let err = nl
            .delete_qdisc(dev.index, INGRESS_PARENT, INGRESS_HANDLE)
            .unwrap_err();
        assert_eq!(errno(&err), Some(libc::EINVAL), "{err}");
        nl.delete_qdisc(dev.index, ROOT, handle(1, 0)).unwrap();
        let q = nl.qdisc_at(dev.index, ROOT).unwrap().unwrap();
        assert_eq!((q.kind.as_str(), q.handle), ("noqueue", 0));
    }
}
