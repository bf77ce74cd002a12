//! Black-box test harness: throwaway network namespaces, the built plugin
//! binaries, our `cnitool` and the upstream Go libcni's `go-cnitool`.
//!
//! Every privileged test works inside namespaces it made: a "node" that
//! plays the host (plugins and cnitool run there, so bridges, sysctls and
//! firewall rules never touch the real root namespace) and "pods" beside
//! it. Names carry a per-run prefix and a counter, so tests run in
//! parallel; a guard deletes each namespace on drop, after a panic too.

pub mod containerd;
pub mod firewalld;
pub mod podman;
pub mod release;
pub mod topology;
pub mod traffic;

pub use firewalld::PrivateBus;
pub use libcni::IpFamily;
pub use topology::*;
pub use traffic::*;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Prefix of every namespace the tests create; the test script fails the
/// suite if any is left afterwards.
pub const NETNS_PREFIX: &str = "cnit-";

/// The privileged-test policy, one for unit and black-box tests: root, or
/// a loud skip (a failure under `CI=true`); `full_kernel` adds the kernel
/// the `fullkernel_*` tests need, else they run in the VM step.
pub use libcni::netlink::testing::{full_kernel, kernel_is_full};
pub use libcni::netns::testing::privileged as require_root;

/// The directory holding the binaries under test: `CNI_TEST_BIN_DIR`
/// (e.g. the multicall form's, `scripts/multicall-bin.sh`), else the
/// build's [`build_dir`].
pub fn bin_dir() -> PathBuf {
    match std::env::var_os("CNI_TEST_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => build_dir(),
    }
}

/// The directory cargo built the binaries into (`target/<profile>`), both
/// forms: the plugins' own binaries and the multicall `cni-rs`.
pub fn build_dir() -> PathBuf {
    // Test executables live in target/<profile>/deps.
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// `ip`'s option that selects `family`: `-4` or `-6`.
pub fn ip_option(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "-4",
        IpFamily::V6 => "-6",
    }
}

/// The node's iptables program of `family` with `suffix` (`-save`,
/// `-legacy-save`, or none): `ip6tables-save` for IPv6 and `-save`.
pub fn iptables_program(family: IpFamily, suffix: &str) -> String {
    format!("{}{suffix}", libcni::netfilter::iptables::program(family))
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

/// The name the test harness gives test `name` of module `module` (its
/// `module_path!()`): the path without the crate, as `--exact` wants it.
/// Every file of `tests/tests/` is a module of the one `suite` binary.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// Where the Go reference plugins are (Debian's containernetworking-plugins).
pub const GO_PLUGIN_DIR: &str = "/usr/lib/cni";

/// The Go reference plugin `name` (Debian's package, which the test script
/// installs); a missing one fails the test.
pub fn go_plugin(name: &str) -> Option<PathBuf> {
    let p = Path::new(GO_PLUGIN_DIR).join(name);
    assert!(
        p.is_file(),
        "the Go reference plugin {} is missing: install containernetworking-plugins \
         (scripts/test.sh does)",
        p.display()
    );
    Some(p)
}

/// Whether `CNI_TEST_SKIP` (a comma-separated list, see `scripts/deps.sh`)
/// names `step`: the one way to leave a step out on purpose. Says so
/// loudly; under `CI=true` it is a failure, since CI runs every step.
pub fn step_skipped(step: &str) -> bool {
    let skipped =
        std::env::var("CNI_TEST_SKIP").is_ok_and(|v| v.split(',').any(|s| s.trim() == step));
    if skipped {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CNI_TEST_SKIP names {step} under CI=true: CI runs every step"
        );
        eprintln!("!!! SKIPPED part of this test: CNI_TEST_SKIP names {step} !!!");
    }
    skipped
}

