//! `forge-files` end to end on a memory store and a directory: every limit and mismatch, bad
//! input that leaves nothing behind, a real clamd finding EICAR and a signature of Forge's own
//! and failing closed when stopped, references (expiry, tampering, other tenants, deletion),
//! and deletion reaching the blob, the record, the references and the derived source.

#![allow(clippy::unwrap_used)]

mod runs;
mod scan;
mod upload;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use forge_core::id::UuidV7Generator;
use forge_core::ports::policy::AllowAll;
use forge_core::scope::Scope;
use forge_core::time::ManualClock;
use forge_files::{
    BodyError, FileRecord, Files, FilesParts, FsBlobStore, Policy, RefKeys, Scanner, Upload,
    UploadError,
};
use forge_store_memory::MemoryStore;

/// A deployment: a memory store, blobs and staging in a fresh directory, a retriever.
pub(crate) struct World {
    pub files: Files,
    pub store: Arc<MemoryStore>,
    pub clock: Arc<ManualClock>,
    pub dir: PathBuf,
    pub scope: Scope,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) fn keys() -> RefKeys {
    RefKeys::new(vec![(
        "k1".into(),
        b"0123456789abcdef0123456789abcdef".to_vec(),
    )])
    .unwrap()
}

pub(crate) fn world(policy: Policy, scanner: Option<Arc<dyn Scanner>>) -> World {
    let dir = std::env::temp_dir().join(format!("forge-files-{}", uuid::Uuid::new_v4().simple()));
    let clock = Arc::new(ManualClock::at_2026());
    let store = Arc::new(MemoryStore::new(clock.clone(), Arc::new(UuidV7Generator)));
    let files = Files::new(FilesParts {
        store: store.clone(),
        blobs: Arc::new(FsBlobStore::new(dir.join("blobs")).unwrap()),
        scanner,
        retriever: Some(forge_rag::Retriever::new(store.clone(), Arc::new(AllowAll))),
        audit: Some(store.clone()),
        policy,
        staging: dir.join("staging"),
        keys: keys(),
        clock: clock.clone(),
        ids: Arc::new(UuidV7Generator),
    })
    .unwrap();
    World {
        files,
        store,
        clock,
        dir,
        scope: forge_testkit::fixtures::scope("acme"),
    }
}

/// `bytes` as a body in pieces of `piece` bytes.
pub(crate) fn body(
    bytes: &[u8],
    piece: usize,
) -> impl futures_core::Stream<Item = Result<Bytes, BodyError>> + Send + Unpin + use<> {
    let chunks: Vec<Result<Bytes, BodyError>> = bytes
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures_util::stream::iter(chunks)
}

impl World {
    pub(crate) async fn put(
        &self,
        name: &str,
        declared: Option<&str>,
        bytes: &[u8],
    ) -> Result<FileRecord, UploadError> {
        self.files
            .upload(
                &self.scope,
                Upload {
                    name: name.into(),
                    declared_type: declared.map(String::from),
                    index_label: None,
                    label: None,
                },
                body(bytes, 1000),
            )
            .await
    }

    /// Files under the blob and staging directories: what an upload left behind.
    pub(crate) fn left_on_disk(&self) -> Vec<String> {
        fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p.display().to_string());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.dir, &mut out);
        out
    }

    pub(crate) fn later(&self, secs: u64) {
        self.clock.advance(Duration::from_secs(secs));
    }
}

#[tokio::test]
async fn blobs_on_a_directory_pass_the_blob_scenarios() {
    let dir =
        std::env::temp_dir().join(format!("forge-fs-blobs-{}", uuid::Uuid::new_v4().simple()));
    forge_testkit::files::blob_scenarios(Arc::new(FsBlobStore::new(&dir).unwrap())).await;
    let _ = std::fs::remove_dir_all(&dir);
}
