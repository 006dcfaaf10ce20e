//! `POST /graphql`, held to limits an authenticated client cannot get around: the token is
//! checked before the body is read; the body is read within a size and a time limit; a document
//! whose fragments expand past a budget is refused before validation (whose cost grows with the
//! expansion); each tenant runs a bounded number of requests at once; execution has a deadline;
//! and a response past its byte budget is replaced by an error. Every error is in the GraphQL
//! format with a `code`.

use std::collections::HashMap;
use std::time::Duration;

use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

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
/// is computed once. Returns whether the operation to run (`operation`, or the only one) is a
/// subscription.
pub(crate) fn check_document(
    query: &str,
    operation: Option<&str>,
    budget: usize,
) -> Result<bool, DocumentError> {
    let doc = async_graphql::parser::parse_query(query)
        .map_err(|e| DocumentError::Parse(e.to_string()))?;
    let subscription = {
        use async_graphql::parser::types::{DocumentOperations, OperationType};
        let ty = match (&doc.operations, operation) {
            (DocumentOperations::Single(op), _) => Some(op.node.ty),
            (DocumentOperations::Multiple(ops), Some(name)) => ops.get(name).map(|op| op.node.ty),
            (DocumentOperations::Multiple(_), None) => None,
        };
        ty == Some(OperationType::Subscription)
    };
    let mut sizes: HashMap<String, Option<usize>> = HashMap::new();
    let mut total = 0usize;
    for (_, op) in doc.operations.iter() {
        total = total.saturating_add(size(&doc, &op.node.selection_set.node, &mut sizes, budget)?);
        if total > budget {
            return Err(DocumentError::TooLarge);
        }
    }
    Ok(subscription)
}

/// Whether the operation to run of `query` selects only the schema's introspection
/// (`__schema`, `__type`, `__typename` at its root, fragments followed); `false` when it does not
/// parse.
pub(crate) fn introspection_only(query: &str, operation: Option<&str>) -> bool {
    use async_graphql::parser::types::DocumentOperations;
    let Ok(doc) = async_graphql::parser::parse_query(query) else {
        return false;
    };
    let op = match (&doc.operations, operation) {
        (DocumentOperations::Single(op), _) => op,
        (DocumentOperations::Multiple(ops), Some(name)) => match ops.get(name) {
            Some(op) => op,
            None => return false,
        },
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => match ops.values().next() {
            Some(op) => op,
            None => return false,
        },
        (DocumentOperations::Multiple(_), None) => return false,
    };
    fn meta(doc: &ExecutableDocument, set: &SelectionSet, depth: usize) -> bool {
        depth < 8
            && set.items.iter().all(|item| match &item.node {
                Selection::Field(f) => f.node.name.node.starts_with("__"),
                Selection::InlineFragment(f) => meta(doc, &f.node.selection_set.node, depth + 1),
                Selection::FragmentSpread(s) => doc
                    .fragments
                    .get(&s.node.fragment_name.node)
                    .is_some_and(|f| meta(doc, &f.node.selection_set.node, depth + 1)),
            })
    }
    !op.node.selection_set.node.items.is_empty() && meta(&doc, &op.node.selection_set.node, 0)
}

/// What the first definition of `query` is, read without parsing the document: `Some(true)`
/// for a subscription, `Some(false)` for a query or mutation (or a shorthand `{ … }`), `None`
/// when a fragment comes first or the text is not GraphQL. Lets a limit be checked before the
/// parse, which is the costly part of refusing.
pub(crate) fn first_operation_is_subscription(query: &str) -> Option<bool> {
    let mut rest = query;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',' || c == '\u{feff}');
        match rest.strip_prefix('#') {
            Some(comment) => rest = comment.split_once('\n').map_or("", |(_, after)| after),
            None => break,
        }
    }
    if rest.starts_with('{') {
        return Some(false);
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    match word.as_str() {
        "subscription" => Some(true),
        "query" | "mutation" => Some(false),
        _ => None,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    use forge_testkit::graphql::fragment_bomb as doubling;

    #[test]
    fn fragments_that_expand_exponentially_are_refused_quickly() {
        assert_eq!(check_document(&doubling(3), None, 2_000), Ok(false));
        let started = std::time::Instant::now();
        assert_eq!(
            check_document(&doubling(40), None, 2_000),
            Err(DocumentError::TooLarge)
        );
        assert!(started.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn a_fragment_that_spreads_itself_is_refused_and_bad_syntax_is_a_parse_error() {
        let q = "query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }";
        assert_eq!(check_document(q, None, 2_000), Err(DocumentError::TooLarge));
        assert!(matches!(
            check_document("query {", None, 2_000),
            Err(DocumentError::Parse(_))
        ));
    }

    #[test]
    fn the_first_operation_is_read_without_parsing() {
        let cases = [
            ("subscription { a }", Some(true)),
            ("  # a comment\n ,subscription S { a }", Some(true)),
            ("\u{feff}query { a }", Some(false)),
            ("{ a }", Some(false)),
            ("mutation { a }", Some(false)),
            ("fragment F on Query { a } query { ...F }", None),
            ("subscriptions { a }", None),
            ("", None),
        ];
        for (query, expected) in cases {
            assert_eq!(
                first_operation_is_subscription(query),
                expected,
                "{query:?}"
            );
        }
    }

    proptest::proptest! {
        /// Any Unicode text is read without a panic, and a subscription keyword after any
        /// run of ignored characters is found.
        #[test]
        fn any_text_is_read_without_a_panic(query in forge_core::text::strategy::unicode(200)) {
            let _ = first_operation_is_subscription(&query);
            let prefixed = format!(" ,\n# {}\nsubscription {{ a }}", query.replace('\n', " "));
            proptest::prop_assert_eq!(first_operation_is_subscription(&prefixed), Some(true));
        }
    }

    #[test]
    fn the_operation_to_run_is_known_to_be_a_subscription_or_not() {
        let both = "query Q { agents { name } } subscription S { pendingInteractions { id } }";
        assert_eq!(check_document(both, Some("S"), 2_000), Ok(true));
        assert_eq!(check_document(both, Some("Q"), 2_000), Ok(false));
        assert_eq!(check_document(both, None, 2_000), Ok(false));
        let one = "subscription { pendingInteractions { id } }";
        assert_eq!(check_document(one, None, 2_000), Ok(true));
    }

    #[test]
    fn introspection_only_documents_are_told_apart() {
        assert!(introspection_only("{ __schema { types { name } } }", None));
        assert!(introspection_only(
            "query IntrospectionQuery { __schema { ...S } } fragment S on __Schema { types { name } }",
            None
        ));
        assert!(introspection_only(
            "query A { __type(name: \"Run\") { name } __typename }",
            None
        ));
        assert!(!introspection_only(
            "{ __schema { types { name } } threads { nodes { id } } }",
            None
        ));
        assert!(!introspection_only(
            "{ ... on Query { threads { nodes { id } } } }",
            None
        ));
        assert!(!introspection_only(
            "query A { __typename } query B { threads { nodes { id } } }",
            Some("B")
        ));
        assert!(!introspection_only("{ __schema {", None));
    }
}
