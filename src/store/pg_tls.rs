//! TLS to PostgreSQL on rustls/ring, with libpq's `sslmode` meanings: `disable` (plain),
//! `prefer` (the default: TLS when the server offers it), `require` (TLS, certificate not
//! checked, unless `sslrootcert` is given, as in libpq), `verify-ca` (TLS, the certificate
//! chains to `sslrootcert`) and `verify-full` (also: it names the host). The `postgres` crate
//! knows only the first three words, so the URL's `sslmode` and `sslrootcert` are read here
//! and taken out before it is parsed.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::postgres::config::SslMode;
use ::postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error as TlsError, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::StoreError;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Encryption only (`prefer`, `require` without a root): stops a passive listener.
    Nothing,
    /// The chain ends in the given root (`verify-ca`, `require` with a root).
    Chain,
    /// The chain and the host name (`verify-full`).
    Full,
}

/// TLS settings read from a PostgreSQL URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgTls {
    /// `None`: plain connections (`sslmode=disable`).
    pub verify: Option<Verify>,
    /// TLS or nothing (every mode but `disable` and `prefer`).
    pub required: bool,
    pub root: Option<PathBuf>,
}

fn invalid(why: String) -> StoreError {
    StoreError::Invalid(format!("bad PostgreSQL URL: {why}"))
}

/// Split `url` into the URL the `postgres` crate parses and its TLS settings.
pub fn split_url(url: &str) -> Result<(String, PgTls), StoreError> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut mode, mut root) = ("prefer".to_string(), None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslmode", v)) => mode = v.to_string(),
            Some(("sslrootcert", v)) => root = Some(PathBuf::from(percent_decoded(v)?)),
            _ => kept.push(pair),
        }
    }
    let (verify, required) = match (mode.as_str(), root.is_some()) {
        ("disable", _) => (None, false),
        ("prefer", _) => (Some(Verify::Nothing), false),
        ("require", false) => (Some(Verify::Nothing), true),
        ("require", true) | ("verify-ca", _) => (Some(Verify::Chain), true),
        ("verify-full", _) => (Some(Verify::Full), true),
        (other, _) => {
            return Err(invalid(format!(
                "sslmode={other}; expected disable, prefer, require, verify-ca or verify-full"
            )));
        }
    };
    if matches!(verify, Some(Verify::Chain | Verify::Full)) && root.is_none() {
        return Err(invalid(format!(
            "sslmode={mode} needs sslrootcert=FILE (the PEM CA that signed the server's \
             certificate)"
        )));
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((
        rest,
        PgTls {
            verify,
            required,
            root,
        },
    ))
}

/// `%2F` → `/` in a query value (a file path).
fn percent_decoded(v: &str) -> Result<String, StoreError> {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = v
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| invalid(format!("sslrootcert={v}: bad %-escape")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| invalid(format!("sslrootcert={v}: not UTF-8")))
}

impl PgTls {
    /// The `postgres` crate's mode for these settings.
    pub fn ssl_mode(&self) -> SslMode {
        match (&self.verify, self.required) {
            (None, _) => SslMode::Disable,
            (Some(_), false) => SslMode::Prefer,
            (Some(_), true) => SslMode::Require,
        }
    }

    /// The connector, or `None` for plain connections.
    pub fn connector(&self) -> Result<Option<RustlsConnect>, StoreError> {
        let Some(verify) = self.verify else {
            return Ok(None);
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (&self.root, verify) {
            (Some(root), Verify::Chain | Verify::Full) => {
                let inner = webpki(root, provider)?;
                Arc::new(Checked {
                    inner,
                    names: verify == Verify::Full,
                })
            }
            _ => Arc::new(Unchecked(provider)),
        };
        let config = rustls::ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Some(RustlsConnect(tokio_rustls::TlsConnector::from(
            Arc::new(config),
        ))))
    }
}

fn webpki(
    root: &std::path::Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, StoreError> {
    let shown = root.display();
    let pem = tern_cloud::input::read_capped(root, tern_cloud::input::Limit::SETTINGS)
        .map_err(|e| invalid(format!("sslrootcert={shown}: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| invalid(format!("sslrootcert={shown}: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| invalid(format!("sslrootcert={shown}: {e}")))?;
    }
    if roots.is_empty() {
        return Err(invalid(format!(
            "sslrootcert={shown}: no CERTIFICATE block"
        )));
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| invalid(format!("sslrootcert={shown}: {e}")))
}

/// The chain is checked; the host name only for `verify-full`.
#[derive(Debug)]
struct Checked {
    inner: Arc<WebPkiServerVerifier>,
    names: bool,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Any certificate (libpq's `prefer` and `require`); the handshake's signatures still are.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The `postgres` crate's TLS hook, on tokio-rustls.
#[derive(Clone)]
pub struct RustlsConnect(tokio_rustls::TlsConnector);

impl std::fmt::Debug for RustlsConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RustlsConnect")
    }
}

impl<S> MakeTlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgStream<S>;
    type TlsConnect = HostConnect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<HostConnect, Self::Error> {
        Ok(HostConnect {
            connector: self.0.clone(),
            host: ServerName::try_from(domain.to_string())?,
        })
    }
}

/// One connection's handshake with `host`.
pub struct HostConnect {
    connector: tokio_rustls::TlsConnector,
    host: ServerName<'static>,
}

impl<S> TlsConnect<S> for HostConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<PgStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let tls = self.connector.connect(self.host, stream).await?;
            Ok(PgStream(tls))
        })
    }
}

/// A TLS connection to PostgreSQL.
pub struct PgStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for PgStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM's channel binding is optional (`channel_binding=prefer`); not offered.
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PgStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PgStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_words_are_read_like_libpq() {
        let (rest, tls) = split_url("postgres://u@h/db").expect("default");
        assert_eq!(
            (rest.as_str(), tls.verify, tls.required),
            ("postgres://u@h/db", Some(Verify::Nothing), false)
        );
        let (rest, tls) = split_url(
            "postgres://u@h/db?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .expect("verify-full");
        assert_eq!(rest, "postgres://u@h/db?application_name=x");
        assert_eq!(tls.verify, Some(Verify::Full));
        assert_eq!(tls.root, Some(PathBuf::from("/tmp/ca.pem")));
        assert_eq!(tls.ssl_mode(), SslMode::Require);
        let (_, tls) = split_url("postgres://u@h/db?sslmode=require").expect("require");
        assert_eq!((tls.verify, tls.required), (Some(Verify::Nothing), true));
        let (_, tls) = split_url("postgres://u@h/db?sslmode=disable").expect("disable");
        assert_eq!(tls.ssl_mode(), SslMode::Disable);
        let e = split_url("postgres://u@h/db?sslmode=verify-ca").expect_err("no root");
        assert!(e.to_string().contains("sslrootcert"), "{e}");
        let e = split_url("postgres://u@h/db?sslmode=always").expect_err("bad word");
        assert!(e.to_string().contains("sslmode=always"), "{e}");
    }
}
