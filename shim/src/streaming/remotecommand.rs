//! Exec over an upgraded SPDY connection, as kubelet's
//! `streaming/remotecommand` serves it: wait for the client's streams, run
//! the command through `picolet monitor exec` (pipes, or a pty for
//! `tty`), copy, then report how it ended on the error stream and close.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use cri_proto::streaming::session::{Conn, Session, Stream, StreamWriter};
use cri_proto::streaming::ws::WsSession;
use cri_proto::streaming::{
    self as proto, Outcome, REMOTECOMMAND_V1, REMOTECOMMAND_V2, STREAM_ERROR, STREAM_RESIZE,
    STREAM_STDERR, STREAM_STDIN, STREAM_STDOUT,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use super::pty;
use crate::runtime::Runtime;

/// How long the client has to open its streams (kubelet's
/// streamCreationTimeout default).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// After the command exits, how long output may still drain (a background
/// process that keeps the pipe open must not hold the session forever).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// What the client asked for in its CRI request.
#[derive(Debug, Clone, Copy)]
pub struct Channels {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// The streams of one session, by type.
#[derive(Default)]
pub(super) struct Streams {
    pub(super) error: Option<Stream>,
    pub(super) stdin: Option<Stream>,
    pub(super) stdout: Option<Stream>,
    pub(super) stderr: Option<Stream>,
    pub(super) resize: Option<Stream>,
}

impl Streams {
    fn writers(&self) -> Vec<StreamWriter> {
        [
            &self.error,
            &self.stdin,
            &self.stdout,
            &self.stderr,
            &self.resize,
        ]
        .into_iter()
        .flatten()
        .map(|s| s.writer.clone())
        .collect()
    }
}

/// Accepts the streams `ch` calls for under `protocol` (resize only with a
/// tty, from v3 on; stderr not with a tty).
pub(super) async fn wait_for_streams(
    session: &mut Session,
    protocol: &str,
    ch: Channels,
) -> Result<Streams, super::StreamError> {
    let resize = ch.tty && protocol != REMOTECOMMAND_V1 && protocol != REMOTECOMMAND_V2;
    let expected = 1
        + usize::from(ch.stdin)
        + usize::from(ch.stdout)
        + usize::from(ch.stderr && !ch.tty)
        + usize::from(resize);
    let mut s = Streams::default();
    let mut got = 0;
    let deadline = tokio::time::Instant::now() + STREAM_CREATION_TIMEOUT;
    while got < expected {
        let stream = match tokio::time::timeout_at(deadline, session.accept()).await {
            Ok(Some(st)) => st,
            Ok(None) => return Err(super::StreamError::ClientClosed),
            Err(_) => return Err(super::StreamError::StreamsTimedOut { got, expected }),
        };
        let slot = match stream.header(proto::STREAM_TYPE) {
            Some(STREAM_ERROR) => &mut s.error,
            Some(STREAM_STDIN) if ch.stdin => &mut s.stdin,
            Some(STREAM_STDOUT) if ch.stdout => &mut s.stdout,
            Some(STREAM_STDERR) if ch.stderr && !ch.tty => &mut s.stderr,
            Some(STREAM_RESIZE) if resize => &mut s.resize,
            other => {
                tracing::debug!(stream_type = ?other, "exec: unexpected stream reset");
                let _ = stream.writer.reset().await;
                continue;
            }
        };
        if slot.is_none() {
            got += 1;
        }
        *slot = Some(stream);
    }
    Ok(s)
}

/// Serves one exec session to its end, on the streams the client opened.
pub async fn serve_exec<C: Conn>(
    conn: C,
    mut streams: Streams,
    protocol: &'static str,
    rt: Arc<Runtime>,
    id: String,
    cmd: Vec<String>,
    ch: Channels,
) {
    let outcome = run(&mut streams, &rt, &id, &cmd, ch).await;
    finish(&conn, protocol, &streams, &outcome).await;
}

/// The WebSocket channels `ch` calls for (they exist once the connection
/// does; nothing to wait for).
pub(super) async fn ws_streams(conn: &WsSession, ch: Channels) -> std::io::Result<Streams> {
    let open = |t: &str| conn.open(vec![(proto::STREAM_TYPE.to_string(), t.to_string())]);
    Ok(Streams {
        error: Some(open(STREAM_ERROR).await?),
        stdin: if ch.stdin {
            Some(open(STREAM_STDIN).await?)
        } else {
            None
        },
        stdout: if ch.stdout {
            Some(open(STREAM_STDOUT).await?)
        } else {
            None
        },
        stderr: if ch.stderr && !ch.tty {
            Some(open(STREAM_STDERR).await?)
        } else {
            None
        },
        resize: if ch.tty {
            Some(open(STREAM_RESIZE).await?)
        } else {
            None
        },
    })
}

/// Reports `outcome` on the error stream, half-closes every stream and
/// ends the connection (the client waits for all three).
pub(super) async fn finish<C: Conn>(
    conn: &C,
    protocol: &str,
    streams: &Streams,
    outcome: &Outcome,
) {
    if let Some(err) = &streams.error {
        let msg = proto::status_message(protocol, outcome);
        if !msg.is_empty() {
            let _ = err.writer.write(&msg).await;
        }
    }
    for w in streams.writers() {
        let _ = w.close().await;
    }
    conn.close().await;
}

async fn run(
    streams: &mut Streams,
    rt: &Runtime,
    id: &str,
    cmd: &[String],
    ch: Channels,
) -> Outcome {
    let mut c = match rt.exec_command(id, cmd, 0, ch.tty) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    c.kill_on_drop(true);
    if ch.tty {
        run_tty(streams, c).await
    } else {
        run_pipes(streams, c).await
    }
}

async fn run_pipes(streams: &mut Streams, mut c: tokio::process::Command) -> Outcome {
    c.stdin(if streams.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(if streams.stdout.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stderr(if streams.stderr.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => return Outcome::Failed(format!("start exec helper: {e}")),
    };
    let stdin_task = match (child.stdin.take(), streams.stdin.take()) {
        (Some(mut pipe), Some(mut s)) => Some(tokio::spawn(async move {
            while let Some(chunk) = s.read().await {
                if pipe.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            // Dropping the pipe closes the command's stdin.
        })),
        _ => None,
    };
    let mut outputs = Vec::new();
    if let (Some(o), Some(s)) = (child.stdout.take(), &streams.stdout) {
        outputs.push(copy_out(o, s.writer.clone()));
    }
    if let (Some(o), Some(s)) = (child.stderr.take(), &streams.stderr) {
        outputs.push(copy_out(o, s.writer.clone()));
    }
    let status = child.wait().await;
    drain(outputs).await;
    if let Some(t) = stdin_task {
        t.abort();
    }
    match status {
        Ok(st) => Outcome::Exited(exit_code(st)),
        Err(e) => Outcome::Failed(format!("wait for the exec helper: {e}")),
    }
}

async fn run_tty(streams: &mut Streams, mut c: tokio::process::Command) -> Outcome {
    // The helper's stdin is our console socket: its child sends the
    // master of the pty it opens inside the container.
    let (ours, theirs) = match std::os::unix::net::UnixStream::pair() {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(format!("console socket pair: {e}")),
    };
    c.stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => return Outcome::Failed(format!("start exec helper: {e}")),
    };
    drop(c);
    let helper_err = child.stderr.take();
    let master = match tokio::time::timeout(STREAM_CREATION_TIMEOUT, receive_master(ours)).await {
        Ok(Ok(Some(fd))) => pty::master(fd),
        Ok(Ok(None)) => Err(std::io::Error::other("the exec helper sent no terminal")),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(std::io::Error::other(
            "no terminal from the exec helper in time",
        )),
    };
    let master = match master {
        Ok(m) => Arc::new(m),
        Err(e) => {
            // What the helper said (the command could not start) goes to
            // the user's terminal, then its exit code.
            if let (Some(mut err), Some(out)) = (helper_err, &streams.stdout) {
                let mut said = Vec::new();
                let _ = (&mut err).take(64 << 10).read_to_end(&mut said).await;
                let _ = out.writer.write(&said).await;
            }
            return match child.wait().await {
                Ok(st) if st.code().is_some() => Outcome::Exited(exit_code(st)),
                _ => Outcome::Failed(format!("exec on a terminal: {e}")),
            };
        }
    };
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    if let Some(mut s) = streams.resize.take() {
        let m = master.clone();
        tasks.push(tokio::spawn(async move {
            let mut resizes = proto::Resizes::default();
            while let Some(chunk) = s.read().await {
                for size in resizes.push(&chunk) {
                    if let Err(e) = m.resize(size) {
                        tracing::debug!(error = %e, "exec: resize");
                    }
                }
            }
        }));
    }
    if let Some(mut s) = streams.stdin.take() {
        let m = master.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(chunk) = s.read().await {
                if m.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        }));
    }
    let mut outputs = Vec::new();
    if let Some(s) = &streams.stdout {
        let (m, w) = (master.clone(), s.writer.clone());
        outputs.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            while let Ok(n) = m.read(&mut buf).await {
                if n == 0 || w.write(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }));
    }
    let status = child.wait().await;
    drain(outputs).await;
    for t in tasks {
        t.abort();
    }
    match status {
        Ok(st) => Outcome::Exited(exit_code(st)),
        Err(e) => Outcome::Failed(format!("wait for the exec helper: {e}")),
    }
}

/// The pty master the exec child sends on the console socket; None if the
/// helper closed it without (it failed first).
async fn receive_master(
    sock: std::os::unix::net::UnixStream,
) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use std::os::fd::AsFd;
    sock.set_nonblocking(true)?;
    let sock = tokio::net::UnixStream::from_std(sock)?;
    loop {
        sock.readable().await?;
        match sock.try_io(tokio::io::Interest::READABLE, || {
            crate::host::recv_fd(sock.as_fd())
        }) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

fn copy_out<R: AsyncRead + Unpin + Send + 'static>(
    mut from: R,
    to: StreamWriter,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 << 10];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 || to.write(&buf[..n]).await.is_err() {
                break;
            }
        }
    })
}

/// Lets the output copies finish, for at most [`DRAIN_AFTER_EXIT`].
async fn drain(outputs: Vec<JoinHandle<()>>) {
    let deadline = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
    for mut t in outputs {
        if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
            t.abort();
        }
    }
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}
