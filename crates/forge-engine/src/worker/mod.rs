//! The worker: claims run jobs from the queue and executes them through the engine.
//!
//! A claim is a lease on the job, heartbeated while the run executes; the engine separately holds
//! (and heartbeats) the run's lease, which fences its commits. If the worker dies, its claim
//! lapses, another worker claims the job, and the engine resumes the run from its last committed
//! step. On shutdown (`drain`), each execution stops after the step in progress is committed, and
//! its job goes back to the queue without spending an attempt.
//!
//! An idle worker polls the queue once per poll interval, through one of its claim loops at a
//! time; work its own process queues wakes a loop at once, and a loop that finds work after
//! idling wakes the next, so a batch another process queued is claimed by every idle loop. Loops
//! that want a job at the same time claim together, in one write (`claims`). Each claimed run
//! executes in a task of its own, on any of the runtime's threads.

mod claims;

use std::sync::Arc;
use std::time::Duration;

use forge_core::Error;
use forge_core::id::RunId;
use forge_core::ports::lease::{Lease, LeaseStore};
use forge_core::ports::queue::{
    ClaimFilter, Claimed, ClaimedJob, JobQueue, JobState, LeaseRequest,
};
use forge_core::ports::store::LeasedRun;
use forge_core::run::RunStatus;
use forge_core::scope::SystemScope;
use forge_core::telemetry::{Instrument, Parent, Span, SpanName, TraceContext};
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, RunControl, RunOutcome};
use crate::error::EngineError;
use crate::observer::{NoopObserver, RunObserver};

/// How a worker behaves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Names the worker in claims.
    pub id: String,
    /// Life of a job claim between heartbeats.
    pub claim_ttl: Duration,
    /// Pause between polls of an empty queue, for the worker as a whole: one idle claim loop at a
    /// time waits it out and polls, while the others wait for work this process queues or the
    /// poller finds.
    pub poll_interval: Duration,
    /// Jobs executed at once.
    pub concurrency: usize,
    /// Most claims one write of the queue makes for the loops that want a job at the same time
    /// (`1`: each loop claims alone, when it wants a job, beside the others' claims).
    pub claim_batch: usize,
    /// Delay before the first retry of a failed job; doubles with every attempt.
    pub backoff_base: Duration,
    /// Longest delay between retries.
    pub backoff_max: Duration,
    /// Claim only this run's job (`forge run` executes its own run, never another's).
    pub only_run: Option<RunId>,
    /// How often overdue approvals and questions are expired, on a schedule of its own: busy
    /// claim loops never delay it.
    pub sweep_interval: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            id: format!("worker-{}", std::process::id()),
            claim_ttl: Duration::from_secs(30),
            poll_interval: Duration::from_millis(200),
            concurrency: 4,
            claim_batch: usize::MAX,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            only_run: None,
            sweep_interval: INTERACTION_SWEEP_EVERY,
        }
    }
}

/// What happened to one claimed job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// The run ended (completed, failed or cancelled); the job is done.
    Finished(RunStatus),
    /// The run stopped at a checkpoint (drain, or it waits for a person); the job went back or ended.
    Paused(RunStatus),
    /// The run is still leased by another (probably crashed) worker; the job went back until then.
    Deferred,
    /// Execution failed; the job will be retried, or was dead-lettered.
    Failed(JobState),
    /// Another worker took the run (or its job) over after this one's lease or claim lapsed: this
    /// worker abandoned it, changing nothing (logged as `worker.taken_over`).
    TakenOver,
}

impl JobOutcome {
    /// Its name, for spans.
    pub fn name(&self) -> &'static str {
        match self {
            JobOutcome::Finished(_) => "finished",
            JobOutcome::Paused(_) => "paused",
            JobOutcome::Deferred => "deferred",
            JobOutcome::Failed(_) => "failed",
            JobOutcome::TakenOver => "taken_over",
        }
    }
}

/// Counts of what a worker did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Jobs whose run ended.
    pub finished: u64,
    /// Jobs given back at a checkpoint or deferred.
    pub released: u64,
    /// Jobs that failed (retried or dead-lettered).
    pub failed: u64,
}

