//! Prometheus text exposition (format 0.0.4) of the agent's metrics, with
//! kubelet's names, help texts and labels. Pure.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use crate::mutex::lock;

/// The labels of `prober_probe_total`, as kubelet sets them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProbeLabels {
    pub probe_type: &'static str,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
}

/// Probe counts by labels and `result`.
pub type ProbeCounts = BTreeMap<(ProbeLabels, &'static str), u64>;

/// Probe durations by labels without `pod_uid` (kubelet's label set for
/// the histogram), with the pod UID that owns the series.
pub type ProbeDurations = BTreeMap<ProbeLabels, (String, Histogram)>;

/// Escapes a label value: backslash, double quote and newline.
pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Writes `# HELP` and `# TYPE` lines.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes one sample; labels in the order given.
pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// `/metrics/probes`.
pub fn probes(counts: &ProbeCounts, durations: &ProbeDurations) -> String {
    let mut out = String::new();
    if !durations.is_empty() {
        header(
            &mut out,
            "prober_probe_duration_seconds",
            "histogram",
            "[ALPHA] Duration in seconds for a probe response.",
        );
        for (l, (_, h)) in durations {
            h.write(
                &mut out,
                "prober_probe_duration_seconds",
                &[
                    ("container", &l.container),
                    ("namespace", &l.namespace),
                    ("pod", &l.pod),
                    ("probe_type", l.probe_type),
                ],
            );
        }
    }
    header(
        &mut out,
        "prober_probe_total",
        "counter",
        "[ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
    );
    for ((l, result), n) in counts {
        sample(
            &mut out,
            "prober_probe_total",
            &[
                ("container", &l.container),
                ("namespace", &l.namespace),
                ("pod", &l.pod),
                ("pod_uid", &l.pod_uid),
                ("probe_type", l.probe_type),
                ("result", result),
            ],
            *n as f64,
        );
    }
    out
}

/// Prometheus' default buckets (kubelet's PLEG relist histogram).
pub const DEFAULT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// kubelet_pod_start_duration_seconds' buckets.
pub const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];
/// kubelet_runtime_operations_duration_seconds' buckets
/// (ExponentialBuckets(.005, 2.5, 14)).
pub const RUNTIME_OP_BUCKETS: &[f64] = &[
    0.005,
    0.0125,
    0.03125,
    0.078125,
    0.1953125,
    0.48828125,
    1.220703125,
    3.0517578125,
    7.62939453125,
    19.073486328125,
    47.6837158203125,
    119.20928955078125,
    298.0232238769531,
    745.0580596923828,
];

/// A cumulative histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    buckets: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(buckets: &'static [f64]) -> Self {
        Histogram {
            buckets,
            counts: vec![0; buckets.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        for (i, b) in self.buckets.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    /// Writes the `_bucket`, `_sum` and `_count` samples.
    pub fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        for (b, n) in self.buckets.iter().zip(&self.counts) {
            let le = b.to_string();
            let mut l: Vec<(&str, &str)> = labels.to_vec();
            l.push(("le", &le));
            sample(out, &format!("{name}_bucket"), &l, *n as f64);
        }
        let mut l: Vec<(&str, &str)> = labels.to_vec();
        l.push(("le", "+Inf"));
        sample(out, &format!("{name}_bucket"), &l, self.count as f64);
        sample(out, &format!("{name}_sum"), labels, self.sum);
        sample(out, &format!("{name}_count"), labels, self.count as f64);
    }
}

/// Per CRI operation: latency, count, errors.
#[derive(Debug, Clone)]
struct Op {
    duration: Histogram,
    total: u64,
    errors: u64,
}

/// The agent's own metrics, kubelet's names.
#[derive(Debug)]
pub struct AgentMetrics {
    ops: Mutex<BTreeMap<String, Op>>,
    pleg_relist: Mutex<Histogram>,
    pod_start: Mutex<Histogram>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics {
            ops: Mutex::new(BTreeMap::new()),
            pleg_relist: Mutex::new(Histogram::new(DEFAULT_BUCKETS)),
            pod_start: Mutex::new(Histogram::new(POD_START_BUCKETS)),
        }
    }
}

