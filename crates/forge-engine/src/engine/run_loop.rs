//! The run loop: taking a run's lease, running its steps, committing each one.

use super::*;
use std::ops::ControlFlow;

use crate::execution::Execution;
use crate::plan::StepEnd;
use crate::step::StepRunner;

impl Engine {
    /// Executes a run from its last checkpoint until it ends (or `cancel` fires), committing each
    /// step under a lease. Events reach `observer` as they are produced.
    pub async fn execute(
        &self,
        scope: &Scope,
        run_id: RunId,
        cancel: &CancellationToken,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        let control = RunControl {
            cancel: cancel.clone(),
            drain: CancellationToken::new(),
            trace: forge_core::telemetry::Span::none(),
            job: None,
            leased: None,
            leased_at: None,
        };
        self.execute_with(scope, run_id, &control, observer).await
    }

    /// Like [`Engine::execute`], and when `control.drain` fires, stops after the step in progress
    /// is committed, leaving the run `running` at its checkpoint for another worker to resume.
    pub async fn execute_with(
        &self,
        scope: &Scope,
        run_id: RunId,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        self.leased(scope, run_id, |_| Ok(scope.clone()), control, observer)
            .await
    }

    /// Executes a queued run of `tenant` as the principal who started it, as a worker does. A run
    /// whose agent version is not registered here is left untouched (`UnknownAgent`), for a worker
    /// that has the version.
    pub async fn execute_job(
        &self,
        tenant: &TenantId,
        run_id: RunId,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        // Store access needs only the tenant; the run itself says who it acts for.
        let reader = Scope::new(
            tenant.clone(),
            PrincipalId::new(self.local.worker_id.clone())?,
            vec![],
        );
        let derive = |run: &Run| {
            self.agent(&run.agent)?;
            Ok(Scope::new(
                run.tenant_id.clone(),
                run.principal_id.clone(),
                run.role_ids.clone(),
            ))
        };
        self.leased(&reader, run_id, derive, control, observer)
            .await
    }

    /// Takes the run's lease, then reads the run (so the read cannot be older than the lease),
    /// and executes it under the scope `derive` gives, renewing the lease alongside; releases it.
    async fn leased(
        &self,
        scope: &Scope,
        run_id: RunId,
        derive: impl FnOnce(&Run) -> Result<Scope, EngineError>,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        use forge_core::telemetry::{Instrument, Parent, SpanName};
        let t = &self.services.telemetry;
        let started = std::time::Instant::now();
        let span = t.span(SpanName::RunExecute, Parent::Span(&control.trace));
        span.set("run_id", run_id.to_string().into());
        let control = &RunControl {
            trace: span.clone(),
            ..control.clone()
        };
        let result = self
            .leased_inner(scope, run_id, derive, control, observer)
            .await;
        // Recorded whatever the outcome: a failing run is often the slow one.
        let outcome = match &result {
            Ok(o) => o.status.name(),
            Err(EngineError::Store(forge_core::Error::LeaseHeld { .. })) => "deferred",
            Err(_) => "error",
        };
        span.set("outcome", outcome.into());
        if let Err(e) = &result {
            span.fail(e.code());
        }
        span.end();
        t.meter.record(
            Instrument::RunDuration,
            started.elapsed().as_secs_f64() * 1000.0,
            &[("outcome", outcome)],
        );
        result
    }

