//! Dead letters for the console: the caller's tenant's dead-lettered jobs, replayed or discarded
//! as `forge dlq` does (audited in the same transaction, a discarded job's run ended failed with
//! `dead_lettered`). The queue is cross-tenant (a [`SystemScope`]); every answer here is cut to
//! the caller's tenant, and another tenant's job is `NOT_FOUND`. For administrators (the power
//! `dead_letters`).

use forge_core::id::JobId;
use forge_core::ports::queue::{JobInfo, JobQueue, JobState};
use forge_core::scope::SystemScope;

use super::*;

/// How many dead jobs, across tenants, a listing reads before keeping the caller's.
const SCAN: usize = 10_000;

fn system() -> SystemScope {
    SystemScope::new("the console's dead letters")
}

/// The queue, or the error saying this server has none.
fn queue(state: &AppState) -> async_graphql::Result<&Arc<dyn JobQueue>> {
    state.dead_letters.as_ref().ok_or_else(|| {
        error(
            "NOT_AVAILABLE",
            "this server was started without access to the job queue's dead letters",
        )
    })
}

/// A dead-lettered job (or one just replayed or discarded).
pub struct DeadLetterObject(pub(crate) JobInfo);

#[Object(name = "DeadLetter")]
impl DeadLetterObject {
    /// The job.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    /// Its run.
    async fn run_id(&self) -> ID {
        ID(self.0.run_id.to_string())
    }
    /// `dead`, or after an operation `ready` (replayed) or `discarded`.
    async fn state(&self) -> &'static str {
        self.0.state.name()
    }
    /// Claims so far.
    async fn attempts(&self) -> u32 {
        self.0.attempts
    }
    /// Claims allowed.
    async fn max_attempts(&self) -> u32 {
        self.0.max_attempts
    }
    /// Why its last attempt failed.
    async fn last_error(&self) -> Option<&str> {
        self.0.last_error.as_deref()
    }
}

/// The caller's tenant's dead jobs, oldest first, at most `limit`.
pub(crate) async fn list(
    ctx: &Context<'_>,
    limit: usize,
) -> async_graphql::Result<Vec<DeadLetterObject>> {
    require_admin(ctx, "dead_letters", "the dead letters")?;
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let dead = queue(state)?
        .dead_jobs(&system(), SCAN)
        .await
        .map_err(store_error)?;
    Ok(dead
        .into_iter()
        .filter(|j| &j.tenant_id == scope.tenant_id())
        .take(limit)
        .map(DeadLetterObject)
        .collect())
}

/// One of the caller's tenant's jobs, which must be dead.
async fn dead(ctx: &Context<'_>, id: &ID) -> async_graphql::Result<JobInfo> {
    require_admin(ctx, "dead_letters", "the dead letters")?;
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let id: JobId = parse_id(id, "job")?;
    let job = queue(state)?
        .job(&system(), id)
        .await
        .map_err(store_error)?;
    if &job.tenant_id != scope.tenant_id() {
        return Err(not_found("job"));
    }
    if job.state != JobState::Dead {
        return Err(error(
            "CONFLICT",
            format!("job {id} is {}, not dead", job.state.name()),
        ));
    }
    Ok(job)
}

/// Makes a dead job ready again with a fresh attempt budget (audited for the caller).
pub(crate) async fn replay(ctx: &Context<'_>, id: &ID) -> async_graphql::Result<DeadLetterObject> {
    let job = dead(ctx, id).await?;
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let done = queue(state)?
        .replay(&system(), job.id, scope.principal_id().as_str())
        .await
        .map_err(store_error)?;
    Ok(DeadLetterObject(done))
}

/// Gives a dead job up (audited for the caller) and ends its run failed with `dead_lettered`
/// and `reason`.
pub(crate) async fn discard(
    ctx: &Context<'_>,
    id: &ID,
    reason: &str,
) -> async_graphql::Result<DeadLetterObject> {
    let job = dead(ctx, id).await?;
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let done = queue(state)?
        .discard(&system(), job.id, scope.principal_id().as_str())
        .await
        .map_err(store_error)?;
    state
        .engine
        .abandon(scope, done.run_id, reason)
        .await
        .map_err(client_error)?;
    Ok(DeadLetterObject(done))
}
