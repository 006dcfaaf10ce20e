//! Keyed requests (`forge_core::ports::keys`): a thread found or created by the caller's
//! external key, and a run start that, sent again with its idempotency key, is the same run.

use forge_core::ports::keys::{self, KeyClaim, KeyKind, RequestKeys};
use forge_core::ports::store::NewThread;
use forge_core::thread::Thread;

use super::*;

/// What an idempotency key's claim leaves to do ([`Engine::claim_run_key`]).
#[derive(Debug)]
pub enum KeyedRun {
    /// An earlier request with the key started this run: answer with it.
    Found(Run),
    /// The key names a run that does not exist yet: submit this ([`Engine::submit`]), which
    /// creates it under the claimed id unless a racing request with the key did first.
    Claimed(NewRun),
}

impl Engine {
    /// The store's request keys, or why keyed requests are refused.
    fn keys(&self) -> Result<&Arc<dyn RequestKeys>, forge_core::Error> {
        self.stores
            .keys
            .as_ref()
            .ok_or_else(|| forge_core::Error::invalid("this deployment keeps no request keys"))
    }

    /// The thread of `scope`'s tenant named by the external `key`, created from `new` when the
    /// key names none yet. Racing requests with one key get one thread; the first one's title
    /// and state are the thread's.
    pub async fn thread_by_key(
        &self,
        scope: &Scope,
        key: &str,
        new: NewThread,
    ) -> Result<Thread, EngineError> {
        check_new_thread(&new)?;
        let mine = ThreadId::generate(self.services.ids.as_ref());
        let claim = KeyClaim {
            id: mine.0,
            thread_id: mine,
            digest: String::new(),
        };
        let held = self
            .keys()?
            .claim_key(scope, KeyKind::Thread, key, claim)
            .await?;
        let id = ThreadId(held.id);
        let threads = &self.stores.threads;
        match threads.get_thread(scope, id).await {
            Err(e) if e.kind() == forge_core::ErrorKind::NotFound => {}
            found => return Ok(found?),
        }
        // The claimer, this request or an earlier one that died before creating it, creates it.
        let created = threads
            .create_thread(
                scope,
                NewThread {
                    id: Some(id),
                    ..new
                },
            )
            .await;
        match created {
            Ok(thread) => Ok(thread),
            // A racing request with the key created it first.
            Err(e) => Ok(threads.get_thread(scope, id).await.map_err(|_| e)?),
        }
    }

    /// Claims the idempotency `key` for `new` in `scope`'s tenant: the run an earlier request
    /// with the key started, or `new` to submit under the key's id. The key names one request:
    /// another message, files, agent name, thread or principal is [`forge_core::Error::KeyReused`].
    /// A retry after the agent gained a version finds the run of the version it started with.
    pub async fn claim_run_key(
        &self,
        scope: &Scope,
        key: &str,
        mut new: NewRun,
    ) -> Result<KeyedRun, EngineError> {
        let digest = keys::digest(&serde_json::json!({
            "principal": scope.principal_id().as_str(),
            // A run on a thread made for it names a fresh thread each time it is sent.
            "thread": new.new_thread.is_none().then_some(new.thread_id),
            "agent": new.agent.name,
            "input": new.input,
            "strategy": format!("{:?}", new.strategy),
        }));
        let mine = RunId::generate(self.services.ids.as_ref());
        let claim = KeyClaim {
            id: mine.0,
            thread_id: new.thread_id,
            digest,
        };
        let held = self
            .keys()?
            .claim_key(scope, KeyKind::Run, key, claim.clone())
            .await?;
        if held.digest != claim.digest {
            return Err(forge_core::Error::KeyReused { kind: "run" }.into());
        }
        let id = RunId(held.id);
        match self.stores.runs.get_run(scope, id).await {
            Err(e) if e.kind() == forge_core::ErrorKind::NotFound => {}
            found => return Ok(KeyedRun::Found(found?)),
        }
        new.id = Some(id);
        // The thread the first request made for its run, so erasing it takes the key.
        new.thread_id = held.thread_id;
        Ok(KeyedRun::Claimed(new))
    }
}
