//! Tidy rules about the shape of the code, each a check so it stays true:
//!
//! - no module import circle inside the crates listed in [`ACYCLIC`] (from [`Modules`]);
//! - no SQL statement text in a crate's source outside the stores and the shared SQL crate
//!   ([`SQL_HOMES`]);
//! - no file system or process access in `forge-core`, which does no I/O;
//! - no source file longer than [`MAX_LINES`] lines (before its test module) unless
//!   [`LONG_FILES`] names it with the reason it is one concern.

use std::path::Path;

use crate::modules::Modules;

/// The crates whose modules must not import each other in a circle.
pub(crate) const ACYCLIC: &[&str] = &["forge-core", "forge-engine"];

/// Where SQL statement text may be written: the stores, the SQL crate they share, and what
/// measures or plays the world outside Forge (each with its reason).
const SQL_HOMES: &[(&str, &str)] = &[
    ("crates/forge-store-", "the stores"),
    (
        "crates/forge-sql/",
        "the statement text and pool the SQL stores share",
    ),
    (
        "crates/forge-bench/",
        "the benchmark reads PostgreSQL's own statistics and freezes a database to measure",
    ),
    (
        "crates/forge-cli/src/effects.rs",
        "the example external system the CLI's demo tool writes to, not Forge's storage",
    ),
];

/// What a library of no I/O must not name.
const IO: &[&str] = &[
    "std::fs",
    "std::process",
    "tokio::fs",
    "tokio::process",
    "std::env",
];

/// The length past which a file must be named in [`LONG_FILES`].
pub(crate) const MAX_LINES: usize = 600;

/// Files longer than [`MAX_LINES`], each with why it is one concern or which issue splits it.
/// A file listed here that is no longer long is a problem too, so the list stays true.
const LONG_FILES: &[(&str, &str)] = &[
    (
        "crates/forge-bench/src/subscribers.rs",
        "one benchmark: the live fan-out's subscribers",
    ),
    (
        "crates/forge-bench/src/workload.rs",
        "one benchmark: the shared workload's harness",
    ),
    (
        "crates/forge-engine/src/worker/mod.rs",
        "the worker's loop: claims, heartbeats and shutdown of one pool",
    ),
    (
        "crates/forge-eval/src/dataset.rs",
        "one format: the dataset file, its parsing and its checks",
    ),
    (
        "crates/forge-eval/src/gate.rs",
        "one decision: the release gate's comparison",
    ),
    (
        "crates/forge-server/src/lib.rs",
        "the server's assembly; the public face (issue 66) splits it",
    ),
    (
        "crates/forge-store-postgres/src/lib.rs",
        "the PostgreSQL store's connection and modes; the storage layer (issue 65) thins it",
    ),
    (
        "crates/forge-store-postgres/src/runs.rs",
        "the run store on PostgreSQL; the storage layer (issue 65) shares it with SQLite",
    ),
    (
        "crates/forge-testkit/src/history.rs",
        "one conformance suite: a thread's history, scenario by scenario",
    ),
    (
        "crates/forge-testkit/src/interactions.rs",
        "one conformance suite: approvals and questions",
    ),
    (
        "crates/forge-testkit/src/queue.rs",
        "one conformance suite: the job queue",
    ),
    (
        "crates/forge-testkit/src/sources.rs",
        "one conformance suite: the retrieval sources",
    ),
    (
        "crates/forge-testkit/src/store.rs",
        "one conformance suite: the run store",
    ),
    (
        "xtask/src/reachability.rs",
        "one check: reachability on the call graph",
    ),
];

/// A file's text before its test module, which the rules do not cover.
fn before_tests(text: &str) -> &str {
    text.find("\n#[cfg(test)]\nmod ")
        .map_or(text, |i| &text[..i])
}

/// The lines of `text` that write a SQL statement in a string: one starting with a statement's
/// keyword in capitals, as every statement in this tree is written.
pub(crate) fn sql_lines(text: &str) -> Vec<usize> {
    const STARTS: &[&str] = &[
        "SELECT ",
        "INSERT INTO ",
        "DELETE FROM ",
        "CREATE TABLE ",
        "CREATE INDEX ",
        "CREATE UNIQUE INDEX ",
        "ALTER TABLE ",
        "WITH ",
    ];
    let mut out = Vec::new();
    for (i, line) in before_tests(text).lines().enumerate() {
        let quoted = line.split('"').skip(1).step_by(2);
        let update = |s: &str| {
            s.strip_prefix("UPDATE ")
                .is_some_and(|r| r.split_whitespace().nth(1) == Some("SET"))
        };
        if quoted
            .map(str::trim_start)
            .any(|s| STARTS.iter().any(|k| s.starts_with(k)) || update(s))
        {
            out.push(i + 1);
        }
    }
    out
}

