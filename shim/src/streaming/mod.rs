//! The CRI streaming server (kubelet's and containerd's model): `Exec`,
//! `Attach` and `PortForward` answer with a URL carrying a one-time token
//! (random, 1 minute to live, at most 1,000 waiting); the client upgrades
//! an HTTP/1.1 request to that URL to SPDY/3.1 and the session runs here,
//! in the shim, on `--streaming-address` (default 127.0.0.1, a random port).
//!
//! The wire protocols are in [`cri_proto::streaming`]; [`remotecommand`]
//! runs exec sessions, [`attach`] attach sessions (through the container's
//! monitor), [`portforward`] forwarded connections.

mod attach;
mod portforward;
mod pty;
mod remotecommand;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cri_proto::streaming::session::{Conn, Role, Session};
use cri_proto::streaming::{self as proto, PORTFORWARD_V1, REMOTECOMMAND_PROTOCOLS, ws};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

pub use remotecommand::Channels;

use crate::error::Error;
use crate::runtime::Runtime;

/// Why an exec or attach session could not be served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    #[error("the client closed the connection")]
    ClientClosed,
    #[error("timed out waiting for the client's streams ({got} of {expected})")]
    StreamsTimedOut { got: usize, expected: usize },
    #[error("attach: read from the monitor: {0}")]
    MonitorRead(#[source] std::io::Error),
    #[error("attach: a frame of {0} bytes from the monitor")]
    FrameTooLarge(usize),
}

/// How long a URL stays valid (kubelet's streaming CacheTTL).
const TOKEN_TTL: Duration = Duration::from_secs(60);
/// Tokens handed out and not yet used, at most (kubelet's MaxInFlight).
const MAX_IN_FLIGHT: usize = 1000;

/// A request waiting for its client to connect.
#[derive(Debug, Clone)]
enum Pending {
    Exec {
        container_id: String,
        cmd: Vec<String>,
        channels: Channels,
    },
    Attach {
        container_id: String,
        channels: Channels,
    },
    PortForward {
        sandbox_id: String,
    },
}

impl Pending {
    /// An exec's or attach's channels (none for port-forward).
    fn channels(&self) -> Channels {
        match self {
            Pending::Exec { channels, .. } | Pending::Attach { channels, .. } => *channels,
            Pending::PortForward { .. } => Channels {
                stdin: false,
                stdout: false,
                stderr: false,
                tty: false,
            },
        }
    }

    fn path(&self) -> &'static str {
        match self {
            Pending::Exec { .. } => "exec",
            Pending::Attach { .. } => "attach",
            Pending::PortForward { .. } => "portforward",
        }
    }
}

/// The streaming server's address and its waiting requests.
#[derive(Debug)]
pub struct Streaming {
    base: String,
    tokens: Mutex<HashMap<String, (Instant, Pending)>>,
}

