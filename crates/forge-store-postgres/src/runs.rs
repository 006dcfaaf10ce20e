//! Runs, leases, the event log and `commit_step` on PostgreSQL (threads are in `threads`). Every call is one
//! transaction confined to the scope's tenant (see `PostgresStore::tenant_tx`); the run row is
//! locked (`FOR UPDATE`) while a lease or commit is decided, so concurrent writers queue on it.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::event::RunEvent;
use forge_core::id::{RunId, ThreadId};
use forge_core::ports::store::{
    Admission, Committed, InFlight, LeasedRun, NewRun, RunQuery, RunStore, StartStrategy,
    StepCommit, admit, check_commit, foreign_settlement, next_lease, not_an_open_call,
    renewed_lease,
};
use forge_core::run::{Run, RunLease};
use forge_core::scope::Scope;

use crate::PostgresStore;
use crate::rows::{self, db_error, i64_of, to_json};
use crate::steps::{EventColumns, StepArgs, judge_step, step_error};
use crate::threads::{set_state, set_summary, thread_exists};

use crate::Tx;

async fn fetch_run(tx: &mut Tx, scope: &Scope, id: RunId, lock: bool) -> Result<Run, Error> {
    let sql = if lock {
        "SELECT * FROM forge_runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE"
    } else {
        "SELECT * FROM forge_runs WHERE id = $1 AND tenant_id = $2"
    };
    let row = sqlx::query(sql)
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?
        .ok_or_else(|| Error::not_found("run", id))?;
    rows::run(&row)
}

/// A run admitted in one statement: its row, a queued run's first event (`$12`..`$14`, empty
/// arrays for a run that starts at once) and its wake-up, the thread's active run when it starts
/// at once (`$15`), the cancel requests of an interrupting run (`$16`), and its job.
const CREATE_RUN_SQL: &str = "WITH inserted AS ( \
    INSERT INTO forge_runs (id, tenant_id, principal_id, thread_id, agent_name, agent_version, status, version, \
    last_seq, checkpoint, fence, created_at, updated_at, input, role_ids) \
    VALUES ($1, $2, $3, $4, $5, $6, 'queued', 0, $7, $8, 0, $9, $9, $10, $11) \
), events AS ( \
    INSERT INTO forge_run_events (run_id, seq, tenant_id, at, body) \
    SELECT $1, e.seq, $2, e.at, e.body::json FROM UNNEST($12::bigint[], $13::timestamptz[], $14::text[]) AS e(seq, at, body) \
    RETURNING pg_notify('forge_run_events', $1::text || ' ' || $4::text) \
), activated AS ( \
    UPDATE forge_threads SET active_run = $1 WHERE $15 AND id = $4 AND tenant_id = $2 \
), interrupted AS ( \
    UPDATE forge_runs SET cancel_requested = true WHERE $16 AND thread_id = $4 AND tenant_id = $2 AND id <> $1 \
    AND status NOT IN ('completed', 'failed', 'cancelled') \
) \
INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, traceparent) \
VALUES ($17, $2, $1, $18, $9, 0, $19, 0, $20)";

/// `forge_start_run` with `$thread` as its thread: the one definition of [`START_RUN_SQL`] and
/// [`START_ON_NEW_THREAD_SQL`].
macro_rules! start_run_sql {
    ($thread:literal) => {
        concat!(
            "SELECT forge_start_run($1, $2, $3, ",
            $thread,
            ", $5, $6, $7, $8, $9, $10, $11, $12, $13) AS started"
        )
    };
}

/// A run's start on an idle thread through `forge_start_run` (migration 26), in one round trip:
/// `started` when the run (`$1`…`$10`) and its ready job (`$11`…`$13`) were written as the
/// thread's active run; otherwise nothing was, and `create_run` admits it under a lock.
const START_RUN_SQL: &str = start_run_sql!("$4");

/// [`START_RUN_SQL`] for a run on a thread created for it (`NewRun::new_thread`): the thread
/// `$4` (titled `$14`, with the session state `$15`) is inserted through `forge_insert_thread`
/// (migration 26) first, in the same statement. It is inserted as `forge_start_run`'s thread
/// argument is computed, so before that function runs, whose statements see it (each reads a
/// snapshot taken when it begins); a thread of that id that exists already fails the statement
/// and nothing is written. Sent again after a connection the server closed, the insert finds its
/// own thread and passes, and the start finds its own run.
const START_ON_NEW_THREAD_SQL: &str =
    start_run_sql!("(SELECT $4::uuid FROM forge_insert_thread($4, $2, $3, $14, $15, $8))");

