//! `changelog`: change records written as fragments with each change, rendered into
//! `CHANGELOG.md`.
//!
//! A change adds a file `changes/<slug>.<kind>.md` — kind `breaking`, `security`, `added`,
//! `changed` or `fixed` — holding Markdown list items. `cargo xtask changelog` renders every
//! fragment into the changelog's `## Unreleased` section (grouped by kind, fragments in name
//! order); a test fails while the section differs from the fragments. `cargo xtask release`
//! turns the section into the new version's and deletes the fragments. The kinds decide the
//! version bump, and a `breaking` fragment is what the API check accepts as the record of a
//! removal.

use std::path::{Path, PathBuf};

/// A fragment's kind, in the order the changelog lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Breaking,
    Security,
    Added,
    Changed,
    Fixed,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Breaking,
        Kind::Security,
        Kind::Added,
        Kind::Changed,
        Kind::Fixed,
    ];

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.suffix() == s)
    }

    fn suffix(self) -> &'static str {
        match self {
            Kind::Breaking => "breaking",
            Kind::Security => "security",
            Kind::Added => "added",
            Kind::Changed => "changed",
            Kind::Fixed => "fixed",
        }
    }

    fn heading(self) -> &'static str {
        match self {
            Kind::Breaking => "### Breaking",
            Kind::Security => "### Security",
            Kind::Added => "### Added",
            Kind::Changed => "### Changed",
            Kind::Fixed => "### Fixed",
        }
    }
}

/// One change record.
#[derive(Debug)]
pub(crate) struct Fragment {
    pub(crate) path: PathBuf,
    pub(crate) kind: Kind,
    body: String,
}

/// The heading of the section the fragments render into.
const UNRELEASED: &str = "## Unreleased";

/// Every fragment under `changes/`, in name order; a misnamed or malformed one is an error.
pub(crate) fn fragments(root: &Path) -> Result<Vec<Fragment>, Vec<String>> {
    let dir = root.join("changes");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.sort();
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if file == "README.md" {
            continue;
        }
        let kind = file
            .strip_suffix(".md")
            .and_then(|stem| stem.rsplit_once('.'))
            .filter(|(slug, _)| !slug.is_empty())
            .and_then(|(_, kind)| Kind::parse(kind));
        let Some(kind) = kind else {
            problems.push(format!(
                "changes/{file}: name it <slug>.<breaking|security|added|changed|fixed>.md"
            ));
            continue;
        };
        let body = match std::fs::read_to_string(&path) {
            Ok(b) => b.trim_end().to_owned(),
            Err(e) => {
                problems.push(format!("changes/{file}: {e}"));
                continue;
            }
        };
        if !body.starts_with("- ")
            || body
                .lines()
                .any(|l| !(l.is_empty() || l.starts_with("- ") || l.starts_with("  ")))
        {
            problems.push(format!(
                "changes/{file}: a fragment is Markdown list items (`- ` lines, continuations \
                 indented two spaces)"
            ));
            continue;
        }
        out.push(Fragment { path, kind, body });
    }
    crate::verdict(problems).map(|()| out)
}

/// Whether a fragment records a breaking change.
pub(crate) fn breaking_recorded(root: &Path) -> bool {
    fragments(root).is_ok_and(|f| f.iter().any(|f| f.kind == Kind::Breaking))
}

/// The fragments grouped by kind under their headings (no section heading).
pub(crate) fn render(fragments: &[Fragment]) -> String {
    let mut out = String::new();
    for kind in Kind::ALL {
        let bodies: Vec<&str> = fragments
            .iter()
            .filter(|f| f.kind == kind)
            .map(|f| f.body.as_str())
            .collect();
        if bodies.is_empty() {
            continue;
        }
        out.push_str(kind.heading());
        out.push_str("\n\n");
        out.push_str(&bodies.join("\n"));
        out.push_str("\n\n");
    }
    out
}

/// The changelog split around its `## Unreleased` section: before it (heading excluded), the
/// section's body, and from the next `## ` heading on.
fn split(changelog: &str) -> Option<(&str, &str, &str)> {
    let start = changelog.find(&format!("\n{UNRELEASED}\n"))? + 1;
    let body_start = start + UNRELEASED.len() + 1;
    let end = changelog[body_start..]
        .find("\n## ")
        .map_or(changelog.len(), |i| body_start + i + 1);
    Some((
        &changelog[..start],
        &changelog[body_start..end],
        &changelog[end..],
    ))
}

