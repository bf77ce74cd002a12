//! `cnitool`: run a network configuration list against a network namespace,
//! as the Go reference `cnitool` does. A thin command line over
//! the `cnitool` library: parse arguments and environment, load the list from
//! `NETCONFPATH`, run the verb, print the ADD result.

use cnitool::{load_conf_list, CniConfig, RuntimeConf, DEFAULT_CACHE_DIR, USAGE};
use libcni::cli::Args;
use libcni::invoke::split_path_list;
use libcni::types::Attachment;
use libcni::{Error, Result};
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha512};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

const DEFAULT_NETCONFPATH: &str = "/etc/cni/net.d";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Add,
    Check,
    Del,
    Gc,
    Status,
}

impl Verb {
    fn parse(s: &str) -> Option<Verb> {
        Some(match s {
            "add" => Verb::Add,
            "check" => Verb::Check,
            "del" => Verb::Del,
            "gc" => Verb::Gc,
            "status" => Verb::Status,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Verb::Add => "add",
            Verb::Check => "check",
            Verb::Del => "del",
            Verb::Gc => "gc",
            Verb::Status => "status",
        }
    }
}

/// The command line, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Invocation {
    verb: Verb,
    net: String,
    /// One for add/check/del, at most one for status, any number for gc.
    netns: Vec<String>,
    ifname: Option<String>,
    cache_dir: Option<PathBuf>,
}

#[derive(Debug, PartialEq, Eq)]
enum Cli {
    Help,
    Version,
    Run(Invocation),
}

/// Parses the arguments (without the program name). Flags may come before,
/// between or after the positionals; `--` ends the flags. An `Err` is a
/// usage error.
fn parse_cli(args: &[String]) -> std::result::Result<Cli, String> {
    let mut ifname = None;
    let mut cache_dir = None;
    let mut positional = Vec::new();
    let mut args = Args::new(args);
    while let Some(flag) = args.next_flag(&mut positional) {
        let mut value = || {
            args.value(&flag)
                .ok_or_else(|| format!("flag {} needs a value", flag.name))
        };
        match flag.name {
            "-h" | "--help" => return Ok(Cli::Help),
            "--version" => return Ok(Cli::Version),
            "-i" | "--ifname" => ifname = Some(value()?),
            "--cache-dir" => cache_dir = Some(PathBuf::from(value()?)),
            name if name.starts_with("-i") && !name.starts_with("--") => {
                ifname = Some(name[2..].to_string())
            }
            _ => return Err(format!("unknown flag {:?}", flag.given)),
        }
    }
    let mut positional = positional.into_iter();
    let verb = positional.next().ok_or("missing command")?;
    let verb = Verb::parse(&verb).ok_or_else(|| format!("unknown command {verb:?}"))?;
    let net = positional
        .next()
        .ok_or_else(|| format!("{}: missing the network name", verb.name()))?;
    let netns: Vec<String> = positional.collect();
    let fits = match verb {
        Verb::Add | Verb::Check | Verb::Del => netns.len() == 1,
        Verb::Status => netns.len() <= 1,
        Verb::Gc => true,
    };
    if !fits {
        return Err(format!(
            "{}: expected a network name and {}, got {} netns argument(s)",
            verb.name(),
            if verb == Verb::Status {
                "at most one netns"
            } else {
                "one netns"
            },
            netns.len()
        ));
    }
    Ok(Cli::Run(Invocation {
        verb,
        net,
        netns,
        ifname: ifname.filter(|s| !s.is_empty()),
        cache_dir: cache_dir.filter(|p| !p.as_os_str().is_empty()),
    }))
}

/// `CNI_ARGS` as cnitool reads it: `;`-separated pairs, each exactly one
/// `=` with a non-empty key and value.
fn parse_cni_args(s: &str) -> Result<Vec<(String, String)>> {
    s.split(';')
        .map(|pair| match pair.split('=').collect::<Vec<_>>()[..] {
            [k, v] if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(Error::InvalidEnv(format!(
                "CNI_ARGS: invalid pair {pair:?} (want KEY=VALUE, both non-empty)"
            ))),
        })
        .collect()
}

/// `CAP_ARGS`: a JSON object (or `null`) of capability arguments.
fn parse_cap_args(s: &str) -> Result<Map<String, Value>> {
    match libcni::gojson::parse_value(s.as_bytes()) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(other) => Err(Error::InvalidEnv(format!(
            "CAP_ARGS: want a JSON object, got {other}"
        ))),
        Err(e) => Err(Error::InvalidEnv(format!("CAP_ARGS: invalid JSON: {e}"))),
    }
}

