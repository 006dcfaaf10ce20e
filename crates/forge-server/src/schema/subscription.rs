//! Subscriptions, over `graphql-transport-ws`.

use super::*;

/// The last event a client saw of one run.
#[derive(InputObject)]
pub struct RunCursor {
    /// The run.
    run_id: ID,
    /// The last sequence number seen.
    seq: u64,
}

/// Subscriptions, over `graphql-transport-ws`.
pub struct Subscriptions;

type EventStream =
    std::pin::Pin<Box<dyn Stream<Item = async_graphql::Result<RunStreamItemObject>> + Send>>;

#[Subscription]
impl Subscriptions {
    /// A run's committed events after `afterSeq`, then the step in flight as it is produced
    /// (`PROVISIONAL` events, then `CONFIRMED` by its commit or `DISCARDED` if the step is
    /// executed again); completes after the run's committed terminal event. With `live: false`,
    /// committed events only. To resume, drop provisional events and pass the last committed
    /// `seq`: no gap, no duplicate.
    async fn run_events(
        &self,
        ctx: &Context<'_>,
        run_id: ID,
        #[graphql(default = 0)] after_seq: u64,
        #[graphql(default = true)] live: bool,
    ) -> async_graphql::Result<EventStream> {
        let (scope, app) = (scope(ctx)?.clone(), state(ctx)?.clone());
        let run = get_run(ctx, &run_id).await?;
        let stream = bus::run_events(app.streams(live), &app.bus, scope, run.id, after_seq);
        Ok(Box::pin(
            stream.map(|r| r.map(RunStreamItemObject).map_err(store_error)),
        ))
    }

    /// Every run's items on a thread, as `runEvents` gives them. Each run's items come in order
    /// without gaps or duplicates; overlapping runs interleave. To resume, pass the last committed
    /// `seq` of each run in `after`; runs not named start from their first event.
    async fn thread_events(
        &self,
        ctx: &Context<'_>,
        thread_id: ID,
        #[graphql(default)] after: Vec<RunCursor>,
        #[graphql(default = true)] live: bool,
    ) -> async_graphql::Result<EventStream> {
        let (scope, app) = (scope(ctx)?.clone(), state(ctx)?.clone());
        let thread: ThreadId = parse_id(&thread_id, "thread")?;
        app.engine
            .threads()
            .get_thread(&scope, thread)
            .await
            .map_err(store_error)?;
        thread_access(ctx, thread, PolicyAction::Read, "thread")?;
        let after = after
            .iter()
            .map(|c| Ok((parse_id::<RunId>(&c.run_id, "run")?, c.seq)))
            .collect::<async_graphql::Result<Vec<_>>>()?;
        let stream = bus::thread_events(app.streams(live), &app.bus, scope, thread, after);
        Ok(Box::pin(
            stream.map(|r| r.map(RunStreamItemObject).map_err(store_error)),
        ))
    }
}
