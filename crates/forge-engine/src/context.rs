//! Context assembly: what the model sees for one step.

use forge_core::agent::AgentDefinition;
use forge_core::message::Message;
use forge_core::ports::model::ModelRequest;
use forge_core::thread::SessionState;

use crate::tools::ToolRegistry;

/// Builds the request for one model call: the agent's instructions, the session state, the
/// thread's history and the agent's tools.
pub fn assemble(
    agent: &AgentDefinition,
    model: &str,
    state: &SessionState,
    history: Vec<Message>,
    tools: &ToolRegistry,
) -> ModelRequest {
    let mut system = agent.instructions.clone();
    if !state.values.is_empty() {
        // Session state is data the application stored, shown to the model as JSON.
        let json = serde_json::Value::Object(state.values.clone()).to_string();
        system.push_str("\n\nSession state (JSON):\n");
        system.push_str(&json);
    }
    ModelRequest {
        model: model.to_owned(),
        system,
        messages: history,
        tools: tools.descriptors(&agent.tools),
        max_output_tokens: None,
    }
}
