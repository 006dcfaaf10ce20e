//! Omitted variables as the GraphQL specification has them: an argument whose value is a
//! variable the request did not provide (and the operation gives no default) is *not provided*,
//! so the argument's own default applies — `threads(archived: $archived)` with `$archived`
//! omitted lists unarchived threads, and `updateThread(title: $title)` with `$title` omitted
//! leaves the title alone. async-graphql instead reads an omitted nullable variable as `null`,
//! which a non-null argument refuses and a nullable one takes as "clear it". The request is
//! rewritten before execution: each such `argument: $variable` is cut from the document, and the
//! variable's definition too once nothing else uses it (an unused variable is invalid). Uses
//! inside lists, input objects and directives stay (they have no argument default to fall back
//! on) and keep async-graphql's reading.

use std::collections::{HashMap, HashSet};

use async_graphql::Name;
use async_graphql::Variables;
use async_graphql::parser::Pos;
use async_graphql::parser::types::{
    DocumentOperations, ExecutableDocument, OperationDefinition, Selection, SelectionSet,
};
use async_graphql_value::Value;

/// `query` with every field argument bound to an omitted variable cut out (and the variables
/// left unused), or `None` when nothing needs cutting or the document does not parse (then
/// validation reports it as usual).
pub(crate) fn omit_unset(
    query: &str,
    operation: Option<&str>,
    variables: &Variables,
) -> Option<String> {
    let doc = async_graphql::parser::parse_query(query).ok()?;
    let op = match (&doc.operations, operation) {
        (DocumentOperations::Single(op), _) => &op.node,
        (DocumentOperations::Multiple(ops), Some(name)) => &ops.get(name)?.node,
        // One named operation is the one to run.
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => &ops.values().next()?.node,
        (DocumentOperations::Multiple(_), None) => return None,
    };
    let omitted: HashSet<&str> = op
        .variable_definitions
        .iter()
        .filter(|d| d.node.default_value.is_none())
        .map(|d| d.node.name.node.as_str())
        .filter(|name| !variables.contains_key(&Name::new(name)))
        .collect();
    if omitted.is_empty() {
        return None;
    }
    let mut found = Uses::default();
    let mut seen = HashSet::new();
    found.selection_set(&doc, &op.selection_set.node, &omitted, &mut seen);
    if found.cut.is_empty() {
        return None;
    }
    let mut spans = Vec::new();
    for (arguments, all) in &found.cut {
        let mut these = Vec::new();
        for (name_pos, value_pos, variable) in arguments {
            let start = offset(query, *name_pos)?;
            let value = offset(query, *value_pos)?;
            these.push((start, end_of(query, value, &format!("${variable}"))?));
        }
        // No argument left: the parentheses go too (`()` is not GraphQL).
        spans.extend(if *all {
            enclosing(query, &these)?
        } else {
            these
        });
    }
    spans.extend(unused_definitions(query, op, &found)?);
    spans.sort_unstable();
    let mut out = String::with_capacity(query.len());
    let mut at = 0;
    for (start, end) in spans {
        if start < at {
            return None;
        }
        out.push_str(&query[at..start]);
        // Commas are whitespace in GraphQL: a space keeps the tokens on either side apart.
        out.push(' ');
        at = end;
    }
    out.push_str(&query[at..]);
    Some(out)
}

/// An argument bound to an omitted variable: its name's and its value's positions, the variable.
type Argument<'a> = (Pos, Pos, &'a str);

/// What a walk of the operation found: per field, the arguments to cut (the argument's name and
/// value positions, the variable) and whether that is all of them; how many uses of each omitted
/// variable remain.
#[derive(Default)]
struct Uses<'a> {
    cut: Vec<(Vec<Argument<'a>>, bool)>,
    kept: HashMap<&'a str, usize>,
}

