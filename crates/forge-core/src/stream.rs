//! Live run streams: committed history, the provisional tail of the step in flight, and the two
//! markers that reconcile them.
//!
//! A run's committed log is its history. While a step is in flight its events exist only in the
//! executing worker; they are shown to subscribers at once as [`StreamItem::Provisional`], and the
//! step's commit later either confirms them ([`StreamItem::Confirmed`]: committed exactly as
//! shown) or, when the step was re-executed after its worker died, discards them
//! ([`StreamItem::Discarded`]: drop every provisional event after a sequence number). A client that
//! applies the items in order therefore always ends in the state of the committed log, whatever
//! happened to workers and to live messages.
//!
//! Two pure pieces live here. [`Follower`] is the server's side: per run and subscriber, it turns
//! what the log and the live tail say into items, so the client never receives an event twice and
//! never a gap. [`Transcript`] is the client's side: the reference reducer a client implements,
//! strict about the protocol, used by Forge's own tests and printers. The wire form of
//! [`StreamItem`] is a public contract (`schemas/run-stream.schema.json`).
//!
//! Resuming: a client reconnects with the last sequence it holds *committed* (events received as
//! committed or confirmed), and drops its provisional events first ([`Transcript::reconnect`]).

use std::collections::VecDeque;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::event::{RunEvent, RunEventKind};
use crate::id::RunId;
use crate::message::Role;
use crate::part::{Part, PartUpdate};

/// One item of a live run stream. The `kind` field names the variant on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StreamItem {
    /// An event read from the committed log: history, never retracted.
    Committed {
        /// The event.
        event: RunEvent,
    },
    /// An event of the step in flight, shown before its commit; later confirmed or discarded.
    Provisional {
        /// The event.
        event: RunEvent,
    },
    /// The run's provisional events up to `through_seq` were committed exactly as delivered.
    Confirmed {
        /// The run.
        run_id: RunId,
        /// The last confirmed sequence number.
        through_seq: u64,
    },
    /// The run's provisional events after `after_seq` will never be committed (their step is being
    /// executed again): drop them. Committed events are never discarded.
    Discarded {
        /// The run.
        run_id: RunId,
        /// Provisional events with a greater sequence number are dropped.
        after_seq: u64,
    },
}

impl StreamItem {
    /// The run the item concerns.
    pub fn run_id(&self) -> RunId {
        match self {
            StreamItem::Committed { event } | StreamItem::Provisional { event } => event.run_id,
            StreamItem::Confirmed { run_id, .. } | StreamItem::Discarded { run_id, .. } => *run_id,
        }
    }

    /// The event's sequence number, `through_seq` or `after_seq`.
    pub fn seq(&self) -> u64 {
        match self {
            StreamItem::Committed { event } | StreamItem::Provisional { event } => event.seq,
            StreamItem::Confirmed { through_seq, .. } => *through_seq,
            StreamItem::Discarded { after_seq, .. } => *after_seq,
        }
    }

    /// The event carried, for the two event kinds.
    pub fn event(&self) -> Option<&RunEvent> {
        match self {
            StreamItem::Committed { event } | StreamItem::Provisional { event } => Some(event),
            _ => None,
        }
    }

    /// The wire name of the variant, as in its `kind` field.
    pub fn kind_name(&self) -> &'static str {
        match self {
            StreamItem::Committed { .. } => "committed",
            StreamItem::Provisional { .. } => "provisional",
            StreamItem::Confirmed { .. } => "confirmed",
            StreamItem::Discarded { .. } => "discarded",
        }
    }
}

/// What [`Follower::on_tail`] could do with a live tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailFit {
    /// Applied (possibly nothing was new).
    Applied,
    /// The tail starts past the follower's next sequence: the log holds commits the follower has
    /// not read, or live messages were lost. Read the log, then try again; if the log has nothing
    /// newer, wait for the step's commit.
    Behind,
}

/// The server's side of one subscriber following one run: what it has delivered as committed and
/// as provisional, and which execution (lease token) produced the provisional events.
#[derive(Debug, Clone)]
pub struct Follower {
    run_id: RunId,
    committed: u64,
    provisional: VecDeque<RunEvent>,
    attempt: Option<u64>,
    ended: bool,
}

impl Follower {
    /// A follower of `run_id` whose client holds the committed events up to `after_seq`.
    pub fn new(run_id: RunId, after_seq: u64) -> Self {
        Self {
            run_id,
            committed: after_seq,
            provisional: VecDeque::new(),
            attempt: None,
            ended: false,
        }
    }

    /// The run followed.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// The last sequence delivered as committed (or confirmed): where a log read continues.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// The next sequence number the client expects, committed or provisional.
    pub fn next_seq(&self) -> u64 {
        self.committed + self.provisional.len() as u64 + 1
    }

    /// Whether a committed terminal event was delivered: the stream is over.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The lease token of the execution whose provisional events were delivered.
    pub fn attempt(&self) -> Option<u64> {
        self.attempt
    }

