//! One model of a Prometheus exposition — families of samples — and its two
//! encoders: the text format 0.0.4 (what kubelet serves by default) and
//! OpenMetrics 1.0 (what a scraper gets when its Accept header asks for it).
//! Every page the agent serves (`/metrics`, `/metrics/cadvisor`,
//! `/metrics/resource`, `/metrics/probes`) is built as [`Family`]s and
//! encoded once, in the format asked for. Pure.

use std::fmt::Write;
use std::sync::Arc;

use super::Histogram;

/// A family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A metric family: its name, help text, type and samples. A family with
/// no samples still has its `# HELP` and `# TYPE`; a page that leaves such
/// families out (as a Prometheus client leaves out a vector with no
/// children) does not add them.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

impl Family {
    pub fn new(name: &'static str, kind: Kind, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    /// Adds a sample with a number.
    pub fn push(&mut self, labels: Labels, value: f64, timestamp_ms: Option<i64>) {
        self.samples.push(Sample {
            labels,
            value: Value::Number(value),
            timestamp_ms,
        });
    }
}

/// One series' value at a scrape.
#[derive(Debug, Clone)]
pub struct Sample {
    pub labels: Labels,
    pub value: Value,
    /// Unix milliseconds (cAdvisor stamps its samples); none for "now".
    pub timestamp_ms: Option<i64>,
}

#[derive(Debug, Clone)]
pub enum Value {
    Number(f64),
    /// Written as `_bucket` (with `le`), `_sum` and `_count` samples.
    Histogram(Histogram),
}

/// Label pairs many samples carry (a cgroup's six cAdvisor labels, made
/// once per scrape), sorted by name and escaped once.
#[derive(Debug, Clone)]
pub struct SharedLabels(Arc<[(&'static str, String)]>);

impl SharedLabels {
    pub fn new(mut pairs: Vec<(&'static str, String)>) -> Self {
        pairs.sort_by_key(|(k, _)| *k);
        for (_, v) in &mut pairs {
            if needs_escape(v) {
                let mut escaped = String::with_capacity(v.len() + 2);
                escape_into(&mut escaped, v);
                *v = escaped;
            }
        }
        Self(Arc::from(pairs))
    }
}

/// A sample's label pairs, written in name order (as client_golang
/// writes them; a histogram's `le` comes last): those it shares with
/// other samples merged with its own (kept as given, escaped when
/// written).
#[derive(Debug, Clone, Default)]
pub struct Labels {
    shared: Option<SharedLabels>,
    own: Vec<(&'static str, String)>,
}

impl Labels {
    /// A sample's own labels.
    pub fn new(own: Vec<(&'static str, String)>) -> Self {
        Self::shared(None, own)
    }

    /// `shared` and `own`.
    pub fn shared(shared: Option<SharedLabels>, mut own: Vec<(&'static str, String)>) -> Self {
        own.sort_by_key(|(k, _)| *k);
        Self { shared, own }
    }

    fn is_empty(&self) -> bool {
        self.own.is_empty() && self.shared.as_ref().is_none_or(|s| s.0.is_empty())
    }

    /// `k="v",…` in name order.
    fn write(&self, out: &mut String) {
        let shared: &[_] = self.shared.as_ref().map_or(&[], |s| &s.0);
        let (mut i, mut j) = (0, 0);
        while i < shared.len() || j < self.own.len() {
            let take_shared =
                j >= self.own.len() || (i < shared.len() && shared[i].0 <= self.own[j].0);
            if i + j > 0 {
                out.push(',');
            }
            if take_shared {
                let (k, v) = &shared[i];
                i += 1;
                pair(out, k, |out| out.push_str(v));
            } else {
                let (k, v) = &self.own[j];
                j += 1;
                pair(out, k, |out| escape_into(out, v));
            }
        }
    }
}

fn pair(out: &mut String, k: &str, value: impl FnOnce(&mut String)) {
    out.push_str(k);
    out.push_str("=\"");
    value(out);
    out.push('"');
}

fn needs_escape(v: &str) -> bool {
    v.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n'))
}

/// Escapes a label value (backslash, double quote, newline) into `out`.
fn escape_into(out: &mut String, v: &str) {
    if !needs_escape(v) {
        out.push_str(v);
        return;
    }
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// The two formats, their content types and which one a scraper asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text exposition 0.0.4.
    Text,
    /// OpenMetrics 1.0 text: counter families named without `_total` (a
    /// counter whose samples lack it, like cAdvisor's
    /// `container_memory_failcnt`, is `unknown`), timestamps in seconds,
    /// `# EOF` at the end.
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the Accept header names it, else text.
    pub fn negotiate(accept: Option<&str>) -> Self {
        if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The exposition of `families`, in order.
    pub fn encode(self, families: &[Family]) -> String {
        let samples: usize = families.iter().map(|f| f.samples.len()).sum();
        let mut out = String::with_capacity(families.len() * 160 + samples * 200);
        for f in families {
            let (name, kind) = match (self, f.kind) {
                (Format::OpenMetrics, Kind::Counter) => match f.name.strip_suffix("_total") {
                    Some(base) => (base, "counter"),
                    None => (f.name, "unknown"),
                },
                (_, kind) => (f.name, kind.as_str()),
            };
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for s in &f.samples {
                match &s.value {
                    Value::Number(v) => self.line(&mut out, f.name, "", s, None, *v),
                    Value::Histogram(h) => {
                        for (le, n) in h.cumulative() {
                            self.line(&mut out, f.name, "_bucket", s, Some(le), n as f64);
                        }
                        self.line(&mut out, f.name, "_sum", s, None, h.sum());
                        self.line(&mut out, f.name, "_count", s, None, h.count() as f64);
                    }
                }
            }
        }
        if self == Format::OpenMetrics {
            out.push_str("# EOF\n");
        }
        out
    }

    /// `name{labels} value [timestamp]`.
    fn line(
        self,
        out: &mut String,
        name: &str,
        suffix: &str,
        s: &Sample,
        le: Option<f64>,
        value: f64,
    ) {
        out.push_str(name);
        out.push_str(suffix);
        if !s.labels.is_empty() || le.is_some() {
            out.push('{');
            s.labels.write(out);
            if let Some(le) = le {
                if !s.labels.is_empty() {
                    out.push(',');
                }
                out.push_str("le=\"");
                number(out, le);
                out.push('"');
            }
            out.push('}');
        }
        out.push(' ');
        number(out, value);
        if let Some(ms) = s.timestamp_ms {
            let _ = match self {
                Format::Text => write!(out, " {ms}"),
                Format::OpenMetrics => {
                    write!(out, " {}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
                }
            };
        }
        out.push('\n');
    }
}

/// A value as both formats spell it (`+Inf`, not Rust's `inf`).
fn number(out: &mut String, v: f64) {
    let _ = if v.is_nan() {
        write!(out, "NaN")
    } else if v.is_infinite() {
        write!(out, "{}Inf", if v > 0.0 { '+' } else { '-' })
    } else {
        write!(out, "{v}")
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(pairs: &[(&'static str, &str)]) -> Labels {
        Labels::new(pairs.iter().map(|(k, v)| (*k, v.to_string())).collect())
    }

    #[test]
    fn openmetrics_renames_counter_families_and_ends_with_eof() {
        let mut a = Family::new("a_total", Kind::Counter, "Things.");
        a.push(Labels::default(), 1.0, None);
        let mut g = Family::new("g", Kind::Gauge, "A gauge.");
        g.push(Labels::default(), 2.0, None);
        let families = [a, g];
        assert_eq!(
            Format::Text.encode(&families),
            "# HELP a_total Things.\n# TYPE a_total counter\na_total 1\n# HELP g A gauge.\n# TYPE g gauge\ng 2\n"
        );
        assert_eq!(
            Format::OpenMetrics.encode(&families),
            "# HELP a Things.\n# TYPE a counter\na_total 1\n# HELP g A gauge.\n# TYPE g gauge\ng 2\n# EOF\n"
        );
        let mut f = Family::new("f_failcnt", Kind::Counter, "Hits.");
        f.push(own(&[("id", "a b")]), 3.0, Some(1_700_000_000_123));
        assert_eq!(
            Format::Text.encode(std::slice::from_ref(&f)),
            "# HELP f_failcnt Hits.\n# TYPE f_failcnt counter\nf_failcnt{id=\"a b\"} 3 1700000000123\n"
        );
        assert_eq!(
            Format::OpenMetrics.encode(&[f]),
            "# HELP f_failcnt Hits.\n# TYPE f_failcnt unknown\nf_failcnt{id=\"a b\"} 3 1700000000.123\n# EOF\n"
        );
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        assert_eq!(Format::negotiate(None), Format::Text);
    }

    #[test]
    fn labels_are_escaped_and_merged_in_name_order() {
        let shared = SharedLabels::new(vec![("c", "back\\slash\nnl".into()), ("a", "x\"y".into())]);
        let mut f = Family::new("m", Kind::Gauge, "M.");
        f.push(
            Labels::shared(Some(shared), vec![("d", "4".into()), ("b", "2".into())]),
            0.5,
            None,
        );
        f.push(Labels::default(), f64::INFINITY, None);
        f.push(Labels::default(), f64::NAN, None);
        assert_eq!(
            Format::Text.encode(&[f]),
            "# HELP m M.\n# TYPE m gauge\n\
             m{a=\"x\\\"y\",b=\"2\",c=\"back\\\\slash\\nnl\",d=\"4\"} 0.5\nm +Inf\nm NaN\n"
        );
    }

    #[test]
    fn histograms_write_buckets_sum_and_count_in_both_formats() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(5.0);
        let mut f = Family::new("x", Kind::Histogram, "X.");
        f.samples.push(Sample {
            labels: own(&[("op", "a")]),
            value: Value::Histogram(h),
            timestamp_ms: None,
        });
        let body = "x_bucket{op=\"a\",le=\"0.1\"} 1\nx_bucket{op=\"a\",le=\"1\"} 2\nx_bucket{op=\"a\",le=\"+Inf\"} 3\n\
                    x_sum{op=\"a\"} 5.55\nx_count{op=\"a\"} 3\n";
        let families = [f];
        assert_eq!(
            Format::Text.encode(&families),
            format!("# HELP x X.\n# TYPE x histogram\n{body}")
        );
        assert_eq!(
            Format::OpenMetrics.encode(&families),
            format!("# HELP x X.\n# TYPE x histogram\n{body}# EOF\n")
        );
    }
}
