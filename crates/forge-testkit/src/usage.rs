//! The usage-ledger conformance suite: reservations never overshoot a quota, even 64 at once;
//! settlements replace estimates; periods roll over; tenants see only their own calls.

use std::sync::Arc;
use std::time::Duration;

use forge_core::id::{ModelCallId, RunId, UuidV7Generator};
use forge_core::metering::{CallStatus, ModelCall, Quota, QuotaPeriod, Settlement};
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunStore, ThreadStore};
use forge_core::ports::usage::{CallFilter, UsageLedger};
use forge_core::scope::Scope;
use forge_core::time::{Clock, ManualClock, Timestamp};
use forge_core::usage::Usage;
use forge_core::{Error, ErrorKind};

use crate::StoreFactory;
use crate::fixtures::{agent_ref, scope};

struct Ledger<F: StoreFactory> {
    store: Arc<F::Store>,
    clock: Arc<ManualClock>,
    scope: Scope,
    run: RunId,
}

async fn ledger<F: StoreFactory>() -> Ledger<F> {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let scope = scope("tenant-a");
    let thread = store
        .create_thread(&scope, NewThread::default())
        .await
        .expect("thread");
    let run = store
        .create_run(
            &scope,
            NewRun::new(thread.id, agent_ref(), vec![Part::text("x")]),
        )
        .await
        .expect("run")
        .id;
    Ledger {
        store,
        clock,
        scope,
        run,
    }
}

