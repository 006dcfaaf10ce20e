//! Secrets — in a tool result, in the run's input, in what the model writes (text and tool-call
//! input) — reach neither a model request, nor the stored history and event log, nor what an
//! observer (the CLI's output, a subscriber) sees.

use std::sync::{Arc, Mutex};

use forge_core::agent::RunLimits;
use forge_core::event::RunEvent;
use forge_core::part::Part;
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::ports::tool::ToolError;
use forge_core::redact::Redactor;
use forge_core::run::RunStatus;
use forge_core::scope::Scope;
use forge_engine::{Engine, native_tool};
use forge_providers::{Script, ScriptedProvider};
use forge_store_memory::MemoryStore;
use tokio_util::sync::CancellationToken;

use crate::harness::{Recording, agent};

const DB_PASSWORD: &str = "hunter2-prod-database-password";
const API_KEY: &str = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345";

#[tokio::test]
async fn seeded_secrets_never_leave_the_tool() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "read_config", input = { echo = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345" } }]
[[conversation.turn]]
text = ["The config is {{tool_result}}; the password is hunter2-prod-database-password"]
"#;
    let store = Arc::new(MemoryStore::default());
    let model = Arc::new(Recording {
        inner: ScriptedProvider::new(Script::parse(script, "inline").unwrap()),
        requests: Mutex::new(vec![]),
    });
    let read_config = native_tool(
        "read_config",
        "reads the service configuration",
        |_ctx, _i: serde_json::Value| async {
            Ok::<_, ToolError>(serde_json::json!({
                "database_url": format!("postgres://app:{DB_PASSWORD}@db/prod"),
                "openai_key": API_KEY,
                "note": "Authorization: Bearer abcdefghijklmnop",
            }))
        },
    );
    let def = agent(&["read_config"], RunLimits::default());
    let engine = Engine::builder()
        .store(store.clone())
        .model(model.clone())
        .tool(Arc::new(read_config))
        .unwrap()
        .agent(def.clone())
        .redactor(Redactor::new([DB_PASSWORD]))
        .build()
        .unwrap();
    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let thread = store
        .create_thread(&scope, NewThread::default())
        .await
        .unwrap();
    let run = engine
        .start_run(
            &scope,
            thread.id,
            &def.agent,
            vec![Part::text(format!(
                "show config; my key is {API_KEY}, the db password {DB_PASSWORD}"
            ))],
        )
        .await
        .unwrap();
    let seen = Mutex::new(Vec::new());
    let observer = |e: &RunEvent| seen.lock().unwrap().push(serde_json::to_string(e).unwrap());
    let outcome = engine
        .execute(&scope, run.id, &CancellationToken::new(), &observer)
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);

    let leaks = |what: &str, text: &str| {
        for secret in [DB_PASSWORD, API_KEY, "abcdefghijklmnop"] {
            assert!(!text.contains(secret), "{what} leaks {secret}: {text}");
        }
    };
    let requests = format!("{:?}", model.requests.lock().unwrap());
    leaks("the model requests", &requests);
    assert!(
        requests.contains("[REDACTED]"),
        "the model saw the redacted result"
    );
    let history =
        serde_json::to_string(&store.list_messages(&scope, thread.id).await.unwrap()).unwrap();
    leaks("the stored history", &history);
    let log =
        serde_json::to_string(&store.read_events(&scope, run.id, 0, 100).await.unwrap()).unwrap();
    leaks("the event log", &log);
    leaks("what the observer saw", &seen.lock().unwrap().join("\n"));
    assert!(
        history.contains("postgres://app:[REDACTED]@db/prod"),
        "{history}"
    );
    assert!(history.contains("my key is [REDACTED]"), "{history}");
    assert!(
        history.contains(r#""input":{"echo":"[REDACTED]"}"#),
        "{history}"
    );
    assert!(history.contains("the password is [REDACTED]"), "{history}");
}

/// A model that streams exactly the chunks it is given, one response per call.
struct Chunked {
    responses: Mutex<Vec<Vec<forge_core::ports::model::ModelChunk>>>,
    requests: Mutex<Vec<forge_core::ports::model::ModelRequest>>,
}

#[async_trait::async_trait]
impl forge_core::ports::model::ModelProvider for Chunked {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn stream(
        &self,
        request: forge_core::ports::model::ModelRequest,
    ) -> Result<forge_core::ports::model::ModelStream, forge_core::ports::model::ModelError> {
        self.requests.lock().unwrap().push(request);
        let chunks = self.responses.lock().unwrap().remove(0);
        Ok(Box::pin(futures_util::stream::iter(
            chunks.into_iter().map(Ok),
        )))
    }
}

