//! Release artifacts and node installs: the suite as `scripts/suite.sh`
//! derives it from the workspace, copies of the source tree for
//! reproducibility builds, and running one test inside the full-kernel VM
//! (`scripts/vm/run.sh`), whose root is a throwaway
//! copy-on-write overlay of this machine's: what a test does to dpkg's
//! database or `/usr/lib/cni` there never reaches the host.

use crate::workspace_root;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The suite's binaries, as the release script ships them.
pub fn suite_bins() -> Vec<String> {
    let out = crate::run_ok(
        Command::new("bash")
            .arg("-c")
            .arg(". scripts/suite.sh && suite_bins")
            .env("repo", workspace_root())
            .current_dir(workspace_root()),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// The suite's binaries that are tools, not plugins.
pub const TOOLS: &[&str] = &["cnitool", "cni-rs-install"];

/// The release's plugins: its binaries but the tools.
pub fn plugins() -> Vec<String> {
    suite_bins()
        .into_iter()
        .filter(|b| !TOOLS.contains(&b.as_str()))
        .collect()
}

/// The workspace's version (every crate's, the tests' too): the release
/// artifacts are named after it.
pub const SUITE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// This machine's release architecture (scripts/arch.sh): the name in the
/// artifacts' file names.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no release architecture for {other}"),
    }
}

/// What every binary says it is (`--version`, the about line, VERSION).
pub use libcni::version::PLUGIN_VERSION;

/// Copies the source tree (tracked files and untracked ones git does not
/// ignore, as they are in the work tree; `fuzz/` left out, it is not in
/// the workspace) to `dest`, keeping the execute bits.
pub fn copy_source_tree(dest: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let root = workspace_root();
    let out = crate::run_ok(Command::new("git").current_dir(&root).args([
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ]));
    for rel in out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let rel = String::from_utf8_lossy(rel).into_owned();
        if rel.starts_with("fuzz/") {
            continue;
        }
        let src = root.join(&rel);
        let Ok(meta) = std::fs::symlink_metadata(&src) else {
            continue; // deleted in the work tree, not yet committed
        };
        let to = dest.join(&rel);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&src).expect("readlink");
            std::os::unix::fs::symlink(target, &to).expect("symlink");
        } else {
            std::fs::copy(&src, &to).unwrap_or_else(|e| panic!("copy {rel}: {e}"));
            let mode = meta.permissions().mode() & 0o755 | 0o644;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
    }
}

/// The last commit's time, as the release script takes it.
pub fn commit_time() -> String {
    let out = crate::run_ok(Command::new("git").current_dir(workspace_root()).args([
        "log",
        "-1",
        "--format=%ct",
    ]));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// True inside the full-kernel VM.
pub fn in_vm() -> bool {
    std::env::var_os("FULLKERNEL_GUEST").is_some_and(|v| v == "1")
}

/// The full-kernel VM runner of this repository (`scripts/vm/run.sh`), or
/// `None` when `CNI_TEST_SKIP` names `fullkernel`.
pub fn fullkernel_runner() -> Option<PathBuf> {
    if crate::step_skipped("fullkernel") {
        return None;
    }
    Some(workspace_root().join("scripts/vm/run.sh"))
}

/// Runs the test `name` of module `module` (its `module_path!()`) of this
/// test binary again, alone, inside the VM (where [`in_vm`] is true), with
/// `env` added; returns its output.
pub fn rerun_in_vm(runner: &Path, module: &str, name: &str, env: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(runner);
    cmd.arg("--")
        .arg(exe)
        .args(["--exact", &crate::test_name(module, name)])
        .args(["--nocapture", "--test-threads=1"])
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null());
    cmd.output().expect("run the VM")
}

/// What keeps an ELF file from running without the node's libraries: its
/// interpreter (`PT_INTERP`, the loader) and the libraries it names
/// (`DT_NEEDED` in its dynamic section).
#[derive(Debug, PartialEq, Eq)]
pub struct DynamicNeeds {
    pub interpreter: bool,
    pub needed: usize,
}

