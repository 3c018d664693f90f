//! Port forwarding over an upgraded SPDY connection (`portforward.k8s.io`),
//! as kubelet serves it: the client opens an error and a data stream per
//! connection, paired by `requestID`; we connect to `localhost:<port>`
//! inside the pod's network namespace and copy both ways. A connection
//! that fails is reported on its error stream; the session stays for the
//! next one.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use cri_proto::streaming::session::{Session, Stream};
use cri_proto::streaming::{
    PORT_HEADER, REQUEST_ID_HEADER, STREAM_DATA, STREAM_ERROR, STREAM_TYPE,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why a forwarded connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("invalid port header {0:?}")]
    BadPort(String),
    /// Every address tried, with its error.
    #[error("{}", dials(.0))]
    Dial(Vec<(SocketAddr, std::io::Error)>),
    /// Entering the pod's network namespace.
    #[error(transparent)]
    Netns(Box<crate::host::InNetnsError<ForwardError>>),
    #[error("the connect task died")]
    Task(#[source] tokio::task::JoinError),
    #[error("set non-blocking: {0}")]
    NonBlocking(#[source] std::io::Error),
    #[error("register socket: {0}")]
    Register(#[source] std::io::Error),
}

fn dials(failed: &[(SocketAddr, std::io::Error)]) -> String {
    failed
        .iter()
        .map(|(ip, e)| format!("dial {ip}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Half-made pairs one session may hold (a client that opens error streams
/// and never data streams must not grow the map without bound).
const MAX_PENDING: usize = 128;

#[derive(Default)]
struct Pair {
    error: Option<Stream>,
    data: Option<Stream>,
}

/// Serves forwarded connections into `netns` (None: the host's network,
/// a hostNetwork pod) until the client closes the session.
pub async fn serve(mut session: Session, sandbox: String, netns: Option<PathBuf>) {
    let mut pending: HashMap<String, Pair> = HashMap::new();
    while let Some(stream) = session.accept().await {
        // Clients before requestID paired an error stream with the data
        // stream opened right after it (ids n and n+2).
        let key = match stream.header(REQUEST_ID_HEADER) {
            Some(r) => r.to_string(),
            None if stream.header(STREAM_TYPE) == Some(STREAM_DATA) => {
                (stream.id.saturating_sub(2)).to_string()
            }
            None => stream.id.to_string(),
        };
        if !pending.contains_key(&key) && pending.len() >= MAX_PENDING {
            let _ = stream.writer.reset().await;
            continue;
        }
        let pair = pending.entry(key.clone()).or_default();
        match stream.header(STREAM_TYPE) {
            Some(STREAM_ERROR) => pair.error = Some(stream),
            Some(STREAM_DATA) => pair.data = Some(stream),
            _ => {
                let _ = stream.writer.reset().await;
                continue;
            }
        }
        if pair.error.is_some() && pair.data.is_some() {
            let Some(Pair {
                error: Some(error),
                data: Some(data),
            }) = pending.remove(&key)
            else {
                continue;
            };
            tokio::spawn(forward(error, data, sandbox.clone(), netns.clone()));
        }
    }
    session.close().await;
}

async fn forward(error: Stream, mut data: Stream, sandbox: String, netns: Option<PathBuf>) {
    let port = data
        .header(PORT_HEADER)
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p > 0);
    let result = match port {
        None => Err(ForwardError::BadPort(
            data.header(PORT_HEADER).unwrap_or("").to_string(),
        )),
        Some(port) => connect(netns, port).await,
    };
    let mut tcp = match result {
        Ok(t) => t,
        Err(e) => {
            let msg = format!(
                "error forwarding port {} to pod {sandbox}: {e}",
                port.unwrap_or(0)
            );
            let _ = error.writer.write(msg.as_bytes()).await;
            let _ = error.writer.close().await;
            let _ = data.writer.close().await;
            return;
        }
    };
    let (mut rd, mut wr) = tcp.split();
    let writer = data.writer.clone();
    let to_pod = async {
        while let Some(chunk) = data.read().await {
            if wr.write_all(&chunk).await.is_err() {
                break;
            }
        }
        // The client is done sending: half-close toward the pod.
        let _ = wr.shutdown().await;
    };
    let from_pod = async {
        let mut buf = vec![0u8; 32 << 10];
        while let Ok(n) = rd.read(&mut buf).await {
            if n == 0 || writer.write(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = writer.close().await;
    };
    tokio::join!(to_pod, from_pod);
    let _ = error.writer.close().await;
}

/// A TCP connection to localhost:`port` made inside `netns`: a thread
/// joins the namespace (only that thread: setns of a network namespace is
/// per thread), makes the socket there, and hands it back; the socket
/// stays in the namespace it was made in.
async fn connect(netns: Option<PathBuf>, port: u16) -> Result<TcpStream, ForwardError> {
    let dial = move || {
        let mut errors = Vec::new();
        for ip in [
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
        ] {
            match std::net::TcpStream::connect_timeout(&ip, CONNECT_TIMEOUT) {
                Ok(s) => return Ok(s),
                Err(e) => errors.push((ip, e)),
            }
        }
        Err(ForwardError::Dial(errors))
    };
    let std_stream = tokio::task::spawn_blocking(move || match &netns {
        Some(ns) => crate::host::in_netns(ns, dial).map_err(|e| match e {
            crate::host::InNetnsError::Work(e) => e,
            e => ForwardError::Netns(Box::new(e)),
        }),
        None => dial(),
    })
    .await
    .map_err(ForwardError::Task)??;
    std_stream
        .set_nonblocking(true)
        .map_err(ForwardError::NonBlocking)?;
    TcpStream::from_std(std_stream).map_err(ForwardError::Register)
}
