//! Test support shared by every adapter: the conformance suites (one per port, run per adapter by
//! [`store_conformance!`]), and fixtures built from the real types.
//!
//! An adapter proves it is interchangeable by invoking the suite once in its own test binary:
//!
//! ```text
//! struct Memory;
//! impl forge_testkit::StoreFactory for Memory { /* ... */ }
//! forge_testkit::store_conformance!(Memory); // or one suite: forge_testkit::runs_conformance!(Memory);
//! ```
//!
//! Each suite macro (one per port, listed in [`SUITES`]) expands one `#[tokio::test]` per scenario
//! and a `suite_is_complete` test that fails when the macro and [`SUITES`] disagree; the registry
//! test here fails when a `forge-store-*` crate does not run every suite [`ADAPTERS`] lists for it.
//!
//! For model providers: [`wire::WireServer`] replays provider transcripts over real HTTP and
//! records what the adapter sent; [`mock_model::MockModelServer`] is the deterministic
//! OpenAI-compatible server of the benchmark workload (also the `forge-mock-model` binary).

#![deny(missing_docs)]

pub mod clamd;
pub mod embedding;
pub mod erasure;
pub mod evals;
pub mod files;
pub mod fixtures;
pub mod graphql;
pub mod history;
pub mod interactions;
pub mod keys;
pub mod leases;
pub mod locks;
pub mod mcp_servers;
pub mod mock_model;
pub mod models;
pub mod otlp;
mod python;
pub mod queue;
mod registry;
pub mod s3;
pub mod sources;
pub mod state;
pub mod store;
pub mod streams;
pub mod upgrade;
pub mod usage;
pub mod wire;

use std::future::Future;
use std::sync::Arc;

use forge_core::ports::queue::JobQueue;
use forge_core::ports::store::{RunStore, ThreadStore};
use forge_core::time::ManualClock;

/// Makes a fresh, empty store for one conformance scenario.
pub trait StoreFactory: Send + Sync + 'static {
    /// The adapter under test.
    type Store: ThreadStore
        + RunStore
        + JobQueue
        + forge_core::ports::audit::AuditLog
        + forge_core::ports::interaction::InteractionStore
        + forge_core::ports::usage::UsageLedger
        + forge_core::ports::erasure::DataErasure
        + forge_core::ports::keys::RequestKeys
        + forge_rag::SourceStore
        + forge_files::FileStore
        + forge_eval::EvalStore
        + 'static;

    /// Whether the adapter reads what a run begins with in the same trip as its lease
    /// ([`forge_core::ports::store::LeasedRun::history`] is then always read when asked for); the
    /// `history` suite then requires it.
    const READS_HISTORY_WITH_LEASE: bool = false;

    /// A new store with no data, reading time from `clock`.
    fn make(clock: Arc<ManualClock>) -> impl Future<Output = Arc<Self::Store>> + Send;
}

/// Makes a fresh, empty lease store for one scenario of the `locks` suite.
pub trait LeaseFactory: Send + Sync + 'static {
    /// The adapter under test.
    type Locks: forge_core::ports::lease::LeaseStore + 'static;

    /// A new lease store with no leases, reading time from `clock`.
    fn make(clock: Arc<ManualClock>) -> impl Future<Output = Arc<Self::Locks>> + Send;
}

pub use registry::{ADAPTERS, SUITES, Suite, scenarios};

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_suite {
    ($module:ident, $suite:literal, $factory:ty; $($name:ident),+ $(,)?) => {
        $crate::__conformance_suite!($module, $suite, store, $factory; $($name),+);
    };
    ($module:ident, $suite:literal, $scenarios:ident, $factory:ty; $($name:ident),+ $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::$scenarios::$name::<$factory>().await;
                }
            )+

            #[test]
            fn suite_is_complete() {
                let expanded: Vec<&str> = vec![$(stringify!($name)),+];
                assert_eq!(expanded, $crate::scenarios($suite), "the {} macro and SUITES disagree", $suite);
            }
        }
    };
}

