//! Skills: packaged instructions and resources an agent loads when it needs them.
//!
//! A skill is a directory holding `SKILL.md` — a front matter of `name`, `description` and
//! optionally `version`, then the instructions — plus text resources, and optionally executable
//! scripts under `scripts/`. An agent names the skills it may use; the model sees their names and
//! descriptions in the built-in [`LOAD_SKILL`] tool and loads one (or one of its resources) by
//! calling it. Discovery and loading are authorized like tools (a `Forge::Skill` resource).
//!
//! **Scripts never run unless the deployment enables them** ([`SkillLibrary::enable_scripts`]).
//! Until then the [`RUN_SKILL_SCRIPT`] tool is neither offered nor callable; a loaded skill lists
//! its scripts as disabled. Enabled, a script runs as a child process without a shell, in its
//! skill's directory, with a cleared environment (only `PATH`), its input as JSON on stdin, the
//! run's tool timeout, and its stdout (JSON, or text) capped at the tool-output limit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use forge_core::ports::tool::ToolSpec;
use serde_json::Value;

use forge_core::part::ToolCallPart;
use forge_core::ports::policy::{
    Authorizer, PolicyAction, PolicyDecision, PolicyRequest, PolicyResource,
};
use forge_core::scope::Scope;

use crate::error::EngineError;
use crate::plan::Prepared;

mod tools;

pub(crate) use tools::{LoadSkill, RunSkillScript};

/// The built-in tool that loads a skill's instructions or one of its resources.
pub const LOAD_SKILL: &str = "load_skill";
/// The built-in tool that runs a skill's script; exists only where scripts are enabled.
pub const RUN_SKILL_SCRIPT: &str = forge_core::agent::SKILL_SCRIPT_TOOL;

/// Largest resource or `SKILL.md` accepted when loading, in bytes.
pub const MAX_SKILL_FILE_BYTES: u64 = 256 * 1024;

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name, `[A-Za-z0-9_.-]{1,64}`.
    pub name: String,
    /// Its version (default `1`), returned with every load.
    pub version: String,
    /// What it is for; shown to the model.
    pub description: String,
    /// The instructions (the body of `SKILL.md`).
    pub instructions: String,
    /// Text resources by path relative to the skill's directory.
    pub resources: BTreeMap<String, String>,
    /// Scripts by path relative to the skill's directory (`scripts/...`), as files on disk.
    pub scripts: BTreeMap<String, PathBuf>,
    /// The skill's directory, where its scripts run.
    pub dir: PathBuf,
}

/// The skills a deployment offers.
#[derive(Debug, Clone, Default)]
pub struct SkillLibrary {
    skills: BTreeMap<String, Skill>,
    scripts_enabled: bool,
}

fn invalid(path: &Path, reason: impl std::fmt::Display) -> EngineError {
    EngineError::InvalidSkill {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// What a skill's front matter says (YAML; keys Forge does not use, such as `license` or
/// `metadata`, are allowed and ignored).
#[derive(Debug, Default, serde::Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    version: Option<Scalar>,
}

/// A scalar written as text or as a number (`version: 3` and `version: "3"` alike).
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Integer(i64),
    Number(f64),
}

impl Scalar {
    fn text(self) -> String {
        match self {
            Scalar::Text(t) => t,
            Scalar::Integer(n) => n.to_string(),
            Scalar::Number(n) => n.to_string(),
        }
    }
}

/// Splits `SKILL.md` into its front matter (YAML between `---` lines) and body.
fn front_matter(path: &Path, text: &str) -> Result<(FrontMatter, String), EngineError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(|| invalid(path, "must start with a '---' front matter"))?;
    let end = rest
        .find("\n---")
        .ok_or_else(|| invalid(path, "front matter is not closed by '---'"))?;
    let yaml = &rest[..end];
    let fields = if yaml.trim().is_empty() {
        FrontMatter::default()
    } else {
        serde_saphyr::from_str(yaml)
            .map_err(|e| invalid(path, format!("front matter is not valid YAML: {e}")))?
    };
    let body = rest[end + 4..].trim_start_matches(['-', '\r', '\n']);
    Ok((fields, body.to_owned()))
}

fn read_text(path: &Path) -> Result<String, EngineError> {
    let meta = std::fs::metadata(path).map_err(|e| invalid(path, e))?;
    if meta.len() > MAX_SKILL_FILE_BYTES {
        return Err(invalid(
            path,
            format!(
                "is {} bytes; skill files are limited to {MAX_SKILL_FILE_BYTES}",
                meta.len()
            ),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| invalid(path, e))?;
    String::from_utf8(bytes).map_err(|_| invalid(path, "is not UTF-8 text"))
}

/// The entries of `dir`, by path.
fn sorted_entries(dir: &Path) -> Result<Vec<std::fs::DirEntry>, EngineError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| invalid(dir, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(dir, e))?;
    entries.sort_by_key(std::fs::DirEntry::path);
    Ok(entries)
}

/// Every regular file under `dir`, as (path relative to `root`, full path), sorted.
fn files(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<(), EngineError> {
    for entry in sorted_entries(dir)? {
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| invalid(&path, e))?;
        if kind.is_dir() {
            files(root, &path, out)?;
        } else if kind.is_file() {
            let rel = path
                .strip_prefix(root)
                .map_err(|e| invalid(&path, e))?
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, path));
        }
        // Symbolic links are skipped: a skill cannot reach outside its directory.
    }
    Ok(())
}

