//! The CRM's own database (SQLite): companies, people, opportunities, notes and tasks, in the
//! spirit of Twenty, and the record of updates applied by idempotency key. Shared by the host
//! process (notes, the API) and the MCP server process (everything an agent reads or changes).

use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteRow};
use sqlx::{Row, SqlitePool};

/// A sales opportunity.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Opportunity {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The company it is with.
    pub company: String,
    /// `qualification`, `proposal`, `negotiation`, `won` or `lost`.
    pub stage: String,
    /// Its value.
    pub amount: i64,
    /// The rep who owns it.
    pub owner: String,
}

/// A note on a record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Note {
    /// Its id (also its retrieval source id).
    pub id: String,
    /// What it is about: `company`, `person` or `opportunity`.
    pub record_kind: String,
    /// The record's id.
    pub record_id: String,
    /// Its text.
    pub body: String,
    /// `team` (everyone) or `private` (its author only).
    pub visibility: String,
    /// Who wrote it.
    pub author: String,
}

/// The stages an opportunity may be in.
pub const STAGES: [&str; 5] = ["qualification", "proposal", "negotiation", "won", "lost"];

/// The CRM database.
#[derive(Debug, Clone)]
pub struct CrmDb {
    pool: SqlitePool,
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS companies (
        id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, domain TEXT NOT NULL, owner TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS people (
        id TEXT PRIMARY KEY, company_id TEXT NOT NULL REFERENCES companies(id),
        name TEXT NOT NULL, email TEXT NOT NULL, title TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS opportunities (
        id TEXT PRIMARY KEY, company_id TEXT NOT NULL REFERENCES companies(id),
        name TEXT NOT NULL, stage TEXT NOT NULL, amount INTEGER NOT NULL, owner TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS notes (
        id TEXT PRIMARY KEY, record_kind TEXT NOT NULL, record_id TEXT NOT NULL,
        body TEXT NOT NULL, visibility TEXT NOT NULL CHECK (visibility IN ('team', 'private')),
        author TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tasks (
        id TEXT PRIMARY KEY, title TEXT NOT NULL, assignee TEXT NOT NULL, due TEXT NOT NULL,
        done INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS applied_updates (
        idempotency_key TEXT PRIMARY KEY, opportunity_id TEXT NOT NULL, stage TEXT NOT NULL,
        applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
];

/// The sample workspace: two companies, their people, three opportunities, three notes, tasks.
const SEED: &[&str] = &[
    "INSERT INTO companies VALUES
        ('co-initech', 'Initech', 'initech.example', 'alice'),
        ('co-globex', 'Globex', 'globex.example', 'bob')",
    "INSERT INTO people VALUES
        ('p-peter', 'co-initech', 'Peter Gibbons', 'peter@initech.example', 'CTO'),
        ('p-hank', 'co-globex', 'Hank Scorpio', 'hank@globex.example', 'CEO')",
    "INSERT INTO opportunities VALUES
        ('opp-1', 'co-initech', 'Initech renewal', 'proposal', 48000, 'alice'),
        ('opp-2', 'co-globex', 'Globex expansion', 'negotiation', 120000, 'bob'),
        ('opp-3', 'co-initech', 'Initech add-on seats', 'qualification', 9000, 'alice')",
    "INSERT INTO tasks VALUES
        ('t-1', 'Send Initech the SSO timeline', 'alice', '2027-03-01', 0),
        ('t-2', 'Prepare the Globex order form', 'bob', '2027-02-15', 0)",
];

/// The sample notes, as files (the evaluation dataset ingests the same files).
pub const SEED_NOTES: &[(&str, &str, &str, &str, &str)] = &[
    (
        "note-1",
        "opportunity",
        "opp-1",
        "team",
        include_str!("../seed/notes/note-1.txt"),
    ),
    (
        "note-2",
        "opportunity",
        "opp-2",
        "private",
        include_str!("../seed/notes/note-2.txt"),
    ),
    (
        "note-3",
        "company",
        "co-globex",
        "team",
        include_str!("../seed/notes/note-3.txt"),
    ),
];

/// The sample notes' authors, by note.
fn seed_author(id: &str) -> &'static str {
    match id {
        "note-1" => "alice",
        _ => "bob",
    }
}

fn opportunity(r: &SqliteRow) -> Result<Opportunity, sqlx::Error> {
    Ok(Opportunity {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        company: r.try_get("company")?,
        stage: r.try_get("stage")?,
        amount: r.try_get("amount")?,
        owner: r.try_get("owner")?,
    })
}

fn note(r: &SqliteRow) -> Result<Note, sqlx::Error> {
    Ok(Note {
        id: r.try_get("id")?,
        record_kind: r.try_get("record_kind")?,
        record_id: r.try_get("record_id")?,
        body: r.try_get("body")?,
        visibility: r.try_get("visibility")?,
        author: r.try_get("author")?,
    })
}

impl CrmDb {
    /// Opens the database at `path` (`None`: in memory), creating and seeding it when new.
    pub async fn open(path: Option<&std::path::Path>) -> Result<Self, sqlx::Error> {
        let options = match path {
            Some(p) => SqliteConnectOptions::new()
                .filename(p)
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal),
            None => SqliteConnectOptions::new().in_memory(true),
        }
        .busy_timeout(std::time::Duration::from_secs(5));
        // In memory, one connection is the database.
        let pool = SqlitePoolOptions::new()
            .max_connections(if path.is_some() { 4 } else { 1 })
            .connect_with(options)
            .await?;
        let mut tx = pool.begin().await?;
        for ddl in SCHEMA {
            sqlx::query(*ddl).execute(&mut *tx).await?;
        }
        let (companies,): (i64,) = sqlx::query_as("SELECT count(*) FROM companies")
            .fetch_one(&mut *tx)
            .await?;
        if companies == 0 {
            for insert in SEED {
                sqlx::query(*insert).execute(&mut *tx).await?;
            }
            for (id, kind, record, visibility, body) in SEED_NOTES {
                sqlx::query("INSERT INTO notes VALUES (?, ?, ?, ?, ?, ?)")
                    .bind(id)
                    .bind(kind)
                    .bind(record)
                    .bind(body)
                    .bind(visibility)
                    .bind(seed_author(id))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(Self { pool })
    }

    /// The opportunities `owner` owns (every one when `None`).
    pub async fn opportunities(
        &self,
        owner: Option<&str>,
    ) -> Result<Vec<Opportunity>, sqlx::Error> {
        sqlx::query(
            "SELECT o.id, o.name, c.name AS company, o.stage, o.amount, o.owner
             FROM opportunities o JOIN companies c ON c.id = o.company_id
             WHERE ?1 IS NULL OR o.owner = ?1 ORDER BY o.id",
        )
        .bind(owner)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(opportunity)
        .collect()
    }

    /// The opportunity `id`, if there is one.
    pub async fn opportunity(&self, id: &str) -> Result<Option<Opportunity>, sqlx::Error> {
        sqlx::query(
            "SELECT o.id, o.name, c.name AS company, o.stage, o.amount, o.owner
             FROM opportunities o JOIN companies c ON c.id = o.company_id WHERE o.id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(opportunity)
        .transpose()
    }

    /// A company by name, with its people and opportunities.
    pub async fn company(&self, name: &str) -> Result<Option<serde_json::Value>, sqlx::Error> {
        let Some(row) = sqlx::query("SELECT id, name, domain, owner FROM companies WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        let id: String = row.try_get("id")?;
        let people: Vec<serde_json::Value> =
            sqlx::query("SELECT name, email, title FROM people WHERE company_id = ? ORDER BY id")
                .bind(&id)
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(|p| {
                    Ok(serde_json::json!({
                        "name": p.try_get::<String, _>("name")?,
                        "email": p.try_get::<String, _>("email")?,
                        "title": p.try_get::<String, _>("title")?,
                    }))
                })
                .collect::<Result<_, sqlx::Error>>()?;
        Ok(Some(serde_json::json!({
            "id": id,
            "name": row.try_get::<String, _>("name")?,
            "domain": row.try_get::<String, _>("domain")?,
            "owner": row.try_get::<String, _>("owner")?,
            "people": people,
        })))
    }

    /// The open tasks assigned to `assignee`.
    pub async fn tasks(&self, assignee: &str) -> Result<Vec<serde_json::Value>, sqlx::Error> {
        sqlx::query("SELECT id, title, due FROM tasks WHERE assignee = ? AND done = 0 ORDER BY due")
            .bind(assignee)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|t| {
                Ok(serde_json::json!({
                    "id": t.try_get::<String, _>("id")?,
                    "title": t.try_get::<String, _>("title")?,
                    "due": t.try_get::<String, _>("due")?,
                }))
            })
            .collect()
    }

    /// Moves an opportunity to `stage` once per idempotency key: a repeated key changes nothing
    /// and answers as the first time did. `None` when there is no such opportunity.
    pub async fn update_stage(
        &self,
        key: &str,
        id: &str,
        stage: &str,
    ) -> Result<Option<(Opportunity, bool)>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let first = sqlx::query(
            "INSERT INTO applied_updates (idempotency_key, opportunity_id, stage)
             SELECT ?, id, ? FROM opportunities WHERE id = ? ON CONFLICT DO NOTHING",
        )
        .bind(key)
        .bind(stage)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if first {
            sqlx::query("UPDATE opportunities SET stage = ? WHERE id = ?")
                .bind(stage)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(self.opportunity(id).await?.map(|o| (o, !first)))
    }

    /// How many updates were applied (each idempotency key once).
    pub async fn applied_updates(&self) -> Result<i64, sqlx::Error> {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM applied_updates")
            .fetch_one(&self.pool)
            .await?;
        Ok(n)
    }

    /// Every note.
    pub async fn notes(&self) -> Result<Vec<Note>, sqlx::Error> {
        sqlx::query("SELECT * FROM notes ORDER BY id")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(note)
            .collect()
    }

    /// Whether the record a note would be on exists: a `company` or an `opportunity` by id.
    pub async fn record_exists(&self, kind: &str, id: &str) -> Result<bool, sqlx::Error> {
        let sql = match kind {
            "company" => "SELECT 1 FROM companies WHERE id = ?",
            "opportunity" => "SELECT 1 FROM opportunities WHERE id = ?",
            _ => return Ok(false),
        };
        Ok(sqlx::query(sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .is_some())
    }

    /// Adds a note.
    pub async fn add_note(&self, n: &Note) -> Result<(), sqlx::Error> {
        sqlx::query("INSERT INTO notes VALUES (?, ?, ?, ?, ?, ?)")
            .bind(&n.id)
            .bind(&n.record_kind)
            .bind(&n.record_id)
            .bind(&n.body)
            .bind(&n.visibility)
            .bind(&n.author)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
