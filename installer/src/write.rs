//! Carrying out a [`Plan`]: each binary is written to a temp file in the
//! bin dir (`O_CREAT|O_EXCL|O_NOFOLLOW`), given mode 0755, fsynced and
//! closed, then renamed over its name; the directory is fsynced at the end.
//!
//! Why this order: a runtime may exec any of these names at any moment.
//! `rename` swaps the name from the old inode to the new one in one step,
//! so an exec finds one or the other, whole; a process already running the
//! old binary keeps its inode. The name is never opened for writing (that
//! is what gives `text file busy` to a writer while the file runs, and to
//! an exec while a writer has it open), and the temp file is closed before
//! the rename, so no writer of the new inode is left when it gets the name.

use crate::plan::{link_target, Action, Member, Plan, BIN_MODE, TEMP_MARK};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// What was done to one binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub name: String,
    pub action: Action,
}

/// A failed step: which binary, what was being done, the OS error.
#[derive(Debug)]
pub struct WriteError {
    pub name: String,
    pub what: String,
    pub source: io::Error,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.name, self.what, self.source)?;
        if self.source.raw_os_error() == Some(libc::EROFS) {
            f.write_str(" (the bin dir is on a read-only file system)")?;
        }
        Ok(())
    }
}

/// Carries out `plan` into `bin_dir` (copies, or symlinks with `link`;
/// the multicall form's links as links, after the file they name),
/// calling `report` after each binary. Stops at the first failure: the
/// binaries done before it stay done (each one whole), the failed one's
/// name still has what it had.
pub fn apply(
    plan: &Plan,
    bin_dir: &Path,
    link: bool,
    report: &mut dyn FnMut(&Done),
) -> Result<(), WriteError> {
    for step in &plan.steps {
        if step.action != Action::Unchanged {
            let member = Member {
                name: step.name.clone(),
                link_to: step.link_to.clone(),
            };
            match link_target(&plan.from, &member, link) {
                Some(target) => link_one(&target, bin_dir, &step.name)?,
                None => copy_one(&plan.from.join(&step.name), bin_dir, &step.name)?,
            }
        }
        report(&Done {
            name: step.name.clone(),
            action: step.action,
        });
    }
    File::open(bin_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| WriteError {
            name: bin_dir.display().to_string(),
            what: "syncing the directory".into(),
            source: e,
        })
}

fn temp_name(name: &str) -> String {
    format!(".{name}{TEMP_MARK}{}", std::process::id())
}

/// `src` copied to `<bin_dir>/<name>` by temp file + fsync + rename.
fn copy_one(src: &Path, bin_dir: &Path, name: &str) -> Result<(), WriteError> {
    let err = |what: &str, source: io::Error| WriteError {
        name: name.to_string(),
        what: what.to_string(),
        source,
    };
    let mut input = File::open(src).map_err(|e| err(&format!("reading {}", src.display()), e))?;
    let temp = bin_dir.join(temp_name(name));
    // A temp file of ours left by a killed run with the same pid.
    let _ = fs::remove_file(&temp);
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temp)
        .map_err(|e| err(&format!("creating {}", temp.display()), e))?;
    let written = io::copy(&mut input, &mut out)
        .and_then(|_| out.set_permissions(fs::Permissions::from_mode(BIN_MODE)))
        .and_then(|()| out.sync_all());
    // Closed before the rename: no writer of the new inode may remain.
    drop(out);
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(err(&format!("writing {}", temp.display()), e));
    }
    rename_into(&temp, bin_dir, name)
}

/// A symlink `<bin_dir>/<name>` -> `src` (absolute, or a bare name in
/// the bin dir), made under a temp name and
/// renamed over the name.
fn link_one(src: &Path, bin_dir: &Path, name: &str) -> Result<(), WriteError> {
    let temp = bin_dir.join(temp_name(name));
    let _ = fs::remove_file(&temp);
    std::os::unix::fs::symlink(src, &temp).map_err(|e| WriteError {
        name: name.to_string(),
        what: format!("creating the link {}", temp.display()),
        source: e,
    })?;
    rename_into(&temp, bin_dir, name)
}

fn rename_into(temp: &Path, bin_dir: &Path, name: &str) -> Result<(), WriteError> {
    let dest = bin_dir.join(name);
    fs::rename(temp, &dest).map_err(|e| {
        let _ = fs::remove_file(temp);
        WriteError {
            name: name.to_string(),
            what: format!("renaming {} to {}", temp.display(), dest.display()),
            source: e,
        }
    })
}
