//! `cni-rs-manpages [DIR]`: writes every manual page into DIR (default
//! `docs/man`, where the package takes them from).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/man")));
    for page in manpages::pages() {
        let path = dir.join(page.file_name());
        if let Err(e) = std::fs::write(&path, page.render()) {
            eprintln!("cni-rs-manpages: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
