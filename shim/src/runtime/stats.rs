//! CRI container and pod sandbox stats from cgroupfs (the `cgroup`
//! crate's readers, which the agent's /metrics/cadvisor uses too), procfs
//! (network of the pod's namespace) and the writable layer.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cgroup::procfs::{self, NetIf};
use cri_proto::v1::{
    ContainerAttributes, ContainerStats, ContainerStatsFilter, CpuUsage, FilesystemIdentifier,
    FilesystemUsage, LinuxPodSandboxStats, MemoryUsage, NetworkInterfaceUsage, NetworkUsage,
    PodSandboxAttributes, PodSandboxStats, PodSandboxStatsFilter, ProcessUsage, UInt64Value,
};

use crate::error::Error;
use crate::mutex::lock;
use crate::runtime::Runtime;
use crate::state::{self, ContainerRecord, SandboxRecord};

/// The pod cgroup a sandbox's containers live under ("" when the client
/// gave none).
pub(crate) fn cgroup_parent(sb: &SandboxRecord) -> String {
    sb.config
        .linux
        .as_ref()
        .map(|l| l.cgroup_parent.clone())
        .unwrap_or_default()
}

/// One reading of a cgroup's cumulative CPU time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    at: i64,
    usage_ns: u64,
}

/// Cumulative usage → CRI cpu with the rate since the `last` reading of
/// the same cgroup (which this one replaces); memory as kubelet reads it;
/// and the process count (pids is hierarchical: a pod cgroup counts its
/// containers').
fn cpu_memory(
    cgroup_path: &str,
    now: i64,
    last: &mut Option<CpuSample>,
) -> (Option<CpuUsage>, Option<MemoryUsage>, Option<u64>) {
    let Some(s) = crate::host::cgroupfs::hierarchy().and_then(|h| h.stats(cgroup_path)) else {
        return (None, None, None);
    };
    let usage = s.cpu.usage_ns;
    // usage_nano_cores needs two samples: rate since the last one.
    let nano_cores = last.and_then(|prev| {
        let dt = u128::try_from(now.checked_sub(prev.at)?)
            .ok()
            .filter(|d| *d > 0)?;
        let rate = u128::from(usage.saturating_sub(prev.usage_ns)) * 1_000_000_000 / dt;
        Some(u64::try_from(rate).unwrap_or(u64::MAX))
    });
    *last = Some(CpuSample {
        at: now,
        usage_ns: usage,
    });
    let m = &s.memory;
    (
        Some(CpuUsage {
            timestamp: now,
            usage_core_nano_seconds: u(usage),
            usage_nano_cores: nano_cores.and_then(u),
        }),
        Some(MemoryUsage {
            timestamp: now,
            working_set_bytes: u(m.working_set),
            available_bytes: m.limit.and_then(|l| u(l.saturating_sub(m.working_set))),
            usage_bytes: u(m.usage),
            rss_bytes: u(m.rss),
            page_faults: u(m.pgfault),
            major_page_faults: u(m.pgmajfault),
        }),
        Some(s.pids.current),
    )
}

/// The pod's network counters (the host's for host-network pods): through
/// one of its running processes, else (all its containers exited) on a
/// thread that joined the pod's namespace, as containerd reads them.
pub(crate) fn pod_network(
    sb: &SandboxRecord,
    running: &[&ContainerRecord],
    pins: &crate::runtime::namespaces::PinSpace,
) -> Vec<NetIf> {
    let Some(netns) = &sb.netns else {
        return procfs::net_dev(1);
    };
    if let Some(pid) = running.iter().find_map(|c| c.init_pid) {
        return procfs::net_dev(u32::try_from(pid).unwrap_or(0));
    }
    let text = crate::host::in_netns(&pins.locate(netns), || {
        // /proc/thread-self/net is this thread's namespace, not the process's.
        std::fs::read_to_string("/proc/thread-self/net/dev")
    });
    match text {
        Ok(t) => procfs::parse_net_dev(&t),
        Err(e) => {
            tracing::debug!(sandbox = %sb.id, error = %e, "pod network counters");
            Vec::new()
        }
    }
}

/// CRI network usage of these interfaces: eth0 (else the first) as the
/// default; none without interfaces. Never a usage without a default
/// interface: the kubelet (1.26, with PodAndContainerStatsFromCRI)
/// dereferences it and crashes.
fn network_usage(ifs: &[NetIf], now: i64) -> Option<NetworkUsage> {
    let default = ifs.iter().find(|n| n.name == "eth0").or(ifs.first())?;
    Some(NetworkUsage {
        timestamp: now,
        default_interface: Some(interface(default)),
        interfaces: ifs.iter().map(interface).collect(),
    })
}

fn interface(n: &NetIf) -> NetworkInterfaceUsage {
    NetworkInterfaceUsage {
        name: n.name.clone(),
        rx_bytes: u(n.rx_bytes),
        rx_errors: u(n.rx_errors),
        tx_bytes: u(n.tx_bytes),
        tx_errors: u(n.tx_errors),
    }
}

fn u(value: u64) -> Option<UInt64Value> {
    Some(UInt64Value { value })
}

