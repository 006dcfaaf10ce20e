//! Printing a run's stream as it arrives: for a person, or as JSON lines of stream items.
//!
//! `forge run` reads its run through the same live stream as a GraphQL subscriber
//! (`forge_live::run_events`): provisional events print as they are produced, a commit's
//! confirmation prints nothing, and a discarded step (its worker was lost) is announced before its
//! re-execution prints again.

use std::io::Write;

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::message::Role;
use forge_core::part::{Part, PartUpdate};
use forge_core::stream::StreamItem;
use parking_lot::Mutex;

/// Prints stream items as they arrive.
pub(crate) struct Printer {
    json: bool,
    /// Whether the cursor is mid-line after streamed text.
    mid_line: Mutex<bool>,
    /// Scrubs secrets from everything printed: the last line of defence behind the engine's.
    redactor: forge_core::redact::Redactor,
}

impl Printer {
    pub(crate) fn new(json: bool) -> Self {
        Self {
            json,
            mid_line: Mutex::new(false),
            redactor: forge_core::redact::Redactor::default(),
        }
    }

    /// Scrubs these secrets (and the usual credential patterns) from what is printed.
    pub(crate) fn redactor(mut self, redactor: forge_core::redact::Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// Ends any half-printed line.
    pub(crate) fn finish(&self) {
        let mut mid = self.mid_line.lock();
        if *mid {
            println!();
            *mid = false;
        }
    }

    fn line(&self, text: String) {
        self.finish();
        println!("{}", self.redactor.redact(&text));
    }

    fn stream(&self, text: &str) {
        let mut mid = self.mid_line.lock();
        print!("{}", self.redactor.redact(text));
        let _ = std::io::stdout().flush();
        *mid = !text.ends_with('\n');
    }
}

impl Printer {
    /// Prints one item of the run's stream.
    pub(crate) fn item(&self, item: &StreamItem) {
        if self.json {
            match serde_json::to_string(item) {
                Ok(line) => println!("{}", self.redactor.redact(&line)),
                Err(err) => eprintln!("error: failed to encode item {}: {err}", item.seq()),
            }
            return;
        }
        match item {
            StreamItem::Committed { event } | StreamItem::Provisional { event } => {
                self.event(event)
            }
            StreamItem::Confirmed { .. } => {}
            StreamItem::Discarded { after_seq, .. } => self.line(format!(
                "↺ a worker was lost mid-step: the step runs again (discarding what followed event {after_seq})"
            )),
        }
    }

    fn event(&self, e: &RunEvent) {
        match &e.kind {
            RunEventKind::RunStarted { agent, model, .. } => self.line(format!(
                "▶ run {} · agent {}@{} · model {model}",
                e.run_id, agent.name, agent.version
            )),
            RunEventKind::StepStarted { step } => self.line(format!("· step {step}")),
            RunEventKind::PartAdded { role, part, .. } => match (role, part) {
                (Role::Assistant, Part::Text(t)) => {
                    self.finish();
                    self.stream("assistant: ");
                    self.stream(&t.text);
                }
                // Shown once its input is complete (`Replaced`); invalid input shows as its error.
                (_, Part::ToolCall(_)) => {}
                (_, Part::ToolResult(r)) => {
                    let mark = if r.is_error { "✗" } else { "←" };
                    self.line(format!("  {mark} {} {}", r.tool_name, r.output))
                }
                (_, Part::Error(err)) => self.line(format!("  ! {}: {}", err.code, err.message)),
                // Announced by their `*.requested` events.
                (_, Part::Approval(_) | Part::Question(_)) => {}
                (_, other) => self.line(format!("  [{}]", other.type_name())),
            },
            RunEventKind::PartUpdated { update, .. } => match update {
                PartUpdate::TextDelta { text } => self.stream(text),
                PartUpdate::Replaced {
                    part: Part::ToolCall(c),
                } => self.line(format!("  → {} {}", c.tool_name, c.input)),
                PartUpdate::InputDelta { .. } | PartUpdate::Replaced { .. } => {}
            },
            RunEventKind::UsageUpdated { .. } => {}
            RunEventKind::StateUpdated { version, keys } => {
                self.line(format!("· session state v{version}: {}", keys.join(", ")))
            }
            RunEventKind::ThreadCompacted {
                version, covered, ..
            } => self.line(format!(
                "· thread compacted: summary v{version} covers the first {covered} messages"
            )),
            RunEventKind::RunCheckpointed { step, .. } => {
                self.line(format!("· checkpoint after step {step}"))
            }
            RunEventKind::RunCompleted { usage, .. } => self.line(format!(
                "✓ completed · {} input / {} output tokens",
                usage.input_tokens, usage.output_tokens
            )),
            RunEventKind::RunFailed { failure } => {
                self.line(format!("✗ failed · {}", failure.message))
            }
            RunEventKind::RunCancelled { .. } => self.line("■ cancelled".into()),
            RunEventKind::ApprovalRequested {
                interaction_id,
                tool_name,
                ..
            } => self.line(format!(
                "⏸ {tool_name} needs approval · forge interactions approve {interaction_id}"
            )),
            RunEventKind::QuestionRequested {
                interaction_id,
                prompt,
                ..
            } => self.line(format!(
                "? {prompt} · forge interactions answer {interaction_id} '<json>'"
            )),
            other => self.line(format!("· {}", other.type_name())),
        }
    }
}
