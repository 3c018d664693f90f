use super::*;

/// What crictl v1.29.0 (grpc-go 1.58.3) sent for `crictl -r
/// unix:///run/picolet/picolet.sock version`, recorded from the real client
/// at a socket that only answered SETTINGS: the preface, SETTINGS, the ack,
/// HEADERS (`:authority: %2Frun%2Fpicolet%2Fpicolet.sock`) and DATA.
const CRICTL_VERSION: &[u8] = include_bytes!("../../testdata/crictl-1.29.0-version.h2");

struct Frame {
    frame_type: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// Splits what follows the preface into frames.
fn frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        out.push(Frame {
            frame_type: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]),
            payload: bytes[9..9 + len].to_vec(),
        });
        bytes = &bytes[9 + len..];
    }
    out
}

fn frame(frame_type: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[frame_type, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn rewrite(input: &[u8]) -> Result<Vec<u8>, RewriteError> {
    let mut r = Rewriter::default();
    r.feed(input)?;
    Ok(std::mem::take(r.output()))
}

fn fields(decoder: &mut loona_hpack::Decoder<'_>, block: &[u8]) -> Vec<(String, String)> {
    decoder
        .decode(block)
        .expect("the server can decode what it is sent")
        .into_iter()
        .map(|(n, v)| {
            (
                String::from_utf8(n).expect("utf-8"),
                String::from_utf8(v).expect("utf-8"),
            )
        })
        .collect()
}

fn request(authority: &str, path: &str) -> Vec<(&'static str, String)> {
    vec![
        (":method", "POST".into()),
        (":scheme", "http".into()),
        (":path", path.into()),
        (":authority", authority.into()),
        ("content-type", "application/grpc".into()),
        ("te", "trailers".into()),
    ]
}

fn encode(encoder: &mut loona_hpack::Encoder<'_>, fields: &[(&str, String)]) -> Vec<u8> {
    encoder.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
}

fn with_preface(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut v = PREFACE.to_vec();
    for f in frames {
        v.extend_from_slice(f);
    }
    v
}

/// The frames the server reads for one complete HEADERS frame on stream 1.
fn rewritten_frames(block: &[u8]) -> Vec<Frame> {
    let out = rewrite(&with_preface(&[frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        block,
    )]))
    .expect("rewrite");
    frames(&out[PREFACE.len()..])
}

/// The error a connection that sends these frames (after the preface) gets.
fn refused(frames: &[Vec<u8>]) -> RewriteError {
    rewrite(&with_preface(frames)).expect_err("the rewriter refuses this input")
}

#[test]
fn crictls_request_is_served_as_localhost_and_nothing_else_changes() {
    let out = rewrite(CRICTL_VERSION).expect("rewrite");
    assert_eq!(&out[..PREFACE.len()], PREFACE);
    let sent = frames(&CRICTL_VERSION[PREFACE.len()..]);
    let got = frames(&out[PREFACE.len()..]);
    assert_eq!(
        sent.iter().map(|f| f.frame_type).collect::<Vec<_>>(),
        [4, 4, TYPE_HEADERS, 0],
        "the recording: SETTINGS, ack, HEADERS, DATA"
    );
    assert_eq!(got.len(), sent.len());
    let mut client_table = loona_hpack::Decoder::new();
    let mut server_table = loona_hpack::Decoder::new();
    for (s, g) in sent.iter().zip(&got) {
        assert_eq!(
            (s.frame_type, s.flags, s.stream),
            (g.frame_type, g.flags, g.stream)
        );
        if s.frame_type != TYPE_HEADERS {
            assert_eq!(s.payload, g.payload, "non-header frames pass untouched");
            continue;
        }
        let before = fields(&mut client_table, &s.payload);
        let after = fields(&mut server_table, &g.payload);
        let authority = |f: &[(String, String)]| {
            f.iter()
                .find(|(n, _)| n == ":authority")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            authority(&before).as_deref(),
            Some("%2Frun%2Fpicolet%2Fpicolet.sock")
        );
        assert_eq!(authority(&after).as_deref(), Some("localhost"));
        let others = |f: &[(String, String)]| -> Vec<(String, String)> {
            f.iter()
                .filter(|(n, _)| n != ":authority")
                .cloned()
                .collect()
        };
        assert_eq!(others(&before), others(&after));
        assert!(after.contains(&("user-agent".into(), "grpc-go/1.58.3".into())));
    }
}

#[test]
fn any_split_of_the_input_gives_the_same_output() {
    let whole = rewrite(CRICTL_VERSION).expect("rewrite");
    for step in [1, 2, 7, 9, 10, 33, 100] {
        let mut r = Rewriter::default();
        for piece in CRICTL_VERSION.chunks(step) {
            r.feed(piece).expect("feed");
        }
        assert_eq!(*r.output(), whole, "pieces of {step} bytes");
    }
}

#[test]
fn later_requests_that_index_the_clients_table_still_decode() {
    // grpc-go's encoder indexes :authority and friends; the second request
    // refers to them by index only.
    let mut client = loona_hpack::Encoder::new();
    let first = encode(
        &mut client,
        &request("%2Fa.sock", "/runtime.v1.RuntimeService/Version"),
    );
    let second = encode(
        &mut client,
        &request("%2Fa.sock", "/runtime.v1.RuntimeService/Status"),
    );
    assert!(
        second.len() < first.len(),
        "the second block uses the table"
    );
    let out = rewrite(&with_preface(&[
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &first),
        frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &second),
    ]))
    .expect("rewrite");
    let got = frames(&out[PREFACE.len()..]);
    let mut server = loona_hpack::Decoder::new();
    let a = fields(&mut server, &got[0].payload);
    let b = fields(&mut server, &got[1].payload);
    assert!(a.contains(&(":authority".into(), "localhost".into())));
    assert!(b.contains(&(":authority".into(), "localhost".into())));
    assert!(b.contains(&(":path".into(), "/runtime.v1.RuntimeService/Status".into())));
}

