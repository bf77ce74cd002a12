//! Release artifacts (issue 19): which binaries the release holds, the
//! version every one of them reports, the reproducibility of
//! `scripts/release.sh`, and the Debian package's install, removal and
//! purge (inside the full-kernel VM, whose root is a throwaway overlay of
//! this machine's: the Go reference plugins in `/usr/lib/cni` that other
//! tests use are never touched on the host).

use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tests::release::*;
use tests::*;

#[test]
fn the_release_holds_every_plugin_binary_of_the_workspace_and_the_tools() {
    let bins = suite_bins();
    let out = run_ok(Command::new("cargo").current_dir(workspace_root()).args([
        "metadata",
        "--no-deps",
        "--format-version",
        "1",
    ]));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata");
    // Every bin target whose main calls the plugin skeleton, or its
    // library's program (dhcp's, which also runs its daemon), is a plugin.
    let mut plugin_bins = Vec::new();
    for p in meta["packages"].as_array().expect("packages") {
        for t in p["targets"].as_array().expect("targets") {
            let is_bin = t["kind"]
                .as_array()
                .is_some_and(|k| k.contains(&"bin".into()));
            let src = t["src_path"].as_str().expect("src_path");
            let text = std::fs::read_to_string(src).expect("read main");
            let plugin_main =
                text.contains("skel::plugin_main") || text.contains("::program_main(");
            if is_bin && plugin_main {
                plugin_bins.push(t["name"].as_str().expect("name").to_string());
            }
        }
    }
    plugin_bins.sort();
    assert!(plugin_bins.len() >= 9, "{plugin_bins:?}");
    assert_eq!(plugins(), plugin_bins, "the release's plugins");
    for tool in TOOLS {
        assert!(bins.contains(&tool.to_string()), "{tool} in {bins:?}");
    }
    assert!(!bins.contains(&"cni-bench".to_string()), "{bins:?}");
    let mut sorted = bins.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(bins, sorted, "sorted, once each");
}

#[test]
fn every_binary_prints_name_and_version_and_plugins_say_it_in_version_and_about() {
    for b in suite_bins() {
        let out = run_ok(
            Command::new(bin(&b))
                .arg("--version")
                .env_remove("CNI_COMMAND"),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{b} {PLUGIN_VERSION}\n"),
            "{b} --version"
        );
        assert!(out.stderr.is_empty(), "{b}: {out:?}");
    }
    for p in plugins() {
        let out = call_plugin(None, &bin(&p), &[("CNI_COMMAND", "VERSION")], "");
        assert_eq!(out.exit_code, 0, "{p}: {out:?}");
        let v = out.json();
        assert_eq!(v["pluginVersion"], PLUGIN_VERSION, "{p}: {v}");
        assert_eq!(v["cniVersion"], "1.1.0", "{p}: {v}");
        let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
        assert_eq!(
            keys,
            ["cniVersion", "supportedVersions", "pluginVersion"],
            "{p}"
        );

        // No CNI_COMMAND: the about line carries the version, as Go's
        // "CNI bridge plugin v1.1.1".
        let out = call_plugin(None, &bin(&p), &[], "");
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (0, ""),
            "{p}: {out:?}"
        );
        // Upstream's line exactly, but for the version: Nomad and nerdctl
        // read it (clients.rs applies their rules).
        let about = out.stderr.lines().next().unwrap_or_default();
        assert_eq!(about, format!("CNI {p} plugin v{PLUGIN_VERSION}"), "{p}");

        // A runtime's call is never taken for --version.
        let out = Command::new(bin(&p))
            .arg("--version")
            .env("CNI_COMMAND", "VERSION")
            .output()
            .expect("run");
        let v: Value = serde_json::from_slice(&out.stdout).expect("VERSION JSON");
        assert_eq!(v["pluginVersion"], PLUGIN_VERSION, "{p}");
    }
}

