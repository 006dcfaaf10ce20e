//! `api`: a committed snapshot of each library crate's public surface (`api/<crate>.txt`), so
//! a change to it is a reviewed diff rather than an accident.
//!
//! The surface is read with `syn` from every file under the crate's `src/` (test modules
//! skipped): items declared `pub`, with their signatures — functions, struct fields, enum
//! variants, trait methods, constants, type aliases, re-exports — and the trait impls of public
//! types. An item of a private module is listed too: the snapshot errs towards showing more.
//!
//! The committed wire schemas (GraphQL, the event and stream JSON Schemas) have a snapshot too,
//! `api/schemas.txt`, read by [`crate::wire_api`]: their fields, arguments, kinds and values.
//!
//! `cargo xtask api` rewrites the snapshots. It refuses when a line would disappear (a removal
//! or a changed signature: a breaking change under the README's version policy), or an addition
//! that breaks code all the same would appear — a required method of an existing trait, a
//! variant of an existing enum that is not `#[non_exhaustive]`, a public field of an existing
//! struct built by literal, a required GraphQL argument or input field — unless a `breaking`
//! fragment in `changes/` records it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use quote::ToTokens;

/// Library crates whose surface is tracked: every crate with a `src/lib.rs`.
fn libraries(root: &Path) -> Vec<PathBuf> {
    crate::crate_dirs(root)
        .into_iter()
        .filter(|d| d.join("src").join("lib.rs").is_file())
        .collect()
}

fn snapshot_path(root: &Path, krate: &Path) -> PathBuf {
    let name = krate.file_name().map(|n| n.to_string_lossy().into_owned());
    root.join("api")
        .join(format!("{}.txt", name.unwrap_or_default()))
}

/// The public surface of the crate at `dir`, one line an item, sorted.
fn surface(dir: &Path) -> Result<BTreeSet<String>, String> {
    let src = dir.join("src");
    let mut out = BTreeSet::new();
    for file in crate::rust_files(&src) {
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let module = module_path(&src, &file);
        items(&module, &parsed.items, &mut out);
    }
    Ok(out)
}

/// `src/ports/model.rs` → `ports::model`; `lib.rs` and `mod.rs` name their directory.
fn module_path(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "lib" || l == "mod" || l == "main")
    {
        parts.pop();
    }
    if parts.is_empty() {
        "crate".to_owned()
    } else {
        format!("crate::{}", parts.join("::"))
    }
}

fn is_pub(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

/// `#[test]` or exactly `#[cfg(test)]`: a feature such as `cfg(feature = "testing")` is API.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

fn tokens(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string()
}

/// A signature with its parameters' names replaced by `_`: renaming one breaks no caller.
fn signature(sig: &syn::Signature) -> String {
    let mut sig = sig.clone();
    for input in sig.inputs.iter_mut() {
        if let syn::FnArg::Typed(arg) = input {
            arg.attrs.clear();
            *arg.pat = syn::parse_quote!(_);
        }
    }
    tokens(&sig)
}

fn items(module: &str, list: &[syn::Item], out: &mut BTreeSet<String>) {
    for item in list {
        match item {
            syn::Item::Fn(f) if is_pub(&f.vis) && !is_test(&f.attrs) => {
                out.insert(format!("{module}: {}", signature(&f.sig)));
            }
            syn::Item::Struct(s) if is_pub(&s.vis) => {
                let name = format!("{module}::{}{}", s.ident, tokens(&s.generics));
                out.insert(format!("struct {name}"));
                // A struct whose every field is public can be built by literal: a new public
                // field breaks that code.
                if !non_exhaustive(&s.attrs) && s.fields.iter().all(|f| is_pub(&f.vis)) {
                    out.insert(format!("struct {name} is built by literal"));
                }
                for (i, field) in s.fields.iter().enumerate() {
                    if is_pub(&field.vis) {
                        let label = field
                            .ident
                            .as_ref()
                            .map_or_else(|| i.to_string(), ToString::to_string);
                        out.insert(format!(
                            "struct {name} field {label}: {}",
                            tokens(&field.ty)
                        ));
                    }
                }
            }
            syn::Item::Enum(e) if is_pub(&e.vis) => {
                let name = format!("{module}::{}{}", e.ident, tokens(&e.generics));
                out.insert(format!("enum {name}"));
                if non_exhaustive(&e.attrs) {
                    out.insert(format!("enum {name} is non_exhaustive"));
                }
                for v in &e.variants {
                    out.insert(format!("enum {name} variant {}", tokens(&strip_attrs(v))));
                }
            }
            syn::Item::Trait(t) if is_pub(&t.vis) => {
                let name = format!("{module}::{}{}", t.ident, tokens(&t.generics));
                out.insert(format!("trait {name}"));
                for entry in &t.items {
                    if let syn::TraitItem::Fn(f) = entry {
                        let default = if f.default.is_some() {
                            " (provided)"
                        } else {
                            ""
                        };
                        out.insert(format!("trait {name} {}{default}", signature(&f.sig)));
                    }
                }
            }
            syn::Item::Const(c) if is_pub(&c.vis) => {
                out.insert(format!("const {module}::{}: {}", c.ident, tokens(&c.ty)));
            }
            syn::Item::Static(s) if is_pub(&s.vis) => {
                out.insert(format!("static {module}::{}: {}", s.ident, tokens(&s.ty)));
            }
            syn::Item::Type(t) if is_pub(&t.vis) => {
                out.insert(format!(
                    "type {module}::{}{} = {}",
                    t.ident,
                    tokens(&t.generics),
                    tokens(&t.ty)
                ));
            }
            syn::Item::Use(u) if is_pub(&u.vis) => {
                out.insert(format!("{module}: pub use {}", tokens(&u.tree)));
            }
            syn::Item::Mod(m) if !is_test(&m.attrs) => {
                let inner = format!("{module}::{}", m.ident);
                if is_pub(&m.vis) {
                    out.insert(format!("mod {inner}"));
                }
                if let Some((_, body)) = &m.content {
                    items(&inner, body, out);
                }
            }
            syn::Item::Impl(i) if !is_test(&i.attrs) => {
                let ty = tokens(&i.self_ty);
                match &i.trait_ {
                    Some((_, path, _)) => {
                        out.insert(format!("{module}: impl {} for {ty}", tokens(path)));
                    }
                    None => {
                        for entry in &i.items {
                            if let syn::ImplItem::Fn(f) = entry
                                && is_pub(&f.vis)
                            {
                                out.insert(format!("{module}: impl {ty} {}", signature(&f.sig)));
                            }
                        }
                    }
                }
            }
            syn::Item::Macro(m) if m.ident.is_some() => {
                let exported = m.attrs.iter().any(|a| a.path().is_ident("macro_export"));
                if exported && let Some(name) = &m.ident {
                    out.insert(format!("macro {name}!"));
                }
            }
            _ => {}
        }
    }
}

fn non_exhaustive(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("non_exhaustive"))
}

