//! The S3 adapter against a real S3-compatible server (moto): the blob scenarios every blob
//! store passes, keys under the configured prefix, and a bucket that does not exist reported as
//! an error, not as an absent file.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use forge_files::BlobStore;
use forge_files_s3::{S3BlobStore, S3Config};
use forge_testkit::s3::Moto;

fn config(moto: &Moto, bucket: &str, prefix: &str) -> S3Config {
    S3Config {
        bucket: bucket.into(),
        prefix: prefix.into(),
        region: "us-east-1".into(),
        endpoint: Some(moto.endpoint()),
        access_key_id: "forge-test".into(),
        secret_access_key: "forge-test-secret".into(),
    }
}

#[tokio::test]
async fn blobs_on_s3_pass_the_blob_scenarios_under_their_prefix() {
    let moto = Moto::start();
    let store = S3BlobStore::new(&config(&moto, moto.bucket(), "tenant-files")).unwrap();
    forge_testkit::files::blob_scenarios(Arc::new(store.clone())).await;

    let path = std::env::temp_dir().join(format!("s3-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, b"kept").unwrap();
    store.put("t61/file_kept", &path, 4).await.unwrap();
    assert_eq!(moto.keys(), vec!["tenant-files/t61/file_kept".to_owned()]);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn an_unreachable_server_is_a_retryable_error_not_an_absent_file() {
    let moto = Moto::start();
    let mut down = config(&moto, moto.bucket(), "");
    down.endpoint = Some("http://127.0.0.1:9".into());
    let store = S3BlobStore::new(&down).unwrap();
    let err = store.get("t61/file_x").await.err().expect("an error");
    assert_eq!(err.kind(), forge_core::ErrorKind::Retryable, "{err}");
}
