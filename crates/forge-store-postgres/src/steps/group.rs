//! A group's statement: its steps split into calls of `forge_write_steps` (migration 31), one per
//! tenant (the row-level-security setting is read per statement) and never two steps of one run in
//! a call, each call's steps, events, messages and settled calls as arrays tagged with their
//! step's place in the group.

use std::sync::OnceLock;

use super::{MAX_GROUP, Query, StepArgs};
use crate::rows::Encoded;

/// Parameters of one call in the group's statement: `forge_write_steps`' 33, then the jobs and
/// tokens of the claims its steps complete.
const PER_CALL: usize = 35;

/// The calls that write `group` (sorted by tenant, then run, so that a tenant's steps and a
/// run's steps stand together): a step of another tenant, and a run's second step in a group, go
/// to the next call. Each call holds the places of its steps, in order.
pub(super) fn calls(group: &[&StepArgs]) -> Vec<Vec<usize>> {
    let mut calls: Vec<Vec<usize>> = Vec::new();
    for (place, step) in group.iter().enumerate() {
        let joins = calls
            .last()
            .and_then(|call| call.last())
            .is_some_and(|&last| group[last].tenant == step.tenant && group[last].run != step.run);
        match calls.last_mut() {
            Some(call) if joins => call.push(place),
            _ => calls.push(vec![place]),
        }
    }
    calls
}

/// The statement of `n` calls (1 ≤ `n` ≤ [`MAX_GROUP`]; empty otherwise), joined by `UNION ALL`:
/// each call's rows name their step's place (`group_place`), and a step that was written and ends
/// or parks its run under a claim completes it through `forge_sys_complete`, as alone.
pub(super) fn statement(n: usize) -> &'static str {
    static STATEMENTS: OnceLock<Vec<String>> = OnceLock::new();
    let all = STATEMENTS.get_or_init(|| {
        (0..=MAX_GROUP)
            .map(|n| match n {
                0 => String::new(),
                n => (0..n)
                    .map(call_text)
                    .collect::<Vec<_>>()
                    .join(" UNION ALL "),
            })
            .collect()
    });
    all.get(n).map_or("", String::as_str)
}

/// The text of the call at `index` in the statement.
fn call_text(index: usize) -> String {
    let p = |k: usize| format!("${}", index * PER_CALL + k);
    let args: Vec<String> = (1..=33).map(p).collect();
    format!(
        "SELECT s.o_place AS group_place, s.o_version AS written_version, \
         s.o_last_seq AS written_last_seq, s.o_cancel AS written_cancel, (s.o_run).*, \
         s.o_closed AS closed, CASE WHEN s.o_version IS NOT NULL AND j.job IS NOT NULL \
         THEN forge_sys_complete(j.job, j.token, j.now) ELSE false END AS job_completed \
         FROM forge_write_steps({args}) AS s JOIN unnest({places}::int[], {jobs}::uuid[], \
         {tokens}::bigint[], {nows}::timestamptz[]) AS j(place, job, token, now) \
         ON j.place = s.o_place",
        args = args.join(", "),
        places = p(2),
        nows = p(9),
        jobs = p(34),
        tokens = p(35),
    )
}

/// A timestamp column.
type Times = Vec<chrono::DateTime<chrono::Utc>>;

/// One call's arguments, as the arrays `forge_write_steps` takes, borrowed from its steps; the
/// rows of events, messages and calls each tagged with their step's place.
#[derive(Default)]
pub(super) struct Call<'a> {
    tenant: &'a str,
    places: Vec<i32>,
    versions: Vec<i64>,
    counts: Vec<i64>,
    statuses: Vec<&'static str>,
    waiting: Vec<Option<&'static str>>,
    checkpoints: Vec<&'a Encoded>,
    failures: Vec<Option<&'a Encoded>>,
    nows: Times,
    runs: Vec<uuid::Uuid>,
    releases: Vec<bool>,
    ends: Vec<bool>,
    notifies: Vec<bool>,
    tokens: Vec<i64>,
    firsts: Vec<Option<i64>>,
    froms: Vec<String>,
    alones: Vec<bool>,
    event_places: Vec<i32>,
    event_seqs: Vec<i64>,
    event_ats: Times,
    event_bodies: Vec<&'a str>,
    message_places: Vec<i32>,
    message_ids: Vec<uuid::Uuid>,
    message_runs: Vec<uuid::Uuid>,
    message_roles: Vec<&'static str>,
    message_parts: Vec<&'a Encoded>,
    message_ats: Times,
    call_places: Vec<i32>,
    call_ids: Vec<uuid::Uuid>,
    call_period_starts: Times,
    call_ats: Times,
    call_statuses: Vec<&'static str>,
    call_bodies: Vec<&'a Encoded>,
    jobs: Vec<Option<uuid::Uuid>>,
    job_tokens: Vec<Option<i64>>,
}

