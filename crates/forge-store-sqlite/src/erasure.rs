//! Erasing a thread or a run on SQLite: one operation of the writer lane that checks every run
//! has ended, removes their rows, unlinks their model calls and appends the audit record.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::RunId;
use forge_core::metering::ModelCall;
use forge_core::ports::erasure::{self, DataErasure, Erase, Erased};
use forge_core::scope::Scope;
use rusqlite::params;

use crate::SqliteStore;
use crate::db;
use crate::rows::{self, json, to_json};

/// The runs of tenant `$1`'s thread `$2`.
const RUNS_OF_THREAD: &str = concat!(
    "SELECT ",
    crate::runs::run_columns!(),
    " FROM forge_runs WHERE tenant_id = ?1 AND thread_id = ?2"
);

/// Tenant `$1`'s run `$2`.
const RUN: &str = concat!(
    "SELECT ",
    crate::runs::run_columns!(),
    " FROM forge_runs WHERE tenant_id = ?1 AND id = ?2"
);

/// The count in [`Erased`] a statement's removed rows go to.
type Count = fn(&mut Erased) -> &mut u64;

/// Removes the rows of the runs in the JSON array `$2` of tenant `$1`, table by table; the
/// count each statement's rows go to.
const REMOVE: [(&str, Count); 4] = [
    (
        "DELETE FROM forge_run_events WHERE tenant_id = ?1 AND run_id IN (SELECT value FROM json_each(?2))",
        |e| &mut e.events,
    ),
    (
        "DELETE FROM forge_interactions WHERE tenant_id = ?1 AND run_id IN (SELECT value FROM json_each(?2))",
        |e| &mut e.interactions,
    ),
    (
        "DELETE FROM forge_jobs WHERE tenant_id = ?1 AND run_id IN (SELECT value FROM json_each(?2))",
        |e| &mut e.jobs,
    ),
    (
        "DELETE FROM forge_messages WHERE tenant_id = ?1 AND run_id IN (SELECT value FROM json_each(?2))",
        |e| &mut e.messages,
    ),
];

#[async_trait]
impl DataErasure for SqliteStore {
    async fn erase(&self, scope: &Scope, target: Erase, actor: &str) -> Result<Erased, Error> {
        let (scope, actor, now) = (scope.clone(), actor.to_owned(), self.clock.now());
        self.write(move |conn| {
            let tenant = scope.tenant_id().as_str();
            let (sql, key) = match target {
                Erase::Thread(id) => (RUNS_OF_THREAD, id.to_string()),
                Erase::Run(id) => (RUN, id.to_string()),
            };
            let runs = db::all(conn, sql, params![tenant, key], rows::run)?;
            let thread_id = match target {
                Erase::Thread(id) => id,
                Erase::Run(_) => runs.first().ok_or_else(|| target.not_found())?.thread_id,
            };
            let active: Option<Option<String>> = db::first(
                conn,
                "SELECT active_run FROM forge_threads WHERE id = ?1 AND tenant_id = ?2",
                params![thread_id.to_string(), tenant],
                |row| row.get(0).map_err(db::error),
            )?;
            let active = active
                .ok_or_else(|| target.not_found())?
                .map(|a| a.parse::<RunId>().map_err(|e| rows::corrupt("active_run", e)))
                .transpose()?
                .filter(|a| {
                    matches!(target, Erase::Thread(_)) || runs.iter().any(|r| r.id == *a)
                });
            let statuses: Vec<_> = runs.iter().map(|r| (r.id, r.status)).collect();
            erasure::check_ended(thread_id, active, &statuses)?;

            // The run ids travel as one JSON array, so the statements' text never grows with them.
            let ids = to_json(&runs.iter().map(|r| r.id.to_string()).collect::<Vec<_>>())?;
            let mut erased = Erased::default();
            let calls: Vec<ModelCall> = db::all(
                conn,
                "SELECT body FROM forge_model_calls \
                 WHERE tenant_id = ?1 AND run_id IN (SELECT value FROM json_each(?2))",
                params![tenant, ids],
                |row| json(row, "body"),
            )?;
            for call in calls {
                let call = erasure::unlinked(call);
                db::execute(
                    conn,
                    "UPDATE forge_model_calls SET run_id = ?1, body = ?2 WHERE id = ?3 AND tenant_id = ?4",
                    params![
                        call.run_id.to_string(),
                        to_json(&call)?,
                        call.id.to_string(),
                        tenant
                    ],
                )?;
                erased.model_calls_unlinked += 1;
            }
            for (sql, count) in REMOVE {
                *count(&mut erased) = db::execute(conn, sql, params![tenant, ids])? as u64;
            }
            let (run, named) = match target {
                Erase::Thread(id) => (false, id.to_string()),
                Erase::Run(id) => (true, id.to_string()),
            };
            db::execute(
                conn,
                forge_sql::statements::keys_erased(run),
                params![tenant, named],
            )?;
            erased.runs = db::execute(
                conn,
                "DELETE FROM forge_runs WHERE tenant_id = ?1 AND id IN (SELECT value FROM json_each(?2))",
                params![tenant, ids],
            )? as u64;
            if let Erase::Thread(id) = target {
                erased.threads = db::execute(
                    conn,
                    "DELETE FROM forge_threads WHERE id = ?1 AND tenant_id = ?2",
                    params![id.to_string(), tenant],
                )? as u64;
            }
            let record = erasure::audit_record(&scope, target, &actor, now, &erased);
            crate::interactions::audit(conn, &record)?;
            Ok(erased)
        })
        .await
    }
}
