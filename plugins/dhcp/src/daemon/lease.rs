//! One lease's life: acquired for an ADD, then kept by a thread of its own
//! that sleeps until T1, renews with the server (unicast), rebinds with any
//! server from T2 (broadcast), and at expiry, or on a NAK, takes the
//! address off the interface and ends (RFC 2131 §4.4.5). The thread holds
//! nothing of the container between exchanges: each exchange reopens the
//! namespace by its path, checks it is still the same one (device and
//! inode), finds the interface by name, opens its sockets and closes them
//! again. A namespace or interface that is gone ends the lease (the pod
//! is gone without a DEL). DEL stops the thread (waking any wait) and
//! releases the lease from the caller's thread.

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use libcni::netlink::link::Link;
use libcni::netlink::{is_not_found, Netlink};
use libcni::netns::NetNs;
use libcni::Error;

use super::exchange::{Client, Outcome, Timing};
use super::packet::{Sockets, Wake, BROADCAST_MAC};
use super::store::{Held, Store};
use crate::config::DhcpOptions;
use crate::proto::{Key, LeaseView};

/// What every lease shares: the daemon's flags and its lease directory.
pub struct Context {
    pub host_prefix: String,
    pub timing: Timing,
    pub broadcast: bool,
    pub store: Store,
}

/// Where a lease is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Bound,
    Renewing,
    Rebinding,
    /// Ran out, or the server NAKed it: the address was taken off.
    Expired,
    /// Its namespace or interface is gone.
    Dropped,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Bound => "bound",
            State::Renewing => "renewing",
            State::Rebinding => "rebinding",
            State::Expired => "expired",
            State::Dropped => "dropped",
        }
    }

    pub fn is_live(self) -> bool {
        matches!(self, State::Bound | State::Renewing | State::Rebinding)
    }
}

/// What the thread shares with the daemon's connections.
pub struct Ctl {
    stop: AtomicBool,
    wake: Wake,
    view: Mutex<View>,
}

#[derive(Debug, Clone)]
pub struct View {
    pub held: Held,
    pub state: State,
    pub reason: String,
}

impl Ctl {
    pub fn view(&self) -> View {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, f: impl FnOnce(&mut View)) {
        f(&mut self.view.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Asks the thread to end (its waits return at once).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.fire();
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

impl View {
    pub fn lease_view(&self) -> LeaseView {
        let expires = self
            .held
            .binding
            .lease
            .map(|l| {
                (self.held.bound_at() + l)
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        LeaseView {
            address: self.held.binding.prefix().to_string(),
            state: self.state.name().to_string(),
            expires,
            reason: self.reason.clone(),
        }
    }
}

/// A running (or ended) lease thread.
pub struct Running {
    pub ctl: Arc<Ctl>,
    thread: Option<JoinHandle<Option<Held>>>,
}

impl Running {
    /// Stops the thread and returns the lease when it was still live
    /// (`None` when it had ended by itself: expired or dropped).
    pub fn finish(mut self) -> Option<Held> {
        self.ctl.stop();
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(h)) => h,
            _ => None,
        }
    }
}

/// How the thread starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Just acquired: bound until T1.
    Fresh,
    /// Taken up from disk by a daemon that just started: renewed at once
    /// (rebound after T2, expired after the lease).
    Restored,
}

pub fn log(key: &Key, msg: impl std::fmt::Display) {
    super::log(format_args!("{key}: {msg}"));
}

/// The interface of a lease, found again.
pub struct Iface {
    pub ns: NetNs,
    pub nl: Netlink,
    pub link: Link,
}

/// Why the interface could not be found.
pub enum Gone {
    /// The namespace or the interface is not there any more.
    Gone(String),
    /// Something else failed (worth trying again).
    Failed(Error),
}

/// Opens `<host prefix><netns>`, checks it is namespace `id`, and finds
/// `ifname` in it.
pub fn find_iface(ctx: &Context, netns: &str, id: (u64, u64), ifname: &str) -> Result<Iface, Gone> {
    let path = format!("{}{netns}", ctx.host_prefix);
    let ns =
        NetNs::open(Path::new(&path)).map_err(|e| Gone::Gone(format!("namespace {path}: {e}")))?;
    match ns.identity() {
        Ok(got) if (got.dev, got.ino) == id => {}
        Ok(_) => {
            return Err(Gone::Gone(format!(
                "{path} is now another namespace than the lease's"
            )))
        }
        Err(e) => return Err(Gone::Failed(e)),
    }
    let mut nl = Netlink::open_in(&ns).map_err(Gone::Failed)?;
    let link = match nl.link_by_name(ifname) {
        Ok(Some(l)) => l,
        Ok(None) => return Err(Gone::Gone(format!("no interface {ifname:?} in {path}"))),
        Err(e) => return Err(Gone::Failed(e)),
    };
    Ok(Iface { ns, nl, link })
}

/// A client for one exchange on `iface`.
fn client<'a>(
    ctx: &Context,
    socks: &'a Sockets,
    iface: &Iface,
    key: &Key,
    options: &'a DhcpOptions,
    wake: Option<&Wake>,
) -> Result<Client<'a>, Error> {
    let mac = iface.link.mac.ok_or_else(|| {
        Error::InvalidEnv(format!(
            "CNI_IFNAME {:?} has no Ethernet address: DHCP needs one",
            iface.link.name
        ))
    })?;
    Ok(Client {
        socks,
        mac,
        mtu: iface.link.mtu,
        client_id: key.client_id(),
        options,
        broadcast_flag: ctx.broadcast,
        timing: ctx.timing,
        wake: wake.map(Wake::fd),
    })
}

