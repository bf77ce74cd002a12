//! STATUS per plugin: containerd 2.x runs CNI STATUS for every plugin of
//! the pod network on every runtime status poll (kubelet's, every 5 s), on
//! every node, so its cost is paid all day. Each plugin of each measured
//! chain (ours; Debian's Go 1.1.1 has no STATUS) is called alone with its
//! config at cniVersion 1.1.0, as libcni builds it, `iterations` times.

use crate::chains::{plugin_types, Chain};
use crate::process::{self, Invocation};
use crate::stats::Samples;
use serde_json::{Map, Value};
use std::path::Path;

/// The STATUS wall time of one plugin in one chain.
#[derive(Debug, Clone)]
pub struct StatusCost {
    pub chain: &'static str,
    pub plugin: String,
    pub wall_ms: Samples,
    /// Set when a call failed (the first error; no samples then).
    pub error: Option<String>,
}

/// Times STATUS of every plugin of `chain` (ours), `iterations` calls each.
pub fn chain_costs(ours_dir: &Path, chain: &Chain, iterations: usize) -> Vec<StatusCost> {
    let list = &chain.ours;
    let plugins = list
        .get("plugins")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let types = plugin_types(list);
    plugins
        .iter()
        .zip(types)
        .map(|(plugin, ty)| {
            let stdin = stdin_at_1_1_0(list, plugin);
            let program = ours_dir.join(&ty);
            let mut cost = StatusCost {
                chain: chain.title,
                plugin: ty,
                wall_ms: Samples::default(),
                error: None,
            };
            for _ in 0..iterations {
                match call(&program, ours_dir, &stdin) {
                    Ok(ms) => cost.wall_ms.push(ms),
                    Err(e) => {
                        cost.error = Some(e);
                        break;
                    }
                }
            }
            cost
        })
        .collect()
}

/// The STATUS stdin of one `plugin` of the conflist `list`: its keys, with
/// the list's name and `cniVersion` 1.1.0, as libcni builds it.
pub fn stdin_at_1_1_0(list: &Value, plugin: &Value) -> Vec<u8> {
    let mut stdin = Map::new();
    stdin.insert("cniVersion".into(), "1.1.0".into());
    stdin.insert(
        "name".into(),
        list.get("name").cloned().unwrap_or(Value::Null),
    );
    if let Some(keys) = plugin.as_object() {
        for (k, v) in keys {
            if k != "cniVersion" && k != "name" {
                stdin.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(stdin).to_string().into_bytes()
}

/// One timed STATUS call of `program` (`CNI_PATH` is `plugin_dir`): its
/// wall time in ms, or why it failed.
pub fn call(program: &Path, plugin_dir: &Path, stdin: &[u8]) -> Result<f64, String> {
    let cni_path = plugin_dir.to_string_lossy();
    let inv = Invocation {
        wrapper: &[],
        program,
        command: "STATUS",
        container_id: "",
        netns: "",
        ifname: "",
        cni_path: &cni_path,
        stdin,
    };
    match process::run_timed(&inv) {
        Ok(exit) if exit.success => Ok(exit.wall_ms),
        Ok(exit) => Err(exit.error_text()),
        Err(e) => Err(format!("running {}: {e}", program.display())),
    }
}
