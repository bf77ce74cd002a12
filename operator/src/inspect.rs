//! `cni-rs inspect`: a row per attachment, as a table or as JSON.
//!
//! The JSON schema (`schemaVersion` 1; keys are only ever added):
//! ```text
//! { "schemaVersion": 1,
//!   "networks": [ { "name", "file", "cniVersion", "plugins": [type...] } ],
//!   "attachments": [ {
//!       "network", "containerID", "ifname",   // "" where the state names none
//!       "netns",                              // from the cache; "" if none
//!       "live": bool,
//!       "liveness": "netns" | "sandbox" | "young" | "sibling"
//!                   | "stale" | "unknown" | "untied",
//!       "cached": bool,
//!       "addresses": ["10.22.0.5/24", ...],
//!       "hostInterface": "veth..." | null,    // its own host-side interface
//!       "hostPorts": [ {portMappings entry as the runtime sent it} ],
//!       "shaping": "in 8000bit/s out -" | null,
//!       "pieces": [ { "kind", "location", "present": bool } ],
//!       "missing": [kind...] } ],
//!   "unreadable": [ "what could not be read: why" ] }
//! ```
//! Piece kinds: `cache`, `netns`, `lease`, `flannelConfig`,
//! `hostInterface`, `ifb`, `portMappings`, `masquerade`, `tuningBackup`,
//! `bridgePort` (`"<veth> on <bridge>"`), `qdisc` (`"<link> ingress"`,
//! `"<link> root tbf[ <rate>bit/s]"`, the rate as the kernel has it),
//! `dhcpLease`, `firewallRecord`, `firewallRules` (`"CNI-FORWARD <addr>"`),
//! `spoofCheck` (`"bridge nat cni-br-iface-<containerID>-<ifname>"`).

use serde_json::{json, Value};

use crate::collect::{NodeState, Row};
use crate::liveness::Judge;

pub const SCHEMA_VERSION: u64 = 1;

fn rows<'a>(state: &'a NodeState, network: Option<&'a str>) -> impl Iterator<Item = &'a Row> {
    state
        .rows
        .iter()
        .filter(move |r| network.is_none_or(|n| r.key.network == n))
}

pub fn to_json(state: &NodeState, judge: &Judge, network: Option<&str>) -> Value {
    let networks: Vec<Value> = state
        .configured
        .networks
        .iter()
        .filter(|n| network.is_none_or(|want| n.name() == want))
        .map(|n| {
            let types: Vec<Value> = n
                .list
                .plugins
                .iter()
                .map(|p| crate::node::key(p, "type").cloned().unwrap_or(Value::Null))
                .collect();
            json!({
                "name": n.name(),
                "file": n.file.display().to_string(),
                "cniVersion": n.list.cni_version.as_str(),
                "plugins": types,
            })
        })
        .collect();
    let verdicts = judge.judge(&state.rows);
    let attachments: Vec<Value> = rows(state, network)
        .map(|r| {
            let l = verdicts[&r.key];
            let c = r.cached.as_ref();
            let pieces: Vec<Value> = r
                .pieces
                .iter()
                .map(|p| json!({"kind": p.kind.as_str(), "location": p.location, "present": p.present}))
                .collect();
            let missing: Vec<&str> = r.missing().map(|p| p.kind.as_str()).collect();
            json!({
                "network": r.key.network,
                "containerID": r.key.container_id,
                "ifname": r.key.ifname,
                "netns": r.netns(),
                "live": l.is_live(),
                "liveness": l.as_str(),
                "cached": c.is_some(),
                "addresses": c.map(|c| c.addresses.clone()).unwrap_or_default(),
                "hostInterface": c.and_then(|c| c.host_interface.clone()),
                "hostPorts": c.map(|c| c.host_ports.clone()).unwrap_or_default(),
                "shaping": c.and_then(|c| c.shaping.clone()),
                "pieces": pieces,
                "missing": missing,
            })
        })
        .collect();
    json!({
        "schemaVersion": SCHEMA_VERSION,
        "networks": networks,
        "attachments": attachments,
        "unreadable": state.unreadable,
    })
}

/// The readable table: one line per attachment, then its missing pieces.
pub fn to_table(state: &NodeState, judge: &Judge, network: Option<&str>) -> String {
    let mut lines = vec![[
        "NETWORK",
        "CONTAINER",
        "IFNAME",
        "LIVE",
        "ADDRESSES",
        "HOST-IF",
        "PORTS",
        "SHAPING",
        "PIECES",
    ]
    .map(String::from)
    .to_vec()];
    let mut notes = Vec::new();
    let verdicts = judge.judge(&state.rows);
    for r in rows(state, network) {
        let c = r.cached.as_ref();
        let dash = |s: &str| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        let mut cid = r.key.container_id.clone();
        cid.truncate(12);
        let ports: Vec<String> = c
            .map(|c| {
                c.host_ports
                    .iter()
                    .map(|p| {
                        let get = |k| crate::node::key(p.as_object()?, k).cloned();
                        format!(
                            "{}->{}/{}",
                            get("hostPort").unwrap_or(Value::Null),
                            get("containerPort").unwrap_or(Value::Null),
                            get("protocol")
                                .and_then(|v| v.as_str().map(str::to_string))
                                .unwrap_or("tcp".into())
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let pieces: Vec<String> = r
            .pieces
            .iter()
            .map(|p| {
                let k = p.kind.as_str();
                if p.present {
                    k.to_string()
                } else {
                    format!("!{k}")
                }
            })
            .collect();
        lines.push(vec![
            dash(&r.key.network),
            dash(&cid),
            dash(&r.key.ifname),
            verdicts[&r.key].as_str().to_string(),
            dash(&c.map(|c| c.addresses.join(",")).unwrap_or_default()),
            dash(c.and_then(|c| c.host_interface.as_deref()).unwrap_or("")),
            dash(&ports.join(",")),
            dash(c.and_then(|c| c.shaping.as_deref()).unwrap_or("")),
            pieces.join(","),
        ]);
        for p in r.missing() {
            notes.push(format!(
                "{} {} {}: missing {} {}",
                dash(&r.key.network),
                dash(&r.key.container_id),
                dash(&r.key.ifname),
                p.kind.as_str(),
                p.location
            ));
        }
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for l in &lines {
        let cells: Vec<String> = l
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for n in notes {
        out.push_str(&n);
        out.push('\n');
    }
    for u in &state.unreadable {
        out.push_str(&format!("unreadable: {u}\n"));
    }
    out
}
