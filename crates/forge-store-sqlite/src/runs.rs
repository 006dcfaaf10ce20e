//! Runs, their leases and event logs, and `commit_step` (see `commit`) on SQLite. Reads run on a
//! reader connection, each in one read transaction where it takes more than one statement;
//! writes on the writer lane, each one operation.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::event::RunEvent;
use forge_core::id::{JobId, RunId, ThreadId};
use forge_core::ports::store::{
    Admission, Committed, InFlight, LeasedRun, NewRun, RunQuery, RunStore, StartStrategy,
    StepCommit, admit, next_lease, renewed_lease,
};
use forge_core::run::{Run, RunLease};
use forge_core::scope::{Scope, TenantId};
use forge_core::time::Timestamp;
use rusqlite::{Connection, params};

use crate::SqliteStore;
use crate::db;
use crate::rows::{self, i64_of, to_json};
use crate::threads::ThreadValues;

/// The columns a run row is read with ([`rows::run`]).
macro_rules! run_columns {
    () => {
        "id, tenant_id, principal_id, thread_id, agent_name, agent_version, status, waiting_for, \
         version, last_seq, checkpoint, failure, lease_holder, lease_token, lease_expires_at, fence, \
         cancel_requested, created_at, updated_at, input, role_ids"
    };
}
pub(crate) use run_columns;

/// Tenant `$2`'s run `$1`.
const RUN_ROW: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM forge_runs WHERE id = ?1 AND tenant_id = ?2"
);

/// The run `id` of `tenant` as it now stands, if it is the tenant's.
pub(crate) fn read_run(conn: &Connection, tenant: &str, id: RunId) -> Result<Option<Run>, Error> {
    db::first(conn, RUN_ROW, params![id.to_string(), tenant], rows::run)
}

/// Refuses a run that is not `tenant`'s.
pub(crate) fn exists(conn: &Connection, tenant: &str, id: RunId) -> Result<(), Error> {
    let found: Option<i64> = db::value(
        conn,
        "SELECT 1 FROM forge_runs WHERE id = ?1 AND tenant_id = ?2",
        params![id.to_string(), tenant],
    )?;
    found.map(|_| ()).ok_or_else(|| Error::not_found("run", id))
}

/// The run `id` of `tenant`; `NotFound` if it is not the tenant's.
fn run(conn: &Connection, tenant: &str, id: RunId) -> Result<Run, Error> {
    read_run(conn, tenant, id)?.ok_or_else(|| Error::not_found("run", id))
}

/// The run's lease for `holder` until `expires_at`, taken on the writer lane if it is free at
/// `now` (no one else holds it unexpired), in one statement returning the run: the lease and the
/// run under it, or `None` when it is not free (or the run is not the tenant's).
pub(crate) fn take_free(
    conn: &Connection,
    id: RunId,
    tenant: &TenantId,
    holder: &str,
    expires_at: Timestamp,
    now: Timestamp,
) -> Result<Option<(RunLease, Run)>, Error> {
    const TAKE_FREE: &str = concat!(
        "UPDATE forge_runs SET lease_holder = ?1, lease_token = fence + 1, lease_expires_at = ?2, \
         fence = fence + 1 WHERE id = ?3 AND tenant_id = ?4 \
         AND (lease_holder IS NULL OR lease_holder = ?1 OR lease_expires_at <= ?5) RETURNING ",
        run_columns!()
    );
    let values = params![
        holder,
        expires_at.unix_millis(),
        id.to_string(),
        tenant.as_str(),
        now.unix_millis()
    ];
    Ok(
        db::first(conn, TAKE_FREE, values, rows::run)?.map(|mut run| {
            let lease = RunLease {
                run_id: id,
                holder: holder.to_owned(),
                token: run.fence,
                expires_at,
            };
            run.lease = Some(lease.clone());
            (lease, run)
        }),
    )
}

/// [`take_free`], and when `history` is set and the lease was taken, what the run begins with read
/// in the same operation of the writer lane (so after the lease, with nothing committed between):
/// its thread and the first page of its history, at most `history` messages. A read that fails
/// leaves the history to the caller.
pub(crate) fn take_free_with_history(
    conn: &Connection,
    id: RunId,
    tenant: &TenantId,
    holder: &str,
    expires_at: Timestamp,
    now: Timestamp,
    history: Option<usize>,
) -> Result<Option<LeasedRun>, Error> {
    let Some((lease, run)) = take_free(conn, id, tenant, holder, expires_at, now)? else {
        return Ok(None);
    };
    let history = history.and_then(|limit| {
        crate::threads::thread_and_first_page(conn, tenant.as_str(), run.thread_id, limit).ok()
    });
    Ok(Some(LeasedRun {
        lease,
        run,
        history,
    }))
}

