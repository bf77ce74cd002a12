//! The pod sandboxes a CRI runtime (containerd, CRI-O) knows: one unary
//! gRPC call, `RuntimeService/ListPodSandbox`, over the runtime's Unix
//! socket. Written against the wire directly (HTTP/2 frames, a literal
//! HPACK header block, protobuf field 1 of each item) so that the operator
//! command, which lives in the multicall binary beside every plugin, needs
//! no async runtime: a plugin process must not pay for one.
//!
//! A sandbox's ID is the CNI container ID both runtimes give the plugins.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{CriProblem, Error, Result};

/// Where the runtimes listen by default, in the order tried.
pub const DEFAULT_SOCKETS: [&str; 2] =
    ["/run/containerd/containerd.sock", "/var/run/crio/crio.sock"];

const PATH: &str = "/runtime.v1.RuntimeService/ListPodSandbox";
/// What the runtime may send before we read it: no flow control to keep.
const WINDOW: u32 = 1 << 30;
/// Largest answer accepted (a node's sandboxes are a few hundred KB).
const MAX_ANSWER: usize = 64 << 20;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The first default socket that exists, if any.
pub fn default_socket() -> Option<PathBuf> {
    DEFAULT_SOCKETS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// The IDs of every sandbox the runtime at `socket` lists, ready or not.
pub fn sandbox_ids(socket: &Path, timeout: Duration) -> Result<BTreeSet<String>> {
    let ask = || -> std::result::Result<BTreeSet<String>, CriProblem> {
        let io = |doing| move |source| CriProblem::Io { doing, source };
        let mut s = UnixStream::connect(socket).map_err(io("connecting"))?;
        s.set_read_timeout(Some(timeout))
            .and_then(|()| s.set_write_timeout(Some(timeout)))
            .map_err(io("setting its timeouts"))?;
        s.write_all(&request()).map_err(io("sending the call"))?;
        let message = read_answer(&mut s)?;
        sandbox_ids_of(&message).ok_or(CriProblem::NotASandboxList)
    };
    ask().map_err(|problem| Error::Cri {
        socket: socket.to_path_buf(),
        problem,
    })
}

/// The client's whole side: preface, settings, a window, the call.
fn request() -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE (4), and the connection's window.
    let mut settings = vec![0, 4];
    settings.extend(WINDOW.to_be_bytes());
    frame(&mut out, SETTINGS, 0, 0, &settings);
    frame(
        &mut out,
        WINDOW_UPDATE,
        0,
        0,
        &(WINDOW - 65_535).to_be_bytes(),
    );
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http (static table)
    literal(&mut block, Some(4), ":path", PATH);
    literal(&mut block, Some(1), ":authority", "localhost");
    literal(&mut block, None, "content-type", "application/grpc");
    literal(&mut block, None, "te", "trailers");
    frame(&mut out, HEADERS, END_HEADERS, 1, &block);
    // The gRPC message: not compressed, empty (ListPodSandboxRequest{}).
    frame(&mut out, DATA, END_STREAM, 1, &[0, 0, 0, 0, 0]);
    out
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
}

/// An HPACK literal without indexing: a static-table name, or a new one;
/// strings not Huffman-coded (all shorter than 127 bytes).
fn literal(block: &mut Vec<u8>, name_index: Option<u8>, name: &str, value: &str) {
    match name_index {
        Some(i) => block.push(i),
        None => {
            block.push(0);
            block.push(name.len() as u8);
            block.extend(name.as_bytes());
        }
    }
    block.push(value.len() as u8);
    block.extend(value.as_bytes());
}

