//! The one error type of the suite. Every variant knows its CNI error code
//! (spec §"Error"), and every rejection names the key, value or variable
//! that caused it, so a runtime's log is enough to find the fault.
//! [`ErrorList`] collects the errors of a best-effort teardown (DEL, GC)
//! and reports them together.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Well-known CNI error codes (0-99 are reserved by the spec).
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENV: u32 = 4;
    pub const IO: u32 = 5;
    pub const DECODE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const NOT_AVAILABLE: u32 = 50;
    pub const LIMITED_CONNECTIVITY: u32 = 51;
    /// Plugin-specific (100+): a kernel operation (netlink, netns, sysctl) failed.
    pub const KERNEL: u32 = 100;
    /// Plugin-specific: a delegated plugin could not be found or run.
    pub const DELEGATE: u32 = 101;
    /// Plugin-specific: CHECK found the node different from the result.
    pub const CHECK_FAILED: u32 = 102;
    /// Plugin-specific: the config is valid but another attachment holds
    /// what it asks for (e.g. a host port already mapped).
    pub const CONFLICT: u32 = 103;
    /// Same value as Go's `ErrInternal`: a bug (e.g. a panic) in the plugin.
    pub const INTERNAL: u32 = 999;
}

/// An error of the suite, mapped onto a CNI error code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Code 1: the config's `cniVersion` is not one we speak, or a verb is
    /// not allowed at that version.
    #[error("{msg}")]
    IncompatibleVersion { msg: String, details: String },
    /// Code 2: a config key we understand but do not support with this value.
    #[error("unsupported field {key:?}: {value}")]
    UnsupportedField { key: String, value: String },
    /// Code 3: the container is unknown.
    #[error("{0}")]
    UnknownContainer(String),
    /// Code 4: a `CNI_*` variable is missing or invalid; the message names it.
    #[error("{0}")]
    InvalidEnv(String),
    /// Code 5: reading or writing a file or stream failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Code 6: stdin or a result could not be decoded.
    #[error("{0}")]
    Decode(String),
    /// Code 7: the network configuration is invalid; names the key.
    #[error("invalid network config: {key}: {msg}")]
    InvalidConfig { key: String, msg: String },
    /// Code 11: transient; the runtime should retry.
    #[error("{0}")]
    TryAgainLater(String),
    /// Code 50: STATUS: the plugin cannot serve ADD now.
    #[error("{0}")]
    NotAvailable(String),
    /// Code 51: STATUS: not available, and existing containers may be affected.
    #[error("{0}")]
    LimitedConnectivity(String),
    /// Code 100: a kernel operation failed; `op` says which.
    #[error("{op}: {source}")]
    Kernel {
        op: String,
        #[source]
        source: std::io::Error,
    },
    /// Code 101: a delegated plugin could not be found or run.
    #[error("{0}")]
    Delegate(String),
    /// Code 102: CHECK found state that differs from `prevResult`.
    #[error("{0}")]
    CheckFailed(String),
    /// Code 103: another attachment holds what this one asks for; names it.
    #[error("{0}")]
    Conflict(String),
    /// An error reported by another plugin (a delegate), kept with its code.
    #[error("{0}")]
    Plugin(ErrorResult),
    /// Code 999: a bug, e.g. a panic.
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn code(&self) -> u32 {
        match self {
            Error::IncompatibleVersion { .. } => code::INCOMPATIBLE_VERSION,
            Error::UnsupportedField { .. } => code::UNSUPPORTED_FIELD,
            Error::UnknownContainer(_) => code::UNKNOWN_CONTAINER,
            Error::InvalidEnv(_) => code::INVALID_ENV,
            Error::Io { .. } => code::IO,
            Error::Decode(_) => code::DECODE,
            Error::InvalidConfig { .. } => code::INVALID_CONFIG,
            Error::TryAgainLater(_) => code::TRY_AGAIN_LATER,
            Error::NotAvailable(_) => code::NOT_AVAILABLE,
            Error::LimitedConnectivity(_) => code::LIMITED_CONNECTIVITY,
            Error::Kernel { .. } => code::KERNEL,
            Error::Delegate(_) => code::DELEGATE,
            Error::CheckFailed(_) => code::CHECK_FAILED,
            Error::Conflict(_) => code::CONFLICT,
            Error::Plugin(e) => e.code,
            Error::Internal(_) => code::INTERNAL,
        }
    }

    /// CHECK's answer where the container differs from what ADD made:
    /// code 102 saying `what`.
    pub fn check_failed<T>(what: String) -> std::result::Result<T, Error> {
        Err(Error::CheckFailed(what))
    }

    /// `InvalidConfig` naming `key`.
    pub fn config(key: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::InvalidConfig {
            key: key.into(),
            msg: msg.into(),
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub fn kernel(op: impl Into<String>, source: std::io::Error) -> Self {
        Error::Kernel {
            op: op.into(),
            source,
        }
    }

    /// The spec's error result for this error, as written on stdout.
    pub fn to_result(&self, cni_version: &str) -> ErrorResult {
        if let Error::Plugin(e) = self {
            let mut e = e.clone();
            if e.cni_version.is_empty() {
                e.cni_version = cni_version.to_string();
            }
            return e;
        }
        let details = match self {
            Error::IncompatibleVersion { details, .. } => details.clone(),
            Error::Io { source, .. } | Error::Kernel { source, .. } => source.to_string(),
            _ => String::new(),
        };
        ErrorResult {
            cni_version: cni_version.to_string(),
            code: self.code(),
            msg: self.to_string(),
            details,
        }
    }
}

/// The errors of a best-effort teardown (DEL, GC), as netavark's teardown
/// collects them: every step runs, a failed one's error is pushed here, and
/// a `finish*` method reports them together at the end. "Already gone" is
/// success, for the caller to recognise before pushing.
///
/// Each `finish*` method gives `Ok` for no error and the error itself, as
/// it is, for exactly one; they differ in how several are reported.
#[derive(Debug, Default)]
pub struct ErrorList(Vec<Error>);

impl ErrorList {
    pub fn new() -> ErrorList {
        ErrorList::default()
    }

    pub fn push(&mut self, e: Error) {
        self.0.push(e);
    }

    /// Keeps the error of `r`, if any; gives its value otherwise.
    pub fn record<T>(&mut self, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.0.push(e);
                None
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Several errors: one with the first one's code and the message
    /// `<n> errors: <msg>; <msg>...`.
    pub fn finish(self) -> Result<()> {
        let n = self.0.len();
        self.combine(|code, msgs| {
            Error::Plugin(ErrorResult {
                cni_version: String::new(),
                code,
                msg: format!("{n} errors: {msgs}"),
                details: String::new(),
            })
        })
    }

    /// Several errors: one with the first one's code and the messages
    /// joined, `<msg>; <msg>...`.
    pub fn finish_joined(self) -> Result<()> {
        self.combine(|code, msg| {
            Error::Plugin(ErrorResult {
                cni_version: String::new(),
                code,
                msg,
                details: String::new(),
            })
        })
    }

    /// Several errors: one kernel error (code 100) of `op`, whose cause is
    /// the messages joined: `<op>: <msg>; <msg>...`.
    pub fn finish_kernel(self, op: &str) -> Result<()> {
        self.combine(|_, msgs| Error::kernel(op, std::io::Error::other(msgs)))
    }

    /// Several errors: the first one alone (the others were only worth
    /// going on for).
    pub fn finish_first(self) -> Result<()> {
        match self.0.into_iter().next() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// `Ok` for none, the error for one, `several(first code, "<msg>; <msg>...")`.
    fn combine(mut self, several: impl FnOnce(u32, String) -> Error) -> Result<()> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            _ => {
                let code = self.0[0].code();
                let msgs: Vec<String> = self.0.iter().map(Error::to_string).collect();
                Err(several(code, msgs.join("; ")))
            }
        }
    }
}

impl Extend<Error> for ErrorList {
    fn extend<I: IntoIterator<Item = Error>>(&mut self, errors: I) {
        self.0.extend(errors);
    }
}

impl IntoIterator for ErrorList {
    type Item = Error;
    type IntoIter = std::vec::IntoIter<Error>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// The error result of the spec: `{"cniVersion","code","msg","details"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResult {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cni_version: String,
    pub code: u32,
    #[serde(default)]
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl fmt::Display for ErrorResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.msg)?;
        if !self.details.is_empty() {
            write!(f, "; {}", self.details)?;
        }
        Ok(())
    }
}

