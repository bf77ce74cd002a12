//! The house's rules that a reader cannot keep by eye, checked on every
//! run (rust-analyzer's tidy tests are the model):
//! - every source file (`.rs`, `.sh`) is on ARCHITECTURE.md's code map;
//! - every `unsafe` block, fn or impl says why it is sound (`SAFETY:`);
//! - no module depends on itself through others, in any crate;
//! - the numbers the docs give that a script can compute (the count of
//!   plugins, the release's sizes) are the ones it computes. Such a number
//!   carries a marker right after it, `<!-- computed: KEY -->`, invisible
//!   once rendered; the keys are [`Computed`]'s.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tests::release::plugins;
use tests::{bin, tree_files, workspace_root};

fn read(rel: &Path) -> String {
    std::fs::read_to_string(workspace_root().join(rel))
        .unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
}

// ---- the code map -------------------------------------------------------------

/// The words ARCHITECTURE.md names in code: every backtick span and every
/// fenced block, split at what cannot be part of a file or module name.
fn code_map_words() -> BTreeSet<String> {
    let text = read(Path::new("ARCHITECTURE.md"));
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if fenced {
            spans.push(line.to_string());
        } else {
            spans.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    spans
        .iter()
        .flat_map(|s| {
            s.split(|c: char| !(c.is_ascii_alphanumeric() || "_.-".contains(c)))
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The name a file goes by on the map: its module's (the directory's for
/// `mod.rs`, the crate's for `lib.rs` and `main.rs`), or its file name.
fn map_names(rel: &Path) -> Vec<String> {
    let name = rel.file_name().expect("name").to_string_lossy().to_string();
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().to_string())
        .collect();
    let stem = match name.as_str() {
        "mod.rs" | "lib.rs" | "main.rs" => {
            let dir = &parts[parts.len() - 2];
            if dir == "src" && parts.len() >= 3 {
                parts[parts.len() - 3].clone()
            } else {
                dir.clone()
            }
        }
        _ => name
            .rsplit_once('.')
            .map(|(s, _)| s.to_string())
            .unwrap_or(name.clone()),
    };
    // Test files are named after their plugin with `_` for the `-`.
    let hyphened = stem.replace('_', "-");
    vec![stem, hyphened, name]
}

#[test]
fn every_source_file_is_on_the_code_map() {
    let words = code_map_words();
    let missing: Vec<String> = tree_files(&[".rs", ".sh"])
        .iter()
        .filter(|f| !map_names(f).iter().any(|n| words.contains(n)))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "not named on ARCHITECTURE.md's code map (say in a few words where each \
         belongs): {missing:#?}"
    );
}

#[test]
fn the_code_map_reader_finds_names_in_code_and_in_fences() {
    let words = code_map_words();
    for w in ["attach", "skel", "netfilter", "portmap", "tidy"] {
        assert!(words.contains(w), "{w}");
    }
    assert!(!words.contains("Architecture"), "prose is not code");
    assert_eq!(
        map_names(Path::new("plugins/host-device/src/lib.rs"))[0],
        "host-device"
    );
    assert_eq!(
        map_names(Path::new("libcni/src/netfilter/masq/mod.rs"))[0],
        "masq"
    );
    assert_eq!(
        map_names(Path::new("tests/tests/host_device.rs"))[1],
        "host-device"
    );
}

// ---- unsafe -------------------------------------------------------------------

/// The code of a line: what comes before a `//` comment.
fn code_of(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// Whether `line` opens an `unsafe` block, fn, impl or extern block.
fn opens_unsafe(line: &str) -> bool {
    let code = code_of(line);
    let mut rest = code;
    while let Some(at) = rest.find("unsafe") {
        let before = rest[..at].chars().last();
        let after = rest[at + "unsafe".len()..].trim_start();
        let word_start = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if word_start
            && (after.starts_with('{')
                || after.starts_with("fn ")
                || after.starts_with("impl")
                || after.starts_with("extern"))
        {
            return true;
        }
        rest = &rest[at + "unsafe".len()..];
    }
    false
}

/// The lines of `text` that open `unsafe` without a `SAFETY:` comment on
/// that line or in the comments right above its statement (the lines that
/// open the statement, ending in `(`, `=` or `,`, may come between, as
/// clippy's `undocumented_unsafe_blocks` allows).
fn undocumented_unsafe(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !opens_unsafe(line) || line.contains("SAFETY:") {
            continue;
        }
        let mut documented = false;
        for above in lines[..i].iter().rev().map(|l| l.trim()) {
            if above.starts_with("//") || above.starts_with("#[") {
                if above.contains("SAFETY:") {
                    documented = true;
                    break;
                }
                continue;
            }
            let opens_statement = ["(", "=", ","]
                .iter()
                .any(|end| code_of(above).trim_end().ends_with(end));
            if !opens_statement {
                break;
            }
        }
        if !documented {
            out.push(i + 1);
        }
    }
    out
}

#[test]
fn every_unsafe_block_says_why_it_is_sound() {
    let mut missing = Vec::new();
    let mut seen = 0;
    for f in tree_files(&[".rs"]) {
        let text = read(&f);
        seen += text.lines().filter(|l| opens_unsafe(l)).count();
        for line in undocumented_unsafe(&text) {
            missing.push(format!("{}:{line}", f.display()));
        }
    }
    assert!(
        seen >= 50,
        "only {seen} unsafe blocks found: the reader is broken"
    );
    assert!(
        missing.is_empty(),
        "unsafe without a `// SAFETY:` comment saying why it is sound: {missing:#?}"
    );
}

#[test]
fn the_unsafe_reader_tells_documented_from_not() {
    // Written with `UNSAFE` so that this file's own check skips it.
    let text = "\
// SAFETY: plain getpid(2).
let a = UNSAFE { libc::getpid() };
let b = UNSAFE { libc::getpid() };
// SAFETY: as above.
let fd = cvt(
    UNSAFE { libc::eventfd(0, 0) },
)?;
let c = x.UNSAFE_thing(); // not UNSAFE code
UNSAFE fn f() {}
// UNSAFE { in a comment }
"
    .replace("UNSAFE", "unsafe");
    assert_eq!(undocumented_unsafe(&text), [3, 9]);
}

// ---- module cycles ----------------------------------------------------------------

/// The module path of a source file under its crate's `src/`
/// (`["netfilter", "masq"]` for `netfilter/masq/mod.rs`), `None` for a
/// file outside a `src/` or a `bin/` target.
fn module_of(rel: &Path) -> Option<(PathBuf, Vec<String>)> {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().to_string())
        .collect();
    let src = parts.iter().position(|p| p == "src")?;
    let crate_dir: PathBuf = parts[..src].iter().collect();
    let mut module: Vec<String> = parts[src + 1..].to_vec();
    if module.first().map(String::as_str) == Some("bin") {
        return None;
    }
    let last = module.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if !matches!(stem, "mod" | "lib" | "main") {
        module.push(stem.to_string());
    }
    Some((crate_dir, module))
}

/// The module paths the code of `text` (in `module`) names through
/// `crate::` and `super::`, comments and its `#[cfg(test)] mod tests`
/// left out.
fn references(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let code: String = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or("")
        .lines()
        .map(code_of)
        .collect::<Vec<_>>()
        .join("\n");
    let is_name = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    let path_at = |s: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = s;
        loop {
            let n = rest.find(|c: char| !is_name(c)).unwrap_or(rest.len());
            if n == 0 {
                break;
            }
            out.push(rest[..n].to_string());
            match rest[n..].strip_prefix("::") {
                Some(r) => rest = r,
                None => break,
            }
        }
        out
    };
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let word_start = code[..at]
            .chars()
            .last()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if word_start {
            out.push(path_at(&code[at + "crate::".len()..]));
        }
    }
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("super::") {
            continue; // counted from the first `super::` of a run
        }
        let mut rest = &code[at..];
        let mut up = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            up += 1;
            rest = r;
        }
        if up > module.len() {
            continue;
        }
        let mut path = module[..module.len() - up].to_vec();
        path.extend(path_at(rest));
        out.push(path);
    }
    out
}

