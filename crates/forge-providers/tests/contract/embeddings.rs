//! The OpenAI-compatible embeddings client against the mock model server's `/v1/embeddings` (a
//! stand-in: no real embeddings server runs here).

use forge_core::ErrorKind;
use forge_providers::{EmbeddingSettings, OpenAiEmbeddings, Secret};
use forge_rag::embed::{Embedder, Purpose};
use forge_testkit::embedding::hashed;
use forge_testkit::mock_model::MockModelServer;

fn texts() -> Vec<String> {
    [
        "refunds are paid in ten days",
        "the canteen opens at noon",
        "refunds",
    ]
    .map(String::from)
    .to_vec()
}

async fn client(server: &MockModelServer, model: &str) -> OpenAiEmbeddings {
    let mut settings = EmbeddingSettings::new(server.base_url(), model);
    settings.api_key = Some(Secret::new("sk-test-do-not-print-4242"));
    OpenAiEmbeddings::new(settings).unwrap()
}

#[tokio::test]
async fn vectors_come_back_in_input_order_with_the_request_in_openai_form() {
    let server = MockModelServer::start_recording().await.unwrap();
    for model in ["text-embedding-3-small", "mock-embed-reversed"] {
        let e = client(&server, model).await;
        assert_eq!(e.model(), format!("openai-compatible:{model}"));
        let got = e.embed(&texts(), Purpose::Document).await.unwrap();
        let want: Vec<Vec<f32>> = texts().iter().map(|t| hashed(t)).collect();
        assert_eq!(got, want, "{model}: ordered by index, not by position");
    }
    let body: serde_json::Value = serde_json::from_slice(&server.requests()[0]).unwrap();
    assert_eq!(body["model"], "text-embedding-3-small");
    assert_eq!(body["encoding_format"], "float");
    assert_eq!(body["input"].as_array().map(Vec::len), Some(3));
    assert!(body.get("dimensions").is_none());
}

#[tokio::test]
async fn dimensions_are_sent_and_name_the_vectors() {
    let server = MockModelServer::start_recording().await.unwrap();
    let mut settings = EmbeddingSettings::new(server.base_url(), "text-embedding-3-large");
    settings.dimensions = Some(256);
    let e = OpenAiEmbeddings::new(settings).unwrap();
    assert_eq!(e.model(), "openai-compatible:text-embedding-3-large:256");
    e.embed(&texts(), Purpose::Query).await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&server.requests()[0]).unwrap();
    assert_eq!(body["dimensions"], 256);
}

#[tokio::test]
async fn refusals_are_classified_and_never_carry_the_key() {
    let server = MockModelServer::start().await.unwrap();
    let refused = client(&server, "mock-embed-unauthorized")
        .await
        .embed(&texts(), Purpose::Document)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Fatal);
    let limited = client(&server, "mock-embed-limited")
        .await
        .embed(&texts(), Purpose::Document)
        .await
        .unwrap_err();
    assert_eq!(limited.kind(), ErrorKind::Retryable);
    for e in [refused, limited] {
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("4242"), "{shown}");
    }
    let bad_url = OpenAiEmbeddings::new(EmbeddingSettings::new("ftp://x", "m")).unwrap_err();
    assert_eq!(bad_url.kind(), ErrorKind::Invalid);
}

#[tokio::test]
async fn an_unreachable_server_is_a_retryable_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let e =
        OpenAiEmbeddings::new(EmbeddingSettings::new(format!("http://{addr}/v1"), "m")).unwrap();
    let err = e.embed(&texts(), Purpose::Document).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Retryable);
}

/// The readiness check (issue 62, item 8): `GET {base}/models`, no tokens spent; a server nobody
/// listens on is not ready and the reason never carries the key.
#[tokio::test]
async fn health_asks_the_models_route_and_fails_when_nobody_answers() {
    let server = MockModelServer::start_recording().await.unwrap();
    let up = client(&server, "text-embedding-3-small").await;
    up.health().await.unwrap();
    assert!(server.requests().is_empty(), "no embedding was asked for");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut settings = EmbeddingSettings::new(format!("http://{closed}/v1"), "m");
    settings.api_key = Some(Secret::new("sk-test-do-not-print-4242"));
    let down = OpenAiEmbeddings::new(settings)
        .unwrap()
        .health()
        .await
        .unwrap_err();
    assert_eq!(down.kind(), ErrorKind::Retryable);
    assert!(!format!("{down} {down:?}").contains("4242"));
}
