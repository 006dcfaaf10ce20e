//! Integration tests of forge-core's public contract: the JSON wire format of events and parts.

#![allow(clippy::unwrap_used)]

mod stream;
mod wire;
