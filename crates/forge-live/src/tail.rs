//! The live tail: per tenant and run, the uncommitted events of the step in flight.
//!
//! It holds the consecutive events of one execution (lease token) at a time: an event of a newer
//! execution replaces what an older one left (a re-executed step), an event that does not continue
//! the held ones (a lost message) restarts the tail at it, and a commit drops what it made durable.
//! Subscribers read it after their position and reconcile it with the log
//! (`forge_core::stream::Follower`); so what it loses costs latency, never correctness. It is
//! bounded in runs and in events per run, and forgets runs nobody has fed for a while (a dead
//! worker's step).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use forge_core::event::RunEvent;
use forge_core::id::RunId;
use forge_core::ports::live::{LiveMessage, LiveSink};
use forge_core::scope::TenantId;
use parking_lot::Mutex;

use super::bus::{EventBus, Wake};

/// How much a [`LiveTail`] holds.
#[derive(Debug, Clone, Copy)]
pub struct TailLimits {
    /// Runs with a tail at once; the least recently fed is dropped beyond it.
    pub runs: usize,
    /// Events kept per run; the oldest are dropped beyond it (their subscribers wait for the
    /// commit).
    pub events_per_run: usize,
    /// A run not fed for this long is forgotten.
    pub idle: Duration,
}

impl Default for TailLimits {
    fn default() -> Self {
        Self {
            runs: 4096,
            events_per_run: 16_384,
            idle: Duration::from_secs(600),
        }
    }
}

struct RunTail {
    attempt: u64,
    /// Consecutive uncommitted events of `attempt`.
    events: VecDeque<RunEvent>,
    /// The log is durable through this sequence (as far as this tail was told).
    committed: u64,
    fed: Instant,
}

/// The live tail of this process, waking subscribers through its [`EventBus`].
pub struct LiveTail {
    runs: Mutex<HashMap<(TenantId, RunId), RunTail>>,
    bus: EventBus,
    limits: TailLimits,
    /// Inserts since the last sweep of idle runs.
    inserts: Mutex<usize>,
}

impl std::fmt::Debug for LiveTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTail")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl LiveTail {
    /// A tail waking subscribers on `bus`.
    pub fn new(bus: EventBus) -> Self {
        Self::with_limits(bus, TailLimits::default())
    }

    /// A tail with explicit limits.
    pub fn with_limits(bus: EventBus, limits: TailLimits) -> Self {
        Self {
            runs: Mutex::new(HashMap::new()),
            bus,
            limits,
            inserts: Mutex::new(0),
        }
    }

    /// The bus it wakes.
    pub fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// The held events of `run` for the caller: `after(attempt)` says after which sequence it
    /// wants the events of the execution holding `attempt`. `None` when nothing is held.
    pub fn read(
        &self,
        tenant: &TenantId,
        run: RunId,
        after: impl FnOnce(u64) -> u64,
    ) -> Option<(u64, Vec<RunEvent>)> {
        let runs = self.runs.lock();
        let tail = runs.get(&(tenant.clone(), run))?;
        if tail.events.is_empty() {
            return None;
        }
        let after = after(tail.attempt);
        let first = tail.events.front().map_or(0, |e| e.seq);
        let skip = after.saturating_sub(first.saturating_sub(1)) as usize;
        Some((
            tail.attempt,
            tail.events.iter().skip(skip).cloned().collect(),
        ))
    }

    /// Runs with a tail held (for tests and metrics).
    pub fn runs_held(&self) -> usize {
        self.runs.lock().len()
    }

    fn make_room(&self, runs: &mut HashMap<(TenantId, RunId), RunTail>) {
        let now = Instant::now();
        let sweep = {
            let mut n = self.inserts.lock();
            *n += 1;
            n.is_multiple_of(256)
        };
        if sweep {
            let idle = self.limits.idle;
            runs.retain(|_, t| now.duration_since(t.fed) < idle);
        }
        while runs.len() >= self.limits.runs.max(1) {
            let Some(victim) = runs
                .iter()
                .min_by_key(|(_, t)| t.fed)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            runs.remove(&victim);
        }
    }

    fn on_event(&self, tenant: &TenantId, attempt: u64, event: &RunEvent) {
        let mut runs = self.runs.lock();
        let key = (tenant.clone(), event.run_id);
        if !runs.contains_key(&key) {
            self.make_room(&mut runs);
        }
        let tail = runs.entry(key).or_insert_with(|| RunTail {
            attempt,
            events: VecDeque::new(),
            committed: 0,
            fed: Instant::now(),
        });
        tail.fed = Instant::now();
        if attempt < tail.attempt || event.seq <= tail.committed {
            // A late message of a superseded execution, or of a committed step.
            return;
        }
        if attempt == tail.attempt && tail.events.back().is_some_and(|last| event.seq <= last.seq) {
            // Held already: the same message by two routes (in process and through pub/sub).
            return;
        }
        let continues = attempt == tail.attempt
            && tail
                .events
                .back()
                .is_some_and(|last| last.seq + 1 == event.seq);
        if !continues {
            tail.events.clear();
            tail.attempt = attempt;
        }
        tail.events.push_back(event.clone());
        while tail.events.len() > self.limits.events_per_run.max(1) {
            tail.events.pop_front();
        }
    }

    fn on_commit(&self, tenant: &TenantId, run: RunId, last_seq: u64) {
        let mut runs = self.runs.lock();
        if let Some(tail) = runs.get_mut(&(tenant.clone(), run)) {
            tail.committed = tail.committed.max(last_seq);
            while tail.events.front().is_some_and(|e| e.seq <= last_seq) {
                tail.events.pop_front();
            }
            if tail.events.is_empty() {
                // Between steps a run holds nothing: give the step's buffer back.
                tail.events = VecDeque::new();
            }
        }
    }
}

