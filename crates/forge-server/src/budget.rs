//! A response's byte budget, spent while the response is resolved rather than checked once it is
//! built: a query within the complexity limit can still select many large values (a thousand
//! aliases of one large event each), and building that whole response before measuring it is
//! the memory spike the budget exists to prevent. Each scalar value a field resolves to is
//! charged at its approximate JSON size (by the `guard` extension); once the budget is spent,
//! later fields fail without resolving and the request answers `RESPONSE_TOO_LARGE`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_graphql::Value;

/// What one request may still add to its response, in bytes.
#[derive(Debug)]
pub(crate) struct ResponseBudget {
    limit: usize,
    spent: AtomicUsize,
    exceeded: AtomicBool,
}

impl ResponseBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            spent: AtomicUsize::new(0),
            exceeded: AtomicBool::new(false),
        })
    }

    /// Whether the response has outgrown the budget.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Relaxed)
    }

    /// Bytes charged so far.
    pub(crate) fn spent(&self) -> usize {
        self.spent.load(Ordering::Relaxed)
    }

    /// Charges `bytes`; false once the total passes the limit.
    pub(crate) fn charge(&self, bytes: usize) -> bool {
        let total = self.spent.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total > self.limit {
            self.exceeded.store(true, Ordering::Relaxed);
        }
        !self.exceeded()
    }
}

/// Whether a qualified type (`[JSON!]!`, `String`) is a built-in or custom scalar.
pub(crate) fn is_scalar(qualified: &str) -> bool {
    let name = qualified.trim_matches(|c| matches!(c, '[' | ']' | '!'));
    matches!(name, "String" | "ID" | "Int" | "Float" | "Boolean" | "JSON")
}

/// The size of `value` as compact JSON, near enough (strings without escapes).
pub(crate) fn json_size(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Boolean(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Enum(e) => e.len() + 2,
        Value::Binary(b) => b.len() * 4 / 3 + 4,
        Value::List(items) => items.iter().map(|v| json_size(v) + 1).sum::<usize>() + 2,
        Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + 4 + json_size(v))
                .sum::<usize>()
                + 2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_recognised_through_list_and_non_null_wrappers() {
        assert!(is_scalar("[JSON!]!"));
        assert!(is_scalar("String"));
        assert!(!is_scalar("Run!"));
        assert!(!is_scalar("[RunEvent!]!"));
    }

    #[test]
    fn sizes_track_the_encoded_json() {
        let v = Value::from_json(serde_json::json!({"a": [1, "xyz", null], "bb": {"c": true}}))
            .unwrap_or(Value::Null);
        let encoded = serde_json::to_vec(&v).map(|b| b.len()).unwrap_or(0);
        let size = json_size(&v);
        assert!(
            size >= encoded && size <= encoded * 2,
            "{size} for {encoded} bytes"
        );
    }

    #[test]
    fn the_budget_is_spent_once_past_its_limit() {
        let b = ResponseBudget::new(10);
        assert!(b.charge(6));
        assert!(!b.exceeded());
        assert!(!b.charge(6));
        assert!(b.exceeded());
        assert!(!b.charge(0), "stays spent");
    }
}
