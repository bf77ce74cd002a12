//! Ethernet (MAC) addresses: parsing as Go's `net.ParseMAC` reads them,
//! the `aa:bb:cc:dd:ee:ff` form results, backups and messages use, and the
//! choice of a container's MAC among the places a config can give one
//! (`mac`, `CNI_ARGS` `MAC`, `runtimeConfig.mac`, `args.cni.mac`), in the
//! order of precedence each plugin's reference reads them.

use crate::{Error, Result};

/// Parses a 6-byte MAC address as Go's `net.ParseMAC` writes it:
/// `aa:bb:cc:dd:ee:ff`, `aa-bb-cc-dd-ee-ff` or `aabb.ccdd.eeff` (hex digits
/// in either case). Unicast or not is for the caller to decide.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    <[u8; 6]>::try_from(parse_hardware_addr(s)?.as_slice()).ok()
}

/// Parses a hardware address exactly as Go's `net.ParseMAC` does: 6
/// (Ethernet), 8 (EUI-64) or 20 (IP over InfiniBand) bytes, as groups of
/// two hex digits separated by `:` or by `-` (one separator throughout),
/// or groups of four separated by `.`.
pub fn parse_hardware_addr(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let hex2 = |p: &[u8]| -> Option<u8> {
        let d = |c: u8| (c as char).to_digit(16);
        Some((d(p[0])? * 16 + d(p[1])?) as u8)
    };
    let sized = |n: usize| matches!(n, 6 | 8 | 20);
    if b.len() < 14 {
        return None;
    }
    if b[2] == b':' || b[2] == b'-' {
        let sep = b[2];
        if !(b.len() + 1).is_multiple_of(3) || !sized((b.len() + 1) / 3) {
            return None;
        }
        b.chunks(3)
            .map(|g| match g {
                [x, y] | [x, y, _] if g.len() == 2 || g[2] == sep => hex2(&[*x, *y]),
                _ => None,
            })
            .collect()
    } else if b[4] == b'.' {
        if !(b.len() + 1).is_multiple_of(5) || !sized(2 * (b.len() + 1) / 5) {
            return None;
        }
        let mut out = Vec::with_capacity(2 * (b.len() + 1) / 5);
        for g in b.chunks(5) {
            if g.len() == 5 && g[4] != b'.' {
                return None;
            }
            out.push(hex2(&g[0..2])?);
            out.push(hex2(&g[2..4])?);
        }
        Some(out)
    } else {
        None
    }
}

/// A hardware address of any length as Go's `HardwareAddr.String()`
/// prints it: lower-case hex pairs joined by `:`.
pub fn format_hardware_addr(addr: &[u8]) -> String {
    addr.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A unicast, non-zero Ethernet address, as a container's MAC must be; the
/// error says why not, quoting `s`.
pub fn parse_unicast(s: &str) -> Result<[u8; 6], String> {
    let mac = parse_mac(s)
        .ok_or_else(|| format!("{s:?} is not a MAC address (want aa:bb:cc:dd:ee:ff)"))?;
    if mac[0] & 1 != 0 {
        return Err(format!("{s:?} is a multicast address, not a unicast one"));
    }
    if mac == [0; 6] {
        return Err(format!("{s:?} is the zero address"));
    }
    Ok(mac)
}

/// Where a container's MAC came from, to name it in an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacSource {
    /// The config's own `mac` key.
    Config,
    /// `CNI_ARGS` `MAC=`.
    CniArgs,
    /// `runtimeConfig.mac` (capability `mac`).
    RuntimeConfig,
    /// `args.cni.mac`.
    ArgsCni,
}

impl MacSource {
    /// `why` as the error of this source: code 7 naming the key, or code 4
    /// for `CNI_ARGS`.
    pub fn error(self, why: String) -> Error {
        match self {
            MacSource::Config => Error::config("mac", why),
            MacSource::CniArgs => Error::InvalidEnv(format!("CNI_ARGS MAC: {why}")),
            MacSource::RuntimeConfig => Error::config("runtimeConfig.mac", why),
            MacSource::ArgsCni => Error::config("args.cni.mac", why),
        }
    }
}

/// The container's MAC from `candidates`, given lowest precedence first:
/// the last one with a non-empty value wins and is parsed as a unicast
/// address (the others are not looked at); an invalid one is an error
/// naming its source. `None` when no candidate gives a value.
pub fn choose<'a>(
    candidates: impl IntoIterator<Item = (MacSource, Option<&'a str>)>,
) -> Result<Option<[u8; 6]>> {
    let winner = candidates
        .into_iter()
        .filter_map(|(source, value)| Some((source, value.filter(|v| !v.is_empty())?)))
        .last();
    match winner {
        None => Ok(None),
        Some((source, value)) => parse_unicast(value)
            .map(Some)
            .map_err(|why| source.error(why)),
    }
}

/// A key holding a `mac`: `runtimeConfig` (capability `mac`) and
/// `args.cni`, as the main plugins decode them.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct MacKey {
    #[serde(default)]
    pub mac: Option<String>,
}

