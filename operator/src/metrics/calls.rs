//! The call log, read incrementally: each line once, across the log's
//! rotation to `<log>.1` and across scrapes, in bounded memory (a chunk
//! and one partial line). A new reader starts with the rotated file, then
//! the log: what both still hold.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// How much of a file is read at once.
const CHUNK: usize = 64 << 10;
/// A line longer than this is not one the plugins write: it is skipped.
const MAX_LINE: usize = 1 << 20;

/// Where the reader is: the file (device and inode) it read last, and how
/// far.
pub struct Tail {
    log: PathBuf,
    rotated: PathBuf,
    /// Whether the first read (the rotated file, whole) is done.
    started: bool,
    file: Option<(u64, u64)>,
    offset: u64,
    partial: Vec<u8>,
}

/// One call log line, as the metrics need it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub plugin: String,
    pub command: String,
    /// The network, once the plugin had read its config.
    pub network: Option<String>,
    pub seconds: f64,
    /// The spec error code of a failed call, `None` for a success.
    pub error_code: Option<u64>,
}

/// A line, or why it is not a call's line.
pub type Parsed = Result<Call>;

impl Call {
    /// Reads one line as the plugins write it ([`libcni::calllog`]).
    pub fn parse(line: &[u8]) -> Parsed {
        let v = libcni::gojson::parse_value(line).map_err(|e| Error::CallLine(e.to_string()))?;
        let text = |k: &str| v[k].as_str().map(str::to_string);
        let (Some(plugin), Some(command), Some(ms)) =
            (text("plugin"), text("command"), v["durationMs"].as_f64())
        else {
            return Err(Error::CallLine("no plugin, command or durationMs".into()));
        };
        let error_code = v.get("error").map(|e| e["code"].as_u64().unwrap_or(999));
        Ok(Call {
            plugin,
            command,
            network: text("network"),
            seconds: ms / 1000.0,
            error_code,
        })
    }
}

fn identity(path: &Path) -> Option<(u64, u64, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.len()))
}

impl Tail {
    pub fn new(log: &Path) -> Tail {
        let mut rotated = log.as_os_str().to_owned();
        rotated.push(".1");
        Tail {
            log: log.to_path_buf(),
            rotated: PathBuf::from(rotated),
            started: false,
            file: None,
            offset: 0,
            partial: Vec::new(),
        }
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Feeds every whole line written since the last call to `each`.
    /// An error is a file that exists and cannot be read.
    pub fn read_new(&mut self, each: &mut dyn FnMut(&[u8])) -> Result<()> {
        let current = identity(&self.log);
        match self.file {
            _ if !self.started => {
                self.started = true;
                if identity(&self.rotated).is_some() {
                    self.read_from(&self.rotated.clone(), 0, each)?;
                    self.partial.clear();
                }
            }
            // No log yet at the last read: one may have appeared since.
            None => {}
            Some(id) if current.is_some_and(|(d, i, _)| (d, i) == id) => {
                let len = current.map(|c| c.2).unwrap_or(0);
                if len < self.offset {
                    // Truncated in place: start again.
                    self.offset = 0;
                    self.partial.clear();
                }
                return self.follow(each);
            }
            Some(id) => {
                // Rotated: finish the old file where it now is.
                if identity(&self.rotated).is_some_and(|(d, i, _)| (d, i) == id) {
                    self.read_from(&self.rotated.clone(), self.offset, each)?;
                }
                self.partial.clear();
            }
        }
        self.file = current.map(|(d, i, _)| (d, i));
        self.offset = 0;
        self.follow(each)
    }

    fn follow(&mut self, each: &mut dyn FnMut(&[u8])) -> Result<()> {
        if self.file.is_none() {
            return Ok(());
        }
        self.offset = self.read_from(&self.log.clone(), self.offset, each)?;
        Ok(())
    }

    /// Reads `path` from `offset` to its end, feeding whole lines; returns
    /// the offset reached. A missing file reads as empty.
    fn read_from(&mut self, path: &Path, offset: u64, each: &mut dyn FnMut(&[u8])) -> Result<u64> {
        let failed = |source| Error::File {
            path: path.to_path_buf(),
            source,
        };
        let mut f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(offset),
            Err(e) => return Err(failed(e)),
        };
        f.seek(SeekFrom::Start(offset)).map_err(failed)?;
        let mut at = offset;
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = f.read(&mut buf).map_err(failed)?;
            if n == 0 {
                return Ok(at);
            }
            at += n as u64;
            let mut rest = &buf[..n];
            while let Some(end) = rest.iter().position(|b| *b == b'\n') {
                if self.partial.is_empty() {
                    each(&rest[..end]);
                } else {
                    self.partial.extend_from_slice(&rest[..end]);
                    if self.partial.len() <= MAX_LINE {
                        each(&self.partial);
                    }
                    self.partial.clear();
                }
                rest = &rest[end + 1..];
            }
            if self.partial.len() + rest.len() <= MAX_LINE + 1 {
                self.partial.extend_from_slice(rest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn line(plugin: &str, ms: f64) -> String {
        format!("{{\"plugin\":\"{plugin}\",\"command\":\"ADD\",\"durationMs\":{ms}}}\n")
    }

    fn read(t: &mut Tail) -> Vec<String> {
        let mut out = Vec::new();
        t.read_new(&mut |l| out.push(Call::parse(l).map(|c| c.plugin).unwrap_or_default()))
            .unwrap();
        out
    }

    #[test]
    fn each_line_once_across_rotation_and_partial_writes() {
        let dir = std::env::temp_dir().join(format!("tail-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("calls.log");
        let append = |s: &str| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .unwrap();
            f.write_all(s.as_bytes()).unwrap();
        };
        std::fs::write(dir.join("calls.log.1"), line("old", 1.0)).unwrap();
        append(&line("a", 1.0));
        let mut t = Tail::new(&log);
        assert_eq!(read(&mut t), ["old", "a"]);
        assert_eq!(read(&mut t), Vec::<String>::new());
        // A line arriving in two pieces is read once, whole.
        let b = line("b", 2.0);
        append(&b[..10]);
        assert_eq!(read(&mut t), Vec::<String>::new());
        append(&b[10..]);
        assert_eq!(read(&mut t), ["b"]);
        // Rotation: the rest of the old file, then the new one.
        append(&line("c", 3.0));
        std::fs::rename(&log, dir.join("calls.log.1")).unwrap();
        append(&line("d", 4.0));
        assert_eq!(read(&mut t), ["c", "d"]);
        // A new reader (a restarted server) reads what both files hold.
        assert_eq!(read(&mut Tail::new(&log)), ["a", "b", "c", "d"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_call_line_is_read_with_its_error_code() {
        let c = Call::parse(
            br#"{"plugin":"bridge","command":"ADD","network":"n","durationMs":12.5,"error":{"code":7,"msg":"x"}}"#,
        )
        .unwrap();
        assert_eq!(c.seconds, 0.0125);
        assert_eq!((c.error_code, c.network.as_deref()), (Some(7), Some("n")));
        assert!(Call::parse(b"{\"plugin\":1}").is_err());
        assert!(Call::parse(b"not json").is_err());
    }
}
