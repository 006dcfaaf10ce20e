//! Agent files: an agent definition in TOML, and the model providers its `model` needs.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use forge_core::agent::AgentDefinition;
use forge_core::ports::model::ModelProvider;
use forge_providers::{Script, ScriptedProvider};

/// An agent definition with the providers it needs.
pub(crate) struct LoadedAgent {
    pub(crate) definition: AgentDefinition,
    pub(crate) providers: Vec<Arc<dyn ModelProvider>>,
    /// Whether the model is the scripted provider (output says so).
    pub(crate) scripted: bool,
}

/// Reads an agent file. A `scripted:<file>` model's script is resolved next to the agent file.
pub(crate) fn load(path: &Path) -> anyhow::Result<LoadedAgent> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("failed to read agent file {}", path.display()))?;
    let definition: AgentDefinition = toml::from_str(&text)
        .with_context(|| format!("failed to parse agent file {}", path.display()))?;
    definition
        .validate()
        .with_context(|| format!("agent file {} is invalid", path.display()))?;
    let (provider, model) = definition.model_parts()?;
    match provider {
        "scripted" => {
            let script_path = path.parent().unwrap_or(Path::new(".")).join(model);
            let script = Script::load(&script_path)?;
            Ok(LoadedAgent {
                providers: vec![Arc::new(ScriptedProvider::new(script))],
                scripted: true,
                definition,
            })
        }
        other => bail!("model provider {other} is not available yet; use scripted:<script file>"),
    }
}
