//! Filesystem safety of every file the suite keeps: host-local's leases,
//! flannel's saved delegate configs, the runtime's result cache and
//! tuning's backups. Each is created without following a symlink, mode
//! 0600, under a name built only from validated parts; an entry planted
//! as a symlink where one of them goes is refused (or, for files replaced
//! by `rename()`, replaced), and the symlink's target is never touched.
//!
//! Every "victim" below is a file or directory a symlink points to: after
//! each call it must hold exactly what it held before.

use serde_json::{json, Value};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use tests::*;

/// What a victim holds, to compare before and after.
fn victim_state(p: &Path) -> (Vec<String>, Option<Vec<u8>>) {
    if p.is_dir() {
        (tree(p), None)
    } else {
        (Vec::new(), std::fs::read(p).ok())
    }
}

fn assert_symlink_to(link: &Path, target: &Path) {
    let meta = std::fs::symlink_metadata(link).unwrap_or_else(|e| panic!("{link:?}: {e}"));
    assert!(
        meta.file_type().is_symlink(),
        "{link:?} is no longer a symlink"
    );
    assert_eq!(std::fs::read_link(link).unwrap(), target, "{link:?}");
}

fn is_regular(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file())
}

// ---- host-local ------------------------------------------------------------

const HL_NET: &str = "fsnet";

fn hl_conf(data: &Path, version: &str) -> Value {
    json!({"cniVersion": version, "name": HL_NET, "type": "host-local",
           "cni.dev/valid-attachments": [],
           "ipam": {"type": "host-local", "dataDir": data,
                    "ranges": [[{"subnet": "10.88.0.0/24"}]]}})
}

fn hl(verb: &str, cid: &str, conf: &Value) -> PluginOutput {
    call_plugin(
        None,
        &bin("host-local"),
        &[
            ("CNI_COMMAND", verb),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", "/run/netns/cnit-host-local-unused"),
            ("CNI_IFNAME", "eth0"),
        ],
        &conf.to_string(),
    )
}