/// Claims and executes run jobs.
pub struct Worker {
    engine: Arc<Engine>,
    queue: Arc<dyn JobQueue>,
    config: WorkerConfig,
    observer: Arc<dyn RunObserver>,
    /// Where the workers of a deployment elect the one that sweeps, when they share one.
    sweep_leases: Option<Arc<dyn LeaseStore>>,
    /// Held by the one idle claim loop whose turn it is to poll the queue.
    polling: tokio::sync::Mutex<()>,
    /// Where the loops claim, together when they want a job at the same time.
    claims: claims::ClaimGroup,
}

/// The lease the sweeping worker holds.
pub const SWEEP_LEASE: &str = "forge:sweep";

/// How often a worker expires overdue approvals and questions, by default.
pub const INTERACTION_SWEEP_EVERY: Duration = Duration::from_secs(5);

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn system() -> SystemScope {
    SystemScope::new("worker claims run jobs across tenants")
}

impl Worker {
    /// A worker executing through `engine`, claiming from `queue`.
    pub fn new(engine: Arc<Engine>, queue: Arc<dyn JobQueue>, config: WorkerConfig) -> Self {
        // The jobs it claims: runs of the agent versions its engine has (and its own run only,
        // when configured so).
        let mut filter = ClaimFilter::agents(engine.agents().iter().map(|a| a.agent.clone()));
        filter.run = config.only_run;
        // The run's lease is taken with the claim where the queue can (one write fewer).
        let (holder, ttl) = engine.holder();
        let lease = LeaseRequest {
            holder: holder.to_owned(),
            ttl,
            history: Some(crate::compaction::HISTORY_PAGE),
        };
        let claims = claims::ClaimGroup::new(
            queue.clone(),
            claims::Claiming {
                system: system(),
                worker: config.id.clone(),
                ttl: config.claim_ttl,
                filter,
                lease,
                most: config.claim_batch.max(1),
            },
        );
        Self {
            claims,
            engine,
            queue,
            config,
            observer: Arc::new(NoopObserver),
            sweep_leases: None,
            polling: tokio::sync::Mutex::new(()),
        }
    }

    /// Sweeps only while holding the [`SWEEP_LEASE`] in `leases`, so one worker of a fleet
    /// sweeps at a time (the lease lasts three sweep intervals and is renewed by each sweep).
    /// Sweeps are idempotent, so this saves work rather than guarding correctness: when the
    /// lease store fails, the worker sweeps anyway.
    pub fn with_sweep_leases(mut self, leases: Arc<dyn LeaseStore>) -> Self {
        self.sweep_leases = Some(leases);
        self
    }

    /// Whether this worker sweeps this tick, taking or renewing the sweep lease in `held`.
    async fn leads(&self, held: &mut Option<Lease>) -> bool {
        let Some(leases) = &self.sweep_leases else {
            return true;
        };
        let ttl = self.config.sweep_interval * 3;
        if let Some(lease) = held.take() {
            match leases.renew(&system(), &lease, ttl).await {
                Ok(renewed) => {
                    *held = Some(renewed);
                    return true;
                }
                Err(Error::Fenced { .. }) => {}
                Err(e) => {
                    self.store_failed(&e, "renewing the sweep lease");
                    *held = Some(lease);
                    return true;
                }
            }
        }
        match leases
            .acquire(&system(), SWEEP_LEASE, &self.config.id, ttl)
            .await
        {
            Ok(lease) => {
                *held = Some(lease);
                true
            }
            Err(Error::LeaseHeld { .. }) => false,
            Err(e) => {
                self.store_failed(&e, "taking the sweep lease");
                true
            }
        }
    }

    /// Says and counts a store error of the sweep (retried at the next tick, not swallowed).
    fn store_failed(&self, e: &Error, what: &'static str) {
        let t = self.engine.telemetry();
        let code = forge_core::telemetry::error_code(e);
        t.meter
            .record(Instrument::StoreErrors, 1.0, &[("code", code)]);
        forge_core::log!(
            t,
            WorkerStoreFailed,
            worker = &self.config.id,
            code = code,
            outcome = what,
        );
    }

