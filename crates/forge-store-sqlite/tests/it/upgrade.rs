//! Upgrading in place: a database an earlier build created and filled migrates to this build's
//! layout (its migration ledger adopted into sqlx's) with nothing lost.

use std::path::Path;
use std::sync::Arc;

use forge_core::id::SequentialIds;
use forge_core::time::ManualClock;
use forge_store_sqlite::SqliteStore;
use forge_testkit::upgrade::{fill, readback};

use crate::{Sqlite, fresh_path, url};

/// A database written by `write_upgrade_fixture` at commit 56d57d6 (the last build with the
/// hand-written ledger `forge_schema_migrations`), and its readback by that build.
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/upgrade-56d57d6"
);

/// A database written by `write_upgrade_fixture` at commit c30518a (the last build on sqlx's
/// SQLite driver, whose `Migrate` wrote the ledger), and its readback by that build.
const SQLX_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/upgrade-c30518a"
);

async fn tables(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut statement = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'forge%migrations' ORDER BY name",
        )
        .unwrap();
    statement
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The last migration the builds that wrote the fixtures had.
const FIXTURES_AT: i64 = 17;

/// How many of `all` came after the fixtures were written: those a fixture's open applies.
fn newer_than_the_fixtures(all: &[i64]) -> usize {
    all.iter().filter(|v| **v > FIXTURES_AT).count()
}

#[tokio::test]
async fn a_database_of_an_earlier_build_upgrades_in_place() {
    let path = fresh_path("upgrade");
    std::fs::copy(format!("{FIXTURE}.db"), &path).unwrap();
    assert_eq!(tables(&path).await, ["forge_schema_migrations"]);
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let all: Vec<i64> = forge_store_sqlite::migrations()
        .list()
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(store.applied_migrations().await.unwrap(), all);
    assert_eq!(
        store.applied_on_open(),
        newer_than_the_fixtures(&all),
        "the earlier build's migrations are adopted, not applied again; only later ones are"
    );
    assert_eq!(tables(&path).await, ["forge_migrations"]);
    let expected = std::fs::read_to_string(format!("{FIXTURE}.expected")).unwrap();
    assert_eq!(readback(&store).await, expected);
}

#[tokio::test]
async fn a_database_of_the_last_sqlx_build_opens_with_its_ledger_and_data_intact() {
    let path = fresh_path("upgrade-sqlx");
    std::fs::copy(format!("{SQLX_FIXTURE}.db"), &path).unwrap();
    assert_eq!(tables(&path).await, ["forge_migrations"]);
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let all: Vec<i64> = forge_store_sqlite::migrations()
        .list()
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(
        store.applied_on_open(),
        newer_than_the_fixtures(&all),
        "sqlx's ledger is read as sqlx wrote it: nothing applied again, no checksum refused"
    );
    assert_eq!(store.applied_migrations().await.unwrap(), all);
    let expected = std::fs::read_to_string(format!("{SQLX_FIXTURE}.expected")).unwrap();
    assert_eq!(readback(&store).await, expected);
    // The ledger this build writes is the one sqlx's driver reads: down and up again.
    store.migrate_down_all().await.unwrap();
    assert!(store.applied_migrations().await.unwrap().is_empty());
    store.migrate_up().await.unwrap();
    assert_eq!(store.applied_migrations().await.unwrap(), all);
}

/// Writes the fixture `a_database_of_an_earlier_build_upgrades_in_place` upgrades: run with the
/// build whose databases it must upgrade, then copy the two files next to [`FIXTURE`].
#[tokio::test]
#[ignore = "writes a fixture with the build it runs in; run by hand: FORGE_UPGRADE_FIXTURE=dir cargo test -p forge-store-sqlite write_upgrade_fixture -- --ignored"]
async fn write_upgrade_fixture() {
    let dir = std::env::var("FORGE_UPGRADE_FIXTURE").unwrap();
    let path = fresh_path("fixture");
    let clock = Arc::new(ManualClock::at_2026());
    let store = Arc::new(
        SqliteStore::open_with(&url(&path), clock.clone(), Arc::new(SequentialIds::new()))
            .await
            .unwrap(),
    );
    fill::<Sqlite>(store.clone(), clock).await;
    std::fs::write(format!("{dir}/upgrade.expected"), readback(&*store).await).unwrap();
    store.close().await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("VACUUM INTO ?1", [format!("{dir}/upgrade.db")])
        .unwrap();
}
