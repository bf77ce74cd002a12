//! `cni-rs`, the multicall form of the suite: one binary carrying every
//! plugin (k3s and RKE2 bundle the Go plugins the same way). It runs the
//! plugin its program name names, so a link or a copy called `bridge`
//! behaves exactly as the `bridge` binary: the same code under the same
//! skeleton, hence the same output, codes, VERSION answer, `--version`
//! line and panic handling. Called by any other name, its first argument
//! chooses: a plugin name (`cni-rs bridge`, k3s-style), `install` (the
//! installer, which then installs this binary and its links), `latency`
//! (the call log's summary, [`latency`]), `inspect`, `gc` and `doctor`
//! (the node operator's commands, crate `operator`), `--list`, `--version` or
//! `--help` ([`dispatch`]). No plugin may be named like a command: the
//! name is checked against the plugins first.

pub mod latency;

use std::ffi::{OsStr, OsString};
use std::process::ExitCode;

/// One plugin of the binary: its name (the link's, and its `type`) and
/// its program, which gets the arguments with `args[0]` naming it.
pub struct Plugin {
    pub name: &'static str,
    pub main: fn(Vec<OsString>) -> !,
}

macro_rules! plugin {
    ($feature:literal, $krate:ident :: $ty:ident) => {
        #[cfg(feature = $feature)]
        Plugin {
            name: $feature,
            main: |args| libcni::skel::plugin_main_with_args($krate::$ty, $krate::NAME, args),
        }
    };
}

/// Every plugin built in (a feature each), sorted by name.
pub const PLUGINS: &[Plugin] = &[
    plugin!("bandwidth", bandwidth::BandwidthPlugin),
    plugin!("bridge", bridge::BridgePlugin),
    #[cfg(feature = "dhcp")]
    Plugin {
        name: "dhcp",
        main: dhcp::program_main,
    },
    plugin!("dummy", dummy::Dummy),
    plugin!("firewall", firewall::Firewall),
    plugin!("flannel", flannel_meta::Flannel),
    plugin!("host-device", host_device::HostDevice),
    plugin!("host-local", host_local::HostLocal),
    plugin!("ipvlan", ipvlan::Ipvlan),
    plugin!("loopback", loopback::Loopback),
    plugin!("macvlan", macvlan::Macvlan),
    plugin!("portmap", portmap::PortMap),
    plugin!("ptp", ptp::Ptp),
    plugin!("sbr", sbr::Sbr),
    plugin!("static", static_ipam::Static),
    plugin!("tap", tap::Tap),
    plugin!("tc-redirect-tap", tc_redirect_tap::TcRedirectTap),
    plugin!("tuning", tuning::Tuning),
    plugin!("vlan", vlan::Vlan),
    plugin!("vrf", vrf::Vrf),
];

impl PartialEq for Plugin {
    fn eq(&self, other: &Plugin) -> bool {
        self.name == other.name
    }
}
impl Eq for Plugin {}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Plugin({})", self.name)
    }
}

/// This binary's own name, and the program name that is never a plugin's.
pub const SELF_NAME: &str = "cni-rs";

/// The plugin named `name`, if built in.
pub fn plugin(name: &OsStr) -> Option<&'static Plugin> {
    PLUGINS.iter().find(|p| OsStr::new(p.name) == name)
}

pub const USAGE: &str = "\
Usage: cni-rs PLUGIN [ARGS...]     run a plugin (as the runtime calls it: CNI_COMMAND and stdin)
       cni-rs install [OPTIONS] BIN_DIR
                                  install this binary and a link per plugin into BIN_DIR
                                  (`cni-rs install --help`)
       cni-rs latency [LOG]       p50/p90 per plugin and command from the call log
                                  (`cni-rs latency --help`)
       cni-rs inspect [NETWORK] [--json]
                                  every attachment on the node and where its pieces are
                                  (`cni-rs inspect --help`)
       cni-rs gc [NETWORK] [--apply] [--untied]
                                  the CNI GC no runtime calls: dead attachments' state
                                  (`cni-rs gc --help`)
       cni-rs doctor              what the node's configs need, and gc's findings
                                  (`cni-rs doctor --help`)
       cni-rs metrics [--listen [ADDR]]
                                  the node's metrics for Prometheus: pools, leaks, calls
                                  (`cni-rs metrics --help`)
       cni-rs --list              the plugins built in, one per line
       cni-rs --version           print \"cni-rs <version>\"

The multicall form of the suite: one binary holding every plugin. Called
through a link or a copy named after a plugin (/opt/cni/bin/bridge ->
cni-rs), it is that plugin, exactly as the plugin's own binary: runtimes
call the links. Called by any other name, its first argument chooses.

