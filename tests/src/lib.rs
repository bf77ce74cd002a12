//! Black-box test harness: throwaway network namespaces, the built plugin
//! binaries, our `cnitool` and the upstream Go libcni's `go-cnitool`.
//!
//! Every privileged test works inside namespaces it made: a "node" that
//! plays the host (plugins and cnitool run there, so bridges, sysctls and
//! firewall rules never touch the real root namespace) and "pods" beside
//! it. Names carry a per-run prefix and a counter, so tests run in
//! parallel; a guard deletes each namespace on drop, after a panic too.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Prefix of every namespace the tests create; the test script fails the
/// suite if any is left afterwards.
pub const NETNS_PREFIX: &str = "cnit-";

/// True when this test may run privileged work. Not root: says so loudly
/// and returns false, except under `CI=true`, where skipping is a failure.
pub fn require_root(test: &str) -> bool {
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: privileged test cannot run without root in CI");
    }
    eprintln!("!!! SKIPPED {test}: needs root (run the suite as root) !!!");
    false
}

/// The directory holding the built binaries (`target/<profile>`).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CNI_TEST_BIN_DIR") {
        return PathBuf::from(d);
    }
    // Test executables live in target/<profile>/deps.
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// Path of one of our built binaries; panics with a hint when missing.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} is not built: run `cargo build --workspace` first (the test script does)",
        p.display()
    );
    p
}

/// Where the Go reference plugins are (Debian's containernetworking-plugins).
pub const GO_PLUGIN_DIR: &str = "/usr/lib/cni";

/// The Go reference plugin `name`, or `None` (said loudly) when not
/// installed; under `CI=true` a missing reference is a failure.
pub fn go_plugin(name: &str) -> Option<PathBuf> {
    let p = Path::new(GO_PLUGIN_DIR).join(name);
    if p.is_file() {
        return Some(p);
    }
    required_tool_missing(&format!("Go reference plugin {}", p.display()));
    None
}

/// The `go-cnitool` built on the upstream Go libcni, or `None` (loudly).
pub fn go_cnitool() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("GO_CNITOOL").map(PathBuf::from),
        Some(PathBuf::from("/usr/local/bin/go-cnitool")),
    ];
    for c in candidates.into_iter().flatten() {
        if c.is_file() {
            return Some(c);
        }
    }
    required_tool_missing("go-cnitool (../shared/tools/go-cnitool/build.sh)");
    None
}

