//! The application: a tenant drops documents, and each becomes one post on the publishing
//! service, by the workflow the tenant's flag selects.
//!
//! - **Agent** (the new workflow): a Forge run of the `drafter` agent searches the documents,
//!   cites the sentence the post rests on, and calls `publish_post`, an external write that waits
//!   for a reviewer's approval in Forge's web client.
//! - **Legacy** (the workflow before agents): a template over the document's first sentence,
//!   published at once.
//!
//! Both publish under [`crate::delivery_key`] (tenant and document), so the service records one
//! post per document whichever workflow, retry or replay reaches it. Turning the flag back to
//! legacy ([`ShareFlow::set_workflow`]) is the rollback: drafting runs are cancelled and every
//! document not yet published goes through the legacy workflow under the same key; nothing is
//! lost (every document is published) and nothing is duplicated (the service dedupes by key).
//! The rollback is a Forge run, so it finishes even if this process dies ([`crate::workflow`]).

use std::sync::Arc;

use forge::Forge;
use forge::core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge::core::ports::tool::{ApprovalPolicy, ToolClassification, ToolContext, ToolError};
use forge::core::scope::Scope;
use forge::engine::{Engine, Skill, SkillLibrary, native_tool};
use forge::policy::CedarAuthorizer;
use forge::providers::{Script, ScriptedProvider};
use forge::rag::ingest::ingest;
use forge::rag::model::{Format, SourceId};
use forge::rag::{Retriever, SearchDocuments};
use serde::{Deserialize, Serialize};

use crate::client::PublisherClient;
use crate::db::{AppDb, Document, Workflow};
use crate::review::{drafted_document, publish_preview};
use crate::workflow::{APPLY_FLAG, Documents, FlagChange, ROUTE, publish};

/// The drafting agent's scripted model turns (the deterministic stand-in for a real model).
pub const DRAFTER_SCRIPT: &str = include_str!("../agents/drafter.script.toml");
/// ShareFlow's Cedar policies.
pub const POLICIES: &str = include_str!("../policies/shareflow.cedar");
/// The drafting agent's name.
pub const DRAFTER: &str = "drafter";
/// The publishing tool's name.
pub const PUBLISH_POST: &str = "publish_post";
/// The house-style skill the drafter loads first.
pub const POST_STYLE: &str = "post-style";
/// The label documents are ingested under (the policies let the tenant's people read it).
pub const LABEL: &str = "team";

/// The house-style skill's manifest, compiled in: the binary reads no skill from the machine it
/// was built on (`forge gate --skills skills` reads the same file from the checkout).
pub const POST_STYLE_SKILL: &str = include_str!("../skills/post-style/SKILL.md");

/// ShareFlow's skills: the house style.
pub fn skills() -> Result<SkillLibrary, AppError> {
    let mut library = SkillLibrary::new();
    library
        .insert(
            Skill::from_manifest("skills/post-style/SKILL.md", POST_STYLE_SKILL)
                .map_err(|e| AppError::Config(e.to_string()))?,
        )
        .map_err(|e| AppError::Config(e.to_string()))?;
    Ok(library)
}

/// What went wrong, in terms a caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The request is malformed.
    #[error("{0}")]
    Invalid(String),
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// It conflicts with what exists.
    #[error("{0}")]
    Conflict(String),
    /// ShareFlow's own database failed.
    #[error("the application database: {0}")]
    Db(#[from] sqlx::Error),
    /// Forge refused or failed.
    #[error("forge: {0}")]
    Forge(String),
    /// The policies or the script did not load.
    #[error("configuration: {0}")]
    Config(String),
}

pub(crate) fn forge(e: impl std::fmt::Display) -> AppError {
    AppError::Forge(e.to_string())
}

/// A document as a person drops it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewDocument {
    /// Its id within the tenant: lowercase letters, digits and dashes.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its text (Markdown).
    pub body: String,
    /// When its post should go live (RFC 3339); at once when absent.
    #[serde(default)]
    pub publish_at: Option<String>,
}

