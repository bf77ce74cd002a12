//! What a distribution, a vulnerability scanner and a legal review check
//! in a release (issue 53): the license and source policy (deny.toml), the
//! SBOM beside each artifact and what it lists, the dependency list every
//! binary embeds as `cargo audit bin` reads it, the notices each artifact
//! carries, lintian on the package, the image's annotations, and the
//! source release built offline.
//!
//! All but the policy test read the release of `scripts/test.sh`'s release
//! step (`CNI_TEST_DIST`, its `dist/`); elsewhere they say so and stop.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use tests::release::*;
use tests::*;

fn host_tgz(dist: &Path) -> PathBuf {
    dist.join(format!("cni-rs-linux-{}-v{SUITE_VERSION}.tgz", host_arch()))
}
fn host_multicall_tgz(dist: &Path) -> PathBuf {
    dist.join(format!(
        "cni-rs-multicall-linux-{}-v{SUITE_VERSION}.tgz",
        host_arch()
    ))
}
fn host_deb(dist: &Path) -> PathBuf {
    dist.join(format!("cni-rs_{SUITE_VERSION}_{}.deb", host_arch()))
}

/// Unpacks a tarball into a new directory of `work`.
fn untar(work: &TempDir, tgz: &Path, name: &str) -> PathBuf {
    let dir = work.path().join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    run_ok(Command::new("tar").arg("-xf").arg(tgz).arg("-C").arg(&dir));
    dir
}

/// A crate of a dependency list: name and version.
type Crate = (String, String);

/// What cargo-auditable embedded in a binary: its `.dep-v0` section,
/// zlib-compressed JSON, read here with its own ELF reader (not the
/// release's scripts/bom.py).
fn embedded_packages(path: &Path) -> Vec<Value> {
    let data = std::fs::read(path).expect("read binary");
    assert_eq!(&data[..4], b"\x7fELF", "{}", path.display());
    let is64 = data[4] == 2;
    let little = data[5] == 1;
    let num = |at: usize, len: usize| -> u64 {
        let b = &data[at..at + len];
        let mut v = 0u64;
        for i in 0..len {
            let byte = if little { b[len - 1 - i] } else { b[i] };
            v = (v << 8) | byte as u64;
        }
        v
    };
    let (shoff, shentsize, shnum, shstrndx) = if is64 {
        (num(0x28, 8), num(0x3A, 2), num(0x3C, 2), num(0x3E, 2))
    } else {
        (num(0x20, 4), num(0x2E, 2), num(0x30, 2), num(0x32, 2))
    };
    let section = |i: u64| -> (u64, u64, u64) {
        let at = (shoff + i * shentsize) as usize;
        if is64 {
            (num(at, 4), num(at + 0x18, 8), num(at + 0x20, 8))
        } else {
            (num(at, 4), num(at + 0x10, 4), num(at + 0x14, 4))
        }
    };
    let (_, names, _) = section(shstrndx);
    let found = (0..shnum).find_map(|i| {
        let (name, off, size) = section(i);
        let start = (names + name) as usize;
        let end = start + data[start..].iter().position(|b| *b == 0)?;
        (&data[start..end] == b".dep-v0")
            .then(|| data[off as usize..(off + size) as usize].to_vec())
    });
    let compressed = found.unwrap_or_else(|| panic!("{}: no .dep-v0 section", path.display()));
    let mut inflate = Command::new("python3")
        .args([
            "-c",
            "import sys, zlib; sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    inflate
        .stdin
        .take()
        .expect("stdin")
        .write_all(&compressed)
        .expect("write");
    let out = inflate.wait_with_output().expect("python3");
    assert!(out.status.success());
    let tree: Value = serde_json::from_slice(&out.stdout).expect("dep-v0 JSON");
    tree["packages"].as_array().expect("packages").clone()
}

fn embedded_crates(path: &Path) -> BTreeSet<Crate> {
    embedded_packages(path)
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("name").to_string(),
                p["version"].as_str().expect("version").to_string(),
            )
        })
        .collect()
}

