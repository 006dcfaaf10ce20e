//! What PostgreSQL did for each run of the workload's throughput phase, read from its own
//! counters: transactions, rows written and read, WAL records, bytes and flushes, and the calls
//! of each of Forge's functions with the time spent in them.
//!
//! The bench database is created for the measurement, so its `pg_stat_database` row and
//! `pg_stat_user_functions` count Forge's work alone; `pg_stat_wal` is the server's, so it counts
//! whatever else the server did meanwhile (nothing, on a machine left to the benchmark). Function
//! calls are counted because [`track_functions`] turns PostgreSQL's `track_functions` on for the
//! database before Forge connects. A backend publishes its counters late (up to ten seconds
//! after its last transaction, when it is left idle), so [`snapshot`] waits for that before
//! reading.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, Row};

/// How long a backend may hold counters it has not published: a busy one publishes at most a
/// second after it last did (`PGSTAT_MIN_INTERVAL`), and one that went idle with counters still
/// to publish does so ten seconds later (`PGSTAT_IDLE_INTERVAL`). With a margin.
const PUBLISH_DELAY: Duration = Duration::from_millis(10_500);

/// PostgreSQL's counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Counters {
    /// The database's counters by name (`transactions`, `rows_inserted`, ...).
    pub(crate) database: BTreeMap<&'static str, f64>,
    /// The server's WAL counters by name (`wal_records`, `wal_bytes`, `wal_syncs`).
    pub(crate) wal: BTreeMap<&'static str, f64>,
    /// Each function's calls and the milliseconds spent in it (not in the functions it called).
    pub(crate) functions: BTreeMap<String, (f64, f64)>,
}