#[test]
fn valid_authorities_are_kept() {
    for ok in ["localhost", "[::]:50051", "127.0.0.1:10010", "picolet.sock"] {
        let block = encode(&mut loona_hpack::Encoder::new(), &request(ok, "/x"));
        let got = rewritten_frames(&block);
        let f = fields(&mut loona_hpack::Decoder::new(), &got[0].payload);
        assert!(f.contains(&(":authority".into(), ok.into())), "{ok}");
    }
    for bad in ["%2Frun%2Fx.sock", "/run/x.sock", "a b"] {
        assert!(!valid_authority(bad.as_bytes()), "{bad}");
    }
}

#[test]
fn padding_is_dropped_priority_kept_and_continuations_joined() {
    let block = encode(&mut loona_hpack::Encoder::new(), &request("%2Fx", "/y"));
    let (a, b) = block.split_at(block.len() / 2);
    let mut headers = vec![3u8]; // pad length
    headers.extend_from_slice(&[0x80, 0, 0, 1, 15]); // exclusive, depends on 1, weight
    headers.extend_from_slice(a);
    headers.extend_from_slice(&[0, 0, 0]);
    let out = rewrite(&with_preface(&[
        frame(
            TYPE_HEADERS,
            FLAG_PADDED | FLAG_PRIORITY | FLAG_END_STREAM,
            5,
            &headers,
        ),
        frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 5, b),
    ]))
    .expect("rewrite");
    let got = frames(&out[PREFACE.len()..]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].frame_type, TYPE_HEADERS);
    assert_eq!(
        got[0].flags,
        FLAG_PRIORITY | FLAG_END_STREAM | FLAG_END_HEADERS
    );
    assert_eq!(got[0].payload[..5], [0x80, 0, 0, 1, 15]);
    let f = fields(&mut loona_hpack::Decoder::new(), &got[0].payload[5..]);
    assert!(f.contains(&(":authority".into(), "localhost".into())));
    assert!(f.contains(&(":path".into(), "/y".into())));
}

#[test]
fn a_block_larger_than_a_frame_is_cut_into_continuations() {
    let mut req = request("%2Fx", "/y");
    req.push(("x-big", "v".repeat(40_000)));
    let block = encode(&mut loona_hpack::Encoder::new(), &req);
    let got = rewritten_frames(&block);
    assert!(got.len() >= 3, "{} frames", got.len());
    assert_eq!(got[0].frame_type, TYPE_HEADERS);
    assert_eq!(got[0].flags & FLAG_END_HEADERS, 0);
    assert!(
        got[1..]
            .iter()
            .all(|f| f.frame_type == TYPE_CONTINUATION && f.stream == 1)
    );
    assert!(got.iter().all(|f| f.payload.len() <= MAX_FRAME));
    assert_eq!(got.last().map(|f| f.flags), Some(FLAG_END_HEADERS));
    let joined: Vec<u8> = got.iter().flat_map(|f| f.payload.clone()).collect();
    let f = fields(&mut loona_hpack::Decoder::new(), &joined);
    assert!(f.contains(&("x-big".into(), "v".repeat(40_000))));
}

