//! What an `Engine` is made of, one concern to a part: where it records
//! ([`Stores`]), what runs may use ([`Catalog`]), what decides what a run may do ([`Guards`]),
//! the process services every component takes ([`Services`]) and this process's executions
//! ([`Local`]). Only `Services` is read outside the engine's own modules (by the step and the
//! worker, through `Engine::services`); the rest is reached through the engine's methods and
//! the components it builds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use forge_core::agent::AgentDefinition;
use forge_core::id::IdGenerator;
use forge_core::metering::Prices;
use forge_core::ports::interaction::InteractionStore;
use forge_core::ports::model::ModelProvider;
use forge_core::ports::policy::Authorizer;
use forge_core::ports::store::{RunStore, ThreadStore};
use forge_core::ports::tool::ApprovalRule;
use forge_core::ports::usage::UsageLedger;
use forge_core::time::Clock;

use crate::meter::Quotas;
use crate::tools::ToolRegistry;

/// The storage ports the engine records through.
pub(crate) struct Stores {
    pub(super) threads: Arc<dyn ThreadStore>,
    pub(super) runs: Arc<dyn RunStore>,
    pub(super) interactions: Arc<dyn InteractionStore>,
    pub(super) ledger: Arc<dyn UsageLedger>,
    pub(super) erasure: Arc<dyn forge_core::ports::erasure::DataErasure>,
    /// Request keys (none: keyed requests are refused).
    pub(super) keys: Option<Arc<dyn forge_core::ports::keys::RequestKeys>>,
    /// Where configuration changes are recorded (none: not recorded).
    pub(super) audit: Option<Arc<dyn forge_core::ports::audit::AuditLog>>,
}

/// What runs may use: the agents, models and tools registered, the skills, the citation check
/// and the stored files, and what calls cost.
pub(crate) struct Catalog {
    pub(super) agents: HashMap<(String, String), Arc<AgentDefinition>>,
    pub(super) models: HashMap<String, Arc<dyn ModelProvider>>,
    pub(super) tools: ToolRegistry,
    pub(super) skills: Arc<crate::skills::SkillLibrary>,
    /// Checks citations before they are committed; without it there is no `cite` tool.
    pub(super) citations: Option<Arc<dyn forge_core::ports::citation::CitationCheck>>,
    /// Stored files runs may be given; without it a file part is refused.
    pub(super) files: Option<Arc<dyn forge_core::ports::files::FileContents>>,
    pub(super) prices: Prices,
    pub(super) quotas: Quotas,
}

/// What decides what a run may do beyond its agent's definition.
pub(crate) struct Guards {
    pub(super) authorizer: Arc<dyn Authorizer>,
    pub(super) approval_rule: Option<Arc<dyn ApprovalRule>>,
    /// Whether a person may approve an external write in a run they started.
    pub(super) allow_self_approval: bool,
}

/// The process services every component takes.
pub(crate) struct Services {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdGenerator>,
    /// Scrubs secrets from everything a run records or shows.
    pub(crate) redactor: forge_core::redact::Redactor,
    /// Spans, metrics and logs (no-op unless set).
    pub(crate) telemetry: forge_core::telemetry::Telemetry,
}

/// This process's executions.
pub(crate) struct Local {
    pub(super) worker_id: String,
    pub(super) lease_ttl: Duration,
    /// How often an executing run polls for a cancel requested through another process.
    pub(super) cancel_poll: Duration,
    /// The process's own settings, for the configuration's audit record.
    pub(super) settings: serde_json::Value,
    /// The runs executing here, each stoppable at once by a cancel requested here.
    pub(super) cancels: crate::cancels::Cancels,
    /// Signalled when this engine queued work (a run submitted, a run resumed by a decision):
    /// this process's idle workers claim it at once instead of at their next poll.
    pub(super) work: Arc<tokio::sync::Notify>,
}
