//! The device's own way into the API port. The agent keeps a local client
//! CA in `<dataDir>/agent/pki` (`picolet-local-ca.crt` and
//! `picolet-local-ca.key`, 0600 in a 0700 folder, made at start when
//! missing or near its end) and trusts it beside
//! `authentication.x509.clientCAFile`. `picolet ctl api PATH` reads its key
//! (so only root can), mints a client certificate for [`USER`] that lives
//! minutes, and GETs PATH over loopback.
//!
//! A certificate this CA issued is authorized on the node itself, never by
//! a SubjectAccessReview: whoever can read the key is root on the device
//! already, the API server knows nothing of this CA, and the way in must
//! work offline. Its other certificates go through the configured
//! authorization as before.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::certificate::{self, x509};
use crate::kube::cert::{KeyError, certified_key};

/// The user a local certificate names.
pub const USER: &str = "picolet:local-admin";

/// The local CA's life, and how long before its end it is made again
/// (certificates it issued live minutes, so a new CA strands nobody).
const CA_LIFE: i64 = 10 * 365 * 86_400;
const CA_RENEW_BEFORE: i64 = 30 * 86_400;
/// A minted client certificate's life: one command's.
const CLIENT_LIFE: i64 = 600;
/// The whole of `picolet ctl api`'s exchange.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Why the local CA or a request through it failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Certificate(#[from] certificate::Error),
    #[error(
        "read {}: {source} (the agent makes it at start: run `picolet up`; only root may read it)",
        path.display()
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a P-256 key in PKCS#8 PEM", path.display())]
    BadKey { path: PathBuf },
    #[error("{}: not the certificate of the key beside it", path.display())]
    Mismatch { path: PathBuf },
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("TLS: {0}")]
    Tls(rustls::Error),
    #[error("the path must start with '/': {0:?}")]
    Path(String),
    #[error("connect to the agent's API port {addr}: {source} (is `picolet up` running?)")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS with {addr}: {source}")]
    Handshake {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("GET {path}: {source}")]
    Http { path: String, source: hyper::Error },
    #[error("GET {path}: {source}")]
    Request {
        path: String,
        source: hyper::http::Error,
    },
    #[error("GET {path}: no answer within {TIMEOUT:?}")]
    Timeout { path: String },
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The local CA: its certificate and the key that signs with it.
#[derive(Debug)]
pub struct LocalCa {
    cert_pem: Vec<u8>,
    cn: String,
    key: EcdsaKeyPair,
}

impl LocalCa {
    /// The certificate and key files in `pki_dir`.
    pub fn paths(pki_dir: &Path) -> (PathBuf, PathBuf) {
        (
            pki_dir.join("picolet-local-ca.crt"),
            pki_dir.join("picolet-local-ca.key"),
        )
    }

    /// The CA in `pki_dir` (the agent, at start): made when missing,
    /// unreadable or within a month of its end.
    pub fn ensure(pki_dir: &Path) -> Result<Self, Error> {
        if let Ok(ca) = Self::load(pki_dir)
            && x509::validity(&ca.cert_pem).is_some_and(|(_, to)| to - now() > CA_RENEW_BEFORE)
        {
            return Ok(ca);
        }
        edge_config::private_dir(pki_dir)
            .map_err(certificate::Error::io("make private", pki_dir))?;
        let (pkcs8, key) = certificate::bootstrap::new_key()?;
        let cn = format!("picolet-local-ca@{}", now());
        let from = now() - 3600;
        let der = x509::ca(&cn, &key, from, from + CA_LIFE)?;
        let cert_pem = x509::pem("CERTIFICATE", &der).into_bytes();
        let (crt, key_file) = Self::paths(pki_dir);
        // Key first: a certificate on disk always has its key.
        edge_config::write_atomic(
            &key_file,
            x509::pem("PRIVATE KEY", pkcs8.as_ref()).as_bytes(),
        )
        .map_err(certificate::Error::io("write", &key_file))?;
        edge_config::write_atomic(&crt, &cert_pem)
            .map_err(certificate::Error::io("write", &crt))?;
        tracing::info!(cert = %crt.display(), "API port: made the local client CA (`picolet ctl api` uses it)");
        Ok(Self { cert_pem, cn, key })
    }