    /// Hands every executed run's events to `observer` as they are produced.
    pub fn with_observer(mut self, observer: Arc<dyn RunObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Runs `concurrency` claim loops and the interaction sweep until `shutdown` fires, then lets
    /// each execution finish the step in progress, gives its job back, and returns.
    pub async fn run(&self, shutdown: CancellationToken) -> WorkerReport {
        let loops = (0..self.config.concurrency.max(1)).map(|_| self.claim_loop(shutdown.clone()));
        let (reports, ()) = futures_util::future::join(
            futures_util::future::join_all(loops),
            self.sweep_loop(shutdown.clone()),
        )
        .await;
        reports
            .into_iter()
            .fold(WorkerReport::default(), |a, b| WorkerReport {
                finished: a.finished + b.finished,
                released: a.released + b.released,
                failed: a.failed + b.failed,
            })
    }

    async fn claim_loop(&self, shutdown: CancellationToken) -> WorkerReport {
        let mut report = WorkerReport::default();
        let mut failing = false;
        // Whether the loop idled before this claim, on an empty queue.
        let mut idled = false;
        while !shutdown.is_cancelled() {
            let result = self.run_next(&shutdown, idled).await;
            idled = false;
            // Store errors are reported when they start and when they stop, not every poll.
            let t = self.engine.telemetry();
            if let Err(e) = &result {
                t.meter
                    .record(Instrument::StoreErrors, 1.0, &[("code", e.code())]);
            }
            match (&result, failing) {
                (Err(e), false) => {
                    forge_core::log!(
                        t,
                        WorkerStoreFailed,
                        worker = &self.config.id,
                        code = e.code()
                    );
                    failing = true;
                }
                (Ok(_), true) => {
                    forge_core::log!(t, WorkerStoreRecovered, worker = &self.config.id);
                    failing = false;
                }
                _ => {}
            }
            match result {
                Ok(Some(JobOutcome::Finished(_))) => report.finished += 1,
                Ok(Some(JobOutcome::Paused(_) | JobOutcome::Deferred | JobOutcome::TakenOver)) => {
                    report.released += 1
                }
                Ok(Some(JobOutcome::Failed(_))) => report.failed += 1,
                Ok(None) => {
                    self.idle(&shutdown).await;
                    idled = true;
                }
                Err(_) => {
                    // The store is unreachable: wait, then poll again.
                    tokio::select! {
                        _ = shutdown.cancelled() => {}
                        _ = tokio::time::sleep(self.config.poll_interval) => {}
                    }
                }
            }
        }
        report
    }

    /// Waits after a claim found the queue empty: until this process queues work, or another
    /// loop of the worker claimed a job after idling, or, for one idle loop at a time, until the
    /// poll interval has passed. An idle worker so polls for other processes' work once per
    /// interval, however many loops it runs (each polling made `concurrency` claims an interval,
    /// nearly all finding nothing).
    async fn idle(&self, shutdown: &CancellationToken) {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = self.engine.work().notified() => {}
            _ = async {
                let _turn = self.polling.lock().await;
                tokio::time::sleep(self.config.poll_interval).await;
            } => {}
        }
    }

    /// Expires approvals and questions past their deadline every `sweep_interval`, however busy
    /// the claim loops are, so their runs go on (as refused) instead of waiting forever; and
    /// releases usage reservations orphaned for longer than `metering::ORPHANED_AFTER`.
    async fn sweep_loop(&self, shutdown: CancellationToken) {
        let t = self.engine.telemetry();
        let failed = |e: &forge_core::Error, what: &'static str| self.store_failed(e, what);
        let mut held = None;
        while !shutdown.is_cancelled() {
            if !self.leads(&mut held).await {
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::time::sleep(self.config.sweep_interval) => {}
                }
                continue;
            }
            if let Err(e) = self
                .engine
                .interaction_store()
                .expire_interactions(&system())
                .await
            {
                failed(&e, "expiring interactions");
            }
            let before = self
                .engine
                .now()
                .minus(forge_core::metering::ORPHANED_AFTER);
            if let Err(e) = self
                .engine
                .ledger()
                .release_orphans(&system(), before)
                .await
            {
                failed(&e, "releasing orphaned reservations");
            }
            match self.queue.job_counts(&system()).await {
                Ok(counts) => t.meter.record(
                    Instrument::QueueDepth,
                    counts.get("ready").copied().unwrap_or(0) as f64,
                    &[],
                ),
                Err(e) => failed(&e, "counting jobs"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(self.config.sweep_interval) => {}
            }
        }
        // Another worker takes the sweeps over at once.
        if let (Some(leases), Some(lease)) = (&self.sweep_leases, held) {
            let _ = leases.release(&system(), &lease).await;
        }
    }

    /// Claims one job and executes its run; `None` when no job is ready. `drain` stops the
    /// execution after its current step.
    pub async fn run_one(
        &self,
        drain: &CancellationToken,
    ) -> Result<Option<JobOutcome>, EngineError> {
        self.run_next(drain, false).await
    }