/// `args`: `args.cni.mac`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct MacArgs {
    #[serde(default)]
    pub cni: MacKey,
}

/// `CNI_ARGS` of a plugin that reads only `MAC=`: another key is an
/// error (code 4) unless `IgnoreUnknown` is set; the value when not empty.
pub fn from_cni_args(cni_args: &crate::args::CniArgs) -> Result<Option<String>> {
    cni_args.check_known(&["MAC"])?;
    Ok(cni_args
        .get("MAC")
        .filter(|m| !m.is_empty())
        .map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parse_accepts_go_forms() {
        let want = [0x0a, 0x58, 0xff, 0x01, 0x02, 0xab];
        assert_eq!(parse_mac("0a:58:ff:01:02:ab"), Some(want));
        assert_eq!(parse_mac("0A-58-FF-01-02-AB"), Some(want));
        assert_eq!(parse_mac("0a58.ff01.02ab"), Some(want));
        for bad in [
            "",
            "0a:58:ff:01:02",
            "0a:58:ff:01:02:ab:cd",
            "0a:58:ff:01:02:g1",
            "0a:58:ff:01:2:ab",
            "0a:58-ff:01:02:ab",
            "0a58ff0102ab",
            "0a58.ff01.02a",
            "+a:58:ff:01:02:ab",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad:?}");
        }
        assert_eq!(format_mac(&want), "0a:58:ff:01:02:ab");
        assert_eq!(
            format_mac(&[0x0a, 0, 0xff, 1, 2, 0x3c]),
            "0a:00:ff:01:02:3c"
        );
    }

    #[test]
    fn hardware_addresses_of_every_length_go_parses() {
        let ib = "00:00:00:48:fe:80:00:00:00:00:00:00:02:c9:03:00:00:0f:01:02";
        let v = parse_hardware_addr(ib).unwrap();
        assert_eq!(v.len(), 20);
        assert_eq!(format_hardware_addr(&v), ib);
        assert_eq!(
            parse_hardware_addr("02-00-5E-10-00-00-00-01"),
            Some(vec![2, 0, 0x5e, 0x10, 0, 0, 0, 1])
        );
        assert_eq!(
            parse_hardware_addr("0200.5e10.0000.0001"),
            Some(vec![2, 0, 0x5e, 0x10, 0, 0, 0, 1])
        );
        for bad in [
            "0a:58:ff:01:02:ab:cd",
            "0a:58:ff:01:02:ab:cd:ef:01",
            "0a:58:ff:01:02:ab:",
            "0a:58:ff:01:02:ab:cd:e",
            "0a:58:ff:01:02:ab-cd:ef",
            "0a58.ff01.02ab.cd",
            "0a58.ff01.02ab:cdef",
            "0a58.ff01.0-ab",
            "0a:58:ff:01:02:a ",
        ] {
            assert_eq!(parse_hardware_addr(bad), None, "{bad:?}");
        }
        assert_eq!(format_hardware_addr(&[]), "");
    }

    #[test]
    fn mac_unicast_refuses_multicast_and_zero() {
        assert_eq!(
            parse_unicast("0a:58:0A:01:02:03"),
            Ok([0x0a, 0x58, 0x0a, 1, 2, 3])
        );
        assert_eq!(
            parse_unicast("zz"),
            Err("\"zz\" is not a MAC address (want aa:bb:cc:dd:ee:ff)".into())
        );
        assert_eq!(
            parse_unicast("01:00:5e:00:00:01"),
            Err("\"01:00:5e:00:00:01\" is a multicast address, not a unicast one".into())
        );
        assert_eq!(
            parse_unicast("00:00:00:00:00:00"),
            Err("\"00:00:00:00:00:00\" is the zero address".into())
        );
    }

    #[test]
    fn mac_choose_takes_the_last_given_and_names_its_source() {
        use MacSource::*;
        let got = choose([
            (Config, Some("0a:00:00:00:00:01")),
            (CniArgs, Some("")),
            (RuntimeConfig, Some("0a:00:00:00:00:03")),
            (ArgsCni, None),
        ]);
        assert_eq!(got.unwrap(), Some([0x0a, 0, 0, 0, 0, 3]));
        assert_eq!(choose([(Config, None), (CniArgs, Some(""))]).unwrap(), None);
        // Only the winner is parsed.
        let got = choose([(Config, Some("bad")), (CniArgs, Some("0a:00:00:00:00:02"))]);
        assert_eq!(got.unwrap(), Some([0x0a, 0, 0, 0, 0, 2]));
        for (source, code, prefix) in [
            (Config, 7, "invalid network config: mac: \"bad\""),
            (CniArgs, 4, "CNI_ARGS MAC: \"bad\""),
            (
                RuntimeConfig,
                7,
                "invalid network config: runtimeConfig.mac: \"bad\"",
            ),
            (ArgsCni, 7, "invalid network config: args.cni.mac: \"bad\""),
        ] {
            let e = choose([(source, Some("bad"))]).unwrap_err();
            assert_eq!(e.code(), code);
            assert!(e.to_string().starts_with(prefix), "{e}");
        }
    }
}
