//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`) through the
//! very checks the cargo-fuzz targets run (`fuzz/src/checks.rs`), so CI
//! checks every seed and every input the fuzzer ever kept, without
//! libFuzzer or a nightly compiler. `scripts/fuzz.sh` runs the fuzzer.
//!
//! The checks are the fuzz crate's own source file, compiled in here (the
//! fuzz crate is a workspace of its own, built with libFuzzer); both use
//! the plugin crates' libraries.

#[allow(dead_code)]
#[path = "../../fuzz/src/checks.rs"]
mod checks;

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no corpus", dir.display());
    files
}

fn replay(target: &str, check: fn(&[u8])) {
    let files = corpus(target);
    for f in &files {
        let data = std::fs::read(f).expect("read corpus file");
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(
            outcome.is_ok(),
            "{target}: {} fails its check (replay it with `scripts/fuzz.sh run {target} {}`)",
            f.display(),
            f.display()
        );
    }
    eprintln!("{target}: {} inputs replayed", files.len());
}

#[test]
fn corpus_netconf() {
    replay("netconf", checks::netconf);
}

#[test]
fn corpus_skel() {
    replay("skel", checks::skel);
}

#[test]
fn corpus_result_versions() {
    replay("result_versions", checks::result_versions);
}

#[test]
fn corpus_cni_args() {
    replay("cni_args", checks::cni_args);
}

#[test]
fn corpus_subnet_env() {
    replay("subnet_env", checks::subnet_env);
}

#[test]
fn corpus_plugin_config() {
    replay("plugin_config", checks::plugin_config);
}

#[test]
fn corpus_dhcp_message() {
    replay("dhcp_message", checks::dhcp_message);
}