    /// Like [`Worker::run_one`]; a job claimed after idling (`idled`) first wakes the next idle
    /// loop: work arrived while the worker idled, perhaps more than this job (another process may
    /// have queued a batch), so that loop claims at once instead of at its turn to poll, and
    /// wakes the next if it finds a job.
    async fn run_next(
        &self,
        drain: &CancellationToken,
        idled: bool,
    ) -> Result<Option<JobOutcome>, EngineError> {
        let Some((claimed, asked)) = self.claim().await? else {
            return Ok(None);
        };
        if idled {
            self.engine.work().notify_one();
        }
        self.run_claimed(claimed, asked, drain).await.map(Some)
    }

    /// Claims a job the worker's filter admits, with its run's lease where the queue can take it
    /// in the same write (together with the other loops that want one now); `None` when no job
    /// is ready.
    async fn claim(&self) -> Result<Option<claims::Asked>, EngineError> {
        Ok(self.claims.claim().await?)
    }

    /// Executes the run of a claimed job and settles the claim by how the execution ended.
    async fn run_claimed(
        &self,
        claimed: Claimed,
        asked: std::time::Instant,
        drain: &CancellationToken,
    ) -> Result<JobOutcome, EngineError> {
        let Claimed { job, lease: leased } = claimed;
        let t = self.engine.telemetry();
        // Recorded before the run is executed, so a backlog shows even when runs fail; a
        // negative wait (clock skew between hosts) is dropped, not clamped to zero.
        let waited = (self.engine.now().0 - job.available_at.0).num_milliseconds();
        if waited >= 0 {
            t.meter.record(Instrument::ClaimLatency, waited as f64, &[]);
        }
        // A job from before traces, or with a damaged traceparent, starts its own trace, and the
        // claim says so: a missing link is told apart from a propagation bug.
        let parent = job.traceparent.as_deref().and_then(TraceContext::parse);
        let span = t.span(SpanName::RunClaim, Parent::Remote(parent.as_ref()));
        span.set("run_id", job.run_id.to_string().into());
        span.set("job_id", job.id.to_string().into());
        span.set("attempt", job.attempt.into());
        span.set("queue.trace_continued", parent.is_some().into());
        let result = tokio::select! {
            biased;
            r = self.execute(&job, leased, asked, drain, span.clone()) => r,
            e = self.keep_claim(&job) => Err(e),
        };
        let settled = match self.settle(&job, result).await {
            Err(EngineError::Store(Error::Fenced { .. })) => {
                forge_core::log!(
                    t,
                    WorkerTakenOver,
                    worker = &self.config.id,
                    run_id = job.run_id.to_string(),
                );
                Ok(JobOutcome::TakenOver)
            }
            settled => settled,
        };
        match &settled {
            Ok(outcome) => span.set("outcome", outcome.name().into()),
            Err(e) => span.fail(e.code()),
        }
        span.end();
        settled
    }

    /// Settles the claim by how the execution ended.
    async fn settle(
        &self,
        job: &ClaimedJob,
        result: Result<RunOutcome, EngineError>,
    ) -> Result<JobOutcome, EngineError> {
        let (sys, job) = (system(), job.clone());
        let now = self.engine.now();
        let outcome = match result.map(|o| (o.status, o.job_completed)) {
            Ok((status, done)) if status.is_terminal() => {
                self.complete(&job, done).await?;
                JobOutcome::Finished(status)
            }
            Ok((status @ RunStatus::Waiting(_), done)) => {
                // A parked run holds no job; resolving its interaction enqueues a new one.
                self.complete(&job, done).await?;
                JobOutcome::Paused(status)
            }
            Ok((status, _)) => {
                self.queue.release(&sys, &job, now).await?;
                JobOutcome::Paused(status)
            }
            Err(EngineError::Store(Error::LeaseHeld { until, .. })) => {
                self.queue.release(&sys, &job, until).await?;
                JobOutcome::Deferred
            }
            Err(e @ EngineError::Store(Error::Fenced { .. })) => return Err(e),
            Err(EngineError::Store(Error::VersionConflict { entity, .. }))
                if entity == forge_core::ports::store::SESSION_STATE =>
            {
                // A host changed the session state while the step was computed: nothing of the
                // step was written; compute it again from the new state, spending no attempt.
                self.queue.release(&sys, &job, now).await?;
                JobOutcome::Deferred
            }
            Err(e) => {
                let reason = format!("{e}");
                let state = self
                    .queue
                    .fail(&sys, &job, self.backoff(&job), &reason)
                    .await?;
                if state == forge_core::ports::queue::JobState::Dead {
                    let t = self.engine.telemetry();
                    t.meter
                        .record(Instrument::DeadLetters, 1.0, &[("code", e.code())]);
                    forge_core::log!(
                        t,
                        JobDeadLettered,
                        job_id = job.id.to_string(),
                        run_id = job.run_id.to_string(),
                        code = e.code(),
                    );
                }
                JobOutcome::Failed(state)
            }
        };
        Ok(outcome)
    }

