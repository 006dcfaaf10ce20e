//! Reachability: every run-event variant is produced by non-test code, and documented.
//!
//! A producer constructs the event where it enters a run's log: `emit(RunEventKind::X …)` or
//! `kind: RunEventKind::X …`. Matching on a variant is not producing it. Variants that a later
//! capability will produce are listed in [`LATER`] with the reason; a listed variant that gains a
//! producer fails the check too, so the list cannot go stale.

use std::path::Path;

use crate::{crate_dirs, rust_files};

/// Variants declared for the wire contract whose producer arrives with a later capability.
const LATER: &[(&str, &str)] = &[];

/// The variant names of `RunEventKind` in forge-core's event module.
pub(crate) fn variants(event_rs: &str) -> Vec<(String, String)> {
    let Some(start) = event_rs.find("pub enum RunEventKind {") else {
        return vec![];
    };
    let body = &event_rs[start..];
    let end = body.find("\n}\n").unwrap_or(body.len());
    let mut out = Vec::new();
    let mut wire = String::new();
    for line in body[..end].lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("#[serde(rename = \"") {
            wire = rest.trim_end_matches("\")]").to_owned();
        } else if line.starts_with("    ")
            && !line.starts_with("     ")
            && l.ends_with('{')
            && let Some(name) = l
                .split_whitespace()
                .next()
                .filter(|n| n.chars().next().is_some_and(char::is_uppercase))
        {
            out.push((name.to_owned(), std::mem::take(&mut wire)));
        }
    }
    out
}

/// Source without its `#[cfg(test)]` tail (test modules sit at the end of each file here).
fn non_test(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

/// Whether `source` constructs `RunEventKind::<variant>` where it enters a log.
pub(crate) fn produces(source: &str, variant: &str) -> bool {
    let needle = format!("RunEventKind::{variant}");
    source.match_indices(&needle).any(|(i, _)| {
        let after = source[i + needle.len()..].chars().next();
        if after.is_some_and(|c| c.is_alphanumeric()) {
            return false;
        }
        let before = source[..i].trim_end();
        before.ends_with("emit(") || before.ends_with("kind:")
    })
}

/// Checks every variant has a producer (or a reason to wait) and a row in ARCHITECTURE.md.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let event_rs =
        std::fs::read_to_string(root.join("crates/forge-core/src/event.rs")).unwrap_or_default();
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    let declared = variants(&event_rs);
    let mut problems = Vec::new();
    if declared.len() < 5 {
        problems.push(format!(
            "found only {} RunEventKind variants; the parser is broken",
            declared.len()
        ));
    }
    let sources: Vec<String> = crate_dirs(root)
        .into_iter()
        .filter(|d| {
            !d.ends_with("forge-core") && !d.ends_with("forge-testkit") && !d.ends_with("xtask")
        })
        .flat_map(|d| rust_files(&d.join("src")))
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    for (variant, wire) in &declared {
        let produced = sources.iter().any(|s| produces(non_test(s), variant));
        let later = LATER.iter().find(|(v, _)| v == variant);
        match (produced, later) {
            (false, None) => problems.push(format!(
                "RunEventKind::{variant} ({wire}) has no producer in non-test code"
            )),
            (true, Some(_)) => problems.push(format!(
                "RunEventKind::{variant} now has a producer; remove it from LATER"
            )),
            _ => {}
        }
        if !architecture.contains(&format!("`{wire}`")) {
            problems.push(format!(
                "ARCHITECTURE.md has no row for `{wire}` and its producer"
            ));
        }
    }
    crate::verdict(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_event_has_a_producer() {
        crate::assert_clean("reachability", check(&crate::root()));
    }

    #[test]
    fn a_match_arm_is_not_a_producer() {
        let src = "match e { RunEventKind::RunCompleted { text, .. } => {} }\nif matches!(k, RunEventKind::RunFailed { .. }) {}";
        assert!(!produces(src, "RunCompleted"));
        assert!(!produces(src, "RunFailed"));
        assert!(produces(
            "cur.emit(RunEventKind::RunCompleted { text, usage });",
            "RunCompleted"
        ));
        assert!(produces(
            "RunEvent { run_id, seq, at, kind: RunEventKind::StepStarted { step } }",
            "StepStarted"
        ));
        assert!(!produces(
            "cur.emit(RunEventKind::StepStartedLater { step });",
            "StepStarted"
        ));
    }

    #[test]
    fn parser_finds_the_variants_and_wire_names() {
        let src = "pub enum RunEventKind {\n    /// doc\n    #[serde(rename = \"run.queued\")]\n    RunQueued {\n        /// x\n        thread_id: ThreadId,\n    },\n    #[serde(rename = \"run.started\")]\n    RunStarted {\n        model: String,\n    },\n}\n";
        assert_eq!(
            variants(src),
            [
                ("RunQueued".to_owned(), "run.queued".to_owned()),
                ("RunStarted".to_owned(), "run.started".to_owned())
            ]
        );
    }
}
