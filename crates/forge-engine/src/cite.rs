//! Citations: the built-in `cite` tool. The model cites a source's exact span; the engine checks
//! the citation through the [`CitationCheck`] port before anything is committed, and a citation
//! that passes becomes a [`Part::Citation`] beside the call's result (in the tool message, which
//! providers are not sent, so the model sees only the result). A citation that fails is an error
//! result the model reads; it is never stored as a citation.

use std::sync::Arc;

use forge_core::part::{CitationPart, Part, Span, ToolCallPart};
use forge_core::ports::citation::CitationCheck;
use forge_core::ports::tool::{Tool, ToolClassification};
use forge_core::scope::Scope;
use serde_json::{Value, json};

use crate::tools::BuiltIn;

/// The built-in tool the model cites with.
pub const CITE: &str = "cite";

pub(crate) fn cite_tool() -> Arc<dyn Tool> {
    BuiltIn::tool(
        CITE,
        "Cites the exact text that supports your answer: a source id and version \
                      and the start and end offsets of a passage, as search results give them, \
                      with the passage's text verbatim as the excerpt. Cite every passage you rely on.",
        json!({
            "type": "object",
            "properties": {
                "source_id": {"type": "string"},
                "version": {"type": "string"},
                "start": {"type": "integer", "minimum": 0},
                "end": {"type": "integer", "minimum": 0},
                "excerpt": {"type": "string", "minLength": 1}
            },
            "required": ["source_id", "version", "start", "end", "excerpt"],
            "additionalProperties": false
        }),
        ToolClassification::Read,
    )
}

/// What answering a call produced: its result, and the citation when it passed.
pub(crate) type Cited = (Result<Value, (&'static str, String)>, Option<CitationPart>);

/// Answers a call of [`CITE`] in `scope`, checking the citation with `check` (a deployment
/// without one refuses every call).
pub(crate) async fn answer(
    check: Option<&dyn CitationCheck>,
    scope: &Scope,
    call: &ToolCallPart,
) -> Cited {
    let Some(check) = check else {
        return (
            Err((
                "forbidden",
                "citations are not configured in this deployment".into(),
            )),
            None,
        );
    };
    let field = |k: &str| call.input.get(k);
    let text = |k: &str| {
        field(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let num = |k: &str| field(k).and_then(Value::as_u64).unwrap_or_default();
    let citation = CitationPart {
        source_id: text("source_id"),
        source_version: text("version"),
        span: Span {
            start: num("start"),
            end: num("end"),
        },
        excerpt: text("excerpt"),
        line: None,
        page: None,
        heading: None,
    };
    match check.check(scope, &citation).await {
        Ok(Ok(())) => (
            Ok(
                json!({"cited": true, "source_id": citation.source_id, "start": citation.span.start, "end": citation.span.end}),
            ),
            Some(citation),
        ),
        Ok(Err(refusal)) => (Err(("invalid_citation", refusal.to_string())), None),
        Err(e) => (
            Err((
                "tool_unavailable",
                format!("the citation could not be checked ({:?})", e.kind()),
            )),
            None,
        ),
    }
}

/// The parts a call adds to the tool message: its result, then its citation.
pub(crate) fn with_citation(result: Part, citation: Option<CitationPart>) -> Vec<Part> {
    let mut parts = vec![result];
    parts.extend(citation.map(Part::Citation));
    parts
}
