//! The citation port: whether a citation a model made points at text that exists and that the
//! caller may read.
//!
//! A citation is structure ([`CitationPart`]): a source, its version, a byte span and the excerpt
//! at that span. The engine asks this port before it commits one; a citation that fails any check
//! becomes an error the model reads, never a stored citation.

use async_trait::async_trait;

use crate::Error;
use crate::part::CitationPart;
use crate::scope::Scope;

/// Why a citation was refused, in words the model can act on (no other source's content).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CitationRefusal {
    /// No such source the caller may read (or it was deleted): the same answer for both.
    #[error("there is no source {0:?} you may read")]
    NoSource(String),
    /// The source has another version now.
    #[error("source {source_id:?} is at version {current}, not {cited}")]
    StaleVersion {
        /// The source.
        source_id: String,
        /// The cited version.
        cited: String,
        /// The current one.
        current: String,
    },
    /// The span is outside the text or not on character boundaries.
    #[error("the span {start}..{end} is not within the source's text")]
    BadSpan {
        /// First byte.
        start: u64,
        /// Last byte, exclusive.
        end: u64,
    },
    /// The excerpt is not the text at the span.
    #[error("the excerpt is not the source's text at {start}..{end}")]
    ExcerptMismatch {
        /// First byte.
        start: u64,
        /// Last byte, exclusive.
        end: u64,
    },
}

/// Port: checks citations against the sources the caller may read.
#[async_trait]
pub trait CitationCheck: Send + Sync {
    /// `Ok(Ok(()))` when `citation` resolves exactly for `scope`; `Ok(Err(_))` when it does not;
    /// `Err` when the check itself failed (a store error).
    async fn check(
        &self,
        scope: &Scope,
        citation: &CitationPart,
    ) -> Result<Result<(), CitationRefusal>, Error>;
}
