//! Secret redaction: known secret values (registered from the secret store) and the shapes of
//! common credentials, scrubbed from tool results before they enter a prompt or storage.
//!
//! Patterns cover API keys of the common providers (OpenAI and Anthropic `sk-…`, AWS `AKIA…`,
//! GitHub `gh?_…`, Slack `xox?-…`, Google `AIza…`, Stripe `sk_live_…`), bearer tokens, JWTs, the
//! signature parameters of signed URLs, and PEM private keys. Each match becomes `[REDACTED]`
//! (a bearer token keeps its `Bearer ` prefix; a URL keeps its parameter name).

use std::borrow::Cow;
use std::sync::Arc;

use regex::Regex;

/// What a redacted span is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Secret values shorter than this are not registered: they would match ordinary text.
pub const MIN_SECRET_LEN: usize = 8;

/// Scrubs secrets from text and JSON. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Redactor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    secrets: Vec<String>,
    /// Whole-match patterns.
    whole: Vec<Regex>,
    /// Patterns whose first group is kept and the rest redacted.
    keep_prefix: Vec<Regex>,
}

fn compile(patterns: &[&str]) -> Vec<Regex> {
    // The patterns are constants: a broken one is a programming error caught by the tests, and is
    // skipped rather than taking the engine down.
    patterns.iter().filter_map(|p| Regex::new(p).ok()).collect()
}

const WHOLE: &[&str] = &[
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{30,}",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}",
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
];

const KEEP_PREFIX: &[&str] = &[
    r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}",
    r"(?i)([?&](?:x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential|signature|sig|token|access_token|api_key|apikey|key)=)[^&#\s]+",
];

impl Default for Redactor {
    fn default() -> Self {
        Self::new(Vec::<String>::new())
    }
}

impl Redactor {
    /// A redactor for these secret values (values shorter than [`MIN_SECRET_LEN`] are ignored)
    /// plus the built-in credential patterns.
    pub fn new(secrets: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        // Longest first, so a secret containing another is removed whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self {
            inner: Arc::new(Inner {
                secrets,
                whole: compile(WHOLE),
                keep_prefix: compile(KEEP_PREFIX),
            }),
        }
    }

    /// How many secret values are registered.
    pub fn secret_count(&self) -> usize {
        self.inner.secrets.len()
    }

    /// `text` with every secret value and credential-shaped span replaced.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.inner.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        for re in &self.inner.whole {
            if re.is_match(&out) {
                out = Cow::Owned(re.replace_all(&out, REDACTED).into_owned());
            }
        }
        for re in &self.inner.keep_prefix {
            if re.is_match(&out) {
                out = Cow::Owned(
                    re.replace_all(&out, |c: &regex::Captures<'_>| {
                        format!("{}{REDACTED}", &c[1])
                    })
                    .into_owned(),
                );
            }
        }
        out
    }

    /// Redacts every string (values and object keys) inside `value`; returns whether anything
    /// changed.
    pub fn redact_json(&self, value: &mut serde_json::Value) -> bool {
        use serde_json::Value;
        match value {
            Value::String(s) => match self.redact(s) {
                Cow::Borrowed(_) => false,
                Cow::Owned(clean) => {
                    *s = clean;
                    true
                }
            },
            Value::Array(items) => {
                // Every item is visited: no short-circuit.
                let mut changed = false;
                for v in items.iter_mut() {
                    changed |= self.redact_json(v);
                }
                changed
            }
            Value::Object(map) => {
                // Values in place, so the keys keep their order.
                let mut changed = false;
                for v in map.values_mut() {
                    changed |= self.redact_json(v);
                }
                let keys_change = map.keys().any(|k| matches!(self.redact(k), Cow::Owned(_)));
                if keys_change {
                    let entries = std::mem::take(map);
                    for (k, v) in entries {
                        map.insert(self.redact(&k).into_owned(), v);
                    }
                    changed = true;
                }
                changed
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_pattern_compiles() {
        for p in WHOLE.iter().chain(KEEP_PREFIX) {
            Regex::new(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        }
    }

    #[test]
    fn registered_values_and_credential_shapes_are_scrubbed() {
        let r = Redactor::new(["hunter2-database-password", "short"]);
        assert_eq!(r.secret_count(), 1, "short values are not registered");
        let cases = [
            ("db: hunter2-database-password!", "db: [REDACTED]!"),
            ("key sk-proj-abcdefghijklmnopqrstuvwx1234", "key [REDACTED]"),
            ("sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "[REDACTED]"),
            ("aws AKIAIOSFODNN7EXAMPLE ok", "aws [REDACTED] ok"),
            (
                "Authorization: Bearer abc.def-ghi_jkl",
                "Authorization: Bearer [REDACTED]",
            ),
            (
                "https://b.s3.amazonaws.com/f?X-Amz-Signature=abc123&x=1",
                "https://b.s3.amazonaws.com/f?X-Amz-Signature=[REDACTED]&x=1",
            ),
            (
                "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
                "jwt [REDACTED]",
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
                "[REDACTED]",
            ),
            ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED]"),
            ("nothing to see: sk-short", "nothing to see: sk-short"),
        ];
        for (input, expected) in cases {
            assert_eq!(r.redact(input), expected, "{input}");
        }
        assert!(matches!(r.redact("plain text"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_is_scrubbed_in_values_and_keys() {
        let r = Redactor::new(["hunter2-database-password"]);
        let mut v = serde_json::json!({
            "rows": [{"password": "hunter2-database-password"}, 7],
            "hunter2-database-password": true,
        });
        assert!(r.redact_json(&mut v));
        let text = v.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        let mut clean = serde_json::json!({"a": ["b", 1]});
        assert!(!r.redact_json(&mut clean));
    }
}
