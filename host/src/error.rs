//! The crate's one error type.

use cudarc::driver::DriverError;

/// Every error the host runtime reports. Each carries enough context to say what was being done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CUDA driver library could not be loaded (no GPU driver on this machine).
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
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
    #[error("proxy: {0}")]
    Proxy(String),
    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
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

impl Error {
    /// Whether this is a driver error with the given code.
    pub fn is_driver(&self, code: cudarc::driver::sys::cudaError_enum) -> bool {
        matches!(self, Error::Driver { source, .. } if source.0 == code)
    }
}
