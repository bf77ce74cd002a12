//! Running one chain for one side, ADD then DEL, in the two ways the
//! benchmark times:
//!
//! - through libcni's runtime in-process ([`CniConfig::add_network_list`] /
//!   [`CniConfig::del_network_list`], result cache included), so the only
//!   processes are the plugins themselves: the chain as a runtime runs it;
//! - plugin by plugin ([`process`]), with the stdin the runtime would build
//!   (`cniVersion`, `name`, the plugin's keys, `prevResult` threaded from
//!   the previous plugin's output, `runtimeConfig` from the enabled
//!   capabilities), to time each plugin process and read its peak RSS.

use crate::chains::Side;
use crate::process::{self, Exit, Invocation, ProcessPeak};
use cnitool::{conf_list_from_file, CniConfig, NetworkConfigList, RuntimeConf};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One side of one chain: its plugin directory and its loaded conflist.
pub struct SideSetup {
    pub side: Side,
    /// The plugin directory (`CNI_PATH`), canonical.
    pub dir: PathBuf,
    pub list: NetworkConfigList,
    pub cni: CniConfig,
}

/// How the plugin-by-plugin runs start each plugin.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Spawned as a runtime does, timed.
    Timed,
    /// Under ptrace, for the peak RSS of every process.
    Traced,
    /// Under `strace -f -C -T`, its trace and syscall summary written to
    /// `<dir>/<container id>-<type>-<command>`.
    Strace(&'a Path),
}

/// A chain run plugin by plugin: each plugin's exit, in chain order.
pub struct DirectRun {
    pub add: Vec<Exit>,
    /// DEL exits, in chain order (they ran in reverse).
    pub del: Vec<Exit>,
    /// Peak RSS of every process that ran (traced runs only).
    pub peaks: Vec<ProcessPeak>,
}

impl SideSetup {
    /// Loads the conflist written at `conf` (as a runtime loads its conf dir).
    pub fn load(side: Side, dir: &Path, conf: &Path, cache_dir: &Path) -> Result<Self, String> {
        let list = conf_list_from_file(conf).map_err(|e| format!("{}: {e}", conf.display()))?;
        Ok(SideSetup {
            side,
            dir: dir.to_path_buf(),
            list,
            cni: CniConfig::new(vec![dir.to_path_buf()], cache_dir),
        })
    }

    /// The chain's top-level plugin types, in order.
    pub fn plugin_types(&self) -> Vec<String> {
        self.list.plugins.iter().map(plugin_type).collect()
    }

    /// ADD then DEL through the runtime; returns both wall times in ms.
    /// After a failed ADD the DEL still runs (as a runtime must), untimed.
    pub fn runtime_add_del(&self, rt: &RuntimeConf) -> Result<(f64, f64), String> {
        let [(add_ms, _), (del_ms, _)] = self.runtime_add_del_cpu(rt)?;
        Ok((add_ms, del_ms))
    }

    /// [`Self::runtime_add_del`], with the CPU time (user + system) the
    /// verb's plugin processes took, from this process's waited-for
    /// children: `((add ms, add CPU ms), (del ms, del CPU ms))`.
    pub fn runtime_add_del_cpu(&self, rt: &RuntimeConf) -> Result<[WallCpu; 2], String> {
        let cpu0 = children_cpu_ms();
        let start = Instant::now();
        let added = self.cni.add_network_list(&self.list, rt);
        let add_ms = elapsed_ms(start);
        let cpu1 = children_cpu_ms();
        if let Err(e) = added {
            let _ = self.cni.del_network_list(&self.list, rt);
            return Err(format!("ADD: {e}"));
        }
        let start = Instant::now();
        self.cni
            .del_network_list(&self.list, rt)
            .map_err(|e| format!("DEL: {e}"))?;
        let del_ms = elapsed_ms(start);
        let cpu2 = children_cpu_ms();
        Ok([(add_ms, cpu1 - cpu0), (del_ms, cpu2 - cpu1)])
    }

    /// ADD through the runtime only; returns the wall time and the result.
    pub fn runtime_add(&self, rt: &RuntimeConf) -> Result<(f64, Value), String> {
        let start = Instant::now();
        let result = self
            .cni
            .add_network_list(&self.list, rt)
            .map_err(|e| format!("ADD: {e}"))?;
        let ms = elapsed_ms(start);
        let json = result
            .to_json(self.list.cni_version)
            .map_err(|e| format!("ADD result: {e}"))?;
        Ok((ms, json))
    }

