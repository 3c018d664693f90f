//! `/stats/summary` ([`crate::statsapi::Summary`], kubelet's shape): node
//! and pods with their containers — cpu (with `usageNanoCores` over the
//! time since the previous reading), memory, network, node fs and imagefs,
//! the pids rlimit, pod process counts, container log usage. Built from the
//! same cgroup snapshot as `/metrics/cadvisor`; the assembly is pure.

use std::collections::HashMap;
use std::path::Path;

use crate::stats::cadvisor::{Entry, Snapshot};
use crate::statsapi::{
    ContainerStats, CpuStats, DiskUsage, FsStats, InterfaceStats, MemoryStats, NetworkStats,
    NodeStats, PodReference, PodStats, ProcessStats, RlimitStats, RuntimeStats, Summary,
    VolumeStats,
};
use cgroup::procfs::NetIf;

/// Filesystem figures (`FsStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fs {
    pub capacity: u64,
    pub available: u64,
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

impl Fs {
    /// statvfs of the filesystem holding `path`.
    pub fn of(path: &Path) -> Option<Fs> {
        let s = nix::sys::statvfs::statvfs(path).ok()?;
        let frsize = s.fragment_size() as u64;
        let capacity = s.blocks() as u64 * frsize;
        let free = s.blocks_free() as u64 * frsize;
        Some(Fs {
            capacity,
            available: s.blocks_available() as u64 * frsize,
            used: capacity.saturating_sub(free),
            inodes: s.files() as u64,
            inodes_free: s.files_free() as u64,
        })
    }

    fn stats(&self, time: &str) -> FsStats {
        FsStats {
            time: time.to_string(),
            available_bytes: Some(self.available),
            capacity_bytes: Some(self.capacity),
            used_bytes: Some(self.used),
            inodes_free: Some(self.inodes_free),
            inodes: Some(self.inodes),
            inodes_used: Some(self.inodes.saturating_sub(self.inodes_free)),
        }
    }
}

/// What the summary needs beyond the cgroup snapshot.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    pub node_name: String,
    /// RFC 3339 times.
    pub now: String,
    pub boot_time: String,
    /// By cgroup id: CPU usage rate in nanocores, when known.
    pub nano_cores: HashMap<String, u64>,
    pub node_fs: Option<Fs>,
    pub image_fs: Option<Fs>,
    pub pid_max: u64,
    pub processes: u64,
    /// By pod UID.
    pub pods: HashMap<String, PodInfo>,
    /// By (pod UID, container name): the container's log directory.
    pub logs: HashMap<(String, String), DiskUsage>,
    /// By container ID (the runtime's): the writable layer.
    pub rootfs: HashMap<String, DiskUsage>,
    /// By pod UID: emptyDir volumes.
    pub volumes: HashMap<String, Vec<EmptyDir>>,
}

/// A pod as the summary names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    /// RFC 3339.
    pub start_time: String,
}

/// An emptyDir volume's usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmptyDir {
    pub name: String,
    pub usage: DiskUsage,
    /// tmpfs (`medium: Memory`): memory, not ephemeral storage.
    pub memory: bool,
}

/// Unix seconds as [`rfc3339`] takes them (saturating).
pub fn secs(s: u64) -> i64 {
    i64::try_from(s).unwrap_or(i64::MAX)
}

/// Unix seconds → RFC 3339, as the Kubernetes API writes times.
pub fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| {
            serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t))
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

fn cpu(e: &Entry, x: &Extras) -> CpuStats {
    CpuStats {
        time: x.now.clone(),
        usage_nano_cores: x.nano_cores.get(&e.labels.id).copied(),
        usage_core_nano_seconds: Some(e.stats.cpu.usage_ns),
    }
}

fn memory(e: &Entry, x: &Extras, limit: Option<u64>) -> MemoryStats {
    let m = &e.stats.memory;
    MemoryStats {
        time: x.now.clone(),
        available_bytes: limit.or(m.limit).map(|l| l.saturating_sub(m.working_set)),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: Some(m.rss),
        page_faults: Some(m.pgfault),
        major_page_faults: Some(m.pgmajfault),
    }
}

fn interface(n: &NetIf) -> InterfaceStats {
    InterfaceStats {
        name: n.name.clone(),
        rx_bytes: Some(n.rx_bytes),
        rx_errors: Some(n.rx_errors),
        tx_bytes: Some(n.tx_bytes),
        tx_errors: Some(n.tx_errors),
    }
}

