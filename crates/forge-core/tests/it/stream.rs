//! The live-stream protocol: a [`Follower`] (server) feeding a [`Transcript`] (client) converges to
//! the committed log whatever workers die, whichever live messages are lost, and however the
//! client reconnects; and it never delivers an event twice or out of order.

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{MessageId, RunId};
use forge_core::message::Role;
use forge_core::part::{Part, PartUpdate, TextPart};
use forge_core::stream::{Follower, StreamItem, TailFit, Transcript, assistant_text};
use forge_core::time::Timestamp;
use proptest::prelude::*;
use uuid::Uuid;

fn run() -> RunId {
    RunId(Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001))
}

fn message() -> MessageId {
    MessageId(Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0002))
}

/// The event a worker makes at `seq`: a text delta whose text says which execution made it,
/// unless executions are deterministic (then every execution makes the same event).
fn event(seq: u64, attempt: u64, deterministic: bool, terminal: bool) -> RunEvent {
    let text = if deterministic {
        format!("[{seq}]")
    } else {
        format!("[{seq}/{attempt}]")
    };
    let kind = if terminal {
        RunEventKind::RunCompleted {
            text: String::new(),
            usage: Default::default(),
        }
    } else if seq == 1 {
        RunEventKind::PartAdded {
            message_id: message(),
            role: Role::Assistant,
            index: 0,
            part: Part::Text(TextPart { text }),
        }
    } else {
        RunEventKind::PartUpdated {
            message_id: message(),
            index: 0,
            update: PartUpdate::TextDelta { text },
        }
    };
    RunEvent {
        run_id: run(),
        seq,
        at: Timestamp::from_unix_millis(1_000 + seq as i64).unwrap(),
        kind,
    }
}

/// What the shared live tail holds: one execution's consecutive uncommitted events.
#[derive(Default)]
struct Tail {
    attempt: u64,
    events: Vec<RunEvent>,
}

impl Tail {
    fn receive(&mut self, attempt: u64, e: RunEvent) {
        let continues =
            self.attempt == attempt && self.events.last().is_some_and(|l| l.seq + 1 == e.seq);
        if !continues {
            self.events.clear();
            self.attempt = attempt;
        }
        self.events.push(e);
    }
    fn trim(&mut self, committed: u64) {
        self.events.retain(|e| e.seq > committed);
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// The executing worker produces its next event; the live message is lost when `lost`.
    Produce { lost: bool },
    /// The worker commits its step.
    Commit,
    /// The worker dies; another takes over from the last commit.
    Die,
    /// The subscriber reads the log after its cursor.
    ReadLog,
    /// The subscriber reads the live tail.
    ReadTail,
    /// The client reconnects (the server starts a new follower from its committed cursor).
    Reconnect,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => proptest::bool::weighted(0.2).prop_map(|lost| Op::Produce { lost }),
        2 => Just(Op::Commit),
        1 => Just(Op::Die),
        3 => Just(Op::ReadLog),
        5 => Just(Op::ReadTail),
        1 => Just(Op::Reconnect),
    ]
}

struct World {
    log: Vec<RunEvent>,
    step: Vec<RunEvent>,
    attempt: u64,
    tail: Tail,
    deterministic: bool,
    follower: Follower,
    client: Transcript,
    /// Every item the client received, for the failure message.
    seen: Vec<StreamItem>,
}

impl World {
    fn deliver(&mut self, items: Vec<StreamItem>) {
        for item in items {
            if let Err(e) = self.client.apply(&item) {
                panic!("protocol broken by {item:?}: {e}\nafter {:#?}", self.seen);
            }
            self.seen.push(item);
        }
    }

    fn read_log(&mut self) {
        let after = self.follower.committed() as usize;
        let events = self.log.get(after..).unwrap_or_default().to_vec();
        let mut out = Vec::new();
        self.follower.on_log(&events, &mut out);
        self.deliver(out);
    }