/// What a Rust user types at the root, `cargo build --release`, builds
/// every shipped crate and none that turns on libcni's `fault-points` (the
/// crash campaign's hook): the workspace's `default-members` leave out
/// `tests`, its CRI client and the benchmark, and nothing else. The exact
/// command is run (into its own target dir, this run's being locked), and
/// every binary it wrote is read.
#[test]
fn a_plain_release_build_at_the_root_has_no_fault_hook() {
    let root = workspace_root();
    let meta = run_ok(Command::new("cargo").current_dir(&root).args([
        "metadata",
        "--no-deps",
        "--format-version",
        "1",
    ]));
    let meta: Value = serde_json::from_slice(&meta.stdout).expect("metadata");
    let names = |key: &str| -> Vec<String> {
        let ids: Vec<&str> = meta[key]
            .as_array()
            .expect(key)
            .iter()
            .map(|v| v.as_str().expect("id"))
            .collect();
        let mut out: Vec<String> = meta["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .filter(|p| ids.contains(&p["id"].as_str().expect("id")))
            .map(|p| p["name"].as_str().expect("name").to_string())
            .collect();
        out.sort();
        out
    };
    let not_shipped = ["bench", "cri-client", "manpages", "tests"];
    let mut shipped = names("workspace_members");
    shipped.retain(|n| !not_shipped.contains(&n.as_str()));
    assert_eq!(
        names("workspace_default_members"),
        shipped,
        "Cargo.toml's default-members: every member but {not_shipped:?}"
    );

    let target = root.join("target/plain-release-build");
    let out = run_ok(
        Command::new("cargo")
            .current_dir(&root)
            .args([
                "build",
                "--release",
                "--message-format=json-render-diagnostics",
            ])
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS"),
    );
    let mut built = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some(exe) = msg["executable"].as_str() {
            built.push(PathBuf::from(exe));
        }
    }
    let mut built_names: Vec<String> = built
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    built_names.sort();
    for want in plugins()
        .iter()
        .map(String::as_str)
        .chain(["cnitool", "cni-rs"])
    {
        assert!(
            built_names.iter().any(|b| b == want),
            "{want} in {built_names:?}"
        );
    }
    for exe in &built {
        let bytes = std::fs::read(exe).expect("read binary");
        assert!(
            !bytes.windows(15).any(|w| w == b"CNI_FAULT_POINT"),
            "{} from `cargo build --release` holds the fault hook",
            exe.display()
        );
    }
}

/// Go libcni, as runtimes call it (`invoke.GetVersionInfo`), decodes our
/// VERSION answers, `pluginVersion` and all, to the versions we list.
#[test]
fn go_libcni_reads_every_plugins_version_answer() {
    let Some(exe) = go_client("vercheck") else {
        return;
    };
    for p in plugins() {
        let out = Command::new(&exe).arg(bin(&p)).output().expect("vercheck");
        let ours = call_plugin(None, &bin(&p), &[("CNI_COMMAND", "VERSION")], "").json();
        let want: Vec<&str> = ours["supportedVersions"]
            .as_array()
            .expect("list")
            .iter()
            .map(|v| v.as_str().expect("str"))
            .collect();
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).trim()
            ),
            (Some(0), want.join(" ").as_str()),
            "{p}: {out:?}"
        );
    }
}

/// Whether a static binary holds glibc's NSS, which would load the node's
/// `libnss_*.so` at run time (`getaddrinfo`, `getpwnam`): its module names
/// are built from `libnss_`.
fn links_nss(path: &Path) -> bool {
    let bytes = std::fs::read(path).expect("read");
    bytes.windows(7).any(|w| w == b"libnss_")
}

/// What a release run wrote: file name -> bytes.
fn artifacts(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read dist")
        .map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().into_string().expect("utf8");
            (name, std::fs::read(e.path()).expect("read"))
        })
        .collect()
}

/// The binaries the reproducibility check builds: one plugin crate and the
/// two tools (libcni's cnitool, the installer), and a multicall binary of
/// that one plugin. A release build of the whole suite (LTO, one codegen
/// unit per crate) takes minutes per binary set on two cores;
/// `scripts/release.sh` builds them all the same way.
const REPRO_BINS: &str = "loopback,cnitool,cni-rs-install";

/// The foreign architecture the reproducibility check builds beside the
/// host's: s390x, the big-endian one, with Debian's cross toolchain and a
/// std built from source (scripts/arch.sh).
const FOREIGN: &str = "s390x";

fn release(src: &Path, out: &Path, target: Option<&Path>, epoch: &str) {
    let mut cmd = Command::new("bash");
    cmd.arg(src.join("scripts/release.sh"))
        .args(["--only", REPRO_BINS, "--no-kernel-test"])
        .arg("--arch")
        .arg(format!("{},{FOREIGN}", host_arch()))
        .arg("--out")
        .arg(out)
        .current_dir(src)
        .env("SOURCE_DATE_EPOCH", epoch)
        .env("DEB_MAINTAINER", deb_maintainer())
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("LD_LIBRARY_PATH");
    if let Some(t) = target {
        cmd.env("CARGO_TARGET_DIR", t);
    }
    run_ok(&mut cmd);
}

