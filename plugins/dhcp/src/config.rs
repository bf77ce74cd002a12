//! The plugin's keys, under `ipam`: `daemonSocketPath`, `request`,
//! `provide` and `priority`, as the Go reference reads them, parsed and
//! validated before the daemon is asked anything. What comes out is what
//! the daemon puts in its messages ([`DhcpOptions`]): the parameter request
//! list and the options the client provides, `CNI_ARGS` values included.

use std::path::PathBuf;

use libcni::gojson::Lenient;
use libcni::skel::CmdArgs;
use libcni::Error;
use serde::{Deserialize, Serialize};

/// Where the daemon listens unless `daemonSocketPath` says otherwise (the
/// reference's path).
pub const DEFAULT_SOCKET_PATH: &str = "/run/cni/dhcp.sock";

/// The longest path a unix socket address holds (`sun_path` less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// The longest value of one option: its length is one byte on the wire.
pub const MAX_OPTION_LEN: usize = 255;

/// Options requested when `request` does not skip the defaults: the
/// reference's two (subnet mask, router), then DNS (servers, domain name,
/// search list) and routes (classless, then classful static).
pub const DEFAULT_REQUEST: [u8; 7] = [1, 3, 6, 15, 119, 121, 33];

/// Option codes the client sets itself in every message it sends, so a
/// config may neither provide nor request them: pad and end (framing), the
/// message type, the parameter request list (that is `request`), the
/// requested address and the server identifier (the lease cycle's own).
const RESERVED: [(u8, &str); 6] = [
    (0, "pad"),
    (50, "the requested address"),
    (53, "the message type"),
    (54, "the server identifier"),
    (55, "the parameter request list (use `request`)"),
    (255, "end"),
];

/// The option names the reference knows, and the few more of
/// dhcp-options(5) that this plugin reads back.
const NAMES: [(&str, u8); 12] = [
    ("subnet-mask", 1),
    ("routers", 3),
    ("domain-name-servers", 6),
    ("host-name", 12),
    ("domain-name", 15),
    ("interface-mtu", 26),
    ("static-routes", 33),
    ("vendor-class-identifier", 60),
    ("dhcp-client-identifier", 61),
    ("user-class", 77),
    ("domain-search", 119),
    ("classless-static-routes", 121),
];

/// What the client puts in its messages besides the lease cycle's own
/// options: sent to the daemon, kept with the lease, used for every
/// message of its life.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DhcpOptions {
    /// Option 55, in order, without duplicates; empty: no option 55.
    #[serde(default)]
    pub request: Vec<u8>,
    /// Options given as they are (code and value), in order of code.
    #[serde(default)]
    pub provide: Vec<Provided>,
}

/// One provided option: its code and its bytes (a string, as the
/// reference's `value`s and `CNI_ARGS` are).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provided {
    pub code: u8,
    pub value: String,
}

/// The validated config of one ADD or CHECK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    pub socket: PathBuf,
    pub options: DhcpOptions,
    /// `priority`: the metric of every route of the result.
    pub priority: Option<u32>,
}

#[derive(Deserialize, Default)]
struct Raw {
    #[serde(default)]
    ipam: Option<RawIpam>,
}

#[derive(Deserialize, Default)]
struct RawIpam {
    #[serde(rename = "daemonSocketPath", default)]
    daemon_socket_path: Option<String>,
    #[serde(default)]
    provide: Option<Vec<RawProvide>>,
    #[serde(default)]
    request: Option<Vec<RawRequest>>,
    #[serde(default)]
    priority: Option<i64>,
}

#[derive(Deserialize, Default)]
struct RawProvide {
    #[serde(default)]
    option: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(rename = "fromArg", default)]
    from_arg: Option<String>,
}

#[derive(Deserialize, Default)]
struct RawRequest {
    #[serde(rename = "skipDefault", default)]
    skip_default: Option<bool>,
    #[serde(default)]
    option: Option<String>,
}

