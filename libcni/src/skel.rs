//! The plugin entry point ("skel"): reads `CNI_*` and stdin, validates them
//! as the spec says, gates verbs by version, dispatches to a [`Plugin`] and
//! prints the result or a spec error JSON. Nothing a plugin does can end the
//! process without a spec error JSON on stdout: errors and panics alike.

use crate::args::CniArgs;
use crate::calllog;
use crate::error::{Error, ErrorResult};
use crate::invoke::split_path_list;
use crate::netns::NetNs;
use crate::types::config::{validate_container_id, validate_ifname, validate_network_name};
use crate::types::{CniResult, NetConf};
use crate::version::{self, Version};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Largest stdin we accept: configs with a `prevResult` are small; anything
/// near this is an attack or a bug.
pub const MAX_STDIN: u64 = 16 << 20;

/// A CNI verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    /// The `CNI_*` variables the spec requires for this verb. `CNI_PATH` is
    /// optional as the spec says (Go's skel requires it); a plugin that
    /// delegates reports its absence itself.
    fn required_env(self) -> &'static [&'static str] {
        match self {
            Command::Add | Command::Check => &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"],
            Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME"],
            Command::Gc | Command::Status | Command::Version => &[],
        }
    }

    /// Verbs that act on one attachment (container ID + interface).
    fn has_attachment(self) -> bool {
        matches!(self, Command::Add | Command::Del | Command::Check)
    }
}

/// Everything a plugin verb gets: the validated environment and config.
#[derive(Debug, Clone)]
pub struct CmdArgs {
    pub command: Command,
    /// Empty for GC and STATUS.
    pub container_id: String,
    /// The `CNI_NETNS` path; may be empty on DEL, and is for GC and STATUS.
    pub netns: String,
    /// Empty for GC and STATUS.
    pub ifname: String,
    /// `CNI_ARGS` as it came: a plugin that reads it parses it with
    /// [`CmdArgs::cni_args`]; one that does not never fails on it.
    pub cni_args: String,
    /// `CNI_PATH`, split.
    pub path: Vec<PathBuf>,
    /// stdin as received, to pass to delegates unchanged.
    pub stdin: Vec<u8>,
    /// The keys every plugin shares, parsed.
    pub conf: NetConf,
    /// The config's `cniVersion`.
    pub version: Version,
}

impl CmdArgs {
    /// Parses the plugin's own config struct from stdin with Go's rules
    /// ([`crate::gojson`]). A key of the wrong type is code 7 naming the
    /// key's path.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T, Error> {
        parse_config(&self.stdin)
    }

    /// `CNI_ARGS`, parsed as Go's `types.LoadArgs` splits them (code 4 when
    /// malformed). Only plugins that read `CNI_ARGS` call this, as only Go
    /// plugins that read them fail on them.
    pub fn cni_args(&self) -> Result<CniArgs, Error> {
        CniArgs::parse(&self.cni_args)
    }

    /// `ipam.type` for a teardown (DEL, GC): an unusable `ipam` is said on
    /// stderr and names no plugin (ADD could not have delegated to it).
    pub fn teardown_ipam_type(&self) -> Option<String> {
        self.conf.ipam_type().unwrap_or_else(|e| {
            eprintln!("ignoring an unusable ipam: {e}");
            None
        })
    }

    /// GC's valid attachments (`cni.dev/valid-attachments`, or the legacy
    /// key), or `None` when the request lists none under either name: a
    /// plugin cannot tell "nothing is valid" from "the runtime did not
    /// say", so it then collects nothing of its own (said on stderr naming
    /// `plugin`) rather than remove the state of live pods. An unreadable
    /// list is code 7.
    pub fn gc_valid_attachments(
        &self,
        plugin: &str,
    ) -> Result<Option<Vec<crate::types::Attachment>>, Error> {
        if !self.conf.has_gc_attachments() {
            eprintln!(
                "{plugin}: GC: the request lists no valid attachments \
                 (cni.dev/valid-attachments): nothing collected"
            );
            return Ok(None);
        }
        self.conf.gc_valid_attachments().map(Some)
    }

    /// The `prevResult` for a teardown (DEL, GC): a `prevResult` that
    /// cannot be read is said on stderr and treated as absent, since what
    /// a teardown removes is found by the attachment's identity.
    pub fn prev_result_for_teardown(&self) -> Option<CniResult> {
        self.prev_result().unwrap_or_else(|e| {
            eprintln!("ignoring an unusable prevResult: {e}");
            None
        })
    }

    /// The `prevResult`, converted from whatever version it is in.
    pub fn prev_result(&self) -> Result<Option<CniResult>, Error> {
        match &self.conf.prev_result {
            None | Some(Value::Null) => Ok(None),
            Some(v) => CniResult::from_json(v, self.version)
                .map(|(r, _)| Some(r))
                .map_err(|e| Error::config("prevResult", e.to_string())),
        }
    }

    /// The `prevResult` of a verb that cannot do without it; its absence is
    /// code 7 naming `prevResult`, `why` saying why it is needed.
    pub fn required_prev_result(&self, why: &str) -> Result<CniResult, Error> {
        self.prev_result()?
            .ok_or_else(|| Error::config("prevResult", why))
    }

    /// The container's namespace, checked to be a network namespace that
    /// is not our own.
    pub fn open_netns(&self) -> Result<NetNs, Error> {
        NetNs::open_container(std::path::Path::new(&self.netns))
    }
}