/// Bytes (allocated blocks) and inodes under a directory, hard links once.
fn disk_usage(dir: &Path) -> (u64, u64) {
    let mut seen = std::collections::HashSet::new();
    let (mut bytes, mut inodes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if seen.insert((m.dev(), m.ino())) {
                bytes += m.blocks() * 512;
                inodes += 1;
            }
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    (bytes, inodes)
}

impl Runtime {
    /// The container's stats; its CPU reading is kept in its entry for the
    /// next rate.
    fn stats_of(&self, rec: &ContainerRecord) -> ContainerStats {
        let now = state::now_nanos();
        let attributes = Some(ContainerAttributes {
            id: rec.id.clone(),
            metadata: rec.config.metadata.clone(),
            labels: rec.config.labels.clone(),
            annotations: rec.config.annotations.clone(),
        });
        let mut last = self.with_entry(&rec.id, |e| e.cpu).flatten();
        let (cpu, memory, _) = cpu_memory(&rec.cgroup, now, &mut last);
        self.with_entry(&rec.id, |e| e.cpu = last);
        let upper = rec.dir.join("upper");
        let (bytes, inodes) = disk_usage(&upper);
        ContainerStats {
            attributes,
            cpu,
            memory,
            writable_layer: Some(FilesystemUsage {
                timestamp: now,
                fs_id: Some(FilesystemIdentifier {
                    mountpoint: upper.display().to_string(),
                }),
                used_bytes: u(bytes),
                inodes_used: u(inodes),
            }),
            swap: None,
        }
    }

    pub fn container_stats(&self, id: &str) -> Result<ContainerStats, Error> {
        Ok(self.stats_of(&self.container(id)?))
    }

    pub fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Vec<ContainerStats> {
        let f = filter.unwrap_or_default();
        let recs: Vec<ContainerRecord> = self
            .all_containers()
            .into_iter()
            .filter(|c| c.matches(&f.id, &f.pod_sandbox_id, &f.label_selector))
            .collect();
        recs.iter()
            .filter(|r| self.state_of(r).0 == cri_proto::v1::ContainerState::ContainerRunning)
            .map(|r| self.stats_of(r))
            .collect()
    }

    /// Ready sandboxes, copied out of the lock.
    pub(crate) fn ready_sandboxes(&self) -> Vec<SandboxRecord> {
        lock(&self.sandboxes)
            .values()
            .map(|e| &e.record)
            .filter(|s| s.ready)
            .cloned()
            .collect()
    }

    /// The running containers of sandbox `id` among `containers`.
    pub(crate) fn running_in<'a>(
        &self,
        containers: &'a [ContainerRecord],
        id: &str,
    ) -> Vec<&'a ContainerRecord> {
        containers
            .iter()
            .filter(|c| {
                c.sandbox_id == id
                    && self.state_of(c).0 == cri_proto::v1::ContainerState::ContainerRunning
            })
            .collect()
    }

    fn sandbox_stats_of(
        &self,
        sb: &SandboxRecord,
        containers: &[ContainerRecord],
    ) -> PodSandboxStats {
        let now = state::now_nanos();
        let parent = cgroup_parent(sb);
        let (cpu, memory, pod_pids) = if parent.is_empty() {
            (None, None, None)
        } else {
            let mut last = lock(&self.sandboxes).get(&sb.id).and_then(|e| e.cpu);
            let usage = cpu_memory(&parent, now, &mut last);
            if let Some(e) = lock(&self.sandboxes).get_mut(&sb.id) {
                e.cpu = last;
            }
            usage
        };
        let running = self.running_in(containers, &sb.id);
        let network = network_usage(&pod_network(sb, &running, &self.pins), now);
        // Without a pod cgroup: each container's count.
        let process_count = pod_pids.unwrap_or_else(|| {
            running
                .iter()
                .filter_map(|c| crate::host::cgroupfs::hierarchy()?.stats(&c.cgroup))
                .map(|s| s.pids.current)
                .sum()
        });
        PodSandboxStats {
            attributes: Some(PodSandboxAttributes {
                id: sb.id.clone(),
                metadata: sb.config.metadata.clone(),
                labels: sb.config.labels.clone(),
                annotations: sb.config.annotations.clone(),
            }),
            linux: Some(LinuxPodSandboxStats {
                cpu,
                memory,
                network,
                process: Some(ProcessUsage {
                    timestamp: now,
                    process_count: u(process_count),
                }),
                containers: running.iter().map(|c| self.stats_of(c)).collect(),
            }),
            windows: None,
        }
    }

    pub fn pod_sandbox_stats(&self, id: &str) -> Result<PodSandboxStats, Error> {
        let sb = self.sandbox(id)?;
        Ok(self.sandbox_stats_of(&sb, &self.all_containers()))
    }

    pub fn list_pod_sandbox_stats(
        &self,
        filter: Option<PodSandboxStatsFilter>,
    ) -> Vec<PodSandboxStats> {
        let f = filter.unwrap_or_default();
        let containers = self.all_containers();
        self.ready_sandboxes()
            .iter()
            .filter(|s| s.id.starts_with(&f.id))
            .filter(|s| {
                f.label_selector
                    .iter()
                    .all(|(k, v)| s.config.labels.get(k) == Some(v))
            })
            .map(|s| self.sandbox_stats_of(s, &containers))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(name: &str, rx: u64) -> NetIf {
        NetIf {
            name: name.into(),
            rx_bytes: rx,
            ..NetIf::default()
        }
    }

    #[test]
    fn network_usage_always_has_a_default_interface_or_is_absent() {
        // A pod with loopback only (parse_net_dev leaves lo out).
        assert_eq!(network_usage(&[], 1), None);
        let u = network_usage(&[nic("net1", 5), nic("eth0", 7)], 1).expect("usage");
        let d = u.default_interface.expect("default interface");
        assert_eq!(
            (d.name.as_str(), d.rx_bytes),
            ("eth0", Some(UInt64Value { value: 7 }))
        );
        assert_eq!(u.interfaces.len(), 2);
        let u = network_usage(&[nic("net1", 5)], 1).expect("usage");
        assert_eq!(u.default_interface.map(|d| d.name), Some("net1".into()));
    }
}
