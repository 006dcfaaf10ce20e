//! Forgetting a deleted retrieval source: the copies of its text that runs made.
//!
//! A run that searched or cited a source quoted it twice over: the search tool's result lists the
//! matching chunks' text, and a citation part carries its excerpt. Deleting the source removes
//! its text, chunks and index entries; these copies live in the run's committed events and in
//! the thread's messages. [`RunEvent::forget_source`] and [`Message::forget_source`] replace
//! each quote of the source with [`SOURCE_REMOVED`], leaving everything else of the part — its
//! source id, version and span, the event's sequence number — as it was, so the log keeps its
//! shape and a reader sees that something was there.
//!
//! A quote is recognised by structure, not by matching text: in a JSON value (a tool's output),
//! any object whose `source_id` is the deleted source has its `text`, `excerpt`, `heading` and
//! `title` strings replaced; a citation part of the source has its excerpt and heading replaced.
//! What the model wrote in its own words is not a quote and is left alone.

use serde_json::Value;

use crate::event::{RunEvent, RunEventKind};
use crate::message::Message;
use crate::part::{Part, PartUpdate};

/// What replaces a deleted source's quoted text.
pub const SOURCE_REMOVED: &str = "[removed: the source was deleted]";

/// The fields of an object quoting a source that carry its text.
const QUOTING_FIELDS: &[&str] = &["text", "excerpt", "heading", "title"];

/// Replaces the quotes of `source_id` in `value`; whether any was there.
fn forget_in_json(value: &mut Value, source_id: &str) -> bool {
    match value {
        Value::Object(map) => {
            let mut changed = false;
            if map.get("source_id").and_then(Value::as_str) == Some(source_id) {
                for field in QUOTING_FIELDS {
                    if let Some(v @ Value::String(_)) = map.get_mut(*field)
                        && v.as_str() != Some(SOURCE_REMOVED)
                    {
                        *v = Value::String(SOURCE_REMOVED.to_owned());
                        changed = true;
                    }
                }
            }
            for v in map.values_mut() {
                changed |= forget_in_json(v, source_id);
            }
            changed
        }
        Value::Array(items) => {
            let mut changed = false;
            for v in items {
                changed |= forget_in_json(v, source_id);
            }
            changed
        }
        _ => false,
    }
}

impl Part {
    /// Replaces this part's quotes of `source_id` (see the module documentation); whether any
    /// was there.
    pub fn forget_source(&mut self, source_id: &str) -> bool {
        match self {
            Part::Citation(c) if c.source_id == source_id => {
                let quoted = c.excerpt != SOURCE_REMOVED || c.heading.is_some();
                c.excerpt = SOURCE_REMOVED.to_owned();
                c.heading = None;
                quoted
            }
            Part::ToolResult(r) => forget_in_json(&mut r.output, source_id),
            Part::ToolCall(c) => forget_in_json(&mut c.input, source_id),
            Part::StructuredOutput(o) => forget_in_json(&mut o.value, source_id),
            _ => false,
        }
    }
}

impl Message {
    /// Replaces the quotes of `source_id` in every part; whether any was there.
    pub fn forget_source(&mut self, source_id: &str) -> bool {
        let mut changed = false;
        for part in &mut self.parts {
            changed |= part.forget_source(source_id);
        }
        changed
    }
}

impl RunEvent {
    /// Replaces the quotes of `source_id` in the part this event adds or replaces; whether any
    /// was there. The event keeps its run, sequence number, time and kind.
    pub fn forget_source(&mut self, source_id: &str) -> bool {
        match &mut self.kind {
            RunEventKind::PartAdded { part, .. }
            | RunEventKind::PartUpdated {
                update: PartUpdate::Replaced { part },
                ..
            } => part.forget_source(source_id),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::part::{CitationPart, Span, ToolResultPart, Trust};
    use serde_json::json;

    fn search_result() -> Part {
        Part::ToolResult(ToolResultPart {
            tool_call_id: "c1".into(),
            tool_name: "search_documents".into(),
            output: json!({"results": [
                {"source_id": "gone.md", "version": "v", "start": 0, "end": 9, "heading": "Pay", "text": "SECRET-PAY-BAND"},
                {"source_id": "kept.md", "version": "v", "start": 0, "end": 4, "heading": null, "text": "kept"},
            ]}),
            is_error: false,
            trust: Trust::Untrusted,
            tool_version: None,
        })
    }

    #[test]
    fn only_the_deleted_sources_quotes_go_and_the_shape_stays() {
        let mut part = search_result();
        assert!(part.forget_source("gone.md"));
        let Part::ToolResult(r) = &part else {
            unreachable!()
        };
        let results = r.output["results"].as_array().unwrap();
        assert_eq!(results[0]["text"], SOURCE_REMOVED);
        assert_eq!(results[0]["heading"], SOURCE_REMOVED);
        assert_eq!(results[0]["source_id"], "gone.md");
        assert_eq!(results[0]["end"], 9);
        assert_eq!(results[1]["text"], "kept", "another source's quote stays");
        assert!(!part.forget_source("gone.md"), "nothing is left to forget");

        let mut cite = Part::Citation(CitationPart {
            source_id: "gone.md".into(),
            source_version: "v".into(),
            span: Span { start: 0, end: 9 },
            excerpt: "SECRET-PAY-BAND".into(),
            line: Some(1),
            page: None,
            heading: Some("Pay".into()),
        });
        assert!(cite.forget_source("gone.md"));
        let text = serde_json::to_string(&cite).unwrap();
        assert!(!text.contains("SECRET") && !text.contains("Pay"), "{text}");
        assert!(text.contains("\"start\":0"), "{text}");
        assert!(!Part::text("SECRET-PAY-BAND is what I read").forget_source("gone.md"));
    }
}
