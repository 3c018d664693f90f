//! The API port's TLS: the serving certificate (`tlsCertFile` and
//! `tlsPrivateKeyFile`, else a self-signed one for the node's names and
//! addresses kept in `<dataDir>/agent/pki/picolet-serving.{crt,key}` and
//! made again a month before it expires, as kubelet's `kubelet.crt`), and
//! client certificates verified against the client CA bundle when one is
//! given (a connection without one may still authenticate with a token).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::certificate::{self, x509};
use crate::kube::cert::{CurrentCert, KeyError, certified_key};

/// Why the API port cannot serve TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Certificate(#[from] certificate::Error),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("the client CA: {0}")]
    ClientCaPem(rustls::pki_types::pem::Error),
    #[error("the client CA: {0}")]
    ClientCa(rustls::Error),
    #[error("the client CA file holds no certificate")]
    NoClientCa,
    #[error("the local CA: {0}")]
    LocalCaPem(rustls::pki_types::pem::Error),
    #[error("the local CA: {0}")]
    LocalCa(rustls::Error),
    #[error("the client CA: {0}")]
    Verifier(rustls::server::VerifierBuilderError),
    #[error("TLS: {0}")]
    Tls(rustls::Error),
}

/// A self-signed certificate's life (kubelet: one year).
const SELF_SIGNED_LIFE: i64 = 365 * 86_400;
/// Made again when less than this is left.
const RENEW_BEFORE: i64 = 30 * 86_400;

/// The self-signed certificate and key files in `pki_dir`.
pub fn self_signed_paths(pki_dir: &Path) -> (PathBuf, PathBuf) {
    (
        pki_dir.join("picolet-serving.crt"),
        pki_dir.join("picolet-serving.key"),
    )
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The self-signed serving certificate in `pki_dir` (PEM certificate, PEM
/// key), made when missing, unreadable or near its end.
pub fn self_signed(
    pki_dir: &Path,
    node: &str,
    ips: &[IpAddr],
) -> Result<(Vec<u8>, Vec<u8>), certificate::Error> {
    let (crt, key) = self_signed_paths(pki_dir);
    if let (Ok(c), Ok(k)) = (std::fs::read(&crt), std::fs::read(&key))
        && x509::validity(&c).is_some_and(|(_, to)| to - now() > RENEW_BEFORE)
    {
        return Ok((c, k));
    }
    edge_config::private_dir(pki_dir).map_err(certificate::Error::io("make private", pki_dir))?;
    let (pkcs8, pair) = certificate::bootstrap::new_key()?;
    let mut names = vec![node.to_string()];
    if node != "localhost" {
        names.push("localhost".into());
    }
    let mut addrs: Vec<IpAddr> = ips.to_vec();
    for lo in [
        IpAddr::from([127, 0, 0, 1]),
        IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
    ] {
        if !addrs.contains(&lo) {
            addrs.push(lo);
        }
    }
    let from = now() - 3600;
    let der = x509::self_signed(
        &format!("{node}@{}", now()),
        &names,
        &addrs,
        &pair,
        from,
        from + SELF_SIGNED_LIFE,
    )?;
    let cert_pem = x509::pem("CERTIFICATE", &der).into_bytes();
    let key_pem = x509::pem("PRIVATE KEY", pkcs8.as_ref()).into_bytes();
    // Key first: a certificate on disk always has its key.
    edge_config::write_atomic(&key, &key_pem).map_err(certificate::Error::io("write", &key))?;
    edge_config::write_atomic(&crt, &cert_pem).map_err(certificate::Error::io("write", &crt))?;
    tracing::info!(cert = %crt.display(), "API port: made a self-signed serving certificate (set tlsCertFile and tlsPrivateKeyFile to use your own)");
    Ok((cert_pem, key_pem))
}

/// The serving certificate in use, replaceable while connections come
/// (`serverTLSBootstrap` swaps the self-signed one for the cluster's, and
/// renews it): each handshake takes the current one.
pub type Current = CurrentCert;

/// `cert` and `key` (PEM) as the serving certificate.
pub fn current(cert: &[u8], key: &[u8]) -> Result<Arc<Current>, KeyError> {
    Ok(Arc::new(CurrentCert::new(serving(cert, key)?)))
}

/// Serves `cert` and `key` (PEM) from the next handshake on.
pub fn replace(current: &Current, cert: &[u8], key: &[u8]) -> Result<(), KeyError> {
    current.set(serving(cert, key)?);
    Ok(())
}

fn serving(cert: &[u8], key: &[u8]) -> Result<rustls::sign::CertifiedKey, KeyError> {
    certified_key(
        &rustls::crypto::ring::default_provider(),
        cert,
        key,
        "serving",
    )
}

/// The rustls server config: the `current` certificate served; client
/// certificates verified against `client_ca` (PEM bundle, which must hold
/// one) and the `local_ca` certificate (PEM, [`super::local`]) when given.
pub fn server_config(
    current: Arc<Current>,
    client_ca: Option<&[u8]>,
    local_ca: Option<&[u8]>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    if let Some(pem) = client_ca {
        for c in CertificateDer::pem_slice_iter(pem) {
            let c = c.map_err(TlsError::ClientCaPem)?;
            roots.add(c).map_err(TlsError::ClientCa)?;
        }
        if roots.is_empty() {
            return Err(TlsError::NoClientCa);
        }
    }
    for c in local_ca
        .map(CertificateDer::pem_slice_iter)
        .into_iter()
        .flatten()
    {
        let c = c.map_err(TlsError::LocalCaPem)?;
        roots.add(c).map_err(TlsError::LocalCa)?;
    }
    let verifier = match roots.is_empty() {
        false => rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(TlsError::Verifier)?,
        true => rustls::server::WebPkiClientVerifier::no_client_auth(),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Tls)?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(current);
    // HTTP/1.1 only: exec, attach and port-forward upgrade the connection.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
