//! Dependency boundaries: the domain, the engine and evaluation stay free of I/O stacks, and
//! the shipped binary is built without test support.

use std::path::Path;
use std::process::Command;

/// Crates that must not depend on the banned families, through normal edges, transitively.
const GUARDED: &[&str] = &["forge-core", "forge-engine", "forge-eval", "forge-live"];

/// Banned crate-name prefixes, with the family each belongs to.
const BANNED: &[(&str, &str)] = &[
    ("sqlx", "database driver"),
    ("rusqlite", "database driver"),
    ("libsqlite3-sys", "database driver"),
    ("tokio-postgres", "database driver"),
    ("postgres", "database driver"),
    ("diesel", "database driver"),
    ("sea-orm", "database driver"),
    ("redis", "database driver"),
    ("reqwest", "HTTP client"),
    ("hyper", "HTTP client"),
    ("ureq", "HTTP client"),
    ("isahc", "HTTP client"),
    ("surf", "HTTP client"),
    ("opentelemetry", "OpenTelemetry"),
    ("tracing-opentelemetry", "OpenTelemetry"),
    ("async-graphql", "GraphQL"),
    ("juniper", "GraphQL"),
    ("axum", "HTTP server"),
];

/// The family of a banned crate name, if it is one.
pub(crate) fn banned_family(name: &str) -> Option<&'static str> {
    BANNED
        .iter()
        .find(|(prefix, _)| {
            name == *prefix
                || name.starts_with(&format!("{prefix}-"))
                || name.starts_with(&format!("{prefix}_"))
        })
        .map(|(_, family)| *family)
}

/// Crate names in a `cargo tree --prefix none --format {p}` listing.
pub(crate) fn names(listing: &str) -> Vec<&str> {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

/// Runs `cargo tree` for each guarded crate and reports every banned dependency.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut problems = Vec::new();
    for krate in GUARDED {
        let out = Command::new(&cargo)
            .current_dir(root)
            .args([
                "tree",
                "--quiet",
                "--offline",
                "-p",
                krate,
                "-e",
                "normal",
                "--prefix",
                "none",
                "--format",
                "{p}",
            ])
            .output();
        let out = match out {
            Ok(o) if o.status.success() => o,
            Ok(o) => {
                problems.push(format!(
                    "cargo tree -p {krate} failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
                continue;
            }
            Err(e) => {
                problems.push(format!("could not run cargo tree: {e}"));
                continue;
            }
        };
        let listing = String::from_utf8_lossy(&out.stdout);
        let all = names(&listing);
        if all.len() < 2 {
            problems.push(format!(
                "cargo tree -p {krate} listed nothing; the check would pass vacuously"
            ));
        }
        for name in all {
            if let Some(family) = banned_family(name) {
                problems.push(format!(
                    "{krate} depends on {name} ({family}); keep I/O stacks in adapter crates"
                ));
            }
        }
    }
    problems.extend(shipped_features(root, &cargo));
    problems.extend(otel_outside_its_adapter(root));
    problems.extend(applications_depended_on(root));
    problems.sort();
    problems.dedup();
    crate::verdict(problems)
}

/// Features of test support that the shipped `forge` binary must be built without.
const TEST_ONLY_FEATURES: &[(&str, &str)] = &[
    ("forge-store-postgres", "testing"),
    ("forge-otel", "memory"),
];

/// The one crate that may name `opentelemetry*` among its dependencies, of any kind.
const OTEL_ADAPTER: &str = "forge-otel";

/// The `opentelemetry*` dependencies a manifest declares (normal, dev or build; inline or as
/// `[dependencies.opentelemetry…]` tables).
pub(crate) fn otel_dependencies(manifest: &str) -> Vec<String> {
    declared(manifest)
        .into_iter()
        .filter(|d| banned_family(&d.key) == Some("OpenTelemetry"))
        .map(|d| d.key)
        .collect()
}

/// One dependency a manifest declares, in any dependency table.
pub(crate) struct Declared {
    /// Its key: the name it is known by in the crate.
    pub key: String,
    /// The package it renames (`package = "…"`), if it does.
    pub package: Option<String>,
    /// Its declaration's text (for a `[dependencies.NAME]` table, the header).
    pub line: String,
}

/// Every dependency `manifest` declares (normal, dev or build; inline, dotted, or as
/// `[dependencies.NAME]` tables, whose fields are read as the table's own lines).
pub(crate) fn declared(manifest: &str) -> Vec<Declared> {
    let mut in_deps = false;
    let mut found: Vec<Declared> = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if let Some(table) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let table = table.trim();
            in_deps = table.ends_with("dependencies");
            if let Some((section, name)) = table.rsplit_once('.')
                && section.ends_with("dependencies")
            {
                found.push(Declared {
                    key: name.trim_matches('"').to_owned(),
                    package: None,
                    line: line.to_owned(),
                });
            }
            continue;
        }
        if !in_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = line
            .split(['=', '.'])
            .next()
            .unwrap_or_default()
            .trim()
            .trim_matches('"');
        let package = line
            .split("package")
            .nth(1)
            .and_then(|rest| rest.split('"').nth(1))
            .map(str::to_owned);
        found.push(Declared {
            key: key.to_owned(),
            package,
            line: line.to_owned(),
        });
    }
    found
}

