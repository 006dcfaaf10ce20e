//! Agent files: an agent definition in TOML, and the model providers its `model` needs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use forge_core::ports::model::ModelProvider;
use forge_providers::ProvidersConfig;

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
        // A providers file that does not load is reported when its providers are built.
        let config = self.config().unwrap_or_default();
        forge::redactor(&config, &self.redact_env, &|name| std::env::var(name).ok())
    }

    fn config(&self) -> anyhow::Result<ProvidersConfig> {
        Ok(match &self.file {
            Some(path) => ProvidersConfig::load(path)?,
            None => ProvidersConfig::default(),
        })
    }
}

/// An agent definition with the script its `scripted:` model plays.
pub(crate) use forge::LoadedAgent;

/// Says on stderr which agents run on the scripted provider: whenever it is in use, `forge` says
/// so (docs/agents.md), in `run`, `serve` and `worker` alike.
pub(crate) fn note_scripted(loaded: &[LoadedAgent]) {
    for agent in loaded.iter().filter(|a| a.scripted()) {
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
    let config = args.config()?;
    Ok(forge::model_providers(agents, &[], &config, &|name| {
        std::env::var(name).ok()
    })?)
}

/// Reads an agent file. A `scripted:<file>` model's script is resolved next to the agent file.
pub(crate) fn load(path: &Path) -> anyhow::Result<LoadedAgent> {
    Ok(LoadedAgent::load(path)?)
}