/// Threads and session state.
#[macro_export]
macro_rules! threads_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(threads_conformance, "threads", $factory;
            thread_round_trip_and_session_state, session_state_single_writer);
        $crate::__conformance_suite!(step_state_conformance, "step_state", state, $factory;
            a_step_commits_session_state_with_it_or_not_at_all);
        $crate::__conformance_suite!(history_conformance, "history", history, $factory;
            message_pages_are_stable_under_concurrent_appends,
            a_step_commits_its_summary_once_building_on_the_current_one,
            runs_and_pending_interactions_page_by_cursor,
            threads_page_newest_first_and_archive,
            a_lease_reads_the_history_its_run_begins_with);
    };
}

/// Runs, history and the atomic, fenced `commit_step`.
#[macro_export]
macro_rules! runs_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(runs_conformance, "runs", $factory;
            run_round_trip_and_history, commit_step_single_writer, commit_step_fencing,
            refused_commit_writes_nothing, illegal_status_change_is_refused,
            runs_are_queried_by_status_and_thread_newest_first,
            runs_are_filtered_by_agent_time_and_failure,
            runs_and_jobs_without_input_or_attempts_are_refused);
    };
}

/// The event log: gapless sequences, reads after a sequence.
#[macro_export]
macro_rules! event_log_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(event_log_conformance, "event_log", $factory;
            event_log_gapless_under_concurrent_appenders, read_events_after_sequence);
    };
}

/// Run leases.
#[macro_export]
macro_rules! lease_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(lease_conformance, "leases", leases, $factory;
            lease_is_exclusive_until_expiry, lease_run_reads_the_run_under_its_lease,
            a_commit_that_ends_the_run_releases_its_lease,
            a_run_created_leased_is_created_and_held_at_once,
            a_run_on_a_new_thread_is_created_with_its_thread);
    };
}

/// The job queue.
#[macro_export]
macro_rules! queue_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(queue_conformance, "queue", queue, $factory;
            queue_claim_heartbeat_complete, queue_lapsed_claim_is_fenced_and_dead_letters,
            queue_release_keeps_the_attempt, queue_concurrent_claims_take_each_job_once,
            dead_letters_are_replayed_or_discarded_and_audited,
            audit_records_are_appended_and_filtered_per_tenant,
            claims_take_only_jobs_the_filter_admits,
            claims_return_the_trace_they_were_enqueued_under,
            a_step_that_ends_or_parks_its_run_completes_its_claim,
            claims_take_the_runs_lease_when_it_is_free,
            claims_in_a_batch_are_the_claims_made_one_at_a_time);
    };
}

/// Thread ordering: admission strategies, promotion, cancel requests.
#[macro_export]
macro_rules! ordering_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(ordering_conformance, "ordering", $factory;
            thread_admission_and_promotion, interrupt_requests_cancellation,
            request_cancel_flags_live_runs_only);
    };
}

/// Named leases (`LeaseStore`), with a [`LeaseFactory`].
#[macro_export]
macro_rules! lock_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(lock_conformance, "locks", locks, $factory;
            lock_is_exclusive_until_expiry, renew_and_release_are_token_checked,
            concurrent_acquire_has_one_winner);
    };
}

/// Cross-tenant isolation through every port method.
#[macro_export]
macro_rules! isolation_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(isolation_conformance, "isolation", $factory; tenant_isolation);
    };
}

/// Approvals and questions: created by parking commits, resolved once, bound, expiring, audited.
#[macro_export]
macro_rules! interactions_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(interactions_conformance, "interactions", interactions, $factory;
            interactions_resolve_once_and_resume, interactions_are_bound_to_their_call,
            expired_interactions_refuse_and_free_the_run, concurrent_resolutions_have_one_winner,
            only_a_parking_commit_raises_interactions, a_cancel_request_wakes_a_waiting_run,
            an_ended_run_leaves_nothing_pending, a_wake_before_the_parking_job_completes_is_not_lost);
    };
}

/// The usage ledger: atomic quota reservations, settlements, periods, tenants.
#[macro_export]
macro_rules! usage_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(usage_conformance, "usage", usage, $factory;
            parallel_reservations_never_overshoot_a_quota, settlements_replace_estimates,
            quota_periods_roll_over, calls_are_confined_to_their_tenant,
            step_commits_record_settled_calls,
            reservations_are_replaced_on_reexecution_and_orphans_released);
    };
}

/// Erasure of threads and runs: everything removed, usage kept unlinked, audited, refused while
/// a run is live, confined to the tenant.
#[macro_export]
macro_rules! erasure_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(erasure_conformance, "erasure", erasure, $factory;
            erasing_a_thread_removes_its_runs_and_keeps_usage_totals,
            erasing_a_run_leaves_the_rest_of_its_thread,
            a_run_that_has_not_ended_cannot_be_erased, erasure_is_confined_to_its_tenant);
    };
}

