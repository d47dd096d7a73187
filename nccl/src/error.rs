//! The crate's one error type: an NCCL result code with a message, which the C interface
//! returns as the code and keeps as the text of `ncclGetLastError`.

use crate::abi::ncclResult_t;

/// An NCCL result code with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The code the C interface returns.
    pub code: ncclResult_t,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?})", self.message, self.code)
    }
}

impl std::error::Error for Error {}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// `ncclInvalidArgument`: a bad pointer, count, type, operation or rank.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self { code: ncclResult_t::ncclInvalidArgument, message: message.into() }
    }
    /// `ncclInvalidUsage`: a call this library refuses, or one that needs what is missing.
    pub fn invalid_usage(message: impl Into<String>) -> Self {
        Self { code: ncclResult_t::ncclInvalidUsage, message: message.into() }
    }
    /// `ncclInternalError`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self { code: ncclResult_t::ncclInternalError, message: message.into() }
    }
    /// `ncclRemoteError`: a peer was lost.
    pub fn remote(message: impl Into<String>) -> Self {
        Self { code: ncclResult_t::ncclRemoteError, message: message.into() }
    }
    /// `ncclUnhandledCudaError`: the driver call `what` failed.
    pub fn cuda(what: &str, e: cudarc::driver::DriverError) -> Self {
        Self { code: ncclResult_t::ncclUnhandledCudaError, message: format!("{what}: {e:?}") }
    }
    /// Adds what was being done to the message.
    pub fn context(mut self, what: &str) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl From<mscclpp_host::Error> for Error {
    fn from(e: mscclpp_host::Error) -> Self {
        use mscclpp_host::Error as H;
        let code = match &e {
            H::Driver { .. } | H::NoDevice(_) | H::NoDriver(_) => ncclResult_t::ncclUnhandledCudaError,
            H::InvalidArgument(_) => ncclResult_t::ncclInvalidArgument,
            H::Unsupported(_) | H::OffMachine { .. } => ncclResult_t::ncclInvalidUsage,
            H::PeerLost { .. } | H::Aborted => ncclResult_t::ncclRemoteError,
            H::Bootstrap { .. } | H::Timeout { .. } | H::Io { .. } => ncclResult_t::ncclSystemError,
            _ => ncclResult_t::ncclInternalError,
        };
        Self { code, message: e.to_string() }
    }
}
