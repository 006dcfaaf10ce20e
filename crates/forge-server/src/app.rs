//! What an application's own routes beside Forge's need, so each application does not write it
//! again: the signed-in caller as an extractor ([`Caller`], checked before the body is read), a
//! JSON body refused in JSON ([`JsonBody`]), and errors in Forge's shape ([`json_error`]):
//! `{"errors": [{"message", "extensions": {"code"}}]}`, as GraphQL answers.
//!
//! ```
//! use std::sync::Arc;
//!
//! use axum::extract::FromRef;
//! use axum::routing::post;
//! use forge_server::Authenticator;
//! use forge_server::app::{Caller, JsonBody};
//!
//! #[derive(Clone)]
//! struct Api {
//!     auth: Arc<Authenticator>,
//! }
//!
//! impl FromRef<Api> for Arc<Authenticator> {
//!     fn from_ref(api: &Api) -> Self {
//!         api.auth.clone()
//!     }
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct Note {
//!     body: String,
//! }
//!
//! async fn add_note(Caller(scope): Caller, JsonBody(note): JsonBody<Note>) -> String {
//!     format!("{} wrote {} bytes", scope.principal_id().as_str(), note.body.len())
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let auth = Arc::new(Authenticator::hs256(b"a secret of at least thirty-two bytes!")?);
//! let routes: axum::Router = axum::Router::new()
//!     .route("/app/notes", post(add_note))
//!     .with_state(Api { auth });
//! # drop(routes);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use forge_core::scope::Scope;
use serde::de::DeserializeOwned;

use crate::Authenticator;

/// An error in Forge's shape: `{"errors": [{"message": …, "extensions": {"code": …}}]}`.
pub fn json_error(status: StatusCode, code: &str, message: &str) -> Response {
    crate::http::error_response(status, code, message)
}

/// The caller of an application's route, authenticated with Forge's tokens from the
/// `Authorization` header before anything of the body is read. A request without a valid token
/// is answered `401` with Forge's challenge, as GraphQL answers it. The state must give the
/// [`Authenticator`] (`Arc<Authenticator>: FromRef<State>`).
#[derive(Debug, Clone)]
pub struct Caller(pub Scope);

impl<S> FromRequestParts<S> for Caller
where
    Arc<Authenticator>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Arc::<Authenticator>::from_ref(state)
            .authenticate_request(&parts.headers)
            .map(Caller)
            .map_err(IntoResponse::into_response)
    }
}

/// A JSON request body of type `T`; one that is missing, not JSON or not a `T` is refused in
/// JSON (`BAD_REQUEST`, or `UNSUPPORTED_MEDIA_TYPE` without a JSON content type), with the
/// reason, never as plain text.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            Err(e) => {
                let code = if e.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
                    "UNSUPPORTED_MEDIA_TYPE"
                } else {
                    "BAD_REQUEST"
                };
                Err(json_error(e.status(), code, &e.body_text()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use axum::body::Body;
    use axum::routing::post;
    use tower::ServiceExt;

    use super::*;

    #[derive(Clone)]
    struct Api(Arc<Authenticator>);

    impl FromRef<Api> for Arc<Authenticator> {
        fn from_ref(api: &Api) -> Self {
            api.0.clone()
        }
    }

    #[derive(serde::Deserialize)]
    struct Note {
        body: String,
    }

    const SECRET: &[u8] = b"a secret of at least thirty-two bytes!";

    async fn call(token: Option<&str>, content_type: &str, body: &str) -> (StatusCode, String) {
        let auth = Arc::new(Authenticator::hs256(SECRET).unwrap());
        let app = axum::Router::new()
            .route(
                "/app/notes",
                post(
                    |Caller(s): Caller, JsonBody(n): JsonBody<Note>| async move {
                        format!("{}:{}", s.principal_id().as_str(), n.body)
                    },
                ),
            )
            .with_state(Api(auth));
        let mut req = axum::http::Request::post("/app/notes").header("content-type", content_type);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let res = app
            .oneshot(req.body(Body::from(body.to_owned())).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn token() -> String {
        let scope = Scope::parse("acme", "alice", &[]).unwrap();
        crate::auth::sign_hs256(SECRET, &scope, 60, chrono_now()).unwrap()
    }

    fn chrono_now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .try_into()
            .unwrap()
    }

    #[tokio::test]
    async fn the_caller_and_the_body_are_checked_and_refused_in_json() {
        let t = token();
        assert_eq!(
            call(Some(&t), "application/json", r#"{"body":"hi"}"#).await,
            (StatusCode::OK, "alice:hi".to_owned())
        );
        let (status, body) = call(None, "application/json", r#"{"body":"hi"}"#).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(body.contains("UNAUTHENTICATED"), "{body}");
        for (content_type, bad, code) in [
            ("application/json", "{", "BAD_REQUEST"),
            ("application/json", r#"{"body": 1}"#, "BAD_REQUEST"),
            ("text/plain", r#"{"body":"hi"}"#, "UNSUPPORTED_MEDIA_TYPE"),
        ] {
            let (status, body) = call(Some(&t), content_type, bad).await;
            assert!(status.is_client_error(), "{bad}: {status}");
            let json: serde_json::Value = serde_json::from_str(&body).expect("a JSON error");
            assert_eq!(
                json["errors"][0]["extensions"]["code"], code,
                "{bad}: {json}"
            );
            assert!(json["errors"][0]["message"].is_string());
        }
    }
}
