//! The server over real HTTP and WebSockets on loopback: resolvers, auth, subscriptions, limits,
//! health, and the committed schema.

#![allow(clippy::unwrap_used)]

mod auth_tests;
mod browser_tests;
mod citation_tests;
mod console_tests;
mod fairness_tests;
mod files_tests;
mod hardening_tests;
mod keys_tests;
mod live_tests;
mod load_tests;
mod paging_tests;
mod resolver_tests;
mod subscription_tests;
mod support;
mod telemetry_tests;
mod threads_tests;
