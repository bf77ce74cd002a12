//! The firewalld backend: a container's addresses are bound to a zone
//! (`firewalldZone`, default `trusted`) as runtime sources, over D-Bus
//! (`org.fedoraproject.FirewallD1.zone`: `addSource`, `removeSource`,
//! `querySource`), as the Go plugin does; firewalld then lets their
//! traffic through with the zone's policy. Nothing is made permanent.
//!
//! [`is_running`] is how the default backend is chosen (as Go: firewalld
//! when it is on the system bus). Without a bus socket it answers from a
//! `stat`, with no connection attempt.

use std::net::IpAddr;

use crate::dbus::{self, CallError, Connection, Value};
use libcni::{Error, Result};

const FIREWALLD: &str = "org.fedoraproject.FirewallD1";
const FIREWALLD_PATH: &str = "/org/fedoraproject/FirewallD1";
const ZONE_IFACE: &str = "org.fedoraproject.FirewallD1.zone";

/// The zone when `firewalldZone` is absent or empty.
pub const DEFAULT_ZONE: &str = "trusted";
/// firewalld's longest zone name (its chains are `<zone>` + a suffix of
/// at most 11 characters, in 28).
const MAX_ZONE_LEN: usize = 17;

/// Checks a zone name given in config key `key` (code 7): 1 to 17
/// letters, digits, `_` or `-`, as firewalld names zones.
pub fn validate_zone(key: &str, zone: &str) -> Result<()> {
    let why = if zone.len() > MAX_ZONE_LEN {
        Some(format!("is longer than {MAX_ZONE_LEN} characters"))
    } else if !zone
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        Some("may only hold letters, digits, '_' and '-'".to_string())
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::config(
            key,
            format!("{zone:?} is not a firewalld zone name: it {why}"),
        )),
        None => Ok(()),
    }
}

/// Whether firewalld is on the system bus. `false` at the cost of a
/// `stat` when there is no bus socket.
pub fn is_running() -> bool {
    match dbus::system_bus_path() {
        Some(addr) => dbus::name_has_owner(&addr, FIREWALLD),
        None => false,
    }
}

/// Why firewalld cannot be used, for an explicit `backend: firewalld`:
/// `None` when it is running.
pub fn unavailable_reason() -> Option<String> {
    let Some(addr) = dbus::system_bus_path() else {
        return Some(
            "DBUS_SYSTEM_BUS_ADDRESS names no unix socket, so firewalld cannot be reached"
                .to_string(),
        );
    };
    if !addr.may_exist() {
        let shown = match &addr {
            dbus::BusAddress::Path(p) => p.display().to_string(),
            dbus::BusAddress::Abstract(_) => String::new(),
        };
        return Some(format!(
            "firewalld is not running on this node (no system bus at {shown})"
        ));
    }
    if dbus::name_has_owner(&addr, FIREWALLD) {
        None
    } else {
        Some(format!(
            "firewalld is not running on this node ({FIREWALLD} is not on the system bus)"
        ))
    }
}

/// `addr/32` or `addr/128`: the source as the Go plugin writes it.
pub fn source(addr: IpAddr) -> String {
    format!("{addr}/{}", if addr.is_ipv4() { 32 } else { 128 })
}

/// A connection to firewalld.
pub struct Firewalld {
    conn: Connection,
}

/// The firewalld error code at the start of an exception's message
/// (`ZONE_ALREADY_SET: ...`).
fn error_code(e: &CallError) -> Option<&str> {
    match e {
        CallError::Remote { message, .. } => message.split(':').next().map(str::trim),
        CallError::Io(_) => None,
    }
}

fn dbus_error(what: String, e: CallError) -> Error {
    Error::kernel(what, std::io::Error::other(e.to_string()))
}

impl Firewalld {
    /// Connects to the system bus.
    pub fn connect() -> Result<Firewalld> {
        let conn = Connection::system()
            .map_err(|e| Error::kernel("connect to the system bus for firewalld", e))?;
        Ok(Firewalld { conn })
    }

    fn zone_call(&mut self, member: &str, zone: &str, src: &str) -> Result<Vec<Value>, CallError> {
        self.conn
            .call(FIREWALLD, FIREWALLD_PATH, ZONE_IFACE, member, &[zone, src])
    }

    /// Binds `addr` to `zone` (already bound there is success).
    pub fn add_source(&mut self, zone: &str, addr: IpAddr) -> Result<()> {
        let src = source(addr);
        match self.zone_call("addSource", zone, &src) {
            Ok(_) => Ok(()),
            Err(e) if error_code(&e) == Some("ZONE_ALREADY_SET") => Ok(()),
            Err(e) if error_code(&e) == Some("INVALID_ZONE") => Err(Error::config(
                "firewalldZone",
                format!("firewalld has no zone {zone:?} ({e})"),
            )),
            Err(e) if error_code(&e) == Some("ZONE_CONFLICT") => Err(Error::Conflict(format!(
                "firewalld: {src} is bound to another zone than {zone:?} ({e})"
            ))),
            Err(e) => Err(dbus_error(
                format!("firewalld: add {src} to zone {zone}"),
                e,
            )),
        }
    }

    /// Unbinds `addr` from `zone` (not bound there, or bound to another
    /// zone by someone else, is success: nothing of ours is left).
    pub fn remove_source(&mut self, zone: &str, addr: IpAddr) -> Result<()> {
        let src = source(addr);
        match self.zone_call("removeSource", zone, &src) {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    error_code(&e),
                    Some("UNKNOWN_SOURCE" | "NOT_ENABLED" | "INVALID_ZONE" | "ZONE_CONFLICT")
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(dbus_error(
                format!("firewalld: remove {src} from zone {zone}"),
                e,
            )),
        }
    }

    /// Whether `addr` is bound to `zone`.
    pub fn query_source(&mut self, zone: &str, addr: IpAddr) -> Result<bool> {
        let src = source(addr);
        match self.zone_call("querySource", zone, &src) {
            Ok(v) => v.first().and_then(Value::as_bool).ok_or_else(|| {
                Error::kernel(
                    format!("firewalld: query {src} in zone {zone}"),
                    std::io::Error::other("the reply is not a boolean"),
                )
            }),
            Err(e) if error_code(&e) == Some("INVALID_ZONE") => Ok(false),
            Err(e) => Err(dbus_error(
                format!("firewalld: query {src} in zone {zone}"),
                e,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_firewalld_zone_names_and_sources() {
        for ok in ["trusted", "public", "my_zone-1", &"z".repeat(17)] {
            validate_zone("firewalldZone", ok).unwrap();
        }
        for bad in ["a b", "x/y", "ünï", &"z".repeat(18), "a;b"] {
            let e = validate_zone("firewalldZone", bad).unwrap_err();
            assert_eq!(e.code(), 7, "{bad}");
            assert!(e.to_string().contains("firewalldZone"), "{e}");
        }
        assert_eq!(source("10.88.0.2".parse().unwrap()), "10.88.0.2/32");
        assert_eq!(source("fd00::2".parse().unwrap()), "fd00::2/128");
        let e = CallError::Remote {
            name: "org.fedoraproject.FirewallD1.Exception".into(),
            message: "ZONE_ALREADY_SET: '10.0.0.2/32' already bound to 'trusted'".into(),
        };
        assert_eq!(error_code(&e), Some("ZONE_ALREADY_SET"));
    }
}
