//! Reading an `strace -f -T` trace of one plugin call (the lines before
//! the summary of `-C`): which `NETLINK_NETFILTER` sockets it released and
//! how long each release waited, and how long its netlink requests waited,
//! by message type.

/// One syscall of the trace. A call another thread interrupted is split in
/// two lines, `NAME(ARGS <unfinished ...>` and `<... NAME resumed>REST`,
/// joined here.
#[derive(Debug, Clone, PartialEq)]
pub struct TracedCall {
    pub pid: String,
    pub name: String,
    /// The whole call as traced: name, arguments, result, duration.
    pub text: String,
    /// The value returned, when a number.
    pub returned: Option<i64>,
    /// Time in the call (ms).
    pub ms: f64,
}

/// The completed calls of `trace`, in the order they completed.
pub fn calls(trace: &str) -> Vec<TracedCall> {
    let mut out = Vec::new();
    let mut pending: Vec<(&str, &str, &str)> = Vec::new();
    for line in trace.lines() {
        let Some((pid, call)) = line.split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        if let Some(begun) = call.strip_suffix("<unfinished ...>") {
            if let Some((name, _)) = begun.split_once('(') {
                pending.push((pid, name, begun));
            }
            continue;
        }
        let (name, text) = if let Some(rest) = call.strip_prefix("<... ") {
            let Some((name, rest)) = rest.split_once(" resumed>") else {
                continue;
            };
            let Some(i) = pending.iter().position(|(p, n, _)| *p == pid && *n == name) else {
                continue;
            };
            let (_, _, begun) = pending.remove(i);
            (name, format!("{begun}{rest}"))
        } else {
            match call.split_once('(') {
                Some((name, _)) if !name.contains(' ') => (name, call.to_string()),
                _ => continue,
            }
        };
        out.push(TracedCall {
            pid: pid.to_string(),
            name: name.to_string(),
            returned: returned(&text),
            ms: duration_ms(&text),
            text,
        });
    }
    out
}

/// `= N` after the last `)`.
fn returned(text: &str) -> Option<i64> {
    let (_, r) = text.rsplit_once(')')?;
    r.trim_start()
        .strip_prefix('=')?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `<S.SSSSSS>` at the end, in ms.
fn duration_ms(text: &str) -> f64 {
    text.rsplit_once('<')
        .and_then(|(_, d)| d.trim_end_matches('>').parse::<f64>().ok())
        .map_or(0.0, |s| s * 1e3)
}

/// The `NETLINK_NETFILTER` sockets of one plugin call (nf_tables and
/// conntrack). Releasing one waits, under the namespace's nf_tables commit
/// mutex, while nf_tables objects deleted by anyone await destruction: a
/// grace period after a deleting transaction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetfilterSockets {
    pub opened: usize,
    /// Each explicit `close` of one, in ms (one left open is released by
    /// the process's exit, which the trace does not time).
    pub closes: Vec<f64>,
}

impl NetfilterSockets {
    /// Closes that waited for the kernel (1 ms or more).
    pub fn waiting(&self) -> usize {
        self.closes.iter().filter(|ms| **ms >= 1.0).count()
    }
}

/// The [`NetfilterSockets`] of `calls`. Sockets are told apart by
/// descriptor alone: the plugin and its delegates never hold one of the
/// same number at once.
pub fn netfilter_sockets(calls: &[TracedCall]) -> NetfilterSockets {
    let mut out = NetfilterSockets::default();
    let mut open: Vec<i64> = Vec::new();
    for c in calls {
        if c.name == "socket" && c.text.contains("NETLINK_NETFILTER") {
            if let Some(fd) = c.returned.filter(|fd| *fd >= 0) {
                out.opened += 1;
                open.push(fd);
            }
        } else if c.name == "close" {
            let fd = c.text["close(".len()..]
                .split(|ch: char| !ch.is_ascii_digit())
                .next()
                .and_then(|d| d.parse::<i64>().ok());
            if let Some(i) = fd.and_then(|fd| open.iter().position(|o| *o == fd)) {
                open.remove(i);
                out.closes.push(c.ms);
            }
        }
    }
    out
}

/// The netlink requests of `calls` by message type (`RTM_NEWLINK`,
/// `NFNL_MSG_BATCH_BEGIN` for an nf_tables batch, ...): count and the ms
/// spent in `sendto`/`sendmsg` (where the kernel does an rtnetlink
/// request's work), most time first.
pub fn netlink_requests(calls: &[TracedCall]) -> Vec<(String, usize, f64)> {
    let mut out: Vec<(String, usize, f64)> = Vec::new();
    for c in calls
        .iter()
        .filter(|c| c.name == "sendto" || c.name == "sendmsg")
    {
        let Some((_, rest)) = c.text.split_once("nlmsg_type=") else {
            continue;
        };
        let ty = rest.split([',', '}']).next().unwrap_or_default();
        let ty = ty.rsplit('|').next().unwrap_or(ty);
        let ty = match undecoded_rtnetlink(ty) {
            Some(name) => format!("{name} ({})", ty.split(' ').next().unwrap_or(ty)),
            None => ty.to_string(),
        };
        match out.iter_mut().find(|(t, _, _)| *t == ty) {
            Some(row) => {
                row.1 += 1;
                row.2 += c.ms;
            }
            None => out.push((ty, 1, c.ms)),
        }
    }
    out.sort_by(|a, b| b.2.total_cmp(&a.2));
    out
}

