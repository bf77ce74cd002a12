//! `CNI_ARGS`: `K=V;K2=V2` pairs, as Go's `types.LoadArgs` reads them.

use crate::error::Error;

/// Keys every plugin accepts: what Kubernetes runtimes send on every call,
/// and `IgnoreUnknown` itself.
pub const ALWAYS_KNOWN: &[&str] = &[
    "IgnoreUnknown",
    "K8S_POD_NAMESPACE",
    "K8S_POD_NAME",
    "K8S_POD_INFRA_CONTAINER_ID",
    "K8S_POD_UID",
];

/// Parsed `CNI_ARGS`, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Splits on `;`, then each part on `=`, which must give exactly two
    /// parts (there is no escaping). An empty string gives no pairs.
    pub fn parse(s: &str) -> Result<CniArgs, Error> {
        let mut pairs = Vec::new();
        if s.is_empty() {
            return Ok(CniArgs { pairs });
        }
        for part in s.split(';') {
            let kv: Vec<&str> = part.split('=').collect();
            if kv.len() != 2 {
                return Err(Error::InvalidEnv(format!(
                    "CNI_ARGS: invalid pair {part:?} (want KEY=VALUE)"
                )));
            }
            pairs.push((kv[0].to_string(), kv[1].to_string()));
        }
        Ok(CniArgs { pairs })
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The last value of `key` (a later duplicate wins).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `IgnoreUnknown=1` or `true` (case-insensitive, as Go's `UnmarshallableBool`).
    pub fn ignore_unknown(&self) -> bool {
        self.get("IgnoreUnknown")
            .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
    }

    /// Fails with code 4 naming the keys that are neither in `known` nor
    /// in [`ALWAYS_KNOWN`], unless `IgnoreUnknown` is set.
    pub fn check_known(&self, known: &[&str]) -> Result<(), Error> {
        if self.ignore_unknown() {
            return Ok(());
        }
        let unknown: Vec<&str> = self
            .pairs
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !known.contains(k) && !ALWAYS_KNOWN.contains(k))
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidEnv(format!(
                "CNI_ARGS: unknown args {unknown:?} (set IgnoreUnknown=1 to allow them)"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_and_kubernetes_keys() {
        let a = CniArgs::parse(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
        )
        .unwrap();
        assert_eq!(a.get("K8S_POD_NAME"), Some("web-0"));
        assert!(a.ignore_unknown());
        assert!(a.check_known(&[]).is_ok());
        assert_eq!(CniArgs::parse("").unwrap().pairs().len(), 0);
        assert_eq!(CniArgs::parse("A=1;A=2").unwrap().get("A"), Some("2"));
        assert_eq!(CniArgs::parse("A=").unwrap().get("A"), Some(""));
    }

    #[test]
    fn malformed_pairs_are_code_4() {
        for bad in ["A", "A=1;", "A=1=2", ";", "=;"] {
            let e = CniArgs::parse(bad).unwrap_err();
            assert_eq!(e.code(), 4, "{bad}");
            assert!(e.to_string().starts_with("CNI_ARGS"));
        }
    }

    #[test]
    fn unknown_keys_fail_unless_ignored() {
        let a = CniArgs::parse("IP=10.0.0.5;FOO=bar;K8S_POD_NAME=x").unwrap();
        let e = a.check_known(&["IP"]).unwrap_err();
        assert_eq!(e.code(), 4);
        assert!(e.to_string().contains("FOO"));
        assert!(!e.to_string().contains("K8S_POD_NAME"));
        let a = CniArgs::parse("FOO=bar;IgnoreUnknown=true").unwrap();
        assert!(a.check_known(&[]).is_ok());
        let a = CniArgs::parse("FOO=bar;IgnoreUnknown=0").unwrap();
        assert!(a.check_known(&[]).is_err());
    }
}