#[test]
fn bad_input_closes_the_connection_with_a_reason() {
    let block = encode(&mut loona_hpack::Encoder::new(), &request("%2Fx", "/y"));
    // A DATA frame in the middle of a header block.
    let err = refused(&[frame(TYPE_HEADERS, 0, 1, &block), frame(0, 0, 1, b"x")]);
    assert!(
        matches!(err, RewriteError::InterruptedBlock { open: 1, .. }),
        "{err}"
    );
    // CONTINUATION with nothing open.
    let err = refused(&[frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &block)]);
    assert!(
        matches!(err, RewriteError::StrayContinuation { stream: 1 }),
        "{err}"
    );
    // Padding longer than the frame.
    let err = refused(&[frame(
        TYPE_HEADERS,
        FLAG_PADDED | FLAG_END_HEADERS,
        1,
        &[9, 1],
    )]);
    assert!(
        matches!(err, RewriteError::BadHeadersFrame { stream: 1 }),
        "{err}"
    );
    // An index past both tables.
    let err = refused(&[frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        &[0xff, 0x80, 0x01],
    )]);
    assert!(
        matches!(err, RewriteError::Hpack { stream: 1, .. }),
        "{err}"
    );
    // A dynamic table larger than HTTP/2's initial 4096 bytes (size update to 8192).
    let err = refused(&[frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        &[0x3f, 0xe1, 0x3f, 0x82],
    )]);
    assert!(
        matches!(err, RewriteError::Hpack { stream: 1, .. }),
        "{err}"
    );
}

#[test]
fn header_blocks_are_bounded_before_they_are_buffered() {
    // Only the frame header of a 16 MiB - 1 HEADERS frame arrives: refused at
    // once, not after buffering it.
    let mut input = PREFACE.to_vec();
    input.extend_from_slice(&[0xff, 0xff, 0xff, TYPE_HEADERS, 0, 0, 0, 0, 1]);
    let err = rewrite(&input).expect_err("too large");
    assert!(
        matches!(err, RewriteError::BlockTooLarge { stream: 1 }),
        "{err}"
    );
    // Many CONTINUATIONs that add up past the bound.
    let mut r = Rewriter::default();
    r.feed(&with_preface(&[frame(TYPE_HEADERS, 0, 1, &[0x82])]))
        .expect("open");
    let piece = frame(TYPE_CONTINUATION, 0, 1, &vec![0x82; MAX_FRAME]);
    let mut result = Ok(());
    for _ in 0..=(MAX_HEADER_BLOCK / MAX_FRAME) {
        result = r.feed(&piece);
        if result.is_err() {
            break;
        }
    }
    assert!(matches!(
        result,
        Err(RewriteError::BlockTooLarge { stream: 1 })
    ));
}

#[test]
fn references_to_a_large_entry_cannot_inflate_a_block() {
    // One 4,000-byte value into the client's table, then 1,000 one-byte
    // references to it: 4 MB decoded from a 4 KB block.
    let mut block = vec![0x40, 0x01, b'x', 0x7f];
    let mut len = 4_000 - 0x7f;
    while len >= 0x80 {
        block.push((len & 0x7f) as u8 | 0x80);
        len >>= 7;
    }
    block.push(len as u8);
    block.extend(std::iter::repeat_n(b'v', 4_000));
    block.extend(std::iter::repeat_n(0x80 | 62, 1_000));
    let err = refused(&[frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &block)]);
    assert!(
        matches!(err, RewriteError::ListTooLarge { stream: 1 }),
        "{err}"
    );
}

#[test]
fn data_frames_are_not_buffered_whole() {
    let mut r = Rewriter::default();
    let mut head = PREFACE.to_vec();
    head.extend_from_slice(&[0, 0x40, 0, 0, 0, 0, 0, 0, 1]); // DATA, 16 KiB
    r.feed(&head).expect("header");
    r.feed(&[7; 100]).expect("part of the payload");
    assert_eq!(r.output().len(), head.len() + 100, "passed on as it comes");
    assert!(r.pending.is_empty());
}

#[test]
fn what_is_not_http2_passes_untouched() {
    let input = b"GET / HTTP/1.1\r\nHost: %2Fx\r\n\r\n";
    assert_eq!(rewrite(input).expect("rewrite"), input);
}

#[tokio::test]
async fn the_socket_wrapper_reads_the_rewritten_stream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client, server) = tokio::io::duplex(64);
    let mut conn = AuthorityFix::new(server);
    let writer = tokio::spawn(async move {
        client.write_all(CRICTL_VERSION).await.expect("write");
        client.shutdown().await.expect("shutdown");
        client
    });
    let mut got = Vec::new();
    conn.read_to_end(&mut got).await.expect("read");
    writer.await.expect("writer");
    assert_eq!(got, rewrite(CRICTL_VERSION).expect("rewrite"));
}

#[test]
fn garbage_header_blocks_are_errors_not_panics() {
    // A small xorshift generator: the same 200,000 blocks every run (a
    // panic here would abort the shim: release builds use panic = "abort").
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut errors = 0;
    for _ in 0..200_000 {
        let len = (next() % 64) as usize;
        let block: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let input = with_preface(&[frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &block)]);
        if rewrite(&input).is_err() {
            errors += 1;
        }
    }
    assert!(
        errors > 100_000,
        "most random blocks are invalid HPACK: {errors}"
    );
}
