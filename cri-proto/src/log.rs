//! The CRI container log format, as kubelet and `crictl logs` read it:
//! `<RFC3339Nano> <stdout|stderr> <P|F> <text>\n`. A line longer than the
//! maximum is split into `P` (partial) records ending with one `F` record.

use std::time::SystemTime;

/// containerd's default maximum line size.
pub const MAX_LINE: usize = 16 * 1024;

/// Which stream a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Formats a time as RFC 3339 with nanoseconds in UTC, e.g.
/// `2016-10-06T00:17:09.669794202Z`.
pub fn rfc3339_nano(t: SystemTime) -> String {
    let t = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{t:.9}")
}

/// Splits a stream of bytes into CRI log records. Feed it what a pipe gives;
/// it buffers an unfinished line until its newline, the size limit or `flush`.
#[derive(Debug)]
pub struct LineSplitter {
    stream: Stream,
    pending: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    pub fn new(stream: Stream) -> Self {
        Self::with_max(stream, MAX_LINE)
    }

    /// The stream whose lines this splits.
    pub fn stream(&self) -> Stream {
        self.stream
    }

    pub fn with_max(stream: Stream, max: usize) -> Self {
        Self {
            stream,
            pending: Vec::new(),
            max: max.max(1),
        }
    }

    /// Appends `data`; returns the complete records it finished, formatted.
    pub fn push(&mut self, data: &[u8], now: SystemTime) -> Vec<u8> {
        let mut out = Vec::new();
        let ts = rfc3339_nano(now);
        for &b in data {
            if b == b'\n' {
                self.emit(&mut out, &ts, 'F');
            } else {
                self.pending.push(b);
                if self.pending.len() >= self.max {
                    self.emit(&mut out, &ts, 'P');
                }
            }
        }
        out
    }

    /// Emits what is buffered as a final record (the stream ended).
    pub fn flush(&mut self, now: SystemTime) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.pending.is_empty() {
            self.emit(&mut out, &rfc3339_nano(now), 'F');
        }
        out
    }

    fn emit(&mut self, out: &mut Vec<u8>, ts: &str, tag: char) {
        out.extend_from_slice(format!("{ts} {} {tag} ", self.stream.as_str()).as_bytes());
        out.append(&mut self.pending);
        out.push(b'\n');
    }
}

/// One record of a CRI log file, borrowed from its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub time: &'a str,
    pub stream: Stream,
    /// `P`: the line goes on in the next record.
    pub partial: bool,
    pub text: &'a str,
}

/// Parses one line of a CRI log file (without its newline); `None` when it
/// is not one.
pub fn parse_record(line: &str) -> Option<Record<'_>> {
    let mut it = line.splitn(4, ' ');
    let time = it.next()?;
    let stream = match it.next()? {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        _ => return None,
    };
    let partial = match it.next()? {
        "P" => true,
        "F" => false,
        _ => return None,
    };
    Some(Record {
        time,
        stream,
        partial,
        text: it.next().unwrap_or(""),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn records_parse_back() {
        let r = parse_record("2016-10-06T00:17:09.669794202Z stderr P a b ").expect("record");
        assert_eq!(r.time, "2016-10-06T00:17:09.669794202Z");
        assert_eq!(
            (r.stream, r.partial, r.text),
            (Stream::Stderr, true, "a b ")
        );
        let r = parse_record("t stdout F").expect("empty text");
        assert_eq!((r.stream, r.partial, r.text), (Stream::Stdout, false, ""));
        assert_eq!(parse_record("t stdin F x"), None);
        assert_eq!(parse_record("t stdout X x"), None);
        assert_eq!(parse_record("garbage"), None);
    }

    use super::*;
    use std::time::Duration;

    fn t(nanos: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos)
    }

    #[test]
    fn formats_like_containerd() {
        assert_eq!(
            rfc3339_nano(t(1_475_713_029_669_794_202)),
            "2016-10-06T00:17:09.669794202Z"
        );
        assert_eq!(rfc3339_nano(t(0)), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            rfc3339_nano(t(951_782_400_000_000_000)),
            "2000-02-29T00:00:00.000000000Z"
        );
    }

    #[test]
    fn splits_lines_and_partials() {
        let mut s = LineSplitter::with_max(Stream::Stderr, 4);
        let out = s.push(b"ab\ncdefgh", t(0));
        let text = String::from_utf8(out).expect("utf8");
        let ts = "1970-01-01T00:00:00.000000000Z";
        assert_eq!(text, format!("{ts} stderr F ab\n{ts} stderr P cdef\n"));
        let text = String::from_utf8(s.push(b"i\n", t(0))).expect("utf8");
        assert_eq!(text, format!("{ts} stderr F ghi\n"));
        assert!(s.flush(t(0)).is_empty());
        s.push(b"tal", t(0));
        assert_eq!(
            String::from_utf8(s.flush(t(0))).expect("utf8"),
            format!("{ts} stderr F tal\n")
        );
    }

    #[test]
    fn empty_line_is_a_record() {
        let mut s = LineSplitter::new(Stream::Stdout);
        let text = String::from_utf8(s.push(b"\n", t(0))).expect("utf8");
        assert!(text.ends_with(" stdout F \n"), "{text}");
    }
}
