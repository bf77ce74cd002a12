//! The machine the numbers were taken on, and the binary sizes.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    /// UTC, `YYYY-MM-DD HH:MM`.
    pub date: String,
    /// The Debian package version of the Go plugins.
    pub go_plugins: String,
    pub rustc: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Machine {
            // SAFETY: sysconf has no preconditions.
            cpus: unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize,
            cpu_model,
            kernel: uname_release(),
            date: utc_now(),
            go_plugins: command_output(
                "dpkg-query",
                &["-W", "-f", "${Version}", "containernetworking-plugins"],
            )
            .unwrap_or_else(|| "unknown (dpkg-query failed)".into()),
            rustc: command_output("rustc", &["--version"]).unwrap_or_else(|| "unknown".into()),
        }
    }
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn uname_release() -> String {
    // SAFETY: all-zero is a valid utsname; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let bytes: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Now, in UTC, as `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_utc(secs)
}

fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// CPU time of the whole machine and of this process (with the children
/// it reaped) at one moment: two of them tell how busy the rest of the
/// machine was in between.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSnapshot {
    busy_s: f64,
    total_s: f64,
    own_s: f64,
}

impl CpuSnapshot {
    pub fn take() -> CpuSnapshot {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let (mut busy, mut total) = (0.0, 0.0);
        if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
            if let Some(line) = stat.lines().next() {
                // cpu user nice system idle iowait irq softirq steal ...
                let v: Vec<f64> = line
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if v.len() >= 8 {
                    total = v[..8].iter().sum::<f64>() / hz;
                    busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz;
                }
            }
        }
        CpuSnapshot {
            busy_s: busy,
            total_s: total,
            own_s: rusage_s(libc::RUSAGE_SELF) + rusage_s(libc::RUSAGE_CHILDREN),
        }
    }

    /// The share of all CPUs that other work kept busy since `earlier`.
    pub fn others_since(&self, earlier: &CpuSnapshot) -> Option<f64> {
        let total = self.total_s - earlier.total_s;
        if total <= 0.0 {
            return None;
        }
        let others = (self.busy_s - earlier.busy_s) - (self.own_s - earlier.own_s);
        Some((others / total).clamp(0.0, 1.0))
    }
}

/// Waits until the whole machine is quiet, at most `limit`: new pods keep
/// the kernel busy for seconds after their ADD (IPv6 DAD, router
/// solicitations and MLD reports flooded to every bridge port), which
/// would slow whatever runs next, the empty twin included. Quiet: under 5%
/// of all CPUs busy over two 250 ms samples in a row. Returns the seconds
/// waited and whether it got quiet.
pub fn settle(limit: std::time::Duration) -> (f64, bool) {
    let start = std::time::Instant::now();
    let mut quiet_in_a_row = 0;
    let mut before = CpuSnapshot::take();
    while start.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let now = CpuSnapshot::take();
        let total = now.total_s - before.total_s;
        let busy = now.busy_s - before.busy_s;
        before = now;
        quiet_in_a_row = if total > 0.0 && busy / total < 0.05 {
            quiet_in_a_row + 1
        } else {
            0
        };
        if quiet_in_a_row == 2 {
            return (start.elapsed().as_secs_f64(), true);
        }
    }
    (start.elapsed().as_secs_f64(), false)
}

fn rusage_s(who: libc::c_int) -> f64 {
    // SAFETY: all-zero is a valid rusage; getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrusage(who, &mut u) } != 0 {
        return 0.0;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// `/proc/loadavg`'s one-minute figure.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The Go reference binaries the size target compares against.
pub const REFERENCE_FIVE: [&str; 5] = ["bridge", "host-local", "portmap", "bandwidth", "loopback"];

/// Binaries in our release directory that are not plugins.
pub const NOT_PLUGINS: [&str; 7] = [
    "cnitool",
    "cni-bench",
    "cni-bench-floor",
    "cni-bench-scrape",
    "cni-rs",
    "cni-rs-install",
    "cni-rs-manpages",
];

/// (name, bytes) of every executable file directly in `dir` except `skip`,
/// sorted by name.
pub fn executables(dir: &Path, skip: &[&str]) -> Vec<(String, u64)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.contains('.') || skip.contains(&name.as_str()) {
            continue;
        }
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            out.push((name, meta.len()));
        }
    }
    out.sort();
    out
}

/// (name, bytes) of `names` in `dir`; a missing one is left out.
/// What the Go plugins of `dir` say they are: `bridge` run without
/// `CNI_COMMAND` prints its build version and the CNI versions it speaks.
pub fn plugin_version(dir: &Path) -> String {
    let out = std::process::Command::new(dir.join("bridge"))
        .env_clear()
        .output();
    match out {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            if lines.is_empty() {
                "unknown (bridge printed nothing)".into()
            } else {
                lines.join("; ")
            }
        }
        Err(e) => format!("unknown ({}: {e})", dir.join("bridge").display()),
    }
}

pub fn sizes_of(dir: &Path, names: &[&str]) -> Vec<(String, u64)> {
    names
        .iter()
        .filter_map(|n| {
            let p: PathBuf = dir.join(n);
            std::fs::metadata(&p).ok().map(|m| (n.to_string(), m.len()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(format_utc(951_782_400 + 3_660), "2000-02-29 01:01 UTC");
        assert_eq!(format_utc(1_798_761_599), "2026-12-31 23:59 UTC");
    }
}
