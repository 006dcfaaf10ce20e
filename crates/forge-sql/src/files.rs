//! The file store's rows on SQL, for both SQL stores: a record is stored whole as JSON beside
//! the columns queries filter on.

use forge_core::Error;
use forge_files::model::FileRecord;

use crate::rows::corrupt;

/// The record as stored.
pub fn encode(file: &FileRecord) -> Result<String, Error> {
    serde_json::to_string(file).map_err(|e| Error::invalid(format!("file record: {e}")))
}

/// A stored record.
pub fn decode(body: &str) -> Result<FileRecord, Error> {
    serde_json::from_str(body).map_err(|e| corrupt("file record", e))
}
