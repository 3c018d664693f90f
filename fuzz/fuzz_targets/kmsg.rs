//! /dev/kmsg records and the OOM-kill matcher fed by them, as the OOM
//! watcher reads them: one record per read, in order.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parser = agent::oom::kmsg::OomParser::default();
    for raw in text.split('\0') {
        if let Some(rec) = agent::oom::kmsg::parse_record(raw) {
            let _ = parser.feed(rec.usec, rec.message);
        }
    }
});
