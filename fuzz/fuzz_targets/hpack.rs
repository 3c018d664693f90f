//! The CRI socket's `:authority` rewriter (HTTP/2 frames, HPACK blocks
//! decoded with the client's dynamic table and written again), fed what a
//! client could send, cut into three reads at any two points.
//!
//! Input: two bytes for each cut (big endian, modulo the stream's length),
//! then the client's byte stream (seeds start with the HTTP/2 preface).
//! Checked: any error is typed, never a panic; the cuts change nothing
//! (same output, same error or none); and what the server reads is already
//! fixed: rewriting it again gives the same bytes and replaces nothing.
#![no_main]

use cri_proto::authority::Rewriter;

/// Feeds `parts` in order; the output and whether a feed failed.
fn run(parts: &[&[u8]]) -> (Vec<u8>, bool, u64) {
    let mut r = Rewriter::default();
    for p in parts {
        if r.feed(p).is_err() {
            return (std::mem::take(r.output()), true, r.rewritten());
        }
    }
    (std::mem::take(r.output()), false, r.rewritten())
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [a0, a1, b0, b1, stream @ ..] = data else {
        return;
    };
    let cut = |hi: u8, lo: u8| usize::from(u16::from_be_bytes([hi, lo])) % (stream.len() + 1);
    let (mut c1, mut c2) = (cut(*a0, *a1), cut(*b0, *b1));
    if c1 > c2 {
        std::mem::swap(&mut c1, &mut c2);
    }

    let (whole, whole_failed, whole_rewritten) = run(&[stream]);
    let (split, split_failed, split_rewritten) =
        run(&[&stream[..c1], &stream[c1..c2], &stream[c2..]]);
    assert_eq!(
        whole_failed, split_failed,
        "cut at {c1} and {c2}: one way failed, the other did not"
    );
    assert!(whole == split, "cut at {c1} and {c2}: a different output");
    assert_eq!(whole_rewritten, split_rewritten, "cut at {c1} and {c2}");

    if !whole_failed {
        // The server's view is plain literals with valid authorities: a
        // second pass keeps every byte and rewrites nothing.
        let (again, failed, rewritten) = run(&[&whole]);
        assert!(!failed, "the rewriter's own output is refused");
        assert_eq!(
            rewritten, 0,
            "the rewriter's own output has a bad :authority"
        );
        assert!(again == whole, "rewriting the output changed it");
    }
});
