//! `commit_step` on SQLite: a step's writes sent to the connection as one batch.
//!
//! Every statement sqlx runs is a round trip to the connection's own thread, and those trips (two
//! thread wake-ups each) cost far more CPU than SQLite's work on the rows. So the common step
//! (events, messages, settled calls) is committed in one trip (`commit_at_once`): a batch from
//! `BEGIN IMMEDIATE` to `COMMIT` whose first statement refuses the transaction unless the run is
//! as the step expects (`forge_refuse`, migration 16), then the writes and the run's new row. A
//! refused batch wrote nothing, and the step is judged again in two trips (`commit_judged`, which
//! names the refusal, and which a step writing state, a summary, interactions or audit always
//! takes): the `BEGIN IMMEDIATE` with the run's row and which of the step's settled calls are not
//! open calls (the fence, version and calls are decided on them, under the write lock), then one
//! multi-statement batch ending in `COMMIT`. Nothing is refused after that batch began: an error
//! in it stops it before its `COMMIT`, and the transaction is rolled back.

use forge_core::Error;
use forge_core::event::RunEvent;
use forge_core::id::RunId;
use forge_core::message::Message;
use forge_core::metering::ModelCall;
use forge_core::ports::store::{
    Committed, StepCommit, check_commit, check_commit_alone, foreign_settlement, statuses_reaching,
};
use forge_core::scope::Scope;
use forge_core::time::Timestamp;
use futures_util::TryStreamExt;
use sqlx::{QueryBuilder, Sqlite};

use crate::SqliteStore;
use crate::rows::{db_error, i64_of, to_json};

/// Rows per multi-row `INSERT`: seven parameters a row stays far below SQLite's limit of 32,766
/// bound parameters.
const ROWS_PER_INSERT: usize = 500;

/// A multi-statement query built with `?` placeholders, which sqlx binds in order across its
/// statements, and what each statement must have changed.
struct Batch {
    sql: QueryBuilder<Sqlite>,
    /// Per statement: the rows it must change, and what a shortfall means.
    expect: Vec<Option<(u64, Shortfall)>>,
}

/// Why a statement of the batch changed fewer rows than it must have.
enum Shortfall {
    /// The run's row moved on (unreachable under the write lock the commit holds; kept as a
    /// guard, like PostgreSQL's row lock).
    Version { expected: u64 },
    /// A settled call replaced no open reservation of this run.
    Call(forge_core::id::ModelCallId),
}

impl Batch {
    fn new() -> Self {
        Self {
            sql: QueryBuilder::new(""),
            expect: Vec::new(),
        }
    }

    /// Ends the statement being built.
    fn end(&mut self, expect: Option<(u64, Shortfall)>) {
        self.sql.push("; ");
        self.expect.push(expect);
    }

    fn events(&mut self, scope: &Scope, events: &[RunEvent]) -> Result<(), Error> {
        for chunk in events.chunks(ROWS_PER_INSERT) {
            push_events(&mut self.sql, scope, chunk)?;
            self.end(None);
        }
        Ok(())
    }

    /// Inserts `messages` into the thread of their run (`run`, read by the statement).
    fn messages(&mut self, scope: &Scope, run: RunId, messages: &[Message]) -> Result<(), Error> {
        for chunk in messages.chunks(ROWS_PER_INSERT) {
            let rows = chunk
                .iter()
                .map(|m| Ok((m, to_json(&m.parts)?)))
                .collect::<Result<Vec<_>, Error>>()?;
            self.sql.push(
                "INSERT INTO forge_messages (tenant_id, thread_id, id, run_id, role, parts, created_at) ",
            );
            self.sql.push_values(rows, |mut row, (m, parts)| {
                row.push_bind(scope.tenant_id().as_str().to_owned())
                    .push("(SELECT thread_id FROM forge_runs WHERE id = ")
                    .push_bind_unseparated(run.to_string())
                    .push_unseparated(")")
                    .push_bind(m.id.to_string())
                    .push_bind(m.run_id.to_string())
                    .push_bind(m.role.name())
                    .push_bind(parts)
                    .push_bind(m.created_at.unix_millis());
            });
            self.end(None);
        }
        Ok(())
    }

