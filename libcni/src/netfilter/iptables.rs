//! The iptables backend: reads a table (nat for ipMasq and portmap, filter
//! for the firewall) once with `iptables-save -t <table>` when an operation
//! needs to know what is there, and applies all of an operation's changes
//! with one `iptables-restore --noflush --wait` (`ip6tables-*` for IPv6).
//! Never one process per rule.
//!
//! Rules are written in the canonical form `iptables-save` prints (option
//! order, quoting), so a rule we would add can be compared with the saved
//! lines as strings. In a restore file, declaring a user chain
//! (`:NAME - [0:0]`) flushes it if it exists: shared chains are declared
//! only when missing.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use crate::{Error, IpFamily, Result};

/// Seconds `iptables-restore` waits for the xtables lock (legacy backend).
const LOCK_WAIT_SECONDS: &str = "5";

/// The `iptables` command of `family`, for messages.
pub fn program(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "iptables",
        IpFamily::V6 => "ip6tables",
    }
}

/// The `iptables-save` of `family`.
fn save_program(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "iptables-save",
        IpFamily::V6 => "ip6tables-save",
    }
}

/// The `iptables-restore` of `family`.
fn restore_program(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "iptables-restore",
        IpFamily::V6 => "ip6tables-restore",
    }
}

/// The multicast range of `family`, which ipMasq leaves alone.
pub fn multicast(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "224.0.0.0/4",
        IpFamily::V6 => "ff00::/8",
    }
}

/// An iptables table the suite writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IptTable {
    Nat,
    Filter,
}

impl IptTable {
    pub fn as_str(self) -> &'static str {
        match self {
            IptTable::Nat => "nat",
            IptTable::Filter => "filter",
        }
    }
}

/// One table as `iptables-save -t <table>` printed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedTable {
    /// Every chain, built-in and user-defined.
    pub chains: BTreeSet<String>,
    /// Every rule line (`-A CHAIN ...`), in order.
    pub rules: Vec<String>,
}

impl SavedTable {
    /// Parses `iptables-save` output (of one table).
    pub fn parse(text: &str) -> SavedTable {
        let mut t = SavedTable::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(':') {
                if let Some(name) = rest.split_whitespace().next() {
                    t.chains.insert(name.to_string());
                }
            } else if line.starts_with("-A ") {
                t.rules.push(line.to_string());
            }
        }
        t
    }

    pub fn has_chain(&self, chain: &str) -> bool {
        self.chains.contains(chain)
    }

    pub fn has_rule(&self, line: &str) -> bool {
        self.rules.iter().any(|r| r == line)
    }

    /// The rules of `chain`.
    pub fn rules_of<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a String> + 'a {
        self.rules
            .iter()
            .filter(move |r| rule_chain(r) == Some(chain))
    }

    /// The rules of `chain` that jump to `target` (`-j target` last).
    pub fn jumps_to<'a>(&'a self, chain: &'a str, target: &'a str) -> Vec<&'a String> {
        self.rules_of(chain)
            .filter(|r| rule_target(r).as_deref() == Some(target))
            .collect()
    }
}

/// The chain of a rule line `-A CHAIN ...`.
pub fn rule_chain(line: &str) -> Option<&str> {
    line.strip_prefix("-A ")?.split_whitespace().next()
}

/// The `-j` target of a rule line.
pub fn rule_target(line: &str) -> Option<String> {
    let tokens = split_tokens(line);
    let i = tokens.iter().position(|t| t == "-j")?;
    tokens.get(i + 1).cloned()
}

/// The `--comment` of a rule line.
pub fn rule_comment(line: &str) -> Option<String> {
    let tokens = split_tokens(line);
    let i = tokens.iter().position(|t| t == "--comment")?;
    tokens.get(i + 1).cloned()
}

/// Splits a saved rule into its arguments, undoing `iptables-save`'s
/// quoting (`"..."` with `\"`, `\\` and `\'` escapes).
pub fn split_tokens(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_token = false;
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                }
                '"' => quoted = false,
                c => cur.push(c),
            }
            continue;
        }
        match c {
            '"' => {
                quoted = true;
                in_token = true;
            }
            c if c.is_whitespace() => {
                if in_token {
                    out.push(std::mem::take(&mut cur));
                    in_token = false;
                }
            }
            c => {
                cur.push(c);
                in_token = true;
            }
        }
    }
    if in_token {
        out.push(cur);
    }
    out
}

