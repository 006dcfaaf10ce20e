//! Approval previews: what the person asked to approve a call is shown beside its exact input,
//! in the application's own terms — written by the tool's previewer (the `ApprovalPreviewer`
//! port of `ports::tool`) or, for a tool whose server cannot describe its calls, by an
//! operator's [`PreviewTemplate`] (which is such a previewer).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the person asked to approve a call is shown beside its exact input: what the call will
/// do in the application's own terms (the document, the stage, the amount) and, for a call that
/// replaces one text with another, both texts. Written by the tool's previewer when the approval
/// is raised, so it shows the world as it was then; it informs the decision and binds nothing —
/// the approval still binds the exact input ([`input_hash`](crate::interaction::input_hash)).
///
/// [`ApprovalPreview::bounded`] keeps it short and readable: every text is cut to its cap on a
/// character boundary, control and invisible characters (bidirectional overrides, zero-width
/// characters) are removed so a preview cannot hide or reorder what it shows, and facts beyond
/// [`ApprovalPreview::MAX_FACTS`] are dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalPreview {
    /// One line: what the call will do.
    pub summary: String,
    /// Named facts the decision rests on, in the order shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<PreviewFact>,
    /// The text the call replaces and the text it writes, when it replaces one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<TextChange>,
}

/// One named fact of an [`ApprovalPreview`] ("Stage": "Negotiation → Closed won").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PreviewFact {
    /// What it is.
    pub label: String,
    /// Its value, as a person reads it.
    pub value: String,
}

/// A text a call replaces and the text it writes (either may be empty: a first version, a
/// removal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TextChange {
    /// The text now.
    pub before: String,
    /// The text after the call.
    pub after: String,
}

impl ApprovalPreview {
    /// Characters kept of the summary, a fact's label and a fact's value.
    pub const MAX_LINE_CHARS: usize = 500;
    /// Facts kept.
    pub const MAX_FACTS: usize = 20;
    /// Characters kept of each side of the change.
    pub const MAX_CHANGE_CHARS: usize = 20_000;

    /// A preview with `summary` and nothing else.
    pub fn new(summary: impl Into<String>) -> Self {
        Self {
            summary: summary.into(),
            ..Self::default()
        }
    }

    /// Adds a fact.
    pub fn fact(mut self, label: impl Into<String>, value: impl Into<String>) -> Self {
        self.facts.push(PreviewFact {
            label: label.into(),
            value: value.into(),
        });
        self
    }

    /// Sets the change from `before` to `after`.
    pub fn change(mut self, before: impl Into<String>, after: impl Into<String>) -> Self {
        self.change = Some(TextChange {
            before: before.into(),
            after: after.into(),
        });
        self
    }

    /// The preview within its caps, with control and invisible characters removed (line
    /// breaks and tabs survive in the change, become spaces elsewhere).
    pub fn bounded(self) -> Self {
        let line = |text: &str| clean(text, Self::MAX_LINE_CHARS, false);
        Self {
            summary: line(&self.summary),
            facts: self
                .facts
                .iter()
                .take(Self::MAX_FACTS)
                .map(|f| PreviewFact {
                    label: line(&f.label),
                    value: line(&f.value),
                })
                .collect(),
            change: self.change.map(|c| TextChange {
                before: clean(&c.before, Self::MAX_CHANGE_CHARS, true),
                after: clean(&c.after, Self::MAX_CHANGE_CHARS, true),
            }),
        }
    }

    /// Every text of the preview, for a caller that scrubs them in place (redaction).
    pub fn texts_mut(&mut self) -> impl Iterator<Item = &mut String> {
        std::iter::once(&mut self.summary)
            .chain(
                self.facts
                    .iter_mut()
                    .flat_map(|f| [&mut f.label, &mut f.value]),
            )
            .chain(
                self.change
                    .iter_mut()
                    .flat_map(|c| [&mut c.before, &mut c.after]),
            )
    }
}

/// A preview written by an operator for a tool whose server cannot describe its own calls (an
/// imported MCP tool): a summary and facts whose `{name}` placeholders are filled from the
/// call's input — a top-level field, a string as it is, any other value as compact JSON, a
/// missing or null one as `—`. `{{` and `}}` are one brace; any other brace is kept as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewTemplate {
    /// The summary: `"Move {id} to {stage}"`.
    pub summary: String,
    /// The facts, in order: `[{ label = "Stage", value = "{stage}" }]`.
    #[serde(default)]
    pub facts: Vec<PreviewFact>,
}

impl PreviewTemplate {
    /// The preview of a call with `input` (bounded).
    pub fn render(&self, input: &serde_json::Value) -> ApprovalPreview {
        let mut preview = ApprovalPreview::new(fill(&self.summary, input));
        for f in &self.facts {
            preview = preview.fact(&f.label, fill(&f.value, input));
        }
        preview.bounded()
    }
}