/// A release whose build fails stops at once: non-zero, naming the
/// architecture and the step, and writing no artifact, though its target
/// dir holds binaries of an earlier build that would pass every check
/// (static, of this machine, small: busybox's). Before, bash turned
/// `set -e` off inside `build_arch` (called under `||`), and the release
/// packed those under the new version and exited 0. The build is broken
/// by a compiler wrapper that fails every crate, as a broken toolchain would.
#[test]
fn a_release_whose_build_fails_ships_nothing_from_an_earlier_build() {
    let test = "a_release_whose_build_fails_ships_nothing_from_an_earlier_build";
    let work = TempDir::new("release-fails");
    let tuple = run_ok(Command::new("rustc").args(["--print", "host-tuple"]));
    let tuple = String::from_utf8_lossy(&tuple.stdout).trim().to_string();
    let target = work.path().join("target");
    let stale_dir = target.join(&tuple).join("release");
    std::fs::create_dir_all(&stale_dir).expect("mkdir");
    for name in ["loopback", "cnitool", "cni-rs-install", "cni-rs"] {
        std::fs::copy("/bin/busybox", stale_dir.join(name))
            .unwrap_or_else(|e| panic!("{test}: /bin/busybox (busybox-static): {e}"));
    }
    let broken = work.write_executable(
        "broken-rustc",
        // cargo's own questions (version, target info) are answered, as
        // cargo fetch and metadata ask them before the build; every
        // crate's compile fails.
        "#!/bin/sh\ncase \" $* \" in *\" -vV \"* | *\" --crate-name ___ \"*) exec \"$@\" ;; esac\n\
         echo 'broken on purpose' >&2\nexit 1\n",
    );
    let out = work.path().join("dist");
    let arch = host_arch();
    let run = Command::new("bash")
        .arg(workspace_root().join("scripts/release.sh"))
        .args(["--only", REPRO_BINS, "--no-kernel-test", "--arch", arch])
        .arg("--out")
        .arg(&out)
        .env("SOURCE_DATE_EPOCH", commit_time())
        .env("CARGO_TARGET_DIR", &target)
        .env("RUSTC_WRAPPER", &broken)
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run scripts/release.sh");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success(),
        "{test}: the release exited 0:\n{stderr}"
    );
    let step = format!(
        "error: the release of {arch} stops: cargo build of loopback cnitool cni-rs-install failed"
    );
    assert!(stderr.contains(&step), "{test}: {step} in\n{stderr}");
    let written: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        written.is_empty(),
        "{test}: artifacts of a failed release: {written:?}"
    );
}

