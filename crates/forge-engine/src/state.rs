//! Session state a run changes: the built-in `update_session_state` tool.
//!
//! The model sees the thread's state and its version in every request. A call states the
//! version it read and the keys to set or remove; the step applies its calls in order to a
//! draft, and the step's commit writes the draft only while the thread is still at that version
//! (`StepCommit::state`). A call naming another version is refused with `state_conflict`, so a
//! change is never made on top of state the model did not see; a host's write landing between
//! the step's start and its commit refuses the commit instead, and the worker computes the step
//! again from the new state. Either way no update is lost.

use parking_lot::Mutex;

use async_trait::async_trait;
use forge_core::ports::store::StateUpdate;
use forge_core::ports::tool::{
    SessionDraft, Tool, ToolClassification, ToolContext, ToolError, ToolSpec,
};
use forge_core::thread::SessionState;
use serde_json::{Map, Value, json};

use crate::tools::built_in_spec;

/// The built-in tool a run changes its thread's session state with.
pub const UPDATE_STATE: &str = "update_session_state";

/// The built-in `update_session_state`: applies its input to the step's [`SessionDraft`].
pub(crate) struct UpdateState(ToolSpec);

#[async_trait]
impl Tool for UpdateState {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    async fn call(&self, ctx: &ToolContext, input: Value) -> Result<Value, ToolError> {
        match &ctx.session {
            Some(session) => session.0.update(&input),
            None => Err(ToolError::Refused {
                code: "forbidden",
                message: "there is no session state outside a run's step".into(),
            }),
        }
    }
}

impl UpdateState {
    pub(crate) fn new() -> Self {
        Self(built_in_spec(
            UPDATE_STATE,
            "Changes this conversation's session state, which persists across runs. \
                      State the version you were shown, the keys to set (with their new JSON \
                      values) and the keys to remove. A stale version is refused: read the \
                      state again and retry.",
            json!({
                "type": "object",
                "properties": {
                    "expected_version": {"type": "integer", "minimum": 0},
                    "set": {"type": "object"},
                    "remove": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["expected_version"],
                "additionalProperties": false
            }),
            ToolClassification::Read,
        ))
    }
}

/// A step's session state as its calls change it: the [`SessionDraft`] its tool calls receive.
/// [`StepDraft::finish`] takes the outcome for the commit.
pub(crate) struct StepDraft(Mutex<Option<Draft>>);

impl StepDraft {
    /// A draft over the state the step was shown.
    pub(crate) fn new(state: &SessionState) -> Self {
        Self(Mutex::new(Some(Draft::new(state))))
    }

    /// The update for the commit and the keys it changed, if any call succeeded; later calls
    /// (none should come) change nothing.
    pub(crate) fn finish(&self) -> Option<(StateUpdate, Vec<String>)> {
        let draft = self.0.lock().take();
        draft.and_then(Draft::finish)
    }
}

impl SessionDraft for StepDraft {
    fn update(&self, input: &Value) -> Result<Value, ToolError> {
        let mut draft = self.0.lock();
        let Some(draft) = draft.as_mut() else {
            return Err(ToolError::Refused {
                code: "state_conflict",
                message: "the step's session state was already committed".into(),
            });
        };
        draft
            .apply(input)
            .map_err(|(code, message)| ToolError::Refused { code, message })
    }
}

/// A step's changes to the state it started from.
#[derive(Debug)]
pub(crate) struct Draft {
    base: u64,
    values: Map<String, Value>,
    keys: Vec<String>,
}

impl Draft {
    /// A draft over the state the step was shown.
    pub(crate) fn new(state: &SessionState) -> Self {
        Self {
            base: state.version,
            values: state.values.clone(),
            keys: Vec::new(),
        }
    }

    /// Applies one call's input; its result or a `(code, message)` error.
    pub(crate) fn apply(&mut self, input: &Value) -> Result<Value, (&'static str, String)> {
        let expected = input["expected_version"].as_u64().ok_or((
            "invalid_input",
            "expected_version must be a non-negative integer".to_owned(),
        ))?;
        if expected != self.base {
            return Err((
                "state_conflict",
                format!(
                    "the session state is at version {}, not {expected}; read it again",
                    self.base
                ),
            ));
        }
        let set = input["set"].as_object().cloned().unwrap_or_default();
        let remove: Vec<String> = input["remove"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if set.is_empty() && remove.is_empty() {
            return Err((
                "invalid_input",
                "name at least one key to set or remove".to_owned(),
            ));
        }
        for (k, v) in set {
            self.touch(&k);
            self.values.insert(k, v);
        }
        for k in remove {
            self.touch(&k);
            self.values.remove(&k);
        }
        Ok(json!({"version": self.base + 1, "keys": self.keys}))
    }

    fn touch(&mut self, key: &str) {
        if !self.keys.iter().any(|k| k == key) {
            self.keys.push(key.to_owned());
        }
    }

    /// The update for the commit and the keys it changed, if any call succeeded.
    pub(crate) fn finish(self) -> Option<(StateUpdate, Vec<String>)> {
        (!self.keys.is_empty()).then(|| {
            (
                StateUpdate {
                    expected_version: self.base,
                    values: self.values,
                },
                self.keys,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(version: u64, v: Value) -> SessionState {
        SessionState {
            version,
            values: v.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn calls_apply_in_order_on_the_version_shown() {
        let mut d = Draft::new(&state(4, json!({"a": 1, "b": 2})));
        assert_eq!(
            d.apply(&json!({"expected_version": 4, "set": {"c": 3}, "remove": ["a"]})),
            Ok(json!({"version": 5, "keys": ["c", "a"]}))
        );
        assert!(
            d.apply(&json!({"expected_version": 4, "set": {"b": 9}}))
                .is_ok()
        );
        let (update, keys) = d.finish().unwrap_or_else(|| panic!("changed"));
        assert_eq!(update.expected_version, 4);
        assert_eq!(Value::Object(update.values), json!({"b": 9, "c": 3}));
        assert_eq!(keys, ["c", "a", "b"]);
    }

    #[test]
    fn a_stale_or_empty_call_changes_nothing() {
        let mut d = Draft::new(&state(2, json!({"a": 1})));
        let stale = d.apply(&json!({"expected_version": 1, "set": {"a": 5}}));
        assert!(matches!(stale, Err(("state_conflict", m)) if m.contains("version 2")));
        let empty = d.apply(&json!({"expected_version": 2}));
        assert!(matches!(empty, Err(("invalid_input", _))));
        assert!(d.finish().is_none());
    }
}
