//! Test hooks for recovery cases: model calls and tool calls that fail on cue, and the switch
//! that kills a worker mid-run. They wrap the real providers and tools; nothing else changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use forge_core::ports::model::{
    ModelError, ModelErrorKind, ModelProvider, ModelRequest, ModelStream,
};
use forge_core::ports::tool::{Tool, ToolContext, ToolError, ToolSpec};
use forge_engine::observer::{Emitted, RunObserver};
use forge_eval::dataset::{ModelFault, ToolFault};
use futures_util::StreamExt;

/// A provider whose calls fail as a case's `faults.model` says: before any output, or after
/// some chunks (a stream cut mid-way). Calls are counted across the case's executions.
pub(crate) struct FaultyModel {
    inner: Arc<dyn ModelProvider>,
    faults: Vec<ModelFault>,
    calls: AtomicU32,
}

impl FaultyModel {
    pub(crate) fn new(inner: Arc<dyn ModelProvider>, faults: Vec<ModelFault>) -> Self {
        Self {
            inner,
            faults,
            calls: AtomicU32::new(0),
        }
    }
}

#[async_trait]
impl ModelProvider for FaultyModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let Some(fault) = self.faults.iter().find(|f| f.call == n) else {
            return self.inner.stream(request).await;
        };
        // Checked when the dataset loaded.
        let error = fault.error().map_err(ModelErrorKind::BadRequest)?;
        if fault.after_chunks == 0 {
            return Err(error);
        }
        let stream = self.inner.stream(request).await?;
        let cut = stream
            .take(fault.after_chunks)
            .chain(futures_util::stream::once(async move { Err(error) }));
        Ok(Box::pin(cut))
    }

    async fn health(&self) -> Result<(), ModelError> {
        self.inner.health().await
    }
}

/// A tool whose listed calls fail (a service that did not answer), counted across the case's
/// executions.
pub(crate) struct FaultyTool {
    inner: Arc<dyn Tool>,
    faults: Vec<ToolFault>,
    calls: AtomicU32,
}

impl FaultyTool {
    /// Wraps `inner` when some of `faults` are for it.
    pub(crate) fn wrap(inner: Arc<dyn Tool>, faults: &[ToolFault]) -> Arc<dyn Tool> {
        let mine: Vec<ToolFault> = faults
            .iter()
            .filter(|f| f.tool == inner.spec().name)
            .cloned()
            .collect();
        if mine.is_empty() {
            return inner;
        }
        Arc::new(FaultyTool {
            inner,
            faults: mine,
            calls: AtomicU32::new(0),
        })
    }
}

#[async_trait]
impl Tool for FaultyTool {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn available(&self) -> bool {
        self.inner.available()
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        input: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        match self.faults.iter().find(|f| f.call == n) {
            Some(f) => Err(ToolError::Failed(f.message.clone())),
            None => self.inner.call(ctx, input).await,
        }
    }
}

/// What unwinds a killed worker's execution.
#[derive(Debug)]
pub(crate) struct WorkerKilled;

/// Kills the executing worker at an exact point: when its execution emits the `after`th event,
/// the execution unwinds there and then (no hook runs, nothing more of the step is produced or
/// committed), leaving its run lease to lapse as a dead process's would. The worker takes the
/// unwinding for a panic of the run's execution and fails the job (retried with backoff), where
/// a dead process would leave its claim to lapse: either way another worker resumes the run from
/// its last commit, which is what the cases grade.
pub(crate) struct KillSwitch {
    after: u32,
    seen: AtomicU32,
}

impl KillSwitch {
    pub(crate) fn new(after: u32) -> Self {
        Self {
            after,
            seen: AtomicU32::new(0),
        }
    }

    /// Whether the execution reached the kill point.
    pub(crate) fn fired(&self) -> bool {
        self.seen.load(Ordering::SeqCst) >= self.after
    }
}

impl RunObserver for KillSwitch {
    fn on_event(&self, _event: &forge_core::event::RunEvent) {}

    fn on_emitted(&self, _emitted: &Emitted<'_>) {
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.after {
            std::panic::resume_unwind(Box::new(WorkerKilled));
        }
    }
}