/// Parses `bytes` into `T` with Go's rules ([`crate::gojson`]); JSON
/// syntax errors are code 6, a key of the wrong type or a missing key is
/// code 7 naming the key's path.
pub fn parse_config<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    crate::gojson::from_slice(bytes)
}

/// The [`CmdArgs`] of a DEL of container `c1`, `eth0`, with `stdin` as the
/// config (version 1.1.0), for unit tests of what a plugin reads.
pub fn test_args(stdin: &str) -> CmdArgs {
    CmdArgs {
        command: Command::Del,
        container_id: "c1".into(),
        netns: String::new(),
        ifname: "eth0".into(),
        cni_args: String::new(),
        path: vec![],
        stdin: stdin.as_bytes().to_vec(),
        conf: crate::gojson::from_slice(stdin.as_bytes()).unwrap_or_default(),
        version: Version::V1_1_0,
    }
}

/// A verb that answers with a result (ADD), as a function.
pub type AddFn = fn(&CmdArgs) -> Result<CniResult, Error>;
/// A verb that answers with success or an error (CHECK, DEL, GC,
/// STATUS), as a function.
pub type CheckFn = fn(&CmdArgs) -> Result<(), Error>;

/// The verbs of a plugin. STATUS defaults to "ready"; GC has no default:
/// each plugin says what it collects, or why there is nothing to collect.
pub trait Plugin {
    /// The spec versions this plugin speaks: VERSION lists them, and a
    /// config of any other version is refused with code 1. All seven unless
    /// a plugin cannot serve the old ones.
    fn supported_versions(&self) -> &'static [Version] {
        &version::ALL
    }
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error>;
    fn del(&self, args: &CmdArgs) -> Result<(), Error>;
    fn check(&self, args: &CmdArgs) -> Result<(), Error>;
    fn gc(&self, args: &CmdArgs) -> Result<(), Error>;
    fn status(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }
}

/// What a run printed on stdout and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub stdout: String,
    pub exit_code: i32,
}

static ERROR_VERSION: OnceLock<String> = OnceLock::new();

/// This call's line in the call log, when the log is on ([`calllog`]).
static CALL: OnceLock<calllog::Call> = OnceLock::new();

/// Runs `plugin`, whose upstream name is `name` (`bridge`, `host-local`),
/// for this process and exits. With `CNI_COMMAND` unset it prints
/// [`about_line`] and the protocol versions on stderr and exits 0, as Go's
/// skel does (the line Nomad and nerdctl read the version from); then
/// `--version` as the only argument prints `<program> <version>` on
/// stdout instead ([`version_line`]).
pub fn plugin_main<P: Plugin>(plugin: P, name: &str) -> ! {
    plugin_main_with_args(plugin, name, std::env::args_os().collect())
}

