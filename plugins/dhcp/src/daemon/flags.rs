//! `dhcp daemon`'s flags, read as Go's `flag` package reads the
//! reference's: `-name value`, `-name=value`, `--name` alike, booleans as
//! `-broadcast` or `-broadcast=false`, durations as Go writes them
//! (`10s`, `1m30s`, `500ms`).

use std::path::PathBuf;
use std::time::Duration;

/// The daemon's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flags {
    pub socket_path: PathBuf,
    pub pidfile: Option<PathBuf>,
    pub host_prefix: String,
    pub lease_dir: PathBuf,
    pub broadcast: bool,
    pub timeout: Duration,
    pub resend_max: Duration,
    pub resend_timeout: Duration,
}

impl Default for Flags {
    fn default() -> Flags {
        Flags {
            socket_path: PathBuf::from(crate::config::DEFAULT_SOCKET_PATH),
            pidfile: None,
            host_prefix: String::new(),
            lease_dir: PathBuf::from(DEFAULT_LEASE_DIR),
            broadcast: false,
            timeout: Duration::from_secs(10),
            resend_max: Duration::from_secs(62),
            resend_timeout: Duration::from_secs(208),
        }
    }
}

pub const DEFAULT_LEASE_DIR: &str = "/var/lib/cni/dhcp";

pub const USAGE: &str = "\
Usage: dhcp daemon [flags]
  -socketpath PATH     unix socket to listen on (default /run/cni/dhcp.sock;
                       ignored under systemd socket activation, LISTEN_FDS)
  -pidfile PATH        write the daemon's PID there (absolute)
  -hostprefix PREFIX   prefix of the host's root: put before the socket path,
                       the lease directory and every container's CNI_NETNS
                       (for a daemon in a container with the host's / there)
  -leasedir DIR        where the leases are kept (default /var/lib/cni/dhcp)
  -broadcast           set the broadcast flag in DISCOVER and REQUEST
  -timeout D           longest wait for the answer to one message (default 10s)
  -resendmax D         longest backoff between two sends (default 1m2s)
  -resendtimeout D     how long an ADD tries before it fails (default 3m28s)
";

/// A command line the daemon cannot run, in the words of Go's `flag`
/// package (the reference daemon's), naming the flag or argument.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    /// A word that is not a flag, before `--`.
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    /// `---x`, `-=x`, `-`.
    #[error("bad flag syntax: {0}")]
    Syntax(String),
    /// A flag the daemon does not have.
    #[error("flag provided but not defined: -{0}")]
    NotDefined(String),
    /// A flag given last, without its value.
    #[error("flag needs an argument: -{0}")]
    NeedsArgument(String),
    /// `-broadcast=` with what Go's `strconv.ParseBool` refuses.
    #[error("invalid boolean value {0:?} for -broadcast: parse error")]
    NotABoolean(String),
    /// A value the flag cannot take, and what it wants.
    #[error("invalid value {value:?} for -{flag}: {wants}")]
    InvalidValue {
        flag: &'static str,
        value: String,
        wants: &'static str,
    },
    /// A relative `-pidfile` (the reference's message, at its start).
    #[error("Error writing pidfile {0:?}: path not absolute")]
    RelativePidfile(String),
}

/// What parsing gave: the flags, or a request for help.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    Run(Flags),
    Help,
}