    /// The CA in `pki_dir` as it is (`picolet ctl api`).
    pub fn load(pki_dir: &Path) -> Result<Self, Error> {
        let (crt, key_file) = Self::paths(pki_dir);
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| Error::Read {
                path: path.to_path_buf(),
                source,
            })
        };
        let key_pem = read(&key_file)?;
        let cert_pem = read(&crt)?;
        let bad_key = || Error::BadKey {
            path: key_file.clone(),
        };
        let pkcs8 = PrivatePkcs8KeyDer::from_pem_slice(&key_pem).map_err(|_| bad_key())?;
        let key = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            pkcs8.secret_pkcs8_der(),
            &SystemRandom::new(),
        )
        .map_err(|_| bad_key())?;
        let mismatch = || Error::Mismatch { path: crt.clone() };
        let der = CertificateDer::pem_slice_iter(&cert_pem)
            .next()
            .and_then(Result::ok)
            .ok_or_else(mismatch)?;
        // Self-signed: its own signature checks with the key beside it.
        if !x509::signed_by(der.as_ref(), key.public_key().as_ref()) {
            return Err(mismatch());
        }
        let (cn, _) = x509::subject(der.as_ref()).ok_or_else(mismatch)?;
        Ok(Self { cert_pem, cn, key })
    }

    /// The CA certificate (PEM): what the API port trusts.
    pub fn cert_pem(&self) -> &[u8] {
        &self.cert_pem
    }

    /// The CA's public key: what tells its certificates from others.
    pub fn public_key(&self) -> Vec<u8> {
        self.key.public_key().as_ref().to_vec()
    }

    /// A new client certificate and key (PEM) for `user` in `groups`,
    /// valid for [`CLIENT_LIFE`].
    pub fn issue(&self, user: &str, groups: &[String]) -> Result<(Vec<u8>, Vec<u8>), Error> {
        let (pkcs8, key) = certificate::bootstrap::new_key()?;
        let from = now() - 60;
        let der = x509::client(
            user,
            groups,
            key.public_key().as_ref(),
            &self.cn,
            &self.key,
            from,
            from + 60 + CLIENT_LIFE,
        )?;
        Ok((
            x509::pem("CERTIFICATE", &der).into_bytes(),
            x509::pem("PRIVATE KEY", pkcs8.as_ref()).into_bytes(),
        ))
    }
}

/// Accepts exactly the serving certificates the agent may be using (its
/// files, read here): the connection goes to this host, where the agent's
/// own files are the truth, whatever names they were made for.
#[derive(Debug)]
struct Pinned {
    certs: Vec<Vec<u8>>,
    algorithms: WebPkiSupportedAlgorithms,
}

/// The server presented a certificate none of the agent's files hold.
#[derive(Debug, thiserror::Error)]
#[error(
    "the server's certificate is not the agent's (tlsCertFile, or the one in <dataDir>/agent/pki)"
)]
struct NotTheAgent;

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.certs.iter().any(|c| c == end_entity.as_ref()) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(NotTheAgent))),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The serving certificates (DER) the agent of `cfg` may present:
/// `tlsCertFile`, the bootstrapped one, the self-signed one.
fn serving_certs(cfg: &edge_config::config::Config) -> Vec<Vec<u8>> {
    let pki = certificate::bootstrap::cert_dir(&cfg.data_dir);
    let mut files: Vec<Vec<u8>> = Vec::new();
    if let Some((crt, _)) = &cfg.tls {
        files.extend(std::fs::read(crt));
    }
    files.extend(certificate::serving::current(&pki));
    files.extend(std::fs::read(super::tls::self_signed_paths(&pki).0));
    files
        .iter()
        .filter_map(|pem| CertificateDer::pem_slice_iter(pem).next()?.ok())
        .map(|c| c.as_ref().to_vec())
        .collect()
}

/// Where the API port of `cfg` answers on this host: its address, or
/// loopback when it listens on every address.
pub fn api_addr(cfg: &edge_config::config::Config) -> SocketAddr {
    let ip = match cfg.api_address() {
        IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        a => a,
    };
    SocketAddr::new(ip, cfg.port)
}

