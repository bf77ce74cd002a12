//! A minimal synchronous D-Bus client: enough of the wire protocol to call
//! a few methods on the system bus and read their answers (the firewall
//! plugin's firewalld backend needs five). It speaks the protocol itself
//! over the bus's unix socket: SASL `EXTERNAL` authentication, `Hello`,
//! then method calls whose arguments are strings, and replies whose body
//! holds basic values and arrays of them. No signals are subscribed, no
//! objects exported, no file descriptors passed.
//!
//! Why by hand: a plugin is a single-shot process on the pod start path.
//! `zbus` (even its blocking API) brings an async executor and a large
//! build; the `dbus` crate binds libdbus, a shared library every start of
//! the plugin would load (and a C build dependency). A method call is a
//! few hundred bytes of a well-specified little format.
//!
//! [`system_bus_path`] resolves where the system bus is without touching
//! it, so callers can tell "no bus on this node" for the price of one
//! `stat`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Where the system bus listens when `DBUS_SYSTEM_BUS_ADDRESS` is unset.
pub const DEFAULT_SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

/// How long one call waits for its reply.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest message accepted from the bus (the spec's limit is 128 MiB; our
/// replies are a few hundred bytes).
const MAX_MESSAGE: usize = 1 << 20;

const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;

const FIELD_PATH: u8 = 1;
const FIELD_INTERFACE: u8 = 2;
const FIELD_MEMBER: u8 = 3;
const FIELD_ERROR_NAME: u8 = 4;
const FIELD_REPLY_SERIAL: u8 = 5;
const FIELD_DESTINATION: u8 = 6;
const FIELD_SIGNATURE: u8 = 8;

/// Where the system bus is: a socket path, or an abstract socket name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusAddress {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

impl BusAddress {
    /// Whether something listens there as far as a `stat` can tell (an
    /// abstract socket cannot be seen without connecting: assumed yes).
    pub fn may_exist(&self) -> bool {
        match self {
            BusAddress::Path(p) => p.exists(),
            BusAddress::Abstract(_) => true,
        }
    }
}

/// The system bus's address: the first `unix:path=` or `unix:abstract=`
/// of `DBUS_SYSTEM_BUS_ADDRESS`, else [`DEFAULT_SYSTEM_BUS`]. `None` when
/// the variable names only transports this client does not speak.
pub fn system_bus_path() -> Option<BusAddress> {
    match std::env::var("DBUS_SYSTEM_BUS_ADDRESS") {
        Ok(v) if !v.is_empty() => parse_address(&v),
        _ => Some(BusAddress::Path(PathBuf::from(DEFAULT_SYSTEM_BUS))),
    }
}

/// Parses a D-Bus server address list (`unix:path=/x,guid=...;tcp:...`).
pub fn parse_address(list: &str) -> Option<BusAddress> {
    for addr in list.split(';') {
        let Some(params) = addr.strip_prefix("unix:") else {
            continue;
        };
        for kv in params.split(',') {
            if let Some(p) = kv.strip_prefix("path=") {
                return Some(BusAddress::Path(PathBuf::from(unescape(p)?)));
            }
            if let Some(a) = kv.strip_prefix("abstract=") {
                return Some(BusAddress::Abstract(unescape(a)?.into_bytes()));
            }
        }
    }
    None
}

/// Undoes the `%xx` escapes of an address value.
fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A value of a reply's body.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    Int32(i32),
    Uint32(u32),
    /// `s`, `o` and `g` alike.
    Str(String),
    Array(Vec<Value>),
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The strings of an `as`.
    pub fn as_strings(&self) -> Option<Vec<String>> {
        match self {
            Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => None,
        }
    }
}

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// The connection or the wire (message names the step).
    Io(io::Error),
    /// The peer answered with a D-Bus error.
    Remote { name: String, message: String },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Io(e) => write!(f, "{e}"),
            CallError::Remote { name, message } if message.is_empty() => write!(f, "{name}"),
            CallError::Remote { name, message } => write!(f, "{name}: {message}"),
        }
    }
}

impl From<io::Error> for CallError {
    fn from(e: io::Error) -> Self {
        CallError::Io(e)
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// One authenticated connection to a bus.
pub struct Connection {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    serial: u32,
}

impl Connection {
    /// Connects to `addr`, authenticates as the process's uid and says
    /// `Hello` (which the bus requires first).
    pub fn open(addr: &BusAddress) -> io::Result<Connection> {
        let sock = match addr {
            BusAddress::Path(p) => UnixStream::connect(p)?,
            BusAddress::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let a = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                UnixStream::connect_addr(&a)?
            }
        };
        sock.set_read_timeout(Some(CALL_TIMEOUT))?;
        sock.set_write_timeout(Some(CALL_TIMEOUT))?;
        let writer = sock.try_clone()?;
        let mut c = Connection {
            reader: BufReader::new(sock),
            writer,
            serial: 0,
        };
        c.authenticate()?;
        c.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "Hello",
            &[],
        )
        .map_err(|e| match e {
            CallError::Io(e) => e,
            other => io::Error::other(format!("Hello: {other}")),
        })?;
        Ok(c)
    }