impl Conf {
    /// Parses and validates every key (code 7 naming the key and value),
    /// with `CNI_ARGS` for `fromArg` and the hostname.
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        let raw: Raw = args.config()?;
        Conf::from_parts(raw.ipam.unwrap_or_default(), &args.cni_args)
    }

    /// [`Conf::parse`] of a whole config and `CNI_ARGS` string (the fuzz
    /// target's entry).
    pub fn parse_bytes(stdin: &[u8], cni_args: &str) -> Result<Conf, Error> {
        let raw: Raw = libcni::skel::parse_config(stdin)?;
        Conf::from_parts(raw.ipam.unwrap_or_default(), cni_args)
    }

    fn from_parts(ipam: RawIpam, cni_args: &str) -> Result<Conf, Error> {
        let socket = socket_path(ipam.daemon_socket_path.as_deref())?;
        let args = LooseArgs::parse(cni_args);
        let mut provide: Vec<Provided> = Vec::new();
        for (i, p) in ipam.provide.unwrap_or_default().into_iter().enumerate() {
            let key = format!("ipam.provide[{i}]");
            let code = parse_option(&format!("{key}.option"), p.option.as_deref())?;
            check_not_reserved(&format!("{key}.option"), code)?;
            let value = p.value.unwrap_or_default();
            if value.len() > MAX_OPTION_LEN {
                return Err(Error::config(
                    format!("{key}.value"),
                    format!(
                        "{} bytes for option {code}: at most {MAX_OPTION_LEN}",
                        value.len()
                    ),
                ));
            }
            // As the reference: a `fromArg` present in CNI_ARGS wins over `value`.
            let from_arg = p.from_arg.filter(|a| !a.is_empty());
            let chosen = match from_arg.as_deref().and_then(|a| args.get(a)) {
                Some(v) if v.len() > MAX_OPTION_LEN => {
                    return Err(Error::InvalidEnv(format!(
                        "CNI_ARGS {}: {} bytes for option {code} ({key}.fromArg): at most {MAX_OPTION_LEN}",
                        from_arg.unwrap_or_default(),
                        v.len()
                    )))
                }
                Some(v) => Some(v.to_string()),
                None if !value.is_empty() => Some(value),
                None => None,
            };
            if let Some(value) = chosen {
                // A later entry for the same option replaces the earlier one.
                provide.retain(|o| o.code != code);
                provide.push(Provided { code, value });
            }
        }
        // The pod's name is its hostname, unless a config provides one.
        if !provide.iter().any(|o| o.code == 12) {
            if let Some(name) = args.get("K8S_POD_NAME").filter(|n| !n.is_empty()) {
                if name.len() <= MAX_OPTION_LEN {
                    provide.push(Provided {
                        code: 12,
                        value: name.to_string(),
                    });
                }
            }
        }
        provide.sort_by_key(|o| o.code);

        let mut request: Vec<u8> = Vec::new();
        let mut skip_default = false;
        for (i, r) in ipam.request.unwrap_or_default().into_iter().enumerate() {
            let key = format!("ipam.request[{i}].option");
            skip_default |= r.skip_default.unwrap_or(false);
            let Some(name) = r.option.filter(|o| !o.is_empty()) else {
                continue; // an entry that only says skipDefault
            };
            let code = parse_option(&key, Some(&name))?;
            if code == 0 || code == 255 {
                return Err(Error::config(
                    key,
                    format!("{name:?} is not an option that can be requested"),
                ));
            }
            if !request.contains(&code) {
                request.push(code);
            }
        }
        if !skip_default {
            for code in DEFAULT_REQUEST {
                if !request.contains(&code) {
                    request.push(code);
                }
            }
        }

        let priority = match ipam.priority {
            None | Some(0) => None,
            Some(p) => Some(u32::try_from(p).map_err(|_| {
                Error::config(
                    "ipam.priority",
                    format!("{p} is not a route metric (0-4294967295)"),
                )
            })?),
        };
        Ok(Conf {
            socket,
            options: DhcpOptions { request, provide },
            priority,
        })
    }
}

/// The socket path a teardown (DEL, GC) uses: `daemonSocketPath` when it is
/// usable, else the default (an unusable one made ADD fail before it asked
/// any daemon).
pub fn teardown_socket_path(args: &CmdArgs) -> PathBuf {
    #[derive(Deserialize, Default)]
    struct T {
        #[serde(default)]
        ipam: Lenient<TIpam>,
    }
    #[derive(Deserialize, Default)]
    struct TIpam {
        #[serde(rename = "daemonSocketPath", default)]
        daemon_socket_path: Lenient<String>,
    }
    let t: T = args.config().unwrap_or_default();
    let given = t
        .ipam
        .usable("ipam")
        .and_then(|i| i.daemon_socket_path.usable("ipam.daemonSocketPath"));
    match socket_path(given.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ignoring {e}");
            PathBuf::from(DEFAULT_SOCKET_PATH)
        }
    }
}

