//! The client side, as client-go's SPDY executor and port forwarder do it:
//! upgrade a request to the URL a CRI `Exec`/`PortForward` returned, then
//! open the streams. `picolet ctl` and the tests use it.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::session::{Conn, Role, Session};
use super::ws::WsSession;
use super::{
    Outcome, PORT_HEADER, PROTOCOL_HEADER, REMOTECOMMAND_V1, REMOTECOMMAND_V2, REQUEST_ID_HEADER,
    STREAM_DATA, STREAM_ERROR, STREAM_RESIZE, STREAM_STDERR, STREAM_STDIN, STREAM_STDOUT,
    STREAM_TYPE, TermSize,
};

/// The largest response head we read before the upgrade.
const MAX_RESPONSE_HEAD: usize = 16 << 10;
/// The most of an error stream's message we keep.
const MAX_ERROR_MESSAGE: usize = 64 << 10;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Upgrades a request to `url` (`http://host:port/path`) to SPDY/3.1,
/// offering `protocols`; returns the session and the protocol the server
/// chose.
pub async fn connect(url: &str, protocols: &[&'static str]) -> io::Result<(Session, &'static str)> {
    let (tcp, protocol, _) = upgrade(url, "SPDY/3.1", PROTOCOL_HEADER, protocols, &[]).await?;
    Ok((Session::new(tcp, Role::Client), protocol))
}

/// The same over WebSocket (client-go's WebSocket executor: a GET,
/// `Sec-WebSocket-Protocol` offering `protocols`).
pub async fn connect_ws(
    url: &str,
    protocols: &[&'static str],
) -> io::Result<(WsSession, &'static str)> {
    use base64::Engine as _;
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(1);
    let mut nonce = h.finish().to_le_bytes().to_vec();
    nonce.extend_from_slice(&h.finish().rotate_left(17).to_le_bytes());
    let key = base64::engine::general_purpose::STANDARD.encode(&nonce);
    let extra = [
        ("Sec-WebSocket-Version", "13".to_string()),
        ("Sec-WebSocket-Key", key.clone()),
    ];
    let offered = protocols.join(", ");
    let (tcp, protocol, head) = upgrade(
        url,
        "websocket",
        "Sec-WebSocket-Protocol",
        protocols,
        &extra,
    )
    .await
    .map_err(|e| io::Error::new(e.kind(), format!("{e} (offered {offered})")))?;
    let accept = head
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("Sec-WebSocket-Accept"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    if accept != super::ws::accept_key(&key) {
        return Err(bad(format!("bad Sec-WebSocket-Accept {accept:?}")));
    }
    Ok((WsSession::new(tcp, Role::Client, protocol), protocol))
}

/// An HTTP/1.1 upgrade of a request to `url` to `upgrade`, offering
/// `protocols` in `protocol_header` (one header each for SPDY, one list
/// for WebSocket); returns the connection, the protocol chosen and the
/// response head.
async fn upgrade(
    url: &str,
    upgrade: &str,
    protocol_header: &str,
    protocols: &[&'static str],
    extra: &[(&str, String)],
) -> io::Result<(TcpStream, &'static str, String)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad(format!("{url}: only http:// streaming URLs are supported")))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut tcp = TcpStream::connect(host).await?;
    let method = if upgrade == "websocket" {
        "GET"
    } else {
        "POST"
    };
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: Upgrade\r\nUpgrade: {upgrade}\r\n"
    );
    if upgrade == "websocket" {
        req.push_str(&format!("{protocol_header}: {}\r\n", protocols.join(", ")));
    } else {
        for p in protocols {
            req.push_str(&format!("{protocol_header}: {p}\r\n"));
        }
    }
    for (n, v) in extra {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    tcp.write_all(req.as_bytes()).await?;
    // Byte by byte up to the blank line: nothing after it may be taken
    // from the session.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > MAX_RESPONSE_HEAD {
            return Err(bad("the upgrade response head is too long"));
        }
        head.push(tcp.read_u8().await?);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head.split("\r\n").next().unwrap_or("");
    if !status.starts_with("HTTP/1.1 101") {
        return Err(bad(format!("the server did not upgrade: {status}")));
    }
    let chosen = head
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case(protocol_header))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let protocol = protocols
        .iter()
        .find(|p| **p == chosen)
        .copied()
        .ok_or_else(|| bad(format!("the server chose protocol {chosen:?}")))?;
    Ok((tcp, protocol, head))
}

/// Where an exec's channels go. `stdin`: `None` for no stdin stream.
pub struct ExecIo<I, O, E> {
    pub stdin: Option<I>,
    pub stdout: Option<O>,
    pub stderr: Option<E>,
    pub tty: bool,
    /// Terminal sizes to send (with `tty`).
    pub resize: Option<mpsc::Receiver<TermSize>>,
}

/// Runs an exec session as client-go's v4 protocol does: open error,
/// stdin, stdout, stderr (not with a tty) and resize (with a tty, from v3)
/// streams, copy, and read how it ended from the error stream.
pub async fn exec<C, I, O, E>(
    session: C,
    protocol: &str,
    io: ExecIo<I, O, E>,
) -> io::Result<Outcome>
where
    C: Conn,
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin + Send + 'static,
    E: AsyncWrite + Unpin + Send + 'static,
{
    let kind = |t: &str| vec![(STREAM_TYPE.to_string(), t.to_string())];
    let mut error = session.open(kind(STREAM_ERROR)).await?;
    let stdin = match io.stdin {
        Some(i) => Some((i, session.open(kind(STREAM_STDIN)).await?)),
        None => None,
    };
    let stdout = match io.stdout {
        Some(o) => Some((o, session.open(kind(STREAM_STDOUT)).await?)),
        None => None,
    };
    let stderr = match io.stderr {
        Some(e) if !io.tty => Some((e, session.open(kind(STREAM_STDERR)).await?)),
        _ => None,
    };
    let resizes = io.tty && protocol != REMOTECOMMAND_V1 && protocol != REMOTECOMMAND_V2;
    if let (true, Some(mut sizes)) = (resizes, io.resize) {
        let s = session.open(kind(STREAM_RESIZE)).await?;
        tokio::spawn(async move {
            while let Some(size) = sizes.recv().await {
                if s.writer.write(&size.to_json()).await.is_err() {
                    break;
                }
            }
        });
    }
    let error_task = tokio::spawn(async move { error.read_to_end(MAX_ERROR_MESSAGE).await });
    if let Some((mut from, s)) = stdin {
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            while let Ok(n) = from.read(&mut buf).await {
                if n == 0 || s.writer.write(&buf[..n]).await.is_err() {
                    break;
                }
            }
            // Non-interactive stdin ends: the command sees EOF.
            let _ = s.writer.close().await;
        });
    }
    tokio::join!(copy_out(stdout), copy_out(stderr));
    let message = error_task
        .await
        .map_err(|e| io::Error::other(format!("error stream task: {e}")))?;
    session.close().await;
    Ok(super::parse_status(protocol, &message))
}

