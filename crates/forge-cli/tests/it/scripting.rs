//! The CLI as scripts use it (issue 68, item 5): `--json` prints one document — an array for a
//! list, `[]` when there is nothing, an object for one record — and the exit status says the
//! outcome (not found 3, conflict 5, invalid input 2) whatever the command.

use std::process::Output;

use crate::{forge, text};

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: not one JSON document: {}", text(&out.stdout)))
}

#[test]
fn json_shapes_empty_results_and_exit_statuses() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("scripting-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("sqlite://{}", dir.join("forge.db").display());
    let with = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--store", store.as_str()]);
        forge(&all)
    };

    // Nothing yet: said explicitly, as `[]` or in words.
    assert_eq!(
        json(&with(&["runs", "list", "--json"])),
        serde_json::json!([])
    );
    assert_eq!(
        json(&with(&["dlq", "list", "--json"])),
        serde_json::json!([])
    );
    assert_eq!(
        json(&with(&["interactions", "list", "--json"])),
        serde_json::json!([])
    );
    let none = with(&["runs", "list"]);
    assert_eq!(text(&none.stdout).trim(), "no runs");

    // A run submitted is one JSON run; listed, an array of them; shown, with its interactions.
    let submitted = json(&with(&[
        "submit",
        "--json",
        "--agent",
        "examples/agents/calculator.toml",
        "2 + 2?",
    ]));
    assert_eq!(submitted["status"], "queued", "{submitted}");
    assert_eq!(submitted["agent"], "calculator", "{submitted}");
    let id = submitted["id"].as_str().unwrap().to_owned();
    let listed = json(&with(&["runs", "list", "--json"]));
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["thread"], submitted["thread"]);
    let shown = json(&with(&["runs", "show", "--json", &id]));
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["interactions"], serde_json::json!([]), "{shown}");
    assert_eq!(
        json(&with(&["runs", "list", "--json", "--status", "failed"])),
        serde_json::json!([])
    );

    // The same outcome, the same status.
    let nobody = "0190c3c2-0000-7000-8000-000000000000";
    for args in [
        &["runs", "show", nobody][..],
        &["runs", "cancel", nobody],
        &["interactions", "approve", nobody],
        &["interactions", "reject", "--json", nobody],
    ] {
        let out = with(args);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let active = with(&["runs", "erase", &id]);
    assert_eq!(active.status.code(), Some(5), "{}", text(&active.stderr));
    assert!(
        text(&active.stderr).contains("has not ended"),
        "{}",
        text(&active.stderr)
    );
    let bad = with(&["runs", "list", "--status", "sideways"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));

    // An id's unique beginning names it (hyphens optional); a shared one is refused, naming
    // the runs it could mean.
    let unique: String = id.replace('-', "").chars().take(24).collect();
    let by_prefix = json(&with(&["runs", "show", "--json", &unique]));
    assert_eq!(by_prefix["id"], id.as_str());
    let second = json(&with(&[
        "submit",
        "--json",
        "--agent",
        "examples/agents/calculator.toml",
        "3 + 3?",
    ]));
    let shared = &id[..4];
    assert!(second["id"].as_str().unwrap().starts_with(shared));
    let ambiguous = with(&["runs", "show", shared]);
    assert_eq!(ambiguous.status.code(), Some(2));
    assert!(
        text(&ambiguous.stderr).contains(&format!("2 runs begin with {shared}: ")),
        "{}",
        text(&ambiguous.stderr)
    );
    assert_eq!(with(&["runs", "show", "ffff0000"]).status.code(), Some(3));

    // No worker runs here: the request is recorded, and the next worker to take it up ends it.
    let cancelled = json(&with(&["runs", "cancel", "--json", &id]));
    assert_eq!(cancelled["cancel_requested"], true, "{cancelled}");
    let audit = json(&with(&["audit", "list", "--json", "--action", "no.such."]));
    assert_eq!(audit, serde_json::json!([]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `forge --help` fits one screen (30 lines of 80 columns), and a subcommand's help lists only
/// the flags that apply to it (issue 68, item 10).
#[test]
fn help_fits_a_screen_and_lists_only_what_applies() {
    let help = text(&forge(&["--help"]).stdout);
    assert!(help.lines().count() <= 30, "{help}");
    assert!(help.lines().all(|l| l.chars().count() <= 80), "{help}");
    let flags = |args: &[&str]| text(&forge(args).stdout);
    let list = flags(&["files", "list", "--help"]);
    for upload_only in ["--clamd", "--max-file-bytes", "--on-archive", "--file-key"] {
        assert!(!list.contains(upload_only), "{upload_only} in {list}");
    }
    assert!(list.contains("--files-dir"), "{list}");
    assert!(flags(&["files", "put", "--help"]).contains("--clamd"));
    assert!(flags(&["files", "ref", "--help"]).contains("--file-key"));
    assert!(!flags(&["rag", "list", "--help"]).contains("--embedder"));
    assert!(flags(&["rag", "search", "--help"]).contains("--embedder"));
    let pending = flags(&["interactions", "list", "--help"]);
    assert!(
        !pending.contains("--key") && !pending.contains("--actor"),
        "{pending}"
    );
    assert!(flags(&["interactions", "approve", "--help"]).contains("--actor"));
}
