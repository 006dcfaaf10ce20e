//! The engine's side of discovery (`crate::discovery`): which of its tools and skills a scope
//! may learn about, offered to a model, listed or found by search — each asked of the policy
//! port with `PolicyAction::Discover`.

use std::collections::BTreeSet;

use forge_core::agent::{AgentDefinition, AgentRef};
use forge_core::ports::model::ToolDescriptor;
use forge_core::ports::policy::{PolicyAction, PolicyRequest, PolicyResource};
use forge_core::ports::tool::ToolSpec;
use forge_core::scope::Scope;

use super::Engine;
use crate::discovery::{ToolEntry, ToolSearchHit, search};
use crate::error::EngineError;
use crate::skills::{LOAD_SKILL, RUN_SKILL_SCRIPT, Skill};

impl Engine {
    /// Whether `scope` may learn that `spec` exists.
    pub(crate) fn discoverable(&self, scope: &Scope, spec: &ToolSpec) -> bool {
        self.guards
            .authorizer
            .decide(&PolicyRequest {
                scope,
                action: PolicyAction::Discover,
                resource: PolicyResource::Tool(spec),
                input: None,
            })
            .is_allowed()
    }

    /// The specs of `names` (or of every registered tool) that `scope` may discover, in order.
    fn visible_specs(&self, scope: &Scope, names: Option<&[String]>) -> Vec<&ToolSpec> {
        let specs: Vec<&ToolSpec> = match names {
            Some(names) => names
                .iter()
                .filter_map(|n| self.catalog.tools.get(n))
                .filter(|r| r.tool.available())
                .map(|r| r.tool.spec())
                .collect(),
            None => self.catalog.tools.available_specs().collect(),
        };
        specs
            .into_iter()
            .filter(|s| self.discoverable(scope, s))
            .collect()
    }

    /// The agent's skills that `scope` may discover.
    pub(crate) fn visible_skills(&self, scope: &Scope, agent: &AgentDefinition) -> Vec<&Skill> {
        agent
            .skills
            .iter()
            .filter_map(|n| self.catalog.skills.get(n))
            .filter(|skill| {
                self.guards
                    .authorizer
                    .decide(&PolicyRequest {
                        scope,
                        action: PolicyAction::Discover,
                        resource: PolicyResource::Skill {
                            name: &skill.name,
                            version: &skill.version,
                        },
                        input: None,
                    })
                    .is_allowed()
            })
            .collect()
    }

    /// The tools offered to `agent`'s model under `scope`: its own tools the scope may discover,
    /// plus [`LOAD_SKILL`] when it has a visible skill, plus [`RUN_SKILL_SCRIPT`] when scripts
    /// are enabled and a visible skill has one.
    fn offered_specs(&self, scope: &Scope, agent: &AgentDefinition) -> Vec<&ToolSpec> {
        self.offered_with_skills(scope, agent).0
    }

    /// [`Self::offered_specs`] and the visible skills it was decided from.
    fn offered_with_skills(
        &self,
        scope: &Scope,
        agent: &AgentDefinition,
    ) -> (Vec<&ToolSpec>, Vec<&Skill>) {
        let mut specs = self.visible_specs(scope, Some(&agent.tools));
        let skills = self.visible_skills(scope, agent);
        let mut builtins = Vec::new();
        if !skills.is_empty() {
            builtins.push(LOAD_SKILL.to_owned());
            if self.catalog.skills.scripts_enabled() && skills.iter().any(|s| !s.scripts.is_empty())
            {
                builtins.push(RUN_SKILL_SCRIPT.to_owned());
            }
        }
        specs.extend(self.visible_specs(scope, Some(&builtins)));
        (specs, skills)
    }

    /// The names of the tools `agent`'s model, under `scope`, may call at all (before any input
    /// is checked): what it is offered.
    pub(crate) fn callable(&self, scope: &Scope, agent: &AgentDefinition) -> BTreeSet<String> {
        self.offered_specs(scope, agent)
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    /// What the model is offered: [`Self::offered_specs`], with the visible skills listed in
    /// [`LOAD_SKILL`]'s description.
    pub(crate) fn offered(&self, scope: &Scope, agent: &AgentDefinition) -> Vec<ToolDescriptor> {
        let (specs, skills) = self.offered_with_skills(scope, agent);
        specs
            .into_iter()
            .map(|s| {
                let mut description = s.description.clone();
                if s.name == LOAD_SKILL {
                    for skill in &skills {
                        description.push_str(&format!("\n- {}: {}", skill.name, skill.description));
                    }
                }
                ToolDescriptor {
                    name: s.name.clone(),
                    description,
                    // Arguments bound to the caller are not the model's to give.
                    input_schema: self
                        .tool(&s.name)
                        .map_or_else(|| s.input_schema.clone(), |r| r.offered_schema()),
                }
            })
            .collect()
    }

    /// The tools `scope` may discover: an agent's (when given) or every registered one.
    pub fn list_tools(
        &self,
        scope: &Scope,
        agent: Option<&AgentRef>,
    ) -> Result<Vec<ToolEntry>, EngineError> {
        let def = agent.map(|a| self.agent(a)).transpose()?;
        let specs = match &def {
            Some(def) => self.offered_specs(scope, def),
            None => self.visible_specs(scope, None),
        };
        Ok(specs.into_iter().map(ToolEntry::from).collect())
    }

    /// Searches names and descriptions of the tools `scope` may discover (an agent's, when
    /// given), best first, at most `limit`.
    pub fn search_tools(
        &self,
        scope: &Scope,
        agent: Option<&AgentRef>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ToolSearchHit>, EngineError> {
        let def = agent.map(|a| self.agent(a)).transpose()?;
        let visible = match &def {
            Some(def) => self.offered_specs(scope, def),
            None => self.visible_specs(scope, None),
        };
        Ok(search(&visible, query, limit))
    }
}
