//! The sysctl allowlist distributions ship in
//! `/etc/cni/tuning/allowlist.conf`, as the Go plugin enforces it: one
//! regular expression per line (blank lines ignored), each sysctl key of
//! the config (as written, before `IFNAME` is replaced) must match one of
//! them somewhere (an unanchored search, as Go's `regexp.MatchString`). No
//! file, no restriction. Checked before anything is read or changed.

use std::path::Path;

use libcni::Error;

use crate::config::Sysctl;

/// Where the allowlist is (fixed, as in the Go plugin: a config cannot
/// point elsewhere).
pub const PATH: &str = "/etc/cni/tuning/allowlist.conf";

/// Refuses (code 7, naming the key) the first sysctl no line of the
/// allowlist at `path` matches; a line that is not a regular expression is
/// code 7 naming the file and line.
pub fn check_at(path: &Path, sysctls: &[Sysctl]) -> Result<(), Error> {
    if sysctls.is_empty() {
        return Ok(());
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(Error::config(
                path.display().to_string(),
                format!("the sysctl allowlist cannot be read: {e}"),
            ))
        }
    };
    let mut patterns = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let re = regex_lite::Regex::new(line).map_err(|e| {
            Error::config(
                format!("{} line {}", path.display(), n + 1),
                format!("{line:?} is not a regular expression: {e}"),
            )
        })?;
        patterns.push((line, re));
    }
    for s in sysctls {
        if !patterns.iter().any(|(_, re)| re.is_match(&s.raw)) {
            let allowed: Vec<&str> = patterns.iter().map(|(l, _)| *l).collect();
            return Err(Error::config(
                format!("{}.{}", s.source, s.raw),
                format!(
                    "sysctl {:?} is not allowed by {}: only sysctls matching {} are",
                    s.raw,
                    path.display(),
                    if allowed.is_empty() {
                        "nothing (the file has no pattern)".to_string()
                    } else {
                        allowed.join(", ")
                    }
                ),
            ));
        }
    }
    Ok(())
}

/// [`check_at`] with the allowlist at [`PATH`].
pub fn check(sysctls: &[Sysctl]) -> Result<(), Error> {
    check_at(Path::new(PATH), sysctls)
}
