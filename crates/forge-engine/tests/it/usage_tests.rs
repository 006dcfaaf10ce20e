//! Metering through the engine: every call reserved and settled by default, costs from the price
//! table, run ceilings, tenant quotas, provider actuals reconciled exactly, rollups per day.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use forge_core::agent::{AgentDefinition, RunLimits};
use forge_core::event::RunEventKind;
use forge_core::id::{RunId, SequentialIds};
use forge_core::metering::{CallStatus, ModelPrice, Prices, Quota, QuotaPeriod};
use forge_core::part::Part;
use forge_core::ports::model::ModelProvider;
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::run::{FailureCode, RunStatus};
use forge_core::scope::Scope;
use forge_core::time::{Clock, ManualClock, Timestamp};
use forge_core::usage::Usage;
use forge_engine::{Engine, NoopObserver, RunOutcome};
use forge_providers::http::{HttpProvider, HttpSettings, Timeouts};
use forge_providers::{BodyOptions, Dialect, Script, ScriptedProvider, Secret};
use forge_store_memory::MemoryStore;
use forge_testkit::wire::{Reply, WireServer};
use tokio_util::sync::CancellationToken;

use crate::harness::{Recording, agent};

const TWO_STEPS: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "calculate", input = { op = "add", a = 1, b = 2 } }]
[[conversation.turn]]
text = ["three"]
"#;

fn prices(model: &str, price: ModelPrice) -> Prices {
    Prices {
        currency: "USD".into(),
        models: BTreeMap::from([(model.to_owned(), price)]),
    }
}

const PRICE: ModelPrice = ModelPrice {
    input: 3_000_000,
    output: 15_000_000,
    cache_read: 300_000,
    cache_write: 3_750_000,
    server_tool_request: 0,
};

struct Setup {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    scope: Scope,
}

impl Setup {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::at_2026());
        Self {
            store: Arc::new(MemoryStore::new(
                clock.clone(),
                Arc::new(SequentialIds::new()),
            )),
            clock,
            scope: Scope::parse("acme", "alice", &[]).unwrap(),
        }
    }

    fn engine(
        &self,
        model: Arc<dyn ModelProvider>,
        def: &AgentDefinition,
        configure: impl FnOnce(forge_engine::EngineBuilder) -> forge_engine::EngineBuilder,
    ) -> Engine {
        configure(
            Engine::builder()
                .store(self.store.clone())
                .model(model)
                .clock(self.clock.clone())
                .tool(crate::tools_tests::calculator())
                .unwrap()
                .agent(def.clone()),
        )
        .build()
        .unwrap()
    }

    async fn run(&self, engine: &Engine, def: &AgentDefinition) -> (RunId, RunOutcome) {
        let thread = self
            .store
            .create_thread(&self.scope, NewThread::default())
            .await
            .unwrap();
        let run = engine
            .start_run(&self.scope, thread.id, &def.agent, vec![Part::text("add")])
            .await
            .unwrap();
        let outcome = engine
            .execute(
                &self.scope,
                run.id,
                &CancellationToken::new(),
                &NoopObserver,
            )
            .await
            .unwrap();
        (run.id, outcome)
    }
}

fn scripted(script: &str) -> Arc<Recording> {
    Arc::new(Recording {
        inner: ScriptedProvider::new(Script::parse(script, "inline").unwrap()),
        requests: Default::default(),
    })
}