/// `query` with a new run's first six parameters bound, as `START_RUN_SQL` and `CREATE_RUN_SQL`
/// take them: its id, tenant, principal, thread, agent and agent version.
fn bind_new_run<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    run: &'q Run,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(run.id.0)
        .bind(run.tenant_id.as_str())
        .bind(run.principal_id.as_str())
        .bind(run.thread_id.0)
        .bind(&run.agent.name)
        .bind(&run.agent.version)
}

/// `forge_start_run` with `$thread` as its thread, then the lease and the history: the one
/// definition of [`START_LEASED_SQL`] and [`START_LEASED_ON_NEW_THREAD_SQL`].
macro_rules! start_leased_sql {
    ($thread:literal) => {
        concat!(
            "SELECT s.started, (l.o_run).*, l.o_taken AS taken, h.* \
            FROM forge_start_run($1, $2, $3, ",
            $thread,
            ", $5, $6, $7, $8, $9, $10, $11, $12, $13) AS s(started) \
            LEFT JOIN LATERAL forge_lease(CASE WHEN s.started THEN $1::uuid END, $2, $14, $15, $8) \
            AS l ON true \
            LEFT JOIN LATERAL forge_thread_start((l.o_run).thread_id, $2, \
            CASE WHEN l.o_taken THEN $16::bigint END) AS h ON true"
        )
    };
}

/// [`START_RUN_SQL`] and, in the same statement when the run started, its lease through
/// `forge_lease` for `$14` until `$15` (judged at the start's `$8`) and what it begins with
/// through `forge_thread_start` (at most `$16` messages), as [`LEASE_WITH_HISTORY_SQL`] reads
/// them: `started`, then the run as it was before the lease, whether the lease was taken and the
/// thread's and the page's columns. `forge_lease` runs after `forge_start_run` (it takes the
/// run's id from it) and sees its insert: each statement of a volatile function reads a snapshot
/// taken when it begins. A run that did not start is neither leased nor read.
const START_LEASED_SQL: &str = start_leased_sql!("$4");

/// [`START_LEASED_SQL`] for a run on a thread created for it, inserted first as in
/// [`START_ON_NEW_THREAD_SQL`] (titled `$17`, with the session state `$18`).
const START_LEASED_ON_NEW_THREAD_SQL: &str =
    start_leased_sql!("(SELECT $4::uuid FROM forge_insert_thread($4, $2, $3, $17, $18, $8))");

/// A new run as `create_run` writes it: the run, its job, and the columns encoded once (a call
/// sent again is bound from them).
struct Start {
    run: Run,
    job: forge_core::id::JobId,
    max_attempts: i32,
    now: forge_core::time::Timestamp,
    checkpoint: rows::Encoded,
    input: rows::Encoded,
    roles: rows::Encoded,
    /// The thread to create for the run, if it asked for one: its title and session state.
    thread: Option<(Option<String>, rows::Encoded)>,
}

impl Start {
    /// `new` checked and made a queued run of `scope` now.
    fn of(store: &PostgresStore, scope: &Scope, new: &NewRun) -> Result<Self, Error> {
        forge_core::ports::rules::check_new_run(new)?;
        let now = store.clock.now();
        let run = new.queued(new.id_or_new(store.ids.as_ref()), scope, now);
        Ok(Self {
            job: forge_core::id::JobId::generate(store.ids.as_ref()),
            max_attempts: i32::try_from(new.max_attempts).unwrap_or(i32::MAX),
            now,
            checkpoint: to_json(&run.checkpoint)?,
            input: to_json(&run.input)?,
            roles: to_json(&run.role_ids)?,
            thread: new
                .new_thread
                .as_ref()
                .map(|t| Ok::<_, Error>((t.title.clone(), to_json(&t.state)?)))
                .transpose()?,
            run,
        })
    }