/// The cycles among sibling modules: for each reference from module `m`
/// to path `t`, an edge between their children of the lowest common
/// parent. Each cycle is listed as `crate parent: [members]`.
fn module_cycles(files: &[(PathBuf, Vec<String>, String)]) -> Vec<String> {
    type Graph = BTreeMap<String, BTreeSet<String>>;
    let mut graphs: BTreeMap<(PathBuf, Vec<String>), Graph> = BTreeMap::new();
    for (krate, module, text) in files {
        for target in references(text, module) {
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            let (Some(from), Some(to)) = (module.get(common), target.get(common)) else {
                continue;
            };
            graphs
                .entry((krate.clone(), module[..common].to_vec()))
                .or_default()
                .entry(from.clone())
                .or_default()
                .insert(to.clone());
        }
    }
    let mut out = Vec::new();
    for ((krate, parent), graph) in &graphs {
        // A module is on a cycle when it reaches itself.
        let reaches = |from: &String| -> BTreeSet<String> {
            let mut seen = BTreeSet::new();
            let mut todo: Vec<&String> = graph.get(from).into_iter().flatten().collect();
            while let Some(m) = todo.pop() {
                if seen.insert(m.clone()) {
                    todo.extend(graph.get(m).into_iter().flatten());
                }
            }
            seen
        };
        let on_cycle: BTreeSet<String> = graph
            .keys()
            .filter(|m| reaches(m).contains(*m))
            .cloned()
            .collect();
        if !on_cycle.is_empty() {
            out.push(format!(
                "{} {}: {on_cycle:?}",
                krate.display(),
                if parent.is_empty() {
                    "(root)".to_string()
                } else {
                    parent.join("::")
                }
            ));
        }
    }
    out
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let files: Vec<(PathBuf, Vec<String>, String)> = tree_files(&[".rs"])
        .iter()
        .filter_map(|f| {
            let (krate, module) = module_of(f)?;
            Some((krate, module, read(f)))
        })
        .collect();
    assert!(files.len() > 200, "{} files", files.len());
    let cycles = module_cycles(&files);
    assert!(
        cycles.is_empty(),
        "modules that depend on themselves through others (move what both \
         need into a module of its own): {cycles:#?}"
    );
}

