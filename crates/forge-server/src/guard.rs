//! One limit layer for both transports: an async-graphql extension, so a document sent over
//! `POST /graphql` and one sent in a graphql-ws `subscribe` are held to the same rules.
//!
//! - **Cost**: once a document validates, its cost (complexity) is taken from its tenant's
//!   bucket ([`crate::fair`]); a tenant out of cost, or in debt for bytes, gets `RATE_LIMITED`
//!   with `retryAfter` (seconds) instead of an execution.
//! - **Deadline**: each execution (a query, a mutation, each event of a subscription) ends
//!   with `TIMEOUT` past [`GuardSettings::execute_timeout`].
//! - **Response budget**: each execution's scalars are charged as they resolve
//!   ([`crate::budget`]); past [`GuardSettings::response_bytes`] the rest fail unresolved and
//!   the response is replaced by `RESPONSE_TOO_LARGE`. The bytes are charged to the tenant.
//! - **Codes**: every error leaving the schema has an `extensions.code`, async-graphql's own
//!   (parse, validation, coercion) included.
//!
//! Every refusal is counted in `forge.server.refusals_total` by `limit`.

use std::sync::Arc;
use std::time::Duration;

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextExecute, NextRequest, NextResolve,
    NextSubscribe, NextValidation, ResolveInfo,
};
use async_graphql::{Response, ServerError, ServerResult, ValidationResult, Value};
use forge_core::scope::Scope;
use forge_core::telemetry::{Instrument, Meter};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use parking_lot::Mutex;

use crate::budget::{ResponseBudget, is_scalar, json_size};
use crate::fair::{Ledger, Refused};

/// What the guard holds every execution to.
pub(crate) struct GuardSettings {
    /// Largest response of one execution, in bytes.
    pub(crate) response_bytes: usize,
    /// Longest one execution may take.
    pub(crate) execute_timeout: Duration,
    /// Each tenant's spending.
    pub(crate) ledger: Arc<Ledger>,
    /// Where refusals are counted.
    pub(crate) meter: Arc<dyn Meter>,
}

/// Installs the guard on a schema.
pub(crate) struct Guard(pub(crate) Arc<GuardSettings>);

impl ExtensionFactory for Guard {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(Guarded {
            settings: self.0.clone(),
            budget: Mutex::new(None),
        })
    }
}

/// The guard of one request (or one subscription, across its events).
struct Guarded {
    settings: Arc<GuardSettings>,
    /// The budget of the execution in progress.
    budget: Mutex<Option<Arc<ResponseBudget>>>,
}

/// An error with a `code` (and further extensions).
pub(crate) fn coded(code: &str, message: impl Into<String>) -> ServerError {
    let mut e = ServerError::new(message, None);
    e.extensions
        .get_or_insert_with(Default::default)
        .set("code", code);
    e
}

/// The refusal of a tenant past its spending, with when to retry.
fn rate_limited(refused: Refused) -> ServerError {
    let seconds = refused.retry_after.as_secs_f64().ceil().max(1.0) as u64;
    let what = match refused.limit {
        "bytes" => "this tenant has used its bytes of response",
        "principal_bytes" => "you have used your share of this tenant's bytes of response",
        "principal_cost" => "you have used your share of this tenant's query cost",
        _ => "this tenant has used its query cost",
    };
    let mut e = coded(
        "RATE_LIMITED",
        format!("{what} for now; retry in {seconds} s"),
    );
    if let Some(x) = e.extensions.as_mut() {
        x.set("retryAfter", seconds);
        x.set("limit", refused.limit);
    }
    e
}

/// Counts a refusal of `limit` in `forge.server.refusals_total`.
pub(crate) fn count_refusal(meter: &dyn Meter, limit: &str) {
    meter.record(Instrument::Refusals, 1.0, &[("limit", limit)]);
}

impl Guarded {
    fn budget(&self) -> Option<Arc<ResponseBudget>> {
        self.budget.lock().clone()
    }
}

#[async_trait::async_trait]
impl Extension for Guarded {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let mut response = next.run(ctx).await;
        add_codes(&mut response);
        response
    }

    fn subscribe<'s>(
        &self,
        ctx: &ExtensionContext<'_>,
        stream: BoxStream<'s, Response>,
        next: NextSubscribe<'_>,
    ) -> BoxStream<'s, Response> {
        next.run(ctx, stream)
            .map(|mut response| {
                add_codes(&mut response);
                response
            })
            .boxed()
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next.run(ctx).await?;
        if let Some(scope) = ctx.data_opt::<Scope>()
            && let Err(refused) = self.settings.ledger.spend_cost(scope, result.complexity)
        {
            count_refusal(self.settings.meter.as_ref(), refused.limit);
            return Err(vec![rate_limited(refused)]);
        }
        Ok(result)
    }

    async fn execute(
        &self,
        ctx: &ExtensionContext<'_>,
        operation_name: Option<&str>,
        next: NextExecute<'_>,
    ) -> Response {
        let budget = ResponseBudget::new(self.settings.response_bytes);
        *self.budget.lock() = Some(budget.clone());
        let executing = next.run(ctx, operation_name);
        let response = match tokio::time::timeout(self.settings.execute_timeout, executing).await {
            Ok(_) if budget.exceeded() => {
                count_refusal(self.settings.meter.as_ref(), "response_bytes");
                Response::from_errors(vec![coded(
                    "RESPONSE_TOO_LARGE",
                    format!(
                        "the response is larger than {} bytes: select less, or page with limit",
                        self.settings.response_bytes
                    ),
                )])
            }
            Ok(response) => response,
            Err(_) => {
                count_refusal(self.settings.meter.as_ref(), "execute_time");
                Response::from_errors(vec![coded("TIMEOUT", "the request took too long")])
            }
        };
        if let Some(scope) = ctx.data_opt::<Scope>() {
            self.settings.ledger.spend_bytes(scope, budget.spent());
        }
        response
    }

    async fn resolve(
        &self,
        ctx: &ExtensionContext<'_>,
        info: ResolveInfo<'_>,
        next: NextResolve<'_>,
    ) -> ServerResult<Option<Value>> {
        let Some(budget) = self.budget() else {
            return next.run(ctx, info).await;
        };
        if budget.exceeded() {
            return Err(spent());
        }
        let scalar = is_scalar(info.return_type);
        let value = next.run(ctx, info).await?;
        // Objects are charged through their own fields; only scalars hold bytes of their own.
        if scalar && !budget.charge(value.as_ref().map_or(4, json_size)) {
            return Err(spent());
        }
        Ok(value)
    }
}

fn spent() -> ServerError {
    ServerError::new("the response budget is spent", None)
}

/// Gives errors that async-graphql produced without one (parse, validation, coercion) a `code`.
pub(crate) fn add_codes(response: &mut Response) {
    for e in &mut response.errors {
        let has_code = e
            .extensions
            .as_ref()
            .is_some_and(|x| x.get("code").is_some());
        if has_code {
            continue;
        }
        let code = if e.path.is_empty() {
            "GRAPHQL_VALIDATION_FAILED"
        } else {
            "BAD_REQUEST"
        };
        e.extensions
            .get_or_insert_with(Default::default)
            .set("code", code);
    }
}