/// One forwarded connection: opens the error and data streams for `port`
/// (request `id`), copies `conn` both ways, and returns what the server
/// reported on the error stream (empty: no error).
pub async fn forward<C>(session: &Session, id: u32, port: u16, conn: C) -> io::Result<String>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let headers = |t: &str| {
        vec![
            (STREAM_TYPE.to_string(), t.to_string()),
            (PORT_HEADER.to_string(), port.to_string()),
            (REQUEST_ID_HEADER.to_string(), id.to_string()),
        ]
    };
    let mut error = session.open(headers(STREAM_ERROR)).await?;
    // We send nothing on the error stream.
    error.writer.close().await?;
    let mut data = session.open(headers(STREAM_DATA)).await?;
    let (mut rd, mut wr) = tokio::io::split(conn);
    let writer = data.writer.clone();
    let up = async {
        let mut buf = vec![0u8; 32 << 10];
        while let Ok(n) = rd.read(&mut buf).await {
            if n == 0 || writer.write(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = writer.close().await;
        // Our side is done sending; the connection ends with the pod's.
        std::future::pending::<()>().await
    };
    let down = async {
        while let Some(chunk) = data.read().await {
            if wr.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    };
    // As client-go: done when the pod's side ends.
    tokio::select! {
        () = down => {}
        () = up => {}
    }
    let msg = error.read_to_end(MAX_ERROR_MESSAGE).await;
    Ok(String::from_utf8_lossy(&msg).into_owned())
}

/// Copies what the server sends on a stream to `to`, until it half-closes.
async fn copy_out<W: AsyncWrite + Unpin>(pair: Option<(W, super::session::Stream)>) {
    if let Some((mut to, mut s)) = pair {
        while let Some(chunk) = s.read().await {
            if to.write_all(&chunk).await.is_err() {
                break;
            }
            let _ = to.flush().await;
        }
    }
}