/// `daemonSocketPath`: absolute, at most 107 bytes, no NUL; empty or absent
/// is the default.
fn socket_path(given: Option<&str>) -> Result<PathBuf, Error> {
    let key = "ipam.daemonSocketPath";
    let Some(p) = given.filter(|p| !p.is_empty()) else {
        return Ok(PathBuf::from(DEFAULT_SOCKET_PATH));
    };
    if !p.starts_with('/') {
        return Err(Error::config(key, format!("{p:?} is not an absolute path")));
    }
    if p.contains('\0') {
        return Err(Error::config(key, format!("{p:?} contains a NUL byte")));
    }
    if p.len() > MAX_SOCKET_PATH {
        return Err(Error::config(
            key,
            format!(
                "{p:?} is {} bytes long: a unix socket path has at most {MAX_SOCKET_PATH}",
                p.len()
            ),
        ));
    }
    Ok(PathBuf::from(p))
}

/// An option as the reference names it: one of its names, or a decimal
/// code 0-255.
fn parse_option(key: &str, given: Option<&str>) -> Result<u8, Error> {
    let name = given.unwrap_or_default();
    if let Some((_, code)) = NAMES.iter().find(|(n, _)| *n == name) {
        return Ok(*code);
    }
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(code) = name.parse::<u8>() {
            return Ok(code);
        }
    }
    Err(Error::config(
        key,
        format!(
            "{name:?} is neither an option code (0-255) nor an option name ({})",
            NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        ),
    ))
}

fn check_not_reserved(key: &str, code: u8) -> Result<(), Error> {
    match RESERVED.iter().find(|(c, _)| *c == code) {
        Some((_, what)) => Err(Error::config(
            key,
            format!("option {code} is {what}, which the client sets itself"),
        )),
        None => Ok(()),
    }
}

/// `CNI_ARGS` read as the reference's dhcp plugin reads them: `K=V` pairs
/// split on `;`, the value everything after the first `=`, parts without
/// `=` ignored, a later key winning. It never fails: the reference never
/// rejects `CNI_ARGS` either.
struct LooseArgs(Vec<(String, String)>);

impl LooseArgs {
    fn parse(s: &str) -> LooseArgs {
        LooseArgs(
            s.split(';')
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(ipam: serde_json::Value, args: &str) -> Result<Conf, Error> {
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "ipam": ipam});
        Conf::parse_bytes(conf.to_string().as_bytes(), args)
    }

    fn err(ipam: serde_json::Value, args: &str) -> (u32, String) {
        let e = parse(ipam, args).unwrap_err();
        (e.code(), e.to_string())
    }

