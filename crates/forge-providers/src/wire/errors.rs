//! Error classification: an HTTP status, headers and body — or an error event inside a successful
//! stream — become a [`ModelError`] whose class decides retrying.
//!
//! Providers disagree on shapes: OpenAI `{"error": {"message", "type", "code"}}`, Anthropic
//! `{"type": "error", "error": {"type", "message"}}`, OpenRouter a numeric `code`, Ollama a bare
//! string `{"error": "..."}`. The class comes from the status first and the provider's error type
//! second, never from matching whole messages, except where a provider offers nothing better
//! (context length and "request too large").

use std::time::Duration;

use forge_core::ports::model::{CallDetail, ModelError, ModelErrorKind};
use serde_json::Value;

/// The provider's error type (or code) and message, from any of the known body shapes.
pub fn error_details(body: &str) -> (String, String) {
    let Ok(value) = serde_json::from_str::<Value>(body) else {
        return (String::new(), body.chars().take(300).collect());
    };
    error_details_json(&value)
}

/// [`error_details`] for an already parsed body.
pub fn error_details_json(value: &Value) -> (String, String) {
    let error = value.get("error").unwrap_or(value);
    if let Some(message) = error.as_str() {
        return (String::new(), message.to_owned());
    }
    let field = |key: &str| match error.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let kind = field("code")
        .filter(|c| c.parse::<u16>().is_err())
        .or_else(|| field("type"))
        .unwrap_or_default();
    let message = field("message")
        .or_else(|| {
            value
                .get("detail")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default();
    (kind, message)
}

/// A delay the body asks for, in Google's structured form: a `google.rpc.RetryInfo` detail's
/// `retryDelay` (`"35s"`, `"1.5s"`), in `error.details`, in a body that is an array of errors,
/// or in a gateway's `error.metadata.raw` holding the upstream body as text.
pub fn delay_in_body(body: &str) -> Option<Duration> {
    let value = serde_json::from_str::<Value>(body).ok()?;
    delay_in_json(&value, 2)
}

fn delay_in_json(value: &Value, depth: u8) -> Option<Duration> {
    let value = match value {
        Value::Array(items) => items.first()?,
        other => other,
    };
    let error = value.get("error").unwrap_or(value);
    let from_details = error
        .get("details")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|d| d.get("retryDelay").and_then(Value::as_str))
        .and_then(|d| d.trim().strip_suffix('s')?.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    from_details.or_else(|| {
        let raw = error.get("metadata")?.get("raw")?.as_str()?;
        if depth == 0 {
            return None;
        }
        serde_json::from_str::<Value>(raw)
            .ok()
            .and_then(|v| delay_in_json(&v, depth - 1))
            .or_else(|| delay_in_message(raw))
    })
}

/// Classifies a non-success HTTP response.
///
/// `retry_after` is what the response headers said (see [`retry_after`]); without it, a delay the
/// body states is used: Google's `retryDelay` detail ([`delay_in_body`]), or one in the message
/// ("Please try again in 26.604s", "Please retry in 35.48s"). A tool call the model failed to
/// generate (`tool_use_failed`, from OpenAI-compatible servers) is
/// [`ModelErrorKind::InvalidToolCall`] ([`invalid_tool_call`]).
pub fn classify(status: u16, retry_after: Option<Duration>, body: &str) -> ModelError {
    let (kind, message) = error_details(body);
    let detail = CallDetail::default().status(status).message(&message);
    if kind == "tool_use_failed" {
        let value = serde_json::from_str::<Value>(body).unwrap_or_default();
        return invalid_tool_call(&value, &message).with_detail(detail);
    }
    let lower = message.to_ascii_lowercase();
    let class = if kind == "overloaded_error" {
        ModelErrorKind::Overloaded
    } else {
        match status {
            401 | 403 => ModelErrorKind::Authentication,
            404 => ModelErrorKind::NotFound(message),
            408 => ModelErrorKind::Timeout,
            429 if kind == "insufficient_quota" || lower.starts_with("request too large") => {
                // Retrying cannot help: the request alone exceeds the limit, or the account is
                // empty.
                ModelErrorKind::BadRequest(message)
            }
            429 => ModelErrorKind::RateLimited {
                retry_after: retry_after
                    .or_else(|| delay_in_body(body))
                    .or_else(|| delay_in_message(&message)),
            },
            503 | 529 => ModelErrorKind::Overloaded,
            500..=599 => ModelErrorKind::Server,
            _ if is_context_length(&kind, &lower) => ModelErrorKind::ContextLengthExceeded,
            _ => ModelErrorKind::BadRequest(message),
        }
    };
    ModelError::from(class).with_detail(detail)
}

/// An error object (`{"error": {…}}`) inside a successful stream or body, classified: a
/// `tool_use_failed` is [`invalid_tool_call`], anything else [`stream_error`].
pub fn error_event(value: &Value) -> ModelError {
    let (kind, message) = error_details_json(value);
    if kind == "tool_use_failed" {
        return invalid_tool_call(value, &message);
    }
    stream_error(&kind, &message)
}

/// The most characters of a failed generation repeated to the model.
const MAX_GENERATION: usize = 500;

/// A tool call the model wrote and the provider could not parse (`tool_use_failed`): the
/// provider's message with the failed generation (`error.failed_generation`, cut to
/// 500 characters), and the tool it names (`<function=NAME…` or a JSON `name`).
pub fn invalid_tool_call(value: &Value, message: &str) -> ModelError {
    let error = value.get("error").unwrap_or(value);
    let generation = error
        .get("failed_generation")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let message = if generation.trim().is_empty() {
        message.to_owned()
    } else {
        format!(
            "{message} The call as written: {}",
            forge_core::text::capped(generation.trim(), MAX_GENERATION, "…")
        )
    };
    ModelErrorKind::InvalidToolCall {
        tool: tool_named_in(generation),
        message,
    }
    .into()
}

/// The tool a failed generation meant to call: `<function=NAME>…`, `<function=NAME{…}` or
/// JSON with a `name` (or a list whose first item has one). Only a plain identifier counts.
fn tool_named_in(generation: &str) -> Option<String> {
    let name = if let Some((_, rest)) = generation.split_once("<function=") {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            .collect::<String>()
    } else {
        let value = serde_json::from_str::<Value>(generation.trim()).ok()?;
        let item = match &value {
            Value::Array(items) => items.first()?,
            other => other,
        };
        item.get("name")?.as_str()?.to_owned()
    };
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    plain.then_some(name)
}

/// Classifies an error reported inside a successful stream.
pub fn stream_error(kind: &str, message: &str) -> ModelError {
    let retryable = matches!(
        kind,
        "overloaded_error"
            | "api_error"
            | "rate_limit_error"
            | "server_error"
            | "rate_limit_exceeded"
            | "internal_error"
    );
    if is_context_length(kind, &message.to_ascii_lowercase()) {
        return ModelErrorKind::ContextLengthExceeded.into();
    }
    ModelErrorKind::StreamError {
        message: if kind.is_empty() {
            message.to_owned()
        } else {
            format!("{kind}: {message}")
        },
        retryable,
    }
    .into()
}

fn is_context_length(kind: &str, lower_message: &str) -> bool {
    kind == "context_length_exceeded"
        || lower_message.contains("prompt is too long")
        || lower_message.contains("maximum context length")
        || lower_message.contains("context window")
}

/// The delay a response asks for: `retry-after-ms` or `retry-after` (seconds or an HTTP date),
/// whichever is longer when both are present. `header` looks a header up by lower-case name.
pub fn retry_after(header: impl Fn(&str) -> Option<String>) -> Option<Duration> {
    let ms = header("retry-after-ms")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| Duration::from_secs_f64(v / 1000.0));
    let secs = header("retry-after").and_then(|v| {
        let v = v.trim();
        match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s)),
            Ok(_) => None,
            Err(_) => chrono::DateTime::parse_from_rfc2822(v)
                .ok()
                .map(|at| at.with_timezone(&chrono::Utc) - chrono::Utc::now())
                .map(|d| d.to_std().unwrap_or(Duration::ZERO)),
        }
    });
    match (ms, secs) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// A delay stated in an error message: "try again in 26.604s", "in 1m3.5s", "in 500ms", or
