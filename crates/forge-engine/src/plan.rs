//! What a step decided: how it ended ([`StepEnd`]) and, for each tool call the model made,
//! whether it runs or what the model gets instead ([`Prepared`]). Plain values the step's
//! components hand each other, below all of them.

use forge_core::id::ToolCallId;
use forge_core::part::ToolCallPart;
use forge_core::ports::model::{CallDetail, ModelError, ModelErrorKind};
use forge_core::redact::Redactor;
use forge_core::run::{FailureCode, RunFailure, WaitReason};

/// How a step ended.
pub(crate) enum StepEnd {
    /// Tools ran; the model gets another turn.
    Continue,
    /// The model gave a final answer.
    Completed { text: String },
    /// Cancellation was requested.
    Cancelled,
    /// The run cannot go on.
    Failed(RunFailure),
    /// Calls of this step need a person; the run waits.
    Parked(WaitReason),
}

/// A tool call ready to execute, or the result the model gets instead.
pub(crate) enum Prepared {
    /// Execute it.
    Run { call: ToolCallPart },
    /// Do not; the model gets this error.
    Refused {
        call: ToolCallPart,
        code: &'static str,
        message: String,
    },
    /// Denied by policy, or a tool this run may not see (including one the model invented): the
    /// model gets a `forbidden` error, and the denial is audited.
    Denied {
        call: ToolCallPart,
        message: String,
        reason: String,
    },
    /// Answered by a person (`ask_user`): this is its result.
    Answered {
        call: ToolCallPart,
        output: serde_json::Value,
    },
}

impl Prepared {
    /// The call this is about.
    pub(crate) fn call(&self) -> &ToolCallPart {
        match self {
            Prepared::Run { call }
            | Prepared::Refused { call, .. }
            | Prepared::Denied { call, .. }
            | Prepared::Answered { call, .. } => call,
        }
    }
}

/// Refuses call `id`, which the model wrote and its provider could not parse (`why`), with
/// `invalid_tool_call`, whatever checking it found: the model is told to write it again.
pub(crate) fn refuse_garbled(prepared: &mut [Prepared], id: &ToolCallId, why: &str) {
    for p in prepared {
        let call = p.call();
        if &call.tool_call_id == id {
            *p = Prepared::Refused {
                call: call.clone(),
                code: "invalid_tool_call",
                message: format!(
                    "the tool call could not be parsed: {why} Write the call again, its \
                     arguments as JSON that matches the tool's schema."
                ),
            };
        }
    }
}

/// The run's failure for a model call that failed: its class, and where and why as the provider
/// or the network said it (the endpoint, the HTTP status, the provider's message, the connection's
/// cause), scrubbed by `redactor` — what the person fixing a key, a URL or a model name needs.
/// Telemetry gets the class only.
pub(crate) fn model_failure(e: &ModelError, redactor: &Redactor) -> RunFailure {
    let code = match e.kind() {
        ModelErrorKind::MalformedStream(_) => FailureCode::MalformedModelOutput,
        _ => FailureCode::ProviderError,
    };
    let said = match (e.detail(), e.kind()) {
        (Some(detail), _) => detail.to_string(),
        (None, ModelErrorKind::StreamError { message, .. }) => {
            CallDetail::default().message(message).to_string()
        }
        _ => String::new(),
    };
    let mut message = format!("the model call failed ({})", e.code());
    if !said.is_empty() {
        message.push_str(": ");
        message.push_str(&redactor.redact(&said));
    }
    RunFailure { code, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_failure_says_where_and_why_with_secrets_scrubbed() {
        let e = ModelError::from(ModelErrorKind::Authentication)
            .with_detail(
                CallDetail::default()
                    .status(401)
                    .message("Incorrect API key provided: sk-proj-abcdefghijklmnopqrstuvwxyz0123."),
            )
            .at("POST", "https://api.openai.com/v1/chat/completions?key=q");
        let failure = model_failure(&e, &Redactor::default());
        assert_eq!(failure.code, FailureCode::ProviderError);
        assert_eq!(
            failure.message,
            "the model call failed (authentication): POST \
             https://api.openai.com/v1/chat/completions: HTTP 401: Incorrect API key provided: \
             [REDACTED]."
        );
        // An error inside a stream says the provider's words; a bare class says only itself.
        let mid = ModelError::from(ModelErrorKind::StreamError {
            message: "overloaded_error: Overloaded".into(),
            retryable: true,
        });
        assert_eq!(
            model_failure(&mid, &Redactor::default()).message,
            "the model call failed (stream_error): overloaded_error: Overloaded"
        );
        let bare = ModelError::from(ModelErrorKind::Timeout);
        assert_eq!(
            model_failure(&bare, &Redactor::default()).message,
            "the model call failed (timeout)"
        );
    }
}
