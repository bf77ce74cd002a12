//! The multicall binary `cni-rs` (issue 26) against each plugin's own
//! binary, both from this build: through a link named after the plugin and
//! k3s-style (`cni-rs <plugin>`), every plugin answers `--version`,
//! VERSION, the about line, a bad config, an unknown command and a panic
//! exactly as its own binary does; and what the binary says when it is
//! called by no plugin's name. The chains themselves run against the
//! multicall form in the test script's multicall step
//! (`CNI_TEST_BIN_DIR`, `scripts/multicall-bin.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;
use tests::release::plugins;
use tests::*;

fn cni_rs() -> PathBuf {
    let p = build_dir().join("cni-rs");
    assert!(p.is_file(), "{} is not built", p.display());
    p
}

/// The multicall form in `dir`: `cni-rs` and a link to it per plugin.
fn multicall_form(dir: &Path) {
    std::fs::copy(cni_rs(), dir.join("cni-rs")).expect("copy cni-rs");
    for p in plugins() {
        std::os::unix::fs::symlink("cni-rs", dir.join(&p)).expect("link");
    }
}

/// The same call to the plugin's own binary, to its link and to `cni-rs
/// <plugin>`: the three outcomes (stdout, stderr, exit code).
fn three_ways(
    plugin: &str,
    form: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &str,
) -> [PluginOutput; 3] {
    let mut own = Command::new(build_dir().join(plugin));
    own.args(args);
    let mut link = Command::new(form.join(plugin));
    link.args(args);
    let mut k3s = Command::new(form.join("cni-rs"));
    k3s.arg(plugin).args(args);
    [own, link, k3s].map(|c| call_plugin_cmd(c, env, stdin))
}

fn assert_same(plugin: &str, what: &str, outs: &[PluginOutput; 3]) {
    let [own, link, k3s] = outs;
    for (how, out) in [("link", link), ("cni-rs <plugin>", k3s)] {
        assert_eq!(
            (out.exit_code, &out.stdout, &out.stderr),
            (own.exit_code, &own.stdout, &own.stderr),
            "{plugin} {what} through the {how}"
        );
    }
}

#[test]
fn it_carries_exactly_the_releases_plugins() {
    let out = run_ok(Command::new(cni_rs()).arg("--list"));
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(listed, plugins());
    let out = run_ok(Command::new(cni_rs()).arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("cni-rs {}\n", release::PLUGIN_VERSION)
    );
}

#[test]
fn every_plugin_answers_as_its_own_binary() {
    let form = TempDir::new("multicall-form");
    multicall_form(form.path());
    for p in plugins() {
        let p = p.as_str();
        let no_command: &[(&str, &str)] = &[];
        assert_same(
            p,
            "--version",
            &three_ways(p, form.path(), &["--version"], no_command, ""),
        );
        let about = three_ways(p, form.path(), &[], no_command, "");
        assert!(about[0].stderr.contains(" v"), "{p}: {:?}", about[0]);
        assert_same(p, "about line", &about);
        let version = three_ways(
            p,
            form.path(),
            &[],
            &[("CNI_COMMAND", "VERSION")],
            r#"{"cniVersion":"1.0.0"}"#,
        );
        assert_eq!(
            version[0].json()["pluginVersion"],
            release::PLUGIN_VERSION,
            "{p}"
        );
        assert_same(p, "VERSION", &version);
        let env = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "multicall1"),
            ("CNI_NETNS", "/proc/self/ns/net"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/nonexistent"),
        ];
        let bad = three_ways(p, form.path(), &[], &env, "{");
        assert_eq!(bad[0].exit_code, 1, "{p}: {:?}", bad[0]);
        assert_same(p, "ADD of a broken config", &bad);
        let unknown = three_ways(p, form.path(), &[], &[("CNI_COMMAND", "FROB")], "{}");
        assert_ne!(unknown[0].exit_code, 0, "{p}");
        assert_same(p, "an unknown command", &unknown);
    }
}

/// A panic inside a plugin (made at one of host-local's fault points)
/// gives the same error JSON, code 999, in both forms.
#[test]
fn a_panic_answers_the_same_error_in_both_forms() {
    let form = TempDir::new("multicall-panic");
    multicall_form(form.path());
    let data = TempDir::new("multicall-panic-ipam");
    let conf = serde_json::json!({
        "cniVersion": "1.0.0", "name": "panicnet",
        "ipam": {"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": data.path()}
    })
    .to_string();
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "panic1"),
        ("CNI_NETNS", "/proc/self/ns/net"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/nonexistent"),
        ("CNI_FAULT_POINT", "panic:host-local/temp-written"),
    ];
    let outs = three_ways("host-local", form.path(), &[], &env, &conf);
    let v = outs[0].json();
    assert_eq!(
        (outs[0].exit_code, &v["code"]),
        (1, &serde_json::json!(999)),
        "{v}"
    );
    assert!(
        v["msg"]
            .as_str()
            .is_some_and(|m| m.starts_with("plugin panicked: fault point host-local/temp-written")),
        "{v}"
    );
    assert_same("host-local", "a panic", &outs);
}

/// Called by a name that is no plugin's: a runtime (`CNI_COMMAND` set)
/// gets a CNI error naming it, a person the usage.
#[test]
fn under_no_plugins_name_it_says_what_to_do() {
    let dir = TempDir::new("multicall-misnamed");
    let copy = dir.path().join("my-bridge");
    std::fs::copy(cni_rs(), &copy).expect("copy");
    let out = call_plugin(None, &copy, &[("CNI_COMMAND", "ADD")], "{}");
    let v = out.json();
    assert_eq!(
        (out.exit_code, &v["code"]),
        (1, &serde_json::json!(999)),
        "{out:?}"
    );
    let msg = v["msg"].as_str().expect("msg");
    assert!(msg.contains("called as \"my-bridge\""), "{msg}");
    assert!(msg.contains("cni-rs install BIN_DIR"), "{msg}");

    let out = output_of_written_program(Command::new(&copy).arg("brigde")).expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"brigde\" is neither a plugin"), "{err}");
    let out = output_of_written_program(&mut Command::new(&copy)).expect("run");
    assert!(out.status.success(), "{out:?}");
    // The version line first, which Nomad's fingerprint reads
    // (clients.rs applies it to a bin dir with cni-rs in it).
    let help = String::from_utf8_lossy(&out.stdout);
    let head = format!("cni-rs {}\n\nUsage: cni-rs PLUGIN", release::PLUGIN_VERSION);
    assert!(help.starts_with(&head), "{help}");
}
