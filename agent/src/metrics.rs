//! Prometheus text exposition (format 0.0.4) of the agent's metrics, with
//! kubelet's names, help texts and labels. Pure.

use std::collections::BTreeMap;
use std::fmt::Write;

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
pub fn probes(counts: &ProbeCounts) -> String {
    let mut out = String::new();
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let text = probes(&counts);
        assert_eq!(
            text,
            "# HELP prober_probe_total [ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.\n\
             # TYPE prober_probe_total counter\n\
             prober_probe_total{container=\"web\",namespace=\"default\",pod=\"p-\\\"x\\\"\",pod_uid=\"u1\",probe_type=\"Liveness\",result=\"failed\"} 1\n\
             prober_probe_total{container=\"web\",namespace=\"default\",pod=\"p-\\\"x\\\"\",pod_uid=\"u1\",probe_type=\"Liveness\",result=\"successful\"} 3\n"
        );
    }
}