impl Streaming {
    /// Binds the server's socket; `serve` then answers on it.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<(Arc<Self>, TcpListener)> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let st = Arc::new(Self {
            base: format!("http://{local}"),
            tokens: Mutex::new(HashMap::new()),
        });
        Ok((st, listener))
    }

    /// The URL for an Exec request (validated as kubelet validates it).
    pub fn exec_url(
        &self,
        container_id: String,
        cmd: Vec<String>,
        channels: Channels,
    ) -> Result<String, Error> {
        if cmd.is_empty() {
            return Err(Error::InvalidArgument("cmd: must not be empty".into()));
        }
        validate(channels)?;
        self.insert(Pending::Exec {
            container_id,
            cmd,
            channels,
        })
    }

    /// The URL for an Attach request (validated as kubelet validates it).
    pub fn attach_url(&self, container_id: String, channels: Channels) -> Result<String, Error> {
        validate(channels)?;
        self.insert(Pending::Attach {
            container_id,
            channels,
        })
    }

    /// The URL for a PortForward request.
    pub fn port_forward_url(&self, sandbox_id: String) -> Result<String, Error> {
        self.insert(Pending::PortForward { sandbox_id })
    }

    fn insert(&self, p: Pending) -> Result<String, Error> {
        let mut t = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        t.retain(|_, (at, _)| now.duration_since(*at) < TOKEN_TTL);
        if t.len() >= MAX_IN_FLIGHT {
            return Err(Error::ResourceExhausted(format!(
                "maximum number of in-flight streaming requests ({MAX_IN_FLIGHT}) exceeded"
            )));
        }
        let token: String = (0..16)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect();
        let url = format!("{}/{}/{token}", self.base, p.path());
        t.insert(token, (now, p));
        Ok(url)
    }

    fn take(&self, token: &str) -> Option<Pending> {
        let mut t = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let (at, p) = t.remove(token)?;
        (at.elapsed() < TOKEN_TTL).then_some(p)
    }

    /// Answers on `listener` until the process ends.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, rt: Arc<Runtime>) {
        loop {
            let (tcp, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and friends: wait rather than spin.
                    tracing::warn!(error = %e, "streaming server: accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (st, rt) = (self.clone(), rt.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let (st, rt) = (st.clone(), rt.clone());
                    async move { Ok::<_, Infallible>(st.handle(req, rt)) }
                });
                // A client that never finishes its request is hung up on.
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(30))
                    .serve_connection(TokioIo::new(tcp), svc)
                    .with_upgrades();
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "streaming server: connection");
                }
            });
        }
    }

    fn handle(&self, mut req: Request<Incoming>, rt: Arc<Runtime>) -> Response<Full<Bytes>> {
        let mut parts = req.uri().path().trim_matches('/').splitn(2, '/');
        let (kind, token) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let Some(pending) = self.take(token) else {
            return reply(StatusCode::NOT_FOUND, "unknown or expired streaming token");
        };
        if pending.path() != kind {
            return reply(
                StatusCode::NOT_FOUND,
                "the token is for another kind of request",
            );
        }
        let upgrade = header_values(&req, hyper::header::UPGRADE.as_str());
        if upgrade.iter().any(|u| u.eq_ignore_ascii_case("websocket")) {
            return websocket(req, pending, rt);
        }
        if !upgrade.iter().any(|u| u.eq_ignore_ascii_case("spdy/3.1")) {
            return reply(
                StatusCode::BAD_REQUEST,
                "unable to upgrade: SPDY/3.1 or websocket is served (the Upgrade header)",
            );
        }
        let supported: &[&'static str] = match pending {
            Pending::Exec { .. } | Pending::Attach { .. } => REMOTECOMMAND_PROTOCOLS,
            Pending::PortForward { .. } => &[PORTFORWARD_V1],
        };
        let offered = header_values(&req, proto::PROTOCOL_HEADER);
        let offered: Vec<&str> = offered.iter().map(String::as_str).collect();
        let Some(protocol) = proto::negotiate(&offered, supported) else {
            return unnegotiated(&offered, supported);
        };
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let io = match on_upgrade.await {
                Ok(u) => TokioIo::new(u),
                Err(e) => {
                    tracing::debug!(error = %e, "streaming server: upgrade");
                    return;
                }
            };
            let mut session = Session::new(io, Role::Server);
            if let Pending::PortForward { sandbox_id } = pending {
                let netns = match rt.sandbox(&sandbox_id) {
                    Ok(rec) => rec.netns.as_deref().map(|p| rt.pins.locate(p)),
                    Err(e) => {
                        tracing::debug!(error = %e, "port-forward: sandbox gone");
                        session.close().await;
                        return;
                    }
                };
                return portforward::serve(session, sandbox_id, netns).await;
            }
            let channels = pending.channels();
            match remotecommand::wait_for_streams(&mut session, protocol, channels).await {
                Ok(streams) => run(pending, session, streams, protocol, rt).await,
                Err(e) => {
                    tracing::debug!(error = %e, "streaming: no session");
                    session.close().await;
                }
            }
        });
        switching(&[
            (hyper::header::UPGRADE.as_str(), "SPDY/3.1"),
            (proto::PROTOCOL_HEADER, protocol),
        ])
    }
}