#[tokio::test]
async fn every_call_is_reserved_settled_and_priced_by_default() {
    let s = Setup::new();
    let def = agent(&["calculate"], RunLimits::default());
    let model = scripted(TWO_STEPS);
    let engine = s.engine(model.clone(), &def, |b| b.prices(prices(&def.model, PRICE)));
    let (run, outcome) = s.run(&engine, &def).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let calls = engine.run_usage(&s.scope, run).await.unwrap();
    assert_eq!(calls.len(), 2, "one record per model call");
    let events = s.store.read_events(&s.scope, run, 0, 100).await.unwrap();
    let reported: Vec<Usage> = events
        .iter()
        .filter_map(|e| match &e.kind {
            RunEventKind::UsageUpdated { call, .. } => Some(*call),
            _ => None,
        })
        .collect();
    let mut total_cost = 0;
    for (c, usage) in calls.iter().zip(&reported) {
        assert_eq!(c.status, CallStatus::Settled);
        assert_eq!(
            c.actual,
            Some(*usage),
            "settled with what the provider reported"
        );
        assert_eq!(c.cost_micros, Some(PRICE.cost(usage)));
        assert!(c.estimated_cost_micros > 0 && c.estimate.input_tokens > 0);
        total_cost += PRICE.cost(usage);
    }
    let run = s.store.get_run(&s.scope, run).await.unwrap();
    assert_eq!(
        run.checkpoint.cost_micros, total_cost,
        "the run's cost is the sum"
    );
}

/// The first call's input, estimated as the engine does, on an unlimited run.
async fn first_input(s: &Setup) -> u64 {
    let free = agent(&["calculate"], RunLimits::default());
    let probe = s.engine(scripted(TWO_STEPS), &free, |b| b);
    let (probe_run, _) = s.run(&probe, &free).await;
    probe.run_usage(&s.scope, probe_run).await.unwrap()[0]
        .estimate
        .input_tokens
}

/// Under a token ceiling every call carries an output cap that fits what the run has left
/// (issue 17, item 4): the provider cannot spend past the ceiling, whatever it would say.
#[tokio::test]
async fn a_token_ceiling_caps_each_calls_output_at_what_is_left() {
    let s = Setup::new();
    let input = first_input(&s).await;
    let max = input + 1024;
    let def = agent(
        &["calculate"],
        RunLimits {
            max_tokens: Some(max),
            ..RunLimits::default()
        },
    );
    let model = scripted(TWO_STEPS);
    let engine = s.engine(model.clone(), &def, |b| b);
    let (run, outcome) = s.run(&engine, &def).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests[0].max_output_tokens, Some(1024));
    let calls = engine.run_usage(&s.scope, run).await.unwrap();
    let spent = calls[0].actual.unwrap().total_tokens();
    let second = u64::from(requests[1].max_output_tokens.expect("a cap"));
    assert!(second < 1024, "lowered to what is left: {second}");
    assert_eq!(
        calls[1].estimate.input_tokens + second,
        max - spent,
        "the second call's cap is exactly what the ceiling leaves after its input"
    );
}

