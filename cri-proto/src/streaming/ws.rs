//! WebSocket (RFC 6455) as the CRI streaming protocols use it, for exec
//! and attach (`v5.channel.k8s.io`, `v4.channel.k8s.io`): every message is
//! binary, its first byte the channel (0 stdin, 1 stdout, 2 stderr, 3
//! error, 4 resize); v5 adds `[255, channel]`, the client's half-close of a
//! channel (how stdin ends).
//! This is client-go's WebSocket executor (the one newer kubectl and API
//! servers use); a [`WsSession`] offers the same [`Stream`]s as a SPDY
//! session, so exec and attach run unchanged on either.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use sha1::{Digest as _, Sha1};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::session::{Conn, Out, Role, Stream, StreamWriter};
use super::spdy::{Frame, Headers, header};
use super::{STREAM_ERROR, STREAM_RESIZE, STREAM_STDERR, STREAM_STDIN, STREAM_STDOUT, STREAM_TYPE};

/// The handshake's GUID (RFC 6455, 1.3).
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// remotecommand over WebSocket, newest first.
pub const REMOTECOMMAND_V5: &str = "v5.channel.k8s.io";
pub const WS_PROTOCOLS: &[&str] = &[REMOTECOMMAND_V5, super::REMOTECOMMAND_V4];
/// The largest message we take (a stdin chunk; client-go sends 32 KiB).
pub const MAX_MESSAGE: usize = 1 << 20;
/// v5's half-close marker channel.
const CLOSE_CHANNEL: u8 = 255;

const OP_CONTINUATION: u8 = 0;
const OP_BINARY: u8 = 2;
const OP_CLOSE: u8 = 8;
const OP_PING: u8 = 9;
const OP_PONG: u8 = 10;