/// What `cargo tree` says a package links on this machine's target:
/// normal dependencies, proc-macros (and what only they use) left out.
fn cargo_tree_links(args: &[&str]) -> BTreeSet<Crate> {
    let tuple = run_ok(Command::new("rustc").args(["--print", "host-tuple"]));
    let tuple = String::from_utf8_lossy(&tuple.stdout).trim().to_string();
    let out = run_ok(
        Command::new("cargo")
            .current_dir(workspace_root())
            .args([
                "tree",
                "--locked",
                "-e",
                "normal,no-proc-macro",
                "--prefix",
                "none",
            ])
            .args(["--format", "{p}", "--target", &tuple])
            .args(args),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next().expect("name").to_string();
            let version = f
                .next()
                .expect("version")
                .trim_start_matches('v')
                .to_string();
            (name, version)
        })
        .collect()
}

/// The SBOM's crates (name, version) and, per binary it holds, the crates
/// the binary links (its STATIC_LINK relationships).
struct Sbom {
    doc: Value,
    crates: BTreeSet<Crate>,
    links: BTreeMap<String, BTreeSet<Crate>>,
}

fn read_sbom(path: &Path) -> Sbom {
    let doc: Value =
        serde_json::from_slice(&std::fs::read(path).expect("read SBOM")).expect("SBOM JSON");
    let mut by_id = BTreeMap::new();
    let mut crates = BTreeSet::new();
    let mut binaries = BTreeMap::new();
    for p in doc["packages"].as_array().expect("packages") {
        let id = p["SPDXID"].as_str().expect("SPDXID").to_string();
        let name = p["name"].as_str().expect("name").to_string();
        if id.starts_with("SPDXRef-Crate-") {
            let c = (
                name,
                p["versionInfo"].as_str().expect("version").to_string(),
            );
            crates.insert(c.clone());
            by_id.insert(id, c);
        } else if id.starts_with("SPDXRef-Binary-") {
            binaries.insert(id, name);
        }
    }
    let mut links: BTreeMap<String, BTreeSet<Crate>> = binaries
        .values()
        .map(|b| (b.clone(), BTreeSet::new()))
        .collect();
    for r in doc["relationships"].as_array().expect("relationships") {
        if r["relationshipType"] == "STATIC_LINK" {
            let bin = &binaries[r["spdxElementId"].as_str().expect("element")];
            let c = &by_id[r["relatedSpdxElement"].as_str().expect("related")];
            links.get_mut(bin).expect("binary").insert(c.clone());
        }
    }
    Sbom { doc, crates, links }
}

fn sbom_of(dist: &Path, artifact: &Path) -> PathBuf {
    dist.join(sbom_name(
        &artifact.file_name().expect("name").to_string_lossy(),
    ))
}

/// The artifacts of the release: every file SHA256SUMS names that is not
/// an SBOM.
fn artifacts(dist: &Path) -> Vec<PathBuf> {
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).expect("SHA256SUMS");
    sums.lines()
        .map(|l| l.split_whitespace().nth(1).expect("name"))
        .filter(|n| !n.ends_with(".spdx.json"))
        .map(|n| dist.join(n))
        .collect()
}

