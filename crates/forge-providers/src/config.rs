//! Provider configuration: switching model or provider is a change of configuration, not of code.
//!
//! A model string is `<provider>:<model>`. Four providers exist without any configuration:
//!
//! | provider | wire format | base URL | credential |
//! |---|---|---|---|
//! | `openai` | Chat Completions | `https://api.openai.com/v1` | `env:OPENAI_API_KEY` |
//! | `openai-responses` | Responses | `https://api.openai.com/v1` | `env:OPENAI_API_KEY` |
//! | `anthropic` | Messages | `https://api.anthropic.com` | `env:ANTHROPIC_API_KEY` |
//! | `openai-compatible` | Chat Completions | `env:FORGE_OPENAI_COMPATIBLE_BASE_URL` | `env:OPENAI_COMPATIBLE_API_KEY`, if set |
//!
//! A TOML file overrides them or adds named providers (each name becomes a model-string prefix):
//!
//! ```toml
//! [providers.openai-compatible]
//! base_url = "http://127.0.0.1:11434/v1"     # Ollama
//!
//! [providers.groq]
//! kind = "openai-compatible"
//! base_url = "https://api.groq.com/openai/v1"
//! api_key = "env:GROQ_API_KEY"
//! headers = { "x-team" = "search" }
//! request_timeout_secs = 60
//! max_retries = 3
//! ```
//!
//! Credentials are references (`env:NAME`, `file:PATH`); a literal key in the file is refused, and
//! so is a literal value for a header that carries credentials.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use forge_core::ports::model::ModelProvider;
use serde::Deserialize;

use crate::http::{HttpProvider, HttpSettings, HttpSetupError, Timeouts};
use crate::retry::{RetryPolicy, Retrying};
use crate::secret::{Secret, SecretError, SecretRef};
use crate::wire::{BodyOptions, Dialect};

/// Which wire format and defaults a provider entry uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ProviderKind {
    /// OpenAI Chat Completions at OpenAI.
    #[serde(rename = "openai")]
    OpenAi,
    /// OpenAI Responses at OpenAI.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Any server speaking Chat Completions (Ollama, vLLM, llama.cpp, OpenRouter, Groq…).
    #[serde(rename = "openai-compatible")]
    OpenAiCompatible,
}

impl ProviderKind {
    fn dialect(self) -> Dialect {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => Dialect::OpenAiChat,
            ProviderKind::OpenAiResponses => Dialect::OpenAiResponses,
            ProviderKind::Anthropic => Dialect::Anthropic,
        }
    }

    fn of_builtin(name: &str) -> Option<Self> {
        match name {
            "openai" => Some(ProviderKind::OpenAi),
            "openai-responses" => Some(ProviderKind::OpenAiResponses),
            "anthropic" => Some(ProviderKind::Anthropic),
            "openai-compatible" => Some(ProviderKind::OpenAiCompatible),
            _ => None,
        }
    }
}

/// One `[providers.<name>]` entry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// The wire format; defaults to the built-in of the same name.
    pub kind: Option<ProviderKind>,
    /// Base URL.
    pub base_url: Option<String>,
    /// Credential reference, `env:NAME` or `file:PATH`.
    pub api_key: Option<String>,
    /// Extra headers. Values of credential-bearing headers must be references.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Seconds to wait for the response head.
    pub request_timeout_secs: Option<f64>,
    /// Seconds of silence tolerated between two reads of a stream.
    pub idle_timeout_secs: Option<f64>,
    /// Retries of a call that failed retryably before producing output.
    pub max_retries: Option<u32>,
    /// Output-token cap sent when an agent sets none (Anthropic requires one).
    pub default_max_tokens: Option<u32>,
}

/// The providers file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvidersConfig {
    /// Entries by provider name.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderEntry>,
}

/// Why a provider could not be configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("could not read providers file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid.
    #[error("providers file {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// No entry and no built-in has this name.
    #[error(
        "model provider {0:?} is not configured; built in are openai, openai-responses, anthropic, openai-compatible and scripted"
    )]
    Unknown(String),
    /// A credential is inlined, missing or unreadable.
    #[error("provider {provider}: {field}: {source}")]
    Secret {
        /// The provider.
        provider: String,
        /// `api_key` or `headers.<name>`.
        field: String,
        /// Why.
        #[source]
        source: SecretError,
    },
    /// An OpenAI-compatible provider needs a base URL.
    #[error(
        "provider {0}: set base_url in the providers file (or FORGE_OPENAI_COMPATIBLE_BASE_URL for openai-compatible)"
    )]
    NoBaseUrl(String),
    /// A timeout is not a positive number of seconds.
    #[error("provider {provider}: {field} must be a positive number of seconds")]
    BadTimeout {
        /// The provider.
        provider: String,
        /// The setting.
        field: &'static str,
    },
    /// The HTTP client could not be set up.
    #[error(transparent)]
    Http(#[from] HttpSetupError),
}

