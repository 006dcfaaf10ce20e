//! A step's write on PostgreSQL: the statement that commits a whole step through
//! `forge_write_step`, how its answer is judged, and group commit.
//!
//! Group commit (RLS mode): at most `writers` step statements are in flight at once, each writer
//! on a connection of its own (so a group never waits behind claims for one of the hot pool's).
//! A step that finds them all busy waits in a queue, and the writer that finishes next sends
//! everything waiting (up to [`MAX_GROUP`] steps) as one statement: one call of
//! `forge_write_steps` (migration 31) per tenant, which writes that tenant's steps as sets (one
//! update of their runs, one insert each of their events, messages and calls), the calls joined
//! by `UNION ALL` (see `group`). One round trip and one commit for the lot, and a few statements
//! for the group where each step was several. Each step is gated and fenced exactly as alone (in
//! the update of its run; a refusal is a row returned for its place, not an error), so a group
//! changes how many commits and statements there are, never what any step may write. A step is
//! answered only once the group's commit is acknowledged. An error that aborts the group (a
//! call that raises, a lock timeout) has written nothing; each of its steps is then sent again
//! alone, and hears its own answer.
//! With a writer free, a step goes at once, alone, in the caller's task: a sequential run pays
//! nothing for the queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use forge_core::Error;
use forge_core::event::RunEvent;
use forge_core::message::Message;
use forge_core::ports::store::{
    Committed, StepCommit, check_commit, check_commit_alone, not_an_open_call, statuses_reaching,
};
use forge_core::scope::Scope;
use parking_lot::Mutex;
use sqlx::postgres::PgConnectOptions;
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection};
use tokio::sync::oneshot;

use crate::rows::{self, db_error, i64_of, to_json};

mod group;

/// A step's events as the columns `UNNEST` takes.
pub(crate) struct EventColumns {
    pub(crate) seqs: Vec<i64>,
    pub(crate) ats: Vec<chrono::DateTime<chrono::Utc>>,
    /// As text: the log's column is `json`, kept as written (migration 30).
    pub(crate) bodies: Vec<String>,
}

impl EventColumns {
    /// The columns of `events`, in order.
    pub(crate) fn of(events: &[RunEvent]) -> Result<Self, Error> {
        Ok(Self {
            seqs: events
                .iter()
                .map(|e| i64_of(e.seq))
                .collect::<Result<_, _>>()?,
            ats: events.iter().map(|e| e.at.0).collect(),
            bodies: events
                .iter()
                .map(rows::to_json_text)
                .collect::<Result<_, _>>()?,
        })
    }
}

/// A step's messages as the columns `UNNEST` takes.
struct MessageColumns {
    ids: Vec<uuid::Uuid>,
    runs: Vec<uuid::Uuid>,
    roles: Vec<&'static str>,
    parts: Vec<rows::Encoded>,
    ats: Vec<chrono::DateTime<chrono::Utc>>,
}

impl MessageColumns {
    fn of(messages: &[Message]) -> Result<Self, Error> {
        Ok(Self {
            ids: messages.iter().map(|m| m.id.0).collect(),
            runs: messages.iter().map(|m| m.run_id.0).collect(),
            roles: messages.iter().map(|m| m.role.name()).collect(),
            parts: messages
                .iter()
                .map(|m| to_json(&m.parts))
                .collect::<Result<_, _>>()?,
            ats: messages.iter().map(|m| m.created_at.0).collect(),
        })
    }
}

/// The step's statement sent alone, with `$completed` as the column saying whether it completed
/// its claim: the one definition of both its forms.
macro_rules! step_sql {
    ($completed:literal) => {
        concat!(
            "SELECT s.o_version AS written_version, s.o_last_seq AS written_last_seq, \
            s.o_cancel AS written_cancel, (s.o_run).*, s.o_closed AS closed, ",
            $completed,
            " AS job_completed \
            FROM forge_write_step($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
            $12 AND EXISTS (SELECT 1 FROM forge_listeners l WHERE l.expires_at > $7), $13, $14, \
            $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29) AS s"
        )
    };
}