    /// Completes the job of a run that ended or parked, unless the run's last commit did
    /// (`done`). The execution's own commit ended or parked the run, so a claim found fenced
    /// whose job is completed was completed by that commit (its answer raced a renewal of the
    /// run's lease), or by a worker that found the run ended after this claim lapsed.
    async fn complete(&self, job: &ClaimedJob, done: bool) -> Result<(), EngineError> {
        if done {
            return Ok(());
        }
        match self.queue.complete(&system(), job).await {
            Err(Error::Fenced { .. }) if self.completed(job).await => Ok(()),
            r => Ok(r?),
        }
    }

    /// Whether the job is completed (read after its claim was found fenced).
    async fn completed(&self, job: &ClaimedJob) -> bool {
        matches!(
            self.queue.job_state(&system(), job.id).await,
            Ok(JobState::Completed)
        )
    }

    /// Executes the job's run in a task of its own, so that the runs a worker executes at once
    /// are polled by all of the runtime's threads, each woken where its socket is read. In the
    /// claim loops' future they shared one task: one thread at a time for all of them, and, when
    /// that future is driven by `block_on`, a hand-off from the thread that read a socket to the
    /// one blocked in it at every round trip. The task is aborted if this future is dropped (as
    /// the execution was, in place). A panic in it ends as [`EngineError::Panicked`], which fails
    /// the job like any error (retried, then dead-lettered), and never carries the panic's
    /// message: it may quote a document, a prompt or a tool's output.
    async fn execute(
        &self,
        job: &ClaimedJob,
        leased: Option<LeasedRun>,
        asked: std::time::Instant,
        drain: &CancellationToken,
        trace: Span,
    ) -> Result<RunOutcome, EngineError> {
        let control = RunControl {
            cancel: CancellationToken::new(),
            drain: drain.clone(),
            trace,
            job: Some(job.clone()),
            leased,
            leased_at: Some(asked),
        };
        let (engine, observer) = (self.engine.clone(), self.observer.clone());
        let (tenant, run) = (job.tenant_id.clone(), job.run_id);
        let task = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            engine
                .execute_job(&tenant, run, &control, observer.as_ref())
                .await
        }));
        match task.await {
            Ok(outcome) => outcome,
            Err(e) if e.is_panic() => Err(EngineError::Panicked),
            // Aborted by the runtime as it shut down.
            Err(_) => Err(EngineError::Store(Error::Cancelled)),
        }
    }

    /// Heartbeats the claim every third of its time to live; returns only when that fails. A
    /// claim the run's last commit completed needs no more heartbeats: then it waits for the
    /// execution to return.
    async fn keep_claim(&self, job: &ClaimedJob) -> EngineError {
        let sys = system();
        let mut job = job.clone();
        loop {
            tokio::time::sleep(self.config.claim_ttl / 3).await;
            match self
                .queue
                .heartbeat(&sys, &job, self.config.claim_ttl)
                .await
            {
                Ok(renewed) => job = renewed,
                Err(Error::Fenced { .. }) if self.completed(&job).await => {
                    std::future::pending::<()>().await;
                }
                Err(e) => return e.into(),
            }
        }
    }

    /// Exponential backoff with jitter derived from the claim, capped at `backoff_max`.
    fn backoff(&self, job: &ClaimedJob) -> Duration {
        let exp = self
            .config
            .backoff_base
            .saturating_mul(1u32 << job.attempt.saturating_sub(1).min(16));
        let capped = exp.min(self.config.backoff_max);
        let jitter_permille = (job.token.wrapping_mul(7919) ^ u64::from(job.attempt)) % 250;
        capped + capped.mul_f64(jitter_permille as f64 / 1000.0)
    }
}
