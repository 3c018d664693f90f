//! A thin Kubernetes API client: JSON requests over one kept-alive
//! connection (TLS with the kubeconfig's CA, client certificate or bearer
//! token), reconnected when it breaks ([`crate::kube::conn`]: HTTP/2 when
//! the server offers it, every request and watch a stream of the one
//! connection; over HTTP/1.1 each watch needs a connection of its own). hyper and rustls are already in the
//! binary; kube-rs would add its own stack of both and more (see
//! docs/architecture.md). Every request has a deadline and every body a
//! size cap.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::sync::Mutex;

use crate::kube::cert::{CurrentCert, KeyError, certified_key};
use crate::kube::config::KubeConfig;
use crate::kube::conn::{self, Sender};

const JSON: &str = "application/json";
/// Protobuf where the API server has it (core and built-in types), else
/// JSON.
const PROTOBUF_FIRST: &str = "application/vnd.kubernetes.protobuf, application/json";

/// Deadline of one request, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response body read.
const MAX_BODY: usize = 16 << 20;
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{method} {path}: {source}")]
    Transport {
        method: Method,
        path: String,
        source: Transport,
    },
    /// The server answered with a status other than 2xx.
    #[error("{method} {path}: {status}: {message}")]
    Status {
        method: Method,
        path: String,
        status: StatusCode,
        /// The Status object's `message`, else the body.
        message: String,
    },
}

