//! The module import graph of one crate, read from its source with `syn`: which of its modules
//! each module imports, the circles among them, and its longest functions.
//!
//! A module is a file (`src/a/b.rs` and `src/a/b/mod.rs` are `a::b`); the crate root is left out,
//! since it only declares and re-exports. An edge is a private `use` of, or a path through,
//! another module of the same crate; a `pub use` is a re-export (a facade, not a dependency) and
//! is followed to the module that defines the name. Test code (`#[cfg(test)]`, `#[test]`) is not
//! counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use syn::visit::Visit;

/// One crate's modules and the imports between them.
#[derive(Debug, Default)]
pub(crate) struct Modules {
    /// Module path (`engine::builder`) → the modules it imports.
    pub edges: BTreeMap<String, BTreeSet<String>>,
    /// Module path → its re-exports: name → the path it names.
    reexports: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// Every function's length in lines: (lines, `module::owner::name`).
    pub functions: Vec<(usize, String)>,
    /// Files that did not parse.
    pub errors: Vec<String>,
}

/// The module path of a file under `src/`: `""` for the root.
fn module_of(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" && stem != "main" {
            parts.push(stem.to_owned());
        }
    }
    parts.join("::")
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg")
                && a.meta
                    .require_list()
                    .is_ok_and(|l| l.tokens.to_string().split_whitespace().any(|t| t == "test")))
    })
}

/// A `use` tree flattened into full paths, each marked as a re-export or not.
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            path.push(n.ident.to_string());
            out.push((path, n.ident.to_string()));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            path.push(r.ident.to_string());
            out.push((path, r.rename.to_string()));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), "*".to_owned())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

/// `path` with its leading `crate`, `self` or `super`s applied to `base`: what is left of it,
/// relative to the moved `base`. A path with none of them is relative to `base` as it is.
fn anchor<'p>(base: &mut Vec<String>, path: &'p [String]) -> &'p [String] {
    match path.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            &path[1..]
        }
        Some("self") => &path[1..],
        Some("super") => {
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            rest
        }
        _ => path,
    }
}

/// What one file says: its imports, the paths it names, its child modules and its functions.
#[derive(Default)]
struct File {
    uses: Vec<Vec<String>>,
    reexports: BTreeMap<String, Vec<String>>,
    paths: Vec<Vec<String>>,
    children: BTreeSet<String>,
    functions: Vec<(usize, String)>,
    owner: Vec<String>,
}

fn lines(span: proc_macro2::Span) -> usize {
    span.end().line.saturating_sub(span.start().line) + 1
}

impl<'ast> Visit<'ast> for File {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            _ => &Vec::new(),
        };
        if is_test(attrs) {
            return;
        }
        match item {
            syn::Item::Use(u) => {
                let mut flat = Vec::new();
                flatten(&u.tree, &mut Vec::new(), &mut flat);
                let public = !matches!(u.vis, syn::Visibility::Inherited);
                for (path, name) in flat {
                    if public {
                        self.reexports.insert(name, path);
                    } else {
                        self.uses.push(path);
                    }
                }
            }
            syn::Item::Mod(m) if m.content.is_none() => {
                self.children.insert(m.ident.to_string());
            }
            syn::Item::Fn(f) => {
                self.functions.push((
                    lines(syn::spanned::Spanned::span(&f.block)),
                    f.sig.ident.to_string(),
                ));
                syn::visit::visit_item(self, item);
            }
            syn::Item::Impl(i) => {
                let owner = match &*i.self_ty {
                    syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
                    _ => None,
                };
                self.owner.push(owner.unwrap_or_default());
                syn::visit::visit_item(self, item);
                self.owner.pop();
            }
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        let owner = self.owner.last().cloned().unwrap_or_default();
        self.functions.push((
            lines(syn::spanned::Spanned::span(&f.block)),
            format!("{owner}::{}", f.sig.ident),
        ));
        syn::visit::visit_impl_item_fn(self, f);
    }

    /// `pub(super)` and `pub(in path)` say who may see an item, not what it uses: no edge.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.paths
            .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }
}

impl Modules {
    /// Reads every Rust file under `src` (a crate's `src/` directory).
    pub(crate) fn read(src: &Path) -> Self {
        let mut sources = Vec::new();
        for path in crate::rust_files(src) {
            let Ok(relative) = path.strip_prefix(src) else {
                continue;
            };
            // Binaries under src/bin are crates of their own.
            if relative.iter().next().is_none_or(|first| first == "bin") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            sources.push((module_of(relative), text));
        }
        Self::parse(sources.iter().map(|(m, t)| (m.as_str(), t.as_str())))
    }

