//! The assistant message of a step as it streams in ([`AssistantMessage`]): each chunk of the
//! model call becomes a part added or updated (`part.added`, `part.updated`), text and tool
//! inputs scrubbed of secrets over the whole stream (a secret split across deltas is held back
//! until it can be recognised), and at the end the message the step commits.

use std::collections::BTreeMap;

use forge_core::event::RunEventKind;
use forge_core::id::{MessageId, ToolCallId};
use forge_core::message::{Message, Role};
use forge_core::part::{Part, PartUpdate, TextPart, ToolCallPart};
use forge_core::ports::model::ModelChunk;
use forge_core::redact::{Redactor, StreamRedactor};
use forge_core::time::Timestamp;
use forge_core::usage::Usage;

use crate::execution::Execution;
use crate::meter::Reported;

/// The assistant message as it streams in.
pub(crate) struct AssistantMessage {
    id: MessageId,
    parts: Vec<Part>,
    /// Index of the text part that deltas currently extend.
    open_text: Option<usize>,
    /// Provider call index → (part index, raw JSON input so far).
    calls: BTreeMap<u32, (usize, String)>,
    usage: Usage,
    /// Whether the provider reported usage at all.
    usage_reported: bool,
    /// The provider's request id.
    request_id: Option<String>,
    /// The model the provider reports answering.
    provider_model: Option<String>,
    /// Scrubs the open text part's stream, holding back what could still become a secret.
    text_scrub: StreamRedactor,
    /// The same for each call's streamed input, by provider call index.
    input_scrub: BTreeMap<u32, StreamRedactor>,
    redactor: Redactor,
    /// A call the model wrote and its provider could not parse, and why.
    garbled: Option<(ToolCallId, String)>,
}

impl AssistantMessage {
    /// An empty message `id`, its stream scrubbed by `redactor`.
    pub(crate) fn new(id: MessageId, redactor: Redactor) -> Self {
        Self {
            id,
            parts: Vec::new(),
            open_text: None,
            calls: BTreeMap::new(),
            usage: Usage::default(),
            usage_reported: false,
            request_id: None,
            provider_model: None,
            text_scrub: StreamRedactor::new(redactor.clone()),
            input_scrub: BTreeMap::new(),
            redactor,
            garbled: None,
        }
    }

    /// What the provider reported of the call by its end, for its settlement.
    pub(crate) fn reported(&self) -> Reported {
        Reported {
            usage: self.usage_reported.then_some(self.usage),
            request_id: self.request_id.clone(),
            provider_model: self.provider_model.clone(),
        }
    }

