//! The delegate's config, rendered from the flannel config and the node's
//! subnet.env as the Go plugin renders it:
//!
//! - `name` is the network's name; `type` defaults to `bridge`;
//! - `ipMasq` defaults to `!FLANNEL_IPMASQ`, `mtu` to `FLANNEL_MTU`,
//!   `isGateway` to true when the type is `bridge`;
//! - `cniVersion` and `runtimeConfig` are copied from the flannel config
//!   when it has them (replacing the delegate's);
//! - `ipam` starts from the top-level `ipam`: `type` defaults to
//!   `host-local`, `ranges` is replaced by one range set per subnet
//!   (`[[{"subnet": v4}], [{"subnet": v6}]]`), `routes` is the user's routes
//!   followed by `{"dst": N}` for every IPv4 then IPv6 network.
//!
//! Every other key of `delegate` and `ipam` is kept, with its value and
//! place. Keys flannel adds come after them, in alphabetical order: the
//! order Go's encoder writes a map in, so a config without delegate or IPAM
//! keys of its own renders byte for byte as the Go plugin's.

use crate::config::{FlannelConf, DEFAULT_IPAM};
use crate::subnet_env::SubnetEnv;
use serde_json::{json, Map, Value};

/// The rendered delegate config, as an object.
pub fn render(conf: &FlannelConf, env: &SubnetEnv) -> Map<String, Value> {
    let mut d = conf.delegate.clone();
    let bridge = conf.delegate_type() == "bridge";
    // `insert` keeps an existing key in its place; new keys are appended,
    // here in alphabetical order.
    if let Some(v) = &conf.cni_version {
        d.insert("cniVersion".into(), json!(v));
    }
    if !d.contains_key("ipMasq") {
        d.insert("ipMasq".into(), json!(!env.ipmasq));
    }
    d.insert("ipam".into(), Value::Object(render_ipam(conf, env)));
    if bridge && !d.contains_key("isGateway") {
        d.insert("isGateway".into(), json!(true));
    }
    if !d.contains_key("mtu") {
        d.insert("mtu".into(), json!(env.mtu));
    }
    d.insert("name".into(), json!(conf.name));
    if let Some(rc) = &conf.runtime_config {
        d.insert("runtimeConfig".into(), Value::Object(rc.clone()));
    }
    if !d.contains_key("type") {
        d.insert("type".into(), json!(conf.delegate_type()));
    }
    d
}

fn render_ipam(conf: &FlannelConf, env: &SubnetEnv) -> Map<String, Value> {
    let mut ipam = conf.ipam.clone().unwrap_or_default();
    let ranges: Vec<Value> = [env.subnet, env.ipv6_subnet]
        .into_iter()
        .flatten()
        .map(|s| json!([{"subnet": s.to_string()}]))
        .collect();
    ipam.insert("ranges".into(), Value::Array(ranges));
    let mut routes = match ipam.get("routes") {
        Some(Value::Array(r)) => r.clone(),
        _ => Vec::new(),
    };
    routes.extend(
        env.networks
            .iter()
            .chain(&env.ipv6_networks)
            .map(|n| json!({"dst": n.to_string()})),
    );
    ipam.insert("routes".into(), Value::Array(routes));
    if !ipam.contains_key("type") {
        ipam.insert("type".into(), json!(DEFAULT_IPAM));
    }
    ipam
}