#[test]
fn the_cycle_finder_finds_a_circle_and_only_a_circle() {
    let file = |module: &str, text: &str| {
        (
            PathBuf::from("bench"),
            module.split("::").map(str::to_string).collect(),
            text.to_string(),
        )
    };
    let circle = [
        file("report", "use crate::multicall::Comparison;"),
        file(
            "multicall",
            "use crate::report::cell; // crate::stats in a comment",
        ),
        file("stats", ""),
        file("netfilter::masq", "use super::nft::Nft;"),
        file("netfilter::nft", "use super::super::stats;"),
    ];
    assert_eq!(
        module_cycles(&circle),
        [r#"bench (root): {"multicall", "report"}"#]
    );
    let line = [
        file("report", "use crate::cells::ms;"),
        file("multicall", "use crate::cells::x; // crate::report"),
    ];
    assert_eq!(module_cycles(&line), Vec::<String>::new());
}

// ---- computed numbers ---------------------------------------------------------------

/// What a marked number in the docs stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Computed {
    /// `plugin-count`: how many plugins the suite has, exactly.
    PluginCount,
    /// `plugins-mb`: the release's plugin binaries together, in MB (10^6).
    PluginsMegabytes,
    /// `multicall-mb`: the release's multicall binary, in MB.
    MulticallMegabytes,
}

impl Computed {
    fn parse(key: &str) -> Option<Computed> {
        match key {
            "plugin-count" => Some(Computed::PluginCount),
            "plugins-mb" => Some(Computed::PluginsMegabytes),
            "multicall-mb" => Some(Computed::MulticallMegabytes),
            _ => None,
        }
    }
}

/// A marked number: where, what it says, and what it stands for.
#[derive(Debug)]
struct Marked {
    place: String,
    value: f64,
    key: Computed,
}

const MARKER: &str = "<!-- computed: ";