    /// The tool calls in the message, each with the size of its raw streamed input.
    pub(crate) fn calls(&self) -> Vec<(ToolCallPart, usize)> {
        let raw_inputs: BTreeMap<usize, String> = self.calls.values().cloned().collect();
        self.parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                Part::ToolCall(c) => Some((c.clone(), raw_inputs.get(&i).map_or(0, String::len))),
                _ => None,
            })
            .collect()
    }

    /// The message's text, its text parts joined.
    pub(crate) fn text(&self) -> String {
        forge_core::part::joined_text(&self.parts)
    }

    pub(crate) fn add_part(&mut self, cur: &mut Execution<'_>, part: Part) -> usize {
        let index = self.parts.len();
        cur.emit(RunEventKind::PartAdded {
            message_id: self.id,
            role: Role::Assistant,
            index: index as u32,
            part: part.clone(),
        });
        self.parts.push(part);
        index
    }

    /// Adds the call the model wrote and its provider could not parse
    /// (`ModelErrorKind::InvalidToolCall`): a call of `tool` with no input, which the step
    /// refuses with `why` (scrubbed) so that the model can write it again.
    pub(crate) fn add_garbled_call(
        &mut self,
        cur: &mut Execution<'_>,
        id: ToolCallId,
        tool: &str,
        why: &str,
    ) {
        self.close_text(cur);
        self.add_part(
            cur,
            Part::ToolCall(ToolCallPart {
                tool_call_id: id.clone(),
                tool_name: tool.to_owned(),
                input: serde_json::Value::Null,
            }),
        );
        self.garbled = Some((id, self.redactor.redact(why).into_owned()));
    }

    /// The call the provider could not parse, and why.
    pub(crate) fn garbled(&self) -> Option<&(ToolCallId, String)> {
        self.garbled.as_ref()
    }

    fn on_text(&mut self, cur: &mut Execution<'_>, text: String) {
        match self.open_text {
            Some(index) => {
                if let Some(Part::Text(t)) = self.parts.get_mut(index) {
                    t.text.push_str(&text);
                }
                cur.emit(RunEventKind::PartUpdated {
                    message_id: self.id,
                    index: index as u32,
                    update: PartUpdate::TextDelta { text },
                });
            }
            None => {
                let index = self.add_part(cur, Part::Text(TextPart { text }));
                self.open_text = Some(index);
            }
        }
    }

    pub(crate) fn on_chunk(&mut self, cur: &mut Execution<'_>, chunk: ModelChunk) {
        match chunk {
            ModelChunk::TextDelta(text) if text.is_empty() => {}
            ModelChunk::TextDelta(text) => {
                // Secrets are scrubbed from what the model says too, over the whole stream: a
                // secret split across deltas is held back until it can be recognised.
                let ready = self.text_scrub.push(&text);
                if !ready.is_empty() {
                    self.on_text(cur, ready);
                }
            }
            ModelChunk::ToolCallStart {
                index: call,
                id,
                name,
            } => {
                self.close_text(cur);
                let part = Part::ToolCall(ToolCallPart {
                    tool_call_id: ToolCallId(id),
                    tool_name: name,
                    input: serde_json::Value::Null,
                });
                let index = self.add_part(cur, part);
                self.calls.insert(call, (index, String::new()));
            }
            ModelChunk::ToolCallDelta { index: call, json } => {
                if let Some((index, raw)) = self.calls.get_mut(&call) {
                    raw.push_str(&json);
                    let index = *index as u32;
                    let json = self
                        .input_scrub
                        .entry(call)
                        .or_insert_with(|| StreamRedactor::new(self.redactor.clone()))
                        .push(&json);
                    if !json.is_empty() {
                        cur.emit(RunEventKind::PartUpdated {
                            message_id: self.id,
                            index,
                            update: PartUpdate::InputDelta { json },
                        });
                    }
                }
            }
            ModelChunk::Usage(u) => {
                self.usage = u;
                self.usage_reported = true;
            }
            ModelChunk::RequestId(id) => self.request_id = Some(id),
            ModelChunk::Model(model) => self.provider_model = Some(model),
            ModelChunk::Finish(_) => {}
        }
    }

    /// Ends the open text part: what its stream held back is released, scrubbed.
    pub(crate) fn close_text(&mut self, cur: &mut Execution<'_>) {
        let rest = self.text_scrub.finish();
        if !rest.is_empty() {
            self.on_text(cur, rest);
        }
        self.open_text = None;
    }

    /// Releases what each call's input stream held back, scrubbed.
    pub(crate) fn flush_inputs(&mut self, cur: &mut Execution<'_>) {
        for (call, mut scrub) in std::mem::take(&mut self.input_scrub) {
            let json = scrub.finish();
            if let (false, Some((index, _))) = (json.is_empty(), self.calls.get(&call)) {
                cur.emit(RunEventKind::PartUpdated {
                    message_id: self.id,
                    index: *index as u32,
                    update: PartUpdate::InputDelta { json },
                });
            }
        }
    }

    /// Parses each streamed tool input; a parsed input replaces the part's `null`. Input that is not
    /// JSON stays `null` and is refused before execution.
    pub(crate) fn finish_tool_inputs(&mut self, cur: &mut Execution<'_>) {
        let calls: Vec<(usize, String)> = self.calls.values().cloned().collect();
        for (index, raw) in calls {
            let raw = if raw.trim().is_empty() {
                "{}"
            } else {
                raw.as_str()
            };
            if let Ok(mut input) = serde_json::from_str::<serde_json::Value>(raw)
                && let Some(Part::ToolCall(call)) = self.parts.get_mut(index)
            {
                // A secret the model writes into a call is scrubbed before anything sees the
                // call, the tool included: tools take credentials from the deployment, never
                // from the model.
                self.redactor.redact_json(&mut input);
                call.input = input;
                let part = Part::ToolCall(call.clone());
                cur.emit(RunEventKind::PartUpdated {
                    message_id: self.id,
                    index: index as u32,
                    update: PartUpdate::Replaced { part },
                });
            }
        }
    }

    pub(crate) fn keep(mut self, cur: &mut Execution<'_>, now: Timestamp) {
        for part in &mut self.parts {
            if let Part::Text(t) = part
                && let std::borrow::Cow::Owned(scrubbed) = self.redactor.redact(&t.text)
            {
                t.text = scrubbed;
            }
        }
        if !self.parts.is_empty() {
            cur.push_message(Message {
                id: self.id,
                run_id: cur.run().id,
                role: Role::Assistant,
                parts: self.parts,
                created_at: now,
            });
        }
    }
}