    /// `query` with the thread's title and state bound after the statement's other parameters,
    /// when the run creates its thread.
    fn bind_thread<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        match &self.thread {
            Some((title, state)) => query.bind(title).bind(state),
            None => query,
        }
    }

    /// `query` (`START_RUN_SQL` or `START_LEASED_SQL`) with `$1`…`$13` bound.
    fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        new: &'q NewRun,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        bind_new_run(query, &self.run)
            .bind(&self.checkpoint)
            .bind(self.now.0)
            .bind(&self.input)
            .bind(&self.roles)
            .bind(self.job.0)
            .bind(self.max_attempts)
            .bind(&new.traceparent)
    }
}

/// A lease through `forge_lease` (migration 21): taken under a lock on the run row, the next fence
/// to `$3` until `$4` when no one else holds an unexpired lease at `$5`; returns the row as it was,
/// for `next_lease` to judge, and whether it was taken (exactly when `next_lease` allows it). After
/// the lease in the same statement, what the run begins with through `forge_thread_start`
/// (migration 27): its thread and the first page of its history, at most `$6` messages, read only
/// when the lease was taken and `$6` is not null, in a snapshot taken after it.
pub(crate) const LEASE_WITH_HISTORY_SQL: &str = "SELECT (s.o_run).*, s.o_taken AS taken, h.* \
    FROM forge_lease($1, $2, $3, $4, $5) AS s \
    LEFT JOIN LATERAL forge_thread_start((s.o_run).thread_id, $2, \
    CASE WHEN s.o_taken THEN $6::bigint END) AS h ON true";

/// A lease `forge_lease` was asked for (`holder`, for `ttl` from `now`), judged on the row it
/// returned (the run as it was, and whether the lease was `taken`): the new lease and the run
/// under it, or why it was not taken.
pub(crate) fn judge_lease(
    row: &sqlx::postgres::PgRow,
    holder: &str,
    ttl: Duration,
    now: forge_core::time::Timestamp,
) -> Result<(RunLease, Run), Error> {
    let mut run = rows::run(row)?;
    // Judged on the row as it was; the lease was taken exactly when next_lease allows it
    // (unless it lapsed within the database's microsecond: then not taken, and refused).
    let lease = next_lease(&run, holder, ttl, now)?;
    if !rows::get::<bool>(row, "taken")? {
        return Err(Error::LeaseHeld {
            resource: format!("run {}", run.id),
            until: run.lease.as_ref().map_or(now, |l| l.expires_at),
        });
    }
    run.fence = lease.token;
    run.lease = Some(lease.clone());
    Ok((lease, run))
}