/// Every workspace crate but [`OTEL_ADAPTER`] declaring an `opentelemetry*` dependency.
fn otel_outside_its_adapter(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut manifests = vec![root.join("xtask/Cargo.toml")];
    let crates = match std::fs::read_dir(root.join("crates")) {
        Ok(dir) => dir,
        Err(e) => return vec![format!("could not list crates/: {e}")],
    };
    manifests.extend(crates.flatten().map(|e| e.path().join("Cargo.toml")));
    manifests.sort();
    let mut read = 0;
    for manifest in manifests {
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        read += 1;
        let krate = manifest
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if krate == OTEL_ADAPTER {
            continue;
        }
        for dep in otel_dependencies(&text) {
            problems.push(format!(
                "{krate} depends on {dep}; only {OTEL_ADAPTER} may know OpenTelemetry (use the \
                 core's telemetry port, or {OTEL_ADAPTER}'s in-memory views in tests)"
            ));
        }
    }
    if read < 5 {
        problems.push(
            "read fewer than 5 manifests; the OpenTelemetry check would pass vacuously".into(),
        );
    }
    problems
}

/// The package names of the applications under `examples/` (each its own workspace).
fn application_names(root: &Path) -> Vec<String> {
    crate::manifest_dirs(&root.join("examples"))
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("Cargo.toml")).ok())
        .filter_map(|m| {
            m.lines()
                .skip_while(|l| l.trim() != "[package]")
                .skip(1)
                .take_while(|l| !l.starts_with('['))
                .find_map(|l| {
                    let v = l.trim().strip_prefix("name")?.trim().strip_prefix('=')?;
                    Some(v.trim().trim_matches('"').to_owned())
                })
        })
        .collect()
}

/// What a manifest says that makes it depend on an application: a dependency named like one of
/// `apps`, or any path into `examples/`.
pub(crate) fn application_dependencies(manifest: &str, apps: &[String]) -> Vec<String> {
    let is_app = |name: &str| apps.iter().any(|a| a == name);
    declared(manifest)
        .into_iter()
        .filter_map(|d| {
            if is_app(&d.key) || d.package.as_deref().is_some_and(is_app) {
                Some(d.key)
            } else if d.line.contains("examples/") {
                Some(format!("{} (a path into examples/)", d.key))
            } else {
                None
            }
        })
        .collect()
}

/// Every workspace crate that depends on an application: the platform is reused by
/// applications, never the other way round.
fn applications_depended_on(root: &Path) -> Vec<String> {
    let apps = application_names(root);
    if apps.is_empty() {
        return vec!["no application under examples/; the check would pass vacuously".into()];
    }
    let mut problems = Vec::new();
    let mut manifests: Vec<_> = crate::crate_dirs(root)
        .into_iter()
        .map(|d| d.join("Cargo.toml"))
        .collect();
    manifests.push(root.join("Cargo.toml"));
    for manifest in manifests {
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let shown = manifest
            .strip_prefix(root)
            .unwrap_or(&manifest)
            .display()
            .to_string();
        for dep in application_dependencies(&text, &apps) {
            problems.push(format!(
                "{shown} depends on the application {dep}; no Forge crate may depend on an application"
            ));
        }
    }
    problems
}

/// Test-only features enabled in a `cargo tree -e normal,features --prefix none` listing.
pub(crate) fn test_only_features(listing: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in listing.lines() {
        for (krate, feature) in TEST_ONLY_FEATURES {
            if line.trim() == format!("{krate} feature \"{feature}\"") {
                found.push(format!(
                    "the shipped forge binary enables {krate}'s {feature:?} feature (test support)"
                ));
            }
        }
    }
    found
}