    async fn leased_inner(
        &self,
        scope: &Scope,
        run_id: RunId,
        derive: impl FnOnce(&Run) -> Result<Scope, EngineError>,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        // The run's history is read with its lease where the store can (one trip fewer).
        let asked = std::time::Instant::now();
        let (
            LeasedRun {
                lease,
                run,
                history,
            },
            asked,
        ) = match control.leased.clone() {
            Some(leased) if leased.lease.run_id == run_id && leased.run.id == run_id => {
                (leased, control.leased_at)
            }
            // This process's own lease, held by an execution here (an application's
            // `submit_and_execute` beside its worker): leasing again under the same holder would
            // fence it mid-step. Held until the lease could lapse, as another holder's would be.
            _ if self.local.cancels.executing(run_id) => {
                return Err(forge_core::Error::LeaseHeld {
                    resource: format!("run {run_id}"),
                    until: self.services.clock.now().plus(self.local.lease_ttl),
                }
                .into());
            }
            _ => (
                self.stores
                    .runs
                    .lease_run_with_history(
                        scope,
                        run_id,
                        &self.local.worker_id,
                        self.local.lease_ttl,
                        crate::compaction::HISTORY_PAGE,
                    )
                    .await?,
                Some(asked),
            ),
        };
        let held = Arc::new(crate::lease::HeldLease::new(
            lease.clone(),
            asked,
            self.local.lease_ttl,
        ));
        // Read with another run's thread, it would not be this run's history.
        let history = history.filter(|(thread, _)| thread.id == run.thread_id);
        let result = async {
            if run.status.is_terminal() {
                return Ok(RunOutcome {
                    status: run.status,
                    last_seq: run.last_seq,
                    failure: run.failure,
                    job_completed: false,
                });
            }
            let run_scope = derive(&run)?;
            // A cancel request stops the step in flight (see `crate::cancels`).
            let watch = self.local.cancels.watch(run.id, run.thread_id, &control.cancel);
            let control = &RunControl {
                cancel: watch.token().clone(),
                ..control.clone()
            };
            let run_id = run.id;
            // Losing the lease stops the run where it is.
            tokio::select! {
                biased;
                r = self.execute_leased(&run_scope, run, held.clone(), history, control, observer) => r,
                e = self.keep_lease(scope, &held) => self.lost_lease(scope, &lease, e).await,
                never = crate::cancels::Cancels::poll(self.stores.runs.as_ref(), scope, run_id, watch.token(), self.local.cancel_poll) => match never {},
            }
        }
        .await;
        // A commit that ended the run gave the lease up with it; otherwise release it,
        // best effort (an unreleased lease simply expires).
        let released =
            matches!(&result, Ok(o) if forge_core::ports::store::releases_lease(o.status));
        if !released {
            let _ = self.stores.runs.release_lease(scope, &lease).await;
        }
        result
    }

    /// What a failed renewal of `lease` means: the lease was lost (`e`), unless this
    /// execution's last commit gave it up because the run ended, and the renewal merely came
    /// back before that commit's answer did. Then the run's outcome is that commit's. The run
    /// ended under this lease when no lease was issued after it (its fence is still this
    /// lease's token); a run another worker ended after taking it over is a loss.
    async fn lost_lease(
        &self,
        scope: &Scope,
        lease: &RunLease,
        e: EngineError,
    ) -> Result<RunOutcome, EngineError> {
        if let EngineError::Store(forge_core::Error::Fenced { .. }) = &e
            && let Ok(run) = self.stores.runs.get_run(scope, lease.run_id).await
            && run.lease.is_none()
            && run.fence == lease.token
            && forge_core::ports::store::releases_lease(run.status)
        {
            return Ok(RunOutcome {
                status: run.status,
                last_seq: run.last_seq,
                failure: run.failure,
                job_completed: false,
            });
        }
        Err(e)
    }

    /// Renews the run's lease every third of its time to live, moving the local deadline it is
    /// vouched for until (from when each renewal was asked for); returns only when renewal fails.
    async fn keep_lease(&self, scope: &Scope, held: &crate::lease::HeldLease) -> EngineError {
        loop {
            tokio::time::sleep(self.local.lease_ttl / 3).await;
            let asked = std::time::Instant::now();
            match self
                .stores
                .runs
                .renew_lease(scope, &held.lease(), self.local.lease_ttl)
                .await
            {
                Ok(renewed) => held.renewed(renewed, asked),
                Err(e) => return e.into(),
            }
        }
    }

    async fn execute_leased(
        &self,
        scope: &Scope,
        run: Run,
        held: Arc<crate::lease::HeldLease>,
        history: Option<(forge_core::thread::Thread, Vec<Message>)>,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        let cancel = &control.cancel;
        let mut cancel_requested = run.cancel_requested;
        let mut cur = Execution::new(
            run,
            held,
            self.services.clock.as_ref(),
            observer,
            control.trace.clone(),
            control.job.clone(),
        );
        let Ok(agent) = self.agent(&cur.run().agent) else {
            let failure = RunFailure {
                code: FailureCode::AgentVersionUnavailable,
                message: format!(
                    "agent {} version {} is not registered on this worker",
                    cur.run().agent.name,
                    cur.run().agent.version
                ),
            };
            cur.conclude(StepEnd::Failed(failure.clone()))?;
            return self.commit_outcome(scope, &mut cur, Some(failure)).await;
        };
        if cancel_requested {
            return self.cancelled(scope, &mut cur, "cancel requested").await;
        }
        if cur.status() == RunStatus::Queued {
            self.start(&mut cur, &agent)?;
        }
        self.read_thread(scope, &mut cur, history).await?;
        if cur.checkpoint().purpose == RunPurpose::Compaction {
            return self.compaction_run(scope, &agent, cancel, cur).await;
        }
        if let RunStatus::Waiting(_) = cur.status() {
            match self
                .resume_waiting(scope, &agent, control, &mut cur)
                .await?
            {
                ControlFlow::Break(outcome) => return Ok(outcome),
                ControlFlow::Continue(requested) => cancel_requested = requested,
            }
        }
        loop {
            if cancel_requested {
                return self.cancelled(scope, &mut cur, "cancel requested").await;
            }
            let end = StepRunner {
                engine: self,
                scope,
                agent: &agent,
                cancel,
            }
            .run(&mut cur)
            .await?;
            let failure = cur.conclude(end)?;
            let (outcome, requested) = self.commit(scope, &mut cur, failure).await?;
            // A run asked to cancel while its step was parking is cancelled now, not left waiting
            // (the request found it still running, so nobody will wake it).
            if outcome.status.is_terminal()
                || (matches!(outcome.status, RunStatus::Waiting(_)) && !requested)
                || control.drain.is_cancelled()
            {
                return Ok(outcome);
            }
            cancel_requested = requested;
        }
    }