impl Skill {
    /// A skill from its `SKILL.md` text alone — one compiled into an application
    /// (`include_str!`), so the binary reads nothing from the machine it was built on. It has
    /// no resources and no scripts; `origin` names it in errors.
    pub fn from_manifest(origin: &str, text: &str) -> Result<Self, EngineError> {
        let path = Path::new(origin);
        let (fields, instructions) = front_matter(path, text)?;
        let name = fields
            .name
            .ok_or_else(|| invalid(path, "front matter has no name"))?;
        ToolSpec::validate_name(&name).map_err(|e| invalid(path, e))?;
        let description = fields
            .description
            .ok_or_else(|| invalid(path, "front matter has no description"))?;
        Ok(Self {
            name,
            version: fields.version.map_or_else(|| "1".into(), Scalar::text),
            description,
            instructions,
            resources: BTreeMap::new(),
            scripts: BTreeMap::new(),
            dir: PathBuf::new(),
        })
    }

    /// Reads a skill from its directory.
    pub fn load(dir: &Path) -> Result<Self, EngineError> {
        let manifest = dir.join("SKILL.md");
        let (fields, instructions) = front_matter(&manifest, &read_text(&manifest)?)?;
        let name = fields
            .name
            .ok_or_else(|| invalid(&manifest, "front matter has no name"))?;
        ToolSpec::validate_name(&name).map_err(|e| invalid(&manifest, e))?;
        let description = fields
            .description
            .ok_or_else(|| invalid(&manifest, "front matter has no description"))?;
        let mut all = Vec::new();
        files(dir, dir, &mut all)?;
        let mut resources = BTreeMap::new();
        let mut scripts = BTreeMap::new();
        for (rel, path) in all {
            if rel == "SKILL.md" {
                continue;
            }
            if rel.starts_with("scripts/") {
                scripts.insert(rel, path);
            } else {
                resources.insert(rel, read_text(&path)?);
            }
        }
        Ok(Self {
            name,
            version: fields.version.map_or_else(|| "1".into(), Scalar::text),
            description,
            instructions,
            resources,
            scripts,
            dir: dir.to_owned(),
        })
    }
}

impl SkillLibrary {
    /// An empty library.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads every subdirectory of `dir` holding a `SKILL.md`.
    pub fn load_dir(dir: &Path) -> Result<Self, EngineError> {
        let mut library = Self::new();
        for entry in sorted_entries(dir)? {
            let path = entry.path();
            if path.join("SKILL.md").is_file() {
                library.insert(Skill::load(&path)?)?;
            }
        }
        Ok(library)
    }

    /// Adds a skill; refuses a second skill of the same name.
    pub fn insert(&mut self, skill: Skill) -> Result<(), EngineError> {
        if self.skills.contains_key(&skill.name) {
            return Err(invalid(
                &skill.dir,
                format!("skill {} exists twice", skill.name),
            ));
        }
        self.skills.insert(skill.name.clone(), skill);
        Ok(())
    }

    /// Lets skills' scripts run. Off unless a deployment calls this.
    pub fn enable_scripts(mut self) -> Self {
        self.scripts_enabled = true;
        self
    }

