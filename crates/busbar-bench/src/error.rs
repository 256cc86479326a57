//! The kit's one error type and its exit codes.

use std::process::ExitCode;

/// Why a bench command did not complete.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad options or input (exit code 2).
    #[error("usage error: {0}")]
    Usage(String),
    /// The target cannot be reached before the run starts (exit code 1).
    #[error("{0}")]
    Unreachable(String),
    /// A file could not be read or written (exit code 1).
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Anything else that stops the command (exit code 1).
    #[error("{0}")]
    Failed(String),
}

impl BenchError {
    /// Wraps an I/O error with its context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> BenchError {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            BenchError::Usage(_) => ExitCode::from(2),
            _ => ExitCode::from(1),
        }
    }
}

/// Builds a current-thread runtime for a command's control loop.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, BenchError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BenchError::io("cannot start the async runtime", e))
}
