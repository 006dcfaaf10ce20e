//! A small CRM on Forge, in the spirit of Twenty: companies, people, opportunities, notes and
//! tasks in its own database; an assistant that reads and changes them through the MCP server
//! the CRM ships, answers from the notes with citations, and changes a record only with a
//! manager's approval; Cedar policies deciding who sees which pipeline and which notes.
//!
//! - [`db`]: the CRM's schema, sample data and queries.
//! - [`mcp`]: its MCP server (stdio), which Forge imports.
//! - [`app`]: the assistant, the import, the notes' indexing.
//! - [`http`]: the CRM's own API beside Forge's.
//! - [`run`]: everything started together.

pub mod app;
pub mod db;
pub mod http;
pub mod mcp;
pub mod run;

pub use app::{Crm, CrmError};
pub use db::{CrmDb, Note, Opportunity};
pub use run::{Options, Running, StoreChoice};

/// `serve`'s development sign-in switches: off unless asked for.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct DevSignInArgs {
    /// Development sign-in in the web client: `POST /auth/dev` hands out a token for any
    /// tenant, principal and roles. For development only; refused on a listener that is not a
    /// loopback address unless `--dev-sign-in-anywhere`.
    #[arg(long, env = "CRM_DEV_SIGN_IN")]
    pub dev_sign_in: bool,
    /// With `--dev-sign-in`: serve it on any listener (anyone who reaches the server can then
    /// sign in as anyone).
    #[arg(long, env = "CRM_DEV_SIGN_IN_ANYWHERE", requires = "dev_sign_in")]
    pub dev_sign_in_anywhere: bool,
}
