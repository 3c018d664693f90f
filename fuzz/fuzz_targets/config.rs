//! The config file (KubeletConfiguration plus picolet's section).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = edge_config::Config::parse(text, std::path::Path::new("/etc/picolet/config.yaml"));
    }
});