/// Why the client could not be made or changed: its TLS settings.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("TLS: {0}")]
    Tls(rustls::Error),
    #[error("the CA certificate: {0}")]
    CaPem(rustls::pki_types::pem::Error),
    #[error("the CA certificate: {0}")]
    Ca(rustls::Error),
    #[error("the CA file holds no certificate")]
    NoCa,
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("server name {name:?}: {source}")]
    ServerName {
        name: String,
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("this client has no client certificate")]
    NoClientCert,
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum Transport {
    #[error("dial tcp {addr}: {source}")]
    Dial {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS handshake with {addr}: {source}")]
    Tls {
        addr: String,
        source: std::io::Error,
    },
    #[error("HTTP with {addr}: {source}")]
    Handshake { addr: String, source: hyper::Error },
    #[error("the request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("{0}")]
    Send(hyper::Error),
    #[error("read the answer: {0}")]
    Read(Box<dyn std::error::Error + Send + Sync>),
    #[error("no answer in {0:?}")]
    Timeout(Duration),
    #[error("decode the answer: {0}")]
    Decode(#[from] serde_json::Error),
}

/// A watch's stream broke.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("a watch event: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("a watch event over {0} bytes")]
    TooLarge(usize),
    #[error("read the watch: {0}")]
    Read(#[from] hyper::Error),
}

impl Error {
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("host", &self.host)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

pub struct Client {
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
    provider: Arc<rustls::crypto::CryptoProvider>,
    cert: Option<Arc<CurrentCert>>,
    token: Option<String>,
    user_agent: String,
    /// The connection requests share.
    conn: Mutex<Option<Sender>>,
}

impl Client {
    pub fn new(cfg: &KubeConfig, user_agent: &str) -> Result<Self, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algs = provider.signature_verification_algorithms;
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(ConfigError::Tls)?;
        let builder = match &cfg.ca {
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(pem) {
                    roots
                        .add(cert.map_err(ConfigError::CaPem)?)
                        .map_err(ConfigError::Ca)?;
                }
                if roots.is_empty() {
                    return Err(ConfigError::NoCa.into());
                }
                builder.with_root_certificates(roots)
            }
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(crate::httpc::AnyCert(algs))),
        };
        let current = match &cfg.client_cert {
            Some((cert, key)) => Some(Arc::new(CurrentCert::new(
                certified_key(&provider, cert, key, "client").map_err(ConfigError::Key)?,
            ))),
            None => None,
        };
        let mut tls = match &current {
            Some(c) => builder.with_client_cert_resolver(c.clone()),
            None => builder.with_no_client_auth(),
        };
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // No TLS session resumption (client-go has none either): a resumed
        // session keeps the identity it was made with, so after a
        // certificate rotation new connections went on presenting the old
        // certificate and got 401 once it expired (seen by hand).
        tls.resumption = rustls::client::Resumption::disabled();
        let server_name =
            ServerName::try_from(cfg.host.clone()).map_err(|source| ConfigError::ServerName {
                name: cfg.host.clone(),
                source,
            })?;
        Ok(Self {
            host: cfg.host.clone(),
            port: cfg.port,
            server_name,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            provider,
            cert: current,
            token: cfg.token.clone(),
            user_agent: user_agent.into(),
            conn: Mutex::new(None),
        })
    }

    /// Presents `cert` and `key` (PEM) from now on (a rotated client
    /// certificate): the kept-alive connection is closed so the next
    /// request authenticates with them; a running watch keeps its
    /// connection until it ends.
    pub async fn set_client_cert(&self, cert: &[u8], key: &[u8]) -> Result<(), Error> {
        let Some(current) = &self.cert else {
            return Err(ConfigError::NoClientCert.into());
        };
        current.set(certified_key(&self.provider, cert, key, "client").map_err(ConfigError::Key)?);
        *self.conn.lock().await = None;
        Ok(())
    }

    /// GET, decoded as JSON.
    pub async fn get(&self, path: &str) -> Result<serde_json::Value, Error> {
        self.json(Method::GET, path, None, None).await
    }

    /// A request with a JSON body (`content_type` for patches), its JSON
    /// answer.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        content_type: Option<&str>,
    ) -> Result<serde_json::Value, Error> {
        let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let ct = content_type.unwrap_or("application/json");
        let bytes = self.send(method.clone(), path, ct, JSON, body).await?;
        if bytes.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| Error::Transport {
            method,
            path: path.into(),
            source: Transport::Decode(e),
        })
    }

    /// A PATCH (`content_type`: merge or strategic merge) whose answer,
    /// the whole object, is not read: asked for in protobuf, a third of
    /// its JSON's size (a lease renewal, a node status).
    pub async fn patch(
        &self,
        path: &str,
        content_type: &str,
        body: &serde_json::Value,
    ) -> Result<(), Error> {
        self.send(
            Method::PATCH,
            path,
            content_type,
            PROTOBUF_FIRST,
            body.to_string().into_bytes(),
        )
        .await
        .map(drop)
    }

    /// One request; its body on 2xx.
    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        accept: &str,
        body: Vec<u8>,
    ) -> Result<Bytes, Error> {
        let transport = |source: Transport| Error::Transport {
            method: method.clone(),
            path: path.into(),
            source,
        };
        let attempt = async {
            let sender = self.shared().await.map_err(transport)?;
            let req = self
                .request(method.clone(), path, accept, Some(content_type), body)
                .map_err(transport)?;
            let resp = match sender.send(req).await {
                Ok(r) => r,
                Err(e) => {
                    // The connection is gone: the next request makes a new one.
                    self.forget(&sender).await;
                    return Err(transport(Transport::Send(e)));
                }
            };
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| transport(Transport::Read(e)))?
                .to_bytes();
            Ok::<_, Error>((status, bytes))
        };
        let (status, bytes) = match tokio::time::timeout(REQUEST_TIMEOUT, attempt).await {
            Ok(r) => r?,
            Err(_) => {
                *self.conn.lock().await = None;
                return Err(transport(Transport::Timeout(REQUEST_TIMEOUT)));
            }
        };
        if !status.is_success() {
            return Err(Error::Status {
                method,
                path: path.into(),
                status,
                message: status_message(&bytes),
            });
        }
        Ok(bytes)
    }

    /// A watch: a GET whose body is read as it comes, one JSON event a
    /// line; a stream of the shared connection over HTTP/2, a connection
    /// of its own over HTTP/1.1. The deadline covers the answer's head
    /// only; the server ends the body (`timeoutSeconds`).
    pub async fn watch(&self, path: &str) -> Result<Lines, Error> {
        let transport = |source: Transport| Error::Transport {
            method: Method::GET,
            path: path.into(),
            source,
        };
        let head = async {
            let sender = match self.shared().await.map_err(transport)? {
                h2 @ Sender::H2(_) => h2,
                Sender::H1(_) => self.connect().await.map_err(transport)?,
            };
            let req = self
                .request(Method::GET, path, JSON, None, Vec::new())
                .map_err(transport)?;
            match sender.send(req).await {
                Ok(r) => Ok(r),
                Err(e) => {
                    self.forget(&sender).await;
                    Err(transport(Transport::Send(e)))
                }
            }
        };
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, head)
            .await
            .map_err(|_| transport(Transport::Timeout(REQUEST_TIMEOUT)))??;
        let status = resp.status();
        if !status.is_success() {
            let bytes = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(Error::Status {
                method: Method::GET,
                path: path.into(),
                status,
                message: status_message(&bytes),
            });
        }
        Ok(Lines {
            body: resp.into_body(),
            buf: Vec::new(),
        })
    }

    /// A request with our headers and credentials.
    fn request(
        &self,
        method: Method,
        path: &str,
        accept: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Request<Full<Bytes>>, Transport> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(
                hyper::header::HOST,
                crate::httpc::join_host_port(&self.host, self.port),
            )
            .header(hyper::header::USER_AGENT, &self.user_agent)
            .header(hyper::header::ACCEPT, accept);
        if let Some(ct) = content_type {
            req = req.header(hyper::header::CONTENT_TYPE, ct);
        }
        if let Some(t) = &self.token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        Ok(req.body(Full::new(Bytes::from(body)))?)
    }

    /// The shared connection, made when there is none (or it closed).
    async fn shared(&self) -> Result<Sender, Transport> {
        let mut conn = self.conn.lock().await;
        if let Some(s) = conn.as_ref().filter(|s| s.is_open()) {
            return Ok(s.clone());
        }
        let s = self.connect().await?;
        *conn = Some(s.clone());
        Ok(s)
    }

    /// Drops the shared connection after a request on `broken` failed:
    /// an HTTP/1.1 one is not reused, an HTTP/2 one when it closed (a
    /// stream can fail alone), so the next request dials again.
    async fn forget(&self, broken: &Sender) {
        let mut conn = self.conn.lock().await;
        let same = match (conn.as_ref(), broken) {
            (Some(Sender::H1(a)), Sender::H1(b)) => Arc::ptr_eq(a, b),
            (Some(Sender::H2(a)), Sender::H2(_)) => a.is_closed(),
            _ => false,
        };
        if same {
            *conn = None;
        }
    }

    async fn connect(&self) -> Result<Sender, Transport> {
        let addr = crate::httpc::join_host_port(&self.host, self.port);
        conn::dial(addr, &self.tls, self.server_name.clone()).await
    }
}

