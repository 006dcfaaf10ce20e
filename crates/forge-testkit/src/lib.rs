//! Test support shared by every adapter: the conformance suites (one per port, run per adapter by
//! [`store_conformance!`]), and fixtures built from the real types.
//!
//! An adapter proves it is interchangeable by invoking the suite once in its own test binary:
//!
//! ```ignore
//! struct Memory;
//! impl forge_testkit::StoreFactory for Memory { /* ... */ }
//! forge_testkit::store_conformance!(Memory);
//! ```
//!
//! The macro expands one `#[tokio::test]` per scenario and a `suite_is_complete` test that fails
//! when the macro and [`store::SCENARIOS`] disagree; `cargo xtask tidy` fails when a
//! `forge-store-*` crate does not invoke the suite at all.

#![deny(missing_docs)]

pub mod fixtures;
pub mod store;

use std::future::Future;
use std::sync::Arc;

use forge_core::ports::queue::JobQueue;
use forge_core::ports::store::{RunStore, ThreadStore};
use forge_core::time::ManualClock;

/// Makes a fresh, empty store for one conformance scenario.
pub trait StoreFactory: Send + Sync + 'static {
    /// The adapter under test.
    type Store: ThreadStore + RunStore + JobQueue + 'static;

    /// A new store with no data, reading time from `clock`.
    fn make(clock: Arc<ManualClock>) -> impl Future<Output = Arc<Self::Store>> + Send;
}

/// Expands the store conformance suite for a [`StoreFactory`].
#[macro_export]
macro_rules! store_conformance {
    ($factory:ty) => {
        $crate::store_conformance!(@tests $factory;
            thread_round_trip_and_session_state,
            tenant_isolation,
            commit_step_single_writer,
            commit_step_fencing,
            refused_commit_writes_nothing,
            illegal_status_change_is_refused,
            lease_is_exclusive_until_expiry,
            event_log_gapless_under_concurrent_appenders,
            read_events_after_sequence,
            queue_claim_heartbeat_complete,
            queue_lapsed_claim_is_fenced_and_dead_letters,
        );
    };
    (@tests $factory:ty; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::store::$name::<$factory>().await;
            }
        )+

        #[test]
        fn suite_is_complete() {
            let expanded: Vec<&str> = vec![$(stringify!($name)),+];
            assert_eq!(expanded, $crate::store::SCENARIOS, "the conformance macro and SCENARIOS disagree");
        }
    };
}
