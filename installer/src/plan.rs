//! What an install would do: the suite found in the source directory, the
//! `--only`/`--skip` choice, and for each binary whether the bin dir lacks
//! it, has other bytes (or another link) under its name, or has it already.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// This program's own name: never part of the suite it installs.
pub const SELF_NAME: &str = "cni-rs-install";

/// Mode of an installed binary.
pub const BIN_MODE: u32 = 0o755;

/// The marker in our temp files' names (`.<name>.cni-rs-install-<pid>`):
/// such files in a bin dir are ours, never "foreign".
pub const TEMP_MARK: &str = ".cni-rs-install-";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Not in the bin dir yet.
    Install,
    /// Something else under its name (other bytes, mode, a link elsewhere).
    Replace,
    /// Already exactly there.
    Unchanged,
}

impl Action {
    pub fn verb(self) -> &'static str {
        match self {
            Action::Install => "install",
            Action::Replace => "replace",
            Action::Unchanged => "unchanged",
        }
    }
}

/// One binary of the suite: a file, or, in the multicall form, a link
/// in the suite's directory to one of its files (`bridge -> cni-rs`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    pub name: String,
    /// The file of the suite this name links to, for a link.
    pub link_to: Option<String>,
}

impl Member {
    pub fn file(name: &str) -> Member {
        Member {
            name: name.to_string(),
            link_to: None,
        }
    }

    pub fn link(name: &str, to: &str) -> Member {
        Member {
            name: name.to_string(),
            link_to: Some(to.to_string()),
        }
    }
}

/// One binary of the suite and what happens to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub name: String,
    pub link_to: Option<String>,
    pub action: Action,
}

/// The whole install, decided before anything is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The source directory, absolute (symlink targets for `--link`).
    pub from: PathBuf,
    pub steps: Vec<Step>,
    /// Files of the bin dir that stay as they are: not in the suite, or
    /// left out by `--only`/`--skip`. Sorted.
    pub kept: Vec<String>,
}

/// A failure that stops the install before anything is changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The suite in `from`: every regular file with an execute bit whose name
/// does not start with `.`, except this program (by name, or the same file
/// as `self_exe`, unless links name it: then it is the multicall binary),
/// and every symlink whose target is one of those files, by bare name (the
/// multicall form's links). Files first, then links, each sorted: a link
/// is made after the file it names.
pub fn suite(from: &Path, self_exe: Option<&Path>) -> Result<Vec<Member>, PlanError> {
    let entries = fs::read_dir(from).map_err(|e| {
        PlanError(format!(
            "cannot read the suite's directory {}: {e}",
            from.display()
        ))
    })?;
    let me = self_exe.and_then(|p| fs::metadata(p).ok());
    let mut files = BTreeSet::new();
    let mut links = BTreeSet::new();
    let mut myself = None;
    for entry in entries {
        let entry = entry.map_err(|e| PlanError(format!("reading {}: {e}", from.display())))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') || name == SELF_NAME {
            continue;
        }
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Some(to) = fs::read_link(entry.path())
                .ok()
                .and_then(|t| t.into_os_string().into_string().ok())
                .filter(|t| !t.contains('/') && !t.starts_with('.'))
            {
                links.insert((name, to));
            }
            continue;
        }
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            continue;
        }
        if me
            .as_ref()
            .is_some_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino()))
        {
            myself = Some(name.clone());
        }
        files.insert(name);
    }
    links.retain(|(_, to)| files.contains(to));
    if let Some(me) = myself {
        if !links.iter().any(|(_, to)| *to == me) {
            files.remove(&me);
        }
    }
    if files.is_empty() {
        return Err(PlanError(format!(
            "no binaries in {}: nothing to install (give the suite's directory with --from)",
            from.display()
        )));
    }
    let mut members: Vec<Member> = files.iter().map(|f| Member::file(f)).collect();
    members.extend(links.iter().map(|(name, to)| Member::link(name, to)));
    Ok(members)
}

/// The multicall form in `from` is whole: the binary `name` and a link to
/// it for each of `plugins` (a partly extracted tarball would install a
/// binary no runtime can call by a plugin's name).
pub fn check_multicall(
    suite: &[Member],
    name: &str,
    plugins: &[&str],
    from: &Path,
) -> Result<(), PlanError> {
    let missing: Vec<&str> = std::iter::once(name)
        .filter(|n| !suite.contains(&Member::file(n)))
        .chain(
            plugins
                .iter()
                .copied()
                .filter(|p| !suite.contains(&Member::link(p, name))),
        )
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(PlanError(format!(
        "the multicall form in {} lacks {} (a file {name} and a link to it named after each plugin): \
         extract the whole multicall tarball there, or give it with --from",
        from.display(),
        missing.join(", ")
    )))
}

