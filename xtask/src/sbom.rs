//! `sbom`: what a release ships, as a CycloneDX 1.5 bill of materials and a license inventory.
//!
//! The bill is `cargo-cyclonedx`'s, for the `forge` binary (`forge-cli`: every crate it reaches
//! through normal and build dependencies on the host platform, with checksums, licenses and the
//! dependency graph). Its timestamp is the commit's (`SOURCE_DATE_EPOCH`) and the checkout's
//! absolute path is cut out of its references, so two releases' files diff cleanly. The license
//! inventory is derived from the bill here, and a shipped crate that declares no license fails
//! the command.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The `cargo-cyclonedx` release the bill is written with (CI installs it when missing).
const TOOL: &str = "cargo-cyclonedx@0.5.9";

/// The shipped binary's package, and the name of the bill `cargo-cyclonedx` writes beside it.
const SHIPPED: (&str, &str) = ("crates/forge-cli", "forge_bin.cdx.json");

/// Writes `forge.cdx.json` and `licenses.md` under `out`.
pub(crate) fn write(root: &Path, out: &Path) -> Result<(), Vec<String>> {
    let bom = generate(root).map_err(|e| vec![e])?;
    let inventory = inventory(&bom)?;
    std::fs::create_dir_all(out).map_err(|e| vec![format!("{}: {e}", out.display())])?;
    let bom_text = serde_json::to_string_pretty(&bom).map_err(|e| vec![e.to_string()])?;
    for (name, body) in [("forge.cdx.json", bom_text), ("licenses.md", inventory)] {
        let path = out.join(name);
        std::fs::write(&path, format!("{}\n", body.trim_end()))
            .map_err(|e| vec![format!("{}: {e}", path.display())])?;
        println!("wrote {}", path.display());
    }
    println!(
        "{} components, {} license expressions",
        third_party(&bom).len(),
        by_license(&bom).len()
    );
    Ok(())
}

/// Runs `cargo-cyclonedx` and returns the `forge` binary's bill, relative to the checkout.
fn generate(root: &Path) -> Result<Value, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let epoch = source_date_epoch(root);
    // It writes a bill beside every workspace member's manifest; all but the binary's are
    // removed, whatever happens.
    let run = Command::new(&cargo)
        .current_dir(root)
        .args(["cyclonedx", "--manifest-path"])
        .arg(root.join(SHIPPED.0).join("Cargo.toml"))
        .args(["--format", "json", "--spec-version", "1.5"])
        .args(["--describe", "binaries", "--quiet"])
        .env("SOURCE_DATE_EPOCH", epoch)
        .output();
    let written = written_bills(root);
    let shipped = root.join(SHIPPED.0).join(SHIPPED.1);
    let text = std::fs::read_to_string(&shipped);
    for bill in &written {
        let _ = std::fs::remove_file(bill);
    }
    let run = run.map_err(|e| format!("{cargo} cyclonedx: {e}"))?;
    if !run.status.success() {
        return Err(format!(
            "cargo cyclonedx failed ({}): install it with `cargo install --locked {TOOL}`\n{}",
            run.status,
            String::from_utf8_lossy(&run.stderr).trim()
        ));
    }
    let text = text.map_err(|e| format!("{}: {e}", shipped.display()))?;
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let prefix = format!("file://{}", root.display());
    let text = text.replace(&prefix, "file://.");
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", shipped.display()))
}

/// The bills `cargo-cyclonedx` leaves beside the workspace's manifests (the root, its folders,
/// and the crates under `crates/`).
fn written_bills(root: &Path) -> Vec<PathBuf> {
    let dirs_in = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut dirs = vec![root.to_path_buf()];
    dirs.extend(dirs_in(root));
    dirs.extend(dirs_in(&root.join("crates")));
    let mut out = BTreeSet::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        out.extend(entries.flatten().map(|e| e.path()).filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("_bin.cdx.json"))
        }));
    }
    out.into_iter().collect()
}

