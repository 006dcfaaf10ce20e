//! `forge gate` through the real binary: the deterministic gate on this tree, a planted
//! regression failing by name, an override shipping it accountably, and missing input refused.

use std::path::{Path, PathBuf};

use forge_eval::{GateOutcome, Trend};

use crate::{forge_with_env, repo, text};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `forge gate --dataset evals/core.toml` on a memory store, with the committed thresholds.
fn gate(trend: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let dataset = path(&repo().join("evals/core.toml"));
    let thresholds = path(&repo().join("evals/thresholds.json"));
    let trend = path(trend);
    let mut args = vec![
        "gate",
        "--dataset",
        &dataset,
        "--store",
        "memory",
        "--thresholds",
        &thresholds,
        "--trend",
        &trend,
    ];
    args.extend_from_slice(extra);
    forge_with_env(&args, env)
}

fn trend(p: &Path) -> Trend {
    Trend::parse(&std::fs::read_to_string(p).unwrap(), "trend").unwrap()
}

#[test]
fn the_deterministic_gate_passes_this_tree_at_zero_cost_and_records_it() {
    let dir = scratch("tree");
    let copy = dir.join("trend.json");
    std::fs::copy(repo().join("evals/trend.json"), &copy).unwrap();
    let before = trend(&copy).entries.len();
    assert!(before >= 1, "the committed trend has the first release");
    let out = gate(&copy, &["--label", "ci"], &[]);
    let printed = text(&out.stdout);
    assert!(out.status.success(), "{printed}{}", text(&out.stderr));
    assert!(printed.contains("gate: PASS"), "{printed}");
    assert!(printed.contains("cost: 0 micro-units"), "{printed}");
    let after = trend(&copy);
    assert_eq!(after.entries.len(), before + 1, "appended");
    assert_eq!(
        after.entries[..before],
        trend(&repo().join("evals/trend.json")).entries[..],
        "append-only: the history before is untouched"
    );
    let entry = after.entries.last().unwrap();
    assert_eq!((entry.outcome, entry.cost_micros), (GateOutcome::Pass, 0));
    assert_eq!(entry.label, "ci");
    assert!(entry.failed.is_empty() && entry.failures.is_empty());
}

/// The calculator agent with its script edited: `from` replaced by `to` in the script.
fn calculator_with(dir: &Path, edits: &[(&str, &str)]) -> String {
    let agents = repo().join("examples/agents");
    std::fs::copy(agents.join("calculator.toml"), dir.join("calculator.toml")).unwrap();
    let mut script = std::fs::read_to_string(agents.join("calculator.script.toml")).unwrap();
    for (from, to) in edits {
        assert!(script.contains(from), "the planted change applies: {from}");
        script = script.replace(from, to);
    }
    std::fs::write(dir.join("calculator.script.toml"), script).unwrap();
    format!("calculator={}", path(&dir.join("calculator.toml")))
}

const ADD: &str = "text = [\"40 + 2 = \", \"{{tool_result.result}}\", \".\"]";
const MUL: &str = "text = [\"12 × 7 = \", \"{{tool_result.result}}\", \".\"]";

