//! Agent definitions: versioned instructions, model, tools and limits.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Names one version of one agent. Recorded on every run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct AgentRef {
    /// The agent's name, stable across versions.
    pub name: String,
    /// The version this run executes.
    pub version: String,
}

/// Bounds one run must stay within.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunLimits {
    /// Most model calls (steps) a run may make; reaching it with tool calls still pending fails the
    /// run with `step_limit_exceeded`.
    #[serde(default = "RunLimits::default_max_steps")]
    pub max_steps: u32,
    /// Most tool calls executed from one model response.
    #[serde(default = "RunLimits::default_max_parallel_tool_calls")]
    pub max_tool_calls_per_step: u32,
    /// Longest a single tool call may take, in milliseconds.
    #[serde(default = "RunLimits::default_tool_timeout_ms")]
    pub tool_timeout_ms: u64,
    /// Largest tool input accepted, in bytes of JSON.
    #[serde(default = "RunLimits::default_max_tool_io_bytes")]
    pub max_tool_input_bytes: usize,
    /// Largest tool output kept, in bytes of JSON; larger outputs become a tool error.
    #[serde(default = "RunLimits::default_max_tool_io_bytes")]
    pub max_tool_output_bytes: usize,
    /// How long an approval or a question stays answerable, in seconds; after that it expires and
    /// the run goes on as if refused.
    #[serde(default = "RunLimits::default_interaction_ttl_secs")]
    pub interaction_ttl_secs: u64,
    /// Most tokens (input + output) a run may spend; a model call whose estimate would pass it is
    /// not made, and the run fails with `budget_exceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Most a run may cost, in micro-units of the price table's currency; enforced like
    /// `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_micros: Option<u64>,
    /// Most output tokens one model call may produce, sent with every call. Under a token or cost
    /// ceiling or a tenant quota every call carries a cap anyway (this one, or 1,024), lowered to
    /// what the remaining budget allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
}

impl RunLimits {
    fn default_max_steps() -> u32 {
        16
    }
    fn default_max_parallel_tool_calls() -> u32 {
        16
    }
    fn default_tool_timeout_ms() -> u64 {
        60_000
    }
    fn default_max_tool_io_bytes() -> usize {
        256 * 1024
    }
    fn default_interaction_ttl_secs() -> u64 {
        7 * 24 * 3600
    }
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            max_steps: Self::default_max_steps(),
            max_tool_calls_per_step: Self::default_max_parallel_tool_calls(),
            tool_timeout_ms: Self::default_tool_timeout_ms(),
            max_tool_input_bytes: Self::default_max_tool_io_bytes(),
            max_tool_output_bytes: Self::default_max_tool_io_bytes(),
            interaction_ttl_secs: Self::default_interaction_ttl_secs(),
            max_tokens: None,
            max_cost_micros: None,
            max_output_tokens: None,
        }
    }
}

/// When and how a thread's history is compacted for this agent: once what a model call would
/// carry passes `max_tokens`, the oldest messages (all but the `keep_recent` newest, never
/// splitting a tool call from its result) are summarised by a model call, and later requests
/// carry the summary and the recent messages. The stored history is never shortened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactionConfig {
    /// The estimated input tokens of a request past which the thread is compacted first.
    pub max_tokens: u64,
    /// How many of the newest messages are always sent as they are.
    #[serde(default = "CompactionConfig::default_keep_recent")]
    pub keep_recent: usize,
    /// The model that writes summaries (`provider:model`); the agent's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl CompactionConfig {
    /// The newest messages kept as they are when a configuration does not say.
    pub const DEFAULT_KEEP_RECENT: usize = 8;

    fn default_keep_recent() -> usize {
        Self::DEFAULT_KEEP_RECENT
    }

    /// A configuration compacting past `max_tokens` and keeping the 8 newest messages.
    pub fn new(max_tokens: u64) -> Self {
        Self {
            max_tokens,
            keep_recent: Self::default_keep_recent(),
            model: None,
        }
    }
}