#[test]
fn release_is_the_same_bytes_from_another_source_path_and_target_dir() {
    let epoch = commit_time();
    let work = TempDir::new("repro");
    // Two source trees of different names and depths, one building into
    // its own target/, the other into a target dir elsewhere.
    let a = work.path().join("a/cni-rs");
    let b = work.path().join("second/build/src-tree-b");
    copy_source_tree(&a);
    copy_source_tree(&b);
    let b_target = work.path().join("elsewhere/target-b");
    release(&a, &a.join("dist"), None, &epoch);
    release(&b, &b.join("dist"), Some(&b_target), &epoch);

    let (da, db) = (artifacts(&a.join("dist")), artifacts(&b.join("dist")));
    let arch = host_arch();
    let tgz_of = |a: &str| format!("cni-rs-linux-{a}-v{SUITE_VERSION}.tgz");
    let multicall_of = |a: &str| format!("cni-rs-multicall-linux-{a}-v{SUITE_VERSION}.tgz");
    let tgz = tgz_of(arch);
    let multicall_tgz = multicall_of(arch);
    let deb = format!("cni-rs_{SUITE_VERSION}_{arch}.deb");
    let foreign_deb = format!("cni-rs_{SUITE_VERSION}_{FOREIGN}.deb");
    let image = format!("cni-rs-image-v{SUITE_VERSION}.tar");
    let source = format!("cni-rs-v{SUITE_VERSION}-vendored.tar.gz");
    let names: Vec<&String> = da.keys().collect();
    let mut want = vec!["SHA256SUMS".to_string()];
    let artifacts = [
        tgz_of(arch),
        multicall_of(arch),
        deb.clone(),
        tgz_of(FOREIGN),
        multicall_of(FOREIGN),
        foreign_deb.clone(),
        image.clone(),
        source.clone(),
    ];
    for t in artifacts.iter().flat_map(|a| [a.clone(), sbom_name(a)]) {
        want.extend([format!("{t}.sha256"), format!("{t}.sha512"), t]);
    }
    want.sort();
    assert_eq!(names, want.iter().collect::<Vec<_>>());
    for (name, bytes) in &da {
        assert!(
            db.get(name) == Some(bytes),
            "{name} differs between the two builds"
        );
    }

    let dist = a.join("dist");
    // Checksum files in sha256sum/sha512sum format, and right.
    let sha = |tool: &str, file: &str| {
        let out = run_ok(Command::new(tool).arg(file).current_dir(&dist));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for t in artifacts.iter().flat_map(|a| [a.clone(), sbom_name(a)]) {
        let t = &t;
        assert_eq!(
            String::from_utf8_lossy(&da[&format!("{t}.sha256")]),
            sha("sha256sum", t)
        );
        assert_eq!(
            String::from_utf8_lossy(&da[&format!("{t}.sha512")]),
            sha("sha512sum", t)
        );
    }
    let sums = String::from_utf8_lossy(&da["SHA256SUMS"]).into_owned();
    let want_sums: String = artifacts
        .iter()
        .flat_map(|a| [a.clone(), sbom_name(a)])
        .map(|t| sha("sha256sum", &t))
        .collect();
    assert_eq!(sums, want_sums);
    run_ok(
        Command::new("sha256sum")
            .args(["-c", "SHA256SUMS"])
            .current_dir(&dist),
    );

    // gzip -n: no file name, no time in the header.
    for t in [&tgz, &multicall_tgz] {
        let gz = &da[t];
        assert_eq!(&gz[..3], &[0x1f, 0x8b, 8], "gzip, deflate");
        assert_eq!(gz[3] & 0x08, 0, "no FNAME");
        assert_eq!(&gz[4..8], &[0, 0, 0, 0], "no MTIME");
    }

    // Flat as upstream's: ./ and one entry per binary, sorted, root-owned,
    // 0755, dated the commit, and the license and notices, 0644.
    let listing = run_ok(
        Command::new("tar")
            .args(["--numeric-owner", "--full-time", "-tvzf", &tgz])
            .env("TZ", "UTC")
            .current_dir(&dist),
    );
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let date = run_ok(Command::new("date").args(["-u", "-d", &format!("@{epoch}"), "+%F %T"]));
    let date = String::from_utf8_lossy(&date.stdout).trim().to_string();
    let mut want_names = vec!["./".to_string()];
    let mut bins: Vec<&str> = REPRO_BINS.split(',').collect();
    bins.sort();
    want_names.extend(bins.iter().map(|b| format!("./{b}")));
    want_names.extend(["./LICENSE".to_string(), "./THIRD-PARTY-NOTICES".to_string()]);
    want_names.sort();
    let mut got_names = Vec::new();
    for line in listing.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[1], "0/0", "{line}");
        assert_eq!(format!("{} {}", f[3], f[4]), date, "{line}");
        let want_mode = if f[5] == "./" {
            "drwxr-xr-x"
        } else if ["./LICENSE", "./THIRD-PARTY-NOTICES"].contains(&f[5]) {
            "-rw-r--r--"
        } else {
            "-rwxr-xr-x"
        };
        assert_eq!(f[0], want_mode, "{line}");
        got_names.push(f[5].to_string());
    }
    assert_eq!(got_names, want_names);

    // The binaries in it are the suite's, at this version.
    let x = work.path().join("x");
    std::fs::create_dir_all(&x).expect("mkdir");
    run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(dist.join(&tgz))
            .arg("-C")
            .arg(&x),
    );
    for b in &bins {
        assert_eq!(dynamic_needs(&x.join(b)), DynamicNeeds::NONE, "{tgz}: {b}");
        assert!(!links_nss(&x.join(b)), "{tgz}: {b} links glibc's NSS");
        let out = run_ok(Command::new(x.join(b)).arg("--version"));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{b} {PLUGIN_VERSION}\n")
        );
    }

    // The multicall tarball: the binary, built with the one plugin named,
    // and a link to it for that plugin; the link is the plugin.
    let listing = run_ok(
        Command::new("tar")
            .args(["--numeric-owner", "--full-time", "-tvzf", &multicall_tgz])
            .env("TZ", "UTC")
            .current_dir(&dist),
    );
    let entries: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f[1], "0/0", "{line}");
            assert_eq!(format!("{} {}", f[3], f[4]), date, "{line}");
            format!("{} {}", f[0], f[5..].join(" "))
        })
        .collect();
    assert_eq!(
        entries,
        [
            "drwxr-xr-x ./",
            "-rw-r--r-- ./LICENSE",
            "-rw-r--r-- ./THIRD-PARTY-NOTICES",
            "-rwxr-xr-x ./cni-rs",
            "drwxr-xr-x ./deploy/",
            "-rw-r--r-- ./deploy/cni-rs-gc.service",
            "-rw-r--r-- ./deploy/cni-rs-gc.timer",
            "-rw-r--r-- ./deploy/cni-rs.yaml",
            "lrwxrwxrwx ./loopback -> cni-rs"
        ]
    );
    let m = work.path().join("m");
    std::fs::create_dir_all(&m).expect("mkdir");
    run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(dist.join(&multicall_tgz))
            .arg("-C")
            .arg(&m),
    );
    for (args, want) in [
        (&["--version"][..], format!("cni-rs {PLUGIN_VERSION}\n")),
        (&["--list"], "loopback\n".to_string()),
        (
            &["loopback", "--version"],
            format!("loopback {PLUGIN_VERSION}\n"),
        ),
    ] {
        let out = run_ok(Command::new(m.join("cni-rs")).args(args));
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{args:?}");
    }
    let out = run_ok(Command::new(m.join("loopback")).arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("loopback {PLUGIN_VERSION}\n")
    );
    assert_eq!(
        dynamic_needs(&m.join("cni-rs")),
        DynamicNeeds::NONE,
        "{multicall_tgz}"
    );
    assert!(
        !links_nss(&m.join("cni-rs")),
        "{multicall_tgz}: glibc's NSS"
    );

    // The package's binaries, static too.
    let d = work.path().join("d");
    run_ok(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(dist.join(&deb))
            .arg(&d),
    );
    for b in &bins {
        let p = d.join("usr/lib/cni").join(b);
        assert_eq!(dynamic_needs(&p), DynamicNeeds::NONE, "{deb}: {b}");
    }
    assert_eq!(
        dynamic_needs(&d.join("usr/sbin/cni-rs")),
        DynamicNeeds::NONE,
        "{deb}: cni-rs"
    );
    assert_eq!(
        std::fs::read(d.join("usr/share/doc/cni-rs/examples/cni-rs.yaml")).expect("the manifest"),
        std::fs::read(workspace_root().join("deploy/cni-rs.yaml")).expect("deploy/cni-rs.yaml")
    );

    // The foreign architecture's binaries: of its machine, static.
    // Each tarball apart: the multicall one's plugins are links.
    let f = work.path().join("f");
    for (t, sub) in [
        (tgz_of(FOREIGN), "bins"),
        (multicall_of(FOREIGN), "multicall"),
    ] {
        std::fs::create_dir_all(f.join(sub)).expect("mkdir");
        run_ok(
            Command::new("tar")
                .arg("-xzf")
                .arg(dist.join(&t))
                .arg("-C")
                .arg(f.join(sub)),
        );
    }
    run_ok(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(dist.join(&foreign_deb))
            .arg(f.join("deb")),
    );
    let shipped = bins.iter().map(|b| format!("bins/{b}"));
    for b in shipped.chain(["multicall/cni-rs".into(), "deb/usr/sbin/cni-rs".into()]) {
        let out = run_ok(Command::new("file").arg("-b").arg(f.join(&b)));
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.contains("MSB") && out.contains("IBM S/390") && out.contains("statically linked"),
            "{FOREIGN}: {b}: {out}"
        );
        // Its crate list embedded (cargo auditable), as on the host.
        let sections = run_ok(Command::new("readelf").arg("-SW").arg(f.join(&b)));
        assert!(
            String::from_utf8_lossy(&sections.stdout).contains(".dep-v0"),
            "{FOREIGN}: {b}: no .dep-v0 section"
        );
    }

    // lintian accepts the foreign package too (its binaries are plain
    // static executables, not static-pie).
    let problems = lintian_problems(&dist.join(&foreign_deb));
    assert!(
        problems.is_empty(),
        "{foreign_deb}:\n{}",
        problems.join("\n")
    );

    // The image: an OCI layout whose one entry, tagged with the version,
    // is an image index with a manifest per architecture, in the order
    // built: one layer of that architecture's multicall binary, its
    // links and its documents, the binary as entry point, dated the commit.
    let i = work.path().join("i");
    std::fs::create_dir_all(&i).expect("mkdir");
    run_ok(
        Command::new("tar")
            .arg("-xf")
            .arg(dist.join(&image))
            .arg("-C")
            .arg(&i),
    );
    let blob = |digest: &str| {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        i.join("blobs/sha256").join(hex)
    };
    let json = |p: PathBuf| -> Value {
        serde_json::from_slice(&std::fs::read(&p).expect("read")).expect("JSON")
    };
    let index = json(i.join("index.json"));
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "{index}");
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"], SUITE_VERSION,
        "{index}"
    );
    assert_eq!(
        manifests[0]["mediaType"], "application/vnd.oci.image.index.v1+json",
        "{index}"
    );
    let platforms = json(blob(manifests[0]["digest"].as_str().expect("digest")));
    let platforms = platforms["manifests"]
        .as_array()
        .expect("the index's manifests");
    let platform_of = |m: &Value| {
        (
            m["platform"]["os"].as_str().map(str::to_string),
            m["platform"]["architecture"].as_str().map(str::to_string),
        )
    };
    assert_eq!(
        platforms.iter().map(platform_of).collect::<Vec<_>>(),
        [arch, FOREIGN]
            .map(|a| (Some("linux".to_string()), Some(a.to_string())))
            .to_vec()
    );
    let foreign_manifest = json(blob(platforms[1]["digest"].as_str().expect("digest")));
    let foreign_config = json(blob(
        foreign_manifest["config"]["digest"]
            .as_str()
            .expect("config"),
    ));
    assert_eq!(foreign_config["architecture"], FOREIGN, "{foreign_config}");
    let manifest = json(blob(platforms[0]["digest"].as_str().expect("digest")));
    let config = json(blob(manifest["config"]["digest"].as_str().expect("config")));
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/bin/cni-rs"]),
        "{config}"
    );
    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("linux"), Some(arch))
    );
    let created = run_ok(Command::new("date").args(["-u", "-d", &format!("@{epoch}"), "+%FT%TZ"]));
    assert_eq!(
        config["created"].as_str(),
        Some(String::from_utf8_lossy(&created.stdout).trim()),
        "{config}"
    );
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    let layer = blob(layers[0]["digest"].as_str().expect("layer"));
    let listing = run_ok(
        Command::new("tar")
            .arg("-tvzf")
            .arg(&layer)
            .arg("--numeric-owner"),
    );
    let entries: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f[1], "0/0", "{line}");
            format!("{} {}", f[0], f[5..].join(" "))
        })
        .collect();
    assert_eq!(
        entries,
        [
            "drwxr-xr-x ./",
            "drwxr-xr-x ./bin/",
            "-rwxr-xr-x ./bin/cni-rs",
            "lrwxrwxrwx ./bin/loopback -> cni-rs",
            "drwxr-xr-x ./usr/",
            "drwxr-xr-x ./usr/share/",
            "drwxr-xr-x ./usr/share/doc/",
            "drwxr-xr-x ./usr/share/doc/cni-rs/",
            "-rw-r--r-- ./usr/share/doc/cni-rs/LICENSE",
            "-rw-r--r-- ./usr/share/doc/cni-rs/THIRD-PARTY-NOTICES",
            "-rw-r--r-- ./usr/share/doc/cni-rs/cni-rs.spdx.json"
        ]
    );
    let l = work.path().join("l");
    std::fs::create_dir_all(&l).expect("mkdir");
    run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(&layer)
            .arg("-C")
            .arg(&l),
    );
    assert_eq!(
        std::fs::read(l.join("bin/cni-rs")).expect("read"),
        std::fs::read(m.join("cni-rs")).expect("read"),
        "the image's binary is the multicall tarball's"
    );
}

