//! The controller service through its HTTP API: submit, status, cancel, state across restarts, and TLS.

#[path = "../common/mod.rs"]
mod common;

mod controller_api;
mod controller_quotas;
mod controller_state;
mod controller_tls;
mod controller_tokens;
mod slow_clients;
mod terminal_text;
