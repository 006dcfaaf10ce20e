//! Credentials: referenced from the environment or a file, never inlined in configuration, never
//! printed.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A credential's value: held in `secrecy`'s `SecretString`, so its memory is wiped when it is
/// dropped. `Debug` shows no part of it.
#[derive(Clone)]
pub struct Secret(secrecy::SecretString);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(secrecy::SecretString::from(value.into()))
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        secrecy::ExposeSecret::expose_secret(&self.0)
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where a credential lives: `env:NAME` or `file:PATH` (a mounted secret, trailing newline
/// trimmed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// An environment variable.
    Env(String),
    /// A file, such as a mounted Kubernetes or Docker secret.
    File(PathBuf),
}

/// Why a credential could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The text is not a reference. The value is not repeated in the message.
    #[error("credentials must be referenced as env:NAME or file:PATH, never written inline")]
    NotAReference,
    /// The environment variable is not set.
    #[error("environment variable {0} is not set")]
    MissingEnv(String),
    /// The file could not be read.
    #[error("could not read secret file {0}")]
    Unreadable(PathBuf),
}

impl FromStr for SecretRef {
    type Err = SecretError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(name) = s.strip_prefix("env:")
            && !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Ok(SecretRef::Env(name.to_owned()));
        }
        if let Some(path) = s.strip_prefix("file:")
            && !path.is_empty()
        {
            return Ok(SecretRef::File(PathBuf::from(path)));
        }
        Err(SecretError::NotAReference)
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRef::Env(name) => write!(f, "env:{name}"),
            SecretRef::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

impl SecretRef {
    /// Reads the value; `env` looks environment variables up (injected so tests need not touch the
    /// process environment). The value is registered with the process's redactors
    /// ([`forge_core::redact::register_secret`]): whatever configuration it was resolved for, a
    /// tool or a model that repeats it shows `[REDACTED]`.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Secret, SecretError> {
        let resolved = self.read(env)?;
        forge_core::redact::register_secret(resolved.expose());
        Ok(resolved)
    }

    fn read(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Secret, SecretError> {
        match self {
            SecretRef::Env(name) => env(name)
                .filter(|v| !v.is_empty())
                .map(Secret::new)
                .ok_or_else(|| SecretError::MissingEnv(name.clone())),
            SecretRef::File(path) => std::fs::read_to_string(path)
                .map(|v| Secret::new(v.trim_end_matches(['\n', '\r'])))
                .map_err(|_| SecretError::Unreadable(path.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_references_parse_and_values_never_print() {
        assert_eq!(
            "env:OPENAI_API_KEY".parse(),
            Ok(SecretRef::Env("OPENAI_API_KEY".into()))
        );
        assert_eq!(
            "file:/run/secrets/k".parse(),
            Ok(SecretRef::File("/run/secrets/k".into()))
        );
        for inline in ["sk-live-abc123", "env:", "env:has space", "Bearer x"] {
            let err = inline.parse::<SecretRef>().unwrap_err();
            assert!(
                !err.to_string().contains(inline) || inline == "env:",
                "{err}"
            );
        }
        let secret = Secret::new("sk-live-abc123");
        assert!(!format!("{secret:?}").contains("abc123"));
    }

    #[test]
    fn resolving_reads_env_and_files() {
        let env = |name: &str| (name == "K").then(|| "v".to_owned());
        assert_eq!(
            SecretRef::Env("K".into()).resolve(&env).unwrap().expose(),
            "v"
        );
        assert_eq!(
            SecretRef::Env("NOPE".into()).resolve(&env),
            Err(SecretError::MissingEnv("NOPE".into()))
        );
        let dir = std::env::temp_dir().join(format!("forge-secret-{}", std::process::id()));
        std::fs::write(&dir, "from-file\n").unwrap();
        assert_eq!(
            SecretRef::File(dir.clone()).resolve(&env).unwrap().expose(),
            "from-file"
        );
        std::fs::remove_file(&dir).unwrap();
    }
}