/// Quotes one argument as `iptables-save` does (`xtables_save_string`):
/// bare when it is only letters, digits, `_` and `-`, else in double
/// quotes with `"`, `\` and `'` escaped.
pub fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        return arg.to_string();
    }
    let mut s = String::with_capacity(arg.len() + 2);
    s.push('"');
    for c in arg.chars() {
        if matches!(c, '"' | '\\' | '\'') {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
    s
}

/// A rule line `-A chain args...`, quoting arguments that need it (the
/// canonical form when `args` follow `iptables-save`'s order).
pub fn rule_line(chain: &str, args: &[&str]) -> String {
    let mut s = format!("-A {chain}");
    for a in args {
        s.push(' ');
        // Addresses, ports and names are printed bare; only free text
        // (comments) needs quotes.
        let needs_quotes = a.is_empty()
            || a.chars()
                .any(|c| c.is_whitespace() || matches!(c, '"' | '\\' | '\''));
        if needs_quotes {
            s.push_str(&quote(a));
        } else {
            s.push_str(a);
        }
    }
    s
}

/// The changes of one operation on one table of one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    table: IptTable,
    declared: BTreeSet<String>,
    lines: Vec<String>,
}

impl Restore {
    pub fn new(table: IptTable) -> Restore {
        Restore {
            table,
            declared: BTreeSet::new(),
            lines: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.declared.is_empty() && self.lines.is_empty()
    }

    /// Declares a chain: creates it, or flushes it if it exists.
    pub fn declare(&mut self, chain: &str) {
        self.declared.insert(chain.to_string());
    }

    /// The declared chains (created, or flushed where they exist).
    pub fn declared(&self) -> impl Iterator<Item = &String> {
        self.declared.iter()
    }

    /// Creates a chain with `-N`: unlike [`Restore::declare`] it never
    /// flushes, and the restore fails if the chain exists meanwhile.
    pub fn create_chain(&mut self, chain: &str) {
        self.lines.push(format!("-N {chain}"));
    }

    /// Appends a rule line (`-A ...`).
    pub fn append(&mut self, line: String) {
        self.lines.push(line);
    }

    /// Inserts a rule line (`-A CHAIN ...`) at the top of its chain.
    pub fn insert_first(&mut self, line: &str) {
        if let Some(rest) = line.strip_prefix("-A ") {
            let (chain, args) = rest.split_once(' ').unwrap_or((rest, ""));
            self.lines.push(format!("-I {chain} 1 {args}"));
        }
    }

    /// Deletes a rule given as a saved line (`-A ...`).
    pub fn delete(&mut self, saved: &str) {
        if let Some(rest) = saved.strip_prefix("-A ") {
            self.lines.push(format!("-D {rest}"));
        }
    }

    /// Flushes and deletes a user chain (its references must go first).
    pub fn remove_chain(&mut self, chain: &str) {
        self.lines.push(format!("-F {chain}"));
        self.lines.push(format!("-X {chain}"));
    }

    /// The command lines (`-N`, `-I`, `-A`, `-D`, `-F`, `-X`), in order
    /// (what a backend that writes nf_tables itself translates).
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The input of `iptables-restore`.
    pub fn render(&self) -> String {
        let mut s = format!("*{}\n", self.table.as_str());
        for c in &self.declared {
            s.push_str(&format!(":{c} - [0:0]\n"));
        }
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s.push_str("COMMIT\n");
        s
    }
}

/// One change of `table` in `family` by the programs: one `iptables-save`,
/// the lines `build` decides on against what it shows, one
/// `iptables-restore` of them (none when `build` adds nothing).
pub fn save_and_restore(
    family: IpFamily,
    table: IptTable,
    build: impl FnOnce(&SavedTable, &mut Restore),
) -> Result<()> {
    let saved = save(family, table)?;
    let mut r = Restore::new(table);
    build(&saved, &mut r);
    restore(family, &r)
}

/// Reads `table` (`iptables-save -t <table>`).
pub fn save(family: IpFamily, table: IptTable) -> Result<SavedTable> {
    crate::calllog::timed(crate::calllog::Step::Netfilter, || {
        save_untimed(family, table)
    })
}

fn save_untimed(family: IpFamily, table: IptTable) -> Result<SavedTable> {
    let cmd = save_program(family);
    let table = table.as_str();
    let out = Command::new(cmd)
        .args(["-t", table])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::kernel(format!("run {cmd}"), e))?;
    if !out.status.success() {
        return Err(Error::kernel(
            format!("{cmd} -t {table}"),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        ));
    }
    Ok(SavedTable::parse(&String::from_utf8_lossy(&out.stdout)))
}

