//! Attach over an upgraded SPDY connection: the same streams as exec
//! (kubelet's remotecommand), joined to the container's monitor through
//! its attach socket (`monitor::attach` describes the socket's framing).

use std::path::Path;
use std::sync::Arc;

use cri_proto::streaming::Outcome;
use cri_proto::streaming::session::{Conn, StreamWriter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::remotecommand::{Channels, Streams, finish};
use crate::runtime::Runtime;

/// The largest output frame the monitor sends (its reads are 16 KiB).
const MAX_FRAME: usize = 1 << 20;

/// Serves one attach session to its end (the container's exit, or the
/// client leaving), on the streams the client opened.
pub async fn serve_attach<C: Conn>(
    conn: C,
    mut streams: Streams,
    protocol: &'static str,
    rt: Arc<Runtime>,
    id: String,
    ch: Channels,
) {
    let outcome = match rt.attach_target(&id) {
        Ok(socket) => run(&mut streams, &socket, ch).await,
        Err(e) => Outcome::Failed(e.to_string()),
    };
    finish(&conn, protocol, &streams, &outcome).await;
}

/// Connects to the monitor's socket (its path may be longer than a socket
/// address holds: `host::via_dir_fd`).
fn connect(socket: &Path) -> std::io::Result<UnixStream> {
    let (_dir, via) = crate::host::via_dir_fd(socket)?;
    let s = std::os::unix::net::UnixStream::connect(via)?;
    s.set_nonblocking(true)?;
    UnixStream::from_std(s)
}

async fn run(streams: &mut Streams, socket: &Path, ch: Channels) -> Outcome {
    let sock = match connect(socket) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(format!("attach to {}: {e}", socket.display())),
    };
    let (mut rd, mut wr) = sock.into_split();
    let hello = u8::from(streams.stdin.is_some());
    if let Err(e) = wr.write_all(&[hello]).await {
        return Outcome::Failed(format!("attach: {e}"));
    }
    let stdin_task = streams.stdin.take().map(|mut s| {
        tokio::spawn(async move {
            while let Some(chunk) = s.read().await {
                if wr.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            // The client's stdin ended: the container's too, under stdin_once.
            let _ = wr.shutdown().await;
            // Keep the write half (and so the connection) until dropped.
            std::future::pending::<()>().await;
        })
    });
    // A tty's size goes over a second connection (hello 2): 4 bytes each.
    let resize_task = match streams.resize.take() {
        Some(mut s) if ch.tty => match connect(socket) {
            Ok(mut conn) => Some(tokio::spawn(async move {
                if conn.write_all(&[2]).await.is_err() {
                    return;
                }
                let mut resizes = cri_proto::streaming::Resizes::default();
                while let Some(chunk) = s.read().await {
                    for z in resizes.push(&chunk) {
                        let mut rec = z.width.to_be_bytes().to_vec();
                        rec.extend_from_slice(&z.height.to_be_bytes());
                        if conn.write_all(&rec).await.is_err() {
                            return;
                        }
                    }
                }
            })),
            Err(e) => {
                tracing::debug!(error = %e, "attach: resize connection");
                None
            }
        },
        _ => None,
    };
    let out = streams.stdout.as_ref().map(|s| s.writer.clone());
    // With a tty there is no stderr stream: both go to stdout.
    let err = if ch.tty {
        out.clone()
    } else {
        streams.stderr.as_ref().map(|s| s.writer.clone())
    };
    let result = copy_frames(&mut rd, out, err).await;
    for t in [stdin_task, resize_task].into_iter().flatten() {
        t.abort();
    }
    match result {
        Ok(()) => Outcome::Exited(0),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// Reads the monitor's frames until it closes the socket (the container
/// exited) and sends each to its stream; ends early if the client is gone.
async fn copy_frames(
    rd: &mut tokio::net::unix::OwnedReadHalf,
    out: Option<StreamWriter>,
    err: Option<StreamWriter>,
) -> Result<(), super::StreamError> {
    let mut head = [0u8; 5];
    let mut buf = Vec::new();
    loop {
        match rd.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(super::StreamError::MonitorRead(e)),
        }
        let len = usize::try_from(u32::from_be_bytes([head[1], head[2], head[3], head[4]]))
            .unwrap_or(usize::MAX);
        if len > MAX_FRAME {
            return Err(super::StreamError::FrameTooLarge(len));
        }
        buf.resize(len, 0);
        rd.read_exact(&mut buf)
            .await
            .map_err(super::StreamError::MonitorRead)?;
        let to = match head[0] {
            crate::process::monitor::attach::FRAME_STDERR => &err,
            _ => &out,
        };
        if let Some(w) = to
            && w.write(&buf).await.is_err()
        {
            return Ok(()); // the client left
        }
    }
}
