//! Secret redaction: known secret values (registered from the secret store) and the shapes of
//! common credentials, scrubbed from tool results before they enter a prompt or storage.
//!
//! Patterns cover API keys of the common providers (OpenAI and Anthropic `sk-…`, AWS `AKIA…`,
//! GitHub `gh?_…`, Slack `xox?-…`, Google `AIza…`, Stripe `sk_live_…`), bearer tokens, JWTs, the
//! signature parameters of signed URLs, and PEM private keys. Each match becomes `[REDACTED]`
//! (a bearer token keeps its `Bearer ` prefix; a URL keeps its parameter name).
//!
//! Secrets resolved from references anywhere in the process (a provider's key, an MCP server's
//! `env:` value, a storage or embedder key) are registered with [`register_secret`] as they are
//! resolved, and every redactor scrubs them too: a tool that echoes one never shows it to the
//! model, an output or the store, whichever configuration it came from.
//!
//! Text that arrives in pieces (a model's stream) goes through a [`StreamRedactor`]: scrubbing
//! each piece alone would let a secret split across two pieces through whole, so it emits only the
//! prefix that can no longer become part of a secret or a credential, and holds the rest back.

use std::borrow::Cow;
use std::sync::Arc;

use parking_lot::RwLock;
use regex::Regex;

/// What a redacted span is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Secret values shorter than this are not registered: they would match ordinary text.
pub const MIN_SECRET_LEN: usize = 8;

/// The secrets registered process-wide, longest first.
static REGISTERED: RwLock<Option<Arc<Vec<String>>>> = RwLock::new(None);

/// Registers a secret value resolved from a reference, so that every [`Redactor`] of the process,
/// made before or after, scrubs it. Values shorter than [`MIN_SECRET_LEN`] are ignored, as by
/// [`Redactor::new`]. Secrets live as long as the process: nothing unregisters one.
pub fn register_secret(value: &str) {
    if value.len() < MIN_SECRET_LEN {
        return;
    }
    let mut registered = REGISTERED.write();
    let known = registered
        .as_deref()
        .is_some_and(|r| r.iter().any(|s| s == value));
    if !known {
        let mut all: Vec<String> = registered.as_deref().cloned().unwrap_or_default();
        all.push(value.to_owned());
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
        *registered = Some(Arc::new(all));
    }
}

