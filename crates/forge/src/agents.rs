//! Agents from TOML files or code, and the model providers a set of them needs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use forge_core::agent::AgentDefinition;
use forge_core::ports::model::ModelProvider;
use forge_providers::{ProvidersConfig, Script, ScriptedProvider};

use crate::Error;

/// Where an agent comes from: a TOML agent file, or a definition built in code.
#[derive(Debug, Clone)]
pub enum AgentSource {
    /// An agent file; a `scripted:FILE` model's script is read next to it.
    File(PathBuf),
    /// A definition built in code ([`AgentDefinition::new`]).
    Definition(Box<AgentDefinition>),
}

impl From<AgentDefinition> for AgentSource {
    fn from(definition: AgentDefinition) -> Self {
        Self::Definition(Box::new(definition))
    }
}

impl From<PathBuf> for AgentSource {
    fn from(path: PathBuf) -> Self {
        Self::File(path)
    }
}

impl From<&Path> for AgentSource {
    fn from(path: &Path) -> Self {
        Self::File(path.to_owned())
    }
}

impl From<&str> for AgentSource {
    /// A path to an agent file.
    fn from(path: &str) -> Self {
        Self::File(path.into())
    }
}

/// An agent definition with the script its model plays, when the model is `scripted:FILE`.
#[derive(Debug, Clone)]
pub struct LoadedAgent {
    /// The definition.
    pub definition: AgentDefinition,
    /// The script to play, keyed by its model name, for an agent file's `scripted:` model.
    pub script: Option<(String, Script)>,
}

impl LoadedAgent {
    /// Reads an agent file; a `scripted:<file>` model's script is read next to it.
    ///
    /// ```
    /// # fn main() -> Result<(), forge::Error> {
    /// let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
    ///     .join("../../examples/agents/calculator.toml");
    /// let agent = forge::LoadedAgent::load(&path)?;
    /// assert_eq!(agent.definition.agent.name, "calculator");
    /// assert!(agent.scripted(), "its model is a script beside the file");
    /// # Ok(()) }
    /// ```
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::file("failed to read agent file", path, e))?;
        let definition: AgentDefinition = toml::from_str(&text)
            .map_err(|e| Error::file("failed to parse agent file", path, e))?;
        // `name` and `version` are flattened in, which serde's own unknown-field check cannot
        // see through: a misspelled key (`toolz`) would be dropped without a word.
        if let Some(unknown) = unknown_key(&text) {
            return Err(Error::file("invalid agent file", path, unknown));
        }
        let invalid = |e| Error::file("invalid agent file", path, e);
        definition.validate().map_err(invalid)?;
        let (provider, model) = definition.model_parts().map_err(invalid)?;
        let script = if provider == "scripted" {
            let script_path = path.parent().unwrap_or(Path::new(".")).join(model);
            let script = Script::load(&script_path)
                .map_err(|e| Error::file("invalid script", &script_path, e))?;
            Some((model.to_owned(), script))
        } else {
            None
        };
        Ok(Self { definition, script })
    }

    /// A definition built in code (checked as a file's would be); its models come from the
    /// providers the deployment is given or configures.
    pub fn defined(definition: AgentDefinition) -> Result<Self, Error> {
        definition.validate().map_err(|e| {
            Error::Config(format!("agent {} is invalid: {e}", definition.agent.name))
        })?;
        Ok(Self {
            definition,
            script: None,
        })
    }

    /// Loads `source`.
    pub fn from_source(source: &AgentSource) -> Result<Self, Error> {
        match source {
            AgentSource::File(path) => Self::load(path),
            AgentSource::Definition(definition) => Self::defined((**definition).clone()),
        }
    }

    /// Whether its model is the scripted provider (deterministic output, no model account).
    pub fn scripted(&self) -> bool {
        self.definition
            .model_parts()
            .is_ok_and(|(provider, _)| provider == "scripted")
    }
}

/// The model providers `agents` need beyond `given` (providers already built, by prefix): one
/// scripted provider holding every agent file's script, and one provider per other prefix from
/// `config`, its credentials resolved through `env`. A missing credential fails here, before any
/// run starts.
pub fn model_providers(
    agents: &[LoadedAgent],
    given: &[Arc<dyn ModelProvider>],
    config: &ProvidersConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Arc<dyn ModelProvider>>, Error> {
    let covered: BTreeSet<&str> = given.iter().map(|p| p.name()).collect();
    let mut out: Vec<Arc<dyn ModelProvider>> = Vec::new();
    let scripts: Vec<&(String, Script)> = agents.iter().filter_map(|a| a.script.as_ref()).collect();
    if !scripts.is_empty() {
        if covered.contains("scripted") {
            return Err(Error::Config(
                "a scripted model provider was given and agent files carry scripts of their own: give one or the other".into(),
            ));
        }
        let provider = scripts
            .into_iter()
            .fold(ScriptedProvider::empty(), |p, (model, script)| {
                p.with_script(model.clone(), script.clone())
            });
        out.push(Arc::new(provider));
    }
    let prefixes: BTreeSet<&str> = agents
        .iter()
        .filter(|a| a.script.is_none())
        .filter_map(|a| a.definition.model_parts().ok().map(|(p, _)| p))
        .filter(|p| !covered.contains(p))
        .collect();
    for prefix in prefixes {
        let provider = config.provider(prefix, env).map_err(|e| Error::Provider {
            prefix: prefix.to_owned(),
            source: Box::new(e),
        })?;
        out.push(provider);
    }
    Ok(out)
}

/// The environment variables holding the built-in providers' keys.
const PROVIDER_KEYS: [&str; 3] = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_COMPATIBLE_API_KEY",
];

