//! `package-examples`: the examples built and run against the packaged crates, as an adopter
//! would get them, never against the workspace's paths.
//!
//! `cargo package` writes a `.crate` of every shipped crate (what a registry would serve: only
//! the files the package includes, its manifest normalized to version requirements). Each is
//! unpacked under the target directory, and every example under `examples/*/` that is a crate
//! (its own workspace, depending on `forge-*` by version) is copied beside them, linted (clippy,
//! warnings denied) and built with a `[patch.crates-io]` that points those versions at the
//! unpacked sources; an example with a `tests/` directory (an application, a server) has its
//! tests run there, any other is run to its end. A file the package leaves out, an item the
//! example uses that went private, or a signature that changed fails it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Workspace crates that are not shipped, so not packaged.
const NOT_PACKAGED: &[&str] = &["xtask", "forge-bench"];

pub(crate) fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Runs `cmd`, failing with its name when it does not succeed (its output goes to the terminal).
pub(crate) fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

/// The workspace version, from `workspace.package.version` in the root manifest.
pub(crate) fn workspace_version(manifest: &str) -> Option<String> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| {
            let value = l.trim().strip_prefix("version")?.trim().strip_prefix('=')?;
            Some(value.trim().trim_matches('"').to_owned())
        })
}

/// The shipped crates' names.
fn shipped(root: &Path) -> Vec<String> {
    crate::crate_dirs(root)
        .iter()
        .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| !NOT_PACKAGED.contains(&n.as_str()))
        .collect()
}

/// The `[patch.crates-io]` table pointing each packaged crate at its unpacked sources.
fn patch_table(unpacked: &[(String, PathBuf)]) -> String {
    let mut out = String::from("[patch.crates-io]\n");
    for (name, dir) in unpacked {
        let _ = writeln!(out, "{name} = {{ path = {:?} }}", dir.display().to_string());
    }
    out
}

/// The example crates: directories under `examples/` with a `Cargo.toml`.
pub(crate) fn examples(root: &Path) -> Vec<PathBuf> {
    crate::manifest_dirs(&root.join("examples"))
}

