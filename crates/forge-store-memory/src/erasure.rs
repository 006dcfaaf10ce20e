//! Erasing a thread or a run in memory: everything removed under the one lock, with its audit
//! record.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::RunId;
use forge_core::ports::erasure::{self, DataErasure, Erase, Erased};
use forge_core::scope::Scope;

use crate::MemoryStore;

#[async_trait]
impl DataErasure for MemoryStore {
    async fn erase(&self, scope: &Scope, target: Erase, actor: &str) -> Result<Erased, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let (thread, runs): (_, Vec<RunId>) = match target {
            Erase::Thread(id) => {
                st.thread(scope, id)?;
                (id, st.runs_by_thread.get(&id).cloned().unwrap_or_default())
            }
            Erase::Run(id) => (st.run(scope, id)?.thread_id, vec![id]),
        };
        let statuses: Vec<_> = runs
            .iter()
            .filter_map(|id| st.runs.get(id).map(|r| (*id, r.status)))
            .collect();
        let active = st.thread(scope, thread)?.active_run;
        let active = match target {
            Erase::Thread(_) => active,
            Erase::Run(id) => active.filter(|a| *a == id),
        };
        erasure::check_ended(thread, active, &statuses)?;

        let mut erased = Erased::default();
        for id in &runs {
            erased.runs += u64::from(st.runs.remove(id).is_some());
            erased.events += st.events.remove(id).map_or(0, |e| e.len() as u64);
        }
        let of_runs = |r: &RunId| runs.contains(r);
        if let Some(list) = st.runs_by_thread.get_mut(&thread) {
            list.retain(|r| !of_runs(r));
        }
        if let Some(messages) = st.messages.get_mut(&thread) {
            let before = messages.len();
            messages.retain(|m| !of_runs(&m.run_id));
            erased.messages = (before - messages.len()) as u64;
        }
        let before = st.interactions.len();
        st.interactions.retain(|_, i| !of_runs(&i.run_id));
        erased.interactions = (before - st.interactions.len()) as u64;
        let before = st.jobs.len();
        st.jobs.retain(|_, j| !of_runs(&j.run_id()));
        erased.jobs = (before - st.jobs.len()) as u64;
        for call in st.calls.values_mut() {
            if of_runs(&call.run_id) {
                *call = erasure::unlinked(call.clone());
                erased.model_calls_unlinked += 1;
            }
        }
        st.keys.retain(|(tenant, kind, _), claim| {
            tenant != scope.tenant_id() || !target.erases_key(*kind, claim)
        });
        if let Erase::Thread(id) = target {
            erased.threads = u64::from(st.threads.remove(&id).is_some());
            st.messages.remove(&id);
            st.runs_by_thread.remove(&id);
        }
        st.audit
            .push(erasure::audit_record(scope, target, actor, now, &erased));
        Ok(erased)
    }
}
