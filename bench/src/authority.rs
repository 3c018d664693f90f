//! What serving every gRPC client costs per request: crictl v1.29.0's
//! recorded `Version` call (preface, SETTINGS, HEADERS with grpc-go 1.58's
//! percent-encoded authority, DATA) through `cri_proto::authority::Rewriter`,
//! which decodes and re-encodes each header block; beside, in the same run,
//! copying the same bytes without looking at them (what the server read
//! before). Prints p50/p95 per request over N batches of 1,000 (default 200).
//!
//!   cargo run --release -p bench --bin authority-bench [N]

use std::time::Instant;

use cri_proto::authority::Rewriter;

const CRICTL_VERSION: &[u8] = include_bytes!("../../cri-proto/testdata/crictl-1.29.0-version.h2");
const PREFACE_LEN: usize = 24;
const BATCH: u32 = 1_000;

/// Nanoseconds per request for each batch, sorted.
fn measure(batches: usize, mut one: impl FnMut()) -> Vec<f64> {
    let mut out: Vec<f64> = (0..batches)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..BATCH {
                one();
            }
            t.elapsed().as_nanos() as f64 / f64::from(BATCH)
        })
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// The nearest-rank `percent`th value.
fn pct(sorted: &[f64], percent: usize) -> f64 {
    sorted[((sorted.len() - 1) * percent + 50) / 100]
}

fn main() -> anyhow::Result<()> {
    let batches: usize = std::env::args().nth(1).map_or(Ok(200), |s| s.parse())?;
    // One connection, many requests: the preface once, then the frames that
    // follow it again and again (the client's HPACK table keeps evolving, as
    // on a long-lived kubelet connection).
    let frames = &CRICTL_VERSION[PREFACE_LEN..];
    let mut rewriter = Rewriter::default();
    rewriter.feed(&CRICTL_VERSION[..PREFACE_LEN])?;
    rewriter.output().clear();
    let rewrite = measure(batches, || {
        rewriter
            .feed(std::hint::black_box(frames))
            .expect("rewrite");
        std::hint::black_box(rewriter.output()).clear();
    });
    let mut sink = Vec::with_capacity(frames.len());
    let copy = measure(batches, || {
        sink.extend_from_slice(std::hint::black_box(frames));
        std::hint::black_box(&mut sink).clear();
    });
    println!(
        "| per request ({} B in, {BATCH} × {batches}) | p50 | p95 |",
        frames.len()
    );
    println!("|---|---:|---:|");
    for (name, v) in [
        ("authority rewrite", &rewrite),
        ("plain copy (before)", &copy),
    ] {
        println!("| {name} | {:.0} ns | {:.0} ns |", pct(v, 50), pct(v, 95));
    }
    Ok(())
}
