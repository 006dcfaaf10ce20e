//! Malware scanning against a real clamd with a generated signature database: the EICAR test
//! file and Forge's own marker are refused, a clean file is accepted and says it was scanned,
//! and a stopped clamd refuses every upload (fail closed) with nothing stored.

use std::sync::Arc;
use std::time::Duration;

use forge_files::{
    ClamdAddress, ClamdScanner, FileStore, Policy, Refusal, ScanOutcome, UploadError,
};
use forge_testkit::clamd::{Clamd, EICAR, MARKER};

use crate::world;

#[tokio::test]
async fn clamd_finds_eicar_and_a_generated_signature_and_a_stopped_clamd_fails_closed() {
    let mut clamd = Clamd::start();
    let scanner = Arc::new(ClamdScanner::new(
        ClamdAddress::Unix(clamd.socket()),
        Duration::from_secs(10),
    ));
    let w = world(Policy::default(), Some(scanner.clone()));
    // Readiness asks clamd too: it answers PING.
    assert_eq!(w.files.scanner_health().await, Some(Ok(())));
    assert_eq!(w.files.storage_health().await, Ok(()));

    let clean = w
        .put("notes.txt", None, b"Nothing to see here.\n")
        .await
        .unwrap();
    assert_eq!(
        clean.scan,
        ScanOutcome::Clean {
            scanner: "clamd".into()
        }
    );

    let eicar = w.put("eicar.txt", Some("text/plain"), EICAR).await;
    match eicar {
        Err(UploadError::Refused(Refusal::Infected(signature))) => {
            assert!(signature.starts_with("Forge.Test.EICAR"), "{signature}")
        }
        other => panic!("EICAR was not refused: {other:?}"),
    }
    // The marker deep inside a larger file, past the first read.
    let mut text = "All is well. ".repeat(20_000).into_bytes();
    text.extend_from_slice(MARKER);
    text.extend_from_slice(b" The end.\n");
    match w.put("report.txt", None, &text).await {
        Err(UploadError::Refused(Refusal::Infected(signature))) => {
            assert!(signature.starts_with("Forge.Test.Marker"), "{signature}")
        }
        other => panic!("the marker was not found: {other:?}"),
    }

    clamd.stop();
    assert!(
        matches!(w.files.scanner_health().await, Some(Err(_))),
        "a stopped clamd is not ready"
    );
    let unscanned = w
        .put("later.txt", None, b"Harmless, but unscanned.\n")
        .await;
    assert!(
        matches!(
            unscanned,
            Err(UploadError::Refused(Refusal::ScannerUnavailable))
        ),
        "{unscanned:?}"
    );
    let left = w.left_on_disk();
    assert_eq!(left.len(), 1, "only the clean file is stored: {left:?}");
    assert_eq!(w.store.list_files(&w.scope, 10).await.unwrap().len(), 1);
}
