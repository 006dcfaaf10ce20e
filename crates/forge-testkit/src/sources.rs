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
use forge_core::scope::Scope;

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
    assert_eq!(listed[0].owner, None, "nobody owns it");

    // An owned source keeps its owner wherever it is read, authorization's refs included; the
    // owner follows a rewrite (unchanged text or not).
    let mine = doc("notes/alice.md", "private", "Alice's own note.").owned_by("alice");
    s.put_source(&a, &mine).await.expect("put");
    let got = s.source(&a, &mine.id).await.expect("get").expect("stored");
    assert_eq!(got.owner.as_deref(), Some("alice"));
    let refs = s.source_refs(&a).await.expect("refs");
    let owners: Vec<_> = refs
        .iter()
        .map(|r| (r.id.as_str(), r.owner.as_deref()))
        .collect();
    assert_eq!(
        owners,
        [
            ("handbook/leave.md", None),
            ("notes/alice.md", Some("alice"))
        ]
    );
    let given = doc("notes/alice.md", "private", "Alice's own note.").owned_by("bob");
    s.put_source(&a, &given).await.expect("put");
    let got = s.source(&a, &mine.id).await.expect("get").expect("stored");
    assert_eq!(got.owner.as_deref(), Some("bob"));
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

/// The copies a run made of a source — its search result's text in a committed event and a
/// message, a citation's excerpt — go with the source, on every adapter: each quote becomes the
/// marker, the log keeps its sequence numbers and the parts their shape, another source's quote
/// and another tenant's copy stay, and the audit record counts what was rewritten.
pub async fn deleting_a_source_removes_the_copies_runs_made<F: StoreFactory>() {
    use forge_core::event::{RunEvent, RunEventKind};
    use forge_core::forget::SOURCE_REMOVED;
    use forge_core::message::{Message, Role};
    use forge_core::part::{CitationPart, Part, Span, ToolResultPart, Trust};
    use forge_core::ports::store::{RunStore, ThreadStore};
    use forge_core::run::RunStatus;
    use forge_core::time::Clock;

    const SECRET: &str = "The senior band starts at ninety-one thousand";
    let f = crate::store::fixture::<F>().await;
    let other = scope("tenant-b");
    let d = doc("pay.md", "public", SECRET);
    let keep = doc("keep.md", "public", "Lunch is at noon.");
    for source in [&d, &keep] {
        f.store.put_source(&f.scope, source).await.expect("put");
    }
    f.store.put_source(&other, &d).await.expect("put");
    let quoting = |run| {
        let search = Part::ToolResult(ToolResultPart {
            tool_call_id: "c1".into(),
            tool_name: "search_documents".into(),
            output: forge_rag::tool::hits_json(&[
                forge_rag::SearchHit {
                    chunk: d.chunks[0].clone(),
                    score: 1.0,
                },
                forge_rag::SearchHit {
                    chunk: keep.chunks[0].clone(),
                    score: 0.5,
                },
            ]),
            is_error: false,
            trust: Trust::Untrusted,
            tool_version: None,
        });
        let cite = Part::Citation(CitationPart {
            source_id: "pay.md".into(),
            source_version: d.version.clone(),
            span: Span { start: 0, end: 20 },
            excerpt: SECRET[..20].to_owned(),
            line: Some(1),
            page: None,
            heading: None,
        });
        let message = Message {
            id: forge_core::id::MessageId(uuid::Uuid::now_v7()),
            run_id: run,
            role: Role::Tool,
            parts: vec![search.clone(), cite.clone()],
            created_at: f.clock.now(),
        };
        let events: Vec<RunEvent> = [search, cite]
            .into_iter()
            .enumerate()
            .map(|(i, part)| RunEvent {
                run_id: run,
                seq: i as u64 + 1,
                at: f.clock.now(),
                kind: RunEventKind::PartAdded {
                    message_id: message.id,
                    role: Role::Tool,
                    index: i as u32,
                    part,
                },
            })
            .collect();
        (message, events)
    };
    // A run of each tenant that searched and cited the source.
    let mut runs = Vec::new();
    for tenant in [&f.scope, &other] {
        let thread = f
            .store
            .create_thread(tenant, forge_core::ports::store::NewThread::default())
            .await
            .expect("thread");
        let run = f
            .store
            .create_run(
                tenant,
                forge_core::ports::store::NewRun::new(
                    thread.id,
                    crate::fixtures::agent_ref(),
                    vec![Part::text("what is the pay?")],
                ),
            )
            .await
            .expect("run");
        let lease = f
            .store
            .acquire_lease(tenant, run.id, "w", crate::store::TTL)
            .await
            .expect("lease");
        let (message, events) = quoting(run.id);
        let mut commit = crate::store::commit_of(&run, &lease, events, RunStatus::Completed);
        commit.messages = vec![message];
        f.store.commit_step(tenant, commit).await.expect("commit");
        runs.push((tenant.clone(), thread.id, run.id));
    }
    assert!(
        f.store
            .delete_source(&f.scope, &d.id, "alice")
            .await
            .expect("delete")
    );
    let stored = |tenant: Scope, thread, run| {
        let store = f.store.clone();
        async move {
            let events = store
                .read_events(&tenant, run, 0, 100)
                .await
                .expect("events");
            let messages = store
                .list_messages(&tenant, thread)
                .await
                .expect("messages");
            (events, messages)
        }
    };
    let (tenant, thread, run) = runs[0].clone();
    let (events, messages) = stored(tenant, thread, run).await;
    let text = serde_json::to_string(&(&events, &messages)).expect("json");
    assert!(!text.contains("ninety-one"), "a quote is left: {text}");
    assert!(!text.contains("The senior band"), "a quote is left: {text}");
    assert!(text.contains(SOURCE_REMOVED), "{text}");
    assert!(
        text.contains("Lunch is at noon."),
        "another source's quote stays"
    );
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2],
        "the log keeps its shape"
    );
    assert!(
        matches!(&events[1].kind, RunEventKind::PartAdded { part: Part::Citation(c), .. }
            if c.source_id == "pay.md" && c.span == Span { start: 0, end: 20 }),
        "{:?}",
        events[1]
    );
    let (tenant, thread, run) = runs[1].clone();
    let (events, messages) = stored(tenant, thread, run).await;
    let untouched = serde_json::to_string(&(&events, &messages)).expect("json");
    assert!(
        untouched.contains("ninety-one"),
        "another tenant's copy is its own"
    );
    let audit = f.store.list_audit(&f.scope, 10).await.expect("audit");
    let record = audit
        .iter()
        .find(|r| r.action == SOURCE_DELETED)
        .expect("audited");
    assert_eq!(
        record.detail["quotes_removed"], 3,
        "two events and a message: {record:?}"
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

const MODEL: &str = "test:model";

/// Vectors belong to one version: a stale version or a wrong count stores nothing, the same text
/// keeps them, a new version and a deletion drop them, and another tenant cannot reach them.
pub async fn vectors_follow_their_source_version<F: StoreFactory>() {
    let s = store::<F>().await;
    let (a, b) = (scope("tenant-a"), scope("tenant-b"));
    let v1 = doc("policy", "public", "Refunds are paid within ten days.");
    s.put_source(&a, &v1).await.expect("put");
    let one = vec![vec![1.0, 0.0]];
    assert!(
        !s.put_vectors(&a, &v1.id, "sha256:stale", MODEL, &one)
            .await
            .expect("stale version")
    );
    assert!(
        s.put_vectors(&a, &v1.id, &v1.version, MODEL, &[vec![1.0], vec![1.0]])
            .await
            .is_err(),
        "two vectors for one chunk"
    );
    assert!(
        !s.has_vectors(&a, &v1.id, &v1.version, MODEL)
            .await
            .expect("has")
    );
    assert!(
        s.put_vectors(&a, &v1.id, &v1.version, MODEL, &one)
            .await
            .expect("put vectors")
    );
    assert!(
        s.has_vectors(&a, &v1.id, &v1.version, MODEL)
            .await
            .expect("has")
    );
    assert!(
        !s.has_vectors(&a, &v1.id, &v1.version, "test:other")
            .await
            .expect("has"),
        "vectors are per model"
    );
    let near = |sc| {
        let s = s.clone();
        let ids = vec![v1.id.clone()];
        async move {
            s.nearest(&sc, &ids, MODEL, &[1.0, 0.0], 10)
                .await
                .expect("nearest")
        }
    };
    assert_eq!(near(a.clone()).await.len(), 1);
    // Tenant B reaches nothing of A's, by search or by write.
    assert!(near(b.clone()).await.is_empty());
    assert!(
        !s.has_vectors(&b, &v1.id, &v1.version, MODEL)
            .await
            .expect("has")
    );
    assert!(
        !s.put_vectors(&b, &v1.id, &v1.version, MODEL, &one)
            .await
            .expect("other tenant")
    );
    // The same text keeps the vectors.
    assert_eq!(
        s.put_source(&a, &v1).await.expect("put"),
        PutOutcome::Unchanged
    );
    assert!(
        s.has_vectors(&a, &v1.id, &v1.version, MODEL)
            .await
            .expect("has")
    );
    // A new version starts without any.
    let v2 = doc("policy", "public", "Refunds are paid within thirty days.");
    assert_eq!(
        s.put_source(&a, &v2).await.expect("put"),
        PutOutcome::Replaced
    );
    assert!(
        !s.has_vectors(&a, &v1.id, &v1.version, MODEL)
            .await
            .expect("has")
    );
    assert!(near(a.clone()).await.is_empty(), "old vectors are gone");
    assert!(
        s.put_vectors(&a, &v2.id, &v2.version, MODEL, &one)
            .await
            .expect("put vectors")
    );
    let hits = near(a.clone()).await;
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].chunk.version, v2.version);
    assert!(s.delete_source(&a, &v2.id, "alice").await.expect("delete"));
    assert!(near(a.clone()).await.is_empty(), "deleted with the source");
}