/// INIT to BOUND for an ADD: brings the interface up (as the reference
/// does: main plugins configure it only after IPAM) and gets a lease.
pub fn acquire(
    ctx: &Context,
    key: &Key,
    netns: &str,
    id: (u64, u64),
    options: &DhcpOptions,
    priority: Option<u32>,
) -> Result<Held, Error> {
    let mut iface = find_iface(ctx, netns, id, &key.ifname).map_err(|g| match g {
        Gone::Gone(why) => Error::InvalidEnv(format!(
            "CNI_IFNAME {:?} in CNI_NETNS {netns:?}: {why}",
            key.ifname
        )),
        Gone::Failed(e) => e,
    })?;
    if !iface.link.up {
        iface.nl.set_link_up(iface.link.index)?;
    }
    let socks = Sockets::open(&iface.ns, iface.link.index, &key.ifname)?;
    let c = client(ctx, &socks, &iface, key, options, None)?;
    let deadline = Instant::now() + ctx.timing.resend_timeout;
    let outcome = c
        .acquire(deadline)
        .map_err(|e| Error::kernel(format!("DHCP on {:?} in {netns:?}", key.ifname), e))?;
    match outcome {
        Outcome::Ack(a) => {
            let (src, mac, offered) = (a.src, a.src_mac, a.msg.yiaddr());
            let held = Held::new(
                key.clone(),
                netns.to_string(),
                id,
                options.clone(),
                priority,
                a.msg,
                src,
                mac,
            );
            match held {
                Ok(h) => Ok(h),
                Err(why) => {
                    // Not usable (no subnet mask...): give it back.
                    let _ = c.release(offered, src, mac);
                    Err(Error::Internal(format!(
                        "the DHCP server's lease for {:?} is not usable: {why}",
                        key.ifname
                    )))
                }
            }
        }
        Outcome::Nak(why) => Err(Error::TryAgainLater(format!(
            "the DHCP server refused every REQUEST on {:?} in {netns:?} (DHCPNAK{})",
            key.ifname,
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        ))),
        Outcome::TimedOut | Outcome::Stopped => Err(Error::TryAgainLater(format!(
            "no DHCP server answered on {:?} in {netns:?} within {} s (-resendtimeout)",
            key.ifname,
            ctx.timing.resend_timeout.as_secs_f64()
        ))),
    }
}