/// Headers whose values are credentials: a literal value for one is refused.
fn carries_credentials(header: &str) -> bool {
    let h = header.to_ascii_lowercase();
    h == "authorization"
        || h == "proxy-authorization"
        || h == "cookie"
        || h.contains("key")
        || h.contains("token")
        || h.contains("secret")
}

impl ProvidersConfig {
    /// Parses a providers file's text; `path` names it in errors.
    pub fn from_toml(text: &str, path: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })
    }

    /// Reads a providers file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_toml(&text, &shown)
    }

    /// The names a model string may use as its prefix: the built-ins and every entry.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            "openai",
            "openai-responses",
            "anthropic",
            "openai-compatible",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain(self.providers.keys().cloned())
        .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Every credential the file's entries reference (`api_key` and credential-bearing headers),
    /// resolved through `env`, for a redactor to scrub wherever it appears. References that do not
    /// resolve are skipped (building the provider reports them).
    pub fn secret_values(&self, env: &dyn Fn(&str) -> Option<String>) -> Vec<Secret> {
        let mut refs: Vec<&str> = Vec::new();
        for entry in self.providers.values() {
            refs.extend(entry.api_key.as_deref());
            for (header, value) in &entry.headers {
                if carries_credentials(header) || value.starts_with("env:") {
                    refs.push(value);
                }
            }
        }
        refs.into_iter()
            .filter_map(|r| r.parse::<SecretRef>().ok()?.resolve(env).ok())
            .collect()
    }

    /// Builds the provider called `name`, with retries, resolving its credentials through `env`.
    pub fn provider(
        &self,
        name: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Arc<dyn ModelProvider>, ConfigError> {
        let entry = self.providers.get(name).cloned().unwrap_or_default();
        let kind = entry
            .kind
            .or_else(|| ProviderKind::of_builtin(name))
            .ok_or_else(|| ConfigError::Unknown(name.to_owned()))?;
        let secret = |field: &str, text: &str| -> Result<Secret, ConfigError> {
            let wrap = |source| ConfigError::Secret {
                provider: name.to_owned(),
                field: field.to_owned(),
                source,
            };
            text.parse::<SecretRef>()
                .map_err(wrap)?
                .resolve(env)
                .map_err(wrap)
        };
        let base_url = match (&entry.base_url, kind) {
            (Some(url), _) => url.clone(),
            (None, ProviderKind::OpenAi | ProviderKind::OpenAiResponses) => {
                "https://api.openai.com/v1".to_owned()
            }
            (None, ProviderKind::Anthropic) => "https://api.anthropic.com".to_owned(),
            (None, ProviderKind::OpenAiCompatible) => env("FORGE_OPENAI_COMPATIBLE_BASE_URL")
                .filter(|u| !u.is_empty() && name == "openai-compatible")
                .ok_or_else(|| ConfigError::NoBaseUrl(name.to_owned()))?,
        };
        let api_key = match (&entry.api_key, kind) {
            (Some(reference), _) => Some(secret("api_key", reference)?),
            (None, ProviderKind::OpenAi | ProviderKind::OpenAiResponses) => {
                Some(secret("api_key", "env:OPENAI_API_KEY")?)
            }
            (None, ProviderKind::Anthropic) => Some(secret("api_key", "env:ANTHROPIC_API_KEY")?),
            // Local servers usually need no key; use one when the environment has it.
            (None, ProviderKind::OpenAiCompatible) => env("OPENAI_COMPATIBLE_API_KEY")
                .filter(|k| !k.is_empty() && name == "openai-compatible")
                .map(Secret::new),
        };
        let mut headers = Vec::with_capacity(entry.headers.len());
        for (header, value) in &entry.headers {
            let value = if carries_credentials(header) || value.starts_with("env:") {
                secret(&format!("headers.{header}"), value)?
            } else {
                Secret::new(value.clone())
            };
            headers.push((header.clone(), value));
        }
        let seconds = |field: &'static str, value: Option<f64>, default: Duration| match value {
            None => Ok(default),
            Some(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
            Some(_) => Err(ConfigError::BadTimeout {
                provider: name.to_owned(),
                field,
            }),
        };
        let defaults = Timeouts::default();
        let timeouts = Timeouts {
            connect: defaults.connect,
            response: seconds(
                "request_timeout_secs",
                entry.request_timeout_secs,
                defaults.response,
            )?,
            idle: seconds("idle_timeout_secs", entry.idle_timeout_secs, defaults.idle)?,
        };
        let http = HttpProvider::new(HttpSettings {
            name: name.to_owned(),
            dialect: kind.dialect(),
            base_url,
            api_key,
            headers,
            body: BodyOptions {
                max_completion_tokens: matches!(kind, ProviderKind::OpenAi),
                default_max_tokens: entry.default_max_tokens.unwrap_or(4096),
            },
            timeouts,
        })?;
        let policy = RetryPolicy {
            max_retries: entry
                .max_retries
                .unwrap_or(RetryPolicy::default().max_retries),
            ..RetryPolicy::default()
        };
        Ok(Arc::new(Retrying::new(Arc::new(http), policy)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(r: Result<Arc<dyn ModelProvider>, ConfigError>) -> ConfigError {
        match r {
            Ok(p) => panic!("provider {} was built", p.name()),
            Err(e) => e,
        }
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn every_referenced_credential_is_listed_for_redaction() {
        let dir = std::env::temp_dir().join(format!("forge-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, "file-held-secret-value\n").unwrap();
        let text = format!(
            "[providers.a]\nkind = \"openai-compatible\"\nbase_url = \"http://x/v1\"\napi_key = \"file:{}\"\n\
             [providers.a.headers]\nx-api-key = \"env:HEADER_KEY\"\nx-trace = \"plain\"\n\
             [providers.b]\nkind = \"openai\"\napi_key = \"env:MISSING\"\n",
            file.display()
        );
        let config = ProvidersConfig::from_toml(&text, "p.toml").unwrap();
        let mut values: Vec<String> = config
            .secret_values(&env(&[("HEADER_KEY", "header-secret-value")]))
            .iter()
            .map(|s| s.expose().to_owned())
            .collect();
        values.sort();
        assert_eq!(values, ["file-held-secret-value", "header-secret-value"]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn builtins_need_their_credential_and_say_which() {
        let config = ProvidersConfig::default();
        let err = refused(config.provider("openai", &env(&[])));
        assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
        assert!(
            config
                .provider("openai", &env(&[("OPENAI_API_KEY", "k")]))
                .is_ok()
        );
        assert!(
            config
                .provider("anthropic", &env(&[("ANTHROPIC_API_KEY", "k")]))
                .is_ok()
        );
        let err = refused(config.provider("openai-compatible", &env(&[])));
        assert!(matches!(err, ConfigError::NoBaseUrl(_)), "{err}");
        assert!(
            config
                .provider(
                    "openai-compatible",
                    &env(&[("FORGE_OPENAI_COMPATIBLE_BASE_URL", "http://127.0.0.1:1/v1")])
                )
                .is_ok()
        );
        assert!(matches!(
            config.provider("nope", &env(&[])),
            Err(ConfigError::Unknown(_))
        ));
    }

    #[test]
    fn inlined_credentials_are_refused_without_echoing_them() {
        let text = r#"
            [providers.groq]
            kind = "openai-compatible"
            base_url = "https://api.groq.com/openai/v1"
            api_key = "gsk_live_0123456789"
        "#;
        let config = ProvidersConfig::from_toml(text, "p.toml").unwrap();
        let err = refused(config.provider("groq", &env(&[])));
        assert!(err.to_string().contains("env:NAME"), "{err}");
        assert!(!err.to_string().contains("gsk_live"), "{err}");

        let text = r#"
            [providers.gw]
            kind = "openai-compatible"
            base_url = "http://gw/v1"
            headers = { "X-Gateway-Token" = "literal", "x-team" = "search" }
        "#;
        let config = ProvidersConfig::from_toml(text, "p.toml").unwrap();
        let err = refused(config.provider("gw", &env(&[])));
        assert!(err.to_string().contains("headers.X-Gateway-Token"), "{err}");
    }

    #[test]
    fn named_entries_become_prefixes_and_bad_settings_are_named() {
        let text = r#"
            [providers.local]
            kind = "openai-compatible"
            base_url = "http://127.0.0.1:11434/v1"
            request_timeout_secs = 0
        "#;
        let config = ProvidersConfig::from_toml(text, "p.toml").unwrap();
        assert!(config.names().contains(&"local".to_owned()));
        let err = refused(config.provider("local", &env(&[])));
        assert!(err.to_string().contains("request_timeout_secs"), "{err}");
        let err = ProvidersConfig::from_toml("[providers.x]\nbase = 1", "p.toml").unwrap_err();
        assert!(err.to_string().contains("p.toml"), "{err}");
    }
}
