//! HTTP(S) to one registry endpoint: a connection per request (hyper
//! http1 over tokio-rustls, both already in the binary), the auth flow of
//! [`crate::auth`] on a 401, redirects followed (blob downloads are often
//! sent to a CDN: the `Authorization` header stays behind when the host
//! changes), every wait bounded.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{InvalidDnsNameError, ServerName};

use crate::auth::{Challenge, TokenCache, parse_challenge, parse_token};
use crate::config::{Endpoint, HostConfig};
use crate::{Credential, Error, Kind};

mod tls;

use tls::{TlsError, tls_config};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// For response headers, and between two pieces of a body.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_REDIRECTS: usize = 5;
/// Largest token answer or error body read.
const MAX_SMALL_BODY: usize = 64 << 10;
const READ_BUFFER: usize = 64 << 10;
const USER_AGENT: &str = concat!("picolet/", env!("CARGO_PKG_VERSION"));

/// Why an endpoint cannot be reached at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    #[error("server name {host:?}: {source}")]
    ServerName {
        host: String,
        source: InvalidDnsNameError,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A request that got no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("dial {authority}: timed out")]
    DialTimeout { authority: String },
    #[error("dial {authority}: {source}")]
    Dial {
        authority: String,
        source: io::Error,
    },
    #[error("TLS with {authority}: {source}")]
    Tls {
        authority: String,
        source: io::Error,
    },
    #[error("{authority}: no answer in time")]
    NoAnswer { authority: String },
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

/// How to reach one `scheme://host:port`.
#[derive(Clone)]
pub(crate) struct Conn {
    endpoint: Endpoint,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

impl Conn {
    pub fn new(endpoint: &Endpoint, cfg: Option<&HostConfig>) -> Result<Self, ConnError> {
        let tls = if endpoint.https {
            let name = ServerName::try_from(endpoint.host().to_string()).map_err(|source| {
                ConnError::ServerName {
                    host: endpoint.host().to_string(),
                    source,
                }
            })?;
            Some((tokio_rustls::TlsConnector::from(tls_config(cfg)?), name))
        } else {
            None
        };
        Ok(Self {
            endpoint: endpoint.clone(),
            tls,
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends one request on a new connection; the answer's body streams
    /// from it.
    async fn send<B>(&self, req: Request<B>) -> Result<Response<Incoming>, SendError>
    where
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let authority = || self.endpoint.authority.clone();
        let addr = (self.endpoint.host().to_string(), self.endpoint.port());
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| SendError::DialTimeout {
                authority: authority(),
            })?
            .map_err(|source| SendError::Dial {
                authority: authority(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let exchange = async {
            match &self.tls {
                Some((connector, name)) => {
                    let tls = connector
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(|source| SendError::Tls {
                            authority: authority(),
                            source,
                        })?;
                    request_on(TokioIo::new(tls), req).await
                }
                None => request_on(TokioIo::new(tcp), req).await,
            }
        };
        tokio::time::timeout(CONNECT_TIMEOUT + IDLE_TIMEOUT, exchange)
            .await
            .map_err(|_| SendError::NoAnswer {
                authority: authority(),
            })?
    }
}

async fn request_on<I, B>(io: I, req: Request<B>) -> Result<Response<Incoming>, SendError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // A small read buffer: a layer streams through in 64 KiB pieces (hyper's
    // default lets it grow to ~400 KiB per connection, three at once).
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(READ_BUFFER)
        .handshake(io)
        .await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender.send_request(req).await?)
}

/// Reads a small body (an error or a token), at most [`MAX_SMALL_BODY`].
pub(crate) async fn small_body(resp: Response<Incoming>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut body = resp.into_body();
    while let Ok(Some(Ok(frame))) = tokio::time::timeout(IDLE_TIMEOUT, body.frame()).await {
        if let Ok(data) = frame.into_data() {
            let room = MAX_SMALL_BODY.saturating_sub(out.len());
            out.extend_from_slice(&data[..data.len().min(room)]);
            if room <= data.len() {
                break;
            }
        }
    }
    out
}

/// The distribution error body's first message, else the status text.
pub(crate) fn error_text(status: StatusCode, body: &[u8]) -> String {
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let e = &v["errors"][0];
            let code = e["code"].as_str()?.to_string();
            Some(match e["message"].as_str() {
                Some(m) if !m.is_empty() => format!("{code}: {m}"),
                _ => code,
            })
        });
    match message {
        Some(m) => format!("HTTP {status}: {m}"),
        None => format!("HTTP {status}"),
    }
}

/// One repository at one endpoint, with the credentials to use there.
pub(crate) struct Remote {
    pub conn: Conn,
    pub repository: String,
    /// `registry/repository:tag` as the user named it, for errors.
    pub reference: String,
    pub cred: Option<Credential>,
    pub tokens: Arc<TokenCache>,
    pub registries: Arc<crate::config::Registries>,
    /// The `Authorization` value the last challenge called for.
    authorization: Mutex<Option<String>>,
    /// Whether `cred` was shown to the registry or its token server (it
    /// asked for credentials): an answer then may depend on them.
    presented: std::sync::atomic::AtomicBool,
}

impl Remote {
    pub fn new(
        conn: Conn,
        repository: String,
        reference: String,
        cred: Option<Credential>,
        tokens: Arc<TokenCache>,
        registries: Arc<crate::config::Registries>,
    ) -> Self {
        // A registry token from CRI is sent as it is.
        let authorization = cred
            .as_ref()
            .filter(|c| !c.registry_token.is_empty())
            .map(|c| format!("Bearer {}", c.registry_token));
        Self {
            presented: authorization.is_some().into(),
            conn,
            repository,
            reference,
            cred,
            tokens,
            registries,
            authorization: Mutex::new(authorization),
        }
    }