fn network(ifs: &[NetIf], x: &Extras) -> NetworkStats {
    // The default interface: eth0 when there is one (kubelet's choice).
    NetworkStats {
        time: x.now.clone(),
        default: ifs
            .iter()
            .find(|n| n.name == "eth0")
            .or(ifs.first())
            .map(interface),
        interfaces: ifs.iter().map(interface).collect(),
    }
}

/// `FsStats` of the filesystem `fs` (when known) with this usage.
fn usage(fs: Option<Fs>, x: &Extras, u: DiskUsage) -> FsStats {
    FsStats {
        used_bytes: Some(u.bytes),
        inodes_used: Some(u.inodes),
        ..fs.map(|f| f.stats(&x.now)).unwrap_or_else(|| FsStats {
            time: x.now.clone(),
            ..FsStats::default()
        })
    }
}

/// Builds the summary.
pub fn build(snap: &Snapshot, x: &Extras, host_network: &[NetIf]) -> Summary {
    let root = snap.entries.iter().find(|e| e.labels.id == "/");
    let node = NodeStats {
        node_name: x.node_name.clone(),
        start_time: x.boot_time.clone(),
        cpu: root.map(|r| cpu(r, x)),
        memory: root.map(|r| memory(r, x, Some(snap.machine.memory_bytes))),
        network: Some(network(host_network, x)),
        fs: x.node_fs.map(|fs| fs.stats(&x.now)),
        runtime: x.image_fs.map(|fs| RuntimeStats {
            image_fs: Some(fs.stats(&x.now)),
        }),
        rlimit: Some(RlimitStats {
            time: x.now.clone(),
            maxpid: Some(x.pid_max),
            curproc: Some(x.processes),
        }),
    };
    let mut pods = Vec::new();
    let mut uids: Vec<&String> = x.pods.keys().collect();
    uids.sort();
    for uid in uids {
        let PodInfo {
            name,
            namespace,
            start_time,
        } = &x.pods[uid];
        // The pod's cgroup and its containers' entries.
        let (pod_level, mine): (Vec<&Entry>, Vec<&Entry>) = snap
            .entries
            .iter()
            .filter(|e| e.labels.pod == *name && e.labels.namespace == *namespace)
            .partition(|e| e.labels.container.is_empty());
        let pod_cg = pod_level.first();
        let mut containers = Vec::new();
        let mut log_total = DiskUsage::default();
        let mut rootfs_total = DiskUsage::default();
        for e in &mine {
            let logs = x.logs.get(&(uid.clone(), e.labels.container.clone()));
            if let Some(u) = logs {
                log_total.bytes += u.bytes;
                log_total.inodes += u.inodes;
            }
            let rootfs = x.rootfs.get(&e.labels.name);
            if let Some(u) = rootfs {
                rootfs_total.bytes += u.bytes;
                rootfs_total.inodes += u.inodes;
            }
            containers.push(ContainerStats {
                name: e.labels.container.clone(),
                start_time: rfc3339(
                    std::time::Duration::try_from_secs_f64(e.start_time)
                        .map_or(0, |d| secs(d.as_secs())),
                ),
                cpu: Some(cpu(e, x)),
                memory: Some(memory(e, x, None)),
                rootfs: rootfs.map(|&u| usage(x.image_fs, x, u)),
                logs: logs.map(|&u| usage(x.node_fs, x, u)),
            });
        }
        let mut vol_total = DiskUsage::default();
        let mut volume = Vec::new();
        for v in x.volumes.get(uid).into_iter().flatten() {
            // Disk-backed emptyDirs count as ephemeral storage; tmpfs ones
            // are memory (kubelet does the same).
            if !v.memory {
                vol_total.bytes += v.usage.bytes;
                vol_total.inodes += v.usage.inodes;
            }
            volume.push(VolumeStats {
                name: v.name.clone(),
                fs: usage(x.node_fs, x, v.usage),
            });
        }
        // kubelet: rootfs + logs + local (emptyDir) volumes.
        let ephemeral = DiskUsage {
            bytes: log_total.bytes + rootfs_total.bytes + vol_total.bytes,
            inodes: log_total.inodes + rootfs_total.inodes + vol_total.inodes,
        };
        pods.push(PodStats {
            pod_ref: PodReference {
                name: name.clone(),
                namespace: namespace.clone(),
                uid: uid.clone(),
            },
            start_time: start_time.clone(),
            containers,
            cpu: pod_cg.map(|e| cpu(e, x)),
            memory: pod_cg.map(|e| memory(e, x, None)),
            network: pod_cg.map(|e| network(&e.network, x)),
            volume,
            ephemeral_storage: x.node_fs.map(|_| usage(x.node_fs, x, ephemeral)),
            process_stats: pod_cg.map(|_| ProcessStats {
                process_count: Some(mine.iter().map(|c| c.stats.pids.current).sum()),
            }),
        });
    }
    Summary { node, pods }
}

