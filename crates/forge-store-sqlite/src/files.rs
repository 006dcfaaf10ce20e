//! File records on SQLite: the record as JSON, keyed by tenant and id; its audit record in the
//! same transaction.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::scope::Scope;
use forge_files::ports::rules;
use forge_files::{FileId, FileRecord, FileStore};
use forge_sql::files;

use crate::SqliteStore;
use crate::rows::db_error;

#[async_trait]
impl FileStore for SqliteStore {
    async fn insert_file(
        &self,
        scope: &Scope,
        file: &FileRecord,
        actor: &str,
    ) -> Result<(), Error> {
        let (_gate, mut tx) = self.write_tx().await?;
        let inserted = sqlx::query(
            "INSERT INTO forge_files (tenant_id, id, created_at, body) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
        )
        .bind(scope.tenant_id().as_str())
        .bind(file.id.as_str())
        .bind(file.created_at.unix_millis())
        .bind(files::encode(file)?)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        if inserted == 0 {
            return Err(Error::invalid(format!("file {} exists", file.id)));
        }
        crate::interactions::audit(&mut tx, &rules::accepted(scope, file, actor)).await?;
        tx.commit().await.map_err(db_error)
    }

    async fn file(&self, scope: &Scope, id: &FileId) -> Result<Option<FileRecord>, Error> {
        let body: Option<String> =
            sqlx::query_scalar("SELECT body FROM forge_files WHERE tenant_id = $1 AND id = $2")
                .bind(scope.tenant_id().as_str())
                .bind(id.as_str())
                .fetch_optional(&mut *self.conn().await?)
                .await
                .map_err(db_error)?;
        body.as_deref().map(files::decode).transpose()
    }

    async fn list_files(&self, scope: &Scope, limit: usize) -> Result<Vec<FileRecord>, Error> {
        let bodies: Vec<String> = sqlx::query_scalar(
            "SELECT body FROM forge_files WHERE tenant_id = $1
             ORDER BY created_at DESC, id DESC LIMIT $2",
        )
        .bind(scope.tenant_id().as_str())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        bodies.iter().map(|b| files::decode(b)).collect()
    }

    async fn delete_file(
        &self,
        scope: &Scope,
        id: &FileId,
        actor: &str,
    ) -> Result<Option<FileRecord>, Error> {
        let (_gate, mut tx) = self.write_tx().await?;
        let body: Option<String> = sqlx::query_scalar(
            "DELETE FROM forge_files WHERE tenant_id = $1 AND id = $2 RETURNING body",
        )
        .bind(scope.tenant_id().as_str())
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let Some(file) = body.as_deref().map(files::decode).transpose()? else {
            return Ok(None);
        };
        let record = rules::deleted(scope, &file, actor, self.clock.now());
        crate::interactions::audit(&mut tx, &record).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(Some(file))
    }
}
