//! tern as a library: the controller (its reconcile pass, state store, HTTP API and client),
//! the worker agent, job loading and the simulated cloud's server and client. The `tern`
//! binary (`src/main.rs`, `src/cmd/`) only parses arguments, calls this and prints.
//!
//! Which module may use which is one table in ARCHITECTURE.md ("Who may depend on whom"), and
//! `tests/repo/layers.rs` reads that table: roughly `http`, `serve`, `jobs` → `store` → `api::wire`,
//! `api::client`, `report` → `controller` → `api` (the server), `sim`, `agent`. Nothing here
//! imports the binary's `cmd`, and `anyhow` stays in the binary.

pub mod agent;
pub mod api;
pub mod controller;
pub mod event;
pub mod http;
pub mod jobs;
pub mod limits;
pub mod report;
pub mod scratch;
pub mod serve;
pub mod sim;
pub mod store;
pub mod terminal;

/// Test certificates (a private CA and a server certificate); never in a release build.
#[cfg(any(test, feature = "test-util"))]
pub mod test_certs;