    /// The new row of the run after `commit` (all but its version and log end, which the
    /// caller sets): status, checkpoint, failure, time, and the lease when the step ends it.
    fn run_changes(
        &mut self,
        scope: &Scope,
        commit: &StepCommit,
        now: Timestamp,
    ) -> Result<(), Error> {
        self.sql
            .push(", status = ")
            .push_bind(commit.status.name())
            .push(", waiting_for = ")
            .push_bind(commit.status.wait_reason().map(|r| r.name()))
            .push(", checkpoint = ")
            .push_bind(to_json(&commit.checkpoint)?)
            .push(", failure = ")
            .push_bind(commit.failure.as_ref().map(to_json).transpose()?)
            .push(", updated_at = ")
            .push_bind(now.unix_millis());
        if commit.releases_lease() {
            // The run ends: its lease goes with this commit.
            self.sql
                .push(", lease_holder = NULL, lease_token = NULL, lease_expires_at = NULL");
        }
        self.sql
            .push(" WHERE id = ")
            .push_bind(commit.run_id.to_string())
            .push(" AND tenant_id = ")
            .push_bind(scope.tenant_id().as_str().to_owned());
        Ok(())
    }

    /// For a step that ends its run: its pending interactions expire, and its thread's oldest
    /// queued run becomes the active one, with that run's job ready.
    fn ending(&mut self, scope: &Scope, run: RunId, now: Timestamp) {
        let (run, tenant) = (run.to_string(), scope.tenant_id().as_str().to_owned());
        // A run that ends leaves nothing for a person to decide.
        self.sql
            .push(
                "UPDATE forge_interactions SET status = 'expired', body = json_set(body, '$.status', 'expired') \
                 WHERE status = 'pending' AND run_id = ",
            )
            .push_bind(run.clone())
            .push(" AND tenant_id = ")
            .push_bind(tenant.clone());
        self.end(None);
        let thread = "(SELECT thread_id FROM forge_runs WHERE id = ";
        self.sql
            .push(
                "UPDATE forge_threads SET active_run = (SELECT id FROM forge_runs WHERE status = 'queued' \
                 AND thread_id = ",
            )
            .push(thread)
            .push_bind(run.clone())
            .push(") AND tenant_id = ")
            .push_bind(tenant.clone())
            .push(" AND id <> ")
            .push_bind(run.clone())
            .push(" ORDER BY created_at, id LIMIT 1) WHERE id = ")
            .push(thread)
            .push_bind(run.clone())
            .push(") AND tenant_id = ")
            .push_bind(tenant.clone())
            .push(" AND active_run = ")
            .push_bind(run.clone());
        self.end(None);
        self.sql
            .push("UPDATE forge_jobs SET state = 'ready', available_at = ")
            .push_bind(now.unix_millis())
            .push(" WHERE state = 'waiting' AND run_id = (SELECT active_run FROM forge_threads WHERE id = ")
            .push(thread)
            .push_bind(run)
            .push(") AND tenant_id = ")
            .push_bind(tenant)
            .push(")");
        self.end(None);
    }

    fn call(&mut self, call: &ModelCall) -> Result<(), Error> {
        self.sql
            .push("INSERT INTO forge_model_calls (id, tenant_id, run_id, period_start, at, status, body) VALUES (")
            .push_bind(call.id.to_string())
            .push(", ")
            .push_bind(call.tenant_id.as_str().to_owned())
            .push(", ")
            .push_bind(call.run_id.to_string())
            .push(", ")
            .push_bind(call.period_start.unix_millis())
            .push(", ")
            .push_bind(call.at.unix_millis())
            .push(", ")
            .push_bind(call.status.name())
            .push(", ")
            .push_bind(to_json(call)?)
            .push(
                ") ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body \
                 WHERE forge_model_calls.status = 'reserved' AND forge_model_calls.tenant_id = excluded.tenant_id",
            );
        self.end(Some((1, Shortfall::Call(call.id))));
        Ok(())
    }