/// Bytes (allocated) and inodes under `dir`.
pub fn du(dir: &Path) -> DiskUsage {
    use std::os::unix::fs::MetadataExt;
    let (mut bytes, mut inodes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            bytes += m.blocks() * 512;
            inodes += 1;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    DiskUsage { bytes, inodes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cadvisor::Labels;

    fn entry(id: &str, container: &str, pod: &str, cpu_ns: u64, ws: u64) -> Entry {
        let mut e = Entry {
            labels: Labels {
                name: id.rsplit('/').next().unwrap_or("").into(),
                id: id.into(),
                container: container.into(),
                pod: pod.into(),
                namespace: if pod.is_empty() { "" } else { "default" }.into(),
                ..Default::default()
            },
            ..Default::default()
        };
        e.stats.cpu.usage_ns = cpu_ns;
        e.stats.memory.working_set = ws;
        e.stats.memory.usage = ws + 10;
        e.stats.pids.current = 2;
        e
    }

    fn du(bytes: u64, inodes: u64) -> DiskUsage {
        DiskUsage { bytes, inodes }
    }

    #[test]
    fn kubelet_summary_shape() {
        let mut snap = Snapshot {
            entries: vec![
                entry("/", "", "", 9_000, 1000),
                entry("/k/podu", "", "p", 5_000, 300),
                entry("/k/podu/c1", "web", "p", 4_000, 200),
            ],
            ..Default::default()
        };
        snap.machine.memory_bytes = 4000;
        snap.entries[2].stats.memory.limit = Some(1000);
        let x = Extras {
            node_name: "edge".into(),
            now: "2026-11-22T00:00:00Z".into(),
            boot_time: "2026-11-21T00:00:00Z".into(),
            nano_cores: HashMap::from([("/k/podu/c1".to_string(), 250_000_000)]),
            node_fs: Some(Fs {
                capacity: 100,
                available: 60,
                used: 40,
                inodes: 10,
                inodes_free: 4,
            }),
            pid_max: 4194304,
            processes: 99,
            pods: HashMap::from([(
                "u".to_string(),
                PodInfo {
                    name: "p".into(),
                    namespace: "default".into(),
                    start_time: "2026-11-21T12:00:00Z".into(),
                },
            )]),
            logs: HashMap::from([(("u".to_string(), "web".to_string()), du(4096, 2))]),
            rootfs: HashMap::from([("c1".to_string(), du(8192, 3))]),
            volumes: HashMap::from([(
                "u".to_string(),
                vec![
                    EmptyDir {
                        name: "cache".into(),
                        usage: du(1024, 1),
                        memory: false,
                    },
                    EmptyDir {
                        name: "shm".into(),
                        usage: du(2048, 1),
                        memory: true,
                    },
                ],
            )]),
            ..Default::default()
        };
        let v = serde_json::to_value(build(&snap, &x, &[])).expect("json");
        assert_eq!(v["node"]["nodeName"], "edge");
        assert_eq!(v["node"]["cpu"]["usageCoreNanoSeconds"], 9_000);
        assert_eq!(v["node"]["memory"]["availableBytes"], 3000);
        assert_eq!(v["node"]["fs"]["inodesUsed"], 6);
        assert_eq!(v["node"]["rlimit"]["curproc"], 99);
        let p = &v["pods"][0];
        assert_eq!(p["podRef"]["uid"], "u");
        assert_eq!(p["memory"]["workingSetBytes"], 300);
        assert_eq!(p["process_stats"]["process_count"], 2);
        assert_eq!(p["ephemeral-storage"]["usedBytes"], 4096 + 8192 + 1024);
        assert_eq!(p["volume"][1]["name"], "shm");
        assert_eq!(p["volume"][1]["usedBytes"], 2048);
        let c = &p["containers"][0];
        assert_eq!(c["name"], "web");
        assert_eq!(c["cpu"]["usageNanoCores"], 250_000_000);
        assert_eq!(c["memory"]["availableBytes"], 800);
        assert_eq!(c["logs"]["usedBytes"], 4096);
        assert_eq!(c["rootfs"]["usedBytes"], 8192);
        assert!(p["cpu"].get("usageNanoCores").is_none(), "no rate yet");
    }
}
