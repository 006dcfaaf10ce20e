//! Context assembly: what the model sees for one step.

use forge_core::agent::AgentDefinition;
use forge_core::message::Message;
use forge_core::part::Part;
use forge_core::ports::model::{ModelRequest, ToolDescriptor};
use forge_core::thread::SessionState;
use forge_core::usage::Usage;

/// Builds the request for one model call: the agent's instructions, the session state, the
/// thread's history and the tools offered (the agent's, narrowed to what the scope may discover).
pub fn assemble(
    agent: &AgentDefinition,
    model: &str,
    state: &SessionState,
    history: Vec<Message>,
    tools: Vec<ToolDescriptor>,
) -> ModelRequest {
    let mut system = agent.instructions.clone();
    if !state.values.is_empty() || state.version > 0 {
        // Session state is data the application stored, shown to the model as JSON with its
        // version (which `update_session_state` must name).
        let json = serde_json::Value::Object(state.values.clone()).to_string();
        system.push_str(&format!(
            "\n\nSession state (version {}, JSON):\n",
            state.version
        ));
        system.push_str(&json);
    }
    ModelRequest {
        model: model.to_owned(),
        system,
        messages: history,
        tools,
        max_output_tokens: agent.limits.max_output_tokens,
        output_schema: agent.output_schema.clone(),
        temperature: None,
    }
}

/// Output tokens assumed for a call whose request sets no cap, when estimating before the call;
/// also the cap sent under a ceiling or quota when the agent sets none.
pub const OUTPUT_ESTIMATE: u64 = 1024;

/// The smallest output cap worth a call: a ceiling that leaves less refuses the call instead.
pub const MIN_OUTPUT: u64 = 64;

/// A pre-call estimate of a request's usage, for reservations: about four characters per input
/// token plus a few tokens of framing per message, and the output cap (or [`OUTPUT_ESTIMATE`]).
/// Settlement replaces it with what the provider reports.
pub fn estimate_usage(request: &ModelRequest) -> Usage {
    let mut chars = request.system.len();
    for m in &request.messages {
        for p in &m.parts {
            chars += match p {
                Part::Text(t) => t.text.len(),
                Part::ToolCall(c) => c.tool_name.len() + c.input.to_string().len(),
                Part::ToolResult(r) => r.output.to_string().len(),
                other => serde_json::to_string(other).map_or(0, |s| s.len()),
            };
        }
    }
    for t in &request.tools {
        chars += t.name.len() + t.description.len() + t.input_schema.to_string().len();
    }
    let messages = request.messages.len() as u64 + 1;
    Usage {
        input_tokens: (chars as u64).div_ceil(4) + 4 * messages,
        output_tokens: request.max_output_tokens.map_or(OUTPUT_ESTIMATE, u64::from),
        ..Usage::default()
    }
}