    /// Connects to the system bus ([`system_bus_path`]).
    pub fn system() -> io::Result<Connection> {
        let addr = system_bus_path().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "DBUS_SYSTEM_BUS_ADDRESS names no unix socket",
            )
        })?;
        Connection::open(&addr)
    }

    /// SASL: a NUL byte, `AUTH EXTERNAL <uid in hex>`, `OK`, `BEGIN`.
    fn authenticate(&mut self) -> io::Result<()> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() }.to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        self.writer
            .write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        if !line.starts_with("OK ") {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("the bus refused authentication: {}", line.trim()),
            ));
        }
        self.writer.write_all(b"BEGIN\r\n")
    }

    /// Calls `interface.member` on `path` of `destination` with string
    /// arguments; returns the reply's body.
    pub fn call(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        args: &[&str],
    ) -> Result<Vec<Value>, CallError> {
        self.serial += 1;
        let serial = self.serial;
        let msg = encode_call(serial, destination, path, interface, member, args);
        self.writer.write_all(&msg)?;
        loop {
            let reply = self.read_message()?;
            if reply.reply_serial != Some(serial) {
                // A signal (NameAcquired) or something else: not ours.
                continue;
            }
            return match reply.kind {
                METHOD_RETURN => Ok(reply.body),
                ERROR => Err(CallError::Remote {
                    name: reply.error_name.unwrap_or_default(),
                    message: reply
                        .body
                        .first()
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                }),
                other => Err(bad(format!("unexpected message type {other} as a reply")).into()),
            };
        }
    }

    fn read_message(&mut self) -> io::Result<Message> {
        let mut fixed = [0u8; 16];
        self.reader.read_exact(&mut fixed)?;
        let little = match fixed[0] {
            b'l' => true,
            b'B' => false,
            other => return Err(bad(format!("bad endianness byte {other:#x}"))),
        };
        let u32_at = |b: &[u8]| {
            let a = [b[0], b[1], b[2], b[3]];
            if little {
                u32::from_le_bytes(a)
            } else {
                u32::from_be_bytes(a)
            }
        };
        let body_len = u32_at(&fixed[4..8]) as usize;
        let fields_len = u32_at(&fixed[12..16]) as usize;
        let header_end = align(16 + fields_len, 8);
        let total = header_end
            .checked_add(body_len)
            .filter(|t| *t <= MAX_MESSAGE)
            .ok_or_else(|| bad("message too large"))?;
        let mut buf = vec![0u8; total];
        buf[..16].copy_from_slice(&fixed);
        self.reader.read_exact(&mut buf[16..])?;
        parse_message(&buf, little, fields_len, header_end)
    }
}

/// A message read from the bus (what a reply needs).
#[derive(Debug)]
struct Message {
    kind: u8,
    reply_serial: Option<u32>,
    error_name: Option<String>,
    body: Vec<Value>,
}

fn align(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// A little-endian writer that keeps alignment relative to its start.
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn pad(&mut self, to: usize) {
        while !self.buf.len().is_multiple_of(to) {
            self.buf.push(0);
        }
    }
    fn u32(&mut self, v: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }
    fn sig(&mut self, s: &str) {
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }
    /// A header field `(y v)` holding a string-like value of type `ty`.
    fn field(&mut self, code: u8, ty: char, value: &str) {
        self.pad(8);
        self.buf.push(code);
        self.sig(&ty.to_string());
        if ty == 'g' {
            self.sig(value);
        } else {
            self.str(value);
        }
    }
}

fn encode_call(
    serial: u32,
    destination: &str,
    path: &str,
    interface: &str,
    member: &str,
    args: &[&str],
) -> Vec<u8> {
    let mut body = Writer { buf: Vec::new() };
    for a in args {
        body.str(a);
    }
    let mut h = Writer { buf: Vec::new() };
    h.buf.extend_from_slice(&[b'l', METHOD_CALL, 0, 1]);
    h.u32(body.buf.len() as u32);
    h.u32(serial);
    let mut fields = Writer {
        // Offsets inside the field array are relative to the message: the
        // array starts at 16, which is 8-aligned, so a fresh writer works.
        buf: Vec::new(),
    };
    fields.field(FIELD_PATH, 'o', path);
    fields.field(FIELD_DESTINATION, 's', destination);
    fields.field(FIELD_INTERFACE, 's', interface);
    fields.field(FIELD_MEMBER, 's', member);
    if !args.is_empty() {
        fields.field(FIELD_SIGNATURE, 'g', &"s".repeat(args.len()));
    }
    h.u32(fields.buf.len() as u32);
    h.buf.extend_from_slice(&fields.buf);
    h.pad(8);
    h.buf.extend_from_slice(&body.buf);
    h.buf
}

