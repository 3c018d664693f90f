//! One connection to the API server: TCP (keepalives) and TLS, then
//! HTTP/2 when ALPN agrees (as client-go): every request and every watch
//! are streams of it, its headers compressed, checked by a PING after 30 s
//! without a frame (client-go's `ReadIdleTimeout`); HTTP/1.1 otherwise,
//! one request at a time.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::{http1, http2};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::sync::Mutex;

use crate::kube::client::Transport;

/// An HTTP/2 connection with no frame for this long is PINGed
/// (client-go's `ReadIdleTimeout`)...
const PING_AFTER: Duration = Duration::from_secs(30);
/// ...and closed when the PONG is not back in this (`PingTimeout`).
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// One connection's request side.
#[derive(Clone)]
pub(crate) enum Sender {
    /// One request at a time.
    H1(Arc<Mutex<http1::SendRequest<Full<Bytes>>>>),
    /// Any number at once (streams); cloned for each.
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    pub(crate) fn is_open(&self) -> bool {
        match self {
            Sender::H1(s) => s.try_lock().map_or(true, |s| !s.is_closed()),
            Sender::H2(s) => !s.is_closed(),
        }
    }

    pub(crate) async fn send(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<hyper::body::Incoming>, hyper::Error> {
        match self {
            Sender::H1(s) => {
                let mut s = s.lock().await;
                s.ready().await?;
                s.send_request(req).await
            }
            Sender::H2(s) => {
                let mut s = s.clone();
                s.ready().await?;
                s.send_request(req).await
            }
        }
    }
}

/// Dials `addr` ("host:port") and speaks TLS (`server_name`), then
/// HTTP/2 or HTTP/1.1 as ALPN agreed.
pub(crate) async fn dial(
    addr: String,
    tls: &tokio_rustls::TlsConnector,
    server_name: ServerName<'static>,
) -> Result<Sender, Transport> {
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|source| Transport::Dial {
            addr: addr.clone(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    keepalive(&tcp);
    let tls = tls
        .connect(server_name, tcp)
        .await
        .map_err(|source| Transport::Tls {
            addr: addr.clone(),
            source,
        })?;
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io: Box<dyn crate::httpc::Io> = Box::new(tls);
    if h2 {
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(PING_AFTER)
            .keep_alive_timeout(PING_TIMEOUT)
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(io))
            .await
            .map_err(|source| Transport::Handshake { addr, source })?;
        drive(conn);
        return Ok(Sender::H2(sender));
    }
    let (sender, conn) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|source| Transport::Handshake { addr, source })?;
    drive(conn);
    Ok(Sender::H1(Arc::new(Mutex::new(sender))))
}

/// Runs a connection's I/O until it closes.
fn drive(conn: impl Future<Output = Result<(), hyper::Error>> + Send + 'static) {
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "API server connection closed");
        }
    });
}

/// TCP keepalives after 30 s idle, every 30 s (Go's dialer, as client-go
/// dials): a connection whose peer vanished (a NAT forgot it, the link
/// dropped) errors in minutes instead of hanging a watch over HTTP/1.1.
fn keepalive(tcp: &tokio::net::TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = setsockopt(tcp, sockopt::KeepAlive, &true);
    let _ = setsockopt(tcp, sockopt::TcpKeepIdle, &30);
    let _ = setsockopt(tcp, sockopt::TcpKeepInterval, &30);
}