/// The commit's time, so the bill's timestamp is the same however often it is written.
fn source_date_epoch(root: &Path) -> String {
    if let Ok(epoch) = std::env::var("SOURCE_DATE_EPOCH") {
        return epoch;
    }
    Command::new("git")
        .current_dir(root)
        .args(["log", "-1", "--format=%ct"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "0".to_owned())
}

/// Third-party components: those from a registry (Forge's own crates are path components).
fn third_party(bom: &Value) -> Vec<&Value> {
    bom["components"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter(|c| {
                    c["bom-ref"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("registry+"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A component's declared license expression.
fn license(component: &Value) -> Option<String> {
    let licenses = component["licenses"].as_array()?;
    let parts: Vec<&str> = licenses
        .iter()
        .filter_map(|l| {
            l["expression"]
                .as_str()
                .or_else(|| l["license"]["id"].as_str())
                .or_else(|| l["license"]["name"].as_str())
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(" AND "))
}

/// `license` → `name version` of the third-party crates declaring it.
fn by_license(bom: &Value) -> BTreeMap<String, Vec<String>> {
    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in third_party(bom) {
        let name = format!(
            "{} {}",
            c["name"].as_str().unwrap_or("?"),
            c["version"].as_str().unwrap_or("?")
        );
        by.entry(license(c).unwrap_or_default())
            .or_default()
            .push(name);
    }
    for names in by.values_mut() {
        names.sort();
    }
    by
}

/// The inventory by license; a shipped crate without one is an error.
fn inventory(bom: &Value) -> Result<String, Vec<String>> {
    let by = by_license(bom);
    if let Some(unlicensed) = by.get("") {
        return Err(unlicensed
            .iter()
            .map(|n| format!("{n} declares no license"))
            .collect());
    }
    let version = bom["metadata"]["component"]["version"]
        .as_str()
        .unwrap_or("?");
    let mut out = format!(
        "# License inventory — Forge {version}\n\n{} third-party crates shipped in the `forge` \
         binary (normal and build dependencies, host platform), by declared license.\n\n\
         | license | crates | names |\n| --- | --- | --- |\n",
        third_party(bom).len()
    );
    for (license, names) in &by {
        out.push_str(&format!(
            "| {license} | {} | {} |\n",
            names.len(),
            names.join(", ")
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn component(name: &str, license: Option<&str>) -> Value {
        let mut c = json!({
            "bom-ref": format!("registry+https://github.com/rust-lang/crates.io-index#{name}@1.0.0"),
            "name": name, "version": "1.0.0",
        });
        if let Some(l) = license {
            c["licenses"] = json!([{ "expression": l }]);
        }
        c
    }

    fn bom(components: Vec<Value>) -> Value {
        json!({
            "metadata": { "component": { "name": "forge", "version": "0.3.0" } },
            "components": components,
        })
    }

    #[test]
    fn the_inventory_lists_third_party_crates_by_license() {
        let own = json!({ "bom-ref": "path+file://./crates/forge-core#0.3.0", "name": "forge-core",
                          "version": "0.3.0", "licenses": [{ "expression": "Apache-2.0" }] });
        let bill = bom(vec![
            component("b", Some("MIT OR Apache-2.0")),
            component("a", Some("MIT OR Apache-2.0")),
            component("c", Some("ISC")),
            own,
        ]);
        let inventory = inventory(&bill).unwrap();
        assert!(inventory.contains("Forge 0.3.0"), "{inventory}");
        assert!(inventory.contains("3 third-party crates"), "{inventory}");
        assert!(inventory.contains("| ISC | 1 | c 1.0.0 |"), "{inventory}");
        assert!(
            inventory.contains("| MIT OR Apache-2.0 | 2 | a 1.0.0, b 1.0.0 |"),
            "{inventory}"
        );
        assert!(!inventory.contains("forge-core"), "{inventory}");
    }

    #[test]
    fn a_crate_without_a_license_is_refused() {
        let bill = bom(vec![
            component("a", Some("MIT")),
            component("nolicense", None),
        ]);
        let err = inventory(&bill).unwrap_err();
        assert_eq!(err, ["nolicense 1.0.0 declares no license"]);
    }

    #[test]
    fn only_the_bills_cargo_cyclonedx_writes_are_collected() {
        let dir = std::env::temp_dir().join(format!("forge-sbom-{}", std::process::id()));
        let member = dir.join("crates/forge-cli");
        std::fs::create_dir_all(&member).unwrap();
        std::fs::create_dir_all(dir.join("xtask")).unwrap();
        for f in [
            "crates/forge-cli/forge_bin.cdx.json",
            "xtask/xtask_bin.cdx.json",
        ] {
            std::fs::write(dir.join(f), "{}").unwrap();
        }
        std::fs::write(member.join("Cargo.toml"), "").unwrap();
        let found = written_bills(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            found,
            [
                dir.join("crates/forge-cli/forge_bin.cdx.json"),
                dir.join("xtask/xtask_bin.cdx.json")
            ]
        );
    }
}
