//! `/containerLogs/{namespace}/{pod}/{container}`: a container's log as
//! `kubectl logs` gets it through the API server (kubelet's
//! `getContainerLogs` and `kuberuntime/logs.ReadLogs`): the text of the
//! CRI log file the runtime names, stdout and stderr interleaved, with
//! `tailLines` (`tail`), `sinceSeconds` / `sinceTime`, `timestamps`,
//! `limitBytes`, `previous` (the container's last terminated instance)
//! and `follow` (until the container is no longer running, across a
//! rotation). The file is read in blocks, never whole; `tailLines` keeps
//! only the offsets of the last N records.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The options of one request (`v1.PodLogOptions`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Options {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// Records before this time (ns since the epoch) are left out.
    pub since_ns: Option<i64>,
}

/// How often a followed log is read again.
const FOLLOW_PERIOD: Duration = Duration::from_millis(250);
/// Longest record line read (the runtime splits lines at 16 KiB).
const MAX_LINE: usize = 1 << 20;

/// A query flag that is not a boolean.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a boolean")]
struct NotBoolean(String);

fn flag(v: &str) -> Result<bool, NotBoolean> {
    match v {
        "" | "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(NotBoolean(v.to_string())),
    }
}

/// Parses the query (`now_ns`: for `sinceSeconds`). Err: why it is
/// invalid (the caller answers 422, or 400 when it does not decode).
pub fn parse_query(query: &str, now_ns: i64) -> Result<Options, (u16, String)> {
    let bad = |m: String| (400, m);
    let mut o = Options::default();
    let (mut since_seconds, mut since_time) = (None, None);
    for (k, v) in url_pairs(query) {
        let int = |v: &str| {
            v.parse::<i64>()
                .map_err(|_| bad(format!("{k}: {v:?} is not an integer")))
        };
        match k.as_str() {
            "follow" => o.follow = flag(&v).map_err(|e| bad(e.to_string()))?,
            "previous" => o.previous = flag(&v).map_err(|e| bad(e.to_string()))?,
            "timestamps" => o.timestamps = flag(&v).map_err(|e| bad(e.to_string()))?,
            "tailLines" | "tail" => {
                if v == "all" && k == "tail" {
                    o.tail_lines = None;
                    continue;
                }
                let n = int(&v)?;
                o.tail_lines = Some(
                    u64::try_from(n).map_err(|_| (422, "tailLines: must be >= 0".to_string()))?,
                );
            }
            "limitBytes" => {
                let n = int(&v)?;
                if n < 1 {
                    return Err((422, "limitBytes: must be greater than 0".into()));
                }
                o.limit_bytes = u64::try_from(n).ok();
            }
            "sinceSeconds" => {
                let n = int(&v)?;
                if n < 1 {
                    return Err((422, "sinceSeconds: must be greater than 0".into()));
                }
                since_seconds = Some(n);
            }
            "sinceTime" => {
                since_time = Some(
                    rfc3339_ns(&v)
                        .ok_or_else(|| bad(format!("sinceTime: {v:?} is not RFC 3339")))?,
                );
            }
            // The API server passes the container as a query too.
            _ => {}
        }
    }
    o.since_ns = match (since_seconds, since_time) {
        (Some(_), Some(_)) => {
            return Err((
                422,
                "at most one of sinceTime or sinceSeconds may be specified".into(),
            ));
        }
        (Some(s), None) => Some(now_ns.saturating_sub(s.saturating_mul(1_000_000_000))),
        (None, t) => t,
    };
    Ok(o)
}

/// `k=v` pairs of a query, percent-decoded.
pub fn url_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// A query component as forms encode it: `+` is a space, `%2B` a plus.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// Nanoseconds since the epoch of an RFC 3339 time (`Z` or `±hh:mm`).
pub fn rfc3339_ns(s: &str) -> Option<i64> {
    let t: k8s_openapi::jiff::Timestamp = s.parse().ok()?;
    i64::try_from(t.as_nanosecond()).ok()
}

/// What is written for one record line, or None when it is left out.
pub fn render(line: &str, o: &Options) -> Option<String> {
    let rec = cri_proto::log::parse_record(line)?;
    if let Some(since) = o.since_ns
        && rfc3339_ns(rec.time).is_some_and(|t| t < since)
    {
        return None;
    }
    let mut out = String::with_capacity(rec.text.len() + 40);
    if o.timestamps {
        out.push_str(rec.time);
        out.push(' ');
    }
    out.push_str(rec.text);
    if !rec.partial {
        out.push('\n');
    }
    Some(out)
}