/// The lines of `text` that reach the file system, the environment or other processes.
pub(crate) fn io_lines(text: &str) -> Vec<usize> {
    before_tests(text)
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            let code = l.split("//").next().unwrap_or_default();
            IO.iter().any(|io| code.contains(io))
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// Checks the tree; returns every problem found.
pub(crate) fn check(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for name in ACYCLIC {
        let modules = Modules::read(&root.join("crates").join(name).join("src"));
        problems.extend(modules.errors.iter().cloned());
        for circle in modules.circles() {
            problems.push(format!(
                "{name}: modules import each other in a circle: {} (`cargo xtask modules {name}` shows the edges)",
                circle.join(", ")
            ));
        }
    }
    let mut lengths = Vec::new();
    for dir in crate::crate_dirs(root) {
        for file in crate::rust_files(&dir.join("src")) {
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if shown.starts_with("crates/")
                && !SQL_HOMES.iter().any(|(home, _)| shown.starts_with(home))
            {
                for line in sql_lines(&text) {
                    problems.push(format!(
                        "{shown}:{line}: SQL belongs in a store or `forge-sql::statements`"
                    ));
                }
            }
            if shown.starts_with("crates/forge-core/") {
                for line in io_lines(&text) {
                    problems.push(format!(
                        "{shown}:{line}: forge-core does no I/O: no files, environment or processes"
                    ));
                }
            }
            lengths.push((shown, before_tests(&text).lines().count()));
        }
    }
    problems.extend(long_files(&lengths, LONG_FILES));
    problems
}

/// The problems with files' `lengths` (path, lines before the tests) against the `listed` long
/// files: a long file not listed, and a listed file that is not long (or gone).
pub(crate) fn long_files(lengths: &[(String, usize)], listed: &[(&str, &str)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (file, lines) in lengths {
        if *lines > MAX_LINES && !listed.iter().any(|(f, _)| f == file) {
            problems.push(format!(
                "{file}: {lines} lines; split it by concern, or list it in xtask's LONG_FILES \
                 with the reason it is one"
            ));
        }
    }
    for (file, _) in listed {
        if !lengths.iter().any(|(f, l)| f == file && *l > MAX_LINES) {
            problems.push(format!(
                "{file}: listed in xtask's LONG_FILES but not longer than {MAX_LINES} lines; \
                 remove it from the list"
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_in_strings_are_sql_and_prose_is_not() {
        let text = "//! Selects\nconst A: &str = \"SELECT id FROM t\";\n\
            let b = \"select is prose\";\nconst C: &str = \"UPDATE forge_runs SET x = 1\";\n\
            // SELECT in a comment\nlet d = \"UPDATE the docs\";\n\
            #[cfg(test)]\nmod tests { const E: &str = \"SELECT 1\"; }\n";
        assert_eq!(sql_lines(text), [2, 4]);
    }

    #[test]
    fn io_is_found_in_code_not_in_comments_or_tests() {
        let text = "//! d\nfn f() { std::fs::read(\"x\"); }\n// std::process in prose\n\
            fn g() { let _ = std::env::var(\"A\"); }\n#[cfg(test)]\nmod tests { use std::fs; }\n";
        assert_eq!(io_lines(text), [2, 4]);
    }

    #[test]
    fn a_long_file_must_be_listed_and_a_listed_file_must_be_long() {
        let lengths = [
            ("a.rs".to_owned(), MAX_LINES + 1),
            ("b.rs".to_owned(), MAX_LINES + 1),
            ("c.rs".to_owned(), MAX_LINES),
        ];
        let problems = long_files(&lengths, &[("b.rs", "one concern"), ("c.rs", "was long")]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("a.rs: 601 lines"), "{problems:?}");
        assert!(problems[1].starts_with("c.rs: listed"), "{problems:?}");
    }
}
