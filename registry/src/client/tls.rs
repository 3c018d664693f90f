//! TLS to a registry: the system's CA bundle or a host's `ca_file`, a
//! client certificate when configured, and no verification for hosts
//! marked insecure.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::config::HostConfig;

/// Where the system's CA bundle usually is (Debian/Ubuntu, Fedora/RHEL,
/// Alpine/OpenWrt); `SSL_CERT_FILE` first, as OpenSSL and Go read it.
const CA_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

fn system_roots() -> Arc<rustls::RootCertStore> {
    static ROOTS: OnceLock<Arc<rustls::RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let env = std::env::var("SSL_CERT_FILE").ok();
            let file = env
                .iter()
                .map(String::as_str)
                .chain(CA_BUNDLES)
                .find_map(|p| std::fs::read(p).ok());
            if let Some(pem) = file {
                for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
                    let _ = roots.add(cert);
                }
            }
            Arc::new(roots)
        })
        .clone()
}

/// Accepts any server certificate (`insecure_skip_verify`), still checking
/// the handshake's signatures.
#[derive(Debug)]
struct AnyCert(rustls::crypto::WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// A host's TLS settings (`configs.<host>.tls`) that could not be used;
/// the messages name the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("{0}")]
    Versions(#[source] rustls::Error),
    #[error("ca_file {}: {source}", path.display())]
    CaRead { path: PathBuf, source: io::Error },
    #[error("ca_file {}: {source}", path.display())]
    CaPem { path: PathBuf, source: pem::Error },
    #[error("ca_file {}: {source}", path.display())]
    CaAdd {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("ca_file {}: no certificate", path.display())]
    NoCa { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("cert_file {}: {source}", path.display())]
    Cert { path: PathBuf, source: pem::Error },
    #[error("key_file {}: {source}", path.display())]
    Key { path: PathBuf, source: pem::Error },
    #[error("client certificate: {0}")]
    ClientAuth(#[source] rustls::Error),
}

/// A TLS client configuration for one host's `configs` entry.
pub(super) fn tls_config(cfg: Option<&HostConfig>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algs = provider.signature_verification_algorithms;
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Versions)?;
    let tls = cfg.map(|c| &c.tls);
    let builder = if tls.is_some_and(|t| t.insecure_skip_verify) {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(algs)))
    } else if let Some(ca) = tls.and_then(|t| t.ca_file.as_ref()) {
        let path = || ca.clone();
        let pem = std::fs::read(ca).map_err(|source| TlsError::CaRead {
            path: path(),
            source,
        })?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|source| TlsError::CaPem {
                path: path(),
                source,
            })?;
            roots.add(cert).map_err(|source| TlsError::CaAdd {
                path: path(),
                source,
            })?;
        }
        if roots.is_empty() {
            return Err(TlsError::NoCa { path: path() });
        }
        builder.with_root_certificates(roots)
    } else {
        builder.with_root_certificates(system_roots())
    };
    let mut config = match tls.and_then(|t| t.client.as_ref()) {
        Some((cert, key)) => {
            let read = |p: &Path| {
                std::fs::read(p).map_err(|source| TlsError::Read {
                    path: p.to_path_buf(),
                    source,
                })
            };
            let chain = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|source| TlsError::Cert {
                    path: cert.clone(),
                    source,
                })?;
            let key =
                PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|source| TlsError::Key {
                    path: key.clone(),
                    source,
                })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(TlsError::ClientAuth)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