/// Google's "Please retry in 35.480539813s".
pub fn delay_in_message(message: &str) -> Option<Duration> {
    let lower = message.to_ascii_lowercase();
    let at = ["try again in ", "retry in "]
        .iter()
        .find_map(|p| lower.find(p).map(|i| i + p.len()))?;
    let text = &message[at..];
    let mut total = 0.0f64;
    let mut rest = text;
    let mut any = false;
    loop {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            break;
        }
        let Ok(n) = rest[..digits].parse::<f64>() else {
            break;
        };
        rest = &rest[digits..];
        let (factor, unit_len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else {
            break;
        };
        total += n * factor;
        any = true;
        rest = &rest[unit_len..];
    }
    (any && total.is_finite()).then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The class [`classify`] gives.
    fn class(status: u16, retry_after: Option<Duration>, body: &str) -> ModelErrorKind {
        classify(status, retry_after, body).kind().clone()
    }

    #[test]
    fn statuses_and_types_map_to_classes() {
        let anthropic =
            |t: &str| format!(r#"{{"type":"error","error":{{"type":"{t}","message":"m"}}}}"#);
        assert_eq!(
            class(401, None, &anthropic("authentication_error")),
            ModelErrorKind::Authentication
        );
        assert_eq!(
            class(529, None, &anthropic("overloaded_error")),
            ModelErrorKind::Overloaded
        );
        assert_eq!(
            class(500, None, &anthropic("api_error")),
            ModelErrorKind::Server
        );
        assert_eq!(
            class(503, None, "upstream down"),
            ModelErrorKind::Overloaded
        );
        assert_eq!(
            class(404, None, &anthropic("not_found_error")),
            ModelErrorKind::NotFound("m".into())
        );
        assert_eq!(
            class(
                400,
                None,
                r#"{"error":{"message":"prompt is too long: 3 tokens > 2 maximum","type":"invalid_request_error"}}"#
            ),
            ModelErrorKind::ContextLengthExceeded
        );
        assert_eq!(
            class(
                400,
                None,
                r#"{"error":{"message":"x","code":"context_length_exceeded"}}"#
            ),
            ModelErrorKind::ContextLengthExceeded
        );
        assert_eq!(
            class(400, None, r#"{"error":"bad"}"#),
            ModelErrorKind::BadRequest("bad".into())
        );
        assert_eq!(
            class(422, None, "not json"),
            ModelErrorKind::BadRequest("not json".into())
        );
    }

    /// Google's rate-limit forms (issue 17, item 6), as its API documents them: a `RetryInfo`
    /// detail and the message's "Please retry in N s", the body possibly an array, possibly
    /// wrapped by a gateway.
    #[test]
    fn googles_retry_delays_are_honoured() {
        let google = r#"{"error":{"code":429,"message":"You exceeded your current quota. Please retry in 35.480539813s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"35s"}]}}"#;
        assert_eq!(
            class(429, None, google),
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(35))
            },
            "the structured detail first"
        );
        let array = format!("[{google}]");
        assert_eq!(
            class(429, None, &array),
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(35))
            }
        );
        let message_only = r#"{"error":{"code":429,"message":"Resource exhausted. Please retry in 2.5s.","status":"RESOURCE_EXHAUSTED"}}"#;
        assert_eq!(
            class(429, None, message_only),
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_millis(2_500))
            }
        );
        let wrapped = format!(
            r#"{{"error":{{"code":429,"message":"Provider returned error","metadata":{{"provider_name":"Google","raw":{}}}}}}}"#,
            serde_json::to_string(google).unwrap_or_default()
        );
        assert_eq!(
            class(429, None, &wrapped),
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(35))
            },
            "through a gateway"
        );
        assert_eq!(
            class(429, Some(Duration::from_secs(3)), google),
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(3))
            },
            "a header wins"
        );
    }

    /// A tool call the model failed to generate is the model's error, given back to it (issue
    /// 68, item 11), not a failure to retry: Groq's documented `tool_use_failed`, before the
    /// stream (an HTTP 400) or inside it.
    #[test]
    fn a_failed_tool_generation_goes_back_to_the_model() {
        let groq = r#"{"error":{"message":"Failed to call a function. Please adjust your prompt. See 'failed_generation' for more details.","type":"invalid_request_error","code":"tool_use_failed","failed_generation":"<function=lookup>{q: }"}}"#;
        let e = classify(400, None, groq);
        assert!(!e.is_retryable(), "{e:?}");
        assert_eq!(e.code(), "invalid_tool_call");
        let ModelErrorKind::InvalidToolCall { tool, message } = e.kind() else {
            panic!("{e:?}");
        };
        assert_eq!(tool.as_deref(), Some("lookup"));
        assert!(
            message.starts_with("Failed to call a function.")
                && message.ends_with("The call as written: <function=lookup>{q: }"),
            "{message}"
        );
        let value: Value = serde_json::from_str(groq).unwrap_or_default();
        assert_eq!(error_event(&value).kind(), e.kind());
        let json = serde_json::json!({"error": {"code": "tool_use_failed", "message": "m",
            "failed_generation": "[{\"name\": \"search_docs\", \"arguments\": {\"q\": 1"}});
        assert!(matches!(
            error_event(&json).kind(),
            ModelErrorKind::InvalidToolCall { tool: None, .. }
        ));
        let json = serde_json::json!({"error": {"code": "tool_use_failed", "message": "m",
            "failed_generation": "{\"name\": \"search_docs\", \"arguments\": \"{\"}"}});
        assert!(matches!(
            error_event(&json).kind(),
            ModelErrorKind::InvalidToolCall { tool: Some(t), .. } if t == "search_docs"
        ));
        assert_eq!(tool_named_in("<function=drop table>"), Some("drop".into()));
        assert_eq!(tool_named_in("<function=>"), None);
    }

    #[test]
    fn rate_limits_carry_the_delay_from_headers_or_message() {
        let body = r#"{"error":{"message":"Rate limit reached. Please try again in 26.604s. Visit x","type":"tokens","code":"rate_limit_exceeded"}}"#;
        assert_eq!(
            class(429, None, body),
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_millis(26_604))
            }
        );
        assert_eq!(
            class(429, Some(Duration::from_secs(3)), body),
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(3))
            }
        );
        let too_large = r#"{"error":{"message":"Request too large for gpt-4o: Limit 30000, Requested 36278.","code":"rate_limit_exceeded"}}"#;
        assert!(matches!(
            class(429, None, too_large),
            ModelErrorKind::BadRequest(_)
        ));
        assert!(!classify(429, None, too_large).is_retryable());
    }

    #[test]
    fn retry_after_headers_seconds_millis_and_dates() {
        let h = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(
            retry_after(h(&[("retry-after", "7")])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(h(&[("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(h(&[("retry-after", "1"), ("retry-after-ms", "0")])),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_after(h(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")])),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(h(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(h(&[])), None);
    }

    #[test]
    fn delays_in_messages() {
        assert_eq!(
            delay_in_message("Try again in 1m3.5s."),
            Some(Duration::from_millis(63_500))
        );
        assert_eq!(
            delay_in_message("please try again in 500ms"),
            Some(Duration::from_millis(500))
        );
        assert_eq!(delay_in_message("try again later"), None);
    }

    #[test]
    fn stream_errors_say_whether_to_retry() {
        assert!(stream_error("overloaded_error", "Overloaded").is_retryable());
        assert!(!stream_error("invalid_request_error", "no").is_retryable());
        assert_eq!(
            *stream_error("", "prompt is too long").kind(),
            ModelErrorKind::ContextLengthExceeded
        );
    }
}
