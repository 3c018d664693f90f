use super::*;

/// What crictl v1.29.0 (moby/spdystream, Go's zlib with the dictionary)
/// sent after the upgrade of `echo piped-in | crictl exec -i ID sh -c
/// 'cat; echo done; exit 4'`, recorded with strace.
const CRICTL_EXEC_I: &[u8] = include_bytes!("../../../testdata/crictl-1.29.0-exec-i.spdy");
/// `crictl port-forward POD 18082:8080` and one HTTP GET through it.
const CRICTL_PORT_FORWARD: &[u8] =
    include_bytes!("../../../testdata/crictl-1.29.0-port-forward.spdy");

fn decode_all(codec: &mut Codec, bytes: &[u8]) -> Vec<Frame> {
    let mut buf = bytes.to_vec();
    let mut frames = Vec::new();
    while let Some(f) = codec.decode(&mut buf).expect("valid spdy") {
        frames.push(f);
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    frames
}

fn syn(stream: u32, headers: &[(&str, &str)]) -> Frame {
    Frame::SynStream {
        stream,
        fin: false,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
    }
}

#[test]
fn crictl_exec_streams_are_read_with_go_compressed_headers() {
    let frames = decode_all(&mut Codec::new(), CRICTL_EXEC_I);
    assert_eq!(
        frames,
        vec![
            syn(1, &[("streamtype", "error")]),
            syn(3, &[("streamtype", "stdin")]),
            syn(5, &[("streamtype", "stdout")]),
            syn(7, &[("streamtype", "stderr")]),
            Frame::Data {
                stream: 3,
                fin: false,
                data: b"piped-in\n".to_vec()
            },
            Frame::Data {
                stream: 3,
                fin: true,
                data: vec![]
            },
            Frame::RstStream {
                stream: 7,
                status: RST_CANCEL
            },
        ]
    );
}

#[test]
fn crictl_port_forward_pairs_by_request_id() {
    let frames = decode_all(&mut Codec::new(), CRICTL_PORT_FORWARD);
    let syns: Vec<&Frame> = frames
        .iter()
        .filter(|f| matches!(f, Frame::SynStream { .. }))
        .collect();
    assert_eq!(
        syns,
        vec![
            &syn(
                1,
                &[
                    ("streamtype", "error"),
                    ("port", "8080"),
                    ("requestid", "0")
                ]
            ),
            &syn(
                3,
                &[("streamtype", "data"), ("port", "8080"), ("requestid", "0")]
            ),
        ]
    );
    let sent: Vec<u8> = frames
        .iter()
        .filter_map(|f| match f {
            Frame::Data {
                stream: 3, data, ..
            } => Some(data.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(sent.starts_with(b"GET / HTTP/1.0\r\n"), "{sent:?}");
}

#[test]
fn a_header_block_cut_anywhere_waits_for_the_rest() {
    for cut in 0..CRICTL_EXEC_I.len() {
        let mut codec = Codec::new();
        let mut buf = CRICTL_EXEC_I[..cut].to_vec();
        let mut frames = Vec::new();
        while let Some(f) = codec.decode(&mut buf).expect("valid prefix") {
            frames.push(f);
        }
        buf.extend_from_slice(&CRICTL_EXEC_I[cut..]);
        while let Some(f) = codec.decode(&mut buf).expect("valid rest") {
            frames.push(f);
        }
        assert_eq!(frames.len(), 7, "cut at {cut}");
    }
}

#[test]
fn what_we_encode_we_decode() {
    let frames = vec![
        syn(1, &[("streamType", "error"), ("port", "80")]),
        Frame::SynReply {
            stream: 1,
            fin: false,
            headers: vec![],
        },
        Frame::Headers {
            stream: 1,
            fin: true,
            headers: vec![("a".into(), "b\0c".into())],
        },
        Frame::Data {
            stream: 1,
            fin: true,
            data: vec![7; 70_000],
        },
        Frame::Ping(9),
        Frame::RstStream {
            stream: 3,
            status: RST_REFUSED_STREAM,
        },
        Frame::GoAway {
            last_stream: 3,
            status: 0,
        },
    ];
    let (mut tx, mut rx) = (Codec::new(), Codec::new());
    let mut wire = Vec::new();
    for f in &frames {
        tx.encode(f, &mut wire);
    }
    let got = decode_all(&mut rx, &wire);
    // Names go out in lower case, as SPDY requires.
    let mut want = frames.clone();
    want[0] = syn(1, &[("streamtype", "error"), ("port", "80")]);
    assert_eq!(got, want);
}

#[test]
fn our_header_blocks_end_with_a_sync_flush() {
    // Go's inflater hands out a stored block's bytes only when it sees the
    // next block header: without the empty stored block at the end, crictl
    // failed the second SYN_REPLY ("compressed payload size was incorrect").
    let mut c = Codec::new();
    let mut out = Vec::new();
    c.encode(
        &Frame::SynReply {
            stream: 1,
            fin: false,
            headers: vec![],
        },
        &mut out,
    );
    assert_eq!(
        out,
        [
            &[0x80, 3, 0, 2, 0, 0, 0, 24, 0, 0, 0, 1][..],
            &[0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2], // zlib header, SPDY's dictionary
            &[0, 4, 0, 0xfb, 0xff, 0, 0, 0, 0],    // stored block: 0 headers
            &[0, 0, 0, 0xff, 0xff],                // sync flush
        ]
        .concat()
    );
}

#[test]
fn bad_input_is_an_error_never_a_panic() {
    // Oversized frame, bad version, bad zlib header, a header count that
    // lies, and random bytes.
    let mut huge = vec![0x80, 3, 0, 1, 0, 0x20, 0, 0];
    huge.resize(64, 0);
    assert!(Codec::new().decode(&mut huge).is_err());
    let mut v2 = vec![0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1];
    assert!(Codec::new().decode(&mut v2).is_err());
    let mut bad_zlib = vec![0x80, 3, 0, 2, 0, 0, 0, 8, 0, 0, 0, 1, 0x12, 0x34, 0, 0];
    assert!(Codec::new().decode(&mut bad_zlib).is_err());
    let mut lying = Vec::new();
    let mut c = Codec::new();
    c.encode(
        &Frame::SynReply {
            stream: 1,
            fin: false,
            headers: vec![],
        },
        &mut lying,
    );
    // The stored block's content is the count: claim 2^32-1 pairs.
    let n = lying.len();
    lying[n - 9..n - 5].copy_from_slice(&[0xff; 4]);
    assert!(Codec::new().decode(&mut lying).is_err());

    let mut seed = 0x1234_5678_u32;
    for _ in 0..20_000 {
        let mut buf: Vec<u8> = (0..64)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                seed.to_le_bytes()[0]
            })
            .collect();
        buf[0] = 0x80;
        buf[1] = 3;
        buf[5] = 0;
        buf[6] = 0;
        let mut c = Codec::new();
        while let Ok(Some(_)) = c.decode(&mut buf) {}
    }
}

#[test]
fn a_header_block_may_not_inflate_without_bound() {
    // 300 KiB of one byte compresses to ~300 bytes: refused, not inflated.
    let mut z = flate2::Compress::new(flate2::Compression::best(), false);
    let mut block = vec![0u8; 4];
    block.extend(std::iter::repeat_n(b'a', 300 << 10));
    let mut deflated = Vec::with_capacity(4096);
    z.compress_vec(&block, &mut deflated, flate2::FlushCompress::Sync)
        .expect("deflate");
    let mut frame = vec![0x80, 3, 0, 2, 0];
    let len = u32::try_from(4 + 2 + deflated.len()).expect("small");
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.extend_from_slice(&[0, 0, 0, 1, 0x78, 0x01]);
    frame.extend_from_slice(&deflated);
    let e = Codec::new().decode(&mut frame).expect_err("bounded");
    assert!(e.0.contains("inflates past"), "{e}");
}
