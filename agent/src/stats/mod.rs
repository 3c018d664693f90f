//! Stats, kubelet's `pkg/kubelet/stats` and cAdvisor: one [`Stats`]
//! handle reads cgroupfs, /proc and the pods' directories for
//! `/metrics/cadvisor` ([`cadvisor`]), `/metrics/resource` ([`resource`])
//! and `/stats/summary` ([`summary`]). Rendering is pure; reading is here
//! and in [`cadvisor::collect`].

pub mod cadvisor;
mod collect;
pub mod resource;
pub mod summary;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edge_config::Config;

use crate::cri_config::NodeInfo;
use crate::mutex::lock;
use crate::statsapi::DiskUsage;
use crate::{oom, status};

/// A cgroup's CPU reading: when, usage ns, and the last rate (nanocores).
#[derive(Debug, Clone, Copy)]
struct CpuSample {
    at: Duration,
    usage_ns: u64,
    rate: Option<u64>,
}

/// What the stats read, and the CPU readings between scrapes.
#[derive(Debug)]
pub struct Stats {
    pub config: Arc<Config>,
    pub node: Arc<NodeInfo>,
    pub cgroups: Option<cgroup::Hierarchy>,
    pub statuses: status::Manager,
    pub ooms: oom::Kills,
    /// CPU readings by cgroup id for `usageNanoCores`.
    cpu_samples: Mutex<HashMap<String, CpuSample>>,
    /// The machine's facts, read at the first scrape.
    machine: std::sync::OnceLock<cadvisor::Machine>,
}

/// What a summary reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The node only: root cgroup, filesystems, processes (the signals).
    Node,
    /// Also each pod and running container, without walking the pods'
    /// log and volume directories (their disk usage reads 0).
    Pods,
    /// All of it, as `/stats/summary`.
    PodsAndDisk,
}

impl Stats {
    pub fn new(
        config: Arc<Config>,
        node: Arc<NodeInfo>,
        cgroups: Option<cgroup::Hierarchy>,
        statuses: status::Manager,
        ooms: oom::Kills,
    ) -> Self {
        Self {
            config,
            node,
            cgroups,
            statuses,
            ooms,
            cpu_samples: Mutex::new(HashMap::new()),
            machine: std::sync::OnceLock::new(),
        }
    }

    fn machine(&self) -> &cadvisor::Machine {
        self.machine.get_or_init(|| collect::machine(self))
    }

    /// Reads the root cgroup, each pod cgroup and each running container.
    pub fn collect(&self) -> cadvisor::Snapshot {
        collect::collect(self, true)
    }

    /// `/stats/summary`, given the containers' writable layers (from the
    /// runtime). Reads cgroupfs and walks volume and log directories: call
    /// it off the async workers.
    pub fn summary(&self, rootfs: HashMap<String, DiskUsage>) -> crate::statsapi::Summary {
        self.summary_of(rootfs, Scope::PodsAndDisk)
    }

    /// The summary of `scope`: the eviction manager reads the node's part
    /// every 10 s and the pods' only to rank them.
    pub fn summary_of(
        &self,
        rootfs: HashMap<String, DiskUsage>,
        scope: Scope,
    ) -> crate::statsapi::Summary {
        let pod_disk = scope == Scope::PodsAndDisk;
        let snap = collect::collect(self, scope != Scope::Node);
        let now = crate::clock::now();
        let mut nano_cores = HashMap::new();
        {
            let mut samples = lock(&self.cpu_samples);
            let ids: std::collections::HashSet<&str> =
                snap.entries.iter().map(|e| e.labels.id.as_str()).collect();
            // The pods' samples stay for the next full read (a node-only
            // one has none of them).
            if scope != Scope::Node {
                samples.retain(|id, _| ids.contains(id.as_str()));
            }
            for e in &snap.entries {
                let usage = e.stats.cpu.usage_ns;
                let entry = samples.entry(e.labels.id.clone()).or_insert(CpuSample {
                    at: now,
                    usage_ns: usage,
                    rate: None,
                });
                let dt = now.saturating_sub(entry.at);
                // A rate over at least a second; in between, the last one.
                if dt >= Duration::from_secs(1) {
                    let rate = u128::from(usage.saturating_sub(entry.usage_ns)) * 1_000_000_000
                        / dt.as_nanos().max(1);
                    *entry = CpuSample {
                        at: now,
                        usage_ns: usage,
                        rate: Some(u64::try_from(rate).unwrap_or(u64::MAX)),
                    };
                }
                if let Some(r) = entry.rate {
                    nano_cores.insert(e.labels.id.clone(), r);
                }
            }
        }
        // The first number of a /proc file, whole seconds or units.
        let read_num = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| t.split(['.', ' ', '\n']).next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let now_secs = now.as_secs();
        // Tasks (threads: each takes a pid), as kubelet's rlimit stats: the
        // kernel's count, not a walk of /proc.
        let processes = nix::sys::sysinfo::sysinfo()
            .map(|i| u64::from(i.process_count()))
            .unwrap_or(0);
        let mut pods = HashMap::new();
        let mut logs = HashMap::new();
        let mut volume_stats = HashMap::new();
        let listed = if scope == Scope::Node {
            Vec::new()
        } else {
            self.statuses.pods()
        };
        for p in listed {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let start = p
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| summary::rfc3339(t.0.as_second()))
                .unwrap_or_default();
            pods.insert(
                uid.clone(),
                summary::PodInfo {
                    name: p.metadata.name.clone().unwrap_or_default(),
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    start_time: start,
                },
            );
            if !pod_disk {
                continue;
            }
            let ed = crate::volumes::pod_dir(&self.config.data_dir, &uid)
                .join("volumes")
                .join("kubernetes.io~empty-dir");
            let mut vols = Vec::new();
            for v in p.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
                if let Some(e) = &v.empty_dir {
                    vols.push(summary::EmptyDir {
                        name: v.name.clone(),
                        usage: summary::du(&ed.join(&v.name)),
                        memory: e.medium.as_deref() == Some("Memory"),
                    });
                }
            }
            volume_stats.insert(uid.clone(), vols);
            let dir = crate::cri_config::pod_log_dir(&self.config.pod_logs_dir, &p);
            for c in p.spec.iter().flat_map(|s| s.containers.iter()) {
                logs.insert(
                    (uid.clone(), c.name.clone()),
                    summary::du(&dir.join(&c.name)),
                );
            }
        }
        let x = summary::Extras {
            node_name: self.node.name.clone(),
            now: summary::rfc3339(summary::secs(now_secs)),
            boot_time: summary::rfc3339(summary::secs(
                now_secs.saturating_sub(read_num("/proc/uptime")),
            )),
            nano_cores,
            node_fs: summary::Fs::of(&self.config.data_dir),
            image_fs: summary::Fs::of(&self.config.images_dir),
            pid_max: read_num("/proc/sys/kernel/pid_max"),
            processes,
            pods,
            logs,
            rootfs,
            volumes: volume_stats,
        };
        summary::build(&snap, &x, &cgroup::procfs::net_dev(1))
    }
}
