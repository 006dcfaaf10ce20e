//! `sbom`: what a release ships, as a CycloneDX 1.5 bill of materials and a license inventory.
//!
//! Read from `cargo metadata` (the host platform, `--locked`) and `Cargo.lock` (checksums):
//! every crate the workspace's shipped crates reach through normal and build dependencies —
//! dev-dependencies, `xtask` and `forge-bench` are not shipped. The output is sorted, so two
//! releases' files diff cleanly.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::{Value, json};

/// Workspace crates that are never shipped: their dependencies are not in the bill.
const NOT_SHIPPED: &[&str] = &["xtask", "forge-bench"];

/// Writes `forge.cdx.json` and `licenses.md` under `out`.
pub(crate) fn write(root: &Path, out: &Path) -> Result<(), Vec<String>> {
    let meta = metadata(root).map_err(|e| vec![e])?;
    let lock = std::fs::read_to_string(root.join("Cargo.lock"))
        .map_err(|e| vec![format!("Cargo.lock: {e}")])?;
    let bill = Bill::from_metadata(&meta, &checksums(&lock)).map_err(|e| vec![e])?;
    std::fs::create_dir_all(out).map_err(|e| vec![format!("{}: {e}", out.display())])?;
    let bom = serde_json::to_string_pretty(&bill.cyclonedx()).map_err(|e| vec![e.to_string()])?;
    for (name, body) in [("forge.cdx.json", bom), ("licenses.md", bill.inventory())] {
        let path = out.join(name);
        std::fs::write(&path, format!("{}\n", body.trim_end()))
            .map_err(|e| vec![format!("{}: {e}", path.display())])?;
        println!("wrote {}", path.display());
    }
    println!(
        "{} components, {} license expressions",
        bill.components.len(),
        bill.by_license().len()
    );
    Ok(())
}

/// `cargo metadata` for the host platform.
fn metadata(root: &Path) -> Result<Value, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let host = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .map_err(|e| format!("rustc -vV: {e}"))?;
    let host = String::from_utf8_lossy(&host.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .ok_or("rustc -vV named no host")?;
    let out = std::process::Command::new(cargo)
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(["--filter-platform", &host])
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata: {e}"))
}

/// `name@version` → SHA-256, from a `Cargo.lock`.
fn checksums(lock: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let (mut name, mut version) = (None, None);
    let value = |l: &str, key: &str| {
        l.strip_prefix(key)
            .and_then(|r| r.trim().strip_prefix('='))
            .map(|v| v.trim().trim_matches('"').to_owned())
    };
    for line in lock.lines() {
        if line.starts_with("[[package]]") {
            (name, version) = (None, None);
        } else if let Some(v) = value(line, "name") {
            name = Some(v);
        } else if let Some(v) = value(line, "version") {
            version = Some(v);
        } else if let (Some(sum), Some(n), Some(v)) = (value(line, "checksum"), &name, &version) {
            out.insert(format!("{n}@{v}"), sum);
        }
    }
    out
}

/// One shipped third-party crate.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Component {
    name: String,
    version: String,
    /// The SPDX expression the crate declares.
    license: String,
    source: String,
    checksum: Option<String>,
    /// The `bom-ref`s of what it depends on (shipped ones only).
    depends_on: BTreeSet<String>,
}

impl Component {
    fn purl(&self) -> String {
        format!("pkg:cargo/{}@{}", self.name, self.version)
    }
}

/// The shipped crates, Forge's own and third parties'.
#[derive(Debug)]
struct Bill {
    /// Forge's version (the workspace's).
    version: String,
    /// Forge's shipped crates, by name, with what each depends on.
    own: BTreeMap<String, BTreeSet<String>>,
    /// Third-party crates by `bom-ref`.
    components: BTreeMap<String, Component>,
}

