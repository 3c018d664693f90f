//! `/metrics/resource`: what metrics-server scrapes, kubelet's STABLE
//! names, from the same snapshot as `/metrics/cadvisor`. Pure.

use std::fmt::Write;

use crate::metrics::{escape, header};
use crate::stats::cadvisor::{Entry, Snapshot, secs};

/// `/metrics/resource` (what metrics-server scrapes), kubelet's names,
/// help texts and labels: node, pod and container CPU and working set,
/// container start times, `resource_scrape_error`.
pub fn render(snap: &Snapshot) -> String {
    let mut out = String::new();
    let ts = snap.timestamp_ms;
    let mut entries: Vec<&Entry> = snap.entries.iter().collect();
    entries.sort_by(|a, b| a.labels.cmp(&b.labels));
    let containers: Vec<&&Entry> = entries
        .iter()
        .filter(|e| !e.labels.container.is_empty())
        .collect();
    let pods: Vec<&&Entry> = entries
        .iter()
        .filter(|e| e.labels.container.is_empty() && !e.labels.pod.is_empty())
        .collect();
    let root = entries.iter().find(|e| e.labels.id == "/");
    let cl = |e: &Entry| {
        format!(
            "container=\"{}\",namespace=\"{}\",pod=\"{}\"",
            escape(&e.labels.container),
            escape(&e.labels.namespace),
            escape(&e.labels.pod)
        )
    };
    let pl = |e: &Entry| {
        format!(
            "namespace=\"{}\",pod=\"{}\"",
            escape(&e.labels.namespace),
            escape(&e.labels.pod)
        )
    };
    header(
        &mut out,
        "container_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    );
    for e in &containers {
        let _ = writeln!(
            out,
            "container_cpu_usage_seconds_total{{{}}} {} {ts}",
            cl(e),
            secs(e.stats.cpu.usage_ns)
        );
    }
    header(
        &mut out,
        "container_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the container in bytes",
    );
    for e in &containers {
        let _ = writeln!(
            out,
            "container_memory_working_set_bytes{{{}}} {} {ts}",
            cl(e),
            e.stats.memory.working_set
        );
    }
    header(
        &mut out,
        "container_start_time_seconds",
        "gauge",
        "[STABLE] Start time of the container since unix epoch in seconds",
    );
    for e in &containers {
        let _ = writeln!(
            out,
            "container_start_time_seconds{{{}}} {} {ts}",
            cl(e),
            e.start_time
        );
    }
    if let Some(r) = root {
        header(
            &mut out,
            "node_cpu_usage_seconds_total",
            "counter",
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
        );
        let _ = writeln!(
            out,
            "node_cpu_usage_seconds_total {} {ts}",
            secs(r.stats.cpu.usage_ns)
        );
        header(
            &mut out,
            "node_memory_working_set_bytes",
            "gauge",
            "[STABLE] Current working set of the node in bytes",
        );
        let _ = writeln!(
            out,
            "node_memory_working_set_bytes {} {ts}",
            r.stats.memory.working_set
        );
    }
    header(
        &mut out,
        "pod_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    );
    for e in &pods {
        let _ = writeln!(
            out,
            "pod_cpu_usage_seconds_total{{{}}} {} {ts}",
            pl(e),
            secs(e.stats.cpu.usage_ns)
        );
    }
    header(
        &mut out,
        "pod_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the pod in bytes",
    );
    for e in &pods {
        let _ = writeln!(
            out,
            "pod_memory_working_set_bytes{{{}}} {} {ts}",
            pl(e),
            e.stats.memory.working_set
        );
    }
    header(
        &mut out,
        "resource_scrape_error",
        "gauge",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    let _ = writeln!(out, "resource_scrape_error {}", u8::from(root.is_none()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cadvisor::Labels;

    #[test]
    fn resource_metrics_as_kubelet_names_them() {
        let mut c = Entry {
            labels: Labels {
                container: "web".into(),
                id: "/kubepods/podu/c1".into(),
                namespace: "default".into(),
                pod: "p".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        c.stats.cpu.usage_ns = 2_000_000_000;
        c.stats.memory.working_set = 100;
        let mut p = Entry {
            labels: Labels {
                id: "/kubepods/podu".into(),
                namespace: "default".into(),
                pod: "p".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        p.stats.memory.working_set = 150;
        let mut r = Entry::default();
        r.labels.id = "/".into();
        r.stats.cpu.usage_ns = 5_000_000_000;
        let snap = Snapshot {
            entries: vec![c, p, r],
            timestamp_ms: 7,
            ..Default::default()
        };
        let text = render(&snap);
        for want in [
            "container_cpu_usage_seconds_total{container=\"web\",namespace=\"default\",pod=\"p\"} 2 7\n",
            "container_memory_working_set_bytes{container=\"web\",namespace=\"default\",pod=\"p\"} 100 7\n",
            "node_cpu_usage_seconds_total 5 7\n",
            "pod_memory_working_set_bytes{namespace=\"default\",pod=\"p\"} 150 7\n",
            "resource_scrape_error 0\n",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
    }
}
