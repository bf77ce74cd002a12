//! SIGINT and SIGTERM: the handler only raises a flag; the run checks it
//! between steps and unwinds normally, so the namespace and temp dir
//! guards clean up. (The plugins running at that moment get the terminal's
//! SIGINT too and die; their failure is then ignored.)

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT and SIGTERM.
pub fn install() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe.
        unsafe {
            libc::signal(sig, handler as libc::sighandler_t);
        }
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// `Err` once a signal came: the caller returns it up to `main`.
pub fn check() -> Result<(), String> {
    if interrupted() {
        return Err("interrupted".into());
    }
    Ok(())
}
