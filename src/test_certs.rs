//! Certificates for tests: a private CA and a server certificate it signs, for `localhost`
//! and 127.0.0.1, written as PEM files.

use std::path::{Path, PathBuf};

/// PEM files of one test CA and the server certificate it signed.
#[derive(Debug)]
pub struct TestCerts {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A fresh CA and server certificate in `dir` (`ca.pem`, `server.pem`, `server-key.pem`).
pub fn write_test_certs(dir: &Path) -> Result<TestCerts, String> {
    let fail = |e: &dyn std::fmt::Display| e.to_string();
    let ca_key = rcgen::KeyPair::generate().map_err(|e| fail(&e))?;
    let mut ca_params =
        rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| fail(&e))?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tern test CA");
    let ca = ca_params.self_signed(&ca_key).map_err(|e| fail(&e))?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().map_err(|e| fail(&e))?;
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .map_err(|e| fail(&e))?;
    let cert = params.signed_by(&key, &issuer).map_err(|e| fail(&e))?;
    let out = TestCerts {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server-key.pem"),
    };
    for (path, pem) in [
        (&out.ca, ca.pem()),
        (&out.cert, cert.pem()),
        (&out.key, key.serialize_pem()),
    ] {
        std::fs::write(path, pem).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(out)
}
