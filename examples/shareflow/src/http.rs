//! ShareFlow's HTTP API, beside Forge's GraphQL API and web client on the same server. Every
//! request carries a Forge bearer token; its tenant, principal and roles are the caller.
//!
//! | route | who | what |
//! | --- | --- | --- |
//! | `POST /app/documents` | editor | drop a document (`{id, title, body, publish_at?}`) |
//! | `GET /app/documents` | anyone | the tenant's documents and their progress |
//! | `GET /app/workflow` | anyone | the tenant's workflow flag |
//! | `PUT /app/workflow` | admin | turn it (`{workflow: "agent" \| "legacy"}`); back to legacy is the rollback |
//! | `GET /app/posts` | anyone | the publishing service's deliveries for the tenant |

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Json, Router};
use forge::server::Authenticator;
use serde::Deserialize;

use crate::app::{AppError, NewDocument, ShareFlow};
use crate::db::Workflow;

#[derive(Clone)]
struct Api {
    app: Arc<ShareFlow>,
    auth: Arc<Authenticator>,
}

/// The API's routes.
pub fn router(app: Arc<ShareFlow>, auth: Arc<Authenticator>) -> Router {
    Router::new()
        .route("/app/documents", get(documents).post(drop_document))
        .route("/app/workflow", get(workflow).put(set_workflow))
        .route("/app/posts", get(posts))
        // The application's namespace answers in JSON: an unknown path is not the web client's
        // page.
        .route("/app", any(not_found))
        .route("/app/{*rest}", any(not_found))
        .with_state(Api { app, auth })
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such ShareFlow route".into())
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = match &self {
            AppError::Invalid(_) => StatusCode::BAD_REQUEST,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::Conflict(_) => StatusCode::CONFLICT,
            AppError::Db(_) | AppError::Forge(_) | AppError::Config(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        };
        error(status, self.to_string())
    }
}

async fn drop_document(
    State(api): State<Api>,
    headers: HeaderMap,
    Json(new): Json<NewDocument>,
) -> Response {
    let scope = match api.auth.authenticate_request(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match api.app.drop_document(&scope, new).await {
        Ok(doc) => (StatusCode::CREATED, Json(doc)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn documents(State(api): State<Api>, headers: HeaderMap) -> Response {
    let scope = match api.auth.authenticate_request(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match api.app.documents(&scope).await {
        Ok(docs) => Json(docs).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn workflow(State(api): State<Api>, headers: HeaderMap) -> Response {
    let scope = match api.auth.authenticate_request(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match api.app.workflow(&scope).await {
        Ok(w) => Json(serde_json::json!({ "workflow": w })).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
struct SetWorkflow {
    workflow: Workflow,
}

async fn set_workflow(
    State(api): State<Api>,
    headers: HeaderMap,
    Json(body): Json<SetWorkflow>,
) -> Response {
    let scope = match api.auth.authenticate_request(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match api.app.set_workflow(&scope, body.workflow).await {
        Ok(change) => Json(change).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn posts(State(api): State<Api>, headers: HeaderMap) -> Response {
    let scope = match api.auth.authenticate_request(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match api.app.posts(&scope).await {
        Ok(p) => Json(p).into_response(),
        Err(e) => e.into_response(),
    }
}
