//! `commit_step` on SQLite: a step's writes sent to the connection as one batch.
//!
//! Every statement sqlx runs is a round trip to the connection's own thread, and those trips (two
//! thread wake-ups each) cost far more CPU than SQLite's work on the rows. So a step is committed
//! in two trips whatever it wrote (more only for state, a summary, interactions or audit): the
//! `BEGIN IMMEDIATE` with the run's row and which of the step's settled calls are not open calls
//! (the fence, version and calls are decided on them, under the write lock), then one
//! multi-statement batch ending in `COMMIT` (events, messages, the run's new row, settled model
//! calls, and for a run that ends its thread's next run). Nothing is refused after the batch
//! began: an error in it stops it before its `COMMIT`, and the transaction is rolled back.

use forge_core::Error;
use forge_core::event::RunEvent;
use forge_core::id::ThreadId;
use forge_core::message::Message;
use forge_core::metering::ModelCall;
use forge_core::ports::store::{Committed, StepCommit, check_commit};
use forge_core::scope::Scope;
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

    fn messages(
        &mut self,
        scope: &Scope,
        thread: ThreadId,
        messages: &[Message],
    ) -> Result<(), Error> {
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
                    .push_bind(thread.to_string())
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

    /// Runs the batch and then `COMMIT`, in one trip to the connection of the transaction.
    ///
    /// Every refusal was decided before (the run's row and its calls were read under the write
    /// lock this transaction holds), so the row counts are only checked after: a shortfall would
    /// be a broken invariant of the store, reported as the refusal it would have been.
    async fn run_and_commit(
        mut self,
        conn: &mut sqlx::SqliteConnection,
        run: &forge_core::run::Run,
    ) -> Result<(), Error> {
        self.sql.push("COMMIT");
        self.expect.push(None);
        let query = self.sql.build().persistent(false);
        let results: Vec<_> = sqlx::Executor::execute_many(conn, query)
            .try_collect()
            .await
            .map_err(db_error)?;
        for (result, expect) in results.iter().zip(&self.expect) {
            let Some((rows, why)) = expect else { continue };
            if result.rows_affected() >= *rows {
                continue;
            }
            return Err(match why {
                Shortfall::Version { expected } => Error::VersionConflict {
                    entity: "run",
                    id: run.id.to_string(),
                    expected: *expected,
                    actual: expected + 1,
                },
                Shortfall::Call(id) => forge_core::ports::store::not_an_open_call(*id),
            });
        }
        Ok(())
    }
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
    /// See [`forge_core::ports::store::RunStore::commit_step`].
    pub(crate) async fn commit(
        &self,
        scope: &Scope,
        commit: StepCommit,
    ) -> Result<Committed, Error> {
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
        let mut seen = std::collections::HashSet::new();
        if let Some(call) = commit.settlements.iter().find(|c| !seen.insert(c.id)) {
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
        batch.messages(scope, run.thread_id, &commit.messages)?;
        let releases = commit.releases_lease();
        batch
            .sql
            .push("UPDATE forge_runs SET version = ")
            .push_bind(i64_of(committed.version)?)
            .push(", last_seq = ")
            .push_bind(i64_of(committed.last_seq)?)
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
        if releases {
            // The run ends: its lease goes with this commit.
            batch
                .sql
                .push(", lease_holder = NULL, lease_token = NULL, lease_expires_at = NULL");
        }
        batch
            .sql
            .push(" WHERE id = ")
            .push_bind(run.id.to_string())
            .push(" AND tenant_id = ")
            .push_bind(scope.tenant_id().as_str().to_owned())
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
            let (run_id, thread, tenant) = (
                run.id.to_string(),
                run.thread_id.to_string(),
                scope.tenant_id().as_str().to_owned(),
            );
            // A run that ends leaves nothing for a person to decide.
            batch
                .sql
                .push(
                    "UPDATE forge_interactions SET status = 'expired', body = json_set(body, '$.status', 'expired') \
                     WHERE status = 'pending' AND run_id = ",
                )
                .push_bind(run_id.clone())
                .push(" AND tenant_id = ")
                .push_bind(tenant.clone());
            batch.end(None);
            // Its thread's oldest queued run becomes the active one, and that run's job ready.
            batch
                .sql
                .push(
                    "UPDATE forge_threads SET active_run = (SELECT id FROM forge_runs WHERE status = 'queued' \
                     AND thread_id = ",
                )
                .push_bind(thread.clone())
                .push(" AND tenant_id = ")
                .push_bind(tenant.clone())
                .push(" AND id <> ")
                .push_bind(run_id.clone())
                .push(" ORDER BY created_at, id LIMIT 1) WHERE id = ")
                .push_bind(thread.clone())
                .push(" AND tenant_id = ")
                .push_bind(tenant.clone())
                .push(" AND active_run = ")
                .push_bind(run_id);
            batch.end(None);
            batch
                .sql
                .push("UPDATE forge_jobs SET state = 'ready', available_at = ")
                .push_bind(now.unix_millis())
                .push(" WHERE state = 'waiting' AND run_id = (SELECT active_run FROM forge_threads WHERE id = ")
                .push_bind(thread)
                .push(" AND tenant_id = ")
                .push_bind(tenant)
                .push(")");
            batch.end(None);
        }
        tx.commit_with(async |c| batch.run_and_commit(c, &run).await)
            .await?;
        Ok(committed)
    }
}