/// The run's lease for `holder` for `ttl`: taken in one statement when it is free, or else
/// judged on the run as it is (`next_lease`), in one operation of the writer lane.
fn lease(
    conn: &Connection,
    tenant: &TenantId,
    id: RunId,
    holder: &str,
    ttl: Duration,
    now: Timestamp,
    history: Option<usize>,
) -> Result<LeasedRun, Error> {
    if let Some(leased) =
        take_free_with_history(conn, id, tenant, holder, now.plus(ttl), now, history)?
    {
        return Ok(leased);
    }
    let mut run = run(conn, tenant.as_str(), id)?;
    // One host holds every process of this store: the lease of a holder that is no longer
    // running is over now, not when it runs out.
    if let Some(held) = run.lease.as_mut()
        && held.expires_at > now
        && held.holder != holder
        && crate::holder::is_dead_here(&held.holder)
    {
        held.expires_at = now;
    }
    let lease = next_lease(&run, holder, ttl, now)?;
    set_lease(conn, &lease, Some(lease.token))?;
    run.fence = lease.token;
    run.lease = Some(lease.clone());
    Ok(LeasedRun {
        lease,
        run,
        history: None,
    })
}

/// Writes `lease` on its run (and the fence, when taken anew).
fn set_lease(conn: &Connection, lease: &RunLease, fence: Option<u64>) -> Result<(), Error> {
    db::execute(
        conn,
        "UPDATE forge_runs SET lease_holder = ?1, lease_token = ?2, lease_expires_at = ?3, \
         fence = COALESCE(?4, fence) WHERE id = ?5",
        params![
            lease.holder,
            i64_of(lease.token)?,
            lease.expires_at.unix_millis(),
            fence.map(i64_of).transpose()?,
            lease.run_id.to_string()
        ],
    )?;
    Ok(())
}

/// Creates `run` with its job (`job`) on the lane's connection: the active run of its thread, or
/// queued behind it (then with its `run.queued` event, and the runs ahead of it asked to cancel
/// when it interrupts them); the thread `created` first, when the run asked for one.
fn insert_run(
    conn: &Connection,
    mut run: Run,
    new: &NewRun,
    created: Option<&ThreadValues>,
    job: JobId,
    now: Timestamp,
) -> Result<Run, Error> {
    use db::execute;
    if let Some(thread) = created {
        thread.insert(conn)?;
    }
    let (thread, tenant) = (run.thread_id.to_string(), run.tenant_id.as_str().to_owned());
    let active: Option<Option<String>> = db::first(
        conn,
        "SELECT active_run FROM forge_threads WHERE id = ?1 AND tenant_id = ?2",
        params![thread, tenant],
        |row| row.get(0).map_err(db::error),
    )?;
    let active = active
        .ok_or_else(|| Error::not_found("thread", run.thread_id))?
        .map(|s| {
            s.parse::<RunId>()
                .map_err(|e| rows::corrupt("active_run", e))
        })
        .transpose()?;
    let admission = admit(run.thread_id, active, new.strategy)?;
    let queued_event = admission.begin(&mut run, now);
    let job_state = match admission {
        Admission::Active => "ready",
        Admission::Queued { .. } => "waiting",
    };
    let id = run.id.to_string();
    execute(
        conn,
        "INSERT INTO forge_runs (id, tenant_id, principal_id, thread_id, agent_name, agent_version, status, version, last_seq, \
         checkpoint, fence, created_at, updated_at, input, role_ids) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', 0, ?7, ?8, 0, ?9, ?9, ?10, ?11)",
        params![
            id,
            tenant,
            run.principal_id.as_str(),
            thread,
            run.agent.name,
            run.agent.version,
            i64_of(run.last_seq)?,
            to_json(&run.checkpoint)?,
            now.unix_millis(),
            to_json(&run.input)?,
            to_json(&run.role_ids)?
        ],
    )?;
    if let Some(e) = &queued_event {
        execute(
            conn,
            crate::commit::INSERT_EVENT,
            params![id, i64_of(e.seq)?, tenant, e.at.unix_millis(), to_json(e)?],
        )?;
    }
    match admission {
        Admission::Active => {
            execute(
                conn,
                "UPDATE forge_threads SET active_run = ?1 WHERE id = ?2 AND tenant_id = ?3",
                params![id, thread, tenant],
            )?;
        }
        Admission::Queued { .. } if new.strategy == StartStrategy::Interrupt => {
            execute(
                conn,
                "UPDATE forge_runs SET cancel_requested = 1 WHERE thread_id = ?1 AND tenant_id = ?2 \
                 AND id <> ?3 AND status NOT IN ('completed', 'failed', 'cancelled')",
                params![thread, tenant, id],
            )?;
        }
        Admission::Queued { .. } => {}
    }
    execute(
        conn,
        "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, traceparent) \
         VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, 0, ?7)",
        params![
            job.to_string(),
            tenant,
            id,
            job_state,
            now.unix_millis(),
            i64::from(new.max_attempts),
            new.traceparent
        ],
    )?;
    Ok(run)
}

