//! Request keys: a caller's own name for a thread or a run it asked for, so that a request sent
//! again (after a timeout, a dropped connection, a crashed client) finds what the first one made
//! instead of making a second.
//!
//! A key is claimed before the thing it names is created: the store records, once per tenant and
//! kind, which id the key names and a digest of the request that claimed it. The first claim
//! holds; every later claim of the key is answered with it. The caller then creates the thing
//! under the claimed id unless it exists — so a claimer that died between its claim and its
//! create is finished by the next request with the key, and two racing requests create one thing
//! (the store refuses a second of the same id). A run's key names one request: a claim whose
//! digest differs (another message, agent, thread or principal) is a conflict, never the first
//! run. A thread's key is get-or-create: whoever asks with it gets the thread.
//!
//! Keys are kept as long as what they name: erasing a thread removes the keys of it and its runs,
//! erasing a run removes its key. A key is at most [`MAX_KEY_BYTES`] bytes of text and is stored
//! as given (callers choose keys that are not secrets; a digest, never the request, is stored).

use async_trait::async_trait;

use crate::Error;
use crate::id::ThreadId;
use crate::scope::Scope;

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// What a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// A thread (an external key: the caller's record the thread is about).
    Thread,
    /// A run (an idempotency key: one start request).
    Run,
}

impl KeyKind {
    /// How stores spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Thread => "thread",
            KeyKind::Run => "run",
        }
    }
}

/// A key's claim: the id it names, the thread that id is or belongs to, and the digest of the
/// request that claimed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyClaim {
    /// The thread's or the run's id.
    pub id: uuid::Uuid,
    /// The thread (the id itself for a thread's key): what erasing removes the key with.
    pub thread_id: ThreadId,
    /// The claiming request's digest ([`digest`]); empty for a thread's key.
    pub digest: String,
}

/// Port: claims of request keys. An adapter implements [`RequestKeys::hold_key`]; callers call
/// [`RequestKeys::claim_key`], which refuses a malformed key before the adapter is asked.
#[async_trait]
pub trait RequestKeys: Send + Sync {
    /// Records `claim` for `key` of `kind` in `scope`'s tenant unless the key has a claim, and
    /// returns the claim that holds — `claim` itself, or the earlier one. Racing calls for one
    /// key return one claim to all of them. The key has passed [`check_key`].
    async fn hold_key(
        &self,
        scope: &Scope,
        kind: KeyKind,
        key: &str,
        claim: KeyClaim,
    ) -> Result<KeyClaim, Error>;

    /// Claims `key` of `kind` in `scope`'s tenant as `claim`, unless it is claimed already:
    /// returns the claim that holds — `claim` itself, or the earlier one, which the caller must
    /// honour. A malformed key ([`check_key`]) is refused.
    async fn claim_key(
        &self,
        scope: &Scope,
        kind: KeyKind,
        key: &str,
        claim: KeyClaim,
    ) -> Result<KeyClaim, Error> {
        check_key(key)?;
        self.hold_key(scope, kind, key, claim).await
    }
}

/// The check every caller applies to a key: 1 to [`MAX_KEY_BYTES`] bytes, no control characters.
pub fn check_key(key: &str) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Error::invalid(format!(
            "a key is 1 to {MAX_KEY_BYTES} bytes"
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(Error::invalid("a key has no control characters"));
    }
    Ok(())
}

/// The digest of a request: hex SHA-256 of its canonical JSON (as a tool input's hash).
pub fn digest(request: &serde_json::Value) -> String {
    crate::interaction::input_hash(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_text() {
        assert!(check_key("order-42").is_ok());
        assert!(check_key(&"é".repeat(128)).is_ok());
        assert!(check_key("").is_err());
        assert!(check_key(&"é".repeat(129)).is_err());
        assert!(check_key("a\nb").is_err());
    }

    #[test]
    fn digests_tell_requests_apart() {
        let a = digest(&serde_json::json!({"m": "hi"}));
        assert_eq!(a, digest(&serde_json::json!({"m": "hi"})));
        assert_ne!(a, digest(&serde_json::json!({"m": "hi!"})));
        assert_eq!(a.len(), 64);
    }
}