fn tokens(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

const DAILY_1000: Quota = Quota {
    period: QuotaPeriod::Day,
    max_tokens: Some(1000),
    max_cost_micros: None,
};

impl<F: StoreFactory> Ledger<F> {
    fn call(&self, estimate: Usage, cost: u64) -> ModelCall {
        let at = self.clock.now();
        ModelCall {
            id: ModelCallId::generate(&UuidV7Generator),
            tenant_id: self.scope.tenant_id().clone(),
            run_id: self.run,
            step: 1,
            attempt: 1,
            model: "openai:gpt-4o-mini".into(),
            at,
            period_start: QuotaPeriod::Day.start(at),
            estimate,
            estimated_cost_micros: cost,
            actual: None,
            cost_micros: None,
            request_id: None,
            provider_model: None,
            holder: None,
            trace_id: None,
            status: CallStatus::Reserved,
        }
    }

    async fn reserve(&self, call: &ModelCall, quota: Quota) -> Result<(), Error> {
        self.store
            .reserve(&self.scope, call.clone(), Some(quota))
            .await
    }

    async fn calls(&self) -> Vec<ModelCall> {
        self.store
            .model_calls(&self.scope, CallFilter::Run(self.run))
            .await
            .expect("calls")
    }
}

fn refused(r: Result<(), Error>, what: &str) {
    match r {
        Err(Error::QuotaExceeded(m)) => assert!(m.contains("tenant-a"), "{m}"),
        other => panic!("{what}: expected QuotaExceeded, got {other:?}"),
    }
}

/// A re-executed step's reservation replaces its predecessor's instead of adding to it, and a
/// reservation nothing replaces is released by the orphan sweep (issue 17, item 2). Released
/// reservations charge nothing; a settlement arriving for one still counts.
pub async fn reservations_are_replaced_on_reexecution_and_orphans_released<F: StoreFactory>() {
    let l = ledger::<F>().await;
    // The first execution reserves 600 of 1,000 and dies before settling.
    let first = l.call(tokens(600, 0), 0);
    l.reserve(&first, DAILY_1000)
        .await
        .expect("first reservation");
    // Its re-execution reserves the same step again: without replacement 1,200 > 1,000.
    let again = ModelCall {
        id: ModelCallId::generate(&UuidV7Generator),
        attempt: 2,
        ..l.call(tokens(600, 0), 0)
    };
    l.reserve(&again, DAILY_1000)
        .await
        .expect("the re-execution's reservation replaces the first");
    let calls = l.calls().await;
    let status = |id| calls.iter().find(|c| c.id == id).map(|c| c.status);
    assert_eq!(status(first.id), Some(CallStatus::Released));
    assert_eq!(status(again.id), Some(CallStatus::Reserved));
    // Another step's reservation is not replaced: 600 + 600 is over.
    let other_step = ModelCall {
        id: ModelCallId::generate(&UuidV7Generator),
        step: 2,
        attempt: 2,
        ..l.call(tokens(600, 0), 0)
    };
    refused(
        l.reserve(&other_step, DAILY_1000).await,
        "another step's reservation",
    );
    // An hour later the sweep releases the orphan, and the quota is free again.
    l.clock
        .advance(forge_core::metering::ORPHANED_AFTER + Duration::from_secs(1));
    // The worker's sweep passes `now - ORPHANED_AFTER`: here, just after the reservations.
    let before = first.at.plus(Duration::from_secs(1));
    let released = l
        .store
        .release_orphans(&forge_core::scope::SystemScope::new("conformance"), before)
        .await
        .expect("sweep");
    assert_eq!(released, 1);
    let calls = l.calls().await;
    assert!(
        calls.iter().all(|c| c.status == CallStatus::Released),
        "{calls:?}"
    );
    let late = l.call(tokens(900, 0), 0);
    l.reserve(&late, DAILY_1000)
        .await
        .expect("released reservations charge nothing");
    // A call that finishes after its reservation was released still settles, and counts.
    l.store
        .settle(
            &l.scope,
            Settlement {
                id: again.id,
                actual: Some(tokens(50, 50)),
                cost_micros: 0,
                request_id: None,
            },
        )
        .await
        .expect("a released reservation settles");
    refused(
        l.reserve(&l.call(tokens(1, 0), 0), DAILY_1000).await,
        "900 reserved + 100 settled",
    );
}

/// 64 reservations of 100 tokens at once against a daily quota of 1,000: exactly 10 succeed.
pub async fn parallel_reservations_never_overshoot_a_quota<F: StoreFactory>() {
    let l = Arc::new(ledger::<F>().await);
    let tasks = (0..64).map(|_| {
        let l = Arc::clone(&l);
        tokio::spawn(async move {
            let call = l.call(tokens(60, 40), 0);
            l.reserve(&call, DAILY_1000).await
        })
    });
    let results = futures_util::future::join_all(tasks).await;
    let mut admitted = 0;
    for r in results {
        match r.expect("task") {
            Ok(()) => admitted += 1,
            Err(e) => assert!(matches!(e, Error::QuotaExceeded(_)), "{e:?}"),
        }
    }
    assert_eq!(admitted, 10, "exactly 10 reservations of 100 fit in 1,000");
    assert_eq!(
        l.calls().await.len(),
        10,
        "refused reservations record nothing"
    );
}

/// A settlement replaces the estimate with the actual (freeing quota); one without a provider
/// report keeps the estimate, flagged; a call settles once; cost quotas count cost.
pub async fn settlements_replace_estimates<F: StoreFactory>() {
    let l = ledger::<F>().await;
    let big = l.call(tokens(400, 500), 900);
    l.reserve(&big, DAILY_1000).await.expect("900 of 1000");
    refused(
        l.reserve(&l.call(tokens(100, 100), 0), DAILY_1000).await,
        "a reservation past the quota",
    );
    let settled = l
        .store
        .settle(
            &l.scope,
            Settlement {
                id: big.id,
                actual: Some(tokens(90, 10)),
                cost_micros: 95,
                request_id: Some("req_1".into()),
            },
        )
        .await
        .expect("settle");
    assert_eq!(settled.status, CallStatus::Settled);
    assert_eq!(settled.actual, Some(tokens(90, 10)));
    assert_eq!(settled.request_id.as_deref(), Some("req_1"));
    let second = l.call(tokens(500, 300), 0);
    l.reserve(&second, DAILY_1000)
        .await
        .expect("the actual 100 left room for 800");
    let flagged = l
        .store
        .settle(
            &l.scope,
            Settlement {
                id: second.id,
                actual: None,
                cost_micros: 0,
                request_id: None,
            },
        )
        .await
        .expect("settle without a report");
    assert_eq!(flagged.status, CallStatus::Unreconciled);
    refused(
        l.reserve(&l.call(tokens(101, 0), 0), DAILY_1000).await,
        "an unreconciled call still counts its estimate",
    );
    match l
        .store
        .settle(
            &l.scope,
            Settlement {
                id: big.id,
                actual: Some(tokens(1, 1)),
                cost_micros: 1,
                request_id: None,
            },
        )
        .await
    {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Invalid, "{e}"),
        Ok(c) => panic!("a call settled twice: {c:?}"),
    }
    let costly = Quota {
        period: QuotaPeriod::Month,
        max_tokens: None,
        max_cost_micros: Some(1_000),
    };
    l.reserve(&l.call(tokens(1, 1), 600), costly)
        .await
        .expect("95 + 600 of 1000");
    refused(
        l.reserve(&l.call(tokens(1, 1), 400), costly).await,
        "a cost quota",
    );
    assert_eq!(l.calls().await.len(), 3);
}

