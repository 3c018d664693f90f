//! End-to-end: what real CRI clients send reaches the real `picolet shim`.
//! The bytes are recorded from the real peer (cri-proto/testdata), since the
//! peers are not packaged: a test that only used our own Rust client would
//! agree with our server whatever it did. Root (the shim).

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::Shim;
use prost::Message;

/// crictl v1.29.0 (grpc-go 1.58.3), `crictl version`: preface, SETTINGS,
/// SETTINGS ack, HEADERS with `:authority: %2Frun%2Fpicolet%2Fpicolet.sock`,
/// DATA (an empty VersionRequest).
const CRICTL_VERSION: &[u8] = include_bytes!("../../cri-proto/testdata/crictl-1.29.0-version.h2");
const PREFACE_LEN: usize = 24;

fn read_frame(s: &mut UnixStream) -> (u8, u8, u32, Vec<u8>) {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).expect("frame header from the shim");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).expect("frame payload");
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    (head[3], head[4], stream, payload)
}

/// The recorded frames: (bytes of the frame, type, flags).
fn recorded_frames() -> Vec<(&'static [u8], u8, u8)> {
    let mut rest = &CRICTL_VERSION[PREFACE_LEN..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        out.push((&rest[..9 + len], rest[3], rest[4]));
        rest = &rest[9 + len..];
    }
    out
}

#[test]
fn crictl_1_29_version_request_is_answered() {
    require_root!();
    let shim = Shim::start();
    let mut s = UnixStream::connect(shim.socket()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // As grpc-go does: preface and SETTINGS, then wait for the server's
    // SETTINGS before the rest (our ack of them, the request).
    let frames = recorded_frames();
    s.write_all(&CRICTL_VERSION[..PREFACE_LEN])
        .expect("preface");
    s.write_all(frames[0].0).expect("settings");
    loop {
        let (t, flags, _, _) = read_frame(&mut s);
        if t == 4 && flags & 1 == 0 {
            break;
        }
    }
    for (bytes, _, _) in &frames[1..] {
        s.write_all(bytes).expect("request");
    }

    let mut decoder = loona_hpack::Decoder::new();
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut body = Vec::new();
    loop {
        let (t, flags, stream, payload) = read_frame(&mut s);
        match (t, stream) {
            (0x3, 1) => panic!(
                "the shim reset crictl's stream: RST_STREAM code {:?}\nshim log:\n{}",
                payload,
                shim.log()
            ),
            (0x7, _) => panic!("GOAWAY {payload:?}\nshim log:\n{}", shim.log()),
            (0x1, 1) => {
                assert!(flags & 0x4 != 0, "response headers fit one frame");
                for (n, v) in decoder.decode(&payload).expect("hpack from h2") {
                    headers.push((
                        String::from_utf8_lossy(&n).into(),
                        String::from_utf8_lossy(&v).into(),
                    ));
                }
                if flags & 0x1 != 0 {
                    break; // trailers end the stream
                }
            }
            (0x0, 1) => body.extend_from_slice(&payload),
            _ => {}
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header(":status"), Some("200"), "{headers:?}");
    assert_eq!(header("grpc-status"), Some("0"), "{headers:?}");
    assert!(body.len() >= 5, "one gRPC message: {body:?}");
    let version = cri_proto::v1::VersionResponse::decode(&body[5..]).expect("VersionResponse");
    assert_eq!(version.runtime_name, "picolet");
    assert_eq!(version.runtime_api_version, "v1");
}
