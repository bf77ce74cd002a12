//! flanneld's `subnet.env`: the node's lease as flanneld writes it
//! (`/run/flannel/subnet.env` by default), parsed into typed values.
//!
//! The format is the Go plugin's: one `KEY=VALUE` per line, split at the
//! first `=`, no quoting; unknown keys and lines without a key we read are
//! ignored; a key given twice keeps its last value.
//!
//! - `FLANNEL_NETWORK`, `FLANNEL_IPV6_NETWORK`: comma-separated CIDRs, each
//!   normalised to its network address, duplicates dropped (first kept).
//! - `FLANNEL_SUBNET`, `FLANNEL_IPV6_SUBNET`: one CIDR, normalised to the
//!   network address (`10.1.17.1/24` is the range `10.1.17.0/24`).
//! - `FLANNEL_MTU`: an unsigned 32-bit integer.
//! - `FLANNEL_IPMASQ`: true only when exactly `true`.
//!
//! Required: a network (v4 or v6), a subnet (v4 or v6), the MTU and
//! IPMASQ, as in the Go plugin. Stricter than Go: the IPv4 keys must hold
//! IPv4 prefixes and the IPv6 keys IPv6 ones, and a line naming one of our
//! keys without `=` is an error (Go panics on it). Values are trimmed of
//! surrounding whitespace (Go rejects `1450 `).
//!
//! Every problem with the file is code 11 ("try again later"): the file is
//! flanneld's state, not the runtime's config, and it appears or is
//! rewritten when flanneld (re)starts. Only a read error other than "does
//! not exist" is code 5.

use libcni::types::IpPrefix;
use libcni::{Error, IpFamily};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where flanneld writes the file when the config names none.
pub const DEFAULT_PATH: &str = "/run/flannel/subnet.env";

/// A subnet.env larger than this is not flanneld's (it writes ~150 bytes).
const MAX_LEN: u64 = 1 << 20;

/// The keys we read, in the order a "missing" message lists them.
pub const NETWORK: &str = "FLANNEL_NETWORK";
pub const IPV6_NETWORK: &str = "FLANNEL_IPV6_NETWORK";
pub const SUBNET: &str = "FLANNEL_SUBNET";
pub const IPV6_SUBNET: &str = "FLANNEL_IPV6_SUBNET";
pub const MTU: &str = "FLANNEL_MTU";
pub const IPMASQ: &str = "FLANNEL_IPMASQ";

/// The node's flannel lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetEnv {
    /// `FLANNEL_NETWORK`: the cluster's IPv4 networks (network addresses).
    pub networks: Vec<IpPrefix>,
    /// `FLANNEL_IPV6_NETWORK`.
    pub ipv6_networks: Vec<IpPrefix>,
    /// `FLANNEL_SUBNET`: this node's IPv4 range (network address).
    pub subnet: Option<IpPrefix>,
    /// `FLANNEL_IPV6_SUBNET`.
    pub ipv6_subnet: Option<IpPrefix>,
    /// `FLANNEL_MTU`.
    pub mtu: u32,
    /// `FLANNEL_IPMASQ`: flanneld masquerades itself, so the delegate
    /// must not.
    pub ipmasq: bool,
}

/// Why the file cannot be used.
#[derive(Debug)]
pub enum SubnetEnvError {
    /// The file does not exist: flanneld has not written it yet.
    NotFound { path: PathBuf },
    /// Required keys are absent.
    Incomplete {
        path: PathBuf,
        missing: Vec<&'static str>,
    },
    /// A key we read has a value we cannot use.
    Malformed {
        path: PathBuf,
        line: usize,
        key: &'static str,
        value: String,
        why: String,
    },
    /// Reading failed for another reason (permissions, not a file...).
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for SubnetEnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "failed to load flannel 'subnet.env' file: ")?;
        match self {
            SubnetEnvError::NotFound { path } => write!(
                f,
                "{} does not exist: flanneld has not written it yet",
                path.display()
            )?,
            SubnetEnvError::Incomplete { path, missing } => write!(
                f,
                "{} is missing {}: flanneld has not written it (completely) yet",
                path.display(),
                missing.join(", ")
            )?,
            SubnetEnvError::Malformed {
                path,
                line,
                key,
                value,
                why,
            } => write!(f, "{} line {line}: {key}={value:?}: {why}", path.display())?,
            SubnetEnvError::Io { path, source } => {
                write!(f, "reading {}: {source}", path.display())?
            }
        }
        write!(f, ". Check the flannel pod log for this node.")
    }
}

