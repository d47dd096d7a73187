//! The crate's one error type.

use cudarc::driver::DriverError;

use crate::frame::{FrameError, FrameFault};

/// Every error the host runtime reports. Each carries enough context to say what was being done.
///
/// New variants may be added: a `match` needs a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library could not be loaded (no GPU driver on this machine).
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
    /// The CUDA driver works and reports no devices.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// A CUDA driver call failed.
    #[error("{context}: {source}")]
    Driver {
        /// What was being done.
        context: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// An argument was rejected before anything was sent to the GPU.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The requested feature is not available on this device or system.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The host proxy failed while executing a request (it stops at the first failure).
    /// Displays as `proxy: {context}`, followed by `: {source}` when there is a source.
    #[error("proxy: {context}{}", source.as_ref().map(|s| format!(": {s}")).unwrap_or_default())]
    Proxy {
        /// What the proxy was doing, e.g. `GPU 0 FIFO position 3`.
        context: String,
        /// The error that stopped it, where there is one.
        #[source]
        source: Option<Box<Error>>,
    },
    /// NVLink multicast was refused by the guard ([`crate::nvls::multicast_allowed_by_env`])
    /// before any driver call: `variable` is the environment variable that decided.
    #[error("NVLink multicast refused: {reason}")]
    MulticastRefused {
        /// The variable that turned multicast off, or the opt-in variable when it was not set to 1.
        variable: &'static str,
        /// Why, with the variable's value.
        reason: String,
    },
    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A bootstrap step of this rank failed; `cause` says how. Displays as
    /// `rank 2: all_gather #3: timed out after 30 s waiting for rank 1`.
    #[error("rank {rank}: {step}: {cause}")]
    Bootstrap {
        /// This process's rank.
        rank: usize,
        /// The operation and its number on this rank, e.g. `all_gather #3` or `rendezvous`.
        step: String,
        /// What went wrong.
        #[source]
        cause: Box<Error>,
    },
    /// Nothing arrived (or no connection could be made) before the deadline.
    #[error("timed out after {} waiting for {waiting_for}", crate::error::fmt_duration(*after))]
    Timeout {
        /// How long was waited.
        after: std::time::Duration,
        /// Who or what was waited for, e.g. `rank 1`.
        waiting_for: String,
    },
    /// The program aborted this GPU's waits (`Communicator::abort`).
    #[error("aborted: the program called abort(); this GPU's waits give up instead of spinning")]
    Aborted,
    /// The connection to another rank closed or failed (the rank exited, died or was killed).
    #[error("connection to rank {peer} lost: {detail}")]
    PeerLost {
        /// The other rank.
        peer: usize,
        /// What the socket said.
        detail: String,
    },
    /// A frame was malformed, foreign or over the size limit; it was rejected before its payload
    /// was allocated.
    #[error("rejected frame: {0}")]
    Frame(FrameFault),
    /// The other side broke the bootstrap protocol (e.g. ranks called different collectives).
    #[error("protocol: {0}")]
    Protocol(String),
    /// The rank environment (`OMPI_COMM_WORLD_*`, `PMI_*`, `SLURM_*`, `MSCCLPP_RS_*`) is missing
    /// or inconsistent.
    #[error("rank environment: {0}")]
    RankEnv(String),
    /// A kernel launch whose arguments do not match the kernel's parameters in number or sizes,
    /// as the driver describes the kernel; refused before anything was launched (item 1 of the
    /// [launch contract](crate::launch#the-launch-contract)).
    #[error(
        "kernel `{kernel}` takes {} parameters of {expected:?} bytes; the launch passed {} of {given:?} bytes",
        expected.len(),
        given.len()
    )]
    KernelArguments {
        /// The kernel's name.
        kernel: String,
        /// The size in bytes of each of the kernel's parameters.
        expected: Vec<usize>,
        /// The size in bytes of each argument given.
        given: Vec<usize>,
    },
    /// Something that needs the peer's memory mapped into this process (memory channels, packets,
    /// switch channels, [`crate::comm::Communicator::exchange`]) was asked for toward a rank on
    /// another machine. Displays as `memory channels toward rank 2: rank 2 runs on another
    /// machine (node-b, this rank on node-a): ...`.
    #[error("{what} toward rank {peer}: {reason}")]
    OffMachine {
        /// The rank on another machine.
        peer: usize,
        /// What was asked for.
        what: String,
        /// Why it cannot be had, naming both machines.
        reason: String,
    },
    /// The built-in process launcher ([`crate::bootstrap::launcher`]) or one of the ranks it
    /// started failed. (Kernel launches fail with [`Error::Driver`], [`Error::InvalidArgument`]
    /// or [`Error::KernelArguments`].)
    #[error("launcher: {0}")]
    Launcher(String),
}