/// Parses the arguments after `daemon`.
pub fn parse(args: &[String]) -> Result<Parsed, FlagError> {
    let mut f = Flags::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            break;
        }
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(FlagError::Unexpected(arg.clone()));
        };
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(FlagError::Syntax(arg.clone()));
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        if matches!(name, "h" | "help") {
            return Ok(Parsed::Help);
        }
        if name == "broadcast" {
            f.broadcast = match inline.as_deref() {
                None => true,
                Some(v) => parse_bool(v).ok_or_else(|| FlagError::NotABoolean(v.to_string()))?,
            };
            continue;
        }
        const KNOWN: [&str; 7] = [
            "socketpath",
            "pidfile",
            "hostprefix",
            "leasedir",
            "timeout",
            "resendmax",
            "resendtimeout",
        ];
        let Some(name) = KNOWN.iter().copied().find(|k| *k == name) else {
            return Err(FlagError::NotDefined(name.to_string()));
        };
        let value = match inline {
            Some(v) => v,
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| FlagError::NeedsArgument(name.to_string()))?
                    .clone();
                i += 1;
                v
            }
        };
        let duration = |v: &str| {
            parse_duration(v)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| FlagError::InvalidValue {
                    flag: name,
                    value: v.to_string(),
                    wants: "a positive duration such as 10s",
                })
        };
        match name {
            "socketpath" if !value.is_empty() => f.socket_path = PathBuf::from(value),
            "socketpath" => {}
            "pidfile" if value.is_empty() => f.pidfile = None,
            "pidfile" => {
                if !value.starts_with('/') {
                    return Err(FlagError::RelativePidfile(value));
                }
                f.pidfile = Some(PathBuf::from(value));
            }
            "hostprefix" => f.host_prefix = value,
            "leasedir" => {
                if !value.starts_with('/') {
                    return Err(FlagError::InvalidValue {
                        flag: "leasedir",
                        value,
                        wants: "not an absolute path",
                    });
                }
                f.lease_dir = PathBuf::from(value);
            }
            "timeout" => f.timeout = duration(&value)?,
            "resendmax" => f.resend_max = duration(&value)?,
            "resendtimeout" => f.resend_timeout = duration(&value)?,
            _ => unreachable!("checked above"),
        }
    }
    if !f.socket_path.is_absolute() {
        return Err(FlagError::InvalidValue {
            flag: "socketpath",
            value: f.socket_path.display().to_string(),
            wants: "not an absolute path",
        });
    }
    Ok(Parsed::Run(f))
}

/// Go's `strconv.ParseBool`.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `time.ParseDuration` for non-negative values: a sequence of
/// decimal numbers, each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`,
/// `h`); `0` alone is zero.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = num.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = tail;
    }
    if !total.is_finite() || total > 1e9 {
        return None;
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn run(a: &[&str]) -> Result<Flags, FlagError> {
        match parse(&args(a))? {
            Parsed::Run(f) => Ok(f),
            Parsed::Help => panic!("{a:?} asks for help"),
        }
    }

    #[test]
    fn go_flag_forms() {
        assert_eq!(run(&[]).unwrap(), Flags::default());
        let f = run(&[
            "-socketpath",
            "/tmp/d.sock",
            "--pidfile=/tmp/d.pid",
            "-broadcast",
            "-timeout=1.5s",
            "--resendmax",
            "2m",
            "-resendtimeout",
            "1h2m3s",
            "-hostprefix",
            "/host",
            "-leasedir=/tmp/l",
        ])
        .unwrap();
        assert_eq!(f.socket_path, PathBuf::from("/tmp/d.sock"));
        assert_eq!(f.pidfile, Some(PathBuf::from("/tmp/d.pid")));
        assert!(f.broadcast);
        assert_eq!(f.timeout, Duration::from_millis(1500));
        assert_eq!(f.resend_max, Duration::from_secs(120));
        assert_eq!(f.resend_timeout, Duration::from_secs(3723));
        assert_eq!(f.host_prefix, "/host");
        assert_eq!(f.lease_dir, PathBuf::from("/tmp/l"));
        assert!(!run(&["-broadcast=false"]).unwrap().broadcast);
        assert_eq!(parse(&args(&["-h"])).unwrap(), Parsed::Help);
    }

    #[test]
    fn bad_flags_are_named() {
        for (a, needle) in [
            (vec!["-nope"], "not defined: -nope"),
            (vec!["-timeout"], "needs an argument: -timeout"),
            (vec!["-timeout", "ten"], "-timeout"),
            (vec!["-timeout", "0s"], "-timeout"),
            (vec!["-broadcast=maybe"], "-broadcast"),
            (vec!["-pidfile", "rel.pid"], "not absolute"),
            (vec!["-socketpath", "rel.sock"], "-socketpath"),
            (vec!["-leasedir", "rel"], "-leasedir"),
            (vec!["stray"], "unexpected argument"),
            (vec!["---x"], "bad flag syntax"),
        ] {
            let e = run(&a).unwrap_err().to_string();
            assert!(e.contains(needle), "{a:?}: {e}");
        }
    }

    #[test]
    fn durations_as_go() {
        let d = |s: &str| parse_duration(s);
        assert_eq!(d("10s"), Some(Duration::from_secs(10)));
        assert_eq!(d("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(d("1m2s"), Some(Duration::from_secs(62)));
        assert_eq!(d("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        for bad in ["", "10", "s", "1x", "-1s", "1..2s"] {
            assert_eq!(d(bad), None, "{bad}");
        }
    }
}
