//! Running other plugins: finding a binary in `CNI_PATH`, executing it with
//! a CNI environment, and reading its result or error. Used by plugins that
//! delegate (IPAM, the flannel plugin) and by the runtime.

use crate::calllog::Step;
use crate::error::{Error, ErrorResult};
use crate::types::CniResult;
use crate::version::Version;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The directories of `CNI_PATH` (`:`-separated), in order.
pub fn cni_path_from_env() -> Vec<PathBuf> {
    split_path_list(&std::env::var("CNI_PATH").unwrap_or_default())
}

/// Splits a `:`-separated path list, dropping empty entries.
pub fn split_path_list(s: &str) -> Vec<PathBuf> {
    s.split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// Finds plugin `name` in `dirs`: the first regular file wins, as in Go's
/// `invoke.FindInPath`. The name must not contain a path separator.
pub fn find_in_path(name: &str, dirs: &[PathBuf]) -> Result<PathBuf, Error> {
    if name.is_empty() || name.contains('/') || name.contains('\\') || name == "." || name == ".." {
        return Err(Error::config(
            "type",
            format!("{name:?} is not a valid plugin name"),
        ));
    }
    if dirs.is_empty() {
        return Err(Error::InvalidEnv(format!(
            "CNI_PATH is empty: cannot find plugin {name:?}"
        )));
    }
    for dir in dirs {
        let candidate = dir.join(name);
        if candidate.metadata().is_ok_and(|m| m.is_file()) {
            return Ok(candidate);
        }
    }
    Err(Error::Delegate(format!(
        "failed to find plugin {name:?} in path {dirs:?}"
    )))
}

/// Runs the plugin at `path` with the parent environment plus `env`, writing
/// `stdin`. On exit 0 returns stdout. On failure returns the plugin's error
/// (its code kept) or, when it printed none, an error quoting its stderr.
/// The plugin's stderr is passed through to ours.
pub fn exec_plugin(path: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Result<Vec<u8>, Error> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut child = spawn_retrying_busy(path, env)?;
    let output = std::thread::scope(|s| {
        if let Some(mut pipe) = child.stdin.take() {
            // A writer thread, so a plugin that answers before reading all of
            // a large stdin cannot deadlock us.
            s.spawn(move || pipe.write_all(stdin));
        }
        child.wait_with_output()
    })
    .map_err(|e| Error::Delegate(format!("running plugin {name:?}: {e}")))?;
    if !output.stderr.is_empty() {
        let _ = std::io::stderr().write_all(&output.stderr);
    }
    if output.status.success() {
        return Ok(output.stdout);
    }
    if let Ok(mut e) = crate::gojson::from_slice::<ErrorResult>(&output.stdout) {
        if e.msg.is_empty() {
            e.msg = format!("plugin {name:?} failed with code {}", e.code);
        }
        return Err(Error::Plugin(e));
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let msg = if !output.stdout.is_empty() {
        format!(
            "plugin {name:?} failed ({}) but its error is not valid JSON: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout).trim()
        )
    } else if stderr.trim().is_empty() {
        format!(
            "plugin {name:?} failed ({}) with no error message",
            output.status
        )
    } else {
        format!(
            "plugin {name:?} failed ({}): {:?}",
            output.status,
            stderr.trim()
        )
    };
    Err(Error::Plugin(ErrorResult {
        cni_version: String::new(),
        code: crate::error::code::INTERNAL,
        msg,
        details: String::new(),
    }))
}

/// Spawns, retrying briefly while the binary is being replaced ("text file
/// busy", containernetworking/cni#763). Only the error path ever waits.
fn spawn_retrying_busy(path: &Path, env: &[(&str, &str)]) -> Result<std::process::Child, Error> {
    let mut attempts = 0;
    loop {
        let spawned = Command::new(path)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Ok(child) => return Ok(child),
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 20 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => {
                return Err(Error::Delegate(format!(
                    "executing plugin {}: {e}",
                    path.display()
                )))
            }
        }
    }
}

/// Runs delegate `plugin` with our environment, `CNI_COMMAND` overridden,
/// and `netconf` as its stdin (spec §4: the complete config, unchanged).
fn delegate(plugin: &str, command: &str, netconf: &[u8]) -> Result<Vec<u8>, Error> {
    delegate_as(Step::Delegate, plugin, command, netconf)
}

/// [`delegate`], its time logged as `step` ([`crate::calllog`]): IPAM's
/// calls go through here as [`Step::Ipam`].
pub(crate) fn delegate_as(
    step: Step,
    plugin: &str,
    command: &str,
    netconf: &[u8],
) -> Result<Vec<u8>, Error> {
    crate::calllog::timed(step, || {
        let path = find_in_path(plugin, &cni_path_from_env())?;
        exec_plugin(&path, &[("CNI_COMMAND", command)], netconf)
    })
}

/// Delegated ADD; a result without `cniVersion` is read as `version`.
pub fn delegate_add(plugin: &str, netconf: &[u8], version: Version) -> Result<CniResult, Error> {
    let out = delegate(plugin, "ADD", netconf)?;
    Ok(CniResult::from_slice(&out, version)?.0)
}

/// Delegated DEL.
pub fn delegate_del(plugin: &str, netconf: &[u8]) -> Result<(), Error> {
    delegate(plugin, "DEL", netconf).map(drop)
}

/// Delegated CHECK.
pub fn delegate_check(plugin: &str, netconf: &[u8]) -> Result<(), Error> {
    delegate(plugin, "CHECK", netconf).map(drop)
}

/// Delegated GC.
pub fn delegate_gc(plugin: &str, netconf: &[u8]) -> Result<(), Error> {
    delegate(plugin, "GC", netconf).map(drop)
}

/// Delegated STATUS.
pub fn delegate_status(plugin: &str, netconf: &[u8]) -> Result<(), Error> {
    delegate(plugin, "STATUS", netconf).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("libcni-invoke-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn finds_the_first_regular_file() {
        let a = tempdir("find-a");
        let b = tempdir("find-b");
        std::fs::create_dir(a.join("p")).unwrap(); // a directory is skipped
        script(&b, "p", "true");
        assert_eq!(
            find_in_path("p", &[a.clone(), b.clone()]).unwrap(),
            b.join("p")
        );
        assert_eq!(
            find_in_path("q", &[a.clone(), b.clone()])
                .unwrap_err()
                .code(),
            101
        );
        assert_eq!(
            find_in_path("../p", std::slice::from_ref(&a))
                .unwrap_err()
                .code(),
            7
        );
        assert_eq!(find_in_path("p", &[]).unwrap_err().code(), 4);
    }

    #[test]
    fn exec_reads_results_and_errors() {
        let d = tempdir("exec");
        let ok = script(
            &d,
            "ok",
            "cat >/dev/null; echo \"{\\\"cmd\\\":\\\"$CNI_COMMAND\\\"}\"",
        );
        let out = exec_plugin(&ok, &[("CNI_COMMAND", "ADD")], b"{}").unwrap();
        assert_eq!(String::from_utf8(out).unwrap().trim(), "{\"cmd\":\"ADD\"}");

        let err = script(
            &d,
            "err",
            "echo '{\"code\":7,\"msg\":\"bad subnet\",\"details\":\"x\"}'; exit 1",
        );
        let e = exec_plugin(&err, &[], b"{}").unwrap_err();
        assert_eq!(e.code(), 7);
        assert_eq!(e.to_string(), "bad subnet; x");

        let silent = script(&d, "silent", "echo boom >&2; exit 3");
        let e = exec_plugin(&silent, &[], b"{}").unwrap_err();
        assert_eq!(e.code(), 999);
        assert!(e.to_string().contains("boom"), "{e}");

        let garbage = script(&d, "garbage", "echo not-json; exit 1");
        let e = exec_plugin(&garbage, &[], b"{}").unwrap_err();
        assert!(e.to_string().contains("not valid JSON"), "{e}");
    }

    #[test]
    fn large_stdin_does_not_deadlock() {
        let d = tempdir("large");
        let echo = script(&d, "echo", "cat");
        let big = vec![b'x'; 1 << 20];
        assert_eq!(exec_plugin(&echo, &[], &big).unwrap().len(), big.len());
    }
}