#[test]
fn host_local_creates_0600_leases_and_refuses_planted_symlinks() {
    let t = TempDir::new("fs-hl");
    let data = t.path().join("data");
    let dir = data.join(HL_NET);
    let victim = t.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("precious"), "do not touch\n").unwrap();
    let conf = hl_conf(&data, "1.0.0");

    // The network's lease directory planted as a symlink.
    std::fs::create_dir_all(&data).unwrap();
    symlink(&victim, &dir).unwrap();
    let before = victim_state(&victim);
    let out = hl("ADD", "c1", &conf);
    out.assert_error(5, &format!("refusing {}", dir.display()));
    let out = hl("DEL", "c1", &conf);
    out.assert_error(5, &dir.display().to_string());
    assert_eq!(victim_state(&victim), before, "the victim dir");
    assert_symlink_to(&dir, &victim);
    std::fs::remove_file(&dir).unwrap();

    // The lock planted as a symlink: dangling, then to an existing file.
    std::fs::create_dir(&dir).unwrap();
    let lock_victim = victim.join("lock-target");
    symlink(&lock_victim, dir.join("lock")).unwrap();
    let out = hl("ADD", "c1", &conf);
    out.assert_error(5, "lock");
    assert!(!lock_victim.exists(), "created through the lock symlink");
    std::fs::remove_file(dir.join("lock")).unwrap();
    symlink(victim.join("precious"), dir.join("lock")).unwrap();
    let before = victim_state(&victim);
    hl("ADD", "c1", &conf).assert_error(5, "lock");
    assert_eq!(victim_state(&victim), before);
    assert_eq!(
        tree(&dir),
        ["lock -> ".to_string() + &victim.join("precious").display().to_string()]
    );
    std::fs::remove_file(dir.join("lock")).unwrap();

    // A lease planted as a symlink where the next address goes: refused by
    // ADD, left alone by DEL and GC, never followed.
    symlink(victim.join("precious"), dir.join("10.88.0.2")).unwrap();
    hl("ADD", "c1", &conf).assert_error(5, &dir.join("10.88.0.2").display().to_string());
    let out = hl("DEL", "c1", &conf);
    assert_eq!(out.exit_code, 0, "{out:?}");
    hl("GC", "", &hl_conf(&data, "1.1.0")).assert_error(5, "10.88.0.2");
    assert_eq!(victim_state(&victim), before);
    assert_symlink_to(&dir.join("10.88.0.2"), &victim.join("precious"));
    std::fs::remove_file(dir.join("10.88.0.2")).unwrap();

    // last_reserved_ip.0 planted as a symlink.
    symlink(victim.join("precious"), dir.join("last_reserved_ip.0")).unwrap();
    hl("ADD", "c1", &conf).assert_error(5, "last_reserved_ip.0");
    assert_eq!(victim_state(&victim), before);
    assert_eq!(tree(&dir).len(), 2, "{:?}", tree(&dir)); // lock and the link
    std::fs::remove_file(dir.join("last_reserved_ip.0")).unwrap();

    // The lease's index link (FNV-1a 64 of "c1\r\neth0") planted as a
    // symlink: replaced by the link, never followed.
    let index = ".held-by-44ee69187b69bb13-10.88.0.2";
    symlink(victim.join("precious"), dir.join(index)).unwrap();

    // Then: the files and their modes, nothing else.
    let out = hl("ADD", "c1", &conf);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(out.json()["ips"][0]["address"], "10.88.0.2/24");
    assert_eq!(victim_state(&victim), before);
    assert_eq!(
        tree(&dir),
        [index, "10.88.0.2", "last_reserved_ip.0", "lock"]
    );
    assert_eq!(std::fs::read(dir.join("10.88.0.2")).unwrap(), b"c1\r\neth0");
    for (name, mode) in [
        (index, 0o600),
        ("10.88.0.2", 0o600),
        ("last_reserved_ip.0", 0o600),
        ("lock", 0o600),
    ] {
        assert!(is_regular(&dir.join(name)), "{name}");
        assert_eq!(mode_of(&dir.join(name)), mode, "{name}");
    }
    assert_eq!(
        mode_of(&dir),
        0o755,
        "the network dir, as the Go plugin makes it"
    );
    assert_eq!(hl("DEL", "c1", &conf).exit_code, 0);
    assert_eq!(tree(&dir), ["last_reserved_ip.0", "lock"]);
    assert_eq!(victim_state(&victim), before);

    // dataDir itself may be a symlink (a node's /var/lib/cni on another
    // disk): the network dir is made in its target, and only the entries
    // below it are never followed.
    let real = t.path().join("real-data");
    std::fs::create_dir(&real).unwrap();
    let linked = t.path().join("linked-data");
    symlink(&real, &linked).unwrap();
    let conf = hl_conf(&linked, "1.0.0");
    let out = hl("ADD", "c2", &conf);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        tree(&real),
        [
            "fsnet/",
            "fsnet/.held-by-22deb3e65223ccfe-10.88.0.2",
            "fsnet/10.88.0.2",
            "fsnet/last_reserved_ip.0",
            "fsnet/lock"
        ]
    );
    assert_eq!(mode_of(&real.join("fsnet/10.88.0.2")), 0o600);
    assert_eq!(hl("DEL", "c2", &conf).exit_code, 0);
}

// ---- the result cache (cnitool) ---------------------------------------------

/// A conflist of host-local alone: cnitool's cache without a namespace.
struct Runtime {
    t: TempDir,
}

