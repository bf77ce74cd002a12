//! What tc-redirect-tap reads besides the keys every plugin shares: its
//! config has no keys of its own (nor has awslabs' plugin); the tap is
//! described by `CNI_ARGS`, as firecracker-go-sdk and firecracker-containerd
//! pass it:
//!
//! - `TC_REDIRECT_TAP_NAME`: the tap's name; absent or empty, the kernel
//!   picks one from the template `tap%d` (`tap0` in a fresh pod namespace),
//!   as awslabs' plugin leaves it to the kernel. A name may itself be a
//!   template with one `%d`.
//! - `TC_REDIRECT_TAP_UID`, `TC_REDIRECT_TAP_GID`: the tap's owner and
//!   group (the user and group a VM monitor attaches as); absent, the
//!   plugin's effective user and group, as awslabs' plugin sets them.
//!
//! Every other key of `CNI_ARGS` is ignored, with or without
//! `IgnoreUnknown`, as awslabs' plugin ignores them (containerd sends
//! `K8S_POD_*`). A value the kernel would refuse is code 4 naming the
//! variable and the value, before anything is touched.

use libcni::args::CniArgs;
use libcni::skel::CmdArgs;
use libcni::Error;

/// The tap's name.
pub const ARG_NAME: &str = "TC_REDIRECT_TAP_NAME";
/// The tap's owner.
pub const ARG_UID: &str = "TC_REDIRECT_TAP_UID";
/// The tap's group.
pub const ARG_GID: &str = "TC_REDIRECT_TAP_GID";

/// The name the kernel fills in when `TC_REDIRECT_TAP_NAME` gives none:
/// what the kernel itself uses for a tap created without a name.
pub const DEFAULT_TAP_NAME: &str = "tap%d";

/// The tap as `CNI_ARGS` describe it, validated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Conf {
    /// `TC_REDIRECT_TAP_NAME`, when given (not empty).
    pub name: Option<String>,
    /// `TC_REDIRECT_TAP_UID`, when given.
    pub uid: Option<u32>,
    /// `TC_REDIRECT_TAP_GID`, when given.
    pub gid: Option<u32>,
}

impl Conf {
    /// Reads `CNI_ARGS` of `args` (ADD and CHECK).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        Conf::from_cni_args(&args.cni_args()?)
    }

    pub fn from_cni_args(a: &CniArgs) -> Result<Conf, Error> {
        let name = match a.get(ARG_NAME) {
            None | Some("") => None,
            Some(n) => {
                if let Some(why) = tap_name_fault(n) {
                    return Err(bad(ARG_NAME, n, why));
                }
                Some(n.to_string())
            }
        };
        Ok(Conf {
            name,
            uid: a.get(ARG_UID).map(|v| id(ARG_UID, v)).transpose()?,
            gid: a.get(ARG_GID).map(|v| id(ARG_GID, v)).transpose()?,
        })
    }

    /// The name (or template) to create the tap with.
    pub fn tap_name(&self) -> &str {
        self.name.as_deref().unwrap_or(DEFAULT_TAP_NAME)
    }

    /// Whether the name is a template the kernel fills in.
    pub fn is_template(&self) -> bool {
        self.tap_name().contains('%')
    }

    /// The owner: `TC_REDIRECT_TAP_UID`, else our effective user.
    pub fn owner(&self) -> u32 {
        // SAFETY: geteuid has no preconditions and cannot fail.
        self.uid.unwrap_or_else(|| unsafe { libc::geteuid() })
    }

    /// The group: `TC_REDIRECT_TAP_GID`, else our effective group.
    pub fn group(&self) -> u32 {
        // SAFETY: getegid has no preconditions and cannot fail.
        self.gid.unwrap_or_else(|| unsafe { libc::getegid() })
    }
}

fn bad(var: &str, value: &str, why: &str) -> Error {
    Error::InvalidEnv(format!("CNI_ARGS {var}={value:?}: {why}"))
}

/// Why the kernel would refuse `name` for a tap (`dev_valid_name`, and
/// `dev_alloc_name`'s one `%d`), if it would.
fn tap_name_fault(name: &str) -> Option<&'static str> {
    if name.len() > 15 {
        return Some("an interface name has at most 15 bytes");
    }
    if name == "." || name == ".." {
        return Some("is not an interface name");
    }
    if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace() || b == 0x0b)
    {
        return Some("an interface name has no '/', ':', NUL or whitespace");
    }
    if let Some(at) = name.find('%') {
        if !name[at + 1..].starts_with('d') || name[at + 2..].contains('%') {
            return Some("a name template has exactly one '%', as '%d'");
        }
    }
    None
}

