//! A scripted agent on the in-memory store, with every event rendered as one line.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::SequentialIds;
use forge_core::part::{Part, PartUpdate};
use forge_core::ports::model::{ModelError, ModelProvider, ModelRequest, ModelStream};
use forge_core::ports::store::{NewRun, NewThread, RunStore, ThreadStore};
use forge_core::ports::tool::Tool;
use forge_core::scope::Scope;
use forge_core::time::ManualClock;
use forge_engine::{Engine, EngineBuilder, RunControl, RunOutcome};
use forge_providers::{Script, ScriptedProvider};
use forge_store_memory::MemoryStore;
use tokio_util::sync::CancellationToken;

/// Wraps a provider and keeps every request it was sent.
pub struct Recording {
    pub inner: ScriptedProvider,
    pub requests: Mutex<Vec<ModelRequest>>,
}

#[async_trait]
impl ModelProvider for Recording {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.stream(request).await
    }
}

pub struct Harness {
    pub engine: Engine,
    pub store: Arc<MemoryStore>,
    pub clock: Arc<ManualClock>,
    pub scope: Scope,
    pub agent: AgentRef,
    pub model: Arc<Recording>,
}

pub struct Finished {
    pub outcome: RunOutcome,
    /// The committed log, one line per event.
    pub log: String,
    pub events: Vec<RunEvent>,
}

pub fn agent(tools: &[&str], limits: RunLimits) -> AgentDefinition {
    AgentDefinition {
        agent: AgentRef {
            name: "tester".into(),
            version: "1".into(),
        },
        instructions: "You are a test agent.".into(),
        model: "scripted:inline".into(),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        skills: vec![],
        output_schema: None,
        limits,
        approvals: Default::default(),
        compaction: None,
    }
}

pub fn harness(script: &str, tools: Vec<Arc<dyn Tool>>, limits: RunLimits) -> Harness {
    let names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    harness_with(script, tools, agent(&names, limits))
}

pub fn harness_with(script: &str, tools: Vec<Arc<dyn Tool>>, def: AgentDefinition) -> Harness {
    harness_built(script, tools, def, |b| b)
}

/// Like [`harness_with`], with a last say over the engine's builder.
pub fn harness_built(
    script: &str,
    tools: Vec<Arc<dyn Tool>>,
    def: AgentDefinition,
    customize: impl FnOnce(EngineBuilder) -> EngineBuilder,
) -> Harness {
    let clock = Arc::new(ManualClock::at_2026());
    let store = Arc::new(MemoryStore::new(
        clock.clone(),
        Arc::new(SequentialIds::new()),
    ));
    let model = Arc::new(Recording {
        inner: ScriptedProvider::new(Script::parse(script, "inline").unwrap()),
        requests: Mutex::new(vec![]),
    });
    let agent = def.agent.clone();
    let mut b: EngineBuilder = Engine::builder()
        .store(store.clone())
        .model(model.clone())
        .clock(clock.clone())
        .ids(Arc::new(SequentialIds::new()))
        .worker_id("w1")
        .agent(def);
    for t in tools {
        b = b.tool(t).unwrap();
    }
    Harness {
        engine: customize(b).build().unwrap(),
        store,
        clock,
        scope: Scope::parse("acme", "alice", &["member"]).unwrap(),
        agent,
        model,
    }
}

impl Harness {
    pub async fn run(&self, input: &str) -> Finished {
        self.run_with(input, &CancellationToken::new(), &|_: &RunEvent| {})
            .await
    }

    pub async fn run_with(
        &self,
        input: &str,
        cancel: &CancellationToken,
        observe: &(dyn Fn(&RunEvent) + Send + Sync),
    ) -> Finished {
        let thread = self
            .store
            .create_thread(&self.scope, NewThread::default())
            .await
            .unwrap();
        self.run_on(thread.id, input, cancel, observe).await
    }

    pub async fn run_on(
        &self,
        thread: forge_core::id::ThreadId,
        input: &str,
        cancel: &CancellationToken,
        observe: &(dyn Fn(&RunEvent) + Send + Sync),
    ) -> Finished {
        self.finish(thread, input, cancel, observe, false).await
    }

    /// [`Harness::run`] through `Engine::submit_and_execute` (the run leased as it is created)
    /// rather than `start_run` and `execute`.
    pub async fn run_inline(&self, input: &str) -> Finished {
        let thread = self
            .store
            .create_thread(&self.scope, NewThread::default())
            .await
            .unwrap();
        self.finish(thread.id, input, &CancellationToken::new(), &|_| {}, true)
            .await
    }

