//! Agent files: an agent definition in TOML, and the model providers its `model` needs.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use forge_core::agent::AgentDefinition;
use forge_core::ports::model::ModelProvider;
use forge_providers::{Script, ScriptedProvider};

/// An agent definition with what its model needs.
pub(crate) struct LoadedAgent {
    pub(crate) definition: AgentDefinition,
    /// The script to play, for a `scripted:` model (keyed by its model name).
    pub(crate) script: Option<(String, Script)>,
    /// Whether the model is the scripted provider (output says so).
    pub(crate) scripted: bool,
}

/// The model providers a set of agents needs: one scripted provider holding every script.
pub(crate) fn providers(agents: &[LoadedAgent]) -> Vec<Arc<dyn ModelProvider>> {
    let scripts: Vec<&(String, Script)> = agents.iter().filter_map(|a| a.script.as_ref()).collect();
    if scripts.is_empty() {
        return vec![];
    }
    let provider = scripts
        .into_iter()
        .fold(ScriptedProvider::empty(), |p, (model, script)| {
            p.with_script(model.clone(), script.clone())
        });
    vec![Arc::new(provider)]
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
                script: Some((model.to_owned(), script)),
                scripted: true,
                definition,
            })
        }
        other => bail!("model provider {other} is not available yet; use scripted:<script file>"),
    }
}
