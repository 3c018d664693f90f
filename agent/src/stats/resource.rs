//! `/metrics/resource`: what metrics-server scrapes, kubelet's STABLE
//! names, from the same snapshot as `/metrics/cadvisor`. Pure.

use crate::metrics::{Family, Kind, Labels};
use crate::stats::cadvisor::{Entry, Snapshot, secs};

/// `/metrics/resource` (what metrics-server scrapes), kubelet's names,
/// help texts and labels: node, pod and container CPU and working set,
/// container start times, `resource_scrape_error`.
pub fn render(snap: &Snapshot) -> Vec<Family> {
    let ts = Some(snap.timestamp_ms);
    let mut entries: Vec<&Entry> = snap.entries.iter().collect();
    entries.sort_by(|a, b| a.labels.cmp(&b.labels));
    let containers: Vec<&Entry> = entries
        .iter()
        .copied()
        .filter(|e| !e.labels.container.is_empty())
        .collect();
    let pods: Vec<&Entry> = entries
        .iter()
        .copied()
        .filter(|e| e.labels.container.is_empty() && !e.labels.pod.is_empty())
        .collect();
    let root = entries.iter().find(|e| e.labels.id == "/");
    let container = |e: &Entry| {
        Labels::new(vec![
            ("container", e.labels.container.clone()),
            ("namespace", e.labels.namespace.clone()),
            ("pod", e.labels.pod.clone()),
        ])
    };
    let pod = |e: &Entry| {
        Labels::new(vec![
            ("namespace", e.labels.namespace.clone()),
            ("pod", e.labels.pod.clone()),
        ])
    };
    let family = |name,
                  kind,
                  help,
                  of: &[&Entry],
                  labels: &dyn Fn(&Entry) -> Labels,
                  v: fn(&Entry) -> f64| {
        let mut f = Family::new(name, kind, help);
        for e in of {
            f.push(labels(e), v(e), ts);
        }
        f
    };
    let mut out = vec![
        family(
            "container_cpu_usage_seconds_total",
            Kind::Counter,
            "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
            &containers,
            &container,
            |e| secs(e.stats.cpu.usage_ns),
        ),
        family(
            "container_memory_working_set_bytes",
            Kind::Gauge,
            "[STABLE] Current working set of the container in bytes",
            &containers,
            &container,
            |e| e.stats.memory.working_set as f64,
        ),
        family(
            "container_start_time_seconds",
            Kind::Gauge,
            "[STABLE] Start time of the container since unix epoch in seconds",
            &containers,
            &container,
            |e| e.start_time,
        ),
    ];
    if let Some(r) = root {
        let node = |_: &Entry| Labels::default();
        out.push(family(
            "node_cpu_usage_seconds_total",
            Kind::Counter,
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
            &[r],
            &node,
            |e| secs(e.stats.cpu.usage_ns),
        ));
        out.push(family(
            "node_memory_working_set_bytes",
            Kind::Gauge,
            "[STABLE] Current working set of the node in bytes",
            &[r],
            &node,
            |e| e.stats.memory.working_set as f64,
        ));
    }
    out.push(family(
        "pod_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        &pods,
        &pod,
        |e| secs(e.stats.cpu.usage_ns),
    ));
    out.push(family(
        "pod_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the pod in bytes",
        &pods,
        &pod,
        |e| e.stats.memory.working_set as f64,
    ));
    let mut error = Family::new(
        "resource_scrape_error",
        Kind::Gauge,
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    error.push(Labels::default(), f64::from(u8::from(root.is_none())), None);
    out.push(error);
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
        let text = crate::metrics::Format::Text.encode(&render(&snap));
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
