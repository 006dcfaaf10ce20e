//! Rows to domain values, written once for every SQL store: a store wraps its driver's row in a
//! type that implements [`Columns`] (how a column of each kind is read in its dialect), and the
//! mappers here ([`thread`], [`message`], [`run`], [`source`], [`chunk`]) build the domain value.
//!
//! [`Columns`]'s provided methods read SQLite's storage classes (ids as text, times as Unix
//! milliseconds, JSON as text, flags as integers); PostgreSQL's row overrides them with its
//! native types.

use forge_core::Error;
use forge_core::agent::AgentRef;
use forge_core::id::{JobId, MessageId, RunId, ThreadId};
use forge_core::message::{Message, Role};
use forge_core::ports::audit::AuditRecord;
use forge_core::ports::queue::{JobInfo, JobState};
use forge_core::run::{Run, RunLease, RunStatus};
use forge_core::scope::{PrincipalId, TenantId};
use forge_core::thread::{SessionState, Thread};
use forge_core::time::Timestamp;
use forge_rag::model::{Chunk, Format, Source, SourceId};
use serde::de::DeserializeOwned;

/// A row read by column name, as the domain rows' columns are kept in one dialect. Each read is
/// `None` for NULL.
pub trait Columns {
    /// The text in `col`.
    fn text(&self, col: &str) -> Result<Option<String>, Error>;

    /// The integer in `col`.
    fn int(&self, col: &str) -> Result<Option<i64>, Error>;

    /// The UUID in `col` (provided: parsed from text).
    fn uuid(&self, col: &str) -> Result<Option<uuid::Uuid>, Error> {
        self.text(col)?
            .map(|s| uuid::Uuid::parse_str(&s).map_err(|e| corrupt(col, e)))
            .transpose()
    }

    /// The time in `col` (provided: from Unix milliseconds).
    fn time(&self, col: &str) -> Result<Option<Timestamp>, Error> {
        self.int(col)?
            .map(|ms| Timestamp::from_unix_millis(ms).ok_or_else(|| corrupt(col, ms)))
            .transpose()
    }

    /// The JSON value in `col`, decoded as `T` (provided: parsed from text).
    fn json<T: DeserializeOwned>(&self, col: &str) -> Result<Option<T>, Error> {
        self.text(col)?
            .map(|s| serde_json::from_str(&s).map_err(|e| corrupt(col, e)))
            .transpose()
    }

    /// The flag in `col` (provided: an integer, true unless 0).
    fn flag(&self, col: &str) -> Result<Option<bool>, Error> {
        Ok(self.int(col)?.map(|v| v != 0))
    }
}

/// The error for a stored value this build cannot read.
pub fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::backend(
        false,
        std::io::Error::other(format!("stored {what} is unreadable: {detail}")),
    )
}

/// `value` read from `col`, which must not be NULL.
pub fn required<T>(value: Option<T>, col: &str) -> Result<T, Error> {
    value.ok_or_else(|| corrupt(col, "NULL"))
}

/// A count or version stored signed, which must not be negative.
pub fn unsigned(value: i64, col: &str) -> Result<u64, Error> {
    u64::try_from(value).map_err(|_| corrupt(col, value))
}

/// `value` as a signed integer to store, refused when it does not fit.
pub fn signed(value: u64) -> Result<i64, Error> {
    i64::try_from(value).map_err(|_| Error::invalid(format!("{value} is too large to store")))
}

fn text(row: &impl Columns, col: &str) -> Result<String, Error> {
    required(row.text(col)?, col)
}

fn int(row: &impl Columns, col: &str) -> Result<i64, Error> {
    required(row.int(col)?, col)
}

fn uuid(row: &impl Columns, col: &str) -> Result<uuid::Uuid, Error> {
    required(row.uuid(col)?, col)
}

fn time(row: &impl Columns, col: &str) -> Result<Timestamp, Error> {
    required(row.time(col)?, col)
}

fn json<T: DeserializeOwned>(row: &impl Columns, col: &str) -> Result<T, Error> {
    required(row.json(col)?, col)
}

/// A thread's columns as they are named in `forge_threads`.
pub const THREAD_COLUMNS: [&str; 10] = [
    "id",
    "tenant_id",
    "created_by",
    "title",
    "state_version",
    "state",
    "active_run",
    "summary",
    "created_at",
    "archived_at",
];

/// A thread from its columns as `forge_threads` names them.
pub fn thread(row: &impl Columns) -> Result<Thread, Error> {
    thread_as(row, &THREAD_COLUMNS)
}

/// A thread from its columns named as `names`: id, tenant, creator, title, state version, state,
/// active run, summary, creation and archival.
pub fn thread_as(row: &impl Columns, names: &[&str; 10]) -> Result<Thread, Error> {
    let [
        id,
        tenant,
        creator,
        title,
        version,
        state,
        active,
        summary,
        created,
        archived,
    ] = *names;
    Ok(Thread {
        id: ThreadId(uuid(row, id)?),
        tenant_id: TenantId::new(text(row, tenant)?)?,
        created_by: PrincipalId::new(text(row, creator)?)?,
        title: row.text(title)?,
        state: SessionState {
            version: unsigned(int(row, version)?, version)?,
            values: json(row, state)?,
        },
        active_run: row.uuid(active)?.map(RunId),
        summary: row.json(summary)?,
        created_at: time(row, created)?,
        archived_at: row.time(archived)?,
    })
}

