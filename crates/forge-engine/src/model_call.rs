//! One model call, streamed ([`ModelCaller`]): the provider's stream read chunk by chunk until it
//! ends, fails or the run is cancelled, in a `model.call` span, with its duration and time to
//! first output recorded. The step's own call and each summarising call go through it; what a
//! chunk means is the caller's.

use forge_core::ports::model::{ModelChunk, ModelError, ModelProvider, ModelRequest};
use forge_core::telemetry::{Instrument, Parent, Span, SpanName, Telemetry};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

/// How a call's stream ended.
pub(crate) enum Streamed {
    /// The provider ended it.
    Finished,
    /// The run was cancelled first.
    Cancelled,
    /// The provider failed, before or during the stream.
    Failed(ModelError),
}

impl Streamed {
    /// The outcome as spans and metrics name it.
    fn outcome(&self) -> &'static str {
        match self {
            Streamed::Finished => "ok",
            Streamed::Cancelled => "cancelled",
            Streamed::Failed(_) => "error",
        }
    }
}

/// Makes model calls on one provider, for one run.
pub(crate) struct ModelCaller<'a> {
    provider: &'a dyn ModelProvider,
    telemetry: &'a Telemetry,
    cancel: &'a CancellationToken,
}

impl<'a> ModelCaller<'a> {
    /// Calls `provider`, stopping when `cancel` fires; spans and metrics go to `telemetry`.
    pub(crate) fn new(
        provider: &'a dyn ModelProvider,
        telemetry: &'a Telemetry,
        cancel: &'a CancellationToken,
    ) -> Self {
        Self {
            provider,
            telemetry,
            cancel,
        }
    }

    /// Streams `request` (of `model`, as the agent names it) in a span under `parent`, handing
    /// every chunk to `on_chunk` as it arrives.
    pub(crate) async fn stream(
        &self,
        request: ModelRequest,
        model: &str,
        parent: &Span,
        mut on_chunk: impl FnMut(ModelChunk),
    ) -> Streamed {
        let t = self.telemetry;
        let span = t.span(SpanName::ModelCall, Parent::Span(parent));
        span.set("model", model.into());
        let started = std::time::Instant::now();
        let mut first_output = None;
        let opened = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => None,
            r = self.provider.stream(request) => Some(r),
        };
        let streamed = match opened {
            None => Streamed::Cancelled,
            Some(Err(e)) => Streamed::Failed(e),
            Some(Ok(mut stream)) => loop {
                let next = tokio::select! {
                    biased;
                    _ = self.cancel.cancelled() => break Streamed::Cancelled,
                    next = stream.next() => next,
                };
                match next {
                    None => break Streamed::Finished,
                    Some(Err(e)) => break Streamed::Failed(e),
                    Some(Ok(chunk)) => {
                        if first_output.is_none()
                            && matches!(
                                chunk,
                                ModelChunk::TextDelta(_) | ModelChunk::ToolCallDelta { .. }
                            )
                        {
                            first_output = Some(started.elapsed());
                        }
                        on_chunk(chunk);
                    }
                }
            },
        };
        let outcome = streamed.outcome();
        if let Streamed::Failed(e) = &streamed {
            span.fail(e.code());
        }
        span.set("outcome", outcome.into());
        span.end();
        t.meter.record(
            Instrument::ModelCallDuration,
            started.elapsed().as_secs_f64() * 1000.0,
            &[("model", model), ("outcome", outcome)],
        );
        if let Some(first) = first_output {
            t.meter.record(
                Instrument::TimeToFirstToken,
                first.as_secs_f64() * 1000.0,
                &[("model", model)],
            );
        }
        streamed
    }
}
