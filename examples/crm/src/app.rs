//! The CRM on Forge: an assistant whose records come from the CRM's own MCP server (imported
//! with `forge-mcp`, pinned by `mcp/mcp.lock`), whose notes are retrieval sources cited by exact
//! span, and whose record updates are external writes a manager approves. Cedar decides who sees
//! which pipeline and which notes.

use std::path::Path;
use std::sync::Arc;

use forge::Forge;
use forge::core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge::core::interaction::ApprovalPreview;
use forge::core::ports::policy::PolicyDecision;
use forge::core::ports::tool::{ApprovalPreviewer, ToolError};
use forge::core::scope::Scope;
use forge::engine::{Engine, Skill, SkillLibrary, preview_fn};
use forge::mcp::{CatalogDiff, LockFile, McpConfig, McpRuntime, Reporter};
use forge::policy::{AppRequest, CedarAuthorizer};
use forge::providers::{Script, ScriptedProvider};
use forge::rag::ingest::ingest;
use forge::rag::model::{Format, SourceId};
use forge::rag::{Retriever, SearchDocuments};

use crate::db::{CrmDb, Note, Opportunity};

/// The assistant's scripted model turns.
pub const ASSISTANT_SCRIPT: &str = include_str!("../agents/assistant.script.toml");
/// The CRM's Cedar policies.
pub const POLICIES: &str = include_str!("../policies/crm.cedar");
/// The MCP server's import configuration (tool classifications and approvals).
pub const MCP_CONFIG: &str = include_str!("../mcp/crm.toml");
/// The tenant the CRM belongs to.
pub const TENANT: &str = "acme";

/// The MCP server's pins, compiled in (`forge mcp pin` rewrites `mcp/mcp.lock` in the
/// checkout): the binary reads no pins from the machine it was built on.
pub const MCP_LOCK: &str = include_str!("../mcp/mcp.lock");
/// The deal-stages skill's manifest, compiled in.
pub const DEAL_STAGES_SKILL: &str = include_str!("../skills/deal-stages/SKILL.md");

/// The MCP tool that moves an opportunity to another stage, as Forge names it.
pub const UPDATE_OPPORTUNITY: &str = "crm__update_opportunity";

/// An opportunity as the lines of a record a person compares.
fn record_lines(o: &Opportunity) -> String {
    format!(
        "name: {}\ncompany: {}\nowner: {}\nstage: {}\namount: {}",
        o.name, o.company, o.owner, o.stage, o.amount
    )
}

/// The input of [`UPDATE_OPPORTUNITY`].
#[derive(Debug, serde::Deserialize)]
struct StageChange {
    id: String,
    stage: String,
}

