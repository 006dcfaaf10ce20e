//! Public futures and types can cross threads: a compile-time check (it fails to build, not to run).

use forge_core::agent::RunLimits;
use forge_core::id::{RunId, ThreadId};
use forge_core::part::Part;
use forge_engine::{Engine, EngineError, NoopObserver, RunOutcome, ToolRegistry};
use tokio_util::sync::CancellationToken;

use crate::harness::harness;

fn is_send<T: Send>(_: &T) {}
fn is_send_sync<T: Send + Sync>() {}

#[test]
fn engine_types_are_send_and_sync() {
    is_send_sync::<Engine>();
    is_send_sync::<ToolRegistry>();
    is_send_sync::<EngineError>();
    is_send_sync::<RunOutcome>();
}

#[test]
fn engine_futures_are_send() {
    let h = harness(
        "[[conversation]]\n[[conversation.turn]]\ntext = [\"x\"]\n",
        vec![],
        RunLimits::default(),
    );
    let cancel = CancellationToken::new();
    let run = RunId(uuid::Uuid::nil());
    let thread = ThreadId(uuid::Uuid::nil());
    // Built, checked, dropped: never polled.
    let execute = h.engine.execute(&h.scope, run, &cancel, &NoopObserver);
    is_send(&execute);
    let start = h
        .engine
        .start_run(&h.scope, thread, &h.agent, vec![Part::text("x")]);
    is_send(&start);
}
