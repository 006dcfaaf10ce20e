//! Tidy: conventions of the source tree.

use std::path::Path;

use crate::{crate_dirs, rust_files};

/// Checks the tree; returns every problem found.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    for dir in crate_dirs(root) {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        problems.extend(check_manifest(&name, &manifest));
        if !architecture.contains(&format!("`{name}`")) {
            problems.push(format!(
                "ARCHITECTURE.md does not name crate `{name}` in its codemap"
            ));
        }
        let lib = dir.join("src/lib.rs");
        if let Ok(text) = std::fs::read_to_string(&lib)
            && !text.contains("#![deny(missing_docs)]")
        {
            problems.push(format!(
                "{}: libraries must #![deny(missing_docs)]",
                lib.display()
            ));
        }
        for (shown, text) in sources(root, &dir) {
            problems.extend(check_source(&shown, &text));
        }
    }
    for (file, most) in SHORT_DOCS {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        problems.extend(check_length(file, &text, *most));
    }
    for app in APPLICATIONS {
        for (shown, text) in sources(root, &root.join(app).join("src")) {
            problems.extend(check_application_source(&shown, &text));
        }
    }
    problems.extend(crate::shape::check(root));
    crate::verdict(problems)
}

/// The Rust files under `dir`, each as its path from `root` and its text.
fn sources(root: &Path, dir: &Path) -> Vec<(String, String)> {
    rust_files(dir)
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            (shown, text)
        })
        .collect()
}

/// The applications a team copies: their binaries run where they are deployed, not where they
/// were built.
const APPLICATIONS: &[&str] = &["examples/shareflow", "examples/crm"];

/// An application's code reads nothing through the build machine's checkout: what its binary
/// needs (skills, pins, sample documents) is compiled in. (Spelled in pieces, so this file
/// passes its own rule were it ever checked.)
pub(crate) fn check_application_source(path: &str, text: &str) -> Vec<String> {
    let build_dir = concat!("CARGO_", "MANIFEST_DIR");
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(build_dir))
        .map(|(i, _)| {
            format!(
                "{path}:{}: reads the build machine's checkout at run time; compile it in (include_str!)",
                i + 1
            )
        })
        .collect()
}

/// Top-level documents a newcomer reads first, and the most lines each may have: the README is a
/// quickstart (the manual is `docs/`), ARCHITECTURE a map (the long form is `docs/internals.md`).
const SHORT_DOCS: &[(&str, usize)] = &[("README.md", 250), ("ARCHITECTURE.md", 400)];

/// `file` (with `text`) has at most `most` lines.
fn check_length(file: &str, text: &str, most: usize) -> Option<String> {
    let lines = text.lines().count();
    (lines > most)
        .then(|| format!("{file} has {lines} lines, more than {most}: move the detail into docs/"))
}

/// Package metadata every crate declares (its own, or the workspace's), so a release needs no
/// manifest edits: what it is, under which license, for which toolchain, and how it is found.
const METADATA: &[&str] = &[
    "description",
    "license",
    "rust-version",
    "readme",
    "keywords",
    "categories",
];

/// A crate manifest must take the workspace lints and declare the package metadata.
pub(crate) fn check_manifest(name: &str, manifest: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let lints = manifest
        .lines()
        .skip_while(|l| l.trim() != "[lints]")
        .nth(1)
        .map(str::trim);
    if lints != Some("workspace = true") {
        problems.push(format!(
            "crate {name}: Cargo.toml must have `[lints]` with `workspace = true`"
        ));
    }
    let package: Vec<&str> = manifest
        .lines()
        .skip_while(|l| l.trim() != "[package]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .collect();
    for key in METADATA {
        let declared = package.iter().any(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('=') || r.starts_with(".workspace"))
        });
        if !declared {
            problems.push(format!("crate {name}: Cargo.toml must declare `{key}`"));
        }
    }
    problems
}

/// The workplace's shared folder beside the checkout: a fresh clone does not have it.
/// (Spelled in pieces, so this file does not name it.)
const OUTSIDE: [&str; 2] = [concat!("..", "/shared"), concat!("shared", "/fixtures")];

/// A source file must open with module docs, never use `#[should_panic]`, give every
/// `#[ignore]` a reason, and read nothing from outside the repository (a fresh clone has only
/// what is in it; data from elsewhere comes through a variable, as `FORGE_WIRE_FIXTURES`).
pub(crate) fn check_source(path: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !text.trim_start().starts_with("//!") {
        problems.push(format!("{path}: must start with a `//!` module doc"));
    }
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if OUTSIDE.iter().any(|o| l.contains(o)) {
            problems.push(format!(
                "{path}:{}: reaches outside the repository; a fresh clone has no such folder",
                i + 1
            ));
        }
        if l.starts_with("#[should_panic") {
            problems.push(format!(
                "{path}:{}: #[should_panic] is banned; assert on the error value",
                i + 1
            ));
        }
        if l.starts_with("#[ignore") && !l.contains("= \"") {
            problems.push(format!(
                "{path}:{}: #[ignore] needs a reason: #[ignore = \"why\"]",
                i + 1
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_is_tidy() {
        crate::assert_clean("tidy found problems", check(&crate::root()));
    }

    #[test]
    fn tidy_catches_what_it_claims_to() {
        assert_eq!(
            check_source("a.rs", "//! docs\nfn f() {}\n"),
            Vec::<String>::new()
        );
        assert_eq!(
            check_source("a.rs", "fn f() {}\n"),
            ["a.rs: must start with a `//!` module doc"]
        );
        let bad = "//! d\n#[test]\n#[should_panic]\nfn t() {}\n#[ignore]\nfn u() {}\n#[ignore = \"needs a gpu\"]\nfn v() {}\n";
        assert_eq!(
            check_source("a.rs", bad),
            [
                "a.rs:3: #[should_panic] is banned; assert on the error value",
                "a.rs:5: #[ignore] needs a reason: #[ignore = \"why\"]"
            ]
        );
        let built = concat!(
            "//! d\nfn skills() -> PathBuf { PathBuf::from(env!(\"CARGO_",
            "MANIFEST_DIR\")) }\n"
        );
        assert_eq!(
            check_application_source("app.rs", built),
            [
                "app.rs:2: reads the build machine's checkout at run time; compile it in (include_str!)"
            ]
        );
        assert!(
            check_application_source(
                "app.rs",
                "//! d\nconst S: &str = include_str!(\"../s.md\");\n"
            )
            .is_empty()
        );
        let outside = format!("//! d\nconst F: &str = \"{}/fixtures\";\n", OUTSIDE[0]);
        assert_eq!(
            check_source("a.rs", &outside),
            ["a.rs:2: reaches outside the repository; a fresh clone has no such folder"]
        );
        let complete = "[package]\nname = \"x\"\ndescription = \"X\"\nlicense.workspace = true\n\
            rust-version.workspace = true\nreadme.workspace = true\nkeywords.workspace = true\n\
            categories.workspace = true\n\n[lints]\nworkspace = true\n";
        assert!(check_manifest("x", complete).is_empty());
        assert_eq!(
            check_manifest("x", &complete.replace("keywords.workspace = true\n", "")),
            ["crate x: Cargo.toml must declare `keywords`"]
        );
        assert_eq!(
            check_manifest("x", "[package]\nname = \"x\"\n").len(),
            1 + METADATA.len()
        );
        assert_eq!(check_length("R.md", "a\nb\n", 2), None);
        assert_eq!(
            check_length("R.md", "a\nb\nc\n", 2).as_deref(),
            Some("R.md has 3 lines, more than 2: move the detail into docs/")
        );
    }
}
