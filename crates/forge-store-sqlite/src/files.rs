//! File records on SQLite: the record as JSON, keyed by tenant and id; its audit record in the
//! same transaction.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::scope::Scope;
use forge_files::ports::rules;
use forge_files::{FileId, FileRecord, FileStore};
use forge_sql::files;
use rusqlite::params;

use crate::SqliteStore;
use crate::db;

#[async_trait]
impl FileStore for SqliteStore {
    async fn insert_file(
        &self,
        scope: &Scope,
        file: &FileRecord,
        actor: &str,
    ) -> Result<(), Error> {
        let (tenant, id) = (scope.tenant_id().to_string(), file.id.to_string());
        let (at, body) = (file.created_at.unix_millis(), files::encode(file)?);
        let record = rules::accepted(scope, file, actor);
        self.write(move |conn| {
            let inserted = db::execute(
                conn,
                "INSERT INTO forge_files (tenant_id, id, created_at, body) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT DO NOTHING",
                params![tenant, id, at, body],
            )?;
            if inserted == 0 {
                return Err(Error::invalid(format!("file {id} exists")));
            }
            crate::interactions::audit(conn, &record)
        })
        .await
    }

    async fn file(&self, scope: &Scope, id: &FileId) -> Result<Option<FileRecord>, Error> {
        let (tenant, id) = (scope.tenant_id().to_string(), id.to_string());
        let body: Option<String> = self
            .read(move |conn| {
                db::value(
                    conn,
                    "SELECT body FROM forge_files WHERE tenant_id = ?1 AND id = ?2",
                    params![tenant, id],
                )
            })
            .await?;
        body.as_deref().map(files::decode).transpose()
    }

    async fn list_files(&self, scope: &Scope, limit: usize) -> Result<Vec<FileRecord>, Error> {
        let tenant = scope.tenant_id().to_string();
        let limit = db::saturating(limit);
        let bodies: Vec<String> = self
            .read(move |conn| {
                db::all(
                    conn,
                    "SELECT body FROM forge_files WHERE tenant_id = ?1 \
                     ORDER BY created_at DESC, id DESC LIMIT ?2",
                    params![tenant, limit],
                    |row| row.get(0).map_err(db::error),
                )
            })
            .await?;
        bodies.iter().map(|b| files::decode(b)).collect()
    }

    async fn delete_file(
        &self,
        scope: &Scope,
        id: &FileId,
        actor: &str,
    ) -> Result<Option<FileRecord>, Error> {
        let (scope, id, actor) = (scope.clone(), id.to_string(), actor.to_owned());
        let now = self.clock.now();
        self.write(move |conn| {
            let body: Option<String> = db::value(
                conn,
                "DELETE FROM forge_files WHERE tenant_id = ?1 AND id = ?2 RETURNING body",
                params![scope.tenant_id().as_str(), id],
            )?;
            let Some(file) = body.as_deref().map(files::decode).transpose()? else {
                return Ok(None);
            };
            crate::interactions::audit(conn, &rules::deleted(&scope, &file, &actor, now))?;
            Ok(Some(file))
        })
        .await
    }
}
