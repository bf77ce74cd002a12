//! cni-bench-scrape: what a scrape of `cni-rs metrics --listen` costs on a
//! node with 1,000 attachments (cache entries and host-local leases of one
//! network, their namespaces gone: every one leaked) and 100,000 call log
//! records. Run inside a throwaway network namespace (scripts/bench.sh
//! does it): it starts the server there, scrapes it over loopback, and
//! prints a Markdown section for bench/RESULTS.md: the first scrape (which
//! reads the whole log), the following ones (the node read again, the log
//! only for new lines, 1,000 appended before each), and the server's
//! resident memory after each, which must stay flat.
//!
//! Usage: `cni-bench-scrape CNI_RS [SCRAPES]`

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cnitool::cache::{CacheEntry, ResultCache};
use serde_json::json;

const ATTACHMENTS: u32 = 1_000;
const RECORDS: u32 = 100_000;
const APPENDED: u32 = 1_000;
const PORT: u16 = 9587;

fn record(i: u32) -> String {
    let (plugin, command) = match i % 4 {
        0 => ("bridge", "ADD"),
        1 => ("host-local", "ADD"),
        2 => ("portmap", "DEL"),
        _ => ("bridge", "STATUS"),
    };
    format!(
        "{{\"time\":\"2026-12-05T10:00:00.000Z\",\"plugin\":\"{plugin}\",\"command\":\"{command}\",\
         \"containerID\":\"c{i}\",\"netns\":\"/run/netns/p{i}\",\"ifname\":\"eth0\",\
         \"network\":\"scrapenet\",\"durationMs\":{}.{:03},\"ips\":[\"10.60.0.2/22\"]}}\n",
        i % 40,
        i % 1000
    )
}

fn node(dir: &Path) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let conf_dir = dir.join("conf");
    let leases = dir.join("leases");
    std::fs::create_dir_all(&conf_dir).map_err(io)?;
    std::fs::create_dir_all(leases.join("scrapenet")).map_err(io)?;
    let list = json!({
        "cniVersion": "1.1.0", "name": "scrapenet",
        "plugins": [
            {"type": "bridge", "bridge": "cni-scr", "isGateway": true,
             "ipam": {"type": "host-local", "dataDir": leases,
                      "ranges": [[{"subnet": "10.60.0.0/22"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    std::fs::write(conf_dir.join("10-scrape.conflist"), list.to_string()).map_err(io)?;
    let cache = ResultCache::new(dir.join("cache"));
    for i in 0..ATTACHMENTS {
        let ip = format!("10.60.{}.{}", (i + 2) / 256, (i + 2) % 256);
        let id = format!("pod{i:05}");
        std::fs::write(leases.join("scrapenet").join(&ip), format!("{id}\neth0")).map_err(io)?;
        let entry = CacheEntry {
            container_id: id,
            config: list.to_string().into_bytes(),
            ifname: "eth0".into(),
            network_name: "scrapenet".into(),
            netns: format!("/run/netns/gone-{i}"),
            result: Some(json!({
                "cniVersion": "1.1.0",
                "interfaces": [{"name": "cni-scr"}, {"name": format!("veth{i}")},
                               {"name": "eth0", "sandbox": format!("/run/netns/gone-{i}")}],
                "ips": [{"address": format!("{ip}/22"), "interface": 2}]
            })),
            ..CacheEntry::default()
        };
        cache.write(&entry).map_err(|e| e.to_string())?;
    }
    let mut log = std::fs::File::create(dir.join("calls.log")).map_err(io)?;
    let mut chunk = String::new();
    for i in 0..RECORDS {
        chunk.push_str(&record(i));
        if chunk.len() > 1 << 20 {
            log.write_all(chunk.as_bytes()).map_err(io)?;
            chunk.clear();
        }
    }
    log.write_all(chunk.as_bytes()).map_err(io)
}

fn scrape() -> Result<usize, String> {
    let mut s = TcpStream::connect(("127.0.0.1", PORT)).map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(|e| e.to_string())?;
    if !out.starts_with(b"HTTP/1.1 200") {
        return Err(format!("{}", String::from_utf8_lossy(&out)));
    }
    Ok(out.len())
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cni_rs = args
        .first()
        .ok_or("usage: cni-bench-scrape CNI_RS [SCRAPES]")?;
    let scrapes: usize = args
        .get(1)
        .map_or(Ok(20), |s| s.parse())
        .map_err(|_| "SCRAPES")?;
    let dir = std::env::temp_dir().join(format!("cnit-bench-scrape-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    node(&dir)?;
    let d = |p: &str| dir.join(p).display().to_string();
    let server = Server(
        Command::new(cni_rs)
            .args(["metrics", "--listen", &format!("127.0.0.1:{PORT}")])
            .args(["--conf-dir", &d("conf"), "--cache-dir", &d("cache")])
            .args(["--cri-socket", "none", "--call-log", &d("calls.log")])
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{cni_rs}: {e}"))?,
    );
    let pid = server.0.id();
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", PORT)).is_err() {
        if started.elapsed() > Duration::from_secs(10) {
            return Err("the server did not listen within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let idle = rss_kib(pid);
    let t = Instant::now();
    let bytes = scrape()?;
    let first = t.elapsed();
    let after_first = rss_kib(pid);
    let mut times = Vec::new();
    let mut rss = Vec::new();
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("calls.log"))
        .map_err(|e| e.to_string())?;
    for n in 0..scrapes {
        let more: String = (0..APPENDED)
            .map(|i| record(RECORDS + n as u32 * APPENDED + i))
            .collect();
        log.write_all(more.as_bytes()).map_err(|e| e.to_string())?;
        let t = Instant::now();
        scrape()?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        rss.push(rss_kib(pid));
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    println!("## The metrics scrape (`cni-rs metrics --listen`)\n");
    println!(
        "A node of {ATTACHMENTS} attachments of one network (cache entries and host-local leases, \
         their namespaces gone: every one leaked) and a call log of {RECORDS} records; \
         `cni-bench-scrape` over loopback, {APPENDED} records appended before each later scrape. \
         The answer is {bytes} bytes.\n"
    );
    println!("| | time | server RSS |\n|---|---|---|");
    println!("| before the first scrape | | {idle} KiB |");
    println!(
        "| first scrape (the node, and the whole log) | {:.1} ms | {after_first} KiB |",
        first.as_secs_f64() * 1000.0
    );
    println!(
        "| {scrapes} later scrapes (the node, and the new lines): p50 / p90 / max | {:.1} / {:.1} / {:.1} ms | {} to {} KiB |",
        q(0.5),
        q(0.9),
        q(1.0),
        rss.iter().min().copied().unwrap_or(0),
        rss.iter().max().copied().unwrap_or(0)
    );
    println!(
        "\nThe log is read incrementally (a chunk and a partial line at a time, never whole per \
         scrape), and the registry holds one series per label set, so the memory after the first \
         scrape stays flat: {} KiB after the last, {} KiB after the first.",
        rss.last().copied().unwrap_or(0),
        after_first
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("cni-bench-scrape: {e}");
        std::process::exit(1);
    }
}
