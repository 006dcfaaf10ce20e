//! The engine's error type.

use forge_core::ErrorKind;

/// Why the engine could not do what was asked. Failures of the run itself (a provider error, a
/// limit) are not errors: they end the run as `failed` with a `run.failed` event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A store call failed; its kind says whether to retry.
    #[error(transparent)]
    Store(#[from] forge_core::Error),
    /// The run names an agent version that is not registered.
    #[error("agent {name} version {version} is not registered")]
    UnknownAgent {
        /// The agent's name.
        name: String,
        /// The missing version.
        version: String,
    },
    /// An agent definition is unusable.
    #[error("agent {name} is invalid: {reason}")]
    InvalidAgent {
        /// The agent's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A tool cannot be registered.
    #[error("tool {name} is invalid: {reason}")]
    InvalidTool {
        /// The tool's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A skill cannot be loaded.
    #[error("skill at {path} is invalid: {reason}")]
    InvalidSkill {
        /// Its directory or file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The engine was built without a required part.
    #[error("engine is missing its {0}")]
    Incomplete(&'static str),
    /// The run's execution panicked: a bug in Forge or in a tool it ran. The panic's message is
    /// withheld, since it may quote the text being processed; the process's panic hook records
    /// where it happened.
    #[error(
        "the run's execution panicked (a bug; its message is withheld as it may quote content)"
    )]
    Panicked,
}

impl EngineError {
    /// A classified code for telemetry, never the error's text.
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::Store(e) => forge_core::telemetry::error_code(e),
            EngineError::UnknownAgent { .. } => "unknown_agent",
            EngineError::InvalidAgent { .. }
            | EngineError::InvalidTool { .. }
            | EngineError::InvalidSkill { .. }
            | EngineError::Incomplete(_) => "invalid_configuration",
            EngineError::Panicked => "internal",
        }
    }

    /// What the caller should do about this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::Store(e) => e.kind(),
            EngineError::UnknownAgent { .. } => ErrorKind::NotFound,
            EngineError::InvalidAgent { .. }
            | EngineError::InvalidTool { .. }
            | EngineError::InvalidSkill { .. }
            | EngineError::Incomplete(_) => ErrorKind::Invalid,
            EngineError::Panicked => ErrorKind::Fatal,
        }
    }
}