/// Request keys: the first claim holds; a run's id is created once; erasure removes them.
#[macro_export]
macro_rules! keys_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(keys_conformance, "keys", keys, $factory;
            request_keys_hold_their_first_claim, a_run_id_is_created_once,
            erasure_removes_request_keys);
    };
}

/// File records: round trip, tenant confinement, audited deletion.
#[macro_export]
macro_rules! files_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(files_conformance, "files", files, $factory;
            file_records_round_trip_newest_first, file_records_are_confined_to_their_tenant,
            deleting_a_file_record_is_audited);
    };
}

/// Scoring runs: upserted cases, totals derived from the rows, stable `latest`, tenant
/// confinement, the judge's verdict cache.
#[macro_export]
macro_rules! evals_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(evals_conformance, "evals", evals, $factory;
            completion_derives_what_the_rule_derives,
            a_rescored_case_replaces_its_verdict_and_completion_recomputes,
            latest_is_the_newest_completed_run_with_stable_ties,
            scoring_runs_are_confined_to_their_tenant,
            judge_verdicts_are_cached_by_their_exact_key);
    };
}

/// Retrieval sources: versions, allowed candidates, isolation, deletion, authorized ranking,
/// vectors and fused search.
#[macro_export]
macro_rules! sources_conformance {
    ($factory:ty) => {
        $crate::__conformance_suite!(sources_conformance, "sources", sources, $factory;
            sources_round_trip_and_versions, candidates_come_only_from_allowed_sources,
            sources_are_confined_to_their_tenant,
            deleting_a_source_removes_everything_and_is_audited,
            deleting_a_source_removes_the_copies_runs_made,
            retrieval_is_authorized_before_ranking, retention_expires_old_sources_only,
            vectors_follow_their_source_version, nearest_ranks_allowed_chunks_by_similarity,
            fused_retrieval_is_authorized_before_ranking);
    };
}

/// Every suite, for an adapter that implements every port.
#[macro_export]
macro_rules! store_conformance {
    ($factory:ty) => {
        $crate::threads_conformance!($factory);
        $crate::runs_conformance!($factory);
        $crate::event_log_conformance!($factory);
        $crate::lease_conformance!($factory);
        $crate::queue_conformance!($factory);
        $crate::ordering_conformance!($factory);
        $crate::isolation_conformance!($factory);
        $crate::interactions_conformance!($factory);
        $crate::usage_conformance!($factory);
        $crate::erasure_conformance!($factory);
        $crate::keys_conformance!($factory);
        $crate::files_conformance!($factory);
        $crate::evals_conformance!($factory);
        $crate::sources_conformance!($factory);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `forge-store-*` crate is registered, and runs each registered suite with its factory.
    #[test]
    fn every_adapter_runs_every_registered_suite() {
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut problems = Vec::new();
        for entry in std::fs::read_dir(&crates).expect("read crates/").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("forge-store-") && !ADAPTERS.iter().any(|(c, _, _)| *c == name) {
                problems.push(format!(
                    "{name} is not registered in forge_testkit::ADAPTERS"
                ));
            }
        }
        for (krate, factory, suites) in ADAPTERS {
            let tests = read_tree(&crates.join(krate).join("tests"));
            let all = tests.contains(&format!("store_conformance!({factory})"));
            for suite in *suites {
                let Some(s) = SUITES.iter().find(|s| s.name == *suite) else {
                    problems.push(format!("{krate}: unknown suite {suite}"));
                    continue;
                };
                if !all && !tests.contains(&format!("{}!({factory})", s.macro_name)) {
                    problems.push(format!(
                        "{krate} does not run the {suite} suite with {factory}"
                    ));
                }
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn every_suite_is_registered_for_some_adapter() {
        for s in SUITES {
            assert!(
                ADAPTERS
                    .iter()
                    .any(|(_, _, suites)| suites.contains(&s.name)),
                "{} runs nowhere",
                s.name
            );
        }
    }

    fn read_tree(dir: &std::path::Path) -> String {
        let mut out = String::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return out;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.push_str(&read_tree(&p));
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
        out
    }
}
