//! `cargo xtask`: project checks no compiler makes.
//!
//! - `tidy`: every Rust file starts with `//!`, every crate uses the workspace lints, every library
//!   denies `missing_docs`, no `#[should_panic]`, no `#[ignore]` without a reason, ARCHITECTURE.md
//!   names every crate; no module circle in `forge-core`, no SQL outside the stores and
//!   `forge-sql`, no I/O in `forge-core`, no file over 600 lines unless listed with its
//!   reason (`shape`);
//! - `modules CRATE…`: prints each crate's module import graph, its circles and its longest
//!   functions;
//! - `deps`: `forge-core` and `forge-engine` reach no database driver, HTTP client, OpenTelemetry or
//!   GraphQL crate through normal dependency edges; no crate but `forge-otel` declares an
//!   `opentelemetry*` dependency; test-only features stay in dev-dependencies;
//! - `reachability`: on a `syn` call graph, every run-event and part variant is constructed in
//!   code a root reaches, every declared capability and port is wired where its consumer is, and
//!   every event has a row in ARCHITECTURE.md;
//! - `docs`: every relative link and `#anchor` in `docs/*.md` and the top-level Markdown files
//!   resolves;
//! - `api`: rewrites the public-API and wire-schema snapshots under `api/` (its check, a
//!   `#[test]`, fails when they differ from the code and the schemas; a removal needs a
//!   `breaking` change fragment);
//! - `changelog`: renders `CHANGELOG.md`'s *Unreleased* section from the fragments in
//!   `changes/` (its check, a `#[test]`, fails when it is stale);
//! - `release [VERSION] [--no-ci]`: runs every check, bumps the versions the fragments call for,
//!   assembles the changelog, packages the crates and writes the release artifacts;
//! - `sbom [DIR]`: writes a CycloneDX bill of materials and a license inventory of what ships
//!   (default `target/release-artifacts/`);
//! - `package-examples`: packages the shipped crates and builds and runs every example crate
//!   against the packages, not the workspace's paths;
//! - `codegen`: writes the web client's TypeScript types from the committed schemas (its check,
//!   a `#[test]`, fails when they are stale).
//!
//! Each also runs as a `#[test]`, so `cargo test` enforces them.

mod api;
mod changes;
mod codegen;
mod deps;
mod docs;
mod graph;
mod modules;
mod package;
mod reachability;
mod release;
mod sbom;
mod shape;
mod tidy;
mod wire_api;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "tidy" => tidy::check(&root()),
        "deps" => deps::check(&root()),
        "reachability" => reachability::check(&root()),
        "docs" => docs::check(&root()),
        "api" => api::write(&root()),
        "sbom" => sbom::write(
            &root(),
            &std::env::args().nth(2).map_or_else(
                || root().join("target").join("release-artifacts"),
                PathBuf::from,
            ),
        ),
        "codegen" => codegen::write(&root()),
        "package-examples" => package::build_examples(&root()),
        "changelog" => changes::write(&root()),
        "release" => release::run(&root(), &std::env::args().skip(2).collect::<Vec<_>>()),
        "modules" => {
            for name in std::env::args().skip(2) {
                let modules =
                    modules::Modules::read(&root().join("crates").join(&name).join("src"));
                print!("{}", modules.report(&name, 12));
            }
            Ok(())
        }
        "ci" => checks(&root()),
        _ => {
            eprintln!(
                "usage: cargo xtask <tidy|deps|reachability|docs|api|sbom [DIR]|codegen|package-examples|changelog|release [VERSION] [--no-ci]|modules CRATE…|ci>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => {
            println!("xtask {task}: ok");
            ExitCode::SUCCESS
        }
        Err(problems) => {
            eprintln!("xtask {task}: {} problem(s)", problems.len());
            for p in problems {
                eprintln!("  {p}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Every check of this task that needs no build: what `ci` runs, and `release` first.
pub(crate) fn checks(root: &Path) -> Result<(), Vec<String>> {
    tidy::check(root)
        .and_then(|()| deps::check(root))
        .and_then(|()| reachability::check(root))
        .and_then(|()| docs::check(root))
        .and_then(|()| api::check(root))
        .and_then(|()| codegen::check(root))
        .and_then(|()| changes::check(root))
}

/// `Ok` when no problem was found.
pub(crate) fn verdict(problems: Vec<String>) -> Result<(), Vec<String>> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Panics listing the problems, for the `#[test]` form of each check.
#[cfg(test)]
pub(crate) fn assert_clean(what: &str, result: Result<(), Vec<String>>) {
    if let Err(problems) = result {
        panic!("{what}:\n{}", problems.join("\n"));
    }
}

/// Every `.rs` file under `dir`, sorted.
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path
                    .file_name()
                    .is_some_and(|n| n != "target" && n != "golden")
                {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The directories directly under `dir` that hold a `Cargo.toml`, sorted.
pub(crate) fn manifest_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("Cargo.toml").is_file())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// The workspace's crate directories (`crates/*` and `xtask`), sorted.
pub(crate) fn crate_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = manifest_dirs(&root.join("crates"));
    dirs.push(root.join("xtask"));
    dirs.sort();
    dirs
}