/// A reader of a message's values, aligned relative to `base`.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
    little: bool,
}

impl Reader<'_> {
    fn align(&mut self, to: usize) -> io::Result<()> {
        let rel = self.pos - self.base;
        self.pos = self.base + align(rel, to);
        if self.pos > self.buf.len() {
            return Err(bad("truncated message"));
        }
        Ok(())
    }
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| bad("truncated message"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        self.align(4)?;
        let b = self.take(4)?;
        let a = [b[0], b[1], b[2], b[3]];
        Ok(if self.little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        })
    }
    fn string(&mut self, len: usize) -> io::Result<String> {
        let s = self.take(len)?.to_vec();
        self.take(1)?; // NUL
        String::from_utf8(s).map_err(|_| bad("string is not UTF-8"))
    }
    fn sig(&mut self) -> io::Result<String> {
        let n = self.u8()? as usize;
        self.string(n)
    }
    /// One value of the single complete type at the start of `sig`;
    /// returns it and the rest of the signature.
    fn value<'s>(&mut self, sig: &'s str) -> io::Result<(Value, &'s str)> {
        let (ty, rest) = sig.split_at(1);
        let v = match ty {
            "y" => Value::Byte(self.u8()?),
            "b" => Value::Bool(self.u32()? != 0),
            "i" => Value::Int32(self.u32()? as i32),
            "u" => Value::Uint32(self.u32()?),
            "s" | "o" => {
                let n = self.u32()? as usize;
                Value::Str(self.string(n)?)
            }
            "g" => Value::Str(self.sig()?),
            "v" => {
                let inner = self.sig()?;
                let (v, left) = self.value(&inner)?;
                if !left.is_empty() {
                    return Err(bad("variant holds more than one type"));
                }
                v
            }
            "a" => {
                let elem = element_type(rest)?;
                let len = self.u32()? as usize;
                self.align(alignment(elem))?;
                let end = self.pos + len;
                if end > self.buf.len() {
                    return Err(bad("truncated array"));
                }
                let mut items = Vec::new();
                while self.pos < end {
                    let (v, _) = self.value(elem)?;
                    items.push(v);
                }
                return Ok((Value::Array(items), &rest[elem.len()..]));
            }
            other => return Err(bad(format!("unsupported D-Bus type {other:?}"))),
        };
        Ok((v, rest))
    }
}

/// The single complete type at the start of `sig` (arrays of basic types
/// and of arrays; no structs or dicts).
fn element_type(sig: &str) -> io::Result<&str> {
    match sig.bytes().position(|c| c != b'a') {
        Some(i) => Ok(&sig[..=i]),
        None => Err(bad("array without element type")),
    }
}

fn alignment(sig: &str) -> usize {
    match sig.as_bytes().first() {
        Some(b'y' | b'g' | b'v') => 1,
        Some(b'x' | b't' | b'd' | b'(' | b'{') => 8,
        _ => 4,
    }
}

fn parse_message(
    buf: &[u8],
    little: bool,
    fields_len: usize,
    body_at: usize,
) -> io::Result<Message> {
    let mut msg = Message {
        kind: buf[1],
        reply_serial: None,
        error_name: None,
        body: Vec::new(),
    };
    let mut r = Reader {
        buf: &buf[..16 + fields_len],
        pos: 16,
        base: 0,
        little,
    };
    let mut signature = String::new();
    while r.pos < 16 + fields_len {
        r.align(8)?;
        if r.pos >= 16 + fields_len {
            break;
        }
        let code = r.u8()?;
        let (v, _) = r.value("v")?;
        match (code, v) {
            (FIELD_REPLY_SERIAL, Value::Uint32(s)) => msg.reply_serial = Some(s),
            (FIELD_ERROR_NAME, Value::Str(s)) => msg.error_name = Some(s),
            (FIELD_SIGNATURE, Value::Str(s)) => signature = s,
            _ => {}
        }
    }
    let mut r = Reader {
        buf,
        pos: body_at,
        base: body_at,
        little,
    };
    let mut sig = signature.as_str();
    while !sig.is_empty() {
        let (v, rest) = r.value(sig)?;
        msg.body.push(v);
        sig = rest;
    }
    Ok(msg)
}