/// Runs one turn whose model streams `responses`; returns what an observer saw, the event log,
/// the stored history, the terminal text and the model requests, each as text.
async fn streamed_run(
    responses: Vec<Vec<forge_core::ports::model::ModelChunk>>,
    tool_inputs: Arc<Mutex<Vec<String>>>,
) -> Vec<(&'static str, String)> {
    let store = Arc::new(MemoryStore::default());
    let model = Arc::new(Chunked {
        responses: Mutex::new(responses),
        requests: Mutex::new(vec![]),
    });
    let seen_inputs = tool_inputs.clone();
    let echo = native_tool("echo", "echoes", move |_ctx, i: serde_json::Value| {
        seen_inputs.lock().unwrap().push(i.to_string());
        async { Ok::<_, ToolError>(serde_json::json!("ok")) }
    });
    let def = agent(&["echo"], RunLimits::default());
    let engine = Engine::builder()
        .store(store.clone())
        .model(model.clone())
        .tool(Arc::new(echo))
        .unwrap()
        .agent(def.clone())
        .redactor(Redactor::new([DB_PASSWORD]))
        .build()
        .unwrap();
    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let mut state = serde_json::Map::new();
    state.insert("db".into(), serde_json::json!(DB_PASSWORD));
    let thread = store
        .create_thread(
            &scope,
            NewThread {
                title: None,
                state,
                id: None,
            },
        )
        .await
        .unwrap();
    let run = engine
        .start_run(&scope, thread.id, &def.agent, vec![Part::text("go")])
        .await
        .unwrap();
    let seen = Mutex::new(Vec::new());
    let observer = |e: &RunEvent| seen.lock().unwrap().push(serde_json::to_string(e).unwrap());
    let outcome = engine
        .execute(&scope, run.id, &CancellationToken::new(), &observer)
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let log = store.read_events(&scope, run.id, 0, 1000).await.unwrap();
    let terminal = match &log.last().unwrap().kind {
        forge_core::event::RunEventKind::RunCompleted { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    };
    let history = store.list_messages(&scope, thread.id).await.unwrap();
    vec![
        (
            "what an observer saw",
            seen.into_inner().unwrap().join("\n"),
        ),
        (
            "the streamed text",
            forge_core::stream::assistant_text(&log),
        ),
        ("the event log", serde_json::to_string(&log).unwrap()),
        (
            "the stored history",
            serde_json::to_string(&history).unwrap(),
        ),
        ("run.completed.text", terminal),
        (
            "the model requests",
            format!("{:?}", model.requests.lock().unwrap()),
        ),
        ("the tool's input", tool_inputs.lock().unwrap().join("\n")),
    ]
}

fn assert_no_leak(split: usize, places: &[(&'static str, String)]) {
    for (what, text) in places {
        for secret in [
            DB_PASSWORD,
            API_KEY,
            "hunter2",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        ] {
            assert!(
                !text.contains(secret),
                "split at {split}: {what} leaks {secret}: {text}"
            );
        }
    }
}

#[tokio::test]
async fn a_secret_split_across_streamed_text_deltas_never_appears_anywhere() {
    use forge_core::ports::model::{FinishReason, ModelChunk};
    let text = format!("The password is {DB_PASSWORD} and the key is {API_KEY}, sorry.");
    for at in (1..text.len()).filter(|&i| text.is_char_boundary(i)) {
        let chunks = vec![
            ModelChunk::TextDelta(text[..at].to_owned()),
            ModelChunk::TextDelta(text[at..].to_owned()),
            ModelChunk::Finish(FinishReason::Stop),
        ];
        let places = streamed_run(vec![chunks], Arc::default()).await;
        assert_no_leak(at, &places);
        let streamed = &places[1].1;
        assert_eq!(
            streamed, "The password is [REDACTED] and the key is [REDACTED], sorry.",
            "split at {at}: the whole text arrives, scrubbed"
        );
        assert_eq!(
            &places[4].1, streamed,
            "the terminal text is the scrubbed text"
        );
    }
}

#[tokio::test]
async fn a_secret_split_across_tool_input_deltas_never_appears_anywhere() {
    use forge_core::ports::model::{FinishReason, ModelChunk};
    let input = format!(r#"{{"note":"use {DB_PASSWORD} with {API_KEY}"}}"#);
    for at in (1..input.len()).filter(|&i| input.is_char_boundary(i)) {
        let call = vec![
            ModelChunk::ToolCallStart {
                index: 0,
                id: "c1".into(),
                name: "echo".into(),
            },
            ModelChunk::ToolCallDelta {
                index: 0,
                json: input[..at].to_owned(),
            },
            ModelChunk::ToolCallDelta {
                index: 0,
                json: input[at..].to_owned(),
            },
            ModelChunk::Finish(FinishReason::ToolCalls),
        ];
        let answer = vec![
            ModelChunk::TextDelta("done".into()),
            ModelChunk::Finish(FinishReason::Stop),
        ];
        let inputs: Arc<Mutex<Vec<String>>> = Arc::default();
        let places = streamed_run(vec![call, answer], inputs.clone()).await;
        assert_no_leak(at, &places);
        assert_eq!(
            inputs.lock().unwrap().as_slice(),
            [r#"{"note":"use [REDACTED] with [REDACTED]"}"#],
            "split at {at}"
        );
    }
}
