//! The C programs the benchmark builds with `cc -static`: the no-op
//! plugin of the floors ([`crate::floors`]) and the process-start floors
//! ([`crate::diagnose::start_costs`]).

use std::path::{Path, PathBuf};

/// A program that returns from `main`: the start of any static glibc
/// program (its C library's initialisation, no work).
pub const EMPTY_MAIN: &str = "int main(void) { return 0; }\n";

/// A program with no C library: its entry point makes the exit system
/// call, so its start is the kernel's `execve` and `exit` alone.
pub const NO_LIBC: &str = r#"#if defined(__x86_64__)
void _start(void) { __asm__ volatile("mov $60, %eax\n xor %edi, %edi\n syscall"); }
#elif defined(__aarch64__)
void _start(void) { __asm__ volatile("mov x8, #93\n mov x0, #0\n svc #0"); }
#else
#error "no exit system call written for this architecture"
#endif
"#;

/// Compiles `source` into `dir/name` with `cc -static -O2` and `flags`;
/// returns the program.
pub fn build(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Result<PathBuf, String> {
    let io = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).map_err(|e| io(&c, e))?;
    let program = dir.join(name);
    let built = std::process::Command::new("cc")
        .args(["-static", "-O2"])
        .args(flags)
        .arg("-o")
        .arg(&program)
        .arg(&c)
        .status()
        .map_err(|e| format!("cc: {e}"))?;
    if !built.success() {
        return Err(format!("cc -static could not build {name} ({built})"));
    }
    Ok(program)
}