/// [`plugin_main`] with the program's arguments given: the multicall
/// binary passes them with `args[0]` naming the plugin it runs (its link's
/// path, or the plugin name after `cni-rs`), so `--version` says that name.
pub fn plugin_main_with_args<P: Plugin>(plugin: P, name: &str, args: Vec<std::ffi::OsString>) -> ! {
    let program = args.first().map(program_name).unwrap_or_default();
    if wants_version_line(&args, std::env::var_os("CNI_COMMAND").as_deref()) {
        print_and_exit(&(version_line(&program) + "\n"), 0);
    }
    let env = |k: &str| std::env::var(k).ok();
    if let Some(call) = crate::calllog::Call::start(&program, &env) {
        let _ = CALL.set(call);
    }
    std::panic::set_hook(Box::new(|info| {
        let msg = match info.payload().downcast_ref::<&str>() {
            Some(s) => s.to_string(),
            None => info
                .payload()
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default(),
        };
        let location = info.location().map(|l| l.to_string()).unwrap_or_default();
        let e = Error::Internal(format!("plugin panicked: {msg} ({location})"));
        let version = ERROR_VERSION.get().cloned().unwrap_or_default();
        let out = error_json(&e, &version);
        if let Some(call) = CALL.get() {
            call.finish(&|k| std::env::var(k).ok(), calllog::Outcome::Failed(&out));
        }
        print_and_exit(&out, 1);
    }));
    let mut stdin = std::io::stdin().lock();
    let outcome = execute(&plugin, name, &env, &mut stdin);
    if let Some(call) = CALL.get() {
        let logged = if outcome.exit_code == 0 {
            calllog::Outcome::Done(&outcome.stdout)
        } else {
            calllog::Outcome::Failed(&outcome.stdout)
        };
        call.finish(&env, logged);
    }
    print_and_exit(&outcome.stdout, outcome.exit_code)
}

/// True for `<program> --version` with `CNI_COMMAND` unset or empty: a
/// runtime always sets `CNI_COMMAND` and passes no arguments, so a call
/// from one is never taken for this.
pub fn wants_version_line(
    args: &[std::ffi::OsString],
    cni_command: Option<&std::ffi::OsStr>,
) -> bool {
    args.len() == 2 && args[1] == "--version" && cni_command.is_none_or(|c| c.is_empty())
}

/// `<name> <version>`: one line, with [`PLUGIN_VERSION`](crate::version::PLUGIN_VERSION).
/// `name` is the program's file name, which for a plugin is its `type`.
pub fn version_line(name: &str) -> String {
    format!("{name} {}", crate::version::PLUGIN_VERSION)
}

/// The file name of `argv0` (`/opt/cni/bin/bridge` gives `bridge`).
pub fn program_name(argv0: &std::ffi::OsString) -> String {
    std::path::Path::new(argv0)
        .file_name()
        .unwrap_or(argv0.as_os_str())
        .to_string_lossy()
        .into_owned()
}

/// The about line, upstream's exactly but for the version:
/// `CNI bridge plugin v1.9.1+cni-rs.0.1.0`. Nomad takes the first word of
/// the output that parses as a semver; nerdctl the rest of the stderr
/// line that starts `CNI firewall plugin `.
pub fn about_line(name: &str) -> String {
    format!("CNI {name} plugin v{}", crate::version::PLUGIN_VERSION)
}

fn print_and_exit(stdout: &str, code: i32) -> ! {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(stdout.as_bytes());
    let _ = out.flush();
    std::process::exit(code)
}