    /// Starts a queued run: its input joins the thread's history now, in the first step's commit
    /// (a run queued behind another never shows its message to the run ahead of it); a
    /// compaction run's input is its request, not a message of the conversation.
    fn start(&self, cur: &mut Execution<'_>, agent: &AgentDefinition) -> Result<(), EngineError> {
        cur.apply(RunInput::Start)?;
        if cur.checkpoint().purpose == RunPurpose::Turn {
            cur.push_message(Message {
                id: MessageId::generate(self.services.ids.as_ref()),
                run_id: cur.run().id,
                role: Role::User,
                parts: cur.run().input.clone(),
                created_at: self.services.clock.now(),
            });
        }
        cur.emit(RunEventKind::RunStarted {
            thread_id: cur.run().thread_id,
            agent: cur.run().agent.clone(),
            model: agent.model.clone(),
        });
        Ok(())
    }

    /// Reads the run's thread into the execution: its state, its summary and the history after
    /// it. `history` is the thread and its first page when they were read with the lease;
    /// otherwise they are read here, in one read where the store can.
    async fn read_thread(
        &self,
        scope: &Scope,
        cur: &mut Execution<'_>,
        history: Option<(forge_core::thread::Thread, Vec<Message>)>,
    ) -> Result<(), EngineError> {
        let (thread, first) = match history {
            Some(read) => read,
            None => {
                self.stores
                    .threads
                    .thread_with_history(
                        scope,
                        cur.run().thread_id,
                        crate::compaction::HISTORY_PAGE,
                    )
                    .await?
            }
        };
        let history = crate::compaction::continue_history(
            self.stores.threads.as_ref(),
            scope,
            cur.run().thread_id,
            thread.summary.as_ref().map(|s| s.through),
            first,
        )
        .await?;
        cur.read_thread(thread.state, history, thread.summary);
        Ok(())
    }

    /// Resumes a waiting run whose interactions are settled: runs the parked step's calls and
    /// commits it. Breaks with the outcome when the run stops here (woken early, cancelled, or
    /// draining); continues with whether a cancel was requested meanwhile.
    async fn resume_waiting(
        &self,
        scope: &Scope,
        agent: &AgentDefinition,
        control: &RunControl,
        cur: &mut Execution<'_>,
    ) -> Result<ControlFlow<RunOutcome, bool>, EngineError> {
        let raised: Vec<Interaction> = self
            .stores
            .interactions
            .list_interactions(scope, InteractionFilter::Run(cur.run().id))
            .await?
            .into_iter()
            .filter(|i| i.step == cur.checkpoint().step)
            .collect();
        if raised
            .iter()
            .any(|i| i.status == InteractionStatus::Pending)
        {
            // Woken early: the run keeps waiting; nothing to commit.
            return Ok(ControlFlow::Break(RunOutcome {
                status: cur.status(),
                last_seq: cur.run().last_seq,
                failure: None,
                job_completed: false,
            }));
        }
        if let Some(other) = raised.iter().find(|i| i.agent != cur.run().agent) {
            return Err(EngineError::InvalidAgent {
                name: other.agent.name.clone(),
                reason: format!(
                    "interaction {} was raised under version {}, not the run's {}",
                    other.id,
                    other.agent.version,
                    cur.run().agent.version
                ),
            });
        }
        self.record_waits(cur, &raised);
        cur.apply(RunInput::Resume)?;
        let end = StepRunner {
            engine: self,
            scope,
            agent,
            cancel: &control.cancel,
        }
        .resume(cur, &raised)
        .await?;
        if let StepEnd::Cancelled = end {
            return Ok(ControlFlow::Break(
                self.cancelled(scope, cur, "cancelled by request").await?,
            ));
        }
        let version = cur.run().version + 1;
        cur.emit(RunEventKind::RunCheckpointed {
            step: cur.checkpoint().step,
            version,
        });
        let (outcome, requested) = self.commit(scope, cur, None).await?;
        if control.drain.is_cancelled() {
            return Ok(ControlFlow::Break(outcome));
        }
        Ok(ControlFlow::Continue(requested))
    }

