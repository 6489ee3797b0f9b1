//! The HTTP serving stack shared by the controller's API and `tern sim serve`: bearer-token
//! auth, JSON error bodies for every rejection (axum's own included), TLS on the listener,
//! and one accept loop that bounds what clients may hold (connections, slow or idle ones).
//! It stands alone in the library, so both servers use it without depending on each other.

pub mod auth;
pub mod connections;
pub mod errors;
pub mod tls;

pub use connections::ConnectionLimits;

use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{flag}: {reason}")]
    Token { flag: String, reason: String },
    #[error("{path}: {reason}")]
    Pem { path: String, reason: String },
    #[error("TLS certificate {cert} and key {key} do not make a server configuration: {reason}")]
    Tls {
        cert: String,
        key: String,
        reason: String,
    },
    #[error("serving HTTP: {0}")]
    Io(#[from] std::io::Error),
}

/// Serve `router` on `listener`, in TLS when `tls` is given, within the default
/// [`ConnectionLimits`]; runs until the runtime stops. (`router` answers errors in JSON
/// itself: see [`errors::json_errors`].)
pub async fn run(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
) -> Result<(), ServeError> {
    run_within(listener, tls, router, ConnectionLimits::default()).await
}

/// As [`run`], within `limits`.
pub async fn run_within(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    limits: ConnectionLimits,
) -> Result<(), ServeError> {
    connections::serve(listener, tls, router, limits).await?;
    Ok(())
}

/// `http` or `https`, for log lines that show where a server listens.
pub fn scheme(tls: Option<&Arc<rustls::ServerConfig>>) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
}
