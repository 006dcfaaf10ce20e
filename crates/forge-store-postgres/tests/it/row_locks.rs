//! Helpers of the tests that hold a run's row from outside the store and wait for the store's
//! statement to queue behind it (not tests themselves).

use std::time::Duration;

use sqlx::{Connection, PgConnection};

/// A connection of the administrator (`admin`) whose open transaction holds `run`'s row; it is let
/// go when the transaction ends (`COMMIT`, `ROLLBACK`, or the connection dropped).
pub(crate) async fn hold_run(admin: &str, run: uuid::Uuid) -> PgConnection {
    let mut holder = PgConnection::connect(admin).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM forge_runs WHERE id = $1 FOR UPDATE")
        .bind(run)
        .execute(&mut holder)
        .await
        .unwrap();
    holder
}

/// Returns once another session of the database waits on a lock in a statement whose text is
/// `LIKE` `statement`; fails the test, naming `what`, if none does within 20 seconds.
pub(crate) async fn until_waiting(admin: &str, statement: &str, what: &str) {
    let mut watch = PgConnection::connect(admin).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND query LIKE $1",
        )
        .bind(statement)
        .fetch_one(&mut watch)
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} never waited for the held row"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
