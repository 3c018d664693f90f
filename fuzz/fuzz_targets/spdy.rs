//! SPDY/3.1 frames as a streaming client sends them (crictl, kubectl, the
//! API server's proxy): framing, control frames, and header blocks inflated
//! from one zlib stream primed with SPDY/3's dictionary.
//!
//! Input: two bytes for the cut (big endian, modulo the stream's length),
//! then the peer's byte stream. Checked: any
//! error is typed, never a panic; reading the stream in two pieces gives
//! the same frames; and every frame read is written again by our encoder
//! (on its own connection) and read back equal — header names in lower
//! case, as the encoder writes them.
#![no_main]

use cri_proto::streaming::spdy::{Codec, Frame, FrameError, Headers};

/// Reads `parts` in order: the frames, then the error if one ended it.
fn read(parts: &[&[u8]]) -> (Vec<Frame>, Option<FrameError>) {
    let mut codec = Codec::new();
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    for p in parts {
        buf.extend_from_slice(p);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => return (frames, Some(e)),
            }
        }
    }
    (frames, None)
}

fn lower(headers: &Headers) -> Headers {
    headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .collect()
}

/// What the encoder's peer should read back for `frame`.
fn expected(frame: &Frame) -> Option<Frame> {
    Some(match frame.clone() {
        Frame::SynStream {
            stream,
            fin,
            headers,
        } => Frame::SynStream {
            stream,
            fin,
            headers: lower(&headers),
        },
        Frame::SynReply {
            stream,
            fin,
            headers,
        } => Frame::SynReply {
            stream,
            fin,
            headers: lower(&headers),
        },
        Frame::Headers {
            stream,
            fin,
            headers,
        } => Frame::Headers {
            stream,
            fin,
            headers: lower(&headers),
        },
        // Read, never written.
        Frame::Ignored(_) => return None,
        other => other,
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [c0, c1, stream @ ..] = data else {
        return;
    };
    let cut = usize::from(u16::from_be_bytes([*c0, *c1])) % (stream.len() + 1);
    let (frames, error) = read(&[stream]);
    let (split, split_error) = read(&[&stream[..cut], &stream[cut..]]);
    assert_eq!(frames, split, "cut at {cut}: other frames");
    assert_eq!(error, split_error, "cut at {cut}: another outcome");

    let (mut enc, mut dec) = (Codec::new(), Codec::new());
    let mut wire = Vec::new();
    for frame in &frames {
        let Some(want) = expected(frame) else {
            continue;
        };
        enc.encode(frame, &mut wire);
        let got = dec.decode(&mut wire);
        assert_eq!(got, Ok(Some(want)), "{frame:?} does not round-trip");
        assert!(wire.is_empty(), "{frame:?}: bytes left over");
    }
});