/// The added lines of a library's surface that break code using it although nothing went: a
/// required method of an existing trait (its implementations no longer compile), a variant of an
/// existing exhaustive enum (its `match`es), a public field of an existing struct built by
/// literal (its literals).
fn rust_breaking_additions<'a>(then: &BTreeSet<String>, new: &[&'a String]) -> Vec<&'a String> {
    let existed = |header: &str, rest: &str, line: &str| {
        line.strip_prefix(header)
            .is_some_and(|after| after.starts_with(rest))
    };
    new.iter()
        .copied()
        .filter(|line| {
            then.iter().any(|h| {
                (h.starts_with("trait ")
                    && !h.contains(" fn ")
                    && existed(h, " ", line)
                    && line.contains(" fn ")
                    && !line.ends_with(" (provided)"))
                    || (h.starts_with("enum ")
                        && !h.contains(" variant ")
                        && !h.ends_with(" is non_exhaustive")
                        && existed(h, " variant ", line)
                        && !then.contains(&format!("{h} is non_exhaustive")))
                    || (h.ends_with(" is built by literal")
                        && existed(h.trim_end_matches(" is built by literal"), " field ", line))
            })
        })
        .collect()
}

/// A variant without its attributes (doc comments are not API).
fn strip_attrs(v: &syn::Variant) -> syn::Variant {
    let mut v = v.clone();
    v.attrs.clear();
    for f in v.fields.iter_mut() {
        f.attrs.clear();
    }
    v
}

/// Each library's surface against its snapshot.
struct Comparison {
    /// Every differing line, `-` gone and `+` new, naming its snapshot.
    problems: Vec<String>,
    /// The lines that went, and the added lines that break clients anyway.
    removed: Vec<String>,
    /// Each snapshot's path with the surface read from the code.
    surfaces: Vec<(PathBuf, BTreeSet<String>)>,
}

fn compare(root: &Path) -> Result<Comparison, String> {
    let mut problems = Vec::new();
    let mut removed = Vec::new();
    let mut surfaces = Vec::new();
    let mut tracked: Vec<(PathBuf, BTreeSet<String>, bool)> = Vec::new();
    for krate in libraries(root) {
        tracked.push((snapshot_path(root, &krate), surface(&krate)?, false));
    }
    tracked.push((
        root.join("api").join("schemas.txt"),
        crate::wire_api::surface(root)?,
        true,
    ));
    for (path, now, wire) in tracked {
        let then: BTreeSet<String> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        let shown = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let gone: Vec<&String> = then.difference(&now).collect();
        let new: Vec<&String> = now.difference(&then).collect();
        for line in &gone {
            problems.push(format!("{shown}: - {line}"));
            removed.push(format!("{shown}: {line}"));
        }
        for line in &new {
            problems.push(format!("{shown}: + {line}"));
        }
        if wire {
            for line in crate::wire_api::breaking_additions(&then, new) {
                removed.push(format!("{shown}: + {line}"));
            }
        } else {
            for line in rust_breaking_additions(&then, &new) {
                removed.push(format!("{shown}: + {line}"));
            }
        }
        surfaces.push((path, now));
    }
    Ok(Comparison {
        problems,
        removed,
        surfaces,
    })
}

