//! TLS on a server's listener (`--tls-cert`/`--tls-key`): PEM files into a rustls server
//! configuration on ring, and a listener whose handshakes run on their own tasks (with a
//! deadline), so a client that stalls its handshake holds up nobody else.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::ServeError;

/// A handshake not finished in this long is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for the server to take them.
const ACCEPTED_QUEUE: usize = 64;

fn pem_error(path: &Path, reason: impl std::fmt::Display) -> ServeError {
    ServeError::Pem {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// The certificate chain in a PEM file (server certificate first).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ServeError> {
    let pem = std::fs::read(path).map_err(|e| pem_error(path, e))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(pem_error(path, "no CERTIFICATE block in the file"));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, ServeError> {
    let pem = std::fs::read(path).map_err(|e| pem_error(path, e))?;
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

/// A TCP listener whose connections come out TLS-terminated, for `axum::serve`.
#[derive(Debug)]
pub struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Start accepting on `tcp`; must be called inside a Tokio runtime.
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> TlsListener {
        let local = tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        tokio::spawn(accept_loop(tcp, TlsAcceptor::from(config), tx));
        TlsListener { accepted, local }
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if tx.is_closed() {
            return;
        }
        let (acceptor, out) = (acceptor.clone(), tx.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = out.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!("TLS handshake with {peer} failed: {e}"),
                Err(_) => tracing::debug!("TLS handshake with {peer} timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(c) => c,
            // The accept loop only ends when this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
