//! The real engine as a [`CaseRunner`]: each case runs as a run like any other — a thread, a
//! queued run, an in-process worker claiming only that run — under the dataset's agents,
//! policies and sources; approvals are decided by the case's reviewer, questions answered from
//! the case; injected faults wrap the real providers and tools, and a killed worker's run is
//! resumed by another worker once its claim and lease lapse.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use forge_core::interaction::{Decision, InteractionRequest, InteractionStatus, Resolve};
use forge_core::metering::CallStatus;
use forge_core::part::Part;
use forge_core::ports::model::ModelProvider;
use forge_core::ports::store::{NewThread, Store};
use forge_core::ports::tool::Tool;
use forge_core::run::RunStatus;
use forge_core::scope::Scope;
use forge_engine::{Engine, RunObserver, Worker, WorkerConfig};
use forge_eval::dataset::{ApprovalPlan, Case, Dataset};
use forge_eval::{CaseRunner, RunRecord};
use forge_providers::{RetryPolicy, Retrying};
use tokio_util::sync::CancellationToken;

use super::faults::{FaultyModel, FaultyTool, KillSwitch, WorkerKilled};
use crate::agent_file::{LoadedAgent, ProviderArgs};
use crate::builtin::Ledger;
use crate::compose::{AccessArgs, EngineSettings};
use crate::metering::MeteringArgs;

/// Leases of a case with a worker kill: short, so the resuming worker takes over in about a
/// second.
const KILL_LEASE: Duration = Duration::from_millis(800);

/// Retries under injected model faults: the policy HTTP providers get, with quick backoff.
fn retry_policy() -> RetryPolicy {
    RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        max_retry_after: Duration::from_secs(1),
    }
}

/// Everything a case's engine is built from.
pub(crate) struct EngineRunner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) sources: Arc<dyn forge_rag::SourceStore>,
    pub(crate) agents: Vec<LoadedAgent>,
    /// Dataset agent name → the agent it runs.
    pub(crate) names: BTreeMap<String, forge_core::agent::AgentRef>,
    pub(crate) providers: ProviderArgs,
    pub(crate) metering: MeteringArgs,
    pub(crate) access: AccessArgs,
    pub(crate) mcp: Option<forge_mcp::McpRuntime>,
    pub(crate) models: Vec<Arc<dyn ModelProvider>>,
    /// One payments ledger for every engine: the external service the example tool writes to.
    pub(crate) ledger: Arc<Ledger>,
    /// The tenant of the scoring run, for cases and datasets that name none.
    pub(crate) tenant: String,
    pub(crate) workers: AtomicU64,
    /// Tenants whose sources are ingested.
    pub(crate) ingested: tokio::sync::Mutex<BTreeSet<String>>,
}

fn runner_error(case: &Case, e: impl std::fmt::Display, retryable: bool) -> forge_eval::Error {
    forge_eval::Error::Runner {
        case: case.id.clone(),
        message: e.to_string(),
        retryable,
    }
}

impl EngineRunner {
    fn scope(&self, dataset: &Dataset, case: &Case) -> anyhow::Result<Scope> {
        let tenant = case
            .tenant
            .as_deref()
            .or(dataset.defaults.tenant.as_deref())
            .unwrap_or(&self.tenant);
        let principal = case
            .principal
            .as_deref()
            .unwrap_or(&dataset.defaults.principal);
        let roles = case.roles.as_ref().unwrap_or(&dataset.defaults.roles);
        let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
        Scope::parse(tenant, principal, &roles).context("failed to build the case's scope")
    }

    fn reviewer(&self, dataset: &Dataset, scope: &Scope) -> anyhow::Result<Scope> {
        let r = &dataset.defaults.reviewer;
        let roles: Vec<&str> = r.roles.iter().map(String::as_str).collect();
        Scope::parse(scope.tenant_id().as_str(), &r.principal, &roles)
            .context("failed to build the reviewer's scope")
    }

    /// An engine for `case`, executing as a worker of its own name.
    fn engine(
        &self,
        case: &Case,
        models: &[Arc<dyn ModelProvider>],
        tools: Vec<Arc<dyn Tool>>,
    ) -> anyhow::Result<(Arc<Engine>, String)> {
        let id = format!(
            "eval-{}-{}",
            std::process::id(),
            self.workers.fetch_add(1, Ordering::SeqCst) + 1
        );
        let settings = EngineSettings {
            agents: &self.agents,
            providers: &self.providers,
            metering: &self.metering,
            access: &self.access,
            mcp: self.mcp.as_ref(),
            sources: Some(self.sources.clone()),
        };
        let mut builder =
            crate::compose::builder_with_tools(self.store.clone(), &settings, models, tools)?
                .worker_id(id.clone());
        if case.faults.kill_worker.is_some() {
            builder = builder.lease_ttl(KILL_LEASE);
        }
        Ok((
            Arc::new(builder.build().context("failed to build the engine")?),
            id,
        ))
    }

