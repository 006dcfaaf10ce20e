//! How a failed command says why: the error and its causes, each once.
//!
//! Many errors put their cause in their own message and also expose it as their source (a
//! provider's missing key, an OS error behind a file error), so printing the whole chain said it
//! twice. A cause whose text the message so far already contains is left out.

/// `error`'s message followed by each cause it does not already say, joined by `: `.
pub(crate) fn message(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that says its cause and exposes it as its source too.
    #[derive(Debug)]
    struct Says(Missing);

    impl std::fmt::Display for Says {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "provider openai: api_key: {}", self.0)
        }
    }

    impl std::error::Error for Says {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[derive(Debug)]
    struct Missing;

    impl std::fmt::Display for Missing {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("environment variable OPENAI_API_KEY is not set")
        }
    }

    impl std::error::Error for Missing {}

    #[test]
    fn each_cause_is_said_once() {
        let e = anyhow::Error::new(Says(Missing)).context("model provider openai cannot be used");
        assert_eq!(
            message(&e),
            "model provider openai cannot be used: provider openai: api_key: environment \
             variable OPENAI_API_KEY is not set"
        );
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file (os error 2)");
        let e = anyhow::Error::new(io).context("failed to read a.toml");
        assert_eq!(
            message(&e),
            "failed to read a.toml: no such file (os error 2)"
        );
    }
}
