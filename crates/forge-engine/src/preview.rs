//! Approval previews: what a person asked to approve a call sees beside its exact input.
//!
//! A tool's previewer ([`ApprovalPreviewer`], registered with
//! [`EngineBuilder::approval_preview`](crate::EngineBuilder::approval_preview)) is asked once, as
//! the approval is raised. Its answer is bounded ([`ApprovalPreview::bounded`]) and scrubbed of
//! secrets like any tool output, then travels with the approval: in the interaction, the
//! step's approval part and the `approval.requested` event. A previewer that fails, or does not
//! answer within [`PREVIEW_TIMEOUT`], never holds up the approval: its preview then only says
//! that there is none and why, by error code (a failure's message may carry content), so the
//! person deciding knows the details are missing rather than absent.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use forge_core::interaction::ApprovalPreview;
use forge_core::ports::tool::{ApprovalPreviewer, PreviewContext, ToolError};
use forge_core::redact::Redactor;
use serde::de::DeserializeOwned;

/// How long a previewer may take before the approval is raised without its preview.
pub const PREVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// A previewer backed by an async function of the call's typed input.
pub struct PreviewFn<I, F> {
    f: F,
    _input: PhantomData<fn(I)>,
}

impl<I, F> std::fmt::Debug for PreviewFn<I, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreviewFn").finish_non_exhaustive()
    }
}

/// Makes a previewer from an async function that takes the call's context and its input as `I`
/// (an input that does not read as `I` gets no preview).
///
/// ```text
/// let preview = preview_fn(|ctx, input: Payment| async move {
///     Ok(ApprovalPreview::new(format!("Pay {} to {}", input.amount, input.payee)))
/// });
/// ```
pub fn preview_fn<I, F, Fut>(f: F) -> Arc<PreviewFn<I, F>>
where
    I: DeserializeOwned + Send + 'static,
    F: Fn(PreviewContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ApprovalPreview, ToolError>> + Send,
{
    Arc::new(PreviewFn {
        f,
        _input: PhantomData,
    })
}

#[async_trait]
impl<I, F, Fut> ApprovalPreviewer for PreviewFn<I, F>
where
    I: DeserializeOwned + Send + 'static,
    F: Fn(PreviewContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ApprovalPreview, ToolError>> + Send,
{
    async fn preview(
        &self,
        ctx: &PreviewContext,
        input: &serde_json::Value,
    ) -> Result<ApprovalPreview, ToolError> {
        let typed: I = serde_json::from_value(input.clone())
            .map_err(|e| ToolError::InvalidInput(e.to_string()))?;
        (self.f)(ctx.clone(), typed).await
    }
}

/// `previewer`'s preview of the call, bounded and scrubbed, or one saying why there is none.
pub(crate) async fn preview_of(
    previewer: &dyn ApprovalPreviewer,
    ctx: &PreviewContext,
    input: &serde_json::Value,
    redactor: &Redactor,
) -> ApprovalPreview {
    let answer = tokio::time::timeout(PREVIEW_TIMEOUT, previewer.preview(ctx, input)).await;
    let mut preview = match answer {
        Ok(Ok(preview)) => preview.bounded(),
        Ok(Err(e)) => {
            return ApprovalPreview::new(format!(
                "No preview: the tool's previewer failed ({}).",
                e.code()
            ));
        }
        Err(_) => {
            return ApprovalPreview::new(format!(
                "No preview: the tool's previewer did not answer within {} s.",
                PREVIEW_TIMEOUT.as_secs()
            ));
        }
    };
    for text in preview.texts_mut() {
        if let std::borrow::Cow::Owned(scrubbed) = redactor.redact(text) {
            *text = scrubbed;
        }
    }
    preview
}