    async fn finish(
        &self,
        thread: forge_core::id::ThreadId,
        input: &str,
        cancel: &CancellationToken,
        observe: &(dyn Fn(&RunEvent) + Send + Sync),
        inline: bool,
    ) -> Finished {
        let live = Mutex::new(Vec::new());
        let observer = |e: &RunEvent| {
            live.lock().unwrap().push(e.clone());
            observe(e);
        };
        let (run, outcome) = if inline {
            let new = NewRun::new(thread, self.agent.clone(), vec![Part::text(input)]);
            let control = RunControl {
                cancel: cancel.clone(),
                ..RunControl::default()
            };
            self.engine
                .submit_and_execute(&self.scope, new, &control, &observer)
                .await
                .unwrap()
        } else {
            let run = self
                .engine
                .start_run(&self.scope, thread, &self.agent, vec![Part::text(input)])
                .await
                .unwrap();
            let outcome = self
                .engine
                .execute(&self.scope, run.id, cancel, &observer)
                .await
                .unwrap();
            (run.id, outcome)
        };
        let events = self
            .store
            .read_events(&self.scope, run, 0, 10_000)
            .await
            .unwrap();
        // What the observer saw live is exactly what was committed.
        assert_eq!(
            *live.lock().unwrap(),
            events,
            "live events differ from the committed log"
        );
        for (i, e) in events.iter().enumerate() {
            assert_eq!(
                e.seq,
                i as u64 + 1,
                "sequence numbers must be gapless from 1"
            );
        }
        assert_eq!(outcome.last_seq, events.len() as u64);
        let log = events.iter().map(line).collect::<Vec<_>>().join("\n");
        if std::env::var_os("PRINT_EVENT_LOG").is_some() {
            println!("--- event log\n{log}\n---");
        }
        Finished {
            outcome,
            log,
            events,
        }
    }
}

fn compact(v: &serde_json::Value) -> String {
    v.to_string()
}

fn part(p: &Part) -> String {
    match p {
        Part::Text(t) => format!("text {:?}", t.text),
        Part::ToolCall(c) => format!(
            "tool_call {} {} {}",
            c.tool_call_id,
            c.tool_name,
            compact(&c.input)
        ),
        Part::ToolResult(r) => {
            format!(
                "tool_result {} {}{}",
                r.tool_call_id,
                if r.is_error { "error " } else { "" },
                compact(&r.output)
            )
        }
        Part::Error(e) => format!("error {} {:?}", e.code, e.message),
        other => format!("{} …", other.type_name()),
    }
}

/// One line per event: sequence, type and the fields that matter.
pub fn line(e: &RunEvent) -> String {
    let body = match &e.kind {
        RunEventKind::RunStarted { agent, model, .. } => {
            format!("{}@{} {model}", agent.name, agent.version)
        }
        RunEventKind::StepStarted { step } => format!("{step}"),
        RunEventKind::PartAdded {
            role,
            index,
            part: p,
            ..
        } => format!("{role:?}[{index}] {}", part(p)),
        RunEventKind::PartUpdated { index, update, .. } => match update {
            PartUpdate::TextDelta { text } => format!("[{index}] +{text:?}"),
            PartUpdate::InputDelta { json } => format!("[{index}] +json {json}"),
            PartUpdate::Replaced { part: p } => format!("[{index}] = {}", part(p)),
        },
        RunEventKind::UsageUpdated { step, .. } => format!("step {step}"),
        RunEventKind::RunCheckpointed { step, version } => format!("step {step} v{version}"),
        RunEventKind::RunCompleted { text, .. } => format!("{text:?}"),
        RunEventKind::RunFailed { failure } => format!("{:?}: {}", failure.code, failure.message),
        RunEventKind::RunCancelled { reason } => format!("{reason:?}"),
        other => format!("{other:?}"),
    };
    format!("{} {} {body}", e.seq, e.kind.type_name())
}

/// One metric recording: its instrument, value and attributes.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub instrument: forge_core::telemetry::Instrument,
    pub value: f64,
    pub attrs: Vec<(&'static str, String)>,
}

impl Recorded {
    /// The attribute `key`'s value, or "" when it has none.
    pub fn attr(&self, key: &str) -> &str {
        self.attrs
            .iter()
            .find(|(k, _)| *k == key)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// A meter that keeps every recording, for tests to read.
#[derive(Default)]
pub struct Metrics(Mutex<Vec<Recorded>>);

impl forge_core::telemetry::Meter for Metrics {
    fn record(
        &self,
        instrument: forge_core::telemetry::Instrument,
        value: f64,
        attrs: &[(&'static str, &str)],
    ) {
        let attrs = attrs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        self.0.lock().unwrap().push(Recorded {
            instrument,
            value,
            attrs,
        });
    }
}

impl Metrics {
    /// The recordings of `instrument` so far.
    pub fn of(&self, instrument: forge_core::telemetry::Instrument) -> Vec<Recorded> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|r| r.instrument == instrument)
            .cloned()
            .collect()
    }

    /// Takes every recording of `instrument` so far, leaving the others.
    pub fn take(&self, instrument: forge_core::telemetry::Instrument) -> Vec<Recorded> {
        let mut all = self.0.lock().unwrap();
        let (taken, kept) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|r| r.instrument == instrument);
        *all = kept;
        taken
    }
}