/// What a manager asked to approve a stage change sees: the opportunity, its company, owner and
/// amount, the stage it leaves and the one it enters, and the record before and after.
fn stage_change_preview(db: CrmDb) -> Arc<dyn ApprovalPreviewer> {
    preview_fn(move |_ctx, change: StageChange| {
        let db = db.clone();
        async move {
            let now = db
                .opportunity(&change.id)
                .await
                .map_err(|e| ToolError::Unavailable(e.to_string()))?
                .ok_or_else(|| ToolError::Failed(format!("no opportunity {}", change.id)))?;
            let after = Opportunity {
                stage: change.stage.clone(),
                ..now.clone()
            };
            Ok(ApprovalPreview::new(format!(
                "Move {} ({}) from {} to {}",
                now.name, now.id, now.stage, change.stage
            ))
            .fact("Opportunity", format!("{} ({})", now.name, now.id))
            .fact("Company", &now.company)
            .fact("Owner", &now.owner)
            .fact("Amount", now.amount.to_string())
            .fact("Stage", format!("{} → {}", now.stage, change.stage))
            .change(record_lines(&now), record_lines(&after)))
        }
    })
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum CrmError {
    /// Configuration (policies, script, MCP, skills) did not load.
    #[error("configuration: {0}")]
    Config(String),
    /// The CRM's database failed.
    #[error("the CRM database: {0}")]
    Db(#[from] sqlx::Error),
    /// Forge refused or failed.
    #[error("forge: {0}")]
    Forge(String),
    /// The request is malformed.
    #[error("{0}")]
    Invalid(String),
    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The policies do not let the caller do it.
    #[error("{0}")]
    Forbidden(String),
}

fn config(e: impl std::fmt::Display) -> CrmError {
    CrmError::Config(e.to_string())
}

/// The assistant's definition.
pub fn assistant() -> AgentDefinition {
    AgentDefinition {
        agent: AgentRef {
            name: "assistant".into(),
            version: "1".into(),
        },
        instructions: "You help the sales team with the CRM. Read records with the crm tools, \
                       answer from the notes only with a citation of the exact passage, and \
                       change a record only when asked, with crm__update_opportunity (a manager \
                       approves it). Load the deal-stages skill before changing a stage."
            .into(),
        model: "scripted:assistant".into(),
        tools: [
            "search_documents",
            "cite",
            "crm__list_opportunities",
            "crm__get_company",
            "crm__list_tasks",
            UPDATE_OPPORTUNITY,
        ]
        .map(String::from)
        .to_vec(),
        skills: vec!["deal-stages".into()],
        output_schema: None,
        limits: RunLimits {
            max_steps: 6,
            ..RunLimits::default()
        },
        approvals: Default::default(),
        compaction: None,
    }
}

/// MCP events, to stderr: a drifted catalog or a server restart is an operator's business.
struct Stderr;

impl Reporter for Stderr {
    fn drift(&self, diff: &CatalogDiff) {
        eprintln!("crm: the MCP server's catalog differs from mcp/mcp.lock: {diff:?}");
    }
    fn down(&self, server: &str, message: &str) {
        eprintln!("crm: MCP server {server} is down ({message}); restarting");
    }
}

/// Starts the CRM's MCP server as `command mcp --db <db>` and imports its pinned tools.
pub async fn import_tools(command: &Path, db: &Path) -> Result<McpRuntime, CrmError> {
    // Nothing in the configuration is a relative path: the base directory is never read.
    let mut mcp = McpConfig::parse(MCP_CONFIG, Path::new(".")).map_err(config)?;
    for server in &mut mcp.servers {
        server.command = Some(command.display().to_string());
        server.args = vec!["mcp".into(), "--db".into(), db.display().to_string()];
    }
    let lock = LockFile::parse("mcp/mcp.lock", MCP_LOCK).map_err(config)?;
    McpRuntime::start(&mcp, &lock, forge::mcp::process_env(), Arc::new(Stderr))
        .await
        .map_err(config)
}

/// The CRM: its database, its MCP tools, and Forge's engine.
pub struct Crm {
    engine: Arc<Engine>,
    policies: Arc<CedarAuthorizer>,
    retriever: Retriever,
    db: CrmDb,
    mcp: McpRuntime,
}

impl std::fmt::Debug for Crm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crm").finish_non_exhaustive()
    }
}

/// The access label of a note's retrieval source: `team`, or `private` for a private note, which
/// is also owned by its author (`resource.owner`: whoever a principal's id is, it is never
/// mistaken for the label).
pub fn note_label(note: &Note) -> &'static str {
    if note.visibility == "private" {
        "private"
    } else {
        "team"
    }
}

impl Crm {
    /// Assembles the CRM's Forge deployment on `stores` (its engine, worker and live streams)
    /// and the CRM around it.
    pub async fn start(
        stores: forge::Stores,
        db: CrmDb,
        mcp: McpRuntime,
    ) -> Result<(Self, Forge), CrmError> {
        let policies =
            Arc::new(CedarAuthorizer::from_sources([("crm.cedar", POLICIES)]).map_err(config)?);
        let retriever = Retriever::new(stores.sources.clone(), policies.clone());
        let script = Script::parse(ASSISTANT_SCRIPT, "assistant").map_err(config)?;
        let (cites, kept, previewed) = (retriever.clone(), policies.clone(), db.clone());
        // Arguments the MCP configuration binds to the caller ("my pipeline" is the caller's).
        let bindings = mcp.bindings().to_vec();
        let mut library = SkillLibrary::new();
        library
            .insert(
                Skill::from_manifest("skills/deal-stages/SKILL.md", DEAL_STAGES_SKILL)
                    .map_err(config)?,
            )
            .map_err(config)?;
        let forge = Forge::builder()
            .stores(stores)
            .agent(assistant())
            .model(ScriptedProvider::new(script))
            .tool(SearchDocuments::new(retriever.clone()))
            .tools(mcp.tools())
            .engine(move |mut engine| {
                for (tool, argument, to) in &bindings {
                    engine = engine.tool_argument(tool, argument, *to)?;
                }
                Ok(engine
                    .approval_preview(UPDATE_OPPORTUNITY, stage_change_preview(previewed))?
                    .skills(library)
                    .citations(Arc::new(cites))
                    .authorizer(policies.clone())
                    .approval_rule(policies))
            })
            .build()
            .await
            .map_err(config)?;
        let crm = Self {
            engine: forge.engine().clone(),
            policies: kept,
            retriever,
            db,
            mcp,
        };
        Ok((crm, forge))
    }

