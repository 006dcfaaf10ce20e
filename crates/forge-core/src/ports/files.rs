//! The engine's view of stored files: what a file part of a run's input may name, and the text
//! a model is shown of it. Implemented by `forge-files`.
//!
//! A run's input names files by id; the engine replaces each file part with what the store
//! says of it (so a caller cannot claim another name, type or size) and refuses ids its tenant
//! does not have. The text of a file reaches the model only in the request of each step, never
//! in the run's history: deleting a file leaves no copy of it behind in the thread.

use async_trait::async_trait;

use crate::Error;
use crate::part::FilePart;
use crate::scope::Scope;

/// Port: files a run may be given.
#[async_trait]
pub trait FileContents: Send + Sync {
    /// The file part for `file_id` of the caller's tenant (marked untrusted), or
    /// [`Error::NotFound`].
    async fn describe(&self, scope: &Scope, file_id: &str) -> Result<FilePart, Error>;

    /// The file's text, at most `max_bytes` of it (cut at a character boundary), when it is
    /// text; `None` for other types; [`Error::NotFound`] once it is deleted.
    async fn text(
        &self,
        scope: &Scope,
        file_id: &str,
        max_bytes: usize,
    ) -> Result<Option<String>, Error>;
}