/// A whole step through `forge_write_step` (migration 22; these parameters select migration 30's
/// overload, which takes the events as text for the `json` log). Its gate is the run row's update
/// (decided on the row as it is when updated: the lease `$13` unexpired at `$7`, the version `$1`,
/// the events continuing the log at `$27`, a status `$28` the step may leave, what
/// `check_commit_alone` found of the step itself `$29`, and every settled call still open), and it
/// refuses whatever `check_commit` would refuse. A step it passes is written whole: its events,
/// messages and settled model calls, the run row (its lease cleared when the step ends the run,
/// `$10`), and when the run ends (`$11`, in a statement of its own) its pending interactions
/// expire and its thread's oldest queued run becomes active with its job ready; listeners are
/// notified when it appended events (`$12`). It returns the run's new version, log end and cancel
/// flag when it wrote; when it refused, the run row as it now is and the settled calls that were
/// not open.
///
/// A step that ends or parks its run under a claim (`$30` the job, `$31` its token) completes
/// the job in the same statement through `forge_sys_complete` once the step was written (a
/// `CASE`, so that a refused step completes nothing), and says whether it did. It notifies only
/// while a process listens (an unexpired row of `forge_listeners`, migration 24; see `notify`).
pub(crate) const STEP_SQL: &str = step_sql!(
    "CASE WHEN s.o_version IS NOT NULL AND $30::uuid IS NOT NULL \
    THEN forge_sys_complete($30, $31, $7) ELSE false END"
);

/// [`STEP_SQL`] for a step that completes no claim in its statement: most steps, and every step in
/// Supabase mode, whose `forge_tenant` may not execute `forge_sys_complete` (a kept generic plan
/// that names the function is refused when the executor starts, whether or not it calls it).
/// Takes `$1`…`$29`.
pub(crate) const STEP_ALONE_SQL: &str = step_sql!("false");

/// A step's arguments to `forge_write_step`, encoded once and owned (a call that met a closed
/// connection is sent again from them, and a queued step is sent by another task).
pub(crate) struct StepArgs {
    version: i64,
    count: i64,
    status: &'static str,
    wait_reason: Option<&'static str>,
    checkpoint: rows::Encoded,
    failure: Option<rows::Encoded>,
    /// The step's clock reading: its lease must be unexpired then, and it stamps the run row.
    now: chrono::DateTime<chrono::Utc>,
    run: uuid::Uuid,
    tenant: String,
    releases_lease: bool,
    ends_run: bool,
    token: i64,
    first: Option<i64>,
    events: EventColumns,
    messages: MessageColumns,
    calls: crate::usage::CallColumns,
    /// The statuses the step may leave, as `forge_write_step` compares them.
    from: Vec<String>,
    /// Whether `check_commit_alone` passed.
    alone: bool,
    /// The claim the step completes in its statement (its job and token), if any: sent with
    /// [`STEP_SQL`], and a step without one with [`STEP_ALONE_SQL`].
    job: Option<uuid::Uuid>,
    job_token: Option<i64>,
}