/// The Go client `name` built from `tests/go/<name>` by
/// `scripts/deps.sh` (`ensure_go_clients`) into `target/go-clients/`, or
/// `None` when `CNI_TEST_SKIP` names `go-clients`. Missing otherwise, the
/// test fails saying how to build it.
pub fn go_client(name: &str) -> Option<PathBuf> {
    if step_skipped("go-clients") {
        return None;
    }
    let dir = std::env::var_os("CNI_TEST_GO_CLIENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/go-clients"));
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "the Go client {} is not built: run ./scripts/test.sh, or build it alone with \
         `bash -c '. scripts/deps.sh; repo=$PWD ensure_go_clients'`",
        p.display()
    );
    Some(p)
}

/// `go-cnitool`: a cnitool on the upstream Go libcni (`tests/go/go-cnitool`).
pub fn go_cnitool() -> Option<PathBuf> {
    go_client("go-cnitool")
}

/// `go-cni-cri`: containerd's go-cni library driven as containerd 1.6's CRI
/// plugin drives it for kubelet (`tests/go/go-cni-cri`).
pub fn go_cni_cri() -> Option<PathBuf> {
    go_client("go-cni-cri")
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

    /// A command that runs `program` inside this namespace. It sees no
    /// D-Bus system bus ([`firewalld::NO_BUS`]): no test reaches the
    /// machine's (tests with a firewalld use a [`PrivateBus`]).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name])
            .arg(program)
            .env("DBUS_SYSTEM_BUS_ADDRESS", firewalld::NO_BUS);
        c
    }

    /// A command that runs plugin or runtime `program` inside this
    /// namespace, in a private mount namespace (the one `ip netns exec`
    /// makes) where `/run/cni` is this namespace's own directory
    /// ([`Netns::run_dir`]: the plugins' lock files and rule ledgers never
    /// land in the machine's `/run/cni`), and where `/etc` carries the
    /// files [`Netns::etc_file`] put there (an overlay: the real `/etc` is
    /// never written).
    pub fn plugin_command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let run = self.run_dir();
        std::fs::create_dir_all(&run).expect("create the namespace's /run/cni");
        // The mount point; an empty directory, made once per machine.
        std::fs::create_dir_all("/run/cni").expect("create /run/cni");
        let etc = self.etc_dir();
        let script = "mount --bind \"$0\" /run/cni || exit 97; \
             if [ -d \"$CNIT_ETC/upper\" ]; then \
             mount -t overlay overlay -o \"lowerdir=/etc,upperdir=$CNIT_ETC/upper,workdir=$CNIT_ETC/work\" /etc || exit 98; fi; \
             exec \"$@\"";
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, "sh", "-c", script])
            .arg(&run)
            .arg(program)
            .env("CNIT_ETC", &etc)
            .env("DBUS_SYSTEM_BUS_ADDRESS", firewalld::NO_BUS);
        c
    }

    /// What `/run/cni` is for the plugins run by [`Netns::plugin_command`].
    pub fn run_dir(&self) -> PathBuf {
        std::env::temp_dir().join(format!("{}run", self.name))
    }

    fn etc_dir(&self) -> PathBuf {
        std::env::temp_dir().join(format!("{}etc", self.name))
    }

    /// Puts `contents` at `/etc/<rel>` for the plugins run in this
    /// namespace (by [`Netns::plugin_command`]), through an overlay of the
    /// real `/etc`, which is never written.
    pub fn etc_file(&self, rel: &str, contents: &str) {
        let etc = self.etc_dir();
        let path = etc.join("upper").join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create overlay dirs");
        std::fs::create_dir_all(etc.join("work")).expect("create overlay work dir");
        std::fs::write(&path, contents).expect("write overlay file");
    }

    /// Runs `cmd` (built, not started) inside this namespace: started from
    /// a thread that entered it (`setns`), so the child begins there. One
    /// exec, and no private mount namespace or `/sys` of its own (what `ip
    /// netns exec` adds): for programs that speak netlink and read
    /// `/proc/sys/net` only (`ip`, `tc`, `nft`, `ping`, the plugins). Under
    /// the full-kernel VM's emulation each exec costs a good part of a
    /// second.
    pub fn output_in(&self, cmd: &mut Command) -> std::io::Result<Output> {
        use std::os::fd::AsRawFd;
        let ns = std::fs::File::open(self.path())?;
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: setns on this thread only (it ends right after the
                // child is started and waited for); the fd is valid.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                cmd.output()
            })
            .join()
            .expect("setns thread")
        })
    }

    /// Runs `ip <args>` inside the namespace and returns stdout; panics on failure.
    pub fn ip(&self, args: &[&str]) -> String {
        // `ip -n` enters the namespace itself: one exec.
        let out = run_ok(Command::new("ip").arg("-n").arg(&self.name).args(args));
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
        let out = Command::new("ip")
            .args(["-n", &self.name, "-j", "-d", "link", "show", "dev", name])
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
        let _ = std::fs::remove_dir_all(self.run_dir());
        let _ = std::fs::remove_dir_all(self.etc_dir());
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

    /// Writes `name` inside the directory, mode 0755 (a script plugin).
    pub fn write_executable(&self, name: &str, contents: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.write(name, contents);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
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

/// `cmd.output()` of a program this test process just wrote (see
/// `retrying_busy`).
pub fn output_of_written_program(cmd: &mut Command) -> std::io::Result<Output> {
    retrying_busy(|| cmd.output())
}

/// `exec` of a program this test process just wrote (a copied binary):
/// while another test thread forks, its child holds the file open for
/// writing until it execs, and exec fails with ETXTBSY ("Text file busy");
/// retried, bounded.
fn retrying_busy<T>(mut exec: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    let mut attempts = 0;
    loop {
        match exec() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 50 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
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

    /// Asserts success with nothing on stdout (DEL, CHECK, GC, STATUS).
    pub fn assert_silent_ok(&self) {
        assert_eq!(
            (self.exit_code, self.stdout.as_str()),
            (0, ""),
            "expected success without output: {self:?}"
        );
    }

    /// Asserts success and returns the result JSON (ADD).
    pub fn result(&self) -> Value {
        assert_eq!(self.exit_code, 0, "expected success: {self:?}");
        self.json()
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
    let cmd = match ns {
        Some(ns) => ns.plugin_command(plugin),
        None => {
            let mut c = Command::new(plugin);
            c.env("DBUS_SYSTEM_BUS_ADDRESS", firewalld::NO_BUS);
            c
        }
    };
    call_plugin_cmd(cmd, env, stdin)
}

/// [`call_plugin`] with the command that runs the plugin already built
/// (e.g. inside a [`PrivateBus`]'s namespaces).
pub fn call_plugin_cmd(mut cmd: Command, env: &[(&str, &str)], stdin: &str) -> PluginOutput {
    use std::io::Write;
    let plugin = format!("{:?}", cmd.get_program());
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
    // The program may be a copy a test just wrote (the multicall tests').
    let mut child = retrying_busy(|| cmd.spawn()).unwrap_or_else(|e| panic!("{plugin:?}: {e}"));
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

/// [`call_plugin`] started from a thread inside `ns`
/// ([`Netns::output_in`]: one exec, no private mount namespace), for the
/// full-kernel tests, where each exec is expensive.
pub fn call_plugin_entered(
    ns: &Netns,
    plugin: &Path,
    env: &[(&str, &str)],
    stdin: &str,
) -> PluginOutput {
    let input = TempDir::new("stdin");
    let file = input.write("stdin", stdin);
    let mut cmd = Command::new(plugin);
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
        .stdin(std::fs::File::open(&file).expect("stdin file"));
    let out = ns
        .output_in(&mut cmd)
        .unwrap_or_else(|e| panic!("{plugin:?}: {e}"));
    PluginOutput {
        exit_code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// One plugin call in `node` with exactly these `CNI_*` variables
/// (`CNI_IFNAME` eth0) plus `extra`: `PluginCall { .. }.run()`.
pub struct PluginCall<'a> {
    pub node: &'a Netns,
    pub plugin: &'a Path,
    pub cni_path: &'a str,
    /// `CNI_COMMAND`.
    pub command: &'a str,
    /// `CNI_NETNS`; `None` sends it empty.
    pub netns: Option<PathBuf>,
    pub container_id: &'a str,
    pub conf: &'a Value,
    /// More variables (`CNI_ARGS`, `CNI_FAULT_POINT`, ...).
    pub extra: &'a [(&'a str, &'a str)],
}

impl PluginCall<'_> {
    pub fn run(&self) -> PluginOutput {
        let netns = self
            .netns
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let mut env = vec![
            ("CNI_COMMAND", self.command),
            ("CNI_CONTAINERID", self.container_id),
            ("CNI_NETNS", netns.as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", self.cni_path),
        ];
        env.extend_from_slice(self.extra);
        call_plugin(Some(self.node), self.plugin, &env, &self.conf.to_string())
    }
}

/// One call of a chained plugin (`plugin`, ours or Go's) in `node` for
/// `eth0` of `netns`, with `CNI_PATH` /opt/cni/bin.
pub fn call_eth0(
    plugin: &Path,
    node: &Netns,
    cmd: &str,
    cid: &str,
    netns: &str,
    stdin: &str,
) -> PluginOutput {
    call_plugin(
        Some(node),
        plugin,
        &[
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        stdin,
    )
}

/// Asserts that a plugin call exited 0.
pub fn assert_ok(out: &PluginOutput) {
    assert_eq!(out.exit_code, 0, "{out:?}");
}

/// The addresses host-local holds in its network directory `dir`, sorted
/// (none when `dir` does not exist).
pub fn leases_in(dir: &Path) -> Vec<String> {
    lease_files_in(dir)
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// host-local's lease files in `dir` with their content, sorted: neither
/// `lock`, `last_reserved_ip.*` nor the index links (checked on the way:
/// see [`index_links_in`]).
pub fn lease_files_in(dir: &Path) -> Vec<(String, String)> {
    let links = index_links_in(dir);
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
                .filter(|n| !links.contains(n))
                .map(|n| {
                    let content = std::fs::read_to_string(dir.join(&n)).unwrap_or_default();
                    (n, content)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Our host-local's index links in `dir` (`.held-by-<hash>-<address>`),
/// sorted, asserting that each is its lease under a second name (a hard
/// link), never a stale one: what the plugin guarantees after any verb.
pub fn index_links_in(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut links: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".held-by-"))
                .collect()
        })
        .unwrap_or_default();
    links.sort();
    let ino = |n: &str| std::fs::symlink_metadata(dir.join(n)).map(|m| m.ino()).ok();
    for link in &links {
        let addr = link.rsplit_once('-').expect("-<address>").1;
        assert!(
            ino(addr).is_some() && ino(addr) == ino(link),
            "index link {link} is not the lease {addr} in {}",
            dir.display()
        );
    }
    links
}

/// Sets each key of the object `extra` on the object `base`.
pub fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            b.insert(k, v);
        }
    }
}

/// True when `v` is a string `xx:xx:xx:xx:xx:xx` of hex pairs.
pub fn is_mac(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() == 17
            && s.split(':')
                .all(|p| p.len() == 2 && u8::from_str_radix(p, 16).is_ok())
    })
}

/// Waits (bounded, 5 s) until `cond` holds; for state the kernel changes
/// asynchronously, such as links deleted with a namespace.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `address/prefix` of the global addresses of `dev` in `ns`, sorted.
pub fn global_addrs(ns: &Netns, dev: &str) -> Vec<String> {
    let v = ns.ip_json(&["addr", "show", "dev", dev]);
    let mut out: Vec<String> = v[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["scope"] == "global")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect();
    out.sort();
    out
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
        self.cnitool_in(None, tool, args, extra_env)
    }

    /// [`Node::cnitool_with`], inside `bus`'s namespaces when given (the
    /// node's network namespace and a private system bus).
    pub fn cnitool_in(
        &self,
        bus: Option<&PrivateBus>,
        tool: &Path,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> PluginOutput {
        let mut cmd = match bus {
            Some(b) => b.command(tool),
            None => self.ns.plugin_command(tool),
        };
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
        self.go_cnitool_in(None, tool, args, extra_env)
    }

    /// [`Node::go_cnitool`], inside `bus`'s namespaces when given (then in
    /// a mount namespace of its own below the bus's, for the bind mount).
    pub fn go_cnitool_in(
        &self,
        bus: Option<&PrivateBus>,
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
        match bus {
            None => self.cnitool_in(None, Path::new("/bin/sh"), &full, &env),
            Some(b) => {
                let mut wrapped = vec!["--mount", "--propagation", "private", "/bin/sh"];
                wrapped.extend_from_slice(&full);
                self.cnitool_in(Some(b), Path::new("unshare"), &wrapped, &env)
            }
        }
    }

    /// containerd's CRI path: `go-cni-cri <verb>` in the node namespace
    /// over the conf dir (loopback first, then its first conflist as the
    /// default network) with our plugins as the bin dir, for sandbox `id`
    /// in `pod` (`None`: an empty netns path, containerd's teardown after
    /// the namespace is gone), plus go-cni-cri's options in `extra`
    /// (`-port 8080:80/tcp`, `-ingress 10M`, ...). Like go-cnitool, Go
    /// libcni caches under `/var/lib/cni`: the node's cache dir is
    /// bind-mounted there, inside the mount namespace of `ip netns exec`.
    pub fn cri(
        &self,
        tool: &Path,
        verb: &str,
        pod: Option<&Netns>,
        id: &str,
        extra: &[&str],
    ) -> PluginOutput {
        self.cri_in(None, tool, verb, pod, id, extra)
    }

    /// [`Node::cri`], inside `bus`'s namespaces when given.
    pub fn cri_in(
        &self,
        bus: Option<&PrivateBus>,
        tool: &Path,
        verb: &str,
        pod: Option<&Netns>,
        id: &str,
        extra: &[&str],
    ) -> PluginOutput {
        let conf_dir = self.conf_dir.path().to_str().expect("utf8").to_string();
        let bin = bin_dir().to_str().expect("utf8").to_string();
        let netns = pod
            .map(|p| p.path().to_str().expect("utf8").to_string())
            .unwrap_or_default();
        let mut args = vec![
            verb, "-confdir", &conf_dir, "-bindir", &bin, "-netns", &netns, "-id", id,
        ];
        args.extend_from_slice(extra);
        self.go_cnitool_in(bus, tool, &args, &[])
    }

    /// The cache dir as both tools use it: ours takes `CNI_CACHE_DIR`
    /// (`<cache_dir>/cni`), Go's sees `/var/lib/cni` there.
    pub fn shared_cache_dir(&self) -> PathBuf {
        self.cache_dir.path().join("cni")
    }
}

// ---- campaigns (crash, soak, bad input, filesystem safety) ----------------

/// Everything of a namespace's network state that a plugin could leave
/// behind, normalised so that two snapshots of an unchanged namespace are
/// equal: counters, flags that follow the carrier, link indexes and the
/// lines iptables-save stamps with a date are left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetSnapshot {
    /// `name kind master=<name>`, sorted.
    pub links: Vec<String>,
    /// `dev address/len`, sorted.
    pub addrs: Vec<String>,
    /// `table type dst via dev`, sorted, every table but the kernel's
    /// link-local routes of the local table.
    pub routes: Vec<String>,
    /// `dev kind handle parent`, sorted.
    pub qdiscs: Vec<String>,
    /// `<family> <rule as ip -j rule shows it>`, sorted: policy routing
    /// rules (sbr's).
    pub rules: Vec<String>,
    /// `dev ingress|egress protocol pref kind match actions`, sorted: the
    /// tc filter rules of every link (bandwidth's and tc-redirect-tap's
    /// redirects), without handles, counters and a u32's hash tables.
    pub filters: Vec<String>,
    /// `nft list ruleset`, counters removed.
    pub nft: String,
    /// `iptables-save` and `ip6tables-save`, comments and counters removed.
    pub iptables: String,
}

/// Separates the outputs of one snapshot's commands.
const SNAPSHOT_MARK: &str = "=====cnit-snapshot=====";

impl NetSnapshot {
    /// Everything, firewall included.
    pub fn take(ns: &Netns) -> NetSnapshot {
        NetSnapshot::take_with(ns, true)
    }

    /// Links, addresses, routes and qdiscs, and the firewall when
    /// `firewall`; one process in the namespace (a shell) for all of it.
    pub fn take_with(ns: &Netns, firewall: bool) -> NetSnapshot {
        let mut cmds = vec![
            "ip -j -d link show",
            "ip -j addr show",
            "ip -4 -j route show table all",
            "ip -6 -j route show table all",
            "tc -j qdisc show",
            "ip -4 -j rule show",
            "ip -6 -j rule show",
            // Egress filters only under a clsact qdisc: under an ingress
            // one, `egress` lists the ingress filters again. The names come
            // from netlink: /sys is the mount of the namespace we were
            // started from, not the one we entered.
            "for d in $(ip -o link show | cut -d: -f2 | cut -d@ -f1); do \
             echo \"$d ingress $(tc -j filter show dev $d ingress)\"; \
             if tc qdisc show dev $d | grep -q '^qdisc clsact'; then \
             echo \"$d egress $(tc -j filter show dev $d egress)\"; fi; done",
        ];
        if firewall {
            cmds.extend(["nft list ruleset", "iptables-save", "ip6tables-save"]);
        }
        let script = cmds
            .iter()
            .map(|c| format!("{c} || exit 1; echo; echo {SNAPSHOT_MARK}"))
            .collect::<Vec<_>>()
            .join("; ");
        let out = ns
            .output_in(Command::new("sh").args(["-c", &script]))
            .expect("sh");
        assert!(out.status.success(), "snapshot of {}: {out:?}", ns.name());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let parts: Vec<&str> = text.split(&format!("{SNAPSHOT_MARK}\n")).collect();
        assert!(
            parts.len() > cmds.len(),
            "snapshot of {}: {text}",
            ns.name()
        );
        let json = |i: usize| -> Value {
            let t = parts[i].trim();
            serde_json::from_str(if t.is_empty() { "[]" } else { t })
                .unwrap_or_else(|e| panic!("{}: {e}: {t}", cmds[i]))
        };
        let s = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
        let mut links: Vec<String> = json(0)
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                format!(
                    "{} {} master={}",
                    s(l, "ifname"),
                    l["linkinfo"]["info_kind"].as_str().unwrap_or("-"),
                    l["master"].as_str().unwrap_or("-")
                )
            })
            .collect();
        links.sort();
        let mut addrs: Vec<String> = json(1)
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|l| {
                let dev = s(l, "ifname");
                l["addr_info"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |a| format!("{dev} {}/{}", s(&a, "local"), a["prefixlen"]))
            })
            .collect();
        addrs.sort();
        // The link-local routes of the local table come and go with a
        // bridge's carrier (its last port leaving); they are the kernel's,
        // never a plugin's.
        let kernel_link_local =
            |r: &Value| r["table"] == "local" && s(r, "dst").starts_with("fe80:");
        let mut routes: Vec<String> = [json(2), json(3)]
            .iter()
            .flat_map(|v| v.as_array().cloned().unwrap_or_default())
            .filter(|r| !kernel_link_local(r))
            .map(|r| {
                format!(
                    "{} {} {} via={} dev={}",
                    r["table"].as_str().unwrap_or("main"),
                    r["type"].as_str().unwrap_or("unicast"),
                    s(&r, "dst"),
                    r["gateway"].as_str().unwrap_or("-"),
                    r["dev"].as_str().unwrap_or("-")
                )
            })
            .collect();
        routes.sort();
        let mut qdiscs: Vec<String> = json(4)
            .as_array()
            .into_iter()
            .flatten()
            .map(|q| {
                format!(
                    "{} {} {} {}",
                    s(q, "dev"),
                    s(q, "kind"),
                    s(q, "handle"),
                    q["parent"].as_str().unwrap_or("root")
                )
            })
            .collect();
        qdiscs.sort();
        let mut rules: Vec<String> = [(5, 4), (6, 6)]
            .iter()
            .flat_map(|(i, family)| {
                json(*i)
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |r| format!("{family} {r}"))
            })
            .collect();
        rules.sort();
        let mut filters: Vec<String> = parts[7]
            .lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ' ');
                let (dev, hook) = (it.next()?, it.next()?);
                let list: Value = serde_json::from_str(it.next()?.trim()).ok()?;
                Some(
                    list.as_array()?
                        .iter()
                        .filter(|f| f["options"]["match"].is_object() || f["kind"] != "u32")
                        .filter(|f| f["options"].is_object())
                        .map(|f| {
                            let actions: Vec<String> = f["options"]["actions"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .map(|a| {
                                    format!(
                                        "{}:{}:{}:{}",
                                        s(a, "kind"),
                                        s(a, "mirred_action"),
                                        s(a, "direction"),
                                        s(a, "to_dev")
                                    )
                                })
                                .collect();
                            format!(
                                "{dev} {hook} {} {} {} match={} actions={}",
                                s(f, "protocol"),
                                f["pref"],
                                s(f, "kind"),
                                f["options"]["match"],
                                actions.join(",")
                            )
                        })
                        .collect::<Vec<_>>(),
                )
            })
            .flatten()
            .collect();
        filters.sort();
        let (nft, iptables) = if firewall {
            let mut ipt = String::new();
            for (i, tool) in [(9, "iptables-save"), (10, "ip6tables-save")] {
                ipt.push_str(&normalise_iptables_save(tool, parts[i]));
            }
            (normalise_nft(parts[8]), ipt)
        } else {
            Default::default()
        };
        NetSnapshot {
            links,
            addrs,
            routes,
            qdiscs,
            rules,
            filters,
            nft,
            iptables,
        }
    }

    /// The fields that differ from `other`, for a readable failure.
    pub fn diff(&self, other: &NetSnapshot) -> Vec<String> {
        let mut out = Vec::new();
        let mut list = |name: &str, a: &[String], b: &[String]| {
            for x in a.iter().filter(|x| !b.contains(x)) {
                out.push(format!("{name}: - {x}"));
            }
            for x in b.iter().filter(|x| !a.contains(x)) {
                out.push(format!("{name}: + {x}"));
            }
        };
        list("link", &self.links, &other.links);
        list("addr", &self.addrs, &other.addrs);
        list("route", &self.routes, &other.routes);
        list("qdisc", &self.qdiscs, &other.qdiscs);
        list("rule", &self.rules, &other.rules);
        list("filter", &self.filters, &other.filters);
        let lines = |t: &str| t.lines().map(str::to_string).collect::<Vec<_>>();
        list("nft", &lines(&self.nft), &lines(&other.nft));
        list("iptables", &lines(&self.iptables), &lines(&other.iptables));
        out
    }
}

