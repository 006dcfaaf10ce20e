//! What happens to documents outside a drafting run, and the flag's work as a durable Forge run.
//!
//! Both workflows publish through [`publish`], under [`delivery_key`] (tenant and document), so
//! the service records one post per document whichever workflow, retry or replay reaches it.
//! [`Documents::settle`] gives a drafting document whose run ended the state a person can act on.
//!
//! Turning the flag is work that must finish even if the process dies halfway: every drafting
//! run is asked to cancel and every unpublished document goes through the legacy workflow. So it
//! is not done in the request: the request records the flag and runs the [`APPLY_FLAG`] job on
//! Forge's queue ([`forge::Job`]), waiting for its answer. If the process is killed mid-way, a
//! worker (this process restarted, or another) takes the job over once its lease lapses and
//! applies the flag again — each step is safe to repeat (a cancel asked twice, a post under its
//! key), so nothing is stranded and nothing is posted twice.
//!
//! Routing a dropped document is a job too ([`ROUTE`]): the drop records the document and runs
//! the job, which claims the document (`new` → `routing`, by the job's run id), then publishes it
//! the legacy way or starts its draft — the draft's thread and run under keys derived from the
//! job and the thread, so a job taken over after a crash finds what its first attempt made. A
//! document whose drop died before its job was queued stays `new`: the next start queues a job
//! for it ([`Documents::stranded_jobs`]), and dropping it again does the same.

use std::sync::{Arc, OnceLock};

use forge::core::interaction::{Decision, InteractionStatus};
use forge::core::part::Part;
use forge::core::ports::store::{NewRun, NewThread};
use forge::core::ports::tool::{ToolContext, ToolError};
use forge::core::run::RunStatus;
use forge::core::scope::Scope;
use forge::engine::Engine;
use serde::{Deserialize, Serialize};

use crate::app::{AppError, drafter, forge};
use crate::client::{PublisherClient, delivery_key};
use crate::db::{AppDb, Document, Workflow};
use crate::publisher::PostRequest;

/// The job that applies a tenant's flag to every unpublished document.
pub const APPLY_FLAG: &str = "apply_flag";
/// The job that sends a recorded document down its tenant's workflow.
pub const ROUTE: &str = "route_document";

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

    /// The [`APPLY_FLAG`] job over these documents, for administrators (the policies'
    /// `flags.apply` permission). It takes nothing: the flag is the tenant's, as recorded.
    pub(crate) fn apply_flag_job(&self) -> forge::Job {
        let documents = self.clone();
        forge::Job::new(APPLY_FLAG, move |ctx: ToolContext, _input| {
            let documents = documents.clone();
            async move {
                let change = documents
                    .apply_flag(&ctx.scope)
                    .await
                    .map_err(|e| ToolError::Unavailable(e.to_string()))?;
                serde_json::to_value(change).map_err(|e| ToolError::Failed(e.to_string()))
            }
        })
        .permission("flags.apply")
    }

    /// Sends the document `id` of `scope`'s tenant down the tenant's workflow, as the routing
    /// job `job` (its run id): only once it holds the claim, and again after a takeover, where a
    /// draft its first attempt started is found, not started twice.
    pub(crate) async fn route(&self, scope: &Scope, id: &str, job: &str) -> Result<(), AppError> {
        let tenant = scope.tenant_id().as_str();
        let claimed = self.db.claim_routing(tenant, id, job).await?;
        let Some(doc) = self.db.document(tenant, id).await? else {
            return Ok(());
        };
        // A draft whose run was not recorded yet (its router died between the two) is resumed
        // on the thread it recorded; anything else someone else routes, or routed.
        let resumable = doc.status == "drafting" && doc.run_id.as_deref() == Some("");
        if !claimed && !resumable {
            return Ok(());
        }
        match self.db.workflow(tenant).await? {
            Workflow::Legacy => self.publish_legacy(&doc).await,
            Workflow::Agent => self.start_drafting(scope, &doc, job).await,
        }
    }

    /// Starts `doc`'s draft for the routing job `job`: a thread (the one recorded, or one made
    /// under the job's key), recorded before the run exists — `publish_post` finds its document
    /// by thread — then the run under the thread's key, then the run recorded.
    async fn start_drafting(
        &self,
        scope: &Scope,
        doc: &Document,
        job: &str,
    ) -> Result<(), AppError> {
        let engine = self.engine()?;
        let recorded = doc.thread_id.as_deref().and_then(|t| t.parse().ok());
        let thread = match recorded {
            Some(thread) => thread,
            None => {
                let new = NewThread {
                    title: Some(format!("Post: {}", doc.title)),
                    ..Default::default()
                };
                engine
                    .thread_by_key(scope, &format!("draft-thread:{job}"), new)
                    .await
                    .map_err(forge)?
                    .id
            }
        };
        let tenant = &doc.tenant;
        self.db
            .set_drafting(tenant, &doc.id, &thread.to_string(), "")
            .await?;
        let new = NewRun::new(
            thread,
            drafter().agent,
            vec![Part::text(format!(
                "Draft a post for document {}: {}",
                doc.id, doc.title
            ))],
        );
        let run = match engine
            .claim_run_key(scope, &format!("draft:{thread}"), new)
            .await
            .map_err(forge)?
        {
            forge::engine::KeyedRun::Found(run) => run.id,
            forge::engine::KeyedRun::Claimed(new) => {
                engine.submit(scope, new).await.map_err(forge)?.id
            }
        };
        self.db
            .set_drafting(tenant, &doc.id, &thread.to_string(), &run.to_string())
            .await?;
        Ok(())
    }

    /// The [`ROUTE`] job over these documents, for editors (the policies' `documents.route`
    /// permission). Input: `{"id": document id}`.
    pub(crate) fn route_job(&self) -> forge::Job {
        let documents = self.clone();
        forge::Job::new(ROUTE, move |ctx: ToolContext, input| {
            let documents = documents.clone();
            async move {
                let id = input["id"]
                    .as_str()
                    .ok_or_else(|| ToolError::InvalidInput("id is a document id".into()))?;
                let job = ctx.run_id.to_string();
                if let Err(e) = documents.route(&ctx.scope, id, &job).await {
                    // Not left half-routed: new again, for the next start or drop.
                    let tenant = ctx.scope.tenant_id().as_str();
                    let _ = documents.db.release_routing(tenant, id, &job).await;
                    return Err(ToolError::Unavailable(e.to_string()));
                }
                Ok(serde_json::json!({ "routed": id }))
            }
        })
        .permission("documents.route")
    }

    /// A routing job for every document recorded but never routed, queued as its editor (the
    /// drop's process died first): `(document, tenant)` of each queued.
    pub(crate) async fn stranded_jobs(
        &self,
        jobs: &forge::Jobs,
    ) -> Result<Vec<(String, String)>, AppError> {
        let mut queued = Vec::new();
        for doc in self.db.stranded().await? {
            let scope = Scope::parse(&doc.tenant, &doc.submitted_by, &["editor"])
                .map_err(|e| AppError::Config(e.to_string()))?;
            jobs.enqueue(&scope, ROUTE, serde_json::json!({ "id": doc.id }), None)
                .await
                .map_err(forge)?;
            queued.push((doc.id, doc.tenant));
        }
        Ok(queued)
    }
}