    /// Where to read a live tail held for `attempt`: after this sequence. The same execution
    /// continues after what was delivered; another one is read from the committed point, so that
    /// its events can replace the delivered ones.
    pub fn tail_after(&self, attempt: u64) -> u64 {
        if self.attempt == Some(attempt) {
            self.next_seq() - 1
        } else {
            self.committed
        }
    }

    /// Committed events read from the log, in order, continuing at [`Self::committed`] + 1
    /// (others are ignored). Provisional events equal to the committed ones are confirmed; the
    /// first that differs discards the rest.
    pub fn on_log(&mut self, events: &[RunEvent], out: &mut Vec<StreamItem>) {
        let mut confirm = None;
        for e in events {
            if e.seq != self.committed + 1 || e.run_id != self.run_id || self.ended {
                continue;
            }
            match self.provisional.front() {
                Some(p) if p == e => {
                    self.provisional.pop_front();
                    confirm = Some(e.seq);
                }
                shown => {
                    if let Some(through_seq) = confirm.take() {
                        out.push(StreamItem::Confirmed {
                            run_id: self.run_id,
                            through_seq,
                        });
                    }
                    if shown.is_some() {
                        out.push(StreamItem::Discarded {
                            run_id: self.run_id,
                            after_seq: self.committed,
                        });
                        self.provisional.clear();
                        self.attempt = None;
                    }
                    out.push(StreamItem::Committed { event: e.clone() });
                }
            }
            self.committed = e.seq;
            self.ended |= e.kind.is_terminal();
        }
        if let Some(through_seq) = confirm {
            out.push(StreamItem::Confirmed {
                run_id: self.run_id,
                through_seq,
            });
        }
    }

    /// A live tail: consecutive events of the execution holding lease token `attempt`, in order
    /// (as read after [`Self::tail_after`]). Delivers what continues the client's view; a tail of
    /// another execution that covers the committed point replaces the delivered provisional
    /// events.
    pub fn on_tail(
        &mut self,
        attempt: u64,
        events: &[RunEvent],
        out: &mut Vec<StreamItem>,
    ) -> TailFit {
        if self.ended {
            return TailFit::Applied;
        }
        let events: Vec<&RunEvent> = events
            .iter()
            .filter(|e| e.seq > self.committed && e.run_id == self.run_id)
            .collect();
        let Some(first) = events.first().map(|e| e.seq) else {
            return TailFit::Applied;
        };
        if self.attempt != Some(attempt) && !self.provisional.is_empty() {
            if first > self.committed + 1 {
                // Another execution started after commits this follower has not read (or its first
                // events were lost): the log decides what the delivered events became.
                return TailFit::Behind;
            }
            out.push(StreamItem::Discarded {
                run_id: self.run_id,
                after_seq: self.committed,
            });
            self.provisional.clear();
        }
        let next = self.next_seq();
        let mut fresh = events.into_iter().skip_while(|e| e.seq < next).peekable();
        match fresh.peek() {
            None => return TailFit::Applied,
            Some(e) if e.seq > next => return TailFit::Behind,
            Some(_) => {}
        }
        self.attempt = Some(attempt);
        for (e, want) in fresh.zip(next..) {
            if e.seq != want {
                return TailFit::Behind;
            }
            self.provisional.push_back(e.clone());
            out.push(StreamItem::Provisional { event: e.clone() });
        }
        TailFit::Applied
    }
}

/// Why a [`Transcript`] refused an item: the stream broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// An event arrived out of order: `got` where `expected` was next.
    #[error("run {run_id}: expected seq {expected}, got {got}")]
    Gap {
        /// The run.
        run_id: RunId,
        /// The sequence that should have come.
        expected: u64,
        /// The one that came.
        got: u64,
    },
    /// A committed event arrived while provisional events were outstanding at its sequence.
    #[error("run {run_id}: committed seq {seq} over an unreconciled provisional event")]
    Unreconciled {
        /// The run.
        run_id: RunId,
        /// The sequence.
        seq: u64,
    },
    /// A marker named sequences the client does not hold provisionally.
    #[error("run {run_id}: {kind} {seq} does not match the provisional events held")]
    BadMarker {
        /// The run.
        run_id: RunId,
        /// `confirmed` or `discarded`.
        kind: &'static str,
        /// Its sequence.
        seq: u64,
    },
}

#[derive(Debug, Clone, Default)]
struct RunView {
    /// The committed cursor the view started from.
    base: u64,
    committed: Vec<RunEvent>,
    provisional: Vec<RunEvent>,
}

impl RunView {
    fn committed_seq(&self) -> u64 {
        self.committed.last().map_or(self.base, |e| e.seq)
    }
}

/// The reference client reducer: folds stream items into each run's committed and provisional
/// events, refusing any item that would duplicate or skip one. What a client shows is
/// [`Transcript::events`]; after the stream ends it equals the committed log.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    runs: Vec<(RunId, RunView)>,
}