async fn set_lease(tx: &mut Tx, lease: &RunLease, fence: Option<u64>) -> Result<(), Error> {
    sqlx::query(
        "UPDATE forge_runs SET lease_holder = $1, lease_token = $2, lease_expires_at = $3, fence = COALESCE($4, fence) WHERE id = $5",
    )
    .bind(&lease.holder)
    .bind(i64_of(lease.token)?)
    .bind(lease.expires_at.0)
    .bind(fence.map(i64_of).transpose()?)
    .bind(lease.run_id.0)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

impl PostgresStore {
    /// Admits `start` under a lock on its thread's row (a busy thread, or none of the tenant's;
    /// a run that asked for a thread of its own is refused here, as the thread was there before):
    /// as the thread's active run or queued behind it, by `new.strategy`.
    async fn admit_under_lock(
        &self,
        scope: &Scope,
        start: Start,
        new: &NewRun,
    ) -> Result<Run, Error> {
        let Start {
            mut run,
            job,
            max_attempts,
            now,
            checkpoint,
            input,
            roles,
            thread,
        } = start;
        // A thread created for the run is idle, and its run starts at once: one that did not
        // start met a thread of that id that was there before (the insert took it for its own,
        // as it takes a thread it created when sent again).
        if thread.is_some() {
            return Err(Error::invalid(format!(
                "thread {} exists already",
                run.thread_id
            )));
        }
        let mut tx = self.tenant_tx(scope).await?;
        // Locking the thread row serializes admissions to one thread.
        let active: Option<Option<uuid::Uuid>> = sqlx::query_scalar(
            "SELECT active_run FROM forge_threads WHERE id = $1 AND tenant_id = $2 FOR UPDATE",
        )
        .bind(run.thread_id.0)
        .bind(scope.tenant_id().as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let active = active
            .ok_or_else(|| Error::not_found("thread", run.thread_id))?
            .map(RunId);
        let admission = admit(run.thread_id, active, new.strategy)?;
        let queued_event = admission.begin(&mut run, now);
        let job_state = match admission {
            Admission::Active => "ready",
            Admission::Queued { .. } => "waiting",
        };
        let events = EventColumns::of(queued_event.as_slice())?;
        let interrupt = matches!(admission, Admission::Queued { .. })
            && new.strategy == StartStrategy::Interrupt;
        bind_new_run(sqlx::query(CREATE_RUN_SQL), &run)
            .bind(i64_of(run.last_seq)?)
            .bind(&checkpoint)
            .bind(now.0)
            .bind(&input)
            .bind(&roles)
            .bind(events.seqs)
            .bind(events.ats)
            .bind(events.bodies)
            .bind(matches!(admission, Admission::Active))
            .bind(interrupt)
            .bind(job.0)
            .bind(job_state)
            .bind(max_attempts)
            .bind(&new.traceparent)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(run)
    }

    /// The lease a statement took with the history (`LEASE_WITH_HISTORY_SQL`,
    /// `START_LEASED_SQL`), judged on its `row` as `judge_lease` judges it at `now`, and the
    /// history read with it. A page after a summary is read apart; if that read fails, the engine
    /// reads the history itself (and hears why), under the lease this call took.
    async fn leased_with_history(
        &self,
        scope: &Scope,
        row: &sqlx::postgres::PgRow,
        holder: &str,
        ttl: Duration,
        now: forge_core::time::Timestamp,
        limit: usize,
    ) -> Result<LeasedRun, Error> {
        let (lease, run) = judge_lease(row, holder, ttl, now)?;
        let history = self.thread_start(scope, row, limit).await.ok().flatten();
        Ok(LeasedRun {
            lease,
            run,
            history,
        })
    }

    /// One call of `LEASE_WITH_HISTORY_SQL` for `holder` until `ttl` from now, reading at most
    /// `limit` messages of history when given: the row, for `judge_lease`, and the time it was
    /// judged at.
    async fn lease_row(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
        limit: Option<usize>,
    ) -> Result<(sqlx::postgres::PgRow, forge_core::time::Timestamp), Error> {
        let now = self.clock.now();
        let expires_at = now.plus(ttl);
        let row = self
            .tenant_call(scope, || {
                sqlx::query(LEASE_WITH_HISTORY_SQL)
                    .bind(id.0)
                    .bind(scope.tenant_id().as_str())
                    .bind(holder)
                    .bind(expires_at.0)
                    .bind(now.0)
                    .bind(limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX)))
            })
            .await
            .map_err(db_error)?
            .into_iter()
            .next()
            .ok_or_else(|| Error::not_found("run", id))?;
        Ok((row, now))
    }
}

#[async_trait]
impl RunStore for PostgresStore {
    async fn create_run(&self, scope: &Scope, new: NewRun) -> Result<Run, Error> {
        let start = Start::of(self, scope, &new)?;
        // An idle thread (the usual case) admits the run as its active one, in one round trip.
        let statement = match start.thread {
            Some(_) => START_ON_NEW_THREAD_SQL,
            None => START_RUN_SQL,
        };
        let started = self
            .tenant_call(scope, || {
                start.bind_thread(start.bind(sqlx::query(statement), &new))
            })
            .await
            .map_err(db_error)?;
        if started
            .first()
            .map(|row| rows::get::<bool>(row, "started"))
            .transpose()?
            .unwrap_or(false)
        {
            return Ok(start.run);
        }
        self.admit_under_lock(scope, start, &new).await
    }