/// deny.toml is a policy that can fail: a crate under a license outside
/// it, or from a git source, fails `cargo deny check`, and the same
/// workspace under an allowed license from crates.io or a path passes.
#[test]
fn the_policy_refuses_a_license_outside_it_and_a_source_outside_crates_io() {
    let test = "the_policy_refuses_a_license_outside_it_and_a_source_outside_crates_io";
    let work = TempDir::new("deny");
    // A crate in a git repository of its own, as a git dependency would be.
    let lib = work.path().join("gitdep");
    std::fs::create_dir_all(lib.join("src")).expect("mkdir");
    std::fs::write(
        lib.join("Cargo.toml"),
        "[package]\nname = \"gitdep\"\nversion = \"0.1.0\"\nedition = \"2021\"\nlicense = \"MIT\"\n",
    )
    .expect("write");
    std::fs::write(lib.join("src/lib.rs"), "").expect("write");
    for args in [
        &["init", "-q"][..],
        &["add", "."],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@localhost",
            "commit",
            "-qm",
            "x",
        ],
    ] {
        run_ok(Command::new("git").current_dir(&lib).args(args));
    }
    let scratch = |name: &str, license: &str, dep: &str| -> PathBuf {
        let root = work.path().join(name);
        std::fs::create_dir_all(root.join("src")).expect("mkdir");
        std::fs::copy(workspace_root().join("deny.toml"), root.join("deny.toml"))
            .expect("deny.toml");
        std::fs::write(
            root.join("Cargo.toml"),
            format!(
                "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
                 license = \"{license}\"\npublish = false\n[dependencies]\n{dep}\n[workspace]\n"
            ),
        )
        .expect("write");
        std::fs::write(root.join("src/lib.rs"), "").expect("write");
        run_ok(
            Command::new("cargo")
                .current_dir(&root)
                .arg("generate-lockfile"),
        );
        root
    };
    let deny = |root: &Path, check: &str| {
        Command::new("cargo")
            .current_dir(root)
            .args(["deny", "--offline", "check", check])
            .output()
            .unwrap_or_else(|e| panic!("{test}: cargo deny (scripts/deps.sh installs it): {e}"))
    };
    let path_dep = format!("gitdep = {{ path = \"{}\" }}", lib.display());
    let git_dep = format!("gitdep = {{ git = \"file://{}\" }}", lib.display());

    let good = scratch("allowed", "Apache-2.0", &path_dep);
    for check in ["licenses", "sources"] {
        let out = deny(&good, check);
        assert!(
            out.status.success(),
            "{test}: {check} of an allowed crate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let gpl = scratch("copyleft", "GPL-3.0-only", &path_dep);
    let out = deny(&gpl, "licenses");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{test}: GPL-3.0-only passed: {err}");
    assert!(err.contains("GPL-3.0-only"), "{test}: {err}");
    let git = scratch("fromgit", "Apache-2.0", &git_dep);
    let out = deny(&git, "sources");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{test}: a git source passed: {err}");
    assert!(err.contains("gitdep"), "{test}: {err}");
}

/// Every artifact has its SBOM beside it, with checksums, and each is
/// valid SPDX 2.3 (spdx-tools) with NTIA's minimum elements
/// (ntia-conformance-checker), describing the artifact by its checksum.
#[test]
fn every_artifact_has_a_valid_sbom_beside_it() {
    let test = "every_artifact_has_a_valid_sbom_beside_it";
    let Some(dist) = release_dist() else { return };
    let artifacts = artifacts(&dist);
    assert!(artifacts.len() >= 5, "{test}: {artifacts:?}");
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).expect("SHA256SUMS");
    for artifact in &artifacts {
        let sbom = sbom_of(&dist, artifact);
        let name = sbom
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(
            sums.contains(&format!("  {name}\n")),
            "{test}: {name} in SHA256SUMS"
        );
        for ext in ["sha256", "sha512"] {
            let tool = format!("{ext}sum");
            run_ok(
                Command::new(&tool)
                    .args(["-c", &format!("{name}.{ext}")])
                    .current_dir(&dist),
            );
        }
        run_ok(Command::new("pyspdxtools").arg("-i").arg(&sbom));
        let out = run_ok(
            Command::new("ntia-checker")
                .args(["--output", "json"])
                .arg(&sbom),
        );
        let verdict: Value = serde_json::from_slice(&out.stdout).expect("ntia-checker JSON");
        assert_eq!(
            verdict["isNtiaConformant"], true,
            "{test}: {name}: {verdict:#}"
        );
        let doc = read_sbom(&sbom).doc;
        let described = &doc["packages"][0];
        assert_eq!(described["SPDXID"], "SPDXRef-Artifact");
        let sha = run_ok(Command::new("sha256sum").arg(artifact));
        let sha = String::from_utf8_lossy(&sha.stdout);
        assert_eq!(
            described["checksums"][0]["checksumValue"].as_str(),
            sha.split_whitespace().next(),
            "{test}: {name} describes {}",
            artifact.display()
        );
    }
}