/// Whether `name` has an owner on the bus at `addr`, asked only when a
/// `stat` shows the bus socket exists: `false` without a connection
/// attempt when it does not.
pub fn name_has_owner(addr: &BusAddress, name: &str) -> bool {
    if !addr.may_exist() {
        return false;
    }
    let Ok(mut c) = Connection::open(addr) else {
        return false;
    };
    matches!(
        c.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "NameHasOwner",
            &[name],
        )
        .as_deref(),
        Ok([Value::Bool(true)])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dbus_addresses_are_parsed() {
        assert_eq!(
            parse_address("unix:path=/run/dbus/system_bus_socket"),
            Some(BusAddress::Path("/run/dbus/system_bus_socket".into()))
        );
        assert_eq!(
            parse_address("tcp:host=x;unix:guid=1,path=/tmp/a%20b"),
            Some(BusAddress::Path("/tmp/a b".into()))
        );
        assert_eq!(
            parse_address("unix:abstract=/tmp/dbus-x"),
            Some(BusAddress::Abstract(b"/tmp/dbus-x".to_vec()))
        );
        assert_eq!(parse_address("tcp:host=localhost,port=1"), None);
        assert_eq!(parse_address("unix:path=/x%zz"), None);
    }

    #[test]
    fn dbus_a_call_is_encoded_as_the_spec_says() {
        let m = encode_call(7, "d.e", "/p", "i.f", "m", &["ab"]);
        // Fixed header: little endian, method call, no flags, version 1,
        // body length 7 (u32 2, "ab", NUL), serial 7.
        assert_eq!(&m[..12], &[b'l', 1, 0, 1, 7, 0, 0, 0, 7, 0, 0, 0]);
        let fields_len = u32::from_le_bytes([m[12], m[13], m[14], m[15]]) as usize;
        let body_at = align(16 + fields_len, 8);
        assert_eq!(&m[body_at..], &[2, 0, 0, 0, b'a', b'b', 0]);
        // The first field: PATH, signature "o", "/p".
        assert_eq!(&m[16..28], &[1, 1, b'o', 0, 2, 0, 0, 0, b'/', b'p', 0, 0]);
        // Our own parser reads it back.
        let msg = parse_message(&m, true, fields_len, body_at).unwrap();
        assert_eq!(msg.kind, METHOD_CALL);
        assert_eq!(msg.body, vec![Value::Str("ab".into())]);
    }

    #[test]
    fn dbus_reply_bodies_are_decoded() {
        // A method return: REPLY_SERIAL 3, SIGNATURE "bas", body
        // true, ["x", "yz"].
        let mut f = Writer { buf: Vec::new() };
        f.pad(8);
        f.buf.push(FIELD_REPLY_SERIAL);
        f.sig("u");
        f.u32(3);
        f.pad(8);
        f.buf.push(FIELD_SIGNATURE);
        f.sig("g");
        f.sig("bas");
        let mut body = Writer { buf: Vec::new() };
        body.u32(1);
        let mut arr = Writer { buf: Vec::new() };
        arr.str("x");
        arr.pad(4);
        arr.str("yz");
        body.u32(arr.buf.len() as u32);
        body.buf.extend_from_slice(&arr.buf);
        let mut m = vec![b'l', METHOD_RETURN, 1, 1];
        m.extend_from_slice(&(body.buf.len() as u32).to_le_bytes());
        m.extend_from_slice(&9u32.to_le_bytes());
        m.extend_from_slice(&(f.buf.len() as u32).to_le_bytes());
        m.extend_from_slice(&f.buf);
        while m.len() % 8 != 0 {
            m.push(0);
        }
        let body_at = m.len();
        m.extend_from_slice(&body.buf);
        let msg = parse_message(&m, true, f.buf.len(), body_at).unwrap();
        assert_eq!(msg.reply_serial, Some(3));
        assert_eq!(
            msg.body,
            vec![
                Value::Bool(true),
                Value::Array(vec![Value::Str("x".into()), Value::Str("yz".into())])
            ]
        );
        assert_eq!(msg.body[1].as_strings().unwrap(), vec!["x", "yz"]);
        // Truncated input is an error, not a panic.
        assert!(parse_message(&m[..m.len() - 2], true, f.buf.len(), body_at).is_err());
    }

    #[test]
    fn dbus_a_missing_socket_is_no_owner_without_connecting() {
        let a = BusAddress::Path("/nonexistent/cni-rs/bus".into());
        assert!(!a.may_exist());
        assert!(!name_has_owner(&a, "org.fedoraproject.FirewallD1"));
    }
}
