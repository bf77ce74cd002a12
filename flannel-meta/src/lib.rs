//! The `flannel` meta plugin: renders a delegate config (a `bridge` with
//! `host-local` IPAM by default) from flanneld's subnet.env and the
//! network config, saves it under `dataDir`, and delegates every verb to
//! it. Behaviour follows flannel-io/cni-plugin; the deliberate differences
//! are in the README.
//!
//! - ADD: config checked, subnet.env read, delegate config rendered and
//!   saved *before* the delegate ADD; a failed delegate ADD is rolled back
//!   with a delegate DEL of the same config, and the saved file goes with
//!   it.
//! - DEL: never reads subnet.env; runs the delegate's DEL with the saved
//!   config and removes the file only once that DEL succeeded, so a retried
//!   DEL still releases the address. No saved file, or one that cannot be
//!   parsed, is success.
//! - CHECK: the delegate's CHECK with the saved config and `prevResult`.
//! - GC: the delegate's GC (config rendered from subnet.env, else from a
//!   saved config of this network), then the saved configs of attachments
//!   no longer valid are removed.
//! - STATUS: code 50 while subnet.env is missing or unusable, else the
//!   delegate's STATUS.

pub mod config;
pub mod delegate_conf;
pub mod store;
pub mod subnet_env;

