//! The DaemonSet's long-running commands, until SIGTERM or SIGINT: `gc
//! --every` (a pass, then another at each interval) and `metrics
//! --listen` (a server). Each runs as its container's PID 1 from an image
//! with no shell, where a signal with no handler does nothing: the
//! signals are blocked and waited for (with the interval as the timeout),
//! so a stop ends the wait at once, never a pass half done.

use nix::sys::signal::{SigSet, Signal};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// `600`, `600s`, `10m` or `1h`: a positive whole number of seconds,
/// minutes or hours.
pub fn parse_interval(text: &str) -> Result<Duration> {
    let (number, unit) = match text.char_indices().last() {
        Some((i, 's')) => (&text[..i], 1),
        Some((i, 'm')) => (&text[..i], 60),
        Some((i, 'h')) => (&text[..i], 3600),
        _ => (text, 1),
    };
    match number.parse::<u64>() {
        Ok(n) if n > 0 => Ok(Duration::from_secs(n.saturating_mul(unit))),
        _ => Err(Error::Usage(format!(
            "--every {text:?}: not an interval (a whole number of seconds, or with s, m or h: 10m)"
        ))),
    }
}

/// Runs `pass` now and then once every `interval` after the last one
/// began, until SIGTERM or SIGINT arrives (then returns `Ok`). A pass that
/// outlasts the interval is followed at once by the next.
pub fn every(interval: Duration, mut pass: impl FnMut()) -> Result<()> {
    let stop = block_stop_signals()?;
    loop {
        let began = Instant::now();
        pass();
        let left = interval.saturating_sub(began.elapsed());
        if wait_for(&stop, left)? {
            return Ok(());
        }
    }
}

/// Runs `work` on a thread of its own until SIGTERM or SIGINT arrives
/// (then returns `Ok`, leaving it to end with the process), or until it
/// returns (then returns what it returned).
pub fn until_stopped(work: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
    let stop = block_stop_signals()?;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(work());
        // Wakes the wait below (the signal is blocked: it stays pending).
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGTERM);
    });
    while !wait_for(&stop, Duration::from_secs(3600))? {}
    done_rx.try_recv().unwrap_or(Ok(()))
}

/// Blocks SIGTERM and SIGINT in this thread (and the threads it starts
/// from now on), to be waited for.
fn block_stop_signals() -> Result<SigSet> {
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGINT);
    stop.thread_block().map_err(|source| Error::Signals {
        doing: "blocking SIGTERM and SIGINT",
        source,
    })?;
    Ok(stop)
}

/// Waits up to `timeout` for one of the blocked signals of `set`: true
/// when one came.
fn wait_for(set: &SigSet, timeout: Duration) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `set` is a valid signal set, the info pointer may be null
        // and `ts` lives across the call.
        let r = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
        if r > 0 {
            return Ok(true);
        }
        match nix::errno::Errno::last() {
            nix::errno::Errno::EAGAIN => return Ok(false),
            nix::errno::Errno::EINTR => continue,
            source => {
                return Err(Error::Signals {
                    doing: "waiting for the next pass",
                    source,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_whole_seconds_minutes_or_hours() {
        for (text, secs) in [("600", 600), ("600s", 600), ("10m", 600), ("1h", 3600)] {
            assert_eq!(
                parse_interval(text).unwrap(),
                Duration::from_secs(secs),
                "{text}"
            );
        }
        for bad in ["", "0", "0m", "m", "10x", "-5", "1.5m", "10 m"] {
            let e = parse_interval(bad).expect_err(bad).to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
