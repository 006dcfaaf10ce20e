//! The CRM's own HTTP API beside Forge's, authenticated with Forge's tokens.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /crm/opportunities` | the opportunities the policies let the caller read |
//! | `POST /crm/notes` | add a note (`{record_kind, record_id, body, visibility}`), indexed for search |
//!
//! The caller is Forge's token ([`Caller`], checked before the body is read); errors are Forge's
//! shape, as GraphQL's: `{"errors": [{"message", "extensions": {"code"}}]}`.

use std::sync::Arc;

use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use forge::server::Authenticator;
use forge::server::app::{Caller, JsonBody, json_error};
use serde::Deserialize;

use crate::app::{Crm, CrmError};
use crate::db::{Note, Opportunity};

#[derive(Clone)]
struct Api {
    crm: Arc<Crm>,
    auth: Arc<Authenticator>,
}

impl FromRef<Api> for Arc<Authenticator> {
    fn from_ref(api: &Api) -> Self {
        api.auth.clone()
    }
}

/// The API's routes.
pub fn router(crm: Arc<Crm>, auth: Arc<Authenticator>) -> Router {
    Router::new()
        .route("/crm/opportunities", get(opportunities))
        .route("/crm/notes", post(add_note))
        // The CRM's namespace answers in JSON: an unknown path is not the web client's page.
        .route("/crm", any(not_found))
        .route("/crm/{*rest}", any(not_found))
        .with_state(Api { crm, auth })
}

async fn not_found() -> Response {
    json_error(StatusCode::NOT_FOUND, "NOT_FOUND", "no such CRM route")
}

impl IntoResponse for CrmError {
    fn into_response(self) -> Response {
        let (status, code) = match self {
            CrmError::Invalid(_) => (StatusCode::BAD_REQUEST, "BAD_REQUEST"),
            CrmError::NotFound(_) => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            CrmError::Forbidden(_) => (StatusCode::FORBIDDEN, "FORBIDDEN"),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"),
        };
        json_error(status, code, &self.to_string())
    }
}

async fn opportunities(
    State(api): State<Api>,
    Caller(scope): Caller,
) -> Result<Json<Vec<Opportunity>>, CrmError> {
    Ok(Json(api.crm.opportunities(&scope).await?))
}

#[derive(Deserialize)]
struct NewNote {
    record_kind: String,
    record_id: String,
    body: String,
    visibility: String,
}

async fn add_note(
    State(api): State<Api>,
    Caller(scope): Caller,
    JsonBody(new): JsonBody<NewNote>,
) -> Result<(StatusCode, Json<Note>), CrmError> {
    let note = Note {
        id: String::new(),
        record_kind: new.record_kind,
        record_id: new.record_id,
        body: new.body,
        visibility: new.visibility,
        author: String::new(),
    };
    let note = api.crm.add_note(&scope, note).await?;
    Ok((StatusCode::CREATED, Json(note)))
}
