//! What happens to documents outside a drafting run, and the flag's work as a durable Forge run.
//!
//! Both workflows publish through [`publish`], under [`delivery_key`] (tenant and document), so
//! the service records one post per document whichever workflow, retry or replay reaches it.
//! [`Documents::settle`] gives a drafting document whose run ended the state a person can act on.
//!
//! Turning the flag is work that must finish even if the process dies halfway: every drafting
//! run is asked to cancel and every unpublished document goes through the legacy workflow. So it
//! is not done in the request: the request records the flag and starts a run of the [`FLAG`]
//! agent, whose one tool, [`APPLY_FLAG`], does the work and reports it. The run executes in the
//! process that asked (the answer waits for it) and, like every Forge run, is on Forge's queue:
//! if that process is killed mid-way, a worker (this process restarted, or another) takes the run
//! over once its lease lapses and applies the flag again — each step is safe to repeat (a
//! cancel asked twice, a post under its key), so nothing is stranded and nothing is posted twice.

use std::sync::{Arc, OnceLock};

use forge::core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge::core::interaction::{Decision, InteractionStatus};
use forge::core::ports::tool::{ToolClassification, ToolContext, ToolError};
use forge::core::run::RunStatus;
use forge::core::scope::Scope;
use forge::engine::{Engine, native_tool};
use serde::{Deserialize, Serialize};

use crate::app::{AppError, forge};
use crate::client::{PublisherClient, delivery_key};
use crate::db::{AppDb, Document, Workflow};
use crate::publisher::PostRequest;

/// The flag agent's name.
pub const FLAG: &str = "flag";
/// Its tool: applies the tenant's flag to every unpublished document.
pub const APPLY_FLAG: &str = "apply_flag";

/// The flag agent's scripted model: apply the flag, then report what the tool did.
pub const FLAG_SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ name = "apply_flag", input = {} }]
[[conversation.turn]]
text = ["{{tool_result}}"]
"#;

/// The flag agent's definition.
pub fn flag_agent() -> AgentDefinition {
    AgentDefinition {
        agent: AgentRef {
            name: FLAG.into(),
            version: "1".into(),
        },
        instructions: "Apply the tenant's workflow flag with apply_flag and report its answer."
            .into(),
        model: format!("scripted:{FLAG}"),
        tools: vec![APPLY_FLAG.into()],
        skills: vec![],
        output_schema: None,
        limits: RunLimits {
            max_steps: 3,
            ..RunLimits::default()
        },
        approvals: Default::default(),
        compaction: None,
    }
}

/// What turning a tenant's flag did.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FlagChange {
    /// The workflow before.
    pub from: Option<Workflow>,
    /// The workflow now.
    pub to: Option<Workflow>,
    /// Drafting runs asked to cancel.
    pub cancelled: Vec<String>,
    /// Documents the legacy workflow published.
    pub republished: Vec<String>,
    /// Documents still unpublished (the service could not be reached): tried again on the
    /// next change or drop.
    pub pending: Vec<String>,
}

/// The legacy workflow's post: the title and the document's first sentence.
pub fn legacy_text(doc: &Document) -> String {
    let paragraph = doc
        .body
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("");
    let sentence = paragraph
        .find(". ")
        .map_or(paragraph, |end| &paragraph[..=end]);
    format!("{}: {}", doc.title, sentence.trim())
}

/// One document's post, through either workflow: delivered under the document's key and
/// recorded.
pub(crate) async fn publish(
    db: &AppDb,
    publisher: &PublisherClient,
    doc: &Document,
    text: String,
    via: Workflow,
) -> Result<serde_json::Value, crate::client::PublishError> {
    let post = PostRequest {
        account: doc.tenant.clone(),
        document: doc.id.clone(),
        text,
        sources: vec![format!("{}@{}", doc.id, doc.version)],
        publish_at: doc
            .publish_at
            .as_deref()
            .and_then(crate::db::parse_publish_at),
        via: via.as_str().to_owned(),
    };
    let delivery = publisher
        .publish(&delivery_key(&doc.tenant, &doc.id), &post)
        .await?;
    // A failure to record is not a failure to publish: the next attempt replays the delivery.
    let _ = db
        .set_published(&doc.tenant, &doc.id, via, &delivery.id)
        .await;
    Ok(serde_json::json!({
        "delivery": delivery.id,
        "status": delivery.status,
        "replayed": delivery.replayed,
    }))
}

/// [`APPLY_FLAG`] takes nothing: the flag is the tenant's, as recorded.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct NoInput {}

/// The documents' side of ShareFlow, shared by the application and the flag's tool: its
/// database, the publishing service, and Forge's engine (set once it is built, since the tool
/// is part of it).
#[derive(Clone)]
pub(crate) struct Documents {
    pub(crate) db: AppDb,
    pub(crate) publisher: PublisherClient,
    pub(crate) engine: Arc<OnceLock<Arc<Engine>>>,
}

