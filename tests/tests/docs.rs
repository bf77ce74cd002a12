//! The docs cannot drift from the tree: every relative link in a Markdown
//! file of the repository names a file that exists (and a heading of it,
//! when it names one), and every key a plugin README's key table lists is
//! a key that plugin's code reads. Each key table lives in its plugin's
//! README only; the top README links there.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use tests::{tree_files, workspace_root};

/// The Markdown files of the tree (absolute paths).
fn markdown_files() -> Vec<PathBuf> {
    let root = workspace_root();
    tree_files(&[".md"]).iter().map(|f| root.join(f)).collect()
}

/// The lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut inside = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                inside = !inside;
                return false;
            }
            !inside
        })
        .collect()
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_`
/// dropped, spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(file: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    prose(&text)
        .iter()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .map(anchor)
        .collect()
}

/// The targets of the inline links `](target)` of `line`.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(&rest[..end]);
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = workspace_root();
    let mut broken = Vec::new();
    let files = markdown_files();
    assert!(files.len() > 20, "{files:?}");
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let dir = file.parent().unwrap();
        for line in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                let shown = file.strip_prefix(&root).unwrap().display().to_string();
                if !resolved.exists() {
                    broken.push(format!("{shown}: {target}: no such file"));
                } else if !fragment.is_empty()
                    && resolved.extension().is_some_and(|e| e == "md")
                    && !anchors(&resolved).contains(fragment)
                {
                    broken.push(format!("{shown}: {target}: no such heading"));
                }
            }
        }
    }
    assert_eq!(broken, Vec::<String>::new());
}

/// Every plugin crate with a README: its directory.
fn plugin_dirs() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut dirs: Vec<PathBuf> = [
        "bridge",
        "host-local",
        "portmap",
        "bandwidth",
        "flannel-meta",
    ]
    .iter()
    .map(|d| root.join(d))
    .collect();
    let mut more: Vec<PathBuf> = std::fs::read_dir(root.join("plugins"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("README.md").is_file())
        .collect();
    more.sort();
    dirs.extend(more);
    dirs
}

/// The keys of the README's key tables (a table whose header starts
/// `| Key |`): the last backticked name of each row's first cell, its last
/// dotted part (`ipam.type` is `type`).
fn table_keys(readme: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut in_table = false;
    for line in prose(readme) {
        if line.starts_with("| Key |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let first = line.trim_start_matches('|').split('|').next().unwrap_or("");
        let names: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
        if let Some(name) = names.last() {
            let key = name.rsplit('.').next().unwrap_or(name);
            keys.push(key.trim_end_matches("[]").to_string());
        }
    }
    keys
}

/// The Rust sources under `dir`, concatenated.
fn sources(dir: &Path) -> String {
    fn walk(dir: &Path, out: &mut String) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    let mut out = String::new();
    walk(dir, &mut out);
    out
}

/// Whether the code reads `key`: as a JSON name (`"key"`: a serde rename,
/// a lookup) or as a field of that name (Go's untagged fields, decoded by
/// name).
fn reads(code: &str, key: &str) -> bool {
    if code.contains(&format!("\"{key}\"")) {
        return true;
    }
    let field = format!("{key}:");
    code.match_indices(&field).any(|(i, _)| {
        code[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    })
}

#[test]
fn every_key_in_a_plugin_readme_table_is_one_the_plugin_reads() {
    let shared = sources(&workspace_root().join("libcni/src"));
    let mut unread = Vec::new();
    let mut checked = 0;
    for dir in plugin_dirs() {
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
        let code = sources(&dir.join("src")) + &shared;
        for key in table_keys(&readme) {
            checked += 1;
            if !reads(&code, &key) {
                unread.push(format!("{}: {key}", dir.display()));
            }
        }
    }
    assert!(checked > 100, "only {checked} keys found in the tables");
    assert_eq!(unread, Vec::<String>::new());
}

#[test]
fn the_key_table_reader_takes_the_key_of_each_row() {
    let readme = "\
| Key | Type | Meaning |
|---|---|---|
| `bridge` | string | the bridge |
| range `rangeStart` | IP | first |
| `ipam.type` | string | the IPAM plugin |
| `vlanTrunk[]` | list | tagged |

| Other | Type |
|---|---|
| `notakey` | x |
";
    assert_eq!(
        table_keys(readme),
        ["bridge", "rangeStart", "type", "vlanTrunk"]
    );
    assert!(reads("#[serde(rename = \"isGateway\")]", "isGateway"));
    assert!(reads("pub mtu: Option<u32>,", "mtu"));
    assert!(!reads("pub bridge_mtu: u32,", "mtu"));
}