/// A versioned agent: what it is told, which model it calls, which tools it may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentDefinition {
    /// Name and version.
    #[serde(flatten)]
    pub agent: AgentRef,
    /// The system instructions.
    pub instructions: String,
    /// `provider:model`, for example `openai:gpt-4o-mini` or `scripted:demo.toml`.
    pub model: String,
    /// Names of the tools the agent may be offered (authorization may narrow this further).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Names of skills the agent may load.
    #[serde(default)]
    pub skills: Vec<String>,
    /// JSON Schema the final answer must satisfy, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// Run limits.
    #[serde(default)]
    pub limits: RunLimits,
    /// Per-tool approval policies overriding each tool's own, for example
    /// `approvals = { record_effect = "always" }`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub approvals: std::collections::BTreeMap<String, ApprovalPolicy>,
    /// History compaction, if the agent's threads are to be compacted automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionConfig>,
}

/// The built-in tool that runs a skill's script (where the deployment enables scripts). An agent
/// with skills may set its approval policy in `approvals`.
pub const SKILL_SCRIPT_TOOL: &str = "run_skill_script";

impl AgentDefinition {
    /// An agent defined in code: version `1`, no instructions, tools or skills, default limits.
    /// The same definition an agent file holds, built with the methods below.
    ///
    /// ```
    /// use forge_core::agent::AgentDefinition;
    ///
    /// let agent = AgentDefinition::new("order-desk", "openai:gpt-4o-mini")
    ///     .instructions("Answer questions about orders; look every order up.")
    ///     .tool("order_status");
    /// assert!(agent.validate().is_ok());
    /// assert_eq!(agent.agent.version, "1");
    /// ```
    pub fn new(name: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            agent: AgentRef {
                name: name.into(),
                version: "1".into(),
            },
            instructions: String::new(),
            model: model.into(),
            tools: Vec::new(),
            skills: Vec::new(),
            output_schema: None,
            limits: RunLimits::default(),
            approvals: Default::default(),
            compaction: None,
        }
    }

    /// This definition as version `version`.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.agent.version = version.into();
        self
    }

    /// This definition with `text` as its system instructions.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = text.into();
        self
    }

    /// This definition with the tool `name` among those it may be offered.
    pub fn tool(mut self, name: impl Into<String>) -> Self {
        self.tools.push(name.into());
        self
    }

    /// This definition with the skill `name` among those it may load.
    pub fn skill(mut self, name: impl Into<String>) -> Self {
        self.skills.push(name.into());
        self
    }

    /// This definition with its final answer bound to the JSON Schema `schema`.
    pub fn output_schema(mut self, schema: serde_json::Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// This definition with `limits`.
    pub fn limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// This definition with calls of `tool` approved as `policy` says, overriding the tool's own.
    pub fn approval(mut self, tool: impl Into<String>, policy: ApprovalPolicy) -> Self {
        self.approvals.insert(tool.into(), policy);
        self
    }

    /// Checks the definition is usable: names present, model in `provider:model` form, limits sane.
    pub fn validate(&self) -> Result<(), Error> {
        if self.agent.name.trim().is_empty() {
            return Err(Error::invalid("agent name must not be empty"));
        }
        if self.agent.version.trim().is_empty() {
            return Err(Error::invalid("agent version must not be empty"));
        }
        self.model_parts()?;
        if let Some(c) = &self.compaction {
            if c.max_tokens == 0 {
                return Err(Error::invalid("compaction.max_tokens must be at least 1"));
            }
            if let Some(model) = &c.model {
                split_model(model)?;
            }
        }
        if self.limits.max_steps == 0 {
            return Err(Error::invalid("limits.max_steps must be at least 1"));
        }
        if self.limits.max_tool_calls_per_step == 0 {
            return Err(Error::invalid(
                "limits.max_tool_calls_per_step must be at least 1",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for tool in &self.tools {
            if !seen.insert(tool) {
                return Err(Error::invalid(format!("tool {tool} is listed twice")));
            }
        }
        // The skill-script built-in is the agent's when it has skills; its approval may be set.
        let builtin = |t: &String| t == SKILL_SCRIPT_TOOL && !self.skills.is_empty();
        if let Some(stray) = self
            .approvals
            .keys()
            .find(|t| !seen.contains(t) && !builtin(t))
        {
            return Err(Error::invalid(format!(
                "approvals names {stray}, which is not among the agent's tools"
            )));
        }
        Ok(())
    }

    /// Splits `model` into `(provider, model name)`.
    pub fn model_parts(&self) -> Result<(&str, &str), Error> {
        split_model(&self.model)
    }

    /// The model that writes this agent's thread summaries: `compaction.model`, else its own.
    pub fn summary_model(&self) -> &str {
        self.compaction
            .as_ref()
            .and_then(|c| c.model.as_deref())
            .unwrap_or(&self.model)
    }
}

/// Splits a `provider:model` string into its two halves.
pub fn split_model(model: &str) -> Result<(&str, &str), Error> {
    match model.split_once(':') {
        Some((p, m)) if !p.is_empty() && !m.is_empty() => Ok((p, m)),
        _ => Err(Error::invalid(format!(
            "model {model:?} must look like provider:model, for example scripted:demo.toml"
        ))),
    }
}

/// When a call of this tool needs a person's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalPolicy {
    /// Never.
    Never,
    /// Every call.
    Always,
    /// When the tool is classified as an external write.
    ExternalWrites,
    /// The policy port decides per call.
    Policy,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(model: &str) -> AgentDefinition {
        AgentDefinition {
            agent: AgentRef {
                name: "a".into(),
                version: "1".into(),
            },
            instructions: "be brief".into(),
            model: model.into(),
            tools: vec![],
            skills: vec![],
            output_schema: None,
            limits: RunLimits::default(),
            approvals: Default::default(),
            compaction: None,
        }
    }

    #[test]
    fn compaction_needs_a_budget_and_a_well_formed_model() {
        let mut a = agent("scripted:x");
        a.compaction = Some(CompactionConfig::new(0));
        assert!(a.validate().unwrap_err().to_string().contains("max_tokens"));
        let mut c = CompactionConfig::new(100);
        c.model = Some("nomodel".into());
        a.compaction = Some(c);
        assert!(
            a.validate()
                .unwrap_err()
                .to_string()
                .contains("provider:model")
        );
        let parsed: AgentDefinition = serde_json::from_value(serde_json::json!({
            "name": "a", "version": "1", "instructions": "", "model": "scripted:x",
            "compaction": {"max_tokens": 500}
        }))
        .unwrap();
        assert_eq!(parsed.compaction, Some(CompactionConfig::new(500)));
        assert_eq!(parsed.summary_model(), "scripted:x");
    }

    #[test]
    fn a_definition_built_in_code_equals_the_same_definition_read_from_a_file() {
        let built = AgentDefinition::new("desk", "scripted:x")
            .version("2")
            .instructions("be brief")
            .tool("lookup")
            .skill("tone")
            .approval("lookup", ApprovalPolicy::Always)
            .output_schema(serde_json::json!({"type": "object"}));
        let read: AgentDefinition = serde_json::from_value(serde_json::json!({
            "name": "desk", "version": "2", "instructions": "be brief", "model": "scripted:x",
            "tools": ["lookup"], "skills": ["tone"], "approvals": {"lookup": "always"},
            "output_schema": {"type": "object"}
        }))
        .unwrap();
        assert_eq!(built, read);
        assert!(built.validate().is_ok());
        assert_eq!(
            AgentDefinition::new("a", "scripted:x"),
            agent("scripted:x").instructions("")
        );
    }

    #[test]
    fn model_must_name_a_provider() {
        assert_eq!(
            agent("scripted:x.toml").model_parts().unwrap(),
            ("scripted", "x.toml")
        );
        let err = agent("gpt-4o").validate().unwrap_err();
        assert!(err.to_string().contains("provider:model"), "{err}");
        assert!(agent(":x").validate().is_err());
    }

    #[test]
    fn duplicate_tools_and_zero_limits_are_refused() {
        let mut a = agent("scripted:x");
        a.tools = vec!["t".into(), "t".into()];
        assert!(
            a.validate()
                .unwrap_err()
                .to_string()
                .contains("listed twice")
        );
        let mut a = agent("scripted:x");
        a.limits.max_steps = 0;
        assert!(a.validate().is_err());
    }
}