    /// Builds the graph from sources: `(module path, source)`; a source that does not parse is
    /// an error naming its module.
    pub(crate) fn parse<'a>(sources: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut files = BTreeMap::new();
        let mut errors = Vec::new();
        for (module, text) in sources {
            match syn::parse_file(text) {
                Ok(file) => {
                    let mut seen = File::default();
                    seen.visit_file(&file);
                    files.insert(module.to_owned(), seen);
                }
                Err(e) => errors.push(format!("module `{module}`: {e}")),
            }
        }
        Self::from_files(files, errors)
    }

    fn from_files(files: BTreeMap<String, File>, errors: Vec<String>) -> Self {
        let mut modules = Modules {
            errors,
            reexports: files
                .iter()
                .map(|(m, f)| (m.clone(), f.reexports.clone()))
                .collect(),
            ..Self::default()
        };
        let known: BTreeSet<String> = files.keys().cloned().collect();
        for (module, file) in &files {
            let mut targets = BTreeSet::new();
            for path in file.uses.iter().chain(&file.paths) {
                if let Some(target) = modules.resolve(&known, module, &file.children, path)
                    && target != *module
                    && !target.is_empty()
                {
                    targets.insert(target);
                }
            }
            if !module.is_empty() {
                modules.edges.insert(module.clone(), targets);
            }
            for (lines, name) in &file.functions {
                let shown = if module.is_empty() {
                    name.clone()
                } else {
                    format!("{module}::{name}")
                };
                modules.functions.push((*lines, shown));
            }
        }
        modules.functions.sort_by(|a, b| b.cmp(a));
        modules
    }

    /// The module a path used in `from` lands in, following re-exports; `None` outside the crate.
    fn resolve(
        &self,
        known: &BTreeSet<String>,
        from: &str,
        children: &BTreeSet<String>,
        path: &[String],
    ) -> Option<String> {
        let mut base: Vec<String> = if from.is_empty() {
            Vec::new()
        } else {
            from.split("::").map(str::to_owned).collect()
        };
        let rest = match path.first().map(String::as_str) {
            Some("crate" | "self" | "super") => anchor(&mut base, path),
            Some(first) if children.contains(first) => path,
            _ => return None,
        };
        self.land(known, base, rest, 0)
    }

    fn land(
        &self,
        known: &BTreeSet<String>,
        mut base: Vec<String>,
        rest: &[String],
        depth: usize,
    ) -> Option<String> {
        let mut rest = rest;
        while let Some(next) = rest.first() {
            let mut deeper = base.clone();
            deeper.push(next.clone());
            if known.contains(&deeper.join("::")) {
                base = deeper;
                rest = &rest[1..];
            } else {
                break;
            }
        }
        let here = base.join("::");
        // A name the module re-exports belongs to the module that defines it.
        if let Some(name) = rest.first()
            && depth < 8
            && let Some(target) = self.reexports.get(&here).and_then(|r| r.get(name))
        {
            let mut inner_base = base.clone();
            if target.is_empty() {
                return Some(here);
            }
            let path = anchor(&mut inner_base, target);
            let mut full: Vec<String> = path.to_vec();
            full.extend(rest[1..].iter().cloned());
            return self
                .land(known, inner_base, &full, depth + 1)
                .or(Some(here));
        }
        Some(here)
    }

    /// The strongly connected components with more than one module, largest first.
    pub(crate) fn circles(&self) -> Vec<Vec<String>> {
        // Tarjan's algorithm, iterative over the small graphs of one crate.
        let names: Vec<&String> = self.edges.keys().collect();
        let index_of: BTreeMap<&String, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let n = names.len();
        let adjacency: Vec<Vec<usize>> = names
            .iter()
            .map(|m| {
                self.edges[*m]
                    .iter()
                    .filter_map(|t| index_of.get(t).copied())
                    .collect()
            })
            .collect();
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut next = 0;
        let mut components = Vec::new();
        for start in 0..n {
            if index[start] != usize::MAX {
                continue;
            }
            let mut work = vec![(start, 0usize)];
            index[start] = next;
            low[start] = next;
            next += 1;
            stack.push(start);
            on_stack[start] = true;
            while let Some((v, i)) = work.pop() {
                if let Some(&w) = adjacency[v].get(i) {
                    work.push((v, i + 1));
                    if index[w] == usize::MAX {
                        index[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        work.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(names[w].clone());
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort();
                        components.push(component);
                    }
                }
            }
        }
        components.sort_by_key(|c| std::cmp::Reverse(c.len()));
        components
    }

    /// A report for people: modules, edges, circles and the longest functions.
    pub(crate) fn report(&self, name: &str, longest: usize) -> String {
        let mut out = String::new();
        let edges: usize = self.edges.values().map(BTreeSet::len).sum();
        let circles = self.circles();
        out.push_str(&format!(
            "{name}: {} modules, {edges} import edges, {} circle(s){}\n",
            self.edges.len(),
            circles.len(),
            circles
                .first()
                .map(|c| format!(", largest {} modules", c.len()))
                .unwrap_or_default()
        ));
        for circle in &circles {
            out.push_str(&format!("  circle: {}\n", circle.join(", ")));
        }
        for (module, targets) in &self.edges {
            if !targets.is_empty() {
                let shown: Vec<&str> = targets.iter().map(String::as_str).collect();
                out.push_str(&format!("  {module} → {}\n", shown.join(", ")));
            }
        }
        out.push_str("  longest functions (lines):\n");
        for (lines, function) in self.functions.iter().take(longest) {
            out.push_str(&format!("    {lines:>4}  {function}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_use_is_an_edge_and_a_reexport_is_followed() {
        let modules = Modules::parse([
            ("", "//! r\nmod a; mod b; mod c; pub use a::A;"),
            ("a", "//! a\nuse crate::b::B; pub struct A;"),
            ("b", "//! b\npub use crate::c::C as B;"),
            ("c", "//! c\npub struct C; fn f() { let _ = crate::A; }"),
        ]);
        assert_eq!(modules.edges["a"], BTreeSet::from(["c".to_owned()]));
        assert_eq!(modules.edges["c"], BTreeSet::from(["a".to_owned()]));
        assert_eq!(
            modules.circles(),
            vec![vec!["a".to_owned(), "c".to_owned()]]
        );
    }

    #[test]
    fn a_visibility_restricted_to_a_parent_is_no_edge() {
        let modules = Modules::parse([
            (
                "engine",
                "//! e
mod parts; use parts::P; pub struct E(P);",
            ),
            (
                "engine::parts",
                "//! p
pub(crate) struct P { pub(super) x: u8, pub(in crate::engine) y: u8 }",
            ),
        ]);
        assert!(
            modules
                .edges
                .get("engine::parts")
                .is_none_or(BTreeSet::is_empty),
            "{:?}",
            modules.edges
        );
        assert!(modules.circles().is_empty());
    }

    #[test]
    fn super_and_child_paths_resolve_and_tests_do_not_count() {
        let modules = Modules::parse([
            (
                "engine",
                "//! e\nmod builder; pub struct E; fn f() { builder::g(); }",
            ),
            (
                "engine::builder",
                "//! b\npub fn g() {}\n#[cfg(test)]\nmod tests { use super::super::E; }",
            ),
            ("other", "//! o\nuse super::engine::E;"),
        ]);
        assert_eq!(
            modules.edges["engine"],
            BTreeSet::from(["engine::builder".to_owned()])
        );
        assert!(modules.edges["engine::builder"].is_empty());
        assert_eq!(
            modules.edges["other"],
            BTreeSet::from(["engine".to_owned()])
        );
        assert!(modules.circles().is_empty());
    }

    #[test]
    fn a_three_module_circle_is_one_component() {
        let modules = Modules::parse([
            ("a", "//! a\nuse crate::b::X;"),
            ("b", "//! b\nuse crate::c::X;"),
            ("c", "//! c\nuse crate::a::X;"),
            ("d", "//! d\nuse crate::a::X;"),
        ]);
        assert_eq!(
            modules.circles(),
            vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]
        );
    }

    #[test]
    fn functions_are_measured_in_lines() {
        let modules = Modules::parse([(
            "a",
            "//! a\nstruct S;\nimpl S {\n    fn long(&self) {\n        let _ = 1;\n        let _ = 2;\n    }\n}\nfn short() {}\n",
        )]);
        assert_eq!(modules.functions[0], (4, "a::S::long".to_owned()));
        assert_eq!(modules.functions[1], (1, "a::short".to_owned()));
    }
}