impl From<FrameError> for Error {
    /// The frame module's error as the crate's, with the same message.
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Rejected(fault) => Error::Frame(fault),
            FrameError::Io(source) => Error::Io { context: "reading a bootstrap frame".into(), source },
            e @ FrameError::TokenHex { .. } => Error::InvalidArgument(e.to_string()),
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds context to a driver result.
pub(crate) trait DriverContext<T> {
    /// Wraps the error with `what` (called lazily).
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> DriverContext<T> for std::result::Result<T, DriverError> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Driver { context: what(), source })
    }
}

/// Turns a raw `CUresult` into a `Result` with context.
pub(crate) fn check(res: cudarc::driver::sys::CUresult, what: impl FnOnce() -> String) -> Result<()> {
    res.result().ctx(what)
}

/// `30 s`, `2.5 s`, `250 ms`: durations in error messages.
pub(crate) fn fmt_duration(d: std::time::Duration) -> String {
    if d >= std::time::Duration::from_secs(1) {
        let s = d.as_secs_f64();
        if (s - s.round()).abs() < 0.05 { format!("{} s", s.round() as u64) } else { format!("{s:.1} s") }
    } else {
        format!("{} ms", d.as_millis())
    }
}

impl Error {
    /// A proxy failure without an underlying error.
    pub(crate) fn proxy(context: impl Into<String>) -> Self {
        Error::Proxy { context: context.into(), source: None }
    }

    /// A proxy failure caused by `source`.
    pub(crate) fn proxy_from(context: impl Into<String>, source: Error) -> Self {
        Error::Proxy { context: context.into(), source: Some(Box::new(source)) }
    }

    /// The innermost error under any [`Error::Bootstrap`] wrappers (the cause without the rank and
    /// step), for matching on what went wrong.
    pub fn root_cause(&self) -> &Error {
        let mut e = self;
        while let Error::Bootstrap { cause, .. } = e {
            e = cause;
        }
        e
    }

    /// Whether this error says that the machine has no GPU to use ([`Error::NoDriver`],
    /// [`Error::NoDevice`]) rather than that something failed. A test may skip on the first and
    /// must fail on anything else.
    pub fn is_no_gpu(&self) -> bool {
        matches!(self, Error::NoDriver(_) | Error::NoDevice(_))
    }

    /// Whether this is a driver error with the given code.
    pub fn is_driver(&self, code: cudarc::driver::sys::cudaError_enum) -> bool {
        matches!(self, Error::Driver { source, .. } if source.0 == code)
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use std::error::Error as _;

    #[test]
    fn proxy_errors_display_and_chain_their_source() {
        let plain = Error::proxy("proxy thread panicked");
        assert_eq!(plain.to_string(), "proxy: proxy thread panicked");
        assert!(plain.source().is_none());
        let e = Error::proxy_from("GPU 0 FIFO position 3", Error::InvalidArgument("boom".into()));
        assert_eq!(e.to_string(), "proxy: GPU 0 FIFO position 3: invalid argument: boom");
        assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("invalid argument: boom"));
    }

    #[test]
    fn frame_errors_convert_with_their_messages() {
        use crate::frame::{FrameError, FrameFault};
        let io = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let cases = [
            (
                FrameError::Rejected(FrameFault::WrongToken),
                "rejected frame: wrong session token (a process of another job?)",
            ),
            (FrameError::Io(io()), "reading a bootstrap frame: reset"),
            (
                FrameError::TokenHex { chars: 3 },
                "invalid argument: session token must be 32 hex digits, got 3 characters",
            ),
        ];
        for (fe, want) in cases {
            let frame_msg = fe.to_string();
            let e = Error::from(fe);
            assert_eq!(e.to_string(), want);
            // Rejections and I/O errors read the same before and after the conversion.
            if !matches!(e, Error::InvalidArgument(_)) {
                assert_eq!(frame_msg, want);
            }
        }
        assert!(matches!(
            Error::from(FrameError::Rejected(FrameFault::WrongToken)),
            Error::Frame(FrameFault::WrongToken)
        ));
        assert!(matches!(Error::from(FrameError::Io(io())), Error::Io { .. }));
    }

    #[test]
    fn multicast_refusal_and_launcher_display() {
        let e = Error::MulticastRefused {
            variable: "NCCL_NVLS_ENABLE",
            reason: "NCCL_NVLS_ENABLE=0 turns NVLS off".into(),
        };
        assert_eq!(e.to_string(), "NVLink multicast refused: NCCL_NVLS_ENABLE=0 turns NVLS off");
        assert_eq!(Error::Launcher("rank 1 failed".into()).to_string(), "launcher: rank 1 failed");
    }
}