/// Reads [`DynamicNeeds`] from an ELF64 little-endian file's program
/// headers and dynamic section.
pub fn dynamic_needs(path: &Path) -> DynamicNeeds {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        data.len() > 64 && &data[..4] == b"\x7fELF" && data[4] == 2 && data[5] == 1,
        "{}: not an ELF64 little-endian file",
        path.display()
    );
    let u16_at = |o: usize| u16::from_le_bytes(data[o..o + 2].try_into().expect("2 bytes"));
    let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().expect("8 bytes"));
    let (phoff, phentsize, phnum) = (u64_at(32) as usize, u16_at(54) as usize, u16_at(56));
    let mut needs = DynamicNeeds {
        interpreter: false,
        needed: 0,
    };
    for i in 0..phnum as usize {
        let ph = phoff + i * phentsize;
        match u32_at(ph) {
            // PT_INTERP
            3 => needs.interpreter = true,
            // PT_DYNAMIC: (tag, value) pairs up to DT_NULL; DT_NEEDED is 1.
            2 => {
                let (offset, size) = (u64_at(ph + 8) as usize, u64_at(ph + 32) as usize);
                for entry in (offset..offset + size).step_by(16) {
                    match u64_at(entry) {
                        0 => break,
                        1 => needs.needed += 1,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    needs
}

impl DynamicNeeds {
    /// Nothing of the node's: what a static (or static-pie) binary needs.
    pub const NONE: DynamicNeeds = DynamicNeeds {
        interpreter: false,
        needed: 0,
    };
}

/// The Maintainer a test's package is built with: DEB_MAINTAINER, else
/// the author of the commit under test (scripts/test.sh sets the same).
pub fn deb_maintainer() -> String {
    if let Ok(m) = std::env::var("DEB_MAINTAINER") {
        return m;
    }
    let out = crate::run_ok(Command::new("git").current_dir(workspace_root()).args([
        "log",
        "-1",
        "--format=%an <%ae>",
    ]));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What lintian says against a package that it must not: every error,
/// and each warning whose tag docs/install.md does not list with its
/// reason (a `| `tag` |` row). Empty when lintian accepts it.
pub fn lintian_problems(deb: &Path) -> Vec<String> {
    let out = Command::new("lintian")
        .args(["--tag-display-limit", "0", "--display-level", ">=warning"])
        .arg(deb)
        .output()
        .unwrap_or_else(|e| panic!("lintian (scripts/deps.sh installs it): {e}"));
    let docs = std::fs::read_to_string(workspace_root().join("docs/install.md")).expect("docs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| {
            let mut f = line.split_whitespace();
            match (f.next(), f.next(), f.next()) {
                (Some("E:"), ..) => true,
                (Some("W:"), _, Some(tag)) => !docs.contains(&format!("| `{tag}` |")),
                _ => false,
            }
        })
        .map(str::to_string)
        .collect()
}

/// The file name of an artifact's SBOM, as scripts/release.sh names it:
/// `cni-rs-linux-amd64-v0.1.0.tgz` -> `cni-rs-linux-amd64-v0.1.0.spdx.json`.
pub fn sbom_name(artifact: &str) -> String {
    let stem = [".tgz", ".tar.gz", ".tar", ".deb"]
        .iter()
        .find_map(|ext| artifact.strip_suffix(ext))
        .unwrap_or_else(|| panic!("{artifact} is not a release artifact"));
    format!("{stem}.spdx.json")
}

/// The release's `dist/` that scripts/test.sh's release step wrote
/// (`CNI_TEST_DIST`), or None elsewhere, said on stderr: the tests that
/// read the release run in that step.
pub fn release_dist() -> Option<PathBuf> {
    match std::env::var_os("CNI_TEST_DIST") {
        Some(d) => Some(PathBuf::from(d)),
        None => {
            eprintln!(
                "the release's artifacts are checked in scripts/test.sh's release step \
                 (CNI_TEST_DIST)"
            );
            None
        }
    }
}
