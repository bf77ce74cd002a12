//! The command line of `cni-rs-install`, parsed into [`Options`].

use libcni::cli::Args;
use std::collections::BTreeSet;
use std::path::PathBuf;

pub const USAGE: &str = "\
Usage: cni-rs-install [--from DIR] [--only A,B] [--skip A,B] [--link] [--dry-run] BIN_DIR

Copies the suite's binaries from DIR into BIN_DIR (e.g. /opt/cni/bin), one at
a time: each is written to a temp file in BIN_DIR, fsynced, closed and renamed
over its name, so a runtime exec'ing a plugin meanwhile runs either the old or
the new binary, whole, and never gets \"text file busy\". Files of BIN_DIR that
are not in the suite are kept. A binary whose bytes are already there is left
alone.

The suite: every executable regular file in DIR (not a dot file), except
cni-rs-install itself, and every link in DIR to one of those files by name:
the multicall form (the binary cni-rs and a link per plugin, bridge -> cni-rs)
is installed as it is, the file first, then each link (made under a temp name
and renamed over the plugin's name, as a file is). Switching from separate
binaries to the multicall form, or back, replaces each name in one step; the
other form's files that are no longer named stay, as foreign files do.
`cni-rs install BIN_DIR` is this installer inside the multicall binary.

Options:
      --from DIR     where the suite is (default: the directory of this program)
      --only A,B     install only these binaries of the suite
      --skip A,B     install all but these (the bin dir's files of those names are kept)
      --link         make symlinks to DIR's binaries instead of copies (Debian
                     package: cni-rs-install --link /opt/cni/bin)
      --dry-run      print what would change, change nothing
  -h, --help         print this help
      --version      print \"cni-rs-install <version>\"

Prints one line per binary: install, replace or unchanged (with --dry-run:
would install, would replace), and keep for each file of BIN_DIR left alone.
Exit status: 0 done, 1 failed (missing or read-only BIN_DIR, a write that
failed: binaries replaced before it stay replaced, each whole), 2 usage error.
";

/// What to do, from the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Where the suite is; `None`: the directory of the running program.
    pub from: Option<PathBuf>,
    pub bin_dir: PathBuf,
    /// `--only`: these names and no other.
    pub only: Option<BTreeSet<String>>,
    /// `--skip`: not these.
    pub skip: BTreeSet<String>,
    pub link: bool,
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cli {
    Help,
    Version,
    Run(Options),
}

/// Parses the arguments (without the program name); `Err` is a usage error.
pub fn parse(args: &[String]) -> Result<Cli, String> {
    let mut from = None;
    let mut only: Option<BTreeSet<String>> = None;
    let mut skip = BTreeSet::new();
    let mut link = false;
    let mut dry_run = false;
    let mut positional = Vec::new();
    let mut args = Args::new(args);
    while let Some(flag) = args.next_flag(&mut positional) {
        let name = flag.name;
        let mut value = || {
            args.value(&flag)
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name {
            "-h" | "--help" => return Ok(Cli::Help),
            "--version" => return Ok(Cli::Version),
            "--from" => from = Some(PathBuf::from(value()?)),
            "--only" => only
                .get_or_insert_with(BTreeSet::new)
                .extend(names(name, &value()?)?),
            "--skip" => skip.extend(names(name, &value()?)?),
            "--link" => link = true,
            "--dry-run" | "-n" => dry_run = true,
            _ => return Err(format!("unknown flag {:?}", flag.given)),
        }
    }
    let bin_dir = match &positional[..] {
        [dir] if !dir.is_empty() => PathBuf::from(dir),
        [] => return Err("missing BIN_DIR (e.g. /opt/cni/bin)".into()),
        _ => {
            return Err(format!(
                "expected one BIN_DIR, got {} arguments: {positional:?}",
                positional.len()
            ))
        }
    };
    if let Some(only) = &only {
        if let Some(both) = only.intersection(&skip).next() {
            return Err(format!("{both:?} is given to both --only and --skip"));
        }
    }
    Ok(Cli::Run(Options {
        from,
        bin_dir,
        only,
        skip,
        link,
        dry_run,
    }))
}

/// A comma-separated list of binary names; each must be a plain file name.
fn names(flag: &str, list: &str) -> Result<Vec<String>, String> {
    list.split(',')
        .map(|n| {
            let n = n.trim();
            if n.is_empty() || n.contains('/') || n == "." || n == ".." {
                Err(format!("{flag}: {n:?} is not a binary name (in {list:?})"))
            } else {
                Ok(n.to_string())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn set(a: &[&str]) -> BTreeSet<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_anywhere_lists_accumulate() {
        let cli = parse(&args(&[
            "--only",
            "bridge,host-local",
            "/opt/cni/bin",
            "--only=portmap",
            "--dry-run",
            "--from",
            "/x",
        ]))
        .unwrap();
        assert_eq!(
            cli,
            Cli::Run(Options {
                from: Some("/x".into()),
                bin_dir: "/opt/cni/bin".into(),
                only: Some(set(&["bridge", "host-local", "portmap"])),
                skip: set(&[]),
                link: false,
                dry_run: true,
            })
        );
        let Cli::Run(o) = parse(&args(&["--skip", "flannel", "--link", "/b"])).unwrap() else {
            panic!()
        };
        assert_eq!(
            (o.skip, o.only, o.link, o.from),
            (set(&["flannel"]), None, true, None)
        );
    }

    #[test]
    fn usage_errors_say_what_is_wrong() {
        let err = |a: &[&str]| parse(&args(a)).unwrap_err();
        assert!(err(&[]).contains("missing BIN_DIR"));
        assert!(err(&["/a", "/b"]).contains("expected one BIN_DIR"));
        assert!(err(&["--only"]).contains("--only needs a value"));
        assert!(err(&["--only", "a/b", "/d"]).contains("\"a/b\" is not a binary name"));
        assert!(err(&["--skip", "a,,b", "/d"]).contains("\"\" is not a binary name"));
        assert!(err(&["--only", "x", "--skip", "x", "/d"]).contains("both --only and --skip"));
        assert!(err(&["--force", "/d"]).contains("unknown flag \"--force\""));
        assert_eq!(parse(&args(&["/d", "--version"])), Ok(Cli::Version));
        assert_eq!(parse(&args(&["-h"])), Ok(Cli::Help));
    }
}