impl std::error::Error for SubnetEnvError {}

impl From<SubnetEnvError> for Error {
    fn from(e: SubnetEnvError) -> Error {
        match e {
            SubnetEnvError::Io { path, source } => Error::io(
                format!(
                    "failed to load flannel 'subnet.env' file: reading {}",
                    path.display()
                ),
                source,
            ),
            e => Error::TryAgainLater(e.to_string()),
        }
    }
}

impl SubnetEnv {
    /// Reads and parses the file at `path`. A FIFO or a huge file planted
    /// there cannot hang or exhaust us.
    pub fn load(path: &Path) -> Result<SubnetEnv, SubnetEnvError> {
        let io = |source: std::io::Error| {
            if source.kind() == std::io::ErrorKind::NotFound {
                SubnetEnvError::NotFound {
                    path: path.to_path_buf(),
                }
            } else {
                SubnetEnvError::Io {
                    path: path.to_path_buf(),
                    source,
                }
            }
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
            .map_err(io)?;
        if !file.metadata().map_err(io)?.is_file() {
            return Err(io(std::io::Error::other("not a regular file")));
        }
        let mut bytes = Vec::new();
        file.take(MAX_LEN + 1).read_to_end(&mut bytes).map_err(io)?;
        if bytes.len() as u64 > MAX_LEN {
            return Err(io(std::io::Error::other(format!(
                "larger than {MAX_LEN} bytes"
            ))));
        }
        let text = String::from_utf8_lossy(&bytes);
        SubnetEnv::parse(&text, path)
    }

    /// Parses the content of the file at `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<SubnetEnv, SubnetEnvError> {
        let mut networks: Option<Vec<IpPrefix>> = None;
        let mut ipv6_networks: Option<Vec<IpPrefix>> = None;
        let mut subnet = None;
        let mut ipv6_subnet = None;
        let mut mtu = None;
        let mut ipmasq = None;
        for (i, line) in text.lines().enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            let (name, value) = match line.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (line, None),
            };
            let Some(key) = known_key(name) else {
                continue;
            };
            let bad = |value: &str, why: String| SubnetEnvError::Malformed {
                path: path.to_path_buf(),
                line: i + 1,
                key,
                value: value.to_string(),
                why,
            };
            let Some(value) = value else {
                return Err(bad("", "the line has no '='".into()));
            };
            let v = value.trim();
            match key {
                NETWORK => networks = Some(parse_list(v, IpFamily::V4).map_err(|w| bad(value, w))?),
                IPV6_NETWORK => {
                    ipv6_networks = Some(parse_list(v, IpFamily::V6).map_err(|w| bad(value, w))?)
                }
                SUBNET => subnet = Some(parse_one(v, IpFamily::V4).map_err(|w| bad(value, w))?),
                IPV6_SUBNET => {
                    ipv6_subnet = Some(parse_one(v, IpFamily::V6).map_err(|w| bad(value, w))?)
                }
                MTU => {
                    mtu =
                        Some(v.parse::<u32>().map_err(|_| {
                            bad(value, "not an unsigned 32-bit integer".to_string())
                        })?)
                }
                IPMASQ => ipmasq = Some(v == "true"),
                _ => {}
            }
        }
        let networks = networks.unwrap_or_default();
        let ipv6_networks = ipv6_networks.unwrap_or_default();
        let mut missing = Vec::new();
        if networks.is_empty() && ipv6_networks.is_empty() {
            missing.extend([NETWORK, IPV6_NETWORK]);
        }
        if subnet.is_none() && ipv6_subnet.is_none() {
            missing.extend([SUBNET, IPV6_SUBNET]);
        }
        if mtu.is_none() {
            missing.push(MTU);
        }
        if ipmasq.is_none() {
            missing.push(IPMASQ);
        }
        match (mtu, ipmasq) {
            (Some(mtu), Some(ipmasq)) if missing.is_empty() => Ok(SubnetEnv {
                networks,
                ipv6_networks,
                subnet,
                ipv6_subnet,
                mtu,
                ipmasq,
            }),
            _ => Err(SubnetEnvError::Incomplete {
                path: path.to_path_buf(),
                missing,
            }),
        }
    }
}

