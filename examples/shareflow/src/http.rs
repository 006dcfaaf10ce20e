//! ShareFlow's HTTP API, beside Forge's GraphQL API and web client on the same server. Every
//! request carries a Forge bearer token; its tenant, principal and roles are the caller
//! ([`Caller`], checked before the body is read). Errors are Forge's shape, as GraphQL's:
//! `{"errors": [{"message", "extensions": {"code"}}]}`.
//!
//! | route | who | what |
//! | --- | --- | --- |
//! | `POST /app/documents` | editor | drop a document (`{id, title, body, publish_at?}`) |
//! | `GET /app/documents` | anyone | the tenant's documents and their progress |
//! | `GET /app/workflow` | anyone | the tenant's workflow flag |
//! | `PUT /app/workflow` | admin | turn it (`{workflow: "agent" \| "legacy"}`); back to legacy is the rollback |
//! | `GET /app/posts` | anyone | the publishing service's deliveries for the tenant |

use std::sync::Arc;

use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Json, Router};
use forge::server::Authenticator;
use forge::server::app::{Caller, JsonBody, json_error};
use serde::Deserialize;

use crate::app::{AppError, NewDocument, ShareFlow};
use crate::db::Workflow;

#[derive(Clone)]
struct Api {
    app: Arc<ShareFlow>,
    auth: Arc<Authenticator>,
}

impl FromRef<Api> for Arc<Authenticator> {
    fn from_ref(api: &Api) -> Self {
        api.auth.clone()
    }
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
    json_error(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "no such ShareFlow route",
    )
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            AppError::Invalid(_) => (StatusCode::BAD_REQUEST, "BAD_REQUEST"),
            AppError::Forbidden(_) => (StatusCode::FORBIDDEN, "FORBIDDEN"),
            AppError::Conflict(_) => (StatusCode::CONFLICT, "CONFLICT"),
            AppError::Db(_) | AppError::Forge(_) | AppError::Config(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE")
            }
        };
        json_error(status, code, &self.to_string())
    }
}

async fn drop_document(
    State(api): State<Api>,
    Caller(scope): Caller,
    JsonBody(new): JsonBody<NewDocument>,
) -> Result<(StatusCode, Json<crate::db::Document>), AppError> {
    let doc = api.app.drop_document(&scope, new).await?;
    Ok((StatusCode::CREATED, Json(doc)))
}

async fn documents(
    State(api): State<Api>,
    Caller(scope): Caller,
) -> Result<Json<Vec<crate::db::Document>>, AppError> {
    Ok(Json(api.app.documents(&scope).await?))
}

async fn workflow(
    State(api): State<Api>,
    Caller(scope): Caller,
) -> Result<Json<serde_json::Value>, AppError> {
    let w = api.app.workflow(&scope).await?;
    Ok(Json(serde_json::json!({ "workflow": w })))
}

#[derive(Deserialize)]
struct SetWorkflow {
    workflow: Workflow,
}

async fn set_workflow(
    State(api): State<Api>,
    Caller(scope): Caller,
    JsonBody(body): JsonBody<SetWorkflow>,
) -> Result<Json<crate::workflow::FlagChange>, AppError> {
    Ok(Json(api.app.set_workflow(&scope, body.workflow).await?))
}

async fn posts(
    State(api): State<Api>,
    Caller(scope): Caller,
) -> Result<Json<Vec<crate::publisher::Delivery>>, AppError> {
    Ok(Json(api.app.posts(&scope).await?))
}
