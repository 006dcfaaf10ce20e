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

    /// The pending approvals and questions the caller may act on (as `pendingInteractions`
    /// lists them, at most 200), now and then each time the list changes: a decision anywhere,
    /// a run parking or expiring. Each item is the whole list, oldest first.
    async fn pending_interactions(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<
        std::pin::Pin<Box<dyn Stream<Item = async_graphql::Result<Vec<InteractionObject>>> + Send>>,
    > {
        let (scope, app) = (scope(ctx)?.clone(), state(ctx)?.clone());
        let wakes = app.bus.subscribe();
        let stream = pending_lists(app, scope, wakes);
        Ok(Box::pin(stream))
    }
}

/// The longest wait between two reads of the pending list when nothing wakes it (a decision
/// made through another process wakes no one here).
const PENDING_POLL: std::time::Duration = std::time::Duration::from_secs(3);

/// The most pending interactions one item of the subscription lists.
const PENDING_MAX: usize = 200;

/// Whether the caller may read `thread` under the policies.
fn may_read(app: &AppState, scope: &Scope, thread: ThreadId) -> bool {
    let id = thread.to_string();
    app.engine
        .authorize(&PolicyRequest {
            scope,
            action: PolicyAction::Read,
            resource: PolicyResource::Thread(&id),
            input: None,
        })
        .is_allowed()
}

/// Reads the pending list at start, then after each wake-up (or poll), yielding it when it
/// differs from the last list yielded; ends on shutdown.
fn pending_lists(
    app: Arc<AppState>,
    scope: Scope,
    wakes: tokio::sync::broadcast::Receiver<Wake>,
) -> impl Stream<Item = async_graphql::Result<Vec<InteractionObject>>> + Send {
    futures_util::stream::unfold(
        (app, scope, wakes, None::<Vec<String>>, true),
        |(app, scope, mut wakes, mut last, mut first)| async move {
            loop {
                if !first {
                    tokio::select! {
                        _ = app.shutdown.cancelled() => return None,
                        // Any wake-up may have raised or settled one; a lagged receiver has
                        // missed some, which a read covers too.
                        _ = wakes.recv() => {
                            // Let a burst of wake-ups (a step's events) settle into one read.
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            while wakes.try_recv().is_ok() {}
                        }
                        _ = tokio::time::sleep(PENDING_POLL) => {}
                    }
                }
                first = false;
                let read = app
                    .engine
                    .pending_interactions_page(&scope, None, PENDING_MAX, |i| {
                        may_read(&app, &scope, i.thread_id)
                    })
                    .await;
                let page = match read {
                    Ok((page, _)) => page,
                    Err(e) => {
                        return Some((Err(client_error(e)), (app, scope, wakes, last, first)));
                    }
                };
                let ids: Vec<String> = page
                    .iter()
                    .map(|i| format!("{}:{}", i.id, i.status.name()))
                    .collect();
                if last.as_ref() != Some(&ids) {
                    last = Some(ids);
                    let items = page.into_iter().map(InteractionObject).collect();
                    return Some((Ok(items), (app, scope, wakes, last, first)));
                }
            }
        },
    )
}
