//! The in-memory store against the store conformance suite.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use forge_core::id::SequentialIds;
use forge_core::time::ManualClock;
use forge_store_memory::MemoryStore;

struct Memory;

impl forge_testkit::StoreFactory for Memory {
    type Store = MemoryStore;
    const READS_HISTORY_WITH_LEASE: bool = true;

    async fn make(clock: Arc<ManualClock>) -> Arc<MemoryStore> {
        Arc::new(MemoryStore::new(clock, Arc::new(SequentialIds::new())))
    }
}

forge_testkit::store_conformance!(Memory);

impl forge_testkit::LeaseFactory for Memory {
    type Locks = MemoryStore;

    async fn make(clock: Arc<ManualClock>) -> Arc<MemoryStore> {
        Arc::new(MemoryStore::new(clock, Arc::new(SequentialIds::new())))
    }
}

forge_testkit::lock_conformance!(Memory);