/// `/runtime.v1.RuntimeService/RunPodSandbox` → `run_podsandbox`, as
/// kubelet's instrumented runtime service names operations.
pub fn operation_type(grpc_path: &str) -> String {
    let method = grpc_path.rsplit('/').next().unwrap_or(grpc_path);
    let method = method.replace("PodSandbox", "Podsandbox");
    let mut out = String::new();
    for (i, ch) in method.chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

impl AgentMetrics {
    pub fn runtime_op(&self, op: &str, took: Duration, failed: bool) {
        let mut ops = lock(&self.ops);
        let e = ops.entry(op.to_string()).or_insert_with(|| Op {
            duration: Histogram::new(RUNTIME_OP_BUCKETS),
            total: 0,
            errors: 0,
        });
        e.duration.observe(took.as_secs_f64());
        e.total += 1;
        if failed {
            e.errors += 1;
        }
    }

    pub fn pleg_relist(&self, took: Duration) {
        lock(&self.pleg_relist).observe(took.as_secs_f64());
    }

    pub fn pod_started(&self, took: Duration) {
        lock(&self.pod_start).observe(took.as_secs_f64());
    }

    /// `/metrics`; `running_pods` and `containers` (state → count) are
    /// read at scrape time.
    pub fn render(&self, running_pods: u64, containers: &BTreeMap<&str, u64>) -> String {
        let mut out = String::new();
        header(
            &mut out,
            "kubelet_pleg_relist_duration_seconds",
            "histogram",
            "[ALPHA] Duration in seconds for relisting pods in PLEG.",
        );
        lock(&self.pleg_relist).write(&mut out, "kubelet_pleg_relist_duration_seconds", &[]);
        header(
            &mut out,
            "kubelet_pod_start_duration_seconds",
            "histogram",
            "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
        );
        lock(&self.pod_start).write(&mut out, "kubelet_pod_start_duration_seconds", &[]);
        header(
            &mut out,
            "kubelet_running_containers",
            "gauge",
            "[ALPHA] Number of containers currently running",
        );
        for (state, n) in containers {
            sample(
                &mut out,
                "kubelet_running_containers",
                &[("container_state", state)],
                *n as f64,
            );
        }
        header(
            &mut out,
            "kubelet_running_pods",
            "gauge",
            "[ALPHA] Number of pods that have a running pod sandbox",
        );
        sample(&mut out, "kubelet_running_pods", &[], running_pods as f64);
        let ops = lock(&self.ops);
        header(
            &mut out,
            "kubelet_runtime_operations_duration_seconds",
            "histogram",
            "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
        );
        for (op, o) in ops.iter() {
            o.duration.write(
                &mut out,
                "kubelet_runtime_operations_duration_seconds",
                &[("operation_type", op)],
            );
        }
        header(
            &mut out,
            "kubelet_runtime_operations_errors_total",
            "counter",
            "[ALPHA] Cumulative number of runtime operation errors by operation type.",
        );
        for (op, o) in ops.iter() {
            sample(
                &mut out,
                "kubelet_runtime_operations_errors_total",
                &[("operation_type", op)],
                o.errors as f64,
            );
        }
        header(
            &mut out,
            "kubelet_runtime_operations_total",
            "counter",
            "[ALPHA] Cumulative number of runtime operations by operation type.",
        );
        for (op, o) in ops.iter() {
            sample(
                &mut out,
                "kubelet_runtime_operations_total",
                &[("operation_type", op)],
                o.total as f64,
            );
        }
        out
    }
}

/// Turns text exposition 0.0.4 into OpenMetrics 1.0 text: counter
/// families are named without `_total` in `# TYPE`/`# HELP` (a counter
/// whose samples lack `_total`, like cAdvisor's `container_memory_failcnt`,
/// becomes `unknown`), sample timestamps go from milliseconds to seconds,
/// and the exposition ends with `# EOF`.
pub fn to_openmetrics(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    // One pass for the counter families (a /metrics/cadvisor page is ~1 MiB:
    // no search of the whole text per family).
    let counters: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let is_counter = |name: &str| counters.contains(name);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
            && kind == "counter"
        {
            match name.strip_suffix("_total") {
                Some(base) => {
                    let _ = writeln!(out, "# TYPE {base} counter");
                }
                None => {
                    let _ = writeln!(out, "# TYPE {name} unknown");
                }
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ")
            && let Some((name, help)) = rest.split_once(' ')
            && let Some(base) = name.strip_suffix("_total")
            && is_counter(name)
        {
            let _ = writeln!(out, "# HELP {base} {help}");
            continue;
        }
        if !line.starts_with('#') {
            // name{labels} value [timestamp_ms]
            let split = line
                .rfind('}')
                .map_or_else(|| line.find(' ').unwrap_or(line.len()), |i| i + 1);
            let (series, rest) = line.split_at(split);
            let mut f = rest.split_whitespace();
            if let (Some(v), Some(ts), None) = (f.next(), f.next(), f.next())
                && let Ok(ms) = ts.parse::<i64>()
            {
                let _ = writeln!(
                    out,
                    "{series} {v} {}.{:03}",
                    ms.div_euclid(1000),
                    ms.rem_euclid(1000)
                );
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("# EOF\n");
    out
}

/// Whether a request's Accept header asks for OpenMetrics.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// The content type of each format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_types_as_kubelet_names_them() {
        assert_eq!(
            operation_type("/runtime.v1.RuntimeService/RunPodSandbox"),
            "run_podsandbox"
        );
        assert_eq!(
            operation_type("/runtime.v1.RuntimeService/ListPodSandbox"),
            "list_podsandbox"
        );
        assert_eq!(
            operation_type("/runtime.v1.RuntimeService/PodSandboxStatus"),
            "podsandbox_status"
        );
        assert_eq!(
            operation_type("/runtime.v1.RuntimeService/ExecSync"),
            "exec_sync"
        );
        assert_eq!(
            operation_type("/runtime.v1.ImageService/ImageFsInfo"),
            "image_fs_info"
        );
    }

    #[test]
    fn histograms_are_cumulative() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(5.0);
        let mut out = String::new();
        h.write(&mut out, "x", &[("op", "a")]);
        assert_eq!(
            out,
            "x_bucket{op=\"a\",le=\"0.1\"} 1\nx_bucket{op=\"a\",le=\"1\"} 2\nx_bucket{op=\"a\",le=\"+Inf\"} 3\n\
             x_sum{op=\"a\"} 5.55\nx_count{op=\"a\"} 3\n"
        );
    }

    #[test]
    fn openmetrics_renames_counter_families_and_ends_with_eof() {
        let text = "# HELP a_total Things.\n# TYPE a_total counter\na_total 1\n# HELP g A gauge.\n# TYPE g gauge\ng 2\n";
        assert_eq!(
            to_openmetrics(text),
            "# HELP a Things.\n# TYPE a counter\na_total 1\n# HELP g A gauge.\n# TYPE g gauge\ng 2\n# EOF\n"
        );
        let text = "# HELP f_failcnt Hits.\n# TYPE f_failcnt counter\nf_failcnt{id=\"a b\"} 3 1700000000123\n";
        assert_eq!(
            to_openmetrics(text),
            "# HELP f_failcnt Hits.\n# TYPE f_failcnt unknown\nf_failcnt{id=\"a b\"} 3 1700000000.123\n# EOF\n"
        );
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
        )));
        assert!(!wants_openmetrics(Some("text/plain")));
    }

    #[test]
    fn probe_counters_render_as_kubelet_does() {
        let l = ProbeLabels {
            probe_type: "Liveness",
            container: "web".into(),
            pod: "p-\"x\"".into(),
            namespace: "default".into(),
            pod_uid: "u1".into(),
        };
        let counts = ProbeCounts::from([((l.clone(), "successful"), 3), ((l, "failed"), 1)]);
        let text = probes(&counts, &ProbeDurations::new());
        assert_eq!(
            text,
            "# HELP prober_probe_total [ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.\n\
             # TYPE prober_probe_total counter\n\
             prober_probe_total{container=\"web\",namespace=\"default\",pod=\"p-\\\"x\\\"\",pod_uid=\"u1\",probe_type=\"Liveness\",result=\"failed\"} 1\n\
             prober_probe_total{container=\"web\",namespace=\"default\",pod=\"p-\\\"x\\\"\",pod_uid=\"u1\",probe_type=\"Liveness\",result=\"successful\"} 3\n"
        );
    }

    #[test]
    fn probe_durations_render_with_kubelets_labels() {
        let l = ProbeLabels {
            probe_type: "Readiness",
            container: "web".into(),
            pod: "p".into(),
            namespace: "default".into(),
            pod_uid: String::new(),
        };
        let mut h = Histogram::new(DEFAULT_BUCKETS);
        h.observe(0.003);
        h.observe(0.2);
        let text = probes(
            &ProbeCounts::new(),
            &ProbeDurations::from([(l, ("u1".into(), h))]),
        );
        assert!(text.starts_with("# HELP prober_probe_duration_seconds [ALPHA] Duration in seconds for a probe response.\n# TYPE prober_probe_duration_seconds histogram\n"));
        assert!(text.contains("prober_probe_duration_seconds_bucket{container=\"web\",namespace=\"default\",pod=\"p\",probe_type=\"Readiness\",le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("prober_probe_duration_seconds_bucket{container=\"web\",namespace=\"default\",pod=\"p\",probe_type=\"Readiness\",le=\"+Inf\"} 2\n"));
        assert!(text.contains("prober_probe_duration_seconds_count{container=\"web\",namespace=\"default\",pod=\"p\",probe_type=\"Readiness\"} 2\n"));
        assert!(!text.contains("pod_uid"));
    }
}
