//! A call graph of the workspace's non-test code, parsed with `syn`.
//!
//! Each function (free, inherent, trait implementation or trait default) is a node named by its
//! owner (the `impl`'s self type or the trait, `None` for free functions) and its name. Its edges
//! are what its body uses as code: calls (`a::b()`, `Type::f()`, `Self::f()`), method calls
//! (`x.f()`) and paths passed as values (`.map(handler)`, `post(graphql)`). Comments, strings,
//! `use` items and patterns (match arms, `if let`) are not expressions, so they are never uses.
//!
//! Resolution is by name and deliberately generous — a method call reaches every method of
//! that name — so a missing edge is never invented; what the graph proves is the absence of any
//! path from a root.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use syn::visit::Visit;

/// The self type recorded for a blanket implementation.
const BLANKET: &str = "<any>";

/// A function of the tree.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FnId {
    /// The file it is defined in, relative to the root.
    pub file: String,
    /// The `impl`'s self type or the trait (last path segment), `None` for a free function.
    pub owner: Option<String>,
    /// Its name.
    pub name: String,
}

/// What a body uses.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Use {
    /// A path in expression position, called or passed: its segments.
    Path(Vec<String>),
    /// A method call: its name.
    Method(String),
    /// A parameter's type, which the framework calling the function builds first: that type's
    /// own `from_request_parts` or `from_request`, and nothing else of those names.
    Extractor(String),
}

/// One function and what it uses.
#[derive(Debug)]
struct Node {
    id: FnId,
    /// `pub`, a trait method, or a method of a framework-called impl (`#[Object]`,
    /// `#[Subscription]`: GraphQL resolvers, called by async-graphql's generated code).
    public: bool,
    uses: BTreeSet<Use>,
}

/// The parsed tree.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    nodes: Vec<Node>,
    /// Enum variants constructed (`Enum::Variant` as a struct literal, call or value), by the
    /// function that constructs them: `("RunEventKind", "RunQueued")`.
    constructs: BTreeMap<(String, String), BTreeSet<usize>>,
    /// `(trait, type)` of every non-test `impl Trait for Type`.
    impls: BTreeSet<(String, String)>,
    /// The resolvers of each GraphQL object type (`#[Object]` impls), by type: the schema calls
    /// them once code that is reached builds a value of the type (`ThreadObject(thread)`).
    resolvers: BTreeMap<String, Vec<usize>>,
    /// Files that did not parse.
    pub errors: Vec<String>,
}

fn segments(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

fn is_test_attr(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.is_ident("test") {
            return true;
        }
        if path.is_ident("cfg") {
            let mut test = false;
            let _ = a.parse_nested_meta(|m| {
                if m.path.is_ident("test") {
                    test = true;
                }
                // `cfg(feature = "…")` and friends carry a value; skip it.
                if m.input.peek(syn::Token![=]) {
                    let _: syn::Expr = m.value()?.parse()?;
                }
                if m.input.peek(syn::token::Paren) {
                    m.parse_nested_meta(|inner| {
                        if inner.path.is_ident("test") {
                            test = true;
                        }
                        if inner.input.peek(syn::Token![=]) {
                            let _: syn::Expr = inner.value()?.parse()?;
                        }
                        Ok(())
                    })?;
                }
                Ok(())
            });
            return test;
        }
        false
    })
}

fn type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => None,
    }
}

/// Collects the uses and constructions of one body.
#[derive(Default)]
struct Body {
    uses: BTreeSet<Use>,
    constructs: BTreeSet<(String, String)>,
}

impl Body {
    fn path(&mut self, path: &syn::Path) {
        let segs = segments(path);
        if segs.len() >= 2 {
            let n = segs.len();
            self.constructs
                .insert((segs[n - 2].clone(), segs[n - 1].clone()));
        }
        self.uses.insert(Use::Path(segs));
    }
}