#[async_trait]
impl RunStore for SqliteStore {
    async fn create_run(&self, scope: &Scope, new: NewRun) -> Result<Run, Error> {
        forge_core::ports::rules::check_new_run(&new)?;
        let now = self.clock.now();
        let run = new.queued(new.id_or_new(self.ids.as_ref()), scope, now);
        let job = JobId::generate(self.ids.as_ref());
        let created = new
            .thread_to_create(scope, now)
            .map(|t| ThreadValues::of(&t))
            .transpose()?;
        self.write(move |conn| insert_run(conn, run, &new, created.as_ref(), job, now))
            .await
    }

    async fn cancels_requested(&self, scope: &Scope, ids: &[RunId]) -> Result<Vec<RunId>, Error> {
        let tenant = scope.tenant_id().to_string();
        let ids = to_json(&ids.iter().map(RunId::to_string).collect::<Vec<_>>())?;
        self.read(move |conn| {
            db::all(
                conn,
                "SELECT id FROM forge_runs WHERE tenant_id = ?1 AND cancel_requested = 1 \
                 AND status NOT IN ('completed', 'failed', 'cancelled') \
                 AND id IN (SELECT value FROM json_each(?2))",
                params![tenant, ids],
                |row| {
                    rows::text(row, "id")?
                        .parse()
                        .map_err(|e| rows::corrupt("id", e))
                },
            )
        })
        .await
    }

    async fn request_cancel(&self, scope: &Scope, id: RunId) -> Result<bool, Error> {
        let tenant = scope.tenant_id().to_string();
        // A waiting run holds no job: give it one, so a worker comes and cancels it.
        let (job, now) = (JobId::generate(self.ids.as_ref()), self.clock.now());
        self.write(move |conn| {
            let run = run(conn, &tenant, id)?;
            if run.status.is_terminal() || run.cancel_requested {
                return Ok(false);
            }
            db::execute(
                conn,
                "UPDATE forge_runs SET cancel_requested = 1 WHERE id = ?1 AND tenant_id = ?2",
                params![id.to_string(), tenant],
            )?;
            crate::interactions::wake(conn, &tenant, id, job, now, false)?;
            Ok(true)
        })
        .await
    }

