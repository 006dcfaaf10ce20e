//! `forge run` meters every call against a price table and a quota; `forge usage` reads the
//! calls, the daily rollups and the reconciliation report back.

use forge_core::metering::ModelPrice;
use forge_core::usage::Usage;

use crate::{forge, repo, text};

#[test]
fn forge_run_prices_every_call_and_forge_usage_reports_them() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("usage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prices = dir.join("prices.toml");
    std::fs::write(
        &prices,
        "currency = \"USD\"\n[models.\"scripted:calculator.script.toml\"]\n\
         input = 3000000\noutput = 15000000\n",
    )
    .unwrap();
    let price = ModelPrice {
        input: 3_000_000,
        output: 15_000_000,
        ..ModelPrice::default()
    };
    let store = format!("sqlite://{}", dir.join("forge.db").display());
    let agent = repo().join("examples/agents/calculator.toml");
    let out = forge(&[
        "run",
        "--json",
        "--store",
        &store,
        "--prices",
        prices.to_str().unwrap(),
        "--agent",
        agent.to_str().unwrap(),
        "What is 12 times 7?",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run = crate::run_events(&out.stdout)[0].run_id.to_string();

    let calls = forge(&["usage", "--store", &store, "--run", &run, "--json"]);
    assert!(calls.status.success(), "{}", text(&calls.stderr));
    let calls: Vec<serde_json::Value> = serde_json::from_slice(&calls.stdout).unwrap();
    assert_eq!(calls.len(), 2, "two model calls");
    let mut total = 0;
    for c in &calls {
        assert_eq!(c["status"], "settled");
        let actual: Usage = serde_json::from_value(c["actual"].clone()).unwrap();
        assert_eq!(c["cost_micros"], price.cost(&actual), "{c}");
        total += price.cost(&actual);
    }
    let rollups = forge(&["usage", "--store", &store, "--json"]);
    let rollups: Vec<serde_json::Value> = serde_json::from_slice(&rollups.stdout).unwrap();
    let rollup = &rollups[0];
    assert_eq!(rollup["calls"], 2);
    assert_eq!(rollup["cost_micros"], total);
    let report = forge(&["usage", "--store", &store, "--reconcile"]);
    assert_eq!(
        text(&report.stdout).lines().count(),
        2,
        "{}",
        text(&report.stdout)
    );
    assert!(
        text(&report.stdout).contains("drift"),
        "{}",
        text(&report.stdout)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tenant_over_its_quota_is_refused_before_the_model_is_called() {
    let out = forge(&[
        "run",
        "--quota-tokens",
        "10",
        "--agent",
        "examples/agents/calculator.toml",
        "What is 12 times 7?",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("✗ failed · tenant local has used 0 of its 10 tokens"),
        "{stdout}"
    );
    assert!(!stdout.contains("assistant:"), "no model output: {stdout}");
}