/// Runs an exec or attach session on its streams.
async fn run<C: Conn>(
    pending: Pending,
    conn: C,
    streams: remotecommand::Streams,
    protocol: &'static str,
    rt: Arc<Runtime>,
) {
    match pending {
        Pending::Exec {
            container_id,
            cmd,
            channels,
        } => {
            remotecommand::serve_exec(conn, streams, protocol, rt, container_id, cmd, channels)
                .await
        }
        Pending::Attach {
            container_id,
            channels,
        } => attach::serve_attach(conn, streams, protocol, rt, container_id, channels).await,
        Pending::PortForward { .. } => conn.close().await,
    }
}

/// The WebSocket upgrade (exec and attach, `v5.channel.k8s.io` and
/// `v4.channel.k8s.io`, as client-go's WebSocket executor speaks them).
fn websocket(
    mut req: Request<Incoming>,
    pending: Pending,
    rt: Arc<Runtime>,
) -> Response<Full<Bytes>> {
    if matches!(pending, Pending::PortForward { .. }) {
        return reply(
            StatusCode::BAD_REQUEST,
            "port-forward is served over SPDY/3.1 only",
        );
    }
    let key = header_values(&req, "Sec-WebSocket-Key");
    let version = header_values(&req, "Sec-WebSocket-Version");
    let (Some(key), true) = (key.first(), version.iter().any(|v| v.trim() == "13")) else {
        return reply(
            StatusCode::BAD_REQUEST,
            "websocket: Sec-WebSocket-Key and Sec-WebSocket-Version 13 are required",
        );
    };
    let offered = header_values(&req, "Sec-WebSocket-Protocol");
    let offered: Vec<&str> = offered.iter().map(String::as_str).collect();
    let Some(protocol) = proto::negotiate(&offered, ws::WS_PROTOCOLS) else {
        return unnegotiated(&offered, ws::WS_PROTOCOLS);
    };
    let accept = ws::accept_key(key);
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let io = match on_upgrade.await {
            Ok(u) => TokioIo::new(u),
            Err(e) => {
                tracing::debug!(error = %e, "streaming server: upgrade");
                return;
            }
        };
        let conn = ws::WsSession::new(io, Role::Server, protocol);
        match remotecommand::ws_streams(&conn, pending.channels()).await {
            Ok(streams) => run(pending, conn, streams, protocol, rt).await,
            Err(e) => {
                tracing::debug!(error = %e, "websocket: no channels");
                conn.close().await;
            }
        }
    });
    switching(&[
        (hyper::header::UPGRADE.as_str(), "websocket"),
        ("Sec-WebSocket-Accept", accept.as_str()),
        ("Sec-WebSocket-Protocol", protocol),
    ])
}

/// A 101 with `Connection: Upgrade` and `headers`.
fn switching(headers: &[(&str, &str)]) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(
        hyper::header::CONNECTION,
        "Upgrade".parse().expect("static"),
    );
    for (n, v) in headers {
        if let (Ok(n), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(n.as_bytes()),
            hyper::header::HeaderValue::from_str(v),
        ) {
            h.insert(n, v);
        }
    }
    resp
}

fn unnegotiated(offered: &[&str], supported: &[&str]) -> Response<Full<Bytes>> {
    reply(
        StatusCode::FORBIDDEN,
        &format!(
            "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports {supported:?}"
        ),
    )
}

/// kubelet's checks of an Exec or Attach request's channels.
fn validate(channels: Channels) -> Result<(), Error> {
    if !(channels.stdin || channels.stdout || channels.stderr) {
        return Err(Error::InvalidArgument(
            "one of stdin, stdout, or stderr must be set".into(),
        ));
    }
    if channels.tty && channels.stderr {
        return Err(Error::InvalidArgument(
            "tty and stderr cannot both be true".into(),
        ));
    }
    Ok(())
}

fn header_values<B>(req: &Request<B>, name: &str) -> Vec<String> {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect()
}

fn reply(code: StatusCode, msg: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{msg}\n"))));
    *r.status_mut() = code;
    r
}
