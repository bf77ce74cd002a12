//! `cni-rs-install` (issue 19), the binary as a node's install step runs
//! it: its default source, what it prints, its exit codes and messages on a
//! missing or read-only bin dir, and the replacement of a live bin dir
//! while a runtime keeps calling the plugins in it.

use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use tests::*;

fn installer() -> PathBuf {
    bin("cni-rs-install")
}

fn install(args: &[&str], dirs: &[&Path]) -> PluginOutput {
    let mut cmd = Command::new(installer());
    cmd.args(args).args(dirs);
    outcome(&mut cmd)
}

/// What `cmd` printed and its exit code.
fn outcome(cmd: &mut Command) -> PluginOutput {
    let out = cmd.output().expect("run the installer");
    PluginOutput {
        exit_code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn lines(out: &PluginOutput) -> Vec<&str> {
    out.stdout.lines().collect()
}

fn inode(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).expect("lstat").ino()
}

#[test]
fn installs_from_its_own_directory_lists_changes_first_and_keeps_foreign_files() {
    // An unpacked release: the installer beside the suite.
    let src = TempDir::new("inst-src");
    std::fs::copy(installer(), src.path().join("cni-rs-install")).expect("copy installer");
    src.write_executable("bridge", "#!/bin/sh\necho new bridge\n");
    src.write_executable("portmap", "#!/bin/sh\necho new portmap\n");
    src.write_executable("tuning", "#!/bin/sh\necho tuning\n");
    src.write("README.md", "not a binary");
    let dest = TempDir::new("inst-dest");
    dest.write_executable("portmap", "#!/bin/sh\necho old portmap\n");
    dest.write_executable("tuning", "#!/bin/sh\necho tuning\n");
    dest.write_executable("calico", "#!/bin/sh\necho foreign\n");
    let before = tree(dest.path());
    let inodes: Vec<u64> = ["portmap", "tuning", "calico"]
        .iter()
        .map(|n| inode(&dest.path().join(n)))
        .collect();
    let run = |args: &[&str]| {
        let mut cmd = Command::new(src.path().join("cni-rs-install"));
        let out = output_of_written_program(cmd.args(args).arg(dest.path())).expect("run");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    assert_eq!(
        run(&["--dry-run"]),
        "would install bridge\nwould replace portmap\nunchanged tuning\nkeep calico\n"
    );
    assert_eq!(tree(dest.path()), before, "a dry run changes nothing");
    assert_eq!(
        run(&[]),
        "install bridge\nreplace portmap\nunchanged tuning\nkeep calico\n"
    );
    assert_eq!(tree(dest.path()), ["bridge", "calico", "portmap", "tuning"]);
    for (name, text) in [("bridge", "new bridge"), ("portmap", "new portmap")] {
        let p = dest.path().join(name);
        assert_eq!(mode_of(&p), 0o755);
        let out = run_ok(&mut Command::new(&p));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), text);
    }
    assert_ne!(
        inode(&dest.path().join("portmap")),
        inodes[0],
        "replaced by rename"
    );
    assert_eq!(
        inode(&dest.path().join("tuning")),
        inodes[1],
        "unchanged: untouched"
    );
    assert_eq!(
        inode(&dest.path().join("calico")),
        inodes[2],
        "foreign: untouched"
    );
    assert_eq!(
        run(&[]),
        "unchanged bridge\nunchanged portmap\nunchanged tuning\nkeep calico\n"
    );
}

#[test]
fn bad_choices_and_usage_fail_with_a_clear_message() {
    let src = TempDir::new("inst-bad-src");
    src.write_executable("bridge", "#!/bin/sh\n");
    src.write_executable("flannel", "#!/bin/sh\n");
    let dest = TempDir::new("inst-bad-dest");
    let from = src.path().to_str().expect("utf8");

    let out = install(&["--from", from, "--only", "ptp"], &[dest.path()]);
    assert_eq!(out.exit_code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        format!(
            "cni-rs-install: error: --only: \"ptp\" is not in the suite at {from} (it has: bridge, flannel)"
        )
    );
    let out = install(&["--from", from, "--skip", "flannel"], &[dest.path()]);
    assert_eq!(lines(&out), ["install bridge"], "{out:?}");
    assert_eq!(tree(dest.path()), ["bridge"]);

    let out = install(&["--from", from, "--frobnicate"], &[dest.path()]);
    assert_eq!(out.exit_code, 2, "{out:?}");
    assert!(
        out.stderr
            .starts_with("cni-rs-install: unknown flag \"--frobnicate\""),
        "{out:?}"
    );
    let out = install(&["--from", from], &[]);
    assert_eq!(out.exit_code, 2, "{out:?}");
    assert!(out.stderr.contains("missing BIN_DIR"), "{out:?}");
    let empty = TempDir::new("inst-bad-empty");
    let out = install(
        &["--from", empty.path().to_str().expect("utf8")],
        &[dest.path()],
    );
    assert_eq!(out.exit_code, 1, "{out:?}");
    assert!(out.stderr.contains("no binaries in"), "{out:?}");
}

