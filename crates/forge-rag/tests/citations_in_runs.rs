//! Citations through the engine: a scripted agent searches, cites a passage exactly and cites one
//! wrongly. The exact citation is committed as a citation part; the wrong one is an error result the
//! model reads and is never stored as a citation.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::id::SequentialIds;
use forge_core::part::Part;
use forge_core::ports::policy::AllowAll;
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::run::RunStatus;
use forge_core::scope::Scope;
use forge_core::time::ManualClock;
use forge_engine::{Engine, NoopObserver};
use forge_providers::{Script, ScriptedProvider};
use forge_rag::ingest::ingest;
use forge_rag::{Format, Retriever, SearchDocuments, SourceId, SourceStore};
use forge_store_memory::MemoryStore;
use tokio_util::sync::CancellationToken;

const TEXT: &str = "Four score and seven years ago our fathers brought forth a new nation.";

#[tokio::test]
async fn an_exact_citation_is_committed_and_a_wrong_one_is_refused() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = Arc::new(MemoryStore::new(
        clock.clone(),
        Arc::new(SequentialIds::new()),
    ));
    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let source = ingest(
        SourceId::new("speech.txt").unwrap(),
        "Speech",
        "public",
        Format::Text,
        serde_json::Value::Null,
        TEXT,
    );
    store.put_source(&scope, &source).await.unwrap();
    let v = &source.version;
    let script = format!(
        r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{{ id = "s1", name = "search_documents", input = {{ query = "four score" }} }}]
[[conversation.turn]]
tool_calls = [
  {{ id = "c1", name = "cite", input = {{ source_id = "speech.txt", version = "{v}", start = 0, end = 30, excerpt = "Four score and seven years ago" }} }},
  {{ id = "c2", name = "cite", input = {{ source_id = "speech.txt", version = "{v}", start = 0, end = 30, excerpt = "Five score and seven years ago" }} }},
]
[[conversation.turn]]
text = ["It was four score and seven years ago."]
"#
    );
    let retriever = Retriever::new(store.clone(), Arc::new(AllowAll));
    let agent = AgentDefinition {
        agent: AgentRef {
            name: "reader".into(),
            version: "1".into(),
        },
        instructions: "Answer from the documents and cite them.".into(),
        model: "scripted:inline".into(),
        tools: vec!["search_documents".into(), "cite".into()],
        skills: vec![],
        output_schema: None,
        limits: RunLimits::default(),
        approvals: Default::default(),
        compaction: None,
    };
    let engine = Engine::builder()
        .store(store.clone())
        .model(Arc::new(ScriptedProvider::new(
            Script::parse(&script, "inline").unwrap(),
        )))
        .clock(clock)
        .tool(Arc::new(SearchDocuments::new(retriever.clone())))
        .unwrap()
        .citations(Arc::new(retriever))
        .agent(agent.clone())
        .build()
        .unwrap();
    let thread = store
        .create_thread(&scope, NewThread::default())
        .await
        .unwrap();
    let run = engine
        .start_run(&scope, thread.id, &agent.agent, vec![Part::text("When?")])
        .await
        .unwrap();
    let out = engine
        .execute(&scope, run.id, &CancellationToken::new(), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    let parts: Vec<Part> = store
        .read_events(&scope, run.id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            forge_core::event::RunEventKind::PartAdded { part, .. } => Some(part),
            _ => None,
        })
        .collect();
    let citations: Vec<_> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Citation(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(citations.len(), 1, "{parts:#?}");
    assert_eq!(
        (
            citations[0].source_id.as_str(),
            citations[0].source_version.as_str(),
            citations[0].span.start,
            citations[0].span.end,
            citations[0].excerpt.as_str()
        ),
        (
            "speech.txt",
            v.as_str(),
            0,
            30,
            "Four score and seven years ago"
        )
    );
    let result = |id: &str| {
        parts
            .iter()
            .find_map(|p| match p {
                Part::ToolResult(r) if r.tool_call_id.to_string() == id => Some(r.clone()),
                _ => None,
            })
            .unwrap()
    };
    let search = result("s1");
    assert!(!search.is_error);
    assert_eq!(search.output["results"][0]["source_id"], "speech.txt");
    assert_eq!(search.output["results"][0]["start"], 0);
    let wrong = result("c2");
    assert!(wrong.is_error);
    assert_eq!(wrong.output["code"], "invalid_citation");
    assert!(!result("c1").is_error);
}