    /// Each wait is a span of its own, from request to decision: it outlived the processes it
    /// crossed, so it is built from the two times, not timed around a call.
    fn record_waits(&self, cur: &Execution<'_>, raised: &[Interaction]) {
        for i in raised {
            let Some(resolution) = &i.resolution else {
                continue;
            };
            let name = match i.request {
                forge_core::interaction::InteractionRequest::Approval { .. } => {
                    forge_core::telemetry::SpanName::ApprovalWait
                }
                _ => forge_core::telemetry::SpanName::QuestionWait,
            };
            self.services.telemetry.record_wait(
                name,
                cur.trace(),
                i.created_at,
                resolution.at,
                &cur.run().id.to_string(),
                i.status.name(),
            );
        }
    }

    /// Cancels the run for `reason` and commits it.
    async fn cancelled(
        &self,
        scope: &Scope,
        cur: &mut Execution<'_>,
        reason: &str,
    ) -> Result<RunOutcome, EngineError> {
        cur.apply(RunInput::Cancel)?;
        cur.emit(RunEventKind::RunCancelled {
            reason: Some(reason.into()),
        });
        self.commit_outcome(scope, cur, None).await
    }

    /// Commits the step and gives its outcome alone.
    async fn commit_outcome(
        &self,
        scope: &Scope,
        cur: &mut Execution<'_>,
        failure: Option<RunFailure>,
    ) -> Result<RunOutcome, EngineError> {
        self.commit(scope, cur, failure)
            .await
            .map(|(outcome, _)| outcome)
    }

    /// A run of purpose `compaction`: one step that compacts the thread (keeping the agent's
    /// `keep_recent` newest messages) and completes, or completes saying there was nothing to
    /// fold.
    async fn compaction_run(
        &self,
        scope: &Scope,
        agent: &AgentDefinition,
        cancel: &CancellationToken,
        mut cur: Execution<'_>,
    ) -> Result<RunOutcome, EngineError> {
        let step = cur.checkpoint().step + 1;
        cur.emit(RunEventKind::StepStarted { step });
        let compactor = self.compactor(scope, agent, cancel);
        let (end, failure) = match compactor.compact(&mut cur, step).await? {
            crate::compaction::Compacted::Done => {
                let covered = cur.summary().map_or(0, |s| s.covered);
                (
                    RunEventKind::RunCompleted {
                        text: format!("Compacted: the summary covers {covered} messages."),
                        usage: cur.checkpoint().usage,
                    },
                    None,
                )
            }
            crate::compaction::Compacted::Nothing => (
                RunEventKind::RunCompleted {
                    text: "Nothing to compact.".into(),
                    usage: cur.checkpoint().usage,
                },
                None,
            ),
            crate::compaction::Compacted::Ended(StepEnd::Failed(failure)) => (
                RunEventKind::RunFailed {
                    failure: failure.clone(),
                },
                Some(failure),
            ),
            crate::compaction::Compacted::Ended(_) => (
                RunEventKind::RunCancelled {
                    reason: Some("cancelled by request".into()),
                },
                None,
            ),
        };
        cur.record_step(step);
        cur.apply(match &end {
            RunEventKind::RunCompleted { .. } => RunInput::Complete,
            RunEventKind::RunFailed { .. } => RunInput::Fail,
            _ => RunInput::Cancel,
        })?;
        cur.emit(end);
        self.commit(scope, &mut cur, failure)
            .await
            .map(|(outcome, _)| outcome)
    }

    pub(super) async fn commit(
        &self,
        scope: &Scope,
        cur: &mut Execution<'_>,
        failure: Option<RunFailure>,
    ) -> Result<(RunOutcome, bool), EngineError> {
        use forge_core::telemetry::Instrument;
        let (commit, messages) = cur.take_commit(failure.clone());
        let state = commit.state.clone();
        // Timed whatever the outcome: a commit that fails slowly is the one to see.
        let started = std::time::Instant::now();
        let committed = self.stores.runs.commit_step(scope, commit).await;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let meter = &self.services.telemetry.meter;
        match &committed {
            Ok(_) => meter.record(Instrument::StepCommitDuration, ms, &[("outcome", "ok")]),
            Err(e) => meter.record(
                Instrument::StepCommitDuration,
                ms,
                &[
                    ("outcome", "error"),
                    ("code", forge_core::telemetry::error_code(e)),
                ],
            ),
        }
        let committed = committed?;
        cur.committed(&committed, state, messages);
        let outcome = RunOutcome {
            status: cur.status(),
            last_seq: committed.last_seq,
            failure,
            job_completed: cur.job_completed(),
        };
        Ok((outcome, committed.cancel_requested))
    }
}