/// Go's `filepath.Abs`: joined to the working directory when relative, then
/// cleaned lexically (`.` and `..` resolved, no symlink followed).
fn absolute(path: &Path, cwd: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let mut clean = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::Normal(p) => clean.push(p),
            Component::ParentDir => {
                clean.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    clean
}

/// `cnitool-` + the first 10 bytes of sha512(netns path), in hex.
fn container_id_for(netns: &str) -> String {
    let digest = Sha512::digest(netns.as_bytes());
    let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("cnitool-{hex}")
}

/// The runtime arguments from the invocation and the environment.
fn runtime_conf(
    inv: &Invocation,
    env: &dyn Fn(&str) -> Option<String>,
    cwd: &Path,
) -> Result<RuntimeConf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    let capability_args = match set("CAP_ARGS") {
        Some(s) => parse_cap_args(&s)?,
        None => Map::new(),
    };
    let args = match set("CNI_ARGS") {
        Some(s) => parse_cni_args(&s)?,
        None => Vec::new(),
    };
    let ifname = inv
        .ifname
        .clone()
        .or_else(|| set("CNI_IFNAME"))
        .unwrap_or_else(|| "eth0".into());
    let netns = absolute(Path::new(inv.netns.first().map_or("", |s| s.as_str())), cwd)
        .to_string_lossy()
        .into_owned();
    let container_id = set("CNI_CONTAINERID").unwrap_or_else(|| container_id_for(&netns));
    Ok(RuntimeConf {
        container_id,
        netns,
        ifname,
        args,
        capability_args,
    })
}

/// The attachments `gc` keeps: one per `<netns>[:<ifname>]` argument, with
/// the container ID derived as for `add` (upstream cnitool's `gc`).
fn gc_valid_attachments(
    inv: &Invocation,
    env: &dyn Fn(&str) -> Option<String>,
    cwd: &Path,
) -> Result<Vec<Attachment>> {
    inv.netns
        .iter()
        .map(|arg| {
            let (netns, ifname) = match arg.rsplit_once(':') {
                Some((n, i)) => (n.to_string(), Some(i.to_string())),
                None => (arg.clone(), None),
            };
            let one = Invocation {
                netns: vec![netns],
                ifname: ifname.or_else(|| inv.ifname.clone()),
                ..inv.clone()
            };
            let rt = runtime_conf(&one, env, cwd)?;
            Ok(Attachment {
                container_id: rt.container_id,
                ifname: rt.ifname,
            })
        })
        .collect()
}