/// The spec's error JSON for `e` at `version`, one line, as a plugin
/// prints it on stdout when it fails.
pub fn error_json(e: &Error, version: &str) -> String {
    let r: ErrorResult = e.to_result(version);
    let mut s = serde_json::to_string(&r)
        .unwrap_or_else(|_| format!(r#"{{"code":{},"msg":"unencodable error"}}"#, r.code));
    s.push('\n');
    s
}

/// The whole skel, testable: `env` answers variable lookups.
pub fn execute<P: Plugin>(
    plugin: &P,
    name: &str,
    env: &dyn Fn(&str) -> Option<String>,
    stdin: &mut dyn Read,
) -> Outcome {
    let mut version_seen = String::new();
    match run(plugin, name, env, stdin, &mut version_seen) {
        Ok(stdout) => Outcome {
            stdout,
            exit_code: 0,
        },
        Err(e) => Outcome {
            stdout: error_json(&e, &version_seen),
            exit_code: 1,
        },
    }
}

fn run<P: Plugin>(
    plugin: &P,
    name: &str,
    env: &dyn Fn(&str) -> Option<String>,
    stdin: &mut dyn Read,
    version_seen: &mut String,
) -> Result<String, Error> {
    let var = |k: &str| env(k).unwrap_or_default();
    let command_str = var("CNI_COMMAND");
    if command_str.is_empty() {
        let versions: Vec<&str> = version::ALL.iter().map(|v| v.as_str()).collect();
        eprintln!(
            "{}\nCNI protocol versions supported: {}",
            about_line(name),
            versions.join(", ")
        );
        return Ok(String::new());
    }
    let command = Command::parse(&command_str)
        .ok_or_else(|| Error::InvalidEnv(format!("unknown CNI_COMMAND: {command_str}")))?;
    if command == Command::Version {
        return Ok(version::version_info_json(plugin.supported_versions()) + "\n");
    }
    let missing: Vec<&str> = command
        .required_env()
        .iter()
        .copied()
        .filter(|k| var(k).is_empty())
        .collect();
    if !missing.is_empty() {
        return Err(Error::InvalidEnv(format!(
            "required env variables [{}] missing",
            missing.join(",")
        )));
    }

    let mut bytes = Vec::new();
    stdin
        .take(MAX_STDIN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("reading stdin", e))?;
    if bytes.len() as u64 > MAX_STDIN {
        return Err(Error::io(
            "reading stdin",
            std::io::Error::other(format!("config is larger than {MAX_STDIN} bytes")),
        ));
    }
    let value: Value = crate::gojson::parse_value(&bytes)
        .map_err(|e| Error::Decode(format!("config is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(Error::Decode("config is not a JSON object".into()));
    }
    if let Some(Value::String(v)) = crate::gojson::lookup(&value, "cniVersion") {
        if Version::parse(&v).is_some() {
            let _ = ERROR_VERSION.set(v.clone());
            *version_seen = v;
        }
    }
    let conf: NetConf = crate::gojson::from_value_at(&value, "")?;
    validate_network_name(&conf.name)?;
    calllog::note_network(&conf.name);
    if matches!(command, Command::Add | Command::Check | Command::Status) {
        conf.check_shared()?;
    }
    let version = version::parse_supported(&conf.cni_version, plugin.supported_versions())?;
    let allowed = match command {
        Command::Check => version.allows_check(),
        Command::Gc | Command::Status => version.allows_gc_and_status(),
        _ => true,
    };
    if !allowed {
        return Err(Error::IncompatibleVersion {
            msg: format!("config version does not allow {}", command.as_str()),
            details: format!("cniVersion is {version}"),
        });
    }

    let (container_id, ifname, netns) = if command.has_attachment() {
        let id = var("CNI_CONTAINERID");
        validate_container_id(&id)?;
        let ifname = var("CNI_IFNAME");
        validate_ifname(&ifname)?;
        (id, ifname, var("CNI_NETNS"))
    } else {
        Default::default()
    };
    let cmd = CmdArgs {
        command,
        container_id,
        netns,
        ifname,
        cni_args: var("CNI_ARGS"),
        path: split_path_list(&var("CNI_PATH")),
        stdin: bytes,
        conf,
        version,
    };
    match command {
        Command::Add => {
            let result = plugin.add(&cmd)?;
            calllog::note_addresses(result.ips.iter().map(|ip| ip.address.to_string()));
            let mut s = serde_json::to_string(&result.to_json(version)?)
                .map_err(|e| Error::Internal(format!("encoding result: {e}")))?;
            s.push('\n');
            Ok(s)
        }
        Command::Del => plugin.del(&cmd).map(|()| String::new()),
        Command::Check => plugin.check(&cmd).map(|()| String::new()),
        Command::Gc => plugin.gc(&cmd).map(|()| String::new()),
        Command::Status => plugin.status(&cmd).map(|()| String::new()),
        Command::Version => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::IpConfig;
    use serde_json::json;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// Records the verbs it was called with; ADD returns one address.
    #[derive(Default)]
    struct Recorder {
        calls: RefCell<Vec<(Command, String, String)>>,
    }

    impl Plugin for Recorder {
        fn add(&self, a: &CmdArgs) -> Result<CniResult, Error> {
            self.record(a);
            Ok(CniResult {
                ips: vec![IpConfig {
                    address: "10.0.0.2/24".parse().unwrap(),
                    gateway: None,
                    interface: None,
                }],
                ..CniResult::default()
            })
        }
        fn del(&self, a: &CmdArgs) -> Result<(), Error> {
            self.record(a);
            Ok(())
        }
        fn check(&self, a: &CmdArgs) -> Result<(), Error> {
            self.record(a);
            Err(Error::config("ipam", "check failed"))
        }
        fn gc(&self, a: &CmdArgs) -> Result<(), Error> {
            self.record(a);
            Ok(())
        }
    }

    impl Recorder {
        fn record(&self, a: &CmdArgs) {
            self.calls
                .borrow_mut()
                .push((a.command, a.container_id.clone(), a.ifname.clone()));
        }
    }

    fn env_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn call(p: &Recorder, env: &[(&str, &str)], stdin: &str) -> (Value, i32) {
        let env = env_of(env);
        let o = execute(p, "test", &|k| env.get(k).cloned(), &mut stdin.as_bytes());
        let v = if o.stdout.trim().is_empty() {
            Value::Null
        } else {
            crate::gojson::parse_value(o.stdout.as_bytes()).unwrap()
        };
        (v, o.exit_code)
    }

    const FULL: &[(&str, &str)] = &[
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/run/netns/x"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin"),
    ];

    fn with(cmd: &str, overrides: &[(&'static str, &'static str)]) -> Vec<(&'static str, String)> {
        let mut env: Vec<(&str, String)> = FULL.iter().map(|(k, v)| (*k, v.to_string())).collect();
        env[0].1 = cmd.to_string();
        for (k, v) in overrides {
            env.retain(|(ek, _)| ek != k);
            if !v.is_empty() {
                env.push((k, v.to_string()));
            }
        }
        env
    }

    fn call_with(
        p: &Recorder,
        cmd: &str,
        over: &[(&'static str, &'static str)],
        stdin: &str,
    ) -> (Value, i32) {
        let env = with(cmd, over);
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        call(p, &pairs, stdin)
    }

    const CONF: &str = r#"{"cniVersion":"1.0.0","name":"net","type":"x"}"#;

    #[test]
    fn add_prints_the_result_in_the_config_version() {
        let p = Recorder::default();
        let (v, code) = call_with(&p, "ADD", &[], CONF);
        assert_eq!(code, 0);
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["ips"][0]["address"], "10.0.0.2/24");
        let (v, _) = call_with(&p, "ADD", &[], r#"{"cniVersion":"0.3.1","name":"net"}"#);
        assert_eq!(v["ips"][0]["version"], "4");
        let (v, _) = call_with(&p, "ADD", &[], r#"{"name":"net"}"#);
        assert_eq!(v["ip4"]["ip"], "10.0.0.2/24", "no cniVersion means 0.1.0");
        assert_eq!(p.calls.borrow().len(), 3);
    }

    #[test]
    fn version_answers_without_stdin() {
        let p = Recorder::default();
        let (v, code) = call(&p, &[("CNI_COMMAND", "VERSION")], "garbage");
        assert_eq!(code, 0);
        assert_eq!(v["cniVersion"], "1.1.0");
        assert_eq!(
            v["supportedVersions"],
            json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
        );
    }

    #[test]
    fn version_line_only_for_a_lone_flag_without_cni_command() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let ver = args(&["/opt/cni/bin/bridge", "--version"]);
        assert!(wants_version_line(&ver, None));
        assert!(wants_version_line(&ver, Some("".as_ref())));
        assert!(!wants_version_line(&ver, Some("ADD".as_ref())));
        assert!(!wants_version_line(&args(&["bridge"]), None));
        assert!(!wants_version_line(
            &args(&["bridge", "--version", "x"]),
            None
        ));
        assert!(!wants_version_line(&args(&["bridge", "-v"]), None));
        assert_eq!(program_name(&ver[0]), "bridge");
        assert_eq!(program_name(&"host-local".into()), "host-local");
        let line = version_line("bridge");
        assert_eq!(
            line,
            format!("bridge 1.9.1+cni-rs.{}", env!("CARGO_PKG_VERSION"))
        );
        assert!(!line.contains('\n'));
        assert_eq!(
            about_line("bridge"),
            format!(
                "CNI bridge plugin v1.9.1+cni-rs.{}",
                env!("CARGO_PKG_VERSION")
            )
        );
    }

    #[test]
    fn env_errors_are_code_4_and_name_the_variable() {
        let p = Recorder::default();
        let (v, code) = call_with(&p, "ADD", &[("CNI_NETNS", ""), ("CNI_IFNAME", "")], CONF);
        assert_eq!((code, v["code"].as_u64()), (1, Some(4)));
        assert_eq!(
            v["msg"],
            "required env variables [CNI_NETNS,CNI_IFNAME] missing"
        );
        let (v, _) = call_with(&p, "BOGUS", &[], CONF);
        assert_eq!(
            (v["code"].as_u64(), v["msg"].as_str()),
            (Some(4), Some("unknown CNI_COMMAND: BOGUS"))
        );
        let (v, _) = call_with(&p, "ADD", &[("CNI_IFNAME", "a/b")], CONF);
        assert_eq!(v["code"], 4);
        assert!(v["msg"].as_str().unwrap().contains("CNI_IFNAME"));
        let (v, _) = call_with(&p, "ADD", &[("CNI_IFNAME", "abcdefghijklmnop")], CONF);
        assert_eq!(v["code"], 4);
        let (v, _) = call_with(&p, "ADD", &[("CNI_CONTAINERID", "../etc")], CONF);
        assert_eq!(v["code"], 4);
        assert!(v["msg"].as_str().unwrap().contains("CNI_CONTAINERID"));
        assert!(p.calls.borrow().is_empty(), "no verb ran");
    }

    #[test]
    fn cni_args_are_the_plugins_to_read() {
        // A plugin that does not read CNI_ARGS never fails on them (Go's
        // loopback under containerd's K8S_POD_* args, or a malformed pair).
        let p = Recorder::default();
        for args in ["none", "IP", "K8S_POD_NAME=web;IgnoreUnknown=1"] {
            let env = with("ADD", &[]);
            let mut pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            pairs.push(("CNI_ARGS", args));
            assert_eq!(call(&p, &pairs, CONF).1, 0, "{args}");
        }
        // One that reads them gets Go's code 4 for a malformed pair.
        let a = CmdArgs {
            cni_args: "none".into(),
            ..test_args(CONF)
        };
        let e = a.cni_args().unwrap_err();
        assert_eq!(e.code(), 4);
        assert!(e.to_string().starts_with("CNI_ARGS"), "{e}");
    }

    #[test]
    fn shared_keys_go_by_go_rules_and_only_name_and_version_must_be_readable() {
        let p = Recorder::default();
        let (v, code) = call_with(
            &p,
            "DEL",
            &[],
            r#"{"CNIVersion":"1.0.0","Name":"net","dns":5,"runtimeConfig":"x","prevResult":[]}"#,
        );
        assert_eq!((code, v), (0, Value::Null));
        let (v, _) = call_with(&p, "ADD", &[], r#"{"cniVersion":"1.0.0","name":7}"#);
        assert_eq!(v["code"], 7);
        assert!(v["msg"].as_str().unwrap().contains("name"), "{v}");
    }

    #[test]
    fn del_does_not_need_a_netns() {
        let p = Recorder::default();
        let (_, code) = call_with(&p, "DEL", &[("CNI_NETNS", "")], CONF);
        assert_eq!(code, 0);
        assert_eq!(
            p.calls.borrow()[0],
            (Command::Del, "c1".into(), "eth0".into())
        );
    }

    #[test]
    fn bad_json_is_6_bad_name_7_bad_version_1() {
        let p = Recorder::default();
        let (v, _) = call_with(&p, "ADD", &[], "{not json");
        assert_eq!(v["code"], 6);
        let (v, _) = call_with(&p, "ADD", &[], "[1]");
        assert_eq!(v["code"], 6);
        let (v, _) = call_with(&p, "ADD", &[], r#"{"cniVersion":"1.0.0"}"#);
        assert_eq!(
            (v["code"].as_u64(), v["msg"].as_str()),
            (
                Some(7),
                Some("invalid network config: name: missing network name")
            )
        );
        let (v, _) = call_with(&p, "ADD", &[], r#"{"cniVersion":"1.0.0","name":"a b"}"#);
        assert_eq!(v["code"], 7);
        let (v, _) = call_with(&p, "ADD", &[], r#"{"cniVersion":"7.0.0","name":"n"}"#);
        assert_eq!(v["code"], 1);
        assert!(v["details"].as_str().unwrap().contains("\"7.0.0\""));
        assert!(p.calls.borrow().is_empty());
    }

    #[test]
    fn verbs_are_gated_by_version() {
        let p = Recorder::default();
        let old = r#"{"cniVersion":"0.3.1","name":"n"}"#;
        let (v, _) = call_with(&p, "CHECK", &[], old);
        assert_eq!(
            (v["code"].as_u64(), v["msg"].as_str()),
            (Some(1), Some("config version does not allow CHECK"))
        );
        let (v, _) = call_with(&p, "GC", &[], CONF);
        assert_eq!(v["code"], 1);
        let (v, _) = call_with(&p, "STATUS", &[], CONF);
        assert_eq!(v["code"], 1);
        let new = r#"{"cniVersion":"1.1.0","name":"n"}"#;
        assert_eq!(call_with(&p, "GC", &[], new).1, 0);
        assert_eq!(call_with(&p, "STATUS", &[], new).1, 0);
        // CHECK reaches the plugin, whose error keeps its code and the version.
        let (v, code) = call_with(&p, "CHECK", &[], CONF);
        assert_eq!(
            (code, v["code"].as_u64(), v["cniVersion"].as_str()),
            (1, Some(7), Some("1.0.0"))
        );
    }

    #[test]
    fn oversized_stdin_is_refused() {
        let p = Recorder::default();
        let big = format!(r#"{{"name":"n","x":"{}"}}"#, "a".repeat(MAX_STDIN as usize));
        let (v, _) = call_with(&p, "ADD", &[], &big);
        assert_eq!(v["code"], 5);
    }

    #[test]
    fn parse_config_names_the_key() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct C {
            ipam: Inner,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Inner {
            mtu: u32,
        }
        let e = parse_config::<C>(br#"{"ipam":{"mtu":"x"}}"#).unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(
            e.to_string()
                .starts_with("invalid network config: ipam.mtu: invalid type"),
            "{e}"
        );
        let e = parse_config::<C>(br#"{"ipam":{"mtu":-1}}"#).unwrap_err();
        assert_eq!(e.code(), 7);
        assert_eq!(parse_config::<C>(b"{").unwrap_err().code(), 6);
    }
}