/// A redactor scrubbing, wherever they appear in tool results and input, the values of the
/// provider keys' variables and of `names`, and every credential `config` references — each
/// resolved through `env`.
pub fn redactor(
    config: &ProvidersConfig,
    names: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> forge_core::redact::Redactor {
    let mut values: Vec<String> = PROVIDER_KEYS
        .into_iter()
        .chain(names.iter().map(String::as_str))
        .filter_map(env)
        .collect();
    values.extend(
        config
            .secret_values(env)
            .into_iter()
            .map(|s| s.expose().to_owned()),
    );
    forge_core::redact::Redactor::new(values)
}

/// The keys an agent file may have at its top level: [`AgentDefinition`]'s fields, with its
/// agent's `name` and `version`.
const AGENT_KEYS: &[&str] = &[
    "name",
    "version",
    "instructions",
    "model",
    "tools",
    "skills",
    "output_schema",
    "limits",
    "approvals",
    "compaction",
];

/// A key an agent file has that no agent has.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UnknownKey(String);

/// The first top-level key of the agent file `text` that is not an agent's, with its line.
fn unknown_key(text: &str) -> Option<UnknownKey> {
    let table: toml::Table = text.parse().ok()?;
    let key = table.keys().find(|k| !AGENT_KEYS.contains(&k.as_str()))?;
    let line = text.lines().position(|l| {
        l.trim_start()
            .strip_prefix(key.as_str())
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    });
    let at = line
        .map(|n| format!(" at line {}", n + 1))
        .unwrap_or_default();
    Some(UnknownKey(format!(
        "unknown key `{key}`{at}; an agent file has {}",
        AGENT_KEYS.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_known_keys_are_the_definitions_fields() {
        let schema = schemars::schema_for!(AgentDefinition).to_value();
        let mut fields: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut known = AGENT_KEYS.to_vec();
        fields.sort_unstable();
        known.sort_unstable();
        assert_eq!(fields, known);
    }

    #[test]
    fn a_misspelled_key_is_refused_with_its_line() {
        let text = "name = \"a\"\nversion = \"1\"\ninstructions = \"x\"\nmodel = \"scripted:s\"\ntoolz = [\"calc\"]\n";
        let unknown = unknown_key(text).expect("refused").to_string();
        assert!(
            unknown.starts_with("unknown key `toolz` at line 5;"),
            "{unknown}"
        );
        assert!(unknown_key(&text.replace("toolz", "tools")).is_none());
        // A quoted key of any text is named, without a line it cannot be found on.
        let quoted = unknown_key("\"tööls\" = 1\n").expect("refused").to_string();
        assert!(quoted.starts_with("unknown key `tööls`"), "{quoted}");
    }

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("forge-agents-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_agent_file_reads_its_script_beside_it_and_says_which_file_is_wrong() {
        let dir = dir("file");
        let agent = dir.join("agent.toml");
        std::fs::write(
            &agent,
            "name = \"desk\"\nversion = \"1\"\ninstructions = \"x\"\nmodel = \"scripted:s.toml\"\n",
        )
        .unwrap();
        let missing = LoadedAgent::load(&agent).unwrap_err().to_string();
        assert!(missing.contains("s.toml"), "{missing}");
        std::fs::write(
            dir.join("s.toml"),
            "[[conversation]]\n[[conversation.turn]]\ntext = [\"hi\"]\n",
        )
        .unwrap();
        let loaded = LoadedAgent::load(&agent).unwrap();
        assert!(loaded.scripted());
        assert_eq!(loaded.script.as_ref().map(|s| s.0.as_str()), Some("s.toml"));
        std::fs::write(&agent, "name = \"desk\"\nmodel = \"nope\"\n").unwrap();
        let bad = LoadedAgent::load(&agent).unwrap_err().to_string();
        assert!(
            bad.contains("agent file") && bad.contains("agent.toml"),
            "{bad}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn providers_are_built_only_for_prefixes_nothing_given_covers() {
        let agent = |model: &str| LoadedAgent::defined(AgentDefinition::new("a", model)).unwrap();
        let none = |_: &str| None;
        let config = ProvidersConfig::default();
        let given: Vec<Arc<dyn ModelProvider>> = vec![Arc::new(ScriptedProvider::empty())];
        let built = model_providers(&[agent("scripted:x")], &given, &config, &none).unwrap();
        assert!(built.is_empty());
        // No key in the environment: the configured provider cannot be built, and says which.
        let Err(err) = model_providers(&[agent("anthropic:claude")], &given, &config, &none) else {
            panic!("a provider was built without its key");
        };
        assert!(err.to_string().contains("anthropic"), "{err}");
        let key = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| "k".to_owned());
        let built = model_providers(&[agent("anthropic:claude")], &given, &config, &key).unwrap();
        assert_eq!(built.len(), 1);
        assert_eq!(built[0].name(), "anthropic");
    }
}