/// The changelog with its unreleased section replaced by `body` under `heading`, and an empty
/// `## Unreleased` above it when `heading` is a version's.
pub(crate) fn with_section(changelog: &str, heading: &str, body: &str) -> Result<String, String> {
    let (before, _, after) =
        split(changelog).ok_or("CHANGELOG.md has no `## Unreleased` section")?;
    let mut out = before.to_owned();
    if heading != UNRELEASED {
        out.push_str(UNRELEASED);
        out.push_str("\n\n");
    }
    out.push_str(heading);
    out.push_str("\n\n");
    out.push_str(body);
    let mut out = out.trim_end().to_owned();
    out.push('\n');
    if !after.is_empty() {
        out.push('\n');
        out.push_str(after);
    }
    Ok(out)
}

/// The changelog as it should read: its unreleased section rendered from the fragments.
fn expected(root: &Path) -> Result<(String, String), Vec<String>> {
    let fragments = fragments(root)?;
    let path = root.join("CHANGELOG.md");
    let now = std::fs::read_to_string(&path).map_err(|e| vec![format!("CHANGELOG.md: {e}")])?;
    let want = with_section(&now, UNRELEASED, &render(&fragments)).map_err(|e| vec![e])?;
    Ok((now, want))
}

/// The check: every fragment is well formed and the changelog's unreleased section is theirs.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let (now, want) = expected(root)?;
    if now != want {
        return Err(vec![
            "CHANGELOG.md's Unreleased section is not the fragments in changes/: run \
             `cargo xtask changelog`"
                .to_owned(),
        ]);
    }
    Ok(())
}

/// Rewrites the changelog's unreleased section from the fragments.
pub(crate) fn write(root: &Path) -> Result<(), Vec<String>> {
    let (now, want) = expected(root)?;
    if now != want {
        std::fs::write(root.join("CHANGELOG.md"), want)
            .map_err(|e| vec![format!("CHANGELOG.md: {e}")])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn fragment(kind: Kind, body: &str) -> Fragment {
        Fragment {
            path: PathBuf::new(),
            kind,
            body: body.to_owned(),
        }
    }

    #[test]
    fn the_changelog_is_its_fragments() {
        crate::assert_clean("changelog", check(&crate::root()));
    }

    #[test]
    fn fragments_render_by_kind_into_the_unreleased_section_only() {
        let body = render(&[
            fragment(Kind::Fixed, "- a fix"),
            fragment(Kind::Added, "- one\n  continued"),
            fragment(Kind::Breaking, "- gone"),
            fragment(Kind::Added, "- two"),
        ]);
        assert_eq!(
            body,
            "### Breaking\n\n- gone\n\n### Added\n\n- one\n  continued\n- two\n\n### Fixed\n\n- a fix\n\n"
        );
        let log = "# Changelog\n\nIntro.\n\n## Unreleased\n\n### Added\n\n- old\n\n## 0.1.0 — 2026-01-01\n\n### Fixed\n\n- kept\n";
        let rendered = with_section(log, UNRELEASED, &body).unwrap();
        assert!(rendered.starts_with("# Changelog\n\nIntro.\n\n## Unreleased\n\n### Breaking"));
        assert!(!rendered.contains("- old"));
        assert!(rendered.ends_with("- a fix\n\n## 0.1.0 — 2026-01-01\n\n### Fixed\n\n- kept\n"));
        let released = with_section(log, "## 0.2.0 — 2026-02-02", &body).unwrap();
        assert!(
            released.contains("## Unreleased\n\n## 0.2.0 — 2026-02-02\n\n### Breaking"),
            "{released}"
        );
        assert!(with_section("# Changelog\n", UNRELEASED, "").is_err());
    }

    #[test]
    fn a_misnamed_or_malformed_fragment_is_refused() {
        let root = std::env::temp_dir().join(format!("forge-xtask-changes-{}", std::process::id()));
        let dir = root.join("changes");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.added.md"), "- fine\n  and more\n").unwrap();
        std::fs::write(dir.join("README.md"), "How to write one.\n").unwrap();
        assert_eq!(fragments(&root).unwrap().len(), 1);
        assert!(!breaking_recorded(&root));
        std::fs::write(dir.join("b.removed.md"), "- x\n").unwrap();
        std::fs::write(dir.join("c.fixed.md"), "prose, not a list\n").unwrap();
        let problems = fragments(&root).unwrap_err();
        std::fs::remove_file(dir.join("b.removed.md")).unwrap();
        std::fs::remove_file(dir.join("c.fixed.md")).unwrap();
        std::fs::write(dir.join("d.breaking.md"), "- Run.status is gone\n").unwrap();
        let breaking = breaking_recorded(&root);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("b.removed.md") && problems[1].contains("c.fixed.md"));
        assert!(breaking);
    }
}
