//! The house's rules that a reader cannot keep by eye, checked on every
//! run (rust-analyzer's tidy tests are the model):
//! - every source file (`.rs`, `.sh`) is on ARCHITECTURE.md's code map,
//!   by its path: its crate's section, the modules between, the file;
//! - every crate denies an `unsafe` that does not say why it is sound
//!   (clippy's `undocumented_unsafe_blocks`, rustc's
//!   `unsafe_op_in_unsafe_fn`), and clippy refuses one;
//! - no module depends on itself through others, in any crate (every
//!   `use` tree and path read whole by `syn`);
//! - the numbers the docs give that a script can compute (the count of
//!   plugins, the release's sizes) are the ones it computes. Such a number
//!   carries a marker right after it, `<!-- computed: KEY -->`, invisible
//!   once rendered; the keys are [`Computed`]'s.
//!
//! Each check has a self-test that makes it fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tests::release::plugins;
use tests::{bin, tree_files, workspace_root};

fn read(rel: &Path) -> String {
    std::fs::read_to_string(workspace_root().join(rel))
        .unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
}

// ---- the code map -------------------------------------------------------------

/// The words of a piece of Markdown in code: every backtick span and every
/// fenced line, split at what cannot be part of a file or module name
/// (`netfilter/masq`, `metrics::server` and `tests/readback.rs` give
/// each part).
fn code_words(text: &str) -> BTreeSet<String> {
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

/// A `###` section of the code map: the crates it describes (its
/// heading's words, and the code words before the colon of each bullet:
/// `- \`bridge/\`: ...`), and its blocks' code words (a bullet with its
/// continuation lines, a paragraph, a table row, a fenced block).
struct Section {
    crates: BTreeSet<String>,
    blocks: Vec<Block>,
}

/// A block's code words, and those before a bullet's colon (what it is
/// about: `bridge/`, or `netfilter/`).
struct Block {
    lead: BTreeSet<String>,
    words: BTreeSet<String>,
}

/// The sections of `## Code map` in `text` (ARCHITECTURE.md).
fn code_map(text: &str) -> Vec<Section> {
    let map = text
        .split("\n## Code map")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or("");
    let mut sections = Vec::new();
    for part in map.split("\n### ").skip(1) {
        let (heading, body) = part.split_once('\n').unwrap_or((part, ""));
        let mut blocks: Vec<String> = Vec::new();
        let mut fenced = false;
        for line in body.lines() {
            let new_block = if fenced {
                false
            } else {
                line.trim().is_empty()
                    || line.starts_with("- ")
                    || line.starts_with('|')
                    || line.starts_with("```")
                    || blocks.last().is_some_and(|b| b.trim().is_empty())
            };
            if line.starts_with("```") {
                fenced = !fenced;
            }
            if new_block || blocks.is_empty() {
                blocks.push(String::new());
            }
            let last = blocks.last_mut().expect("a block");
            last.push_str(line);
            last.push('\n');
        }
        let blocks: Vec<Block> = blocks
            .iter()
            .map(|b| Block {
                lead: if b.starts_with("- ") {
                    code_words(b.split(':').next().unwrap_or(""))
                } else {
                    BTreeSet::new()
                },
                words: code_words(b),
            })
            .collect();
        let mut crates: BTreeSet<String> = heading
            .split(|c: char| !(c.is_ascii_alphanumeric() || "_.-".contains(c)))
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect();
        for b in &blocks {
            crates.extend(b.lead.iter().cloned());
        }
        sections.push(Section { crates, blocks });
    }
    sections
}

/// Where a file is, as the map names it: its crate (the directory above
/// `src/`, or the first directory outside the plugins' folder), the
/// modules or folders between (`src` left out), and the names it goes
/// by (its module's, the file's own).
#[derive(Debug, PartialEq, Eq)]
struct MapPath {
    krate: String,
    within: Vec<String>,
    names: Vec<String>,
}

fn map_path(rel: &Path) -> MapPath {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().to_string())
        .collect();
    if parts.first().map(String::as_str) == Some("plugins") {
        parts.remove(0);
    }
    let file = parts.pop().expect("a file name");
    let krate = parts.first().cloned().unwrap_or_default();
    let mut within: Vec<String> = parts
        .iter()
        .skip(1)
        .filter(|p| *p != "src")
        .cloned()
        .collect();
    let stem = file
        .rsplit_once('.')
        .map_or(file.clone(), |(s, _)| s.to_string());
    let names = match stem.as_str() {
        // A module's own file goes by the module's name.
        "mod" | "lib" | "main" => match within.pop() {
            Some(module) => vec![module, file],
            None => vec![krate.clone(), file],
        },
        _ => vec![stem, file],
    };
    MapPath {
        krate,
        within,
        names,
    }
}