fn required_tool_missing(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is missing; the test script installs it in CI");
    }
    eprintln!("!!! SKIPPED part of this test: {what} is not installed !!!");
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A throwaway network namespace, deleted on drop.
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `cnit-<pid>-<n>-<tag>` with its loopback down, as new
    /// namespaces are.
    pub fn new(tag: &str) -> Netns {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("{NETNS_PREFIX}{}-{n}-{tag}", std::process::id());
        run_ok(Command::new("ip").args(["netns", "add", &name]));
        Netns { name }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bind-mounted namespace file, what `CNI_NETNS` carries.
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// A command that runs `program` inside this namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `ip <args>` inside the namespace and returns stdout; panics on failure.
    pub fn ip(&self, args: &[&str]) -> String {
        let out = run_ok(self.command("ip").args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `ip -j <args>` parsed.
    pub fn ip_json(&self, args: &[&str]) -> Value {
        let mut a = vec!["-j"];
        a.extend_from_slice(args);
        let s = self.ip(&a);
        serde_json::from_str(if s.trim().is_empty() { "[]" } else { &s })
            .unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {s}"))
    }

    /// The link `name` as `ip -j -d link show` prints it, if it exists.
    pub fn link(&self, name: &str) -> Option<Value> {
        let out = self
            .command("ip")
            .args(["-j", "-d", "link", "show", "dev", name])
            .output()
            .expect("ip");
        if !out.status.success() {
            return None;
        }
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        v.as_array()?.first().cloned()
    }

    /// True if the link `name` is administratively up.
    pub fn link_is_up(&self, name: &str) -> bool {
        self.link(name)
            .and_then(|l| l["flags"].as_array().cloned())
            .is_some_and(|f| f.iter().any(|x| x == "UP"))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// A temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("cnit-{}-{n}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `name` inside the directory.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).expect("write");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a command, panicking with its output when it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What one plugin call printed and how it exited.
#[derive(Debug)]
pub struct PluginOutput {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl PluginOutput {
    /// stdout parsed as JSON (a result or an error).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    /// Asserts a spec error with `code` whose message contains `needle`.
    pub fn assert_error(&self, code: u64, needle: &str) {
        assert_ne!(self.exit_code, 0, "expected failure: {self:?}");
        let v = self.json();
        assert_eq!(v["code"].as_u64(), Some(code), "{v}");
        let text = format!(
            "{} {}",
            v["msg"].as_str().unwrap_or_default(),
            v["details"].as_str().unwrap_or_default()
        );
        assert!(text.contains(needle), "{needle:?} not in {v}");
    }
}

/// Calls a plugin binary directly with `env` (only these `CNI_*` are set)
/// and `stdin`, optionally inside namespace `ns`.
pub fn call_plugin(
    ns: Option<&Netns>,
    plugin: &Path,
    env: &[(&str, &str)],
    stdin: &str,
) -> PluginOutput {
    use std::io::Write;
    let mut cmd = match ns {
        Some(ns) => ns.command(plugin),
        None => Command::new(plugin),
    };
    for k in [
        "CNI_COMMAND",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_ARGS",
        "CNI_PATH",
    ] {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{plugin:?}: {e}"));
    // A plugin may answer (an env error, VERSION) without reading stdin.
    if let Err(e) = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
    {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    let out = child.wait_with_output().expect("wait");
    PluginOutput {
        exit_code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A node namespace with a conf dir and a result cache dir, where a
/// cnitool runs chains against pod namespaces.
pub struct Node {
    pub ns: Netns,
    pub conf_dir: TempDir,
    pub cache_dir: TempDir,
}

impl Node {
    pub fn new(tag: &str) -> Node {
        Node {
            ns: Netns::new(&format!("node-{tag}")),
            conf_dir: TempDir::new(&format!("conf-{tag}")),
            cache_dir: TempDir::new(&format!("cache-{tag}")),
        }
    }

    /// Writes a conflist into the conf dir.
    pub fn write_conf(&self, file: &str, json: &Value) -> PathBuf {
        self.conf_dir
            .write(file, &serde_json::to_string_pretty(json).expect("json"))
    }

    /// Runs `tool` (our cnitool or go-cnitool) in the node namespace with
    /// our plugins on `CNI_PATH`, plus `extra_env`.
    pub fn cnitool_with(
        &self,
        tool: &Path,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> PluginOutput {
        let mut cmd = self.ns.command(tool);
        cmd.args(args)
            .env("NETCONFPATH", self.conf_dir.path())
            .env("CNI_PATH", bin_dir())
            .env("CNI_CACHE_DIR", self.shared_cache_dir())
            .env_remove("CNI_ARGS")
            .env_remove("CAP_ARGS")
            .env_remove("CNI_IFNAME")
            .env_remove("CNI_CONTAINERID")
            .envs(extra_env.iter().copied());
        let out = cmd.output().unwrap_or_else(|e| panic!("{tool:?}: {e}"));
        PluginOutput {
            exit_code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Our cnitool: `cnitool <verb> <net> <pod netns path>`.
    pub fn cnitool(&self, verb: &str, net: &str, pod: &Netns) -> PluginOutput {
        let path = pod.path();
        self.cnitool_with(
            &bin("cnitool"),
            &[verb, net, path.to_str().expect("utf8")],
            &[],
        )
    }
}

impl Node {
    /// Runs `go-cnitool` (upstream Go libcni) in the node namespace. Go
    /// libcni always caches under `/var/lib/cni`: inside the private mount
    /// namespace `ip netns exec` makes, the node's cache dir is bind-mounted
    /// on `/var/lib`, so the real `/var/lib/cni` is never touched and both
    /// tools share one cache (`<cache_dir>/cni/results`).
    pub fn go_cnitool(
        &self,
        tool: &Path,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> PluginOutput {
        let mut full = vec![
            "-c",
            "mount --bind \"$CNIT_CACHE\" /var/lib && exec \"$@\"",
            "sh",
            tool.to_str().expect("utf8"),
        ];
        full.extend_from_slice(args);
        let cache = self.cache_dir.path().to_str().expect("utf8").to_string();
        let mut env: Vec<(&str, &str)> = vec![("CNIT_CACHE", &cache)];
        env.extend_from_slice(extra_env);
        self.cnitool_with(Path::new("/bin/sh"), &full, &env)
    }

    /// The cache dir as both tools use it: ours takes `CNI_CACHE_DIR`
    /// (`<cache_dir>/cni`), Go's sees `/var/lib/cni` there.
    pub fn shared_cache_dir(&self) -> PathBuf {
        self.cache_dir.path().join("cni")
    }
}