impl StepArgs {
    /// `commit`'s arguments at `now`. `completes` says whether the step may complete its claim in
    /// its statement (not as Supabase's `forge_tenant`, which may not call the system functions).
    pub(crate) fn of(
        commit: &StepCommit,
        scope: &Scope,
        now: forge_core::time::Timestamp,
        completes: bool,
    ) -> Result<Self, Error> {
        let job = commit.completes(scope.tenant_id()).filter(|_| completes);
        Ok(Self {
            version: i64_of(commit.expected_version)?,
            count: i64::try_from(commit.events.len()).unwrap_or(i64::MAX),
            status: commit.status.name(),
            wait_reason: commit.status.wait_reason().map(|r| r.name()),
            checkpoint: to_json(&commit.checkpoint)?,
            failure: commit.failure.as_ref().map(to_json).transpose()?,
            now: now.0,
            run: commit.run_id.0,
            tenant: scope.tenant_id().as_str().to_owned(),
            releases_lease: commit.releases_lease(),
            ends_run: commit.status.is_terminal(),
            token: i64_of(commit.lease.token)?,
            first: commit.events.first().map(|e| i64_of(e.seq)).transpose()?,
            events: EventColumns::of(&commit.events)?,
            messages: MessageColumns::of(&commit.messages)?,
            calls: crate::usage::CallColumns::of(&commit.settlements)?,
            from: statuses_reaching(commit.status).collect(),
            alone: check_commit_alone(commit, scope.tenant_id()).is_ok(),
            job: job.map(|j| j.id.0),
            job_token: job.map(|j| i64_of(j.token)).transpose()?,
        })
    }

    /// The step alone: [`STEP_SQL`] when it completes its claim, else [`STEP_ALONE_SQL`].
    pub(crate) fn query(&self) -> Query<'_> {
        let statement = if self.job.is_some() {
            STEP_SQL
        } else {
            STEP_ALONE_SQL
        };
        let query = self.bind(sqlx::query(statement));
        if self.job.is_some() {
            query.bind(self.job).bind(self.job_token)
        } else {
            query
        }
    }

    /// Binds `$1`…`$29` (in a group, the step's block of them).
    fn bind<'a>(&'a self, query: Query<'a>) -> Query<'a> {
        query
            .bind(self.version)
            .bind(self.count)
            .bind(self.status)
            .bind(self.wait_reason)
            .bind(&self.checkpoint)
            .bind(&self.failure)
            .bind(self.now)
            .bind(self.run)
            .bind(self.tenant.as_str())
            .bind(self.releases_lease)
            .bind(self.ends_run)
            .bind(!self.events.seqs.is_empty())
            .bind(self.token)
            .bind(&self.events.seqs)
            .bind(&self.events.ats)
            .bind(&self.events.bodies)
            .bind(&self.messages.ids)
            .bind(&self.messages.runs)
            .bind(&self.messages.roles)
            .bind(&self.messages.parts)
            .bind(&self.messages.ats)
            .bind(&self.calls.ids)
            .bind(&self.calls.period_starts)
            .bind(&self.calls.ats)
            .bind(&self.calls.statuses)
            .bind(&self.calls.bodies)
            .bind(self.first)
            .bind(&self.from)
            .bind(self.alone)
    }
}

/// A query of the step statements.
type Query<'a> = sqlx::query::Query<'a, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// What `forge_write_step` decided, as `commit_step` answers: the run's new version, log end and
/// cancel flag for a step it wrote (its gate refuses whatever `check_commit` refuses), and for
/// one it refused, the refusal, named by `check_commit` on the row as it now is.
pub(crate) fn judge_step(
    row: &sqlx::postgres::PgRow,
    commit: &StepCommit,
    scope: &Scope,
    now: forge_core::time::Timestamp,
) -> Result<Committed, Error> {
    if let Some(version) = rows::get::<Option<i64>>(row, "written_version")? {
        return Ok(Committed {
            version: rows::u64_of(version, "version")?,
            last_seq: rows::u64_of(rows::get(row, "written_last_seq")?, "last_seq")?,
            cancel_requested: rows::get(row, "written_cancel")?,
            job_completed: rows::get(row, "job_completed")?,
        });
    }
    check_commit(&rows::run(row)?, commit, now)?;
    let closed: Vec<uuid::Uuid> = rows::get(row, "closed")?;
    if let Some(call) = commit.settlements.iter().find(|c| closed.contains(&c.id.0)) {
        return Err(not_an_open_call(call.id));
    }
    check_commit_alone(commit, scope.tenant_id())?;
    // The row passes check_commit yet did not pass the gate: only a lease that lapsed within the
    // microsecond the database rounds the clock to.
    Err(Error::Fenced {
        resource: format!("run {}", commit.run_id),
    })
}