#[test]
fn a_planted_regression_fails_by_name_and_an_override_ships_it_accountably() {
    let dir = scratch("planted");
    let history = dir.join("trend.json");
    // The baseline release: forty plus two answered wrongly, still above every threshold.
    let base_dir = dir.join("before");
    std::fs::create_dir_all(&base_dir).unwrap();
    let before = calculator_with(&base_dir, &[(ADD, "text = [\"40 + 2 = 41.\"]")]);
    let out = gate(
        &history,
        &["--agent", &before, "--label", "v1", "--first-release"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stdout));
    let v1 = trend(&history);
    assert_eq!(v1.entries.len(), 1);
    assert_eq!(v1.entries[0].outcome, GateOutcome::Pass);
    assert!(v1.entries[0].failed.contains(&"calc.add".to_owned()));

    // The candidate fixes that case and breaks another: the means barely move, the gate names it.
    let next_dir = dir.join("after");
    std::fs::create_dir_all(&next_dir).unwrap();
    let after = calculator_with(&next_dir, &[(MUL, "text = [\"12 × 7 = 74.\"]")]);
    let out = gate(&history, &["--agent", &after, "--label", "v2"], &[]);
    let printed = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{printed}");
    assert!(printed.contains("baseline: v1"), "{printed}");
    assert!(
        printed.contains("passed in the baseline and fail now (at most 0 allowed): calc.multiply"),
        "{printed}"
    );
    assert!(
        !printed.contains("calc.add"),
        "the fixed case is no regression: {printed}"
    );
    assert!(printed.contains("gate: FAIL"), "{printed}");
    let v2 = trend(&history);
    assert_eq!(v2.entries.len(), 2, "a failed gate is recorded too");
    assert_eq!(v2.entries[1].outcome, GateOutcome::Fail);
    assert!(!v2.entries[1].failed.contains(&"calc.add".to_owned()));

    // Half an override is refused, and nothing is recorded.
    let out = gate(
        &history,
        &["--agent", &after, "--label", "v2"],
        &[("FORGE_GATE_OVERRIDE_ACTOR", "rita")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("half an override: FORGE_GATE_OVERRIDE_ACTOR is set but FORGE_GATE_OVERRIDE_REASON is not"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(trend(&history).entries.len(), 2);

    // A whole override ships it: exit 0, and the trend says overridden, by whom, why, and what.
    // The failed v2 released nothing, so the baseline is still v1 and the regression is named.
    let out = gate(
        &history,
        &["--agent", &after, "--label", "v2"],
        &[
            ("FORGE_GATE_OVERRIDE_ACTOR", " rita "),
            (
                "FORGE_GATE_OVERRIDE_REASON",
                "the product owner accepts the wrong product for v2",
            ),
        ],
    );
    let printed = text(&out.stdout);
    assert!(out.status.success(), "{printed}{}", text(&out.stderr));
    assert!(printed.contains("gate: OVERRIDDEN"), "{printed}");
    let v3 = trend(&history);
    let last = v3.entries.last().unwrap();
    assert_eq!(last.outcome, GateOutcome::Overridden);
    let by = last.overridden_by.as_ref().unwrap();
    assert_eq!(
        (by.actor.as_str(), by.reason.as_str()),
        ("rita", "the product owner accepts the wrong product for v2")
    );
    assert!(
        last.failures.iter().any(|f| f.contains("calc.multiply")),
        "{:?}",
        last.failures
    );
}

#[test]
fn missing_input_fails_with_the_reason_and_records_nothing() {
    let dir = scratch("missing");
    let history = dir.join("trend.json");
    std::fs::copy(repo().join("evals/trend.json"), &history).unwrap();
    let thresholds = path(&repo().join("evals/thresholds.json"));
    let absent = path(&dir.join("scores.json"));
    let out = forge_with_env(
        &[
            "gate",
            "--scores",
            &absent,
            "--thresholds",
            &thresholds,
            "--trend",
            &path(&history),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no scores to gate: cannot read"),
        "{}",
        text(&out.stderr)
    );
    // A model-judged release with no credentials: refused before anything runs, naming why.
    let providers = dir.join("providers.toml");
    std::fs::write(
        &providers,
        "[providers.judge]\nkind = \"openai\"\napi_key = \"env:FORGE_GATE_TEST_UNSET_KEY\"\n",
    )
    .unwrap();
    let out = gate(
        &history,
        &[
            "--judge",
            "judge:gpt-4o-mini",
            "--providers",
            &path(&providers),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("FORGE_GATE_TEST_UNSET_KEY"),
        "{}",
        text(&out.stderr)
    );
    // With its credential but no price, a real judge is refused before anything runs: its calls
    // would be reported and recorded as costing nothing (issue 62, item 12).
    let out = gate(
        &history,
        &[
            "--judge",
            "judge:gpt-4o-mini",
            "--providers",
            &path(&providers),
        ],
        &[("FORGE_GATE_TEST_UNSET_KEY", "sk-test-not-a-real-key")],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("judge model judge:gpt-4o-mini has no price"),
        "{}",
        text(&out.stderr)
    );
    // No trend: refused unless this is deliberately a first release.
    let out = gate(&dir.join("none.json"), &[], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--first-release"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&history).unwrap(),
        std::fs::read_to_string(repo().join("evals/trend.json")).unwrap(),
        "nothing was recorded"
    );
}
