//! Citations over GraphQL: `resolveCitation` returns the exact span for a caller who may read the
//! source and `NOT_FOUND` otherwise (another tenant, a label the policies deny, a wrong version or
//! span, a deleted source); `deleteSource` is for administrators and is audited.

use std::sync::Arc;

use forge_core::ports::policy::{Authorizer, PolicyDecision, PolicyRequest, PolicyResource};
use forge_core::scope::Scope;
use forge_rag::ingest::ingest;
use forge_rag::{Format, Retriever, SourceId, SourceStore};
use forge_store_memory::MemoryStore;
use serde_json::json;

use crate::support::{Opts, start, token};

/// Only principals with the role `hr` may read sources labelled `hr`.
struct Labels;

impl Authorizer for Labels {
    fn authorize(&self, r: &PolicyRequest<'_>) -> Result<PolicyDecision, forge_core::Error> {
        Ok(match r.resource {
            PolicyResource::Source { label: "hr", .. }
                if !r.scope.role_ids().iter().any(|x| x.as_str() == "hr") =>
            {
                PolicyDecision::Deny {
                    reason: "hr only".into(),
                }
            }
            _ => PolicyDecision::Allow,
        })
    }
}

const RESOLVE: &str = "query($s: String!, $v: String!, $a: Int!, $b: Int!) {
    resolveCitation(sourceId: $s, version: $v, start: $a, end: $b) { sourceId title text start end } }";

#[tokio::test]
async fn citations_resolve_exactly_for_readers_only_and_not_after_deletion() {
    let store = Arc::new(MemoryStore::default());
    let acme = Scope::parse("acme", "seed", &[]).unwrap();
    let doc = ingest(
        SourceId::new("pay.md").unwrap(),
        "Pay bands",
        "hr",
        Format::Markdown,
        json!({}),
        "# Pay\n\nThe senior band starts at 90,000 a year.",
    );
    store.put_source(&acme, &doc).await.unwrap();
    let srv = start(Opts {
        store: store.clone(),
        retriever: Some(Retriever::new(store.clone(), Arc::new(Labels))),
        ..Opts::default()
    })
    .await;
    let text = "The senior band starts at 90,000 a year.";
    let at = doc.text.find(text).unwrap() as u64;
    let vars = |v: &str, a: u64, b: u64| json!({"s": "pay.md", "v": v, "a": a, "b": b});
    let hr = token("acme", "hana", &["hr"]);
    let d = srv
        .gql(&hr, RESOLVE, vars(&doc.version, at, at + text.len() as u64))
        .await;
    assert_eq!(d["resolveCitation"]["text"], text);
    assert_eq!(d["resolveCitation"]["title"], "Pay bands");

    for (who, v, a, b) in [
        (
            token("acme", "sam", &["sales"]),
            doc.version.clone(),
            at,
            at + 10,
        ),
        (
            token("globex", "hana", &["hr"]),
            doc.version.clone(),
            at,
            at + 10,
        ),
        (hr.clone(), "sha256:0".to_owned(), at, at + 10),
        (hr.clone(), doc.version.clone(), at, 100_000),
    ] {
        let (code, _) = srv.gql_error(&who, RESOLVE, vars(&v, a, b)).await;
        assert_eq!(code, "NOT_FOUND");
    }

    let delete = "mutation($id: String!) { deleteSource(id: $id) }";
    let (code, _) = srv.gql_error(&hr, delete, json!({"id": "pay.md"})).await;
    assert_eq!(code, "FORBIDDEN", "deleting is for administrators");
    let admin = token("acme", "ada", &["admin", "hr"]);
    let d = srv.gql(&admin, delete, json!({"id": "pay.md"})).await;
    assert_eq!(d["deleteSource"], true);
    let (code, _) = srv
        .gql_error(&hr, RESOLVE, vars(&doc.version, at, at + text.len() as u64))
        .await;
    assert_eq!(
        code, "NOT_FOUND",
        "a deleted source's citation resolves to nothing"
    );
    let audit = srv
        .gql(&admin, "{ auditRecords(action: \"source.\") }", json!({}))
        .await;
    let records = audit["auditRecords"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{audit}");
    assert_eq!(records[0]["subject"], "source pay.md");
    assert_eq!(records[0]["actor"], "ada");
}