/// Whether `path` is on the map: in a section that describes its crate,
/// one block names every folder and module between the crate and it, and
/// the file itself; a bullet about some other crate of `crates` (the
/// workspace's) does not count. A crate's root (`lib.rs`, `main.rs`) is
/// on it where a section describes the crate. A test file of
/// `tests/tests/` named after a plugin crate is the "module per plugin"
/// the map speaks of.
fn on_the_map(
    map: &[Section],
    path: &MapPath,
    crates: &BTreeSet<String>,
    plugins: &BTreeSet<String>,
) -> bool {
    if path.krate == "tests"
        && path.within == ["tests"]
        && plugins.contains(&path.names[0].replace('_', "-"))
    {
        return true;
    }
    let crate_root = path.within.is_empty() && path.names[0] == path.krate;
    map.iter()
        .filter(|section| section.crates.contains(&path.krate))
        .any(|section| {
            crate_root
                || section.blocks.iter().any(|block| {
                    let about_another = block.lead.iter().any(|w| crates.contains(w))
                        && !block.lead.contains(&path.krate);
                    !about_another
                        && path.within.iter().all(|w| block.words.contains(w))
                        && path.names.iter().any(|n| block.words.contains(n))
                })
        })
}

#[test]
fn every_source_file_is_on_the_code_map() {
    let map = code_map(&read(Path::new("ARCHITECTURE.md")));
    assert!(
        map.len() >= 6,
        "{} sections: the map reader is broken",
        map.len()
    );
    let plugins: BTreeSet<String> = plugins().into_iter().map(|p| p.to_string()).collect();
    let files = tree_files(&[".rs", ".sh"]);
    assert!(files.len() > 200, "{} files", files.len());
    let crates: BTreeSet<String> = files.iter().map(|f| map_path(f).krate).collect();
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !on_the_map(&map, &map_path(f), &crates, &plugins))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "not on ARCHITECTURE.md's code map (name each, with its crate and the modules \
         between, where it belongs): {missing:#?}"
    );
}

#[test]
fn the_code_map_reader_takes_paths_not_words() {
    let text = "\
# Architecture

## Code map

### `libcni/`

- `netfilter/`: `route`, and the features `masq/{nft, ipt}`.
- `config.rs`: the keys.

### Plugins

- `bridge/`: `node`, `config`.
- `plugins/vrf/`: `device`.

## The path of one ADD

`vrf/config` here is no part of the map.
";
    let map = code_map(text);
    assert_eq!(map.len(), 2);
    let plugins = BTreeSet::new();
    let crates: BTreeSet<String> = ["libcni", "bridge", "vrf"].map(String::from).into();
    let on = |f: &str| on_the_map(&map, &map_path(Path::new(f)), &crates, &plugins);
    for f in [
        "libcni/src/netfilter/route.rs",
        "libcni/src/netfilter/masq/nft.rs",
        "libcni/src/netfilter/masq/mod.rs",
        "libcni/src/netfilter/mod.rs",
        "libcni/src/config.rs",
        "libcni/src/lib.rs",
        "bridge/src/config.rs",
        "plugins/vrf/src/device.rs",
    ] {
        assert!(on(f), "{f} is on the map");
    }
    // A bare word elsewhere on the map is not the file's place.
    for f in [
        "plugins/vrf/src/config.rs",
        "libcni/src/netfilter/conntrack.rs",
        "libcni/src/node.rs",
        "bridge/src/route.rs",
    ] {
        assert!(!on(f), "{f} is not on the map");
    }
    assert_eq!(
        map_path(Path::new("operator/src/metrics/server/mod.rs")),
        MapPath {
            krate: "operator".into(),
            within: vec!["metrics".into()],
            names: vec!["server".into(), "mod.rs".into()],
        }
    );
    let plugins: BTreeSet<String> = ["host-device".to_string()].into();
    let test_file = |f: &str| on_the_map(&[], &map_path(Path::new(f)), &crates, &plugins);
    assert!(test_file("tests/tests/host_device.rs"));
    assert!(!test_file("tests/tests/other.rs"));
}