/// The secrets registered so far.
fn registered() -> Arc<Vec<String>> {
    REGISTERED.read().clone().unwrap_or_default()
}

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
    /// Patterns whose first group (and second, when there is one) is kept and the rest redacted.
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
    r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+(@)",
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

    /// Whether `text` has the shape of a credential (a provider key, a bearer token, a JWT, a
    /// URL with a password or a signature, a private key): a value a configuration must give as
    /// a reference, never inline, whatever it is called.
    pub fn credential_shaped(text: &str) -> bool {
        static PATTERNS: std::sync::OnceLock<Redactor> = std::sync::OnceLock::new();
        let patterns = PATTERNS.get_or_init(|| Redactor::new(Vec::<String>::new()));
        patterns
            .inner
            .whole
            .iter()
            .chain(&patterns.inner.keep_prefix)
            .any(|re| re.is_match(text))
    }

    /// How many secret values this redactor was given (those registered process-wide with
    /// [`register_secret`] are scrubbed too, and not counted here).
    pub fn secret_count(&self) -> usize {
        self.inner.secrets.len()
    }

    /// `text` with every secret value and credential-shaped span replaced.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        let registered = registered();
        let mut secrets: Vec<&String> = self.inner.secrets.iter().collect();
        if !registered.is_empty() {
            // Longest first across both lists, so a secret containing another goes whole.
            secrets.extend(registered.iter());
            secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
        for secret in secrets {
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
                        let kept_after = c.get(2).map_or("", |m| m.as_str());
                        format!("{}{REDACTED}{kept_after}", &c[1])
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

/// Characters after which a credential cannot continue (besides white space): none of the
/// credential patterns' token characters.
const BREAKS: &[char] = &[
    '"', '\'', '`', ',', ';', '{', '}', '[', ']', '(', ')', '<', '>', '|',
];

/// Text held back at most while waiting to see whether it becomes a credential; past it the older
/// part is released (scrubbed). A PEM private key fits well within it.
pub const MAX_HOLD_BYTES: usize = 16 * 1024;

impl Redactor {
    /// The byte ranges of every secret value and credential pattern found in `text`.
    fn matches(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let mut found = Vec::new();
        let registered = registered();
        for secret in self.inner.secrets.iter().chain(registered.iter()) {
            found.extend(
                text.match_indices(secret.as_str())
                    .map(|(at, m)| at..at + m.len()),
            );
        }
        for re in self.inner.whole.iter().chain(&self.inner.keep_prefix) {
            found.extend(re.find_iter(text).map(|m| m.range()));
        }
        found
    }

    /// How much of `held` (text not yet released) can be released now: everything before the
    /// first position at which a secret or credential could still be forming or is cut in two.
    fn releasable(&self, held: &str) -> usize {
        // A credential is a run of characters no credential pattern stops at (spaces, and the
        // punctuation of JSON and prose): the last such run may still grow. A pattern that does
        // run across one of these is protected by the loop below once it is complete.
        let mut cut = held
            .char_indices()
            .rev()
            .find(|(_, c)| c.is_whitespace() || BREAKS.contains(c))
            .map_or(0, |(i, c)| i + c.len_utf8());
        // `Bearer` and the spaces after it belong with the token that follows.
        if let Some(m) = bearer_tail().find(&held[..cut]) {
            cut = m.start();
        }
        // A private key spans lines: hold from its BEGIN until its END arrives.
        if let Some(begin) = held.rfind("-----BEGIN")
            && !pem_end().is_match(&held[begin..])
        {
            cut = cut.min(begin);
        }
        // A registered secret may contain spaces: hold any tail that could still become one.
        let registered = registered();
        for secret in self.inner.secrets.iter().chain(registered.iter()) {
            let longest = (1..=secret.len().min(held.len())).rev().find(|&k| {
                held.is_char_boundary(held.len() - k) && secret.starts_with(&held[held.len() - k..])
            });
            if let Some(k) = longest {
                cut = cut.min(held.len() - k);
            }
        }
        // Never cut through a secret or credential already there.
        let found = self.matches(held);
        while let Some(start) = found
            .iter()
            .filter(|r| r.start < cut && cut < r.end)
            .map(|r| r.start)
            .min()
        {
            cut = start;
        }
        if held.len() - cut > MAX_HOLD_BYTES {
            cut = held.floor_char_boundary(held.len() - MAX_HOLD_BYTES / 2);
        }
        cut
    }
}

fn bearer_tail() -> &'static Regex {
    static RE: std::sync::OnceLock<Option<Regex>> = std::sync::OnceLock::new();
    // A constant pattern: compiled once; if it ever failed to compile, nothing would be held for
    // it, which the tests would catch.
    RE.get_or_init(|| Regex::new(r"(?i)\bbearer\s+$").ok())
        .as_ref()
        .unwrap_or_else(|| never_matches())
}

fn pem_end() -> &'static Regex {
    static RE: std::sync::OnceLock<Option<Regex>> = std::sync::OnceLock::new();
    RE.get_or_init(|| Regex::new(r"-----END [A-Z ]*PRIVATE KEY-----").ok())
        .as_ref()
        .unwrap_or_else(|| never_matches())
}

fn never_matches() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| Regex::new(r"[^\s\S]").expect("a valid constant pattern"))
}

/// Scrubs a text that arrives in pieces (a model's streamed answer, a tool call's streamed input):
/// [`StreamRedactor::push`] returns the scrubbed part of what has arrived that no later piece can
/// turn into a secret or credential, and holds the rest back; [`StreamRedactor::finish`] releases
/// what is held when the text is complete. The concatenation of everything returned never contains
/// a registered secret or a credential-shaped span, however the text was split.
#[derive(Debug, Clone)]
pub struct StreamRedactor {
    redactor: Redactor,
    held: String,
}