/// Runs the invocation; returns what to print on stdout.
fn run(inv: &Invocation) -> Result<Option<String>> {
    let env = |k: &str| std::env::var(k).ok();
    let conf_dir = env("NETCONFPATH")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_NETCONFPATH.into());
    let list = load_conf_list(Path::new(&conf_dir), &inv.net)?;
    let cwd = std::env::current_dir().map_err(|e| Error::io("reading the working directory", e))?;
    let rt = runtime_conf(inv, &env, &cwd)?;
    let cache_dir = inv
        .cache_dir
        .clone()
        .or_else(|| {
            env("CNI_CACHE_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE_DIR));
    let cni = CniConfig::new(
        split_path_list(&env("CNI_PATH").unwrap_or_default()),
        cache_dir,
    );
    match inv.verb {
        Verb::Add => {
            let result = cni.add_network_list(&list, &rt)?;
            let json = result.to_json(list.cni_version)?;
            Ok(Some(pretty(&json)?))
        }
        Verb::Check => cni.check_network_list(&list, &rt).map(|()| None),
        Verb::Del => cni.del_network_list(&list, &rt).map(|()| None),
        // The library's GC does nothing here, as Go libcni's; a person
        // who asked for it is told why instead.
        Verb::Gc if list.disable_gc => Err(Error::config(
            "disableGC",
            format!(
                "network {:?} sets disableGC: true (its state may be shared with another \
                 runtime): not garbage-collected",
                list.name
            ),
        )),
        Verb::Gc => {
            let keep = gc_valid_attachments(inv, &env, &cwd)?;
            cni.gc_network_list(&list, Some(&keep)).map(|()| None)
        }
        Verb::Status => cni.status_network_list(&list).map(|()| None),
    }
}

/// JSON indented by four spaces, as Go's `result.Print()`.
fn pretty(v: &Value) -> Result<String> {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    v.serialize(&mut ser)
        .map_err(|e| Error::Internal(format!("encoding result: {e}")))?;
    String::from_utf8(out).map_err(|e| Error::Internal(format!("encoding result: {e}")))
}

fn main() -> ExitCode {
    let args: std::result::Result<Vec<String>, _> = std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect();
    let parsed = match args {
        Ok(args) => parse_cli(&args),
        Err(bad) => Err(format!("argument {bad:?} is not valid UTF-8")),
    };
    let inv = match parsed {
        Ok(Cli::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Cli::Version) => {
            println!("{}", libcni::skel::version_line("cnitool"));
            return ExitCode::SUCCESS;
        }
        Ok(Cli::Run(inv)) => inv,
        Err(msg) => {
            eprintln!("cnitool: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&inv) {
        Ok(out) => {
            if let Some(out) = out {
                println!("{out}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let msg = e.to_string().replace('\n', "; ");
            eprintln!(
                "cnitool {} {}: {msg} (code {})",
                inv.verb.name(),
                inv.net,
                e.code()
            );
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    fn inv(verb: Verb, ifname: Option<&str>, cache_dir: Option<&str>) -> Cli {
        Cli::Run(Invocation {
            verb,
            net: "net1".into(),
            netns: vec!["/run/netns/p1".into()],
            ifname: ifname.map(Into::into),
            cache_dir: cache_dir.map(PathBuf::from),
        })
    }

    #[test]
    fn parses_verbs_and_flags_anywhere() {
        assert_eq!(
            parse_cli(&args(&["add", "net1", "/run/netns/p1"])),
            Ok(inv(Verb::Add, None, None))
        );
        assert_eq!(
            parse_cli(&args(&["-i", "net0", "del", "net1", "/run/netns/p1"])),
            Ok(inv(Verb::Del, Some("net0"), None))
        );
        assert_eq!(
            parse_cli(&args(&[
                "check",
                "--ifname=net0",
                "net1",
                "/run/netns/p1",
                "--cache-dir",
                "/tmp/c"
            ])),
            Ok(inv(Verb::Check, Some("net0"), Some("/tmp/c")))
        );
        assert_eq!(
            parse_cli(&args(&[
                "gc",
                "net1",
                "--cache-dir=/tmp/c",
                "/run/netns/p1"
            ])),
            Ok(inv(Verb::Gc, None, Some("/tmp/c")))
        );
        assert_eq!(
            parse_cli(&args(&["status", "-inet0", "net1", "/run/netns/p1"])),
            Ok(inv(Verb::Status, Some("net0"), None))
        );
        assert_eq!(parse_cli(&args(&["add", "--help"])), Ok(Cli::Help));
        assert_eq!(parse_cli(&args(&["--version"])), Ok(Cli::Version));
    }

    #[test]
    fn usage_errors() {
        for (a, want) in [
            (
                &["add", "net1"][..],
                "add: expected a network name and one netns, got 0 netns argument(s)",
            ),
            (&["gc"], "gc: missing the network name"),
            (
                &["status", "n", "/a", "/b"],
                "status: expected a network name and at most one netns, got 2 netns argument(s)",
            ),
            (&[], "missing command"),
            (&["up", "net1", "/x"], "unknown command \"up\""),
            (&["add", "net1", "/x", "-i"], "flag -i needs a value"),
            (
                &["add", "net1", "/x", "--bogus"],
                "unknown flag \"--bogus\"",
            ),
            (
                &["add", "net1", "/x", "extra"],
                "add: expected a network name and one netns, got 2 netns argument(s)",
            ),
        ] {
            assert_eq!(parse_cli(&args(a)), Err(want.to_string()), "{a:?}");
        }
    }

    #[test]
    fn container_id_is_a_hash_of_the_absolute_netns_path() {
        // Expected values computed with `printf %s PATH | sha512sum | cut -c1-20`.
        assert_eq!(
            container_id_for("/var/run/netns/test"),
            "cnitool-7b8a61d5d8e94d07cbe4"
        );
        assert_eq!(
            container_id_for("/run/netns/p1"),
            "cnitool-f3fef9b9576e4680797c"
        );
        let cwd = Path::new("/run/x");
        assert_eq!(
            absolute(Path::new("../netns//p1/."), cwd),
            PathBuf::from("/run/netns/p1")
        );
        assert_eq!(absolute(Path::new("/a/../../b"), cwd), PathBuf::from("/b"));
        assert_eq!(absolute(Path::new(""), cwd), PathBuf::from("/run/x"));

        let i = Invocation {
            verb: Verb::Add,
            net: "net1".into(),
            netns: vec!["../netns/p1".into()],
            ifname: None,
            cache_dir: None,
        };
        let rt = runtime_conf(&i, &|_| None, cwd).unwrap();
        assert_eq!(rt.container_id, "cnitool-f3fef9b9576e4680797c");
        assert_eq!(
            (rt.netns.as_str(), rt.ifname.as_str()),
            ("/run/netns/p1", "eth0")
        );
        assert!(rt.args.is_empty() && rt.capability_args.is_empty());
    }

    #[test]
    fn environment_is_read_with_the_flag_winning() {
        let env = |k: &str| {
            Some(
                match k {
                    "CNI_IFNAME" => "net5",
                    "CNI_CONTAINERID" => "ctr1",
                    "CNI_ARGS" => "IgnoreUnknown=1;K8S_POD_NAME=web",
                    "CAP_ARGS" => r#"{"portMappings":[{"hostPort":80}]}"#,
                    _ => return None,
                }
                .to_string(),
            )
        };
        let mut i = Invocation {
            verb: Verb::Add,
            net: "net1".into(),
            netns: vec!["/run/netns/p1".into()],
            ifname: None,
            cache_dir: None,
        };
        let rt = runtime_conf(&i, &env, Path::new("/")).unwrap();
        assert_eq!(
            (rt.container_id.as_str(), rt.ifname.as_str()),
            ("ctr1", "net5")
        );
        assert_eq!(
            rt.args,
            [
                ("IgnoreUnknown".to_string(), "1".to_string()),
                ("K8S_POD_NAME".to_string(), "web".to_string())
            ]
        );
        assert_eq!(rt.capability_args["portMappings"][0]["hostPort"], 80);
        i.ifname = Some("flag0".into());
        assert_eq!(
            runtime_conf(&i, &env, Path::new("/")).unwrap().ifname,
            "flag0"
        );
    }

    #[test]
    fn gc_keeps_the_listed_attachments() {
        let i = Invocation {
            verb: Verb::Gc,
            net: "net1".into(),
            netns: vec!["/run/netns/p1".into(), "/var/run/netns/test:net1".into()],
            ifname: None,
            cache_dir: None,
        };
        let keep = gc_valid_attachments(&i, &|_| None, Path::new("/")).unwrap();
        assert_eq!(
            keep,
            [
                Attachment {
                    container_id: "cnitool-f3fef9b9576e4680797c".into(),
                    ifname: "eth0".into()
                },
                Attachment {
                    container_id: "cnitool-7b8a61d5d8e94d07cbe4".into(),
                    ifname: "net1".into()
                }
            ]
        );
        let none = Invocation { netns: vec![], ..i };
        assert!(gc_valid_attachments(&none, &|_| None, Path::new("/"))
            .unwrap()
            .is_empty());
        assert_eq!(
            parse_cli(&args(&["gc", "net1"])),
            Ok(Cli::Run(Invocation {
                verb: Verb::Gc,
                net: "net1".into(),
                netns: vec![],
                ifname: None,
                cache_dir: None
            }))
        );
    }

    #[test]
    fn bad_cni_args_and_cap_args_are_rejected() {
        for bad in ["a", "a=", "=b", "a=b=c", "a=b;", "a=b;;c=d"] {
            let e = parse_cni_args(bad).unwrap_err();
            assert_eq!(e.code(), 4, "{bad}");
            assert!(e.to_string().starts_with("CNI_ARGS: invalid pair"), "{e}");
        }
        assert_eq!(
            parse_cni_args("a=b;c=d").unwrap(),
            [
                ("a".to_string(), "b".to_string()),
                ("c".to_string(), "d".to_string())
            ]
        );
        assert_eq!(parse_cap_args("[1]").unwrap_err().code(), 4);
        assert_eq!(parse_cap_args("{").unwrap_err().code(), 4);
        assert!(parse_cap_args("null").unwrap().is_empty());
    }

    #[test]
    fn add_output_is_indented_by_four_spaces() {
        let v: Value = libcni::gojson::parse_value(
            br#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}"#,
        )
        .unwrap();
        assert_eq!(
            pretty(&v).unwrap(),
            "{\n    \"cniVersion\": \"1.0.0\",\n    \"ips\": [\n        {\n            \"address\": \"10.0.0.2/24\"\n        }\n    ]\n}"
        );
    }
}
