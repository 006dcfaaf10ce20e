//! `POST /graphql`, held to limits an authenticated client cannot get around: the token is
//! checked before the body is read; the body is read within a size and a time limit; a document
//! whose fragments expand past a budget is refused before validation (whose cost grows with the
//! expansion); each tenant runs a bounded number of requests at once; execution has a deadline;
//! and a response past its byte budget is replaced by an error. Every error is in the GraphQL
//! format with a `code`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use forge_core::scope::TenantId;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Limits of `POST /graphql` beyond depth and complexity.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Longest time to receive the body once the headers are in.
    pub body_timeout: Duration,
    /// Fields a document may select once its fragments are expanded.
    pub expanded_fields: usize,
    /// Requests one tenant may have executing at once.
    pub per_tenant: usize,
    /// Longest time one request may execute.
    pub execute_timeout: Duration,
    /// Largest response body, in bytes.
    pub response_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            body_timeout: Duration::from_secs(10),
            expanded_fields: 2_000,
            per_tenant: 16,
            execute_timeout: Duration::from_secs(30),
            response_bytes: 4 * 1024 * 1024,
        }
    }
}

/// A GraphQL-format error response.
pub(crate) fn error_response(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "errors": [{"message": message, "extensions": {"code": code}}]
    });
    (status, axum::Json(body)).into_response()
}

/// Why a document was refused before validation.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DocumentError {
    /// It does not parse.
    Parse(String),
    /// Its fragments expand past the budget (or spread themselves).
    TooLarge,
}

/// Parses `query` and checks that its operations, with every fragment spread expanded, select at
/// most `budget` fields; cycles count as too large. Linear in the document: each fragment's size
/// is computed once.
pub(crate) fn check_document(query: &str, budget: usize) -> Result<(), DocumentError> {
    let doc = async_graphql::parser::parse_query(query)
        .map_err(|e| DocumentError::Parse(e.to_string()))?;
    let mut sizes: HashMap<String, Option<usize>> = HashMap::new();
    let mut total = 0usize;
    for (_, op) in doc.operations.iter() {
        total = total.saturating_add(size(&doc, &op.node.selection_set.node, &mut sizes, budget)?);
        if total > budget {
            return Err(DocumentError::TooLarge);
        }
    }
    Ok(())
}

/// The expanded field count of `set`. `sizes` memoizes fragments: `None` while one is being
/// expanded (a spread of it then is a cycle).
fn size(
    doc: &ExecutableDocument,
    set: &SelectionSet,
    sizes: &mut HashMap<String, Option<usize>>,
    budget: usize,
) -> Result<usize, DocumentError> {
    let mut n = 0usize;
    for item in &set.items {
        let add = match &item.node {
            Selection::Field(f) => 1 + size(doc, &f.node.selection_set.node, sizes, budget)?,
            Selection::InlineFragment(f) => size(doc, &f.node.selection_set.node, sizes, budget)?,
            Selection::FragmentSpread(spread) => {
                let name = spread.node.fragment_name.node.as_str();
                match sizes.get(name) {
                    Some(Some(known)) => *known,
                    Some(None) => return Err(DocumentError::TooLarge),
                    None => {
                        // An unknown fragment is validation's to report.
                        let Some(fragment) = doc.fragments.get(name) else {
                            continue;
                        };
                        sizes.insert(name.to_owned(), None);
                        let s = size(doc, &fragment.node.selection_set.node, sizes, budget)?;
                        sizes.insert(name.to_owned(), Some(s));
                        s
                    }
                }
            }
        };
        n = n.saturating_add(add);
        if n > budget {
            return Err(DocumentError::TooLarge);
        }
    }
    Ok(n)
}

/// How many requests each tenant has executing, bounded.
#[derive(Debug)]
pub(crate) struct TenantLimiter {
    per_tenant: usize,
    tenants: Mutex<HashMap<TenantId, Arc<Semaphore>>>,
}

impl TenantLimiter {
    pub(crate) fn new(per_tenant: usize) -> Self {
        Self {
            per_tenant: per_tenant.max(1),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// A permit to execute one request of `tenant`, or `None` when it has as many as it may.
    pub(crate) fn try_acquire(&self, tenant: &TenantId) -> Option<OwnedSemaphorePermit> {
        let semaphore = {
            let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
            if tenants.len() > 10_000 {
                // Forget idle tenants (all permits back).
                let full = self.per_tenant;
                tenants.retain(|_, s| s.available_permits() < full);
            }
            tenants
                .entry(tenant.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
                .clone()
        };
        semaphore.try_acquire_owned().ok()
    }
}

/// Gives errors that async-graphql produced without one (validation, coercion) a `code`.
pub(crate) fn add_codes(response: &mut async_graphql::Response) {
    for e in &mut response.errors {
        let has_code = e
            .extensions
            .as_ref()
            .is_some_and(|x| x.get("code").is_some());
        if has_code {
            continue;
        }
        let code = if e.path.is_empty() {
            "GRAPHQL_VALIDATION_FAILED"
        } else {
            "BAD_REQUEST"
        };
        e.extensions
            .get_or_insert_with(Default::default)
            .set("code", code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document whose fragments each spread the next one twice: 2^depth fields expanded.
    fn doubling(depth: usize) -> String {
        let mut q = String::from("query { ...F0 }\n");
        for i in 0..depth {
            q.push_str(&format!(
                "fragment F{i} on Query {{ ...F{} ...F{} }}\n",
                i + 1,
                i + 1
            ));
        }
        q.push_str(&format!(
            "fragment F{depth} on Query {{ agents {{ name }} }}\n"
        ));
        q
    }

    #[test]
    fn fragments_that_expand_exponentially_are_refused_quickly() {
        assert_eq!(check_document(&doubling(3), 2_000), Ok(()));
        let started = std::time::Instant::now();
        assert_eq!(
            check_document(&doubling(40), 2_000),
            Err(DocumentError::TooLarge)
        );
        assert!(started.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn a_fragment_that_spreads_itself_is_refused_and_bad_syntax_is_a_parse_error() {
        let q = "query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }";
        assert_eq!(check_document(q, 2_000), Err(DocumentError::TooLarge));
        assert!(matches!(
            check_document("query {", 2_000),
            Err(DocumentError::Parse(_))
        ));
    }

    #[test]
    fn a_tenant_runs_a_bounded_number_of_requests_at_once() {
        let limiter = TenantLimiter::new(2);
        let acme = TenantId::new("acme").unwrap();
        let globex = TenantId::new("globex").unwrap();
        let a = limiter.try_acquire(&acme);
        let b = limiter.try_acquire(&acme);
        assert!(a.is_some() && b.is_some());
        assert!(limiter.try_acquire(&acme).is_none());
        assert!(
            limiter.try_acquire(&globex).is_some(),
            "others are unaffected"
        );
        drop(a);
        assert!(limiter.try_acquire(&acme).is_some());
    }
}
