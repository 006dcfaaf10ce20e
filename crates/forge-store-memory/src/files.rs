//! File records in memory: the executable specification of [`FileStore`].

use async_trait::async_trait;
use forge_core::Error;
use forge_core::scope::Scope;
use forge_files::ports::rules;
use forge_files::{FileId, FileRecord, FileStore};

use crate::MemoryStore;

#[async_trait]
impl FileStore for MemoryStore {
    async fn insert_file(
        &self,
        scope: &Scope,
        file: &FileRecord,
        actor: &str,
    ) -> Result<(), Error> {
        let mut st = self.lock();
        let key = (scope.tenant_id().clone(), file.id.clone());
        if st.files.contains_key(&key) {
            return Err(Error::invalid(format!("file {} exists", file.id)));
        }
        st.files.insert(key, file.clone());
        st.audit.push(rules::accepted(scope, file, actor));
        Ok(())
    }

    async fn file(&self, scope: &Scope, id: &FileId) -> Result<Option<FileRecord>, Error> {
        Ok(self
            .lock()
            .files
            .get(&(scope.tenant_id().clone(), id.clone()))
            .cloned())
    }

    async fn list_files(&self, scope: &Scope, limit: usize) -> Result<Vec<FileRecord>, Error> {
        let st = self.lock();
        let mut files: Vec<FileRecord> = st
            .files
            .iter()
            .filter(|((tenant, _), _)| tenant == scope.tenant_id())
            .map(|(_, f)| f.clone())
            .collect();
        files.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        files.truncate(limit);
        Ok(files)
    }

    async fn delete_file(
        &self,
        scope: &Scope,
        id: &FileId,
        actor: &str,
    ) -> Result<Option<FileRecord>, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let removed = st.files.remove(&(scope.tenant_id().clone(), id.clone()));
        if let Some(file) = &removed {
            st.audit.push(rules::deleted(scope, file, actor, now));
        }
        Ok(removed)
    }
}
