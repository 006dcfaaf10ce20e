//! `release [VERSION] [--no-ci] [--allow-dirty]`: cuts a release from the change fragments, on
//! a committed tree.
//!
//! 1. Reads `changes/`: nothing to release without a fragment. The version is the next one the
//!    fragments call for (0.x: a `breaking` fragment bumps the minor version, anything else the
//!    patch; from 1.0: breaking → major, `added`/`changed` → minor, else patch); a `VERSION`
//!    given must be at least that.
//! 2. Runs every check: this task's own (tidy, deps, reachability, docs, API snapshots, client
//!    types, changelog), then `bash .ci/run` — formatting, lints, rustdoc, every test, cargo-deny,
//!    the packaged examples, the release gate, the performance check — unless `--no-ci`.
//! 3. Bumps `workspace.package.version`, the `forge-*` workspace dependencies and the examples'
//!    requirements, refreshes `Cargo.lock`, moves the fragments into `CHANGELOG.md` under the
//!    version and deletes them.
//! 4. Packages the crates and builds the examples against them at the new version, and writes
//!    the bill of materials, the license inventory and the `.crate` files to
//!    `target/release-artifacts/<version>/`.
//! 5. Gates the release on each dataset ([`GATES`]) against its committed trend, labelled
//!    `release <version>`, and leaves the outcome appended to that trend for the release commit
//!    — also with `--no-ci`, which skips `.ci/run` only. A failing gate stops the release; the
//!    only way past it is a person's override (`FORGE_GATE_OVERRIDE_ACTOR` and `…_REASON`),
//!    which the trend records as `overridden`.
//!
//! It commits and tags nothing: it prints the commands, after the diff has been read.

use std::path::Path;
use std::process::Command;

use crate::changes::{self, Kind};
use crate::package::{cargo, run as status, target_dir};

/// A `major.minor.patch` version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version(u64, u64, u64);

impl Version {
    pub(crate) fn parse(s: &str) -> Option<Version> {
        let mut parts = s.trim().split('.').map(str::parse::<u64>);
        let v = Version(
            parts.next()?.ok()?,
            parts.next()?.ok()?,
            parts.next()?.ok()?,
        );
        parts.next().is_none().then_some(v)
    }