    fn read_tail(&mut self) -> TailFit {
        let after = self.follower.tail_after(self.tail.attempt);
        let events: Vec<RunEvent> = self
            .tail
            .events
            .iter()
            .filter(|e| e.seq > after)
            .cloned()
            .collect();
        let mut out = Vec::new();
        let fit = self.follower.on_tail(self.tail.attempt, &events, &mut out);
        self.deliver(out);
        fit
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Produce { lost } => {
                let seq = self.log.len() as u64 + self.step.len() as u64 + 1;
                let e = event(seq, self.attempt, self.deterministic, false);
                self.step.push(e.clone());
                if !lost {
                    self.tail.receive(self.attempt, e);
                }
            }
            Op::Commit => {
                self.log.append(&mut self.step);
                self.tail.trim(self.log.len() as u64);
            }
            Op::Die => {
                self.step.clear();
                self.attempt += 1;
            }
            Op::ReadLog => self.read_log(),
            Op::ReadTail => {
                if self.read_tail() == TailFit::Behind {
                    // What the server does: read the log, then try the tail once more.
                    self.read_log();
                    self.read_tail();
                }
            }
            Op::Reconnect => {
                let cursor = self.client.reconnect();
                let at = cursor
                    .iter()
                    .find(|(r, _)| *r == run())
                    .map_or(0, |(_, s)| *s);
                self.follower = Follower::new(run(), at);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn a_client_converges_to_the_committed_log(
        ops in proptest::collection::vec(op(), 0..80),
        deterministic in any::<bool>(),
    ) {
        let mut w = World {
            log: Vec::new(),
            step: Vec::new(),
            attempt: 1,
            tail: Tail::default(),
            deterministic,
            follower: Follower::new(run(), 0),
            client: Transcript::new(),
            seen: Vec::new(),
        };
        for op in ops {
            w.apply(op);
        }
        // The run ends: the last execution commits a terminal step.
        let seq = w.log.len() as u64 + w.step.len() as u64 + 1;
        let end = event(seq, w.attempt, w.deterministic, true);
        w.step.push(end.clone());
        w.tail.receive(w.attempt, end);
        w.read_tail();
        w.apply(Op::Commit);
        w.read_log();
        prop_assert!(w.follower.ended());
        prop_assert_eq!(w.client.events(run()), w.log.clone());
        prop_assert_eq!(w.client.text(run()), assistant_text(&w.log));
    }
}

#[test]
fn a_re_executed_step_is_discarded_before_its_replacement() {
    let mut f = Follower::new(run(), 0);
    let mut out = Vec::new();
    let first: Vec<RunEvent> = (1..=3).map(|s| event(s, 1, false, false)).collect();
    assert_eq!(f.on_tail(1, &first, &mut out), TailFit::Applied);
    assert_eq!(out.len(), 3);
    out.clear();
    // The worker died; the next execution streams the step again from seq 1.
    let again: Vec<RunEvent> = (1..=2).map(|s| event(s, 2, false, false)).collect();
    assert_eq!(f.on_tail(2, &again, &mut out), TailFit::Applied);
    assert_eq!(
        out[0],
        StreamItem::Discarded {
            run_id: run(),
            after_seq: 0
        }
    );
    assert_eq!(out.len(), 3);
    out.clear();
    // Its commit confirms what was shown, without repeating it.
    f.on_log(&again, &mut out);
    assert_eq!(
        out,
        vec![StreamItem::Confirmed {
            run_id: run(),
            through_seq: 2
        }]
    );
}

#[test]
fn a_commit_by_another_execution_discards_what_differs() {
    let mut f = Follower::new(run(), 0);
    let mut out = Vec::new();
    let shown: Vec<RunEvent> = (1..=3).map(|s| event(s, 1, false, false)).collect();
    f.on_tail(1, &shown, &mut out);
    out.clear();
    let committed = vec![shown[0].clone(), event(2, 2, false, false)];
    f.on_log(&committed, &mut out);
    assert_eq!(
        out,
        vec![
            StreamItem::Confirmed {
                run_id: run(),
                through_seq: 1
            },
            StreamItem::Discarded {
                run_id: run(),
                after_seq: 1
            },
            StreamItem::Committed {
                event: committed[1].clone()
            },
        ]
    );
}

#[test]
fn a_tail_past_a_gap_waits_for_the_log() {
    let mut f = Follower::new(run(), 0);
    let mut out = Vec::new();
    let late: Vec<RunEvent> = (3..=4).map(|s| event(s, 1, false, false)).collect();
    assert_eq!(f.on_tail(1, &late, &mut out), TailFit::Behind);
    assert!(out.is_empty());
}

#[test]
fn the_transcript_refuses_duplicates_and_gaps() {
    let mut t = Transcript::new();
    let e1 = event(1, 1, false, false);
    t.apply(&StreamItem::Committed { event: e1.clone() })
        .unwrap();
    assert!(
        t.apply(&StreamItem::Committed { event: e1.clone() })
            .is_err()
    );
    assert!(
        t.apply(&StreamItem::Provisional {
            event: event(3, 1, false, false)
        })
        .is_err()
    );
    t.apply(&StreamItem::Provisional {
        event: event(2, 1, false, false),
    })
    .unwrap();
    assert!(
        t.apply(&StreamItem::Committed {
            event: event(2, 1, false, false)
        })
        .is_err()
    );
    assert_eq!(t.reconnect(), vec![(run(), 1)]);
}

#[test]
fn stream_items_have_a_stable_wire_form() {
    let item = StreamItem::Discarded {
        run_id: run(),
        after_seq: 4,
    };
    let json = serde_json::to_value(&item).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"kind": "discarded", "run_id": run().to_string(), "after_seq": 4})
    );
    let back: StreamItem = serde_json::from_value(json).unwrap();
    assert_eq!(back, item);
    let provisional = StreamItem::Provisional {
        event: event(2, 1, false, false),
    };
    let json = serde_json::to_value(&provisional).unwrap();
    assert_eq!(json["kind"], "provisional");
    assert_eq!(json["event"]["type"], "part.updated");
}
