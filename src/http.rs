//! The one HTTP client stack of the process (reqwest on rustls with ring): the CLI, the agent's
//! controller reports and metadata polls, and the remote simulated cloud all share it, so
//! connections are reused and every request has a connect and a total timeout.

use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::sync::OnceLock;
use std::time::Duration;

/// Connect timeout: a controller or metadata server that does not answer a TCP handshake in
/// this long is down or unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Whole-request timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A pooled connection unused this long is closed by the client: sooner than tern's servers
/// close an idle one (`--header-timeout`, 10 s by default), so a request is not sent on a
/// connection the server is closing at that moment.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("building the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    #[error("reading the CA certificate {path}: {reason}")]
    Ca { path: String, reason: String },
}

/// rustls needs one process-wide crypto provider; ring keeps the default build free of C
/// toolchains beyond what the rest of tern needs. Public for processes that build a rustls
/// config before any HTTP client (the Terraform provider's gRPC server): a build that also
/// links aws-lc-rs (the AWS SDK feature) has no automatic default.
pub fn install_crypto() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // Err means another part of the process installed one first: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client with tern's timeouts; `ca` adds a PEM certificate to the trusted roots (a private
/// CA for a controller's TLS certificate).
pub fn client_with_ca(ca: Option<&Path>) -> Result<reqwest::Client, HttpError> {
    install_crypto();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .user_agent(concat!("tern/", env!("CARGO_PKG_VERSION")));
    if let Some(path) = ca {
        let ca_err = |reason: String| HttpError::Ca {
            path: path.display().to_string(),
            reason,
        };
        let pem = tern_cloud::input::read_capped(path, tern_cloud::input::Limit::SETTINGS)
            .map_err(|e| ca_err(e.to_string()))?;
        let ders = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ca_err(format!("not a PEM certificate: {e}")))?;
        if ders.is_empty() {
            return Err(ca_err("no CERTIFICATE block in the file".into()));
        }
        for der in ders {
            let cert = reqwest::Certificate::from_der(&der).map_err(|e| ca_err(e.to_string()))?;
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(HttpError::Build)
}

/// A client with tern's timeouts and the system's trusted roots.
pub fn client() -> Result<reqwest::Client, HttpError> {
    client_with_ca(None)
}
