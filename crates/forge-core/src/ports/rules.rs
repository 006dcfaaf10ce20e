//! The rules every store adapter applies, written once and called by each (memory, SQLite,
//! PostgreSQL) so they cannot drift: the checks inside `commit_step`, a new run's admission to
//! its thread, the run lease's arithmetic, and what a commit does to the lease and the job. The
//! conformance suites in `forge-testkit` hold every adapter to them.

use std::time::Duration;

use crate::Error;
use crate::id::{RunId, ThreadId};
use crate::ports::store::{Admission, Committed, StartStrategy, StepCommit};
use crate::run::{Run, RunLease, RunStatus};
use crate::thread::ThreadSummary;

/// Whether a commit leaving the run at `status` gives its lease up ([`StepCommit::releases_lease`]).
pub fn releases_lease(status: RunStatus) -> bool {
    status.is_terminal()
}

/// Whether a commit leaving the run at `status` completes the job it is executed under
/// ([`StepCommit::job`]): a run that ends needs no job, and a parked run holds none (resolving
/// its interaction enqueues a new one).
pub fn completes_job(status: RunStatus) -> bool {
    status.is_terminal() || matches!(status, RunStatus::Waiting(_))
}
/// The checks every adapter applies inside `commit_step`, against the run as its transaction sees
/// it: the lease is current and unexpired, the version matches, the events continue the log, the
/// status change is legal and the messages belong to the run. Returns what the commit yields.
pub fn check_commit(
    run: &Run,
    commit: &StepCommit,
    now: crate::time::Timestamp,
) -> Result<Committed, Error> {
    match &run.lease {
        Some(l) if l.token == commit.lease.token && l.expires_at > now => {}
        _ => {
            return Err(Error::Fenced {
                resource: format!("run {}", run.id),
            });
        }
    }
    if run.version != commit.expected_version {
        return Err(Error::VersionConflict {
            entity: "run",
            id: run.id.to_string(),
            expected: commit.expected_version,
            actual: run.version,
        });
    }
    crate::event::check_contiguous(run.id, run.last_seq, &commit.events)?;
    if !crate::run::reachable(run.status, commit.status) {
        return Err(Error::invalid(format!(
            "a {} run cannot become {}",
            run.status.name(),
            commit.status.name()
        )));
    }
    check_own(commit, run.id, &run.tenant_id)?;
    Ok(Committed {
        version: run.version + 1,
        last_seq: run.last_seq + commit.events.len() as u64,
        cancel_requested: run.cancel_requested,
        job_completed: false,
    })
}

/// What `check_commit` checks after the status change, which needs only the run's id and tenant:
/// the interactions and messages are the run's own, and interactions park it.
fn check_own(
    commit: &StepCommit,
    run: RunId,
    tenant: &crate::scope::TenantId,
) -> Result<(), Error> {
    if commit
        .interactions
        .iter()
        .any(|i| i.run_id != run || &i.tenant_id != tenant)
    {
        return Err(Error::invalid(
            "a step may only raise interactions of its own run",
        ));
    }
    if !commit.interactions.is_empty() && !matches!(commit.status, RunStatus::Waiting(_)) {
        return Err(Error::invalid(
            "a step that raises interactions parks its run",
        ));
    }
    if commit.messages.iter().any(|m| m.run_id != run) {
        return Err(Error::invalid(
            "a step may only commit messages of its own run",
        ));
    }
    Ok(())
}

/// The checks of [`check_commit`] that need no run row, made on `commit` alone for its run of
/// `tenant`: its events follow each other from the first and are the run's, and its interactions
/// and messages are the run's own. For an adapter whose database decides the rest in the
/// statement that writes the step: where the row's log ends right before the first event, this
/// holds exactly when the same checks of `check_commit` hold.
pub fn check_commit_alone(
    commit: &StepCommit,
    tenant: &crate::scope::TenantId,
) -> Result<(), Error> {
    if let Some(first) = commit.events.first() {
        crate::event::check_contiguous(commit.run_id, first.seq.saturating_sub(1), &commit.events)?;
    }
    check_own(commit, commit.run_id, tenant)
}

