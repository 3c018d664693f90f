//! WebSocket frames as client-go's WebSocket executor sends them
//! (`v5.channel.k8s.io`), and what the channels carry that we parse: the
//! resize channel's terminal sizes and the error channel's status.
//!
//! Input: two bytes for the cut (big endian, modulo the stream's length),
//! then the peer's byte stream. Checked: any error is an error, never a
//! panic; reading in two pieces gives the same frames; every frame
//! encoded again (masked, as a client does, and not) reads back equal;
//! frames join into messages, whose first byte picks the channel as a
//! session does: 4's sizes write and read back as the same sizes, 3's
//! status (v4 JSON or older text) reads, and a v4 status written from it
//! reads back equal.
#![no_main]

use cri_proto::streaming::ws::{self, WsFrame};
use cri_proto::streaming::{
    Outcome, REMOTECOMMAND_V1, REMOTECOMMAND_V4, Resizes, parse_status, status_message,
};

/// Reads `parts` in order: the frames, then the error if one ended it.
fn read(parts: &[&[u8]]) -> (Vec<WsFrame>, Option<ws::WsError>) {
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    for p in parts {
        buf.extend_from_slice(p);
        loop {
            match ws::decode(&mut buf) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => return (frames, Some(e)),
            }
        }
    }
    (frames, None)
}

fn round_trip(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) {
    let mut wire = Vec::new();
    ws::encode(opcode, payload, mask, &mut wire);
    let got = ws::decode(&mut wire);
    assert!(
        got == Ok(Some((true, opcode, payload.to_vec()))),
        "opcode {opcode}, {} bytes, mask {mask:?}: no round trip",
        payload.len()
    );
    assert!(wire.is_empty(), "bytes left over");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [c0, c1, stream @ ..] = data else {
        return;
    };
    let cut = usize::from(u16::from_be_bytes([*c0, *c1])) % (stream.len() + 1);
    let (frames, error) = read(&[stream]);
    let (split, split_error) = read(&[&stream[..cut], &stream[cut..]]);
    assert!(frames == split, "cut at {cut}: other frames");
    assert_eq!(error, split_error, "cut at {cut}: another outcome");

    let mut resizes = Resizes::default();
    let mut message = Vec::new();
    for (fin, opcode, payload) in &frames {
        round_trip(*opcode, payload, None);
        round_trip(*opcode, payload, Some([c0 ^ 0x5a, *c1, 0xff, 0]));
        // Messages as a session joins them: binary frames and their
        // continuations, up to a final frame.
        if !matches!(*opcode, 0 | 2) {
            continue;
        }
        message.extend_from_slice(payload);
        if !fin {
            continue;
        }
        match std::mem::take(&mut message).split_first() {
            Some((4, rest)) => {
                for size in resizes.push(rest) {
                    let back = Resizes::default().push(&size.to_json());
                    assert_eq!(back, vec![size], "a size does not read back");
                }
            }
            Some((3, rest)) => {
                let _ = parse_status(REMOTECOMMAND_V1, rest);
                let outcome = parse_status(REMOTECOMMAND_V4, rest);
                let again = parse_status(
                    REMOTECOMMAND_V4,
                    &status_message(REMOTECOMMAND_V4, &outcome),
                );
                assert_eq!(again, outcome, "a v4 status does not read back");
                if let Outcome::Exited(code) = outcome {
                    let text = status_message(REMOTECOMMAND_V1, &outcome);
                    assert_eq!(code == 0, text.is_empty());
                }
            }
            _ => {}
        }
    }
});