impl<'a> Uses<'a> {
    fn selection_set(
        &mut self,
        doc: &'a ExecutableDocument,
        set: &'a SelectionSet,
        omitted: &HashSet<&'a str>,
        seen: &mut HashSet<&'a str>,
    ) {
        for item in &set.items {
            match &item.node {
                Selection::Field(f) => {
                    let mut cut = Vec::new();
                    for (name, value) in &f.node.arguments {
                        match &value.node {
                            Value::Variable(v) if omitted.contains(v.as_str()) => {
                                cut.push((name.pos, value.pos, v.as_str()));
                            }
                            other => self.nested(other, omitted),
                        }
                    }
                    if !cut.is_empty() {
                        let all = cut.len() == f.node.arguments.len();
                        self.cut.push((cut, all));
                    }
                    for directive in &f.node.directives {
                        for (_, value) in &directive.node.arguments {
                            self.nested(&value.node, omitted);
                        }
                    }
                    self.selection_set(doc, &f.node.selection_set.node, omitted, seen);
                }
                Selection::InlineFragment(f) => {
                    for directive in &f.node.directives {
                        for (_, value) in &directive.node.arguments {
                            self.nested(&value.node, omitted);
                        }
                    }
                    self.selection_set(doc, &f.node.selection_set.node, omitted, seen);
                }
                Selection::FragmentSpread(spread) => {
                    for directive in &spread.node.directives {
                        for (_, value) in &directive.node.arguments {
                            self.nested(&value.node, omitted);
                        }
                    }
                    let name = spread.node.fragment_name.node.as_str();
                    if let Some(fragment) = doc.fragments.get(name).filter(|_| seen.insert(name)) {
                        self.selection_set(doc, &fragment.node.selection_set.node, omitted, seen);
                    }
                }
            }
        }
    }

    /// A use that stays: inside a list, an input object or a directive.
    fn nested(&mut self, value: &'a Value, omitted: &HashSet<&'a str>) {
        match value {
            Value::Variable(v) if omitted.contains(v.as_str()) => {
                *self.kept.entry(v.as_str()).or_default() += 1;
            }
            Value::List(items) => items.iter().for_each(|v| self.nested(v, omitted)),
            Value::Object(fields) => fields.values().for_each(|v| self.nested(v, omitted)),
            _ => {}
        }
    }
}

/// The spans of the definitions of variables whose every use was cut.
fn unused_definitions(
    query: &str,
    op: &OperationDefinition,
    found: &Uses<'_>,
) -> Option<Vec<(usize, usize)>> {
    let cut: HashSet<&str> = found
        .cut
        .iter()
        .flat_map(|(arguments, _)| arguments.iter().map(|(_, _, v)| *v))
        .collect();
    let mut spans = Vec::new();
    for def in &op.variable_definitions {
        let name = def.node.name.node.as_str();
        if !cut.contains(name) || found.kept.contains_key(name) || !def.node.directives.is_empty() {
            continue;
        }
        let start = offset(query, def.pos)?;
        let ty = offset(query, def.node.var_type.pos)?;
        spans.push((
            start,
            end_of(query, ty, &def.node.var_type.node.to_string())?,
        ));
    }
    if !spans.is_empty() && spans.len() == op.variable_definitions.len() {
        return enclosing(query, &spans);
    }
    Some(spans)
}

/// The one span from the `(` before the first of `spans` to the `)` after the last, when only
/// whitespace and commas lie between them and the parentheses.
fn enclosing(query: &str, spans: &[(usize, usize)]) -> Option<Vec<(usize, usize)>> {
    let first = spans.iter().map(|s| s.0).min()?;
    let last = spans.iter().map(|s| s.1).max()?;
    let insignificant = |c: char| c.is_whitespace() || c == ',';
    let open = query.get(..first)?.trim_end_matches(insignificant);
    let close = query.get(last..)?.trim_start_matches(insignificant);
    if !open.ends_with('(') || !close.starts_with(')') {
        return None;
    }
    Some(vec![(open.len() - 1, query.len() - close.len() + 1)])
}

/// The byte offset of `pos` in `query`, counted as the parser counts (columns in characters; a
/// `\r` starts the column again, a `\n` the line).
fn offset(query: &str, pos: Pos) -> Option<usize> {
    let (mut line, mut column) = (1, 1);
    for (at, ch) in query.char_indices() {
        if line == pos.line && column == pos.column {
            return Some(at);
        }
        match ch {
            '\r' => column = 1,
            '\n' => {
                line += 1;
                column = 1;
            }
            _ => column += 1,
        }
    }
    None
}

