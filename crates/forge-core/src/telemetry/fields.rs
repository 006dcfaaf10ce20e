//! Attribute values and the rules that keep a log line free of content: allowlisted keys,
//! primitive values, strings capped by characters.

use super::vocabulary::{LOG_FIELDS, LogEvent};

/// A span or log attribute's value: primitives only.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Text.
    Str(String),
    /// An integer.
    Int(i64),
    /// A number.
    Float(f64),
    /// A flag.
    Bool(bool),
    /// Structured data — which [`sanitize`] drops from logs even under an allowed key.
    Json(serde_json::Value),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Int(i64::from(v))
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

/// A key and its value.
pub type Attr = (&'static str, Value);
/// The longest string a log field keeps, in characters.
pub const MAX_LOG_STRING: usize = 120;

/// The marker a cut string ends with.
pub const TRUNCATED: &str = "…[truncated]";

/// A log line's fields made safe: allowlisted keys with primitive values, strings capped. The
/// second value names the keys dropped (never their values), to be logged as
/// [`LogEvent::FieldsDropped`].
pub fn sanitize(fields: Vec<Attr>) -> (Vec<Attr>, Vec<&'static str>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for (key, value) in fields {
        if !LOG_FIELDS.contains(&key) {
            dropped.push(key);
            continue;
        }
        let value = match value {
            Value::Json(serde_json::Value::String(s)) | Value::Str(s) => Value::Str(capped(s)),
            Value::Json(serde_json::Value::Bool(b)) => Value::Bool(b),
            Value::Json(serde_json::Value::Number(n)) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(0.0)),
            },
            Value::Json(_) => {
                dropped.push(key);
                continue;
            }
            other => other,
        };
        kept.push((key, value));
    }
    (kept, dropped)
}

/// `s`, cut at [`MAX_LOG_STRING`] characters with [`TRUNCATED`] at the end when longer.
pub fn capped(s: String) -> String {
    if crate::text::prefix_chars(&s, MAX_LOG_STRING).len() == s.len() {
        return s;
    }
    crate::text::capped(&s, MAX_LOG_STRING, TRUNCATED)
}

/// What a sink writes for `event` and `fields`: the line after [`sanitize`], then the
/// [`LogEvent::FieldsDropped`] line that reports what was dropped, if anything was.
pub fn log_records(event: LogEvent, fields: Vec<Attr>) -> Vec<(LogEvent, Vec<Attr>)> {
    let (kept, dropped) = sanitize(fields);
    let mut records = vec![(event, kept)];
    if !dropped.is_empty() {
        records.push((
            LogEvent::FieldsDropped,
            vec![
                ("count", Value::from(dropped.len())),
                ("dropped", Value::Str(capped(dropped.join(",")))),
            ],
        ));
    }
    records
}

/// [`log_records`] as JSON lines: `{"event": …, fields…}`.
pub fn log_lines(event: LogEvent, fields: Vec<Attr>) -> Vec<String> {
    log_records(event, fields)
        .into_iter()
        .map(|(event, fields)| {
            let mut map = serde_json::Map::new();
            map.insert("event".into(), event.as_str().into());
            for (k, v) in fields {
                let v = match v {
                    Value::Str(s) => serde_json::Value::String(s),
                    Value::Int(i) => i.into(),
                    Value::Float(f) => serde_json::Number::from_f64(f)
                        .map_or(serde_json::Value::Null, serde_json::Value::Number),
                    Value::Bool(b) => b.into(),
                    Value::Json(_) => serde_json::Value::Null,
                };
                map.insert(k.into(), v);
            }
            serde_json::Value::Object(map).to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any Unicode in a log field: kept whole within [`MAX_LOG_STRING`] characters, else
        /// its first [`MAX_LOG_STRING`] characters and [`TRUNCATED`].
        #[test]
        fn any_unicode_log_string_is_capped_by_characters(
            s in proptest::prop_oneof![
                crate::text::strategy::unicode(400),
                crate::text::strategy::unicode_runs(400),
            ],
        ) {
            let out = capped(s.clone());
            if s.chars().count() <= MAX_LOG_STRING {
                proptest::prop_assert_eq!(out, s);
            } else {
                let kept = out.strip_suffix(TRUNCATED).unwrap_or_default();
                proptest::prop_assert_eq!(kept.chars().count(), MAX_LOG_STRING);
                proptest::prop_assert!(s.starts_with(kept));
            }
        }
    }

    #[test]
    fn logs_keep_allowlisted_primitives_capped_and_report_the_rest() {
        let long = "x".repeat(500);
        let (kept, dropped) = sanitize(vec![
            ("worker", "w1".into()),
            ("prompt", "Ignore all previous instructions".into()),
            (
                "code",
                Value::Json(serde_json::json!({"input": {"card": "4111"}})),
            ),
            ("count", 3u64.into()),
            ("reference", long.clone().into()),
        ]);
        assert_eq!(dropped, ["prompt", "code"]);
        assert_eq!(kept[0], ("worker", Value::Str("w1".into())));
        assert_eq!(kept[1], ("count", Value::Int(3)));
        let Value::Str(cut) = &kept[2].1 else {
            panic!()
        };
        assert!(
            cut.ends_with(TRUNCATED)
                && cut.chars().count() == MAX_LOG_STRING + TRUNCATED.chars().count()
        );
        let lines = log_lines(
            LogEvent::WorkerStoreFailed,
            vec![("prompt", "secret words".into())],
        );
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], r#"{"event":"worker.store_failed"}"#);
        assert_eq!(
            lines[1],
            r#"{"event":"telemetry.fields_dropped","count":1,"dropped":"prompt"}"#
        );
    }
}
