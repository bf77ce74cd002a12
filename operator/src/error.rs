//! The operator commands' errors. Each names what was being done and on
//! what (a file, the CRI socket, the listen address), so that the person
//! who reads it on a node knows where to look.

use std::io;
use std::path::PathBuf;

/// An error of `cni-rs inspect`, `gc`, `doctor` or `metrics`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command line the command cannot run (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// The runtime's CRI socket could not say which sandboxes live.
    #[error("CRI socket {}: {problem}", socket.display())]
    Cri {
        socket: PathBuf,
        problem: CriProblem,
    },
    /// A file of the node that could not be read or written.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file written atomically ([`libcni::files::write_atomic`]) that
    /// could not be, at `step` (the temp file `temp`).
    #[error("{}: {step:?} {temp}: {source}", path.display())]
    Write {
        path: PathBuf,
        step: libcni::files::WriteStep,
        temp: String,
        #[source]
        source: io::Error,
    },
    /// A file whose contents are not what the command writes there.
    #[error("{}: {problem}", path.display())]
    Malformed { path: PathBuf, problem: String },
    /// A call log line that is not a call's.
    #[error("not a call: {0}")]
    CallLine(String),
    /// Blocking or waiting for SIGTERM and SIGINT.
    #[error("{doing}: {source}")]
    Signals {
        doing: &'static str,
        #[source]
        source: nix::errno::Errno,
    },
    /// The metrics server's listening socket.
    #[error("--listen {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: io::Error,
    },
    /// A piece `gc --apply` does not remove by itself, and why.
    #[error("{0}")]
    LeftAlone(&'static str),
    /// flannel's subnet.env, read as the flannel plugin reads it.
    #[error(transparent)]
    SubnetEnv(#[from] flannel_meta::subnet_env::SubnetEnvError),
    /// What a plugin's own code answered when it read or changed its
    /// state (the result cache, a lease store, a config).
    #[error(transparent)]
    Cni(#[from] libcni::Error),
}

/// What went wrong in a CRI call.
#[derive(Debug, thiserror::Error)]
pub enum CriProblem {
    /// The socket could not be connected to, written or read.
    #[error("{doing}: {source}")]
    Io {
        doing: &'static str,
        #[source]
        source: io::Error,
    },
    /// An HTTP/2 frame larger than an answer may be.
    #[error("a frame of {0} bytes")]
    FrameTooLarge(usize),
    /// The answer grew past its limit.
    #[error("the answer is too large")]
    AnswerTooLarge,
    /// A frame too short for its padding or priority fields.
    #[error("a short frame")]
    ShortFrame,
    /// Padding longer than its frame.
    #[error("a bad padding")]
    BadPadding,
    /// GOAWAY: the runtime ended the connection.
    #[error("the runtime closed the connection (GOAWAY)")]
    GoAway,
    /// RST_STREAM on the call's stream.
    #[error("the runtime reset the call")]
    Reset,
    /// Trailers only: the call failed.
    #[error("the call failed (no message; is the socket a CRI runtime's?)")]
    NoMessage,
    /// A gRPC message with the compressed flag.
    #[error("a compressed answer")]
    Compressed,
    /// A message shorter than its length prefix.
    #[error("a truncated answer")]
    Truncated,
    /// A message that is not a `ListPodSandboxResponse`.
    #[error("the ListPodSandbox answer does not decode")]
    NotASandboxList,
}

/// The operator's results.
pub type Result<T> = std::result::Result<T, Error>;