/// Copies `from` into `to` recursively, leaving out `target/` directories and `.cargo/` (an
/// example's configuration for building inside the repository: its patches name the workspace's
/// paths, which the packaged build must not see).
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let entries = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if path.is_dir() {
            if entry.file_name() != "target" && entry.file_name() != ".cargo" {
                copy_tree(&path, &dest)?;
            }
        } else {
            std::fs::copy(&path, &dest).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Packages the shipped crates, then builds and runs every example against the packages.
pub(crate) fn build_examples(root: &Path) -> Result<(), Vec<String>> {
    inner(root).map_err(|e| vec![e])
}

fn inner(root: &Path) -> Result<(), String> {
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).map_err(|e| format!("Cargo.toml: {e}"))?;
    let version = workspace_version(&manifest).ok_or("Cargo.toml has no workspace version")?;
    let target = target_dir(root);
    let mut package = Command::new(cargo());
    package.current_dir(root).args(["package", "--workspace"]);
    for name in NOT_PACKAGED {
        package.args(["--exclude", name]);
    }
    // No verification build (the examples are the build), no lock file in the packages (the
    // example's lock decides, as an adopter's would), the working tree as it is.
    package.args([
        "--no-verify",
        "--exclude-lockfile",
        "--allow-dirty",
        "--no-metadata",
        "--quiet",
    ]);
    run(&mut package, "cargo package")?;

    let unpack_root = target.join("packaged");
    if unpack_root.exists() {
        std::fs::remove_dir_all(&unpack_root)
            .map_err(|e| format!("{}: {e}", unpack_root.display()))?;
    }
    std::fs::create_dir_all(&unpack_root).map_err(|e| format!("{}: {e}", unpack_root.display()))?;
    let mut unpacked = Vec::new();
    for name in shipped(root) {
        let file = target
            .join("package")
            .join(format!("{name}-{version}.crate"));
        if !file.is_file() {
            return Err(format!("cargo package wrote no {}", file.display()));
        }
        run(
            // `--touch`: the `.crate` stores one fixed time for every file, so with the archive's
            // times cargo would see an unpacked source as unchanged since the last run's and
            // reuse that run's build of it.
            Command::new("tar")
                .arg("--touch")
                .arg("-xzf")
                .arg(&file)
                .arg("-C")
                .arg(&unpack_root),
            &format!("unpacking {}", file.display()),
        )?;
        unpacked.push((name.clone(), unpack_root.join(format!("{name}-{version}"))));
    }
    let patch = unpack_root.join("patch.toml");
    std::fs::write(&patch, patch_table(&unpacked))
        .map_err(|e| format!("{}: {e}", patch.display()))?;
    println!("packaged {} crates at {version}", unpacked.len());

    let list = examples(root);
    if list.is_empty() {
        return Err("no example crate under examples/".to_owned());
    }
    for example in list {
        let name = example
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let scratch = target.join("packaged-examples").join(&name);
        if scratch.exists() {
            std::fs::remove_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        }
        copy_tree(&example, &scratch)?;
        // The workspace's lock as the starting point: the example resolves to the versions the
        // workspace was tested with.
        std::fs::copy(root.join("Cargo.lock"), scratch.join("Cargo.lock"))
            .map_err(|e| format!("Cargo.lock: {e}"))?;
        println!("example {name}: lint, build, run and test against the packaged crates");
        run(
            Command::new(cargo())
                .current_dir(&scratch)
                .args(["clippy", "--quiet", "--all-targets", "--config"])
                .arg(&patch)
                .args(["--", "-D", "warnings"]),
            &format!("example {name}'s lints"),
        )?;
        // An example without tests is a program that runs to its end; one with tests (an
        // application, a server) is run by its own suites (end-to-end, rollout), here too: the
        // examples are outside the workspace, so `cargo test --workspace` never sees them.
        if !scratch.join("tests").is_dir() {
            run(
                Command::new(cargo())
                    .current_dir(&scratch)
                    .arg("run")
                    .arg("--quiet")
                    .arg("--config")
                    .arg(&patch),
                &format!("example {name}"),
            )?;
        } else {
            run(
                Command::new(cargo())
                    .current_dir(&scratch)
                    .arg("test")
                    .arg("--quiet")
                    .arg("--config")
                    .arg(&patch),
                &format!("example {name}'s tests"),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_workspace_version_is_read_from_its_own_table() {
        let manifest = "[package]\nversion = \"9.9.9\"\n\n[workspace.package]\nedition = \"2024\"\n\
                        version = \"0.3.1\"\n\n[workspace.dependencies]\nx = { version = \"1\" }\n";
        assert_eq!(workspace_version(manifest).as_deref(), Some("0.3.1"));
        assert_eq!(workspace_version("[package]\nversion = \"1\"\n"), None);
        let ours = std::fs::read_to_string(crate::root().join("Cargo.toml")).unwrap();
        assert!(workspace_version(&ours).is_some());
    }

    #[test]
    fn every_packaged_crate_is_patched_and_every_example_is_its_own_workspace() {
        let table = patch_table(&[(
            "forge-core".to_owned(),
            PathBuf::from("/t/forge-core-0.1.0"),
        )]);
        assert_eq!(
            table,
            "[patch.crates-io]\nforge-core = { path = \"/t/forge-core-0.1.0\" }\n"
        );
        let root = crate::root();
        assert!(shipped(&root).contains(&"forge-engine".to_owned()));
        assert!(!shipped(&root).iter().any(|n| n == "xtask"));
        let list = examples(&root);
        assert!(!list.is_empty(), "no example crate");
        for example in list {
            let manifest = std::fs::read_to_string(example.join("Cargo.toml")).unwrap();
            assert!(
                manifest.contains("\n[workspace]"),
                "{}: an example is its own workspace",
                example.display()
            );
            assert!(
                !manifest.contains("path ="),
                "{}: an example depends on Forge by version, never by path",
                example.display()
            );
        }
    }
}
