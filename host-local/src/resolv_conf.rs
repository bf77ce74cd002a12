//! `ipam.resolvConf`: reads a resolv.conf into the result's DNS, as the
//! reference plugin does: `nameserver` (each one), `domain` (the last one
//! wins), `search` and `options` (all values, appended). Comments (`#`,
//! `;`), blank lines, lines with no value and other keywords are skipped.

use libcni::types::Dns;
use libcni::Error;
use std::path::Path;

/// Largest file we read: a resolv.conf is a few hundred bytes.
const MAX_LEN: u64 = 1 << 20;

/// Reads and parses `path` (symlinks followed: /etc/resolv.conf often is one).
pub fn read(path: &Path) -> Result<Dns, Error> {
    use std::io::Read;
    let ctx = || format!("reading ipam.resolvConf {}", path.display());
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_LEN).read_to_string(&mut text))
        .map_err(|e| Error::io(ctx(), e))?;
    Ok(parse(&text))
}

pub fn parse(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(key), Some(first)) = (fields.next(), fields.next()) else {
            continue;
        };
        match key {
            "nameserver" => dns.nameservers.push(first.to_string()),
            "domain" => dns.domain = first.to_string(),
            "search" => {
                dns.search.push(first.to_string());
                dns.search.extend(fields.map(str::to_string));
            }
            "options" => {
                dns.options.push(first.to_string());
                dns.options.extend(fields.map(str::to_string));
            }
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_keyword() {
        let dns = parse(
            "# generated\n\
             ; also a comment\n\
             nameserver 10.0.0.10\n\
             \tnameserver   2001:db8::53  ignored-extra\n\
             domain first.example\n\
             domain cluster.local\n\
             search a.example b.example\n\
             search c.example\n\
             options ndots:5 timeout:2\n\
             options rotate\n\
             nameserver\n\
             sortlist 10.0.0.0/8\n\
             \n",
        );
        assert_eq!(dns.nameservers, ["10.0.0.10", "2001:db8::53"]);
        assert_eq!(dns.domain, "cluster.local");
        assert_eq!(dns.search, ["a.example", "b.example", "c.example"]);
        assert_eq!(dns.options, ["ndots:5", "timeout:2", "rotate"]);
    }

    #[test]
    fn empty_file_gives_empty_dns() {
        assert!(parse("").is_empty());
        assert!(parse("# nothing\n\n").is_empty());
    }

    #[test]
    fn missing_file_is_an_io_error_naming_it() {
        let e = read(Path::new("/nonexistent/resolv.conf")).unwrap_err();
        assert_eq!(e.code(), 5);
        assert!(
            e.to_string()
                .contains("ipam.resolvConf /nonexistent/resolv.conf"),
            "{e}"
        );
    }
}
