//! A static pod manifest file: YAML/JSON decoding, strict fields, static
//! pod rules, defaults, validation. Any input: an error, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = agent::config::manifest::parse(
            std::path::Path::new("/etc/picolet/manifests/f.yaml"),
            text,
            "node",
            "2026-01-01T00:00:00Z",
        );
    }
});
