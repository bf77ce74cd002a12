//! The `static` IPAM plugin: hands out the addresses its config (or the
//! runtime, through `CNI_ARGS`, `args.cni.ips` or the `ips` capability)
//! names, with their gateways, routes and DNS. It allocates nothing and
//! keeps no state, so DEL and GC have nothing to free. Behaviour follows
//! the Go reference (containernetworking/plugins `plugins/ipam/static`);
//! the deliberate differences are in the README.
//!
//! - `config`: the keys, parsed and validated, and the precedence of the
//!   address sources.

pub mod config;

use config::StaticConfig;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::{CniResult, IpConfig};
use libcni::Error;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI static plugin v…`).
pub const NAME: &str = "static";

pub struct Static;

impl Plugin for Static {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        let conf = StaticConfig::from_args(args)?;
        Ok(CniResult {
            interfaces: Vec::new(),
            ips: conf
                .addresses
                .iter()
                .map(|a| IpConfig {
                    address: a.address,
                    gateway: a.gateway,
                    interface: None,
                })
                .collect(),
            routes: conf.routes,
            dns: conf.dns,
        })
    }

    /// Nothing was allocated: nothing to free, whatever the config says.
    fn del(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }

    /// Every configured address is in `prevResult` with its prefix length
    /// and, when one is configured, its gateway.
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = StaticConfig::from_args(args)?;
        let prev = args.required_prev_result("CHECK needs the ADD result (prevResult)")?;
        check_result(&conf, &prev)
    }

    /// No state on the node: nothing to collect.
    fn gc(&self, _args: &CmdArgs) -> Result<(), Error> {
        Ok(())
    }

    /// Ready whenever the config is usable.
    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        StaticConfig::from_args(args).map(|_| ())
    }
}

/// CHECK's comparison of the configured addresses with a result.
fn check_result(conf: &StaticConfig, prev: &CniResult) -> Result<(), Error> {
    for want in &conf.addresses {
        let Some(got) = prev
            .ips
            .iter()
            .find(|ip| ip.address.addr() == want.address.addr())
        else {
            return Err(Error::CheckFailed(format!(
                "address {} is not in prevResult",
                want.address
            )));
        };
        if got.address.prefix_len() != want.address.prefix_len() {
            return Err(Error::CheckFailed(format!(
                "address {} is {} in prevResult",
                want.address, got.address
            )));
        }
        if let Some(gw) = want.gateway {
            if got.gateway != Some(gw) {
                let now = got
                    .gateway
                    .map(|g| g.to_string())
                    .unwrap_or_else(|| "none".into());
                return Err(Error::CheckFailed(format!(
                    "address {} has gateway {now} in prevResult, configured {gw}",
                    want.address
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::skel::test_args;
    use serde_json::json;

    fn conf_of(v: serde_json::Value) -> StaticConfig {
        StaticConfig::from_args(&test_args(&v.to_string())).unwrap()
    }

    fn prev(ips: serde_json::Value) -> CniResult {
        CniResult::from_json(
            &json!({"cniVersion": "1.1.0", "ips": ips}),
            libcni::Version::V1_1_0,
        )
        .unwrap()
        .0
    }

    #[test]
    fn check_compares_addresses_prefixes_and_gateways() {
        let conf = conf_of(
            json!({"cniVersion": "1.1.0", "name": "n", "ipam": {"addresses": [
            {"address": "10.10.0.5/24", "gateway": "10.10.0.1"}, {"address": "fd00::5/64"}]}}),
        );
        let good = prev(json!([
            {"address": "10.10.0.5/24", "gateway": "10.10.0.1", "interface": 0},
            {"address": "fd00::5/64", "gateway": "fd00::1"},
            {"address": "10.99.0.1/24"}
        ]));
        check_result(&conf, &good).unwrap();
        let cases = [
            (
                json!([{"address": "fd00::5/64"}]),
                "address 10.10.0.5/24 is not in prevResult",
            ),
            (
                json!([{"address": "10.10.0.5/16", "gateway": "10.10.0.1"}, {"address": "fd00::5/64"}]),
                "address 10.10.0.5/24 is 10.10.0.5/16 in prevResult",
            ),
            (
                json!([{"address": "10.10.0.5/24", "gateway": "10.10.0.2"}, {"address": "fd00::5/64"}]),
                "address 10.10.0.5/24 has gateway 10.10.0.2 in prevResult, configured 10.10.0.1",
            ),
            (
                json!([{"address": "10.10.0.5/24"}, {"address": "fd00::5/64"}]),
                "has gateway none in prevResult",
            ),
        ];
        for (ips, needle) in cases {
            let e = check_result(&conf, &prev(ips)).unwrap_err();
            assert_eq!(e.code(), 102, "{e}");
            assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
        }
    }

    #[test]
    fn del_and_gc_need_nothing() {
        let args = test_args(r#"{"cniVersion":"1.1.0","name":"n","ipam":{"addresses":"bad"}}"#);
        Static.del(&args).unwrap();
        Static.gc(&args).unwrap();
        assert_eq!(Static.status(&args).unwrap_err().code(), 7);
    }
}
