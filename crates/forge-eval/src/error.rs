//! The error of evaluation: a dataset that cannot be used, a store that failed, a case the
//! harness could not execute.

/// What a caller should do about an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Fix the dataset, the thresholds or the request.
    Invalid,
    /// The named scoring run or case does not exist.
    NotFound,
    /// A transient failure: the same request may succeed later (resume the scoring run).
    Retryable,
    /// A permanent failure: give up and report it.
    Fatal,
}

/// Why evaluation could not go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A dataset file could not be read.
    #[error("failed to read {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A dataset (or thresholds, or trend) file is not valid; the message names the file and,
    /// where there is one, the case.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The case could not be executed by the runner (not a quality failure: the harness could
    /// not produce the evidence to grade).
    #[error("case {case} could not run: {message}")]
    Runner {
        /// The case.
        case: String,
        /// What went wrong, without secrets.
        message: String,
        /// Whether trying again may help.
        retryable: bool,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] forge_core::Error),
}

impl Error {
    /// What the caller should do about this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Read { .. } | Error::Invalid { .. } => ErrorKind::Invalid,
            Error::Runner {
                retryable: true, ..
            } => ErrorKind::Retryable,
            Error::Runner { .. } => ErrorKind::Fatal,
            Error::Store(e) => match e.kind() {
                forge_core::ErrorKind::NotFound => ErrorKind::NotFound,
                forge_core::ErrorKind::Retryable => ErrorKind::Retryable,
                forge_core::ErrorKind::Invalid | forge_core::ErrorKind::Conflict => {
                    ErrorKind::Invalid
                }
                _ => ErrorKind::Fatal,
            },
        }
    }

    /// An [`Error::Invalid`] about `path`.
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }
}