/// The statuses a run may be in for a step to leave it `to` (what `check_commit` allows), as
/// [`RunStatus::key`]s.
pub fn statuses_reaching(to: RunStatus) -> impl Iterator<Item = String> {
    RunStatus::ALL
        .into_iter()
        .filter(move |from| crate::run::reachable(*from, to))
        .map(|from| from.key())
}

/// The error every adapter gives for a step that settles call `call` when it is not an open call
/// of the committing run (another run's or tenant's, or settled already).
pub fn not_an_open_call(call: crate::id::ModelCallId) -> Error {
    Error::invalid(format!("model call {call} is not an open call of this run"))
}

/// The first of `commit`'s settled calls that is not of the committing run `run` of `tenant`:
/// checked before anything is written.
pub fn foreign_settlement<'c>(
    commit: &'c StepCommit,
    tenant: &crate::scope::TenantId,
) -> Option<&'c crate::metering::ModelCall> {
    commit
        .settlements
        .iter()
        .find(|c| c.run_id != commit.run_id || &c.tenant_id != tenant)
}

/// The check every adapter applies to a new run before anything is written: it has an input
/// message with at least one part, and at least one attempt.
pub fn check_new_run(new: &crate::ports::store::NewRun) -> Result<(), Error> {
    if new.input.is_empty() {
        return Err(Error::invalid(
            "a run needs an input message with at least one part",
        ));
    }
    check_attempts(new.max_attempts)
}

/// The check every adapter applies to a job's `max_attempts` (a new job's or a new run's): at
/// least one.
pub fn check_attempts(max_attempts: u32) -> Result<(), Error> {
    if max_attempts == 0 {
        return Err(Error::invalid("max_attempts must be at least 1"));
    }
    Ok(())
}

/// The check every adapter applies to a model call it reserves: the call is of `scope`'s tenant.
pub fn check_reservation(
    scope: &crate::scope::Scope,
    call: &crate::metering::ModelCall,
) -> Result<(), Error> {
    if &call.tenant_id != scope.tenant_id() {
        return Err(Error::invalid("a call is reserved in its own tenant"));
    }
    Ok(())
}

/// The check every adapter applies to a step's summary before the version rule: it is the
/// committing run's own.
pub fn check_summary(run: &Run, summary: &ThreadSummary) -> Result<(), Error> {
    if summary.run_id != run.id {
        return Err(Error::invalid(
            "a step may only commit its own run's summary",
        ));
    }
    Ok(())
}
/// Decides how a new run enters a thread whose active run is `active`. `Reject` on a busy thread
/// is `ThreadBusy`; `Interrupt` queues like `Enqueue` (the adapter also requests cancellation of
/// the runs ahead).
pub fn admit(
    thread: ThreadId,
    active: Option<RunId>,
    strategy: StartStrategy,
) -> Result<Admission, Error> {
    match (active, strategy) {
        (None, _) => Ok(Admission::Active),
        (Some(active), StartStrategy::Reject) => Err(Error::ThreadBusy {
            thread: thread.to_string(),
            active: active.to_string(),
        }),
        (Some(behind), StartStrategy::Enqueue | StartStrategy::Interrupt) => {
            Ok(Admission::Queued { behind })
        }
    }
}
/// The lease `holder` gets on `run` for `ttl`, or `LeaseHeld` while another holder's is unexpired.
pub fn next_lease(
    run: &Run,
    holder: &str,
    ttl: Duration,
    now: crate::time::Timestamp,
) -> Result<RunLease, Error> {
    if let Some(l) = &run.lease
        && l.holder != holder
        && l.expires_at > now
    {
        return Err(Error::LeaseHeld {
            resource: format!("run {}", run.id),
            until: l.expires_at,
        });
    }
    Ok(RunLease {
        run_id: run.id,
        holder: holder.to_owned(),
        token: run.fence + 1,
        expires_at: now.plus(ttl),
    })
}

/// The renewed lease, or `Fenced` when `lease` is no longer the run's current, unexpired lease.
pub fn renewed_lease(
    run: &Run,
    lease: &RunLease,
    ttl: Duration,
    now: crate::time::Timestamp,
) -> Result<RunLease, Error> {
    match &run.lease {
        Some(l) if l.token == lease.token && l.expires_at > now => Ok(RunLease {
            expires_at: now.plus(ttl),
            ..lease.clone()
        }),
        _ => Err(Error::Fenced {
            resource: format!("run {}", run.id),
        }),
    }
}