impl Bill {
    fn from_metadata(meta: &Value, sums: &HashMap<String, String>) -> Result<Self, String> {
        let packages: HashMap<&str, &Value> = meta["packages"]
            .as_array()
            .ok_or("cargo metadata has no packages")?
            .iter()
            .filter_map(|p| Some((p["id"].as_str()?, p)))
            .collect();
        let workspace: BTreeSet<&str> = meta["workspace_members"]
            .as_array()
            .ok_or("cargo metadata has no workspace members")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        // Shipped edges: normal and build dependencies.
        let mut edges: HashMap<&str, Vec<&str>> = HashMap::new();
        for node in meta["resolve"]["nodes"]
            .as_array()
            .ok_or("no resolve graph")?
        {
            let Some(id) = node["id"].as_str() else {
                continue;
            };
            let deps = node["deps"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            edges.insert(
                id,
                deps.iter()
                    .filter(|d| {
                        d["dep_kinds"].as_array().is_some_and(|kinds| {
                            kinds.iter().any(|k| k["kind"].as_str() != Some("dev"))
                        })
                    })
                    .filter_map(|d| d["pkg"].as_str())
                    .collect(),
            );
        }
        let name_of = |id: &str| packages.get(id).and_then(|p| p["name"].as_str());
        let roots: Vec<&str> = workspace
            .iter()
            .copied()
            .filter(|id| name_of(id).is_some_and(|n| !NOT_SHIPPED.contains(&n)))
            .collect();
        let mut reached = BTreeSet::new();
        let mut stack = roots.clone();
        while let Some(id) = stack.pop() {
            if reached.insert(id) {
                stack.extend(edges.get(id).into_iter().flatten().copied());
            }
        }
        let reference = |id: &str| -> Option<String> {
            if workspace.contains(id) {
                return name_of(id).map(|n| format!("forge:{n}"));
            }
            let p = packages.get(id)?;
            Some(format!(
                "pkg:cargo/{}@{}",
                p["name"].as_str()?,
                p["version"].as_str()?
            ))
        };
        let depends = |id: &str| -> BTreeSet<String> {
            edges
                .get(id)
                .into_iter()
                .flatten()
                .filter_map(|d| reference(d))
                .collect()
        };
        let mut own = BTreeMap::new();
        let mut components = BTreeMap::new();
        let mut version = String::new();
        for id in reached {
            let p = packages
                .get(id)
                .ok_or_else(|| format!("{id} is not a package"))?;
            let name = p["name"].as_str().unwrap_or_default().to_owned();
            let v = p["version"].as_str().unwrap_or_default().to_owned();
            if workspace.contains(id) {
                version = v;
                own.insert(name, depends(id));
                continue;
            }
            let license = p["license"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{name} {v} declares no license expression"))?;
            let component = Component {
                checksum: sums.get(&format!("{name}@{v}")).cloned(),
                source: p["source"].as_str().unwrap_or("path").to_owned(),
                license,
                depends_on: depends(id),
                name,
                version: v,
            };
            components.insert(component.purl(), component);
        }
        Ok(Self {
            version,
            own,
            components,
        })
    }

    /// License expressions, normalised from Cargo's old `/` form, with the crates declaring each.
    fn by_license(&self) -> BTreeMap<String, Vec<&Component>> {
        let mut out: BTreeMap<String, Vec<&Component>> = BTreeMap::new();
        for c in self.components.values() {
            out.entry(spdx(&c.license)).or_default().push(c);
        }
        out
    }

    fn cyclonedx(&self) -> Value {
        let mut components: Vec<Value> = self
            .own
            .keys()
            .map(|name| {
                json!({
                    "type": if name == "forge-cli" { "application" } else { "library" },
                    "bom-ref": format!("forge:{name}"),
                    "name": name,
                    "version": self.version,
                    "licenses": [{ "expression": "Apache-2.0" }],
                })
            })
            .collect();
        components.extend(self.components.values().map(|c| {
            let mut v = json!({
                "type": "library",
                "bom-ref": c.purl(),
                "name": c.name,
                "version": c.version,
                "purl": c.purl(),
                "licenses": [{ "expression": spdx(&c.license) }],
            });
            if let Some(sum) = &c.checksum {
                v["hashes"] = json!([{ "alg": "SHA-256", "content": sum }]);
            }
            v
        }));
        let mut dependencies: Vec<Value> = self
            .own
            .iter()
            .map(|(name, deps)| json!({ "ref": format!("forge:{name}"), "dependsOn": deps }))
            .collect();
        dependencies.extend(
            self.components
                .values()
                .map(|c| json!({ "ref": c.purl(), "dependsOn": c.depends_on })),
        );
        json!({
            "bomFormat": "CycloneDX",
            "specVersion": "1.5",
            "version": 1,
            "metadata": {
                "component": {
                    "type": "application",
                    "bom-ref": "forge",
                    "name": "forge",
                    "version": self.version,
                    "licenses": [{ "expression": "Apache-2.0" }],
                },
                "tools": [{ "name": "cargo xtask sbom" }],
            },
            "components": components,
            "dependencies": dependencies,
        })
    }

    fn inventory(&self) -> String {
        let by = self.by_license();
        let mut out = format!(
            "# License inventory — Forge {}\n\n{} third-party crates shipped (normal and build \
             dependencies of the shipped crates, host platform), by declared license.\n\n\
             | license | crates | names |\n| --- | --- | --- |\n",
            self.version,
            self.components.len()
        );
        for (license, crates) in &by {
            let names: Vec<String> = crates
                .iter()
                .map(|c| format!("{} {}", c.name, c.version))
                .collect();
            out.push_str(&format!(
                "| {license} | {} | {} |\n",
                crates.len(),
                names.join(", ")
            ));
        }
        out
    }
}

/// Cargo's deprecated `A/B` form as SPDX `A OR B`.
fn spdx(expr: &str) -> String {
    if expr.contains('/') {
        expr.split('/')
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" OR ")
    } else {
        expr.to_owned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn package(id: &str, name: &str, license: Option<&str>) -> Value {
        json!({ "id": id, "name": name, "version": "1.0.0", "license": license,
                "source": "registry+https://github.com/rust-lang/crates.io-index" })
    }

    fn dep(pkg: &str, kind: Option<&str>) -> Value {
        json!({ "pkg": pkg, "dep_kinds": [{ "kind": kind, "target": null }] })
    }

    fn tree() -> Value {
        json!({
            "packages": [
                package("ws-app", "forge-cli", Some("Apache-2.0")),
                package("ws-bench", "forge-bench", Some("Apache-2.0")),
                package("normal", "normal", Some("MIT/Apache-2.0")),
                package("build", "build", Some("ISC")),
                package("dev", "dev", Some("MIT")),
                package("bench-only", "bench-only", Some("MIT")),
            ],
            "workspace_members": ["ws-app", "ws-bench"],
            "resolve": { "nodes": [
                { "id": "ws-app", "deps": [dep("normal", None), dep("dev", Some("dev"))] },
                { "id": "ws-bench", "deps": [dep("bench-only", None)] },
                { "id": "normal", "deps": [dep("build", Some("build"))] },
                { "id": "build", "deps": [] },
                { "id": "dev", "deps": [] },
                { "id": "bench-only", "deps": [] },
            ]},
        })
    }

    #[test]
    fn the_bill_holds_what_ships_and_nothing_else() {
        let sums = HashMap::from([("normal@1.0.0".to_owned(), "abc".to_owned())]);
        let bill = Bill::from_metadata(&tree(), &sums).unwrap();
        assert_eq!(
            bill.components.keys().collect::<Vec<_>>(),
            ["pkg:cargo/build@1.0.0", "pkg:cargo/normal@1.0.0"],
            "dev-only and unshipped crates' dependencies stay out"
        );
        let bom = bill.cyclonedx();
        let normal = &bom["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "normal")
            .unwrap();
        assert_eq!(normal["licenses"][0]["expression"], "MIT OR Apache-2.0");
        assert_eq!(normal["hashes"][0]["content"], "abc");
        let deps = bom["dependencies"].as_array().unwrap();
        let app = deps.iter().find(|d| d["ref"] == "forge:forge-cli").unwrap();
        assert_eq!(app["dependsOn"], json!(["pkg:cargo/normal@1.0.0"]));
        let inventory = bill.inventory();
        assert!(
            inventory.contains("| ISC | 1 | build 1.0.0 |"),
            "{inventory}"
        );
        assert!(
            inventory.contains("| MIT OR Apache-2.0 | 1 | normal 1.0.0 |"),
            "{inventory}"
        );
    }

    #[test]
    fn a_crate_without_a_license_expression_is_refused() {
        let mut meta = tree();
        meta["packages"][3]["license"] = Value::Null;
        let err = Bill::from_metadata(&meta, &HashMap::new()).unwrap_err();
        assert!(err.contains("build 1.0.0 declares no license"), "{err}");
    }

    #[test]
    fn checksums_are_read_from_the_lock_file() {
        let lock = "[[package]]\nname = \"a\"\nversion = \"1.2.3\"\nsource = \"registry+x\"\nchecksum = \"ff00\"\n\n[[package]]\nname = \"forge-core\"\nversion = \"0.0.0\"\n";
        let sums = checksums(lock);
        assert_eq!(sums.get("a@1.2.3").map(String::as_str), Some("ff00"));
        assert_eq!(sums.len(), 1);
    }

    #[test]
    fn the_tree_has_a_bill() {
        let meta = metadata(&crate::root()).unwrap();
        let lock = std::fs::read_to_string(crate::root().join("Cargo.lock")).unwrap();
        let bill = Bill::from_metadata(&meta, &checksums(&lock)).unwrap();
        assert!(bill.own.contains_key("forge-cli") && !bill.own.contains_key("xtask"));
        assert!(
            bill.components
                .keys()
                .any(|k| k.starts_with("pkg:cargo/tokio@"))
        );
        assert!(
            bill.components.values().all(|c| c.checksum.is_some()),
            "every registry crate has its checksum"
        );
    }
}