impl Documents {
    fn engine(&self) -> Result<&Arc<Engine>, AppError> {
        self.engine
            .get()
            .ok_or_else(|| AppError::Config("the engine is not built yet".into()))
    }

    /// Publishes `doc` by the legacy workflow; a document the service could not take is marked
    /// `failed` (tried again on the next flag change or drop).
    pub(crate) async fn publish_legacy(&self, doc: &Document) -> Result<(), AppError> {
        let posted = publish(
            &self.db,
            &self.publisher,
            doc,
            legacy_text(doc),
            Workflow::Legacy,
        )
        .await;
        if posted.is_err() {
            self.db.set_failed(&doc.tenant, &doc.id).await?;
        }
        Ok(())
    }

    /// Gives a drafting document whose run has ended the state a person can act on: `rejected`
    /// (a reviewer, or the approval's deadline, said no), `cancelled`, or `failed` (the run
    /// failed, or ended without the post being recorded — a rollback or a new drop retries
    /// it, under the same delivery key). A run still going, or a document no longer drafting,
    /// is left alone. Returns whether it changed the document.
    pub(crate) async fn settle(&self, doc: &Document) -> Result<bool, AppError> {
        if doc.status != "drafting" {
            return Ok(false);
        }
        let Some(run_id) = doc.run_id.as_deref().and_then(|r| r.parse().ok()) else {
            return Ok(false);
        };
        let scope = Scope::parse(&doc.tenant, "shareflow", &["system"])
            .map_err(|e| AppError::Config(e.to_string()))?;
        let engine = self.engine()?;
        let run = engine.runs().get_run(&scope, run_id).await.map_err(forge)?;
        let ended = match run.status {
            RunStatus::Cancelled => "cancelled",
            RunStatus::Completed | RunStatus::Failed => {
                let refused = engine
                    .run_interactions(&scope, run_id)
                    .await
                    .map_err(forge)?
                    .iter()
                    .any(|i| {
                        i.status == InteractionStatus::Expired
                            || i.resolution
                                .as_ref()
                                .is_some_and(|r| matches!(r.decision, Decision::Reject { .. }))
                    });
                if refused { "rejected" } else { "failed" }
            }
            _ => return Ok(false),
        };
        Ok(self.db.end_draft(&doc.tenant, &doc.id, ended).await?)
    }

    /// Applies the tenant's flag, as it stands, to every unpublished document: a draft that
    /// ended is settled first (what a reviewer rejected is never posted by the other workflow
    /// behind their back); on the legacy workflow every drafting run is asked to cancel and its
    /// document published the legacy way, under the key its agent post would have used; legacy
    /// documents whose publish failed are tried again whichever way the flag stands. Safe to
    /// repeat: what it did once it finds done.
    pub(crate) async fn apply_flag(&self, scope: &Scope) -> Result<FlagChange, AppError> {
        let tenant = scope.tenant_id().as_str();
        let workflow = self.db.workflow(tenant).await?;
        let mut change = FlagChange {
            to: Some(workflow),
            ..FlagChange::default()
        };
        for doc in self.db.unpublished(tenant).await? {
            self.settle(&doc).await?;
            let Some(doc) = self.db.document(tenant, &doc.id).await? else {
                continue;
            };
            if doc.status == "rejected" || doc.status == "cancelled" {
                continue;
            }
            let drafting = doc.status == "drafting";
            if drafting && workflow == Workflow::Agent {
                continue;
            }
            if let Some(run) = doc.run_id.as_deref().and_then(|r| r.parse().ok())
                && self
                    .engine()?
                    .runs()
                    .request_cancel(scope, run)
                    .await
                    .map_err(forge)?
            {
                change.cancelled.push(doc.id.clone());
            }
            self.publish_legacy(&doc).await?;
            match self.db.document(tenant, &doc.id).await? {
                Some(d) if d.status == "published" => change.republished.push(doc.id),
                _ => change.pending.push(doc.id),
            }
        }
        Ok(change)
    }

    /// The [`APPLY_FLAG`] tool over these documents, for administrators' flag runs.
    pub(crate) fn apply_flag_tool(&self) -> impl forge::core::ports::tool::Tool + use<> {
        let documents = self.clone();
        native_tool(
            APPLY_FLAG,
            "Applies the tenant's workflow flag to every unpublished document and reports what \
             it did. Safe to repeat.",
            move |ctx: ToolContext, _input: NoInput| {
                let documents = documents.clone();
                async move {
                    let change = documents
                        .apply_flag(&ctx.scope)
                        .await
                        .map_err(|e| ToolError::Unavailable(e.to_string()))?;
                    serde_json::to_value(change).map_err(|e| ToolError::Failed(e.to_string()))
                }
            },
        )
        .classification(ToolClassification::Write)
        .permission("flags.apply")
    }
}