    /// Runs the batch and then `COMMIT`, in one trip to the connection of the transaction, and
    /// returns the rows its statements returned: the database's error outside, a statement that
    /// changed fewer rows than it must have inside.
    ///
    /// Every refusal was decided before (the run's row and its calls were read under the write
    /// lock this transaction holds, or the batch's first statement refused it), so the row counts
    /// are only checked after: a shortfall would be a broken invariant of the store, reported as
    /// the refusal it would have been.
    async fn run_and_commit(
        mut self,
        conn: &mut sqlx::SqliteConnection,
        run: RunId,
    ) -> Result<Result<Vec<sqlx::sqlite::SqliteRow>, Error>, sqlx::Error> {
        self.sql.push("COMMIT");
        self.expect.push(None);
        let query = self.sql.build().persistent(false);
        let output: Vec<_> = sqlx::Executor::fetch_many(conn, query)
            .try_collect()
            .await?;
        let mut rows = Vec::new();
        let mut results = Vec::new();
        for item in output {
            match item {
                sqlx::Either::Left(result) => results.push(result),
                sqlx::Either::Right(row) => rows.push(row),
            }
        }
        for (result, expect) in results.iter().zip(&self.expect) {
            let Some((count, why)) = expect else { continue };
            if result.rows_affected() >= *count {
                continue;
            }
            let refusal = match why {
                Shortfall::Version { expected } => Error::VersionConflict {
                    entity: "run",
                    id: run.to_string(),
                    expected: *expected,
                    actual: expected + 1,
                },
                Shortfall::Call(id) => forge_core::ports::store::not_an_open_call(*id),
            };
            return Ok(Err(refusal));
        }
        Ok(Ok(rows))
    }
}

/// The first call `commit` settles a second time (it finds the call settled by then).
fn repeated_settlement(commit: &StepCommit) -> Option<&ModelCall> {
    let mut seen = std::collections::HashSet::new();
    commit.settlements.iter().find(|c| !seen.insert(c.id))
}

/// Whether `e` is the refusal of `forge_refuse` (migration 16).
fn refused(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.message().contains("forge: refused"))
}

