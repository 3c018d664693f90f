//! `/metrics/cadvisor`: cAdvisor's metric names, help texts, types and
//! labels (`container`, `id`, `image`, `name`, `namespace`, `pod`), read
//! straight from cgroupfs for the node's root cgroup, each pod cgroup and
//! each running container, plus `machine_*`. Rendering is pure; `collect`
//! does the reading.

use cgroup::procfs::NetIf;
use cgroup::stats::{DeviceIo, Stats};

use crate::metrics::{self, Family, Kind};

/// The labels cAdvisor puts on every `container_*` series.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Labels {
    pub container: String,
    /// The cgroup path.
    pub id: String,
    pub image: String,
    /// The runtime's name for it (containerd and picolet: the container ID).
    pub name: String,
    pub namespace: String,
    pub pod: String,
}

/// One cgroup's figures.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    pub labels: Labels,
    pub stats: Stats,
    pub oom_events: u64,
    /// Unix seconds the container started (0: unknown).
    pub start_time: f64,
    /// Interfaces of its network namespace (not for the root cgroup).
    pub network: Vec<NetIf>,
    pub threads: u64,
    pub fds: u64,
    pub sockets: u64,
}

/// What `machine_*` reports.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub cores: u64,
    pub physical_cores: u64,
    pub sockets: u64,
    pub swap_bytes: u64,
    pub memory_bytes: u64,
    pub boot_id: String,
    pub system_uuid: String,
}

/// A scrape's worth of data.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub machine: Machine,
    pub entries: Vec<Entry>,
    /// Unix milliseconds of the reading (sample timestamps, as cAdvisor).
    pub timestamp_ms: i64,
    /// The cgroups could not be read (no hierarchy found).
    pub scrape_error: bool,
}