fn normalise_nft(text: &str) -> String {
    text.lines()
        .map(strip_counters)
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn normalise_iptables_save(tool: &str, text: &str) -> String {
    let mut all = String::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let line = match (line.starts_with(':'), line.rfind(" [")) {
            (true, Some(i)) => &line[..i],
            _ => line,
        };
        all.push_str(tool);
        all.push(' ');
        all.push_str(line);
        all.push('\n');
    }
    all
}

/// Feeds `input` to `prog args` in `ns` (`nft -f -`, `iptables-restore
/// --noflush`); panics, with the program's stderr, on failure.
pub fn feed(ns: &Netns, prog: &str, args: &[&str], input: &str) {
    use std::io::Write;
    let mut child = ns
        .command(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{prog}: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{prog} {args:?}: {}\n{input}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The netlink expressions of every rule of chain `family table chain` in
/// `ns` (`nft --debug=netlink list chain`, the `[ ... ]` lines): what the
/// kernel holds, to compare our encoding with `nft`'s byte for byte.
pub fn nft_exprs(ns: &Netns, family: &str, table: &str, chain: &str) -> Vec<String> {
    let out =
        run_ok(
            ns.command("nft")
                .args(["--debug=netlink", "list", "chain", family, table, chain]),
        );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .filter(|l| l.trim_start().starts_with('['))
        .map(str::to_string)
        .collect()
}

/// `nft list ruleset` inside `ns`, with `counter packets N bytes M` and
/// empty lines dropped.
pub fn nft_ruleset(ns: &Netns) -> String {
    let out = run_ok(ns.command("nft").args(["list", "ruleset"]));
    normalise_nft(&String::from_utf8_lossy(&out.stdout))
}

fn strip_counters(line: &str) -> String {
    let mut out = Vec::new();
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w == "counter" && words.peek() == Some(&"packets") {
            // counter packets N bytes M
            for _ in 0..4 {
                words.next();
            }
            continue;
        }
        out.push(w);
    }
    out.join(" ")
}

/// `iptables-save` then `ip6tables-save` inside `ns` (every table), without
/// comment lines and with chain counters left out.
pub fn iptables_rules(ns: &Netns) -> String {
    let mut all = String::new();
    for tool in ["iptables-save", "ip6tables-save"] {
        let out = run_ok(&mut ns.command(tool));
        all.push_str(&normalise_iptables_save(
            tool,
            &String::from_utf8_lossy(&out.stdout),
        ));
    }
    all
}

/// [`tree`] less what host-local keeps between pods (its `lock` and
/// `last_reserved_ip.*` files): what a teardown must leave as it found it.
pub fn state_tree(dir: &Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|f| !f.ends_with("/lock") && !f.contains("last_reserved_ip"))
        .collect()
}