#[test]
fn a_missing_or_read_only_bin_dir_fails_clearly_and_nothing_changes() {
    let src = TempDir::new("inst-ro-src");
    src.write_executable("bridge", "#!/bin/sh\necho new\n");
    let from = src.path().to_str().expect("utf8").to_string();

    let parent = TempDir::new("inst-ro-missing");
    let missing = parent.path().join("opt/cni/bin");
    for dry in [false, true] {
        let args: &[&str] = if dry { &["--dry-run"] } else { &[] };
        let out = install(&[&["--from", from.as_str()], args].concat(), &[&missing]);
        assert_eq!(out.exit_code, 1, "{out:?}");
        assert_eq!(out.stdout, "");
        assert_eq!(
            out.stderr.trim(),
            format!(
                "cni-rs-install: error: bin dir {0} does not exist (create it first, e.g. mkdir -p {0})",
                missing.display()
            )
        );
        assert!(tree(parent.path()).is_empty(), "nothing created");
    }

    if !require_root("a_missing_or_read_only_bin_dir_fails_clearly_and_nothing_changes") {
        return;
    }
    // The bin dir made read-only by a bind mount in a private mount
    // namespace: only the installer's process sees it so.
    let dest = TempDir::new("inst-ro-dest");
    dest.write_executable("bridge", "#!/bin/sh\necho old\n");
    let before = inode(&dest.path().join("bridge"));
    for dry in ["", "--dry-run"] {
        let script = r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" --from "$3" $4 "$1""#;
        let out = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(dest.path())
            .arg(installer())
            .arg(&from)
            .arg(dry)
            .output()
            .expect("unshare");
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim(),
            format!(
                "cni-rs-install: error: bin dir {} is on a read-only file system: nothing can be installed there",
                dest.path().display()
            )
        );
        assert!(out.stdout.is_empty(), "{out:?}");
    }
    assert_eq!(tree(dest.path()), ["bridge"]);
    assert_eq!(inode(&dest.path().join("bridge")), before);
    let out = run_ok(&mut Command::new(dest.path().join("bridge")));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "old");
}

/// The chain the runtime keeps calling while the installer works.
const CHAIN: &[&str] = &["bridge", "host-local", "portmap"];
const ROUNDS: usize = 50;

/// ADD and DEL of bridge + host-local + portmap through cnitool, with
/// `CNI_PATH` the live bin dir, in a loop, while the installer replaces
/// the chain's binaries 50 times (each round from the other of two builds
/// that differ in a byte, so every binary is really replaced). Each round
/// starts only once the loop has finished one more call, so calls and
/// replacements interleave throughout; beside it, one thread per binary
/// execs it (`--version`) in a tight loop. No call and no exec may fail:
/// no "text file busy", no partial binary, no missing one. (Replacing the
/// files in place with `cp -f` instead fails this test: execs see "text
/// file busy" and missing files.)
#[test]
fn replacing_a_live_bin_dir_fails_no_plugin_call() {
    if !require_root("replacing_a_live_bin_dir_fails_no_plugin_call") {
        return;
    }
    let builds = [TempDir::new("live-a"), TempDir::new("live-b")];
    for name in CHAIN {
        let a = builds[0].path().join(name);
        strip_to(&bin(name), &a);
        let mut bytes = std::fs::read(&a).expect("read");
        bytes.push(b'\n');
        std::fs::write(builds[1].path().join(name), bytes).expect("write");
        make_executable(&builds[1].path().join(name));
    }
    let forms = [
        Form::Separate(builds[0].path()),
        Form::Separate(builds[1].path()),
    ];
    let live = calls_during_installs(&forms, &|_, out| {
        lines(out)
            == [
                "replace bridge",
                "replace host-local",
                "replace portmap",
                "keep calico",
            ]
    });
    assert_eq!(
        tree(live.path()),
        ["bridge", "calico", "host-local", "portmap"],
        "no temp file left"
    );
    for name in CHAIN {
        let want = std::fs::read(builds[ROUNDS % 2].path().join(name)).expect("read");
        assert_eq!(
            std::fs::read(live.path().join(name)).expect("read"),
            want,
            "{name}"
        );
    }
}

