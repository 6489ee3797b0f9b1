//! The go-plugin handshake Terraform expects from a provider process: check the magic
//! cookie, listen on localhost, serve gRPC over mutual TLS with the client certificate
//! Terraform passed in `PLUGIN_CLIENT_CERT`, and print one line
//! `1|6|tcp|ADDR|grpc|CERT` (core protocol 1, plugin protocol 6, the server certificate as
//! unpadded base64 DER) so Terraform knows where to connect and whom to trust.
//!
//! Only Terraform connects (on 127.0.0.1, a port chosen at random, for the length of one
//! command), so there is no cap on connections; what does apply from the API servers'
//! limits ([`tern::serve::connections`]) is here: accept errors (out of file descriptors)
//! are waited out instead of spun on, and a TLS handshake must finish within 10 s.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine;
use tern::serve::connections::AcceptBackoff;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Sleep;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::controller_proto::Empty;
use crate::controller_proto::grpc_controller_server::{GrpcController, GrpcControllerServer};
use crate::tfplugin6::provider_server::ProviderServer;

/// The cookie Terraform sets so a provider binary run by hand can say what it is.
const COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
const COOKIE_VALUE: &str = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";
/// A TLS handshake not finished in this long is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(
        "terraform-provider-tern is a Terraform plugin: Terraform starts it. Install it as \
         terraform/README.md shows and run `terraform init`."
    )]
    NotUnderTerraform,
    #[error("listening on 127.0.0.1: {0}")]
    Listen(std::io::Error),
    #[error("making the server certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("gRPC server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Serves `provider` until Terraform asks the plugin to stop.
pub async fn serve(provider: crate::provider::TernProvider) -> Result<(), PluginError> {
    if std::env::var(COOKIE_KEY).as_deref() != Ok(COOKIE_VALUE) {
        return Err(PluginError::NotUnderTerraform);
    }
    tern::http::install_crypto();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(PluginError::Listen)?;
    let addr = listener.local_addr().map_err(PluginError::Listen)?;
    let stop = Arc::new(Notify::new());
    let mut builder = Server::builder();
    let mut cert_b64 = String::new();
    if let Ok(client_pem) = std::env::var("PLUGIN_CLIENT_CERT")
        && !client_pem.trim().is_empty()
    {
        let (tls, der) = tls(&client_pem)?;
        builder = builder.tls_config(tls)?;
        cert_b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(der);
    }
    let router = builder
        .add_service(ProviderServer::new(provider))
        .add_service(GrpcControllerServer::new(Stopper(stop.clone())));
    println!("1|6|tcp|{addr}|grpc|{cert_b64}");
    router
        .serve_with_incoming_shutdown(
            Incoming::new(listener),
            async move { stop.notified().await },
        )
        .await?;
    Ok(())
}

/// A self-signed server certificate for `localhost` (Terraform pins it from the handshake
/// line), and trust in the client certificate Terraform made for this run. Terraform signs
/// that certificate with a P-521 key, which rustls on ring cannot verify, so Go sends no
/// certificate and client authentication stays optional: the channel is encrypted and
/// Terraform verifies the plugin, but the plugin (on 127.0.0.1, a port chosen at random)
/// does not verify Terraform.
fn tls(client_pem: &str) -> Result<(ServerTlsConfig, Vec<u8>), PluginError> {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(cert.pem(), key.serialize_pem()))
        .client_ca_root(Certificate::from_pem(client_pem))
        .client_auth_optional(true)
        .timeout(HANDSHAKE_TIMEOUT);
    Ok((tls, cert.der().to_vec()))
}

/// The listener's connections for tonic, which retries a failed accept at once: a failure
/// here (out of file descriptors) is waited out with [`AcceptBackoff`] and never reaches it.
struct Incoming {
    listener: TcpListener,
    backoff: AcceptBackoff,
    pause: Option<Pin<Box<Sleep>>>,
}

impl Incoming {
    fn new(listener: TcpListener) -> Self {
        Incoming {
            listener,
            backoff: AcceptBackoff::default(),
            pause: None,
        }
    }
}

impl tonic::codegen::tokio_stream::Stream for Incoming {
    type Item = std::io::Result<TcpStream>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(pause) = &mut this.pause {
                if pause.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.pause = None;
            }
            match this.listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok((stream, _))) => {
                    this.backoff.succeeded();
                    return Poll::Ready(Some(Ok(stream)));
                }
                Poll::Ready(Err(e)) => {
                    if let Some(wait) = this.backoff.failed(&e) {
                        this.pause = Some(Box::pin(tokio::time::sleep(wait)));
                    }
                }
            }
        }
    }
}

/// go-plugin's `GRPCController`: Terraform's polite "exit now".
struct Stopper(Arc<Notify>);

#[tonic::async_trait]
impl GrpcController for Stopper {
    async fn shutdown(
        &self,
        _: tonic::Request<Empty>,
    ) -> Result<tonic::Response<Empty>, tonic::Status> {
        self.0.notify_one();
        Ok(tonic::Response::new(Empty {}))
    }
}