    async fn create_run_leased(
        &self,
        scope: &Scope,
        new: NewRun,
        holder: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<LeasedRun, Error> {
        let start = Start::of(self, scope, &new)?;
        let expires_at = start.now.plus(ttl);
        // An idle thread admits the run, and the run is leased and its history read, in one
        // statement: one commit where `create_run` and `lease_run_with_history` make two.
        let statement = match start.thread {
            Some(_) => START_LEASED_ON_NEW_THREAD_SQL,
            None => START_LEASED_SQL,
        };
        let row = self
            .tenant_call(scope, || {
                start.bind_thread(
                    start
                        .bind(sqlx::query(statement), &new)
                        .bind(holder)
                        .bind(expires_at.0)
                        .bind(i64::try_from(limit).unwrap_or(i64::MAX)),
                )
            })
            .await
            .map_err(db_error)?
            .into_iter()
            .next()
            .ok_or_else(|| Error::not_found("run", start.run.id))?;
        if !rows::get::<bool>(&row, "started")? {
            // A busy thread: admitted as `create_run` admits it, then leased as usual.
            let run = self.admit_under_lock(scope, start, &new).await?;
            return self
                .lease_run_with_history(scope, run.id, holder, ttl, limit)
                .await;
        }
        self.leased_with_history(scope, &row, holder, ttl, start.now, limit)
            .await
    }

    async fn cancels_requested(&self, scope: &Scope, ids: &[RunId]) -> Result<Vec<RunId>, Error> {
        let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.0).collect();
        let mut tx = self.tenant_tx(scope).await?;
        let asked: Vec<uuid::Uuid> = sqlx::query_scalar(
            "SELECT id FROM forge_runs WHERE tenant_id = $1 AND id = ANY($2) \
             AND cancel_requested AND status NOT IN ('completed', 'failed', 'cancelled')",
        )
        .bind(scope.tenant_id().as_str())
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(asked.into_iter().map(RunId).collect())
    }