/// Each SBOM lists the crates its binaries link, at the versions they
/// embed: per binary, the SBOM's STATIC_LINK set is the binary's embedded
/// list less build-only crates and what only proc-macros use, which
/// `cargo tree` names independently for the multicall binary.
#[test]
fn each_sbom_lists_the_crate_versions_its_binaries_embed() {
    let test = "each_sbom_lists_the_crate_versions_its_binaries_embed";
    let Some(dist) = release_dist() else { return };
    let work = TempDir::new("sbom-crates");
    // What any shipped binary may link: the workspace's normal
    // dependency closure, proc-macros left out (cargo tree's view).
    let linkable = cargo_tree_links(&[
        "--workspace",
        "--exclude",
        "tests",
        "--exclude",
        "cri-client",
        "--exclude",
        "bench",
        "--exclude",
        "manpages",
    ]);
    // The multicall binary is built with the features of the plugins it
    // lists, and the node commands when it has them.
    let multicall_links = |binary: &Path| {
        let list = run_ok(Command::new(binary).arg("--list"));
        let mut features: Vec<String> = String::from_utf8_lossy(&list.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        if embedded_crates(binary)
            .iter()
            .any(|(n, _)| n == "cni-rs-operator")
        {
            features.push("node-commands".to_string());
        }
        cargo_tree_links(&[
            "-p",
            "cni-rs",
            "--no-default-features",
            "--features",
            &features.join(","),
        ])
    };
    for (tgz, dir) in [
        (host_tgz(&dist), "bins"),
        (host_multicall_tgz(&dist), "multicall"),
    ] {
        let unpacked = untar(&work, &tgz, dir);
        let sbom = read_sbom(&sbom_of(&dist, &tgz));
        assert!(
            !sbom.links.is_empty(),
            "{test}: no binary in {}",
            tgz.display()
        );
        let mut union = BTreeSet::new();
        for (member, listed) in &sbom.links {
            let binary = unpacked.join(member.trim_start_matches("./"));
            let embedded = embedded_crates(&binary);
            let want: BTreeSet<Crate> = embedded.intersection(&linkable).cloned().collect();
            assert_eq!(listed, &want, "{test}: {member} of {}", tgz.display());
            if member == "./cni-rs" {
                assert_eq!(
                    listed,
                    &multicall_links(&binary),
                    "{test}: cni-rs against cargo tree"
                );
            }
            union.extend(listed.iter().cloned());
        }
        assert_eq!(
            sbom.crates,
            union,
            "{test}: the crates of {}",
            tgz.display()
        );
    }
    // The package holds both forms: its SBOM lists both tarballs' crates.
    let deb = read_sbom(&sbom_of(&dist, &host_deb(&dist)));
    let mut both = read_sbom(&sbom_of(&dist, &host_tgz(&dist))).crates;
    both.extend(read_sbom(&sbom_of(&dist, &host_multicall_tgz(&dist))).crates);
    assert_eq!(deb.crates, both, "{test}: the package's crates");
    // The source release: every crate of Cargo.lock.
    let source = read_sbom(&dist.join(format!("cni-rs-v{SUITE_VERSION}-vendored.spdx.json")));
    let lock = std::fs::read_to_string(workspace_root().join("Cargo.lock")).expect("Cargo.lock");
    let locked = lock.matches("[[package]]").count();
    assert_eq!(
        source.crates.len(),
        locked,
        "{test}: the source release's crates"
    );
}

/// A local advisory database in RustSec's format marks one crate version
/// we ship as vulnerable (regex-lite, linked by tuning and the multicall
/// binary only): `cargo audit bin` reports exactly that crate, in exactly
/// the binaries that link it, and passes every binary against the same
/// database without the advisory. Nothing is fetched.
#[test]
fn cargo_audit_bin_reports_exactly_the_crate_an_advisory_marks() {
    let test = "cargo_audit_bin_reports_exactly_the_crate_an_advisory_marks";
    let Some(dist) = release_dist() else { return };
    let work = TempDir::new("audit");
    let bins = untar(&work, &host_tgz(&dist), "bins");
    let multicall = untar(&work, &host_multicall_tgz(&dist), "multicall");
    // Every program of the tarball (not LICENSE, not the notices), and
    // the multicall binary.
    let mut binaries: Vec<PathBuf> = std::fs::read_dir(&bins)
        .expect("read tarball")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .collect();
    binaries.sort();
    assert!(binaries.len() >= 3, "{test}: {binaries:?}");
    binaries.push(multicall.join("cni-rs"));
    let fixture = workspace_root().join("tests/fixtures/advisory-db");
    let marked = ("regex-lite", "0.1");
    let db = |name: &str, with_advisory: bool| -> PathBuf {
        let db = work.path().join(name);
        run_ok(Command::new("cp").arg("-r").arg(&fixture).arg(&db));
        if !with_advisory {
            std::fs::remove_dir_all(db.join("crates").join(marked.0)).expect("rm advisory");
        }
        db
    };
    let audit = |db: &Path, binary: &Path| {
        Command::new("cargo")
            .args(["audit", "--no-fetch", "--stale", "--json", "--db"])
            .arg(db)
            .arg("bin")
            .arg(binary)
            .output()
            .unwrap_or_else(|e| panic!("{test}: cargo audit (scripts/deps.sh installs it): {e}"))
    };
    let with = db("with", true);
    let without = db("without", false);
    let mut reported = Vec::new();
    for binary in &binaries {
        let name = binary
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let links_it = embedded_crates(binary)
            .iter()
            .any(|(n, v)| n == marked.0 && v.starts_with(marked.1));
        let out = audit(&with, binary);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{test}: {name}: {e}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let found: Vec<String> = report["vulnerabilities"]["list"]
            .as_array()
            .expect("list")
            .iter()
            .map(|v| {
                format!(
                    "{} {}",
                    v["package"]["name"].as_str().unwrap_or(""),
                    v["advisory"]["id"].as_str().unwrap_or("")
                )
            })
            .collect();
        if links_it {
            assert!(
                !out.status.success(),
                "{test}: {name}: exit 0 with a vulnerable crate"
            );
            assert_eq!(
                found,
                vec![format!("{} RUSTSEC-2026-9901", marked.0)],
                "{test}: {name}"
            );
            reported.push(name.clone());
        } else {
            assert!(out.status.success(), "{test}: {name}: {found:?}");
            assert!(found.is_empty(), "{test}: {name}: {found:?}");
        }
        let clean = audit(&without, binary);
        assert!(
            clean.status.success(),
            "{test}: {name} against the database without the advisory: {}",
            String::from_utf8_lossy(&clean.stdout)
        );
    }
    reported.sort();
    assert_eq!(
        reported,
        ["cni-rs", "tuning"],
        "{test}: the binaries that link {}",
        marked.0
    );
}

/// Each tarball, the package and every platform of the image carry the
/// project's LICENSE and the notices of exactly the crates their binaries
/// link (the SBOM's third-party crates, each named with its license).
#[test]
fn every_artifact_carries_the_license_and_the_notices_of_what_it_links() {
    let test = "every_artifact_carries_the_license_and_the_notices_of_what_it_links";
    let Some(dist) = release_dist() else { return };
    let work = TempDir::new("notices");
    let license = std::fs::read(workspace_root().join("LICENSE")).expect("LICENSE");
    let ours: BTreeSet<String> = suite_crates();
    // The list at the top, before the first license text.
    let listed_in = |notices: &str| -> BTreeSet<Crate> {
        notices
            .lines()
            .take_while(|l| !l.starts_with("====="))
            .filter_map(|l| l.strip_prefix("  "))
            .filter_map(|l| l.split_once(": "))
            .map(|(c, _)| {
                let (n, v) = c.split_once(' ').expect("name version");
                (n.to_string(), v.to_string())
            })
            .collect()
    };
    let third_party = |sbom: &Sbom| -> BTreeSet<Crate> {
        sbom.crates
            .iter()
            .filter(|(n, _)| !ours.contains(n))
            .cloned()
            .collect()
    };
    for (tgz, dir) in [
        (host_tgz(&dist), "bins"),
        (host_multicall_tgz(&dist), "multicall"),
    ] {
        let unpacked = untar(&work, &tgz, dir);
        assert_eq!(
            std::fs::read(unpacked.join("LICENSE")).expect("LICENSE"),
            license
        );
        let notices =
            std::fs::read_to_string(unpacked.join("THIRD-PARTY-NOTICES")).expect("notices");
        let sbom = read_sbom(&sbom_of(&dist, &tgz));
        assert_eq!(
            listed_in(&notices),
            third_party(&sbom),
            "{test}: {}",
            tgz.display()
        );
        // Each license a crate is used under has its text, headed by its id.
        let used: BTreeSet<&str> = notices
            .lines()
            .take_while(|l| !l.starts_with("====="))
            .filter_map(|l| l.strip_prefix("  ")?.split_once(": "))
            .flat_map(|(_, license)| license.split(" AND "))
            .collect();
        assert!(used.contains("MIT"), "{test}: {used:?}");
        for license in used {
            assert!(
                notices.contains(&format!("({license})\nUsed by: ")),
                "{test}: the text of {license}"
            );
        }
    }
    // The package: /usr/share/doc/cni-rs.
    let root = work.path().join("deb");
    run_ok(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(host_deb(&dist))
            .arg(&root),
    );
    let doc = root.join("usr/share/doc/cni-rs");
    let notices = run_ok(Command::new("zcat").arg(doc.join("THIRD-PARTY-NOTICES.gz")));
    let sbom = read_sbom(&sbom_of(&dist, &host_deb(&dist)));
    assert_eq!(
        listed_in(&String::from_utf8_lossy(&notices.stdout)),
        third_party(&sbom),
        "{test}: the package's notices"
    );
    let copyright = std::fs::read_to_string(doc.join("copyright")).expect("copyright");
    for (name, version) in third_party(&sbom) {
        assert!(
            copyright.contains(&format!("Files: vendor/{name}-{version}/*\n")),
            "{test}: {name} {version} in the copyright file"
        );
    }
    assert!(!copyright.contains("cni-rs@invalid"));
    // The image: each platform's layer.
    let image = Image::unpack(&work, &dist);
    for m in image.index["manifests"].as_array().expect("manifests") {
        let manifest = image.json(&m["digest"]);
        let layer = image.blob(&manifest["layers"][0]["digest"]);
        let root = work.path().join(format!(
            "layer-{}",
            m["platform"]["architecture"].as_str().expect("arch")
        ));
        std::fs::create_dir_all(&root).expect("mkdir");
        run_ok(
            Command::new("tar")
                .arg("-xzf")
                .arg(&layer)
                .arg("-C")
                .arg(&root),
        );
        let doc = root.join("usr/share/doc/cni-rs");
        assert_eq!(
            std::fs::read(doc.join("LICENSE")).expect("LICENSE"),
            license
        );
        let sbom = read_sbom(&doc.join("cni-rs.spdx.json"));
        let binary = root.join("bin/cni-rs");
        assert_eq!(
            sbom.links["/bin/cni-rs"],
            embedded_crates(&binary)
                .intersection(&sbom.crates)
                .cloned()
                .collect(),
            "{test}: the image's SBOM of its binary"
        );
        let notices = std::fs::read_to_string(doc.join("THIRD-PARTY-NOTICES")).expect("notices");
        assert_eq!(
            listed_in(&notices),
            third_party(&sbom),
            "{test}: the image's notices"
        );
    }
}

/// The release's image archive, unpacked: its OCI layout and the image
/// index its one tag names.
struct Image {
    layout: PathBuf,
    index: Value,
}

impl Image {
    fn unpack(work: &TempDir, dist: &Path) -> Image {
        let archive = dist.join(format!("cni-rs-image-v{SUITE_VERSION}.tar"));
        let layout = untar(work, &archive, "image");
        let top: Value =
            serde_json::from_slice(&std::fs::read(layout.join("index.json")).expect("index.json"))
                .expect("JSON");
        let mut image = Image {
            layout,
            index: Value::Null,
        };
        image.index = image.json(&top["manifests"][0]["digest"]);
        image
    }

    /// The blob of a descriptor's digest (`"sha256:..."`).
    fn blob(&self, digest: &Value) -> PathBuf {
        let digest = digest.as_str().expect("a digest");
        self.layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    }

    fn json(&self, digest: &Value) -> Value {
        serde_json::from_slice(&std::fs::read(self.blob(digest)).expect("blob")).expect("JSON")
    }
}

/// The names of the workspace's own crates.
fn suite_crates() -> BTreeSet<String> {
    let out = run_ok(Command::new("cargo").current_dir(workspace_root()).args([
        "metadata",
        "--no-deps",
        "--format-version",
        "1",
        "--locked",
    ]));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata");
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect()
}

/// The image index and each manifest carry the standard OCI annotations,
/// `created` being the release's SOURCE_DATE_EPOCH.
#[test]
fn the_image_carries_the_oci_annotations() {
    let test = "the_image_carries_the_oci_annotations";
    let Some(dist) = release_dist() else { return };
    let work = TempDir::new("annotations");
    let image = Image::unpack(&work, &dist);
    let index = &image.index;
    let epoch = commit_time();
    let date = run_ok(Command::new("date").args([
        "-u",
        "-d",
        &format!("@{epoch}"),
        "+%Y-%m-%dT%H:%M:%SZ",
    ]));
    let created = String::from_utf8_lossy(&date.stdout).trim().to_string();
    let revision = run_ok(
        Command::new("git")
            .current_dir(workspace_root())
            .args(["rev-parse", "HEAD"]),
    );
    let revision = String::from_utf8_lossy(&revision.stdout).trim().to_string();
    let mut annotated = vec![("index".to_string(), index["annotations"].clone())];
    for m in index["manifests"].as_array().expect("manifests") {
        let manifest = image.json(&m["digest"]);
        annotated.push((m["platform"].to_string(), manifest["annotations"].clone()));
    }
    for (what, a) in annotated {
        let get = |k: &str| {
            a[format!("org.opencontainers.image.{k}")]
                .as_str()
                .map(str::to_string)
        };
        assert_eq!(
            get("version").as_deref(),
            Some(SUITE_VERSION),
            "{test}: {what}: {a}"
        );
        assert_eq!(
            get("licenses").as_deref(),
            Some("Apache-2.0"),
            "{test}: {what}"
        );
        assert_eq!(get("created"), Some(created.clone()), "{test}: {what}");
        assert_eq!(get("revision"), Some(revision.clone()), "{test}: {what}");
        assert_eq!(get("title").as_deref(), Some("cni-rs"), "{test}: {what}");
    }
}

/// lintian accepts the package: no error, and no warning but those
/// docs/install.md lists with their reason.
#[test]
fn lintian_finds_no_error_and_only_the_documented_warnings() {
    let test = "lintian_finds_no_error_and_only_the_documented_warnings";
    let Some(dist) = release_dist() else { return };
    let debs: Vec<PathBuf> = std::fs::read_dir(&dist)
        .expect("read dist")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    assert!(!debs.is_empty(), "{test}: no package in {}", dist.display());
    for deb in debs {
        let problems = lintian_problems(&deb);
        assert!(
            problems.is_empty(),
            "{test}: {}:\n{}",
            deb.display(),
            problems.join("\n")
        );
    }
}

/// The source release builds offline: unpacked where nothing else is, its
/// multicall binary (and cnitool, the `--only` that ships a package)
/// built by its own scripts/release.sh with the network cut (`unshare
/// -n`; --offline --locked, as a vendored tree builds) are the same bytes
/// as the release's.
#[test]
fn the_source_release_builds_offline_to_the_same_multicall_binary() {
    let test = "the_source_release_builds_offline_to_the_same_multicall_binary";
    let Some(dist) = release_dist() else { return };
    let work = TempDir::new("offline");
    let source = untar(
        &work,
        &dist.join(format!("cni-rs-v{SUITE_VERSION}-vendored.tar.gz")),
        "src",
    );
    let tree = source.join(format!("cni-rs-v{SUITE_VERSION}"));
    assert!(tree.join("vendor").is_dir(), "{test}: vendor/");
    let epoch = commit_time();
    let out = work.path().join("dist");
    let run = Command::new("unshare")
        .args(["-n", "bash"])
        .arg(tree.join("scripts/release.sh"))
        .args([
            "--only",
            "cni-rs,cnitool",
            "--no-kernel-test",
            "--arch",
            host_arch(),
        ])
        .arg("--out")
        .arg(&out)
        .current_dir(&tree)
        .env("SOURCE_DATE_EPOCH", &epoch)
        .env("DEB_MAINTAINER", deb_maintainer())
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run the source release's scripts/release.sh");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "{test}: the offline build failed:\n{stderr}"
    );
    assert!(
        !out.join(format!("cni-rs-v{SUITE_VERSION}-vendored.tar.gz"))
            .exists(),
        "{test}: a source release writes no source release"
    );
    for (tgz, binary) in [
        (host_multicall_tgz(&out), "cni-rs"),
        (host_tgz(&out), "cnitool"),
    ] {
        let name = tgz
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let built = untar(&work, &tgz, &format!("built-{binary}"));
        let shipped = untar(&work, &dist.join(&name), &format!("shipped-{binary}"));
        let (a, b) = (
            std::fs::read(built.join(binary)).expect("built"),
            std::fs::read(shipped.join(binary)).expect("shipped"),
        );
        assert!(
            a == b,
            "{test}: the offline build's {binary} differs from the release's"
        );
    }
}
