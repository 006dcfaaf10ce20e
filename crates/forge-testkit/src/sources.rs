//! The sources conformance suite: versions replace their chunks atomically, candidates come only
//! from allowed sources, tenants see nothing of each other, deletion removes everything and is
//! audited, and retrieval is authorized before ranking.

use std::sync::Arc;

use forge_core::ports::audit::AuditLog;
use forge_core::ports::policy::{Authorizer, PolicyDecision, PolicyRequest, PolicyResource};
use forge_core::time::ManualClock;
use forge_rag::ingest::ingest;
use forge_rag::{Format, PutOutcome, Retriever, SOURCE_DELETED, SourceId, SourceStore};

use crate::StoreFactory;
use crate::fixtures::scope;

fn id(s: &str) -> SourceId {
    SourceId::new(s).expect("a valid id")
}

fn doc(name: &str, label: &str, text: &str) -> forge_rag::IngestedSource {
    ingest(
        id(name),
        name,
        label,
        Format::Text,
        serde_json::json!({"k": name}),
        text,
    )
}

fn words(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

async fn store<F: StoreFactory>() -> Arc<F::Store> {
    F::make(Arc::new(ManualClock::at_2026())).await
}

/// A source round-trips; the same text changes nothing; a new text replaces the version, and the
/// old version's text and chunks are gone with it.
pub async fn sources_round_trip_and_versions<F: StoreFactory>() {
    let s = store::<F>().await;
    let a = scope("tenant-a");
    let v1 = doc(
        "handbook/leave.md",
        "internal",
        "Annual leave is twenty days. Sick leave is paid.",
    );
    assert_eq!(
        s.put_source(&a, &v1).await.expect("put"),
        PutOutcome::Created
    );
    assert_eq!(
        s.put_source(&a, &v1).await.expect("put"),
        PutOutcome::Unchanged
    );
    let got = s.source(&a, &v1.id).await.expect("get").expect("stored");
    assert_eq!(
        (
            got.version.as_str(),
            got.title.as_str(),
            got.label.as_str(),
            got.format
        ),
        (
            v1.version.as_str(),
            "handbook/leave.md",
            "internal",
            Format::Text
        )
    );
    assert_eq!(got.metadata, serde_json::json!({"k": "handbook/leave.md"}));
    assert_eq!(got.text_bytes, v1.text.len() as u64);
    let text = s
        .source_text(&a, &v1.id, &v1.version)
        .await
        .expect("text")
        .expect("present");
    assert_eq!(text, v1.text);
    let chunks = s.source_chunks(&a, &v1.id).await.expect("chunks");
    assert_eq!(chunks, v1.chunks, "chunks round-trip with their offsets");
    for c in &chunks {
        assert_eq!(&text[c.start as usize..c.end as usize], c.text);
    }

    let v2 = doc(
        "handbook/leave.md",
        "internal",
        "Annual leave is thirty days.",
    );
    assert_eq!(
        s.put_source(&a, &v2).await.expect("put"),
        PutOutcome::Replaced
    );
    assert_eq!(
        s.source_text(&a, &v2.id, &v1.version).await.expect("text"),
        None,
        "the old version's text is gone"
    );
    let found = s
        .candidates(
            &a,
            std::slice::from_ref(&v2.id),
            &words(&["sick", "thirty"]),
            100,
        )
        .await
        .expect("candidates");
    assert_eq!(found.chunks.len(), 1);
    assert!(
        found.chunks[0].text.contains("thirty"),
        "only the new version's chunks are indexed"
    );
    assert_eq!(found.chunks[0].version, v2.version);
    let listed = s.list_sources(&a, 10).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].version, v2.version);
}