#[tokio::test]
async fn a_token_ceiling_stops_a_run_mid_loop_before_the_call() {
    let s = Setup::new();
    // A ceiling that admits the first call with the smallest cap; the second (whose history is
    // longer, on top of what the first spent) has less than that left, and is not made.
    let input = first_input(&s).await;
    let first = input + forge_engine::context::MIN_OUTPUT;
    let def = agent(
        &["calculate"],
        RunLimits {
            max_tokens: Some(first),
            ..RunLimits::default()
        },
    );
    let model = scripted(TWO_STEPS);
    let engine = s.engine(model.clone(), &def, |b| b);
    let (run, outcome) = s.run(&engine, &def).await;
    assert_eq!(outcome.status, RunStatus::Failed);
    let failure = outcome.failure.unwrap();
    assert_eq!(failure.code, FailureCode::BudgetExceeded);
    assert!(
        failure.message.contains(&format!("of its {first} tokens")),
        "{}",
        failure.message
    );
    assert_eq!(
        model.requests.lock().unwrap().len(),
        1,
        "the second call was not made"
    );
    assert_eq!(engine.run_usage(&s.scope, run).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_cost_ceiling_stops_a_run_too() {
    let s = Setup::new();
    let def = agent(
        &["calculate"],
        RunLimits {
            max_cost_micros: Some(1),
            ..RunLimits::default()
        },
    );
    let model = scripted(TWO_STEPS);
    let engine = s.engine(model.clone(), &def, |b| b.prices(prices(&def.model, PRICE)));
    let (_, outcome) = s.run(&engine, &def).await;
    assert_eq!(outcome.failure.unwrap().code, FailureCode::BudgetExceeded);
    assert!(
        model.requests.lock().unwrap().is_empty(),
        "no call was made"
    );
}

#[tokio::test]
async fn a_tenant_over_quota_is_refused_before_any_model_call() {
    let s = Setup::new();
    let def = agent(&["calculate"], RunLimits::default());
    let model = scripted(TWO_STEPS);
    let quota = Quota {
        period: QuotaPeriod::Day,
        max_tokens: Some(100),
        max_cost_micros: None,
    };
    let engine = s.engine(model.clone(), &def, |b| {
        b.tenant_quota(s.scope.tenant_id().clone(), quota)
    });
    let (run, outcome) = s.run(&engine, &def).await;
    assert_eq!(outcome.status, RunStatus::Failed);
    let failure = outcome.failure.unwrap();
    assert_eq!(failure.code, FailureCode::QuotaExceeded);
    assert!(
        failure.message.contains("tenant acme"),
        "{}",
        failure.message
    );
    assert!(
        model.requests.lock().unwrap().is_empty(),
        "no model call was made"
    );
    assert!(engine.run_usage(&s.scope, run).await.unwrap().is_empty());
    // Another tenant is not held to acme's quota.
    let other = Setup {
        store: s.store.clone(),
        clock: s.clock.clone(),
        scope: Scope::parse("globex", "bob", &[]).unwrap(),
    };
    let (_, ok) = other.run(&engine, &def).await;
    assert_eq!(ok.status, RunStatus::Completed);
}

fn http(name: &str, dialect: Dialect, base_url: String) -> Arc<dyn ModelProvider> {
    Arc::new(
        HttpProvider::new(HttpSettings {
            name: name.into(),
            dialect,
            base_url,
            api_key: Some(Secret::new("k")),
            headers: vec![],
            body: BodyOptions::default(),
            timeouts: Timeouts::default(),
        })
        .unwrap(),
    )
}

fn transcript(name: &str) -> Reply {
    let path = format!(
        "{}/../forge-providers/tests/transcripts/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    Reply::from_http(&std::fs::read(path).unwrap()).unwrap()
}

#[tokio::test]
async fn usage_from_provider_transcripts_reconciles_exactly_cache_tokens_included() {
    let s = Setup::new();
    let server = WireServer::start(vec![transcript("anthropic_usage_in_message_delta.http")])
        .await
        .unwrap();
    let mut def = agent(&[], RunLimits::default());
    def.model = "anthropic:claude-test".into();
    let engine = s.engine(
        http("anthropic", Dialect::Anthropic, server.base_url()),
        &def,
        |b| b.prices(prices(&def.model, PRICE)),
    );
    let (run, outcome) = s.run(&engine, &def).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let calls = engine.run_usage(&s.scope, run).await.unwrap();
    let expected = Usage {
        input_tokens: 57 + 512,
        output_tokens: 4,
        cache_read_tokens: 512,
        ..Usage::default()
    };
    assert_eq!(calls[0].actual, Some(expected));
    // 57 uncached × $3/M + 512 cached × $0.30/M + 4 × $15/M, in micro-dollars, rounded up.
    assert_eq!(calls[0].cost_micros, Some(171 + 154 + 60));
    let report = engine
        .reconciliation(
            &s.scope,
            s.clock.now().minus(Duration::from_secs(86_400)),
            s.clock.now().plus(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert_eq!(report.len(), 1);
    assert_eq!(report[0].actual_tokens, Some(expected.total_tokens()));
    assert_eq!(
        report[0].token_drift,
        Some(expected.total_tokens() as i64 - report[0].estimated_tokens as i64)
    );

    // OpenAI Chat: the request id from the response headers is kept for reconciliation.
    let server = WireServer::start(vec![transcript("openai_chat_text.http")])
        .await
        .unwrap();
    let mut def = agent(&[], RunLimits::default());
    def.model = "openai:gpt-test".into();
    let engine = s.engine(
        http(
            "openai",
            Dialect::OpenAiChat,
            format!("{}/v1", server.base_url()),
        ),
        &def,
        |b| b,
    );
    let (run, _) = s.run(&engine, &def).await;
    let calls = engine.run_usage(&s.scope, run).await.unwrap();
    assert_eq!(calls[0].request_id.as_deref(), Some("req_chat_text_1"));
    assert_eq!(calls[0].actual.map(|u| u.reasoning_tokens), Some(3));
    // Issue 17, item 11: the model the provider says answered is kept with the call.
    assert_eq!(
        calls[0].provider_model.as_deref(),
        Some("gpt-4o-mini-2024-07-18")
    );
}

#[tokio::test]
async fn a_failed_stream_settles_with_what_was_reported_or_keeps_the_estimate_flagged() {
    let s = Setup::new();
    // Anthropic reports input usage in message_start, then errors: the call settles with it.
    let server = WireServer::start(vec![transcript("anthropic_error_event_overloaded.http")])
        .await
        .unwrap();
    let mut def = agent(&[], RunLimits::default());
    def.model = "anthropic:claude-test".into();
    let engine = s.engine(
        http("anthropic", Dialect::Anthropic, server.base_url()),
        &def,
        |b| b.prices(prices(&def.model, PRICE)),
    );
    let (run, outcome) = s.run(&engine, &def).await;
    assert_eq!(outcome.status, RunStatus::Failed);
    let call = engine.run_usage(&s.scope, run).await.unwrap().remove(0);
    assert_eq!(call.status, CallStatus::Settled);
    assert_eq!(call.actual.map(|u| u.input_tokens), Some(300));

    // A stream that fails before reporting anything keeps the estimate, flagged.
    let script = r#"
[[conversation]]
[[conversation.turn]]
text = ["a", "b"]
error = { after_chunks = 1, code = "server_error" }
"#;
    let def = agent(&[], RunLimits::default());
    let engine = s.engine(scripted(script), &def, |b| {
        b.prices(prices(&def.model, PRICE))
    });
    let (run, _) = s.run(&engine, &def).await;
    let call = engine.run_usage(&s.scope, run).await.unwrap().remove(0);
    assert_eq!(call.status, CallStatus::Unreconciled);
    assert_eq!(call.actual, None);
    assert_eq!(call.cost_micros, Some(call.estimated_cost_micros));
    let run = s.store.get_run(&s.scope, run).await.unwrap();
    assert_eq!(run.checkpoint.cost_micros, call.estimated_cost_micros);
}

#[tokio::test]
async fn rollups_split_at_utc_midnight_with_a_pinned_clock() {
    let s = Setup::new();
    let def = agent(&["calculate"], RunLimits::default());
    let engine = s.engine(scripted(TWO_STEPS), &def, |b| {
        b.prices(prices(&def.model, PRICE))
    });
    // 2026-01-01T23:59:00Z, then the next day.
    s.clock.advance(Duration::from_secs(23 * 3600 + 59 * 60));
    s.run(&engine, &def).await;
    s.clock.advance(Duration::from_secs(120));
    s.run(&engine, &def).await;
    s.run(&engine, &def).await;
    let day1 = Timestamp::from_unix_millis(1_767_225_600_000).unwrap();
    let rollups = engine
        .rollups(&s.scope, day1, day1.plus(Duration::from_secs(3 * 86_400)))
        .await
        .unwrap();
    let days: Vec<(String, u64)> = rollups
        .iter()
        .map(|r| (r.day.to_string(), r.calls))
        .collect();
    assert_eq!(
        days,
        vec![
            ("2026-01-01T00:00:00.000Z".to_owned(), 2),
            ("2026-01-02T00:00:00.000Z".to_owned(), 4)
        ]
    );
    assert_eq!(rollups[1].cost_micros, 2 * rollups[0].cost_micros);
    assert!(
        rollups
            .iter()
            .all(|r| r.unreconciled == 0 && r.model == def.model)
    );
    let only_day2 = engine
        .rollups(
            &s.scope,
            day1.plus(Duration::from_secs(86_400)),
            day1.plus(Duration::from_secs(2 * 86_400)),
        )
        .await
        .unwrap();
    assert_eq!(only_day2.len(), 1);
}

/// A model missing from the price table would cost nothing against a cost ceiling or a cost quota
/// (issue 17, item 4): such a configuration is refused when the engine is built.
#[test]
fn a_cost_bound_without_a_price_is_refused_at_start() {
    let s = Setup::new();
    let capped = agent(
        &["calculate"],
        RunLimits {
            max_cost_micros: Some(1_000),
            ..RunLimits::default()
        },
    );
    let build = |def: &AgentDefinition, prices: Prices, quota: Option<Quota>| {
        let mut b = Engine::builder()
            .store(s.store.clone())
            .model(scripted(TWO_STEPS))
            .tool(crate::tools_tests::calculator())
            .unwrap()
            .prices(prices)
            .agent(def.clone());
        if let Some(q) = quota {
            b = b.quota(q);
        }
        b.build().map(|_| ())
    };
    let err = build(&capped, Prices::default(), None).unwrap_err();
    assert!(err.to_string().contains("has no price"), "{err}");
    build(&capped, prices(&capped.model, PRICE), None).expect("priced: accepted");
    let plain = agent(&["calculate"], RunLimits::default());
    let cost_quota = Quota {
        period: QuotaPeriod::Month,
        max_tokens: None,
        max_cost_micros: Some(5_000_000),
    };
    let err = build(&plain, Prices::default(), Some(cost_quota)).unwrap_err();
    assert!(err.to_string().contains("cost quota"), "{err}");
    let token_quota = Quota {
        max_cost_micros: None,
        max_tokens: Some(1_000),
        ..cost_quota
    };
    build(&plain, Prices::default(), Some(token_quota)).expect("a token quota needs no price");
    // The model that summarises the thread is called under the same bounds (issue 62, item 12):
    // without a price it is refused like the agent's own.
    let mut summarised = capped.clone();
    summarised.compaction = Some(forge_core::agent::CompactionConfig {
        model: Some("scripted:summariser".into()),
        ..forge_core::agent::CompactionConfig::new(10_000)
    });
    let err = build(&summarised, prices(&capped.model, PRICE), None).unwrap_err();
    assert!(
        err.to_string()
            .contains("model scripted:summariser has no price"),
        "{err}"
    );
    let mut both = prices(&capped.model, PRICE);
    both.models.insert("scripted:summariser".into(), PRICE);
    build(&summarised, both, None).expect("both priced: accepted");
}

/// A usage report reads its calls whole, so its range is bounded (issue 17, item 8): at most
/// `MAX_USAGE_RANGE`, and it must end after it starts.
#[tokio::test]
async fn usage_reports_refuse_unbounded_ranges() {
    let s = Setup::new();
    let def = agent(&["calculate"], RunLimits::default());
    let engine = s.engine(scripted(TWO_STEPS), &def, |b| b);
    let from = s.clock.now();
    let day = Duration::from_secs(86_400);
    assert!(
        engine
            .rollups(&s.scope, from, from.plus(day * 92))
            .await
            .is_ok()
    );
    for (to, why) in [
        (from.plus(day * 93), "93 days"),
        (from, "empty"),
        (from.plus(day * 36_500), "a century"),
    ] {
        let err = engine.rollups(&s.scope, from, to).await.unwrap_err();
        assert_eq!(err.kind(), forge_core::ErrorKind::Invalid, "{why}: {err}");
        assert!(
            engine.reconciliation(&s.scope, from, to).await.is_err(),
            "{why}"
        );
    }
}