/// A message from its columns as `forge_messages` names them.
pub fn message(row: &impl Columns) -> Result<Message, Error> {
    message_as(row, &["id", "run_id", "role", "parts", "created_at"])
}

/// A message from its columns named as `names`: id, run, role, parts and creation time.
pub fn message_as(row: &impl Columns, names: &[&str; 5]) -> Result<Message, Error> {
    let [id, run, role, parts, created] = *names;
    Ok(Message {
        id: MessageId(uuid(row, id)?),
        run_id: RunId(uuid(row, run)?),
        role: Role::from_name(&text(row, role)?)?,
        parts: json(row, parts)?,
        created_at: time(row, created)?,
    })
}

/// A run from its columns as `forge_runs` names them.
pub fn run(row: &impl Columns) -> Result<Run, Error> {
    let id = RunId(uuid(row, "id")?);
    let status = text(row, "status")?;
    let waiting_for = row.text("waiting_for")?;
    let lease = match row.text("lease_holder")? {
        None => None,
        Some(holder) => Some(RunLease {
            run_id: id,
            holder,
            token: unsigned(int(row, "lease_token")?, "lease_token")?,
            expires_at: time(row, "lease_expires_at")?,
        }),
    };
    Ok(Run {
        id,
        tenant_id: TenantId::new(text(row, "tenant_id")?)?,
        principal_id: PrincipalId::new(text(row, "principal_id")?)?,
        role_ids: json(row, "role_ids")?,
        thread_id: ThreadId(uuid(row, "thread_id")?),
        agent: AgentRef {
            name: text(row, "agent_name")?,
            version: text(row, "agent_version")?,
        },
        input: json(row, "input")?,
        status: RunStatus::from_stored(&status, waiting_for.as_deref())?,
        version: unsigned(int(row, "version")?, "version")?,
        last_seq: unsigned(int(row, "last_seq")?, "last_seq")?,
        checkpoint: json(row, "checkpoint")?,
        failure: row.json("failure")?,
        lease,
        cancel_requested: required(row.flag("cancel_requested")?, "cancel_requested")?,
        fence: unsigned(int(row, "fence")?, "fence")?,
        created_at: time(row, "created_at")?,
        updated_at: time(row, "updated_at")?,
    })
}

/// A job as an operator sees it, from its columns as `forge_jobs` names them.
pub fn job_info(row: &impl Columns) -> Result<JobInfo, Error> {
    let count =
        |col: &str| -> Result<u32, Error> { Ok(u32::try_from(int(row, col)?).unwrap_or(0)) };
    Ok(JobInfo {
        id: JobId(uuid(row, "id")?),
        tenant_id: TenantId::new(text(row, "tenant_id")?)?,
        run_id: RunId(uuid(row, "run_id")?),
        state: JobState::from_name(&text(row, "state")?)?,
        attempts: count("attempts")?,
        max_attempts: count("max_attempts")?,
        last_error: row.text("last_error")?,
    })
}

/// An audit record from its columns: `tenant_id`, `at`, `actor`, `action`, `subject` and
/// `detail` (JSON).
pub fn audit_record(row: &impl Columns) -> Result<AuditRecord, Error> {
    Ok(AuditRecord {
        tenant_id: TenantId::new(text(row, "tenant_id")?)?,
        at: required(row.time("at")?, "at")?,
        actor: text(row, "actor")?,
        action: text(row, "action")?,
        subject: text(row, "subject")?,
        detail: required(row.json("detail")?, "detail")?,
    })
}

/// A retrieval source from its columns: `id`, `version`, `title`, `label`, `owner` (null when
/// nobody owns it), `format`, `metadata` (JSON text), `text_bytes`, `chunks` and `updated_at`.
pub fn source(row: &impl Columns) -> Result<Source, Error> {
    let format = text(row, "format")?;
    Ok(Source {
        id: SourceId::new(text(row, "id")?)?,
        version: text(row, "version")?,
        title: text(row, "title")?,
        label: text(row, "label")?,
        owner: row.text("owner")?,
        format: Format::parse(&format).ok_or_else(|| corrupt("format", &format))?,
        metadata: serde_json::from_str(&text(row, "metadata")?)
            .map_err(|e| corrupt("metadata", e))?,
        text_bytes: int(row, "text_bytes")?.max(0) as u64,
        chunks: int(row, "chunks")?.max(0) as u32,
        updated_at: time(row, "updated_at")?,
    })
}

/// A chunk from its columns: `source_id`, `version`, `idx`, `start_byte`, `end_byte`, `text` and
/// `heading`.
pub fn chunk(row: &impl Columns) -> Result<Chunk, Error> {
    Ok(Chunk {
        source_id: SourceId::new(text(row, "source_id")?)?,
        version: text(row, "version")?,
        index: int(row, "idx")?.max(0) as u32,
        start: int(row, "start_byte")?.max(0) as u64,
        end: int(row, "end_byte")?.max(0) as u64,
        text: text(row, "text")?,
        heading: row.text("heading")?,
    })
}