    /// ADD then DEL plugin by plugin (see [`Mode`]).
    pub fn direct_add_del(&self, rt: &RuntimeConf, mode: Mode) -> Result<DirectRun, String> {
        let mut run = DirectRun {
            add: Vec::new(),
            del: Vec::new(),
            peaks: Vec::new(),
        };
        let mut prev: Option<Value> = None;
        let mut failure = None;
        for plugin in &self.list.plugins {
            let exit = self.call(plugin, "ADD", prev.as_ref(), rt, mode, &mut run.peaks)?;
            if !exit.success {
                failure = Some(format!(
                    "ADD {}: {}",
                    plugin_type(plugin),
                    exit.error_text()
                ));
                break;
            }
            match serde_json::from_slice::<Value>(&exit.stdout) {
                Ok(v) => prev = Some(v),
                Err(e) => {
                    failure = Some(format!(
                        "ADD {}: result is not JSON: {e}",
                        plugin_type(plugin)
                    ));
                    break;
                }
            }
            run.add.push(exit);
        }
        let mut del_failure = None;
        for plugin in self.list.plugins.iter().rev() {
            let exit = self.call(plugin, "DEL", prev.as_ref(), rt, mode, &mut run.peaks)?;
            if !exit.success && del_failure.is_none() {
                del_failure = Some(format!(
                    "DEL {}: {}",
                    plugin_type(plugin),
                    exit.error_text()
                ));
            }
            run.del.push(exit);
        }
        run.del.reverse();
        match failure.or(del_failure) {
            Some(e) => Err(e),
            None => Ok(run),
        }
    }

    /// Runs plugin `index` of the chain alone, timed, with `prev` as its
    /// `prevResult`.
    pub fn run_plugin(
        &self,
        index: usize,
        command: &str,
        prev: Option<&Value>,
        rt: &RuntimeConf,
    ) -> Result<Exit, String> {
        let plugin = self
            .list
            .plugins
            .get(index)
            .ok_or_else(|| format!("the chain has no plugin {index}"))?;
        let exit = self.call(plugin, command, prev, rt, Mode::Timed, &mut Vec::new())?;
        if !exit.success {
            return Err(format!(
                "{command} {}: {}",
                plugin_type(plugin),
                exit.error_text()
            ));
        }
        Ok(exit)
    }

    /// Runs one plugin of the chain as the runtime would.
    fn call(
        &self,
        plugin: &Map<String, Value>,
        command: &str,
        prev: Option<&Value>,
        rt: &RuntimeConf,
        mode: Mode,
        peaks: &mut Vec<ProcessPeak>,
    ) -> Result<Exit, String> {
        let ty = plugin_type(plugin);
        let program = self.dir.join(&ty);
        let stdin = serde_json::to_vec(&cnitool::exec::plugin_stdin(
            &self.list,
            plugin,
            prev,
            Some(rt),
        ))
        .map_err(|e| format!("encoding the stdin of {ty}: {e}"))?;
        let cni_path = self.dir.to_string_lossy();
        let wrapper: Vec<String>;
        let mut inv = Invocation {
            wrapper: &[],
            program: &program,
            command,
            container_id: &rt.container_id,
            netns: &rt.netns,
            ifname: &rt.ifname,
            cni_path: &cni_path,
            stdin: &stdin,
        };
        let ran = match mode {
            Mode::Timed => process::run_timed(&inv),
            Mode::Traced => process::run_traced(&inv).map(|(exit, p)| {
                peaks.extend(p);
                exit
            }),
            Mode::Strace(dir) => {
                let out = dir.join(format!("{}-{ty}-{command}", rt.container_id));
                wrapper = vec![
                    "strace".into(),
                    "-f".into(),
                    // The summary after the trace, each call's duration in it.
                    "-C".into(),
                    "-T".into(),
                    "-w".into(),
                    "-o".into(),
                    out.to_string_lossy().into_owned(),
                    "--".into(),
                ];
                inv.wrapper = &wrapper;
                process::run_timed(&inv)
            }
        };
        ran.map_err(|e| format!("running {}: {e}", program.display()))
    }
}

fn elapsed_ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

pub fn plugin_type(plugin: &Map<String, Value>) -> String {
    plugin
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The runtime arguments of one attachment.
pub fn runtime_conf(
    container_id: String,
    pod: &str,
    ifname: &str,
    capability_args: &Map<String, Value>,
) -> RuntimeConf {
    RuntimeConf {
        container_id,
        netns: crate::namespaces::path_of(pod)
            .to_string_lossy()
            .into_owned(),
        ifname: ifname.to_string(),
        args: Vec::new(),
        capability_args: capability_args.clone(),
    }
}

/// A verb's wall time and its plugin processes' CPU time (ms).
pub type WallCpu = (f64, f64);

/// The CPU time of this process's waited-for children so far (ms).
fn children_cpu_ms() -> f64 {
    // SAFETY: all-zero is a valid rusage; getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } != 0 {
        return 0.0;
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(u.ru_utime) + ms(u.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stdin_is_built_like_the_runtime_builds_it() {
        let bytes = serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "portmap", "name": "x", "capabilities": {"portMappings": true, "bandwidth": false},
             "runtimeConfig": {"static": 1}}]}))
        .unwrap();
        let list = cnitool::conf_list_from_bytes(&bytes).unwrap();
        let caps = json!({"portMappings": [{"hostPort": 1}], "bandwidth": {"ingressRate": 1}});
        let rt = runtime_conf("c".into(), "p", "eth0", caps.as_object().unwrap());
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        let stdin = cnitool::exec::plugin_stdin(&list, &list.plugins[0], Some(&prev), Some(&rt));
        assert_eq!(
            Value::Object(stdin),
            json!({"cniVersion": "1.0.0", "name": "n", "type": "portmap",
                   "capabilities": {"portMappings": true, "bandwidth": false},
                   "runtimeConfig": {"portMappings": [{"hostPort": 1}]},
                   "prevResult": prev})
        );
        assert_eq!(rt.netns, "/run/netns/p");
    }
}
