//! picolet's log writer: one event, one line. Names and messages from
//! outside (archive entries, manifest file names, pod fields, plugin
//! output) reach log events as they are; a newline or carriage return in
//! one would forge a log line of its own. Every control character inside
//! an event is written escaped (`\n`, `\r`, `\x1b`...), the event's own
//! final newline kept. On a terminal, ESC stays for the colours.
//! A line that cannot be written is dropped (never a panic: see main).

use std::io::{self, Write};

/// Makes [`Line`] writers to stderr.
pub struct Stderr {
    pub ansi: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Line;
    fn make_writer(&'a self) -> Line {
        Line { ansi: self.ansi }
    }
}

/// Writes one formatted event (the subscriber writes each event with one
/// `write_all`) escaped to stderr.
pub struct Line {
    ansi: bool,
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut err = io::stderr().lock();
        match escape(buf, self.ansi) {
            Some(escaped) => err.write_all(&escaped)?,
            None => err.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// `buf` with its control characters escaped (but a final newline, tabs,
/// and with `ansi` ESC); None when nothing needs it.
pub fn escape(buf: &[u8], ansi: bool) -> Option<Vec<u8>> {
    let (body, end) = match buf.strip_suffix(b"\n") {
        Some(b) => (b, &b"\n"[..]),
        None => (buf, &b""[..]),
    };
    let bad = |b: u8| (b < 0x20 && b != b'\t' && !(ansi && b == 0x1b)) || b == 0x7f;
    if !body.iter().any(|&b| bad(b)) {
        return None;
    }
    let mut out = Vec::with_capacity(buf.len() + 16);
    for &b in body {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b if bad(b) => {
                let _ = write!(out, "\\x{b:02x}");
            }
            b => out.push(b),
        }
    }
    out.extend_from_slice(end);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn control_characters_inside_an_event_are_escaped() {
        let forged = b"WARN bad manifest path=/m/x.yaml\n2026-01-01T00:00:00Z  INFO forged\r\x1b[2K\x07 done\n";
        let out = escape(forged, false).expect("escaped");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "WARN bad manifest path=/m/x.yaml\\n2026-01-01T00:00:00Z  INFO forged\\r\\x1b[2K\\x07 done\n"
        );
        assert_eq!(escape(b"INFO plain\tline \xc3\xa9\n", false), None);
        assert_eq!(
            escape(b"\x1b[32mINFO\x1b[0m x\n", true),
            None,
            "colours on a tty"
        );
        assert_eq!(
            escape(b"\x1b[32mINFO\x1b[0m a\nb\n", true).as_deref(),
            Some(&b"\x1b[32mINFO\x1b[0m a\\nb\n"[..])
        );
    }
}
