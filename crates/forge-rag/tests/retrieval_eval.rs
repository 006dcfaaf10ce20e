//! A retrieval evaluation over a small public-domain corpus (`tests/corpus`: the Gettysburg
//! Address, excerpts of the Constitution, the Bill of Rights and the Declaration of Independence
//! as HTML, and the first stanzas of "The Raven"), with questions whose answers are exact spans.
//! For each question: is the answer inside one of the top five chunks (recall@5), and does the
//! citation built from that chunk resolve to exactly the answer (citation exactness)? Run on the
//! in-memory and the SQLite adapter. The figures are printed (`--nocapture`).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use forge_core::part::{CitationPart, Span};
use forge_core::ports::citation::{CitationCheck, CitationRefusal};
use forge_core::ports::policy::AllowAll;
use forge_core::scope::Scope;
use forge_rag::ingest::ingest;
use forge_rag::{Format, Retriever, SourceId, SourceStore};

#[derive(serde::Deserialize)]
struct Question {
    q: String,
    source: String,
    answer: String,
}

fn corpus() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

async fn load(store: &dyn SourceStore, scope: &Scope) {
    for entry in std::fs::read_dir(corpus()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".json") {
            continue;
        }
        let raw = std::fs::read_to_string(&path).unwrap();
        let source = ingest(
            SourceId::new(name.clone()).unwrap(),
            name.clone(),
            "public",
            Format::from_name(&name),
            serde_json::Value::Null,
            &raw,
        );
        store.put_source(scope, &source).await.unwrap();
    }
}

fn citation(source: &str, version: &str, start: u64, excerpt: &str) -> CitationPart {
    CitationPart {
        source_id: source.into(),
        source_version: version.into(),
        span: Span {
            start,
            end: start + excerpt.len() as u64,
        },
        excerpt: excerpt.into(),
        line: None,
        page: None,
        heading: None,
    }
}

/// (recall@5, citation exactness) over the questions.
async fn evaluate(store: Arc<dyn SourceStore>, label: &str) -> (f64, f64) {
    let scope = Scope::parse("acme", "eval", &[]).unwrap();
    load(store.as_ref(), &scope).await;
    let retriever = Retriever::new(store, Arc::new(AllowAll));
    let questions: Vec<Question> =
        serde_json::from_str(&std::fs::read_to_string(corpus().join("questions.json")).unwrap())
            .unwrap();
    let (mut found, mut exact, mut cited) = (0, 0, 0);
    for q in &questions {
        let hits = retriever.search(&scope, &q.q, 5).await.unwrap();
        let hit = hits
            .iter()
            .find(|h| h.chunk.source_id.as_str() == q.source && h.chunk.text.contains(&q.answer));
        let Some(hit) = hit else {
            println!("{label}: missed {:?}", q.q);
            continue;
        };
        found += 1;
        let offset = hit.chunk.text.find(&q.answer).unwrap() as u64;
        let c = citation(
            &q.source,
            &hit.chunk.version,
            hit.chunk.start + offset,
            &q.answer,
        );
        cited += 1;
        let resolved = retriever
            .resolve(&scope, &c.source_id, &c.source_version, c.span)
            .await
            .unwrap();
        if retriever.check(&scope, &c).await.unwrap().is_ok()
            && resolved.map(|r| r.text) == Some(q.answer.clone())
        {
            exact += 1;
        }
    }
    let recall = f64::from(found) / questions.len() as f64;
    let exactness = f64::from(exact) / f64::from(cited.max(1));
    println!(
        "{label}: {} questions, recall@5 {recall:.3}, citation exactness {exactness:.3} ({exact}/{cited})",
        questions.len()
    );
    (recall, exactness)
}

#[tokio::test]
async fn retrieval_finds_the_answers_and_every_citation_resolves_exactly() {
    let memory = Arc::new(forge_store_memory::MemoryStore::default());
    let (recall, exactness) = evaluate(memory, "memory").await;
    assert!(recall >= 0.9, "recall@5 {recall}");
    assert_eq!(exactness, 1.0);
    let sqlite = Arc::new(
        forge_store_sqlite::SqliteStore::open("sqlite::memory:")
            .await
            .unwrap(),
    );
    let (recall_sqlite, exactness_sqlite) = evaluate(sqlite, "sqlite").await;
    assert_eq!(recall_sqlite, recall, "every adapter ranks alike");
    assert_eq!(exactness_sqlite, 1.0);
}

#[tokio::test]
async fn wrong_stale_unreadable_and_deleted_citations_are_refused() {
    let store = Arc::new(forge_store_memory::MemoryStore::default());
    let scope = Scope::parse("acme", "eval", &[]).unwrap();
    load(store.as_ref(), &scope).await;
    let retriever = Retriever::new(store.clone(), Arc::new(AllowAll));
    let src = store
        .source(&scope, &SourceId::new("gettysburg.md").unwrap())
        .await
        .unwrap()
        .unwrap();
    let text = store
        .source_text(&scope, &src.id, &src.version)
        .await
        .unwrap()
        .unwrap();
    let answer = "Four score and seven years ago";
    let at = text.find(answer).unwrap() as u64;
    let good = citation("gettysburg.md", &src.version, at, answer);
    assert_eq!(retriever.check(&scope, &good).await.unwrap(), Ok(()));

    let shifted = citation("gettysburg.md", &src.version, at + 1, answer);
    assert!(matches!(
        retriever.check(&scope, &shifted).await.unwrap(),
        Err(CitationRefusal::ExcerptMismatch { .. })
    ));
    let stale = citation("gettysburg.md", "sha256:0000", at, answer);
    assert!(matches!(
        retriever.check(&scope, &stale).await.unwrap(),
        Err(CitationRefusal::StaleVersion { .. })
    ));
    let mut outside = good.clone();
    outside.span.end = text.len() as u64 + 10;
    assert!(matches!(
        retriever.check(&scope, &outside).await.unwrap(),
        Err(CitationRefusal::BadSpan { .. })
    ));
    let other = Scope::parse("globex", "eve", &[]).unwrap();
    assert!(matches!(
        retriever.check(&other, &good).await.unwrap(),
        Err(CitationRefusal::NoSource(_))
    ));
    store.delete_source(&scope, &src.id, "alice").await.unwrap();
    assert!(matches!(
        retriever.check(&scope, &good).await.unwrap(),
        Err(CitationRefusal::NoSource(_))
    ));
    assert_eq!(
        retriever
            .resolve(&scope, "gettysburg.md", &src.version, good.span)
            .await
            .unwrap(),
        None,
        "a deleted source's citation resolves to nothing, never to the old text"
    );
}