/// ShareFlow: its database, Forge's engine, and the publishing service.
pub struct ShareFlow {
    engine: Arc<Engine>,
    jobs: forge::Jobs,
    retriever: Retriever,
    db: AppDb,
    publisher: PublisherClient,
    /// The documents' side, shared with the flag's tool.
    docs: Documents,
}

impl std::fmt::Debug for ShareFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareFlow")
            .field("publisher", &self.publisher.base())
            .finish_non_exhaustive()
    }
}

/// The drafting agent's definition.
pub fn drafter() -> AgentDefinition {
    AgentDefinition {
        agent: AgentRef {
            name: DRAFTER.into(),
            version: "1".into(),
        },
        instructions: "You draft short social posts from the team's documents. Load the \
                       post-style skill, search the documents, cite the exact sentence the post rests on, keep to what \
                       it says, and hand the post to publish_post. Never invent a date, a number \
                       or a claim the documents do not make."
            .into(),
        model: "scripted:drafter".into(),
        tools: vec![
            forge::rag::SEARCH_DOCUMENTS.into(),
            forge::engine::CITE.into(),
            PUBLISH_POST.into(),
        ],
        skills: vec![POST_STYLE.into()],
        output_schema: None,
        limits: RunLimits {
            max_steps: 6,
            ..RunLimits::default()
        },
        approvals: Default::default(),
        compaction: None,
    }
}

/// The input of `publish_post`: the post's text. The document is the drafting thread's own.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct PublishInput {
    /// The post's text, grounded in the cited sentence.
    text: String,
}

impl ShareFlow {
    /// Assembles ShareFlow's Forge deployment on `stores` (threads, runs, approvals, and its
    /// documents for retrieval) — engine, worker and live streams — and ShareFlow around it:
    /// its own `db`, the publishing service's client, and its [`skills`] (the `post-style`
    /// skill). A run a dead process held is taken over `takeover_after` later.
    pub async fn start(
        stores: forge::Stores,
        db: AppDb,
        publisher: PublisherClient,
        takeover_after: std::time::Duration,
    ) -> Result<(Self, Forge), AppError> {
        let library = skills()?;
        let policies = Arc::new(
            CedarAuthorizer::from_sources([("shareflow.cedar", POLICIES)])
                .map_err(|e| AppError::Config(e.to_string()))?,
        );
        let retriever = Retriever::new(stores.sources.clone(), policies.clone());
        let script = Script::parse(DRAFTER_SCRIPT, "drafter")
            .map_err(|e| AppError::Config(e.to_string()))?;
        let docs = Documents {
            db: db.clone(),
            publisher: publisher.clone(),
            engine: Arc::default(),
        };
        let tool = {
            let (db, publisher) = (db.clone(), publisher.clone());
            native_tool(
                PUBLISH_POST,
                "Publishes the post drafted for this thread's document to the publishing service \
                 (once a reviewer approves it). Returns the delivery.",
                move |ctx: ToolContext, input: PublishInput| {
                    let (db, publisher) = (db.clone(), publisher.clone());
                    async move {
                        let doc = drafted_document(&db, &ctx.scope, ctx.thread_id).await?;
                        if doc.status == "published" {
                            return Ok(serde_json::json!({
                                "delivery": doc.delivery_id,
                                "status": "already published",
                                "replayed": true,
                            }));
                        }
                        publish(&db, &publisher, &doc, input.text, Workflow::Agent)
                            .await
                            .map_err(|e| ToolError::Unavailable(e.to_string()))
                    }
                },
            )
            .classification(ToolClassification::ExternalWrite)
            .approval(ApprovalPolicy::Always)
            .permission("posts.publish")
        };
        let (cites, previewed) = (retriever.clone(), db.clone());
        let forge = Forge::builder()
            .stores(stores)
            .agent(drafter())
            .model(ScriptedProvider::new(script))
            .tool(SearchDocuments::new(retriever.clone()))
            .tool(tool)
            .job(docs.apply_flag_job())
            .job(docs.route_job())
            .engine(move |engine| {
                Ok(engine
                    .approval_preview(PUBLISH_POST, publish_preview(previewed))?
                    .lease_ttl(takeover_after)
                    .skills(library)
                    .citations(Arc::new(cites))
                    .authorizer(policies.clone())
                    .approval_rule(policies))
            })
            .build()
            .await
            .map_err(forge)?;
        let _ = docs.engine.set(forge.engine().clone());
        let app = Self {
            engine: forge.engine().clone(),
            jobs: forge.jobs(),
            retriever,
            db,
            publisher,
            docs,
        };
        Ok((app, forge))
    }

