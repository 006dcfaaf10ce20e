//! Token usage of model calls.

use std::ops::AddAssign;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Tokens one model call (or a sum of calls) consumed, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Completion tokens, reasoning included.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Output tokens spent on hidden reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Requests the provider's own tools made on the call's behalf (Anthropic's web search and
    /// fetch, for example), each charged per request by the price table.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub server_tool_requests: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens = self.input_tokens.saturating_add(rhs.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(rhs.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(rhs.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(rhs.cache_write_tokens);
        self.server_tool_requests = self
            .server_tool_requests
            .saturating_add(rhs.server_tool_requests);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(rhs.reasoning_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_adds_field_by_field_and_saturates() {
        let mut u = Usage {
            input_tokens: 10,
            output_tokens: 2,
            cache_read_tokens: 4,
            ..Usage::default()
        };
        u += Usage {
            input_tokens: 1,
            output_tokens: u64::MAX,
            reasoning_tokens: 3,
            ..Usage::default()
        };
        assert_eq!(u.input_tokens, 11);
        assert_eq!(u.output_tokens, u64::MAX);
        assert_eq!(u.cache_read_tokens, 4);
        assert_eq!(u.reasoning_tokens, 3);
        assert_eq!(u.total_tokens(), u64::MAX);
    }
}