/// Every entry under `dir`, recursively, as `relative/path` (a trailing
/// `/` for a directory, ` -> target` for a symlink), sorted. Empty when
/// `dir` does not exist.
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(base)
                .map(|r| r.display().to_string())
                .unwrap_or_default();
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&p).unwrap_or_default();
                out.push(format!("{rel} -> {}", target.display()));
            } else if meta.is_dir() {
                out.push(format!("{rel}/"));
                walk(base, &p, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The permission bits of `p` (not following a symlink).
pub fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// The names of the links of `kind` (`veth`, `ifb`, `bridge`) in `ns`.
pub fn links_of_kind(ns: &Netns, kind: &str) -> Vec<String> {
    let mut v: Vec<String> = ns
        .ip_json(&["link", "show", "type", kind])
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| l["ifname"].as_str().unwrap_or_default().to_string())
        .collect();
    v.sort();
    v
}

/// How long a campaign runs: `var` in seconds when set (and a number),
/// else `default_secs`.
pub fn campaign_secs(var: &str, default_secs: u64) -> std::time::Duration {
    let secs = std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(default_secs);
    std::time::Duration::from_secs(secs)
}

/// The root of the source tree (the workspace), for tests that read it.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The files of the source tree whose names end in one of `suffixes`,
/// relative to its root and sorted; not the build's (`target`), git's, the
/// fuzz corpus' or cargo-fuzz's `artifacts`.
pub fn tree_files(suffixes: &[&str]) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, suffixes: &[&str], out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if p.is_dir() {
                if !matches!(name.as_str(), "target" | ".git" | "corpus" | "artifacts") {
                    walk(root, &p, suffixes, out);
                }
            } else if suffixes.iter().any(|x| name.ends_with(x)) {
                out.push(p.strip_prefix(root).expect("under the root").to_path_buf());
            }
        }
    }
    let root = workspace_root();
    let mut out = Vec::new();
    walk(&root, &root, suffixes, &mut out);
    out.sort();
    out
}

/// Every `fault::point("<name>")` under `<workspace>/<crate_dir>/src`,
/// sorted and deduplicated: the crash points a plugin declares.
pub fn fault_points_in(crate_dir: &str) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let mut rest = text.as_str();
                while let Some(i) = rest.find("fault::point(\"") {
                    rest = &rest[i + "fault::point(\"".len()..];
                    if let Some(end) = rest.find('"') {
                        out.push(rest[..end].to_string());
                        rest = &rest[end..];
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&workspace_root().join(crate_dir).join("src"), &mut out);
    out.sort();
    out.dedup();
    out
}
