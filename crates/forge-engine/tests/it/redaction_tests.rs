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
