//! Retrying model calls: retryable classes only, exponential backoff with full jitter, the
//! provider's retry-after honoured.
//!
//! A call is retried when it fails before the response produced anything: a refused request, or a
//! stream whose first item is an error. A stream that already delivered text, a tool call or a
//! usage report is never retried — its output has been shown and its usage counted, and repeating
//! it would duplicate both.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use forge_core::ports::model::{
    ModelChunk, ModelError, ModelErrorKind, ModelProvider, ModelRequest, ModelStream,
};
use futures_util::StreamExt;

/// When and how long to wait before trying a failed call again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// The first backoff; each retry doubles it.
    pub base_delay: Duration,
    /// The longest backoff.
    pub max_delay: Duration,
    /// The longest retry-after honoured; a provider asking for more gets the error returned at
    /// once, so that the run's own backoff (or a person) decides.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based) after `error`, or `None` to give up.
    pub fn delay(&self, retry: u32, error: &ModelError) -> Option<Duration> {
        if retry >= self.max_retries || !error.is_retryable() {
            return None;
        }
        if let ModelErrorKind::RateLimited {
            retry_after: Some(after),
        } = error.kind()
        {
            return (*after <= self.max_retry_after).then_some(*after);
        }
        let ceiling = self
            .base_delay
            .saturating_mul(1u32.checked_shl(retry).unwrap_or(u32::MAX))
            .min(self.max_delay);
        // Full jitter: uniformly in [ceiling / 2, ceiling], so that many callers refused at once do
        // not come back at once.
        let random = uuid::Uuid::new_v4().as_u128() as u64;
        let fraction = 0.5 + (random % 1000) as f64 / 2000.0;
        Some(ceiling.mul_f64(fraction))
    }
}

/// A provider whose calls are retried by a [`RetryPolicy`].
pub struct Retrying {
    inner: Arc<dyn ModelProvider>,
    policy: RetryPolicy,
}

impl Retrying {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ModelProvider>, policy: RetryPolicy) -> Self {
        Self { inner, policy }
    }
}

impl std::fmt::Debug for Retrying {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrying")
            .field("provider", &self.inner.name())
            .field("policy", &self.policy)
            .finish()
    }
}

#[async_trait]
impl ModelProvider for Retrying {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let mut retry = 0;
        loop {
            let error = match self.inner.stream(request.clone()).await {
                Err(e) => e,
                Ok(mut stream) => {
                    // Hold back request ids and model names until something else arrives: an
                    // error right after one is still a failure before any output.
                    let mut held = Vec::new();
                    let first = loop {
                        match stream.next().await {
                            Some(Ok(chunk @ (ModelChunk::RequestId(_) | ModelChunk::Model(_)))) => {
                                held.push(Ok(chunk))
                            }
                            other => break other,
                        }
                    };
                    match first {
                        Some(Err(e)) if self.policy.delay(retry, &e).is_some() => e,
                        first => {
                            held.extend(first);
                            return Ok(Box::pin(futures_util::stream::iter(held).chain(stream)));
                        }
                    }
                }
            };
            let Some(wait) = self.policy.delay(retry, &error) else {
                return Err(error);
            };
            tokio::time::sleep(wait).await;
            retry += 1;
        }
    }

    async fn health(&self) -> Result<(), ModelError> {
        self.inner.health().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_retryable_errors_within_budget_are_retried() {
        let policy = RetryPolicy::default();
        assert!(policy.delay(0, &ModelErrorKind::Server.into()).is_some());
        assert!(
            policy
                .delay(1, &ModelErrorKind::Overloaded.into())
                .is_some()
        );
        assert!(policy.delay(2, &ModelErrorKind::Server.into()).is_none());
        assert!(
            policy
                .delay(0, &ModelErrorKind::Authentication.into())
                .is_none()
        );
        assert!(
            policy
                .delay(0, &ModelErrorKind::ContextLengthExceeded.into())
                .is_none()
        );
        assert!(
            policy
                .delay(0, &ModelErrorKind::BadRequest("x".into()).into())
                .is_none()
        );
    }

    #[test]
    fn backoff_doubles_with_jitter_and_retry_after_is_honoured() {
        let policy = RetryPolicy::default();
        for _ in 0..50 {
            let d0 = policy.delay(0, &ModelErrorKind::Server.into()).unwrap();
            assert!(d0 >= Duration::from_millis(250) && d0 <= Duration::from_millis(500));
            let d1 = policy.delay(1, &ModelErrorKind::Server.into()).unwrap();
            assert!(d1 >= Duration::from_millis(500) && d1 <= Duration::from_millis(1000));
        }
        let limited = |s| -> ModelError {
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(s)),
            }
            .into()
        };
        assert_eq!(policy.delay(0, &limited(7)), Some(Duration::from_secs(7)));
        assert_eq!(policy.delay(0, &limited(61)), None);
    }
}