    #[test]
    fn defaults() {
        let c = parse(json!({"type": "dhcp"}), "").unwrap();
        assert_eq!(c.socket, PathBuf::from("/run/cni/dhcp.sock"));
        assert_eq!(c.options.request, DEFAULT_REQUEST.to_vec());
        assert!(c.options.provide.is_empty());
        assert_eq!(c.priority, None);
        let c = Conf::parse_bytes(br#"{"name":"n"}"#, "").unwrap();
        assert_eq!(c.options.request, DEFAULT_REQUEST.to_vec());
    }

    #[test]
    fn request_and_skip_default() {
        let c = parse(
            json!({"request": [{"option": "interface-mtu"}, {"option": "42"}, {"option": "26"}]}),
            "",
        )
        .unwrap();
        assert_eq!(&c.options.request[..2], &[26, 42]);
        assert_eq!(c.options.request.len(), 2 + DEFAULT_REQUEST.len());
        let c = parse(
            json!({"request": [{"skipDefault": true}, {"option": "routers"}, {"option": "1"}]}),
            "",
        )
        .unwrap();
        assert_eq!(c.options.request, vec![3, 1]);
        let c = parse(json!({"request": [{"skipDefault": true}]}), "").unwrap();
        assert!(c.options.request.is_empty());
    }

    #[test]
    fn provide_values_args_and_hostname() {
        let c = parse(
            json!({"provide": [
                {"option": "host-name", "value": "fixed"},
                {"option": "60", "value": "vendor", "fromArg": "VC"},
                {"option": "user-class", "fromArg": "MISSING"},
                {"option": "user-class", "value": "a"},
                {"option": "user-class", "value": "b"}
            ]}),
            "K8S_POD_NAME=web-0;VC=from=args;junk",
        )
        .unwrap();
        assert_eq!(
            c.options.provide,
            vec![
                Provided {
                    code: 12,
                    value: "fixed".into()
                },
                Provided {
                    code: 60,
                    value: "from=args".into()
                },
                Provided {
                    code: 77,
                    value: "b".into()
                },
            ]
        );
        let c = parse(json!({}), "IgnoreUnknown=1;K8S_POD_NAME=web-0").unwrap();
        assert_eq!(
            c.options.provide,
            vec![Provided {
                code: 12,
                value: "web-0".into()
            }]
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let long = "x".repeat(256);
        let cases = [
            (
                json!({"daemonSocketPath": "run/dhcp.sock"}),
                "ipam.daemonSocketPath",
            ),
            (
                json!({"daemonSocketPath": format!("/{}", "a".repeat(107))}),
                "ipam.daemonSocketPath",
            ),
            (json!({"daemonSocketPath": 5}), "ipam.daemonSocketPath"),
            (
                json!({"provide": [{"option": "nope", "value": "x"}]}),
                "ipam.provide[0].option",
            ),
            (
                json!({"provide": [{"value": "x"}]}),
                "ipam.provide[0].option",
            ),
            (
                json!({"provide": [{"option": "256", "value": "x"}]}),
                "ipam.provide[0].option",
            ),
            (
                json!({"provide": [{"option": "-1", "value": "x"}]}),
                "ipam.provide[0].option",
            ),
            (
                json!({"provide": [{"option": 12, "value": "x"}]}),
                "ipam.provide[0].option",
            ),
            (
                json!({"provide": [{}, {"option": "53", "value": "x"}]}),
                "ipam.provide[0].option",
            ),
            (
                json!({"provide": [{"option": "12", "value": "x"}, {"option": "53", "value": "x"}]}),
                "ipam.provide[1].option",
            ),
            (
                json!({"provide": [{"option": "12", "value": long}]}),
                "ipam.provide[0].value",
            ),
            (
                json!({"provide": [{"option": "12", "value": 7}]}),
                "ipam.provide[0].value",
            ),
            (json!({"provide": {"option": "12"}}), "ipam.provide"),
            (
                json!({"request": [{"option": "foo"}]}),
                "ipam.request[0].option",
            ),
            (
                json!({"request": [{"option": "0"}]}),
                "ipam.request[0].option",
            ),
            (
                json!({"request": [{"skipDefault": "yes"}]}),
                "ipam.request[0].skipDefault",
            ),
            (json!({"request": "routers"}), "ipam.request"),
            (json!({"priority": -1}), "ipam.priority"),
            (json!({"priority": "1"}), "ipam.priority"),
        ];
        for (ipam, key) in cases {
            let (code, msg) = err(ipam.clone(), "");
            assert_eq!(code, 7, "{ipam}: {msg}");
            assert!(msg.contains(key), "{ipam}: {msg} should name {key}");
        }
        let (code, msg) = err(
            json!({"provide": [{"option": "12", "fromArg": "H"}]}),
            &format!("H={}", "y".repeat(300)),
        );
        assert_eq!(code, 4);
        assert!(
            msg.contains("CNI_ARGS H") && msg.contains("fromArg"),
            "{msg}"
        );
    }

    #[test]
    fn teardown_uses_what_it_can() {
        let a = libcni::skel::test_args(
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"daemonSocketPath":"/tmp/x.sock","provide":7}}"#,
        );
        assert_eq!(teardown_socket_path(&a), PathBuf::from("/tmp/x.sock"));
        let a = libcni::skel::test_args(
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"daemonSocketPath":"rel"}}"#,
        );
        assert_eq!(teardown_socket_path(&a), PathBuf::from(DEFAULT_SOCKET_PATH));
        let a = libcni::skel::test_args(r#"{"cniVersion":"1.0.0","name":"n","ipam":[]}"#);
        assert_eq!(teardown_socket_path(&a), PathBuf::from(DEFAULT_SOCKET_PATH));
    }
}