/// Helpers for the plugins' config tests.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::Error;

    /// Asserts that `result` failed as an invalid network config (code 7)
    /// whose message, after the prefix, starts with `needle`: the key and
    /// what is wrong with it.
    #[track_caller]
    pub fn assert_config_error<T: std::fmt::Debug>(result: Result<T, Error>, needle: &str) {
        let e = result.expect_err(needle);
        assert_eq!(e.code(), 7, "{e}");
        let message = e.to_string();
        assert!(
            message.starts_with(&format!("invalid network config: {needle}")),
            "{message}\nwanted: {needle}"
        );
    }

    /// Asserts that `result` failed as an invalid network config (code 7)
    /// naming `key`, with `needle` in its message.
    #[track_caller]
    pub fn assert_config_error_at<T: std::fmt::Debug>(
        result: Result<T, Error>,
        key: &str,
        needle: &str,
    ) {
        let e = result.expect_err(needle);
        assert_eq!(e.code(), 7, "{e}");
        assert!(
            matches!(&e, Error::InvalidConfig { key: k, .. } if k == key),
            "{e:?}"
        );
        assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_spec() {
        let cases: Vec<(Error, u32)> = vec![
            (
                Error::IncompatibleVersion {
                    msg: "x".into(),
                    details: String::new(),
                },
                1,
            ),
            (
                Error::UnsupportedField {
                    key: "k".into(),
                    value: "v".into(),
                },
                2,
            ),
            (Error::UnknownContainer("c".into()), 3),
            (Error::InvalidEnv("CNI_IFNAME".into()), 4),
            (Error::io("read stdin", std::io::Error::other("x")), 5),
            (Error::Decode("bad".into()), 6),
            (Error::config("name", "missing"), 7),
            (Error::TryAgainLater("busy".into()), 11),
            (Error::NotAvailable("no".into()), 50),
            (Error::LimitedConnectivity("no".into()), 51),
            (Error::kernel("link add", std::io::Error::other("x")), 100),
            (Error::Delegate("x".into()), 101),
            (Error::CheckFailed("x".into()), 102),
            (Error::Conflict("x".into()), 103),
            (Error::Internal("panic".into()), 999),
        ];
        for (e, c) in cases {
            assert_eq!(e.code(), c, "{e:?}");
            assert_eq!(e.to_result("1.0.0").code, c);
        }
    }

    #[test]
    fn error_json_has_spec_fields() {
        let e = Error::config("ipam.subnet", "\"10.0.0.1/24\" has host bits set");
        let j = serde_json::to_value(e.to_result("1.1.0")).unwrap();
        assert_eq!(j["code"], 7);
        assert_eq!(j["cniVersion"], "1.1.0");
        assert_eq!(
            j["msg"],
            "invalid network config: ipam.subnet: \"10.0.0.1/24\" has host bits set"
        );
        assert!(j.get("details").is_none());
    }

    fn list(errors: Vec<Error>) -> ErrorList {
        let mut l = ErrorList::new();
        l.extend(errors);
        l
    }

    #[test]
    fn error_list_reports_none_one_or_all() {
        let two = || {
            vec![
                Error::InvalidEnv("CNI_NETNS \"/x\" is a directory".into()),
                Error::Delegate("no host-local".into()),
            ]
        };
        for finish in [
            ErrorList::finish,
            ErrorList::finish_joined,
            ErrorList::finish_first,
            |l: ErrorList| l.finish_kernel("op"),
        ] {
            assert!(finish(ErrorList::new()).is_ok());
            let one = finish(list(vec![Error::Delegate("no host-local".into())])).unwrap_err();
            assert_eq!((one.code(), one.to_string()), (101, "no host-local".into()));
            assert!(matches!(one, Error::Delegate(_)), "kept as it is: {one:?}");
            assert!(finish(list(two())).is_err());
        }
        let e = list(two()).finish().unwrap_err();
        assert_eq!(
            (e.code(), e.to_string()),
            (
                4,
                "2 errors: CNI_NETNS \"/x\" is a directory; no host-local".into()
            )
        );
        let e = list(two()).finish_joined().unwrap_err();
        assert_eq!(
            (e.code(), e.to_string()),
            (4, "CNI_NETNS \"/x\" is a directory; no host-local".into())
        );
        let e = list(two()).finish_kernel("bandwidth DEL").unwrap_err();
        assert_eq!(
            (e.code(), e.to_string()),
            (
                100,
                "bandwidth DEL: CNI_NETNS \"/x\" is a directory; no host-local".into()
            )
        );
        let e = list(two()).finish_first().unwrap_err();
        assert_eq!(e.code(), 4);
        let mut l = ErrorList::new();
        assert_eq!(l.record(Ok::<_, Error>(5)), Some(5));
        assert_eq!(l.record(Err::<u8, _>(Error::Internal("x".into()))), None);
        assert_eq!((l.len(), l.is_empty()), (1, false));
    }

    #[test]
    fn delegate_errors_keep_their_code() {
        let inner = ErrorResult {
            cni_version: String::new(),
            code: 7,
            msg: "bad range".into(),
            details: "d".into(),
        };
        let r = Error::Plugin(inner).to_result("0.4.0");
        assert_eq!((r.code, r.cni_version.as_str()), (7, "0.4.0"));
    }
}
