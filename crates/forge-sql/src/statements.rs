//! Statement text every SQL store runs as it is, on SQLite and PostgreSQL alike (`$n`
//! parameters, which both take): written once here, beside the pool both use, rather than in
//! the domain crates (which hold no SQL) or twice in the adapters.
//!
//! The columns are named rather than `*` where a table may widen: sqlx keeps a prepared
//! statement's columns from when it was prepared, so a `*` that a migration widens afterwards
//! reads past the end of the row.

use forge_core::id::RunId;
use forge_core::ports::audit::AuditQuery;
use forge_core::run::RunQuery;
use forge_core::time::Timestamp;

/// Reads one thread: binds the id and the tenant.
pub const THREAD_ROW: &str = "SELECT id, tenant_id, created_by, title, state, \
     state_version, active_run, summary, created_at, archived_at FROM forge_threads \
     WHERE id = $1 AND tenant_id = $2";

/// Reads a page of a tenant's threads (the columns named, as in [`THREAD_ROW`]), newest first:
/// binds the tenant, whether archived threads count (a boolean, as 0/1 in SQLite), the cursor's
/// creation time and id (both null for the first page), the limit and the creator (null for
/// any). The rule it encodes is `forge_core::thread::ThreadWindow::apply`.
pub const THREAD_PAGE: &str = "SELECT id, tenant_id, created_by, title, state, state_version, \
     active_run, summary, created_at, archived_at FROM forge_threads WHERE tenant_id = $1 \
     AND ($2 OR archived_at IS NULL) AND ($3 IS NULL OR (created_at, id) < ($3, $4)) \
     AND ($6 IS NULL OR created_by = $6) ORDER BY created_at DESC, id DESC LIMIT $5";

/// Reads a message cursor's position: binds the message id, the thread and the tenant; no row
/// means the cursor is not a message of the thread.
pub const MESSAGE_CURSOR: &str =
    "SELECT seq FROM forge_messages WHERE id = $1 AND thread_id = $2 AND tenant_id = $3";

/// Reads a page of a thread's messages (`forge_core::ports::store::MessageWindow::apply` in
/// SQL): binds the thread, the tenant, the positions strictly between which to read (the
/// cursors', or 0 and `i64::MAX`) and the limit; the first `limit`, or the last when
/// `from_end`, returned oldest first.
pub fn message_page(from_end: bool) -> &'static str {
    if from_end {
        "SELECT * FROM (SELECT * FROM forge_messages WHERE thread_id = $1 AND tenant_id = $2 \
         AND seq > $3 AND seq < $4 ORDER BY seq DESC LIMIT $5) page ORDER BY seq"
    } else {
        "SELECT * FROM forge_messages WHERE thread_id = $1 AND tenant_id = $2 \
         AND seq > $3 AND seq < $4 ORDER BY seq LIMIT $5"
    }
}

/// Claims a request key unless it is claimed (`forge_core::ports::keys`): `$1` tenant, `$2`
/// kind, `$3` key, `$4` the id it names, `$5` its thread, `$6` the request's digest, `$7` now.
/// [`KEY_CLAIMED`] then reads the claim that holds.
pub const KEY_CLAIM: &str = "INSERT INTO forge_request_keys (tenant_id, kind, key, id, \
     thread_id, digest, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING";

/// Reads a request key's claim: `$1` tenant, `$2` kind, `$3` key.
pub const KEY_CLAIMED: &str = "SELECT id, thread_id, digest FROM forge_request_keys \
     WHERE tenant_id = $1 AND kind = $2 AND key = $3";

/// Removes the request keys an erasure takes (`forge_core::ports::erasure::Erase::erases_key`):
/// a thread's (`$2`) and its runs', or, `run`, one run's (`$2`); `$1` the tenant.
pub fn keys_erased(run: bool) -> &'static str {
    if run {
        "DELETE FROM forge_request_keys WHERE tenant_id = $1 AND kind = 'run' AND id = $2"
    } else {
        "DELETE FROM forge_request_keys WHERE tenant_id = $1 AND thread_id = $2"
    }
}

/// Stores a new running scoring run: `$1` tenant, `$2` id, `$3` dataset, `$4` its version,
/// `$5` its hash, `$6` label, `$7` start.
pub const EVAL_START_RUN: &str = "INSERT INTO forge_eval_runs (tenant_id, id, dataset,
        dataset_version, dataset_sha256, label, started_at, status)
    VALUES ($1, $2, $3, $4, $5, $6, $7, 'running') ON CONFLICT DO NOTHING";