Exit status: a plugin's own; 2 for a usage error.
";

/// What one call of the binary does, decided from its arguments and
/// whether a runtime is calling (`CNI_COMMAND` set).
#[derive(Debug, PartialEq, Eq)]
pub enum Call {
    /// Run the plugin, with these arguments (`args[0]` names it).
    Plugin(&'static Plugin, Vec<OsString>),
    /// The installer, with these arguments (after `install`).
    Install(Vec<OsString>),
    /// The call log's summary, with these arguments (after `latency`).
    Latency(Vec<OsString>),
    /// The node's attachments (`inspect`), with these arguments.
    Inspect(Vec<OsString>),
    /// The node's GC (`gc`), with these arguments.
    Gc(Vec<OsString>),
    /// The node's checks (`doctor`), with these arguments.
    Doctor(Vec<OsString>),
    /// The node's metrics (`metrics`), with these arguments.
    Metrics(Vec<OsString>),
    List,
    Version,
    Help,
    /// A runtime called this binary under a name no plugin has: it gets a
    /// CNI error on stdout, as from any plugin.
    NoSuchPlugin(String),
    /// A person typed something else: usage on stderr, exit 2.
    Usage(String),
}

/// Decides the call: the program's name first (a link's), then, for any
/// other name, the first argument.
pub fn dispatch(args: Vec<OsString>, runtime_call: bool) -> Call {
    let called_as = args
        .first()
        .map(libcni::skel::program_name)
        .unwrap_or_default();
    if let Some(p) = plugin(OsStr::new(&called_as)) {
        return Call::Plugin(p, args);
    }
    let first = args.get(1).map(OsString::as_os_str);
    if let Some(p) = first.and_then(plugin) {
        return Call::Plugin(p, args[1..].to_vec());
    }
    if runtime_call {
        return Call::NoSuchPlugin(called_as);
    }
    let Some(first) = first else {
        return Call::Help;
    };
    match first.to_str() {
        Some("install") => Call::Install(args[2..].to_vec()),
        Some("latency") => Call::Latency(args[2..].to_vec()),
        Some("inspect") => Call::Inspect(args[2..].to_vec()),
        Some("gc") => Call::Gc(args[2..].to_vec()),
        Some("doctor") => Call::Doctor(args[2..].to_vec()),
        Some("metrics") => Call::Metrics(args[2..].to_vec()),
        Some("--list") if args.len() == 2 => Call::List,
        Some("--version") if args.len() == 2 => Call::Version,
        Some("-h" | "--help" | "help") => Call::Help,
        _ => Call::Usage(format!(
            "{first:?} is neither a plugin of this binary nor a command (plugins: {})",
            names().join(", ")
        )),
    }
}

/// The program: dispatches, and for a plugin never returns.
pub fn main() -> ExitCode {
    let runtime_call = std::env::var_os("CNI_COMMAND").is_some_and(|c| !c.is_empty());
    match dispatch(std::env::args_os().collect(), runtime_call) {
        Call::Plugin(p, args) => (p.main)(args),
        Call::Install(args) => cni_rs_install::main_with_args(
            args,
            cni_rs_install::Program::Multicall {
                name: SELF_NAME,
                plugins: &names(),
            },
        ),
        Call::Inspect(args) => node_command(operator::inspect_main, &args),
        Call::Gc(args) => node_command(operator::gc_main, &args),
        Call::Doctor(args) => node_command(operator::doctor_main, &args),
        Call::Metrics(args) => node_command(operator::metrics_main, &args),
        Call::Latency(args) => {
            let args = lossy(&args);
            if args.iter().any(|a| a == "-h" || a == "--help") {
                print!("{}", latency::USAGE);
                return ExitCode::SUCCESS;
            }
            match latency::run(&args) {
                Ok(table) => {
                    print!("{table}");
                    ExitCode::SUCCESS
                }
                Err(msg) => {
                    eprintln!("{SELF_NAME} latency: {msg}");
                    ExitCode::FAILURE
                }
            }
        }
        Call::List => {
            println!("{}", names().join("\n"));
            ExitCode::SUCCESS
        }
        Call::Version => {
            println!("{}", libcni::skel::version_line(SELF_NAME));
            ExitCode::SUCCESS
        }
        Call::Help => {
            // The version first: Nomad's fingerprint of every file in
            // the CNI path takes the output's first semver word.
            println!("{}\n", libcni::skel::version_line(SELF_NAME));
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Call::NoSuchPlugin(called_as) => {
            print!(
                "{}",
                libcni::skel::error_json(&no_such_plugin(&called_as), "")
            );
            ExitCode::FAILURE
        }
        Call::Usage(msg) => {
            eprintln!("{SELF_NAME}: {msg}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// Stand-ins when the binary is built without its node commands.
#[cfg(not(feature = "node-commands"))]
mod operator {
    use std::process::ExitCode;
    fn absent() -> ExitCode {
        eprintln!("cni-rs: built without its node commands (cargo feature node-commands)");
        ExitCode::from(2)
    }
    pub fn inspect_main(_: &[String]) -> ExitCode {
        absent()
    }
    pub fn gc_main(_: &[String]) -> ExitCode {
        absent()
    }
    pub fn doctor_main(_: &[String]) -> ExitCode {
        absent()
    }
    pub fn metrics_main(_: &[String]) -> ExitCode {
        absent()
    }
}

fn node_command(main: fn(&[String]) -> ExitCode, args: &[OsString]) -> ExitCode {
    main(&lossy(args))
}

fn lossy(args: &[OsString]) -> Vec<String> {
    args.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// The names of the plugins built in.
pub fn names() -> Vec<&'static str> {
    PLUGINS.iter().map(|p| p.name).collect()
}

/// The error a runtime gets from a copy of this binary whose name is no
/// plugin's: it cannot guess which plugin was meant.
pub fn no_such_plugin(called_as: &str) -> libcni::Error {
    libcni::Error::Internal(format!(
        "the multicall binary was called as {called_as:?}, which is not one of its plugins \
         ({}): install it with a link or copy named after each plugin (cni-rs install BIN_DIR)",
        names().join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> &'static Plugin {
        plugin(OsStr::new(name)).expect("built in")
    }

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn plugins_are_sorted_and_named_once() {
        let n = names();
        let mut sorted = n.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(n, sorted);
        for command in [
            SELF_NAME, "install", "latency", "inspect", "gc", "doctor", "metrics",
        ] {
            assert!(!n.contains(&command), "{command}");
        }
    }

    #[test]
    fn the_link_name_chooses_before_the_arguments() {
        assert_eq!(
            dispatch(args(&["/opt/cni/bin/bridge", "--version"]), false),
            Call::Plugin(named("bridge"), args(&["/opt/cni/bin/bridge", "--version"]))
        );
        // A link named after a plugin is that plugin, whatever it is given.
        assert_eq!(
            dispatch(args(&["portmap", "install"]), true),
            Call::Plugin(named("portmap"), args(&["portmap", "install"]))
        );
        assert_eq!(
            dispatch(args(&["/usr/bin/cni-rs", "host-local"]), true),
            Call::Plugin(named("host-local"), args(&["host-local"]))
        );
        assert_eq!(
            dispatch(args(&["cni", "dhcp", "daemon", "-broadcast"]), false),
            Call::Plugin(named("dhcp"), args(&["dhcp", "daemon", "-broadcast"]))
        );
    }

    #[test]
    fn own_commands_and_mistakes() {
        assert_eq!(
            dispatch(args(&["cni-rs", "install", "--dry-run", "/x"]), false),
            Call::Install(args(&["--dry-run", "/x"]))
        );
        assert_eq!(
            dispatch(args(&["cni-rs", "gc", "--apply"]), false),
            Call::Gc(args(&["--apply"]))
        );
        assert_eq!(
            dispatch(args(&["cni-rs", "inspect", "--json"]), false),
            Call::Inspect(args(&["--json"]))
        );
        assert_eq!(
            dispatch(args(&["cni-rs", "doctor"]), false),
            Call::Doctor(vec![])
        );
        assert_eq!(dispatch(args(&["cni-rs", "--list"]), false), Call::List);
        assert_eq!(
            dispatch(args(&["cni-rs", "--version"]), false),
            Call::Version
        );
        assert_eq!(dispatch(args(&["cni-rs"]), false), Call::Help);
        assert_eq!(dispatch(args(&["cni-rs", "-h"]), false), Call::Help);
        assert_eq!(
            dispatch(args(&["/opt/cni/bin/my-bridge"]), true),
            Call::NoSuchPlugin("my-bridge".into())
        );
        let Call::Usage(msg) = dispatch(args(&["cni-rs", "brigde"]), false) else {
            panic!("a typo is a usage error");
        };
        assert!(msg.starts_with("\"brigde\" is neither a plugin"), "{msg}");
        assert!(msg.contains("bridge, dhcp"), "{msg}");
        let e = no_such_plugin("my-bridge");
        assert_eq!(e.code(), 999);
        assert!(e.to_string().contains("called as \"my-bridge\""), "{e}");
    }
}
