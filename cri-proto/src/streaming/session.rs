//! A SPDY/3.1 session over any byte stream: a reader task that routes the
//! peer's frames to streams (answering SYN_STREAM with SYN_REPLY and PING
//! with PING, as spdystream does), and a writer task that owns the header
//! compression state and the socket's write half.
//!
//! Data for a stream goes through a bounded channel: a reader that does not
//! keep up slows the whole connection down (TCP's back-pressure), it never
//! grows memory. spdystream has no per-stream flow control either.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::spdy::{Codec, Frame, Headers, MAX_DATA_CHUNK, RST_CANCEL, RST_REFUSED_STREAM};

/// Chunks queued per stream before the connection's reader waits.
const STREAM_QUEUE: usize = 16;
/// How long a client waits for the SYN_REPLY of a stream it opened
/// (apimachinery's createStreamResponseTimeout).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// After our GOAWAY, how long the peer has to hang up.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// A streaming connection, SPDY or WebSocket: streams are opened by type
/// (`streamType` header), then closed together.
pub trait Conn: Send + Sync {
    /// A stream for `headers` (SPDY: a SYN_STREAM and its reply; WebSocket:
    /// the channel of its `streamType`).
    fn open(&self, headers: Headers) -> impl Future<Output = io::Result<Stream>> + Send;
    /// Ends the connection once what is queued is written.
    fn close(&self) -> impl Future<Output = ()> + Send;
}

impl Conn for Session {
    fn open(&self, headers: Headers) -> impl Future<Output = io::Result<Stream>> + Send {
        Session::open(self, headers)
    }
    fn close(&self) -> impl Future<Output = ()> + Send {
        Session::close(self)
    }
}

/// Which end of the connection we are: clients open odd streams, servers
/// even ones, and servers answer every SYN_STREAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

pub(super) enum Out {
    Frame(Frame),
    /// A WebSocket pong (the SPDY writer never sees one).
    Pong(Vec<u8>),
    /// GOAWAY, flush, shut the write half down.
    Close,
}

#[derive(Default)]
struct State {
    data: HashMap<u32, mpsc::Sender<Vec<u8>>>,
    replies: HashMap<u32, oneshot::Sender<bool>>,
    next_id: u32,
    last_peer_stream: u32,
    closed: bool,
}

/// One SPDY connection.
pub struct Session {
    out: mpsc::Sender<Out>,
    incoming: mpsc::Receiver<Stream>,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

/// One stream: what the peer sends arrives on `read`; `writer` sends.
#[derive(Debug)]
pub struct Stream {
    pub id: u32,
    /// The headers of the SYN_STREAM that opened it.
    pub headers: Headers,
    pub(super) rx: mpsc::Receiver<Vec<u8>>,
    pub writer: StreamWriter,
}

/// The sending half of a stream; cheap to clone.
#[derive(Debug, Clone)]
pub struct StreamWriter {
    pub(super) id: u32,
    pub(super) out: mpsc::Sender<Out>,
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the spdy connection is closed")
}

impl StreamWriter {
    /// Sends `data` in frames of at most 32 KiB.
    pub async fn write(&self, data: &[u8]) -> io::Result<()> {
        for chunk in data.chunks(MAX_DATA_CHUNK) {
            let f = Frame::Data {
                stream: self.id,
                fin: false,
                data: chunk.to_vec(),
            };
            self.out.send(Out::Frame(f)).await.map_err(|_| closed())?;
        }
        Ok(())
    }

    /// Half-closes the stream (an empty data frame with FIN).
    pub async fn close(&self) -> io::Result<()> {
        let f = Frame::Data {
            stream: self.id,
            fin: true,
            data: Vec::new(),
        };
        self.out.send(Out::Frame(f)).await.map_err(|_| closed())
    }

    /// Ends the stream both ways (RST_STREAM CANCEL).
    pub async fn reset(&self) -> io::Result<()> {
        let f = Frame::RstStream {
            stream: self.id,
            status: RST_CANCEL,
        };
        self.out.send(Out::Frame(f)).await.map_err(|_| closed())
    }
}

impl Stream {
    /// The next chunk the peer sent; `None` once it half-closed the stream,
    /// reset it, or the connection ended.
    pub async fn read(&mut self) -> Option<Vec<u8>> {
        self.rx.recv().await
    }