impl Runtime {
    fn new(tag: &str) -> Runtime {
        let t = TempDir::new(tag);
        std::fs::create_dir(t.path().join("conf")).unwrap();
        std::fs::write(
            t.path().join("conf/fsnet.conflist"),
            json!({"cniVersion": "1.1.0", "name": "fsnet", "plugins": [
                {"type": "host-local", "ipam": {"type": "host-local", "dataDir": t.path().join("data"),
                                                "ranges": [[{"subnet": "10.88.0.0/24"}]]}}]})
            .to_string(),
        )
        .unwrap();
        Runtime { t }
    }

    fn cache(&self) -> PathBuf {
        self.t.path().join("cache")
    }

    fn results(&self) -> PathBuf {
        self.cache().join("results")
    }

    fn cnitool(&self, verb: &str, cid: &str) -> PluginOutput {
        let out = Command::new(bin("cnitool"))
            .args([verb, "fsnet", "/run/netns/cnit-fs-unused"])
            .env("NETCONFPATH", self.t.path().join("conf"))
            .env("CNI_PATH", bin_dir())
            .env("CNI_CACHE_DIR", self.cache())
            .env("CNI_CONTAINERID", cid)
            .env_remove("CNI_ARGS")
            .env_remove("CAP_ARGS")
            .env_remove("CNI_IFNAME")
            .output()
            .expect("cnitool");
        PluginOutput {
            exit_code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn leases(&self) -> Vec<String> {
        leases_in(&self.t.path().join("data/fsnet"))
    }
}

#[test]
fn result_cache_is_0600_in_0700_and_a_planted_file_symlink_is_never_followed() {
    let rt = Runtime::new("fs-cache");
    let out = rt.cnitool("add", "c1");
    assert_eq!(out.exit_code, 0, "{out:?}");
    let file = rt.results().join("fsnet-c1-eth0");
    assert_eq!(
        tree(&rt.cache()),
        ["results/", "results/fsnet-c1-eth0"],
        "no temp file left"
    );
    assert_eq!(mode_of(&rt.results()), 0o700);
    assert_eq!(mode_of(&file), 0o600);
    assert_eq!(rt.cnitool("del", "c1").exit_code, 0);
    assert_eq!(tree(&rt.cache()), ["results/"]);

    // The cache file planted as a symlink: ADD replaces the link (rename),
    // never writes through it; DEL removes the link, not its target.
    let victim = rt.t.path().join("victim");
    std::fs::write(&victim, "do not touch\n").unwrap();
    symlink(&victim, &file).unwrap();
    let out = rt.cnitool("add", "c1");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"do not touch\n");
    assert!(is_regular(&file), "the link was replaced by the cache file");
    assert_eq!(mode_of(&file), 0o600);
    std::fs::remove_file(&file).unwrap();
    symlink(&victim, &file).unwrap();
    let out = rt.cnitool("del", "c1");
    assert_eq!(
        out.exit_code, 0,
        "DEL with the cache file a symlink: {out:?}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"do not touch\n");
    assert!(
        std::fs::symlink_metadata(&file).is_err(),
        "the link is gone"
    );
    assert_eq!(rt.leases(), Vec::<String>::new());

    // Names come from validated parts only: a container ID that would
    // leave the results dir is refused before anything runs.
    for bad in ["../../escape", "a/b", ".."] {
        let out = rt.cnitool("add", bad);
        assert_ne!(out.exit_code, 0, "{bad}: {out:?}");
        assert!(out.stderr.contains("CNI_CONTAINERID"), "{bad}: {out:?}");
        assert_eq!(rt.leases(), Vec::<String>::new(), "{bad}: a plugin ran");
    }
    assert_eq!(
        tree(rt.t.path())
            .iter()
            .filter(|f| f.contains("escape"))
            .count(),
        0
    );
    assert!(!rt.t.path().parent().unwrap().join("escape").exists());
}

#[test]
fn result_cache_refuses_a_results_dir_planted_as_a_symlink() {
    let rt = Runtime::new("fs-cachedir");
    let victim = rt.t.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::create_dir(rt.cache()).unwrap();
    symlink(&victim, rt.results()).unwrap();
    let out = rt.cnitool("add", "c1");
    let left = tree(&victim);
    // Whatever ADD answered, the runtime's DEL must leave nothing.
    let del = rt.cnitool("del", "c1");
    assert_eq!(
        left,
        Vec::<String>::new(),
        "ADD wrote through {:?}: {out:?}",
        rt.results()
    );
    assert_ne!(out.exit_code, 0, "ADD with results/ a symlink: {out:?}");
    assert!(
        out.stderr.contains("results"),
        "the error names the dir: {out:?}"
    );
    assert_eq!(del.exit_code, 0, "{del:?}");
    assert_eq!(rt.leases(), Vec::<String>::new());
    assert_symlink_to(&rt.results(), &victim);
}

// ---- flannel ------------------------------------------------------------------

struct Flannel {
    node: Node,
    pod: Netns,
    t: TempDir,
}

impl Flannel {
    fn new(tag: &str) -> Flannel {
        let t = TempDir::new(tag);
        std::fs::write(
            t.path().join("subnet.env"),
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
        )
        .unwrap();
        Flannel {
            node: Node::new(tag),
            pod: Netns::new(&format!("pod-{tag}")),
            t,
        }
    }

    fn conf(&self, data_dir: &Path) -> Value {
        json!({"cniVersion": "1.0.0", "name": "fsfl", "type": "flannel",
               "subnetFile": self.t.path().join("subnet.env"), "dataDir": data_dir,
               "delegate": {"bridge": "cni-fs"},
               "ipam": {"dataDir": self.t.path().join("leases")}})
    }

    fn call(&self, verb: &str, conf: &Value) -> PluginOutput {
        let netns = self.pod.path();
        call_plugin(
            Some(&self.node.ns),
            &bin("flannel"),
            &[
                ("CNI_COMMAND", verb),
                ("CNI_CONTAINERID", "fs-ctr"),
                ("CNI_NETNS", netns.to_str().unwrap()),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", bin_dir().to_str().unwrap()),
            ],
            &conf.to_string(),
        )
    }

    fn leases(&self) -> Vec<String> {
        leases_in(&self.t.path().join("leases/fsfl"))
    }
}

#[test]
fn flannel_saves_0600_in_0700_and_refuses_planted_symlinks() {
    if !require_root("flannel_saves_0600_in_0700_and_refuses_planted_symlinks") {
        return;
    }
    let f = Flannel::new("fs-fl");
    let data = f.t.path().join("flannel");
    let conf = f.conf(&data);
    let victim = f.t.path().join("victim");
    std::fs::write(&victim, "do not touch\n").unwrap();

    let out = f.call("ADD", &conf);
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(tree(&data), ["fs-ctr", "fs-ctr@eth0"]);
    assert_eq!(mode_of(&data), 0o700);
    for name in ["fs-ctr", "fs-ctr@eth0"] {
        assert!(is_regular(&data.join(name)), "{name}");
        assert_eq!(mode_of(&data.join(name)), 0o600, "{name}");
    }
    assert_eq!(f.call("DEL", &conf).exit_code, 0);
    assert_eq!(tree(&data), Vec::<String>::new());

    // Either name planted as a symlink: ADD refuses before saving or
    // delegating anything (no lease, no veth), DEL succeeds without
    // following it.
    for name in ["fs-ctr@eth0", "fs-ctr"] {
        symlink(&victim, data.join(name)).unwrap();
        let out = f.call("ADD", &conf);
        out.assert_error(5, &data.join(name).display().to_string());
        assert_eq!(f.leases(), Vec::<String>::new(), "{name}: delegated");
        assert!(f.pod.link("eth0").is_none(), "{name}: delegated");
        assert_eq!(
            tree(&data),
            [format!("{name} -> {}", victim.display())],
            "{name}"
        );
        let out = f.call("DEL", &conf);
        assert_eq!(out.exit_code, 0, "{name}: {out:?}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"do not touch\n", "{name}");
        assert_symlink_to(&data.join(name), &victim);
        std::fs::remove_file(data.join(name)).unwrap();
    }

    // dataDir itself may be a symlink (as /var/lib/cni sometimes is): the
    // files land in its target, with the same modes.
    let real = f.t.path().join("real-flannel");
    std::fs::create_dir(&real).unwrap();
    let linked = f.t.path().join("linked-flannel");
    symlink(&real, &linked).unwrap();
    let conf = f.conf(&linked);
    assert_eq!(f.call("ADD", &conf).exit_code, 0);
    assert_eq!(tree(&real), ["fs-ctr", "fs-ctr@eth0"]);
    assert_eq!(mode_of(&real.join("fs-ctr@eth0")), 0o600);
    assert_eq!(f.call("DEL", &conf).exit_code, 0);
    assert_eq!(tree(&real), Vec::<String>::new());
    assert_eq!(f.leases(), Vec::<String>::new());
}

// ---- tuning ---------------------------------------------------------------------

#[test]
fn tuning_backup_is_0600_in_0700_and_a_planted_symlink_is_never_followed() {
    if !require_root("tuning_backup_is_0600_in_0700_and_a_planted_symlink_is_never_followed") {
        return;
    }
    let node = Node::new("fs-tu");
    let pod = Netns::new("pod-fs-tu");
    let t = TempDir::new("fs-tu");
    node.ns.ip(&[
        "link",
        "add",
        "tu-host",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        pod.name(),
    ]);
    let netns = pod.path().to_str().unwrap().to_string();
    let data = t.path().join("tuning");
    let conf = json!({"cniVersion": "1.0.0", "name": "fstu", "type": "tuning",
        "dataDir": data, "mtu": 1400, "sysctl": {"net.core.somaxconn": "1000"},
        "prevResult": {"cniVersion": "1.0.0",
                       "interfaces": [{"name": "tu-host"}, {"name": "eth0", "sandbox": netns}],
                       "ips": []}});
    let call = |verb: &str| {
        call_plugin(
            Some(&node.ns),
            &bin("tuning"),
            &[
                ("CNI_COMMAND", verb),
                ("CNI_CONTAINERID", "fs-ctr"),
                ("CNI_NETNS", netns.as_str()),
                ("CNI_IFNAME", "eth0"),
            ],
            &conf.to_string(),
        )
    };
    let mtu = || pod.link("eth0").unwrap()["mtu"].as_u64().unwrap();
    let mtu_before = mtu();
    let backup = data.join("fs-ctr_eth0.json");

    let out = call("ADD");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(tree(&data), ["fs-ctr_eth0.json"], "no temp file left");
    assert_eq!(mode_of(&data), 0o700);
    assert_eq!(mode_of(&backup), 0o600);
    assert_eq!(call("DEL").exit_code, 0);
    assert_eq!(mtu(), mtu_before);
    assert_eq!(tree(&data), Vec::<String>::new());

    // The backup planted as a symlink: never read through, replaced by
    // ADD's backup, the victim untouched; DEL restores from the real one.
    let victim = t.path().join("victim");
    std::fs::write(&victim, r#"{"mtu": 9000}"#).unwrap();
    symlink(&victim, &backup).unwrap();
    let out = call("ADD");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(std::fs::read(&victim).unwrap(), br#"{"mtu": 9000}"#);
    assert!(is_regular(&backup));
    assert_eq!(mode_of(&backup), 0o600);
    assert_eq!(call("DEL").exit_code, 0);
    assert_eq!(
        mtu(),
        mtu_before,
        "restored from the real backup, not the victim's 9000"
    );
    assert_eq!(tree(&data), Vec::<String>::new());
    assert_eq!(std::fs::read(&victim).unwrap(), br#"{"mtu": 9000}"#);
}
