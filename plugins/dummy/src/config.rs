//! The dummy plugin's config: `ipam` (required) besides the keys every
//! plugin shares. A missing `ipam.type` is code 7 naming it, before
//! anything is touched.

use libcni::skel::CmdArgs;
use libcni::types::IpamConf;
use libcni::Error;
use serde::Deserialize;

/// The keys as they come.
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    ipam: Option<IpamConf>,
}

/// A validated dummy config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// `ipam.type`.
    pub ipam: String,
}

impl Conf {
    /// Parses and validates the config of `args` (ADD and CHECK).
    pub fn parse(args: &CmdArgs) -> Result<Conf, Error> {
        let raw: Raw = args.config()?;
        let ipam = IpamConf::plugin(raw.ipam).ok_or_else(|| {
            Error::config(
                "ipam.type",
                "missing: a dummy interface gets its addresses from an IPAM plugin",
            )
        })?;
        Ok(Conf { ipam })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: serde_json::Value) -> Result<Conf, Error> {
        Conf::parse(&libcni::skel::test_args(&v.to_string()))
    }

    #[test]
    fn ipam_is_required_and_matched_as_go_matches_keys() {
        let base = |ipam: serde_json::Value| {
            let mut v = json!({"cniVersion": "1.1.0", "name": "n", "type": "dummy"});
            if !ipam.is_null() {
                v["ipam"] = ipam;
            }
            v
        };
        for bad in [json!(null), json!({}), json!({"type": ""})] {
            let e = conf(base(bad)).unwrap_err();
            assert_eq!(e.code(), 7);
            assert!(
                e.to_string()
                    .starts_with("invalid network config: ipam.type: missing"),
                "{e}"
            );
        }
        assert_eq!(
            conf(base(json!({"type": "static"}))).unwrap().ipam,
            "static"
        );
        let v = json!({"cniVersion": "1.1.0", "name": "n", "IPAM": {"Type": "static"}});
        assert_eq!(conf(v).unwrap().ipam, "static");
        assert_eq!(conf(base(json!(5))).unwrap_err().code(), 7);
    }
}