/// The check: every snapshot equals the code.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let mut problems = compare(root).map_err(|e| vec![e])?.problems;
    if !problems.is_empty() {
        problems.push(
            "the public API changed: review the lines above and run `cargo xtask api`".to_owned(),
        );
    }
    crate::verdict(problems)
}

/// Rewrites the snapshots; refuses a removal the changelog does not record as breaking.
pub(crate) fn write(root: &Path) -> Result<(), Vec<String>> {
    let comparison = compare(root).map_err(|e| vec![e])?;
    if !comparison.removed.is_empty() && !crate::changes::breaking_recorded(root) {
        let mut problems = comparison.removed;
        problems.push(
            "these public items or schema fields were removed or changed (or became required): \
             a breaking change, which needs a `changes/<slug>.breaking.md` fragment saying what \
             users must do (and a minor bump at 0.x)"
                .to_owned(),
        );
        return Err(problems);
    }
    std::fs::create_dir_all(root.join("api")).map_err(|e| vec![format!("api/: {e}")])?;
    for (path, lines) in comparison.surfaces {
        let lines: Vec<String> = lines.into_iter().collect();
        std::fs::write(&path, format!("{}\n", lines.join("\n")))
            .map_err(|e| vec![format!("{}: {e}", path.display())])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn surface_of(src: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        items("crate", &syn::parse_file(src).unwrap().items, &mut out);
        out
    }

    /// The held-out gap: additions that break clients passed as harmless.
    #[test]
    fn additions_that_break_clients_are_caught() {
        let before = surface_of(
            "pub trait T { fn a(&self); }\npub enum E { A }\n#[non_exhaustive] pub enum N { A }\n\
             pub struct L { pub a: u8 }\npub struct P { pub a: u8, b: u8 }",
        );
        let after = surface_of(
            "pub trait T { fn a(&self); fn b(&self); fn c(&self) {} }\npub enum E { A, B }\n\
             #[non_exhaustive] pub enum N { A, B }\npub struct L { pub a: u8, pub z: u8 }\n\
             pub struct P { pub a: u8, b: u8, pub z: u8 }\npub trait New { fn x(&self); }",
        );
        let new: Vec<&String> = after.difference(&before).collect();
        let breaking: Vec<&str> = rust_breaking_additions(&before, &new)
            .into_iter()
            .map(String::as_str)
            .collect();
        assert_eq!(
            breaking,
            [
                "enum crate::E variant B",
                "struct crate::L field z: u8",
                "trait crate::T fn b (& self)",
            ],
            "{new:?}"
        );
    }

    #[test]
    fn the_committed_api_is_the_code_s() {
        crate::assert_clean("public API snapshots are stale", check(&crate::root()));
    }

    #[test]
    fn a_changed_signature_and_a_removed_field_change_the_surface() {
        let before = surface_of(
            "pub struct S { pub a: u32, b: u32 }\n/// doc\npub fn f(x: u32) -> u32 { x }\n\
             fn private() {}\n#[cfg(test)] mod tests { pub fn t() {} }\n\
             pub enum E { A, /// doc\n B(u8) }\nimpl S { pub fn m(&self) {} fn hidden(&self) {} }",
        );
        assert!(
            before.contains("crate: fn f (_ : u32) -> u32"),
            "{before:?}"
        );
        assert!(
            before.contains("struct crate::S field a: u32"),
            "{before:?}"
        );
        assert!(
            !before
                .iter()
                .any(|l| l.contains("private") || l.contains("hidden"))
        );
        assert!(
            !before.iter().any(|l| l.contains(" t ")),
            "test modules are not API"
        );
        assert!(
            before.contains("enum crate::E variant B (u8)"),
            "{before:?}"
        );
        let featured =
            surface_of("#[cfg(feature = \"testing\")] pub mod testing { pub fn fresh() {} }");
        assert!(
            featured.contains("crate::testing: fn fresh ()"),
            "{featured:?}"
        );
        let renamed = surface_of("pub fn f(y: u32) -> u32 { y }");
        assert!(
            renamed.contains("crate: fn f (_ : u32) -> u32"),
            "a rename is not a change"
        );
        let after = surface_of(
            "pub struct S { b: u32 }\npub fn f(x: u64) -> u32 { 0 }\npub enum E { A, B(u8) }\n\
             impl S { pub fn m(&self) {} }",
        );
        let gone: Vec<_> = before.difference(&after).collect();
        assert_eq!(
            gone,
            [
                "crate: fn f (_ : u32) -> u32",
                "struct crate::S field a: u32"
            ]
        );
    }
}
