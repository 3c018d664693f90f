//! The small HTTP(S) GET client of httpGet probes and hooks, with
//! kubelet's rules: HTTPS without certificate checks, `Connection: close`,
//! default `User-Agent` and `Accept` unless the pod sets them, redirects
//! followed (at most 10) only while they stay on the first request's host,
//! and the body read up to a cap. The caller bounds the whole exchange with
//! its timeout: dropping the future closes the connection, so a hung
//! endpoint holds nothing afterwards.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};

/// kubelet's cap on the body kept for probe messages.
pub const MAX_BODY: usize = 10 * 1024;
const MAX_REDIRECTS: usize = 10;

/// One GET.
#[derive(Debug, Clone)]
pub struct Get<'a> {
    pub https: bool,
    pub host: &'a str,
    pub port: u16,
    /// Path and query.
    pub path: &'a str,
    pub headers: &'a [(String, String)],
    pub user_agent: &'a str,
}

/// The final response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Up to [`MAX_BODY`] bytes, lossily decoded.
    pub body: String,
}

/// Accepts any certificate, as kubelet's probes do (`InsecureSkipVerify`),
/// but still checks the handshake signatures.
#[derive(Debug)]
pub(crate) struct AnyCert(pub(crate) WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
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

/// Why a GET failed, worded as Go's `net/http` words it (kubelet puts
/// these into probe and hook events).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("TLS: {0}")]
    TlsConfig(rustls::Error),
    #[error("Get {url:?}: dial tcp {addr}: {reason}")]
    Dial {
        url: String,
        addr: String,
        reason: String,
    },
    #[error("Get {url:?}: TLS handshake: {reason}")]
    Handshake { url: String, reason: String },
    /// Bad server name, HTTP errors, a broken body.
    #[error("Get {url:?}: {reason}")]
    Get { url: String, reason: String },
    #[error("Get {url:?}: stopped after {MAX_REDIRECTS} redirects")]
    Redirects { url: String },
}

fn client_config(alpn: &[&[u8]]) -> Result<Arc<rustls::ClientConfig>, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algs = provider.signature_verification_algorithms;
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::TlsConfig)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(algs)))
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

/// A TLS connector that checks no certificate: HTTP/1.1, or HTTP/2 (`h2`
/// by ALPN) for gRPC.
pub fn tls(h2: bool) -> Result<tokio_rustls::TlsConnector, Error> {
    type Config = OnceLock<Result<Arc<rustls::ClientConfig>, Error>>;
    static H1: Config = OnceLock::new();
    static H2: Config = OnceLock::new();
    let cfg = if h2 {
        H2.get_or_init(|| client_config(&[b"h2"]))
    } else {
        H1.get_or_init(|| client_config(&[b"http/1.1"]))
    };
    cfg.clone().map(tokio_rustls::TlsConnector::from)
}

/// `host:port` with IPv6 literals bracketed.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Where a redirect points, resolved against the current URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    https: bool,
    host: String,
    port: u16,
    path: String,
}

fn split_host_port(hp: &str, https: bool) -> Option<(String, u16)> {
    let default = if https { 443 } else { 80 };
    if let Some(rest) = hp.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default,
            None => return None,
        };
        return Some((h.to_string(), port));
    }
    match hp.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), p.parse().ok()?)),
        None => Some((hp.to_string(), default)),
    }
}