/// The `message` of a Kubernetes Status answer (JSON or protobuf), else
/// the body's start.
pub fn status_message(body: &[u8]) -> String {
    if let Some(m) = protobuf_status_message(body) {
        return m;
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned())
}

/// What starts every protobuf answer of the API server.
const PROTOBUF_MAGIC: &[u8] = b"k8s\0";

/// apimachinery's `runtime.Unknown`, the envelope: the object's bytes.
#[derive(Clone, PartialEq, prost::Message)]
struct Unknown {
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
}

/// `metav1.Status`, its message only.
#[derive(Clone, PartialEq, prost::Message)]
struct Status {
    #[prost(string, tag = "3")]
    message: String,
}

/// The message of a Status in protobuf.
fn protobuf_status_message(body: &[u8]) -> Option<String> {
    use prost::Message as _;
    let envelope = Unknown::decode(body.strip_prefix(PROTOBUF_MAGIC)?).ok()?;
    let status = Status::decode(envelope.raw.as_slice()).ok()?;
    Some(status.message).filter(|m| !m.is_empty())
}

/// The lines of a watch's body, each decoded as JSON.
pub struct Lines {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
}

impl Lines {
    /// The next event; None when the server ended the watch.
    pub async fn next(&mut self) -> Option<Result<serde_json::Value, WatchError>> {
        loop {
            if let Some(at) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=at).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some(serde_json::from_slice(&line).map_err(WatchError::from));
            }
            if self.buf.len() > MAX_BODY {
                return Some(Err(WatchError::TooLarge(MAX_BODY)));
            }
            match self.body.frame().await? {
                Ok(f) => {
                    if let Ok(data) = f.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Err(e) => return Some(Err(e.into())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client certificate can be replaced in place (rotation); what is
    /// not a certificate and key is refused and the old one kept.
    #[test]
    fn the_client_certificate_is_replaced_in_place() {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &rng,
        )
        .expect("key");
        let key_pem = crate::certificate::bootstrap::pem("PRIVATE KEY", key.as_ref());
        let cert = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/bootstrapped-client.pem"
        ))
        .to_vec();
        let cfg = KubeConfig {
            host: "127.0.0.1".into(),
            port: 6443,
            ca: None,
            client_cert: Some((cert.clone(), key_pem.clone().into_bytes())),
            token: None,
        };
        let client = Client::new(&cfg, "test").expect("client");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            assert!(
                client
                    .set_client_cert(b"garbage", b"garbage")
                    .await
                    .is_err()
            );
            client
                .set_client_cert(&cert, key_pem.as_bytes())
                .await
                .expect("replaced");
            let token_only = Client::new(
                &KubeConfig {
                    client_cert: None,
                    token: Some("t".into()),
                    ..cfg.clone()
                },
                "test",
            )
            .expect("client");
            assert!(
                token_only
                    .set_client_cert(&cert, key_pem.as_bytes())
                    .await
                    .is_err(),
                "a token client has no certificate to replace"
            );
        });
    }
}
