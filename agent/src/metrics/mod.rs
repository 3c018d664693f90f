//! The agent's own metrics (`/metrics`, `/metrics/probes`) with kubelet's
//! names, help texts and labels, as [`exposition`] families. Pure.

pub mod exposition;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::mutex::lock;
pub use exposition::{Family, Format, Kind, Labels, Sample, SharedLabels, Value};

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

/// `/metrics/probes`: kubelet's probe duration histogram (when a probe
/// ran) and counters.
pub fn probes(counts: &ProbeCounts, durations: &ProbeDurations) -> Vec<Family> {
    let mut out = Vec::new();
    if !durations.is_empty() {
        let mut f = Family::new(
            "prober_probe_duration_seconds",
            Kind::Histogram,
            "[ALPHA] Duration in seconds for a probe response.",
        );
        for (l, (_, h)) in durations {
            f.samples.push(Sample {
                labels: Labels::new(vec![
                    ("container", l.container.clone()),
                    ("namespace", l.namespace.clone()),
                    ("pod", l.pod.clone()),
                    ("probe_type", l.probe_type.into()),
                ]),
                value: Value::Histogram(h.clone()),
                timestamp_ms: None,
            });
        }
        out.push(f);
    }
    let mut f = Family::new(
        "prober_probe_total",
        Kind::Counter,
        "[ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
    );
    for ((l, result), n) in counts {
        f.push(
            Labels::new(vec![
                ("container", l.container.clone()),
                ("namespace", l.namespace.clone()),
                ("pod", l.pod.clone()),
                ("pod_uid", l.pod_uid.clone()),
                ("probe_type", l.probe_type.into()),
                ("result", (*result).into()),
            ]),
            *n as f64,
            None,
        );
    }
    out.push(f);
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

    /// Each bucket's upper bound with its cumulative count, `+Inf` last.
    pub fn cumulative(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        let finite = self
            .buckets
            .iter()
            .copied()
            .zip(self.counts.iter().copied());
        finite.chain(std::iter::once((f64::INFINITY, self.count)))
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    pub fn count(&self) -> u64 {
        self.count
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
    /// Static pods put back to their last Ready version, by namespace/name.
    rollbacks: Mutex<BTreeMap<(String, String), u64>>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics {
            ops: Mutex::new(BTreeMap::new()),
            pleg_relist: Mutex::new(Histogram::new(DEFAULT_BUCKETS)),
            pod_start: Mutex::new(Histogram::new(POD_START_BUCKETS)),
            rollbacks: Mutex::new(BTreeMap::new()),
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

    pub fn static_pod_rolled_back(&self, namespace: &str, name: &str) {
        *lock(&self.rollbacks)
            .entry((namespace.to_string(), name.to_string()))
            .or_default() += 1;
    }

    /// `/metrics`; `running_pods` and `containers` (state → count) are
    /// read at scrape time.
    pub fn render(&self, running_pods: u64, containers: &BTreeMap<&str, u64>) -> Vec<Family> {
        let histogram = |name, help, h: &Mutex<Histogram>| Family {
            samples: vec![Sample {
                labels: Labels::default(),
                value: Value::Histogram(lock(h).clone()),
                timestamp_ms: None,
            }],
            ..Family::new(name, Kind::Histogram, help)
        };
        let mut running_containers = Family::new(
            "kubelet_running_containers",
            Kind::Gauge,
            "[ALPHA] Number of containers currently running",
        );
        for (state, n) in containers {
            let labels = Labels::new(vec![("container_state", (*state).into())]);
            running_containers.push(labels, *n as f64, None);
        }
        let mut pods = Family::new(
            "kubelet_running_pods",
            Kind::Gauge,
            "[ALPHA] Number of pods that have a running pod sandbox",
        );
        pods.push(Labels::default(), running_pods as f64, None);
        let ops = lock(&self.ops);
        let by_op = |op: &String| Labels::new(vec![("operation_type", op.clone())]);
        let mut durations = Family::new(
            "kubelet_runtime_operations_duration_seconds",
            Kind::Histogram,
            "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
        );
        let mut errors = Family::new(
            "kubelet_runtime_operations_errors_total",
            Kind::Counter,
            "[ALPHA] Cumulative number of runtime operation errors by operation type.",
        );
        let mut totals = Family::new(
            "kubelet_runtime_operations_total",
            Kind::Counter,
            "[ALPHA] Cumulative number of runtime operations by operation type.",
        );
        for (op, o) in ops.iter() {
            durations.samples.push(Sample {
                labels: by_op(op),
                value: Value::Histogram(o.duration.clone()),
                timestamp_ms: None,
            });
            errors.push(by_op(op), o.errors as f64, None);
            totals.push(by_op(op), o.total as f64, None);
        }
        let mut rollbacks = Family::new(
            "picolet_static_pod_rollbacks_total",
            Kind::Counter,
            "Static pods put back to their last Ready version (picolet.io/rollback-after).",
        );
        for ((ns, name), n) in lock(&self.rollbacks).iter() {
            let labels = Labels::new(vec![("namespace", ns.clone()), ("pod", name.clone())]);
            rollbacks.push(labels, *n as f64, None);
        }
        vec![
            histogram(
                "kubelet_pleg_relist_duration_seconds",
                "[ALPHA] Duration in seconds for relisting pods in PLEG.",
                &self.pleg_relist,
            ),
            histogram(
                "kubelet_pod_start_duration_seconds",
                "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
                &self.pod_start,
            ),
            running_containers,
            pods,
            durations,
            errors,
            totals,
            rollbacks,
        ]
    }
}

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
    fn probe_counters_render_as_kubelet_does() {
        let l = ProbeLabels {
            probe_type: "Liveness",
            container: "web".into(),
            pod: "p-\"x\"".into(),
            namespace: "default".into(),
            pod_uid: "u1".into(),
        };
        let counts = ProbeCounts::from([((l.clone(), "successful"), 3), ((l, "failed"), 1)]);
        let text = Format::Text.encode(&probes(&counts, &ProbeDurations::new()));
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
        let text = Format::Text.encode(&probes(
            &ProbeCounts::new(),
            &ProbeDurations::from([(l, ("u1".into(), h))]),
        ));
        assert!(text.starts_with("# HELP prober_probe_duration_seconds [ALPHA] Duration in seconds for a probe response.\n# TYPE prober_probe_duration_seconds histogram\n"));
        assert!(text.contains("prober_probe_duration_seconds_bucket{container=\"web\",namespace=\"default\",pod=\"p\",probe_type=\"Readiness\",le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("prober_probe_duration_seconds_bucket{container=\"web\",namespace=\"default\",pod=\"p\",probe_type=\"Readiness\",le=\"+Inf\"} 2\n"));
        assert!(text.contains("prober_probe_duration_seconds_count{container=\"web\",namespace=\"default\",pod=\"p\",probe_type=\"Readiness\"} 2\n"));
        assert!(!text.contains("pod_uid"));
    }
}
