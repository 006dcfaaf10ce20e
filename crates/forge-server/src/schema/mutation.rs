//! Mutations.

use super::*;
use crate::limiter::Whose;

/// What to do when the thread already has an active run.
#[derive(Enum, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Wait behind it.
    #[default]
    Enqueue,
    /// Refuse (`CONFLICT`).
    Reject,
    /// Cancel it, then start.
    Interrupt,
}

/// Starts a run.
#[derive(InputObject)]
pub struct StartRunInput {
    /// The thread.
    thread_id: ID,
    /// The agent's name.
    agent: String,
    /// Its version; the newest registered when omitted.
    version: Option<String>,
    /// The user's message.
    message: String,
    /// Stored files (`POST /files`) given to the run with the message, by id; shown to the
    /// model as untrusted data.
    #[graphql(default)]
    files: Vec<ID>,
    /// When the thread is busy.
    #[graphql(default)]
    strategy: Strategy,
    /// The caller's name for this start (1 to 256 bytes): sent again, with the same message,
    /// files, agent, thread and strategy, it answers with the run the first one started and
    /// starts none (another request under the key is `CONFLICT`). Kept as long as the run.
    idempotency_key: Option<String>,
}

/// The tenant's turn to start a run, or `RATE_LIMITED` (`limit: "runs"`, or `"principal_runs"`)
/// when it (or its principal) has as many queued or running as it may.
async fn admit_run(
    ctx: &Context<'_>,
    app: &AppState,
    scope: &Scope,
) -> async_graphql::Result<Option<tokio::sync::OwnedMutexGuard<()>>> {
    let Some(runs) = ctx.data_opt::<Arc<crate::limiter::RunsInFlight>>() else {
        return Ok(None);
    };
    let store = app.engine.runs();
    let count = async |at_most| store.runs_in_flight(scope, at_most).await;
    match runs.admit(scope.tenant_id(), count).await {
        Ok(Ok(turn)) => Ok(Some(turn)),
        Ok(Err((whose, limit))) => {
            let (message, name) = match whose {
                Whose::Tenant => (
                    format!(
                        "this tenant has {limit} runs queued or running, as many as it may; retry when one ends"
                    ),
                    "runs",
                ),
                Whose::Principal => (
                    format!(
                        "you have {limit} runs queued or running, your part of this tenant's; retry when one ends"
                    ),
                    "principal_runs",
                ),
            };
            Err(error("RATE_LIMITED", message).extend_with(|_, e| {
                e.set("retryAfter", 1);
                e.set("limit", name);
            }))
        }
        Err(e) => Err(client_error(e.into())),
    }
}

/// Mutations.
pub struct Mutation;

#[Object]
impl Mutation {
    /// Creates a thread, optionally with a title and initial session state (a JSON object).
    /// With `externalKey` (the caller's name for what the thread is about, 1 to 256 bytes), the
    /// tenant's thread of that key when there is one (its own title and state kept), else a new
    /// thread under the key: sent again, or by racing requests, it is one thread.
    async fn create_thread(
        &self,
        ctx: &Context<'_>,
        title: Option<String>,
        state: Option<Json<Value>>,
        external_key: Option<String>,
    ) -> async_graphql::Result<ThreadObject> {
        let (scope, app) = (scope(ctx)?, self::state(ctx)?);
        let values = match state.map(|j| j.0) {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(error("BAD_REQUEST", "state must be a JSON object")),
        };
        let new = NewThread {
            title,
            state: values,
            id: None,
        };
        let thread = match external_key {
            Some(key) => {
                let thread = app
                    .engine
                    .thread_by_key(scope, &key, new)
                    .await
                    .map_err(client_error)?;
                // Another principal's thread under the key is shown only to one who may read it.
                thread_access(ctx, thread.id, PolicyAction::Read, "thread")?;
                thread
            }
            None => app
                .engine
                .create_thread(scope, new)
                .await
                .map_err(client_error)?,
        };
        Ok(ThreadObject(thread))
    }

