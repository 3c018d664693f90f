//! A SPDY/3.1 session over any byte stream: a reader task that routes the
//! peer's frames to streams (answering SYN_STREAM with SYN_REPLY and PING
//! with PING, as spdystream does), and a writer task that owns the header
//! compression state and the socket's write half.
//!
//! Data for a stream goes through a bounded channel: a reader that does not
//! keep up slows the whole connection down (TCP's back-pressure), it never
//! grows memory. spdystream has no per-stream flow control either.

use std::collections::HashMap;
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

/// Which end of the connection we are: clients open odd streams, servers
/// even ones, and servers answer every SYN_STREAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

enum Out {
    Frame(Frame),
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
    rx: mpsc::Receiver<Vec<u8>>,
    pub writer: StreamWriter,
}

/// The sending half of a stream; cheap to clone.
#[derive(Debug, Clone)]
pub struct StreamWriter {
    id: u32,
    out: mpsc::Sender<Out>,
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
        tokio::spawn(write_loop(wr, out_rx, state.clone()));
        tokio::spawn(read_loop(rd, role, out_tx.clone(), in_tx, state.clone()));
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

async fn write_loop<W: AsyncWrite>(wr: W, mut rx: mpsc::Receiver<Out>, state: Arc<Mutex<State>>) {
    tokio::pin!(wr);
    let mut codec = Codec::new();
    let mut buf = Vec::with_capacity(MAX_DATA_CHUNK + 64);
    while let Some(msg) = rx.recv().await {
        buf.clear();
        let close = match msg {
            Out::Frame(f) => {
                codec.encode(&f, &mut buf);
                false
            }
            Out::Close => {
                let last_stream = lock(&state).last_peer_stream;
                let goaway = Frame::GoAway {
                    last_stream,
                    status: 0,
                };
                codec.encode(&goaway, &mut buf);
                true
            }
        };
        // Batch what is already queued into one write.
        while !close && buf.len() < MAX_DATA_CHUNK {
            match rx.try_recv() {
                Ok(Out::Frame(f)) => codec.encode(&f, &mut buf),
                Ok(Out::Close) => {
                    let last_stream = lock(&state).last_peer_stream;
                    codec.encode(
                        &Frame::GoAway {
                            last_stream,
                            status: 0,
                        },
                        &mut buf,
                    );
                    let _ = wr.write_all(&buf).await;
                    let _ = wr.shutdown().await;
                    return;
                }
                Err(_) => break,
            }
        }
        if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
            break;
        }
        if close {
            let _ = wr.shutdown().await;
            break;
        }
    }
    lock(&state).closed = true;
}

async fn read_loop<R: AsyncRead>(
    rd: R,
    role: Role,
    out: mpsc::Sender<Out>,
    incoming: mpsc::Sender<Stream>,
    state: Arc<Mutex<State>>,
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
        match rd.read(&mut chunk).await {
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
