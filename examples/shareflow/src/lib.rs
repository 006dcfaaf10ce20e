//! ShareFlow: a team drops documents; an agent drafts a post grounded in each, citing the
//! sentence it rests on; a reviewer approves the post in Forge's web client; the approved post is
//! published, now or at its scheduled time, to an external publishing service that records
//! deliveries by idempotency key. A per-tenant flag routes documents between the legacy
//! deterministic workflow and the agent; turning it back mid-flight loses and duplicates nothing.
//!
//! An application on Forge's public crates only: the engine and a worker (`forge-engine`), the
//! GraphQL server and web client (`forge-server`), retrieval and citations (`forge-rag`), Cedar
//! policies (`forge-policy`), and the SQLite or PostgreSQL store.
//!
//! - [`app`]: documents dropped, drafted and routed by the flag.
//! - [`workflow`]: publishing, settling ended drafts, and the flag's work as a durable Forge run.
//! - [`http`]: ShareFlow's own HTTP API, served beside Forge's.
//! - `review`: what a reviewer sees before approving a post (the approval's preview).
//! - [`publisher`] and [`client`]: the external service and ShareFlow's client of it.
//! - [`db`]: ShareFlow's own database.
//! - [`run`]: everything started together, as `shareflow serve` and the tests start it.

pub mod app;
pub mod client;
pub mod db;
pub mod http;
pub mod publisher;
mod review;
pub mod run;
pub mod workflow;

pub use app::{AppError, NewDocument, ShareFlow};
pub use client::{PublisherClient, delivery_key};
pub use db::{AppDb, Document, Workflow};
pub use publisher::{Delivery, PostRequest, Publisher};
pub use run::{Options, Running, StoreChoice};
pub use workflow::FlagChange;

/// The secret `shareflow serve` signs and checks tokens with when `SHAREFLOW_JWT_SECRET` is not
/// set: for development only.
pub const DEV_SECRET: &str = "shareflow-development-secret-0123456789";

/// `serve`'s development sign-in switches: off unless asked for.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct DevSignInArgs {
    /// Development sign-in in the web client: `POST /auth/dev` hands out a token for any
    /// tenant, principal and roles. For development only; refused on a listener that is not a
    /// loopback address unless `--dev-sign-in-anywhere`.
    #[arg(long, env = "SHAREFLOW_DEV_SIGN_IN")]
    pub dev_sign_in: bool,
    /// With `--dev-sign-in`: serve it on any listener (anyone who reaches the server can then
    /// sign in as anyone).
    #[arg(long, env = "SHAREFLOW_DEV_SIGN_IN_ANYWHERE", requires = "dev_sign_in")]
    pub dev_sign_in_anywhere: bool,
}