/// A quota counts per period: the next day starts empty.
pub async fn quota_periods_roll_over<F: StoreFactory>() {
    let l = ledger::<F>().await;
    l.reserve(&l.call(tokens(900, 0), 0), DAILY_1000)
        .await
        .expect("900 today");
    refused(
        l.reserve(&l.call(tokens(200, 0), 0), DAILY_1000).await,
        "over today's quota",
    );
    l.clock.advance(Duration::from_secs(24 * 3600));
    l.reserve(&l.call(tokens(900, 0), 0), DAILY_1000)
        .await
        .expect("tomorrow is a new period");
    let day_one = Timestamp::from_unix_millis(1_767_225_600_000).expect("2026-01-01");
    let between = l
        .store
        .model_calls(
            &l.scope,
            CallFilter::Between(day_one, day_one.plus(Duration::from_secs(24 * 3600))),
        )
        .await
        .expect("between");
    assert_eq!(between.len(), 1, "one call on the first day");
}

/// Another tenant neither sees, settles nor reserves against this tenant's calls and runs.
pub async fn calls_are_confined_to_their_tenant<F: StoreFactory>() {
    let l = ledger::<F>().await;
    let call = l.call(tokens(1, 1), 0);
    l.reserve(&call, DAILY_1000).await.expect("reserve");
    let other = scope("tenant-b");
    assert!(
        l.store
            .model_calls(&other, CallFilter::Run(l.run))
            .await
            .expect("other's view")
            .is_empty()
    );
    let settled = l
        .store
        .settle(
            &other,
            Settlement {
                id: call.id,
                actual: None,
                cost_micros: 0,
                request_id: None,
            },
        )
        .await;
    assert_eq!(
        settled.map(|_| ()).map_err(|e| e.kind()),
        Err(ErrorKind::NotFound)
    );
    let mut foreign = l.call(tokens(1, 1), 0);
    foreign.tenant_id = other.tenant_id().clone();
    let reserved = l.store.reserve(&other, foreign, None).await;
    assert_eq!(
        reserved.map_err(|e| e.kind()),
        Err(ErrorKind::NotFound),
        "another tenant's run is not found"
    );
}

/// A step's commit records its settled call: replacing the reservation when one was made, or
/// inserting it; a call already settled is refused and the commit writes nothing.
pub async fn step_commits_record_settled_calls<F: StoreFactory>() {
    use forge_core::event::{RunEvent, RunEventKind};
    use forge_core::ports::store::StepCommit;
    use forge_core::run::{Checkpoint, RunStatus};

    let l = ledger::<F>().await;
    let reserved = l.call(tokens(500, 500), 10);
    l.reserve(&reserved, DAILY_1000).await.expect("reserve");
    let unreserved = l.call(tokens(1, 1), 1);
    let settle = |mut c: ModelCall, actual: Usage| {
        c.status = CallStatus::Settled;
        c.actual = Some(actual);
        c.cost_micros = Some(2);
        c
    };
    let lease = l
        .store
        .acquire_lease(&l.scope, l.run, "w", Duration::from_secs(30))
        .await
        .expect("lease");
    let commit = |version: u64, seq: u64, calls: Vec<ModelCall>| StepCommit {
        run_id: l.run,
        expected_version: version,
        lease: lease.clone(),
        events: vec![RunEvent {
            run_id: l.run,
            seq,
            at: l.clock.now(),
            kind: RunEventKind::StepStarted { step: seq as u32 },
        }],
        messages: vec![],
        checkpoint: Checkpoint::default(),
        status: RunStatus::Running,
        failure: None,
        interactions: vec![],
        audit: vec![],
        settlements: calls,
        state: None,
        summary: None,
        job: None,
    };
    let done = l
        .store
        .commit_step(
            &l.scope,
            commit(
                0,
                1,
                vec![
                    settle(reserved.clone(), tokens(10, 10)),
                    settle(unreserved.clone(), tokens(1, 1)),
                ],
            ),
        )
        .await
        .expect("commit with settlements");
    let calls = l.calls().await;
    assert_eq!(calls.len(), 2);
    assert!(
        calls.iter().all(|c| c.status == CallStatus::Settled),
        "{calls:?}"
    );
    l.reserve(&l.call(tokens(400, 500), 0), DAILY_1000)
        .await
        .expect("the settled 20 tokens replaced the reserved 1,000");
    let again = l
        .store
        .commit_step(
            &l.scope,
            commit(done.version, 2, vec![settle(reserved, tokens(99, 99))]),
        )
        .await;
    assert_eq!(
        again.map(|_| ()).map_err(|e| e.kind()),
        Err(ErrorKind::Invalid)
    );
    assert_eq!(
        l.store
            .read_events(&l.scope, l.run, 0, 10)
            .await
            .expect("events")
            .len(),
        1,
        "the refused commit wrote nothing"
    );
}
