//! Policies checked as they load: a syntax error, and a policy that names what Forge does not
//! have — an entity type, an action (`Forge::Action::"executee"`), an attribute — said with its
//! file, line and column, every one of them at once. Such a policy would load and never match:
//! a misspelled `permit` denies every tool, and the model is told the tool does not exist.
//!
//! The check is Cedar's own validator, in strict mode, against Forge's schema
//! (`forge.cedarschema`, the entity model of the crate's documentation). Two things are left to
//! the policies' authors: an application's own namespace (`Crm::Action::"add_note"`; a policy
//! naming one is not checked), and the fields of a call's input (`context.input.amount`), which
//! are the tool's own.

use cedar_policy::{PolicySet, Schema, ValidationError, ValidationMode, Validator};
use miette::Diagnostic;

/// Forge's Cedar schema.
const SCHEMA: &str = include_str!("forge.cedarschema");

/// The 1-based line and column (in characters) of byte `offset` in `text`.
pub(crate) fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..text.floor_char_boundary(offset.min(text.len()))];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The source `diagnostic` points at in `text`, as (byte offset, text), when it points at any.
fn pointed<'t>(text: &'t str, diagnostic: &dyn Diagnostic) -> Option<(usize, &'t str)> {
    let span = diagnostic.labels()?.next()?;
    let start = text.floor_char_boundary(span.offset().min(text.len()));
    let end = text.floor_char_boundary((span.offset() + span.len()).min(text.len()));
    Some((start, &text[start..end]))
}

/// A problem in a policy file.
#[derive(Debug)]
pub(crate) struct Problem {
    /// The file's index among the sources.
    file: usize,
    /// The byte offset it is at.
    offset: usize,
    /// `file:line:column: what`.
    pub(crate) text: String,
}

/// Problems in file order, then in the order they stand in each file.
pub(crate) fn in_order(mut problems: Vec<Problem>) -> Vec<String> {
    problems.sort_by_key(|p| (p.file, p.offset));
    problems.into_iter().map(|p| p.text).collect()
}

/// `message` about file number `file` of `sources`, at what `diagnostic` points at
/// (`file:line:column: message`; `file: message` when it points at nothing).
pub(crate) fn located(
    sources: &[(&str, &str)],
    file: usize,
    diagnostic: &dyn Diagnostic,
    message: &str,
) -> Problem {
    let (name, text) = sources.get(file).copied().unwrap_or_default();
    let (offset, text) = match pointed(text, diagnostic) {
        Some((offset, _)) => {
            let (line, column) = position(text, offset);
            (offset, format!("{name}:{line}:{column}: {message}"))
        }
        None => (0, format!("{name}: {message}")),
    };
    Problem { file, offset, text }
}

/// What is wrong in `policies` (parsed from `sources`, each policy named `<file>#<n>`) against
/// Forge's schema, each problem located, in the order of the files.
pub(crate) fn problems(policies: &PolicySet, sources: &[(&str, &str)]) -> Vec<Problem> {
    let schema = match Schema::from_cedarschema_str(SCHEMA) {
        Ok((schema, _)) => schema,
        Err(e) => {
            return vec![Problem {
                file: 0,
                offset: 0,
                text: format!("Forge's Cedar schema does not load: {e}"),
            }];
        }
    };
    let result = Validator::new(schema).validate(policies, ValidationMode::Strict);
    // The file a policy came from, by its name `<file>#<n>`.
    let file_of = |error: &ValidationError| {
        let id = error.policy_id().to_string();
        let name = id
            .rsplit_once('#')
            .map_or(id.as_str(), |(f, _)| f)
            .to_owned();
        let file = sources.iter().position(|(n, _)| *n == name).unwrap_or(0);
        (file, sources.get(file).map_or("", |(_, text)| *text))
    };
    // A policy that names an application's namespace is the application's to check.
    let foreign: std::collections::HashSet<String> = result
        .validation_errors()
        .filter(|e| {
            matches!(
                e,
                ValidationError::UnrecognizedEntityType(_)
                    | ValidationError::UnrecognizedActionId(_)
            )
        })
        .filter(|e| {
            let (_, text) = file_of(e);
            pointed(text, *e).is_some_and(|(_, named)| !named.starts_with("Forge::"))
        })
        .map(|e| e.policy_id().to_string())
        .collect();
    result
        .validation_errors()
        .filter(|e| !foreign.contains(&e.policy_id().to_string()))
        .filter_map(|e| {
            let (file, text) = file_of(e);
            // A call's input is the tool's: its fields are not Forge's to declare.
            let named = pointed(text, e).map_or("", |(_, named)| named);
            if named.trim_start().starts_with("context.input") {
                return None;
            }
            Some(located(sources, file, e, &e.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn positions_are_lines_and_characters_from_one() {
        let text = "ab\ncdé\nf";
        assert_eq!(position(text, 0), (1, 1));
        assert_eq!(position(text, 3), (2, 1));
        assert_eq!(position(text, "ab\ncdé".len()), (2, 4));
        assert_eq!(position(text, 100), (3, 2));
    }

    proptest! {
        /// Any offset into any text is a position, never a panic (inside a character too).
        #[test]
        fn any_offset_is_a_position(
            text in proptest::collection::vec(prop_oneof![Just('\n'), any::<char>()], 0..80)
                .prop_map(|chars| chars.into_iter().collect::<String>()),
            offset in 0usize..400,
        ) {
            let (line, column) = position(&text, offset);
            prop_assert!(line >= 1 && line <= text.matches('\n').count() + 1);
            prop_assert!(column >= 1 && column <= text.chars().count() + 1);
        }
    }
}