    /// The smallest release after `self` that the kinds of change allow.
    pub(crate) fn next(self, kinds: &[Kind]) -> Version {
        let Version(major, minor, patch) = self;
        let breaking = kinds.contains(&Kind::Breaking);
        let feature = kinds
            .iter()
            .any(|k| matches!(k, Kind::Added | Kind::Changed));
        match (major, breaking, feature) {
            (0, true, _) => Version(0, minor + 1, 0),
            (0, false, _) => Version(0, minor, patch + 1),
            (_, true, _) => Version(major + 1, 0, 0),
            (_, false, true) => Version(major, minor + 1, 0),
            (_, false, false) => Version(major, minor, patch + 1),
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The version to release: `asked` if it is at least what the changes call for.
pub(crate) fn choose(
    current: Version,
    kinds: &[Kind],
    asked: Option<Version>,
) -> Result<Version, String> {
    let least = current.next(kinds);
    match asked {
        None => Ok(least),
        Some(v) if v >= least => Ok(v),
        Some(v) => Err(format!(
            "{v} is too small: the fragments call for at least {least} (from {current}{})",
            if kinds.contains(&Kind::Breaking) {
                ", with a breaking change"
            } else {
                ""
            }
        )),
    }
}

/// `manifest` with every `version = "<from>"` on the `[workspace.package]` version line and
/// the `forge-*` dependency lines (of the workspace table, or an example's) set to `to`.
pub(crate) fn bump_manifest(manifest: &str, from: &str, to: &str) -> String {
    let old = format!("version = \"{from}\"");
    let new = format!("version = \"{to}\"");
    let mut section = String::new();
    let mut out: Vec<String> = Vec::new();
    for line in manifest.lines() {
        if line.starts_with('[') {
            section = line.trim().to_owned();
        }
        let trimmed = line.trim_start();
        let package_version = section == "[workspace.package]" && trimmed.starts_with(&old);
        let forge_dep = section.ends_with("dependencies]") && trimmed.starts_with("forge-");
        if package_version || forge_dep && line.contains(&old) {
            out.push(line.replace(&old, &new));
        } else if forge_dep && trimmed.contains(&format!("= \"{from}\"")) {
            out.push(line.replace(&format!("= \"{from}\""), &format!("= \"{to}\"")));
        } else {
            out.push(line.to_owned());
        }
    }
    let mut text = out.join("\n");
    if manifest.ends_with('\n') {
        text.push('\n');
    }
    text
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Step 3 on the tree at `root`: versions bumped, changelog assembled, fragments deleted.
pub(crate) fn apply(root: &Path, from: &str, to: &str, date: &str) -> Result<(), String> {
    let fragments = changes::fragments(root).map_err(|p| p.join("; "))?;
    let manifest = root.join("Cargo.toml");
    write(&manifest, &bump_manifest(&read(&manifest)?, from, to))?;
    for example in crate::package::examples(root)
        .iter()
        .map(|d| d.join("Cargo.toml"))
    {
        write(&example, &bump_manifest(&read(&example)?, from, to))?;
    }
    let changelog = root.join("CHANGELOG.md");
    let heading = format!("## {to} — {date}");
    let text = changes::with_section(&read(&changelog)?, &heading, &changes::render(&fragments))?;
    write(&changelog, &text)?;
    for f in fragments {
        std::fs::remove_file(&f.path).map_err(|e| format!("{}: {e}", f.path.display()))?;
    }
    Ok(())
}

/// A dataset the release is gated on, with what its `forge gate` needs besides it.
pub(crate) struct Gate {
    /// The dataset file.
    pub(crate) dataset: &'static str,
    /// Its committed trend, which the release's outcome is appended to.
    pub(crate) trend: &'static str,
    /// More arguments (skills, thresholds, MCP servers).
    pub(crate) args: &'static [&'static str],
}

/// The datasets a release is gated on: `.ci/run` gates the same ones, against copies of their
/// trends.
pub(crate) const GATES: &[Gate] = &[
    Gate {
        dataset: "evals/core.toml",
        trend: "evals/trend.json",
        args: &[],
    },
    Gate {
        dataset: "examples/shareflow/evals/shareflow.toml",
        trend: "examples/shareflow/evals/trend.json",
        args: &[
            "--skills",
            "examples/shareflow/skills",
            "--thresholds",
            "examples/shareflow/evals/thresholds.json",
        ],
    },
    Gate {
        dataset: "examples/crm/evals/crm.toml",
        trend: "examples/crm/evals/trend.json",
        args: &[
            "--mcp",
            "examples/crm/mcp/crm.toml",
            "--skills",
            "examples/crm/skills",
            "--thresholds",
            "examples/crm/evals/thresholds.json",
        ],
    },
];

impl Gate {
    /// `forge gate` for this dataset at release `version`, appending to the committed trend
    /// (the CRM's MCP server is the `crm` binary the examples' build left in the target
    /// directory).
    fn command(&self, root: &Path, version: &str) -> Command {
        let mut cmd = Command::new(cargo());
        let bin = target_dir(root).join("debug");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![bin];
        paths.extend(std::env::split_paths(&path));
        cmd.current_dir(root)
            .env(
                "PATH",
                std::env::join_paths(paths).unwrap_or_else(|_| path.clone()),
            )
            .args(["run", "--locked", "-q", "-p", "forge-cli", "--", "gate"])
            .args(["--dataset", self.dataset, "--store", "memory"])
            .args(["--trend", self.trend])
            .args(["--label", &format!("release {version}")])
            .args(self.args);
        cmd
    }
}

/// The whole release (see the module documentation).
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), Vec<String>> {
    inner(root, args).map_err(|e| vec![e])
}

fn inner(root: &Path, args: &[String]) -> Result<(), String> {
    let no_ci = args.iter().any(|a| a == "--no-ci");
    let dirty = Command::new("git")
        .current_dir(root)
        .args(["status", "--porcelain"])
        .output()
        .map_err(|e| format!("git status: {e}"))?;
    if !dirty.stdout.is_empty() && !args.iter().any(|a| a == "--allow-dirty") {
        return Err(
            "the working tree has changes: a release is cut from a committed tree \
             (--allow-dirty to override)"
                .to_owned(),
        );
    }
    let asked = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(|a| Version::parse(a).ok_or_else(|| format!("`{a}` is not a version (x.y.z)")))
        .transpose()?;
    let manifest = read(&root.join("Cargo.toml"))?;
    let from = crate::package::workspace_version(&manifest).ok_or("no workspace version")?;
    let current = Version::parse(&from).ok_or_else(|| format!("`{from}` is not a version"))?;
    let fragments = changes::fragments(root).map_err(|p| p.join("; "))?;
    if fragments.is_empty() {
        return Err("nothing to release: changes/ holds no fragment".to_owned());
    }
    let kinds: Vec<Kind> = fragments.iter().map(|f| f.kind).collect();
    let to = choose(current, &kinds, asked)?;
    println!("release {from} → {to} ({} fragments)", fragments.len());

    crate::checks(root).map_err(|p| format!("checks failed:\n  {}", p.join("\n  ")))?;
    if no_ci {
        println!("--no-ci: .ci/run not run; run it before publishing");
    } else {
        status(
            Command::new("bash").arg(".ci/run").current_dir(root),
            ".ci/run",
        )?;
    }

    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .map_err(|e| format!("date: {e}"))?;
    let date = String::from_utf8_lossy(&date.stdout).trim().to_owned();
    apply(root, &from, &to.to_string(), &date)?;
    status(
        Command::new(cargo()).current_dir(root).args([
            "update",
            "--workspace",
            "--offline",
            "--quiet",
        ]),
        "cargo update --workspace",
    )?;
    crate::package::build_examples(root).map_err(|p| p.join("; "))?;
    for gate in GATES {
        status(
            &mut gate.command(root, &to.to_string()),
            &format!("the release gate of {}", gate.dataset),
        )?;
    }

    let target = target_dir(root);
    let out = target.join("release-artifacts").join(to.to_string());
    crate::sbom::write(root, &out).map_err(|p| p.join("; "))?;
    let crates = out.join("crates");
    std::fs::create_dir_all(&crates).map_err(|e| format!("{}: {e}", crates.display()))?;
    let packaged = target.join("package");
    for entry in std::fs::read_dir(&packaged)
        .map_err(|e| format!("{}: {e}", packaged.display()))?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(&format!("-{to}.crate")) {
            std::fs::copy(entry.path(), crates.join(&name)).map_err(|e| format!("{name}: {e}"))?;
        }
    }
    println!(
        "released {to} in the tree; artifacts in {}\nnext: review `git diff`, then\n  \
         git commit -am 'workspace: release {to}' && git tag v{to}\n  \
         cargo deny check advisories   # on a machine that can fetch the RustSec database",
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The held-out dodge: `--no-ci` skipped the gate. The gate is a step of its own, run
    /// whatever the flags, appending to the committed trends (never a copy) under the release's
    /// label; and every dataset `.ci/run` gates is gated here.
    #[test]
    fn every_release_gates_each_dataset_into_its_committed_trend() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
        let source = std::fs::read_to_string(root.join("xtask/src/release.rs")).unwrap();
        let body = &source[source.find("fn inner(").unwrap()..source.find("#[cfg(test)]").unwrap()];
        let gating = body.find("for gate in GATES").expect("the release gates");
        assert!(
            !body[gating..].contains("no_ci"),
            "the gate does not depend on --no-ci"
        );
        for gate in GATES {
            assert!(ci.contains(gate.dataset), "{} is gated in CI", gate.dataset);
            assert!(root.join(gate.trend).is_file(), "{}", gate.trend);
            let cmd = gate.command(&root, "1.2.3");
            let args: Vec<String> = cmd
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let after = |flag: &str| {
                let at = args.iter().position(|a| a == flag).unwrap();
                args[at + 1].clone()
            };
            assert_eq!(after("--trend"), gate.trend);
            assert_eq!(after("--label"), "release 1.2.3");
            assert!(!args.iter().any(|a| a == "--no-record"));
        }
    }

    #[test]
    fn the_version_follows_the_kinds_of_change() {
        let v = Version::parse("0.3.1").unwrap();
        assert_eq!(v.next(&[Kind::Fixed, Kind::Added]), Version(0, 3, 2));
        assert_eq!(v.next(&[Kind::Fixed, Kind::Breaking]), Version(0, 4, 0));
        let one = Version::parse("1.2.3").unwrap();
        assert_eq!(one.next(&[Kind::Breaking]), Version(2, 0, 0));
        assert_eq!(one.next(&[Kind::Added]), Version(1, 3, 0));
        assert_eq!(one.next(&[Kind::Fixed, Kind::Security]), Version(1, 2, 4));
        assert!(choose(v, &[Kind::Breaking], Version::parse("0.3.2")).is_err());
        assert_eq!(
            choose(v, &[Kind::Fixed], Version::parse("0.4.0")),
            Ok(Version(0, 4, 0))
        );
        assert_eq!(Version::parse("1.2"), None);
        assert_eq!(Version::parse("1.2.3.4"), None);
    }

    #[test]
    fn the_workspace_version_and_forge_requirements_are_bumped_and_nothing_else() {
        let manifest = "[workspace.package]\nversion = \"0.1.0\"\n\n[workspace.dependencies]\n\
                        forge-core = { path = \"crates/forge-core\", version = \"0.1.0\" }\n\
                        other = { version = \"0.1.0\" }\n";
        let bumped = bump_manifest(manifest, "0.1.0", "0.2.0");
        assert_eq!(
            bumped,
            "[workspace.package]\nversion = \"0.2.0\"\n\n[workspace.dependencies]\n\
             forge-core = { path = \"crates/forge-core\", version = \"0.2.0\" }\n\
             other = { version = \"0.1.0\" }\n"
        );
        let example = "[package]\nversion = \"0.0.0\"\n\n[dependencies]\nforge-core = \"0.1.0\"\n\
                       anyhow = \"1\"\n";
        assert_eq!(
            bump_manifest(example, "0.1.0", "0.2.0"),
            "[package]\nversion = \"0.0.0\"\n\n[dependencies]\nforge-core = \"0.2.0\"\n\
             anyhow = \"1\"\n"
        );
    }

    #[test]
    fn a_release_moves_the_fragments_under_the_version() {
        let root = std::env::temp_dir().join(format!("forge-xtask-release-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("changes")).unwrap();
        std::fs::create_dir_all(root.join("examples/app")).unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            "[workspace.package]\nversion = \"0.1.0\"\n\n[workspace.dependencies]\n\
             forge-core = { path = \"crates/forge-core\", version = \"0.1.0\" }\n",
        )
        .unwrap();
        std::fs::write(
            root.join("examples/app/Cargo.toml"),
            "[dependencies]\nforge-core = \"0.1.0\"\n",
        )
        .unwrap();
        std::fs::write(
            root.join("CHANGELOG.md"),
            "# Changelog\n\n## Unreleased\n\n### Added\n\n- x\n\n## 0.1.0 — 2026-01-01\n\n- first\n",
        )
        .unwrap();
        std::fs::write(root.join("changes/x.added.md"), "- x\n").unwrap();
        std::fs::write(root.join("changes/README.md"), "how\n").unwrap();
        apply(&root, "0.1.0", "0.1.1", "2026-12-02").unwrap();
        let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let example = std::fs::read_to_string(root.join("examples/app/Cargo.toml")).unwrap();
        let left: Vec<_> = std::fs::read_dir(root.join("changes"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            changelog,
            "# Changelog\n\n## Unreleased\n\n## 0.1.1 — 2026-12-02\n\n### Added\n\n- x\n\n\
             ## 0.1.0 — 2026-01-01\n\n- first\n"
        );
        assert!(manifest.contains("version = \"0.1.1\"\n") && !manifest.contains("0.1.0"));
        assert_eq!(example, "[dependencies]\nforge-core = \"0.1.1\"\n");
        assert_eq!(left, ["README.md"], "fragments are deleted, the guide kept");
    }
}