    /// Starts a run of an agent on a thread; workers execute it.
    async fn start_run(
        &self,
        ctx: &Context<'_>,
        input: StartRunInput,
    ) -> async_graphql::Result<RunObject> {
        let (scope, app) = (scope(ctx)?, state(ctx)?);
        let thread: ThreadId = parse_id(&input.thread_id, "thread")?;
        thread_access(ctx, thread, PolicyAction::Execute, "thread")?;
        let agent = agent_ref(app, input.agent, input.version)?;
        let strategy = match input.strategy {
            Strategy::Enqueue => StartStrategy::Enqueue,
            Strategy::Reject => StartStrategy::Reject,
            Strategy::Interrupt => StartStrategy::Interrupt,
        };
        let mut parts = vec![Part::text(input.message)];
        // The engine replaces each with the store's description, refusing one the tenant lacks.
        parts.extend(input.files.into_iter().map(|id| {
            Part::File(forge_core::part::FilePart {
                file_id: id.0,
                name: String::new(),
                media_type: String::new(),
                size_bytes: 0,
                trust: forge_core::part::Trust::Untrusted,
            })
        }));
        let mut new = NewRun::new(thread, agent, parts).strategy(strategy);
        if let Some(key) = &input.idempotency_key {
            match app
                .engine
                .claim_run_key(scope, key, new)
                .await
                .map_err(client_error)?
            {
                forge_engine::KeyedRun::Found(run) => return Ok(RunObject(run)),
                forge_engine::KeyedRun::Claimed(claimed) => new = claimed,
            }
        }
        // The run's enqueue (and the worker's spans after it) continue this request's trace:
        // under its span when this server traces, else as the caller's traceparent.
        new.traceparent = ctx
            .data_opt::<crate::RequestTrace>()
            .and_then(|t| t.0)
            .map(|t| t.traceparent());
        // Counted and created one at a time for the tenant, within its runs in flight.
        let _turn = admit_run(ctx, app, scope).await?;
        let run = app.engine.submit(scope, new).await.map_err(client_error)?;
        app.bus.publish(Wake::Run {
            run_id: run.id,
            thread_id: run.thread_id,
        });
        Ok(RunObject(run))
    }

    /// Compacts a thread's history now: queues a run of `agent` (its newest registered version
    /// unless `version` is given) that summarises all but the agent's `compaction.keep_recent`
    /// newest messages (8 by default) with its summary model, metered like any model call, and
    /// completes; it waits behind the thread's active run like any run and adds no message. The
    /// run's events (`thread.compacted`) say what it folded; `Thread.summary` shows the result.
    async fn compact_thread(
        &self,
        ctx: &Context<'_>,
        thread_id: ID,
        agent: String,
        version: Option<String>,
    ) -> async_graphql::Result<RunObject> {
        let (scope, app) = (scope(ctx)?, state(ctx)?);
        let thread: ThreadId = parse_id(&thread_id, "thread")?;
        thread_access(ctx, thread, PolicyAction::Execute, "thread")?;
        let agent = agent_ref(app, agent, version)?;
        let run = app
            .engine
            .compact_thread(scope, thread, &agent)
            .await
            .map_err(client_error)?;
        app.bus.publish(Wake::Run {
            run_id: run.id,
            thread_id: run.thread_id,
        });
        Ok(RunObject(run))
    }

    /// Asks a run to cancel; `true` when this call asked first. The step in progress stops (its
    /// model stream and tool calls are abandoned; within the worker's cancel poll when another
    /// process executes it) and the run ends `cancelled`; a waiting run is cancelled at once.
    async fn cancel_run(&self, ctx: &Context<'_>, run_id: ID) -> async_graphql::Result<bool> {
        let (scope, app) = (scope(ctx)?, state(ctx)?);
        let run = get_run(ctx, &run_id).await?;
        thread_access(ctx, run.thread_id, PolicyAction::Execute, "run")?;
        // Through the engine: a step in flight in this process stops at once.
        let asked = app
            .engine
            .request_cancel(scope, run.id)
            .await
            .map_err(client_error)?;
        app.bus.publish(Wake::Run {
            run_id: run.id,
            thread_id: run.thread_id,
        });
        Ok(asked)
    }

