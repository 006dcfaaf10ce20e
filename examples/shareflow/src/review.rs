//! What a reviewer sees before approving a post: the document it is for (title, id, the version
//! drafted from, who dropped it, when it goes live), the stage the approval moves it to, and the
//! post itself as the text the feed gains — beside the tool's exact input that Forge shows.

use std::sync::Arc;

use forge::core::interaction::ApprovalPreview;
use forge::core::ports::tool::{ApprovalPreviewer, ToolError};
use forge::core::text::prefix_chars;
use forge::engine::preview_fn;
use serde::Deserialize;

use forge::core::id::ThreadId;
use forge::core::scope::Scope;

use crate::db::{AppDb, Document};

/// The part of `publish_post`'s input the preview shows.
#[derive(Debug, Deserialize)]
struct Post {
    text: String,
}

/// The document the drafting thread `thread` of `scope`'s tenant is for.
pub(crate) async fn drafted_document(
    db: &AppDb,
    scope: &Scope,
    thread: ThreadId,
) -> Result<Document, ToolError> {
    db.document_of_thread(scope.tenant_id().as_str(), &thread.to_string())
        .await
        .map_err(|e| ToolError::Unavailable(e.to_string()))?
        .ok_or_else(|| ToolError::Failed("this thread drafts no document".into()))
}

/// The previewer of `publish_post`: the drafting thread's document and the post.
pub(crate) fn publish_preview(db: AppDb) -> Arc<dyn ApprovalPreviewer> {
    preview_fn(move |ctx, post: Post| {
        let db = db.clone();
        async move {
            let doc = drafted_document(&db, &ctx.scope, ctx.thread_id).await?;
            let hash = doc.version.strip_prefix("sha256:").unwrap_or(&doc.version);
            let preview = ApprovalPreview::new(if doc.status == "published" {
                format!(
                    "“{}” is already published: approving posts nothing",
                    doc.title
                )
            } else {
                format!(
                    "Publish the post for “{}” to {}'s feed",
                    doc.title, doc.tenant
                )
            })
            .fact("Document", format!("{} ({})", doc.title, doc.id))
            .fact("Version", prefix_chars(hash, 12))
            .fact("Dropped by", &doc.submitted_by)
            .fact("Stage", format!("{} → published", doc.status))
            .fact("Goes live", doc.publish_at.as_deref().unwrap_or("at once"));
            Ok(if doc.status == "published" {
                preview
            } else {
                preview.change("", post.text)
            })
        }
    })
}