// ---- the Debian package -------------------------------------------------

/// The dhcp daemon's units as the tree has them (the package ships them
/// from there): name -> bytes, empty when the tree has none.
fn dhcp_units() -> BTreeMap<String, Vec<u8>> {
    ["cni-dhcp.service", "cni-dhcp.socket"]
        .iter()
        .filter_map(|u| {
            let p = workspace_root().join("plugins/dhcp/systemd").join(u);
            std::fs::read(p).ok().map(|b| (u.to_string(), b))
        })
        .collect()
}

/// Every file under `dir` with its bytes (a symlink as `-> target`).
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).expect("prefix").display().to_string();
            let meta = std::fs::symlink_metadata(&p).expect("lstat");
            if meta.file_type().is_symlink() {
                let t = std::fs::read_link(&p).expect("readlink");
                out.insert(rel, format!("-> {}", t.display()).into_bytes());
            } else if meta.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(base, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn sh(script: &str) -> PluginOutput {
    let out = Command::new("sh")
        .args(["-c", script])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .expect("sh");
    PluginOutput {
        exit_code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn sh_ok(script: &str) -> String {
    let out = sh(script);
    assert_eq!(out.exit_code, 0, "{script}: {out:?}");
    out.stdout
}

fn status_of(pkg: &str) -> String {
    sh(&format!("dpkg-query -W -f='${{Status}}' {pkg} 2>&1"))
        .stdout
        .trim()
        .to_string()
}

/// Names of our unit files (or links) anywhere under /etc/systemd/system.
fn enabled_units() -> Vec<String> {
    sh_ok("find /etc/systemd/system -name 'cni-dhcp*' -o -name 'cni-rs-gc*' 2>/dev/null | sort")
        .lines()
        .map(String::from)
        .collect()
}

/// apt-get without the archive's package lists (the VM has no network, and
/// parsing the lists of all Debian in an emulated CPU takes longer than the
/// rest of the test): removal and purge need only dpkg's status.
const APT_GET: &str = "mkdir -p /tmp/no-lists/partial && apt-get \
    -o Dir::State::Lists=/tmp/no-lists -o Dir::Etc::SourceList=/dev/null \
    -o Dir::Etc::SourceParts=/tmp/no-lists -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=";

const PACKAGE_TEST: &str =
    "the_package_replaces_go_plugins_and_goes_on_remove_and_purge_keeping_node_state";

/// The release's package (scripts/test.sh's release step: `CNI_TEST_DIST`;
/// elsewhere the test says so and stops), installed with `dpkg -i` over
/// Debian's containernetworking-plugins, linked into /opt/cni/bin,
/// reinstalled, removed and purged with apt-get, all inside the VM. Its
/// binaries are compared with the release tarball's.
#[test]
fn the_package_replaces_go_plugins_and_goes_on_remove_and_purge_keeping_node_state() {
    if in_vm() {
        return package_in_vm();
    }
    if !require_root(PACKAGE_TEST) {
        return;
    }
    let Some(dist) = release_dist() else {
        return;
    };
    let Some(runner) = fullkernel_runner() else {
        return;
    };
    let work = TempDir::new("deb");
    let stage = work.path().join("bins");
    std::fs::create_dir_all(&stage).expect("mkdir");
    let arch = host_arch();
    run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(dist.join(format!("cni-rs-linux-{arch}-v{SUITE_VERSION}.tgz")))
            .arg("-C")
            .arg(&stage),
    );
    // The binaries only: the package has the license and notices elsewhere.
    for doc in ["LICENSE", "THIRD-PARTY-NOTICES"] {
        std::fs::remove_file(stage.join(doc)).expect("a document of the tarball");
    }
    let deb = dist
        .join(format!("cni-rs_{SUITE_VERSION}_{arch}.deb"))
        .display()
        .to_string();
    assert!(Path::new(&deb).is_file(), "{deb}");
    let stage_s = stage.display().to_string();
    let out = rerun_in_vm(
        &runner,
        module_path!(),
        PACKAGE_TEST,
        &[("CNIT_DEB", &deb), ("CNIT_STAGE", &stage_s)],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("package checks done in the VM"),
        "in the VM: {:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

fn package_in_vm() {
    let t0 = std::time::Instant::now();
    let phase = |what: &str| println!("[{:>6.1} s] {what}", t0.elapsed().as_secs_f64());
    let deb = std::env::var("CNIT_DEB").expect("CNIT_DEB");
    let stage = PathBuf::from(std::env::var("CNIT_STAGE").expect("CNIT_STAGE"));
    let ours: Vec<String> = std::fs::read_dir(&stage)
        .expect("stage")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    let units = dhcp_units();
    let lib = Path::new("/usr/lib/cni");
    let opt = Path::new("/opt/cni/bin");
    // The guest's root is the host's, read through: the host's live CNI
    // state (a lease another run writes meanwhile) must not show here.
    // The node's CNI dirs are the guest's own, empty.
    for dir in ["/var/lib/cni", "/run/cni", "/opt/cni", "/etc/cni"] {
        sh_ok(&format!(
            "mkdir -p {dir} && mount -t tmpfs cnit-node-state {dir}"
        ));
    }

    // The node as a Debian node with the Go plugins and some state.
    assert_eq!(
        status_of("containernetworking-plugins"),
        "install ok installed"
    );
    let go_files = sh_ok("dpkg -L containernetworking-plugins");
    assert!(
        go_files.lines().any(|l| l == "/usr/lib/cni/bridge"),
        "{go_files}"
    );
    assert!(enabled_units().is_empty(), "{:?}", enabled_units());
    let state = Path::new("/var/lib/cni");
    for (file, text) in [
        ("networks/cbr0/10.244.0.7", "c0ffee\r\neth0"),
        ("networks/cbr0/last_reserved_ip.0", "10.244.0.7"),
        ("results/cbr0-c0ffee-eth0", "{\"kind\":\"cniCacheV1\"}"),
        ("flannel/c0ffee", "{\"type\":\"bridge\"}"),
    ] {
        let p = state.join(file);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write state");
    }
    let state_before = contents(state);
    std::fs::create_dir_all(opt).expect("mkdir /opt/cni/bin");
    std::fs::write(opt.join("calico"), "foreign plugin").expect("write");
    std::fs::set_permissions(opt.join("calico"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");

    phase("dpkg -i");
    // dpkg -i: the Go package is removed in favour of ours, no file shared.
    let out = sh(&format!("dpkg -i {deb} 2>&1"));
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(
        out.stdout
            .contains("will remove containernetworking-plugins in favour of cni-rs"),
        "{}",
        out.stdout
    );
    assert_eq!(status_of("cni-rs"), "install ok installed");
    assert!(
        !status_of("containernetworking-plugins").ends_with(" installed"),
        "{}",
        status_of("containernetworking-plugins")
    );
    let mut in_lib: Vec<String> = std::fs::read_dir(lib)
        .expect("/usr/lib/cni")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    in_lib.sort();
    let mut want = ours.clone();
    want.sort();
    assert_eq!(in_lib, want, "/usr/lib/cni holds ours and nothing of Go's");
    for n in &ours {
        let p = lib.join(n);
        assert_eq!(
            std::fs::read(&p).expect("read"),
            std::fs::read(stage.join(n)).expect("read"),
            "{n}"
        );
        assert_eq!(mode_of(&p), 0o755, "{n}");
        let v = sh_ok(&format!("{} --version", p.display()));
        assert_eq!(v, format!("{n} {PLUGIN_VERSION}\n"));
    }
    // dpkg's record of who owns what (what dpkg -S reads).
    let listed = std::fs::read_to_string("/var/lib/dpkg/info/cni-rs.list").expect("cni-rs.list");
    for n in &ours {
        assert!(
            listed.lines().any(|l| l == format!("/usr/lib/cni/{n}")),
            "{n}: {listed}"
        );
    }
    let go_listed = std::fs::read_to_string("/var/lib/dpkg/info/containernetworking-plugins.list")
        .unwrap_or_default();
    let go_owns: Vec<&str> = go_listed
        .lines()
        .filter(|l| l.starts_with("/usr/lib/cni/") || l.contains("cni-dhcp"))
        .collect();
    assert!(go_owns.is_empty(), "the Go package owns {go_owns:?}");
    assert_eq!(
        sh_ok("/usr/bin/cnitool --version"),
        format!("cnitool {PLUGIN_VERSION}\n")
    );
    assert_eq!(
        sh_ok("/usr/sbin/cni-rs-install --version"),
        format!("cni-rs-install {PLUGIN_VERSION}\n")
    );
    for u in ["cni-dhcp.service", "cni-dhcp.socket"] {
        let p = Path::new("/lib/systemd/system").join(u);
        match units.get(u) {
            // Ours (the dhcp plugin's), not Go's, and not enabled.
            Some(bytes) => assert_eq!(&std::fs::read(&p).expect("unit"), bytes, "{u}"),
            None => assert!(!p.exists(), "{u}: Go's went with its package, we ship none"),
        }
    }
    // The node command and its gc units, disabled.
    assert_eq!(
        sh_ok("/usr/sbin/cni-rs --version"),
        format!("cni-rs {PLUGIN_VERSION}\n")
    );
    let service = std::fs::read_to_string("/lib/systemd/system/cni-rs-gc.service").expect("unit");
    assert!(
        service.contains("\nExecStart=/usr/sbin/cni-rs gc --apply\n"),
        "{service}"
    );
    assert_eq!(
        std::fs::read("/lib/systemd/system/cni-rs-gc.timer").expect("timer"),
        std::fs::read(workspace_root().join("operator/deploy/cni-rs-gc.timer")).expect("timer")
    );
    assert!(Path::new("/usr/share/doc/cni-rs/examples/cni-rs.yaml").is_file());
    assert!(
        enabled_units().is_empty(),
        "disabled: {:?}",
        enabled_units()
    );
    assert_eq!(contents(state), state_before, "/var/lib/cni untouched");
    assert_eq!(
        tree(opt),
        ["calico"],
        "/opt/cni/bin untouched without the links step"
    );

    phase("links step");
    // The optional links step.
    let out = sh("/usr/sbin/cni-rs-install --link /opt/cni/bin");
    assert_eq!(out.exit_code, 0, "{out:?}");
    let mut want_links: Vec<String> = ours
        .iter()
        .filter(|n| *n != "cni-rs-install")
        .map(|n| format!("{n} -> /usr/lib/cni/{n}"))
        .collect();
    want_links.push("calico".into());
    want_links.sort();
    assert_eq!(tree(opt), want_links);
    assert_eq!(
        sh_ok("/opt/cni/bin/loopback --version"),
        format!("loopback {PLUGIN_VERSION}\n")
    );

    // A reinstall (dpkg's upgrade path) keeps the links.
    let out = sh(&format!("dpkg -i {deb} 2>&1"));
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(tree(opt), want_links, "links kept over an upgrade");

    phase("apt-get remove");
    // apt-get remove: our files and links go, the rest stays.
    let out = sh(&format!("{APT_GET} remove -y cni-rs 2>&1"));
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(status_of("cni-rs"), "deinstall ok config-files");
    for n in &ours {
        assert!(!lib.join(n).exists(), "{n} removed");
    }
    for p in [
        "/usr/bin/cnitool",
        "/usr/sbin/cni-rs-install",
        "/usr/sbin/cni-rs",
        "/lib/systemd/system/cni-dhcp.socket",
        "/lib/systemd/system/cni-rs-gc.timer",
    ] {
        assert!(std::fs::symlink_metadata(p).is_err(), "{p} removed");
    }
    assert_eq!(
        tree(opt),
        ["calico"],
        "our links removed, the foreign plugin kept"
    );
    assert_eq!(contents(state), state_before, "/var/lib/cni kept on remove");

    phase("apt-get purge");
    // apt-get purge: the package is gone, the node's state is not.
    let out = sh(&format!("{APT_GET} purge -y cni-rs 2>&1"));
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(
        status_of("cni-rs").contains("no packages found"),
        "{}",
        status_of("cni-rs")
    );
    assert_eq!(contents(state), state_before, "/var/lib/cni kept on purge");
    assert_eq!(tree(opt), ["calico"]);
    phase("end");
    println!("package checks done in the VM");
}
