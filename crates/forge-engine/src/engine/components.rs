//! What the engine hands the rest of the crate: the process services, the few parts the step
//! and the worker read directly, and the components of a run it builds over its parts (the
//! `Meter`, the `Compactor`, the `ToolExecutor`, the `ApprovalGate`).

use std::sync::Arc;
use std::time::Duration;

use forge_core::agent::{AgentDefinition, RunLimits};
use forge_core::ports::interaction::InteractionStore;
use forge_core::ports::model::ModelProvider;
use forge_core::ports::policy::Authorizer;
use forge_core::ports::usage::UsageLedger;
use forge_core::scope::Scope;
use tokio_util::sync::CancellationToken;

use super::Engine;
use super::parts::Services;
use crate::compaction::Compactor;
use crate::executor::ToolExecutor;
use crate::hitl::ApprovalGate;
use crate::meter::Meter;

impl Engine {
    /// The process services every component takes: clock, ids, redactor, telemetry.
    pub(crate) fn services(&self) -> &Services {
        &self.services
    }

    /// The model provider registered as `name`.
    pub(crate) fn model(&self, name: &str) -> Option<&Arc<dyn ModelProvider>> {
        self.catalog.models.get(name)
    }

    /// The registered tool `name`, with its validator.
    pub(crate) fn tool(&self, name: &str) -> Option<&crate::tools::Registered> {
        self.catalog.tools.get(name)
    }

    /// The policy port, for decisions the step makes itself (a skill's use).
    pub(crate) fn authorizer(&self) -> &dyn Authorizer {
        self.guards.authorizer.as_ref()
    }

    /// Stored files runs may be given.
    pub(crate) fn files(&self) -> Option<&dyn forge_core::ports::files::FileContents> {
        self.catalog.files.as_deref()
    }

    /// The interaction store (the worker's sweep expires interactions through it).
    pub(crate) fn interaction_store(&self) -> &dyn InteractionStore {
        self.stores.interactions.as_ref()
    }

    /// The usage ledger (the worker's sweep releases orphaned reservations through it).
    pub(crate) fn ledger(&self) -> &dyn UsageLedger {
        self.stores.ledger.as_ref()
    }

    /// The holder name and lease time this process claims runs with.
    pub(crate) fn holder(&self) -> (&str, Duration) {
        (&self.local.worker_id, self.local.lease_ttl)
    }

    /// Signalled when this engine queued work its idle workers should claim at once.
    pub(crate) fn work(&self) -> &tokio::sync::Notify {
        &self.local.work
    }

    /// The meter of a run of `scope` within `limits`: the engine's prices, quotas and ledger.
    pub(crate) fn meter<'a>(&'a self, scope: &'a Scope, limits: &'a RunLimits) -> Meter<'a> {
        Meter {
            scope,
            limits,
            prices: &self.catalog.prices,
            quotas: &self.catalog.quotas,
            ledger: self.stores.ledger.as_ref(),
            clock: self.services.clock.as_ref(),
            ids: self.services.ids.as_ref(),
            telemetry: &self.services.telemetry,
        }
    }

    /// The compactor of a run of `agent` in `scope`, metering its calls with the run's meter.
    pub(crate) fn compactor<'a>(
        &'a self,
        scope: &'a Scope,
        agent: &'a AgentDefinition,
        cancel: &'a CancellationToken,
    ) -> Compactor<'a> {
        Compactor {
            scope,
            agent,
            models: &self.catalog.models,
            meter: self.meter(scope, &agent.limits),
            runs: self.stores.runs.as_ref(),
            redactor: &self.services.redactor,
            clock: self.services.clock.as_ref(),
            ids: self.services.ids.as_ref(),
            telemetry: &self.services.telemetry,
            cancel,
        }
    }

    /// The tool executor of a run in `scope` within `limits`.
    pub(crate) fn executor<'a>(
        &'a self,
        scope: &'a Scope,
        limits: &'a RunLimits,
        cancel: &'a CancellationToken,
    ) -> ToolExecutor<'a> {
        ToolExecutor {
            scope,
            limits,
            tools: &self.catalog.tools,
            citations: self.catalog.citations.is_some(),
            redactor: &self.services.redactor,
            telemetry: &self.services.telemetry,
            runs: self.stores.runs.as_ref(),
            clock: self.services.clock.as_ref(),
            cancel,
        }
    }

    /// The approval gate of a run of `agent` in `scope`.
    pub(crate) fn approvals<'a>(
        &'a self,
        scope: &'a Scope,
        agent: &'a AgentDefinition,
    ) -> ApprovalGate<'a> {
        ApprovalGate {
            scope,
            agent,
            tools: &self.catalog.tools,
            rule: self.guards.approval_rule.as_deref(),
            clock: self.services.clock.as_ref(),
            ids: self.services.ids.as_ref(),
            redactor: &self.services.redactor,
        }
    }
}