/// Applies `r` with one `iptables-restore --noflush --wait` (nothing is run
/// when `r` is empty). The restore is atomic: a failing line applies none.
pub fn restore(family: IpFamily, r: &Restore) -> Result<()> {
    crate::calllog::timed(crate::calllog::Step::Netfilter, || {
        restore_untimed(family, r)
    })
}

fn restore_untimed(family: IpFamily, r: &Restore) -> Result<()> {
    if r.is_empty() {
        return Ok(());
    }
    let cmd = restore_program(family);
    let input = r.render();
    let mut child = Command::new(cmd)
        .args(["--noflush", "--wait", LOCK_WAIT_SECONDS])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::kernel(format!("run {cmd}"), e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| Error::kernel(format!("write to {cmd}"), e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::kernel(format!("wait for {cmd}"), e))?;
    if !out.status.success() {
        return Err(Error::kernel(
            format!("{cmd} --noflush"),
            std::io::Error::other(format!(
                "{} (input: {})",
                String::from_utf8_lossy(&out.stderr).trim(),
                input.replace('\n', "; ")
            )),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_iptables_quoting_matches_iptables_save() {
        assert_eq!(quote("CNI-DN-abc"), "CNI-DN-abc");
        assert_eq!(
            quote("dnat name: \"n\" id: \"c\""),
            "\"dnat name: \\\"n\\\" id: \\\"c\\\"\""
        );
        let line = rule_line(
            "CNI-HOSTPORT-DNAT",
            &[
                "-p",
                "tcp",
                "-m",
                "comment",
                "--comment",
                "dnat name: \"n\" id: \"c\"",
                "-j",
                "X",
            ],
        );
        assert_eq!(
            line,
            "-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"n\\\" id: \\\"c\\\"\" -j X"
        );
        let tokens = split_tokens(&line);
        assert_eq!(tokens[7], "dnat name: \"n\" id: \"c\"");
        assert_eq!(
            rule_comment(&line).as_deref(),
            Some("dnat name: \"n\" id: \"c\"")
        );
        assert_eq!(rule_target(&line).as_deref(), Some("X"));
        assert_eq!(rule_chain(&line), Some("CNI-HOSTPORT-DNAT"));
    }

    #[test]
    fn netfilter_iptables_save_output_is_parsed() {
        let t = SavedTable::parse(
            "# Generated\n*nat\n:PREROUTING ACCEPT [0:0]\n:CNI-X - [0:0]\n\
             -A PREROUTING -m addrtype --dst-type LOCAL -j CNI-X\n-A CNI-X -j MASQUERADE\nCOMMIT\n",
        );
        assert!(t.has_chain("CNI-X") && t.has_chain("PREROUTING"));
        assert_eq!(t.jumps_to("PREROUTING", "CNI-X").len(), 1);
        assert_eq!(t.rules_of("CNI-X").count(), 1);
        let mut r = Restore::new(IptTable::Nat);
        r.declare("CNI-Y");
        r.delete(&t.rules[0]);
        r.insert_first("-A POSTROUTING -j CNI-Y");
        r.remove_chain("CNI-X");
        assert_eq!(
            r.render(),
            "*nat\n:CNI-Y - [0:0]\n-D PREROUTING -m addrtype --dst-type LOCAL -j CNI-X\n\
             -I POSTROUTING 1 -j CNI-Y\n-F CNI-X\n-X CNI-X\nCOMMIT\n"
        );
        let mut r = Restore::new(IptTable::Filter);
        r.create_chain("CNI-FORWARD");
        r.insert_first("-A FORWARD -j CNI-FORWARD");
        assert_eq!(
            r.render(),
            "*filter\n-N CNI-FORWARD\n-I FORWARD 1 -j CNI-FORWARD\nCOMMIT\n"
        );
    }
}
