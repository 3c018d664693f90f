//! CRI log lines (`<time> <stream> <P|F> <text>`) as `ctl logs` and the
//! agent read them back, and the writer's framing of arbitrary output.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.split('\n') {
        let _ = cri_proto::log::parse_record(line);
    }
    // Whatever a container writes, the writer's lines parse back.
    let mut w = cri_proto::log::LineSplitter::with_max(cri_proto::log::Stream::Stdout, 64);
    let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    let mut out = w.push(data, now);
    out.extend(w.flush(now));
    for line in String::from_utf8_lossy(&out).split_terminator('\n') {
        assert!(
            cri_proto::log::parse_record(line).is_some(),
            "the writer's own line does not parse: {line:?}"
        );
    }
});