/// The offset in `file` from which its last `n` records start.
pub fn tail_offset(file: &mut impl BufRead, n: u64) -> std::io::Result<u64> {
    let cap = usize::try_from(n).unwrap_or(usize::MAX);
    let mut starts: VecDeque<u64> = VecDeque::new();
    let (mut at, mut line) = (0u64, Vec::new());
    loop {
        line.clear();
        let got = file
            .by_ref()
            .take(u64::try_from(MAX_LINE).unwrap_or(u64::MAX))
            .read_until(b'\n', &mut line)?;
        if got == 0 {
            break;
        }
        if cap > 0 {
            if starts.len() == cap {
                starts.pop_front();
            }
            starts.push_back(at);
        }
        at += u64::try_from(got).unwrap_or(0);
    }
    Ok(if cap == 0 {
        at
    } else {
        starts.front().copied().unwrap_or(at)
    })
}

/// A log being read: the file, where the reader is, what is left of
/// `limitBytes`.
pub struct Reader {
    path: PathBuf,
    file: BufReader<std::fs::File>,
    inode: u64,
    options: Options,
    left: Option<u64>,
    partial: Vec<u8>,
}

impl Reader {
    /// Opens `path` at the place `options` start from.
    pub fn open(path: &Path, options: Options) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        let inode = file.metadata()?.ino();
        let mut file = BufReader::with_capacity(64 << 10, file);
        if let Some(n) = options.tail_lines {
            let at = tail_offset(&mut file, n)?;
            file.seek(SeekFrom::Start(at))?;
        }
        let left = options.limit_bytes;
        Ok(Self {
            path: path.into(),
            file,
            inode,
            options,
            left,
            partial: Vec::new(),
        })
    }

    /// The next block of output (up to ~64 KiB), empty at the end of what
    /// is written so far; None once `limitBytes` is used up.
    pub fn next_block(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        if self.left == Some(0) {
            return Ok(None);
        }
        let mut out = Vec::new();
        while out.len() < (64 << 10) {
            let buf = self.file.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            let (chunk, end) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], i + 1),
                None => (buf, buf.len()),
            };
            let whole = end > chunk.len();
            if self.partial.len() + chunk.len() <= MAX_LINE {
                self.partial.extend_from_slice(chunk);
            }
            self.file.consume(end);
            if !whole {
                // A record being written: wait for the rest of its line.
                continue;
            }
            let line = std::mem::take(&mut self.partial);
            if let Some(text) = render(&String::from_utf8_lossy(&line), &self.options) {
                out.extend_from_slice(text.as_bytes());
            }
        }
        if let Some(left) = self.left.as_mut() {
            let n = u64::try_from(out.len()).unwrap_or(u64::MAX);
            if n >= *left {
                out.truncate(usize::try_from(*left).unwrap_or(usize::MAX));
                *left = 0;
            } else {
                *left -= n;
            }
        }
        Ok(Some(out))
    }

    /// Whether the file at the path is another one now (rotated): the rest
    /// of the old one has been read; read the new one from its start.
    pub fn reopen_if_rotated(&mut self) -> bool {
        let Ok(meta) = std::fs::metadata(&self.path) else {
            return false;
        };
        if meta.ino() == self.inode {
            return false;
        }
        let Ok(file) = std::fs::File::open(&self.path) else {
            return false;
        };
        self.inode = meta.ino();
        self.file = BufReader::with_capacity(64 << 10, file);
        self.partial.clear();
        true
    }

    pub fn period() -> Duration {
        FOLLOW_PERIOD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pairs_decode_as_forms_do() {
        assert_eq!(
            url_pairs("sinceTime=2026-11-26T10%3A00%3A00%2B01%3A00&a+b=c%20d&&flag"),
            [
                ("sinceTime".into(), "2026-11-26T10:00:00+01:00".into()),
                ("a b".into(), "c d".into()),
                ("flag".into(), String::new()),
            ]
        );
    }

    const LOG: &str = "2026-11-26T10:00:00.000000001Z stdout F one\n\
        2026-11-26T10:00:01.5Z stderr F two\n\
        2026-11-26T10:00:02.000000000Z stdout P thr\n\
        2026-11-26T10:00:02.100000000Z stdout F ee\n\
        2026-11-26T10:00:03+01:00 stdout F early\n\
        not a record\n";

    fn read_all(o: Options) -> String {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("0.log");
        std::fs::write(&p, LOG).expect("write");
        let mut r = Reader::open(&p, o).expect("open");
        let mut out = Vec::new();
        while let Some(b) = r.next_block().expect("read") {
            if b.is_empty() {
                break;
            }
            out.extend(b);
        }
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn options_on_a_real_log_file() {
        assert_eq!(read_all(Options::default()), "one\ntwo\nthree\nearly\n");
        let tail = Options {
            tail_lines: Some(3),
            ..Default::default()
        };
        // The last three records: "thr" (partial) "ee", "early", and the
        // line that is no record.
        assert_eq!(read_all(tail), "ee\nearly\n");
        let none = Options {
            tail_lines: Some(0),
            ..Default::default()
        };
        assert_eq!(read_all(none), "");
        let ts = Options {
            timestamps: true,
            tail_lines: Some(5),
            ..Default::default()
        };
        assert!(read_all(ts).starts_with("2026-11-26T10:00:01.5Z two\n"));
        let since = Options {
            since_ns: rfc3339_ns("2026-11-26T10:00:01Z"),
            ..Default::default()
        };
        // "early" is 09:00:03Z.
        assert_eq!(read_all(since), "two\nthree\n");
        let limit = Options {
            limit_bytes: Some(6),
            ..Default::default()
        };
        assert_eq!(read_all(limit), "one\ntw");
    }

    #[test]
    fn queries_as_kubelet_reads_them() {
        let now = rfc3339_ns("2026-11-26T10:00:00Z").expect("now");
        let o = parse_query(
            "follow=true&tailLines=10&timestamps=1&limitBytes=100&previous=false&container=c",
            now,
        )
        .expect("ok");
        assert_eq!(
            o,
            Options {
                follow: true,
                timestamps: true,
                tail_lines: Some(10),
                limit_bytes: Some(100),
                ..Default::default()
            }
        );
        assert_eq!(
            parse_query("sinceSeconds=60", now).expect("ok").since_ns,
            Some(now - 60_000_000_000)
        );
        assert_eq!(
            parse_query("sinceTime=2026-11-26T09%3A00%3A00Z", now)
                .expect("ok")
                .since_ns,
            rfc3339_ns("2026-11-26T09:00:00Z")
        );
        assert_eq!(parse_query("tail=all", now).expect("ok").tail_lines, None);
        assert_eq!(parse_query("tailLines=-1", now).map_err(|e| e.0), Err(422));
        assert_eq!(parse_query("limitBytes=0", now).map_err(|e| e.0), Err(422));
        assert_eq!(
            parse_query("sinceSeconds=1&sinceTime=2026-11-26T09:00:00Z", now).map_err(|e| e.0),
            Err(422)
        );
        assert_eq!(parse_query("tailLines=x", now).map_err(|e| e.0), Err(400));
        assert_eq!(parse_query("follow=maybe", now).map_err(|e| e.0), Err(400));
    }

    #[test]
    fn rfc3339_times() {
        assert_eq!(rfc3339_ns("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_ns("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(rfc3339_ns("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(
            rfc3339_ns("2026-11-26T10:00:00Z"),
            Some(1_795_687_200_000_000_000)
        );
        assert_eq!(rfc3339_ns("yesterday"), None);
        assert_eq!(percent_decode("a%3Ab+c%zz%e2%9c%93"), "a:b c%zz\u{2713}");
    }

    #[test]
    fn a_rotated_file_is_followed_into_the_new_one() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("0.log");
        std::fs::write(&p, "2026-11-26T10:00:00Z stdout F old\n").expect("write");
        let mut r = Reader::open(&p, Options::default()).expect("open");
        assert_eq!(r.next_block().expect("read"), Some(b"old\n".to_vec()));
        assert!(!r.reopen_if_rotated());
        std::fs::rename(&p, dir.path().join("0.log.1")).expect("rotate");
        std::fs::write(&p, "2026-11-26T10:00:01Z stdout F new\n").expect("write");
        assert!(r.reopen_if_rotated());
        assert_eq!(r.next_block().expect("read"), Some(b"new\n".to_vec()));
    }
}