fn resolve(base: &Url, location: &str) -> Option<Url> {
    let abs = |https: bool, rest: &str| {
        let (hp, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = split_host_port(hp, https)?;
        Some(Url {
            https,
            host,
            port,
            path: path.to_string(),
        })
    };
    let lower = location.to_ascii_lowercase();
    if lower.starts_with("http://") {
        abs(false, &location[7..])
    } else if lower.starts_with("https://") {
        abs(true, &location[8..])
    } else if let Some(rest) = location.strip_prefix("//") {
        abs(base.https, rest)
    } else if location.starts_with('/') {
        Some(Url {
            path: location.to_string(),
            ..base.clone()
        })
    } else {
        let path = base.path.split(['?', '#']).next().unwrap_or("/");
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        Some(Url {
            path: format!("{}{location}", if dir.is_empty() { "/" } else { dir }),
            ..base.clone()
        })
    }
}

/// GETs the URL, following redirects on the same host.
pub async fn get(req: &Get<'_>) -> Result<Response, Error> {
    let first = Url {
        https: req.https,
        host: req.host.to_string(),
        port: req.port,
        path: req.path.to_string(),
    };
    let mut url = first.clone();
    for _ in 0..=MAX_REDIRECTS {
        let (status, body, location) = once(req, &url).await?;
        let next = if (300..400).contains(&status) {
            location.and_then(|l| resolve(&url, &l))
        } else {
            None
        };
        match next {
            Some(n) if n.host.eq_ignore_ascii_case(&first.host) => url = n,
            _ => return Ok(Response { status, body }),
        }
    }
    Err(Error::Redirects {
        url: display(&first),
    })
}

fn display(u: &Url) -> String {
    format!(
        "{}://{}{}",
        if u.https { "https" } else { "http" },
        join_host_port(&u.host, u.port),
        u.path
    )
}

async fn once(req: &Get<'_>, url: &Url) -> Result<(u16, String, Option<String>), Error> {
    let addr = join_host_port(&url.host, url.port);
    let shown = display(url);
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| Error::Dial {
            url: shown.clone(),
            addr: addr.clone(),
            reason: e.to_string(),
        })?;
    if url.https {
        let name = ServerName::try_from(url.host.clone()).map_err(|e| Error::Get {
            url: shown.clone(),
            reason: e.to_string(),
        })?;
        let tls = tls(false)?
            .connect(name, tcp)
            .await
            .map_err(|e| Error::Handshake {
                url: shown.clone(),
                reason: e.to_string(),
            })?;
        exchange(Box::new(tls), req, &addr, &url.path, &shown).await
    } else {
        exchange(Box::new(tcp), req, &addr, &url.path, &shown).await
    }
}

/// A connection, TLS or not, boxed: hyper's HTTP/1 client is built once
/// into the binary rather than once per stream type (probes and hooks
/// here, the API client, the kubelet API's ports and stream proxy).
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

async fn exchange(
    io: Box<dyn Io>,
    req: &Get<'_>,
    addr: &str,
    path: &str,
    shown: &str,
) -> Result<(u16, String, Option<String>), Error> {
    let err = |e: &dyn std::fmt::Display| Error::Get {
        url: shown.to_string(),
        reason: e.to_string(),
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| err(&e))?;
    let has = |name: &str| {
        req.headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(name))
    };
    let mut b = Request::get(path).header("Connection", "close");
    if !has("Host") {
        b = b.header("Host", addr);
    }
    if !has("User-Agent") {
        b = b.header("User-Agent", req.user_agent);
    }
    if !has("Accept") {
        b = b.header("Accept", "*/*");
    }
    for (k, v) in req.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    // Full<Bytes>, as the API client's requests: one hyper client.
    let request = b.body(Full::new(Bytes::new())).map_err(|e| err(&e))?;
    let work = async {
        let res = sender.send_request(request).await.map_err(|e| err(&e))?;
        let status = res.status().as_u16();
        let location = res
            .headers()
            .get("Location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = res.into_body();
        let mut buf = Vec::new();
        while buf.len() < MAX_BODY {
            match body.frame().await {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        buf.extend_from_slice(d);
                    }
                }
                Some(Err(e)) => return Err(err(&e)),
                None => break,
            }
        }
        buf.truncate(MAX_BODY);
        Ok((status, String::from_utf8_lossy(&buf).into_owned(), location))
    };
    tokio::pin!(work);
    tokio::pin!(conn);
    // The connection is driven here, not in a spawned task: when the
    // caller gives up, nothing is left behind.
    tokio::select! {
        r = &mut work => return r,
        c = &mut conn => c.map_err(|e| err(&e))?,
    }
    work.await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url {
            https: false,
            host: "10.0.0.1".into(),
            port: 8080,
            path: "/a/b?x=1".into(),
        }
    }

    #[test]
    fn redirects_resolve_like_a_browser() {
        let r = |l: &str| resolve(&base(), l).map(|u| display(&u));
        assert_eq!(r("/c").as_deref(), Some("http://10.0.0.1:8080/c"));
        assert_eq!(r("c").as_deref(), Some("http://10.0.0.1:8080/a/c"));
        assert_eq!(
            r("https://10.0.0.1/x").as_deref(),
            Some("https://10.0.0.1:443/x")
        );
        assert_eq!(
            r("http://example.com:81").as_deref(),
            Some("http://example.com:81/")
        );
        assert_eq!(r("//[::1]:9/z").as_deref(), Some("http://[::1]:9/z"));
        assert_eq!(r("http://h:notaport/"), None);
    }
}