/// Sends a DHCPRELEASE for `held`, if its interface is still there.
pub fn release(ctx: &Context, held: &Held) {
    let key = &held.record.key;
    let r = &held.record;
    let iface = match find_iface(ctx, &r.netns, (r.netns_dev, r.netns_ino), &key.ifname) {
        Ok(i) => i,
        Err(Gone::Gone(why)) => {
            log(
                key,
                format!("not released ({why}); the server's lease runs out by itself"),
            );
            return;
        }
        Err(Gone::Failed(e)) => {
            log(key, format!("not released: {e}"));
            return;
        }
    };
    let sent = Sockets::open(&iface.ns, iface.link.index, &key.ifname).and_then(|socks| {
        let c = client(ctx, &socks, &iface, key, &r.options, None)?;
        c.release(held.binding.address, held.binding.server, held.server_mac())
            .map_err(|e| Error::kernel("send DHCPRELEASE", e))
    });
    match sent {
        Ok(()) => log(key, format!("released {}", held.binding.prefix())),
        Err(e) => log(key, format!("not released: {e}")),
    }
}

/// The instant `after` past the lease's start (now when that is past;
/// `None` for `None`).
fn at(held: &Held, after: Option<Duration>) -> Option<Instant> {
    let after = after?;
    let when = held.bound_at() + after;
    let now = SystemTime::now();
    Some(match when.duration_since(now) {
        Ok(left) => Instant::now() + left,
        Err(_) => Instant::now(),
    })
}

/// Starts the thread that keeps `held`.
pub fn spawn(ctx: Arc<Context>, held: Held, start: Start) -> std::io::Result<Running> {
    let ctl = Arc::new(Ctl {
        stop: AtomicBool::new(false),
        wake: Wake::new()?,
        view: Mutex::new(View {
            held: held.clone(),
            state: State::Bound,
            reason: String::new(),
        }),
    });
    let inner = ctl.clone();
    let thread = std::thread::Builder::new()
        .name("lease".into())
        .stack_size(256 << 10)
        .spawn(move || maintain(&ctx, &inner, held, start))?;
    Ok(Running {
        ctl,
        thread: Some(thread),
    })
}

/// The lease thread. Returns the lease when stopped while it was live.
fn maintain(ctx: &Context, ctl: &Ctl, mut held: Held, start: Start) -> Option<Held> {
    let key = held.record.key.clone();
    let mut state = initial_state(ctx, ctl, &held, start)?;
    loop {
        if ctl.stopped() {
            return Some(held);
        }
        ctl.set(|v| v.state = state);
        let (t1, t2, exp) = (
            at(&held, held.binding.t1),
            at(&held, held.binding.t2),
            at(&held, held.binding.lease),
        );
        match state {
            State::Bound => {
                if ctl.wake.wait_until(t1) {
                    continue; // stopped
                }
                log(&key, "T1: renewing");
                state = State::Renewing;
            }
            State::Renewing | State::Rebinding => {
                let (Some(t2), Some(exp)) = (t2, exp) else {
                    state = State::Bound;
                    continue;
                };
                let deadline = if state == State::Renewing { t2 } else { exp };
                if Instant::now() >= deadline {
                    if state == State::Renewing {
                        log(&key, "T2: rebinding");
                        state = State::Rebinding;
                        continue;
                    }
                    end(ctx, ctl, &held, State::Expired, "the lease ran out");
                    return None;
                }
                state = renew(ctx, ctl, &mut held, state, deadline)?;
            }
            State::Expired | State::Dropped => return None,
        }
    }
}

/// Where a lease starts: bound when fresh; a restored one (the daemon
/// restarted) renewing or rebinding by its times, or ended (`None`) when
/// it ran out meanwhile.
fn initial_state(ctx: &Context, ctl: &Ctl, held: &Held, start: Start) -> Option<State> {
    if let Start::Fresh = start {
        return Some(State::Bound);
    }
    let b = &held.binding;
    let now = Instant::now();
    match (at(held, b.t2), at(held, b.lease)) {
        (None, _) => Some(State::Bound),
        (Some(t2), _) if now < t2 => Some(State::Renewing),
        (_, Some(exp)) if now < exp => Some(State::Rebinding),
        _ => {
            let why = "ran out while the daemon was not running";
            log(&held.record.key, format!("the lease {why}"));
            end(ctx, ctl, held, State::Expired, why);
            None
        }
    }
}

