//! Rules every piece of caller text meets before any store sees it, so that every store accepts
//! and refuses the same input: no NUL characters (PostgreSQL cannot store them in text or JSON;
//! SQLite can; a caller must not learn which store it is talking to from an internal error).

use crate::Error;

/// Refuses `text` when it holds a NUL character; `what` names it in the error.
pub fn check_text(what: &str, text: &str) -> Result<(), Error> {
    if text.contains('\0') {
        return Err(Error::invalid(format!("{what} contains a NUL character")));
    }
    Ok(())
}

/// [`check_text`] on every string and object key inside `value`.
pub fn check_json(what: &str, value: &serde_json::Value) -> Result<(), Error> {
    use serde_json::Value;
    match value {
        Value::String(s) => check_text(what, s),
        Value::Array(items) => items.iter().try_for_each(|v| check_json(what, v)),
        Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            check_text(what, k)?;
            check_json(what, v)
        }),
        _ => Ok(()),
    }
}

/// [`check_json`] on anything that serializes.
pub fn check<T: serde::Serialize>(what: &str, value: &T) -> Result<(), Error> {
    let value = serde_json::to_value(value)
        .map_err(|e| Error::invalid(format!("{what} cannot be encoded: {e}")))?;
    check_json(what, &value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_anywhere_is_refused_and_ordinary_text_passes() {
        assert!(check_text("message", "hello").is_ok());
        assert!(check_text("message", "he\0llo").is_err());
        let v = serde_json::json!({"a": ["ok", {"b": "x\u{0}y"}]});
        let e = check_json("state", &v).unwrap_err().to_string();
        assert!(e.contains("state contains a NUL character"), "{e}");
        assert!(check_json("state", &serde_json::json!({"k\u{0}": 1})).is_err());
        assert!(check_json("state", &serde_json::json!({"k": [1, true, null]})).is_ok());
    }
}
