//! Test-only fault points: `fault::point("host-local/reserved")` kills the
//! process with SIGKILL when `CNI_FAULT_POINT` names that point, so tests
//! can crash a plugin at every step and check what it leaves behind;
//! `CNI_FAULT_POINT=panic:<point>` panics there instead, so tests can see
//! the panic hook's answer. With the variable unset (always, outside
//! tests) a point costs one env lookup.

/// The variable naming the point at which to die.
pub const ENV: &str = "CNI_FAULT_POINT";

/// Dies here, by SIGKILL (no unwinding, no cleanup), if `CNI_FAULT_POINT`
/// equals `name`; panics if it is `panic:<name>`.
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
