//! `forge eval` through the real binary, engine and store: the deterministic dataset at zero
//! model cost, the judge's durable cache across processes, comparisons that name cases, and
//! every dataset in `evals/` valid.

use std::path::{Path, PathBuf};

use forge_eval::harness::Scored;
use forge_eval::score::{PPM, Verdict};

use crate::{forge, repo, text};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("eval-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn core() -> String {
    repo().join("evals/core.toml").display().to_string()
}

/// `forge eval run --json` on `store`, parsed.
fn score(store: &str, extra: &[&str]) -> Scored {
    let mut args = vec!["eval", "run", "--store", store, "--json"];
    args.extend_from_slice(extra);
    let core = core();
    args.push(&core);
    let out = forge(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

fn sqlite(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("evals.db").display())
}

#[test]
fn the_deterministic_dataset_scores_every_dimension_at_zero_model_cost() {
    let dir = scratch("zero-cost");
    let scored = score(&sqlite(&dir), &[]);
    let totals = scored.run.totals.expect("completed");
    assert!(totals.cases >= 40, "{} cases", totals.cases);
    assert_eq!(totals.cases as usize, scored.cases.len());
    // Zero cost, asserted: no call reached a paid provider, the agents' calls and the judge's
    // cost nothing.
    assert_eq!(
        (
            totals.paid_calls,
            totals.run_cost_micros,
            totals.judge_cost_micros
        ),
        (0, 0, 0)
    );
    assert_eq!(
        totals.unscoreable, 0,
        "the scripted judge grades the judged cases"
    );
    for d in forge_eval::Dimension::ALL {
        assert!(
            scored.run.dimensions.contains_key(&d),
            "no case counts toward {d}"
        );
    }
    // Every case was run through the engine: a run id, a status, events behind each grade.
    for c in &scored.cases {
        assert!(!c.run_id.is_empty() && !c.run_status.is_empty(), "{c:?}");
        assert_eq!(
            c.grades.len(),
            c.grades
                .iter()
                .filter(|g| !g.grader.version.is_empty())
                .count()
        );
    }
    let failed: Vec<&str> = scored
        .cases
        .iter()
        .filter(|c| c.verdict != Verdict::Pass)
        .map(|c| c.case_id.as_str())
        .collect();
    assert!(
        failed.is_empty(),
        "cases not passing on this tree: {failed:?}"
    );
    // The same table is in the store.
    let shown = forge(&[
        "eval",
        "show",
        &format!("latest:{}", scored.run.dataset),
        "--store",
        &sqlite(&dir),
    ]);
    let shown = text(&shown.stdout);
    assert!(shown.contains("external-action-safety"), "{shown}");
    assert!(
        shown.contains(
            "cost: 0 micro-units for the agents' model calls (0 paid call(s)), 0 for the judge"
        ),
        "{shown}"
    );
}

#[test]
fn a_judged_verdict_is_paid_for_once_across_processes() {
    let dir = scratch("judge-cache");
    let prices = dir.join("prices.toml");
    std::fs::write(
        &prices,
        "[models.\"scripted:judges/core.script.toml\"]\ninput = 2000000\noutput = 8000000\n",
    )
    .unwrap();
    let prices = prices.display().to_string();
    let store = sqlite(&dir);
    let first = score(&store, &["--prices", &prices]);
    let paid = first.run.totals.expect("completed").judge_cost_micros;
    assert!(paid > 0, "the first judgements cost something");
    let judged: Vec<&str> = first
        .cases
        .iter()
        .filter(|c| c.judge_cost_micros > 0)
        .map(|c| c.case_id.as_str())
        .collect();
    assert_eq!(judged.len(), 3, "{judged:?}");
    // Another process, the same store: every verdict is read from the durable cache.
    let second = score(&store, &["--prices", &prices]);
    assert_eq!(second.run.totals.expect("completed").judge_cost_micros, 0);
    for id in judged {
        let c = second.cases.iter().find(|c| c.case_id == id).unwrap();
        assert_eq!(c.verdict, Verdict::Pass);
        assert!(
            c.grades.iter().any(|g| g.grader.version
                == "quality@1:scripted:judges/core.script.toml"
                || g.grader.version == "refusal@1:scripted:judges/core.script.toml"),
            "{:?}",
            c.grades
        );
    }
    // Without a judge, those cases are unscoreable, not failed.
    let none = score(&store, &["--judge", "none"]);
    let totals = none.run.totals.expect("completed");
    assert_eq!((totals.unscoreable, totals.failed), (3, 0));
}

#[test]
fn compare_names_the_case_a_changed_script_regressed() {
    let dir = scratch("compare");
    let store = sqlite(&dir);
    let baseline = score(&store, &["--label", "before"]);
    // The same calculator, with a script whose product is wrong.
    let agents = repo().join("examples/agents");
    std::fs::copy(agents.join("calculator.toml"), dir.join("calculator.toml")).unwrap();
    let script = std::fs::read_to_string(agents.join("calculator.script.toml")).unwrap();
    let broken = script.replace(
        "text = [\"12 × 7 = \", \"{{tool_result.result}}\", \".\"]",
        "text = [\"12 × 7 = 74.\"]",
    );
    assert_ne!(broken, script, "the planted change applies");
    std::fs::write(dir.join("calculator.script.toml"), broken).unwrap();
    let agent = format!("calculator={}", dir.join("calculator.toml").display());
    let candidate = score(&store, &["--label", "after", "--agent", &agent]);
    let out = forge(&[
        "eval",
        "compare",
        &baseline.run.id.to_string(),
        &candidate.run.id.to_string(),
        "--store",
        &store,
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: forge_eval::Comparison = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report.regressed.contains(&"calc.multiply".to_owned()),
        "{report:?}"
    );
    assert!(report.regressed.iter().all(|id| {
        let c = candidate.cases.iter().find(|c| &c.case_id == id).unwrap();
        c.score_ppm < PPM
    }));
    assert!(report.new_cases.is_empty() && report.removed.is_empty());
    assert!(!report.grader_versions_differ);
    // Score files compare the same way, and the text names the case.
    let before = dir.join("before.json");
    let after = dir.join("after.json");
    std::fs::write(&before, serde_json::to_string(&baseline).unwrap()).unwrap();
    std::fs::write(&after, serde_json::to_string(&candidate).unwrap()).unwrap();
    let out = forge(&[
        "eval",
        "compare",
        &before.display().to_string(),
        &after.display().to_string(),
        "--store",
        &store,
    ]);
    let printed = text(&out.stdout);
    assert!(
        printed.contains("regressed (passed, now fail)"),
        "{printed}"
    );
    assert!(printed.contains("  calc.multiply\n"), "{printed}");
    let listed = text(&forge(&["eval", "list", "--store", &store]).stdout);
    assert!(
        listed.contains("before") && listed.contains("after"),
        "{listed}"
    );
}

#[test]
fn every_dataset_in_evals_is_valid() {
    let dir = repo().join("evals");
    let datasets: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name.ends_with(".toml") || name.ends_with(".json"))
                && !["thresholds.json", "trend.json"].contains(&name.as_str())
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(!datasets.is_empty());
    let mut args = vec!["eval", "check"];
    args.extend(datasets.iter().map(String::as_str));
    let out = forge(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).matches(", valid").count(), datasets.len());
    // A broken one is refused with the case and the reason.
    let bad = scratch("bad").join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(repo().join("evals/core.toml"))
            .unwrap()
            .replacen("kind = \"contains\"", "kind = \"vibes\"", 1)
            .replace(
                "\"../examples/",
                &format!("\"{}/examples/", repo().display()),
            ),
    )
    .unwrap();
    let out = forge(&["eval", "check", &bad.display().to_string()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("case calc.multiply: expectation 1: no grader knows the kind \"vibes\""),
        "{err}"
    );
}
