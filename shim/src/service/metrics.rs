//! CRI `ListMetricDescriptors` / `ListPodSandboxMetrics`: cAdvisor's
//! metrics, named and labelled as cAdvisor names them, for kubelet's
//! `PodAndContainerStatsFromCRI` mode (kubelet turns each into a Prometheus
//! sample on its /metrics/cadvisor with `float64(value)`).
//!
//! CRI values are unsigned integers: bytes and counts are exact, but the
//! `*_seconds_total` CPU counters can only carry whole seconds — the unit
//! stays right (a dashboard's `rate()` works), the resolution is one second.
//! Use the agent's own `/metrics/cadvisor` for sub-second figures.

use cgroup::stats::Stats;
use cri_proto::v1::{
    ContainerMetrics, Metric, MetricDescriptor, MetricType, PodSandboxMetrics, UInt64Value,
};

use crate::runtime::Runtime;
use crate::state;

/// The labels every series carries, in cAdvisor's order.
const LABELS: [&str; 6] = ["container", "id", "image", "name", "namespace", "pod"];

struct Family {
    name: &'static str,
    help: &'static str,
    counter: bool,
    /// A metric-specific label appended to [`LABELS`] (`cpu`, `interface`).
    extra: Option<&'static str>,
}

const fn f(name: &'static str, help: &'static str, counter: bool) -> Family {
    Family {
        name,
        help,
        counter,
        extra: None,
    }
}

const FAMILIES: &[Family] = &[
    Family {
        name: "container_cpu_usage_seconds_total",
        help: "Cumulative cpu time consumed in seconds.",
        counter: true,
        extra: Some("cpu"),
    },
    f(
        "container_cpu_user_seconds_total",
        "Cumulative user cpu time consumed in seconds.",
        true,
    ),
    f(
        "container_cpu_system_seconds_total",
        "Cumulative system cpu time consumed in seconds.",
        true,
    ),
    f(
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        false,
    ),
    f(
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
        false,
    ),
    f("container_memory_rss", "Size of RSS in bytes.", false),
    f(
        "container_memory_cache",
        "Number of bytes of page cache memory.",
        false,
    ),
    f(
        "container_memory_swap",
        "Container swap usage in bytes.",
        false,
    ),
    f(
        "container_memory_failcnt",
        "Number of memory usage hits limits",
        true,
    ),
    f(
        "container_oom_events_total",
        "Count of out of memory events observed for the container",
        true,
    ),
    f(
        "container_processes",
        "Number of processes running inside the container.",
        false,
    ),
    f(
        "container_spec_memory_limit_bytes",
        "Memory limit for the container.",
        false,
    ),
    Family {
        name: "container_network_receive_bytes_total",
        help: "Cumulative count of bytes received",
        counter: true,
        extra: Some("interface"),
    },
    Family {
        name: "container_network_transmit_bytes_total",
        help: "Cumulative count of bytes transmitted",
        counter: true,
        extra: Some("interface"),
    },
];

/// Every metric this runtime reports.
pub fn descriptors() -> Vec<MetricDescriptor> {
    FAMILIES
        .iter()
        .map(|fam| MetricDescriptor {
            name: fam.name.into(),
            help: fam.help.into(),
            label_keys: LABELS
                .iter()
                .chain(fam.extra.iter())
                .map(|l| l.to_string())
                .collect(),
        })
        .collect()
}

/// The values of one cgroup; `network`: (interface, rx, tx) where the
/// cgroup is the pod's.
pub fn metrics(
    labels: &[String; 6],
    s: &Stats,
    network: &[(String, u64, u64)],
    now: i64,
) -> Vec<Metric> {
    let m = &s.memory;
    let mut out = Vec::new();
    for fam in FAMILIES {
        let mut push = |extra: Option<String>, value: u64| {
            let mut label_values: Vec<String> = labels.to_vec();
            label_values.extend(extra);
            out.push(Metric {
                name: fam.name.into(),
                timestamp: now,
                metric_type: if fam.counter {
                    MetricType::Counter
                } else {
                    MetricType::Gauge
                } as i32,
                label_values,
                value: Some(UInt64Value { value }),
            });
        };
        match fam.name {
            "container_cpu_usage_seconds_total" => {
                push(Some("total".into()), s.cpu.usage_ns / 1_000_000_000)
            }
            "container_cpu_user_seconds_total" => push(None, s.cpu.user_ns / 1_000_000_000),
            "container_cpu_system_seconds_total" => push(None, s.cpu.system_ns / 1_000_000_000),
            "container_memory_usage_bytes" => push(None, m.usage),
            "container_memory_working_set_bytes" => push(None, m.working_set),
            "container_memory_rss" => push(None, m.rss),
            "container_memory_cache" => push(None, m.cache),
            "container_memory_swap" => push(None, m.swap),
            "container_memory_failcnt" => push(None, m.failcnt),
            "container_oom_events_total" => push(None, m.oom_kill),
            "container_processes" => push(None, s.pids.current),
            "container_spec_memory_limit_bytes" => push(None, m.limit.unwrap_or(0)),
            "container_network_receive_bytes_total" => {
                for (i, rx, _) in network {
                    push(Some(i.clone()), *rx);
                }
            }
            "container_network_transmit_bytes_total" => {
                for (i, _, tx) in network {
                    push(Some(i.clone()), *tx);
                }
            }
            _ => {}
        }
    }
    out
}

