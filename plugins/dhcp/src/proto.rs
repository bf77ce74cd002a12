//! The protocol between the plugin and the daemon, over the daemon's unix
//! stream socket: one request, one response, each a JSON object on one
//! line; then the connection closes. Both carry `version`; a daemon that
//! gets a version it does not speak answers an error naming both.
//!
//! Requests: `{"version":1,"op":"add"|"del"|"check"|"gc"|"status", ...}`.
//! `add` carries the attachment (`key`), the namespace (path, device and
//! inode, so the daemon can tell the path still names the same
//! namespace), the options and the route priority; `del` and `check` the
//! key; `gc` the network and its valid attachments. Responses carry
//! `result` (an ADD's CNI result in the 1.1.0 shape), `lease` (CHECK) or
//! `error` (a spec error, with the CNI code the plugin exits with).

use std::io::{Read, Write};

use libcni::error::ErrorResult;
use libcni::types::Attachment;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::DhcpOptions;

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// Largest request or response accepted: a request is a few hundred bytes,
/// a GC's list of attachments a few per pod.
pub const MAX_MESSAGE: u64 = 4 << 20;

/// One attachment's lease: what identifies it everywhere (the client
/// identifier, the lease file, DEL and GC).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub network: String,
    pub ifname: String,
}

impl Key {
    /// Validates the parts as the spec (and skel) does: a lease file name
    /// and a client identifier are built from them.
    pub fn validate(&self) -> Result<(), libcni::Error> {
        libcni::types::config::validate_container_id(&self.container_id)?;
        libcni::types::config::validate_network_name(&self.network)?;
        libcni::types::config::validate_ifname(&self.ifname)
    }

    /// The DHCP client identifier (option 61): type 0 then
    /// `<container ID>/<network>/<ifname>`, cut to 255 bytes, as the
    /// reference's daemon builds it (so a server gives a pod the address
    /// it gave it under the reference).
    pub fn client_id(&self) -> Vec<u8> {
        let mut id = vec![0u8];
        let text = format!("{}/{}/{}", self.container_id, self.network, self.ifname);
        id.extend_from_slice(&text.as_bytes()[..text.len().min(254)]);
        id
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.container_id, self.network, self.ifname)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub version: u32,
    pub op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Key>,
    /// `add`: `CNI_NETNS`, absolute.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub netns: String,
    /// `add`: the device and inode of the namespace the plugin opened.
    #[serde(rename = "netnsDev", default)]
    pub netns_dev: u64,
    #[serde(rename = "netnsIno", default)]
    pub netns_ino: u64,
    #[serde(default)]
    pub options: DhcpOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// `gc`: the network whose leases are collected.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network: String,
    /// `gc`: its attachments still in use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub valid: Vec<Attachment>,
}

/// What CHECK learns of a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseView {
    /// `a.b.c.d/len`.
    pub address: String,
    /// `bound`, `renewing`, `rebinding`, `expired` (ran out or NAKed: the
    /// address was taken off) or `dropped` (its interface is gone).
    pub state: String,
    /// Unix time the lease runs out (0: never).
    #[serde(default)]
    pub expires: u64,
    /// Why a lease that is no longer live ended.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorResult>,
}

impl Response {
    pub fn ok() -> Response {
        Response {
            version: VERSION,
            ..Response::default()
        }
    }

    pub fn error(e: &libcni::Error) -> Response {
        Response {
            version: VERSION,
            error: Some(e.to_result("")),
            ..Response::default()
        }
    }
}

/// Writes `msg` as one JSON line.
pub fn write_message<T: Serialize>(w: &mut impl Write, msg: &T) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    w.write_all(&bytes)?;
    w.flush()
}

/// Why a message could not be read.
#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    /// The peer closed the connection before sending anything.
    Empty,
    /// Not one of our messages; the text says what it was.
    Garbled(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Empty => write!(f, "the connection closed without a message"),
            ReadError::Garbled(s) => write!(f, "{s}"),
        }
    }
}

/// Reads one message: up to the first newline or the end of the stream,
/// at most [`MAX_MESSAGE`] bytes, decoded with Go's JSON rules.
pub fn read_message<T: DeserializeOwned>(r: &mut impl Read) -> Result<T, ReadError> {
    let mut bytes = Vec::new();
    let mut limited = r.take(MAX_MESSAGE + 1);
    let mut buf = [0u8; 4096];
    loop {
        let n = match limited.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e)),
        };
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
        if buf[..n].contains(&b'\n') {
            break;
        }
    }
    if bytes.len() as u64 > MAX_MESSAGE {
        return Err(ReadError::Garbled(format!(
            "a message of more than {MAX_MESSAGE} bytes"
        )));
    }
    if let Some(end) = bytes.iter().position(|b| *b == b'\n') {
        bytes.truncate(end);
    }
    if bytes.is_empty() {
        return Err(ReadError::Empty);
    }
    if bytes.starts_with(b"HTTP/") || bytes.starts_with(b"CONNECT ") {
        let line = String::from_utf8_lossy(&bytes);
        return Err(ReadError::Garbled(format!(
            "HTTP ({:?}): the peer speaks net/rpc over HTTP, the protocol of the Go reference's \
             dhcp plugin and daemon, not this one's",
            line.lines().next().unwrap_or_default()
        )));
    }
    libcni::gojson::from_slice(&bytes)
        .map_err(|e| ReadError::Garbled(format!("not a message: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_id_is_the_references() {
        let k = Key {
            container_id: "abc".into(),
            network: "lan".into(),
            ifname: "net1".into(),
        };
        assert_eq!(k.client_id(), b"\0abc/lan/net1".to_vec());
        let long = Key {
            container_id: "c".repeat(300),
            ..k
        };
        assert_eq!(long.client_id().len(), 255);
    }

    #[test]
    fn messages_round_trip_and_garbage_is_named() {
        let req = Request {
            version: VERSION,
            op: "add".into(),
            key: Some(Key {
                container_id: "c".into(),
                network: "n".into(),
                ifname: "eth0".into(),
            }),
            netns: "/run/netns/x".into(),
            ..Request::default()
        };
        let mut buf = Vec::new();
        write_message(&mut buf, &req).unwrap();
        assert_eq!(buf.last(), Some(&b'\n'));
        let back: Request = read_message(&mut buf.as_slice()).unwrap();
        assert_eq!(back, req);
        let e =
            read_message::<Response>(&mut &b"HTTP/1.1 400 Bad Request\r\n\r\n"[..]).unwrap_err();
        assert!(e.to_string().contains("Go reference"), "{e}");
        assert!(matches!(
            read_message::<Response>(&mut &b""[..]),
            Err(ReadError::Empty)
        ));
        assert!(matches!(
            read_message::<Response>(&mut &b"{\"version\":\"x\"}\n"[..]),
            Err(ReadError::Garbled(_))
        ));
    }
}