/// Where the tokens of `text` (printed without insignificant whitespace) end in `query` when they
/// start at byte `start`; whitespace and commas between them are skipped.
fn end_of(query: &str, start: usize, text: &str) -> Option<usize> {
    let mut source = query.get(start..)?.char_indices().peekable();
    let mut end = start;
    for want in text.chars() {
        loop {
            let (at, ch) = source.next()?;
            if ch == want {
                end = start + at + ch.len_utf8();
                break;
            }
            if !(ch.is_whitespace() || ch == ',') {
                return None;
            }
        }
    }
    Some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(json: serde_json::Value) -> Variables {
        Variables::from_json(json)
    }

    /// The document without insignificant whitespace and commas.
    fn squash(s: &str) -> String {
        s.replace(',', " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn an_omitted_variable_leaves_its_argument_unset() {
        let q = "query Q($archived: Boolean, $first: Int) { threads(archived: $archived, first: $first) { nodes { id } } }";
        let out = omit_unset(q, None, &vars(serde_json::json!({"first": 5}))).unwrap();
        assert_eq!(
            squash(&out),
            "query Q( $first: Int) { threads( first: $first) { nodes { id } } }"
        );
        // Every variable given, or defaulted in the operation: nothing to do.
        assert_eq!(
            omit_unset(
                q,
                None,
                &vars(serde_json::json!({"archived": true, "first": 1}))
            ),
            None
        );
        let defaulted =
            "query Q($archived: Boolean = true) { threads(archived: $archived) { nodes { id } } }";
        assert_eq!(
            omit_unset(defaulted, None, &vars(serde_json::json!({}))),
            None
        );
    }

    #[test]
    fn a_variable_still_used_elsewhere_keeps_its_definition() {
        let q = "mutation M($id: ID!, $t: String) { a: updateThread(id: $id, title: $t) { id } b: startRun(input: {threadId: $id, message: $t}) { id } }";
        let out = omit_unset(q, None, &vars(serde_json::json!({"id": "x"}))).unwrap();
        assert!(out.contains("$t: String"), "{out}");
        assert!(!out.contains("title"), "{out}");
        assert!(out.contains("message: $t"), "{out}");
    }

    #[test]
    fn positions_count_characters_not_bytes_and_lists_and_fragments_are_followed() {
        let q = "query Q($a: [ID!] , $b: Int) {\r\n  x(title: \"déjà vu 😀\", a: $a) { ...F } }\nfragment F on T { y(b: $b) }";
        let out = omit_unset(q, Some("Q"), &vars(serde_json::json!({}))).unwrap();
        assert_eq!(
            squash(&out),
            "query Q { x(title: \"déjà vu 😀\" ) { ...F } } fragment F on T { y }"
        );
        assert!(async_graphql::parser::parse_query(&out).is_ok(), "{out}");
    }

    proptest::proptest! {
        /// Any Unicode around and inside the cut arguments (strings, comments, names' lines):
        /// every cut falls on a character boundary, and the document still parses.
        #[test]
        fn any_unicode_around_the_cuts_is_kept_whole(
            before in "\\PC{0,12}",
            inside in "\\PC{0,12}",
            comment in "[^\r\n]{0,12}",
        ) {
            let quote = |s: &str| serde_json::to_string(s).unwrap();
            let q = format!(
                "# {comment}\nquery Q($a: Int, $b: String) {{ x(t: {}, a: $a, u: {}) {{ y(b: $b) }} }}",
                quote(&before),
                quote(&inside),
            );
            let out = omit_unset(&q, None, &vars(serde_json::json!({}))).unwrap();
            proptest::prop_assert!(async_graphql::parser::parse_query(&out).is_ok(), "{}", out);
            proptest::prop_assert!(out.contains(&quote(&before)) && out.contains(&quote(&inside)));
            let code = out
                .replacen(&quote(&before), "", 1)
                .replacen(&quote(&inside), "", 1)
                .replacen(&comment, "", 1);
            proptest::prop_assert!(!code.contains("$a") && !code.contains("$b"), "{}", out);
        }
    }

    #[test]
    fn a_document_that_does_not_parse_is_left_to_validation() {
        assert_eq!(
            omit_unset(
                "query Q($a: Int) { x(a: $a",
                None,
                &vars(serde_json::json!({}))
            ),
            None
        );
    }
}