impl Body {
    /// Paths (`a::b`) and calls (`f(…)`, `.m(…)`) in a macro's tokens.
    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::TokenTree;
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut path: Vec<String> = Vec::new();
        let mut after_dot = false;
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Ident(id) => {
                    let name = id.to_string();
                    let next_is_bang =
                        matches!(trees.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '!');
                    if name == "matches" && next_is_bang {
                        // Skip `matches ! (…)`.
                        i += 3;
                        path.clear();
                        continue;
                    }
                    path.push(name);
                    let next_is_group = matches!(trees.get(i + 1), Some(TokenTree::Group(_)));
                    let next_is_colons = matches!(
                        (trees.get(i + 1), trees.get(i + 2)),
                        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                            if a.as_char() == ':' && b.as_char() == ':'
                    );
                    if next_is_colons {
                        i += 3;
                        continue;
                    }
                    if after_dot && path.len() == 1 {
                        if next_is_group {
                            self.uses.insert(Use::Method(path[0].clone()));
                        }
                    } else {
                        let p = syn::Path {
                            leading_colon: None,
                            segments: path
                                .iter()
                                .map(|s| syn::PathSegment::from(syn::Ident::new(s, id.span())))
                                .collect(),
                        };
                        self.path(&p);
                    }
                    path.clear();
                    after_dot = false;
                }
                TokenTree::Punct(p) => {
                    after_dot = p.as_char() == '.';
                    path.clear();
                }
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    path.clear();
                    after_dot = false;
                }
                TokenTree::Literal(_) => {
                    path.clear();
                    after_dot = false;
                }
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Body {
    fn visit_expr_path(&mut self, e: &'ast syn::ExprPath) {
        self.path(&e.path);
        syn::visit::visit_expr_path(self, e);
    }

    fn visit_expr_struct(&mut self, e: &'ast syn::ExprStruct) {
        self.path(&e.path);
        syn::visit::visit_expr_struct(self, e);
    }

    fn visit_expr_method_call(&mut self, e: &'ast syn::ExprMethodCall) {
        self.uses.insert(Use::Method(e.method.to_string()));
        syn::visit::visit_expr_method_call(self, e);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // A macro's arguments are tokens, not syntax; comments are not tokens and strings are
        // literals, so what looks like a call or a path there is code. `matches!` holds a
        // pattern, which is not a use.
        if !m.path.is_ident("matches") {
            self.tokens(m.tokens.clone());
        }
    }

    // Items nested in a body are visited by the tree walker on their own.
    fn visit_item(&mut self, _i: &'ast syn::Item) {}
}

/// Walks a file's items.
struct Items<'g> {
    graph: &'g mut Graph,
    file: String,
    owner: Option<String>,
}

/// Whether an impl's methods are called by generated code: async-graphql's resolvers.
fn framework_called(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path()
            .segments
            .last()
            .is_some_and(|s| s.ident == "Object" || s.ident == "Subscription")
    })
}

/// A parameter's type is called by the framework that calls the function: an axum handler's
/// `Caller(scope): Caller` runs `Caller::from_request_parts` (or `from_request`) first.
fn extractor_uses(sig: &syn::Signature) -> Vec<Use> {
    sig.inputs
        .iter()
        .filter_map(|arg| match arg {
            syn::FnArg::Typed(t) => type_name(&t.ty),
            syn::FnArg::Receiver(_) => None,
        })
        .map(Use::Extractor)
        .collect()
}