    /// Whether the registry asked for the credentials and was given them.
    pub fn presented_credentials(&self) -> bool {
        self.presented.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn err(&self, kind: Kind, what: impl std::fmt::Display) -> Error {
        Error::new(
            kind,
            format!(
                "{} ({}): {what}",
                self.reference, self.conn.endpoint.authority
            ),
        )
    }

    /// A file of the pull (a blob being downloaded) failed: the path, and
    /// the I/O error as the source.
    pub fn file_err(&self, path: &std::path::Path, e: std::io::Error) -> Error {
        self.err(Kind::Other, format_args!("{}: {e}", path.display()))
            .caused_by(e)
    }

    fn url_path(&self, tail: &str) -> String {
        format!("{}/{}/{tail}", self.conn.endpoint.api, self.repository)
    }

    /// GETs `tail` (`manifests/<ref>`, `blobs/<digest>`) of the repository,
    /// authenticating and following redirects. Answers other than 2xx are
    /// returned for the caller to judge, except a 401 after authenticating.
    pub async fn get(
        &self,
        tail: &str,
        accept: &str,
        range_from: Option<u64>,
    ) -> Result<Response<Incoming>, Error> {
        let path = self.url_path(tail);
        let mut authenticated = false;
        loop {
            let auth = self
                .authorization
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let resp = self
                .get_following(&path, accept, range_from, auth.as_deref())
                .await?;
            if resp.status() != StatusCode::UNAUTHORIZED {
                return Ok(resp);
            }
            let challenge = resp
                .headers()
                .get(hyper::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_challenge);
            let body = small_body(resp).await;
            if authenticated {
                return Err(self.err(
                    Kind::Unauthorized,
                    format!(
                        "{} (credentials {})",
                        error_text(StatusCode::UNAUTHORIZED, &body),
                        if self.cred.is_some() {
                            "refused"
                        } else {
                            "needed: none given"
                        }
                    ),
                ));
            }
            let Some(challenge) = challenge else {
                return Err(self.err(
                    Kind::Unauthorized,
                    format!(
                        "{} without a usable WWW-Authenticate challenge",
                        error_text(StatusCode::UNAUTHORIZED, &body)
                    ),
                ));
            };
            let value = self.answer(challenge).await?;
            *self.authorization.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
            if self.cred.is_some() {
                self.presented
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            authenticated = true;
        }
    }

    /// The `Authorization` header that answers a challenge.
    async fn answer(&self, challenge: Challenge) -> Result<String, Error> {
        match challenge {
            Challenge::Basic => match &self.cred {
                Some(c) if !c.username.is_empty() => Ok(format!("Basic {}", c.basic())),
                _ => Err(self.err(
                    Kind::Unauthorized,
                    "HTTP 401: the registry wants a username and password; none given",
                )),
            },
            Challenge::Bearer {
                realm,
                service,
                scope,
            } => {
                let scope = scope.unwrap_or_else(|| format!("repository:{}:pull", self.repository));
                // Keyed by the whole credential, as containerd's authorizer
                // is: a token got with right credentials never serves a
                // request that brings wrong ones.
                let who = self
                    .cred
                    .as_ref()
                    .map_or_else(String::new, Credential::fingerprint);
                let key = format!(
                    "{realm}\n{}\n{scope}\n{who}",
                    service.as_deref().unwrap_or("")
                );
                if let Some(t) = self.tokens.get(&key) {
                    return Ok(format!("Bearer {t}"));
                }
                let (token, life) = self.fetch_token(&realm, service.as_deref(), &scope).await?;
                self.tokens.put(key, token.clone(), life);
                Ok(format!("Bearer {token}"))
            }
        }
    }

    /// Asks a token server: an OAuth2 refresh-token POST with an identity
    /// token, else a GET (with basic credentials when there are some).
    async fn fetch_token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<(String, Duration), Error> {
        let (endpoint, path) = split_url(realm)
            .ok_or_else(|| self.err(Kind::Other, format!("token realm {realm:?} is not a URL")))?;
        // Credentials for an HTTPS registry never travel in plain text.
        if !endpoint.https && self.conn.endpoint.https && self.cred.is_some() {
            return Err(self.err(
                Kind::Other,
                format!(
                    "token realm {realm} is plain HTTP for an HTTPS registry: credentials not sent"
                ),
            ));
        }
        let conn = Conn::new(&endpoint, self.registries.host(&endpoint.authority))
            .map_err(|e| self.err(Kind::Other, e))?;
        let mut query = vec![("scope", scope)];
        if let Some(s) = service {
            query.push(("service", s));
        }
        let identity = self.cred.as_ref().filter(|c| !c.identity_token.is_empty());
        let req = Request::builder()
            .header(hyper::header::HOST, &endpoint.authority)
            .header(hyper::header::USER_AGENT, USER_AGENT);
        let resp = if let Some(c) = identity {
            query.push(("grant_type", "refresh_token"));
            query.push(("refresh_token", &c.identity_token));
            query.push(("client_id", "picolet"));
            let form = form_encode(&query);
            let req = req
                .method("POST")
                .uri(path)
                .header(
                    hyper::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(Full::new(Bytes::from(form)))
                .map_err(|e| self.err(Kind::Other, e))?;
            conn.send(req).await
        } else {
            let sep = if path.contains('?') { '&' } else { '?' };
            let mut req = req
                .method("GET")
                .uri(format!("{path}{sep}{}", form_encode(&query)));
            if let Some(c) = self.cred.as_ref().filter(|c| !c.username.is_empty()) {
                req = req.header(hyper::header::AUTHORIZATION, format!("Basic {}", c.basic()));
            }
            let req = req
                .body(Empty::<Bytes>::new())
                .map_err(|e| self.err(Kind::Other, e))?;
            conn.send(req).await
        }
        .map_err(|e| self.err(Kind::Unreachable, format!("token server: {e}")))?;
        let status = resp.status();
        let body = small_body(resp).await;
        if !status.is_success() {
            let kind = if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                Kind::Unauthorized
            } else {
                Kind::Other
            };
            return Err(self.err(
                kind,
                format!("token server {realm}: {}", error_text(status, &body)),
            ));
        }
        parse_token(&body).map_err(|e| self.err(Kind::Other, format!("token server {realm}: {e}")))
    }

    async fn get_following(
        &self,
        path: &str,
        accept: &str,
        range_from: Option<u64>,
        authorization: Option<&str>,
    ) -> Result<Response<Incoming>, Error> {
        let mut conn = self.conn.clone();
        let mut path = path.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let mut req = Request::get(&path)
                .header(hyper::header::HOST, &conn.endpoint.authority)
                .header(hyper::header::USER_AGENT, USER_AGENT)
                .header(hyper::header::ACCEPT, accept);
            // Credentials go to the registry only, never to where it redirects.
            let same_host = conn.endpoint.https == self.conn.endpoint.https
                && conn.endpoint.authority == self.conn.endpoint.authority;
            if let Some(a) = authorization.filter(|_| same_host) {
                req = req.header(hyper::header::AUTHORIZATION, a);
            }
            if let Some(from) = range_from.filter(|n| *n > 0) {
                req = req.header(hyper::header::RANGE, format!("bytes={from}-"));
            }
            let req = req
                .body(Empty::<Bytes>::new())
                .map_err(|e| self.err(Kind::Other, e))?;
            let resp = conn
                .send(req)
                .await
                .map_err(|e| self.err(Kind::Unreachable, e))?;
            if !resp.status().is_redirection() {
                return Ok(resp);
            }
            let location = resp
                .headers()
                .get(hyper::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .ok_or_else(|| self.err(Kind::Other, "redirect without a Location"))?;
            if location.starts_with('/') {
                path = location;
                continue;
            }
            let (endpoint, next) = split_url(&location).ok_or_else(|| {
                self.err(Kind::Other, format!("redirect to {location:?}: not a URL"))
            })?;
            if !endpoint.https && self.conn.endpoint.https {
                return Err(self.err(
                    Kind::Other,
                    format!("redirect from HTTPS to plain HTTP refused: {location}"),
                ));
            }
            conn = Conn::new(&endpoint, self.registries.host(&endpoint.authority))
                .map_err(|e| self.err(Kind::Other, e))?;
            path = next;
        }
        Err(self.err(
            Kind::Other,
            format!("stopped after {MAX_REDIRECTS} redirects"),
        ))
    }
}

/// `https://host[:port]/path?query` → (endpoint, `/path?query`).
fn split_url(url: &str) -> Option<(Endpoint, String)> {
    let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        (false, url.strip_prefix("http://")?)
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    if authority.is_empty() {
        return None;
    }
    Some((
        Endpoint {
            https,
            authority: authority.to_string(),
            api: String::new(),
        },
        path,
    ))
}

/// `application/x-www-form-urlencoded`.
fn form_encode(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        let mut out = String::new();
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_forms() {
        let (e, p) = split_url("https://auth.docker.io/token?x=1").expect("url");
        assert_eq!(
            (e.https, e.authority.as_str(), p.as_str()),
            (true, "auth.docker.io", "/token?x=1")
        );
        let (e, p) = split_url("http://127.0.0.1:5001?a=b").expect("url");
        assert_eq!((e.port(), p.as_str()), (5001, "/?a=b"));
        assert!(split_url("ftp://x/y").is_none());
        assert_eq!(
            form_encode(&[("scope", "repository:a/b:pull"), ("service", "r e")]),
            "scope=repository%3Aa%2Fb%3Apull&service=r%20e"
        );
    }

    #[test]
    fn tls_file_errors_name_the_file_and_keep_the_io_error() {
        let ca = std::path::Path::new("/nonexistent/picolet/ca.crt");
        let cfg = HostConfig {
            auth: None,
            tls: crate::config::Tls {
                ca_file: Some(ca.to_path_buf()),
                ..Default::default()
            },
        };
        let e = tls_config(Some(&cfg)).expect_err("no CA file");
        assert!(
            e.to_string()
                .starts_with(&format!("ca_file {}: ", ca.display())),
            "{e}"
        );
        match e {
            TlsError::CaRead { path, source } => {
                assert_eq!(path, ca);
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn distribution_errors_are_shown() {
        let body =
            br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{}}]}"#;
        assert_eq!(
            error_text(StatusCode::NOT_FOUND, body),
            "HTTP 404 Not Found: MANIFEST_UNKNOWN: manifest unknown"
        );
        assert_eq!(
            error_text(StatusCode::BAD_GATEWAY, b"<html>"),
            "HTTP 502 Bad Gateway"
        );
    }
}