    /// Makes a dead-lettered job ready again with a fresh attempt budget: a worker takes its run
    /// up where its log ends. Audited (`job.replayed`). `CONFLICT` when the job is not dead; for
    /// administrators (the power `dead_letters`).
    async fn replay_dead_letter(
        &self,
        ctx: &Context<'_>,
        job_id: ID,
    ) -> async_graphql::Result<super::DeadLetterObject> {
        super::dead_letters::replay(ctx, &job_id).await
    }

    /// Gives a dead-lettered job up for good and ends its run failed (`dead_lettered`, with
    /// `reason`), which frees its thread. Audited (`job.discarded`). `CONFLICT` when the job is
    /// not dead; for administrators (the power `dead_letters`).
    async fn discard_dead_letter(
        &self,
        ctx: &Context<'_>,
        job_id: ID,
        #[graphql(default = "discarded from the console")] reason: String,
    ) -> async_graphql::Result<super::DeadLetterObject> {
        super::dead_letters::discard(ctx, &job_id, &reason).await
    }

    /// Replaces a thread's session state, if it is still at `expectedVersion` (the version
    /// the caller read): a stale version is `CONFLICT` and changes nothing. A run in flight on
    /// the thread sees the new state from its next step.
    async fn update_thread_state(
        &self,
        ctx: &Context<'_>,
        thread_id: ID,
        expected_version: u64,
        state: Json<Value>,
    ) -> async_graphql::Result<ThreadObject> {
        let (scope, app) = (scope(ctx)?, self::state(ctx)?);
        let thread: ThreadId = parse_id(&thread_id, "thread")?;
        thread_access(ctx, thread, PolicyAction::Execute, "thread")?;
        let Value::Object(values) = state.0 else {
            return Err(error("BAD_REQUEST", "state must be a JSON object"));
        };
        app.engine
            .update_thread_state(scope, thread, expected_version, values)
            .await
            .map_err(client_error)?;
        let thread = app
            .engine
            .threads()
            .get_thread(scope, thread)
            .await
            .map_err(store_error)?;
        Ok(ThreadObject(thread))
    }

