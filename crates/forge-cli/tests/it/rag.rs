//! `forge rag` as a user runs it: ingest a directory (text, Markdown, HTML), list, show, search
//! (as the scope's policies allow), re-ingest a changed file, delete — and a run whose agent
//! searches and cites through `forge run`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::text;

/// A fresh directory for the test `name` (tests of one binary run concurrently).
fn workdir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rag-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("docs/policies")).unwrap();
    dir
}

fn forge_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The ids `forge rag list` gives for the store in `dir`, in its order.
fn source_ids(dir: &Path) -> Vec<String> {
    let list = json(&forge_in(dir, &["rag", "list", "--json"]));
    let ids = list.as_array().unwrap().iter();
    ids.map(|s| s["id"].as_str().unwrap().to_owned()).collect()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn documents_are_ingested_searched_by_label_and_deleted() {
    let dir = workdir("ingest");
    std::fs::write(
        dir.join("docs/leave.md"),
        "# Leave\n\nAnnual leave is twenty five days.",
    )
    .unwrap();
    std::fs::write(
        dir.join("docs/policies/pay.html"),
        "<html><head><title>Pay</title></head><body><p>The senior band starts at ninety thousand.</p></body></html>",
    )
    .unwrap();
    std::fs::write(
        dir.join("docs/notes.txt"),
        "Leave requests go to the manager.",
    )
    .unwrap();
    let out = forge_in(&dir, &["rag", "ingest", "docs", "--label", "public"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("3 files: 3 new"),
        "{}",
        text(&out.stdout)
    );
    let list = json(&forge_in(&dir, &["rag", "list", "--json"]));
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["leave.md", "notes.txt", "policies/pay.html"]);
    assert_eq!(list[2]["title"], "Pay");

    let hits = json(&forge_in(
        &dir,
        &["rag", "search", "--json", "annual leave days"],
    ));
    let first = &hits["results"][0];
    assert_eq!(first["source_id"], "leave.md");
    let show = json(&forge_in(&dir, &["rag", "show", "leave.md", "--json"]));
    let stored = show["chunks"][0]["text"].as_str().unwrap();
    assert_eq!(first["text"], stored);
    assert!(stored.contains("twenty five days"));

    // Label-based policies: interns may read only `public` sources.
    std::fs::write(
        dir.join("sources.cedar"),
        "permit(principal, action, resource);\nforbid(principal in Forge::Role::\"intern\", action == Forge::Action::\"read\", resource is Forge::Source) when { resource.label == \"restricted\" };\n",
    )
    .unwrap();
    let out = forge_in(
        &dir,
        &["rag", "ingest", "docs/policies", "--label", "restricted"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let intern = json(&forge_in(
        &dir,
        &[
            "rag",
            "search",
            "--json",
            "--policies",
            "sources.cedar",
            "--roles",
            "intern",
            "senior band",
        ],
    ));
    let sources = |v: &serde_json::Value| -> Vec<String> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["source_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        sources(&intern),
        ["policies/pay.html"],
        "the restricted copy is not theirs: {intern}"
    );
    let staff = json(&forge_in(
        &dir,
        &[
            "rag",
            "search",
            "--json",
            "--policies",
            "sources.cedar",
            "--roles",
            "staff",
            "senior band",
        ],
    ));
    assert!(sources(&staff).contains(&"pay.html".to_owned()), "{staff}");

    // A changed file is a new version; the old text is gone from search.
    std::fs::write(
        dir.join("docs/leave.md"),
        "# Leave\n\nAnnual leave is thirty days.",
    )
    .unwrap();
    let out = forge_in(
        &dir,
        &["rag", "ingest", "docs", "--label", "public", "--json"],
    );
    let report = json(&out);
    assert!(
        report
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == "leave.md" && r["outcome"] == "replaced"),
        "{report}"
    );
    let hits = json(&forge_in(&dir, &["rag", "search", "--json", "twenty"]));
    assert_eq!(hits["results"], serde_json::json!([]));

    let out = forge_in(&dir, &["rag", "delete", "leave.md"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let hits = json(&forge_in(
        &dir,
        &["rag", "search", "--json", "annual leave"],
    ));
    assert!(
        hits["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["source_id"] != "leave.md")
    );
    let out = forge_in(&dir, &["audit", "list", "--tenant", "local", "--json"]);
    assert!(
        text(&out.stdout).contains("source.deleted"),
        "{}",
        text(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `--embedder local`, ingestion stores vectors and search finds a paraphrase that shares
/// no word with its passage, which lexical search cannot; `rag embed` fills in what was ingested
/// without an embedder.
#[test]
fn the_local_model_finds_paraphrases_and_backfills() {
    let dir = workdir("local-model");
    let model = forge_testkit::models::minilm_dir();
    let local = format!("local:{}", model.display());
    std::fs::write(
        dir.join("docs/expenses.txt"),
        "Expense reports are reimbursed at the end of each month.",
    )
    .unwrap();
    std::fs::write(
        dir.join("docs/pets.txt"),
        "Our office welcomes dogs on Fridays.",
    )
    .unwrap();
    let out = forge_in(&dir, &["rag", "ingest", "docs/pets.txt"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = forge_in(
        &dir,
        &["rag", "ingest", "docs/expenses.txt", "--embedder", &local],
    );
    assert!(
        text(&out.stdout).contains("1 vectors (local:all-MiniLM-L6-v2)"),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let backfill = json(&forge_in(
        &dir,
        &["rag", "embed", "--json", "--embedder", &local],
    ));
    assert_eq!(backfill["embedded"], 1, "only the source without vectors");
    let query = "When do I get my money back for business costs?";
    let lexical = json(&forge_in(&dir, &["rag", "search", "--json", query]));
    assert!(
        lexical["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["source_id"] != "expenses.txt"),
        "no shared word: {lexical}"
    );
    let semantic = json(&forge_in(
        &dir,
        &["rag", "search", "--json", "--embedder", &local, query],
    ));
    assert_eq!(
        semantic["results"][0]["source_id"], "expenses.txt",
        "{semantic}"
    );
    assert!(semantic.get("warning").is_none());
    let refused = forge_in(&dir, &["rag", "search", "--embedder", "bogus", query]);
    assert!(!refused.status.success());
    assert!(text(&refused.stderr).contains("expected none, local"));
}

/// The held-out failure: text that is not ASCII, with no space for longer than a chunk, made the
/// chunker cut inside a character (a panic, exit 101, with the document's text on stderr).
#[test]
fn text_that_is_not_ascii_is_ingested_whole() {
    let dir = workdir("unicode");
    let body = format!("a{}", "é".repeat(1_200));
    std::fs::write(dir.join("docs/accents.txt"), &body).unwrap();
    std::fs::write(
        dir.join("docs/mixed.md"),
        "# Ünïcødé\n\n".to_owned() + &"日本語のテキスト😀 ".repeat(300),
    )
    .unwrap();
    let out = forge_in(&dir, &["rag", "ingest", "docs"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("éé"),
        "no document text on stderr"
    );
    let show = json(&forge_in(&dir, &["rag", "show", "accents.txt", "--json"]));
    let joined: String = show["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert_eq!(joined, body);
}

/// Two files with one name in one batch would be one source, the second replacing the first:
/// the batch is refused whole, naming both; `--id` gives each file its own.
#[test]
fn a_batch_never_replaces_its_own_member() {
    let dir = workdir("same-name");
    for (sub, words) in [("a", "alpha apples"), ("b", "beta bananas")] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        std::fs::write(dir.join(sub).join("x.txt"), words).unwrap();
    }
    let out = forge_in(&dir, &["rag", "ingest", "a/x.txt", "b/x.txt"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("a/x.txt") && err.contains("b/x.txt"), "{err}");
    assert!(err.contains("nothing was ingested"), "{err}");
    assert!(source_ids(&dir).is_empty());

    let both = forge_in(&dir, &["rag", "ingest", "a/x.txt", "b/x.txt", "--id", "x"]);
    assert!(!both.status.success(), "--id names one file");
    for sub in ["a", "b"] {
        let id = format!("{sub}-x.txt");
        let path = format!("{sub}/x.txt");
        let out = forge_in(&dir, &["rag", "ingest", &path, "--id", &id]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert_eq!(source_ids(&dir), ["a-x.txt", "b-x.txt"]);
    // A directory gives each its path relative to it.
    let out = forge_in(&dir, &["rag", "ingest", "."]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        source_ids(&dir),
        ["a-x.txt", "a/x.txt", "b-x.txt", "b/x.txt"]
    );
}
