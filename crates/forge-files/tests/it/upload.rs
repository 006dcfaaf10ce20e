//! Uploads: what is accepted and how it is recorded; every refusal, each leaving nothing but
//! its audit record; references; deletion reaching every copy.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use forge_core::ErrorKind;
use forge_core::ports::audit::{AuditLog, AuditQuery};
use forge_core::ports::files::FileContents;
use forge_core::scope::{Scope, TenantId};
use forge_core::time::Clock;
use forge_files::{
    Action, BodyError, FileStore, Finding, Policy, Refusal, Rejected, ScanOutcome, Upload,
    UploadError,
};
use futures_util::StreamExt;

use crate::{body, world};

const PNG: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0, 0, 1,
];

fn refused(outcome: Result<forge_files::FileRecord, UploadError>) -> Refusal {
    match outcome {
        Err(UploadError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// An Office document: a zip whose parts are named as Word names them, with macros or not.
fn docx(with_macros: bool) -> Vec<u8> {
    docx_with(with_macros.then_some(("word/vbaProject.bin", b"\xd0\xcf\x11\xe0 macro".as_slice())))
}

/// An Office document carrying a program among its parts: named as one, or only starting like
/// one (a Windows executable's `MZ`).
fn docx_with_program(name: &str) -> Vec<u8> {
    docx_with(Some((name, b"MZ\x90\x00\x03\x00\x00\x00".as_slice())))
}

/// An Office document with one more part, `extra`, when given.
fn docx_with(extra: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut out);
        let stored = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for name in ["[Content_Types].xml", "word/document.xml"] {
            z.start_file(name, stored).unwrap();
            z.write_all(b"<?xml version=\"1.0\"?><w:document/>")
                .unwrap();
        }
        if let Some((name, bytes)) = extra {
            z.start_file(name, stored).unwrap();
            z.write_all(bytes).unwrap();
        }
        z.finish().unwrap();
    }
    out.into_inner()
}

/// A PDF whose opening runs the action dictionary `action`.
fn pdf_with_action(action: &str) -> Vec<u8> {
    format!(
        "%PDF-1.7\n1 0 obj << /Type /Catalog /OpenAction 2 0 R >> endobj\n\
         2 0 obj << {action} >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
    )
    .into_bytes()
}

fn plain_zip() -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut out);
        let stored = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        z.start_file("notes.txt", stored).unwrap();
        z.write_all(b"hello").unwrap();
        z.finish().unwrap();
    }
    out.into_inner()
}