/// After our close frame, how long the peer has to hang up.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
const STREAM_QUEUE: usize = 16;

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`: base64 of
/// the SHA-1 of the key and the GUID (RFC 6455, 4.2.2).
pub fn accept_key(key: &str) -> String {
    let digest = Sha1::new()
        .chain_update(key.trim())
        .chain_update(GUID)
        .finalize();
    base64::engine::general_purpose::STANDARD.encode(digest)
}

/// The channel of a stream type.
fn channel_of(stream_type: &str) -> Option<u8> {
    Some(match stream_type {
        STREAM_STDIN => 0,
        STREAM_STDOUT => 1,
        STREAM_STDERR => 2,
        STREAM_ERROR => 3,
        STREAM_RESIZE => 4,
        _ => return None,
    })
}

/// One frame: (fin, opcode, payload unmasked).
pub type WsFrame = (bool, u8, Vec<u8>);

/// A frame the peer should not have sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WsError {
    #[error("websocket: reserved bits set (no extension was agreed)")]
    Reserved,
    #[error("websocket: a frame of {len} bytes (at most {MAX_MESSAGE})")]
    TooLarge { len: usize },
}

/// Takes one frame off the front of `buf` when a whole one is there.
pub fn decode(buf: &mut Vec<u8>) -> Result<Option<WsFrame>, WsError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (fin, opcode) = (buf[0] & 0x80 != 0, buf[0] & 0x0f);
    if buf[0] & 0x70 != 0 {
        return Err(WsError::Reserved);
    }
    let masked = buf[1] & 0x80 != 0;
    let (len, mut at) = match buf[1] & 0x7f {
        126 if buf.len() >= 4 => (usize::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
        127 if buf.len() >= 10 => {
            let n = u64::from_be_bytes(buf[2..10].try_into().expect("8 bytes"));
            (usize::try_from(n).unwrap_or(usize::MAX), 10)
        }
        126 | 127 => return Ok(None),
        n => (usize::from(n), 2),
    };
    if len > MAX_MESSAGE {
        return Err(WsError::TooLarge { len });
    }
    let mask = if masked {
        if buf.len() < at + 4 {
            return Ok(None);
        }
        let m: [u8; 4] = buf[at..at + 4].try_into().expect("4 bytes");
        at += 4;
        Some(m)
    } else {
        None
    };
    if buf.len() < at + len {
        return Ok(None);
    }
    let mut payload: Vec<u8> = buf.drain(..at + len).skip(at).collect();
    if let Some(m) = mask {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= m[i % 4];
        }
    }
    Ok(Some((fin, opcode, payload)))
}

/// Appends one final frame; `mask` for what a client sends.
pub fn encode(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>, out: &mut Vec<u8>) {
    out.push(0x80 | opcode);
    let bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(bit | u8::try_from(n).expect("below 126")),
        n if n <= 0xffff => {
            out.push(bit | 126);
            out.extend_from_slice(&u16::try_from(n).expect("at most 0xffff").to_be_bytes());
        }
        n => {
            out.push(bit | 127);
            out.extend_from_slice(&u64::try_from(n).expect("usize fits u64").to_be_bytes());
        }
    }
    match mask {
        Some(m) => {
            out.extend_from_slice(&m);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ m[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
}

#[derive(Default)]
struct State {
    data: HashMap<u8, mpsc::Sender<Vec<u8>>>,
    closed: bool,
}

/// One WebSocket connection carrying remotecommand channels.
pub struct WsSession {
    out: mpsc::Sender<Out>,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for WsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsSession").finish_non_exhaustive()
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl WsSession {
    /// Starts the reader and writer on `io` (after the handshake), speaking
    /// `protocol` (v5 has channel half-closes).
    pub fn new<T>(io: T, role: Role, protocol: &str) -> Self
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (rd, wr) = tokio::io::split(io);
        let (out_tx, out_rx) = mpsc::channel(64);
        let state = Arc::new(Mutex::new(State::default()));
        let v5 = protocol == REMOTECOMMAND_V5;
        let (stop_tx, stop_rx) = oneshot::channel();
        tokio::spawn(write_loop(wr, out_rx, role, v5, state.clone(), stop_tx));
        tokio::spawn(read_loop(rd, out_tx.clone(), v5, state.clone(), stop_rx));
        Self { out: out_tx, state }
    }
}

impl Conn for WsSession {
    fn open(&self, headers: Headers) -> impl Future<Output = io::Result<Stream>> + Send {
        let out = self.out.clone();
        let state = self.state.clone();
        async move {
            let t = header(&headers, STREAM_TYPE).unwrap_or("");
            let ch = channel_of(t).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("no channel for {t:?}"))
            })?;
            let (tx, rx) = mpsc::channel(STREAM_QUEUE);
            {
                let mut st = lock(&state);
                if st.closed {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the websocket is closed",
                    ));
                }
                st.data.insert(ch, tx);
            }
            Ok(Stream {
                id: u32::from(ch),
                headers,
                rx,
                writer: StreamWriter {
                    id: u32::from(ch),
                    out,
                },
            })
        }
    }

    fn close(&self) -> impl Future<Output = ()> + Send {
        let out = self.out.clone();
        async move {
            let _ = out.send(Out::Close).await;
        }
    }
}

fn mask_for(role: Role) -> Option<[u8; 4]> {
    // A client masks what it sends (RFC 6455, 5.3); any unpredictable key.
    (role == Role::Client).then(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u8(0);
        let v = h.finish().to_le_bytes();
        [v[0], v[1], v[2], v[3]]
    })
}

async fn write_loop<W: AsyncWrite>(
    wr: W,
    mut rx: mpsc::Receiver<Out>,
    role: Role,
    v5: bool,
    state: Arc<Mutex<State>>,
    stop_reader: oneshot::Sender<()>,
) {
    tokio::pin!(wr);
    let mut buf = Vec::new();
    let mut closing = false;
    while let Some(msg) = rx.recv().await {
        buf.clear();
        // v5's half-close goes from client to server only: client-go 1.29
        // logs a server's as "Unknown stream id 255" (seen with the real
        // WebSocket executor); a server's streams end with the connection.
        let half_close = |ch: u32, buf: &mut Vec<u8>| {
            if v5
                && role == Role::Client
                && let Ok(ch) = u8::try_from(ch)
            {
                encode(OP_BINARY, &[CLOSE_CHANNEL, ch], mask_for(role), buf);
            }
        };
        match msg {
            Out::Frame(Frame::Data { stream, fin, data }) => {
                if !data.is_empty() {
                    let mut m = Vec::with_capacity(data.len() + 1);
                    m.push(u8::try_from(stream).unwrap_or(CLOSE_CHANNEL));
                    m.extend_from_slice(&data);
                    encode(OP_BINARY, &m, mask_for(role), &mut buf);
                }
                if fin {
                    half_close(stream, &mut buf);
                }
            }
            Out::Frame(Frame::RstStream { stream, .. }) => half_close(stream, &mut buf),
            Out::Frame(_) => {}
            Out::Pong(p) => encode(OP_PONG, &p, mask_for(role), &mut buf),
            Out::Close => {
                encode(OP_CLOSE, &1000u16.to_be_bytes(), mask_for(role), &mut buf);
                closing = true;
            }
        }
        if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() || closing {
            break;
        }
    }
    let _ = wr.shutdown().await;
    lock(&state).closed = true;
    if closing {
        tokio::time::sleep(CLOSE_GRACE).await;
    }
    let _ = stop_reader.send(());
}

async fn read_loop<R: AsyncRead>(
    rd: R,
    out: mpsc::Sender<Out>,
    v5: bool,
    state: Arc<Mutex<State>>,
    mut stop: oneshot::Receiver<()>,
) {
    tokio::pin!(rd);
    let mut buf = Vec::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    let mut message: Vec<u8> = Vec::new();
    'conn: loop {
        loop {
            let (fin, opcode, payload) = match decode(&mut buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "websocket: closing the connection");
                    break 'conn;
                }
            };
            match opcode {
                OP_PING => {
                    if out.send(Out::Pong(payload)).await.is_err() {
                        break 'conn;
                    }
                    continue;
                }
                OP_PONG => continue,
                OP_CLOSE => break 'conn,
                // Text (the base64 protocols) is not served.
                OP_BINARY | OP_CONTINUATION => {}
                _ => continue,
            }
            if message.len() + payload.len() > MAX_MESSAGE {
                tracing::debug!("websocket: a message past the limit");
                break 'conn;
            }
            message.extend_from_slice(&payload);
            if !fin {
                continue;
            }
            let m = std::mem::take(&mut message);
            match m.as_slice() {
                [CLOSE_CHANNEL, ch, ..] if v5 => {
                    lock(&state).data.remove(ch);
                }
                [ch, data @ ..] => {
                    let tx = lock(&state).data.get(ch).cloned();
                    if let (Some(tx), false) = (tx, data.is_empty()) {
                        let _ = tx.send(data.to_vec()).await;
                    }
                }
                [] => {}
            }
        }
        let read = tokio::select! {
            r = rd.read(&mut chunk) => r,
            _ = &mut stop => break,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let mut st = lock(&state);
    st.closed = true;
    st.data.clear();
    drop(st);
    // A peer's close frame is answered (harmless if ours went first).
    let _ = out.try_send(Out::Close);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_rfc_6455s() {
        // RFC 6455, 1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn client_go_frames_are_read() {
        // `echo piped-in | <client-go 0.29's WebSocket executor, v5> exec
        // ... cat`, recorded with strace: stdin's data, its half-close, and
        // the close frame (1000) it sent once the session was over.
        let mut buf = include_bytes!("../../testdata/client-go-0.29-ws-exec-i.ws").to_vec();
        let mut msgs = Vec::new();
        while let Some((fin, op, payload)) = decode(&mut buf).expect("valid frames") {
            assert!(fin);
            msgs.push((op, payload));
        }
        assert_eq!(
            msgs,
            vec![
                (OP_BINARY, b"\x00piped-in\n".to_vec()),
                (OP_BINARY, vec![CLOSE_CHANNEL, 0]),
                (OP_CLOSE, 1000u16.to_be_bytes().to_vec()),
            ]
        );
    }

    #[test]
    fn frames_round_trip_masked_or_not_at_every_length_class() {
        for len in [0usize, 5, 125, 126, 300, 65_535, 65_536, 200_000] {
            let payload: Vec<u8> = (0..len)
                .map(|i| u8::try_from(i % 251).expect("small"))
                .collect();
            for mask in [None, Some([1, 2, 3, 4])] {
                let mut wire = Vec::new();
                encode(OP_BINARY, &payload, mask, &mut wire);
                // Cut anywhere: nothing until the frame is whole.
                let mut buf = wire[..wire.len() - 1].to_vec();
                assert_eq!(decode(&mut buf).expect("ok"), None);
                let mut buf = wire.clone();
                let (fin, op, got) = decode(&mut buf).expect("ok").expect("frame");
                assert!(fin && op == OP_BINARY && got == payload && buf.is_empty());
            }
        }
        let mut huge = vec![0x82, 127, 0, 0, 0, 0, 0x10, 0, 0, 0];
        assert_eq!(
            decode(&mut huge).map_err(|e| e.to_string()),
            Err(format!(
                "websocket: a frame of {} bytes (at most {MAX_MESSAGE})",
                256 << 20
            )),
            "a 256 MiB frame is refused"
        );
    }

    #[tokio::test]
    async fn channels_carry_data_and_v5_half_closes() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let client = WsSession::new(a, Role::Client, REMOTECOMMAND_V5);
        let server = WsSession::new(b, Role::Server, REMOTECOMMAND_V5);
        let kind = |t: &str| vec![(STREAM_TYPE.to_string(), t.to_string())];
        let c_in = client.open(kind(STREAM_STDIN)).await.expect("client stdin");
        let mut c_out = client
            .open(kind(STREAM_STDOUT))
            .await
            .expect("client stdout");
        let mut s_in = server.open(kind(STREAM_STDIN)).await.expect("server stdin");
        let s_out = server
            .open(kind(STREAM_STDOUT))
            .await
            .expect("server stdout");
        c_in.writer.write(b"typed").await.expect("write");
        c_in.writer.close().await.expect("half-close");
        assert_eq!(s_in.read_to_end(1 << 10).await, b"typed");
        s_out.writer.write(&[9; 70_000]).await.expect("write");
        // A server never half-closes (client-go would not understand it):
        // its streams end with the connection.
        s_out.writer.close().await.expect("close");
        server.close().await;
        assert_eq!(c_out.read_to_end(1 << 20).await.len(), 70_000);
    }
}