impl<'a> Call<'a> {
    /// The call writing `group`'s steps at `places` (all of one tenant, each of another run).
    pub(super) fn of(group: &[&'a StepArgs], places: &[usize]) -> Self {
        let mut call = Call::default();
        for &p in places {
            let s = group[p];
            let place = i32::try_from(p).unwrap_or(i32::MAX);
            call.tenant = s.tenant.as_str();
            call.places.push(place);
            call.versions.push(s.version);
            call.counts.push(s.count);
            call.statuses.push(s.status);
            call.waiting.push(s.wait_reason);
            call.checkpoints.push(&s.checkpoint);
            call.failures.push(s.failure.as_ref());
            call.nows.push(s.now);
            call.runs.push(s.run);
            call.releases.push(s.releases_lease);
            call.ends.push(s.ends_run);
            call.notifies.push(!s.events.seqs.is_empty());
            call.tokens.push(s.token);
            call.firsts.push(s.first);
            call.froms.push(s.from.join(","));
            call.alones.push(s.alone);
            call.jobs.push(s.job);
            call.job_tokens.push(s.job_token);
            let e = &s.events;
            call.event_places.extend(e.seqs.iter().map(|_| place));
            call.event_seqs.extend(&e.seqs);
            call.event_ats.extend(&e.ats);
            call.event_bodies
                .extend(e.bodies.iter().map(String::as_str));
            let m = &s.messages;
            call.message_places.extend(m.ids.iter().map(|_| place));
            call.message_ids.extend(&m.ids);
            call.message_runs.extend(&m.runs);
            call.message_roles.extend(&m.roles);
            call.message_parts.extend(&m.parts);
            call.message_ats.extend(&m.ats);
            let c = &s.calls;
            call.call_places.extend(c.ids.iter().map(|_| place));
            call.call_ids.extend(&c.ids);
            call.call_period_starts.extend(&c.period_starts);
            call.call_ats.extend(&c.ats);
            call.call_statuses.extend(&c.statuses);
            call.call_bodies.extend(&c.bodies);
        }
        call
    }

    /// Binds the call's block of parameters.
    pub(super) fn bind<'q>(&'q self, query: Query<'q>) -> Query<'q> {
        query
            .bind(self.tenant)
            .bind(&self.places)
            .bind(&self.versions)
            .bind(&self.counts)
            .bind(&self.statuses)
            .bind(&self.waiting)
            .bind(&self.checkpoints)
            .bind(&self.failures)
            .bind(&self.nows)
            .bind(&self.runs)
            .bind(&self.releases)
            .bind(&self.ends)
            .bind(&self.notifies)
            .bind(&self.tokens)
            .bind(&self.firsts)
            .bind(&self.froms)
            .bind(&self.alones)
            .bind(&self.event_places)
            .bind(&self.event_seqs)
            .bind(&self.event_ats)
            .bind(&self.event_bodies)
            .bind(&self.message_places)
            .bind(&self.message_ids)
            .bind(&self.message_runs)
            .bind(&self.message_roles)
            .bind(&self.message_parts)
            .bind(&self.message_ats)
            .bind(&self.call_places)
            .bind(&self.call_ids)
            .bind(&self.call_period_starts)
            .bind(&self.call_ats)
            .bind(&self.call_statuses)
            .bind(&self.call_bodies)
            .bind(&self.jobs)
            .bind(&self.job_tokens)
    }
}