/// The release build of `forge-cli` (what ships) enables no test support.
fn shipped_features(root: &Path, cargo: &str) -> Vec<String> {
    let out = Command::new(cargo)
        .current_dir(root)
        .args([
            "tree",
            "--quiet",
            "--offline",
            "-p",
            "forge-cli",
            "-e",
            "normal,features",
            "--prefix",
            "none",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let listing = String::from_utf8_lossy(&o.stdout);
            if !listing.contains("forge-store-postgres feature") {
                return vec![
                    "cargo tree -p forge-cli listed no features; the check would pass vacuously"
                        .into(),
                ];
            }
            test_only_features(&listing)
        }
        Ok(o) => vec![format!(
            "cargo tree -p forge-cli failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )],
        Err(e) => vec![format!("could not run cargo tree: {e}")],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_engine_reach_no_driver_http_client_otel_or_graphql() {
        crate::assert_clean("dependency boundary violated", check(&crate::root()));
    }

    #[test]
    fn a_dependency_on_an_application_is_found_however_it_is_written() {
        let apps = vec!["forge-example-shareflow".to_owned()];
        let by_name =
            "[dependencies]\nforge-core.workspace = true\nforge-example-shareflow = \"0.0.0\"\n";
        assert_eq!(
            application_dependencies(by_name, &apps),
            ["forge-example-shareflow"]
        );
        let by_path = "[dev-dependencies]\nsf = { path = \"../../examples/shareflow\" }\n";
        assert_eq!(application_dependencies(by_path, &apps).len(), 1);
        let renamed =
            "[dependencies]\nsf = { version = \"0\", package = \"forge-example-shareflow\" }\n";
        assert_eq!(application_dependencies(renamed, &apps), ["sf"]);
        let table = "[dependencies.forge-example-shareflow]\nversion = \"0\"\n";
        assert_eq!(application_dependencies(table, &apps).len(), 1);
        let clean =
            "[package]\nname = \"forge-example-shareflow\"\n[dependencies]\nforge-core = \"0\"\n";
        assert!(application_dependencies(clean, &apps).is_empty());
        assert!(application_names(&crate::root()).contains(&"forge-example-shareflow".to_owned()));
    }

    #[test]
    fn a_test_only_feature_in_the_shipped_build_is_reported() {
        let listing = "forge-cli v0.0.0 (/x)\nforge-store-postgres feature \"default\"\nforge-store-postgres feature \"testing\"\n";
        assert_eq!(test_only_features(listing).len(), 1);
        assert!(test_only_features("forge-store-postgres feature \"default\"\n").is_empty());
    }

    #[test]
    fn an_opentelemetry_dependency_of_any_kind_is_found() {
        let manifest = "[package]\nname = \"x\"\n\n[dependencies]\nforge-core.workspace = true\nopentelemetry.workspace = true\n\n[dev-dependencies]\nopentelemetry_sdk = { version = \"0.33\" }\n\n[dependencies.opentelemetry-otlp]\nversion = \"0.33\"\n\n[features]\nopentelemetry = []\n";
        assert_eq!(
            otel_dependencies(manifest),
            ["opentelemetry", "opentelemetry_sdk", "opentelemetry-otlp"]
        );
        assert!(otel_dependencies("[dependencies]\nforge-otel.workspace = true\n").is_empty());
    }

    #[test]
    fn the_ban_list_recognises_each_family() {
        let listing = "forge-core v0.0.0 (/x)\nserde v1.0.0\nsqlx-postgres v0.9.0\nreqwest v0.13.0\nhyper-util v0.1.0\nopentelemetry_sdk v0.33.0\nasync-graphql-axum v7.0.0\nredis v1.8.0\nhyperlocal-lookalike v1\n";
        let found: Vec<(&str, &str)> = names(listing)
            .into_iter()
            .filter_map(|n| banned_family(n).map(|f| (n, f)))
            .collect();
        assert_eq!(
            found,
            [
                ("sqlx-postgres", "database driver"),
                ("reqwest", "HTTP client"),
                ("hyper-util", "HTTP client"),
                ("opentelemetry_sdk", "OpenTelemetry"),
                ("async-graphql-axum", "GraphQL"),
                ("redis", "database driver"),
            ]
        );
    }
}
