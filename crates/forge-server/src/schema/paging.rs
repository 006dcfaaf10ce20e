//! Relay-style connections over what grows without bound — a thread's messages and runs, the
//! tenant's pending interactions — read from the store one page at a time. A cursor is the id
//! of an item (opaque to clients); pages read later never shift because items are only appended.

use async_graphql::connection::{Connection, Edge, query};
use forge_core::id::{InteractionId, MessageId};
use forge_core::message::Message;
use forge_core::ports::store::{MessageWindow, RunQuery};

use super::*;

/// The page size when a query names none.
pub const DEFAULT_PAGE: usize = 50;

/// The largest page a query may ask for.
pub const MAX_PAGE: usize = 500;

/// What a connection counts toward a query's complexity: its page size (as asked, within
/// `0..=MAX_PAGE`, or the default) times the complexity of one item's selection.
pub(crate) fn weight(size: Option<i32>, child_complexity: usize) -> usize {
    let n = size.map_or(DEFAULT_PAGE, |n| {
        usize::try_from(n).unwrap_or(0).min(MAX_PAGE)
    });
    n.max(1).saturating_mul(child_complexity)
}

/// A page size: `first` or `last`, at most [`MAX_PAGE`].
fn size(first: Option<usize>, last: Option<usize>) -> async_graphql::Result<usize> {
    let n = first.or(last).unwrap_or(DEFAULT_PAGE);
    if n > MAX_PAGE {
        return Err(error(
            "BAD_REQUEST",
            format!("a page holds at most {MAX_PAGE} items"),
        ));
    }
    Ok(n)
}

fn cursor<T: FromStr>(raw: Option<String>, what: &str) -> async_graphql::Result<Option<T>> {
    raw.map(|c| {
        c.parse::<T>()
            .map_err(|_| error("BAD_REQUEST", format!("{c:?} is not a {what} cursor")))
    })
    .transpose()
}

/// A page as a connection: its items, each with its id as cursor, and whether pages lie before
/// and after it.
fn connection<T, N: async_graphql::OutputType>(
    previous: bool,
    next: bool,
    items: Vec<T>,
    cursor: impl Fn(&T) -> String,
    node: impl Fn(T) -> N,
) -> Connection<String, N> {
    let mut connection = Connection::new(previous, next);
    connection
        .edges
        .extend(items.into_iter().map(|i| Edge::new(cursor(&i), node(i))));
    connection
}

/// One message of a thread.
pub struct MessageObject(pub(crate) Message);

#[Object(name = "Message")]
impl MessageObject {
    /// Its id (also its cursor).
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    /// The run that wrote it.
    async fn run_id(&self) -> ID {
        ID(self.0.run_id.to_string())
    }
    /// `user`, `assistant` or `tool`.
    async fn role(&self) -> &'static str {
        self.0.role.name()
    }
    /// Its text parts joined.
    async fn text(&self) -> String {
        self.0.text()
    }
    /// Its parts in the wire encoding (`schemas/run-event.schema.json`).
    async fn parts(&self) -> Json<Value> {
        to_json(&self.0.parts)
    }
    /// Its parts, typed.
    async fn content(&self) -> Vec<super::typed::PartObject> {
        self.0.parts.iter().map(Into::into).collect()
    }
    /// When it was written (RFC 3339).
    async fn created_at(&self) -> String {
        self.0.created_at.to_string()
    }
}

/// What a thread's oldest messages are sent to models as, once compacted.
pub struct ThreadSummaryObject(pub(crate) forge_core::thread::ThreadSummary);

#[Object(name = "ThreadSummary")]
impl ThreadSummaryObject {
    /// Bumped by each compaction.
    async fn version(&self) -> u64 {
        self.0.version
    }
    /// The summary.
    async fn text(&self) -> &str {
        &self.0.text
    }
    /// The last message it covers; the messages after it are sent as they are.
    async fn through_message_id(&self) -> ID {
        ID(self.0.through.to_string())
    }
    /// How many messages, from the thread's first, it covers.
    async fn covered(&self) -> u64 {
        self.0.covered
    }
    /// The run that wrote it.
    async fn run_id(&self) -> ID {
        ID(self.0.run_id.to_string())
    }
    /// The model that wrote it.
    async fn model(&self) -> &str {
        &self.0.model
    }
    /// When it was written (RFC 3339).
    async fn created_at(&self) -> String {
        self.0.created_at.to_string()
    }
}