/// The rtnetlink request types our plugins send, with the kernel's
/// numbers (libc's).
const RTNETLINK_TYPES: [(u16, &str); 16] = [
    (libc::RTM_NEWLINK, "RTM_NEWLINK"),
    (libc::RTM_DELLINK, "RTM_DELLINK"),
    (libc::RTM_GETLINK, "RTM_GETLINK"),
    (libc::RTM_SETLINK, "RTM_SETLINK"),
    (libc::RTM_NEWADDR, "RTM_NEWADDR"),
    (libc::RTM_DELADDR, "RTM_DELADDR"),
    (libc::RTM_GETADDR, "RTM_GETADDR"),
    (libc::RTM_NEWROUTE, "RTM_NEWROUTE"),
    (libc::RTM_DELROUTE, "RTM_DELROUTE"),
    (libc::RTM_GETROUTE, "RTM_GETROUTE"),
    (libc::RTM_NEWNEIGH, "RTM_NEWNEIGH"),
    (libc::RTM_NEWRULE, "RTM_NEWRULE"),
    (libc::RTM_DELRULE, "RTM_DELRULE"),
    (libc::RTM_NEWQDISC, "RTM_NEWQDISC"),
    (libc::RTM_DELQDISC, "RTM_DELQDISC"),
    (libc::RTM_NEWTFILTER, "RTM_NEWTFILTER"),
];

/// The name of a message type strace printed as a number (`0x18 /*
/// NLMSG_??? */`): it decodes rtnetlink only on a socket of its own
/// network namespace, and our plugins open theirs in the pod's.
fn undecoded_rtnetlink(ty: &str) -> Option<&'static str> {
    let hex = ty.strip_prefix("0x")?.split(' ').next()?;
    let n = u16::from_str_radix(hex, 16).ok()?;
    RTNETLINK_TYPES
        .iter()
        .find(|(t, _)| *t == n)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "\
11773 socket(AF_NETLINK, SOCK_DGRAM|SOCK_CLOEXEC, NETLINK_NETFILTER <unfinished ...>
11774 close(3)          = 0 <0.000010>
11773 <... socket resumed>)             = 9 <0.000060>
11773 sendto(9, [{nlmsg_len=64, nlmsg_type=NFNL_SUBSYS_NFTABLES<<8|NFT_MSG_GETRULE, nlmsg_flags=NLM_F_REQUEST}, ...], 64, 0, NULL, 0) = 64 <0.000100>
11774 sendto(4, [{nlmsg_len=64, nlmsg_type=RTM_NEWLINK, nlmsg_flags=NLM_F_REQUEST|NLM_F_ACK}, ...], 64, 0, NULL, 0 <unfinished ...>
11773 close(9 <unfinished ...>
11776 execve(\"/bin/host-local\", [...], 0x7f /* 44 vars */ <unfinished ...>
11773 <... close resumed>) = 0 <0.006911>
11774 <... sendto resumed>) = 64 <0.002000>
11774 sendto(4, [{nlmsg_len=64, nlmsg_type=RTM_NEWLINK, nlmsg_flags=NLM_F_REQUEST|NLM_F_ACK}, ...], 64, 0, NULL, 0) = 64 <0.001000>
11780 socket(AF_NETLINK, SOCK_DGRAM|SOCK_CLOEXEC, NETLINK_NETFILTER) = 4 <0.000008>
11780 close(4)          = 0 <0.000015>
11781 socket(AF_NETLINK, SOCK_DGRAM|SOCK_CLOEXEC, NETLINK_NETFILTER) = 5 <0.000008>
11781 +++ exited with 0 +++
";

    #[test]
    fn joins_interrupted_calls_and_reads_results_and_durations() {
        let c = calls(TRACE);
        let socket = &c[1];
        assert_eq!((socket.name.as_str(), socket.returned), ("socket", Some(9)));
        let close = c.iter().find(|c| c.text.starts_with("close(9")).unwrap();
        assert!((close.ms - 6.911).abs() < 1e-9, "{close:?}");
        assert!(
            c.iter().all(|c| c.name != "execve"),
            "an unfinished call is no call"
        );
    }

    #[test]
    fn finds_the_netfilter_sockets_and_how_long_their_releases_waited() {
        let n = netfilter_sockets(&calls(TRACE));
        assert_eq!(n.opened, 3);
        assert_eq!(n.closes.len(), 2);
        assert!((n.closes[0] - 6.911).abs() < 1e-9, "{:?}", n.closes);
        assert_eq!(n.waiting(), 1);
    }

    #[test]
    fn sums_the_netlink_requests_by_message_type() {
        let r = netlink_requests(&calls(TRACE));
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].0.as_str(), r[0].1), ("RTM_NEWLINK", 2));
        assert!((r[0].2 - 3.0).abs() < 1e-9);
        assert_eq!((r[1].0.as_str(), r[1].1), ("NFT_MSG_GETRULE", 1));
    }

    #[test]
    fn names_the_rtnetlink_types_strace_left_as_numbers() {
        let trace = "7 sendto(4, [{nlmsg_len=52, nlmsg_type=0x18 /* NLMSG_??? */, nlmsg_flags=NLM_F_REQUEST}, ...], 52, 0, NULL, 0) = 52 <0.002900>\n\
                     7 sendto(4, [{nlmsg_len=52, nlmsg_type=0x7f /* NLMSG_??? */, nlmsg_flags=NLM_F_REQUEST}, ...], 52, 0, NULL, 0) = 52 <0.000100>\n";
        let r = netlink_requests(&calls(trace));
        let names: Vec<&str> = r.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["RTM_NEWROUTE (0x18)", "0x7f /* NLMSG_??? */"]);
    }
}