/// Samples of one family for one entry: (extra labels, value).
type Samples = Vec<(Vec<(&'static str, String)>, f64)>;

type Getter = fn(&Entry) -> Samples;

fn one(v: f64) -> Samples {
    vec![(Vec::new(), v)]
}

pub(crate) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// One sample per block device, for the root and pod cgroups only (as
/// kubelet's cAdvisor reports fs I/O).
fn per_device(e: &Entry, f: fn(&DeviceIo) -> u64) -> Samples {
    if !e.labels.container.is_empty() {
        return Vec::new();
    }
    e.stats
        .io
        .devices
        .iter()
        .map(|((ma, mi), d)| (vec![("device", format!("{ma}:{mi}"))], f(d) as f64))
        .collect()
}

/// One sample per network interface.
/// PSI (cgroup v2 only, as cAdvisor): no sample where the kernel has none.
fn pressure(p: Option<cgroup::stats::Psi>, f: fn(&cgroup::stats::Psi) -> u64) -> Samples {
    p.map(|p| one(f(&p) as f64 / 1e6)).unwrap_or_default()
}

fn per_interface(e: &Entry, f: fn(&NetIf) -> u64) -> Samples {
    e.network
        .iter()
        .map(|n| (vec![("interface", n.name.clone())], f(n) as f64))
        .collect()
}

/// A metric family of `/metrics/cadvisor`, in cAdvisor's wording, and
/// how to read its samples from one cgroup's figures.
struct Metric {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    /// Its samples for one cgroup.
    get: Getter,
}

fn metrics() -> Vec<Metric> {
    vec![
        Metric {
            name: "container_cpu_cfs_periods_total",
            kind: Kind::Counter,
            help: "Number of elapsed enforcement period intervals.",
            get: |e| one(e.stats.cpu.periods as f64),
        },
        Metric {
            name: "container_cpu_cfs_throttled_periods_total",
            kind: Kind::Counter,
            help: "Number of throttled period intervals.",
            get: |e| one(e.stats.cpu.throttled_periods as f64),
        },
        Metric {
            name: "container_cpu_cfs_throttled_seconds_total",
            kind: Kind::Counter,
            help: "Total time duration the container has been throttled.",
            get: |e| one(secs(e.stats.cpu.throttled_ns)),
        },
        Metric {
            name: "container_cpu_system_seconds_total",
            kind: Kind::Counter,
            help: "Cumulative system cpu time consumed in seconds.",
            get: |e| one(secs(e.stats.cpu.system_ns)),
        },
        Metric {
            name: "container_cpu_usage_seconds_total",
            kind: Kind::Counter,
            help: "Cumulative cpu time consumed in seconds.",
            get: |e| {
                vec![(
                    vec![("cpu", "total".to_string())],
                    secs(e.stats.cpu.usage_ns),
                )]
            },
        },
        Metric {
            name: "container_cpu_user_seconds_total",
            kind: Kind::Counter,
            help: "Cumulative user cpu time consumed in seconds.",
            get: |e| one(secs(e.stats.cpu.user_ns)),
        },
        Metric {
            name: "container_file_descriptors",
            kind: Kind::Gauge,
            help: "Number of open file descriptors for the container.",
            get: |e| one(e.fds as f64),
        },
        Metric {
            name: "container_fs_reads_bytes_total",
            kind: Kind::Counter,
            help: "Cumulative count of bytes read",
            get: |e| per_device(e, |d| d.read_bytes),
        },
        Metric {
            name: "container_fs_writes_bytes_total",
            kind: Kind::Counter,
            help: "Cumulative count of bytes written",
            get: |e| per_device(e, |d| d.write_bytes),
        },
        Metric {
            name: "container_memory_cache",
            kind: Kind::Gauge,
            help: "Number of bytes of page cache memory.",
            get: |e| one(e.stats.memory.cache as f64),
        },
        Metric {
            name: "container_memory_failcnt",
            kind: Kind::Counter,
            help: "Number of memory usage hits limits",
            get: |e| one(e.stats.memory.failcnt as f64),
        },
        Metric {
            name: "container_memory_failures_total",
            kind: Kind::Counter,
            help: "Cumulative count of memory allocation failures.",
            get: |e| {
                let m = &e.stats.memory;
                let mut v = Vec::new();
                for scope in ["container", "hierarchy"] {
                    v.push((
                        vec![
                            ("failure_type", "pgfault".to_string()),
                            ("scope", scope.to_string()),
                        ],
                        m.pgfault as f64,
                    ));
                    v.push((
                        vec![
                            ("failure_type", "pgmajfault".to_string()),
                            ("scope", scope.to_string()),
                        ],
                        m.pgmajfault as f64,
                    ));
                }
                v
            },
        },
        Metric {
            name: "container_memory_kernel_usage",
            kind: Kind::Gauge,
            help: "Size of kernel memory allocated in bytes.",
            get: |e| one(e.stats.memory.kernel as f64),
        },
        Metric {
            name: "container_memory_mapped_file",
            kind: Kind::Gauge,
            help: "Size of memory mapped files in bytes.",
            get: |e| one(e.stats.memory.mapped_file as f64),
        },
        Metric {
            name: "container_memory_max_usage_bytes",
            kind: Kind::Gauge,
            help: "Maximum memory usage recorded in bytes",
            get: |e| one(e.stats.memory.max_usage as f64),
        },
        Metric {
            name: "container_memory_rss",
            kind: Kind::Gauge,
            help: "Size of RSS in bytes.",
            get: |e| one(e.stats.memory.rss as f64),
        },
        Metric {
            name: "container_memory_swap",
            kind: Kind::Gauge,
            help: "Container swap usage in bytes.",
            get: |e| one(e.stats.memory.swap as f64),
        },
        Metric {
            name: "container_memory_total_active_file_bytes",
            kind: Kind::Gauge,
            help: "Current total active file in bytes.",
            get: |e| one(e.stats.memory.active_file as f64),
        },
        Metric {
            name: "container_memory_total_inactive_file_bytes",
            kind: Kind::Gauge,
            help: "Current total inactive file in bytes.",
            get: |e| one(e.stats.memory.inactive_file as f64),
        },
        Metric {
            name: "container_memory_usage_bytes",
            kind: Kind::Gauge,
            help: "Current memory usage in bytes, including all memory regardless of when it was accessed",
            get: |e| one(e.stats.memory.usage as f64),
        },
        Metric {
            name: "container_memory_working_set_bytes",
            kind: Kind::Gauge,
            help: "Current working set in bytes.",
            get: |e| one(e.stats.memory.working_set as f64),
        },
        Metric {
            name: "container_network_receive_bytes_total",
            kind: Kind::Counter,
            help: "Cumulative count of bytes received",
            get: |e| per_interface(e, |n| n.rx_bytes),
        },
        Metric {
            name: "container_network_receive_errors_total",
            kind: Kind::Counter,
            help: "Cumulative count of errors encountered while receiving",
            get: |e| per_interface(e, |n| n.rx_errors),
        },
        Metric {
            name: "container_network_receive_packets_dropped_total",
            kind: Kind::Counter,
            help: "Cumulative count of packets dropped while receiving",
            get: |e| per_interface(e, |n| n.rx_dropped),
        },
        Metric {
            name: "container_network_receive_packets_total",
            kind: Kind::Counter,
            help: "Cumulative count of packets received",
            get: |e| per_interface(e, |n| n.rx_packets),
        },
        Metric {
            name: "container_network_transmit_bytes_total",
            kind: Kind::Counter,
            help: "Cumulative count of bytes transmitted",
            get: |e| per_interface(e, |n| n.tx_bytes),
        },
        Metric {
            name: "container_network_transmit_errors_total",
            kind: Kind::Counter,
            help: "Cumulative count of errors encountered while transmitting",
            get: |e| per_interface(e, |n| n.tx_errors),
        },
        Metric {
            name: "container_network_transmit_packets_dropped_total",
            kind: Kind::Counter,
            help: "Cumulative count of packets dropped while transmitting",
            get: |e| per_interface(e, |n| n.tx_dropped),
        },
        Metric {
            name: "container_network_transmit_packets_total",
            kind: Kind::Counter,
            help: "Cumulative count of packets transmitted",
            get: |e| per_interface(e, |n| n.tx_packets),
        },
        Metric {
            name: "container_oom_events_total",
            kind: Kind::Counter,
            help: "Count of out of memory events observed for the container",
            get: |e| one(e.oom_events.max(e.stats.memory.oom_kill) as f64),
        },
        Metric {
            name: "container_pressure_cpu_stalled_seconds_total",
            kind: Kind::Counter,
            help: "Total time duration no tasks in the container could make progress due to CPU congestion.",
            get: |e| pressure(e.stats.pressure.cpu, |p| p.full_us),
        },
        Metric {
            name: "container_pressure_cpu_waiting_seconds_total",
            kind: Kind::Counter,
            help: "Total time duration tasks in the container have waited due to CPU congestion.",
            get: |e| pressure(e.stats.pressure.cpu, |p| p.some_us),
        },
        Metric {
            name: "container_pressure_io_stalled_seconds_total",
            kind: Kind::Counter,
            help: "Total time duration no tasks in the container could make progress due to IO congestion.",
            get: |e| pressure(e.stats.pressure.io, |p| p.full_us),
        },
        Metric {
            name: "container_pressure_io_waiting_seconds_total",
            kind: Kind::Counter,
            help: "Total time duration tasks in the container have waited due to IO congestion.",
            get: |e| pressure(e.stats.pressure.io, |p| p.some_us),
        },
        Metric {
            name: "container_pressure_memory_stalled_seconds_total",
            kind: Kind::Counter,
            help: "Total time duration no tasks in the container could make progress due to memory congestion.",
            get: |e| pressure(e.stats.pressure.memory, |p| p.full_us),
        },
        Metric {
            name: "container_pressure_memory_waiting_seconds_total",
            kind: Kind::Counter,
            help: "Total time duration tasks in the container have waited due to memory congestion.",
            get: |e| pressure(e.stats.pressure.memory, |p| p.some_us),
        },
        Metric {
            name: "container_processes",
            kind: Kind::Gauge,
            help: "Number of processes running inside the container.",
            get: |e| one(e.stats.pids.current as f64),
        },
        Metric {
            name: "container_sockets",
            kind: Kind::Gauge,
            help: "Number of open sockets for the container.",
            get: |e| one(e.sockets as f64),
        },
        Metric {
            name: "container_spec_cpu_period",
            kind: Kind::Gauge,
            help: "CPU period of the container.",
            get: |e| one(e.stats.cpu.spec.period as f64),
        },
        Metric {
            name: "container_spec_cpu_quota",
            kind: Kind::Gauge,
            help: "CPU quota of the container.",
            // cAdvisor only reports a quota that is set.
            get: |e| {
                e.stats
                    .cpu
                    .spec
                    .quota
                    .map(|q| one(q as f64))
                    .unwrap_or_default()
            },
        },
        Metric {
            name: "container_spec_cpu_shares",
            kind: Kind::Gauge,
            help: "CPU share of the container.",
            get: |e| one(e.stats.cpu.spec.shares as f64),
        },
        Metric {
            name: "container_spec_memory_limit_bytes",
            kind: Kind::Gauge,
            help: "Memory limit for the container.",
            get: |e| one(e.stats.memory.limit.unwrap_or(0) as f64),
        },
        Metric {
            name: "container_start_time_seconds",
            kind: Kind::Gauge,
            help: "Start time of the container since unix epoch in seconds.",
            get: |e| one(e.start_time),
        },
        Metric {
            name: "container_threads",
            kind: Kind::Gauge,
            help: "Number of threads running inside the container",
            get: |e| one(e.threads as f64),
        },
        Metric {
            name: "container_threads_max",
            kind: Kind::Gauge,
            help: "Maximum number of threads allowed inside the container, infinity if value is zero",
            get: |e| one(e.stats.pids.limit.unwrap_or(0) as f64),
        },
    ]
}

/// An entry's six labels, escaped once per scrape, in key order.
/// The six labels every `container_*` series carries.
fn shared(l: &Labels) -> metrics::SharedLabels {
    metrics::SharedLabels::new(vec![
        ("container", l.container.clone()),
        ("id", l.id.clone()),
        ("image", l.image.clone()),
        ("name", l.name.clone()),
        ("namespace", l.namespace.clone()),
        ("pod", l.pod.clone()),
    ])
}

/// The page's families: each cAdvisor family with a sample per cgroup
/// (families without any, like PSI on cgroup v1, are left out, as a
/// Prometheus client leaves out a vector with no children), then
/// `container_last_seen`, `machine_*` and the scrape errors.
pub fn render(snap: &Snapshot) -> Vec<Family> {
    let ts = Some(snap.timestamp_ms);
    let mut entries: Vec<&Entry> = snap.entries.iter().collect();
    entries.sort_by(|a, b| a.labels.cmp(&b.labels));
    let labels: Vec<_> = entries.iter().map(|e| shared(&e.labels)).collect();
    let mut out = Vec::new();
    for Metric {
        name,
        kind,
        help,
        get,
    } in metrics()
    {
        let mut f = Family::new(name, kind, help);
        for (e, base) in entries.iter().zip(&labels) {
            for (extra, v) in get(e) {
                f.push(metrics::Labels::shared(Some(base.clone()), extra), v, ts);
            }
        }
        if !f.samples.is_empty() {
            out.push(f);
        }
    }
    let mut seen = Family::new(
        "container_last_seen",
        Kind::Gauge,
        "Last time a container was seen by the exporter",
    );
    for base in &labels {
        let at = (snap.timestamp_ms / 1000) as f64;
        seen.push(
            metrics::Labels::shared(Some(base.clone()), Vec::new()),
            at,
            ts,
        );
    }
    out.push(seen);
    let m = &snap.machine;
    // kubelet's cAdvisor labels machine_* with boot_id and system_uuid.
    let machine = |name, help, v: u64| {
        let mut f = Family::new(name, Kind::Gauge, help);
        let labels = metrics::Labels::new(vec![
            ("boot_id", m.boot_id.clone()),
            ("system_uuid", m.system_uuid.clone()),
        ]);
        f.push(labels, v as f64, None);
        f
    };
    out.extend([
        machine("machine_cpu_cores", "Number of logical CPU cores.", m.cores),
        machine(
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            m.memory_bytes,
        ),
        machine(
            "machine_cpu_physical_cores",
            "Number of physical CPU cores.",
            m.physical_cores,
        ),
        machine("machine_cpu_sockets", "Number of CPU sockets.", m.sockets),
        machine(
            "machine_swap_bytes",
            "Amount of swap memory available on the machine.",
            m.swap_bytes,
        ),
    ]);
    let error = |name, help, failed: bool| {
        let mut f = Family::new(name, Kind::Gauge, help);
        f.push(
            metrics::Labels::default(),
            f64::from(u8::from(failed)),
            None,
        );
        f
    };
    out.push(error(
        "container_scrape_error",
        "1 if there was an error while getting container metrics, 0 otherwise",
        snap.scrape_error,
    ));
    out.push(error(
        "machine_scrape_error",
        "1 if there was an error while getting machine metrics, 0 otherwise.",
        false,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cadvisor_shape() {
        let mut stats = Stats::default();
        stats.cpu.usage_ns = 1_500_000_000;
        stats.memory.working_set = 4096;
        stats.memory.limit = Some(16 << 20);
        stats.memory.oom_kill = 1;
        stats.pressure.cpu = Some(cgroup::stats::Psi {
            some_us: 2_500_000,
            full_us: 500_000,
        });
        let snap = Snapshot {
            machine: Machine {
                cores: 2,
                memory_bytes: 1 << 30,
                boot_id: "b".into(),
                system_uuid: "u".into(),
                ..Default::default()
            },
            entries: vec![
                Entry {
                    labels: Labels {
                        container: "web".into(),
                        id: "/kubepods/podu/c1".into(),
                        image: "busybox:latest".into(),
                        name: "c1".into(),
                        namespace: "default".into(),
                        pod: "p-\"1\"".into(),
                    },
                    stats,
                    oom_events: 0,
                    start_time: 1_700_000_000.0,
                    network: vec![NetIf {
                        name: "eth0".into(),
                        rx_bytes: 10,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                Entry {
                    labels: Labels {
                        id: "/".into(),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            ],
            timestamp_ms: 1_700_000_123_456,
            scrape_error: false,
        };
        let text = crate::metrics::Format::Text.encode(&render(&snap));
        assert!(text.contains(
            "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.\n\
             # TYPE container_cpu_usage_seconds_total counter\n\
             container_cpu_usage_seconds_total{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"} 0 1700000123456\n\
             container_cpu_usage_seconds_total{container=\"web\",cpu=\"total\",id=\"/kubepods/podu/c1\",image=\"busybox:latest\",name=\"c1\",namespace=\"default\",pod=\"p-\\\"1\\\"\"} 1.5 1700000123456\n"
        ), "{text}");
        assert!(text.contains("container_spec_memory_limit_bytes{container=\"web\",id=\"/kubepods/podu/c1\",image=\"busybox:latest\",name=\"c1\",namespace=\"default\",pod=\"p-\\\"1\\\"\"} 16777216 1700000123456\n"));
        assert!(text.contains("container_oom_events_total{container=\"web\","));
        assert!(text.contains("# TYPE container_pressure_cpu_waiting_seconds_total counter\ncontainer_pressure_cpu_waiting_seconds_total{container=\"web\",id=\"/kubepods/podu/c1\",image=\"busybox:latest\",name=\"c1\",namespace=\"default\",pod=\"p-\\\"1\\\"\"} 2.5 1700000123456\n"), "{text}");
        assert!(text.contains("container_pressure_cpu_stalled_seconds_total{container=\"web\",id=\"/kubepods/podu/c1\",image=\"busybox:latest\",name=\"c1\",namespace=\"default\",pod=\"p-\\\"1\\\"\"} 0.5 1700000123456\n"));
        // No PSI for memory and io here: no family at all.
        assert!(!text.contains("container_pressure_memory"));
        assert!(text.contains("} 1 1700000123456\n"));
        assert!(text.contains("machine_cpu_cores{boot_id=\"b\",system_uuid=\"u\"} 2\n"));
        assert!(
            text.contains("container_network_receive_bytes_total{container=\"web\",id=\"/kubepods/podu/c1\",image=\"busybox:latest\",interface=\"eth0\",name=\"c1\",namespace=\"default\",pod=\"p-\\\"1\\\"\"} 10 1700000123456\n"),
            "{text}"
        );
        // Every family has HELP and TYPE once.
        let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        let helps = text.lines().filter(|l| l.starts_with("# HELP ")).count();
        assert_eq!(types, helps);
        // ... and at least one sample: families without any are left out.
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap_or("");
                assert!(
                    lines.get(i + 1).is_some_and(|n| n.starts_with(name)),
                    "{name} has no samples"
                );
            }
        }
        assert!(types > 40, "{types} families");
        assert!(text.contains("\ncontainer_scrape_error 0\n"));
    }
}
