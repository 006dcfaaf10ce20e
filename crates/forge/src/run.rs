//! A run of a deployment, to wait for or to follow as it happens.

use forge_core::event::RunEventKind;
use forge_core::id::{RunId, ThreadId};
use forge_core::run::RunFailure;
use forge_core::scope::Scope;
use forge_core::stream::StreamItem;
use forge_core::usage::Usage;
use forge_live::{EventBus, StreamContext};
use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;

use crate::Error;

/// How a run ended: its terminal event.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It finished with a final answer.
    Completed {
        /// The answer's text.
        text: String,
        /// Usage over the whole run.
        usage: Usage,
    },
    /// It stopped on an error or a limit.
    Failed(RunFailure),
    /// It was cancelled.
    Cancelled {
        /// Why, if the canceller said.
        reason: Option<String>,
    },
}

impl Outcome {
    /// The final answer, when the run completed.
    pub fn answer(&self) -> Option<&str> {
        match self {
            Outcome::Completed { text, .. } => Some(text),
            _ => None,
        }
    }

    /// The outcome a terminal event records (`None` for any other event).
    fn of(kind: &RunEventKind) -> Option<Self> {
        Some(match kind {
            RunEventKind::RunCompleted { text, usage } => Outcome::Completed {
                text: text.clone(),
                usage: *usage,
            },
            RunEventKind::RunFailed { failure } => Outcome::Failed(failure.clone()),
            RunEventKind::RunCancelled { reason } => Outcome::Cancelled {
                reason: reason.clone(),
            },
            _ => return None,
        })
    }
}

/// A run of one scope, seen through its deployment's live streams: wait for it to end, or
/// follow its events as they happen. Cheap to clone.
#[derive(Clone)]
pub struct RunHandle {
    id: RunId,
    thread_id: ThreadId,
    scope: Scope,
    streams: StreamContext,
    bus: EventBus,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("id", &self.id)
            .field("thread_id", &self.thread_id)
            .finish_non_exhaustive()
    }
}

impl RunHandle {
    /// A handle on a run `scope` may see (the caller checked).
    pub(crate) fn new(
        id: RunId,
        thread_id: ThreadId,
        scope: Scope,
        streams: StreamContext,
        bus: EventBus,
    ) -> Self {
        Self {
            id,
            thread_id,
            scope,
            streams,
            bus,
        }
    }

    /// The run's id.
    pub fn id(&self) -> RunId {
        self.id
    }

    /// The thread it runs on.
    pub fn thread_id(&self) -> ThreadId {
        self.thread_id
    }

    /// Its events from the first, as the GraphQL subscription `runEvents` serves them:
    /// committed events, the step in flight as provisional events, and the markers that confirm
    /// or discard those; in order, with no gap and no duplicate, across a worker's crash. Ends
    /// after the run's terminal event, or when the deployment shuts down.
    ///
    /// ```
    /// use forge::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), forge::Error> {
    /// # let script = "[[conversation]]\n[[conversation.turn]]\ntext = [\"Hi.\"]\n";
    /// let forge = Forge::builder()
    ///     .store("memory")
    ///     .agent(AgentDefinition::new("greeter", "scripted:hello"))
    ///     .model(ScriptedProvider::new(Script::parse(script, "hello")?))
    ///     .build()
    ///     .await?;
    /// let scope = Scope::parse("acme", "alice", &[])?;
    /// let run = forge.start(&scope, "greeter", "Hi!").await?;
    /// let mut events = run.subscribe();
    /// let mut kinds = Vec::new();
    /// while let Some(item) = events.next().await {
    ///     match item? {
    ///         // What the log held when the stream started, or the step in flight as it happens
    ///         // (later confirmed, or discarded if the step is executed again).
    ///         StreamItem::Committed { event } | StreamItem::Provisional { event } => {
    ///             kinds.push(event.kind.type_name())
    ///         }
    ///         StreamItem::Confirmed { .. } | StreamItem::Discarded { .. } => {}
    ///     }
    /// }
    /// assert_eq!(kinds.first(), Some(&"run.started"));
    /// assert_eq!(kinds.last(), Some(&"run.completed"));
    /// # forge.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn subscribe(&self) -> BoxStream<'static, Result<StreamItem, Error>> {
        self.subscribe_after(0)
    }

    /// [`RunHandle::subscribe`] from after the committed event `seq` (a client that holds
    /// events up to `seq` resumes there).
    pub fn subscribe_after(&self, seq: u64) -> BoxStream<'static, Result<StreamItem, Error>> {
        forge_live::run_events(
            self.streams.clone(),
            &self.bus,
            self.scope.clone(),
            self.id,
            seq,
        )
        .map(|item| item.map_err(Error::from))
        .boxed()
    }

    /// Waits for the run to end and returns how it ended. Woken by the run's commits, never by
    /// polling. A run waiting for a person's approval or answer waits with it.
    ///
    /// ```
    /// use forge::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), forge::Error> {
    /// # let script = "[[conversation]]\n[[conversation.turn]]\ntext = [\"Hi.\"]\n";
    /// # let forge = Forge::builder()
    /// #     .store("memory")
    /// #     .agent(AgentDefinition::new("greeter", "scripted:hello"))
    /// #     .model(ScriptedProvider::new(Script::parse(script, "hello")?))
    /// #     .build()
    /// #     .await?;
    /// # let scope = Scope::parse("acme", "alice", &[])?;
    /// let run = forge.start(&scope, "greeter", "Hi!").await?;
    /// match run.wait().await? {
    ///     Outcome::Completed { text, usage } => println!("{text} ({} tokens)", usage.output_tokens),
    ///     other => println!("{other:?}"),
    /// }
    /// # forge.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn wait(&self) -> Result<Outcome, Error> {
        // From the last event committed now: the terminal one is that or a later one.
        let after = self
            .streams
            .runs
            .get_run(&self.scope, self.id)
            .await?
            .last_seq
            .saturating_sub(1);
        // Committed events only: a provisional terminal event could still be discarded.
        let events = forge_live::run_events(
            StreamContext {
                tail: None,
                ..self.streams.clone()
            },
            &self.bus,
            self.scope.clone(),
            self.id,
            after,
        );
        let mut events = std::pin::pin!(events);
        while let Some(item) = events.next().await {
            if let StreamItem::Committed { event } = item?
                && let Some(outcome) = Outcome::of(&event.kind)
            {
                return Ok(outcome);
            }
        }
        Err(Error::ShutDown)
    }
}