    /// Forge's engine (for the server and the worker).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Retrieval over the tenants' documents (the server resolves citations with it).
    pub fn retriever(&self) -> &Retriever {
        &self.retriever
    }

    /// ShareFlow's own database.
    pub fn db(&self) -> &AppDb {
        &self.db
    }

    /// The publishing service's client.
    pub fn publisher(&self) -> &PublisherClient {
        &self.publisher
    }

    /// Drops a document: indexes it for retrieval, records it, and starts its post on the
    /// tenant's workflow. Dropping the same document again returns it as it stands.
    pub async fn drop_document(
        &self,
        scope: &Scope,
        new: NewDocument,
    ) -> Result<Document, AppError> {
        if !scope.has_role("editor") {
            return Err(AppError::Forbidden(
                "only editors drop documents".to_owned(),
            ));
        }
        let id_ok = !new.id.is_empty()
            && new.id.len() <= 64
            && new
                .id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !id_ok {
            return Err(AppError::Invalid(
                "a document id is 1 to 64 lowercase letters, digits and dashes".to_owned(),
            ));
        }
        if new.title.trim().is_empty() || new.title.len() > 200 {
            return Err(AppError::Invalid("a title is 1 to 200 bytes".to_owned()));
        }
        if new.body.trim().is_empty() || new.body.len() > 100_000 {
            return Err(AppError::Invalid(
                "a document's text is 1 to 100,000 bytes".to_owned(),
            ));
        }
        if let Some(at) = &new.publish_at
            && crate::db::parse_publish_at(at).is_none()
        {
            return Err(AppError::Invalid(format!(
                "publish_at is an RFC 3339 time such as 2027-03-14T09:00:00Z, not {at:?}"
            )));
        }
        let tenant = scope.tenant_id().as_str().to_owned();
        let source = ingest(
            SourceId::new(new.id.clone()).map_err(|e| AppError::Invalid(e.to_string()))?,
            new.title.clone(),
            LABEL,
            Format::Markdown,
            serde_json::json!({ "dropped_by": scope.principal_id().as_str() }),
            &new.body,
        );
        let taken = |existing: Document| {
            if existing.version == source.version {
                Ok(existing)
            } else {
                Err(AppError::Conflict(format!(
                    "document {} exists with other text; give the new one its own id",
                    new.id
                )))
            }
        };
        if let Some(existing) = self.db.document(&tenant, &new.id).await? {
            let existing = taken(existing)?;
            // The same text dropped again after its draft failed, was cancelled or rejected:
            // a person is trying again, so it is routed again (a fresh draft, or the legacy
            // post), not answered with the dead run.
            // So is one whose drop died before routing it.
            if existing.status == "new" || self.db.reopen(&tenant, &existing.id).await? {
                return self.route(scope, &tenant, &existing.id).await;
            }
            return Ok(existing);
        }
        let doc = Document {
            tenant: tenant.clone(),
            id: new.id.clone(),
            title: new.title,
            body: new.body,
            version: source.version.clone(),
            publish_at: new.publish_at,
            status: "new".into(),
            via: None,
            thread_id: None,
            run_id: None,
            delivery_id: None,
            submitted_by: scope.principal_id().as_str().to_owned(),
        };
        // The row claims the id before anything is indexed: of drops racing for one id, one
        // inserts and indexes its text; the others find its row, and only the same text is
        // the same document (so the index never holds a version the application does not).
        if !self.db.insert_document(&doc).await? {
            let existing = self
                .db
                .document(&tenant, &doc.id)
                .await?
                .ok_or_else(|| AppError::Conflict("the document vanished".into()))?;
            return taken(existing);
        }
        if let Err(e) = self.retriever.index(scope, &source).await {
            // Not indexed: the id is free again for a retry.
            self.db.delete_document(&tenant, &doc.id).await?;
            return Err(forge(e));
        }
        self.route(scope, &tenant, &doc.id).await
    }

