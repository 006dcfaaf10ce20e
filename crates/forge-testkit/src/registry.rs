//! The registry of conformance suites ([`SUITES`]: each port's scenarios and the macro that
//! expands them) and of the adapters that run them ([`ADAPTERS`]), which this crate's tests hold
//! the suite macros and the store crates' tests to.

/// One conformance suite: a port's scenarios and the macro that expands them.
#[derive(Debug, Clone, Copy)]
pub struct Suite {
    /// The suite's name.
    pub name: &'static str,
    /// The macro an adapter invokes to run it.
    pub macro_name: &'static str,
    /// Its scenarios, in the order the macro expands them.
    pub scenarios: &'static [&'static str],
}

/// Every suite.
pub const SUITES: &[Suite] = &[
    Suite {
        name: "threads",
        macro_name: "threads_conformance",
        scenarios: &[
            "thread_round_trip_and_session_state",
            "session_state_single_writer",
        ],
    },
    Suite {
        name: "step_state",
        macro_name: "threads_conformance",
        scenarios: &["a_step_commits_session_state_with_it_or_not_at_all"],
    },
    Suite {
        name: "history",
        macro_name: "threads_conformance",
        scenarios: &[
            "message_pages_are_stable_under_concurrent_appends",
            "a_step_commits_its_summary_once_building_on_the_current_one",
            "runs_and_pending_interactions_page_by_cursor",
            "threads_page_newest_first_and_archive",
            "a_lease_reads_the_history_its_run_begins_with",
        ],
    },
    Suite {
        name: "runs",
        macro_name: "runs_conformance",
        scenarios: &[
            "run_round_trip_and_history",
            "commit_step_single_writer",
            "commit_step_fencing",
            "refused_commit_writes_nothing",
            "illegal_status_change_is_refused",
            "runs_are_queried_by_status_and_thread_newest_first",
            "runs_are_filtered_by_agent_time_and_failure",
            "runs_and_jobs_without_input_or_attempts_are_refused",
        ],
    },
    Suite {
        name: "event_log",
        macro_name: "event_log_conformance",
        scenarios: &[
            "event_log_gapless_under_concurrent_appenders",
            "read_events_after_sequence",
        ],
    },
    Suite {
        name: "leases",
        macro_name: "lease_conformance",
        scenarios: &[
            "lease_is_exclusive_until_expiry",
            "lease_run_reads_the_run_under_its_lease",
            "a_commit_that_ends_the_run_releases_its_lease",
            "a_run_created_leased_is_created_and_held_at_once",
            "a_run_on_a_new_thread_is_created_with_its_thread",
        ],
    },
    Suite {
        name: "queue",
        macro_name: "queue_conformance",
        scenarios: &[
            "queue_claim_heartbeat_complete",
            "queue_lapsed_claim_is_fenced_and_dead_letters",
            "queue_release_keeps_the_attempt",
            "queue_concurrent_claims_take_each_job_once",
            "dead_letters_are_replayed_or_discarded_and_audited",
            "audit_records_are_appended_and_filtered_per_tenant",
            "claims_take_only_jobs_the_filter_admits",
            "claims_return_the_trace_they_were_enqueued_under",
            "a_step_that_ends_or_parks_its_run_completes_its_claim",
            "claims_take_the_runs_lease_when_it_is_free",
            "claims_in_a_batch_are_the_claims_made_one_at_a_time",
        ],
    },
    Suite {
        name: "ordering",
        macro_name: "ordering_conformance",
        scenarios: &[
            "thread_admission_and_promotion",
            "interrupt_requests_cancellation",
            "request_cancel_flags_live_runs_only",
        ],
    },
    Suite {
        name: "locks",
        macro_name: "lock_conformance",
        scenarios: &[
            "lock_is_exclusive_until_expiry",
            "renew_and_release_are_token_checked",
            "concurrent_acquire_has_one_winner",
        ],
    },
    Suite {
        name: "isolation",
        macro_name: "isolation_conformance",
        scenarios: &["tenant_isolation"],
    },
    Suite {
        name: "interactions",
        macro_name: "interactions_conformance",
        scenarios: &[
            "interactions_resolve_once_and_resume",
            "interactions_are_bound_to_their_call",
            "expired_interactions_refuse_and_free_the_run",
            "concurrent_resolutions_have_one_winner",
            "only_a_parking_commit_raises_interactions",
            "a_cancel_request_wakes_a_waiting_run",
            "an_ended_run_leaves_nothing_pending",
            "a_wake_before_the_parking_job_completes_is_not_lost",
        ],
    },
    Suite {
        name: "usage",
        macro_name: "usage_conformance",
        scenarios: &[
            "parallel_reservations_never_overshoot_a_quota",
            "settlements_replace_estimates",
            "quota_periods_roll_over",
            "calls_are_confined_to_their_tenant",
            "step_commits_record_settled_calls",
            "reservations_are_replaced_on_reexecution_and_orphans_released",
        ],
    },
    Suite {
        name: "erasure",
        macro_name: "erasure_conformance",
        scenarios: &[
            "erasing_a_thread_removes_its_runs_and_keeps_usage_totals",
            "erasing_a_run_leaves_the_rest_of_its_thread",
            "a_run_that_has_not_ended_cannot_be_erased",
            "erasure_is_confined_to_its_tenant",
        ],
    },
    Suite {
        name: "keys",
        macro_name: "keys_conformance",
        scenarios: &[
            "request_keys_hold_their_first_claim",
            "a_run_id_is_created_once",
            "erasure_removes_request_keys",
        ],
    },
    Suite {
        name: "files",
        macro_name: "files_conformance",
        scenarios: &[
            "file_records_round_trip_newest_first",
            "file_records_are_confined_to_their_tenant",
            "deleting_a_file_record_is_audited",
        ],
    },
    Suite {
        name: "evals",
        macro_name: "evals_conformance",
        scenarios: &[
            "completion_derives_what_the_rule_derives",
            "a_rescored_case_replaces_its_verdict_and_completion_recomputes",
            "latest_is_the_newest_completed_run_with_stable_ties",
            "scoring_runs_are_confined_to_their_tenant",
            "judge_verdicts_are_cached_by_their_exact_key",
        ],
    },
    Suite {
        name: "sources",
        macro_name: "sources_conformance",
        scenarios: &[
            "sources_round_trip_and_versions",
            "candidates_come_only_from_allowed_sources",
            "sources_are_confined_to_their_tenant",
            "deleting_a_source_removes_everything_and_is_audited",
            "deleting_a_source_removes_the_copies_runs_made",
            "retrieval_is_authorized_before_ranking",
            "retention_expires_old_sources_only",
            "vectors_follow_their_source_version",
            "nearest_ranks_allowed_chunks_by_similarity",
            "fused_retrieval_is_authorized_before_ranking",
        ],
    },
];

