//! `docs`: every relative link in the guides (`docs/*.md`) and the top-level Markdown files
//! names a file or directory that exists, and every `#anchor` a heading of its target (GitHub's
//! slugs). Links to other sites are not fetched: this machine has no network, and a check that
//! passes when offline would say nothing.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The Markdown files checked: the top level's and the guides'.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in [root.to_path_buf(), root.join("docs")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_file() && path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The check over the tree at `root`.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if !root.join("docs").join("README.md").is_file() {
        problems.push("docs/README.md (the guides' index) is missing".to_owned());
    }
    for file in markdown_files(root) {
        problems.extend(check_file(root, &file));
    }
    crate::verdict(problems)
}

/// The broken links of one Markdown file, each as `path:line: why`.
fn check_file(root: &Path, file: &Path) -> Vec<String> {
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let Ok(text) = std::fs::read_to_string(file) else {
        return vec![format!("{shown}: unreadable")];
    };
    let dir = file.parent().unwrap_or(root);
    let mut problems = Vec::new();
    for (line, target) in links(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !resolved.exists() {
            problems.push(format!("{shown}:{line}: {target} names nothing"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if resolved.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let headings = std::fs::read_to_string(&resolved)
            .map(|t| slugs(&t))
            .unwrap_or_default();
        if !headings.contains(anchor) {
            problems.push(format!(
                "{shown}:{line}: {target}: no heading with the anchor #{anchor}"
            ));
        }
    }
    problems
}

/// The targets of inline links `[text](target)` outside code, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let prose = without_code_spans(line);
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            // `[text](target "title")`: the target is the first word.
            let target = target.split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                out.push((n + 1, target.to_owned()));
            }
            rest = &after[end..];
        }
    }
    out
}

/// `line` with the contents of its `code spans` removed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces
/// as hyphens, and `-1`, `-2`… on repeats.
fn slugs(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let base: String = title
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                '-' | '_' => Some(c),
                c if c.is_alphanumeric() => Some(c.to_lowercase().next().unwrap_or(c)),
                _ => None,
            })
            .collect();
        let mut slug = base.clone();
        let mut n = 0;
        while seen.contains(&slug) {
            n += 1;
            slug = format!("{base}-{n}");
        }
        seen.insert(slug);
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_link_in_the_docs_resolves() {
        crate::assert_clean("broken documentation links", check(&crate::root()));
    }

    #[test]
    fn slugs_follow_github() {
        let s = slugs("# Forge\n## Using `forge run`\n## The release gate\n## Notes\n## Notes\n");
        for slug in [
            "forge",
            "using-forge-run",
            "the-release-gate",
            "notes",
            "notes-1",
        ] {
            assert!(s.contains(slug), "{slug} in {s:?}");
        }
    }

    #[test]
    fn a_broken_file_link_and_a_broken_anchor_are_each_reported() {
        let root = std::env::temp_dir().join(format!("xtask-docs-{}", std::process::id()));
        let docs = root.join("docs");
        std::fs::create_dir_all(&docs).expect("a temporary directory");
        std::fs::write(root.join("README.md"), "# Forge\n## Model providers\n").expect("write");
        std::fs::write(
            docs.join("README.md"),
            "See [providers](../README.md#model-providers), [gone](missing.md), \
             [bad anchor](../README.md#model-provider), [web](https://example.com), \
             `[not a link](nowhere.md)`.\n```\n[in code](nowhere.md)\n```\n",
        )
        .expect("write");
        let problems = check(&root).expect_err("two broken links");
        std::fs::remove_dir_all(&root).ok();
        assert_eq!(
            problems,
            [
                "docs/README.md:1: missing.md names nothing",
                "docs/README.md:1: ../README.md#model-provider: no heading with the anchor #model-provider",
            ]
        );
    }
}