/// The bytes saved and given to the delegate: compact JSON, no newline.
pub fn to_bytes(d: &Map<String, Value>) -> Vec<u8> {
    serde_json::to_vec(d).unwrap_or_else(|_| b"{}".to_vec()) // a Map always encodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn env(text: &str) -> SubnetEnv {
        SubnetEnv::parse(text, Path::new("/s.env")).unwrap()
    }

    const V4: &str =
        "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n";
    const V6: &str = "FLANNEL_IPV6_NETWORK=fc00::/48\nFLANNEL_IPV6_SUBNET=fc00::1/64\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n";
    const DUAL: &str = "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_IPV6_NETWORK=fc00::/48\nFLANNEL_IPV6_SUBNET=fc00::1/64\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n";
    const MULTI: &str = "FLANNEL_NETWORK=10.1.0.0/16,192.168.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n";

    fn conf(v: Value) -> FlannelConf {
        FlannelConf::parse(v.to_string().as_bytes()).unwrap()
    }

    fn rendered(c: Value, e: &str) -> String {
        String::from_utf8(to_bytes(&render(&conf(c), &env(e)))).unwrap()
    }

    /// The inputs of flannel_linux_test.go: `{"name":"cni-flannel","type":
    /// "flannel","subnetFile":…,"dataDir":…}`.
    fn reference_input() -> Value {
        json!({"name": "cni-flannel", "type": "flannel", "subnetFile": "/s.env", "dataDir": "/d"})
    }

    #[test]
    fn ipv4_renders_byte_for_byte_as_the_reference() {
        assert_eq!(
            rendered(reference_input(), V4),
            r#"{"ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.1.17.0/24"}]],"routes":[{"dst":"10.1.0.0/16"}],"type":"host-local"},"isGateway":true,"mtu":1472,"name":"cni-flannel","type":"bridge"}"#
        );
    }

    #[test]
    fn ipv6_dual_stack_and_two_networks_as_the_reference() {
        assert_eq!(
            rendered(reference_input(), V6),
            r#"{"ipMasq":false,"ipam":{"ranges":[[{"subnet":"fc00::/64"}]],"routes":[{"dst":"fc00::/48"}],"type":"host-local"},"isGateway":true,"mtu":1472,"name":"cni-flannel","type":"bridge"}"#
        );
        assert_eq!(
            rendered(reference_input(), DUAL),
            r#"{"ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.1.17.0/24"}],[{"subnet":"fc00::/64"}]],"routes":[{"dst":"10.1.0.0/16"},{"dst":"fc00::/48"}],"type":"host-local"},"isGateway":true,"mtu":1472,"name":"cni-flannel","type":"bridge"}"#
        );
        assert_eq!(
            rendered(reference_input(), MULTI),
            r#"{"ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.1.17.0/24"}]],"routes":[{"dst":"10.1.0.0/16"},{"dst":"192.168.0.0/16"}],"type":"host-local"},"isGateway":true,"mtu":1472,"name":"cni-flannel","type":"bridge"}"#
        );
    }

    #[test]
    fn user_ipam_keys_and_routes_are_kept_ranges_replaced() {
        // The reference test's IPAM input: its own type, an unknown key and
        // two routes; flannel's network routes come after the user's.
        let mut c = reference_input();
        c["ipam"] = json!({"type": "my-ipam", "unknown-param": "unknown-value",
            "routes": [{"dst": "10.96.0.0/12"}, {"dst": "192.168.244.0/24", "gw": "10.1.17.20"}],
            "ranges": [[{"subnet": "1.2.3.0/24"}]]});
        assert_eq!(
            rendered(c, DUAL),
            r#"{"ipMasq":false,"ipam":{"type":"my-ipam","unknown-param":"unknown-value","routes":[{"dst":"10.96.0.0/12"},{"dst":"192.168.244.0/24","gw":"10.1.17.20"},{"dst":"10.1.0.0/16"},{"dst":"fc00::/48"}],"ranges":[[{"subnet":"10.1.17.0/24"}],[{"subnet":"fc00::/64"}]]},"isGateway":true,"mtu":1472,"name":"cni-flannel","type":"bridge"}"#
        );
    }

    #[test]
    fn the_kube_flannel_conflist_entry() {
        let c = json!({"cniVersion": "1.0.0", "name": "cbr0", "type": "flannel",
            "delegate": {"hairpinMode": true, "isDefaultGateway": true},
            "ipam": {"dataDir": "/tmp/leases"},
            "runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}]}});
        let ipmasq_false = V4.replace("FLANNEL_IPMASQ=true", "FLANNEL_IPMASQ=false");
        assert_eq!(
            rendered(c, &ipmasq_false),
            r#"{"hairpinMode":true,"isDefaultGateway":true,"cniVersion":"1.0.0","ipMasq":true,"ipam":{"dataDir":"/tmp/leases","ranges":[[{"subnet":"10.1.17.0/24"}]],"routes":[{"dst":"10.1.0.0/16"}],"type":"host-local"},"isGateway":true,"mtu":1472,"name":"cbr0","runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":8080,"protocol":"tcp"}]},"type":"bridge"}"#
        );
    }

    #[test]
    fn delegate_keys_win_over_defaults_and_keep_their_place() {
        let c = json!({"cniVersion": "0.4.0", "name": "n",
            "delegate": {"mtu": 1400, "cniVersion": "0.3.1", "type": "bridge", "ipMasq": true,
                         "isGateway": false, "runtimeConfig": {"old": 1}, "bridge": "cni9"},
            "runtimeConfig": {"new": 2}});
        assert_eq!(
            rendered(c, V4),
            r#"{"mtu":1400,"cniVersion":"0.4.0","type":"bridge","ipMasq":true,"isGateway":false,"runtimeConfig":{"new":2},"bridge":"cni9","ipam":{"ranges":[[{"subnet":"10.1.17.0/24"}]],"routes":[{"dst":"10.1.0.0/16"}],"type":"host-local"},"name":"n"}"#
        );
    }

    #[test]
    fn is_gateway_only_for_bridge() {
        let c = json!({"name": "n", "delegate": {"type": "ptp"}});
        assert_eq!(
            rendered(c, V4),
            r#"{"type":"ptp","ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.1.17.0/24"}]],"routes":[{"dst":"10.1.0.0/16"}],"type":"host-local"},"mtu":1472,"name":"n"}"#
        );
    }
}