/// `template` with each `{name}` replaced by the input's field `name`, `{{` and `}}` by one brace.
fn fill(template: &str, input: &serde_json::Value) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let (brace, after) = (&rest[at..at + 1], &rest[at + 1..]);
        if let Some(tail) = after.strip_prefix(brace) {
            out.push_str(brace);
            rest = tail;
            continue;
        }
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if brace == "{" && name_len > 0 && after[name_len..].starts_with('}') {
            match input.get(&after[..name_len]) {
                None | Some(serde_json::Value::Null) => out.push('—'),
                Some(serde_json::Value::String(s)) => out.push_str(s),
                Some(other) => out.push_str(&other.to_string()),
            }
            rest = &after[name_len + 1..];
        } else {
            out.push_str(brace);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `text` without control or invisible characters (keeping line breaks and tabs when
/// `multiline`, else turning them into spaces), cut to `max` characters with `…`.
pub(crate) fn clean(text: &str, max: usize, multiline: bool) -> String {
    let kept: String = text
        .chars()
        .filter_map(|c| match c {
            '\n' | '\t' if multiline => Some(c),
            '\r' if multiline => None,
            '\n' | '\t' | '\r' => Some(' '),
            c if c.is_control() || crate::text::invisible(c) => None,
            c => Some(c),
        })
        .collect();
    crate::text::capped(&kept, max, "…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ToolCallId;
    use crate::interaction::{InteractionRequest, input_hash};
    use crate::text::strategy::{unicode, unicode_runs};
    use proptest::prelude::*;

    fn readable(text: &str, multiline: bool) -> bool {
        !text.chars().any(|c| {
            crate::text::invisible(c)
                || (c.is_control() && !(multiline && (c == '\n' || c == '\t')))
        })
    }

    proptest! {
        #[test]
        fn a_bounded_preview_is_within_its_caps_and_readable(
            text in prop_oneof![unicode(700), unicode_runs(700)],
            facts in 0usize..30,
        ) {
            let mut preview = ApprovalPreview::new(text.clone()).change(text.clone(), "");
            for _ in 0..facts {
                preview = preview.fact(text.clone(), text.clone());
            }
            let bounded = preview.bounded();
            prop_assert!(bounded.facts.len() <= ApprovalPreview::MAX_FACTS);
            prop_assert_eq!(bounded.facts.len(), facts.min(ApprovalPreview::MAX_FACTS));
            let cap = ApprovalPreview::MAX_LINE_CHARS + 1;
            prop_assert!(bounded.summary.chars().count() <= cap);
            prop_assert!(readable(&bounded.summary, false));
            for f in &bounded.facts {
                prop_assert!(f.label.chars().count() <= cap && readable(&f.label, false));
                prop_assert!(readable(&f.value, false));
            }
            let change = bounded.change.clone().expect("the change is kept");
            prop_assert!(readable(&change.before, true));
            prop_assert!(change.before.chars().count() <= ApprovalPreview::MAX_CHANGE_CHARS + 1);
            // What is kept is a prefix of the text's visible characters, in order.
            let visible: String = text
                .chars()
                .filter_map(|c| match c {
                    '\n' | '\t' | '\r' => Some(' '),
                    c if c.is_control() || crate::text::invisible(c) => None,
                    c => Some(c),
                })
                .collect();
            let shown = bounded.summary.strip_suffix('…').unwrap_or(&bounded.summary);
            prop_assert!(visible.starts_with(shown));
            // Bounding twice changes nothing more.
            prop_assert_eq!(bounded.clone().bounded(), bounded);
        }
    }

    #[test]
    fn a_template_fills_fields_from_the_input() {
        let template = PreviewTemplate {
            summary: "Move {id} to {stage} {{literal}} {missing} {} {ünï}".into(),
            facts: vec![PreviewFact {
                label: "Amount".into(),
                value: "{amount} ({meta})".into(),
            }],
        };
        let preview = template.render(
            &serde_json::json!({"id": "opp-1", "stage": "wön", "amount": 5, "meta": {"a": [1]}}),
        );
        assert_eq!(preview.summary, "Move opp-1 to wön {literal} — {} {ünï}");
        assert_eq!(preview.facts[0].value, r#"5 ({"a":[1]})"#);
    }

    proptest! {
        #[test]
        fn a_template_over_any_text_renders_without_panicking(
            template in prop_oneof![unicode(200), unicode_runs(200)],
            value in unicode(50),
        ) {
            let t = PreviewTemplate { summary: template.clone(), facts: vec![] };
            let preview = t.render(&serde_json::json!({ "a": value }));
            prop_assert!(preview.summary.chars().count() <= ApprovalPreview::MAX_LINE_CHARS + 1);
            if !template.contains(['{', '}']) {
                prop_assert_eq!(preview, ApprovalPreview::new(template).bounded());
            }
        }
    }

    #[test]
    fn a_preview_cannot_reorder_or_hide_what_it_shows() {
        let preview = ApprovalPreview::new("Pay \u{202E}0001$\u{202C} to\nMallory\u{200B}")
            .change("a\r\nb", "a\n\u{2066}c")
            .bounded();
        assert_eq!(preview.summary, "Pay 0001$ to Mallory");
        let change = preview.change.expect("change");
        assert_eq!(
            (change.before.as_str(), change.after.as_str()),
            ("a\nb", "a\nc")
        );
        let long = "é".repeat(ApprovalPreview::MAX_LINE_CHARS + 10);
        let cut = ApprovalPreview::new(long).bounded().summary;
        assert_eq!(cut.chars().count(), ApprovalPreview::MAX_LINE_CHARS + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn requests_without_a_preview_keep_their_wire_shape() {
        let request = InteractionRequest::Approval {
            tool_call_id: ToolCallId("c".into()),
            tool_name: "pay".into(),
            input_hash: input_hash(&serde_json::json!({})),
            input: serde_json::json!({}),
            preview: None,
        };
        let wire = serde_json::to_value(&request).expect("serializes");
        assert!(wire.get("preview").is_none());
        let back: InteractionRequest = serde_json::from_value(wire).expect("reads back");
        assert_eq!(back, request);
    }
}