// ---- unsafe -------------------------------------------------------------------

/// The lints that make every `unsafe` say why it is sound, as the root's
/// `[workspace.lints]` sets them: clippy checks each block and impl for a
/// `// SAFETY:` comment, and an `unsafe fn` must spell its unsafe
/// operations out in such blocks.
const UNSAFE_LINTS: [(&str, &str); 2] = [
    ("clippy", "undocumented_unsafe_blocks"),
    ("rust", "unsafe_op_in_unsafe_fn"),
];

/// The `key = value` lines of the TOML table `[name]` of `text`.
fn toml_table<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let header = format!("[{name}]");
    let mut lines = text.lines().skip_while(|l| l.trim() != header);
    if lines.next().is_none() {
        return Vec::new();
    }
    lines
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// Whether `text`'s table `[<prefix><tool>]` denies each of [`UNSAFE_LINTS`].
fn denies_unsafe_lints(text: &str, prefix: &str) -> bool {
    UNSAFE_LINTS.iter().all(|(tool, lint)| {
        toml_table(text, &format!("{prefix}{tool}"))
            .iter()
            .any(|l| l.replace(' ', "") == format!("{lint}=\"deny\""))
    })
}

#[test]
fn every_crate_denies_an_unsafe_without_safety() {
    let root = read(Path::new("Cargo.toml"));
    assert!(
        denies_unsafe_lints(&root, "workspace.lints."),
        "the root Cargo.toml's [workspace.lints] deny {UNSAFE_LINTS:?}"
    );
    let manifests: Vec<PathBuf> = tree_files(&["Cargo.toml"])
        .into_iter()
        .filter(|m| m.parent() != Some(Path::new("")))
        .collect();
    assert!(manifests.len() >= 25, "{} crates", manifests.len());
    let mut lax = Vec::new();
    for m in &manifests {
        let text = read(m);
        let inherits = toml_table(&text, "lints").contains(&"workspace = true");
        // fuzz/ is a workspace of its own: it sets the same lints.
        let own = denies_unsafe_lints(&text, "lints.");
        if !(inherits || own) {
            lax.push(m.display().to_string());
        }
    }
    assert!(
        lax.is_empty(),
        "crates that do not deny {UNSAFE_LINTS:?} (add `[lints] workspace = true`): {lax:#?}"
    );
}