impl Runtime {
    /// `ListPodSandboxMetrics`: every ready sandbox, its pod cgroup and its
    /// running containers.
    pub fn list_pod_sandbox_metrics(&self) -> Vec<PodSandboxMetrics> {
        let sandboxes = self.ready_sandboxes();
        let containers = self.all_containers();
        let Some(h) = crate::host::cgroupfs::hierarchy() else {
            return Vec::new();
        };
        let now = state::now_nanos();
        sandboxes
            .iter()
            .map(|sb| {
                let meta = sb.config.metadata.clone().unwrap_or_default();
                let parent = crate::runtime::stats::cgroup_parent(sb);
                let running = self.running_in(&containers, &sb.id);
                let network: Vec<(String, u64, u64)> =
                    crate::runtime::stats::pod_network(sb, &running, &self.pins)
                        .iter()
                        .map(|n| (n.name.clone(), n.rx_bytes, n.tx_bytes))
                        .collect();
                let pod_level = if parent.is_empty() {
                    Vec::new()
                } else {
                    h.stats(&parent)
                        .map(|s| {
                            let labels = [
                                String::new(),
                                parent.clone(),
                                String::new(),
                                String::new(),
                                meta.namespace.clone(),
                                meta.name.clone(),
                            ];
                            metrics(&labels, &s, &network, now)
                        })
                        .unwrap_or_default()
                };
                let container_metrics = running
                    .iter()
                    .filter_map(|c| {
                        let s = h.stats(&c.cgroup)?;
                        let labels = [
                            c.config
                                .metadata
                                .as_ref()
                                .map(|m| m.name.clone())
                                .unwrap_or_default(),
                            c.cgroup.clone(),
                            c.config
                                .image
                                .as_ref()
                                .map(|i| i.image.clone())
                                .unwrap_or_default(),
                            c.id.clone(),
                            meta.namespace.clone(),
                            meta.name.clone(),
                        ];
                        Some(ContainerMetrics {
                            container_id: c.id.clone(),
                            metrics: metrics(&labels, &s, &[], now),
                        })
                    })
                    .collect();
                PodSandboxMetrics {
                    pod_sandbox_id: sb.id.clone(),
                    metrics: pod_level,
                    container_metrics,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_and_values_line_up() {
        let d = descriptors();
        assert_eq!(d.len(), FAMILIES.len());
        let cpu = d
            .iter()
            .find(|d| d.name == "container_cpu_usage_seconds_total")
            .expect("cpu");
        assert_eq!(
            cpu.label_keys,
            [
                "container",
                "id",
                "image",
                "name",
                "namespace",
                "pod",
                "cpu"
            ]
        );
        let mut s = Stats::default();
        s.cpu.usage_ns = 2_600_000_000;
        s.memory.working_set = 4096;
        let labels: [String; 6] =
            ["c", "/k/p/c1", "busybox", "c1", "default", "p"].map(String::from);
        let ms = metrics(&labels, &s, &[("eth0".into(), 10, 20)], 7);
        let get = |n: &str| ms.iter().filter(|m| m.name == n).collect::<Vec<_>>();
        let c = get("container_cpu_usage_seconds_total");
        assert_eq!(
            c[0].value.as_ref().map(|v| v.value),
            Some(2),
            "whole seconds"
        );
        assert_eq!(c[0].label_values.last().map(String::as_str), Some("total"));
        assert_eq!(c[0].metric_type, MetricType::Counter as i32);
        let ws = get("container_memory_working_set_bytes");
        assert_eq!(ws[0].value.as_ref().map(|v| v.value), Some(4096));
        assert_eq!(ws[0].metric_type, MetricType::Gauge as i32);
        let rx = get("container_network_receive_bytes_total");
        assert_eq!(rx[0].label_values.len(), 7);
        // Every metric's labels match its descriptor's keys.
        for m in &ms {
            let desc = d.iter().find(|d| d.name == m.name).expect("descriptor");
            assert_eq!(m.label_values.len(), desc.label_keys.len(), "{}", m.name);
        }
    }
}