/// Candidates come only from the allowed sources, and the corpus counts only them.
pub async fn candidates_come_only_from_allowed_sources<F: StoreFactory>() {
    let s = store::<F>().await;
    let a = scope("tenant-a");
    let open = doc("open", "public", "The parrot is a colourful bird.");
    let secret = doc(
        "secret",
        "restricted",
        "The parrot code word is BLUE. Parrot parrot parrot.",
    );
    s.put_source(&a, &open).await.expect("put");
    s.put_source(&a, &secret).await.expect("put");
    let terms = words(&["parrot"]);
    let only_open = s
        .candidates(&a, std::slice::from_ref(&open.id), &terms, 100)
        .await
        .expect("candidates");
    assert_eq!(only_open.chunks.len(), 1);
    assert_eq!(only_open.chunks[0].source_id, open.id);
    assert_eq!(only_open.corpus_chunks, 1);
    assert_eq!(only_open.corpus_words, 6);
    let none = s
        .candidates(&a, &[], &terms, 100)
        .await
        .expect("candidates");
    assert!(none.chunks.is_empty() && none.corpus_chunks == 0);
    let both = s
        .candidates(&a, &[open.id.clone(), secret.id.clone()], &terms, 1)
        .await
        .expect("candidates");
    assert_eq!(both.chunks.len(), 1, "the cap holds");
    assert_eq!(both.corpus_chunks, 2);
}

/// Another tenant sees, finds, reads and deletes nothing of a tenant's sources.
pub async fn sources_are_confined_to_their_tenant<F: StoreFactory>() {
    let s = store::<F>().await;
    let (a, b) = (scope("tenant-a"), scope("tenant-b"));
    let d = doc(
        "shared-name",
        "public",
        "Tenant A's pricing is confidential.",
    );
    s.put_source(&a, &d).await.expect("put");
    assert_eq!(s.source(&b, &d.id).await.expect("get"), None);
    assert!(s.list_sources(&b, 10).await.expect("list").is_empty());
    assert!(s.source_refs(&b).await.expect("refs").is_empty());
    assert_eq!(
        s.source_text(&b, &d.id, &d.version).await.expect("text"),
        None
    );
    assert!(s.source_chunks(&b, &d.id).await.expect("chunks").is_empty());
    let found = s
        .candidates(&b, std::slice::from_ref(&d.id), &words(&["pricing"]), 100)
        .await
        .expect("candidates");
    assert!(
        found.chunks.is_empty() && found.corpus_chunks == 0,
        "{found:?}"
    );
    assert!(!s.delete_source(&b, &d.id, "mallory").await.expect("delete"));
    // The same id in tenant B is B's own source.
    let mine = doc("shared-name", "public", "Tenant B's own text.");
    assert_eq!(
        s.put_source(&b, &mine).await.expect("put"),
        PutOutcome::Created
    );
    assert_eq!(
        s.source(&a, &d.id)
            .await
            .expect("get")
            .expect("A's")
            .version,
        d.version
    );
}

/// Deleting a source removes its row, text, chunks and index entries and audits it.
pub async fn deleting_a_source_removes_everything_and_is_audited<F: StoreFactory>() {
    let s = store::<F>().await;
    let a = scope("tenant-a");
    let d = doc(
        "to-delete",
        "public",
        "The launch date is the ninth of March.",
    );
    let keep = doc("keep", "public", "The launch party is in March.");
    s.put_source(&a, &d).await.expect("put");
    s.put_source(&a, &keep).await.expect("put");
    assert!(s.delete_source(&a, &d.id, "alice").await.expect("delete"));
    assert!(
        !s.delete_source(&a, &d.id, "alice")
            .await
            .expect("delete again")
    );
    assert_eq!(s.source(&a, &d.id).await.expect("get"), None);
    assert_eq!(
        s.source_text(&a, &d.id, &d.version).await.expect("text"),
        None
    );
    assert!(s.source_chunks(&a, &d.id).await.expect("chunks").is_empty());
    let found = s
        .candidates(
            &a,
            &[d.id.clone(), keep.id.clone()],
            &words(&["march", "ninth"]),
            100,
        )
        .await
        .expect("candidates");
    assert_eq!(found.chunks.len(), 1);
    assert_eq!(found.chunks[0].source_id, keep.id);
    let audit = s.list_audit(&a, 10).await.expect("audit");
    assert!(
        audit.iter().any(|r| r.action == SOURCE_DELETED
            && r.actor == "alice"
            && r.subject == "source to-delete"),
        "{audit:?}"
    );
}

