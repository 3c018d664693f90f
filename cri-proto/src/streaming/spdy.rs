//! SPDY/3.1 frames as the CRI streaming protocols use them (moby/spdystream,
//! the SPDY of kubelet, kubectl, crictl and the API server's proxy):
//! a sans-IO codec, tested on bytes the real crictl v1.29.0 sent.
//!
//! Header blocks are one zlib stream per direction, primed with SPDY/3's
//! dictionary. Incoming blocks are inflated with that history; outgoing
//! blocks are written as *stored* deflate blocks (no compression): every
//! zlib reader takes them, and picolet needs no compressor. The zlib header
//! we send names the dictionary (FDICT), as Go's writer does, so a strict
//! zlib reader that asks for the dictionary gets it.
//!
//! Flow control (WINDOW_UPDATE) is read and ignored, and never sent:
//! spdystream implements none, so a peer that waited for window updates
//! would not be speaking this protocol.

use std::fmt;

use flate2::{Decompress, FlushDecompress, Status};

/// SPDY/3's header dictionary (draft-mbelshe-httpbis-spdy-00, 2.6.10.1).
const DICTIONARY: &[u8] = include_bytes!("spdy3.dict");
/// Adler-32 of [`DICTIONARY`], the dictionary id of its zlib header.
const DICTIONARY_ID: u32 = 0xe3c6_a7c2;
/// The largest frame we accept: a data frame carries at most 16 MiB by the
/// format; header blocks are far smaller in practice.
pub const MAX_FRAME: usize = 1 << 20;
/// The largest header block once inflated (a bound on zlib amplification).
pub const MAX_HEADER_BLOCK: usize = 256 << 10;
/// Data frames we write carry at most this much.
pub const MAX_DATA_CHUNK: usize = 32 << 10;

const VERSION: u16 = 3;
const FLAG_FIN: u8 = 0x01;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;

/// RST_STREAM status codes used here.
pub const RST_REFUSED_STREAM: u32 = 3;
pub const RST_CANCEL: u32 = 5;

/// Header names (lower case, as SPDY requires) and their values; a name
/// with several values is one entry with the values NUL-separated.
pub type Headers = Vec<(String, String)>;

/// The value of header `name`, if any.
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// One SPDY frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream: u32,
        fin: bool,
        data: Vec<u8>,
    },
    SynStream {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    SynReply {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    Ping(u32),
    GoAway {
        last_stream: u32,
        status: u32,
    },
    Headers {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    /// SETTINGS, WINDOW_UPDATE and unknown control frames: nothing to do.
    Ignored(u16),
}

/// What is wrong with the bytes a peer sent.
#[derive(Debug, PartialEq, Eq)]
pub struct FrameError(pub String);

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spdy: {}", self.0)
    }
}

impl std::error::Error for FrameError {}

fn err<T>(msg: impl Into<String>) -> Result<T, FrameError> {
    Err(FrameError(msg.into()))
}

/// One direction's header-block state plus framing: `decode` what the peer
/// sent, `encode` what we send. Each side of a connection has one.
pub struct Codec {
    inflate: Decompress,
    /// The peer's zlib header (2 bytes, 6 with a dictionary id) not yet seen.
    zlib_header: Option<Vec<u8>>,
    /// Our zlib header is written before our first header block.
    sent_zlib_header: bool,
}

impl fmt::Debug for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codec").finish_non_exhaustive()
    }
}

impl Default for Codec {
    fn default() -> Self {
        Self::new()
    }
}

impl Codec {
    pub fn new() -> Self {
        // Raw inflate, primed with the dictionary: a stored block that
        // holds it puts it in the window, so the peer's back-references
        // into the dictionary resolve. (flate2's pure-Rust backend has no
        // set_dictionary.)
        let mut inflate = Decompress::new(false);
        let primer = stored_block(DICTIONARY);
        let mut sink = Vec::with_capacity(DICTIONARY.len() + 16);
        let _ = inflate.decompress_vec(&primer, &mut sink, FlushDecompress::Sync);
        debug_assert_eq!(sink, DICTIONARY);
        Self {
            inflate,
            zlib_header: Some(Vec::new()),
            sent_zlib_header: false,
        }
    }