/// The lints as the root sets them refuse an `unsafe` block without a
/// `// SAFETY:` comment, and an `unsafe fn` whose body is not in one, and
/// take both once documented: clippy run on a crate of its own.
#[test]
fn clippy_refuses_an_unsafe_without_safety() {
    let root = read(Path::new("Cargo.toml"));
    let lints: String = UNSAFE_LINTS
        .iter()
        .map(|(tool, _)| {
            let table = toml_table(&root, &format!("workspace.lints.{tool}")).join("\n");
            format!("[lints.{tool}]\n{table}\n")
        })
        .collect();
    let work = tests::TempDir::new("tidy-unsafe");
    let clippy = |name: &str, code: &str| {
        let dir = work.path().join(name);
        std::fs::create_dir_all(dir.join("src")).expect("mkdir");
        std::fs::write(
            dir.join("Cargo.toml"),
            format!("[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n\n{lints}"),
        )
        .expect("write");
        std::fs::write(dir.join("src/lib.rs"), code).expect("write");
        let out = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .args(["clippy", "--offline", "--quiet", "--", "-D", "warnings"])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", work.path().join("target"))
            .env_remove("RUSTFLAGS")
            .output()
            .expect("run cargo clippy");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Written with `UNSAFE` so that nothing here reads as this file's own.
    let code = |s: &str| s.replace("UNSAFE", "unsafe");
    let (ok, err) = clippy(
        "bare_block",
        &code("pub fn pid() -> i32 {\n    UNSAFE { std::ptr::read(&1) }\n}\n"),
    );
    assert!(
        !ok && err.contains("unsafe block missing a safety comment"),
        "{err}"
    );
    let (ok, err) = clippy(
        "bare_fn",
        &code("/// # Safety\n/// none.\npub UNSAFE fn one(p: *const i32) -> i32 {\n    std::ptr::read(p)\n}\n"),
    );
    assert!(!ok && err.contains("requires unsafe block"), "{err}");
    let (ok, err) = clippy(
        "documented",
        &code(
            "pub fn pid() -> i32 {\n    // SAFETY: a valid reference.\n    UNSAFE { std::ptr::read(&1) }\n}\n\n\
             /// # Safety\n/// `p` is valid.\npub UNSAFE fn one(p: *const i32) -> i32 {\n    \
             // SAFETY: the caller's promise.\n    UNSAFE { std::ptr::read(p) }\n}\n",
        ),
    );
    assert!(ok, "{err}");
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
/// `crate::`, `super::` and `self::`: every path of the code and every
/// `use` tree whole (`use crate::{a, b::c}` names both), read by `syn`;
/// items under `#[cfg(test)]` (a `mod tests;` anywhere in the file, or
/// an inline one) left out.
fn references(text: &str, module: &[String]) -> Result<Vec<Vec<String>>, String> {
    use syn::visit::Visit;

    struct Paths<'a> {
        module: &'a [String],
        out: Vec<Vec<String>>,
    }

    impl Paths<'_> {
        /// A path from its segments, when it starts from this crate.
        fn add(&mut self, segments: &[String]) {
            let (mut path, mut rest) = match segments.first().map(String::as_str) {
                Some("crate") => (Vec::new(), &segments[1..]),
                Some("self") => (self.module.to_vec(), &segments[1..]),
                Some("super") => (self.module.to_vec(), segments),
                _ => return,
            };
            while let Some((first, r)) = rest.split_first() {
                if first != "super" {
                    break;
                }
                if path.pop().is_none() {
                    return;
                }
                rest = r;
            }
            path.extend(rest.iter().cloned());
            self.out.push(path);
        }

        fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
            match tree {
                syn::UseTree::Path(p) => {
                    prefix.push(p.ident.to_string());
                    self.use_tree(prefix, &p.tree);
                    prefix.pop();
                }
                syn::UseTree::Name(n) => {
                    prefix.push(n.ident.to_string());
                    self.add(prefix);
                    prefix.pop();
                }
                syn::UseTree::Rename(r) => {
                    prefix.push(r.ident.to_string());
                    self.add(prefix);
                    prefix.pop();
                }
                syn::UseTree::Glob(_) => self.add(prefix),
                syn::UseTree::Group(g) => {
                    for t in &g.items {
                        self.use_tree(prefix, t);
                    }
                }
            }
        }
    }

    /// `#[cfg(test)]` exactly.
    fn cfg_test(attrs: &[syn::Attribute]) -> bool {
        attrs.iter().any(|a| {
            a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
        })
    }

    impl<'ast> Visit<'ast> for Paths<'_> {
        fn visit_item(&mut self, item: &'ast syn::Item) {
            let attrs = match item {
                syn::Item::Mod(m) => &m.attrs,
                syn::Item::Fn(f) => &f.attrs,
                syn::Item::Impl(i) => &i.attrs,
                syn::Item::Use(u) => &u.attrs,
                syn::Item::Const(c) => &c.attrs,
                syn::Item::Static(s) => &s.attrs,
                syn::Item::Struct(s) => &s.attrs,
                syn::Item::Enum(e) => &e.attrs,
                syn::Item::Trait(t) => &t.attrs,
                syn::Item::Type(t) => &t.attrs,
                syn::Item::Macro(m) => &m.attrs,
                _ => return syn::visit::visit_item(self, item),
            };
            if !cfg_test(attrs) {
                syn::visit::visit_item(self, item);
            }
        }

        fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
            self.use_tree(&mut Vec::new(), &item.tree);
        }

        fn visit_path(&mut self, path: &'ast syn::Path) {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.add(&segments);
            syn::visit::visit_path(self, path);
        }
    }

    let file = syn::parse_file(text).map_err(|e| format!("not Rust that syn reads: {e}"))?;
    let mut paths = Paths {
        module,
        out: Vec::new(),
    };
    paths.visit_file(&file);
    Ok(paths.out)
}