/// Pushes one multi-row `INSERT` of `events` (at most [`ROWS_PER_INSERT`]).
fn push_events(
    sql: &mut QueryBuilder<Sqlite>,
    scope: &Scope,
    events: &[RunEvent],
) -> Result<(), Error> {
    let rows = events
        .iter()
        .map(|e| {
            Ok((
                e.run_id.to_string(),
                i64_of(e.seq)?,
                e.at.unix_millis(),
                to_json(e)?,
            ))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    sql.push("INSERT INTO forge_run_events (run_id, seq, tenant_id, at, body) ");
    sql.push_values(rows, |mut row, (run, seq, at, body)| {
        row.push_bind(run)
            .push_bind(seq)
            .push_bind(scope.tenant_id().as_str().to_owned())
            .push_bind(at)
            .push_bind(body);
    });
    Ok(())
}

/// Appends events outside a step (a run queued behind another), in one statement per
/// [`ROWS_PER_INSERT`].
pub(crate) async fn insert_events(
    tx: &mut crate::Tx,
    scope: &Scope,
    events: &[RunEvent],
) -> Result<(), Error> {
    for chunk in events.chunks(ROWS_PER_INSERT) {
        let mut sql = QueryBuilder::new("");
        push_events(&mut sql, scope, chunk)?;
        sql.build().execute(&mut **tx).await.map_err(db_error)?;
    }
    Ok(())
}

impl SqliteStore {
    /// See [`forge_core::ports::store::RunStore::commit_step`]: the common step in one trip,
    /// and a step that writes more, or that the database refused, judged in two.
    pub(crate) async fn commit(
        &self,
        scope: &Scope,
        commit: StepCommit,
    ) -> Result<Committed, Error> {
        use std::sync::atomic::Ordering::Relaxed;
        match self.commit_at_once(scope, &commit).await? {
            Some(committed) => {
                self.paths.one_trip.fetch_add(1, Relaxed);
                Ok(committed)
            }
            None => {
                self.paths.judged.fetch_add(1, Relaxed);
                self.commit_judged(scope, commit).await
            }
        }
    }

    /// A step that writes events, messages and settled calls, in one trip: `BEGIN IMMEDIATE`, a
    /// statement that refuses the transaction unless the run is as the step expects (what
    /// `check_commit` checks of the row, and every settled call open), the writes, the run's
    /// new row (returned), and `COMMIT`. `None` when the step is not such a step, or when the
    /// database refused it: nothing was written, and [`SqliteStore::commit_judged`] names the
    /// refusal (or, should the run have moved on since, judges the step anew).
    async fn commit_at_once(
        &self,
        scope: &Scope,
        commit: &StepCommit,
    ) -> Result<Option<Committed>, Error> {
        let tenant = scope.tenant_id();
        if commit.writes_beside_the_log()
            || check_commit_alone(commit, tenant).is_err()
            || foreign_settlement(commit, tenant).is_some()
            || repeated_settlement(commit).is_some()
        {
            return Ok(None);
        }
        let now = self.clock.now();
        let run = commit.run_id.to_string();
        let mut batch = Batch::new();
        batch.sql.push("BEGIN IMMEDIATE");
        batch.end(None);
        batch
            .sql
            .push("INSERT INTO forge_refuse (reason) SELECT 'step' WHERE NOT EXISTS (SELECT 1 FROM forge_runs WHERE id = ")
            .push_bind(run.clone())
            .push(" AND tenant_id = ")
            .push_bind(tenant.as_str().to_owned())
            .push(" AND version = ")
            .push_bind(i64_of(commit.expected_version)?)
            .push(" AND lease_token = ")
            .push_bind(i64_of(commit.lease.token)?)
            .push(" AND lease_expires_at > ")
            .push_bind(now.unix_millis());
        if let Some(first) = commit.events.first() {
            batch
                .sql
                .push(" AND last_seq + 1 = ")
                .push_bind(i64_of(first.seq)?);
        }
        batch
            .sql
            .push(" AND (status || coalesce(':' || waiting_for, '')) IN (");
        let mut from = batch.sql.separated(", ");
        for status in statuses_reaching(commit.status) {
            from.push_bind(status);
        }
        batch.sql.push(")");
        if !commit.settlements.is_empty() {
            batch
                .sql
                .push(" AND NOT EXISTS (SELECT 1 FROM forge_model_calls c WHERE c.id IN (");
            let mut ids = batch.sql.separated(", ");
            for call in &commit.settlements {
                ids.push_bind(call.id.to_string());
            }
            batch
                .sql
                .push(") AND NOT (c.status = 'reserved' AND c.tenant_id = ")
                .push_bind(tenant.as_str().to_owned())
                .push("))");
        }
        batch.sql.push(")");
        batch.end(None);
        batch.events(scope, &commit.events)?;
        batch.messages(scope, commit.run_id, &commit.messages)?;
        batch
            .sql
            .push("UPDATE forge_runs SET version = version + 1, last_seq = last_seq + ")
            .push_bind(i64::try_from(commit.events.len()).unwrap_or(i64::MAX));
        batch.run_changes(scope, commit, now)?;
        batch
            .sql
            .push(" RETURNING version, last_seq, cancel_requested");
        batch.end(None);
        for call in &commit.settlements {
            batch.call(call)?;
        }
        if commit.status.is_terminal() {
            batch.ending(scope, commit.run_id, now);
        }
        let (_gate, mut conn) = self.whole_tx_conn().await?;
        let rows = match batch.run_and_commit(&mut conn, commit.run_id).await {
            Ok(written) => written?,
            Err(e) if refused(&e) => return Ok(None),
            Err(e) => return Err(db_error(e)),
        };
        conn.release();
        let row = rows
            .first()
            .ok_or_else(|| crate::rows::corrupt("step", "the run's new row was not returned"))?;
        Ok(Some(Committed {
            version: crate::rows::u64_of(crate::rows::get(row, "version")?, "version")?,
            last_seq: crate::rows::u64_of(crate::rows::get(row, "last_seq")?, "last_seq")?,
            cancel_requested: crate::rows::get(row, "cancel_requested")?,
        }))
    }

    /// A step judged on the run's row read under the write lock, then written in one batch.
    async fn commit_judged(&self, scope: &Scope, commit: StepCommit) -> Result<Committed, Error> {
        let now = self.clock.now();
        // The run, and which of the calls the step settles are not open calls (settled already,
        // or another tenant's), read with the `BEGIN IMMEDIATE`.
        let tenant = crate::rows::literal(scope.tenant_id().as_str());
        let unopen = if commit.settlements.is_empty() {
            "NULL".to_owned()
        } else {
            let ids: Vec<String> = commit
                .settlements
                .iter()
                .map(|c| format!("'{}'", c.id))
                .collect();
            format!(
                "(SELECT group_concat(id) FROM forge_model_calls WHERE id IN ({}) \
                 AND NOT (status = 'reserved' AND tenant_id = {tenant}))",
                ids.join(", ")
            )
        };
        let (_gate, mut tx, found) = self
            .write_tx_reading(&format!(
                "SELECT {}, {unopen} AS unopen FROM forge_runs WHERE id = '{}' AND tenant_id = {tenant}",
                crate::runs::RUN_COLUMNS,
                commit.run_id
            ))
            .await?;
        let row = found
            .first()
            .ok_or_else(|| Error::not_found("run", commit.run_id))?;
        let run = crate::rows::run(row)?;
        let unopen: Option<String> = crate::rows::get(row, "unopen")?;
        let committed = check_commit(&run, &commit, now)?;
        if let Some(update) = commit.state.clone() {
            crate::runs::set_state(
                &mut tx,
                scope,
                run.thread_id,
                update.expected_version,
                update.values,
            )
            .await?;
        }
        if let Some(summary) = &commit.summary {
            crate::runs::set_summary(&mut tx, scope, &run, summary).await?;
        }
        for i in &commit.interactions {
            crate::interactions::insert(&mut tx, i).await?;
        }
        for record in &commit.audit {
            crate::interactions::audit(&mut tx, record).await?;
        }
        if let Some(call) = forge_core::ports::store::foreign_settlement(&commit, &run.tenant_id) {
            return Err(forge_core::ports::store::not_an_open_call(call.id));
        }
        // A call settled twice in one step finds it settled the second time.
        if let Some(call) = repeated_settlement(&commit) {
            return Err(forge_core::ports::store::not_an_open_call(call.id));
        }
        if let Some(call) = unopen.as_deref().and_then(|ids| {
            commit
                .settlements
                .iter()
                .find(|c| ids.split(',').any(|id| id == c.id.to_string()))
        }) {
            return Err(forge_core::ports::store::not_an_open_call(call.id));
        }
        let mut batch = Batch::new();
        batch.events(scope, &commit.events)?;
        batch.messages(scope, run.id, &commit.messages)?;
        batch
            .sql
            .push("UPDATE forge_runs SET version = ")
            .push_bind(i64_of(committed.version)?)
            .push(", last_seq = ")
            .push_bind(i64_of(committed.last_seq)?);
        batch.run_changes(scope, &commit, now)?;
        batch
            .sql
            .push(" AND version = ")
            .push_bind(i64_of(run.version)?);
        batch.end(Some((
            1,
            Shortfall::Version {
                expected: run.version,
            },
        )));
        for call in &commit.settlements {
            batch.call(call)?;
        }
        if commit.status.is_terminal() {
            batch.ending(scope, run.id, now);
        }
        tx.commit_with(async |c| match batch.run_and_commit(c, run.id).await {
            Ok(written) => written,
            Err(e) => Err(db_error(e)),
        })
        .await?;
        Ok(committed)
    }
}