    /// Takes one frame off the front of `buf` when a whole one is there.
    pub fn decode(&mut self, buf: &mut Vec<u8>) -> Result<Option<Frame>, FrameError> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let len = usize::from(buf[5]) << 16 | usize::from(buf[6]) << 8 | usize::from(buf[7]);
        if len > MAX_FRAME {
            return err(format!("a frame of {len} bytes (at most {MAX_FRAME})"));
        }
        if buf.len() < 8 + len {
            return Ok(None);
        }
        let head: [u8; 8] = buf[..8].try_into().expect("8 bytes checked above");
        let payload: Vec<u8> = buf.drain(..8 + len).skip(8).collect();
        let flags = head[4];
        let fin = flags & FLAG_FIN != 0;
        if head[0] & 0x80 == 0 {
            let stream = u32_at(&head, 0) & 0x7fff_ffff;
            if stream == 0 {
                return err("a data frame on stream 0");
            }
            return Ok(Some(Frame::Data {
                stream,
                fin,
                data: payload,
            }));
        }
        let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
        if version != VERSION {
            return err(format!("version {version} (only 3 is spoken)"));
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let need = |n: usize| {
            if payload.len() < n {
                err(format!(
                    "control frame {kind}: {} bytes, {n} needed",
                    payload.len()
                ))
            } else {
                Ok(())
            }
        };
        Ok(Some(match kind {
            SYN_STREAM => {
                need(10)?;
                Frame::SynStream {
                    stream: stream_id(&payload)?,
                    fin,
                    headers: self.headers(&payload[10..])?,
                }
            }
            SYN_REPLY => {
                need(4)?;
                Frame::SynReply {
                    stream: stream_id(&payload)?,
                    fin,
                    headers: self.headers(&payload[4..])?,
                }
            }
            HEADERS => {
                need(4)?;
                Frame::Headers {
                    stream: stream_id(&payload)?,
                    fin,
                    headers: self.headers(&payload[4..])?,
                }
            }
            RST_STREAM => {
                need(8)?;
                Frame::RstStream {
                    stream: stream_id(&payload)?,
                    status: u32_at(&payload, 4),
                }
            }
            PING => {
                need(4)?;
                Frame::Ping(u32_at(&payload, 0))
            }
            GOAWAY => {
                need(8)?;
                Frame::GoAway {
                    last_stream: u32_at(&payload, 0) & 0x7fff_ffff,
                    status: u32_at(&payload, 4),
                }
            }
            other => Frame::Ignored(other),
        }))
    }

    /// Appends `frame` to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut Vec<u8>) {
        match frame {
            Frame::Data { stream, fin, data } => {
                out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
                out.push(if *fin { FLAG_FIN } else { 0 });
                push_u24(out, data.len());
                out.extend_from_slice(data);
            }
            Frame::SynStream {
                stream,
                fin,
                headers,
            } => {
                let mut body = stream.to_be_bytes().to_vec();
                body.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // associated stream, priority, slot
                self.push_headers(headers, &mut body);
                control(out, SYN_STREAM, *fin, &body);
            }
            Frame::SynReply {
                stream,
                fin,
                headers,
            } => {
                let mut body = stream.to_be_bytes().to_vec();
                self.push_headers(headers, &mut body);
                control(out, SYN_REPLY, *fin, &body);
            }
            Frame::Headers {
                stream,
                fin,
                headers,
            } => {
                let mut body = stream.to_be_bytes().to_vec();
                self.push_headers(headers, &mut body);
                control(out, HEADERS, *fin, &body);
            }
            Frame::RstStream { stream, status } => {
                let mut body = stream.to_be_bytes().to_vec();
                body.extend_from_slice(&status.to_be_bytes());
                control(out, RST_STREAM, false, &body);
            }
            Frame::Ping(id) => control(out, PING, false, &id.to_be_bytes()),
            Frame::GoAway {
                last_stream,
                status,
            } => {
                let mut body = last_stream.to_be_bytes().to_vec();
                body.extend_from_slice(&status.to_be_bytes());
                control(out, GOAWAY, false, &body);
            }
            // Read, never sent.
            Frame::Ignored(_) => {}
        }
    }

    /// Inflates one header block and parses its name/value pairs.
    fn headers(&mut self, mut block: &[u8]) -> Result<Headers, FrameError> {
        if let Some(seen) = self.zlib_header.as_mut() {
            // The zlib header may in principle straddle blocks; take bytes
            // until it is whole (2 bytes, 6 when it names a dictionary).
            while !block.is_empty() {
                let want = if seen.len() >= 2 && seen[1] & 0x20 != 0 {
                    6
                } else {
                    2
                };
                if seen.len() == want {
                    break;
                }
                seen.push(block[0]);
                block = &block[1..];
            }
            let done = seen.len() == 6 || (seen.len() == 2 && seen[1] & 0x20 == 0);
            if seen.len() >= 2 {
                let h = u16::from_be_bytes([seen[0], seen[1]]);
                if seen[0] & 0x0f != 8 || h % 31 != 0 {
                    return err(format!("bad zlib header {:02x}{:02x}", seen[0], seen[1]));
                }
            }
            if seen.len() == 6 && u32_at(seen, 2) != DICTIONARY_ID {
                return err("the header block names a dictionary other than SPDY/3's");
            }
            if done {
                self.zlib_header = None;
            }
        }
        // Inflate until a call neither takes input nor gives output: the
        // inflater may hold output back while it has room in its window.
        let mut out: Vec<u8> = Vec::with_capacity(block.len() * 4 + 64);
        let mut pos = 0;
        loop {
            if out.len() > MAX_HEADER_BLOCK {
                return err(format!(
                    "a header block inflates past {MAX_HEADER_BLOCK} bytes"
                ));
            }
            if out.capacity() - out.len() < 4096 {
                out.reserve(out.len().max(4096));
            }
            let (in_before, out_before) = (self.inflate.total_in(), out.len());
            let status = self
                .inflate
                .decompress_vec(&block[pos..], &mut out, FlushDecompress::Sync)
                .map_err(|e| FrameError(format!("header block: {e}")))?;
            if status == Status::StreamEnd {
                return err("the header stream ended");
            }
            let used = usize::try_from(self.inflate.total_in() - in_before)
                .expect("bounded by the block's length");
            pos += used;
            if used == 0 && out.len() == out_before {
                if pos < block.len() {
                    return err("header block: inflate made no progress");
                }
                break;
            }
        }
        parse_pairs(&out)
    }

    fn push_headers(&mut self, headers: &Headers, out: &mut Vec<u8>) {
        let mut block = Vec::new();
        block.extend_from_slice(&len_u32(headers.len()));
        for (n, v) in headers {
            block.extend_from_slice(&len_u32(n.len()));
            block.extend(n.bytes().map(|b| b.to_ascii_lowercase()));
            block.extend_from_slice(&len_u32(v.len()));
            block.extend_from_slice(v.as_bytes());
        }
        if !self.sent_zlib_header {
            // CMF 0x78 (deflate, 32 KiB window); FLG 0xf9: level 3, FDICT,
            // check bits: what Go's zlib writer sends with a dictionary.
            out.extend_from_slice(&[0x78, 0xf9]);
            out.extend_from_slice(&DICTIONARY_ID.to_be_bytes());
            self.sent_zlib_header = true;
        }
        out.extend_from_slice(&stored_block(&block));
    }
}