impl LiveSink for LiveTail {
    fn send(&self, message: &LiveMessage) {
        match message {
            LiveMessage::Event {
                tenant_id,
                thread_id,
                attempt,
                event,
            } => {
                self.on_event(tenant_id, *attempt, event);
                self.bus.publish(Wake::Live {
                    run_id: event.run_id,
                    thread_id: *thread_id,
                });
            }
            LiveMessage::Committed {
                tenant_id,
                run_id,
                thread_id,
                last_seq,
            } => {
                self.on_commit(tenant_id, *run_id, *last_seq);
                self.bus.publish(Wake::Run {
                    run_id: *run_id,
                    thread_id: *thread_id,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use forge_core::event::RunEventKind;
    use forge_core::id::ThreadId;
    use uuid::Uuid;

    use super::*;

    fn run(n: u128) -> RunId {
        RunId(Uuid::from_u128(n))
    }

    fn thread() -> ThreadId {
        ThreadId(Uuid::from_u128(99))
    }

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).expect("a valid tenant")
    }

    fn event(run_id: RunId, seq: u64) -> RunEvent {
        RunEvent {
            run_id,
            seq,
            at: forge_core::time::Timestamp::from_unix_millis(0).expect("a time"),
            kind: RunEventKind::StepStarted { step: seq as u32 },
        }
    }

    fn feed(tail: &LiveTail, tenant_id: &TenantId, attempt: u64, e: RunEvent) {
        tail.send(&LiveMessage::Event {
            tenant_id: tenant_id.clone(),
            thread_id: thread(),
            attempt,
            event: e,
        });
    }

    fn seqs(tail: &LiveTail, tenant_id: &TenantId, r: RunId) -> Option<(u64, Vec<u64>)> {
        tail.read(tenant_id, r, |_| 0)
            .map(|(a, events)| (a, events.iter().map(|e| e.seq).collect()))
    }

    #[test]
    fn another_tenant_reads_nothing_of_a_run() {
        let tail = LiveTail::new(EventBus::default());
        let (acme, globex) = (tenant("acme"), tenant("globex"));
        feed(&tail, &acme, 1, event(run(1), 1));
        assert_eq!(seqs(&tail, &acme, run(1)), Some((1, vec![1])));
        assert_eq!(seqs(&tail, &globex, run(1)), None);
    }

    #[test]
    fn a_newer_execution_replaces_an_older_ones_events_and_late_ones_are_ignored() {
        let tail = LiveTail::new(EventBus::default());
        let acme = tenant("acme");
        for seq in 1..=3 {
            feed(&tail, &acme, 1, event(run(1), seq));
        }
        // The same message by a second route changes nothing.
        feed(&tail, &acme, 1, event(run(1), 2));
        assert_eq!(seqs(&tail, &acme, run(1)), Some((1, vec![1, 2, 3])));
        feed(&tail, &acme, 2, event(run(1), 1));
        assert_eq!(seqs(&tail, &acme, run(1)), Some((2, vec![1])));
        // A late message of the superseded execution.
        feed(&tail, &acme, 1, event(run(1), 4));
        assert_eq!(seqs(&tail, &acme, run(1)), Some((2, vec![1])));
    }

    #[test]
    fn a_commit_trims_what_it_made_durable_and_a_gap_restarts_the_tail() {
        let tail = LiveTail::new(EventBus::default());
        let acme = tenant("acme");
        for seq in 1..=4 {
            feed(&tail, &acme, 1, event(run(1), seq));
        }
        tail.send(&LiveMessage::Committed {
            tenant_id: acme.clone(),
            run_id: run(1),
            thread_id: thread(),
            last_seq: 2,
        });
        assert_eq!(seqs(&tail, &acme, run(1)), Some((1, vec![3, 4])));
        // Reading after a position skips what the reader holds.
        let after = tail.read(&acme, run(1), |_| 3).map(|(_, e)| e.len());
        assert_eq!(after, Some(1));
        // A lost message: the tail restarts at what continues.
        feed(&tail, &acme, 1, event(run(1), 6));
        assert_eq!(seqs(&tail, &acme, run(1)), Some((1, vec![6])));
        // Already committed: ignored.
        feed(&tail, &acme, 1, event(run(1), 2));
        assert_eq!(seqs(&tail, &acme, run(1)), Some((1, vec![6])));
    }

    #[test]
    fn the_tail_is_bounded_in_runs_and_events() {
        let tail = LiveTail::with_limits(
            EventBus::default(),
            TailLimits {
                runs: 2,
                events_per_run: 3,
                idle: Duration::from_secs(60),
            },
        );
        let acme = tenant("acme");
        for seq in 1..=5 {
            feed(&tail, &acme, 1, event(run(1), seq));
        }
        assert_eq!(seqs(&tail, &acme, run(1)), Some((1, vec![3, 4, 5])));
        feed(&tail, &acme, 1, event(run(2), 1));
        feed(&tail, &acme, 1, event(run(3), 1));
        assert_eq!(tail.runs_held(), 2);
        assert_eq!(
            seqs(&tail, &acme, run(1)),
            None,
            "the least recently fed went"
        );
    }
}
