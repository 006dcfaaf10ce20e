//! Structured output: an agent with an `output_schema` must end with a JSON value that matches
//! it. Models are asked for it in their dialect's own way (a response format, or instructions);
//! the answer is checked here, whatever the model did.

use serde_json::Value;

/// Repairs asked of the model before a non-matching answer fails the run.
pub const REPAIRS: u32 = 1;

/// The answer's JSON value when it matches `schema`; otherwise why not, briefly. A code fence
/// around the JSON is tolerated (models add them).
pub fn check(answer: &str, schema: &Value) -> Result<Value, String> {
    let trimmed = answer.trim();
    let body = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.trim_end().strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    let value: Value =
        serde_json::from_str(body).map_err(|e| format!("the answer is not JSON: {e}"))?;
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("the output schema is invalid: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(3)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn matching_json_passes_fenced_or_not_and_anything_else_says_why() {
        let schema = json!({"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]});
        assert_eq!(check(r#"{"total": 84}"#, &schema), Ok(json!({"total": 84})));
        assert_eq!(
            check("```json\n{\"total\": 84}\n```", &schema),
            Ok(json!({"total": 84}))
        );
        let prose = check("The total is 84.", &schema).unwrap_err();
        assert!(prose.contains("not JSON"), "{prose}");
        let wrong = check(r#"{"total": "84"}"#, &schema).unwrap_err();
        assert!(wrong.contains("integer"), "{wrong}");
        let missing = check("{}", &schema).unwrap_err();
        assert!(missing.contains("total"), "{missing}");
    }
}
