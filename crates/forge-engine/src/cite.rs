//! Citations: the built-in `cite` tool. The model cites a source's exact span; the engine checks
//! the citation through the [`CitationCheck`] port before anything is committed, and a citation
//! that passes becomes a [`Part::Citation`] beside the call's result (in the tool message, which
//! providers are not sent, so the model sees only the result). A citation that fails is an error
//! result the model reads; it is never stored as a citation.

use std::sync::Arc;

use async_trait::async_trait;
use forge_core::part::{CitationPart, Part, Span};
use forge_core::ports::citation::CitationCheck;
use forge_core::ports::tool::{Tool, ToolClassification, ToolContext, ToolError, ToolSpec};
use serde_json::{Value, json};

use crate::tools::built_in_spec;

/// The built-in tool the model cites with.
pub const CITE: &str = "cite";

/// The built-in `cite`: checks a citation in the caller's scope through the deployment's
/// [`CitationCheck`].
pub(crate) struct Cite {
    spec: ToolSpec,
    check: Arc<dyn CitationCheck>,
}

impl Cite {
    pub(crate) fn new(check: Arc<dyn CitationCheck>) -> Self {
        let spec = built_in_spec(
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
        );
        Self { spec, check }
    }
}

#[async_trait]
impl Tool for Cite {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &ToolContext, input: Value) -> Result<Value, ToolError> {
        let citation = citation_of(&input);
        match self.check.check(&ctx.scope, &citation).await {
            Ok(Ok(())) => Ok(
                json!({"cited": true, "source_id": citation.source_id, "start": citation.span.start, "end": citation.span.end}),
            ),
            Ok(Err(refusal)) => Err(ToolError::Refused {
                code: "invalid_citation",
                message: refusal.to_string(),
            }),
            Err(e) => Err(ToolError::Refused {
                code: "tool_unavailable",
                message: format!("the citation could not be checked ({:?})", e.kind()),
            }),
        }
    }
}

/// The citation a call of [`CITE`] makes (its input is already valid against the schema).
pub(crate) fn citation_of(input: &Value) -> CitationPart {
    let field = |k: &str| input.get(k);
    let text = |k: &str| {
        field(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let num = |k: &str| field(k).and_then(Value::as_u64).unwrap_or_default();
    CitationPart {
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
    }
}

/// The parts a call adds to the tool message: its result, then its citation.
pub(crate) fn with_citation(result: Part, citation: Option<CitationPart>) -> Vec<Part> {
    let mut parts = vec![result];
    parts.extend(citation.map(Part::Citation));
    parts
}
