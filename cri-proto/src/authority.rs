//! Serve every gRPC client, whatever `:authority` it sends.
//!
//! grpc-go 1.58 (crictl/critest 1.29, kubelet ≤ 1.29) dials a unix socket
//! with the percent-encoded socket path as the HTTP/2 `:authority`
//! (`%2Frun%2Fpicolet%2Fpicolet.sock`). That is no valid URI authority, and
//! the h2 crate under tonic answers every such request with RST_STREAM
//! PROTOCOL_ERROR, so no Go CRI client could make a single call.
//! containerd and CRI-O accept any authority; the authority means nothing on
//! a unix socket anyway.
//!
//! [`AuthorityFix`] sits between the accepted socket and the HTTP/2 server and
//! rewrites the client's byte stream: frames pass through untouched except
//! header blocks (HEADERS + CONTINUATION), which are HPACK-decoded with the
//! client's dynamic table (HTTP/2's initial 4096 bytes, which h2's server
//! keeps; a client's attempt to grow it is refused) and written again as
//! plain literals that never touch the server's table, with an invalid
//! `:authority` replaced by `localhost` (what grpc-go ≥ 1.59 sends for unix
//! targets). Every block is rewritten, so the server's table stays empty
//! whatever the client's holds. What the server writes back is not touched.
//! HPACK decoding is our own ([`hpack`]), bounds-checked throughout.
//!
//! The rewriting itself is [`Rewriter`], sans-IO: bytes in, bytes out.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod hpack;

/// The HTTP/2 client connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// HTTP/2's initial (and minimum) SETTINGS_MAX_FRAME_SIZE: a re-encoded block
/// is cut into frames no larger, so it fits whatever the server advertised.
const MAX_FRAME: usize = 16_384;
/// A header block (all its frames) larger than this closes the connection.
/// CRI requests carry a few hundred bytes of headers; grpc-go's own default
/// limit on received header lists is 16 KiB.
pub const MAX_HEADER_BLOCK: usize = 1 << 20;
/// The decoded header list (each field's name and value plus 32, as
/// SETTINGS_MAX_HEADER_LIST_SIZE counts) may not exceed this: one-byte
/// references to a 4 KiB table entry would otherwise turn a 1 MiB block into
/// gigabytes of literals.
pub const MAX_HEADER_LIST: usize = 1 << 20;
/// HTTP/2's initial SETTINGS_HEADER_TABLE_SIZE, which h2's server keeps.
const HPACK_TABLE: usize = 4096;
/// What an invalid `:authority` becomes.
const REPLACEMENT: &[u8] = b"localhost";

/// Why a client's byte stream could not be rewritten; the connection closes.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    #[error("header block of stream {stream} exceeds {MAX_HEADER_BLOCK} bytes")]
    BlockTooLarge { stream: u32 },
    #[error(
        "frame of type {frame_type} on stream {stream} inside the header block of stream {open}"
    )]
    InterruptedBlock {
        frame_type: u8,
        stream: u32,
        open: u32,
    },
    #[error("CONTINUATION on stream {stream} without an open header block")]
    StrayContinuation { stream: u32 },
    #[error("HEADERS on stream {stream}: padding or priority longer than the frame")]
    BadHeadersFrame { stream: u32 },
    #[error("header list of stream {stream} decodes to more than {MAX_HEADER_LIST} bytes")]
    ListTooLarge { stream: u32 },
    #[error("HPACK block of stream {stream}: {reason}")]
    Hpack { stream: u32, reason: String },
}