async fn refusal_codes(w: &crate::World) -> Vec<String> {
    w.store
        .query_audit(
            &w.scope,
            &AuditQuery {
                action: Some("file.refused".into()),
                ..AuditQuery::latest(100)
            },
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.detail["code"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn an_accepted_file_is_recorded_stored_and_readable() {
    let w = world(Policy::default(), None);
    let text = "Refunds are paid within ten days.\n";
    let f = w
        .put("policy.md", Some("text/markdown"), text.as_bytes())
        .await
        .unwrap();
    assert_eq!(f.name, "policy.md");
    assert_eq!(
        f.media_type, "text/markdown",
        "text the declaration names more precisely"
    );
    assert_eq!(f.size_bytes, text.len() as u64);
    assert!(
        f.version.starts_with("sha256:") && f.version.len() == 71,
        "{}",
        f.version
    );
    assert_eq!(f.scan, ScanOutcome::NotScanned);
    assert_eq!(f.created_by, "user-1");
    let (record, mut bytes) = w.files.open(&w.scope, &f.id).await.unwrap().unwrap();
    assert_eq!(record, f);
    let mut read = Vec::new();
    while let Some(c) = bytes.next().await {
        read.extend_from_slice(&c.unwrap());
    }
    assert_eq!(read, text.as_bytes());
    let png = w.put("pixel.png", Some("image/png"), PNG).await.unwrap();
    assert_eq!(png.media_type, "image/png");
    let doc = w.put("letter.docx", None, &docx(false)).await.unwrap();
    assert_eq!(
        doc.media_type,
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    );
    // The staging directory is empty again; three blobs remain.
    let left = w.left_on_disk();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left.iter().all(|p| p.contains("/blobs/")), "{left:?}");
}

#[tokio::test]
async fn every_refusal_is_clear_and_leaves_nothing() {
    let mut policy = Policy {
        max_bytes: 1_000,
        ..Policy::default()
    };
    policy
        .tenant_max_bytes
        .insert(TenantId::new("tiny").unwrap(), 10);
    let w = world(policy, None);
    let cases: Vec<(&str, Option<&str>, Vec<u8>, Refusal)> = vec![
        ("empty.txt", Some("text/plain"), vec![], Refusal::Empty),
        (
            "big.txt",
            Some("text/plain"),
            vec![b'a'; 1_001],
            Refusal::TooLarge { limit: 1_000 },
        ),
        (
            "image.txt",
            Some("text/plain"),
            PNG.to_vec(),
            Refusal::TypeMismatch {
                claimed: "text/plain".into(),
                detected: "image/png".into(),
            },
        ),
        (
            "notes.png",
            None,
            b"just words".to_vec(),
            Refusal::TypeMismatch {
                claimed: "image/png".into(),
                detected: "text/plain".into(),
            },
        ),
        (
            "report.pdf",
            Some("application/pdf"),
            b"not a pdf at all".to_vec(),
            Refusal::TypeMismatch {
                claimed: "application/pdf".into(),
                detected: "text/plain".into(),
            },
        ),
        (
            "page.html",
            Some("text/html"),
            b"<!doctype html><p>Hi</p><script>steal()</script>".to_vec(),
            Refusal::ActiveContent("script".into()),
        ),
        (
            "logo.svg",
            Some("image/svg+xml"),
            b"<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"steal()\"/>".to_vec(),
            Refusal::ActiveContent("event handler".into()),
        ),
        (
            "invoice.docx",
            None,
            docx(true),
            Refusal::ActiveContent("macros".into()),
        ),
        (
            "readme.md",
            Some("text/markdown"),
            b"# Hi\n\n<script>steal()</script>\n".to_vec(),
            Refusal::ActiveContent("script".into()),
        ),
        (
            "notes.md",
            None,
            b"# Hi\n\n<img src=x onerror=steal()>\n".to_vec(),
            Refusal::ActiveContent("event handler".into()),
        ),
        (
            "open.pdf",
            Some("application/pdf"),
            pdf_with_action("/S /JavaScript /JS (app.alert(1))"),
            Refusal::ActiveContent("PDF JavaScript".into()),
        ),
        (
            "escaped.pdf",
            None,
            // Every name hex-escaped: `/JavaScript` and `/JS` spelled so no byte run says so.
            pdf_with_action("/S /J#61v#61Script /J#53 (app.alert(1))"),
            Refusal::ActiveContent("PDF JavaScript".into()),
        ),
        (
            "carrier.docx",
            None,
            docx_with_program("word/embeddings/setup.exe"),
            Refusal::ActiveContent("an embedded executable".into()),
        ),
        (
            "disguised.docx",
            None,
            docx_with_program("word/media/image1.png"),
            Refusal::ActiveContent("an embedded executable".into()),
        ),
        ("bundle.zip", None, plain_zip(), Refusal::Archive),
        (
            "tool.bin",
            None,
            b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff".to_vec(),
            Refusal::TypeNotAllowed("application/vnd.microsoft.portable-executable".into()),
        ),
        (
            "../../etc/passwd",
            None,
            b"root:x:0:0".to_vec(),
            Refusal::BadName("../../etc/passwd".into()),
        ),
    ];
    let mut codes = Vec::new();
    for (name, declared, bytes, expected) in cases {
        let got = refused(w.put(name, declared, &bytes).await);
        assert_eq!(got, expected, "{name}");
        assert!(!got.to_string().is_empty());
        codes.push(got.code().to_owned());
        assert_eq!(
            w.left_on_disk(),
            Vec::<String>::new(),
            "{name} left something"
        );
    }
    assert!(w.store.list_files(&w.scope, 100).await.unwrap().is_empty());
    let mut audited = refusal_codes(&w).await;
    audited.reverse();
    assert_eq!(
        audited, codes,
        "each refusal audited by its code, newest first"
    );
    // Exactly the limit is accepted; a tenant with its own limit is held to it.
    w.put("full.txt", None, &[b'a'; 1_000]).await.unwrap();
    let tiny = forge_testkit::fixtures::scope("tiny");
    let over = w
        .files
        .upload(
            &tiny,
            Upload {
                name: "x.txt".into(),
                ..Upload::default()
            },
            body(b"eleven bytes", 3),
        )
        .await;
    assert_eq!(refused(over), Refusal::TooLarge { limit: 10 });
}

#[tokio::test]
async fn a_bad_name_is_refused_before_a_byte_is_read_and_a_stalled_body_is_refused() {
    let w = world(Policy::default(), None);
    let polled = Arc::new(AtomicBool::new(false));
    let seen = polled.clone();
    let watched = futures_util::stream::poll_fn(move |_| {
        seen.store(true, Ordering::SeqCst);
        std::task::Poll::Ready(Some(Ok::<Bytes, BodyError>(Bytes::from_static(b"x"))))
    });
    let got = w
        .files
        .upload(
            &w.scope,
            Upload {
                name: "a/b.txt".into(),
                ..Upload::default()
            },
            watched,
        )
        .await;
    assert!(matches!(refused(got), Refusal::BadName(_)));
    assert!(!polled.load(Ordering::SeqCst), "the body was never read");

    // What the server's timeouts turn a slow client into.
    let stalled = futures_util::stream::iter(vec![
        Ok(Bytes::from_static(b"part of a file")),
        Err(BodyError::TooSlow),
    ]);
    let got = w
        .files
        .upload(
            &w.scope,
            Upload {
                name: "slow.txt".into(),
                ..Upload::default()
            },
            stalled,
        )
        .await;
    assert_eq!(refused(got), Refusal::TooSlow);
    assert_eq!(w.left_on_disk(), Vec::<String>::new());
}

#[tokio::test]
async fn a_permissive_policy_flags_instead_of_refusing() {
    let w = world(
        Policy {
            on_mismatch: Action::Flag,
            on_archive: Action::Flag,
            on_active_content: Action::Flag,
            allowed: vec!["text/*".into(), "image/*".into(), "application/*".into()],
            ..Policy::default()
        },
        None,
    );
    let f = w.put("image.txt", Some("text/plain"), PNG).await.unwrap();
    assert_eq!(f.media_type, "image/png", "the bytes' type is kept");
    assert_eq!(
        f.findings,
        vec![Finding::TypeMismatch {
            claimed: "text/plain".into(),
            detected: "image/png".into()
        }]
    );
    let z = w.put("bundle.zip", None, &plain_zip()).await.unwrap();
    assert_eq!(z.findings, vec![Finding::Archive]);
    let h = w
        .put("page.html", None, b"<!doctype html><script>x</script>")
        .await
        .unwrap();
    assert_eq!(
        h.findings,
        vec![Finding::ActiveContent {
            what: "script".into()
        }]
    );
}

#[tokio::test]
async fn references_expire_refuse_tampering_other_tenants_and_deleted_files_alike() {
    let w = world(Policy::default(), None);
    let f = w.put("a.txt", None, b"tenant a's words").await.unwrap();
    let (reference, expires) = w
        .files
        .reference(&f, Some(std::time::Duration::from_secs(60)));
    assert_eq!(
        expires,
        w.clock.now().plus(std::time::Duration::from_secs(60))
    );
    let (record, _) = w.files.open_reference(&reference, &w.scope).await.unwrap();
    assert_eq!(record.id, f.id);
    // Any member of the tenant may use it (a capability of the tenant), and each use is audited.
    let bob = Scope::parse(w.scope.tenant_id().as_str(), "bob", &[]).unwrap();
    assert!(w.files.open_reference(&reference, &bob).await.is_ok());
    let downloads: Vec<String> = w
        .store
        .query_audit(
            &w.scope,
            &forge_core::ports::audit::AuditQuery {
                action: Some("file.downloaded".into()),
                ..forge_core::ports::audit::AuditQuery::latest(10)
            },
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.actor)
        .collect();
    assert_eq!(
        downloads,
        ["bob", w.scope.principal_id().as_str()],
        "newest first"
    );
    let other = Scope::parse("globex", "mallory", &[]).unwrap();
    assert_eq!(
        w.files.open_reference(&reference, &other).await.err(),
        Some(Rejected),
        "another tenant's caller"
    );
    let mut tampered = reference.clone().into_bytes();
    let last = tampered.len() - 2;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert_eq!(
        w.files.open_reference(&tampered, &w.scope).await.err(),
        Some(Rejected)
    );
    w.later(61);
    assert_eq!(
        w.files.open_reference(&reference, &w.scope).await.err(),
        Some(Rejected),
        "expired"
    );
    let (fresh, _) = w.files.reference(&f, None);
    assert!(w.files.open_reference(&fresh, &w.scope).await.is_ok());
    assert!(w.files.delete(&w.scope, &f.id, "alice").await.unwrap());
    assert_eq!(
        w.files.open_reference(&fresh, &w.scope).await.err(),
        Some(Rejected),
        "deleted"
    );
}

#[tokio::test]
async fn deletion_reaches_the_blob_the_record_the_references_and_the_derived_source() {
    let w = world(Policy::default(), None);
    let f = w
        .files
        .upload(
            &w.scope,
            Upload {
                name: "handbook.md".into(),
                declared_type: Some("text/markdown".into()),
                index_label: Some("internal".into()),
                label: None,
            },
            body(b"# Leave\n\nAnnual leave is twenty five days.\n", 7),
        )
        .await
        .unwrap();
    let source = f.source_id.clone().expect("indexed");
    assert_eq!(
        f.label.as_deref(),
        Some("internal"),
        "the index label by default"
    );
    let retriever = forge_rag::Retriever::new(
        w.store.clone(),
        Arc::new(forge_core::ports::policy::AllowAll),
    );
    let hits = retriever.search(&w.scope, "annual leave", 5).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].chunk.source_id.as_str(), source);
    let (reference, _) = w.files.reference(&f, None);
    assert_eq!(w.left_on_disk().len(), 1);

    assert!(w.files.delete(&w.scope, &f.id, "bob").await.unwrap());
    assert_eq!(w.left_on_disk(), Vec::<String>::new(), "the blob is gone");
    assert_eq!(w.store.file(&w.scope, &f.id).await.unwrap(), None);
    assert!(w.files.open(&w.scope, &f.id).await.unwrap().is_none());
    assert!(
        retriever
            .search(&w.scope, "annual leave", 5)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        forge_rag::SourceStore::source(
            w.store.as_ref(),
            &w.scope,
            &forge_rag::SourceId::new(source).unwrap()
        )
        .await
        .unwrap()
        .is_none()
    );
    assert!(w.files.open_reference(&reference, &w.scope).await.is_err());
    let trail: Vec<String> = w
        .store
        .query_audit(
            &w.scope,
            &AuditQuery {
                ..AuditQuery::latest(100)
            },
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| format!("{} {}", r.action, r.actor))
        .collect();
    for expected in [
        "file.accepted user-1",
        "source.deleted bob",
        "file.deleted bob",
    ] {
        assert!(
            trail.contains(&expected.to_owned()),
            "{expected}: {trail:?}"
        );
    }
    assert!(!w.files.delete(&w.scope, &f.id, "bob").await.unwrap());
    let gone = w.files.describe(&w.scope, f.id.as_str()).await;
    assert_eq!(gone.map_err(|e| e.kind()).err(), Some(ErrorKind::NotFound));
}

