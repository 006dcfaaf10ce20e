//! The file endpoints.
//!
//! - `POST /files?name=NAME[&index=LABEL][&label=LABEL]` — the body is the file, raw, with its
//!   declared type in `Content-Type`; bearer JWT as for GraphQL. `label` is the file's access
//!   label (by default `index`'s); without one the file is its uploader's alone. Streamed through `forge_files::Files`: a
//!   `Content-Length` past the tenant's limit is refused before the body is read, the body is
//!   cut off one byte past it, and a client that sends nothing for [`FileLimits::idle`] or
//!   takes longer than [`FileLimits::total`] is refused (`408`). `201` with the record and a
//!   signed reference; a refusal is `400`, `408`, `413`, `415`, `422` or `503` with a `code`.
//! - `GET /files/{reference}` — the bytes a signed reference grants, as an attachment
//!   (`nosniff`, a sandboxing CSP, no caching), to a caller authenticated as a member of the
//!   reference's tenant (bearer JWT); each download is audited `file.downloaded`. A reference
//!   that does not verify, has expired or names a deleted file, and a request without a token,
//!   with a bad one or with another tenant's, are the same `404`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use forge_files::{BodyError, Files, Refusal, Upload, UploadError};
use futures_util::StreamExt;

use crate::{Shared, authorization, http};

/// How slow an upload may be.
#[derive(Debug, Clone, Copy)]
pub struct FileLimits {
    /// Longest wait for the next piece of a body.
    pub idle: Duration,
    /// Longest a whole upload may take.
    pub total: Duration,
}

impl Default for FileLimits {
    /// 10 s between pieces, 5 minutes in all.
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(10),
            total: Duration::from_secs(300),
        }
    }
}

/// `name`, `index` and `label` of `POST /files`.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct UploadParams {
    name: String,
    index: Option<String>,
    label: Option<String>,
}

/// The body as pieces, each within `idle` of the last and all before `deadline`.
fn timed(
    body: Body,
    idle: Duration,
    deadline: Instant,
) -> impl futures_util::Stream<Item = Result<Bytes, BodyError>> + Send + Unpin {
    futures_util::stream::unfold(Some(body.into_data_stream()), move |stream| async move {
        let mut stream = stream?;
        let wait = idle.min(deadline.saturating_duration_since(Instant::now()));
        match tokio::time::timeout(wait, stream.next()).await {
            Err(_) => Some((Err(BodyError::TooSlow), None)),
            Ok(None) => None,
            Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(stream))),
            Ok(Some(Err(e))) => Some((Err(BodyError::Aborted(e.to_string())), None)),
        }
    })
    .boxed()
}

fn refusal_status(r: &Refusal) -> StatusCode {
    match r {
        Refusal::Empty | Refusal::BadName(_) | Refusal::BadLabel(_) => StatusCode::BAD_REQUEST,
        Refusal::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        Refusal::TooSlow => StatusCode::REQUEST_TIMEOUT,
        Refusal::Infected(_) => StatusCode::UNPROCESSABLE_ENTITY,
        Refusal::ScannerUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::UNSUPPORTED_MEDIA_TYPE,
    }
}

fn no_files() -> Response {
    http::error_response(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "this server does not store files",
    )
}

fn no_such_file() -> Response {
    http::error_response(StatusCode::NOT_FOUND, "NOT_FOUND", "no such file")
}

/// The record as clients see it, with a fresh reference.
pub(crate) fn file_json(files: &Files, record: &forge_files::FileRecord) -> serde_json::Value {
    let (reference, expires) = files.reference(record, None);
    serde_json::json!({
        "file": record,
        "reference": reference,
        "url": format!("/files/{reference}"),
        "reference_expires_at": expires,
    })
}

pub(crate) async fn upload(
    State(shared): State<Arc<Shared>>,
    Query(params): Query<UploadParams>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let scope = match shared.auth.authenticate_request(&headers) {
        Ok(scope) => scope,
        Err(e) => return e.into_response(),
    };
    let Some(files) = &shared.files else {
        return no_files();
    };
    let limit = files.policy().limit(scope.tenant_id());
    let declared_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared_length.is_some_and(|n| n > limit) {
        let r = Refusal::TooLarge { limit };
        files.audit_refusal(&scope, &r).await;
        return http::error_response(refusal_status(&r), r.code(), &r.to_string());
    }
    // A form encoding is what clients send when nobody chose a type: it declares nothing.
    let declared_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.starts_with("application/x-www-form-urlencoded"))
        .map(str::to_owned);
    let deadline = Instant::now() + shared.file_limits.total;
    let upload = Upload {
        name: params.name,
        declared_type,
        index_label: params.index,
        label: params.label,
    };
    match files
        .upload(
            &scope,
            upload,
            timed(body, shared.file_limits.idle, deadline),
        )
        .await
    {
        Ok(record) => (StatusCode::CREATED, axum::Json(file_json(files, &record))).into_response(),
        Err(UploadError::Refused(r)) => {
            http::error_response(refusal_status(&r), r.code(), &r.to_string())
        }
        Err(UploadError::Interrupted(_)) => http::error_response(
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
            "the upload was interrupted",
        ),
        Err(e) => {
            let code = match &e {
                UploadError::Failed(e) => forge_core::telemetry::error_code(e),
                _ => "upload",
            };
            let reference = crate::schema::internal(code);
            http::error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL",
                &format!("internal error (reference {reference})"),
            )
        }
    }
}

pub(crate) async fn download(
    State(shared): State<Arc<Shared>>,
    Path(reference): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(files) = &shared.files else {
        return no_files();
    };
    // A reference is a capability of its tenant's members: the caller must authenticate, as
    // one of them. No token, a bad one and another tenant's are the same `404` as a bad reference.
    let Ok(caller) = shared.auth.authenticate_header(authorization(&headers)) else {
        return no_such_file();
    };
    let Ok((record, bytes)) = files.open_reference(&reference, &caller).await else {
        return no_such_file();
    };
    let body = Body::from_stream(bytes.map(|chunk| chunk.map_err(std::io::Error::other)));
    let mut response = Response::new(body);
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&record.media_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(record.size_bytes));
    let encoded: String = record
        .name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename*=UTF-8''{encoded}")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    // `nosniff` comes with every response (`web::strict_headers`).
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    response
}