/// Denies `read` on sources labelled `restricted`.
struct DenyRestricted;

impl Authorizer for DenyRestricted {
    fn authorize(&self, r: &PolicyRequest<'_>) -> Result<PolicyDecision, forge_core::Error> {
        Ok(match r.resource {
            PolicyResource::Source {
                label: "restricted",
                ..
            } => PolicyDecision::Deny {
                reason: "restricted".into(),
            },
            _ => PolicyDecision::Allow,
        })
    }
}

/// A source the caller may not read is neither returned nor able to move an allowed chunk's score.
pub async fn retrieval_is_authorized_before_ranking<F: StoreFactory>() {
    let s = store::<F>().await;
    let a = scope("tenant-a");
    let open = doc(
        "open",
        "public",
        "Quarterly revenue grew. The revenue report is public.",
    );
    let other = doc("other", "public", "Costs fell this quarter.");
    s.put_source(&a, &open).await.expect("put");
    s.put_source(&a, &other).await.expect("put");
    let retriever = Retriever::new(s.clone(), Arc::new(DenyRestricted));
    let before = retriever
        .search(&a, "revenue quarter", 10)
        .await
        .expect("search");
    let hidden = doc(
        "hidden",
        "restricted",
        "Revenue revenue revenue: the restricted revenue forecast for the quarter.",
    );
    s.put_source(&a, &hidden).await.expect("put");
    let after = retriever
        .search(&a, "revenue quarter", 10)
        .await
        .expect("search");
    assert!(
        after.iter().all(|h| h.chunk.source_id != hidden.id),
        "{after:?}"
    );
    assert_eq!(
        before, after,
        "an unreadable source changes no score and no order"
    );
    let citation = forge_core::part::CitationPart {
        source_id: "hidden".into(),
        source_version: hidden.version.clone(),
        span: forge_core::part::Span { start: 0, end: 7 },
        excerpt: "Revenue".into(),
        line: None,
        page: None,
        heading: None,
    };
    use forge_core::ports::citation::CitationCheck;
    assert!(
        retriever
            .check(&a, &citation)
            .await
            .expect("check")
            .is_err(),
        "an unreadable source cannot be cited"
    );
}

/// Retention deletes a tenant's sources older than its `max_age`, audited, and nothing else.
pub async fn retention_expires_old_sources_only<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let s = F::make(clock.clone()).await;
    let (a, b) = (scope("tenant-a"), scope("tenant-b"));
    let old = doc("old", "public", "Written long ago.");
    let elsewhere = doc("old", "public", "Another tenant's old text.");
    s.put_source(&a, &old).await.expect("put");
    s.put_source(&b, &elsewhere).await.expect("put");
    clock.advance(std::time::Duration::from_secs(10 * 86_400));
    let fresh = doc("fresh", "public", "Written today.");
    s.put_source(&a, &fresh).await.expect("put");
    let retention = forge_rag::Retention {
        tenants: vec![(
            a.tenant_id().clone(),
            std::time::Duration::from_secs(5 * 86_400),
        )],
    };
    let deleted = retention
        .sweep(s.as_ref(), clock.as_ref())
        .await
        .expect("sweep");
    assert_eq!(deleted, [(a.tenant_id().clone(), id("old"))]);
    assert_eq!(s.source(&a, &old.id).await.expect("get"), None);
    assert!(s.source(&a, &fresh.id).await.expect("get").is_some());
    assert!(
        s.source(&b, &elsewhere.id).await.expect("get").is_some(),
        "a tenant without a rule keeps its sources"
    );
    let audit = s.list_audit(&a, 10).await.expect("audit");
    assert!(
        audit
            .iter()
            .any(|r| r.action == SOURCE_DELETED && r.actor == forge_rag::retention::RETENTION_ACTOR),
        "{audit:?}"
    );
    assert!(
        retention
            .sweep(s.as_ref(), clock.as_ref())
            .await
            .expect("sweep")
            .is_empty(),
        "a second sweep finds nothing"
    );
}
