//! The engine with a real HTTP provider: a model call cancelled mid-stream still counts the usage
//! the provider reported before the cut.

use std::sync::Arc;

use forge_core::agent::RunLimits;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::part::Part;
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::run::RunStatus;
use forge_core::scope::Scope;
use forge_core::time::ManualClock;
use forge_core::usage::Usage;
use forge_engine::Engine;
use forge_providers::http::{HttpProvider, HttpSettings, Timeouts};
use forge_providers::{BodyOptions, Dialect, Secret};
use forge_store_memory::MemoryStore;
use forge_testkit::wire::{Reply, WireServer};
use tokio_util::sync::CancellationToken;

use crate::harness::agent;

#[tokio::test]
async fn cancelling_a_streamed_call_keeps_the_usage_reported_before_the_cut() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../forge-providers/tests/transcripts/anthropic_tool_use_cached.http"
    );
    let reply = Reply::from_http(&std::fs::read(path).unwrap()).unwrap();
    let body = std::str::from_utf8(reply.body()).unwrap();
    let at = body.find("Checking both cities.").unwrap();
    let cut = at + body[at..].find("\n\n").unwrap() + 2;
    let server = WireServer::start(vec![reply.stall_after(cut)])
        .await
        .unwrap();

    let provider = HttpProvider::new(HttpSettings {
        name: "anthropic".into(),
        dialect: Dialect::Anthropic,
        base_url: server.base_url(),
        api_key: Some(Secret::new("k")),
        headers: vec![],
        body: BodyOptions::default(),
        timeouts: Timeouts::default(),
    })
    .unwrap();
    let mut def = agent(&[], RunLimits::default());
    def.model = "anthropic:claude-test".into();
    let clock = Arc::new(ManualClock::at_2026());
    let store = Arc::new(MemoryStore::new(
        clock.clone(),
        Arc::new(forge_core::id::SequentialIds::new()),
    ));
    let engine = Engine::builder()
        .store(store.clone())
        .model(Arc::new(provider))
        .clock(clock)
        .agent(def.clone())
        .build()
        .unwrap();
    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let thread = store
        .create_thread(&scope, NewThread::default())
        .await
        .unwrap();
    let run = engine
        .start_run(&scope, thread.id, &def.agent, vec![Part::text("weather?")])
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let on = move |e: &RunEvent| {
        if matches!(e.kind, RunEventKind::PartAdded { .. }) {
            c.cancel();
        }
    };
    let outcome = engine.execute(&scope, run.id, &cancel, &on).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Cancelled);
    let events = store.read_events(&scope, run.id, 0, 100).await.unwrap();
    let call = events
        .iter()
        .find_map(|e| match &e.kind {
            RunEventKind::UsageUpdated { call, .. } => Some(*call),
            _ => None,
        })
        .expect("a usage.updated event");
    assert_eq!(
        call,
        Usage {
            input_tokens: 4225,
            output_tokens: 1,
            cache_read_tokens: 3000,
            cache_write_tokens: 1200,
            reasoning_tokens: 0,
            server_tool_requests: 0,
        }
    );
}