/// Turns function-call counting on for the database `name` (sessions opened afterwards count).
pub(crate) async fn track_functions(admin_url: &str, name: &str) -> anyhow::Result<()> {
    let mut conn = PgConnection::connect(admin_url).await?;
    // A database name cannot be a bound parameter; this one is the bench's own, quoted.
    let sql = format!(
        "ALTER DATABASE \"{}\" SET track_functions = 'pl'",
        name.replace('"', "\"\"")
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await?;
    Ok(())
}

/// The counters of the database `name` and of the server, once every idle backend has published
/// its own.
pub(crate) async fn snapshot(admin_url: &str, name: &str) -> anyhow::Result<Counters> {
    tokio::time::sleep(PUBLISH_DELAY).await;
    let mut conn = PgConnection::connect(admin_url).await?;
    // One transaction, so that the reading adds one to the next snapshot's count.
    let mut tx = conn.begin().await?;
    let db = sqlx::query(
        "SELECT xact_commit::float8 AS transactions, xact_rollback::float8 AS rollbacks, \
         tup_inserted::float8 AS rows_inserted, tup_updated::float8 AS rows_updated, \
         tup_deleted::float8 AS rows_deleted, tup_fetched::float8 AS rows_fetched, \
         blks_hit::float8 AS blocks_hit, blks_read::float8 AS blocks_read \
         FROM pg_stat_database WHERE datname = $1",
    )
    .bind(name)
    .fetch_one(&mut *tx)
    .await
    .with_context(|| format!("no statistics for database {name}"))?;
    let wal = sqlx::query(
        "SELECT wal_records::float8 AS wal_records, wal_bytes::float8 AS wal_bytes, \
         wal_sync::float8 AS wal_syncs, wal_write::float8 AS wal_writes FROM pg_stat_wal",
    )
    .fetch_one(&mut *tx)
    .await?;
    let functions = sqlx::query(
        "SELECT funcname::text AS name, calls::float8 AS calls, self_time AS ms \
         FROM pg_stat_user_functions",
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let columns = |row: &sqlx::postgres::PgRow, names: &[&'static str]| {
        names
            .iter()
            .map(|&n| Ok((n, row.try_get::<f64, _>(n)?)))
            .collect::<Result<BTreeMap<_, _>, sqlx::Error>>()
    };
    Ok(Counters {
        database: columns(
            &db,
            &[
                "transactions",
                "rollbacks",
                "rows_inserted",
                "rows_updated",
                "rows_deleted",
                "rows_fetched",
                "blocks_hit",
                "blocks_read",
            ],
        )?,
        wal: columns(
            &wal,
            &["wal_records", "wal_bytes", "wal_syncs", "wal_writes"],
        )?,
        functions: functions
            .iter()
            .map(|r| Ok((r.try_get("name")?, (r.try_get("calls")?, r.try_get("ms")?))))
            .collect::<Result<_, sqlx::Error>>()?,
    })
}

/// What happened between `before` and `after`, divided by `runs`: the database's and the WAL's
/// counters, and each function called in between with its calls and milliseconds per run (the
/// most time first).
pub(crate) fn per_run(before: &Counters, after: &Counters, runs: usize) -> Value {
    let runs = runs.max(1) as f64;
    let diff = |a: &BTreeMap<&'static str, f64>, b: &BTreeMap<&'static str, f64>| {
        a.iter()
            .map(|(k, v)| (k.to_string(), json!((v - b.get(k).unwrap_or(&0.0)) / runs)))
            .collect::<serde_json::Map<_, _>>()
    };
    let mut functions: Vec<(&String, f64, f64)> = after
        .functions
        .iter()
        .filter_map(|(name, (calls, ms))| {
            let (c0, ms0) = before.functions.get(name).copied().unwrap_or_default();
            (calls > &c0).then(|| (name, (calls - c0) / runs, (ms - ms0) / runs))
        })
        .collect();
    functions.sort_by(|a, b| b.2.total_cmp(&a.2));
    json!({
        "database": diff(&after.database, &before.database),
        "wal": diff(&after.wal, &before.wal),
        "functions": functions
            .into_iter()
            .map(|(name, calls, ms)| json!({ "name": name, "calls": calls, "ms": ms }))
            .collect::<Vec<_>>(),
    })
}

/// `per_run`'s figures in a few lines, for the table.
pub(crate) fn describe(per_run: &Value) -> String {
    let f = |section: &str, k: &str| per_run[section][k].as_f64().unwrap_or(f64::NAN);
    let mut out = format!(
        "postgres per run: {:.1} transactions, {:.1} rows inserted, {:.1} updated, {:.1} fetched; \
         WAL {:.1} records, {:.0} bytes, {:.2} flushes",
        f("database", "transactions"),
        f("database", "rows_inserted"),
        f("database", "rows_updated"),
        f("database", "rows_fetched"),
        f("wal", "wal_records"),
        f("wal", "wal_bytes"),
        f("wal", "wal_syncs"),
    );
    out.push_str("\n  functions: calls and wall-clock ms inside them (waits included), per run");
    for call in per_run["functions"].as_array().into_iter().flatten() {
        let calls = call["calls"].as_f64().unwrap_or(f64::NAN);
        let ms = call["ms"].as_f64().unwrap_or(f64::NAN);
        out.push_str(&format!(
            "\n    {:<28} {calls:>5.2} calls {ms:>7.3} ms ({:.3} ms each)",
            call["name"].as_str().unwrap_or("?"),
            ms / calls
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(transactions: f64, syncs: f64, step: (f64, f64)) -> Counters {
        Counters {
            database: BTreeMap::from([("transactions", transactions)]),
            wal: BTreeMap::from([("wal_syncs", syncs)]),
            functions: BTreeMap::from([
                ("forge_write_step".to_owned(), step),
                ("forge_idle".to_owned(), (3.0, 1.0)),
            ]),
        }
    }

    #[test]
    fn per_run_divides_what_happened_in_between_and_leaves_out_functions_not_called() {
        let before = counters(100.0, 10.0, (40.0, 20.0));
        let after = counters(150.0, 30.0, (80.0, 40.0));
        let got = per_run(&before, &after, 10);
        assert_eq!(got["database"]["transactions"], 5.0);
        assert_eq!(got["wal"]["wal_syncs"], 2.0);
        assert_eq!(
            got["functions"],
            json!([{ "name": "forge_write_step", "calls": 4.0, "ms": 2.0 }])
        );
        let text = describe(&got);
        assert!(text.contains("5.0 transactions"), "{text}");
        assert!(text.contains("0.500 ms each"), "{text}");
    }

    /// Against the machine's PostgreSQL: the counters see a known number of transactions and
    /// function calls in a fresh database.
    #[tokio::test]
    async fn snapshots_count_a_databases_transactions_rows_and_function_calls() {
        let db = forge_store_postgres::testing::TestDatabase::create(
            forge_store_postgres::testing::Flavor::Plain,
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL is needed at FORGE_TEST_DATABASE_URL or 127.0.0.1:5432 \
                 (start it as ../.library/env says): {e}"
            )
        });
        track_functions(db.admin_url(), db.name())
            .await
            .expect("track");
        let mut setup = PgConnection::connect(db.admin_url())
            .await
            .expect("connect");
        sqlx::raw_sql(
            "CREATE TABLE bench_probe (n int); \
             CREATE FUNCTION bench_probe_add(int) RETURNS void LANGUAGE plpgsql AS \
             $$ BEGIN INSERT INTO bench_probe VALUES ($1); END $$;",
        )
        .execute(&mut setup)
        .await
        .expect("create");
        // A session that ends publishes its counters.
        setup.close().await.expect("close");
        let before = snapshot(db.admin_url(), db.name()).await.expect("before");
        let mut conn = PgConnection::connect(db.admin_url())
            .await
            .expect("connect");
        for n in 0..7 {
            sqlx::query("SELECT bench_probe_add($1)")
                .bind(n)
                .execute(&mut conn)
                .await
                .expect("call");
        }
        // This session stays open: its counters are published once it is idle.
        let after = snapshot(db.admin_url(), db.name()).await.expect("after");
        drop(conn);
        let got = per_run(&before, &after, 7);
        let transactions = got["database"]["transactions"].as_f64().unwrap_or(0.0);
        // Seven calls at least. The database's count also holds the first snapshot's reading,
        // the client's own look-ups (preparing the call, its result type's name), and whatever
        // autovacuum's workers did in the new database meanwhile (38 in all on a busy machine),
        // so only a floor is exact.
        assert!(transactions >= 1.0, "{got}");
        assert_eq!(got["database"]["rows_inserted"], 1.0, "{got}");
        assert!(
            got["wal"]["wal_records"].as_f64().unwrap_or(0.0) >= 1.0,
            "{got}"
        );
        assert_eq!(got["functions"][0]["name"], "bench_probe_add", "{got}");
        assert_eq!(got["functions"][0]["calls"], 1.0, "{got}");
    }
}