    /// Ingests the dataset's sources into `scope`'s tenant, once per tenant.
    async fn ingest(&self, dataset: &Dataset, scope: &Scope) -> anyhow::Result<()> {
        if dataset.sources.is_empty() {
            return Ok(());
        }
        let mut done = self.ingested.lock().await;
        if done.contains(scope.tenant_id().as_str()) {
            return Ok(());
        }
        let retriever = self
            .access
            .embedder
            .retriever(self.sources.clone(), self.access.authorizer()?)?;
        for s in &dataset.sources {
            let format = match s.format.as_str() {
                "text" => forge_rag::Format::Text,
                "html" => forge_rag::Format::Html,
                _ => forge_rag::Format::Markdown,
            };
            let source = forge_rag::ingest::ingest(
                forge_rag::SourceId::new(s.id.clone())
                    .with_context(|| format!("source id {}", s.id))?,
                s.title.clone(),
                s.label.clone(),
                format,
                serde_json::Value::Null,
                &s.text,
            );
            let source = match &s.owner {
                Some(owner) => source.owned_by(owner),
                None => source,
            };
            retriever
                .index(scope, &source)
                .await
                .with_context(|| format!("failed to ingest source {}", s.id))?;
        }
        done.insert(scope.tenant_id().as_str().to_owned());
        Ok(())
    }

