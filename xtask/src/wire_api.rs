//! The surface of the committed wire schemas (`schemas/forge.graphql`, `schemas/*.schema.json`)
//! as lines, for the `api` snapshot (`api/schemas.txt`): what a client relies on, without the
//! descriptions. The stores' migrations are in it too, one line per file with a hash of its
//! text: migrations are append-only, so an edited or removed one is a changed line.
//!
//! A line that disappears is a removal or a change — breaking under the README's version policy.
//! A line that appears is an addition, which is not, except a new required argument or a new
//! required input field: a client that sent the old shape is refused. [`breaking_additions`]
//! picks those out.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// The committed schema files the surface is read from, relative to the root.
pub(crate) const FILES: &[&str] = &[
    "schemas/forge.graphql",
    "schemas/run-event.schema.json",
    "schemas/run-stream.schema.json",
];

/// Every schema file's surface, each line prefixed by its file name.
pub(crate) fn surface(root: &Path) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    for file in FILES {
        let text = std::fs::read_to_string(root.join(file)).map_err(|e| format!("{file}: {e}"))?;
        let name = file.rsplit('/').next().unwrap_or(file);
        let lines = if file.ends_with(".graphql") {
            graphql(&text)
        } else {
            let value: Value = serde_json::from_str(&text).map_err(|e| format!("{file}: {e}"))?;
            let mut lines = BTreeSet::new();
            json_schema("", &value, &mut lines);
            lines
        };
        out.extend(lines.into_iter().map(|l| format!("{name}: {l}")));
    }
    for dir in MIGRATIONS {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .map_err(|e| format!("{dir}: {e}"))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "sql"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            out.insert(format!("{dir}/{name}: fnv1a {:016x}", fnv1a(&text)));
        }
    }
    Ok(out)
}

/// The migration directories whose files are append-only.
const MIGRATIONS: &[&str] = &[
    "crates/forge-store-sqlite/migrations",
    "crates/forge-store-postgres/migrations",
];

/// 64-bit FNV-1a: enough to notice an edit (this is no defence against a forger).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The added lines that break a client anyway: a required argument of a field that existed, a
/// required field of an input type that existed (`before` is the previous surface).
pub(crate) fn breaking_additions<'a>(
    before: &BTreeSet<String>,
    added: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    added
        .into_iter()
        .filter(|l| l.ends_with(" (required)"))
        .filter(|l| {
            if let Some((field, _)) = l.split_once(" arg ") {
                let prefix = format!("{field}:");
                before.iter().any(|b| b.starts_with(&prefix))
            } else {
                l.split_once(" field ")
                    .is_some_and(|(owner, _)| before.contains(owner))
            }
        })
        .cloned()
        .collect()
}

/// The SDL without its `"""` descriptions: one line per field, argument, enum value and union
/// member.
fn graphql(sdl: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut lines = sdl.lines();
    let mut block: Option<(String, String)> = None;
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if crate::codegen::sdl_description(trimmed, &mut lines).is_some() {
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        if trimmed == "}" {
            block = None;
            continue;
        }
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        if let Some((kind, name)) = &block {
            if kind == "enum" {
                out.insert(format!("enum {name} value {trimmed}"));
            } else if let Some(field) = field(trimmed) {
                let input = kind == "input";
                field_lines(kind, name, &field, input, &mut out);
            }
            continue;
        }
        match words.as_slice() {
            [
                kind @ ("type" | "input" | "interface" | "enum"),
                name,
                ..,
                "{",
            ] => {
                out.insert(format!("{kind} {name}"));
                block = Some(((*kind).to_owned(), (*name).to_owned()));
            }
            ["union", name, "=", rest @ ..] => {
                for member in rest.iter().filter(|w| **w != "|") {
                    out.insert(format!("union {name} member {member}"));
                }
            }
            ["scalar", name, ..] => {
                out.insert(format!("scalar {name}"));
            }
            _ => {}
        }
    }
    out
}

/// One SDL field: its name, arguments (`name: Type [= default]`) and type.
struct Field {
    name: String,
    args: Vec<(String, String, bool)>,
    ty: String,
}

