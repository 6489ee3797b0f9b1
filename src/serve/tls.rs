//! TLS on a server's listener (`--tls-cert`/`--tls-key`): PEM files into a rustls server
//! configuration on ring. Handshakes run on each connection's own task, under its deadline
//! ([`super::connections`]), so a client that stalls its handshake holds up nobody else.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::ServeError;

fn pem_error(path: &Path, reason: impl std::fmt::Display) -> ServeError {
    ServeError::Pem {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// The certificate chain in a PEM file (server certificate first).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ServeError> {
    let pem = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(pem_error(path, "no CERTIFICATE block in the file"));
    }
    Ok(certs)
}

/// A PEM file's bytes, at most a settings file's size (a `/dev/zero` fails, not the memory).
fn read_pem(path: &Path) -> Result<Vec<u8>, ServeError> {
    tern_cloud::input::read_capped(path, tern_cloud::input::Limit::SETTINGS)
        .map_err(|e| pem_error(path, e))
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, ServeError> {
    let pem = read_pem(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        pem_error(
            path,
            format!("no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
        )
    })
}

/// A server configuration (TLS 1.2 and 1.3, ring) from a PEM certificate chain and key.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    install_crypto();
    let chain = read_certs(cert)?;
    let key_der = read_key(key)?;
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| ServeError::Tls {
            cert: cert.display().to_string(),
            key: key.display().to_string(),
            reason: e.to_string(),
        })?;
    Ok(Arc::new(config))
}

/// rustls needs one process-wide crypto provider: ring, as for the client.
pub fn install_crypto() {
    // Err means one is installed already (the client's, also ring): that one is used.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