/// A `forge_write_step` refusal raised after its gate (a conflicting call it could not see), as the
/// error `commit_step` gives; other errors as they are.
pub(crate) fn step_error(e: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &e
        && db.code().as_deref() == Some("FG001")
        && let Ok(id) = db.message().parse::<uuid::Uuid>()
    {
        return not_an_open_call(forge_core::id::ModelCallId(id));
    }
    db_error(e)
}

/// The most steps one group writes: at most as many calls of `forge_write_steps`, 35 parameters
/// each (PostgreSQL takes up to 65,535 in a statement), and a statement prepared per number of
/// calls on each connection that sends one.
pub const MAX_GROUP: usize = 16;

/// How many step statements may be in flight at once unless the store is told otherwise
/// ([`crate::PostgresStore::with_step_writers`]). Four: in `forge-bench workload` (50 runs in
/// flight, PostgreSQL on one core) four writers ran 784–925 runs/s at 1.1–1.3 ms of PostgreSQL's
/// CPU per run, eight 603–612 runs/s at 1.9 ms (fewer steps to a group, more commits), and two
/// about as four; four leave a larger server more of its cores to write with.
pub const DEFAULT_STEP_WRITERS: usize = 4;

/// What a step's statement returned: the row `forge_write_step` answered with, or none when the
/// tenant has no such run.
type Answer = Result<Option<PgRow>, sqlx::Error>;

/// The writers' pool.
type Pool = forge_sql::Pool<PgConnection>;

/// How the store's steps have been grouped since it connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepGroups {
    /// Statements that wrote more than one step.
    pub groups: u64,
    /// Steps those statements wrote.
    pub steps: u64,
    /// Groups whose statement failed (a step that raised, a lock timeout), which wrote nothing,
    /// and whose steps were sent again one by one.
    pub resent: u64,
}

/// A step waiting for a writer, and where its answer goes.
struct Waiting {
    args: StepArgs,
    answer: oneshot::Sender<Answer>,
}

/// The steps in flight and those waiting for them.
#[derive(Default)]
struct Queue {
    sending: usize,
    waiting: Vec<Waiting>,
}

/// The writers of the common step (RLS mode): at most `writers` statements in flight, the steps
/// that arrive meanwhile written together by the next one free.
pub(crate) struct StepWriters {
    writers: usize,
    /// The writers' own connections, one each: a group never waits behind claims and leases
    /// for a connection of the hot pool.
    pool: Pool,
    queue: Mutex<Queue>,
    groups: AtomicU64,
    grouped: AtomicU64,
    resent: AtomicU64,
    /// Whether a failed group answers its steps with its error rather than sending them again
    /// (for tests: see [`crate::PostgresStore::with_groups_never_resent`]).
    strict: AtomicBool,
}

impl StepWriters {
    /// Writers of which `writers` (at least one) may be sending at once, each on a connection
    /// of its own opened with `options`.
    pub(crate) fn new(writers: usize, options: PgConnectOptions) -> Self {
        let writers = writers.max(1);
        Self {
            writers,
            pool: forge_sql::Pool::new(writers, forge_sql::Checks::NETWORK, move || {
                let options = options.clone();
                Box::pin(async move { PgConnection::connect_with(&options).await })
            }),
            queue: Mutex::default(),
            groups: AtomicU64::new(0),
            grouped: AtomicU64::new(0),
            resent: AtomicU64::new(0),
            strict: AtomicBool::new(false),
        }
    }

    /// The step writers of a store in `mode`: none in Supabase mode, which sends each step alone
    /// inside its tenant transaction, nor when `writers` is 0.
    pub(crate) fn of(
        mode: crate::Mode,
        writers: usize,
        options: &PgConnectOptions,
    ) -> Option<Arc<Self>> {
        (mode == crate::Mode::Rls && writers > 0)
            .then(|| Arc::new(Self::new(writers, options.clone())))
    }