/// `name(a: T, b: U = 1): Type` (an input field has no arguments, maybe a default).
fn field(line: &str) -> Option<Field> {
    let name_end = line.find(['(', ':'])?;
    let name = line[..name_end].trim().to_owned();
    let (args, rest) = if line[name_end..].starts_with('(') {
        let close = line.rfind(')')?;
        (&line[name_end + 1..close], line[close + 1..].trim_start())
    } else {
        ("", &line[name_end..])
    };
    let ty = rest.strip_prefix(':')?.trim().to_owned();
    let args = split_args(args)
        .into_iter()
        .filter_map(|a| {
            let (n, t) = a.split_once(':')?;
            let (t, default) = match t.split_once('=') {
                Some((t, _)) => (t.trim(), true),
                None => (t.trim(), false),
            };
            Some((n.trim().to_owned(), t.to_owned(), default))
        })
        .collect();
    (!name.is_empty()).then_some(Field { name, args, ty })
}

/// Arguments split at the commas outside brackets and quotes.
fn split_args(args: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut start) = (0i32, false, 0);
    for (i, c) in args.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '[' | '{' | '(' if !quoted => depth += 1,
            ']' | '}' | ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(args[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = args[start..].trim();
    if !last.is_empty() {
        out.push(last);
    }
    out
}

/// A field's lines: its type, each argument's; required inputs marked.
fn field_lines(kind: &str, owner: &str, f: &Field, input: bool, out: &mut BTreeSet<String>) {
    let (ty, default) = match f.ty.split_once('=') {
        Some((t, _)) => (t.trim(), true),
        None => (f.ty.as_str(), false),
    };
    let required = if input && ty.ends_with('!') && !default {
        " (required)"
    } else {
        ""
    };
    out.insert(format!("{kind} {owner} field {}: {ty}{required}", f.name));
    for (arg, arg_ty, has_default) in &f.args {
        let required = if arg_ty.ends_with('!') && !has_default {
            " (required)"
        } else {
            ""
        };
        out.insert(format!(
            "{kind} {owner} field {} arg {arg}: {arg_ty}{required}",
            f.name
        ));
    }
}

/// A JSON Schema node's shape at `path`: its type (or `$ref`, or constant), its properties with
/// whether each is required, its enum values, its items, the variants of its `oneOf`/`anyOf`
/// (named by their `type` constant when they have one) and its `$defs`.
fn json_schema(path: &str, node: &Value, out: &mut BTreeSet<String>) {
    let here = if path.is_empty() { "root" } else { path };
    if let Some(r) = node.get("$ref").and_then(Value::as_str) {
        out.insert(format!("{here}: ref {}", r.rsplit('/').next().unwrap_or(r)));
    }
    if let Some(t) = node.get("type") {
        let format = node
            .get("format")
            .and_then(Value::as_str)
            .map(|f| format!(" ({f})"))
            .unwrap_or_default();
        out.insert(format!("{here}: type {t}{format}"));
    }
    if let Some(c) = node.get("const") {
        out.insert(format!("{here}: const {c}"));
    }
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        for v in values {
            out.insert(format!("{here}: value {v}"));
        }
    }
    let required: BTreeSet<&str> = node
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            let child = format!("{path}.{name}");
            let presence = if required.contains(name.as_str()) {
                "always"
            } else {
                "optional"
            };
            out.insert(format!("{child}: {presence}"));
            json_schema(&child, prop, out);
        }
    }
    if let Some(items) = node.get("items") {
        json_schema(&format!("{path}[]"), items, out);
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        for (i, variant) in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let tag = variant
                .pointer("/properties/type/const")
                .and_then(Value::as_str)
                .map_or_else(|| i.to_string(), str::to_owned);
            json_schema(&format!("{path}<{tag}>"), variant, out);
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(defs) = node.get(key).and_then(Value::as_object) {
            for (name, def) in defs {
                json_schema(&format!("${name}"), def, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn gone(before: &BTreeSet<String>, after: &BTreeSet<String>) -> Vec<String> {
        before.difference(after).cloned().collect()
    }

    #[test]
    fn graphql_removals_and_changes_go_and_descriptions_do_not_count() {
        let before = graphql(
            "\"\"\"\nA run.\n\"\"\"\ntype Run {\n\t\"\"\"\n\tIts id.\n\t\"\"\"\n\tid: ID!\n\t\
             status: String!\n\tevents(after: Int = 0, limit: Int): [Event!]!\n}\n\
             enum Kind {\n\tA\n\tB\n}\nunion Part = Text | File\n\
             input New {\n\tname: String!\n\tcount: Int! = 3\n}\n",
        );
        assert!(
            before.contains("type Run field events: [Event!]!"),
            "{before:?}"
        );
        assert!(
            before.contains("type Run field events arg after: Int"),
            "{before:?}"
        );
        assert!(before.contains("input New field name: String! (required)"));
        assert!(before.contains("input New field count: Int!"), "{before:?}");
        let redescribed = graphql(
            "\"\"\"A run, reworded.\"\"\"\ntype Run {\n\tid: ID!\n\tstatus: String!\n\t\
             events(after: Int = 0, limit: Int): [Event!]!\n}\nenum Kind {\n\tA\n\tB\n}\n\
             union Part = Text | File\ninput New {\n\tname: String!\n\tcount: Int! = 3\n}\n",
        );
        assert_eq!(before, redescribed, "descriptions are not API");
        let after = graphql(
            "type Run {\n\tid: ID!\n\tstatus: String\n\tevents(after: Int = 0, limit: Int, \
             kind: String!): [Event!]!\n}\nenum Kind {\n\tA\n}\nunion Part = Text\n\
             input New {\n\tname: String!\n\tcount: Int! = 3\n\ttag: String!\n}\n\
             input Other {\n\tid: ID!\n}\ntype Query {\n\trun(id: ID!): Run\n}\n",
        );
        assert_eq!(
            gone(&before, &after),
            [
                "enum Kind value B",
                "type Run field status: String!",
                "union Part member File",
            ]
        );
        let added: Vec<String> = after.difference(&before).cloned().collect();
        assert_eq!(
            breaking_additions(&before, &added),
            [
                "input New field tag: String! (required)",
                "type Run field events arg kind: String! (required)",
            ]
        );
    }

    #[test]
    fn json_schema_kinds_fields_and_types_are_lines() {
        let before = serde_json::json!({
            "type": "object",
            "properties": {"seq": {"type": "integer", "format": "uint64"}},
            "required": ["seq"],
            "oneOf": [
                {"type": "object", "properties": {"type": {"const": "run.started"},
                 "model": {"type": "string"}}, "required": ["type", "model"]},
                {"type": "object", "properties": {"type": {"const": "run.failed"},
                 "code": {"enum": ["a", "b"]}}, "required": ["type"]}
            ],
            "$defs": {"RunId": {"type": "string", "format": "uuid"}}
        });
        let mut lines = BTreeSet::new();
        json_schema("", &before, &mut lines);
        for l in [
            ".seq: always",
            ".seq: type \"integer\" (uint64)",
            "<run.started>.model: always",
            "<run.failed>.code: optional",
            "<run.failed>.code: value \"b\"",
            "$RunId: type \"string\" (uuid)",
        ] {
            assert!(lines.contains(l), "{l} not in {lines:?}");
        }
        let mut after = before.clone();
        after["oneOf"][0]["properties"]["model"] = serde_json::json!({"type": "integer"});
        after["oneOf"][1]["properties"]["code"]["enum"] = serde_json::json!(["a"]);
        let mut changed = BTreeSet::new();
        json_schema("", &after, &mut changed);
        assert_eq!(
            gone(&lines, &changed),
            [
                "<run.failed>.code: value \"b\"",
                "<run.started>.model: type \"string\""
            ]
        );
    }

    #[test]
    fn the_committed_schemas_have_a_surface() {
        let lines = surface(&crate::root()).unwrap();
        assert!(lines.contains("forge.graphql: type Query"), "no Query type");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("run-event.schema.json: <run.completed>")),
            "no run.completed event"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("run-stream.schema.json: ")),
            "nothing from the stream schema"
        );
    }
}