impl Transcript {
    /// An empty transcript.
    pub fn new() -> Self {
        Self::default()
    }

    fn view(&mut self, run: RunId) -> &mut RunView {
        let at = match self.runs.iter().position(|(r, _)| *r == run) {
            Some(at) => at,
            None => {
                self.runs.push((run, RunView::default()));
                self.runs.len() - 1
            }
        };
        &mut self.runs[at].1
    }

    /// Starts following `run` from a committed cursor: the client already holds (or does not
    /// want) its events up to `seq`. Only for a run the transcript holds nothing of.
    pub fn resume_at(&mut self, run: RunId, seq: u64) {
        let view = self.view(run);
        if view.committed.is_empty() && view.provisional.is_empty() {
            view.base = seq;
        }
    }

    /// Applies one item.
    pub fn apply(&mut self, item: &StreamItem) -> Result<(), ProtocolError> {
        let run_id = item.run_id();
        let view = self.view(run_id);
        let next = view.committed_seq() + view.provisional.len() as u64 + 1;
        match item {
            StreamItem::Committed { event } => {
                if !view.provisional.is_empty() {
                    return Err(ProtocolError::Unreconciled {
                        run_id,
                        seq: event.seq,
                    });
                }
                if event.seq != view.committed_seq() + 1 {
                    return Err(ProtocolError::Gap {
                        run_id,
                        expected: view.committed_seq() + 1,
                        got: event.seq,
                    });
                }
                view.committed.push(event.clone());
            }
            StreamItem::Provisional { event } => {
                if event.seq != next {
                    return Err(ProtocolError::Gap {
                        run_id,
                        expected: next,
                        got: event.seq,
                    });
                }
                view.provisional.push(event.clone());
            }
            StreamItem::Confirmed { through_seq, .. } => {
                let held = view
                    .provisional
                    .iter()
                    .filter(|e| e.seq <= *through_seq)
                    .count();
                if *through_seq <= view.committed_seq() || *through_seq >= next {
                    return Err(ProtocolError::BadMarker {
                        run_id,
                        kind: "confirmed",
                        seq: *through_seq,
                    });
                }
                let confirmed: Vec<RunEvent> = view.provisional.drain(..held).collect();
                view.committed.extend(confirmed);
            }
            StreamItem::Discarded { after_seq, .. } => {
                if *after_seq < view.committed_seq() {
                    return Err(ProtocolError::BadMarker {
                        run_id,
                        kind: "discarded",
                        seq: *after_seq,
                    });
                }
                view.provisional.retain(|e| e.seq <= *after_seq);
            }
        }
        Ok(())
    }

    /// What a client does before reconnecting: drops every provisional event. Returns the
    /// committed cursor to resume each run from.
    pub fn reconnect(&mut self) -> Vec<(RunId, u64)> {
        self.runs
            .iter_mut()
            .map(|(run, view)| {
                view.provisional.clear();
                (*run, view.committed_seq())
            })
            .collect()
    }

    /// The committed cursor of `run`.
    pub fn committed_seq(&self, run: RunId) -> u64 {
        self.runs
            .iter()
            .find(|(r, _)| *r == run)
            .map_or(0, |(_, v)| v.committed_seq())
    }

    /// What the client shows of `run`: committed events, then provisional ones.
    pub fn events(&self, run: RunId) -> Vec<RunEvent> {
        self.runs
            .iter()
            .find(|(r, _)| *r == run)
            .map(|(_, v)| v.committed.iter().chain(&v.provisional).cloned().collect())
            .unwrap_or_default()
    }

    /// The committed events received of `run`.
    pub fn committed(&self, run: RunId) -> &[RunEvent] {
        self.runs
            .iter()
            .find(|(r, _)| *r == run)
            .map_or(&[], |(_, v)| &v.committed)
    }

    /// The assistant text a client shows for `run`.
    pub fn text(&self, run: RunId) -> String {
        assistant_text(&self.events(run))
    }
}

/// The assistant's text in `events`: text parts as added, then their streamed deltas.
pub fn assistant_text(events: &[RunEvent]) -> String {
    let mut text = String::new();
    let mut assistant_messages = Vec::new();
    for e in events {
        match &e.kind {
            RunEventKind::PartAdded {
                message_id,
                role: Role::Assistant,
                part: Part::Text(t),
                ..
            } => {
                assistant_messages.push(*message_id);
                text.push_str(&t.text);
            }
            RunEventKind::PartUpdated {
                message_id,
                update: PartUpdate::TextDelta { text: delta },
                ..
            } if assistant_messages.contains(message_id) => text.push_str(delta),
            _ => {}
        }
    }
    text
}

/// The JSON Schema (draft 2020-12) of [`StreamItem`], as committed in
/// `schemas/run-stream.schema.json`.
pub fn run_stream_schema() -> serde_json::Value {
    schemars::schema_for!(StreamItem).to_value()
}