    async fn get_run(&self, scope: &Scope, id: RunId) -> Result<Run, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| run(conn, &tenant, id)).await
    }

    async fn list_runs(&self, scope: &Scope, thread_id: ThreadId) -> Result<Vec<Run>, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| {
            db::snapshot(conn, |conn| {
                crate::threads::exists(conn, &tenant, thread_id)?;
                db::all(
                    conn,
                    concat!(
                        "SELECT ",
                        run_columns!(),
                        " FROM forge_runs WHERE thread_id = ?1 AND tenant_id = ?2 ORDER BY created_at, id"
                    ),
                    params![thread_id.to_string(), tenant],
                    rows::run,
                )
            })
        })
        .await
    }

    async fn query_runs(&self, scope: &Scope, query: &RunQuery) -> Result<Vec<Run>, Error> {
        let (tenant, query) = (scope.tenant_id().to_string(), query.clone());
        // Below the cursor, checked to be the tenant's first.
        self.read(move |conn| {
            db::snapshot(conn, |conn| {
                let cursor = query
                    .before
                    .map(|before| run(conn, &tenant, before))
                    .transpose()?
                    .map(|r| (r.created_at, r.id));
                let (sql, values) = forge_sql::statements::run_page(run_columns!(), &query, cursor);
                let bound = db::binds(tenant.clone(), values);
                db::all(conn, &sql, &db::refs(&bound), rows::run)
            })
        })
        .await
    }

    async fn runs_in_flight(&self, scope: &Scope, at_most: usize) -> Result<InFlight, Error> {
        let (tenant, principal) = (
            scope.tenant_id().to_string(),
            scope.principal_id().to_string(),
        );
        let at_most = db::saturating(at_most);
        // Over `forge_runs_in_flight`, which holds only the runs queued or running.
        let (tenant, principal) = self
            .read(move |conn| {
                db::first(
                    conn,
                    "SELECT count(*), coalesce(sum(principal_id = ?3), 0) FROM (SELECT principal_id \
                     FROM forge_runs WHERE tenant_id = ?1 AND status IN ('queued', 'running') LIMIT ?2)",
                    params![tenant, at_most, principal],
                    |row| {
                        let count = |i| row.get::<_, i64>(i).map_err(db::error);
                        Ok((count(0)?, count(1)?))
                    },
                )
            })
            .await?
            .unwrap_or_default();
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
        self.lease_run(scope, id, holder, ttl)
            .await
            .map(|(lease, _)| lease)
    }

    async fn lease_run(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunLease, Run), Error> {
        let (tenant, holder, now) = (
            scope.tenant_id().clone(),
            holder.to_owned(),
            self.clock.now(),
        );
        let leased = self
            .write(move |conn| lease(conn, &tenant, id, &holder, ttl, now, None))
            .await?;
        Ok((leased.lease, leased.run))
    }

    async fn lease_run_with_history(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<LeasedRun, Error> {
        let (tenant, holder, now) = (
            scope.tenant_id().clone(),
            holder.to_owned(),
            self.clock.now(),
        );
        self.write(move |conn| lease(conn, &tenant, id, &holder, ttl, now, Some(limit)))
            .await
    }

    async fn renew_lease(
        &self,
        scope: &Scope,
        lease: &RunLease,
        ttl: Duration,
    ) -> Result<RunLease, Error> {
        let (tenant, lease) = (scope.tenant_id().to_string(), lease.clone());
        let clock = std::sync::Arc::clone(&self.clock);
        self.write(move |conn| {
            let run = run(conn, &tenant, lease.run_id)?;
            // Read once the writer's turn came: a renewal that waited is not written already
            // (partly) expired.
            let renewed = renewed_lease(&run, &lease, ttl, clock.now())?;
            set_lease(conn, &renewed, None)?;
            Ok(renewed)
        })
        .await
    }

    async fn release_lease(&self, scope: &Scope, lease: &RunLease) -> Result<(), Error> {
        let (tenant, lease) = (scope.tenant_id().to_string(), lease.clone());
        self.write(move |conn| {
            run(conn, &tenant, lease.run_id)?;
            db::execute(
                conn,
                "UPDATE forge_runs SET lease_holder = NULL, lease_token = NULL, lease_expires_at = NULL \
                 WHERE id = ?1 AND tenant_id = ?2 AND lease_token = ?3",
                params![lease.run_id.to_string(), tenant, i64_of(lease.token)?],
            )?;
            Ok(())
        })
        .await
    }

    async fn commit_step(&self, scope: &Scope, commit: StepCommit) -> Result<Committed, Error> {
        self.commit(scope, commit).await
    }

    async fn read_events(
        &self,
        scope: &Scope,
        id: RunId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<RunEvent>, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| {
            db::snapshot(conn, |conn| {
                run(conn, &tenant, id)?;
                db::all(
                    conn,
                    "SELECT body FROM forge_run_events WHERE run_id = ?1 AND tenant_id = ?2 \
                     AND seq > ?3 ORDER BY seq LIMIT ?4",
                    params![
                        id.to_string(),
                        tenant,
                        db::saturating(after_seq),
                        db::saturating(limit)
                    ],
                    |row| rows::json(row, "body"),
                )
            })
        })
        .await
    }
}