/// One renewal (unicast to the server) or rebinding (broadcast) attempt
/// before `deadline`: the next state, or `None` when the lease ended (a
/// NAK, no answer when rebinding, the interface gone). A failure to reach
/// the interface or to send waits up to 2 s and keeps the state.
fn renew(
    ctx: &Context,
    ctl: &Ctl,
    held: &mut Held,
    state: State,
    deadline: Instant,
) -> Option<State> {
    let key = held.record.key.clone();
    let retry_later = || {
        ctl.wake.wait_until(Some(
            (Instant::now() + Duration::from_secs(2)).min(deadline),
        ));
        Some(state)
    };
    let r = &held.record;
    let iface = match find_iface(ctx, &r.netns, (r.netns_dev, r.netns_ino), &key.ifname) {
        Ok(i) => i,
        Err(Gone::Gone(why)) => {
            end(ctx, ctl, held, State::Dropped, &why);
            return None;
        }
        Err(Gone::Failed(e)) => {
            log(&key, format!("cannot reach the interface: {e}"));
            return retry_later();
        }
    };
    let server = (state == State::Renewing).then(|| {
        (
            held.binding.server,
            held.server_mac().unwrap_or(BROADCAST_MAC),
        )
    });
    let outcome = Sockets::open(&iface.ns, iface.link.index, &key.ifname).and_then(|s| {
        let c = client(ctx, &s, &iface, &key, &held.record.options, Some(&ctl.wake))?;
        c.renew(held.binding.address, server, deadline)
            .map_err(|e| Error::kernel("DHCP renewal", e))
    });
    match outcome {
        Ok(Outcome::Ack(a)) => match held.renewed(a.msg, a.src, a.src_mac) {
            Ok(h) => {
                if let Err(e) = ctx.store.write(&h) {
                    log(&key, format!("renewed, but not saved: {e}"));
                }
                let how = if state == State::Renewing {
                    "renewed"
                } else {
                    "rebound"
                };
                log(
                    &key,
                    format!(
                        "{how} {} until {} s from now",
                        h.binding.prefix(),
                        h.binding.lease.map(|l| l.as_secs()).unwrap_or(0)
                    ),
                );
                ctl.set(|v| v.held = h.clone());
                *held = h;
                Some(State::Bound)
            }
            Err(why) => {
                log(&key, format!("ignoring an unusable ACK: {why}"));
                Some(state)
            }
        },
        Ok(Outcome::Nak(why)) => {
            let why = if why.is_empty() {
                "DHCPNAK".to_string()
            } else {
                format!("DHCPNAK: {why}")
            };
            end(ctx, ctl, held, State::Expired, &why);
            None
        }
        Ok(Outcome::TimedOut) if state == State::Renewing => {
            log(&key, "T2: no answer to the renewal, rebinding");
            Some(State::Rebinding)
        }
        Ok(Outcome::TimedOut) => {
            end(ctx, ctl, held, State::Expired, "the lease ran out");
            None
        }
        Ok(Outcome::Stopped) => Some(state),
        Err(e) => {
            log(&key, format!("{}: {e}", state.name()));
            retry_later()
        }
    }
}

/// Ends the lease by itself: for [`State::Expired`] the address comes off
/// the interface; the lease file goes either way.
fn end(ctx: &Context, ctl: &Ctl, held: &Held, state: State, why: &str) {
    let key = &held.record.key;
    if state == State::Expired {
        let r = &held.record;
        if let Ok(mut iface) = find_iface(ctx, &r.netns, (r.netns_dev, r.netns_ino), &key.ifname) {
            let p = held.binding.prefix();
            match iface.nl.del_address(
                iface.link.index,
                IpAddr::V4(held.binding.address),
                p.prefix_len(),
            ) {
                Ok(()) => log(key, format!("{why}: {p} taken off {:?}", key.ifname)),
                Err(e) if is_not_found(&e) => {
                    log(key, format!("{why}: {p} was not on {:?}", key.ifname))
                }
                Err(e) => log(key, format!("{why}: taking {p} off {:?}: {e}", key.ifname)),
            }
        } else {
            log(key, format!("{why}; the interface is gone"));
        }
    } else {
        log(key, format!("dropped: {why}"));
    }
    if let Err(e) = ctx.store.remove(key) {
        log(key, format!("removing its lease file: {e}"));
    }
    ctl.set(|v| {
        v.state = state;
        v.reason = why.to_string();
    });
}