    /// Every skill, by name.
    pub fn all(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// Whether scripts may run.
    pub fn scripts_enabled(&self) -> bool {
        self.scripts_enabled
    }

    /// A skill by name.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// Whether the library holds a skill of this name.
    pub fn contains(&self, name: &str) -> bool {
        self.skills.contains_key(name)
    }

    /// How many skills it holds.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }
}

/// What a skill built-in's input names: the skill, and the part of the input policies see.
fn skill_name(call: &ToolCallPart) -> Option<&str> {
    let key = if call.tool_name == LOAD_SKILL {
        "name"
    } else if call.tool_name == RUN_SKILL_SCRIPT {
        "skill"
    } else {
        return None;
    };
    call.input.get(key).and_then(Value::as_str)
}

/// For a call of a skill built-in: the denial when `scope` may not use the skill it names, or
/// it is not among the `visible` ones (asked only for a skill call; a hidden skill is refused
/// like one that does not exist); `None` otherwise.
pub(crate) fn gate<'s>(
    visible: impl FnOnce() -> Vec<&'s Skill>,
    authorizer: &dyn Authorizer,
    scope: &Scope,
    call: &ToolCallPart,
) -> Option<Prepared> {
    let name = skill_name(call)?;
    let visible = visible();
    let denied = |message: String, reason: String| {
        Some(Prepared::Denied {
            call: call.clone(),
            message,
            reason,
        })
    };
    let Some(skill) = visible.iter().find(|s| s.name == name) else {
        return denied(
            format!("there is no skill named {name:?} available to this run"),
            "skill not discoverable by this scope".into(),
        );
    };
    let decision = authorizer.decide(&PolicyRequest {
        scope,
        action: PolicyAction::Execute,
        resource: PolicyResource::Skill {
            name: &skill.name,
            version: &skill.version,
        },
        input: Some(&call.input),
    });
    match decision {
        PolicyDecision::Allow => None,
        PolicyDecision::Deny { reason } => {
            denied(format!("using skill {name:?} is not permitted"), reason)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compiled_in_manifest_is_the_skill_its_directory_holds() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/skills/refunds");
        let text = std::fs::read_to_string(dir.join("SKILL.md")).expect("the example skill");
        let loaded = Skill::load(&dir).expect("loads");
        let compiled = Skill::from_manifest("refunds/SKILL.md", &text).expect("parses");
        assert_eq!(
            (
                &compiled.name,
                &compiled.version,
                &compiled.description,
                &compiled.instructions
            ),
            (
                &loaded.name,
                &loaded.version,
                &loaded.description,
                &loaded.instructions
            )
        );
        assert!(compiled.resources.is_empty() && compiled.scripts.is_empty());
        let err = Skill::from_manifest("nameless/SKILL.md", "---\ndescription: x\n---\nBody\n")
            .expect_err("no name");
        assert!(err.to_string().contains("nameless/SKILL.md"), "{err}");
    }

    #[test]
    fn front_matter_and_body_are_split() {
        let (f, body) = front_matter(
            Path::new("SKILL.md"),
            "---\nname: refunds\ndescription: \"How to refund\"\nversion: 3\n---\n# Steps\n1. Check.\n",
        )
        .unwrap();
        assert_eq!(f.name.as_deref(), Some("refunds"));
        assert_eq!(f.description.as_deref(), Some("How to refund"));
        assert_eq!(f.version.map(Scalar::text).as_deref(), Some("3"));
        assert_eq!(body, "# Steps\n1. Check.\n");
        let e = front_matter(Path::new("SKILL.md"), "# no front matter").unwrap_err();
        assert!(e.to_string().contains("front matter"), "{e}");
        let e = front_matter(Path::new("SKILL.md"), "---\nname: [refunds\n---\n").unwrap_err();
        assert!(e.to_string().contains("not valid YAML"), "{e}");
    }

    proptest::proptest! {
        /// Any Unicode as the file, and as the body after a valid front matter: never a panic
        /// (the cuts are at ASCII `---` lines), and the body comes back whole.
        #[test]
        fn any_unicode_splits_without_a_panic_and_keeps_the_body(
            text in forge_core::text::strategy::unicode(400),
            body in forge_core::text::strategy::unicode_runs(400),
        ) {
            let _ = front_matter(Path::new("SKILL.md"), &text);
            let _ = front_matter(Path::new("SKILL.md"), &format!("---\n{text}\n---\n"));
            let body = body.trim_start_matches(['-', '\r', '\n']);
            let file = format!("---\nname: n\ndescription: d\n---\n{body}");
            let (f, got) = front_matter(Path::new("SKILL.md"), &file).unwrap();
            proptest::prop_assert_eq!(f.name.as_deref(), Some("n"));
            proptest::prop_assert_eq!(got, body);
        }
    }

    #[test]
    fn front_matter_takes_multi_line_and_quoted_values_and_ignores_other_keys() {
        let text = "---\n\
            name: refunds\n\
            description: >\n  How to refund an order:\n  check the receipt, then refund.\n\
            version: '2.1'\n\
            license: 'Apache-2.0'\n\
            metadata:\n  owner: \"payments: team\"\n\
            ---\nBody.\n";
        let (f, body) = front_matter(Path::new("SKILL.md"), text).unwrap();
        assert_eq!(
            f.description.as_deref(),
            Some("How to refund an order: check the receipt, then refund.\n")
        );
        assert_eq!(f.version.map(Scalar::text).as_deref(), Some("2.1"));
        assert_eq!(body, "Body.\n");
        let (f, _) = front_matter(
            Path::new("SKILL.md"),
            "---\nname: \"it's\"\ndescription: 'Say \"no\": politely'\n---\n",
        )
        .unwrap();
        assert_eq!(f.name.as_deref(), Some("it's"));
        assert_eq!(f.description.as_deref(), Some("Say \"no\": politely"));
    }
}
