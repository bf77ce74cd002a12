//! Test-only fault points: `fault::point("host-local/reserved")` kills the
//! process with SIGKILL when `CNI_FAULT_POINT` names that point, so tests
//! can crash a plugin at every step and check what it leaves behind;
//! `CNI_FAULT_POINT=panic:<point>` panics there instead, so tests can see
//! the panic hook's answer.
//!
//! Only with the `fault-points` feature, which the `tests` crate turns on
//! for every build beside it; a release is built without it, and there a
//! point is an empty function and no binary holds the variable's name.

/// The variable naming the point at which to die.
pub const ENV: &str = "CNI_FAULT_POINT";

/// Dies here, by SIGKILL (no unwinding, no cleanup), if `CNI_FAULT_POINT`
/// equals `name`; panics if it is `panic:<name>`.
#[cfg(feature = "fault-points")]
pub fn point(name: &str) {
    let Some(v) = std::env::var_os(ENV) else {
        return;
    };
    if v == name {
        // SAFETY: kill(2) on our own pid has no memory-safety conditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
    if v.as_encoded_bytes().strip_prefix(b"panic:") == Some(name.as_bytes()) {
        panic!("fault point {name}");
    }
}

/// Without the `fault-points` feature (a release): nothing.
#[cfg(not(feature = "fault-points"))]
#[inline(always)]
pub fn point(_name: &str) {}