impl StreamRedactor {
    /// A stream scrubbed by `redactor`.
    pub fn new(redactor: Redactor) -> Self {
        Self {
            redactor,
            held: String::new(),
        }
    }

    /// Adds the next piece; returns what can be released now, scrubbed (often empty).
    pub fn push(&mut self, piece: &str) -> String {
        self.held.push_str(piece);
        let cut = self.redactor.releasable(&self.held);
        if cut == 0 {
            return String::new();
        }
        let rest = self.held.split_off(cut);
        let ready = std::mem::replace(&mut self.held, rest);
        self.redactor.redact(&ready).into_owned()
    }

    /// Whether text is held back.
    pub fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// The text is complete: releases what is held, scrubbed.
    pub fn finish(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        self.redactor.redact(&held).into_owned()
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

    /// Every secret and credential of [`registered_values_and_credential_shapes_are_scrubbed`],
    /// embedded in running text.
    const STREAMED: &str = "Here you go: db: hunter2-database-password! then key \
        sk-proj-abcdefghijklmnopqrstuvwx1234 and Authorization: Bearer abc.def-ghi_jkl and \
        https://b.s3.amazonaws.com/f?X-Amz-Signature=abc123&x=1 and jwt \
        eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl and \
        -----BEGIN RSA PRIVATE KEY-----\nMIIEsecretkeybody\n-----END RSA PRIVATE KEY----- and \
        correct horse battery staple, done.";

    const LEAKS: &[&str] = &[
        "hunter2",
        "abcdefghijklmnopqrstuvwx1234",
        "abc.def-ghi_jkl",
        "abc123",
        "c2lnbmF0dXJlLXZhbHVl",
        "MIIEsecretkeybody",
        "horse battery",
    ];

    fn streamed(r: &Redactor, pieces: &[&str]) -> String {
        let mut s = StreamRedactor::new(r.clone());
        let mut out: String = pieces.iter().map(|p| s.push(p)).collect();
        out.push_str(&s.finish());
        out
    }

    /// The same secrets as JSON, the way a tool call's input streams.
    const STREAMED_JSON: &str = r#"{"db":"hunter2-database-password","key":"sk-proj-abcdefghijklmnopqrstuvwx1234","auth":"Bearer abc.def-ghi_jkl","url":"https://b.s3.amazonaws.com/f?X-Amz-Signature=abc123&x=1","jwt":["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl"],"phrase":"correct horse battery staple"}"#;

    #[test]
    fn a_secret_split_at_any_byte_is_scrubbed_from_the_stream() {
        for text in [STREAMED, STREAMED_JSON] {
            scrubbed_at_every_split(text);
        }
    }

    fn scrubbed_at_every_split(text: &str) {
        let r = Redactor::new(["hunter2-database-password", "correct horse battery staple"]);
        let whole = r.redact(text).into_owned();
        for leak in LEAKS {
            assert!(!whole.contains(leak), "{leak} in {whole}");
        }
        for at in (1..text.len()).filter(|&i| text.is_char_boundary(i)) {
            let out = streamed(&r, &[&text[..at], &text[at..]]);
            assert_eq!(out, whole, "split at {at}");
        }
        // Three pieces, every pair of split points a few bytes apart, and one byte at a time.
        for at in (1..text.len() - 3).filter(|&i| text.is_char_boundary(i)) {
            let b = (at + 3..text.len())
                .find(|&j| text.is_char_boundary(j))
                .unwrap_or(text.len());
            let out = streamed(&r, &[&text[..at], &text[at..b], &text[b..]]);
            assert_eq!(out, whole, "split at {at} and {b}");
        }
        let bytes: Vec<&str> = text
            .char_indices()
            .map(|(i, c)| &text[i..i + c.len_utf8()])
            .collect();
        assert_eq!(streamed(&r, &bytes), whole);
    }

    proptest::proptest! {
        /// Any Unicode, with a registered secret somewhere in it, streamed in pieces cut at any
        /// character boundaries (long stretches without a space included, which reach the
        /// hold-back cap): the stream never panics and never lets the secret through.
        #[test]
        fn any_unicode_streamed_in_any_pieces_keeps_the_secret_out(
            before in crate::text::strategy::unicode_runs(12_000),
            after in crate::text::strategy::unicode(200),
            cuts in proptest::collection::vec(0usize..20_000, 0..6),
        ) {
            let secret = "hunter2-database-password";
            let text = format!("{before} {secret} {after}");
            let r = Redactor::new([secret]);
            let mut at: Vec<usize> = cuts.iter().map(|c| text.floor_char_boundary(c % (text.len() + 1))).collect();
            at.push(0);
            at.push(text.len());
            at.sort_unstable();
            let pieces: Vec<&str> = at.windows(2).map(|w| &text[w[0]..w[1]]).collect();
            let out = streamed(&r, &pieces);
            proptest::prop_assert!(!out.contains(secret));
            proptest::prop_assert!(!r.redact(&text).contains(secret));
        }
    }

    #[test]
    fn a_secret_registered_later_is_scrubbed_by_every_redactor() {
        let made_before = Redactor::new(["provider-key-0001"]);
        let secret = "mcp-env-value-registered-7c1d";
        assert_eq!(made_before.redact(secret), secret, "not registered yet");
        register_secret(secret);
        // A longer registered secret containing a redactor's own goes whole.
        register_secret("provider-key-0001-and-more-4f2a");
        let text = format!("echo: {secret}; provider-key-0001-and-more-4f2a");
        for r in [made_before.clone(), Redactor::default()] {
            assert_eq!(r.redact(&text), "echo: [REDACTED]; [REDACTED]");
        }
        let streamed = streamed(
            &made_before,
            &["echo: mcp-env-val", "ue-registered-7c1d done"],
        );
        assert_eq!(streamed, "echo: [REDACTED] done");
    }

    #[test]
    fn a_password_in_a_url_is_redacted_and_the_url_keeps_its_shape() {
        let r = Redactor::default();
        assert_eq!(
            r.redact("DATABASE_URL=postgres://app:s3cr3t-pass@db.internal:5432/forge"),
            "DATABASE_URL=postgres://app:[REDACTED]@db.internal:5432/forge"
        );
        assert_eq!(
            r.redact("see https://example.com/a:b"),
            "see https://example.com/a:b"
        );
    }

    #[test]
    fn credential_shapes_are_recognised_whatever_their_name() {
        for value in [
            "Bearer abcdefgh12345678",
            "sk-proj-abcdefghijklmnopqrstuvwx1234",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "postgres://app:s3cr3t@db:5432/forge",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
        ] {
            assert!(Redactor::credential_shaped(value), "{value}");
        }
        for value in [
            "INFO",
            "/var/lib/forge",
            "https://api.example.com/v1",
            "true",
        ] {
            assert!(!Redactor::credential_shaped(value), "{value}");
        }
    }

    #[test]
    fn ordinary_text_is_released_word_by_word() {
        let r = Redactor::default();
        let mut s = StreamRedactor::new(r);
        assert_eq!(s.push("Hello wor"), "Hello ");
        assert_eq!(s.push("ld, how "), "world, how ");
        assert_eq!(s.push("are you?"), "are ");
        assert_eq!(s.finish(), "you?");
    }

    #[test]
    fn a_very_long_word_is_not_held_forever() {
        let r = Redactor::default();
        let mut s = StreamRedactor::new(r);
        let mut out = s.push(&"x".repeat(MAX_HOLD_BYTES + 10));
        assert!(!out.is_empty(), "released past the hold limit");
        out.push_str(&s.finish());
        assert_eq!(out.len(), MAX_HOLD_BYTES + 10);
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