/// Reads frames until stream 1 ends; returns the gRPC message. Trailers
/// are not decoded (HPACK with Huffman): a failed call sends no message
/// (gRPC's "trailers only"), which is how it is told apart.
fn read_answer(s: &mut UnixStream) -> std::result::Result<Vec<u8>, CriProblem> {
    let reading = |source| CriProblem::Io {
        doing: "reading the answer",
        source,
    };
    let writing = |source| CriProblem::Io {
        doing: "writing",
        source,
    };
    let mut body = Vec::new();
    loop {
        let mut head = [0u8; 9];
        s.read_exact(&mut head).map_err(reading)?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if len > MAX_ANSWER {
            return Err(CriProblem::FrameTooLarge(len));
        }
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).map_err(reading)?;
        match kind {
            SETTINGS if flags & ACK == 0 => {
                let mut ack = Vec::new();
                frame(&mut ack, SETTINGS, ACK, 0, &[]);
                s.write_all(&ack).map_err(writing)?;
            }
            PING if flags & ACK == 0 => {
                let mut pong = Vec::new();
                frame(&mut pong, PING, ACK, 0, &payload);
                s.write_all(&pong).map_err(writing)?;
            }
            GOAWAY => return Err(CriProblem::GoAway),
            RST_STREAM if stream == 1 => return Err(CriProblem::Reset),
            DATA if stream == 1 => {
                body.extend(unpadded(&payload, flags, 0)?);
                if body.len() > MAX_ANSWER {
                    return Err(CriProblem::AnswerTooLarge);
                }
            }
            HEADERS if stream == 1 => {
                let skip = if flags & PRIORITY != 0 { 5 } else { 0 };
                unpadded(&payload, flags, skip)?;
            }
            _ => {}
        }
        if stream == 1 && flags & END_STREAM != 0 && (kind == DATA || kind == HEADERS) {
            break;
        }
    }
    // One length-prefixed message: flag byte (0: not compressed), length.
    if body.len() < 5 {
        return Err(CriProblem::NoMessage);
    }
    if body[0] != 0 {
        return Err(CriProblem::Compressed);
    }
    let n = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    body.get(5..5 + n)
        .map(<[u8]>::to_vec)
        .ok_or(CriProblem::Truncated)
}

fn unpadded(payload: &[u8], flags: u8, skip: usize) -> std::result::Result<&[u8], CriProblem> {
    if flags & PADDED == 0 {
        return payload.get(skip..).ok_or(CriProblem::ShortFrame);
    }
    let pad = *payload.first().ok_or(CriProblem::ShortFrame)? as usize;
    payload
        .get(1 + skip..payload.len().saturating_sub(pad))
        .ok_or(CriProblem::BadPadding)
}

/// `ListPodSandboxResponse.items[].id`: field 1 of each field-1 message.
fn sandbox_ids_of(message: &[u8]) -> Option<BTreeSet<String>> {
    let mut ids = BTreeSet::new();
    for (field, item) in fields(message)? {
        if field != 1 {
            continue;
        }
        let Some(item) = item else { continue };
        for (f, v) in fields(item)? {
            if let (1, Some(id)) = (f, v) {
                ids.insert(String::from_utf8(id.to_vec()).ok()?);
            }
        }
    }
    Some(ids)
}

/// A protobuf field: its number and, when length-delimited, its bytes.
type Field<'a> = (u64, Option<&'a [u8]>);

/// A protobuf message's fields. `None` when it does not parse.
fn fields(mut b: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let tag = varint(&mut b)?;
        let (field, wire) = (tag >> 3, tag & 7);
        match wire {
            0 => {
                varint(&mut b)?;
                out.push((field, None));
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                b = b.get(n..)?;
                out.push((field, None));
            }
            2 => {
                let n = usize::try_from(varint(&mut b)?).ok()?;
                out.push((field, Some(b.get(..n)?)));
                b = &b[n..];
            }
            _ => return None,
        }
    }
    Some(out)
}

fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str) -> Vec<u8> {
        // PodSandbox{id: 1, state: 3 (varint), created_at: 4 (varint)}.
        let mut m = vec![0x0a, id.len() as u8];
        m.extend(id.as_bytes());
        m.extend([0x18, 0x01, 0x20, 0x96, 0x01]);
        m
    }

    #[test]
    fn sandbox_ids_are_the_items_ids() {
        let mut msg = Vec::new();
        for id in ["abc", "def"] {
            let it = item(id);
            msg.push(0x0a);
            msg.push(it.len() as u8);
            msg.extend(it);
        }
        let ids = sandbox_ids_of(&msg).unwrap();
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), ["abc", "def"]);
        assert_eq!(sandbox_ids_of(&[]).unwrap().len(), 0);
        assert!(sandbox_ids_of(&[0x0a, 0x05, 0x01]).is_none());
    }

    #[test]
    fn the_request_is_one_call_on_stream_one() {
        let r = request();
        assert!(r.starts_with(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
        let path = PATH.as_bytes();
        assert!(r.windows(path.len()).any(|w| w == path));
        assert!(r.ends_with(&[0, 0, 5, DATA, END_STREAM, 0, 0, 0, 1, 0, 0, 0, 0, 0]));
    }
}