    /// Makes a failed group answer its steps with its error instead of sending them again.
    #[cfg(feature = "testing")]
    pub(crate) fn never_resend(&self) {
        self.strict.store(true, Ordering::Relaxed);
    }

    /// Closes the writers' connections (those in use when they are given back).
    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    /// How many groups were written, and how many steps they held.
    pub(crate) fn groups(&self) -> StepGroups {
        StepGroups {
            groups: self.groups.load(Ordering::Relaxed),
            steps: self.grouped.load(Ordering::Relaxed),
            resent: self.resent.load(Ordering::Relaxed),
        }
    }

    fn queue(&self) -> parking_lot::MutexGuard<'_, Queue> {
        self.queue.lock()
    }

    /// Writes the step: at once and alone when a writer is free, else with the steps that wait
    /// beside it once one is. Answers after the step's commit (or its refusal).
    pub(crate) async fn write(self: &Arc<Self>, args: StepArgs) -> Answer {
        let turn = {
            let mut queue = self.queue();
            if queue.sending < self.writers {
                queue.sending += 1;
                Ok(args)
            } else {
                let (answer, heard) = oneshot::channel();
                queue.waiting.push(Waiting { args, answer });
                Err(heard)
            }
        };
        match turn {
            Ok(args) => {
                let slot = Slot {
                    writers: self.clone(),
                };
                let answer = alone(&self.pool, &args).await;
                // Dropped also when this future is: the waiting steps are handed on either way.
                drop(slot);
                answer
            }
            // A writer that could not answer (its runtime shut down) dropped the sender.
            Err(heard) => heard.await.unwrap_or(Err(sqlx::Error::PoolClosed)),
        }
    }

    /// A writer finished: the steps waiting (up to [`MAX_GROUP`]) are written by a task of their
    /// own, which keeps the writer's place; with none waiting the place is free.
    fn hand_on(self: &Arc<Self>) {
        let group: Vec<Waiting> = {
            let mut queue = self.queue();
            if queue.waiting.is_empty() {
                queue.sending -= 1;
                return;
            }
            let n = queue.waiting.len().min(MAX_GROUP);
            queue.waiting.drain(..n).collect()
        };
        let slot = Slot {
            writers: self.clone(),
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    slot.writers.send(group).await;
                });
            }
            // No runtime (the process is ending): the steps are answered with an error, by
            // dropping their senders, and the slot hands on to the next ones the same way.
            Err(_) => drop((group, slot)),
        }
    }

    /// Writes `group` in one statement, each step answered from its row; if the statement
    /// fails, nothing of it was written and each step is sent again alone.
    async fn send(&self, group: Vec<Waiting>) {
        let writers = &self.pool;
        // A step whose caller went away is not written (as if its call had been cancelled
        // before it was sent).
        let mut group: Vec<Waiting> = group
            .into_iter()
            .filter(|w| !w.answer.is_closed())
            .collect();
        if group.len() < 2 {
            if let Some(w) = group.pop() {
                let answer = alone(writers, &w.args).await;
                let _ = w.answer.send(answer);
            }
            return;
        }
        // In the order of their tenants and runs, so that two groups lock the runs they share in
        // the same order and cannot deadlock (the sort is stable: one run's steps keep their
        // order).
        group.sort_by(|a, b| (&a.args.tenant, a.args.run).cmp(&(&b.args.tenant, b.args.run)));
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.grouped
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        match together(writers, &group).await {
            Ok(mut rows) => {
                for (i, w) in group.into_iter().enumerate() {
                    let _ = w.answer.send(Ok(rows[i].take()));
                }
            }
            Err(e) if self.strict.load(Ordering::Relaxed) => {
                let failed = format!("the group's statement failed: {e}");
                for w in group {
                    let _ = w.answer.send(Err(sqlx::Error::Protocol(failed.clone())));
                }
            }
            Err(_) => {
                self.resent.fetch_add(1, Ordering::Relaxed);
                for w in group {
                    let answer = alone(writers, &w.args).await;
                    let _ = w.answer.send(answer);
                }
            }
        }
    }
}