/// What the module graphs hold: the edges found between sibling
/// modules, and each cycle as `crate parent: [members]`.
#[derive(Debug, Default)]
struct ModuleGraphs {
    edges: usize,
    cycles: Vec<String>,
}

/// The cycles among sibling modules: for each reference from module `m`
/// to path `t`, an edge between their children of the lowest common
/// parent. A file `syn` cannot read is an error.
fn module_cycles(files: &[(PathBuf, Vec<String>, String)]) -> Result<ModuleGraphs, String> {
    type Graph = BTreeMap<String, BTreeSet<String>>;
    let mut graphs: BTreeMap<(PathBuf, Vec<String>), Graph> = BTreeMap::new();
    for (krate, module, text) in files {
        let targets = references(text, module)
            .map_err(|e| format!("{} {}: {e}", krate.display(), module.join("::")))?;
        for target in targets {
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
    let mut out = ModuleGraphs {
        edges: graphs
            .values()
            .flat_map(|g| g.values())
            .map(BTreeSet::len)
            .sum(),
        cycles: Vec::new(),
    };
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
            out.cycles.push(format!(
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
    Ok(out)
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
    let graphs = module_cycles(&files).unwrap_or_else(|e| panic!("{e}"));
    // What the crates' modules name of each other, read whole: far fewer
    // would mean the reader misses paths.
    assert!(
        graphs.edges >= MIN_MODULE_EDGES,
        "only {} edges between modules found: the reader is broken",
        graphs.edges
    );
    assert!(
        graphs.cycles.is_empty(),
        "modules that depend on themselves through others (move what both \
         need into a module of its own): {:#?}",
        graphs.cycles
    );
}

/// The edges between sibling modules of the workspace (the check found
/// 368 when this was written; a reader that misses grouped
/// imports finds far fewer).
const MIN_MODULE_EDGES: usize = 330;

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
    let cycles =
        |files: &[(PathBuf, Vec<String>, String)]| module_cycles(files).expect("Rust").cycles;
    assert_eq!(
        cycles(&circle),
        [r#"bench (root): {"multicall", "report"}"#]
    );
    let line = [
        file("report", "use crate::cells::ms;"),
        file("multicall", "use crate::cells::x; // crate::report"),
    ];
    assert_eq!(cycles(&line), Vec::<String>::new());
    // A grouped import, and a path in the code, make edges too.
    let grouped = [
        file(
            "report",
            "use crate::{cells::ms, multicall::{self, Comparison}};",
        ),
        file("multicall", "fn f() { crate::report::cell(); }"),
        file("cells", ""),
    ];
    assert_eq!(
        cycles(&grouped),
        [r#"bench (root): {"multicall", "report"}"#]
    );
    // A `mod tests;` near the top hides nothing after it; its own
    // imports, and an inline test module's, are no edges.
    let after_tests = [
        file(
            "report",
            "#[cfg(test)]\nmod tests;\n\nuse crate::multicall::Comparison;",
        ),
        file("multicall", "use crate::report::cell;"),
    ];
    assert_eq!(
        cycles(&after_tests),
        [r#"bench (root): {"multicall", "report"}"#]
    );
    let test_only = [
        file(
            "report",
            "#[cfg(test)]\nmod tests {\n    use crate::multicall::Comparison;\n}",
        ),
        file("multicall", "use crate::report::cell;"),
    ];
    assert_eq!(cycles(&test_only), Vec::<String>::new());
    assert!(
        module_cycles(&[file("report", "fn {")]).is_err(),
        "a file syn cannot read"
    );
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