/// Which adapter runs which suites: `(crate, factory type, suites)`. The registry test in this crate
/// fails when an adapter crate's tests do not invoke every listed suite with that factory, or when
/// a `forge-store-*` crate is missing from this list.
pub const ADAPTERS: &[(&str, &str, &[&str])] = &[
    ("forge-store-redis", "Redis", &["locks"]),
    (
        "forge-store-memory",
        "Memory",
        &[
            "locks",
            "threads",
            "step_state",
            "history",
            "runs",
            "event_log",
            "leases",
            "queue",
            "ordering",
            "isolation",
            "interactions",
            "usage",
            "erasure",
            "keys",
            "files",
            "evals",
            "sources",
        ],
    ),
    (
        "forge-store-sqlite",
        "Sqlite",
        &[
            "threads",
            "step_state",
            "history",
            "runs",
            "event_log",
            "leases",
            "queue",
            "ordering",
            "isolation",
            "interactions",
            "usage",
            "erasure",
            "keys",
            "files",
            "evals",
            "sources",
        ],
    ),
    (
        "forge-store-postgres",
        "Postgres",
        &[
            "locks",
            "threads",
            "step_state",
            "history",
            "runs",
            "event_log",
            "leases",
            "queue",
            "ordering",
            "isolation",
            "interactions",
            "usage",
            "erasure",
            "keys",
            "files",
            "evals",
            "sources",
        ],
    ),
    ("forge-store-postgres", "Pgvector", &["sources"]),
    (
        "forge-store-postgres",
        "Supabase",
        &[
            "threads",
            "step_state",
            "history",
            "runs",
            "event_log",
            "leases",
            "queue",
            "ordering",
            "isolation",
            "interactions",
            "usage",
            "erasure",
            "keys",
            "files",
            "evals",
            "sources",
        ],
    ),
];

/// The scenarios of the named suite (empty for an unknown name).
pub fn scenarios(suite: &str) -> Vec<&'static str> {
    SUITES
        .iter()
        .find(|s| s.name == suite)
        .map(|s| s.scenarios.to_vec())
        .unwrap_or_default()
}