/// A user or group ID as Go's `strconv.Atoi` reads it (an optional `+`,
/// decimal digits), one the kernel takes: 0 to 4294967294 (4294967295 is
/// the kernel's "none", and `TUNSETOWNER` refuses it).
fn id(var: &str, value: &str) -> Result<u32, Error> {
    let digits = value.strip_prefix('+').unwrap_or(value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(var, value, "not a decimal user or group ID"));
    }
    match digits.parse::<u32>() {
        Ok(v) if v != u32::MAX => Ok(v),
        _ => Err(bad(
            var,
            value,
            "out of range (0 to 4294967294; 4294967295 is no ID)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(s: &str) -> Result<Conf, Error> {
        Conf::from_cni_args(&CniArgs::parse(s).unwrap())
    }

    #[test]
    fn defaults_are_a_kernel_name_and_our_ids() {
        let c = conf("").unwrap();
        assert_eq!(c, Conf::default());
        assert_eq!((c.tap_name(), c.is_template()), ("tap%d", true));
        // SAFETY: no preconditions.
        assert_eq!(c.owner(), unsafe { libc::geteuid() });
        // SAFETY: no preconditions.
        assert_eq!(c.group(), unsafe { libc::getegid() });
        // An empty name is no name, as in awslabs' plugin.
        assert_eq!(conf("TC_REDIRECT_TAP_NAME=").unwrap().name, None);
    }

    #[test]
    fn the_tap_comes_from_cni_args_whatever_else_they_hold() {
        let c = conf(
            "K8S_POD_NAME=web;TC_REDIRECT_TAP_NAME=vm-tap;TC_REDIRECT_TAP_UID=1000;\
             TC_REDIRECT_TAP_GID=+107;FOO=bar",
        )
        .unwrap();
        assert_eq!(
            c,
            Conf {
                name: Some("vm-tap".into()),
                uid: Some(1000),
                gid: Some(107),
            }
        );
        assert_eq!((c.tap_name(), c.is_template()), ("vm-tap", false));
        assert_eq!((c.owner(), c.group()), (1000, 107));
        assert!(conf("TC_REDIRECT_TAP_NAME=vm%d").unwrap().is_template());
        assert_eq!(
            conf("TC_REDIRECT_TAP_UID=4294967294").unwrap().uid,
            Some(u32::MAX - 1)
        );
        // Case matters in CNI_ARGS keys.
        assert_eq!(conf("tc_redirect_tap_uid=x").unwrap(), Conf::default());
    }

    #[test]
    fn bad_values_are_code_4_naming_the_variable() {
        for (args, var) in [
            (
                "TC_REDIRECT_TAP_NAME=a-name-of-16-byt",
                "TC_REDIRECT_TAP_NAME",
            ),
            ("TC_REDIRECT_TAP_NAME=..", "TC_REDIRECT_TAP_NAME"),
            ("TC_REDIRECT_TAP_NAME=a/b", "TC_REDIRECT_TAP_NAME"),
            ("TC_REDIRECT_TAP_NAME=a:b", "TC_REDIRECT_TAP_NAME"),
            ("TC_REDIRECT_TAP_NAME=a b", "TC_REDIRECT_TAP_NAME"),
            ("TC_REDIRECT_TAP_NAME=tap%s", "TC_REDIRECT_TAP_NAME"),
            ("TC_REDIRECT_TAP_NAME=t%d%d", "TC_REDIRECT_TAP_NAME"),
            ("TC_REDIRECT_TAP_NAME=tap%", "TC_REDIRECT_TAP_NAME"),
            ("TC_REDIRECT_TAP_UID=", "TC_REDIRECT_TAP_UID"),
            ("TC_REDIRECT_TAP_UID=-1", "TC_REDIRECT_TAP_UID"),
            ("TC_REDIRECT_TAP_UID=1e3", "TC_REDIRECT_TAP_UID"),
            ("TC_REDIRECT_TAP_UID=0x10", "TC_REDIRECT_TAP_UID"),
            ("TC_REDIRECT_TAP_UID=4294967295", "TC_REDIRECT_TAP_UID"),
            ("TC_REDIRECT_TAP_UID=4294967296", "TC_REDIRECT_TAP_UID"),
            ("TC_REDIRECT_TAP_GID=nobody", "TC_REDIRECT_TAP_GID"),
            ("TC_REDIRECT_TAP_GID=+", "TC_REDIRECT_TAP_GID"),
        ] {
            let e = conf(args).unwrap_err();
            assert_eq!(e.code(), 4, "{args}: {e}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("CNI_ARGS {var}=")),
                "{args}: {msg}"
            );
        }
    }
}