/// A thread's messages, oldest first: `first` after `after`, or `last` before `before`.
pub(crate) async fn messages(
    ctx: &Context<'_>,
    thread: ThreadId,
    after: Option<String>,
    before: Option<String>,
    first: Option<i32>,
    last: Option<i32>,
) -> async_graphql::Result<Connection<String, MessageObject>> {
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    query(
        after,
        before,
        first,
        last,
        |after: Option<String>, before: Option<String>, first, last| async move {
            let limit = size(first, last)?;
            let window = MessageWindow {
                after: cursor::<MessageId>(after, "message")?,
                before: cursor::<MessageId>(before, "message")?,
                limit: limit + 1,
                from_end: first.is_none() && last.is_some(),
            };
            let mut page = state
                .engine
                .threads()
                .page_messages(scope, thread, &window)
                .await
                .map_err(store_error)?;
            let more = page.len() > limit;
            if more {
                if window.from_end {
                    page.remove(0);
                } else {
                    page.pop();
                }
            }
            let (previous, next) = if window.from_end {
                (more, window.before.is_some())
            } else {
                (window.after.is_some(), more)
            };
            Ok::<_, async_graphql::Error>(connection(
                previous,
                next,
                page,
                |m| m.id.to_string(),
                MessageObject,
            ))
        },
    )
    .await
}

/// Runs, newest first — a thread's, or (`thread` `None`) the tenant's, in one state when
/// `status` names one: `first` after `after` (an older page each time).
pub(crate) async fn runs(
    ctx: &Context<'_>,
    filter: RunQuery,
    after: Option<String>,
    first: Option<i32>,
) -> async_graphql::Result<Connection<String, RunObject>> {
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    query(
        after,
        None,
        first,
        None,
        |after: Option<String>, _before: Option<String>, first, _last| async move {
            let limit = size(first, None)?;
            let query = RunQuery {
                before: cursor::<RunId>(after, "run")?,
                limit: limit + 1,
                ..filter
            };
            let mut page = state
                .engine
                .runs()
                .query_runs(scope, &query)
                .await
                .map_err(store_error)?;
            let more = page.len() > limit;
            page.truncate(limit);
            Ok::<_, async_graphql::Error>(connection(
                query.before.is_some(),
                more,
                page,
                |r| r.id.to_string(),
                RunObject,
            ))
        },
    )
    .await
}

/// The pending interactions the caller may act on, oldest first: `first` after `after`.
pub(crate) async fn pending(
    ctx: &Context<'_>,
    after: Option<String>,
    first: Option<i32>,
) -> async_graphql::Result<Connection<String, InteractionObject>> {
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    query(
        after,
        None,
        first,
        None,
        |after: Option<String>, _before: Option<String>, first, _last| async move {
            let limit = size(first, None)?;
            let after = cursor::<InteractionId>(after, "interaction")?;
            let (page, more) = state
                .engine
                .pending_interactions_page(scope, after, limit, |i| {
                    thread_access(ctx, i.thread_id, PolicyAction::Read, "thread").is_ok()
                })
                .await
                .map_err(client_error)?;
            Ok::<_, async_graphql::Error>(connection(
                after.is_some(),
                more,
                page,
                |i| i.id.to_string(),
                InteractionObject,
            ))
        },
    )
    .await
}

/// How many store pages filling one page of threads may read: a caller the policies let read
/// few of the tenant's threads gets a short page (with `hasNextPage`) rather than a long scan.
const THREAD_SCAN_PAGES: usize = 8;

/// The caller's threads (or, with `mine: false`, every thread of the tenant the policies let
/// the caller read), newest first: `first` after `after` (an older page each time); archived
/// ones only with `archived`.
pub(crate) async fn threads(
    ctx: &Context<'_>,
    after: Option<String>,
    first: Option<i32>,
    archived: bool,
    mine: bool,
) -> async_graphql::Result<Connection<String, ThreadObject>> {
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    query(
        after,
        None,
        first,
        None,
        |after: Option<String>, _before: Option<String>, first, _last| async move {
            let limit = size(first, None)?;
            let start = cursor::<ThreadId>(after, "thread")?;
            let mut window = forge_core::thread::ThreadWindow {
                before: start,
                limit: limit + 1,
                archived,
                created_by: mine.then(|| scope.principal_id().clone()),
            };
            let mut page = Vec::new();
            let mut exhausted = false;
            for _ in 0..THREAD_SCAN_PAGES {
                let read = state
                    .engine
                    .threads()
                    .page_threads(scope, &window)
                    .await
                    .map_err(store_error)?;
                exhausted = read.len() < window.limit;
                window.before = read.last().map(|t| t.id);
                page.extend(
                    read.into_iter()
                        .filter(|t| thread_access(ctx, t.id, PolicyAction::Read, "thread").is_ok()),
                );
                if exhausted || page.len() > limit {
                    break;
                }
            }
            let more = page.len() > limit || !exhausted;
            page.truncate(limit);
            Ok::<_, async_graphql::Error>(connection(
                start.is_some(),
                more,
                page,
                |t| t.id.to_string(),
                ThreadObject,
            ))
        },
    )
    .await
}
