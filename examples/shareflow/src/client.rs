//! ShareFlow's client of the publishing service: one post, retried on failure under the one
//! idempotency key that names it.
//!
//! The key is the post's identity, not the request's: [`delivery_key`] derives it from the
//! tenant and the document, so every attempt, every retry after a lost response, and both
//! workflows (legacy and agent) name the same delivery and the service records it once.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::publisher::{Delivery, IDEMPOTENCY_KEY, PostRequest};

/// The idempotency key of the post about `document` in `tenant`: the same for every attempt and
/// both workflows.
pub fn delivery_key(tenant: &str, document: &str) -> String {
    let digest = Sha256::digest(format!("{tenant}\n{document}").as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("shareflow-{hex}")
}

/// Why a post could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The service refused the post (a 4xx): retrying would not help.
    #[error("the publisher refused the post ({status}): {body}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// What the service said.
        body: String,
    },
    /// Every attempt failed in a way a later one might not (5xx, connection, timeout).
    #[error("the publisher did not answer after {attempts} attempts: {last}")]
    Unavailable {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
}

/// The publishing service's client.
#[derive(Debug, Clone)]
pub struct PublisherClient {
    base: String,
    http: reqwest::Client,
    attempts: u32,
}

impl PublisherClient {
    /// A client of the service at `base` (`http://host:port`), trying each post up to three
    /// times.
    pub fn new(base: impl Into<String>) -> Self {
        // The workspace's reqwest leaves the TLS provider to the application.
        forge::providers::http::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Self {
            base: base.into().trim_end_matches('/').to_owned(),
            http,
            attempts: 3,
        }
    }

    /// The service's address.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Delivers `post` under `key`, retrying with the same key until the service answers.
    pub async fn publish(&self, key: &str, post: &PostRequest) -> Result<Delivery, PublishError> {
        let mut last = String::new();
        for attempt in 1..=self.attempts {
            if attempt > 1 {
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
            }
            let sent = self
                .http
                .post(format!("{}/posts", self.base))
                .header(IDEMPOTENCY_KEY, key)
                .json(post)
                .send()
                .await;
            let response = match sent {
                Ok(r) => r,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            let status = response.status();
            if status.is_success() {
                return response
                    .json::<Delivery>()
                    .await
                    .map_err(|e| PublishError::Unavailable {
                        attempts: attempt,
                        last: format!("unreadable answer: {e}"),
                    });
            }
            let body = response.text().await.unwrap_or_default();
            if status.is_client_error() {
                return Err(PublishError::Refused {
                    status: status.as_u16(),
                    body,
                });
            }
            last = format!("{status}: {body}");
        }
        Err(PublishError::Unavailable {
            attempts: self.attempts,
            last,
        })
    }

    /// Every delivery the service recorded for `account`.
    pub async fn deliveries(&self, account: &str) -> Result<Vec<Delivery>, PublishError> {
        let unavailable = |e: reqwest::Error| PublishError::Unavailable {
            attempts: 1,
            last: e.to_string(),
        };
        self.http
            .get(format!("{}/posts?account={}", self.base, encode(account)))
            .send()
            .await
            .map_err(unavailable)?
            .error_for_status()
            .map_err(unavailable)?
            .json()
            .await
            .map_err(unavailable)
    }
}

/// Percent-encodes everything but unreserved characters, for a query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_has_one_key_per_tenant_and_document() {
        assert_eq!(
            delivery_key("acme", "spring-launch"),
            delivery_key("acme", "spring-launch")
        );
        assert_ne!(
            delivery_key("acme", "spring-launch"),
            delivery_key("globex", "spring-launch")
        );
        assert_ne!(
            delivery_key("acme", "spring-launch"),
            delivery_key("acme", "holiday-hours")
        );
        // No separator ambiguity: ("a\nb", "c") is not ("a", "b\nc").
        assert_ne!(delivery_key("a", "b-c"), delivery_key("a-b", "c"));
    }
}