/// Nearest chunks come from the allowed sources only, ranked by cosine similarity, equal scores
/// by source id; another model's or another length's vectors are not compared.
pub async fn nearest_ranks_allowed_chunks_by_similarity<F: StoreFactory>() {
    let s = store::<F>().await;
    let a = scope("tenant-a");
    let docs = [
        ("d1", vec![1.0, 0.0, 0.0]),
        ("d2", vec![0.8, 0.6, 0.0]),
        ("d3", vec![0.0, 0.0, 1.0]),
        ("d0", vec![1.0, 0.0, 0.0]),
    ];
    for (name, v) in &docs {
        let d = doc(name, "public", &format!("Document {name}."));
        s.put_source(&a, &d).await.expect("put");
        assert!(
            s.put_vectors(&a, &d.id, &d.version, MODEL, std::slice::from_ref(v))
                .await
                .expect("vectors")
        );
    }
    let all: Vec<SourceId> = ["d0", "d1", "d2", "d3"].map(id).to_vec();
    let ranked = |hits: Vec<forge_rag::SearchHit>| {
        hits.into_iter()
            .map(|h| {
                (
                    h.chunk.source_id.as_str().to_owned(),
                    (h.score * 100.0).round() as i32,
                )
            })
            .collect::<Vec<_>>()
    };
    let q = [1.0, 0.0, 0.0];
    assert_eq!(
        ranked(s.nearest(&a, &all, MODEL, &q, 10).await.expect("nearest")),
        [
            ("d0".to_owned(), 100),
            ("d1".to_owned(), 100),
            ("d2".to_owned(), 80),
            ("d3".to_owned(), 0)
        ]
    );
    assert_eq!(
        ranked(s.nearest(&a, &all, MODEL, &q, 2).await.expect("nearest")),
        [("d0".to_owned(), 100), ("d1".to_owned(), 100)]
    );
    let some = [id("d2"), id("d3")];
    assert_eq!(
        ranked(s.nearest(&a, &some, MODEL, &q, 10).await.expect("nearest")),
        [("d2".to_owned(), 80), ("d3".to_owned(), 0)],
        "only allowed sources"
    );
    let hit = &s.nearest(&a, &some, MODEL, &q, 1).await.expect("nearest")[0];
    assert_eq!(hit.chunk.text, "Document d2.", "the hit carries its chunk");
    assert!(
        s.nearest(&a, &all, "test:other", &q, 10)
            .await
            .expect("nearest")
            .is_empty()
    );
    assert!(
        s.nearest(&a, &all, MODEL, &[1.0, 0.0], 10)
            .await
            .expect("nearest")
            .is_empty(),
        "vectors of another length are not compared"
    );
    assert!(
        s.nearest(&a, &[], MODEL, &q, 10)
            .await
            .expect("nearest")
            .is_empty()
    );
}