    /// Sends a recorded document down the tenant's workflow by the [`ROUTE`] job (a draft for
    /// review, or the legacy post) and answers it as it then stands. Killed mid-way, the job
    /// finishes on a worker.
    async fn route(&self, scope: &Scope, tenant: &str, id: &str) -> Result<Document, AppError> {
        self.jobs
            .run(scope, ROUTE, serde_json::json!({ "id": id }), None)
            .await
            .map_err(forge)?
            .map_err(|e| AppError::Forge(format!("routing {id} did not finish: {e}")))?;
        self.db
            .document(tenant, id)
            .await?
            .ok_or_else(|| AppError::Conflict("the document vanished".into()))
    }

    /// Queues a routing job for every document whose drop died before routing it (at start).
    pub async fn route_stranded(&self) -> Result<usize, AppError> {
        Ok(self.docs.stranded_jobs(&self.jobs).await?.len())
    }

    /// Gives a drafting document whose run has ended the state a person can act on
    /// (`rejected`, `cancelled` or `failed`); whether it changed the document.
    pub async fn settle(&self, doc: &Document) -> Result<bool, AppError> {
        self.docs.settle(doc).await
    }

    /// Settles the document the run `run` drafts, if any.
    pub async fn settle_run(&self, run: &str) -> Result<bool, AppError> {
        match self.db.document_of_run(run).await? {
            Some(doc) => self.settle(&doc).await,
            None => Ok(false),
        }
    }

    /// Settles every drafting document (at start: runs that ended while this process was not
    /// there to see them).
    pub async fn settle_all(&self) -> Result<usize, AppError> {
        let mut settled = 0;
        for doc in self.db.drafting().await? {
            settled += usize::from(self.settle(&doc).await?);
        }
        Ok(settled)
    }

    /// The tenant's documents.
    pub async fn documents(&self, scope: &Scope) -> Result<Vec<Document>, AppError> {
        Ok(self.db.documents(scope.tenant_id().as_str()).await?)
    }

    /// The tenant's workflow.
    pub async fn workflow(&self, scope: &Scope) -> Result<Workflow, AppError> {
        Ok(self.db.workflow(scope.tenant_id().as_str()).await?)
    }

    /// Turns the tenant's flag and applies it: back to legacy is the rollback (every drafting
    /// run asked to cancel, every unpublished document published by the legacy workflow under
    /// the key its agent post would have used); legacy documents whose publish failed are
    /// tried again whichever way the flag turns. The flag is recorded first, then applied by
    /// the [`APPLY_FLAG`] job on Forge's queue: killed mid-way, the job is taken over and
    /// finishes the work (see [`crate::workflow`]).
    pub async fn set_workflow(
        &self,
        scope: &Scope,
        workflow: Workflow,
    ) -> Result<FlagChange, AppError> {
        if !scope.has_role("admin") {
            return Err(AppError::Forbidden(
                "only administrators turn the workflow flag".to_owned(),
            ));
        }
        let tenant = scope.tenant_id().as_str();
        let from = self
            .db
            .set_workflow(tenant, workflow, scope.principal_id().as_str())
            .await?;
        let failed = |why: String| {
            AppError::Forge(format!(
                "the flag is {} but applying it did not finish ({why}); it is applied again on \
                 the next change",
                workflow.as_str()
            ))
        };
        let answer = self
            .jobs
            .run(
                scope,
                APPLY_FLAG,
                serde_json::json!({ "workflow": workflow.as_str() }),
                None,
            )
            .await
            .map_err(forge)?
            .map_err(|e| failed(e.to_string()))?;
        let applied: FlagChange =
            serde_json::from_value(answer).map_err(|e| failed(e.to_string()))?;
        Ok(FlagChange {
            from: Some(from),
            ..applied
        })
    }

    /// The publishing service's deliveries for the tenant.
    pub async fn posts(&self, scope: &Scope) -> Result<Vec<crate::publisher::Delivery>, AppError> {
        self.publisher
            .deliveries(scope.tenant_id().as_str())
            .await
            .map_err(|e| AppError::Forge(e.to_string()))
    }
}
