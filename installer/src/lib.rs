//! `cni-rs-install`: puts the suite into a CNI bin dir (`/opt/cni/bin`) on a
//! live node. [`cli`] reads the command line, [`plan`] decides per binary
//! (install, replace, unchanged; the bin dir's other files kept) before
//! anything is written, [`mod@write`] replaces each binary atomically.

pub mod cli;
pub mod plan;
pub mod write;

use cli::{Cli, Options};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Who runs the install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program<'a> {
    /// `cni-rs-install`, which is never part of the suite it installs.
    Installer,
    /// The multicall binary as `cni-rs install`: it is the suite's one
    /// file, and the suite must hold a link to it for each of `plugins`.
    Multicall {
        name: &'a str,
        plugins: &'a [&'a str],
    },
}

impl Program<'_> {
    fn shown(&self) -> String {
        match self {
            Program::Installer => plan::SELF_NAME.to_string(),
            Program::Multicall { name, .. } => format!("{name} install"),
        }
    }
}

/// The program: arguments from the process, output on stdout, errors on
/// stderr, exit 0 (done), 1 (failed) or 2 (usage).
pub fn main() -> ExitCode {
    main_with_args(std::env::args_os().skip(1).collect(), Program::Installer)
}

/// [`main`] with the arguments (without the program name) given.
pub fn main_with_args(args: Vec<std::ffi::OsString>, program: Program) -> ExitCode {
    let args: Result<Vec<String>, _> = args.into_iter().map(|a| a.into_string()).collect();
    let parsed = match args {
        Ok(args) => cli::parse(&args),
        Err(bad) => Err(format!("argument {bad:?} is not valid UTF-8")),
    };
    let shown = program.shown();
    let opts = match parsed {
        Ok(Cli::Help) => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Cli::Version) => {
            let name = match program {
                Program::Installer => plan::SELF_NAME,
                Program::Multicall { name, .. } => name,
            };
            println!("{}", libcni::skel::version_line(name));
            return ExitCode::SUCCESS;
        }
        Ok(Cli::Run(opts)) => opts,
        Err(msg) => {
            eprintln!("{shown}: {msg}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    let self_exe = std::env::current_exe().ok();
    let mut out = std::io::stdout().lock();
    match run(&opts, self_exe.as_deref(), program, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("{shown}: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// One install as `opts` says, printing its lines to `out`. `self_exe` is
/// the running program: its directory is the default `--from`; the
/// installer is never part of the suite, the multicall binary is its file.
/// `Err` is the message of a failure.
pub fn run(
    opts: &Options,
    self_exe: Option<&Path>,
    program: Program,
    out: &mut dyn std::io::Write,
) -> Result<(), String> {
    let from: PathBuf = match (&opts.from, self_exe.and_then(Path::parent)) {
        (Some(f), _) => f.clone(),
        (None, Some(dir)) => dir.to_path_buf(),
        (None, None) => return Err("cannot tell where this program is: give --from DIR".into()),
    };
    let suite = plan::suite(&from, self_exe).map_err(|e| e.0)?;
    if let Program::Multicall { name, plugins } = program {
        plan::check_multicall(&suite, name, plugins, &from).map_err(|e| e.0)?;
    }
    let names = plan::choose(&suite, opts.only.as_ref(), &opts.skip, &from).map_err(|e| e.0)?;
    plan::check_bin_dir(&opts.bin_dir).map_err(|e| e.0)?;
    let plan = plan::plan(&from, &names, &opts.bin_dir, opts.link).map_err(|e| e.0)?;
    let mut line = |s: String| {
        let _ = writeln!(out, "{s}");
    };
    if opts.dry_run {
        for step in &plan.steps {
            let verb = match step.action {
                plan::Action::Unchanged => "unchanged".to_string(),
                a => format!("would {}", a.verb()),
            };
            line(format!("{verb} {}", step.name));
        }
    } else {
        write::apply(&plan, &opts.bin_dir, opts.link, &mut |d| {
            line(format!("{} {}", d.action.verb(), d.name))
        })
        .map_err(|e| e.to_string())?;
    }
    for name in &plan.kept {
        line(format!("keep {name}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use plan::Member;
    use std::collections::BTreeSet;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A fresh directory under the temp dir, removed on drop.
    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir()
                .join(format!("cni-rs-install-unit-{}-{tag}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        fn file(&self, name: &str, bytes: &str, mode: u32) -> PathBuf {
            let p = self.0.join(name);
            fs::write(&p, bytes).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            p
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn opts(from: &Dir, bin: &Dir) -> Options {
        Options {
            from: Some(from.0.clone()),
            bin_dir: bin.0.clone(),
            only: None,
            skip: BTreeSet::new(),
            link: false,
            dry_run: false,
        }
    }

    fn run_lines(o: &Options) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        run(o, None, Program::Installer, &mut out)?;
        Ok(String::from_utf8(out)
            .unwrap()
            .lines()
            .map(String::from)
            .collect())
    }

    #[test]
    fn suite_is_the_executables_but_dot_files_and_the_installer() {
        let from = Dir::new("suite");
        from.file("bridge", "b", 0o755);
        from.file("loopback", "l", 0o700);
        from.file("README.md", "r", 0o644);
        from.file(".hidden", "h", 0o755);
        from.file("cni-rs-install", "i", 0o755);
        let me = from.file("renamed-installer", "i2", 0o755);
        fs::create_dir(from.0.join("subdir")).unwrap();
        std::os::unix::fs::symlink("bridge", from.0.join("alias")).unwrap();
        // A link to a suite file is a member (the multicall form), a link
        // elsewhere is not.
        std::os::unix::fs::symlink("/usr/bin/true", from.0.join("away")).unwrap();
        assert_eq!(
            plan::suite(&from.0, Some(&me)).unwrap(),
            vec![
                Member::file("bridge"),
                Member::file("loopback"),
                Member::link("alias", "bridge")
            ]
        );
        let empty = Dir::new("suite-empty");
        let e = plan::suite(&empty.0, None).unwrap_err();
        assert!(e.0.contains("no binaries in"), "{e}");
    }

    #[test]
    fn install_replace_unchanged_and_foreign_kept() {
        let (from, bin) = (Dir::new("iru-from"), Dir::new("iru-bin"));
        from.file("bridge", "new bridge", 0o755);
        from.file("portmap", "new portmap", 0o755);
        from.file("tuning", "same", 0o755);
        bin.file("portmap", "old portmap", 0o755);
        bin.file("tuning", "same", 0o755);
        bin.file("calico", "theirs", 0o755);
        let old_tuning = fs::metadata(bin.0.join("tuning")).unwrap().ino();

        let mut dry = opts(&from, &bin);
        dry.dry_run = true;
        assert_eq!(
            run_lines(&dry).unwrap(),
            [
                "would install bridge",
                "would replace portmap",
                "unchanged tuning",
                "keep calico"
            ]
        );
        assert!(!bin.0.join("bridge").exists(), "a dry run writes nothing");
        assert_eq!(
            fs::read_to_string(bin.0.join("portmap")).unwrap(),
            "old portmap"
        );

        assert_eq!(
            run_lines(&opts(&from, &bin)).unwrap(),
            [
                "install bridge",
                "replace portmap",
                "unchanged tuning",
                "keep calico"
            ]
        );
        for (name, bytes) in [
            ("bridge", "new bridge"),
            ("portmap", "new portmap"),
            ("calico", "theirs"),
        ] {
            assert_eq!(fs::read_to_string(bin.0.join(name)).unwrap(), bytes);
            assert_eq!(
                fs::metadata(bin.0.join(name)).unwrap().mode() & 0o7777,
                0o755
            );
        }
        assert_eq!(
            fs::metadata(bin.0.join("tuning")).unwrap().ino(),
            old_tuning
        );
        let names: Vec<String> = fs::read_dir(&bin.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 4, "no temp file left: {names:?}");
    }

    #[test]
    fn a_wrong_mode_is_replaced_and_only_skip_choose() {
        let (from, bin) = (Dir::new("os-from"), Dir::new("os-bin"));
        from.file("bridge", "b", 0o755);
        from.file("flannel", "ours", 0o755);
        from.file("host-local", "h", 0o755);
        bin.file("bridge", "b", 0o777);
        bin.file("flannel", "flannel-io's", 0o755);
        let mut o = opts(&from, &bin);
        o.skip = ["flannel".to_string()].into();
        assert_eq!(
            run_lines(&o).unwrap(),
            ["replace bridge", "install host-local", "keep flannel"]
        );
        assert_eq!(
            fs::read_to_string(bin.0.join("flannel")).unwrap(),
            "flannel-io's"
        );
        let mut o = opts(&from, &bin);
        o.only = Some(["flannel".to_string()].into());
        o.dry_run = true;
        assert_eq!(
            run_lines(&o).unwrap(),
            ["would replace flannel", "keep bridge", "keep host-local"]
        );
        o.only = Some(["ptp".to_string()].into());
        let e = run_lines(&o).unwrap_err();
        assert!(e.contains("--only: \"ptp\" is not in the suite at"), "{e}");
        assert!(e.contains("(it has: bridge, flannel, host-local)"), "{e}");
    }

    #[test]
    fn link_mode_links_and_refuses_its_own_dir() {
        let (from, bin) = (Dir::new("ln-from"), Dir::new("ln-bin"));
        from.file("bridge", "b", 0o755);
        bin.file("bridge", "b", 0o755);
        let mut o = opts(&from, &bin);
        o.link = true;
        assert_eq!(run_lines(&o).unwrap(), ["replace bridge"]);
        assert_eq!(
            fs::read_link(bin.0.join("bridge")).unwrap(),
            from.0.join("bridge")
        );
        assert_eq!(run_lines(&o).unwrap(), ["unchanged bridge"]);
        // Copying over the link replaces the link, never writes through it.
        o.link = false;
        from.file("bridge", "b2", 0o755);
        assert_eq!(run_lines(&o).unwrap(), ["replace bridge"]);
        assert!(fs::symlink_metadata(bin.0.join("bridge"))
            .unwrap()
            .is_file());
        let mut o = opts(&from, &from);
        o.link = true;
        let e = run_lines(&o).unwrap_err();
        assert!(e.contains("the suite's own directory"), "{e}");
    }

    /// The multicall form: its file first, then a link per plugin; links
    /// replace files and files replace links, each by one rename.
    #[test]
    fn multicall_form_installs_its_file_then_links_and_switches_back() {
        let (multi, separate, bin) = (Dir::new("mc-from"), Dir::new("mc-sep"), Dir::new("mc-bin"));
        let me = multi.file("cni-rs", "all of them", 0o755);
        for p in ["bridge", "portmap"] {
            std::os::unix::fs::symlink("cni-rs", multi.0.join(p)).unwrap();
            separate.file(p, p, 0o755);
        }
        bin.file("bridge", "old bridge", 0o755);
        bin.file("calico", "theirs", 0o755);
        let plugins = ["bridge", "portmap"];
        let program = Program::Multicall {
            name: "cni-rs",
            plugins: &plugins,
        };
        let mut out = Vec::new();
        run(&opts(&multi, &bin), Some(&me), program, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "install cni-rs\nreplace bridge\ninstall portmap\nkeep calico\n"
        );
        for p in plugins {
            assert_eq!(fs::read_link(bin.0.join(p)).unwrap(), Path::new("cni-rs"));
            assert_eq!(fs::read_to_string(bin.0.join(p)).unwrap(), "all of them");
        }
        // Again: nothing to do.
        let mut out = Vec::new();
        run(&opts(&multi, &bin), Some(&me), program, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "unchanged cni-rs\nunchanged bridge\nunchanged portmap\nkeep calico\n"
        );
        // --only a link brings the file it names.
        let mut o = opts(&multi, &bin);
        o.only = Some(["portmap".to_string()].into());
        o.dry_run = true;
        assert_eq!(
            run_lines(&o).unwrap(),
            [
                "unchanged cni-rs",
                "unchanged portmap",
                "keep bridge",
                "keep calico"
            ]
        );
        // Back to separate binaries: each link replaced by its file; the
        // multicall file stays, as any file not in the suite.
        assert_eq!(
            run_lines(&opts(&separate, &bin)).unwrap(),
            [
                "replace bridge",
                "replace portmap",
                "keep calico",
                "keep cni-rs"
            ]
        );
        assert_eq!(fs::read_to_string(bin.0.join("bridge")).unwrap(), "bridge");
        assert!(fs::symlink_metadata(bin.0.join("bridge"))
            .unwrap()
            .is_file());

        // A partly extracted multicall form is refused before anything.
        fs::remove_file(multi.0.join("portmap")).unwrap();
        let e = run(&opts(&multi, &bin), Some(&me), program, &mut Vec::new()).unwrap_err();
        assert!(e.contains("lacks portmap"), "{e}");
        assert_eq!(fs::read_to_string(bin.0.join("bridge")).unwrap(), "bridge");
    }

    #[test]
    fn missing_or_non_dir_bin_dir_fails_before_anything() {
        let from = Dir::new("miss-from");
        from.file("bridge", "b", 0o755);
        let mut o = opts(&from, &from);
        o.bin_dir = from.0.join("nope");
        let e = run_lines(&o).unwrap_err();
        assert!(e.contains("does not exist (create it first"), "{e}");
        o.bin_dir = from.0.join("bridge");
        let e = run_lines(&o).unwrap_err();
        assert!(e.contains("is not a directory"), "{e}");
    }
}