    /// Erases a thread of the caller's tenant: its session state, runs, messages, events,
    /// approvals, questions and jobs, in one transaction, audited (`thread.erased`). Its model
    /// calls stay in the tenant's usage totals, unlinked from it. For administrators (the
    /// power `erase_threads`); `CONFLICT` while one of its runs has not ended.
    async fn erase_thread(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Erasure> {
        require_admin(ctx, "erase_threads", "erasing threads")?;
        erase_whole_thread(ctx, &id, false).await
    }

    /// Renames, archives (`archived: true`) or restores a thread; `title: null` clears the
    /// title. An archived thread is listed by `threads` only with `archived: true`, and stays
    /// readable and usable.
    async fn update_thread(
        &self,
        ctx: &Context<'_>,
        id: ID,
        title: async_graphql::MaybeUndefined<String>,
        archived: Option<bool>,
    ) -> async_graphql::Result<ThreadObject> {
        let (scope, app) = (scope(ctx)?, state(ctx)?);
        let thread: ThreadId = parse_id(&id, "thread")?;
        app.engine
            .threads()
            .get_thread(scope, thread)
            .await
            .map_err(store_error)?;
        thread_access(ctx, thread, PolicyAction::Execute, "thread")?;
        let change = forge_core::thread::ThreadChange {
            title: match title {
                async_graphql::MaybeUndefined::Undefined => None,
                async_graphql::MaybeUndefined::Null => Some(None),
                async_graphql::MaybeUndefined::Value(t) => Some(Some(t)),
            },
            archived,
        };
        let changed = app
            .engine
            .update_thread(scope, thread, &change)
            .await
            .map_err(client_error)?;
        Ok(ThreadObject(changed))
    }

    /// Deletes a thread with everything recorded about it, as `eraseThread` does, for the
    /// person who created it (or an administrator); `CONFLICT` while one of its runs has not
    /// ended.
    async fn delete_thread(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Erasure> {
        erase_whole_thread(ctx, &id, true).await
    }

    /// Erases one ended run of the caller's tenant: its messages, events, approvals, questions
    /// and jobs, audited (`run.erased`); the rest of its thread stays. For administrators (the
    /// power `erase_runs`); `CONFLICT` while it has not ended.
    async fn erase_run(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Erasure> {
        let (scope, app) = (scope(ctx)?, state(ctx)?);
        require_admin(ctx, "erase_runs", "erasing runs")?;
        let run = get_run(ctx, &id).await?;
        thread_access(ctx, run.thread_id, PolicyAction::Execute, "run")?;
        let erased = app
            .engine
            .erase(scope, Erase::Run(run.id))
            .await
            .map_err(client_error)?;
        app.cache.forget(scope.tenant_id(), &[run.id]);
        Ok(erased.into())
    }

    /// A fresh signed reference to a stored file of the caller's tenant, valid for
    /// `ttlSeconds` (default 900, at most a week): `GET /files/{reference}`, with a bearer
    /// token of a member of the tenant, returns its bytes (audited `file.downloaded`).
    async fn file_reference(
        &self,
        ctx: &Context<'_>,
        id: ID,
        ttl_seconds: Option<u32>,
    ) -> async_graphql::Result<Json<Value>> {
        let (files, record) = stored_file(ctx, &id).await?;
        let ttl = ttl_seconds.map(|s| std::time::Duration::from_secs(u64::from(s)));
        let (reference, expires) = files.reference(&record, ttl);
        Ok(Json(serde_json::json!({
            "reference": reference,
            "url": format!("/files/{reference}"),
            "expires_at": expires,
        })))
    }

    /// Deletes a stored file: its bytes, its record (audited `file.deleted`), the retrieval
    /// source made from it; its references stop working. For its uploader and administrators
    /// (the power `delete_files`); `NOT_FOUND` for a file the caller may not read, unless they
    /// administer.
    async fn delete_file(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<bool> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        let not_found = || error("NOT_FOUND", "no such file");
        let files = state.files.clone().ok_or_else(not_found)?;
        let file_id = forge_files::FileId::new(id.0.clone()).map_err(|_| not_found())?;
        let record = forge_files::FileStore::file(files.store().as_ref(), scope, &file_id)
            .await
            .map_err(store_error)?
            .ok_or_else(not_found)?;
        if record.created_by != scope.principal_id().as_str() {
            let administers = require_admin(ctx, "delete_files", "deleting another person's file");
            if administers.is_err() && !files.permits(scope, PolicyAction::Read, &record) {
                return Err(not_found());
            }
            administers?;
        }
        files
            .delete(scope, &record.id, scope.principal_id().as_str())
            .await
            .map_err(store_error)
    }

    /// Approves or rejects a tool call. `key` makes it idempotent; `inputHash`, when given, must
    /// match the call the approval was raised for.
    async fn resolve_approval(
        &self,
        ctx: &Context<'_>,
        interaction_id: ID,
        approve: bool,
        key: String,
        reason: Option<String>,
        input_hash: Option<String>,
    ) -> async_graphql::Result<InteractionObject> {
        let decision = if approve {
            Decision::Approve
        } else {
            Decision::Reject { reason }
        };
        resolve(ctx, &interaction_id, decision, key, input_hash, "approval").await
    }

    /// Answers a question; the answer must match the question's schema.
    async fn answer_question(
        &self,
        ctx: &Context<'_>,
        interaction_id: ID,
        answer: Json<Value>,
        key: String,
    ) -> async_graphql::Result<InteractionObject> {
        let decision = Decision::Answer { answer: answer.0 };
        resolve(ctx, &interaction_id, decision, key, None, "question").await
    }

    /// Deletes a retrieval source of the caller's tenant — its text, chunks and index entries,
    /// and the copies runs made of it (search results and citation excerpts in their events and
    /// messages, replaced by a marker) — and audits it (`source.deleted`). For administrators (the power
    /// `delete_sources`). Citations of it then resolve to `NOT_FOUND`.
    async fn delete_source(&self, ctx: &Context<'_>, id: String) -> async_graphql::Result<bool> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        require_admin(ctx, "delete_sources", "deleting sources")?;
        let not_found = || error("NOT_FOUND", "no such source");
        let retriever = state.retriever.as_ref().ok_or_else(not_found)?;
        let id = forge_rag::SourceId::new(id).map_err(|_| not_found())?;
        let deleted = retriever
            .store()
            .delete_source(scope, &id, scope.principal_id().as_str())
            .await
            .map_err(store_error)?;
        // The deletion rewrote the quotes runs made of it: cached logs must be read again.
        state.cache.forget_tenant(scope.tenant_id());
        if deleted { Ok(true) } else { Err(not_found()) }
    }
}

async fn resolve(
    ctx: &Context<'_>,
    id: &ID,
    decision: Decision,
    key: String,
    input_hash: Option<String>,
    kind: &'static str,
) -> async_graphql::Result<InteractionObject> {
    let (scope, app) = (scope(ctx)?, state(ctx)?);
    let id: InteractionId = parse_id(id, "interaction")?;
    let current = app
        .engine
        .interaction(scope, id)
        .await
        .map_err(client_error)?;
    // Approving is its own permission, decided by the engine (`approve`, and separation of
    // duties); rejecting and answering act on the thread.
    let needs = if matches!(decision, Decision::Approve) {
        PolicyAction::Read
    } else {
        PolicyAction::Execute
    };
    thread_access(ctx, current.thread_id, needs, "interaction")?;
    let resolved = app
        .engine
        .resolve_interaction(
            scope,
            Resolve {
                id,
                decision,
                actor: scope.principal_id().as_str().to_owned(),
                key,
                input_hash,
            },
        )
        .await
        .map_err(|e| match e.kind() {
            ErrorKind::Invalid => error("BAD_REQUEST", format!("cannot resolve this {kind}: {e}")),
            _ => client_error(e),
        })?;
    let i = resolved.interaction;
    app.bus.publish(Wake::Run {
        run_id: i.run_id,
        thread_id: i.thread_id,
    });
    Ok(InteractionObject(i))
}

/// The agent named `name` at `version`, or at its newest registered version.
fn agent_ref(
    app: &AppState,
    name: String,
    version: Option<String>,
) -> async_graphql::Result<AgentRef> {
    let version = match version {
        Some(v) => v,
        None => app
            .engine
            .agents()
            .iter()
            .rev()
            .find(|a| a.agent.name == name)
            .map(|a| a.agent.version.clone())
            .ok_or_else(|| error("NOT_FOUND", format!("agent {name} not found")))?,
    };
    Ok(AgentRef { name, version })
}

/// Erases a thread the caller may act on (when `creator_may`, its creator may as well as an
/// administrator), forgetting its runs' cached logs.
async fn erase_whole_thread(
    ctx: &Context<'_>,
    id: &ID,
    creator_may: bool,
) -> async_graphql::Result<Erasure> {
    let (scope, app) = (scope(ctx)?, state(ctx)?);
    let thread: ThreadId = parse_id(id, "thread")?;
    let thread = app
        .engine
        .threads()
        .get_thread(scope, thread)
        .await
        .map_err(store_error)?;
    thread_access(ctx, thread.id, PolicyAction::Execute, "thread")?;
    if creator_may && &thread.created_by != scope.principal_id() {
        require_admin(ctx, "delete_threads", "deleting another person's thread")?;
    }
    let runs = app
        .engine
        .runs()
        .list_runs(scope, thread.id)
        .await
        .map_err(store_error)?;
    let erased = app
        .engine
        .erase(scope, Erase::Thread(thread.id))
        .await
        .map_err(client_error)?;
    let ids: Vec<RunId> = runs.iter().map(|r| r.id).collect();
    app.cache.forget(scope.tenant_id(), &ids);
    Ok(erased.into())
}
