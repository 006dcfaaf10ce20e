//! Agent files: an agent definition in TOML, and the model providers its `model` needs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use forge_core::agent::AgentDefinition;
use forge_core::ports::model::ModelProvider;
use forge_providers::{ProvidersConfig, Script, ScriptedProvider};

/// Where model providers are configured.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ProviderArgs {
    /// Providers file (TOML): base URLs, credential references, headers, timeouts. Without one,
    /// `openai`, `openai-responses`, `anthropic` and `openai-compatible` use their defaults.
    #[arg(long = "providers", env = "FORGE_PROVIDERS")]
    pub(crate) file: Option<PathBuf>,
    /// Environment variables whose values are secrets to scrub from every tool result (comma
    /// separated); the provider keys (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`,
    /// `OPENAI_COMPATIBLE_API_KEY`) always are.
    #[arg(long = "redact-env", env = "FORGE_REDACT_ENV", value_delimiter = ',')]
    pub(crate) redact_env: Vec<String>,
}

impl ProviderArgs {
    /// The redactor for this process: the named variables' values, the provider keys, and every
    /// credential the providers file references (`env:` or `file:`).
    pub(crate) fn redactor(&self) -> forge_core::redact::Redactor {
        let names = [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "OPENAI_COMPATIBLE_API_KEY",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain(self.redact_env.iter().cloned());
        let mut values: Vec<String> = names.filter_map(|n| std::env::var(n).ok()).collect();
        // A providers file that does not load is reported when its providers are built.
        if let Ok(config) = self.config() {
            let env = |name: &str| std::env::var(name).ok();
            values.extend(
                config
                    .secret_values(&env)
                    .into_iter()
                    .map(|s| s.expose().to_owned()),
            );
        }
        forge_core::redact::Redactor::new(values)
    }

    fn config(&self) -> anyhow::Result<ProvidersConfig> {
        Ok(match &self.file {
            Some(path) => ProvidersConfig::load(path)?,
            None => ProvidersConfig::default(),
        })
    }
}

/// An agent definition with what its model needs.
pub(crate) struct LoadedAgent {
    pub(crate) definition: AgentDefinition,
    /// The script to play, for a `scripted:` model (keyed by its model name).
    pub(crate) script: Option<(String, Script)>,
    /// Whether the model is the scripted provider (output says so).
    pub(crate) scripted: bool,
}

/// Says on stderr which agents run on the scripted provider: whenever it is in use, `forge` says
/// so (README, "Agent files"), in `run`, `serve` and `worker` alike.
pub(crate) fn note_scripted(loaded: &[LoadedAgent]) {
    for agent in loaded.iter().filter(|a| a.scripted) {
        eprintln!(
            "note: model {} of agent {} is the scripted provider: deterministic output from a script, no model account used",
            agent.definition.model, agent.definition.agent.name
        );
    }
}

/// The model providers a set of agents needs: one scripted provider holding every script, and one
/// configured provider per other prefix. A missing credential fails here, before any run starts.
pub(crate) fn providers(
    agents: &[LoadedAgent],
    args: &ProviderArgs,
) -> anyhow::Result<Vec<Arc<dyn ModelProvider>>> {
    let mut out: Vec<Arc<dyn ModelProvider>> = Vec::new();
    let scripts: Vec<&(String, Script)> = agents.iter().filter_map(|a| a.script.as_ref()).collect();
    if !scripts.is_empty() {
        let provider = scripts
            .into_iter()
            .fold(ScriptedProvider::empty(), |p, (model, script)| {
                p.with_script(model.clone(), script.clone())
            });
        out.push(Arc::new(provider));
    }
    let prefixes: BTreeSet<&str> = agents
        .iter()
        .filter(|a| !a.scripted)
        .filter_map(|a| a.definition.model_parts().ok().map(|(p, _)| p))
        .collect();
    if !prefixes.is_empty() {
        let config = args.config()?;
        for prefix in prefixes {
            let provider = config
                .provider(prefix, &|name| std::env::var(name).ok())
                .with_context(|| format!("model provider {prefix} cannot be used"))?;
            out.push(provider);
        }
    }
    Ok(out)
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
    if provider != "scripted" {
        return Ok(LoadedAgent {
            script: None,
            scripted: false,
            definition,
        });
    }
    let script_path = path.parent().unwrap_or(Path::new(".")).join(model);
    let script = Script::load(&script_path)?;
    Ok(LoadedAgent {
        script: Some((model.to_owned(), script)),
        scripted: true,
        definition,
    })
}