#[tokio::test]
async fn runs_see_a_file_as_the_store_describes_it_and_its_text_cut_safely() {
    let w = world(Policy::default(), None);
    let f = w
        .put("notes.txt", None, "Grüße aus Köln".as_bytes())
        .await
        .unwrap();
    let part = w.files.describe(&w.scope, f.id.as_str()).await.unwrap();
    assert_eq!(
        (
            part.name.as_str(),
            part.media_type.as_str(),
            part.size_bytes
        ),
        ("notes.txt", "text/plain", f.size_bytes)
    );
    assert_eq!(part.trust, forge_core::part::Trust::Untrusted);
    // Cut inside the `ü` (2 bytes from byte 2): the text ends before it.
    assert_eq!(
        w.files
            .text(&w.scope, f.id.as_str(), 3)
            .await
            .unwrap()
            .as_deref(),
        Some("Gr")
    );
    assert_eq!(
        w.files
            .text(&w.scope, f.id.as_str(), 1_000)
            .await
            .unwrap()
            .as_deref(),
        Some("Grüße aus Köln")
    );
    let png = w.put("p.png", None, PNG).await.unwrap();
    assert_eq!(
        w.files.text(&w.scope, png.id.as_str(), 100).await.unwrap(),
        None
    );
    let other = forge_testkit::fixtures::scope("globex");
    assert!(w.files.describe(&other, f.id.as_str()).await.is_err());
    assert!(
        w.files
            .describe(&w.scope, "../../etc/passwd")
            .await
            .is_err()
    );
}
