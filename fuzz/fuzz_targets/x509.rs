//! The certificate readers of what the API server and clients send: DER
//! elements, a certificate's validity (from PEM) and subject (CN and O, a
//! client certificate's user and groups), X.509 times.
//!
//! Input: a certificate in DER, or PEM text. Checked: no panic on any of
//! the readers (the input read as DER, as PEM, and wrapped into PEM);
//! every DER element read writes back as itself; every time read within
//! years 0–9999 writes back (UTCTime or GeneralizedTime) as the same
//! instant.
#![no_main]

use agent::certificate::x509;

/// The instants an X.509 time can name (GeneralizedTime has 4 digits for
/// the year): 0000-01-01 to 9999-12-31, in seconds since the epoch.
const YEARS_0_TO_9999: std::ops::Range<i64> = -62_167_219_200..253_402_300_800;

/// Reads every element of `b` and those nested in constructed ones (tag bit
/// 0x20), at most `depth` levels down.
fn walk(mut b: &[u8], depth: u32) {
    while let Some((tag, body, rest)) = x509::read_der(b) {
        let again = x509::der(tag, body);
        assert_eq!(
            x509::read_der(&again),
            Some((tag, body, &[][..])),
            "an element does not write back"
        );
        if let Some(secs) = x509::x509_time(tag, body)
            && YEARS_0_TO_9999.contains(&secs)
        {
            let d = x509::x509_time_der(secs);
            let (t, v, _) = x509::read_der(&d).expect("our own element");
            assert_eq!(x509::x509_time(t, v), Some(secs), "{secs} s");
        }
        if tag & 0x20 != 0 && depth > 0 {
            walk(body, depth - 1);
        }
        b = rest;
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    walk(data, 16);
    let _ = x509::subject(data);
    let _ = x509::validity(data);
    let _ = x509::validity(x509::pem("CERTIFICATE", data).as_bytes());
    for tag in [0x17, 0x18] {
        let _ = x509::x509_time(tag, data);
    }
});