/// The same live bin dir switched from separate binaries to the multicall
/// form (`cni-rs install`: the binary, then a link per plugin renamed over
/// each plugin's file) and back (`cni-rs-install`: each link replaced by
/// its file), 50 times, under the same calls and execs: none may fail.
#[test]
fn switching_a_live_bin_dir_between_separate_and_multicall_fails_no_plugin_call() {
    if !require_root("switching_a_live_bin_dir_between_separate_and_multicall_fails_no_plugin_call")
    {
        return;
    }
    let (separate, multicall) = (TempDir::new("switch-sep"), TempDir::new("switch-multi"));
    for name in CHAIN {
        strip_to(&build_dir().join(name), &separate.path().join(name));
    }
    make_multicall_form(&build_dir().join("cni-rs"), multicall.path());
    let forms = [
        Form::Separate(separate.path()),
        Form::Multicall(multicall.path()),
    ];
    let live = calls_during_installs(&forms, &|round, out| {
        let form_lines = lines(out);
        CHAIN
            .iter()
            .all(|name| form_lines.contains(&format!("replace {name}").as_str()))
            && (round % 2 == 1 || form_lines.iter().any(|l| l.ends_with(" cni-rs")))
    });
    // The last round installed separate binaries: files again, and the
    // multicall binary and its other links stay as any foreign file.
    for name in CHAIN {
        let meta = std::fs::symlink_metadata(live.path().join(name)).expect("lstat");
        assert!(meta.is_file(), "{name} is a file again");
    }
    assert_eq!(
        std::fs::read_link(live.path().join("tuning")).expect("a link left"),
        Path::new("cni-rs")
    );
    assert!(
        !tree(live.path())
            .iter()
            .any(|f| f.contains(".cni-rs-install-")),
        "no temp file left"
    );
}

/// One form of the suite a test installs: a directory of separate binaries
/// (installed by `cni-rs-install --from`), or the multicall form
/// (installed by its own `cni-rs install`).
enum Form<'a> {
    Separate(&'a Path),
    Multicall(&'a Path),
}

impl Form<'_> {
    fn install_into(&self, live: &Path) -> PluginOutput {
        match self {
            Form::Separate(dir) => install(&["--from", dir.to_str().expect("utf8")], &[live]),
            Form::Multicall(dir) => {
                outcome(Command::new(dir.join("cni-rs")).arg("install").arg(live))
            }
        }
    }
}

fn strip_to(src: &Path, dest: &Path) {
    run_ok(
        Command::new("objcopy")
            .arg("--strip-all")
            .arg(src)
            .arg(dest),
    );
}

fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The multicall form from the built `cni-rs` (stripped): the binary and a
/// link to it per plugin, as the multicall tarball holds it.
fn make_multicall_form(cni_rs: &Path, dir: &Path) {
    strip_to(cni_rs, &dir.join("cni-rs"));
    let out = run_ok(Command::new(dir.join("cni-rs")).arg("--list"));
    for p in String::from_utf8_lossy(&out.stdout).lines() {
        std::os::unix::fs::symlink("cni-rs", dir.join(p)).expect("link");
    }
}

