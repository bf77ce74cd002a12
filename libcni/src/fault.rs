//! Test-only fault points: `fault::point("host-local/reserved")` kills the
//! process with SIGKILL when `CNI_FAULT_POINT` names that point, so tests
//! can crash a plugin at every step and check what it leaves behind. With
//! the variable unset (always, outside tests) a point costs one env lookup.

/// The variable naming the point at which to die.
pub const ENV: &str = "CNI_FAULT_POINT";

/// Dies here, by SIGKILL (no unwinding, no cleanup), if `CNI_FAULT_POINT`
/// equals `name`.
pub fn point(name: &str) {
    if std::env::var_os(ENV).is_some_and(|v| v == name) {
        // SAFETY: kill(2) on our own pid has no memory-safety conditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