    async fn run(&self, dataset: &Dataset, case: &Case) -> anyhow::Result<RunRecord> {
        let scope = self.scope(dataset, case)?;
        self.ingest(dataset, &scope).await?;
        let agent_name = case.agent.as_deref().unwrap_or_default();
        let agent = self
            .names
            .get(agent_name)
            .with_context(|| format!("agent {agent_name} is not loaded"))?
            .clone();
        let definition = self
            .agents
            .iter()
            .find(|a| a.definition.agent == agent)
            .map(|a| a.definition.clone())
            .with_context(|| format!("agent {agent_name} is not loaded"))?;
        // The case's faults wrap the real providers and tools, shared by every execution.
        let models: Vec<Arc<dyn ModelProvider>> = if case.faults.model.is_empty() {
            self.models.clone()
        } else {
            self.models
                .iter()
                .map(|m| {
                    let faulty: Arc<dyn ModelProvider> =
                        Arc::new(FaultyModel::new(m.clone(), case.faults.model.clone()));
                    Arc::new(Retrying::new(faulty, retry_policy())) as Arc<dyn ModelProvider>
                })
                .collect()
        };
        let tools: Vec<Arc<dyn Tool>> = crate::builtin::tools_with(self.ledger.clone())
            .into_iter()
            .map(|t| FaultyTool::wrap(t, &case.faults.tools))
            .collect();
        let (engine, worker_id) = self.engine(case, &models, tools.clone())?;

        let thread = self
            .store
            .create_thread(&scope, NewThread::default())
            .await
            .context("failed to create the case's thread")?;
        if let Some(state) = &case.state {
            engine
                .update_thread_state(&scope, thread.id, 0, state.clone())
                .await
                .context("failed to set the case's session state")?;
        }
        let run = engine
            .start_run(
                &scope,
                thread.id,
                &agent,
                vec![Part::text(case.message.clone())],
            )
            .await
            .context("failed to start the case's run")?;

        let timeout = Duration::from_millis(case.timeout_ms.unwrap_or(dataset.defaults.timeout_ms));
        let deadline = Instant::now() + timeout;
        let reviewer = self.reviewer(dataset, &scope)?;
        let mut answers = case.answers.iter();
        let mut kill = case.faults.kill_worker.as_ref().map(|k| k.after_events);
        let (mut engine, mut worker_id) = (engine, worker_id);
        let drain = CancellationToken::new();
        let lease = if kill.is_some() {
            KILL_LEASE
        } else {
            Duration::from_secs(30)
        };
        let config = |id: &str| WorkerConfig {
            id: id.to_owned(),
            claim_ttl: lease,
            poll_interval: Duration::from_millis(20),
            concurrency: 1,
            only_run: Some(run.id),
            ..WorkerConfig::default()
        };
        let mut resolved = 0usize;
        loop {
            let current = self.store.get_run(&scope, run.id).await?;
            if current.status.is_terminal() || Instant::now() >= deadline {
                break;
            }
            if let RunStatus::Waiting(_) = current.status {
                let pending: Vec<_> = engine
                    .run_interactions(&scope, run.id)
                    .await?
                    .into_iter()
                    .filter(|i| i.status == InteractionStatus::Pending)
                    .collect();
                let pending_empty = pending.is_empty();
                let mut acted = false;
                for i in pending {
                    let decision = match (&i.request, case.approvals) {
                        (InteractionRequest::Approval { .. }, ApprovalPlan::Approve) => {
                            Some(Decision::Approve)
                        }
                        (InteractionRequest::Approval { .. }, ApprovalPlan::Reject) => {
                            Some(Decision::Reject {
                                reason: Some("declined by the evaluation's reviewer".into()),
                            })
                        }
                        (InteractionRequest::Approval { .. }, ApprovalPlan::Leave) => None,
                        (InteractionRequest::Question { .. }, _) => answers
                            .next()
                            .map(|a| Decision::Answer { answer: a.clone() }),
                    };
                    let Some(decision) = decision else { continue };
                    let (who, input_hash) = match &i.request {
                        InteractionRequest::Approval { input_hash, .. } => {
                            (&reviewer, Some(input_hash.clone()))
                        }
                        InteractionRequest::Question { .. } => (&scope, None),
                    };
                    resolved += 1;
                    engine
                        .resolve_interaction(
                            who,
                            Resolve {
                                id: i.id,
                                decision,
                                actor: who.principal_id().as_str().to_owned(),
                                key: format!("eval:{}:{resolved}", case.id),
                                input_hash,
                            },
                        )
                        .await
                        .with_context(|| format!("failed to resolve interaction {}", i.id))?;
                    acted = true;
                }
                if !acted && !pending_empty {
                    // Left waiting (or out of answers): graded as it stands.
                    break;
                }
                // Settled: a worker resumes it.
            }
            let worker = Worker::new(engine.clone(), self.store.clone(), config(&worker_id));
            match kill {
                Some(after) => {
                    let switch = Arc::new(KillSwitch::new(after));
                    let worker = worker.with_observer(switch.clone() as Arc<dyn RunObserver>);
                    let task_drain = drain.clone();
                    let task = tokio::spawn(async move { worker.run_one(&task_drain).await });
                    match task.await {
                        Err(e) if e.is_panic() => {
                            let payload = e.into_panic();
                            if !payload.is::<WorkerKilled>() {
                                std::panic::resume_unwind(payload);
                            }
                        }
                        Err(e) => anyhow::bail!("the worker was lost: {e}"),
                        // The worker fails the job of an execution that unwound.
                        Ok(Ok(Some(forge_engine::JobOutcome::Failed(_)))) if switch.fired() => {}
                        Ok(finished) => {
                            finished?;
                            anyhow::bail!(
                                "the kill point (after {after} events) was never reached: the run emitted fewer"
                            );
                        }
                    }
                    kill = None;
                    // Another worker, another engine; the same faulty providers and tools.
                    let (next, id) = self.engine(case, &models, tools.clone())?;
                    engine = next;
                    worker_id = id;
                }
                None => {
                    if worker.run_one(&drain).await?.is_none() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }

        let finished = self.store.get_run(&scope, run.id).await?;
        let mut events = Vec::new();
        loop {
            let page = self
                .store
                .read_events(&scope, run.id, events.len() as u64, 1000)
                .await?;
            if page.is_empty() {
                break;
            }
            events.extend(page);
        }
        let calls = engine.run_usage(&scope, run.id).await?;
        let mut usage = forge_core::usage::Usage::default();
        let (mut cost, mut model_calls, mut paid) = (0u64, 0u32, 0u32);
        for c in calls
            .iter()
            .filter(|c| matches!(c.status, CallStatus::Settled | CallStatus::Unreconciled))
        {
            usage += c.actual.unwrap_or(c.estimate);
            cost += c.cost_micros.unwrap_or(c.estimated_cost_micros);
            model_calls += 1;
            if !c.model.starts_with("scripted:") {
                paid += 1;
            }
        }
        Ok(RunRecord {
            run_id: run.id.to_string(),
            status: finished.status,
            failure: finished.failure,
            events,
            output_schema: definition.output_schema,
            usage,
            cost_micros: cost,
            model_calls,
            paid_calls: paid,
        })
    }
}

#[async_trait]
impl CaseRunner for EngineRunner {
    async fn run_case(
        &self,
        dataset: &Dataset,
        case: &Case,
    ) -> Result<RunRecord, forge_eval::Error> {
        self.run(dataset, case).await.map_err(|e| {
            let retryable = e
                .downcast_ref::<forge_core::Error>()
                .is_some_and(|e| e.kind() == forge_core::ErrorKind::Retryable);
            runner_error(case, format!("{e:#}"), retryable)
        })
    }
}