/// The live bin dir (with a foreign `calico`), given `forms[0]` first, then
/// installed from `forms[1]`, `forms[0]`, ... for [`ROUNDS`] rounds while
/// a runtime keeps calling the chain through it and a thread per binary
/// execs it; `ok` judges each install's output. Fails on any failed call,
/// exec or install; returns the live dir, as the last round left it.
fn calls_during_installs(forms: &[Form; 2], ok: &dyn Fn(usize, &PluginOutput) -> bool) -> TempDir {
    let live = TempDir::new("live-bin");
    live.write_executable("calico", "#!/bin/sh\nexit 0\n");
    let out = forms[0].install_into(live.path());
    for name in CHAIN {
        assert!(
            lines(&out).contains(&format!("install {name}").as_str()),
            "{out:?}"
        );
    }

    let node = Node::new("live");
    let pod = Netns::new("live-pod");
    let data = TempDir::new("live-ipam");
    node.write_conf(
        "10-live.conflist",
        &json!({
            "cniVersion": "1.1.0",
            "name": "livenet",
            "plugins": [
                {"type": "bridge", "bridge": "cni-live0", "isGateway": true,
                 "ipam": {"type": "host-local", "subnet": "10.66.0.0/24",
                          "dataDir": data.path()}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        }),
    );
    let live_path = live.path().to_str().expect("utf8").to_string();
    let cap_args = json!({"portMappings": [
        {"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}
    ]})
    .to_string();
    let pod_path = pod.path().to_str().expect("utf8").to_string();
    let cnitool = bin("cnitool");

    let calls = Mutex::new(0usize);
    let progressed = Condvar::new();
    let done = AtomicBool::new(false);
    let mut failures = Vec::new();
    let mut replaced_inodes = Vec::new();
    std::thread::scope(|s| {
        let looper = s.spawn(|| {
            let mut failed = Vec::new();
            let mut n = 0usize;
            while !done.load(Ordering::SeqCst) || !n.is_multiple_of(2) {
                let verb = if n.is_multiple_of(2) { "add" } else { "del" };
                let out = node.cnitool_with(
                    &cnitool,
                    &[verb, "livenet", &pod_path],
                    &[("CNI_PATH", &live_path), ("CAP_ARGS", &cap_args)],
                );
                // host-local hands out the next address each time.
                let ok = out.exit_code == 0
                    && (verb == "del"
                        || out.json()["ips"][0]["address"]
                            .as_str()
                            .is_some_and(|a| a.starts_with("10.66.0.") && a.ends_with("/24")));
                if !ok {
                    failed.push(format!("call {n} ({verb}): {out:?}"));
                    if verb == "add" {
                        // DEL what a failed ADD may have left, then go on.
                        node.cnitool_with(
                            &cnitool,
                            &["del", "livenet", &pod_path],
                            &[("CNI_PATH", &live_path)],
                        );
                        n += 1;
                    }
                }
                n += 1;
                *calls.lock().expect("lock") = n;
                progressed.notify_all();
            }
            (n, failed)
        });

        // Beside the runtime, a tight loop of execs of each binary: any
        // moment a name had no whole binary behind it would show here.
        let hammers: Vec<_> = CHAIN
            .iter()
            .map(|name| {
                let (live, done) = (live.path(), &done);
                s.spawn(move || {
                    let mut failed = Vec::new();
                    let mut n = 0u64;
                    while !done.load(Ordering::SeqCst) {
                        let out = Command::new(live.join(name)).arg("--version").output();
                        let ok = out.as_ref().is_ok_and(|o| {
                            o.status.success()
                                && o.stdout
                                    == format!("{name} {}\n", tests::release::PLUGIN_VERSION)
                                        .as_bytes()
                        });
                        if !ok && failed.len() < 10 {
                            failed.push(format!("exec {n} of {name}: {out:?}"));
                        }
                        n += 1;
                    }
                    (n, failed)
                })
            })
            .collect();

        let deadline = Instant::now() + Duration::from_secs(600);
        for round in 0..ROUNDS {
            // Wait for one more finished call (a bounded wait, no sleep).
            let mut c = calls.lock().expect("lock");
            while *c < round + 1 {
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(!left.is_zero(), "the call loop stalled at {c}");
                c = progressed.wait_timeout(c, left).expect("wait").0;
            }
            drop(c);
            let out = forms[(round + 1) % 2].install_into(live.path());
            if out.exit_code != 0 || !ok(round, &out) {
                failures.push(format!("install round {round}: {out:?}"));
            }
            replaced_inodes.push(inode(&live.path().join("bridge")));
        }
        done.store(true, Ordering::SeqCst);
        let (n, failed) = looper.join().expect("loop thread");
        assert!(n >= ROUNDS, "{n} calls");
        failures.extend(failed);
        for h in hammers {
            let (n, failed) = h.join().expect("exec thread");
            assert!(n > 0);
            failures.extend(failed);
        }
    });
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    replaced_inodes.dedup();
    assert_eq!(
        replaced_inodes.len(),
        ROUNDS,
        "every round renamed a new bridge in"
    );
    // The loop ended on a DEL: the lease is released.
    assert_eq!(
        leases_in(&data.path().join("livenet")),
        Vec::<String>::new()
    );
    live
}