    async fn request_cancel(&self, scope: &Scope, id: RunId) -> Result<bool, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, id, true).await?;
        if run.status.is_terminal() || run.cancel_requested {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE forge_runs SET cancel_requested = true WHERE id = $1 AND tenant_id = $2",
        )
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        // A waiting run holds no job: give it one, so a worker comes and cancels it.
        let job = forge_core::id::JobId::generate(self.ids.as_ref());
        let now = self.clock.now();
        crate::interactions::wake(&mut tx, scope.tenant_id().as_str(), id, job, now, false).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }

    async fn get_run(&self, scope: &Scope, id: RunId) -> Result<Run, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, id, false).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(run)
    }

    async fn list_runs(&self, scope: &Scope, thread_id: ThreadId) -> Result<Vec<Run>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        thread_exists(&mut tx, scope, thread_id).await?;
        let found = sqlx::query("SELECT * FROM forge_runs WHERE thread_id = $1 AND tenant_id = $2 ORDER BY created_at, id")
            .bind(thread_id.0)
            .bind(scope.tenant_id().as_str())
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::run).collect()
    }

    async fn query_runs(&self, scope: &Scope, query: &RunQuery) -> Result<Vec<Run>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        // Below the cursor, checked to be the tenant's first.
        let cursor = match query.before {
            Some(before) => {
                let run = fetch_run(&mut tx, scope, before, false).await?;
                Some((run.created_at, run.id))
            }
            None => None,
        };
        let (sql, values) = forge_sql::statements::run_page("*", query, cursor);
        let found = rows::binds(
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(scope.tenant_id().as_str()),
            values,
        )
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::run).collect()
    }

    async fn runs_in_flight(&self, scope: &Scope, at_most: usize) -> Result<InFlight, Error> {
        // Over `forge_runs_in_flight`, which holds only the runs queued or running.
        let mut tx = self.tenant_tx(scope).await?;
        let (tenant, principal): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE principal_id = $3) FROM (SELECT principal_id \
             FROM forge_runs WHERE tenant_id = $1 AND status IN ('queued', 'running') LIMIT $2) \
             AS in_flight",
        )
        .bind(scope.tenant_id().as_str())
        .bind(i64::try_from(at_most).unwrap_or(i64::MAX))
        .bind(scope.principal_id().as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(InFlight {
            tenant: usize::try_from(tenant).unwrap_or(0),
            principal: usize::try_from(principal).unwrap_or(0),
        })
    }

    async fn acquire_lease(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<RunLease, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, id, true).await?;
        // Read once the row is locked: a lease that waited for the lock is not written already
        // (partly) expired.
        let now = self.clock.now();
        let lease = next_lease(&run, holder, ttl, now)?;
        set_lease(&mut tx, &lease, Some(lease.token)).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(lease)
    }

    async fn lease_run(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunLease, Run), Error> {
        let (row, now) = self.lease_row(scope, id, holder, ttl, None).await?;
        judge_lease(&row, holder, ttl, now)
    }

    async fn lease_run_with_history(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<LeasedRun, Error> {
        let (row, now) = self.lease_row(scope, id, holder, ttl, Some(limit)).await?;
        self.leased_with_history(scope, &row, holder, ttl, now, limit)
            .await
    }

    async fn renew_lease(
        &self,
        scope: &Scope,
        lease: &RunLease,
        ttl: Duration,
    ) -> Result<RunLease, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, lease.run_id, true).await?;
        // Read once the row is locked, as for a new lease.
        let now = self.clock.now();
        let renewed = renewed_lease(&run, lease, ttl, now)?;
        set_lease(&mut tx, &renewed, None).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(renewed)
    }

    async fn release_lease(&self, scope: &Scope, lease: &RunLease) -> Result<(), Error> {
        let mut tx = self.tenant_tx(scope).await?;
        fetch_run(&mut tx, scope, lease.run_id, true).await?;
        sqlx::query(
            "UPDATE forge_runs SET lease_holder = NULL, lease_token = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND tenant_id = $2 AND lease_token = $3",
        )
        .bind(lease.run_id.0)
        .bind(scope.tenant_id().as_str())
        .bind(i64_of(lease.token)?)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    async fn commit_step(&self, scope: &Scope, commit: StepCommit) -> Result<Committed, Error> {
        let now = self.clock.now();
        if let Some(call) = foreign_settlement(&commit, scope.tenant_id()) {
            return Err(not_an_open_call(call.id));
        }
        let rls = self.mode == crate::Mode::Rls;
        let args = StepArgs::of(&commit, scope, now, rls)?;
        // As Supabase's `forge_tenant`, the step cannot complete its claim in its own statement;
        // it does so in its transaction, after resetting the role.
        let claim = commit.completes(scope.tenant_id()).filter(|_| !rls);
        // A step that also writes thread state, a summary, interactions or audit entries is
        // judged first, in a transaction (those writes need the run, and their own errors must
        // not mask the step's); the common step is one call, judged on the row it returns, and
        // in RLS mode committed with the steps that wait beside it (`steps`; no writers in
        // Supabase mode).
        if !commit.writes_beside_the_log() && claim.is_none() {
            let row = if let Some(writers) = &self.steps {
                writers.write(args).await
            } else {
                self.tenant_call(scope, || args.query())
                    .await
                    .map(|rows| rows.into_iter().next())
            }
            .map_err(step_error)?
            .ok_or_else(|| Error::not_found("run", commit.run_id))?;
            return judge_step(&row, &commit, scope, now);
        }
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, commit.run_id, true).await?;
        check_commit(&run, &commit, now)?;
        if let Some(update) = commit.state.clone() {
            set_state(
                &mut tx,
                scope,
                run.thread_id,
                update.expected_version,
                update.values,
            )
            .await?;
        }
        if let Some(summary) = &commit.summary {
            set_summary(&mut tx, scope, &run, summary).await?;
        }
        for i in &commit.interactions {
            crate::interactions::insert(&mut tx, i).await?;
        }
        for record in &commit.audit {
            crate::interactions::audit(&mut tx, record).await?;
        }
        let row = args
            .query()
            .fetch_optional(&mut *tx)
            .await
            .map_err(step_error)?
            .ok_or_else(|| Error::not_found("run", commit.run_id))?;
        // A refusal returns here, and dropping the transaction rolls back what it wrote.
        let mut committed = judge_step(&row, &commit, scope, now)?;
        if let Some(job) = claim {
            sqlx::query("SELECT set_config('role', 'none', true)")
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            committed.job_completed = sqlx::query_scalar("SELECT forge_sys_complete($1, $2, $3)")
                .bind(job.id.0)
                .bind(i64_of(job.token)?)
                .bind(now.0)
                .fetch_one(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(committed)
    }

    async fn read_events(
        &self,
        scope: &Scope,
        id: RunId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<RunEvent>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        fetch_run(&mut tx, scope, id, false).await?;
        let found = sqlx::query(
            "SELECT body FROM forge_run_events WHERE run_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
        )
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .bind(i64::try_from(after_seq).unwrap_or(i64::MAX))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(|r| rows::json(r, "body")).collect()
    }
}