impl From<RewriteError> for io::Error {
    fn from(e: RewriteError) -> Self {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// A header block being collected from a HEADERS frame and its CONTINUATIONs.
struct OpenBlock {
    stream: u32,
    end_stream: bool,
    /// The HEADERS frame's 5 priority bytes, kept as sent.
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

/// Rewrites a client's HTTP/2 byte stream (see the module docs). Feed it what
/// the client sent, in pieces of any size; take what the server should read.
pub struct Rewriter {
    /// Bytes of the preface still to check; `None` once past it, or when the
    /// stream is no HTTP/2 at all (then everything passes untouched and the
    /// server rejects it as it would have).
    preface_left: Option<usize>,
    passthrough_all: bool,
    /// Payload bytes of the current non-header frame still to pass through.
    passthrough: usize,
    /// Received bytes not yet processed: at most a frame header or one
    /// header frame.
    pending: Vec<u8>,
    out: Vec<u8>,
    block: Option<OpenBlock>,
    decoder: hpack::Decoder,
    rewritten: u64,
}

impl Default for Rewriter {
    fn default() -> Self {
        Self {
            preface_left: Some(PREFACE.len()),
            passthrough_all: false,
            passthrough: 0,
            pending: Vec::new(),
            out: Vec::new(),
            block: None,
            decoder: hpack::Decoder::new(HPACK_TABLE),
            rewritten: 0,
        }
    }
}

impl Rewriter {
    /// Takes bytes the client sent; what is ready for the server goes to the
    /// output ([`Rewriter::output`]).
    pub fn feed(&mut self, mut input: &[u8]) -> Result<(), RewriteError> {
        if self.passthrough_all {
            self.out.extend_from_slice(input);
            return Ok(());
        }
        if let Some(left) = self.preface_left {
            let seen = PREFACE.len() - left;
            let n = left.min(input.len());
            self.out.extend_from_slice(&input[..n]);
            if input[..n] != PREFACE[seen..seen + n] {
                // Not HTTP/2 with prior knowledge: not ours to judge.
                self.passthrough_all = true;
                self.out.extend_from_slice(&input[n..]);
                return Ok(());
            }
            input = &input[n..];
            self.preface_left = (left > n).then_some(left - n);
            if self.preface_left.is_some() {
                return Ok(());
            }
        }
        // Payload of a frame being passed through goes straight out.
        if self.passthrough > 0 {
            let n = self.passthrough.min(input.len());
            self.out.extend_from_slice(&input[..n]);
            self.passthrough -= n;
            input = &input[n..];
        }
        self.pending.extend_from_slice(input);
        self.process()
    }

    /// Bytes ready for the server; the caller drains what it consumed.
    pub fn output(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// Requests whose `:authority` was replaced so far.
    pub fn rewritten(&self) -> u64 {
        self.rewritten
    }

    fn process(&mut self) -> Result<(), RewriteError> {
        let mut at = 0;
        let result = loop {
            let rest = &self.pending[at..];
            if self.passthrough > 0 {
                let n = self.passthrough.min(rest.len());
                self.out.extend_from_slice(&rest[..n]);
                self.passthrough -= n;
                at += n;
                if self.passthrough > 0 {
                    break Ok(());
                }
                continue;
            }
            if rest.len() < FRAME_HEADER_LEN {
                break Ok(());
            }
            let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
            let (frame_type, flags) = (rest[3], rest[4]);
            let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff;
            if let Some(open) = &self.block
                && frame_type != TYPE_CONTINUATION
            {
                break Err(RewriteError::InterruptedBlock {
                    frame_type,
                    stream,
                    open: open.stream,
                });
            }
            if frame_type != TYPE_HEADERS && frame_type != TYPE_CONTINUATION {
                self.out.extend_from_slice(&rest[..FRAME_HEADER_LEN]);
                self.passthrough = len;
                at += FRAME_HEADER_LEN;
                continue;
            }
            let open_len = self.block.as_ref().map_or(0, |b| b.fragment.len());
            if open_len + len > MAX_HEADER_BLOCK {
                break Err(RewriteError::BlockTooLarge { stream });
            }
            if rest.len() < FRAME_HEADER_LEN + len {
                break Ok(()); // wait for the whole frame
            }
            let payload = &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len];
            let step = if frame_type == TYPE_HEADERS {
                Self::open_block(stream, flags, payload).map(|b| self.block = Some(b))
            } else {
                match self.block.as_mut() {
                    Some(b) if b.stream == stream => {
                        b.fragment.extend_from_slice(payload);
                        Ok(())
                    }
                    _ => Err(RewriteError::StrayContinuation { stream }),
                }
            };
            if let Err(e) = step {
                break Err(e);
            }
            at += FRAME_HEADER_LEN + len;
            if flags & FLAG_END_HEADERS != 0
                && let Some(block) = self.block.take()
                && let Err(e) = self.emit(block)
            {
                break Err(e);
            }
        };
        self.pending.drain(..at);
        result
    }

    /// The block fragment of a HEADERS frame, without padding.
    fn open_block(stream: u32, flags: u8, payload: &[u8]) -> Result<OpenBlock, RewriteError> {
        let bad = || RewriteError::BadHeadersFrame { stream };
        let mut body = payload;
        let mut pad = 0;
        if flags & FLAG_PADDED != 0 {
            let (&p, rest) = body.split_first().ok_or_else(bad)?;
            pad = usize::from(p);
            body = rest;
        }
        let mut priority = None;
        if flags & FLAG_PRIORITY != 0 {
            let p: [u8; 5] = body
                .get(..5)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?;
            priority = Some(p);
            body = &body[5..];
        }
        let fragment = body
            .get(..body.len().checked_sub(pad).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        Ok(OpenBlock {
            stream,
            end_stream: flags & FLAG_END_STREAM != 0,
            priority,
            fragment: fragment.to_vec(),
        })
    }

    /// Decodes a whole block, fixes its authority, and writes it out again as
    /// HEADERS (+ CONTINUATION) frames of at most [`MAX_FRAME`] bytes.
    fn emit(&mut self, block: OpenBlock) -> Result<(), RewriteError> {
        // A capacity hint: plain literals of a typical gRPC request.
        let mut encoded = Vec::with_capacity(5 + 2 * block.fragment.len() + 64);
        if let Some(p) = &block.priority {
            encoded.extend_from_slice(p);
        }
        let mut rewritten = 0;
        let mut list_size = 0usize;
        self.decoder
            .decode(&block.fragment, |name, value| {
                list_size = list_size.saturating_add(name.len() + value.len() + 32);
                if list_size > MAX_HEADER_LIST {
                    return; // refused below; nothing more is written
                }
                let value = if name == b":authority" && !valid_authority(value) {
                    rewritten += 1;
                    REPLACEMENT
                } else {
                    value
                };
                encode_literal(name, value, &mut encoded);
            })
            .map_err(|e| RewriteError::Hpack {
                stream: block.stream,
                reason: e.to_string(),
            })?;
        if list_size > MAX_HEADER_LIST {
            return Err(RewriteError::ListTooLarge {
                stream: block.stream,
            });
        }
        self.rewritten += rewritten;

        let mut flags = 0;
        if block.end_stream {
            flags |= FLAG_END_STREAM;
        }
        if block.priority.is_some() {
            flags |= FLAG_PRIORITY;
        }
        let mut frame_type = TYPE_HEADERS;
        let mut chunks = encoded.chunks(MAX_FRAME).peekable();
        while let Some(chunk) = chunks.next() {
            if chunks.peek().is_none() {
                flags |= FLAG_END_HEADERS;
            }
            let len = u32::try_from(chunk.len()).expect("a chunk is at most MAX_FRAME");
            self.out.extend_from_slice(&len.to_be_bytes()[1..]);
            self.out.push(frame_type);
            self.out.push(flags);
            self.out.extend_from_slice(&block.stream.to_be_bytes());
            self.out.extend_from_slice(chunk);
            frame_type = TYPE_CONTINUATION;
            flags = 0;
        }
        Ok(())
    }
}

/// HPACK "literal header field without indexing, new name" (RFC 7541
/// §6.2.2), strings without Huffman coding: the receiver's table is left
/// alone, and encoding costs a copy.
fn encode_literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x00);
    for s in [name, value] {
        encode_length(s.len(), out);
        out.extend_from_slice(s);
    }
}

/// A string length: an integer with a 7-bit prefix, H bit clear (§5.1).
fn encode_length(mut n: usize, out: &mut Vec<u8>) {
    const PREFIX_MAX: usize = 0x7f;
    let low7 = |n: usize| u8::try_from(n & 0x7f).unwrap_or(0x7f);
    if n < PREFIX_MAX {
        out.push(low7(n)); // < 0x7f: fits the prefix
        return;
    }
    out.push(low7(PREFIX_MAX));
    n -= PREFIX_MAX;
    while n >= 0x80 {
        out.push(low7(n) | 0x80);
        n >>= 7;
    }
    out.push(low7(n)); // < 0x80 after the loop
}

/// What h2 accepts: a URI authority (`host[:port]`, no path, no `%`).
fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// A client connection whose reads pass through a [`Rewriter`]; writes go to
/// the socket unchanged.
pub struct AuthorityFix<S> {
    inner: S,
    rewriter: Rewriter,
    /// Consumed prefix of the rewriter's output.
    drained: usize,
    eof: bool,
}

impl<S> AuthorityFix<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            rewriter: Rewriter::default(),
            drained: 0,
            eof: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let out = this.rewriter.output();
            if this.drained < out.len() {
                let n = (out.len() - this.drained).min(buf.remaining());
                buf.put_slice(&out[this.drained..this.drained + n]);
                this.drained += n;
                if this.drained == out.len() {
                    out.clear();
                    this.drained = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => this.eof = true,
                Poll::Ready(Ok(())) => {
                    let before = this.rewriter.rewritten();
                    if let Err(e) = this.rewriter.feed(read.filled()) {
                        tracing::debug!(error = %e, "closing a client connection");
                        return Poll::Ready(Err(e.into()));
                    }
                    if this.rewriter.rewritten() > before && before == 0 {
                        tracing::debug!(
                            "client sent an invalid :authority; serving it as localhost"
                        );
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityFix<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "hand-encoded HTTP/2 frames: lengths and random bytes truncated on purpose"
)]
mod tests;
