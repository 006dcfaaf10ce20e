//! The file conformance suites: `files` for [`FileStore`] adapters (records round-trip newest
//! first, stay in their tenant, and are audited when stored and deleted), and the blob-store
//! scenarios every [`BlobStore`] passes ([`blob_scenarios`], run by `forge-files` on a
//! directory and by `forge-files-s3` on a real S3-compatible server).

use std::sync::Arc;
use std::time::Duration;

use forge_core::ErrorKind;
use forge_core::ports::audit::{AuditLog, AuditQuery};
use forge_core::scope::Scope;
use forge_core::time::{Clock, ManualClock};
use forge_files::{BlobStore, FileId, FileRecord, FileStore, ScanOutcome};
use futures_util::StreamExt;

use crate::StoreFactory;
use crate::fixtures::scope;

/// A record of `scope`'s tenant named `name`, created now.
pub fn record(scope: &Scope, clock: &ManualClock, n: u128, name: &str) -> FileRecord {
    FileRecord {
        id: FileId::from_uuid(uuid::Uuid::from_u128(n)),
        tenant_id: scope.tenant_id().clone(),
        name: name.into(),
        declared_type: Some("text/plain".into()),
        media_type: "text/plain".into(),
        size_bytes: 12,
        version: format!("sha256:{n:064x}"),
        findings: vec![],
        scan: ScanOutcome::NotScanned,
        source_id: None,
        created_by: scope.principal_id().as_str().into(),
        // Round-trips through every store with the record.
        label: Some("team".into()),
        created_at: clock.now(),
    }
}

async fn audit_actions<S: AuditLog + ?Sized>(
    store: &S,
    scope: &Scope,
    prefix: &str,
) -> Vec<String> {
    store
        .query_audit(
            scope,
            &AuditQuery {
                action: Some(prefix.into()),
                ..AuditQuery::latest(100)
            },
        )
        .await
        .expect("audit")
        .into_iter()
        .map(|r| format!("{} {} {}", r.action, r.subject, r.actor))
        .collect()
}

/// Records come back as stored, newest first, within the limit; an id is stored once; each is
/// audited, without its name.
pub async fn file_records_round_trip_newest_first<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let a = scope("tenant-a");
    let mut stored = Vec::new();
    for (n, name) in [(1, "one.txt"), (2, "two.txt"), (3, "three.txt")] {
        let r = record(&a, &clock, n, name);
        store.put_file(&a, &r, "alice").await.expect("put");
        stored.push(r);
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(
        store.file(&a, &stored[1].id).await.expect("get"),
        Some(stored[1].clone())
    );
    let listed = store.list_files(&a, 2).await.expect("list");
    assert_eq!(listed, vec![stored[2].clone(), stored[1].clone()]);
    let again = store.put_file(&a, &stored[0], "alice").await;
    assert!(again.is_err(), "an id is stored once");
    assert_eq!(store.list_files(&a, 10).await.expect("list").len(), 3);
    let audited = audit_actions(store.as_ref(), &a, "file.").await;
    assert_eq!(audited.len(), 3, "{audited:?}");
    assert!(
        audited
            .iter()
            .all(|a| a.starts_with("file.accepted file file_") && a.ends_with(" alice"))
    );
    let detail = store
        .query_audit(
            &a,
            &AuditQuery {
                action: Some("file.accepted".into()),
                ..AuditQuery::latest(1)
            },
        )
        .await
        .expect("audit")[0]
        .detail
        .to_string();
    assert!(!detail.contains(".txt"), "no name in the trail: {detail}");
}

/// Another tenant can neither see, list nor delete a record, nor store one under another
/// tenant's id.
pub async fn file_records_are_confined_to_their_tenant<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let (a, b) = (scope("tenant-a"), scope("tenant-b"));
    let r = record(&a, &clock, 9, "secret.txt");
    store.put_file(&a, &r, "alice").await.expect("put");
    assert_eq!(store.file(&b, &r.id).await.expect("get"), None);
    assert!(store.list_files(&b, 10).await.expect("list").is_empty());
    assert_eq!(
        store
            .delete_file(&b, &r.id, "mallory")
            .await
            .expect("delete"),
        None
    );
    assert_eq!(store.file(&a, &r.id).await.expect("get"), Some(r.clone()));
    let forged = store.put_file(&b, &r, "mallory").await;
    assert_eq!(
        forged.map_err(|e| e.kind()),
        Err(ErrorKind::Invalid),
        "a record of tenant a stored as tenant b"
    );
    assert!(audit_actions(store.as_ref(), &b, "file.").await.is_empty());
}

/// Deleting a record returns it once, and audits it.
pub async fn deleting_a_file_record_is_audited<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let a = scope("tenant-a");
    let r = record(&a, &clock, 5, "gone.txt");
    store.put_file(&a, &r, "alice").await.expect("put");
    assert_eq!(
        store.delete_file(&a, &r.id, "bob").await.expect("delete"),
        Some(r.clone())
    );
    assert_eq!(
        store.delete_file(&a, &r.id, "bob").await.expect("again"),
        None
    );
    assert_eq!(store.file(&a, &r.id).await.expect("get"), None);
    assert_eq!(
        audit_actions(store.as_ref(), &a, "file.deleted").await,
        vec![format!("file.deleted file {} bob", r.id)]
    );
}

/// Every blob-store scenario, against `store` (empty, exclusive to the caller): bytes round-trip
/// in pieces, a key is written once, deletion is reported and final, keys that are not Forge's
/// are refused.
pub async fn blob_scenarios(store: Arc<dyn BlobStore>) {
    let dir = std::env::temp_dir().join(format!("forge-blob-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("upload");
    // Larger than one read, and not a multiple of any chunk size.
    let bytes: Vec<u8> = (0..200_003u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&path, &bytes).expect("write");
    let key = format!("t61/{}", FileId::from_uuid(uuid::Uuid::new_v4()));

    assert!(store.get(&key).await.expect("get absent").is_none());
    store
        .put(&key, &path, bytes.len() as u64)
        .await
        .expect("put");
    let mut read = Vec::new();
    let mut stream = store.get(&key).await.expect("get").expect("stored");
    while let Some(chunk) = stream.next().await {
        read.extend_from_slice(&chunk.expect("chunk"));
    }
    assert_eq!(read.len(), bytes.len());
    assert!(read == bytes, "the bytes round-trip");
    assert!(
        store.put(&key, &path, bytes.len() as u64).await.is_err(),
        "a key is written once"
    );
    assert!(store.delete(&key).await.expect("delete"));
    assert!(!store.delete(&key).await.expect("delete again"));
    assert!(store.get(&key).await.expect("get deleted").is_none());
    for bad in ["../escape", "t61/../../x", "/abs", "t61/a/b", ""] {
        assert!(store.put(bad, &path, 1).await.is_err(), "{bad:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
