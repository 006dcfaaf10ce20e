//! `search_documents`: the built-in retrieval tool. It returns chunks with their source id,
//! version and exact offsets — what the `cite` tool needs — from the sources the run's principal
//! may read. Results are tool results, so the engine marks them untrusted.

use async_trait::async_trait;
use forge_core::ports::tool::{
    ApprovalPolicy, Tool, ToolClassification, ToolContext, ToolError, ToolSpec,
};
use serde_json::{Value, json};

use crate::retrieve::Retriever;

/// The tool's name.
pub const SEARCH_DOCUMENTS: &str = "search_documents";

/// The retrieval tool.
#[derive(Debug)]
pub struct SearchDocuments {
    spec: ToolSpec,
    retriever: Retriever,
}

impl SearchDocuments {
    /// The tool over `retriever`.
    pub fn new(retriever: Retriever) -> Self {
        Self {
            spec: ToolSpec {
                name: SEARCH_DOCUMENTS.into(),
                description: "Searches the documents you may read. Returns passages with their \
                              source id, version, start and end offsets and text; cite passages \
                              you use with the cite tool."
                    .into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "minLength": 1, "maxLength": 1000},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 20}
                    },
                    "required": ["query"],
                    "additionalProperties": false
                }),
                classification: ToolClassification::Read,
                approval: ApprovalPolicy::Never,
                version: "1".into(),
                permission: None,
                source: Default::default(),
            },
            retriever,
        }
    }
}

/// The JSON a search answers with (the tool and `forge rag search` print the same).
pub fn hits_json(hits: &[crate::model::SearchHit]) -> Value {
    json!({
        "results": hits.iter().map(|h| json!({
            "source_id": h.chunk.source_id,
            "version": h.chunk.version,
            "start": h.chunk.start,
            "end": h.chunk.end,
            "heading": h.chunk.heading,
            "score": (h.score * 1000.0).round() / 1000.0,
            "text": h.chunk.text,
        })).collect::<Vec<_>>()
    })
}

/// [`hits_json`], with a `warning` when vector search was skipped.
pub fn found_json(found: &crate::retrieve::Found) -> Value {
    let mut out = hits_json(&found.hits);
    if let (Some(why), Some(o)) = (&found.degraded, out.as_object_mut()) {
        o.insert("warning".into(), Value::String(why.clone()));
    }
    out
}

#[async_trait]
impl Tool for SearchDocuments {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &ToolContext, input: Value) -> Result<Value, ToolError> {
        let query = input
            .get("query")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let limit = input.get("limit").and_then(Value::as_u64).unwrap_or(5) as usize;
        let found = self
            .retriever
            .find(&ctx.scope, query, limit)
            .await
            .map_err(|e| ToolError::Unavailable(format!("search failed ({:?})", e.kind())))?;
        Ok(found_json(&found))
    }
}
