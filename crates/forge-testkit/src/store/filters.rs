//! The operator console's run filters (issue 69): by agent and version, by creation time and by
//! failure code, alone, together and with a page cursor.

use std::time::Duration;

use forge_core::agent::AgentRef;
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunQuery, RunStore, ThreadStore};
use forge_core::run::{FailureCode, Run, RunFailure, RunStatus};
use forge_core::time::Clock;

use super::{Fixture, TTL, fixture};
use crate::StoreFactory;
use crate::fixtures::scope;

impl<F: StoreFactory> Fixture<F> {
    /// A new run of `name` version `version` on a new thread.
    async fn run_of(&self, name: &str, version: &str) -> Run {
        let thread = self
            .store
            .create_thread(&self.scope, NewThread::default())
            .await
            .expect("thread");
        let agent = AgentRef {
            name: name.into(),
            version: version.into(),
        };
        self.store
            .create_run(
                &self.scope,
                NewRun::new(thread.id, agent, vec![Part::text("hi")]),
            )
            .await
            .expect("run")
    }

    /// Runs `run` one step, then fails it with `code`.
    async fn fail(&self, run: &Run, code: FailureCode) {
        let lease = self
            .store
            .acquire_lease(&self.scope, run.id, "w", TTL)
            .await
            .expect("lease");
        let step = self.commit(run, &lease, self.events(run.id, 1, 1), RunStatus::Running);
        self.store
            .commit_step(&self.scope, step)
            .await
            .expect("step");
        let running = self.store.get_run(&self.scope, run.id).await.expect("run");
        let mut end = self.commit(
            &running,
            &lease,
            self.events(run.id, 2, 1),
            RunStatus::Failed,
        );
        end.failure = Some(RunFailure {
            code,
            message: "failed on purpose".into(),
        });
        self.store
            .commit_step(&self.scope, end)
            .await
            .expect("fail");
    }
}

/// The console narrows a tenant's runs by agent name and version, by a creation-time window
/// (`since` included, `until` excluded) and by failure code; the filters combine with each other,
/// with the page cursor and with the tenant boundary, and an unknown failure code is refused.
pub async fn runs_are_filtered_by_agent_time_and_failure<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let start = f.clock.now();
    let tick = || f.clock.advance(Duration::from_secs(1));
    let plain = f.run_of("support", "1").await;
    tick();
    let other = f.run_of("billing", "2").await;
    tick();
    let over_budget = f.run_of("support", "2").await;
    f.fail(&over_budget, FailureCode::BudgetExceeded).await;
    tick();
    let provider = f.run_of("support", "1").await;
    f.fail(&provider, FailureCode::ProviderError).await;
    let elsewhere = scope("tenant-b");
    let thread = f
        .store
        .create_thread(&elsewhere, NewThread::default())
        .await
        .expect("thread");
    f.store
        .create_run(
            &elsewhere,
            NewRun::new(
                thread.id,
                AgentRef {
                    name: "support".into(),
                    version: "1".into(),
                },
                vec![Part::text("hi")],
            ),
        )
        .await
        .expect("run");

    let at = |secs: u64| start.plus(Duration::from_secs(secs));
    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let found = |query: RunQuery| {
        let store = f.store.clone();
        let scope = f.scope.clone();
        async move { ids(store.query_runs(&scope, &query).await.expect("query")) }
    };
    let agent = |name: &str| RunQuery {
        agent_name: Some(name.into()),
        ..RunQuery::newest(10)
    };
    assert_eq!(
        found(agent("support")).await,
        [provider.id, over_budget.id, plain.id],
        "by agent, newest first, this tenant's only"
    );
    let version = |v: &str| RunQuery {
        agent_version: Some(v.into()),
        ..RunQuery::newest(10)
    };
    assert_eq!(found(version("2")).await, [over_budget.id, other.id]);
    assert_eq!(
        found(RunQuery {
            agent_version: Some("1".into()),
            ..agent("support")
        })
        .await,
        [provider.id, plain.id],
        "agent and version together"
    );
    let window = RunQuery {
        since: Some(at(1)),
        until: Some(at(3)),
        ..RunQuery::newest(10)
    };
    assert_eq!(
        found(window.clone()).await,
        [over_budget.id, other.id],
        "since included, until excluded"
    );
    let budget = RunQuery::newest(10)
        .failure_code("budget_exceeded")
        .expect("a code");
    assert_eq!(found(budget).await, [over_budget.id]);
    let failed_support = agent("support")
        .failure_code("provider_error")
        .expect("a code");
    assert_eq!(found(failed_support).await, [provider.id]);
    assert!(
        found(RunQuery {
            since: Some(at(3)),
            ..RunQuery::newest(10)
                .failure_code("budget_exceeded")
                .expect("a code")
        })
        .await
        .is_empty(),
        "a failure outside the window"
    );
    let paged = RunQuery {
        before: Some(provider.id),
        limit: 1,
        ..agent("support")
    };
    assert_eq!(found(paged).await, [over_budget.id], "below the cursor");
    let error = RunQuery::newest(1)
        .failure_code("sleepy")
        .expect_err("no such code");
    assert!(error.to_string().contains("budget_exceeded"), "{error}");
}