    /// Reads until the peer half-closes, keeping at most `limit` bytes.
    pub async fn read_to_end(&mut self, limit: usize) -> Vec<u8> {
        let mut all = Vec::new();
        while let Some(chunk) = self.read().await {
            let room = limit.saturating_sub(all.len());
            all.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        all
    }

    /// The header `name`, if the opener sent it.
    pub fn header(&self, name: &str) -> Option<&str> {
        super::spdy::header(&self.headers, name)
    }
}

impl Session {
    /// Starts the reader and writer tasks on `io`.
    pub fn new<T>(io: T, role: Role) -> Self
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (rd, wr) = tokio::io::split(io);
        let (out_tx, out_rx) = mpsc::channel(64);
        let (in_tx, in_rx) = mpsc::channel(64);
        let state = Arc::new(Mutex::new(State {
            next_id: if role == Role::Client { 1 } else { 2 },
            ..State::default()
        }));
        let (stop_tx, stop_rx) = oneshot::channel();
        tokio::spawn(write_loop(wr, out_rx, state.clone(), stop_tx));
        tokio::spawn(read_loop(
            rd,
            role,
            out_tx.clone(),
            in_tx,
            state.clone(),
            stop_rx,
        ));
        Self {
            out: out_tx,
            incoming: in_rx,
            state,
        }
    }

    /// The next stream the peer opened; `None` once the connection ended.
    pub async fn accept(&mut self) -> Option<Stream> {
        self.incoming.recv().await
    }