/// Every marked number of the Markdown `text` of `file`; a marker with an
/// unknown key, or with no number right before it, is an error.
fn marked_numbers(file: &str, text: &str) -> Result<Vec<Marked>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let place = format!("{file}:{}", n + 1);
        let mut rest = line;
        let mut before_len = 0;
        while let Some(at) = rest.find(MARKER) {
            let before = &line[..before_len + at];
            let after = &rest[at + MARKER.len()..];
            let key_text = after.split(" -->").next().unwrap_or("");
            let key = Computed::parse(key_text)
                .ok_or_else(|| format!("{place}: unknown key {key_text:?}"))?;
            let number: String = before
                .trim_end()
                .trim_end_matches("MB")
                .trim_end()
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .filter(|c| *c != ',')
                .collect();
            let value = number
                .parse()
                .map_err(|_| format!("{place}: no number before the {key_text} marker"))?;
            out.push(Marked {
                place: place.clone(),
                value,
                key,
            });
            before_len += at + MARKER.len();
            rest = after;
        }
    }
    Ok(out)
}

fn every_marked_number() -> Vec<Marked> {
    let mut out = Vec::new();
    for f in tree_files(&[".md"]) {
        let name = f.display().to_string();
        out.extend(marked_numbers(&name, &read(&f)).unwrap_or_else(|e| panic!("{e}")));
    }
    out
}

#[test]
fn the_plugin_counts_in_the_docs_are_the_suites() {
    let count = plugins().len() as f64;
    let marked: Vec<Marked> = every_marked_number()
        .into_iter()
        .filter(|m| m.key == Computed::PluginCount)
        .collect();
    assert!(!marked.is_empty(), "no marked plugin count in the docs");
    for m in marked {
        assert_eq!(m.value, count, "{}: the suite has {count} plugins", m.place);
    }
}

/// Sizes move a little with every change: a documented size may be off by
/// this share of the measured one before it must be written again.
const SIZE_TOLERANCE: f64 = 0.05;

/// The sizes are the release's: checked in `scripts/test.sh`'s release
/// step (`CNI_TEST_RELEASE=1`, the release's binaries in
/// `CNI_TEST_BIN_DIR`); the debug build of the other runs has no size to
/// compare, and says so.
#[test]
fn the_sizes_in_the_docs_are_the_releases() {
    if std::env::var("CNI_TEST_RELEASE").as_deref() != Ok("1") {
        eprintln!(
            "the docs' sizes are checked against the release's binaries, in \
             scripts/test.sh's release step (CNI_TEST_RELEASE=1)"
        );
        return;
    }
    let size = |name: &str| std::fs::metadata(bin(name)).expect("release binary").len() as f64;
    let plugins_mb = plugins().iter().map(|p| size(p)).sum::<f64>() / 1e6;
    let multicall_mb = size("cni-rs") / 1e6;
    let mut checked = 0;
    for m in every_marked_number() {
        let measured = match m.key {
            Computed::PluginCount => continue,
            Computed::PluginsMegabytes => plugins_mb,
            Computed::MulticallMegabytes => multicall_mb,
        };
        checked += 1;
        assert!(
            (m.value - measured).abs() <= measured * SIZE_TOLERANCE,
            "{}: says {} MB, the release has {measured:.2} MB ({:?})",
            m.place,
            m.value,
            m.key
        );
    }
    assert!(checked >= 2, "only {checked} marked sizes in the docs");
}

#[test]
fn the_marker_reader_takes_the_number_before_it() {
    let text = "the 20<!-- computed: plugin-count --> plugins take 46.7 MB<!-- computed: \
                plugins-mb --> and 5.34 MB <!-- computed: multicall-mb -->";
    let m = marked_numbers("x.md", text).unwrap();
    let got: Vec<(f64, Computed)> = m.iter().map(|m| (m.value, m.key)).collect();
    assert_eq!(
        got,
        [
            (20.0, Computed::PluginCount),
            (46.7, Computed::PluginsMegabytes),
            (5.34, Computed::MulticallMegabytes)
        ]
    );
    assert!(marked_numbers("x.md", "20<!-- computed: pods -->").is_err());
    assert!(marked_numbers("x.md", "many<!-- computed: plugin-count -->").is_err());
}