/// Re-opens run `$2` of tenant `$1` (recording a case into it clears its totals).
pub const EVAL_REOPEN_RUN: &str = "UPDATE forge_eval_runs SET status = 'running',
        completed_at = NULL, totals = NULL, dimensions = NULL
    WHERE tenant_id = $1 AND id = $2";

/// Records a case by upsert on (run, case), replacing its verdict: `$1` tenant, `$2` run,
/// `$3` case, `$4` verdict, `$5` score, `$6` dimensions (JSON), `$7` run cost, `$8` judge
/// cost, `$9` paid calls, `$10` the whole result (JSON).
pub const EVAL_UPSERT_CASE: &str = "INSERT INTO forge_eval_cases (tenant_id, run_id, case_id,
        verdict, score_ppm, dimensions, run_cost_micros, judge_cost_micros, paid_calls, body)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    ON CONFLICT (tenant_id, run_id, case_id) DO UPDATE SET verdict = excluded.verdict,
        score_ppm = excluded.score_ppm, dimensions = excluded.dimensions,
        run_cost_micros = excluded.run_cost_micros,
        judge_cost_micros = excluded.judge_cost_micros, paid_calls = excluded.paid_calls,
        body = excluded.body";

/// Caches a verdict, the first one kept: `$1` tenant, `$2` case, `$3` input hash, `$4`
/// prompt, `$5` model, `$6` the verdict (JSON), `$7` now.
pub const EVAL_PUT_VERDICT: &str = "INSERT INTO forge_eval_judgements (tenant_id, case_id,
        input_sha256, prompt, model, verdict, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING";

/// A `WHERE` clause after `tenant_id = $1`, built a condition at a time with the values it binds
/// from `$2` on, numbered in the order they are added.
#[derive(Default)]
struct Filter {
    clause: String,
    values: Vec<Bind>,
}

impl Filter {
    /// Adds `condition`, in which each `{}` stands for the next parameter, binding `values` to
    /// them in order.
    fn and(&mut self, condition: &str, values: impl IntoIterator<Item = Bind>) {
        let mut condition = condition.to_owned();
        for value in values {
            self.values.push(value);
            condition = condition.replacen("{}", &format!("${}", self.values.len() + 1), 1);
        }
        self.clause.push_str(" AND ");
        self.clause.push_str(&condition);
    }

    /// The statement `select … WHERE tenant_id = $1 <filter> <order> LIMIT $n` and its values.
    fn page(mut self, select: &str, order: &str, limit: usize) -> (String, Vec<Bind>) {
        self.values
            .push(Bind::Limit(i64::try_from(limit).unwrap_or(i64::MAX)));
        let sql = format!(
            "{select} WHERE tenant_id = $1{} ORDER BY {order} LIMIT ${}",
            self.clause,
            self.values.len() + 1
        );
        (sql, self.values)
    }
}

/// Reads a page of tenant `$1`'s audit trail as `query` asks, newest first: the statement, and
/// the values to bind from `$2` on, in order (the filter's, then the limit). The query is already
/// checked (`AuditLog::query_audit` refuses what `AuditQuery::check` refuses before an adapter
/// reads).
pub fn audit_page(query: &AuditQuery) -> (String, Vec<Bind>) {
    let mut filter = Filter::default();
    if let Some(action) = &query.action {
        let prefix = format!("{}%", escape_like(action));
        filter.and("action LIKE {} ESCAPE '\\'", [Bind::Text(prefix)]);
    }
    if let Some(subject) = &query.subject {
        filter.and("subject = {}", [Bind::Text(subject.clone())]);
    }
    if let Some(actor) = &query.actor {
        filter.and("actor = {}", [Bind::Text(actor.clone())]);
    }
    if let Some(since) = query.since {
        filter.and("at >= {}", [Bind::Time(since)]);
    }
    if let Some(until) = query.until {
        filter.and("at < {}", [Bind::Time(until)]);
    }
    filter.page(
        "SELECT tenant_id, at, actor, action, subject, detail FROM forge_audit",
        "seq DESC",
        query.limit,
    )
}