use config::FlannelConf;
use libcni::error::ErrorResult;
use libcni::skel::{CmdArgs, Plugin};
use libcni::types::{Attachment, CniResult};
use libcni::{fault, gojson, invoke, Error, ErrorList, Version};
use serde_json::{Map, Value};
use store::{Entry, Lookup, Store};
use subnet_env::SubnetEnv;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI flannel plugin v…`).
pub const NAME: &str = "flannel";

pub struct Flannel;

fn attachment(args: &CmdArgs) -> Attachment {
    Attachment {
        container_id: args.container_id.clone(),
        ifname: args.ifname.clone(),
    }
}

/// `err` with `prefix` in front of its message, its code kept.
fn context(prefix: &str, err: Error) -> Error {
    let mut r: ErrorResult = err.to_result("");
    r.msg = format!("{prefix}: {}", r.msg);
    Error::Plugin(r)
}

/// A saved config made ready for the delegate: its type, and the bytes
/// to send (the saved bytes as they are, plus our `prevResult` when we
/// have one, converted to the saved config's version). `None` when the
/// saved bytes are not a config the delegate could run with.
fn delegate_stdin(saved: &[u8], args: &CmdArgs) -> Option<(String, Vec<u8>)> {
    let Ok(Value::Object(mut conf)) = gojson::parse_value(saved) else {
        return None;
    };
    // The delegate (ours or Go's) reads its keys as Go does.
    let plugin = match gojson::lookup_in(&conf, "type") {
        Some(Value::String(t)) if !t.is_empty() => t,
        _ => return None,
    };
    let prev = args.prev_result_for_teardown();
    let Some(prev) = prev else {
        return Some((plugin, saved.to_vec()));
    };
    let version = match gojson::lookup_in(&conf, "cniVersion") {
        Some(Value::String(v)) => Version::parse(&v),
        _ => Some(Version::V0_1_0),
    };
    match version.map(|v| prev.to_json(v)) {
        Some(Ok(json)) => {
            conf.insert("prevResult".into(), json);
            Some((plugin, delegate_conf::to_bytes(&conf)))
        }
        _ => Some((plugin, saved.to_vec())),
    }
}

impl Plugin for Flannel {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        let conf = FlannelConf::parse(&args.stdin)?;
        let env = SubnetEnv::load(&conf.subnet_file)?;
        let delegate = delegate_conf::render(&conf, &env);
        let bytes = delegate_conf::to_bytes(&delegate);
        let plugin = conf.delegate_type();
        let who = attachment(args);
        eprintln!(
            "flannel: {}/{}: delegate config for {plugin:?}: {}",
            who.container_id,
            who.ifname,
            String::from_utf8_lossy(&bytes)
        );
        // A delegate that is not installed fails the ADD before anything is
        // saved: a config naming it would make every later DEL fail too.
        invoke::find_in_path(plugin, &invoke::cni_path_from_env())
            .map_err(|e| context(&format!("delegate {plugin:?}"), e))?;
        let store = Store::new(&conf.data_dir);
        store.save(&who, &bytes)?;
        fault::point("flannel/saved");
        match invoke::delegate_add(plugin, &bytes, args.version) {
            Ok(result) => {
                fault::point("flannel/delegated");
                Ok(result)
            }
            Err(e) => Err(roll_back(&store, &who, plugin, &bytes, e)),
        }
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        let store = Store::new(FlannelConf::data_dir_of(&args.stdin)?);
        let who = attachment(args);
        let saved = match store.load(&who)? {
            Lookup::Absent => return Ok(()),
            Lookup::NotRegular(path) => {
                eprintln!(
                    "flannel: DEL {}/{}: {} is not a regular file (a symlink?): not followed, \
                     nothing to delegate",
                    who.container_id,
                    who.ifname,
                    path.display()
                );
                return Ok(());
            }
            Lookup::Found(saved) => saved,
        };
        let Some((plugin, stdin)) = delegate_stdin(&saved.bytes, args) else {
            // As the Go plugin (cni-plugin #33): a file a crash left empty
            // must not block the pod's deletion forever.
            eprintln!(
                "flannel: DEL {}/{}: the saved delegate config {} cannot be parsed; \
                 the delegate's DEL cannot run: removing it",
                who.container_id,
                who.ifname,
                saved.path.display()
            );
            return store.remove(&who, saved.source);
        };
        invoke::delegate_del(&plugin, &stdin).map_err(|e| {
            context(
                &format!(
                    "delegate {plugin:?} DEL failed (the saved config {} is kept for a retry)",
                    saved.path.display()
                ),
                e,
            )
        })?;
        store.remove(&who, saved.source)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let store = Store::new(FlannelConf::data_dir_of(&args.stdin)?);
        let who = attachment(args);
        let saved = match store.load(&who)? {
            Lookup::Found(saved) => saved,
            Lookup::Absent => {
                return Err(Error::CheckFailed(format!(
                    "no saved delegate config for container {:?} interface {:?} in {}: \
                     ADD has not run, or DEL has",
                    who.container_id,
                    who.ifname,
                    store.dir().display()
                )))
            }
            Lookup::NotRegular(path) => {
                return Err(Error::CheckFailed(format!(
                    "{} is not a regular file (a symlink?): not followed",
                    path.display()
                )))
            }
        };
        let Some((plugin, stdin)) = delegate_stdin(&saved.bytes, args) else {
            return Err(Error::CheckFailed(format!(
                "the saved delegate config {} cannot be parsed",
                saved.path.display()
            )));
        };
        invoke::delegate_check(&plugin, &stdin)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = FlannelConf::parse(&args.stdin)?;
        let store = Store::new(&conf.data_dir);
        let mut errors = ErrorList::new();
        // The saved configs of this network (a dataDir may be shared).
        let mut ours: Vec<(Entry, Map<String, Value>)> = Vec::new();
        let mut stale_temps = Vec::new();
        for entry in store.list()? {
            if matches!(entry, Entry::StaleTemp(_)) {
                stale_temps.push(entry);
                continue;
            }
            let parsed = match store.read_entry(&entry) {
                Ok(bytes) => bytes.and_then(|b| gojson::parse_value(&b).ok()),
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            if let Some(Value::Object(m)) = parsed {
                if gojson::lookup_in(&m, "name")
                    .as_ref()
                    .and_then(Value::as_str)
                    == Some(conf.name.as_str())
                {
                    ours.push((entry, m));
                }
            }
        }
        let saved_type = |m: &Map<String, Value>| match gojson::lookup_in(m, "type") {
            Some(Value::String(t)) => Some(t),
            _ => None,
        };
        let base = match SubnetEnv::load(&conf.subnet_file) {
            Ok(env) => Some(delegate_conf::render(&conf, &env)),
            Err(e) => {
                eprintln!("flannel: GC: {e} Using a saved delegate config instead.");
                ours.iter()
                    .find(|(_, m)| saved_type(m).is_some())
                    .map(|(_, m)| m.clone())
            }
        };
        if let Some(mut gc_conf) = base {
            // GC requests carry no runtimeConfig (a saved config may have one).
            gc_conf.remove("runtimeConfig");
            if !args.conf.cni_version.is_empty() {
                gc_conf.insert(
                    "cniVersion".into(),
                    Value::from(args.conf.cni_version.clone()),
                );
            }
            for (key, list) in [
                ("cni.dev/valid-attachments", &args.conf.valid_attachments),
                ("cni.dev/attachments", &args.conf.legacy_attachments),
            ] {
                match list {
                    Some(v) => gc_conf.insert(key.into(), v.clone()),
                    None => gc_conf.remove(key),
                };
            }
            let plugin =
                saved_type(&gc_conf).unwrap_or_else(|| config::DEFAULT_DELEGATE.to_string());
            // The saved configs stay until the delegate has collected.
            invoke::delegate_gc(&plugin, &delegate_conf::to_bytes(&gc_conf))
                .map_err(|e| context(&format!("delegate {plugin:?} GC failed"), e))?;
        }
        if !args.conf.has_gc_attachments() {
            eprintln!(
                "flannel: GC: the request lists no valid attachments \
                 (cni.dev/valid-attachments): no saved config removed"
            );
            ours.clear();
        }
        let valid = args.conf.gc_valid_attachments()?;
        for (entry, _) in &ours {
            let stale = match entry {
                Entry::Attachment(a) => !valid.contains(a),
                Entry::Legacy(id) => !valid.iter().any(|v| &v.container_id == id),
                Entry::StaleTemp(_) => false,
            };
            if stale {
                errors.record(store.remove_entry(entry));
            }
        }
        for entry in &stale_temps {
            errors.record(store.remove_entry(entry));
        }
        errors.finish_joined()
    }

    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = FlannelConf::parse(&args.stdin)?;
        let env = SubnetEnv::load(&conf.subnet_file)
            .map_err(|e| Error::NotAvailable(format!("flannel is not ready: {e}")))?;
        libcni::files::check_writable_dir(&conf.data_dir).map_err(|why| {
            Error::NotAvailable(format!("delegate configs cannot be saved: {why}"))
        })?;
        let delegate = delegate_conf::render(&conf, &env);
        invoke::delegate_status(conf.delegate_type(), &delegate_conf::to_bytes(&delegate))
    }
}

/// After a failed delegate ADD: the delegate's DEL with the same config
/// (spec §4), then the saved file. If that DEL fails too, the file stays
/// for the runtime's DEL, which must follow a failed ADD.
fn roll_back(store: &Store, who: &Attachment, plugin: &str, bytes: &[u8], add: Error) -> Error {
    let add = context(&format!("delegate {plugin:?} ADD failed"), add);
    match invoke::delegate_del(plugin, bytes) {
        Ok(()) => match store.discard(who) {
            Ok(()) => add,
            Err(e) => {
                let mut r = add.to_result("");
                r.msg = format!(
                    "{}; removing the saved config after the rollback: {e}",
                    r.msg
                );
                Error::Plugin(r)
            }
        },
        Err(e) => {
            let mut r = add.to_result("");
            r.msg = format!(
                "{}; rolling it back with DEL failed too ({e}): the saved config in {} is kept \
                 for the runtime's DEL",
                r.msg,
                store.dir().display()
            );
            Error::Plugin(r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args_with_prev(prev: Option<Value>) -> CmdArgs {
        let mut stdin = json!({"cniVersion": "1.0.0", "name": "cbr0", "type": "flannel"});
        if let Some(p) = &prev {
            stdin["prevResult"] = p.clone();
        }
        CmdArgs {
            version: Version::V1_0_0,
            ..libcni::skel::test_args(&stdin.to_string())
        }
    }

    #[test]
    fn the_saved_bytes_go_unchanged_without_a_prev_result() {
        let saved = br#"{"cniVersion":"1.0.0","name":"cbr0","type":"bridge","mtu":1450}"#;
        let (plugin, stdin) = delegate_stdin(saved, &args_with_prev(None)).unwrap();
        assert_eq!((plugin.as_str(), stdin.as_slice()), ("bridge", &saved[..]));
    }

    #[test]
    fn the_prev_result_is_added_in_the_saved_configs_version() {
        let prev = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": "/run/netns/p"}],
            "ips": [{"address": "10.244.1.2/24", "gateway": "10.244.1.1", "interface": 0}]});
        let saved = br#"{"cniVersion":"0.3.1","name":"cbr0","type":"bridge"}"#;
        let (_, stdin) = delegate_stdin(saved, &args_with_prev(Some(prev))).unwrap();
        let v: Value = gojson::parse_value(&stdin).unwrap();
        assert_eq!(v["type"], "bridge");
        assert_eq!(v["prevResult"]["cniVersion"], "0.3.1");
        assert_eq!(v["prevResult"]["ips"][0]["version"], "4");
        assert_eq!(v["prevResult"]["ips"][0]["address"], "10.244.1.2/24");
    }

    #[test]
    fn saved_bytes_without_a_type_are_not_a_config() {
        for bad in [
            &b""[..],
            b"{",
            b"[]",
            br#"{"name":"x"}"#,
            br#"{"type":""}"#,
            br#"{"type":1}"#,
        ] {
            assert!(
                delegate_stdin(bad, &args_with_prev(None)).is_none(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn errors_keep_their_code_under_context() {
        let e = context(
            "delegate \"bridge\" ADD failed",
            Error::TryAgainLater("busy".into()),
        );
        assert_eq!(
            (e.code(), e.to_string()),
            (11, "delegate \"bridge\" ADD failed: busy".into())
        );
    }
}