    /// Opens a stream and waits for the peer's SYN_REPLY.
    pub async fn open(&self, headers: Headers) -> io::Result<Stream> {
        let (data_tx, rx) = mpsc::channel(STREAM_QUEUE);
        let (reply_tx, reply_rx) = oneshot::channel();
        let id = {
            let mut st = lock(&self.state);
            if st.closed {
                return Err(closed());
            }
            let id = st.next_id;
            st.next_id += 2;
            st.data.insert(id, data_tx);
            st.replies.insert(id, reply_tx);
            id
        };
        let syn = Frame::SynStream {
            stream: id,
            fin: false,
            headers: headers.clone(),
        };
        self.out.send(Out::Frame(syn)).await.map_err(|_| closed())?;
        match tokio::time::timeout(REPLY_TIMEOUT, reply_rx).await {
            Ok(Ok(true)) => Ok(Stream {
                id,
                headers,
                rx,
                writer: StreamWriter {
                    id,
                    out: self.out.clone(),
                },
            }),
            Ok(Ok(false)) => Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("the peer refused stream {id}"),
            )),
            Ok(Err(_)) => Err(closed()),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply to stream {id} within {REPLY_TIMEOUT:?}"),
            )),
        }
    }

    /// Sends GOAWAY and closes our side once every queued frame is written.
    pub async fn close(&self) {
        let _ = self.out.send(Out::Close).await;
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A panic aborts the process (panic = "abort"): no poisoned state to see.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

async fn write_loop<W: AsyncWrite>(
    wr: W,
    mut rx: mpsc::Receiver<Out>,
    state: Arc<Mutex<State>>,
    stop_reader: oneshot::Sender<()>,
) {
    tokio::pin!(wr);
    let mut codec = Codec::new();
    let mut buf = Vec::with_capacity(MAX_DATA_CHUNK + 64);
    let mut next = rx.recv().await;
    let mut closing = false;
    while let Some(msg) = next.take() {
        // This message, then whatever is already queued, in one write.
        let mut msg = Some(msg);
        buf.clear();
        while let Some(m) = msg.take() {
            match m {
                Out::Frame(f) => codec.encode(&f, &mut buf),
                Out::Pong(_) => {}
                Out::Close => {
                    let last_stream = lock(&state).last_peer_stream;
                    let goaway = Frame::GoAway {
                        last_stream,
                        status: 0,
                    };
                    codec.encode(&goaway, &mut buf);
                    closing = true;
                    break;
                }
            }
            if buf.len() < MAX_DATA_CHUNK {
                msg = rx.try_recv().ok();
            }
        }
        if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() || closing {
            break;
        }
        next = rx.recv().await;
    }
    let _ = wr.shutdown().await;
    lock(&state).closed = true;
    if closing {
        // The peer reads the GOAWAY and hangs up; one that does not is
        // hung up on after a grace, so no connection outlives its session.
        tokio::time::sleep(CLOSE_GRACE).await;
    }
    let _ = stop_reader.send(());
}

async fn read_loop<R: AsyncRead>(
    rd: R,
    role: Role,
    out: mpsc::Sender<Out>,
    incoming: mpsc::Sender<Stream>,
    state: Arc<Mutex<State>>,
    mut stop: oneshot::Receiver<()>,
) {
    tokio::pin!(rd);
    let mut codec = Codec::new();
    let mut buf = Vec::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    let mut going_away = false;
    'conn: loop {
        loop {
            let frame = match codec.decode(&mut buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "spdy: closing the connection");
                    break 'conn;
                }
            };
            tracing::trace!(?frame, "spdy: received");
            match frame {
                Frame::Data { stream, fin, data } => {
                    let tx = lock(&state).data.get(&stream).cloned();
                    if let Some(tx) = tx {
                        if !data.is_empty() {
                            // The stream's reader went away: drop the data.
                            let _ = tx.send(data).await;
                        }
                        if fin {
                            lock(&state).data.remove(&stream);
                        }
                    }
                }
                Frame::SynStream {
                    stream,
                    fin,
                    headers,
                } => {
                    // Servers open even streams, clients odd ones.
                    let ours = (stream % 2 == 0) == (role == Role::Server);
                    if role == Role::Client || going_away || ours {
                        let rst = Frame::RstStream {
                            stream,
                            status: RST_REFUSED_STREAM,
                        };
                        if out.send(Out::Frame(rst)).await.is_err() {
                            break 'conn;
                        }
                        continue;
                    }
                    let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                    {
                        let mut st = lock(&state);
                        st.last_peer_stream = st.last_peer_stream.max(stream);
                        if !fin {
                            st.data.insert(stream, tx);
                        }
                    }
                    let reply = Frame::SynReply {
                        stream,
                        fin: false,
                        headers: Vec::new(),
                    };
                    if out.send(Out::Frame(reply)).await.is_err() {
                        break 'conn;
                    }
                    let s = Stream {
                        id: stream,
                        headers,
                        rx,
                        writer: StreamWriter {
                            id: stream,
                            out: out.clone(),
                        },
                    };
                    if incoming.send(s).await.is_err() {
                        // Nobody accepts streams any more.
                        going_away = true;
                    }
                }
                Frame::SynReply { stream, fin, .. } => {
                    let mut st = lock(&state);
                    if let Some(r) = st.replies.remove(&stream) {
                        let _ = r.send(true);
                    }
                    if fin {
                        st.data.remove(&stream);
                    }
                }
                Frame::Headers { stream, fin, .. } => {
                    if fin {
                        lock(&state).data.remove(&stream);
                    }
                }
                Frame::RstStream { stream, .. } => {
                    let mut st = lock(&state);
                    st.data.remove(&stream);
                    if let Some(r) = st.replies.remove(&stream) {
                        let _ = r.send(false);
                    }
                }
                Frame::Ping(id) => {
                    if out.send(Out::Frame(Frame::Ping(id))).await.is_err() {
                        break 'conn;
                    }
                }
                Frame::GoAway { .. } => going_away = true,
                Frame::Ignored(_) => {}
            }
        }
        let read = tokio::select! {
            r = rd.read(&mut chunk) => r,
            _ = &mut stop => break,
        };
        match read {
            Ok(0) => break,
            Err(e) => {
                tracing::debug!(error = %e, "spdy: read");
                break;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    // The peer is gone: every stream reads its end, every open fails.
    let mut st = lock(&state);
    st.closed = true;
    st.data.clear();
    st.replies.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(t: &str) -> Headers {
        vec![("streamtype".to_string(), t.to_string())]
    }

    #[tokio::test]
    async fn streams_carry_data_both_ways_and_end_with_fin_reset_or_goaway() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let client = Session::new(a, Role::Client);
        let mut server = Session::new(b, Role::Server);

        let mut s1 = client.open(typed("stdout")).await.expect("open 1");
        let s3 = client.open(typed("stdin")).await.expect("open 3");
        assert_eq!((s1.id, s3.id), (1, 3), "clients open odd streams");
        let in1 = server.accept().await.expect("accept 1");
        let mut in3 = server.accept().await.expect("accept 3");
        assert_eq!(in1.header("streamType"), Some("stdout"));

        // 100 KiB goes out in 32 KiB frames and arrives whole.
        let big = vec![7u8; 100 << 10];
        in1.writer.write(&big).await.expect("write");
        in1.writer.close().await.expect("fin");
        assert_eq!(s1.read_to_end(1 << 20).await, big);

        s3.writer.write(b"hello").await.expect("write");
        assert_eq!(in3.read().await.as_deref(), Some(&b"hello"[..]));
        // A reset ends the peer's reads.
        s3.writer.reset().await.expect("reset");
        assert_eq!(in3.read().await, None);

        // GOAWAY and the server's hang-up: the client's streams end and
        // its opens fail (at once, not after the reply timeout).
        server.close().await;
        assert_eq!(s1.read().await, None);
        let t = std::time::Instant::now();
        let mut refused = false;
        for _ in 0..100 {
            if client.open(typed("error")).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            refused && t.elapsed() < Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
    }

    #[tokio::test]
    async fn a_client_refuses_streams_the_server_opens() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut client = Session::new(a, Role::Client);
        let server = Session::new(b, Role::Server);
        let e = server.open(typed("x")).await.expect_err("refused");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        drop(server);
        // Nothing was offered to the client's accept.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), client.accept())
                .await
                .map_or(true, |s| s.is_none())
        );
    }
}
