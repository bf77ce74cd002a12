//! The node-wide call log (issue 24's structured logs), black box: the
//! config file (named by `CNI_RS_CONFIG` here, never the node's
//! `/etc/cni/cni-rs.conf`) turns it on; a chain's calls through our cnitool
//! each write one line with the attachment, the network, the steps' times,
//! the addresses or the error, and the runtime's trace context; 64 calls at
//! once write 64 whole lines; the log rotates at its cap; a log that cannot
//! be written changes nothing in the call; `cni-rs latency` sums it up.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use tests::*;

/// A config in `dir` sending the log to `log` at `level`.
fn config(dir: &TempDir, log: &Path, extra: Value) -> PathBuf {
    let mut c = json!({"logFile": log});
    for (k, v) in extra.as_object().expect("object") {
        c[k] = v.clone();
    }
    let path = dir.path().join("cni-rs.conf");
    std::fs::write(&path, c.to_string()).expect("write config");
    path
}

fn lines(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line: {l:?}: {e}")))
        .collect()
}

/// host-local ADD (no namespace needed) with `env`, leases in `data`.
fn host_local_add(data: &Path, id: &str, env: &[(&str, &str)]) -> PluginOutput {
    let conf = json!({
        "cniVersion": "1.0.0", "name": "lognet",
        "ipam": {"type": "host-local", "subnet": "10.78.0.0/24", "dataDir": data}
    })
    .to_string();
    let mut all = vec![
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", id),
        ("CNI_NETNS", "/proc/self/ns/net"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/nonexistent"),
    ];
    all.extend_from_slice(env);
    call_plugin(None, &bin("host-local"), &all, &conf)
}

#[test]
fn a_chains_calls_each_write_a_line_with_steps_addresses_and_trace() {
    if !require_root("a_chains_calls_each_write_a_line_with_steps_addresses_and_trace") {
        return;
    }
    let node = Node::new("calllog");
    let pod = Netns::new("calllog-pod");
    let state = TempDir::new("calllog-state");
    let log = state.path().join("calls.log");
    let conf = config(&state, &log, json!({}));
    node.write_conf(
        "10-log.conflist",
        &json!({
            "cniVersion": "1.0.0", "name": "lognet",
            "plugins": [
                {"type": "bridge", "bridge": "cni-log0", "isGateway": true, "ipMasq": true,
                 "ipam": {"type": "host-local", "subnet": "10.79.0.0/24",
                          "dataDir": state.path().join("leases")}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        }),
    );
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let caps =
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
            .to_string();
    let env = [
        ("CNI_RS_CONFIG", conf.to_str().expect("utf8")),
        ("TRACEPARENT", traceparent),
        ("TRACESTATE", "vendor=1"),
        ("CAP_ARGS", caps.as_str()),
        ("CNI_CONTAINERID", "logpod1"),
    ];
    let pod_path = pod.path().display().to_string();
    let out = node.cnitool_with(&bin("cnitool"), &["add", "lognet", &pod_path], &env);
    assert_eq!(out.exit_code, 0, "{out:?}");
    let addr = out.json()["ips"][0]["address"]
        .as_str()
        .expect("address")
        .to_string();
    node.cnitool_with(&bin("cnitool"), &["del", "lognet", &pod_path], &env)
        .assert_silent_ok();

    let got = lines(&log);
    let who: Vec<(String, String)> = got
        .iter()
        .map(|l| {
            (
                l["plugin"].as_str().unwrap().into(),
                l["command"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("host-local", "ADD"),
        ("bridge", "ADD"),
        ("portmap", "ADD"),
        ("portmap", "DEL"),
        ("host-local", "DEL"),
        ("bridge", "DEL"),
    ]
    .iter()
    .map(|(p, c)| (p.to_string(), c.to_string()))
    .collect();
    assert_eq!(
        who, want,
        "one line per call, each written as its process ends"
    );
    for l in &got {
        assert_eq!(l["containerID"], "logpod1", "{l}");
        assert_eq!(l["ifname"], "eth0", "{l}");
        assert_eq!(l["netns"], pod_path.as_str(), "{l}");
        assert_eq!(l["network"], "lognet", "{l}");
        assert_eq!(l["traceparent"], traceparent, "{l}");
        assert_eq!(l["tracestate"], "vendor=1", "{l}");
        assert!(l["durationMs"].as_f64().is_some_and(|d| d > 0.0), "{l}");
        assert!(l["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{l}");
        assert!(l.get("error").is_none(), "{l}");
    }
    let bridge_add = &got[1];
    assert_eq!(bridge_add["ips"], json!([addr]), "{bridge_add}");
    assert_eq!(got[0]["ips"], json!([addr]), "host-local's own result");
    let steps = &bridge_add["stepsMs"];
    for step in ["namespace", "links", "ipam", "addressesRoutes", "netfilter"] {
        assert!(
            steps[step].as_f64().is_some_and(|v| v > 0.0),
            "{step}: {bridge_add}"
        );
    }
    // The IPAM step is host-local's whole process, which took at least
    // what it logged itself.
    assert!(
        steps["ipam"].as_f64().unwrap() >= got[0]["durationMs"].as_f64().unwrap(),
        "{bridge_add} vs {}",
        got[0]
    );
    assert!(
        got[2]["stepsMs"]["netfilter"]
            .as_f64()
            .is_some_and(|v| v > 0.0),
        "{}",
        got[2]
    );

    // A failed call: the error's code and message.
    let out = node.cnitool_with(
        &bin("cnitool"),
        &["add", "lognet", "/nonexistent/netns"],
        &env,
    );
    assert_ne!(out.exit_code, 0);
    let failed = lines(&log).pop().expect("a line");
    assert_eq!(failed["command"], "ADD", "{failed}");
    assert_eq!(failed["error"]["code"], 4, "{failed}");
    assert!(
        failed["error"]["msg"]
            .as_str()
            .is_some_and(|m| m.contains("CNI_NETNS")),
        "{failed}"
    );
}

#[test]
fn sixty_four_calls_at_once_write_sixty_four_whole_lines() {
    let state = TempDir::new("calllog-64");
    let log = state.path().join("calls.log");
    let conf = config(&state, &log, json!({}));
    let data = state.path().join("leases");
    let conf_s = conf.to_str().expect("utf8").to_string();
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..64)
            .map(|i| {
                let (data, conf_s) = (&data, &conf_s);
                s.spawn(move || {
                    let id = format!("par{i:02}");
                    let out = host_local_add(data, &id, &[("CNI_RS_CONFIG", conf_s)]);
                    assert_eq!(out.exit_code, 0, "{out:?}");
                })
            })
            .collect();
        for c in calls {
            c.join().expect("call");
        }
    });
    let got = lines(&log);
    assert_eq!(got.len(), 64);
    let mut ids: Vec<&str> = got
        .iter()
        .map(|l| l["containerID"].as_str().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 64, "every call's own line");
    assert!(got.iter().all(|l| l["ips"][0].as_str().is_some()));
}

#[test]
fn no_config_no_log_and_a_broken_log_never_fails_a_call() {
    let state = TempDir::new("calllog-off");
    let data = state.path().join("leases");
    // No config file: no log anywhere, the call as always.
    let missing = state.path().join("absent.conf");
    let out = host_local_add(
        &data,
        "off1",
        &[("CNI_RS_CONFIG", missing.to_str().unwrap())],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(
        !tree(state.path()).iter().any(|f| f.ends_with(".log")),
        "no log file"
    );

    // A log that cannot be written (its directory is a file): the same
    // result, no error, nothing on stderr.
    let blocker = state.path().join("not-a-dir");
    std::fs::write(&blocker, "").expect("write");
    let conf = config(&state, &blocker.join("calls.log"), json!({}));
    let out = host_local_add(&data, "off2", &[("CNI_RS_CONFIG", conf.to_str().unwrap())]);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    assert!(out.json()["ips"][0]["address"].is_string());

    // A broken config turns the log off, never the call.
    let broken = state.path().join("broken.conf");
    std::fs::write(&broken, "{not json").expect("write");
    let out = host_local_add(
        &data,
        "off3",
        &[("CNI_RS_CONFIG", broken.to_str().unwrap())],
    );
    assert_eq!(out.exit_code, 0, "{out:?}");
}

#[test]
fn levels_rotation_and_the_latency_summary() {
    let state = TempDir::new("calllog-rot");
    let log = state.path().join("calls.log");
    let data = state.path().join("leases");
    // level error: a success writes nothing, a failure its line.
    let conf = config(&state, &log, json!({"logLevel": "error"}));
    let env = [("CNI_RS_CONFIG", conf.to_str().unwrap())];
    assert_eq!(host_local_add(&data, "lvl1", &env).exit_code, 0);
    assert!(lines(&log).is_empty());
    assert_ne!(host_local_add(&data, "bad id!", &env).exit_code, 0);
    assert_eq!(lines(&log).len(), 1);
    std::fs::remove_file(&log).expect("rm");

    // A 2 KB cap: the log moves to calls.log.1, every line stays whole.
    let conf = config(&state, &log, json!({"logMaxBytes": 2000}));
    let env = [("CNI_RS_CONFIG", conf.to_str().unwrap())];
    for i in 0..20 {
        assert_eq!(
            host_local_add(&data, &format!("rot{i:02}"), &env).exit_code,
            0
        );
    }
    let rotated = state.path().join("calls.log.1");
    let (now, old) = (lines(&log), lines(&rotated));
    assert!(!old.is_empty(), "rotated");
    let size = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    assert!(size <= 2000 + 1000, "{size}");
    // The newest line is in the log, or in calls.log.1 when it was the
    // one that filled the log.
    let newest = now.last().or(old.last()).expect("a line");
    assert_eq!(newest["containerID"], "rot19");

    // The summary: one row per plugin and command, with the call count.
    let out = run_ok(
        Command::new(build_dir().join("cni-rs"))
            .args(["latency", log.to_str().unwrap()])
            .env_remove("CNI_RS_CONFIG"),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("host-local"))
        .unwrap_or_else(|| panic!("no host-local row in {text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "ADD", "{text}");
    assert_eq!(cols[2], (now.len() + old.len()).to_string(), "{text}");
    assert_eq!(cols[3], "0", "no errors: {text}");
    let p50: f64 = cols[4].parse().expect("p50");
    let p90: f64 = cols[5].parse().expect("p90");
    assert!(p50 > 0.0 && p90 >= p50, "{text}");
}