/// With an embedder, search fuses lexical and vector ranks, and still an unreadable source is
/// neither returned nor able to move an allowed chunk's rank.
pub async fn fused_retrieval_is_authorized_before_ranking<F: StoreFactory>() {
    let s = store::<F>().await;
    let a = scope("tenant-a");
    let retriever = Retriever::new(s.clone(), Arc::new(DenyRestricted))
        .with_embedder(Arc::new(crate::embedding::HashingEmbedder::new("fused")));
    for (name, text) in [
        (
            "open",
            "Quarterly revenue grew. The revenue report is public.",
        ),
        ("other", "Costs fell this quarter."),
        ("third", "The canteen menu changes weekly."),
    ] {
        let indexed = retriever
            .index(&a, &doc(name, "public", text))
            .await
            .expect("index");
        assert_eq!(indexed.outcome, PutOutcome::Created);
        assert_eq!(indexed.vectors, 1, "{name} is embedded as it is stored");
    }
    let before = retriever
        .find(&a, "revenue quarter", 10)
        .await
        .expect("search");
    assert_eq!(before.degraded, None);
    assert_eq!(
        before.hits.first().map(|h| h.chunk.source_id.as_str()),
        Some("open")
    );
    assert!(
        before
            .hits
            .iter()
            .any(|h| h.chunk.source_id.as_str() == "third"),
        "vector search ranks chunks without a query word too: {before:?}"
    );
    let hidden = doc(
        "hidden",
        "restricted",
        "Revenue revenue revenue: the restricted revenue forecast for the quarter.",
    );
    retriever.index(&a, &hidden).await.expect("index");
    let after = retriever
        .find(&a, "revenue quarter", 10)
        .await
        .expect("search");
    assert!(
        after.hits.iter().all(|h| h.chunk.source_id != hidden.id),
        "{after:?}"
    );
    assert_eq!(before, after, "an unreadable source changes no rank");
    // Indexing the same text again embeds nothing.
    let again = retriever
        .index(&a, &doc("other", "public", "Costs fell this quarter."))
        .await
        .expect("index");
    assert_eq!((again.outcome, again.vectors), (PutOutcome::Unchanged, 0));
}