/// `data` as deflate stored blocks (not final), then an empty stored block:
/// the sync-flush marker. Go's inflater hands out a stored block's bytes
/// only when it reaches the next block header, so without the marker it
/// would read past the frame and fail the *next* header block
/// ("compressed payload size was incorrect", seen with crictl 1.29).
fn stored_block(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 10);
    for c in data.chunks(0xffff) {
        let len = u16::try_from(c.len()).expect("chunks of at most 0xffff");
        out.push(0); // BFINAL 0, BTYPE 00, padding to the byte
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(c);
    }
    out.extend_from_slice(&[0, 0, 0, 0xff, 0xff]);
    out
}

fn parse_pairs(block: &[u8]) -> Result<Headers, FrameError> {
    if block.len() < 4 {
        return err("header block: count cut short");
    }
    let count = u32_at(block, 0);
    let mut rest = &block[4..];
    let mut field = |what: &str| -> Result<String, FrameError> {
        if rest.len() < 4 {
            return err(format!("header block: {what} cut short"));
        }
        let n = usize::try_from(u32_at(rest, 0)).expect("u32 fits usize");
        if rest.len() < 4 + n {
            return err(format!("header block: {what} of {n} bytes cut short"));
        }
        let (v, r) = rest[4..].split_at(n);
        rest = r;
        String::from_utf8(v.to_vec()).map_err(|_| FrameError(format!("header {what}: not UTF-8")))
    };
    // Each pair takes at least 8 bytes: a count past that is a lie.
    if usize::try_from(count).expect("u32 fits usize") > block.len() / 8 {
        return err(format!(
            "header block: {count} pairs in {} bytes",
            block.len()
        ));
    }
    let mut headers = Vec::new();
    for _ in 0..count {
        let name = field("name")?;
        let value = field("value")?;
        headers.push((name, value));
    }
    Ok(headers)
}

fn control(out: &mut Vec<u8>, kind: u16, fin: bool, body: &[u8]) {
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(if fin { FLAG_FIN } else { 0 });
    push_u24(out, body.len());
    out.extend_from_slice(body);
}

fn push_u24(out: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).expect("frames are bounded well below 16 MiB");
    out.extend_from_slice(&n.to_be_bytes()[1..]);
}

fn len_u32(n: usize) -> [u8; 4] {
    u32::try_from(n)
        .expect("header lengths are small")
        .to_be_bytes()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("length checked by caller"))
}

fn stream_id(payload: &[u8]) -> Result<u32, FrameError> {
    let id = u32_at(payload, 0) & 0x7fff_ffff;
    if id == 0 {
        return err("stream id 0");
    }
    Ok(id)
}

#[cfg(test)]
mod tests;