/// Reads a page of tenant `$1`'s runs as `query` asks (`RunQuery::admits` in SQL), newest
/// first, below `cursor` (the creation time and id of the previous page's last run, which the
/// adapter has checked to be the tenant's): the statement selecting `columns`, and the values to
/// bind from `$2` on.
pub fn run_page(
    columns: &str,
    query: &RunQuery,
    cursor: Option<(Timestamp, RunId)>,
) -> (String, Vec<Bind>) {
    let mut filter = Filter::default();
    let text = |s: &String| Bind::Text(s.clone());
    if let Some(status) = &query.status {
        filter.and("status = {}", [text(status)]);
    }
    if let Some(thread) = query.thread_id {
        filter.and("thread_id = {}", [Bind::Id(thread.0)]);
    }
    if let Some(agent) = &query.agent_name {
        filter.and("agent_name = {}", [text(agent)]);
    }
    if let Some(version) = &query.agent_version {
        filter.and("agent_version = {}", [text(version)]);
    }
    if let Some(since) = query.since {
        filter.and("created_at >= {}", [Bind::Time(since)]);
    }
    if let Some(until) = query.until {
        filter.and("created_at < {}", [Bind::Time(until)]);
    }
    if let Some(code) = query.failure_code {
        filter.and(
            "failure ->> 'code' = {}",
            [Bind::Text(code.name().to_owned())],
        );
    }
    if let Some((at, id)) = cursor {
        filter.and(
            "(created_at, id) < ({}, {})",
            [Bind::Time(at), Bind::Id(id.0)],
        );
    }
    filter.page(
        &format!("SELECT {columns} FROM forge_runs"),
        "created_at DESC, id DESC",
        query.limit,
    )
}

/// A value [`audit_page`] or [`run_page`] binds.
#[derive(Debug, Clone, PartialEq)]
pub enum Bind {
    /// Text.
    Text(String),
    /// A time.
    Time(Timestamp),
    /// An id (a `uuid` in PostgreSQL, its hyphenated text in SQLite).
    Id(uuid::Uuid),
    /// How many rows at most.
    Limit(i64),
}

/// `s` as a `LIKE` pattern's literal text: its `\`, `%` and `_` escaped with `\`.
fn escape_like(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_page_numbers_its_values_after_the_tenant_and_escapes_the_prefix() {
        let since = Timestamp::from_unix_millis(1_700_000_000_000).expect("a time");
        let query = AuditQuery {
            action: Some("tool_%x\\".into()),
            subject: Some("run 1".into()),
            since: Some(since),
            ..AuditQuery::latest(10)
        };
        let (sql, values) = audit_page(&query);
        assert!(
            sql.ends_with(
                "WHERE tenant_id = $1 AND action LIKE $2 ESCAPE '\\' AND subject = $3 \
                 AND at >= $4 ORDER BY seq DESC LIMIT $5"
            ),
            "{sql}"
        );
        assert_eq!(
            values,
            [
                Bind::Text("tool\\_\\%x\\\\%".into()),
                Bind::Text("run 1".into()),
                Bind::Time(since),
                Bind::Limit(10),
            ]
        );
        let (sql, values) = audit_page(&AuditQuery::latest(3));
        assert!(
            sql.ends_with("WHERE tenant_id = $1 ORDER BY seq DESC LIMIT $2"),
            "{sql}"
        );
        assert_eq!(values, [Bind::Limit(3)]);
    }

    #[test]
    fn the_run_page_numbers_every_filter_and_the_cursor_in_order() {
        let at = Timestamp::from_unix_millis(1_700_000_000_000).expect("a time");
        let id = RunId(uuid::Uuid::from_u128(7));
        let query = RunQuery {
            agent_name: Some("support".into()),
            until: Some(at),
            ..RunQuery::newest(5)
        }
        .failure_code("internal")
        .expect("a code");
        let (sql, values) = run_page("id", &query, Some((at, id)));
        assert_eq!(
            sql,
            "SELECT id FROM forge_runs WHERE tenant_id = $1 AND agent_name = $2 \
             AND created_at < $3 AND failure ->> 'code' = $4 AND (created_at, id) < ($5, $6) \
             ORDER BY created_at DESC, id DESC LIMIT $7"
        );
        assert_eq!(
            values,
            [
                Bind::Text("support".into()),
                Bind::Time(at),
                Bind::Text("internal".into()),
                Bind::Time(at),
                Bind::Id(id.0),
                Bind::Limit(5),
            ]
        );
    }
}
