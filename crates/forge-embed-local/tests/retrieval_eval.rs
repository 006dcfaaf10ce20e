//! What the local model adds to retrieval, measured on `forge-rag`'s public-domain QA corpus:
//! recall@1 and recall@5 of lexical search alone and of lexical fused with all-MiniLM-L6-v2
//! (the chunk holding the answer among the first 1 or 5), on the corpus's
//! own questions (which share words with their answers) and on paraphrases that mostly do not
//! (`paraphrases.json`). Every answer found is cited and must resolve exactly. The figures are
//! printed (`--nocapture`).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use forge_core::part::{CitationPart, Span};
use forge_core::ports::citation::CitationCheck;
use forge_core::ports::policy::AllowAll;
use forge_core::scope::Scope;
use forge_embed_local::MiniLm;
use forge_rag::ingest::ingest;
use forge_rag::{Format, Retriever, SourceId};

#[derive(serde::Deserialize)]
struct Question {
    q: String,
    source: String,
    answer: String,
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../forge-rag/tests/corpus")
}

fn questions(file: &str) -> Vec<Question> {
    serde_json::from_str(&std::fs::read_to_string(corpus().join(file)).unwrap()).unwrap()
}

fn model() -> MiniLm {
    static MODEL: OnceLock<MiniLm> = OnceLock::new();
    MODEL
        .get_or_init(|| MiniLm::load(&forge_testkit::models::minilm_dir()).unwrap())
        .clone()
}

/// A memory store with the corpus indexed (with vectors when `retriever` has an embedder).
async fn indexed(semantic: bool) -> (Retriever, Scope) {
    let store = Arc::new(forge_store_memory::MemoryStore::default());
    let mut retriever = Retriever::new(store, Arc::new(AllowAll));
    if semantic {
        retriever = retriever.with_embedder(Arc::new(model()));
    }
    let scope = Scope::parse("acme", "eval", &[]).unwrap();
    for entry in std::fs::read_dir(corpus()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".json") {
            continue;
        }
        let source = ingest(
            SourceId::new(name.clone()).unwrap(),
            name.clone(),
            "public",
            Format::from_name(&name),
            serde_json::Value::Null,
            &std::fs::read_to_string(&path).unwrap(),
        );
        let done = retriever.index(&scope, &source).await.unwrap();
        assert_eq!(done.vectors > 0, semantic, "{name}");
    }
    (retriever, scope)
}

/// recall@k over `questions`, after checking that each found answer cites exactly.
async fn recall(
    retriever: &Retriever,
    scope: &Scope,
    questions: &[Question],
    k: usize,
    label: &str,
) -> f64 {
    let mut found = 0;
    for q in questions {
        let result = retriever.find(scope, &q.q, k).await.unwrap();
        assert_eq!(result.degraded, None);
        let Some(hit) = result
            .hits
            .iter()
            .find(|h| h.chunk.source_id.as_str() == q.source && h.chunk.text.contains(&q.answer))
        else {
            println!("{label} @{k}: missed {:?}", q.q);
            continue;
        };
        let start = hit.chunk.start + hit.chunk.text.find(&q.answer).unwrap() as u64;
        let citation = CitationPart {
            source_id: q.source.clone(),
            source_version: hit.chunk.version.clone(),
            span: Span {
                start,
                end: start + q.answer.len() as u64,
            },
            excerpt: q.answer.clone(),
            line: None,
            page: None,
            heading: None,
        };
        assert!(
            retriever.check(scope, &citation).await.unwrap().is_ok(),
            "{label}: the citation of {:?} does not resolve",
            q.q
        );
        found += 1;
    }
    let r = f64::from(found) / questions.len() as f64;
    println!("{label}: recall@{k} {r:.3} ({found}/{})", questions.len());
    r
}

#[tokio::test]
async fn the_local_model_finds_paraphrased_questions_lexical_search_misses() {
    let (lexical, scope) = indexed(false).await;
    let (fused, _) = indexed(true).await;
    let original = questions("questions.json");
    let paraphrased = questions("paraphrases.json");
    let lexical_original = recall(&lexical, &scope, &original, 5, "lexical, questions").await;
    let fused_original = recall(&fused, &scope, &original, 5, "fused, questions").await;
    let mut paraphrase_recall = Vec::new();
    for k in [1, 5] {
        let l = recall(&lexical, &scope, &paraphrased, k, "lexical, paraphrases").await;
        let f = recall(&fused, &scope, &paraphrased, k, "fused, paraphrases").await;
        paraphrase_recall.push((k, l, f));
    }
    assert!(
        fused_original >= lexical_original && fused_original >= 0.9,
        "fusion keeps what lexical search finds: {fused_original} (lexical {lexical_original})"
    );
    for (k, l, f) in paraphrase_recall {
        assert!(f >= l, "recall@{k} on paraphrases: fused {f}, lexical {l}");
        if k == 1 {
            assert!(
                f >= l + 0.25,
                "the model puts paraphrased answers first: fused {f}, lexical {l}"
            );
        }
    }
}
