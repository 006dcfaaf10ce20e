//! The CRM's own HTTP API beside Forge's, authenticated with Forge's tokens.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /crm/opportunities` | the caller's opportunities; every one for a manager |
//! | `POST /crm/notes` | add a note (`{record_kind, record_id, body, visibility}`), indexed for search |

use std::sync::Arc;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use forge::server::Authenticator;
use serde::Deserialize;

use crate::app::{Crm, CrmError};
use crate::db::Note;

#[derive(Clone)]
struct Api {
    crm: Arc<Crm>,
    auth: Arc<Authenticator>,
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
    error(StatusCode::NOT_FOUND, "no such CRM route".into())
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

impl IntoResponse for CrmError {
    fn into_response(self) -> Response {
        let status = match self {
            CrmError::Invalid(_) => StatusCode::BAD_REQUEST,
            CrmError::NotFound(_) => StatusCode::NOT_FOUND,
            CrmError::Forbidden(_) => StatusCode::FORBIDDEN,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        error(status, self.to_string())
    }
}

async fn opportunities(State(api): State<Api>, headers: HeaderMap) -> Response {
    let scope = match api.auth.authenticate_request(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    if scope.tenant_id().as_str() != crate::app::TENANT {
        return Json(Vec::<crate::db::Opportunity>::new()).into_response();
    }
    let owner = (!scope.has_role("manager")).then(|| scope.principal_id().as_str().to_owned());
    match api.crm.db().opportunities(owner.as_deref()).await {
        Ok(list) => Json(list).into_response(),
        Err(e) => CrmError::from(e).into_response(),
    }
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
    headers: HeaderMap,
    body: Result<Json<NewNote>, JsonRejection>,
) -> Response {
    let scope = match api.auth.authenticate_request(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    // A body that is not the note's JSON is answered in JSON too, like every other error.
    let Json(new) = match body {
        Ok(body) => body,
        Err(e) => return error(e.status(), e.body_text()),
    };
    let note = Note {
        id: String::new(),
        record_kind: new.record_kind,
        record_id: new.record_id,
        body: new.body,
        visibility: new.visibility,
        author: String::new(),
    };
    match api.crm.add_note(&scope, note).await {
        Ok(n) => (StatusCode::CREATED, Json(n)).into_response(),
        Err(e) => e.into_response(),
    }
}