impl Items<'_> {
    fn add(&mut self, sig: &syn::Signature, public: bool, block: &syn::Block) {
        let name = sig.ident.to_string();
        let mut body = Body::default();
        body.visit_block(block);
        body.uses.extend(extractor_uses(sig));
        let index = self.graph.nodes.len();
        self.graph.nodes.push(Node {
            id: FnId {
                file: self.file.clone(),
                owner: self.owner.clone(),
                name,
            },
            public,
            uses: body.uses,
        });
        for c in body.constructs {
            self.graph.constructs.entry(c).or_default().insert(index);
        }
        // Functions nested in this body.
        let mut nested = Nested(Vec::new());
        nested.visit_block(block);
        let saved = self.owner.take();
        for item in nested.0 {
            self.item(&item);
        }
        self.owner = saved;
    }

    fn item(&mut self, item: &syn::Item) {
        match item {
            syn::Item::Fn(f) if !is_test_attr(&f.attrs) => {
                let public = matches!(f.vis, syn::Visibility::Public(_));
                self.add(&f.sig, public, &f.block);
            }
            syn::Item::Impl(i) if !is_test_attr(&i.attrs) => {
                let mut ty = type_name(&i.self_ty).unwrap_or_default();
                if i.generics.type_params().any(|p| p.ident == ty) {
                    // `impl<T: …> Trait for T`: every type that qualifies.
                    ty = BLANKET.to_owned();
                }
                if let Some((_, path, _)) = &i.trait_
                    && let Some(t) = path.segments.last()
                {
                    self.graph.impls.insert((t.ident.to_string(), ty.clone()));
                }
                let saved = self.owner.replace(ty.clone());
                let framework = framework_called(&i.attrs);
                let trait_impl = i.trait_.is_some() || framework;
                for it in &i.items {
                    if let syn::ImplItem::Fn(f) = it
                        && !is_test_attr(&f.attrs)
                    {
                        let public = trait_impl || matches!(f.vis, syn::Visibility::Public(_));
                        if framework {
                            let index = self.graph.nodes.len();
                            self.graph
                                .resolvers
                                .entry(ty.clone())
                                .or_default()
                                .push(index);
                        }
                        self.add(&f.sig, public, &f.block);
                    }
                }
                self.owner = saved;
            }
            syn::Item::Trait(t) if !is_test_attr(&t.attrs) => {
                let saved = self.owner.replace(t.ident.to_string());
                for it in &t.items {
                    if let syn::TraitItem::Fn(f) = it
                        && let Some(block) = &f.default
                    {
                        self.add(&f.sig, true, block);
                    }
                }
                self.owner = saved;
            }
            syn::Item::Mod(m) if !is_test_attr(&m.attrs) => {
                if let Some((_, items)) = &m.content {
                    for it in items {
                        self.item(it);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Items declared inside a body (one level; deeper ones are found when those are added).
struct Nested(Vec<syn::Item>);

impl<'ast> Visit<'ast> for Nested {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        self.0.push(i.clone());
    }
}

impl Graph {
    /// Parses `files` (path relative to the root, source text).
    pub(crate) fn parse<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut graph = Graph::default();
        for (path, text) in files {
            match syn::parse_file(text) {
                Ok(file) => {
                    let mut items = Items {
                        graph: &mut graph,
                        file: path.to_owned(),
                        owner: None,
                    };
                    for item in &file.items {
                        items.item(item);
                    }
                }
                Err(e) => graph.errors.push(format!("{path}: {e}")),
            }
        }
        graph
    }

    /// The functions `use_` may reach from a function of `owner`.
    fn targets(&self, from_owner: Option<&str>, use_: &Use) -> Vec<usize> {
        let find = |owner: Option<Option<&str>>, name: &str| -> Vec<usize> {
            self.nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| {
                    n.id.name == name && owner.is_none_or(|o| n.id.owner.as_deref() == o)
                })
                .map(|(i, _)| i)
                .collect()
        };
        match use_ {
            Use::Method(name) => find(None, name),
            Use::Extractor(ty) => {
                let mut found = find(Some(Some(ty)), "from_request_parts");
                found.extend(find(Some(Some(ty)), "from_request"));
                found
            }
            Use::Path(segs) => {
                let Some(name) = segs.last() else {
                    return vec![];
                };
                let qualifier = segs.len().checked_sub(2).map(|i| segs[i].as_str());
                let exact = match qualifier {
                    Some("Self") => find(Some(from_owner), name),
                    Some(q) if q.starts_with(char::is_uppercase) => find(Some(Some(q)), name),
                    _ => find(Some(None), name),
                };
                let mut found = if exact.is_empty() {
                    // A trait's method through a generic or re-export: anything of that name.
                    find(None, name)
                } else {
                    exact
                };
                // Building a GraphQL object hands it to the schema, which calls its resolvers.
                found.extend(self.resolvers.get(name).into_iter().flatten());
                found
            }
        }
    }

    /// Every function reachable from the functions `roots` selects.
    pub(crate) fn reachable(&self, roots: impl Fn(&FnId, bool) -> bool) -> BTreeSet<usize> {
        let mut seen: BTreeSet<usize> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| roots(&n.id, n.public))
            .map(|(i, _)| i)
            .collect();
        let mut queue: VecDeque<usize> = seen.iter().copied().collect();
        while let Some(i) = queue.pop_front() {
            let node = &self.nodes[i];
            for u in &node.uses {
                for t in self.targets(node.id.owner.as_deref(), u) {
                    if seen.insert(t) {
                        queue.push_back(t);
                    }
                }
            }
        }
        seen
    }

    /// The functions matching `file` (a suffix of the path), `owner` and `name`.
    pub(crate) fn find(&self, file: &str, owner: Option<&str>, name: &str) -> Vec<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                n.id.file.ends_with(file) && n.id.owner.as_deref() == owner && n.id.name == name
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Whether function `i`'s body uses a function named `name` of `owner` (any owner when
    /// `None`): a call, a method call or a path to it.
    pub(crate) fn uses(&self, i: usize, owner: Option<&str>, name: &str) -> bool {
        let node = &self.nodes[i];
        node.uses.iter().any(|u| {
            self.targets(node.id.owner.as_deref(), u)
                .into_iter()
                .any(|t| {
                    let id = &self.nodes[t].id;
                    id.name == name && owner.is_none_or(|o| id.owner.as_deref() == Some(o))
                })
        })
    }

    /// The functions that construct `Enum::Variant`.
    pub(crate) fn constructors(&self, enum_: &str, variant: &str) -> BTreeSet<usize> {
        self.constructs
            .get(&(enum_.to_owned(), variant.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Whether non-test code has `impl trait_ for ty`, or a blanket `impl<T> trait_ for T`.
    pub(crate) fn implements(&self, trait_: &str, ty: &str) -> bool {
        self.impls.contains(&(trait_.to_owned(), ty.to_owned()))
            || self
                .impls
                .contains(&(trait_.to_owned(), BLANKET.to_owned()))
    }

    /// Whether function `i`'s body names type `ty` as code: `Ty::f(…)`, `Ty { … }`, `Ty`.
    pub(crate) fn names_type(&self, i: usize, ty: &str) -> bool {
        self.nodes[i].uses.iter().any(|u| match u {
            Use::Path(segs) => {
                let n = segs.len();
                segs.last().is_some_and(|l| l == ty) || (n >= 2 && segs[n - 2] == ty)
            }
            // A parameter's type is a signature's, not the body's.
            Use::Method(_) | Use::Extractor(_) => false,
        })
    }

    /// A function's id.
    pub(crate) fn id(&self, i: usize) -> &FnId {
        &self.nodes[i].id
    }
}

/// The variants of `pub enum <name>` in `source`, with their `#[serde(rename = "…")]` if any.
pub(crate) fn enum_variants(source: &str, name: &str) -> Vec<(String, Option<String>)> {
    let Ok(file) = syn::parse_file(source) else {
        return vec![];
    };
    file.items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Enum(e) if e.ident == name => Some(e),
            _ => None,
        })
        .flat_map(|e| &e.variants)
        .map(|v| {
            let mut rename = None;
            for a in v.attrs.iter().filter(|a| a.path().is_ident("serde")) {
                let _ = a.parse_nested_meta(|m| {
                    if m.path.is_ident("rename") {
                        let s: syn::LitStr = m.value()?.parse()?;
                        rename = Some(s.value());
                    }
                    Ok(())
                });
            }
            (v.ident.to_string(), rename)
        })
        .collect()
}

/// The public traits `source` declares.
pub(crate) fn traits(source: &str) -> Vec<String> {
    let Ok(file) = syn::parse_file(source) else {
        return vec![];
    };
    file.items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Trait(t) if matches!(t.vis, syn::Visibility::Public(_)) => {
                Some(t.ident.to_string())
            }
            _ => None,
        })
        .collect()
}