/// A writer's place: handed on when dropped, however its sending ended.
struct Slot {
    writers: Arc<StepWriters>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.writers.hand_on();
    }
}

/// Sends one step alone, in autocommit (again on another connection when the server had closed
/// the one it met: the step's gate refuses a step written already).
async fn alone(writers: &Pool, args: &StepArgs) -> Answer {
    let rows = crate::autocommit(writers, || args.query()).await?;
    Ok(rows.into_iter().next())
}

/// Sends `group` as one statement in autocommit: one call of `forge_write_steps` per tenant (and
/// per repeated run), each step's row by its place in the group.
async fn together(writers: &Pool, group: &[Waiting]) -> Result<Vec<Option<PgRow>>, sqlx::Error> {
    use sqlx::Row;
    let steps: Vec<&StepArgs> = group.iter().map(|w| &w.args).collect();
    let calls: Vec<group::Call<'_>> = group::calls(&steps)
        .iter()
        .map(|places| group::Call::of(&steps, places))
        .collect();
    let rows = crate::autocommit(writers, || {
        calls
            .iter()
            .fold(sqlx::query(group::statement(calls.len())), |query, call| {
                call.bind(query)
            })
    })
    .await?;
    let mut answers: Vec<Option<PgRow>> = (0..group.len()).map(|_| None).collect();
    for row in rows {
        let place: i32 = row.try_get("group_place")?;
        let slot = usize::try_from(place)
            .ok()
            .and_then(|i| answers.get_mut(i))
            .ok_or_else(|| sqlx::Error::Protocol(format!("a group answered for step {place}")))?;
        *slot = Some(row);
    }
    Ok(answers)
}

/// The statement writing a group in `calls` calls of `forge_write_steps` (see `group`).
#[cfg(feature = "testing")]
pub(crate) fn group_sql(calls: usize) -> &'static str {
    group::statement(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step's arguments that no test sends.
    fn unsent() -> StepArgs {
        StepArgs {
            version: 0,
            count: 0,
            status: "running",
            wait_reason: None,
            checkpoint: to_json(&()).expect("unit encodes"),
            failure: None,
            now: chrono::DateTime::UNIX_EPOCH,
            run: uuid::Uuid::nil(),
            tenant: "tenant".into(),
            releases_lease: false,
            ends_run: false,
            token: 0,
            first: None,
            events: EventColumns::of(&[]).expect("no events encode"),
            messages: MessageColumns::of(&[]).expect("no messages encode"),
            calls: crate::usage::CallColumns::of(&[]).expect("no calls encode"),
            from: vec![],
            alone: true,
            job: None,
            job_token: None,
        }
    }

    #[test]
    fn without_a_runtime_every_waiting_step_hears_an_error_and_the_writer_is_freed() {
        let writers = StepWriters::of(crate::Mode::Rls, 1, &PgConnectOptions::new())
            .expect("RLS mode has writers");
        // One writer sending, and more steps waiting than one group takes.
        let heard: Vec<_> = {
            let mut queue = writers.queue();
            queue.sending = 1;
            (0..MAX_GROUP + 4)
                .map(|_| {
                    let (answer, heard) = oneshot::channel();
                    queue.waiting.push(Waiting {
                        args: unsent(),
                        answer,
                    });
                    heard
                })
                .collect()
        };
        // The writer finishes as the process ends: no runtime to send the groups on.
        writers.hand_on();
        for (i, mut heard) in heard.into_iter().enumerate() {
            assert!(
                matches!(heard.try_recv(), Err(oneshot::error::TryRecvError::Closed)),
                "step {i} was left waiting"
            );
        }
        let queue = writers.queue();
        assert_eq!((queue.sending, queue.waiting.len()), (0, 0));
    }
}