fn known_key(name: &str) -> Option<&'static str> {
    [NETWORK, IPV6_NETWORK, SUBNET, IPV6_SUBNET, MTU, IPMASQ]
        .into_iter()
        .find(|k| *k == name)
}

/// One CIDR of the family the key is for, normalised to its network.
fn parse_one(s: &str, family: IpFamily) -> Result<IpPrefix, String> {
    let p: IpPrefix = s
        .parse()
        .map_err(|e: libcni::types::net::BadCidr| e.to_string())?;
    if p.family() != family {
        return Err(format!("{s:?} is not an {} prefix", family.name()));
    }
    Ok(p.truncate())
}

/// A comma-separated list of CIDRs, normalised, duplicates dropped.
fn parse_list(s: &str, family: IpFamily) -> Result<Vec<IpPrefix>, String> {
    let mut out: Vec<IpPrefix> = Vec::new();
    for item in s.split(',') {
        let p = parse_one(item.trim(), family)?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SubnetEnv, SubnetEnvError> {
        SubnetEnv::parse(text, Path::new("/run/flannel/subnet.env"))
    }

    fn p(s: &str) -> IpPrefix {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_only_as_flanneld_writes_it() {
        let env = parse(
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
        )
        .unwrap();
        assert_eq!(
            env,
            SubnetEnv {
                networks: vec![p("10.244.0.0/16")],
                ipv6_networks: vec![],
                subnet: Some(p("10.244.1.0/24")),
                ipv6_subnet: None,
                mtu: 1450,
                ipmasq: true,
            }
        );
    }

    #[test]
    fn ipv6_only_and_dual_stack() {
        let env = parse(
            "FLANNEL_IPV6_NETWORK=fc00::/48\nFLANNEL_IPV6_SUBNET=fc00::1/64\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=false\n",
        )
        .unwrap();
        assert_eq!(env.networks, vec![]);
        assert_eq!(env.subnet, None);
        assert_eq!(env.ipv6_networks, vec![p("fc00::/48")]);
        assert_eq!(env.ipv6_subnet, Some(p("fc00::/64")));
        assert!(!env.ipmasq);

        let env = parse(
            "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_IPV6_NETWORK=fc00::/48\nFLANNEL_IPV6_SUBNET=fc00:0:0:17::1/64\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n",
        )
        .unwrap();
        assert_eq!(env.subnet, Some(p("10.1.17.0/24")));
        assert_eq!(env.ipv6_subnet, Some(p("fc00:0:0:17::/64")));
        assert_eq!(env.mtu, 1472);
    }

    #[test]
    fn network_lists_are_normalised_and_deduplicated() {
        let env = parse(
            "FLANNEL_NETWORK=10.1.0.0/16,192.168.0.0/16,10.1.2.3/16,192.168.0.0/16\nFLANNEL_IPV6_NETWORK=fc00::/48, fc00::1/48,fd00::/56\nFLANNEL_SUBNET=10.1.17.0/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true",
        )
        .unwrap();
        assert_eq!(env.networks, vec![p("10.1.0.0/16"), p("192.168.0.0/16")]);
        assert_eq!(env.ipv6_networks, vec![p("fc00::/48"), p("fd00::/56")]);
    }

    #[test]
    fn ipmasq_is_true_only_when_exactly_true() {
        for (v, want) in [
            ("true", true),
            ("True", false),
            ("TRUE", false),
            ("1", false),
            ("yes", false),
            ("", false),
            ("false", false),
        ] {
            let env = parse(&format!(
                "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.0/24\nFLANNEL_MTU=1\nFLANNEL_IPMASQ={v}\n"
            ))
            .unwrap();
            assert_eq!(env.ipmasq, want, "{v:?}");
        }
    }

    #[test]
    fn lines_split_at_the_first_equals_last_one_wins_others_ignored() {
        let env = parse(
            "# comment\nFOO=bar=baz\n\nFLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.9.0.0/24\nFLANNEL_SUBNET=10.1.17.0/24\r\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\nOTHER\n",
        )
        .unwrap();
        assert_eq!(env.subnet, Some(p("10.1.17.0/24")), "CRLF and last wins");
    }

    #[test]
    fn incomplete_names_the_file_and_every_missing_key() {
        let e = parse("").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to load flannel 'subnet.env' file: /run/flannel/subnet.env is missing \
             FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK, FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET, \
             FLANNEL_MTU, FLANNEL_IPMASQ: flanneld has not written it (completely) yet. \
             Check the flannel pod log for this node."
        );
        let e = parse("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.0/24\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("is missing FLANNEL_MTU, FLANNEL_IPMASQ: flanneld"),
            "{e}"
        );
        let err: Error = e.into();
        assert_eq!(err.code(), 11);
    }

    #[test]
    fn malformed_values_name_the_line_key_and_value() {
        let e = parse("FLANNEL_MTU=abc\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to load flannel 'subnet.env' file: /run/flannel/subnet.env line 1: \
             FLANNEL_MTU=\"abc\": not an unsigned 32-bit integer. Check the flannel pod log \
             for this node."
        );
        for (text, needle) in [
            ("FLANNEL_MTU=-1", "FLANNEL_MTU=\"-1\""),
            ("FLANNEL_MTU=4294967296", "FLANNEL_MTU"),
            (
                "\nFLANNEL_SUBNET=10.1.17.0",
                "line 2: FLANNEL_SUBNET=\"10.1.17.0\"",
            ),
            ("FLANNEL_SUBNET=fc00::/64", "not an IPv4 prefix"),
            ("FLANNEL_IPV6_SUBNET=10.0.0.0/8", "not an IPv6 prefix"),
            (
                "FLANNEL_NETWORK=10.0.0.0/8,",
                "FLANNEL_NETWORK=\"10.0.0.0/8,\"",
            ),
            ("FLANNEL_NETWORK=", "FLANNEL_NETWORK=\"\""),
            ("FLANNEL_MTU", "FLANNEL_MTU=\"\": the line has no '='"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(matches!(e, SubnetEnvError::Malformed { .. }), "{text}");
            assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
            assert_eq!(Error::from(e).code(), 11);
        }
    }

    #[test]
    fn a_missing_file_says_flanneld_has_not_written_it() {
        let e = SubnetEnv::load(Path::new("/nonexistent-flannel-test/subnet.env")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to load flannel 'subnet.env' file: /nonexistent-flannel-test/subnet.env \
             does not exist: flanneld has not written it yet. Check the flannel pod log for \
             this node."
        );
        assert_eq!(Error::from(e).code(), 11);
        // A directory is not a subnet.env: an I/O error (5), not "try again".
        let e = SubnetEnv::load(Path::new("/")).unwrap_err();
        assert!(matches!(e, SubnetEnvError::Io { .. }));
        assert_eq!(Error::from(e).code(), 5);
    }
}
