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
    /// What a printed command needs to reach this run from another shell (` --store … --tenant
    /// …`), or why nothing can.
    reach: Reach,
}

/// How another process reaches the printed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    /// With these flags after the command.
    Flags(String),
    /// Not at all: the store lives in this process.
    Nowhere,
}

impl Reach {
    /// The flags that name `store_url` (its password left out), `pg_mode` and `tenant` where
    /// they are not the defaults, quoted for a POSIX shell; `Nowhere` for the memory store.
    pub(crate) fn of(store_url: &str, pg_mode: &str, tenant: &str) -> Self {
        if store_url == "memory" {
            return Reach::Nowhere;
        }
        let mut flags = String::new();
        let mut add = |flag: &str, value: &str| {
            let quoted = shlex::try_quote(value).map_or_else(|_| value.into(), |q| q.into_owned());
            flags.push_str(&format!(" {flag} {quoted}"));
        };
        if store_url != crate::store::DEFAULT_URL {
            add("--store", &without_password(store_url));
        }
        if pg_mode != "rls" {
            add("--pg-mode", pg_mode);
        }
        if tenant != "local" {
            add("--tenant", tenant);
        }
        Reach::Flags(flags)
    }
}

/// `url` without the password of its user (`postgres://app:secret@db/x` → `postgres://app@db/x`):
/// the command then reads it from the usual place (`PGPASSWORD`, `~/.pgpass`).
fn without_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find('/')
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    match (authority.rfind('@'), authority.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}{}",
            &url[..scheme_end + colon],
            &authority[at..],
            &url[authority_end..]
        ),
        _ => url.to_owned(),
    }
}

impl Printer {
    pub(crate) fn new(json: bool) -> Self {
        Self {
            json,
            mid_line: Mutex::new(false),
            redactor: forge_core::redact::Redactor::default(),
            reach: Reach::Flags(String::new()),
        }
    }

    /// How the commands it prints reach this run from another shell.
    pub(crate) fn reach(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    /// `command` as another shell must type it, or why none can.
    fn paste(&self, command: String) -> String {
        match &self.reach {
            Reach::Flags(flags) => format!("{command}{flags}"),
            Reach::Nowhere => {
                "nothing else can reach it: the memory store ends with this process".into()
            }
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
                preview,
                ..
            } => {
                let what = preview
                    .as_ref()
                    .map(|p| format!(": {}", p.summary))
                    .unwrap_or_default();
                let command = self.paste(format!("forge interactions approve {interaction_id}"));
                self.line(format!("⏸ {tool_name} needs approval{what} · {command}"))
            }
            RunEventKind::QuestionRequested {
                interaction_id,
                prompt,
                ..
            } => {
                let command = self.paste(format!(
                    "forge interactions answer {interaction_id} '<json>'"
                ));
                self.line(format!("? {prompt} · {command}"))
            }
            other => self.line(format!("· {}", other.type_name())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_core::text::strategy::unicode;
    use proptest::prelude::*;

    #[test]
    fn printed_commands_carry_what_reaches_the_run() {
        assert_eq!(
            Reach::of("sqlite://forge.db", "rls", "local"),
            Reach::Flags(String::new())
        );
        assert_eq!(
            Reach::of("sqlite:///tmp/my runs/forge.db", "rls", "acme"),
            Reach::Flags(" --store 'sqlite:///tmp/my runs/forge.db' --tenant acme".into())
        );
        assert_eq!(
            Reach::of("postgres://app:s3cret@db:5432/forge", "supabase", "local"),
            Reach::Flags(" --store postgres://app@db:5432/forge --pg-mode supabase".into())
        );
        assert_eq!(Reach::of("memory", "rls", "acme"), Reach::Nowhere);
    }

    proptest! {
        #[test]
        fn a_password_never_survives_and_nothing_else_is_lost(
            user in unicode(8), password in unicode(8), rest in unicode(20)
        ) {
            let url = format!("postgres://{user}:{password}@host/{rest}");
            let shown = without_password(&url);
            if !user.contains([':', '@', '/']) && !password.contains(['@', '/']) && !password.is_empty() {
                prop_assert_eq!(shown, format!("postgres://{user}@host/{rest}"));
            }
            // Any text at all: no panic, and nothing added.
            let shown = without_password(&rest);
            prop_assert!(shown.len() <= rest.len());
        }
    }
}
