//! Abandoning a run: the operator's answer to a dead letter, a run no worker could finish. It
//! is failed with `dead_lettered` under a lease of its own, which frees its thread for the next
//! run.

use super::*;
use crate::execution::Execution;

impl Engine {
    /// Ends a run that will not be executed (an operator discarded its dead-lettered job): commits
    /// `run.failed` with `dead_lettered` and `message`, which frees its thread for the next run.
    pub async fn abandon(
        &self,
        scope: &Scope,
        run_id: RunId,
        message: &str,
    ) -> Result<RunOutcome, EngineError> {
        let asked = std::time::Instant::now();
        let lease = self
            .stores
            .runs
            .acquire_lease(scope, run_id, &self.local.worker_id, self.local.lease_ttl)
            .await?;
        let run = match self.stores.runs.get_run(scope, run_id).await {
            Ok(run) if !run.status.is_terminal() => run,
            read => {
                let _ = self.stores.runs.release_lease(scope, &lease).await;
                let run = read?;
                return Ok(RunOutcome {
                    status: run.status,
                    last_seq: run.last_seq,
                    failure: run.failure,
                    job_completed: false,
                });
            }
        };
        let observer = crate::observer::NoopObserver;
        let mut cur = Execution::new(
            run,
            Arc::new(crate::lease::HeldLease::new(
                lease.clone(),
                Some(asked),
                self.local.lease_ttl,
            )),
            self.services.clock.as_ref(),
            &observer,
            forge_core::telemetry::Span::none(),
            None,
        );
        let failure = RunFailure {
            code: FailureCode::DeadLettered,
            message: message.to_owned(),
        };
        cur.apply(RunInput::Fail)?;
        cur.emit(RunEventKind::RunFailed {
            failure: failure.clone(),
        });
        let result = self
            .commit(scope, &mut cur, Some(failure))
            .await
            .map(|(outcome, _)| outcome);
        // The failing commit gave the lease up with it; a refused one did not.
        if result.is_err() {
            let _ = self.stores.runs.release_lease(scope, &lease).await;
        }
        result
    }
}
