//! The error type of the domain and its ports, with an actionable [`ErrorKind`].

use std::fmt;

/// What a caller should do about an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The thing does not exist, or is not visible from this scope (the two are indistinguishable
    /// on purpose).
    NotFound,
    /// A concurrent writer won, or a lease was lost: reload and decide again, never retry blindly.
    Conflict,
    /// The request is malformed or not allowed in the current state: fix the request.
    Invalid,
    /// A transient failure: the same request may succeed later.
    Retryable,
    /// A permanent failure: give up and report it.
    Fatal,
    /// The operation was cancelled.
    Cancelled,
    /// The caller may not do this (a policy, or separation of duties, says no).
    Forbidden,
}

/// An error from the domain or from a port's adapter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The entity does not exist in this scope.
    #[error("{entity} {id} not found")]
    NotFound {
        /// What kind of entity, for example `"run"`.
        entity: &'static str,
        /// Its id.
        id: String,
    },
    /// An optimistic-concurrency check failed.
    #[error("{entity} {id} is at version {actual}, not the expected {expected}")]
    VersionConflict {
        /// What kind of entity.
        entity: &'static str,
        /// Its id.
        id: String,
        /// The version the writer expected.
        expected: u64,
        /// The version the store holds.
        actual: u64,
    },
    /// A commit or renewal carried a lease token that is no longer current.
    #[error("lease on {resource} is no longer held by this token")]
    Fenced {
        /// The leased resource, for example `run 0190…`.
        resource: String,
    },
    /// Another holder owns an unexpired lease.
    #[error("{resource} is leased by another holder until {until}")]
    LeaseHeld {
        /// The leased resource.
        resource: String,
        /// When the other holder's lease expires.
        until: crate::time::Timestamp,
    },
    /// The thread has an active run and the start strategy was `Reject`.
    #[error("thread {thread} is busy with run {active}")]
    ThreadBusy {
        /// The thread.
        thread: String,
        /// Its active run.
        active: String,
    },
    /// An approval or a question was already decided, under another idempotency key.
    #[error("interaction {id} was already resolved")]
    AlreadyResolved {
        /// The interaction.
        id: String,
    },
    /// An approval or a question was closed unresolved, before its deadline, because its run
    /// ended (cancelled, failed or completed); it can no longer be resolved.
    #[error("interaction {id} was closed unresolved when its run ended")]
    Closed {
        /// The interaction.
        id: String,
    },
    /// An approval or a question is past its deadline and can no longer be resolved.
    #[error("interaction {id} expired at {at}; the run went on without it")]
    Expired {
        /// The interaction.
        id: String,
        /// When it expired.
        at: crate::time::Timestamp,
    },
    /// A request key ([`crate::ports::keys`]) was claimed by another request: a run's
    /// idempotency key sent with another message, agent, thread or principal.
    #[error("this {kind} key was used for another request")]
    KeyReused {
        /// What the key names (`run`).
        kind: &'static str,
    },
    /// The tenant's usage quota for the current period would be exceeded.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// A run-state transition the state machine forbids.
    #[error(transparent)]
    Transition(#[from] crate::run::TransitionError),
    /// The request is malformed.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The caller may not do this; the reason is safe to show.
    #[error("not permitted: {0}")]
    Forbidden(String),
    /// The storage or queue backend failed.
    #[error("storage backend failed")]
    Backend {
        /// Whether the same call may succeed later.
        retryable: bool,
        /// The adapter's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The operation was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl Error {
    /// What the caller should do about this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::VersionConflict { .. }
            | Error::Fenced { .. }
            | Error::LeaseHeld { .. }
            | Error::ThreadBusy { .. }
            | Error::AlreadyResolved { .. }
            | Error::KeyReused { .. } => ErrorKind::Conflict,
            Error::Expired { .. } | Error::Closed { .. } | Error::QuotaExceeded(_) => {
                ErrorKind::Invalid
            }
            Error::Transition(_) | Error::Invalid(_) => ErrorKind::Invalid,
            Error::Backend {
                retryable: true, ..
            } => ErrorKind::Retryable,
            Error::Backend {
                retryable: false, ..
            } => ErrorKind::Fatal,
            Error::Cancelled => ErrorKind::Cancelled,
            Error::Forbidden(_) => ErrorKind::Forbidden,
        }
    }

    /// An [`Error::NotFound`] for `entity` with `id`.
    pub fn not_found(entity: &'static str, id: impl fmt::Display) -> Self {
        Error::NotFound {
            entity,
            id: id.to_string(),
        }
    }

    /// An [`Error::Invalid`] with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }

    /// An [`Error::Backend`] wrapping an adapter error.
    pub fn backend(
        retryable: bool,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Backend {
            retryable,
            source: Box::new(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_tell_the_caller_what_to_do() {
        let io = std::io::Error::other("disk on fire");
        let cases = [
            (
                Error::not_found("run", "r1"),
                ErrorKind::NotFound,
                "run r1 not found",
            ),
            (
                Error::VersionConflict {
                    entity: "run",
                    id: "r1".into(),
                    expected: 1,
                    actual: 2,
                },
                ErrorKind::Conflict,
                "run r1 is at version 2, not the expected 1",
            ),
            (
                Error::Fenced {
                    resource: "run r1".into(),
                },
                ErrorKind::Conflict,
                "lease on run r1 is no longer held by this token",
            ),
            (
                Error::invalid("bad"),
                ErrorKind::Invalid,
                "invalid input: bad",
            ),
            (
                Error::backend(true, io),
                ErrorKind::Retryable,
                "storage backend failed",
            ),
            (Error::Cancelled, ErrorKind::Cancelled, "cancelled"),
        ];
        for (err, kind, text) in cases {
            assert_eq!(err.kind(), kind, "{err}");
            assert_eq!(err.to_string(), text);
        }
    }
}