/// Which of `suite` to install: `only` (all of them when `None`) minus
/// `skip`, and the file each chosen link names unless skipped. A name
/// given that is not in the suite is an error.
pub fn choose(
    suite: &[Member],
    only: Option<&BTreeSet<String>>,
    skip: &BTreeSet<String>,
    from: &Path,
) -> Result<Vec<Member>, PlanError> {
    for (flag, set) in [("--only", only), ("--skip", Some(skip))] {
        for name in set.into_iter().flatten() {
            if !suite.iter().any(|m| m.name == *name) {
                let names: Vec<&str> = suite.iter().map(|m| m.name.as_str()).collect();
                return Err(PlanError(format!(
                    "{flag}: {name:?} is not in the suite at {} (it has: {})",
                    from.display(),
                    names.join(", ")
                )));
            }
        }
    }
    let wanted = |m: &Member| only.is_none_or(|o| o.contains(&m.name)) && !skip.contains(&m.name);
    let needed: BTreeSet<&String> = suite
        .iter()
        .filter(|m| wanted(m))
        .filter_map(|m| m.link_to.as_ref())
        .filter(|to| !skip.contains(*to))
        .collect();
    Ok(suite
        .iter()
        .filter(|m| wanted(m) || needed.contains(&m.name))
        .cloned()
        .collect())
}

/// Checks that `bin_dir` can be installed into: it exists, is a directory,
/// and is writable (not on a read-only file system, not denied to us).
pub fn check_bin_dir(bin_dir: &Path) -> Result<(), PlanError> {
    let shown = bin_dir.display();
    match fs::metadata(bin_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(PlanError(format!("bin dir {shown} is not a directory"))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(PlanError(format!(
                "bin dir {shown} does not exist (create it first, e.g. mkdir -p {shown})"
            )))
        }
        Err(e) => return Err(PlanError(format!("bin dir {shown}: {e}"))),
    }
    let path = std::ffi::CString::new(bin_dir.as_os_str().as_encoded_bytes())
        .map_err(|_| PlanError(format!("bin dir {shown}: a NUL in the path")))?;
    // SAFETY: statvfs is plain data (integers), for which all zeroes is a
    // valid value.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `vfs` a valid out-buffer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut vfs) } == 0 && vfs.f_flag & libc::ST_RDONLY != 0 {
        return Err(PlanError(format!(
            "bin dir {shown} is on a read-only file system: nothing can be installed there"
        )));
    }
    // SAFETY: as above.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = io::Error::last_os_error();
        return Err(PlanError(format!("bin dir {shown} is not writable: {e}")));
    }
    Ok(())
}

/// What `<bin_dir>/<name>` must be for `member`: a link's target (the
/// file's name, or its absolute path in `from` with `--link`), or, for a
/// file with `--link`, a link to it in `from`; `None`: a copy of the file.
pub fn link_target(from: &Path, member: &Member, link: bool) -> Option<PathBuf> {
    match (&member.link_to, link) {
        (Some(to), false) => Some(PathBuf::from(to)),
        (Some(to), true) => Some(from.join(to)),
        (None, true) => Some(from.join(&member.name)),
        (None, false) => None,
    }
}

/// The plan for installing `members` from `from` into `bin_dir`.
pub fn plan(
    from: &Path,
    members: &[Member],
    bin_dir: &Path,
    link: bool,
) -> Result<Plan, PlanError> {
    let from =
        std::path::absolute(from).map_err(|e| PlanError(format!("{}: {e}", from.display())))?;
    if link && same_dir(&from, bin_dir) {
        return Err(PlanError(format!(
            "--link into {}, the suite's own directory, would replace each binary by a link to itself",
            bin_dir.display()
        )));
    }
    let mut steps = Vec::new();
    for member in members {
        let name = &member.name;
        let dest = bin_dir.join(name);
        let target = link_target(&from, member, link);
        let action = match fs::symlink_metadata(&dest) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Action::Install,
            Err(e) => return Err(PlanError(format!("{}: {e}", dest.display()))),
            Ok(m) if m.is_dir() => {
                return Err(PlanError(format!(
                    "{} is a directory: not replacing it with a binary",
                    dest.display()
                )))
            }
            Ok(m) => {
                let same = match &target {
                    Some(t) => {
                        m.file_type().is_symlink() && fs::read_link(&dest).is_ok_and(|d| d == *t)
                    }
                    None => {
                        m.is_file()
                            && m.permissions().mode() & 0o7777 == BIN_MODE
                            && same_bytes(&from.join(name), &dest)
                                .map_err(|e| PlanError(format!("comparing {name}: {e}")))?
                    }
                };
                if same {
                    Action::Unchanged
                } else {
                    Action::Replace
                }
            }
        };
        steps.push(Step {
            name: name.clone(),
            link_to: member.link_to.clone(),
            action,
        });
    }
    let mut kept = Vec::new();
    if let Ok(entries) = fs::read_dir(bin_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let chosen = members.iter().any(|m| m.name == name);
            let ours_temp = name.starts_with('.') && name.contains(TEMP_MARK);
            if !chosen && !ours_temp {
                kept.push(name);
            }
        }
    }
    kept.sort();
    Ok(Plan { from, steps, kept })
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// True when `a` and `b` hold the same bytes (`b` read without following
/// a symlink: the caller checked it is a regular file).
fn same_bytes(a: &Path, b: &Path) -> io::Result<bool> {
    let (ma, mb) = (fs::metadata(a)?, fs::symlink_metadata(b)?);
    if ma.len() != mb.len() {
        return Ok(false);
    }
    let (mut fa, mut fb) = (fs::File::open(a)?, fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = read_full(&mut fa, &mut ba)?;
        let m = read_full(&mut fb, &mut bb)?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
