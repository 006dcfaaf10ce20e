//! Live run streams: what a subscriber sees of a run, from its committed log and from the step in
//! flight, with no gap and no duplicate.
//!
//! Three shared pieces serve every subscriber of a process:
//! - [`EventBus`] carries wake-ups ("this run has new events", never the events) to subscribers;
//! - [`LiveTail`] keeps, per tenant and run, the uncommitted events of the step in flight, fed by
//!   the in-process worker's `forge_engine::LiveObserver` and, across processes, by a pub/sub adapter;
//! - [`LogCache`] keeps the recent committed events, so one store read serves many subscribers.
//!
//! [`run_events`] and [`thread_events`] drive a `forge_core::stream::Follower` per run over them
//! and yield `forge_core::stream::StreamItem`s: committed events, provisional ones, and the
//! confirm / discard markers that reconcile the two. The GraphQL subscriptions and `forge run`
//! both read runs through these streams.

#![deny(missing_docs)]

mod bus;
mod cache;
mod stream;
mod tail;

pub use bus::{EventBus, Wake};
pub use cache::LogCache;
pub use stream::{StreamContext, StreamError, StreamSettings, run_events, thread_events};
pub use tail::{LiveTail, TailLimits};