/// An answer of the API port.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// GET `path` on the API port of the agent configured by `cfg`, as
/// [`USER`] with a certificate of the local CA (`picolet ctl api`).
pub async fn get(cfg: &edge_config::config::Config, path: &str) -> Result<Answer, Error> {
    if !path.starts_with('/') {
        return Err(Error::Path(path.into()));
    }
    let ca = LocalCa::load(&certificate::bootstrap::cert_dir(&cfg.data_dir))?;
    let (cert, key) = ca.issue(USER, &[])?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pinned = Pinned {
        certs: serving_certs(cfg),
        algorithms: provider.signature_verification_algorithms,
    };
    let client_key = certified_key(&provider, &cert, &key, "client")?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(pinned))
        .with_client_cert_resolver(Arc::new(crate::kube::cert::CurrentCert::new(client_key)));
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let addr = api_addr(cfg);
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|source| Error::Connect { addr, source })?;
        let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
            .map_err(|source| Error::Handshake { addr, source })?;
        let http = |source| Error::Http {
            path: path.into(),
            source,
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        tokio::spawn(conn);
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, addr.to_string())
            .header(hyper::header::USER_AGENT, "picolet-ctl")
            .body(Empty::<Bytes>::new())
            .map_err(|source| Error::Request {
                path: path.into(),
                source,
            })?;
        let resp = sender.send_request(req).await.map_err(http)?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(http)?.to_bytes();
        Ok(Answer { status, body })
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| Error::Timeout { path: path.into() })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_ca_is_made_once_private_and_issues_client_certificates() {
        let dir = tempfile::tempdir().expect("tmp");
        let pki = dir.path().join("agent/pki");
        let ca = LocalCa::ensure(&pki).expect("made");
        let (crt, key) = LocalCa::paths(&pki);
        for f in [&crt, &key] {
            let mode = std::fs::metadata(f).expect("file").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", f.display());
        }
        let mode = std::fs::metadata(&pki).expect("dir").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let again = LocalCa::ensure(&pki).expect("kept");
        assert_eq!(again.cert_pem(), ca.cert_pem(), "a valid CA is kept");
        let loaded = LocalCa::load(&pki).expect("loaded");
        assert_eq!(loaded.public_key(), ca.public_key());

        let (cert, _) = loaded.issue(USER, &["g".into()]).expect("issued");
        let der = CertificateDer::pem_slice_iter(&cert)
            .next()
            .expect("one")
            .expect("pem");
        assert_eq!(
            x509::subject(der.as_ref()),
            Some((USER.into(), vec!["g".into()]))
        );
        assert!(x509::signed_by(der.as_ref(), &ca.public_key()));
        let (_, other) = certificate::bootstrap::new_key().expect("key");
        assert!(!x509::signed_by(der.as_ref(), other.public_key().as_ref()));

        // A key that is not the certificate's is refused, not used.
        let (pkcs8, _) = certificate::bootstrap::new_key().expect("key");
        std::fs::write(&key, x509::pem("PRIVATE KEY", pkcs8.as_ref())).expect("write");
        assert!(matches!(LocalCa::load(&pki), Err(Error::Mismatch { .. })));
        // ... and the agent makes a new pair.
        let new = LocalCa::ensure(&pki).expect("remade");
        assert_ne!(new.cert_pem(), ca.cert_pem());
        LocalCa::load(&pki).expect("consistent again");
    }

    #[test]
    fn a_wildcard_api_address_is_reached_on_loopback() {
        let cfg = |text: &str| {
            edge_config::config::Config::parse(text, Path::new("t.yaml")).expect("config")
        };
        assert_eq!(api_addr(&cfg("{}")).to_string(), "127.0.0.1:10250");
        assert_eq!(
            api_addr(&cfg("address: 0.0.0.0\nport: 1234")).to_string(),
            "127.0.0.1:1234"
        );
        assert_eq!(api_addr(&cfg("address: '::'")).to_string(), "[::1]:10250");
        assert_eq!(
            api_addr(&cfg("address: 10.1.2.3")).to_string(),
            "10.1.2.3:10250"
        );
    }
}