    /// Forge's engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The CRM's database.
    pub fn db(&self) -> &CrmDb {
        &self.db
    }

    /// Retrieval over the notes.
    pub fn retriever(&self) -> &Retriever {
        &self.retriever
    }

    /// The imported MCP tools and their servers.
    pub fn mcp(&self) -> &McpRuntime {
        &self.mcp
    }

    /// Indexes every note for search and citations (unchanged notes are left as they are).
    pub async fn index_notes(&self) -> Result<usize, CrmError> {
        let scope = Scope::parse(TENANT, "crm", &["system"]).map_err(config)?;
        let notes = self.db.notes().await?;
        for note in &notes {
            self.index(&scope, note).await?;
        }
        Ok(notes.len())
    }

    async fn index(&self, scope: &Scope, note: &Note) -> Result<(), CrmError> {
        let source = ingest(
            SourceId::new(note.id.clone()).map_err(|e| CrmError::Invalid(e.to_string()))?,
            format!("Note on {} {}", note.record_kind, note.record_id),
            note_label(note),
            Format::Text,
            serde_json::json!({ "author": note.author, "record": note.record_id }),
            &note.body,
        );
        let source = if note.visibility == "private" {
            source.owned_by(&note.author)
        } else {
            source
        };
        self.retriever
            .index(scope, &source)
            .await
            .map_err(|e| CrmError::Forge(e.to_string()))?;
        Ok(())
    }

    /// The opportunities the caller may read (`Crm::Action::"read_opportunity"`, each decided
    /// on its owner by the policies, as the assistant's `crm__list_opportunities` is).
    pub async fn opportunities(&self, scope: &Scope) -> Result<Vec<Opportunity>, CrmError> {
        if scope.tenant_id().as_str() != TENANT {
            return Ok(Vec::new());
        }
        let mut readable = Vec::new();
        for opportunity in self.db.opportunities(None).await? {
            let decision = self
                .policies
                .decide_app(&AppRequest {
                    scope,
                    namespace: "Crm",
                    action: "read_opportunity",
                    resource_type: "Opportunity",
                    resource_id: &opportunity.id,
                    attributes: &serde_json::json!({ "owner": opportunity.owner }),
                })
                .map_err(config)?;
            if decision.is_allowed() {
                readable.push(opportunity);
            }
        }
        Ok(readable)
    }

    /// Adds a note by the caller and indexes it.
    pub async fn add_note(&self, scope: &Scope, mut note: Note) -> Result<Note, CrmError> {
        if scope.tenant_id().as_str() != TENANT {
            return Err(CrmError::Invalid("this CRM is acme's".into()));
        }
        if !["team", "private"].contains(&note.visibility.as_str()) {
            return Err(CrmError::Invalid("visibility is team or private".into()));
        }
        // Who may add which note is the policies' to say (`Crm::Action::"add_note"`), as who
        // may read it is: no role check here to drift from them.
        let decision = self
            .policies
            .decide_app(&AppRequest {
                scope,
                namespace: "Crm",
                action: "add_note",
                resource_type: "Note",
                resource_id: "new",
                attributes: &serde_json::json!({
                    "visibility": note.visibility,
                    "record_kind": note.record_kind,
                    "record_id": note.record_id,
                }),
            })
            .map_err(config)?;
        if let PolicyDecision::Deny { reason } = decision {
            return Err(CrmError::Forbidden(format!(
                "you may not add this note: {reason}"
            )));
        }
        if note.body.trim().is_empty() || note.body.len() > 20_000 {
            return Err(CrmError::Invalid("a note is 1 to 20,000 bytes".into()));
        }
        if !self
            .db
            .record_exists(&note.record_kind, &note.record_id)
            .await?
        {
            return Err(CrmError::NotFound(format!(
                "no {} {} to add a note to (record_kind is company or opportunity)",
                note.record_kind, note.record_id
            )));
        }
        note.id = format!("note-{}", uuid::Uuid::new_v4().simple());
        note.author = scope.principal_id().as_str().to_owned();
        self.db.add_note(&note).await?;
        self.index(scope, &note).await?;
        Ok(note)
    }
}
