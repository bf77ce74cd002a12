//! The plugin's side of the protocol: one connection to the daemon per
//! verb, and the errors a runtime sees when the daemon cannot be reached.

use std::io::ErrorKind;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use libcni::Error;

use crate::proto::{self, ReadError, Request, Response};

/// How the daemon can be started, for the messages of a plugin that
/// cannot reach it.
const HOW_TO_START: &str = "start the daemon with `dhcp daemon` (or `systemctl enable --now \
                            cni-dhcp.socket`), or point ipam.daemonSocketPath at the socket it \
                            listens on";

/// Why a call failed.
#[derive(Debug)]
pub enum Failure {
    /// No daemon listens at the path (nothing there, not a socket, nobody
    /// accepting, no permission).
    Unreachable(std::io::Error),
    /// A daemon answered, but not with a response of this protocol, or the
    /// connection broke in the middle.
    Broken(String),
}

impl Failure {
    /// The error of a verb that cannot do without the daemon (ADD, CHECK):
    /// code 11, try again later, naming the socket and how to start the
    /// daemon.
    pub fn into_error(self, socket: &Path) -> Error {
        match self {
            Failure::Unreachable(e) => Error::TryAgainLater(unreachable(socket, &e)),
            Failure::Broken(why) => broken(socket, &why),
        }
    }
}

/// The message for a daemon that cannot be reached at `socket`.
pub fn unreachable(socket: &Path, e: &std::io::Error) -> String {
    format!(
        "the dhcp daemon is not reachable at {} (ipam.daemonSocketPath): {e}; {HOW_TO_START}",
        socket.display()
    )
}

pub fn broken(socket: &Path, why: &str) -> Error {
    Error::Internal(format!(
        "the dhcp daemon at {} did not answer as this plugin's daemon: {why}",
        socket.display()
    ))
}

/// Sends `req` to the daemon at `socket` and reads its response, waiting
/// at most `timeout` for it. A response carrying an error is returned as
/// that error (its CNI code kept).
pub fn call(socket: &Path, req: &Request, timeout: Duration) -> Result<Response, Failure> {
    let mut stream = UnixStream::connect(socket).map_err(Failure::Unreachable)?;
    let broken = |e: std::io::Error| Failure::Broken(format!("the connection broke: {e}"));
    stream.set_read_timeout(Some(timeout)).map_err(broken)?;
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(broken)?;
    match proto::write_message(&mut stream, req) {
        Ok(()) => {}
        // A daemon refusing us (a peer it does not accept) closes at once;
        // its answer, if any, says why.
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
        Err(e) => return Err(broken(e)),
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let resp: Response = match proto::read_message(&mut stream) {
        Ok(r) => r,
        Err(ReadError::Io(e))
            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
        {
            return Err(Failure::Broken(format!(
                "no answer within {} s",
                timeout.as_secs()
            )))
        }
        Err(e) => return Err(Failure::Broken(e.to_string())),
    };
    if resp.version != proto::VERSION {
        return Err(Failure::Broken(format!(
            "it speaks protocol version {}, this plugin {}",
            resp.version,
            proto::VERSION
        )));
    }
    Ok(resp)
}

/// The error a response carries, if any.
pub fn response_error(resp: &Response) -> Option<Error> {
    resp.error.clone().map(Error::Plugin)
}
